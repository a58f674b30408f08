//! The columns each kind adds to the Name column in `kubectl get` (upstream's
//! `pkg/printers/internalversion/printers.go`, as of Kubernetes 1.32).
//!
//! # Layout
//!
//! - [`pod`]: Pod, whose STATUS and RESTARTS cells carry most of the logic.
//! - [`core_v1`]: the rest of the core group (Node, Service, Event, volumes, ...).
//! - [`workloads`]: apps, batch and autoscaling (Deployment, StatefulSet, Job, CronJob,
//!   HorizontalPodAutoscaler, ...).
//! - [`groups`]: every other group (rbac, networking, storage, policy, ...).
//! - [`format`]: helpers shared by the printers (label selectors, `<none>`, ages).
//!
//! # Contract
//!
//! The server prints as upstream's does, always "wide" (`GenerateOptions{Wide: true}`):
//! every row carries every column's cell and `kubectl` drops the priority-1 columns
//! unless asked for `-o wide`. [`cells`] returns exactly one cell per column of
//! [`columns`], and each cell's JSON type is the column's type (an `integer` column
//! gets numbers, a `string` column strings), except where upstream puts a string in a
//! `boolean` column (CronJob's SUSPEND prints `False`, not `false`).
//!
//! Kinds upstream prints with the generic table convertor (Role, ClusterRole,
//! LimitRange, CustomResourceDefinition) get its `Created At` column. Kinds not known here
//! get Name and Age.

mod core_v1;
mod format;
mod groups;
mod pod;
mod workloads;

use serde_json::Value;

use crate::table::Column;

/// One kind's printer: its columns after Name and the function filling their cells.
struct Printer {
    columns: &'static [Column],
    cells: fn(&Value, i64) -> Vec<Value>,
}

/// The printer of `kind`. Kinds are unique across the groups served except `Event`,
/// which core/v1 and events.k8s.io/v1 share (upstream prints both from one store).
fn printer(kind: &str) -> Option<Printer> {
    let p = |columns, cells| Some(Printer { columns, cells });
    match kind {
        "Pod" => p(pod::COLUMNS, pod::cells),

        "Node" => p(core_v1::NODE, core_v1::node),
        "Namespace" => p(core_v1::NAMESPACE, core_v1::namespace),
        "Service" => p(core_v1::SERVICE, core_v1::service),
        "Endpoints" => p(core_v1::ENDPOINTS, core_v1::endpoints),
        "ConfigMap" => p(core_v1::CONFIG_MAP, core_v1::config_map),
        "Secret" => p(core_v1::SECRET, core_v1::secret),
        "ServiceAccount" => p(core_v1::SERVICE_ACCOUNT, core_v1::service_account),
        "Event" => p(core_v1::EVENT, core_v1::event),
        "PersistentVolume" => p(core_v1::PERSISTENT_VOLUME, core_v1::persistent_volume),
        "PersistentVolumeClaim" => p(core_v1::PERSISTENT_VOLUME_CLAIM, core_v1::persistent_volume_claim),
        "ReplicationController" => p(core_v1::REPLICATION_CONTROLLER, core_v1::replication_controller),
        "PodTemplate" => p(core_v1::POD_TEMPLATE, core_v1::pod_template),
        "ResourceQuota" => p(core_v1::RESOURCE_QUOTA, core_v1::resource_quota),
        "ComponentStatus" => p(core_v1::COMPONENT_STATUS, core_v1::component_status),
        "LimitRange" => p(CREATED_AT, created_at),

        "Deployment" => p(workloads::DEPLOYMENT, workloads::deployment),
        "ReplicaSet" => p(workloads::REPLICA_SET, workloads::replica_set),
        "StatefulSet" => p(workloads::STATEFUL_SET, workloads::stateful_set),
        "DaemonSet" => p(workloads::DAEMON_SET, workloads::daemon_set),
        "ControllerRevision" => p(workloads::CONTROLLER_REVISION, workloads::controller_revision),
        "Job" => p(workloads::JOB, workloads::job),
        "CronJob" => p(workloads::CRON_JOB, workloads::cron_job),
        "HorizontalPodAutoscaler" => {
            p(workloads::HORIZONTAL_POD_AUTOSCALER, workloads::horizontal_pod_autoscaler)
        }

        "Role" | "ClusterRole" | "CSIStorageCapacity" | "CustomResourceDefinition" => {
            p(CREATED_AT, created_at)
        }
        "RoleBinding" | "ClusterRoleBinding" => p(groups::ROLE_BINDING, groups::role_binding),
        "Lease" => p(groups::LEASE, groups::lease),
        "APIService" => p(groups::API_SERVICE, groups::api_service),
        "EndpointSlice" => p(groups::ENDPOINT_SLICE, groups::endpoint_slice),
        "Ingress" => p(groups::INGRESS, groups::ingress),
        "IngressClass" => p(groups::INGRESS_CLASS, groups::ingress_class),
        "NetworkPolicy" => p(groups::NETWORK_POLICY, groups::network_policy),
        "ServiceCIDR" => p(groups::SERVICE_CIDR, groups::service_cidr),
        "IPAddress" => p(groups::IP_ADDRESS, groups::ip_address),
        "PodDisruptionBudget" => p(groups::POD_DISRUPTION_BUDGET, groups::pod_disruption_budget),
        "PriorityClass" => p(groups::PRIORITY_CLASS, groups::priority_class),
        "RuntimeClass" => p(groups::RUNTIME_CLASS, groups::runtime_class),
        "StorageClass" => p(groups::STORAGE_CLASS, groups::storage_class),
        "CSIDriver" => p(groups::CSI_DRIVER, groups::csi_driver),
        "CSINode" => p(groups::CSI_NODE, groups::csi_node),
        "VolumeAttachment" => p(groups::VOLUME_ATTACHMENT, groups::volume_attachment),
        "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => {
            p(groups::WEBHOOK_CONFIGURATION, groups::webhook_configuration)
        }
        "CertificateSigningRequest" => {
            p(groups::CERTIFICATE_SIGNING_REQUEST, groups::certificate_signing_request)
        }
        "FlowSchema" => p(groups::FLOW_SCHEMA, groups::flow_schema),
        "PriorityLevelConfiguration" => {
            p(groups::PRIORITY_LEVEL_CONFIGURATION, groups::priority_level_configuration)
        }
        _ => None,
    }
}

/// Columns of `kind` after Name.
pub fn columns(kind: &str) -> Vec<Column> {
    let Some(p) = printer(kind) else { return Vec::new() };
    p.columns
        .iter()
        .map(|c| Column {
            name: c.name,
            kind: c.kind,
            format: c.format,
            description: c.description,
            priority: c.priority,
        })
        .collect()
}

/// Cells of `obj` for [`columns`].
pub fn cells(kind: &str, obj: &Value, now: i64) -> Vec<Value> {
    match printer(kind) {
        Some(p) => (p.cells)(obj, now),
        None => Vec::new(),
    }
}

/// Whether `kind` has its own printer here. Such a kind's columns are complete: they
/// hold Age where upstream shows it, and lack it where upstream does (PodTemplate,
/// ComponentStatus, and the `Created At` kinds).
pub fn has_printer(kind: &str) -> bool {
    printer(kind).is_some()
}

/// The Name cell of `obj`: its name, except that upstream marks the default
/// StorageClass as `name (default)`.
pub fn name_cell(kind: &str, obj: &Value) -> String {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    if kind == "StorageClass" && groups::is_default_class(obj) {
        format!("{name} (default)")
    } else {
        name.to_string()
    }
}

const fn col(name: &'static str, kind: &'static str, priority: i32, description: &'static str) -> Column {
    Column { name, kind, format: "", description, priority }
}

/// A string column shown by default.
const fn string(name: &'static str, description: &'static str) -> Column {
    col(name, "string", 0, description)
}

/// A string column shown only with `-o wide`.
const fn wide(name: &'static str, description: &'static str) -> Column {
    col(name, "string", 1, description)
}

const fn integer(name: &'static str, description: &'static str) -> Column {
    col(name, "integer", 0, description)
}

const fn boolean(name: &'static str, description: &'static str) -> Column {
    col(name, "boolean", 0, description)
}

const AGE: Column = string(
    "Age",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
);
const CONTAINERS: Column = wide("Containers", "Names of each container in the template.");
const IMAGES: Column = wide("Images", "Images referenced by each container in the template.");

/// The generic convertor's column (`rest.NewDefaultTableConvertor`).
static CREATED_AT: &[Column] = &[col(
    "Created At",
    "date",
    0,
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
)];

/// `metadata.creationTimestamp` in RFC 3339, UTC, as the generic convertor prints it.
fn created_at(obj: &Value, _now: i64) -> Vec<Value> {
    let ts = obj["metadata"]["creationTimestamp"].as_str().and_then(crate::table::parse_time);
    // A zero metav1.Time prints as Go's zero time.
    let cell = ts.map_or_else(|| "0001-01-01T00:00:00Z".to_string(), crate::registry::store::rfc3339);
    vec![Value::String(cell)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every printer returns one cell per column, typed as the column says.
    #[test]
    fn cells_match_columns_for_every_kind() {
        let kinds = [
            "Pod",
            "Node",
            "Namespace",
            "Service",
            "Endpoints",
            "ConfigMap",
            "Secret",
            "ServiceAccount",
            "Event",
            "PersistentVolume",
            "PersistentVolumeClaim",
            "ReplicationController",
            "PodTemplate",
            "ResourceQuota",
            "ComponentStatus",
            "LimitRange",
            "Deployment",
            "ReplicaSet",
            "StatefulSet",
            "DaemonSet",
            "ControllerRevision",
            "Job",
            "CronJob",
            "HorizontalPodAutoscaler",
            "CSIStorageCapacity",
            "Role",
            "ClusterRole",
            "RoleBinding",
            "ClusterRoleBinding",
            "Lease",
            "EndpointSlice",
            "Ingress",
            "IngressClass",
            "NetworkPolicy",
            "ServiceCIDR",
            "IPAddress",
            "PodDisruptionBudget",
            "PriorityClass",
            "RuntimeClass",
            "StorageClass",
            "CSIDriver",
            "CSINode",
            "VolumeAttachment",
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
            "CertificateSigningRequest",
            "FlowSchema",
            "PriorityLevelConfiguration",
        ];
        let bare = json!({ "metadata": { "name": "x", "creationTimestamp": "2024-01-01T00:00:00Z" } });
        for kind in kinds {
            assert!(has_printer(kind), "{kind}");
            let cols = columns(kind);
            let row = cells(kind, &bare, 1_704_067_200 + 90);
            assert_eq!(cols.len(), row.len(), "{kind}: {row:?}");
            for (c, v) in cols.iter().zip(&row) {
                let ok = match c.kind {
                    "integer" => v.is_i64(),
                    "boolean" => v.is_boolean() || (kind == "CronJob" && v.is_string()),
                    // Upstream's HPA columns are all strings, MAXPODS and REPLICAS numbers.
                    _ => v.is_string() || (kind == "HorizontalPodAutoscaler" && v.is_i64()),
                };
                assert!(ok, "{kind}: column {} ({}) got {v}", c.name, c.kind);
            }
            let ages = cols.iter().filter(|c| c.name == "Age").count();
            assert!(ages <= 1, "{kind}");
        }
        assert!(!has_printer("Widget"));
        assert!(columns("Widget").is_empty() && cells("Widget", &bare, 0).is_empty());
    }

    #[test]
    fn created_at_is_rfc3339() {
        let role = json!({ "metadata": { "name": "r", "creationTimestamp": "2024-03-05T07:08:09Z" } });
        assert_eq!(columns("Role")[0].name, "Created At");
        assert_eq!(columns("Role")[0].kind, "date");
        assert_eq!(cells("Role", &role, 0), vec![json!("2024-03-05T07:08:09Z")]);
    }

    #[test]
    fn default_storage_class_is_marked_in_the_name() {
        let sc = json!({ "metadata": { "name": "fast", "annotations": {
            "storageclass.kubernetes.io/is-default-class": "true" } } });
        assert_eq!(name_cell("StorageClass", &sc), "fast (default)");
        assert_eq!(name_cell("Pod", &sc), "fast");
    }
}
