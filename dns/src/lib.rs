//! kube-dns: the cluster DNS addon. It serves the Kubernetes DNS-based service discovery
//! specification (schema 1.1.0) for the cluster domain from Services, EndpointSlices and
//! Namespaces watched through the API server, and forwards every other name to the node's
//! resolvers through a cache — the job CoreDNS's `kubernetes`, `forward` and `cache`
//! plugins do in upstream clusters, behind the same `kube-dns` Service.
//!
//! # Layout
//!
//! - [`options`]: flags → [`Config`].
//! - [`names`]: the shapes of names inside the zone (`<svc>.<ns>.svc.<zone>`, ...).
//! - [`cluster`]: the watched objects, reduced and indexed by name and address.
//! - [`informers`]: the kube-rs watches feeding [`cluster`].
//! - [`records`]: the specification itself: records, NODATA or NXDOMAIN.
//! - [`forward`]: other names to the upstream resolvers (UDP, TCP on truncation).
//! - [`cache`]: forwarded answers, TTL-respecting and bounded.
//! - [`handler`]: hickory's request handler tying them together.
//! - [`metrics`]: CoreDNS's metric names.
//!
//! DNS on UDP and TCP is hickory-server's (listeners, framing, truncation to the client's
//! buffer); `/metrics`, `/health` and `/ready` are component-base's HTTP server.

pub mod cache;
pub mod cluster;
pub mod forward;
pub mod handler;
pub mod informers;
pub mod metrics;
pub mod names;
pub mod options;
pub mod records;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use component_base::http::{Endpoints, HealthFormat, ServeOptions};
use component_base::metrics::Registry;
use component_base::shutdown::Shutdown;
use tokio::net::{TcpListener, UdpSocket};

pub use options::{Config, Flags};

/// How long a TCP client may stay silent before its connection is closed.
const TCP_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Responses queued per TCP connection.
const TCP_RESPONSE_BUFFER: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Forward(#[from] forward::Error),
    #[error(transparent)]
    Client(#[from] component_base::client::Error),
    #[error("listening on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error("DNS server stopped: {0}")]
    Server(String),
}

/// The `server` label CoreDNS gives its metrics (`dns://:53` for every address).
fn server_label(addr: &SocketAddr) -> String {
    if addr.ip().is_unspecified() { format!("dns://:{}", addr.port()) } else { format!("dns://{addr}") }
}

/// Serves DNS and the HTTP endpoints until `shutdown`.
pub async fn run(config: Config, shutdown: Shutdown) -> Result<(), Error> {
    let client =
        component_base::client::from_flags(config.kubeconfig.as_deref(), config.master.as_deref()).await?;
    let zone = records::Zone::new(&config.domain, config.ttl, config.pods)
        .map_err(|e| Error::Config(format!("--domain {:?}: {e}", config.domain)))?;

    let registry = Registry::with_process_metrics();
    let metrics = Arc::new(metrics::Metrics::register(&registry, server_label(&config.dns_addr)));
    let cluster = Arc::new(cluster::Cluster::new());
    let synced = informers::start(client, cluster.clone(), shutdown.clone()).flag();
    let forwarder = Arc::new(forward::Forwarder::new(config.upstreams.clone(), metrics.clone()));
    let cache = Arc::new(cache::Cache::new(config.cache_size, config.cache_ttl, metrics.clone()));
    let handler = handler::Handler { cluster, synced: synced.clone(), zone, forwarder, cache, metrics };

    // Bind everything before serving anything, so a taken port fails the start at once.
    let udp = UdpSocket::bind(config.dns_addr)
        .await
        .map_err(|source| Error::Listen { addr: config.dns_addr, source })?;
    let tcp = TcpListener::bind(config.dns_addr)
        .await
        .map_err(|source| Error::Listen { addr: config.dns_addr, source })?;
    let mut http: BTreeMap<SocketAddr, Endpoints> = BTreeMap::new();
    if let Some(addr) = config.metrics_addr {
        let e = http.remove(&addr).unwrap_or_default();
        http.insert(addr, e.metrics("/metrics", registry.clone()));
    }
    if let Some(addr) = config.health_addr {
        let e = http.remove(&addr).unwrap_or_default();
        http.insert(addr, e.health("/health", HealthFormat::Kubernetes, "dns", |_| async { Ok(()) }));
    }
    if let Some(addr) = config.ready_addr {
        let e = http.remove(&addr).unwrap_or_default();
        let flag = synced.clone();
        http.insert(
            addr,
            e.health("/ready", HealthFormat::Kubernetes, "kubernetes", move |_| {
                let ready = flag.load(Ordering::Acquire);
                async move { if ready { Ok(()) } else { Err("the API watches have not listed yet".into()) } }
            }),
        );
    }
    let mut listeners = Vec::new();
    for (addr, endpoints) in http {
        let listener = TcpListener::bind(addr).await.map_err(|source| Error::Listen { addr, source })?;
        listeners.push((listener, endpoints));
    }
    for (listener, endpoints) in listeners {
        tokio::spawn(component_base::http::serve(
            listener,
            None,
            endpoints.into_service(),
            shutdown.clone(),
            ServeOptions::default(),
        ));
    }

    let mut server = hickory_server::Server::new(handler);
    server.register_socket(udp);
    server.register_listener(tcp, TCP_IDLE_TIMEOUT, TCP_RESPONSE_BUFFER);
    tracing::info!(
        addr = %config.dns_addr,
        domain = %config.domain,
        upstreams = ?config.upstreams,
        "serving DNS"
    );
    shutdown.wait().await;
    server.shutdown_gracefully().await.map_err(|e| Error::Server(e.to_string()))
}
