//! ResourceQuotas (upstream's `ValidateResourceQuota`): quota resource names, non-negative
//! (and for object counts, whole) quantities, valid scopes that never change.

use serde_json::Value;

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::resources::at_mut;
use crate::validation::{self as v, key, qualified_name, show};

pub struct ResourceQuotaHooks;

const SCOPES: &[&str] = &[
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "PriorityClass",
    "CrossNamespacePodAffinity",
];

fn is_standard_quota_resource(name: &str) -> bool {
    const STANDARD: &[&str] = &[
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.storage",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "pods",
        "services",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "persistentvolumeclaims",
        "configmaps",
        "services.nodeports",
        "services.loadbalancers",
    ];
    STANDARD.contains(&name) || name.starts_with("requests.hugepages-") || name.starts_with("hugepages-")
}

fn resource_list(list: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (k, q) in list.as_object().into_iter().flatten() {
        let rp = key(path, k);
        let mut name_errs = qualified_name(&rp, k);
        if name_errs.is_empty() && !k.contains('/') && !is_standard_quota_resource(k) {
            name_errs.push(FieldError::invalid(&rp, k, "must be a standard resource for quota"));
        }
        errs.extend(name_errs);
        errs.extend(v::resource_quantity(k, &rp, q));
    }
    errs
}

impl Hooks for ResourceQuotaHooks {
    fn default(&self, obj: &mut Value) {
        if let Some(h) = at_mut(obj, &["spec", "hard"]) {
            v::canonicalize_resource_list(h);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let spec = &obj["spec"];
        let mut errs = resource_list(&spec["hard"], "spec.hard");
        let scopes: Vec<&str> =
            spec["scopes"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        for scope in &scopes {
            if !SCOPES.contains(scope) {
                errs.push(FieldError::invalid("spec.scopes", show(&spec["scopes"]), "unsupported scope"));
            }
        }
        for (a, b) in [("BestEffort", "NotBestEffort"), ("Terminating", "NotTerminating")] {
            if scopes.contains(&a) && scopes.contains(&b) {
                errs.push(FieldError::invalid("spec.scopes", show(&spec["scopes"]), "conflicting scopes"));
            }
        }
        for (i, req) in spec["scopeSelector"]["matchExpressions"].as_array().into_iter().flatten().enumerate()
        {
            let rp = format!("spec.scopeSelector.matchExpressions[{i}]");
            let scope = req["scopeName"].as_str().unwrap_or_default();
            if !SCOPES.contains(&scope) {
                errs.push(FieldError::invalid(format!("{rp}.scopeName"), scope, "unsupported scope"));
            }
            let values = req["values"].as_array().map(Vec::len).unwrap_or(0);
            match req["operator"].as_str().unwrap_or_default() {
                "In" | "NotIn" if values == 0 => errs.push(FieldError::required(
                    format!("{rp}.values"),
                    "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
                )),
                "Exists" | "DoesNotExist" if values != 0 => errs.push(FieldError::invalid(
                    format!("{rp}.values"),
                    show(&req["values"]),
                    "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector",
                )),
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                op => errs.push(FieldError::invalid(
                    format!("{rp}.operator"),
                    op,
                    "not a valid selector operator",
                )),
            }
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let scopes = |q: &Value| {
            let mut s: Vec<String> = q["spec"]["scopes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect();
            s.sort();
            s.dedup();
            s
        };
        if scopes(new) != scopes(old) {
            vec![FieldError::invalid("spec.scopes", show(&new["spec"]["scopes"]), v::IMMUTABLE_MSG)]
        } else {
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_quantities_scopes() {
        let q = json!({ "spec": { "hard": { "pods": "1.5", "foo": "1", "cpu": "-1" }, "scopes": ["BestEffort", "NotBestEffort"] } });
        let texts: Vec<String> = ResourceQuotaHooks.validate(&q).iter().map(FieldError::to_text).collect();
        assert!(
            texts.contains(&"spec.hard[pods]: Invalid value: 1.5: must be an integer".to_string()),
            "{texts:?}"
        );
        assert!(texts.contains(
            &"spec.hard[foo]: Invalid value: \"foo\": must be a standard resource for quota".to_string()
        ));
        assert!(
            texts.contains(
                &"spec.hard[cpu]: Invalid value: -1: must be greater than or equal to 0".to_string()
            )
        );
        assert!(texts.iter().any(|t| t.ends_with("conflicting scopes")));
    }
}
