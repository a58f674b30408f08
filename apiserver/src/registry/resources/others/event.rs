//! events.k8s.io/v1 Events: the core/v1 Events seen in the newer shape. They are stored
//! as core/v1 Events under the same key, so both APIs serve the same objects; writes
//! through this API get the stricter events.k8s.io checks.

use serde_json::Value;

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::resources::core::event::{
    core_to_events, events_to_core, selectable_fields, validate_legacy, validate_strict_create,
    validate_strict_update,
};

pub struct EventHooks;

const FIELDS: &[&str] = &[
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingController",
    "source",
    "type",
];

impl Hooks for EventHooks {
    fn stored_to_served(&self, obj: Value) -> Value {
        core_to_events(obj)
    }

    fn served_to_stored(&self, obj: Value) -> Value {
        events_to_core(obj)
    }

    /// Checks run on the core shape, so errors name the core fields, as upstream's do.
    /// An object without a resourceVersion is a create (updates are `validate_update`'s).
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let core = events_to_core(obj.clone());
        let mut errs = validate_legacy(&core);
        if obj["metadata"]["resourceVersion"].is_null() {
            errs.extend(validate_strict_create(&core));
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        validate_strict_update(&events_to_core(new.clone()), &events_to_core(old.clone()))
    }

    fn has_status(&self) -> bool {
        false
    }

    fn fields(&self, obj: &Value) -> Vec<(&'static str, String)> {
        selectable_fields(&events_to_core(obj.clone()))
            .into_iter()
            .map(|(k, v)| {
                let k = match k.strip_prefix("involvedObject.") {
                    Some(rest) => FIELDS
                        .iter()
                        .find(|f| f.strip_prefix("regarding.") == Some(rest))
                        .copied()
                        .unwrap_or(k),
                    None if k == "reportingComponent" => "reportingController",
                    None => k,
                };
                (k, v)
            })
            .collect()
    }

    fn field_names(&self) -> &'static [&'static str] {
        FIELDS
    }

    fn create_on_update(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn new_event() -> Value {
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": { "name": "web.17", "namespace": "default" },
            "eventTime": "2024-01-01T00:00:00.000000Z",
            "reportingController": "example.com/ctl", "reportingInstance": "ctl-1",
            "action": "Scale", "reason": "Scaled", "type": "Normal", "note": "scaled to 3",
            "regarding": { "kind": "Deployment", "name": "web", "namespace": "default" },
        })
    }

    #[test]
    fn round_trips_through_storage() {
        let stored = EventHooks.served_to_stored(new_event());
        assert_eq!(stored["apiVersion"], "v1");
        assert_eq!(stored["message"], "scaled to 3");
        assert_eq!(stored["reportingComponent"], "example.com/ctl");
        assert_eq!(stored["involvedObject"]["kind"], "Deployment");
        assert_eq!(EventHooks.stored_to_served(stored), new_event());
    }

    #[test]
    fn strict_rules_and_fields() {
        assert!(EventHooks.validate(&new_event()).is_empty(), "{:?}", EventHooks.validate(&new_event()));
        let mut e = new_event();
        e["type"] = json!("Odd");
        e["deprecatedCount"] = json!(3);
        let texts: Vec<String> = EventHooks.validate(&e).iter().map(FieldError::to_text).collect();
        assert_eq!(
            texts,
            vec![
                "type: Invalid value: \"\": has invalid value: Odd",
                "count: Invalid value: \"\": needs to be unset"
            ]
        );
        let fields = EventHooks.fields(&new_event());
        assert!(fields.contains(&("regarding.kind", "Deployment".to_string())));
        assert!(fields.contains(&("reportingController", "example.com/ctl".to_string())));
        assert!(fields.contains(&("source", "example.com/ctl".to_string())));
        let mut changed = new_event();
        changed["note"] = json!("other");
        assert_eq!(
            EventHooks.validate_update(&changed, &new_event())[0].to_text(),
            "message: Invalid value: \"other\": field is immutable"
        );
    }
}
