//! ReplicationControllers (upstream's `SetDefaults_ReplicationController` and
//! `ValidateReplicationController`): the selector and labels default to the template's
//! labels, which the selector must match.

use serde_json::{Value, json};

use super::pod_spec::{self, Opts};
use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::validation::{labels, map_selector_matches, nonnegative, show};

pub struct ReplicationControllerHooks;

/// `ValidatePodTemplateSpecForRC`-like checks shared by the workload controllers: the
/// template is required, its labels match `matches`, it validates, restarts always and
/// has no deadline.
pub fn validate_controller_template(
    template: &Value,
    matches: bool,
    path: &str,
    kind: &str,
) -> Vec<FieldError> {
    if !template.is_object() {
        return vec![FieldError::required(path, "")];
    }
    let mut errs = Vec::new();
    if !matches {
        errs.push(FieldError::invalid(
            format!("{path}.metadata.labels"),
            show(&template["metadata"]["labels"]),
            "`selector` does not match template `labels`",
        ));
    }
    errs.extend(pod_spec::validate_template(template, path, Opts::default()));
    let restart = template["spec"]["restartPolicy"].as_str().unwrap_or_default();
    if restart != "Always" {
        errs.push(FieldError::not_supported(format!("{path}.spec.restartPolicy"), restart, &["Always"]));
    }
    if !template["spec"]["activeDeadlineSeconds"].is_null() {
        errs.push(FieldError::forbidden(
            format!("{path}.spec.activeDeadlineSeconds"),
            format!("activeDeadlineSeconds in {kind} is not Supported"),
        ));
    }
    errs
}

impl Hooks for ReplicationControllerHooks {
    fn warnings(&self, obj: &Value) -> Vec<String> {
        crate::registry::resources::core::pod_warnings::template_warnings(obj, &["spec", "template"])
    }

    fn default(&self, obj: &mut Value) {
        let template_labels = obj["spec"]["template"]["metadata"]["labels"].clone();
        if template_labels.is_object() {
            if obj["spec"]["selector"].as_object().is_none_or(|m| m.is_empty()) {
                obj["spec"]["selector"] = template_labels.clone();
            }
            if obj["metadata"]["labels"].as_object().is_none_or(|m| m.is_empty()) {
                obj["metadata"]["labels"] = template_labels;
            }
        }
        if obj["spec"]["replicas"].is_null() {
            obj["spec"]["replicas"] = json!(1);
        }
        if obj["spec"]["template"].is_object() {
            pod_spec::default_template(&mut obj["spec"]["template"]);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let spec = &obj["spec"];
        let mut errs = nonnegative("spec.minReadySeconds", &spec["minReadySeconds"]);
        let selector = &spec["selector"];
        if selector.as_object().is_none_or(|m| m.is_empty()) {
            errs.push(FieldError::required("spec.selector", ""));
        } else {
            errs.extend(labels("spec.selector", Some(selector)));
        }
        errs.extend(nonnegative("spec.replicas", &spec["replicas"]));
        let template = &spec["template"];
        let matches = selector.as_object().is_none_or(|m| m.is_empty())
            || map_selector_matches(selector, &template["metadata"]["labels"]);
        errs.extend(validate_controller_template(
            template,
            matches,
            "spec.template",
            "ReplicationController",
        ));
        errs
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
    fn selector_and_labels_default_to_the_template() {
        let mut rc = json!({ "metadata": { "name": "rc" }, "spec": { "template": { "metadata": { "labels": { "app": "a" } }, "spec": { "containers": [{ "name": "c", "image": "x" }] } } } });
        ReplicationControllerHooks.default(&mut rc);
        assert_eq!(rc["spec"]["selector"], json!({ "app": "a" }));
        assert_eq!(rc["metadata"]["labels"], json!({ "app": "a" }));
        assert_eq!(rc["spec"]["replicas"], 1);
        assert!(ReplicationControllerHooks.validate(&rc).is_empty());
        rc["spec"]["selector"] = json!({ "app": "b" });
        assert_eq!(
            ReplicationControllerHooks.validate(&rc)[0].to_text(),
            "spec.template.metadata.labels: Invalid value: {\"app\":\"a\"}: `selector` does not match template `labels`"
        );
    }
}
