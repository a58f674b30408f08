//! The EndpointSlice controller: for every Service with a selector, publishes the IPs and
//! ports of its matching pods as `discovery.k8s.io/v1` EndpointSlices (at most 100
//! endpoints each, grouped by identical port lists), as upstream's endpointslice-controller.
//! It changes as few slices as it can on each sync, since every write fans out to kube-proxy.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, Service, ServicePort};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, PostParams};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::controller::{self, Context, Error};
use crate::informers::{self, Event, Informer};
use crate::owners;
use crate::podutil;
use crate::workqueue::Queue;

pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
pub const LABEL_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
pub const CONTROLLER_NAME: &str = "endpointslice-controller.k8s.io";
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";
const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
/// Upstream's `--max-endpoints-per-slice` default.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;
/// How long a write this controller made may stay unseen by the informer before the
/// controller stops waiting for it (a watch cannot lose it; this only bounds a bug).
const TRACK_TTL: Duration = Duration::from_secs(60);
/// When a sync refused to run on a cache missing our own writes is tried again: short and
/// fixed, since the watch normally delivers the write within milliseconds (a growing
/// backoff would hold pending pod changes back for no reason).
const STALE_RETRY: Duration = Duration::from_millis(100);

pub fn start(ctx: &Context) -> Result<(), Error> {
    let queue = ctx.queue("endpoint_slice");
    let c = Arc::new(Controller {
        client: ctx.client.clone(),
        queue: queue.clone(),
        services: ctx.informers.get::<Service>(),
        pods: ctx.informers.get::<Pod>(),
        nodes: ctx.informers.get::<Node>(),
        slices: ctx.informers.get::<EndpointSlice>(),
        tracker: Tracker::default(),
    });
    {
        let q = queue.clone();
        c.services.add_handler(move |e| q.add(informers::key_of(event_object(e))));
    }
    {
        let (q, c2) = (queue.clone(), c.clone());
        c.pods.add_handler(move |e| match e {
            Event::Add(p) | Event::Delete(p) => c2.enqueue_services_of(&q, p, None),
            Event::Update(old, new) => {
                if old.metadata.labels != new.metadata.labels {
                    c2.enqueue_services_of(&q, new, Some(old));
                } else if endpoint_facts(old) != endpoint_facts(new) {
                    c2.enqueue_services_of(&q, new, None);
                }
            }
        });
    }
    {
        let (q, c2) = (queue.clone(), c.clone());
        c.slices.add_handler(move |e| {
            let slice = event_object(e);
            let labels = slice.metadata.labels.as_ref();
            let managed = labels.and_then(|l| l.get(LABEL_MANAGED_BY)).is_some_and(|m| m == CONTROLLER_NAME);
            let Some(svc) = labels.and_then(|l| l.get(LABEL_SERVICE_NAME)).filter(|_| managed) else {
                return;
            };
            let ns = slice.metadata.namespace.as_deref().unwrap_or_default();
            // Our own writes need no second sync, unless a sync was refused while waiting
            // for them; anyone else's change (or a delete) does.
            if matches!(e, Event::Delete(_)) || c2.tracker.observed(ns, svc, slice) != Observed::OwnWrite {
                q.add(format!("{ns}/{svc}"));
            }
        });
    }
    let c2 = c.clone();
    controller::run_workers(ctx, queue, ctx.options.concurrent_service_endpoint_syncs, move |key| {
        let c = c2.clone();
        async move { c.sync(&key).await }
    });
    Ok(())
}

/// The object an informer event is about (the new one for updates).
pub(crate) fn event_object<'a, K>(e: &'a Event<'_, K>) -> &'a K {
    match e {
        Event::Add(o) | Event::Delete(o) | Event::Update(_, o) => o,
    }
}

struct Controller {
    client: kube::Client,
    queue: Arc<Queue>,
    services: Arc<Informer<Service>>,
    pods: Arc<Informer<Pod>>,
    nodes: Arc<Informer<Node>>,
    slices: Arc<Informer<EndpointSlice>>,
    tracker: Tracker,
}

impl Controller {
    /// Queues every service in the pod's namespace whose selector matches its labels (or
    /// `old`'s: a relabelled pod must leave the services it no longer matches).
    fn enqueue_services_of(&self, queue: &Queue, pod: &Pod, old: Option<&Pod>) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        for svc in self.services.list_namespace(ns) {
            let Some(sel) = service_selector(&svc) else { continue };
            if selector_matches(sel, pod) || old.is_some_and(|o| selector_matches(sel, o)) {
                queue.add(informers::key_of(svc.as_ref()));
            }
        }
    }

    async fn sync(&self, key: &str) -> Result<(), Error> {
        let (ns, name) = informers::split_key(key);
        let Some(svc) = self.services.get(key) else {
            // The garbage collector deletes the slices through their owner references.
            self.tracker.forget(key);
            return Ok(());
        };
        let Some(selector) = service_selector(&svc) else { return Ok(()) };
        if let Some(why) = self.tracker.stale(key, &self.slices) {
            // Not a failure: the write is on its way. Its arrival re-queues the service;
            // the short retry only covers an arrival this controller cannot recognise.
            tracing::debug!(%key, %why, "endpointslice informer cache is out of date; waiting");
            self.queue.add_after(key.to_owned(), STALE_RETRY);
            return Ok(());
        }
        let existing: Vec<Arc<EndpointSlice>> = self
            .slices
            .list_namespace(ns)
            .into_iter()
            .filter(|s| managed_slice_of(s, name) && s.metadata.deletion_timestamp.is_none())
            .collect();
        let pods: Vec<Arc<Pod>> =
            self.pods.list_namespace(ns).into_iter().filter(|p| selector_matches(selector, p)).collect();
        let types = address_types(&svc);
        let (desired, missing_nodes) = desired_endpoints(&svc, &pods, &types, &|n| self.nodes.get(n));
        let plan = plan(&svc, &existing, desired, MAX_ENDPOINTS_PER_SLICE);
        self.apply(key, &svc, plan).await?;
        if let Some(node) = missing_nodes.first() {
            // Retried with backoff until the node shows up or the pod is collected.
            return Err(Error::Other(format!("skipped pods of service {key}: node {node} not found")));
        }
        Ok(())
    }

    async fn apply(&self, key: &str, svc: &Service, plan: Plan) -> Result<(), Error> {
        let ns = svc.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), ns);
        // A service being deleted gets no new slices: the garbage collector would race
        // with us deleting them.
        if svc.metadata.deletion_timestamp.is_none() {
            for slice in &plan.create {
                let created = api.create(&PostParams::default(), slice).await?;
                self.tracker.wrote(key, &created);
            }
        }
        for slice in &plan.update {
            let name = slice.metadata.name.as_deref().unwrap_or_default();
            let updated = api.replace(name, &PostParams::default(), slice).await?;
            self.tracker.wrote(key, &updated);
        }
        for slice in &plan.delete {
            let name = slice.metadata.name.as_deref().unwrap_or_default();
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if controller::api_code(&e) == Some(404) => {}
                Err(e) => return Err(e.into()),
            }
            self.tracker.deleted(key, slice);
        }
        Ok(())
    }
}

/// What of a pod shows in its endpoints; an update that changes none of it is ignored.
fn endpoint_facts(pod: &Pod) -> impl PartialEq + use<> {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    (
        podutil::is_ready(pod),
        podutil::is_terminal(pod),
        pod.metadata.deletion_timestamp.is_some(),
        pod_ips(pod),
        podutil::node_name(pod).to_owned(),
        spec.and_then(|s| s.hostname.clone()),
        spec.and_then(|s| s.subdomain.clone()),
        status.and_then(|s| s.phase.clone()),
    )
}

/// The service's selector, when the controller manages its endpoints: not ExternalName,
/// and a selector is set (an empty one is "no selector", as after protobuf storage).
pub(crate) fn service_selector(svc: &Service) -> Option<&BTreeMap<String, String>> {
    let spec = svc.spec.as_ref()?;
    if spec.type_.as_deref() == Some("ExternalName") {
        return None;
    }
    spec.selector.as_ref().filter(|s| !s.is_empty())
}

pub(crate) fn selector_matches(selector: &BTreeMap<String, String>, pod: &Pod) -> bool {
    let labels = pod.metadata.labels.as_ref();
    selector.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

fn managed_slice_of(slice: &EndpointSlice, service: &str) -> bool {
    let Some(l) = slice.metadata.labels.as_ref() else { return false };
    l.get(LABEL_SERVICE_NAME).is_some_and(|s| s == service)
        && l.get(LABEL_MANAGED_BY).is_some_and(|m| m == CONTROLLER_NAME)
}

/// The pod's IPs (`status.podIPs`, or `status.podIP` when the list is empty).
pub(crate) fn pod_ips(pod: &Pod) -> Vec<String> {
    let Some(status) = pod.status.as_ref() else { return Vec::new() };
    let ips: Vec<String> =
        status.pod_ips.iter().flatten().map(|p| p.ip.clone()).filter(|ip| !ip.is_empty()).collect();
    if !ips.is_empty() {
        return ips;
    }
    status.pod_ip.iter().filter(|ip| !ip.is_empty()).cloned().collect()
}

fn is_ipv6(ip: &str) -> Option<bool> {
    ip.parse::<IpAddr>().ok().map(|a| a.is_ipv6())
}

/// Whether the pod belongs in endpoints at all (upstream's `ShouldPodBeInEndpoints` with
/// terminating pods included): it has an IP and has not finished.
fn should_pod_be_in_endpoints(pod: &Pod) -> bool {
    !podutil::is_terminal(pod) && !pod_ips(pod).is_empty()
}

/// The address types the service's slices carry: its IP families; for a service without
/// them, its cluster IP's family; for a headless one, both.
pub fn address_types(svc: &Service) -> Vec<&'static str> {
    let spec = svc.spec.as_ref();
    let mut types = Vec::new();
    for f in spec.and_then(|s| s.ip_families.as_ref()).into_iter().flatten() {
        let t = match f.as_str() {
            "IPv4" => "IPv4",
            "IPv6" => "IPv6",
            _ => continue,
        };
        if !types.contains(&t) {
            types.push(t);
        }
    }
    if !types.is_empty() {
        return types;
    }
    match spec.and_then(|s| s.cluster_ip.as_deref()).filter(|ip| !ip.is_empty() && *ip != "None") {
        Some(ip) if is_ipv6(ip) == Some(true) => vec!["IPv6"],
        Some(_) => vec!["IPv4"],
        None => vec!["IPv4", "IPv6"],
    }
}

/// The container port a service port's targetPort names in this pod (upstream's
/// `FindPort`): a number is used as is; a name is looked up among the containers' ports
/// (and restartable init containers', the sidecars) with the same protocol.
pub fn find_port(pod: &Pod, port: &ServicePort) -> Option<i32> {
    match port.target_port.as_ref() {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => {
            if let Ok(n) = name.parse::<i32>() {
                return Some(n);
            }
            let proto = port.protocol.as_deref().unwrap_or("TCP");
            let spec = pod.spec.as_ref()?;
            let sidecars = spec
                .init_containers
                .iter()
                .flatten()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"));
            spec.containers
                .iter()
                .chain(sidecars)
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| {
                    p.name.as_deref() == Some(name.as_str())
                        && p.protocol.as_deref().unwrap_or("TCP") == proto
                })
                .map(|p| p.container_port)
        }
    }
}

/// The service's ports as this pod serves them; ports that cannot be resolved are left
/// out, so such pods land in a group of their own.
fn endpoint_ports(svc: &Service, pod: &Pod) -> Vec<EndpointPort> {
    let ports = svc.spec.as_ref().and_then(|s| s.ports.as_ref());
    ports
        .into_iter()
        .flatten()
        .filter_map(|sp| {
            let port = find_port(pod, sp)?;
            Some(EndpointPort {
                name: Some(sp.name.clone().unwrap_or_default()),
                port: Some(port),
                protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: sp.app_protocol.clone(),
            })
        })
        .collect()
}

/// A key equal for equal port lists regardless of their order.
fn port_key(ports: &[EndpointPort]) -> String {
    let mut parts: Vec<String> = ports
        .iter()
        .map(|p| {
            format!(
                "{}\u{0}{}\u{0}{}\u{0}{}",
                p.name.as_deref().unwrap_or(""),
                p.protocol.as_deref().unwrap_or("TCP"),
                p.port.unwrap_or(0),
                p.app_protocol.as_deref().unwrap_or("")
            )
        })
        .collect();
    parts.sort();
    parts.join("\u{1}")
}

/// An endpoint's identity (upstream hashes addresses, hostname and the target's name):
/// the same identity in a slice and in the desired set is the same endpoint.
fn endpoint_key(ep: &Endpoint) -> String {
    let mut addrs = ep.addresses.clone();
    addrs.sort();
    let target = ep.target_ref.as_ref();
    format!(
        "{}|{}|{}/{}",
        addrs.join(","),
        ep.hostname.as_deref().unwrap_or(""),
        target.and_then(|t| t.namespace.as_deref()).unwrap_or(""),
        target.and_then(|t| t.name.as_deref()).unwrap_or("")
    )
}

/// Whether two endpoints with the same identity differ in anything published.
fn endpoint_equal(a: &Endpoint, b: &Endpoint) -> bool {
    a.conditions == b.conditions
        && a.zone == b.zone
        && a.node_name == b.node_name
        && a.target_ref == b.target_ref
        && a.hostname == b.hostname
        && a.addresses == b.addresses
}

/// Desired endpoints of one address type, by port key: the ports and the endpoints.
type Groups = BTreeMap<String, (Vec<EndpointPort>, Vec<Endpoint>)>;

/// The desired endpoints per address type, and the nodes the pods named that do not
/// exist (such pods are left out unless the service publishes not-ready addresses).
fn desired_endpoints(
    svc: &Service,
    pods: &[Arc<Pod>],
    types: &[&'static str],
    node: &dyn Fn(&str) -> Option<Arc<Node>>,
) -> (HashMap<&'static str, Groups>, Vec<String>) {
    let spec = svc.spec.as_ref();
    let publish_not_ready = spec.and_then(|s| s.publish_not_ready_addresses).unwrap_or(false);
    let svc_name = svc.metadata.name.as_deref().unwrap_or_default();
    let mut out: HashMap<&'static str, Groups> = types.iter().map(|t| (*t, Groups::new())).collect();
    let mut missing = Vec::new();
    for pod in pods {
        if !should_pod_be_in_endpoints(pod) {
            continue;
        }
        let node_name = podutil::node_name(pod);
        let node = if node_name.is_empty() { None } else { node(node_name) };
        if node.is_none() && !node_name.is_empty() && !publish_not_ready {
            missing.push(node_name.to_owned());
            continue;
        }
        let ports = endpoint_ports(svc, pod);
        let key = port_key(&ports);
        let serving = podutil::is_ready(pod);
        let terminating = podutil::is_terminating(pod);
        let ready = publish_not_ready || (serving && !terminating);
        let pspec = pod.spec.as_ref();
        let hostname = pspec
            .and_then(|s| s.hostname.clone())
            .filter(|h| !h.is_empty() && pspec.and_then(|s| s.subdomain.as_deref()) == Some(svc_name));
        let zone = node
            .as_ref()
            .and_then(|n| n.metadata.labels.as_ref()?.get(LABEL_ZONE).cloned())
            .filter(|z| !z.is_empty());
        let ips = pod_ips(pod);
        for t in types {
            let want_v6 = *t == "IPv6";
            let addresses: Vec<String> =
                ips.iter().filter(|ip| is_ipv6(ip) == Some(want_v6)).cloned().collect();
            if addresses.is_empty() {
                continue;
            }
            let ep = Endpoint {
                addresses,
                conditions: Some(EndpointConditions {
                    ready: Some(ready),
                    serving: Some(serving),
                    terminating: Some(terminating),
                }),
                hostname: hostname.clone(),
                node_name: Some(node_name.to_owned()).filter(|n| !n.is_empty()),
                target_ref: Some(ObjectReference {
                    kind: Some("Pod".into()),
                    namespace: pod.metadata.namespace.clone(),
                    name: pod.metadata.name.clone(),
                    uid: pod.metadata.uid.clone(),
                    ..ObjectReference::default()
                }),
                zone: zone.clone(),
                ..Endpoint::default()
            };
            if let Some(groups) = out.get_mut(t) {
                groups.entry(key.clone()).or_insert_with(|| (ports.clone(), Vec::new())).1.push(ep);
            }
        }
    }
    (out, missing)
}

/// The labels the service's slices carry: the service's own (without reserved keys), the
/// headless marker, and the two that tie the slice to the service and this controller.
fn slice_labels(svc: &Service) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = svc
        .metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| !matches!(k.as_str(), LABEL_SERVICE_NAME | LABEL_MANAGED_BY | LABEL_HEADLESS))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let ip_set = svc
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .is_some_and(|ip| !ip.is_empty() && ip != "None");
    if !ip_set {
        labels.insert(LABEL_HEADLESS.into(), String::new());
    }
    labels.insert(LABEL_SERVICE_NAME.into(), svc.metadata.name.clone().unwrap_or_default());
    labels.insert(LABEL_MANAGED_BY.into(), CONTROLLER_NAME.into());
    labels
}

fn new_slice(svc: &Service, address_type: &str, ports: Vec<EndpointPort>) -> EndpointSlice {
    let name = svc.metadata.name.clone().unwrap_or_default();
    EndpointSlice {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: svc.metadata.namespace.clone(),
            labels: Some(slice_labels(svc)),
            owner_references: Some(vec![owners::controller_ref(svc)]),
            ..ObjectMeta::default()
        },
        address_type: address_type.to_owned(),
        endpoints: Vec::new(),
        ports: Some(ports),
    }
}

fn owned_by(slice: &EndpointSlice, svc: &Service) -> bool {
    svc.metadata.uid.as_deref().is_some_and(|uid| owners::is_controlled_by(&slice.metadata, uid))
}

/// The writes that bring a service's slices to the desired state.
#[derive(Debug, Default)]
pub struct Plan {
    pub create: Vec<EndpointSlice>,
    pub update: Vec<EndpointSlice>,
    pub delete: Vec<Arc<EndpointSlice>>,
}

/// Plans every address type: slices of types the service no longer has are deleted.
fn plan(
    svc: &Service,
    existing: &[Arc<EndpointSlice>],
    desired: HashMap<&'static str, Groups>,
    max: usize,
) -> Plan {
    let mut out = Plan::default();
    let mut types: Vec<(&'static str, Groups)> = desired.into_iter().collect();
    types.sort_by_key(|(t, _)| *t);
    for s in existing {
        if !types.iter().any(|(t, _)| *t == s.address_type) {
            out.delete.push(s.clone());
        }
    }
    for (t, groups) in types {
        let mine: Vec<Arc<EndpointSlice>> =
            existing.iter().filter(|s| s.address_type == t).cloned().collect();
        let p = plan_address_type(svc, t, &mine, groups, max);
        out.create.extend(p.create);
        out.update.extend(p.update);
        out.delete.extend(p.delete);
    }
    out
}

/// Upstream's `reconcileByAddressType`: keep each existing slice's endpoints that are
/// still desired (updated in place when changed), fill slices being updated anyway, then
/// fit a small remainder into the fullest unchanged slice that has room, and only then
/// create slices; a service with no endpoints keeps one empty placeholder slice.
fn plan_address_type(
    svc: &Service,
    address_type: &str,
    existing: &[Arc<EndpointSlice>],
    desired: Groups,
    max: usize,
) -> Plan {
    let max = max.max(1);
    let labels = slice_labels(svc);
    let mut out = Plan::default();
    let mut existing_by_ports: BTreeMap<String, Vec<Arc<EndpointSlice>>> = BTreeMap::new();
    for s in existing {
        if owned_by(s, svc) {
            existing_by_ports
                .entry(port_key(s.ports.as_deref().unwrap_or_default()))
                .or_default()
                .push(s.clone());
        } else {
            out.delete.push(s.clone());
        }
    }
    for slices in existing_by_ports.values_mut() {
        slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    }
    for (key, (ports, endpoints)) in desired {
        let mut order: Vec<String> = Vec::with_capacity(endpoints.len());
        let mut want: HashMap<String, Endpoint> = HashMap::with_capacity(endpoints.len());
        for ep in endpoints {
            let k = endpoint_key(&ep);
            if want.insert(k.clone(), ep).is_none() {
                order.push(k);
            }
        }
        let mut to_update: Vec<EndpointSlice> = Vec::new();
        let mut unchanged: Vec<Arc<EndpointSlice>> = Vec::new();
        // 1. Existing slices keep (refreshed) endpoints that are still desired.
        for s in existing_by_ports.remove(&key).unwrap_or_default() {
            let mut changed = s.metadata.labels.as_ref() != Some(&labels);
            let mut kept = Vec::with_capacity(s.endpoints.len());
            for ep in &s.endpoints {
                match want.remove(&endpoint_key(ep)) {
                    Some(d) => {
                        changed |= !endpoint_equal(ep, &d);
                        kept.push(d);
                    }
                    None => changed = true,
                }
            }
            if kept.is_empty() {
                out.delete.push(s);
            } else if changed {
                let mut u = (*s).clone();
                u.endpoints = kept;
                u.metadata.labels = Some(labels.clone());
                to_update.push(u);
            } else {
                unchanged.push(s);
            }
        }
        let mut remaining: Vec<Endpoint> = order.iter().filter_map(|k| want.remove(k)).collect();
        remaining.reverse(); // popped from the back, so in pod order
        // 2. Slices written anyway take what they can hold, fullest first.
        to_update.sort_by_key(|s| std::cmp::Reverse(s.endpoints.len()));
        for s in &mut to_update {
            while s.endpoints.len() < max {
                let Some(ep) = remaining.pop() else { break };
                s.endpoints.push(ep);
            }
        }
        // 3. The rest: into the fullest unchanged slice that fits it all, or new slices.
        while !remaining.is_empty() {
            let mut slice = None;
            if remaining.len() < max {
                let fit = unchanged
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| max.saturating_sub(s.endpoints.len()) >= remaining.len())
                    .max_by_key(|(_, s)| s.endpoints.len())
                    .map(|(i, _)| i);
                if let Some(i) = fit {
                    slice = Some((*unchanged.remove(i)).clone());
                }
            }
            let mut s = slice.unwrap_or_else(|| new_slice(svc, address_type, ports.clone()));
            while s.endpoints.len() < max {
                let Some(ep) = remaining.pop() else { break };
                s.endpoints.push(ep);
            }
            if s.metadata.name.is_some() {
                to_update.push(s);
            } else {
                out.create.push(s);
            }
        }
        out.update.extend(to_update);
    }
    // Slices whose port list no pod has any more.
    out.delete.extend(existing_by_ports.into_values().flatten());

    if existing.len() == out.delete.len() && out.create.is_empty() {
        let placeholder = new_slice(svc, address_type, Vec::new());
        let keep = out.delete.len() == 1 && {
            let s = &out.delete[0];
            s.endpoints.is_empty()
                && s.ports.as_deref().unwrap_or_default().is_empty()
                && s.metadata.labels.as_ref() == Some(&labels)
                && owned_by(s, svc)
        };
        if keep {
            out.delete.clear();
        } else {
            out.create.push(placeholder);
        }
    }
    // A slice about to be deleted is recycled for one about to be created: one write
    // instead of two, as upstream's finalize.
    while !out.create.is_empty() {
        let Some(i) = out.delete.iter().position(|s| owned_by(s, svc)) else { break };
        let old = out.delete.remove(i);
        let mut s = out.create.remove(0);
        s.metadata = ObjectMeta { labels: s.metadata.labels.take(), ..old.metadata.clone() };
        s.metadata.owner_references = Some(vec![owners::controller_ref(svc)]);
        out.update.push(s);
    }
    out
}

/// What this controller wrote and has not yet seen in the informer, per service: syncing
/// on a cache that misses our own creations would create them twice.
#[derive(Default)]
struct Tracker {
    state: Mutex<TrackerState>,
}

#[derive(Default)]
struct TrackerState {
    by_service: HashMap<String, HashMap<String, (Expect, Instant)>>,
    /// Services whose last sync was refused as stale: the next observed own write must
    /// queue them again. Kept under the same lock as the expectations so that a write
    /// arriving while a sync decides to refuse cannot be missed.
    refused: HashSet<String>,
}

/// What an observed slice event is to the tracker.
#[derive(Debug, PartialEq, Eq)]
enum Observed {
    /// One of our writes, and no sync waits for it.
    OwnWrite,
    /// One of our writes that a refused sync was waiting for.
    AwaitedWrite,
    /// Someone else's change.
    Foreign,
}

enum Expect {
    /// Created or updated; the cache must show at least this resourceVersion.
    AtLeast(u64),
    /// Deleted; the cache must not show the slice with this UID.
    Gone(Option<String>),
}

fn rv_of(slice: &EndpointSlice) -> Option<u64> {
    slice.metadata.resource_version.as_deref()?.parse().ok()
}

impl Tracker {
    fn wrote(&self, service: &str, slice: &EndpointSlice) {
        let (Some(name), Some(rv)) = (slice.metadata.name.clone(), rv_of(slice)) else { return };
        self.state
            .lock()
            .by_service
            .entry(service.to_owned())
            .or_default()
            .insert(name, (Expect::AtLeast(rv), Instant::now()));
    }

    fn deleted(&self, service: &str, slice: &EndpointSlice) {
        let Some(name) = slice.metadata.name.clone() else { return };
        self.state
            .lock()
            .by_service
            .entry(service.to_owned())
            .or_default()
            .insert(name, (Expect::Gone(slice.metadata.uid.clone()), Instant::now()));
    }

    fn forget(&self, service: &str) {
        let mut state = self.state.lock();
        state.by_service.remove(service);
        state.refused.remove(service);
    }

    fn observed(&self, ns: &str, service: &str, slice: &EndpointSlice) -> Observed {
        let mut state = self.state.lock();
        let key = format!("{ns}/{service}");
        let name = slice.metadata.name.as_deref().unwrap_or_default();
        let own = matches!(
            state.by_service.get(&key).and_then(|m| m.get(name)),
            Some((Expect::AtLeast(rv), _)) if Some(*rv) == rv_of(slice)
        );
        if !own {
            Observed::Foreign
        } else if state.refused.remove(&key) {
            Observed::AwaitedWrite
        } else {
            Observed::OwnWrite
        }
    }

    /// Why the cache cannot be trusted for `service` yet, if it cannot.
    /// A refusal is remembered so that the awaited write re-queues the service.
    fn stale(&self, service: &str, cache: &Informer<EndpointSlice>) -> Option<String> {
        self.stale_with(service, |ns, name| cache.get_namespaced(ns, name))
    }

    fn stale_with(
        &self,
        service: &str,
        cached: impl Fn(&str, &str) -> Option<Arc<EndpointSlice>>,
    ) -> Option<String> {
        let mut state = self.state.lock();
        let TrackerState { by_service, refused } = &mut *state;
        let Some(entries) = by_service.get_mut(service) else {
            refused.remove(service);
            return None;
        };
        let (ns, _) = informers::split_key(service);
        let mut why = None;
        entries.retain(|name, (expect, at)| {
            let cached = cached(ns, name);
            let seen = match expect {
                Expect::AtLeast(rv) => cached.as_deref().and_then(rv_of).is_some_and(|have| have >= *rv),
                Expect::Gone(uid) => cached.is_none_or(|c| c.metadata.uid != *uid),
            };
            if seen || at.elapsed() > TRACK_TTL {
                return false;
            }
            why.get_or_insert_with(|| format!("slice {ns}/{name} not yet observed"));
            true
        });
        if entries.is_empty() {
            by_service.remove(service);
        }
        if why.is_some() {
            refused.insert(service.to_owned());
        } else {
            refused.remove(service);
        }
        why
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerPort, PodCondition, PodIP, PodSpec, PodStatus, ServiceSpec,
    };

    fn svc(ports: Vec<ServicePort>) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("svc-uid".into()),
                labels: Some([("team".to_string(), "a".to_string())].into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                selector: Some([("app".to_string(), "web".to_string())].into()),
                cluster_ip: Some("10.0.0.10".into()),
                ip_families: Some(vec!["IPv4".into()]),
                ports: Some(ports),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn named_port(name: &str, target: IntOrString) -> ServicePort {
        ServicePort {
            name: Some(name.into()),
            port: 80,
            protocol: Some("TCP".into()),
            target_port: Some(target),
            ..Default::default()
        }
    }

    fn pod(name: &str, ip: &str, ready: bool, http_port: Option<i32>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("uid-{name}")),
                labels: Some([("app".to_string(), "web".to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                containers: vec![Container {
                    name: "c".into(),
                    ports: http_port.map(|p| {
                        vec![ContainerPort {
                            name: Some("http".into()),
                            container_port: p,
                            ..Default::default()
                        }]
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ip: Some(ip.into()),
                pod_ips: Some(vec![PodIP { ip: ip.into() }]),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
    }

    fn node() -> Option<Arc<Node>> {
        Some(Arc::new(Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                labels: Some([(LABEL_ZONE.to_string(), "z1".to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        }))
    }

    fn desired(s: &Service, pods: &[Arc<Pod>]) -> HashMap<&'static str, Groups> {
        desired_endpoints(s, pods, &address_types(s), &|_| node()).0
    }

    /// Gives planned creations names and resource versions, as the API server would.
    fn store(p: Plan, existing: Vec<Arc<EndpointSlice>>) -> Vec<Arc<EndpointSlice>> {
        let mut by_name: BTreeMap<String, Arc<EndpointSlice>> =
            existing.into_iter().map(|s| (s.metadata.name.clone().unwrap(), s)).collect();
        for d in p.delete {
            by_name.remove(d.metadata.name.as_deref().unwrap());
        }
        for u in p.update {
            by_name.insert(u.metadata.name.clone().unwrap(), Arc::new(u));
        }
        for (i, mut c) in p.create.into_iter().enumerate() {
            let name = format!("web-{}-{i}", by_name.len());
            c.metadata.name = Some(name.clone());
            by_name.insert(name, Arc::new(c));
        }
        by_name.into_values().collect()
    }

    #[test]
    fn named_ports_resolve_per_pod_and_group_slices() {
        let s = svc(vec![named_port("http", IntOrString::String("http".into()))]);
        let pods = vec![
            pod("a", "10.1.0.1", true, Some(8080)),
            pod("b", "10.1.0.2", true, Some(9090)),
            pod("c", "10.1.0.3", false, None),
        ];
        let d = desired(&s, &pods);
        let groups = &d["IPv4"];
        assert_eq!(groups.len(), 3, "three distinct port sets: 8080, 9090, none");
        let p = plan(&s, &[], d, 100);
        assert_eq!(p.create.len(), 3);
        let ports: Vec<Vec<i32>> =
            p.create.iter().map(|s| s.ports.iter().flatten().filter_map(|p| p.port).collect()).collect();
        assert!(ports.contains(&vec![8080]) && ports.contains(&vec![9090]) && ports.contains(&vec![]));
        let c = p.create.iter().find(|s| s.ports.as_deref().unwrap().is_empty()).unwrap();
        let cond = c.endpoints[0].conditions.as_ref().unwrap();
        assert_eq!((cond.ready, cond.serving, cond.terminating), (Some(false), Some(false), Some(false)));
        assert_eq!(c.endpoints[0].zone.as_deref(), Some("z1"));
        let labels = c.metadata.labels.as_ref().unwrap();
        assert_eq!(labels.get(LABEL_SERVICE_NAME).map(String::as_str), Some("web"));
        assert_eq!(labels.get("team").map(String::as_str), Some("a"));
        assert_eq!(c.metadata.owner_references.as_ref().unwrap()[0].uid, "svc-uid");
    }

    #[test]
    fn slices_split_at_max_and_are_stable() {
        let s = svc(vec![named_port("http", IntOrString::Int(80))]);
        let pods: Vec<Arc<Pod>> = (0..250)
            .map(|i| pod(&format!("p{i}"), &format!("10.1.{}.{}", i / 200, i % 200), true, None))
            .collect();
        let p = plan(&s, &[], desired(&s, &pods), 100);
        let mut sizes: Vec<usize> = p.create.iter().map(|s| s.endpoints.len()).collect();
        sizes.sort();
        assert_eq!(sizes, vec![50, 100, 100]);
        let stored = store(p, Vec::new());
        // Nothing changed: nothing to write.
        let again = plan(&s, &stored, desired(&s, &pods), 100);
        assert!(again.create.is_empty() && again.update.is_empty() && again.delete.is_empty(), "{again:?}");
        // One pod turns unready: only its slice is rewritten.
        let mut pods2 = pods.clone();
        pods2[7] = pod("p7", "10.1.0.7", false, None);
        let one = plan(&s, &stored, desired(&s, &pods2), 100);
        assert_eq!((one.create.len(), one.update.len(), one.delete.len()), (0, 1, 0));
        // Ten new pods fit in the half-full slice rather than a new one.
        let more: Vec<Arc<Pod>> = pods
            .iter()
            .cloned()
            .chain((0..10).map(|i| pod(&format!("q{i}"), &format!("10.2.0.{i}"), true, None)))
            .collect();
        let grow = plan(&s, &stored, desired(&s, &more), 100);
        assert_eq!((grow.create.len(), grow.update.len()), (0, 1));
        assert_eq!(grow.update[0].endpoints.len(), 60);
    }

    #[test]
    fn no_endpoints_keeps_one_placeholder() {
        let s = svc(vec![named_port("http", IntOrString::Int(80))]);
        let p = plan(&s, &[], desired(&s, &[]), 100);
        assert_eq!(p.create.len(), 1);
        assert!(p.create[0].endpoints.is_empty());
        let stored = store(p, Vec::new());
        let again = plan(&s, &stored, desired(&s, &[]), 100);
        assert!(again.create.is_empty() && again.update.is_empty() && again.delete.is_empty());
        // Endpoints appear: the placeholder is deleted and its replacement recycles it.
        let fill = plan(&s, &stored, desired(&s, &[pod("a", "10.1.0.1", true, None)]), 100);
        assert_eq!((fill.create.len(), fill.update.len(), fill.delete.len()), (0, 1, 0));
        assert_eq!(fill.update[0].endpoints.len(), 1);
    }

    #[test]
    fn terminating_and_foreign_slices() {
        let mut s = svc(vec![named_port("http", IntOrString::Int(80))]);
        let mut p = (*pod("a", "10.1.0.1", true, None)).clone();
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        let d = desired(&s, &[Arc::new(p.clone())]);
        let c = d["IPv4"].values().next().unwrap().1[0].conditions.clone().unwrap();
        assert_eq!((c.ready, c.serving, c.terminating), (Some(false), Some(true), Some(true)));
        s.spec.as_mut().unwrap().publish_not_ready_addresses = Some(true);
        let d = desired(&s, &[Arc::new(p)]);
        assert_eq!(d["IPv4"].values().next().unwrap().1[0].conditions.as_ref().unwrap().ready, Some(true));
        // A slice owned by an earlier service of the same name is replaced.
        let mut old = new_slice(&s, "IPv4", Vec::new());
        old.metadata.name = Some("web-old".into());
        old.metadata.owner_references.as_mut().unwrap()[0].uid = "other".into();
        let p = plan(&s, &[Arc::new(old)], desired(&s, &[]), 100);
        assert_eq!((p.create.len(), p.delete.len()), (1, 1));
    }

    #[test]
    fn address_types_follow_families() {
        let mut s = svc(Vec::new());
        assert_eq!(address_types(&s), vec!["IPv4"]);
        let spec = s.spec.as_mut().unwrap();
        spec.ip_families = None;
        spec.cluster_ip = Some("None".into());
        assert_eq!(address_types(&s), vec!["IPv4", "IPv6"]);
        s.spec.as_mut().unwrap().cluster_ip = Some("fd00::10".into());
        assert_eq!(address_types(&s), vec!["IPv6"]);
    }

    #[test]
    fn awaited_own_write_requeues_once() {
        let slice = |rv: &str| EndpointSlice {
            metadata: ObjectMeta {
                name: Some("web-abc".into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: vec![],
            ports: None,
        };
        let t = Tracker::default();
        t.wrote("ns/web", &slice("7"));
        // Nothing cached yet: the sync is refused and remembered.
        assert!(t.stale_with("ns/web", |_, _| None).is_some());
        // The write arrives: it is ours, and the refused sync must run again, once.
        assert_eq!(t.observed("ns", "web", &slice("7")), Observed::AwaitedWrite);
        assert_eq!(t.observed("ns", "web", &slice("7")), Observed::OwnWrite);
        assert_eq!(t.observed("ns", "web", &slice("8")), Observed::Foreign);
        // Now the cache has it: no refusal, and the expectation is gone.
        assert!(t.stale_with("ns/web", |_, _| Some(Arc::new(slice("7")))).is_none());
        assert_eq!(t.observed("ns", "web", &slice("7")), Observed::Foreign);
    }
}
