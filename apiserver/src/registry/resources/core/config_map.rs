//! ConfigMaps: valid keys, at most 1 MiB of data, and frozen once `immutable`.

use base64::Engine;
use serde_json::Value;

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::validation::{self as v, key};

pub struct ConfigMapHooks;

/// Upstream's `MaxSecretSize`, also the ConfigMap limit.
pub const MAX_SIZE: usize = 1024 * 1024;

/// `immutable: true` freezes the listed fields and itself.
pub fn immutable_rules(new: &Value, old: &Value, fields: &[&str]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if old["immutable"].as_bool() == Some(true) {
        if new["immutable"].as_bool() != Some(true) {
            errs.push(FieldError::forbidden("immutable", "field is immutable when `immutable` is set"));
        }
        for f in fields {
            if new[*f] != old[*f] {
                errs.push(FieldError::forbidden(*f, "field is immutable when `immutable` is set"));
            }
        }
    }
    errs
}

impl Hooks for ConfigMapHooks {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let mut total = 0;
        let binary = obj["binaryData"].as_object();
        for (k, val) in obj["data"].as_object().into_iter().flatten() {
            errs.extend(v::config_map_key(&key("data", k), k));
            if binary.is_some_and(|b| b.contains_key(k)) {
                errs.push(FieldError::invalid(key("data", k), k, "duplicate of key present in binaryData"));
            }
            total += val.as_str().map_or(0, str::len);
        }
        for (k, val) in binary.into_iter().flatten() {
            errs.extend(v::config_map_key(&key("binaryData", k), k));
            let raw = val.as_str().unwrap_or_default();
            total += base64::engine::general_purpose::STANDARD.decode(raw).map_or(raw.len(), |b| b.len());
        }
        if total > MAX_SIZE {
            // Upstream reports the whole object, at the empty path (printed `[]`).
            errs.push(FieldError::too_long("[]", MAX_SIZE));
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        immutable_rules(new, old, &["data", "binaryData"])
    }

    fn has_status(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_size_and_immutability() {
        let cm = json!({ "data": { "ok.key": "1", "bad key": "2", "..x": "3" } });
        let texts: Vec<String> = ConfigMapHooks.validate(&cm).iter().map(FieldError::to_text).collect();
        assert_eq!(texts.len(), 2, "{texts:?}");
        assert!(
            texts[0].starts_with("data[..x]: Invalid value: \"..x\": must not start with '..'"),
            "{texts:?}"
        );
        assert!(
            texts[1]
                .starts_with("data[bad key]: Invalid value: \"bad key\": a valid config key must consist of")
        );
        let big = json!({ "data": { "a": "x".repeat(MAX_SIZE + 1) } });
        assert_eq!(
            ConfigMapHooks.validate(&big)[0].to_text(),
            "[]: Too long: must have at most 1048576 bytes"
        );
        let old = json!({ "immutable": true, "data": { "a": "1" } });
        let new = json!({ "immutable": true, "data": { "a": "2" } });
        assert_eq!(
            ConfigMapHooks.validate_update(&new, &old)[0].to_text(),
            "data: Forbidden: field is immutable when `immutable` is set"
        );
        let unfrozen = json!({ "immutable": false, "data": { "a": "1" } });
        assert_eq!(
            ConfigMapHooks.validate_update(&unfrozen, &old)[0].to_text(),
            "immutable: Forbidden: field is immutable when `immutable` is set"
        );
    }
}
