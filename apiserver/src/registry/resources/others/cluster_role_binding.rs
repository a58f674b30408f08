//! ClusterRoleBindings: bind ClusterRoles only; service account subjects name their
//! namespace.

use serde_json::Value;

use super::role_binding::{default_binding, role_ref_immutable, validate_binding};
use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::validation::NameRule;

pub struct ClusterRoleBindingHooks;

impl Hooks for ClusterRoleBindingHooks {
    fn default(&self, obj: &mut Value) {
        default_binding(obj);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validate_binding(obj, &["ClusterRole"], false)
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        role_ref_immutable(new, old)
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
