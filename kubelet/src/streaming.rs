//! The kubelet's streaming endpoints, as upstream's kubelet server serves them:
//!
//! - `/exec/<ns>/<pod>[/<uid>]/<container>?command=..&input=1&output=1&error=1&tty=1`
//! - `/attach/<ns>/<pod>[/<uid>]/<container>?input=1&output=1&error=1`
//! - `/portForward/<ns>/<pod>[/<uid>]` (`?port=80,443` for WebSocket clients)
//!
//! Each asks the runtime over CRI (`Exec`, `Attach`, `PortForward`) for a one-time URL on
//! its streaming server (containerd: `http://127.0.0.1:<port>/exec/<token>`) and then
//! proxies the caller's upgrade request there unchanged (SPDY/3.1 or WebSocket, whichever
//! the caller asked for; the runtime's server negotiates the stream protocol), splicing the
//! two upgraded connections byte for byte. This is upstream's kubelet with the streaming
//! proxy (the only mode since `--redirect-container-streaming` was removed).
//!
//! What protocol works end to end is the runtime's: containerd 1.6's streaming server
//! speaks SPDY/3.1 (`v1`..`v4.channel.k8s.io`, `portforward.k8s.io`) and the WebSocket
//! channel protocols up to `v4.channel.k8s.io`. Newer WebSocket protocols (kubectl's
//! `v5.channel.k8s.io`, port-forward tunneled over WebSocket) are translated to SPDY by the
//! API server before they get here, as upstream.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;

use crate::{Kubelet, cri};

type Body = BoxBody<Bytes, Infallible>;

/// How long the runtime's streaming server may take to answer the upgrade.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);
/// The most of a refused upgrade's body passed back to the caller.
const MAX_ERROR_BODY: usize = 64 * 1024;

fn text(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(body.into())).boxed())
        .expect("static response parts")
}

/// Which endpoint a path names, with its parts.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    Exec { ns: String, pod: String, uid: Option<String>, container: String },
    Attach { ns: String, pod: String, uid: Option<String>, container: String },
    PortForward { ns: String, pod: String, uid: Option<String> },
}

impl Target {
    fn parse(path: &str) -> Option<Target> {
        let parts: Vec<String> = path.trim_start_matches('/').split('/').map(percent_decode).collect();
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        let s = |v: &str| v.to_string();
        Some(match parts.as_slice() {
            ["exec", ns, pod, container] => {
                Target::Exec { ns: s(ns), pod: s(pod), uid: None, container: s(container) }
            }
            ["exec", ns, pod, uid, container] => {
                Target::Exec { ns: s(ns), pod: s(pod), uid: Some(s(uid)), container: s(container) }
            }
            ["attach", ns, pod, container] => {
                Target::Attach { ns: s(ns), pod: s(pod), uid: None, container: s(container) }
            }
            ["attach", ns, pod, uid, container] => {
                Target::Attach { ns: s(ns), pod: s(pod), uid: Some(s(uid)), container: s(container) }
            }
            ["portForward", ns, pod] => Target::PortForward { ns: s(ns), pod: s(pod), uid: None },
            ["portForward", ns, pod, uid] => {
                Target::PortForward { ns: s(ns), pod: s(pod), uid: Some(s(uid)) }
            }
            _ => return None,
        })
    }
}

/// The streams a caller asked for (upstream's `remotecommand.Options`): `input`, `output`,
/// `error`, `tty` = `1`. The `PodExecOptions` spellings (`stdin=true`, ...) are accepted too.
#[derive(Debug, Default, PartialEq, Eq)]
struct StreamOptions {
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

impl StreamOptions {
    fn parse(q: &Query) -> Result<Self, String> {
        let set = |names: &[&str]| names.iter().any(|n| q.first(n).is_some_and(|v| v == "1" || v == "true"));
        let tty = set(&["tty"]);
        let mut o = StreamOptions {
            stdin: set(&["input", "stdin"]),
            stdout: set(&["output", "stdout"]),
            stderr: set(&["error", "stderr"]),
            tty,
        };
        if o.tty && o.stderr {
            // A terminal merges stderr into stdout.
            o.stderr = false;
        }
        if !o.stdin && !o.stdout && !o.stderr {
            return Err("you must specify at least 1 of stdin, stdout, stderr".into());
        }
        Ok(o)
    }
}

/// A query string with repeated keys kept in order (`command` repeats).
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: Option<&str>) -> Self {
        Query(
            q.unwrap_or_default()
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (form_decode(k), form_decode(v))
                })
                .collect(),
        )
    }

    fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0.iter().filter(move |(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    fn first(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

fn form_decode(s: &str) -> String {
    percent_decode(&s.replace('+', " "))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Some(v) =
                std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The ports of a WebSocket port-forward (upstream's `portforward.NewV4Options`): `port`,
/// comma-separated, each 1..=65535. SPDY clients name ports per stream instead.
fn websocket_ports(q: &Query) -> Result<Vec<i32>, String> {
    let values: Vec<&str> = q.all("port").collect();
    if values.is_empty() {
        return Err("query parameter \"port\" is required".into());
    }
    let mut ports = Vec::new();
    for v in values {
        for p in v.split(',') {
            let n: u16 = p.parse().map_err(|e| format!("unable to parse \"{p}\" as a port: {e}"))?;
            if n == 0 {
                return Err(format!("port \"{p}\" must be > 0"));
            }
            ports.push(i32::from(n));
        }
    }
    Ok(ports)
}

/// Whether the `Connection` header asks for an upgrade (upstream's `IsUpgradeRequest`).
fn is_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .any(|v| v.to_str().is_ok_and(|s| s.to_ascii_lowercase().contains("upgrade")))
}

fn is_websocket(headers: &HeaderMap) -> bool {
    is_upgrade(headers)
        && headers
            .get_all(header::UPGRADE)
            .iter()
            .any(|v| v.to_str().is_ok_and(|s| s.eq_ignore_ascii_case("websocket")))
}

/// Serves `/exec`, `/attach` and `/portForward`; None for every other path. The caller
/// has authenticated and authorized the request (`nodes/proxy`, as upstream).
pub async fn handle(k: Arc<Kubelet>, req: Request<Incoming>) -> Option<Response<Body>> {
    let target = Target::parse(req.uri().path())?;
    if !matches!(*req.method(), Method::GET | Method::POST) {
        return Some(text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed"));
    }
    let q = Query::parse(req.uri().query());
    let url = match streaming_url(&k, &target, &q, req.headers()).await {
        Ok(url) => url,
        Err(resp) => return Some(resp),
    };
    Some(proxy_stream(req, &url).await)
}

/// Asks the runtime for the streaming URL of `target`; the error answers the caller.
async fn streaming_url(
    k: &Kubelet,
    target: &Target,
    q: &Query,
    headers: &HeaderMap,
) -> Result<String, Response<Body>> {
    let bad = |e: String| text(StatusCode::BAD_REQUEST, e);
    match target {
        Target::Exec { ns, pod, uid, container } => {
            let opts = StreamOptions::parse(q).map_err(bad)?;
            let pod = find_pod(k, ns, pod, uid.as_deref())?;
            let id = running_container(k, &pod, container).await?;
            let req = cri::ExecRequest {
                container_id: id,
                cmd: q.all("command").map(str::to_string).collect(),
                tty: opts.tty,
                stdin: opts.stdin,
                stdout: opts.stdout,
                stderr: opts.stderr,
            };
            k.runtime.exec(req).await.map_err(|e| runtime_error(&e))
        }
        Target::Attach { ns, pod, uid, container } => {
            let opts = StreamOptions::parse(q).map_err(bad)?;
            let pod = find_pod(k, ns, pod, uid.as_deref())?;
            let id = running_container(k, &pod, container).await?;
            // Whether the process has a terminal was fixed when it started: the spec says.
            let Some(tty) = container_tty(&pod, container) else {
                return Err(text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("container {container} not found in pod {}", full_name(&pod)),
                ));
            };
            let req = cri::AttachRequest {
                container_id: id,
                stdin: opts.stdin,
                tty,
                stdout: opts.stdout,
                stderr: opts.stderr,
            };
            k.runtime.attach(req).await.map_err(|e| runtime_error(&e))
        }
        Target::PortForward { ns, pod, uid } => {
            let ports = if is_websocket(headers) { websocket_ports(q).map_err(bad)? } else { Vec::new() };
            let pod = find_pod(k, ns, pod, uid.as_deref())?;
            let sandbox = ready_sandbox(k, &pod).await?;
            let req = cri::PortForwardRequest { pod_sandbox_id: sandbox, port: ports };
            k.runtime.port_forward(req).await.map_err(|e| runtime_error(&e))
        }
    }
}

/// `<name>_<namespace>`, upstream's pod full name in kubelet messages.
fn full_name(pod: &Pod) -> String {
    format!(
        "{}_{}",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default()
    )
}

fn find_pod(k: &Kubelet, ns: &str, name: &str, uid: Option<&str>) -> Result<Pod, Response<Body>> {
    let pod = k
        .pods
        .pods()
        .into_iter()
        .map(|(p, _)| p)
        .find(|p| p.metadata.namespace.as_deref() == Some(ns) && p.metadata.name.as_deref() == Some(name))
        .ok_or_else(|| text(StatusCode::NOT_FOUND, "pod does not exist"))?;
    if let Some(uid) = uid.filter(|u| !u.is_empty())
        && pod.metadata.uid.as_deref() != Some(uid)
    {
        return Err(text(StatusCode::NOT_FOUND, "pod not found"));
    }
    Ok(pod)
}

/// The running container `name` of `pod` (the newest, should there be several).
async fn running_container(k: &Kubelet, pod: &Pod, name: &str) -> Result<String, Response<Body>> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let containers = k.runtime.list_containers().await.map_err(|e| runtime_error(&e))?;
    containers
        .into_iter()
        .filter(|c| {
            c.state == cri::ContainerState::ContainerRunning as i32
                && c.labels.get(cri::POD_UID_LABEL) == Some(&uid)
                && c.labels.get(cri::CONTAINER_NAME_LABEL).map(String::as_str) == Some(name)
        })
        .max_by_key(|c| c.created_at)
        .map(|c| c.id)
        .ok_or_else(|| text(StatusCode::INTERNAL_SERVER_ERROR, format!("container not found (\"{name}\")")))
}

/// The pod's ready sandbox (the newest), whose network namespace port-forward enters.
async fn ready_sandbox(k: &Kubelet, pod: &Pod) -> Result<String, Response<Body>> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let sandboxes = k.runtime.list_pod_sandboxes().await.map_err(|e| runtime_error(&e))?;
    sandboxes
        .into_iter()
        .filter(|s| {
            s.state == cri::PodSandboxState::SandboxReady as i32
                && s.metadata.as_ref().is_some_and(|m| m.uid == uid)
        })
        .max_by_key(|s| s.created_at)
        .map(|s| s.id)
        .ok_or_else(|| {
            text(StatusCode::INTERNAL_SERVER_ERROR, format!("pod not found (\"{}\")", full_name(pod)))
        })
}

/// The `tty` of container `name` in the pod's spec (init and ephemeral containers too).
fn container_tty(pod: &Pod, name: &str) -> Option<bool> {
    let spec = pod.spec.as_ref()?;
    let regular = spec.containers.iter().chain(spec.init_containers.iter().flatten());
    if let Some(c) = regular.into_iter().find(|c| c.name == name) {
        return Some(c.tty.unwrap_or(false));
    }
    spec.ephemeral_containers.iter().flatten().find(|c| c.name == name).map(|c| c.tty.unwrap_or(false))
}

/// A failed CRI call as upstream's `streaming.WriteError` answers it: the gRPC error's
/// text, 404 for NotFound, 429 for ResourceExhausted, else 500.
fn runtime_error(e: &cri::Error) -> Response<Body> {
    let status = match e.code() {
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let message = match e {
        cri::Error::Call { status, .. } => {
            format!("rpc error: code = {:?} desc = {}", status.code(), status.message())
        }
        other => other.to_string(),
    };
    text(status, message)
}

/// A plain `http://host:port/path?query` URL split into (host, port, path and query).
fn split_url(url: &str) -> Result<(String, u16, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("unsupported streaming URL {url:?}: only http:// is proxied"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
            (h, p.parse::<u16>().map_err(|_| format!("bad port in streaming URL {url:?}"))?)
        }
        _ => (authority, 80),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("no host in streaming URL {url:?}"));
    }
    Ok((host.to_string(), port, path.to_string()))
}

/// The headers sent on to the runtime: the caller's (the upgrade and stream protocol
/// headers above all), without its credentials, with the runtime's `Host`.
fn upstream_headers(from: &HeaderMap, authority: &str) -> HeaderMap {
    let mut h = from.clone();
    h.remove(header::AUTHORIZATION);
    h.remove(header::HOST);
    h.remove(header::CONTENT_LENGTH);
    h.remove(header::TRANSFER_ENCODING);
    if let Ok(v) = HeaderValue::from_str(authority) {
        h.insert(header::HOST, v);
    }
    h
}

/// Upstream's `proxyStream`: the request must be an upgrade; it goes to `url` as it came,
/// and once both sides switched protocols, bytes are copied both ways until each side is
/// done. A refused upgrade is answered with the runtime's own response.
async fn proxy_stream(mut req: Request<Incoming>, url: &str) -> Response<Body> {
    if !is_upgrade(req.headers()) {
        return text(StatusCode::BAD_REQUEST, "Upgrade request required");
    }
    let (host, port, path) = match split_url(url) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    let authority = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    let client_upgrade = hyper::upgrade::on(&mut req);
    let mut out = Request::builder().method(req.method().clone()).uri(path.as_str());
    if let Some(h) = out.headers_mut() {
        *h = upstream_headers(req.headers(), &authority);
    }
    let out = match out.body(Empty::<Bytes>::new()) {
        Ok(r) => r,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let dial = async {
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await.map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        sender.send_request(out).await.map_err(|e| e.to_string())
    };
    let mut resp = match tokio::time::timeout(UPSTREAM_TIMEOUT, dial).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("error dialing backend {authority}: {e}"),
            );
        }
        Err(_) => return text(StatusCode::GATEWAY_TIMEOUT, format!("timed out dialing backend {authority}")),
    };
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        // Passed back as it came (kubectl falls back from WebSocket to SPDY on this).
        let (parts, body) = resp.into_parts();
        tracing::debug!(status = parts.status.as_u16(), "the runtime's streaming server refused the upgrade");
        let bytes = match Limited::new(body, MAX_ERROR_BODY).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => Bytes::new(),
        };
        let mut r = Response::new(Full::new(bytes).boxed());
        *r.status_mut() = parts.status;
        for (name, value) in &parts.headers {
            if !matches!(name.as_str(), "connection" | "transfer-encoding" | "content-length" | "keep-alive")
            {
                r.headers_mut().append(name.clone(), value.clone());
            }
        }
        return r;
    }
    let backend_upgrade = hyper::upgrade::on(&mut resp);
    tokio::spawn(async move {
        let (client, backend) = match tokio::join!(client_upgrade, backend_upgrade) {
            (Ok(c), Ok(b)) => (c, b),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(err = %e, "streaming upgrade failed");
                return;
            }
        };
        let (mut client, mut backend) = (TokioIo::new(client), TokioIo::new(backend));
        if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut backend).await {
            tracing::debug!(err = %e, "stream ended");
        }
    });
    let mut r = Response::new(Empty::new().boxed());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *r.headers_mut() = resp.headers().clone();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(
            Target::parse("/exec/default/web/app"),
            Some(Target::Exec {
                ns: "default".into(),
                pod: "web".into(),
                uid: None,
                container: "app".into()
            })
        );
        assert_eq!(
            Target::parse("/attach/default/web/u-1/app"),
            Some(Target::Attach {
                ns: "default".into(),
                pod: "web".into(),
                uid: Some("u-1".into()),
                container: "app".into()
            })
        );
        assert_eq!(
            Target::parse("/portForward/ns/p"),
            Some(Target::PortForward { ns: "ns".into(), pod: "p".into(), uid: None })
        );
        assert_eq!(Target::parse("/containerLogs/ns/p/c"), None);
        assert_eq!(Target::parse("/exec/ns/p"), None);
        assert_eq!(Target::parse("/pods"), None);
    }

    #[test]
    fn stream_options() {
        let q = Query::parse(Some("command=sh&command=-c&command=echo+hi%21&input=1&output=1&tty=1&error=1"));
        assert_eq!(q.all("command").collect::<Vec<_>>(), ["sh", "-c", "echo hi!"]);
        let o = StreamOptions::parse(&q).unwrap();
        // A terminal has no separate stderr.
        assert_eq!(o, StreamOptions { stdin: true, stdout: true, stderr: false, tty: true });
        let o = StreamOptions::parse(&Query::parse(Some("stdout=true&stderr=true"))).unwrap();
        assert_eq!(o, StreamOptions { stdin: false, stdout: true, stderr: true, tty: false });
        assert_eq!(
            StreamOptions::parse(&Query::parse(Some("command=ls"))).unwrap_err(),
            "you must specify at least 1 of stdin, stdout, stderr"
        );
    }

    #[test]
    fn ports() {
        assert_eq!(websocket_ports(&Query::parse(Some("port=80,443&port=8080"))).unwrap(), [80, 443, 8080]);
        assert!(websocket_ports(&Query::parse(None)).unwrap_err().contains("\"port\" is required"));
        assert_eq!(websocket_ports(&Query::parse(Some("port=0"))).unwrap_err(), "port \"0\" must be > 0");
        assert!(
            websocket_ports(&Query::parse(Some("port=x"))).unwrap_err().starts_with("unable to parse \"x\"")
        );
    }

    #[test]
    fn urls() {
        assert_eq!(
            split_url("http://127.0.0.1:35713/exec/AbC").unwrap(),
            ("127.0.0.1".into(), 35713, "/exec/AbC".into())
        );
        assert_eq!(
            split_url("http://[::1]:10010/attach/x").unwrap(),
            ("::1".into(), 10010, "/attach/x".into())
        );
        assert_eq!(split_url("http://host/x").unwrap(), ("host".into(), 80, "/x".into()));
        assert!(split_url("https://127.0.0.1:1/x").is_err());
    }

    #[test]
    fn forwarded_headers() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
        h.append("x-stream-protocol-version", HeaderValue::from_static("v4.channel.k8s.io"));
        h.append("x-stream-protocol-version", HeaderValue::from_static("v3.channel.k8s.io"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer secret"));
        h.insert(header::HOST, HeaderValue::from_static("10.0.0.1:10250"));
        assert!(is_upgrade(&h));
        assert!(!is_websocket(&h));
        let out = upstream_headers(&h, "127.0.0.1:4000");
        assert_eq!(out.get_all("x-stream-protocol-version").iter().count(), 2);
        assert_eq!(out[header::HOST], "127.0.0.1:4000");
        assert_eq!(out[header::UPGRADE], "SPDY/3.1");
        assert!(out.get(header::AUTHORIZATION).is_none());
    }
}
