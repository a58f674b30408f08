//! The API server's REST semantics, checked over the wire with curl: conflicts, bad input,
//! watch windows and bookmarks, subresources, selectors, health, metrics and limits.

use std::process::Command;
use std::time::Duration;

use e2e::apiserver::{ADMIN_TOKEN, KubeApiserver};
use e2e::{Etcd, EtcdOptions, json, wait_for};

/// One HTTP request with curl; (status, body).
fn curl(
    api: &KubeApiserver,
    method: &str,
    path: &str,
    content_type: &str,
    body: Option<&[u8]>,
) -> (u16, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Command::new("curl");
    c.args(["-sk", "-o"])
        .arg(dir.path().join("body"))
        .args(["-w", "%{http_code}", "-X", method, "-H"])
        .arg(format!("Authorization: Bearer {ADMIN_TOKEN}"))
        .args(["-H", &format!("Content-Type: {content_type}")])
        .arg(format!("{}{path}", api.url()));
    if let Some(b) = body {
        let f = dir.path().join("req");
        std::fs::write(&f, b).unwrap();
        c.arg("--data-binary").arg(format!("@{}", f.display()));
    }
    let out = c.output().expect("curl");
    let code = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0);
    let body = std::fs::read_to_string(dir.path().join("body")).unwrap_or_default();
    (code, body)
}

fn post_json(api: &KubeApiserver, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    let (code, text) = curl(api, "POST", path, "application/json", Some(body.to_string().as_bytes()));
    (code, json(&text))
}

fn put_json(api: &KubeApiserver, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let (code, text) = curl(api, "PUT", path, "application/json", Some(body.to_string().as_bytes()));
    (code, json(&text))
}

fn get_json(api: &KubeApiserver, path: &str) -> (u16, serde_json::Value) {
    let (code, text) = curl(api, "GET", path, "application/json", None);
    (code, json(&text))
}

fn cm(name: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

#[test]
fn rest_semantics() {
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(&etcd.endpoint(), &[]);

    // Default namespaces, built-in priority classes and the kubernetes service exist.
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert_eq!(get_json(&api, &format!("/api/v1/namespaces/{ns}")).0, 200, "{ns}");
    }
    for pc in ["system-node-critical", "system-cluster-critical"] {
        assert_eq!(get_json(&api, &format!("/apis/scheduling.k8s.io/v1/priorityclasses/{pc}")).0, 200);
    }
    let (_, svc) = get_json(&api, "/api/v1/namespaces/default/services/kubernetes");
    assert_eq!(svc["spec"]["clusterIP"], "10.0.0.1");
    let (_, ep) = get_json(&api, "/api/v1/namespaces/default/endpoints/kubernetes");
    assert_eq!(ep["subsets"][0]["addresses"][0]["ip"], api.ip.to_string());

    // Create; resourceVersion is etcd's mod_revision.
    let (code, obj) = post_json(&api, "/api/v1/namespaces/default/configmaps", cm("a"));
    assert_eq!(code, 201, "{obj}");
    let rv = obj["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let key = etcd.etcdctl_ok(&["get", "/registry/configmaps/default/a", "-w", "json"]);
    assert_eq!(json(&key)["kvs"][0]["mod_revision"].as_u64().unwrap().to_string(), rv);
    assert!(obj["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36));
    assert!(obj["metadata"]["creationTimestamp"].is_string());
    // A second create: 409 AlreadyExists.
    let (code, st) = post_json(&api, "/api/v1/namespaces/default/configmaps", cm("a"));
    assert_eq!((code, st["reason"].as_str()), (409, Some("AlreadyExists")), "{st}");

    // Update with a stale resourceVersion: 409 Conflict; with the current one: 200.
    let mut upd = obj.clone();
    upd["data"]["k"] = "v2".into();
    let (code, newer) = put_json(&api, "/api/v1/namespaces/default/configmaps/a", &upd);
    assert_eq!(code, 200, "{newer}");
    let (code, st) = put_json(&api, "/api/v1/namespaces/default/configmaps/a", &upd);
    assert_eq!((code, st["reason"].as_str()), (409, Some("Conflict")), "{st}");
    assert!(st["message"].as_str().unwrap().contains("the object has been modified"), "{st}");

    // generateName.
    let (code, g) = post_json(
        &api,
        "/api/v1/namespaces/default/configmaps",
        serde_json::json!({"metadata": {"generateName": "gen-"}}),
    );
    assert_eq!(code, 201);
    assert!(
        g["metadata"]["name"].as_str().unwrap().starts_with("gen-")
            && g["metadata"]["name"].as_str().unwrap().len() == 9
    );

    // Validation: 422 Invalid naming each field.
    let (code, st) = post_json(
        &api,
        "/api/v1/namespaces/default/configmaps",
        serde_json::json!({"metadata": {"name": "Bad_Name", "labels": {"-x": "y"}}}),
    );
    assert_eq!((code, st["reason"].as_str()), (422, Some("Invalid")), "{st}");
    let fields: Vec<&str> =
        st["details"]["causes"].as_array().unwrap().iter().filter_map(|c| c["field"].as_str()).collect();
    assert!(
        fields.contains(&"metadata.name") && fields.iter().any(|f| f.starts_with("metadata.labels")),
        "{st}"
    );
    let (code, st) = post_json(
        &api,
        "/apis/apps/v1/namespaces/default/deployments",
        serde_json::json!({"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "c"}}, "spec": {"containers": []}}}}),
    );
    assert_eq!(code, 422, "{st}");
    let msg = st["message"].as_str().unwrap();
    assert!(
        msg.contains("spec.template.metadata.labels") && msg.contains("spec.template.spec.containers"),
        "{msg}"
    );

    // Missing namespace: 404; namespace mismatch: 400.
    let (code, st) = post_json(&api, "/api/v1/namespaces/nope/configmaps", cm("x"));
    assert_eq!((code, st["reason"].as_str()), (404, Some("NotFound")), "{st}");
    let mut other = cm("x");
    other["metadata"]["namespace"] = "kube-system".into();
    let (code, st) = post_json(&api, "/api/v1/namespaces/default/configmaps", other);
    assert_eq!((code, st["reason"].as_str()), (400, Some("BadRequest")), "{st}");

    // Bad input: malformed bodies, unknown resources, oversized requests.
    let (code, text) = curl(
        &api,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        "application/json",
        Some(b"{\"metadata\":"),
    );
    assert_eq!(code, 400, "{text}");
    let (code, _) = curl(
        &api,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        "application/yaml",
        Some(b"metadata: [unclosed"),
    );
    assert_eq!(code, 400);
    let (code, _) = curl(
        &api,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        "application/vnd.kubernetes.protobuf",
        Some(b"k8s\x00\xff\xff\xff"),
    );
    assert_eq!(code, 400);
    assert_eq!(get_json(&api, "/apis/nope.example.com/v1/widgets").0, 404);
    assert_eq!(get_json(&api, "/api/v1/widgets").0, 404);
    // A body over the 3 MiB request limit: 413. Sent by kubectl (HTTP/2): curl 7.88 drops an
    // HTTP/2 response that arrives before it finished uploading.
    let big = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"k": "x".repeat(4 << 20)}});
    let out = api.kubectl_stdin(&["create", "-f", "-"], &big.to_string());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("(RequestEntityTooLarge)") && stderr.contains("limit is 3145728"), "{stderr}");
    // An object under the request limit but over etcd's request size: a clean error, nothing written.
    // (A ConfigMap is capped at 1 MiB by validation; Endpoints have no such cap.)
    let addresses: Vec<_> = (0..100_000)
        .map(|i| serde_json::json!({"ip": format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255)}))
        .collect();
    let large = serde_json::json!({"metadata": {"name": "large"}, "subsets": [{"addresses": addresses, "ports": [{"port": 80}]}]});
    let (code, text) = curl(
        &api,
        "POST",
        "/api/v1/namespaces/default/endpoints",
        "application/json",
        Some(large.to_string().as_bytes()),
    );
    assert!(code == 413 || code == 422 || code == 500, "{code} {text}");
    assert!(
        json(&text)["message"].as_str().unwrap_or_default().to_lowercase().contains("too large"),
        "{text}"
    );
    assert_eq!(get_json(&api, "/api/v1/namespaces/default/endpoints/large").0, 404);

    // Status subresource: updates to the main resource ignore status and vice versa.
    let dep = serde_json::json!({"metadata": {"name": "web"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let (code, d) = post_json(&api, "/apis/apps/v1/namespaces/default/deployments", dep);
    assert_eq!(code, 201, "{d}");
    assert_eq!(d["metadata"]["generation"], 1);
    let mut with_status = d.clone();
    with_status["status"] = serde_json::json!({"replicas": 7});
    let (_, d2) = put_json(&api, "/apis/apps/v1/namespaces/default/deployments/web", &with_status);
    assert!(d2["status"]["replicas"].is_null(), "status ignored on the main resource: {d2}");
    let mut st_upd = d2.clone();
    st_upd["status"] = serde_json::json!({"replicas": 7});
    st_upd["spec"]["replicas"] = 5.into();
    let (code, d3) = put_json(&api, "/apis/apps/v1/namespaces/default/deployments/web/status", &st_upd);
    assert_eq!(code, 200, "{d3}");
    assert_eq!(d3["status"]["replicas"], 7);
    assert_eq!(d3["spec"]["replicas"], 1, "spec ignored on /status");
    assert_eq!(d3["metadata"]["generation"], 1);
    // Scale subresource; a spec change bumps generation.
    let (code, scale) = get_json(&api, "/apis/apps/v1/namespaces/default/deployments/web/scale");
    assert_eq!((code, scale["kind"].as_str()), (200, Some("Scale")));
    assert_eq!(scale["status"]["selector"], "a=b");
    let (code, text) = curl(
        &api,
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/web/scale",
        "application/merge-patch+json",
        Some(br#"{"spec":{"replicas":4}}"#),
    );
    assert_eq!(code, 200, "{text}");
    let (_, d4) = get_json(&api, "/apis/apps/v1/namespaces/default/deployments/web");
    assert_eq!(d4["spec"]["replicas"], 4);
    assert_eq!(d4["metadata"]["generation"], 2);
    // Immutable selector.
    let mut sel = d4.clone();
    sel["spec"]["selector"]["matchLabels"]["a"] = "z".into();
    sel["spec"]["template"]["metadata"]["labels"]["a"] = "z".into();
    let (code, st) = put_json(&api, "/apis/apps/v1/namespaces/default/deployments/web", &sel);
    assert_eq!(code, 422, "{st}");
    assert!(st["message"].as_str().unwrap().contains("field is immutable"), "{st}");

    // JSON patch and merge patch.
    let (code, text) = curl(
        &api,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/a",
        "application/json-patch+json",
        Some(br#"[{"op":"add","path":"/data/j","value":"jp"},{"op":"test","path":"/data/k","value":"v2"}]"#),
    );
    assert_eq!(code, 200, "{text}");
    assert_eq!(json(&text)["data"]["j"], "jp");
    let (code, _) = curl(
        &api,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/a",
        "application/json-patch+json",
        Some(br#"[{"op":"test","path":"/data/k","value":"wrong"}]"#),
    );
    assert_eq!(code, 422);

    // Pods: binding, unbound pods deleted at once, bound pods gracefully.
    let pod = |n: &str| serde_json::json!({"metadata": {"name": n}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    assert_eq!(post_json(&api, "/api/v1/namespaces/default/pods", pod("unbound")).0, 201);
    let (code, _) = curl(&api, "DELETE", "/api/v1/namespaces/default/pods/unbound", "application/json", None);
    assert_eq!(code, 200);
    assert_eq!(get_json(&api, "/api/v1/namespaces/default/pods/unbound").0, 404);
    assert_eq!(post_json(&api, "/api/v1/namespaces/default/pods", pod("bound")).0, 201);
    let (code, st) = post_json(
        &api,
        "/api/v1/namespaces/default/pods/bound/binding",
        serde_json::json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "bound"}, "target": {"kind": "Node", "name": "n1"}}),
    );
    assert_eq!(code, 201, "{st}");
    let (_, p) = get_json(&api, "/api/v1/namespaces/default/pods/bound");
    assert_eq!(p["spec"]["nodeName"], "n1");
    let (code, st) = post_json(
        &api,
        "/api/v1/namespaces/default/pods/bound/binding",
        serde_json::json!({"metadata": {"name": "bound"}, "target": {"kind": "Node", "name": "n2"}}),
    );
    assert_eq!(code, 409, "binding twice: {st}");
    let (_, by_node) = get_json(&api, "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1");
    assert_eq!(by_node["items"].as_array().unwrap().len(), 1);
    let (code, _) = curl(&api, "DELETE", "/api/v1/namespaces/default/pods/bound", "application/json", None);
    assert_eq!(code, 200);
    let (_, p) = get_json(&api, "/api/v1/namespaces/default/pods/bound");
    assert_eq!(p["metadata"]["deletionGracePeriodSeconds"], 30, "bound pods wait for the kubelet");
    let (code, _) = curl(
        &api,
        "DELETE",
        "/api/v1/namespaces/default/pods/bound",
        "application/json",
        Some(br#"{"gracePeriodSeconds":0}"#),
    );
    assert_eq!(code, 200);
    assert_eq!(get_json(&api, "/api/v1/namespaces/default/pods/bound").0, 404);

    // Services: distinct cluster IPs and node ports, released on delete.
    let svc = |n: &str| serde_json::json!({"metadata": {"name": n}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}});
    let (_, s1) = post_json(&api, "/api/v1/namespaces/default/services", svc("s1"));
    let (_, s2) = post_json(&api, "/api/v1/namespaces/default/services", svc("s2"));
    assert_ne!(s1["spec"]["clusterIP"], s2["spec"]["clusterIP"]);
    assert_ne!(s1["spec"]["ports"][0]["nodePort"], s2["spec"]["ports"][0]["nodePort"]);
    let np = s1["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
    assert!((30000..=32767).contains(&np));
    let mut taken = svc("s3");
    taken["spec"]["ports"][0]["nodePort"] = np.into();
    let (code, st) = post_json(&api, "/api/v1/namespaces/default/services", taken.clone());
    assert_eq!(code, 422, "{st}");
    assert!(st["message"].as_str().unwrap().contains("provided port is already allocated"), "{st}");
    curl(&api, "DELETE", "/api/v1/namespaces/default/services/s1", "application/json", None);
    let (code, s3) = post_json(&api, "/api/v1/namespaces/default/services", taken);
    assert_eq!(code, 201, "node port released on delete: {s3}");

    // deletecollection with a label selector.
    for n in ["l1", "l2", "l3"] {
        let mut c = cm(n);
        c["metadata"]["labels"] = serde_json::json!({"group": if n == "l3" { "keep" } else { "drop" }});
        post_json(&api, "/api/v1/namespaces/default/configmaps", c);
    }
    let (code, _) = curl(
        &api,
        "DELETE",
        "/api/v1/namespaces/default/configmaps?labelSelector=group%3Ddrop",
        "application/json",
        None,
    );
    assert_eq!(code, 200);
    let (_, left) = get_json(&api, "/api/v1/namespaces/default/configmaps?labelSelector=group");
    let names: Vec<&str> =
        left["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["l3"]);

    // Paging: limit + continue walks every item exactly once.
    for i in 0..25 {
        post_json(&api, "/api/v1/namespaces/default/configmaps", cm(&format!("page-{i:02}")));
    }
    let mut got = Vec::new();
    let mut cont = String::new();
    loop {
        let (code, page) = get_json(
            &api,
            &format!("/api/v1/namespaces/default/configmaps?limit=7&labelSelector=&continue={cont}"),
        );
        assert_eq!(code, 200, "{page}");
        for i in page["items"].as_array().unwrap() {
            got.push(i["metadata"]["name"].as_str().unwrap().to_string());
        }
        cont = page["metadata"]["continue"].as_str().unwrap_or_default().to_string();
        if cont.is_empty() {
            break;
        }
    }
    let pages: Vec<_> = got.iter().filter(|n| n.starts_with("page-")).cloned().collect();
    assert_eq!(pages, (0..25).map(|i| format!("page-{i:02}")).collect::<Vec<_>>());
}

#[test]
fn watch_window_bookmarks_and_gone() {
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(&etcd.endpoint(), &[]);
    let (_, list) = get_json(&api, "/api/v1/namespaces/default/configmaps");
    let start_rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    for i in 0..5 {
        post_json(&api, "/api/v1/namespaces/default/configmaps", cm(&format!("w{i}")));
    }
    // A watch from a past resourceVersion replays the window, then bookmarks when asked.
    let (code, text) = curl(
        &api,
        "GET",
        &format!(
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={start_rv}&timeoutSeconds=1&allowWatchBookmarks=true"
        ),
        "application/json",
        None,
    );
    assert_eq!(code, 200);
    let events: Vec<serde_json::Value> = text.lines().map(json).collect();
    let added: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "ADDED")
        .map(|e| e["object"]["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(added, ["w0", "w1", "w2", "w3", "w4"]);
    // Label-selected watch sees a relabel out of the selection as DELETED.
    let mut watch = api.kubectl_spawn(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/configmaps?watch=1&labelSelector=sel%3Dyes",
    ]);
    let mut c = cm("sel");
    c["metadata"]["labels"] = serde_json::json!({"sel": "yes"});
    post_json(&api, "/api/v1/namespaces/default/configmaps", c);
    watch.read_lines(1, Duration::from_secs(10));
    curl(
        &api,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/sel",
        "application/merge-patch+json",
        Some(br#"{"metadata":{"labels":{"sel":"no"}}}"#),
    );
    let lines = watch.read_lines(2, Duration::from_secs(10)).to_vec();
    assert_eq!(json(&lines[0])["type"], "ADDED");
    assert_eq!(json(&lines[1])["type"], "DELETED");
    drop(watch);

    // A resourceVersion older than a cache's window: 410 Gone. A second apiserver started
    // now fills its cache from a list at the current revision, so `start_rv` is before its
    // window, as after any apiserver restart upstream.
    let api2 = KubeApiserver::start(&etcd.endpoint(), &[]);
    let (code, text) = curl(
        &api2,
        "GET",
        &format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={start_rv}&timeoutSeconds=1"),
        "application/json",
        None,
    );
    // As upstream's cacher: a watch (200) whose one event is an ERROR carrying 410, which
    // clients (client-go's reflector, kube-rs' watcher) answer with a relist.
    let gone =
        code == 200 && text.lines().any(|l| json(l)["type"] == "ERROR" && json(l)["object"]["code"] == 410);
    assert!(gone, "{code} {text}");
    // resourceVersion=0 lists serve from the cache; consistent lists see a just-written object.
    post_json(&api, "/api/v1/namespaces/default/configmaps", cm("fresh"));
    let (_, l) = get_json(&api, "/api/v1/namespaces/default/configmaps/fresh");
    assert_eq!(l["metadata"]["name"], "fresh");
    let (_, l) = get_json(&api, "/api/v1/namespaces/default/configmaps");
    assert!(l["items"].as_array().unwrap().iter().any(|i| i["metadata"]["name"] == "fresh"));
    let (code, l) = get_json(&api, "/api/v1/namespaces/default/configmaps?resourceVersion=0");
    assert_eq!(code, 200, "{l}");
}

#[test]
fn health_metrics_and_limits() {
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(
        &etcd.endpoint(),
        &["--max-requests-inflight=1", "--max-mutating-requests-inflight=1"],
    );
    for p in ["/healthz", "/livez", "/readyz"] {
        assert_eq!(api.kubectl_ok(&["get", "--raw", p]).trim(), "ok");
    }
    let verbose = api.kubectl_ok(&["get", "--raw", "/readyz?verbose"]);
    assert!(verbose.contains("[+]etcd ok") && verbose.contains("readyz check passed"), "{verbose}");
    api.kubectl_ok(&["get", "ns"]);
    let metrics = api.kubectl_ok(&["get", "--raw", "/metrics"]);
    for m in [
        "apiserver_request_total{",
        "apiserver_request_duration_seconds_bucket{",
        "apiserver_storage_objects{resource=\"namespaces\"}",
        "etcd_request_duration_seconds_bucket{",
        "apiserver_current_inflight_requests{",
    ] {
        assert!(metrics.contains(m), "metrics lack {m}");
    }
    assert!(
        metrics.lines().any(|l| l.starts_with("apiserver_request_total{")
            && l.contains("resource=\"namespaces\"")
            && l.contains("verb=\"LIST\"")
            && l.contains("code=\"200\"")),
        "no LIST namespaces count"
    );
    // Version and aggregated discovery.
    let v = json(&api.kubectl_ok(&["get", "--raw", "/version"]));
    assert!(v["gitVersion"].as_str().unwrap().starts_with("v1.32."), "{v}");

    // Max in-flight: a slow upload holds the only mutating slot, so the next write is
    // answered 429 with Retry-After while reads still go through.
    let body =
        serde_json::json!({"metadata": {"name": "slow"}, "data": {"k": "x".repeat(40_000)}}).to_string();
    let body_file = api.dir.path().join("slow.json");
    std::fs::write(&body_file, body).unwrap();
    let mut slow = Command::new("curl")
        .args([
            "-sk",
            "-o",
            "/dev/null",
            "--limit-rate",
            "4k",
            "-H",
            "Expect:",
            "-H",
            "Content-Type: application/json",
            "-H",
        ])
        .arg(format!("Authorization: Bearer {ADMIN_TOKEN}"))
        .arg("--data-binary")
        .arg(format!("@{}", body_file.display()))
        .arg(format!("{}/api/v1/namespaces/default/configmaps", api.url()))
        .spawn()
        .expect("curl");
    // Probe only once the upload holds the slot: a probe arriving first would take it.
    wait_for("the slow upload in flight", Duration::from_secs(10), Duration::from_millis(20), || {
        let m = api.kubectl_ok(&["get", "--raw", "/metrics"]);
        m.contains("apiserver_current_inflight_requests{request_kind=\"mutating\"} 1").then_some(())
    });
    let headers = wait_for("a write throttled", Duration::from_secs(10), Duration::from_millis(50), || {
        let out = Command::new("curl")
            .args([
                "-sk",
                "-o",
                "/dev/null",
                "-D",
                "-",
                "-X",
                "POST",
                "-H",
                "Content-Type: application/json",
                "-H",
            ])
            .arg(format!("Authorization: Bearer {ADMIN_TOKEN}"))
            .args(["--data-binary", r#"{"metadata":{"generateName":"t-"}}"#])
            .arg(format!("{}/api/v1/namespaces/default/configmaps", api.url()))
            .output()
            .expect("curl");
        let h = String::from_utf8_lossy(&out.stdout).to_lowercase();
        h.starts_with("http/2 429").then_some(h)
    });
    assert!(headers.contains("retry-after: 1"), "{headers}");
    assert!(api.kubectl(&["get", "ns", "default"]).status.success(), "reads have their own limit");
    let _ = slow.kill();
    let _ = slow.wait();
    let m = api.kubectl_ok(&["get", "--raw", "/metrics"]);
    assert!(
        m.lines().any(|l| l.starts_with("apiserver_request_total{") && l.contains("code=\"429\"")),
        "429 not counted"
    );
}

#[test]
fn watches_without_the_watch_cache_come_from_etcd() {
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(&etcd.endpoint(), &["--watch-cache=false"]);
    post_json(&api, "/api/v1/namespaces/default/configmaps", cm("before"));
    // From "now": the current objects as ADDED, then the changes, in order; a relabel out of
    // the selection is a DELETED.
    let mut all = api.kubectl_spawn(&["get", "--raw", "/api/v1/namespaces/default/configmaps?watch=1"]);
    let mut c = cm("sel");
    c["metadata"]["labels"] = serde_json::json!({"sel": "yes"});
    // (From a listed resourceVersion, so that it sees the create however late it starts.)
    let (_, list) = get_json(&api, "/api/v1/configmaps");
    let list_rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let mut selected = api.kubectl_spawn(&[
        "get",
        "--raw",
        &format!("/api/v1/configmaps?watch=1&labelSelector=sel%3Dyes&resourceVersion={list_rv}"),
    ]);
    let lines = all.read_lines(1, Duration::from_secs(10)).to_vec();
    assert_eq!(
        (json(&lines[0])["type"].as_str(), json(&lines[0])["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("before"))
    );
    let (code, created) = post_json(&api, "/api/v1/namespaces/default/configmaps", c);
    assert_eq!(code, 201);
    curl(
        &api,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/sel",
        "application/merge-patch+json",
        Some(br#"{"metadata":{"labels":{"sel":"no"}}}"#),
    );
    curl(&api, "DELETE", "/api/v1/namespaces/default/configmaps/sel", "application/json", None);
    let lines = all.read_lines(4, Duration::from_secs(10)).to_vec();
    let kinds: Vec<_> = lines.iter().map(|l| json(l)["type"].as_str().unwrap().to_string()).collect();
    assert_eq!(kinds, ["ADDED", "ADDED", "MODIFIED", "DELETED"]);
    assert_eq!(
        json(&lines[1])["object"]["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    let lines = selected.read_lines(2, Duration::from_secs(10)).to_vec();
    let kinds: Vec<_> = lines.iter().map(|l| json(l)["type"].as_str().unwrap().to_string()).collect();
    assert_eq!(kinds, ["ADDED", "DELETED"]);
    drop((all, selected));

    // From a resourceVersion: only what came after it.
    let (_, list) = get_json(&api, "/api/v1/namespaces/default/configmaps");
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    post_json(&api, "/api/v1/namespaces/default/configmaps", cm("after"));
    let (code, text) = curl(
        &api,
        "GET",
        &format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=1"),
        "application/json",
        None,
    );
    assert_eq!(code, 200);
    let names: Vec<_> =
        text.lines().map(|l| json(l)["object"]["metadata"]["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, ["after"]);

    // A revision etcd compacted away: the stream ends with an ERROR event carrying 410.
    let (_, list) = get_json(&api, "/api/v1/namespaces/default/configmaps");
    let current: i64 = list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    let out = etcd.etcdctl(&["compaction", &current.to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, text) = curl(
        &api,
        "GET",
        &format!(
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={}&timeoutSeconds=5",
            current - 2
        ),
        "application/json",
        None,
    );
    assert_eq!(code, 200, "{text}");
    let last = json(text.lines().last().unwrap_or_default());
    assert_eq!(
        (last["type"].as_str(), &last["object"]["code"]),
        (Some("ERROR"), &serde_json::json!(410)),
        "{text}"
    );
}

#[test]
fn resource_version_match_on_lists() {
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(&etcd.endpoint(), &[]);
    post_json(&api, "/api/v1/namespaces/default/configmaps", cm("old"));
    let (_, list) = get_json(&api, "/api/v1/namespaces/default/configmaps");
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    post_json(&api, "/api/v1/namespaces/default/configmaps", cm("new"));
    let names = |l: &serde_json::Value| -> Vec<String> {
        l["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    // Exact: the state at that revision, read from etcd's history.
    let (code, exact) = get_json(
        &api,
        &format!("/api/v1/namespaces/default/configmaps?resourceVersion={rv}&resourceVersionMatch=Exact"),
    );
    assert_eq!(code, 200, "{exact}");
    assert_eq!(names(&exact), ["old"]);
    assert_eq!(exact["metadata"]["resourceVersion"], rv.as_str());
    // NotOlderThan: at least that revision (here, the latest).
    let (code, newer) = get_json(
        &api,
        &format!(
            "/api/v1/namespaces/default/configmaps?resourceVersion={rv}&resourceVersionMatch=NotOlderThan"
        ),
    );
    assert_eq!(code, 200);
    assert_eq!(names(&newer), ["new", "old"]);
    for bad in [
        "resourceVersionMatch=Exact",
        "resourceVersion=0&resourceVersionMatch=Exact",
        "resourceVersion=1&resourceVersionMatch=Newest",
    ] {
        let (code, st) = get_json(&api, &format!("/api/v1/namespaces/default/configmaps?{bad}"));
        assert_eq!(code, 400, "{bad}: {st}");
        assert!(st["message"].as_str().unwrap().starts_with("resourceVersionMatch: "), "{st}");
    }
    let (_, first) = get_json(&api, "/api/v1/namespaces/default/configmaps?limit=1");
    assert_eq!(names(&first), ["new"]);
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    // A later write, so that compacting at the current revision removes the token's.
    post_json(&api, "/api/v1/namespaces/default/configmaps", cm("a-later"));
    // Compacted away: 410.
    let out = etcd.etcdctl(&["compaction", list["metadata"]["resourceVersion"].as_str().unwrap()]);
    assert!(out.status.success());
    let (_, now) = get_json(&api, "/api/v1/namespaces/default/configmaps");
    let current: i64 = now["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    let out = etcd.etcdctl(&["compaction", &current.to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, st) = get_json(
        &api,
        &format!("/api/v1/namespaces/default/configmaps?resourceVersion={rv}&resourceVersionMatch=Exact"),
    );
    assert_eq!(code, 410, "{st}");
    // An expired continue token: 410 with a token that goes on at the current revision.
    let (code, st) =
        get_json(&api, &format!("/api/v1/namespaces/default/configmaps?limit=1&continue={token}"));
    assert_eq!(code, 410, "{st}");
    let fresh = st["metadata"]["continue"].as_str().expect("a fresh continue token");
    let (code, rest) =
        get_json(&api, &format!("/api/v1/namespaces/default/configmaps?limit=1&continue={fresh}"));
    assert_eq!(code, 200, "{rest}");
    assert_eq!(names(&rest), ["old"]);
}

/// What upstream's wire format and parameter codec do, each checked against upstream
/// v1.28.4's API server on real etcd: boolean query parameters false only for `0` and
/// `false` in any case, integers refused with Go's `strconv.ParseInt` message, error
/// bodies in `metav1.Status` field order ending in a newline, a pod's `podIP` and
/// `podIPs` kept in step.
#[test]
fn query_parameters_status_bodies_and_pod_ips_as_upstream() {
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(&etcd.endpoint(), &[]);
    post_json(&api, "/api/v1/namespaces/default/configmaps", cm("a"));

    // `watch=True` (Python's str(True)) is a watch, not a one-shot list.
    for v in ["True", "1", "t", "yes"] {
        let (code, text) = curl(
            &api,
            "GET",
            &format!("/api/v1/namespaces/default/configmaps?watch={v}&timeoutSeconds=1"),
            "application/json",
            None,
        );
        assert_eq!(code, 200, "watch={v}: {text}");
        let first = json(text.lines().next().unwrap_or_default());
        assert_eq!(first["type"], "ADDED", "watch={v} is a watch: {text}");
    }
    for v in ["FALSE", "False", "0"] {
        let (_, text) = curl(
            &api,
            "GET",
            &format!("/api/v1/namespaces/default/configmaps?watch={v}"),
            "application/json",
            None,
        );
        assert_eq!(json(&text)["kind"], "ConfigMapList", "watch={v} is a list: {text}");
    }
    // Integers: Go's message, 400; a negative limit means no limit.
    for (q, bad) in [("limit=abc", "abc"), ("limit=1.5", "1.5"), ("watch=1&timeoutSeconds=x", "x")] {
        let (code, text) = curl(
            &api,
            "GET",
            &format!("/api/v1/namespaces/default/configmaps?{q}"),
            "application/json",
            None,
        );
        assert_eq!(code, 400, "{q}: {text}");
        assert_eq!(
            json(&text)["message"],
            format!("strconv.ParseInt: parsing \"{bad}\": invalid syntax"),
            "{q}"
        );
    }
    let (code, text) =
        curl(&api, "GET", "/api/v1/namespaces/default/configmaps?limit=-1", "application/json", None);
    assert_eq!((code, json(&text)["items"].as_array().map(Vec::len)), (200, Some(1)), "{text}");

    // The raw error body, byte for byte as upstream writes it: compact for clients
    // (here `pretty=false`; kubectl and client libraries send no `pretty` and are not
    // curl), and indented for curl, wget and browsers or `pretty=true`.
    let (code, text) = curl(
        &api,
        "GET",
        "/api/v1/namespaces/default/configmaps/nope?pretty=false",
        "application/json",
        None,
    );
    assert_eq!(code, 404);
    assert_eq!(
        text,
        concat!(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
            r#""message":"configmaps \"nope\" not found","reason":"NotFound","details":{"name":"nope","kind":"configmaps"},"code":404}"#,
            "\n"
        )
    );
    for path in
        ["/api/v1/namespaces/default/configmaps/nope", "/api/v1/namespaces/default/configmaps/nope?pretty=1"]
    {
        let (code, text) = curl(&api, "GET", path, "application/json", None);
        assert_eq!(code, 404);
        assert_eq!(
            text,
            concat!(
                "{\n  \"kind\": \"Status\",\n  \"apiVersion\": \"v1\",\n  \"metadata\": {},\n",
                "  \"status\": \"Failure\",\n  \"message\": \"configmaps \\\"nope\\\" not found\",\n",
                "  \"reason\": \"NotFound\",\n  \"details\": {\n    \"name\": \"nope\",\n",
                "    \"kind\": \"configmaps\"\n  },\n  \"code\": 404\n}"
            ),
            "{path}"
        );
    }
    // Objects lead with kind, apiVersion and metadata (name first), as Go's structs do.
    let (_, text) =
        curl(&api, "GET", "/api/v1/namespaces/default/configmaps/a?pretty=0", "application/json", None);
    assert!(
        text.starts_with(
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"default","uid":"#
        ),
        "{text}"
    );
    assert!(text.ends_with("}\n"), "{text:?}");

    // A status writer that knows only `podIP` (an older kubelet, a stand-in one): the
    // plural field follows, and the EndpointSlice controller, which reads it, agrees.
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}});
    assert_eq!(post_json(&api, "/api/v1/namespaces/default/pods", pod).0, 201);
    let (code, text) = curl(
        &api,
        "PATCH",
        "/api/v1/namespaces/default/pods/p/status",
        "application/merge-patch+json",
        Some(br#"{"status":{"podIP":"10.1.2.3","hostIP":"192.0.2.7"}}"#),
    );
    assert_eq!(code, 200, "{text}");
    let status = json(&text)["status"].clone();
    assert_eq!(status["podIPs"], serde_json::json!([{"ip": "10.1.2.3"}]), "{status}");
    assert_eq!(status["hostIPs"], serde_json::json!([{"ip": "192.0.2.7"}]), "{status}");
    // And the other way round: only the list.
    let (_, text) = curl(
        &api,
        "PATCH",
        "/api/v1/namespaces/default/pods/p/status",
        "application/merge-patch+json",
        Some(br#"{"status":{"podIP":null,"podIPs":[{"ip":"10.1.2.4"}]}}"#),
    );
    assert_eq!(json(&text)["status"]["podIP"], "10.1.2.4", "{text}");
}

/// A stored value that does not decode (written past the API server, or corrupted) must
/// not vanish silently: a watch served from etcd gets an ERROR event; the watch cache
/// re-lists, ending the watches it serves so that their clients re-list too.
#[test]
fn undecodable_stored_objects_end_watches_instead_of_vanishing() {
    let etcd = Etcd::start(EtcdOptions::default());
    for (flags, from_etcd) in [(&["--watch-cache=false"][..], true), (&[][..], false)] {
        let api = KubeApiserver::start(&etcd.endpoint(), flags);
        let name = if from_etcd { "first" } else { "second" };
        post_json(&api, "/api/v1/namespaces/default/configmaps", cm(name));
        let mut watch = api.kubectl_spawn(&[
            "get",
            "--raw",
            "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=300",
        ]);
        watch.read_lines(if from_etcd { 1 } else { 2 }, Duration::from_secs(10));
        let key = format!("/registry/configmaps/default/garbage-{name}");
        etcd.etcdctl_ok(&["put", &key, "{not json"]);
        if from_etcd {
            let lines = watch.read_lines(2, Duration::from_secs(10)).to_vec();
            let last = json(&lines[1]);
            assert_eq!(
                (last["type"].as_str(), &last["object"]["code"]),
                (Some("ERROR"), &serde_json::json!(500))
            );
        }
        // The watch ends (long before its 300 s timeout), and the server goes on serving.
        let (_, stderr) = watch.wait(Duration::from_secs(60));
        let (code, list) = get_json(&api, "/api/v1/namespaces/default/configmaps");
        assert_eq!(code, 200, "{list} {stderr}");
        drop(api);
        etcd.etcdctl_ok(&["del", &key]);
    }
}
