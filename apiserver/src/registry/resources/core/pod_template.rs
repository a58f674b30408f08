//! PodTemplates: a named pod template, defaulted and validated as one; the generation
//! counts template changes.

use serde_json::{Value, json};

use super::pod_spec::{self, Opts};
use crate::errors::FieldError;
use crate::registry::resource::Hooks;

pub struct PodTemplateHooks;

impl Hooks for PodTemplateHooks {
    fn warnings(&self, obj: &Value) -> Vec<String> {
        crate::registry::resources::core::pod_warnings::template_warnings(obj, &["template"])
    }

    fn default(&self, obj: &mut Value) {
        pod_spec::default_template(&mut obj["template"]);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        pod_spec::validate_template(&obj["template"], "template", Opts::default())
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        obj["metadata"]["generation"] = json!(1);
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        let (mut n, mut o) = (new["template"].clone(), old["template"].clone());
        pod_spec::default_template(&mut n);
        pod_spec::default_template(&mut o);
        let g = old["metadata"]["generation"].as_i64().unwrap_or(1);
        new["metadata"]["generation"] = json!(if n != o { g + 1 } else { g });
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
    fn template_is_defaulted_and_checked() {
        let mut t = json!({ "template": { "spec": { "containers": [{ "name": "c", "image": "x" }] } } });
        PodTemplateHooks.default(&mut t);
        assert_eq!(t["template"]["spec"]["restartPolicy"], "Always");
        assert!(t["template"]["spec"].get("enableServiceLinks").is_none());
        assert!(PodTemplateHooks.validate(&t).is_empty());
        t["template"]["spec"]["containers"][0]["image"] = json!("");
        assert_eq!(
            PodTemplateHooks.validate(&t)[0].to_text(),
            "template.spec.containers[0].image: Required value"
        );
    }
}
