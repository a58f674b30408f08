//! LimitRanger (upstream's `plugin/pkg/admission/limitranger`): the LimitRanges of a
//! namespace give new pods' containers their default requests and limits (mutating
//! pass), then bound what containers, whole pods and claims may ask for (validating pass).
//!
//! Pod updates are not checked: containers and their resources cannot change after
//! creation, as upstream notes. Claims are checked on create and update.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use component_base::quantity::{format_milli, is_binary, parse_milli};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};

use super::Context;
use crate::admission::{Attributes, Operation, Plugin, forbidden, lookup};
use crate::errors::ApiResult;
use crate::registry::store::{ListOptions, Store};
use crate::validation::canonical_quantity;

const ANNOTATION: &str = "kubernetes.io/limit-ranger";
/// How long a live lookup of a namespace without cached LimitRanges is reused.
const LIVE_TTL: Duration = Duration::from_secs(30);

pub struct LimitRanger {
    limit_ranges: Arc<Store>,
    /// Namespaces whose cache showed no LimitRange, with what a consistent read found.
    live: Mutex<HashMap<String, (Instant, Vec<Value>)>>,
}

impl LimitRanger {
    pub fn new(ctx: &Context<'_>) -> Result<Self, String> {
        Ok(Self {
            limit_ranges: lookup::store(ctx.registry, "", "v1", "limitranges")?,
            live: Mutex::new(HashMap::new()),
        })
    }

    /// The namespace's LimitRanges: the cache's, or when it has none, a consistent read
    /// (reused for a while), since the cache may not have seen one created a moment ago.
    async fn limit_ranges(&self, ns: &str) -> ApiResult<Vec<Value>> {
        let cached = lookup::list(&self.limit_ranges, Some(ns)).await?;
        if !cached.is_empty() {
            return Ok(cached);
        }
        if let Some((at, items)) = self.live.lock().get(ns)
            && at.elapsed() < LIVE_TTL
        {
            return Ok(items.clone());
        }
        let opts = ListOptions {
            filter: crate::cacher::Filter { namespace: Some(ns.to_string()), ..Default::default() },
            ..Default::default()
        };
        let list = self.limit_ranges.list(&opts).await?;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let mut live = self.live.lock();
        live.retain(|_, (at, _)| at.elapsed() < LIVE_TTL);
        live.insert(ns.to_string(), (Instant::now(), items.clone()));
        Ok(items)
    }
}

/// Whether the write concerns LimitRanger: pods created, claims created or updated, never
/// subresources, never objects already being deleted.
fn applies(attrs: &Attributes<'_>) -> bool {
    let pod = attrs.is("", "pods") && attrs.operation == Operation::Create;
    let claim = attrs.is("", "persistentvolumeclaims")
        && matches!(attrs.operation, Operation::Create | Operation::Update);
    let deleting = attrs.old_object.is_some_and(|o| !o["metadata"]["deletionTimestamp"].is_null());
    (pod || claim) && attrs.namespace.is_some() && attrs.object.is_some() && !deleting
}

#[async_trait::async_trait]
impl Plugin for LimitRanger {
    fn name(&self) -> &'static str {
        "LimitRanger"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> ApiResult<()> {
        if !applies(attrs) || !attrs.is("", "pods") {
            return Ok(());
        }
        let ranges = self.limit_ranges(attrs.namespace.unwrap_or_default()).await?;
        let Some(pod) = attrs.object.as_mut() else { return Ok(()) };
        let mut changed = false;
        for lr in &ranges {
            changed |= default_pod(lr, pod);
        }
        if changed && pod["status"]["qosClass"].is_string() {
            // The QoS class was computed before these defaults (upstream computes it after
            // admission): compute it again.
            let qos = crate::registry::resources::core::pod_spec::qos_class(&pod["spec"]);
            pod["status"]["qosClass"] = json!(qos);
        }
        Ok(())
    }

    async fn validate(&self, attrs: &Attributes<'_>) -> ApiResult<()> {
        if !applies(attrs) {
            return Ok(());
        }
        let ranges = self.limit_ranges(attrs.namespace.unwrap_or_default()).await?;
        let Some(obj) = &attrs.object else { return Ok(()) };
        let pod = attrs.is("", "pods");
        for lr in &ranges {
            let errs = if pod { validate_pod(lr, obj) } else { validate_claim(lr, obj) };
            if !errs.is_empty() {
                return Err(forbidden(attrs, aggregate(&errs)));
            }
        }
        Ok(())
    }
}

/// Upstream's error aggregate: one message alone, several in brackets.
fn aggregate(errs: &[String]) -> String {
    match errs {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

fn items(lr: &Value) -> impl Iterator<Item = &Value> {
    lr["spec"]["limits"].as_array().into_iter().flatten()
}

fn list_of(v: &Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

/// Gives the pod's containers and init containers the LimitRange's `Container` defaults
/// they lack, and records what it set in the `kubernetes.io/limit-ranger` annotation.
/// Returns whether the pod changed.
pub fn default_pod(lr: &Value, pod: &mut Value) -> bool {
    let (mut limits, mut requests) = (Map::new(), Map::new());
    for item in items(lr).filter(|i| i["type"] == "Container") {
        requests.extend(list_of(&item["defaultRequest"]));
        limits.extend(list_of(&item["default"]));
    }
    let mut notes = Vec::new();
    for (list, what) in [("containers", "container"), ("initContainers", "init container")] {
        let Some(containers) = pod["spec"].get_mut(list).and_then(Value::as_array_mut) else { continue };
        for c in containers {
            let name = c["name"].as_str().unwrap_or_default().to_string();
            let mut set = |field: &str, defaults: &Map<String, Value>| -> Vec<String> {
                let mut added = Vec::new();
                for (k, q) in defaults {
                    if c["resources"][field].get(k).is_none() {
                        if !c["resources"].is_object() {
                            c["resources"] = json!({});
                        }
                        if !c["resources"][field].is_object() {
                            c["resources"][field] = json!({});
                        }
                        c["resources"][field][k] = q.clone();
                        added.push(k.clone());
                    }
                }
                added.sort();
                added
            };
            let set_limits = set("limits", &limits);
            let set_requests = set("requests", &requests);
            if !set_requests.is_empty() {
                notes.push(format!("{} request for {what} {name}", set_requests.join(", ")));
            }
            if !set_limits.is_empty() {
                notes.push(format!("{} limit for {what} {name}", set_limits.join(", ")));
            }
        }
    }
    if notes.is_empty() {
        return false;
    }
    if !pod["metadata"]["annotations"].is_object() {
        pod["metadata"]["annotations"] = json!({});
    }
    pod["metadata"]["annotations"][ANNOTATION] =
        json!(format!("LimitRanger plugin set: {}", notes.join("; ")));
    true
}

/// A quantity as a value in thousandths and whether it is written in binary units.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Amount {
    milli: i64,
    binary: bool,
}

impl Amount {
    fn parse(q: &Value) -> Option<Self> {
        let s = q.as_str()?;
        Some(Self { milli: parse_milli(s)?, binary: is_binary(s) })
    }

    fn show(self) -> String {
        format_milli(self.milli, self.binary)
    }
}

/// A resource list as amounts, with the text each quantity prints as.
type Resources = BTreeMap<String, (Amount, String)>;

fn resources(list: &Value) -> Resources {
    list.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, q)| {
            let a = Amount::parse(q)?;
            Some((k.clone(), (a, canonical_quantity(q.as_str().unwrap_or_default()))))
        })
        .collect()
}

fn enforced_text(q: &Value) -> String {
    canonical_quantity(q.as_str().unwrap_or_default())
}

fn min_constraint(
    kind: &str,
    res: &str,
    enforced: &Value,
    req: &Resources,
    lim: &Resources,
) -> Option<String> {
    let e = Amount::parse(enforced)?.milli;
    let shown = enforced_text(enforced);
    let Some((r, r_text)) = req.get(res) else {
        return Some(format!("minimum {res} usage per {kind} is {shown}.  No request is specified"));
    };
    if r.milli < e {
        return Some(format!("minimum {res} usage per {kind} is {shown}, but request is {r_text}"));
    }
    if let Some((l, l_text)) = lim.get(res)
        && l.milli < e
    {
        return Some(format!("minimum {res} usage per {kind} is {shown}, but limit is {l_text}"));
    }
    None
}

fn max_constraint(
    kind: &str,
    res: &str,
    enforced: &Value,
    req: &Resources,
    lim: &Resources,
) -> Option<String> {
    let e = Amount::parse(enforced)?.milli;
    let shown = enforced_text(enforced);
    let Some((l, l_text)) = lim.get(res) else {
        return Some(format!("maximum {res} usage per {kind} is {shown}.  No limit is specified"));
    };
    if l.milli > e {
        return Some(format!("maximum {res} usage per {kind} is {shown}, but limit is {l_text}"));
    }
    if let Some((r, r_text)) = req.get(res)
        && r.milli > e
    {
        return Some(format!("maximum {res} usage per {kind} is {shown}, but request is {r_text}"));
    }
    None
}

/// The max of a claim, which only has requests.
fn max_request_constraint(kind: &str, res: &str, enforced: &Value, req: &Resources) -> Option<String> {
    let e = Amount::parse(enforced)?.milli;
    let shown = enforced_text(enforced);
    match req.get(res) {
        None => Some(format!("maximum {res} usage per {kind} is {shown}.  No request is specified")),
        Some((r, r_text)) if r.milli > e => {
            Some(format!("maximum {res} usage per {kind} is {shown}, but request is {r_text}"))
        }
        Some(_) => None,
    }
}

fn ratio_constraint(
    kind: &str,
    res: &str,
    enforced: &Value,
    req: &Resources,
    lim: &Resources,
) -> Option<String> {
    let e = Amount::parse(enforced)?.milli;
    let shown = enforced_text(enforced);
    let r = req.get(res).map(|(a, _)| a.milli).filter(|m| *m != 0);
    let Some(r) = r else {
        return Some(format!(
            "{res} max limit to request ratio per {kind} is {shown}, but no request is specified or request is 0"
        ));
    };
    let Some(l) = lim.get(res).map(|(a, _)| a.milli).filter(|m| *m != 0) else {
        return Some(format!(
            "{res} max limit to request ratio per {kind} is {shown}, but no limit is specified or limit is 0"
        ));
    };
    let observed = l as f64 / r as f64;
    (observed * 1000.0 > e as f64).then(|| {
        format!("{res} max limit to request ratio per {kind} is {shown}, but provided ratio is {observed:.6}")
    })
}

/// Min, max and ratio of one LimitRange item against `req`/`lim`.
fn check_item(item: &Value, kind: &str, req: &Resources, lim: &Resources, errs: &mut Vec<String>) {
    for (res, q) in item["min"].as_object().into_iter().flatten() {
        errs.extend(min_constraint(kind, res, q, req, lim));
    }
    for (res, q) in item["max"].as_object().into_iter().flatten() {
        errs.extend(max_constraint(kind, res, q, req, lim));
    }
    for (res, q) in item["maxLimitRequestRatio"].as_object().into_iter().flatten() {
        errs.extend(ratio_constraint(kind, res, q, req, lim));
    }
}

fn add(to: &mut Resources, from: &Resources) {
    for (k, (a, _)) in from {
        let e = to.entry(k.clone()).or_insert((Amount { milli: 0, binary: a.binary }, String::new()));
        e.0.milli = e.0.milli.saturating_add(a.milli);
    }
}

fn max_into(to: &mut Resources, from: &Resources) {
    for (k, (a, _)) in from {
        let e = to.entry(k.clone()).or_insert((*a, String::new()));
        if a.milli > e.0.milli {
            e.0 = *a;
        }
    }
}

/// The pod's effective requests or limits (upstream's `podRequests`/`podLimits`): the app
/// containers and sidecars summed, or the largest init container stage if more.
fn pod_total(spec: &Value, field: &str) -> Resources {
    let of = |c: &Value| resources(&c["resources"][field]);
    let mut total = Resources::new();
    for c in spec["containers"].as_array().into_iter().flatten() {
        add(&mut total, &of(c));
    }
    let (mut sidecars, mut init) = (Resources::new(), Resources::new());
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        let own = of(c);
        let stage = if c["restartPolicy"] == "Always" {
            add(&mut total, &own);
            add(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut s = own.clone();
            add(&mut s, &sidecars);
            s
        };
        max_into(&mut init, &stage);
    }
    max_into(&mut total, &init);
    for (a, text) in total.values_mut() {
        *text = a.show();
    }
    total
}

/// The errors of a pod against one LimitRange's `Container` and `Pod` items.
pub fn validate_pod(lr: &Value, pod: &Value) -> Vec<String> {
    let spec = &pod["spec"];
    let mut errs = Vec::new();
    for item in items(lr) {
        match item["type"].as_str() {
            Some("Container") => {
                for list in ["containers", "initContainers"] {
                    for c in spec[list].as_array().into_iter().flatten() {
                        let (req, lim) =
                            (resources(&c["resources"]["requests"]), resources(&c["resources"]["limits"]));
                        check_item(item, "Container", &req, &lim, &mut errs);
                    }
                }
            }
            Some("Pod") => {
                let (req, lim) = (pod_total(spec, "requests"), pod_total(spec, "limits"));
                check_item(item, "Pod", &req, &lim, &mut errs);
            }
            _ => {}
        }
    }
    errs
}

/// The errors of a claim against one LimitRange's `PersistentVolumeClaim` items (only its
/// requests count: a claim's limits are not user input).
pub fn validate_claim(lr: &Value, pvc: &Value) -> Vec<String> {
    let req = resources(&pvc["spec"]["resources"]["requests"]);
    let mut errs = Vec::new();
    for item in items(lr).filter(|i| i["type"] == "PersistentVolumeClaim") {
        for (res, q) in item["min"].as_object().into_iter().flatten() {
            errs.extend(min_constraint("PersistentVolumeClaim", res, q, &req, &Resources::new()));
        }
        for (res, q) in item["max"].as_object().into_iter().flatten() {
            errs.extend(max_request_constraint("PersistentVolumeClaim", res, q, &req));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lr() -> Value {
        json!({ "spec": { "limits": [
            { "type": "Container",
              "default": { "cpu": "500m", "memory": "256Mi" },
              "defaultRequest": { "cpu": "250m", "memory": "128Mi" },
              "max": { "cpu": "1" },
              "maxLimitRequestRatio": { "memory": "2" } },
            { "type": "Pod", "max": { "memory": "1Gi" } },
            { "type": "PersistentVolumeClaim", "min": { "storage": "1Gi" }, "max": { "storage": "10Gi" } },
        ]}})
    }

    #[test]
    fn defaults_and_annotation() {
        let mut pod = json!({ "metadata": { "name": "p" }, "spec": {
            "containers": [
                { "name": "a", "image": "x" },
                { "name": "b", "image": "x", "resources": { "limits": { "cpu": "800m" }, "requests": { "cpu": "800m" } } },
            ],
            "initContainers": [{ "name": "i", "image": "x" }],
        }});
        assert!(default_pod(&lr(), &mut pod));
        let a = &pod["spec"]["containers"][0]["resources"];
        assert_eq!(a["limits"], json!({ "cpu": "500m", "memory": "256Mi" }));
        assert_eq!(a["requests"], json!({ "cpu": "250m", "memory": "128Mi" }));
        assert_eq!(pod["spec"]["containers"][1]["resources"]["limits"]["cpu"], "800m");
        assert_eq!(pod["spec"]["initContainers"][0]["resources"]["requests"]["memory"], "128Mi");
        assert_eq!(
            pod["metadata"]["annotations"][ANNOTATION],
            "LimitRanger plugin set: cpu, memory request for container a; cpu, memory limit for container a; \
             memory request for container b; memory limit for container b; \
             cpu, memory request for init container i; cpu, memory limit for init container i"
        );
        assert!(validate_pod(&lr(), &pod).is_empty(), "{:?}", validate_pod(&lr(), &pod));
        let mut again = pod.clone();
        assert!(!default_pod(&lr(), &mut again));
    }

    #[test]
    fn container_pod_and_claim_bounds() {
        let pod = json!({ "spec": { "containers": [{ "name": "c", "resources": {
            "limits": { "cpu": "2", "memory": "600Mi" }, "requests": { "cpu": "1", "memory": "200Mi" } } }] } });
        assert_eq!(
            validate_pod(&lr(), &pod),
            vec![
                "maximum cpu usage per Container is 1, but limit is 2".to_string(),
                "memory max limit to request ratio per Container is 2, but provided ratio is 3.000000"
                    .to_string(),
            ]
        );
        let big = json!({ "spec": { "containers": [
            { "name": "a", "resources": { "limits": { "cpu": "1", "memory": "800Mi" }, "requests": { "cpu": "1", "memory": "800Mi" } } },
            { "name": "b", "resources": { "limits": { "cpu": "1", "memory": "800Mi" }, "requests": { "cpu": "1", "memory": "800Mi" } } },
        ] } });
        assert_eq!(
            validate_pod(&lr(), &big),
            vec!["maximum memory usage per Pod is 1Gi, but limit is 1600Mi".to_string()]
        );
        let none = json!({ "spec": { "containers": [{ "name": "c" }] } });
        assert_eq!(
            validate_pod(&lr(), &none)[0],
            "maximum cpu usage per Container is 1.  No limit is specified"
        );
        let small = json!({ "spec": { "resources": { "requests": { "storage": "500Mi" } } } });
        assert_eq!(
            validate_claim(&lr(), &small),
            vec!["minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi".to_string()]
        );
        let large = json!({ "spec": { "resources": { "requests": { "storage": "20Gi" } } } });
        assert_eq!(
            validate_claim(&lr(), &large),
            vec!["maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi".to_string()]
        );
        assert_eq!(aggregate(&["a".into(), "b".into()]), "[a, b]");
    }
}
