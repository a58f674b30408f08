//! Status writes are status writes, for every resource with a `status` subresource: a
//! write through `/status` (PUT and merge PATCH) keeps the stored spec whatever it carries
//! and applies its status; metadata goes as upstream's status strategy of that kind says
//! (checked against upstream v1.28.4's API server); and a write of the main resource keeps
//! the stored status. The list of cases is checked against discovery, so a resource that
//! gains a status subresource without a case here fails the test.

use e2e::apiserver::KubeApiserver;
use e2e::{Etcd, EtcdOptions, json};
use serde_json::{Value, json};

const NS: &str = "status-e2e";

/// One request as the admin: (status, body as JSON or Null).
fn call(
    api: &KubeApiserver,
    method: &str,
    path: &str,
    content_type: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let ct = format!("Content-Type: {content_type}");
    let body = body.map(|b| b.to_string().into_bytes());
    let (code, text) = api.request(method, path, &[&ct], body.as_deref());
    (code, if text.is_empty() { Value::Null } else { json(&text) })
}

fn ok(api: &KubeApiserver, method: &str, path: &str, body: Option<&Value>) -> Value {
    let ct = if method == "PATCH" { "application/merge-patch+json" } else { "application/json" };
    let (code, out) = call(api, method, path, ct, body);
    assert!((200..300).contains(&code), "{method} {path}: {code} {out}\n{}", api.log_tail(20));
    out
}

/// Which metadata a status write may change, by upstream's status strategy of the kind.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Meta {
    /// `newObj.Spec = oldObj.Spec`: labels, annotations and finalizers come from the write.
    FromWrite,
    /// Deployments: labels stay, the rest comes from the write.
    KeepLabels,
    /// `ResetObjectMetaForStatus` (VolumeAttachment) or all metadata (flow control).
    KeepAll,
}

struct Case {
    /// The collection, `{ns}` for the namespace.
    path: &'static str,
    object: Value,
    /// A spec field (a top-level section and a key in it) and a value to try through status.
    spec: (&'static str, &'static str, Value),
    status: Value,
    meta: Meta,
}

fn cases(csr_pem: &str) -> Vec<Case> {
    let pod_spec = json!({ "containers": [{ "name": "c", "image": "busybox" }] });
    let template = json!({ "metadata": { "labels": { "app": "x" } }, "spec": pod_spec });
    let selector = json!({ "matchLabels": { "app": "x" } });
    let job_template =
        json!({ "spec": { "containers": [{ "name": "c", "image": "busybox" }], "restartPolicy": "Never" } });
    use base64::Engine;
    let request = base64::engine::general_purpose::STANDARD.encode(csr_pem);
    let case = |path, object: Value, spec: (&'static str, &'static str, Value), status: Value, meta| Case {
        path,
        object,
        spec,
        status,
        meta,
    };
    use Meta::*;
    vec![
        case(
            "/api/v1/namespaces/{ns}/pods",
            json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "s-pod" }, "spec": pod_spec }),
            ("spec", "activeDeadlineSeconds", json!(30)),
            json!({ "phase": "Running", "message": "hi" }),
            FromWrite,
        ),
        case(
            "/api/v1/nodes",
            json!({ "apiVersion": "v1", "kind": "Node", "metadata": { "name": "s-node" } }),
            ("spec", "unschedulable", json!(true)),
            json!({ "capacity": { "cpu": "2" }, "allocatable": { "cpu": "2" } }),
            FromWrite,
        ),
        case(
            "/api/v1/namespaces/{ns}/services",
            json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "name": "s-svc" }, "spec": { "ports": [{ "port": 80 }], "type": "LoadBalancer" } }),
            ("spec", "sessionAffinity", json!("ClientIP")),
            json!({ "loadBalancer": { "ingress": [{ "ip": "192.0.2.1" }] } }),
            FromWrite,
        ),
        case(
            "/api/v1/namespaces",
            json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "s-ns" } }),
            ("spec", "finalizers", json!(["kubernetes", "example.com/x"])),
            json!({ "phase": "Active", "conditions": [{ "type": "NamespaceDeletionDiscoveryFailure", "status": "False" }] }),
            FromWrite,
        ),
        case(
            "/api/v1/persistentvolumes",
            json!({ "apiVersion": "v1", "kind": "PersistentVolume", "metadata": { "name": "s-pv" }, "spec": { "capacity": { "storage": "1Gi" }, "accessModes": ["ReadWriteOnce"], "hostPath": { "path": "/tmp/x" } } }),
            ("spec", "persistentVolumeReclaimPolicy", json!("Delete")),
            json!({ "phase": "Available", "message": "m" }),
            FromWrite,
        ),
        case(
            "/api/v1/namespaces/{ns}/persistentvolumeclaims",
            json!({ "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": { "name": "s-pvc" }, "spec": { "accessModes": ["ReadWriteOnce"], "resources": { "requests": { "storage": "1Gi" } } } }),
            ("spec", "volumeName", json!("other")),
            json!({ "phase": "Bound", "capacity": { "storage": "1Gi" }, "accessModes": ["ReadWriteOnce"] }),
            FromWrite,
        ),
        case(
            "/api/v1/namespaces/{ns}/replicationcontrollers",
            json!({ "apiVersion": "v1", "kind": "ReplicationController", "metadata": { "name": "s-rc" }, "spec": { "replicas": 1, "selector": { "app": "x" }, "template": template } }),
            ("spec", "replicas", json!(5)),
            json!({ "replicas": 1, "readyReplicas": 1, "observedGeneration": 1 }),
            FromWrite,
        ),
        case(
            "/api/v1/namespaces/{ns}/resourcequotas",
            json!({ "apiVersion": "v1", "kind": "ResourceQuota", "metadata": { "name": "s-quota" }, "spec": { "hard": { "pods": "10" } } }),
            ("spec", "hard", json!({ "pods": "20" })),
            json!({ "hard": { "pods": "10" }, "used": { "pods": "1" } }),
            FromWrite,
        ),
        case(
            "/apis/apps/v1/namespaces/{ns}/deployments",
            json!({ "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "s-deploy" }, "spec": { "selector": selector, "template": template } }),
            ("spec", "replicas", json!(5)),
            json!({ "replicas": 1, "observedGeneration": 1 }),
            KeepLabels,
        ),
        case(
            "/apis/apps/v1/namespaces/{ns}/replicasets",
            json!({ "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": { "name": "s-rs" }, "spec": { "selector": selector, "template": template } }),
            ("spec", "replicas", json!(5)),
            json!({ "replicas": 1, "observedGeneration": 1 }),
            FromWrite,
        ),
        // Without claim templates: the case upstream's StatefulSet controller hit ("spec:
        // Forbidden: updates to statefulset spec for fields other than ...").
        case(
            "/apis/apps/v1/namespaces/{ns}/statefulsets",
            json!({ "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": { "name": "s-sts" }, "spec": { "selector": selector, "template": template, "serviceName": "s" } }),
            ("spec", "replicas", json!(5)),
            json!({ "replicas": 1, "observedGeneration": 1, "availableReplicas": 0 }),
            FromWrite,
        ),
        case(
            "/apis/apps/v1/namespaces/{ns}/daemonsets",
            json!({ "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": { "name": "s-ds" }, "spec": { "selector": selector, "template": template } }),
            ("spec", "minReadySeconds", json!(5)),
            json!({ "currentNumberScheduled": 1, "desiredNumberScheduled": 1, "numberMisscheduled": 0, "numberReady": 0, "observedGeneration": 1 }),
            FromWrite,
        ),
        case(
            "/apis/batch/v1/namespaces/{ns}/jobs",
            json!({ "apiVersion": "batch/v1", "kind": "Job", "metadata": { "name": "s-job" }, "spec": { "template": job_template } }),
            ("spec", "parallelism", json!(3)),
            json!({ "active": 1, "startTime": "2024-01-01T00:00:00Z" }),
            FromWrite,
        ),
        case(
            "/apis/batch/v1/namespaces/{ns}/cronjobs",
            json!({ "apiVersion": "batch/v1", "kind": "CronJob", "metadata": { "name": "s-cj" }, "spec": { "schedule": "*/5 * * * *", "jobTemplate": { "spec": { "template": job_template } } } }),
            ("spec", "suspend", json!(true)),
            json!({ "lastScheduleTime": "2024-01-01T00:00:00Z" }),
            FromWrite,
        ),
        case(
            "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
            json!({ "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": { "name": "s-hpa" }, "spec": { "scaleTargetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "s-deploy" }, "maxReplicas": 3 } }),
            ("spec", "maxReplicas", json!(7)),
            json!({ "currentReplicas": 1, "desiredReplicas": 2 }),
            FromWrite,
        ),
        case(
            "/apis/autoscaling/v1/namespaces/{ns}/horizontalpodautoscalers",
            json!({ "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": { "name": "s-hpa1" }, "spec": { "scaleTargetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "s-deploy" }, "maxReplicas": 3, "targetCPUUtilizationPercentage": 50 } }),
            ("spec", "maxReplicas", json!(7)),
            json!({ "currentReplicas": 1, "desiredReplicas": 2, "currentCPUUtilizationPercentage": 40 }),
            FromWrite,
        ),
        case(
            "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
            json!({ "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": { "name": "s-pdb" }, "spec": { "minAvailable": 1, "selector": selector } }),
            ("spec", "minAvailable", json!(2)),
            json!({ "currentHealthy": 1, "desiredHealthy": 1, "disruptionsAllowed": 0, "expectedPods": 1, "observedGeneration": 1 }),
            FromWrite,
        ),
        case(
            "/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses",
            json!({ "apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": { "name": "s-ing" }, "spec": { "defaultBackend": { "service": { "name": "s", "port": { "number": 80 } } } } }),
            ("spec", "ingressClassName", json!("other")),
            json!({ "loadBalancer": { "ingress": [{ "ip": "192.0.2.2" }] } }),
            FromWrite,
        ),
        case(
            "/apis/storage.k8s.io/v1/volumeattachments",
            json!({ "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": { "name": "s-va" }, "spec": { "attacher": "csi.example.com", "nodeName": "n1", "source": { "persistentVolumeName": "pv1" } } }),
            ("spec", "nodeName", json!("n2")),
            json!({ "attached": true, "attachmentMetadata": { "k": "v" } }),
            KeepAll,
        ),
        case(
            "/apis/certificates.k8s.io/v1/certificatesigningrequests",
            json!({ "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": { "name": "s-csr" }, "spec": { "request": request, "signerName": "example.com/signer", "usages": ["client auth"] } }),
            ("spec", "signerName", json!("example.com/other")),
            json!({ "conditions": [{ "type": "Failed", "status": "True", "reason": "R", "message": "m" }] }),
            FromWrite,
        ),
        case(
            "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
            json!({ "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": { "name": "s-fs" }, "spec": { "priorityLevelConfiguration": { "name": "global-default" }, "matchingPrecedence": 5000 } }),
            ("spec", "matchingPrecedence", json!(6000)),
            json!({ "conditions": [{ "type": "Dangling", "status": "False", "reason": "Found", "message": "m" }] }),
            KeepAll,
        ),
        // A condition the availability controller leaves alone (it owns `Available`).
        case(
            "/apis/apiregistration.k8s.io/v1/apiservices",
            json!({ "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": { "name": "v1.s.example.com" }, "spec": { "group": "s.example.com", "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 10 } }),
            ("spec", "versionPriority", json!(20)),
            json!({ "conditions": [{ "type": "Available", "status": "True", "reason": "Local", "message": "Local APIServices are always available" }, { "type": "X", "status": "True" }] }),
            KeepAll,
        ),
        case(
            "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations",
            json!({ "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration", "metadata": { "name": "s-plc" }, "spec": { "type": "Limited", "limited": { "nominalConcurrencyShares": 5, "limitResponse": { "type": "Reject" } } } }),
            ("spec", "type", json!("Exempt")),
            json!({ "conditions": [{ "type": "X", "status": "True" }] }),
            KeepAll,
        ),
    ]
}

/// `group/version/resource` of a case, as discovery names its status subresource.
fn gvr(path: &str) -> String {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (gv, rest) = if parts[0] == "api" {
        (parts[1].to_string(), &parts[2..])
    } else {
        (format!("{}/{}", parts[1], parts[2]), &parts[3..])
    };
    format!("{gv}/{}", rest.last().unwrap())
}

/// Whether `actual` holds everything `expected` does (objects by key, lists item by item).
fn contains(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            e.iter().all(|(k, v)| a.get(k).is_some_and(|x| contains(v, x)))
        }
        (Value::Array(e), Value::Array(a)) => {
            e.len() == a.len() && e.iter().zip(a).all(|(x, y)| contains(x, y))
        }
        (e, a) => e == a,
    }
}

/// Every `<resource>/status` discovery lists, as `group/version/resource`.
fn status_subresources(api: &KubeApiserver) -> Vec<String> {
    let mut gvs = vec!["v1".to_string()];
    let (_, groups) = call(api, "GET", "/apis", "application/json", None);
    for g in groups["groups"].as_array().unwrap() {
        for v in g["versions"].as_array().unwrap() {
            gvs.push(v["groupVersion"].as_str().unwrap().to_string());
        }
    }
    let mut out = Vec::new();
    for gv in gvs {
        let path = if gv == "v1" { "/api/v1".to_string() } else { format!("/apis/{gv}") };
        let (_, list) = call(api, "GET", &path, "application/json", None);
        for r in list["resources"].as_array().unwrap() {
            if let Some(res) = r["name"].as_str().unwrap().strip_suffix("/status") {
                out.push(format!("{gv}/{res}"));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn status_writes_are_status_writes() {
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(&etcd.endpoint(), &[]);
    let csr_pem = {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, "status-e2e");
        params.serialize_request(&key).unwrap().pem().unwrap()
    };
    let cases = cases(&csr_pem);

    let mut covered: Vec<String> = cases.iter().map(|c| gvr(c.path)).collect();
    // CRDs: their controller writes status and finalizers right after a create, which
    // races this test's writes; apiserver_crds.rs checks their status strategy.
    covered.push("apiextensions.k8s.io/v1/customresourcedefinitions".to_string());
    covered.sort();
    assert_eq!(status_subresources(&api), covered, "every status subresource served has a case here");

    ok(
        &api,
        "POST",
        "/api/v1/namespaces",
        Some(&json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": NS } })),
    );
    for c in &cases {
        let collection = c.path.replace("{ns}", NS);
        let name = c.object["metadata"]["name"].as_str().unwrap();
        let what = gvr(c.path);
        let mut obj = c.object.clone();
        obj["metadata"]["labels"] = json!({ "l": "1" });
        obj["metadata"]["annotations"] = json!({ "a": "1" });
        let created = ok(&api, "POST", &collection, Some(&obj));
        let (section, field, value) = &c.spec;
        let stored_spec = created[*section][*field].clone();
        let path = format!("{collection}/{name}");

        // PUT /status carrying a changed spec, metadata and status.
        let mut write = created.clone();
        write[*section][*field] = value.clone();
        let mut status = created["status"].as_object().cloned().unwrap_or_default();
        status.extend(c.status.as_object().unwrap().clone());
        write["status"] = Value::Object(status);
        write["metadata"]["labels"] = json!({ "l": "2" });
        write["metadata"]["annotations"] = json!({ "a": "2" });
        write["metadata"]["finalizers"] = json!(["example.com/f"]);
        let answered = ok(&api, "PUT", &format!("{path}/status"), Some(&write));
        let got = ok(&api, "GET", &path, None);
        assert_eq!(answered["metadata"]["resourceVersion"], got["metadata"]["resourceVersion"], "{what}");
        assert_eq!(got[*section][*field], stored_spec, "{what}: a status write changed {section}.{field}");
        assert!(contains(&c.status, &got["status"]), "{what}: status not applied: {}", got["status"]);
        let m = &got["metadata"];
        let (labels, annotations, finalizers) = match c.meta {
            Meta::FromWrite => ("2", "2", json!(["example.com/f"])),
            Meta::KeepLabels => ("1", "2", json!(["example.com/f"])),
            Meta::KeepAll => ("1", "1", Value::Null),
        };
        assert_eq!(m["labels"]["l"], labels, "{what}: labels after a status write: {m}");
        assert_eq!(m["annotations"]["a"], annotations, "{what}: annotations after a status write: {m}");
        assert_eq!(m["finalizers"], finalizers, "{what}: finalizers after a status write: {m}");

        // A merge patch of /status that touches the spec changes nothing there either.
        let patch = json!({ *section: { *field: value } });
        ok(&api, "PATCH", &format!("{path}/status"), Some(&patch));
        let got = ok(&api, "GET", &path, None);
        assert_eq!(got[*section][*field], stored_spec, "{what}: a status patch changed {section}.{field}");

        // A write of the main resource keeps the stored status.
        let mut main = got.clone();
        main["status"] = json!({});
        main["metadata"]["labels"] = json!({ "l": "3" });
        let updated = ok(&api, "PUT", &path, Some(&main));
        assert_eq!(updated["metadata"]["labels"]["l"], "3", "{what}");
        let after = ok(&api, "GET", &path, None);
        assert_eq!(after["status"], got["status"], "{what}: an update of the main resource changed status");
    }
}
