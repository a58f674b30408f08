//! PersistentVolumeClaims (upstream's `SetDefaults_PersistentVolumeClaimSpec`,
//! `ValidatePersistentVolumeClaim` and `ValidatePersistentVolumeClaimUpdate`).

use serde_json::{Value, json};

use super::persistent_volume::access_modes;
use super::pod_spec::default_claim_spec;
use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::validation::{self as v, Quantity, child, key, label_selector};

pub struct PersistentVolumeClaimHooks;

fn data_source(ds: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for f in ["name", "kind"] {
        if ds[f].as_str().is_none_or(str::is_empty) {
            errs.push(FieldError::required(child(path, f), ""));
        }
    }
    let group = ds["apiGroup"].as_str().unwrap_or_default();
    let kind = ds["kind"].as_str().unwrap_or_default();
    if group.is_empty() && kind != "PersistentVolumeClaim" {
        errs.push(FieldError::invalid(
            path,
            kind,
            "must be 'PersistentVolumeClaim' when referencing the default apiGroup",
        ));
    }
    if !group.is_empty() {
        errs.extend(v::dns1123_subdomain(&child(path, "apiGroup"), group));
    }
    errs
}

/// `ValidatePersistentVolumeClaimSpec` (also for claim templates).
pub fn validate_claim_spec(spec: &Value, path: &str) -> Vec<FieldError> {
    let mut errs =
        access_modes(&spec["accessModes"], &child(path, "accessModes"), "at least 1 access mode is required");
    if spec["selector"].is_object() {
        errs.extend(label_selector(&child(path, "selector"), &spec["selector"]));
    }
    let storage_path = key(&child(path, "resources"), "storage");
    match spec["resources"]["requests"].get("storage") {
        None => errs.push(FieldError::required(storage_path, "")),
        Some(q) => match v::quantity(&storage_path, q) {
            Err(e) => errs.push(e),
            Ok(Some(n)) if n <= 0 => {
                errs.push(FieldError::invalid(storage_path, v::show(q), "must be greater than zero"))
            }
            _ => {}
        },
    }
    if let Some(sc) = spec["storageClassName"].as_str().filter(|s| !s.is_empty()) {
        errs.extend(v::dns1123_subdomain(&child(path, "storageClassName"), sc));
    }
    if let Some(m) = spec["volumeMode"].as_str()
        && !["Block", "Filesystem"].contains(&m)
    {
        errs.push(FieldError::not_supported(child(path, "volumeMode"), m, &["Block", "Filesystem"]));
    }
    if spec["dataSource"].is_object() {
        errs.extend(data_source(&spec["dataSource"], &child(path, "dataSource")));
    }
    if spec["dataSourceRef"].is_object() {
        errs.extend(data_source(&spec["dataSourceRef"], &child(path, "dataSourceRef")));
    }
    errs
}

fn storage(pvc: &Value, list: &str) -> Option<i128> {
    let q = if list == "status" {
        &pvc["status"]["capacity"]["storage"]
    } else {
        &pvc["spec"]["resources"]["requests"]["storage"]
    };
    Quantity::parse(q.as_str()?)?.nanos
}

impl Hooks for PersistentVolumeClaimHooks {
    fn default(&self, obj: &mut Value) {
        default_claim_spec(&mut obj["spec"]);
        if obj["status"]["phase"].as_str().is_none_or(str::is_empty) {
            obj["status"]["phase"] = json!("Pending");
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validate_claim_spec(&obj["spec"], "spec")
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let (mut n, mut o) = (new["spec"].clone(), old["spec"].clone());
        // The volume name is set once (by the binder); a bound claim may grow.
        if o["volumeName"].as_str().is_none_or(str::is_empty) {
            o["volumeName"] = n["volumeName"].clone();
        }
        if o["storageClassName"].is_null() {
            o["storageClassName"] = n["storageClassName"].clone();
        }
        if new["status"]["phase"] == "Bound" {
            n["resources"]["requests"]["storage"] = o["resources"]["requests"]["storage"].clone();
            n["volumeAttributesClassName"] = o["volumeAttributesClassName"].clone();
        }
        for spec in [&mut n, &mut o] {
            if let Some(m) = spec.as_object_mut() {
                m.retain(|_, v| !v.is_null());
            }
        }
        if n != o {
            errs.push(FieldError::forbidden(
                "spec",
                format!(
                    "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n- {o}\n+ {n}\n"
                ),
            ));
        }
        // RecoverVolumeExpansionFailure (beta in 1.32): shrinking is allowed down to, but
        // not to or below, the capacity the claim has.
        if let (Some(new_size), Some(old_size)) = (storage(new, "spec"), storage(old, "spec"))
            && new_size < old_size
            && new_size <= storage(old, "status").unwrap_or(0)
        {
            errs.push(FieldError::forbidden(
                "spec.resources.requests.storage",
                "field can not be less than status.capacity",
            ));
        }
        errs.extend(v::immutable("volumeMode", &new["spec"]["volumeMode"], &old["spec"]["volumeMode"]));
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pvc() -> Value {
        let mut p = json!({ "spec": { "accessModes": ["ReadWriteOnce"], "resources": { "requests": { "storage": "1Gi" } } } });
        PersistentVolumeClaimHooks.prepare_for_create(&mut p);
        PersistentVolumeClaimHooks.default(&mut p);
        p
    }

    #[test]
    fn defaults_and_rules() {
        let p = pvc();
        assert_eq!(p["spec"]["volumeMode"], "Filesystem");
        assert_eq!(p["status"]["phase"], "Pending");
        assert!(PersistentVolumeClaimHooks.validate(&p).is_empty());
        let texts: Vec<String> = PersistentVolumeClaimHooks
            .validate(&json!({ "spec": {} }))
            .iter()
            .map(FieldError::to_text)
            .collect();
        assert_eq!(
            texts,
            vec![
                "spec.accessModes: Required value: at least 1 access mode is required",
                "spec.resources[storage]: Required value"
            ]
        );
    }

    #[test]
    fn spec_is_immutable_but_volume_name_is_set_once() {
        let old = pvc();
        let mut bound = old.clone();
        bound["spec"]["volumeName"] = json!("pv-1");
        assert!(PersistentVolumeClaimHooks.validate_update(&bound, &old).is_empty());
        let mut changed = old.clone();
        changed["spec"]["accessModes"] = json!(["ReadWriteMany"]);
        assert!(
            PersistentVolumeClaimHooks.validate_update(&changed, &old)[0]
                .to_text()
                .starts_with("spec: Forbidden: spec is immutable after creation except resources.requests")
        );
    }
}
