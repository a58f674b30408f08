//! autoscaling/v2 and autoscaling/v1 HorizontalPodAutoscalers: one storage (the v2
//! shape, `/registry/horizontalpodautoscalers`), two served versions, as upstream.

pub mod conversion;
pub mod go_json;
pub mod horizontal_pod_autoscaler;

use std::sync::Arc;

use k8s_openapi::api::autoscaling::{v1, v2};

use crate::registry::resource::{Resource, info_of};
use horizontal_pod_autoscaler::{HorizontalPodAutoscalerHooks, HorizontalPodAutoscalerV1Hooks};

pub fn resources() -> Vec<Arc<Resource>> {
    vec![
        // v2 first: the preferred version.
        Resource::new::<v2::HorizontalPodAutoscaler>(
            info_of::<v2::HorizontalPodAutoscaler>(
                "horizontalpodautoscaler",
                &["hpa"],
                &["all"],
                true,
                &["status"],
                "horizontalpodautoscalers",
            ),
            HorizontalPodAutoscalerHooks,
        ),
        Resource::new::<v1::HorizontalPodAutoscaler>(
            info_of::<v1::HorizontalPodAutoscaler>(
                "horizontalpodautoscaler",
                &["hpa"],
                &["all"],
                true,
                &["status"],
                "horizontalpodautoscalers",
            )
            .stored_as("autoscaling", "v2"),
            HorizontalPodAutoscalerV1Hooks,
        ),
    ]
}
