//! The groups besides core, apps and batch: rbac, coordination, discovery, networking,
//! policy, scheduling, node, storage, admissionregistration, certificates, flowcontrol.

use serde_json::Value;

use super::core_v1::load_balancer_addresses;
use super::format::{
    age, arr_at, count, int_at, int_or_string, label_selector, len_at, list_with_more, num, obj_at, or,
    str_at, text,
};
use super::{AGE, Column, boolean, col, integer, string, wide};
use crate::table;

pub static ROLE_BINDING: &[Column] = &[
    string(
        "Role",
        "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace.",
    ),
    AGE,
    wide("Users", "Users in the roleBinding"),
    wide("Groups", "Groups in the roleBinding"),
    wide("ServiceAccounts", "ServiceAccounts in the roleBinding"),
];

/// ROLE is `Kind/name`; the wide columns list the subjects by kind (`rbac.SubjectsStrings`),
/// service accounts as `namespace/name`.
pub fn role_binding(obj: &Value, now: i64) -> Vec<Value> {
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for s in arr_at(obj, "/subjects") {
        let name = str_at(s, "/name");
        match str_at(s, "/kind") {
            "User" => users.push(name.to_string()),
            "Group" => groups.push(name.to_string()),
            "ServiceAccount" => sas.push(format!("{}/{name}", str_at(s, "/namespace"))),
            _ => {}
        }
    }
    vec![
        text(format!("{}/{}", str_at(obj, "/roleRef/kind"), str_at(obj, "/roleRef/name"))),
        age(obj, now),
        text(users.join(", ")),
        text(groups.join(", ")),
        text(sas.join(", ")),
    ]
}

pub static API_SERVICE: &[Column] = &[
    string("Service", "The reference to the service that hosts this API endpoint."),
    string("Available", "Whether this service is available."),
    AGE,
];

/// SERVICE is `Local` or `namespace/name`; AVAILABLE the condition's status, with its
/// reason when not `True` (`False (ServiceNotFound)`).
pub fn api_service(obj: &Value, now: i64) -> Vec<Value> {
    let svc = &obj["spec"]["service"];
    let service = if svc.is_object() {
        format!(
            "{}/{}",
            svc["namespace"].as_str().unwrap_or_default(),
            svc["name"].as_str().unwrap_or_default()
        )
    } else {
        "Local".to_string()
    };
    let available = arr_at(obj, "/status/conditions").iter().find(|c| c["type"] == "Available").map(|c| {
        let status = c["status"].as_str().unwrap_or_default();
        match c["reason"].as_str() {
            Some(reason) if status != "True" && !reason.is_empty() => format!("{status} ({reason})"),
            _ => status.to_string(),
        }
    });
    vec![text(&service), text(available.as_deref().unwrap_or("Unknown")), age(obj, now)]
}

pub static LEASE: &[Column] =
    &[string("Holder", "holderIdentity contains the identity of the holder of a current lease."), AGE];

pub fn lease(obj: &Value, now: i64) -> Vec<Value> {
    vec![text(str_at(obj, "/spec/holderIdentity")), age(obj, now)]
}

pub static ENDPOINT_SLICE: &[Column] = &[
    string("AddressType", "addressType specifies the type of address carried by this EndpointSlice."),
    string("Ports", "ports specifies the list of network ports exposed by each endpoint in this slice."),
    string("Endpoints", "endpoints is a list of unique endpoints in this slice."),
    AGE,
];

/// PORTS and ENDPOINTS show three entries, then `+ N more...`; `<unset>` when empty.
pub fn endpoint_slice(obj: &Value, now: i64) -> Vec<Value> {
    let ports: Vec<String> = arr_at(obj, "/ports")
        .iter()
        .map(|p| match (p["port"].as_i64(), p["name"].as_str()) {
            (Some(n), _) => n.to_string(),
            (None, Some(name)) => name.to_string(),
            (None, None) => "*".to_string(),
        })
        .collect();
    let addresses: Vec<String> = arr_at(obj, "/endpoints")
        .iter()
        .flat_map(|e| arr_at(e, "/addresses").iter().map(|a| a.as_str().unwrap_or("").to_string()))
        .collect();
    vec![
        text(str_at(obj, "/addressType")),
        text(list_with_more(&ports, ports.len(), 3)),
        text(list_with_more(&addresses, addresses.len(), 3)),
        age(obj, now),
    ]
}

pub static INGRESS: &[Column] = &[
    string("Class", "The name of the IngressClass resource that should be used for additional configuration"),
    string("Hosts", "Hosts that incoming requests are matched against before the ingress rule"),
    string("Address", "Address is a list containing ingress points for the load-balancer"),
    string("Ports", "Ports of TLS configurations that open"),
    AGE,
];

/// HOSTS lists up to three rule hosts (`*` when none names one); PORTS is `80`, or
/// `80, 443` with TLS.
pub fn ingress(obj: &Value, now: i64) -> Vec<Value> {
    const MAX: usize = 3;
    let rules = arr_at(obj, "/spec/rules");
    let mut hosts: Vec<&str> = Vec::new();
    let mut more = false;
    for rule in rules {
        if hosts.len() == MAX {
            more = true;
        }
        if !more && !str_at(rule, "/host").is_empty() {
            hosts.push(str_at(rule, "/host"));
        }
    }
    let hosts = match (hosts.is_empty(), more) {
        (true, _) => "*".to_string(),
        (false, true) => format!("{} + {} more...", hosts.join(","), rules.len() - MAX),
        (false, false) => hosts.join(","),
    };
    let ports = if arr_at(obj, "/spec/tls").is_empty() { "80" } else { "80, 443" };
    vec![
        text(obj.pointer("/spec/ingressClassName").and_then(Value::as_str).unwrap_or("<none>")),
        text(hosts),
        text(load_balancer_addresses(&obj["status"]["loadBalancer"]).join(",")),
        text(ports),
        age(obj, now),
    ]
}

pub static INGRESS_CLASS: &[Column] = &[
    string("Controller", "Controller that is responsible for handling this class"),
    string("Parameters", "A reference to a resource with additional parameters"),
    AGE,
];

/// PARAMETERS is `Kind[.apiGroup]/name`, `<none>` without parameters.
pub fn ingress_class(obj: &Value, now: i64) -> Vec<Value> {
    let parameters = match obj_at(obj, "/spec/parameters") {
        None => "<none>".to_string(),
        Some(p) => {
            let mut s = str_at(p, "/kind").to_string();
            if let Some(group) = p["apiGroup"].as_str() {
                s = format!("{s}.{group}");
            }
            format!("{s}/{}", str_at(p, "/name"))
        }
    };
    vec![text(str_at(obj, "/spec/controller")), text(parameters), age(obj, now)]
}

pub static NETWORK_POLICY: &[Column] =
    &[string("Pod-Selector", "Selects the pods to which this NetworkPolicy object applies."), AGE];

pub fn network_policy(obj: &Value, now: i64) -> Vec<Value> {
    vec![text(label_selector(&obj["spec"]["podSelector"])), age(obj, now)]
}

pub static SERVICE_CIDR: &[Column] = &[string("CIDRs", "CIDRs defines the IP blocks in CIDR notation."), AGE];

pub fn service_cidr(obj: &Value, now: i64) -> Vec<Value> {
    let cidrs: Vec<&str> = arr_at(obj, "/spec/cidrs").iter().filter_map(Value::as_str).collect();
    vec![text(cidrs.join(",")), age(obj, now)]
}

/// Upstream defines no AGE column for IP addresses.
pub static IP_ADDRESS: &[Column] =
    &[string("ParentRef", "ParentRef references the resource that an IPAddress is attached to.")];

/// PARENTREF is `resource[.group][/namespace]/name`, lowercased group and resource.
pub fn ip_address(obj: &Value, _now: i64) -> Vec<Value> {
    let parent = match obj_at(obj, "/spec/parentRef") {
        None => "<none>".to_string(),
        Some(r) => {
            let mut s = match str_at(r, "/group") {
                "" => str_at(r, "/resource").to_lowercase(),
                g => format!("{}.{}", str_at(r, "/resource"), g).to_lowercase(),
            };
            if !str_at(r, "/namespace").is_empty() {
                s = format!("{s}/{}", str_at(r, "/namespace"));
            }
            format!("{s}/{}", str_at(r, "/name"))
        }
    };
    vec![text(parent)]
}

pub static POD_DISRUPTION_BUDGET: &[Column] = &[
    string("Min Available", "The minimum number of pods that must be available."),
    string("Max Unavailable", "The maximum number of pods that may be unavailable."),
    integer("Allowed Disruptions", "Calculated number of pods that may be disrupted at this time."),
    AGE,
];

pub fn pod_disruption_budget(obj: &Value, now: i64) -> Vec<Value> {
    let bound = |field: &str| match obj["spec"].get(field).filter(|v| !v.is_null()) {
        Some(v) => int_or_string(v),
        None => "N/A".to_string(),
    };
    vec![
        text(bound("minAvailable")),
        text(bound("maxUnavailable")),
        num(int_at(obj, "/status/disruptionsAllowed")),
        age(obj, now),
    ]
}

/// PREEMPTIONPOLICY has no priority upstream, so it shows without `-o wide`.
pub static PRIORITY_CLASS: &[Column] = &[
    integer("Value", "value represents the integer value of this priority class."),
    boolean(
        "Global-Default",
        "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class.",
    ),
    AGE,
    string("PreemptionPolicy", "preemptionPolicy is the Policy for preempting pods with lower priority."),
];

pub fn priority_class(obj: &Value, now: i64) -> Vec<Value> {
    vec![
        num(int_at(obj, "/value")),
        Value::Bool(obj["globalDefault"] == true),
        age(obj, now),
        text(str_at(obj, "/preemptionPolicy")),
    ]
}

pub static RUNTIME_CLASS: &[Column] = &[
    string(
        "Handler",
        "handler specifies the underlying runtime and configuration that the CRI implementation will use to handle pods of this class.",
    ),
    AGE,
];

pub fn runtime_class(obj: &Value, now: i64) -> Vec<Value> {
    vec![text(str_at(obj, "/handler")), age(obj, now)]
}

pub static STORAGE_CLASS: &[Column] = &[
    string("Provisioner", "provisioner indicates the type of the provisioner."),
    string(
        "ReclaimPolicy",
        "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class.",
    ),
    string(
        "VolumeBindingMode",
        "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.",
    ),
    string(
        "AllowVolumeExpansion",
        "allowVolumeExpansion shows whether the storage class allow volume expand.",
    ),
    AGE,
];

/// RECLAIMPOLICY defaults to Delete and VOLUMEBINDINGMODE to Immediate.
pub fn storage_class(obj: &Value, now: i64) -> Vec<Value> {
    vec![
        text(str_at(obj, "/provisioner")),
        text(or(str_at(obj, "/reclaimPolicy"), "Delete")),
        text(or(str_at(obj, "/volumeBindingMode"), "Immediate")),
        text((obj["allowVolumeExpansion"] == true).to_string()),
        age(obj, now),
    ]
}

/// `storageutil.IsDefaultAnnotation`: the GA or beta is-default-class annotation is "true".
pub fn is_default_class(obj: &Value) -> bool {
    let a = &obj["metadata"]["annotations"];
    a["storageclass.kubernetes.io/is-default-class"] == "true"
        || a["storageclass.beta.kubernetes.io/is-default-class"] == "true"
}

pub static CSI_DRIVER: &[Column] = &[
    boolean(
        "AttachRequired",
        "attachRequired indicates this CSI volume driver requires an attach operation.",
    ),
    boolean(
        "PodInfoOnMount",
        "podInfoOnMount indicates this CSI volume driver requires additional pod information during mount operations.",
    ),
    boolean(
        "StorageCapacity",
        "storageCapacity indicates that the CSI volume driver wants pod scheduling to consider the storage capacity.",
    ),
    string(
        "TokenRequests",
        "tokenRequests indicates the CSI driver needs pods' service account tokens it is mounting volume for to do necessary authentication.",
    ),
    boolean(
        "RequiresRepublish",
        "requiresRepublish indicates the CSI driver wants `NodePublishVolume` being periodically called.",
    ),
    string("Modes", "volumeLifecycleModes defines what kind of volumes this CSI volume driver supports."),
    AGE,
];

pub fn csi_driver(obj: &Value, now: i64) -> Vec<Value> {
    let flag = |field: &str, default: bool| Value::Bool(obj["spec"][field].as_bool().unwrap_or(default));
    let tokens = match obj["spec"]["tokenRequests"].as_array() {
        Some(t) => t.iter().map(|t| str_at(t, "/audience")).collect::<Vec<_>>().join(","),
        None => "<unset>".to_string(),
    };
    let modes: Vec<&str> =
        arr_at(obj, "/spec/volumeLifecycleModes").iter().filter_map(Value::as_str).collect();
    vec![
        flag("attachRequired", true),
        flag("podInfoOnMount", false),
        flag("storageCapacity", false),
        text(tokens),
        flag("requiresRepublish", false),
        text(or(&modes.join(","), "<none>")),
        age(obj, now),
    ]
}

pub static CSI_NODE: &[Column] =
    &[integer("Drivers", "Drivers indicates the number of CSI drivers registered on the node"), AGE];

pub fn csi_node(obj: &Value, now: i64) -> Vec<Value> {
    vec![num(len_at(obj, "/spec/drivers")), age(obj, now)]
}

pub static VOLUME_ATTACHMENT: &[Column] = &[
    Column {
        format: "name",
        ..col(
            "Attacher",
            "string",
            0,
            "attacher indicates the name of the volume driver that MUST handle this request.",
        )
    },
    string("PV", "persistentVolumeName represents the name of the persistent volume to attach."),
    string("Node", "nodeName represents the node that the volume should be attached to."),
    boolean("Attached", "attached indicates the volume is successfully attached."),
    AGE,
];

pub fn volume_attachment(obj: &Value, now: i64) -> Vec<Value> {
    vec![
        text(str_at(obj, "/spec/attacher")),
        text(str_at(obj, "/spec/source/persistentVolumeName")),
        text(str_at(obj, "/spec/nodeName")),
        Value::Bool(obj.pointer("/status/attached") == Some(&Value::Bool(true))),
        age(obj, now),
    ]
}

pub static WEBHOOK_CONFIGURATION: &[Column] =
    &[integer("Webhooks", "Webhooks indicates the number of webhooks registered in this configuration"), AGE];

pub fn webhook_configuration(obj: &Value, now: i64) -> Vec<Value> {
    vec![num(len_at(obj, "/webhooks")), age(obj, now)]
}

/// AGE comes second for certificate signing requests.
pub static CERTIFICATE_SIGNING_REQUEST: &[Column] = &[
    AGE,
    string("SignerName", "Requested signer for the request."),
    string("Requestor", "Information about the requesting user."),
    string(
        "RequestedDuration",
        "expirationSeconds is the requested duration of validity of the issued certificate.",
    ),
    string("Condition", "Conditions applied to the request."),
];

/// CONDITION is Denied, Approved or Pending, then `,Failed` and `,Issued` as they apply.
pub fn certificate_signing_request(obj: &Value, now: i64) -> Vec<Value> {
    let conditions = arr_at(obj, "/status/conditions");
    let has = |kind: &str| conditions.iter().any(|c| c["type"] == kind);
    let mut condition = if has("Denied") {
        "Denied"
    } else if has("Approved") {
        "Approved"
    } else {
        "Pending"
    }
    .to_string();
    if has("Failed") {
        condition.push_str(",Failed");
    }
    if !str_at(obj, "/status/certificate").is_empty() {
        condition.push_str(",Issued");
    }
    let duration = match obj.pointer("/spec/expirationSeconds").and_then(Value::as_i64) {
        Some(secs) => table::human_duration(secs),
        None => "<none>".to_string(),
    };
    vec![
        age(obj, now),
        text(or(str_at(obj, "/spec/signerName"), "<none>")),
        text(str_at(obj, "/spec/username")),
        text(duration),
        text(condition),
    ]
}

pub static FLOW_SCHEMA: &[Column] = &[
    string("PriorityLevel", "`name` is the name of the priority level configuration being referenced"),
    string(
        "MatchingPrecedence",
        "`matchingPrecedence` is used to choose among the FlowSchemas that match a given request.",
    ),
    string(
        "DistinguisherMethod",
        "`distinguisherMethod` defines how to compute the flow distinguisher for requests that match this schema.",
    ),
    AGE,
    string("MissingPL", "references a broken or non-existent PriorityLevelConfiguration"),
];

pub fn flow_schema(obj: &Value, now: i64) -> Vec<Value> {
    let dangling = arr_at(obj, "/status/conditions").iter().find(|c| c["type"] == "Dangling");
    vec![
        text(str_at(obj, "/spec/priorityLevelConfiguration/name")),
        count(int_at(obj, "/spec/matchingPrecedence")),
        text(or(str_at(obj, "/spec/distinguisherMethod/type"), "<none>")),
        age(obj, now),
        text(dangling.map_or("?", |c| c["status"].as_str().unwrap_or(""))),
    ]
}

pub static PRIORITY_LEVEL_CONFIGURATION: &[Column] = &[
    string(
        "Type",
        "`type` indicates whether this priority level is subject to limitation on request execution.",
    ),
    string(
        "NominalConcurrencyShares",
        "`nominalConcurrencyShares` (NCS) contributes to the computation of the NominalConcurrencyLimit (NominalCL) of this level.",
    ),
    string("Queues", "`queues` is the number of queues for this priority level."),
    string(
        "HandSize",
        "`handSize` is a small positive number that configures the shuffle sharding of requests into queues.",
    ),
    string(
        "QueueLengthLimit",
        "`queueLengthLimit` is the maximum number of requests allowed to be waiting in a given queue of this priority level at a time.",
    ),
    AGE,
];

/// The limited-level numbers, `<none>` for an exempt level or one that rejects.
pub fn priority_level_configuration(obj: &Value, now: i64) -> Vec<Value> {
    let limited = obj_at(obj, "/spec/limited");
    let queuing = limited.and_then(|l| obj_at(l, "/limitResponse/queuing"));
    let field = |v: Option<&Value>, name: &str| match v {
        Some(v) => count(int_at(v, &format!("/{name}"))),
        None => text("<none>"),
    };
    vec![
        text(str_at(obj, "/spec/type")),
        field(limited, "nominalConcurrencyShares"),
        field(queuing, "queues"),
        field(queuing, "handSize"),
        field(queuing, "queueLengthLimit"),
        age(obj, now),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_700_000_000;

    fn meta() -> Value {
        json!({ "name": "x", "creationTimestamp": "2023-11-13T22:13:20Z" })
    }

    #[test]
    fn role_bindings() {
        let rb = json!({ "metadata": meta(), "roleRef": { "kind": "ClusterRole", "name": "view" },
            "subjects": [
                { "kind": "User", "name": "alice" }, { "kind": "User", "name": "bob" },
                { "kind": "Group", "name": "devs" },
                { "kind": "ServiceAccount", "name": "default", "namespace": "kube-system" } ] });
        assert_eq!(
            role_binding(&rb, NOW),
            vec![
                json!("ClusterRole/view"),
                json!("24h"),
                json!("alice, bob"),
                json!("devs"),
                json!("kube-system/default")
            ]
        );
    }

    #[test]
    fn endpoint_slices() {
        let es = json!({ "metadata": meta(), "addressType": "IPv4",
            "ports": [{ "name": "http", "port": 80 }, { "name": "named" }, {}],
            "endpoints": [{ "addresses": ["10.0.0.1"] }, { "addresses": ["10.0.0.2", "10.0.0.3"] }, { "addresses": ["10.0.0.4"] }] });
        assert_eq!(
            endpoint_slice(&es, NOW),
            vec![
                json!("IPv4"),
                json!("80,named,*"),
                json!("10.0.0.1,10.0.0.2,10.0.0.3 + 1 more..."),
                json!("24h")
            ]
        );
        assert_eq!(endpoint_slice(&json!({}), NOW)[1..3], [json!("<unset>"), json!("<unset>")]);
    }

    #[test]
    fn ingresses() {
        let ing = json!({ "metadata": meta(),
            "spec": { "ingressClassName": "nginx", "tls": [{ "hosts": ["a.example.com"] }],
                      "rules": [{ "host": "a.example.com" }, {}, { "host": "b.example.com" }, { "host": "c.example.com" },
                                { "host": "d.example.com" }] },
            "status": { "loadBalancer": { "ingress": [{ "ip": "203.0.113.7" }] } } });
        assert_eq!(
            ingress(&ing, NOW),
            vec![
                json!("nginx"),
                json!("a.example.com,b.example.com,c.example.com + 2 more..."),
                json!("203.0.113.7"),
                json!("80, 443"),
                json!("24h")
            ]
        );
        assert_eq!(ingress(&json!({}), NOW)[..4], [json!("<none>"), json!("*"), json!(""), json!("80")]);
        let class = json!({ "spec": { "controller": "k8s.io/ingress-nginx",
            "parameters": { "apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "external-lb" } } });
        assert_eq!(
            ingress_class(&class, NOW)[..2],
            [json!("k8s.io/ingress-nginx"), json!("IngressParameters.k8s.example.com/external-lb")]
        );
    }

    #[test]
    fn policies_and_classes() {
        let pdb = json!({ "metadata": meta(), "spec": { "minAvailable": "50%" }, "status": { "disruptionsAllowed": 1 } });
        assert_eq!(
            pod_disruption_budget(&pdb, NOW),
            vec![json!("50%"), json!("N/A"), json!(1), json!("24h")]
        );
        let pc = json!({ "metadata": meta(), "value": 1000000, "globalDefault": false, "preemptionPolicy": "PreemptLowerPriority" });
        assert_eq!(
            priority_class(&pc, NOW),
            vec![json!(1000000), json!(false), json!("24h"), json!("PreemptLowerPriority")]
        );
        let sc = json!({ "metadata": meta(), "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer" });
        assert_eq!(
            storage_class(&sc, NOW),
            vec![
                json!("rancher.io/local-path"),
                json!("Delete"),
                json!("WaitForFirstConsumer"),
                json!("false"),
                json!("24h")
            ]
        );
        let np = json!({ "metadata": meta(), "spec": { "podSelector": {} } });
        assert_eq!(network_policy(&np, NOW)[0], json!("<none>"));
        let lease_obj = json!({ "metadata": meta(), "spec": { "holderIdentity": "node-1" } });
        assert_eq!(lease(&lease_obj, NOW), vec![json!("node-1"), json!("24h")]);
        assert_eq!(lease(&json!({}), NOW)[0], json!(""));
    }

    #[test]
    fn csrs_and_flow_control() {
        let csr = json!({ "metadata": meta(), "spec": { "signerName": "kubernetes.io/kube-apiserver-client",
            "username": "alice", "expirationSeconds": 86400 },
            "status": { "conditions": [{ "type": "Approved", "status": "True" }], "certificate": "LS0t" } });
        assert_eq!(
            certificate_signing_request(&csr, NOW),
            vec![
                json!("24h"),
                json!("kubernetes.io/kube-apiserver-client"),
                json!("alice"),
                json!("24h"),
                json!("Approved,Issued")
            ]
        );
        let plc = json!({ "spec": { "type": "Limited", "limited": { "nominalConcurrencyShares": 30,
            "limitResponse": { "type": "Queue", "queuing": { "queues": 64, "handSize": 6, "queueLengthLimit": 50 } } } } });
        assert_eq!(
            priority_level_configuration(&plc, NOW)[..5],
            [json!("Limited"), json!("30"), json!("64"), json!("6"), json!("50")]
        );
        let exempt = json!({ "spec": { "type": "Exempt", "exempt": {} } });
        assert_eq!(priority_level_configuration(&exempt, NOW)[1], json!("<none>"));
    }
}
