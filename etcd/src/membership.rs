//! Cluster membership: members, their ids and the cluster id, computed as etcd computes
//! them so that ids are stable for the same `--initial-cluster` and token.

use std::collections::BTreeMap;

use parking_lot::RwLock;
use prost::Message;
use rocksdb::WriteBatch;
use sha1::{Digest, Sha1};

use crate::backend::{Backend, BackendError, CF_META};

const META_CLUSTER_ID: &[u8] = b"clusterID";
const META_MEMBER_PREFIX: &[u8] = b"members/";

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
    members: RwLock<BTreeMap<u64, Member>>,
}

impl Membership {
    /// Loads membership from the backend; None on a fresh data dir.
    pub fn load(backend: &Backend, local_id: u64) -> Result<Option<Self>, BackendError> {
        let Some(cluster_id) = backend.get_meta_u64(META_CLUSTER_ID)? else {
            return Ok(None);
        };
        let mut members = BTreeMap::new();
        backend.scan(CF_META, META_MEMBER_PREFIX, |k, v| {
            if !k.starts_with(META_MEMBER_PREFIX) {
                return Ok(false);
            }
            let m = Member::decode(v).map_err(|e| BackendError::Corrupt(format!("member record: {e}")))?;
            members.insert(m.id, m);
            Ok(true)
        })?;
        Ok(Some(Self { cluster_id, local_id, members: RwLock::new(members) }))
    }

    /// A new cluster of `members`; written to `batch` so it is stored with the first state.
    pub fn bootstrap(backend: &Backend, batch: &mut WriteBatch, local_id: u64, members: Vec<Member>) -> Self {
        let ids: Vec<u64> = members.iter().map(|m| m.id).collect();
        let cluster_id = cluster_id(&ids);
        backend.put_meta_u64(batch, META_CLUSTER_ID, cluster_id);
        let this = Self { cluster_id, local_id, members: RwLock::new(BTreeMap::new()) };
        for m in members {
            this.save(backend, batch, m);
        }
        this
    }

    /// Adds or replaces a member.
    pub fn save(&self, backend: &Backend, batch: &mut WriteBatch, m: Member) {
        batch.put_cf(backend.cf(CF_META), member_key(m.id), m.encode_to_vec());
        self.members.write().insert(m.id, m);
    }

    pub fn get(&self, id: u64) -> Option<Member> {
        self.members.read().get(&id).cloned()
    }

    pub fn list(&self) -> Vec<Member> {
        self.members.read().values().cloned().collect()
    }

    pub fn local(&self) -> Option<Member> {
        self.get(self.local_id)
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
