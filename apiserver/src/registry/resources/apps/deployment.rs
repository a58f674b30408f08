//! Deployments (upstream's `SetDefaults_Deployment` and `ValidateDeployment`).

use serde_json::{Value, json};

use super::{selector_immutable, validate_selector};
use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::resources::core::pod_spec::{default_template, set_default};
use crate::registry::resources::core::replication_controller::validate_controller_template;
use crate::validation::{self as v, int_or_percent, int_or_percent_value, nonnegative};

pub struct DeploymentHooks;

fn validate_strategy(strategy: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ru = &strategy["rollingUpdate"];
    match strategy["type"].as_str().unwrap_or_default() {
        "Recreate" => {
            if !ru.is_null() {
                errs.push(FieldError::forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        "RollingUpdate" => {
            if !ru.is_object() {
                errs.push(FieldError::required(
                    "spec.strategy.rollingUpdate",
                    "this should be defaulted and never be nil",
                ));
            } else {
                let (mu, ms) = (&ru["maxUnavailable"], &ru["maxSurge"]);
                errs.extend(int_or_percent("spec.strategy.rollingUpdate.maxUnavailable", mu, false));
                errs.extend(int_or_percent("spec.strategy.rollingUpdate.maxSurge", ms, false));
                if int_or_percent_value(mu) == 0 && int_or_percent_value(ms) == 0 {
                    errs.push(FieldError::invalid(
                        "spec.strategy.rollingUpdate.maxUnavailable",
                        v::show(mu),
                        "may not be 0 when `maxSurge` is 0",
                    ));
                }
                if let Some(p) = mu.as_str().and_then(v::percent)
                    && p > 100
                {
                    errs.push(FieldError::invalid(
                        "spec.strategy.rollingUpdate.maxUnavailable",
                        v::show(mu),
                        "must not be greater than 100%",
                    ));
                }
            }
        }
        other => errs.push(FieldError::not_supported("spec.strategy", other, &["Recreate", "RollingUpdate"])),
    }
    errs
}

impl Hooks for DeploymentHooks {
    fn warnings(&self, obj: &Value) -> Vec<String> {
        crate::registry::resources::core::pod_warnings::template_warnings(obj, &["spec", "template"])
    }

    fn default(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        set_default(spec, "replicas", json!(1));
        if spec["strategy"]["type"].as_str().is_none_or(str::is_empty) {
            spec["strategy"]["type"] = json!("RollingUpdate");
        }
        if spec["strategy"]["type"] == "RollingUpdate" {
            let ru = &mut spec["strategy"]["rollingUpdate"];
            set_default(ru, "maxUnavailable", json!("25%"));
            set_default(ru, "maxSurge", json!("25%"));
        }
        set_default(spec, "revisionHistoryLimit", json!(10));
        set_default(spec, "progressDeadlineSeconds", json!(600));
        if spec["template"].is_object() {
            default_template(&mut spec["template"]);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let spec = &obj["spec"];
        let mut errs = nonnegative("spec.replicas", &spec["replicas"]);
        let (sel_errs, matches) = validate_selector(spec, "deployment", true);
        errs.extend(sel_errs);
        errs.extend(validate_controller_template(&spec["template"], matches, "spec.template", "ReplicaSet"));
        errs.extend(validate_strategy(&spec["strategy"]));
        errs.extend(nonnegative("spec.minReadySeconds", &spec["minReadySeconds"]));
        errs.extend(nonnegative("spec.revisionHistoryLimit", &spec["revisionHistoryLimit"]));
        if let Some(pd) = spec["progressDeadlineSeconds"].as_i64() {
            errs.extend(nonnegative("spec.progressDeadlineSeconds", &spec["progressDeadlineSeconds"]));
            if pd <= spec["minReadySeconds"].as_i64().unwrap_or(0) {
                errs.push(FieldError::invalid(
                    "spec.progressDeadlineSeconds",
                    pd,
                    "must be greater than minReadySeconds",
                ));
            }
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        selector_immutable(new, old)
    }

    /// As upstream's deployment status strategy: spec and labels stay as stored, but the
    /// writer's annotations are kept — the deployment controller records the
    /// `deployment.kubernetes.io/revision` annotation with a status update, and its
    /// bootstrap role holds no `patch` on deployments.
    fn prepare_for_status_update(&self, new: &mut Value, old: &Value) {
        crate::registry::resource::keep_spec(new, old);
        crate::registry::resource::copy_meta_field(new, old, "labels");
    }

    fn tracks_generation(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment() -> Value {
        let mut d = json!({
            "metadata": { "name": "web", "namespace": "default" },
            "spec": {
                "selector": { "matchLabels": { "app": "web" } },
                "template": { "metadata": { "labels": { "app": "web" } }, "spec": { "containers": [{ "name": "c", "image": "nginx" }] } },
            },
        });
        DeploymentHooks.default(&mut d);
        d
    }

    #[test]
    fn defaults() {
        let d = deployment();
        let spec = &d["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(
            spec["strategy"],
            json!({ "type": "RollingUpdate", "rollingUpdate": { "maxUnavailable": "25%", "maxSurge": "25%" } })
        );
        assert_eq!(spec["revisionHistoryLimit"], 10);
        assert_eq!(spec["progressDeadlineSeconds"], 600);
        assert_eq!(spec["template"]["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert!(DeploymentHooks.validate(&d).is_empty(), "{:?}", DeploymentHooks.validate(&d));
    }

    #[test]
    fn invalid() {
        let mut d = deployment();
        d["spec"]["replicas"] = json!(-1);
        d["spec"]["template"]["metadata"]["labels"] = json!({ "app": "other" });
        d["spec"]["strategy"]["rollingUpdate"] = json!({ "maxUnavailable": 0, "maxSurge": 0 });
        let texts: Vec<String> = DeploymentHooks.validate(&d).iter().map(FieldError::to_text).collect();
        assert_eq!(
            texts,
            vec![
                "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
                "spec.template.metadata.labels: Invalid value: {\"app\":\"other\"}: `selector` does not match template `labels`",
                "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: 0: may not be 0 when `maxSurge` is 0",
            ]
        );
    }

    #[test]
    fn selector_is_immutable() {
        let old = deployment();
        let mut new = old.clone();
        new["spec"]["selector"] = json!({ "matchLabels": { "app": "other" } });
        assert_eq!(
            DeploymentHooks.validate_update(&new, &old)[0].to_text(),
            "spec.selector: Invalid value: {\"matchLabels\":{\"app\":\"other\"}}: field is immutable"
        );
    }
}
