//! Namespaces: born Active with the `kubernetes` finalizer and the
//! `kubernetes.io/metadata.name` label; `spec.finalizers` only change through `finalize`,
//! and a terminating namespace stays until they are gone.

use serde_json::{Value, json};

use crate::errors::FieldError;
use crate::registry::resource::{Hooks, copy_field};
use crate::validation::{NameRule, finalizer_name, index};

pub struct NamespaceHooks;

impl Hooks for NamespaceHooks {
    fn default(&self, obj: &mut Value) {
        if obj["spec"]["finalizers"].is_null() {
            obj["spec"]["finalizers"] = json!(["kubernetes"]);
        }
        if obj["status"]["phase"].is_null() {
            obj["status"]["phase"] = json!("Active");
        }
        // Upstream's SetDefaults_Namespace: the name as a label, for selectors.
        if let Some(name) = obj["metadata"]["name"].as_str().filter(|n| !n.is_empty()).map(str::to_string) {
            if !obj["metadata"]["labels"].is_object() {
                obj["metadata"]["labels"] = json!({});
            }
            obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
        }
    }
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        copy_field(new, old, "status");
        copy_field(new, old, "spec");
    }
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for (i, f) in obj["spec"]["finalizers"].as_array().into_iter().flatten().enumerate() {
            errs.extend(finalizer_name(&index("spec.finalizers", i), f.as_str().unwrap_or_default()));
        }
        errs
    }
    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }
    fn keep_while_deleting(&self, obj: &Value) -> bool {
        obj["spec"]["finalizers"].as_array().is_some_and(|f| !f.is_empty())
    }
    fn fields(&self, obj: &Value) -> Vec<(&'static str, String)> {
        vec![("status.phase", obj["status"]["phase"].as_str().unwrap_or_default().to_string())]
    }
    fn field_names(&self) -> &'static [&'static str] {
        &["status.phase"]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_finalizers() {
        let mut ns = json!({ "metadata": { "name": "team-a" } });
        NamespaceHooks.default(&mut ns);
        assert_eq!(ns["metadata"]["labels"]["kubernetes.io/metadata.name"], "team-a");
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(ns["status"]["phase"], "Active");
        ns["spec"]["finalizers"] = json!(["custom"]);
        assert_eq!(
            NamespaceHooks.validate(&ns)[0].to_text(),
            "spec.finalizers[0]: Invalid value: \"custom\": name is neither a standard finalizer name nor is it fully qualified"
        );
    }
}
