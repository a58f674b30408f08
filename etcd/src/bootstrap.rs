//! Starting a member from its data dir: an existing member loads what it stored; a member
//! of a new cluster writes the initial membership and raft configuration
//! (`--initial-cluster-state new`); a member joining a running cluster asks a peer for the
//! membership and waits for the leader's snapshot (`existing`), as etcd does.

use std::sync::Arc;

use raft::eraftpb::ConfState;
use rocksdb::WriteBatch;

use crate::StartError;
use crate::backend::Backend;
use crate::config::{ClusterState, ServerConfig};
use crate::membership::{self, Member, Membership};
use crate::node::META_CONSISTENT_INDEX;
use crate::peer::{Identity, connect};
use crate::raftlog::{BOOTSTRAP_INDEX, RaftLog};

/// Meta key holding this member's own id (members added at runtime have ids that cannot
/// be recomputed from their URLs).
pub const META_LOCAL_ID: &[u8] = b"localID";

/// Opens or creates the membership of this member's data dir.
pub async fn membership(
    cfg: &ServerConfig,
    backend: &Arc<Backend>,
    peer_tls: Option<Arc<rustls::ClientConfig>>,
) -> Result<Membership, StartError> {
    let own_urls: Vec<String> = cfg.advertise_peer_urls.iter().map(crate::url_string).collect();
    if let Some(local_id) = backend.get_meta_u64(META_LOCAL_ID)? {
        let m = Membership::load(backend, local_id)?
            .ok_or_else(|| StartError::Membership("data dir holds a member id but no cluster".into()))?;
        if m.is_removed(local_id) {
            return Err(StartError::Membership(format!(
                "member {local_id:x} has been permanently removed from the cluster; start it with a fresh data dir and `member add`"
            )));
        }
        return Ok(m);
    }
    match cfg.initial_cluster_state {
        ClusterState::New => bootstrap_new(cfg, backend, &own_urls),
        ClusterState::Existing => join_existing(cfg, backend, &own_urls, peer_tls).await,
    }
}

/// Writes the first state of a new cluster: its members and the raft configuration.
fn bootstrap_new(
    cfg: &ServerConfig,
    backend: &Arc<Backend>,
    own_urls: &[String],
) -> Result<Membership, StartError> {
    let local_id = membership::member_id(own_urls, &cfg.initial_cluster_token);
    let members: Vec<Member> = cfg
        .initial_cluster
        .iter()
        .map(|(_, urls)| {
            let peer: Vec<String> = urls.iter().map(crate::url_string).collect();
            // Names and client URLs are not part of the bootstrap: like etcd, every member
            // publishes its own through raft once it runs, so all members learn them.
            Member {
                id: membership::member_id(&peer, &cfg.initial_cluster_token),
                name: String::new(),
                peer_ur_ls: peer,
                client_ur_ls: Vec::new(),
                is_learner: false,
            }
        })
        .collect();
    let voters: Vec<u64> = members.iter().map(|m| m.id).collect();
    let mut batch = WriteBatch::default();
    let m = Membership::bootstrap(backend, &mut batch, local_id, members);
    backend.put_meta_u64(&mut batch, META_LOCAL_ID, local_id);
    let mut log = RaftLog::open(backend.clone(), 1)?;
    log.bootstrap(&mut batch, ConfState::from((voters, vec![])));
    backend.put_meta_u64(&mut batch, META_CONSISTENT_INDEX, BOOTSTRAP_INDEX);
    backend.write(batch, true)?;
    Ok(m)
}

/// Learns the cluster from a running member; this member must have been added with
/// `member add` first. Its state then arrives as a snapshot from the leader.
async fn join_existing(
    cfg: &ServerConfig,
    backend: &Arc<Backend>,
    own_urls: &[String],
    peer_tls: Option<Arc<rustls::ClientConfig>>,
) -> Result<Membership, StartError> {
    let mut sorted_own = own_urls.to_vec();
    sorted_own.sort();
    let runtime = tokio::runtime::Handle::current();
    let mut last_error = String::from("--initial-cluster names no other member");
    for (name, urls) in &cfg.initial_cluster {
        let urls: Vec<String> = urls.iter().map(crate::url_string).collect();
        let mut sorted = urls.clone();
        sorted.sort();
        if sorted == sorted_own {
            continue;
        }
        let identity = Identity { cluster_id: 0, member_id: 0 };
        let mut client = match connect::client(&urls, peer_tls.clone(), identity, &runtime) {
            Ok(c) => c,
            Err(e) => {
                last_error = format!("{name}: {e}");
                continue;
            }
        };
        let call = client.members(proto::etcdpeer::MembersRequest {});
        let resp = match tokio::time::timeout(std::time::Duration::from_secs(5), call).await {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(status)) => {
                last_error = format!("{name}: {}", status.message());
                continue;
            }
            Err(_) => {
                last_error = format!("{name}: timed out");
                continue;
            }
        };
        let own = resp.members.iter().find(|m| {
            let mut u = m.peer_ur_ls.clone();
            u.sort();
            u == sorted_own
        });
        let Some(own) = own else {
            return Err(StartError::Membership(format!(
                "the cluster {:x} has no member with peer URLs {}; add it first with `etcdctl member add`",
                resp.cluster_id,
                own_urls.join(",")
            )));
        };
        let local_id = own.id;
        let mut batch = WriteBatch::default();
        let m = Membership::join(backend, &mut batch, resp.cluster_id, local_id, resp.members);
        backend.put_meta_u64(&mut batch, META_LOCAL_ID, local_id);
        backend.write(batch, true)?;
        tracing::info!(
            member = format!("{local_id:x}"),
            cluster = format!("{:x}", resp.cluster_id),
            from = name,
            "joining existing cluster"
        );
        return Ok(m);
    }
    Err(StartError::Membership(format!("could not learn the cluster from its members: {last_error}")))
}
