//! The subresources served by a kubelet: `pods/log`, `pods/exec`, `pods/attach`,
//! `pods/portforward` and `nodes/proxy` (upstream's `LogREST`, its `rest.Connecter`s and
//! their `*Location` functions in `pkg/registry/core/{pod,node}`).
//!
//! Each reads its options from the query (`PodLogOptions`, `PodExecOptions`, ...), finds
//! the pod's container and node, and the node's kubelet ([`crate::kubelet_client`]):
//!
//! - `pods/log` (GET) streams `GET /containerLogs/<ns>/<pod>/<container>?follow=true&...`
//!   back as `text/plain`; a kubelet error becomes an API error as upstream's
//!   `GenericHttpResponseChecker` words it.
//! - `pods/exec` and `pods/attach` (GET or POST, upgrade required) proxy to
//!   `/exec|attach/<ns>/<pod>/<container>?command=..&input=1&output=1&error=1&tty=1`,
//!   `pods/portforward` to `/portForward/<ns>/<pod>?port=..` ([`crate::proxy`]); WebSocket
//!   clients of the newer protocols through [`crate::stream_translator`].
//! - `nodes/<[scheme:]name[:port]>/proxy/<path>` (any method) proxies to `/<path>` on the
//!   kubelet (or, with another port, that port of the node).
//! - `pods/<[scheme:]name[:port]>/proxy/<path>` and `services/<[scheme:]name[:port]>/proxy/
//!   <path>` proxy to the pod's IP, or to a ready endpoint of the service (a pod of it, the
//!   port by number or name), from the API server itself (no kubelet involved).
//!
//! Authorization saw the subresource with the verb of the method (exec by GET is `get`,
//! by POST `create`, as upstream); connects go through admission as CONNECT with the
//! options object.

use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde_json::{Value, json};

use crate::admission::Operation;
use crate::errors::{ApiError, ApiResult, FieldError};
use crate::handlers::request::RequestInfo;
use crate::handlers::{Api, BoxBody, BoxError};
use crate::kubelet_client::NodeConnection;
use crate::proxy::{self, Location};
use crate::stream_translator;

/// The most of a kubelet's error body read (upstream's `maxReadLength`).
const MAX_ERROR_BODY: usize = 50_000;

/// Serves the request when it is one of these subresources; else hands it back.
pub async fn serve(
    api: &Api,
    info: &RequestInfo,
    req: Request<Incoming>,
) -> Result<ApiResult<Response<BoxBody>>, Request<Incoming>> {
    if !info.group.is_empty() || info.version != "v1" {
        return Err(req);
    }
    let Some(sub) = info.subresource.as_deref() else { return Err(req) };
    let name = info.name.clone().unwrap_or_default();
    Ok(match (info.resource.as_str(), sub, info.namespace.as_deref()) {
        ("pods", "log", Some(ns)) => log(api, ns, &name, info.verb, req).await,
        ("pods", "exec" | "attach" | "portforward", Some(ns)) => {
            stream(api, ns, &name, sub, info.verb, req).await
        }
        ("nodes", "proxy", None) => node_proxy(api, &name, req).await,
        ("pods", "proxy", Some(ns)) => pod_proxy(api, ns, &name, req).await,
        ("services", "proxy", Some(ns)) => service_proxy(api, ns, &name, req).await,
        ("pods", "log" | "exec" | "attach" | "portforward" | "proxy", None)
        | ("services", "proxy", None)
        | ("nodes", "proxy", Some(_)) => Err(ApiError::no_route(req.uri().path())),
        _ => return Err(req),
    })
}

/// The query's pairs in order (`command` and `ports` repeat).
type Pairs = Vec<(String, String)>;

fn pairs_of(req: &Request<Incoming>) -> Pairs {
    req.uri()
        .query()
        .map(|q| url::form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

fn first<'a>(q: &'a Pairs, key: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// A query boolean as upstream converts one: absent is false, `0` and `false` are false,
/// anything else (an empty value too) is true.
fn bool_param(q: &Pairs, key: &str) -> bool {
    first(q, key).is_some_and(crate::handlers::query::go_bool)
}

fn int_param(q: &Pairs, key: &str) -> ApiResult<Option<i64>> {
    first(q, key).map(crate::handlers::query::go_int).transpose()
}

/// `PodLogOptions` from the query.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LogOptions {
    pub container: String,
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub since_seconds: Option<i64>,
    /// RFC 3339, seconds precision, UTC.
    pub since_time: Option<String>,
    pub tail_lines: Option<i64>,
    pub limit_bytes: Option<i64>,
    pub insecure_skip_tls_verify_backend: bool,
}

impl LogOptions {
    pub fn parse(q: &Pairs) -> ApiResult<Self> {
        let since_time = match first(q, "sinceTime").filter(|s| !s.is_empty()) {
            None => None,
            Some(s) => {
                let t: k8s_openapi::jiff::Timestamp = s.parse().map_err(|e| {
                    ApiError::bad_request(format!("parsing time {s:?} as \"2006-01-02T15:04:05Z07:00\": {e}"))
                })?;
                Some(t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
            }
        };
        Ok(LogOptions {
            container: first(q, "container").unwrap_or_default().to_string(),
            follow: bool_param(q, "follow"),
            previous: bool_param(q, "previous"),
            timestamps: bool_param(q, "timestamps"),
            since_seconds: int_param(q, "sinceSeconds")?,
            since_time,
            tail_lines: int_param(q, "tailLines")?,
            limit_bytes: int_param(q, "limitBytes")?,
            insecure_skip_tls_verify_backend: bool_param(q, "insecureSkipTLSVerifyBackend"),
        })
    }

    /// Upstream's `ValidatePodLogOptions`.
    pub fn validate(&self, name: &str) -> ApiResult<()> {
        let mut errs = Vec::new();
        if let Some(n) = self.tail_lines.filter(|n| *n < 0) {
            errs.push(FieldError::invalid("tailLines", n, "must be greater than or equal to 0"));
        }
        if let Some(n) = self.limit_bytes.filter(|n| *n < 1) {
            errs.push(FieldError::invalid("limitBytes", n, "must be greater than 0"));
        }
        match (self.since_seconds, &self.since_time) {
            (Some(_), Some(_)) => errs.push(FieldError::forbidden(
                "",
                "at most one of `sinceTime` or `sinceSeconds` may be specified",
            )),
            (Some(n), None) if n < 1 => {
                errs.push(FieldError::invalid("sinceSeconds", n, "must be greater than 0"))
            }
            _ => {}
        }
        if errs.is_empty() { Ok(()) } else { Err(ApiError::invalid("PodLogOptions", "", name, &errs)) }
    }

    /// The kubelet's query (upstream's `LogLocation`).
    pub fn kubelet_query(&self) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        if self.follow {
            q.append_pair("follow", "true");
        }
        if self.previous {
            q.append_pair("previous", "true");
        }
        if self.timestamps {
            q.append_pair("timestamps", "true");
        }
        if let Some(n) = self.since_seconds {
            q.append_pair("sinceSeconds", &n.to_string());
        }
        if let Some(t) = &self.since_time {
            q.append_pair("sinceTime", t);
        }
        if let Some(n) = self.tail_lines {
            q.append_pair("tailLines", &n.to_string());
        }
        if let Some(n) = self.limit_bytes {
            q.append_pair("limitBytes", &n.to_string());
        }
        sorted_query(q.finish())
    }
}

/// Go's `url.Values.Encode` sorts by key (values keep their order).
fn sorted_query(q: String) -> String {
    let mut parts: Vec<&str> = q.split('&').filter(|p| !p.is_empty()).collect();
    parts.sort_by_key(|p| p.split('=').next().unwrap_or_default().to_string());
    parts.join("&")
}

/// `PodExecOptions`, `PodAttachOptions` (no command) or `PodPortForwardOptions` (ports).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StreamOptions {
    pub container: String,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
    pub command: Vec<String>,
    pub ports: Vec<i32>,
}

impl StreamOptions {
    pub fn parse(sub: &str, q: &Pairs) -> ApiResult<Self> {
        if sub == "portforward" {
            let mut ports = Vec::new();
            for (_, v) in q.iter().filter(|(k, _)| k == "ports") {
                ports.push(v.parse::<i32>().map_err(|_| {
                    ApiError::bad_request(format!("strconv.ParseInt: parsing {v:?}: invalid syntax"))
                })?);
            }
            return Ok(StreamOptions { ports, ..Default::default() });
        }
        Ok(StreamOptions {
            container: first(q, "container").unwrap_or_default().to_string(),
            stdin: bool_param(q, "stdin"),
            // v1 defaulting sets both, whatever the query said (SetDefaults_PodExecOptions).
            stdout: true,
            stderr: true,
            tty: bool_param(q, "tty"),
            command: if sub == "exec" {
                q.iter().filter(|(k, _)| k == "command").map(|(_, v)| v.clone()).collect()
            } else {
                Vec::new()
            },
            ports: Vec::new(),
        })
    }

    /// The options object admission sees.
    fn object(&self, sub: &str) -> Value {
        match sub {
            "portforward" => {
                json!({ "kind": "PodPortForwardOptions", "apiVersion": "v1", "ports": self.ports })
            }
            _ => {
                let kind = if sub == "exec" { "PodExecOptions" } else { "PodAttachOptions" };
                let mut o = json!({
                    "kind": kind, "apiVersion": "v1", "stdin": self.stdin, "stdout": self.stdout,
                    "stderr": self.stderr, "tty": self.tty, "container": self.container,
                });
                if sub == "exec" {
                    o["command"] = json!(self.command);
                }
                o
            }
        }
    }

    /// The kubelet's query (upstream's `streamParams`): `input`, `output`, `error`, `tty`
    /// as `1`, each `command`; `port` joined with commas.
    pub fn kubelet_query(&self) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        if !self.ports.is_empty() {
            let ports: Vec<String> = self.ports.iter().map(i32::to_string).collect();
            q.append_pair("port", &ports.join(","));
            return q.finish();
        }
        for c in &self.command {
            q.append_pair("command", c);
        }
        if self.stderr {
            q.append_pair("error", "1");
        }
        if self.stdin {
            q.append_pair("input", "1");
        }
        if self.stdout {
            q.append_pair("output", "1");
        }
        if self.tty {
            q.append_pair("tty", "1");
        }
        q.finish()
    }
}

/// All container names of a pod in upstream's `VisitContainers` order: init, regular,
/// ephemeral.
fn container_names(pod: &Value) -> Vec<String> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|k| pod["spec"][k].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect()
}

/// The container a request means (upstream's `validateContainer`): the one named, which
/// must exist; else the only one.
pub fn container_for(pod: &Value, requested: &str) -> ApiResult<String> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    if !requested.is_empty() {
        if container_names(pod).iter().any(|c| c == requested) {
            return Ok(requested.to_string());
        }
        return Err(ApiError::bad_request(format!("container {requested} is not valid for pod {name}")));
    }
    let regular = pod["spec"]["containers"].as_array().cloned().unwrap_or_default();
    match regular.as_slice() {
        [only] => Ok(only["name"].as_str().unwrap_or_default().to_string()),
        [] => Err(ApiError::bad_request(format!("a container name must be specified for pod {name}"))),
        _ => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            container_names(pod).join(" ")
        ))),
    }
}

async fn node_connection(api: &Api, node: &str) -> ApiResult<(Value, NodeConnection)> {
    let node = api.registry.core("nodes").get(None, node, None).await?;
    let conn = api.kubelet.connection(&node)?;
    Ok((node, conn))
}

async fn admit_connect(
    api: &Api,
    resource: &str,
    sub: &str,
    ns: Option<&str>,
    name: &str,
    options: Value,
) -> ApiResult<()> {
    let store = api.registry.core(resource);
    crate::admission::run(
        &store.res.info,
        Operation::Connect,
        Some(sub),
        ns,
        name,
        Some(options),
        None,
        false,
    )
    .await
    .map(|_| ())
}

fn text_response(status: StatusCode, body: BoxBody) -> Response<BoxBody> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain"));
    r
}

/// `GET pods/<name>/log`.
async fn log(
    api: &Api,
    ns: &str,
    name: &str,
    verb: &str,
    mut req: Request<Incoming>,
) -> ApiResult<Response<BoxBody>> {
    if verb != "get" {
        return Err(ApiError::method_not_allowed(format!("{verb} is not supported on pods/log")));
    }
    let opts = LogOptions::parse(&pairs_of(&req))?;
    opts.validate(name)?;
    let pod = api.registry.core("pods").get(Some(ns), name, None).await?;
    let container = container_for(&pod, &opts.container)?;
    let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) else {
        // Not scheduled yet: no logs, and no error (upstream's empty location).
        let empty = Full::new(bytes::Bytes::new()).map_err(|never| match never {}).boxed_unsync();
        return Ok(text_response(StatusCode::OK, empty));
    };
    let (_, conn) = node_connection(api, node).await?;
    let mut path = format!("/containerLogs/{ns}/{name}/{container}");
    let query = opts.kubelet_query();
    if !query.is_empty() {
        path = format!("{path}?{query}");
    }
    let loc = Location {
        tls: Some(api.kubelet.tls(opts.insecure_skip_tls_verify_backend)),
        hosts: conn.hosts,
        port: conn.port,
        path_and_query: path,
        server_name: None,
    };
    let failed = |e: String| ApiError::new(500, "", format!("Get \"{}\": {e}", loc.url()));
    let (io, authority) = proxy::dial(&loc, api.kubelet.timeout).await.map_err(failed)?;
    let out = Request::builder()
        .method(Method::GET)
        .uri(loc.path_and_query.as_str())
        .header(header::HOST, authority)
        .header(header::USER_AGENT, "kube-apiserver")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let resp = proxy::send(io, out).await.map_err(failed)?;
    let status = resp.status();
    if !(200..=206).contains(&status.as_u16()) {
        let body = Limited::new(resp.into_body(), MAX_ERROR_BODY).collect().await.map(|b| b.to_bytes());
        let text = String::from_utf8_lossy(&body.unwrap_or_default()).into_owned();
        return Err(kubelet_error(status.as_u16(), &text, "pods/log", name));
    }
    let body = resp.into_body().map_err(|e| -> BoxError { Box::new(e) }).boxed_unsync();
    if crate::wsstream::is_websocket(req.headers()) {
        return crate::wsstream::serve(&mut req, body);
    }
    Ok(text_response(StatusCode::OK, body))
}

/// A kubelet's error answer to a log request (upstream's `GenericHttpResponseChecker`
/// with `NewGenericServerResponse`).
pub fn kubelet_error(code: u16, body: &str, resource: &str, name: &str) -> ApiError {
    let (reason, message) = match code {
        500 => return ApiError::internal(body),
        400 => return ApiError::bad_request(body),
        409 => ("Conflict", "the server reported a conflict".to_string()),
        404 => ("NotFound", "the server could not find the requested resource".to_string()),
        401 => ("Unauthorized", "the server has asked for the client to provide credentials".to_string()),
        403 => ("Forbidden", body.to_string()),
        405 => ("MethodNotAllowed", "the server does not allow this method on the requested resource".to_string()),
        422 => ("Invalid", "the server rejected our request due to an error in our request".to_string()),
        429 => {
            ("TooManyRequests", "the server has received too many requests and has asked us to try again later".to_string())
        }
        503 => ("ServiceUnavailable", "the server is currently unable to handle the request".to_string()),
        504 => (
            "Timeout",
            "the server was unable to return a response in the time allotted, but may still be processing the request"
                .to_string(),
        ),
        c if c >= 500 => {
            ("InternalError", format!("an error on the server ({body:?}) has prevented the request from succeeding"))
        }
        c => ("", format!("the server responded with the status code {c} but did not return more information")),
    };
    let mut e = ApiError::new(code, reason, format!("{message} ( {resource} {name})"));
    e.details = Some(json!({ "name": name, "kind": resource, "causes": [{ "message": body }] }));
    e
}

/// `pods/<name>/exec`, `attach`, `portforward`: GET or POST with an upgrade.
async fn stream(
    api: &Api,
    ns: &str,
    name: &str,
    sub: &str,
    verb: &str,
    req: Request<Incoming>,
) -> ApiResult<Response<BoxBody>> {
    if !matches!(verb, "get" | "create") {
        return Err(ApiError::method_not_allowed(format!("{verb} is not supported on pods/{sub}")));
    }
    let opts = StreamOptions::parse(sub, &pairs_of(&req))?;
    admit_connect(api, "pods", sub, Some(ns), name, opts.object(sub)).await?;
    let pod = api.registry.core("pods").get(Some(ns), name, None).await?;
    let path = if sub == "portforward" {
        format!("/portForward/{ns}/{name}")
    } else {
        let container = container_for(&pod, &opts.container)?;
        format!("/{sub}/{ns}/{name}/{container}")
    };
    let node = pod["spec"]["nodeName"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::bad_request(format!("pod {name} does not have a host assigned")))?;
    let (_, conn) = node_connection(api, node).await?;
    let query = opts.kubelet_query();
    let loc = Location {
        tls: Some(api.kubelet.tls(false)),
        hosts: conn.hosts,
        port: conn.port,
        path_and_query: if query.is_empty() { path } else { format!("{path}?{query}") },
        server_name: None,
    };
    if let Some(mode) =
        stream_translator::mode(sub, req.headers(), opts.stdin, opts.stdout, opts.stderr, opts.tty)
    {
        return stream_translator::serve(&loc, req, mode, api.kubelet.timeout).await;
    }
    proxy::forward(&loc, req, true, api.kubelet.timeout).await
}

/// Upstream's `SplitSchemeNamePort`: `name`, `name:port` or `scheme:name:port`.
pub fn split_scheme_name_port(id: &str) -> Option<(String, String, String)> {
    let parts: Vec<&str> = id.split(':').collect();
    let (scheme, name, port) = match parts.as_slice() {
        [name] => ("", *name, ""),
        [name, port] => ("", *name, *port),
        [scheme, name, port] => (*scheme, *name, *port),
        _ => return None,
    };
    if name.is_empty() || !matches!(scheme, "" | "http" | "https") {
        return None;
    }
    Some((scheme.to_string(), name.to_string(), port.to_string()))
}

/// Whether the API server may proxy to `ip` (upstream's `IsProxyableIP`): not loopback,
/// link-local or interface-local.
pub fn is_proxyable(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => !(v4.is_loopback() || v4.is_link_local() || v4.is_unspecified()),
        std::net::IpAddr::V6(v6) => {
            let seg = v6.segments()[0];
            let link_local_unicast = (seg & 0xffc0) == 0xfe80;
            let link_local_multicast = (seg & 0xff0f) == 0xff02;
            let interface_local_multicast = (seg & 0xff0f) == 0xff01;
            !(v6.is_loopback()
                || v6.is_unspecified()
                || link_local_unicast
                || link_local_multicast
                || interface_local_multicast)
        }
    }
}

/// The first of `hosts` that resolves, once its addresses were found proxyable.
async fn proxyable_host(hosts: &[String]) -> ApiResult<String> {
    for h in hosts {
        let ips: Vec<std::net::IpAddr> = match h.parse() {
            Ok(ip) => vec![ip],
            Err(_) => match tokio::net::lookup_host((h.as_str(), 0)).await {
                Ok(a) => a.map(|s| s.ip()).collect(),
                Err(_) => continue,
            },
        };
        if ips.is_empty() {
            continue;
        }
        if ips.iter().any(|ip| !is_proxyable(*ip)) {
            return Err(ApiError::bad_request("address not allowed"));
        }
        return Ok(h.clone());
    }
    Err(ApiError::bad_request(format!("no address of {hosts:?} resolves")))
}

/// The methods a proxy subresource forwards.
fn proxy_method(req: &Request<Incoming>, resource: &str) -> ApiResult<()> {
    let method = req.method();
    if matches!(
        *method,
        Method::GET
            | Method::POST
            | Method::PUT
            | Method::PATCH
            | Method::DELETE
            | Method::HEAD
            | Method::OPTIONS
    ) {
        Ok(())
    } else {
        Err(ApiError::method_not_allowed(format!("{method} is not supported on {resource}/proxy")))
    }
}

/// A GET or HEAD of `.../<resource>/<id>/proxy` itself (no trailing slash, so no path to
/// proxy) is redirected to `.../proxy/` with the same query, as upstream's proxy handler does
/// (its `proxyRedirectsforRootPath`; relative links of the proxied page then resolve under
/// the proxy). Other methods go on to the target's root.
fn redirect_for_root_path(req: &Request<Incoming>, resource: &str, id: &str) -> Option<Response<BoxBody>> {
    let path = req.uri().path();
    if !matches!(*req.method(), Method::GET | Method::HEAD)
        || !path.ends_with(&format!("/{resource}/{id}/proxy"))
    {
        return None;
    }
    let location = match req.uri().query() {
        Some(q) if !q.is_empty() => format!("{path}/?{q}"),
        _ => format!("{path}/"),
    };
    let empty = Full::new(bytes::Bytes::new()).map_err(|never| match never {}).boxed_unsync();
    let mut r = Response::new(empty);
    *r.status_mut() = StatusCode::MOVED_PERMANENTLY;
    if let Ok(v) = http::HeaderValue::from_str(&location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    Some(r)
}

/// `pods/<[scheme:]name[:port]>/proxy/<path>`: to the pod's IP (upstream's pod
/// `ResourceLocation`): the port as given (when none, the first port a container declares,
/// else 80, or 443 for https), https without
/// verifying the pod's certificate, as upstream's proxy transport.
async fn pod_proxy(api: &Api, ns: &str, id: &str, req: Request<Incoming>) -> ApiResult<Response<BoxBody>> {
    proxy_method(&req, "pods")?;
    let rest = proxied_path_of(req.uri().path(), "pods", id);
    let (scheme, name, port) = split_scheme_name_port(id)
        .ok_or_else(|| ApiError::bad_request(format!("invalid pod request {id:?}")))?;
    admit_connect(
        api,
        "pods",
        "proxy",
        Some(ns),
        &name,
        json!({ "kind": "PodProxyOptions", "apiVersion": "v1", "path": rest }),
    )
    .await?;
    if let Some(redirect) = redirect_for_root_path(&req, "pods", id) {
        return Ok(redirect);
    }
    let pod = api.registry.core("pods").get(Some(ns), &name, None).await?;
    let ip =
        pod["status"]["podIPs"][0]["ip"].as_str().or(pod["status"]["podIP"].as_str()).unwrap_or_default();
    if !ip.parse::<std::net::IpAddr>().is_ok_and(is_proxyable) {
        return Err(ApiError::bad_request("address not allowed"));
    }
    // No port given: the first port a container declares, as upstream; else the scheme's.
    let first_declared = || {
        pod["spec"]["containers"].as_array()?.iter().find_map(|c| {
            c["ports"].as_array()?.first()?["containerPort"].as_u64().and_then(|p| u16::try_from(p).ok())
        })
    };
    let port = match port.as_str() {
        "" => first_declared().unwrap_or(if scheme == "https" { 443 } else { 80 }),
        "http" => 80,
        "https" => 443,
        p => p.parse::<u16>().map_err(|_| ApiError::bad_request(format!("invalid pod request {id:?}")))?,
    };
    let loc = Location {
        tls: (scheme == "https").then(|| api.kubelet.tls(true)),
        hosts: vec![ip.to_string()],
        port,
        path_and_query: with_query(rest, req.uri().query()),
        server_name: None,
    };
    forward_rewriting(&loc, req, "pods", id, api.kubelet.timeout).await
}

/// `services/<[scheme:]name[:port]>/proxy/<path>`: to a random address of the service's
/// endpoints that serves the port (upstream's service `ResourceLocation`): a port number
/// is the service port of that number, by its name; an address counts only when it names
/// a pod of the namespace that has that IP.
async fn service_proxy(
    api: &Api,
    ns: &str,
    id: &str,
    req: Request<Incoming>,
) -> ApiResult<Response<BoxBody>> {
    proxy_method(&req, "services")?;
    let rest = proxied_path_of(req.uri().path(), "services", id);
    let (scheme, name, port) = split_scheme_name_port(id)
        .ok_or_else(|| ApiError::bad_request(format!("invalid service request {id:?}")))?;
    admit_connect(
        api,
        "services",
        "proxy",
        Some(ns),
        &name,
        json!({ "kind": "ServiceProxyOptions", "apiVersion": "v1", "path": rest }),
    )
    .await?;
    if let Some(redirect) = redirect_for_root_path(&req, "services", id) {
        return Ok(redirect);
    }
    let mut port_name = port.clone();
    if let Ok(number) = port.parse::<i64>() {
        let svc = api.registry.core("services").get(Some(ns), &name, None).await?;
        let found = svc["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["port"].as_i64() == Some(number));
        match found {
            Some(p) => port_name = p["name"].as_str().unwrap_or_default().to_string(),
            None => {
                return Err(ApiError::unavailable(format!(
                    "no service port {number} found for service {name:?}"
                )));
            }
        }
    }
    let eps = api.registry.core("endpoints").get(Some(ns), &name, None).await?;
    let subsets = eps["subsets"].as_array().cloned().unwrap_or_default();
    if subsets.is_empty() {
        return Err(ApiError::unavailable(format!("no endpoints available for service {name:?}")));
    }
    let pods = api.registry.core("pods");
    let seed = rand::random_range(0..subsets.len());
    for k in 0..subsets.len() {
        let ss = &subsets[(seed + k) % subsets.len()];
        let addresses = ss["addresses"].as_array().cloned().unwrap_or_default();
        if addresses.is_empty() {
            continue;
        }
        for p in ss["ports"].as_array().into_iter().flatten() {
            if p["name"].as_str().unwrap_or_default() != port_name {
                continue;
            }
            let a_seed = rand::random_range(0..addresses.len());
            for t in 0..addresses.len() {
                let addr = &addresses[(a_seed + t) % addresses.len()];
                let ip = addr["ip"].as_str().unwrap_or_default();
                let target = &addr["targetRef"];
                if target["kind"] != "Pod" || target["namespace"].as_str() != Some(ns) {
                    continue;
                }
                let Ok(pod) = pods.get(Some(ns), target["name"].as_str().unwrap_or_default(), None).await
                else {
                    continue;
                };
                let has_ip = pod["status"]["podIPs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|x| x["ip"].as_str() == Some(ip));
                if !has_ip {
                    continue;
                }
                if !ip.parse::<std::net::IpAddr>().is_ok_and(is_proxyable) {
                    return Err(ApiError::bad_request("address not allowed"));
                }
                let loc = Location {
                    tls: (scheme == "https").then(|| api.kubelet.tls(true)),
                    hosts: vec![ip.to_string()],
                    port: p["port"].as_u64().and_then(|x| u16::try_from(x).ok()).unwrap_or(80),
                    path_and_query: with_query(rest, req.uri().query()),
                    server_name: None,
                };
                return forward_rewriting(&loc, req, "services", id, api.kubelet.timeout).await;
            }
        }
    }
    Err(ApiError::unavailable(format!("no endpoints available for service {id:?}")))
}

fn with_query(path: String, query: Option<&str>) -> String {
    match query {
        Some(q) => format!("{path}?{q}"),
        None => path,
    }
}

/// `nodes/<id>/proxy/<path>`: any method, to the kubelet (the node's other ports by
/// plain HTTP or the scheme named, without the kubelet client certificate).
async fn node_proxy(api: &Api, id: &str, req: Request<Incoming>) -> ApiResult<Response<BoxBody>> {
    proxy_method(&req, "nodes")?;
    let rest = proxied_path(req.uri().path(), id);
    admit_connect(
        api,
        "nodes",
        "proxy",
        None,
        id,
        json!({ "kind": "NodeProxyOptions", "apiVersion": "v1", "path": rest }),
    )
    .await?;
    if let Some(redirect) = redirect_for_root_path(&req, "nodes", id) {
        return Ok(redirect);
    }
    let (scheme, name, port) = split_scheme_name_port(id)
        .ok_or_else(|| ApiError::bad_request(format!("invalid node request {id:?}")))?;
    let (_, conn) = node_connection(api, &name).await?;
    let host = proxyable_host(&conn.hosts).await?;
    let mut path_and_query = rest;
    if let Some(q) = req.uri().query() {
        path_and_query = format!("{path_and_query}?{q}");
    }
    let kubelet = port.is_empty() || port == conn.port.to_string();
    let loc = if kubelet {
        Location {
            tls: Some(api.kubelet.tls(false)),
            hosts: vec![host],
            port: conn.port,
            path_and_query,
            server_name: None,
        }
    } else {
        let port: u16 =
            port.parse().map_err(|_| ApiError::bad_request(format!("invalid node request {id:?}")))?;
        let tls = (scheme == "https").then(|| api.kubelet.tls(true));
        Location { tls, hosts: vec![host], port, path_and_query, server_name: None }
    };
    forward_rewriting(&loc, req, "nodes", id, api.kubelet.timeout).await
}

/// Forwards to `loc` and rewrites the answer's links under the proxy prefix
/// (`.../<resource>/<id>/proxy`), as upstream's proxy handlers wrap their transport.
async fn forward_rewriting(
    loc: &Location,
    req: Request<Incoming>,
    resource: &str,
    id: &str,
    timeout: std::time::Duration,
) -> ApiResult<Response<BoxBody>> {
    let path = req.uri().path();
    let marker = format!("/{resource}/{id}/proxy");
    let prefix = path.find(&marker).map(|i| path[..i + marker.len()].to_owned()).unwrap_or_default();
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.to_string()))
        .unwrap_or_default();
    let resp = proxy::forward(loc, req, false, timeout).await?;
    if prefix.is_empty() || resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        return Ok(resp);
    }
    Ok(crate::proxy_rewrite::rewrite_response(resp, &prefix, &host).await)
}

/// The part of `/api/v1/nodes/<id>/proxy/<rest>` after `proxy`, as a path (`/` at least),
/// a trailing slash kept.
fn proxied_path(path: &str, id: &str) -> String {
    proxied_path_of(path, "nodes", id)
}

/// The part of `.../<resource>/<id>/proxy/<rest>` after `proxy` (see [`proxied_path`]).
fn proxied_path_of(path: &str, resource: &str, id: &str) -> String {
    let marker = format!("/{resource}/{id}/proxy");
    let rest = path.find(&marker).map(|i| &path[i + marker.len()..]).unwrap_or_default();
    if rest.starts_with('/') { rest.to_string() } else { format!("/{rest}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(q: &str) -> Pairs {
        url::form_urlencoded::parse(q.as_bytes()).into_owned().collect()
    }

    fn pod(containers: &[&str], init: &[&str]) -> Value {
        let c = |names: &[&str]| names.iter().map(|n| json!({ "name": n, "image": "x" })).collect::<Vec<_>>();
        json!({ "metadata": { "name": "web" }, "spec": { "containers": c(containers), "initContainers": c(init) } })
    }

    #[test]
    fn containers() {
        assert_eq!(container_for(&pod(&["a"], &[]), "").unwrap(), "a");
        assert_eq!(container_for(&pod(&["a", "b"], &["i"]), "i").unwrap(), "i");
        let e = container_for(&pod(&["a", "b"], &[]), "").unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "a container name must be specified for pod web, choose one of: [a b]")
        );
        let e = container_for(&pod(&["a", "b"], &["i"]), "").unwrap_err();
        assert_eq!(e.message, "a container name must be specified for pod web, choose one of: [i a b]");
        let e = container_for(&pod(&["a"], &[]), "z").unwrap_err();
        assert_eq!(e.message, "container z is not valid for pod web");
        let e = container_for(&pod(&[], &[]), "").unwrap_err();
        assert_eq!(e.message, "a container name must be specified for pod web");
    }

    #[test]
    fn log_options() {
        let o = LogOptions::parse(&pairs(
            "container=c&follow=true&tailLines=10&timestamps&limitBytes=5&previous=false",
        ))
        .unwrap();
        assert_eq!(o.container, "c");
        assert!(o.follow && o.timestamps && !o.previous);
        assert_eq!(o.kubelet_query(), "follow=true&limitBytes=5&tailLines=10&timestamps=true");
        let o = LogOptions::parse(&pairs("sinceTime=2024-05-06T07:08:09.5%2B02:00")).unwrap();
        assert_eq!(o.kubelet_query(), "sinceTime=2024-05-06T05%3A08%3A09Z");
        assert_eq!(LogOptions::parse(&pairs("")).unwrap().kubelet_query(), "");
        assert_eq!(LogOptions::parse(&pairs("tailLines=x")).unwrap_err().code, 400);
        let e = LogOptions::parse(&pairs("tailLines=-1")).unwrap().validate("web").unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                422,
                "PodLogOptions \"web\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0"
            )
        );
        let e =
            LogOptions::parse(&pairs("sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z")).unwrap().validate("w");
        assert!(
            e.unwrap_err().message.contains("at most one of `sinceTime` or `sinceSeconds` may be specified")
        );
        assert!(LogOptions::parse(&pairs("sinceSeconds=0")).unwrap().validate("w").is_err());
        assert!(LogOptions::parse(&pairs("limitBytes=0")).unwrap().validate("w").is_err());
    }

    #[test]
    fn stream_options() {
        // kubectl exec -i -t web -c app -- sh -c 'echo hi'
        let o = StreamOptions::parse(
            "exec",
            &pairs("command=sh&command=-c&command=echo+hi&container=app&stdin=true&stdout=true&tty=true"),
        )
        .unwrap();
        assert_eq!(o.command, ["sh", "-c", "echo hi"]);
        assert_eq!(o.kubelet_query(), "command=sh&command=-c&command=echo+hi&error=1&input=1&output=1&tty=1");
        assert_eq!(o.object("exec")["kind"], "PodExecOptions");
        let o = StreamOptions::parse("attach", &pairs("container=app&stdout=false&command=ignored")).unwrap();
        assert!(o.command.is_empty() && o.stdout && o.stderr && !o.stdin);
        assert_eq!(o.kubelet_query(), "error=1&output=1");
        let o = StreamOptions::parse("portforward", &pairs("ports=8080&ports=53")).unwrap();
        assert_eq!(o.kubelet_query(), "port=8080%2C53");
        assert_eq!(StreamOptions::parse("portforward", &pairs("")).unwrap().kubelet_query(), "");
        assert_eq!(StreamOptions::parse("portforward", &pairs("ports=http")).unwrap_err().code, 400);
    }

    #[test]
    fn kubelet_errors() {
        let e = kubelet_error(404, "pod not found", "pods/log", "web");
        assert_eq!((e.code, e.reason), (404, "NotFound"));
        assert_eq!(e.message, "the server could not find the requested resource ( pods/log web)");
        let e = kubelet_error(
            403,
            "Forbidden (user=x, verb=get, resource=nodes, subresource=proxy)",
            "pods/log",
            "web",
        );
        assert_eq!(
            e.message,
            "Forbidden (user=x, verb=get, resource=nodes, subresource=proxy) ( pods/log web)"
        );
        let e = kubelet_error(400, "container \"c\" in pod \"web\" is waiting to start", "pods/log", "web");
        assert_eq!((e.code, e.message.as_str()), (400, "container \"c\" in pod \"web\" is waiting to start"));
        assert_eq!(kubelet_error(500, "boom", "pods/log", "w").message, "Internal error occurred: boom");
    }

    #[test]
    fn node_ids_and_paths() {
        assert_eq!(split_scheme_name_port("n1"), Some(("".into(), "n1".into(), "".into())));
        assert_eq!(split_scheme_name_port("n1:10255"), Some(("".into(), "n1".into(), "10255".into())));
        assert_eq!(split_scheme_name_port("https:n1:443"), Some(("https".into(), "n1".into(), "443".into())));
        assert_eq!(split_scheme_name_port("ftp:n1:21"), None);
        assert_eq!(split_scheme_name_port("a:b:c:d"), None);
        assert_eq!(proxied_path("/api/v1/nodes/n1/proxy/metrics/cadvisor", "n1"), "/metrics/cadvisor");
        assert_eq!(proxied_path("/api/v1/nodes/n1/proxy", "n1"), "/");
        assert_eq!(proxied_path("/api/v1/nodes/n1/proxy/logs/", "n1"), "/logs/");
        assert!(!is_proxyable("127.0.0.5".parse().unwrap()));
        assert!(!is_proxyable("169.254.1.1".parse().unwrap()));
        assert!(!is_proxyable("fe80::1".parse().unwrap()));
        assert!(is_proxyable("10.1.2.3".parse().unwrap()));
    }
}
