//! The iptables proxier (upstream's `pkg/proxy/iptables`): `KUBE-SERVICES` in the nat
//! table matches each Service address and port and jumps to the Service's `KUBE-SVC-*`
//! (Cluster policy) or `KUBE-SVL-*` (Local policy) chain, which picks a `KUBE-SEP-*`
//! endpoint chain with `statistic` random probabilities 1/n, 1/(n-1), ..., 1; external
//! destinations go through `KUBE-EXT-*` (and `KUBE-FW-*` for source ranges), NodePorts
//! through `KUBE-NODEPORTS`; `KUBE-MARK-MASQ` and `KUBE-POSTROUTING` masquerade. Services
//! without endpoints are rejected from the filter table. Everything is written in one
//! `iptables-restore --noflush`; a partial sync leaves out the chains of unchanged
//! Services (which stay as they are).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Backend, SyncContext, SyncStats, hash_base32};
use crate::endpoint::{BaseEndpointInfo, Endpoint};
use crate::iptables::{Interface, Table, chains_of_save};
use crate::localdetector::LocalDetector;
use crate::metrics::{Metrics, TableLabel};
use crate::nftables::Family;
use crate::nodeport_addresses::NodePortAddresses;
use crate::serviceport::{BaseServicePortInfo, ServicePort, ServicePortName};
use crate::topology::categorize_endpoints;

pub const KUBE_SERVICES: &str = "KUBE-SERVICES";
pub const KUBE_EXTERNAL_SERVICES: &str = "KUBE-EXTERNAL-SERVICES";
pub const KUBE_NODEPORTS: &str = "KUBE-NODEPORTS";
pub const KUBE_POSTROUTING: &str = "KUBE-POSTROUTING";
pub const KUBE_MARK_MASQ: &str = "KUBE-MARK-MASQ";
pub const KUBE_FORWARD: &str = "KUBE-FORWARD";
pub const KUBE_PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";
pub const KUBE_PROXY_CANARY: &str = "KUBE-PROXY-CANARY";
/// The anti-martian chain for localhost NodePorts (upstream's kubelet owns it too).
pub const KUBE_FIREWALL: &str = "KUBE-FIREWALL";

/// Above this many endpoints, per-endpoint comments are left out: they cost a lot of
/// restore input and iptables time.
const LARGE_CLUSTER_ENDPOINTS_THRESHOLD: usize = 1000;

/// (table, chain jumped to, built-in chain, comment, extra matches).
type JumpChain = (Table, &'static str, &'static str, &'static str, &'static [&'static str]);

const NEW: &[&str] = &["-m", "conntrack", "--ctstate", "NEW"];

const JUMP_CHAINS: &[JumpChain] = &[
    (Table::Filter, KUBE_EXTERNAL_SERVICES, "INPUT", "kubernetes externally-visible service portals", NEW),
    (Table::Filter, KUBE_EXTERNAL_SERVICES, "FORWARD", "kubernetes externally-visible service portals", NEW),
    (Table::Filter, KUBE_NODEPORTS, "INPUT", "kubernetes health check service ports", &[]),
    (Table::Filter, KUBE_SERVICES, "FORWARD", "kubernetes service portals", NEW),
    (Table::Filter, KUBE_SERVICES, "OUTPUT", "kubernetes service portals", NEW),
    (Table::Filter, KUBE_FORWARD, "FORWARD", "kubernetes forwarding rules", &[]),
    (Table::Filter, KUBE_PROXY_FIREWALL, "INPUT", "kubernetes load balancer firewall", NEW),
    (Table::Filter, KUBE_PROXY_FIREWALL, "OUTPUT", "kubernetes load balancer firewall", NEW),
    (Table::Filter, KUBE_PROXY_FIREWALL, "FORWARD", "kubernetes load balancer firewall", NEW),
    (Table::Nat, KUBE_SERVICES, "OUTPUT", "kubernetes service portals", &[]),
    (Table::Nat, KUBE_SERVICES, "PREROUTING", "kubernetes service portals", &[]),
    (Table::Nat, KUBE_POSTROUTING, "POSTROUTING", "kubernetes postrouting rules", &[]),
];

/// Like kubelet's, created when localhost NodePorts are on.
const KUBELET_JUMP_CHAINS: &[JumpChain] =
    &[(Table::Filter, KUBE_FIREWALL, "INPUT", "", &[]), (Table::Filter, KUBE_FIREWALL, "OUTPUT", "", &[])];

/// 16 characters of base32(sha256(servicePortName + protocol)): short enough for
/// iptables' 28-character chain names.
fn port_proto_hash(service_port_name: &str, protocol: &str) -> String {
    hash_base32(&format!("{service_port_name}{protocol}"), 16)
}

const SERVICE_CHAIN_PREFIXES: &[&str] = &["KUBE-SVC-", "KUBE-SVL-", "KUBE-SEP-", "KUBE-FW-", "KUBE-EXT-"];

fn is_service_chain(name: &str) -> bool {
    SERVICE_CHAIN_PREFIXES.iter().any(|p| name.starts_with(p))
}

pub struct ServiceInfo {
    base: BaseServicePortInfo,
    name_string: String,
    cluster_policy_chain: String,
    local_policy_chain: String,
    firewall_chain: String,
    external_chain: String,
}

impl ServicePort for ServiceInfo {
    fn new(name: &ServicePortName, base: BaseServicePortInfo) -> Self {
        let name_string = name.to_string();
        let h = port_proto_hash(&name_string, name.protocol.name());
        ServiceInfo {
            base,
            name_string,
            cluster_policy_chain: format!("KUBE-SVC-{h}"),
            local_policy_chain: format!("KUBE-SVL-{h}"),
            firewall_chain: format!("KUBE-FW-{h}"),
            external_chain: format!("KUBE-EXT-{h}"),
        }
    }

    fn base(&self) -> &BaseServicePortInfo {
        &self.base
    }
}

pub struct EndpointInfo {
    base: BaseEndpointInfo,
    chain: String,
}

impl Endpoint for EndpointInfo {
    fn new(base: BaseEndpointInfo, service: &ServicePortName) -> Self {
        let h = hash_base32(&format!("{service}{}{}", service.protocol.name(), base.endpoint), 16);
        EndpointInfo { chain: format!("KUBE-SEP-{h}"), base }
    }

    fn base(&self) -> &BaseEndpointInfo {
        &self.base
    }
}

/// Settings of one family's iptables proxier.
pub struct Config {
    pub masquerade_all: bool,
    pub masquerade_bit: u32,
    pub local_detector: LocalDetector,
    pub node_ip: Option<IpAddr>,
    pub node_port_addresses: NodePortAddresses,
    /// Serve IPv4 NodePorts on 127.0.0.1 (needs `route_localnet`, set at startup).
    pub localhost_nodeports: bool,
    /// `nf_conntrack_tcp_be_liberal` is on: no need to drop INVALID packets.
    pub conntrack_tcp_liberal: bool,
    /// How often the canary chains are checked (and stale chains deleted in large clusters).
    pub sync_period: Duration,
}

pub type AddressSource = super::nftables::AddressSource;

/// Rule lines, built in a reused buffer.
#[derive(Default)]
struct Lines {
    buf: String,
    count: usize,
}

impl Lines {
    fn line(&mut self, parts: &[&str]) {
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                self.buf.push(' ');
            }
            self.buf.push_str(p);
        }
        self.buf.push('\n');
        self.count += 1;
    }

    fn chain(&mut self, name: &str) {
        let _ = writeln!(self.buf, ":{name} - [0:0]");
        self.count += 1;
    }

    fn clear(&mut self) {
        self.buf.clear();
        self.count = 0;
    }
}

fn quoted(s: &str) -> String {
    format!("\"{s}\"")
}

pub struct IptablesBackend {
    family: Family,
    ipt: Box<dyn Interface>,
    config: Config,
    mark: String,
    addresses: AddressSource,
    metrics: Metrics,
    last_canary_check: Option<Instant>,
    last_cleanup: Option<Instant>,
    /// Probabilities as strings, computed once: formatting floats is not free.
    probabilities: Vec<String>,
}

impl IptablesBackend {
    pub fn new(ipt: Box<dyn Interface>, config: Config, addresses: AddressSource, metrics: Metrics) -> Self {
        IptablesBackend {
            family: ipt.family(),
            ipt,
            mark: format!("{:#08x}", 1u32 << config.masquerade_bit),
            config,
            addresses,
            metrics,
            last_canary_check: None,
            last_cleanup: None,
            probabilities: Vec::new(),
        }
    }

    pub fn ipt(&mut self) -> &mut dyn Interface {
        self.ipt.as_mut()
    }

    /// `1/n` with ten decimals, as upstream writes it.
    fn probability(&mut self, n: usize) -> String {
        while self.probabilities.len() <= n {
            let i = self.probabilities.len();
            self.probabilities.push(if i == 0 {
                "<bad value>".into()
            } else {
                format!("{:.10}", 1.0 / i as f64)
            });
        }
        self.probabilities[n].clone()
    }

    /// Jump rules from the built-in chains, which iptables-restore must not own.
    fn ensure_jumps(&mut self) -> Result<(), String> {
        let mut jumps: Vec<&JumpChain> = JUMP_CHAINS.iter().collect();
        if self.config.localhost_nodeports && self.family == Family::Ip {
            jumps.extend(KUBELET_JUMP_CHAINS);
        }
        for (table, dst, src, comment, extra) in jumps {
            self.ipt.ensure_chain(*table, dst).map_err(|e| format!("ensuring chain {dst}: {e}"))?;
            let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            if !comment.is_empty() {
                args.extend(["-m".into(), "comment".into(), "--comment".into(), comment.to_string()]);
            }
            args.extend(["-j".into(), dst.to_string()]);
            self.ipt
                .ensure_rule_prepend(*table, src, &args)
                .map_err(|e| format!("ensuring jump from {src} to {dst}: {e}"))?;
        }
        // The canary tells us when someone flushed our tables.
        for t in [Table::Mangle, Table::Nat, Table::Filter] {
            self.ipt.ensure_chain(t, KUBE_PROXY_CANARY).map_err(|e| format!("ensuring canary chain: {e}"))?;
        }
        Ok(())
    }

    /// Whether our canary chains are gone (iptables flushed behind our back).
    fn canary_missing(&mut self) -> bool {
        match self.ipt.chain_exists(Table::Mangle, KUBE_PROXY_CANARY) {
            Ok(exists) => !exists,
            Err(err) => {
                tracing::warn!(%err, "checking the canary chain");
                false
            }
        }
    }

    fn write(&mut self, ctx: &SyncContext<'_, ServiceInfo, EndpointInfo>) -> Result<SyncStats, String> {
        let mut full = ctx.full;
        if !full && self.last_canary_check.is_none_or(|t| t.elapsed() >= self.config.sync_period) {
            self.last_canary_check = Some(Instant::now());
            if self.canary_missing() {
                tracing::info!(family = ?self.family, "iptables canary chain missing: tables were flushed; full sync");
                full = true;
            }
        }
        if full {
            self.ensure_jumps()?;
            self.last_canary_check = Some(Instant::now());
        }
        let mark = self.mark.clone();
        let mark_mask = format!("{mark}/{mark}");
        let ipv6 = self.family == Family::Ip6;

        let mut filter_chains = Lines::default();
        let mut filter_rules = Lines::default();
        let mut nat_chains = Lines::default();
        let mut nat_rules = Lines::default();
        let mut skipped = Lines::default();

        for c in [KUBE_SERVICES, KUBE_EXTERNAL_SERVICES, KUBE_FORWARD, KUBE_NODEPORTS, KUBE_PROXY_FIREWALL] {
            filter_chains.chain(c);
        }
        for c in [KUBE_SERVICES, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_MARK_MASQ] {
            nat_chains.chain(c);
        }
        nat_rules.line(&["-A", KUBE_POSTROUTING, "-m", "mark", "!", "--mark", &mark_mask, "-j", "RETURN"]);
        // Clear the mark so a packet traversing the stack again is not masqueraded twice.
        nat_rules.line(&["-A", KUBE_POSTROUTING, "-j", "MARK", "--xor-mark", &mark]);
        let mut masq = vec![
            "-A",
            KUBE_POSTROUTING,
            "-m",
            "comment",
            "--comment",
            "\"kubernetes service traffic requiring SNAT\"",
            "-j",
            "MASQUERADE",
        ];
        if self.ipt.has_random_fully() {
            masq.push("--random-fully");
        }
        nat_rules.line(&masq);
        nat_rules.line(&["-A", KUBE_MARK_MASQ, "-j", "MARK", "--or-mark", &mark]);

        if !ipv6 && self.config.localhost_nodeports {
            // route_localnet opens 127.0.0.0/8 to the outside; this closes it again.
            filter_chains.chain(KUBE_FIREWALL);
            filter_rules.line(&[
                "-A",
                KUBE_FIREWALL,
                "-m",
                "comment",
                "--comment",
                "\"block incoming localnet connections\"",
                "-d",
                "127.0.0.0/8",
                "!",
                "-s",
                "127.0.0.0/8",
                "-m",
                "conntrack",
                "!",
                "--ctstate",
                "RELATED,ESTABLISHED,DNAT",
                "-j",
                "DROP",
            ]);
        }

        let mut active: HashSet<String> = HashSet::new();
        let total_endpoints: usize =
            ctx.services.keys().map(|n| ctx.endpoints.get(n).map_or(0, Vec::len)).sum();
        let large = total_endpoints > LARGE_CLUSTER_ENDPOINTS_THRESHOLD;
        let mut stats = SyncStats::default();
        let no_eps: Vec<Arc<EndpointInfo>> = Vec::new();

        for (name, svc) in ctx.services.iter() {
            let s = &svc.base;
            let proto = s.protocol.name();
            let spn = &svc.name_string;
            let port = s.port.to_string();
            let cluster_ip = s.cluster_ip.to_string();
            let eps = ctx.endpoints.get(name).unwrap_or(&no_eps);
            let cat = categorize_endpoints(eps, s, ctx.node_labels);

            let cluster_chain = svc.cluster_policy_chain.as_str();
            let uses_cluster_chain = !cat.cluster.is_empty() && s.uses_cluster_endpoints();
            let local_chain = svc.local_policy_chain.as_str();
            let uses_local_chain = !cat.local.is_empty() && s.uses_local_endpoints();
            let (mut internal_chain, mut has_internal) = (cluster_chain, cat.has_any);
            if s.internal_policy_local {
                internal_chain = local_chain;
                has_internal = !cat.local.is_empty();
            }
            let (mut external_policy_chain, mut has_external) = (cluster_chain, cat.has_any);
            if s.external_policy_local {
                external_policy_chain = local_chain;
                has_external = !cat.local.is_empty();
            }
            let external_chain = svc.external_chain.as_str();
            let uses_external_chain = cat.has_any && s.externally_accessible();
            let fw_chain = svc.firewall_chain.as_str();
            let uses_fw_chain =
                cat.has_any && !s.load_balancer_vips.is_empty() && !s.load_balancer_source_ranges.is_empty();
            let lb_chain = if uses_fw_chain { fw_chain } else { external_chain };

            let (internal_target, internal_comment, external_target, external_comment) = if !cat.has_any {
                let c = quoted(&format!("{spn} has no endpoints"));
                ("REJECT", c.clone(), "REJECT", c)
            } else {
                let none = quoted(&format!("{spn} has no local endpoints"));
                if !has_internal {
                    stats.no_local_internal += 1;
                }
                if !has_external {
                    stats.no_local_external += 1;
                }
                ("DROP", none.clone(), "DROP", none)
            };

            if has_internal {
                nat_rules.line(&[
                    "-A",
                    KUBE_SERVICES,
                    "-m",
                    "comment",
                    "--comment",
                    &quoted(&format!("{spn} cluster IP")),
                    "-m",
                    proto,
                    "-p",
                    proto,
                    "-d",
                    &cluster_ip,
                    "--dport",
                    &port,
                    "-j",
                    internal_chain,
                ]);
            } else {
                filter_rules.line(&[
                    "-A",
                    KUBE_SERVICES,
                    "-m",
                    "comment",
                    "--comment",
                    &internal_comment,
                    "-m",
                    proto,
                    "-p",
                    proto,
                    "-d",
                    &cluster_ip,
                    "--dport",
                    &port,
                    "-j",
                    internal_target,
                ]);
            }

            for ip in &s.external_ips {
                let ip = ip.to_string();
                if cat.has_any {
                    nat_rules.line(&[
                        "-A",
                        KUBE_SERVICES,
                        "-m",
                        "comment",
                        "--comment",
                        &quoted(&format!("{spn} external IP")),
                        "-m",
                        proto,
                        "-p",
                        proto,
                        "-d",
                        &ip,
                        "--dport",
                        &port,
                        "-j",
                        external_chain,
                    ]);
                }
                if !has_external {
                    filter_rules.line(&[
                        "-A",
                        KUBE_EXTERNAL_SERVICES,
                        "-m",
                        "comment",
                        "--comment",
                        &external_comment,
                        "-m",
                        proto,
                        "-p",
                        proto,
                        "-d",
                        &ip,
                        "--dport",
                        &port,
                        "-j",
                        external_target,
                    ]);
                }
            }

            for ip in &s.load_balancer_vips {
                let ip = ip.to_string();
                if cat.has_any {
                    nat_rules.line(&[
                        "-A",
                        KUBE_SERVICES,
                        "-m",
                        "comment",
                        "--comment",
                        &quoted(&format!("{spn} loadbalancer IP")),
                        "-m",
                        proto,
                        "-p",
                        proto,
                        "-d",
                        &ip,
                        "--dport",
                        &port,
                        "-j",
                        lb_chain,
                    ]);
                }
                if uses_fw_chain {
                    filter_rules.line(&[
                        "-A",
                        KUBE_PROXY_FIREWALL,
                        "-m",
                        "comment",
                        "--comment",
                        &quoted(&format!("{spn} traffic not accepted by {fw_chain}")),
                        "-m",
                        proto,
                        "-p",
                        proto,
                        "-d",
                        &ip,
                        "--dport",
                        &port,
                        "-j",
                        "DROP",
                    ]);
                }
            }
            if !has_external {
                for ip in &s.load_balancer_vips {
                    filter_rules.line(&[
                        "-A",
                        KUBE_EXTERNAL_SERVICES,
                        "-m",
                        "comment",
                        "--comment",
                        &external_comment,
                        "-m",
                        proto,
                        "-p",
                        proto,
                        "-d",
                        &ip.to_string(),
                        "--dport",
                        &port,
                        "-j",
                        external_target,
                    ]);
                }
            }

            if s.node_port != 0 {
                let np = s.node_port.to_string();
                if cat.has_any {
                    // NodePorts ignore loadBalancerSourceRanges, as upstream.
                    nat_rules.line(&[
                        "-A",
                        KUBE_NODEPORTS,
                        "-m",
                        "comment",
                        "--comment",
                        spn,
                        "-m",
                        proto,
                        "-p",
                        proto,
                        "--dport",
                        &np,
                        "-j",
                        external_chain,
                    ]);
                }
                if !has_external {
                    filter_rules.line(&[
                        "-A",
                        KUBE_EXTERNAL_SERVICES,
                        "-m",
                        "comment",
                        "--comment",
                        &external_comment,
                        "-m",
                        "addrtype",
                        "--dst-type",
                        "LOCAL",
                        "-m",
                        proto,
                        "-p",
                        proto,
                        "--dport",
                        &np,
                        "-j",
                        external_target,
                    ]);
                }
            }

            if s.health_check_node_port != 0 {
                // Accepted whether or not this node has endpoints: the answer says which.
                filter_rules.line(&[
                    "-A",
                    KUBE_NODEPORTS,
                    "-m",
                    "comment",
                    "--comment",
                    &quoted(&format!("{spn} health check node port")),
                    "-m",
                    "tcp",
                    "-p",
                    "tcp",
                    "--dport",
                    &s.health_check_node_port.to_string(),
                    "-j",
                    "ACCEPT",
                ]);
            }

            // Unchanged Services' chains are left as they are (not in the input at all),
            // but they are still in use.
            let skip = !full && !ctx.updated.contains(&name.service);
            let (nc, nr) = if skip { (&mut skipped, None) } else { (&mut nat_chains, Some(&mut nat_rules)) };
            let chain = |name: &str, active: &mut HashSet<String>, nc: &mut Lines| {
                nc.chain(name);
                active.insert(name.to_owned());
            };
            if uses_external_chain {
                chain(external_chain, &mut active, nc);
            }
            if uses_fw_chain {
                chain(fw_chain, &mut active, nc);
            }
            if uses_cluster_chain {
                chain(cluster_chain, &mut active, nc);
            }
            if uses_local_chain {
                chain(local_chain, &mut active, nc);
            }
            for ep in &cat.all_reachable {
                chain(&ep.chain, &mut active, nc);
            }
            let Some(nr) = nr else { continue };

            if has_internal {
                let dst = [
                    "-m",
                    "comment",
                    "--comment",
                    &quoted(&format!("{spn} cluster IP")),
                    "-m",
                    proto,
                    "-p",
                    proto,
                    "-d",
                    &cluster_ip,
                    "--dport",
                    &port,
                ]
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>();
                if self.config.masquerade_all {
                    let mut l: Vec<&str> = vec!["-A", internal_chain];
                    l.extend(dst.iter().map(String::as_str));
                    l.extend(["-j", KUBE_MARK_MASQ]);
                    nr.line(&l);
                } else if self.config.local_detector.is_implemented() {
                    // Off-cluster traffic to a cluster IP may be answered from elsewhere.
                    let not_local = self.config.local_detector.if_not_local_ipt();
                    let mut l: Vec<&str> = vec!["-A", internal_chain];
                    l.extend(dst.iter().map(String::as_str));
                    l.extend(not_local.iter().map(String::as_str));
                    l.extend(["-j", KUBE_MARK_MASQ]);
                    nr.line(&l);
                }
            }

            if uses_external_chain {
                if !s.external_policy_local {
                    nr.line(&[
                        "-A",
                        external_chain,
                        "-m",
                        "comment",
                        "--comment",
                        &quoted(&format!("masquerade traffic for {spn} external destinations")),
                        "-j",
                        KUBE_MARK_MASQ,
                    ]);
                } else {
                    if self.config.local_detector.is_implemented() {
                        let local = self.config.local_detector.if_local_ipt();
                        let comment = quoted(&format!("pod traffic for {spn} external destinations"));
                        let mut l: Vec<&str> =
                            vec!["-A", external_chain, "-m", "comment", "--comment", &comment];
                        l.extend(local.iter().map(String::as_str));
                        l.extend(["-j", cluster_chain]);
                        nr.line(&l);
                    }
                    nr.line(&[
                        "-A",
                        external_chain,
                        "-m",
                        "comment",
                        "--comment",
                        &quoted(&format!("masquerade LOCAL traffic for {spn} external destinations")),
                        "-m",
                        "addrtype",
                        "--src-type",
                        "LOCAL",
                        "-j",
                        KUBE_MARK_MASQ,
                    ]);
                    nr.line(&[
                        "-A",
                        external_chain,
                        "-m",
                        "comment",
                        "--comment",
                        &quoted(&format!("route LOCAL traffic for {spn} external destinations")),
                        "-m",
                        "addrtype",
                        "--src-type",
                        "LOCAL",
                        "-j",
                        cluster_chain,
                    ]);
                }
                if has_external {
                    nr.line(&["-A", external_chain, "-j", external_policy_chain]);
                }
            }

            if uses_fw_chain {
                let comment = quoted(&format!("{spn} loadbalancer IP"));
                let mut allow_from_node = false;
                for cidr in &s.load_balancer_source_ranges {
                    nr.line(&[
                        "-A",
                        fw_chain,
                        "-m",
                        "comment",
                        "--comment",
                        &comment,
                        "-s",
                        &cidr.to_string(),
                        "-j",
                        external_chain,
                    ]);
                    if self.config.node_ip.is_some_and(|ip| cidr.contains(&ip)) {
                        allow_from_node = true;
                    }
                }
                if allow_from_node {
                    for ip in &s.load_balancer_vips {
                        nr.line(&[
                            "-A",
                            fw_chain,
                            "-m",
                            "comment",
                            "--comment",
                            &comment,
                            "-s",
                            &ip.to_string(),
                            "-j",
                            external_chain,
                        ]);
                    }
                }
                // Whatever gets here is not DNATed, and KUBE-PROXY-FIREWALL drops it.
                nr.line(&[
                    "-A",
                    fw_chain,
                    "-m",
                    "comment",
                    "--comment",
                    &quoted(&format!("other traffic to {spn} will be dropped by KUBE-PROXY-FIREWALL")),
                ]);
            }

            if uses_cluster_chain {
                self.service_to_endpoint_rules(nr, spn, s, cluster_chain, &cat.cluster, large);
            }
            if uses_local_chain {
                self.service_to_endpoint_rules(nr, spn, s, local_chain, &cat.local, large);
            }

            for ep in &cat.all_reachable {
                let mut head: Vec<String> = vec!["-A".into(), ep.chain.clone()];
                if !large {
                    head.extend(["-m".into(), "comment".into(), "--comment".into(), spn.clone()]);
                }
                // Hairpin: a pod reaching itself through the Service is masqueraded.
                let mut l: Vec<&str> = head.iter().map(String::as_str).collect();
                let ip = ep.base.ip.to_string();
                l.extend(["-s", &ip, "-j", KUBE_MARK_MASQ]);
                nr.line(&l);
                let mut l: Vec<&str> = head.iter().map(String::as_str).collect();
                if s.session_affinity_timeout.is_some() {
                    l.extend(["-m", "recent", "--name", &ep.chain, "--set"]);
                }
                l.extend(["-m", proto, "-p", proto, "-j", "DNAT", "--to-destination", &ep.base.endpoint]);
                nr.line(&l);
            }
        }

        // Unused service chains: flushed by declaring them, then deleted. iptables-save can
        // be slow with many rules, so large clusters do this once per sync period.
        let mut deleted = 0;
        if !large || self.last_cleanup.is_none_or(|t| t.elapsed() > self.config.sync_period) {
            match self.ipt.save(Table::Nat) {
                Ok(save) => {
                    for chain in chains_of_save(&save) {
                        if is_service_chain(&chain) && !active.contains(&chain) {
                            nat_chains.chain(&chain);
                            nat_rules.line(&["-X", &chain]);
                            deleted += 1;
                        }
                    }
                    self.last_cleanup = Some(Instant::now());
                }
                Err(err) => {
                    tracing::error!(%err, "failed to execute iptables-save: stale chains will not be deleted")
                }
            }
        }

        // The NodePort rule must come last in KUBE-SERVICES.
        let np_comment = "\"kubernetes service nodeports; NOTE: this must be the last rule in this chain\"";
        if self.config.node_port_addresses.match_all() {
            let mut l = vec![
                "-A",
                KUBE_SERVICES,
                "-m",
                "comment",
                "--comment",
                np_comment,
                "-m",
                "addrtype",
                "--dst-type",
                "LOCAL",
            ];
            if ipv6 {
                l.extend(["!", "-d", "::1/128"]);
            } else if !self.config.localhost_nodeports {
                l.extend(["!", "-d", "127.0.0.0/8"]);
            }
            l.extend(["-j", KUBE_NODEPORTS]);
            nat_rules.line(&l);
        } else {
            match (self.addresses)() {
                Ok(addrs) => {
                    for ip in self.config.node_port_addresses.node_ips(&addrs) {
                        if ip.is_loopback() && (ipv6 || !self.config.localhost_nodeports) {
                            tracing::error!(address = %ip, "--nodeport-addresses includes localhost but localhost NodePorts are not supported here");
                            continue;
                        }
                        nat_rules.line(&[
                            "-A",
                            KUBE_SERVICES,
                            "-m",
                            "comment",
                            "--comment",
                            np_comment,
                            "-d",
                            &ip.to_string(),
                            "-j",
                            KUBE_NODEPORTS,
                        ]);
                    }
                }
                Err(err) => {
                    tracing::error!(%err, "failed to get node IP addresses matching nodeport CIDRs, services with nodeport may not work as intended")
                }
            }
        }

        if !self.config.conntrack_tcp_liberal {
            // Out-of-window packets marked INVALID would otherwise reset connections.
            filter_rules.line(&["-A", KUBE_FORWARD, "-m", "conntrack", "--ctstate", "INVALID", "-j", "DROP"]);
        }
        filter_rules.line(&[
            "-A",
            KUBE_FORWARD,
            "-m",
            "comment",
            "--comment",
            "\"kubernetes forwarding rules\"",
            "-m",
            "mark",
            "--mark",
            &mark_mask,
            "-j",
            "ACCEPT",
        ]);
        filter_rules.line(&[
            "-A",
            KUBE_FORWARD,
            "-m",
            "comment",
            "--comment",
            "\"kubernetes forwarding conntrack rule\"",
            "-m",
            "conntrack",
            "--ctstate",
            "RELATED,ESTABLISHED",
            "-j",
            "ACCEPT",
        ]);

        let label = |t: &str| TableLabel { table: t.to_owned() };
        self.metrics.iptables_rules_total.get_or_create(&label("filter")).set(filter_rules.count as i64);
        self.metrics.iptables_rules_last.get_or_create(&label("filter")).set(filter_rules.count as i64);
        self.metrics
            .iptables_rules_total
            .get_or_create(&label("nat"))
            .set((nat_rules.count + skipped.count) as i64 - deleted);
        self.metrics.iptables_rules_last.get_or_create(&label("nat")).set(nat_rules.count as i64 - deleted);

        let mut data = String::with_capacity(
            filter_chains.buf.len()
                + filter_rules.buf.len()
                + nat_chains.buf.len()
                + nat_rules.buf.len()
                + 32,
        );
        data.push_str("*filter\n");
        data.push_str(&filter_chains.buf);
        data.push_str(&filter_rules.buf);
        data.push_str("COMMIT\n*nat\n");
        data.push_str(&nat_chains.buf);
        data.push_str(&nat_rules.buf);
        data.push_str("COMMIT\n");
        skipped.clear();
        tracing::debug!(
            family = ?self.family,
            services = ctx.services.len(),
            endpoints = total_endpoints,
            filter_rules = filter_rules.count,
            nat_rules = nat_rules.count,
            "restoring iptables"
        );
        if tracing::enabled!(tracing::Level::TRACE) {
            tracing::trace!(rules = %data, "iptables-restore input");
        }
        if let Err(err) = self.ipt.restore_all(data.as_bytes()) {
            self.metrics.iptables_restore_failures_total.inc();
            if !full {
                self.metrics.iptables_partial_restore_failures_total.inc();
            }
            return Err(format!("iptables-restore failed: {err}"));
        }
        Ok(stats)
    }

    fn service_to_endpoint_rules(
        &mut self,
        nr: &mut Lines,
        spn: &str,
        s: &BaseServicePortInfo,
        chain: &str,
        eps: &[Arc<EndpointInfo>],
        large: bool,
    ) {
        if let Some(timeout) = s.session_affinity_timeout {
            let secs = timeout.to_string();
            for ep in eps {
                let comment = quoted(&format!("{spn} -> {}", ep.base.endpoint));
                let mut l: Vec<&str> = vec!["-A", chain];
                if !large {
                    l.extend(["-m", "comment", "--comment", &comment]);
                }
                l.extend([
                    "-m",
                    "recent",
                    "--name",
                    &ep.chain,
                    "--rcheck",
                    "--seconds",
                    &secs,
                    "--reap",
                    "-j",
                    &ep.chain,
                ]);
                nr.line(&l);
            }
        }
        let n = eps.len();
        for (i, ep) in eps.iter().enumerate() {
            let comment = quoted(&format!("{spn} -> {}", ep.base.endpoint));
            let prob = if i < n - 1 { Some(self.probability(n - i)) } else { None };
            let mut l: Vec<&str> = vec!["-A", chain];
            if !large {
                l.extend(["-m", "comment", "--comment", &comment]);
            }
            if let Some(p) = &prob {
                // Each rule takes its share of what the ones before it left.
                l.extend(["-m", "statistic", "--mode", "random", "--probability", p]);
            }
            l.extend(["-j", &ep.chain]);
            nr.line(&l);
        }
    }
}

impl Backend for IptablesBackend {
    type Svc = ServiceInfo;
    type Ep = EndpointInfo;

    fn sync(&mut self, ctx: &SyncContext<'_, ServiceInfo, EndpointInfo>) -> Result<SyncStats, String> {
        self.write(ctx)
    }
}

/// Removes everything the iptables mode ever wrote in `ipt`'s family: the jump rules in
/// the built-in chains, then our chains (service chains found with iptables-save). The
/// canary chains and KUBE-FIREWALL go too: no other component of ours creates them.
/// Returns the errors met (each is also logged).
pub fn cleanup_leftovers(ipt: &mut dyn Interface) -> Vec<String> {
    let mut errors = Vec::new();
    for (table, dst, src, comment, extra) in JUMP_CHAINS.iter().chain(KUBELET_JUMP_CHAINS) {
        let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        if !comment.is_empty() {
            args.extend(["-m".into(), "comment".into(), "--comment".into(), comment.to_string()]);
        }
        args.extend(["-j".into(), dst.to_string()]);
        // The rule may have been inserted more than once by racing writers: delete all.
        loop {
            match ipt.delete_rule(*table, src, &args) {
                Ok(()) => continue,
                Err(e) if e.is_not_found() => break,
                Err(e) => {
                    errors.push(format!("removing the jump from {src} to {dst}: {e}"));
                    break;
                }
            }
        }
    }
    for (table, fixed) in [
        (
            Table::Nat,
            &[KUBE_SERVICES, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_MARK_MASQ, KUBE_PROXY_CANARY][..],
        ),
        (
            Table::Filter,
            &[
                KUBE_SERVICES,
                KUBE_EXTERNAL_SERVICES,
                KUBE_FORWARD,
                KUBE_NODEPORTS,
                KUBE_PROXY_FIREWALL,
                KUBE_FIREWALL,
                KUBE_PROXY_CANARY,
            ][..],
        ),
        (Table::Mangle, &[KUBE_PROXY_CANARY][..]),
    ] {
        let save = match ipt.save(table) {
            Ok(s) => s,
            Err(e) => {
                errors.push(format!("iptables-save -t {}: {e}", table.name()));
                continue;
            }
        };
        let existing = chains_of_save(&save);
        let ours: Vec<&String> =
            existing.iter().filter(|c| fixed.contains(&c.as_str()) || is_service_chain(c)).collect();
        if ours.is_empty() {
            continue;
        }
        let mut data = format!("*{}\n", table.name());
        for c in &ours {
            let _ = writeln!(data, ":{c} - [0:0]");
        }
        for c in &ours {
            let _ = writeln!(data, "-X {c}");
        }
        data.push_str("COMMIT\n");
        if let Err(e) = ipt.restore_all(data.as_bytes()) {
            errors.push(format!("removing chains from the {} table: {e}", table.name()));
        }
    }
    errors
}

/// Whether any chain of ours exists in `ipt`'s family (so a mode switch knows to clean).
pub fn has_leftovers(ipt: &mut dyn Interface) -> bool {
    [Table::Nat, Table::Filter, Table::Mangle].iter().any(|t| {
        ipt.save(*t).map(|s| chains_of_save(&s).iter().any(|c| c.starts_with("KUBE-"))).unwrap_or(false)
    })
}

#[cfg(test)]
mod tests;
