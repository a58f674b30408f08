//! The Job controller (upstream `pkg/controller/job`): runs pods until `completions`
//! succeed (NonIndexed) or every index in `0..completions` succeeded once (Indexed), at
//! most `parallelism` at a time; replaces failed pods after an exponential backoff until
//! `backoffLimit` (or `backoffLimitPerIndex`/`maxFailedIndexes`), applies
//! `podFailurePolicy` and `successPolicy`, `activeDeadlineSeconds` and `suspend`, and
//! counts finished pods exactly once through the tracking finalizer ([`tracking`]).
//!
//! Terminal conditions come in two steps as in upstream 1.31+: `FailureTarget` or
//! `SuccessCriteriaMet` first, `Failed` or `Complete` once no pod is left terminating.

mod backoff;
mod failure_policy;
pub mod indexes;
mod success_policy;
mod tracking;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use component_base::labels::Selector;

use crate::controller::{self, Context, Error};
use crate::controllers::replicaset::{
    claim_adopting_with_finalizer, pod_from_template, pods_to_delete, slow_start_batch,
};
use crate::events::Type;
use crate::expectations::Expectations;
use crate::informers::{Event, Informer, key_of, split_key};
use crate::owners;
use crate::podutil;
use crate::workqueue::Queue;

use failure_policy::Action;
use indexes::Intervals;
pub use tracking::FINALIZER as TRACKING_FINALIZER;
use tracking::{FinalizerExpectations, Uncounted, has_finalizer};

const COMPONENT: &str = "job-controller";
/// `spec.managedBy` of Jobs this controller owns; any other value belongs to someone else.
const MANAGED_BY: &str = "kubernetes.io/job-controller";
/// Pod events are batched: one sync a second per Job at most.
const SYNC_BATCH_PERIOD: Duration = Duration::from_secs(1);
/// Upstream's `MaxUncountedPods`: keeps `status.uncountedTerminatedPods` under ~20 KB.
const MAX_UNCOUNTED: usize = 500;
/// Upstream's `MaxPodCreateDeletePerSync`.
const MAX_CREATE_DELETE: usize = 500;
const DEFAULT_BACKOFF_LIMIT: i32 = 6;

/// Condition types and reasons, as upstream's batch/v1 constants.
pub const COMPLETE: &str = "Complete";
pub const FAILED: &str = "Failed";
const SUSPENDED: &str = "Suspended";
const FAILURE_TARGET: &str = "FailureTarget";
const SUCCESS_CRITERIA_MET: &str = "SuccessCriteriaMet";

struct Controller {
    client: kube::Client,
    ctx: Context,
    jobs: Arc<Informer<Job>>,
    pods: Arc<Informer<Pod>>,
    queue: Arc<Queue>,
    orphans: Arc<Queue>,
    expectations: Arc<Expectations>,
    finalizers: Arc<FinalizerExpectations>,
    backoff: backoff::Store,
}

pub fn start(ctx: &Context) -> Result<(), Error> {
    let jobs = ctx.informers.get::<Job>();
    let pods = ctx.informers.get::<Pod>();
    // Upstream's API backoff for Jobs: 1 s doubling to 1 min, no overall bucket needed.
    let queue = Queue::with_backoff(
        "job",
        Some(ctx.queue_metrics.clone()),
        Duration::from_secs(1),
        Duration::from_secs(60),
    );
    let orphans = Queue::with_backoff(
        "job_orphan_pod",
        Some(ctx.queue_metrics.clone()),
        Duration::from_secs(1),
        Duration::from_secs(60),
    );
    let ctrl = Arc::new(Controller {
        client: ctx.client.clone(),
        ctx: ctx.clone(),
        jobs: jobs.clone(),
        pods: pods.clone(),
        queue: queue.clone(),
        orphans: orphans.clone(),
        expectations: Arc::default(),
        finalizers: Arc::default(),
        backoff: backoff::Store::default(),
    });
    {
        let c = ctrl.clone();
        jobs.add_handler(move |ev| c.job_event(ev));
    }
    {
        let c = ctrl.clone();
        pods.add_handler(move |ev| c.pod_event(ev));
    }
    {
        let c = ctrl.clone();
        controller::run_workers(ctx, queue, ctx.options.concurrent_job_syncs, move |key| {
            let c = c.clone();
            async move { c.sync(&key).await }
        });
    }
    let c = ctrl;
    controller::run_workers(ctx, orphans, 1, move |key| {
        let c = c.clone();
        async move { c.sync_orphan_pod(&key).await }
    });
    Ok(())
}

// ---- small facts about Jobs ----

fn spec(job: &Job) -> &JobSpec {
    static EMPTY: std::sync::OnceLock<JobSpec> = std::sync::OnceLock::new();
    job.spec.as_ref().unwrap_or_else(|| EMPTY.get_or_init(JobSpec::default))
}

fn is_indexed(job: &Job) -> bool {
    spec(job).completion_mode.as_deref() == Some("Indexed")
}

fn completions(job: &Job) -> Option<usize> {
    spec(job).completions.map(|c| c.max(0) as usize)
}

fn has_backoff_limit_per_index(job: &Job) -> bool {
    spec(job).backoff_limit_per_index.is_some()
}

fn is_suspended(job: &Job) -> bool {
    spec(job).suspend == Some(true)
}

fn managed_externally(job: &Job) -> bool {
    spec(job).managed_by.as_deref().is_some_and(|m| m != MANAGED_BY)
}

/// Only failed pods are replaced (`podReplacementPolicy: Failed`, implied by a pod
/// failure policy): terminating pods still hold their place.
fn only_replace_failed(job: &Job) -> bool {
    spec(job).pod_replacement_policy.as_deref() == Some("Failed") || spec(job).pod_failure_policy.is_some()
}

fn conditions(job: &Job) -> &[JobCondition] {
    job.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default()
}

fn true_condition<'a>(job: &'a Job, type_: &str) -> Option<&'a JobCondition> {
    conditions(job).iter().find(|c| c.type_ == type_ && c.status == "True")
}

/// `Complete` or `Failed` with status `True`: the type of the finished condition.
pub fn finished_type(job: &Job) -> Option<&str> {
    conditions(job)
        .iter()
        .find(|c| (c.type_ == COMPLETE || c.type_ == FAILED) && c.status == "True")
        .map(|c| c.type_.as_str())
}

pub fn is_finished(job: &Job) -> bool {
    finished_type(job).is_some()
}

fn selector_of(job: &Job) -> Selector {
    let s = Selector::from_label_selector(spec(job).selector.as_ref());
    if s.is_empty() { Selector::nothing() } else { s }
}

/// A pod that failed, or, unless only failed pods are replaced, one being deleted before
/// it succeeded (orphans the pod GC removes never reach a terminal phase).
fn is_pod_failed(pod: &Pod, job: &Job) -> bool {
    match podutil::phase(pod) {
        "Failed" => true,
        "Succeeded" => false,
        _ => !only_replace_failed(job) && pod.metadata.deletion_timestamp.is_some(),
    }
}

/// Being deleted and not yet finished.
fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some() && !podutil::is_terminal(pod)
}

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

/// API times carry whole seconds; a finer one would never compare equal after a round trip.
fn now_time() -> Time {
    let now = Timestamp::now();
    Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
}

fn new_condition(type_: &str, status: &str, reason: &str, message: &str) -> JobCondition {
    let now = now_time();
    JobCondition {
        type_: type_.into(),
        status: status.into(),
        reason: (!reason.is_empty()).then(|| reason.into()),
        message: (!message.is_empty()).then(|| message.into()),
        last_probe_time: Some(now.clone()),
        last_transition_time: Some(now),
    }
}

/// Upstream's `ensureJobConditionStatus`: sets the condition, never adding a `False` one
/// that was absent. Returns whether the list changed.
fn ensure_condition(
    list: &mut Vec<JobCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
) -> bool {
    if let Some(c) = list.iter_mut().find(|c| c.type_ == type_) {
        if c.status != status
            || c.reason.as_deref().unwrap_or("") != reason
            || c.message.as_deref().unwrap_or("") != message
        {
            *c = new_condition(type_, status, reason, message);
            return true;
        }
        return false;
    }
    if status != "False" {
        list.push(new_condition(type_, status, reason, message));
        return true;
    }
    false
}

/// The first terminal condition for a failure (`FailureTarget`; `Failed` follows).
fn failure_condition(reason: &str, message: &str) -> JobCondition {
    new_condition(FAILURE_TARGET, "True", reason, message)
}

fn is_success_criteria_met(c: Option<&JobCondition>) -> bool {
    c.is_some_and(|c| c.type_ == SUCCESS_CRITERIA_MET && c.status == "True")
}

// ---- event handlers ----

impl Controller {
    fn enqueue_batched(&self, job: &Job) {
        self.queue.add_after(key_of(job), SYNC_BATCH_PERIOD);
    }

    fn resolve(
        &self,
        ns: &str,
        r: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    ) -> Option<Arc<Job>> {
        if r.kind != "Job" {
            return None;
        }
        let job = self.jobs.get_namespaced(ns, &r.name)?;
        (job.metadata.uid.as_deref() == Some(r.uid.as_str())).then_some(job)
    }

    fn matching_jobs(&self, pod: &Pod) -> Vec<Arc<Job>> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        self.jobs.list_namespace(ns).into_iter().filter(|j| selector_of(j).matches(&labels)).collect()
    }

    fn job_event(&self, ev: &Event<'_, Job>) {
        match ev {
            Event::Add(job) => self.queue.add(key_of(&***job)),
            Event::Update(old, new) => {
                let key = key_of(&***new);
                if old.metadata.uid != new.metadata.uid {
                    self.expectations.delete(&key);
                    self.finalizers.delete(&key);
                }
                if old.metadata.generation == new.metadata.generation {
                    self.enqueue_batched(new);
                } else {
                    self.queue.add(key.clone());
                }
                // Finishing releases the pods; a backup for finalizers the sync left.
                if is_finished(new) {
                    self.cleanup_pod_finalizers(new);
                }
                // A changed deadline re-arms the deadline check.
                let ads = spec(new).active_deadline_seconds;
                if let (Some(start), Some(ads)) =
                    (new.status.as_ref().and_then(|s| s.start_time.as_ref()), ads)
                    && spec(old).active_deadline_seconds != Some(ads)
                {
                    let passed = Timestamp::now().duration_since(start.0).as_secs_f64().max(0.0);
                    let left = (ads as f64 - passed).max(0.0);
                    self.queue.add_after(key, Duration::from_secs_f64(left));
                }
            }
            Event::Delete(job) => {
                self.queue.add(key_of(&***job));
                self.cleanup_pod_finalizers(job);
            }
        }
    }

    /// Queues the Job's pods that still hold the tracking finalizer for its removal.
    fn cleanup_pod_finalizers(&self, job: &Job) {
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let uid = job.metadata.uid.as_deref().unwrap_or_default();
        let selector = selector_of(job);
        for pod in self.pods.list_namespace(ns) {
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            if selector.matches(&labels)
                && owners::is_controlled_by(&pod.metadata, uid)
                && has_finalizer(&pod)
            {
                self.orphans.add(key_of(&*pod));
            }
        }
    }

    fn pod_event(&self, ev: &Event<'_, Pod>) {
        match ev {
            Event::Add(pod) => {
                if pod.metadata.deletion_timestamp.is_some() {
                    return self.pod_deleted(pod, false);
                }
                let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
                if let Some(r) = owners::controller_of(&pod.metadata) {
                    if let Some(job) = self.resolve(ns, r) {
                        self.expectations.creation_observed(&key_of(&*job));
                        self.enqueue_batched(&job);
                    }
                    return;
                }
                if has_finalizer(pod) {
                    self.orphans.add(key_of(&***pod));
                }
                for job in self.matching_jobs(pod) {
                    self.enqueue_batched(&job);
                }
            }
            Event::Update(old, new) => {
                if old.metadata.resource_version == new.metadata.resource_version {
                    return;
                }
                if new.metadata.deletion_timestamp.is_some() {
                    return self.pod_deleted(new, false);
                }
                let ns = new.metadata.namespace.as_deref().unwrap_or_default();
                let finalizer_removed = !has_finalizer(new);
                let (old_ref, new_ref) =
                    (owners::controller_of(&old.metadata), owners::controller_of(&new.metadata));
                let ref_changed = old_ref != new_ref;
                let observe = |job: &Job| {
                    if finalizer_removed {
                        self.finalizers.observed(&key_of(job), uid(new));
                    }
                    self.enqueue_batched(job);
                };
                if ref_changed
                    && let Some(r) = old_ref
                    && let Some(job) = self.resolve(ns, r)
                {
                    observe(&job);
                }
                if let Some(r) = new_ref {
                    if let Some(job) = self.resolve(ns, r) {
                        observe(&job);
                    }
                    return;
                }
                if has_finalizer(new) {
                    self.orphans.add(key_of(&***new));
                }
                if ref_changed || old.metadata.labels != new.metadata.labels {
                    for job in self.matching_jobs(new) {
                        self.enqueue_batched(&job);
                    }
                }
            }
            Event::Delete(pod) => self.pod_deleted(pod, true),
        }
    }

    /// A pod being deleted (`is_final`: gone from the store).
    fn pod_deleted(&self, pod: &Pod, is_final: bool) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let with_finalizer = has_finalizer(pod);
        let job = owners::controller_of(&pod.metadata).and_then(|r| self.resolve(ns, r));
        let Some(job) = job.filter(|j| !is_finished(j)) else {
            // Nobody will sync this pod's finalizer away but the orphan worker.
            if with_finalizer && !is_final {
                self.orphans.add(key_of(pod));
            }
            return;
        };
        let key = key_of(&*job);
        self.expectations.deletion_observed(&key, &key_of(pod));
        if is_final || !with_finalizer {
            self.finalizers.observed(&key, uid(pod));
        }
        self.enqueue_batched(&job);
    }

    /// Removes the tracking finalizer from a pod no running Job is responsible for.
    async fn sync_orphan_pod(&self, key: &str) -> Result<(), Error> {
        let Some(pod) = self.pods.get(key) else { return Ok(()) };
        if let Some(r) = owners::controller_of(&pod.metadata) {
            if r.kind != "Job" || r.api_version != "batch/v1" {
                return Ok(());
            }
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            if let Some(job) = self.resolve(ns, r) {
                if managed_externally(&job) || !is_finished(&job) {
                    return Ok(());
                }
            }
        }
        if !has_finalizer(&pod) {
            return Ok(());
        }
        let (ns, name) = split_key(key);
        match Api::<Pod>::namespaced(self.client.clone(), ns)
            .patch(name, &PatchParams::default(), &Patch::Strategic(remove_finalizer_patch()))
            .await
        {
            Err(err) if controller::api_code(&err) != Some(404) => Err(Error::Api(err)),
            _ => Ok(()),
        }
    }
}

fn remove_finalizer_patch() -> serde_json::Value {
    json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}})
}

// ---- one sync ----

/// What one sync computes from the Job and its pods.
struct SyncState {
    key: String,
    pods: Vec<Arc<Pod>>,
    active_pods: Vec<Arc<Pod>>,
    finished: Option<JobCondition>,
    succeeded: usize,
    failed: usize,
    prev_succeeded_ix: Intervals,
    succeeded_ix: Intervals,
    failed_ix: Option<Intervals>,
    new_backoff: backoff::Record,
    expected_rm: HashSet<String>,
    uncounted: Uncounted,
    /// Per index, the failed pod kept until its replacement carries the failure count.
    delayed: HashMap<usize, Arc<Pod>>,
    active: i32,
    ready: i32,
    terminating: i32,
}

impl SyncState {
    /// The state before counting: the pods, which are active, ready and terminating.
    fn new(key: &str, pods: Vec<Arc<Pod>>, uncounted: Uncounted, expected_rm: HashSet<String>) -> SyncState {
        let active_pods: Vec<Arc<Pod>> = pods.iter().filter(|p| podutil::is_active(p)).cloned().collect();
        SyncState {
            key: key.to_owned(),
            ready: active_pods.iter().filter(|p| podutil::is_ready(p)).count() as i32,
            terminating: pods.iter().filter(|p| is_terminating(p)).count() as i32,
            active: active_pods.len() as i32,
            uncounted,
            expected_rm,
            pods,
            active_pods,
            finished: None,
            succeeded: 0,
            failed: 0,
            prev_succeeded_ix: Intervals::default(),
            succeeded_ix: Intervals::default(),
            failed_ix: None,
            new_backoff: backoff::Record::default(),
            delayed: HashMap::new(),
        }
    }
}

impl Controller {
    async fn sync(&self, key: &str) -> Result<(), Error> {
        let Some(shared) = self.jobs.get(key) else {
            self.expectations.delete(key);
            self.finalizers.delete(key);
            self.backoff.remove(key);
            return Ok(());
        };
        if managed_externally(&shared) {
            return Ok(());
        }
        if is_finished(&shared) {
            self.backoff.remove(key);
            return Ok(());
        }
        let mut job = (*shared).clone();
        if let Some(mode) = spec(&job).completion_mode.as_deref()
            && mode != "NonIndexed"
            && mode != "Indexed"
        {
            self.event(
                &job,
                Type::Warning,
                "UnknownCompletionMode",
                "Skipped Job sync because completion mode is unknown".into(),
            );
            return Ok(());
        }
        let status = job.status.get_or_insert_with(JobStatus::default);
        status.uncounted_terminated_pods.get_or_insert_with(UncountedTerminatedPods::default);

        // Checked before listing pods: a creation observed after the list defers the sync.
        let satisfied = self.expectations.satisfied(key);
        let pods = self.pods_for_job(&job).await?;
        let status = job.status.as_ref().expect("set above");
        let mut st = SyncState::new(key, pods, Uncounted::of(status), self.finalizers.expected(key));
        let (new_succeeded, new_failed) = new_finished_pods(&job, &st);
        let counted_failures = new_failed
            .iter()
            .filter(|p| failure_policy::matches(spec(&job).pod_failure_policy.as_ref(), p).counts)
            .count();
        st.succeeded = status.succeeded.unwrap_or(0).max(0) as usize
            + new_succeeded.len()
            + st.uncounted.succeeded.len();
        st.failed = status.failed.unwrap_or(0).max(0) as usize + counted_failures + st.uncounted.failed.len();
        st.new_backoff = {
            let s: Vec<&Pod> = new_succeeded.iter().map(|p| &**p).collect();
            let f: Vec<&Pod> = new_failed.iter().map(|p| &**p).collect();
            self.backoff.next_record(key, &s, &f)
        };
        if status.start_time.is_none() && !is_suspended(&job) {
            job.status.as_mut().expect("set").start_time = Some(now_time());
        }
        let backoff_limit = spec(&job).backoff_limit.unwrap_or(DEFAULT_BACKOFF_LIMIT).max(0) as usize;

        // Once SuccessCriteriaMet is recorded, failures no longer matter.
        st.finished = true_condition(&job, SUCCESS_CRITERIA_MET).cloned();
        if st.finished.is_none() {
            if let Some(target) = true_condition(&job, FAILURE_TARGET) {
                st.finished = Some(new_condition(
                    FAILED,
                    "True",
                    target.reason.as_deref().unwrap_or(""),
                    target.message.as_deref().unwrap_or(""),
                ));
            } else if let Some(msg) = fail_job_message(&job, &st.pods) {
                st.finished = Some(failure_condition("PodFailurePolicy", &msg));
            }
        }
        if st.finished.is_none() {
            if st.failed > backoff_limit || past_backoff_limit_on_failure(&job, &st.pods) {
                st.finished = Some(failure_condition(
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                ));
            } else if let Some(left) = active_deadline_left(&job) {
                if left.is_zero() {
                    st.finished = Some(failure_condition(
                        "DeadlineExceeded",
                        "Job was active longer than specified deadline",
                    ));
                } else {
                    self.queue.add_after(key.to_owned(), left);
                }
            }
        }
        if is_indexed(&job) {
            let completions = completions(&job).unwrap_or(0);
            let (prev, now) = succeeded_indexes(&job, &st.pods);
            st.prev_succeeded_ix = prev;
            st.succeeded_ix = now;
            st.succeeded = st.succeeded_ix.total();
            if has_backoff_limit_per_index(&job) {
                let failed_ix = failed_indexes(&job, &st.pods);
                if st.finished.is_none() {
                    let max_failed = spec(&job).max_failed_indexes;
                    if max_failed.is_some_and(|m| failed_ix.total() > m.max(0) as usize) {
                        st.finished = Some(failure_condition(
                            "MaxFailedIndexesExceeded",
                            "Job has exceeded the specified maximal number of failed indexes",
                        ));
                    } else if failed_ix.total() > 0
                        && failed_ix.total() + st.succeeded_ix.total() >= completions
                    {
                        st.finished = Some(failure_condition("FailedIndexes", "Job has failed indexes"));
                    }
                }
                st.failed_ix = Some(failed_ix);
                st.delayed = pods_with_delayed_deletion(&job, &st);
            }
            if st.finished.is_none()
                && let Some(msg) =
                    success_policy::matched(spec(&job).success_policy.as_ref(), completions, &st.succeeded_ix)
            {
                st.finished = Some(new_condition(SUCCESS_CRITERIA_MET, "True", "SuccessPolicy", &msg));
            }
        }

        let mut suspend_changed = false;
        let mut manage_err = None;
        if st.finished.is_some() {
            let (deleted_ready, deleted, err) = self.delete_active_pods(&job, &st.active_pods).await;
            if deleted != st.active || !satisfied {
                // Pods still to go, or pods not in the informer yet: not finished yet.
                st.finished = None;
            }
            st.active -= deleted;
            st.terminating += deleted;
            st.ready -= deleted_ready;
            manage_err = err;
        } else {
            let mut managed = false;
            if satisfied && job.metadata.deletion_timestamp.is_none() {
                manage_err = self.manage(&job, &mut st).await.err();
                managed = true;
            }
            let complete = match completions(&job) {
                None => st.succeeded > 0 && st.active == 0,
                Some(c) => st.succeeded >= c && st.active == 0,
            };
            if complete {
                st.finished = Some(new_condition(
                    SUCCESS_CRITERIA_MET,
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                ));
            } else if managed {
                let suspended = is_suspended(&job);
                let status = job.status.as_mut().expect("set");
                let mut conds = status.conditions.take().unwrap_or_default();
                if suspended {
                    suspend_changed =
                        ensure_condition(&mut conds, SUSPENDED, "True", "JobSuspended", "Job suspended");
                } else {
                    suspend_changed =
                        ensure_condition(&mut conds, SUSPENDED, "False", "JobResumed", "Job resumed");
                    if suspend_changed {
                        // activeDeadlineSeconds counts continuous activity: resuming restarts it.
                        status.start_time = Some(now_time());
                    }
                }
                status.conditions = (!conds.is_empty()).then_some(conds);
                if suspend_changed {
                    let (reason, message) =
                        if suspended { ("Suspended", "Job suspended") } else { ("Resumed", "Job resumed") };
                    self.event(&job, Type::Normal, reason, message.into());
                }
            }
        }

        let status = job.status.as_mut().expect("set");
        let needs_update = suspend_changed
            || status.active.unwrap_or(0) != st.active
            || status.ready != Some(st.ready)
            || status.terminating != Some(st.terminating);
        status.active = (st.active != 0).then_some(st.active);
        status.ready = Some(st.ready);
        status.terminating = Some(st.terminating);
        self.track_and_remove_finalizers(job, &mut st, needs_update).await?;
        match manage_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn event(&self, job: &Job, kind: Type, reason: &str, message: String) {
        self.ctx.recorder.event(COMPONENT, job, kind, reason, message);
    }

    fn pods_api(&self, job: &Job) -> Api<Pod> {
        Api::namespaced(self.client.clone(), job.metadata.namespace.as_deref().unwrap_or_default())
    }

    fn jobs_api(&self, job: &Job) -> Api<Job> {
        Api::namespaced(self.client.clone(), job.metadata.namespace.as_deref().unwrap_or_default())
    }

    /// The Job's pods: those it controls, adopting matching orphans (with the tracking
    /// finalizer) and releasing those that stopped matching.
    async fn pods_for_job(&self, job: &Job) -> Result<Vec<Arc<Pod>>, Error> {
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let candidates = self.pods.list_namespace(ns);
        claim_adopting_with_finalizer(
            &self.pods_api(job),
            &self.jobs_api(job),
            job,
            &selector_of(job),
            candidates,
            Some(TRACKING_FINALIZER),
        )
        .await
    }

    /// Creates or deletes pods towards the wanted number of active ones; updates the
    /// active, ready and terminating counts by what it did.
    async fn manage(&self, job: &Job, st: &mut SyncState) -> Result<(), Error> {
        let key = st.key.clone();
        let active = st.active_pods.len();
        let parallelism = spec(job).parallelism.unwrap_or(1).max(0) as usize;
        if is_suspended(job) {
            let victims = active_pods_for_removal(job, &st.active_pods, active);
            return self.delete_job_pods(job, &key, victims, st).await;
        }
        let want = match completions(job) {
            // Without completions, any success ends the Job: keep what runs, start no more.
            None if st.succeeded > 0 => active,
            None => parallelism,
            Some(c) => c.saturating_sub(st.succeeded).min(parallelism),
        };
        let mut victims = active_pods_for_removal(job, &st.active_pods, active.saturating_sub(want));
        victims.truncate(MAX_CREATE_DELETE);
        if !victims.is_empty() {
            // Deletions take precedence; creations wait for the next sync.
            return self.delete_job_pods(job, &key, victims, st).await;
        }
        let terminating = if only_replace_failed(job) { st.terminating.max(0) as usize } else { 0 };
        let mut diff = want.saturating_sub(terminating + active);
        if diff == 0 {
            return Ok(());
        }
        let now = Timestamp::now();
        if !has_backoff_limit_per_index(job) {
            let left = backoff::remaining(
                st.new_backoff.failures_after_last_success,
                st.new_backoff.last_failure,
                now,
            );
            if !left.is_zero() {
                self.queue.add_after(key, left.max(SYNC_BATCH_PERIOD));
                return Ok(());
            }
        }
        diff = diff.min(MAX_CREATE_DELETE);
        let mut to_add: Vec<Option<usize>> = vec![None; diff];
        if is_indexed(job) {
            let completions = completions(job).unwrap_or(0);
            let mut non_pending =
                st.succeeded_ix.with_indexes(indexes::indexes_of(st.active_pods.iter().map(|p| &**p)));
            if only_replace_failed(job) {
                let term = indexes::indexes_of(st.pods.iter().filter(|p| is_terminating(p)).map(|p| &**p));
                non_pending = non_pending.with_indexes(term);
            }
            if let Some(f) = &st.failed_ix {
                non_pending = non_pending.merge(f);
            }
            let mut pending = indexes::first_pending(&non_pending, diff, completions);
            if has_backoff_limit_per_index(job) {
                let (now_ready, left) = indexes_ready_now(&pending, &st.delayed, now);
                if now_ready.is_empty() && !left.is_zero() {
                    self.queue.add_after(key, left.max(SYNC_BATCH_PERIOD));
                    return Ok(());
                }
                pending = now_ready;
            }
            to_add = pending.into_iter().map(Some).collect();
            diff = to_add.len();
            if diff == 0 {
                return Ok(());
            }
        }

        let template = {
            let mut t = spec(job).template.clone();
            if is_indexed(job)
                && let Some(s) = t.spec.as_mut()
            {
                indexes::add_index_env(&mut s.containers);
                if let Some(init) = s.init_containers.as_mut() {
                    indexes::add_index_env(init);
                }
            }
            let meta = t.metadata.get_or_insert_with(Default::default);
            let fins = meta.finalizers.get_or_insert_with(Vec::new);
            if !fins.iter().any(|f| f == TRACKING_FINALIZER) {
                fins.push(TRACKING_FINALIZER.into());
            }
            t
        };
        let base = pod_from_template(&template, job)?;
        // Raised before any create so the informer's adds cannot race past them.
        self.expectations.expect_creations(&key, diff);
        let api = self.pods_api(job);
        let job_name = job.metadata.name.clone().unwrap_or_default();
        let (created, err) = slow_start_batch(diff, 1, |i| {
            let mut pod = base.clone();
            if let Some(ix) = to_add[i] {
                let meta = &mut pod.metadata;
                let ix_s = ix.to_string();
                meta.annotations
                    .get_or_insert_with(BTreeMap::new)
                    .insert(indexes::COMPLETION_INDEX.into(), ix_s.clone());
                meta.labels.get_or_insert_with(BTreeMap::new).insert(indexes::COMPLETION_INDEX.into(), ix_s);
                meta.generate_name = Some(indexes::generate_name_with_index(&job_name, ix));
                if let Some(s) = pod.spec.as_mut() {
                    s.hostname = Some(format!("{job_name}-{ix}"));
                }
                if has_backoff_limit_per_index(job) {
                    add_index_failure_counts(&mut pod, job, st.delayed.get(&ix).map(|p| &**p));
                }
            }
            let api = api.clone();
            async move { self.create_pod(&api, job, &pod).await }
        })
        .await;
        for _ in created..diff {
            self.expectations.creation_observed(&key);
        }
        st.active += created as i32;
        err.map_or(Ok(()), Err)
    }

    async fn create_pod(&self, api: &Api<Pod>, job: &Job, pod: &Pod) -> Result<(), Error> {
        match api.create(&PostParams::default(), pod).await {
            Ok(created) => {
                let name = created.metadata.name.unwrap_or_default();
                self.event(job, Type::Normal, "SuccessfulCreate", format!("Created pod: {name}"));
                Ok(())
            }
            // Every create fails in a namespace being deleted; not this Job's failure.
            Err(err) if controller::is_namespace_terminating(&err) => Ok(()),
            Err(err) => {
                self.event(job, Type::Warning, "FailedCreate", format!("Error creating: {err}"));
                Err(Error::Api(err))
            }
        }
    }

    async fn delete_pod(&self, job: &Job, pod: &Pod) -> Result<(), kube::Error> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        match self.pods_api(job).delete(&name, &DeleteParams::default()).await {
            Ok(_) => {
                self.event(job, Type::Normal, "SuccessfulDelete", format!("Deleted pod: {name}"));
                Ok(())
            }
            Err(err) => {
                if controller::api_code(&err) != Some(404) {
                    self.event(job, Type::Warning, "FailedDelete", format!("Error deleting: {err}"));
                }
                Err(err)
            }
        }
    }

    /// Deletes pods the Job no longer wants, their finalizer first (they are not counted):
    /// upstream's `deleteJobPods`.
    async fn delete_job_pods(
        &self,
        job: &Job,
        key: &str,
        victims: Vec<Arc<Pod>>,
        st: &mut SyncState,
    ) -> Result<(), Error> {
        self.expectations.expect_deletions(key, victims.iter().map(|p| key_of(&**p)));
        let api = self.pods_api(job);
        let results = join_all(victims.iter().map(|pod| {
            let api = api.clone();
            async move {
                let name = pod.metadata.name.clone().unwrap_or_default();
                let result: Result<(), kube::Error> = async {
                    if has_finalizer(pod) {
                        api.patch(
                            &name,
                            &PatchParams::default(),
                            &Patch::Strategic(remove_finalizer_patch()),
                        )
                        .await?;
                    }
                    self.delete_pod(job, pod).await
                }
                .await;
                match result {
                    Ok(()) => Ok(podutil::is_ready(pod)),
                    Err(err) => {
                        self.expectations.deletion_observed(key, &key_of(&**pod));
                        if controller::api_code(&err) == Some(404) {
                            Ok(podutil::is_ready(pod))
                        } else {
                            Err(err)
                        }
                    }
                }
            }
        }))
        .await;
        let mut first_err = None;
        for r in results {
            match r {
                Ok(was_ready) => {
                    st.active -= 1;
                    st.terminating += 1;
                    if was_ready {
                        st.ready -= 1;
                    }
                }
                Err(e) => {
                    first_err.get_or_insert(Error::Api(e));
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Deletes every active pod of a finishing Job, keeping finalizers (the pods are
    /// counted as failed once gone): (ready deleted, deleted, first error).
    async fn delete_active_pods(&self, job: &Job, pods: &[Arc<Pod>]) -> (i32, i32, Option<Error>) {
        let results = join_all(
            pods.iter().map(|p| async move { (self.delete_pod(job, p).await, podutil::is_ready(p)) }),
        )
        .await;
        let (mut ready, mut deleted, mut err) = (0, 0, None);
        for (r, was_ready) in results {
            match r {
                Err(e) if controller::api_code(&e) != Some(404) => {
                    err.get_or_insert(Error::Api(e));
                }
                _ => {
                    deleted += 1;
                    if was_ready {
                        ready += 1;
                    }
                }
            }
        }
        (ready, deleted, err)
    }

    /// Upstream's `trackJobStatusAndRemoveFinalizers`: records newly finished pods in the
    /// status, removes their finalizers, moves them into the counters, and adds the
    /// terminal condition once nothing is left uncounted or terminating.
    async fn track_and_remove_finalizers(
        &self,
        mut job: Job,
        st: &mut SyncState,
        mut needs_flush: bool,
    ) -> Result<(), Error> {
        let indexed = is_indexed(&job);
        if indexed {
            st.pods.sort_by_key(|p| indexes::completion_index(p).map_or(-1, |i| i as i64));
        }
        let mut with_finalizer: HashSet<String> = st
            .pods
            .iter()
            .filter(|p| has_finalizer(p) && !st.expected_rm.contains(uid(p)))
            .map(|p| uid(p).to_owned())
            .collect();
        let status = job.status.as_mut().expect("set by sync");
        if tracking::clean_uncounted(status, &with_finalizer) {
            needs_flush = true;
        }
        let completions = completions(&job).unwrap_or(0);
        let mut to_remove: Vec<Arc<Pod>> = Vec::new();
        let mut new_succeeded_ix: Vec<usize> = Vec::new();
        let mut reached_max = false;
        let policy = spec(&job).pod_failure_policy.clone();
        let mut uncounted =
            job.status.as_ref().expect("set").uncounted_terminated_pods.clone().unwrap_or_default();
        for pod in &st.pods {
            let pod_uid = uid(pod);
            if !has_finalizer(pod) || st.expected_rm.contains(pod_uid) {
                continue;
            }
            let failed = is_pod_failed(pod, &job);
            if !can_remove_finalizer(&job, st, pod, failed) {
                continue;
            }
            to_remove.push(pod.clone());
            if podutil::phase(pod) == "Succeeded" && !st.uncounted.failed.contains(pod_uid) {
                if indexed {
                    // The index alone prevents counting twice.
                    if let Some(ix) = indexes::completion_index(pod).filter(|ix| *ix < completions)
                        && !st.prev_succeeded_ix.has(ix)
                    {
                        new_succeeded_ix.push(ix);
                        needs_flush = true;
                    }
                } else if !st.uncounted.succeeded.contains(pod_uid) {
                    needs_flush = true;
                    uncounted.succeeded.get_or_insert_with(Vec::new).push(pod_uid.to_owned());
                }
            } else if failed || (st.finished.is_some() && !is_success_criteria_met(st.finished.as_ref())) {
                // A finishing Job counts every unfinished pod as failed.
                let valid_ix = !indexed || indexes::completion_index(pod).is_some_and(|ix| ix < completions);
                if !st.uncounted.failed.contains(pod_uid)
                    && valid_ix
                    && failure_policy::matches(policy.as_ref(), pod).counts
                {
                    needs_flush = true;
                    uncounted.failed.get_or_insert_with(Vec::new).push(pod_uid.to_owned());
                }
            }
            let n = new_succeeded_ix.len()
                + uncounted.succeeded.as_ref().map_or(0, Vec::len)
                + uncounted.failed.as_ref().map_or(0, Vec::len);
            if n >= MAX_UNCOUNTED {
                // Bounded status size and work per sync; the status update requeues the Job.
                reached_max = true;
                break;
            }
        }
        let status = job.status.as_mut().expect("set");
        status.uncounted_terminated_pods = Some(uncounted);
        if indexed {
            new_succeeded_ix.sort_unstable();
            st.succeeded_ix = st.succeeded_ix.with_indexes(new_succeeded_ix);
            let s = st.succeeded_ix.to_string();
            if status.completed_indexes.as_deref().unwrap_or("") != s {
                needs_flush = true;
            }
            status.succeeded = Some(st.succeeded_ix.total() as i32).filter(|n| *n != 0);
            status.completed_indexes = (!s.is_empty()).then_some(s);
            let failed_s = st.failed_ix.as_ref().map(|f| f.to_string());
            if status.failed_indexes != failed_s {
                status.failed_indexes = failed_s;
                needs_flush = true;
            }
        }
        if let Some(f) = st.finished.clone()
            && f.type_ == FAILURE_TARGET
        {
            // Recorded before finalizers go, so the reason survives a restart.
            status.conditions.get_or_insert_with(Vec::new).push(f.clone());
            needs_flush = true;
            st.finished = Some(new_condition(
                FAILED,
                "True",
                f.reason.as_deref().unwrap_or(""),
                f.message.as_deref().unwrap_or(""),
            ));
        }
        if let Some(f) = st.finished.clone().filter(|f| is_success_criteria_met(Some(f))) {
            if true_condition(&job, SUCCESS_CRITERIA_MET).is_none() {
                job.status.as_mut().expect("set").conditions.get_or_insert_with(Vec::new).push(f.clone());
                needs_flush = true;
            }
            st.finished = Some(new_condition(
                COMPLETE,
                "True",
                f.reason.as_deref().unwrap_or(""),
                f.message.as_deref().unwrap_or(""),
            ));
        }

        // 1. Write the newly finished pods into the status.
        if needs_flush {
            job = self.update_status(&job).await?;
            self.backoff.update(&st.key, st.new_backoff.clone());
            needs_flush = false;
        }
        // 2. Remove their finalizers.
        let mut rm_err = None;
        if !to_remove.is_empty() {
            let (removed, err) = self.remove_finalizers(&st.key, &to_remove).await;
            for uid in removed {
                with_finalizer.remove(&uid);
            }
            rm_err = err;
        }
        // 3. Count them.
        if tracking::clean_uncounted(job.status.get_or_insert_with(JobStatus::default), &with_finalizer) {
            needs_flush = true;
        }
        if let Some(err) = rm_err {
            if needs_flush {
                self.update_status(&job).await?;
            }
            return Err(err);
        }
        let finished = !reached_max && enact_finished(&mut job, st);
        if finished || needs_flush {
            job = self.update_status(&job).await?;
        }
        if finished {
            self.record_finished(&job, st.finished.as_ref().expect("finished"));
        }
        Ok(())
    }

    /// Removes the tracking finalizer; returns the UIDs now free of it (gone counts).
    async fn remove_finalizers(&self, key: &str, pods: &[Arc<Pod>]) -> (Vec<String>, Option<Error>) {
        self.finalizers.expect_removed(key, pods.iter().map(|p| uid(p).to_owned()));
        let results = join_all(pods.iter().map(|pod| async move {
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            match api.patch(name, &PatchParams::default(), &Patch::Strategic(remove_finalizer_patch())).await
            {
                Ok(_) => Ok(uid(pod).to_owned()),
                Err(err) => {
                    // No update will show this removal.
                    self.finalizers.observed(key, uid(pod));
                    if controller::api_code(&err) == Some(404) { Ok(uid(pod).to_owned()) } else { Err(err) }
                }
            }
        }))
        .await;
        let mut removed = Vec::new();
        let mut err = None;
        for r in results {
            match r {
                Ok(u) => removed.push(u),
                Err(e) => {
                    err.get_or_insert(Error::Api(e));
                }
            }
        }
        (removed, err)
    }

    /// A status update guarded by the Job's resourceVersion: a conflict fails the sync,
    /// which then starts over from fresh informer state.
    async fn update_status(&self, job: &Job) -> Result<Job, Error> {
        let name = job.metadata.name.clone().unwrap_or_default();
        Ok(self.jobs_api(job).replace_status(&name, &PostParams::default(), job).await?)
    }

    fn record_finished(&self, job: &Job, cond: &JobCondition) {
        if cond.type_ == COMPLETE {
            let succeeded = job.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0);
            if spec(job).completions.is_some_and(|c| succeeded > c) {
                self.event(
                    job,
                    Type::Warning,
                    "TooManySucceededPods",
                    "Too many succeeded pods running after completion count reached".into(),
                );
            }
            self.event(job, Type::Normal, "Completed", "Job completed".into());
        } else {
            self.event(
                job,
                Type::Warning,
                cond.reason.as_deref().unwrap_or(""),
                cond.message.clone().unwrap_or_default(),
            );
        }
    }
}

/// Adds the terminal condition once nothing is uncounted or terminating.
fn enact_finished(job: &mut Job, st: &SyncState) -> bool {
    let Some(cond) = st.finished.as_ref() else { return false };
    let status = job.status.get_or_insert_with(JobStatus::default);
    if let Some(u) = &status.uncounted_terminated_pods
        && u.succeeded.as_ref().map_or(0, Vec::len) + u.failed.as_ref().map_or(0, Vec::len) > 0
    {
        return false;
    }
    if st.terminating > 0 {
        return false;
    }
    let conds = status.conditions.get_or_insert_with(Vec::new);
    ensure_condition(
        conds,
        &cond.type_,
        &cond.status,
        cond.reason.as_deref().unwrap_or(""),
        cond.message.as_deref().unwrap_or(""),
    );
    if cond.type_ == COMPLETE {
        status.completion_time =
            conds.iter().find(|c| c.type_ == COMPLETE).and_then(|c| c.last_transition_time.clone());
    }
    true
}

/// Whether a pod's finalizer may go: the Job is ending, the pod succeeded, or it failed and
/// its index does not need it kept for the replacement's failure count.
fn can_remove_finalizer(job: &Job, st: &SyncState, pod: &Pod, failed: bool) -> bool {
    if job.metadata.deletion_timestamp.is_some()
        || st.finished.is_some()
        || podutil::phase(pod) == "Succeeded"
    {
        return true;
    }
    if !failed {
        return false;
    }
    if has_backoff_limit_per_index(job)
        && let Some(ix) = indexes::completion_index(pod)
        && st.delayed.get(&ix).is_some_and(|p| uid(p) == uid(pod))
    {
        return false;
    }
    true
}

/// Pods finished since the last sync and not yet in the status: (succeeded, failed).
fn new_finished_pods(job: &Job, st: &SyncState) -> (Vec<Arc<Pod>>, Vec<Arc<Pod>>) {
    let completions = completions(job).unwrap_or(0);
    let valid = |p: &Pod, uncounted: &HashSet<String>| {
        has_finalizer(p)
            && !uncounted.contains(uid(p))
            && !st.expected_rm.contains(uid(p))
            && (!is_indexed(job) || indexes::completion_index(p).is_some_and(|ix| ix < completions))
    };
    let succeeded = st
        .pods
        .iter()
        .filter(|p| valid(p, &st.uncounted.succeeded) && podutil::phase(p) == "Succeeded")
        .cloned()
        .collect();
    let failed =
        st.pods.iter().filter(|p| valid(p, &st.uncounted.failed) && is_pod_failed(p, job)).cloned().collect();
    (succeeded, failed)
}

/// The message of the first `FailJob` rule a failed pod matches.
fn fail_job_message(job: &Job, pods: &[Arc<Pod>]) -> Option<String> {
    let policy = spec(job).pod_failure_policy.as_ref()?;
    pods.iter()
        .filter(|p| is_pod_failed(p, job))
        .find_map(|p| failure_policy::matches(Some(policy), p).fail_job)
}

/// With `restartPolicy: OnFailure` failures are container restarts, counted against the
/// backoff limit.
fn past_backoff_limit_on_failure(job: &Job, pods: &[Arc<Pod>]) -> bool {
    let restart = spec(job).template.spec.as_ref().and_then(|s| s.restart_policy.as_deref());
    if restart != Some("OnFailure") {
        return false;
    }
    let mut restarts = 0i64;
    for p in pods.iter().filter(|p| matches!(podutil::phase(p), "Running" | "Pending")) {
        let s = p.status.as_ref();
        let all = s
            .and_then(|s| s.init_container_statuses.as_ref())
            .into_iter()
            .flatten()
            .chain(s.and_then(|s| s.container_statuses.as_ref()).into_iter().flatten());
        restarts += all.map(|c| c.restart_count as i64).sum::<i64>();
    }
    let limit = spec(job).backoff_limit.unwrap_or(DEFAULT_BACKOFF_LIMIT) as i64;
    if limit == 0 { restarts > 0 } else { restarts >= limit }
}

/// Time left of `activeDeadlineSeconds` (zero once past), `None` without a deadline,
/// before the start or while suspended.
fn active_deadline_left(job: &Job) -> Option<Duration> {
    let ads = spec(job).active_deadline_seconds?;
    if is_suspended(job) {
        return None;
    }
    let start = job.status.as_ref()?.start_time.as_ref()?;
    let passed = Timestamp::now().duration_since(start.0).as_secs_f64();
    Some(Duration::from_secs_f64((ads as f64 - passed).max(0.0)))
}

/// (indexes in the status, those plus pods succeeded since).
fn succeeded_indexes(job: &Job, pods: &[Arc<Pod>]) -> (Intervals, Intervals) {
    let completions = completions(job).unwrap_or(0);
    let prev = Intervals::parse(
        job.status.as_ref().and_then(|s| s.completed_indexes.as_deref()).unwrap_or(""),
        completions,
    );
    let new: std::collections::BTreeSet<usize> = pods
        .iter()
        .filter(|p| podutil::phase(p) == "Succeeded" && has_finalizer(p))
        .filter_map(|p| indexes::completion_index(p))
        .filter(|ix| *ix < completions)
        .collect();
    let now = prev.with_indexes(new);
    (prev, now)
}

/// Indexes out of retries (`backoffLimitPerIndex`) or failed by a `FailIndex` rule.
fn failed_indexes(job: &Job, pods: &[Arc<Pod>]) -> Intervals {
    let completions = completions(job).unwrap_or(0);
    let prev = Intervals::parse(
        job.status.as_ref().and_then(|s| s.failed_indexes.as_deref()).unwrap_or(""),
        completions,
    );
    let new: std::collections::BTreeSet<usize> = pods
        .iter()
        .filter(|p| has_finalizer(p) && is_index_failed(job, p))
        .filter_map(|p| indexes::completion_index(p))
        .filter(|ix| *ix < completions)
        .collect();
    prev.with_indexes(new)
}

fn is_index_failed(job: &Job, pod: &Pod) -> bool {
    if !is_pod_failed(pod, job) {
        return false;
    }
    let m = failure_policy::matches(spec(job).pod_failure_policy.as_ref(), pod);
    if m.action == Some(Action::FailIndex) {
        return true;
    }
    let limit = spec(job).backoff_limit_per_index.unwrap_or(0);
    m.counts && indexes::index_failure_count(pod) >= limit
}

/// Per index still pending, its last failed pod: kept (finalizer and all) until the
/// replacement is created with the failure count carried over.
fn pods_with_delayed_deletion(job: &Job, st: &SyncState) -> HashMap<usize, Arc<Pod>> {
    let completions = completions(job).unwrap_or(0);
    let active = indexes::indexes_of(st.active_pods.iter().map(|p| &**p));
    let failed_ix = st.failed_ix.clone().unwrap_or_default();
    let mut out: HashMap<usize, Arc<Pod>> = HashMap::new();
    for p in &st.pods {
        if !has_finalizer(p) || st.expected_rm.contains(uid(p)) || !is_pod_failed(p, job) {
            continue;
        }
        let Some(ix) = indexes::completion_index(p).filter(|ix| *ix < completions) else { continue };
        if st.succeeded_ix.has(ix) || failed_ix.has(ix) || active.contains(&ix) {
            continue;
        }
        let absolute = |p: &Pod| indexes::index_failure_count(p) + indexes::index_ignored_failure_count(p);
        match out.get(&ix) {
            Some(last)
                if !(absolute(last) <= absolute(p)
                    && backoff::finished_time(p) >= backoff::finished_time(last)) => {}
            _ => {
                out.insert(ix, p.clone());
            }
        }
    }
    out
}

/// Of the pending indexes, those whose per-index backoff passed; else the shortest wait.
fn indexes_ready_now(
    pending: &[usize],
    delayed: &HashMap<usize, Arc<Pod>>,
    now: Timestamp,
) -> (Vec<usize>, Duration) {
    let mut ready = Vec::new();
    let mut min_left: Option<Duration> = None;
    for ix in pending {
        let left = backoff::remaining_for_index(delayed.get(ix).map(|p| &**p), now);
        if left.is_zero() {
            ready.push(*ix);
        } else {
            min_left = Some(min_left.map_or(left, |m| m.min(left)));
        }
    }
    if !ready.is_empty() {
        return (ready, Duration::ZERO);
    }
    (ready, min_left.unwrap_or(Duration::ZERO))
}

/// The failure-count annotations of a replacement pod for an index.
fn add_index_failure_counts(pod: &mut Pod, job: &Job, replaced: Option<&Pod>) {
    let (mut failures, mut ignored) = (0, 0);
    if let Some(prev) = replaced {
        failures = indexes::index_failure_count(prev);
        ignored = indexes::index_ignored_failure_count(prev);
        if failure_policy::matches(spec(job).pod_failure_policy.as_ref(), prev).counts {
            failures += 1;
        } else {
            ignored += 1;
        }
    }
    let ann = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    ann.insert(indexes::INDEX_FAILURE_COUNT.into(), failures.to_string());
    if ignored > 0 {
        ann.insert(indexes::INDEX_IGNORED_FAILURE_COUNT.into(), ignored.to_string());
    }
}

/// Pods to delete: for Indexed Jobs first those without a valid index and duplicates of an
/// index, then by upstream's active-pod order (unscheduled, pending, not ready first).
fn active_pods_for_removal(job: &Job, pods: &[Arc<Pod>], at_least: usize) -> Vec<Arc<Pod>> {
    let mut rm: Vec<Arc<Pod>> = Vec::new();
    let mut left: Vec<Arc<Pod>> = Vec::new();
    if is_indexed(job) {
        let completions = completions(job).unwrap_or(0);
        let mut by_index: BTreeMap<usize, Vec<Arc<Pod>>> = BTreeMap::new();
        for p in pods {
            match indexes::completion_index(p).filter(|ix| *ix < completions) {
                Some(ix) => by_index.entry(ix).or_default().push(p.clone()),
                None => rm.push(p.clone()),
            }
        }
        let now = Timestamp::now();
        for (_, group) in by_index {
            if group.len() == 1 {
                left.extend(group);
                continue;
            }
            // Keep the most advanced pod of the index.
            let victims = pods_to_delete(&group, &[], group.len() - 1, now);
            for p in group {
                if victims.iter().any(|v| uid(v) == uid(&p)) {
                    rm.push(p);
                } else {
                    left.push(p);
                }
            }
        }
    } else {
        left = pods.to_vec();
    }
    if rm.len() < at_least {
        let more = pods_to_delete(&left, &[], at_least - rm.len(), Timestamp::now());
        rm.extend(more);
    }
    rm
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn job(completions: Option<i32>, indexed: bool) -> Job {
        Job {
            metadata: ObjectMeta {
                name: Some("j".into()),
                namespace: Some("ns".into()),
                uid: Some("job-uid".into()),
                ..Default::default()
            },
            spec: Some(JobSpec {
                completions,
                parallelism: Some(2),
                completion_mode: indexed.then(|| "Indexed".into()),
                ..Default::default()
            }),
            status: Some(JobStatus::default()),
        }
    }

    fn pod(name: &str, phase: &str, index: Option<usize>, finalizer: bool) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some(format!("uid-{name}"));
        if finalizer {
            p.metadata.finalizers = Some(vec![TRACKING_FINALIZER.into()]);
        }
        if let Some(ix) = index {
            p.metadata.annotations = Some([(indexes::COMPLETION_INDEX.to_string(), ix.to_string())].into());
        }
        p.status = Some(PodStatus { phase: Some(phase.into()), ..Default::default() });
        Arc::new(p)
    }

    fn state(pods: Vec<Arc<Pod>>) -> SyncState {
        SyncState::new("ns/j", pods, Uncounted::default(), HashSet::new())
    }

    #[test]
    fn only_pods_with_the_finalizer_and_not_yet_counted_are_new() {
        let j = job(Some(3), false);
        let mut st = state(vec![
            pod("a", "Succeeded", None, true),
            pod("b", "Succeeded", None, false),
            pod("c", "Failed", None, true),
            pod("d", "Running", None, true),
            pod("e", "Succeeded", None, true),
        ]);
        st.uncounted.succeeded.insert("uid-e".into());
        let (s, f) = new_finished_pods(&j, &st);
        assert_eq!(s.iter().map(|p| p.metadata.name.as_deref().unwrap()).collect::<Vec<_>>(), vec!["a"]);
        assert_eq!(f.iter().map(|p| p.metadata.name.as_deref().unwrap()).collect::<Vec<_>>(), vec!["c"]);
        // A finalizer removal in flight hides the pod too.
        st.expected_rm.insert("uid-a".into());
        assert!(new_finished_pods(&j, &st).0.is_empty());
    }

    #[test]
    fn succeeded_indexes_merge_status_and_pods() {
        let mut j = job(Some(5), true);
        j.status.as_mut().unwrap().completed_indexes = Some("0,1".into());
        let pods = vec![
            pod("a", "Succeeded", Some(3), true),
            pod("b", "Succeeded", Some(7), true),
            pod("c", "Succeeded", Some(2), false),
            pod("d", "Running", Some(4), true),
        ];
        let (prev, now) = succeeded_indexes(&j, &pods);
        assert_eq!((prev.to_string(), now.to_string()), ("0,1".to_string(), "0,1,3".to_string()));
    }

    #[test]
    fn duplicate_and_invalid_indexes_are_removed_first() {
        let j = job(Some(3), true);
        let pods = vec![
            pod("a", "Running", Some(0), true),
            pod("b", "Pending", Some(0), true),
            pod("c", "Running", Some(5), true),
            pod("d", "Running", None, true),
            pod("e", "Running", Some(1), true),
        ];
        let mut names: Vec<_> =
            active_pods_for_removal(&j, &pods, 0).iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        names.sort();
        assert_eq!(names, vec!["b", "c", "d"]);
    }

    #[test]
    fn conditions_are_ensured_as_upstream() {
        let mut conds = Vec::new();
        assert!(!ensure_condition(&mut conds, SUSPENDED, "False", "JobResumed", "Job resumed"));
        assert!(ensure_condition(&mut conds, SUSPENDED, "True", "JobSuspended", "Job suspended"));
        assert!(!ensure_condition(&mut conds, SUSPENDED, "True", "JobSuspended", "Job suspended"));
        assert!(ensure_condition(&mut conds, SUSPENDED, "False", "JobResumed", "Job resumed"));
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].reason.as_deref(), Some("JobResumed"));
    }

    #[test]
    fn finishing_waits_for_uncounted_and_terminating_pods() {
        let mut j = job(Some(1), false);
        let mut st = state(vec![]);
        st.finished = Some(new_condition(
            COMPLETE,
            "True",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
        ));
        st.terminating = 1;
        assert!(!enact_finished(&mut j, &st));
        st.terminating = 0;
        j.status.as_mut().unwrap().uncounted_terminated_pods =
            Some(UncountedTerminatedPods { succeeded: Some(vec!["x".into()]), failed: None });
        assert!(!enact_finished(&mut j, &st));
        j.status.as_mut().unwrap().uncounted_terminated_pods = Some(UncountedTerminatedPods::default());
        assert!(enact_finished(&mut j, &st));
        let s = j.status.unwrap();
        assert!(s.completion_time.is_some());
        assert_eq!(s.conditions.unwrap()[0].type_, COMPLETE);
    }

    #[test]
    fn deleted_pods_fail_unless_only_failed_ones_are_replaced() {
        let mut j = job(Some(1), false);
        let mut p = (*pod("a", "Running", None, true)).clone();
        p.metadata.deletion_timestamp = Some(now_time());
        assert!(is_pod_failed(&p, &j));
        j.spec.as_mut().unwrap().pod_replacement_policy = Some("Failed".into());
        assert!(!is_pod_failed(&p, &j));
        assert!(is_terminating(&p));
    }
}
