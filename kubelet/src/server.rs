//! The kubelet's HTTP endpoints. On `port` (10250, HTTPS): `/healthz`, `/pods`, `/metrics`,
//! `/metrics/probes`, `/containerLogs/<ns>/<pod>/<container>`, each behind upstream's
//! authentication (x509 client certificates from `clientCAFile`, bearer tokens checked with
//! a TokenReview, anonymous only when enabled) and authorization (a SubjectAccessReview on
//! `nodes/<subresource>` of this node, or AlwaysAllow). On `healthzPort` (10248, plain HTTP
//! on `healthzBindAddress`): `/healthz`.
//!
//! `/exec`, `/attach` and `/portForward` are served by [`crate::streaming`]. Not served:
//! `/stats/summary`, `/run`, `/logs`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use component_base::http::{ConnectionInfo, ServeOptions, serve};
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use tokio::io::{AsyncBufReadExt, AsyncSeekExt};

use crate::{Kubelet, cri};

type Body = BoxBody<Bytes, Infallible>;

fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(body.into()).boxed())
        .expect("static response parts")
}

fn text(status: StatusCode, body: &str) -> Response<Body> {
    full(status, "text/plain; charset=utf-8", body.to_string())
}

/// Binds both ports; serving continues in the background until shutdown.
pub async fn start(k: Arc<Kubelet>) -> Result<(), String> {
    let c = k.config().clone();
    let healthz_ip: IpAddr =
        c.healthz_bind_address.parse().map_err(|e| format!("healthzBindAddress: {e}"))?;
    if c.healthz_port != 0 {
        let addr = SocketAddr::new(healthz_ip, c.healthz_port);
        let listener =
            tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("listening on {addr}: {e}"))?;
        let svc = hyper::service::service_fn(|req: Request<Incoming>| async move {
            Ok::<_, Infallible>(match req.uri().path() {
                "/healthz" => text(StatusCode::OK, "ok"),
                _ => text(StatusCode::NOT_FOUND, "404 page not found\n"),
            })
        });
        tokio::spawn(serve(listener, None, svc, k.shutdown.clone(), ServeOptions::default()));
    }
    if c.port == 0 {
        return Ok(());
    }
    let address: IpAddr = c.address.parse().map_err(|e| format!("address: {e}"))?;
    let tls_files = c.tls_cert_file.clone().zip(c.tls_private_key_file.clone());
    let (cert, key) = component_base::tls::self_signed::serving_files(
        tls_files.as_ref(),
        &k.opts.cert_dir,
        "kubelet",
        address,
    )?;
    let tls = component_base::tls::server_config(
        &cert,
        &key,
        c.authentication.x509.client_ca_file.as_deref(),
        false,
        &[b"h2", b"http/1.1"],
    )
    .map_err(|e| e.to_string())?;
    let addr = SocketAddr::new(address, c.port);
    let listener =
        tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("listening on {addr}: {e}"))?;
    let kk = k.clone();
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let k = kk.clone();
        async move { Ok::<_, Infallible>(handle(k, req).await) }
    });
    tokio::spawn(serve(listener, Some(tls), svc, k.shutdown.clone(), ServeOptions::default()));
    tracing::info!(%addr, "serving the kubelet API");
    Ok(())
}

/// A caller that passed authentication.
#[derive(Debug)]
struct User {
    name: String,
    groups: Vec<String>,
    uid: String,
}

async fn authenticate(k: &Kubelet, req: &Request<Incoming>) -> Result<User, Response<Body>> {
    let unauthorized = || text(StatusCode::UNAUTHORIZED, "Unauthorized");
    if let Some(chain) = req.extensions().get::<ConnectionInfo>().and_then(|c| c.client_certificates.clone())
    {
        if let Some(leaf) = chain.first() {
            let (_, cert) = x509_parser::parse_x509_certificate(leaf).map_err(|_| unauthorized())?;
            let subject = cert.subject();
            let name =
                subject.iter_common_name().next().and_then(|c| c.as_str().ok()).unwrap_or("").to_string();
            let groups =
                subject.iter_organization().filter_map(|o| o.as_str().ok().map(String::from)).collect();
            return Ok(User { name, groups, uid: String::new() });
        }
    }
    let token = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty());
    if let Some(token) = token {
        let (Some(client), true) = (&k.client, k.config().authentication.webhook.enabled) else {
            return Err(unauthorized());
        };
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_string()), audiences: None },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(client.clone());
        let resp = api.create(&PostParams::default(), &review).await.map_err(|e| {
            tracing::warn!(err = %e, "TokenReview");
            unauthorized()
        })?;
        let status = resp.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Err(unauthorized());
        }
        let u = status.user.unwrap_or_default();
        return Ok(User {
            name: u.username.unwrap_or_default(),
            groups: u.groups.unwrap_or_default(),
            uid: u.uid.unwrap_or_default(),
        });
    }
    if k.config().authentication.anonymous.enabled {
        return Ok(User {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            uid: String::new(),
        });
    }
    Err(unauthorized())
}

/// Upstream's mapping of paths to `nodes` subresources.
fn subresource(path: &str) -> &'static str {
    if path.starts_with("/stats") {
        "stats"
    } else if path.starts_with("/metrics") {
        "metrics"
    } else if path.starts_with("/logs") {
        "log"
    } else if path.starts_with("/spec") {
        "spec"
    } else {
        "proxy"
    }
}

async fn authorize(k: &Kubelet, user: &User, req: &Request<Incoming>) -> Result<(), Response<Body>> {
    if k.config().authorization.mode == "AlwaysAllow" {
        return Ok(());
    }
    let verb = match *req.method() {
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "get",
    };
    let sub = subresource(req.uri().path());
    let forbidden = || {
        text(
            StatusCode::FORBIDDEN,
            &format!("Forbidden (user={}, verb={verb}, resource=nodes, subresource={sub})", user.name),
        )
    };
    let Some(client) = &k.client else { return Err(forbidden()) };
    let sar = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            groups: Some(user.groups.clone()),
            uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                resource: Some("nodes".into()),
                subresource: Some(sub.into()),
                name: Some(k.opts.node_name.clone()),
                version: Some("v1".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    match api.create(&PostParams::default(), &sar).await {
        Ok(r) if r.status.as_ref().is_some_and(|s| s.allowed) => Ok(()),
        Ok(_) => Err(forbidden()),
        Err(err) => {
            tracing::warn!(%err, "SubjectAccessReview");
            Err(forbidden())
        }
    }
}

async fn handle(k: Arc<Kubelet>, req: Request<Incoming>) -> Response<Body> {
    let user = match authenticate(&k, &req).await {
        Ok(u) => u,
        Err(resp) => return resp,
    };
    if let Err(resp) = authorize(&k, &user, &req).await {
        return resp;
    }
    let path = req.uri().path().to_string();
    let query: HashMap<String, String> =
        req.uri().query().map(|q| url_pairs(q).collect()).unwrap_or_default();
    match path.as_str() {
        "/healthz" => text(StatusCode::OK, "ok"),
        "/pods" | "/pods/" => pods(&k),
        "/metrics" => metrics(&k.metrics.registry),
        "/metrics/probes" => metrics(&k.metrics.probes),
        "/stats/summary" | "/stats/summary/" => {
            let only = query.get("only_cpu_and_memory").is_some_and(|v| v == "true");
            match crate::stats::summary(&k, only).await {
                Ok(v) => full(StatusCode::OK, "application/json", serde_json::to_vec(&v).unwrap_or_default()),
                Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &format!("Internal Error: {e}")),
            }
        }
        p if p.starts_with("/containerLogs/") => {
            let parts: Vec<&str> = p.trim_start_matches("/containerLogs/").split('/').collect();
            match parts.as_slice() {
                [ns, pod, container] => container_logs(&k, ns, pod, container, &query).await,
                _ => {
                    text(StatusCode::BAD_REQUEST, "path must be /containerLogs/<namespace>/<pod>/<container>")
                }
            }
        }
        _ => crate::streaming::handle(k.clone(), req)
            .await
            .unwrap_or_else(|| text(StatusCode::NOT_FOUND, "404 page not found\n")),
    }
}

fn url_pairs(q: &str) -> impl Iterator<Item = (String, String)> + '_ {
    q.split('&').filter(|p| !p.is_empty()).map(|p| {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        (k.to_string(), v.to_string())
    })
}

fn metrics(registry: &component_base::metrics::Registry) -> Response<Body> {
    match registry.encode_text() {
        Ok(body) => full(StatusCode::OK, component_base::metrics::CONTENT_TYPE, body),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// The pods this kubelet runs, with the status it last computed, as a `PodList`.
fn pods(k: &Kubelet) -> Response<Body> {
    let statuses = k.statuses.lock().clone();
    let items: Vec<Pod> = k
        .pods
        .pods()
        .into_iter()
        .map(|(mut p, _)| {
            if let Some(s) = p.metadata.uid.as_ref().and_then(|u| statuses.get(u)) {
                p.status = Some(s.clone());
            }
            p
        })
        .collect();
    let v = serde_json::json!({ "kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items });
    full(StatusCode::OK, "application/json", serde_json::to_vec(&v).unwrap_or_default())
}

/// Options of a log request, as upstream's `PodLogOptions`.
struct LogOptions {
    follow: bool,
    previous: bool,
    timestamps: bool,
    tail: Option<usize>,
    since: Option<i64>,
    limit_bytes: Option<usize>,
}

async fn container_logs(
    k: &Kubelet,
    ns: &str,
    pod_name: &str,
    container: &str,
    q: &HashMap<String, String>,
) -> Response<Body> {
    let flag = |name: &str| q.get(name).is_some_and(|v| v == "true" || v == "1" || v.is_empty());
    let opts = LogOptions {
        follow: flag("follow"),
        previous: flag("previous"),
        timestamps: flag("timestamps"),
        tail: q.get("tailLines").and_then(|v| v.parse().ok()),
        since: q.get("sinceSeconds").and_then(|v| v.parse().ok()),
        limit_bytes: q.get("limitBytes").and_then(|v| v.parse().ok()),
    };
    let Some((pod, _)) = k.pods.pods().into_iter().find(|(p, _)| {
        p.metadata.namespace.as_deref() == Some(ns) && p.metadata.name.as_deref() == Some(pod_name)
    }) else {
        return text(
            StatusCode::NOT_FOUND,
            &format!("pod \"{pod_name}\" in namespace \"{ns}\" is not known to this kubelet"),
        );
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let containers = match k.runtime.list_containers().await {
        Ok(c) => c,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    let mut mine: Vec<&cri::Container> = containers
        .iter()
        .filter(|c| {
            c.labels.get(cri::POD_UID_LABEL) == Some(&uid)
                && c.labels.get(cri::CONTAINER_NAME_LABEL).map(String::as_str) == Some(container)
        })
        .collect();
    mine.sort_by_key(|c| {
        (
            c.annotations.get(cri::CONTAINER_RESTART_COUNT_ANNOTATION).and_then(|v| v.parse::<u32>().ok()),
            c.created_at,
        )
    });
    let pick = if opts.previous { mine.len().checked_sub(2).map(|i| mine[i]) } else { mine.last().copied() };
    let Some(c) = pick else {
        let msg = if opts.previous {
            format!("previous terminated container \"{container}\" in pod \"{pod_name}\" not found")
        } else {
            format!("container \"{container}\" in pod \"{pod_name}\" is waiting to start")
        };
        return text(StatusCode::BAD_REQUEST, &msg);
    };
    let status = match k.runtime.container_status(&c.id).await {
        Ok(s) => s,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(16);
    let runtime = k.runtime.clone();
    let id = c.id.clone();
    tokio::spawn(stream_log(status.log_path.clone(), opts, runtime, id, tx));
    let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/plain")
        .body(BodyExt::boxed(body))
        .expect("static response parts")
}

/// Sends the CRI log file's content (`<RFC3339Nano> <stream> <P|F> <text>` lines) as plain
/// text, joining partial lines; with `follow`, keeps reading until the container has
/// exited and the file stops growing, or the client goes away.
/// Sends `text`, cut so that no more than `limit` bytes go out in all (`limitBytes`, which
/// upstream applies to the bytes, not to whole lines). False once the limit is reached or
/// the client is gone: the stream ends.
async fn send_limited(
    tx: &tokio::sync::mpsc::Sender<Result<Frame<Bytes>, Infallible>>,
    sent: &mut usize,
    limit: Option<usize>,
    text: String,
) -> bool {
    let mut bytes = Bytes::from(text);
    if let Some(limit) = limit {
        let left = limit.saturating_sub(*sent);
        if bytes.len() > left {
            bytes.truncate(left);
        }
    }
    *sent += bytes.len();
    if !bytes.is_empty() && tx.send(Ok(Frame::data(bytes))).await.is_err() {
        return false;
    }
    limit.is_none_or(|l| *sent < l)
}

async fn stream_log(
    path: String,
    opts: LogOptions,
    runtime: cri::Runtime,
    id: String,
    tx: tokio::sync::mpsc::Sender<Result<Frame<Bytes>, Infallible>>,
) {
    let Ok(file) = tokio::fs::File::open(&path).await else {
        let _ = tx.send(Ok(Frame::data(Bytes::from(format!("failed to open log file {path}\n"))))).await;
        return;
    };
    let since = opts
        .since
        .map(|s| k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(s));
    let mut reader = tokio::io::BufReader::new(file);
    let mut sent = 0usize;
    let render = |line: &str| -> Option<String> {
        let mut parts = line.splitn(4, ' ');
        let (ts, _stream, tag, content) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next().unwrap_or(""));
        if let Some(since) = since {
            if ts.parse::<k8s_openapi::jiff::Timestamp>().is_ok_and(|t| t < since) {
                return None;
            }
        }
        let mut out = if opts.timestamps { format!("{ts} {content}") } else { content.to_string() };
        if tag == "F" {
            out.push('\n');
        }
        Some(out)
    };
    // The existing content first, cut to tailLines.
    let mut lines = Vec::new();
    let mut line = String::new();
    while reader.read_line(&mut line).await.unwrap_or(0) > 0 {
        if line.ends_with('\n') {
            if let Some(r) = render(line.trim_end_matches('\n')) {
                lines.push(r);
            }
            line.clear();
        } else {
            break;
        }
    }
    if let Some(t) = opts.tail {
        let skip = lines.len().saturating_sub(t);
        lines.drain(..skip);
    }
    for l in lines {
        if !send_limited(&tx, &mut sent, opts.limit_bytes, l).await {
            return;
        }
    }
    if !opts.follow {
        return;
    }
    let mut idle_after_exit = 0;
    loop {
        let n = reader.read_line(&mut line).await.unwrap_or(0);
        if n > 0 && line.ends_with('\n') {
            if let Some(r) = render(line.trim_end_matches('\n')) {
                if !send_limited(&tx, &mut sent, opts.limit_bytes, r).await {
                    return;
                }
            }
            line.clear();
            continue;
        }
        if tx.is_closed() {
            return;
        }
        let running = matches!(runtime.container_status(&id).await, Ok(s) if s.state == cri::ContainerState::ContainerRunning as i32);
        if !running {
            idle_after_exit += 1;
            if idle_after_exit > 2 {
                return;
            }
        }
        // A rotated or truncated file: start over from its beginning.
        if let Ok(meta) = tokio::fs::metadata(&path).await {
            if let Ok(pos) = reader.stream_position().await {
                if meta.len() < pos {
                    let _ = reader.seek(std::io::SeekFrom::Start(0)).await;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
