//! Nodes: registered by their kubelet with status (kept on create), selectable by
//! `spec.unschedulable`; pod CIDRs and provider ID are set once.

use serde_json::Value;

use super::pod_spec::taint_effect;
use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::validation::{self as v, child, index, qualified_name};

pub struct NodeHooks;

impl Hooks for NodeHooks {
    fn default(&self, obj: &mut Value) {
        let Some(status) = obj.get_mut("status").filter(|s| s.is_object()) else { return };
        for list in ["capacity", "allocatable"] {
            if let Some(l) = status.get_mut(list) {
                v::canonicalize_resource_list(l);
            }
        }
        // SetDefaults_NodeStatus: allocatable is the capacity unless told otherwise.
        if status["allocatable"].is_null() && status["capacity"].is_object() {
            status["allocatable"] = status["capacity"].clone();
        }
    }

    /// The kubelet registers its node with status; only updates keep status apart.
    fn prepare_for_create(&self, _obj: &mut Value) {}

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        // Upstream reports taints under `metadata` (ValidateNode passes its metadata path).
        let mut seen: Vec<(String, String)> = Vec::new();
        for (i, t) in obj["spec"]["taints"].as_array().into_iter().flatten().enumerate() {
            let tp = index("metadata.taints", i);
            let (k, effect) =
                (t["key"].as_str().unwrap_or_default(), t["effect"].as_str().unwrap_or_default());
            errs.extend(qualified_name(&child(&tp, "key"), k));
            let value = t["value"].as_str().unwrap_or_default();
            let value_errs = v::label_value("", value);
            if !value_errs.is_empty() {
                let msgs: Vec<String> = value_errs.into_iter().map(|e| e.detail).collect();
                errs.push(FieldError::invalid(child(&tp, "value"), value, msgs.join(";")));
            }
            if effect.is_empty() {
                errs.push(FieldError::required(child(&tp, "effect"), ""));
            } else {
                errs.extend(taint_effect(&child(&tp, "effect"), effect));
            }
            let pair = (k.to_string(), effect.to_string());
            if seen.contains(&pair) {
                let mut e = FieldError::duplicate(tp, v::show(t));
                e.detail = "taints must be unique by key and effect pair".into();
                errs.push(e);
            } else {
                seen.push(pair);
            }
        }
        let cidrs: Vec<&str> =
            obj["spec"]["podCIDRs"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        for (i, c) in cidrs.iter().enumerate() {
            errs.extend(v::cidr(&index("spec.podCIDRs", i), c));
            if cidrs[..i].contains(c) {
                errs.push(FieldError::duplicate(index("spec.podCIDRs", i), c));
            }
        }
        for list in ["capacity", "allocatable"] {
            for (k, q) in obj["status"][list].as_object().into_iter().flatten() {
                errs.extend(v::resource_quantity(k, &format!("status.{list}.{k}"), q));
            }
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let addrs: Vec<&Value> =
            new["status"]["addresses"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
        for (i, a) in addrs.iter().enumerate() {
            if addrs[..i].contains(a) {
                errs.push(FieldError::duplicate(index("status.addresses", i), v::show(a)));
            }
        }
        let old_cidrs = &old["spec"]["podCIDRs"];
        if old_cidrs.as_array().is_some_and(|c| !c.is_empty()) && &new["spec"]["podCIDRs"] != old_cidrs {
            errs.push(FieldError::forbidden(
                "spec.podCIDRs",
                "node updates may not change podCIDR except from \"\" to valid",
            ));
        }
        let old_provider = old["spec"]["providerID"].as_str().unwrap_or_default();
        if !old_provider.is_empty() && new["spec"]["providerID"].as_str() != Some(old_provider) {
            errs.push(FieldError::forbidden(
                "spec.providerID",
                "node updates may not change providerID except from \"\" to valid",
            ));
        }
        if new["spec"]["externalID"] != old["spec"]["externalID"] {
            errs.push(FieldError::forbidden("spec.externalID", "may not be updated"));
        }
        errs
    }

    fn fields(&self, obj: &Value) -> Vec<(&'static str, String)> {
        vec![("spec.unschedulable", obj["spec"]["unschedulable"].as_bool().unwrap_or(false).to_string())]
    }

    fn field_names(&self) -> &'static [&'static str] {
        &["spec.unschedulable"]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn status_is_kept_and_allocatable_defaults() {
        let mut n = json!({ "metadata": { "name": "n1" }, "status": { "capacity": { "cpu": "2", "memory": "2048Mi" } } });
        NodeHooks.prepare_for_create(&mut n);
        NodeHooks.default(&mut n);
        assert_eq!(n["status"]["allocatable"], json!({ "cpu": "2", "memory": "2Gi" }));
        assert_eq!(NodeHooks.fields(&n), vec![("spec.unschedulable", "false".to_string())]);
    }

    #[test]
    fn taints_and_cidrs() {
        let n = json!({ "spec": {
            "taints": [{ "key": "k", "effect": "NoSchedule" }, { "key": "k", "effect": "NoSchedule" }, { "key": "j", "effect": "Sometimes" }],
            "podCIDRs": ["10.0.0.0/24", "bad"],
        }});
        let texts: Vec<String> = NodeHooks.validate(&n).iter().map(FieldError::to_text).collect();
        assert!(texts.iter().any(|t| t.starts_with("metadata.taints[1]: Duplicate value")), "{texts:?}");
        assert!(
            texts
                .iter()
                .any(|t| t.starts_with("metadata.taints[2].effect: Unsupported value: \"Sometimes\""))
        );
        assert!(
            texts.iter().any(
                |t| t.starts_with("spec.podCIDRs[1]: Invalid value: \"bad\": must be a valid CIDR value")
            )
        );
        let old = json!({ "spec": { "podCIDRs": ["10.0.0.0/24"] } });
        let new = json!({ "spec": { "podCIDRs": ["10.0.1.0/24"] } });
        assert_eq!(
            NodeHooks.validate_update(&new, &old)[0].to_text(),
            "spec.podCIDRs: Forbidden: node updates may not change podCIDR except from \"\" to valid"
        );
    }
}
