//! One shutdown signal per process, shared by every server and loop in it, so that
//! SIGTERM (what the kubelet sends a static pod) stops them all in step.

use std::future::Future;
use std::sync::Arc;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// Why signal handlers could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The runtime refused to register a handler.
    #[error("installing the {signal} handler: {source}")]
    Signal {
        /// The signal's name.
        signal: &'static str,
        /// What the OS or runtime reported.
        #[source]
        source: std::io::Error,
    },
}

/// A cloneable, level-triggered shutdown signal.
///
/// Once triggered it stays triggered, so a task that starts waiting late still
/// returns at once. Built on `watch`, whose sender the handle owns, so waiting
/// can never fail because the triggering side went away.
#[derive(Debug, Clone)]
pub struct Shutdown {
    sender: Arc<watch::Sender<bool>>,
}

impl Shutdown {
    /// A signal that has not fired yet.
    pub fn new() -> Self {
        Self { sender: Arc::new(watch::Sender::new(false)) }
    }

    /// Fires the signal; idempotent.
    pub fn trigger(&self) {
        self.sender.send_replace(true);
    }

    /// Whether the signal has fired.
    pub fn is_triggered(&self) -> bool {
        *self.sender.borrow()
    }

    /// Resolves once the signal has fired.
    ///
    /// The future owns what it needs (it borrows nothing from `self`), so it can
    /// be handed to APIs that want a `'static` shutdown future, such as tonic's
    /// `serve_with_shutdown`.
    pub fn wait(&self) -> impl Future<Output = ()> + Send + 'static + use<> {
        let mut receiver = self.sender.subscribe();
        async move {
            // Errs only once every handle is dropped: then nothing can trigger
            // any more, and returning beats hanging forever.
            let _ = receiver.wait_for(|triggered| *triggered).await;
        }
    }
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

/// Triggers `shutdown` on the first SIGTERM or SIGINT; on a second one the
/// process exits with status 1 at once, as Kubernetes components do, for an
/// operator who does not want to wait for a drain.
///
/// The handlers are installed before this returns, so a signal arriving right
/// after is not lost. Must be called within a tokio runtime.
pub fn on_signals(shutdown: Shutdown) -> Result<(), Error> {
    let install = |kind: SignalKind, name: &'static str| {
        signal(kind).map_err(|source| Error::Signal { signal: name, source })
    };
    let mut terminate = install(SignalKind::terminate(), "SIGTERM")?;
    let mut interrupt = install(SignalKind::interrupt(), "SIGINT")?;
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        };
        tracing::info!(signal = name, "shutting down");
        shutdown.trigger();
        let name = tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        };
        tracing::warn!(signal = name, "second signal, exiting without draining");
        std::process::exit(1);
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn wait_returns_after_trigger_in_any_clone() {
        let shutdown = Shutdown::new();
        assert!(!shutdown.is_triggered());
        let waiter = tokio::spawn(shutdown.wait());
        let clone = shutdown.clone();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished());
        clone.trigger();
        tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("waiter woke").unwrap();
        assert!(shutdown.is_triggered());
    }

    #[tokio::test]
    async fn late_waiters_return_at_once_and_trigger_is_idempotent() {
        let shutdown = Shutdown::default();
        shutdown.trigger();
        shutdown.trigger();
        tokio::time::timeout(Duration::from_secs(5), shutdown.wait()).await.expect("already triggered");
    }

    #[tokio::test]
    async fn signal_handlers_install() {
        // Delivering a real signal would hit every test in this process; installing is enough.
        on_signals(Shutdown::new()).unwrap();
    }
}
