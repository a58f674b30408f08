//! What every controller shares: the context it is started with, its error type, and the
//! worker loop that drains its queue.

use std::future::Future;

use futures::FutureExt;
use std::sync::Arc;

use component_base::metrics::Registry;
use component_base::shutdown::Shutdown;

use crate::events::Recorder;
use crate::informers::Factory;
use crate::options::Options;
use crate::workqueue::{Metrics, Queue};

/// Why one sync of one key failed; the key is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// An API error with this HTTP status code.
    pub fn is_status(&self, code: u16) -> bool {
        matches!(self, Error::Api(kube::Error::Api(s)) if s.code == code)
    }

    pub fn is_not_found(&self) -> bool {
        self.is_status(404)
    }

    pub fn is_conflict(&self) -> bool {
        self.is_status(409)
    }
}

/// Whether a kube-rs error is an API status with this code.
pub fn api_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// A 403 because the namespace is being deleted (the `NamespaceTerminating` cause
/// upstream's NamespaceLifecycle admission sets): creating there is pointless, not a failure.
pub fn is_namespace_terminating(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 403
        && s.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating")))
}

/// What a controller is started with.
#[derive(Clone)]
pub struct Context {
    pub client: kube::Client,
    pub informers: Arc<Factory>,
    pub options: Arc<Options>,
    pub registry: Registry,
    pub queue_metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub shutdown: Shutdown,
    /// The CA bundle (PEM) published to namespaces: `--root-ca-file`, else the kubeconfig's.
    pub root_ca: Option<Arc<String>>,
}

impl Context {
    /// A queue named as upstream's (its `name` label in the `workqueue_*` metrics).
    pub fn queue(&self, name: &str) -> Arc<Queue> {
        Queue::new(name, Some(self.queue_metrics.clone()))
    }
}

/// Runs `workers` tasks that take keys from `queue` and call `sync` on each, after the
/// informers have synced; failures are retried with the queue's backoff. Stops when
/// shutdown fires.
pub fn run_workers<F, Fut>(ctx: &Context, queue: Arc<Queue>, workers: usize, sync: F)
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    let sync = Arc::new(sync);
    let informers = ctx.informers.clone();
    let shutdown = ctx.shutdown.clone();
    {
        let queue = queue.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            shutdown.wait().await;
            queue.shut_down();
        });
    }
    for _ in 0..workers.max(1) {
        let (queue, sync, informers) = (queue.clone(), sync.clone(), informers.clone());
        tokio::spawn(async move {
            informers.wait_synced().await;
            while let Some(key) = queue.get().await {
                // A panicking sync is a bug; it must not take the worker with it.
                let result = std::panic::AssertUnwindSafe(sync(key.clone())).catch_unwind().await;
                match result.unwrap_or_else(|_| Err(Error::Other("sync panicked".into()))) {
                    Ok(()) => queue.forget(&key),
                    Err(err) => {
                        tracing::info!(queue = queue.name(), %key, %err, "sync failed; retrying");
                        queue.add_rate_limited(key.clone());
                    }
                }
                queue.done(&key);
            }
        });
    }
}
