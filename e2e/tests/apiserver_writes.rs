//! Write semantics through real kubectl v1.32 (the client-side half of the
//! kubectl-compatibility issue): three-way apply removing fields, prune, patch types, diff,
//! server dry-run, edit with a conflict, chunked lists under churn, scale, sort-by,
//! custom-columns, wait, cascading deletes.

use e2e::apiserver::KubeApiserver;
use e2e::{Etcd, EtcdOptions, json};

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
  namespace: w
  labels: {set: one}
spec:
  replicas: 1
  selector:
    matchLabels: {app: app}
  template:
    metadata:
      labels: {app: app}
    spec:
      containers:
      - name: main
        image: example/app:1
        env:
        - {name: KEEP, value: "1"}
        - {name: DROP, value: "2"}
      - name: side
        image: example/side:1
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: extra
  namespace: w
  labels: {set: one}
data: {a: "1"}
"#;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn start() -> (Etcd, KubeApiserver) {
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(&etcd.endpoint(), &[]);
    api.kubectl_ok(&["create", "namespace", "w"]);
    (etcd, api)
}

#[test]
fn apply_prune_patch_diff_and_dry_run() {
    let (_etcd, api) = start();
    let out = api.kubectl_stdin(&["apply", "-f", "-"], DEPLOYMENT);
    assert!(out.status.success(), "{}", stderr(&out));

    // Change the image and drop an env var: the three-way patch removes it live. Dropping
    // the ConfigMap from the set and applying with --prune deletes it.
    let changed = DEPLOYMENT
        .replace("example/app:1", "example/app:2")
        .replace("        - {name: DROP, value: \"2\"}\n", "");
    let changed = &changed[..changed.find("---").unwrap()];
    let out = api.kubectl_stdin(&["apply", "--prune", "-l", "set=one", "-f", "-"], changed);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("configmap/extra pruned"), "{text}");
    let d = json(&api.kubectl_ok(&["get", "deploy", "app", "-n", "w", "-o", "json"]));
    let main = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(main["image"], "example/app:2");
    assert_eq!(main["env"], serde_json::json!([{"name": "KEEP", "value": "1"}]));
    assert_eq!(d["spec"]["template"]["spec"]["containers"][1]["name"], "side");
    assert!(!api.kubectl(&["get", "cm", "extra", "-n", "w"]).status.success(), "pruned object still there");

    // kubectl patch: strategic (containers merged by name), merge, json.
    api.kubectl_ok(&[
        "patch",
        "deploy",
        "app",
        "-n",
        "w",
        "--type=strategic",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"side","image":"example/side:2"}]}}}}"#,
    ]);
    api.kubectl_ok(&[
        "patch",
        "deploy",
        "app",
        "-n",
        "w",
        "--type=merge",
        "-p",
        r#"{"metadata":{"labels":{"patched":"merge"}}}"#,
    ]);
    api.kubectl_ok(&[
        "patch", "deploy", "app", "-n", "w", "--type=json", "-p",
        r#"[{"op":"test","path":"/spec/replicas","value":1},{"op":"replace","path":"/spec/replicas","value":2}]"#,
    ]);
    let d = json(&api.kubectl_ok(&["get", "deploy", "app", "-n", "w", "-o", "json"]));
    let containers = d["spec"]["template"]["spec"]["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 2, "strategic patch replaced the list: {containers:?}");
    assert_eq!(
        (containers[0]["image"].as_str(), containers[1]["image"].as_str()),
        (Some("example/app:2"), Some("example/side:2"))
    );
    assert_eq!(d["metadata"]["labels"]["patched"], "merge");
    assert_eq!(d["spec"]["replicas"], 2);
    let out = api.kubectl(&[
        "patch",
        "deploy",
        "app",
        "-n",
        "w",
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/spec/replicas","value":9}]"#,
    ]);
    assert!(!out.status.success(), "a failing json patch test op was accepted");
    // A service's ports, merged by port; no duplicate for the existing one.
    api.kubectl_ok(&["create", "service", "clusterip", "svc", "-n", "w", "--tcp=80:8080"]);
    api.kubectl_ok(&[
        "patch",
        "svc",
        "svc",
        "-n",
        "w",
        "-p",
        r#"{"spec":{"ports":[{"name":"extra","port":81,"targetPort":8081}]}}"#,
    ]);
    let s = json(&api.kubectl_ok(&["get", "svc", "svc", "-n", "w", "-o", "json"]));
    let ports: Vec<_> =
        s["spec"]["ports"].as_array().unwrap().iter().map(|p| p["port"].as_i64().unwrap()).collect();
    // A new element goes before the server's (upstream's normalizeElementOrder).
    assert_eq!(ports, [81, 80]);

    // diff shows the change and persists nothing; apply --dry-run=server persists nothing.
    let live_rv = d["metadata"]["resourceVersion"].clone();
    let applied = DEPLOYMENT.replace("example/app:1", "example/app:3");
    let applied = &applied[..applied.find("---").unwrap()];
    let out = api.kubectl_stdin(&["diff", "-f", "-"], applied);
    let diff = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "diff exit code: {}", stderr(&out));
    assert!(
        diff.contains("-        image: example/app:2") && diff.contains("+        image: example/app:3"),
        "{diff}"
    );
    let out = api.kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], applied);
    assert!(out.status.success(), "{}", stderr(&out));
    let d = json(&api.kubectl_ok(&["get", "deploy", "app", "-n", "w", "-o", "json"]));
    assert_eq!(d["metadata"]["resourceVersion"], live_rv, "dry runs wrote");
    assert_eq!(d["spec"]["template"]["spec"]["containers"][0]["image"], "example/app:2");
    let out = api.kubectl(&["create", "configmap", "dry", "-n", "w", "--dry-run=server", "-o", "name"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!api.kubectl(&["get", "cm", "dry", "-n", "w"]).status.success(), "dry-run create persisted");
    api.kubectl_ok(&["delete", "svc", "svc", "-n", "w", "--dry-run=server"]);
    api.kubectl_ok(&["get", "svc", "svc", "-n", "w"]);
}

#[test]
fn edit_scale_wait_and_output_formats() {
    let (_etcd, api) = start();
    let out = api.kubectl_stdin(&["apply", "-f", "-"], DEPLOYMENT);
    assert!(out.status.success(), "{}", stderr(&out));

    // edit, with the editor a sed command.
    let mut edit = api.kubectl_cmd(&["edit", "cm", "extra", "-n", "w"]);
    edit.env("KUBE_EDITOR", r#"sed -i s/a:\ \"1\"/a:\ \"edited\"/"#);
    let out = edit.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        json(&api.kubectl_ok(&["get", "cm", "extra", "-n", "w", "-o", "json"]))["data"]["a"],
        "edited"
    );
    // A grace period on a kind without graceful deletion is ignored, as upstream: the
    // object goes at once (conformance: LimitRange deleted with a 30 s grace period).
    api.kubectl_ok(&["create", "cm", "graceless", "-n", "w"]);
    api.kubectl_ok(&["delete", "cm", "graceless", "-n", "w", "--grace-period=30", "--wait=false"]);
    let out = api.kubectl(&["get", "cm", "graceless", "-n", "w"]);
    assert!(
        !out.status.success() && stderr(&out).contains("NotFound"),
        "still there: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // An edit racing a concurrent update: the editor changes the object under kubectl's
    // feet, so kubectl's patch (pinned to the resourceVersion it read) conflicts.
    let mut edit = api.kubectl_cmd(&["edit", "cm", "extra", "-n", "w", "--output-patch=false"]);
    let racer = format!(
        "kubectl --kubeconfig {} label cm extra -n w raced=yes >/dev/null && sed -i s/edited/lost/",
        api.kubeconfig.display()
    );
    let script = api.dir.path().join("race-editor.sh");
    std::fs::write(&script, format!("#!/bin/sh\n{racer} \"$1\"\n")).unwrap();
    std::process::Command::new("chmod").arg("+x").arg(&script).status().unwrap();
    edit.env("KUBE_EDITOR", &script);
    let out = edit.output().unwrap();
    let cm = json(&api.kubectl_ok(&["get", "cm", "extra", "-n", "w", "-o", "json"]));
    assert_eq!(cm["metadata"]["labels"]["raced"], "yes", "the concurrent update was lost");
    assert!(
        !out.status.success() || cm["data"]["a"] == "lost",
        "edit neither conflicted nor applied: {}",
        stderr(&out)
    );
    if !out.status.success() {
        assert!(
            stderr(&out).contains("the object has been modified") || stderr(&out).contains("Conflict"),
            "{}",
            stderr(&out)
        );
    }

    // scale, wait --for=jsonpath, sort-by, custom-columns.
    api.kubectl_ok(&["scale", "deployment", "app", "-n", "w", "--replicas=5"]);
    api.kubectl_ok(&["wait", "deploy/app", "-n", "w", "--for=jsonpath={.spec.replicas}=5", "--timeout=20s"]);
    for (name, image) in [("c", "z:1"), ("a", "y:1"), ("b", "x:1")] {
        api.kubectl_ok(&["run", name, "-n", "w", &format!("--image={image}")]);
    }
    // A pod's labels through each patch type.
    api.kubectl_ok(&["patch", "pod", "a", "-n", "w", "-p", r#"{"metadata":{"labels":{"smp":"1"}}}"#]);
    api.kubectl_ok(&[
        "patch",
        "pod",
        "a",
        "-n",
        "w",
        "--type=merge",
        "-p",
        r#"{"metadata":{"labels":{"merge":"1"}}}"#,
    ]);
    api.kubectl_ok(&[
        "patch",
        "pod",
        "a",
        "-n",
        "w",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/labels/smp"}]"#,
    ]);
    let labels =
        json(&api.kubectl_ok(&["get", "pod", "a", "-n", "w", "-o", "json"]))["metadata"]["labels"].clone();
    assert_eq!(
        (labels.get("smp"), labels["merge"].as_str(), labels["run"].as_str()),
        (None, Some("1"), Some("a"))
    );
    let sorted =
        api.kubectl_ok(&["get", "pods", "-n", "w", "--sort-by=.spec.containers[0].image", "-o", "name"]);
    assert_eq!(sorted.lines().collect::<Vec<_>>(), ["pod/b", "pod/a", "pod/c"]);
    let cols = api.kubectl_ok(&[
        "get",
        "pods",
        "-n",
        "w",
        "-o",
        "custom-columns=NAME:.metadata.name,IMAGE:.spec.containers[0].image",
        "--sort-by=.metadata.name",
    ]);
    let lines: Vec<_> = cols.lines().map(|l| l.split_whitespace().collect::<Vec<_>>()).collect();
    assert_eq!(lines, [vec!["NAME", "IMAGE"], vec!["a", "y:1"], vec!["b", "x:1"], vec!["c", "z:1"]]);

    // A valid pod with a deprecated node label: created, with upstream's warning.
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: warned, namespace: w}\nspec:\n  nodeSelector: {beta.kubernetes.io/arch: amd64}\n  containers: [{name: c, image: i}]\n";
    let out = api.kubectl_stdin(&["create", "-f", "-"], pod);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(r#"Warning: spec.nodeSelector[beta.kubernetes.io/arch]: deprecated since v1.14; use "kubernetes.io/arch" instead"#),
        "{}",
        stderr(&out)
    );

    // Cascading deletes leave upstream's finalizers on objects that have them to run.
    api.kubectl_ok(&["create", "configmap", "orphaned", "-n", "w"]);
    for (name, cascade, finalizer) in
        [("extra", "foreground", "foregroundDeletion"), ("orphaned", "orphan", "orphan")]
    {
        let hold = r#"{"metadata":{"finalizers":["e2e/hold"]}}"#;
        api.kubectl_ok(&["patch", "cm", name, "-n", "w", "--type=merge", "-p", hold]);
        api.kubectl_ok(&["delete", "cm", name, "-n", "w", &format!("--cascade={cascade}"), "--wait=false"]);
        let cm = json(&api.kubectl_ok(&["get", "cm", name, "-n", "w", "-o", "json"]));
        assert!(cm["metadata"]["finalizers"].as_array().unwrap().iter().any(|f| f == finalizer), "{cm}");
    }
}

#[test]
fn chunked_lists_see_every_object_once_under_churn() {
    let (_etcd, api) = start();
    let mut manifest = String::new();
    for i in 0..100 {
        manifest.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p{i:03}, namespace: w}}\nspec: {{containers: [{{name: c, image: i}}]}}\n"
        ));
    }
    let out = api.kubectl_stdin(&["create", "-f", "-"], &manifest);
    assert!(out.status.success(), "{}", stderr(&out));
    // Churn: other pods created and deleted while the chunked lists run.
    let churn_cfg = api.kubeconfig.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let churn = std::thread::spawn(move || {
        let mut i = 0;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            let name = format!("churn-{i}");
            let k = |args: &[&str]| {
                std::process::Command::new("kubectl")
                    .arg("--kubeconfig")
                    .arg(&churn_cfg)
                    .args(args)
                    .output()
                    .unwrap()
            };
            k(&["run", &name, "-n", "w", "--image=i"]);
            k(&["delete", "pod", &name, "-n", "w", "--grace-period=0", "--force"]);
            i += 1;
        }
    });
    for _ in 0..3 {
        let names = api.kubectl_ok(&["get", "pods", "-n", "w", "--chunk-size=7", "-o", "name"]);
        let mine: Vec<_> = names.lines().filter(|n| n.starts_with("pod/p")).collect();
        let mut dedup = mine.clone();
        dedup.dedup();
        assert_eq!(mine.len(), 100, "{names}");
        assert_eq!(dedup.len(), 100, "a pod listed twice");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    churn.join().unwrap();
}

#[test]
fn server_side_apply_by_two_managers() {
    let (_etcd, api) = start();
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: shared, namespace: w}\ndata: {a: \"1\", b: \"1\"}\n";
    let out = api.kubectl_stdin(&["apply", "--server-side", "--field-manager=alice", "-f", "-"], cm);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("configmap/shared serverside-applied"));
    // bob sets a field alice owns to another value: a conflict naming alice.
    let bob = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: shared, namespace: w}\ndata: {a: \"2\", c: \"3\"}\n";
    let out = api.kubectl_stdin(&["apply", "--server-side", "--field-manager=bob", "-f", "-"], bob);
    assert!(!out.status.success(), "conflict not detected");
    let err = stderr(&out);
    assert!(err.contains("conflict with \"alice\"") && err.contains(".data.a"), "{err}");
    // --force-conflicts: bob takes .data.a.
    let out = api.kubectl_stdin(
        &["apply", "--server-side", "--field-manager=bob", "--force-conflicts", "-f", "-"],
        bob,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let live =
        json(&api.kubectl_ok(&["get", "cm", "shared", "-n", "w", "-o", "json", "--show-managed-fields"]));
    assert_eq!(live["data"], serde_json::json!({"a": "2", "b": "1", "c": "3"}));
    let managers: Vec<_> = live["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["manager"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(managers, ["alice", "bob"]);
    assert_eq!(live["metadata"]["managedFields"][0]["fieldsV1"], serde_json::json!({"f:data": {"f:b": {}}}));
    // alice re-applies without b: b is removed (no one else owns it).
    let alice = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: shared, namespace: w}\ndata: {}\n";
    let out = api.kubectl_stdin(&["apply", "--server-side", "--field-manager=alice", "-f", "-"], alice);
    assert!(out.status.success(), "{}", stderr(&out));
    let live = json(&api.kubectl_ok(&["get", "cm", "shared", "-n", "w", "-o", "json"]));
    assert_eq!(live["data"], serde_json::json!({"a": "2", "c": "3"}));
    // An imperative change is recorded as an Update by its manager.
    api.kubectl_ok(&["label", "cm", "shared", "-n", "w", "team=x"]);
    let live =
        json(&api.kubectl_ok(&["get", "cm", "shared", "-n", "w", "-o", "json", "--show-managed-fields"]));
    let label = live["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "kubectl-label")
        .cloned();
    assert_eq!(
        label.map(|e| (e["operation"].clone(), e["fieldsV1"].clone())),
        Some((serde_json::json!("Update"), serde_json::json!({"f:metadata": {"f:labels": {"f:team": {}}}})))
    );
    // A PUT (kubectl replace) takes the field it changes from bob.
    let mut replaced = live.clone();
    replaced["data"]["c"] = serde_json::json!("4");
    let out = api.kubectl_stdin(&["replace", "-f", "-"], &replaced.to_string());
    assert!(out.status.success(), "{}", stderr(&out));
    let live =
        json(&api.kubectl_ok(&["get", "cm", "shared", "-n", "w", "-o", "json", "--show-managed-fields"]));
    let fields_of = |m: &str| {
        live["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["manager"] == m)
            .map(|e| e["fieldsV1"].clone())
    };
    assert_eq!(fields_of("kubectl-replace"), Some(serde_json::json!({"f:data": {"f:c": {}}})));
    assert_eq!(fields_of("bob"), Some(serde_json::json!({"f:data": {"f:a": {}}})));
}

#[test]
fn events_show_in_describe_and_kubectl_events() {
    let (_etcd, api) = start();
    api.kubectl_ok(&["run", "evpod", "-n", "w", "--image=i"]);
    let pod = json(&api.kubectl_ok(&["get", "pod", "evpod", "-n", "w", "-o", "json"]));
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let event = format!(
        "apiVersion: v1\nkind: Event\nmetadata: {{name: evpod.1, namespace: w}}\ninvolvedObject: {{kind: Pod, name: evpod, namespace: w, uid: {uid}, apiVersion: v1}}\nreason: Pulled\nmessage: image pulled\ntype: Normal\nsource: {{component: kubelet}}\nfirstTimestamp: \"2026-01-01T00:00:00Z\"\nlastTimestamp: \"2026-01-01T00:00:05Z\"\ncount: 3\n"
    );
    let out = api.kubectl_stdin(&["create", "-f", "-"], &event);
    assert!(out.status.success(), "{}", stderr(&out));
    let describe = api.kubectl_ok(&["describe", "pod", "evpod", "-n", "w"]);
    assert!(describe.contains("Pulled") && describe.contains("image pulled"), "{describe}");
    let events = api.kubectl_ok(&["events", "-n", "w"]);
    assert!(
        events.contains("Pulled") && events.contains("Pod/evpod") && events.contains("(x3 over"),
        "{events}"
    );
    // The same object through events.k8s.io/v1, in its shape.
    let ev = json(&api.kubectl_ok(&["get", "events.v1.events.k8s.io", "evpod.1", "-n", "w", "-o", "json"]));
    assert_eq!(
        (ev["regarding"]["name"].as_str(), ev["note"].as_str(), ev["deprecatedCount"].as_i64()),
        (Some("evpod"), Some("image pulled"), Some(3))
    );
}
