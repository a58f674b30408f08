//! The StatefulSet controller (upstream `pkg/controller/statefulset`): pods with stable
//! ordinal identities (`<set>-<ordinal>`) and their own PersistentVolumeClaims from the
//! claim templates; created in order and each waiting for its predecessors to be Running
//! and Ready (`OrderedReady`) or all at once (`Parallel`); removed from the highest
//! ordinal down; updated through ControllerRevisions from the highest ordinal down to the
//! partition (RollingUpdate) or when deleted (OnDelete).

pub(crate) mod utils;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use component_base::labels::Selector;

use crate::controller::{self, Context, Error};
use crate::controllers::replicaset::{claim, slow_start_batch};
use crate::events::Type;
use crate::history;
use crate::informers::{Event, Informer, key_of, split_key};
use crate::owners;
use crate::podutil;
use crate::workqueue::Queue;

use utils::{apply_revision, is_created, is_running_and_ready, is_unavailable, ordinal, pod_revision};

const COMPONENT: &str = "statefulset-controller";
/// Conflicts retried when a pod's identity or storage is fixed (client-go's
/// `retry.DefaultBackoff` steps).
const UPDATE_RETRIES: usize = 4;

struct Controller {
    client: kube::Client,
    ctx: Context,
    sets: Arc<Informer<StatefulSet>>,
    pods: Arc<Informer<Pod>>,
    claims: Arc<Informer<PersistentVolumeClaim>>,
    revisions: Arc<Informer<ControllerRevision>>,
    queue: Arc<Queue>,
}

pub fn start(ctx: &Context) -> Result<(), Error> {
    let sets = ctx.informers.get::<StatefulSet>();
    let pods = ctx.informers.get::<Pod>();
    let claims = ctx.informers.get::<PersistentVolumeClaim>();
    let revisions = ctx.informers.get::<ControllerRevision>();
    let queue = ctx.queue("statefulset");
    {
        let queue = queue.clone();
        sets.add_handler(move |ev| match ev {
            Event::Add(s) | Event::Update(_, s) | Event::Delete(s) => queue.add(key_of(&***s)),
        });
    }
    {
        let (queue, sets) = (queue.clone(), sets.clone());
        pods.add_handler(move |ev| pod_event(&sets, &queue, ev));
    }
    let ctrl = Arc::new(Controller {
        client: ctx.client.clone(),
        ctx: ctx.clone(),
        sets,
        pods,
        claims,
        revisions,
        queue: queue.clone(),
    });
    controller::run_workers(ctx, queue, ctx.options.concurrent_statefulset_syncs, move |key| {
        let ctrl = ctrl.clone();
        async move { ctrl.sync(&key).await }
    });
    Ok(())
}

fn selector_of(set: &StatefulSet) -> Selector {
    let parsed = Selector::from_label_selector(set.spec.as_ref().map(|s| &s.selector));
    if parsed.is_empty() { Selector::nothing() } else { parsed }
}

fn resolve(sets: &Informer<StatefulSet>, ns: &str, r: &OwnerReference) -> Option<Arc<StatefulSet>> {
    if r.kind != "StatefulSet" {
        return None;
    }
    let set = sets.get_namespaced(ns, &r.name)?;
    (set.metadata.uid.as_deref() == Some(r.uid.as_str())).then_some(set)
}

fn pod_event(sets: &Informer<StatefulSet>, queue: &Arc<Queue>, ev: &Event<'_, Pod>) {
    let enqueue_owner = |pod: &Pod| -> Option<Arc<StatefulSet>> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let set = owners::controller_of(&pod.metadata).and_then(|r| resolve(sets, ns, r))?;
        queue.add(key_of(&*set));
        Some(set)
    };
    let enqueue_matching = |pod: &Pod| {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        for set in sets.list_namespace(ns) {
            if selector_of(&set).matches(&labels) {
                queue.add(key_of(&*set));
            }
        }
    };
    match ev {
        Event::Add(pod) => {
            if owners::controller_of(&pod.metadata).is_some() {
                enqueue_owner(pod);
            } else if pod.metadata.deletion_timestamp.is_none() {
                enqueue_matching(pod);
            }
        }
        Event::Update(old, new) => {
            if old.metadata.resource_version == new.metadata.resource_version {
                return;
            }
            let (old_ref, new_ref) =
                (owners::controller_of(&old.metadata), owners::controller_of(&new.metadata));
            if old_ref != new_ref && old_ref.is_some() {
                enqueue_owner(old);
            }
            if new_ref.is_some() {
                if let Some(set) = enqueue_owner(new) {
                    // Availability comes minReadySeconds after readiness: look again then.
                    let wait = utils::min_ready(&set);
                    if !wait.is_zero() && !podutil::is_ready(old) && podutil::is_ready(new) {
                        queue.add_after(key_of(&*set), wait + Duration::from_secs(1));
                    }
                }
                return;
            }
            if old_ref != new_ref || old.metadata.labels != new.metadata.labels {
                enqueue_matching(new);
            }
        }
        Event::Delete(pod) => {
            enqueue_owner(pod);
        }
    }
}

fn name_of(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

/// The state one sync works from: the set, as of its current and update revisions.
struct Revisions {
    current: ControllerRevision,
    update: ControllerRevision,
    collision_count: i32,
}

impl Controller {
    fn set_api(&self, ns: &str) -> Api<StatefulSet> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn pod_api(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn claim_api(&self, ns: &str) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn rev_api(&self, ns: &str) -> Api<ControllerRevision> {
        Api::namespaced(self.client.clone(), ns)
    }

    async fn sync(&self, key: &str) -> Result<(), Error> {
        let (ns, _) = split_key(key);
        let Some(set) = self.sets.get(key) else { return Ok(()) };
        let selector = selector_of(&set);
        self.adopt_orphan_revisions(&set, &selector).await?;
        let candidates: Vec<Arc<Pod>> =
            self.pods.list_namespace(ns).into_iter().filter(|p| utils::is_member(&set, p)).collect();
        let pods = claim(&self.pod_api(ns), &self.set_api(ns), &*set, &selector, candidates).await?;
        let status = self.update_stateful_set(&set, pods).await?;
        let min_ready = utils::min_ready(&set);
        if !min_ready.is_zero()
            && status.ready_replicas.unwrap_or(0) != status.available_replicas.unwrap_or(0)
        {
            self.queue.add_after(key.to_owned(), min_ready);
        }
        Ok(())
    }

    /// The set's revisions: owned ones and orphans its selector matches, oldest first.
    fn list_revisions(&self, set: &StatefulSet, selector: &Selector) -> Vec<ControllerRevision> {
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let uid = set.metadata.uid.as_deref().unwrap_or_default();
        let mut revs: Vec<ControllerRevision> = self
            .revisions
            .list_namespace(ns)
            .into_iter()
            .filter(|r| selector.matches(r.metadata.labels.as_ref().unwrap_or(&Default::default())))
            .filter(|r| owners::controller_of(&r.metadata).is_none_or(|c| c.uid == uid))
            .map(|r| (*r).clone())
            .collect();
        revs.sort_by(history::by_revision);
        revs
    }

    /// Adopts the orphaned revisions the set selects, after re-reading the set so a stale
    /// cache never adopts into a set that was just deleted.
    async fn adopt_orphan_revisions(&self, set: &StatefulSet, selector: &Selector) -> Result<(), Error> {
        let orphans: Vec<ControllerRevision> = self
            .list_revisions(set, selector)
            .into_iter()
            .filter(|r| owners::controller_of(&r.metadata).is_none())
            .collect();
        if orphans.is_empty() {
            return Ok(());
        }
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let fresh = self.set_api(ns).get_opt(&name_of(&set.metadata)).await?;
        if !fresh
            .is_some_and(|f| f.metadata.uid == set.metadata.uid && f.metadata.deletion_timestamp.is_none())
        {
            return Err(Error::Other(format!("StatefulSet {} was deleted; not adopting", key_of(set))));
        }
        for rev in orphans {
            let patch = json!({"metadata": {"ownerReferences": [owners::controller_ref(set)], "uid": rev.metadata.uid}});
            match self
                .rev_api(ns)
                .patch(&name_of(&rev.metadata), &PatchParams::default(), &Patch::Strategic(patch))
                .await
            {
                Ok(_) => {}
                Err(err) if controller::api_code(&err) == Some(404) => {}
                Err(err) => return Err(Error::Api(err)),
            }
        }
        Ok(())
    }

    /// Upstream's `UpdateStatefulSet`: revisions, pods, status, then history trimmed.
    async fn update_stateful_set(
        &self,
        set: &StatefulSet,
        pods: Vec<Arc<Pod>>,
    ) -> Result<StatefulSetStatus, Error> {
        let selector = selector_of(set);
        let revisions = self.list_revisions(set, &selector);
        let revs = self.get_revisions(set, &revisions).await?;
        let (status, err) = self.update_pods(set, &revs, &pods).await;
        let status_err = self.write_status(set, status.clone()).await.err();
        let trim_err = self.truncate_history(set, &pods, &revisions, &revs).await.err();
        match err.or(status_err).or(trim_err) {
            Some(e) => Err(e),
            None => Ok(status),
        }
    }

    /// Upstream's `getStatefulSetRevisions`: the update revision is the set's template,
    /// reusing an equal revision (renumbered as newest when it is not already the latest,
    /// i.e. a rollback) or created; the current revision is the one the status names.
    async fn get_revisions(
        &self,
        set: &StatefulSet,
        revisions: &[ControllerRevision],
    ) -> Result<Revisions, Error> {
        let ns = set.metadata.namespace.clone().unwrap_or_default();
        let api = self.rev_api(&ns);
        // The revision the status names may be one this controller created moments ago and
        // the informer has not delivered yet: read it, or the new template's revision would
        // be numbered as the first and taken for the current one too (pods never updated).
        let current_name = set.status.as_ref().and_then(|s| s.current_revision.clone());
        let mut owned: Vec<ControllerRevision> = revisions.to_vec();
        if let Some(name) = current_name.as_deref()
            && !owned.iter().any(|r| r.metadata.name.as_deref() == Some(name))
            && let Some(rev) = api.get_opt(name).await?
        {
            owned.push(rev);
            owned.sort_by(history::by_revision);
        }
        let revisions = owned.as_slice();
        let mut collision_count = set.status.as_ref().and_then(|s| s.collision_count).unwrap_or(0);
        let template = set.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
        let next = history::next_revision(revisions);
        let candidate = history::new_revision(
            &template,
            set.metadata.annotations.as_ref(),
            owners::controller_ref(set),
            &ns,
            next,
        );
        let data = candidate.data.as_ref().map(|d| d.0.clone()).unwrap_or_default();
        let equal: Vec<&ControllerRevision> = revisions
            .iter()
            .filter(|r| r.data.as_ref().is_some_and(|d| history::data_equal(&d.0, &data)))
            .collect();
        let update = match (equal.last(), revisions.last()) {
            (Some(eq), Some(latest)) if eq.metadata.name == latest.metadata.name => (*latest).clone(),
            (Some(eq), _) => history::set_revision_number(&api, eq, next).await?,
            (None, _) => {
                history::create(&api, &name_of(&set.metadata), &candidate, &mut collision_count).await?
            }
        };
        let current = revisions
            .iter()
            .find(|r| r.metadata.name.is_some() && r.metadata.name == current_name)
            .cloned()
            .unwrap_or_else(|| update.clone());
        Ok(Revisions { current, update, collision_count })
    }

    /// Upstream's `updateStatefulSet`: brings the pods towards the set's spec and returns
    /// the status to record (also when a step failed: the failure is returned beside it).
    async fn update_pods(
        &self,
        set: &StatefulSet,
        revs: &Revisions,
        pods: &[Arc<Pod>],
    ) -> (StatefulSetStatus, Option<Error>) {
        let current_set = apply_revision(set, &revs.current);
        let update_set = apply_revision(set, &revs.update);
        let (cur_name, upd_name) = (name_of(&revs.current.metadata), name_of(&revs.update.metadata));
        let min_ready = utils::min_ready(set);
        let mut status = StatefulSetStatus {
            observed_generation: set.metadata.generation,
            current_revision: Some(cur_name.clone()),
            update_revision: Some(upd_name.clone()),
            collision_count: Some(revs.collision_count),
            // Conditions are other writers' (the controller sets none); keep them.
            conditions: set.status.as_ref().and_then(|s| s.conditions.clone()),
            ..Default::default()
        };
        let now = Timestamp::now();
        utils::write_counts(
            &mut status,
            &utils::count(pods.iter().map(|p| &**p), min_ready, now, &cur_name, &upd_name),
        );

        // Pods in the ordinal range at their index, the rest condemned (highest first).
        let (start, end) = (utils::start_ordinal(set), utils::end_ordinal(set));
        let mut replicas: Vec<Option<Arc<Pod>>> = vec![None; utils::replicas(set) as usize];
        let mut condemned: Vec<Arc<Pod>> = Vec::new();
        for pod in pods {
            let o = ordinal(pod);
            if o >= start && o <= end {
                replicas[(o - start) as usize] = Some(pod.clone());
            } else if o >= 0 {
                condemned.push(pod.clone());
            }
        }
        let replicas: Vec<Arc<Pod>> = replicas
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                p.unwrap_or_else(|| {
                    Arc::new(utils::new_versioned_pod(
                        &current_set,
                        &update_set,
                        &cur_name,
                        &upd_name,
                        start + i as i32,
                    ))
                })
            })
            .collect();
        condemned.sort_by_key(|p| std::cmp::Reverse(ordinal(p)));
        let first_unhealthy = replicas
            .iter()
            .chain(condemned.iter().rev())
            .find(|p| is_unavailable(p, min_ready, now))
            .map(|p| name_of(&p.metadata));

        let recount = |status: &mut StatefulSetStatus, replicas: &[Arc<Pod>], condemned: &[Arc<Pod>]| {
            let all = replicas.iter().chain(condemned).map(|p| &**p);
            utils::write_counts(
                status,
                &utils::count(all, min_ready, Timestamp::now(), &cur_name, &upd_name),
            );
        };
        if set.metadata.deletion_timestamp.is_some() {
            return (status, None);
        }
        let monotonic = !utils::allows_burst(set);

        // 1. Every replica created, failed ones replaced, identities and claims kept.
        let step = self
            .run_for_all(replicas.len(), monotonic, |i| {
                self.process_replica(set, &update_set, monotonic, &replicas[i])
            })
            .await;
        if step.as_ref().map_or(true, |exit| *exit) {
            recount(&mut status, &replicas, &condemned);
            return (status, step.err());
        }
        // 2. Claims of condemned pods owned per the retention policy before they go.
        let step = self
            .run_for_all(condemned.len(), monotonic, |i| {
                let pod = condemned[i].clone();
                let update_set = &update_set;
                async move {
                    if !self.claims_match_retention(update_set, &pod) {
                        self.update_claims_for_retention(update_set, &pod).await?;
                    }
                    Ok(false)
                }
            })
            .await;
        if step.as_ref().map_or(true, |exit| *exit) {
            recount(&mut status, &replicas, &condemned);
            return (status, step.err());
        }
        // 3. Scale down from the highest ordinal, once everything below is healthy.
        let step = self
            .run_for_all(condemned.len(), monotonic, |i| {
                self.process_condemned(set, first_unhealthy.as_deref(), monotonic, &condemned[i])
            })
            .await;
        if step.as_ref().map_or(true, |exit| *exit) {
            recount(&mut status, &replicas, &condemned);
            return (status, step.err());
        }
        recount(&mut status, &replicas, &condemned);
        if utils::is_on_delete(set) {
            return (status, None);
        }
        // 4. Rolling update: delete outdated pods from the highest ordinal down to the
        // partition; step 1 recreates them at the update revision.
        let update_min = utils::update_min(set);
        match utils::max_unavailable(set) {
            Some(Err(e)) => return (status, Some(e)),
            Some(Ok(max)) => {
                let unavailable =
                    replicas.iter().filter(|p| is_unavailable(p, min_ready, now)).count() as i32;
                if unavailable >= max {
                    return (status, None);
                }
                let mut budget = max - unavailable;
                for target in (0..replicas.len()).rev() {
                    if budget == 0 || (target as i32) < update_min {
                        break;
                    }
                    let pod = &replicas[target];
                    if pod_revision(pod) != upd_name && !podutil::is_terminating(pod) {
                        if let Err(e) = self.delete_pod(set, pod).await {
                            return (status, Some(e));
                        }
                        budget -= 1;
                        status.current_replicas = Some(status.current_replicas.unwrap_or(0) - 1);
                    }
                }
            }
            None => {
                for target in (0..replicas.len()).rev() {
                    if (target as i32) < update_min {
                        break;
                    }
                    let pod = &replicas[target];
                    if pod_revision(pod) != upd_name && !podutil::is_terminating(pod) {
                        let err = self.delete_pod(set, pod).await.err();
                        status.current_replicas = Some(status.current_replicas.unwrap_or(0) - 1);
                        return (status, err);
                    }
                    if is_unavailable(pod, min_ready, now) {
                        return (status, None);
                    }
                }
            }
        }
        (status, None)
    }

    /// Runs `f` for `0..n`: in order, stopping at the first that asks to (OrderedReady),
    /// or all at once in slow-start batches (Parallel). `Ok(true)`: stop this sync here.
    async fn run_for_all<'a, F, Fut>(&'a self, n: usize, monotonic: bool, f: F) -> Result<bool, Error>
    where
        F: Fn(usize) -> Fut,
        Fut: std::future::Future<Output = Result<bool, Error>> + 'a,
    {
        if monotonic {
            for i in 0..n {
                if f(i).await? {
                    return Ok(true);
                }
            }
            return Ok(false);
        }
        let (_, err) = slow_start_batch(n, 1, |i| {
            let fut = f(i);
            async move { fut.await.map(drop) }
        })
        .await;
        match err {
            Some(e) => Err(e),
            None => Ok(false),
        }
    }

    /// Upstream's `processReplica`; `Ok(true)` stops an ordered sync here.
    async fn process_replica(
        &self,
        set: &StatefulSet,
        update_set: &StatefulSet,
        monotonic: bool,
        pod: &Arc<Pod>,
    ) -> Result<bool, Error> {
        let min_ready = utils::min_ready(set);
        // Failed or Succeeded (an evicted pod ends either way): replaced once gone.
        if matches!(podutil::phase(pod), "Failed" | "Succeeded") {
            if !podutil::is_terminating(pod) {
                self.delete_pod(set, pod).await?;
            }
            return Ok(true);
        }
        if !is_created(pod) {
            if self.claim_is_stale(set, pod) {
                // A claim still owned by a previous pod of this ordinal: the garbage
                // collector removes it first.
                return Ok(true);
            }
            self.create_pod(set, pod).await?;
            if monotonic {
                return Ok(true);
            }
        }
        if podutil::phase(pod) == "Pending" {
            self.create_claims(set, pod).await?;
            self.update_claims_for_retention(set, pod).await?;
        }
        if monotonic
            && (podutil::is_terminating(pod)
                || !is_running_and_ready(pod)
                || !utils::is_available(pod, min_ready, Timestamp::now()))
        {
            return Ok(true);
        }
        let retention_ok = self.claims_match_retention(update_set, pod);
        if utils::identity_matches(set, pod) && utils::storage_matches(set, pod) && retention_ok {
            return Ok(false);
        }
        self.update_pod(update_set, pod).await?;
        Ok(false)
    }

    /// Upstream's `processCondemned`.
    async fn process_condemned(
        &self,
        set: &StatefulSet,
        first_unhealthy: Option<&str>,
        monotonic: bool,
        pod: &Arc<Pod>,
    ) -> Result<bool, Error> {
        if podutil::is_terminating(pod) {
            return Ok(monotonic);
        }
        let is_first_unhealthy = first_unhealthy == pod.metadata.name.as_deref();
        let healthy =
            is_running_and_ready(pod) && utils::is_available(pod, utils::min_ready(set), Timestamp::now());
        if monotonic && !healthy && !is_first_unhealthy {
            return Ok(true);
        }
        self.delete_pod(set, pod).await?;
        Ok(true)
    }

    fn event_pod(&self, set: &StatefulSet, verb: &str, pod: &Pod, err: Option<&Error>) {
        let (pod, set_name) = (name_of(&pod.metadata), name_of(&set.metadata));
        let title = format!("{}{}", verb[..1].to_uppercase(), &verb[1..]);
        match err {
            None => self.ctx.recorder.event(
                COMPONENT,
                set,
                Type::Normal,
                &format!("Successful{title}"),
                format!("{verb} Pod {pod} in StatefulSet {set_name} successful"),
            ),
            Some(e) => self.ctx.recorder.event(
                COMPONENT,
                set,
                Type::Warning,
                &format!("Failed{title}"),
                format!("{verb} Pod {pod} in StatefulSet {set_name} failed error: {e}"),
            ),
        }
    }

    fn event_claim(&self, set: &StatefulSet, pod: &Pod, claim: &str, err: Option<&Error>) {
        let (pod, set_name) = (name_of(&pod.metadata), name_of(&set.metadata));
        match err {
            None => self.ctx.recorder.event(
                COMPONENT,
                set,
                Type::Normal,
                "SuccessfulCreate",
                format!("create Claim {claim} Pod {pod} in StatefulSet {set_name} success"),
            ),
            Some(e) => self.ctx.recorder.event(
                COMPONENT,
                set,
                Type::Warning,
                "FailedCreate",
                format!("create Claim {claim} for Pod {pod} in StatefulSet {set_name} failed error: {e}"),
            ),
        }
    }

    async fn delete_pod(&self, set: &StatefulSet, pod: &Pod) -> Result<(), Error> {
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let result = match self.pod_api(ns).delete(&name_of(&pod.metadata), &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(err) if controller::api_code(&err) == Some(404) => Ok(()),
            Err(err) => Err(Error::Api(err)),
        };
        self.event_pod(set, "delete", pod, result.as_ref().err());
        result
    }

    /// Claims first, then the pod, then the claims' owners per the retention policy (now
    /// that the pod has a UID).
    async fn create_pod(&self, set: &StatefulSet, pod: &Pod) -> Result<(), Error> {
        if let Err(e) = self.create_claims(set, pod).await {
            self.event_pod(set, "create", pod, Some(&e));
            return Err(e);
        }
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let created = match self.pod_api(ns).create(&PostParams::default(), pod).await {
            Ok(p) => p,
            // Seen on the next sync through the informer.
            Err(err) if controller::api_code(&err) == Some(409) => return Err(Error::Api(err)),
            Err(err) if controller::is_namespace_terminating(&err) => return Ok(()),
            Err(err) => {
                let e = Error::Api(err);
                self.event_pod(set, "create", pod, Some(&e));
                return Err(e);
            }
        };
        if let Err(e) = self.update_claims_for_retention(set, &created).await {
            self.event_pod(set, "update", pod, Some(&e));
            return Err(e);
        }
        self.event_pod(set, "create", pod, None);
        Ok(())
    }

    fn claim_of(&self, ns: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims.get_namespaced(ns, name)
    }

    /// Creates the pod's missing claims; a claim being deleted is an error (the pod must
    /// not start on a volume about to vanish).
    async fn create_claims(&self, set: &StatefulSet, pod: &Pod) -> Result<(), Error> {
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let mut errors = Vec::new();
        for claim in utils::claims_for(set, ordinal(pod)).into_values() {
            let name = name_of(&claim.metadata);
            match self.claim_of(ns, &name) {
                Some(existing) if existing.metadata.deletion_timestamp.is_some() => {
                    errors.push(format!("pvc {name} is being deleted"));
                }
                Some(_) => {}
                None => match self.claim_api(ns).create(&PostParams::default(), &claim).await {
                    Ok(_) => self.event_claim(set, pod, &name, None),
                    // Made by an earlier sync the informer has not shown yet.
                    Err(err) if controller::api_code(&err) == Some(409) => {}
                    Err(err) => {
                        let e = Error::Other(format!("failed to create PVC {name}: {err}"));
                        self.event_claim(set, pod, &name, Some(&e));
                        errors.push(e.to_string());
                    }
                },
            }
        }
        if errors.is_empty() { Ok(()) } else { Err(Error::Other(errors.join("; "))) }
    }

    /// Whether a claim of this (not yet created) pod still belongs to a previous pod of the
    /// same ordinal, under a Delete-when-scaled policy (upstream `PodClaimIsStale`).
    fn claim_is_stale(&self, set: &StatefulSet, pod: &Pod) -> bool {
        if !utils::retention(set).delete_when_scaled {
            return false;
        }
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        utils::claims_for(set, ordinal(pod)).values().any(|c| {
            self.claim_of(ns, c.metadata.name.as_deref().unwrap_or_default())
                .is_some_and(|existing| utils::has_stale_pod_ref(&existing, pod))
        })
    }

    fn claims_match_retention(&self, set: &StatefulSet, pod: &Pod) -> bool {
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        utils::claims_for(set, ordinal(pod)).values().all(|c| {
            match self.claim_of(ns, c.metadata.name.as_deref().unwrap_or_default()) {
                Some(existing) => utils::claim_owner_up_to_date(&existing, set, pod),
                // Missing claims are created on a later pass.
                None => true,
            }
        })
    }

    /// Rewrites the owner references of the pod's claims to express the retention policy.
    async fn update_claims_for_retention(&self, set: &StatefulSet, pod: &Pod) -> Result<(), Error> {
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        for c in utils::claims_for(set, ordinal(pod)).into_values() {
            let name = name_of(&c.metadata);
            let Some(existing) = self.claim_of(ns, &name) else { continue };
            if utils::has_unexpected_controller(&existing, set, pod) {
                self.ctx.recorder.event(
                    COMPONENT,
                    set,
                    Type::Warning,
                    "ConflictingController",
                    format!(
                        "PersistentVolumeClaim {name} has a conflicting OwnerReference that acts as a manging controller, the retention policy is ignored for this claim"
                    ),
                );
            }
            if utils::claim_owner_up_to_date(&existing, set, pod) {
                continue;
            }
            let mut updated = (*existing).clone();
            utils::update_claim_owner_refs(&mut updated, set, pod);
            self.claim_api(ns).replace(&name, &PostParams::default(), &updated).await.map_err(|e| {
                Error::Other(format!("could not update claim {name} for delete policy ownerRefs: {e}"))
            })?;
        }
        Ok(())
    }

    /// Fixes a pod's identity, storage and claims' owners (upstream `UpdateStatefulPod`),
    /// retrying conflicts with the informer's newer copy.
    async fn update_pod(&self, set: &StatefulSet, pod: &Pod) -> Result<(), Error> {
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let mut pod = pod.clone();
        let mut attempted = false;
        let mut result = Ok(());
        for _ in 0..UPDATE_RETRIES {
            let mut consistent = true;
            if !utils::identity_matches(set, &pod) {
                utils::update_identity(set, &mut pod);
                consistent = false;
            }
            if !utils::storage_matches(set, &pod) {
                utils::update_storage(set, &mut pod);
                consistent = false;
                if let Err(e) = self.create_claims(set, &pod).await {
                    self.event_pod(set, "update", &pod, Some(&e));
                    return Err(e);
                }
            }
            if !self.claims_match_retention(set, &pod) {
                if let Err(e) = self.update_claims_for_retention(set, &pod).await {
                    self.event_pod(set, "update", &pod, Some(&e));
                    return Err(e);
                }
                consistent = false;
            }
            if consistent {
                return Ok(());
            }
            attempted = true;
            match self.pod_api(ns).replace(&name_of(&pod.metadata), &PostParams::default(), &pod).await {
                Ok(_) => {
                    result = Ok(());
                    break;
                }
                Err(err) if controller::api_code(&err) == Some(409) => {
                    if let Some(fresh) = self.pods.get_namespaced(ns, &name_of(&pod.metadata)) {
                        pod = (*fresh).clone();
                    }
                    result = Err(Error::Api(err));
                }
                Err(err) => {
                    result = Err(Error::Api(err));
                    break;
                }
            }
        }
        if attempted {
            self.event_pod(set, "update", &pod, result.as_ref().err());
        }
        result
    }

    /// Completes a finished rollout in the status and writes it when it changed,
    /// retrying conflicts with the informer's newer copy.
    async fn write_status(&self, set: &StatefulSet, mut status: StatefulSetStatus) -> Result<(), Error> {
        utils::complete_rolling_update(set, &mut status);
        if !utils::inconsistent(&set.status.clone().unwrap_or_default(), &status) {
            return Ok(());
        }
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let name = name_of(&set.metadata);
        let mut current = set.clone();
        let mut last = None;
        for _ in 0..UPDATE_RETRIES {
            current.status = Some(status.clone());
            match self.set_api(ns).replace_status(&name, &PostParams::default(), &current).await {
                Ok(_) => return Ok(()),
                Err(err) if controller::api_code(&err) == Some(409) => {
                    current = match self.set_api(ns).get_opt(&name).await? {
                        Some(fresh) => fresh,
                        None => return Ok(()),
                    };
                    last = Some(err);
                }
                Err(err) => return Err(Error::Api(err)),
            }
        }
        Err(last.map(Error::Api).unwrap_or_else(|| Error::Other("status update conflicts".into())))
    }

    /// Deletes the oldest revisions beyond `revisionHistoryLimit` that neither the status
    /// nor any pod uses (upstream `truncateHistory`).
    async fn truncate_history(
        &self,
        set: &StatefulSet,
        pods: &[Arc<Pod>],
        revisions: &[ControllerRevision],
        revs: &Revisions,
    ) -> Result<(), Error> {
        let mut live: std::collections::HashSet<String> =
            pods.iter().map(|p| pod_revision(p).to_owned()).collect();
        live.insert(name_of(&revs.current.metadata));
        live.insert(name_of(&revs.update.metadata));
        let old: Vec<&ControllerRevision> =
            revisions.iter().filter(|r| !live.contains(&name_of(&r.metadata))).collect();
        let limit = set.spec.as_ref().and_then(|s| s.revision_history_limit).unwrap_or(10);
        if limit < 0 || old.len() <= limit as usize {
            return Ok(());
        }
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        for rev in &old[..old.len() - limit as usize] {
            match self.rev_api(ns).delete(&name_of(&rev.metadata), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(err) if controller::api_code(&err) == Some(404) => {}
                Err(err) => return Err(Error::Api(err)),
            }
        }
        Ok(())
    }
}
