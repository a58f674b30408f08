//! apps/v1: one module per resource; the selector rules the workload controllers share
//! live here.

pub mod controller_revision;
pub mod daemon_set;
pub mod deployment;
pub mod replica_set;
pub mod stateful_set;

use std::sync::Arc;

use k8s_openapi::api::apps::v1 as apps;
use serde_json::Value;

use crate::errors::FieldError;
use crate::registry::resource::{Resource, info_of};
use crate::validation::{self as v, label_selector, selector_is_empty, selector_matches, show};

/// `spec.selector` of a workload: required, valid, not empty. Returns the errors and
/// whether the template's labels satisfy it (a missing selector matches nothing, an empty
/// one everything, as upstream's `LabelSelectorAsSelector`).
pub fn validate_selector(spec: &Value, kind: &str, required: bool) -> (Vec<FieldError>, bool) {
    let mut errs = Vec::new();
    let sel = &spec["selector"];
    if !sel.is_object() {
        if required {
            errs.push(FieldError::required("spec.selector", ""));
        }
        return (errs, false);
    }
    errs.extend(label_selector("spec.selector", sel));
    if selector_is_empty(sel) {
        errs.push(FieldError::invalid(
            "spec.selector",
            show(sel),
            format!("empty selector is invalid for {kind}"),
        ));
        return (errs, true);
    }
    (errs, selector_matches(sel, &spec["template"]["metadata"]["labels"]))
}

/// apps/v1 selectors never change (`field is immutable`).
pub fn selector_immutable(new: &Value, old: &Value) -> Vec<FieldError> {
    v::immutable("spec.selector", &new["spec"]["selector"], &old["spec"]["selector"])
}

pub fn resources() -> Vec<Arc<Resource>> {
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
            deployment::DeploymentHooks,
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
            replica_set::ReplicaSetHooks,
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
            stateful_set::StatefulSetHooks,
        ),
        Resource::new::<apps::DaemonSet>(
            info_of::<apps::DaemonSet>("daemonset", &["ds"], &["all"], true, &["status"], "daemonsets"),
            daemon_set::DaemonSetHooks,
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
            controller_revision::ControllerRevisionHooks,
        ),
    ]
}
