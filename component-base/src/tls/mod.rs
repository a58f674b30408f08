//! rustls configurations built from the PEM files named by upstream's flags
//! (`--cert-file`, `--key-file`, `--trusted-ca-file`, `--tls-cert-file`, ...).
//!
//! The ring provider is passed explicitly to every builder, so no process-wide
//! default provider has to be installed and no other provider is ever linked in.

mod pem;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

pub use pem::{load_certs, load_private_key, load_root_store, load_system_roots};

/// Why a certificate, key or TLS configuration was rejected. Every variant
/// about a file names it, since operators pass many of them.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read or is not well-formed PEM.
    #[error("reading {}: {source}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What went wrong reading or decoding it.
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// The file holds no `CERTIFICATE` block.
    #[error("{}: no PEM certificate found", path.display())]
    NoCertificates {
        /// The file.
        path: PathBuf,
    },
    /// The file holds no PKCS#8, PKCS#1 or SEC1 private key block.
    #[error("{}: no PEM private key (PKCS#8, RSA or EC) found", path.display())]
    NoPrivateKey {
        /// The file.
        path: PathBuf,
    },
    /// A CA certificate could not be used as a trust anchor.
    #[error("{}: CA certificate rejected: {source}", path.display())]
    BadCaCertificate {
        /// The CA file.
        path: PathBuf,
        /// Why webpki rejected it.
        #[source]
        source: rustls::Error,
    },
    /// The certificate chain and key do not form a usable pair (mismatch,
    /// unsupported algorithm, malformed certificate).
    #[error("certificate {} with key {}: {source}", cert.display(), key.display())]
    KeyPair {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why rustls rejected the pair.
        #[source]
        source: rustls::Error,
    },
    /// Client certificates were required without a CA to check them against.
    #[error("client certificate authentication requires a trusted CA file")]
    ClientCaRequired,
    /// The client certificate verifier could not be built from the CA file.
    #[error("{}: cannot verify client certificates: {source}", path.display())]
    ClientVerifier {
        /// The CA file.
        path: PathBuf,
        /// Why the verifier was refused.
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
    /// No CA file was given and no system CA bundle could be found.
    #[error("no CA file given and no system CA bundle found (looked at {tried})")]
    NoSystemRoots {
        /// The paths looked at, comma-separated.
        tried: String,
    },
    /// The ring provider does not support the default protocol versions.
    #[error("TLS protocol versions: {0}")]
    Protocol(#[source] rustls::Error),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Upstream's `--tls-min-version` and `--tls-cipher-suites` (Go's names: `VersionTLS12`,
/// IANA suite names). The suites restrict TLS 1.2 only: as in Go, TLS 1.3's suites are
/// not configurable. What rustls cannot offer (TLS 1.0/1.1, CBC or RC4 suites) is an
/// error, not silently dropped, so a configuration never means less than it says.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub min_version: Option<String>,
    pub cipher_suites: Vec<String>,
}

/// Why a [`Policy`] cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("--tls-min-version {0}: this server supports VersionTLS12 and VersionTLS13")]
    Version(String),
    #[error("--tls-cipher-suites: {0} is not available (TLS 1.2 suites offered: {1})")]
    CipherSuite(String, String),
}

impl Policy {
    /// The ring provider with only the allowed TLS 1.2 suites (all when none are named).
    pub fn provider(&self) -> Result<Arc<CryptoProvider>, PolicyError> {
        let mut p = rustls::crypto::ring::default_provider();
        if self.cipher_suites.is_empty() {
            return Ok(Arc::new(p));
        }
        let name = |s: &rustls::SupportedCipherSuite| format!("{:?}", s.suite());
        let tls12: Vec<String> = p.cipher_suites.iter().filter(|s| s.tls13().is_none()).map(name).collect();
        for wanted in &self.cipher_suites {
            // Go also accepts the ChaCha20 suites without their `_SHA256` suffix.
            let canonical = if wanted.ends_with("CHACHA20_POLY1305") {
                format!("{wanted}_SHA256")
            } else {
                wanted.clone()
            };
            if !tls12.contains(&canonical) {
                return Err(PolicyError::CipherSuite(wanted.clone(), tls12.join(", ")));
            }
        }
        p.cipher_suites.retain(|s| {
            s.tls13().is_some()
                || self.cipher_suites.iter().any(|w| {
                    let n = name(s);
                    *w == n || format!("{w}_SHA256") == n
                })
        });
        Ok(Arc::new(p))
    }

    /// The protocol versions at or above the minimum.
    pub fn versions(&self) -> Result<&'static [&'static rustls::SupportedProtocolVersion], PolicyError> {
        static TLS13_ONLY: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];
        match self.min_version.as_deref() {
            None | Some("") | Some("VersionTLS12") => Ok(rustls::DEFAULT_VERSIONS),
            Some("VersionTLS13") => Ok(TLS13_ONLY),
            Some(other) => Err(PolicyError::Version(other.to_string())),
        }
    }
}

/// A server configuration presenting `cert_file`'s chain with `key_file`'s key.
///
/// With `client_ca_file`, client certificates are verified against it; they are
/// mandatory only if `require_client_cert` (etcd's `--client-cert-auth`), so a
/// server with a CA but without the requirement still admits anonymous clients.
/// Requiring client certificates without a CA is a configuration error.
/// `alpn` lists the protocols offered, most preferred first (`b"h2"`, `b"http/1.1"`).
pub fn server_config(
    cert_file: &Path,
    key_file: &Path,
    client_ca_file: Option<&Path>,
    require_client_cert: bool,
    alpn: &[&[u8]],
) -> Result<Arc<ServerConfig>, Error> {
    let certs = load_certs(cert_file)?;
    let key = load_private_key(key_file)?;
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(Error::Protocol)?;
    let builder = match client_ca_file {
        Some(ca_file) => {
            let roots = Arc::new(load_root_store(ca_file)?);
            let mut verifier = WebPkiClientVerifier::builder_with_provider(roots, provider);
            if !require_client_cert {
                verifier = verifier.allow_unauthenticated();
            }
            let verifier = verifier
                .build()
                .map_err(|source| Error::ClientVerifier { path: ca_file.to_owned(), source })?;
            builder.with_client_cert_verifier(verifier)
        }
        None if require_client_cert => return Err(Error::ClientCaRequired),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|source| Error::KeyPair {
        cert: cert_file.to_owned(),
        key: key_file.to_owned(),
        source,
    })?;
    config.alpn_protocols = alpn_list(alpn);
    Ok(Arc::new(config))
}

/// A client configuration trusting `ca_file` (or, without one, the system CA
/// bundle, as Go's `crypto/tls` does), presenting `cert_and_key` = (certificate
/// file, key file) when the server asks for a client certificate.
pub fn client_config(
    ca_file: Option<&Path>,
    cert_and_key: Option<(&Path, &Path)>,
    alpn: &[&[u8]],
) -> Result<Arc<ClientConfig>, Error> {
    let roots: RootCertStore = match ca_file {
        Some(path) => load_root_store(path)?,
        None => load_system_roots()?,
    };
    client_config_trusting(roots, cert_and_key, alpn)
}

/// A client configuration trusting `roots` (read by the caller, e.g. from a PEM bundle
/// carried in an API object), presenting `cert_and_key` when the server asks.
pub fn client_config_trusting(
    roots: RootCertStore,
    cert_and_key: Option<(&Path, &Path)>,
    alpn: &[&[u8]],
) -> Result<Arc<ClientConfig>, Error> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(Error::Protocol)?
        .with_root_certificates(roots);
    with_client_auth(builder, cert_and_key, alpn)
}

/// A client configuration that accepts any server certificate, as Go's
/// `InsecureSkipVerify` (the handshake signature is still checked, so the peer holds the
/// key of the certificate it shows): the API server dialing kubelets with self-signed
/// certificates when no CA is configured, the kubelet's HTTPS probes.
pub fn insecure_client_config(
    cert_and_key: Option<(&Path, &Path)>,
    alpn: &[&[u8]],
) -> Result<Arc<ClientConfig>, Error> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(Error::Protocol)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(insecure::NoVerification(provider)));
    with_client_auth(builder, cert_and_key, alpn)
}

fn with_client_auth(
    builder: rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>,
    cert_and_key: Option<(&Path, &Path)>,
    alpn: &[&[u8]],
) -> Result<Arc<ClientConfig>, Error> {
    let mut config = match cert_and_key {
        Some((cert_file, key_file)) => {
            builder.with_client_auth_cert(load_certs(cert_file)?, load_private_key(key_file)?).map_err(
                |source| Error::KeyPair { cert: cert_file.to_owned(), key: key_file.to_owned(), source },
            )?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn_list(alpn);
    Ok(Arc::new(config))
}

fn alpn_list(alpn: &[&[u8]]) -> Vec<Vec<u8>> {
    alpn.iter().map(|p| p.to_vec()).collect()
}

mod insecure;
pub mod self_signed;
#[cfg(test)]
pub(crate) mod test_certs;

/// Opens a TLS connection (with `cfg`, a [`client_config`]) to the host and port of `uri`,
/// `default_port` when it names none: the connector behind gRPC clients whose channel
/// speaks plain `http://` while TLS is done underneath (tonic's own TLS is not used, so
/// one rustls configuration serves every client of the project).
pub async fn connect(
    cfg: Arc<ClientConfig>,
    uri: http::Uri,
    default_port: u16,
) -> std::io::Result<hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>> {
    let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_string();
    let port = uri.port_u16().unwrap_or(default_port);
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
    tcp.set_nodelay(true)?;
    let name = rustls::pki_types::ServerName::try_from(host)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let stream = tokio_rustls::TlsConnector::from(cfg).connect(name, tcp).await?;
    Ok(hyper_util::rt::TokioIo::new(stream))
}

#[cfg(test)]
mod tests;
