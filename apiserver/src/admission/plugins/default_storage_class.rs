//! DefaultStorageClass (upstream's `plugin/pkg/admission/storage/storageclass/setdefault`):
//! a new claim that names no storage class (not even `""`) gets the default class — the
//! one annotated `storageclass.kubernetes.io/is-default-class: "true"`, the newest when
//! there are several.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Context;
use crate::admission::{Attributes, Operation, Plugin, lookup};
use crate::errors::ApiResult;
use crate::registry::store::Store;

const IS_DEFAULT: &str = "storageclass.kubernetes.io/is-default-class";
const BETA_IS_DEFAULT: &str = "storageclass.beta.kubernetes.io/is-default-class";
const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

pub struct DefaultStorageClass {
    classes: Arc<Store>,
}

impl DefaultStorageClass {
    pub fn new(ctx: &Context<'_>) -> Result<Self, String> {
        Ok(Self { classes: lookup::store(ctx.registry, "storage.k8s.io", "v1", "storageclasses")? })
    }
}

/// Whether the claim names a class, in its spec or the beta annotation.
pub fn has_class(pvc: &Value) -> bool {
    pvc["spec"]["storageClassName"].is_string() || pvc["metadata"]["annotations"].get(BETA_CLASS).is_some()
}

/// The default among `classes`: the newest, by name on a tie (upstream's `GetDefaultClass`).
pub fn default_class(classes: &[Value], annotations: &[&str]) -> Option<String> {
    let mut defaults: Vec<&Value> = classes
        .iter()
        .filter(|c| annotations.iter().any(|a| c["metadata"]["annotations"][a] == "true"))
        .collect();
    defaults.sort_by(|a, b| {
        lookup::created(b).cmp(lookup::created(a)).then(lookup::name(a).cmp(lookup::name(b)))
    });
    defaults.first().map(|c| lookup::name(c).to_string())
}

#[async_trait::async_trait]
impl Plugin for DefaultStorageClass {
    fn name(&self) -> &'static str {
        "DefaultStorageClass"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> ApiResult<()> {
        if !attrs.is("", "persistentvolumeclaims") || attrs.operation != Operation::Create {
            return Ok(());
        }
        if attrs.object.as_ref().is_none_or(has_class) {
            return Ok(());
        }
        let classes = lookup::list(&self.classes, None).await?;
        if let Some(name) = default_class(&classes, &[IS_DEFAULT, BETA_IS_DEFAULT])
            && let Some(pvc) = attrs.object.as_mut()
        {
            pvc["spec"]["storageClassName"] = json!(name);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_default_wins() {
        let class = |name: &str, at: &str, default: bool| {
            json!({ "metadata": { "name": name, "creationTimestamp": at,
                "annotations": { IS_DEFAULT: if default { "true" } else { "false" } } } })
        };
        let classes = vec![
            class("old", "2024-01-01T00:00:00Z", true),
            class("new", "2024-06-01T00:00:00Z", true),
            class("newest-not-default", "2024-09-01T00:00:00Z", false),
            class("also-new", "2024-06-01T00:00:00Z", true),
        ];
        assert_eq!(default_class(&classes, &[IS_DEFAULT]).as_deref(), Some("also-new"));
        assert_eq!(default_class(&classes[2..3], &[IS_DEFAULT]), None);
        assert!(has_class(&json!({ "spec": { "storageClassName": "" } })));
        assert!(!has_class(&json!({ "spec": {} })));
    }
}
