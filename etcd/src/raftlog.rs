//! The raft log on the backend's "raft" column family, implementing `raft::Storage`.
//!
//! Invariant (etcd's `Save(st, ents)` contract): entries and hard state handed to
//! [`RaftLog::append`] / [`RaftLog::set_hard_state`] are written to a batch the caller
//! stores with `sync` before any message that depends on them is sent. The entries not yet
//! applied are also kept in memory, so apply and replication of recent entries never read
//! the disk.

use std::collections::VecDeque;
use std::sync::Arc;

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};
use rocksdb::WriteBatch;

use crate::backend::{Backend, BackendError, CF_RAFT};
use crate::snapshotter::Snapshotter;

const KEY_HARD_STATE: &[u8] = b"\x00hardstate";
const KEY_CONF_STATE: &[u8] = b"\x00confstate";
/// (index, term) of the last entry removed by log compaction.
const KEY_COMPACTED: &[u8] = b"\x00compacted";
const ENTRY_PREFIX: u8 = 0x01;

/// Where the log of a new cluster starts (see [`RaftLog::bootstrap`]).
pub const BOOTSTRAP_INDEX: u64 = 1;
const BOOTSTRAP_TERM: u64 = 1;

fn entry_key(index: u64) -> [u8; 9] {
    let mut k = [ENTRY_PREFIX; 9];
    k[1..].copy_from_slice(&index.to_be_bytes());
    k
}

pub struct RaftLog {
    backend: Arc<Backend>,
    hard_state: HardState,
    conf_state: ConfState,
    /// The log holds entries after this index; `compacted_term` is that entry's term.
    compacted_index: u64,
    compacted_term: u64,
    last_index: u64,
    /// Consecutive entries ending at `last_index`.
    cache: VecDeque<Entry>,
    /// The index the state machine has applied (what a snapshot would capture).
    applied: u64,
    snapshotter: Option<Arc<Snapshotter>>,
}

fn corrupt(what: &str, e: impl std::fmt::Display) -> BackendError {
    BackendError::Corrupt(format!("raft {what}: {e}"))
}

impl RaftLog {
    /// Opens the log. `cache_from` is the first index worth caching (applied index + 1).
    pub fn open(backend: Arc<Backend>, cache_from: u64) -> Result<Self, BackendError> {
        let hard_state = match backend.get(CF_RAFT, KEY_HARD_STATE)? {
            Some(b) => HardState::parse_from_bytes(&b).map_err(|e| corrupt("hard state", e))?,
            None => HardState::default(),
        };
        let conf_state = match backend.get(CF_RAFT, KEY_CONF_STATE)? {
            Some(b) => ConfState::parse_from_bytes(&b).map_err(|e| corrupt("conf state", e))?,
            None => ConfState::default(),
        };
        let (compacted_index, compacted_term) = match backend.get(CF_RAFT, KEY_COMPACTED)? {
            Some(b) if b.len() == 16 => (
                u64::from_be_bytes(b[..8].try_into().expect("8")),
                u64::from_be_bytes(b[8..].try_into().expect("8")),
            ),
            Some(b) => return Err(corrupt("compaction point", format!("{} bytes", b.len()))),
            None => (0, 0),
        };
        let mut log = Self {
            backend,
            hard_state,
            conf_state,
            compacted_index,
            compacted_term,
            last_index: compacted_index,
            cache: VecDeque::new(),
            applied: cache_from.saturating_sub(1),
            snapshotter: None,
        };
        let from = cache_from.max(compacted_index + 1);
        let mut expected = compacted_index + 1;
        let mut entries = Vec::new();
        log.backend.scan(CF_RAFT, &entry_key(compacted_index + 1), |k, v| {
            if k.first() != Some(&ENTRY_PREFIX) {
                return Ok(false);
            }
            let e = Entry::parse_from_bytes(v).map_err(|e| corrupt("entry", e))?;
            if e.index != expected {
                return Err(corrupt("log", format!("entry {} where {} was expected", e.index, expected)));
            }
            expected += 1;
            if e.index >= from {
                entries.push(e);
            }
            Ok(true)
        })?;
        log.last_index = expected - 1;
        log.cache = entries.into();
        Ok(log)
    }

    /// Starts the log of a new cluster: every initial member begins identically, as if
    /// entry 1 of term 1 had set `conf_state` and been compacted away. A member that
    /// joins later has nothing, so the leader must send it a snapshot, which carries the
    /// whole configuration.
    pub fn bootstrap(&mut self, batch: &mut WriteBatch, conf_state: ConfState) {
        self.set_conf_state(batch, conf_state);
        self.set_compacted(batch, BOOTSTRAP_INDEX, BOOTSTRAP_TERM);
        self.last_index = BOOTSTRAP_INDEX;
        let hs = HardState { term: BOOTSTRAP_TERM, commit: BOOTSTRAP_INDEX, ..Default::default() };
        self.set_hard_state(batch, &hs);
    }

    /// Snapshots for lagging members come from here.
    pub fn set_snapshotter(&mut self, s: Arc<Snapshotter>) {
        self.snapshotter = Some(s);
    }

    /// Records how far the state machine has applied.
    pub fn set_applied(&mut self, applied: u64) {
        self.applied = applied;
    }

    /// Replaces the log with a snapshot's position: every entry goes, the log continues
    /// after the snapshot's index.
    pub fn apply_snapshot(&mut self, batch: &mut WriteBatch, index: u64, term: u64, conf_state: ConfState) {
        let cf = self.backend.cf(CF_RAFT);
        batch.delete_range_cf(cf, entry_key(0), entry_key(u64::MAX));
        self.cache.clear();
        self.set_compacted(batch, index, term);
        self.last_index = index;
        self.set_conf_state(batch, conf_state);
        self.set_commit(batch, index);
        self.applied = index;
    }

    fn set_compacted(&mut self, batch: &mut WriteBatch, index: u64, term: u64) {
        let mut v = Vec::with_capacity(16);
        v.extend_from_slice(&index.to_be_bytes());
        v.extend_from_slice(&term.to_be_bytes());
        batch.put_cf(self.backend.cf(CF_RAFT), KEY_COMPACTED, v);
        self.compacted_index = index;
        self.compacted_term = term;
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    pub fn last_index(&self) -> u64 {
        self.last_index
    }

    pub fn first_index(&self) -> u64 {
        self.compacted_index + 1
    }

    /// Appends entries, replacing any conflicting suffix.
    pub fn append(&mut self, batch: &mut WriteBatch, entries: &[Entry]) {
        let Some(first) = entries.first() else { return };
        let cf = self.backend.cf(CF_RAFT);
        if first.index <= self.last_index {
            // A new leader overwrites entries that were never committed.
            batch.delete_range_cf(cf, entry_key(first.index), entry_key(self.last_index + 1));
            match self.cache.front().map(|e| e.index) {
                Some(front) if first.index >= front => {
                    self.cache.truncate((first.index - front) as usize);
                }
                _ => self.cache.clear(),
            }
        } else if self.cache.back().is_some_and(|e| e.index + 1 != first.index) {
            self.cache.clear();
        }
        for e in entries {
            batch.put_cf(cf, entry_key(e.index), e.write_to_bytes().expect("entries always encode"));
            self.cache.push_back(e.clone());
        }
        self.last_index = entries.last().expect("non-empty").index;
    }

    pub fn set_hard_state(&mut self, batch: &mut WriteBatch, hs: &HardState) {
        self.hard_state = hs.clone();
        batch.put_cf(self.backend.cf(CF_RAFT), KEY_HARD_STATE, hs.write_to_bytes().expect("encodes"));
    }

    /// Records a newer commit index (it travels with the apply batch, so the stored
    /// commit index is never behind the stored applied index).
    pub fn set_commit(&mut self, batch: &mut WriteBatch, commit: u64) {
        if commit > self.hard_state.commit {
            let mut hs = self.hard_state.clone();
            hs.commit = commit;
            self.set_hard_state(batch, &hs);
        }
    }

    pub fn set_conf_state(&mut self, batch: &mut WriteBatch, cs: ConfState) {
        batch.put_cf(self.backend.cf(CF_RAFT), KEY_CONF_STATE, cs.write_to_bytes().expect("encodes"));
        self.conf_state = cs;
    }

    /// Drops cached entries at or below `applied` (they stay on disk until compaction).
    pub fn release_cache(&mut self, applied: u64) {
        while self.cache.front().is_some_and(|e| e.index <= applied) {
            self.cache.pop_front();
        }
    }

    /// Removes entries up to and including `index` (which must be applied).
    pub fn compact(&mut self, batch: &mut WriteBatch, index: u64) -> raft::Result<()> {
        if index <= self.compacted_index {
            return Ok(());
        }
        let term = self.term_of(index)?;
        let cf = self.backend.cf(CF_RAFT);
        batch.delete_range_cf(cf, entry_key(self.compacted_index + 1), entry_key(index + 1));
        self.set_compacted(batch, index, term);
        self.release_cache(index);
        Ok(())
    }

    fn cached(&self, index: u64) -> Option<&Entry> {
        let front = self.cache.front()?.index;
        index.checked_sub(front).and_then(|i| self.cache.get(i as usize))
    }

    fn read_entry(&self, index: u64) -> raft::Result<Entry> {
        if let Some(e) = self.cached(index) {
            return Ok(e.clone());
        }
        let bytes = self
            .backend
            .get(CF_RAFT, &entry_key(index))
            .map_err(|e| raft::Error::Store(StorageError::Other(Box::new(e))))?
            .ok_or(raft::Error::Store(StorageError::Unavailable))?;
        Entry::parse_from_bytes(&bytes).map_err(raft::Error::CodecError)
    }

    fn term_of(&self, index: u64) -> raft::Result<u64> {
        if index == self.compacted_index {
            return Ok(self.compacted_term);
        }
        if index < self.compacted_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if index > self.last_index {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.read_entry(index)?.term)
    }
}

impl raft::Storage for RaftLog {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(self.hard_state.clone(), self.conf_state.clone()))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low <= self.compacted_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last_index + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let max_size = max_size.into().unwrap_or(u64::MAX);
        let mut out = Vec::with_capacity((high - low) as usize);
        let mut size = 0u64;
        for i in low..high {
            let e = self.read_entry(i)?;
            size += u64::from(e.compute_size());
            // At least one entry is returned even if it alone exceeds the limit.
            if !out.is_empty() && size > max_size {
                break;
            }
            out.push(e);
        }
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        self.term_of(idx)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.compacted_index + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last_index)
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let unavailable = raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable);
        let Some(snapshotter) = &self.snapshotter else { return Err(unavailable) };
        let applied = self.applied;
        let file = snapshotter.get_or_start(request_index, || {
            let term = self.term_of(applied).unwrap_or(self.compacted_term);
            (applied, term, self.conf_state.clone())
        });
        // raft asks again later while the file is being written.
        file.map(|f| f.to_raft()).ok_or(unavailable)
    }
}

#[cfg(test)]
#[allow(clippy::field_reassign_with_default)]
mod tests {
    use super::*;
    use raft::Storage;

    fn entry(index: u64, term: u64) -> Entry {
        let mut e = Entry::default();
        e.index = index;
        e.term = term;
        e.data = vec![index as u8].into();
        e
    }

    fn store(backend: &Backend, batch: WriteBatch) {
        backend.write(batch, true).unwrap();
    }

    #[test]
    fn append_overwrite_compact_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let backend = Arc::new(Backend::open(dir.path()).unwrap());
        let mut log = RaftLog::open(backend.clone(), 1).unwrap();
        let mut b = WriteBatch::default();
        log.append(&mut b, &[entry(1, 1), entry(2, 1), entry(3, 1)]);
        // A new leader replaces the uncommitted tail.
        log.append(&mut b, &[entry(3, 2), entry(4, 2)]);
        let mut hs = HardState::default();
        hs.term = 2;
        hs.commit = 2;
        log.set_hard_state(&mut b, &hs);
        store(&backend, b);
        assert_eq!(log.last_index(), 4);
        assert_eq!(log.term(3).unwrap(), 2);

        let mut b = WriteBatch::default();
        log.compact(&mut b, 2).unwrap();
        store(&backend, b);
        assert!(matches!(log.term(1), Err(raft::Error::Store(StorageError::Compacted))));
        assert_eq!(log.term(2).unwrap(), 1);

        let reopened = RaftLog::open(backend, 4).unwrap();
        assert_eq!(raft::Storage::first_index(&reopened).unwrap(), 3);
        assert_eq!(raft::Storage::last_index(&reopened).unwrap(), 4);
        assert_eq!(reopened.hard_state().term, 2);
        let ents = reopened.entries(3, 5, None, GetEntriesContext::empty(false)).unwrap();
        assert_eq!(ents.iter().map(|e| (e.index, e.term)).collect::<Vec<_>>(), vec![(3, 2), (4, 2)]);
    }
}
