//! autoscaling/v1 <-> autoscaling/v2 HorizontalPodAutoscalers, as upstream converts them
//! (`pkg/apis/autoscaling/v1/conversion.go`). HPAs are stored in the v2 shape; v1 has
//! room only for a CPU utilization target, so what else a v2 object holds travels in
//! annotations, in v1's older metric shapes, and comes back when a v1 client writes the
//! object again:
//!
//! - `autoscaling.alpha.kubernetes.io/metrics`: the metrics other than the CPU target;
//! - `autoscaling.alpha.kubernetes.io/current-metrics`: every current metric;
//! - `autoscaling.alpha.kubernetes.io/behavior`: `spec.behavior`, as upstream writes its
//!   internal type (Go field names: `{"ScaleUp":{"StabilizationWindowSeconds":0,...}}`);
//! - `autoscaling.alpha.kubernetes.io/conditions`: the status conditions.
//!
//! A v1 object without a CPU target and without other metrics gets upstream's implicit
//! default, 80% CPU.

use serde_json::{Map, Value, json};

use super::go_json::{Go, selector};
use crate::validation::canonical_quantity;

pub const METRICS: &str = "autoscaling.alpha.kubernetes.io/metrics";
pub const CURRENT_METRICS: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
pub const BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";
pub const CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
const ROUND_TRIP: &[&str] = &[METRICS, CURRENT_METRICS, BEHAVIOR, CONDITIONS];
/// Upstream's `DefaultCPUUtilization`.
pub const DEFAULT_CPU_UTILIZATION: i64 = 80;

fn plain(v: &Value) -> Go {
    Go::Plain(v.clone())
}

/// A quantity as Go prints a `resource.Quantity` (canonical), or null.
fn quantity(v: &Value) -> Go {
    match v.as_str() {
        Some(s) => Go::Plain(json!(canonical_quantity(s))),
        None => match v {
            Value::Number(n) => Go::Plain(json!(canonical_quantity(&n.to_string()))),
            _ => Go::Plain(Value::Null),
        },
    }
}

/// A quantity field that is not a pointer in Go: "0" when unset.
fn quantity_or_zero(v: &Value) -> Go {
    match quantity(v) {
        Go::Plain(Value::Null) => Go::Plain(json!("0")),
        q => q,
    }
}

fn object_ref(r: &Value) -> Go {
    Go::fields(vec![
        ("kind", plain(&r["kind"])),
        ("name", plain(&r["name"])),
        ("apiVersion", plain(&r["apiVersion"])),
    ])
}

fn is_cpu_utilization(m: &Value) -> bool {
    m["type"] == "Resource"
        && m["resource"]["name"] == "cpu"
        && !m["resource"]["target"]["averageUtilization"].is_null()
}

/// A v2 MetricSpec in v1's shape (autoscaling/v1 `MetricSpec`, fields in Go's order).
fn metric_spec_to_v1(m: &Value) -> Go {
    let t = &m[source_key(m)]["target"];
    let src = match m["type"].as_str().unwrap_or_default() {
        "Object" => {
            let o = &m["object"];
            Go::fields(vec![
                ("target", object_ref(&o["describedObject"])),
                ("metricName", plain(&o["metric"]["name"])),
                ("targetValue", quantity_or_zero(&t["value"])),
                ("selector", selector(&o["metric"]["selector"])),
                ("averageValue", quantity(&t["averageValue"])),
            ])
        }
        "Pods" => {
            let p = &m["pods"];
            Go::fields(vec![
                ("metricName", plain(&p["metric"]["name"])),
                ("targetAverageValue", quantity_or_zero(&t["averageValue"])),
                ("selector", selector(&p["metric"]["selector"])),
            ])
        }
        "Resource" => Go::fields(vec![
            ("name", plain(&m["resource"]["name"])),
            ("targetAverageUtilization", plain(&t["averageUtilization"])),
            ("targetAverageValue", quantity(&t["averageValue"])),
        ]),
        "ContainerResource" => Go::fields(vec![
            ("name", plain(&m["containerResource"]["name"])),
            ("targetAverageUtilization", plain(&t["averageUtilization"])),
            ("targetAverageValue", quantity(&t["averageValue"])),
            ("container", plain(&m["containerResource"]["container"])),
        ]),
        "External" => {
            let e = &m["external"];
            Go::fields(vec![
                ("metricName", plain(&e["metric"]["name"])),
                ("metricSelector", selector(&e["metric"]["selector"])),
                ("targetValue", quantity(&t["value"])),
                ("targetAverageValue", quantity(&t["averageValue"])),
            ])
        }
        _ => Go::Plain(Value::Null),
    };
    with_source(m, src)
}

/// `{"type": ..., "<source>": src}` with the source under v1's key for the type.
fn with_source(m: &Value, src: Go) -> Go {
    let key = source_key(m);
    let mut fields = vec![("type", plain(&m["type"]))];
    if !key.is_empty() {
        fields.push((key, src));
    }
    Go::fields(fields)
}

fn source_key(m: &Value) -> &'static str {
    match m["type"].as_str().unwrap_or_default() {
        "Object" => "object",
        "Pods" => "pods",
        "Resource" => "resource",
        "ContainerResource" => "containerResource",
        "External" => "external",
        _ => "",
    }
}

/// A v2 MetricStatus in v1's shape.
fn metric_status_to_v1(m: &Value) -> Go {
    let c = &m[source_key(m)]["current"];
    let src = match m["type"].as_str().unwrap_or_default() {
        "Object" => {
            let o = &m["object"];
            Go::fields(vec![
                ("target", object_ref(&o["describedObject"])),
                ("metricName", plain(&o["metric"]["name"])),
                ("currentValue", quantity_or_zero(&c["value"])),
                ("selector", selector(&o["metric"]["selector"])),
                ("averageValue", quantity(&c["averageValue"])),
            ])
        }
        "Pods" => {
            let p = &m["pods"];
            Go::fields(vec![
                ("metricName", plain(&p["metric"]["name"])),
                ("currentAverageValue", quantity_or_zero(&c["averageValue"])),
                ("selector", selector(&p["metric"]["selector"])),
            ])
        }
        "Resource" => Go::fields(vec![
            ("name", plain(&m["resource"]["name"])),
            ("currentAverageUtilization", plain(&c["averageUtilization"])),
            ("currentAverageValue", quantity_or_zero(&c["averageValue"])),
        ]),
        "ContainerResource" => Go::fields(vec![
            ("name", plain(&m["containerResource"]["name"])),
            ("currentAverageUtilization", plain(&c["averageUtilization"])),
            ("currentAverageValue", quantity_or_zero(&c["averageValue"])),
            ("container", plain(&m["containerResource"]["container"])),
        ]),
        "External" => {
            let e = &m["external"];
            Go::fields(vec![
                ("metricName", plain(&e["metric"]["name"])),
                ("metricSelector", selector(&e["metric"]["selector"])),
                ("currentValue", quantity_or_zero(&c["value"])),
                ("currentAverageValue", quantity(&c["averageValue"])),
            ])
        }
        _ => Go::Plain(Value::Null),
    };
    with_source(m, src)
}

fn condition_to_v1(c: &Value) -> Go {
    let omit_empty =
        |v: &Value| if v.as_str().is_some_and(str::is_empty) { Go::Plain(Value::Null) } else { plain(v) };
    Go::Struct(
        [
            ("type", plain(&c["type"])),
            ("status", plain(&c["status"])),
            // A metav1.Time is a struct: `omitempty` does not drop it, it prints null.
            ("lastTransitionTime", plain(&c["lastTransitionTime"])),
            ("reason", omit_empty(&c["reason"])),
            ("message", omit_empty(&c["message"])),
        ]
        .into_iter()
        .filter(|(k, v)| *k == "lastTransitionTime" || !matches!(v, Go::Plain(Value::Null)))
        .collect(),
    )
}

/// `spec.behavior` as upstream marshals its internal type: Go field names, nil pointers
/// as null.
fn behavior_to_annotation(b: &Value) -> String {
    let rules = |r: &Value| {
        if r.is_null() {
            return Go::Plain(Value::Null);
        }
        let policies = match r["policies"].as_array() {
            Some(ps) => Go::List(
                ps.iter()
                    .map(|p| {
                        Go::Struct(vec![
                            ("Type", plain(&p["type"])),
                            ("Value", plain(&p["value"])),
                            ("PeriodSeconds", plain(&p["periodSeconds"])),
                        ])
                    })
                    .collect(),
            ),
            None => Go::Plain(Value::Null),
        };
        Go::Struct(vec![
            ("StabilizationWindowSeconds", plain(&r["stabilizationWindowSeconds"])),
            ("SelectPolicy", plain(&r["selectPolicy"])),
            ("Policies", policies),
        ])
    };
    Go::Struct(vec![("ScaleUp", rules(&b["scaleUp"])), ("ScaleDown", rules(&b["scaleDown"]))]).render()
}

/// The annotations without the round-trip ones (clients may not set them on their own).
fn annotations_without_round_trip(obj: &Value) -> Map<String, Value> {
    let mut ann = obj["metadata"]["annotations"].as_object().cloned().unwrap_or_default();
    for k in ROUND_TRIP {
        ann.remove(*k);
    }
    ann
}

fn set_annotations(obj: &mut Value, ann: Map<String, Value>) {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let m = obj["metadata"].as_object_mut().expect("metadata is an object");
    if ann.is_empty() {
        m.remove("annotations");
    } else {
        m.insert("annotations".into(), Value::Object(ann));
    }
}

fn copy_present(to: &mut Map<String, Value>, from: &Value, keys: &[&str]) {
    for k in keys {
        if let Some(v) = from.get(*k).filter(|v| !v.is_null()) {
            to.insert((*k).to_string(), v.clone());
        }
    }
}

/// A stored (v2) HPA as autoscaling/v1 serves it.
pub fn v2_to_v1(obj: Value) -> Value {
    let spec = &obj["spec"];
    let status = &obj["status"];
    let mut ann = annotations_without_round_trip(&obj);
    let metrics = spec["metrics"].as_array().cloned().unwrap_or_default();
    let others: Vec<Go> = metrics.iter().filter(|m| !is_cpu_utilization(m)).map(metric_spec_to_v1).collect();
    let current = status["currentMetrics"].as_array().cloned().unwrap_or_default();
    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    if !others.is_empty() {
        ann.insert(METRICS.into(), json!(Go::List(others).render()));
    }
    if !current.is_empty() {
        ann.insert(
            CURRENT_METRICS.into(),
            json!(Go::List(current.iter().map(metric_status_to_v1).collect()).render()),
        );
    }
    if spec["behavior"].is_object() {
        ann.insert(BEHAVIOR.into(), json!(behavior_to_annotation(&spec["behavior"])));
    }
    if !conditions.is_empty() {
        ann.insert(
            CONDITIONS.into(),
            json!(Go::List(conditions.iter().map(condition_to_v1).collect()).render()),
        );
    }

    let mut v1_spec = Map::new();
    copy_present(&mut v1_spec, spec, &["scaleTargetRef", "minReplicas", "maxReplicas"]);
    if let Some(cpu) = metrics.iter().find(|m| is_cpu_utilization(m)) {
        v1_spec.insert(
            "targetCPUUtilizationPercentage".into(),
            cpu["resource"]["target"]["averageUtilization"].clone(),
        );
    }
    // v1's status fields are not pointers: the replica counts are always there.
    let mut v1_status = Map::new();
    copy_present(&mut v1_status, status, &["observedGeneration", "lastScaleTime"]);
    v1_status.insert("currentReplicas".into(), json!(status["currentReplicas"].as_i64().unwrap_or(0)));
    v1_status.insert("desiredReplicas".into(), json!(status["desiredReplicas"].as_i64().unwrap_or(0)));
    for m in &current {
        if m["type"] == "Resource"
            && m["resource"]["name"] == "cpu"
            && let Some(u) = m["resource"]["current"]["averageUtilization"].as_i64()
        {
            v1_status.insert("currentCPUUtilizationPercentage".into(), json!(u));
        }
    }

    let mut out = obj.clone();
    out["apiVersion"] = json!("autoscaling/v1");
    set_annotations(&mut out, ann);
    out["spec"] = Value::Object(v1_spec);
    out["status"] = Value::Object(v1_status);
    out
}

fn cpu_target(utilization: &Value) -> Value {
    json!({ "type": "Resource", "resource": { "name": "cpu", "target": { "type": "Utilization", "averageUtilization": utilization } } })
}

/// `obj[key]` by a key compared without case, as Go's decoder matches struct fields.
fn get_ci<'a>(obj: &'a Value, key: &str) -> &'a Value {
    static NULL: Value = Value::Null;
    obj.as_object()
        .and_then(|m| m.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v))
        .unwrap_or(&NULL)
}

/// An annotation's JSON list, when it parses as one (upstream ignores one that does not).
fn annotation_list(ann: &Value, key: &str) -> Option<Vec<Value>> {
    let text = ann[key].as_str()?;
    match serde_json::from_str::<Value>(text).ok()? {
        Value::Array(a) if a.iter().all(Value::is_object) => Some(a),
        _ => None,
    }
}

fn present(pairs: Vec<(&str, Value)>) -> Value {
    Value::Object(pairs.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.to_string(), v)).collect())
}

fn identifier(name: &Value, sel: &Value) -> Value {
    present(vec![("name", name.clone()), ("selector", sel.clone())])
}

/// A v1 (annotation) MetricSpec in the v2 shape.
fn metric_spec_from_v1(m: &Value) -> Value {
    let t = m["type"].clone();
    match m["type"].as_str().unwrap_or_default() {
        "Object" => {
            let o = &m["object"];
            let kind = if o["averageValue"].is_null() { "Value" } else { "AverageValue" };
            json!({ "type": t, "object": {
                "describedObject": o["target"],
                "metric": identifier(&o["metricName"], &o["selector"]),
                "target": present(vec![("type", json!(kind)), ("value", if o["targetValue"].is_null() { json!("0") } else { o["targetValue"].clone() }), ("averageValue", o["averageValue"].clone())]),
            } })
        }
        "Pods" => {
            let p = &m["pods"];
            let avg =
                if p["targetAverageValue"].is_null() { json!("0") } else { p["targetAverageValue"].clone() };
            json!({ "type": t, "pods": {
                "metric": identifier(&p["metricName"], &p["selector"]),
                "target": { "type": "AverageValue", "averageValue": avg },
            } })
        }
        "Resource" | "ContainerResource" => {
            let key = if m["type"] == "Resource" { "resource" } else { "containerResource" };
            let r = &m[key];
            let kind = if r["targetAverageUtilization"].is_null() { "AverageValue" } else { "Utilization" };
            let mut src = present(vec![
                ("name", r["name"].clone()),
                (
                    "target",
                    present(vec![
                        ("type", json!(kind)),
                        ("averageValue", r["targetAverageValue"].clone()),
                        ("averageUtilization", r["targetAverageUtilization"].clone()),
                    ]),
                ),
            ]);
            if key == "containerResource" {
                src["container"] = r["container"].clone();
            }
            json!({ "type": t, key: src })
        }
        "External" => {
            let e = &m["external"];
            let kind = if e["targetValue"].is_null() { "AverageValue" } else { "Value" };
            json!({ "type": t, "external": {
                "metric": identifier(&e["metricName"], &e["metricSelector"]),
                "target": present(vec![("type", json!(kind)), ("value", e["targetValue"].clone()), ("averageValue", e["targetAverageValue"].clone())]),
            } })
        }
        _ => json!({ "type": t }),
    }
}

/// A v1 (annotation) MetricStatus in the v2 shape.
fn metric_status_from_v1(m: &Value) -> Value {
    let t = m["type"].clone();
    let zero = |v: &Value| if v.is_null() { json!("0") } else { v.clone() };
    match m["type"].as_str().unwrap_or_default() {
        "Object" => {
            let o = &m["object"];
            json!({ "type": t, "object": {
                "describedObject": o["target"],
                "metric": identifier(&o["metricName"], &o["selector"]),
                "current": present(vec![("value", zero(&o["currentValue"])), ("averageValue", o["averageValue"].clone())]),
            } })
        }
        "Pods" => {
            let p = &m["pods"];
            json!({ "type": t, "pods": {
                "metric": identifier(&p["metricName"], &p["selector"]),
                "current": { "averageValue": zero(&p["currentAverageValue"]) },
            } })
        }
        "Resource" | "ContainerResource" => {
            let key = if m["type"] == "Resource" { "resource" } else { "containerResource" };
            let r = &m[key];
            let mut src = json!({
                "name": r["name"],
                "current": present(vec![("averageUtilization", r["currentAverageUtilization"].clone()), ("averageValue", zero(&r["currentAverageValue"]))]),
            });
            if key == "containerResource" {
                src["container"] = r["container"].clone();
            }
            json!({ "type": t, key: src })
        }
        "External" => {
            let e = &m["external"];
            json!({ "type": t, "external": {
                "metric": identifier(&e["metricName"], &e["metricSelector"]),
                "current": present(vec![("value", zero(&e["currentValue"])), ("averageValue", e["currentAverageValue"].clone())]),
            } })
        }
        _ => json!({ "type": t }),
    }
}

/// The behavior annotation (Go field names, matched without case), when well formed and
/// not empty.
fn behavior_from_annotation(ann: &Value) -> Option<Value> {
    let text = ann[BEHAVIOR].as_str()?;
    let b: Value = serde_json::from_str(text).ok()?;
    let rules = |r: &Value| -> Value {
        if !r.is_object() {
            return Value::Null;
        }
        let policies = get_ci(r, "policies").as_array().map(|ps| {
            ps.iter()
                .map(|p| {
                    present(vec![
                        ("type", get_ci(p, "type").clone()),
                        ("value", get_ci(p, "value").clone()),
                        ("periodSeconds", get_ci(p, "periodSeconds").clone()),
                    ])
                })
                .collect::<Vec<_>>()
        });
        present(vec![
            ("stabilizationWindowSeconds", get_ci(r, "stabilizationWindowSeconds").clone()),
            ("selectPolicy", get_ci(r, "selectPolicy").clone()),
            ("policies", policies.map(Value::from).unwrap_or(Value::Null)),
        ])
    };
    let out = present(vec![
        ("scaleUp", rules(get_ci(&b, "scaleUp"))),
        ("scaleDown", rules(get_ci(&b, "scaleDown"))),
    ]);
    (out.as_object().is_some_and(|m| !m.is_empty())).then_some(out)
}

/// An autoscaling/v1 HPA in the stored (v2) shape.
pub fn v1_to_v2(obj: Value) -> Value {
    let spec = &obj["spec"];
    let status = &obj["status"];
    let ann = obj["metadata"]["annotations"].clone();

    let mut metrics: Vec<Value> = Vec::new();
    let cpu = (!spec["targetCPUUtilizationPercentage"].is_null())
        .then(|| cpu_target(&spec["targetCPUUtilizationPercentage"]));
    if let Some(others) = annotation_list(&ann, METRICS) {
        metrics.extend(others.iter().map(metric_spec_from_v1));
    }
    metrics.extend(cpu);
    if metrics.is_empty() {
        metrics.push(cpu_target(&json!(DEFAULT_CPU_UTILIZATION)));
    }
    let mut v2_spec = Map::new();
    copy_present(&mut v2_spec, spec, &["scaleTargetRef", "minReplicas", "maxReplicas"]);
    v2_spec.insert("metrics".into(), Value::from(metrics));
    if let Some(b) = behavior_from_annotation(&ann) {
        v2_spec.insert("behavior".into(), b);
    }

    let mut v2_status = Map::new();
    copy_present(
        &mut v2_status,
        status,
        &["observedGeneration", "lastScaleTime", "currentReplicas", "desiredReplicas"],
    );
    let mut current = Vec::new();
    if let Some(u) = status.get("currentCPUUtilizationPercentage").filter(|u| !u.is_null()) {
        current.push(json!({ "type": "Resource", "resource": { "name": "cpu", "current": { "averageUtilization": u } } }));
    }
    if let Some(list) = annotation_list(&ann, CURRENT_METRICS) {
        current = list.iter().map(metric_status_from_v1).collect();
    }
    if !current.is_empty() {
        v2_status.insert("currentMetrics".into(), Value::from(current));
    }
    if let Some(list) = annotation_list(&ann, CONDITIONS) {
        v2_status.insert("conditions".into(), Value::from(list));
    }

    let mut out = obj.clone();
    out["apiVersion"] = json!("autoscaling/v2");
    set_annotations(&mut out, annotations_without_round_trip(&obj));
    out["spec"] = Value::Object(v2_spec);
    if obj.get("status").is_some() || !v2_status.is_empty() {
        out["status"] = Value::Object(v2_status);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2() -> Value {
        json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": { "name": "h1", "namespace": "default", "annotations": { "keep": "me" } },
            "spec": {
                "scaleTargetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "web" },
                "minReplicas": 1, "maxReplicas": 5,
                "metrics": [
                    { "type": "Resource", "resource": { "name": "cpu", "target": { "type": "Utilization", "averageUtilization": 60 } } },
                    { "type": "Resource", "resource": { "name": "memory", "target": { "type": "AverageValue", "averageValue": "100Mi" } } },
                    { "type": "Pods", "pods": { "metric": { "name": "qps" }, "target": { "type": "AverageValue", "averageValue": "10" } } },
                    { "type": "Object", "object": { "describedObject": { "apiVersion": "v1", "kind": "Service", "name": "s" }, "metric": { "name": "hits", "selector": { "matchLabels": { "a": "b" } } }, "target": { "type": "Value", "value": "100" } } },
                    { "type": "External", "external": { "metric": { "name": "queue" }, "target": { "type": "AverageValue", "averageValue": "30" } } },
                    { "type": "ContainerResource", "containerResource": { "name": "cpu", "container": "app", "target": { "type": "Utilization", "averageUtilization": 70 } } },
                ],
                "behavior": {
                    "scaleUp": { "stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [{ "type": "Pods", "value": 4, "periodSeconds": 15 }, { "type": "Percent", "value": 100, "periodSeconds": 15 }] },
                    "scaleDown": { "stabilizationWindowSeconds": 60, "selectPolicy": "Max", "policies": [{ "type": "Percent", "value": 100, "periodSeconds": 15 }] },
                },
            },
            "status": {
                "currentReplicas": 2, "desiredReplicas": 3, "lastScaleTime": "2024-01-01T00:00:00Z",
                "currentMetrics": [
                    { "type": "Resource", "resource": { "name": "cpu", "current": { "averageUtilization": 55, "averageValue": "200m" } } },
                    { "type": "Pods", "pods": { "metric": { "name": "qps" }, "current": { "averageValue": "9" } } },
                    { "type": "Object", "object": { "describedObject": { "apiVersion": "v1", "kind": "Service", "name": "s" }, "metric": { "name": "hits" }, "current": { "value": "90" } } },
                    { "type": "External", "external": { "metric": { "name": "queue" }, "current": { "averageValue": "20" } } },
                ],
                "conditions": [{ "type": "AbleToScale", "status": "True", "reason": "R", "message": "m", "lastTransitionTime": "2024-01-01T00:00:00Z" }],
            },
        })
    }

    /// The annotations upstream v1.28.4 wrote for the same object (captured from its
    /// API server).
    #[test]
    fn v1_view_matches_upstream() {
        let v1 = v2_to_v1(v2());
        assert_eq!(v1["apiVersion"], "autoscaling/v1");
        assert_eq!(
            v1["spec"],
            json!({ "scaleTargetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "web" }, "minReplicas": 1, "maxReplicas": 5, "targetCPUUtilizationPercentage": 60 })
        );
        assert_eq!(
            v1["status"],
            json!({ "lastScaleTime": "2024-01-01T00:00:00Z", "currentReplicas": 2, "desiredReplicas": 3, "currentCPUUtilizationPercentage": 55 })
        );
        let ann = &v1["metadata"]["annotations"];
        assert_eq!(ann["keep"], "me");
        assert_eq!(
            ann[METRICS],
            r#"[{"type":"Resource","resource":{"name":"memory","targetAverageValue":"100Mi"}},{"type":"Pods","pods":{"metricName":"qps","targetAverageValue":"10"}},{"type":"Object","object":{"target":{"kind":"Service","name":"s","apiVersion":"v1"},"metricName":"hits","targetValue":"100","selector":{"matchLabels":{"a":"b"}}}},{"type":"External","external":{"metricName":"queue","targetAverageValue":"30"}},{"type":"ContainerResource","containerResource":{"name":"cpu","targetAverageUtilization":70,"container":"app"}}]"#
        );
        assert_eq!(
            ann[CURRENT_METRICS],
            r#"[{"type":"Resource","resource":{"name":"cpu","currentAverageUtilization":55,"currentAverageValue":"200m"}},{"type":"Pods","pods":{"metricName":"qps","currentAverageValue":"9"}},{"type":"Object","object":{"target":{"kind":"Service","name":"s","apiVersion":"v1"},"metricName":"hits","currentValue":"90"}},{"type":"External","external":{"metricName":"queue","currentValue":"0","currentAverageValue":"20"}}]"#
        );
        assert_eq!(
            ann[BEHAVIOR],
            r#"{"ScaleUp":{"StabilizationWindowSeconds":0,"SelectPolicy":"Max","Policies":[{"Type":"Pods","Value":4,"PeriodSeconds":15},{"Type":"Percent","Value":100,"PeriodSeconds":15}]},"ScaleDown":{"StabilizationWindowSeconds":60,"SelectPolicy":"Max","Policies":[{"Type":"Percent","Value":100,"PeriodSeconds":15}]}}"#
        );
        assert_eq!(
            ann[CONDITIONS],
            r#"[{"type":"AbleToScale","status":"True","lastTransitionTime":"2024-01-01T00:00:00Z","reason":"R","message":"m"}]"#
        );
    }

    #[test]
    fn round_trip_through_v1() {
        let back = v1_to_v2(v2_to_v1(v2()));
        let orig = v2();
        assert_eq!(back["metadata"]["annotations"], json!({ "keep": "me" }));
        assert_eq!(back["spec"]["behavior"], orig["spec"]["behavior"]);
        // The CPU target comes back last (upstream appends it after the others).
        let names: Vec<String> = back["spec"]["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["type"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["Resource", "Pods", "Object", "External", "ContainerResource", "Resource"]);
        assert_eq!(back["spec"]["metrics"][5], orig["spec"]["metrics"][0]);
        assert_eq!(back["spec"]["metrics"][0], orig["spec"]["metrics"][1]);
        assert_eq!(back["status"]["conditions"], orig["status"]["conditions"]);
        assert_eq!(back["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"], 55);
    }

    #[test]
    fn bare_v1_gets_the_implicit_cpu_target() {
        let v1 = json!({ "metadata": { "name": "h" }, "spec": { "scaleTargetRef": { "kind": "Deployment", "name": "web" }, "maxReplicas": 4 } });
        let v2 = v1_to_v2(v1);
        assert_eq!(v2["spec"]["metrics"], json!([cpu_target(&json!(80))]));
        assert_eq!(v2_to_v1(v2)["spec"]["targetCPUUtilizationPercentage"], 80);
        // A malformed annotation is ignored, and dropped.
        let junk = json!({ "metadata": { "annotations": { CONDITIONS: "junk", BEHAVIOR: "{}" } }, "spec": { "maxReplicas": 1 } });
        let v2 = v1_to_v2(junk);
        assert!(v2["metadata"].get("annotations").is_none());
        assert!(v2["spec"].get("behavior").is_none());
    }
}
