//! Reading certificates and keys from PEM files, with errors that name the file.

use std::path::Path;

use rustls::RootCertStore;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::Error;

/// Where Linux distributions keep the system CA bundle; `SSL_CERT_FILE`, as
/// honoured by Go and OpenSSL, is consulted first.
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// Every certificate in `path`, in file order (leaf first for a chain).
/// Blocks of other kinds (keys, say) are skipped; a file with no certificate
/// at all is an error.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|blocks| blocks.collect::<Result<Vec<_>, _>>())
        .map_err(|source| pem_error(path, source))?;
    if certs.is_empty() {
        return Err(Error::NoCertificates { path: path.to_owned() });
    }
    Ok(certs)
}

/// The first private key in `path`: PKCS#8 (`PRIVATE KEY`), PKCS#1
/// (`RSA PRIVATE KEY`) or SEC1 (`EC PRIVATE KEY`), as kubeadm and openssl write them.
pub fn load_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    PrivateKeyDer::from_pem_file(path).map_err(|source| match source {
        pem::Error::NoItemsFound => Error::NoPrivateKey { path: path.to_owned() },
        source => pem_error(path, source),
    })
}

/// The certificates of `path` as trust anchors.
pub fn load_root_store(path: &Path) -> Result<RootCertStore, Error> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots.add(cert).map_err(|source| Error::BadCaCertificate { path: path.to_owned(), source })?;
    }
    Ok(roots)
}

/// The system CA bundle, for clients given no CA file. Unparsable entries are
/// skipped, as a distribution bundle may carry certificates webpki rejects.
pub fn load_system_roots() -> Result<RootCertStore, Error> {
    let from_env = std::env::var_os("SSL_CERT_FILE").map(std::path::PathBuf::from);
    let candidates = from_env.iter().map(|p| p.as_path()).chain(SYSTEM_BUNDLES.iter().map(Path::new));
    let mut tried = Vec::new();
    for path in candidates {
        tried.push(path.display().to_string());
        let Ok(certs) = load_certs(path) else {
            continue;
        };
        let mut roots = RootCertStore::empty();
        let (added, ignored) = roots.add_parsable_certificates(certs);
        if ignored > 0 {
            tracing::debug!(path = %path.display(), ignored, "skipped unusable system CA certificates");
        }
        if added > 0 {
            return Ok(roots);
        }
    }
    Err(Error::NoSystemRoots { tried: tried.join(", ") })
}

fn pem_error(path: &Path, source: pem::Error) -> Error {
    Error::Pem { path: path.to_owned(), source }
}
