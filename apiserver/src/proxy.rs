//! Proxying a request to a backend, upgrades included (upstream's `UpgradeAwareHandler`):
//! the API server's half of `pods/exec`, `pods/attach`, `pods/portforward` and
//! `nodes/proxy` ([`crate::connect`]).
//!
//! A plain request goes on with its method, body and headers (less hop-by-hop headers and
//! the caller's credentials) and its response comes back streamed. An upgrade request
//! (`Connection: Upgrade`: SPDY/3.1 or WebSocket, whatever the client asked for) goes on
//! with its upgrade headers (`Upgrade`, `Sec-WebSocket-*`, `X-Stream-Protocol-Version`);
//! when the backend answers `101 Switching Protocols`, that answer goes back to the client
//! and, once both connections switched, bytes are copied both ways until each side is
//! done. Any other answer to an upgrade goes back as it came (kubectl falls back from
//! WebSocket to SPDY on it). No protocol is translated: the backend must speak the
//! client's.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::errors::{ApiError, ApiResult};
use crate::handlers::BoxBody;

/// How long a backend may take to send its response head once connected.
pub const RESPONSE_HEADER_TIMEOUT: Duration = Duration::from_secs(60);
/// The most of a refused upgrade's response body passed back.
const MAX_REFUSAL_BODY: usize = 64 * 1024;

/// Hop-by-hop headers (RFC 9110 §7.6.1), never forwarded on plain requests.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// A byte stream to a backend.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// Where a request goes.
#[derive(Clone, Debug)]
pub struct Location {
    /// TLS to dial with; None for plain HTTP.
    pub tls: Option<Arc<ClientConfig>>,
    /// Hosts (names or IPs) in order of preference: a later one is dialed only when the
    /// ones before it do not resolve.
    pub hosts: Vec<String>,
    pub port: u16,
    /// The request target on the backend (`/exec/ns/pod/c?command=sh&...`).
    pub path_and_query: String,
    /// The name the backend's certificate must carry (and SNI) when it is not the host
    /// dialed: an endpoint IP of a Service whose certificate names `<svc>.<ns>.svc`.
    pub server_name: Option<String>,
}

impl Location {
    /// The URL on the first host, for messages.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let host = self.hosts.first().map(String::as_str).unwrap_or_default();
        format!("{scheme}://{}{}", join_host_port(host, self.port), self.path_and_query)
    }
}

/// Go's `net.JoinHostPort`: IPv6 literals in brackets.
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// An I/O error in the words of Go's `net` package where they differ.
fn io_text(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connect: connection refused".into(),
        std::io::ErrorKind::TimedOut => "i/o timeout".into(),
        _ => e.to_string(),
    }
}

/// Connects to `loc` (TLS when it says) within `timeout`; the stream and the
/// `host:port` reached. The error reads as Go's dialer's.
pub async fn dial(loc: &Location, timeout: Duration) -> Result<(Box<dyn Io>, String), String> {
    let first = join_host_port(loc.hosts.first().map(String::as_str).unwrap_or_default(), loc.port);
    match tokio::time::timeout(timeout, dial_any(loc)).await {
        Ok(r) => r,
        Err(_) => Err(format!("dial tcp {first}: i/o timeout")),
    }
}

async fn dial_any(loc: &Location) -> Result<(Box<dyn Io>, String), String> {
    let mut last = String::from("dial tcp: no address to dial");
    for host in &loc.hosts {
        let authority = join_host_port(host, loc.port);
        let addrs: Vec<_> = match tokio::net::lookup_host((host.as_str(), loc.port)).await {
            Ok(a) => a.collect(),
            Err(e) => {
                last = format!("dial tcp: lookup {host}: {e}");
                continue;
            }
        };
        if addrs.is_empty() {
            last = format!("dial tcp: lookup {host}: no such host");
            continue;
        }
        // The name resolved: this is the backend, whether or not it answers.
        let mut tcp = None;
        let mut err = None;
        for a in addrs {
            match tokio::net::TcpStream::connect(a).await {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => err = Some(format!("dial tcp {a}: {}", io_text(&e))),
            }
        }
        let Some(tcp) = tcp else { return Err(err.unwrap_or(last)) };
        let _ = tcp.set_nodelay(true);
        let Some(tls) = &loc.tls else { return Ok((Box::new(tcp), authority)) };
        let name = loc.server_name.as_deref().unwrap_or(host.trim_start_matches('[').trim_end_matches(']'));
        let name = ServerName::try_from(name.to_string())
            .map_err(|e| format!("tls: invalid server name {name:?}: {e}"))?;
        let stream = tokio_rustls::TlsConnector::from(tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| format!("tls: {e}"))?;
        return Ok((Box::new(stream), authority));
    }
    Err(last)
}

/// Whether a request asks to switch protocols (upstream's `httpstream.IsUpgradeRequest`:
/// a `Connection` header naming `upgrade`).
pub fn is_upgrade_request(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .any(|v| v.to_str().is_ok_and(|s| s.to_ascii_lowercase().contains("upgrade")))
}

/// The elements of a comma-separated list header, over all its lines, trimmed.
pub fn header_list(headers: &HeaderMap, name: header::HeaderName) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

/// The header names listed in `Connection` (hop-by-hop by declaration).
fn connection_tokens(headers: &HeaderMap) -> Vec<String> {
    header_list(headers, header::CONNECTION).into_iter().map(|t| t.to_ascii_lowercase()).collect()
}

/// The headers of the request sent on: the caller's less its credentials (already
/// checked here: `Authorization`, `Impersonate-*`) and, unless it is an upgrade, less
/// hop-by-hop headers; `Host` names the backend and the caller's address is appended to
/// `X-Forwarded-For`.
pub fn request_headers(
    from: &HeaderMap,
    upgrade: bool,
    authority: &str,
    client: Option<IpAddr>,
) -> HeaderMap {
    let named = connection_tokens(from);
    let mut out = HeaderMap::new();
    for (name, value) in from {
        let n = name.as_str();
        let credential = n == "authorization" || n.starts_with("impersonate-");
        let framing = matches!(n, "host" | "content-length" | "transfer-encoding");
        let hop = HOP_BY_HOP.contains(&n) || named.iter().any(|t| t == n);
        if credential || (upgrade && framing) || (!upgrade && n == "host") || (!upgrade && hop) {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    if let Ok(v) = HeaderValue::from_str(authority) {
        out.insert(header::HOST, v);
    }
    if let Some(ip) = client {
        let xff = HeaderName::from_static("x-forwarded-for");
        let prior: Vec<&str> = from.get_all(&xff).iter().filter_map(|v| v.to_str().ok()).collect();
        let value = if prior.is_empty() { ip.to_string() } else { format!("{}, {ip}", prior.join(", ")) };
        if let Ok(v) = HeaderValue::from_str(&value) {
            out.insert(xff, v);
        }
    }
    out
}

/// The headers of a (non-upgrade) response passed back: the backend's less hop-by-hop.
pub fn response_headers(from: &HeaderMap) -> HeaderMap {
    let named = connection_tokens(from);
    let mut out = HeaderMap::new();
    for (name, value) in from {
        let n = name.as_str();
        if HOP_BY_HOP.contains(&n) || named.iter().any(|t| t == n) {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

/// Sends `req` over `io` on an HTTP/1.1 connection that may be upgraded; the response
/// head within [`RESPONSE_HEADER_TIMEOUT`].
pub async fn send<B>(io: Box<dyn Io>, req: Request<B>) -> Result<Response<Incoming>, String>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let exchange = async {
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(io)).await.map_err(|e| e.to_string())?;
        // Ends with the connection: after the body was read or dropped, or the upgrade.
        tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        sender.send_request(req).await.map_err(|e| e.to_string())
    };
    match tokio::time::timeout(RESPONSE_HEADER_TIMEOUT, exchange).await {
        Ok(r) => r,
        Err(_) => Err("timeout awaiting response headers".into()),
    }
}

/// A failure reaching the backend, as upstream's responder reports a plain error: 500
/// with the text and no reason.
fn backend_error(message: String) -> ApiError {
    ApiError::new(500, "", message)
}

/// Proxies `req` to `loc` (upstream's `UpgradeAwareHandler.ServeHTTP`). With
/// `upgrade_required`, a request that is not an upgrade is refused (exec, attach,
/// port-forward).
pub async fn forward(
    loc: &Location,
    mut req: Request<Incoming>,
    upgrade_required: bool,
    dial_timeout: Duration,
) -> ApiResult<Response<BoxBody>> {
    let upgrade = is_upgrade_request(req.headers());
    if upgrade_required && !upgrade {
        return Err(ApiError::bad_request("Upgrade request required"));
    }
    let client = req.extensions().get::<component_base::http::ConnectionInfo>().map(|c| c.peer.ip());
    let (io, authority) = dial(loc, dial_timeout).await.map_err(|e| {
        backend_error(if upgrade {
            format!("error dialing backend: {e}")
        } else {
            format!("error trying to reach service: {e}")
        })
    })?;
    let headers = request_headers(req.headers(), upgrade, &authority, client);
    let mut out = Request::builder().method(req.method().clone()).uri(loc.path_and_query.as_str());
    if let Some(h) = out.headers_mut() {
        *h = headers;
    }
    if !upgrade {
        let out = out
            .body(req.into_body())
            .map_err(|e| ApiError::internal(format!("building the backend request: {e}")))?;
        let resp =
            send(io, out).await.map_err(|e| backend_error(format!("error trying to reach service: {e}")))?;
        let (parts, body) = resp.into_parts();
        let mut r =
            Response::new(body.map_err(|e| -> crate::handlers::BoxError { Box::new(e) }).boxed_unsync());
        *r.status_mut() = parts.status;
        *r.headers_mut() = response_headers(&parts.headers);
        return Ok(r);
    }
    let client_upgrade = hyper::upgrade::on(&mut req);
    let out = out
        .body(Empty::<Bytes>::new())
        .map_err(|e| ApiError::internal(format!("building the backend request: {e}")))?;
    let mut resp = send(io, out).await.map_err(|e| backend_error(format!("error dialing backend: {e}")))?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Ok(refused(loc, resp).await);
    }
    let backend_upgrade = hyper::upgrade::on(&mut resp);
    when_upgraded(client_upgrade, backend_upgrade, loc.url(), |client, backend, url| async move {
        splice(client, backend, &url).await
    });
    let mut r = Response::new(Empty::<Bytes>::new().map_err(|never| match never {}).boxed_unsync());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *r.headers_mut() = resp.headers().clone();
    Ok(r)
}

/// A backend's answer to an upgrade it did not grant, passed back as it came (kubectl falls
/// back from WebSocket to SPDY on it).
pub async fn refused(loc: &Location, resp: Response<Incoming>) -> Response<BoxBody> {
    let (parts, body) = resp.into_parts();
    tracing::debug!(url = loc.url(), status = parts.status.as_u16(), "the backend did not upgrade");
    let bytes =
        Limited::new(body, MAX_REFUSAL_BODY).collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let mut r = Response::new(Full::new(bytes).map_err(|never| match never {}).boxed_unsync());
    *r.status_mut() = parts.status;
    let mut headers = response_headers(&parts.headers);
    headers.remove(header::CONTENT_LENGTH);
    *r.headers_mut() = headers;
    r
}

/// Runs `f` on the client's and the backend's switched connections (with the backend URL,
/// for messages) once both upgrades completed.
pub fn when_upgraded<F, Fut>(
    client: hyper::upgrade::OnUpgrade,
    backend: hyper::upgrade::OnUpgrade,
    url: String,
    f: F,
) where
    F: FnOnce(hyper::upgrade::Upgraded, hyper::upgrade::Upgraded, String) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        match tokio::join!(client, backend) {
            (Ok(c), Ok(b)) => f(c, b, url).await,
            (Err(e), _) | (_, Err(e)) => tracing::warn!(url, err = %e, "proxied upgrade failed"),
        }
    });
}

/// Copies bytes both ways between two switched connections until both directions ended.
pub async fn splice(client: hyper::upgrade::Upgraded, backend: hyper::upgrade::Upgraded, url: &str) {
    let (mut c, mut b) = (TokioIo::new(client), TokioIo::new(backend));
    match tokio::io::copy_bidirectional(&mut c, &mut b).await {
        Ok((up, down)) => tracing::debug!(url, up, down, "proxied stream ended"),
        Err(e) => tracing::debug!(url, err = %e, "proxied stream broke"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn upgrade_headers_go_on() {
        let h = headers(&[
            ("connection", "Upgrade"),
            ("upgrade", "SPDY/3.1"),
            ("x-stream-protocol-version", "v5.channel.k8s.io"),
            ("x-stream-protocol-version", "v4.channel.k8s.io"),
            ("authorization", "Bearer secret"),
            ("impersonate-user", "someone"),
            ("host", "10.0.0.1:6443"),
            ("content-length", "0"),
            ("user-agent", "kubectl/v1.32.4"),
        ]);
        assert!(is_upgrade_request(&h));
        let out = request_headers(&h, true, "127.0.0.9:10250", Some("127.0.0.1".parse().unwrap()));
        assert_eq!(out["connection"], "Upgrade");
        assert_eq!(out["upgrade"], "SPDY/3.1");
        let versions: Vec<_> = out.get_all("x-stream-protocol-version").iter().collect();
        assert_eq!(versions, ["v5.channel.k8s.io", "v4.channel.k8s.io"]);
        assert_eq!(out["host"], "127.0.0.9:10250");
        assert_eq!(out["x-forwarded-for"], "127.0.0.1");
        assert_eq!(out["user-agent"], "kubectl/v1.32.4");
        for gone in ["authorization", "impersonate-user", "content-length"] {
            assert!(out.get(gone).is_none(), "{gone} was forwarded");
        }
    }

    #[test]
    fn websocket_headers_go_on() {
        let h = headers(&[
            ("connection", "Upgrade"),
            ("upgrade", "websocket"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("sec-websocket-version", "13"),
            ("sec-websocket-protocol", "v5.channel.k8s.io"),
        ]);
        let out = request_headers(&h, true, "n1:10250", None);
        for k in
            ["sec-websocket-key", "sec-websocket-version", "sec-websocket-protocol", "upgrade", "connection"]
        {
            assert_eq!(out[k], h[k], "{k}");
        }
        assert!(out.get("x-forwarded-for").is_none());
    }

    #[test]
    fn plain_requests_lose_hop_by_hop_headers() {
        let h = headers(&[
            ("connection", "keep-alive, x-private"),
            ("keep-alive", "timeout=5"),
            ("x-private", "1"),
            ("te", "trailers"),
            ("accept", "*/*"),
            ("x-forwarded-for", "192.0.2.1"),
            ("content-length", "3"),
        ]);
        assert!(!is_upgrade_request(&h));
        let out = request_headers(&h, false, "127.0.0.9:10250", Some("127.0.0.2".parse().unwrap()));
        for gone in ["connection", "keep-alive", "x-private", "te"] {
            assert!(out.get(gone).is_none(), "{gone} was forwarded");
        }
        assert_eq!(out["accept"], "*/*");
        assert_eq!(out["content-length"], "3");
        assert_eq!(out["x-forwarded-for"], "192.0.2.1, 127.0.0.2");
        let back =
            response_headers(&headers(&[("transfer-encoding", "chunked"), ("content-type", "text/plain")]));
        assert!(back.get("transfer-encoding").is_none());
        assert_eq!(back["content-type"], "text/plain");
    }

    #[test]
    fn urls() {
        let loc = Location {
            tls: None,
            hosts: vec!["::1".into()],
            port: 10250,
            path_and_query: "/x?y=1".into(),
            server_name: None,
        };
        assert_eq!(loc.url(), "http://[::1]:10250/x?y=1");
        assert_eq!(join_host_port("127.0.0.1", 1), "127.0.0.1:1");
    }

    /// A backend that records each request's target and headers, switches protocols for
    /// `Upgrade: SPDY/3.1` (then echoes bytes), refuses WebSocket with 403 and answers
    /// anything else with a body.
    async fn backend(seen: tokio::sync::mpsc::UnboundedSender<(String, HeaderMap)>) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let seen = seen.clone();
                let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let target = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
                        seen.send((target, req.headers().clone())).unwrap();
                        let mut resp = Response::new(Full::new(Bytes::from_static(b"plain answer")));
                        match req.headers().get(header::UPGRADE).and_then(|v| v.to_str().ok()) {
                            Some("SPDY/3.1") => {
                                let up = hyper::upgrade::on(&mut req);
                                tokio::spawn(async move {
                                    let mut io = TokioIo::new(up.await.unwrap());
                                    let (mut r, mut w) = tokio::io::split(&mut io);
                                    let _ = tokio::io::copy(&mut r, &mut w).await;
                                });
                                *resp.body_mut() = Full::new(Bytes::new());
                                *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
                                let h = resp.headers_mut();
                                h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
                                h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
                                h.insert(
                                    "x-stream-protocol-version",
                                    HeaderValue::from_static("v4.channel.k8s.io"),
                                );
                            }
                            Some(_) => {
                                *resp.body_mut() = Full::new(Bytes::from_static(b"no such protocol"));
                                *resp.status_mut() = StatusCode::FORBIDDEN;
                            }
                            None => {}
                        }
                        Ok::<_, std::convert::Infallible>(resp)
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .with_upgrades(),
                );
            }
        });
        port
    }

    /// A front that proxies everything to `loc` (upgrade required or not).
    async fn front(loc: Location, upgrade_required: bool) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let loc = loc.clone();
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let loc = loc.clone();
                    async move {
                        let r = forward(&loc, req, upgrade_required, Duration::from_secs(5)).await;
                        Ok::<_, std::convert::Infallible>(
                            r.unwrap_or_else(|e| crate::handlers::error_response(&e)),
                        )
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .with_upgrades(),
                );
            }
        });
        port
    }

    /// Sends a raw HTTP/1.1 request and reads the response head.
    async fn raw(port: u16, request: &str) -> (tokio::net::TcpStream, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        tcp.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(tcp.read(&mut byte).await.unwrap(), 1, "connection closed in the head: {head:?}");
            head.push(byte[0]);
        }
        (tcp, String::from_utf8(head).unwrap())
    }

    #[tokio::test]
    async fn upgrades_are_spliced() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let backend = backend(tx).await;
        let loc = Location {
            tls: None,
            hosts: vec!["127.0.0.1".into()],
            port: backend,
            path_and_query: "/exec/ns/p/c?command=ls&output=1".into(),
            server_name: None,
        };
        let port = front(loc, true).await;
        let (mut tcp, head) = raw(
            port,
            "POST /api/v1/namespaces/ns/pods/p/exec?command=ls HTTP/1.1\r\nHost: front\r\n\
             Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v5.channel.k8s.io\r\n\
             X-Stream-Protocol-Version: v4.channel.k8s.io\r\nAuthorization: Bearer secret\r\n\r\n",
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        assert!(head.to_ascii_lowercase().contains("x-stream-protocol-version: v4.channel.k8s.io"), "{head}");
        let (target, headers) = seen.recv().await.unwrap();
        assert_eq!(target, "/exec/ns/p/c?command=ls&output=1");
        assert_eq!(headers.get_all("x-stream-protocol-version").iter().count(), 2);
        assert!(headers.get(header::AUTHORIZATION).is_none());
        assert_eq!(headers[header::HOST], format!("127.0.0.1:{backend}"));
        // Bytes both ways, after the switch.
        for msg in [&b"\x80\x03\x00\x01 frame one"[..], b"and two"] {
            tcp.write_all(msg).await.unwrap();
            let mut back = vec![0u8; msg.len()];
            tcp.read_exact(&mut back).await.unwrap();
            assert_eq!(back, msg);
        }

        // A refused upgrade comes back as it was.
        let (mut tcp, head) = raw(
            port,
            "GET /x HTTP/1.1\r\nHost: front\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n",
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 403"), "{head}");
        let mut body = vec![0u8; "no such protocol".len()];
        tcp.read_exact(&mut body).await.unwrap();
        assert_eq!(body, b"no such protocol");

        // Not an upgrade: refused before the backend is dialed.
        let (_tcp, head) = raw(port, "POST /x HTTP/1.1\r\nHost: front\r\nContent-Length: 0\r\n\r\n").await;
        assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    }

    #[tokio::test]
    async fn plain_requests_are_streamed_back() {
        use tokio::io::AsyncReadExt;
        let (tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let backend = backend(tx).await;
        let loc = Location {
            tls: None,
            hosts: vec!["127.0.0.1".into()],
            port: backend,
            path_and_query: "/healthz?v=1".into(),
            server_name: None,
        };
        let port = front(loc, false).await;
        let (mut tcp, head) = raw(port, "GET /x HTTP/1.1\r\nHost: front\r\nConnection: close\r\n\r\n").await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let mut body = String::new();
        tcp.read_to_string(&mut body).await.unwrap();
        assert!(body.ends_with("plain answer"), "{body}");
        let (target, headers) = seen.recv().await.unwrap();
        assert_eq!(target, "/healthz?v=1");
        assert!(headers.get(header::CONNECTION).is_none());
    }

    /// A name that does not resolve falls through to the next address; one that refuses
    /// is the answer.
    #[tokio::test]
    async fn dial_falls_back_past_unresolvable_names() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let loc = Location {
            tls: None,
            hosts: vec!["no-such-host.invalid".into(), "127.0.0.1".into()],
            port,
            path_and_query: "/".into(),
            server_name: None,
        };
        let (_io, authority) = dial(&loc, Duration::from_secs(5)).await.unwrap();
        assert_eq!(authority, format!("127.0.0.1:{port}"));
        drop(listener);
        let err = match dial(&loc, Duration::from_secs(5)).await {
            Err(e) => e,
            Ok(_) => panic!("dialed a closed port"),
        };
        assert_eq!(err, format!("dial tcp 127.0.0.1:{port}: connect: connection refused"));
    }
}
