//! Key-range permissions as etcd checks them (`auth/range_perm_cache.go`): a user may
//! touch `[key, range_end)` when the union of its roles' ranges of that kind covers the
//! whole interval, not merely overlaps it.

use proto::authpb::{Permission, permission::Type as PermType};

/// Whether a request reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

impl Access {
    fn granted_by(self, t: PermType) -> bool {
        matches!(
            (self, t),
            (_, PermType::Readwrite) | (Access::Read, PermType::Read) | (Access::Write, PermType::Write)
        )
    }
}

/// `[start, end)`; `end == None` is "every key from `start` on".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interval {
    pub start: Vec<u8>,
    pub end: Option<Vec<u8>>,
}

impl Interval {
    /// etcd's reading of a `key` and `range_end` pair: an empty end is the single key,
    /// `"\0"` every key from `key` on.
    pub fn from_request(key: &[u8], range_end: &[u8]) -> Self {
        let end = match range_end {
            [] => {
                let mut next = key.to_vec();
                next.push(0);
                Some(next)
            }
            [0] => None,
            end => Some(end.to_vec()),
        };
        Self { start: key.to_vec(), end }
    }
}

/// The merged read and write ranges of one user.
#[derive(Debug, Default)]
pub struct UserPerms {
    read: Vec<Interval>,
    write: Vec<Interval>,
}

impl UserPerms {
    pub fn new<'a>(perms: impl IntoIterator<Item = &'a Permission>) -> Self {
        let (mut read, mut write) = (Vec::new(), Vec::new());
        for p in perms {
            // An unknown type grants nothing (`perm_type()` would read it as READ).
            let Ok(t) = PermType::try_from(p.perm_type) else { continue };
            let ivl = Interval::from_request(&p.key, &p.range_end);
            if Access::Read.granted_by(t) {
                read.push(ivl.clone());
            }
            if Access::Write.granted_by(t) {
                write.push(ivl);
            }
        }
        Self { read: merge(read), write: merge(write) }
    }

    /// Whether the ranges of kind `access` cover all of `want`.
    pub fn covers(&self, access: Access, want: &Interval) -> bool {
        let set = if access == Access::Read { &self.read } else { &self.write };
        set.iter().any(|have| {
            have.start <= want.start
                && match (&have.end, &want.end) {
                    (None, _) => true,
                    (Some(_), None) => false,
                    (Some(h), Some(w)) => w <= h,
                }
        })
    }
}

/// Sorts and joins overlapping or touching intervals, so that coverage by a union is
/// coverage by one of its members.
fn merge(mut ivls: Vec<Interval>) -> Vec<Interval> {
    ivls.retain(|i| i.end.as_ref().is_none_or(|e| *e > i.start));
    ivls.sort_by(|a, b| a.start.cmp(&b.start));
    let mut out: Vec<Interval> = Vec::with_capacity(ivls.len());
    for ivl in ivls {
        if let Some(last) = out.last_mut() {
            match &last.end {
                None => continue,
                Some(end) if ivl.start <= *end => {
                    last.end = match ivl.end {
                        None => None,
                        Some(e) => Some(e.max(end.clone())),
                    };
                    continue;
                }
                Some(_) => {}
            }
        }
        out.push(ivl);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perm(t: PermType, key: &str, end: &[u8]) -> Permission {
        Permission { perm_type: t as i32, key: key.as_bytes().to_vec(), range_end: end.to_vec() }
    }

    #[test]
    fn union_must_cover_the_whole_request() {
        let perms = [
            perm(PermType::Readwrite, "/a", b"/c"),
            perm(PermType::Read, "/c", b"/e"),
            perm(PermType::Write, "/x", b""),
            perm(PermType::Read, "/z", b"\0"),
        ];
        let p = UserPerms::new(&perms);
        let ivl = |k: &str, e: &[u8]| Interval::from_request(k.as_bytes(), e);
        // Two touching grants cover a range spanning both.
        assert!(p.covers(Access::Read, &ivl("/b", b"/d")));
        assert!(!p.covers(Access::Write, &ivl("/b", b"/d")));
        assert!(p.covers(Access::Write, &ivl("/a1", b"")));
        assert!(!p.covers(Access::Read, &ivl("/a", b"/f")));
        // A single key grant covers only that key.
        assert!(p.covers(Access::Write, &ivl("/x", b"")));
        assert!(!p.covers(Access::Write, &ivl("/x", b"/y")));
        assert!(!p.covers(Access::Read, &ivl("/x", b"")));
        // "From key" grants and requests.
        assert!(p.covers(Access::Read, &ivl("/zz", b"\0")));
        assert!(!p.covers(Access::Read, &ivl("/e", b"\0")));
        assert!(!UserPerms::default().covers(Access::Read, &ivl("/a", b"")));
    }
}
