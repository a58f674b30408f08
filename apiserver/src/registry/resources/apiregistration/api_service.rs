//! APIServices (upstream's `ValidateAPIService` and strategies): the name is
//! `<version>.<group>`; a local APIService (no `service`) is served by this server and
//! carries no TLS settings; priorities within upstream's bounds. Creates and updates
//! leave `status` alone; status writes change only status.

use serde_json::{Value, json};

use crate::errors::FieldError;
use crate::registry::resource::{Hooks, keep_all_but_status};
use crate::registry::store::now_rfc3339;
use crate::validation::{self as v, NameRule};

pub struct ApiServiceHooks;

/// The most `spec.groupPriorityMinimum` may be.
const MAX_GROUP_PRIORITY: i64 = 20000;
/// The most `spec.versionPriority` may be.
const MAX_VERSION_PRIORITY: i64 = 1000;

impl Hooks for ApiServiceHooks {
    /// What a client sends as status is dropped; a local APIService is available from its
    /// creation on (upstream's strategy sets the condition at once).
    fn prepare_for_create(&self, obj: &mut Value) {
        let local = !obj["spec"]["service"].is_object();
        let Some(o) = obj.as_object_mut() else { return };
        o.remove("status");
        if local {
            o.insert(
                "status".into(),
                json!({"conditions": [{
                    "type": "Available",
                    "status": "True",
                    "lastTransitionTime": now_rfc3339(),
                    "reason": "Local",
                    "message": "Local APIServices are always available",
                }]}),
            );
        }
    }

    /// Upstream's status strategy: spec, labels, annotations, finalizers and owners stay.
    fn prepare_for_status_update(&self, new: &mut Value, old: &Value) {
        keep_all_but_status(new, old);
    }

    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn default(&self, obj: &mut Value) {
        // Upstream's v1 default: port 443 for a service reference.
        if let Some(svc) = obj.pointer_mut("/spec/service").and_then(Value::as_object_mut)
            && svc.get("port").is_none_or(Value::is_null)
        {
            svc.insert("port".into(), 443.into());
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        let group = spec["group"].as_str().unwrap_or_default();
        let version = spec["version"].as_str().unwrap_or_default();
        let required = format!("{version}.{group}");
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        if !name.is_empty() && name != required {
            errs.push(FieldError::invalid(
                "metadata.name",
                name,
                format!("must be `spec.version+\".\"+spec.group`: {required:?}"),
            ));
        }
        if group.is_empty() && version != "v1" {
            errs.push(FieldError::required(
                "spec.group",
                "only v1 may have an empty group and it better be legacy kube",
            ));
        }
        if !group.is_empty() {
            errs.extend(v::dns1123_subdomain("spec.group", group));
        }
        errs.extend(v::dns1035_label("spec.version", version));
        let group_priority = spec["groupPriorityMinimum"].as_i64().unwrap_or(0);
        if group_priority <= 0 || group_priority > MAX_GROUP_PRIORITY {
            errs.push(FieldError::invalid(
                "spec.groupPriorityMinimum",
                group_priority,
                "must be positive and less than 20000",
            ));
        }
        let version_priority = spec["versionPriority"].as_i64().unwrap_or(0);
        if version_priority <= 0 || version_priority > MAX_VERSION_PRIORITY {
            errs.push(FieldError::invalid(
                "spec.versionPriority",
                version_priority,
                "must be positive and less than 1000",
            ));
        }
        let ca_bundle = spec["caBundle"].as_str().unwrap_or_default();
        let insecure = spec["insecureSkipTLSVerify"].as_bool() == Some(true);
        let svc = &spec["service"];
        if !svc.is_object() {
            if !ca_bundle.is_empty() {
                errs.push(FieldError::invalid(
                    "spec.caBundle",
                    format!("{} bytes", decoded_len(ca_bundle)),
                    "local APIServices may not have a caBundle",
                ));
            }
            if insecure {
                errs.push(FieldError::invalid(
                    "spec.insecureSkipTLSVerify",
                    true,
                    "local APIServices may not have insecureSkipTLSVerify",
                ));
            }
            return errs;
        }
        for f in ["namespace", "name"] {
            if svc[f].as_str().is_none_or(str::is_empty) {
                errs.push(FieldError::required(format!("spec.service.{f}"), ""));
            }
        }
        let port = svc["port"].as_i64().unwrap_or(0);
        if !(1..=65535).contains(&port) {
            errs.push(FieldError::invalid(
                "spec.service.port",
                port,
                "port is not valid: must be between 1 and 65535, inclusive",
            ));
        }
        if insecure && !ca_bundle.is_empty() {
            errs.push(FieldError::invalid(
                "spec.insecureSkipTLSVerify",
                true,
                "may not be true if caBundle is present",
            ));
        }
        errs
    }
}

/// The length of a base64 `caBundle` once decoded (upstream reports bytes).
fn decoded_len(b64: &str) -> usize {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(b64).map(|b| b.len()).unwrap_or(b64.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(obj: &Value) -> Vec<String> {
        ApiServiceHooks.validate(obj).iter().map(FieldError::to_text).collect()
    }

    #[test]
    fn local_and_service_backed() {
        let local = json!({"metadata": {"name": "v1.apps"}, "spec": {"group": "apps", "version": "v1", "groupPriorityMinimum": 17800, "versionPriority": 15}});
        assert!(texts(&local).is_empty(), "{:?}", texts(&local));
        let core = json!({"metadata": {"name": "v1."}, "spec": {"version": "v1", "groupPriorityMinimum": 18000, "versionPriority": 1}});
        assert!(texts(&core).is_empty(), "{:?}", texts(&core));
        let mut remote = json!({"metadata": {"name": "v1alpha1.wardle.example.com"}, "spec": {
            "group": "wardle.example.com", "version": "v1alpha1", "groupPriorityMinimum": 2000, "versionPriority": 200,
            "service": {"namespace": "default", "name": "api"}, "insecureSkipTLSVerify": true}});
        ApiServiceHooks.default(&mut remote);
        assert_eq!(remote["spec"]["service"]["port"], 443);
        assert!(texts(&remote).is_empty(), "{:?}", texts(&remote));
    }

    #[test]
    fn refuses_upstreams_cases() {
        let bad = json!({"metadata": {"name": "wrong"}, "spec": {"group": "foo.example.com", "version": "v1", "caBundle": "YWJj", "insecureSkipTLSVerify": true}});
        let got = texts(&bad);
        assert!(
            got.iter().any(|t| t.contains("must be `spec.version+\".\"+spec.group`: \"v1.foo.example.com\"")),
            "{got:?}"
        );
        assert!(
            got.contains(
                &"spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000"
                    .to_string()
            ),
            "{got:?}"
        );
        assert!(
            got.contains(
                &"spec.versionPriority: Invalid value: 0: must be positive and less than 1000".to_string()
            ),
            "{got:?}"
        );
        assert!(got.iter().any(|t| t.contains("local APIServices may not have a caBundle")), "{got:?}");
        assert!(
            got.iter().any(|t| t.contains("local APIServices may not have insecureSkipTLSVerify")),
            "{got:?}"
        );
        let empty_group = json!({"metadata": {"name": "v2."}, "spec": {"version": "v2", "groupPriorityMinimum": 1, "versionPriority": 1}});
        assert!(texts(&empty_group).iter().any(|t| t.contains("only v1 may have an empty group")));
    }
}
