//! The smaller groups: coordination, discovery, events, rbac, policy, scheduling, storage,
//! networking, node — one module per resource.

pub mod cluster_role;
pub mod cluster_role_binding;
pub mod endpoint_slice;
pub mod event;
pub mod ingress;
pub mod ingress_class;
pub mod lease;
pub mod network_policy;
pub mod pod_disruption_budget;
pub mod priority_class;
pub mod role;
pub mod role_binding;
pub mod runtime_class;
pub mod storage_class;

use std::sync::Arc;

use k8s_openapi::api::{
    coordination, discovery, events, networking, node, policy, rbac, scheduling, storage,
};

use crate::registry::resource::{Resource, info_of};

pub fn resources() -> Vec<Arc<Resource>> {
    vec![
        Resource::new::<coordination::v1::Lease>(
            info_of::<coordination::v1::Lease>("lease", &[], &[], true, &[], "leases"),
            lease::LeaseHooks,
        ),
        Resource::new::<discovery::v1::EndpointSlice>(
            info_of::<discovery::v1::EndpointSlice>("endpointslice", &[], &[], true, &[], "endpointslices"),
            endpoint_slice::EndpointSliceHooks,
        ),
        // One storage with core/v1 Events (`/registry/events`), converted on the way in
        // and out (see `event::EventHooks`).
        Resource::new::<events::v1::Event>(
            info_of::<events::v1::Event>("event", &["ev"], &[], true, &[], "events").stored_as("", "v1"),
            event::EventHooks,
        ),
        Resource::new::<rbac::v1::Role>(
            info_of::<rbac::v1::Role>("role", &[], &[], true, &[], "roles"),
            role::RoleHooks,
        ),
        Resource::new::<rbac::v1::RoleBinding>(
            info_of::<rbac::v1::RoleBinding>("rolebinding", &[], &[], true, &[], "rolebindings"),
            role_binding::RoleBindingHooks,
        ),
        Resource::new::<rbac::v1::ClusterRole>(
            info_of::<rbac::v1::ClusterRole>("clusterrole", &[], &[], false, &[], "clusterroles"),
            cluster_role::ClusterRoleHooks,
        ),
        Resource::new::<rbac::v1::ClusterRoleBinding>(
            info_of::<rbac::v1::ClusterRoleBinding>(
                "clusterrolebinding",
                &[],
                &[],
                false,
                &[],
                "clusterrolebindings",
            ),
            cluster_role_binding::ClusterRoleBindingHooks,
        ),
        Resource::new::<policy::v1::PodDisruptionBudget>(
            info_of::<policy::v1::PodDisruptionBudget>(
                "poddisruptionbudget",
                &["pdb"],
                &[],
                true,
                &["status"],
                "poddisruptionbudgets",
            ),
            pod_disruption_budget::PodDisruptionBudgetHooks,
        ),
        Resource::new::<scheduling::v1::PriorityClass>(
            info_of::<scheduling::v1::PriorityClass>(
                "priorityclass",
                &["pc"],
                &[],
                false,
                &[],
                "priorityclasses",
            ),
            priority_class::PriorityClassHooks,
        ),
        Resource::new::<storage::v1::StorageClass>(
            info_of::<storage::v1::StorageClass>("storageclass", &["sc"], &[], false, &[], "storageclasses"),
            storage_class::StorageClassHooks,
        ),
        Resource::new::<networking::v1::NetworkPolicy>(
            info_of::<networking::v1::NetworkPolicy>(
                "networkpolicy",
                &["netpol"],
                &[],
                true,
                &[],
                "networkpolicies",
            ),
            network_policy::NetworkPolicyHooks,
        ),
        Resource::new::<networking::v1::Ingress>(
            info_of::<networking::v1::Ingress>("ingress", &["ing"], &[], true, &["status"], "ingress"),
            ingress::IngressHooks,
        ),
        Resource::new::<networking::v1::IngressClass>(
            info_of::<networking::v1::IngressClass>("ingressclass", &[], &[], false, &[], "ingressclasses"),
            ingress_class::IngressClassHooks,
        ),
        Resource::new::<node::v1::RuntimeClass>(
            info_of::<node::v1::RuntimeClass>("runtimeclass", &[], &[], false, &[], "runtimeclasses"),
            runtime_class::RuntimeClassHooks,
        ),
    ]
}
