//! core/v1.

use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;

use serde_json::{Value, json};

use crate::registry::resource::{Hooks, Plain, Resource, copy_field, info_of};
use crate::validation::NameRule;

/// Namespaces: born Active with the `kubernetes` finalizer; `spec.finalizers` only change
/// through `finalize`, and a terminating namespace stays until they are gone.
struct NamespaceHooks;

impl Hooks for NamespaceHooks {
    fn default(&self, obj: &mut Value) {
        if obj["spec"]["finalizers"].is_null() {
            obj["spec"]["finalizers"] = json!(["kubernetes"]);
        }
        if obj["status"]["phase"].is_null() {
            obj["status"]["phase"] = json!("Active");
        }
    }
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        copy_field(new, old, "status");
        copy_field(new, old, "spec");
    }
    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }
    fn keep_while_deleting(&self, obj: &Value) -> bool {
        obj["spec"]["finalizers"].as_array().is_some_and(|f| !f.is_empty())
    }
    fn fields(&self, obj: &Value) -> Vec<(&'static str, String)> {
        vec![("status.phase", obj["status"]["phase"].as_str().unwrap_or_default().to_string())]
    }
    fn field_names(&self) -> &'static [&'static str] {
        &["status.phase"]
    }
}

/// Pods: selectable by node and phase (the kubelet watches its node's pods), and deleted
/// gracefully once bound to a node.
struct PodHooks;

const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];

impl Hooks for PodHooks {
    fn fields(&self, obj: &Value) -> Vec<(&'static str, String)> {
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        vec![
            ("spec.nodeName", s(&obj["spec"]["nodeName"])),
            ("spec.restartPolicy", s(&obj["spec"]["restartPolicy"])),
            ("spec.schedulerName", s(&obj["spec"]["schedulerName"])),
            ("spec.serviceAccountName", s(&obj["spec"]["serviceAccountName"])),
            ("spec.hostNetwork", obj["spec"]["hostNetwork"].as_bool().unwrap_or(false).to_string()),
            ("status.phase", s(&obj["status"]["phase"])),
            ("status.podIP", s(&obj["status"]["podIP"])),
            ("status.nominatedNodeName", s(&obj["status"]["nominatedNodeName"])),
        ]
    }
    fn field_names(&self) -> &'static [&'static str] {
        POD_FIELDS
    }
    fn default_grace_period(&self, obj: &Value) -> Option<i64> {
        // A pod no kubelet runs (unscheduled, or finished) goes at once.
        let bound = obj["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty());
        let done = matches!(obj["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
        if !bound || done {
            return None;
        }
        Some(obj["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap_or(30))
    }
}

pub fn resources() -> Vec<Arc<Resource>> {
    let plain = Plain { status: false, generation: false };
    let with_status = || Plain { status: true, generation: false };
    vec![
        Resource::new::<core::Namespace>(
            info_of::<core::Namespace>(
                "namespace",
                &["ns"],
                &[],
                false,
                &["status", "finalize"],
                "namespaces",
            ),
            NamespaceHooks,
        ),
        Resource::new::<core::Pod>(
            info_of::<core::Pod>("pod", &["po"], &["all"], true, &["status", "binding"], "pods"),
            PodHooks,
        ),
        Resource::new::<core::Node>(
            info_of::<core::Node>("node", &["no"], &[], false, &["status"], "minions"),
            with_status(),
        ),
        Resource::new::<core::Service>(
            info_of::<core::Service>("service", &["svc"], &["all"], true, &["status"], "services/specs"),
            with_status(),
        ),
        Resource::new::<core::Endpoints>(
            info_of::<core::Endpoints>("endpoints", &["ep"], &[], true, &[], "services/endpoints"),
            Plain { status: false, generation: false },
        ),
        Resource::new::<core::ConfigMap>(
            info_of::<core::ConfigMap>("configmap", &["cm"], &[], true, &[], "configmaps"),
            Plain { status: false, generation: false },
        ),
        Resource::new::<core::Secret>(
            info_of::<core::Secret>("secret", &[], &[], true, &[], "secrets"),
            Plain { status: false, generation: false },
        ),
        Resource::new::<core::ServiceAccount>(
            info_of::<core::ServiceAccount>("serviceaccount", &["sa"], &[], true, &[], "serviceaccounts"),
            Plain { status: false, generation: false },
        ),
        Resource::new::<core::Event>(
            info_of::<core::Event>("event", &["ev"], &[], true, &[], "events"),
            Plain { status: false, generation: false },
        ),
        Resource::new::<core::LimitRange>(
            info_of::<core::LimitRange>("limitrange", &["limits"], &[], true, &[], "limitranges"),
            Plain { status: false, generation: false },
        ),
        Resource::new::<core::ResourceQuota>(
            info_of::<core::ResourceQuota>(
                "resourcequota",
                &["quota"],
                &[],
                true,
                &["status"],
                "resourcequotas",
            ),
            with_status(),
        ),
        Resource::new::<core::PersistentVolume>(
            info_of::<core::PersistentVolume>(
                "persistentvolume",
                &["pv"],
                &[],
                false,
                &["status"],
                "persistentvolumes",
            ),
            with_status(),
        ),
        Resource::new::<core::PersistentVolumeClaim>(
            info_of::<core::PersistentVolumeClaim>(
                "persistentvolumeclaim",
                &["pvc"],
                &[],
                true,
                &["status"],
                "persistentvolumeclaims",
            ),
            with_status(),
        ),
        Resource::new::<core::PodTemplate>(
            info_of::<core::PodTemplate>("podtemplate", &[], &[], true, &[], "podtemplates"),
            plain,
        ),
        Resource::new::<core::ReplicationController>(
            info_of::<core::ReplicationController>(
                "replicationcontroller",
                &["rc"],
                &["all"],
                true,
                &["status", "scale"],
                "controllers",
            ),
            Plain { status: true, generation: true },
        ),
    ]
}
