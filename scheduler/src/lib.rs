//! kube-scheduler: watches pods that have no node, picks the best node for each through
//! the scheduling framework's plugins, and binds them — talking only to the API server.
//!
//! # Layout
//!
//! - [`options`] and [`config`]: flags and `KubeSchedulerConfiguration`; profiles built
//!   from plugin sets.
//! - [`framework`]: extension points as traits, cycle state, the profile runner, and the
//!   parsed pod/node types; [`plugins`]: one module per in-tree plugin.
//! - [`queue`]: active / backoff / unschedulable pools; [`cache`]: nodes with their pods,
//!   including assumed ones.
//! - [`scheduler`]: the scheduling and binding cycles; [`informers`]: watches feeding
//!   cache and queue; [`events`], [`metrics`], [`server`]: what users observe.
//! - Leader election on the `kube-system/kube-scheduler` Lease comes from component-base.

pub mod cache;
pub mod config;
pub mod events;
pub mod framework;
pub mod informers;
pub mod metrics;
pub mod options;
pub mod plugins;
pub mod queue;
pub mod scheduler;
pub mod server;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use component_base::leaderelection;
use component_base::metrics::Registry;
use component_base::shutdown::Shutdown;
use parking_lot::Mutex;

use crate::options::Options;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] config::Error),
    #[error(transparent)]
    Client(#[from] component_base::client::Error),
    #[error(transparent)]
    LeaderElection(#[from] leaderelection::Error),
    #[error("serving: {0}")]
    Serve(String),
    /// The scheduling loop ended (a plugin panicked): the process must exit so that a
    /// standby replica takes over instead of this one holding the Lease idle.
    #[error("the scheduling loop stopped unexpectedly")]
    SchedulingStopped,
}

/// Runs the scheduler until `shutdown` fires (or leadership is lost, an error: the
/// process must exit so that it never schedules while another replica leads).
pub async fn run(opts: Options, shutdown: Shutdown) -> Result<(), Error> {
    let client =
        component_base::client::from_flags(opts.config.kubeconfig.as_deref(), opts.master.as_deref()).await?;
    let mut profiles = HashMap::new();
    for p in &opts.config.profiles {
        let profile = config::build_profile(p, &client)?;
        profiles.insert(profile.name.clone(), profile);
    }
    let profiles = Arc::new(profiles);
    let registry = Registry::with_process_metrics();
    let metrics = Arc::new(metrics::Metrics::new(&registry));
    let (synced_tx, synced_rx) = tokio::sync::watch::channel(None);
    let addr =
        server::start(&opts, registry, Arc::new(synced_rx), shutdown.clone()).await.map_err(Error::Serve)?;
    if let Some(addr) = addr {
        tracing::info!(%addr, "serving securely");
    }
    let le = &opts.config.leader_election;
    let main =
        run_scheduler(client.clone(), opts.clone(), profiles, metrics.clone(), synced_tx, shutdown.clone());
    if !le.leader_elect {
        return main.await;
    }
    let mut cfg = leaderelection::Config::new(&le.resource_namespace, &le.resource_name);
    cfg.lease_duration = le.lease_duration;
    cfg.renew_deadline = le.renew_deadline;
    cfg.retry_period = le.retry_period;
    let (leading_tx, mut leading_rx) = tokio::sync::watch::channel(false);
    let lease_name = le.resource_name.clone();
    tokio::spawn(async move {
        let labels = vec![("name", lease_name)];
        while leading_rx.changed().await.is_ok() {
            let v = i64::from(*leading_rx.borrow());
            metrics.leader.get_or_create(&labels).set(v);
        }
    });
    leaderelection::run(client, cfg, shutdown, leading_tx, main).await?.unwrap_or(Ok(()))
}

async fn run_scheduler(
    client: kube::Client,
    opts: Options,
    profiles: Arc<HashMap<String, framework::runtime::Profile>>,
    metrics: Arc<metrics::Metrics>,
    synced_tx: tokio::sync::watch::Sender<Option<Arc<informers::Synced>>>,
    shutdown: Shutdown,
) -> Result<(), Error> {
    let cfg = &opts.config;
    let cache = Arc::new(Mutex::new(cache::Cache::new()));
    let queue =
        Arc::new(queue::SchedulingQueue::new(profiles.clone(), cfg.pod_initial_backoff, cfg.pod_max_backoff));
    let handlers =
        informers::Handlers { cache: cache.clone(), queue: queue.clone(), profiles: profiles.clone() };
    let synced = informers::start(client.clone(), handlers);
    synced_tx.send_replace(Some(synced.clone()));
    tokio::select! {
        () = synced.wait() => {}
        () = shutdown.wait() => return Ok(()),
    }
    tracing::info!("caches synced; scheduling");
    let identity = format!("default-scheduler-{}", leaderelection::default_identity());
    let recorder = events::Recorder::start(client.clone(), identity);
    let sched = Arc::new(scheduler::Scheduler::new(
        client,
        cache,
        queue.clone(),
        profiles,
        recorder,
        metrics.clone(),
        cfg.percentage_of_nodes_to_score,
        cfg.parallelism,
    ));
    {
        let queue = queue.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                queue.flush();
                metrics.set_pending(queue.pending());
            }
        });
    }
    // The scheduling cycle holds the cache lock while it filters and scores; on its own
    // thread it never blocks one of the runtime's workers, which the informers and
    // binding tasks need.
    let handle = tokio::runtime::Handle::current();
    let (ended_tx, mut ended) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("scheduling-cycle".into())
        .spawn(move || {
            handle.block_on(sched.run());
            // Dropped unsent when the loop panics: the receiver sees that too.
            let _ = ended_tx.send(());
        })
        .map_err(|e| Error::Serve(format!("spawning the scheduling thread: {e}")))?;
    tokio::select! {
        () = shutdown.wait() => {
            queue.close();
            // The cycle in progress finishes before the Lease may be released.
            let _ = ended.await;
            Ok(())
        }
        _ = &mut ended => Err(Error::SchedulingStopped),
    }
}
