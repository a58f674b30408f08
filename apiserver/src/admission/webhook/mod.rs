//! Dynamic admission webhooks (upstream's `MutatingAdmissionWebhook` and
//! `ValidatingAdmissionWebhook`): the server asks HTTPS endpoints named by
//! MutatingWebhookConfigurations and ValidatingWebhookConfigurations whether a write
//! may go on, with an AdmissionReview.
//!
//! # Layout
//!
//! - [`config`]: one webhook as read from its stored configuration.
//! - [`matching`]: which requests a webhook concerns (rules and selectors).
//! - [`review`]: the AdmissionReview sent, the checks on the answer, the rejection error.
//! - [`client`]: the HTTPS call (caBundle trust, timeout, body limit).
//! - here: the two plugins, where configurations come from ([`Source`]), what the
//!   dispatchers need from the rest of the server ([`Cluster`]), and the dispatchers.
//!
//! # Dispatch, as upstream
//!
//! Mutating webhooks run one after another, configurations sorted by name and webhooks
//! in their order, each seeing the object as the previous ones left it; a JSONPatch
//! answer is applied at once. When a webhook changes the object, the earlier webhooks
//! with `reinvocationPolicy: IfNeeded` are called once more, in a second round.
//! Validating webhooks are all called at once; the first failure in webhook order is
//! the request's.
//!
//! A webhook that cannot be called, or answers something that is not a valid
//! AdmissionReview, fails the request with 500 (`failed calling webhook "x": ...`) under
//! `failurePolicy: Fail`, and is skipped under `Ignore`. A rejection is the webhook's own
//! status. Webhooks are never called for webhook configurations themselves.
//!
//! Not done here: `matchConditions` (CEL; such configurations are refused when written),
//! audit annotations from responses, and client credentials from
//! `--admission-control-config-file` (a `WebhookAdmissionConfiguration` is refused).

pub mod client;
pub mod config;
pub mod matching;
pub mod review;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;

use self::client::{Dial, Target};
use self::config::{FailurePolicy, Webhook};
use self::matching::Request;
use self::review::{Outcome, ResponseError};
use super::{Attributes, Operation, Plugin, lookup};
use crate::cacher::CachedObject;
use crate::errors::{ApiError, ApiResult};
use crate::registry::Registry;
use crate::registry::resource::ResourceInfo;
use crate::registry::resources::admissionregistration::webhook_configuration::NO_SIDE_EFFECT_CLASSES;
use crate::registry::store::{Items, ListOptions, Store};

const GROUP: &str = "admissionregistration.k8s.io";
/// How long a request waits for the configurations' cache after startup (upstream's
/// `timeToWaitForReady`).
const READY_WAIT: Duration = Duration::from_secs(10);

/// What the dispatchers need from the rest of the server, behind a trait so they can be
/// tested without storage.
#[async_trait::async_trait]
pub trait Cluster: Send + Sync {
    /// The labels of namespace `name` (null when it has none); 404 when it does not exist.
    async fn namespace_labels(&self, name: &str) -> ApiResult<Value>;

    /// The address (IP, port) of a ready endpoint of Service `namespace/name` serving its
    /// port `port`; the error says why there is none, in upstream's words.
    async fn resolve(&self, namespace: &str, name: &str, port: u16) -> Result<(String, u16), String>;

    /// The object as its resource's type reads it (what a patch added that the type does
    /// not have is dropped; a wrongly typed field is an error), as upstream decodes a
    /// patched object.
    fn normalize(&self, resource: &ResourceInfo, obj: Value) -> ApiResult<Value>;
}

/// [`Cluster`] served by the registry's stores (the watch caches, then etcd).
pub struct RegistryCluster {
    registry: Arc<Registry>,
    namespaces: Arc<Store>,
    services: Arc<Store>,
    endpoints: Arc<Store>,
}

impl RegistryCluster {
    pub fn new(registry: &Arc<Registry>) -> Result<Self, String> {
        Ok(Self {
            registry: registry.clone(),
            namespaces: lookup::store(registry, "", "v1", "namespaces")?,
            services: lookup::store(registry, "", "v1", "services")?,
            endpoints: lookup::store(registry, "", "v1", "endpoints")?,
        })
    }
}

#[async_trait::async_trait]
impl Cluster for RegistryCluster {
    async fn namespace_labels(&self, name: &str) -> ApiResult<Value> {
        match lookup::get(&self.namespaces, None, name).await? {
            Some(ns) => Ok(ns["metadata"]["labels"].clone()),
            None => Err(ApiError::not_found("namespaces", "", name)),
        }
    }

    /// Upstream's `ResolveEndpoint`: the Service's port of that number, then a random
    /// ready address of the Endpoints subset serving the port's name.
    async fn resolve(&self, namespace: &str, name: &str, port: u16) -> Result<(String, u16), String> {
        let svc = lookup::get(&self.services, Some(namespace), name)
            .await
            .map_err(|e| e.message)?
            .ok_or_else(|| format!("service \"{name}\" not found"))?;
        let kind = svc["spec"]["type"].as_str().unwrap_or("ClusterIP");
        if !matches!(kind, "ClusterIP" | "NodePort" | "LoadBalancer") {
            return Err(format!("unsupported service type {kind:?}"));
        }
        let port_name = svc["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["port"].as_i64() == Some(i64::from(port)))
            .map(|p| p["name"].as_str().unwrap_or_default().to_string())
            .ok_or_else(|| format!("no service port {port} found for service \"{name}\""))?;
        let eps = lookup::get(&self.endpoints, Some(namespace), name)
            .await
            .map_err(|e| e.message)?
            .ok_or_else(|| format!("endpoints \"{name}\" not found"))?;
        for subset in eps["subsets"].as_array().into_iter().flatten() {
            let addresses = subset["addresses"].as_array().map(Vec::as_slice).unwrap_or_default();
            let served = subset["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["name"].as_str().unwrap_or_default() == port_name);
            let (Some(p), false) = (served, addresses.is_empty()) else { continue };
            let ip = addresses[rand::random_range(0..addresses.len())]["ip"].as_str().unwrap_or_default();
            let target = p["port"].as_u64().and_then(|p| u16::try_from(p).ok()).unwrap_or(0);
            return Ok((ip.to_string(), target));
        }
        Err(format!("no endpoints available for service \"{name}\""))
    }

    fn normalize(&self, resource: &ResourceInfo, obj: Value) -> ApiResult<Value> {
        match self.registry.find(resource.group, resource.version, resource.plural) {
            Some(store) => (store.res.normalize)(obj),
            None => Ok(obj),
        }
    }
}

/// The webhooks of one kind of configuration, read from its store and kept compiled
/// until a configuration changes.
pub struct Source {
    store: Arc<Store>,
    /// The (name, resourceVersion) of every configuration compiled, and the result.
    compiled: Mutex<Option<(Vec<(String, i64)>, Arc<[Arc<Webhook>]>)>>,
}

impl Source {
    pub fn new(registry: &Registry, plural: &str) -> Result<Self, String> {
        Ok(Self { store: lookup::store(registry, GROUP, "v1", plural)?, compiled: Mutex::new(None) })
    }

    /// Every webhook, configurations sorted by name (upstream sorts them so the order of
    /// mutations does not depend on the cache's).
    pub async fn hooks(&self, attrs: &Attributes<'_>) -> ApiResult<Arc<[Arc<Webhook>]>> {
        if self.store.watch_cache && !self.store.cacher.wait_ready(READY_WAIT).await {
            return Err(super::forbidden(attrs, "not yet ready to handle request"));
        }
        let page = self.store.list_page(&ListOptions { rv: Some(0), ..Default::default() }).await?;
        // (name, resourceVersion, object): cached objects are decoded only when compiled.
        let mut configs: Vec<(String, i64, Stored)> = match page.items {
            Items::Cached(objs) => {
                objs.into_iter().map(|o| (o.name().to_string(), o.rv, Stored::Cached(o))).collect()
            }
            Items::Decoded(vals) => vals
                .into_iter()
                .map(|v| {
                    let name = lookup::name(&v).to_string();
                    let rv =
                        v["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0);
                    (name, rv, Stored::Decoded(v))
                })
                .collect(),
        };
        configs.sort_by(|a, b| a.0.cmp(&b.0));
        let key: Vec<(String, i64)> = configs.iter().map(|(n, rv, _)| (n.clone(), *rv)).collect();
        if let Some((k, hooks)) = self.compiled.lock().as_ref()
            && *k == key
        {
            return Ok(hooks.clone());
        }
        let mut hooks = Vec::new();
        for (_, _, stored) in configs {
            let value = match stored {
                Stored::Cached(o) => o.value(),
                Stored::Decoded(v) => v,
            };
            hooks.extend(config::compile(&value));
        }
        let hooks: Arc<[Arc<Webhook>]> = hooks.into();
        *self.compiled.lock() = Some((key, hooks.clone()));
        Ok(hooks)
    }
}

/// A configuration as the store listed it.
enum Stored {
    Cached(Arc<CachedObject>),
    Decoded(Value),
}

/// Gives the client the warnings webhooks returned (as `Warning` headers).
fn forward(warnings: Vec<String>) {
    if warnings.is_empty() {
        return;
    }
    if let Some(scope) = crate::context::current() {
        for w in warnings {
            scope.warn(w);
        }
    }
}

/// Upstream's `MutatingAdmissionWebhook` plugin.
pub struct MutatingAdmissionWebhook {
    source: Source,
    cluster: Arc<dyn Cluster>,
}

impl MutatingAdmissionWebhook {
    pub fn new(registry: &Arc<Registry>) -> Result<Self, String> {
        Ok(Self {
            source: Source::new(registry, "mutatingwebhookconfigurations")?,
            cluster: Arc::new(RegistryCluster::new(registry)?),
        })
    }
}

#[async_trait::async_trait]
impl Plugin for MutatingAdmissionWebhook {
    fn name(&self) -> &'static str {
        "MutatingAdmissionWebhook"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> ApiResult<()> {
        if matching::is_exempt(attrs) {
            return Ok(());
        }
        let hooks = self.source.hooks(attrs).await?;
        if hooks.is_empty() {
            return Ok(());
        }
        let mut warnings = Vec::new();
        let result = mutate(&hooks, attrs, &*self.cluster, &mut warnings).await;
        forward(warnings);
        result
    }
}

/// Upstream's `ValidatingAdmissionWebhook` plugin.
pub struct ValidatingAdmissionWebhook {
    source: Source,
    cluster: Arc<dyn Cluster>,
}

impl ValidatingAdmissionWebhook {
    pub fn new(registry: &Arc<Registry>) -> Result<Self, String> {
        Ok(Self {
            source: Source::new(registry, "validatingwebhookconfigurations")?,
            cluster: Arc::new(RegistryCluster::new(registry)?),
        })
    }
}

#[async_trait::async_trait]
impl Plugin for ValidatingAdmissionWebhook {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionWebhook"
    }

    async fn validate(&self, attrs: &Attributes<'_>) -> ApiResult<()> {
        if matching::is_exempt(attrs) {
            return Ok(());
        }
        let hooks = self.source.hooks(attrs).await?;
        if hooks.is_empty() {
            return Ok(());
        }
        let mut warnings = Vec::new();
        let result = validate(&hooks, attrs, &*self.cluster, &mut warnings).await;
        forward(warnings);
        result
    }
}

/// How a call went wrong (upstream's `ErrCallingWebhook`, `ErrWebhookRejection` and
/// plain errors).
#[derive(Debug)]
enum Failure {
    /// The webhook could not be called or answered nonsense: the failure policy decides.
    Calling(String),
    /// The webhook said no.
    Rejected(ApiError),
    /// Anything else: the request fails whatever the policy.
    Error(ApiError),
}

/// The request's error for a call that failed under `failurePolicy: Fail`.
fn calling_error(hook: &Webhook, reason: &str) -> ApiError {
    ApiError::internal(format!("failed calling webhook \"{}\": {reason}", hook.name))
}

/// The namespace labels of one request, looked up at most once.
#[derive(Default)]
struct NamespaceLabels(Option<Value>);

/// Upstream's `ShouldCallHook`: rules, then the namespace selector, then the object
/// selector. An error (the namespace does not exist) counts only for a webhook whose
/// rules match.
async fn should_call(
    hook: &Webhook,
    attrs: &Attributes<'_>,
    cluster: &dyn Cluster,
    ns_labels: &mut NamespaceLabels,
) -> ApiResult<bool> {
    let req = Request::of(attrs);
    if !matching::rules_match(hook, &req) {
        return Ok(false);
    }
    if matching::needs_namespace(hook, &req) {
        // A namespace being created or updated is judged by its new labels (the cache
        // does not have them yet); otherwise by the stored namespace's.
        let own = req.resource == "namespaces"
            && req.subresource.is_empty()
            && matches!(req.operation, Operation::Create | Operation::Update);
        let labels = if own {
            attrs.object.as_ref().map(|o| o["metadata"]["labels"].clone()).unwrap_or(Value::Null)
        } else {
            match &ns_labels.0 {
                Some(l) => l.clone(),
                None => {
                    let l = cluster.namespace_labels(req.namespace.unwrap_or_default()).await?;
                    ns_labels.0 = Some(l.clone());
                    l
                }
            }
        };
        if !matching::selector_matches(&hook.namespace_selector, Some(&labels)) {
            return Ok(false);
        }
    }
    Ok(matching::object_selector_matches(hook, attrs.object.as_ref(), attrs.old_object))
}

/// One AdmissionReview exchange with `hook` (upstream's `callHook`/`callAttrMutatingHook`
/// up to the verified response).
async fn call(
    hook: &Webhook,
    attrs: &Attributes<'_>,
    mutating: bool,
    cluster: &dyn Cluster,
) -> Result<Outcome, Failure> {
    if attrs.dry_run && !NO_SIDE_EFFECT_CLASSES.contains(&hook.side_effects.as_str()) {
        if hook.side_effects.is_empty() {
            return Err(Failure::Calling("Webhook SideEffects is nil".into()));
        }
        return Err(Failure::Error(ApiError::bad_request(format!(
            "admission webhook \"{}\" does not support dry run",
            hook.name
        ))));
    }
    let version = review::pick_version(&hook.review_versions).ok_or_else(|| {
        Failure::Calling(
            "could not create admission objects: webhook does not accept known AdmissionReview versions (v1, v1beta1)"
                .into(),
        )
    })?;
    let client_err = |e: &str| Failure::Calling(format!("could not get REST client: {e}"));
    let endpoint = hook.endpoint.as_ref().map_err(|e| client_err(e))?;
    let tls = hook.tls.clone().map_err(|e| client_err(&e))?;
    let target = Target::new(endpoint, hook.timeout).map_err(|e| client_err(&e))?;
    let uid = crate::registry::store::new_uid();
    let body = serde_json::to_vec(&review::request(version, &uid, attrs))
        .map_err(|e| Failure::Calling(format!("could not create admission objects: {e}")))?;
    let exchange = async {
        let addr = match &target.dial {
            Dial::Host(host, port) => (host.clone(), *port),
            Dial::Service { namespace, name, port } => cluster.resolve(namespace, name, *port).await?,
        };
        client::post(tls, &target, &addr, body).await.map_err(|e| e.to_string())
    };
    let answer = match tokio::time::timeout(hook.timeout, exchange).await {
        Ok(r) => r,
        Err(_) => Err("context deadline exceeded".to_string()),
    }
    .map_err(|e| Failure::Calling(format!("failed to call webhook: Post \"{}\": {e}", target.url)))?;
    review::verify(version, &uid, mutating, &answer).map_err(|e| match e {
        ResponseError::Decode(m) => Failure::Calling(format!("failed to call webhook: {m}")),
        ResponseError::Invalid(m) => Failure::Calling(format!("received invalid webhook response: {m}")),
    })
}

/// Calls a mutating webhook and applies its patch; whether the object changed.
async fn call_mutating(
    hook: &Webhook,
    attrs: &mut Attributes<'_>,
    cluster: &dyn Cluster,
    warnings: &mut Vec<String>,
) -> Result<bool, Failure> {
    let outcome = call(hook, attrs, true, cluster).await?;
    warnings.extend(outcome.warnings);
    if !outcome.allowed {
        return Err(Failure::Rejected(review::rejection(&hook.name, outcome.status.as_ref())));
    }
    if outcome.patch.is_empty() {
        return Ok(false);
    }
    let patch: Value =
        serde_json::from_slice(&outcome.patch).ok().filter(Value::is_array).ok_or_else(|| {
            Failure::Calling(
                "received undecodable patch in webhook response: the patch is not a JSON array".into(),
            )
        })?;
    if patch.as_array().is_some_and(Vec::is_empty) {
        return Ok(false);
    }
    let resource = attrs.resource;
    let Some(obj) = attrs.object.as_mut() else {
        return Err(Failure::Error(ApiError::internal(format!(
            "admission webhook \"{}\" attempted to modify the object, which is not supported for this operation",
            hook.name
        ))));
    };
    if outcome.patch_type != "JSONPatch" {
        return Err(Failure::Calling(format!("unsupported patch type {:?}", outcome.patch_type)));
    }
    let mut patched = obj.clone();
    crate::patch::json_patch(&mut patched, &patch)
        .map_err(|e| Failure::Error(ApiError::internal(e.message)))?;
    // Subresources with their own kinds (Binding, TokenRequest, Eviction, Scale) are not
    // read as the resource's type; their handlers decode them.
    let patched = if patched["kind"].as_str().is_none_or(|k| k == resource.kind) {
        cluster.normalize(resource, patched).map_err(|e| Failure::Error(ApiError::internal(e.message)))?
    } else {
        patched
    };
    let changed = patched != *obj;
    *obj = patched;
    Ok(changed)
}

/// Upstream's `webhookReinvokeContext`: which IfNeeded webhooks ran since the last
/// change, and which must run again.
#[derive(Default)]
struct Reinvocation {
    previously_invoked: HashSet<String>,
    reinvoke: HashSet<String>,
}

impl Reinvocation {
    /// The object changed: every IfNeeded webhook that ran before must run again.
    fn require_reinvoking_previous(&mut self) {
        self.reinvoke.extend(self.previously_invoked.drain());
    }
}

/// The mutating pass: every matching webhook in order, and a second round for the
/// IfNeeded webhooks an object change came after.
pub async fn mutate(
    hooks: &[Arc<Webhook>],
    attrs: &mut Attributes<'_>,
    cluster: &dyn Cluster,
    warnings: &mut Vec<String>,
) -> ApiResult<()> {
    let mut state = Reinvocation::default();
    if mutate_round(hooks, attrs, cluster, warnings, &mut state, false).await? {
        mutate_round(hooks, attrs, cluster, warnings, &mut state, true).await?;
    }
    Ok(())
}

/// One round of the mutating pass; whether a webhook changed the object.
async fn mutate_round(
    hooks: &[Arc<Webhook>],
    attrs: &mut Attributes<'_>,
    cluster: &dyn Cluster,
    warnings: &mut Vec<String>,
    state: &mut Reinvocation,
    reinvoking: bool,
) -> ApiResult<bool> {
    let mut ns_labels = NamespaceLabels::default();
    let mut changed_any = false;
    for hook in hooks {
        if !should_call(hook, attrs, cluster, &mut ns_labels).await? {
            continue;
        }
        // A webhook is never called for the first time in the second round.
        if reinvoking && !state.reinvoke.contains(&hook.uid) {
            continue;
        }
        let result = call_mutating(hook, attrs, cluster, warnings).await;
        if matches!(result, Ok(true)) {
            state.require_reinvoking_previous();
            changed_any = true;
        }
        if hook.reinvoke_if_needed {
            state.previously_invoked.insert(hook.uid.clone());
        }
        match result {
            Ok(_) => {}
            Err(Failure::Calling(reason)) if hook.failure_policy == FailurePolicy::Ignore => {
                tracing::warn!(webhook = %hook.name, %reason, "failed calling webhook, failing open");
            }
            Err(Failure::Calling(reason)) => {
                tracing::warn!(webhook = %hook.name, %reason, "failed calling webhook, failing closed");
                return Err(calling_error(hook, &reason));
            }
            Err(Failure::Rejected(e) | Failure::Error(e)) => return Err(e),
        }
    }
    Ok(changed_any)
}

/// The validating pass: every matching webhook at once; the first failure in webhook
/// order is the request's.
pub async fn validate(
    hooks: &[Arc<Webhook>],
    attrs: &Attributes<'_>,
    cluster: &dyn Cluster,
    warnings: &mut Vec<String>,
) -> ApiResult<()> {
    let mut ns_labels = NamespaceLabels::default();
    let mut selected = Vec::new();
    for hook in hooks {
        if should_call(hook, attrs, cluster, &mut ns_labels).await? {
            selected.push(hook);
        }
    }
    let results = futures::future::join_all(selected.iter().map(|h| call(h, attrs, false, cluster))).await;
    let mut first = None;
    for (hook, result) in selected.iter().zip(results) {
        let err = match result {
            Ok(outcome) => {
                warnings.extend(outcome.warnings);
                if outcome.allowed {
                    continue;
                }
                review::rejection(&hook.name, outcome.status.as_ref())
            }
            Err(Failure::Calling(reason)) if hook.failure_policy == FailurePolicy::Ignore => {
                tracing::warn!(webhook = %hook.name, %reason, "failed calling webhook, failing open");
                continue;
            }
            Err(Failure::Calling(reason)) => {
                tracing::warn!(webhook = %hook.name, %reason, "failed calling webhook, failing closed");
                calling_error(hook, &reason)
            }
            Err(Failure::Rejected(e) | Failure::Error(e)) => e,
        };
        first.get_or_insert(err);
    }
    first.map_or(Ok(()), Err)
}
