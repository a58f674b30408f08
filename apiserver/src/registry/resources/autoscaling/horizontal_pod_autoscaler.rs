//! HorizontalPodAutoscalers (upstream's `SetDefaults_HorizontalPodAutoscaler` of v2, the
//! hpa strategies and `ValidateHorizontalPodAutoscaler`). Stored as autoscaling/v2; the
//! autoscaling/v1 resource converts on the way in and out ([`super::conversion`]) and is
//! validated in the v2 shape, as upstream validates its internal (v2-like) type.

use serde_json::{Value, json};

use super::conversion::{self, BEHAVIOR, CONDITIONS, CURRENT_METRICS, METRICS};
use crate::errors::FieldError;
use crate::registry::resource::{Hooks, copy_field, keep_spec};
use crate::registry::resources::core::pod_spec::set_default;
use crate::validation::{self as v, NONNEGATIVE_MSG, index, show};

/// Upstream's `MaxPeriodSeconds` and `MaxStabilizationWindowSeconds`.
const MAX_PERIOD_SECONDS: i64 = 1800;
const MAX_STABILIZATION_WINDOW_SECONDS: i64 = 3600;
const METRIC_SOURCE_TYPES: &[&str] = &["ContainerResource", "External", "Object", "Pods", "Resource"];
const SELECT_POLICIES: &[&str] = &["Disabled", "Max", "Min"];
const POLICY_TYPES: &[&str] = &["Percent", "Pods"];

/// autoscaling/v2.
pub struct HorizontalPodAutoscalerHooks;

/// autoscaling/v1, over the same stored objects.
pub struct HorizontalPodAutoscalerV1Hooks;

/// v2's defaults: one replica at least, the CPU target when no metric is given, and the
/// scaling rules' defaults for a behavior that is given.
pub fn default_v2(obj: &mut Value) {
    if !obj["spec"].is_object() {
        obj["spec"] = json!({});
    }
    let spec = &mut obj["spec"];
    set_default(spec, "minReplicas", json!(1));
    if spec["metrics"].as_array().is_none_or(|m| m.is_empty()) {
        spec["metrics"] = json!([{
            "type": "Resource",
            "resource": { "name": "cpu", "target": { "type": "Utilization", "averageUtilization": conversion::DEFAULT_CPU_UTILIZATION } },
        }]);
    }
    if spec["behavior"].is_object() {
        let b = &mut spec["behavior"];
        let up = json!({
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [{ "type": "Pods", "value": 4, "periodSeconds": 15 }, { "type": "Percent", "value": 100, "periodSeconds": 15 }],
        });
        let down = json!({ "selectPolicy": "Max", "policies": [{ "type": "Percent", "value": 100, "periodSeconds": 15 }] });
        for (key, defaults) in [("scaleUp", up), ("scaleDown", down)] {
            let mut rules = defaults;
            // Upstream's copyHPAScalingRules: the given fields win, field by field.
            for f in ["selectPolicy", "stabilizationWindowSeconds", "policies"] {
                if let Some(given) = b[key].get(f).filter(|x| !x.is_null()) {
                    rules[f] = given.clone();
                }
            }
            b[key] = rules;
        }
    }
}

/// `IsValidPathSegmentName`.
fn path_segment(field: &str, name: &str) -> Vec<FieldError> {
    if name == "." || name == ".." {
        return vec![FieldError::invalid(field, name, format!("may not be '{name}'"))];
    }
    let mut errs = Vec::new();
    for bad in ["/", "%"] {
        if name.contains(bad) {
            errs.push(FieldError::invalid(field, name, format!("may not contain '{bad}'")));
        }
    }
    errs
}

fn cross_version_ref(field: &str, r: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for f in ["kind", "name"] {
        let p = format!("{field}.{f}");
        match r[f].as_str().unwrap_or_default() {
            "" => errs.push(FieldError::required(p, "")),
            s => errs.extend(path_segment(&p, s)),
        }
    }
    errs
}

fn metric_identifier(field: &str, id: &Value) -> Vec<FieldError> {
    match id["name"].as_str().unwrap_or_default() {
        "" => vec![FieldError::required(format!("{field}.name"), "must specify a metric name")],
        n => path_segment(&format!("{field}.name"), n),
    }
}

/// A quantity's sign: -1, 0 or 1 (None when it does not parse).
fn sign(q: &Value) -> Option<i32> {
    let n = v::quantity("", q).ok()??;
    Some(n.signum() as i32)
}

fn metric_target(field: &str, t: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let kind = t["type"].as_str().unwrap_or_default();
    if kind.is_empty() {
        errs.push(FieldError::required(format!("{field}.type"), "must specify a metric target type"));
    }
    if !["Utilization", "Value", "AverageValue"].contains(&kind) {
        errs.push(FieldError::invalid(
            format!("{field}.type"),
            kind,
            "must be either Utilization, Value, or AverageValue",
        ));
    }
    for q in ["value", "averageValue"] {
        if !t[q].is_null() && sign(&t[q]) != Some(1) {
            errs.push(FieldError::invalid(format!("{field}.{q}"), show(&t[q]), "must be positive"));
        }
    }
    if let Some(u) = t["averageUtilization"].as_i64().filter(|u| *u < 1) {
        errs.push(FieldError::invalid(format!("{field}.averageUtilization"), u, "must be greater than 0"));
    }
    errs
}

fn metric_source(field: &str, kind: &str, src: &Value) -> Vec<FieldError> {
    let t = &src["target"];
    let target = format!("{field}.target");
    let mut errs = Vec::new();
    match kind {
        "Object" => {
            errs.extend(cross_version_ref(&format!("{field}.describedObject"), &src["describedObject"]));
            errs.extend(metric_identifier(&format!("{field}.metric"), &src["metric"]));
            errs.extend(metric_target(&target, t));
            if t["value"].is_null() && t["averageValue"].is_null() {
                errs.push(FieldError::required(
                    format!("{target}.averageValue"),
                    "must set either a target value or averageValue",
                ));
            }
        }
        "Pods" => {
            errs.extend(metric_identifier(&format!("{field}.metric"), &src["metric"]));
            errs.extend(metric_target(&target, t));
            if t["averageValue"].is_null() {
                errs.push(FieldError::required(
                    format!("{target}.averageValue"),
                    "must specify a positive target averageValue",
                ));
            }
        }
        "External" => {
            errs.extend(metric_identifier(&format!("{field}.metric"), &src["metric"]));
            errs.extend(metric_target(&target, t));
            if t["value"].is_null() && t["averageValue"].is_null() {
                errs.push(FieldError::required(
                    format!("{target}.averageValue"),
                    "must set either a target value for metric or a per-pod target",
                ));
            }
            if !t["value"].is_null() && !t["averageValue"].is_null() {
                errs.push(FieldError::forbidden(
                    format!("{target}.value"),
                    "may not set both a target value for metric and a per-pod target",
                ));
            }
        }
        "Resource" | "ContainerResource" => {
            if src["name"].as_str().is_none_or(str::is_empty) {
                errs.push(FieldError::required(format!("{field}.name"), "must specify a resource name"));
            }
            if kind == "ContainerResource" {
                match src["container"].as_str().unwrap_or_default() {
                    "" => errs
                        .push(FieldError::required(format!("{field}.container"), "must specify a container")),
                    c => errs.extend(v::dns1123_label(&format!("{field}.container"), c)),
                }
            }
            errs.extend(metric_target(&target, t));
            if t["averageUtilization"].is_null() && t["averageValue"].is_null() {
                errs.push(FieldError::required(
                    format!("{target}.averageUtilization"),
                    "must set either a target raw value or a target utilization",
                ));
            }
            if !t["averageUtilization"].is_null() && !t["averageValue"].is_null() {
                errs.push(FieldError::forbidden(
                    format!("{target}.averageValue"),
                    "may not set both a target raw value and a target utilization",
                ));
            }
        }
        _ => {}
    }
    errs
}

/// The source field of each metric type.
const SOURCES: &[(&str, &str)] = &[
    ("Object", "object"),
    ("External", "external"),
    ("Pods", "pods"),
    ("Resource", "resource"),
    ("ContainerResource", "containerResource"),
];

fn metric_spec(field: &str, m: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let kind = m["type"].as_str().unwrap_or_default();
    if kind.is_empty() {
        errs.push(FieldError::required(format!("{field}.type"), "must specify a metric source type"));
    }
    if !METRIC_SOURCE_TYPES.contains(&kind) {
        errs.push(FieldError::not_supported(format!("{field}.type"), kind, METRIC_SOURCE_TYPES));
    }
    // Only the first source given is checked, as upstream.
    let present: Vec<(&str, &str)> = SOURCES.iter().copied().filter(|(_, key)| m[*key].is_object()).collect();
    if let Some((t, key)) = present.first() {
        errs.extend(metric_source(&format!("{field}.{key}"), t, &m[*key]));
    }
    let expected = SOURCES.iter().find(|(t, _)| *t == kind).map(|(_, key)| *key);
    if let Some(key) = expected
        && !m[key].is_object()
    {
        errs.push(FieldError::required(
            format!("{field}.{key}"),
            "must populate information for the given metric source",
        ));
    }
    if present.len() > 1 {
        for (_, key) in present.iter().filter(|(_, key)| Some(*key) != expected) {
            errs.push(FieldError::forbidden(
                format!("{field}.{key}"),
                "must populate the given metric source only",
            ));
        }
    }
    errs
}

fn scaling_rules(field: &str, r: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !r.is_object() {
        return errs;
    }
    if let Some(w) = r["stabilizationWindowSeconds"].as_i64() {
        if w < 0 {
            errs.push(FieldError::invalid(
                format!("{field}.stabilizationWindowSeconds"),
                w,
                "must be greater than or equal to zero",
            ));
        }
        if w > MAX_STABILIZATION_WINDOW_SECONDS {
            errs.push(FieldError::invalid(
                format!("{field}.stabilizationWindowSeconds"),
                w,
                format!("must be less than or equal to {MAX_STABILIZATION_WINDOW_SECONDS}"),
            ));
        }
    }
    if let Some(p) = r["selectPolicy"].as_str()
        && !SELECT_POLICIES.contains(&p)
    {
        errs.push(FieldError::not_supported(format!("{field}.selectPolicy"), p, SELECT_POLICIES));
    }
    let policies = r["policies"].as_array().cloned().unwrap_or_default();
    if policies.is_empty() {
        errs.push(FieldError::required(format!("{field}.policies"), "must specify at least one Policy"));
    }
    for (i, p) in policies.iter().enumerate() {
        let path = index(&format!("{field}.policies"), i);
        let t = p["type"].as_str().unwrap_or_default();
        if !POLICY_TYPES.contains(&t) {
            errs.push(FieldError::not_supported(format!("{path}.type"), t, POLICY_TYPES));
        }
        let value = p["value"].as_i64().unwrap_or(0);
        if value <= 0 {
            errs.push(FieldError::invalid(format!("{path}.value"), value, "must be greater than zero"));
        }
        let period = p["periodSeconds"].as_i64().unwrap_or(0);
        if period <= 0 {
            errs.push(FieldError::invalid(
                format!("{path}.periodSeconds"),
                period,
                "must be greater than zero",
            ));
        }
        if period > MAX_PERIOD_SECONDS {
            errs.push(FieldError::invalid(
                format!("{path}.periodSeconds"),
                period,
                format!("must be less than or equal to {MAX_PERIOD_SECONDS}"),
            ));
        }
    }
    errs
}

/// `ValidateHorizontalPodAutoscaler` of an object in the v2 shape (scaling to zero, an
/// alpha feature upstream, is off).
pub fn validate_v2(obj: &Value) -> Vec<FieldError> {
    let spec = &obj["spec"];
    let mut errs = Vec::new();
    let min = spec["minReplicas"].as_i64();
    if let Some(m) = min.filter(|m| *m < 1) {
        errs.push(FieldError::invalid("spec.minReplicas", m, "must be greater than or equal to 1"));
    }
    let max = spec["maxReplicas"].as_i64().unwrap_or(0);
    if max < 1 {
        errs.push(FieldError::invalid("spec.maxReplicas", max, "must be greater than 0"));
    }
    if min.is_some_and(|m| max < m) {
        errs.push(FieldError::invalid(
            "spec.maxReplicas",
            max,
            "must be greater than or equal to `minReplicas`",
        ));
    }
    errs.extend(cross_version_ref("spec.scaleTargetRef", &spec["scaleTargetRef"]));
    let metrics = spec["metrics"].as_array().cloned().unwrap_or_default();
    for (i, m) in metrics.iter().enumerate() {
        errs.extend(metric_spec(&index("spec.metrics", i), m));
    }
    if min == Some(0) && !metrics.iter().any(|m| m["type"] == "Object" || m["type"] == "External") {
        errs.push(FieldError::forbidden(
            "spec.metrics",
            "must specify at least one Object or External metric to support scaling to zero replicas",
        ));
    }
    if spec["behavior"].is_object() {
        errs.extend(scaling_rules("spec.behavior.scaleUp", &spec["behavior"]["scaleUp"]));
        errs.extend(scaling_rules("spec.behavior.scaleDown", &spec["behavior"]["scaleDown"]));
    }
    errs
}

/// `ValidateHorizontalPodAutoscalerStatusUpdate`: replica counts are not negative.
fn validate_status(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for f in ["currentReplicas", "desiredReplicas"] {
        if let Some(n) = obj["status"][f].as_i64().filter(|n| *n < 0) {
            errs.push(FieldError::invalid(format!("status.{f}"), n, NONNEGATIVE_MSG));
        }
    }
    errs
}

impl Hooks for HorizontalPodAutoscalerHooks {
    fn default(&self, obj: &mut Value) {
        default_v2(obj);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validate_v2(obj)
    }

    fn validate_update(&self, new: &Value, _old: &Value) -> Vec<FieldError> {
        validate_status(new)
    }
}

/// Copies the round-trip annotations `keys` of `from` into `to` (or drops them).
fn copy_annotations(to: &mut Value, from: &Value, keys: &[&str]) {
    if !to["metadata"].is_object() {
        return;
    }
    if !to["metadata"]["annotations"].is_object() {
        to["metadata"]["annotations"] = json!({});
    }
    for k in keys {
        copy_field(&mut to["metadata"]["annotations"], &from["metadata"]["annotations"], k);
    }
    if to["metadata"]["annotations"].as_object().is_some_and(|a| a.is_empty())
        && let Some(m) = to["metadata"].as_object_mut()
    {
        m.remove("annotations");
    }
}

impl Hooks for HorizontalPodAutoscalerV1Hooks {
    /// v1's own defaults (only `minReplicas`); the CPU target comes with the conversion.
    fn default(&self, obj: &mut Value) {
        if obj["spec"].is_object() {
            set_default(&mut obj["spec"], "minReplicas", json!(1));
        }
    }

    /// The stored status lives partly in annotations in this shape: those stay too.
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        copy_field(new, old, "status");
        copy_annotations(new, old, &[CURRENT_METRICS, CONDITIONS]);
    }

    /// The stored spec lives partly in annotations in this shape: those stay too.
    fn prepare_for_status_update(&self, new: &mut Value, old: &Value) {
        keep_spec(new, old);
        copy_annotations(new, old, &[METRICS, BEHAVIOR]);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validate_v2(&conversion::v1_to_v2(obj.clone()))
    }

    fn validate_update(&self, new: &Value, _old: &Value) -> Vec<FieldError> {
        validate_status(&conversion::v1_to_v2(new.clone()))
    }

    fn stored_to_served(&self, obj: Value) -> Value {
        conversion::v2_to_v1(obj)
    }

    /// Stored as a v2 client would have written it (v2's defaults applied).
    fn served_to_stored(&self, obj: Value) -> Value {
        let mut v2 = conversion::v1_to_v2(obj);
        default_v2(&mut v2);
        v2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(FieldError::to_text).collect()
    }

    fn hpa(spec: Value) -> Value {
        json!({ "metadata": { "name": "h" }, "spec": spec })
    }

    #[test]
    fn defaults_as_upstream() {
        let mut h = hpa(
            json!({ "scaleTargetRef": { "kind": "Deployment", "name": "web" }, "maxReplicas": 4, "behavior": {} }),
        );
        default_v2(&mut h);
        assert_eq!(
            h["spec"],
            json!({
                "scaleTargetRef": { "kind": "Deployment", "name": "web" }, "minReplicas": 1, "maxReplicas": 4,
                "metrics": [{ "type": "Resource", "resource": { "name": "cpu", "target": { "type": "Utilization", "averageUtilization": 80 } } }],
                "behavior": {
                    "scaleUp": { "stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [{ "type": "Pods", "value": 4, "periodSeconds": 15 }, { "type": "Percent", "value": 100, "periodSeconds": 15 }] },
                    "scaleDown": { "selectPolicy": "Max", "policies": [{ "type": "Percent", "value": 100, "periodSeconds": 15 }] },
                },
            })
        );
        assert!(validate_v2(&h).is_empty());
    }

    /// Upstream v1.28.4's answer to the same object, cause by cause.
    #[test]
    fn validation_messages() {
        let bad = hpa(json!({
            "scaleTargetRef": { "kind": "", "name": "a/b" }, "minReplicas": 0, "maxReplicas": 0,
            "metrics": [
                { "type": "Bogus" }, { "type": "Resource" },
                { "type": "Resource", "resource": { "name": "cpu", "target": { "type": "Utilization", "averageUtilization": -1 } } },
                { "type": "Pods", "pods": { "metric": { "name": "" }, "target": { "type": "Value", "value": "1" } } },
            ],
            "behavior": { "scaleUp": { "selectPolicy": "X", "stabilizationWindowSeconds": 99999, "policies": [{ "type": "Y", "value": 0, "periodSeconds": 0 }] } },
        }));
        assert_eq!(
            texts(&validate_v2(&bad)),
            [
                "spec.minReplicas: Invalid value: 0: must be greater than or equal to 1",
                "spec.maxReplicas: Invalid value: 0: must be greater than 0",
                "spec.scaleTargetRef.kind: Required value",
                "spec.scaleTargetRef.name: Invalid value: \"a/b\": may not contain '/'",
                "spec.metrics[0].type: Unsupported value: \"Bogus\": supported values: \"ContainerResource\", \"External\", \"Object\", \"Pods\", \"Resource\"",
                "spec.metrics[1].resource: Required value: must populate information for the given metric source",
                "spec.metrics[2].resource.target.averageUtilization: Invalid value: -1: must be greater than 0",
                "spec.metrics[3].pods.metric.name: Required value: must specify a metric name",
                "spec.metrics[3].pods.target.averageValue: Required value: must specify a positive target averageValue",
                "spec.metrics: Forbidden: must specify at least one Object or External metric to support scaling to zero replicas",
                "spec.behavior.scaleUp.stabilizationWindowSeconds: Invalid value: 99999: must be less than or equal to 3600",
                "spec.behavior.scaleUp.selectPolicy: Unsupported value: \"X\": supported values: \"Disabled\", \"Max\", \"Min\"",
                "spec.behavior.scaleUp.policies[0].type: Unsupported value: \"Y\": supported values: \"Percent\", \"Pods\"",
                "spec.behavior.scaleUp.policies[0].value: Invalid value: 0: must be greater than zero",
                "spec.behavior.scaleUp.policies[0].periodSeconds: Invalid value: 0: must be greater than zero",
            ]
        );
        let minmax = hpa(
            json!({ "scaleTargetRef": { "kind": "Deployment", "name": "w" }, "minReplicas": 5, "maxReplicas": 2 }),
        );
        assert_eq!(
            texts(&validate_v2(&minmax)),
            ["spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`"]
        );
    }

    #[test]
    fn v1_writes_keep_what_lives_in_annotations() {
        let v1 = HorizontalPodAutoscalerV1Hooks;
        let bad = hpa(
            json!({ "scaleTargetRef": { "kind": "Deployment", "name": "w" }, "maxReplicas": 2, "targetCPUUtilizationPercentage": 0 }),
        );
        assert_eq!(
            texts(&v1.validate(&bad)),
            ["spec.metrics[0].resource.target.averageUtilization: Invalid value: 0: must be greater than 0"]
        );
        let old = json!({ "metadata": { "annotations": { METRICS: "[m]", CONDITIONS: "[c]" } }, "spec": { "maxReplicas": 2 }, "status": { "currentReplicas": 1 } });
        let mut main = json!({ "metadata": { "annotations": { METRICS: "[new]" } }, "spec": { "maxReplicas": 3 }, "status": {} });
        v1.prepare_for_update(&mut main, &old);
        assert_eq!(main["metadata"]["annotations"], json!({ METRICS: "[new]", CONDITIONS: "[c]" }));
        assert_eq!(main["status"], json!({ "currentReplicas": 1 }));
        let mut status =
            json!({ "metadata": {}, "spec": { "maxReplicas": 9 }, "status": { "currentReplicas": 2 } });
        v1.prepare_for_status_update(&mut status, &old);
        assert_eq!(status["metadata"]["annotations"], json!({ METRICS: "[m]" }));
        assert_eq!(status["spec"]["maxReplicas"], 2);
    }
}
