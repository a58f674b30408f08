//! DefaultIngressClass (upstream's `plugin/pkg/admission/network/defaultingressclass`): a
//! new Ingress that names no class (neither `spec.ingressClassName` nor the legacy
//! `kubernetes.io/ingress.class` annotation) gets the default IngressClass, the newest
//! one annotated `ingressclass.kubernetes.io/is-default-class: "true"`.

use std::sync::Arc;

use serde_json::json;

use super::Context;
use super::default_storage_class::default_class;
use crate::admission::{Attributes, Operation, Plugin, lookup};
use crate::errors::ApiResult;
use crate::registry::store::Store;

const IS_DEFAULT: &str = "ingressclass.kubernetes.io/is-default-class";
const LEGACY_CLASS: &str = "kubernetes.io/ingress.class";

pub struct DefaultIngressClass {
    classes: Arc<Store>,
}

impl DefaultIngressClass {
    pub fn new(ctx: &Context<'_>) -> Result<Self, String> {
        Ok(Self { classes: lookup::store(ctx.registry, "networking.k8s.io", "v1", "ingressclasses")? })
    }
}

#[async_trait::async_trait]
impl Plugin for DefaultIngressClass {
    fn name(&self) -> &'static str {
        "DefaultIngressClass"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> ApiResult<()> {
        if !attrs.is("networking.k8s.io", "ingresses") || attrs.operation != Operation::Create {
            return Ok(());
        }
        let Some(ing) = &attrs.object else { return Ok(()) };
        if ing["spec"]["ingressClassName"].is_string()
            || ing["metadata"]["annotations"].get(LEGACY_CLASS).is_some()
        {
            return Ok(());
        }
        let classes = lookup::list(&self.classes, None).await?;
        if let Some(name) = default_class(&classes, &[IS_DEFAULT])
            && let Some(ing) = attrs.object.as_mut()
        {
            ing["spec"]["ingressClassName"] = json!(name);
        }
        Ok(())
    }
}
