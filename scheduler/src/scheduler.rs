//! The scheduling cycle and the binding cycle (upstream's `scheduleOne`): pop a pod, run
//! PreFilter, Filter over enough nodes (in parallel), Score, pick the best node, assume
//! the pod there in the cache, Reserve and Permit — all under the cache lock, one pod at
//! a time, so each decision sees the previous ones — then bind asynchronously, so the next
//! cycle need not wait for the API server.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use parking_lot::Mutex;

use crate::cache::Cache;
use crate::events::Recorder;
use crate::framework::runtime::Profile;
use crate::framework::{Code, CycleState, NodeInfo, PodInfo, Rejection, events};
use crate::metrics::{self, Metrics};
use crate::queue::{QueuedPod, SchedulingQueue};

/// Below this many nodes the filter runs on the scheduling thread: spawning helpers would
/// cost more than it saves.
const PARALLEL_FILTER_MIN_NODES: usize = 128;
/// Upstream's floor on nodes to find before scoring (`minFeasibleNodesToFind`).
const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: usize = 5;

pub struct Scheduler {
    pub client: kube::Client,
    pub cache: Arc<Mutex<Cache>>,
    pub queue: Arc<SchedulingQueue>,
    pub profiles: Arc<HashMap<String, Profile>>,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub percentage_of_nodes_to_score: i32,
    pub parallelism: usize,
    next_start: AtomicUsize,
}

/// Why a cycle found no node.
struct FitError {
    num_all_nodes: usize,
    rejections: HashMap<String, Rejection>,
    pre_filter_message: Option<String>,
    post_filter_message: String,
}

impl FitError {
    /// Upstream's message: `0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had
    /// untolerated taint {a: b}. preemption: ...`.
    fn message(&self) -> String {
        let mut msg = format!("0/{} nodes are available:", self.num_all_nodes);
        if let Some(pre) = &self.pre_filter_message {
            msg.push_str(&format!(" {pre}."));
        } else {
            let mut histogram: BTreeMap<&str, usize> = BTreeMap::new();
            for r in self.rejections.values() {
                for reason in &r.reasons {
                    *histogram.entry(reason.as_str()).or_default() += 1;
                }
            }
            let mut parts: Vec<String> = histogram.iter().map(|(r, n)| format!("{n} {r}")).collect();
            parts.sort();
            if !parts.is_empty() {
                msg.push_str(&format!(" {}.", parts.join(", ")));
            }
        }
        if !self.post_filter_message.is_empty() {
            msg.push_str(&format!(" {}", self.post_filter_message));
        }
        msg
    }

    fn rejecting_plugins(&self) -> HashSet<&'static str> {
        self.rejections.values().map(|r| r.plugin).filter(|p| !p.is_empty()).collect()
    }
}

/// One node's Filter result: the node, or its name and why it was rejected.
type FilterOutcome<'c> = Result<&'c NodeInfo, (String, Rejection)>;

enum Decision {
    Placed { node: String, state: CycleState },
    Unfit(FitError, CycleState),
    Failed(String),
}

/// Upstream's adaptive `numFeasibleNodesToFind`.
pub fn num_feasible_nodes_to_find(percentage: i32, all: usize) -> usize {
    if all < MIN_FEASIBLE_NODES_TO_FIND {
        return all;
    }
    let mut pct = percentage as usize;
    if pct == 0 {
        pct = 50usize.saturating_sub(all / 125).max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND);
    }
    if pct >= 100 {
        return all;
    }
    (all * pct / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

impl Scheduler {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: kube::Client,
        cache: Arc<Mutex<Cache>>,
        queue: Arc<SchedulingQueue>,
        profiles: Arc<HashMap<String, Profile>>,
        recorder: Recorder,
        metrics: Arc<Metrics>,
        percentage_of_nodes_to_score: i32,
        parallelism: usize,
    ) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            client,
            cache,
            queue,
            profiles,
            recorder,
            metrics,
            percentage_of_nodes_to_score,
            parallelism: parallelism.clamp(1, cores),
            next_start: AtomicUsize::new(0),
        }
    }

    /// Schedules pods until the queue closes.
    pub async fn run(self: Arc<Self>) {
        while let Some(queued) = self.queue.pop().await {
            self.schedule_one(queued);
            // Let informers and binding tasks run between cycles.
            tokio::task::yield_now().await;
        }
    }

    fn schedule_one(self: &Arc<Self>, queued: QueuedPod) {
        let pod = queued.pod.clone();
        let Some(profile) = self.profiles.get(&pod.scheduler_name) else {
            self.queue.delete(&pod.key);
            return;
        };
        if pod.terminating {
            self.queue.delete(&pod.key);
            return;
        }
        let start = Instant::now();
        // The whole scheduling cycle runs with the cache locked: decisions are serialized
        // exactly as upstream's single scheduling goroutine makes them.
        let mut cache = self.cache.lock();
        if cache.is_placed(&pod.uid) {
            drop(cache);
            self.queue.delete(&pod.key);
            return;
        }
        let decision = self.decide(profile, &cache, &pod);
        match decision {
            Decision::Placed { node, mut state } => {
                let assumed = Arc::new(pod.assumed_on(&node));
                cache.assume(assumed.clone(), &node);
                let admitted = profile
                    .run_reserve(&mut state, &pod, &node)
                    .and_then(|()| profile.run_permit(&state, &pod, &node));
                if let Err(r) = admitted {
                    profile.run_unreserve(&mut state, &pod, &node);
                    cache.forget(&pod.uid);
                    drop(cache);
                    if r.code == Code::Error {
                        self.error(profile, &pod, &r.reasons.join(", "), start);
                    } else {
                        // As upstream: a FitError over the one node that was chosen.
                        let fit = FitError {
                            num_all_nodes: 1,
                            rejections: HashMap::from([(node.clone(), r)]),
                            pre_filter_message: None,
                            post_filter_message: String::new(),
                        };
                        self.fail(profile, &queued, &fit.message(), None, fit.rejecting_plugins(), start);
                    }
                    return;
                }
                drop(cache);
                let this = self.clone();
                tokio::spawn(async move { this.bind(queued, assumed, node, state, start).await });
            }
            Decision::Unfit(mut fit, state) => {
                let post = profile.run_post_filter(&state, &pod, &cache, &fit.rejections);
                let mut nominated = None;
                if let Some(post) = post {
                    if let Some(node) = post.nominated_node.clone() {
                        cache.nominate(pod.clone(), &node);
                        for p in &post.clear_nominations {
                            cache.clear_nomination(&p.uid);
                        }
                        self.metrics.preemption(post.victims.len());
                        self.preempt(&pod, &node, post.victims, post.clear_nominations);
                        nominated = Some(node);
                    } else if !post.message.is_empty() {
                        fit.post_filter_message = format!("preemption: {}", post.message);
                    }
                }
                drop(cache);
                let plugins = fit.rejecting_plugins();
                self.fail(profile, &queued, &fit.message(), nominated, plugins, start);
            }
            Decision::Failed(message) => {
                drop(cache);
                self.error(profile, &pod, &message, start);
            }
        }
    }

    fn decide(&self, profile: &Profile, cache: &Cache, pod: &PodInfo) -> Decision {
        let all = cache.node_count();
        if all == 0 {
            return Decision::Failed("no nodes available to schedule pods".into());
        }
        let mut state = CycleState::default();
        if let Err(r) = profile.run_pre_filter(&mut state, pod, cache) {
            if r.code == Code::Error {
                return Decision::Failed(r.reasons.join(", "));
            }
            let rejections = cache.nodes().map(|n| (n.name.clone(), r.clone())).collect();
            return Decision::Unfit(
                FitError {
                    num_all_nodes: all,
                    rejections,
                    pre_filter_message: Some(r.reasons.join(", ")),
                    post_filter_message: String::new(),
                },
                state,
            );
        }
        // A pod nominated by an earlier preemption tries that node first.
        let nominated = cache.nominated_node(&pod.uid).unwrap_or(&pod.nominated_node_name);
        if !nominated.is_empty()
            && let Some(node) = cache.node(nominated)
            && profile.run_filter_with_nominated(&state, pod, node, cache).is_ok()
        {
            return Decision::Placed { node: node.name.clone(), state };
        }
        let pct = profile.percentage_of_nodes_to_score.unwrap_or(self.percentage_of_nodes_to_score);
        let want = num_feasible_nodes_to_find(pct, all);
        let (feasible, rejections) = self.find_feasible(profile, &state, pod, cache, want);
        if let Some(r) = rejections.values().find(|r| r.code == Code::Error) {
            return Decision::Failed(r.reasons.join(", "));
        }
        if feasible.is_empty() {
            return Decision::Unfit(
                FitError {
                    num_all_nodes: all,
                    rejections,
                    pre_filter_message: None,
                    post_filter_message: String::new(),
                },
                state,
            );
        }
        if feasible.len() == 1 {
            return Decision::Placed { node: feasible[0].name.clone(), state };
        }
        profile.run_pre_score(&mut state, pod, cache, &feasible);
        let scores = profile.run_score(&state, pod, &feasible);
        // Highest total wins; ties are broken uniformly at random (reservoir sampling).
        let (mut best, mut best_score, mut ties) = (0, i64::MIN, 0u32);
        for (i, s) in scores.iter().enumerate() {
            if *s > best_score {
                (best, best_score, ties) = (i, *s, 1);
            } else if *s == best_score {
                ties += 1;
                if rand::random_range(0..ties) == 0 {
                    best = i;
                }
            }
        }
        Decision::Placed { node: feasible[best].name.clone(), state }
    }

    /// Runs Filter over the nodes, starting where the previous cycle stopped, until `want`
    /// feasible nodes are found or every node has been tried.
    fn find_feasible<'c>(
        &self,
        profile: &Profile,
        state: &CycleState,
        pod: &PodInfo,
        cache: &'c Cache,
        want: usize,
    ) -> (Vec<&'c NodeInfo>, HashMap<String, Rejection>) {
        let slots = cache.node_slots();
        let n = slots.len();
        let start = self.next_start.load(Ordering::Relaxed) % n.max(1);
        let check = |i: usize| -> Option<Result<&'c NodeInfo, (String, Rejection)>> {
            let node = &slots[(start + i) % n];
            node.node.as_ref()?;
            Some(match profile.run_filter_with_nominated(state, pod, node, cache) {
                Ok(()) => Ok(node),
                Err(r) => Err((node.name.clone(), r)),
            })
        };
        let mut feasible = Vec::new();
        let mut rejections = HashMap::new();
        let processed;
        if self.parallelism <= 1 || n < PARALLEL_FILTER_MIN_NODES {
            let mut i = 0;
            while i < n && feasible.len() < want {
                match check(i) {
                    Some(Ok(node)) => feasible.push(node),
                    Some(Err((name, r))) => {
                        rejections.insert(name, r);
                    }
                    None => {}
                }
                i += 1;
            }
            processed = i;
        } else {
            let next = AtomicUsize::new(0);
            let found = AtomicUsize::new(0);
            let stop = AtomicBool::new(false);
            let results: Mutex<Vec<(usize, FilterOutcome<'c>)>> = Mutex::new(Vec::new());
            let work = || {
                let mut local = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    if let Some(r) = check(i) {
                        if r.is_ok() && found.fetch_add(1, Ordering::Relaxed) + 1 >= want {
                            stop.store(true, Ordering::Relaxed);
                        }
                        local.push((i, r));
                    }
                }
                results.lock().extend(local);
            };
            std::thread::scope(|s| {
                for _ in 1..self.parallelism {
                    s.spawn(work);
                }
                work();
            });
            let mut results = results.into_inner();
            results.sort_by_key(|(i, _)| *i);
            processed = results.last().map_or(n, |(i, _)| i + 1);
            for (_, r) in results {
                match r {
                    Ok(node) if feasible.len() < want => feasible.push(node),
                    Ok(_) => {}
                    Err((name, r)) => {
                        rejections.insert(name, r);
                    }
                }
            }
        }
        self.next_start.store((start + processed) % n.max(1), Ordering::Relaxed);
        (feasible, rejections)
    }

    async fn bind(
        self: Arc<Self>,
        queued: QueuedPod,
        assumed: Arc<PodInfo>,
        node: String,
        mut state: CycleState,
        start: Instant,
    ) {
        let profile = &self.profiles[&assumed.scheduler_name];
        let pod = &queued.pod;
        let result = match profile.run_pre_bind(pod, &node).await {
            Ok(()) => profile.run_bind(pod, &node).await,
            Err(r) => Err(r),
        };
        match result {
            Ok(()) => {
                self.metrics.attempt(
                    &profile.name,
                    metrics::Result::Scheduled,
                    start.elapsed().as_secs_f64(),
                );
                self.metrics.scheduled(queued.attempts, queued.first_seen.elapsed().as_secs_f64());
                self.recorder.pod_event(
                    pod,
                    "Normal",
                    "Scheduled",
                    "Binding",
                    format!("Successfully assigned {} to {node}", pod.key),
                );
                profile.run_post_bind(pod, &node);
                self.queue.delete(&pod.key);
            }
            Err(r) => {
                tracing::info!(pod = %pod.key, %node, reason = %r.reasons.join(", "), "binding failed");
                {
                    let mut cache = self.cache.lock();
                    profile.run_unreserve(&mut state, pod, &node);
                    cache.forget(&pod.uid);
                }
                self.error(profile, pod, &format!("binding rejected: {}", r.reasons.join(", ")), start);
                // The space the pod held is free again.
                self.queue.move_for_event(events::ASSIGNED_POD_DELETE);
            }
        }
    }

    /// Reports an attempt no node could take: event, the PodScheduled condition (and
    /// nomination) in the pod's status, and back to the queue.
    fn fail(
        &self,
        profile: &Profile,
        queued: &QueuedPod,
        message: &str,
        nominated: Option<String>,
        plugins: HashSet<&'static str>,
        start: Instant,
    ) {
        let pod = &queued.pod;
        self.metrics.attempt(&profile.name, metrics::Result::Unschedulable, start.elapsed().as_secs_f64());
        tracing::debug!(pod = %pod.key, %message, "unschedulable");
        self.recorder.pod_event(pod, "Warning", "FailedScheduling", "Scheduling", message.to_owned());
        self.queue.add_unschedulable(&pod.key, plugins);
        self.set_unscheduled(pod, "Unschedulable", message, nominated);
    }

    /// Reports an attempt that failed on an error (API, plugin): event, condition
    /// `SchedulerError`, retry after backoff.
    fn error(&self, profile: &Profile, pod: &PodInfo, message: &str, start: Instant) {
        self.metrics.attempt(&profile.name, metrics::Result::Error, start.elapsed().as_secs_f64());
        self.recorder.pod_event(pod, "Warning", "FailedScheduling", "Scheduling", message.to_owned());
        self.queue.add_backoff(&pod.key);
        self.set_unscheduled(pod, "SchedulerError", message, None);
    }

    /// Sets PodScheduled=False with `reason` (and the nomination) unless the pod already
    /// shows exactly that.
    fn set_unscheduled(&self, pod: &PodInfo, reason: &str, message: &str, nominated: Option<String>) {
        let current = pod
            .pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
        let unchanged = current == Some(("False".into(), Some(reason.to_owned()), Some(message.to_owned())))
            && nominated.as_ref().is_none_or(|n| *n == pod.nominated_node_name);
        if unchanged {
            return;
        }
        let mut status = serde_json::json!({
            "conditions": [{
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": message,
                "lastProbeTime": null,
                "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
            }]
        });
        if let Some(node) = &nominated {
            status["nominatedNodeName"] = node.clone().into();
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let name = pod.name.clone();
        tokio::spawn(async move {
            let patch = Patch::Strategic(serde_json::json!({ "status": status }));
            if let Err(err) = api.patch_status(&name, &PatchParams::default(), &patch).await {
                tracing::debug!(%err, pod = %name, "updating PodScheduled condition");
            }
        });
    }

    /// Evicts the victims and clears lower-priority nominations on the chosen node, in the
    /// background (the nomination already holds the room in the cache).
    fn preempt(&self, preemptor: &PodInfo, node: &str, victims: Vec<Arc<PodInfo>>, clear: Vec<Arc<PodInfo>>) {
        let client = self.client.clone();
        let recorder = self.recorder.clone();
        let message = format!("Preempted by pod {} on node {node}", preemptor.uid);
        let scheduler_name = preemptor.scheduler_name.clone();
        tokio::spawn(async move {
            for v in victims {
                let api: Api<Pod> = Api::namespaced(client.clone(), &v.namespace);
                let condition = serde_json::json!({"status": {"conditions": [{
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": format!("{scheduler_name}: preempting to accommodate a higher priority pod"),
                    "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
                }]}});
                let _ =
                    api.patch_status(&v.name, &PatchParams::default(), &Patch::Strategic(condition)).await;
                let params = DeleteParams {
                    preconditions: Some(Preconditions { uid: Some(v.uid.clone()), resource_version: None }),
                    ..DeleteParams::default()
                };
                match api.delete(&v.name, &params).await {
                    Ok(_) => recorder.pod_event(&v, "Normal", "Preempted", "Preempting", message.clone()),
                    Err(err) => tracing::info!(%err, victim = %v.key, "preempting"),
                }
            }
            for p in clear {
                let api: Api<Pod> = Api::namespaced(client.clone(), &p.namespace);
                let patch = Patch::Merge(serde_json::json!({"status": {"nominatedNodeName": null}}));
                let _ = api.patch_status(&p.name, &PatchParams::default(), &patch).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_percentage_of_nodes() {
        assert_eq!(num_feasible_nodes_to_find(0, 50), 50);
        assert_eq!(num_feasible_nodes_to_find(0, 1000), 420);
        assert_eq!(num_feasible_nodes_to_find(0, 5000), 500);
        assert_eq!(num_feasible_nodes_to_find(0, 6000), 300);
        assert_eq!(num_feasible_nodes_to_find(30, 1000), 300);
        assert_eq!(num_feasible_nodes_to_find(100, 1000), 1000);
    }

    #[test]
    fn fit_error_message_as_upstream() {
        let mut rejections = HashMap::new();
        for (n, reason) in [
            ("a", "Insufficient cpu"),
            ("b", "Insufficient cpu"),
            ("c", "node(s) had untolerated taint {k: v}"),
        ] {
            rejections.insert(n.to_string(), Rejection::unschedulable(reason));
        }
        let fit = FitError {
            num_all_nodes: 3,
            rejections,
            pre_filter_message: None,
            post_filter_message:
                "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.".into(),
        };
        assert_eq!(
            fit.message(),
            "0/3 nodes are available: 1 node(s) had untolerated taint {k: v}, 2 Insufficient cpu. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        );
    }
}
