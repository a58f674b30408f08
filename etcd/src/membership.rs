//! Cluster membership: members, their ids and the cluster id, computed as etcd computes
//! them so that ids are stable for the same `--initial-cluster` and token. Changes arrive
//! through raft (conf changes and attribute updates) and are stored in the meta column
//! family; removed member ids are remembered so their traffic can be refused.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::RwLock;
use prost::Message;
use rocksdb::WriteBatch;
use sha1::{Digest, Sha1};

use crate::backend::{Backend, BackendError, CF_META};

const META_CLUSTER_ID: &[u8] = b"clusterID";
const META_MEMBER_PREFIX: &[u8] = b"members/";
const META_REMOVED_PREFIX: &[u8] = b"members_removed/";

/// A member as the Cluster API reports it.
pub type Member = proto::etcdserverpb::Member;

/// etcd's member id: the first 8 bytes (big-endian) of sha1(sorted peer URLs joined,
/// then the cluster token).
pub fn member_id(peer_urls: &[String], token: &str) -> u64 {
    let mut urls = peer_urls.to_vec();
    urls.sort();
    let mut h = Sha1::new();
    h.update(urls.concat().as_bytes());
    h.update(token.as_bytes());
    first_u64(&h.finalize())
}

/// The id of a member added at runtime: like [`member_id`], with the time mixed in (as
/// etcd's `member add`), so re-adding the same URLs yields a new id.
pub fn new_member_id(peer_urls: &[String], token: &str, now: SystemTime) -> u64 {
    let mut urls = peer_urls.to_vec();
    urls.sort();
    let mut h = Sha1::new();
    h.update(urls.concat().as_bytes());
    h.update(token.as_bytes());
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    h.update(secs.to_string().as_bytes());
    first_u64(&h.finalize())
}

/// etcd's cluster id: sha1 over the sorted member ids, 8 bytes big-endian each.
pub fn cluster_id(member_ids: &[u64]) -> u64 {
    let mut ids = member_ids.to_vec();
    ids.sort_unstable();
    let mut h = Sha1::new();
    for id in ids {
        h.update(id.to_be_bytes());
    }
    first_u64(&h.finalize())
}

fn first_u64(digest: &[u8]) -> u64 {
    u64::from_be_bytes(digest[..8].try_into().expect("sha1 is 20 bytes"))
}

pub struct Membership {
    pub cluster_id: u64,
    pub local_id: u64,
    state: RwLock<State>,
}

#[derive(Default)]
struct State {
    members: BTreeMap<u64, Member>,
    removed: BTreeSet<u64>,
}

fn load_state(backend: &Backend) -> Result<State, BackendError> {
    let mut st = State::default();
    backend.scan(CF_META, META_MEMBER_PREFIX, |k, v| {
        if !k.starts_with(META_MEMBER_PREFIX) {
            return Ok(false);
        }
        let m = Member::decode(v).map_err(|e| BackendError::Corrupt(format!("member record: {e}")))?;
        st.members.insert(m.id, m);
        Ok(true)
    })?;
    backend.scan(CF_META, META_REMOVED_PREFIX, |k, _| {
        let Some(hex) = k.strip_prefix(META_REMOVED_PREFIX) else { return Ok(false) };
        let id = std::str::from_utf8(hex)
            .ok()
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .ok_or_else(|| BackendError::Corrupt(format!("removed member key {k:?}")))?;
        st.removed.insert(id);
        Ok(true)
    })?;
    Ok(st)
}

impl Membership {
    /// Loads membership from the backend; None on a fresh data dir.
    pub fn load(backend: &Backend, local_id: u64) -> Result<Option<Self>, BackendError> {
        let Some(cluster_id) = backend.get_meta_u64(META_CLUSTER_ID)? else {
            return Ok(None);
        };
        Ok(Some(Self { cluster_id, local_id, state: RwLock::new(load_state(backend)?) }))
    }

    /// A new cluster of `members`; written to `batch` so it is stored with the first state.
    pub fn bootstrap(backend: &Backend, batch: &mut WriteBatch, local_id: u64, members: Vec<Member>) -> Self {
        let ids: Vec<u64> = members.iter().map(|m| m.id).collect();
        Self::join(backend, batch, cluster_id(&ids), local_id, members)
    }

    /// An existing cluster, as a member of it described it to a joining member.
    pub fn join(
        backend: &Backend,
        batch: &mut WriteBatch,
        cluster_id: u64,
        local_id: u64,
        members: Vec<Member>,
    ) -> Self {
        backend.put_meta_u64(batch, META_CLUSTER_ID, cluster_id);
        let this = Self { cluster_id, local_id, state: RwLock::default() };
        for m in members {
            this.save(backend, batch, m);
        }
        this
    }

    /// Replaces the in-memory view with what the backend holds (after a snapshot install).
    pub fn reload(&self, backend: &Backend) -> Result<(), BackendError> {
        *self.state.write() = load_state(backend)?;
        Ok(())
    }

    /// Adds or replaces a member.
    pub fn save(&self, backend: &Backend, batch: &mut WriteBatch, m: Member) {
        batch.put_cf(backend.cf(CF_META), member_key(m.id), m.encode_to_vec());
        self.state.write().members.insert(m.id, m);
    }

    /// Removes a member for good: its id is never accepted again.
    pub fn remove(&self, backend: &Backend, batch: &mut WriteBatch, id: u64) {
        batch.delete_cf(backend.cf(CF_META), member_key(id));
        let mut k = META_REMOVED_PREFIX.to_vec();
        k.extend_from_slice(format!("{id:016x}").as_bytes());
        batch.put_cf(backend.cf(CF_META), k, []);
        let mut st = self.state.write();
        st.members.remove(&id);
        st.removed.insert(id);
    }

    pub fn is_removed(&self, id: u64) -> bool {
        self.state.read().removed.contains(&id)
    }

    pub fn get(&self, id: u64) -> Option<Member> {
        self.state.read().members.get(&id).cloned()
    }

    pub fn list(&self) -> Vec<Member> {
        self.state.read().members.values().cloned().collect()
    }

    pub fn local(&self) -> Option<Member> {
        self.get(self.local_id)
    }

    /// The member whose peer URLs are exactly `urls` (in any order).
    pub fn find_by_peer_urls(&self, urls: &[String]) -> Option<Member> {
        let mut want = urls.to_vec();
        want.sort();
        self.state
            .read()
            .members
            .values()
            .find(|m| {
                let mut have = m.peer_ur_ls.clone();
                have.sort();
                have == want
            })
            .cloned()
    }
}

fn member_key(id: u64) -> Vec<u8> {
    let mut k = META_MEMBER_PREFIX.to_vec();
    k.extend_from_slice(format!("{id:016x}").as_bytes());
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_depend_on_sorted_urls_and_token() {
        let a = member_id(&["http://b:2380".into(), "http://a:2380".into()], "tok");
        let b = member_id(&["http://a:2380".into(), "http://b:2380".into()], "tok");
        assert_eq!(a, b);
        assert_ne!(a, member_id(&["http://a:2380".into(), "http://b:2380".into()], "other"));
        assert_eq!(cluster_id(&[2, 1]), cluster_id(&[1, 2]));
    }
}
