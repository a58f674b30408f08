//! The Endpoints controller: keeps a core/v1 Endpoints object, named like its Service,
//! listing the ready and not-ready addresses of the pods the Service selects, grouped by
//! identical port sets (upstream's endpoints-controller, for clients that predate slices).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};

use crate::controller::{self, Context, Error};
use crate::controllers::endpointslice::{
    LABEL_HEADLESS, event_object, find_port, pod_ips, selector_matches, service_selector,
};
use crate::informers::{self, Event, Informer};
use crate::podutil;

/// Upstream's `maxCapacity`: addresses beyond it are left out and the object annotated.
pub const MAX_CAPACITY: usize = 1000;
pub const ANNOTATION_OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";
/// Endpoints that hold a (legacy) leader election record are not a Service's.
const ANNOTATION_LEADER: &str = "control-plane.alpha.kubernetes.io/leader";

pub fn start(ctx: &Context) -> Result<(), Error> {
    let c = Arc::new(Controller {
        client: ctx.client.clone(),
        services: ctx.informers.get::<Service>(),
        pods: ctx.informers.get::<Pod>(),
        endpoints: ctx.informers.get::<Endpoints>(),
    });
    let queue = ctx.queue("endpoint");
    {
        let q = queue.clone();
        c.services.add_handler(move |e| q.add(informers::key_of(event_object(e))));
    }
    {
        let (q, c2) = (queue.clone(), c.clone());
        c.pods.add_handler(move |e| {
            let (old, new) = match e {
                Event::Add(p) | Event::Delete(p) => (None, p),
                Event::Update(o, n) => {
                    if o.metadata.resource_version == n.metadata.resource_version {
                        return;
                    }
                    (Some(o), n)
                }
            };
            let ns = new.metadata.namespace.as_deref().unwrap_or_default();
            for svc in c2.services.list_namespace(ns) {
                let Some(sel) = service_selector(&svc) else { continue };
                if selector_matches(sel, new) || old.is_some_and(|o| selector_matches(sel, o)) {
                    q.add(informers::key_of(svc.as_ref()));
                }
            }
        });
    }
    {
        // Only a deletion concerns us (upstream's `onEndpointsDelete`): the Service's
        // Endpoints are recreated. Adds and updates are left alone, so Endpoints that
        // users maintain for selectorless Services (or that appear before their Service)
        // are never deleted on sight.
        let q = queue.clone();
        c.endpoints.add_handler(move |e| {
            if let Event::Delete(ep) = e
                && !is_leader_lock(ep)
            {
                q.add(informers::key_of(event_object(e)));
            }
        });
    }
    {
        // Upstream's `checkLeftoverEndpoints`: Endpoints whose Service was deleted while no
        // controller ran are removed once, after the caches are complete.
        let (q, c2, informers, shutdown) =
            (queue.clone(), c.clone(), ctx.informers.clone(), ctx.shutdown.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = shutdown.wait() => return,
                () = informers.wait_synced() => {}
            }
            for key in leftover_keys(&c2.endpoints.list(), |key| c2.services.get(key).is_some()) {
                q.add(key);
            }
        });
    }
    let c2 = c.clone();
    controller::run_workers(ctx, queue, ctx.options.concurrent_endpoint_syncs, move |key| {
        let c = c2.clone();
        async move { c.sync(&key).await }
    });
    Ok(())
}

struct Controller {
    client: kube::Client,
    services: Arc<Informer<Service>>,
    pods: Arc<Informer<Pod>>,
    endpoints: Arc<Informer<Endpoints>>,
}

impl Controller {
    async fn sync(&self, key: &str) -> Result<(), Error> {
        let (ns, name) = informers::split_key(key);
        let api: Api<Endpoints> = Api::namespaced(self.client.clone(), ns);
        let Some(svc) = self.services.get(key) else {
            let Some(current) = self.endpoints.get(key) else { return Ok(()) };
            if is_leader_lock(&current) {
                return Ok(());
            }
            // The Service is gone (this key came from its deletion, from the deletion of
            // the Endpoints, or from the startup sweep): so are its Endpoints, as upstream.
            return match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(e) if controller::api_code(&e) == Some(404) => Ok(()),
                Err(e) => Err(e.into()),
            };
        };
        // A Service without a selector has its Endpoints managed by someone else.
        let Some(selector) = service_selector(&svc) else { return Ok(()) };
        if svc.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let pods: Vec<Arc<Pod>> =
            self.pods.list_namespace(ns).into_iter().filter(|p| selector_matches(selector, p)).collect();
        let mut subsets = desired_subsets(&svc, &pods);
        let truncated = truncate(&mut subsets, MAX_CAPACITY);
        let current = self.endpoints.get(key);
        let labels = endpoints_labels(&svc);
        let mut annotations =
            current.as_ref().and_then(|c| c.metadata.annotations.clone()).unwrap_or_default();
        if truncated {
            annotations.insert(ANNOTATION_OVER_CAPACITY.into(), "truncated".into());
        } else {
            annotations.remove(ANNOTATION_OVER_CAPACITY);
        }
        if let Some(cur) = &current
            && cur.subsets.clone().unwrap_or_default() == subsets
            && cur.metadata.labels.clone().unwrap_or_default() == labels
            && cur.metadata.annotations.clone().unwrap_or_default() == annotations
        {
            return Ok(());
        }
        let mut ep = current.as_deref().cloned().unwrap_or_else(|| Endpoints {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(ns.to_owned()),
                ..ObjectMeta::default()
            },
            ..Endpoints::default()
        });
        ep.subsets = Some(subsets);
        ep.metadata.labels = Some(labels);
        ep.metadata.annotations = Some(annotations).filter(|a| !a.is_empty());
        let result = if current.is_some() {
            api.replace(name, &PostParams::default(), &ep).await
        } else {
            api.create(&PostParams::default(), &ep).await
        };
        match result {
            Ok(_) => Ok(()),
            // The namespace is going away; nothing to keep up to date.
            Err(e) if controller::is_namespace_terminating(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

fn is_leader_lock(ep: &Endpoints) -> bool {
    ep.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(ANNOTATION_LEADER))
}

/// The keys of Endpoints without a Service that are not leader election locks.
fn leftover_keys(endpoints: &[Arc<Endpoints>], service_exists: impl Fn(&str) -> bool) -> Vec<String> {
    endpoints
        .iter()
        .filter(|ep| !is_leader_lock(ep))
        .map(|ep| informers::key_of(ep.as_ref()))
        .filter(|key| !service_exists(key))
        .collect()
}

/// The service's labels plus the headless marker when it has no cluster IP.
fn endpoints_labels(svc: &Service) -> BTreeMap<String, String> {
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    let ip_set = svc
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .is_some_and(|ip| !ip.is_empty() && ip != "None");
    if ip_set {
        labels.remove(LABEL_HEADLESS);
    } else {
        labels.insert(LABEL_HEADLESS.into(), String::new());
    }
    labels
}

/// The IP family the service's addresses are taken from: its first IP family, else its
/// cluster IP's, else (headless without families) each pod's primary IP's.
fn service_family(svc: &Service) -> Option<bool> {
    let spec = svc.spec.as_ref()?;
    if let Some(f) = spec.ip_families.as_ref().and_then(|f| f.first()) {
        return Some(f == "IPv6");
    }
    let ip = spec.cluster_ip.as_deref().filter(|ip| !ip.is_empty() && *ip != "None")?;
    ip.parse::<std::net::IpAddr>().ok().map(|a| a.is_ipv6())
}

fn is_v6(ip: &str) -> Option<bool> {
    ip.parse::<std::net::IpAddr>().ok().map(|a| a.is_ipv6())
}

/// Upstream's `syncService` loop + `RepackSubsets`: one address per selected pod (of the
/// service's family), ready or not, each under the ports that pod resolves; addresses
/// with the same port set share a subset. Terminating pods count only when the service
/// publishes not-ready addresses.
pub fn desired_subsets(svc: &Service, pods: &[Arc<Pod>]) -> Vec<EndpointSubset> {
    let spec = svc.spec.as_ref();
    let publish = spec.and_then(|s| s.publish_not_ready_addresses).unwrap_or(false);
    let svc_name = svc.metadata.name.as_deref().unwrap_or_default();
    let ports = spec.and_then(|s| s.ports.clone()).unwrap_or_default();
    let headless = spec.and_then(|s| s.cluster_ip.as_deref()) == Some("None");
    // Port set (canonical) → (ports, ready addresses, not-ready addresses).
    type Group = (Vec<EndpointPort>, Vec<EndpointAddress>, Vec<EndpointAddress>);
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    for pod in pods {
        let ips = pod_ips(pod);
        if podutil::is_terminal(pod) || ips.is_empty() || (!publish && podutil::is_terminating(pod)) {
            continue;
        }
        let family = service_family(svc).or_else(|| is_v6(&ips[0]));
        let Some(ip) = ips.iter().find(|ip| is_v6(ip) == family) else { continue };
        let pspec = pod.spec.as_ref();
        let addr = EndpointAddress {
            ip: ip.clone(),
            node_name: Some(podutil::node_name(pod).to_owned()).filter(|n| !n.is_empty()),
            hostname: pspec
                .and_then(|s| s.hostname.clone())
                .filter(|h| !h.is_empty() && pspec.and_then(|s| s.subdomain.as_deref()) == Some(svc_name)),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: pod.metadata.namespace.clone(),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
                ..ObjectReference::default()
            }),
        };
        let mut eports: Vec<EndpointPort> = ports
            .iter()
            .filter_map(|sp| {
                Some(EndpointPort {
                    name: sp.name.clone().filter(|n| !n.is_empty()),
                    port: find_port(pod, sp)?,
                    protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                    app_protocol: sp.app_protocol.clone(),
                })
            })
            .collect();
        if eports.is_empty() && !(ports.is_empty() && headless) {
            // No port of the service resolves in this pod (or a non-headless service
            // without ports): nothing to publish.
            continue;
        }
        eports.sort_by(|a, b| (&a.name, a.port, &a.protocol).cmp(&(&b.name, b.port, &b.protocol)));
        let key = eports
            .iter()
            .map(|p| {
                format!(
                    "{}/{}/{}",
                    p.name.as_deref().unwrap_or(""),
                    p.port,
                    p.protocol.as_deref().unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
            .join(",");
        let g = groups.entry(key).or_insert_with(|| (eports, Vec::new(), Vec::new()));
        if publish || podutil::is_ready(pod) { g.1.push(addr) } else { g.2.push(addr) }
    }
    let by_ip = |a: &EndpointAddress, b: &EndpointAddress| {
        (&a.ip, a.target_ref.as_ref().and_then(|r| r.uid.as_ref()))
            .cmp(&(&b.ip, b.target_ref.as_ref().and_then(|r| r.uid.as_ref())))
    };
    groups
        .into_values()
        .map(|(ports, mut ready, mut not_ready)| {
            ready.sort_by(by_ip);
            not_ready.sort_by(by_ip);
            EndpointSubset {
                addresses: Some(ready).filter(|v| !v.is_empty()),
                not_ready_addresses: Some(not_ready).filter(|v| !v.is_empty()),
                ports: Some(ports).filter(|v| !v.is_empty()),
            }
        })
        .collect()
}

/// Upstream's `truncateEndpoints`: keeps at most `max` addresses, ready ones first, each
/// subset keeping its proportional share. Returns whether anything was dropped.
pub fn truncate(subsets: &mut Vec<EndpointSubset>, max: usize) -> bool {
    let count = |v: &Option<Vec<EndpointAddress>>| v.as_ref().map_or(0, Vec::len);
    let ready: usize = subsets.iter().map(|s| count(&s.addresses)).sum();
    let not_ready: usize = subsets.iter().map(|s| count(&s.not_ready_addresses)).sum();
    if ready + not_ready <= max {
        return false;
    }
    let truncate_ready = ready > max;
    let (budget, total) = if truncate_ready { (max, ready) } else { (max - ready, not_ready) };
    let mut left = budget;
    let n = subsets.len();
    for (i, s) in subsets.iter_mut().enumerate() {
        let in_subset = if truncate_ready { count(&s.addresses) } else { count(&s.not_ready_addresses) };
        let mut share = if i == n - 1 { left } else { (in_subset * budget).div_ceil(total.max(1)) };
        share = share.min(left);
        if truncate_ready {
            if let Some(a) = s.addresses.as_mut() {
                a.truncate(share);
            }
            s.not_ready_addresses = None;
            left -= count(&s.addresses);
        } else {
            if let Some(a) = s.not_ready_addresses.as_mut() {
                a.truncate(share);
            }
            left -= count(&s.not_ready_addresses);
        }
        if s.addresses.as_ref().is_some_and(Vec::is_empty) {
            s.addresses = None;
        }
        if s.not_ready_addresses.as_ref().is_some_and(Vec::is_empty) {
            s.not_ready_addresses = None;
        }
    }
    // A subset left with no address at all is invalid to the apiserver.
    subsets.retain(|s| s.addresses.is_some() || s.not_ready_addresses.is_some());
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerPort, PodCondition, PodIP, PodSpec, PodStatus, ServicePort, ServiceSpec,
    };
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn svc(publish: bool) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                selector: Some([("app".to_string(), "web".to_string())].into()),
                cluster_ip: Some("10.0.0.1".into()),
                publish_not_ready_addresses: Some(publish),
                ports: Some(vec![ServicePort {
                    name: Some("http".into()),
                    port: 80,
                    target_port: Some(IntOrString::String("http".into())),
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(name: &str, ip: &str, ready: bool, port: i32, terminating: bool) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(name.into()),
                deletion_timestamp: terminating.then_some(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ),
                ),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                containers: vec![Container {
                    name: "c".into(),
                    ports: Some(vec![ContainerPort {
                        name: Some("http".into()),
                        container_port: port,
                        ..Default::default()
                    }]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
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

    #[test]
    fn subsets_group_by_ports_and_readiness() {
        let pods = vec![
            pod("b", "10.1.0.2", true, 8080, false),
            pod("a", "10.1.0.1", false, 8080, false),
            pod("c", "10.1.0.3", true, 9090, false),
            pod("d", "10.1.0.4", true, 8080, false),
        ];
        let subsets = desired_subsets(&svc(false), &pods);
        assert_eq!(subsets.len(), 2);
        let s8080 = subsets.iter().find(|s| s.ports.as_ref().unwrap()[0].port == 8080).unwrap();
        let ips: Vec<&str> = s8080.addresses.iter().flatten().map(|a| a.ip.as_str()).collect();
        assert_eq!(ips, vec!["10.1.0.2", "10.1.0.4"]);
        assert_eq!(s8080.not_ready_addresses.as_ref().unwrap()[0].ip, "10.1.0.1");
        assert_eq!(s8080.ports.as_ref().unwrap()[0].name.as_deref(), Some("http"));
    }

    #[test]
    fn terminating_pods_only_when_publishing_not_ready() {
        let pods = vec![pod("a", "10.1.0.1", true, 80, true), pod("b", "10.1.0.2", false, 80, false)];
        let s = desired_subsets(&svc(false), &pods);
        assert_eq!(s.len(), 1);
        assert!(s[0].addresses.is_none());
        assert_eq!(s[0].not_ready_addresses.as_ref().unwrap().len(), 1);
        let s = desired_subsets(&svc(true), &pods);
        assert_eq!(s[0].addresses.as_ref().unwrap().len(), 2);
    }

    #[test]
    fn truncation_keeps_ready_first() {
        let pods: Vec<Arc<Pod>> = (0..1200)
            .map(|i| pod(&format!("p{i}"), &format!("10.{}.{}.1", i / 250, i % 250), i < 900, 80, false))
            .collect();
        let mut s = desired_subsets(&svc(false), &pods);
        assert!(truncate(&mut s, MAX_CAPACITY));
        let ready: usize = s.iter().map(|s| s.addresses.as_ref().map_or(0, Vec::len)).sum();
        let not_ready: usize = s.iter().map(|s| s.not_ready_addresses.as_ref().map_or(0, Vec::len)).sum();
        assert_eq!((ready, not_ready), (900, 100));
        assert!(!truncate(&mut s, MAX_CAPACITY));
    }

    #[test]
    fn truncation_drops_emptied_subsets() {
        let addrs = |n: usize, base: &str| -> Option<Vec<EndpointAddress>> {
            Some(
                (0..n).map(|i| EndpointAddress { ip: format!("{base}.{i}"), ..Default::default() }).collect(),
            )
        };
        // Only not-ready addresses in the first subset: truncating the ready ones clears it.
        let mut s = vec![
            EndpointSubset { not_ready_addresses: addrs(5, "10.0.0"), ..Default::default() },
            EndpointSubset { addresses: addrs(12, "10.0.1"), ..Default::default() },
        ];
        assert!(truncate(&mut s, 10));
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].addresses.as_ref().map(Vec::len), Some(10));
        assert!(s.iter().all(|s| s.addresses.is_some() || s.not_ready_addresses.is_some()));
    }

    #[test]
    fn leftovers_skip_services_and_leader_locks() {
        let ep = |name: &str, leader: bool| {
            Arc::new(Endpoints {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some("ns".into()),
                    annotations: leader.then(|| [(ANNOTATION_LEADER.to_string(), "{}".to_string())].into()),
                    ..Default::default()
                },
                ..Default::default()
            })
        };
        let eps = vec![ep("web", false), ep("gone", false), ep("lock", true)];
        assert_eq!(leftover_keys(&eps, |k| k == "ns/web"), vec!["ns/gone".to_string()]);
    }
}
