//! Which endpoints of a Service port this node sends traffic to (upstream's
//! `CategorizeEndpoints`): ready endpoints, narrowed to this zone's when the EndpointSlice
//! controller hinted every ready endpoint (topology-aware routing, `trafficDistribution:
//! PreferClose`) and some are hinted for this zone; serving-but-terminating endpoints
//! when none is ready; and this node's own endpoints for `Local` traffic policies.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::endpoint::Endpoint;
use crate::serviceport::BaseServicePortInfo;

/// The node label naming its zone.
pub const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";

/// The endpoints a Service port uses from this node.
pub struct Categorized<E> {
    /// For `Cluster` traffic policy (empty if the Service never uses it).
    pub cluster: Vec<Arc<E>>,
    /// For `Local` traffic policy (empty if the Service never uses it).
    pub local: Vec<Arc<E>>,
    /// Every endpoint reachable from this node under the Service's policies, once each.
    pub all_reachable: Vec<Arc<E>>,
    /// Whether the Service has usable endpoints anywhere in the cluster.
    pub has_any: bool,
}

pub fn categorize_endpoints<E: Endpoint>(
    endpoints: &[Arc<E>],
    svc: &BaseServicePortInfo,
    node_labels: &BTreeMap<String, String>,
) -> Categorized<E> {
    let mut cluster = Vec::new();
    let mut local = Vec::new();
    let mut has_any = false;
    let mut use_topology = false;
    let mut use_serving_terminating = false;

    if svc.uses_cluster_endpoints() {
        let zone = node_labels.get(LABEL_TOPOLOGY_ZONE).map(String::as_str).unwrap_or_default();
        use_topology = can_use_topology(endpoints, zone);
        cluster = endpoints
            .iter()
            .filter(|e| e.base().ready && (!use_topology || e.base().zone_hints.contains(zone)))
            .cloned()
            .collect();
        // No ready endpoint anywhere: fall back to terminating ones still serving, ignoring
        // topology (a best effort not to drop connections).
        if cluster.is_empty() {
            cluster =
                endpoints.iter().filter(|e| e.base().serving && e.base().terminating).cloned().collect();
        }
        has_any = !cluster.is_empty();
    }

    if !svc.uses_local_endpoints() {
        return Categorized { all_reachable: cluster.clone(), cluster, local, has_any };
    }

    let mut has_local_ready = false;
    let mut has_local_serving_terminating = false;
    for e in endpoints {
        let b = e.base();
        if b.ready {
            has_any = true;
            has_local_ready |= b.is_local;
        } else if b.serving && b.terminating {
            has_any = true;
            has_local_serving_terminating |= b.is_local;
        }
    }
    if has_local_ready {
        local = endpoints.iter().filter(|e| e.base().is_local && e.base().ready).cloned().collect();
    } else if has_local_serving_terminating {
        use_serving_terminating = true;
        local = endpoints
            .iter()
            .filter(|e| e.base().is_local && e.base().serving && e.base().terminating)
            .cloned()
            .collect();
    }

    if !svc.uses_cluster_endpoints() {
        return Categorized { all_reachable: local.clone(), cluster, local, has_any };
    }
    if !use_topology && !use_serving_terminating {
        // `local` holds only ready endpoints and `cluster` every ready one: a superset.
        return Categorized { all_reachable: cluster.clone(), cluster, local, has_any };
    }
    // Remote endpoints only in `cluster`, terminating or other-zone local ones only in
    // `local`: merge, keeping the sorted order.
    let mut merged: BTreeMap<&str, Arc<E>> = BTreeMap::new();
    for e in cluster.iter().chain(&local) {
        merged.insert(&e.base().endpoint, e.clone());
    }
    let all_reachable = merged.into_values().collect();
    Categorized { cluster, local, all_reachable, has_any }
}

/// Topology-aware routing applies when every ready endpoint has zone hints and at least
/// one is hinted for this node's zone.
fn can_use_topology<E: Endpoint>(endpoints: &[Arc<E>], zone: &str) -> bool {
    if zone.is_empty() {
        return false;
    }
    let mut has_endpoint_for_zone = false;
    for e in endpoints.iter().filter(|e| e.base().ready) {
        if e.base().zone_hints.is_empty() {
            return false;
        }
        has_endpoint_for_zone |= e.base().zone_hints.contains(zone);
    }
    has_endpoint_for_zone
}

/// Labels are compared as a whole when the Node changes.
pub type NodeLabels = BTreeMap<String, String>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::BaseEndpointInfo;
    use crate::nftables::Protocol;
    use crate::serviceport::ServicePortName;

    struct Ep(BaseEndpointInfo);
    impl Endpoint for Ep {
        fn new(base: BaseEndpointInfo, _: &ServicePortName) -> Self {
            Ep(base)
        }
        fn base(&self) -> &BaseEndpointInfo {
            &self.0
        }
    }

    fn ep(ip: &str, ready: bool, serving: bool, terminating: bool, local: bool, zones: &[&str]) -> Arc<Ep> {
        let mut b = BaseEndpointInfo::new(ip.parse().unwrap(), 80);
        b.ready = ready;
        b.serving = serving;
        b.terminating = terminating;
        b.is_local = local;
        b.zone_hints = zones.iter().map(|z| z.to_string()).collect();
        Arc::new(Ep(b))
    }

    fn svc(internal_local: bool, external_local: bool, node_port: u16) -> BaseServicePortInfo {
        BaseServicePortInfo {
            cluster_ip: "172.30.0.1".parse().unwrap(),
            port: 80,
            protocol: Protocol::Tcp,
            node_port,
            load_balancer_vips: vec![],
            load_balancer_source_ranges: vec![],
            external_ips: vec![],
            session_affinity_timeout: None,
            health_check_node_port: 0,
            external_policy_local: external_local,
            internal_policy_local: internal_local,
        }
    }

    fn ips(eps: &[Arc<Ep>]) -> Vec<String> {
        eps.iter().map(|e| e.0.ip.to_string()).collect()
    }

    #[test]
    fn topology_hints_narrow_cluster_endpoints() {
        let eps = vec![
            ep("10.0.0.1", true, true, false, false, &["a"]),
            ep("10.0.0.2", true, true, false, false, &["b"]),
        ];
        let labels: NodeLabels = [(LABEL_TOPOLOGY_ZONE.to_string(), "a".to_string())].into();
        let c = categorize_endpoints(&eps, &svc(false, false, 0), &labels);
        assert_eq!(ips(&c.cluster), vec!["10.0.0.1"]);
        // An endpoint without hints turns topology off.
        let mut eps2 = eps.clone();
        eps2.push(ep("10.0.0.3", true, true, false, false, &[]));
        let c = categorize_endpoints(&eps2, &svc(false, false, 0), &labels);
        assert_eq!(c.cluster.len(), 3);
        // No hint for this node's zone turns it off too.
        let labels_c: NodeLabels = [(LABEL_TOPOLOGY_ZONE.to_string(), "c".to_string())].into();
        assert_eq!(categorize_endpoints(&eps, &svc(false, false, 0), &labels_c).cluster.len(), 2);
    }

    #[test]
    fn terminating_fallback_and_local_policy() {
        let eps = vec![
            ep("10.0.0.1", false, true, true, true, &[]),
            ep("10.0.0.2", false, false, true, false, &[]),
        ];
        let c = categorize_endpoints(&eps, &svc(false, false, 0), &NodeLabels::new());
        assert_eq!(ips(&c.cluster), vec!["10.0.0.1"]);
        assert!(c.has_any);
        // externalTrafficPolicy Local with a NodePort: both lists, merged.
        let eps =
            vec![ep("10.0.0.1", true, true, false, false, &[]), ep("10.0.0.2", false, true, true, true, &[])];
        let c = categorize_endpoints(&eps, &svc(false, true, 30000), &NodeLabels::new());
        assert_eq!(ips(&c.cluster), vec!["10.0.0.1"]);
        assert_eq!(ips(&c.local), vec!["10.0.0.2"]);
        assert_eq!(ips(&c.all_reachable), vec!["10.0.0.1", "10.0.0.2"]);
        // internalTrafficPolicy Local without local endpoints: none, but some exist.
        let eps = vec![ep("10.0.0.1", true, true, false, false, &[])];
        let c = categorize_endpoints(&eps, &svc(true, false, 0), &NodeLabels::new());
        assert!(c.local.is_empty() && c.all_reachable.is_empty() && c.has_any);
    }
}
