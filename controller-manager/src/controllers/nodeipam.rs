//! The node IPAM controller's range allocator: with `--allocate-node-cidrs`, hands each
//! node without `spec.podCIDRs` the next free block of `--cluster-cidr` (one per IP
//! family), keeping existing nodes' blocks and the service range out, as upstream.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use parking_lot::Mutex;

use crate::controller::{self, Context, Error};
use crate::events::{Recorder, Type};
use crate::informers::{self, Event, Informer};

const COMPONENT: &str = "cidrAllocator";
/// Upstream's `cidrUpdateWorkers`.
const WORKERS: usize = 30;
/// Upstream's `clusterSubnetMaxDiff`: at most 2^16 node blocks per cluster CIDR.
const MAX_SUBNET_BITS: u8 = 16;

/// An IPv4 or IPv6 prefix, held as a 128-bit number with its family's width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    v6: bool,
    addr: u128,
    prefix: u8,
}

impl Cidr {
    fn width(&self) -> u8 {
        if self.v6 { 128 } else { 32 }
    }

    /// The number of host bits below the prefix.
    fn host_bits(&self) -> u8 {
        self.width() - self.prefix
    }

    fn last(&self) -> u128 {
        self.addr | low_mask(self.host_bits())
    }

    pub fn is_v6(&self) -> bool {
        self.v6
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }
}

/// A mask of the `bits` lowest bits.
fn low_mask(bits: u8) -> u128 {
    if bits >= 128 { u128::MAX } else { (1u128 << bits) - 1 }
}

impl std::str::FromStr for Cidr {
    type Err = String;

    /// Parses `ip/prefix`; host bits are cleared, as Go's `net.ParseCIDR` network.
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (ip, prefix) =
            s.split_once('/').ok_or_else(|| format!("invalid CIDR {s:?}: no prefix length"))?;
        let ip: IpAddr = ip.parse().map_err(|_| format!("invalid CIDR {s:?}: bad address"))?;
        let prefix: u8 = prefix.parse().map_err(|_| format!("invalid CIDR {s:?}: bad prefix length"))?;
        let (v6, addr) = match ip {
            IpAddr::V4(a) => (false, u128::from(u32::from(a))),
            IpAddr::V6(a) => (true, u128::from(a)),
        };
        let mut c = Cidr { v6, addr, prefix };
        if prefix > c.width() {
            return Err(format!("invalid CIDR {s:?}: prefix length over {}", c.width()));
        }
        c.addr &= !low_mask(c.host_bits());
        Ok(c)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.v6 {
            write!(f, "{}/{}", Ipv6Addr::from(self.addr), self.prefix)
        } else {
            // Only the low 32 bits are ever set for IPv4.
            write!(f, "{}/{}", Ipv4Addr::from(self.addr as u32), self.prefix)
        }
    }
}

/// The node blocks of one cluster CIDR, as a bitmap (upstream's `CidrSet`). Allocation
/// resumes after the last block handed out, so a released block is not reused at once.
#[derive(Debug)]
pub struct CidrSet {
    cluster: Cidr,
    node_prefix: u8,
    used: Vec<u64>,
    max: usize,
    allocated: usize,
    next: usize,
}

impl CidrSet {
    pub fn new(cluster: Cidr, node_prefix: u8) -> Result<Self, String> {
        if node_prefix < cluster.prefix {
            return Err(format!(
                "node CIDR mask size /{node_prefix} is smaller than the cluster CIDR {cluster}'s prefix"
            ));
        }
        if node_prefix > cluster.width() || node_prefix == 0 {
            return Err(format!("node CIDR mask size /{node_prefix} is not valid for {cluster}"));
        }
        if node_prefix - cluster.prefix > MAX_SUBNET_BITS {
            return Err(format!(
                "node CIDR mask size /{node_prefix} splits {cluster} into more than 2^{MAX_SUBNET_BITS} blocks"
            ));
        }
        let max = 1usize << (node_prefix - cluster.prefix);
        Ok(Self { cluster, node_prefix, used: vec![0; max.div_ceil(64)], max, allocated: 0, next: 0 })
    }

    pub fn cluster(&self) -> Cidr {
        self.cluster
    }

    fn block(&self, i: usize) -> Cidr {
        let shift = self.cluster.width() - self.node_prefix;
        Cidr {
            v6: self.cluster.v6,
            addr: self.cluster.addr + ((i as u128) << shift),
            prefix: self.node_prefix,
        }
    }

    fn is_used(&self, i: usize) -> bool {
        self.used[i / 64] & (1 << (i % 64)) != 0
    }

    fn set(&mut self, i: usize, on: bool) {
        let was = self.is_used(i);
        if on && !was {
            self.used[i / 64] |= 1 << (i % 64);
            self.allocated += 1;
        } else if !on && was {
            self.used[i / 64] &= !(1 << (i % 64));
            self.allocated -= 1;
        }
    }

    /// The next free block, marked used; `None` when the range is exhausted.
    pub fn allocate_next(&mut self) -> Option<Cidr> {
        if self.allocated >= self.max {
            return None;
        }
        for k in 0..self.max {
            let i = (self.next + k) % self.max;
            if !self.is_used(i) {
                self.set(i, true);
                self.next = (i + 1) % self.max;
                return Some(self.block(i));
            }
        }
        None
    }

    /// The indices of the blocks `cidr` overlaps.
    fn range_of(&self, cidr: &Cidr) -> Result<(usize, usize), String> {
        if cidr.v6 != self.cluster.v6 {
            return Err(format!("{cidr} is not of the family of {}", self.cluster));
        }
        let lo = cidr.addr.max(self.cluster.addr);
        let hi = cidr.last().min(self.cluster.last());
        if lo > hi {
            return Err(format!("{cidr} is out of the range of {}", self.cluster));
        }
        let shift = self.cluster.width() - self.node_prefix;
        let begin = ((lo - self.cluster.addr) >> shift) as usize;
        let end = ((hi - self.cluster.addr) >> shift) as usize;
        Ok((begin, end.min(self.max - 1)))
    }

    /// Marks every block `cidr` overlaps as used.
    pub fn occupy(&mut self, cidr: &Cidr) -> Result<(), String> {
        let (b, e) = self.range_of(cidr)?;
        for i in b..=e {
            self.set(i, true);
        }
        Ok(())
    }

    /// Marks every block `cidr` overlaps as free.
    pub fn release(&mut self, cidr: &Cidr) -> Result<(), String> {
        let (b, e) = self.range_of(cidr)?;
        for i in b..=e {
            self.set(i, false);
        }
        Ok(())
    }

    pub fn allocated(&self) -> usize {
        self.allocated
    }
}

/// Builds one set per cluster CIDR (at most one per family) with the service range
/// taken out (upstream's `filterOutServiceRange`).
pub fn build_sets(
    cluster_cidrs: &str,
    mask_v4: u8,
    mask_v6: u8,
    service_ranges: Option<&str>,
) -> Result<Vec<CidrSet>, String> {
    let cidrs: Vec<Cidr> = cluster_cidrs
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.parse())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--cluster-cidr: {e}"))?;
    match cidrs.as_slice() {
        [] => return Err("--cluster-cidr: no CIDR given".into()),
        [_] => {}
        [a, b] if a.v6 != b.v6 => {}
        [_, _] => return Err("--cluster-cidr: a dual-stack pair needs one IPv4 and one IPv6 CIDR".into()),
        _ => return Err("--cluster-cidr: at most two CIDRs (one per IP family)".into()),
    }
    let services: Vec<Cidr> = service_ranges
        .into_iter()
        .flat_map(|s| s.split(','))
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.parse())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--service-cluster-ip-range: {e}"))?;
    let mut sets = Vec::new();
    for c in cidrs {
        let mask = if c.v6 { mask_v6 } else { mask_v4 };
        let mut set = CidrSet::new(c, mask).map_err(|e| format!("--cluster-cidr: {e}"))?;
        for s in services.iter().filter(|s| s.v6 == c.v6) {
            // Not overlapping is the usual case and no error.
            let _ = set.occupy(s);
        }
        sets.push(set);
    }
    Ok(sets)
}

pub fn start(ctx: &Context) -> Result<(), Error> {
    let opts = &ctx.options;
    if !opts.allocate_node_cidrs {
        tracing::info!("--allocate-node-cidrs is false: node IPAM does nothing");
        return Ok(());
    }
    let cluster = opts
        .cluster_cidr
        .as_deref()
        .ok_or_else(|| Error::Other("--allocate-node-cidrs requires --cluster-cidr".into()))?;
    let sets = build_sets(
        cluster,
        opts.node_cidr_mask_size_ipv4,
        opts.node_cidr_mask_size_ipv6,
        opts.service_cluster_ip_range.as_deref(),
    )
    .map_err(Error::Other)?;
    let c = Arc::new(Allocator {
        client: ctx.client.clone(),
        nodes: ctx.informers.get::<Node>(),
        recorder: ctx.recorder.clone(),
        state: Mutex::new(AllocState { sets, initialized: false, assigned: HashMap::new() }),
    });
    let queue = ctx.queue("cidrallocator_node");
    {
        let (q, c2) = (queue.clone(), c.clone());
        // Upstream's `AllocateOrOccupyCIDR`: every new node is synced, so one that arrives
        // already carrying blocks has them marked used; an update matters when the node
        // still needs blocks or someone else set them.
        c.nodes.add_handler(move |e| match e {
            Event::Add(n) => q.add(informers::key_of(n.as_ref())),
            Event::Update(old, n) => {
                let cidrs = pod_cidrs(n);
                if cidrs.is_empty() || cidrs != pod_cidrs(old) {
                    q.add(informers::key_of(n.as_ref()));
                }
            }
            Event::Delete(n) => c2.state.lock().release(n),
        });
    }
    let c2 = c.clone();
    controller::run_workers(ctx, queue, WORKERS, move |key| {
        let c = c2.clone();
        async move { c.sync(&key).await }
    });
    Ok(())
}

struct Allocator {
    client: kube::Client,
    nodes: Arc<Informer<Node>>,
    recorder: Recorder,
    state: Mutex<AllocState>,
}

struct AllocState {
    sets: Vec<CidrSet>,
    /// Whether the blocks of the nodes present at start are marked used: nothing may be
    /// allocated before, or a block could be handed out twice.
    initialized: bool,
    /// The blocks patched onto each node (by UID) that the informer may not show yet:
    /// a sync on that stale copy must not allocate a second time.
    assigned: HashMap<String, Vec<String>>,
}

fn pod_cidrs(node: &Node) -> Vec<String> {
    let spec = node.spec.as_ref();
    let list: Vec<String> = spec.and_then(|s| s.pod_cidrs.clone()).unwrap_or_default();
    if !list.is_empty() {
        return list;
    }
    spec.and_then(|s| s.pod_cidr.clone()).filter(|c| !c.is_empty()).into_iter().collect()
}

impl AllocState {
    fn occupy(&mut self, node: &Node) {
        for s in pod_cidrs(node) {
            let Ok(cidr) = s.parse::<Cidr>() else {
                tracing::warn!(node = ?node.metadata.name, cidr = %s, "node has an unparsable pod CIDR");
                continue;
            };
            if let Some(set) = self.sets.iter_mut().find(|set| set.cluster().is_v6() == cidr.is_v6())
                && let Err(err) = set.occupy(&cidr)
            {
                tracing::warn!(node = ?node.metadata.name, %err, "node's pod CIDR is outside the cluster CIDR");
            }
        }
    }

    /// Frees a deleted node's blocks: those it shows and those patched onto it that the
    /// informer never showed (the node may be deleted before our patch is observed).
    fn release(&mut self, node: &Node) {
        let mut cidrs = pod_cidrs(node);
        if let Some(uid) = node.metadata.uid.as_deref()
            && let Some(assigned) = self.assigned.remove(uid)
        {
            cidrs.extend(assigned);
        }
        for s in cidrs {
            let Ok(cidr) = s.parse::<Cidr>() else { continue };
            if let Some(set) = self.sets.iter_mut().find(|set| set.cluster().is_v6() == cidr.is_v6()) {
                let _ = set.release(&cidr);
            }
        }
    }
}

impl Allocator {
    fn initialize(&self) {
        let mut st = self.state.lock();
        if st.initialized {
            return;
        }
        for node in self.nodes.list() {
            st.occupy(&node);
        }
        st.initialized = true;
    }

    async fn sync(&self, key: &str) -> Result<(), Error> {
        self.initialize();
        let Some(node) = self.nodes.get(key) else { return Ok(()) };
        let uid = node.metadata.uid.clone().unwrap_or_default();
        if !pod_cidrs(&node).is_empty() {
            let mut st = self.state.lock();
            st.assigned.remove(&uid);
            st.occupy(&node);
            return Ok(());
        }
        if self.state.lock().assigned.contains_key(&uid) {
            return Ok(());
        }
        let allocated: Option<Vec<Cidr>> = {
            let mut st = self.state.lock();
            let mut got = Vec::new();
            let mut exhausted = false;
            for set in st.sets.iter_mut() {
                match set.allocate_next() {
                    Some(c) => got.push(c),
                    None => exhausted = true,
                }
            }
            if exhausted {
                for c in &got {
                    if let Some(set) = st.sets.iter_mut().find(|s| s.cluster().is_v6() == c.is_v6()) {
                        let _ = set.release(c);
                    }
                }
                None
            } else {
                Some(got)
            }
        };
        let Some(cidrs) = allocated else {
            self.recorder.event(
                COMPONENT,
                node.as_ref(),
                Type::Normal,
                "CIDRNotAvailable",
                format!("Node {key} status is now: CIDRNotAvailable"),
            );
            return Err(Error::Other(format!("no pod CIDR left for node {key}")));
        };
        let strings: Vec<String> = cidrs.iter().map(ToString::to_string).collect();
        let patch = serde_json::json!({"spec": {"podCIDR": strings[0], "podCIDRs": strings}});
        let api: Api<Node> = Api::all(self.client.clone());
        match api.patch(key, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {
                tracing::info!(node = key, cidrs = ?strings, "allocated pod CIDRs");
                self.state.lock().assigned.insert(uid, strings);
                Ok(())
            }
            Err(e) => {
                let mut st = self.state.lock();
                for c in &cidrs {
                    if let Some(set) = st.sets.iter_mut().find(|s| s.cluster().is_v6() == c.is_v6()) {
                        let _ = set.release(c);
                    }
                }
                drop(st);
                if controller::api_code(&e) == Some(404) {
                    return Ok(());
                }
                self.recorder.event(
                    COMPONENT,
                    node.as_ref(),
                    Type::Normal,
                    "CIDRAssignmentFailed",
                    format!("Node {key} status is now: CIDRAssignmentFailed"),
                );
                Err(e.into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(s: &str) -> Cidr {
        s.parse().unwrap()
    }

    #[test]
    fn parse_and_format() {
        assert_eq!(cidr("10.244.3.7/16").to_string(), "10.244.0.0/16");
        assert_eq!(cidr("fd00:10:244::1/56").to_string(), "fd00:10:244::/56");
        assert!("10.0.0.0".parse::<Cidr>().is_err());
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("nonsense/8".parse::<Cidr>().is_err());
    }

    #[test]
    fn allocates_in_order_and_exhausts() {
        let mut set = CidrSet::new(cidr("10.244.0.0/22"), 24).unwrap();
        let got: Vec<String> = (0..4).map(|_| set.allocate_next().unwrap().to_string()).collect();
        assert_eq!(got, vec!["10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24"]);
        assert_eq!(set.allocate_next(), None);
        set.release(&cidr("10.244.1.0/24")).unwrap();
        assert_eq!(set.allocate_next().unwrap().to_string(), "10.244.1.0/24");
        assert!(set.occupy(&cidr("10.245.0.0/24")).is_err());
    }

    #[test]
    fn occupied_blocks_are_skipped() {
        let mut set = CidrSet::new(cidr("10.244.0.0/16"), 24).unwrap();
        set.occupy(&cidr("10.244.0.0/24")).unwrap();
        // A range larger than a block occupies every block it covers.
        set.occupy(&cidr("10.244.2.0/23")).unwrap();
        assert_eq!(set.allocated(), 3);
        assert_eq!(set.allocate_next().unwrap().to_string(), "10.244.1.0/24");
        assert_eq!(set.allocate_next().unwrap().to_string(), "10.244.4.0/24");
    }

    #[test]
    fn build_sets_validates_and_filters_services() {
        assert!(build_sets("10.244.0.0/16", 8, 64, None).is_err(), "mask below the cluster prefix");
        assert!(build_sets("10.0.0.0/8", 30, 64, None).is_err(), "more than 2^16 blocks");
        assert!(build_sets("10.244.0.0/16,10.245.0.0/16", 24, 64, None).is_err());
        assert!(build_sets("bad", 24, 64, None).is_err());
        let mut sets = build_sets("10.96.0.0/15,fd00::/48", 24, 64, Some("10.96.0.0/16")).unwrap();
        assert_eq!(sets.len(), 2);
        assert_eq!(sets[0].allocated(), 256);
        assert_eq!(sets[0].allocate_next().unwrap().to_string(), "10.97.0.0/24");
        assert_eq!(sets[1].allocate_next().unwrap().to_string(), "fd00::/64");
    }

    #[test]
    fn release_frees_assigned_blocks_not_yet_observed() {
        let sets = vec![CidrSet::new(cidr("10.244.0.0/22"), 24).unwrap()];
        let mut st = AllocState { sets, initialized: true, assigned: HashMap::new() };
        let got = st.sets[0].allocate_next().unwrap();
        st.assigned.insert("uid-1".into(), vec![got.to_string()]);
        // The deleted node as the informer last saw it: no podCIDRs yet.
        let node = Node {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("n1".into()),
                uid: Some("uid-1".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        st.release(&node);
        assert_eq!(st.sets[0].allocated(), 0);
        assert!(st.assigned.is_empty());
    }
}
