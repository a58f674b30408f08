//! The garbage collector (upstream's `pkg/controller/garbagecollector`): deletes objects
//! whose owners are all gone, finishes foreground deletions once the blocking dependents
//! are gone, and orphans dependents of owners deleted with the `orphan` finalizer.
//! It watches every deletable resource found by discovery, re-discovered every 30 s.

pub mod discovery;
pub mod graph;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy};
use kube::discovery::ApiResource;
use kube::runtime::watcher;
use parking_lot::{Mutex, RwLock};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::controller::{Context, Error, api_code};
use crate::informers::{self, Informer};
use crate::workqueue::Queue;
use graph::{Action, Event, EventType, FOREGROUND, Graph, Identity, ORPHAN, Observed};

/// How often resources are re-discovered, as kube-controller-manager's GC sync period.
const RESYNC_PERIOD: Duration = Duration::from_secs(30);
/// Upstream's absent-owner cache size.
const ABSENT_OWNER_CACHE_SIZE: usize = 500;
/// Attempts of a read-modify-patch before giving the item back to the queue.
const UPDATE_RETRIES: u32 = 4;
/// Resources the collector never watches (upstream's `DefaultIgnoredResources`): events
/// are many, short-lived, and never owners.
const IGNORED: &[(&str, &str)] = &[("", "events"), ("events.k8s.io", "events")];

pub fn start(ctx: &Context) -> Result<(), Error> {
    let (tx, rx) = mpsc::unbounded_channel();
    let gc = Arc::new(GarbageCollector {
        client: ctx.client.clone(),
        informers: ctx.informers.clone(),
        graph: RwLock::default(),
        mapper: RwLock::default(),
        absent: Mutex::default(),
        attempt_to_delete: ctx.queue("garbage_collector_attempt_to_delete"),
        attempt_to_orphan: ctx.queue("garbage_collector_attempt_to_orphan"),
        changes: tx,
        pending: Arc::new(AtomicUsize::new(0)),
        monitors: Mutex::default(),
    });
    {
        let (gc, shutdown) = (gc.clone(), ctx.shutdown.clone());
        tokio::spawn(async move {
            shutdown.wait().await;
            gc.attempt_to_delete.shut_down();
            gc.attempt_to_orphan.shut_down();
        });
    }
    tokio::spawn(gc.clone().process_graph_changes(rx, ctx.shutdown.clone()));
    let ctx = ctx.clone();
    tokio::spawn(async move { gc.run(ctx).await });
    Ok(())
}

/// Identities known not to exist; bounded, oldest forgotten first. UIDs are never reused,
/// so an entry can only go stale by being forgotten.
#[derive(Default)]
struct AbsentOwners {
    set: HashSet<Identity>,
    order: VecDeque<Identity>,
}

impl AbsentOwners {
    fn add(&mut self, id: Identity) {
        if self.set.insert(id.clone()) {
            self.order.push_back(id);
            while self.order.len() > ABSENT_OWNER_CACHE_SIZE {
                if let Some(old) = self.order.pop_front() {
                    self.set.remove(&old);
                }
            }
        }
    }

    fn contains(&self, id: &Identity) -> bool {
        self.set.contains(id)
    }
}

/// What a worker needs of a node, copied out of the graph.
#[derive(Clone, Debug)]
struct Item {
    identity: Identity,
    virtual_: bool,
    being_deleted: bool,
    deleting_dependents: bool,
    /// (UID, deleting its own dependents) of every dependent.
    dependents: Vec<(String, bool)>,
    /// The same for the dependents that block this node's deletion.
    blocking: Vec<(String, bool)>,
}

/// How an attempt ended when it did not fail.
enum Done {
    Finished,
    /// The object is gone; a virtual delete event will clean the graph up.
    VirtualDeleteEnqueued,
    /// A cluster-scoped object names a namespaced owner: retrying cannot help.
    Unresolvable,
}

/// What the server says of one owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnerState {
    /// Not found, or found with another UID.
    Absent,
    /// Exists; `waiting` when it is being deleted in the foreground.
    Present { waiting: bool },
}

/// An item's owner references by the state of their owners (upstream's
/// `classifyReferences`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Classified {
    pub solid: Vec<OwnerReference>,
    pub dangling: Vec<OwnerReference>,
    pub waiting_for_dependents_deletion: Vec<OwnerReference>,
}

impl Classified {
    pub fn new(refs: impl IntoIterator<Item = (OwnerReference, OwnerState)>) -> Self {
        let mut c = Self::default();
        for (r, state) in refs {
            match state {
                OwnerState::Absent => c.dangling.push(r),
                OwnerState::Present { waiting: true } => c.waiting_for_dependents_deletion.push(r),
                OwnerState::Present { waiting: false } => c.solid.push(r),
            }
        }
        c
    }
}

/// What to do with an item whose owners were classified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// An owner still exists and no reference needs cleaning.
    Keep,
    /// An owner still exists: drop the references to the absent and the waiting owners
    /// (a waiting owner would otherwise wait for this item forever).
    RemoveReferences(Vec<String>),
    /// No owner remains. `unblock_first`: make the item's own references non-blocking
    /// before a foreground deletion, to break a possible cycle of waiting owners.
    Delete { policy: Policy, unblock_first: bool },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    Orphan,
    Background,
    Foreground,
}

impl Policy {
    fn to_kube(self) -> PropagationPolicy {
        match self {
            Policy::Orphan => PropagationPolicy::Orphan,
            Policy::Background => PropagationPolicy::Background,
            Policy::Foreground => PropagationPolicy::Foreground,
        }
    }
}

/// Upstream's decision in `attemptToDeleteItem`.
pub fn decide(
    c: &Classified,
    has_dependents: bool,
    dependent_deleting_dependents: bool,
    finalizers: &[String],
) -> Decision {
    if !c.solid.is_empty() {
        if c.dangling.is_empty() && c.waiting_for_dependents_deletion.is_empty() {
            return Decision::Keep;
        }
        let uids =
            c.dangling.iter().chain(&c.waiting_for_dependents_deletion).map(|r| r.uid.clone()).collect();
        return Decision::RemoveReferences(uids);
    }
    if !c.waiting_for_dependents_deletion.is_empty() && has_dependents {
        // An owner waits for this item's deletion, and it has dependents of its own: go
        // in the foreground too, so the owner waits for the whole subtree.
        return Decision::Delete { policy: Policy::Foreground, unblock_first: dependent_deleting_dependents };
    }
    let has = |f: &str| finalizers.iter().any(|x| x == f);
    let policy = if has(ORPHAN) {
        Policy::Orphan
    } else if has(FOREGROUND) {
        Policy::Foreground
    } else {
        Policy::Background
    };
    Decision::Delete { policy, unblock_first: false }
}

struct GarbageCollector {
    client: kube::Client,
    informers: Arc<informers::Factory>,
    graph: RwLock<Graph>,
    /// (apiVersion, kind) → resource and whether it is namespaced: the REST mapper.
    mapper: RwLock<HashMap<(String, String), (ApiResource, bool)>>,
    absent: Mutex<AbsentOwners>,
    attempt_to_delete: Arc<Queue>,
    attempt_to_orphan: Arc<Queue>,
    changes: mpsc::UnboundedSender<Event>,
    /// Graph changes sent and not yet applied: the graph is synced when it is zero.
    pending: Arc<AtomicUsize>,
    /// The informers watched, by resource id.
    monitors: Mutex<HashMap<String, Arc<Informer<DynamicObject>>>>,
}

impl GarbageCollector {
    async fn run(self: Arc<Self>, ctx: Context) {
        let shutdown = ctx.shutdown.clone();
        // Nothing can be collected before the resources are known.
        loop {
            match self.sync_resources().await {
                Ok(()) => break,
                Err(err) => tracing::warn!(%err, "garbage collector: discovery failed; retrying"),
            }
            tokio::select! {
                () = shutdown.wait() => return,
                () = tokio::time::sleep(Duration::from_secs(5)) => {}
            }
        }
        // Workers act only on a complete graph: every monitor listed and every event
        // applied, so that no owner looks dependent-free merely for being unseen.
        loop {
            if self.monitors_synced() && self.pending.load(Ordering::SeqCst) == 0 {
                break;
            }
            tokio::select! {
                () = shutdown.wait() => return,
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
        tracing::info!(
            nodes = self.graph.read().len(),
            "garbage collector: all resource monitors have synced"
        );
        let workers = ctx.options.concurrent_gc_syncs.max(1);
        for _ in 0..workers {
            let gc = self.clone();
            tokio::spawn(async move {
                while let Some(uid) = gc.attempt_to_delete.get().await {
                    let requeue = std::panic::AssertUnwindSafe(gc.attempt_to_delete_worker(&uid))
                        .catch_unwind()
                        .await
                        .unwrap_or(true);
                    finish(&gc.attempt_to_delete, &uid, requeue);
                }
            });
            let gc = self.clone();
            tokio::spawn(async move {
                while let Some(uid) = gc.attempt_to_orphan.get().await {
                    let requeue = std::panic::AssertUnwindSafe(gc.attempt_to_orphan_worker(&uid))
                        .catch_unwind()
                        .await
                        .unwrap_or(true);
                    finish(&gc.attempt_to_orphan, &uid, requeue);
                }
            });
        }
        loop {
            tokio::select! {
                () = shutdown.wait() => return,
                () = tokio::time::sleep(RESYNC_PERIOD) => {}
            }
            if let Err(err) = self.sync_resources().await {
                tracing::warn!(%err, "garbage collector: re-discovery failed");
            }
        }
    }

    fn monitors_synced(&self) -> bool {
        self.monitors.lock().values().all(|i| i.has_synced())
    }

    /// Discovers resources, refreshes the REST mapping, and starts watching the deletable
    /// resources not yet watched.
    async fn sync_resources(&self) -> Result<(), kube::Error> {
        let found = discovery::run(&self.client).await?;
        if let Some(msg) = found.failure_message() {
            tracing::warn!(%msg, "garbage collector: partial discovery");
        }
        let mapping = found
            .all
            .iter()
            .map(|r| ((r.api.api_version.clone(), r.api.kind.clone()), (r.api.clone(), r.namespaced)))
            .collect();
        *self.mapper.write() = mapping;
        for res in found.preferred.iter().filter(|r| is_collectable(r)) {
            let id = res.id();
            if self.monitors.lock().contains_key(&id) {
                continue;
            }
            // Shared-informer credentials, as upstream's metadata informers.
            let api = Api::<DynamicObject>::all_with(self.informers.client().clone(), &res.api);
            let informer = self.informers.get_with(&format!("gc:{id}"), api, watcher::Config::default());
            let (tx, pending) = (self.changes.clone(), self.pending.clone());
            let (api_version, kind) = (res.api.api_version.clone(), res.api.kind.clone());
            informer.add_handler(move |ev| {
                let change = match ev {
                    informers::Event::Add(o) => observe(o, &api_version, &kind).map(|obj| Event {
                        kind: EventType::Add,
                        virtual_: false,
                        obj,
                        old: None,
                    }),
                    informers::Event::Update(old, new) => {
                        let (Some(old), Some(new)) =
                            (observe(old, &api_version, &kind), observe(new, &api_version, &kind))
                        else {
                            return;
                        };
                        // Only owners, deletion and finalizers matter to the graph.
                        if old.owners == new.owners
                            && old.being_deleted == new.being_deleted
                            && old.finalizers == new.finalizers
                            && old.identity == new.identity
                        {
                            return;
                        }
                        Some(Event { kind: EventType::Update, virtual_: false, obj: new, old: Some(old) })
                    }
                    informers::Event::Delete(o) => observe(o, &api_version, &kind).map(|obj| Event {
                        kind: EventType::Delete,
                        virtual_: false,
                        obj,
                        old: None,
                    }),
                };
                if let Some(change) = change {
                    pending.fetch_add(1, Ordering::SeqCst);
                    if tx.send(change).is_err() {
                        pending.fetch_sub(1, Ordering::SeqCst);
                    }
                }
            });
            // A watch that listed before the handler was added: replay its store.
            if informer.has_synced() {
                for o in informer.list() {
                    if let Some(obj) = observe(&o, &res.api.api_version, &res.api.kind) {
                        self.send(Event { kind: EventType::Add, virtual_: false, obj, old: None });
                    }
                }
            }
            tracing::debug!(resource = %id, "garbage collector: monitoring");
            self.monitors.lock().insert(id, informer);
        }
        Ok(())
    }

    fn send(&self, ev: Event) {
        self.pending.fetch_add(1, Ordering::SeqCst);
        if self.changes.send(ev).is_err() {
            self.pending.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The single task that applies graph changes, in order.
    async fn process_graph_changes(
        self: Arc<Self>,
        mut rx: mpsc::UnboundedReceiver<Event>,
        shutdown: component_base::shutdown::Shutdown,
    ) {
        loop {
            let ev = tokio::select! {
                () = shutdown.wait() => return,
                ev = rx.recv() => ev,
            };
            let Some(ev) = ev else { return };
            let actions = self.graph.write().process(ev);
            for a in actions {
                match a {
                    Action::AttemptToDelete(uid) => self.attempt_to_delete.add(uid),
                    Action::AttemptToDeleteRateLimited(uid) => self.attempt_to_delete.add_rate_limited(uid),
                    Action::AttemptToOrphan(uid) => self.attempt_to_orphan.add(uid),
                    Action::Absent(id) => self.absent.lock().add(id),
                }
            }
            self.pending.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn item(&self, uid: &str) -> Option<Item> {
        let g = self.graph.read();
        let n = g.get(uid)?;
        let dependents = n
            .dependents
            .iter()
            .filter_map(|d| g.get(d))
            .map(|d| (d.identity.uid.clone(), d.deleting_dependents))
            .collect();
        let blocking = g
            .blocking_dependents(uid)
            .into_iter()
            .map(|d| (d.identity.uid.clone(), d.deleting_dependents))
            .collect();
        Some(Item {
            identity: n.identity.clone(),
            virtual_: n.virtual_,
            being_deleted: n.being_deleted,
            deleting_dependents: n.deleting_dependents,
            dependents,
            blocking,
        })
    }

    /// Returns whether to retry `uid` later.
    async fn attempt_to_delete_worker(&self, uid: &str) -> bool {
        let Some(item) = self.item(uid) else { return false };
        match self.attempt_to_delete_item(&item).await {
            Ok(Done::VirtualDeleteEnqueued | Done::Unresolvable) => false,
            // An owner not yet seen by an informer is checked again until it is (or is
            // found gone), so a virtual node never lingers.
            Ok(Done::Finished) => self.graph.read().get(uid).is_some_and(|n| n.virtual_),
            Err(err) => {
                tracing::info!(item = %item.identity, %err, "garbage collector: error syncing item");
                true
            }
        }
    }

    async fn attempt_to_delete_item(&self, item: &Item) -> Result<Done, Error> {
        tracing::debug!(item = %item.identity, virtual_ = item.virtual_, "garbage collector: processing item");
        // Being deleted is a one-way trip; its dependents are handled once it is gone.
        if item.being_deleted && !item.deleting_dependents {
            return Ok(Done::Finished);
        }
        let latest = match self.get_object(&item.identity).await? {
            Some(o) if o.metadata.uid.as_deref() == Some(item.identity.uid.as_str()) => o,
            _ => {
                self.send(Event {
                    kind: EventType::Delete,
                    virtual_: true,
                    obj: Observed { identity: item.identity.clone(), ..Default::default() },
                    old: None,
                });
                return Ok(Done::VirtualDeleteEnqueued);
            }
        };
        if item.deleting_dependents {
            self.process_deleting_dependents(item).await?;
            return Ok(Done::Finished);
        }
        let refs = latest.metadata.owner_references.clone().unwrap_or_default();
        if refs.is_empty() {
            return Ok(Done::Finished);
        }
        let mut states = Vec::with_capacity(refs.len());
        for r in &refs {
            match self.owner_state(r, &item.identity).await? {
                Some(s) => states.push((r.clone(), s)),
                None => return Ok(Done::Unresolvable),
            }
        }
        let classified = Classified::new(states);
        let finalizers = latest.metadata.finalizers.clone().unwrap_or_default();
        let dependent_deleting = item.dependents.iter().any(|(_, d)| *d);
        match decide(&classified, !item.dependents.is_empty(), dependent_deleting, &finalizers) {
            Decision::Keep => Ok(Done::Finished),
            Decision::RemoveReferences(uids) => {
                tracing::info!(item = %item.identity, owners = ?uids, "garbage collector: removing dangling and waiting owner references");
                self.patch_owner_references(&item.identity, |refs| {
                    let before = refs.len();
                    refs.retain(|r| !uids.contains(&r.uid));
                    refs.len() != before
                })
                .await?;
                Ok(Done::Finished)
            }
            Decision::Delete { policy, unblock_first } => {
                if unblock_first {
                    tracing::info!(item = %item.identity, "garbage collector: making owner references non-blocking to avoid a deletion cycle");
                    self.patch_owner_references(&item.identity, |refs| {
                        let mut changed = false;
                        for r in refs.iter_mut().filter(|r| r.block_owner_deletion != Some(false)) {
                            r.block_owner_deletion = Some(false);
                            changed = true;
                        }
                        changed
                    })
                    .await?;
                }
                tracing::info!(item = %item.identity, ?policy, "garbage collector: deleting item");
                let rv = latest.metadata.resource_version.clone();
                self.delete_object(&item.identity, rv, &refs, policy).await?;
                Ok(Done::Finished)
            }
        }
    }

    /// A foreground deletion: done (finalizer removed) once no blocking dependent is left;
    /// until then the blocking dependents are pushed along.
    async fn process_deleting_dependents(&self, item: &Item) -> Result<(), Error> {
        if item.blocking.is_empty() {
            tracing::info!(item = %item.identity, "garbage collector: removing the foregroundDeletion finalizer");
            return self.remove_finalizer(&item.identity, FOREGROUND).await;
        }
        for (dep, deleting) in &item.blocking {
            if !deleting {
                self.attempt_to_delete.add(dep.clone());
            }
        }
        Ok(())
    }

    /// Returns whether to retry `uid` later.
    async fn attempt_to_orphan_worker(&self, uid: &str) -> bool {
        let (owner, dependents) = {
            let g = self.graph.read();
            let Some(n) = g.get(uid) else { return false };
            let deps: Vec<Identity> =
                n.dependents.iter().filter_map(|d| g.get(d)).map(|d| d.identity.clone()).collect();
            (n.identity.clone(), deps)
        };
        let results = futures::future::join_all(dependents.iter().map(|d| {
            let owner_uid = owner.uid.clone();
            async move {
                self.patch_owner_references(d, move |refs| {
                    let before = refs.len();
                    refs.retain(|r| r.uid != owner_uid);
                    refs.len() != before
                })
                .await
                .map_err(|e| format!("orphaning {d} failed, {e}"))
            }
        }))
        .await;
        let errs: Vec<String> = results.into_iter().filter_map(Result::err).collect();
        if !errs.is_empty() {
            tracing::info!(owner = %owner, errors = ?errs, "garbage collector: failed to orphan dependents");
            return true;
        }
        if let Err(err) = self.remove_finalizer(&owner, ORPHAN).await {
            tracing::info!(owner = %owner, %err, "garbage collector: removing the orphan finalizer failed");
            return true;
        }
        false
    }

    fn mapping(&self, api_version: &str, kind: &str) -> Result<(ApiResource, bool), Error> {
        self.mapper
            .read()
            .get(&(api_version.to_owned(), kind.to_owned()))
            .cloned()
            .ok_or_else(|| Error::Other(format!("unable to get REST mapping for {api_version}/{kind}.")))
    }

    fn api(&self, ar: &ApiResource, namespaced: bool, namespace: &str) -> Api<DynamicObject> {
        if namespaced {
            Api::namespaced_with(self.client.clone(), namespace, ar)
        } else {
            Api::all_with(self.client.clone(), ar)
        }
    }

    fn api_for(&self, id: &Identity) -> Result<Api<DynamicObject>, Error> {
        let (ar, namespaced) = self.mapping(&id.api_version, &id.kind)?;
        Ok(self.api(&ar, namespaced, &id.namespace))
    }

    async fn get_object(&self, id: &Identity) -> Result<Option<DynamicObject>, Error> {
        Ok(self.api_for(id)?.get_opt(&id.name).await?)
    }

    /// The state of the owner `r` of `item` (upstream's `isDangling`); None when a
    /// cluster-scoped item names a namespaced owner.
    async fn owner_state(&self, r: &OwnerReference, item: &Identity) -> Result<Option<OwnerState>, Error> {
        let mut key = Identity::of_ref(r, "");
        if self.absent.lock().contains(&key) {
            return Ok(Some(OwnerState::Absent));
        }
        key.namespace = item.namespace.clone();
        if self.absent.lock().contains(&key) {
            return Ok(Some(OwnerState::Absent));
        }
        let (ar, namespaced) = self.mapping(&r.api_version, &r.kind)?;
        if !namespaced {
            key.namespace.clear();
        }
        if item.namespace.is_empty() && namespaced {
            tracing::info!(item = %item, owner = %r.name, "garbage collector: item is cluster-scoped, but refers to a namespaced owner");
            return Ok(None);
        }
        let owner = self.api(&ar, namespaced, &item.namespace).get_opt(&r.name).await?;
        match owner {
            Some(o) if o.metadata.uid.as_deref() == Some(r.uid.as_str()) => {
                let waiting = o.metadata.deletion_timestamp.is_some()
                    && o.metadata.finalizers.iter().flatten().any(|f| f == FOREGROUND);
                Ok(Some(OwnerState::Present { waiting }))
            }
            _ => {
                self.absent.lock().add(key);
                Ok(Some(OwnerState::Absent))
            }
        }
    }

    /// Deletes with UID and resourceVersion preconditions; when only unrelated fields
    /// changed since (the owner references are the same), retries without the version so
    /// that a busy object is not starved.
    async fn delete_object(
        &self,
        id: &Identity,
        resource_version: Option<String>,
        owners_at_version: &[OwnerReference],
        policy: Policy,
    ) -> Result<(), Error> {
        let api = self.api_for(id)?;
        let mut dp = DeleteParams {
            propagation_policy: Some(policy.to_kube()),
            preconditions: Some(Preconditions {
                uid: Some(id.uid.clone()),
                resource_version: resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        let err = match api.delete(&id.name, &dp).await {
            Ok(_) => return Ok(()),
            Err(e) if api_code(&e) == Some(404) => return Ok(()),
            Err(e) => e,
        };
        if api_code(&err) != Some(409) || resource_version.is_none() {
            return Err(err.into());
        }
        let Some(live) = api.get_opt(&id.name).await? else { return Ok(()) };
        let same_owners = live.metadata.owner_references.as_deref().unwrap_or_default() == owners_at_version;
        if live.metadata.uid.as_deref() == Some(id.uid.as_str())
            && live.metadata.resource_version != resource_version
            && same_owners
        {
            dp.preconditions = Some(Preconditions { uid: Some(id.uid.clone()), resource_version: None });
            return match api.delete(&id.name, &dp).await {
                Ok(_) => Ok(()),
                Err(e) if api_code(&e) == Some(404) => Ok(()),
                Err(e) => Err(e.into()),
            };
        }
        Err(err.into())
    }

    /// Read-modify-patch of `id`'s owner references, guarded by its resourceVersion;
    /// `edit` says whether it changed anything. A missing (or replaced) object is done.
    async fn patch_owner_references<F>(&self, id: &Identity, edit: F) -> Result<(), Error>
    where
        F: Fn(&mut Vec<OwnerReference>) -> bool,
    {
        self.patch_metadata_field(id, "ownerReferences", "", |meta| {
            let mut refs = meta.owner_references.clone().unwrap_or_default();
            edit(&mut refs).then(|| json!(refs))
        })
        .await
    }

    /// Removes `finalizer` from `id`, guarded by its resourceVersion.
    async fn remove_finalizer(&self, id: &Identity, finalizer: &str) -> Result<(), Error> {
        self.patch_metadata_field(id, "finalizers", "owner ", |meta| {
            let finalizers = meta.finalizers.clone().unwrap_or_default();
            let rest: Vec<&String> = finalizers.iter().filter(|f| *f != finalizer).collect();
            (rest.len() != finalizers.len()).then(|| json!(rest))
        })
        .await
    }

    /// Reads `id`, lets `edit` compute a new value of one metadata list field (`None`: no
    /// change needed), and merge-patches it guarded by the resourceVersion read, retrying
    /// conflicts a few times. An empty list is written as null (the field removed). A
    /// missing or replaced object is done.
    async fn patch_metadata_field<F>(
        &self,
        id: &Identity,
        field: &str,
        what: &str,
        edit: F,
    ) -> Result<(), Error>
    where
        F: Fn(&ObjectMeta) -> Option<Value>,
    {
        let api = self.api_for(id)?;
        for attempt in 0..UPDATE_RETRIES {
            let Some(obj) = api.get_opt(&id.name).await? else { return Ok(()) };
            if obj.metadata.uid.as_deref() != Some(id.uid.as_str()) {
                return Ok(());
            }
            let Some(value) = edit(&obj.metadata) else { return Ok(()) };
            let value = if value.as_array().is_some_and(|a| a.is_empty()) { Value::Null } else { value };
            let patch = json!({
                "metadata": { "resourceVersion": obj.metadata.resource_version, field: value }
            });
            match api.patch(&id.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => return Ok(()),
                Err(e) if api_code(&e) == Some(404) => return Ok(()),
                Err(e) if api_code(&e) == Some(409) => retry_pause(attempt).await,
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::Other(format!(
            "updateMaxRetries({UPDATE_RETRIES}) has reached. The garbage collector will retry later for {what}{id}"
        )))
    }
}

/// client-go's `retry.DefaultBackoff`: 10 ms, growing fivefold.
async fn retry_pause(attempt: u32) {
    tokio::time::sleep(Duration::from_millis(10 * 5u64.pow(attempt.min(3)))).await;
}

fn finish(queue: &Arc<Queue>, uid: &str, requeue: bool) {
    if requeue {
        queue.add_rate_limited(uid.to_owned());
    } else {
        queue.forget(uid);
    }
    queue.done(uid);
}

/// Whether the collector watches this resource (upstream's `GetDeletableResources` minus
/// the ignored ones).
fn is_collectable(r: &discovery::Resource) -> bool {
    r.supports(&["delete", "list", "watch"])
        && !IGNORED.iter().any(|(g, p)| r.api.group == *g && r.api.plural == *p)
}

/// The metadata the graph keeps of an object; None without a UID.
fn observe(o: &DynamicObject, api_version: &str, kind: &str) -> Option<Observed> {
    let m = &o.metadata;
    let uid = m.uid.clone().filter(|u| !u.is_empty())?;
    Some(Observed {
        identity: Identity {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            name: m.name.clone().unwrap_or_default(),
            uid,
            namespace: m.namespace.clone().unwrap_or_default(),
        },
        owners: m.owner_references.clone().unwrap_or_default(),
        being_deleted: m.deletion_timestamp.is_some(),
        finalizers: m.finalizers.clone().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: format!("rs-{uid}"),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    const ABSENT: OwnerState = OwnerState::Absent;
    const SOLID: OwnerState = OwnerState::Present { waiting: false };
    const WAITING: OwnerState = OwnerState::Present { waiting: true };

    #[test]
    fn classification() {
        let c = Classified::new([(r("a"), ABSENT), (r("b"), SOLID), (r("c"), WAITING)]);
        assert_eq!(c.dangling, vec![r("a")]);
        assert_eq!(c.solid, vec![r("b")]);
        assert_eq!(c.waiting_for_dependents_deletion, vec![r("c")]);
    }

    #[test]
    fn a_solid_owner_keeps_the_item_but_not_its_stale_references() {
        let c = Classified::new([(r("b"), SOLID)]);
        assert_eq!(decide(&c, false, false, &[]), Decision::Keep);
        let c = Classified::new([(r("a"), ABSENT), (r("b"), SOLID), (r("c"), WAITING)]);
        assert_eq!(decide(&c, true, false, &[]), Decision::RemoveReferences(vec!["a".into(), "c".into()]));
    }

    #[test]
    fn no_solid_owner_deletes() {
        let bg = Decision::Delete { policy: Policy::Background, unblock_first: false };
        let fg = Decision::Delete { policy: Policy::Foreground, unblock_first: false };
        let c = Classified::new([(r("a"), ABSENT)]);
        assert_eq!(decide(&c, true, false, &[]), bg);
        // A waiting owner and dependents of its own: foreground, unblocking on a cycle.
        let c = Classified::new([(r("a"), ABSENT), (r("c"), WAITING)]);
        assert_eq!(decide(&c, true, false, &[]), fg);
        assert_eq!(
            decide(&c, true, true, &[]),
            Decision::Delete { policy: Policy::Foreground, unblock_first: true }
        );
        // Without dependents the item's own finalizers decide.
        assert_eq!(decide(&c, false, false, &[]), bg);
        assert_eq!(
            decide(&c, false, false, &[ORPHAN.to_string()]),
            Decision::Delete { policy: Policy::Orphan, unblock_first: false }
        );
        assert_eq!(decide(&c, false, false, &[FOREGROUND.to_string()]), fg);
    }

    #[test]
    fn absent_cache_is_bounded() {
        let mut a = AbsentOwners::default();
        for i in 0..ABSENT_OWNER_CACHE_SIZE + 10 {
            a.add(Identity { uid: i.to_string(), ..Default::default() });
        }
        assert_eq!(a.set.len(), ABSENT_OWNER_CACHE_SIZE);
        assert!(!a.contains(&Identity { uid: "0".into(), ..Default::default() }));
        assert!(
            a.contains(&Identity { uid: (ABSENT_OWNER_CACHE_SIZE + 9).to_string(), ..Default::default() })
        );
    }

    #[test]
    fn events_are_not_collected() {
        let res = |group: &str, plural: &str| discovery::Resource {
            api: ApiResource {
                group: group.into(),
                version: "v1".into(),
                api_version: if group.is_empty() { "v1".into() } else { format!("{group}/v1") },
                kind: "X".into(),
                plural: plural.into(),
            },
            namespaced: true,
            verbs: ["delete", "list", "watch"].map(String::from).to_vec(),
        };
        assert!(!is_collectable(&res("", "events")));
        assert!(!is_collectable(&res("events.k8s.io", "events")));
        assert!(is_collectable(&res("", "pods")));
    }
}
