//! CSIDrivers (upstream's `SetDefaults_CSIDriver`, `ValidateCSIDriver` and the csidriver
//! strategy): what the kubelet and the attach/detach controller must know of a driver.
//! As of 1.29 only `attachRequired` and `volumeLifecycleModes` are immutable.

use serde_json::{Value, json};

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::resources::core::pod_spec::set_default;
use crate::validation::{self as v, index, show};

pub struct CSIDriverHooks;

const LIFECYCLE_MODES: &[&str] = &["Persistent", "Ephemeral"];
const FS_GROUP_POLICIES: &[&str] = &["File", "None", "ReadWriteOnceWithFSType"];
/// TokenRequest lifetimes a driver may ask for (10 minutes to 2^32 seconds).
const MIN_TOKEN_SECONDS: i64 = 600;
const MAX_TOKEN_SECONDS: i64 = 1 << 32;

/// Fields of 1.33 (alpha, behind a gate that 1.32 does not have): dropped, as upstream
/// drops the fields of disabled features.
const NOT_SERVED: &[&str] = &["nodeAllocatableUpdatePeriodSeconds"];

fn drop_unserved(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        for f in NOT_SERVED {
            spec.remove(*f);
        }
    }
}

impl Hooks for CSIDriverHooks {
    fn default(&self, obj: &mut Value) {
        if !obj["spec"].is_object() {
            obj["spec"] = json!({});
        }
        let spec = &mut obj["spec"];
        set_default(spec, "attachRequired", json!(true));
        set_default(spec, "podInfoOnMount", json!(false));
        set_default(spec, "storageCapacity", json!(false));
        set_default(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
        set_default(spec, "requiresRepublish", json!(false));
        set_default(spec, "seLinuxMount", json!(false));
        if spec["volumeLifecycleModes"].as_array().is_none_or(|m| m.is_empty()) {
            spec["volumeLifecycleModes"] = json!(["Persistent"]);
        }
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        drop_unserved(obj);
    }

    /// A change of the token requests or of `requiresRepublish` counts as a new
    /// generation (the kubelet republishes volumes on it).
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        drop_unserved(new);
        let changed = |f: &str| new["spec"].get(f) != old["spec"].get(f);
        if changed("tokenRequests") || changed("requiresRepublish") {
            let g = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            new["metadata"]["generation"] = json!(g);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let spec = &obj["spec"];
        let mut errs = Vec::new();
        for f in ["attachRequired", "podInfoOnMount", "storageCapacity", "requiresRepublish", "seLinuxMount"]
        {
            if spec[f].is_null() {
                errs.push(FieldError::required(format!("spec.{f}"), ""));
            }
        }
        if let Some(p) = spec["fsGroupPolicy"].as_str()
            && !FS_GROUP_POLICIES.contains(&p)
        {
            errs.push(FieldError::not_supported("spec.fsGroupPolicy", p, FS_GROUP_POLICIES));
        }
        let mut audiences = std::collections::HashSet::new();
        for (i, t) in spec["tokenRequests"].as_array().into_iter().flatten().enumerate() {
            let p = index("spec.tokenRequests", i);
            let audience = t["audience"].as_str().unwrap_or_default();
            if !audiences.insert(audience) {
                errs.push(FieldError::duplicate(format!("{p}.audience"), audience));
            }
            if let Some(s) = t["expirationSeconds"].as_i64() {
                if s < MIN_TOKEN_SECONDS {
                    errs.push(FieldError::invalid(
                        format!("{p}.expirationSeconds"),
                        s,
                        "may not specify a duration less than 10 minutes",
                    ));
                } else if s > MAX_TOKEN_SECONDS {
                    errs.push(FieldError::invalid(
                        format!("{p}.expirationSeconds"),
                        s,
                        "may not specify a duration larger than 2^32 seconds",
                    ));
                }
            }
        }
        for m in spec["volumeLifecycleModes"].as_array().into_iter().flatten() {
            let m = m.as_str().unwrap_or_default();
            if !LIFECYCLE_MODES.contains(&m) {
                errs.push(FieldError::not_supported("spec.volumeLifecycleModes", m, LIFECYCLE_MODES));
            }
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let (n, o) = (&new["spec"], &old["spec"]);
        let mut errs = Vec::new();
        // (Upstream's field path has this spelling.)
        if n["attachRequired"] != o["attachRequired"] {
            errs.push(FieldError::invalid(
                "spec.attachedRequired",
                show(&n["attachRequired"]),
                v::IMMUTABLE_MSG,
            ));
        }
        errs.extend(v::immutable(
            "spec.volumeLifecycleModes",
            &n["volumeLifecycleModes"],
            &o["volumeLifecycleModes"],
        ));
        errs
    }

    fn has_status(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_rules() {
        let mut d = json!({ "metadata": { "name": "d.example.com" } });
        CSIDriverHooks.default(&mut d);
        assert_eq!(
            d["spec"],
            json!({
                "attachRequired": true, "podInfoOnMount": false, "storageCapacity": false,
                "fsGroupPolicy": "ReadWriteOnceWithFSType", "requiresRepublish": false,
                "seLinuxMount": false, "volumeLifecycleModes": ["Persistent"],
            })
        );
        assert!(CSIDriverHooks.validate(&d).is_empty());
        let mut bad = d.clone();
        bad["spec"]["fsGroupPolicy"] = json!("Y");
        bad["spec"]["tokenRequests"] =
            json!([{ "audience": "", "expirationSeconds": 10 }, { "audience": "" }]);
        let texts: Vec<String> = CSIDriverHooks.validate(&bad).iter().map(FieldError::to_text).collect();
        assert_eq!(
            texts,
            [
                "spec.fsGroupPolicy: Unsupported value: \"Y\": supported values: \"File\", \"None\", \"ReadWriteOnceWithFSType\"",
                "spec.tokenRequests[0].expirationSeconds: Invalid value: 10: may not specify a duration less than 10 minutes",
                "spec.tokenRequests[1].audience: Duplicate value: \"\"",
            ]
        );
        let mut upd = d.clone();
        upd["spec"]["attachRequired"] = json!(false);
        upd["spec"]["podInfoOnMount"] = json!(true);
        let e = CSIDriverHooks.validate_update(&upd, &d);
        assert_eq!(e[0].to_text(), "spec.attachedRequired: Invalid value: false: field is immutable");
        assert_eq!(e.len(), 1, "podInfoOnMount is mutable since 1.29");
        let mut upd = d.clone();
        upd["spec"]["requiresRepublish"] = json!(true);
        CSIDriverHooks.prepare_for_update(&mut upd, &d);
        assert_eq!(upd["metadata"]["generation"], 1);
    }
}
