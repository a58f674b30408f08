//! The Cluster service (etcd's `v3rpc/member.go`): membership changes go through raft as
//! single-step conf changes (see `node::conf_change`), with etcd's safety checks first:
//! a change must not leave the cluster without a quorum of started members, and a learner
//! is promoted only once its log has caught up with the leader's.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use prost::Message as _;
use proto::etcdpeer::{ConfChangeContext, ProgressRequest, conf_change_context::Kind};
use proto::etcdserverpb::cluster_server::Cluster;
use proto::etcdserverpb::{
    InternalRaftRequest, MemberAddRequest, MemberAddResponse, MemberListRequest, MemberListResponse,
    MemberPromoteRequest, MemberPromoteResponse, MemberRemoveRequest, MemberRemoveResponse,
    MemberUpdateRequest, MemberUpdateResponse,
};
use proto::membershippb::{Attributes, ClusterMemberAttrSetRequest};
use raft::eraftpb::{ConfChange, ConfChangeType};
use tokio::sync::oneshot;
use tonic::{Request, Response, Status};

use super::EtcdServer;
use crate::error::EtcdError;
use crate::membership::{self, Member};
use crate::node::{NodeMsg, PeerProgress};

/// A learner may be promoted once its log matches this share of the leader's.
const LEARNER_READY_PERCENT: f64 = 0.9;
/// How many learners a cluster may have at once (etcd's maxLearners).
const MAX_LEARNERS: usize = 1;

pub struct ClusterService {
    pub server: Arc<EtcdServer>,
}

fn conf_change(kind: Kind, change_type: ConfChangeType, member: Member) -> ConfChange {
    let mut cc = ConfChange::default();
    cc.set_change_type(change_type);
    cc.node_id = member.id;
    cc.context = ConfChangeContext { kind: kind as i32, member: Some(member) }.encode_to_vec().into();
    cc
}

/// Peer URLs must be http(s) URLs with a host and port.
fn check_urls(urls: &[String]) -> Result<(), EtcdError> {
    if urls.is_empty() {
        return Err(EtcdError::MemberBadUrls);
    }
    for u in urls {
        let ok = url::Url::parse(u).is_ok_and(|p| {
            (p.scheme() == "http" || p.scheme() == "https")
                && p.host_str().is_some()
                && p.port_or_known_default().is_some()
        });
        if !ok {
            return Err(EtcdError::MemberBadUrls);
        }
    }
    Ok(())
}

impl ClusterService {
    fn header(&self) -> Option<proto::etcdserverpb::ResponseHeader> {
        Some(self.server.header(self.server.store.current_rev()))
    }

    /// etcd's strict reconfiguration check: after the change, the started voters must still
    /// form a quorum of the voters. A member counts as started once it published its name.
    fn check_quorum_after(&self, voters_after: &[Member]) -> Result<(), EtcdError> {
        let started = voters_after.iter().filter(|m| !m.name.is_empty()).count();
        if started < voters_after.len() / 2 + 1 {
            return Err(EtcdError::NotEnoughStarted);
        }
        Ok(())
    }

    /// The leader's view of every member's log, asking the leader if that is not us.
    async fn progress(&self) -> Result<Vec<PeerProgress>, EtcdError> {
        if self.server.node.status.is_leader() {
            let (tx, rx) = oneshot::channel();
            self.server.node.tx.send(NodeMsg::Progress { done: tx }).map_err(|_| EtcdError::Stopped)?;
            return rx.await.map_err(|_| EtcdError::Stopped);
        }
        let mut client = self.server.leader_client()?;
        let resp = client
            .progress(ProgressRequest {})
            .await
            .map_err(|s| EtcdError::Internal(format!("asking the leader for progress: {}", s.message())))?;
        Ok(resp
            .into_inner()
            .members
            .into_iter()
            .map(|p| PeerProgress { id: p.id, matched: p.matched, is_learner: p.is_learner })
            .collect())
    }
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn member_add(
        &self,
        request: Request<MemberAddRequest>,
    ) -> Result<Response<MemberAddResponse>, Status> {
        self.server.check_admin(&request)?;
        let r = request.into_inner();
        check_urls(&r.peer_ur_ls)?;
        let members = self.server.members.list();
        if r.is_learner && members.iter().filter(|m| m.is_learner).count() >= MAX_LEARNERS {
            return Err(Status::failed_precondition("etcdserver: too many learner members in cluster"));
        }
        if members.iter().any(|m| m.peer_ur_ls.iter().any(|u| r.peer_ur_ls.contains(u))) {
            return Err(EtcdError::PeerUrlExists.into());
        }
        let id = membership::new_member_id(
            &r.peer_ur_ls,
            &self.server.limits.initial_cluster_token,
            SystemTime::now(),
        );
        let member = Member {
            id,
            name: String::new(),
            peer_ur_ls: r.peer_ur_ls,
            client_ur_ls: Vec::new(),
            is_learner: r.is_learner,
        };
        let change_type = if r.is_learner {
            ConfChangeType::AddLearnerNode
        } else {
            let mut voters: Vec<Member> = members.into_iter().filter(|m| !m.is_learner).collect();
            voters.push(member.clone());
            self.check_quorum_after(&voters)?;
            ConfChangeType::AddNode
        };
        let list =
            self.server.propose_conf_change(conf_change(Kind::Add, change_type, member.clone())).await?;
        Ok(Response::new(MemberAddResponse { header: self.header(), member: Some(member), members: list }))
    }

    async fn member_remove(
        &self,
        request: Request<MemberRemoveRequest>,
    ) -> Result<Response<MemberRemoveResponse>, Status> {
        self.server.check_admin(&request)?;
        let id = request.into_inner().id;
        let member = self.server.members.get(id).ok_or(EtcdError::MemberNotFound)?;
        if !member.is_learner {
            let voters: Vec<Member> =
                self.server.members.list().into_iter().filter(|m| !m.is_learner && m.id != id).collect();
            self.check_quorum_after(&voters)?;
        }
        let list = self
            .server
            .propose_conf_change(conf_change(Kind::Remove, ConfChangeType::RemoveNode, member))
            .await?;
        Ok(Response::new(MemberRemoveResponse { header: self.header(), members: list }))
    }

    async fn member_update(
        &self,
        request: Request<MemberUpdateRequest>,
    ) -> Result<Response<MemberUpdateResponse>, Status> {
        self.server.check_admin(&request)?;
        let r = request.into_inner();
        check_urls(&r.peer_ur_ls)?;
        let mut member = self.server.members.get(r.id).ok_or(EtcdError::MemberNotFound)?;
        member.peer_ur_ls = r.peer_ur_ls;
        // raft has no "update": re-adding a member in its current role changes nothing there.
        let change_type =
            if member.is_learner { ConfChangeType::AddLearnerNode } else { ConfChangeType::AddNode };
        let list = self.server.propose_conf_change(conf_change(Kind::Update, change_type, member)).await?;
        Ok(Response::new(MemberUpdateResponse { header: self.header(), members: list }))
    }

    async fn member_list(
        &self,
        request: Request<MemberListRequest>,
    ) -> Result<Response<MemberListResponse>, Status> {
        if request.get_ref().linearizable {
            self.server.linearizable_read().await?;
        }
        Ok(Response::new(MemberListResponse { header: self.header(), members: self.server.members.list() }))
    }

    async fn member_promote(
        &self,
        request: Request<MemberPromoteRequest>,
    ) -> Result<Response<MemberPromoteResponse>, Status> {
        self.server.check_admin(&request)?;
        let id = request.into_inner().id;
        let member = self.server.members.get(id).ok_or(EtcdError::MemberNotFound)?;
        if !member.is_learner {
            return Err(EtcdError::MemberNotLearner.into());
        }
        let progress = self.progress().await?;
        let leader = self.server.node.status.leader();
        let leader_match = progress.iter().find(|p| p.id == leader).map_or(0, |p| p.matched);
        let learner_match = progress.iter().find(|p| p.id == id).map_or(0, |p| p.matched);
        if leader_match == 0 || (learner_match as f64) < LEARNER_READY_PERCENT * leader_match as f64 {
            return Err(EtcdError::LearnerNotReady.into());
        }
        let voters: Vec<Member> =
            self.server.members.list().into_iter().filter(|m| !m.is_learner || m.id == id).collect();
        self.check_quorum_after(&voters)?;
        let list = self
            .server
            .propose_conf_change(conf_change(Kind::Promote, ConfChangeType::AddNode, member))
            .await?;
        Ok(Response::new(MemberPromoteResponse { header: self.header(), members: list }))
    }
}

/// Publishes this member's name and client URLs through raft (etcd's publish on start),
/// retrying until the cluster has recorded them or the server stops.
pub async fn publish_attributes(
    server: Arc<EtcdServer>,
    name: String,
    client_urls: Vec<String>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let recorded =
            server.members.local().is_some_and(|m| m.name == name && m.client_ur_ls == client_urls);
        if recorded {
            return;
        }
        if server.node.status.leader() != raft::INVALID_ID {
            let req = InternalRaftRequest {
                cluster_member_attr_set: Some(ClusterMemberAttrSetRequest {
                    member_id: server.member_id(),
                    member_attributes: Some(Attributes {
                        name: name.clone(),
                        client_urls: client_urls.clone(),
                    }),
                }),
                ..Default::default()
            };
            match server.propose(req).await {
                Ok(_) => {
                    tracing::info!(name, ?client_urls, "published member attributes");
                    continue;
                }
                Err(e) => tracing::debug!("publishing member attributes failed, retrying: {e}"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = shutdown.changed() => return,
        }
    }
}
