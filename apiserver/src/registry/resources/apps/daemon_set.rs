//! DaemonSets (upstream's `SetDefaults_DaemonSet` and `ValidateDaemonSet`); the template
//! generation is kept in the `deprecated.daemonset.template.generation` annotation, as
//! the apps/v1 conversion does.

use serde_json::{Value, json};

use super::{selector_immutable, validate_selector};
use crate::errors::FieldError;
use crate::registry::resource::{Hooks, copy_field};
use crate::registry::resources::core::pod_spec::{default_template, set_default};
use crate::registry::resources::core::replication_controller::validate_controller_template;
use crate::validation::{int_or_percent, int_or_percent_value, nonnegative, show};

pub struct DaemonSetHooks;

const TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";

fn template_generation(ds: &Value) -> i64 {
    ds["metadata"]["annotations"][TEMPLATE_GENERATION].as_str().and_then(|g| g.parse().ok()).unwrap_or(0)
}

fn set_template_generation(ds: &mut Value, g: i64) {
    if !ds["metadata"]["annotations"].is_object() {
        ds["metadata"]["annotations"] = json!({});
    }
    ds["metadata"]["annotations"][TEMPLATE_GENERATION] = json!(g.to_string());
}

fn validate_update_strategy(s: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let path = "spec.updateStrategy";
    match s["type"].as_str().unwrap_or_default() {
        "OnDelete" => {}
        "RollingUpdate" => {
            let ru = &s["rollingUpdate"];
            if !ru.is_object() {
                errs.push(FieldError::required(format!("{path}.rollingUpdate"), ""));
                return errs;
            }
            let (mu, ms) = (&ru["maxUnavailable"], &ru["maxSurge"]);
            errs.extend(int_or_percent(&format!("{path}.rollingUpdate.maxUnavailable"), mu, true));
            errs.extend(int_or_percent(&format!("{path}.rollingUpdate.maxSurge"), ms, true));
            match (int_or_percent_value(mu) != 0, int_or_percent_value(ms) != 0) {
                (true, true) => errs.push(FieldError::invalid(
                    format!("{path}.rollingUpdate.maxSurge"),
                    show(ms),
                    "may not be set when maxUnavailable is non-zero",
                )),
                (false, false) => errs.push(FieldError::required(
                    format!("{path}.rollingUpdate.maxUnavailable"),
                    "cannot be 0 when maxSurge is 0",
                )),
                _ => {}
            }
        }
        _ => errs.push(FieldError::not_supported(path, show(s), &["RollingUpdate", "OnDelete"])),
    }
    errs
}

impl Hooks for DaemonSetHooks {
    fn warnings(&self, obj: &Value) -> Vec<String> {
        crate::registry::resources::core::pod_warnings::template_warnings(obj, &["spec", "template"])
    }

    fn default(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        if spec["updateStrategy"]["type"].as_str().is_none_or(str::is_empty) {
            spec["updateStrategy"]["type"] = json!("RollingUpdate");
        }
        if spec["updateStrategy"]["type"] == "RollingUpdate" {
            let ru = &mut spec["updateStrategy"]["rollingUpdate"];
            set_default(ru, "maxUnavailable", json!(1));
            set_default(ru, "maxSurge", json!(0));
        }
        set_default(spec, "revisionHistoryLimit", json!(10));
        if spec["template"].is_object() {
            default_template(&mut spec["template"]);
        }
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        if let Some(o) = obj.as_object_mut() {
            o.remove("status");
        }
        set_template_generation(obj, 1);
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        copy_field(new, old, "status");
        let mut old_template = old["spec"]["template"].clone();
        default_template(&mut old_template);
        let mut new_template = new["spec"]["template"].clone();
        default_template(&mut new_template);
        let g = template_generation(old);
        set_template_generation(new, if new_template != old_template { g + 1 } else { g.max(1) });
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let spec = &obj["spec"];
        let (mut errs, matches) = validate_selector(spec, "daemonset", false);
        if !matches {
            errs.push(FieldError::invalid(
                "spec.template.metadata.labels",
                show(&spec["template"]["metadata"]["labels"]),
                "`selector` does not match template `labels`",
            ));
        }
        errs.extend(validate_controller_template(&spec["template"], true, "spec.template", "DaemonSet"));
        errs.extend(nonnegative("spec.minReadySeconds", &spec["minReadySeconds"]));
        errs.extend(validate_update_strategy(&spec["updateStrategy"]));
        errs.extend(nonnegative("spec.revisionHistoryLimit", &spec["revisionHistoryLimit"]));
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        selector_immutable(new, old)
    }

    fn tracks_generation(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ds() -> Value {
        let mut d = json!({
            "metadata": { "name": "agent" },
            "spec": {
                "selector": { "matchLabels": { "app": "agent" } },
                "template": { "metadata": { "labels": { "app": "agent" } }, "spec": { "containers": [{ "name": "c", "image": "x:1" }] } },
            },
        });
        DaemonSetHooks.prepare_for_create(&mut d);
        DaemonSetHooks.default(&mut d);
        d
    }

    #[test]
    fn defaults_and_template_generation() {
        let d = ds();
        assert_eq!(
            d["spec"]["updateStrategy"],
            json!({ "type": "RollingUpdate", "rollingUpdate": { "maxUnavailable": 1, "maxSurge": 0 } })
        );
        assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(d["metadata"]["annotations"][TEMPLATE_GENERATION], "1");
        assert!(DaemonSetHooks.validate(&d).is_empty(), "{:?}", DaemonSetHooks.validate(&d));
        let mut new = d.clone();
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("x:2");
        DaemonSetHooks.prepare_for_update(&mut new, &d);
        assert_eq!(new["metadata"]["annotations"][TEMPLATE_GENERATION], "2");
    }

    #[test]
    fn strategy_rules() {
        let mut d = ds();
        d["spec"]["updateStrategy"]["rollingUpdate"] = json!({ "maxUnavailable": 0, "maxSurge": 0 });
        assert_eq!(
            DaemonSetHooks.validate(&d)[0].to_text(),
            "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"
        );
    }
}
