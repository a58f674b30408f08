//! Shared informers: one watch per resource type, feeding an in-memory store that every
//! controller reads, and handlers that every interested controller registers — so ten
//! controllers watching pods cost the API server one watch, as client-go's
//! `SharedInformerFactory`. A re-list (after a watch expires) is diffed against the store
//! so handlers still see the adds, updates and deletes they missed.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use futures::StreamExt;
use futures::future::BoxFuture;
use kube::Resource;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::{Mutex, RwLock};
use serde::de::DeserializeOwned;

use component_base::shutdown::Shutdown;

/// What an informer tells its handlers. Objects are shared, never copied per handler.
pub enum Event<'a, K> {
    Add(&'a Arc<K>),
    /// The old and the new object.
    Update(&'a Arc<K>, &'a Arc<K>),
    Delete(&'a Arc<K>),
}

type Handler<K> = Box<dyn Fn(&Event<'_, K>) + Send + Sync>;

/// The store key of an object: `namespace/name`, or `name` for cluster-scoped objects,
/// as client-go's `MetaNamespaceKeyFunc`.
pub fn key_of<K: Resource>(obj: &K) -> String {
    let meta = obj.meta();
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_owned(),
    }
}

/// Splits a key made by [`key_of`] into namespace (empty when cluster-scoped) and name.
pub fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

/// One resource type's watch, store and handlers.
pub struct Informer<K> {
    kind: String,
    store: RwLock<BTreeMap<String, Arc<K>>>,
    handlers: RwLock<Vec<Handler<K>>>,
    synced: AtomicBool,
}

impl<K> Informer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn new(kind: String) -> Self {
        Self { kind, store: RwLock::default(), handlers: RwLock::default(), synced: AtomicBool::new(false) }
    }

    /// Registers a handler; it must be added before the factory starts to see the
    /// initial list.
    pub fn add_handler(&self, f: impl Fn(&Event<'_, K>) + Send + Sync + 'static) {
        self.handlers.write().push(Box::new(f));
    }

    /// The object with this key (see [`key_of`]).
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.store.read().get(key).cloned()
    }

    pub fn get_namespaced(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.get(&format!("{namespace}/{name}"))
    }

    /// Every object in the store.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.store.read().values().cloned().collect()
    }

    /// The objects of one namespace, without scanning the others.
    pub fn list_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        let lo = format!("{namespace}/");
        // '0' follows '/' in ASCII: the range holds exactly the keys `namespace/...`.
        let hi = format!("{namespace}0");
        self.store.read().range(lo..hi).map(|(_, v)| v.clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.store.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.store.read().is_empty()
    }

    /// Whether the first list has been stored and handed to the handlers.
    pub fn has_synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    fn notify(&self, event: &Event<'_, K>) {
        for h in self.handlers.read().iter() {
            h(event);
        }
    }

    fn apply(&self, obj: K) {
        let key = key_of(&obj);
        let new = Arc::new(obj);
        let old = self.store.write().insert(key, new.clone());
        match old {
            Some(old) => self.notify(&Event::Update(&old, &new)),
            None => self.notify(&Event::Add(&new)),
        }
    }

    fn delete(&self, obj: K) {
        let key = key_of(&obj);
        let old = self.store.write().remove(&key);
        // The last state the store saw is what handlers get; a delete of an object the
        // store never held still reaches them (its owner may need to know).
        let gone = old.unwrap_or_else(|| Arc::new(obj));
        self.notify(&Event::Delete(&gone));
    }

    /// Replaces the store with a complete list, telling handlers what changed.
    fn replace(&self, list: Vec<K>) {
        let fresh: BTreeMap<String, Arc<K>> = list.into_iter().map(|o| (key_of(&o), Arc::new(o))).collect();
        let old = std::mem::replace(&mut *self.store.write(), fresh.clone());
        for (key, new_obj) in &fresh {
            match old.get(key) {
                None => self.notify(&Event::Add(new_obj)),
                Some(old_obj) => {
                    let (o, n) = (old_obj.meta(), new_obj.meta());
                    if o.resource_version != n.resource_version || o.uid != n.uid {
                        self.notify(&Event::Update(old_obj, new_obj));
                    }
                }
            }
        }
        for (key, old_obj) in &old {
            if !fresh.contains_key(key) {
                self.notify(&Event::Delete(old_obj));
            }
        }
        self.synced.store(true, Ordering::SeqCst);
    }

    /// Watches `api` until shutdown, retrying with backoff after errors.
    async fn run(self: Arc<Self>, api: Api<K>, config: watcher::Config, shutdown: Shutdown) {
        let stream = watcher(api, config).default_backoff();
        futures::pin_mut!(stream);
        let mut relist: Vec<K> = Vec::new();
        let stop = shutdown.wait();
        tokio::pin!(stop);
        loop {
            let ev = tokio::select! {
                () = &mut stop => return,
                ev = stream.next() => ev,
            };
            match ev {
                None => return,
                Some(Err(err)) => tracing::warn!(%err, kind = %self.kind, "watch failed; retrying"),
                Some(Ok(watcher::Event::Init)) => relist.clear(),
                Some(Ok(watcher::Event::InitApply(o))) => relist.push(o),
                Some(Ok(watcher::Event::InitDone)) => self.replace(std::mem::take(&mut relist)),
                Some(Ok(watcher::Event::Apply(o))) => self.apply(o),
                Some(Ok(watcher::Event::Delete(o))) => self.delete(o),
            }
        }
    }
}

struct Entry {
    informer: Arc<dyn Any + Send + Sync>,
    run: Option<BoxFuture<'static, ()>>,
    synced: Box<dyn Fn() -> bool + Send + Sync>,
    /// Created after `start` (the garbage collector's discovered resources): not part of
    /// [`Factory::has_synced`], so one unlistable resource cannot hold every controller.
    late: bool,
}

/// The informers of one process, created on first request and started together.
pub struct Factory {
    client: kube::Client,
    shutdown: Shutdown,
    entries: Mutex<HashMap<String, Entry>>,
    started: AtomicBool,
    running: AtomicUsize,
}

impl Factory {
    pub fn new(client: kube::Client, shutdown: Shutdown) -> Arc<Self> {
        Arc::new(Self {
            client,
            shutdown,
            entries: Mutex::default(),
            started: AtomicBool::new(false),
            running: AtomicUsize::new(0),
        })
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// The cluster-wide informer of a built-in type.
    pub fn get<K>(&self) -> Arc<Informer<K>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let id = format!("{:?}", TypeId::of::<K>());
        self.get_or_create(
            id,
            K::kind(&()).into_owned(),
            || Api::<K>::all(self.client.clone()),
            watcher::Config::default(),
        )
    }

    /// An informer over `api` (a namespace, say) with its own watch, under `name`.
    pub fn get_with<K>(&self, name: &str, api: Api<K>, config: watcher::Config) -> Arc<Informer<K>>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        self.get_or_create(format!("custom:{name}"), name.to_owned(), || api, config)
    }

    fn get_or_create<K>(
        &self,
        id: String,
        kind: String,
        api: impl FnOnce() -> Api<K>,
        config: watcher::Config,
    ) -> Arc<Informer<K>>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let mut entries = self.entries.lock();
        if let Some(e) = entries.get(&id) {
            return e.informer.clone().downcast::<Informer<K>>().expect("one type per informer id");
        }
        let informer = Arc::new(Informer::<K>::new(kind));
        let run = informer.clone().run(api(), config, self.shutdown.clone());
        let synced = {
            let i = informer.clone();
            Box::new(move || i.has_synced())
        };
        let late = self.started.load(Ordering::SeqCst);
        let mut entry = Entry { informer: informer.clone(), run: Some(Box::pin(run)), synced, late };
        if late {
            self.spawn(&mut entry);
        }
        entries.insert(id, entry);
        informer
    }

    fn spawn(&self, entry: &mut Entry) {
        if let Some(run) = entry.run.take() {
            self.running.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(run);
        }
    }

    /// Starts every informer created so far; later ones start as they are created.
    pub fn start(&self) {
        self.started.store(true, Ordering::SeqCst);
        let mut entries = self.entries.lock();
        for e in entries.values_mut() {
            self.spawn(e);
        }
    }

    /// Whether every informer created before `start` has listed once; those created later
    /// are waited for by whoever created them.
    pub fn has_synced(&self) -> bool {
        self.entries.lock().values().filter(|e| !e.late).all(|e| (e.synced)())
    }

    /// Waits until every informer has listed once (client-go's `WaitForCacheSync`).
    pub async fn wait_synced(&self) {
        while !self.has_synced() {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Number of watches started.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(ns: &str, name: &str, rv: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                uid: Some(format!("{ns}-{name}")),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn relist_reports_what_was_missed() {
        let inf = Informer::<ConfigMap>::new("ConfigMap".into());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        inf.add_handler(move |e| {
            let what = match e {
                Event::Add(o) => format!("add {}", key_of(&***o)),
                Event::Update(_, n) => format!("update {}", key_of(&***n)),
                Event::Delete(o) => format!("delete {}", key_of(&***o)),
            };
            s.lock().push(what);
        });
        inf.replace(vec![cm("a", "x", "1"), cm("a", "y", "1"), cm("b", "x", "1")]);
        assert!(inf.has_synced());
        assert_eq!(inf.list_namespace("a").len(), 2);
        seen.lock().clear();
        inf.replace(vec![cm("a", "x", "2"), cm("a", "y", "1"), cm("c", "z", "1")]);
        let mut got = seen.lock().clone();
        got.sort();
        assert_eq!(got, vec!["add c/z", "delete b/x", "update a/x"]);
        inf.delete(cm("a", "y", "1"));
        assert!(inf.get("a/y").is_none());
        assert_eq!(inf.list_namespace("a").len(), 1);
    }
}
