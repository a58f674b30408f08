//! The serving certificate: `--tls-cert-file`/`--tls-private-key-file`, or, as upstream,
//! a self-signed one generated (once) in `--cert-dir` for the names the server answers to.

use std::sync::Arc;

use crate::config::Config;

pub fn serving_config(cfg: &Config) -> Result<Arc<rustls::ServerConfig>, String> {
    let (cert, key) = match &cfg.tls {
        Some((c, k)) => (c.clone(), k.clone()),
        None => {
            let cert = cfg.cert_dir.join("apiserver.crt");
            let key = cfg.cert_dir.join("apiserver.key");
            generate(cfg, &cert, &key)?;
            (cert, key)
        }
    };
    component_base::tls::server_config(&cert, &key, None, false, &[b"h2", b"http/1.1"])
        .map_err(|e| e.to_string())
}

fn generate(cfg: &Config, cert: &std::path::Path, key: &std::path::Path) -> Result<(), String> {
    let mut names = vec![
        "localhost".to_string(),
        "kubernetes".into(),
        "kubernetes.default".into(),
        "kubernetes.default.svc".into(),
        "kubernetes.default.svc.cluster.local".into(),
        "127.0.0.1".into(),
        cfg.advertise.to_string(),
        cfg.service_cidr.first().to_string(),
    ];
    if !cfg.listen.ip().is_unspecified() {
        names.push(cfg.listen.ip().to_string());
    }
    component_base::tls::self_signed::ensure(cert, key, &cfg.advertise.to_string(), &names)
}
