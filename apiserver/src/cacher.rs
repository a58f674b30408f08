//! The watch cache (upstream's `storage/cacher`): one etcd watch per resource feeds an
//! in-memory copy of every object and a window of recent events. Gets, lists and watches
//! are served from it; writes go to etcd and come back through the watch.
//!
//! Reads at "the latest" first make sure the cache has caught up with etcd's current
//! revision (a consistent read, as upstream's ConsistentListFromCache). A watch from a
//! resourceVersion replays the window after it, or answers 410 Gone when the window no
//! longer reaches back that far.
//!
//! Objects are held encoded ([`CachedObject`]): a decoded `serde_json::Value` takes about
//! ten times its JSON in memory (a B-tree node per map), and encoded objects are written
//! into list responses and watch streams as they are, without encoding them per request.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use crate::errors::{ApiError, ApiResult};
use crate::registry::resource::Resource;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::storage::etcd3::{Change, Etcd, ProgressHandle, StorageError, WatchItem};

/// Events kept for watches that start in the past.
pub const WINDOW: usize = 10_000;
/// Events buffered per watcher before it is considered too slow and closed.
const WATCHER_BUFFER: usize = 1_000;
/// How long a consistent read waits for the cache to catch up before reading etcd.
const CATCH_UP_WAIT: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
    Bookmark,
    /// The watch ends with an error (its object is a Status), as upstream's ERROR event.
    Error,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
            Self::Bookmark => "BOOKMARK",
            Self::Error => "ERROR",
        }
    }
}

/// A change as the cache saw it.
#[derive(Clone, Debug)]
pub struct Event {
    pub kind: EventType,
    pub key: String,
    /// The object after the change (before it, for deletions, with the deletion's RV).
    pub obj: Arc<CachedObject>,
    pub prev: Option<Arc<CachedObject>>,
    pub rv: i64,
}

/// An object as the cache holds it: its JSON (with its resourceVersion), and what label
/// and field selectors look at.
#[derive(Debug)]
pub struct CachedObject {
    pub json: Bytes,
    pub rv: i64,
    namespace: Option<Box<str>>,
    name: Box<str>,
    labels: Option<Value>,
    /// The resource's selectable fields ([`crate::registry::resource::Hooks::fields`]).
    fields: Box<[(&'static str, String)]>,
}

impl CachedObject {
    /// Encodes `obj` (already carrying resourceVersion `rv`) for the cache.
    pub fn new(res: &Resource, obj: &Value, rv: i64) -> Self {
        let meta = &obj["metadata"];
        Self {
            json: Bytes::from(crate::serializer::object_bytes(obj)),
            rv,
            namespace: meta["namespace"].as_str().map(Into::into),
            name: meta["name"].as_str().unwrap_or_default().into(),
            labels: meta.get("labels").filter(|l| l.as_object().is_some_and(|m| !m.is_empty())).cloned(),
            fields: res.hooks.fields(obj).into_boxed_slice(),
        }
    }

    /// An object no selector looks at (bookmarks, errors).
    pub fn plain(obj: &Value) -> Self {
        Self {
            json: Bytes::from(crate::serializer::object_bytes(obj)),
            rv: 0,
            namespace: None,
            name: "".into(),
            labels: None,
            fields: Box::new([]),
        }
    }

    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The object decoded.
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.json).unwrap_or(Value::Null)
    }

    /// The same object at another revision (a deletion reports the last state at the
    /// deletion's revision).
    pub fn at_revision(&self, res: &Resource, rv: i64) -> Self {
        Self::new(res, &with_rv(self.value(), rv), rv)
    }
}

/// What a watcher or list wants.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    /// Whether a decoded object matches.
    pub fn matches(&self, res: &Resource, obj: &Value) -> bool {
        let meta = &obj["metadata"];
        self.matches_parts(
            meta["namespace"].as_str(),
            meta["name"].as_str().unwrap_or_default(),
            meta.get("labels"),
            || res.hooks.fields(obj),
        )
    }

    /// Whether a cached object matches.
    pub fn matches_cached(&self, obj: &CachedObject) -> bool {
        self.matches_parts(obj.namespace.as_deref(), &obj.name, obj.labels.as_ref(), || obj.fields.to_vec())
    }

    fn matches_parts(
        &self,
        namespace: Option<&str>,
        name: &str,
        labels: Option<&Value>,
        fields: impl FnOnce() -> Vec<(&'static str, String)>,
    ) -> bool {
        if let Some(ns) = &self.namespace
            && namespace != Some(ns.as_str())
        {
            return false;
        }
        if self.name.as_ref().is_some_and(|n| n != name) {
            return false;
        }
        if !self.labels.matches(labels) {
            return false;
        }
        if self.fields.is_empty() {
            return true;
        }
        let mut fields = fields();
        fields.push(("metadata.name", name.to_string()));
        fields.push(("metadata.namespace", namespace.unwrap_or_default().to_string()));
        self.fields.matches(&fields)
    }
}

struct Watcher {
    filter: Filter,
    tx: mpsc::Sender<Event>,
    bookmarks: bool,
}

struct State {
    /// Objects by key (`ns/name` or `name`).
    objects: BTreeMap<String, Arc<CachedObject>>,
    /// The revision the cache reflects.
    rv: i64,
    window: VecDeque<Event>,
    /// The window holds every event after this revision.
    window_from: i64,
    ready: bool,
}

pub struct Cacher {
    pub resource: Arc<Resource>,
    etcd: Etcd,
    /// `<prefix>/<etcd_resource>/`
    pub prefix: String,
    state: RwLock<State>,
    rv_tx: watch::Sender<i64>,
    watchers: Mutex<HashMap<u64, Watcher>>,
    next_watcher: AtomicU64,
    progress: Mutex<Option<ProgressHandle>>,
}

/// The key of an object under the resource prefix.
pub fn object_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// Sets `metadata.resourceVersion` on a stored object.
pub fn with_rv(mut obj: Value, rv: i64) -> Value {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
    obj
}

impl Cacher {
    pub fn new(resource: Arc<Resource>, etcd: Etcd, prefix: String) -> Arc<Self> {
        let (rv_tx, _) = watch::channel(0);
        Arc::new(Self {
            resource,
            etcd,
            prefix,
            state: RwLock::new(State {
                objects: BTreeMap::new(),
                rv: 0,
                window: VecDeque::new(),
                window_from: 0,
                ready: false,
            }),
            rv_tx,
            watchers: Mutex::new(HashMap::new()),
            next_watcher: AtomicU64::new(1),
            progress: Mutex::new(None),
        })
    }

    /// Keeps the cache in sync with etcd until the process ends.
    pub async fn run(self: Arc<Self>) {
        loop {
            if let Err(e) = self.list_and_watch().await {
                tracing::warn!(resource = self.resource.info.plural, "watch cache resyncing: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }

    async fn list_and_watch(&self) -> Result<(), StorageError> {
        let (kvs, rev) = self.etcd.list(&self.prefix, 0).await?;
        let mut objects = BTreeMap::new();
        for kv in kvs {
            let Some(key) = kv.key.strip_prefix(&self.prefix) else { continue };
            match serde_json::from_slice::<Value>(&kv.value) {
                Ok(v) => {
                    // The cache holds objects in this resource's shape (see Hooks::stored_to_served).
                    let v = with_rv(self.resource.hooks.stored_to_served(v), kv.mod_revision);
                    objects.insert(
                        key.to_string(),
                        Arc::new(CachedObject::new(&self.resource, &v, kv.mod_revision)),
                    );
                }
                Err(e) => tracing::error!(key = kv.key, "stored object does not decode: {e}"),
            }
        }
        {
            let mut st = self.state.write();
            st.objects = objects;
            st.rv = rev;
            st.window.clear();
            st.window_from = rev;
            st.ready = true;
        }
        // Watchers were following the old state: they must start over (and re-list).
        self.watchers.lock().clear();
        self.rv_tx.send_replace(rev);
        let mut stream = self.etcd.watch(&self.prefix, rev + 1).await?;
        *self.progress.lock() = Some(stream.progress_handle());
        while let Some(item) = stream.items.recv().await {
            match item? {
                WatchItem::Changes(changes) => self.apply(changes)?,
                WatchItem::Progress(r) => self.advance(r),
            }
        }
        Err(StorageError::Etcd("watch closed".into()))
    }

    fn advance(&self, rev: i64) {
        let mut st = self.state.write();
        if rev > st.rv {
            st.rv = rev;
            drop(st);
            self.rv_tx.send_replace(rev);
        }
    }

    /// Applies a batch of changes and sends their events. A stored value that does not
    /// decode ends the batch with an error: the cache then re-lists, which closes every
    /// watch on it (their clients re-list too) instead of letting the change vanish.
    fn apply(&self, changes: Vec<Change>) -> Result<(), StorageError> {
        let mut events = Vec::with_capacity(changes.len());
        let mut undecodable = None;
        let mut st = self.state.write();
        for c in changes {
            let Some(key) = c.key.strip_prefix(&self.prefix).map(str::to_string) else { continue };
            let prev = st.objects.get(&key).cloned();
            let event = match c.value {
                Some(bytes) => {
                    let v = match serde_json::from_slice::<Value>(&bytes) {
                        Ok(v) => v,
                        Err(e) => {
                            undecodable = Some(format!("stored object {} does not decode: {e}", c.key));
                            break;
                        }
                    };
                    let v = with_rv(self.resource.hooks.stored_to_served(v), c.mod_revision);
                    let obj = Arc::new(CachedObject::new(&self.resource, &v, c.mod_revision));
                    st.objects.insert(key.clone(), obj.clone());
                    let kind = if prev.is_some() { EventType::Modified } else { EventType::Added };
                    Event { kind, key, obj, prev, rv: c.mod_revision }
                }
                None => {
                    st.objects.remove(&key);
                    let Some(old) = prev.clone() else { continue };
                    // A deletion reports the last state, at the deletion's revision.
                    let obj = Arc::new(old.at_revision(&self.resource, c.mod_revision));
                    Event { kind: EventType::Deleted, key, obj, prev, rv: c.mod_revision }
                }
            };
            st.rv = st.rv.max(event.rv);
            st.window.push_back(event.clone());
            if st.window.len() > WINDOW
                && let Some(old) = st.window.pop_front()
            {
                st.window_from = old.rv;
            }
            events.push(event);
        }
        let rv = st.rv;
        drop(st);
        self.dispatch(&events);
        self.rv_tx.send_replace(rv);
        match undecodable {
            Some(e) => Err(StorageError::Etcd(e)),
            None => Ok(()),
        }
    }

    /// Sends events to the watchers they concern; a watcher that cannot keep up is closed
    /// (its client re-lists, as with upstream's cacher).
    fn dispatch(&self, events: &[Event]) {
        let mut watchers = self.watchers.lock();
        let mut gone = Vec::new();
        for (id, w) in watchers.iter() {
            for ev in events {
                let Some(out) = translate(&w.filter, ev) else { continue };
                if w.tx.try_send(out).is_err() {
                    gone.push(*id);
                    break;
                }
            }
        }
        for id in gone {
            watchers.remove(&id);
        }
    }

    /// The cache's revision.
    pub fn rv(&self) -> i64 {
        self.state.read().rv
    }

    /// Waits until the cache reflects at least `rev`.
    pub async fn wait_for(&self, rev: i64, limit: Duration) -> bool {
        let mut rx = self.rv_tx.subscribe();
        let wait = async {
            loop {
                let ready = self.state.read().ready;
                if ready && *rx.borrow_and_update() >= rev {
                    return;
                }
                if let Some(p) = self.progress.lock().as_ref() {
                    p.request();
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        };
        tokio::time::timeout(limit, wait).await.is_ok()
    }

    /// Makes the cache current with etcd (for reads with no resourceVersion). Returns
    /// false if it could not catch up in time; the caller then reads etcd.
    pub async fn sync(&self) -> ApiResult<bool> {
        let current = self.etcd.current_revision().await.map_err(|e| ApiError::internal(e.to_string()))?;
        Ok(self.wait_for(current, CATCH_UP_WAIT).await)
    }

    /// Waits for the first list after startup.
    pub async fn wait_ready(&self, limit: Duration) -> bool {
        self.wait_for(1, limit).await
    }

    pub fn get(&self, key: &str) -> Option<Arc<CachedObject>> {
        self.state.read().objects.get(key).cloned()
    }

    /// Matching objects in key order, starting after `after` (exclusive) when given, at
    /// most `limit` (0 = all); also whether more remain and the revision read at.
    pub fn list(
        &self,
        filter: &Filter,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<Arc<CachedObject>>, bool, i64) {
        use std::ops::Bound;
        let st = self.state.read();
        // A namespace's objects are contiguous: `ns/...` keys sort together.
        let ns_prefix =
            filter.namespace.as_ref().filter(|_| self.resource.info.namespaced).map(|ns| format!("{ns}/"));
        let start: Bound<&str> = match (after, &ns_prefix) {
            (Some(a), _) => Bound::Excluded(a),
            (None, Some(p)) => Bound::Included(p.as_str()),
            (None, None) => Bound::Unbounded,
        };
        let mut out = Vec::new();
        let mut more = false;
        for (key, obj) in st.objects.range::<str, _>((start, Bound::Unbounded)) {
            if let Some(p) = &ns_prefix
                && !key.starts_with(p.as_str())
            {
                if key.as_str() > p.as_str() {
                    break;
                }
                continue;
            }
            if !filter.matches_cached(obj) {
                continue;
            }
            if limit > 0 && out.len() == limit {
                more = true;
                break;
            }
            out.push(obj.clone());
        }
        (out, more, st.rv)
    }

    /// Starts a watch. `from` is the resourceVersion the client has seen (None or 0:
    /// begin with the current objects as ADDED events).
    pub fn watch(
        &self,
        filter: Filter,
        from: Option<i64>,
        bookmarks: bool,
        initial_events_end: bool,
    ) -> ApiResult<(mpsc::Receiver<Event>, u64)> {
        let st = self.state.read();
        let mut backlog: Vec<Event> = match from {
            None | Some(0) => st
                .objects
                .iter()
                .filter(|(_, o)| filter.matches_cached(o))
                .map(|(k, o)| Event {
                    kind: EventType::Added,
                    key: k.clone(),
                    obj: o.clone(),
                    prev: None,
                    rv: o.rv,
                })
                .collect(),
            Some(rv) => {
                if rv < st.window_from {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {rv} ({})",
                        st.window_from + 1
                    )));
                }
                st.window.iter().filter(|e| e.rv > rv).filter_map(|e| translate(&filter, e)).collect()
            }
        };
        if initial_events_end {
            backlog.push(self.bookmark(st.rv, true));
        }
        // Room for the whole backlog (the current state, or at most the window) and then
        // the usual buffer for live events.
        let (tx, rx) = mpsc::channel(backlog.len() + WATCHER_BUFFER);
        for ev in backlog {
            let _ = tx.try_send(ev);
        }
        let id = self.next_watcher.fetch_add(1, Ordering::Relaxed);
        self.watchers.lock().insert(id, Watcher { filter, tx, bookmarks });
        drop(st);
        Ok((rx, id))
    }

    pub fn stop_watch(&self, id: u64) {
        self.watchers.lock().remove(&id);
    }

    /// A bookmark at `rv`; `initial_events_end` marks the end of a streaming list's
    /// initial state, as upstream's `k8s.io/initial-events-end` annotation.
    fn bookmark(&self, rv: i64, initial_events_end: bool) -> Event {
        let mut obj = serde_json::json!({
            "kind": self.resource.info.kind,
            "apiVersion": self.resource.info.api_version(),
            "metadata": { "resourceVersion": rv.to_string() },
        });
        if initial_events_end {
            obj["metadata"]["annotations"] = serde_json::json!({ "k8s.io/initial-events-end": "true" });
        }
        Event {
            kind: EventType::Bookmark,
            key: String::new(),
            obj: Arc::new(CachedObject::plain(&obj)),
            prev: None,
            rv,
        }
    }

    /// Sends a bookmark with the current revision to watchers that asked for them.
    pub fn send_bookmarks(&self) {
        let event = self.bookmark(self.rv(), false);
        let watchers = self.watchers.lock();
        for w in watchers.values().filter(|w| w.bookmarks) {
            let _ = w.tx.try_send(event.clone());
        }
    }

    /// Number of objects cached (apiserver_storage_objects).
    pub fn len(&self) -> usize {
        self.state.read().objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of open watches.
    pub fn watcher_count(&self) -> usize {
        self.watchers.lock().len()
    }
}

/// What a watcher with `filter` sees of an event: an object entering the selection is
/// ADDED, one leaving it is DELETED (upstream's semantics for selector watches).
pub(crate) fn translate(filter: &Filter, ev: &Event) -> Option<Event> {
    let now = filter.matches_cached(&ev.obj);
    let before = ev.prev.as_ref().is_some_and(|p| filter.matches_cached(p));
    let kind = match ev.kind {
        EventType::Added if now => EventType::Added,
        EventType::Modified if now && before => EventType::Modified,
        EventType::Modified if now => EventType::Added,
        EventType::Modified if before => EventType::Deleted,
        EventType::Deleted if before || now => EventType::Deleted,
        _ => return None,
    };
    Some(Event { kind, ..ev.clone() })
}
