//! etcd: a Raft key-value store that speaks the etcd v3 gRPC API, so that etcdctl,
//! clientv3 and kube-apiserver cannot tell it from etcd.
//!
//! # Layout
//!
//! - [`config`]: flags (etcd's names and defaults) and the validated [`config::ServerConfig`].
//! - [`backend`]: one rocksdb database; the raft log and the state machine live in separate
//!   column families, so an apply batch can cover data and applied index atomically.
//! - [`raftlog`]: `raft::Storage` over the raft column family.
//! - [`node`]: the thread that owns the raft node and runs the Ready loop (group commit).
//! - [`apply`]: committed entries → state changes, with etcd's request semantics.
//! - [`mvcc`]: revisions, the key index, the key-value store and watchers.
//! - [`lease`], [`alarm`], [`membership`]: the rest of the replicated state.
//! - [`auth`]: users, roles, permissions and tokens (etcd's auth store), and the checks
//!   every request passes while auth is enabled.
//! - [`bootstrap`]: a new cluster, a restart, or joining a running cluster.
//! - [`peer`]: the transport between members (raft messages, snapshots, leader calls);
//!   [`snapshotter`] makes the snapshots a lagging member is sent.
//! - [`server`]: the gRPC services (KV, Watch, Lease, Cluster, Maintenance, Auth).
//! - [`http`]: `/metrics`, `/health`, `/version` beside gRPC on the client port; the peer port.
//! - [`snapshot`], [`compactor`], [`metrics`], [`idgen`], [`raft_logger`].
//!
//! A write travels: gRPC handler → [`server::EtcdServer::propose`] → node thread (propose,
//! persist with one fsync per Ready) → [`apply`] (one backend batch per Ready) → the
//! handler's waiter, and the events to [`mvcc::watchable`].

pub mod alarm;
pub mod apply;
pub mod auth;
pub mod backend;
pub mod bbolt;
pub mod bootstrap;
pub mod compactor;
pub mod config;
pub mod error;
pub mod http;
pub mod idgen;
pub mod lease;
pub mod membership;
pub mod metrics;
pub mod mvcc;
pub mod node;
pub mod peer;
pub mod raft_logger;
pub mod raftlog;
pub mod restore;
pub mod server;
pub mod snapshot;
pub mod snapshotter;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use component_base::http::{ServeOptions, serve};
use component_base::shutdown::Shutdown;
use proto::etcdpeer::peer_server::PeerServer;
use proto::etcdserverpb::{
    auth_server::AuthServer, cluster_server::ClusterServer, kv_server::KvServer, lease_server::LeaseServer,
    maintenance_server::MaintenanceServer, watch_server::WatchServer,
};
use tokio::net::TcpListener;
use url::Url;

use crate::alarm::Alarms;
use crate::apply::{Applier, CompactionJob};
use crate::backend::Backend;
use crate::config::ServerConfig;
use crate::lease::Lessor;
use crate::metrics::Metrics;
use crate::mvcc::{KvStore, WatchableStore};
use crate::node::{META_CONSISTENT_INDEX, Node, NodeConfig, NodeHandle, RaftStatus};
use crate::peer::service::PeerService;
use crate::peer::{Identity, PeerClients, PeerTransport};
use crate::raftlog::RaftLog;
use crate::server::{EtcdServer, Limits};
use crate::snapshotter::Snapshotter;

/// The etcd version this server reports (`Status.version`, `/version`).
pub const SERVER_VERSION: &str = "3.4.23";

/// gRPC may wrap a request in this much more than `--max-request-bytes` (etcd's
/// grpcOverheadBytes); larger messages are refused by the transport itself.
const GRPC_OVERHEAD_BYTES: usize = 512 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("data dir {path}: {source}")]
    DataDir {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Backend(#[from] backend::BackendError),
    #[error(transparent)]
    Mvcc(#[from] mvcc::MvccError),
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    #[error("TLS: {0}")]
    Tls(#[from] component_base::tls::Error),
    #[error("listening on {url}: {source}")]
    Listen {
        url: Url,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Membership(String),
    #[error("--auth-token: {0}")]
    AuthToken(#[from] auth::token::TokenConfigError),
}

/// A started server: its bound addresses and the handle to stop it.
pub struct Running {
    pub client_addrs: Vec<SocketAddr>,
    pub metrics_addrs: Vec<SocketAddr>,
    pub peer_addrs: Vec<SocketAddr>,
    pub server: Arc<EtcdServer>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Running {
    /// Waits until every listener and background task has stopped (after `shutdown`).
    pub async fn wait(self) {
        for t in self.tasks {
            let _ = t.await;
        }
        let _ = self.stop.send(true);
    }
}

/// Opens the data dir, starts raft and every listener. Listeners bound to port 0 get a
/// free port (see [`Running::client_addrs`]).
pub async fn start(cfg: ServerConfig, shutdown: Shutdown) -> Result<Running, StartError> {
    let db_dir = cfg.data_dir.join("member").join("db");
    create_private_dir(&db_dir)?;
    if cfg.unsafe_no_fsync {
        tracing::warn!("--unsafe-no-fsync is set: acknowledged writes can be lost when the machine crashes");
    }
    let backend = Arc::new(Backend::open_with(&db_dir, cfg.unsafe_no_fsync)?);
    let peer_client_tls = peer_client_tls(cfg.peer_tls.as_ref())?;
    let members = Arc::new(bootstrap::membership(&cfg, &backend, peer_client_tls.clone()).await?);
    let local_id = members.local_id;
    tracing::info!(
        member = format!("{local_id:x}"),
        cluster = format!("{:x}", members.cluster_id),
        data_dir = %cfg.data_dir.display(),
        "starting etcd member"
    );

    let applied = backend.get_meta_u64(META_CONSISTENT_INDEX)?.unwrap_or(0);
    let mut raft_log = RaftLog::open(backend.clone(), applied + 1)?;
    let snapshotter = Snapshotter::new(cfg.data_dir.join("member").join("snap"), backend.clone())
        .map_err(|source| StartError::DataDir { path: cfg.data_dir.join("member/snap"), source })?;
    raft_log.set_snapshotter(snapshotter.clone());
    let (store, leased_keys) = KvStore::open(backend.clone())?;
    let store = Arc::new(store);
    let lessor = Arc::new(Lessor::open(&backend, cfg.min_lease_ttl())?);
    for (key, lease) in leased_keys {
        lessor.attach(lease, &key);
    }
    let alarms = Arc::new(Alarms::load(&backend)?);
    let tokens = auth::token::TokenProvider::from_flag(&cfg.auth_token, cfg.auth_token_ttl)?;
    let auth = Arc::new(auth::AuthStore::load(&backend, tokens, cfg.bcrypt_cost)?);
    let watchable = WatchableStore::new(store.clone(), backend.clone());
    let metrics = Arc::new(Metrics::new(SERVER_VERSION, cfg.quota_backend_bytes));
    metrics.register_store(backend.clone(), store.clone(), watchable.clone());

    let compactions = spawn_compaction_thread(store.clone())
        .map_err(|source| StartError::DataDir { path: cfg.data_dir.clone(), source })?;
    let applier = Applier {
        backend: backend.clone(),
        store: store.clone(),
        lessor: lessor.clone(),
        alarms: alarms.clone(),
        auth: auth.clone(),
        watchable: watchable.clone(),
        members: members.clone(),
        compactions,
    };

    let raft_cfg = raft::Config {
        id: local_id,
        election_tick: cfg.election_ticks(),
        heartbeat_tick: 1,
        applied,
        max_size_per_msg: 1 << 20,
        max_inflight_msgs: 512,
        check_quorum: true,
        pre_vote: true,
        ..Default::default()
    };
    let raw = raft::RawNode::new(&raft_cfg, raft_log, &raft_logger::logger())?;
    let status = Arc::new(RaftStatus { id: local_id, ..Default::default() });
    let (node_tx, node_rx) = std::sync::mpsc::channel();
    let peers = Arc::new(PeerClients::default());
    let transport = PeerTransport::new(
        Identity { cluster_id: members.cluster_id, member_id: local_id },
        peer_client_tls,
        tokio::runtime::Handle::current(),
        node_tx.clone(),
        snapshotter.clone(),
        peers.clone(),
        metrics.clone(),
    );
    let node = Node::new(
        raw,
        applier,
        status.clone(),
        metrics.clone(),
        Box::new(transport),
        NodeConfig {
            id: local_id,
            tick: cfg.heartbeat,
            election_ticks: cfg.election_ticks(),
            snapshot_count: cfg.snapshot_count,
            lease_extend: cfg.election_timeout,
            applied,
        },
    );
    std::thread::Builder::new()
        .name("raft".into())
        .spawn(move || {
            // A panic here would leave a member that answers nothing: stop the process.
            let run = std::panic::AssertUnwindSafe(move || node.run(node_rx));
            if std::panic::catch_unwind(run).is_err() {
                tracing::error!("the raft thread panicked; exiting");
                std::process::exit(2);
            }
        })
        .map_err(|source| StartError::DataDir { path: cfg.data_dir.clone(), source })?;

    let server = Arc::new(EtcdServer::new(
        backend,
        store,
        watchable.clone(),
        lessor,
        alarms,
        auth,
        members,
        NodeHandle { tx: node_tx, status },
        peers,
        metrics,
        Limits {
            max_request_bytes: cfg.max_request_bytes,
            max_txn_ops: cfg.max_txn_ops,
            quota_backend_bytes: cfg.quota_backend_bytes,
            request_timeout: cfg.request_timeout(),
            watch_progress_notify_interval: cfg.watch_progress_notify_interval,
            election_timeout: cfg.election_timeout,
            initial_cluster_token: cfg.initial_cluster_token.clone(),
        },
    ));

    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = vec![
        tokio::spawn(watchable.run_sync_loop(stop_rx.clone())),
        tokio::spawn(server::watch::run_progress_loop(server.clone(), stop_rx.clone())),
        tokio::spawn(server::lease::run_expiry_loop(server.clone(), stop_rx.clone())),
        tokio::spawn(compactor::run(server.clone(), cfg.auto_compaction, stop_rx.clone())),
        tokio::spawn(server::cluster::publish_attributes(
            server.clone(),
            cfg.name.clone(),
            cfg.advertise_client_urls.iter().map(url_string).collect(),
            stop_rx.clone(),
        )),
        tokio::spawn(peer::probe::run(server.clone(), stop_rx.clone())),
    ];
    // Background loops stop when the listeners do.
    {
        let shutdown = shutdown.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            shutdown.wait().await;
            let _ = stop.send(true);
        });
    }

    let client_tls = server_tls(cfg.client_tls.as_ref())?;
    let peer_tls = server_tls(cfg.peer_tls.as_ref())?;

    let grpc_limit = cfg.max_request_bytes + GRPC_OVERHEAD_BYTES;
    let mut routes = tonic::service::Routes::builder();
    routes
        .add_service(
            KvServer::new(server::kv::KvService { server: server.clone() })
                .max_decoding_message_size(grpc_limit),
        )
        .add_service(
            WatchServer::new(server::watch::WatchService { server: server.clone() })
                .max_decoding_message_size(grpc_limit),
        )
        .add_service(
            LeaseServer::new(server::lease::LeaseService { server: server.clone() })
                .max_decoding_message_size(grpc_limit),
        )
        .add_service(
            ClusterServer::new(server::cluster::ClusterService { server: server.clone() })
                .max_decoding_message_size(grpc_limit),
        )
        .add_service(
            MaintenanceServer::new(server::maintenance::MaintenanceService { server: server.clone() })
                .max_decoding_message_size(grpc_limit),
        )
        .add_service(
            AuthServer::new(server::auth::AuthService { server: server.clone() })
                .max_decoding_message_size(grpc_limit),
        );
    let routes = routes.routes().prepare();
    let endpoints = http::observability_endpoints(&server);
    let mux = http::ClientMux { grpc: routes, http: endpoints.clone() };
    let client_opts = ServeOptions {
        max_connections: 10_000,
        http2_max_concurrent_streams: Some(u32::MAX),
        // etcdctl 3.4 sends `:authority: http://host:port` for per-endpoint
        // calls (endpoint status/hashkv, defrag); real etcd accepts it.
        lenient_h2_authority: true,
        ..Default::default()
    };
    let peer_service = PeerServer::new(PeerService { server: server.clone(), snapshotter })
        .max_decoding_message_size(peer::connect::MAX_PEER_MESSAGE)
        .max_encoding_message_size(peer::connect::MAX_PEER_MESSAGE);
    let peer_mux =
        http::PeerMux { grpc: tonic::service::Routes::new(peer_service).prepare(), server: server.clone() };
    let peer_opts = ServeOptions { http2_max_concurrent_streams: Some(1024), ..Default::default() };

    let client_addrs =
        listen(&cfg.listen_client_urls, &client_tls, mux, client_opts, &shutdown, &mut tasks).await?;
    let metrics_only = http::ClientMux { grpc: tonic::service::Routes::default(), http: endpoints };
    let metrics_addrs = listen(
        &cfg.listen_metrics_urls,
        &client_tls,
        metrics_only,
        ServeOptions::default(),
        &shutdown,
        &mut tasks,
    )
    .await?;
    let peer_addrs =
        listen(&cfg.listen_peer_urls, &peer_tls, peer_mux, peer_opts, &shutdown, &mut tasks).await?;
    tracing::info!(client = ?client_addrs, metrics = ?metrics_addrs, peer = ?peer_addrs, "serving");
    Ok(Running { client_addrs, metrics_addrs, peer_addrs, server, tasks, stop })
}

/// The thread that deletes compacted revisions from the backend.
fn spawn_compaction_thread(store: Arc<KvStore>) -> std::io::Result<std::sync::mpsc::Sender<CompactionJob>> {
    let (tx, rx) = std::sync::mpsc::channel::<CompactionJob>();
    std::thread::Builder::new().name("compaction".into()).spawn(move || {
        for job in rx {
            let result = store.physical_compact(job.at, &job.keep).map_err(|e| e.to_string());
            match &result {
                Err(e) => tracing::error!(revision = job.at, "compaction failed: {e}"),
                Ok(()) => tracing::info!(revision = job.at, "finished compaction"),
            }
            if let Some(done) = job.done {
                let _ = done.send(result);
            }
        }
    })?;
    Ok(tx)
}

/// The TLS client configuration members use towards each other's peer URLs.
fn peer_client_tls(
    files: Option<&config::TlsFiles>,
) -> Result<Option<Arc<rustls::ClientConfig>>, StartError> {
    let Some(t) = files else { return Ok(None) };
    Ok(Some(component_base::tls::client_config(t.trusted_ca.as_deref(), Some((&t.cert, &t.key)), &[b"h2"])?))
}

/// The TLS configuration of a listener (h2 for gRPC, HTTP/1.1 for the rest); client
/// certificates are verified only with `--client-cert-auth`, as etcd does.
fn server_tls(files: Option<&config::TlsFiles>) -> Result<Option<Arc<rustls::ServerConfig>>, StartError> {
    let Some(t) = files else { return Ok(None) };
    let ca = if t.client_cert_auth { t.trusted_ca.as_deref() } else { None };
    Ok(Some(component_base::tls::server_config(
        &t.cert,
        &t.key,
        ca,
        t.client_cert_auth,
        &[b"h2", b"http/1.1"],
    )?))
}

/// Serves `svc` on every URL (TLS on https ones); returns the bound addresses.
async fn listen<S, B>(
    urls: &[Url],
    tls: &Option<Arc<rustls::ServerConfig>>,
    svc: S,
    opts: ServeOptions,
    shutdown: &Shutdown,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<Vec<SocketAddr>, StartError>
where
    S: hyper::service::Service<::http::Request<hyper::body::Incoming>, Response = ::http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut addrs = Vec::new();
    for url in urls {
        let listener = bind(url).await?;
        addrs.push(listener.local_addr().map_err(|source| StartError::Listen { url: url.clone(), source })?);
        let tls = if url.scheme() == "https" { tls.clone() } else { None };
        tasks.push(tokio::spawn(serve(listener, tls, svc.clone(), shutdown.clone(), opts.clone())));
    }
    Ok(addrs)
}

/// etcd prints URLs without a trailing slash.
pub(crate) fn url_string(u: &Url) -> String {
    u.as_str().trim_end_matches('/').to_string()
}

async fn bind(url: &Url) -> Result<TcpListener, StartError> {
    let host = url.host_str().unwrap_or("localhost");
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = url.port_or_known_default().unwrap_or(0);
    TcpListener::bind((host, port)).await.map_err(|source| StartError::Listen { url: url.clone(), source })
}

pub(crate) fn create_private_dir(path: &Path) -> Result<(), StartError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|source| StartError::DataDir { path: path.to_path_buf(), source })
}
