//! The revisions of one key, as etcd's `keyIndex` keeps them.
//!
//! A key's life is split into generations. A generation starts with the put that creates
//! the key and ends with the tombstone that deletes it; the last generation is the live one
//! and is empty while the key is deleted. For example, after
//!
//! ```text
//! put(1.0) put(2.0) tombstone(3.0) put(4.0) tombstone(5.0)
//! ```
//!
//! the generations are `{1.0, 2.0, 3.0(t)}`, `{4.0, 5.0(t)}`, `{}`. Compacting at revision
//! 4 keeps the newest revision at or before 4 of the generation alive at 4 (`4.0`) and drops
//! the older generations: `{4.0, 5.0(t)}`, `{}`. Compacting at 5 drops the tombstone too,
//! and a key whose generations are all gone leaves the index.

use std::collections::HashSet;

use super::revision::Revision;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Generation {
    /// Number of puts in this generation, the key's `version` after its last one.
    ver: i64,
    /// The revision that created the key in this generation.
    created: Revision,
    revs: Vec<Revision>,
}

impl Generation {
    fn is_empty(&self) -> bool {
        self.revs.is_empty()
    }

    /// Index of the newest revision with `main <= at`, if any.
    fn newest_at_or_before(&self, at: i64) -> Option<usize> {
        self.revs.iter().rposition(|r| r.main <= at)
    }
}

/// What `KeyIndex::get` finds: the revision visible at the asked revision, the revision that
/// created the key, and the key's version at that point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Visible {
    pub modified: Revision,
    pub created: Revision,
    pub version: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyIndex {
    modified: Revision,
    generations: Vec<Generation>,
}

impl KeyIndex {
    /// Records a put at `rev`, which must be newer than every revision recorded so far.
    pub fn put(&mut self, rev: Revision) {
        debug_assert!(rev > self.modified, "put {rev} not after {}", self.modified);
        if self.generations.is_empty() {
            self.generations.push(Generation::default());
        }
        let g = self.generations.last_mut().expect("at least one generation");
        if g.is_empty() {
            g.created = rev;
        }
        g.revs.push(rev);
        g.ver += 1;
        self.modified = rev;
    }

    /// Rebuilds a generation from a stored key-value whose older revisions may have been
    /// compacted away: `created` and `version` come from the stored value.
    pub fn restore(&mut self, created: Revision, modified: Revision, version: i64) {
        self.generations.push(Generation { ver: version, created, revs: vec![modified] });
        self.modified = modified;
    }

    /// Records the deletion of the key at `rev`. Returns false (and changes nothing) when
    /// the key is not live.
    pub fn tombstone(&mut self, rev: Revision) -> bool {
        match self.generations.last() {
            Some(g) if !g.is_empty() => {}
            _ => return false,
        }
        self.put(rev);
        self.generations.push(Generation::default());
        true
    }

    /// True when the key is not live (its last generation is empty).
    pub fn is_deleted(&self) -> bool {
        self.generations.last().is_none_or(Generation::is_empty)
    }

    /// True when nothing is left of the key: it can leave the index.
    pub fn is_empty(&self) -> bool {
        self.generations.len() <= 1 && self.generations.first().is_none_or(Generation::is_empty)
    }

    /// The revision visible at main revision `at`, or None if the key did not exist then.
    pub fn get(&self, at: i64) -> Option<Visible> {
        let g = self.find_generation(at)?;
        let n = g.newest_at_or_before(at)?;
        Some(Visible {
            modified: g.revs[n],
            created: g.created,
            version: g.ver - (g.revs.len() - n - 1) as i64,
        })
    }

    /// The generation that holds the key's state at `at`, None if the key was deleted or
    /// not yet created at `at`.
    fn find_generation(&self, at: i64) -> Option<&Generation> {
        let last = self.generations.len().checked_sub(1)?;
        for (i, g) in self.generations.iter().enumerate().rev() {
            if g.is_empty() {
                continue;
            }
            if i != last {
                let tomb = g.revs.last().expect("non-empty").main;
                if tomb <= at {
                    return None;
                }
            }
            if g.revs[0].main <= at {
                return Some(g);
            }
        }
        None
    }

    /// Finds the generation alive at `at` (or the first created after it) and the newest of
    /// its revisions at or before `at`, adding that revision to `keep`.
    fn compaction_point(&self, at: i64, keep: &mut HashSet<Revision>) -> (usize, Option<usize>) {
        let mut gen_idx = 0;
        while gen_idx + 1 < self.generations.len() {
            let g = &self.generations[gen_idx];
            if g.revs.last().is_some_and(|r| r.main > at) {
                break;
            }
            gen_idx += 1;
        }
        let g = &self.generations[gen_idx];
        let rev_idx = g.newest_at_or_before(at);
        if let Some(i) = rev_idx {
            keep.insert(g.revs[i]);
        }
        (gen_idx, rev_idx)
    }

    /// Drops every revision older than `at` that no read at or after `at` can see, and adds
    /// the revisions compaction must keep in the backend to `keep`.
    pub fn compact(&mut self, at: i64, keep: &mut HashSet<Revision>) {
        if self.generations.is_empty() {
            return;
        }
        let (mut gen_idx, rev_idx) = self.compaction_point(at, keep);
        let last = self.generations.len() - 1;
        let g = &mut self.generations[gen_idx];
        if !g.is_empty() {
            if let Some(i) = rev_idx {
                g.revs.drain(..i);
            }
            // A tombstone alone at the head of a finished generation is not needed anymore.
            if g.revs.len() == 1 && gen_idx != last {
                keep.remove(&g.revs[0]);
                gen_idx += 1;
            }
        }
        self.generations.drain(..gen_idx);
    }

    /// Adds to `keep` what `compact(at)` would keep, without changing anything.
    pub fn keep(&self, at: i64, keep: &mut HashSet<Revision>) {
        if self.is_empty() {
            return;
        }
        let (gen_idx, rev_idx) = self.compaction_point(at, keep);
        let g = &self.generations[gen_idx];
        if let Some(i) = rev_idx
            && i == g.revs.len() - 1
            && gen_idx != self.generations.len() - 1
        {
            keep.remove(&g.revs[i]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(main: i64) -> Revision {
        Revision::new(main, 0)
    }

    /// The worked example of the module doc.
    fn example() -> KeyIndex {
        let mut ki = KeyIndex::default();
        ki.put(r(1));
        ki.put(r(2));
        assert!(ki.tombstone(r(3)));
        ki.put(r(4));
        assert!(ki.tombstone(r(5)));
        ki
    }

    #[test]
    fn get_sees_the_generation_alive_at_the_revision() {
        let mut ki = example();
        assert_eq!(ki.get(0), None);
        assert_eq!(ki.get(1).map(|v| (v.modified, v.version)), Some((r(1), 1)));
        assert_eq!(ki.get(2).map(|v| (v.modified, v.created, v.version)), Some((r(2), r(1), 2)));
        assert_eq!(ki.get(3), None, "deleted at 3");
        assert_eq!(ki.get(4).map(|v| (v.modified, v.created, v.version)), Some((r(4), r(4), 1)));
        assert_eq!(ki.get(5), None);
        assert_eq!(ki.get(100), None);
        assert!(ki.is_deleted());
        assert!(!ki.tombstone(r(6)), "cannot delete a deleted key");
    }

    #[test]
    fn compaction_keeps_what_later_reads_need() {
        let mut ki = example();
        let mut keep = HashSet::new();
        ki.compact(2, &mut keep);
        assert_eq!(keep, HashSet::from([r(2)]));
        assert_eq!(ki.get(2).map(|v| v.modified), Some(r(2)));

        let mut ki = example();
        let mut keep = HashSet::new();
        ki.compact(4, &mut keep);
        assert_eq!(keep, HashSet::from([r(4)]));
        assert_eq!(ki.get(4).map(|v| v.modified), Some(r(4)));
        assert_eq!(ki.get(2), None, "older generations are gone");

        let mut ki = example();
        let mut keep = HashSet::new();
        ki.compact(5, &mut keep);
        assert!(keep.is_empty(), "the tombstone is dropped");
        assert!(ki.is_empty());
    }

    #[test]
    fn keep_matches_compact_without_changing_the_index() {
        for at in 0..7 {
            let ki = example();
            let mut keep_only = HashSet::new();
            ki.keep(at, &mut keep_only);
            assert_eq!(ki, example());
            let mut compacted = example();
            let mut keep = HashSet::new();
            compacted.compact(at, &mut keep);
            assert_eq!(keep_only, keep, "at {at}");
        }
    }

    #[test]
    fn restore_continues_versions_from_the_stored_value() {
        let mut ki = KeyIndex::default();
        ki.restore(r(3), r(7), 4);
        ki.put(r(9));
        let v = ki.get(9).unwrap();
        assert_eq!((v.modified, v.created, v.version), (r(9), r(3), 5));
    }
}
