//! The smaller groups: coordination, discovery, events, rbac, policy, scheduling, storage,
//! networking, node.

use std::sync::Arc;

use k8s_openapi::api::{
    coordination, discovery, events, networking, node, policy, rbac, scheduling, storage,
};

use crate::registry::resource::{Plain, Resource, info_of};

pub fn resources() -> Vec<Arc<Resource>> {
    let plain = || Plain { status: false, generation: false };
    let with_status = || Plain { status: true, generation: true };
    vec![
        Resource::new::<coordination::v1::Lease>(
            info_of::<coordination::v1::Lease>("lease", &[], &[], true, &[], "leases"),
            plain(),
        ),
        Resource::new::<discovery::v1::EndpointSlice>(
            info_of::<discovery::v1::EndpointSlice>("endpointslice", &[], &[], true, &[], "endpointslices"),
            plain(),
        ),
        Resource::new::<events::v1::Event>(
            info_of::<events::v1::Event>("event", &["ev"], &[], true, &[], "events.k8s.io-events"),
            plain(),
        ),
        Resource::new::<rbac::v1::Role>(
            info_of::<rbac::v1::Role>("role", &[], &[], true, &[], "roles"),
            plain(),
        ),
        Resource::new::<rbac::v1::RoleBinding>(
            info_of::<rbac::v1::RoleBinding>("rolebinding", &[], &[], true, &[], "rolebindings"),
            plain(),
        ),
        Resource::new::<rbac::v1::ClusterRole>(
            info_of::<rbac::v1::ClusterRole>("clusterrole", &[], &[], false, &[], "clusterroles"),
            plain(),
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
            plain(),
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
            with_status(),
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
            plain(),
        ),
        Resource::new::<storage::v1::StorageClass>(
            info_of::<storage::v1::StorageClass>("storageclass", &["sc"], &[], false, &[], "storageclasses"),
            plain(),
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
            plain(),
        ),
        Resource::new::<networking::v1::Ingress>(
            info_of::<networking::v1::Ingress>("ingress", &["ing"], &[], true, &["status"], "ingress"),
            with_status(),
        ),
        Resource::new::<networking::v1::IngressClass>(
            info_of::<networking::v1::IngressClass>("ingressclass", &[], &[], false, &[], "ingressclasses"),
            plain(),
        ),
        Resource::new::<node::v1::RuntimeClass>(
            info_of::<node::v1::RuntimeClass>("runtimeclass", &[], &[], false, &[], "runtimeclasses"),
            plain(),
        ),
    ]
}
