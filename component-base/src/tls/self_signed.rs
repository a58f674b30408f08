//! A self-signed serving certificate, as upstream components make one in `--cert-dir` when
//! no `--tls-cert-file` is given: a throwaway CA signs the serving certificate and the file
//! holds both, so clients can trust the file itself (`certificate-authority: <file>`).

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rcgen::{CertificateParams, KeyPair};

/// The serving certificate and key of a component: `--tls-cert-file`/`--tls-private-key-file`
/// when given, else `<component>.crt`/`.key` in `--cert-dir`, made for localhost and the
/// bind address on first start.
pub fn serving_files(
    explicit: Option<&(PathBuf, PathBuf)>,
    cert_dir: &Path,
    component: &str,
    bind_address: IpAddr,
) -> Result<(PathBuf, PathBuf), String> {
    if let Some((c, k)) = explicit {
        return Ok((c.clone(), k.clone()));
    }
    let cert = cert_dir.join(format!("{component}.crt"));
    let key = cert_dir.join(format!("{component}.key"));
    let mut names = vec!["localhost".to_string(), "127.0.0.1".into()];
    if !bind_address.is_unspecified() {
        names.push(bind_address.to_string());
    }
    ensure(&cert, &key, component, &names)?;
    Ok((cert, key))
}

/// Writes `cert` (serving certificate followed by its CA) and `key` (mode 0600) for the
/// DNS names and IP addresses in `names`, `host` naming the subject (`<host>@<suffix>`).
/// Existing files are kept, as upstream reuses what an earlier start generated.
pub fn ensure(cert: &Path, key: &Path, host: &str, names: &[String]) -> Result<(), String> {
    if cert.exists() && key.exists() {
        return Ok(());
    }
    if let Some(dir) = cert.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut names = names.to_vec();
    names.sort();
    names.dedup();
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
    let _ = std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o600));
    tracing::info!(cert = %cert.display(), "generated a self-signed serving certificate");
    Ok(())
}
