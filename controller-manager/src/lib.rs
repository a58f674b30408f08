//! kube-controller-manager: one process hosting the controllers that move the cluster's
//! observed state towards its declared state — level-triggered, through the API server's
//! REST and watch interface only.
//!
//! # Layout
//!
//! - [`options`]: flags; [`controllers`]: one module per controller, and `--controllers`.
//! - Shared machinery: [`informers`] (one watch and store per resource type, shared by
//!   every controller), [`workqueue`] (rate-limited, de-duplicating, one worker per key),
//!   [`expectations`] (creates and deletes in flight), [`controller`] (context, workers),
//!   [`events`], [`server`] (10257: health and metrics).
//! - Leader election on the `kube-system/kube-controller-manager` Lease comes from
//!   component-base; controllers start only once this replica leads.
//! - [`local_path`]: the per-node local-path provisioner (its own binary,
//!   `local-path-provisioner`), built on the same informers and queues.

pub mod clientbuilder;
pub mod controller;
pub mod controllers;
pub use component_base::events;
pub mod expectations;
pub mod history;
pub mod informers;
pub mod local_path;
pub mod options;
pub mod owners;
pub mod podutil;
pub mod server;
pub mod workqueue;

use std::sync::Arc;

use component_base::leaderelection;
use component_base::metrics::Registry;
use component_base::shutdown::Shutdown;

use crate::options::Options;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Client(#[from] component_base::client::Error),
    #[error(transparent)]
    LeaderElection(#[from] leaderelection::Error),
    #[error("--root-ca-file {path}: {source}")]
    RootCa {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("controller credentials: {0}")]
    Credentials(#[from] clientbuilder::Error),
    #[error("serving: {0}")]
    Serve(String),
    #[error("starting {name}: {source}")]
    Start {
        name: String,
        #[source]
        source: controller::Error,
    },
}

/// Runs the controller manager until `shutdown` fires (or leadership is lost, an error:
/// the process must exit so that it never acts while another replica leads).
pub async fn run(opts: Options, shutdown: Shutdown) -> Result<(), Error> {
    let client = component_base::client::from_flags_rate_limited(
        opts.kubeconfig.as_deref(),
        opts.master.as_deref(),
        opts.kube_api_qps,
        opts.kube_api_burst,
    )
    .await?;
    let root_ca = root_ca(&opts).await?;
    let registry = Registry::with_process_metrics();
    let (started_tx, started_rx) = tokio::sync::watch::channel(None);
    if let Some(addr) =
        server::start(&opts, registry.clone(), started_rx, shutdown.clone()).await.map_err(Error::Serve)?
    {
        tracing::info!(%addr, "serving securely");
    }
    let opts = Arc::new(opts);
    let main = run_controllers(
        client.clone(),
        opts.clone(),
        registry.clone(),
        root_ca,
        started_tx,
        shutdown.clone(),
    );
    if !opts.leader_elect {
        return main.await;
    }
    // Its own client, and so its own rate limiter, as upstream's "leader-election" client:
    // a burst of controller requests (the garbage collector's initial lists) must never
    // queue the Lease renewals past the renew deadline.
    let election_client = component_base::client::from_flags_rate_limited(
        opts.kubeconfig.as_deref(),
        opts.master.as_deref(),
        opts.kube_api_qps,
        opts.kube_api_burst,
    )
    .await?;
    let mut cfg = leaderelection::Config::new(&opts.lease_namespace, &opts.lease_name);
    cfg.lease_duration = opts.lease_duration;
    cfg.renew_deadline = opts.renew_deadline;
    cfg.retry_period = opts.retry_period;
    let (leading_tx, mut leading_rx) = tokio::sync::watch::channel(false);
    let leader = prometheus_client::metrics::family::Family::<
        Vec<(&'static str, String)>,
        prometheus_client::metrics::gauge::Gauge,
    >::default();
    registry.register(
        "leader_election_master_status",
        "Whether this replica leads (1) or not (0).",
        leader.clone(),
    );
    let lease_name = opts.lease_name.clone();
    tokio::spawn(async move {
        let labels = vec![("name", lease_name)];
        leader.get_or_create(&labels).set(0);
        while leading_rx.changed().await.is_ok() {
            leader.get_or_create(&labels).set(i64::from(*leading_rx.borrow()));
        }
    });
    leaderelection::run(election_client, cfg, shutdown, leading_tx, main).await?.unwrap_or(Ok(()))
}

async fn run_controllers(
    client: kube::Client,
    opts: Arc<Options>,
    registry: Registry,
    root_ca: Option<Arc<String>>,
    started: tokio::sync::watch::Sender<Option<Arc<server::Started>>>,
    shutdown: Shutdown,
) -> Result<(), Error> {
    let informers = informers::Factory::new(client.clone(), shutdown.clone());
    let ctx = controller::Context {
        client: client.clone(),
        informers: informers.clone(),
        options: opts.clone(),
        queue_metrics: workqueue::Metrics::new(&registry),
        registry,
        recorder: events::Recorder::start(client),
        shutdown: shutdown.clone(),
        root_ca,
    };
    let accounts = if opts.use_service_account_credentials {
        let config =
            component_base::client::config_from_flags(opts.kubeconfig.as_deref(), opts.master.as_deref())
                .await?;
        let b = clientbuilder::ServiceAccountClients::new(
            ctx.client.clone(),
            config,
            opts.kube_api_qps,
            opts.kube_api_burst,
            shutdown.clone(),
        )
        .map_err(|e| Error::Serve(format!("token directory: {e}")))?;
        Some(b)
    } else {
        None
    };
    for name in &opts.controllers {
        let ctx = match &accounts {
            Some(b) => {
                let account = controllers::service_account(name).unwrap_or(name);
                let client = b.client(account).await?;
                controller::Context {
                    client: client.clone(),
                    recorder: events::Recorder::start(client),
                    ..ctx.clone()
                }
            }
            None => ctx.clone(),
        };
        controllers::start(&ctx, name).map_err(|source| Error::Start { name: name.to_string(), source })?;
        tracing::info!(controller = name, "started");
    }
    informers.start();
    started.send_replace(Some(Arc::new(server::Started {
        controllers: opts.controllers.clone(),
        informers: informers.clone(),
    })));
    shutdown.wait().await;
    Ok(())
}

/// `--root-ca-file`'s contents, else the CA the kubeconfig trusts for the API server.
async fn root_ca(opts: &Options) -> Result<Option<Arc<String>>, Error> {
    if let Some(path) = &opts.root_ca_file {
        let pem = std::fs::read_to_string(path)
            .map_err(|source| Error::RootCa { path: path.display().to_string(), source })?;
        return Ok(Some(Arc::new(pem)));
    }
    let config =
        component_base::client::config_from_flags(opts.kubeconfig.as_deref(), opts.master.as_deref()).await?;
    if let Some(path) = config.root_cert_file.as_ref().filter(|_| config.root_cert.is_none()) {
        let pem = std::fs::read_to_string(path)
            .map_err(|source| Error::RootCa { path: path.display().to_string(), source })?;
        return Ok(Some(Arc::new(pem)));
    }
    Ok(config.root_cert.filter(|c| !c.is_empty()).map(|certs| {
        use base64::Engine;
        let mut pem = String::new();
        for der in certs {
            let b64 = base64::engine::general_purpose::STANDARD.encode(der);
            pem.push_str("-----BEGIN CERTIFICATE-----\n");
            for line in b64.as_bytes().chunks(64) {
                pem.push_str(std::str::from_utf8(line).unwrap_or_default());
                pem.push('\n');
            }
            pem.push_str("-----END CERTIFICATE-----\n");
        }
        Arc::new(pem)
    }))
}
