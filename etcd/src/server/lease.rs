//! The Lease service (etcd's `v3rpc/lease.go`): grants and revocations through raft,
//! keep-alives and TimeToLive answered by the leader's lessor, and the loop that revokes
//! expired leases.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use proto::etcdpeer as peer;
use proto::etcdserverpb::lease_server::Lease;
use proto::etcdserverpb::{
    InternalRaftRequest, LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest,
    LeaseKeepAliveResponse, LeaseLeasesRequest, LeaseLeasesResponse, LeaseRevokeRequest, LeaseRevokeResponse,
    LeaseStatus, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::{EtcdServer, expect_response};
use crate::auth::{Access, Origin};
use crate::error::EtcdError;
use crate::lease::MAX_LEASE_TTL;

/// How often the leader looks for expired leases, and how many it revokes per pass
/// (etcd checks every 500ms and revokes at most 1000 leases a second).
const EXPIRY_CHECK: Duration = Duration::from_millis(500);
const REVOKES_PER_CHECK: usize = 500;

pub struct LeaseService {
    pub server: Arc<EtcdServer>,
}

type KeepAliveStream = Pin<Box<dyn Stream<Item = Result<LeaseKeepAliveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Lease for LeaseService {
    async fn lease_grant(
        &self,
        request: Request<LeaseGrantRequest>,
    ) -> Result<Response<LeaseGrantResponse>, Status> {
        let caller = self.server.caller(&request)?;
        let mut r = request.into_inner();
        if r.ttl > MAX_LEASE_TTL {
            return Err(EtcdError::LeaseTtlTooLarge.into());
        }
        self.server.check_quota(EtcdServer::lease_cost()).await?;
        if r.id == 0 {
            r.id = self.server.idgen.next_lease_id();
        }
        let result = self
            .server
            .propose_as(InternalRaftRequest { lease_grant: Some(r), ..Default::default() }, &caller)
            .await;
        let mut resp = expect_response!(result, LeaseGrant)?;
        self.server.fill_header(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn lease_revoke(
        &self,
        request: Request<LeaseRevokeRequest>,
    ) -> Result<Response<LeaseRevokeResponse>, Status> {
        let caller = self.server.caller(&request)?;
        let r = request.into_inner();
        let result = self
            .server
            .propose_as(InternalRaftRequest { lease_revoke: Some(r), ..Default::default() }, &caller)
            .await;
        let mut resp = expect_response!(result, LeaseRevoke)?;
        self.server.fill_header(&mut resp.header);
        Ok(Response::new(resp))
    }

    type LeaseKeepAliveStream = KeepAliveStream;

    async fn lease_keep_alive(
        &self,
        request: Request<Streaming<LeaseKeepAliveRequest>>,
    ) -> Result<Response<Self::LeaseKeepAliveStream>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let server = self.server.clone();
        tokio::spawn(async move {
            loop {
                let req = match inbound.message().await {
                    Ok(Some(req)) => req,
                    Ok(None) => return,
                    Err(e) => {
                        tracing::debug!("lease keep-alive stream ended: {e}");
                        return;
                    }
                };
                // An unknown lease is answered with TTL 0, which clients read as "not found".
                let ttl = match renew(&server, req.id).await {
                    Ok(ttl) => ttl,
                    Err(EtcdError::LeaseNotFound) => 0,
                    Err(e) => {
                        let _ = tx.send(Err(e.into())).await;
                        return;
                    }
                };
                let resp = LeaseKeepAliveResponse {
                    header: Some(server.header(server.store.current_rev())),
                    id: req.id,
                    ttl,
                };
                if tx.send(Ok(resp)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn lease_time_to_live(
        &self,
        request: Request<LeaseTimeToLiveRequest>,
    ) -> Result<Response<LeaseTimeToLiveResponse>, Status> {
        let r = request.get_ref().clone();
        self.server.linearizable_read().await?;
        let header = Some(self.server.header(self.server.store.current_rev()));
        let resp = match self.server.lessor.status(r.id) {
            Some(mut st) => {
                // Only the leader knows how long the lease has left.
                if !self.server.lessor.is_primary() {
                    let mut leader = self.server.leader_client()?;
                    let remote = leader
                        .lease_time_to_live(peer::LeaseTimeToLiveRequest { id: r.id })
                        .await
                        .map_err(|s| EtcdError::Internal(format!("asking the leader: {}", s.message())))?
                        .into_inner();
                    if remote.found {
                        st.remaining = remote.remaining;
                    }
                }
                if r.keys {
                    // The key names are data: the caller must be allowed to read each
                    // (etcd's checkLeaseTimeToLive, the fix for CVE-2023-32082).
                    let auth = &self.server.auth;
                    let origin = Origin::Client(self.server.caller(&request)?.unwrap_or_default());
                    let revision = auth.revision();
                    auth.check_keys(&origin, &st.keys, Access::Read)?;
                    if auth.revision() != revision {
                        return Err(EtcdError::AuthOldRevision.into());
                    }
                }
                LeaseTimeToLiveResponse {
                    header,
                    id: r.id,
                    ttl: st.remaining,
                    granted_ttl: st.granted_ttl,
                    keys: if r.keys { st.keys } else { Vec::new() },
                }
            }
            // etcd answers an unknown lease with TTL -1 ("already expired") rather than an error.
            None => LeaseTimeToLiveResponse { header, id: r.id, ttl: -1, ..Default::default() },
        };
        Ok(Response::new(resp))
    }

    async fn lease_leases(
        &self,
        _request: Request<LeaseLeasesRequest>,
    ) -> Result<Response<LeaseLeasesResponse>, Status> {
        self.server.linearizable_read().await?;
        let leases = self.server.lessor.ids().into_iter().map(|id| LeaseStatus { id }).collect();
        Ok(Response::new(LeaseLeasesResponse {
            header: Some(self.server.header(self.server.store.current_rev())),
            leases,
        }))
    }
}

/// Renews a lease: here if this member tracks expiry (leads), otherwise at the leader.
async fn renew(server: &EtcdServer, id: i64) -> Result<i64, EtcdError> {
    match server.lessor.renew(id) {
        Err(EtcdError::NotLeader) => {}
        other => return other,
    }
    let mut leader = server.leader_client()?;
    let resp = leader
        .lease_renew(peer::LeaseRenewRequest { id })
        .await
        .map_err(|s| EtcdError::Internal(format!("renewing at the leader: {}", s.message())))?;
    match resp.into_inner().ttl {
        0 => Err(EtcdError::LeaseNotFound),
        ttl => Ok(ttl),
    }
}

/// Revokes expired leases while this member leads, until `shutdown` fires.
pub async fn run_expiry_loop(server: Arc<EtcdServer>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval(EXPIRY_CHECK);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        for id in server.lessor.take_expired(REVOKES_PER_CHECK) {
            let server = server.clone();
            tokio::spawn(async move {
                let req = InternalRaftRequest {
                    lease_revoke: Some(LeaseRevokeRequest { id }),
                    ..Default::default()
                };
                match server.propose(req).await {
                    Ok(_) | Err(EtcdError::LeaseNotFound) => {
                        tracing::debug!(lease = format!("{id:016x}"), "revoked expired lease")
                    }
                    // Retried on a later pass: take_expired hands the lease out again.
                    Err(e) => {
                        tracing::warn!(lease = format!("{id:016x}"), "revoking expired lease failed: {e}")
                    }
                }
            });
        }
    }
}
