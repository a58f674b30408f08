//! HTTPS to a webhook (upstream's `util/webhook` client manager): one POST of JSON over
//! TLS that trusts the configuration's `caBundle` alone (the system roots when it has
//! none), on a fresh connection per call, with the webhook's timeout around all of it
//! and a bounded response body.
//!
//! A service webhook is dialled at one ready endpoint of the Service (cluster IPs are
//! not routable from every apiserver host) while TLS and the `Host` header still name
//! `<service>.<namespace>.svc`, as upstream's endpoint resolver does.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, header};
use http_body_util::{BodyExt, Full};
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

use super::config::Endpoint;

/// The most a webhook may answer; a larger response is a failed call.
pub const MAX_RESPONSE_BYTES: usize = 3 * 1024 * 1024;

/// How much of a non-JSON error body is quoted back (upstream's
/// `maxUnstructuredResponseTextBytes`).
const MAX_ERROR_TEXT: usize = 2048;

/// TLS trusting `ca_bundle` (PEM), or the system roots when it is empty.
pub fn tls_config(ca_bundle: &[u8]) -> Result<Arc<ClientConfig>, String> {
    let roots = roots(ca_bundle)?;
    let mut cfg = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The certificates of `ca_bundle` (PEM) as trust anchors, or the system roots when it is
/// empty; the error in upstream's words.
pub fn roots(ca_bundle: &[u8]) -> Result<RootCertStore, String> {
    if ca_bundle.is_empty() {
        return system_roots();
    }
    let certs = CertificateDer::pem_slice_iter(ca_bundle)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("unable to load root certificates: {e}"))?;
    if certs.is_empty() {
        return Err("unable to load root certificates: unable to parse bytes as PEM block".into());
    }
    let mut roots = RootCertStore::empty();
    for c in certs {
        roots.add(c).map_err(|e| format!("unable to load root certificates: {e}"))?;
    }
    Ok(roots)
}

/// The system CA bundle, read once.
fn system_roots() -> Result<RootCertStore, String> {
    static ROOTS: OnceLock<Result<RootCertStore, String>> = OnceLock::new();
    ROOTS.get_or_init(|| component_base::tls::load_system_roots().map_err(|e| e.to_string())).clone()
}

/// Where one call goes, and how errors show it.
#[derive(Clone, Debug)]
pub struct Target {
    /// The URL as upstream's client prints it in errors (`https://h:443/p?timeout=10s`).
    pub url: String,
    /// The name the certificate must carry (and SNI).
    pub server_name: ServerName<'static>,
    /// The `Host` header.
    pub authority: String,
    pub path_and_query: String,
    pub dial: Dial,
}

/// What to connect to.
#[derive(Clone, Debug, PartialEq)]
pub enum Dial {
    /// A URL's host (a name resolved by the system resolver, or an IP) and port.
    Host(String, u16),
    /// A Service, to be resolved to one of its endpoints.
    Service { namespace: String, name: String, port: u16 },
}

impl Target {
    /// The target of `endpoint`, telling the webhook its `timeout` as upstream does
    /// (`?timeout=10s`).
    pub fn new(endpoint: &Endpoint, timeout: Duration) -> Result<Self, String> {
        let query = format!("timeout={}s", timeout.as_secs());
        match endpoint {
            Endpoint::Url(u) => {
                let host = u.host_str().ok_or_else(|| format!("webhook url {u} has no host"))?;
                let bare = host.trim_start_matches('[').trim_end_matches(']').to_string();
                let port = u.port_or_known_default().unwrap_or(443);
                let server_name = ServerName::try_from(bare.clone())
                    .map_err(|e| format!("webhook url host {host:?}: {e}"))?;
                let authority = match u.port() {
                    Some(p) => format!("{host}:{p}"),
                    None => host.to_string(),
                };
                let path_and_query = format!("{}?{query}", u.path());
                Ok(Self {
                    url: format!("https://{authority}{path_and_query}"),
                    server_name,
                    authority,
                    path_and_query,
                    dial: Dial::Host(bare, port),
                })
            }
            Endpoint::Service { namespace, name, path, port } => {
                let host = format!("{name}.{namespace}.svc");
                let server_name =
                    ServerName::try_from(host.clone()).map_err(|e| format!("service name {host:?}: {e}"))?;
                let path = if path.is_empty() { "/" } else { path.as_str() };
                let authority = format!("{host}:{port}");
                let path_and_query = format!("{path}?{query}");
                Ok(Self {
                    url: format!("https://{authority}{path_and_query}"),
                    server_name,
                    authority,
                    path_and_query,
                    dial: Dial::Service { namespace: namespace.clone(), name: name.clone(), port: *port },
                })
            }
        }
    }
}

/// Why a call failed (each shown as Go's client would, after `Post "<url>": `).
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("dial tcp {addr}: {}", io_text(.source))]
    Dial {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("tls: {0}")]
    Tls(#[source] std::io::Error),
    #[error("{0}")]
    Http(#[source] hyper::Error),
    #[error("{0}")]
    Status(String),
    #[error("the response body is larger than {MAX_RESPONSE_BYTES} bytes")]
    TooLarge,
}

/// An I/O error in the words of Go's `net` package where they differ.
fn io_text(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connect: connection refused".into(),
        _ => e.to_string(),
    }
}

/// Ends the connection task when the call is done (or abandoned at its timeout).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// POSTs `body` to `target` at `addr` (the resolved dial address) and returns the 2xx
/// response body. The caller bounds the time.
pub async fn post(
    tls: Arc<ClientConfig>,
    target: &Target,
    addr: &(String, u16),
    body: Vec<u8>,
) -> Result<Vec<u8>, CallError> {
    let shown = match addr.0.parse::<std::net::IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, addr.1).to_string(),
        Err(_) => format!("{}:{}", addr.0, addr.1),
    };
    let tcp = tokio::net::TcpStream::connect((addr.0.as_str(), addr.1))
        .await
        .map_err(|source| CallError::Dial { addr: shown, source })?;
    let _ = tcp.set_nodelay(true);
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(target.server_name.clone(), tcp)
        .await
        .map_err(CallError::Tls)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(CallError::Http)?;
    let _conn = AbortOnDrop(tokio::spawn(async move {
        let _ = conn.await;
    }));
    let req = Request::builder()
        .method(Method::POST)
        .uri(&target.path_and_query)
        .header(header::HOST, &target.authority)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, */*")
        .header(header::USER_AGENT, "kube-apiserver-admission")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| CallError::Status(e.to_string()))?;
    let resp = sender.send_request(req).await.map_err(CallError::Http)?;
    let status = resp.status();
    let declared = resp
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_RESPONSE_BYTES) {
        return Err(CallError::TooLarge);
    }
    let mut body = resp.into_body();
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(CallError::Http)?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > MAX_RESPONSE_BYTES {
                return Err(CallError::TooLarge);
            }
            out.extend_from_slice(&data);
        }
    }
    if !(200..=206).contains(&status.as_u16()) {
        return Err(CallError::Status(status_text(status.as_u16(), &out)));
    }
    Ok(out)
}

/// A non-2xx answer as Go's REST client words it: the body's Status message when it is
/// one, else upstream's generic text for the code.
fn status_text(code: u16, body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body)
        && v["kind"] == "Status"
        && let Some(m) = v["message"].as_str()
    {
        return m.to_string();
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(MAX_ERROR_TEXT)]).trim().to_string();
    match code {
        404 => "the server could not find the requested resource".into(),
        500 => format!("an error on the server ({text:?}) has prevented the request from succeeding"),
        _ => format!("the server responded with the status code {code} but did not return more information"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let t = Target::new(
            &Endpoint::Service { namespace: "ns".into(), name: "hook".into(), path: "".into(), port: 8443 },
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(t.url, "https://hook.ns.svc:8443/?timeout=10s");
        assert_eq!(t.authority, "hook.ns.svc:8443");
        assert_eq!(t.dial, Dial::Service { namespace: "ns".into(), name: "hook".into(), port: 8443 });
        let u = url::Url::parse("https://[::1]/validate").unwrap();
        let t = Target::new(&Endpoint::Url(u), Duration::from_secs(30)).unwrap();
        assert_eq!(t.url, "https://[::1]/validate?timeout=30s");
        assert_eq!(t.dial, Dial::Host("::1".into(), 443));
        assert!(matches!(t.server_name, ServerName::IpAddress(_)));
    }

    #[test]
    fn ca_bundles() {
        assert_eq!(
            tls_config(b"garbage").unwrap_err(),
            "unable to load root certificates: unable to parse bytes as PEM block"
        );
        assert_eq!(status_text(404, b""), "the server could not find the requested resource");
        assert_eq!(status_text(503, br#"{"kind":"Status","message":"busy"}"#), "busy");
    }
}
