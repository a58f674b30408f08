//! The serving certificate: `--tls-cert-file`/`--tls-private-key-file`, or, as upstream,
//! a self-signed one generated (once) in `--cert-dir` for the names the server answers to.
//!
//! `--tls-min-version` and `--tls-cipher-suites` restrict the protocol versions and TLS 1.2
//! suites. With `--client-ca-file` (or `--requestheader-client-ca-file`) the handshake also
//! asks clients for a certificate, without requiring one or judging its chain (see
//! [`crate::authn::x509`]): the authenticator verifies it per request, so a bad
//! certificate is an HTTP 401, as upstream.

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::Config;

const ALPN: &[&[u8]] = &[b"h2", b"http/1.1"];

/// The serving certificate and key files (the generated ones when none are given).
pub fn serving_files(cfg: &Config) -> (PathBuf, PathBuf) {
    match &cfg.tls {
        Some((c, k)) => (c.clone(), k.clone()),
        None => (cfg.cert_dir.join("apiserver.crt"), cfg.cert_dir.join("apiserver.key")),
    }
}

/// The server's TLS configuration: the serving certificate, `--tls-min-version` and
/// `--tls-cipher-suites` ([`component_base::tls::Policy`]), and with `--client-ca-file` a
/// request for client certificates.
pub fn serving_config(cfg: &Config) -> Result<Arc<rustls::ServerConfig>, String> {
    let (cert, key) = serving_files(cfg);
    if cfg.tls.is_none() {
        generate(cfg, &cert, &key)?;
    }
    let policy = component_base::tls::Policy {
        min_version: cfg.tls_min_version.clone(),
        cipher_suites: cfg.tls_cipher_suites.clone(),
    };
    let certs = component_base::tls::load_certs(&cert).map_err(|e| e.to_string())?;
    let private_key = component_base::tls::load_private_key(&key).map_err(|e| e.to_string())?;
    let builder = rustls::ServerConfig::builder_with_provider(policy.provider().map_err(|e| e.to_string())?)
        .with_protocol_versions(policy.versions().map_err(|e| e.to_string())?)
        .map_err(|e| format!("TLS protocol versions: {e}"))?;
    let cas: Vec<&std::path::Path> = [
        cfg.authentication.client_ca_file.as_deref(),
        cfg.authentication.request_header.requestheader_client_ca_file.as_deref(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let builder = if cas.is_empty() {
        builder.with_no_client_auth()
    } else {
        builder.with_client_cert_verifier(Arc::new(crate::authn::x509::RequestClientCert::from_files(&cas)?))
    };
    let mut config = builder
        .with_single_cert(certs, private_key)
        .map_err(|e| format!("certificate {} with key {}: {e}", cert.display(), key.display()))?;
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
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
