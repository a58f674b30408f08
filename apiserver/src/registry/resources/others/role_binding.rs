//! RoleBindings (upstream's `SetDefaults_RoleBinding`/`SetDefaults_Subject` and
//! `ValidateRoleBinding`): the role reference never changes.

use serde_json::{Value, json};

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::resources::items_mut;
use crate::validation::{NameRule, child, index, show};

pub struct RoleBindingHooks;

pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Role ref and subjects' API groups.
pub fn default_binding(obj: &mut Value) {
    if obj["roleRef"]["apiGroup"].as_str().is_none_or(str::is_empty) {
        obj["roleRef"]["apiGroup"] = json!(RBAC_GROUP);
    }
    for s in items_mut(obj, "subjects") {
        if s["apiGroup"].as_str().is_none_or(str::is_empty) {
            match s["kind"].as_str() {
                Some("User" | "Group") => s["apiGroup"] = json!(RBAC_GROUP),
                Some("ServiceAccount") => s["apiGroup"] = json!(""),
                _ => {}
            }
        }
    }
}

/// `ValidateRoleBinding`/`ValidateClusterRoleBinding`: `kinds` are the role kinds a
/// binding may refer to.
pub fn validate_binding(obj: &Value, kinds: &[&str], namespaced: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let r = &obj["roleRef"];
    let group = r["apiGroup"].as_str().unwrap_or_default();
    if group != RBAC_GROUP {
        errs.push(FieldError::not_supported("roleRef.apiGroup", group, &[RBAC_GROUP]));
    }
    let kind = r["kind"].as_str().unwrap_or_default();
    if !kinds.contains(&kind) {
        errs.push(FieldError::not_supported("roleRef.kind", kind, kinds));
    }
    let name = r["name"].as_str().unwrap_or_default();
    if name.is_empty() {
        errs.push(FieldError::required("roleRef.name", ""));
    } else {
        errs.extend(NameRule::PathSegment.check("roleRef.name", name));
    }
    for (i, s) in obj["subjects"].as_array().into_iter().flatten().enumerate() {
        let sp = index("subjects", i);
        let (name, group) =
            (s["name"].as_str().unwrap_or_default(), s["apiGroup"].as_str().unwrap_or_default());
        if name.is_empty() {
            errs.push(FieldError::required(child(&sp, "name"), ""));
        }
        match s["kind"].as_str().unwrap_or_default() {
            "ServiceAccount" => {
                if !name.is_empty() {
                    errs.extend(crate::validation::dns1123_subdomain(&child(&sp, "name"), name));
                }
                if !group.is_empty() {
                    errs.push(FieldError::not_supported(child(&sp, "apiGroup"), group, &[""]));
                }
                if !namespaced && s["namespace"].as_str().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(child(&sp, "namespace"), ""));
                }
            }
            "User" | "Group" => {
                if group != RBAC_GROUP {
                    errs.push(FieldError::not_supported(child(&sp, "apiGroup"), group, &[RBAC_GROUP]));
                }
            }
            other => errs.push(FieldError::not_supported(
                child(&sp, "kind"),
                other,
                &["ServiceAccount", "User", "Group"],
            )),
        }
    }
    errs
}

/// The role reference is fixed at creation.
pub fn role_ref_immutable(new: &Value, old: &Value) -> Vec<FieldError> {
    if new["roleRef"] != old["roleRef"] {
        vec![FieldError::invalid("roleRef", show(&new["roleRef"]), "cannot change roleRef")]
    } else {
        Vec::new()
    }
}

impl Hooks for RoleBindingHooks {
    fn default(&self, obj: &mut Value) {
        default_binding(obj);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validate_binding(obj, &["Role", "ClusterRole"], true)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_rules() {
        let mut b = json!({ "roleRef": { "kind": "Role", "name": "r" }, "subjects": [{ "kind": "User", "name": "alice" }, { "kind": "ServiceAccount", "name": "sa" }] });
        RoleBindingHooks.default(&mut b);
        assert_eq!(b["roleRef"]["apiGroup"], RBAC_GROUP);
        assert_eq!(b["subjects"][0]["apiGroup"], RBAC_GROUP);
        assert_eq!(b["subjects"][1]["apiGroup"], "");
        assert!(RoleBindingHooks.validate(&b).is_empty());
        let mut changed = b.clone();
        changed["roleRef"]["name"] = json!("other");
        assert!(
            RoleBindingHooks.validate_update(&changed, &b)[0].to_text().ends_with(": cannot change roleRef")
        );
        let bad = json!({ "roleRef": { "apiGroup": RBAC_GROUP, "kind": "Thing", "name": "r" }, "subjects": [{ "kind": "Robot", "name": "x" }] });
        let texts: Vec<String> = RoleBindingHooks.validate(&bad).iter().map(FieldError::to_text).collect();
        assert_eq!(
            texts,
            vec![
                "roleRef.kind: Unsupported value: \"Thing\": supported values: \"Role\", \"ClusterRole\"",
                "subjects[0].kind: Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\"",
            ]
        );
    }
}
