//! The gRPC service peers call on the peer URLs. Every call must come from a member of
//! this cluster that has not been removed.

use std::sync::Arc;

use proto::etcdpeer::peer_server::Peer;
use proto::etcdpeer::{
    Ack, LeaseRenewRequest, LeaseRenewResponse, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
    MembersRequest, MembersResponse, ProbeRequest, ProbeResponse, ProgressRequest, ProgressResponse,
    RaftBatch, SnapshotChunk, progress_response,
};
use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};
use tokio::io::AsyncWriteExt;
use tonic::{Request, Response, Status, Streaming};

use super::connect::{CLUSTER_ID_KEY, MEMBER_ID_KEY};
use crate::error::EtcdError;
use crate::node::NodeMsg;
use crate::server::EtcdServer;
use crate::snapshotter::Snapshotter;

pub struct PeerService {
    pub server: Arc<EtcdServer>,
    pub snapshotter: Arc<Snapshotter>,
}

fn header_id<T>(req: &Request<T>, key: &str) -> Option<u64> {
    req.metadata().get(key).and_then(|v| v.to_str().ok()).and_then(|s| u64::from_str_radix(s, 16).ok())
}

impl PeerService {
    /// The calling member, if it belongs to this cluster and was not removed.
    fn caller<T>(&self, req: &Request<T>) -> Result<u64, Status> {
        let cluster = header_id(req, CLUSTER_ID_KEY);
        if cluster != Some(self.server.cluster_id()) {
            return Err(Status::failed_precondition(format!(
                "cluster ID mismatch: this member belongs to cluster {:x}, the caller to {}",
                self.server.cluster_id(),
                cluster.map_or("(none)".to_string(), |c| format!("{c:x}"))
            )));
        }
        let member = header_id(req, MEMBER_ID_KEY).ok_or_else(|| Status::invalid_argument("no member id"))?;
        if self.server.members.is_removed(member) {
            return Err(Status::permission_denied(super::link::REMOVED));
        }
        Ok(member)
    }

    fn deliver(&self, m: Message) -> Result<(), Status> {
        self.server
            .node
            .tx
            .send(NodeMsg::Raft(Box::new(m)))
            .map_err(|_| Status::unavailable("server stopped"))
    }
}

#[tonic::async_trait]
impl Peer for PeerService {
    async fn raft(&self, request: Request<RaftBatch>) -> Result<Response<Ack>, Status> {
        let from = self.caller(&request)?;
        let local = self.server.member_id();
        for bytes in request.into_inner().messages {
            let m = Message::parse_from_bytes(&bytes)
                .map_err(|e| Status::invalid_argument(format!("raft message does not decode: {e}")))?;
            if m.from != from || m.to != local {
                return Err(Status::invalid_argument(format!(
                    "raft message from {:x} to {:x} sent by {from:x} to {local:x}",
                    m.from, m.to
                )));
            }
            // Snapshots only arrive through the Snapshot call, with their file.
            if m.get_msg_type() == MessageType::MsgSnapshot {
                return Err(Status::invalid_argument("snapshot messages go through the Snapshot call"));
            }
            self.deliver(m)?;
        }
        Ok(Response::new(Ack {}))
    }

    async fn snapshot(&self, request: Request<Streaming<SnapshotChunk>>) -> Result<Response<Ack>, Status> {
        let from = self.caller(&request)?;
        let mut stream = request.into_inner();
        let first =
            stream.message().await?.ok_or_else(|| Status::invalid_argument("empty snapshot stream"))?;
        let mut msg = Message::parse_from_bytes(&first.message)
            .map_err(|e| Status::invalid_argument(format!("raft message does not decode: {e}")))?;
        if msg.get_msg_type() != MessageType::MsgSnapshot
            || msg.from != from
            || msg.to != self.server.member_id()
        {
            return Err(Status::invalid_argument(
                "the first chunk must be a raft snapshot message for this member",
            ));
        }
        let index = msg.get_snapshot().get_metadata().index;
        let path = self.snapshotter.receive_path(from, index);
        let tmp = path.with_extension("tmp");
        let io = |e: std::io::Error| Status::internal(format!("storing snapshot: {e}"));
        let mut file = tokio::fs::File::create(&tmp).await.map_err(io)?;
        file.write_all(&first.data).await.map_err(io)?;
        let mut received = first.data.len() as u64;
        while let Some(chunk) = stream.message().await? {
            received += chunk.data.len() as u64;
            file.write_all(&chunk.data).await.map_err(io)?;
        }
        file.sync_all().await.map_err(io)?;
        drop(file);
        let check = tmp.clone();
        tokio::task::spawn_blocking(move || crate::snapshot::verify_file(&check))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                Status::data_loss(format!("received snapshot is damaged: {e}"))
            })?;
        tokio::fs::rename(&tmp, &path).await.map_err(io)?;
        tracing::info!(from = format!("{from:x}"), index, bytes = received, "received raft snapshot");
        msg.mut_snapshot().data = path.display().to_string().into_bytes().into();
        self.deliver(msg)?;
        Ok(Response::new(Ack {}))
    }

    async fn members(&self, request: Request<MembersRequest>) -> Result<Response<MembersResponse>, Status> {
        // A joining member does not know the cluster id yet: only refuse other clusters.
        if let Some(c) = header_id(&request, CLUSTER_ID_KEY)
            && c != 0
            && c != self.server.cluster_id()
        {
            return Err(Status::failed_precondition("cluster ID mismatch"));
        }
        Ok(Response::new(MembersResponse {
            cluster_id: self.server.cluster_id(),
            members: self.server.members.list(),
        }))
    }

    async fn lease_renew(
        &self,
        request: Request<LeaseRenewRequest>,
    ) -> Result<Response<LeaseRenewResponse>, Status> {
        self.caller(&request)?;
        let ttl = match self.server.lessor.renew(request.get_ref().id) {
            Ok(ttl) => ttl,
            Err(EtcdError::LeaseNotFound) => 0,
            Err(e) => return Err(e.into()),
        };
        Ok(Response::new(LeaseRenewResponse { ttl }))
    }

    async fn lease_time_to_live(
        &self,
        request: Request<LeaseTimeToLiveRequest>,
    ) -> Result<Response<LeaseTimeToLiveResponse>, Status> {
        self.caller(&request)?;
        if !self.server.lessor.is_primary() {
            return Err(EtcdError::NotLeader.into());
        }
        let resp = match self.server.lessor.status(request.get_ref().id) {
            Some(st) => {
                LeaseTimeToLiveResponse { found: true, remaining: st.remaining, granted_ttl: st.granted_ttl }
            }
            None => LeaseTimeToLiveResponse::default(),
        };
        Ok(Response::new(resp))
    }

    async fn progress(
        &self,
        request: Request<ProgressRequest>,
    ) -> Result<Response<ProgressResponse>, Status> {
        self.caller(&request)?;
        if !self.server.node.status.is_leader() {
            return Err(EtcdError::NotLeader.into());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.server
            .node
            .tx
            .send(NodeMsg::Progress { done: tx })
            .map_err(|_| Status::unavailable("server stopped"))?;
        let list = rx.await.map_err(|_| Status::unavailable("server stopped"))?;
        let members = list
            .into_iter()
            .map(|p| progress_response::Member { id: p.id, matched: p.matched, is_learner: p.is_learner })
            .collect();
        Ok(Response::new(ProgressResponse { members }))
    }

    async fn probe(&self, request: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        self.caller(&request)?;
        Ok(Response::new(ProbeResponse {}))
    }
}
