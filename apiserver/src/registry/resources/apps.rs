//! apps/v1.

use std::sync::Arc;

use k8s_openapi::api::apps::v1 as apps;

use crate::registry::resource::{Plain, Resource, info_of};

pub fn resources() -> Vec<Arc<Resource>> {
    let workload = || Plain { status: true, generation: true };
    vec![
        Resource::new::<apps::Deployment>(
            info_of::<apps::Deployment>(
                "deployment",
                &["deploy"],
                &["all"],
                true,
                &["status", "scale"],
                "deployments",
            ),
            workload(),
        ),
        Resource::new::<apps::ReplicaSet>(
            info_of::<apps::ReplicaSet>(
                "replicaset",
                &["rs"],
                &["all"],
                true,
                &["status", "scale"],
                "replicasets",
            ),
            workload(),
        ),
        Resource::new::<apps::StatefulSet>(
            info_of::<apps::StatefulSet>(
                "statefulset",
                &["sts"],
                &["all"],
                true,
                &["status", "scale"],
                "statefulsets",
            ),
            workload(),
        ),
        Resource::new::<apps::DaemonSet>(
            info_of::<apps::DaemonSet>("daemonset", &["ds"], &["all"], true, &["status"], "daemonsets"),
            workload(),
        ),
        Resource::new::<apps::ControllerRevision>(
            info_of::<apps::ControllerRevision>(
                "controllerrevision",
                &[],
                &[],
                true,
                &[],
                "controllerrevisions",
            ),
            Plain { status: false, generation: false },
        ),
    ]
}
