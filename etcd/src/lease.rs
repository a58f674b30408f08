//! Leases (etcd's `lessor`): a TTL that keys attach to. Grants and revocations go through
//! raft and are applied on every member; expiry is only tracked on the leader ("primary"),
//! which proposes the revocation of expired leases. A restarted or newly elected leader
//! gives every lease a fresh TTL, as etcd does, so a leader change never expires leases
//! early.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rocksdb::WriteBatch;

use crate::backend::{Backend, BackendError, CF_LEASE};
use crate::error::EtcdError;

/// The largest TTL a lease may have, in seconds (etcd's MaxLeaseTTL).
pub const MAX_LEASE_TTL: i64 = 9_000_000_000;

/// How long a lease whose revocation was proposed waits before it is proposed again.
const REVOKE_RETRY: Duration = Duration::from_secs(3);

struct Lease {
    /// Granted TTL in seconds (after raising it to the minimum).
    ttl: i64,
    /// When the lease expires; None unless this member is primary.
    expiry: Option<Instant>,
    keys: BTreeSet<Vec<u8>>,
}

#[derive(Default)]
struct State {
    leases: HashMap<i64, Lease>,
    /// Which lease each attached key belongs to.
    key_lease: HashMap<Vec<u8>, i64>,
    primary: bool,
}

/// A lease's state as TimeToLive reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseStatus {
    pub granted_ttl: i64,
    /// Remaining seconds; the granted TTL while this member does not track expiry.
    pub remaining: i64,
    pub keys: Vec<Vec<u8>>,
}

pub struct Lessor {
    state: Mutex<State>,
    /// Shortest TTL granted: long enough to survive a leader election.
    min_ttl: i64,
}

impl Lessor {
    /// Restores the leases stored in the backend. Keys are attached later, as the key-value
    /// store is restored (see [`Lessor::attach`]).
    pub fn open(backend: &Arc<Backend>, min_ttl: i64) -> Result<Self, BackendError> {
        Ok(Self { state: Mutex::new(load_state(backend)?), min_ttl })
    }

    /// Replaces every lease with what the backend holds (after a raft snapshot install);
    /// the caller attaches keys again. A primary keeps tracking expiry, from now.
    pub fn reload(&self, backend: &Arc<Backend>, extend: Duration) -> Result<(), BackendError> {
        let fresh = load_state(backend)?;
        let mut st = self.state.lock();
        let primary = st.primary;
        *st = fresh;
        drop(st);
        if primary {
            self.promote(extend);
        }
        Ok(())
    }

    pub fn min_ttl(&self) -> i64 {
        self.min_ttl
    }

    /// Applies a grant. Returns the TTL actually granted.
    pub fn grant(
        &self,
        backend: &Backend,
        batch: &mut WriteBatch,
        id: i64,
        ttl: i64,
    ) -> Result<i64, EtcdError> {
        if ttl > MAX_LEASE_TTL {
            return Err(EtcdError::LeaseTtlTooLarge);
        }
        let mut st = self.state.lock();
        if st.leases.contains_key(&id) {
            return Err(EtcdError::LeaseExist);
        }
        let ttl = ttl.max(self.min_ttl);
        let expiry = st.primary.then(|| Instant::now() + secs(ttl));
        st.leases.insert(id, Lease { ttl, expiry, keys: BTreeSet::new() });
        batch.put_cf(backend.cf(CF_LEASE), id.to_be_bytes(), ttl.to_be_bytes());
        Ok(ttl)
    }

    /// Applies a revocation: forgets the lease and returns the keys the caller must delete.
    pub fn revoke(
        &self,
        backend: &Backend,
        batch: &mut WriteBatch,
        id: i64,
    ) -> Result<Vec<Vec<u8>>, EtcdError> {
        let mut st = self.state.lock();
        let lease = st.leases.remove(&id).ok_or(EtcdError::LeaseNotFound)?;
        for k in &lease.keys {
            st.key_lease.remove(k);
        }
        batch.delete_cf(backend.cf(CF_LEASE), id.to_be_bytes());
        Ok(lease.keys.into_iter().collect())
    }

    pub fn exists(&self, id: i64) -> bool {
        self.state.lock().leases.contains_key(&id)
    }

    /// The lease `key` is attached to, 0 if none.
    pub fn lease_of(&self, key: &[u8]) -> i64 {
        self.state.lock().key_lease.get(key).copied().unwrap_or(0)
    }

    /// Attaches `key` to lease `id` (detaching it from any other). False if no such lease.
    pub fn attach(&self, id: i64, key: &[u8]) -> bool {
        let mut st = self.state.lock();
        if !st.leases.contains_key(&id) {
            return false;
        }
        detach_locked(&mut st, key);
        st.leases.get_mut(&id).expect("checked").keys.insert(key.to_vec());
        st.key_lease.insert(key.to_vec(), id);
        true
    }

    pub fn detach(&self, key: &[u8]) {
        detach_locked(&mut self.state.lock(), key);
    }

    /// Renews a lease (leader only); returns its TTL.
    pub fn renew(&self, id: i64) -> Result<i64, EtcdError> {
        let mut st = self.state.lock();
        if !st.primary {
            return Err(EtcdError::NotLeader);
        }
        let lease = st.leases.get_mut(&id).ok_or(EtcdError::LeaseNotFound)?;
        lease.expiry = Some(Instant::now() + secs(lease.ttl));
        Ok(lease.ttl)
    }

    pub fn status(&self, id: i64) -> Option<LeaseStatus> {
        let st = self.state.lock();
        let lease = st.leases.get(&id)?;
        let remaining = match lease.expiry {
            Some(e) => e.saturating_duration_since(Instant::now()).as_secs() as i64,
            None => lease.ttl,
        };
        Some(LeaseStatus { granted_ttl: lease.ttl, remaining, keys: lease.keys.iter().cloned().collect() })
    }

    pub fn ids(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = self.state.lock().leases.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Starts tracking expiry (this member became leader): every lease gets its full TTL
    /// plus `extend`, so clients have time to find the new leader and keep alive.
    pub fn promote(&self, extend: Duration) {
        let mut st = self.state.lock();
        st.primary = true;
        let now = Instant::now();
        for lease in st.leases.values_mut() {
            lease.expiry = Some(now + secs(lease.ttl) + extend);
        }
    }

    /// Stops tracking expiry (this member is no longer leader).
    pub fn demote(&self) {
        let mut st = self.state.lock();
        st.primary = false;
        for lease in st.leases.values_mut() {
            lease.expiry = None;
        }
    }

    pub fn is_primary(&self) -> bool {
        self.state.lock().primary
    }

    /// Leases past their expiry, at most `limit`. Each is given a grace period before it
    /// is returned again, while its revocation goes through raft.
    pub fn take_expired(&self, limit: usize) -> Vec<i64> {
        let mut st = self.state.lock();
        let now = Instant::now();
        let mut out = Vec::new();
        for (id, lease) in st.leases.iter_mut() {
            if out.len() == limit {
                break;
            }
            if lease.expiry.is_some_and(|e| e <= now) {
                lease.expiry = Some(now + REVOKE_RETRY);
                out.push(*id);
            }
        }
        out
    }
}

fn load_state(backend: &Arc<Backend>) -> Result<State, BackendError> {
    let mut state = State::default();
    backend.scan(CF_LEASE, &[], |k, v| {
        let (Ok(id), Ok(ttl)) = (<[u8; 8]>::try_from(k), <[u8; 8]>::try_from(v)) else {
            return Err(BackendError::Corrupt(format!("bad lease record {k:?}")));
        };
        let lease = Lease { ttl: i64::from_be_bytes(ttl), expiry: None, keys: BTreeSet::new() };
        state.leases.insert(i64::from_be_bytes(id), lease);
        Ok(true)
    })?;
    Ok(state)
}

fn detach_locked(st: &mut State, key: &[u8]) {
    if let Some(old) = st.key_lease.remove(key)
        && let Some(l) = st.leases.get_mut(&old)
    {
        l.keys.remove(key);
    }
}

fn secs(s: i64) -> Duration {
    // TTLs are bounded by MAX_LEASE_TTL, far inside Duration's range.
    Duration::from_secs(s.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_attach_revoke_and_restore() {
        let dir = tempfile::tempdir().unwrap();
        let backend = Arc::new(Backend::open(dir.path()).unwrap());
        let lessor = Lessor::open(&backend, 2).unwrap();
        let mut batch = WriteBatch::default();
        assert_eq!(lessor.grant(&backend, &mut batch, 7, 1).unwrap(), 2, "raised to the minimum");
        assert_eq!(lessor.grant(&backend, &mut batch, 7, 10), Err(EtcdError::LeaseExist));
        assert!(lessor.attach(7, b"a"));
        assert!(!lessor.attach(8, b"b"));
        backend.write(batch, false).unwrap();

        let restored = Lessor::open(&backend, 2).unwrap();
        assert_eq!(restored.ids(), vec![7]);

        let mut batch = WriteBatch::default();
        assert_eq!(lessor.revoke(&backend, &mut batch, 7).unwrap(), vec![b"a".to_vec()]);
        assert_eq!(lessor.lease_of(b"a"), 0);
        backend.write(batch, false).unwrap();
        assert!(Lessor::open(&backend, 2).unwrap().ids().is_empty());
    }

    #[test]
    fn only_the_primary_expires_leases() {
        let dir = tempfile::tempdir().unwrap();
        let backend = Arc::new(Backend::open(dir.path()).unwrap());
        let lessor = Lessor::open(&backend, 0).unwrap();
        let mut batch = WriteBatch::default();
        lessor.grant(&backend, &mut batch, 1, 0).unwrap();
        assert!(lessor.take_expired(10).is_empty());
        assert_eq!(lessor.renew(1), Err(EtcdError::NotLeader));
        lessor.promote(Duration::ZERO);
        assert_eq!(lessor.take_expired(10), vec![1]);
        assert!(lessor.take_expired(10).is_empty(), "not again while the revoke is in flight");
    }
}
