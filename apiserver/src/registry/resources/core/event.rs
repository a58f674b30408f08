//! core/v1 Events, and what events.k8s.io/v1 Events share with them: upstream stores both
//! as one object (the core shape, under `/registry/events`), so this module also holds
//! the conversion between the two shapes and the validation both run
//! (`pkg/apis/core/validation/events.go`).

use serde_json::{Map, Value, json};

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::validation::{self as v, NameRule, qualified_name};

pub struct EventHooks;

/// Field pairs that only change name between the core/v1 (left) and events.k8s.io/v1
/// (right) shapes; everything else (metadata, reason, type, action, related, series,
/// eventTime, reportingInstance) is the same field in both.
const RENAMED: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename(obj: Value, to_events: bool, api_version: &str) -> Value {
    let Value::Object(src) = obj else { return obj };
    let mut out = Map::new();
    for (k, val) in src {
        let renamed = RENAMED.iter().find_map(|(core, events)| match to_events {
            true if k == *core => Some(*events),
            false if k == *events => Some(*core),
            _ => None,
        });
        out.insert(renamed.map_or(k, str::to_string), val);
    }
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    Value::Object(out)
}

/// A stored (core/v1) Event in the events.k8s.io/v1 shape.
pub fn core_to_events(obj: Value) -> Value {
    rename(obj, true, "events.k8s.io/v1")
}

/// An events.k8s.io/v1 Event in the core/v1 (storage) shape.
pub fn events_to_core(obj: Value) -> Value {
    rename(obj, false, "v1")
}

fn s<'a>(e: &'a Value, f: &str) -> &'a str {
    e[f].as_str().unwrap_or_default()
}

/// `legacyValidateEvent`, on the core shape: what every Event must satisfy.
pub fn validate_legacy(e: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ns = e["metadata"]["namespace"].as_str().unwrap_or_default();
    let io_ns = s(&e["involvedObject"], "namespace");
    let mismatch =
        || FieldError::invalid("involvedObject.namespace", io_ns, "does not match event.namespace");
    if e["eventTime"].is_null() {
        if io_ns.is_empty() {
            if !ns.is_empty() && ns != "default" {
                errs.push(mismatch());
            }
        } else if ns != io_ns {
            errs.push(mismatch());
        }
    } else {
        if io_ns.is_empty() && ns != "default" && ns != "kube-system" {
            errs.push(mismatch());
        }
        let controller = s(e, "reportingComponent");
        if controller.is_empty() {
            errs.push(FieldError::required("reportingController", ""));
        }
        for err in qualified_name("reportingController", controller) {
            errs.push(err);
        }
        for (field, limit, name) in [
            ("reportingInstance", 128, "reportingInstance"),
            ("action", 128, "action"),
            ("reason", 128, "reason"),
        ] {
            let value = s(e, field);
            if value.is_empty() {
                errs.push(FieldError::required(name, ""));
            }
            if value.len() > limit {
                errs.push(FieldError::invalid(name, "", format!("can have at most {limit} characters")));
            }
        }
        if s(e, "message").len() > 1024 {
            errs.push(FieldError::invalid("message", "", "can have at most 1024 characters"));
        }
    }
    for err in v::dns1123_subdomain("namespace", ns) {
        errs.push(err);
    }
    errs
}

fn validate_series(e: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let series = &e["series"];
    if series.is_object() {
        if series["count"].as_i64().unwrap_or(0) < 2 {
            errs.push(FieldError::invalid("series.count", "", "should be at least 2"));
        }
        if series["lastObservedTime"].is_null() {
            errs.push(FieldError::required("series.lastObservedTime", ""));
        }
    }
    errs
}

/// What events.k8s.io/v1 adds on create (`ValidateEventCreate` for newer versions), on
/// the core shape.
pub fn validate_strict_create(e: &Value) -> Vec<FieldError> {
    let mut errs = validate_series(e);
    if e["eventTime"].is_null() {
        errs.push(FieldError::required("eventTime", ""));
    }
    let t = s(e, "type");
    if t != "Normal" && t != "Warning" {
        errs.push(FieldError::invalid("type", "", format!("has invalid value: {t}")));
    }
    for f in ["firstTimestamp", "lastTimestamp"] {
        if !e[f].is_null() {
            errs.push(FieldError::invalid(f, "", "needs to be unset"));
        }
    }
    if e["count"].as_i64().unwrap_or(0) != 0 {
        errs.push(FieldError::invalid("count", "", "needs to be unset"));
    }
    if !s(&e["source"], "component").is_empty() || !s(&e["source"], "host").is_empty() {
        errs.push(FieldError::invalid("source", "", "needs to be unset"));
    }
    errs
}

/// What events.k8s.io/v1 adds on update: most fields are immutable.
pub fn validate_strict_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if new["series"] != old["series"] {
        errs.extend(validate_series(new));
    }
    for (field, name) in [
        ("involvedObject", "involvedObject"),
        ("reason", "reason"),
        ("message", "message"),
        ("source", "source"),
        ("firstTimestamp", "firstTimestamp"),
        ("lastTimestamp", "lastTimestamp"),
        ("count", "count"),
        ("type", "type"),
        ("eventTime", "eventTime"),
        ("action", "action"),
        ("related", "related"),
        ("reportingComponent", "reportingController"),
        ("reportingInstance", "reportingInstance"),
    ] {
        errs.extend(v::immutable(name, &new[field], &old[field]));
    }
    errs
}

/// The fields events are selected by (core names), from the core shape.
pub fn selectable_fields(e: &Value) -> Vec<(&'static str, String)> {
    let io = &e["involvedObject"];
    let source = match s(&e["source"], "component") {
        "" => s(e, "reportingComponent"),
        c => c,
    };
    vec![
        ("involvedObject.kind", s(io, "kind").to_string()),
        ("involvedObject.namespace", s(io, "namespace").to_string()),
        ("involvedObject.name", s(io, "name").to_string()),
        ("involvedObject.uid", s(io, "uid").to_string()),
        ("involvedObject.apiVersion", s(io, "apiVersion").to_string()),
        ("involvedObject.resourceVersion", s(io, "resourceVersion").to_string()),
        ("involvedObject.fieldPath", s(io, "fieldPath").to_string()),
        ("reason", s(e, "reason").to_string()),
        ("reportingComponent", s(e, "reportingComponent").to_string()),
        ("source", source.to_string()),
        ("type", s(e, "type").to_string()),
    ]
}

pub const CORE_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

impl Hooks for EventHooks {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validate_legacy(obj)
    }

    fn has_status(&self) -> bool {
        false
    }

    fn fields(&self, obj: &Value) -> Vec<(&'static str, String)> {
        selectable_fields(obj)
    }

    fn field_names(&self) -> &'static [&'static str] {
        CORE_FIELDS
    }

    /// core/v1 names are only checked as path segments (the generic check all names
    /// get); events.k8s.io/v1 requires DNS subdomains.
    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn create_on_update(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core_event() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": { "name": "p.1", "namespace": "default" },
            "involvedObject": { "kind": "Pod", "name": "p", "namespace": "default" },
            "reason": "Started", "message": "Started container", "type": "Normal",
            "source": { "component": "kubelet", "host": "n1" },
            "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:00:01Z", "count": 2,
        })
    }

    #[test]
    fn shapes_convert_both_ways() {
        let e = core_to_events(core_event());
        assert_eq!(e["apiVersion"], "events.k8s.io/v1");
        assert_eq!(e["regarding"]["name"], "p");
        assert_eq!(e["note"], "Started container");
        assert_eq!(e["deprecatedSource"]["component"], "kubelet");
        assert_eq!(e["deprecatedCount"], 2);
        assert_eq!(e["deprecatedFirstTimestamp"], "2024-01-01T00:00:00Z");
        assert!(e.get("involvedObject").is_none() && e.get("message").is_none());
        assert_eq!(events_to_core(e), core_event());
    }

    #[test]
    fn legacy_rules_and_fields() {
        let mut e = core_event();
        assert!(EventHooks.validate(&e).is_empty());
        e["involvedObject"]["namespace"] = json!("other");
        assert_eq!(
            EventHooks.validate(&e)[0].to_text(),
            "involvedObject.namespace: Invalid value: \"other\": does not match event.namespace"
        );
        let fields = EventHooks.fields(&e);
        assert!(fields.contains(&("source", "kubelet".to_string())));
        assert!(fields.contains(&("involvedObject.kind", "Pod".to_string())));
    }

    #[test]
    fn new_style_events_need_reporting_fields() {
        let e = json!({ "metadata": { "name": "x", "namespace": "default" }, "eventTime": "2024-01-01T00:00:00.000000Z", "involvedObject": {} });
        let texts: Vec<String> = validate_legacy(&e).iter().map(FieldError::to_text).collect();
        assert!(texts.contains(&"reportingController: Required value".to_string()), "{texts:?}");
        assert!(texts.contains(&"action: Required value".to_string()));
        assert!(texts.contains(&"reason: Required value".to_string()));
    }
}
