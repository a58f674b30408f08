//! ClusterRoles (upstream's `ValidateClusterRole`): rules may name non-resource URLs, and
//! an aggregation rule needs selectors.

use serde_json::Value;

use super::role::validate_rules;
use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::validation::{NameRule, index, label_selector};

pub struct ClusterRoleHooks;

impl Hooks for ClusterRoleHooks {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = validate_rules(&obj["rules"], false);
        let agg = &obj["aggregationRule"];
        if agg.is_object() {
            let sels = agg["clusterRoleSelectors"].as_array().map(Vec::as_slice).unwrap_or_default();
            if sels.is_empty() {
                errs.push(FieldError::required(
                    "aggregationRule.clusterRoleSelectors",
                    "at least one clusterRoleSelector required if aggregationRule is non-nil",
                ));
            }
            for (i, s) in sels.iter().enumerate() {
                errs.extend(label_selector(&index("aggregationRule.clusterRoleSelectors", i), s));
            }
        }
        errs
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
