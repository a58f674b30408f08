//! Which Rust type describes each kind: the k8s-openapi types by group/version/kind, so a
//! registered resource (which knows only its names) finds its schema.
//!
//! The table lists every `k8s_openapi::Resource` of the enabled API version, so a resource
//! registered later with one of these types gets its documents without a change here.

use k8s_openapi::schemars::{JsonSchema, SchemaGenerator};

/// One kind and how to add its schema (and everything it refers to) to a generator.
pub struct Kind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    /// Adds the schema to the generator's definitions; returns its definition name.
    pub add: fn(&mut SchemaGenerator) -> String,
}

fn add<T: JsonSchema>(generator: &mut SchemaGenerator) -> String {
    generator.subschema_for::<T>();
    T::schema_name().into_owned()
}

/// The kind with this group/version/kind, if k8s-openapi has it.
pub fn find(group: &str, version: &str, kind: &str) -> Option<&'static Kind> {
    KINDS.iter().find(|k| k.group == group && k.version == version && k.kind == kind)
}

/// A definition that is not a served kind but every document refers to (bodies of
/// deletes and patches, watch events, errors).
pub fn add_common(generator: &mut SchemaGenerator) -> Vec<String> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
    vec![
        add::<meta::DeleteOptions>(generator),
        add::<meta::Patch>(generator),
        add::<meta::Status>(generator),
        add::<meta::WatchEvent<k8s_openapi::api::core::v1::Pod>>(generator),
        add::<meta::APIResourceList>(generator),
    ]
}

macro_rules! kinds {
    ($($t:ty),* $(,)?) => {
        /// Every kind of k8s-openapi's enabled version.
        pub static KINDS: &[Kind] = &[$(
            Kind {
                group: <$t as k8s_openapi::Resource>::GROUP,
                version: <$t as k8s_openapi::Resource>::VERSION,
                kind: <$t as k8s_openapi::Resource>::KIND,
                add: add::<$t>,
            }
        ),*];
    };
}

use k8s_openapi::api;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration;

kinds![
    api::admissionregistration::v1::MutatingWebhookConfiguration,
    api::admissionregistration::v1::ValidatingAdmissionPolicy,
    api::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
    api::admissionregistration::v1::ValidatingWebhookConfiguration,
    api::admissionregistration::v1alpha1::MutatingAdmissionPolicy,
    api::admissionregistration::v1alpha1::MutatingAdmissionPolicyBinding,
    api::admissionregistration::v1beta1::ValidatingAdmissionPolicy,
    api::admissionregistration::v1beta1::ValidatingAdmissionPolicyBinding,
    api::apiserverinternal::v1alpha1::StorageVersion,
    api::apps::v1::ControllerRevision,
    api::apps::v1::DaemonSet,
    api::apps::v1::Deployment,
    api::apps::v1::ReplicaSet,
    api::apps::v1::StatefulSet,
    api::authentication::v1::SelfSubjectReview,
    api::authentication::v1::TokenRequest,
    api::authentication::v1::TokenReview,
    api::authorization::v1::LocalSubjectAccessReview,
    api::authorization::v1::SelfSubjectAccessReview,
    api::authorization::v1::SelfSubjectRulesReview,
    api::authorization::v1::SubjectAccessReview,
    api::autoscaling::v1::HorizontalPodAutoscaler,
    api::autoscaling::v1::Scale,
    api::autoscaling::v2::HorizontalPodAutoscaler,
    api::batch::v1::CronJob,
    api::batch::v1::Job,
    api::certificates::v1::CertificateSigningRequest,
    api::certificates::v1alpha1::ClusterTrustBundle,
    api::certificates::v1beta1::ClusterTrustBundle,
    api::coordination::v1::Lease,
    api::coordination::v1alpha2::LeaseCandidate,
    api::coordination::v1beta1::LeaseCandidate,
    api::core::v1::Binding,
    api::core::v1::ComponentStatus,
    api::core::v1::ConfigMap,
    api::core::v1::Endpoints,
    api::core::v1::Event,
    api::core::v1::LimitRange,
    api::core::v1::Namespace,
    api::core::v1::Node,
    api::core::v1::PersistentVolume,
    api::core::v1::PersistentVolumeClaim,
    api::core::v1::Pod,
    api::core::v1::PodTemplate,
    api::core::v1::ReplicationController,
    api::core::v1::ResourceQuota,
    api::core::v1::Secret,
    api::core::v1::Service,
    api::core::v1::ServiceAccount,
    api::discovery::v1::EndpointSlice,
    api::events::v1::Event,
    api::flowcontrol::v1::FlowSchema,
    api::flowcontrol::v1::PriorityLevelConfiguration,
    api::networking::v1::IPAddress,
    api::networking::v1::Ingress,
    api::networking::v1::IngressClass,
    api::networking::v1::NetworkPolicy,
    api::networking::v1::ServiceCIDR,
    api::networking::v1beta1::IPAddress,
    api::networking::v1beta1::ServiceCIDR,
    api::node::v1::RuntimeClass,
    api::policy::v1::Eviction,
    api::policy::v1::PodDisruptionBudget,
    api::rbac::v1::ClusterRole,
    api::rbac::v1::ClusterRoleBinding,
    api::rbac::v1::Role,
    api::rbac::v1::RoleBinding,
    api::resource::v1alpha3::DeviceClass,
    api::resource::v1alpha3::DeviceTaintRule,
    api::resource::v1alpha3::ResourceClaim,
    api::resource::v1alpha3::ResourceClaimTemplate,
    api::resource::v1alpha3::ResourceSlice,
    api::resource::v1beta1::DeviceClass,
    api::resource::v1beta1::ResourceClaim,
    api::resource::v1beta1::ResourceClaimTemplate,
    api::resource::v1beta1::ResourceSlice,
    api::resource::v1beta2::DeviceClass,
    api::resource::v1beta2::ResourceClaim,
    api::resource::v1beta2::ResourceClaimTemplate,
    api::resource::v1beta2::ResourceSlice,
    api::scheduling::v1::PriorityClass,
    api::storage::v1::CSIDriver,
    api::storage::v1::CSINode,
    api::storage::v1::CSIStorageCapacity,
    api::storage::v1::StorageClass,
    api::storage::v1::VolumeAttachment,
    api::storage::v1alpha1::VolumeAttributesClass,
    api::storage::v1beta1::VolumeAttributesClass,
    api::storagemigration::v1alpha1::StorageVersionMigration,
    apiextensions::v1::CustomResourceDefinition,
    apiregistration::v1::APIService,
];

/// The kind a subresource reads and writes, when it is not the resource's own kind.
pub fn subresource_kind(subresource: &str) -> Option<(&'static str, &'static str, &'static str)> {
    Some(match subresource {
        "scale" => ("autoscaling", "v1", "Scale"),
        "binding" => ("", "v1", "Binding"),
        "eviction" => ("policy", "v1", "Eviction"),
        "token" => ("authentication.k8s.io", "v1", "TokenRequest"),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_each_kind_once() {
        let mut seen = std::collections::HashSet::new();
        for k in KINDS {
            assert!(seen.insert((k.group, k.version, k.kind)), "{}/{} {} twice", k.group, k.version, k.kind);
        }
        assert!(find("apps", "v1", "Deployment").is_some());
        assert!(find("", "v1", "Pod").is_some());
    }
}
