//! The multi-version key-value store: values by revision in the backend's "key" column
//! family, the key → revisions index in memory.
//!
//! Only the apply path writes. It allocates one main revision per transaction that writes,
//! updates the index at once and buffers values in a [`StoreWriter`]; readers see a revision
//! only after the backend holds it and [`KvStore::publish`] moved `current_rev` past it. The
//! index may therefore hold revisions newer than `current_rev`: every lookup is bounded by
//! the revision it reads at, so readers never see a write before it is stored.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use parking_lot::{Mutex, RwLock};
use prost::Message;
use proto::mvccpb::{Event, KeyValue, event::EventType};
use rocksdb::{ReadOptions, WriteBatch};

use super::index::{KeyRange, TreeIndex};
use super::revision::Revision;
use crate::backend::{Backend, BackendError, CF_KEY};

/// Meta keys, named after etcd's meta bucket where one exists.
pub const META_CURRENT_REV: &[u8] = b"currentRev";
pub const META_SCHEDULED_COMPACT: &[u8] = b"scheduledCompactRev";
pub const META_FINISHED_COMPACT: &[u8] = b"finishedCompactRev";

/// Revisions deleted per backend write while compacting, so compaction never holds up
/// the apply path with one huge batch.
const COMPACTION_BATCH: usize = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum MvccError {
    #[error("mvcc: required revision has been compacted")]
    Compacted,
    #[error("mvcc: required revision is a future revision")]
    FutureRev,
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("mvcc: stored value at revision {rev} does not decode: {source}")]
    Decode {
        rev: Revision,
        #[source]
        source: prost::DecodeError,
    },
    #[error("mvcc: revision {0} is in the index but not in the backend")]
    Missing(Revision),
}

impl From<rocksdb::Error> for MvccError {
    fn from(e: rocksdb::Error) -> Self {
        MvccError::Backend(BackendError::Db(e))
    }
}

pub type Result<T, E = MvccError> = std::result::Result<T, E>;

/// Live keys attached to a lease: (key, lease id).
pub type LeasedKeys = Vec<(Vec<u8>, i64)>;

#[derive(Clone, Copy, Debug, Default)]
pub struct RangeOptions {
    /// Read at this revision; 0 or less reads at the newest.
    pub rev: i64,
    /// Return at most this many key-values; 0 means no limit.
    pub limit: usize,
    /// Only count.
    pub count_only: bool,
}

#[derive(Debug, Default)]
pub struct RangeResult {
    pub kvs: Vec<KeyValue>,
    /// The store's revision when the range was read (what the response header carries,
    /// even for a read in the past, as etcd's does).
    pub rev: i64,
    /// Number of keys in the range, regardless of `limit`.
    pub count: usize,
}

pub struct KvStore {
    backend: Arc<Backend>,
    index: RwLock<TreeIndex>,
    /// Newest revision whose writes are in the backend; readers read at or below it.
    current_rev: AtomicI64,
    /// Reads below this revision fail with `Compacted`.
    compact_rev: AtomicI64,
    /// Serializes physical compactions.
    compaction: Mutex<()>,
}

impl KvStore {
    /// Opens the store over the backend, rebuilding the index from the stored revisions.
    /// Revisions start at 1, as etcd's do: an empty store is at revision 1. Also returns
    /// the live keys that are attached to a lease, for the lessor to restore.
    pub fn open(backend: Arc<Backend>) -> Result<(Self, LeasedKeys)> {
        let loaded = Loaded::read(&backend)?;
        let store = Self {
            backend,
            index: RwLock::new(TreeIndex::default()),
            current_rev: AtomicI64::new(0),
            compact_rev: AtomicI64::new(0),
            compaction: Mutex::new(()),
        };
        let leased = store.install(loaded)?;
        Ok((store, leased))
    }

    /// Rebuilds the store from the backend after its contents were replaced wholesale (a
    /// raft snapshot was installed). Returns the leased keys, as [`KvStore::open`] does.
    pub fn reload(&self) -> Result<LeasedKeys> {
        let loaded = Loaded::read(&self.backend)?;
        self.install(loaded)
    }

    fn install(&self, loaded: Loaded) -> Result<LeasedKeys> {
        let scheduled = loaded.scheduled_compact;
        {
            let mut index = self.index.write();
            *index = loaded.index;
            self.current_rev.store(loaded.current, Ordering::Release);
            self.compact_rev.store(scheduled, Ordering::Release);
        }
        if scheduled > 0 {
            // Finish a compaction a crash interrupted (or redo it: deleting is idempotent).
            let keep = self.index.write().compact(scheduled);
            self.physical_compact(scheduled, &keep)?;
        }
        Ok(loaded.leased)
    }

    pub fn current_rev(&self) -> i64 {
        self.current_rev.load(Ordering::Acquire)
    }

    pub fn compact_rev(&self) -> i64 {
        self.compact_rev.load(Ordering::Acquire)
    }

    /// Makes revisions up to `rev` visible; called after their batch is in the backend.
    pub fn publish(&self, rev: i64) {
        self.current_rev.store(rev, Ordering::Release);
    }

    /// Number of keys the index tracks.
    pub fn index_len(&self) -> usize {
        self.index.read().len()
    }

    /// Reads a range as of `opts.rev`.
    pub fn range(&self, range: &KeyRange, opts: RangeOptions) -> Result<RangeResult> {
        // The index lock orders this read against compaction, which updates compact_rev and
        // the index together; the backend snapshot, taken under the lock, keeps the
        // revisions found here from being deleted before they are read.
        let index = self.index.read();
        let current = self.current_rev();
        let rev = check_rev(opts.rev, current, self.compact_rev())?;
        if opts.count_only {
            let (_, count) = index.revisions(range, rev, 1);
            return Ok(RangeResult { kvs: Vec::new(), rev: current, count });
        }
        let (revs, count) = index.revisions(range, rev, opts.limit);
        let snapshot = self.backend.db().snapshot();
        drop(index);
        let mut ro = ReadOptions::default();
        ro.set_snapshot(&snapshot);
        let kvs = self.fetch(&revs, ro, &HashMap::new())?;
        Ok(RangeResult { kvs, rev: current, count })
    }

    /// Reads the values of `revs` (none of them tombstones), from `pending` or the backend.
    fn fetch(
        &self,
        revs: &[Revision],
        ro: ReadOptions,
        pending: &HashMap<Revision, KeyValue>,
    ) -> Result<Vec<KeyValue>> {
        let cf = self.backend.cf(CF_KEY);
        let mut out: Vec<Option<KeyValue>> = revs.iter().map(|r| pending.get(r).cloned()).collect();
        let missing: Vec<(usize, [u8; 17])> = revs
            .iter()
            .enumerate()
            .filter(|(i, _)| out[*i].is_none())
            .map(|(i, r)| (i, r.to_bytes()))
            .collect();
        if !missing.is_empty() {
            let values =
                self.backend.db().batched_multi_get_cf_opt(cf, missing.iter().map(|(_, k)| k), false, &ro);
            for ((i, _), v) in missing.iter().zip(values) {
                let rev = revs[*i];
                let v = v?.ok_or(MvccError::Missing(rev))?;
                out[*i] = Some(KeyValue::decode(&*v).map_err(|source| MvccError::Decode { rev, source })?);
            }
        }
        Ok(out.into_iter().map(|kv| kv.expect("filled above")).collect())
    }

    /// Starts writing: the applier records one apply batch's transactions through it.
    pub fn writer<'a>(&'a self, batch: &'a mut WriteBatch) -> StoreWriter<'a> {
        StoreWriter {
            store: self,
            batch,
            rev: self.current_rev(),
            pending: HashMap::new(),
            events: Vec::new(),
            compactions: Vec::new(),
        }
    }

    /// Deletes from the backend every revision at or below `at` that `keep` does not list.
    /// Runs off the apply path; concurrent compactions run one after the other.
    pub fn physical_compact(&self, at: i64, keep: &HashSet<Revision>) -> Result<()> {
        let _serial = self.compaction.lock();
        let cf = self.backend.cf(CF_KEY);
        let end = Revision::start_key(at + 1);
        let mut from = Vec::new();
        loop {
            let mut batch = WriteBatch::default();
            let mut n = 0;
            let mut next = None;
            self.backend.scan(CF_KEY, &from, |k, _| {
                if k >= &end[..] {
                    return Ok(false);
                }
                if n == COMPACTION_BATCH {
                    next = Some(k.to_vec());
                    return Ok(false);
                }
                n += 1;
                if let Some((rev, _)) = Revision::from_key(k)
                    && !keep.contains(&rev)
                {
                    batch.delete_cf(cf, k);
                }
                Ok(true)
            })?;
            if next.is_none() {
                self.backend.put_meta_u64(&mut batch, META_FINISHED_COMPACT, at as u64);
            }
            self.backend.write(batch, false)?;
            match next {
                Some(k) => from = k,
                None => return Ok(()),
            }
        }
    }

    /// etcd's HashKV: crc32c over the stored revisions up to `rev`, skipping those the
    /// scheduled compaction will delete. Returns (hash, revision hashed, compact revision).
    pub fn hash_kv(&self, rev: i64) -> Result<(u32, i64, i64)> {
        let index = self.index.read();
        let current = self.current_rev();
        let compact = self.compact_rev();
        if rev > 0 && rev > current {
            return Err(MvccError::FutureRev);
        }
        if rev > 0 && rev < compact {
            return Err(MvccError::Compacted);
        }
        let rev = if rev <= 0 { current } else { rev };
        let keep = index.keep(compact);
        let snapshot = self.backend.db().snapshot();
        drop(index);

        let upper = Revision::new(rev + 1, 0);
        let lower = Revision::new(compact + 1, 0);
        let mut hash = crc32c::crc32c(b"key");
        let mut ro = ReadOptions::default();
        ro.set_snapshot(&snapshot);
        ro.fill_cache(false);
        let iter =
            self.backend.db().iterator_cf_opt(self.backend.cf(CF_KEY), ro, rocksdb::IteratorMode::Start);
        for item in iter {
            let (k, v) = item?;
            let Some((kr, _)) = Revision::from_key(&k) else { continue };
            if kr >= upper {
                break;
            }
            if kr < lower && !keep.is_empty() && !keep.contains(&kr) {
                continue;
            }
            hash = crc32c::crc32c_append(hash, &k);
            hash = crc32c::crc32c_append(hash, &v);
        }
        Ok((hash, rev, compact))
    }
}

/// Resolves the revision a read asks for against the store's current and compacted ones.
fn check_rev(asked: i64, current: i64, compact: i64) -> Result<i64> {
    let rev = if asked <= 0 { current } else { asked };
    if rev > current {
        return Err(MvccError::FutureRev);
    }
    if rev < compact {
        return Err(MvccError::Compacted);
    }
    Ok(rev)
}

/// The writes of one apply batch. Transactions (see [`StoreWriter::txn`]) get consecutive
/// main revisions; reads inside the batch see the batch's own earlier writes.
pub struct StoreWriter<'a> {
    store: &'a KvStore,
    batch: &'a mut WriteBatch,
    /// The newest main revision allocated so far.
    rev: i64,
    /// Values written in this batch, not yet readable from the backend.
    pending: HashMap<Revision, KeyValue>,
    /// Events of this batch in revision order, for watchers.
    events: Vec<Event>,
    /// Compactions scheduled by this batch: (revision, revisions to keep).
    compactions: Vec<(i64, HashSet<Revision>)>,
}

/// What a finished apply batch leaves for the caller.
pub struct WriterOutput {
    pub rev: i64,
    pub events: Vec<Event>,
    pub compactions: Vec<(i64, HashSet<Revision>)>,
}

impl<'a> StoreWriter<'a> {
    pub fn rev(&self) -> i64 {
        self.rev
    }

    pub fn compact_rev(&self) -> i64 {
        self.store.compact_rev()
    }

    /// The shared write batch, for state that must commit with these writes (leases, meta).
    pub fn batch(&mut self) -> &mut WriteBatch {
        self.batch
    }

    /// Starts a transaction: every write in it shares one main revision.
    pub fn txn(&mut self) -> TxnWriter<'_, 'a> {
        let main = self.rev + 1;
        TxnWriter { w: self, main, sub: 0 }
    }

    /// Schedules a compaction at `at`: the index is compacted now; the caller deletes
    /// the dead revisions from the backend once this batch is stored.
    pub fn compact(&mut self, at: i64) -> Result<()> {
        let mut index = self.store.index.write();
        let compact = self.store.compact_rev();
        if at <= compact {
            return Err(MvccError::Compacted);
        }
        if at > self.rev {
            return Err(MvccError::FutureRev);
        }
        let keep = index.compact(at);
        self.store.compact_rev.store(at, Ordering::Release);
        drop(index);
        self.store.backend.put_meta_u64(self.batch, META_SCHEDULED_COMPACT, at as u64);
        self.compactions.push((at, keep));
        Ok(())
    }

    /// Ends the batch: records the revision in the batch; the caller writes the batch and
    /// then publishes `rev`.
    pub fn finish(self) -> WriterOutput {
        self.store.backend.put_meta_u64(self.batch, META_CURRENT_REV, self.rev as u64);
        WriterOutput { rev: self.rev, events: self.events, compactions: self.compactions }
    }
}

/// One transaction of an apply batch.
pub struct TxnWriter<'w, 'a> {
    w: &'w mut StoreWriter<'a>,
    main: i64,
    /// Writes so far in this transaction.
    sub: i64,
}

impl TxnWriter<'_, '_> {
    /// The revision reads in this transaction see: its own writes once it has written.
    pub fn read_rev(&self) -> i64 {
        if self.sub > 0 { self.main } else { self.w.rev }
    }

    pub fn compact_rev(&self) -> i64 {
        self.w.store.compact_rev()
    }

    /// The revision this transaction's writes get.
    pub fn main_rev(&self) -> i64 {
        self.main
    }

    /// True once the transaction has written.
    pub fn has_writes(&self) -> bool {
        self.sub > 0
    }

    pub fn range(&self, range: &KeyRange, opts: RangeOptions) -> Result<RangeResult> {
        let current = self.read_rev();
        let index = self.w.store.index.read();
        let rev = check_rev(opts.rev, current, self.w.store.compact_rev())?;
        let (revs, count) = index.revisions(range, rev, if opts.count_only { 1 } else { opts.limit });
        if opts.count_only {
            return Ok(RangeResult { kvs: Vec::new(), rev: current, count });
        }
        let snapshot = self.w.store.backend.db().snapshot();
        drop(index);
        let mut ro = ReadOptions::default();
        ro.set_snapshot(&snapshot);
        let kvs = self.w.store.fetch(&revs, ro, &self.w.pending)?;
        Ok(RangeResult { kvs, rev: current, count })
    }

    /// The newest key-value of `key`, if live.
    pub fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        let mut r = self.range(&KeyRange::single(key), RangeOptions::default())?;
        Ok(r.kvs.pop())
    }

    /// The keys of `range` that are live now.
    pub fn live_keys(&self, range: &KeyRange) -> Vec<Vec<u8>> {
        let index = self.w.store.index.read();
        index.keys(range, self.read_rev()).into_iter().map(|(k, _)| k).collect()
    }

    pub fn put(&mut self, key: &[u8], value: Vec<u8>, lease: i64) {
        let rev = Revision::new(self.main, self.sub);
        let mut index = self.w.store.index.write();
        let (created, version) = match index.get(key, self.main) {
            Some(v) => (v.created.main, v.version + 1),
            None => (self.main, 1),
        };
        index.put(key, rev);
        drop(index);
        let kv = KeyValue {
            key: key.to_vec(),
            create_revision: created,
            mod_revision: self.main,
            version,
            value,
            lease,
        };
        self.w.batch.put_cf(self.w.store.backend.cf(CF_KEY), rev.to_key(false), kv.encode_to_vec());
        self.w.events.push(Event { r#type: EventType::Put as i32, kv: Some(kv.clone()), prev_kv: None });
        self.w.pending.insert(rev, kv);
        self.sub += 1;
    }

    /// Deletes every live key of `range`; returns the deleted keys.
    pub fn delete_range(&mut self, range: &KeyRange) -> Vec<Vec<u8>> {
        let keys = self.live_keys(range);
        for key in &keys {
            let rev = Revision::new(self.main, self.sub);
            let tombstone = KeyValue { key: key.clone(), ..Default::default() };
            self.w.batch.put_cf(self.w.store.backend.cf(CF_KEY), rev.to_key(true), tombstone.encode_to_vec());
            self.w.store.index.write().tombstone(key, rev);
            let event_kv = KeyValue { key: key.clone(), mod_revision: self.main, ..Default::default() };
            self.w.events.push(Event { r#type: EventType::Delete as i32, kv: Some(event_kv), prev_kv: None });
            self.sub += 1;
        }
        keys
    }

    /// Ends the transaction; the batch's revision moves on only if it wrote.
    pub fn end(self) -> i64 {
        if self.sub > 0 {
            self.w.rev = self.main;
        }
        self.w.rev
    }
}

/// What the backend holds, read into memory.
struct Loaded {
    index: TreeIndex,
    current: i64,
    scheduled_compact: i64,
    leased: LeasedKeys,
}

impl Loaded {
    fn read(backend: &Backend) -> Result<Self> {
        let current = backend.get_meta_u64(META_CURRENT_REV)?.map_or(1, |v| v as i64);
        let scheduled = backend.get_meta_u64(META_SCHEDULED_COMPACT)?.unwrap_or(0) as i64;
        let mut index = TreeIndex::default();
        let mut max_rev = 1;
        let mut leased: HashMap<Vec<u8>, i64> = HashMap::new();
        backend.scan(CF_KEY, &[], |k, v| {
            let Some((rev, tombstone)) = Revision::from_key(k) else {
                return Err(BackendError::Corrupt(format!("bad revision key {k:?}")));
            };
            let kv = KeyValue::decode(v).map_err(|e| {
                BackendError::Corrupt(format!("value at revision {rev} does not decode: {e}"))
            })?;
            index.restore(&kv.key, rev, tombstone, kv.create_revision, kv.version);
            if tombstone || kv.lease == 0 {
                leased.remove(&kv.key);
            } else {
                leased.insert(kv.key, kv.lease);
            }
            max_rev = max_rev.max(rev.main);
            Ok(true)
        })?;
        Ok(Self {
            index,
            current: current.max(max_rev).max(scheduled),
            scheduled_compact: scheduled,
            leased: leased.into_iter().collect(),
        })
    }
}

/// Reads meta values the store keeps; used by status and tests.
pub fn finished_compact_rev(backend: &Backend) -> Result<i64> {
    Ok(backend.get_meta_u64(META_FINISHED_COMPACT)?.unwrap_or(0) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &std::path::Path) -> (Arc<Backend>, KvStore) {
        let backend = Arc::new(Backend::open(dir).unwrap());
        let (store, _) = KvStore::open(backend.clone()).unwrap();
        (backend, store)
    }

    /// Runs one transaction in its own batch, stores and publishes it.
    fn apply(backend: &Backend, store: &KvStore, f: impl FnOnce(&mut TxnWriter<'_, '_>)) -> WriterOutput {
        let mut batch = WriteBatch::default();
        let mut w = store.writer(&mut batch);
        let mut txn = w.txn();
        f(&mut txn);
        txn.end();
        let out = w.finish();
        backend.write(batch, false).unwrap();
        store.publish(out.rev);
        out
    }

    fn get(store: &KvStore, key: &[u8], rev: i64) -> Result<Option<KeyValue>> {
        Ok(store.range(&KeyRange::single(key), RangeOptions { rev, ..Default::default() })?.kvs.pop())
    }

    #[test]
    fn revisions_versions_and_history() {
        let dir = tempfile::tempdir().unwrap();
        let (backend, store) = open(dir.path());
        assert_eq!(store.current_rev(), 1);
        apply(&backend, &store, |t| t.put(b"foo", b"v1".to_vec(), 0));
        apply(&backend, &store, |t| t.put(b"foo", b"v2".to_vec(), 0));
        let out = apply(&backend, &store, |t| {
            t.delete_range(&KeyRange::single(b"foo"));
        });
        assert_eq!(out.rev, 4);
        apply(&backend, &store, |t| t.put(b"foo", b"v3".to_vec(), 0));

        let kv = get(&store, b"foo", 3).unwrap().unwrap();
        assert_eq!(
            (kv.value.as_slice(), kv.create_revision, kv.mod_revision, kv.version),
            (&b"v2"[..], 2, 3, 2)
        );
        assert!(get(&store, b"foo", 4).unwrap().is_none());
        let kv = get(&store, b"foo", 0).unwrap().unwrap();
        assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (5, 5, 1));
        assert!(matches!(get(&store, b"foo", 6), Err(MvccError::FutureRev)));
    }

    #[test]
    fn writes_in_one_txn_share_a_revision_and_see_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let (backend, store) = open(dir.path());
        let out = apply(&backend, &store, |t| {
            t.put(b"a", b"1".to_vec(), 0);
            t.put(b"a", b"2".to_vec(), 0);
            let kv = t.get(b"a").unwrap().unwrap();
            assert_eq!((kv.value.as_slice(), kv.version), (&b"2"[..], 2));
        });
        assert_eq!(out.rev, 2);
        assert_eq!(out.events.len(), 2);
        // A read-only transaction does not move the revision.
        let out = apply(&backend, &store, |t| {
            t.get(b"a").unwrap();
        });
        assert_eq!(out.rev, 2);
    }

    #[test]
    fn compaction_and_restart() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (backend, store) = open(dir.path());
            for i in 0..5 {
                apply(&backend, &store, |t| t.put(b"k", vec![i], 0));
            }
            apply(&backend, &store, |t| t.put(b"other", b"x".to_vec(), 0));
            let mut batch = WriteBatch::default();
            let mut w = store.writer(&mut batch);
            w.compact(4).unwrap();
            let out = w.finish();
            backend.write(batch, false).unwrap();
            for (at, keep) in &out.compactions {
                store.physical_compact(*at, keep).unwrap();
            }
            assert!(matches!(get(&store, b"k", 3), Err(MvccError::Compacted)));
            assert_eq!(get(&store, b"k", 4).unwrap().unwrap().value, vec![2]);
        }
        let (_backend, store) = open(dir.path());
        assert_eq!(store.current_rev(), 7);
        assert_eq!(store.compact_rev(), 4);
        let kv = get(&store, b"k", 0).unwrap().unwrap();
        assert_eq!((kv.value, kv.version, kv.create_revision), (vec![4], 5, 2));
        assert_eq!(get(&store, b"k", 5).unwrap().unwrap().value, vec![3]);
    }

    #[test]
    fn hash_kv_is_stable_across_restart() {
        let dir = tempfile::tempdir().unwrap();
        let h1 = {
            let (backend, store) = open(dir.path());
            apply(&backend, &store, |t| t.put(b"a", b"1".to_vec(), 0));
            apply(&backend, &store, |t| t.put(b"b", b"2".to_vec(), 0));
            store.hash_kv(0).unwrap()
        };
        let (_b, store) = open(dir.path());
        assert_eq!(store.hash_kv(0).unwrap(), h1);
        assert_ne!(store.hash_kv(2).unwrap().0, h1.0);
    }
}
