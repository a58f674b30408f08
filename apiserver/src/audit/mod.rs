//! Audit: one `audit.k8s.io/v1` Event per request stage the policy selects.
//!
//! - [`options`]: the `--audit-*` flags.
//! - [`policy`]: the audit policy (which level a request is recorded at).
//! - [`event`]: the Event and its `json` / `legacy` encodings.
//! - [`log`]: the log backend (queue, writer thread, blocking and batch modes).
//! - [`rotate`]: the rotating log file (lumberjack's behaviour).
//!
//! # A request's events
//!
//! [`Auditor::begin`] starts a [`RequestAudit`] in `Api::handle` with what the request
//! says about itself (URI, verb, source IPs, user agent, object reference); the handlers
//! run inside [`scope`], where they report what they learn through the free functions:
//!
//! 1. [`authenticated`] (right after authentication): the policy is evaluated with the
//!    authenticated user, and RequestReceived is written. In `blocking-strict` mode a
//!    failed write fails the request.
//! 2. [`authorized`]: the decision and reason become the `authorization.k8s.io/*`
//!    annotations; an impersonated user shows up as `impersonatedUser`.
//! 3. [`request_body`] (from the body reader): kept for `requestObject` at Request level
//!    and above, and to complete the object reference (name of a create, uid, ...).
//! 4. [`RequestAudit::finish`] with the response: long-running requests (watch, exec, log,
//!    ...) get ResponseStarted now and ResponseComplete when the body ends; others get
//!    ResponseComplete, with `responseObject` at RequestResponse (JSON bodies only).
//!
//! A request that fails authentication gets one ResponseStarted event with an empty user
//! and upstream's "Authentication failed, ..." message, as upstream's
//! `WithFailedAuthenticationAudit`. A panic in a handler gets a Panic event. The
//! `Audit-Id` header (the client's, or a new UUID) is on every response, audited or not.
//!
//! With no policy file or no log path nothing is recorded and no per-request state exists.

pub mod event;
pub mod log;
pub mod options;
pub mod policy;
pub mod rotate;

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use parking_lot::Mutex;
use serde_json::Value;

use crate::authn::User;
use crate::authz::Decision;
use crate::errors::{ApiError, ApiResult};
use crate::handlers::{BoxBody, BoxError};
use event::{Event, Level, ObjectReference, ResponseStatus, Stage, UserInfo};
use log::{Format, LogBackend, Mode};
use policy::{Attributes, Policy, RequestAuditConfig};

/// The request and response header carrying the audit ID.
pub const AUDIT_ID_HEADER: &str = "audit-id";
/// User agents longer than this are cut (upstream's limit and marker).
const MAX_USER_AGENT: usize = 1024;
/// Largest response body copied into `responseObject`; larger ones are recorded without it.
const MAX_RESPONSE_OBJECT: u64 = 16 << 20;
/// Served API versions upstream marks deprecated: (group, version, resource, the release
/// that removes it). Requests to them get `k8s.io/deprecated` (and
/// `k8s.io/removed-release`) annotations. ComponentStatus is deprecated since 1.19; this
/// server does not serve it today, so the annotations appear only if it ever does.
const DEPRECATED: &[(&str, &str, &str, Option<&str>)] = &[("", "v1", "componentstatuses", None)];

/// The configured audit policy and backend.
pub struct Auditor {
    policy: Policy,
    backend: Arc<LogBackend>,
}

impl std::fmt::Debug for Auditor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auditor").field("backend", &self.backend).finish_non_exhaustive()
    }
}

impl Auditor {
    /// From the flags; None when nothing is to be recorded (no log path, or no policy:
    /// upstream records nothing without a policy either).
    pub fn new(opts: &options::Options) -> Result<Option<Arc<Self>>, String> {
        let errs = opts.validate();
        if !errs.is_empty() {
            return Err(errs.join("; "));
        }
        let policy = match &opts.audit_policy_file {
            Some(p) => Some(Policy::load(p).map_err(|e| format!("loading audit policy file: {e}"))?),
            None => None,
        };
        let Some(path) = opts.audit_log_path.as_deref().filter(|p| !p.is_empty()) else { return Ok(None) };
        let Some(policy) = policy else {
            tracing::info!("No audit policy file provided, no events will be recorded for log backend");
            return Ok(None);
        };
        let mode = Mode::parse(&opts.audit_log_mode).unwrap_or(Mode::Blocking);
        let format = Format::parse(&opts.audit_log_format).unwrap_or(Format::Json);
        let buffer = if mode == Mode::Batch {
            usize::try_from(opts.audit_log_batch_buffer_size).unwrap_or(1)
        } else {
            1024
        };
        let backend = if path == "-" {
            LogBackend::start(log::Stdout::new(), mode, format, buffer)
        } else {
            let as_u64 = |v: i64| u64::try_from(v).unwrap_or(0);
            let file = rotate::Rotator::new(
                path.into(),
                as_u64(opts.audit_log_maxsize),
                usize::try_from(opts.audit_log_maxbackup).unwrap_or(0),
                as_u64(opts.audit_log_maxage),
                opts.audit_log_compress,
            );
            LogBackend::start(file, mode, format, buffer)
        };
        Ok(Some(Arc::new(Self { policy, backend })))
    }

    /// An auditor over a given policy and backend (tests).
    pub fn with_backend(policy: Policy, backend: Arc<LogBackend>) -> Arc<Self> {
        Arc::new(Self { policy, backend })
    }

    /// Starts auditing `req` (before anything has read it).
    pub fn begin<B>(self: &Arc<Self>, req: &Request<B>, audit_id: &str) -> Arc<RequestAudit> {
        let received = SystemTime::now();
        let path = req.uri().path();
        let query = req.uri().query().unwrap_or_default();
        let watch = crate::handlers::query::flag(&crate::handlers::query::parse(Some(query)), "watch");
        let info = crate::handlers::request::parse(req.method(), path, watch);
        let attrs = match &info {
            Some(i) => Attributes {
                verb: i.verb.to_string(),
                resource_request: true,
                namespace: i.namespace.clone().unwrap_or_default(),
                api_group: i.group.clone(),
                api_version: i.version.clone(),
                resource: i.resource.clone(),
                subresource: i.subresource.clone().unwrap_or_default(),
                name: i.name.clone().unwrap_or_default(),
                path: path.to_string(),
            },
            None => Attributes {
                verb: req.method().as_str().to_ascii_lowercase(),
                path: path.to_string(),
                ..Default::default()
            },
        };
        let long_running = attrs.verb == "watch"
            || attrs.verb == "proxy"
            || matches!(attrs.subresource.as_str(), "attach" | "exec" | "proxy" | "log" | "portforward");
        let mut ev = Event::new(audit_id.to_string(), received);
        ev.request_uri =
            req.uri().path_and_query().map_or_else(|| path.to_string(), |pq| pq.as_str().to_string());
        ev.verb = attrs.verb.clone();
        ev.user_agent = user_agent(req.headers());
        ev.source_ips = source_ips(req);
        ev.object_ref = attrs.resource_request.then(|| ObjectReference {
            resource: attrs.resource.clone(),
            namespace: attrs.namespace.clone(),
            name: attrs.name.clone(),
            api_group: attrs.api_group.clone(),
            api_version: attrs.api_version.clone(),
            subresource: attrs.subresource.clone(),
            ..Default::default()
        });
        Arc::new(RequestAudit {
            auditor: self.clone(),
            attrs,
            long_running,
            auth_methods: auth_methods(req),
            state: Mutex::new(State { config: None, event: ev, body: None, finished: false }),
        })
    }
}

/// The audit ID of a request: the client's `Audit-ID` if it sent a usable one, else a new
/// UUID (upstream's `WithAuditInit`).
pub fn request_id(headers: &HeaderMap) -> HeaderValue {
    headers.get(AUDIT_ID_HEADER).filter(|v| !v.is_empty() && v.to_str().is_ok()).cloned().unwrap_or_else(
        || HeaderValue::from_str(&crate::registry::store::new_uid()).unwrap_or(HeaderValue::from_static("")),
    )
}

fn user_agent(headers: &HeaderMap) -> String {
    let ua = headers
        .get(header::USER_AGENT)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    if ua.len() <= MAX_USER_AGENT {
        return ua;
    }
    let mut cut = MAX_USER_AGENT;
    while !ua.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...TRUNCATED", &ua[..cut])
}

/// Upstream's `utilnet.SourceIPs`: the X-Forwarded-For chain, X-Real-Ip, then the peer.
fn source_ips<B>(req: &Request<B>) -> Vec<String> {
    let h = req.headers();
    let parse = |s: &str| s.trim().parse::<IpAddr>().ok().map(|ip| ip.to_canonical());
    let mut ips: Vec<IpAddr> = h
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(',').filter_map(parse).collect())
        .unwrap_or_default();
    if let Some(ip) = h.get("x-real-ip").and_then(|v| v.to_str().ok()).and_then(parse)
        && !ips.contains(&ip)
    {
        ips.push(ip);
    }
    if let Some(info) = req.extensions().get::<component_base::http::ConnectionInfo>() {
        let peer = info.peer.ip().to_canonical();
        if ips.last() != Some(&peer) {
            ips.push(peer);
        }
    }
    ips.iter().map(IpAddr::to_string).collect()
}

/// Upstream's `getAuthMethods`: what a request that failed authentication tried.
fn auth_methods<B>(req: &Request<B>) -> String {
    let mut methods = Vec::new();
    let auth =
        req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or_default().trim();
    let scheme = auth.split(' ').next().unwrap_or_default();
    if scheme.eq_ignore_ascii_case("basic") {
        methods.push("basic");
    }
    if scheme.eq_ignore_ascii_case("bearer") && auth.split(' ').count() > 1 {
        methods.push("bearer");
    }
    let query = req.uri().query().unwrap_or_default();
    if url::form_urlencoded::parse(query.as_bytes()).any(|(k, v)| k == "access_token" && !v.trim().is_empty())
    {
        methods.push("access_token");
    }
    if req
        .extensions()
        .get::<component_base::http::ConnectionInfo>()
        .is_some_and(|c| c.client_certificates.as_ref().is_some_and(|certs| !certs.is_empty()))
    {
        methods.push("x509");
    }
    if methods.is_empty() {
        "Authentication failed, no credentials provided".into()
    } else {
        format!("Authentication failed, attempted: {}", methods.join(", "))
    }
}

/// One request being audited.
pub struct RequestAudit {
    auditor: Arc<Auditor>,
    attrs: Attributes,
    long_running: bool,
    auth_methods: String,
    state: Mutex<State>,
}

struct State {
    /// Decided once the user is known.
    config: Option<RequestAuditConfig>,
    event: Event,
    /// The request body and its content type, kept at Metadata level and above.
    body: Option<(Option<HeaderValue>, Bytes)>,
    /// ResponseComplete (or Panic) has been written.
    finished: bool,
}

impl RequestAudit {
    /// Whether the policy has been evaluated (the user is known).
    pub fn has_user(&self) -> bool {
        self.state.lock().config.is_some()
    }

    /// The policy decides the level for `user`; RequestReceived is written.
    pub async fn authenticated(&self, user: &User) -> ApiResult<()> {
        let ev = {
            let mut st = self.state.lock();
            if st.config.is_some() {
                return Ok(());
            }
            let config = self.auditor.policy.evaluate(Some(user), &self.attrs);
            st.config = Some(config);
            if config.level == Level::None {
                return Ok(());
            }
            st.event.level = config.level;
            st.event.user = UserInfo::from(user);
            if config.omit_stages.contains(Stage::RequestReceived) {
                return Ok(());
            }
            st.event.stage = Stage::RequestReceived;
            st.event.stage_timestamp = st.event.request_received_timestamp;
            st.event.clone()
        };
        match self.auditor.backend.process(&ev).await {
            Err(_) if self.auditor.backend.mode() == Mode::BlockingStrict => {
                Err(ApiError::internal("failed to store audit event"))
            }
            _ => Ok(()),
        }
    }

    /// Records the authorization decision for the request acting as `acting_as`.
    pub fn authorized(&self, acting_as: &User, decision: &Decision) {
        let mut st = self.state.lock();
        if !st.config.is_some_and(|c| c.level > Level::None) {
            return;
        }
        let acting = UserInfo::from(acting_as);
        if acting != st.event.user {
            st.event.impersonated_user = Some(acting);
        }
        let verdict = if decision.allowed() { "allow" } else { "forbid" };
        st.event.annotations.insert("authorization.k8s.io/decision".into(), verdict.into());
        st.event.annotations.insert("authorization.k8s.io/reason".into(), decision.reason().to_string());
    }

    /// Adds an annotation (admission plugins' findings) to the events still to be written.
    pub fn annotate(&self, key: &str, value: String) {
        let mut st = self.state.lock();
        if st.config.is_some_and(|c| c.level > Level::None) {
            st.event.annotations.insert(key.to_string(), value);
        }
    }

    /// Keeps the request body when the level will use it.
    pub fn request_body(&self, headers: &HeaderMap, body: &Bytes) {
        let mut st = self.state.lock();
        if st.config.is_some_and(|c| c.level >= Level::Metadata) && !body.is_empty() {
            st.body = Some((headers.get(header::CONTENT_TYPE).cloned(), body.clone()));
        }
    }

    /// Records the response and returns it (its body wrapped for long-running requests,
    /// re-assembled after being copied at RequestResponse). `failure` is the error the
    /// response was made from, if any.
    pub async fn finish(
        self: &Arc<Self>,
        resp: Response<BoxBody>,
        failure: Option<&ApiError>,
    ) -> Response<BoxBody> {
        let code = resp.status().as_u16();
        let config = self.state.lock().config;
        let Some(config) = config else {
            if code == 401 {
                self.failed_authentication(code).await;
            }
            return resp;
        };
        if config.level == Level::None {
            return resp;
        }
        self.prepare(config, code, failure);
        if self.long_running {
            if let Some(ev) = self.stage_event(Stage::ResponseStarted, config) {
                let _ = self.auditor.backend.process(&ev).await;
            }
            let (parts, body) = resp.into_parts();
            let tracked = Tracked { inner: body, _done: Completion(self.clone()) };
            return Response::from_parts(parts, tracked.boxed_unsync());
        }
        let resp = if config.level >= Level::RequestResponse {
            self.capture_response(resp, config).await
        } else {
            resp
        };
        if let Some(ev) = self.stage_event(Stage::ResponseComplete, config) {
            let _ = self.auditor.backend.process(&ev).await;
        }
        resp
    }

    /// The handler panicked: a Panic event with upstream's status.
    pub async fn panicked(&self, message: &str) {
        let ev = {
            let mut st = self.state.lock();
            let Some(config) = st.config.filter(|c| c.level > Level::None) else { return };
            st.finished = true;
            if config.omit_stages.contains(Stage::Panic) {
                return;
            }
            st.event.response_status = Some(ResponseStatus {
                status: "Failure".into(),
                reason: "InternalError".into(),
                message: format!("APIServer panic'd: {message}"),
                code: 500,
                ..Default::default()
            });
            st.event.stage = Stage::Panic;
            st.event.stage_timestamp = SystemTime::now();
            st.event.clone()
        };
        let _ = self.auditor.backend.process(&ev).await;
    }

    /// The single event of a request refused by authentication (no user).
    async fn failed_authentication(&self, code: u16) {
        let config = self.auditor.policy.evaluate(None, &self.attrs);
        if config.level == Level::None || config.omit_stages.contains(Stage::ResponseStarted) {
            return;
        }
        let ev = {
            let mut st = self.state.lock();
            st.config = Some(config);
            st.finished = true;
            st.event.level = config.level;
            st.event.response_status =
                Some(ResponseStatus { message: self.auth_methods.clone(), code, ..Default::default() });
            st.event.stage = Stage::ResponseStarted;
            st.event.stage_timestamp = SystemTime::now();
            st.event.clone()
        };
        let _ = self.auditor.backend.process(&ev).await;
    }

    /// Fills in what the response and the kept body tell.
    fn prepare(&self, config: RequestAuditConfig, code: u16, failure: Option<&ApiError>) {
        let mut st = self.state.lock();
        st.event.response_status = Some(match failure {
            Some(e) => ResponseStatus::from_status(code, &e.to_status()),
            None => ResponseStatus::code(code),
        });
        if let Some(removed) = deprecation(&self.attrs) {
            st.event.annotations.insert("k8s.io/deprecated".into(), "true".into());
            if let Some(r) = removed {
                st.event.annotations.insert("k8s.io/removed-release".into(), r.into());
            }
        }
        let Some((content_type, body)) = st.body.take() else { return };
        let verb = self.attrs.verb.as_str();
        let decoded =
            if verb == "patch" { decode_patch(&body) } else { decode_object(content_type.as_ref(), &body) };
        let Some(mut obj) = decoded else { return };
        if matches!(verb, "create" | "update")
            && let Some(r) = st.event.object_ref.as_mut()
        {
            let meta = &obj["metadata"];
            let fill = |field: &mut String, key: &str| {
                if field.is_empty() {
                    *field = meta[key].as_str().unwrap_or_default().to_string();
                }
            };
            fill(&mut r.namespace, "namespace");
            fill(&mut r.name, "name");
            fill(&mut r.uid, "uid");
            fill(&mut r.resource_version, "resourceVersion");
        }
        if config.level >= Level::Request {
            if config.omit_managed_fields {
                drop_managed_fields(&mut obj);
            }
            st.event.request_object = Some(obj);
        }
    }

    /// Copies a JSON response body into `responseObject` (bodies of known, bounded size).
    async fn capture_response(
        &self,
        resp: Response<BoxBody>,
        config: RequestAuditConfig,
    ) -> Response<BoxBody> {
        let json = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("application/json"));
        if !json || resp.body().size_hint().exact().is_none_or(|n| n > MAX_RESPONSE_OBJECT) {
            return resp;
        }
        let (parts, body) = resp.into_parts();
        let bytes = match body.collect().await {
            Ok(c) => c.to_bytes(),
            Err(e) => {
                tracing::warn!("reading a response for the audit log: {e}");
                let empty = http_body_util::Empty::new().map_err(|never| match never {}).boxed_unsync();
                return Response::from_parts(parts, empty);
            }
        };
        if let Ok(mut obj) = serde_json::from_slice::<Value>(&bytes) {
            if config.omit_managed_fields {
                drop_managed_fields(&mut obj);
            }
            let mut st = self.state.lock();
            if obj["kind"] == "Status" && parts.status.as_u16() >= 400 {
                st.event.response_status = Some(ResponseStatus::from_status(parts.status.as_u16(), &obj));
            }
            st.event.response_object = Some(obj);
        }
        let body = http_body_util::Full::new(bytes).map_err(|never| match never {}).boxed_unsync();
        Response::from_parts(parts, body)
    }

    /// The event for `stage`, or None when the policy omits it or it was already final.
    fn stage_event(&self, stage: Stage, config: RequestAuditConfig) -> Option<Event> {
        let mut st = self.state.lock();
        if st.finished {
            return None;
        }
        if stage == Stage::ResponseComplete {
            st.finished = true;
        }
        if config.omit_stages.contains(stage) {
            return None;
        }
        st.event.stage = stage;
        st.event.stage_timestamp = SystemTime::now();
        Some(st.event.clone())
    }
}

/// Whether the requested version is deprecated, and the release that removes it.
fn deprecation(a: &Attributes) -> Option<Option<&'static str>> {
    if !a.resource_request {
        return None;
    }
    DEPRECATED
        .iter()
        .find(|(g, v, r, _)| *g == a.api_group && *v == a.api_version && *r == a.resource)
        .map(|(_, _, _, removed)| *removed)
}

fn decode_object(content_type: Option<&HeaderValue>, body: &[u8]) -> Option<Value> {
    let mut h = HeaderMap::new();
    if let Some(ct) = content_type {
        h.insert(header::CONTENT_TYPE, ct.clone());
    }
    crate::handlers::codec::decode(&h, body).ok()
}

/// A patch as sent: JSON (merge, strategic, JSON patch) or YAML (apply).
fn decode_patch(body: &[u8]) -> Option<Value> {
    serde_json::from_slice(body).ok().or_else(|| serde_yaml::from_slice(body).ok())
}

/// Removes `metadata.managedFields` from an object or from a list's items.
fn drop_managed_fields(v: &mut Value) {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
        for i in items {
            drop_managed_fields(i);
        }
    }
    // Tables carry objects in their rows.
    if let Some(rows) = v.get_mut("rows").and_then(Value::as_array_mut) {
        for r in rows {
            if let Some(o) = r.get_mut("object") {
                drop_managed_fields(o);
            }
        }
    }
}

/// Writes ResponseComplete of a long-running request when its body is dropped (the
/// stream ended or the client went away).
struct Completion(Arc<RequestAudit>);

impl Drop for Completion {
    fn drop(&mut self) {
        let a = &self.0;
        let Some(config) = a.state.lock().config else { return };
        if let Some(ev) = a.stage_event(Stage::ResponseComplete, config) {
            a.auditor.backend.process_detached(&ev);
        }
    }
}

/// A response body that reports its end to the audit log (when dropped, with `done`).
struct Tracked {
    inner: BoxBody,
    _done: Completion,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

tokio::task_local! {
    static CURRENT: Arc<RequestAudit>;
}

/// Runs `f` with `audit` as the current request's audit (a no-op scope for None).
pub async fn scope<F: Future>(audit: Option<Arc<RequestAudit>>, f: F) -> F::Output {
    match audit {
        Some(a) => CURRENT.scope(a, f).await,
        None => f.await,
    }
}

fn current() -> Option<Arc<RequestAudit>> {
    CURRENT.try_with(Arc::clone).ok()
}

/// Called once the request's user is authenticated; see the module docs. Err only in
/// `blocking-strict` mode when the event could not be written.
pub async fn authenticated(user: &User) -> ApiResult<()> {
    match current() {
        Some(a) => a.authenticated(user).await,
        None => Ok(()),
    }
}

/// Called with the authorization decision for the user the request acts as.
pub fn authorized(acting_as: &User, decision: &Decision) {
    if let Some(a) = current() {
        a.authorized(acting_as, decision);
    }
}

/// Adds an audit annotation to the current request's event (upstream's
/// `AddAuditAnnotation`), e.g. PodSecurity's `audit-violations`.
pub fn annotate(key: &str, value: String) {
    if let Some(a) = current() {
        a.annotate(key, value);
    }
}

/// Called by the body reader with a request body (at most the request size limit).
pub fn request_body(headers: &HeaderMap, body: &Bytes) {
    if let Some(a) = current() {
        a.request_body(headers, body);
    }
}

#[cfg(test)]
mod tests;
