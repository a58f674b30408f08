//! The etcd server: the state every gRPC service shares, how a request reaches raft
//! (`propose`) and how a read is made linearizable (`linearizable_read`). One module per
//! gRPC service, as etcd's `v3rpc` package has one file per service.

pub mod auth;
pub mod cluster;
pub mod kv;
pub mod lease;
pub mod maintenance;
pub mod watch;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prost::Message;
use proto::etcdserverpb::{
    AlarmRequest, AlarmType, InternalRaftRequest, RequestHeader, ResponseHeader, alarm_request::AlarmAction,
};
use tokio::sync::oneshot;

use crate::alarm::Alarms;
use crate::apply::ApplyResult;
use crate::auth::{AuthInfo, AuthStore, INTERNAL_AUTH_REVISION};
use crate::backend::Backend;
use crate::error::EtcdError;
use crate::idgen::IdGenerator;
use crate::lease::Lessor;
use crate::membership::Membership;
use crate::metrics::Metrics;
use crate::mvcc::{KvStore, WatchableStore};
use crate::node::{NodeHandle, NodeMsg};

/// Bytes etcd adds to a put's key and value when estimating what it costs the quota.
const KV_QUOTA_OVERHEAD: u64 = 256;
const LEASE_QUOTA_OVERHEAD: u64 = 64;
/// How stale the cached database size may be when checking the quota.
const SIZE_REFRESH: Duration = Duration::from_millis(100);

/// Limits from the configuration that the request path checks.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_request_bytes: usize,
    pub max_txn_ops: usize,
    pub quota_backend_bytes: u64,
    pub request_timeout: Duration,
    pub watch_progress_notify_interval: Duration,
    pub election_timeout: Duration,
    /// Mixed into the ids of members added at runtime.
    pub initial_cluster_token: String,
}

pub struct EtcdServer {
    pub backend: Arc<Backend>,
    pub store: Arc<KvStore>,
    pub watchable: Arc<WatchableStore>,
    pub lessor: Arc<Lessor>,
    pub alarms: Arc<Alarms>,
    pub auth: Arc<AuthStore>,
    pub members: Arc<Membership>,
    pub node: NodeHandle,
    /// Clients to the other members (lease calls go to the leader).
    pub peers: Arc<crate::peer::PeerClients>,
    pub idgen: IdGenerator,
    pub metrics: Arc<Metrics>,
    pub limits: Limits,
    /// Database size as of `size_checked`, for the quota check on every write.
    cached_size: AtomicU64,
    size_checked: Mutex<Instant>,
}

impl EtcdServer {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        backend: Arc<Backend>,
        store: Arc<KvStore>,
        watchable: Arc<WatchableStore>,
        lessor: Arc<Lessor>,
        alarms: Arc<Alarms>,
        auth: Arc<AuthStore>,
        members: Arc<Membership>,
        node: NodeHandle,
        peers: Arc<crate::peer::PeerClients>,
        metrics: Arc<Metrics>,
        limits: Limits,
    ) -> Self {
        let idgen = IdGenerator::new(members.local_id, std::time::SystemTime::now());
        let size = backend.size();
        Self {
            backend,
            store,
            watchable,
            lessor,
            alarms,
            auth,
            members,
            node,
            peers,
            idgen,
            metrics,
            limits,
            cached_size: AtomicU64::new(size),
            size_checked: Mutex::new(Instant::now()),
        }
    }

    pub fn member_id(&self) -> u64 {
        self.members.local_id
    }

    pub fn cluster_id(&self) -> u64 {
        self.members.cluster_id
    }

    /// A full response header at revision `rev`.
    pub fn header(&self, rev: i64) -> ResponseHeader {
        ResponseHeader {
            cluster_id: self.cluster_id(),
            member_id: self.member_id(),
            revision: rev,
            raft_term: self.node.status.term(),
        }
    }

    /// Completes a header the applier started: ids and term, and the current revision if
    /// the applier left it empty (etcd's header filler).
    pub fn fill_header(&self, h: &mut Option<ResponseHeader>) {
        let rev = h.as_ref().map_or(0, |h| h.revision);
        let rev = if rev == 0 { self.store.current_rev() } else { rev };
        *h = Some(self.header(rev));
    }

    /// Sends a request of this server's own (no client behind it) through raft and
    /// waits until it is applied on this member.
    pub async fn propose(&self, req: InternalRaftRequest) -> ApplyResult {
        let internal = RequestHeader { auth_revision: INTERNAL_AUTH_REVISION, ..Default::default() };
        self.propose_with(req, internal).await
    }

    /// Sends a client's request through raft on behalf of `caller` (from
    /// [`Self::caller`]), whose permissions the applier checks.
    pub async fn propose_as(&self, req: InternalRaftRequest, caller: &Option<AuthInfo>) -> ApplyResult {
        let header = match caller {
            Some(info) => RequestHeader {
                username: info.username.clone(),
                auth_revision: info.revision,
                ..Default::default()
            },
            None => RequestHeader::default(),
        };
        self.propose_with(req, header).await
    }

    async fn propose_with(&self, mut req: InternalRaftRequest, mut header: RequestHeader) -> ApplyResult {
        let id = self.idgen.next();
        header.id = id;
        req.header = Some(header);
        let data = req.encode_to_vec();
        if data.len() > self.limits.max_request_bytes {
            return Err(EtcdError::RequestTooLarge);
        }
        let (tx, rx) = oneshot::channel();
        self.node.tx.send(NodeMsg::Propose { id, data, done: tx }).map_err(|_| EtcdError::Stopped)?;
        match tokio::time::timeout(self.limits.request_timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(EtcdError::Stopped),
            Err(_) => Err(EtcdError::Timeout),
        }
    }

    /// Who sent a request while auth is enabled (`None` while it is disabled): the user
    /// of its `token` metadata, else the common name of its verified client
    /// certificate, else nobody (an empty name, which every check refuses).
    pub fn caller<T>(&self, request: &tonic::Request<T>) -> Result<Option<AuthInfo>, EtcdError> {
        if !self.auth.is_enabled() {
            return Ok(None);
        }
        let meta = request.metadata();
        if let Some(token) = meta.get("token").or_else(|| meta.get("authorization")) {
            let token = token.to_str().map_err(|_| EtcdError::InvalidAuthToken)?;
            let info = self.auth.tokens.info(token).ok_or(EtcdError::InvalidAuthToken)?;
            let revision = info.revision.unwrap_or_else(|| self.auth.revision());
            // No client identity may carry the internal marker.
            if revision >= INTERNAL_AUTH_REVISION {
                return Err(EtcdError::InvalidAuthToken);
            }
            return Ok(Some(AuthInfo { username: info.username, revision }));
        }
        let conn = request.extensions().get::<component_base::http::ConnectionInfo>();
        if let Some(cn) =
            conn.and_then(|c| c.client_certificates.as_ref()).and_then(|c| c.first()).and_then(common_name)
        {
            return Ok(Some(AuthInfo { username: cn, revision: self.auth.revision() }));
        }
        Ok(Some(AuthInfo::default()))
    }

    /// Fails unless auth is disabled or the caller holds the root role.
    pub fn check_admin<T>(&self, request: &tonic::Request<T>) -> Result<(), EtcdError> {
        match self.caller(request)? {
            None => Ok(()),
            Some(info) => self.auth.check_admin(&crate::auth::Origin::Client(info)),
        }
    }

    /// Waits until this member may serve a read that reflects every write acknowledged
    /// before the call (raft ReadIndex).
    pub async fn linearizable_read(&self) -> Result<(), EtcdError> {
        let (tx, rx) = oneshot::channel();
        self.node.tx.send(NodeMsg::ReadIndex { done: tx }).map_err(|_| EtcdError::Stopped)?;
        match tokio::time::timeout(self.limits.request_timeout, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(EtcdError::Stopped),
            Err(_) => Err(EtcdError::Timeout),
        }
    }

    /// A client to the current leader, if it is another member.
    pub fn leader_client(&self) -> Result<crate::peer::PeerClient, EtcdError> {
        let leader = self.node.status.leader();
        if leader == raft::INVALID_ID {
            return Err(EtcdError::NoLeader);
        }
        self.peers.get(leader).ok_or(EtcdError::NoLeader)
    }

    /// Sends a membership change through raft; answers with the members once applied.
    pub async fn propose_conf_change(
        &self,
        cc: raft::eraftpb::ConfChange,
    ) -> Result<Vec<crate::membership::Member>, EtcdError> {
        let (tx, rx) = oneshot::channel();
        self.node.tx.send(NodeMsg::ProposeConfChange { cc, done: tx }).map_err(|_| EtcdError::Stopped)?;
        match tokio::time::timeout(self.limits.request_timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(EtcdError::Stopped),
            Err(_) => Err(EtcdError::Timeout),
        }
    }

    /// Database size, refreshed at most every `SIZE_REFRESH`.
    pub fn db_size(&self) -> u64 {
        let mut checked = self.size_checked.lock();
        if checked.elapsed() >= SIZE_REFRESH {
            self.cached_size.store(self.backend.size(), Ordering::Relaxed);
            *checked = Instant::now();
        }
        self.cached_size.load(Ordering::Relaxed)
    }

    /// etcd's quota check: a write that would take the database past the quota raises the
    /// NOSPACE alarm (through raft, so every member sees it) and is refused.
    pub async fn check_quota(&self, cost: u64) -> Result<(), EtcdError> {
        if self.db_size() + cost < self.limits.quota_backend_bytes {
            return Ok(());
        }
        if !self.alarms.is_active(AlarmType::Nospace) {
            let req = InternalRaftRequest {
                alarm: Some(AlarmRequest {
                    action: AlarmAction::Activate as i32,
                    member_id: self.member_id(),
                    alarm: AlarmType::Nospace as i32,
                }),
                ..Default::default()
            };
            if let Err(e) = self.propose(req).await {
                tracing::warn!("raising the NOSPACE alarm failed: {e}");
            } else {
                tracing::warn!(
                    quota = self.limits.quota_backend_bytes,
                    "database space exceeded; NOSPACE alarm raised"
                );
            }
        }
        Err(EtcdError::NoSpace)
    }

    /// Quota cost of a put.
    pub fn put_cost(key: &[u8], value: &[u8]) -> u64 {
        KV_QUOTA_OVERHEAD + key.len() as u64 + value.len() as u64
    }

    pub fn lease_cost() -> u64 {
        LEASE_QUOTA_OVERHEAD
    }
}

/// The subject common name of a DER certificate.
fn common_name(cert: &rustls_pki_types::CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    // Go's pkix.Name keeps the last common name of a subject that has several.
    let cn = parsed.subject().iter_common_name().last()?.as_str().ok()?.to_string();
    Some(cn)
}

/// Unwraps the response variant a request type produces.
macro_rules! expect_response {
    ($result:expr, $variant:ident) => {
        match $result {
            Ok(crate::apply::ApplyResponse::$variant(r)) => Ok(r),
            Ok(other) => {
                Err(crate::error::EtcdError::Internal(format!("unexpected apply response {other:?}")))
            }
            Err(e) => Err(e),
        }
    };
}
pub(crate) use expect_response;
