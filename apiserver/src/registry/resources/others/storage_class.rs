//! StorageClasses (upstream's `SetDefaults_StorageClass` and `ValidateStorageClass`):
//! provisioner, parameters and reclaim policy never change.

use serde_json::{Value, json};

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::validation::{self as v, qualified_name};

pub struct StorageClassHooks;

impl Hooks for StorageClassHooks {
    fn default(&self, obj: &mut Value) {
        if obj["reclaimPolicy"].as_str().is_none_or(str::is_empty) {
            obj["reclaimPolicy"] = json!("Delete");
        }
        if obj["volumeBindingMode"].as_str().is_none_or(str::is_empty) {
            obj["volumeBindingMode"] = json!("Immediate");
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let p = obj["provisioner"].as_str().unwrap_or_default();
        if p.is_empty() {
            errs.push(FieldError::required("provisioner", ""));
        } else {
            errs.extend(qualified_name("provisioner", &p.to_lowercase()));
        }
        let params = obj["parameters"].as_object();
        if params.is_some_and(|m| m.len() > 512) {
            let mut e = FieldError::too_long("parameters", 512);
            e.detail = "must have at most 512 bytes".into();
            errs.push(e);
        }
        let mut total = 0;
        for (k, val) in params.into_iter().flatten() {
            if k.is_empty() {
                errs.push(FieldError::invalid("parameters", k, "field can not be empty."));
            }
            total += k.len() + val.as_str().map_or(0, str::len);
        }
        if total > 256 * 1024 {
            errs.push(FieldError::too_long("parameters", 256 * 1024));
        }
        if let Some(r) = obj["reclaimPolicy"].as_str().filter(|r| !r.is_empty())
            && !["Delete", "Retain"].contains(&r)
        {
            errs.push(FieldError::not_supported("reclaimPolicy", r, &["Delete", "Retain"]));
        }
        match obj["volumeBindingMode"].as_str() {
            None => errs.push(FieldError::required("volumeBindingMode", "")),
            Some(m) if !["Immediate", "WaitForFirstConsumer"].contains(&m) => errs.push(
                FieldError::not_supported("volumeBindingMode", m, &["Immediate", "WaitForFirstConsumer"]),
            ),
            _ => {}
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for (f, msg) in [
            ("parameters", "updates to parameters are forbidden."),
            ("provisioner", "updates to provisioner are forbidden."),
            ("reclaimPolicy", "updates to reclaimPolicy are forbidden."),
        ] {
            if new[f] != old[f] && !(f == "reclaimPolicy" && old[f].is_null() && new[f] == "Delete") {
                errs.push(FieldError::forbidden(f, msg));
            }
        }
        let old_mode = if old["volumeBindingMode"].is_null() {
            json!("Immediate")
        } else {
            old["volumeBindingMode"].clone()
        };
        errs.extend(v::immutable("volumeBindingMode", &new["volumeBindingMode"], &old_mode));
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
    fn defaults_and_immutability() {
        let mut sc = json!({ "metadata": { "name": "fast" }, "provisioner": "example.com/disk" });
        StorageClassHooks.default(&mut sc);
        assert_eq!(sc["reclaimPolicy"], "Delete");
        assert_eq!(sc["volumeBindingMode"], "Immediate");
        assert!(StorageClassHooks.validate(&sc).is_empty());
        let mut changed = sc.clone();
        changed["provisioner"] = json!("other.com/disk");
        assert_eq!(
            StorageClassHooks.validate_update(&changed, &sc)[0].to_text(),
            "provisioner: Forbidden: updates to provisioner are forbidden."
        );
    }
}
