//! The core group besides Pod: Node, Namespace, Service, Endpoints, ConfigMap, Secret,
//! ServiceAccount, Event, PersistentVolume(Claim), ReplicationController, PodTemplate,
//! ResourceQuota, ComponentStatus.

use serde_json::Value;

use super::format::{
    access_modes, age, arr_at, container_cells, count, int_at, labels, len_at, list_with_more, num, obj_at,
    or, since, str_at, text, time_at,
};
use super::{AGE, CONTAINERS, Column, IMAGES, integer, string, wide};

pub static NODE: &[Column] = &[
    string("Status", "The status of the node"),
    string("Roles", "The roles of the node"),
    AGE,
    string("Version", "Kubelet Version reported by the node."),
    wide("Internal-IP", "List of addresses reachable to the node."),
    wide("External-IP", "List of addresses reachable to the node."),
    wide(
        "OS-Image",
        "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
    ),
    wide(
        "Kernel-Version",
        "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
    ),
    wide("Container-Runtime", "ContainerRuntime Version reported by the node through runtime remote API."),
];

/// STATUS is Ready/NotReady/Unknown from the Ready condition, plus SchedulingDisabled
/// when cordoned; ROLES come from `node-role.kubernetes.io/<role>` labels and the
/// `kubernetes.io/role` label.
pub fn node(obj: &Value, now: i64) -> Vec<Value> {
    let mut status = match arr_at(obj, "/status/conditions").iter().rev().find(|c| c["type"] == "Ready") {
        Some(c) if c["status"] == "True" => "Ready".to_string(),
        Some(_) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if obj.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
        status.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<&str> = Vec::new();
    if let Some(l) = obj["metadata"]["labels"].as_object() {
        for (k, v) in l {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/").filter(|r| !r.is_empty()) {
                roles.push(role);
            } else if k == "kubernetes.io/role" && v.as_str().is_some_and(|v| !v.is_empty()) {
                roles.push(v.as_str().unwrap_or_default());
            }
        }
    }
    roles.sort_unstable();
    roles.dedup();
    let address = |kind: &str| {
        let a = arr_at(obj, "/status/addresses").iter().find(|a| a["type"] == kind);
        text(a.map_or("<none>", |a| a["address"].as_str().unwrap_or("")))
    };
    let info = |field: &str| text(or(str_at(obj, &format!("/status/nodeInfo/{field}")), "<unknown>"));
    vec![
        text(status),
        text(or(&roles.join(","), "<none>")),
        age(obj, now),
        text(str_at(obj, "/status/nodeInfo/kubeletVersion")),
        address("InternalIP"),
        address("ExternalIP"),
        info("osImage"),
        info("kernelVersion"),
        info("containerRuntimeVersion"),
    ]
}

pub static NAMESPACE: &[Column] = &[string("Status", "The status of the namespace"), AGE];

pub fn namespace(obj: &Value, now: i64) -> Vec<Value> {
    vec![text(str_at(obj, "/status/phase")), age(obj, now)]
}

pub static SERVICE: &[Column] = &[
    string("Type", "type determines how the Service is exposed."),
    string("Cluster-IP", "clusterIP is the IP address of the service and is usually assigned randomly."),
    string(
        "External-IP",
        "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
    ),
    string("Port(s)", "The list of ports that are exposed by this service."),
    AGE,
    wide("Selector", "Route service traffic to pods with label keys and values matching this selector."),
];

/// EXTERNAL-IP is `<none>` for ClusterIP/NodePort services without external IPs,
/// `<pending>` for a LoadBalancer without ingress, the external name for ExternalName.
/// PORT(S) reads `80/TCP` or, with a node port, `80:30080/TCP`.
pub fn service(obj: &Value, now: i64) -> Vec<Value> {
    // The v1 defaults (type ClusterIP, protocol TCP) stand in for unset fields.
    let kind = match str_at(obj, "/spec/type") {
        "" => "ClusterIP",
        t => t,
    };
    let cluster_ip = match arr_at(obj, "/spec/clusterIPs").first().and_then(Value::as_str) {
        Some(ip) => ip,
        None => str_at(obj, "/spec/clusterIP"),
    };
    let ports: Vec<String> = arr_at(obj, "/spec/ports")
        .iter()
        .map(|p| {
            let protocol = or(str_at(p, "/protocol"), "TCP");
            match int_at(p, "/nodePort") {
                0 => format!("{}/{protocol}", int_at(p, "/port")),
                node_port => format!("{}:{node_port}/{protocol}", int_at(p, "/port")),
            }
        })
        .collect();
    vec![
        text(kind),
        text(or(cluster_ip, "<none>")),
        text(service_external_ip(obj, kind)),
        text(or(&ports.join(","), "<none>")),
        age(obj, now),
        text(labels(&obj["spec"]["selector"])),
    ]
}

/// `getServiceExternalIP`, wide (the server never clips load balancer addresses).
fn service_external_ip(obj: &Value, kind: &str) -> String {
    let external: Vec<&str> = arr_at(obj, "/spec/externalIPs").iter().filter_map(Value::as_str).collect();
    match kind {
        "ClusterIP" | "NodePort" => or(&external.join(","), "<none>"),
        "LoadBalancer" => {
            let mut all = load_balancer_addresses(&obj["status"]["loadBalancer"]);
            if all.is_empty() && external.is_empty() {
                return "<pending>".to_string();
            }
            all.extend(external.iter().map(|s| s.to_string()));
            all.join(",")
        }
        "ExternalName" => str_at(obj, "/spec/externalName").to_string(),
        _ => "<unknown>".to_string(),
    }
}

/// The IPs (else hostnames) of a load balancer status's ingress points, sorted and
/// deduplicated (`sets.NewString`).
pub fn load_balancer_addresses(status: &Value) -> Vec<String> {
    let mut out: Vec<String> = arr_at(status, "/ingress")
        .iter()
        .filter_map(|i| match (str_at(i, "/ip"), str_at(i, "/hostname")) {
            ("", "") => None,
            ("", host) => Some(host.to_string()),
            (ip, _) => Some(ip.to_string()),
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

pub static ENDPOINTS: &[Column] =
    &[string("Endpoints", "The set of all endpoints is the union of all subsets."), AGE];

/// The first three `ip:port` pairs (or bare IPs for subsets without ports), then
/// `+ N more...`; `<none>` without subsets.
pub fn endpoints(obj: &Value, now: i64) -> Vec<Value> {
    vec![text(format_endpoints(obj)), age(obj, now)]
}

fn format_endpoints(obj: &Value) -> String {
    const MAX: usize = 3;
    let subsets = arr_at(obj, "/subsets");
    if subsets.is_empty() {
        return "<none>".to_string();
    }
    let mut list: Vec<String> = Vec::new();
    let mut total = 0;
    for ss in subsets {
        let addresses = arr_at(ss, "/addresses");
        let ports = arr_at(ss, "/ports");
        if ports.is_empty() {
            total += addresses.len();
            list.extend(addresses.iter().map(|a| str_at(a, "/ip").to_string()));
            continue;
        }
        for port in ports {
            total += addresses.len();
            let p = int_at(port, "/port");
            list.extend(addresses.iter().map(|a| match str_at(a, "/ip") {
                ip if ip.contains(':') => format!("[{ip}]:{p}"),
                ip => format!("{ip}:{p}"),
            }));
        }
    }
    // Unlike the other lists, an empty one prints empty rather than `<unset>`.
    if list.is_empty() { String::new() } else { list_with_more(&list, total, MAX) }
}

pub static CONFIG_MAP: &[Column] = &[string("Data", "Data contains the configuration data."), AGE];

pub fn config_map(obj: &Value, now: i64) -> Vec<Value> {
    vec![count(len_at(obj, "/data") + len_at(obj, "/binaryData")), age(obj, now)]
}

pub static SECRET: &[Column] = &[
    string("Type", "Used to facilitate programmatic handling of secret data."),
    string("Data", "Data contains the secret data."),
    AGE,
];

pub fn secret(obj: &Value, now: i64) -> Vec<Value> {
    // An unset type defaults to Opaque.
    let kind = or(str_at(obj, "/type"), "Opaque");
    vec![text(kind), count(len_at(obj, "/data")), age(obj, now)]
}

pub static SERVICE_ACCOUNT: &[Column] = &[
    string(
        "Secrets",
        "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.",
    ),
    AGE,
];

pub fn service_account(obj: &Value, now: i64) -> Vec<Value> {
    vec![count(len_at(obj, "/secrets")), age(obj, now)]
}

/// Upstream's event columns start with LAST SEEN and end with a wide NAME; the Name
/// column [`crate::table`] puts first stands for that one.
pub static EVENT: &[Column] = &[
    string("Last Seen", "The time at which the most recent occurrence of this event was recorded."),
    string("Type", "Type of this event (Normal, Warning), new types could be added in the future"),
    string(
        "Reason",
        "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
    ),
    string("Object", "The object that this event is about."),
    wide(
        "Subobject",
        "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement.",
    ),
    wide("Source", "The component reporting this event. Should be a short machine understandable string."),
    string("Message", "A human-readable description of the status of this operation."),
    wide("First Seen", "The time at which the event was first recorded."),
    wide("Count", "The number of times this event has occurred."),
];

/// Prints core/v1 events and events.k8s.io/v1 ones (whose fields are renamed:
/// `regarding`, `note`, `deprecated*`), as upstream does after converting both to one
/// internal type.
pub fn event(obj: &Value, now: i64) -> Vec<Value> {
    let field = |core: &str, events: &str| obj.get(core).filter(|v| !v.is_null()).or_else(|| obj.get(events));
    let ts = |v: Option<&Value>| v.and_then(Value::as_str).and_then(crate::table::parse_time);

    let first = match ts(field("firstTimestamp", "deprecatedFirstTimestamp")) {
        Some(t) => since(Some(t), now),
        None => since(time_at(obj, "/eventTime"), now),
    };
    let mut last = match ts(field("lastTimestamp", "deprecatedLastTimestamp")) {
        Some(t) => since(Some(t), now),
        None => first.clone(),
    };
    let mut n = field("count", "deprecatedCount").and_then(Value::as_i64).unwrap_or(0);
    if let Some(series) = obj_at(obj, "/series") {
        last = since(time_at(series, "/lastObservedTime"), now);
        n = int_at(series, "/count");
    } else if n == 0 {
        // Singleton events of the new API carry no count.
        n = 1;
    }

    let regarding = field("involvedObject", "regarding").cloned().unwrap_or(Value::Null);
    let kind = str_at(&regarding, "/kind").to_lowercase();
    let target = match str_at(&regarding, "/name") {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    let source = field("source", "deprecatedSource").cloned().unwrap_or(Value::Null);
    let component = first_non_empty(
        str_at(&source, "/component"),
        field("reportingComponent", "reportingController").and_then(Value::as_str).unwrap_or(""),
    );
    let instance = first_non_empty(str_at(&source, "/host"), str_at(obj, "/reportingInstance"));
    let source = if instance.is_empty() { component.to_string() } else { format!("{component}, {instance}") };
    let message = field("message", "note").and_then(Value::as_str).unwrap_or("").trim();

    vec![
        text(last),
        text(str_at(obj, "/type")),
        text(str_at(obj, "/reason")),
        text(target),
        text(str_at(&regarding, "/fieldPath")),
        text(source),
        text(message),
        text(first),
        count(n),
    ]
}

fn first_non_empty<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.is_empty() { b } else { a }
}

pub static PERSISTENT_VOLUME: &[Column] = &[
    string("Capacity", "capacity is the description of the persistent volume's resources and capacity."),
    string("Access Modes", "accessModes contains all ways the volume can be mounted."),
    string(
        "Reclaim Policy",
        "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim.",
    ),
    string("Status", "phase indicates if a volume is available, bound to a claim, or released by a claim."),
    string(
        "Claim",
        "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim.",
    ),
    string("StorageClass", "StorageClass of the pv"),
    string("VolumeAttributesClass", "VolumeAttributesClass of the pv"),
    string(
        "Reason",
        "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI.",
    ),
    AGE,
    wide(
        "VolumeMode",
        "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state.",
    ),
];

pub fn persistent_volume(obj: &Value, now: i64) -> Vec<Value> {
    let claim = match obj_at(obj, "/spec/claimRef") {
        Some(r) => format!("{}/{}", str_at(r, "/namespace"), str_at(r, "/name")),
        None => String::new(),
    };
    let class = match obj.pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class") {
        Some(Value::String(c)) => c.as_str(),
        _ => str_at(obj, "/spec/storageClassName"),
    };
    let phase = if is_deleting(obj) { "Terminating" } else { str_at(obj, "/status/phase") };
    vec![
        text(or(str_at(obj, "/spec/capacity/storage"), "0")),
        text(access_modes(arr_at(obj, "/spec/accessModes"))),
        text(str_at(obj, "/spec/persistentVolumeReclaimPolicy")),
        text(phase),
        text(claim),
        text(class),
        text(or(str_at(obj, "/spec/volumeAttributesClassName"), "<unset>")),
        text(str_at(obj, "/status/reason")),
        age(obj, now),
        text(or(str_at(obj, "/spec/volumeMode"), "<unset>")),
    ]
}

pub static PERSISTENT_VOLUME_CLAIM: &[Column] = &[
    string("Status", "phase represents the current phase of PersistentVolumeClaim."),
    string("Volume", "volumeName is the binding reference to the PersistentVolume backing this claim."),
    string("Capacity", "capacity represents the actual resources of the underlying volume."),
    string("Access Modes", "accessModes contains the actual access modes the volume backing the PVC has."),
    string("StorageClass", "StorageClass of the pvc"),
    string("VolumeAttributesClass", "VolumeAttributesClass of the pvc"),
    AGE,
    wide("VolumeMode", "volumeMode defines what type of volume is required by the claim."),
];

/// CAPACITY and ACCESS MODES come from the status, and only once the claim names its
/// volume.
pub fn persistent_volume_claim(obj: &Value, now: i64) -> Vec<Value> {
    let phase = if is_deleting(obj) { "Terminating" } else { str_at(obj, "/status/phase") };
    let volume = str_at(obj, "/spec/volumeName");
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (or(str_at(obj, "/status/capacity/storage"), "0"), access_modes(arr_at(obj, "/status/accessModes")))
    };
    let class = match obj.pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class") {
        Some(Value::String(c)) => c.as_str(),
        _ => str_at(obj, "/spec/storageClassName"),
    };
    vec![
        text(phase),
        text(volume),
        text(capacity),
        text(modes),
        text(class),
        text(or(str_at(obj, "/spec/volumeAttributesClassName"), "<unset>")),
        age(obj, now),
        text(or(str_at(obj, "/spec/volumeMode"), "<unset>")),
    ]
}

fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null())
}

pub static REPLICATION_CONTROLLER: &[Column] = &[
    integer("Desired", "Replicas is the number of desired replicas."),
    integer("Current", "Replicas is the most recently observed number of replicas."),
    integer("Ready", "The number of ready replicas for this replication controller."),
    AGE,
    CONTAINERS,
    IMAGES,
    wide("Selector", "Selector is a label query over pods that should match the Replicas count."),
];

pub fn replication_controller(obj: &Value, now: i64) -> Vec<Value> {
    let [names, images] = container_cells(obj, "/spec/template");
    vec![
        num(obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)),
        num(int_at(obj, "/status/replicas")),
        num(int_at(obj, "/status/readyReplicas")),
        age(obj, now),
        names,
        images,
        text(labels(&obj["spec"]["selector"])),
    ]
}

/// Upstream prints pod templates without an AGE column.
pub static POD_TEMPLATE: &[Column] = &[
    string("Containers", "Names of each container in the template."),
    string("Images", "Images referenced by each container in the template."),
    string("Pod Labels", "The labels for the pod template."),
];

pub fn pod_template(obj: &Value, _now: i64) -> Vec<Value> {
    let [names, images] = container_cells(obj, "/template");
    vec![names, images, text(labels(&obj["template"]["metadata"]["labels"]))]
}

pub static RESOURCE_QUOTA: &[Column] = &[
    string("Request", "Request represents a minimum amount of cpu/memory that a container may consume."),
    string(
        "Limit",
        "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
    ),
    AGE,
];

/// `resource: used/hard` for each resource of `status.hard`, sorted; `limits.*` ones
/// under LIMIT, the rest under REQUEST.
pub fn resource_quota(obj: &Value, now: i64) -> Vec<Value> {
    let mut names: Vec<&String> =
        obj["status"]["hard"].as_object().map_or(Vec::new(), |m| m.keys().collect());
    names.sort();
    let (mut requests, mut limits) = (Vec::new(), Vec::new());
    for name in names {
        let quantity = |which: &str| match obj["status"][which][name.as_str()].as_str() {
            Some(q) => q.to_string(),
            None => "0".to_string(),
        };
        let entry = format!("{name}: {}/{}", quantity("used"), quantity("hard"));
        let mut pieces = name.split('.');
        if pieces.next() == Some("limits") && pieces.next().is_some() {
            limits.push(entry);
        } else {
            requests.push(entry);
        }
    }
    vec![text(requests.join(", ")), text(limits.join(", ")), age(obj, now)]
}

/// Upstream prints component statuses without an AGE column.
pub static COMPONENT_STATUS: &[Column] = &[
    string("Status", "Status of the component conditions"),
    string("Message", "Message of the component conditions"),
    string("Error", "Error of the component conditions"),
];

pub fn component_status(obj: &Value, _now: i64) -> Vec<Value> {
    match arr_at(obj, "/conditions").iter().find(|c| c["type"] == "Healthy") {
        Some(c) => vec![
            text(if c["status"] == "True" { "Healthy" } else { "Unhealthy" }),
            text(str_at(c, "/message")),
            text(str_at(c, "/error")),
        ],
        None => vec![text("Unknown"), text(""), text("")],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_700_000_000;

    fn strings(v: Vec<Value>) -> Vec<String> {
        v.into_iter().map(|c| c.as_str().map_or_else(|| c.to_string(), str::to_string)).collect()
    }

    fn meta() -> Value {
        json!({ "name": "x", "creationTimestamp": "2023-11-14T20:13:20Z" })
    }

    #[test]
    fn node_status_and_roles() {
        let mut n = json!({
            "metadata": { "name": "n1", "creationTimestamp": "2023-11-14T20:13:20Z", "labels": {
                "node-role.kubernetes.io/control-plane": "",
                "node-role.kubernetes.io/worker": "",
                "node-role.kubernetes.io/": "",
                "kubernetes.io/role": "master",
                "kubernetes.io/hostname": "n1" } },
            "status": {
                "conditions": [{ "type": "MemoryPressure", "status": "False" }, { "type": "Ready", "status": "True" }],
                "addresses": [{ "type": "InternalIP", "address": "192.168.1.10" }, { "type": "Hostname", "address": "n1" }],
                "nodeInfo": { "kubeletVersion": "v1.32.0", "osImage": "Debian GNU/Linux 12 (bookworm)",
                              "kernelVersion": "6.1.0", "containerRuntimeVersion": "containerd://1.7.0" } },
        });
        assert_eq!(
            strings(node(&n, NOW)),
            [
                "Ready",
                "control-plane,master,worker",
                "120m",
                "v1.32.0",
                "192.168.1.10",
                "<none>",
                "Debian GNU/Linux 12 (bookworm)",
                "6.1.0",
                "containerd://1.7.0"
            ]
        );
        n["spec"] = json!({ "unschedulable": true });
        n["status"]["conditions"][1]["status"] = json!("Unknown");
        assert_eq!(strings(node(&n, NOW))[0], "NotReady,SchedulingDisabled");
        let bare = json!({ "metadata": { "name": "n2", "labels": { "kubernetes.io/role": "" } } });
        let row = strings(node(&bare, NOW));
        assert_eq!(row[..4], ["Unknown", "<none>", "<unknown>", ""]);
        assert_eq!(row[4..], ["<none>", "<none>", "<unknown>", "<unknown>", "<unknown>"]);
    }

    #[test]
    fn services() {
        let svc = |spec: Value, status: Value| json!({ "metadata": meta(), "spec": spec, "status": status });
        let cluster_ip = svc(
            json!({ "type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                    "ports": [{ "port": 53, "protocol": "UDP" }, { "port": 53, "protocol": "TCP" }],
                    "selector": { "k8s-app": "kube-dns" } }),
            json!({}),
        );
        assert_eq!(
            strings(service(&cluster_ip, NOW)),
            ["ClusterIP", "10.96.0.10", "<none>", "53/UDP,53/TCP", "120m", "k8s-app=kube-dns"]
        );
        let node_port = svc(
            json!({ "type": "NodePort", "clusterIPs": ["10.96.1.1"], "externalIPs": ["1.2.3.4"],
                    "ports": [{ "port": 80, "nodePort": 30080, "protocol": "TCP" }] }),
            json!({}),
        );
        assert_eq!(
            strings(service(&node_port, NOW))[..5],
            ["NodePort", "10.96.1.1", "1.2.3.4", "80:30080/TCP", "120m"]
        );
        let pending = svc(
            json!({ "type": "LoadBalancer", "clusterIPs": ["10.96.1.2"],
                    "ports": [{ "port": 443, "nodePort": 31443, "protocol": "TCP" }] }),
            json!({ "loadBalancer": {} }),
        );
        assert_eq!(strings(service(&pending, NOW))[2..4], ["<pending>", "443:31443/TCP"]);
        let ready = svc(
            json!({ "type": "LoadBalancer", "clusterIPs": ["10.96.1.2"], "externalIPs": ["9.9.9.9"] }),
            json!({ "loadBalancer": { "ingress": [{ "hostname": "lb.example.com" }, { "ip": "5.6.7.8" }] } }),
        );
        assert_eq!(strings(service(&ready, NOW))[2..4], ["5.6.7.8,lb.example.com,9.9.9.9", "<none>"]);
        let headless = svc(json!({ "clusterIP": "None", "clusterIPs": ["None"] }), json!({}));
        assert_eq!(strings(service(&headless, NOW))[..4], ["ClusterIP", "None", "<none>", "<none>"]);
        let external = svc(json!({ "type": "ExternalName", "externalName": "db.example.com" }), json!({}));
        assert_eq!(strings(service(&external, NOW))[..3], ["ExternalName", "<none>", "db.example.com"]);
        assert_eq!(strings(service(&external, NOW))[5], "<none>");
    }

    #[test]
    fn endpoints_list_three_then_more() {
        let ep = json!({ "metadata": meta(), "subsets": [
            { "addresses": [{ "ip": "10.0.0.1" }, { "ip": "10.0.0.2" }], "ports": [{ "port": 80 }, { "port": 443 }] },
            { "addresses": [{ "ip": "fd00::1" }] } ] });
        assert_eq!(strings(endpoints(&ep, NOW))[0], "10.0.0.1:80,10.0.0.2:80,10.0.0.1:443 + 2 more...");
        let v6 = json!({ "subsets": [{ "addresses": [{ "ip": "fd00::1" }], "ports": [{ "port": 80 }] }] });
        assert_eq!(strings(endpoints(&v6, NOW))[0], "[fd00::1]:80");
        assert_eq!(strings(endpoints(&json!({}), NOW))[0], "<none>");
    }

    #[test]
    fn config_maps_secrets_service_accounts() {
        let cm = json!({ "metadata": meta(), "data": { "a": "1", "b": "2" }, "binaryData": { "c": "AA==" } });
        assert_eq!(config_map(&cm, NOW), vec![json!("3"), json!("120m")]);
        let secret_obj = json!({ "metadata": meta(), "type": "kubernetes.io/tls", "data": { "tls.crt": "", "tls.key": "" } });
        assert_eq!(secret(&secret_obj, NOW), vec![json!("kubernetes.io/tls"), json!("2"), json!("120m")]);
        assert_eq!(secret(&json!({ "metadata": meta() }), NOW)[..2], [json!("Opaque"), json!("0")]);
        assert_eq!(service_account(&json!({ "metadata": meta() }), NOW), vec![json!("0"), json!("120m")]);
    }

    #[test]
    fn core_and_events_api_events() {
        let core = json!({
            "metadata": meta(),
            "involvedObject": { "kind": "Pod", "name": "web-1", "fieldPath": "spec.containers{app}" },
            "reason": "Pulled", "message": "Successfully pulled image \"nginx\"\n", "type": "Normal",
            "source": { "component": "kubelet", "host": "n1" },
            "firstTimestamp": "2023-11-14T22:03:20Z", "lastTimestamp": "2023-11-14T22:12:20Z", "count": 3,
        });
        assert_eq!(
            strings(event(&core, NOW)),
            [
                "60s",
                "Normal",
                "Pulled",
                "pod/web-1",
                "spec.containers{app}",
                "kubelet, n1",
                "Successfully pulled image \"nginx\"",
                "10m",
                "3"
            ]
        );
        let new_api = json!({
            "metadata": meta(),
            "regarding": { "kind": "Node", "name": "n1" },
            "reason": "Starting", "note": "Starting kubelet.", "type": "Normal",
            "reportingController": "kubelet", "reportingInstance": "n1",
            "eventTime": "2023-11-14T22:13:10.123456Z",
        });
        assert_eq!(
            strings(event(&new_api, NOW)),
            ["10s", "Normal", "Starting", "node/n1", "", "kubelet, n1", "Starting kubelet.", "10s", "1"]
        );
        let series = json!({ "involvedObject": { "kind": "Node" }, "eventTime": "2023-11-14T22:00:00.000000Z",
            "series": { "count": 7, "lastObservedTime": "2023-11-14T22:13:15.000000Z" } });
        let row = strings(event(&series, NOW));
        assert_eq!((row[0].as_str(), row[3].as_str(), row[8].as_str()), ("5s", "node", "7"));
        assert_eq!(strings(event(&json!({}), NOW))[0], "<unknown>");
    }

    #[test]
    fn volumes_and_claims() {
        let pv = json!({ "metadata": meta(),
            "spec": { "capacity": { "storage": "5Gi" }, "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
                      "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "slow",
                      "claimRef": { "namespace": "default", "name": "data" } },
            "status": { "phase": "Bound" } });
        assert_eq!(
            strings(persistent_volume(&pv, NOW)),
            ["5Gi", "RWO,ROX", "Retain", "Bound", "default/data", "slow", "<unset>", "", "120m", "<unset>"]
        );
        let pending = json!({ "metadata": meta(),
            "spec": { "accessModes": ["ReadWriteOnce"], "resources": { "requests": { "storage": "1Gi" } },
                      "storageClassName": "standard", "volumeMode": "Filesystem" },
            "status": { "phase": "Pending" } });
        assert_eq!(
            strings(persistent_volume_claim(&pending, NOW)),
            ["Pending", "", "", "", "standard", "<unset>", "120m", "Filesystem"]
        );
        let mut bound = pending.clone();
        bound["spec"]["volumeName"] = json!("pv-1");
        bound["status"] =
            json!({ "phase": "Bound", "capacity": { "storage": "2Gi" }, "accessModes": ["ReadWriteOnce"] });
        bound["metadata"]["deletionTimestamp"] = json!("2023-11-14T22:13:00Z");
        assert_eq!(strings(persistent_volume_claim(&bound, NOW))[..4], ["Terminating", "pv-1", "2Gi", "RWO"]);
    }

    #[test]
    fn replication_controllers_templates_quotas() {
        let rc = json!({ "metadata": meta(), "spec": { "replicas": 3, "selector": { "app": "web" },
            "template": { "spec": { "containers": [{ "name": "a", "image": "nginx" }, { "name": "b", "image": "busybox" }] } } },
            "status": { "replicas": 3, "readyReplicas": 2 } });
        assert_eq!(
            replication_controller(&rc, NOW),
            vec![
                json!(3),
                json!(3),
                json!(2),
                json!("120m"),
                json!("a,b"),
                json!("nginx,busybox"),
                json!("app=web")
            ]
        );
        let pt = json!({ "template": { "metadata": { "labels": { "app": "web" } },
            "spec": { "containers": [{ "name": "a", "image": "nginx" }] } } });
        assert_eq!(pod_template(&pt, NOW), vec![json!("a"), json!("nginx"), json!("app=web")]);
        let rq = json!({ "metadata": meta(), "status": {
            "hard": { "pods": "10", "requests.cpu": "1", "limits.memory": "2Gi", "limits": "1" },
            "used": { "pods": "2", "requests.cpu": "500m" } } });
        assert_eq!(
            strings(resource_quota(&rq, NOW)),
            ["limits: 0/1, pods: 2/10, requests.cpu: 500m/1", "limits.memory: 0/2Gi", "120m"]
        );
    }
}
