//! Secrets: `type` defaults to Opaque and never changes, `stringData` is folded into
//! `data` (as upstream's v1 conversion does), keys are valid, data at most 1 MiB, and the
//! well-known types carry their required keys.

use base64::Engine;
use serde_json::{Value, json};

use super::config_map::{MAX_SIZE, immutable_rules};
use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::validation::{self as v, key};

pub struct SecretHooks;

fn decode(v: &Value) -> Vec<u8> {
    let raw = v.as_str().unwrap_or_default();
    base64::engine::general_purpose::STANDARD.decode(raw).unwrap_or_else(|_| raw.as_bytes().to_vec())
}

impl Hooks for SecretHooks {
    fn default(&self, obj: &mut Value) {
        if obj["type"].as_str().is_none_or(str::is_empty) {
            obj["type"] = json!("Opaque");
        }
        if let Some(string_data) = obj.as_object_mut().and_then(|o| o.remove("stringData"))
            && let Some(m) = string_data.as_object()
        {
            if !obj["data"].is_object() {
                obj["data"] = json!({});
            }
            for (k, val) in m {
                let encoded =
                    base64::engine::general_purpose::STANDARD.encode(val.as_str().unwrap_or_default());
                obj["data"][k] = json!(encoded);
            }
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let data = obj["data"].as_object();
        let mut total = 0;
        for (k, val) in data.into_iter().flatten() {
            errs.extend(v::config_map_key(&key("data", k), k));
            total += decode(val).len();
        }
        if total > MAX_SIZE {
            errs.push(FieldError::too_long("data", MAX_SIZE));
        }
        let has = |k: &str| data.is_some_and(|d| d.contains_key(k));
        let json_key = |k: &str, errs: &mut Vec<FieldError>| match data.and_then(|d| d.get(k)) {
            None => errs.push(FieldError::required(key("data", k), "")),
            Some(val) => {
                if let Err(e) = serde_json::from_slice::<serde_json::Map<String, Value>>(&decode(val)) {
                    errs.push(FieldError::invalid(
                        key("data", k),
                        "<secret contents redacted>",
                        e.to_string(),
                    ));
                }
            }
        };
        match obj["type"].as_str().unwrap_or_default() {
            "kubernetes.io/service-account-token" => {
                let name = obj["metadata"]["annotations"]["kubernetes.io/service-account.name"].as_str();
                if name.is_none_or(str::is_empty) {
                    errs.push(FieldError::required(
                        key("metadata.annotations", "kubernetes.io/service-account.name"),
                        "",
                    ));
                }
            }
            "kubernetes.io/dockercfg" => json_key(".dockercfg", &mut errs),
            "kubernetes.io/dockerconfigjson" => json_key(".dockerconfigjson", &mut errs),
            "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
                errs.push(FieldError::required(key("data", "username"), ""));
                errs.push(FieldError::required(key("data", "password"), ""));
            }
            "kubernetes.io/ssh-auth"
                if data.and_then(|d| d.get("ssh-privatekey")).is_none_or(|k| decode(k).is_empty()) =>
            {
                errs.push(FieldError::required(key("data", "ssh-privatekey"), ""));
            }
            "kubernetes.io/tls" => {
                for k in ["tls.crt", "tls.key"] {
                    if !has(k) {
                        errs.push(FieldError::required(key("data", k), ""));
                    }
                }
            }
            _ => {}
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = v::immutable("type", &new["type"], &old["type"]);
        errs.extend(immutable_rules(new, old, &["data"]));
        errs
    }

    fn has_status(&self) -> bool {
        false
    }

    fn fields(&self, obj: &Value) -> Vec<(&'static str, String)> {
        vec![("type", obj["type"].as_str().unwrap_or_default().to_string())]
    }

    fn field_names(&self) -> &'static [&'static str] {
        &["type"]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(FieldError::to_text).collect()
    }

    #[test]
    fn defaults_and_string_data() {
        let mut s = json!({ "stringData": { "user": "admin" }, "data": { "other": "eA==" } });
        SecretHooks.default(&mut s);
        assert_eq!(s["type"], "Opaque");
        assert_eq!(s["data"], json!({ "other": "eA==", "user": "YWRtaW4=" }));
        assert!(s.get("stringData").is_none());
    }

    #[test]
    fn typed_secrets_need_their_keys() {
        let tls = json!({ "type": "kubernetes.io/tls", "data": { "tls.crt": "eA==" } });
        assert_eq!(texts(SecretHooks.validate(&tls)), vec!["data[tls.key]: Required value"]);
        let sa = json!({ "type": "kubernetes.io/service-account-token" });
        assert_eq!(
            texts(SecretHooks.validate(&sa)),
            vec!["metadata.annotations[kubernetes.io/service-account.name]: Required value"]
        );
        let dcj = json!({ "type": "kubernetes.io/dockerconfigjson", "data": { ".dockerconfigjson": "bm90IGpzb24=" } });
        assert!(
            texts(SecretHooks.validate(&dcj))[0]
                .starts_with("data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\"")
        );
    }

    #[test]
    fn type_is_immutable() {
        let old = json!({ "type": "Opaque" });
        let new = json!({ "type": "kubernetes.io/tls" });
        assert_eq!(
            texts(SecretHooks.validate_update(&new, &old)),
            vec!["type: Invalid value: \"kubernetes.io/tls\": field is immutable"]
        );
        assert_eq!(SecretHooks.fields(&new), vec![("type", "kubernetes.io/tls".to_string())]);
    }
}
