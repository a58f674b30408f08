//! What the server answers from: the cluster's Services, EndpointSlices and Namespaces,
//! reduced to the fields DNS needs and indexed by name and by address.
//!
//! Informers write it (rarely); every query reads it (often), under one `RwLock` that
//! writers hold only for the time of a map update.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Service as ApiService;
use k8s_openapi::api::discovery::v1::EndpointSlice as ApiEndpointSlice;
use parking_lot::RwLock;

/// The label an EndpointSlice names its Service with.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The legacy annotation that publishes not-ready endpoints (the specification's _ready_).
pub const TOLERATE_UNREADY_ANNOTATION: &str = "service.alpha.kubernetes.io/tolerate-unready-endpoints";

/// `(namespace, name)`.
pub type Key = (String, String);

/// A Service as DNS sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    pub namespace: String,
    pub name: String,
    pub kind: ServiceKind,
    pub ports: Vec<Port>,
    /// `spec.publishNotReadyAddresses` or the legacy tolerate-unready annotation: every
    /// endpoint counts as ready.
    pub publish_not_ready: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceKind {
    /// A virtual IP per family (`spec.clusterIPs`).
    ClusterIp(Vec<IpAddr>),
    /// `clusterIP: None`: the endpoints' own addresses.
    Headless,
    /// `type: ExternalName`: a CNAME to `spec.externalName`.
    ExternalName(String),
}

/// A port of a Service or of an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// Empty for an unnamed port.
    pub name: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    pub port: u16,
}

/// One EndpointSlice, reduced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    pub service: Key,
    pub ports: Vec<Port>,
    pub endpoints: Vec<Endpoint>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub addresses: Vec<IpAddr>,
    /// `hostname` (set for pods with `hostname` and a `subdomain` naming the Service).
    pub hostname: Option<String>,
    /// `conditions.ready`, nil meaning ready as the API defines it.
    pub ready: bool,
}

impl Service {
    /// The Service's DNS view, or None when it has no DNS records (a ClusterIP Service
    /// whose address is not allocated yet).
    pub fn from_api(svc: &ApiService) -> Option<Service> {
        let namespace = svc.metadata.namespace.clone()?;
        let name = svc.metadata.name.clone()?;
        let spec = svc.spec.as_ref()?;
        let kind = if spec.type_.as_deref() == Some("ExternalName") {
            ServiceKind::ExternalName(spec.external_name.clone().unwrap_or_default())
        } else if spec.cluster_ip.as_deref() == Some("None") {
            ServiceKind::Headless
        } else {
            let ips: Vec<IpAddr> = match &spec.cluster_ips {
                Some(ips) if !ips.is_empty() => ips.iter().filter_map(|s| s.parse().ok()).collect(),
                _ => spec.cluster_ip.iter().filter_map(|s| s.parse().ok()).collect(),
            };
            if ips.is_empty() {
                return None;
            }
            ServiceKind::ClusterIp(ips)
        };
        let ports = spec
            .ports
            .iter()
            .flatten()
            .filter_map(|p| {
                Some(Port {
                    name: p.name.clone().unwrap_or_default(),
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    port: u16::try_from(p.port).ok()?,
                })
            })
            .collect();
        let tolerate = svc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(TOLERATE_UNREADY_ANNOTATION))
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        Some(Service {
            namespace,
            name,
            kind,
            ports,
            publish_not_ready: spec.publish_not_ready_addresses.unwrap_or(false) || tolerate,
        })
    }
}

impl Slice {
    /// The slice's DNS view, or None when it belongs to no Service or holds FQDNs.
    pub fn from_api(slice: &ApiEndpointSlice) -> Option<Slice> {
        let namespace = slice.metadata.namespace.clone()?;
        let service = slice.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)?.clone();
        if slice.address_type == "FQDN" {
            return None;
        }
        let ports = slice
            .ports
            .iter()
            .flatten()
            .filter_map(|p| {
                Some(Port {
                    name: p.name.clone().unwrap_or_default(),
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    port: u16::try_from(p.port?).ok()?,
                })
            })
            .collect();
        let endpoints = slice
            .endpoints
            .iter()
            .map(|e| Endpoint {
                addresses: e.addresses.iter().filter_map(|a| a.parse().ok()).collect(),
                hostname: e.hostname.clone().filter(|h| !h.is_empty()).map(|h| h.to_ascii_lowercase()),
                ready: e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true),
            })
            .filter(|e| !e.addresses.is_empty())
            .collect();
        Some(Slice { service: (namespace, service), ports, endpoints })
    }
}

/// One ready endpoint of a Service with the ports of its slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyEndpoint<'a> {
    pub endpoint: &'a Endpoint,
    pub ports: &'a [Port],
}

impl ReadyEndpoint<'_> {
    /// The specification's _hostname_: the endpoint's own, or one derived from its first
    /// address.
    pub fn hostname(&self) -> String {
        match &self.endpoint.hostname {
            Some(h) => h.clone(),
            None => crate::names::address_hostname(&self.endpoint.addresses[0]),
        }
    }
}

/// The indexed state; read it through [`Cluster::read`].
#[derive(Debug, Default)]
pub struct State {
    namespaces: HashSet<String>,
    services: HashMap<Key, Service>,
    /// Slices by `(namespace, slice name)`.
    slices: HashMap<Key, Slice>,
    /// Slice names per Service.
    service_slices: HashMap<Key, BTreeSet<String>>,
    /// ClusterIP → Service.
    cluster_ips: HashMap<IpAddr, Key>,
    /// Endpoint address → slices holding it.
    endpoint_ips: HashMap<IpAddr, BTreeSet<Key>>,
    /// When anything last changed (seconds since the epoch): the SOA serial.
    serial: u32,
}

impl State {
    pub fn namespace_exists(&self, namespace: &str) -> bool {
        self.namespaces.contains(namespace)
    }

    pub fn service(&self, namespace: &str, name: &str) -> Option<&Service> {
        self.services.get(&(namespace.to_owned(), name.to_owned()))
    }

    /// The Service's ready endpoints (ready by their condition, or all of them when the
    /// Service publishes not-ready addresses), across all of its slices.
    pub fn ready_endpoints<'a>(&'a self, svc: &Service) -> Vec<ReadyEndpoint<'a>> {
        let key = (svc.namespace.clone(), svc.name.clone());
        let Some(names) = self.service_slices.get(&key) else { return Vec::new() };
        let mut out = Vec::new();
        for name in names {
            let Some(slice) = self.slices.get(&(svc.namespace.clone(), name.clone())) else { continue };
            for endpoint in &slice.endpoints {
                if endpoint.ready || svc.publish_not_ready {
                    out.push(ReadyEndpoint { endpoint, ports: &slice.ports });
                }
            }
        }
        out
    }

    /// The Service whose ClusterIP is `ip`.
    pub fn service_by_cluster_ip(&self, ip: &IpAddr) -> Option<&Service> {
        self.cluster_ips.get(ip).and_then(|k| self.services.get(k))
    }

    /// `(service, hostname)` of every ready endpoint with address `ip`.
    pub fn endpoints_by_ip(&self, ip: &IpAddr) -> Vec<(&Service, String)> {
        let mut out = Vec::new();
        for key in self.endpoint_ips.get(ip).into_iter().flatten() {
            let Some(slice) = self.slices.get(key) else { continue };
            let Some(svc) = self.services.get(&slice.service) else { continue };
            for endpoint in &slice.endpoints {
                if endpoint.addresses.contains(ip) && (endpoint.ready || svc.publish_not_ready) {
                    let ready = ReadyEndpoint { endpoint, ports: &slice.ports };
                    let entry = (svc, ready.hostname());
                    if !out.contains(&entry) {
                        out.push(entry);
                    }
                }
            }
        }
        out
    }

    pub fn serial(&self) -> u32 {
        self.serial
    }

    pub fn counts(&self) -> (usize, usize, usize) {
        (self.namespaces.len(), self.services.len(), self.slices.len())
    }

    fn touch(&mut self) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        self.serial = u32::try_from(now).unwrap_or(u32::MAX);
    }

    fn insert_service(&mut self, svc: Service) {
        let key = (svc.namespace.clone(), svc.name.clone());
        self.remove_service(&key);
        if let ServiceKind::ClusterIp(ips) = &svc.kind {
            for ip in ips {
                self.cluster_ips.insert(*ip, key.clone());
            }
        }
        self.services.insert(key, svc);
    }

    fn remove_service(&mut self, key: &Key) {
        if let Some(old) = self.services.remove(key)
            && let ServiceKind::ClusterIp(ips) = &old.kind
        {
            for ip in ips {
                if self.cluster_ips.get(ip) == Some(key) {
                    self.cluster_ips.remove(ip);
                }
            }
        }
    }

    fn insert_slice(&mut self, key: Key, slice: Slice) {
        self.remove_slice(&key);
        for endpoint in &slice.endpoints {
            for ip in &endpoint.addresses {
                self.endpoint_ips.entry(*ip).or_default().insert(key.clone());
            }
        }
        self.service_slices.entry(slice.service.clone()).or_default().insert(key.1.clone());
        self.slices.insert(key, slice);
    }

    fn remove_slice(&mut self, key: &Key) {
        let Some(old) = self.slices.remove(key) else { return };
        for endpoint in &old.endpoints {
            for ip in &endpoint.addresses {
                if let Some(set) = self.endpoint_ips.get_mut(ip) {
                    set.remove(key);
                    if set.is_empty() {
                        self.endpoint_ips.remove(ip);
                    }
                }
            }
        }
        if let Some(set) = self.service_slices.get_mut(&old.service) {
            set.remove(&key.1);
            if set.is_empty() {
                self.service_slices.remove(&old.service);
            }
        }
    }
}

/// The shared, lock-protected [`State`].
#[derive(Debug, Default)]
pub struct Cluster {
    state: RwLock<State>,
}

impl Cluster {
    pub fn new() -> Self {
        Self::default()
    }

    /// A read guard on the state; do not hold it across an `.await`.
    pub fn read(&self) -> parking_lot::RwLockReadGuard<'_, State> {
        self.state.read()
    }

    pub fn apply_service(&self, svc: &ApiService) {
        let (Some(ns), Some(name)) = (&svc.metadata.namespace, &svc.metadata.name) else { return };
        let mut state = self.state.write();
        match Service::from_api(svc) {
            Some(s) => state.insert_service(s),
            None => state.remove_service(&(ns.clone(), name.clone())),
        }
        state.touch();
    }

    pub fn delete_service(&self, namespace: &str, name: &str) {
        let mut state = self.state.write();
        state.remove_service(&(namespace.to_owned(), name.to_owned()));
        state.touch();
    }

    /// Replaces every Service (after a (re)list).
    pub fn replace_services(&self, services: &[ApiService]) {
        let mut state = self.state.write();
        state.services.clear();
        state.cluster_ips.clear();
        for svc in services.iter().filter_map(Service::from_api) {
            state.insert_service(svc);
        }
        state.touch();
    }

    pub fn apply_slice(&self, slice: &ApiEndpointSlice) {
        let (Some(ns), Some(name)) = (&slice.metadata.namespace, &slice.metadata.name) else { return };
        let key = (ns.clone(), name.clone());
        let mut state = self.state.write();
        match Slice::from_api(slice) {
            Some(s) => state.insert_slice(key, s),
            None => state.remove_slice(&key),
        }
        state.touch();
    }

    pub fn delete_slice(&self, namespace: &str, name: &str) {
        let mut state = self.state.write();
        state.remove_slice(&(namespace.to_owned(), name.to_owned()));
        state.touch();
    }

    /// Replaces every EndpointSlice (after a (re)list).
    pub fn replace_slices(&self, slices: &[ApiEndpointSlice]) {
        let mut state = self.state.write();
        state.slices.clear();
        state.service_slices.clear();
        state.endpoint_ips.clear();
        for slice in slices {
            if let (Some(ns), Some(name), Some(s)) =
                (&slice.metadata.namespace, &slice.metadata.name, Slice::from_api(slice))
            {
                state.insert_slice((ns.clone(), name.clone()), s);
            }
        }
        state.touch();
    }

    pub fn apply_namespace(&self, name: &str) {
        let mut state = self.state.write();
        if state.namespaces.insert(name.to_owned()) {
            state.touch();
        }
    }

    pub fn delete_namespace(&self, name: &str) {
        let mut state = self.state.write();
        if state.namespaces.remove(name) {
            state.touch();
        }
    }

    /// Replaces every Namespace (after a (re)list).
    pub fn replace_namespaces(&self, names: impl IntoIterator<Item = String>) {
        let mut state = self.state.write();
        state.namespaces = names.into_iter().collect();
        state.touch();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(v: serde_json::Value) -> ApiService {
        serde_json::from_value(v).unwrap()
    }

    fn slice(v: serde_json::Value) -> ApiEndpointSlice {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn services_by_kind() {
        let s = Service::from_api(&svc(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"clusterIP": "10.0.0.5", "clusterIPs": ["10.0.0.5", "fd00::5"],
                     "ports": [{"name": "http", "port": 80}, {"port": 53, "protocol": "UDP"}]}
        })))
        .unwrap();
        assert_eq!(
            s.kind,
            ServiceKind::ClusterIp(vec!["10.0.0.5".parse().unwrap(), "fd00::5".parse().unwrap()])
        );
        assert_eq!(s.ports[0], Port { name: "http".into(), protocol: "TCP".into(), port: 80 });
        assert_eq!(s.ports[1].protocol, "UDP");
        let h = Service::from_api(&svc(json!({
            "metadata": {"name": "db", "namespace": "default",
                         "annotations": {TOLERATE_UNREADY_ANNOTATION: "true"}},
            "spec": {"clusterIP": "None"}
        })))
        .unwrap();
        assert_eq!(h.kind, ServiceKind::Headless);
        assert!(h.publish_not_ready);
        let e = Service::from_api(&svc(json!({
            "metadata": {"name": "ext", "namespace": "default"},
            "spec": {"type": "ExternalName", "externalName": "example.com"}
        })))
        .unwrap();
        assert_eq!(e.kind, ServiceKind::ExternalName("example.com".into()));
        assert!(
            Service::from_api(&svc(json!({"metadata": {"name": "n", "namespace": "d"}, "spec": {}})))
                .is_none(),
            "no ClusterIP allocated yet: no records"
        );
    }

    #[test]
    fn indexes_follow_updates_and_deletes() {
        let cluster = Cluster::new();
        cluster.apply_namespace("default");
        cluster.apply_service(&svc(json!({
            "metadata": {"name": "db", "namespace": "default"}, "spec": {"clusterIP": "None"}
        })));
        let eps = |ready: bool, ip: &str| {
            slice(json!({
                "metadata": {"name": "db-abc", "namespace": "default",
                             "labels": {SERVICE_NAME_LABEL: "db"}},
                "addressType": "IPv4",
                "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
                "endpoints": [
                    {"addresses": [ip], "hostname": "DB-0", "conditions": {"ready": ready}},
                    {"addresses": ["10.1.0.9"]}
                ]
            }))
        };
        cluster.apply_slice(&eps(true, "10.1.0.8"));
        {
            let state = cluster.read();
            let svc = state.service("default", "db").unwrap();
            let ready = state.ready_endpoints(svc);
            assert_eq!(ready.len(), 2);
            assert_eq!(ready[0].hostname(), "db-0");
            assert_eq!(ready[1].hostname(), "10-1-0-9", "no hostname: derived from the address");
            assert_eq!(ready[0].ports[0].port, 5432);
            let by_ip = state.endpoints_by_ip(&"10.1.0.8".parse().unwrap());
            assert_eq!(by_ip.len(), 1);
            assert_eq!(by_ip[0].1, "db-0");
        }
        // The endpoint moves to another address and stops being ready.
        cluster.apply_slice(&eps(false, "10.1.0.18"));
        {
            let state = cluster.read();
            assert!(state.endpoints_by_ip(&"10.1.0.8".parse().unwrap()).is_empty());
            assert!(state.endpoints_by_ip(&"10.1.0.18".parse().unwrap()).is_empty(), "not ready");
            let svc = state.service("default", "db").unwrap();
            assert_eq!(state.ready_endpoints(svc).len(), 1);
        }
        cluster.delete_slice("default", "db-abc");
        let state = cluster.read();
        assert!(state.ready_endpoints(state.service("default", "db").unwrap()).is_empty());
        assert!(state.endpoint_ips.is_empty() && state.service_slices.is_empty());
    }

    #[test]
    fn cluster_ip_index_follows_service_changes() {
        let cluster = Cluster::new();
        let web = |ip: &str| {
            svc(json!({"metadata": {"name": "web", "namespace": "default"},
                        "spec": {"clusterIP": ip, "ports": [{"port": 80}]}}))
        };
        cluster.apply_service(&web("10.0.0.5"));
        cluster.apply_service(&web("10.0.0.6"));
        {
            let state = cluster.read();
            assert!(state.service_by_cluster_ip(&"10.0.0.5".parse().unwrap()).is_none());
            assert_eq!(state.service_by_cluster_ip(&"10.0.0.6".parse().unwrap()).unwrap().name, "web");
        }
        cluster.replace_services(&[]);
        assert!(cluster.read().service_by_cluster_ip(&"10.0.0.6".parse().unwrap()).is_none());
    }
}
