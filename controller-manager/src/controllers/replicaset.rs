//! The ReplicaSet controller (upstream `pkg/controller/replicaset`): keeps `spec.replicas`
//! active pods matching each ReplicaSet, adopting orphans and releasing pods that stopped
//! matching, and reports counts and the `ReplicaFailure` condition in its status.
//!
//! The same controller runs ReplicationControllers (as upstream, which adapts them to
//! ReplicaSets): what it needs of its owner type is the [`ReplicaOwner`] trait.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use component_base::labels::{Labels, Selector};

use crate::controller::{self, Context, Error};
use crate::events::Type;
use crate::expectations::Expectations;
use crate::informers::{Event, Informer, key_of, split_key};
use crate::owners;
use crate::podutil;
use crate::workqueue::Queue;

/// Upstream's `burstReplicas`: at most this many creates or deletes per sync.
const BURST_REPLICAS: usize = 500;
/// Upstream's `SlowStartInitialBatchSize`.
const SLOW_START_INITIAL_BATCH: usize = 1;
const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// What the controller needs of the objects it keeps replicas for.
pub(crate) trait ReplicaOwner:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Serialize
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// The events' source component.
    const COMPONENT: &'static str;
    /// The work queue's name (its `workqueue_*` metrics label).
    const QUEUE: &'static str;
    fn replicas(&self) -> i32;
    /// The selector as written; [`selector_of`] makes an empty one select nothing.
    fn selector(&self) -> Selector;
    fn template(&self) -> Option<PodTemplateSpec>;
    fn min_ready_seconds(&self) -> i32;
    fn replica_status(&self) -> ReplicaSetStatus;
    fn set_replica_status(&mut self, status: ReplicaSetStatus);
}

impl ReplicaOwner for ReplicaSet {
    const COMPONENT: &'static str = "replicaset-controller";
    const QUEUE: &'static str = "replicaset";
    fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }
    fn selector(&self) -> Selector {
        Selector::from_label_selector(self.spec.as_ref().map(|s| &s.selector))
    }
    fn template(&self) -> Option<PodTemplateSpec> {
        self.spec.as_ref().and_then(|s| s.template.clone())
    }
    fn min_ready_seconds(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0)
    }
    fn replica_status(&self) -> ReplicaSetStatus {
        self.status.clone().unwrap_or_default()
    }
    fn set_replica_status(&mut self, status: ReplicaSetStatus) {
        self.status = Some(status);
    }
}

/// ReplicationControllers select with a plain label map and have the same status fields.
impl ReplicaOwner for ReplicationController {
    const COMPONENT: &'static str = "replication-controller";
    const QUEUE: &'static str = "replicationmanager";
    fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }
    fn selector(&self) -> Selector {
        let labels = self.spec.as_ref().and_then(|s| s.selector.clone());
        let sel = k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
            match_labels: labels,
            match_expressions: None,
        };
        Selector::from_label_selector(Some(&sel))
    }
    fn template(&self) -> Option<PodTemplateSpec> {
        self.spec.as_ref().and_then(|s| s.template.clone())
    }
    fn min_ready_seconds(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0)
    }
    fn replica_status(&self) -> ReplicaSetStatus {
        // Same field names and shapes: a serde round trip is the adapter.
        self.status
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok())
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default()
    }
    fn set_replica_status(&mut self, status: ReplicaSetStatus) {
        self.status = serde_json::to_value(status).ok().and_then(|v| serde_json::from_value(v).ok());
    }
}

struct Controller<K> {
    client: kube::Client,
    ctx: Context,
    rss: Arc<Informer<K>>,
    pods: Arc<Informer<Pod>>,
    queue: Arc<Queue>,
    expectations: Arc<Expectations>,
}

pub fn start(ctx: &Context) -> Result<(), Error> {
    start_for::<ReplicaSet>(ctx, ctx.options.concurrent_replicaset_syncs)
}

/// Starts the controller for one owner type with `workers` workers.
pub(crate) fn start_for<K: ReplicaOwner>(ctx: &Context, workers: usize) -> Result<(), Error> {
    let rss = ctx.informers.get::<K>();
    let pods = ctx.informers.get::<Pod>();
    let queue = ctx.queue(K::QUEUE);
    let expectations = Arc::new(Expectations::default());
    {
        let (queue, expectations) = (queue.clone(), expectations.clone());
        rss.add_handler(move |ev| match ev {
            Event::Add(rs) => queue.add(key_of(&***rs)),
            Event::Update(old, new) => {
                // A new object under the same name: the old one's expectations are moot.
                if old.meta().uid != new.meta().uid {
                    expectations.delete(&key_of(&***old));
                }
                queue.add(key_of(&***new));
            }
            Event::Delete(rs) => {
                let key = key_of(&***rs);
                expectations.delete(&key);
                queue.add(key);
            }
        });
    }
    {
        let (queue, expectations, rss_h) = (queue.clone(), expectations.clone(), rss.clone());
        pods.add_handler(move |ev| pod_event(&rss_h, &queue, &expectations, ev));
    }
    let ctrl = Arc::new(Controller {
        client: ctx.client.clone(),
        ctx: ctx.clone(),
        rss,
        pods,
        queue: queue.clone(),
        expectations,
    });
    controller::run_workers(ctx, queue, workers, move |key| {
        let ctrl = ctrl.clone();
        async move { ctrl.sync(&key).await }
    });
    Ok(())
}

/// The ReplicaSet a controller reference points at, if it is still the same object.
fn resolve_controller<K: ReplicaOwner>(
    rss: &Informer<K>,
    namespace: &str,
    r: &OwnerReference,
) -> Option<Arc<K>> {
    if r.kind != K::kind(&()) {
        return None;
    }
    let rs = rss.get_namespaced(namespace, &r.name)?;
    (rs.meta().uid.as_deref() == Some(r.uid.as_str())).then_some(rs)
}

/// The ReplicaSets of the pod's namespace whose selector matches it (adoption candidates).
fn matching_replicasets<K: ReplicaOwner>(rss: &Informer<K>, pod: &Pod) -> Vec<Arc<K>> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    rss.list_namespace(ns).into_iter().filter(|rs| selector_of(&**rs).matches(&labels)).collect()
}

/// A ReplicaSet's selector; an empty one selects nothing, as upstream's controllers refuse
/// to fight over every pod of a namespace.
fn selector_of<K: ReplicaOwner>(rs: &K) -> Selector {
    let parsed = rs.selector();
    if parsed.is_empty() { Selector::nothing() } else { parsed }
}

fn pod_event<K: ReplicaOwner>(rss: &Informer<K>, queue: &Queue, exp: &Expectations, ev: &Event<'_, Pod>) {
    match ev {
        Event::Add(pod) => {
            if pod.metadata.deletion_timestamp.is_some() {
                // Restarted controller seeing a pod already being deleted: a deletion.
                return pod_deleted(rss, queue, exp, pod);
            }
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            if let Some(r) = owners::controller_of(&pod.metadata) {
                if let Some(rs) = resolve_controller(rss, ns, r) {
                    let key = key_of(&*rs);
                    exp.creation_observed(&key);
                    queue.add(key);
                }
                return;
            }
            for rs in matching_replicasets(rss, pod) {
                queue.add(key_of(&*rs));
            }
        }
        Event::Update(old, new) => {
            if old.metadata.resource_version == new.metadata.resource_version {
                return;
            }
            let labels_changed = old.metadata.labels != new.metadata.labels;
            if new.metadata.deletion_timestamp.is_some() {
                // Graceful deletion shows first as an update; count it now so the
                // replacement is not held back for the whole grace period.
                pod_deleted(rss, queue, exp, new);
                if labels_changed {
                    pod_deleted(rss, queue, exp, old);
                }
                return;
            }
            let ns = new.metadata.namespace.as_deref().unwrap_or_default();
            let old_ref = owners::controller_of(&old.metadata);
            let new_ref = owners::controller_of(&new.metadata);
            let ref_changed = old_ref != new_ref;
            if ref_changed
                && let Some(r) = old_ref
                && let Some(rs) = resolve_controller(rss, ns, r)
            {
                queue.add(key_of(&*rs));
            }
            if let Some(r) = new_ref {
                if let Some(rs) = resolve_controller(rss, ns, r) {
                    queue.add(key_of(&*rs));
                }
                return;
            }
            if labels_changed || ref_changed {
                for rs in matching_replicasets(rss, new) {
                    queue.add(key_of(&*rs));
                }
            }
        }
        Event::Delete(pod) => pod_deleted(rss, queue, exp, pod),
    }
}

fn pod_deleted<K: ReplicaOwner>(rss: &Informer<K>, queue: &Queue, exp: &Expectations, pod: &Pod) {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let Some(r) = owners::controller_of(&pod.metadata) else { return };
    let Some(rs) = resolve_controller(rss, ns, r) else { return };
    let key = key_of(&*rs);
    exp.deletion_observed(&key, &key_of(pod));
    queue.add(key);
}

impl<K: ReplicaOwner> Controller<K> {
    async fn sync(&self, key: &str) -> Result<(), Error> {
        let (ns, _) = split_key(key);
        let Some(rs) = self.rss.get(key) else {
            self.expectations.delete(key);
            return Ok(());
        };
        let needs_sync = self.expectations.satisfied(key);
        let selector = selector_of(&*rs);
        let active: Vec<Arc<Pod>> =
            self.pods.list_namespace(ns).into_iter().filter(|p| podutil::is_active(p)).collect();
        let pods_api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let rs_api: Api<K> = Api::namespaced(self.client.clone(), ns);
        let owned = claim(&pods_api, &rs_api, &*rs, &selector, active).await?;

        let mut manage_err = None;
        if needs_sync && rs.meta().deletion_timestamp.is_none() {
            manage_err = self.manage_replicas(&rs, key, &owned).await.err();
        }
        let now = Timestamp::now();
        let status = calculate_status(&*rs, &owned, manage_err.as_ref(), now);
        let updated = update_status(&rs_api, &rs, status).await?;

        let min_ready = min_ready_of(&updated);
        if manage_err.is_none() && !min_ready.is_zero() {
            // Availability only changes with time; come back when the next pod qualifies.
            let wait = owned.iter().filter_map(|p| podutil::until_available(p, min_ready, now)).min();
            if let Some(wait) = wait {
                self.queue.add_after(key.to_owned(), wait + Duration::from_millis(100));
            }
        }
        match manage_err {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    async fn manage_replicas(&self, rs: &K, key: &str, owned: &[Arc<Pod>]) -> Result<(), Error> {
        let want = rs.replicas().max(0) as usize;
        let ns = rs.meta().namespace.as_deref().unwrap_or_default();
        let pods_api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        if owned.len() < want {
            let diff = (want - owned.len()).min(BURST_REPLICAS);
            let template = rs.template().unwrap_or_default();
            let pod = pod_from_template(&template, rs)?;
            // Raised before any create so the informer's adds cannot race past them.
            self.expectations.expect_creations(key, diff);
            let (successes, err) = slow_start_batch(diff, SLOW_START_INITIAL_BATCH, |_| {
                let (api, pod) = (pods_api.clone(), pod.clone());
                async move { self.create_pod(&api, rs, &pod).await }
            })
            .await;
            // The skipped and failed creations will never be observed.
            for _ in successes..diff {
                self.expectations.creation_observed(key);
            }
            return err.map_or(Ok(()), Err);
        }
        if owned.len() > want {
            let diff = (owned.len() - want).min(BURST_REPLICAS);
            let related = self.related_pods(rs);
            let victims = pods_to_delete(owned, &related, diff, Timestamp::now());
            self.expectations.expect_deletions(key, victims.iter().map(|p| key_of(&**p)));
            let results = join_all(victims.iter().map(|pod| {
                let api = pods_api.clone();
                async move {
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    match api.delete(&name, &DeleteParams::default()).await {
                        Ok(_) => {
                            self.ctx.recorder.event(
                                K::COMPONENT,
                                rs,
                                Type::Normal,
                                "SuccessfulDelete",
                                format!("Deleted pod: {name}"),
                            );
                            Ok(())
                        }
                        Err(err) => {
                            // The deletion will never be observed; a pod already gone is fine.
                            self.expectations.deletion_observed(key, &key_of(&**pod));
                            if controller::api_code(&err) == Some(404) {
                                return Ok(());
                            }
                            self.ctx.recorder.event(
                                K::COMPONENT,
                                rs,
                                Type::Warning,
                                "FailedDelete",
                                format!("Error deleting: {err}"),
                            );
                            Err(Error::Api(err))
                        }
                    }
                }
            }))
            .await;
            return results.into_iter().find_map(Result::err).map_or(Ok(()), Err);
        }
        Ok(())
    }

    async fn create_pod(&self, api: &Api<Pod>, rs: &K, pod: &Pod) -> Result<(), Error> {
        match api.create(&PostParams::default(), pod).await {
            Ok(created) => {
                let name = created.metadata.name.unwrap_or_default();
                self.ctx.recorder.event(
                    K::COMPONENT,
                    rs,
                    Type::Normal,
                    "SuccessfulCreate",
                    format!("Created pod: {name}"),
                );
                Ok(())
            }
            // Every create fails in a namespace being deleted; that is not this
            // ReplicaSet's failure (upstream returns success quietly).
            Err(err) if controller::is_namespace_terminating(&err) => Ok(()),
            Err(err) => {
                self.ctx.recorder.event(
                    K::COMPONENT,
                    rs,
                    Type::Warning,
                    "FailedCreate",
                    format!("Error creating: {err}"),
                );
                Err(Error::Api(err))
            }
        }
    }

    /// Pods controlled by this ReplicaSet or its siblings (ReplicaSets with the same
    /// controller): upstream ranks a victim higher when its node also runs these.
    fn related_pods(&self, rs: &K) -> Vec<Arc<Pod>> {
        let ns = rs.meta().namespace.as_deref().unwrap_or_default();
        let own_uid = rs.meta().uid.clone().unwrap_or_default();
        let mut uids = vec![own_uid];
        if let Some(parent) = owners::controller_of(rs.meta()) {
            for sibling in self.rss.list_namespace(ns) {
                if owners::is_controlled_by(sibling.meta(), &parent.uid)
                    && let Some(uid) = &sibling.meta().uid
                {
                    uids.push(uid.clone());
                }
            }
        }
        self.pods
            .list_namespace(ns)
            .into_iter()
            .filter(|p| owners::controller_of(&p.metadata).is_some_and(|r| uids.contains(&r.uid)))
            .collect()
    }
}

fn min_ready_of<K: ReplicaOwner>(rs: &K) -> Duration {
    let secs = rs.min_ready_seconds();
    Duration::from_secs(secs.max(0) as u64)
}

/// The pod upstream's `GetPodFromTemplate` builds: the template's labels, annotations,
/// finalizers and spec, named `<owner>-<random>` by the API server.
pub(crate) fn pod_from_template<K: Resource<DynamicType = ()>>(
    template: &PodTemplateSpec,
    owner: &K,
) -> Result<Pod, Error> {
    let meta = template.metadata.clone().unwrap_or_default();
    let owner_name = owner.meta().name.clone().unwrap_or_default();
    let spec = template
        .spec
        .clone()
        .ok_or_else(|| Error::Other(format!("{}/{owner_name}: template has no pod spec", K::kind(&()))))?;
    Ok(Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{owner_name}-")),
            namespace: owner.meta().namespace.clone(),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![owners::controller_ref(owner)]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    })
}

/// Batch sizes of upstream's `slowStartBatch`: `initial`, then doubling, until `count`
/// calls are covered; a failing batch stops the rest so a broken template costs one
/// call, not hundreds.
pub(crate) fn slow_start_sizes(count: usize, initial: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut remaining = count;
    let mut size = initial.max(1).min(remaining);
    while size > 0 {
        sizes.push(size);
        remaining -= size;
        size = (2 * size).min(remaining);
    }
    sizes
}

/// Runs `f` `count` times in slow-start batches; returns the successes and the first
/// error (after which no further batch starts).
pub(crate) async fn slow_start_batch<F, Fut>(count: usize, initial: usize, f: F) -> (usize, Option<Error>)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    let mut successes = 0;
    let mut index = 0;
    for size in slow_start_sizes(count, initial) {
        let results = join_all((index..index + size).map(&f)).await;
        index += size;
        let mut first_err = None;
        for r in results {
            match r {
                Ok(()) => successes += 1,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if first_err.is_some() {
            return (successes, first_err);
        }
    }
    (successes, None)
}

/// How upstream's `ClaimObject` treats one object for one owner.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// Controlled by the owner and still selected.
    Own,
    /// An orphan the owner selects: adopt it.
    Adopt,
    /// Controlled by the owner but no longer selected: release it.
    Release,
    /// Someone else's, or not ours to take.
    Ignore,
}

/// Decides [`Claim`] for an object with `meta` (in the owner's namespace).
pub(crate) fn claim_decision(
    meta: &ObjectMeta,
    owner_uid: &str,
    owner_deleting: bool,
    selected: bool,
) -> Claim {
    match owners::controller_of(meta) {
        Some(r) if r.uid != owner_uid => Claim::Ignore,
        Some(_) if selected => Claim::Own,
        // An owner being deleted keeps what it has: releasing would let a sibling grab
        // pods the garbage collector is about to remove.
        Some(_) if owner_deleting => Claim::Ignore,
        Some(_) => Claim::Release,
        None if owner_deleting || !selected || meta.deletion_timestamp.is_some() => Claim::Ignore,
        None => Claim::Adopt,
    }
}

/// Claims `candidates` for `owner` (upstream's `ControllerRefManager.Claim*`): adopts
/// selected orphans and releases owned objects that no longer match; returns the objects
/// the owner now controls. Adoption first re-reads the owner from the API server, so a
/// stale cache cannot adopt into an owner that was just deleted.
pub(crate) async fn claim<K, O>(
    api: &Api<K>,
    owner_api: &Api<O>,
    owner: &O,
    selector: &Selector,
    candidates: Vec<Arc<K>>,
) -> Result<Vec<Arc<K>>, Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    O: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    claim_adopting_with_finalizer(api, owner_api, owner, selector, candidates, None).await
}

/// [`claim`], adding `finalizer` to what it adopts in the same patch (the Job
/// controller's tracking finalizer: an adopted pod must be tracked from then on).
pub(crate) async fn claim_adopting_with_finalizer<K, O>(
    api: &Api<K>,
    owner_api: &Api<O>,
    owner: &O,
    selector: &Selector,
    candidates: Vec<Arc<K>>,
    finalizer: Option<&str>,
) -> Result<Vec<Arc<K>>, Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    O: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let owner_meta = owner.meta();
    let owner_uid = owner_meta.uid.clone().unwrap_or_default();
    let deleting = owner_meta.deletion_timestamp.is_some();
    let mut owned = Vec::new();
    let mut can_adopt: Option<bool> = None;
    let mut errors = Vec::new();
    for obj in candidates {
        let labels = obj.meta().labels.clone().unwrap_or_default();
        match claim_decision(obj.meta(), &owner_uid, deleting, selector.matches(&labels)) {
            Claim::Own => owned.push(obj),
            Claim::Ignore => {}
            Claim::Release => {
                if let Err(err) = release(api, &owner_uid, obj.meta()).await {
                    errors.push(err);
                }
            }
            Claim::Adopt => {
                if can_adopt.is_none() {
                    let name = owner_meta.name.clone().unwrap_or_default();
                    let fresh = owner_api.get_opt(&name).await?;
                    let ok = fresh.is_some_and(|f| {
                        f.meta().uid.as_deref() == Some(owner_uid.as_str())
                            && f.meta().deletion_timestamp.is_none()
                    });
                    can_adopt = Some(ok);
                }
                if can_adopt != Some(true) {
                    errors.push(Error::Other(format!(
                        "{} {} was deleted; not adopting",
                        O::kind(&()),
                        key_of(owner)
                    )));
                    continue;
                }
                match adopt(api, &owners::controller_ref(owner), obj.meta(), finalizer).await {
                    Ok(Some(adopted)) => owned.push(Arc::new(adopted)),
                    Ok(None) => {}
                    Err(err) => errors.push(err),
                }
            }
        }
    }
    match errors.into_iter().next() {
        Some(err) => Err(err),
        None => Ok(owned),
    }
}

/// Adds `owner_ref` to the object, guarded by its UID (a recreated object of the same
/// name is not adopted). `None` when the object is gone.
async fn adopt<K>(
    api: &Api<K>,
    owner_ref: &OwnerReference,
    meta: &ObjectMeta,
    finalizer: Option<&str>,
) -> Result<Option<K>, Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut patch = json!({"metadata": {"ownerReferences": [owner_ref], "uid": meta.uid}});
    if let Some(f) = finalizer {
        // `finalizers` merges as a set of strings: this adds without dropping others'.
        patch["metadata"]["finalizers"] = json!([f]);
    }
    let name = meta.name.clone().unwrap_or_default();
    match api.patch(&name, &PatchParams::default(), &Patch::Strategic(patch)).await {
        Ok(obj) => Ok(Some(obj)),
        Err(err) if controller::api_code(&err) == Some(404) => Ok(None),
        Err(err) => Err(Error::Api(err)),
    }
}

/// Removes the owner's reference from the object, guarded by its UID.
async fn release<K>(api: &Api<K>, owner_uid: &str, meta: &ObjectMeta) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch =
        json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": owner_uid}], "uid": meta.uid}});
    let name = meta.name.clone().unwrap_or_default();
    match api.patch(&name, &PatchParams::default(), &Patch::Strategic(patch)).await {
        // Gone, or no longer the same object / no longer referencing us (Invalid): done.
        // 422 from upstream, 409 from our apiserver for a UID that no longer matches:
        // the pod was deleted and re-created, so nothing of ours is left to release.
        Err(err) if matches!(controller::api_code(&err), Some(404 | 409 | 422)) => Ok(()),
        Err(err) => Err(Error::Api(err)),
        Ok(_) => Ok(()),
    }
}

fn deletion_cost(pod: &Pod) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DELETION_COST))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn ready_since(pod: &Pod) -> Option<Timestamp> {
    podutil::condition(pod, "Ready")
        .filter(|c| c.status == "True")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

fn max_restarts(pod: &Pod) -> i32 {
    let status = pod.status.as_ref();
    let main = status.and_then(|s| s.container_statuses.as_ref()).into_iter().flatten();
    // Sidecars (restartable init containers) restart like app containers.
    let init = status.and_then(|s| s.init_container_statuses.as_ref()).into_iter().flatten();
    main.chain(init).map(|c| c.restart_count).max().unwrap_or(0)
}

fn phase_rank(pod: &Pod) -> u8 {
    match podutil::phase(pod) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    }
}

/// Upstream's logarithmic age bucket (LogarithmicScaleDown): pods whose times fall in the
/// same power-of-two age range rank alike. An unset time ranks as the newest.
fn age_bucket(t: Option<Timestamp>, now: Timestamp) -> i64 {
    match t {
        None => -2,
        Some(t) => {
            let d = now.duration_since(t).as_nanos();
            if d > 0 { (d as f64).log2() as i64 } else { -1 }
        }
    }
}

/// Upstream's `ActivePodsWithRanks` order as a sort key: the smaller key is deleted
/// first. `rank` counts related pods on the same node (doubled-up pods go first). A key,
/// unlike a pairwise `Less` with UID tie-breaks inside buckets, is a total order, which
/// Rust's sorts require.
fn deletion_key(pod: &Pod, rank: usize, now: Timestamp) -> impl Ord {
    let ready = podutil::is_ready(pod);
    let ready_bucket = if ready { age_bucket(ready_since(pod), now) } else { 0 };
    let created = age_bucket(pod.metadata.creation_timestamp.as_ref().map(|t| t.0), now);
    (
        !podutil::node_name(pod).is_empty(),
        phase_rank(pod),
        ready,
        deletion_cost(pod),
        std::cmp::Reverse(rank),
        ready_bucket,
        std::cmp::Reverse(max_restarts(pod)),
        created,
        pod.metadata.uid.clone(),
    )
}

/// The `diff` pods to delete first among `owned`, ranked against `related` (see
/// [`deletion_key`]).
pub(crate) fn pods_to_delete(
    owned: &[Arc<Pod>],
    related: &[Arc<Pod>],
    diff: usize,
    now: Timestamp,
) -> Vec<Arc<Pod>> {
    if diff >= owned.len() {
        return owned.to_vec();
    }
    let mut on_node: HashMap<&str, usize> = HashMap::new();
    for p in related.iter().filter(|p| podutil::is_active(p)) {
        let node = podutil::node_name(p);
        if !node.is_empty() {
            *on_node.entry(node).or_default() += 1;
        }
    }
    let mut ranked: Vec<(usize, &Arc<Pod>)> =
        owned.iter().map(|p| (on_node.get(podutil::node_name(p)).copied().unwrap_or(0), p)).collect();
    ranked.sort_by_cached_key(|(rank, p)| deletion_key(p, *rank, now));
    ranked.into_iter().take(diff).map(|(_, p)| p.clone()).collect()
}

fn labels_superset(have: &Labels, want: &BTreeMap<String, String>) -> bool {
    want.iter().all(|(k, v)| have.get(k) == Some(v))
}

/// The status upstream's `calculateStatus` derives from the owned active pods.
pub(crate) fn calculate_status<K: ReplicaOwner>(
    rs: &K,
    owned: &[Arc<Pod>],
    manage_err: Option<&Error>,
    now: Timestamp,
) -> ReplicaSetStatus {
    let mut status = rs.replica_status();
    let template_labels = rs.template().and_then(|t| t.metadata).and_then(|m| m.labels);
    let template_labels = template_labels.unwrap_or_default();
    let min_ready = min_ready_of(rs);
    let mut fully_labeled = 0;
    let mut ready = 0;
    let mut available = 0;
    for p in owned {
        if labels_superset(p.metadata.labels.as_ref().unwrap_or(&Labels::new()), &template_labels) {
            fully_labeled += 1;
        }
        if podutil::is_ready(p) {
            ready += 1;
            if podutil::is_available(p, min_ready, now) {
                available += 1;
            }
        }
    }
    let mut conditions = status.conditions.take().unwrap_or_default();
    let has_failure = conditions.iter().any(|c| c.type_ == "ReplicaFailure");
    match manage_err {
        Some(err) if !has_failure => {
            let want = rs.replicas().max(0) as usize;
            let reason = if owned.len() < want { "FailedCreate" } else { "FailedDelete" };
            conditions.push(ReplicaSetCondition {
                type_: "ReplicaFailure".into(),
                status: "True".into(),
                reason: Some(reason.into()),
                message: Some(err.to_string()),
                // API times carry whole seconds; a finer one would never compare equal.
                last_transition_time: Some(Time(Timestamp::from_second(now.as_second()).unwrap_or(now))),
            });
        }
        None if has_failure => conditions.retain(|c| c.type_ != "ReplicaFailure"),
        _ => {}
    }
    let nonzero = |n: i32| (n != 0).then_some(n);
    status.replicas = owned.len() as i32;
    status.fully_labeled_replicas = nonzero(fully_labeled);
    status.ready_replicas = nonzero(ready);
    status.available_replicas = nonzero(available);
    status.observed_generation = rs.meta().generation;
    status.conditions = (!conditions.is_empty()).then_some(conditions);
    status
}

fn status_equal(a: &ReplicaSetStatus, b: &ReplicaSetStatus) -> bool {
    let n = |v: Option<i32>| v.unwrap_or(0);
    a.replicas == b.replicas
        && n(a.fully_labeled_replicas) == n(b.fully_labeled_replicas)
        && n(a.ready_replicas) == n(b.ready_replicas)
        && n(a.available_replicas) == n(b.available_replicas)
        && a.observed_generation == b.observed_generation
        && a.conditions.as_deref().unwrap_or_default() == b.conditions.as_deref().unwrap_or_default()
}

/// Writes `status` through the status subresource unless it is unchanged; on a conflict
/// re-reads once and retries, as upstream.
async fn update_status<K: ReplicaOwner>(api: &Api<K>, rs: &K, status: ReplicaSetStatus) -> Result<K, Error> {
    if status_equal(&rs.replica_status(), &status) {
        return Ok(rs.clone());
    }
    let name = rs.meta().name.clone().unwrap_or_default();
    let mut current = rs.clone();
    for attempt in 0..2 {
        current.set_replica_status(status.clone());
        match api.replace_status(&name, &PostParams::default(), &current).await {
            Ok(updated) => return Ok(updated),
            Err(err) if attempt == 0 && controller::api_code(&err) == Some(409) => {
                current = api.get(&name).await?;
            }
            Err(err) => return Err(Error::Api(err)),
        }
    }
    Ok(current)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodSpec, PodStatus};

    fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn pod(
        name: &str,
        node: &str,
        phase: &str,
        ready_at: Option<i64>,
        created: i64,
        restarts: i32,
    ) -> Arc<Pod> {
        let conditions = ready_at.map(|t| {
            vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                last_transition_time: Some(Time(ts(t))),
                ..Default::default()
            }]
        });
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("uid-{name}")),
                creation_timestamp: Some(Time(ts(created))),
                ..Default::default()
            },
            spec: Some(PodSpec { node_name: (!node.is_empty()).then(|| node.into()), ..Default::default() }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions,
                container_statuses: Some(vec![ContainerStatus {
                    restart_count: restarts,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
        pods.iter().map(|p| p.metadata.name.as_deref().unwrap()).collect()
    }

    #[test]
    fn slow_start_doubles_batches() {
        assert_eq!(slow_start_sizes(0, 1), Vec::<usize>::new());
        assert_eq!(slow_start_sizes(1, 1), vec![1]);
        assert_eq!(slow_start_sizes(10, 1), vec![1, 2, 4, 3]);
        assert_eq!(slow_start_sizes(15, 1), vec![1, 2, 4, 8]);
    }

    #[tokio::test]
    async fn slow_start_stops_at_first_failing_batch() {
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let (ok, err) = slow_start_batch(10, 1, |i| {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { if i == 2 { Err(Error::Other("boom".into())) } else { Ok(()) } }
        })
        .await;
        // Batches 1 and 2 ran (indices 0, 1, 2); index 2 failed; the batch of 4 never ran.
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert_eq!(ok, 2);
        assert!(err.is_some());
    }

    #[test]
    fn ranking_prefers_unassigned_pending_unready_new() {
        let now = ts(100_000);
        let pods = vec![
            pod("running-ready-old", "n1", "Running", Some(1_000), 500, 0),
            pod("unassigned", "", "Pending", None, 99_000, 0),
            pod("pending", "n1", "Pending", None, 90_000, 0),
            pod("running-unready", "n1", "Running", None, 90_000, 0),
            pod("running-ready-new", "n2", "Running", Some(99_990), 99_000, 0),
            pod("running-ready-restarts", "n2", "Running", Some(1_000), 500, 5),
        ];
        let order = pods_to_delete(&pods, &[], 5, now);
        assert_eq!(
            names(&order),
            vec!["unassigned", "pending", "running-unready", "running-ready-new", "running-ready-restarts"]
        );
    }

    #[test]
    fn ranking_prefers_doubled_up_nodes() {
        let now = ts(100_000);
        let a = pod("a", "n1", "Running", Some(1_000), 500, 0);
        let b = pod("b", "n2", "Running", Some(1_000), 500, 0);
        let c = pod("c", "n2", "Running", Some(1_000), 500, 0);
        let owned = vec![a, b.clone(), c.clone()];
        let order = pods_to_delete(&owned, &owned, 1, now);
        assert!(["b", "c"].contains(&names(&order)[0]));
    }

    #[test]
    fn deletion_cost_orders_before_age() {
        let now = ts(100_000);
        let mut cheap = (*pod("cheap", "n1", "Running", Some(1_000), 500, 0)).clone();
        cheap.metadata.annotations = Some([(DELETION_COST.to_string(), "-5".to_string())].into());
        let owned = vec![pod("new", "n1", "Running", Some(99_000), 99_000, 0), Arc::new(cheap)];
        assert_eq!(names(&pods_to_delete(&owned, &[], 1, now)), vec!["cheap"]);
    }

    #[test]
    fn claims_follow_controller_ref_manager() {
        let mut meta = ObjectMeta::default();
        assert_eq!(claim_decision(&meta, "me", false, true), Claim::Adopt);
        assert_eq!(claim_decision(&meta, "me", true, true), Claim::Ignore);
        assert_eq!(claim_decision(&meta, "me", false, false), Claim::Ignore);
        meta.owner_references =
            Some(vec![OwnerReference { uid: "me".into(), controller: Some(true), ..Default::default() }]);
        assert_eq!(claim_decision(&meta, "me", false, true), Claim::Own);
        assert_eq!(claim_decision(&meta, "me", false, false), Claim::Release);
        assert_eq!(claim_decision(&meta, "me", true, false), Claim::Ignore);
        assert_eq!(claim_decision(&meta, "other", false, true), Claim::Ignore);
    }

    #[test]
    fn status_counts_and_failure_condition() {
        let now = ts(100_000);
        let mut rs = ReplicaSet::default();
        rs.metadata.generation = Some(3);
        rs.spec = Some(k8s_openapi::api::apps::v1::ReplicaSetSpec {
            replicas: Some(3),
            min_ready_seconds: Some(10),
            ..Default::default()
        });
        let owned = vec![
            pod("a", "n1", "Running", Some(1_000), 500, 0),
            pod("b", "n1", "Running", Some(99_995), 500, 0),
        ];
        let err = Error::Other("quota".into());
        let s = calculate_status(&rs, &owned, Some(&err), now);
        assert_eq!((s.replicas, s.ready_replicas, s.available_replicas), (2, Some(2), Some(1)));
        assert_eq!(s.observed_generation, Some(3));
        let cond = &s.conditions.as_ref().unwrap()[0];
        assert_eq!(cond.reason.as_deref(), Some("FailedCreate"));
        rs.status = Some(s);
        let s = calculate_status(&rs, &owned, None, now);
        assert!(s.conditions.is_none());
    }
}
