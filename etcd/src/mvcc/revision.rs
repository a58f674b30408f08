//! Revisions as etcd numbers them: `main` counts transactions that wrote, `sub` counts the
//! writes inside one transaction. On disk a revision is 17 bytes, `main` and `sub` big-endian
//! around a `_`, so the "key" column family iterates in revision order; a tombstone carries
//! a trailing `t` (etcd's markTombstone).

use std::fmt;

pub const REV_BYTES_LEN: usize = 8 + 1 + 8;
const TOMBSTONE_MARK: u8 = b't';

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Revision {
    pub main: i64,
    pub sub: i64,
}

impl Revision {
    pub const fn new(main: i64, sub: i64) -> Self {
        Self { main, sub }
    }

    pub fn to_bytes(self) -> [u8; REV_BYTES_LEN] {
        let mut b = [0u8; REV_BYTES_LEN];
        b[..8].copy_from_slice(&self.main.to_be_bytes());
        b[8] = b'_';
        b[9..].copy_from_slice(&self.sub.to_be_bytes());
        b
    }

    /// The backend key of this revision, with the tombstone mark when `tombstone`.
    pub fn to_key(self, tombstone: bool) -> Vec<u8> {
        let mut k = Vec::with_capacity(REV_BYTES_LEN + 1);
        k.extend_from_slice(&self.to_bytes());
        if tombstone {
            k.push(TOMBSTONE_MARK);
        }
        k
    }

    /// Parses a backend key; returns the revision and whether it marks a tombstone.
    pub fn from_key(k: &[u8]) -> Option<(Self, bool)> {
        let tombstone = match k.len() {
            REV_BYTES_LEN => false,
            n if n == REV_BYTES_LEN + 1 && k[REV_BYTES_LEN] == TOMBSTONE_MARK => true,
            _ => return None,
        };
        if k[8] != b'_' {
            return None;
        }
        let main = i64::from_be_bytes(k[..8].try_into().ok()?);
        let sub = i64::from_be_bytes(k[9..17].try_into().ok()?);
        Some((Self { main, sub }, tombstone))
    }

    /// The smallest backend key of a main revision: scans of history start here.
    pub fn start_key(main: i64) -> [u8; REV_BYTES_LEN] {
        Revision::new(main, 0).to_bytes()
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.main, self.sub)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_revision_and_round_trip() {
        let a = Revision::new(2, 5).to_key(false);
        let b = Revision::new(10, 0).to_key(true);
        assert!(a < b);
        assert_eq!(Revision::from_key(&a), Some((Revision::new(2, 5), false)));
        assert_eq!(Revision::from_key(&b), Some((Revision::new(10, 0), true)));
        assert_eq!(Revision::from_key(b"short"), None);
    }
}
