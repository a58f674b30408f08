//! One port of one Service as a proxier sees it in one IP family (upstream's
//! `BaseServicePortInfo`): the cluster IP, external IPs and load-balancer IPs of that
//! family, node port, traffic policies and session affinity.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;

use crate::cidr::Cidr;
use crate::nftables::{Family, Protocol};

/// `namespace/name` of an object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NamespacedName {
    pub namespace: String,
    pub name: String,
}

impl NamespacedName {
    pub fn new(namespace: &str, name: &str) -> Self {
        Self { namespace: namespace.to_owned(), name: name.to_owned() }
    }
}

impl fmt::Display for NamespacedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A Service port's identity: Service, port name and protocol.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServicePortName {
    pub service: NamespacedName,
    pub port: String,
    pub protocol: Protocol,
}

impl fmt::Display for ServicePortName {
    /// `ns/name:port`, or `ns/name` for an unnamed port, as upstream's `String()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.port.is_empty() {
            write!(f, "{}", self.service)
        } else {
            write!(f, "{}:{}", self.service, self.port)
        }
    }
}

/// Parses a Kubernetes protocol name (`TCP` when unset).
pub fn parse_protocol(p: Option<&str>) -> Option<Protocol> {
    match p.unwrap_or("TCP") {
        "TCP" => Some(Protocol::Tcp),
        "UDP" => Some(Protocol::Udp),
        "SCTP" => Some(Protocol::Sctp),
        _ => None,
    }
}

/// The default ClientIP affinity timeout (3 hours), as the API defaults it.
pub const DEFAULT_CLIENT_IP_SERVICE_AFFINITY_SECONDS: u32 = 10800;

/// What every proxier needs to know about a Service port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseServicePortInfo {
    pub cluster_ip: IpAddr,
    pub port: u16,
    pub protocol: Protocol,
    pub node_port: u16,
    pub load_balancer_vips: Vec<IpAddr>,
    pub load_balancer_source_ranges: Vec<Cidr>,
    pub external_ips: Vec<IpAddr>,
    /// `sessionAffinity: ClientIP` with its timeout in seconds.
    pub session_affinity_timeout: Option<u32>,
    pub health_check_node_port: u16,
    pub external_policy_local: bool,
    pub internal_policy_local: bool,
}

impl BaseServicePortInfo {
    /// Whether traffic reaches it other than through its cluster IP.
    pub fn externally_accessible(&self) -> bool {
        self.node_port != 0 || !self.load_balancer_vips.is_empty() || !self.external_ips.is_empty()
    }

    /// Whether some traffic to it uses `Cluster` policy (all endpoints).
    pub fn uses_cluster_endpoints(&self) -> bool {
        !self.internal_policy_local || (self.externally_accessible() && !self.external_policy_local)
    }

    /// Whether some traffic to it uses `Local` policy (this node's endpoints only).
    pub fn uses_local_endpoints(&self) -> bool {
        self.internal_policy_local || (self.externally_accessible() && self.external_policy_local)
    }
}

/// A proxier's own view of a Service port: the base information plus whatever it
/// precomputes once per change (chain names).
pub trait ServicePort: Send + Sync + 'static {
    fn new(name: &ServicePortName, base: BaseServicePortInfo) -> Self;
    fn base(&self) -> &BaseServicePortInfo;
}

/// The ports of one Service in one family; empty for Services the proxy ignores
/// (headless, ExternalName, no cluster IP of this family).
pub fn service_ports(service: &Service, family: Family) -> BTreeMap<ServicePortName, BaseServicePortInfo> {
    let mut out = BTreeMap::new();
    let (Some(spec), Some(namespace), Some(name)) =
        (service.spec.as_ref(), service.metadata.namespace.as_deref(), service.metadata.name.as_deref())
    else {
        return out;
    };
    let Some(cluster_ip) = cluster_ip_of_family(service, family) else { return out };
    let in_family = |ip: &IpAddr| Family::of(ip) == family;
    let external_ips: Vec<IpAddr> =
        spec.external_ips.iter().flatten().filter_map(|s| s.trim().parse().ok()).filter(in_family).collect();
    // Only VIP-mode ingress IPs are ours to capture; Proxy-mode load balancers deliver to
    // the node themselves.
    let load_balancer_vips: Vec<IpAddr> = service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter(|ing| ing.ip_mode.as_deref().is_none_or(|m| m == "VIP"))
        .filter_map(|ing| ing.ip.as_deref()?.trim().parse().ok())
        .filter(in_family)
        .collect();
    let load_balancer_source_ranges: Vec<Cidr> = if load_balancer_vips.is_empty() {
        Vec::new()
    } else {
        spec.load_balancer_source_ranges
            .iter()
            .flatten()
            .filter_map(|s| s.trim().parse::<Cidr>().ok())
            .filter(|c| Family::of(&c.addr) == family)
            .collect()
    };
    let type_ = spec.type_.as_deref().unwrap_or("ClusterIP");
    let externally_reachable_type = type_ == "NodePort"
        || type_ == "LoadBalancer"
        || !spec.external_ips.as_deref().unwrap_or_default().is_empty();
    let external_policy_local =
        externally_reachable_type && spec.external_traffic_policy.as_deref() == Some("Local");
    let internal_policy_local = spec.internal_traffic_policy.as_deref() == Some("Local");
    let health_check_node_port = if type_ == "LoadBalancer" && external_policy_local {
        spec.health_check_node_port.and_then(|p| u16::try_from(p).ok()).unwrap_or(0)
    } else {
        0
    };
    let session_affinity_timeout = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .and_then(|t| u32::try_from(t).ok())
            .unwrap_or(DEFAULT_CLIENT_IP_SERVICE_AFFINITY_SECONDS)
    });
    let svc = NamespacedName::new(namespace, name);
    for port in spec.ports.iter().flatten() {
        let Some(protocol) = parse_protocol(port.protocol.as_deref()) else { continue };
        let Ok(p) = u16::try_from(port.port) else { continue };
        let spn =
            ServicePortName { service: svc.clone(), port: port.name.clone().unwrap_or_default(), protocol };
        out.insert(
            spn,
            BaseServicePortInfo {
                cluster_ip,
                port: p,
                protocol,
                node_port: port.node_port.and_then(|n| u16::try_from(n).ok()).unwrap_or(0),
                load_balancer_vips: load_balancer_vips.clone(),
                load_balancer_source_ranges: load_balancer_source_ranges.clone(),
                external_ips: external_ips.clone(),
                session_affinity_timeout,
                health_check_node_port,
                external_policy_local,
                internal_policy_local,
            },
        );
    }
    out
}

/// The Service's cluster IP of `family`, if it has one (none for headless Services).
fn cluster_ip_of_family(service: &Service, family: Family) -> Option<IpAddr> {
    let spec = service.spec.as_ref()?;
    let mut ips: Vec<&str> = spec.cluster_ips.iter().flatten().map(String::as_str).collect();
    if ips.is_empty()
        && let Some(ip) = spec.cluster_ip.as_deref()
    {
        ips.push(ip);
    }
    ips.into_iter()
        .filter(|s| *s != "None")
        .filter_map(|s| s.parse::<IpAddr>().ok())
        .find(|ip| Family::of(ip) == family)
}

/// The Service ports a proxier knows, by name.
pub type ServicePortMap<S> = std::collections::HashMap<ServicePortName, Arc<S>>;

/// Health-check node ports of `Local` LoadBalancer Services.
pub fn health_check_node_ports<S: ServicePort>(map: &ServicePortMap<S>) -> BTreeMap<NamespacedName, u16> {
    let mut out = BTreeMap::new();
    for (name, svc) in map {
        let port = svc.base().health_check_node_port;
        if port != 0 {
            out.insert(name.service.clone(), port);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        LoadBalancerIngress, LoadBalancerStatus, ServicePort as ApiPort, ServiceSpec, ServiceStatus,
    };
    use kube::api::ObjectMeta;

    fn svc(spec: ServiceSpec) -> Service {
        Service {
            metadata: ObjectMeta {
                namespace: Some("ns1".into()),
                name: Some("svc1".into()),
                ..Default::default()
            },
            spec: Some(spec),
            status: None,
        }
    }

    #[test]
    fn dual_stack_lb_service_splits_by_family() {
        let mut s = svc(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            cluster_ips: Some(vec!["172.30.0.41".into(), "fd00:172:30::41".into()]),
            external_ips: Some(vec!["192.168.99.11".into(), "2001:db8::11".into(), "bogus".into()]),
            external_traffic_policy: Some("Local".into()),
            health_check_node_port: Some(30000),
            load_balancer_source_ranges: Some(vec![" 203.0.113.0/25".into(), "2001:db8:1::/64".into()]),
            session_affinity: Some("ClientIP".into()),
            ports: Some(vec![ApiPort {
                name: Some("p80".into()),
                port: 80,
                node_port: Some(3001),
                ..Default::default()
            }]),
            ..Default::default()
        });
        s.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![
                    LoadBalancerIngress { ip: Some("1.2.3.4".into()), ..Default::default() },
                    LoadBalancerIngress {
                        ip: Some("5.6.7.8".into()),
                        ip_mode: Some("Proxy".into()),
                        ..Default::default()
                    },
                ]),
            }),
            ..Default::default()
        });
        let v4 = service_ports(&s, Family::Ip);
        let (name, info) = v4.iter().next().unwrap();
        assert_eq!(name.to_string(), "ns1/svc1:p80");
        assert_eq!(info.cluster_ip.to_string(), "172.30.0.41");
        assert_eq!(info.external_ips, vec!["192.168.99.11".parse::<IpAddr>().unwrap()]);
        assert_eq!(info.load_balancer_vips, vec!["1.2.3.4".parse::<IpAddr>().unwrap()]);
        assert_eq!(info.load_balancer_source_ranges, vec!["203.0.113.0/25".parse().unwrap()]);
        assert_eq!(info.session_affinity_timeout, Some(10800));
        assert_eq!(info.health_check_node_port, 30000);
        assert!(info.external_policy_local && info.uses_local_endpoints() && info.uses_cluster_endpoints());
        let v6 = service_ports(&s, Family::Ip6);
        let info6 = v6.values().next().unwrap();
        assert_eq!(info6.cluster_ip.to_string(), "fd00:172:30::41");
        assert!(info6.load_balancer_vips.is_empty() && info6.load_balancer_source_ranges.is_empty());
    }

    #[test]
    fn headless_services_have_no_ports() {
        let s = svc(ServiceSpec {
            cluster_ip: Some("None".into()),
            ports: Some(vec![ApiPort { port: 80, ..Default::default() }]),
            ..Default::default()
        });
        assert!(service_ports(&s, Family::Ip).is_empty());
    }
}
