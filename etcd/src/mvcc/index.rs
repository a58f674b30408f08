//! The in-memory index from user keys to their revisions (etcd's `treeIndex`). Values stay
//! in the backend; the index answers "which revision of which keys is visible at revision
//! R", so a range reads only the values it returns.

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;

use super::key_index::{KeyIndex, Visible};
use super::revision::Revision;

/// A key range as etcd requests express it: one key, `[start, end)`, or every key from
/// `start` on (`range_end == "\0"`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyRange {
    pub start: Vec<u8>,
    pub end: RangeEnd,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RangeEnd {
    /// Only `start`.
    Single,
    /// Every key `>= start`.
    Unbounded,
    /// Keys in `[start, end)`.
    Before(Vec<u8>),
}

impl KeyRange {
    /// Interprets a request's `key` and `range_end` the way etcd does.
    pub fn from_request(key: &[u8], range_end: &[u8]) -> Self {
        let end = match range_end {
            [] => RangeEnd::Single,
            [0] => RangeEnd::Unbounded,
            e => RangeEnd::Before(e.to_vec()),
        };
        Self { start: key.to_vec(), end }
    }

    pub fn single(key: &[u8]) -> Self {
        Self { start: key.to_vec(), end: RangeEnd::Single }
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        match &self.end {
            RangeEnd::Single => key == self.start.as_slice(),
            RangeEnd::Unbounded => key >= self.start.as_slice(),
            RangeEnd::Before(end) => key >= self.start.as_slice() && key < end.as_slice(),
        }
    }

    pub fn is_single(&self) -> bool {
        self.end == RangeEnd::Single
    }

    /// True if the two ranges share a key.
    pub fn overlaps(&self, other: &KeyRange) -> bool {
        let (a0, a1) = self.bounds();
        let (b0, b1) = other.bounds();
        // Each range is [start, end) with end None meaning unbounded.
        let a_before_b = a1.as_deref().is_some_and(|e| e <= b0);
        let b_before_a = b1.as_deref().is_some_and(|e| e <= a0);
        !(a_before_b || b_before_a)
    }

    /// Half-open bounds, with a single key as `[k, k\0)`.
    fn bounds(&self) -> (&[u8], Option<Vec<u8>>) {
        match &self.end {
            RangeEnd::Single => {
                let mut e = self.start.clone();
                e.push(0);
                (&self.start, Some(e))
            }
            RangeEnd::Unbounded => (&self.start, None),
            RangeEnd::Before(e) => (&self.start, Some(e.clone())),
        }
    }
}

#[derive(Default)]
pub struct TreeIndex {
    tree: BTreeMap<Vec<u8>, KeyIndex>,
}

impl TreeIndex {
    pub fn put(&mut self, key: &[u8], rev: Revision) {
        match self.tree.get_mut(key) {
            Some(ki) => ki.put(rev),
            None => {
                let mut ki = KeyIndex::default();
                ki.put(rev);
                self.tree.insert(key.to_vec(), ki);
            }
        }
    }

    /// Rebuilds index state from one stored revision, in revision order (etcd's restore).
    pub fn restore(&mut self, key: &[u8], rev: Revision, tombstone: bool, created: i64, version: i64) {
        match self.tree.get_mut(key) {
            Some(ki) if tombstone => {
                ki.tombstone(rev);
            }
            Some(ki) => ki.put(rev),
            // A tombstone whose put was compacted away says nothing about the key.
            None if tombstone => {}
            None => {
                let mut ki = KeyIndex::default();
                ki.restore(Revision::new(created, 0), rev, version);
                self.tree.insert(key.to_vec(), ki);
            }
        }
    }

    /// Records the deletion of `key` at `rev`; false if the key is not live.
    pub fn tombstone(&mut self, key: &[u8], rev: Revision) -> bool {
        self.tree.get_mut(key).is_some_and(|ki| ki.tombstone(rev))
    }

    pub fn get(&self, key: &[u8], at: i64) -> Option<Visible> {
        self.tree.get(key).and_then(|ki| ki.get(at))
    }

    /// Visits, in key order, the keys of `range` visible at `at`, until `visit` returns
    /// false.
    pub fn visit(&self, range: &KeyRange, at: i64, mut visit: impl FnMut(&[u8], Visible) -> bool) {
        let start = range.start.as_slice();
        let upper: Bound<&[u8]> = match &range.end {
            RangeEnd::Single => {
                if let Some(v) = self.get(start, at) {
                    visit(start, v);
                }
                return;
            }
            RangeEnd::Unbounded => Bound::Unbounded,
            RangeEnd::Before(end) => {
                if end.as_slice() <= start {
                    return;
                }
                Bound::Excluded(end.as_slice())
            }
        };
        for (k, ki) in self.tree.range::<[u8], _>((Bound::Included(start), upper)) {
            if let Some(v) = ki.get(at)
                && !visit(k, v)
            {
                return;
            }
        }
    }

    /// The visible revisions of `range` at `at` (at most `limit` when `limit > 0`) and the
    /// total number of visible keys.
    pub fn revisions(&self, range: &KeyRange, at: i64, limit: usize) -> (Vec<Revision>, usize) {
        let mut revs = Vec::new();
        let mut total = 0;
        self.visit(range, at, |_, v| {
            if limit == 0 || revs.len() < limit {
                revs.push(v.modified);
            }
            total += 1;
            true
        });
        (revs, total)
    }

    /// The live keys of `range` at `at`, with their visible revision.
    pub fn keys(&self, range: &KeyRange, at: i64) -> Vec<(Vec<u8>, Visible)> {
        let mut out = Vec::new();
        self.visit(range, at, |k, v| {
            out.push((k.to_vec(), v));
            true
        });
        out
    }

    /// Compacts every key at `at`; returns the revisions at or before `at` that must stay in
    /// the backend.
    pub fn compact(&mut self, at: i64) -> HashSet<Revision> {
        let mut keep = HashSet::new();
        self.tree.retain(|_, ki| {
            ki.compact(at, &mut keep);
            !ki.is_empty()
        });
        keep
    }

    /// What `compact(at)` would keep, without compacting.
    pub fn keep(&self, at: i64) -> HashSet<Revision> {
        let mut keep = HashSet::new();
        for ki in self.tree.values() {
            ki.keep(at, &mut keep);
        }
        keep
    }

    /// Number of keys the index tracks (live or with history).
    pub fn len(&self) -> usize {
        self.tree.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(main: i64) -> Revision {
        Revision::new(main, 0)
    }

    #[test]
    fn ranges_follow_etcd_conventions() {
        let mut idx = TreeIndex::default();
        idx.put(b"a", r(2));
        idx.put(b"b", r(3));
        idx.put(b"c", r(4));
        assert!(idx.tombstone(b"b", r(5)));

        let all = KeyRange::from_request(b"a", b"\0");
        assert_eq!(idx.revisions(&all, 5, 0), (vec![r(2), r(4)], 2));
        assert_eq!(idx.revisions(&all, 4, 0), (vec![r(2), r(3), r(4)], 3));
        assert_eq!(idx.revisions(&all, 4, 1), (vec![r(2)], 3));
        let ab = KeyRange::from_request(b"a", b"c");
        assert_eq!(idx.revisions(&ab, 4, 0).1, 2);
        let backwards = KeyRange::from_request(b"c", b"a");
        assert_eq!(idx.revisions(&backwards, 4, 0).1, 0);
        assert_eq!(idx.revisions(&KeyRange::single(b"c"), 3, 0).1, 0, "not yet created");
    }

    #[test]
    fn overlap() {
        let a = KeyRange::from_request(b"a", b"c");
        assert!(a.overlaps(&KeyRange::single(b"b")));
        assert!(!a.overlaps(&KeyRange::single(b"c")));
        assert!(KeyRange::from_request(b"b", b"\0").overlaps(&KeyRange::single(b"zz")));
        assert!(!KeyRange::single(b"a").overlaps(&KeyRange::single(b"a\0")));
        assert!(KeyRange::single(b"a").overlaps(&KeyRange::single(b"a")));
    }

    #[test]
    fn compaction_drops_dead_keys() {
        let mut idx = TreeIndex::default();
        idx.put(b"a", r(2));
        idx.tombstone(b"a", r(3));
        idx.put(b"b", r(4));
        let keep = idx.compact(4);
        assert_eq!(keep, HashSet::from([r(4)]));
        assert_eq!(idx.len(), 1);
    }
}
