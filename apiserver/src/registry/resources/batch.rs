//! batch/v1.

use std::sync::Arc;

use k8s_openapi::api::batch::v1 as batch;

use crate::registry::resource::{Plain, Resource, info_of};

pub fn resources() -> Vec<Arc<Resource>> {
    vec![
        Resource::new::<batch::Job>(
            info_of::<batch::Job>("job", &[], &["all"], true, &["status"], "jobs"),
            Plain { status: true, generation: true },
        ),
        Resource::new::<batch::CronJob>(
            info_of::<batch::CronJob>("cronjob", &["cj"], &["all"], true, &["status"], "cronjobs"),
            Plain { status: true, generation: true },
        ),
    ]
}
