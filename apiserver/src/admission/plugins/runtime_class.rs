//! RuntimeClass (upstream's `plugin/pkg/admission/runtimeclass`): a new pod that names a
//! RuntimeClass gets the class's pod overhead and its scheduling constraints (node
//! selector and tolerations merged into the pod's), and must not contradict them.

use std::collections::BTreeMap;
use std::sync::Arc;

use component_base::quantity::parse_milli;
use serde_json::{Map, Value, json};

use super::Context;
use crate::admission::{Attributes, Operation, Plugin, forbidden, lookup};
use crate::errors::ApiResult;
use crate::registry::store::Store;

pub struct RuntimeClass {
    classes: Arc<Store>,
}

impl RuntimeClass {
    pub fn new(ctx: &Context<'_>) -> Result<Self, String> {
        Ok(Self { classes: lookup::store(ctx.registry, "node.k8s.io", "v1", "runtimeclasses")? })
    }

    /// The pod's RuntimeClass (None when it names none); refuses a pod naming one that
    /// does not exist.
    async fn class(&self, attrs: &Attributes<'_>) -> ApiResult<Option<Value>> {
        let Some(name) = attrs.object.as_ref().and_then(|p| p["spec"]["runtimeClassName"].as_str()) else {
            return Ok(None);
        };
        match lookup::get(&self.classes, None, name).await? {
            Some(rc) => Ok(Some(rc)),
            None => Err(forbidden(attrs, format!("pod rejected: RuntimeClass \"{name}\" not found"))),
        }
    }
}

fn applies(attrs: &Attributes<'_>) -> bool {
    attrs.is("", "pods") && attrs.operation == Operation::Create && attrs.object.is_some()
}

/// Resource lists compared by value (`1` equals `1000m`).
fn same_resources(a: &Value, b: &Value) -> bool {
    let values = |v: &Value| -> BTreeMap<String, Option<i64>> {
        v.as_object()
            .into_iter()
            .flatten()
            .map(|(k, q)| (k.clone(), q.as_str().and_then(parse_milli)))
            .collect()
    };
    values(a) == values(b)
}

fn has_overhead(spec: &Value) -> bool {
    spec["overhead"].as_object().is_some_and(|o| !o.is_empty())
}

/// Whether toleration `ss` tolerates everything `t` does (upstream's `isSuperset`).
fn is_superset(ss: &Value, t: &Value) -> bool {
    if ss == t {
        return true;
    }
    let s = |v: &Value, f: &str| v[f].as_str().unwrap_or_default().to_string();
    if s(t, "key") != s(ss, "key") && !(s(ss, "key").is_empty() && s(ss, "operator") == "Exists") {
        return false;
    }
    if s(t, "effect") != s(ss, "effect") && !s(ss, "effect").is_empty() {
        return false;
    }
    if s(ss, "effect") == "NoExecute"
        && let Some(limit) = ss["tolerationSeconds"].as_i64()
        && t["tolerationSeconds"].as_i64().is_none_or(|secs| secs > limit)
    {
        return false;
    }
    match s(ss, "operator").as_str() {
        "Equal" | "" => matches!(s(t, "operator").as_str(), "Equal" | "") && s(t, "value") == s(ss, "value"),
        "Exists" => true,
        _ => false,
    }
}

/// Both lists, without tolerations another one covers (upstream's `MergeTolerations`).
pub fn merge_tolerations(first: &[Value], second: &[Value]) -> Vec<Value> {
    let all: Vec<&Value> = first.iter().chain(second).collect();
    let mut merged: Vec<Value> = Vec::new();
    'next: for (i, t) in all.iter().enumerate() {
        if merged.iter().any(|m| is_superset(m, t)) {
            continue;
        }
        for t2 in &all[i + 1..] {
            if t2 != t && is_superset(t2, t) {
                continue 'next;
            }
        }
        merged.push((*t).clone());
    }
    merged
}

/// Applies a class's overhead and scheduling to a pod spec.
pub fn apply(attrs: &Attributes<'_>, spec: &mut Value, rc: &Value) -> ApiResult<()> {
    if let Some(overhead) = rc["overhead"]["podFixed"].as_object() {
        let fixed = Value::Object(overhead.clone());
        if has_overhead(spec) && !same_resources(&spec["overhead"], &fixed) {
            return Err(forbidden(
                attrs,
                "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead",
            ));
        }
        spec["overhead"] = fixed;
    }
    let scheduling = &rc["scheduling"];
    if scheduling.is_object() {
        let mut selector: Map<String, Value> = spec["nodeSelector"].as_object().cloned().unwrap_or_default();
        for (k, v) in scheduling["nodeSelector"].as_object().into_iter().flatten() {
            if let Some(pod_value) = selector.get(k)
                && pod_value != v
            {
                return Err(forbidden(
                    attrs,
                    format!(
                        "conflict: runtimeClass.scheduling.nodeSelector[{k}] = {}; pod.spec.nodeSelector[{k}] = {}",
                        v.as_str().unwrap_or_default(),
                        pod_value.as_str().unwrap_or_default()
                    ),
                ));
            }
            selector.insert(k.clone(), v.clone());
        }
        if !selector.is_empty() {
            spec["nodeSelector"] = Value::Object(selector);
        }
        let pod_tolerations = spec["tolerations"].as_array().cloned().unwrap_or_default();
        let class_tolerations = scheduling["tolerations"].as_array().cloned().unwrap_or_default();
        let merged = merge_tolerations(&pod_tolerations, &class_tolerations);
        if !merged.is_empty() {
            spec["tolerations"] = json!(merged);
        }
    }
    Ok(())
}

/// Whether a pod's overhead is what its class defines (none without one).
pub fn check_overhead(attrs: &Attributes<'_>, spec: &Value, rc: Option<&Value>) -> ApiResult<()> {
    match rc.map(|rc| &rc["overhead"]["podFixed"]).filter(|o| o.is_object()) {
        Some(fixed) if !same_resources(&spec["overhead"], fixed) => Err(forbidden(
            attrs,
            "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead",
        )),
        None if !spec["overhead"].is_null() => Err(forbidden(
            attrs,
            "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead",
        )),
        _ => Ok(()),
    }
}

#[async_trait::async_trait]
impl Plugin for RuntimeClass {
    fn name(&self) -> &'static str {
        "RuntimeClass"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> ApiResult<()> {
        if !applies(attrs) {
            return Ok(());
        }
        let Some(rc) = self.class(attrs).await? else { return Ok(()) };
        let mut spec = attrs.object.as_ref().map(|p| p["spec"].clone()).unwrap_or(Value::Null);
        apply(attrs, &mut spec, &rc)?;
        if let Some(pod) = attrs.object.as_mut() {
            pod["spec"] = spec;
        }
        Ok(())
    }

    async fn validate(&self, attrs: &Attributes<'_>) -> ApiResult<()> {
        if !applies(attrs) {
            return Ok(());
        }
        let rc = self.class(attrs).await?;
        let Some(pod) = &attrs.object else { return Ok(()) };
        check_overhead(attrs, &pod["spec"], rc.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::plugins::tests::{attrs, pods_info};

    #[test]
    fn overhead_and_scheduling() {
        let info = pods_info();
        let user = Default::default();
        let a = attrs(&info, Operation::Create, "p", None, None, &user);
        let rc = json!({ "metadata": { "name": "kata" },
            "overhead": { "podFixed": { "cpu": "250m", "memory": "120Mi" } },
            "scheduling": { "nodeSelector": { "runtime": "kata" },
                            "tolerations": [{ "key": "kata", "operator": "Exists", "effect": "NoSchedule" }] } });
        let mut spec = json!({ "nodeSelector": { "zone": "a" }, "tolerations": [{ "operator": "Exists" }] });
        apply(&a, &mut spec, &rc).unwrap();
        assert_eq!(spec["overhead"], json!({ "cpu": "250m", "memory": "120Mi" }));
        assert_eq!(spec["nodeSelector"], json!({ "zone": "a", "runtime": "kata" }));
        // The pod's match-everything toleration covers the class's.
        assert_eq!(spec["tolerations"], json!([{ "operator": "Exists" }]));
        assert!(check_overhead(&a, &spec, Some(&rc)).is_ok());
        let mut conflict = json!({ "nodeSelector": { "runtime": "runc" } });
        assert_eq!(
            apply(&a, &mut conflict, &rc).unwrap_err().message,
            "pods \"p\" is forbidden: conflict: runtimeClass.scheduling.nodeSelector[runtime] = kata; pod.spec.nodeSelector[runtime] = runc"
        );
        let mut other = json!({ "overhead": { "cpu": "1" } });
        assert!(apply(&a, &mut other, &rc).is_err());
        assert_eq!(
            check_overhead(&a, &json!({ "overhead": { "cpu": "1" } }), None).unwrap_err().message,
            "pods \"p\" is forbidden: pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
        );
    }

    #[test]
    fn toleration_merge_drops_covered_ones() {
        let a = json!({ "key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10 });
        let b = json!({ "key": "k", "operator": "Exists", "effect": "NoExecute" });
        assert_eq!(merge_tolerations(&[a.clone()], &[b.clone()]), vec![b.clone()]);
        let c = json!({ "key": "other", "operator": "Equal", "value": "v" });
        assert_eq!(merge_tolerations(&[c.clone(), c.clone()], &[]), vec![c]);
    }
}
