//! The DaemonSet controller (upstream `pkg/controller/daemon`): one pod per eligible node,
//! each pinned to its node by a required node affinity on `metadata.name` and placed by
//! the default scheduler (as upstream since 1.12); the template's history kept in
//! ControllerRevisions; RollingUpdate (maxUnavailable or maxSurge) and OnDelete updates;
//! and the counts `kubectl rollout status` reads.

mod update;
pub(crate) mod util;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::json;
use tokio::time::Instant;

use component_base::labels::Selector;

use crate::controller::{self, Context, Error};
use crate::controllers::deployment::util::compute_hash;
use crate::controllers::replicaset::{claim, pod_from_template, slow_start_batch};
use crate::events::Type;
use crate::expectations::Expectations;
use crate::history::{self, HASH_LABEL};
use crate::informers::{Event, Informer, key_of};
use crate::owners;
use crate::podutil;
use crate::workqueue::Queue;

use update::NodePods;
use util::Placement;

const COMPONENT: &str = "daemonset-controller";
/// Upstream's `BurstReplicas` for DaemonSets: creates or deletes per sync.
const BURST_REPLICAS: usize = 250;
/// The backoff before deleting a failed daemon pod again on the same node.
const FAILED_POD_BACKOFF: Duration = Duration::from_secs(1);
const FAILED_POD_BACKOFF_MAX: Duration = Duration::from_secs(15 * 60);

/// Per-(DaemonSet, node) backoff for failed pods (client-go's `flowcontrol.Backoff`): a
/// kubelet that keeps rejecting a pod must not make the controller spin.
#[derive(Default)]
struct Backoff {
    entries: Mutex<HashMap<String, (Duration, Instant)>>,
}

impl Backoff {
    /// Whether `key` is still backing off; the delay left if so.
    fn waiting(&self, key: &str, now: Instant) -> Option<Duration> {
        let entries = self.entries.lock();
        let (delay, at) = entries.get(key)?;
        let since = now.saturating_duration_since(*at);
        (since < *delay).then(|| *delay - since)
    }

    /// Records one more failure of `key`: the delay doubles, from 1 s to 15 min; an entry
    /// idle for twice the maximum starts over.
    fn next(&self, key: &str, now: Instant) {
        let mut entries = self.entries.lock();
        let e = entries.entry(key.to_owned()).or_insert((Duration::ZERO, now));
        let expired = now.saturating_duration_since(e.1) > 2 * FAILED_POD_BACKOFF_MAX;
        e.0 =
            if e.0.is_zero() || expired { FAILED_POD_BACKOFF } else { (e.0 * 2).min(FAILED_POD_BACKOFF_MAX) };
        e.1 = now;
    }

    fn gc(&self, now: Instant) {
        self.entries
            .lock()
            .retain(|_, (_, at)| now.saturating_duration_since(*at) <= 2 * FAILED_POD_BACKOFF_MAX);
    }
}

struct Controller {
    client: kube::Client,
    ctx: Context,
    dss: Arc<Informer<DaemonSet>>,
    pods: Arc<Informer<Pod>>,
    nodes: Arc<Informer<Node>>,
    revisions: Arc<Informer<ControllerRevision>>,
    queue: Arc<Queue>,
    expectations: Arc<Expectations>,
    backoff: Backoff,
}

pub fn start(ctx: &Context) -> Result<(), Error> {
    let dss = ctx.informers.get::<DaemonSet>();
    let pods = ctx.informers.get::<Pod>();
    let nodes = ctx.informers.get::<Node>();
    let revisions = ctx.informers.get::<ControllerRevision>();
    let queue = ctx.queue("daemonset");
    let expectations = Arc::new(Expectations::default());
    {
        let (queue, expectations) = (queue.clone(), expectations.clone());
        dss.add_handler(move |ev| match ev {
            Event::Add(ds) => queue.add(key_of(&***ds)),
            Event::Update(old, new) => {
                if old.metadata.uid != new.metadata.uid {
                    expectations.delete(&key_of(&***old));
                }
                queue.add(key_of(&***new));
            }
            Event::Delete(ds) => queue.add(key_of(&***ds)),
        });
    }
    {
        let (queue, expectations, dss) = (queue.clone(), expectations.clone(), dss.clone());
        pods.add_handler(move |ev| pod_event(&dss, &queue, &expectations, ev));
    }
    {
        let (queue, dss) = (queue.clone(), dss.clone());
        nodes.add_handler(move |ev| node_event(&dss, &queue, ev));
    }
    {
        let (queue, dss) = (queue.clone(), dss.clone());
        revisions.add_handler(move |ev| revision_event(&dss, &queue, ev));
    }
    let ctrl = Arc::new(Controller {
        client: ctx.client.clone(),
        ctx: ctx.clone(),
        dss,
        pods,
        nodes,
        revisions,
        queue: queue.clone(),
        expectations,
        backoff: Backoff::default(),
    });
    {
        let (ctrl, shutdown) = (ctrl.clone(), ctx.shutdown.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.wait() => return,
                    () = tokio::time::sleep(Duration::from_secs(60)) => ctrl.backoff.gc(Instant::now()),
                }
            }
        });
    }
    controller::run_workers(ctx, queue, ctx.options.concurrent_daemonset_syncs, move |key| {
        let ctrl = ctrl.clone();
        async move { ctrl.sync(&key).await }
    });
    Ok(())
}

/// A DaemonSet's selector; an empty one selects nothing (sync reports it).
fn selector_of(ds: &DaemonSet) -> Selector {
    let parsed = Selector::from_label_selector(ds.spec.as_ref().map(|s| &s.selector));
    if parsed.is_empty() { Selector::nothing() } else { parsed }
}

fn resolve(dss: &Informer<DaemonSet>, ns: &str, r: &OwnerReference) -> Option<Arc<DaemonSet>> {
    if r.kind != "DaemonSet" {
        return None;
    }
    let ds = dss.get_namespaced(ns, &r.name)?;
    (ds.metadata.uid.as_deref() == Some(r.uid.as_str())).then_some(ds)
}

/// The DaemonSets of `meta`'s namespace whose selector matches it (adoption candidates).
fn matching(dss: &Informer<DaemonSet>, meta: &ObjectMeta) -> Vec<Arc<DaemonSet>> {
    let ns = meta.namespace.as_deref().unwrap_or_default();
    let labels = meta.labels.clone().unwrap_or_default();
    dss.list_namespace(ns).into_iter().filter(|ds| selector_of(ds).matches(&labels)).collect()
}

fn min_ready(ds: &DaemonSet) -> Duration {
    Duration::from_secs(ds.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0).max(0) as u64)
}

fn pod_event(dss: &Informer<DaemonSet>, queue: &Arc<Queue>, exp: &Expectations, ev: &Event<'_, Pod>) {
    let deleted = |pod: &Pod| {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        if let Some(ds) = owners::controller_of(&pod.metadata).and_then(|r| resolve(dss, ns, r)) {
            let key = key_of(&*ds);
            exp.deletion_observed(&key, &key_of(pod));
            queue.add(key);
        }
    };
    match ev {
        Event::Add(pod) => {
            if pod.metadata.deletion_timestamp.is_some() {
                return deleted(pod);
            }
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            if let Some(r) = owners::controller_of(&pod.metadata) {
                if let Some(ds) = resolve(dss, ns, r) {
                    let key = key_of(&*ds);
                    exp.creation_observed(&key);
                    queue.add(key);
                }
                return;
            }
            for ds in matching(dss, &pod.metadata) {
                queue.add(key_of(&*ds));
            }
        }
        Event::Update(old, new) => {
            if old.metadata.resource_version == new.metadata.resource_version {
                return;
            }
            if new.metadata.deletion_timestamp.is_some() {
                return deleted(new);
            }
            let ns = new.metadata.namespace.as_deref().unwrap_or_default();
            let (old_ref, new_ref) =
                (owners::controller_of(&old.metadata), owners::controller_of(&new.metadata));
            let ref_changed = old_ref != new_ref;
            if ref_changed && let Some(ds) = old_ref.and_then(|r| resolve(dss, ns, r)) {
                queue.add(key_of(&*ds));
            }
            if let Some(r) = new_ref {
                if let Some(ds) = resolve(dss, ns, r) {
                    let key = key_of(&*ds);
                    queue.add(key.clone());
                    // Availability comes with time after readiness: look again then.
                    let wait = min_ready(&ds);
                    if !wait.is_zero() && !podutil::is_ready(old) && podutil::is_ready(new) {
                        queue.add_after(key, wait + Duration::from_secs(1));
                    }
                }
                return;
            }
            if ref_changed || old.metadata.labels != new.metadata.labels {
                for ds in matching(dss, &new.metadata) {
                    queue.add(key_of(&*ds));
                }
            }
        }
        Event::Delete(pod) => deleted(pod),
    }
}

/// The parts of a Node that decide where daemons run: labels, taints, the cordon and
/// condition statuses (heartbeats alone change nothing).
fn placement_changed(old: &Node, new: &Node) -> bool {
    let conditions = |n: &Node| -> Vec<(String, String)> {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .map(|c| c.iter().map(|c| (c.type_.clone(), c.status.clone())).collect())
            .unwrap_or_default()
    };
    old.metadata.labels != new.metadata.labels || old.spec != new.spec || conditions(old) != conditions(new)
}

fn node_event(dss: &Informer<DaemonSet>, queue: &Queue, ev: &Event<'_, Node>) {
    match ev {
        Event::Add(node) => {
            for ds in dss.list() {
                if Placement::new(&ds).on(node).0 {
                    queue.add(key_of(&*ds));
                }
            }
        }
        Event::Update(old, new) => {
            if !placement_changed(old, new) {
                return;
            }
            for ds in dss.list() {
                let p = Placement::new(&ds);
                if p.on(old) != p.on(new) {
                    queue.add(key_of(&*ds));
                }
            }
        }
        // Unscheduled pods for a vanished node are deleted by the next sync.
        Event::Delete(_) => {
            for ds in dss.list() {
                queue.add(key_of(&*ds));
            }
        }
    }
}

fn revision_event(dss: &Informer<DaemonSet>, queue: &Queue, ev: &Event<'_, ControllerRevision>) {
    let (old, new) = match ev {
        Event::Add(r) | Event::Delete(r) => (None, &***r),
        Event::Update(o, n) => (Some(&***o), &***n),
    };
    let ns = new.metadata.namespace.as_deref().unwrap_or_default();
    let mut keys: Vec<String> = Vec::new();
    for meta in old.map(|o| &o.metadata).into_iter().chain([&new.metadata]) {
        match owners::controller_of(meta) {
            Some(r) => keys.extend(resolve(dss, ns, r).map(|ds| key_of(&*ds))),
            None => keys.extend(matching(dss, meta).iter().map(|ds| key_of(&**ds))),
        }
    }
    keys.dedup();
    for k in keys {
        queue.add(k);
    }
}

fn name_of(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

impl Controller {
    fn ds_api(&self, ns: &str) -> Api<DaemonSet> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn rev_api(&self, ns: &str) -> Api<ControllerRevision> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn pods_api(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    async fn sync(&self, key: &str) -> Result<(), Error> {
        let Some(ds) = self.dss.get(key) else {
            self.expectations.delete(key);
            return Ok(());
        };
        if Selector::from_label_selector(ds.spec.as_ref().map(|s| &s.selector)).is_empty() {
            self.ctx.recorder.event(
                COMPONENT,
                &*ds,
                Type::Warning,
                "SelectingAll",
                "This daemon set is selecting all pods. A non-empty selector is required.".into(),
            );
            return Ok(());
        }
        // A DaemonSet being deleted keeps its status as it was; the garbage collector
        // removes its pods.
        if ds.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let nodes = self.nodes.list();
        let (cur, old) = self.construct_history(&ds).await?;
        let hash = cur.metadata.labels.as_ref().and_then(|l| l.get(HASH_LABEL)).cloned().unwrap_or_default();
        if !self.expectations.satisfied(key) {
            return self.update_status(&ds, &nodes, &hash, false).await;
        }
        self.manage(&ds, &nodes, &hash).await?;
        if self.expectations.satisfied(key) && util::is_rolling_update(&ds) {
            self.rolling_update(&ds, &nodes, &hash).await?;
        }
        self.cleanup_history(&ds, old).await?;
        self.update_status(&ds, &nodes, &hash, true).await
    }

    /// The DaemonSet's pods (claimed: orphans it selects adopted, its own it no longer
    /// selects released), by the node each is for. Pods that are finished and being
    /// deleted are left out unless `with_finished_deleted`: nothing more is done with them.
    async fn node_pods(&self, ds: &DaemonSet, with_finished_deleted: bool) -> Result<NodePods, Error> {
        let ns = ds.metadata.namespace.as_deref().unwrap_or_default();
        let candidates = self.pods.list_namespace(ns);
        let owned = claim(&self.pods_api(ns), &self.ds_api(ns), ds, &selector_of(ds), candidates).await?;
        let mut by_node = NodePods::new();
        for pod in owned {
            if !with_finished_deleted && podutil::is_terminal(&pod) && podutil::is_terminating(&pod) {
                continue;
            }
            if let Some(node) = util::target_node(&pod) {
                by_node.entry(node).or_default().push(pod);
            }
        }
        Ok(by_node)
    }

    /// Upstream's `constructHistory`: the revision of the current template (created, or
    /// an old one renumbered as newest on a rollback) and the others.
    async fn construct_history(
        &self,
        ds: &DaemonSet,
    ) -> Result<(ControllerRevision, Vec<ControllerRevision>), Error> {
        let ns = ds.metadata.namespace.as_deref().unwrap_or_default();
        let api = self.rev_api(ns);
        let candidates = self.revisions.list_namespace(ns);
        let owned = claim(&api, &self.ds_api(ns), ds, &selector_of(ds), candidates).await?;
        let template = ds.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
        let data = history::template_patch(&template);
        let (mut current, mut old) = (Vec::new(), Vec::new());
        for rev in owned {
            let mut rev = (*rev).clone();
            // Revisions from before hashes were labelled: their name is their hash.
            if rev.metadata.labels.as_ref().and_then(|l| l.get(HASH_LABEL)).is_none() {
                let name = name_of(&rev.metadata);
                rev.metadata
                    .labels
                    .get_or_insert_with(Default::default)
                    .insert(HASH_LABEL.into(), name.clone());
                rev = api.replace(&name, &PostParams::default(), &rev).await?;
            }
            if rev.data.as_ref().is_some_and(|d| history::data_equal(&d.0, &data)) {
                current.push(rev);
            } else {
                old.push(rev);
            }
        }
        let next = history::next_revision(&old);
        let cur = if current.is_empty() {
            self.snapshot(ds, &template, next).await?
        } else {
            let cur = self.dedup_current(ds, current).await?;
            if cur.revision < next { history::set_revision_number(&api, &cur, next).await? } else { cur }
        };
        Ok((cur, old))
    }

    /// Records the current template as revision `number`, named `<ds>-<hash>`.
    async fn snapshot(
        &self,
        ds: &DaemonSet,
        template: &k8s_openapi::api::core::v1::PodTemplateSpec,
        number: i64,
    ) -> Result<ControllerRevision, Error> {
        let ns = ds.metadata.namespace.clone().unwrap_or_default();
        let api = self.rev_api(&ns);
        let collision = ds.status.as_ref().and_then(|s| s.collision_count);
        let hash = compute_hash(template, collision);
        let name = format!("{}-{hash}", name_of(&ds.metadata));
        let mut rev = history::new_revision(
            template,
            ds.metadata.annotations.as_ref(),
            owners::controller_ref(ds),
            &ns,
            number,
        );
        rev.metadata.name = Some(name.clone());
        rev.metadata.labels.get_or_insert_with(Default::default).insert(HASH_LABEL.into(), hash);
        match api.create(&PostParams::default(), &rev).await {
            Ok(created) => Ok(created),
            Err(err) if controller::api_code(&err) == Some(409) => {
                let existing = api.get(&name).await?;
                let data = rev.data.as_ref().map(|d| &d.0);
                if let (Some(a), Some(b)) = (existing.data.as_ref(), data)
                    && history::data_equal(&a.0, b)
                {
                    return Ok(existing);
                }
                // A different template hashed to the same name: bump the collision count
                // (only if ours was fresh) so the next sync picks another name.
                let ds_api = self.ds_api(&ns);
                let mut fresh = ds_api.get(&name_of(&ds.metadata)).await?;
                let fresh_count = fresh.status.as_ref().and_then(|s| s.collision_count);
                if fresh_count != collision {
                    return Err(Error::Other(format!(
                        "found a stale collision count ({collision:?}, expected {fresh_count:?}) of DaemonSet {:?} while processing; will retry until it is updated",
                        name_of(&ds.metadata)
                    )));
                }
                let status = fresh.status.get_or_insert_with(Default::default);
                status.collision_count = Some(fresh_count.unwrap_or(0) + 1);
                ds_api.replace_status(&name_of(&ds.metadata), &PostParams::default(), &fresh).await?;
                Err(Error::Api(err))
            }
            Err(err) => Err(Error::Api(err)),
        }
    }

    /// Several revisions with the current template (a race between controllers): keep the
    /// newest, relabel pods of the others to it, delete the others.
    async fn dedup_current(
        &self,
        ds: &DaemonSet,
        mut current: Vec<ControllerRevision>,
    ) -> Result<ControllerRevision, Error> {
        current.sort_by(history::by_revision);
        let keep = current.pop().expect("at least one current revision");
        if current.is_empty() {
            return Ok(keep);
        }
        let ns = ds.metadata.namespace.as_deref().unwrap_or_default();
        let keep_hash =
            keep.metadata.labels.as_ref().and_then(|l| l.get(HASH_LABEL)).cloned().unwrap_or_default();
        let pods = self.node_pods(ds, true).await?;
        for pod in pods.values().flatten() {
            let hash = pod.metadata.labels.as_ref().and_then(|l| l.get(HASH_LABEL));
            if hash != Some(&keep_hash) {
                let patch = json!({"metadata": {"labels": {HASH_LABEL: keep_hash}}});
                self.pods_api(ns)
                    .patch(&name_of(&pod.metadata), &PatchParams::default(), &Patch::Strategic(patch))
                    .await?;
            }
        }
        for dup in current {
            match self.rev_api(ns).delete(&name_of(&dup.metadata), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(err) if controller::api_code(&err) == Some(404) => {}
                Err(err) => return Err(Error::Api(err)),
            }
        }
        Ok(keep)
    }

    /// Upstream's `manage`: a pod for every node that should run one and has none, no pod
    /// where none should run, failed and excess pods removed.
    async fn manage(&self, ds: &DaemonSet, nodes: &[Arc<Node>], hash: &str) -> Result<(), Error> {
        let by_node = self.node_pods(ds, false).await?;
        let placement = Placement::new(ds);
        let surge = util::allows_surge(ds);
        let (min_ready, now) = (min_ready(ds), Timestamp::now());
        let ds_uid = ds.metadata.uid.clone().unwrap_or_default();
        let mut create = Vec::new();
        let mut delete = Vec::new();
        for node in nodes {
            let name = name_of(&node.metadata);
            let (should_run, keep) = placement.on(node);
            let mut may_delete_failed = |pod: &Pod| {
                let key = format!("{ds_uid}/{name}");
                let at = Instant::now();
                if let Some(left) = self.backoff.waiting(&key, at) {
                    self.queue.add_after(key_of(ds), left);
                    return false;
                }
                self.backoff.next(&key, at);
                self.ctx.recorder.event(
                    COMPONENT,
                    ds,
                    Type::Warning,
                    "FailedDaemonPod",
                    format!(
                        "Found failed daemon pod {}/{} on node {name}, will try to kill it",
                        pod.metadata.namespace.as_deref().unwrap_or_default(),
                        name_of(&pod.metadata)
                    ),
                );
                true
            };
            let actions = update::node_actions(
                should_run,
                keep,
                by_node.get(&name),
                surge,
                hash,
                min_ready,
                now,
                &mut may_delete_failed,
            );
            if actions.create {
                create.push(name);
            }
            delete.extend(actions.delete);
        }
        // Pods for nodes that no longer exist and that were never scheduled.
        let known: std::collections::HashSet<String> = nodes.iter().map(|n| name_of(&n.metadata)).collect();
        for (node, pods) in &by_node {
            if !known.contains(node) {
                delete.extend(pods.iter().filter(|p| podutil::node_name(p).is_empty()).cloned());
            }
        }
        self.sync_nodes(ds, delete, create, hash).await
    }

    /// Upstream's `syncNodes`: creates a pod for each of `create` (up to the burst, in
    /// slow-start batches) and deletes `delete`, with expectations raised first.
    async fn sync_nodes(
        &self,
        ds: &DaemonSet,
        mut delete: Vec<Arc<Pod>>,
        mut create: Vec<String>,
        hash: &str,
    ) -> Result<(), Error> {
        let key = key_of(ds);
        let ns = ds.metadata.namespace.clone().unwrap_or_default();
        create.truncate(BURST_REPLICAS);
        delete.truncate(BURST_REPLICAS);
        if create.is_empty() && delete.is_empty() {
            return Ok(());
        }
        self.expectations.expect(&key, create.len(), delete.iter().map(|p| key_of(&**p)));
        let template = util::pod_template(ds, hash);
        let base = pod_from_template(&template, ds)?;
        let pods_api = self.pods_api(&ns);
        let (ok, create_err) = slow_start_batch(create.len(), 1, |i| {
            let mut pod = base.clone();
            let node = create[i].clone();
            let api = pods_api.clone();
            async move {
                if let Some(spec) = pod.spec.as_mut() {
                    spec.affinity = Some(util::pin_to_node(spec.affinity.take(), &node));
                }
                self.create_pod(&api, ds, &pod).await
            }
        })
        .await;
        // Failed and skipped creations will never be observed.
        for _ in ok..create.len() {
            self.expectations.creation_observed(&key);
        }
        let results = join_all(delete.iter().map(|pod| {
            let api = pods_api.clone();
            let key = key.clone();
            async move {
                let name = name_of(&pod.metadata);
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {
                        self.ctx.recorder.event(
                            COMPONENT,
                            ds,
                            Type::Normal,
                            "SuccessfulDelete",
                            format!("Deleted pod: {name}"),
                        );
                        Ok(())
                    }
                    Err(err) => {
                        self.expectations.deletion_observed(&key, &key_of(&**pod));
                        if controller::api_code(&err) == Some(404) {
                            return Ok(());
                        }
                        self.ctx.recorder.event(
                            COMPONENT,
                            ds,
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
        match create_err.or_else(|| results.into_iter().find_map(Result::err)) {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    async fn create_pod(&self, api: &Api<Pod>, ds: &DaemonSet, pod: &Pod) -> Result<(), Error> {
        match api.create(&PostParams::default(), pod).await {
            Ok(created) => {
                let name = name_of(&created.metadata);
                self.ctx.recorder.event(
                    COMPONENT,
                    ds,
                    Type::Normal,
                    "SuccessfulCreate",
                    format!("Created pod: {name}"),
                );
                Ok(())
            }
            // Every create fails in a namespace being deleted; not this DaemonSet's failure.
            Err(err) if controller::is_namespace_terminating(&err) => Ok(()),
            Err(err) => {
                self.ctx.recorder.event(
                    COMPONENT,
                    ds,
                    Type::Warning,
                    "FailedCreate",
                    format!("Error creating: {err}"),
                );
                Err(Error::Api(err))
            }
        }
    }

    /// Upstream's `rollingUpdate`: deletes old pods (or starts surge pods) as far as
    /// maxUnavailable / maxSurge allow; the core loop replaces what was deleted.
    async fn rolling_update(&self, ds: &DaemonSet, nodes: &[Arc<Node>], hash: &str) -> Result<(), Error> {
        let mut by_node = self.node_pods(ds, false).await?;
        let placement = Placement::new(ds);
        let mut desired = 0;
        let mut should_run = std::collections::HashSet::new();
        for node in nodes {
            if placement.on(node).0 {
                desired += 1;
                let name = name_of(&node.metadata);
                by_node.entry(name.clone()).or_default();
                should_run.insert(name);
            }
        }
        let mut max_unavailable = util::unavailable_count(ds, desired)
            .map_err(|e| Error::Other(format!("invalid value for MaxUnavailable: {e}")))?;
        let max_surge = util::surge_count(ds, desired)
            .map_err(|e| Error::Other(format!("invalid value for MaxSurge: {e}")))?;
        if desired > 0 && max_unavailable == 0 && max_surge == 0 {
            max_unavailable = 1;
        }
        let generation = util::template_generation(ds);
        let (min_ready, now) = (min_ready(ds), Timestamp::now());
        if max_surge == 0 {
            let delete =
                update::plan_without_surge(&by_node, hash, generation, max_unavailable, min_ready, now);
            return self.sync_nodes(ds, delete, Vec::new(), hash).await;
        }
        let (delete, create) = update::plan_with_surge(
            &by_node,
            &|n: &str| should_run.contains(n),
            hash,
            generation,
            max_surge,
            desired,
            min_ready,
            now,
        );
        self.sync_nodes(ds, delete, create, hash).await
    }

    /// Deletes the oldest revisions beyond `revisionHistoryLimit` (default 10) that no
    /// live pod runs.
    async fn cleanup_history(&self, ds: &DaemonSet, mut old: Vec<ControllerRevision>) -> Result<(), Error> {
        let limit = ds.spec.as_ref().and_then(|s| s.revision_history_limit).unwrap_or(10).max(0) as usize;
        if old.len() <= limit {
            return Ok(());
        }
        let mut to_kill = old.len() - limit;
        let pods = self.node_pods(ds, true).await?;
        let live: std::collections::HashSet<&String> = pods
            .values()
            .flatten()
            .filter_map(|p| p.metadata.labels.as_ref().and_then(|l| l.get(HASH_LABEL)))
            .collect();
        old.sort_by(history::by_revision);
        let ns = ds.metadata.namespace.as_deref().unwrap_or_default();
        for rev in old {
            if to_kill == 0 {
                break;
            }
            if rev.metadata.labels.as_ref().and_then(|l| l.get(HASH_LABEL)).is_some_and(|h| live.contains(h))
            {
                continue;
            }
            match self.rev_api(ns).delete(&name_of(&rev.metadata), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(err) if controller::api_code(&err) == Some(404) => {}
                Err(err) => return Err(Error::Api(err)),
            }
            to_kill -= 1;
        }
        Ok(())
    }

    /// Upstream's `updateDaemonSetStatus`: counts per node from the oldest pod there.
    async fn update_status(
        &self,
        ds: &DaemonSet,
        nodes: &[Arc<Node>],
        hash: &str,
        observe_generation: bool,
    ) -> Result<(), Error> {
        let by_node = self.node_pods(ds, false).await?;
        let placement = Placement::new(ds);
        let generation = util::template_generation(ds);
        let (min_ready, now) = (min_ready(ds), Timestamp::now());
        let mut c = Counts::default();
        for node in nodes {
            let (should_run, _) = placement.on(node);
            let pods = by_node.get(&name_of(&node.metadata)).filter(|p| !p.is_empty());
            if !should_run {
                c.misscheduled += i32::from(pods.is_some());
                continue;
            }
            c.desired += 1;
            let Some(pods) = pods else { continue };
            c.current += 1;
            let mut pods = pods.clone();
            util::sort_oldest_first(&mut pods);
            let pod = &pods[0];
            if podutil::is_ready(pod) {
                c.ready += 1;
                if podutil::is_available(pod, min_ready, now) {
                    c.available += 1;
                }
            }
            if util::is_pod_updated(pod, hash, generation) {
                c.updated += 1;
            }
        }
        self.store_status(ds, &c, observe_generation).await?;
        if !min_ready.is_zero() && c.ready != c.available {
            self.queue.add_after(key_of(ds), min_ready);
        }
        Ok(())
    }

    async fn store_status(&self, ds: &DaemonSet, c: &Counts, observe_generation: bool) -> Result<(), Error> {
        let generation = ds.metadata.generation.unwrap_or(0);
        let old = ds.status.clone().unwrap_or_default();
        if Counts::of(&old) == *c && old.observed_generation.unwrap_or(0) >= generation {
            return Ok(());
        }
        let name = name_of(&ds.metadata);
        let api = self.ds_api(ds.metadata.namespace.as_deref().unwrap_or_default());
        let mut current = ds.clone();
        for attempt in 0..2 {
            let status = current.status.get_or_insert_with(DaemonSetStatus::default);
            if observe_generation {
                status.observed_generation = ds.metadata.generation;
            }
            c.write(status);
            match api.replace_status(&name, &PostParams::default(), &current).await {
                Ok(_) => return Ok(()),
                Err(err) if attempt == 0 && controller::api_code(&err) == Some(409) => {
                    current = api.get(&name).await?;
                }
                Err(err) => return Err(Error::Api(err)),
            }
        }
        Ok(())
    }
}

#[derive(Debug, Default, PartialEq)]
struct Counts {
    desired: i32,
    current: i32,
    misscheduled: i32,
    ready: i32,
    updated: i32,
    available: i32,
}

impl Counts {
    fn of(s: &DaemonSetStatus) -> Self {
        Self {
            desired: s.desired_number_scheduled,
            current: s.current_number_scheduled,
            misscheduled: s.number_misscheduled,
            ready: s.number_ready,
            updated: s.updated_number_scheduled.unwrap_or(0),
            available: s.number_available.unwrap_or(0),
        }
    }

    fn unavailable(&self) -> i32 {
        self.desired - self.available
    }

    fn write(&self, s: &mut DaemonSetStatus) {
        let nonzero = |n: i32| (n != 0).then_some(n);
        s.desired_number_scheduled = self.desired;
        s.current_number_scheduled = self.current;
        s.number_misscheduled = self.misscheduled;
        s.number_ready = self.ready;
        s.updated_number_scheduled = nonzero(self.updated);
        s.number_available = nonzero(self.available);
        s.number_unavailable = nonzero(self.unavailable());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_pod_backoff_doubles_and_expires() {
        let b = Backoff::default();
        let t0 = Instant::now();
        assert!(b.waiting("k", t0).is_none());
        b.next("k", t0);
        assert_eq!(b.waiting("k", t0), Some(FAILED_POD_BACKOFF));
        assert!(b.waiting("k", t0 + Duration::from_secs(2)).is_none());
        b.next("k", t0 + Duration::from_secs(2));
        assert_eq!(b.waiting("k", t0 + Duration::from_secs(2)), Some(2 * FAILED_POD_BACKOFF));
        let later = t0 + 3 * FAILED_POD_BACKOFF_MAX;
        b.gc(later);
        assert!(b.entries.lock().is_empty());
    }

    #[test]
    fn status_counts_round_trip() {
        let c = Counts { desired: 3, current: 3, misscheduled: 1, ready: 2, updated: 3, available: 2 };
        let mut s = DaemonSetStatus::default();
        c.write(&mut s);
        assert_eq!(s.number_unavailable, Some(1));
        assert_eq!(Counts::of(&s), c);
        let zero = Counts { desired: 2, ..Default::default() };
        zero.write(&mut s);
        assert_eq!((s.number_available, s.updated_number_scheduled), (None, None));
    }
}
