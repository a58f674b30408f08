//! The Maintenance service (etcd's `v3rpc/maintenance.go`): alarms, status, hashes,
//! defragmentation and snapshots.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use proto::etcdserverpb::maintenance_server::Maintenance;
use proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, AlarmType, DefragmentRequest, DefragmentResponse, DowngradeRequest,
    DowngradeResponse, HashKvRequest, HashKvResponse, HashRequest, HashResponse, InternalRaftRequest,
    MoveLeaderRequest, MoveLeaderResponse, SnapshotRequest, SnapshotResponse, StatusRequest, StatusResponse,
    alarm_request::AlarmAction,
};
use rocksdb::{IteratorMode, ReadOptions};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::{EtcdServer, expect_response};
use crate::backend::{CF_KEY, CF_LEASE};
use crate::error::EtcdError;
use crate::snapshot;

/// Snapshot chunk size, as etcd sends them.
const SNAPSHOT_CHUNK: usize = 32 * 1024;

pub struct MaintenanceService {
    pub server: Arc<EtcdServer>,
}

type SnapshotStream = Pin<Box<dyn Stream<Item = Result<SnapshotResponse, Status>> + Send>>;

/// How etcd prints an alarm in `Status.errors` (gogo's text form, trailing space included).
fn alarm_text(member_id: u64, alarm: i32) -> String {
    let name = AlarmType::try_from(alarm).map_or("UNKNOWN", |a| a.as_str_name());
    format!("memberID:{member_id} alarm:{name} ")
}

#[tonic::async_trait]
impl Maintenance for MaintenanceService {
    async fn alarm(&self, request: Request<AlarmRequest>) -> Result<Response<AlarmResponse>, Status> {
        let caller = self.server.caller(&request)?;
        let r = request.into_inner();
        if r.action() == AlarmAction::Get {
            // Alarm responses carry no header in etcd 3.4.
            return Ok(Response::new(AlarmResponse { header: None, alarms: self.server.alarms.list() }));
        }
        let result = self
            .server
            .propose_as(InternalRaftRequest { alarm: Some(r), ..Default::default() }, &caller)
            .await;
        let mut resp = expect_response!(result, Alarm)?;
        resp.header = None;
        Ok(Response::new(resp))
    }

    async fn status(&self, _request: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        let s = &self.server;
        let st = &s.node.status;
        let leader = st.leader();
        let mut errors = Vec::new();
        if leader == raft::INVALID_ID {
            errors.push(EtcdError::NoLeader.to_string());
        }
        errors.extend(s.alarms.list().iter().map(|a| alarm_text(a.member_id, a.alarm)));
        let db_size = s.backend.size();
        Ok(Response::new(StatusResponse {
            header: Some(s.header(s.store.current_rev())),
            version: crate::SERVER_VERSION.to_string(),
            db_size: db_size as i64,
            leader,
            raft_index: st.commit.load(std::sync::atomic::Ordering::Acquire),
            raft_term: st.term(),
            raft_applied_index: st.applied.load(std::sync::atomic::Ordering::Acquire),
            errors,
            db_size_in_use: s.backend.size_in_use() as i64,
            is_learner: s.members.local().is_some_and(|m| m.is_learner),
        }))
    }

    async fn defragment(
        &self,
        request: Request<DefragmentRequest>,
    ) -> Result<Response<DefragmentResponse>, Status> {
        check_admin(&self.server, &request)?;
        let backend = self.server.backend.clone();
        tokio::task::spawn_blocking(move || backend.defragment())
            .await
            .map_err(|e| EtcdError::Internal(format!("defragment task: {e}")))?
            .map_err(|e| EtcdError::Internal(format!("defragment: {e}")))?;
        tracing::info!(db_size = self.server.backend.size(), "defragmented");
        // etcd's DefragmentResponse carries no header.
        Ok(Response::new(DefragmentResponse { header: None }))
    }

    async fn hash(&self, request: Request<HashRequest>) -> Result<Response<HashResponse>, Status> {
        check_admin(&self.server, &request)?;
        let server = self.server.clone();
        let (hash, rev) = tokio::task::spawn_blocking(move || -> Result<(u32, i64), EtcdError> {
            let backend = &server.backend;
            let snap = backend.db().snapshot();
            let rev = server.store.current_rev();
            let mut hash = 0u32;
            for cf in [CF_KEY, CF_LEASE] {
                let mut ro = ReadOptions::default();
                ro.set_snapshot(&snap);
                ro.fill_cache(false);
                hash = crc32c::crc32c_append(hash, cf.as_bytes());
                for item in backend.db().iterator_cf_opt(backend.cf(cf), ro, IteratorMode::Start) {
                    let (k, v) = item.map_err(|e| EtcdError::Internal(e.to_string()))?;
                    hash = crc32c::crc32c_append(hash, &k);
                    hash = crc32c::crc32c_append(hash, &v);
                }
            }
            Ok((hash, rev))
        })
        .await
        .map_err(|e| EtcdError::Internal(format!("hash task: {e}")))??;
        Ok(Response::new(HashResponse { header: Some(self.server.header(rev)), hash }))
    }

    async fn hash_kv(&self, request: Request<HashKvRequest>) -> Result<Response<HashKvResponse>, Status> {
        check_admin(&self.server, &request)?;
        let rev = request.into_inner().revision;
        let store = self.server.store.clone();
        let (hash, hashed_rev, compact) = tokio::task::spawn_blocking(move || store.hash_kv(rev))
            .await
            .map_err(|e| EtcdError::Internal(format!("hash task: {e}")))?
            .map_err(EtcdError::from)?;
        Ok(Response::new(HashKvResponse {
            header: Some(self.server.header(hashed_rev)),
            hash,
            // etcd reports -1 until the first compaction.
            compact_revision: if compact == 0 { -1 } else { compact },
        }))
    }

    type SnapshotStream = SnapshotStream;

    async fn snapshot(
        &self,
        request: Request<SnapshotRequest>,
    ) -> Result<Response<Self::SnapshotStream>, Status> {
        check_admin(&self.server, &request)?;
        let (tx, rx) = mpsc::channel::<Result<SnapshotResponse, Status>>(4);
        let backend = self.server.backend.clone();
        tokio::task::spawn_blocking(move || {
            let result = snapshot::write_bbolt(
                &backend,
                |remaining, chunk| {
                    let msg =
                        SnapshotResponse { header: None, remaining_bytes: remaining, blob: chunk.to_vec() };
                    tx.blocking_send(Ok(msg)).map_err(|_| std::io::Error::other("client went away"))
                },
                SNAPSHOT_CHUNK,
            );
            match result {
                Ok(total) => tracing::info!(bytes = total, "sent database snapshot"),
                Err(e) => {
                    tracing::warn!("snapshot failed: {e}");
                    let _ = tx.blocking_send(Err(Status::internal(format!("snapshot: {e}"))));
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn move_leader(
        &self,
        request: Request<MoveLeaderRequest>,
    ) -> Result<Response<MoveLeaderResponse>, Status> {
        check_admin(&self.server, &request)?;
        let target = request.into_inner().target_id;
        let s = &self.server;
        if !s.node.status.is_leader() {
            return Err(EtcdError::NotLeader.into());
        }
        if s.members.get(target).is_none_or(|m| m.is_learner) {
            return Err(EtcdError::BadLeaderTransferee.into());
        }
        if target != s.member_id() {
            s.node.tx.send(crate::node::NodeMsg::TransferLeader(target)).map_err(|_| EtcdError::Stopped)?;
            // etcd gives a transfer a few election timeouts; poll until the target leads.
            let deadline = tokio::time::Instant::now() + s.limits.election_timeout * 5;
            while s.node.status.leader() != target {
                if tokio::time::Instant::now() >= deadline {
                    return Err(EtcdError::LeaderTransferTimeout.into());
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        Ok(Response::new(MoveLeaderResponse { header: Some(s.header(s.store.current_rev())) }))
    }

    async fn downgrade(
        &self,
        request: Request<DowngradeRequest>,
    ) -> Result<Response<DowngradeResponse>, Status> {
        check_admin(&self.server, &request)?;
        Err(EtcdError::Unimplemented("cluster version downgrade").into())
    }
}

/// etcd's authMaintenanceServer: root only while auth is enabled. etcd 3.4 returns its
/// auth store's errors untranslated (code Unknown, "auth: ..."), which etcdctl prints.
fn check_admin<T>(server: &EtcdServer, request: &Request<T>) -> Result<(), Status> {
    server.check_admin(request).map_err(|e| match e {
        EtcdError::UserNotFound => Status::unknown("auth: user not found"),
        e => Status::unknown(e.to_string().replacen("etcdserver: ", "auth: ", 1)),
    })
}
