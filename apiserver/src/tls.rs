//! The serving certificate: `--tls-cert-file`/`--tls-private-key-file`, or, as upstream,
//! a self-signed one generated (once) in `--cert-dir` for the names the server answers to.

use std::sync::Arc;

use rcgen::{CertificateParams, KeyPair};

use crate::config::Config;

pub fn serving_config(cfg: &Config) -> Result<Arc<rustls::ServerConfig>, String> {
    let (cert, key) = match &cfg.tls {
        Some((c, k)) => (c.clone(), k.clone()),
        None => {
            let cert = cfg.cert_dir.join("apiserver.crt");
            let key = cfg.cert_dir.join("apiserver.key");
            if !cert.exists() || !key.exists() {
                generate(cfg, &cert, &key)?;
            }
            (cert, key)
        }
    };
    component_base::tls::server_config(&cert, &key, None, false, &[b"h2", b"http/1.1"])
        .map_err(|e| e.to_string())
}

fn generate(cfg: &Config, cert: &std::path::Path, key: &std::path::Path) -> Result<(), String> {
    std::fs::create_dir_all(&cfg.cert_dir)
        .map_err(|e| format!("--cert-dir {}: {e}", cfg.cert_dir.display()))?;
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
    names.dedup();
    // As upstream: a throwaway CA signs the serving certificate, and the file holds both, so
    // clients can trust the file itself (`certificate-authority: apiserver.crt`).
    let host = cfg.advertise.to_string();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, format!("{host}-ca@self-signed"));
    ca_params.key_usages =
        vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::DigitalSignature];
    let ca_key = KeyPair::generate().map_err(|e| e.to_string())?;
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).map_err(|e| e.to_string())?;
    let mut params = CertificateParams::new(names).map_err(|e| e.to_string())?;
    params.distinguished_name.push(rcgen::DnType::CommonName, format!("{host}@self-signed"));
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let pair = KeyPair::generate().map_err(|e| e.to_string())?;
    let c = params.signed_by(&pair, &*ca).map_err(|e| e.to_string())?;
    std::fs::write(cert, format!("{}{}", c.pem(), ca.pem()))
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    std::fs::write(key, pair.serialize_pem()).map_err(|e| format!("{}: {e}", key.display()))?;
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o600));
    tracing::info!(cert = %cert.display(), "generated a self-signed serving certificate");
    Ok(())
}
