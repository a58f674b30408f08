//! The node lifecycle controller: notices nodes whose kubelet stopped reporting (no new
//! Lease renewal or Ready heartbeat within the grace period, measured on this process's
//! clock) and marks them Unknown; taints nodes by their conditions (NoSchedule at once,
//! NoExecute through a per-zone rate limiter that slows or stops in disrupted zones).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::controller::{self, Context, Error};
use crate::events::{Recorder, Type};
use crate::informers::{self, Event, Informer};
use crate::options::Options;
use crate::podutil;

const COMPONENT: &str = "node-controller";
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
const LABEL_EXCLUDE_DISRUPTION: &str = "node.kubernetes.io/exclude-disruption";
/// How often the NoExecute tainting pass runs (upstream's `NodeEvictionPeriod`).
const TAINTING_PERIOD: Duration = Duration::from_millis(100);
/// Upstream's `scheduleNodeUpdatesWorkers` / `podUpdateWorkerSize`.
const NODE_UPDATE_WORKERS: usize = 8;
const POD_UPDATE_WORKERS: usize = 4;
const SWAP_RETRIES: usize = 5;

/// The NoSchedule taint each condition status maps to (upstream's
/// `nodeConditionToTaintKeyStatusMap`).
const CONDITION_TAINTS: &[(&str, &str, &str)] = &[
    ("Ready", "False", TAINT_NOT_READY),
    ("Ready", "Unknown", TAINT_UNREACHABLE),
    ("MemoryPressure", "True", "node.kubernetes.io/memory-pressure"),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    ("NetworkUnavailable", "True", "node.kubernetes.io/network-unavailable"),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
];

pub fn start(ctx: &Context) -> Result<(), Error> {
    let leases = ctx.informers.get_with(
        "node-leases",
        Api::<Lease>::namespaced(ctx.informers.client().clone(), "kube-node-lease"),
        watcher::Config::default(),
    );
    let c = Arc::new(Controller {
        client: ctx.client.clone(),
        nodes: ctx.informers.get::<Node>(),
        pods: ctx.informers.get::<Pod>(),
        leases,
        recorder: ctx.recorder.clone(),
        opts: ctx.options.clone(),
        state: Mutex::new(State::default()),
    });
    let node_queue = ctx.queue("node_lifecycle_controller");
    {
        let q = node_queue.clone();
        c.nodes.add_handler(move |e| {
            if !matches!(e, Event::Delete(_)) {
                q.add(informers::key_of(crate::controllers::endpointslice::event_object(e)));
            }
        });
    }
    let pod_queue = ctx.queue("node_lifecycle_controller_pods");
    {
        let q = pod_queue.clone();
        c.pods.add_handler(move |e| {
            // Only a pod newly bound to a node: the kubelet owns its readiness afterwards.
            let (old, new) = match e {
                Event::Add(p) => (None, p),
                Event::Update(o, n) => (Some(o), n),
                Event::Delete(_) => return,
            };
            let node = podutil::node_name(new);
            if !node.is_empty() && old.is_none_or(|o| podutil::node_name(o) != node) {
                q.add(informers::key_of(new.as_ref()));
            }
        });
    }
    let c2 = c.clone();
    controller::run_workers(ctx, node_queue, NODE_UPDATE_WORKERS, move |key| {
        let c = c2.clone();
        async move { c.sync_no_schedule_taints(&key).await }
    });
    let c2 = c.clone();
    controller::run_workers(ctx, pod_queue, POD_UPDATE_WORKERS, move |key| {
        let c = c2.clone();
        async move { c.sync_pod(&key).await }
    });
    let (c2, informers, shutdown) = (c.clone(), ctx.informers.clone(), ctx.shutdown.clone());
    tokio::spawn(async move {
        let run = async {
            informers.wait_synced().await;
            let mut tick = tokio::time::interval(c2.opts.node_monitor_period.max(Duration::from_millis(10)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                c2.monitor_node_health().await;
            }
        };
        tokio::select! {
            () = shutdown.wait() => {}
            () = run => {}
        }
    });
    let (c2, informers, shutdown) = (c, ctx.informers.clone(), ctx.shutdown.clone());
    tokio::spawn(async move {
        let run = async {
            informers.wait_synced().await;
            let mut tick = tokio::time::interval(TAINTING_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                c2.no_execute_tainting_pass().await;
            }
        };
        tokio::select! {
            () = shutdown.wait() => {}
            () = run => {}
        }
    });
    Ok(())
}

struct Controller {
    client: kube::Client,
    nodes: Arc<Informer<Node>>,
    pods: Arc<Informer<Pod>>,
    leases: Arc<Informer<Lease>>,
    recorder: Recorder,
    opts: Arc<Options>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// What this controller last saw of each node's liveness (upstream's nodeHealthMap).
    health: HashMap<String, Health>,
    known: HashSet<String>,
    zone_states: HashMap<String, ZoneState>,
    /// Per zone, the nodes waiting for their NoExecute taint.
    tainters: HashMap<String, Tainter>,
    /// Nodes whose pods could not all be marked not ready.
    retry_pods: HashSet<String>,
}

/// One node's liveness as observed here: `probe` moves only when this process sees the
/// Lease renewal or the Ready heartbeat change, so clock skew between hosts is harmless.
#[derive(Debug, Clone)]
pub struct Health {
    pub probe: Instant,
    /// The last Ready heartbeat seen, kept when a (stale) copy shows no condition.
    heartbeat: Option<Timestamp>,
    lease_renew: Option<Timestamp>,
}

/// The Ready condition's heartbeat, unless the condition is the placeholder this
/// controller writes for a node that never posted status (its heartbeat is the node's
/// creation time, not a sign of life).
fn heartbeat(node: &Node) -> Option<Timestamp> {
    condition(node, "Ready")
        .filter(|c| c.reason.as_deref() != Some(REASON_NEVER_UPDATED))
        .and_then(|c| c.last_heartbeat_time.as_ref().map(|t| t.0))
}

fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

fn ready_status(node: &Node) -> Option<&str> {
    condition(node, "Ready").map(|c| c.status.as_str())
}

/// Updates `saved` with what the node and its Lease show now (upstream's first half of
/// `tryUpdateNodeHealth`).
/// Only a changed heartbeat or Lease renewal is a sign of life: the Ready condition
/// appearing or vanishing may be this controller's own write seen through a stale cache.
pub fn observe(saved: Option<Health>, node: &Node, lease_renew: Option<Timestamp>, now: Instant) -> Health {
    let beat = heartbeat(node);
    let mut h = match saved {
        None => Health { probe: now, heartbeat: beat, lease_renew: None },
        Some(mut h) => {
            if beat.is_some() && beat != h.heartbeat {
                h.heartbeat = beat;
                h.probe = now;
            }
            h
        }
    };
    if lease_renew.is_some() && lease_renew != h.lease_renew {
        h.lease_renew = lease_renew;
        h.probe = now;
    }
    h
}

const REASON_NEVER_UPDATED: &str = "NodeStatusNeverUpdated";

/// Sets Ready, MemoryPressure, DiskPressure and PIDPressure to Unknown, as upstream does
/// for a node past its grace period; returns whether the Ready condition changed.
pub fn mark_unknown(node: &mut Node, now: Timestamp) -> bool {
    let created = node.metadata.creation_timestamp.clone();
    let status = node.status.get_or_insert_with(Default::default);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let mut ready_changed = false;
    for type_ in ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"] {
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            None => {
                conditions.push(NodeCondition {
                    type_: type_.into(),
                    status: "Unknown".into(),
                    reason: Some(REASON_NEVER_UPDATED.into()),
                    message: Some("Kubelet never posted node status.".into()),
                    last_heartbeat_time: created.clone(),
                    last_transition_time: Some(Time(now)),
                });
                ready_changed |= type_ == "Ready";
            }
            Some(c) if c.status != "Unknown" => {
                c.status = "Unknown".into();
                c.reason = Some("NodeStatusUnknown".into());
                c.message = Some("Kubelet stopped posting node status.".into());
                c.last_transition_time = Some(Time(now));
                ready_changed |= type_ == "Ready";
            }
            Some(_) => {}
        }
    }
    ready_changed
}

/// A zone's health, as upstream's `ZoneState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneState {
    Initial,
    Normal,
    PartialDisruption,
    FullDisruption,
}

/// Upstream's `ComputeZoneState`: every node not ready → full disruption; more than two
/// and at least `threshold` of them → partial disruption. Returns the not-ready count too.
pub fn compute_zone_state(ready: &[bool], threshold: f32) -> (usize, ZoneState) {
    let not_ready = ready.iter().filter(|r| !**r).count();
    let ready_n = ready.len() - not_ready;
    let state = if ready_n == 0 && not_ready > 0 {
        ZoneState::FullDisruption
    } else if not_ready > 2 && not_ready as f32 / ready.len() as f32 >= threshold {
        ZoneState::PartialDisruption
    } else {
        ZoneState::Normal
    };
    (not_ready, state)
}

/// The NoExecute tainting rate (nodes per second) of a zone in `state` with `size` nodes.
pub fn zone_rate(state: ZoneState, size: usize, opts: &Options) -> f64 {
    match state {
        ZoneState::PartialDisruption if size <= opts.large_cluster_size_threshold as usize => 0.0,
        ZoneState::PartialDisruption => f64::from(opts.secondary_node_eviction_rate),
        _ => f64::from(opts.node_eviction_rate),
    }
}

/// The zone key of a node: region and zone labels (upstream's `GetZoneKey`).
pub fn zone_key(node: &Node) -> String {
    let labels = node.metadata.labels.as_ref();
    let get =
        |a: &str, b: &str| labels.and_then(|l| l.get(a).or_else(|| l.get(b))).cloned().unwrap_or_default();
    let region = get("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region");
    let zone = get("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone");
    if region.is_empty() && zone.is_empty() { String::new() } else { format!("{region}:\u{0}:{zone}") }
}

/// A token bucket with burst 1 (upstream's eviction limiter); rate 0 never admits.
#[derive(Debug)]
pub struct Bucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    pub fn new(rate: f64, now: Instant) -> Self {
        Self { rate, tokens: 1.0, last: now }
    }

    pub fn try_accept(&mut self, now: Instant) -> bool {
        if self.rate <= 0.0 {
            return false;
        }
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(1.0);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Upstream's `RateLimitedTimedQueue`: nodes to taint in FIFO order, each admitted by the
/// zone's bucket. A node stays in `members` after it is processed, so it is not tainted
/// again until [`Tainter::remove`] (the node became ready, or lost its taint).
#[derive(Debug)]
pub struct Tainter {
    queue: VecDeque<(String, Instant)>,
    members: HashSet<String>,
    bucket: Bucket,
}

impl Tainter {
    pub fn new(rate: f64, now: Instant) -> Self {
        Self { queue: VecDeque::new(), members: HashSet::new(), bucket: Bucket::new(rate, now) }
    }

    pub fn add(&mut self, node: &str, now: Instant) -> bool {
        if !self.members.insert(node.to_owned()) {
            return false;
        }
        self.queue.push_back((node.to_owned(), now));
        true
    }

    pub fn remove(&mut self, node: &str) {
        self.members.remove(node);
        self.queue.retain(|(n, _)| n != node);
    }

    /// A new rate; the bucket starts full again, as upstream's `SwapLimiter`.
    pub fn set_rate(&mut self, rate: f64, now: Instant) {
        if (self.bucket.rate - rate).abs() > f64::EPSILON {
            self.bucket = Bucket::new(rate, now);
        }
    }

    /// The next node due and admitted by the bucket, taken off the queue.
    pub fn next(&mut self, now: Instant) -> Option<String> {
        let (_, at) = self.queue.front()?;
        if *at > now || !self.bucket.try_accept(now) {
            return None;
        }
        self.queue.pop_front().map(|(n, _)| n)
    }

    /// Puts back a node whose tainting failed, to be tried after `delay`.
    pub fn retry(&mut self, node: String, at: Instant) {
        if self.members.contains(&node) {
            self.queue.push_back((node, at));
        }
    }
}

fn has_taint(node: &Node, key: &str, effect: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key && t.effect == effect))
}

fn taint(key: &str, effect: &str) -> Taint {
    Taint { key: key.into(), effect: effect.into(), ..Taint::default() }
}

/// The NoSchedule taints a node's conditions (and `spec.unschedulable`) call for, and
/// the taints of that family it has: the difference is what to add and remove.
pub fn no_schedule_diff(node: &Node) -> (Vec<Taint>, Vec<Taint>) {
    let mut want: Vec<Taint> = Vec::new();
    for c in node.status.as_ref().and_then(|s| s.conditions.as_ref()).into_iter().flatten() {
        if let Some((_, _, key)) = CONDITION_TAINTS.iter().find(|(t, s, _)| *t == c.type_ && *s == c.status) {
            want.push(taint(key, "NoSchedule"));
        }
    }
    if node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false) {
        want.push(taint(TAINT_UNSCHEDULABLE, "NoSchedule"));
    }
    let have: Vec<&Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| {
            t.effect == "NoSchedule"
                && (t.key == TAINT_UNSCHEDULABLE || CONDITION_TAINTS.iter().any(|(_, _, k)| *k == t.key))
        })
        .collect();
    let add = want.iter().filter(|w| !have.iter().any(|h| h.key == w.key)).cloned().collect();
    let del = have.iter().filter(|h| !want.iter().any(|w| w.key == h.key)).map(|t| (*t).clone()).collect();
    (add, del)
}

impl Controller {
    fn nodes_api(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Adds `add` and removes `del` (matched by key and effect) on the node as it is now
    /// in the API, retrying conflicts (upstream's `SwapNodeControllerTaint`).
    async fn swap_taints(&self, name: &str, add: &[Taint], del: &[Taint]) -> Result<(), Error> {
        let api = self.nodes_api();
        let mut last = None;
        for _ in 0..SWAP_RETRIES {
            let Some(mut node) = api.get_opt(name).await? else { return Ok(()) };
            let spec = node.spec.get_or_insert_with(Default::default);
            let taints = spec.taints.get_or_insert_with(Vec::new);
            let before = taints.len();
            taints.retain(|t| !del.iter().any(|d| d.key == t.key && d.effect == t.effect));
            let mut changed = taints.len() != before;
            for a in add {
                if !taints.iter().any(|t| t.key == a.key && t.effect == a.effect) {
                    let mut a = a.clone();
                    a.time_added = Some(Time(Timestamp::now()));
                    taints.push(a);
                    changed = true;
                }
            }
            if !changed {
                return Ok(());
            }
            match api.replace(name, &PostParams::default(), &node).await {
                Ok(_) => return Ok(()),
                Err(e) if controller::api_code(&e) == Some(409) => last = Some(e),
                Err(e) if controller::api_code(&e) == Some(404) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        Err(last.map_or_else(|| Error::Other(format!("updating taints of node {name}")), Error::Api))
    }

    async fn sync_no_schedule_taints(&self, key: &str) -> Result<(), Error> {
        let Some(node) = self.nodes.get(key) else { return Ok(()) };
        let (add, del) = no_schedule_diff(&node);
        if add.is_empty() && del.is_empty() {
            return Ok(());
        }
        self.swap_taints(key, &add, &del).await
    }

    async fn sync_pod(&self, key: &str) -> Result<(), Error> {
        let Some(pod) = self.pods.get(key) else { return Ok(()) };
        let Some(node) = self.nodes.get(podutil::node_name(&pod)) else { return Ok(()) };
        match ready_status(&node) {
            Some(s) if s != "True" => {
                self.mark_pods_not_ready(&[pod], node.metadata.name.as_deref().unwrap_or("")).await
            }
            _ => Ok(()),
        }
    }

    /// Sets the Ready condition of each pod on the node to False (upstream's
    /// `MarkPodsNotReady`), so endpoints stop sending traffic to an unreachable node.
    async fn mark_pods_not_ready(&self, pods: &[Arc<Pod>], node: &str) -> Result<(), Error> {
        let mut first_err = None;
        for pod in pods {
            if podutil::node_name(pod) != node {
                continue;
            }
            let mut p = (**pod).clone();
            let Some(c) = p
                .status
                .as_mut()
                .and_then(|s| s.conditions.as_mut())
                .and_then(|cs| cs.iter_mut().find(|c| c.type_ == "Ready"))
            else {
                continue;
            };
            if c.status == "False" {
                continue;
            }
            c.status = "False".into();
            c.last_transition_time = Some(Time(Timestamp::now()));
            let (ns, name) = podutil::namespace_name(pod);
            let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            match api.replace_status(name, &PostParams::default(), &p).await {
                Ok(_) => self.recorder.event(
                    COMPONENT,
                    pod.as_ref(),
                    Type::Warning,
                    "NodeNotReady",
                    "Node is not ready".into(),
                ),
                Err(e) if controller::api_code(&e) == Some(404) => {}
                Err(e) => {
                    first_err.get_or_insert(Error::Api(e));
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// One pass of upstream's `monitorNodeHealth`.
    async fn monitor_node_health(&self) {
        let nodes = self.nodes.list();
        let now = Instant::now();
        self.track_membership(&nodes, now);
        let mut zone_ready: HashMap<String, Vec<bool>> = HashMap::new();
        for node in &nodes {
            let name = node.metadata.name.clone().unwrap_or_default();
            let (observed, current) = match self.update_health(node).await {
                Ok(v) => v,
                Err(err) => {
                    tracing::warn!(node = %name, %err, "updating node health");
                    continue;
                }
            };
            let excluded =
                node.metadata.labels.as_ref().is_some_and(|l| l.contains_key(LABEL_EXCLUDE_DISRUPTION));
            if !excluded {
                zone_ready.entry(zone_key(node)).or_default().push(current.as_deref() == Some("True"));
            }
            let Some(current) = current else { continue };
            self.process_taint_eviction(node, &current).await;
            let flipped = current != "True" && observed.as_deref() == Some("True");
            let retry = self.state.lock().retry_pods.contains(&name);
            if flipped {
                self.recorder.event(
                    COMPONENT,
                    node.as_ref(),
                    Type::Normal,
                    "NodeNotReady",
                    format!("Node {name} status is now: NodeNotReady"),
                );
            }
            if flipped || (retry && observed.as_deref() != Some("True")) {
                let pods: Vec<Arc<Pod>> =
                    self.pods.list().into_iter().filter(|p| podutil::node_name(p) == name).collect();
                let ok = self.mark_pods_not_ready(&pods, &name).await.map_err(|err| {
                    tracing::warn!(node = %name, %err, "marking pods not ready; will retry");
                });
                let mut st = self.state.lock();
                if ok.is_ok() {
                    st.retry_pods.remove(&name)
                } else {
                    st.retry_pods.insert(name)
                };
            } else {
                self.state.lock().retry_pods.remove(&name);
            }
        }
        self.handle_disruption(zone_ready, &nodes).await;
    }

    /// Notices added and deleted nodes: new zones get a tainter, gone nodes leave theirs.
    fn track_membership(&self, nodes: &[Arc<Node>], now: Instant) {
        let rate = f64::from(self.opts.node_eviction_rate);
        let mut st = self.state.lock();
        let current: HashSet<String> = nodes.iter().filter_map(|n| n.metadata.name.clone()).collect();
        for node in nodes {
            let name = node.metadata.name.clone().unwrap_or_default();
            if st.known.insert(name.clone()) {
                self.recorder.event(
                    COMPONENT,
                    node.as_ref(),
                    Type::Normal,
                    "RegisteredNode",
                    format!("Registered Node {name} in Controller"),
                );
            }
            let zone = zone_key(node);
            if !st.tainters.contains_key(&zone) {
                st.tainters.insert(zone.clone(), Tainter::new(rate, now));
                st.zone_states.entry(zone).or_insert(ZoneState::Initial);
            }
        }
        let gone: Vec<String> = st.known.iter().filter(|n| !current.contains(*n)).cloned().collect();
        for name in gone {
            st.known.remove(&name);
            st.health.remove(&name);
            st.retry_pods.remove(&name);
            for t in st.tainters.values_mut() {
                t.remove(&name);
            }
        }
    }

    /// Upstream's `tryUpdateNodeHealth`: returns the Ready status as observed and as it
    /// is after this controller's update (None when there is no Ready condition).
    async fn update_health(&self, node: &Arc<Node>) -> Result<(Option<String>, Option<String>), Error> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let lease_renew = self
            .leases
            .get_namespaced("kube-node-lease", &name)
            .and_then(|l| l.spec.as_ref()?.renew_time.as_ref().map(|t| t.0));
        let now = Instant::now();
        let observed = ready_status(node).map(str::to_owned);
        let grace = if observed.is_none() {
            self.opts.node_startup_grace_period
        } else {
            self.opts.node_monitor_grace_period
        };
        let probe = {
            let mut st = self.state.lock();
            let h = observe(st.health.remove(&name), node, lease_renew, now);
            let probe = h.probe;
            st.health.insert(name.clone(), h);
            probe
        };
        if now.saturating_duration_since(probe) <= grace {
            return Ok((observed.clone(), observed));
        }
        let mut updated = (**node).clone();
        if !mark_unknown(&mut updated, Timestamp::now()) {
            return Ok((observed.clone(), ready_status(&updated).map(str::to_owned)));
        }
        let written = self.nodes_api().replace_status(&name, &PostParams::default(), &updated).await?;
        tracing::info!(node = %name, "node stopped posting status; marked Unknown");
        let mut st = self.state.lock();
        if let Some(h) = st.health.get_mut(&name) {
            // Our own write is not a sign of life: keep the probe time, take the new times.
            *h = observe(Some(h.clone()), &written, lease_renew, h.probe);
        }
        Ok((observed, ready_status(&written).map(str::to_owned)))
    }

    /// Upstream's `processTaintBaseEviction`: NoExecute taints follow the Ready status,
    /// swapped at once between not-ready and unreachable, added through the zone's queue.
    async fn process_taint_eviction(&self, node: &Node, ready: &str) {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let zone = zone_key(node);
        let (want, opposite) = match ready {
            "False" => (TAINT_NOT_READY, TAINT_UNREACHABLE),
            "Unknown" => (TAINT_UNREACHABLE, TAINT_NOT_READY),
            _ => {
                if let Err(err) = self.mark_reachable(node).await {
                    tracing::warn!(node = name, %err, "removing NoExecute taints");
                }
                return;
            }
        };
        if has_taint(node, opposite, "NoExecute") {
            let r =
                self.swap_taints(name, &[taint(want, "NoExecute")], &[taint(opposite, "NoExecute")]).await;
            if let Err(err) = r {
                tracing::warn!(node = name, %err, "swapping NoExecute taints; will retry");
            }
            return;
        }
        let mut st = self.state.lock();
        if st.zone_states.get(&zone) == Some(&ZoneState::FullDisruption) && all_fully_disrupted(&st) {
            return;
        }
        let tainter = st
            .tainters
            .entry(zone)
            .or_insert_with(|| Tainter::new(f64::from(self.opts.node_eviction_rate), Instant::now()));
        if !has_taint(node, want, "NoExecute") {
            // Lost its taint (or never had it): let it queue again.
            tainter.remove(name);
        }
        tainter.add(name, Instant::now());
    }

    /// Removes both NoExecute taints and takes the node off its zone's queue.
    async fn mark_reachable(&self, node: &Node) -> Result<(), Error> {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        if let Some(t) = self.state.lock().tainters.get_mut(&zone_key(node)) {
            t.remove(name);
        }
        if has_taint(node, TAINT_NOT_READY, "NoExecute") || has_taint(node, TAINT_UNREACHABLE, "NoExecute") {
            self.swap_taints(
                name,
                &[],
                &[taint(TAINT_NOT_READY, "NoExecute"), taint(TAINT_UNREACHABLE, "NoExecute")],
            )
            .await?;
        }
        Ok(())
    }

    /// Upstream's `handleDisruption`: new zone states set each zone's tainting rate; when
    /// every zone is fully disrupted (the control plane, not the nodes, is the likely
    /// fault) tainting stops and NoExecute taints are removed.
    async fn handle_disruption(&self, zone_ready: HashMap<String, Vec<bool>>, nodes: &[Arc<Node>]) {
        let now = Instant::now();
        let threshold = self.opts.unhealthy_zone_threshold;
        let new_states: HashMap<String, (ZoneState, usize)> = zone_ready
            .iter()
            .map(|(z, r)| (z.clone(), (compute_zone_state(r, threshold).1, r.len())))
            .collect();
        let all_are =
            !new_states.is_empty() && new_states.values().all(|(s, _)| *s == ZoneState::FullDisruption);
        let enter_master_disruption = {
            let mut st = self.state.lock();
            for z in new_states.keys() {
                st.zone_states.entry(z.clone()).or_insert(ZoneState::Initial);
            }
            st.zone_states.retain(|z, _| new_states.contains_key(z));
            let all_were = all_fully_disrupted(&st);
            if all_are && all_were {
                return;
            }
            if all_are {
                tracing::info!("all nodes are not ready; entering master disruption mode");
                for t in st.tainters.values_mut() {
                    t.set_rate(0.0, now);
                }
                for s in st.zone_states.values_mut() {
                    *s = ZoneState::FullDisruption;
                }
                true
            } else {
                if all_were {
                    tracing::info!("some nodes are ready; exiting master disruption mode");
                    // The nodes could not be heard while everything was down: they get a
                    // fresh grace period rather than being tainted at once.
                    for h in st.health.values_mut() {
                        h.probe = now;
                    }
                }
                let st = &mut *st;
                for (zone, (state, size)) in &new_states {
                    let old = st.zone_states.insert(zone.clone(), *state);
                    if all_were || old != Some(*state) {
                        let rate = zone_rate(*state, *size, &self.opts);
                        st.tainters
                            .entry(zone.clone())
                            .or_insert_with(|| Tainter::new(rate, now))
                            .set_rate(rate, now);
                    }
                }
                false
            }
        };
        if enter_master_disruption {
            for node in nodes {
                if let Err(err) = self.mark_reachable(node).await {
                    tracing::warn!(node = ?node.metadata.name, %err, "removing NoExecute taints");
                }
            }
        }
    }

    /// Upstream's `doNoExecuteTaintingPass`: each zone taints what its bucket admits.
    async fn no_execute_tainting_pass(&self) {
        let zones: Vec<String> = self.state.lock().tainters.keys().cloned().collect();
        for zone in zones {
            loop {
                let now = Instant::now();
                let next = self.state.lock().tainters.get_mut(&zone).and_then(|t| t.next(now));
                let Some(name) = next else { break };
                let Some(node) = self.nodes.get(&name) else { continue };
                let (want, opposite) = match ready_status(&node) {
                    Some("False") => (TAINT_NOT_READY, TAINT_UNREACHABLE),
                    Some("Unknown") => (TAINT_UNREACHABLE, TAINT_NOT_READY),
                    Some(_) => continue,
                    None => {
                        self.retry(&zone, name, Duration::from_millis(50));
                        continue;
                    }
                };
                if let Err(err) = self
                    .swap_taints(&name, &[taint(want, "NoExecute")], &[taint(opposite, "NoExecute")])
                    .await
                {
                    tracing::warn!(node = %name, %err, "adding NoExecute taint; will retry");
                    self.retry(&zone, name, Duration::ZERO);
                }
            }
        }
    }

    fn retry(&self, zone: &str, node: String, delay: Duration) {
        if let Some(t) = self.state.lock().tainters.get_mut(zone) {
            t.retry(node, Instant::now() + delay);
        }
    }
}

fn all_fully_disrupted(st: &State) -> bool {
    !st.zone_states.is_empty() && st.zone_states.values().all(|s| *s == ZoneState::FullDisruption)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(ready: Option<(&str, i64)>) -> Node {
        Node {
            metadata: ObjectMeta { name: Some("n1".into()), ..Default::default() },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                conditions: ready.map(|(s, hb)| {
                    vec![NodeCondition {
                        type_: "Ready".into(),
                        status: s.into(),
                        last_heartbeat_time: Some(Time(Timestamp::from_second(hb).unwrap())),
                        last_transition_time: Some(Time(Timestamp::from_second(1).unwrap())),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn probe_moves_only_on_observed_change() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(30);
        let h = observe(None, &node(Some(("True", 100))), None, t0);
        assert_eq!(h.probe, t0);
        // Same heartbeat, same lease: no sign of life.
        let h = observe(Some(h), &node(Some(("True", 100))), None, t1);
        assert_eq!(h.probe, t0);
        // A new heartbeat, whatever its (remote) value.
        let h2 = observe(Some(h.clone()), &node(Some(("True", 50))), None, t1);
        assert_eq!(h2.probe, t1);
        // A lease renewal.
        let renew = Some(Timestamp::from_second(5).unwrap());
        let h3 = observe(Some(h), &node(Some(("True", 100))), renew, t1);
        assert_eq!(h3.probe, t1);
        let h4 = observe(Some(h3), &node(Some(("True", 100))), renew, t1 + Duration::from_secs(60));
        assert_eq!(h4.probe, t1);
    }

    #[test]
    fn condition_appearing_or_vanishing_is_no_sign_of_life() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(30);
        // A node that never posted status; the controller adds the Unknown placeholder.
        let h = observe(None, &node(None), None, t0);
        let mut marked = node(None);
        assert!(mark_unknown(&mut marked, Timestamp::from_second(200).unwrap()));
        let h = observe(Some(h), &marked, None, t1);
        assert_eq!(h.probe, t0);
        let h = observe(Some(h), &node(None), None, t1);
        assert_eq!(h.probe, t0);
        // A posted condition vanishing from a stale copy and coming back unchanged.
        let h = observe(None, &node(Some(("True", 100))), None, t0);
        let h = observe(Some(h), &node(None), None, t1);
        let h = observe(Some(h), &node(Some(("True", 100))), None, t1);
        assert_eq!(h.probe, t0);
    }

    #[test]
    fn unknown_marking() {
        let mut n = node(Some(("True", 100)));
        assert!(mark_unknown(&mut n, Timestamp::from_second(200).unwrap()));
        let c = condition(&n, "Ready").unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_deref()), ("Unknown", Some("NodeStatusUnknown")));
        assert_eq!(c.last_heartbeat_time.as_ref().unwrap().0.as_second(), 100);
        assert_eq!(condition(&n, "DiskPressure").unwrap().reason.as_deref(), Some("NodeStatusNeverUpdated"));
        assert!(!mark_unknown(&mut n, Timestamp::from_second(300).unwrap()));
        let mut never = node(None);
        assert!(mark_unknown(&mut never, Timestamp::from_second(200).unwrap()));
        assert_eq!(
            condition(&never, "Ready").unwrap().message.as_deref(),
            Some("Kubelet never posted node status.")
        );
    }

    #[test]
    fn zone_states() {
        assert_eq!(compute_zone_state(&[false, false], 0.55).1, ZoneState::FullDisruption);
        assert_eq!(compute_zone_state(&[true, false, false], 0.55).1, ZoneState::Normal);
        assert_eq!(compute_zone_state(&[true, false, false, false], 0.55), (3, ZoneState::PartialDisruption));
        assert_eq!(compute_zone_state(&[true, true, true, false, false, false], 0.55).1, ZoneState::Normal);
        assert_eq!(compute_zone_state(&[], 0.55).1, ZoneState::Normal);
    }

    #[test]
    fn bucket_and_tainter() {
        let t0 = Instant::now();
        let mut t = Tainter::new(0.1, t0);
        assert!(t.add("a", t0));
        assert!(t.add("b", t0));
        assert!(!t.add("a", t0));
        assert_eq!(t.next(t0).as_deref(), Some("a"));
        assert_eq!(t.next(t0), None, "burst 1");
        assert_eq!(t.next(t0 + Duration::from_secs(10)).as_deref(), Some("b"));
        // Processed nodes stay members until removed.
        assert!(!t.add("a", t0));
        t.remove("a");
        assert!(t.add("a", t0));
        t.set_rate(0.0, t0);
        assert_eq!(t.next(t0 + Duration::from_secs(1000)), None);
    }

    #[test]
    fn no_schedule_taints_follow_conditions() {
        let mut n = node(Some(("False", 1)));
        n.spec.as_mut().unwrap().taints =
            Some(vec![taint(TAINT_UNREACHABLE, "NoSchedule"), taint("custom", "NoSchedule")]);
        let (add, del) = no_schedule_diff(&n);
        assert_eq!(add.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(), vec![TAINT_NOT_READY]);
        assert_eq!(del.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(), vec![TAINT_UNREACHABLE]);
    }
}
