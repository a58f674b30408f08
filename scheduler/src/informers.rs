//! Watches (kube-rs watchers) that keep the cache and the queue current: pods (bound ones
//! into the cache, pending ones of our profiles into the queue), nodes, namespaces, PVCs,
//! PVs and PodDisruptionBudgets. Each change that can help unschedulable pods is passed
//! to the queue as a cluster event. A re-list replaces what the cache held.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Resource;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

use crate::cache::Cache;
use crate::framework::labels::Selector;
use crate::framework::runtime::Profile;
use crate::framework::{PodInfo, events};
use crate::queue::SchedulingQueue;

/// Counts informers that have not finished their first list.
pub struct Synced {
    remaining: AtomicUsize,
    notify: Notify,
}

impl Synced {
    fn new(n: usize) -> Self {
        Self { remaining: AtomicUsize::new(n), notify: Notify::new() }
    }

    fn done_one(&self) {
        if self.remaining.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.notify.notify_waiters();
        }
    }

    pub fn is_synced(&self) -> bool {
        self.remaining.load(Ordering::SeqCst) == 0
    }

    /// Waits until every informer has listed once.
    pub async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_synced() {
                return;
            }
            notified.await;
        }
    }
}

enum Change<K> {
    Apply(K),
    Delete(K),
    /// The complete current list after a (re-)list.
    Replace(Vec<K>),
}

/// Where informer changes go.
#[derive(Clone)]
pub struct Handlers {
    pub cache: Arc<Mutex<Cache>>,
    pub queue: Arc<SchedulingQueue>,
    pub profiles: Arc<HashMap<String, Profile>>,
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

impl Handlers {
    fn pod_applied(&self, pod: Pod) {
        let terminal = is_terminal(&pod);
        let info = Arc::new(PodInfo::new(Arc::new(pod)));
        if !info.node_name.is_empty() {
            self.queue.delete(&info.key);
            let mut cache = self.cache.lock();
            if terminal {
                // Finished pods hold no resources.
                if cache.remove_pod(&info.uid).is_some() {
                    drop(cache);
                    self.queue.move_for_event(events::ASSIGNED_POD_DELETE);
                }
                return;
            }
            let added = cache.add_or_update_pod(info);
            drop(cache);
            self.queue.move_for_event(if added {
                events::ASSIGNED_POD_ADD
            } else {
                events::ASSIGNED_POD_UPDATE
            });
            return;
        }
        if !self.profiles.contains_key(&info.scheduler_name) {
            return;
        }
        let mut cache = self.cache.lock();
        if info.terminating || terminal {
            cache.clear_nomination(&info.uid);
            drop(cache);
            self.queue.delete(&info.key);
            return;
        }
        // An update of a pod whose binding is in flight (its own status patch, say) must
        // not queue it a second time.
        if cache.is_assumed(&info.uid) {
            return;
        }
        if info.nominated_node_name.is_empty() {
            cache.clear_nomination(&info.uid);
        } else {
            let node = info.nominated_node_name.clone();
            cache.nominate(info.clone(), &node);
        }
        drop(cache);
        self.queue.add_or_update(info);
    }

    fn pod_deleted(&self, pod: Pod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or(""),
            pod.metadata.name.as_deref().unwrap_or("")
        );
        self.queue.delete(&key);
        let removed = {
            let mut cache = self.cache.lock();
            cache.clear_nomination(&uid);
            cache.remove_pod(&uid).is_some()
        };
        if removed {
            self.queue.move_for_event(events::ASSIGNED_POD_DELETE);
        }
    }

    fn pods(&self, change: Change<Pod>) {
        match change {
            Change::Apply(p) => self.pod_applied(p),
            Change::Delete(p) => self.pod_deleted(p),
            Change::Replace(list) => {
                let keys: HashSet<String> = list
                    .iter()
                    .map(|p| {
                        format!(
                            "{}/{}",
                            p.metadata.namespace.as_deref().unwrap_or(""),
                            p.metadata.name.as_deref().unwrap_or("")
                        )
                    })
                    .collect();
                let uids: HashSet<String> = list.iter().filter_map(|p| p.metadata.uid.clone()).collect();
                for p in list {
                    self.pod_applied(p);
                }
                let gone = self.cache.lock().bound_pods_except(&uids);
                for uid in gone {
                    self.cache.lock().remove_pod(&uid);
                }
                self.queue.retain(&keys);
                self.queue.move_for_event(events::ASSIGNED_POD_DELETE);
            }
        }
    }

    fn nodes(&self, change: Change<Node>) {
        let mask = match change {
            Change::Apply(n) => self.cache.lock().add_or_update_node(Arc::new(n)),
            Change::Delete(n) => {
                self.cache.lock().remove_node(n.metadata.name.as_deref().unwrap_or(""));
                events::NODE_DELETE
            }
            Change::Replace(list) => {
                let names: HashSet<String> = list.iter().filter_map(|n| n.metadata.name.clone()).collect();
                let mut cache = self.cache.lock();
                let mut mask = 0;
                for n in list {
                    mask |= cache.add_or_update_node(Arc::new(n));
                }
                for gone in cache.node_names_except(&names) {
                    cache.remove_node(&gone);
                    mask |= events::NODE_DELETE;
                }
                mask
            }
        };
        if mask != 0 {
            self.queue.move_for_event(mask);
        }
    }
}

/// Replaces or updates one keyed map of the cache.
fn apply_map<K: Clone>(map: &mut HashMap<String, Arc<K>>, key: fn(&K) -> String, change: Change<K>) {
    match change {
        Change::Apply(o) => {
            map.insert(key(&o), Arc::new(o));
        }
        Change::Delete(o) => {
            map.remove(&key(&o));
        }
        Change::Replace(list) => {
            map.clear();
            for o in list {
                map.insert(key(&o), Arc::new(o));
            }
        }
    }
}

fn ns_key<K: Resource>(o: &K) -> String {
    format!("{}/{}", o.meta().namespace.as_deref().unwrap_or(""), o.meta().name.as_deref().unwrap_or(""))
}

fn name_key<K: Resource>(o: &K) -> String {
    o.meta().name.clone().unwrap_or_default()
}

async fn run_watch<K, F>(api: Api<K>, synced: Arc<Synced>, mut handle: F)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    F: FnMut(Change<K>) + Send,
{
    let mut stream = watcher(api, watcher::Config::default()).default_backoff().boxed();
    let mut listing: Vec<K> = Vec::new();
    let mut first = true;
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Init) => listing.clear(),
            Ok(watcher::Event::InitApply(o)) => listing.push(o),
            Ok(watcher::Event::InitDone) => {
                handle(Change::Replace(std::mem::take(&mut listing)));
                if std::mem::take(&mut first) {
                    synced.done_one();
                }
            }
            Ok(watcher::Event::Apply(o)) => handle(Change::Apply(o)),
            Ok(watcher::Event::Delete(o)) => handle(Change::Delete(o)),
            Err(err) => tracing::warn!(%err, kind = std::any::type_name::<K>(), "watch failed; retrying"),
        }
    }
}

/// Keeps `cache.controllers` (uid → selector) for one controller kind. Each kind's
/// re-list replaces only its own entries.
fn watch_controllers<K>(
    client: &kube::Client,
    synced: &Arc<Synced>,
    h: &Handlers,
    selector: fn(&K) -> Option<Selector>,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let h = h.clone();
    let mut mine: HashSet<String> = HashSet::new();
    tokio::spawn(run_watch(Api::<K>::all(client.clone()), synced.clone(), move |c| {
        let uid = |o: &K| o.meta().uid.clone().unwrap_or_default();
        let mut cache = h.cache.lock();
        match c {
            Change::Apply(o) => {
                if let Some(s) = selector(&o) {
                    mine.insert(uid(&o));
                    cache.controllers.insert(uid(&o), s);
                }
            }
            Change::Delete(o) => {
                mine.remove(&uid(&o));
                cache.controllers.remove(&uid(&o));
            }
            Change::Replace(list) => {
                for old in mine.drain() {
                    cache.controllers.remove(&old);
                }
                for o in list {
                    if let Some(s) = selector(&o) {
                        mine.insert(uid(&o));
                        cache.controllers.insert(uid(&o), s);
                    }
                }
            }
        }
    }));
}

/// Starts every informer; the returned [`Synced`] resolves once each has listed.
pub fn start(client: kube::Client, h: Handlers) -> Arc<Synced> {
    let synced = Arc::new(Synced::new(11));
    let spawn = |f: futures::future::BoxFuture<'static, ()>| {
        tokio::spawn(f);
    };
    {
        let h = h.clone();
        spawn(Box::pin(run_watch(Api::<Pod>::all(client.clone()), synced.clone(), move |c| h.pods(c))));
    }
    {
        let h = h.clone();
        spawn(Box::pin(run_watch(Api::<Node>::all(client.clone()), synced.clone(), move |c| h.nodes(c))));
    }
    {
        let h = h.clone();
        spawn(Box::pin(run_watch(Api::<Namespace>::all(client.clone()), synced.clone(), move |c| {
            let mut cache = h.cache.lock();
            let labels = |n: &Namespace| n.metadata.labels.clone().unwrap_or_default();
            match c {
                Change::Apply(n) => {
                    Arc::make_mut(&mut cache.namespaces).insert(name_key(&n), labels(&n));
                }
                Change::Delete(n) => {
                    Arc::make_mut(&mut cache.namespaces).remove(&name_key(&n));
                }
                Change::Replace(list) => {
                    cache.namespaces = Arc::new(list.iter().map(|n| (name_key(n), labels(n))).collect());
                }
            }
            drop(cache);
            h.queue.move_for_event(events::NAMESPACE);
        })));
    }
    {
        let h = h.clone();
        spawn(Box::pin(run_watch(
            Api::<PersistentVolumeClaim>::all(client.clone()),
            synced.clone(),
            move |c| {
                apply_map(&mut h.cache.lock().pvcs, ns_key, c);
                h.queue.move_for_event(events::PVC);
            },
        )));
    }
    {
        let h = h.clone();
        spawn(Box::pin(run_watch(Api::<PersistentVolume>::all(client.clone()), synced.clone(), move |c| {
            apply_map(&mut h.cache.lock().pvs, name_key, c);
            h.queue.move_for_event(events::PV);
        })));
    }
    {
        let h = h.clone();
        spawn(Box::pin(run_watch(Api::<StorageClass>::all(client.clone()), synced.clone(), move |c| {
            apply_map(&mut h.cache.lock().storage_classes, name_key, c);
            h.queue.move_for_event(events::STORAGE_CLASS);
        })));
    }
    {
        let h = h.clone();
        spawn(Box::pin(run_watch(
            Api::<PodDisruptionBudget>::all(client.clone()),
            synced.clone(),
            move |c| {
                apply_map(&mut h.cache.lock().pdbs, ns_key, c);
            },
        )));
    }
    {
        let h = h.clone();
        spawn(Box::pin(run_watch(Api::<Service>::all(client.clone()), synced.clone(), move |c| {
            let entry = |s: &Service| {
                let selector = s.spec.as_ref().and_then(|sp| sp.selector.clone()).unwrap_or_default();
                (ns_key(s), (s.metadata.namespace.clone().unwrap_or_default(), selector))
            };
            let mut cache = h.cache.lock();
            match c {
                Change::Apply(s) => {
                    let (k, v) = entry(&s);
                    cache.services.insert(k, v);
                }
                Change::Delete(s) => {
                    cache.services.remove(&ns_key(&s));
                }
                Change::Replace(list) => cache.services = list.iter().map(entry).collect(),
            }
        })));
    }
    // Controllers whose pods default topology spreading groups together, by kind.
    watch_controllers::<ReplicaSet>(&client, &synced, &h, |o| {
        o.spec.as_ref().map(|s| Selector::from_label_selector(Some(&s.selector)))
    });
    watch_controllers::<StatefulSet>(&client, &synced, &h, |o| {
        o.spec.as_ref().map(|s| Selector::from_label_selector(Some(&s.selector)))
    });
    watch_controllers::<ReplicationController>(&client, &synced, &h, |o| {
        let labels = o.spec.as_ref()?.selector.clone()?;
        let mut s = Selector::everything();
        for (k, v) in &labels {
            s.require(k, Some(v));
        }
        Some(s)
    });
    synced
}
