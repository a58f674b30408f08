//! The HTTP front of the API server: authentication, in-flight limits, routing to
//! discovery, OpenAPI, health and the resource endpoints, and the resource verbs
//! themselves (upstream's `endpoints/handlers`).

pub mod codec;
pub mod query;
pub mod request;
pub mod subresources;
pub mod virtual_resources;
pub mod watch;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited, combinators::UnsyncBoxBody};
use hyper::body::Incoming;
use hyper::service::Service;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::cacher::Filter;
use crate::errors::{ApiError, ApiResult, success_status};
use crate::field_validation::FieldValidation;
use crate::openapi::OpenApi;
use crate::patch::Target;
use crate::registry::Registry;
use crate::registry::store::{DeleteOptions, Deleted, ListOptions, Store};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::table::IncludeObject;
use codec::Output;
use request::RequestInfo;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type BoxBody = UnsyncBoxBody<Bytes, BoxError>;

/// Largest request body accepted (upstream's 3 MiB limit).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

pub use query::Query;
use query::{flag, int_param};

pub struct Limits {
    pub readonly: Arc<Semaphore>,
    pub mutating: Arc<Semaphore>,
    pub request_timeout: Duration,
    pub min_request_timeout: Duration,
}

pub struct Api {
    pub registry: Arc<Registry>,
    pub limits: Limits,
    pub authn: crate::authn::Authenticator,
    pub authz: Arc<crate::authz::Chain>,
    pub admission: Arc<crate::admission::Chain>,
    pub metrics: Arc<crate::metrics::Metrics>,
    pub etcd: crate::storage::etcd3::Etcd,
    pub services: Arc<crate::services::Services>,
    pub openapi: Arc<OpenApi>,
    /// `--audit-*`: None when nothing is recorded.
    pub audit: Option<Arc<crate::audit::Auditor>>,
    /// Connections to the kubelets (logs, exec, attach, port-forward, `nodes/proxy`).
    pub kubelet: Arc<crate::kubelet_client::KubeletClient>,
    /// Service account issuer discovery; None when it is not served.
    pub openid: Option<crate::authn::serviceaccount::openid::OpenIdMetadata>,
    /// The extension API servers behind service-backed APIServices.
    pub aggregator: Arc<crate::aggregator::proxy::Aggregator>,
}

/// The user the request was authenticated (and impersonated) as.
fn current_user() -> crate::authn::User {
    crate::context::current().map(|s| s.user.clone()).unwrap_or_default()
}

pub fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<BoxBody> {
    let mut r = Response::new(Full::new(body.into()).map_err(|never| match never {}).boxed_unsync());
    *r.status_mut() = status;
    if let Ok(v) = HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    if content_type.starts_with(codec::JSON) {
        r.extensions_mut().insert(WholeJson);
    }
    r
}

/// Marks a response whose body is one whole JSON document this server serialized (not
/// a watch stream or proxied bytes): the kind upstream pretty-prints.
#[derive(Clone, Copy, Debug)]
struct WholeJson;

/// Upstream's `isPrettyPrint`: a non-empty `pretty` parameter decides (Go's
/// `strconv.ParseBool`, anything unparsable being false); otherwise curl, wget and
/// browsers get pretty JSON.
fn is_pretty_print<B>(req: &Request<B>) -> bool {
    // Parsing the query only when it could hold the parameter keeps this off every
    // other request's path (upstream checks the raw query the same way).
    if req.uri().query().is_some_and(|q| q.contains("pretty"))
        && let Some(v) = query_of(req.uri()).get("pretty").filter(|v| !v.is_empty())
    {
        return matches!(v.as_str(), "1" | "t" | "T" | "TRUE" | "true" | "True");
    }
    let agent = req.headers().get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    ["curl", "Wget", "Mozilla/5.0"].iter().any(|p| agent.starts_with(p))
}

/// Re-indents a serialized JSON response for a client that asked for pretty output.
async fn prettify(resp: Response<BoxBody>) -> Response<BoxBody> {
    if resp.extensions().get::<WholeJson>().is_none() {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    match body.collect().await {
        Ok(collected) => {
            let pretty = crate::serializer::indent(&collected.to_bytes());
            Response::from_parts(
                parts,
                Full::new(Bytes::from(pretty)).map_err(|never| match never {}).boxed_unsync(),
            )
        }
        // A body held in memory cannot fail; if it somehow did, say so.
        Err(e) => error_response(&ApiError::internal(format!("encoding the response: {e}"))),
    }
}

pub fn json_response(status: StatusCode, v: &Value) -> Response<BoxBody> {
    full(status, codec::JSON, crate::serializer::to_vec(v))
}

pub fn error_response(e: &ApiError) -> Response<BoxBody> {
    let mut r = json_response(
        StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &e.to_status(),
    );
    if let Some(s) = e.retry_after {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

fn query_of(uri: &http::Uri) -> Query {
    query::parse(uri.query())
}

/// An object (or list) in the format negotiated.
fn respond(status: StatusCode, v: &Value, output: Output, store: &Store, q: &Query) -> Response<BoxBody> {
    match output {
        Output::Table => {
            let include = IncludeObject::parse(q.get("includeObject").map(String::as_str));
            let t = crate::table::table_of(&store.res, v, include, true);
            json_response(status, &t)
        }
        other => {
            let (ct, body) = codec::encode(v, other);
            full(status, ct, body)
        }
    }
}

/// Finds the fields of a written object its schema lacks, under the request's
/// `fieldValidation` (see [`crate::field_validation`]): an error under `Strict`, else the
/// warnings for [`with_warnings`].
pub async fn check_fields(
    openapi: &OpenApi,
    store: &Store,
    q: &Query,
    obj: &Value,
    body: &[u8],
) -> ApiResult<Vec<String>> {
    let fv = FieldValidation::from_query(q)?;
    if fv == FieldValidation::Ignore {
        return Ok(Vec::new());
    }
    if let Some(unknown) = store.res.hooks.unknown_fields(obj) {
        let info = &store.res.info;
        return fv.check_unknown(info.kind, info.version, unknown, body);
    }
    openapi.rendered().await;
    let info = &store.res.info;
    let meta = openapi.patch_meta(info.group, info.version, info.kind);
    fv.check_body(meta, info.kind, info.version, obj, body)
}

/// The field manager of a write: `fieldManager`, else the client's program name.
pub fn manager_of(q: &Query, headers: &HeaderMap) -> ApiResult<String> {
    crate::fieldmanager::manager_name(
        q.get("fieldManager").map(String::as_str),
        headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()),
    )
}

/// The field manager of a create or update and the schema its fields are judged by, to
/// record the write in `managedFields` (see [`crate::fieldmanager`]).
pub struct FieldsOf<'a> {
    manager: String,
    api_version: String,
    subresource: Option<&'a str>,
    meta: Option<crate::openapi::PatchMeta<'a>>,
}

impl<'a> FieldsOf<'a> {
    pub async fn new(
        openapi: &'a OpenApi,
        store: &'a Store,
        q: &Query,
        headers: &HeaderMap,
        subresource: Option<&'a str>,
    ) -> ApiResult<Self> {
        let info = &store.res.info;
        let manager = manager_of(q, headers)?;
        let meta = match store.res.hooks.patch_meta() {
            Some(m) => Some(m),
            None => {
                openapi.rendered().await;
                openapi.patch_meta(info.group, info.version, info.kind)
            }
        };
        Ok(Self { manager, api_version: info.api_version(), subresource, meta })
    }

    /// Records the write of `obj` over `old` (None: a create).
    pub fn record(&self, old: Option<&Value>, obj: &mut Value) {
        let manager = crate::fieldmanager::Manager {
            name: &self.manager,
            api_version: &self.api_version,
            subresource: self.subresource,
        };
        crate::fieldmanager::record_update(self.meta, old, obj, &manager);
    }
}

/// Adds one `Warning` header per message, as upstream returns field validation warnings.
pub fn with_warnings(mut resp: Response<BoxBody>, warnings: &[String]) -> Response<BoxBody> {
    for w in crate::field_validation::warning_headers(warnings) {
        if let Ok(v) = HeaderValue::from_str(&w) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

fn parse_rv(q: &Query) -> ApiResult<Option<i64>> {
    match q.get("resourceVersion").map(String::as_str) {
        None | Some("") => Ok(None),
        Some(s) => s
            .parse::<i64>()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s}"))),
    }
}

fn filter_of(store: &Store, info: &RequestInfo, q: &Query) -> ApiResult<Filter> {
    let labels = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or_default())?;
    let fields = FieldSelector::parse(
        q.get("fieldSelector").map(String::as_str).unwrap_or_default(),
        store.res.hooks.field_names(),
    )?;
    Ok(Filter {
        namespace: info.namespace.clone().filter(|_| store.res.info.namespaced),
        name: fields.equals("metadata.name").map(str::to_string),
        labels,
        fields,
    })
}

/// Reads and drops what is left of a request body in the background, at most the request
/// limit and for a few seconds. Answering without reading the body makes HTTP/2 reset the
/// stream, and some clients (curl) then throw away the error response already sent.
pub(crate) fn discard_body(body: Incoming) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_secs(5), Limited::new(body, MAX_BODY).collect()).await;
    });
}

fn delete_options(q: &Query, body: &Option<Value>) -> ApiResult<DeleteOptions> {
    let b = body.clone().unwrap_or(json!({}));
    let grace = match int_param(q, "gracePeriodSeconds")? {
        Some(g) => Some(g),
        None => b["gracePeriodSeconds"].as_i64(),
    };
    let orphan_dependents =
        b["orphanDependents"].as_bool().or_else(|| query::bool_param(q, "orphanDependents"));
    let propagation = q
        .get("propagationPolicy")
        .cloned()
        .or_else(|| b["propagationPolicy"].as_str().map(str::to_string))
        .or_else(|| orphan_dependents.filter(|o| *o).map(|_| "Orphan".to_string()));
    if let Some(p) = &propagation
        && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
    {
        return Err(ApiError::bad_request(format!(
            "propagationPolicy {p} is not supported: use Orphan, Background or Foreground"
        )));
    }
    Ok(DeleteOptions {
        grace_period: grace,
        propagation,
        orphan_dependents,
        precondition_uid: b["preconditions"]["uid"].as_str().map(str::to_string),
        precondition_rv: b["preconditions"]["resourceVersion"].as_str().map(str::to_string),
        dry_run: is_dry_run(q, &b),
    })
}

/// A verb the resource does not serve: upstream registers no route for it (405 with the
/// router's message), except a watch, which its list handler refuses by name.
pub(crate) fn unsupported_verb(res: &crate::registry::resource::ResourceInfo, verb: &str) -> ApiError {
    if verb == "watch" {
        let resource = if res.group.is_empty() {
            res.plural.to_string()
        } else {
            format!("{}.{}", res.plural, res.group)
        };
        return ApiError::method_not_allowed(format!(
            "watch is not supported on resources of kind {resource:?}"
        ));
    }
    ApiError::method_not_allowed("the server does not allow this method on the requested resource")
}

fn is_dry_run(q: &Query, body: &Value) -> bool {
    q.get("dryRun").is_some_and(|v| v == "All")
        || body["dryRun"].as_array().is_some_and(|a| a.iter().any(|v| v == "All"))
}

impl Api {
    /// Serves one request: dispatch (inside the request's audit scope, see
    /// [`crate::audit`]), metrics, the audit events of the response, the `Audit-Id` header.
    /// A panicking handler is answered with upstream's 500 instead of taking the
    /// connection down.
    pub async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<BoxBody> {
        use futures::FutureExt;
        let start = Instant::now();
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let audit_id = crate::audit::request_id(req.headers());
        let pretty = is_pretty_print(&req);
        // What auditing needs after `dispatch` consumed the request: the headers and
        // connection, to tell who called the paths served without authentication.
        let audit = self.audit.as_ref().map(|a| {
            let conn = req.extensions().get::<component_base::http::ConnectionInfo>().cloned();
            (a.begin(&req, audit_id.to_str().unwrap_or_default()), req.headers().clone(), conn)
        });
        let run = crate::audit::scope(audit.as_ref().map(|a| a.0.clone()), self.dispatch(req));
        let (resp, labels, failure, panicked) = match std::panic::AssertUnwindSafe(run).catch_unwind().await {
            Ok((Ok(r), labels)) => (r, labels, None, false),
            Ok((Err(e), labels)) => (error_response(&e), labels, Some(e), false),
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!(%method, path, "request panicked: {message}");
                if let Some((a, ..)) = &audit {
                    a.panicked(&message).await;
                }
                let text = "This request caused apiserver to panic. Look in the logs for details.";
                (full(StatusCode::INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8", text), None, None, true)
            }
        };
        if let Some((verb, group, resource, subresource)) = labels {
            self.metrics.observe(
                &verb,
                &group,
                &resource,
                &subresource,
                resp.status().as_u16(),
                start.elapsed(),
            );
        }
        let mut resp = match audit {
            Some((a, headers, conn)) if !panicked => {
                if !a.has_user() && resp.status() != StatusCode::UNAUTHORIZED {
                    // Health and version are served without authentication; they are
                    // audited as whoever presented the credentials (else anonymous).
                    let user = self.authn.authenticate(&headers, conn.as_ref()).unwrap_or_else(|_| {
                        crate::authn::User {
                            name: crate::authn::names::ANONYMOUS.into(),
                            groups: vec![crate::authn::names::ALL_UNAUTHENTICATED.into()],
                            ..Default::default()
                        }
                    });
                    let _ = a.authenticated(&user).await;
                }
                a.finish(resp, failure.as_ref()).await
            }
            _ => resp,
        };
        if pretty {
            resp = prettify(resp).await;
        }
        resp.headers_mut().insert(http::HeaderName::from_static(crate::audit::AUDIT_ID_HEADER), audit_id);
        tracing::debug!(%method, path, status = resp.status().as_u16(), took = ?start.elapsed(), "request");
        resp
    }

    /// Routes a request; also returns the metric labels of resource requests.
    async fn dispatch(
        &self,
        req: Request<Incoming>,
    ) -> (ApiResult<Response<BoxBody>>, Option<(String, String, String, String)>) {
        let path = req.uri().path().to_string();
        // Health and version need no authentication (system:public-info-viewer).
        match path.as_str() {
            "/healthz" | "/livez" | "/readyz" | "/version" => {
                return (self.public_authenticated(&req).await, None);
            }
            p if p.starts_with("/healthz/") || p.starts_with("/livez/") || p.starts_with("/readyz/") => {
                return (self.public_authenticated(&req).await, None);
            }
            _ => {}
        }
        let conn = req.extensions().get::<component_base::http::ConnectionInfo>();
        let user = match self.authn.authenticate(req.headers(), conn) {
            Ok(u) => u,
            Err(e) => {
                discard_body(req.into_body());
                return (Err(e), None);
            }
        };
        // Audit: the policy level follows the authenticated user; RequestReceived is
        // written here (a failed write fails the request only in blocking-strict mode).
        if let Err(e) = crate::audit::authenticated(&user).await {
            discard_body(req.into_body());
            return (Err(e), None);
        }
        let q = query_of(req.uri());
        let info = request::parse(req.method(), &path, flag(&q, "watch"));
        // Impersonation (Impersonate-* headers) replaces `user` here, before authorization.
        let user = match crate::authz::impersonation::impersonate(&self.authz, user, req.headers()).await {
            Ok(u) => u,
            Err(e) => {
                discard_body(req.into_body());
                return (Err(e), None);
            }
        };
        let attrs = crate::authz::attributes(&user, info.as_ref(), req.method(), &path, &q);
        // `Chain::check`, with the decision also given to the audit log.
        let decision = self.authz.authorize(&attrs).await;
        crate::audit::authorized(&attrs.user, &decision);
        if !decision.allowed() {
            discard_body(req.into_body());
            return (Err(crate::authz::forbidden(&attrs, decision.reason())), None);
        }
        let scope = Arc::new(crate::context::RequestScope {
            user,
            admission: Some(self.admission.clone()),
            authorizer: Some(self.authz.clone()),
            warnings: Default::default(),
        });
        let (resp, labels) = crate::context::scope(scope.clone(), self.authorized(info, q, req)).await;
        let warnings = std::mem::take(&mut *scope.warnings.lock());
        let resp = if warnings.is_empty() { resp } else { resp.map(|r| with_warnings(r, &warnings)) };
        (resp, labels)
    }

    /// Serves a request that passed authentication and authorization.
    async fn authorized(
        &self,
        info: Option<RequestInfo>,
        q: Query,
        req: Request<Incoming>,
    ) -> (ApiResult<Response<BoxBody>>, Option<(String, String, String, String)>) {
        let Some(info) = info else {
            return (self.non_resource(req).await, None);
        };
        let labels = Some((
            info.verb.to_uppercase(),
            info.group.clone(),
            info.resource.clone(),
            info.subresource.clone().unwrap_or_default(),
        ));
        // Long-running requests (watches, streams, proxies) are not counted against
        // in-flight limits and have no request timeout.
        let long_running = request::is_long_running(&info);
        let permit = if long_running {
            None
        } else {
            let sem = if matches!(info.verb, "get" | "list") {
                &self.limits.readonly
            } else {
                &self.limits.mutating
            };
            match sem.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    discard_body(req.into_body());
                    return (Err(ApiError::too_many_requests(1)), labels);
                }
            }
        };
        let _inflight = self.metrics.inflight(info.verb);
        let result = if long_running {
            self.resource(info, q, req).await
        } else {
            match tokio::time::timeout(self.limits.request_timeout, self.resource(info, q, req)).await {
                Ok(r) => r,
                Err(_) => Err(ApiError::timeout("request did not complete within the allowed duration")),
            }
        };
        drop(permit);
        (result, labels)
    }

    /// Health and version for anyone the authenticator accepts (anonymous too, when
    /// `--anonymous-auth` allows it): upstream's system:public-info-viewer binding.
    async fn public_authenticated(&self, req: &Request<Incoming>) -> ApiResult<Response<BoxBody>> {
        let conn = req.extensions().get::<component_base::http::ConnectionInfo>();
        self.authn.authenticate(req.headers(), conn)?;
        self.public(req).await
    }

    async fn public(&self, req: &Request<Incoming>) -> ApiResult<Response<BoxBody>> {
        let path = req.uri().path();
        if path == "/version" {
            return Ok(json_response(StatusCode::OK, &crate::discovery::version()));
        }
        crate::health::respond(self, path, req.uri().query().unwrap_or_default()).await
    }

    async fn non_resource(&self, req: Request<Incoming>) -> ApiResult<Response<BoxBody>> {
        let path = req.uri().path().to_string();
        let accept =
            req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        if path == "/metrics" {
            return Ok(full(StatusCode::OK, component_base::metrics::CONTENT_TYPE, self.metrics.encode()));
        }
        if path.starts_with("/openapi/") {
            return self.openapi.respond_to(&req);
        }
        if let Some(m) = &self.openid {
            use crate::authn::serviceaccount::openid;
            let doc = match path.as_str() {
                openid::CONFIGURATION_PATH => Some((codec::JSON, m.configuration.clone())),
                openid::JWKS_PATH => Some((openid::JWKS_CONTENT_TYPE, m.jwks.clone())),
                _ => None,
            };
            if let Some((content_type, body)) = doc {
                let mut resp = full(StatusCode::OK, content_type, body);
                resp.headers_mut()
                    .insert(header::CACHE_CONTROL, HeaderValue::from_static(openid::CACHE_CONTROL));
                return Ok(resp);
            }
        }
        let remote = self.aggregator.backends();
        if let ["apis", g, v, ..] = path.trim_matches('/').split('/').collect::<Vec<_>>().as_slice()
            && let Some(b) = remote.iter().find(|b| b.group == *g && b.version == *v)
        {
            return self.aggregator.proxy(b, &current_user(), req).await;
        }
        crate::discovery::respond(&self.registry, &remote, &path, &accept)
            .ok_or_else(|| ApiError::no_route(&path))
    }

    async fn read_body(req: Request<Incoming>) -> ApiResult<(HeaderMap, Bytes)> {
        let (parts, body) = req.into_parts();
        let too_large = || ApiError::too_large(format!("Request entity too large: limit is {MAX_BODY}"));
        // A declared length over the limit is refused before any byte is read, so a client
        // that sent `Expect: 100-continue` gets the 413 instead of a reset mid-upload.
        let declared =
            parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > MAX_BODY as u64) {
            discard_body(body);
            return Err(too_large());
        }
        let bytes = Limited::new(body, MAX_BODY).collect().await.map_err(|e| {
            if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                too_large()
            } else {
                ApiError::bad_request(format!("reading the request body: {e}"))
            }
        })?;
        let bytes = bytes.to_bytes();
        crate::audit::request_body(&parts.headers, &bytes);
        Ok((parts.headers, bytes))
    }

    async fn resource(
        &self,
        info: RequestInfo,
        q: Query,
        req: Request<Incoming>,
    ) -> ApiResult<Response<BoxBody>> {
        // A group version served by an extension API server (a service-backed APIService).
        if !info.group.is_empty()
            && let Some(backend) = self.aggregator.backend(&info.group, &info.version)
        {
            return self.aggregator.proxy(&backend, &current_user(), req).await;
        }
        let req = match virtual_resources::serve(self, &info, &q, req).await {
            Ok(answered) => return answered,
            Err(req) => req,
        };
        let req = match crate::connect::serve(self, &info, req).await {
            Ok(answered) => return answered,
            Err(req) => req,
        };
        let store = self
            .registry
            .find(&info.group, &info.version, &info.resource)
            .ok_or_else(|| ApiError::no_route(req.uri().path()))?;
        let namespaced = store.res.info.namespaced;
        if !namespaced && info.namespace.is_some() {
            return Err(ApiError::no_route(req.uri().path()));
        }
        // A namespaced object is always addressed within its namespace.
        if namespaced
            && info.namespace.is_none()
            && (info.name.is_some() || info.verb == "create" || info.verb == "deletecollection")
        {
            return Err(ApiError::no_route(req.uri().path()));
        }
        if info.subresource.is_none() && !store.res.info.serves(info.verb) {
            discard_body(req.into_body());
            return Err(unsupported_verb(&store.res.info, info.verb));
        }
        let output = codec::negotiate(req.headers())?;
        if let Some(sub) = info.subresource.clone() {
            return subresources::handle(self, &store, &info, &sub, q, req, output).await;
        }
        let ns = info.namespace.as_deref();
        match info.verb {
            "get" => {
                let name = info.name.as_deref().unwrap_or_default();
                let obj = store.get(ns, name, parse_rv(&q)?).await?;
                Ok(respond(StatusCode::OK, &obj, output, &store, &q))
            }
            "list" => {
                let rv = parse_rv(&q)?;
                let opts = ListOptions {
                    filter: filter_of(&store, &info, &q)?,
                    rv,
                    limit: int_param(&q, "limit")?.map_or(0, |l| l.max(0) as usize),
                    continue_token: q.get("continue").filter(|c| !c.is_empty()).cloned(),
                    exact: resource_version_match(&q, rv)?,
                };
                let page = store.list_page(&opts).await?;
                if output == Output::Json {
                    return Ok(full(StatusCode::OK, codec::JSON, Bytes::from(page.to_json())));
                }
                Ok(respond(StatusCode::OK, &page.into_value(), output, &store, &q))
            }
            "watch" => watch::serve(self, store, &info, &q, output).await,
            "create" => {
                let (headers, body) = Self::read_body(req).await?;
                let mut obj = codec::decode(&headers, &body)?;
                let warnings = check_fields(&self.openapi, &store, &q, &obj, &body).await?;
                let dry = is_dry_run(&q, &obj);
                self.check_namespace(&store, ns).await?;
                FieldsOf::new(&self.openapi, &store, &q, &headers, None).await?.record(None, &mut obj);
                let created = if store.res.info.kind == "Service" {
                    self.services.create(&store, ns, obj, dry).await?
                } else {
                    store.create(ns, obj, dry).await?
                };
                let warnings = [warnings, store.res.hooks.warnings(&created)].concat();
                Ok(with_warnings(respond(StatusCode::CREATED, &created, output, &store, &q), &warnings))
            }
            "update" => {
                let name = info.name.clone().unwrap_or_default();
                let (headers, body) = Self::read_body(req).await?;
                let obj = codec::decode(&headers, &body)?;
                let warnings = check_fields(&self.openapi, &store, &q, &obj, &body).await?;
                let dry = is_dry_run(&q, &obj);
                let fields = FieldsOf::new(&self.openapi, &store, &q, &headers, None).await?;
                let record = |old: Option<&Value>, obj: &mut Value| fields.record(old, obj);
                let (obj, created) = if store.res.info.kind == "Service" {
                    self.services.update(&store, ns, &name, obj, dry, Some(&record)).await?
                } else {
                    store.update(ns, &name, obj, None, dry, Some(&record)).await?
                };
                let code = if created { StatusCode::CREATED } else { StatusCode::OK };
                let warnings = [warnings, store.res.hooks.warnings(&obj)].concat();
                Ok(with_warnings(respond(code, &obj, output, &store, &q), &warnings))
            }
            "patch" => {
                let name = info.name.clone().unwrap_or_default();
                let (headers, body) = Self::read_body(req).await?;
                let patch = crate::patch::Patch::decode(&headers, &body)?;
                let manager = manager_of(&q, &headers)?;
                let (obj, warnings) = crate::patch::apply_patch(
                    &store,
                    &self.openapi,
                    Target { ns, name: &name, subresource: None },
                    patch,
                    &q,
                    &manager,
                )
                .await?;
                let warnings = [warnings, store.res.hooks.warnings(&obj)].concat();
                Ok(with_warnings(respond(StatusCode::OK, &obj, output, &store, &q), &warnings))
            }
            "delete" => {
                let name = info.name.clone().unwrap_or_default();
                let (headers, body) = Self::read_body(req).await?;
                let opts_body = if body.is_empty() { None } else { Some(codec::decode(&headers, &body)?) };
                let opts = delete_options(&q, &opts_body)?;
                let result = if store.res.info.kind == "Namespace" {
                    crate::namespaces::delete(&store, &name, &opts).await?
                } else {
                    store.delete(ns, &name, &opts).await?
                };
                match result {
                    Deleted::Now(obj) => {
                        if store.res.info.kind == "Service" && !opts.dry_run {
                            self.services.release(&obj);
                        }
                        let body = if matches!(store.res.info.kind, "Pod" | "Namespace" | "Service" | "Node")
                            || output != Output::Json
                        {
                            obj
                        } else {
                            success_status(
                                &name,
                                store.res.info.group,
                                store.res.info.plural,
                                obj["metadata"]["uid"].as_str().unwrap_or_default(),
                            )
                        };
                        Ok(respond(StatusCode::OK, &body, output, &store, &q))
                    }
                    // Upstream answers 200 for a delete still pending (grace period,
                    // finalizers) and keeps 202 for the old `orphanDependents: false` only.
                    Deleted::Pending(obj) => {
                        let status = if opts.orphan_dependents == Some(false) {
                            StatusCode::ACCEPTED
                        } else {
                            StatusCode::OK
                        };
                        Ok(respond(status, &obj, output, &store, &q))
                    }
                }
            }
            "deletecollection" => {
                let (headers, body) = Self::read_body(req).await?;
                let opts_body = if body.is_empty() { None } else { Some(codec::decode(&headers, &body)?) };
                let del = delete_options(&q, &opts_body)?;
                let list = ListOptions { filter: filter_of(&store, &info, &q)?, ..Default::default() };
                let out = store.delete_collection(&list, &del).await?;
                Ok(respond(StatusCode::OK, &out, output, &store, &q))
            }
            other => Err(ApiError::method_not_allowed(format!("{other} is not supported"))),
        }
    }

    /// Objects may only be created in a namespace that exists and is not terminating. The
    /// NamespaceLifecycle admission plugin checks every write the store admits
    /// ([`crate::admission::plugins::namespace_lifecycle`]); Services are created without
    /// the admission chain ([`crate::services`]), so theirs is checked here, when the plugin
    /// is enabled.
    pub async fn check_namespace(&self, store: &Store, ns: Option<&str>) -> ApiResult<()> {
        let Some(ns) = ns.filter(|_| store.res.info.namespaced) else { return Ok(()) };
        if store.res.info.kind != "Service" || !self.admission.names().contains(&"NamespaceLifecycle") {
            return Ok(());
        }
        let namespaces = self.registry.core("namespaces");
        crate::admission::plugins::namespace_lifecycle::check_create(&namespaces, &store.res.info, ns).await
    }
}

/// The hyper service wrapping [`Api`].
#[derive(Clone)]
pub struct ApiService(pub Arc<Api>);

impl Service<Request<Incoming>> for ApiService {
    type Response = Response<BoxBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let api = self.0.clone();
        Box::pin(async move { Ok(api.handle(req).await) })
    }
}

/// Whether a request asked for a dry run (used by subresources too).
pub fn dry_run(q: &Query) -> bool {
    is_dry_run(q, &json!({}))
}

pub(crate) fn respond_with(
    status: StatusCode,
    v: &Value,
    output: Output,
    store: &Store,
    q: &Query,
) -> Response<BoxBody> {
    respond(status, v, output, store, q)
}

pub(crate) async fn body_of(req: Request<Incoming>) -> ApiResult<(HeaderMap, Bytes)> {
    Api::read_body(req).await
}

/// Checks `resourceVersionMatch` of a list as upstream's validation does; true for `Exact`.
/// (Without it, a resourceVersion means "not older than", as upstream's legacy default.)
fn resource_version_match(q: &Query, rv: Option<i64>) -> ApiResult<bool> {
    let Some(m) = q.get("resourceVersionMatch").filter(|m| !m.is_empty()) else { return Ok(false) };
    let invalid = |detail: String| {
        ApiError::bad_request(format!("resourceVersionMatch: Invalid value: \"{m}\": {detail}"))
    };
    if rv.is_none() {
        return Err(ApiError::bad_request(
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
        ));
    }
    if q.get("continue").is_some_and(|c| !c.is_empty()) {
        return Err(ApiError::bad_request(
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided",
        ));
    }
    match m.as_str() {
        "NotOlderThan" => Ok(false),
        "Exact" if rv == Some(0) => {
            Err(invalid("resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"".into()))
        }
        "Exact" => Ok(true),
        _ => Err(ApiError::bad_request(format!(
            "resourceVersionMatch: Unsupported value: \"{m}\": supported values: \"Exact\", \"NotOlderThan\""
        ))),
    }
}

pub(crate) fn rv_of(q: &Query) -> ApiResult<Option<i64>> {
    parse_rv(q)
}

pub(crate) fn filter_for(store: &Store, info: &RequestInfo, q: &Query) -> ApiResult<Filter> {
    filter_of(store, info, q)
}
