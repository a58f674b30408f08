//! The Deployment controller (upstream `pkg/controller/deployment`): rolls a Deployment's
//! pod template out through ReplicaSets — one new ReplicaSet per template, old ones
//! scaled down by the Recreate or RollingUpdate strategy — and reports progress in status.

pub(crate) mod util;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};

use component_base::labels::Selector;

use crate::controller::{self, Context, Error};
use crate::controllers::replicaset::claim;
use crate::events::Type;
use crate::informers::{Event, Informer, key_of, split_key};
use crate::owners;
use crate::podutil;
use crate::workqueue::Queue;

use util::{
    FAILED_RS_CREATE_REASON, FOUND_NEW_RS_REASON, NEW_RS_AVAILABLE_REASON, NEW_RS_REASON, PAUSED_REASON,
    POD_TEMPLATE_HASH, PROGRESSING, REPLICA_FAILURE, RESUMED_REASON, REVISION, RS_UPDATED_REASON,
    TIMED_OUT_REASON, replicas, rs_replicas,
};

const COMPONENT: &str = "deployment-controller";

struct Controller {
    client: kube::Client,
    ctx: Context,
    deployments: Arc<Informer<Deployment>>,
    rss: Arc<Informer<ReplicaSet>>,
    pods: Arc<Informer<Pod>>,
    queue: Arc<Queue>,
}

pub fn start(ctx: &Context) -> Result<(), Error> {
    let deployments = ctx.informers.get::<Deployment>();
    let rss = ctx.informers.get::<ReplicaSet>();
    let pods = ctx.informers.get::<Pod>();
    let queue = ctx.queue("deployment");
    {
        let queue = queue.clone();
        deployments.add_handler(move |ev| match ev {
            Event::Add(d) | Event::Update(_, d) | Event::Delete(d) => queue.add(key_of(&***d)),
        });
    }
    {
        let (queue, ds) = (queue.clone(), deployments.clone());
        rss.add_handler(move |ev| rs_event(&ds, &queue, ev));
    }
    {
        let (queue, ds, rss) = (queue.clone(), deployments.clone(), rss.clone());
        pods.add_handler(move |ev| {
            // A Recreate rollout waits for the old pods to be gone; their deletion is
            // what lets it continue.
            if let Event::Delete(pod) = ev
                && let Some(d) = deployment_of_pod(&ds, &rss, pod)
                && util::is_recreate(&d)
            {
                queue.add(key_of(&*d));
            }
        });
    }
    let ctrl = Arc::new(Controller {
        client: ctx.client.clone(),
        ctx: ctx.clone(),
        deployments,
        rss,
        pods,
        queue: queue.clone(),
    });
    controller::run_workers(ctx, queue, ctx.options.concurrent_deployment_syncs, move |key| {
        let ctrl = ctrl.clone();
        async move { ctrl.sync(&key).await }
    });
    Ok(())
}

fn resolve_deployment(ds: &Informer<Deployment>, ns: &str, meta: &ObjectMeta) -> Option<Arc<Deployment>> {
    let r = owners::controller_of(meta).filter(|r| r.kind == "Deployment")?;
    let d = ds.get_namespaced(ns, &r.name)?;
    (d.metadata.uid.as_deref() == Some(r.uid.as_str())).then_some(d)
}

fn deployment_of_pod(
    ds: &Informer<Deployment>,
    rss: &Informer<ReplicaSet>,
    pod: &Pod,
) -> Option<Arc<Deployment>> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let r = owners::controller_of(&pod.metadata).filter(|r| r.kind == "ReplicaSet")?;
    let rs =
        rss.get_namespaced(ns, &r.name).filter(|rs| rs.metadata.uid.as_deref() == Some(r.uid.as_str()))?;
    resolve_deployment(ds, ns, &rs.metadata)
}

/// A Deployment's selector; an empty one selects nothing here (sync reports it).
fn selector_of(d: &Deployment) -> Selector {
    let parsed = Selector::from_label_selector(d.spec.as_ref().map(|s| &s.selector));
    if parsed.is_empty() { Selector::nothing() } else { parsed }
}

/// Deployments of the namespace that would adopt this orphan ReplicaSet.
fn matching_deployments(ds: &Informer<Deployment>, rs: &ReplicaSet) -> Vec<Arc<Deployment>> {
    let ns = rs.metadata.namespace.as_deref().unwrap_or_default();
    let labels = rs.metadata.labels.clone().unwrap_or_default();
    ds.list_namespace(ns).into_iter().filter(|d| selector_of(d).matches(&labels)).collect()
}

fn rs_event(ds: &Informer<Deployment>, queue: &Queue, ev: &Event<'_, ReplicaSet>) {
    let enqueue_owner = |rs: &ReplicaSet| {
        let ns = rs.metadata.namespace.as_deref().unwrap_or_default();
        if let Some(d) = resolve_deployment(ds, ns, &rs.metadata) {
            queue.add(key_of(&*d));
        }
    };
    match ev {
        Event::Add(rs) => {
            if rs.metadata.deletion_timestamp.is_some() || owners::controller_of(&rs.metadata).is_some() {
                return enqueue_owner(rs);
            }
            for d in matching_deployments(ds, rs) {
                queue.add(key_of(&*d));
            }
        }
        Event::Update(old, new) => {
            if old.metadata.resource_version == new.metadata.resource_version {
                return;
            }
            let (old_ref, new_ref) =
                (owners::controller_of(&old.metadata), owners::controller_of(&new.metadata));
            let ref_changed = old_ref != new_ref;
            if ref_changed && old_ref.is_some() {
                enqueue_owner(old);
            }
            if new_ref.is_some() {
                return enqueue_owner(new);
            }
            if ref_changed || old.metadata.labels != new.metadata.labels {
                for d in matching_deployments(ds, new) {
                    queue.add(key_of(&*d));
                }
            }
        }
        Event::Delete(rs) => enqueue_owner(rs),
    }
}

/// The deployment's ReplicaSets in one sync: the one running its template, if any, and
/// the others. Kept current with every write so later steps act on what was written.
struct Sets {
    new: Option<ReplicaSet>,
    old: Vec<ReplicaSet>,
}

impl Sets {
    fn all(&self) -> Vec<&ReplicaSet> {
        self.old.iter().chain(self.new.as_ref()).collect()
    }

    fn get_mut(&mut self, uid: &Option<String>) -> Option<&mut ReplicaSet> {
        if self.new.as_ref().is_some_and(|n| &n.metadata.uid == uid) {
            return self.new.as_mut();
        }
        self.old.iter_mut().find(|rs| &rs.metadata.uid == uid)
    }
}

fn name_of(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

impl Controller {
    fn rs_api(&self, ns: &str) -> Api<ReplicaSet> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn d_api(&self, ns: &str) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), ns)
    }

    async fn sync(&self, key: &str) -> Result<(), Error> {
        let (ns, _) = split_key(key);
        let Some(d) = self.deployments.get(key) else { return Ok(()) };
        let mut d = (*d).clone();
        let selector = selector_of(&d);
        if selector.is_empty() || d.spec.is_none() {
            return self.selecting_all(&mut d).await;
        }
        let candidates = self.rss.list_namespace(ns);
        let owned = claim(&self.rs_api(ns), &self.d_api(ns), &d, &selector, candidates).await?;
        let rs_list: Vec<ReplicaSet> = owned.iter().map(|rs| (**rs).clone()).collect();

        if d.metadata.deletion_timestamp.is_some() {
            let sets = self.get_all_and_sync_revision(&mut d, &rs_list, false).await?;
            return self.sync_status(&mut d, &sets).await;
        }
        self.check_paused_conditions(&mut d).await?;
        if d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false) {
            return self.sync_scale(&mut d, &rs_list).await;
        }
        if util::is_scaling_event(&d, &rs_list) {
            return self.sync_scale(&mut d, &rs_list).await;
        }
        if util::is_recreate(&d) {
            self.rollout_recreate(&mut d, &rs_list).await
        } else {
            self.rollout_rolling(&mut d, &rs_list).await
        }
    }

    /// Upstream refuses a selector that selects everything, saying so once per generation.
    async fn selecting_all(&self, d: &mut Deployment) -> Result<(), Error> {
        self.ctx.recorder.event(
            COMPONENT,
            d,
            Type::Warning,
            "SelectingAll",
            "This deployment is selecting all pods. A non-empty selector is required.".into(),
        );
        let mut status = d.status.clone().unwrap_or_default();
        if status.observed_generation.unwrap_or(0) < d.metadata.generation.unwrap_or(0) {
            status.observed_generation = d.metadata.generation;
            self.write_status(d, status).await?;
        }
        Ok(())
    }

    async fn write_status(&self, d: &mut Deployment, status: DeploymentStatus) -> Result<(), Error> {
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        d.status = Some(status);
        let updated =
            self.d_api(&ns).replace_status(&name_of(&d.metadata), &PostParams::default(), d).await?;
        *d = updated;
        Ok(())
    }

    /// Records the new ReplicaSet's revision on the Deployment (`kubectl describe`,
    /// `rollout status --revision`) with a status update, as upstream: the deployment
    /// status strategy keeps the writer's annotations, and the controller's role may
    /// update `deployments/status` but not patch deployments.
    async fn set_deployment_revision(&self, d: &mut Deployment, revision: &str) -> Result<(), Error> {
        if d.metadata.annotations.as_ref().and_then(|a| a.get(REVISION)).map(String::as_str) == Some(revision)
        {
            return Ok(());
        }
        d.metadata.annotations.get_or_insert_default().insert(REVISION.to_string(), revision.to_string());
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        *d = self.d_api(&ns).replace_status(&name_of(&d.metadata), &PostParams::default(), d).await?;
        Ok(())
    }

    async fn check_paused_conditions(&self, d: &mut Deployment) -> Result<(), Error> {
        if util::progress_deadline(d).is_none() {
            return Ok(());
        }
        let mut status = d.status.clone().unwrap_or_default();
        let reason = util::get_condition(&status, PROGRESSING).and_then(|c| c.reason.clone());
        if reason.as_deref() == Some(TIMED_OUT_REASON) {
            // A reported lack of progress is not hidden behind a pause.
            return Ok(());
        }
        let paused_cond = reason.as_deref() == Some(PAUSED_REASON);
        let paused = d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
        let now = util::now();
        let cond = if paused && !paused_cond {
            util::new_condition(PROGRESSING, "Unknown", PAUSED_REASON, "Deployment is paused".into(), now)
        } else if !paused && paused_cond {
            util::new_condition(PROGRESSING, "Unknown", RESUMED_REASON, "Deployment is resumed".into(), now)
        } else {
            return Ok(());
        };
        util::set_condition(&mut status, cond);
        self.write_status(d, status).await
    }

    /// Upstream's `getAllReplicaSetsAndSyncRevision`: finds (or, if `create`, creates) the
    /// new ReplicaSet and brings its revision and annotations up to date.
    async fn get_all_and_sync_revision(
        &self,
        d: &mut Deployment,
        rs_list: &[ReplicaSet],
        create: bool,
    ) -> Result<Sets, Error> {
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let existing = util::find_new(d, rs_list).cloned();
        let old: Vec<ReplicaSet> = rs_list
            .iter()
            .filter(|rs| existing.as_ref().is_none_or(|n| n.metadata.uid != rs.metadata.uid))
            .cloned()
            .collect();
        let new_revision = util::max_revision(&old) + 1;
        let min_ready = d.spec.as_ref().and_then(|s| s.min_ready_seconds);
        if let Some(existing) = existing {
            let mut copy = existing.clone();
            let annotations_changed = util::set_new_rs_annotations(d, &mut copy, new_revision, true);
            let spec = copy.spec.get_or_insert_with(ReplicaSetSpec::default);
            if annotations_changed || spec.min_ready_seconds != min_ready {
                spec.min_ready_seconds = min_ready;
                let updated =
                    self.rs_api(&ns).replace(&name_of(&copy.metadata), &PostParams::default(), &copy).await?;
                return Ok(Sets { new: Some(updated), old });
            }
            let revision = util::revision(&copy).to_string();
            self.set_deployment_revision(d, &revision).await?;
            let mut status = d.status.clone().unwrap_or_default();
            if util::progress_deadline(d).is_some() && util::get_condition(&status, PROGRESSING).is_none() {
                let msg = format!("Found new replica set {:?}", name_of(&copy.metadata));
                util::set_condition(
                    &mut status,
                    util::new_condition(PROGRESSING, "True", FOUND_NEW_RS_REASON, msg, util::now()),
                );
                self.write_status(d, status).await?;
            }
            return Ok(Sets { new: Some(copy), old });
        }
        if !create {
            return Ok(Sets { new: None, old });
        }
        let new_rs = self.create_new_rs(d, &old, new_revision).await?;
        Ok(Sets { new: Some(new_rs), old })
    }

    async fn create_new_rs(
        &self,
        d: &mut Deployment,
        old: &[ReplicaSet],
        new_revision: i64,
    ) -> Result<ReplicaSet, Error> {
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let spec = d.spec.clone().unwrap_or_default();
        let collision_count = d.status.as_ref().and_then(|s| s.collision_count);
        let mut template = spec.template.clone();
        let hash = util::compute_hash(&template, collision_count);
        let labels = {
            let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
            let labels = meta.labels.get_or_insert_with(Default::default);
            labels.insert(POD_TEMPLATE_HASH.into(), hash.clone());
            labels.clone()
        };
        let mut selector = spec.selector.clone();
        selector
            .match_labels
            .get_or_insert_with(Default::default)
            .insert(POD_TEMPLATE_HASH.into(), hash.clone());
        let name = format!("{}-{hash}", name_of(&d.metadata));
        let mut new_rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns.clone()),
                owner_references: Some(vec![owners::controller_ref(&*d)]),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds: spec.min_ready_seconds,
                selector,
                template: Some(template),
            }),
            status: None,
        };
        let all: Vec<&ReplicaSet> = old.iter().chain(std::iter::once(&new_rs)).collect();
        let new_count = util::new_rs_new_replicas(d, &all, &new_rs);
        if let Some(s) = new_rs.spec.as_mut() {
            s.replicas = Some(new_count);
        }
        util::set_new_rs_annotations(d, &mut new_rs, new_revision, false);

        let api = self.rs_api(&ns);
        let (created, already_existed) = match api.create(&PostParams::default(), &new_rs).await {
            Ok(rs) => (rs, false),
            Err(err) if controller::api_code(&err) == Some(409) => {
                let found = match self.rss.get_namespaced(&ns, &name) {
                    Some(rs) => (*rs).clone(),
                    None => api.get(&name).await?,
                };
                let ours = d
                    .metadata
                    .uid
                    .as_deref()
                    .is_some_and(|uid| owners::is_controlled_by(&found.metadata, uid));
                let same = found
                    .spec
                    .as_ref()
                    .and_then(|s| s.template.as_ref())
                    .is_some_and(|t| util::equal_ignore_hash(&spec.template, t));
                if !(ours && same) {
                    // A different template hashed to the same name: a new collision
                    // count gives the next attempt a new name.
                    let mut status = d.status.clone().unwrap_or_default();
                    status.collision_count = Some(status.collision_count.unwrap_or(0) + 1);
                    self.write_status(d, status).await?;
                    return Err(Error::Api(err));
                }
                (found, true)
            }
            Err(err) if crate::controller::is_namespace_terminating(&err) => return Err(Error::Api(err)),
            Err(err) => {
                let msg = format!("Failed to create new replica set {name:?}: {err}");
                if util::progress_deadline(d).is_some() {
                    let mut status = d.status.clone().unwrap_or_default();
                    util::set_condition(
                        &mut status,
                        util::new_condition(
                            PROGRESSING,
                            "False",
                            FAILED_RS_CREATE_REASON,
                            msg.clone(),
                            util::now(),
                        ),
                    );
                    // The create error is the one to report.
                    let _ = self.write_status(d, status).await;
                }
                self.ctx.recorder.event(COMPONENT, d, Type::Warning, FAILED_RS_CREATE_REASON, msg);
                return Err(Error::Api(err));
            }
        };
        if !already_existed && new_count > 0 {
            self.ctx.recorder.event(
                COMPONENT,
                d,
                Type::Normal,
                "ScalingReplicaSet",
                format!("Scaled up replica set {name} from 0 to {new_count}"),
            );
        }
        self.set_deployment_revision(d, &new_revision.to_string()).await?;
        if !already_existed && util::progress_deadline(d).is_some() {
            let mut status = d.status.clone().unwrap_or_default();
            let msg = format!("Created new replica set {name:?}");
            util::set_condition(
                &mut status,
                util::new_condition(PROGRESSING, "True", NEW_RS_REASON, msg, util::now()),
            );
            self.write_status(d, status).await?;
        }
        Ok(created)
    }

    /// Sets a ReplicaSet's size (and the replica annotations proportional scaling reads);
    /// whether it wrote anything.
    async fn scale_rs(
        &self,
        d: &Deployment,
        rs: &mut ReplicaSet,
        size: i32,
        op: &str,
    ) -> Result<bool, Error> {
        let from = rs_replicas(rs);
        let mut copy = rs.clone();
        let annotations_changed =
            util::set_replicas_annotations(&mut copy, replicas(d), replicas(d) + util::max_surge(d));
        if from == size && !annotations_changed {
            return Ok(false);
        }
        copy.spec.get_or_insert_with(ReplicaSetSpec::default).replicas = Some(size);
        let ns = rs.metadata.namespace.clone().unwrap_or_default();
        let name = name_of(&rs.metadata);
        *rs = self.rs_api(&ns).replace(&name, &PostParams::default(), &copy).await?;
        if from != size {
            self.ctx.recorder.event(
                COMPONENT,
                d,
                Type::Normal,
                "ScalingReplicaSet",
                format!("Scaled {op} replica set {name} from {from} to {size}"),
            );
        }
        Ok(true)
    }

    /// Upstream's `scaleReplicaSetAndRecordEvent`: nothing when the size is right.
    async fn scale_to(&self, d: &Deployment, rs: &mut ReplicaSet, size: i32) -> Result<bool, Error> {
        let from = rs_replicas(rs);
        if from == size {
            return Ok(false);
        }
        let op = if from < size { "up" } else { "down" };
        self.scale_rs(d, rs, size, op).await
    }

    /// A scale or a paused deployment: resize without rolling out (upstream's `sync`).
    async fn sync_scale(&self, d: &mut Deployment, rs_list: &[ReplicaSet]) -> Result<(), Error> {
        let mut sets = self.get_all_and_sync_revision(d, rs_list, false).await?;
        self.scale(d, &mut sets).await?;
        if d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false) {
            self.cleanup(d, &sets).await?;
        }
        self.sync_status(d, &sets).await
    }

    async fn scale(&self, d: &Deployment, sets: &mut Sets) -> Result<(), Error> {
        let old_refs: Vec<&ReplicaSet> = sets.old.iter().collect();
        if let Some(target) = util::find_active_or_latest(sets.new.as_ref(), &old_refs) {
            if rs_replicas(target) == replicas(d) {
                return Ok(());
            }
            let uid = target.metadata.uid.clone();
            if let Some(rs) = sets.get_mut(&uid) {
                self.scale_to(d, rs, replicas(d)).await?;
            }
            return Ok(());
        }
        if util::is_saturated(d, sets.new.as_ref()) {
            for rs in sets.old.iter_mut().filter(|rs| rs_replicas(rs) > 0) {
                self.scale_to(d, rs, 0).await?;
            }
            return Ok(());
        }
        if util::is_rolling_update(d) {
            let active: Vec<&ReplicaSet> = sets.all().into_iter().filter(|rs| rs_replicas(rs) > 0).collect();
            let plan: Vec<(Option<String>, i32, &str)> = util::proportional_scale(d, &active)
                .into_iter()
                .map(|(i, size, op)| (active[i].metadata.uid.clone(), size, op))
                .collect();
            for (uid, size, op) in plan {
                if let Some(rs) = sets.get_mut(&uid) {
                    self.scale_rs(d, rs, size, op).await?;
                }
            }
        }
        Ok(())
    }

    async fn rollout_rolling(&self, d: &mut Deployment, rs_list: &[ReplicaSet]) -> Result<(), Error> {
        let mut sets = self.get_all_and_sync_revision(d, rs_list, true).await?;
        if self.reconcile_new(d, &mut sets).await? {
            return self.sync_rollout_status(d, &sets).await;
        }
        if self.reconcile_old(d, &mut sets).await? {
            return self.sync_rollout_status(d, &sets).await;
        }
        if util::is_complete(d, &d.status.clone().unwrap_or_default()) {
            self.cleanup(d, &sets).await?;
        }
        self.sync_rollout_status(d, &sets).await
    }

    async fn reconcile_new(&self, d: &Deployment, sets: &mut Sets) -> Result<bool, Error> {
        let all: Vec<ReplicaSet> = sets.all().into_iter().cloned().collect();
        let Some(new_rs) = sets.new.as_mut() else { return Ok(false) };
        let want = replicas(d);
        let have = rs_replicas(new_rs);
        if have == want {
            return Ok(false);
        }
        if have > want {
            return self.scale_to(d, new_rs, want).await;
        }
        let all_refs: Vec<&ReplicaSet> = all.iter().collect();
        let size = util::new_rs_new_replicas(d, &all_refs, new_rs);
        self.scale_to(d, new_rs, size).await
    }

    async fn reconcile_old(&self, d: &Deployment, sets: &mut Sets) -> Result<bool, Error> {
        let Some(new_rs) = sets.new.clone() else { return Ok(false) };
        let mut active: Vec<ReplicaSet> = sets.old.iter().filter(|rs| rs_replicas(rs) > 0).cloned().collect();
        if active.is_empty() {
            return Ok(false);
        }
        let all = sets.all();
        let max_down = util::max_scaled_down(d, &all, &new_rs);
        if max_down <= 0 {
            return Ok(false);
        }
        let mut total = 0;
        // Unhealthy old pods first: removing them costs no availability.
        for (i, size) in util::plan_cleanup_unhealthy(&active, max_down) {
            let from = rs_replicas(&active[i]);
            self.scale_to(d, &mut active[i], size).await?;
            total += from - size;
        }
        let available: i32 = active.iter().chain(std::iter::once(&new_rs)).map(util::rs_available).sum();
        for (i, size) in util::plan_scale_down_old(d, &active, available) {
            let from = rs_replicas(&active[i]);
            self.scale_to(d, &mut active[i], size).await?;
            total += from - size;
        }
        for rs in active {
            if let Some(slot) = sets.get_mut(&rs.metadata.uid.clone()) {
                *slot = rs;
            }
        }
        Ok(total > 0)
    }

    async fn rollout_recreate(&self, d: &mut Deployment, rs_list: &[ReplicaSet]) -> Result<(), Error> {
        let mut sets = self.get_all_and_sync_revision(d, rs_list, false).await?;
        let mut scaled_down = false;
        for rs in sets.old.iter_mut().filter(|rs| rs_replicas(rs) > 0) {
            scaled_down |= self.scale_to(d, rs, 0).await?;
        }
        if scaled_down || self.old_pods_running(&sets) {
            return self.sync_rollout_status(d, &sets).await;
        }
        if sets.new.is_none() {
            sets = self.get_all_and_sync_revision(d, rs_list, true).await?;
        }
        if let Some(new_rs) = sets.new.as_mut() {
            self.scale_to(d, new_rs, replicas(d)).await?;
        }
        if util::is_complete(d, &d.status.clone().unwrap_or_default()) {
            self.cleanup(d, &sets).await?;
        }
        self.sync_rollout_status(d, &sets).await
    }

    /// Whether an old ReplicaSet still has pods that are not finished: Recreate starts the
    /// new pods only when none of the old may still be running.
    fn old_pods_running(&self, sets: &Sets) -> bool {
        if sets.old.iter().map(util::rs_actual).sum::<i32>() > 0 {
            return true;
        }
        let old_uids: Vec<&str> = sets.old.iter().filter_map(|rs| rs.metadata.uid.as_deref()).collect();
        let ns = sets.old.first().and_then(|rs| rs.metadata.namespace.as_deref()).unwrap_or_default();
        if old_uids.is_empty() {
            return false;
        }
        self.pods.list_namespace(ns).iter().any(|p| {
            owners::controller_of(&p.metadata).is_some_and(|r| old_uids.contains(&r.uid.as_str()))
                && !podutil::is_terminal(p)
        })
    }

    /// Deletes old ReplicaSets beyond `revisionHistoryLimit` (default 10).
    async fn cleanup(&self, d: &Deployment, sets: &Sets) -> Result<(), Error> {
        let limit = d.spec.as_ref().and_then(|s| s.revision_history_limit).unwrap_or(10);
        if limit == i32::MAX {
            return Ok(());
        }
        let old: Vec<&ReplicaSet> = sets.old.iter().collect();
        for rs in util::cleanup_candidates(&old, limit) {
            let ns = rs.metadata.namespace.clone().unwrap_or_default();
            match self.rs_api(&ns).delete(&name_of(&rs.metadata), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(err) if controller::api_code(&err) == Some(404) => {}
                Err(err) => return Err(Error::Api(err)),
            }
        }
        Ok(())
    }

    async fn sync_status(&self, d: &mut Deployment, sets: &Sets) -> Result<(), Error> {
        let status = util::calculate_status(d, &sets.all(), sets.new.as_ref(), util::now());
        if util::status_equal(&d.status.clone().unwrap_or_default(), &status) {
            return Ok(());
        }
        self.write_status(d, status).await
    }

    /// Upstream's `syncRolloutStatus`: the status plus the Progressing condition.
    async fn sync_rollout_status(&self, d: &mut Deployment, sets: &Sets) -> Result<(), Error> {
        let now = util::now();
        let all = sets.all();
        let new_rs = sets.new.as_ref();
        let mut status = util::calculate_status(d, &all, new_rs, now);
        let deadline = util::progress_deadline(d);
        if deadline.is_none() {
            util::remove_condition(&mut status, PROGRESSING);
        }
        let old_status = d.status.clone().unwrap_or_default();
        let current = util::get_condition(&old_status, PROGRESSING).cloned();
        let complete_already = util::st_eq(status.replicas, status.updated_replicas)
            && current.as_ref().is_some_and(|c| c.reason.as_deref() == Some(NEW_RS_AVAILABLE_REASON));
        if deadline.is_some() && !complete_already {
            let subject = |what: &str| match new_rs {
                Some(rs) => format!("ReplicaSet {:?} {what}", name_of(&rs.metadata)),
                None => format!("Deployment {:?} {what}", name_of(&d.metadata)),
            };
            if util::is_complete(d, &status) {
                let cond = util::new_condition(
                    PROGRESSING,
                    "True",
                    NEW_RS_AVAILABLE_REASON,
                    subject("has successfully progressed."),
                    now,
                );
                util::set_condition(&mut status, cond);
            } else if util::is_progressing(d, &status) {
                let mut cond = util::new_condition(
                    PROGRESSING,
                    "True",
                    RS_UPDATED_REASON,
                    subject("is progressing."),
                    now,
                );
                // Progress refreshes lastUpdateTime even under the same reason.
                if let Some(cur) = &current {
                    if cur.status == "True" {
                        cond.last_transition_time = cur.last_transition_time.clone();
                    }
                    util::remove_condition(&mut status, PROGRESSING);
                }
                util::set_condition(&mut status, cond);
            } else if util::is_timed_out(d, &status, now) {
                let cond = util::new_condition(
                    PROGRESSING,
                    "False",
                    TIMED_OUT_REASON,
                    subject("has timed out progressing."),
                    now,
                );
                util::set_condition(&mut status, cond);
            }
        }
        match util::replica_failure(&all, new_rs) {
            Some(cond) => util::set_condition(&mut status, cond),
            None => util::remove_condition(&mut status, REPLICA_FAILURE),
        }
        if util::status_equal(&old_status, &status) {
            self.requeue_stuck(d, &status, now);
            return Ok(());
        }
        self.write_status(d, status).await
    }

    /// Comes back when the progress deadline passes, to report it.
    fn requeue_stuck(&self, d: &Deployment, status: &DeploymentStatus, now: Timestamp) {
        let Some(deadline) = util::progress_deadline(d) else { return };
        let old_status = d.status.clone().unwrap_or_default();
        let Some(cur) = util::get_condition(&old_status, PROGRESSING) else { return };
        if util::is_complete(d, status) || cur.reason.as_deref() == Some(TIMED_OUT_REASON) {
            return;
        }
        let Some(last) = cur.last_update_time.as_ref() else { return };
        let due = last.0.as_second() + i64::from(deadline);
        let key = key_of(d);
        let after = due - now.as_second();
        if after < 1 {
            self.queue.add_rate_limited(key);
        } else {
            // One second past the deadline: the check is "deadline before now".
            self.queue.add_after(key, Duration::from_secs(after as u64 + 1));
        }
    }
}
