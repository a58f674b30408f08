//! ReplicaSets (upstream's `SetDefaults_ReplicaSet` and `ValidateReplicaSet`).

use serde_json::{Value, json};

use super::{selector_immutable, validate_selector};
use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::resources::core::pod_spec::{default_template, set_default};
use crate::registry::resources::core::replication_controller::validate_controller_template;
use crate::validation::nonnegative;

pub struct ReplicaSetHooks;

impl Hooks for ReplicaSetHooks {
    fn warnings(&self, obj: &Value) -> Vec<String> {
        crate::registry::resources::core::pod_warnings::template_warnings(obj, &["spec", "template"])
    }

    fn default(&self, obj: &mut Value) {
        set_default(&mut obj["spec"], "replicas", json!(1));
        if obj["spec"]["template"].is_object() {
            default_template(&mut obj["spec"]["template"]);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let spec = &obj["spec"];
        let mut errs = nonnegative("spec.replicas", &spec["replicas"]);
        errs.extend(nonnegative("spec.minReadySeconds", &spec["minReadySeconds"]));
        // (Upstream's message says "deployment" for replica sets too.)
        let (sel_errs, matches) = validate_selector(spec, "deployment", true);
        errs.extend(sel_errs);
        errs.extend(validate_controller_template(&spec["template"], matches, "spec.template", "ReplicaSet"));
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        selector_immutable(new, old)
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn fields(&self, obj: &Value) -> Vec<(&'static str, String)> {
        vec![("status.replicas", obj["status"]["replicas"].as_i64().unwrap_or(0).to_string())]
    }

    fn field_names(&self) -> &'static [&'static str] {
        &["status.replicas"]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_selector() {
        let mut rs = json!({ "spec": { "template": { "metadata": { "labels": { "a": "b" } }, "spec": { "containers": [{ "name": "c", "image": "x" }] } } } });
        ReplicaSetHooks.default(&mut rs);
        assert_eq!(rs["spec"]["replicas"], 1);
        let texts: Vec<String> = ReplicaSetHooks.validate(&rs).iter().map(FieldError::to_text).collect();
        assert_eq!(
            texts,
            vec![
                "spec.selector: Required value",
                "spec.template.metadata.labels: Invalid value: {\"a\":\"b\"}: `selector` does not match template `labels`",
            ]
        );
        rs["spec"]["selector"] = json!({});
        let texts: Vec<String> = ReplicaSetHooks.validate(&rs).iter().map(FieldError::to_text).collect();
        assert_eq!(texts, vec!["spec.selector: Invalid value: {}: empty selector is invalid for deployment"]);
    }
}
