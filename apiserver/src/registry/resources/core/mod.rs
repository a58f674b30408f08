//! core/v1: one module per resource with its hooks; [`pod_spec`] holds the pod spec
//! defaults and checks every pod-carrying resource shares.

pub mod config_map;
pub mod endpoints;
pub mod event;
pub mod limit_range;
pub mod namespace;
pub mod node;
pub mod persistent_volume;
pub mod persistent_volume_claim;
pub mod pod;
pub mod pod_spec;
pub mod pod_template;
pub mod pod_warnings;
pub mod replication_controller;
pub mod resource_quota;
pub mod secret;
pub mod service;

use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;

use crate::registry::resource::{Plain, Resource, info_of};

pub fn resources() -> Vec<Arc<Resource>> {
    vec![
        Resource::new::<core::Namespace>(
            info_of::<core::Namespace>(
                "namespace",
                &["ns"],
                &[],
                false,
                &["status", "finalize"],
                "namespaces",
            )
            // Namespaces go one at a time, through their finalizers: no deletecollection.
            .with_verbs(&["create", "delete", "get", "list", "patch", "update", "watch"]),
            namespace::NamespaceHooks,
        ),
        Resource::new::<core::Pod>(
            info_of::<core::Pod>(
                "pod",
                &["po"],
                &["all"],
                true,
                &[
                    "status",
                    "binding",
                    "eviction",
                    "ephemeralcontainers",
                    "log",
                    "exec",
                    "attach",
                    "portforward",
                    "proxy",
                ],
                "pods",
            ),
            pod::PodHooks,
        ),
        Resource::new::<core::Node>(
            info_of::<core::Node>("node", &["no"], &[], false, &["status", "proxy"], "minions"),
            node::NodeHooks,
        ),
        Resource::new::<core::Service>(
            info_of::<core::Service>(
                "service",
                &["svc"],
                &["all"],
                true,
                &["status", "proxy"],
                "services/specs",
            ),
            service::ServiceHooks,
        ),
        Resource::new::<core::Endpoints>(
            info_of::<core::Endpoints>("endpoints", &["ep"], &[], true, &[], "services/endpoints"),
            endpoints::EndpointsHooks,
        ),
        Resource::new::<core::ConfigMap>(
            info_of::<core::ConfigMap>("configmap", &["cm"], &[], true, &[], "configmaps"),
            config_map::ConfigMapHooks,
        ),
        Resource::new::<core::Secret>(
            info_of::<core::Secret>("secret", &[], &[], true, &[], "secrets"),
            secret::SecretHooks,
        ),
        Resource::new::<core::ServiceAccount>(
            info_of::<core::ServiceAccount>(
                "serviceaccount",
                &["sa"],
                &[],
                true,
                &["token"],
                "serviceaccounts",
            ),
            // Nothing beyond object metadata (names are DNS subdomains).
            Plain { status: false, generation: false },
        ),
        Resource::new::<core::Event>(
            info_of::<core::Event>("event", &["ev"], &[], true, &[], "events"),
            event::EventHooks,
        ),
        Resource::new::<core::LimitRange>(
            info_of::<core::LimitRange>("limitrange", &["limits"], &[], true, &[], "limitranges"),
            limit_range::LimitRangeHooks,
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
            resource_quota::ResourceQuotaHooks,
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
            persistent_volume::PersistentVolumeHooks,
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
            persistent_volume_claim::PersistentVolumeClaimHooks,
        ),
        Resource::new::<core::PodTemplate>(
            info_of::<core::PodTemplate>("podtemplate", &[], &[], true, &[], "podtemplates"),
            pod_template::PodTemplateHooks,
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
            replication_controller::ReplicationControllerHooks,
        ),
    ]
}
