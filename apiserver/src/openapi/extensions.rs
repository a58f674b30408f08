//! The `x-kubernetes-*` extensions upstream's schemas carry and k8s-openapi's do not.
//!
//! Upstream generates them from struct tags (`patchStrategy`, `patchMergeKey`) and markers
//! (`+listType`, `+listMapKey`, `+structType`) in k8s.io/api. kubectl reads the patch
//! ones to compute the strategic merge patch of `kubectl apply` (a list with strategy
//! `merge` and key `name` is merged element by element; one without is replaced whole);
//! server-side apply reads the list ones. The table below is written from those tags.
//!
//! Each list entry: (definition, field, patch strategy, patch merge key, list type, list map
//! keys); an empty string is "none".

use serde_json::{Value, json};

macro_rules! core {
    ($n:literal) => {
        concat!("io.k8s.api.core.v1.", $n)
    };
}
macro_rules! meta {
    ($n:literal) => {
        concat!("io.k8s.apimachinery.pkg.apis.meta.v1.", $n)
    };
}
macro_rules! api {
    ($g:literal, $n:literal) => {
        concat!("io.k8s.api.", $g, ".", $n)
    };
}

type ListExt =
    (&'static str, &'static str, &'static str, &'static str, &'static str, &'static [&'static str]);

/// Merge by `key`, a map keyed by `key` for server-side apply.
const M: &str = "merge";
const MR: &str = "merge,retainKeys";

#[rustfmt::skip]
pub static LISTS: &[ListExt] = &[
    // metadata
    (meta!("ObjectMeta"), "finalizers", M, "", "set", &[]),
    (meta!("ObjectMeta"), "ownerReferences", M, "uid", "map", &["uid"]),
    (meta!("ObjectMeta"), "managedFields", "", "", "atomic", &[]),
    (meta!("LabelSelector"), "matchExpressions", "", "", "atomic", &[]),
    (meta!("LabelSelectorRequirement"), "values", "", "", "atomic", &[]),
    (meta!("StatusDetails"), "causes", "", "", "atomic", &[]),
    // pods
    (core!("PodSpec"), "volumes", MR, "name", "map", &["name"]),
    (core!("PodSpec"), "initContainers", M, "name", "map", &["name"]),
    (core!("PodSpec"), "containers", M, "name", "map", &["name"]),
    (core!("PodSpec"), "ephemeralContainers", M, "name", "map", &["name"]),
    (core!("PodSpec"), "imagePullSecrets", M, "name", "map", &["name"]),
    (core!("PodSpec"), "hostAliases", M, "ip", "map", &["ip"]),
    (core!("PodSpec"), "tolerations", "", "", "atomic", &[]),
    (core!("PodSpec"), "topologySpreadConstraints", M, "topologyKey", "map", &["topologyKey", "whenUnsatisfiable"]),
    (core!("PodSpec"), "readinessGates", "", "", "atomic", &[]),
    (core!("PodSpec"), "resourceClaims", MR, "name", "map", &["name"]),
    (core!("PodSpec"), "schedulingGates", M, "name", "map", &["name"]),
    (core!("PodSecurityContext"), "supplementalGroups", "", "", "atomic", &[]),
    (core!("PodSecurityContext"), "sysctls", "", "", "atomic", &[]),
    (core!("PodDNSConfig"), "nameservers", "", "", "atomic", &[]),
    (core!("PodDNSConfig"), "searches", "", "", "atomic", &[]),
    (core!("PodDNSConfig"), "options", "", "", "atomic", &[]),
    (core!("HostAlias"), "hostnames", "", "", "atomic", &[]),
    (core!("TopologySpreadConstraint"), "matchLabelKeys", "", "", "atomic", &[]),
    (core!("PodStatus"), "conditions", M, "type", "map", &["type"]),
    (core!("PodStatus"), "podIPs", M, "ip", "map", &["ip"]),
    (core!("PodStatus"), "hostIPs", M, "ip", "atomic", &[]),
    (core!("PodStatus"), "initContainerStatuses", "", "", "atomic", &[]),
    (core!("PodStatus"), "containerStatuses", "", "", "atomic", &[]),
    (core!("PodStatus"), "ephemeralContainerStatuses", "", "", "atomic", &[]),
    (core!("PodStatus"), "resourceClaimStatuses", MR, "name", "map", &["name"]),
    // containers
    (core!("Container"), "command", "", "", "atomic", &[]),
    (core!("Container"), "args", "", "", "atomic", &[]),
    (core!("Container"), "ports", M, "containerPort", "map", &["containerPort", "protocol"]),
    (core!("Container"), "envFrom", "", "", "atomic", &[]),
    (core!("Container"), "env", M, "name", "map", &["name"]),
    (core!("Container"), "volumeMounts", M, "mountPath", "map", &["mountPath"]),
    (core!("Container"), "volumeDevices", M, "devicePath", "map", &["devicePath"]),
    (core!("Container"), "resizePolicy", "", "", "atomic", &[]),
    (core!("EphemeralContainer"), "command", "", "", "atomic", &[]),
    (core!("EphemeralContainer"), "args", "", "", "atomic", &[]),
    (core!("EphemeralContainer"), "ports", M, "containerPort", "map", &["containerPort", "protocol"]),
    (core!("EphemeralContainer"), "envFrom", "", "", "atomic", &[]),
    (core!("EphemeralContainer"), "env", M, "name", "map", &["name"]),
    (core!("EphemeralContainer"), "volumeMounts", M, "mountPath", "map", &["mountPath"]),
    (core!("EphemeralContainer"), "volumeDevices", M, "devicePath", "map", &["devicePath"]),
    (core!("EphemeralContainer"), "resizePolicy", "", "", "atomic", &[]),
    (core!("ResourceRequirements"), "claims", "", "", "map", &["name"]),
    (core!("Capabilities"), "add", "", "", "atomic", &[]),
    (core!("Capabilities"), "drop", "", "", "atomic", &[]),
    (core!("ExecAction"), "command", "", "", "atomic", &[]),
    (core!("HTTPGetAction"), "httpHeaders", "", "", "atomic", &[]),
    // volumes
    (core!("ConfigMapVolumeSource"), "items", "", "", "atomic", &[]),
    (core!("SecretVolumeSource"), "items", "", "", "atomic", &[]),
    (core!("DownwardAPIVolumeSource"), "items", "", "", "atomic", &[]),
    (core!("ProjectedVolumeSource"), "sources", "", "", "atomic", &[]),
    (core!("ConfigMapProjection"), "items", "", "", "atomic", &[]),
    (core!("SecretProjection"), "items", "", "", "atomic", &[]),
    (core!("DownwardAPIProjection"), "items", "", "", "atomic", &[]),
    // scheduling
    (core!("NodeSelector"), "nodeSelectorTerms", "", "", "atomic", &[]),
    (core!("NodeSelectorTerm"), "matchExpressions", "", "", "atomic", &[]),
    (core!("NodeSelectorTerm"), "matchFields", "", "", "atomic", &[]),
    (core!("NodeSelectorRequirement"), "values", "", "", "atomic", &[]),
    (core!("NodeAffinity"), "preferredDuringSchedulingIgnoredDuringExecution", "", "", "atomic", &[]),
    (core!("PodAffinity"), "requiredDuringSchedulingIgnoredDuringExecution", "", "", "atomic", &[]),
    (core!("PodAffinity"), "preferredDuringSchedulingIgnoredDuringExecution", "", "", "atomic", &[]),
    (core!("PodAntiAffinity"), "requiredDuringSchedulingIgnoredDuringExecution", "", "", "atomic", &[]),
    (core!("PodAntiAffinity"), "preferredDuringSchedulingIgnoredDuringExecution", "", "", "atomic", &[]),
    (core!("PodAffinityTerm"), "namespaces", "", "", "atomic", &[]),
    (core!("PodAffinityTerm"), "matchLabelKeys", "", "", "atomic", &[]),
    (core!("PodAffinityTerm"), "mismatchLabelKeys", "", "", "atomic", &[]),
    // services and endpoints
    (core!("ServiceSpec"), "ports", M, "port", "map", &["port", "protocol"]),
    (core!("ServiceSpec"), "externalIPs", "", "", "atomic", &[]),
    (core!("ServiceSpec"), "loadBalancerSourceRanges", "", "", "atomic", &[]),
    (core!("ServiceSpec"), "clusterIPs", "", "", "atomic", &[]),
    (core!("ServiceSpec"), "ipFamilies", "", "", "atomic", &[]),
    (core!("ServiceStatus"), "conditions", M, "type", "map", &["type"]),
    (core!("LoadBalancerStatus"), "ingress", "", "", "atomic", &[]),
    (core!("LoadBalancerIngress"), "ports", "", "", "atomic", &[]),
    (core!("Endpoints"), "subsets", "", "", "atomic", &[]),
    (core!("EndpointSubset"), "addresses", "", "", "atomic", &[]),
    (core!("EndpointSubset"), "notReadyAddresses", "", "", "atomic", &[]),
    (core!("EndpointSubset"), "ports", "", "", "atomic", &[]),
    // nodes, namespaces, volumes, the rest of core
    (core!("NodeSpec"), "podCIDRs", M, "", "set", &[]),
    (core!("NodeSpec"), "taints", "", "", "atomic", &[]),
    (core!("NodeStatus"), "conditions", M, "type", "map", &["type"]),
    (core!("NodeStatus"), "addresses", M, "type", "map", &["type"]),
    (core!("NodeStatus"), "images", "", "", "atomic", &[]),
    (core!("NodeStatus"), "volumesInUse", "", "", "atomic", &[]),
    (core!("NodeStatus"), "volumesAttached", "", "", "atomic", &[]),
    (core!("NamespaceSpec"), "finalizers", "", "", "atomic", &[]),
    (core!("NamespaceStatus"), "conditions", M, "type", "map", &["type"]),
    (core!("PersistentVolumeSpec"), "accessModes", "", "", "atomic", &[]),
    (core!("PersistentVolumeSpec"), "mountOptions", "", "", "atomic", &[]),
    (core!("PersistentVolumeClaimSpec"), "accessModes", "", "", "atomic", &[]),
    (core!("PersistentVolumeClaimStatus"), "accessModes", "", "", "atomic", &[]),
    (core!("PersistentVolumeClaimStatus"), "conditions", M, "type", "map", &["type"]),
    (core!("ReplicationControllerStatus"), "conditions", M, "type", "map", &["type"]),
    (core!("ServiceAccount"), "secrets", M, "name", "map", &["name"]),
    (core!("ServiceAccount"), "imagePullSecrets", "", "", "atomic", &[]),
    (core!("LimitRangeSpec"), "limits", "", "", "atomic", &[]),
    (core!("ResourceQuotaSpec"), "scopes", "", "", "atomic", &[]),
    (core!("ScopeSelector"), "matchExpressions", "", "", "atomic", &[]),
    // apps
    (api!("apps.v1", "DeploymentStatus"), "conditions", M, "type", "map", &["type"]),
    (api!("apps.v1", "ReplicaSetStatus"), "conditions", M, "type", "map", &["type"]),
    (api!("apps.v1", "StatefulSetStatus"), "conditions", M, "type", "map", &["type"]),
    (api!("apps.v1", "DaemonSetStatus"), "conditions", M, "type", "map", &["type"]),
    (api!("apps.v1", "StatefulSetSpec"), "volumeClaimTemplates", "", "", "atomic", &[]),
    // batch
    (api!("batch.v1", "JobStatus"), "conditions", M, "type", "atomic", &[]),
    (api!("batch.v1", "PodFailurePolicy"), "rules", "", "", "atomic", &[]),
    (api!("batch.v1", "PodFailurePolicyRule"), "onPodConditions", "", "", "atomic", &[]),
    (api!("batch.v1", "PodFailurePolicyOnExitCodesRequirement"), "values", "", "", "set", &[]),
    (api!("batch.v1", "SuccessPolicy"), "rules", "", "", "atomic", &[]),
    (api!("batch.v1", "CronJobStatus"), "active", "", "", "atomic", &[]),
    // autoscaling, policy
    (api!("autoscaling.v2", "HorizontalPodAutoscalerSpec"), "metrics", "", "", "atomic", &[]),
    (api!("autoscaling.v2", "HorizontalPodAutoscalerStatus"), "conditions", M, "type", "map", &["type"]),
    (api!("autoscaling.v2", "HorizontalPodAutoscalerStatus"), "currentMetrics", "", "", "atomic", &[]),
    (api!("autoscaling.v2", "HPAScalingRules"), "policies", "", "", "atomic", &[]),
    (api!("policy.v1", "PodDisruptionBudgetStatus"), "conditions", M, "type", "map", &["type"]),
    // networking, discovery
    (api!("networking.v1", "IngressSpec"), "rules", "", "", "atomic", &[]),
    (api!("networking.v1", "IngressSpec"), "tls", "", "", "atomic", &[]),
    (api!("networking.v1", "IngressTLS"), "hosts", "", "", "atomic", &[]),
    (api!("networking.v1", "HTTPIngressRuleValue"), "paths", "", "", "atomic", &[]),
    (api!("networking.v1", "IngressLoadBalancerStatus"), "ingress", "", "", "atomic", &[]),
    (api!("networking.v1", "NetworkPolicySpec"), "ingress", "", "", "atomic", &[]),
    (api!("networking.v1", "NetworkPolicySpec"), "egress", "", "", "atomic", &[]),
    (api!("networking.v1", "NetworkPolicySpec"), "policyTypes", "", "", "atomic", &[]),
    (api!("networking.v1", "NetworkPolicyIngressRule"), "ports", "", "", "atomic", &[]),
    (api!("networking.v1", "NetworkPolicyIngressRule"), "from", "", "", "atomic", &[]),
    (api!("networking.v1", "NetworkPolicyEgressRule"), "ports", "", "", "atomic", &[]),
    (api!("networking.v1", "NetworkPolicyEgressRule"), "to", "", "", "atomic", &[]),
    (api!("discovery.v1", "EndpointSlice"), "endpoints", "", "", "atomic", &[]),
    (api!("discovery.v1", "EndpointSlice"), "ports", "", "", "atomic", &[]),
    (api!("discovery.v1", "Endpoint"), "addresses", "", "", "set", &[]),
    // rbac, storage
    (api!("rbac.v1", "Role"), "rules", "", "", "atomic", &[]),
    (api!("rbac.v1", "ClusterRole"), "rules", "", "", "atomic", &[]),
    (api!("rbac.v1", "RoleBinding"), "subjects", "", "", "atomic", &[]),
    (api!("rbac.v1", "ClusterRoleBinding"), "subjects", "", "", "atomic", &[]),
    (api!("rbac.v1", "AggregationRule"), "clusterRoleSelectors", "", "", "atomic", &[]),
    (api!("rbac.v1", "PolicyRule"), "verbs", "", "", "atomic", &[]),
    (api!("rbac.v1", "PolicyRule"), "apiGroups", "", "", "atomic", &[]),
    (api!("rbac.v1", "PolicyRule"), "resources", "", "", "atomic", &[]),
    (api!("rbac.v1", "PolicyRule"), "resourceNames", "", "", "atomic", &[]),
    (api!("rbac.v1", "PolicyRule"), "nonResourceURLs", "", "", "atomic", &[]),
    (api!("storage.v1", "StorageClass"), "mountOptions", "", "", "atomic", &[]),
    (api!("storage.v1", "StorageClass"), "allowedTopologies", "", "", "atomic", &[]),
];

/// Patch strategies of fields that are no lists (`patchStrategy` on a struct field): with
/// `retainKeys`, kubectl's patch lists the keys to keep (`$retainKeys`), so switching a
/// Deployment to `Recreate` drops `rollingUpdate`. Each entry: (definition, field, strategy).
#[rustfmt::skip]
pub static FIELDS: &[(&str, &str, &str)] = &[
    (api!("apps.v1", "DeploymentSpec"), "strategy", "retainKeys"),
];

/// Structs whose fields are set together (`+structType=atomic`): apply replaces them whole.
#[rustfmt::skip]
pub static ATOMIC_STRUCTS: &[&str] = &[
    meta!("LabelSelector"),
    core!("LocalObjectReference"),
    core!("ObjectReference"),
    core!("NodeSelector"),
    core!("NodeSelectorTerm"),
    core!("TopologySelectorTerm"),
    core!("ConfigMapKeySelector"),
    core!("SecretKeySelector"),
    core!("ObjectFieldSelector"),
    core!("ResourceFieldSelector"),
    core!("TypedLocalObjectReference"),
];

/// Adds the table's extensions to the definitions they name (definitions not generated are
/// skipped). Returns the entries whose field does not exist or is no list, which the tests
/// keep empty for the full set of types.
pub fn apply(definitions: &mut serde_json::Map<String, Value>) -> Vec<String> {
    let mut missed = Vec::new();
    for &(def, field, strategy, key, list_type, map_keys) in LISTS {
        let Some(schema) = definitions.get_mut(def) else { continue };
        let Some(prop) = schema.pointer_mut(&format!("/properties/{field}")).and_then(Value::as_object_mut)
        else {
            missed.push(format!("{def}.{field}"));
            continue;
        };
        if prop.get("type").and_then(Value::as_str) != Some("array") {
            missed.push(format!("{def}.{field} (no list)"));
            continue;
        }
        if !strategy.is_empty() {
            prop.insert("x-kubernetes-patch-strategy".into(), json!(strategy));
        }
        if !key.is_empty() {
            prop.insert("x-kubernetes-patch-merge-key".into(), json!(key));
        }
        if !list_type.is_empty() {
            prop.insert("x-kubernetes-list-type".into(), json!(list_type));
        }
        if !map_keys.is_empty() {
            prop.insert("x-kubernetes-list-map-keys".into(), json!(map_keys));
        }
    }
    for &(def, field, strategy) in FIELDS {
        let Some(schema) = definitions.get_mut(def) else { continue };
        match schema.pointer_mut(&format!("/properties/{field}")).and_then(Value::as_object_mut) {
            Some(prop) => {
                prop.insert("x-kubernetes-patch-strategy".into(), json!(strategy));
            }
            None => missed.push(format!("{def}.{field}")),
        }
    }
    for &def in ATOMIC_STRUCTS {
        if let Some(schema) = definitions.get_mut(def).and_then(Value::as_object_mut) {
            schema.insert("x-kubernetes-map-type".into(), json!("atomic"));
        }
    }
    missed
}
