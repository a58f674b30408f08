//! Real kubectl v1.32 against our kube-apiserver, in front of our etcd and, unchanged, in
//! front of Debian's etcd 3.4.

use std::time::Duration;

use e2e::apiserver::KubeApiserver;
use e2e::{Etcd, EtcdOptions, Flavor, json, wait_for};

const MANIFEST: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: suite
  labels: {app: web}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxSurge: 1, maxUnavailable: 0}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: registry.k8s.io/pause:3.10
        ports:
        - containerPort: 8080
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: suite
spec:
  selector: {app: web}
  ports:
  - port: 80
    targetPort: 8080
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  namespace: suite
data:
  greeting: hello
"#;

fn kubectl_suite(api: &KubeApiserver) {
    let t = Duration::from_secs(20);

    // Discovery and OpenAPI.
    let resources = api.kubectl_ok(&["api-resources"]);
    for needle in ["pods", "po", "deployments", "deploy", "apps/v1", "services", "svc", "leases"] {
        assert!(resources.contains(needle), "api-resources lacks {needle}:\n{resources}");
    }
    let versions = api.kubectl_ok(&["api-versions"]);
    for gv in ["v1", "apps/v1", "batch/v1", "coordination.k8s.io/v1", "events.k8s.io/v1"] {
        assert!(versions.lines().any(|l| l == gv), "api-versions lacks {gv}:\n{versions}");
    }
    let explain = api.kubectl_ok(&["explain", "deployment.spec.strategy"]);
    assert!(explain.contains("KIND:") && explain.contains("Deployment"), "{explain}");
    assert!(explain.contains("rollingUpdate"), "{explain}");

    // Generators (kubectl sends protobuf bodies for these).
    api.kubectl_ok(&["create", "namespace", "suite"]);
    api.kubectl_ok(&[
        "create",
        "configmap",
        "cfg",
        "-n",
        "suite",
        "--from-literal=a=1",
        "--from-literal=b=two",
    ]);
    let cm = json(&api.kubectl_ok(&["get", "configmap", "cfg", "-n", "suite", "-o", "json"]));
    assert_eq!(cm["data"]["b"], "two");
    api.kubectl_ok(&["create", "secret", "generic", "sec", "-n", "suite", "--from-literal=password=s3cret"]);
    let sec = json(&api.kubectl_ok(&["get", "secret", "sec", "-n", "suite", "-o", "json"]));
    assert_eq!(sec["data"]["password"], "czNjcmV0", "secret data is base64 of the literal");
    api.kubectl_ok(&["create", "deployment", "nginx", "-n", "suite", "--image=nginx:1.27", "--replicas=3"]);
    let dep = json(&api.kubectl_ok(&["get", "deploy", "nginx", "-n", "suite", "-o", "json"]));
    assert_eq!(dep["spec"]["replicas"], 3);
    assert_eq!(dep["spec"]["strategy"]["type"], "RollingUpdate", "defaulted strategy");
    assert_eq!(dep["metadata"]["generation"], 1);
    api.kubectl_ok(&["create", "service", "clusterip", "db", "-n", "suite", "--tcp=5432:5432"]);
    let svc = json(&api.kubectl_ok(&["get", "svc", "db", "-n", "suite", "-o", "json"]));
    let ip = svc["spec"]["clusterIP"].as_str().expect("clusterIP allocated");
    assert!(ip.starts_with("10.0.0."), "clusterIP from the default range: {ip}");

    // apply -f with default (server-fetched OpenAPI) validation.
    let out = api.kubectl_stdin(&["apply", "-f", "-"], MANIFEST);
    assert!(
        out.status.success(),
        "apply failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("deployment.apps/web created"), "{text}");
    assert!(text.contains("service/web created"), "{text}");
    assert!(text.contains("configmap/web-config created"), "{text}");
    // A second apply of the same manifest changes nothing.
    let again = api.kubectl_stdin(&["apply", "-f", "-"], MANIFEST);
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success() && text.contains("deployment.apps/web unchanged"), "{text}");
    // A field unknown to the schema is refused by default validation.
    let bad = MANIFEST.replace("replicas: 2", "replicas: 2\n  replicaz: 3");
    let out = api.kubectl_stdin(&["apply", "-f", "-"], &bad);
    assert!(!out.status.success(), "unknown field accepted");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("replicaz"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // --validate=warn: written, the unknown field dropped and reported as a warning.
    let out = api.kubectl_stdin(&["apply", "--validate=warn", "-f", "-"], &bad);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.contains(r#"unknown field "spec.replicaz""#), "{stderr}");
    // A changed manifest: kubectl's three-way strategic merge patch changes the image, adds
    // a container port (merged by containerPort) and removes the strategy block dropped
    // from the manifest.
    let changed = MANIFEST
        .replace("image: registry.k8s.io/pause:3.10", "image: registry.k8s.io/pause:3.11")
        .replace(
            "        - containerPort: 8080\n",
            "        - containerPort: 8080\n        - containerPort: 9090\n",
        )
        .replace(
            "  strategy:\n    type: RollingUpdate\n    rollingUpdate: {maxSurge: 1, maxUnavailable: 0}\n",
            "",
        );
    assert_ne!(changed, MANIFEST);
    let out = api.kubectl_stdin(&["apply", "-f", "-"], &changed);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("deployment.apps/web configured"),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = json(&api.kubectl_ok(&["get", "deploy", "web", "-n", "suite", "-o", "json"]));
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "registry.k8s.io/pause:3.11");
    let ports: Vec<_> =
        c["ports"].as_array().unwrap().iter().map(|p| p["containerPort"].as_i64().unwrap()).collect();
    assert_eq!(ports, [8080, 9090]);
    assert!(
        d["spec"]["strategy"]["rollingUpdate"]["maxSurge"] != 1,
        "dropped strategy kept: {}",
        d["spec"]["strategy"]
    );
    assert_eq!(d["metadata"]["generation"], 2, "a spec change bumps generation");

    // Output formats.
    let wide = api.kubectl_ok(&["get", "deploy", "-n", "suite", "-o", "wide"]);
    let header = wide.lines().next().unwrap_or_default();
    for col in ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"] {
        assert!(header.contains(col), "wide header lacks {col}: {wide}");
    }
    assert!(wide.contains("nginx:1.27") && wide.contains("app=web"), "{wide}");
    let yaml = api.kubectl_ok(&["get", "svc", "web", "-n", "suite", "-o", "yaml"]);
    assert!(yaml.contains("kind: Service") && yaml.contains("targetPort: 8080"), "{yaml}");
    let jp = api.kubectl_ok(&["get", "cm", "web-config", "-n", "suite", "-o", "jsonpath={.data.greeting}"]);
    assert_eq!(jp, "hello");
    let names = api.kubectl_ok(&["get", "deploy", "-n", "suite", "-o", "jsonpath={.items[*].metadata.name}"]);
    assert_eq!(names, "nginx web");

    // get -w sees a later change.
    let mut watch = api.kubectl_spawn(&["get", "configmaps", "-n", "suite", "-w", "-o", "name"]);
    watch.read_lines(2, t); // the existing config maps: cfg and web-config
    api.kubectl_ok(&["create", "configmap", "later", "-n", "suite", "--from-literal=x=y"]);
    wait_for("watch sees configmap/later", t, Duration::from_millis(50), || {
        let _ = watch.read_lines_within(watch.seen.len() + 1, Duration::from_millis(200));
        watch.seen.iter().any(|l| l.contains("configmap/later")).then_some(())
    });
    drop(watch);

    // label, annotate, describe.
    api.kubectl_ok(&["label", "deploy", "web", "-n", "suite", "tier=frontend"]);
    api.kubectl_ok(&["annotate", "deploy", "web", "-n", "suite", "owner=e2e"]);
    let dep = json(&api.kubectl_ok(&["get", "deploy", "web", "-n", "suite", "-o", "json"]));
    assert_eq!(dep["metadata"]["labels"]["tier"], "frontend");
    assert_eq!(dep["metadata"]["annotations"]["owner"], "e2e");
    assert_eq!(dep["metadata"]["generation"], 2, "metadata changes do not bump generation");
    let sel = api.kubectl_ok(&["get", "deploy", "-n", "suite", "-l", "tier=frontend", "-o", "name"]);
    assert_eq!(sel.trim(), "deployment.apps/web");
    let desc = api.kubectl_ok(&["describe", "deploy", "web", "-n", "suite"]);
    assert!(desc.contains("Name:") && desc.contains("web") && desc.contains("tier=frontend"), "{desc}");
    assert!(desc.contains("RollingUpdate"), "{desc}");
    let desc = api.kubectl_ok(&["describe", "svc", "web", "-n", "suite"]);
    assert!(desc.contains("8080/TCP"), "{desc}");

    // delete.
    api.kubectl_ok(&["delete", "configmap", "cfg", "-n", "suite"]);
    let out = api.kubectl(&["get", "configmap", "cfg", "-n", "suite"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("NotFound")
            || String::from_utf8_lossy(&out.stderr).contains("not found")
    );

    // An object with a finalizer is kept, marked deleted, until the finalizer is removed.
    let held = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  namespace: suite\n  finalizers: [e2e.example.com/hold]\n";
    let out = api.kubectl_stdin(&["create", "-f", "-"], held);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    api.kubectl_ok(&["delete", "cm", "held", "-n", "suite", "--wait=false"]);
    let ts =
        api.kubectl_ok(&["get", "cm", "held", "-n", "suite", "-o", "jsonpath={.metadata.deletionTimestamp}"]);
    assert!(!ts.is_empty(), "deletionTimestamp set");
    api.kubectl_ok(&[
        "patch",
        "cm",
        "held",
        "-n",
        "suite",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    assert!(
        !api.kubectl(&["get", "cm", "held", "-n", "suite"]).status.success(),
        "gone once finalizers are empty"
    );

    // A namespace delete waits on its finalizers: the namespace turns Terminating, refuses new
    // objects, and goes only when `spec.finalizers` is emptied through `finalize` (what the
    // namespace controller does once the namespace is empty).
    api.kubectl_ok(&["create", "namespace", "doomed"]);
    api.kubectl_ok(&["create", "configmap", "c1", "-n", "doomed"]);
    api.kubectl_ok(&["delete", "namespace", "doomed", "--wait=false"]);
    let ns = json(&api.kubectl_ok(&["get", "ns", "doomed", "-o", "json"]));
    assert_eq!(ns["status"]["phase"], "Terminating");
    assert_eq!(ns["spec"]["finalizers"][0], "kubernetes");
    let out = api.kubectl(&["create", "configmap", "new", "-n", "doomed"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("because it is being terminated"), "{err}");
    // `kubectl delete` without --wait=false waits; with a short timeout it gives up while the
    // finalizer holds.
    let out = api.kubectl(&["delete", "namespace", "doomed", "--timeout=2s"]);
    assert!(!out.status.success(), "delete returned while the namespace still had finalizers");
    api.kubectl_ok(&["delete", "cm", "c1", "-n", "doomed"]);
    let mut finalize = ns.clone();
    finalize["spec"]["finalizers"] = serde_json::json!([]);
    let out = api.kubectl_stdin(
        &["replace", "--raw", "/api/v1/namespaces/doomed/finalize", "-f", "-"],
        &finalize.to_string(),
    );
    assert!(out.status.success(), "finalize: {}", String::from_utf8_lossy(&out.stderr));
    wait_for("namespace doomed deleted", t, Duration::from_millis(100), || {
        (!api.kubectl(&["get", "ns", "doomed"]).status.success()).then_some(())
    });
}

#[test]
fn kubectl_suite_on_our_etcd() {
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(&etcd.endpoint(), &[]);
    kubectl_suite(&api);
}

#[test]
fn kubectl_suite_on_real_etcd() {
    let etcd = Etcd::start(EtcdOptions { flavor: Flavor::Real, ..Default::default() });
    let api = KubeApiserver::start(&etcd.endpoint(), &[]);
    kubectl_suite(&api);
}
