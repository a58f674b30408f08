//! The kubelet: registers its Node and heartbeats its Lease, takes the pods bound to it
//! (from the API server) and the static pods (from `staticPodPath`), and runs them through
//! the container runtime over CRI, reporting their status back.
//!
//! # Layout
//!
//! - [`options`], [`config`]: flags and `KubeletConfiguration`.
//! - [`cri`]: the CRI client. [`kuberuntime`]: Pod → CRI sandbox and container configs.
//! - [`sources`]: the API watch and the static pod directory feed the [`pod_manager`].
//! - [`pod_workers`]: one worker per pod runs its sync loop (sandbox, init containers,
//!   containers, restarts with back-off, termination, cleanup); [`pleg`] relists the
//!   runtime every second and wakes the workers of pods whose containers changed.
//! - [`status`]: the API status from runtime state; [`mirror`]: mirror pods of static pods.
//! - [`prober`]: liveness, readiness and startup probes. [`volumes`], [`envs`].
//! - [`node`]: registration, node status, Lease. [`server`]: the API on 10250, healthz on 10248;
//!   [`streaming`]: exec, attach and port-forward proxied to the runtime's streaming server;
//!   [`stats`]: `/stats/summary`.

pub mod admission;
pub mod config;
pub mod cri;
pub mod dns;
pub mod envs;
pub mod etc_hosts;
pub mod kuberuntime;
pub mod lifecycle;
pub mod metrics;
pub mod mirror;
pub mod node;
pub mod options;
pub mod pleg;
pub mod pod_manager;
pub mod pod_workers;
pub mod probe;
pub mod prober;
pub mod qos;
pub mod server;
pub mod sources;
pub mod stats;
pub mod status;
pub mod streaming;
pub mod subpath;
pub mod volumes;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use component_base::events::Recorder;
use component_base::shutdown::Shutdown;
use k8s_openapi::api::core::v1::PodStatus;
use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;

use crate::config::KubeletConfiguration;
use crate::envs::NodeFacts;
use crate::options::Options;
use crate::pod_manager::PodManager;

/// Upstream's version string this kubelet reports (matches the API server's).
pub const KUBELET_VERSION: &str = "v1.32.0";

/// Why the kubelet could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] config::Error),
    #[error(transparent)]
    Cri(#[from] cri::Error),
    #[error(transparent)]
    Client(#[from] component_base::client::Error),
    #[error("serving: {0}")]
    Serve(String),
}

/// The kubelet's shared state; every task holds an `Arc` of it.
pub struct Kubelet {
    pub opts: Options,
    pub client: Option<kube::Client>,
    pub runtime: cri::Runtime,
    pub pods: PodManager,
    pub shutdown: Shutdown,
    pub recorder: Option<Recorder>,
    pub metrics: metrics::Metrics,
    pub node_facts: RwLock<NodeFacts>,
    /// Memory capacity in bytes, for oom_score_adj of burstable containers.
    pub memory_capacity: i64,
    workers: Mutex<HashMap<String, Arc<Notify>>>,
    /// The status each pod had at its last sync (served on `/pods`, compared before writes).
    pub statuses: Mutex<HashMap<String, PodStatus>>,
    pub worker_state: pod_workers::State,
    pub probes: prober::Probes,
    pub cpu_rates: stats::CpuRates,
    /// The machine's boot time (RFC 3339), the node's `startTime` in `/stats/summary`.
    pub start_time: Option<String>,
}

impl Kubelet {
    pub fn config(&self) -> &KubeletConfiguration {
        &self.opts.config
    }

    /// Makes the worker of `uid` look at its pod again, starting one if there is none.
    pub fn wake(self: &Arc<Self>, uid: &str) {
        let mut workers = self.workers.lock();
        if let Some(n) = workers.get(uid) {
            n.notify_one();
            return;
        }
        let notify = Arc::new(Notify::new());
        workers.insert(uid.to_string(), notify.clone());
        tokio::spawn(pod_workers::run(self.clone(), uid.to_string(), notify));
    }

    /// Called by a worker that finished its pod: it goes away unless the pod came back.
    fn worker_done(&self, uid: &str) -> bool {
        let mut workers = self.workers.lock();
        if self.pods.get(uid).is_some() {
            return false;
        }
        workers.remove(uid);
        true
    }

    pub fn has_worker(&self, uid: &str) -> bool {
        self.workers.lock().contains_key(uid)
    }
}

/// Runs the kubelet until `shutdown`. Pods keep running when it stops, as upstream.
pub async fn run(opts: Options, shutdown: Shutdown) -> Result<(), Error> {
    let config = opts.config.clone();
    let timeout = KubeletConfiguration::duration(&config.runtime_request_timeout);
    let runtime = cri::Runtime::connect(&config.runtime_socket()?, timeout)?;
    // Upstream refuses to start without a runtime; wait for it a while, as a kubelet
    // started next to containerd by a script must.
    let version = wait_for_runtime(&runtime, &shutdown).await?;
    tracing::info!(
        runtime = %version.runtime_name,
        version = %version.runtime_version,
        api = %version.runtime_api_version,
        "container runtime is up"
    );
    let client = match &opts.kubeconfig {
        Some(path) => Some(
            component_base::client::from_flags_rate_limited(
                Some(path),
                None,
                config.kube_api_qps,
                config.kube_api_burst as u32,
            )
            .await?,
        ),
        None => {
            tracing::info!("no --kubeconfig: running standalone (static pods only)");
            None
        }
    };
    let facts = node::machine_facts(&opts);
    let recorder = client.as_ref().map(|c| Recorder::start(c.clone()).with_host(&opts.node_name));
    let kubelet = Arc::new(Kubelet {
        memory_capacity: facts.memory_capacity,
        node_facts: RwLock::new(NodeFacts {
            host_ip: facts.internal_ip.clone(),
            allocatable_cpu_milli: facts.cpu_milli,
            allocatable_memory: facts.allocatable_memory(&config),
            allocatable_ephemeral: facts.allocatable_ephemeral(&config),
        }),
        opts,
        client: client.clone(),
        runtime,
        pods: PodManager::default(),
        shutdown: shutdown.clone(),
        recorder,
        metrics: metrics::Metrics::new(),
        workers: Mutex::new(HashMap::new()),
        statuses: Mutex::new(HashMap::new()),
        worker_state: pod_workers::State::default(),
        probes: prober::Probes::default(),
        cpu_rates: stats::CpuRates::default(),
        start_time: node::boot_time(),
    });

    server::start(kubelet.clone()).await.map_err(Error::Serve)?;
    if let Some(client) = client {
        tokio::spawn(node::run(kubelet.clone(), client.clone(), facts, version));
        tokio::spawn(sources::watch_api(kubelet.clone(), client));
    }
    if let Some(dir) = kubelet.config().static_pod_path.clone() {
        let period = KubeletConfiguration::duration(&kubelet.config().file_check_frequency);
        tokio::spawn(sources::watch_static(kubelet.clone(), dir, period));
    }
    tokio::spawn(pleg::run(kubelet.clone()));
    shutdown.wait().await;
    tracing::info!("kubelet stopping; pods keep running");
    Ok(())
}

async fn wait_for_runtime(
    runtime: &cri::Runtime,
    shutdown: &Shutdown,
) -> Result<cri::VersionResponse, Error> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match runtime.version().await {
            Ok(v) => return Ok(v),
            Err(err) if tokio::time::Instant::now() < deadline && !shutdown.is_triggered() => {
                tracing::warn!(%err, "waiting for the container runtime");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(err) => return Err(err.into()),
        }
    }
}
