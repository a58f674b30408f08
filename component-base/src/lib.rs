//! What every binary of the project shares, so that etcd, kube-apiserver and the other
//! components log, expose metrics, terminate TLS and shut down the same way upstream's do.
//!
//! # Layout
//!
//! - [`logging`]: klog-like log lines on stderr, `-v` levels and etcd's `--log-level`.
//! - [`metrics`]: the Prometheus registry, text exposition (format 0.0.4) and the
//!   `process_*` collector that Go's client registers by default.
//! - [`tls`]: PEM loading and rustls server/client configurations (ring provider).
//! - [`keyutil`]: RSA/ECDSA signing and verifying keys from PEM, with upstream's key IDs
//!   (service-account tokens, etcd's JWT auth tokens).
//! - [`shutdown`]: one cloneable shutdown signal, triggered by SIGTERM/SIGINT.
//! - [`http`]: the HTTP/1.1 + HTTP/2 (optionally TLS) connection loop, and the
//!   `/metrics` and health endpoints every component serves.
//! - [`client`]: an API client (kube-rs) from `--kubeconfig` or the in-cluster config.
//! - [`fuzz`]: seeded input mutation for the parsers' fuzz tests (stable Rust).
//! - [`events`]: core/v1 Events about objects, written in the background and never blocking.
//! - [`leaderelection`]: one active replica at a time, through a `coordination.k8s.io/v1`
//!   Lease, as client-go's leader election.
//! - [`volume`]: which PersistentVolume fits a claim, shared by the PV controller and the
//!   scheduler's volume binding (upstream's component-helpers `storage/volume`).
//!
//! Each module has its own error enum; [`Error`] unites them for callers that
//! propagate any of them with `?`.

pub mod client;
pub mod duration;
pub mod events;
pub mod fuzz;
pub mod http;
pub mod keyutil;
pub mod labels;
pub mod leaderelection;
pub mod logging;
pub mod metrics;
pub mod quantity;
pub mod shutdown;
pub mod tls;
pub mod volume;

/// Any error this crate returns, for callers that do not care which module failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Logging could not be configured.
    #[error(transparent)]
    Logging(#[from] logging::Error),
    /// Metrics could not be encoded.
    #[error(transparent)]
    Metrics(#[from] metrics::Error),
    /// A certificate, key or TLS configuration was rejected.
    #[error(transparent)]
    Tls(#[from] tls::Error),
    /// Signal handlers could not be installed.
    #[error(transparent)]
    Shutdown(#[from] shutdown::Error),
}

/// Result with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
