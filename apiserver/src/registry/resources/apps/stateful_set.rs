//! StatefulSets (upstream's `SetDefaults_StatefulSet` and `ValidateStatefulSet`). As
//! upstream, the pod template is checked for labels, annotations, restart policy and
//! deadline only (its volumes may come from the claim templates).

use serde_json::{Value, json};

use super::validate_selector;
use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::resources::core::pod_spec::{self, default_claim_spec, default_template, set_default};
use crate::registry::resources::items_mut;
use crate::validation::{
    self as v, NameRule, int_or_percent, int_or_percent_value, labels, nonnegative, show,
};

pub struct StatefulSetHooks;

/// The fields a statefulset update may change (upstream's message lists them).
const MUTABLE: &[&str] = &[
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

impl Hooks for StatefulSetHooks {
    fn warnings(&self, obj: &Value) -> Vec<String> {
        crate::registry::resources::core::pod_warnings::template_warnings(obj, &["spec", "template"])
    }

    fn default(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        if spec["podManagementPolicy"].as_str().is_none_or(str::is_empty) {
            spec["podManagementPolicy"] = json!("OrderedReady");
        }
        if spec["updateStrategy"]["type"].as_str().is_none_or(str::is_empty) {
            spec["updateStrategy"]["type"] = json!("RollingUpdate");
            set_default(&mut spec["updateStrategy"], "rollingUpdate", json!({}));
        }
        if spec["updateStrategy"]["type"] == "RollingUpdate"
            && spec["updateStrategy"]["rollingUpdate"].is_object()
        {
            set_default(&mut spec["updateStrategy"]["rollingUpdate"], "partition", json!(0));
        }
        let retention = &mut spec["persistentVolumeClaimRetentionPolicy"];
        for f in ["whenDeleted", "whenScaled"] {
            if retention[f].as_str().is_none_or(str::is_empty) {
                retention[f] = json!("Retain");
            }
        }
        set_default(spec, "replicas", json!(1));
        set_default(spec, "revisionHistoryLimit", json!(10));
        if spec["template"].is_object() {
            default_template(&mut spec["template"]);
        }
        for t in items_mut(spec, "volumeClaimTemplates") {
            default_claim_spec(&mut t["spec"]);
            // Claim templates are PersistentVolumeClaims: their status defaults too.
            if t["status"]["phase"].as_str().is_none_or(str::is_empty) {
                t["status"]["phase"] = json!("Pending");
            }
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let spec = &obj["spec"];
        let mut errs = Vec::new();
        match spec["podManagementPolicy"].as_str().unwrap_or_default() {
            "" => errs.push(FieldError::required("spec.podManagementPolicy", "")),
            "OrderedReady" | "Parallel" => {}
            other => errs.push(FieldError::invalid(
                "spec.podManagementPolicy",
                other,
                "must be 'OrderedReady' or 'Parallel'",
            )),
        }
        let us = &spec["updateStrategy"];
        match us["type"].as_str().unwrap_or_default() {
            "" => errs.push(FieldError::required("spec.updateStrategy", "")),
            "OnDelete" => {
                if !us["rollingUpdate"].is_null() {
                    errs.push(FieldError::invalid(
                        "spec.updateStrategy.rollingUpdate",
                        show(&us["rollingUpdate"]),
                        "only allowed for updateStrategy 'RollingUpdate'",
                    ));
                }
            }
            "RollingUpdate" => {
                let ru = &us["rollingUpdate"];
                errs.extend(nonnegative("spec.updateStrategy.rollingUpdate.partition", &ru["partition"]));
                let mu = &ru["maxUnavailable"];
                if !mu.is_null() {
                    let p = "spec.updateStrategy.rollingUpdate.maxUnavailable";
                    errs.extend(int_or_percent(p, mu, true));
                    if int_or_percent_value(mu) == 0 {
                        errs.push(FieldError::invalid(p, show(mu), "cannot be 0"));
                    }
                }
            }
            _ => errs.push(FieldError::invalid(
                "spec.updateStrategy",
                show(us),
                "must be 'RollingUpdate' or 'OnDelete'",
            )),
        }
        for f in ["whenDeleted", "whenScaled"] {
            if let Some(p) = spec["persistentVolumeClaimRetentionPolicy"][f].as_str()
                && !["Retain", "Delete"].contains(&p)
            {
                errs.push(FieldError::not_supported(
                    format!("spec.persistentVolumeClaimRetentionPolicy.{f}"),
                    p,
                    &["Retain", "Delete"],
                ));
            }
        }
        errs.extend(nonnegative("spec.replicas", &spec["replicas"]));
        errs.extend(nonnegative("spec.minReadySeconds", &spec["minReadySeconds"]));
        errs.extend(nonnegative("spec.ordinals.start", &spec["ordinals"]["start"]));
        let (sel_errs, matches) = validate_selector(spec, "statefulset", true);
        errs.extend(sel_errs);
        let template = &spec["template"];
        if !matches && spec["selector"].is_object() {
            errs.push(FieldError::invalid(
                "spec.template.metadata.labels",
                show(&template["metadata"]["labels"]),
                "`selector` does not match template `labels`",
            ));
        }
        errs.extend(labels("spec.template.labels", template["metadata"].get("labels")));
        errs.extend(v::annotations("spec.template.annotations", template["metadata"].get("annotations")));
        errs.extend(pod_spec::pod_annotations(
            "spec.template.annotations",
            &template["metadata"],
            &template["spec"],
        ));
        let restart = template["spec"]["restartPolicy"].as_str().unwrap_or_default();
        if restart != "Always" {
            errs.push(FieldError::not_supported("spec.template.spec.restartPolicy", restart, &["Always"]));
        }
        if !template["spec"]["activeDeadlineSeconds"].is_null() {
            errs.push(FieldError::forbidden(
                "spec.template.spec.activeDeadlineSeconds",
                "activeDeadlineSeconds in StatefulSet is not Supported",
            ));
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let strip = |s: &Value| {
            let mut s = s.clone();
            if let Some(o) = s.as_object_mut() {
                for f in MUTABLE {
                    o.remove(*f);
                }
            }
            s
        };
        // The stored claim templates compared as defaulted (objects stored before their
        // defaults existed). A spec without templates must stay without the key: indexing
        // a missing key mutably would insert a null, and every update (a status write
        // too) would then look like a forbidden spec change.
        let mut old_spec = old["spec"].clone();
        if let Some(claims) = old_spec.get_mut("volumeClaimTemplates").and_then(Value::as_array_mut) {
            for t in claims {
                default_claim_spec(&mut t["spec"]);
                if t["status"]["phase"].is_null() {
                    t["status"]["phase"] = json!("Pending");
                }
            }
        }
        if strip(&new["spec"]) != strip(&old_spec) {
            vec![FieldError::forbidden(
                "spec",
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            )]
        } else {
            Vec::new()
        }
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }

    fn tracks_generation(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sts() -> Value {
        let mut s = json!({
            "metadata": { "name": "db" },
            "spec": {
                "serviceName": "db",
                "selector": { "matchLabels": { "app": "db" } },
                "template": { "metadata": { "labels": { "app": "db" } }, "spec": { "containers": [{ "name": "c", "image": "x" }] } },
                "volumeClaimTemplates": [{ "metadata": { "name": "data" }, "spec": { "accessModes": ["ReadWriteOnce"], "resources": { "requests": { "storage": "1Gi" } } } }],
            },
        });
        StatefulSetHooks.default(&mut s);
        s
    }

    #[test]
    fn defaults() {
        let s = sts();
        let spec = &s["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(spec["podManagementPolicy"], "OrderedReady");
        assert_eq!(
            spec["updateStrategy"],
            json!({ "type": "RollingUpdate", "rollingUpdate": { "partition": 0 } })
        );
        assert_eq!(spec["revisionHistoryLimit"], 10);
        assert_eq!(
            spec["persistentVolumeClaimRetentionPolicy"],
            json!({ "whenDeleted": "Retain", "whenScaled": "Retain" })
        );
        assert_eq!(spec["volumeClaimTemplates"][0]["spec"]["volumeMode"], "Filesystem");
        assert!(StatefulSetHooks.validate(&s).is_empty(), "{:?}", StatefulSetHooks.validate(&s));
    }

    #[test]
    fn only_some_fields_change() {
        let old = sts();
        let mut new = old.clone();
        new["spec"]["replicas"] = json!(3);
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("y");
        assert!(StatefulSetHooks.validate_update(&new, &old).is_empty());
        new["spec"]["serviceName"] = json!("other");
        // Without claim templates, an unchanged spec is no change (a status write).
        let mut bare = old.clone();
        bare["spec"].as_object_mut().unwrap().remove("volumeClaimTemplates");
        assert!(StatefulSetHooks.validate_update(&bare, &bare).is_empty());
        assert!(
            StatefulSetHooks.validate_update(&new, &old)[0]
                .to_text()
                .starts_with("spec: Forbidden: updates to statefulset spec for fields other than 'replicas'")
        );
    }
}
