//! Upstream's conntrack reconciler: for every UDP Service with serving endpoints, any
//! UDP entry sent to one of its addresses (cluster IP, external IPs, load-balancer IPs)
//! and port, or to its NodePort, whose reply does not come from a serving endpoint is
//! stale, and is deleted so the next packet is load-balanced afresh.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::time::Instant;

use super::{Conntrack, Flow};
use crate::endpoint::Endpoint;
use crate::endpointschangetracker::EndpointsMap;
use crate::metrics::Metrics;
use crate::nftables::{Family, Protocol};
use crate::serviceport::{ServicePort, ServicePortMap};

/// The entries [`clean_stale_entries`] would delete from `flows`.
pub fn stale_flows<S: ServicePort, E: Endpoint>(
    flows: &[Flow],
    services: &ServicePortMap<S>,
    endpoints: &EndpointsMap<E>,
) -> Vec<Flow> {
    let mut by_ip_port: HashMap<(IpAddr, u16), HashSet<IpAddr>> = HashMap::new();
    let mut by_node_port: HashMap<u16, HashSet<IpAddr>> = HashMap::new();
    for (name, svc) in services {
        let s = svc.base();
        if s.protocol != Protocol::Udp {
            continue;
        }
        // Changes of policy, topology or termination must not break existing flows, as
        // for TCP: any serving endpoint keeps its entries.
        let ips: HashSet<IpAddr> = endpoints
            .get(name)
            .into_iter()
            .flatten()
            .filter(|e| e.base().serving)
            .map(|e| e.base().ip)
            .collect();
        if ips.is_empty() {
            continue;
        }
        by_ip_port.insert((s.cluster_ip, s.port), ips.clone());
        for ip in s.load_balancer_vips.iter().chain(&s.external_ips) {
            by_ip_port.insert((*ip, s.port), ips.clone());
        }
        if s.node_port != 0 {
            by_node_port.insert(s.node_port, ips);
        }
    }
    flows
        .iter()
        .filter(|f| f.orig.proto == Protocol::Udp.number())
        .filter(|f| {
            let stale_service =
                by_ip_port.get(&(f.orig.dst, f.orig.dst_port)).is_some_and(|eps| !eps.contains(&f.reply.src));
            let stale_node_port =
                by_node_port.get(&f.orig.dst_port).is_some_and(|eps| !eps.contains(&f.reply.src));
            stale_service || stale_node_port
        })
        .copied()
        .collect()
}

/// Lists the family's UDP entries and deletes the stale ones. Failures are logged: the
/// next sync tries again.
pub fn clean_stale_entries<S: ServicePort, E: Endpoint>(
    ct: &mut Conntrack,
    family: Family,
    services: &ServicePortMap<S>,
    endpoints: &EndpointsMap<E>,
    metrics: &Metrics,
) {
    let start = Instant::now();
    let flows = match ct.list(family, Protocol::Udp.number()) {
        Ok(f) => f,
        Err(err) => {
            tracing::error!(%err, ?family, "failed to list conntrack entries");
            return;
        }
    };
    let stale: Vec<_> = stale_flows(&flows, services, endpoints).into_iter().map(|f| f.orig).collect();
    match ct.delete(family, &stale) {
        Ok(n) => {
            metrics.conntrack_reconciler_deleted_entries_total.inc_by(n as u64);
            tracing::debug!(?family, deleted = n, took = ?start.elapsed(), "reconciled conntrack entries");
        }
        Err(err) => tracing::error!(%err, ?family, "failed to clear conntrack entries"),
    }
    metrics.conntrack_reconciler_sync_duration.observe(start.elapsed().as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::super::Tuple;
    use super::*;
    use crate::endpoint::BaseEndpointInfo;
    use crate::serviceport::{BaseServicePortInfo, NamespacedName, ServicePortName};
    use std::sync::Arc;

    struct Svc(BaseServicePortInfo);
    impl ServicePort for Svc {
        fn new(_: &ServicePortName, b: BaseServicePortInfo) -> Self {
            Svc(b)
        }
        fn base(&self) -> &BaseServicePortInfo {
            &self.0
        }
    }
    struct Ep(BaseEndpointInfo);
    impl Endpoint for Ep {
        fn new(b: BaseEndpointInfo, _: &ServicePortName) -> Self {
            Ep(b)
        }
        fn base(&self) -> &BaseEndpointInfo {
            &self.0
        }
    }

    fn flow(dst: &str, dport: u16, reply_src: &str) -> Flow {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        Flow {
            orig: Tuple { src: ip("10.1.0.9"), dst: ip(dst), proto: 17, src_port: 5000, dst_port: dport },
            reply: Tuple { src: ip(reply_src), dst: ip("10.1.0.9"), proto: 17, src_port: 53, dst_port: 5000 },
        }
    }

    #[test]
    fn only_flows_to_departed_endpoints_are_stale() {
        let name = ServicePortName {
            service: NamespacedName::new("ns", "dns"),
            port: "dns".into(),
            protocol: Protocol::Udp,
        };
        let mut services = ServicePortMap::new();
        services.insert(
            name.clone(),
            Arc::new(Svc(BaseServicePortInfo {
                cluster_ip: "172.30.0.10".parse().unwrap(),
                port: 53,
                protocol: Protocol::Udp,
                node_port: 30053,
                load_balancer_vips: vec![],
                load_balancer_source_ranges: vec![],
                external_ips: vec![],
                session_affinity_timeout: None,
                health_check_node_port: 0,
                external_policy_local: false,
                internal_policy_local: false,
            })),
        );
        let mut endpoints = EndpointsMap::new();
        endpoints.insert(name, vec![Arc::new(Ep(BaseEndpointInfo::new("10.0.0.2".parse().unwrap(), 53)))]);
        let flows = vec![
            flow("172.30.0.10", 53, "10.0.0.1"),    // old endpoint: stale
            flow("172.30.0.10", 53, "10.0.0.2"),    // current endpoint
            flow("172.30.0.10", 53, "172.30.0.10"), // never NATed: stale
            flow("192.168.0.5", 30053, "10.0.0.1"), // NodePort to the old endpoint: stale
            flow("8.8.8.8", 53, "8.8.8.8"),         // not ours
        ];
        let stale = stale_flows(&flows, &services, &endpoints);
        assert_eq!(stale, vec![flows[0], flows[2], flows[3]]);
    }
}
