//! Membership changes through raft. Each is a single-step ConfChange whose context says
//! what happens to which member; every member validates it against the replicated
//! membership when applying, so all of them reach the same verdict. A refused change
//! leaves raft's configuration alone.

use prost::Message as _;
use proto::etcdpeer::{ConfChangeContext, conf_change_context::Kind};
use raft::eraftpb::ConfChange;
use rocksdb::WriteBatch;
use tokio::sync::oneshot;

use raft::RawNode;

use super::Node;
use crate::backend::Backend;
use crate::error::EtcdError;
use crate::membership::{Member, Membership};
use crate::raftlog::RaftLog;

impl Node {
    pub(super) fn propose_conf_change(
        &mut self,
        mut cc: ConfChange,
        done: oneshot::Sender<Result<Vec<Member>, EtcdError>>,
    ) {
        if self.status.leader() == raft::INVALID_ID {
            let _ = done.send(Err(EtcdError::NoLeader));
            return;
        }
        if cc.id == 0 {
            cc.id = rand::random::<u64>() | 1;
        }
        let id = cc.id;
        match self.raw.propose_conf_change(Vec::new(), cc) {
            Ok(()) => {
                self.conf_waiters.insert(id, done);
            }
            Err(e) => {
                self.metrics.proposals_failed.inc();
                let _ = done.send(Err(EtcdError::Internal(format!("proposing a membership change: {e}"))));
            }
        }
    }

    /// This member was removed from the cluster: it must not serve any longer.
    pub(super) fn on_removed(&mut self) {
        if self.exiting {
            return;
        }
        self.exiting = true;
        tracing::error!("the member has been permanently removed from the cluster; exiting");
        // Give the removal's proposer (possibly a client of this member) a moment to read
        // its answer, then stop.
        std::thread::spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(500));
            std::process::exit(0);
        });
        self.removed = false;
    }
}

/// Applies a committed membership change. The outer error is fatal; the inner one is the
/// change being refused. Also says whether this member (`local_id`) was removed.
pub(super) fn apply(
    raw: &mut RawNode<RaftLog>,
    members: &Membership,
    backend: &Backend,
    local_id: u64,
    batch: &mut WriteBatch,
    cc: &ConfChange,
) -> Result<(Result<Vec<Member>, EtcdError>, bool), String> {
    // A committed entry is the same on every member, so refusing a malformed one (only a
    // broken or hostile peer proposes such) keeps the members in step.
    let ctx = match ConfChangeContext::decode(cc.context.as_ref()) {
        Ok(ctx) => ctx,
        Err(e) => {
            tracing::error!("membership change without a readable context refused: {e}");
            return Ok((
                Err(EtcdError::Internal(format!("membership change without a readable context: {e}"))),
                false,
            ));
        }
    };
    let kind = ctx.kind();
    let change = ctx.member.unwrap_or_default();
    let id = cc.node_id;
    let verdict = match kind {
        Kind::Add if members.get(id).is_some() => Err(EtcdError::MemberExists),
        Kind::Add if members.is_removed(id) => Err(EtcdError::IdRemoved),
        Kind::Add | Kind::Update if members.list().iter().any(|m| m.id != id && shares_url(m, &change)) => {
            Err(EtcdError::PeerUrlExists)
        }
        Kind::Remove | Kind::Update | Kind::Promote if members.get(id).is_none() => {
            Err(EtcdError::MemberNotFound)
        }
        Kind::Promote if !members.get(id).is_some_and(|m| m.is_learner) => Err(EtcdError::MemberNotLearner),
        _ => Ok(()),
    };
    if let Err(e) = verdict {
        tracing::warn!(member = format!("{id:x}"), ?kind, "membership change refused: {e}");
        return Ok((Err(e), false));
    }
    // raft-rs checks a change before making it (never removing the last voter, say): a
    // refusal leaves its configuration as it was, on every member alike.
    let cs = match raw.apply_conf_change(cc) {
        Ok(cs) => cs,
        Err(e) => {
            tracing::error!(member = format!("{id:x}"), ?kind, "membership change refused by raft: {e}");
            return Ok((Err(EtcdError::Internal(format!("applying conf change: {e}"))), false));
        }
    };
    raw.mut_store().set_conf_state(batch, cs);
    let mut removed_self = false;
    match kind {
        Kind::Add => members.save(backend, batch, Member { id, ..change }),
        Kind::Remove => {
            members.remove(backend, batch, id);
            removed_self = id == local_id;
        }
        Kind::Update => {
            let mut m = members.get(id).expect("validated");
            m.peer_ur_ls = change.peer_ur_ls;
            members.save(backend, batch, m);
        }
        Kind::Promote => {
            let mut m = members.get(id).expect("validated");
            m.is_learner = false;
            members.save(backend, batch, m);
        }
    }
    tracing::info!(member = format!("{id:x}"), ?kind, "applied membership change");
    Ok((Ok(members.list()), removed_self))
}

fn shares_url(a: &Member, b: &Member) -> bool {
    a.peer_ur_ls.iter().any(|u| b.peer_ur_ls.contains(u))
}
