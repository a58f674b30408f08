//! apiregistration.k8s.io/v1: APIServices, the aggregation layer's registrations of API
//! group versions (upstream's kube-aggregator). Stored objects with upstream's
//! validation and status; the server keeps one per group version it serves itself
//! ([`crate::aggregator`]). Proxying to extension API servers is not here (issue 21).

pub mod api_service;

use std::sync::Arc;

use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;

use crate::registry::resource::{Resource, info_of};

pub fn resources() -> Vec<Arc<Resource>> {
    vec![Resource::new::<APIService>(
        info_of::<APIService>(
            "apiservice",
            &[],
            &["api-extensions"],
            false,
            &["status"],
            "apiregistration.k8s.io/apiservices",
        ),
        api_service::ApiServiceHooks,
    )]
}
