//! The secure port (10259): `/healthz`, `/livez`, `/readyz` and `/metrics` over HTTPS,
//! with a self-signed certificate in `--cert-dir` unless `--tls-cert-file` is given.
//!
//! Upstream checks `/metrics` callers with delegated authentication and authorization
//! (TokenReview/SubjectAccessReview); this server does not, and serves it to any client
//! that reaches the port.

use std::net::SocketAddr;
use std::sync::Arc;

use component_base::http::{Endpoints, HealthFormat, ServeOptions, serve};
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
    if opts.secure_port == 0 {
        return Ok(None);
    }
    let (cert, key) = match &opts.tls {
        Some((c, k)) => (c.clone(), k.clone()),
        None => {
            let cert = opts.cert_dir.join("kube-scheduler.crt");
            let key = opts.cert_dir.join("kube-scheduler.key");
            let mut names = vec!["localhost".to_string(), "127.0.0.1".into()];
            if !opts.bind_address.is_unspecified() {
                names.push(opts.bind_address.to_string());
            }
            component_base::tls::self_signed::ensure(&cert, &key, "kube-scheduler", &names)?;
            (cert, key)
        }
    };
    let tls = component_base::tls::server_config(&cert, &key, None, false, &[b"h2", b"http/1.1"])
        .map_err(|e| e.to_string())?;
    let addr = SocketAddr::new(opts.bind_address, opts.secure_port);
    let listener =
        tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("listening on {addr}: {e}"))?;
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
