//! ResourceQuota (upstream's `plugin/resourcequota` admission controller with the
//! evaluators of `pkg/quota/v1/evaluator/core`): a write that would take a namespace past
//! a ResourceQuota's `status.hard` is refused, and one that fits is charged to the quota's
//! `status.used` before the object is stored, so concurrent writes cannot all squeeze
//! through the same headroom.
//!
//! The charge is an optimistic-concurrency write of the quota read fresh from etcd, retried
//! on conflict (only for the quotas whose write failed: the others are charged already).
//! Writes in one namespace are charged one at a time, as upstream's per-namespace work
//! queue does. The kube-controller-manager's resourcequota controller recomputes
//! `status.used` from what really exists, giving back charges whose objects were never
//! stored.
//!
//! A quota covers an object when its `status.hard` names a resource the object's
//! evaluator counts and its scopes match (only pods have scopes); a quota whose status
//! the controller has not filled in yet covers nothing, as upstream.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use component_base::quantity::{format_milli, is_binary, parse_milli};
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::Context;
use crate::admission::{Attributes, Operation, Plugin, forbidden, lookup};
use crate::errors::{ApiError, ApiResult};
use crate::registry::resource::ResourceInfo;
use crate::registry::resources::core::pod_spec::qos_class;
use crate::registry::store::Store;
use crate::validation::canonical_quantity;

/// Attempts to charge quotas whose write conflicted.
const RETRIES: usize = 10;
const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";

/// A quantity in thousandths, and whether it prints in binary units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Amount {
    pub milli: i64,
    pub binary: bool,
}

impl Amount {
    fn count(n: i64) -> Self {
        Self { milli: n.saturating_mul(1000), binary: false }
    }

    fn parse(q: &Value) -> Option<Self> {
        let s = q.as_str()?;
        Some(Self { milli: parse_milli(s)?, binary: is_binary(s) })
    }
}

/// Usage per quota resource name.
pub type Usage = BTreeMap<String, Amount>;

fn add_to(usage: &mut Usage, key: &str, a: Amount) {
    usage.entry(key.to_string()).and_modify(|e| e.milli = e.milli.saturating_add(a.milli)).or_insert(a);
}

/// How the usage of one kind of object is measured (upstream's `quota.Evaluator`).
#[derive(Clone, Debug, PartialEq)]
pub enum Evaluator {
    Pods,
    Services,
    Claims,
    /// Object counts: `count/<resource>[.<group>]` and, for some core resources, the
    /// legacy name (`configmaps`, `secrets`, ...).
    Count(Vec<String>),
}

/// The evaluator of a resource; None for resources quota ignores (events).
pub fn evaluator(info: &ResourceInfo) -> Option<Evaluator> {
    match (info.group, info.plural) {
        ("", "events") => None,
        ("", "pods") => Some(Evaluator::Pods),
        ("", "services") => Some(Evaluator::Services),
        ("", "persistentvolumeclaims") => Some(Evaluator::Claims),
        ("", p @ ("configmaps" | "resourcequotas" | "replicationcontrollers" | "secrets")) => {
            Some(Evaluator::Count(vec![format!("count/{p}"), p.to_string()]))
        }
        ("", p) => Some(Evaluator::Count(vec![format!("count/{p}")])),
        (g, p) => Some(Evaluator::Count(vec![format!("count/{p}.{g}")])),
    }
}

const POD_RESOURCES: &[&str] = &[
    "count/pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
];
const SERVICE_RESOURCES: &[&str] =
    &["count/services", "services", "services.loadbalancers", "services.nodeports"];
const CLAIM_RESOURCES: &[&str] = &["persistentvolumeclaims", "requests.storage"];
/// Resources every container must declare when a quota limits them (upstream's
/// backward-compatible `validationSet`).
const MUST_DECLARE: &[&str] =
    &["cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"];

/// A resource in the `kubernetes.io` domain or without a domain.
fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

impl Evaluator {
    /// Whether the operation can change usage.
    pub fn handles(&self, op: Operation) -> bool {
        match self {
            Evaluator::Pods | Evaluator::Count(_) => op == Operation::Create,
            Evaluator::Services | Evaluator::Claims => matches!(op, Operation::Create | Operation::Update),
        }
    }

    /// The names among `hard` this evaluator counts.
    pub fn matching(&self, hard: &[String]) -> Vec<String> {
        hard.iter()
            .filter(|h| match self {
                Evaluator::Pods => {
                    POD_RESOURCES.contains(&h.as_str())
                        || h.starts_with("hugepages-")
                        || h.starts_with("requests.hugepages-")
                        || (!is_native(h) && h.starts_with("requests."))
                }
                Evaluator::Services => SERVICE_RESOURCES.contains(&h.as_str()),
                Evaluator::Claims => {
                    h.as_str() == "count/persistentvolumeclaims"
                        || CLAIM_RESOURCES.contains(&h.as_str())
                        || CLAIM_RESOURCES.iter().any(|r| h.ends_with(&format!("{STORAGE_CLASS_SUFFIX}{r}")))
                }
                Evaluator::Count(names) => names.contains(h),
            })
            .cloned()
            .collect()
    }

    /// Whether the quota's scopes cover the object (only pods have scopes).
    pub fn scopes_match(&self, quota: &Value, obj: &Value) -> bool {
        let selectors = scope_selectors(quota);
        match self {
            Evaluator::Pods => {
                selectors.iter().all(|(scope, op, values)| pod_matches_scope(obj, scope, op, values))
            }
            _ => selectors.is_empty(),
        }
    }

    /// Whether `quota` covers `obj` (upstream's `generic.Matches`).
    pub fn matches(&self, quota: &Value, obj: &Value) -> bool {
        !self.matching(&names(&quota["status"]["hard"])).is_empty() && self.scopes_match(quota, obj)
    }

    pub fn usage(&self, obj: &Value) -> Usage {
        match self {
            Evaluator::Pods => pod_usage(obj),
            Evaluator::Services => service_usage(obj),
            Evaluator::Claims => claim_usage(obj),
            Evaluator::Count(names) => names.iter().map(|n| (n.clone(), Amount::count(1))).collect(),
        }
    }

    /// What the object must declare for the quota's resources (pods only).
    pub fn constraints(&self, required: &[String], obj: &Value) -> Result<(), String> {
        if *self != Evaluator::Pods {
            return Ok(());
        }
        let required: BTreeSet<&str> =
            required.iter().map(String::as_str).filter(|r| MUST_DECLARE.contains(r)).collect();
        let mut missing: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for list in ["containers", "initContainers"] {
            for c in obj["spec"][list].as_array().into_iter().flatten() {
                let usage = compute_usage(
                    &requests_of(&c["resources"]["requests"]),
                    &requests_of(&c["resources"]["limits"]),
                );
                for r in &required {
                    if !usage.contains_key(*r) {
                        missing
                            .entry(r)
                            .or_default()
                            .insert(c["name"].as_str().unwrap_or_default().to_string());
                    }
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let parts: Vec<String> = missing
            .iter()
            .map(|(r, names)| format!("{r} for: {}", names.iter().cloned().collect::<Vec<_>>().join(",")))
            .collect();
        Err(format!("must specify {}", parts.join("; ")))
    }
}

/// The resource names of a resource list.
fn names(list: &Value) -> Vec<String> {
    list.as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default()
}

/// A quota's scopes as selector requirements: (scope, operator, values).
fn scope_selectors(quota: &Value) -> Vec<(String, String, Vec<String>)> {
    let spec = &quota["spec"];
    let mut out: Vec<(String, String, Vec<String>)> = spec["scopes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str())
        .map(|s| (s.to_string(), "Exists".to_string(), Vec::new()))
        .collect();
    for e in spec["scopeSelector"]["matchExpressions"].as_array().into_iter().flatten() {
        let values = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        out.push((
            e["scopeName"].as_str().unwrap_or_default().to_string(),
            e["operator"].as_str().unwrap_or_default().to_string(),
            values,
        ));
    }
    out
}

fn cross_namespace_affinity(spec: &Value) -> bool {
    let a = &spec["affinity"];
    let mut terms: Vec<&Value> = Vec::new();
    for kind in ["podAffinity", "podAntiAffinity"] {
        terms.extend(
            a[kind]["requiredDuringSchedulingIgnoredDuringExecution"].as_array().into_iter().flatten(),
        );
        terms.extend(
            a[kind]["preferredDuringSchedulingIgnoredDuringExecution"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|w| &w["podAffinityTerm"]),
        );
    }
    terms.iter().any(|t| {
        t["namespaces"].as_array().is_some_and(|n| !n.is_empty()) || !t["namespaceSelector"].is_null()
    })
}

/// Whether a pod matches one scope requirement (upstream's `podMatchesScopeFunc`).
pub fn pod_matches_scope(pod: &Value, scope: &str, op: &str, values: &[String]) -> bool {
    let spec = &pod["spec"];
    let terminating = spec["activeDeadlineSeconds"].as_i64().is_some_and(|d| d >= 0);
    let best_effort = qos_class(spec) == "BestEffort";
    match scope {
        "Terminating" => terminating,
        "NotTerminating" => !terminating,
        "BestEffort" => best_effort,
        "NotBestEffort" => !best_effort,
        "CrossNamespacePodAffinity" => cross_namespace_affinity(spec),
        "PriorityClass" => {
            let class = spec["priorityClassName"].as_str().filter(|c| !c.is_empty());
            match op {
                "Exists" => class.is_some(),
                "DoesNotExist" => class.is_none(),
                "In" => class.is_some_and(|c| values.iter().any(|v| v == c)),
                "NotIn" => class.is_none_or(|c| !values.iter().any(|v| v == c)),
                _ => false,
            }
        }
        _ => false,
    }
}

fn requests_of(list: &Value) -> Usage {
    list.as_object().into_iter().flatten().filter_map(|(k, q)| Some((k.clone(), Amount::parse(q)?))).collect()
}

fn max_into(to: &mut Usage, from: &Usage) {
    for (k, a) in from {
        let e = to.entry(k.clone()).or_insert(*a);
        if a.milli > e.milli {
            *e = *a;
        }
    }
}

/// A pod's effective requests or limits (upstream's `PodRequests`/`PodLimits`): app
/// containers and sidecars summed, or the largest init container stage if more, plus the
/// pod overhead (for limits, only of resources that are limited).
pub fn pod_resources(spec: &Value, field: &str) -> Usage {
    let of = |c: &Value| requests_of(&c["resources"][field]);
    let mut total = Usage::new();
    for c in spec["containers"].as_array().into_iter().flatten() {
        for (k, a) in of(c) {
            add_to(&mut total, &k, a);
        }
    }
    let (mut sidecars, mut init) = (Usage::new(), Usage::new());
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        let own = of(c);
        let stage = if c["restartPolicy"] == "Always" {
            for (k, a) in &own {
                add_to(&mut total, k, *a);
                add_to(&mut sidecars, k, *a);
            }
            sidecars.clone()
        } else {
            let mut s = own.clone();
            for (k, a) in &sidecars {
                add_to(&mut s, k, *a);
            }
            s
        };
        max_into(&mut init, &stage);
    }
    max_into(&mut total, &init);
    for (k, a) in requests_of(&spec["overhead"]) {
        if field == "requests" || total.contains_key(&k) {
            add_to(&mut total, &k, a);
        }
    }
    total
}

/// The quota resources a pod's requests and limits make up (upstream's
/// `podComputeUsageHelper`).
fn compute_usage(requests: &Usage, limits: &Usage) -> Usage {
    let mut out = Usage::new();
    out.insert("pods".into(), Amount::count(1));
    for r in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(a) = requests.get(r) {
            out.insert(r.into(), *a);
            out.insert(format!("requests.{r}"), *a);
        }
        if let Some(a) = limits.get(r) {
            out.insert(format!("limits.{r}"), *a);
        }
    }
    for (k, a) in requests {
        if k.starts_with("hugepages-") {
            out.insert(k.clone(), *a);
            out.insert(format!("requests.{k}"), *a);
        } else if !is_native(k) && !k.starts_with("requests.") {
            out.insert(format!("requests.{k}"), *a);
        }
    }
    out
}

/// A pod's usage: always its object count; compute resources and `pods` unless finished.
pub fn pod_usage(pod: &Value) -> Usage {
    let mut usage = Usage::new();
    usage.insert("count/pods".into(), Amount::count(1));
    if matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed")) {
        return usage;
    }
    let spec = &pod["spec"];
    usage.extend(compute_usage(&pod_resources(spec, "requests"), &pod_resources(spec, "limits")));
    usage
}

pub fn service_usage(svc: &Value) -> Usage {
    let spec = &svc["spec"];
    let ports = spec["ports"].as_array().cloned().unwrap_or_default();
    let mut usage = Usage::new();
    usage.insert("count/services".into(), Amount::count(1));
    usage.insert("services".into(), Amount::count(1));
    let (mut lbs, mut node_ports) = (0, 0);
    match spec["type"].as_str() {
        Some("NodePort") => node_ports = ports.len() as i64,
        Some("LoadBalancer") => {
            lbs = 1;
            node_ports = if spec["allocateLoadBalancerNodePorts"] == false {
                ports.iter().filter(|p| p["nodePort"].as_i64().unwrap_or(0) != 0).count() as i64
            } else {
                ports.len() as i64
            };
        }
        _ => {}
    }
    usage.insert("services.loadbalancers".into(), Amount::count(lbs));
    usage.insert("services.nodeports".into(), Amount::count(node_ports));
    usage
}

pub fn claim_usage(pvc: &Value) -> Usage {
    let mut usage = Usage::new();
    usage.insert("count/persistentvolumeclaims".into(), Amount::count(1));
    usage.insert("persistentvolumeclaims".into(), Amount::count(1));
    let class = super::pvc_resize::claim_class(pvc);
    if !class.is_empty() {
        usage.insert(format!("{class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"), Amount::count(1));
    }
    // Storage counts in whole bytes; a larger allocation (an expansion in progress) wins.
    let bytes = |q: &Value| {
        Amount::parse(q).map(|a| Amount {
            milli: a.milli.div_euclid(1000) * 1000 + 1000 * i64::from(a.milli % 1000 != 0),
            ..a
        })
    };
    let requested = bytes(&pvc["spec"]["resources"]["requests"]["storage"]);
    let allocated = bytes(&pvc["status"]["allocatedResources"]["storage"]);
    let storage = match (requested, allocated) {
        (Some(r), Some(a)) if a.milli > r.milli => Some(a),
        (r, _) => r,
    };
    if let Some(s) = storage {
        usage.insert("requests.storage".into(), s);
        if !class.is_empty() {
            usage.insert(format!("{class}{STORAGE_CLASS_SUFFIX}requests.storage"), s);
        }
    }
    usage
}

/// `k=v,...` sorted by name (upstream's `prettyPrint`).
pub fn pretty(list: &BTreeMap<String, String>) -> String {
    list.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

fn show(a: Amount) -> String {
    format_milli(a.milli, a.binary)
}

/// What one quota would become with `delta` charged: the new `status.used`, or the
/// refusal. None when the delta does not touch the quota's resources.
pub fn charge(quota: &Value, delta: &Usage, check: bool) -> Result<Option<Value>, String> {
    let hard = &quota["status"]["hard"];
    let used = &quota["status"]["used"];
    let name = lookup::name(quota);
    let requested: Usage = delta
        .iter()
        .filter(|(k, a)| a.milli != 0 && hard.get(k.as_str()).is_some())
        .map(|(k, a)| (k.clone(), *a))
        .collect();
    if requested.is_empty() {
        return Ok(None);
    }
    let used_of = |k: &str| used.get(k).and_then(Amount::parse).map_or(0, |a| a.milli);
    let mut exceeded = Vec::new();
    for (k, a) in &requested {
        let new = used_of(k).saturating_add(a.milli);
        if let Some(h) = hard.get(k.as_str()).and_then(Amount::parse)
            && new > h.milli
        {
            exceeded.push(k.clone());
        }
    }
    if check && !exceeded.is_empty() {
        let text = |v: &Value, k: &str| canonical_quantity(v.get(k).and_then(Value::as_str).unwrap_or("0"));
        let requested_text: BTreeMap<String, String> =
            exceeded.iter().map(|k| (k.clone(), show(requested[k]))).collect();
        let used_text: BTreeMap<String, String> = exceeded
            .iter()
            .filter(|k| used.get(k.as_str()).is_some())
            .map(|k| (k.clone(), text(used, k)))
            .collect();
        let hard_text: BTreeMap<String, String> =
            exceeded.iter().map(|k| (k.clone(), text(hard, k))).collect();
        return Err(format!(
            "exceeded quota: {name}, requested: {}, used: {}, limited: {}",
            pretty(&requested_text),
            pretty(&used_text),
            pretty(&hard_text)
        ));
    }
    let mut new_used = used.as_object().cloned().unwrap_or_default();
    for (k, a) in &requested {
        let total = used_of(k).saturating_add(a.milli);
        let binary = hard[k.as_str()].as_str().is_some_and(is_binary);
        new_used.insert(k.clone(), json!(format_milli(total, binary)));
    }
    Ok(Some(Value::Object(new_used)))
}

/// `new - old`, never below zero.
fn subtract(new: &Usage, old: &Usage) -> Usage {
    new.iter()
        .map(|(k, a)| {
            let prev = old.get(k).map_or(0, |o| o.milli);
            (k.clone(), Amount { milli: (a.milli - prev).max(0), binary: a.binary })
        })
        .collect()
}

pub struct ResourceQuota {
    quotas: Arc<Store>,
    /// One charge at a time per namespace.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl ResourceQuota {
    pub fn new(ctx: &Context<'_>) -> Result<Self, String> {
        if ctx.config.take("ResourceQuota").is_some() {
            return Err(
                "failed to read plugin config: ResourceQuota: a ResourceQuotaConfiguration (limitedResources) is not supported by this server"
                    .into(),
            );
        }
        Ok(Self {
            quotas: lookup::store(ctx.registry, "", "v1", "resourcequotas")?,
            locks: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self, ns: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock();
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        locks.entry(ns.to_string()).or_default().clone()
    }
}

/// The refusals that come before any charge: what the object must declare, and quotas
/// whose usage the controller has not computed yet.
fn precheck(attrs: &Attributes<'_>, ev: &Evaluator, quota: &Value, obj: &Value) -> ApiResult<()> {
    let name = lookup::name(quota);
    let hard = names(&quota["status"]["hard"]);
    let restricted = ev.matching(&hard);
    if let Err(e) = ev.constraints(&restricted, obj) {
        return Err(forbidden(attrs, format!("failed quota: {name}: {e}")));
    }
    let used = &quota["status"]["used"];
    if restricted.iter().any(|r| used.get(r.as_str()).is_none()) {
        let mut sorted = restricted.clone();
        sorted.sort();
        return Err(forbidden(
            attrs,
            format!("status unknown for quota: {name}, resources: {}", sorted.join(",")),
        ));
    }
    Ok(())
}

#[async_trait::async_trait]
impl Plugin for ResourceQuota {
    fn name(&self) -> &'static str {
        "ResourceQuota"
    }

    async fn validate(&self, attrs: &Attributes<'_>) -> ApiResult<()> {
        if attrs.subresource.is_some() || !matches!(attrs.operation, Operation::Create | Operation::Update) {
            return Ok(());
        }
        let Some(ns) = attrs.namespace.filter(|n| !n.is_empty()) else { return Ok(()) };
        let Some(ev) = evaluator(attrs.resource) else { return Ok(()) };
        let Some(obj) = &attrs.object else { return Ok(()) };
        if !ev.handles(attrs.operation) {
            return Ok(());
        }
        // Quotas that may cover the object, as the cache shows them.
        let mut pending: Vec<String> = lookup::list(&self.quotas, Some(ns))
            .await?
            .iter()
            .filter(|q| ev.matches(q, obj))
            .map(|q| lookup::name(q).to_string())
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        let input = ev.usage(obj);
        let negative: Vec<&String> = input.iter().filter(|(_, a)| a.milli < 0).map(|(k, _)| k).collect();
        if !negative.is_empty() {
            let list: Vec<&str> = negative.iter().map(|s| s.as_str()).collect();
            return Err(forbidden(
                attrs,
                format!("quota usage is negative for resource(s): {}", list.join(",")),
            ));
        }
        // A real update (not a create through PUT) is charged the difference.
        let prev = attrs
            .old_object
            .filter(|o| o["metadata"]["resourceVersion"].as_str().is_some_and(|r| !r.is_empty()));
        let lock = self.lock(ns);
        let _charging = lock.lock().await;
        for _ in 0..RETRIES {
            let mut fresh = Vec::new();
            for name in &pending {
                match self.quotas.get_fresh(Some(ns), name).await {
                    Ok(found) => fresh.push(found),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
            let mut writes = Vec::new();
            for (quota, rev) in &fresh {
                if !ev.matches(quota, obj) {
                    continue;
                }
                precheck(attrs, &ev, quota, obj)?;
                let delta = match prev {
                    Some(old) if ev.matches(quota, old) => subtract(&input, &ev.usage(old)),
                    _ => input.clone(),
                };
                match charge(quota, &delta, true) {
                    Err(e) => return Err(forbidden(attrs, e)),
                    Ok(Some(used)) => writes.push((quota, *rev, used)),
                    Ok(None) => {}
                }
            }
            if attrs.dry_run || writes.is_empty() {
                return Ok(());
            }
            let mut conflicted = Vec::new();
            for (quota, rev, used) in writes {
                let mut updated = quota.clone();
                updated["status"]["used"] = used;
                let name = lookup::name(quota).to_string();
                match self.quotas.write_update(Some(ns), &name, updated, rev).await {
                    Ok(_) => {}
                    Err(e) if e.is_conflict() || e.is_not_found() => conflicted.push(name),
                    Err(e) => return Err(e),
                }
            }
            if conflicted.is_empty() {
                return Ok(());
            }
            pending = conflicted;
        }
        Err(ApiError::new(
            500,
            "InternalError",
            format!(
                "Internal error occurred: resource quota evaluation failed: the quotas {} kept changing",
                pending.join(", ")
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(hard: Value, used: Value) -> Value {
        json!({ "metadata": { "name": "q" }, "spec": { "hard": hard }, "status": { "hard": hard, "used": used } })
    }

    fn pod(containers: Value) -> Value {
        json!({ "metadata": { "name": "p" }, "spec": { "containers": containers }, "status": { "phase": "Pending" } })
    }

    #[test]
    fn exceeded_message_as_upstream() {
        let q = quota(json!({ "pods": "2" }), json!({ "pods": "2" }));
        let usage = Evaluator::Pods.usage(&pod(json!([{ "name": "c" }])));
        assert_eq!(
            charge(&q, &usage, true).unwrap_err(),
            "exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
        );
        let room = quota(
            json!({ "pods": "2", "requests.memory": "1Gi" }),
            json!({ "pods": "1", "requests.memory": "512Mi" }),
        );
        let p =
            pod(json!([{ "name": "c", "resources": { "requests": { "memory": "256Mi", "cpu": "100m" } } }]));
        let used = charge(&room, &Evaluator::Pods.usage(&p), true).unwrap().unwrap();
        assert_eq!(used, json!({ "pods": "2", "requests.memory": "768Mi" }));
        let big = pod(json!([{ "name": "c", "resources": { "requests": { "memory": "768Mi" } } }]));
        assert_eq!(
            charge(&room, &Evaluator::Pods.usage(&big), true).unwrap_err(),
            "exceeded quota: q, requested: requests.memory=768Mi, used: requests.memory=512Mi, limited: requests.memory=1Gi"
        );
        // Nothing the quota limits: no charge.
        let other = quota(json!({ "services": "1" }), json!({ "services": "0" }));
        assert_eq!(charge(&other, &Evaluator::Pods.usage(&p), true).unwrap(), None);
    }

    #[test]
    fn pods_must_declare_limited_compute_resources() {
        let p = pod(json!([
            { "name": "a", "resources": { "limits": { "cpu": "1" } } },
            { "name": "b" },
        ]));
        let required = vec!["limits.cpu".to_string(), "requests.memory".to_string(), "pods".to_string()];
        assert_eq!(
            Evaluator::Pods.constraints(&required, &p).unwrap_err(),
            "must specify limits.cpu for: b; requests.memory for: a,b"
        );
    }

    #[test]
    fn pod_usage_counts_requests_limits_and_finished_pods() {
        let p = json!({ "spec": {
            "containers": [
                { "name": "a", "resources": { "requests": { "cpu": "100m", "memory": "64Mi", "example.com/gpu": "1" }, "limits": { "cpu": "200m" } } },
                { "name": "b", "resources": { "requests": { "cpu": "150m" } } },
            ],
            "initContainers": [{ "name": "i", "resources": { "requests": { "cpu": "500m" } } }],
            "overhead": { "cpu": "10m" },
        }, "status": { "phase": "Running" } });
        let u = pod_usage(&p);
        assert_eq!(u["requests.cpu"].milli, 510);
        assert_eq!(u["cpu"].milli, 510);
        assert_eq!(u["limits.cpu"].milli, 210);
        assert_eq!(u["requests.memory"], Amount { milli: 64 * 1024 * 1024 * 1000, binary: true });
        assert_eq!(u["requests.example.com/gpu"].milli, 1000);
        assert_eq!(u["pods"].milli, 1000);
        let mut done = p.clone();
        done["status"]["phase"] = json!("Succeeded");
        assert_eq!(pod_usage(&done).keys().collect::<Vec<_>>(), vec!["count/pods"]);
    }

    #[test]
    fn scopes() {
        let best_effort = pod(json!([{ "name": "c" }]));
        let mut terminating = pod(json!([{ "name": "c", "resources": { "requests": { "cpu": "1" } } }]));
        terminating["spec"]["activeDeadlineSeconds"] = json!(10);
        terminating["spec"]["priorityClassName"] = json!("high");
        let scoped = |scopes: Value| json!({ "spec": { "scopes": scopes }, "status": { "hard": { "pods": "5" }, "used": { "pods": "0" } } });
        assert!(Evaluator::Pods.matches(&scoped(json!(["BestEffort"])), &best_effort));
        assert!(!Evaluator::Pods.matches(&scoped(json!(["BestEffort"])), &terminating));
        assert!(Evaluator::Pods.matches(&scoped(json!(["Terminating", "NotBestEffort"])), &terminating));
        let by_class = json!({ "spec": { "scopeSelector": { "matchExpressions": [
            { "scopeName": "PriorityClass", "operator": "In", "values": ["high"] }] } },
            "status": { "hard": { "pods": "5" }, "used": {} } });
        assert!(Evaluator::Pods.matches(&by_class, &terminating));
        assert!(!Evaluator::Pods.matches(&by_class, &best_effort));
        // Scoped quotas never cover other objects; quotas without status cover nothing.
        assert!(!Evaluator::Services.matches(&scoped(json!(["BestEffort"])), &json!({})));
        assert!(!Evaluator::Pods.matches(&json!({ "spec": { "hard": { "pods": "1" } } }), &best_effort));
    }

    #[test]
    fn evaluators_and_names() {
        use crate::registry::resource::info_of;
        use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
        let d = info_of::<Deployment>("deployment", &[], &[], true, &[], "deployments");
        assert_eq!(evaluator(&d), Some(Evaluator::Count(vec!["count/deployments.apps".into()])));
        let cm = info_of::<ConfigMap>("configmap", &[], &[], true, &[], "configmaps");
        let ev = evaluator(&cm).unwrap();
        assert_eq!(ev.matching(&["configmaps".into(), "pods".into()]), vec!["configmaps".to_string()]);
        let svc = service_usage(
            &json!({ "spec": { "type": "NodePort", "ports": [{ "port": 1 }, { "port": 2 }] } }),
        );
        assert_eq!(svc["services.nodeports"].milli, 2000);
        assert_eq!(svc["services.loadbalancers"].milli, 0);
        let pvc = claim_usage(
            &json!({ "spec": { "storageClassName": "fast", "resources": { "requests": { "storage": "10Gi" } } } }),
        );
        assert_eq!(pvc["fast.storageclass.storage.k8s.io/requests.storage"].milli, 10 * (1 << 30) * 1000);
        assert_eq!(pvc["requests.storage"].milli, 10 * (1 << 30) * 1000);
        assert!(
            Evaluator::Claims.matching(&["fast.storageclass.storage.k8s.io/requests.storage".into()]).len()
                == 1
        );
        let grown = subtract(
            &claim_usage(&json!({ "spec": { "resources": { "requests": { "storage": "2Gi" } } } })),
            &claim_usage(&json!({ "spec": { "resources": { "requests": { "storage": "1Gi" } } } })),
        );
        assert_eq!(grown["requests.storage"].milli, (1 << 30) * 1000);
        assert_eq!(grown["persistentvolumeclaims"].milli, 0);
    }
}
