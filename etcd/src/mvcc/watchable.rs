//! Watchers over the store, split as etcd's `watchableStore` splits them: *synced* watchers
//! have seen every revision up to the newest and get new events as batches are applied;
//! *unsynced* watchers (new ones starting in the past, and slow ones whose stream was full)
//! catch up from the stored history in a background loop. Writers only ever `try_send`, so
//! a slow watcher falls back to unsynced instead of holding up the apply path.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prost::Message;
use proto::mvccpb::{Event, KeyValue, event::EventType};
use rocksdb::ReadOptions;
use tokio::sync::{Notify, mpsc};

use super::index::KeyRange;
use super::kvstore::KvStore;
use super::revision::Revision;
use crate::backend::{Backend, CF_KEY};

/// Most revisions one catch-up response carries (etcd's watchBatchMaxRevs).
const MAX_REVS_PER_RESPONSE: usize = 1000;
/// How often unsynced watchers are retried when nothing wakes the sync loop.
const SYNC_INTERVAL: Duration = Duration::from_millis(100);

/// What a watch stream receives from the store (and, as `Control`, from its own handler).
#[derive(Debug)]
pub enum WatchMsg {
    /// Events for one watcher, all at or below `revision`; no events is a progress
    /// notification.
    Events { watch_id: i64, events: Vec<Event>, revision: i64 },
    /// The watcher asked for compacted history; it has been removed.
    Compacted { watch_id: i64, compact_revision: i64 },
    /// Every watcher of the stream has seen all revisions up to `revision`.
    Progress { revision: i64 },
    /// A response the stream handler itself queues (created, canceled), kept in order with
    /// the events.
    Control(proto::etcdserverpb::WatchResponse),
}

/// Identifies a watcher: its stream and its id within the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WatcherKey {
    pub stream: u64,
    pub id: i64,
}

/// What a client asked to watch.
#[derive(Clone, Debug)]
pub struct WatchSpec {
    pub range: KeyRange,
    /// First revision to deliver; 0 means "after the current revision".
    pub start_rev: i64,
    pub filter_put: bool,
    pub filter_delete: bool,
    pub progress_notify: bool,
}

struct Watcher {
    spec: WatchSpec,
    /// The next revision this watcher has not been sent.
    min_rev: i64,
    tx: mpsc::Sender<WatchMsg>,
}

impl Watcher {
    fn wants(&self, ev: &Event) -> bool {
        let Some(kv) = &ev.kv else { return false };
        if kv.mod_revision < self.min_rev || !self.spec.range.contains(&kv.key) {
            return false;
        }
        let is_put = ev.r#type == EventType::Put as i32;
        !(is_put && self.spec.filter_put || !is_put && self.spec.filter_delete)
    }
}

#[derive(Default)]
struct Groups {
    synced: HashMap<WatcherKey, Watcher>,
    /// Synced watchers of single keys by key, so a put finds its watchers without a scan.
    synced_by_key: HashMap<Vec<u8>, Vec<WatcherKey>>,
    /// Synced watchers of ranges.
    synced_ranges: Vec<WatcherKey>,
    unsynced: HashMap<WatcherKey, Watcher>,
    /// Streams that asked for progress while some of their watchers were unsynced.
    progress_pending: HashMap<u64, mpsc::Sender<WatchMsg>>,
}

impl Groups {
    fn add_synced(&mut self, key: WatcherKey, w: Watcher) {
        if w.spec.range.is_single() {
            self.synced_by_key.entry(w.spec.range.start.clone()).or_default().push(key);
        } else {
            self.synced_ranges.push(key);
        }
        self.synced.insert(key, w);
    }

    fn remove_synced(&mut self, key: &WatcherKey) -> Option<Watcher> {
        let w = self.synced.remove(key)?;
        if w.spec.range.is_single() {
            if let Some(v) = self.synced_by_key.get_mut(&w.spec.range.start) {
                v.retain(|k| k != key);
                if v.is_empty() {
                    self.synced_by_key.remove(&w.spec.range.start);
                }
            }
        } else {
            self.synced_ranges.retain(|k| k != key);
        }
        Some(w)
    }

    fn stream_has_unsynced(&self, stream: u64) -> bool {
        self.unsynced.keys().any(|k| k.stream == stream)
    }
}

pub struct WatchableStore {
    store: Arc<KvStore>,
    backend: Arc<Backend>,
    groups: Mutex<Groups>,
    /// Wakes the sync loop when a watcher becomes unsynced.
    wake: Notify,
}

impl WatchableStore {
    pub fn new(store: Arc<KvStore>, backend: Arc<Backend>) -> Arc<Self> {
        Arc::new(Self { store, backend, groups: Mutex::default(), wake: Notify::new() })
    }

    /// Adds a watcher. It starts synced when it asks for no history.
    pub fn watch(&self, key: WatcherKey, spec: WatchSpec, tx: mpsc::Sender<WatchMsg>) {
        let current = self.store.current_rev();
        let mut groups = self.groups.lock();
        if spec.start_rev == 0 || spec.start_rev > current {
            let min_rev = if spec.start_rev == 0 { current + 1 } else { spec.start_rev };
            groups.add_synced(key, Watcher { spec, min_rev, tx });
        } else {
            let min_rev = spec.start_rev;
            groups.unsynced.insert(key, Watcher { spec, min_rev, tx });
            drop(groups);
            self.wake.notify_one();
        }
    }

    /// Removes a watcher; false if it did not exist (already canceled or compacted).
    pub fn cancel(&self, key: WatcherKey) -> bool {
        let mut groups = self.groups.lock();
        groups.remove_synced(&key).is_some() || groups.unsynced.remove(&key).is_some()
    }

    /// Removes every watcher of a stream that has gone away.
    pub fn cancel_stream(&self, stream: u64) {
        let mut groups = self.groups.lock();
        let keys: Vec<WatcherKey> = groups
            .synced
            .keys()
            .chain(groups.unsynced.keys())
            .filter(|k| k.stream == stream)
            .copied()
            .collect();
        for k in keys {
            groups.remove_synced(&k);
            groups.unsynced.remove(&k);
        }
        groups.progress_pending.remove(&stream);
    }

    /// Answers a progress request: now if all the stream's watchers are synced, otherwise
    /// as soon as they are.
    pub fn request_progress(&self, stream: u64, tx: mpsc::Sender<WatchMsg>) {
        let mut groups = self.groups.lock();
        if groups.stream_has_unsynced(stream) {
            groups.progress_pending.insert(stream, tx);
        } else {
            let _ = tx.try_send(WatchMsg::Progress { revision: self.store.current_rev() });
        }
    }

    /// Number of watchers (synced, unsynced).
    pub fn counts(&self) -> (usize, usize) {
        let g = self.groups.lock();
        (g.synced.len(), g.unsynced.len())
    }

    /// Delivers the events of an applied batch, whose newest revision is `rev`, to synced
    /// watchers. Called after `rev` is published. Never blocks on a watcher.
    pub fn notify(&self, events: &[Event], rev: i64) {
        if events.is_empty() {
            return;
        }
        let mut groups = self.groups.lock();
        if groups.synced.is_empty() {
            return;
        }
        let mut batches: HashMap<WatcherKey, Vec<Event>> = HashMap::new();
        for ev in events {
            let Some(kv) = &ev.kv else { continue };
            let by_key = groups.synced_by_key.get(&kv.key).into_iter().flatten();
            for key in by_key.chain(groups.synced_ranges.iter()) {
                let w = &groups.synced[key];
                if w.wants(ev) {
                    batches.entry(*key).or_default().push(ev.clone());
                }
            }
        }
        let mut fallen_behind = false;
        for (key, events) in batches {
            let first_rev = events[0].kv.as_ref().map_or(rev, |kv| kv.mod_revision);
            let w = groups.synced.get_mut(&key).expect("matched above");
            match w.tx.try_send(WatchMsg::Events { watch_id: key.id, events, revision: rev }) {
                Ok(()) => w.min_rev = rev + 1,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    // The stream is not keeping up: catch this watcher up from history later.
                    let mut w = groups.remove_synced(&key).expect("present");
                    w.min_rev = first_rev;
                    groups.unsynced.insert(key, w);
                    fallen_behind = true;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    groups.remove_synced(&key);
                }
            }
        }
        drop(groups);
        if fallen_behind {
            self.wake.notify_one();
        }
    }

    /// Moves every synced watcher to catching up, positioned after `seen` (the newest
    /// revision they have been sent): used when the store was replaced by a snapshot, so
    /// they continue from the new history (or learn it was compacted).
    pub fn resync_all(&self, seen: i64) {
        let mut groups = self.groups.lock();
        let keys: Vec<WatcherKey> = groups.synced.keys().copied().collect();
        for key in keys {
            let mut w = groups.remove_synced(&key).expect("listed");
            w.min_rev = w.min_rev.max(seen + 1);
            groups.unsynced.insert(key, w);
        }
        drop(groups);
        self.wake.notify_one();
    }

    /// Sends a progress notification to synced watchers that asked for them.
    pub fn notify_progress(&self) {
        let rev = self.store.current_rev();
        let groups = self.groups.lock();
        for (key, w) in &groups.synced {
            if w.spec.progress_notify {
                let _ =
                    w.tx.try_send(WatchMsg::Events { watch_id: key.id, events: Vec::new(), revision: rev });
            }
        }
    }

    /// Runs the catch-up loop until `shutdown` fires.
    pub async fn run_sync_loop(self: Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(SYNC_INTERVAL) => {}
                _ = shutdown.changed() => return,
            }
            let this = self.clone();
            // History reads are blocking backend I/O.
            let more = tokio::task::spawn_blocking(move || this.sync_unsynced()).await.unwrap_or(false);
            if more {
                self.wake.notify_one();
            }
        }
    }

    /// One round of catch-up. Returns true if unsynced watchers remain that could make
    /// progress right away.
    pub fn sync_unsynced(&self) -> bool {
        // Phase 1: what to read, under the lock.
        let (min_rev, snapshot_rev) = {
            let groups = self.groups.lock();
            if groups.unsynced.is_empty() {
                return false;
            }
            let min = groups.unsynced.values().map(|w| w.min_rev).min().expect("non-empty");
            (min, self.store.current_rev())
        };
        // Phase 2: read history without the lock, from a snapshot; compaction can only
        // have removed revisions at or below the compact revision read after the snapshot.
        let snapshot = self.backend.db().snapshot();
        let compact = self.store.compact_rev();
        // History at the compact revision itself is still readable (etcd cancels only
        // watchers that start below it).
        let read_from = min_rev.max(compact);
        let mut history = Vec::new();
        let mut last_read = snapshot_rev;
        if read_from <= snapshot_rev {
            let mut ro = ReadOptions::default();
            ro.set_snapshot(&snapshot);
            ro.fill_cache(false);
            ro.set_iterate_upper_bound(Revision::start_key(snapshot_rev + 1).to_vec());
            let iter = self.backend.db().iterator_cf_opt(
                self.backend.cf(CF_KEY),
                ro,
                rocksdb::IteratorMode::From(&Revision::start_key(read_from), rocksdb::Direction::Forward),
            );
            let mut revs_seen = 0;
            let mut prev_main = 0;
            for item in iter {
                let Ok((k, v)) = item else { break };
                let Some((rev, tombstone)) = Revision::from_key(&k) else { continue };
                if rev.main != prev_main {
                    if revs_seen == MAX_REVS_PER_RESPONSE {
                        last_read = prev_main;
                        break;
                    }
                    revs_seen += 1;
                    prev_main = rev.main;
                }
                let Ok(mut kv) = KeyValue::decode(&*v) else { continue };
                let ty = if tombstone {
                    kv.mod_revision = rev.main;
                    EventType::Delete
                } else {
                    EventType::Put
                };
                history.push(Event { r#type: ty as i32, kv: Some(kv), prev_kv: None });
            }
        }
        drop(snapshot);

        // Phase 3: deliver under the lock.
        let mut groups = self.groups.lock();
        let keys: Vec<WatcherKey> = groups.unsynced.keys().copied().collect();
        let mut more = false;
        for key in keys {
            let w = groups.unsynced.get_mut(&key).expect("listed above");
            if w.min_rev < compact {
                let msg = WatchMsg::Compacted { watch_id: key.id, compact_revision: compact };
                match w.tx.try_send(msg) {
                    Err(mpsc::error::TrySendError::Full(_)) => {}
                    _ => {
                        groups.unsynced.remove(&key);
                    }
                }
                continue;
            }
            if w.min_rev > last_read {
                let w = groups.unsynced.remove(&key).expect("present");
                if last_read == snapshot_rev {
                    groups.add_synced(key, w);
                } else {
                    groups.unsynced.insert(key, w);
                    more = true;
                }
                continue;
            }
            let events: Vec<Event> = history.iter().filter(|e| w.wants(e)).cloned().collect();
            let sent = if events.is_empty() {
                Ok(())
            } else {
                // Catch-up responses carry the revision the store had when they were read.
                w.tx.try_send(WatchMsg::Events { watch_id: key.id, events, revision: snapshot_rev })
            };
            match sent {
                Ok(()) => {
                    w.min_rev = last_read + 1;
                    if last_read == snapshot_rev {
                        let w = groups.unsynced.remove(&key).expect("present");
                        groups.add_synced(key, w);
                    } else {
                        more = true;
                    }
                }
                Err(mpsc::error::TrySendError::Full(_)) => {}
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    groups.unsynced.remove(&key);
                }
            }
        }
        // Progress requests that waited for these watchers.
        let streams: Vec<u64> = groups.progress_pending.keys().copied().collect();
        for stream in streams {
            if !groups.stream_has_unsynced(stream) {
                let tx = groups.progress_pending.remove(&stream).expect("listed");
                let _ = tx.try_send(WatchMsg::Progress { revision: snapshot_rev });
            }
        }
        more
    }
}
