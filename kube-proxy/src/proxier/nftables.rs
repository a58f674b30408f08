//! The nftables proxier (upstream's `pkg/proxy/nftables`): one table `kube-proxy` per IP
//! family. Base chains hook prerouting/input/forward/output/postrouting and jump to
//! regular chains; Service dispatch is a verdict-map lookup keyed by `daddr . l4proto .
//! dport` (`@service-ips`) or `l4proto . dport` (`@service-nodeports`), so it costs the
//! same for ten Services or ten thousand. Each Service port has a chain picking an
//! endpoint chain with one `numgen random mod N-i 0 goto` rule per endpoint; each endpoint chain DNATs. Services
//! without endpoints are rejected (or dropped, for `Local` policies) from
//! `@no-endpoint-services` / `@no-endpoint-nodeports` in the filter hooks.
//!
//! A full sync rewrites everything; a partial sync rewrites only the chains of Services
//! whose ports or endpoints changed, plus the map elements that differ from what was last
//! written. Chains that become unused are flushed at once and deleted a second later
//! (older kernels notice only with a delay that a map element no longer refers to them).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Backend, SyncContext, SyncStats, hash_base32};
use crate::cidr::Cidr;
use crate::endpoint::{BaseEndpointInfo, Endpoint};
use crate::localdetector::LocalDetector;
use crate::metrics::Metrics;
use crate::nftables::{
    BaseChain, Chain, ChainType, DNAT_PRIORITY, Dir, Element, Family, Hook, Interface, KeyType, KeyValue, Op,
    SNAT_PRIORITY, Set, Stmt, Transaction, Verdict,
};
use crate::nodeport_addresses::NodePortAddresses;
use crate::serviceport::{BaseServicePortInfo, ServicePort, ServicePortName};
use crate::topology::categorize_endpoints;

/// Our table; everything in it is ours, so names need no prefix.
pub const KUBE_PROXY_TABLE: &str = "kube-proxy";

const FILTER_PREROUTING: &str = "filter-prerouting";
const FILTER_INPUT: &str = "filter-input";
const FILTER_FORWARD: &str = "filter-forward";
const FILTER_OUTPUT: &str = "filter-output";
const FILTER_OUTPUT_POST_DNAT: &str = "filter-output-post-dnat";
const NAT_PREROUTING: &str = "nat-prerouting";
const NAT_OUTPUT: &str = "nat-output";
const NAT_POSTROUTING: &str = "nat-postrouting";

const SERVICES_CHAIN: &str = "services";
const SERVICE_IPS_MAP: &str = "service-ips";
const SERVICE_NODEPORTS_MAP: &str = "service-nodeports";
const NODEPORT_IPS_SET: &str = "nodeport-ips";
const CLUSTER_IPS_SET: &str = "cluster-ips";
const SERVICE_ENDPOINTS_CHECK_CHAIN: &str = "service-endpoints-check";
const NODEPORT_ENDPOINTS_CHECK_CHAIN: &str = "nodeport-endpoints-check";
const NO_ENDPOINT_SERVICES_MAP: &str = "no-endpoint-services";
const NO_ENDPOINT_NODEPORTS_MAP: &str = "no-endpoint-nodeports";
const REJECT_CHAIN: &str = "reject-chain";
const CLUSTER_IPS_CHECK_CHAIN: &str = "cluster-ips-check";
const FIREWALL_IPS_MAP: &str = "firewall-ips";
const FIREWALL_CHECK_CHAIN: &str = "firewall-check";
const MARK_MASQ_CHAIN: &str = "mark-for-masquerade";
const MASQUERADING_CHAIN: &str = "masquerading";

/// Base chains: filter chains run before DNAT, so they see the Service address.
const BASE_CHAINS: &[(&str, ChainType, Hook, i32)] = &[
    (FILTER_PREROUTING, ChainType::Filter, Hook::Prerouting, DNAT_PRIORITY - 10),
    (FILTER_INPUT, ChainType::Filter, Hook::Input, DNAT_PRIORITY - 10),
    (FILTER_FORWARD, ChainType::Filter, Hook::Forward, DNAT_PRIORITY - 10),
    (FILTER_OUTPUT, ChainType::Filter, Hook::Output, DNAT_PRIORITY - 10),
    (FILTER_OUTPUT_POST_DNAT, ChainType::Filter, Hook::Output, DNAT_PRIORITY + 10),
    (NAT_PREROUTING, ChainType::Nat, Hook::Prerouting, DNAT_PRIORITY),
    (NAT_OUTPUT, ChainType::Nat, Hook::Output, DNAT_PRIORITY),
    (NAT_POSTROUTING, ChainType::Nat, Hook::Postrouting, SNAT_PRIORITY),
];

/// (destination, source, only for new connections). `reject` is not allowed in
/// prerouting on older kernels, so the endpoint checks hang off input/forward/output.
const JUMP_CHAINS: &[(&str, &str, bool)] = &[
    (NODEPORT_ENDPOINTS_CHECK_CHAIN, FILTER_INPUT, true),
    (SERVICE_ENDPOINTS_CHECK_CHAIN, FILTER_INPUT, true),
    (SERVICE_ENDPOINTS_CHECK_CHAIN, FILTER_FORWARD, true),
    (SERVICE_ENDPOINTS_CHECK_CHAIN, FILTER_OUTPUT, true),
    (FIREWALL_CHECK_CHAIN, FILTER_PREROUTING, true),
    (FIREWALL_CHECK_CHAIN, FILTER_OUTPUT, true),
    (SERVICES_CHAIN, NAT_OUTPUT, false),
    (SERVICES_CHAIN, NAT_PREROUTING, false),
    (MASQUERADING_CHAIN, NAT_POSTROUTING, false),
    (CLUSTER_IPS_CHECK_CHAIN, FILTER_FORWARD, true),
    (CLUSTER_IPS_CHECK_CHAIN, FILTER_OUTPUT_POST_DNAT, true),
];

/// Longest chain-name prefix we use ("external-" and friends), with room to spare.
const CHAIN_NAME_PREFIX_MAX: usize = 16;
const CHAIN_NAME_BASE_MAX: usize = crate::nftables::NAME_LENGTH_MAX - CHAIN_NAME_PREFIX_MAX;

/// `HASH-name`, cut to fit a chain name: the hash keeps truncated names unique and makes
/// near-identical names easy to tell apart.
fn hash_and_truncate(name: &str) -> String {
    let mut s = format!("{}-{name}", hash_base32(name, 8));
    if s.len() > CHAIN_NAME_BASE_MAX {
        s.truncate(CHAIN_NAME_BASE_MAX - 3);
        s.push_str("...");
    }
    s
}

/// `HASH-ns/name/proto/port`; `/` cannot appear in the parts, so it separates them.
fn service_chain_base(name: &ServicePortName) -> String {
    hash_and_truncate(&format!(
        "{}/{}/{}/{}",
        name.service.namespace,
        name.service.name,
        name.protocol.name(),
        name.port
    ))
}

/// `HASH-ns/name/proto/port__ip/port`, IPv6 colons turned into dots.
fn endpoint_chain_base(name: &ServicePortName, ip: &IpAddr, port: u16) -> String {
    let ip = ip.to_string().replace(':', ".");
    hash_and_truncate(&format!(
        "{}/{}/{}/{}__{ip}/{port}",
        name.service.namespace,
        name.service.name,
        name.protocol.name(),
        name.port
    ))
}

/// Service and endpoint chains always have a `/`; our fixed chains never do.
fn is_service_chain(name: &str) -> bool {
    name.contains('/')
}

fn is_affinity_set(name: &str) -> bool {
    name.starts_with("affinity-")
}

/// A Service port with its chain names, computed once per change.
pub struct ServiceInfo {
    base: BaseServicePortInfo,
    name_string: String,
    cluster_policy_chain: String,
    local_policy_chain: String,
    external_chain: String,
    firewall_chain: String,
}

impl ServicePort for ServiceInfo {
    fn new(name: &ServicePortName, base: BaseServicePortInfo) -> Self {
        let b = service_chain_base(name);
        ServiceInfo {
            base,
            name_string: name.to_string(),
            cluster_policy_chain: format!("service-{b}"),
            local_policy_chain: format!("local-{b}"),
            external_chain: format!("external-{b}"),
            firewall_chain: format!("firewall-{b}"),
        }
    }

    fn base(&self) -> &BaseServicePortInfo {
        &self.base
    }
}

/// An endpoint with its chain and affinity-set names.
pub struct EndpointInfo {
    base: BaseEndpointInfo,
    chain: String,
    affinity_set: String,
}

impl Endpoint for EndpointInfo {
    fn new(base: BaseEndpointInfo, service: &ServicePortName) -> Self {
        let b = endpoint_chain_base(service, &base.ip, base.port);
        EndpointInfo { chain: format!("endpoint-{b}"), affinity_set: format!("affinity-{b}"), base }
    }

    fn base(&self) -> &BaseEndpointInfo {
        &self.base
    }
}

/// Maps rebuilt or walked on every sync, one entry per Service port or element: a fast
/// hasher, since a partial sync at 10k Services walks them all.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// What we last wrote to one set or map, so a partial sync adds and deletes only the
/// elements that differ (upstream's `nftElementStorage`).
struct ElementStorage {
    set: &'static str,
    /// Element -> (its value, the sync that last ensured it).
    elements: FastMap<Vec<KeyValue>, (Option<Verdict>, u64)>,
    /// The current sync: elements not ensured in it are deleted at its end.
    generation: u64,
}

impl ElementStorage {
    fn new(set: &'static str) -> Self {
        Self { set, elements: FastMap::default(), generation: 0 }
    }

    /// Flushes the set and forgets its elements (a full sync).
    fn reset(&mut self, tx: &mut Transaction) {
        self.elements.clear();
        self.generation += 1;
        tx.push(Op::FlushSet(self.set.to_owned()));
    }

    /// Starts a sync: every element is leftover until ensured.
    fn begin(&mut self) {
        self.generation += 1;
    }

    fn ensure(
        &mut self,
        tx: &mut Transaction,
        key: Vec<KeyValue>,
        value: Option<Verdict>,
        comment: Option<&str>,
    ) {
        let generation = self.generation;
        let elem = |key: Vec<KeyValue>, value: Option<Verdict>| Element {
            set: self.set.to_owned(),
            key,
            value,
            comment: comment.map(String::from),
        };
        match self.elements.get_mut(&key) {
            Some((existing, seen)) if *existing == value => *seen = generation,
            Some((existing, seen)) => {
                *existing = value.clone();
                *seen = generation;
                tx.push(Op::DeleteElement(elem(key.clone(), None)));
                tx.push(Op::AddElement(elem(key, value)));
            }
            None => {
                tx.push(Op::AddElement(elem(key.clone(), value.clone())));
                self.elements.insert(key, (value, generation));
            }
        }
    }

    /// Deletes what this sync did not ensure.
    fn cleanup(&mut self, tx: &mut Transaction) {
        let (set, generation) = (self.set, self.generation);
        self.elements.retain(|key, (_, seen)| {
            if *seen == generation {
                return true;
            }
            tx.push(Op::DeleteElement(Element {
                set: set.to_owned(),
                key: key.clone(),
                value: None,
                comment: None,
            }));
            false
        });
    }
}

/// Where node addresses come from (rtnetlink in production, a list in tests).
pub type AddressSource = Box<dyn Fn() -> std::io::Result<Vec<IpAddr>> + Send>;

/// Settings of one family's nftables proxier.
pub struct Config {
    pub masquerade_all: bool,
    /// The fwmark bit for "masquerade this" (default 14).
    pub masquerade_bit: u32,
    pub local_detector: LocalDetector,
    /// This node's IP of the family (allows node-originated traffic through source ranges).
    pub node_ip: Option<IpAddr>,
    pub node_port_addresses: NodePortAddresses,
    /// Allocated Service CIDRs: traffic to unallocated cluster IPs in them is dropped.
    pub service_cidrs: Vec<Cidr>,
}

/// One family's nftables writer.
pub struct NftablesBackend {
    family: Family,
    nft: Box<dyn Interface>,
    config: Config,
    mark: u32,
    addresses: AddressSource,
    metrics: Metrics,
    /// Base chains are recreated once per process, so a changed priority takes effect.
    flushed: bool,
    /// Flushed chains to delete once they have been unreferenced for a second.
    stale_chains: HashMap<String, Instant>,
    cluster_ips: ElementStorage,
    service_ips: ElementStorage,
    firewall_ips: ElementStorage,
    no_endpoint_services: ElementStorage,
    no_endpoint_nodeports: ElementStorage,
    service_nodeports: ElementStorage,
    /// Per Service port, the chains and affinity sets its last successful write used, to
    /// find what a partial sync leaves unused.
    owned: FastMap<ServicePortName, (Vec<String>, Vec<String>)>,
}

impl NftablesBackend {
    pub fn new(nft: Box<dyn Interface>, config: Config, addresses: AddressSource, metrics: Metrics) -> Self {
        NftablesBackend {
            family: nft.family(),
            nft,
            mark: 1u32 << config.masquerade_bit,
            config,
            addresses,
            metrics,
            flushed: false,
            stale_chains: HashMap::new(),
            cluster_ips: ElementStorage::new(CLUSTER_IPS_SET),
            service_ips: ElementStorage::new(SERVICE_IPS_MAP),
            firewall_ips: ElementStorage::new(FIREWALL_IPS_MAP),
            no_endpoint_services: ElementStorage::new(NO_ENDPOINT_SERVICES_MAP),
            no_endpoint_nodeports: ElementStorage::new(NO_ENDPOINT_NODEPORTS_MAP),
            service_nodeports: ElementStorage::new(SERVICE_NODEPORTS_MAP),
            owned: FastMap::default(),
        }
    }

    /// The interface under the backend (tests read the fake's dump through it).
    pub fn nft(&mut self) -> &mut dyn Interface {
        self.nft.as_mut()
    }

    fn storages(&mut self) -> [&mut ElementStorage; 6] {
        [
            &mut self.cluster_ips,
            &mut self.service_ips,
            &mut self.firewall_ips,
            &mut self.no_endpoint_services,
            &mut self.no_endpoint_nodeports,
            &mut self.service_nodeports,
        ]
    }

    /// The fixed part of the table, written on full syncs.
    fn setup(
        &mut self,
        tx: &mut Transaction,
        created: &mut HashSet<String>,
        existing: Option<&HashSet<String>>,
    ) {
        let addr_type = self.family.addr_type();
        let no_localhost = match self.family {
            Family::Ip => {
                Stmt::Addr { dir: Dir::Dst, negate: true, addr: "127.0.0.0".parse().expect("ip"), prefix: 8 }
            }
            Family::Ip6 => {
                Stmt::Addr { dir: Dir::Dst, negate: true, addr: "::1".parse().expect("ip"), prefix: 128 }
            }
        };
        tx.push(Op::AddTable { comment: Some("rules for kube-proxy".into()) });
        if !self.flushed {
            for (name, ..) in BASE_CHAINS {
                tx.push(Op::AddChain(Chain::regular(*name)));
                tx.push(Op::DeleteChain((*name).to_owned()));
            }
        }
        for (name, kind, hook, priority) in BASE_CHAINS {
            tx.push(Op::AddChain(Chain {
                name: (*name).to_owned(),
                base: Some(BaseChain { kind: *kind, hook: *hook, priority: *priority }),
                comment: None,
            }));
            // Just recreated chains are empty.
            if self.flushed {
                tx.flush_chain(*name);
            }
        }
        for (dst, src, new_only) in JUMP_CHAINS {
            ensure_chain(tx, created, existing, dst);
            let mut stmts = Vec::new();
            if *new_only {
                stmts.push(Stmt::CtStateNew);
            }
            stmts.push(Stmt::jump(*dst));
            tx.add_rule(src, stmts);
        }
        for c in [SERVICES_CHAIN, CLUSTER_IPS_CHECK_CHAIN, MASQUERADING_CHAIN, MARK_MASQ_CHAIN] {
            ensure_chain(tx, created, existing, c);
        }
        tx.add_rule(MARK_MASQ_CHAIN, vec![Stmt::MarkSetOr(self.mark)]);
        tx.add_rule(MASQUERADING_CHAIN, vec![Stmt::MarkUnset(self.mark), Stmt::Verdict(Verdict::Return)]);
        tx.add_rule(MASQUERADING_CHAIN, vec![Stmt::MarkSetXor(self.mark)]);
        tx.add_rule(MASQUERADING_CHAIN, vec![Stmt::Masquerade]);

        tx.push(Op::AddSet(Set::new(CLUSTER_IPS_SET, vec![addr_type], Some("Active ClusterIPs"))));
        tx.add_rule_with_comment(
            CLUSTER_IPS_CHECK_CHAIN,
            vec![Stmt::AddrInSet { dir: Dir::Dst, set: CLUSTER_IPS_SET.into() }, Stmt::Reject],
            "Reject traffic to invalid ports of ClusterIPs",
        );
        for cidr in self.config.service_cidrs.iter().filter(|c| Family::of(&c.addr) == self.family) {
            let n = cidr.network();
            tx.add_rule_with_comment(
                CLUSTER_IPS_CHECK_CHAIN,
                vec![
                    Stmt::Addr { dir: Dir::Dst, negate: false, addr: n.addr, prefix: n.prefix },
                    Stmt::Verdict(Verdict::Drop),
                ],
                "Drop traffic to unallocated ClusterIPs",
            );
        }

        // The NodePort addresses set exists only when NodePorts are not on every address
        // ("add" first, so the delete cannot fail on a missing set).
        tx.push(Op::AddSet(Set::new(
            NODEPORT_IPS_SET,
            vec![addr_type],
            Some("IPs that accept NodePort traffic"),
        )));
        let match_all = self.config.node_port_addresses.match_all();
        if match_all {
            tx.push(Op::DeleteSet(NODEPORT_IPS_SET.into()));
        } else {
            tx.push(Op::FlushSet(NODEPORT_IPS_SET.into()));
            match (self.addresses)() {
                Ok(addrs) => {
                    for ip in self.config.node_port_addresses.node_ips(&addrs) {
                        if ip.is_loopback() {
                            tracing::error!(address = %ip, "--nodeport-addresses includes localhost but localhost NodePorts are not supported");
                            continue;
                        }
                        tx.push(Op::AddElement(Element {
                            set: NODEPORT_IPS_SET.into(),
                            key: vec![KeyValue::Addr(ip)],
                            value: None,
                            comment: None,
                        }));
                    }
                }
                Err(err) => {
                    tracing::error!(%err, cidrs = ?self.config.node_port_addresses.cidrs(), "failed to get node IP addresses matching nodeport CIDRs, services with nodeport may not work as intended")
                }
            }
        }

        let ip_proto_port = vec![addr_type, KeyType::InetProto, KeyType::InetService];
        let proto_port = vec![KeyType::InetProto, KeyType::InetService];
        tx.push(Op::AddSet(Set::verdict_map(
            NO_ENDPOINT_SERVICES_MAP,
            ip_proto_port.clone(),
            Some("vmap to drop or reject packets to services with no endpoints"),
        )));
        tx.push(Op::AddSet(Set::verdict_map(
            NO_ENDPOINT_NODEPORTS_MAP,
            proto_port.clone(),
            Some("vmap to drop or reject packets to service nodeports with no endpoints"),
        )));
        tx.push(Op::AddChain(Chain {
            name: REJECT_CHAIN.into(),
            base: None,
            comment: Some("helper for @no-endpoint-services / @no-endpoint-nodeports".into()),
        }));
        tx.flush_chain(REJECT_CHAIN);
        tx.add_rule(REJECT_CHAIN, vec![Stmt::Reject]);
        tx.add_rule(
            SERVICE_ENDPOINTS_CHECK_CHAIN,
            vec![Stmt::DaddrProtoPortVmap(NO_ENDPOINT_SERVICES_MAP.into())],
        );
        let nodeport_dst = if match_all {
            no_localhost.clone()
        } else {
            Stmt::AddrInSet { dir: Dir::Dst, set: NODEPORT_IPS_SET.into() }
        };
        tx.add_rule(
            NODEPORT_ENDPOINTS_CHECK_CHAIN,
            vec![nodeport_dst.clone(), Stmt::ProtoPortVmap(NO_ENDPOINT_NODEPORTS_MAP.into())],
        );

        tx.push(Op::AddSet(Set::verdict_map(
            FIREWALL_IPS_MAP,
            ip_proto_port.clone(),
            Some("destinations that are subject to LoadBalancerSourceRanges"),
        )));
        ensure_chain(tx, created, existing, FIREWALL_CHECK_CHAIN);
        tx.add_rule(FIREWALL_CHECK_CHAIN, vec![Stmt::DaddrProtoPortVmap(FIREWALL_IPS_MAP.into())]);

        tx.push(Op::AddSet(Set::verdict_map(
            SERVICE_IPS_MAP,
            ip_proto_port,
            Some("ClusterIP, ExternalIP and LoadBalancer IP traffic"),
        )));
        tx.push(Op::AddSet(Set::verdict_map(SERVICE_NODEPORTS_MAP, proto_port, Some("NodePort traffic"))));
        tx.add_rule(SERVICES_CHAIN, vec![Stmt::DaddrProtoPortVmap(SERVICE_IPS_MAP.into())]);
        let mut nodeports = Vec::new();
        if match_all {
            nodeports.push(Stmt::FibLocal(Dir::Dst));
        }
        nodeports.push(nodeport_dst);
        nodeports.push(Stmt::ProtoPortVmap(SERVICE_NODEPORTS_MAP.into()));
        tx.add_rule(SERVICES_CHAIN, nodeports);

        for s in self.storages() {
            s.reset(tx);
        }
    }

    /// The rules sending a Service's chain to its endpoints: affinity first, then a
    /// random pick.
    fn service_to_endpoint_rules(
        tx: &mut Transaction,
        svc: &ServiceInfo,
        chain: &str,
        eps: &[Arc<EndpointInfo>],
    ) {
        if svc.base.session_affinity_timeout.is_some() {
            for ep in eps {
                tx.add_rule(
                    chain,
                    vec![
                        Stmt::AddrInSet { dir: Dir::Src, set: ep.affinity_set.clone() },
                        Stmt::goto(&ep.chain),
                    ],
                );
            }
        }
        // Endpoint i of N is taken with probability 1/(N-i) once 0..i were passed over:
        // 1/N each in all.
        let n = eps.len();
        for (i, ep) in eps.iter().enumerate() {
            let mut stmts = Vec::with_capacity(2);
            if i + 1 < n {
                stmts.push(Stmt::NumgenPick((n - i) as u32));
            }
            stmts.push(Stmt::goto(&ep.chain));
            tx.add_rule(chain, stmts);
        }
    }

    fn write(&mut self, ctx: &SyncContext<'_, ServiceInfo, EndpointInfo>) -> Result<SyncStats, String> {
        let start = Instant::now();
        let partial = !ctx.full;
        let mut stats = SyncStats::default();

        // Chains flushed a while ago can go now.
        if !self.stale_chains.is_empty() {
            let cutoff = start - Duration::from_secs(1);
            let due: Vec<String> =
                self.stale_chains.iter().filter(|(_, t)| **t <= cutoff).map(|(c, _)| c.clone()).collect();
            if !due.is_empty() {
                let mut tx = Transaction::new();
                for c in &due {
                    tx.push(Op::DeleteChain(c.clone()));
                }
                match self.nft.run(&tx) {
                    Ok(()) => {
                        tracing::debug!(chains = due.len(), "deleted stale nftables chains");
                        for c in &due {
                            self.stale_chains.remove(c);
                        }
                    }
                    Err(err) => {
                        tracing::error!(%err, "unable to delete stale chains; will retry later");
                        self.metrics.nftables_cleanup_failures_total.inc();
                    }
                }
            }
        }

        // A full sync starts from what the kernel has: leftovers of an earlier run too.
        let (existing_chains, existing_sets): (HashSet<String>, HashSet<String>) = if partial {
            (HashSet::new(), HashSet::new())
        } else {
            let chains = match self.nft.list_chains() {
                Ok(c) => c.into_iter().collect(),
                Err(e) if e.is_not_found() => HashSet::new(),
                Err(e) => return Err(format!("listing nftables chains: {e}")),
            };
            let sets = match self.nft.list_sets() {
                Ok(s) => s.into_iter().collect(),
                Err(e) if e.is_not_found() => HashSet::new(),
                Err(e) => return Err(format!("listing nftables sets: {e}")),
            };
            (chains, sets)
        };

        let mut tx = Transaction::new();
        let mut created: HashSet<String> = HashSet::new();
        let existing = ctx.full.then_some(&existing_chains);
        if ctx.full {
            self.setup(&mut tx, &mut created, existing);
            self.owned.clear();
        } else {
            for s in self.storages() {
                s.begin();
            }
        }

        let addr_type = self.family.addr_type();
        // The chains and sets of the Service ports written in this sync (all of them on a
        // full sync; the changed ones on a partial sync).
        let mut owned_now: FastMap<ServicePortName, (Vec<String>, Vec<String>)> = FastMap::default();
        let no_eps: Vec<Arc<EndpointInfo>> = Vec::new();

        for (name, svc) in ctx.services.iter() {
            let s = &svc.base;
            let proto = s.protocol;
            let eps = ctx.endpoints.get(name).unwrap_or(&no_eps);
            let cat = categorize_endpoints(eps, s, ctx.node_labels);
            let skip = partial && !ctx.updated.contains(&name.service);

            let mut chains: Vec<String> = Vec::new();
            let mut affinity_sets: Vec<String> = Vec::new();
            let mut use_chain = |tx: &mut Transaction, c: &str, chains: &mut Vec<String>| {
                if !skip {
                    ensure_chain(tx, &mut created, existing, c);
                    chains.push(c.to_owned());
                }
            };
            for ep in &cat.all_reachable {
                use_chain(&mut tx, &ep.chain, &mut chains);
                if !skip && s.session_affinity_timeout.is_some() {
                    affinity_sets.push(ep.affinity_set.clone());
                }
            }
            let cluster_chain = &svc.cluster_policy_chain;
            let uses_cluster_chain = !cat.cluster.is_empty() && s.uses_cluster_endpoints();
            if uses_cluster_chain {
                use_chain(&mut tx, cluster_chain, &mut chains);
            }
            let local_chain = &svc.local_policy_chain;
            let uses_local_chain = !cat.local.is_empty() && s.uses_local_endpoints();
            if uses_local_chain {
                use_chain(&mut tx, local_chain, &mut chains);
            }

            let mut internal_chain = cluster_chain;
            let mut has_internal = cat.has_any;
            if s.internal_policy_local {
                internal_chain = local_chain;
                has_internal = !cat.local.is_empty();
            }
            let mut external_policy_chain = cluster_chain;
            let mut has_external = cat.has_any;
            if s.external_policy_local {
                external_policy_chain = local_chain;
                has_external = !cat.local.is_empty();
            }
            let external_chain = &svc.external_chain;
            // Even with no endpoint for external traffic, local traffic still short-circuits.
            let uses_external_chain = cat.has_any && s.externally_accessible();
            if uses_external_chain {
                use_chain(&mut tx, external_chain, &mut chains);
            }

            let (internal_filter, external_filter) = if !cat.has_any {
                (Some(Verdict::Goto(REJECT_CHAIN.into())), Some(Verdict::Goto(REJECT_CHAIN.into())))
            } else {
                let i = (!has_internal).then_some(Verdict::Drop);
                let e = (!has_external).then_some(Verdict::Drop);
                if i.is_some() {
                    stats.no_local_internal += 1;
                }
                if e.is_some() {
                    stats.no_local_external += 1;
                }
                (i, e)
            };
            let key = |ip: IpAddr, port: u16| {
                vec![KeyValue::Addr(ip), KeyValue::Proto(proto), KeyValue::Port(port)]
            };
            let comment = Some(svc.name_string.as_str());

            self.cluster_ips.ensure(&mut tx, vec![KeyValue::Addr(s.cluster_ip)], None, None);
            if has_internal {
                self.service_ips.ensure(
                    &mut tx,
                    key(s.cluster_ip, s.port),
                    Some(Verdict::Goto(internal_chain.clone())),
                    None,
                );
            } else {
                self.no_endpoint_services.ensure(
                    &mut tx,
                    key(s.cluster_ip, s.port),
                    internal_filter.clone(),
                    comment,
                );
            }

            for ip in &s.external_ips {
                if cat.has_any {
                    self.service_ips.ensure(
                        &mut tx,
                        key(*ip, s.port),
                        Some(Verdict::Goto(external_chain.clone())),
                        None,
                    );
                }
                if !has_external {
                    self.no_endpoint_services.ensure(
                        &mut tx,
                        key(*ip, s.port),
                        external_filter.clone(),
                        comment,
                    );
                }
            }

            let uses_fw_chain = !s.load_balancer_vips.is_empty() && !s.load_balancer_source_ranges.is_empty();
            let fw_chain = &svc.firewall_chain;
            if uses_fw_chain {
                use_chain(&mut tx, fw_chain, &mut chains);
            }
            for ip in &s.load_balancer_vips {
                if cat.has_any {
                    self.service_ips.ensure(
                        &mut tx,
                        key(*ip, s.port),
                        Some(Verdict::Goto(external_chain.clone())),
                        None,
                    );
                }
                if uses_fw_chain {
                    self.firewall_ips.ensure(
                        &mut tx,
                        key(*ip, s.port),
                        Some(Verdict::Goto(fw_chain.clone())),
                        None,
                    );
                }
            }
            if !has_external {
                for ip in &s.load_balancer_vips {
                    self.no_endpoint_services.ensure(
                        &mut tx,
                        key(*ip, s.port),
                        external_filter.clone(),
                        comment,
                    );
                }
            }

            if s.node_port != 0 {
                let np = vec![KeyValue::Proto(proto), KeyValue::Port(s.node_port)];
                if cat.has_any {
                    // NodePorts are not subject to loadBalancerSourceRanges (as upstream).
                    self.service_nodeports.ensure(
                        &mut tx,
                        np.clone(),
                        Some(Verdict::Goto(external_chain.clone())),
                        None,
                    );
                }
                if !has_external {
                    self.no_endpoint_nodeports.ensure(&mut tx, np, external_filter.clone(), comment);
                }
            }

            if skip {
                // Unchanged: its chains stay as written (and in `self.owned`).
                continue;
            }

            if has_internal {
                let mut m = vec![Stmt::daddr(s.cluster_ip), Stmt::Dport(proto, s.port)];
                if self.config.masquerade_all {
                    m.push(Stmt::jump(MARK_MASQ_CHAIN));
                    tx.add_rule(internal_chain, m);
                } else if self.config.local_detector.is_implemented() {
                    // Off-cluster traffic to a cluster IP (a static route to the Service
                    // range) may be answered from another node: masquerade it.
                    m.extend(self.config.local_detector.if_not_local_nft());
                    m.push(Stmt::jump(MARK_MASQ_CHAIN));
                    tx.add_rule(internal_chain, m);
                }
            }

            if uses_external_chain {
                if !s.external_policy_local {
                    // Endpoints may be on other nodes: masquerade so replies come back here.
                    tx.add_rule(external_chain, vec![Stmt::jump(MARK_MASQ_CHAIN)]);
                } else {
                    if self.config.local_detector.is_implemented() {
                        // Pods reaching an external address are not subject to the policy,
                        // as if they went out to the load balancer and came back.
                        let mut m = self.config.local_detector.if_local_nft();
                        m.push(Stmt::goto(cluster_chain));
                        tx.add_rule_with_comment(external_chain, m, "short-circuit pod traffic");
                    }
                    // The node itself: its source address is the external IP; masquerade it.
                    tx.add_rule_with_comment(
                        external_chain,
                        vec![Stmt::FibLocal(Dir::Src), Stmt::jump(MARK_MASQ_CHAIN)],
                        "masquerade local traffic",
                    );
                    tx.add_rule_with_comment(
                        external_chain,
                        vec![Stmt::FibLocal(Dir::Src), Stmt::goto(cluster_chain)],
                        "short-circuit local traffic",
                    );
                }
                if has_external {
                    tx.add_rule(external_chain, vec![Stmt::goto(external_policy_chain)]);
                }
            }

            if uses_fw_chain {
                // Traffic from an allowed range returns to the hook and goes on to DNAT;
                // the rest is dropped.
                let mut sources: Vec<Cidr> = s.load_balancer_source_ranges.clone();
                if let Some(node_ip) = self.config.node_ip
                    && s.load_balancer_source_ranges.iter().any(|c| c.contains(&node_ip))
                {
                    // A VIP-like LB's address is often local: the node's own requests to
                    // it come from the VIP itself.
                    sources.extend(s.load_balancer_vips.iter().map(|ip| Cidr::host(*ip)));
                }
                for c in sources {
                    let n = c.network();
                    tx.add_rule(
                        fw_chain,
                        vec![
                            Stmt::Addr { dir: Dir::Src, negate: false, addr: n.addr, prefix: n.prefix },
                            Stmt::Verdict(Verdict::Return),
                        ],
                    );
                }
                tx.add_rule(fw_chain, vec![Stmt::Verdict(Verdict::Drop)]);
            }

            if let Some(timeout) = s.session_affinity_timeout {
                for ep in &cat.all_reachable {
                    // Affinity is per client address and Service port, whichever address
                    // of the Service was used.
                    tx.push(Op::AddSet(Set {
                        name: ep.affinity_set.clone(),
                        key: vec![addr_type],
                        map: false,
                        timeout: Some(Duration::from_secs(u64::from(timeout))),
                        dynamic: true,
                        comment: None,
                    }));
                }
            }
            if uses_cluster_chain {
                Self::service_to_endpoint_rules(&mut tx, svc, cluster_chain, &cat.cluster);
            }
            if uses_local_chain {
                Self::service_to_endpoint_rules(&mut tx, svc, local_chain, &cat.local);
            }
            for ep in &cat.all_reachable {
                // Hairpin: a pod reaching itself through the Service must be masqueraded.
                tx.add_rule(&ep.chain, vec![Stmt::saddr(ep.base.ip), Stmt::jump(MARK_MASQ_CHAIN)]);
                if s.session_affinity_timeout.is_some() {
                    tx.add_rule(&ep.chain, vec![Stmt::UpdateSaddr(ep.affinity_set.clone())]);
                }
                tx.add_rule(&ep.chain, vec![Stmt::L4Proto(proto), Stmt::Dnat(ep.base.ip, ep.base.port)]);
            }
            owned_now.insert(name.clone(), (chains, affinity_sets));
        }

        // What is no longer used: on a full sync, anything of ours in the kernel that this
        // sync did not write; on a partial one, what changed or deleted Services used.
        let mut stale: Vec<String> = Vec::new();
        let mut stale_sets: Vec<String> = Vec::new();
        // Service ports gone since the last sync (partial syncs).
        let mut gone: Vec<ServicePortName> = Vec::new();
        if ctx.full {
            let active: HashSet<&str> =
                owned_now.values().flat_map(|(c, _)| c.iter().map(String::as_str)).collect();
            let active_sets: HashSet<&str> =
                owned_now.values().flat_map(|(_, s)| s.iter().map(String::as_str)).collect();
            stale.extend(
                existing_chains
                    .iter()
                    .filter(|c| is_service_chain(c) && !active.contains(c.as_str()))
                    .cloned(),
            );
            stale_sets.extend(
                existing_sets
                    .iter()
                    .filter(|s| is_affinity_set(s) && !active_sets.contains(s.as_str()))
                    .cloned(),
            );
        } else {
            for (name, (new_chains, new_sets)) in &owned_now {
                if let Some((old_chains, old_sets)) = self.owned.get(name) {
                    stale.extend(old_chains.iter().filter(|c| !new_chains.contains(c)).cloned());
                    stale_sets.extend(old_sets.iter().filter(|s| !new_sets.contains(s)).cloned());
                }
            }
            for (name, (old_chains, old_sets)) in &self.owned {
                if !ctx.services.contains_key(name) {
                    stale.extend(old_chains.iter().cloned());
                    stale_sets.extend(old_sets.iter().cloned());
                    gone.push(name.clone());
                }
            }
        }
        for c in &stale {
            tx.flush_chain(c.as_str());
        }
        for s in &stale_sets {
            tx.push(Op::DeleteSet(s.clone()));
        }
        for s in self.storages() {
            s.cleanup(&mut tx);
        }

        tracing::debug!(
            family = ?self.family,
            services = ctx.services.len(),
            operations = tx.len(),
            build = ?start.elapsed(),
            "writing nftables transaction"
        );
        if tracing::enabled!(tracing::Level::TRACE) {
            tracing::trace!(transaction = %tx.render(self.family, KUBE_PROXY_TABLE), "nftables transaction");
        }
        if let Err(err) = self.nft.run(&tx) {
            self.metrics.nftables_sync_failures_total.inc();
            // Nothing was applied: what we believe about the kernel is wrong now; the next
            // (full) sync starts over from a listing.
            self.stale_chains.clear();
            self.owned.clear();
            return Err(format!("nftables sync failed: {err}"));
        }
        self.flushed = true;
        let now = Instant::now();
        for c in stale {
            self.stale_chains.entry(c).or_insert(now);
        }
        // A chain written again is not stale any more.
        if !self.stale_chains.is_empty() {
            for (chains, _) in owned_now.values() {
                for c in chains {
                    self.stale_chains.remove(c);
                }
            }
        }
        if ctx.full {
            self.owned = owned_now;
        } else {
            for name in gone {
                self.owned.remove(&name);
            }
            self.owned.extend(owned_now);
        }
        Ok(stats)
    }
}

/// Adds `chain` and, if it may hold rules from before, flushes it; once per transaction.
/// `existing` is what the kernel has (known on full syncs); a chain it lacks is created
/// empty and needs no flush.
fn ensure_chain(
    tx: &mut Transaction,
    created: &mut HashSet<String>,
    existing: Option<&HashSet<String>>,
    chain: &str,
) {
    if created.contains(chain) {
        return;
    }
    created.insert(chain.to_owned());
    tx.add_chain(chain);
    if existing.is_none_or(|e| e.contains(chain)) {
        tx.flush_chain(chain);
    }
}

impl Backend for NftablesBackend {
    type Svc = ServiceInfo;
    type Ep = EndpointInfo;

    fn sync(&mut self, ctx: &SyncContext<'_, ServiceInfo, EndpointInfo>) -> Result<SyncStats, String> {
        self.write(ctx)
    }

    /// Flushed chains wait to be deleted: sync again once they may go.
    fn resync_after(&self) -> Option<Duration> {
        (!self.stale_chains.is_empty()).then_some(Duration::from_millis(1100))
    }
}

/// Removes everything the nftables mode ever wrote: both families' tables. Returns an
/// error message per family that failed.
pub fn cleanup_leftovers() -> Vec<String> {
    let mut errors = Vec::new();
    for family in [Family::Ip, Family::Ip6] {
        match crate::nftables::netlink::delete_table(family, KUBE_PROXY_TABLE) {
            Ok(true) => tracing::info!(family = family.name(), "deleted the kube-proxy nftables table"),
            Ok(false) => {}
            Err(e) => errors.push(format!("{} table: {e}", family.name())),
        }
    }
    errors
}

#[cfg(test)]
mod tests;
