//! The built-in API surface beyond the common resources, driven with kubectl and curl as
//! upstream's components and users drive it: CertificateSigningRequests with `kubectl
//! certificate approve/deny`, HorizontalPodAutoscalers in autoscaling/v1 and v2 over one
//! storage, the storage.k8s.io CSI objects, `componentstatuses`, `bindings`, verbs a
//! resource does not serve, and the `kube-system/extension-apiserver-authentication`
//! ConfigMap with the front-proxy (`--requestheader-*`) authenticator it describes.

use std::process::Command;
use std::time::Duration;

use e2e::apiserver::{ADMIN_TOKEN, KubeApiserver};
use e2e::certs::{ClientCert, Credential, Kubeconfig, TestCa};
use e2e::{Etcd, EtcdOptions, json, wait_for};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(100);

/// curl as the admin (or with a client certificate and extra headers instead).
fn curl(
    api: &KubeApiserver,
    method: &str,
    path: &str,
    body: Option<&Value>,
    cert: Option<&ClientCert>,
    headers: &[&str],
) -> (u16, Value) {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Command::new("curl");
    c.args(["-sk", "--max-time", "30", "-o"]).arg(dir.path().join("body")).args([
        "-w",
        "%{http_code}",
        "-X",
        method,
    ]);
    match cert {
        Some(cert) => {
            c.arg("--cert").arg(&cert.cert).arg("--key").arg(&cert.key);
        }
        None => {
            c.arg("-H").arg(format!("Authorization: Bearer {ADMIN_TOKEN}"));
        }
    }
    for h in headers {
        c.args(["-H", h]);
    }
    c.args(["-H", "Content-Type: application/json"]).arg(format!("{}{path}", api.url()));
    if let Some(b) = body {
        let f = dir.path().join("req");
        std::fs::write(&f, b.to_string()).unwrap();
        c.arg("--data-binary").arg(format!("@{}", f.display()));
    }
    let out = c.output().expect("curl");
    let code = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0);
    let text = std::fs::read_to_string(dir.path().join("body")).unwrap_or_default();
    (code, if text.trim().is_empty() { Value::Null } else { json(&text) })
}

/// Runs kubectl as the admin expecting failure; its stderr.
fn kubectl_err(api: &KubeApiserver, args: &[&str]) -> String {
    let out = api.kubectl(args);
    assert!(!out.status.success(), "kubectl {args:?} succeeded: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn apply(api: &KubeApiserver, manifest: &str) {
    let out = api.kubectl_stdin(&["apply", "-f", "-"], manifest);
    assert!(out.status.success(), "apply: {}\n{manifest}", String::from_utf8_lossy(&out.stderr));
}

fn csr_request(cn: &str) -> String {
    use base64::Engine;
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, cn);
    base64::engine::general_purpose::STANDARD.encode(params.serialize_request(&key).unwrap().pem().unwrap())
}

fn csr_manifest(name: &str) -> String {
    format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: {name}\nspec:\n  request: {}\n  signerName: example.com/signer\n  usages: [client auth]\n  username: someone-else\n  groups: [system:masters]\n",
        csr_request(name)
    )
}

#[test]
fn api_surface() {
    let client_ca = TestCa::new("e2e client CA");
    let front_proxy_ca = TestCa::new("e2e front-proxy CA");
    let etcd = Etcd::start(EtcdOptions::default());
    let flags = [
        format!("--client-ca-file={}", client_ca.cert.display()),
        format!("--requestheader-client-ca-file={}", front_proxy_ca.cert.display()),
        "--requestheader-allowed-names=front-proxy-client".to_string(),
        "--requestheader-username-headers=X-Remote-User".to_string(),
        "--requestheader-group-headers=X-Remote-Group".to_string(),
        "--requestheader-extra-headers-prefix=X-Remote-Extra-".to_string(),
        "--authorization-mode=Node,RBAC".to_string(),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let api = KubeApiserver::start(&etcd.endpoint(), &flags);
    let dir = tempfile::tempdir().unwrap();

    // --- extension-apiserver-authentication: published at start, as upstream writes it.
    let cm_path = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication";
    let cm = wait_for("the extension-apiserver-authentication configmap", WAIT, POLL, || {
        let (code, cm) = curl(&api, "GET", cm_path, None, None, &[]);
        (code == 200).then_some(cm)
    });
    let data = &cm["data"];
    assert_eq!(data["requestheader-username-headers"], "[\"X-Remote-User\"]", "{cm}");
    assert_eq!(data["requestheader-group-headers"], "[\"X-Remote-Group\"]");
    assert_eq!(data["requestheader-extra-headers-prefix"], "[\"X-Remote-Extra-\"]");
    assert_eq!(data["requestheader-allowed-names"], "[\"front-proxy-client\"]");
    let der_of = |pem: &str| pem.lines().filter(|l| !l.starts_with("-----")).collect::<String>();
    assert_eq!(der_of(data["client-ca-file"].as_str().unwrap()), der_of(&client_ca.pem()));
    assert_eq!(der_of(data["requestheader-client-ca-file"].as_str().unwrap()), der_of(&front_proxy_ca.pem()));
    // Kept current: a change is undone, a deletion recreated.
    let mut edited = cm.clone();
    edited["data"]["requestheader-allowed-names"] = json!("[\"mallory\"]");
    edited["data"].as_object_mut().unwrap().remove("client-ca-file");
    assert_eq!(curl(&api, "PUT", cm_path, Some(&edited), None, &[]).0, 200);
    wait_for("the edited configmap to be restored", WAIT, POLL, || {
        let (_, now) = curl(&api, "GET", cm_path, None, None, &[]);
        let allowed = now["data"]["requestheader-allowed-names"].as_str().unwrap_or_default().to_string();
        // Merged as upstream merges: what was published stays, this server's names join.
        (allowed == "[\"mallory\",\"front-proxy-client\"]" && now["data"]["client-ca-file"].is_string())
            .then_some(())
    });
    assert_eq!(curl(&api, "DELETE", cm_path, None, None, &[]).0, 200);
    wait_for("the deleted configmap to come back", WAIT, POLL, || {
        let (code, now) = curl(&api, "GET", cm_path, None, None, &[]);
        (code == 200 && now["data"]["requestheader-allowed-names"] == "[\"front-proxy-client\"]")
            .then_some(())
    });
    // Readable by the components that delegate authentication, as upstream's bootstrap
    // policy grants (the extension-apiserver-authentication-reader Role).
    for (who, can) in
        [("system:kube-scheduler", "yes"), ("system:kube-controller-manager", "yes"), ("bob", "no")]
    {
        let out = api.kubectl(&[
            "auth",
            "can-i",
            "get",
            "configmaps/extension-apiserver-authentication",
            "-n",
            "kube-system",
            "--as",
            who,
        ]);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), can, "{who}");
    }

    // --- The front proxy: a certificate from the request-header CA with an allowed name
    // vouches for the user in X-Remote-* headers.
    let review = json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview" });
    let ssr = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
    let proxy = front_proxy_ca.client_cert("front-proxy-client", None);
    let (code, me) = curl(
        &api,
        "POST",
        ssr,
        Some(&review),
        Some(&proxy),
        &["X-Remote-User: alice", "X-Remote-Group: devs", "X-Remote-Extra-Scopes: s1"],
    );
    assert_eq!(code, 201, "{me}");
    let info = &me["status"]["userInfo"];
    assert_eq!(info["username"], "alice", "{me}");
    assert_eq!(info["groups"], json!(["devs", "system:authenticated"]));
    assert_eq!(info["extra"]["scopes"], json!(["s1"]));
    // A name not allowed, or no user header, is not believed (and the front-proxy CA is
    // no client CA): 401.
    let stranger = front_proxy_ca.client_cert("someone", None);
    assert_eq!(curl(&api, "POST", ssr, Some(&review), Some(&stranger), &["X-Remote-User: alice"]).0, 401);
    assert_eq!(curl(&api, "POST", ssr, Some(&review), Some(&proxy), &[]).0, 401);
    // A client certificate still authenticates as itself; its headers mean nothing.
    let carol = client_ca.client_cert("carol", None);
    let (code, me) = curl(&api, "POST", ssr, Some(&review), Some(&carol), &["X-Remote-User: alice"]);
    assert_eq!((code, me["status"]["userInfo"]["username"].as_str()), (201, Some("carol")), "{me}");

    // --- CertificateSigningRequests: the requester is who asked; approval through the
    // approval subresource (kubectl certificate approve/deny), the certificate through status.
    let bob_cert = client_ca.client_cert("bob", Some("devs"));
    let bob = Kubeconfig::write(&api, dir.path(), "bob", Credential::Cert(&bob_cert));
    api.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "bob-csr",
        "--clusterrole=system:node-bootstrapper",
        "--user=bob",
    ]);
    let out = bob
        .kubectl_cmd(&["create", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(csr_manifest("bob-csr").as_bytes()).unwrap();
            c.wait_with_output().unwrap()
        })
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let csr = json(&api.kubectl_ok(&["get", "csr", "bob-csr", "-o", "json"]));
    assert_eq!(csr["spec"]["username"], "bob", "{csr}");
    assert_eq!(csr["spec"]["groups"], json!(["devs", "system:authenticated"]));
    let row = api.kubectl_ok(&["get", "csr", "bob-csr", "--no-headers"]);
    assert!(row.contains("example.com/signer") && row.contains("bob") && row.contains("Pending"), "{row}");
    // Bob may not approve his own request (no update on the approval subresource).
    let err = bob.kubectl_err(&["certificate", "approve", "bob-csr"]);
    assert!(err.contains("forbidden"), "{err}");
    api.kubectl_ok(&["certificate", "approve", "bob-csr"]);
    let csr = json(&api.kubectl_ok(&["get", "csr", "bob-csr", "-o", "json"]));
    let condition = &csr["status"]["conditions"][0];
    assert_eq!(
        (condition["type"].as_str(), condition["reason"].as_str()),
        (Some("Approved"), Some("KubectlApprove")),
        "{csr}"
    );
    assert!(condition["lastUpdateTime"].is_string() && condition["lastTransitionTime"].is_string(), "{csr}");
    // A signer writes the certificate through status; status may not add approval.
    let cert_pem = client_ca.pem();
    use base64::Engine;
    let mut issued = csr.clone();
    issued["status"]["certificate"] = json!(base64::engine::general_purpose::STANDARD.encode(&cert_pem));
    let csr_path = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let (code, out) = curl(&api, "PUT", &format!("{csr_path}/bob-csr/status"), Some(&issued), None, &[]);
    assert_eq!(code, 200, "{out}");
    let row = api.kubectl_ok(&["get", "csr", "bob-csr", "--no-headers"]);
    assert!(row.contains("Approved,Issued"), "{row}");
    let mut changed = out.clone();
    changed["status"]["certificate"] =
        json!(base64::engine::general_purpose::STANDARD.encode(front_proxy_ca.pem()));
    let (code, out) = curl(&api, "PUT", &format!("{csr_path}/bob-csr/status"), Some(&changed), None, &[]);
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"]
            .as_str()
            .unwrap()
            .contains("status.certificate: Forbidden: updates may not modify existing certificate content"),
        "{out}"
    );
    // Deny another; approving it then is refused (Approved and Denied exclude each other).
    apply(&api, &csr_manifest("other-csr"));
    api.kubectl_ok(&["certificate", "deny", "other-csr"]);
    let row = api.kubectl_ok(&["get", "csr", "other-csr", "--no-headers"]);
    assert!(row.contains("Denied"), "{row}");
    let err = kubectl_err(&api, &["certificate", "approve", "other-csr", "--force"]);
    assert!(err.contains("is already Denied"), "{err}");
    // The server refuses it too, whoever asks.
    let mut both = json(&api.kubectl_ok(&["get", "csr", "other-csr", "-o", "json"]));
    both["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "type": "Approved", "status": "True" }));
    let (code, out) = curl(&api, "PUT", &format!("{csr_path}/other-csr/approval"), Some(&both), None, &[]);
    assert_eq!(code, 422, "{out}");
    assert!(
        out["message"].as_str().unwrap().contains("Approved and Denied conditions are mutually exclusive"),
        "{out}"
    );
    // Upstream's validation of the request itself.
    let bad = json!({ "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": { "name": "bad" },
        "spec": { "request": "anVuaw==", "signerName": "nope", "usages": ["client auth"] } });
    let (code, out) = curl(&api, "POST", csr_path, Some(&bad), None, &[]);
    assert_eq!(code, 422);
    let msg = out["message"].as_str().unwrap();
    assert!(msg.contains("spec.request: Invalid value: []byte{0x6a, 0x75, 0x6e, 0x6b}: PEM block type must be CERTIFICATE REQUEST"), "{msg}");
    assert!(msg.contains("spec.signerName: Invalid value: \"nope\": must be a fully qualified domain and path of the form 'example.com/signer-name'"), "{msg}");
    let only = api.kubectl_ok(&[
        "get",
        "csr",
        "--field-selector",
        "spec.signerName=example.com/signer",
        "-o",
        "name",
    ]);
    assert_eq!(only.lines().count(), 2, "{only}");

    // --- HorizontalPodAutoscalers: one object, both versions.
    apply(
        &api,
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: web\n  namespace: default\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n  maxReplicas: 5\n  metrics:\n  - type: Resource\n    resource: {name: cpu, target: {type: Utilization, averageUtilization: 60}}\n  - type: Resource\n    resource: {name: memory, target: {type: AverageValue, averageValue: 100Mi}}\n",
    );
    let v1 = json(&api.kubectl_ok(&["get", "horizontalpodautoscalers.v1.autoscaling", "web", "-o", "json"]));
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 60, "{v1}");
    assert_eq!(v1["spec"]["minReplicas"], 1);
    assert_eq!(
        v1["metadata"]["annotations"]["autoscaling.alpha.kubernetes.io/metrics"],
        r#"[{"type":"Resource","resource":{"name":"memory","targetAverageValue":"100Mi"}}]"#
    );
    // A v1 write that keeps the annotation keeps the other metrics; the CPU target changes.
    let mut v1w = v1.clone();
    v1w["spec"]["targetCPUUtilizationPercentage"] = json!(70);
    let (code, out) = curl(
        &api,
        "PUT",
        "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers/web",
        Some(&v1w),
        None,
        &[],
    );
    assert_eq!(code, 200, "{out}");
    let v2 = json(&api.kubectl_ok(&["get", "horizontalpodautoscalers.v2.autoscaling", "web", "-o", "json"]));
    let metrics = v2["spec"]["metrics"].as_array().unwrap();
    assert_eq!(metrics.len(), 2, "{v2}");
    assert!(metrics.iter().any(|m| m["resource"]["name"] == "memory"));
    assert!(metrics.iter().any(|m| m["resource"]["target"]["averageUtilization"] == 70));
    assert!(
        v2["metadata"]
            .get("annotations")
            .is_none_or(|a| a.get("autoscaling.alpha.kubernetes.io/metrics").is_none()),
        "{v2}"
    );
    // A bare v1 object gets the implicit 80% CPU target.
    apply(
        &api,
        "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: bare\n  namespace: default\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n  maxReplicas: 3\n",
    );
    let row = api.kubectl_ok(&["get", "hpa", "bare", "--no-headers"]);
    assert!(row.contains("Deployment/web") && row.contains("cpu: <unknown>/80%"), "{row}");

    // --- storage.k8s.io: what the scheduler and kubelet list and watch.
    apply(
        &api,
        "apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata: {name: csi.example.com}\nspec: {}\n---\napiVersion: storage.k8s.io/v1\nkind: CSINode\nmetadata: {name: n1}\nspec:\n  drivers: [{name: csi.example.com, nodeID: n1, topologyKeys: [topology.example.com/zone]}]\n---\napiVersion: storage.k8s.io/v1\nkind: CSIStorageCapacity\nmetadata: {name: cap, namespace: default}\nstorageClassName: fast\ncapacity: 10Gi\n---\napiVersion: storage.k8s.io/v1\nkind: VolumeAttachment\nmetadata: {name: va}\nspec: {attacher: csi.example.com, nodeName: n1, source: {persistentVolumeName: pv1}}\n",
    );
    let driver = json(&api.kubectl_ok(&["get", "csidriver", "csi.example.com", "-o", "json"]));
    assert_eq!(driver["spec"]["attachRequired"], true);
    assert_eq!(driver["spec"]["volumeLifecycleModes"], json!(["Persistent"]));
    assert_eq!(driver["spec"]["fsGroupPolicy"], "ReadWriteOnceWithFSType");
    let row = api.kubectl_ok(&["get", "volumeattachment", "va", "--no-headers"]);
    assert!(row.contains("csi.example.com") && row.contains("pv1") && row.contains("n1"), "{row}");
    let err = kubectl_err(
        &api,
        &["patch", "volumeattachment", "va", "--type=merge", "-p", "{\"spec\":{\"nodeName\":\"n2\"}}"],
    );
    assert!(err.contains("field is immutable"), "{err}");
    for kind in ["csinodes", "csistoragecapacities", "csidrivers"] {
        let names = api.kubectl_ok(&["get", kind, "-A", "-o", "name"]);
        assert_eq!(names.lines().count(), 1, "{kind}: {names}");
    }

    // --- componentstatuses: probed on read.
    let cs = api.kubectl_ok(&["get", "componentstatuses"]);
    let etcd_row = cs.lines().find(|l| l.starts_with("etcd-0")).unwrap_or_else(|| panic!("{cs}"));
    assert!(etcd_row.contains("Healthy") && etcd_row.contains("ok"), "{cs}");
    assert!(cs.contains("scheduler") && cs.contains("controller-manager"), "{cs}");
    let (code, _) = curl(&api, "GET", "/api/v1/componentstatuses/nope", None, None, &[]);
    assert_eq!(code, 500);
    let (code, out) = curl(&api, "GET", "/api/v1/componentstatuses?watch=true", None, None, &[]);
    assert_eq!((code, out["reason"].as_str()), (405, Some("MethodNotAllowed")), "{out}");

    // --- bindings: the body names the pod.
    apply(
        &api,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec:\n  containers: [{name: c, image: busybox}]\n",
    );
    let binding = json!({ "apiVersion": "v1", "kind": "Binding", "metadata": { "name": "p" }, "target": { "kind": "Node", "name": "n1" } });
    let (code, out) = curl(&api, "POST", "/api/v1/namespaces/default/bindings", Some(&binding), None, &[]);
    assert_eq!(code, 201, "{out}");
    let pod = json(&api.kubectl_ok(&["get", "pod", "p", "-o", "json"]));
    assert_eq!(pod["spec"]["nodeName"], "n1");

    // --- A verb the resource does not serve: 405, as upstream's missing route.
    let (code, out) = curl(&api, "DELETE", "/api/v1/namespaces", None, None, &[]);
    assert_eq!((code, out["reason"].as_str()), (405, Some("MethodNotAllowed")), "{out}");
}
