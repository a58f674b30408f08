//! The secure port (10259): `/healthz`, `/livez`, `/readyz` and `/metrics` over HTTPS,
//! with a self-signed certificate in `--cert-dir` unless `--tls-cert-file` is given.
//!
//! Upstream checks `/metrics` callers with delegated authentication and authorization
//! (TokenReview/SubjectAccessReview); this server does not, and serves it to any client
//! that reaches the port.

use std::net::SocketAddr;
use std::sync::Arc;

use component_base::http::{Endpoints, HealthFormat, SecureServing, ServeOptions, serve};
use component_base::metrics::Registry;
use component_base::shutdown::Shutdown;

use crate::informers::Synced;
use crate::options::Options;

/// Binds the port and serves until shutdown; `synced` gates `/readyz`.
pub async fn start(
    opts: &Options,
    registry: Registry,
    synced: Arc<tokio::sync::watch::Receiver<Option<Arc<Synced>>>>,
    shutdown: Shutdown,
) -> Result<Option<SocketAddr>, String> {
    let serving = SecureServing {
        bind_address: opts.bind_address,
        port: opts.secure_port,
        cert_dir: opts.cert_dir.clone(),
        tls: opts.tls.clone(),
    };
    let Some((listener, tls)) = serving.listen("kube-scheduler").await? else { return Ok(None) };
    let local = listener.local_addr().ok();
    let ready = move |_: &http::Uri| {
        let synced = synced.clone();
        async move {
            match synced.borrow().as_ref() {
                Some(s) if s.is_synced() => Ok(()),
                _ => Err("informers not synced".to_string()),
            }
        }
    };
    let service = Endpoints::new()
        .metrics("/metrics", registry)
        .health("/healthz", HealthFormat::Kubernetes, "ping", |_| async { Ok(()) })
        .health("/livez", HealthFormat::Kubernetes, "ping", |_| async { Ok(()) })
        .health("/readyz", HealthFormat::Kubernetes, "ping", |_| async { Ok(()) })
        .health("/readyz", HealthFormat::Kubernetes, "sched-handler-sync", ready)
        .into_service();
    tokio::spawn(serve(listener, Some(tls), service, shutdown, ServeOptions::default()));
    Ok(local)
}
