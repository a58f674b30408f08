//! kube-apiserver: the REST+watch API of Kubernetes, stored in etcd.
//!
//! # Layout
//!
//! - [`config`]: upstream's flags and the validated [`config::Config`].
//! - [`storage::etcd3`]: the etcd v3 client (JSON objects, resourceVersion = mod revision).
//! - [`cacher`]: the watch cache, one etcd watch per resource, serving gets, lists, watches.
//! - [`registry`]: the generic store and the per-resource hooks ([`registry::resources`]).
//! - [`handlers`]: routing, content negotiation, verbs, watch streams, subresources.
//! - [`authn`] (who), [`authz`] (may they), [`admission`] (mutate, then validate), [`audit`],
//!   [`encryption`] (at rest); [`context`] carries the user and admission into the store.
//! - [`discovery`], [`openapi`], [`health`], [`metrics`].
//! - [`selectors`], [`validation`], [`field_validation`], [`fieldmanager`], [`patch`], [`table`] and [`printers`], [`protobuf`].
//! - [`services`] (cluster IPs, node ports), [`namespaces`], [`pods`], [`bootstrap`],
//!   [`component_status`], [`cluster_authentication`] (`extension-apiserver-authentication`).
//! - [`connect`] (`pods/log`, `exec`, `attach`, `portforward`, `nodes/proxy`) through the
//!   [`kubelet_client`] and the upgrade-aware [`proxy`].
//!
//! A write: handler → decode → hooks (default, validate) → etcd Txn guarded by the
//! resourceVersion → the change comes back through the etcd watch into the cache and out
//! to every watcher.

pub mod admission;
pub mod aggregator;
pub mod apiextensions;
pub mod audit;
pub mod authn;
pub mod authz;
pub mod bootstrap;
pub mod cacher;
pub mod cluster_authentication;
pub mod component_status;
pub mod config;
pub mod connect;
pub mod context;
pub mod discovery;
pub mod encryption;
pub mod errors;
pub mod eviction;
pub mod field_validation;
pub mod fieldmanager;
pub mod handlers;
pub mod health;
pub mod kubelet_client;
pub mod metrics;
pub mod namespaces;
pub mod openapi;
pub mod patch;
pub mod pods;
pub mod printers;
pub mod protobuf;
pub mod proxy;
pub mod proxy_rewrite;
pub mod registry;
pub mod selectors;
pub mod serializer;
pub mod services;
pub mod spdy;
pub mod storage;
pub mod stream_translator;
pub mod table;
pub mod tls;
pub mod validation;
pub mod wsstream;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use component_base::http::{ServeOptions, serve};
use component_base::shutdown::Shutdown;
use tokio::sync::Semaphore;

use crate::config::Config;
use crate::handlers::{Api, ApiService, Limits};
use crate::registry::Registry;
use crate::services::Services;
use crate::storage::etcd3::Etcd;

/// How often watchers that asked for bookmarks get one.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Config(String),
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("bootstrapping default objects: {0}")]
    Bootstrap(String),
}

pub struct Running {
    pub addr: SocketAddr,
    pub api: Arc<Api>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

pub async fn start(cfg: Config, shutdown: Shutdown) -> Result<Running, StartError> {
    let audit = audit::Auditor::new(&cfg.audit).map_err(StartError::Config)?;
    let etcd = Etcd::connect(&cfg.etcd).map_err(StartError::Config)?;
    let metrics = Arc::new(metrics::Metrics::new());
    {
        let m = metrics.clone();
        *etcd.observe.lock() = Some(Box::new(move |op, took| m.observe_etcd(op, took)));
    }
    let registry =
        Arc::new(Registry::new(&etcd, &cfg.etcd_prefix, registry::resources::all(), cfg.watch_cache));
    // Encryption at rest goes in before anything reads or writes (the caches start next).
    let stores = registry
        .stores
        .iter()
        .map(|s| {
            (s.prefix.clone(), encryption::config::GroupResource::new(s.res.info.group, s.res.info.plural))
        })
        .collect();
    if let Some(enc) = encryption::Encryption::new(&cfg.encryption, stores).map_err(StartError::Config)? {
        etcd.set_transformer(enc.clone());
        if cfg.encryption.encryption_provider_config_automatic_reload {
            tokio::spawn(enc.reload_forever());
        }
    }
    registry.start_caches();
    metrics.register_storage(registry.clone());
    for s in &registry.stores {
        if !s.cacher.wait_ready(Duration::from_secs(120)).await {
            return Err(StartError::Config(format!(
                "the watch cache for {} could not list from etcd",
                s.res.info.plural
            )));
        }
    }
    let services = Arc::new(Services::new(cfg.service_cidr, cfg.node_ports));
    let existing = registry
        .core("services")
        .list(&Default::default())
        .await
        .map_err(|e| StartError::Bootstrap(e.to_string()))?;
    services.load(existing["items"].as_array().map(Vec::as_slice).unwrap_or_default());
    bootstrap::run(&registry, &services, cfg.advertise, cfg.listen.port())
        .await
        .map_err(|e| StartError::Bootstrap(e.to_string()))?;
    authz::bootstrap_policy::reconcile(&registry).await.map_err(|e| StartError::Bootstrap(e.to_string()))?;
    // Upstream's apiextensions controllers (post-start hook `start-apiextensions-controllers`).
    let openapi = Arc::new(openapi::OpenApi::new(&registry));
    tokio::spawn(
        apiextensions::controller::Controller::new(
            registry.clone(),
            openapi.clone(),
            etcd.clone(),
            cfg.etcd_prefix.clone(),
            cfg.watch_cache,
        )
        .run(),
    );
    // kube-aggregator's autoregister and availability controllers, and its proxy's table.
    let cluster = admission::webhook::RegistryCluster::new(&registry).map_err(StartError::Config)?;
    let aggregator = Arc::new(
        aggregator::proxy::Aggregator::new(&cfg.aggregator, Arc::new(cluster)).map_err(StartError::Config)?,
    );
    tokio::spawn(aggregator::run(registry.clone(), aggregator.clone()));
    // Upstream's post-start hook `start-cluster-authentication-info-controller`.
    tokio::spawn(cluster_authentication::run(registry.clone(), cfg.authentication.clone()));

    let tls = tls::serving_config(&cfg).map_err(StartError::Config)?;
    let serving_key = tls::serving_files(&cfg).1;
    let authn = authn::Authenticator::new(&cfg.authentication, registry.clone(), Some(&serving_key))
        .map_err(StartError::Config)?;
    // Upstream's ExternalAddress: the advertised address and the secure port.
    let external_address = std::net::SocketAddr::new(cfg.advertise, cfg.listen.port()).to_string();
    let openid = authn.openid_metadata(&cfg.authentication, &external_address);
    let authz = Arc::new(authz::Chain::new(&cfg.authorization, &registry).map_err(StartError::Config)?);
    let admission = Arc::new(admission::Chain::new(&cfg.admission, &registry).map_err(StartError::Config)?);
    let kubelet = Arc::new(kubelet_client::KubeletClient::new(&cfg.kubelet).map_err(StartError::Config)?);
    let api = Arc::new(Api {
        registry: registry.clone(),
        limits: Limits {
            readonly: Arc::new(Semaphore::new(cfg.max_readonly)),
            mutating: Arc::new(Semaphore::new(cfg.max_mutating)),
            request_timeout: cfg.request_timeout,
            min_request_timeout: cfg.min_request_timeout,
        },
        authn,
        authz,
        admission,
        metrics,
        etcd,
        services,
        openapi,
        audit,
        kubelet,
        openid,
        aggregator,
    });
    {
        let registry = registry.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(BOOKMARK_INTERVAL);
            loop {
                ticker.tick().await;
                for s in &registry.all_stores() {
                    s.cacher.send_bookmarks();
                }
            }
        });
    }
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|source| StartError::Listen { addr: cfg.listen, source })?;
    let addr = listener.local_addr().map_err(|source| StartError::Listen { addr: cfg.listen, source })?;
    let opts = ServeOptions {
        max_connections: 10_000,
        http2_max_concurrent_streams: Some(1000),
        ..Default::default()
    };
    let task = tokio::spawn(serve(listener, Some(tls), ApiService(api.clone()), shutdown, opts));
    tracing::info!(%addr, "serving securely");
    Ok(Running { addr, api, task })
}
