//! The secure port (10257): `/healthz` (one check per running controller, as upstream),
//! `/livez`, `/readyz` and `/metrics` over HTTPS, with a self-signed certificate in
//! `--cert-dir` unless `--tls-cert-file` is given.
//!
//! Upstream checks callers with delegated authentication and authorization
//! (TokenReview/SubjectAccessReview); this server does not, and serves any client.

use std::net::SocketAddr;
use std::sync::Arc;

use component_base::http::{Endpoints, HealthFormat, SecureServing, ServeOptions, serve};
use component_base::metrics::Registry;
use component_base::shutdown::Shutdown;

use crate::informers::Factory;
use crate::options::Options;

/// What the controllers report once they run.
pub struct Started {
    pub controllers: Vec<&'static str>,
    pub informers: Arc<Factory>,
}

type StartedRx = tokio::sync::watch::Receiver<Option<Arc<Started>>>;

/// Binds the port and serves until shutdown.
pub async fn start(
    opts: &Options,
    registry: Registry,
    started: StartedRx,
    shutdown: Shutdown,
) -> Result<Option<SocketAddr>, String> {
    let serving = SecureServing {
        bind_address: opts.bind_address,
        port: opts.secure_port,
        cert_dir: opts.cert_dir.clone(),
        tls: opts.tls.clone(),
    };
    let Some((listener, tls)) = serving.listen("kube-controller-manager").await? else { return Ok(None) };
    let local = listener.local_addr().ok();
    let mut endpoints = Endpoints::new()
        .metrics("/metrics", registry)
        .health("/healthz", HealthFormat::Kubernetes, "leaderElection", |_| async { Ok(()) })
        .health("/livez", HealthFormat::Kubernetes, "ping", |_| async { Ok(()) })
        .health("/readyz", HealthFormat::Kubernetes, "ping", |_| async { Ok(()) });
    // A standby replica runs no controllers: its checks pass, as upstream's do when the
    // controllers have not been started.
    for name in &opts.controllers {
        let started = started.clone();
        let name: &'static str = name;
        endpoints = endpoints.health("/healthz", HealthFormat::Kubernetes, name, move |_| {
            let started = started.clone();
            async move {
                match started.borrow().as_ref() {
                    Some(s) if !s.controllers.contains(&name) => Err("not started".to_string()),
                    _ => Ok(()),
                }
            }
        });
    }
    let synced = started.clone();
    endpoints = endpoints.health("/readyz", HealthFormat::Kubernetes, "informer-sync", move |_| {
        let synced = synced.clone();
        async move {
            match synced.borrow().as_ref() {
                Some(s) if !s.informers.has_synced() => Err("informers not synced".to_string()),
                _ => Ok(()),
            }
        }
    });
    tokio::spawn(serve(listener, Some(tls), endpoints.into_service(), shutdown, ServeOptions::default()));
    Ok(local)
}
