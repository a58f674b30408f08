//! batch/v1: Jobs and CronJobs.

pub mod cron_job;
pub mod job;

use std::sync::Arc;

use k8s_openapi::api::batch::v1 as batch;

use crate::registry::resource::{Resource, info_of};

pub fn resources() -> Vec<Arc<Resource>> {
    vec![
        Resource::new::<batch::Job>(
            info_of::<batch::Job>("job", &[], &["all"], true, &["status"], "jobs"),
            job::JobHooks,
        ),
        Resource::new::<batch::CronJob>(
            info_of::<batch::CronJob>("cronjob", &["cj"], &["all"], true, &["status"], "cronjobs"),
            cron_job::CronJobHooks,
        ),
    ]
}
