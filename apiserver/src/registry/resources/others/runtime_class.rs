//! RuntimeClasses (upstream's `ValidateRuntimeClass`): the handler is a DNS label that
//! never changes.

use serde_json::Value;

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::resources::at_mut;
use crate::registry::resources::core::pod_spec::{validate_resource_requirements, validate_tolerations};
use crate::validation::{self as v, labels};

pub struct RuntimeClassHooks;

impl Hooks for RuntimeClassHooks {
    fn default(&self, obj: &mut Value) {
        if let Some(o) = at_mut(obj, &["overhead", "podFixed"]) {
            v::canonicalize_resource_list(o);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = v::dns1123_label("handler", obj["handler"].as_str().unwrap_or_default());
        if obj["overhead"].is_object() {
            let limits = serde_json::json!({ "limits": obj["overhead"]["podFixed"] });
            errs.extend(validate_resource_requirements(&limits, "overhead.podFixed"));
        }
        let s = &obj["scheduling"];
        if s.is_object() {
            errs.extend(labels("scheduling.nodeSelector", s.get("nodeSelector")));
            errs.extend(validate_tolerations(&s["tolerations"], "scheduling.tolerations"));
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        v::immutable("handler", &new["handler"], &old["handler"])
    }

    fn has_status(&self) -> bool {
        false
    }
}
