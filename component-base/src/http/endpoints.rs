//! `/metrics` and the health endpoints (`/healthz`, `/livez`, `/readyz`, etcd's
//! `/health`), answered in the formats that kubelet probes, Prometheus and the
//! upstream tools expect.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::Full;
use hyper::service::Service;

use crate::metrics::{self, Registry};

/// The outcome of one health check: `Err` carries the reason it failed.
pub type CheckResult = Result<(), String>;

type CheckFuture = Pin<Box<dyn Future<Output = CheckResult> + Send>>;
type Check = Arc<dyn Fn(&Uri) -> CheckFuture + Send + Sync>;

/// How a health endpoint reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthFormat {
    /// Kubernetes' `/healthz`, `/livez`, `/readyz`: `200` with `ok`, or `500`
    /// listing `[+]name ok` / `[-]name failed: reason withheld` (the reason
    /// goes to the log, not to anonymous probers). `?verbose` lists the checks
    /// on success too, and `?exclude=name` skips a check.
    Kubernetes,
    /// etcd's `/health`: `{"health":"true","reason":""}` with `200`, or
    /// `"false"` and the first failure's reason with `503`.
    EtcdJson,
}

/// A named check on one path.
#[derive(Clone)]
struct NamedCheck {
    name: String,
    check: Check,
}

#[derive(Clone)]
enum Route {
    Metrics(Registry),
    Health { format: HealthFormat, checks: Vec<NamedCheck> },
}

/// Builds the set of observability endpoints a component serves.
///
/// ```
/// # use component_base::http::{Endpoints, HealthFormat};
/// # use component_base::metrics::Registry;
/// let service = Endpoints::new()
///     .metrics("/metrics", Registry::with_process_metrics())
///     .health("/health", HealthFormat::EtcdJson, "etcd", |_| async { Ok(()) })
///     .health("/livez", HealthFormat::Kubernetes, "ping", |_| async { Ok(()) })
///     .into_service();
/// assert!(service.handles("/livez"));
/// ```
#[derive(Clone, Default)]
pub struct Endpoints {
    routes: HashMap<String, Route>,
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints").field("paths", &self.routes.keys().collect::<Vec<_>>()).finish()
    }
}

impl Endpoints {
    /// No endpoints yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `registry` in the Prometheus text format at `path`.
    pub fn metrics(mut self, path: &str, registry: Registry) -> Self {
        self.routes.insert(path.to_owned(), Route::Metrics(registry));
        self
    }

    /// Adds the check `name` to the health endpoint at `path`, creating it with
    /// `format` if it is new (a later format for the same path replaces it).
    ///
    /// `check` gets the request URI (for query parameters such as etcd's
    /// `serializable`) and runs on every probe; bound its time yourself if it
    /// can block, since probes have short timeouts.
    pub fn health<F, Fut>(mut self, path: &str, format: HealthFormat, name: &str, check: F) -> Self
    where
        F: Fn(&Uri) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = CheckResult> + Send + 'static,
    {
        let check: Check = Arc::new(move |uri| Box::pin(check(uri)));
        let named = NamedCheck { name: name.to_owned(), check };
        let route = self
            .routes
            .entry(path.to_owned())
            .or_insert_with(|| Route::Health { format, checks: Vec::new() });
        match route {
            Route::Health { format: existing, checks } => {
                *existing = format;
                checks.push(named);
            }
            Route::Metrics(_) => *route = Route::Health { format, checks: vec![named] },
        }
        self
    }

    /// The endpoints as a cloneable hyper service, ready for [`serve`](super::serve).
    pub fn into_service(self) -> EndpointsService {
        EndpointsService { routes: Arc::new(self.routes) }
    }
}

/// The endpoints as a hyper service; unknown paths get `404`.
///
/// A caller multiplexing them with other handlers on one port asks
/// [`handles`](Self::handles) first and then [`respond`](Self::respond)s.
#[derive(Clone)]
pub struct EndpointsService {
    routes: Arc<HashMap<String, Route>>,
}

impl std::fmt::Debug for EndpointsService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointsService").field("paths", &self.routes.keys().collect::<Vec<_>>()).finish()
    }
}

impl EndpointsService {
    /// Whether `path` is one of the endpoints.
    pub fn handles(&self, path: &str) -> bool {
        self.routes.contains_key(path)
    }

    /// The response to `method` on `uri`.
    pub async fn respond(&self, method: &Method, uri: &Uri) -> Response<Full<Bytes>> {
        let Some(route) = self.routes.get(uri.path()) else {
            return text(StatusCode::NOT_FOUND, "404 page not found\n");
        };
        if method != Method::GET && method != Method::HEAD {
            let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
            response.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            return response;
        }
        match route {
            Route::Metrics(registry) => match metrics::encode_text(registry) {
                Ok(body) => with_type(StatusCode::OK, metrics::CONTENT_TYPE, body),
                Err(err) => {
                    tracing::warn!(%err, "encoding /metrics failed");
                    text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{err}\n"))
                }
            },
            Route::Health { format, checks } => {
                let results = run_checks(checks, uri).await;
                match format {
                    HealthFormat::Kubernetes => kubernetes_health(uri, &results),
                    HealthFormat::EtcdJson => etcd_health(&results),
                }
            }
        }
    }
}

impl<B> Service<Request<B>> for EndpointsService {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: Request<B>) -> Self::Future {
        let this = self.clone();
        // The body is never read: none of these endpoints takes one.
        let (parts, _) = request.into_parts();
        Box::pin(async move { Ok(this.respond(&parts.method, &parts.uri).await) })
    }
}

/// Runs the checks not excluded by `?exclude=name`, one after another (they
/// are few and cheap; running them in order keeps the output stable).
async fn run_checks<'c>(checks: &'c [NamedCheck], uri: &Uri) -> Vec<(&'c str, CheckResult)> {
    let excluded: Vec<&str> = query_values(uri, "exclude").collect();
    let mut results = Vec::with_capacity(checks.len());
    for named in checks {
        if excluded.contains(&named.name.as_str()) {
            continue;
        }
        let result = (named.check)(uri).await;
        if let Err(reason) = &result {
            tracing::info!(check = %named.name, path = uri.path(), %reason, "health check failed");
        }
        results.push((named.name.as_str(), result));
    }
    results
}

fn kubernetes_health(uri: &Uri, results: &[(&str, CheckResult)]) -> Response<Full<Bytes>> {
    let healthy = results.iter().all(|(_, r)| r.is_ok());
    let verbose = query_values(uri, "verbose").next().is_some();
    if healthy && !verbose {
        return text(StatusCode::OK, "ok");
    }
    let mut body = String::new();
    for (name, result) in results {
        // Writing to a String cannot fail.
        let _ = match result {
            Ok(()) => writeln!(body, "[+]{name} ok"),
            Err(_) => writeln!(body, "[-]{name} failed: reason withheld"),
        };
    }
    let endpoint = uri.path().trim_start_matches('/');
    let outcome = if healthy { "passed" } else { "failed" };
    let _ = writeln!(body, "{endpoint} check {outcome}");
    let status = if healthy { StatusCode::OK } else { StatusCode::INTERNAL_SERVER_ERROR };
    text(status, &body)
}

fn etcd_health(results: &[(&str, CheckResult)]) -> Response<Full<Bytes>> {
    let failure = results.iter().find_map(|(_, r)| r.as_ref().err());
    let (status, health, reason) = match failure {
        None => (StatusCode::OK, "true", ""),
        Some(reason) => (StatusCode::SERVICE_UNAVAILABLE, "false", reason.as_str()),
    };
    let body = format!("{{\"health\":\"{health}\",\"reason\":\"{}\"}}", json_escape(reason));
    with_type(status, "application/json", body)
}

/// The values of `key` in the URI's query (`?key=a&key=b`); a bare `key` yields "".
fn query_values<'u>(uri: &'u Uri, key: &'u str) -> impl Iterator<Item = &'u str> + 'u {
    uri.query().unwrap_or_default().split('&').filter_map(move |pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == key).then_some(v)
    })
}

fn json_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    with_type(status, "text/plain; charset=utf-8", body.to_owned())
}

fn with_type(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    response
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    async fn get(service: &EndpointsService, uri: &str) -> (StatusCode, String, String) {
        let uri: Uri = uri.parse().unwrap();
        let response = service.respond(&Method::GET, &uri).await;
        let status = response.status();
        let content_type = response.headers()[CONTENT_TYPE].to_str().unwrap().to_owned();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, content_type, String::from_utf8(body.to_vec()).unwrap())
    }

    fn endpoints(healthy: bool) -> EndpointsService {
        Endpoints::new()
            .metrics("/metrics", Registry::with_process_metrics())
            .health("/health", HealthFormat::EtcdJson, "etcd", move |_| async move {
                if healthy { Ok(()) } else { Err("NOSPACE \"alarm\"".into()) }
            })
            .health("/livez", HealthFormat::Kubernetes, "ping", |_| async { Ok(()) })
            .health("/livez", HealthFormat::Kubernetes, "etcd", move |_| async move {
                if healthy { Ok(()) } else { Err("no leader".into()) }
            })
            .into_service()
    }

    #[tokio::test]
    async fn metrics_are_prometheus_text() {
        let (status, content_type, body) = get(&endpoints(true), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
        assert!(body.contains("process_resident_memory_bytes "), "{body}");
    }

    #[tokio::test]
    async fn etcd_health_json() {
        let (status, content_type, body) = get(&endpoints(true), "/health").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(content_type, "application/json");
        assert_eq!(body, r#"{"health":"true","reason":""}"#);

        let (status, _, body) = get(&endpoints(false), "/health").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, r#"{"health":"false","reason":"NOSPACE \"alarm\""}"#);
    }

    #[tokio::test]
    async fn kubernetes_health_text() {
        assert_eq!(get(&endpoints(true), "/livez").await.2, "ok");
        let (status, _, body) = get(&endpoints(true), "/livez?verbose").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, "[+]ping ok\n[+]etcd ok\nlivez check passed\n");

        let (status, _, body) = get(&endpoints(false), "/livez").await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body, "[+]ping ok\n[-]etcd failed: reason withheld\nlivez check failed\n");
        let (status, _, body) = get(&endpoints(false), "/livez?exclude=etcd").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    }

    #[tokio::test]
    async fn unknown_paths_and_methods() {
        let service = endpoints(true);
        assert!(service.handles("/metrics") && !service.handles("/v3/kv/range"));
        assert_eq!(get(&service, "/nope").await.0, StatusCode::NOT_FOUND);
        let response = service.respond(&Method::POST, &"/health".parse().unwrap()).await;
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(response.headers()[ALLOW], "GET, HEAD");
    }

    #[test]
    fn json_escaping() {
        assert_eq!(json_escape("a\"b\\c\nd\u{1}"), "a\\\"b\\\\c\\nd\\u0001");
    }
}
