//! PersistentVolumeClaimResize (upstream's
//! `plugin/pkg/admission/storage/persistentvolume/resize`): a claim may only grow when it
//! is bound and its storage class allows volume expansion.

use std::sync::Arc;

use component_base::quantity::parse_milli;
use serde_json::Value;

use super::Context;
use crate::admission::{Attributes, Operation, Plugin, forbidden, lookup};
use crate::errors::ApiResult;
use crate::registry::store::Store;

const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

pub struct PersistentVolumeClaimResize {
    classes: Arc<Store>,
}

impl PersistentVolumeClaimResize {
    pub fn new(ctx: &Context<'_>) -> Result<Self, String> {
        Ok(Self { classes: lookup::store(ctx.registry, "storage.k8s.io", "v1", "storageclasses")? })
    }
}

/// A claim's class: the beta annotation, else `spec.storageClassName`.
pub fn claim_class(pvc: &Value) -> &str {
    pvc["metadata"]["annotations"][BETA_CLASS]
        .as_str()
        .or_else(|| pvc["spec"]["storageClassName"].as_str())
        .unwrap_or_default()
}

fn storage(pvc: &Value) -> i64 {
    pvc["spec"]["resources"]["requests"]["storage"].as_str().and_then(parse_milli).unwrap_or(0)
}

#[async_trait::async_trait]
impl Plugin for PersistentVolumeClaimResize {
    fn name(&self) -> &'static str {
        "PersistentVolumeClaimResize"
    }

    async fn validate(&self, attrs: &Attributes<'_>) -> ApiResult<()> {
        if !attrs.is("", "persistentvolumeclaims") || attrs.operation != Operation::Update {
            return Ok(());
        }
        let (Some(new), Some(old)) = (&attrs.object, attrs.old_object) else { return Ok(()) };
        if storage(new) <= storage(old) {
            return Ok(());
        }
        if old["status"]["phase"] != "Bound" {
            return Err(forbidden(attrs, "Only bound persistent volume claims can be expanded"));
        }
        let class = claim_class(new);
        let allowed = !class.is_empty()
            && class == claim_class(old)
            && lookup::get(&self.classes, None, class)
                .await?
                .is_some_and(|sc| sc["allowVolumeExpansion"].as_bool() == Some(true));
        if !allowed {
            return Err(forbidden(
                attrs,
                "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize",
            ));
        }
        Ok(())
    }
}
