//! PriorityClasses (upstream's `SetDefaults_PriorityClass` and `ValidatePriorityClass`):
//! user classes stay at or below one billion, `system-` names are reserved for the
//! built-in classes, and value and preemption policy never change.

use serde_json::{Value, json};

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::resources::core::pod_spec::preemption_policy;
use crate::validation as v;

pub struct PriorityClassHooks;

const HIGHEST_USER_PRIORITY: i64 = 1_000_000_000;
const SYSTEM_CLASSES: &[(&str, i64)] =
    &[("system-node-critical", 2_000_001_000), ("system-cluster-critical", 2_000_000_000)];

impl Hooks for PriorityClassHooks {
    fn default(&self, obj: &mut Value) {
        if obj["preemptionPolicy"].as_str().is_none_or(str::is_empty) {
            obj["preemptionPolicy"] = json!("PreemptLowerPriority");
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        let value = obj["value"].as_i64().unwrap_or(0);
        if name.starts_with("system-") {
            let known = SYSTEM_CLASSES.iter().find(|(n, _)| *n == name);
            let problem = match known {
                None => Some(format!("{name} is not a known system priority class")),
                Some((_, want)) if *want != value => {
                    Some(format!("value of {name} PriorityClass must be {want}"))
                }
                Some(_) if obj["globalDefault"].as_bool() == Some(true) => {
                    Some(format!("globalDefault of {name} PriorityClass must be false"))
                }
                _ => None,
            };
            if let Some(p) = problem {
                errs.push(FieldError::forbidden(
                    "metadata.name",
                    format!("priority class names with 'system-' prefix are reserved for system use only. error: {p}"),
                ));
            }
        } else if value > HIGHEST_USER_PRIORITY {
            errs.push(FieldError::forbidden(
                "value",
                format!("maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}"),
            ));
        }
        if let Some(p) = obj["preemptionPolicy"].as_str() {
            errs.extend(preemption_policy("preemptionPolicy", p));
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if new["value"] != old["value"] {
            errs.push(FieldError::forbidden("value", "may not be changed in an update."));
        }
        let mut old_policy = old["preemptionPolicy"].clone();
        if old_policy.is_null() {
            old_policy = json!("PreemptLowerPriority");
        }
        errs.extend(v::immutable("preemptionPolicy", &new["preemptionPolicy"], &old_policy));
        errs
    }

    fn has_status(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(FieldError::to_text).collect()
    }

    #[test]
    fn values_and_names() {
        let mut pc = json!({ "metadata": { "name": "high" }, "value": 1_000_000_001 });
        PriorityClassHooks.default(&mut pc);
        assert_eq!(pc["preemptionPolicy"], "PreemptLowerPriority");
        assert_eq!(
            texts(PriorityClassHooks.validate(&pc)),
            vec!["value: Forbidden: maximum allowed value of a user defined priority is 1000000000"]
        );
        let sys = json!({ "metadata": { "name": "system-mine" }, "value": 5 });
        assert_eq!(
            texts(PriorityClassHooks.validate(&sys)),
            vec![
                "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class"
            ]
        );
        let builtin = json!({ "metadata": { "name": "system-node-critical" }, "value": 2_000_001_000 });
        assert!(PriorityClassHooks.validate(&builtin).is_empty());
        let old = json!({ "value": 1 });
        let new = json!({ "value": 2, "preemptionPolicy": "PreemptLowerPriority" });
        assert_eq!(
            texts(PriorityClassHooks.validate_update(&new, &old)),
            vec!["value: Forbidden: may not be changed in an update."]
        );
    }
}
