//! admissionregistration.k8s.io/v1: the webhook configurations the dynamic admission
//! plugins read ([`crate::admission::webhook`]). Both kinds are cluster-scoped and share
//! one set of hooks, told apart by whether their webhooks mutate.

pub mod webhook_configuration;

use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1;

use crate::registry::resource::{Resource, info_of};
use webhook_configuration::WebhookConfigurationHooks;

/// Upstream lists both kinds in the `api-extensions` category.
const CATEGORIES: &[&str] = &["api-extensions"];

pub fn resources() -> Vec<Arc<Resource>> {
    vec![
        Resource::new::<v1::MutatingWebhookConfiguration>(
            info_of::<v1::MutatingWebhookConfiguration>(
                "mutatingwebhookconfiguration",
                &[],
                CATEGORIES,
                false,
                &[],
                "mutatingwebhookconfigurations",
            ),
            WebhookConfigurationHooks { mutating: true },
        ),
        Resource::new::<v1::ValidatingWebhookConfiguration>(
            info_of::<v1::ValidatingWebhookConfiguration>(
                "validatingwebhookconfiguration",
                &[],
                CATEGORIES,
                false,
                &[],
                "validatingwebhookconfigurations",
            ),
            WebhookConfigurationHooks { mutating: false },
        ),
    ]
}
