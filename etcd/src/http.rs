//! What the client, metrics and peer ports serve besides gRPC. Like etcd, the client port
//! carries gRPC (HTTP/2) and plain HTTP/1.1 side by side: `etcdctl check datascale` reads
//! `/metrics` from the very endpoint it writes to.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use component_base::http::{EndpointsService, HealthFormat};
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::body::Incoming;
use hyper::service::Service;
use proto::etcdserverpb::AlarmType;

use crate::server::EtcdServer;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type BoxBody = UnsyncBoxBody<Bytes, BoxError>;

/// The etcd cluster version this server speaks.
const CLUSTER_VERSION: &str = "3.4.0";
/// How long `/health` waits for a linearizable read (etcd: one second).
const HEALTH_READ_TIMEOUT: Duration = Duration::from_secs(1);

fn full(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<BoxBody> {
    let mut r = Response::new(Full::new(body.into()).map_err(|never| match never {}).boxed_unsync());
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    r
}

fn version_json() -> String {
    format!(r#"{{"etcdserver":"{}","etcdcluster":"{CLUSTER_VERSION}"}}"#, crate::SERVER_VERSION)
}

/// etcd's health: no alarm, a leader, and a linearizable read that completes.
async fn check_health(server: Arc<EtcdServer>) -> Result<(), String> {
    let alarms = server.alarms.list();
    if let Some(a) = alarms.first() {
        let name = AlarmType::try_from(a.alarm).map_or("UNKNOWN", |t| t.as_str_name());
        return Err(format!("ALARM {name}"));
    }
    if server.node.status.leader() == raft::INVALID_ID {
        return Err("RAFT NO LEADER".into());
    }
    match tokio::time::timeout(HEALTH_READ_TIMEOUT, server.linearizable_read()).await {
        Ok(Ok(())) => Ok(()),
        _ => Err("QGET ERROR".into()),
    }
}

/// `/metrics`, `/health`, `/livez`, `/readyz`: what the client and metrics ports serve.
pub fn observability_endpoints(server: &Arc<EtcdServer>) -> EndpointsService {
    let health = server.clone();
    let ready = server.clone();
    component_base::http::Endpoints::new()
        .metrics("/metrics", server.metrics.registry.clone())
        .health("/health", HealthFormat::EtcdJson, "etcd", move |_| check_health(health.clone()))
        .health("/livez", HealthFormat::Kubernetes, "ping", |_| async { Ok(()) })
        .health("/readyz", HealthFormat::Kubernetes, "data_corruption", move |_| {
            let s = ready.clone();
            async move { if s.alarms.is_active(AlarmType::Corrupt) { Err("corrupt".into()) } else { Ok(()) } }
        })
        .into_service()
}

/// The client port: gRPC to tonic, everything else to the HTTP endpoints.
#[derive(Clone)]
pub struct ClientMux {
    pub grpc: tonic::service::Routes,
    pub http: EndpointsService,
}

impl Service<Request<Incoming>> for ClientMux {
    type Response = Response<BoxBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        if is_grpc(&req) {
            let mut grpc = self.grpc.clone();
            return Box::pin(async move {
                let mut resp = tower::Service::call(&mut grpc, req).await?;
                grpc_message_limit_status(resp.headers_mut());
                Ok(resp.map(|b| b.map_err(|s| Box::new(s) as BoxError).boxed_unsync()))
            });
        }
        let http = self.http.clone();
        Box::pin(async move { Ok(plain_http(&http, req).await) })
    }
}

/// A request over the gRPC message limit is refused by tonic with OutOfRange; grpc-go (and
/// so etcd) answers ResourceExhausted with its own wording, which clients match on. Rewrites
/// the trailers-only response tonic sends for a unary call.
fn grpc_message_limit_status(headers: &mut http::HeaderMap) {
    const TONIC_PREFIX: &str = "Error, decoded message length too large: found ";
    let out_of_range = headers.get("grpc-status").is_some_and(|v| v == "11");
    if !out_of_range {
        return;
    }
    let Some(msg) = headers.get("grpc-message").and_then(|v| v.to_str().ok()) else { return };
    let msg = percent_decode(msg);
    let Some(rest) = msg.strip_prefix(TONIC_PREFIX) else { return };
    // "<found> bytes, the limit is: <limit> bytes"
    let numbers: Vec<&str> = rest.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).collect();
    let [found, limit] = numbers[..] else { return };
    let text = format!("grpc: received message larger than max ({found} vs. {limit})");
    headers.insert("grpc-status", http::HeaderValue::from_static("8"));
    if let Ok(v) = http::HeaderValue::from_str(&percent_encode(&text)) {
        headers.insert("grpc-message", v);
    }
}

/// gRPC's percent-encoding of grpc-message: bytes outside printable ASCII and `%`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())
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

async fn plain_http(endpoints: &EndpointsService, req: Request<Incoming>) -> Response<BoxBody> {
    if req.uri().path() == "/version" {
        return full(StatusCode::OK, "application/json", version_json());
    }
    endpoints.respond(req.method(), req.uri()).await.map(|b| b.map_err(|never| match never {}).boxed_unsync())
}

/// The peer port: the peer gRPC service, and membership and version over plain HTTP as
/// etcd's peer handler serves them.
#[derive(Clone)]
pub struct PeerMux {
    pub grpc: tonic::service::Routes,
    pub server: Arc<EtcdServer>,
}

impl Service<Request<Incoming>> for PeerMux {
    type Response = Response<BoxBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        if is_grpc(&req) {
            let mut grpc = self.grpc.clone();
            return Box::pin(async move {
                let resp = tower::Service::call(&mut grpc, req).await?;
                Ok(resp.map(|b| b.map_err(|s| Box::new(s) as BoxError).boxed_unsync()))
            });
        }
        let server = self.server.clone();
        Box::pin(async move {
            Ok(match req.uri().path() {
                "/version" => full(StatusCode::OK, "application/json", version_json()),
                "/members" => full(StatusCode::OK, "application/json", members_json(&server)),
                _ => full(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "404 page not found\n"),
            })
        })
    }
}

fn is_grpc<B>(req: &Request<B>) -> bool {
    req.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn members_json(server: &EtcdServer) -> String {
    let list = |v: &[String]| v.iter().map(|s| json_str(s)).collect::<Vec<_>>().join(",");
    let members: Vec<String> = server
        .members
        .list()
        .iter()
        .map(|m| {
            format!(
                r#"{{"id":"{:x}","name":{},"peerURLs":[{}],"clientURLs":[{}]}}"#,
                m.id,
                json_str(&m.name),
                list(&m.peer_ur_ls),
                list(&m.client_ur_ls)
            )
        })
        .collect();
    format!("[{}]", members.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversized_messages_are_reported_as_grpc_go_does() {
        let mut h = http::HeaderMap::new();
        h.insert("grpc-status", http::HeaderValue::from_static("11"));
        h.insert(
            "grpc-message",
            http::HeaderValue::from_static(
                "Error, decoded message length too large: found 3145739 bytes, the limit is: 2097152 bytes",
            ),
        );
        grpc_message_limit_status(&mut h);
        assert_eq!(h["grpc-status"], "8");
        assert_eq!(h["grpc-message"], "grpc: received message larger than max (3145739 vs. 2097152)");
        let mut other = http::HeaderMap::new();
        other.insert("grpc-status", http::HeaderValue::from_static("11"));
        other.insert(
            "grpc-message",
            http::HeaderValue::from_static("etcdserver: mvcc: required revision is a future revision"),
        );
        grpc_message_limit_status(&mut other);
        assert_eq!(other["grpc-status"], "11");
    }
}
