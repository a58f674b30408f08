//! Roles (upstream's `ValidateRole`); names are path segments. The policy-rule checks are
//! shared with ClusterRoles.

use serde_json::Value;

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::validation::{NameRule, child, index, show};

pub struct RoleHooks;

/// `ValidatePolicyRule`.
pub fn validate_rules(rules: &Value, namespaced: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, r) in rules.as_array().into_iter().flatten().enumerate() {
        let rp = index("rules", i);
        let empty = |f: &str| r[f].as_array().is_none_or(Vec::is_empty);
        if empty("verbs") {
            errs.push(FieldError::required(child(&rp, "verbs"), "verbs must contain at least one value"));
        }
        if !empty("nonResourceURLs") {
            let np = child(&rp, "nonResourceURLs");
            if namespaced {
                errs.push(FieldError::invalid(
                    np.clone(),
                    show(&r["nonResourceURLs"]),
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if !empty("apiGroups") || !empty("resources") || !empty("resourceNames") {
                errs.push(FieldError::invalid(
                    np,
                    show(&r["nonResourceURLs"]),
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if empty("apiGroups") {
            errs.push(FieldError::required(
                child(&rp, "apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if empty("resources") {
            errs.push(FieldError::required(
                child(&rp, "resources"),
                "resource rules must supply at least one resource",
            ));
        }
    }
    errs
}

impl Hooks for RoleHooks {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validate_rules(&obj["rules"], true)
    }

    fn has_status(&self) -> bool {
        false
    }

    /// PUT may create (upstream's `AllowCreateOnUpdate`).
    fn create_on_update(&self) -> bool {
        true
    }

    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rules_need_verbs_groups_resources() {
        let r = json!({ "rules": [{ "resources": ["pods"] }, { "verbs": ["get"], "nonResourceURLs": ["/healthz"] }] });
        let texts: Vec<String> = RoleHooks.validate(&r).iter().map(FieldError::to_text).collect();
        assert_eq!(
            texts,
            vec![
                "rules[0].verbs: Required value: verbs must contain at least one value",
                "rules[0].apiGroups: Required value: resource rules must supply at least one api group",
                "rules[1].nonResourceURLs: Invalid value: [\"/healthz\"]: namespaced rules cannot apply to non-resource URLs",
            ]
        );
        assert_eq!(RoleHooks.name_rule(), NameRule::PathSegment);
    }
}
