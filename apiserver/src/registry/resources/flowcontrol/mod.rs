//! flowcontrol.apiserver.k8s.io/v1: FlowSchemas and PriorityLevelConfigurations as stored
//! objects (defaults, validation, status). API Priority and Fairness itself — classifying
//! and queueing requests by them, and keeping the mandatory and suggested objects — is not
//! here (issue 21).

pub mod flow_schema;
pub mod priority_level_configuration;

use std::sync::Arc;

use k8s_openapi::api::flowcontrol::v1;

use crate::registry::resource::{Resource, info_of};

pub fn resources() -> Vec<Arc<Resource>> {
    vec![
        Resource::new::<v1::FlowSchema>(
            info_of::<v1::FlowSchema>("flowschema", &[], &[], false, &["status"], "flowschemas"),
            flow_schema::FlowSchemaHooks,
        ),
        Resource::new::<v1::PriorityLevelConfiguration>(
            info_of::<v1::PriorityLevelConfiguration>(
                "prioritylevelconfiguration",
                &[],
                &[],
                false,
                &["status"],
                "prioritylevelconfigurations",
            ),
            priority_level_configuration::PriorityLevelConfigurationHooks,
        ),
    ]
}
