//! kube-controller-manager against our etcd, kube-apiserver and kube-scheduler, driven with
//! real kubectl. Nodes are objects whose kubelet is played by [`FakeKubelet`]: it renews
//! their Leases, marks bound pods Ready and finishes graceful deletions, so the
//! controllers see what they would see in a real cluster.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use e2e::apiserver::KubeApiserver;
use e2e::certs::rsa_key;
use e2e::component::{Component, KubeControllerManager, KubeScheduler};
use e2e::fake_kubelet::FakeKubelet;
use e2e::{Etcd, EtcdOptions, wait_for};

const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);

struct Cluster {
    kubelet: FakeKubelet,
    kcm: Vec<Component>,
    _sched: Component,
    api: Arc<KubeApiserver>,
    _etcd: Etcd,
    _keys: Option<tempfile::TempDir>,
}

impl Cluster {
    fn start(nodes: &[&str], kcm_args: &[&str]) -> Cluster {
        Self::start_with(nodes, &[], kcm_args, None)
    }

    /// As a kubeadm cluster runs: Node,RBAC authorization, service-account tokens, and
    /// every controller acting as its own `kube-system` service account
    /// (`--use-service-account-credentials`), so a controller whose bootstrap role lacks a
    /// permission it uses fails here.
    fn start_secured(nodes: &[&str], kcm_args: &[&str]) -> Cluster {
        let keys = tempfile::tempdir().expect("tempdir");
        let (key, public) = rsa_key(keys.path(), "sa");
        let api_args = [
            "--authorization-mode=Node,RBAC".to_string(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
            format!("--service-account-signing-key-file={}", key.display()),
            format!("--service-account-key-file={}", public.display()),
        ];
        let api_args: Vec<&str> = api_args.iter().map(String::as_str).collect();
        let mut kcm = vec!["--use-service-account-credentials"];
        kcm.extend_from_slice(kcm_args);
        Self::start_with(nodes, &api_args, &kcm, Some(keys))
    }

    fn start_with(
        nodes: &[&str],
        api_args: &[&str],
        kcm_args: &[&str],
        keys: Option<tempfile::TempDir>,
    ) -> Cluster {
        let etcd = Etcd::start(EtcdOptions::default());
        // Quota admission would refuse the bare pods these tests make under a requests.cpu
        // quota (as upstream); the controllers, not admission, are under test here.
        let mut args = vec!["--disable-admission-plugins=ServiceAccount,TaintNodesByCondition,ResourceQuota"];
        args.extend_from_slice(api_args);
        let api = Arc::new(KubeApiserver::start(&etcd.endpoint(), &args));
        let sched = KubeScheduler::start(&api, &["--leader-elect=false"]);
        let kubelet = FakeKubelet::start(&api.kubeconfig, nodes);
        let kcm = KubeControllerManager::start(&api, kcm_args);
        Cluster { kubelet, kcm: vec![kcm], _sched: sched, api, _etcd: etcd, _keys: keys }
    }

    fn kubectl(&self, args: &[&str]) -> String {
        self.api.kubectl_ok(args)
    }

    fn get(&self, args: &[&str]) -> Value {
        get(&self.api, args)
    }

    fn try_get(&self, args: &[&str]) -> Option<Value> {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        let out = self.api.kubectl(&a);
        out.status.success().then(|| e2e::json(&String::from_utf8_lossy(&out.stdout)))
    }

    fn items(&self, args: &[&str]) -> Vec<Value> {
        self.get(args)["items"].as_array().cloned().unwrap_or_default()
    }

    /// Pods with this label selector that are not being deleted.
    fn active_pods(&self, selector: &str) -> Vec<Value> {
        active(self.items(&["pods", "-l", selector]))
    }

    fn wait_available(&self, deployment: &str, replicas: i64) {
        wait_for(&format!("{deployment} has {replicas} available replicas"), WAIT, POLL, || {
            let d = self.get(&["deployment", deployment]);
            let s = &d["status"];
            let done = d["metadata"]["generation"] == s["observedGeneration"]
                && s["availableReplicas"].as_i64().unwrap_or(0) == replicas
                && s["updatedReplicas"].as_i64().unwrap_or(0) == replicas
                && s["replicas"].as_i64().unwrap_or(0) == replicas;
            let pods = self.active_pods(&format!("app={deployment}")).len() as i64;
            (done && pods == replicas).then_some(())
        });
    }

    fn rollout_status(&self, deployment: &str) {
        self.kubectl(&["rollout", "status", &format!("deployment/{deployment}"), "--timeout=60s"]);
    }
}

fn get(api: &KubeApiserver, args: &[&str]) -> Value {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    e2e::json(&api.kubectl_ok(&a))
}

fn active(pods: Vec<Value>) -> Vec<Value> {
    pods.into_iter().filter(|p| p["metadata"]["deletionTimestamp"].is_null()).collect()
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn images(pods: &[Value]) -> Vec<String> {
    pods.iter().map(|p| p["spec"]["containers"][0]["image"].as_str().unwrap_or("").to_owned()).collect()
}

/// Samples `f` on a thread until stopped; returns every sample.
struct Monitor<T: Send + 'static> {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<T>>>,
}

impl<T: Send + 'static> Monitor<T> {
    fn start(mut f: impl FnMut() -> T + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut out = Vec::new();
            while !s.load(Ordering::SeqCst) {
                out.push(f());
            }
            out
        });
        Monitor { stop, thread: Some(thread) }
    }

    fn finish(mut self) -> Vec<T> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().map(|t| t.join().expect("monitor")).unwrap_or_default()
    }
}

impl<T: Send + 'static> Drop for Monitor<T> {
    /// A failing test still stops the sampler, so the cluster it holds is torn down.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn deployment_scales_rolls_back_and_pauses() {
    let c = Cluster::start(&["node-a", "node-b"], &[]);
    c.kubectl(&["create", "deployment", "web", "--image=localhost/busybox:1", "--replicas=3"]);
    c.wait_available("web", 3);
    assert_eq!(c.items(&["rs", "-l", "app=web"]).len(), 1, "one ReplicaSet");

    c.kubectl(&["scale", "deployment/web", "--replicas=10"]);
    c.wait_available("web", 10);
    c.kubectl(&["scale", "deployment/web", "--replicas=2"]);
    c.wait_available("web", 2);

    // maxSurge 1 / maxUnavailable 0: never fewer than 2 ready pods, never more than 3.
    c.kubectl(&[
        "patch",
        "deployment/web",
        "-p",
        r#"{"spec":{"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":1,"maxUnavailable":0}}}}"#,
    ]);
    c.wait_available("web", 2);
    let api = c.api.clone();
    let monitor = Monitor::start(move || {
        let pods =
            active(get(&api, &["pods", "-l", "app=web"])["items"].as_array().cloned().unwrap_or_default());
        (pods.iter().filter(|p| is_ready(p)).count(), pods.len())
    });
    c.kubectl(&["set", "image", "deployment/web", "busybox=localhost/busybox:2"]);
    c.rollout_status("web");
    c.wait_available("web", 2);
    let samples = monitor.finish();
    assert!(samples.len() > 3, "the rollout was observed");
    let min_ready = samples.iter().map(|s| s.0).min().unwrap();
    let max_pods = samples.iter().map(|s| s.1).max().unwrap();
    assert!(min_ready >= 2, "ready pods fell to {min_ready} during the rollout");
    assert!(max_pods <= 3, "{max_pods} pods existed at once with maxSurge 1");
    assert_eq!(images(&c.active_pods("app=web")), vec!["localhost/busybox:2"; 2]);

    let history = c.kubectl(&["rollout", "history", "deployment/web"]);
    let revisions: Vec<&str> = history
        .lines()
        .skip_while(|l| !l.starts_with("REVISION"))
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(revisions.len(), 2, "two revisions:\n{history}");

    c.kubectl(&["rollout", "undo", "deployment/web"]);
    c.rollout_status("web");
    c.wait_available("web", 2);
    assert_eq!(images(&c.active_pods("app=web")), vec!["localhost/busybox:1"; 2]);
    assert_eq!(c.items(&["rs", "-l", "app=web"]).len(), 2, "undo reused the first ReplicaSet");

    c.kubectl(&["rollout", "pause", "deployment/web"]);
    c.kubectl(&["set", "image", "deployment/web", "busybox=localhost/busybox:3"]);
    wait_for("paused deployment observed", WAIT, POLL, || {
        let d = c.get(&["deployment", "web"]);
        let paused = d["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Progressing" && c["reason"] == "DeploymentPaused");
        (d["metadata"]["generation"] == d["status"]["observedGeneration"] && paused).then_some(())
    });
    assert_eq!(images(&c.active_pods("app=web")), vec!["localhost/busybox:1"; 2], "paused: no rollout");
    assert_eq!(c.items(&["rs", "-l", "app=web"]).len(), 2, "paused: no new ReplicaSet");
    c.kubectl(&["rollout", "resume", "deployment/web"]);
    c.rollout_status("web");
    c.wait_available("web", 2);
    assert_eq!(images(&c.active_pods("app=web")), vec!["localhost/busybox:3"; 2]);
}

#[test]
fn replicasets_replace_pods_and_deletion_propagates() {
    let c = Cluster::start(&["node-a"], &[]);
    c.kubectl(&["create", "deployment", "a", "--image=localhost/busybox:1", "--replicas=2"]);
    c.wait_available("a", 2);
    let victim = c.active_pods("app=a")[0]["metadata"]["name"].as_str().unwrap().to_owned();
    c.kubectl(&["delete", "pod", &victim, "--wait=false"]);
    wait_for("a replacement pod", WAIT, POLL, || {
        let pods = c.active_pods("app=a");
        let names: Vec<&str> = pods.iter().filter_map(|p| p["metadata"]["name"].as_str()).collect();
        (pods.len() == 2 && !names.contains(&victim.as_str()) && pods.iter().all(is_ready)).then_some(())
    });

    // Background: the Deployment goes at once, the garbage collector removes the rest.
    c.kubectl(&["delete", "deployment", "a"]);
    wait_for("ReplicaSets and pods of a collected", WAIT, POLL, || {
        (c.items(&["rs", "-l", "app=a"]).is_empty() && c.items(&["pods", "-l", "app=a"]).is_empty())
            .then_some(())
    });

    // Foreground: the Deployment stays until its dependents are gone. A finalizer on one
    // pod holds the chain; the Deployment must wait for it.
    c.kubectl(&["create", "deployment", "b", "--image=localhost/busybox:1", "--replicas=2"]);
    c.wait_available("b", 2);
    let held = c.active_pods("app=b")[0]["metadata"]["name"].as_str().unwrap().to_owned();
    c.kubectl(&["patch", "pod", &held, "-p", r#"{"metadata":{"finalizers":["e2e.k8s.io/hold"]}}"#]);
    c.kubectl(&["delete", "deployment", "b", "--cascade=foreground", "--wait=false"]);
    wait_for("everything but the held pod deleted", WAIT, POLL, || {
        let pods = c.items(&["pods", "-l", "app=b"]);
        let rs = c.items(&["rs", "-l", "app=b"]);
        let only_held = pods.len() == 1 && pods[0]["metadata"]["name"] == held.as_str();
        let rs_deleting = rs.len() == 1 && !rs[0]["metadata"]["deletionTimestamp"].is_null();
        (only_held && rs_deleting).then_some(())
    });
    let d = c.get(&["deployment", "b"]);
    assert!(!d["metadata"]["deletionTimestamp"].is_null());
    assert!(d["metadata"]["finalizers"].as_array().unwrap().iter().any(|f| f == "foregroundDeletion"));
    c.kubectl(&[
        "patch",
        "pod",
        &held,
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    wait_for("deployment b deleted after its dependents", WAIT, POLL, || {
        c.try_get(&["deployment", "b"]).is_none().then_some(())
    });
    assert!(c.items(&["pods", "-l", "app=b"]).is_empty() && c.items(&["rs", "-l", "app=b"]).is_empty());

    // Orphan: the ReplicaSet and its pods stay, without an owner.
    c.kubectl(&["create", "deployment", "o", "--image=localhost/busybox:1", "--replicas=2"]);
    c.wait_available("o", 2);
    c.kubectl(&["delete", "deployment", "o", "--cascade=orphan"]);
    wait_for("orphaned ReplicaSet released", WAIT, POLL, || {
        let rs = c.items(&["rs", "-l", "app=o"]);
        (rs.len() == 1 && rs[0]["metadata"]["ownerReferences"].as_array().is_none_or(|r| r.is_empty()))
            .then_some(())
    });
    assert!(c.try_get(&["deployment", "o"]).is_none());
    assert_eq!(c.active_pods("app=o").len(), 2, "orphaned pods keep running");
}

#[test]
fn endpointslices_follow_pod_readiness() {
    let c = Cluster::start(&["node-a"], &[]);
    c.kubectl(&["create", "deployment", "web", "--image=localhost/busybox:1", "--replicas=2"]);
    c.wait_available("web", 2);
    c.kubectl(&["expose", "deployment", "web", "--port=80", "--target-port=8080"]);
    let endpoints = || -> Vec<(String, bool)> {
        let slices = c.items(&["endpointslices", "-l", "kubernetes.io/service-name=web"]);
        slices
            .iter()
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .map(|e| {
                (e["targetRef"]["name"].as_str().unwrap_or("").to_owned(), e["conditions"]["ready"] == true)
            })
            .collect()
    };
    wait_for("two ready endpoints", WAIT, POLL, || {
        let e = endpoints();
        (e.len() == 2 && e.iter().all(|(_, r)| *r)).then_some(())
    });
    let slice = &c.items(&["endpointslices", "-l", "kubernetes.io/service-name=web"])[0];
    assert_eq!(slice["addressType"], "IPv4");
    assert_eq!(slice["ports"][0]["port"], 8080);
    assert_eq!(
        slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "endpointslice-controller.k8s.io"
    );
    assert_eq!(slice["metadata"]["ownerReferences"][0]["kind"], "Service");

    let pod = endpoints()[0].0.clone();
    c.kubelet.set_ready(&format!("default/{pod}"), false);
    wait_for("the not-ready pod's endpoint not ready", WAIT, POLL, || {
        let e = endpoints();
        (e.len() == 2 && e.iter().any(|(n, r)| *n == pod && !*r) && e.iter().filter(|(_, r)| *r).count() == 1)
            .then_some(())
    });
    c.kubelet.set_ready(&format!("default/{pod}"), true);
    wait_for("ready again", WAIT, POLL, || endpoints().iter().all(|(_, r)| *r).then_some(()));
    let ep = c.get(&["endpoints", "web"]);
    assert_eq!(ep["subsets"][0]["addresses"].as_array().map_or(0, |a| a.len()), 2, "{ep}");
}

#[test]
fn unreachable_node_pods_are_evicted_and_replaced() {
    let c = Cluster::start_secured(
        &["node-a", "node-b"],
        &["--node-monitor-grace-period=6s", "--node-monitor-period=1s"],
    );
    c.kubectl(&["create", "deployment", "web", "--image=localhost/busybox:1", "--replicas=4"]);
    c.kubectl(&[
        "patch",
        "deployment/web",
        "-p",
        r#"{"spec":{"template":{"spec":{"tolerations":[{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":3}]}}}}"#,
    ]);
    c.wait_available("web", 4);
    let on = |node: &str| -> Vec<Value> {
        c.active_pods("app=web").into_iter().filter(|p| p["spec"]["nodeName"] == node).collect()
    };
    assert!(!on("node-a").is_empty(), "pods were spread to node-a");

    c.kubelet.set_alive("node-a", false);
    wait_for("node-a Unknown and tainted unreachable", WAIT, POLL, || {
        let n = c.get(&["node", "node-a"]);
        let unknown = n["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "Unknown");
        let tainted = n["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["key"] == "node.kubernetes.io/unreachable" && t["effect"] == "NoExecute");
        (unknown && tainted).then_some(())
    });
    wait_for("pods evicted from node-a and replaced on node-b", WAIT, POLL, || {
        let b = on("node-b");
        (on("node-a").is_empty() && b.len() == 4 && b.iter().all(is_ready)).then_some(())
    });
    let evicted: Vec<Value> = c
        .items(&["pods", "-l", "app=web"])
        .into_iter()
        .filter(|p| p["spec"]["nodeName"] == "node-a")
        .collect();
    assert!(!evicted.is_empty() && evicted.iter().all(|p| !p["metadata"]["deletionTimestamp"].is_null()));
    assert!(
        evicted.iter().all(|p| p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "DisruptionTarget" && c["reason"] == "DeletionByTaintManager")),
        "evicted pods carry DisruptionTarget"
    );
}

#[test]
fn namespace_deletion_removes_its_contents() {
    let c = Cluster::start_secured(&["node-a"], &[]);
    c.kubectl(&["create", "namespace", "doomed"]);
    wait_for("default ServiceAccount and root CA ConfigMap", WAIT, POLL, || {
        let sa = c.try_get(&["-n", "doomed", "serviceaccount", "default"]);
        let ca = c.try_get(&["-n", "doomed", "configmap", "kube-root-ca.crt"]);
        let ok = sa.is_some()
            && ca.is_some_and(|cm| {
                cm["data"]["ca.crt"].as_str().is_some_and(|p| p.contains("BEGIN CERTIFICATE"))
            });
        ok.then_some(())
    });
    c.kubectl(&[
        "-n",
        "doomed",
        "create",
        "deployment",
        "web",
        "--image=localhost/busybox:1",
        "--replicas=2",
    ]);
    c.kubectl(&["-n", "doomed", "create", "configmap", "cfg", "--from-literal=a=b"]);
    c.kubectl(&["-n", "doomed", "create", "service", "clusterip", "svc", "--tcp=80:80"]);
    wait_for("pods running in doomed", WAIT, POLL, || {
        let pods = active(c.items(&["-n", "doomed", "pods"]));
        (pods.len() == 2 && pods.iter().all(is_ready)).then_some(())
    });
    c.kubectl(&["delete", "namespace", "doomed", "--wait=false"]);
    wait_for("namespace doomed gone", WAIT, POLL, || {
        c.try_get(&["namespace", "doomed"]).is_none().then_some(())
    });
    assert!(c.items(&["pods", "-A"]).iter().all(|p| p["metadata"]["namespace"] != "doomed"));
}

#[test]
fn quota_aggregation_podgc_health_and_metrics() {
    let c = Cluster::start(&["node-a"], &["--terminated-pod-gc-threshold=1"]);
    let kcm = &c.kcm[0];
    let (code, body) = kcm.get("/healthz?verbose");
    assert_eq!(code, 200, "{body}");
    for name in ["replicaset-controller", "deployment-controller", "garbage-collector-controller"] {
        assert!(body.contains(&format!("[+]{name} ok")), "{name} in /healthz:\n{body}");
    }

    c.kubectl(&["create", "quota", "q", "--hard=pods=5,requests.cpu=2,configmaps=10"]);
    c.kubectl(&["create", "deployment", "web", "--image=localhost/busybox:1", "--replicas=2"]);
    c.kubectl(&["set", "resources", "deployment/web", "--requests=cpu=250m"]);
    c.wait_available("web", 2);
    wait_for("quota usage", WAIT, POLL, || {
        let used = c.get(&["quota", "q"])["status"]["used"].clone();
        (used["pods"] == "2" && used["requests.cpu"] == "500m" && used["configmaps"].is_string())
            .then_some(())
    });
    // Object counts of workload kinds: deleting a ReplicaSet gives its count back at once,
    // not at the next full resync (5 minutes).
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "idle"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "idle"}},
            "template": {"metadata": {"labels": {"app": "idle"}},
                "spec": {"containers": [{"name": "c", "image": "localhost/busybox:1"}]}}}});
    let out = c.api.kubectl_stdin(&["create", "-f", "-"], &rs.to_string());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    c.kubectl(&["create", "quota", "objects", "--hard=count/replicasets.apps=10"]);
    let replicasets_counted = |with_idle: bool| {
        wait_for(
            &format!("count/replicasets.apps counts every ReplicaSet (idle: {with_idle})"),
            WAIT,
            POLL,
            || {
                let items = c.items(&["replicasets"]);
                let idle = items.iter().any(|r| r["metadata"]["name"] == "idle");
                let used = c.get(&["quota", "objects"])["status"]["used"]["count/replicasets.apps"].clone();
                (idle == with_idle && used == items.len().to_string()).then_some(())
            },
        )
    };
    replicasets_counted(true);
    c.kubectl(&["delete", "replicaset", "idle"]);
    replicasets_counted(false);
    assert!(kcm.metric("workqueue_adds_total", &["name=\"replicaset\""]) > 0.0);
    assert!(kcm.metric("workqueue_depth", &["name=\"deployment\""]) >= 0.0);

    let roles = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "e2e-aggregate"},
         "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"e2e/aggregate": "true"}}]}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "e2e-part", "labels": {"e2e/aggregate": "true"}},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
    ]});
    let out = c.api.kubectl_stdin(&["apply", "-f", "-"], &roles.to_string());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_for("aggregated rules", WAIT, POLL, || {
        let r = c.get(&["clusterrole", "e2e-aggregate"]);
        (r["rules"][0]["verbs"] == json!(["get", "list"])).then_some(())
    });

    // Three finished pods with a threshold of one: the two oldest are collected.
    for name in ["done-1", "done-2", "done-3"] {
        c.kubectl(&["run", name, "--image=localhost/busybox:1", "--restart=Never"]);
        wait_for(&format!("{name} running"), WAIT, POLL, || {
            c.try_get(&["pod", name]).filter(is_ready).map(drop)
        });
        c.kubectl(&[
            "patch",
            "pod",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Succeeded"}}"#,
        ]);
    }
    wait_for("terminated pods over the threshold collected", WAIT, POLL, || {
        let left: Vec<String> = c
            .items(&["pods"])
            .iter()
            .filter(|p| p["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("done-")))
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
            .collect();
        (left == vec!["done-3".to_string()]).then_some(())
    });
}

#[test]
fn leader_handover_never_overshoots() {
    let args = [
        "--leader-elect-lease-duration=6s",
        "--leader-elect-renew-deadline=4s",
        "--leader-elect-retry-period=1s",
    ];
    let mut c = Cluster::start(&["node-a", "node-b"], &args);
    c.kcm.push(KubeControllerManager::start(&c.api, &args));
    c.kubectl(&["create", "deployment", "web", "--image=localhost/busybox:1", "--replicas=6"]);
    c.wait_available("web", 6);
    let lease_api = c.api.clone();
    let holder = move || -> String {
        get(&lease_api, &["-n", "kube-system", "lease", "kube-controller-manager"])["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let first = holder();
    // Which process leads: the one whose metric says so.
    let leader = (0..2)
        .find(|i| c.kcm[*i].metric("leader_election_master_status", &[]) == 1.0)
        .expect("one replica leads");
    assert_eq!((0..2).filter(|i| c.kcm[*i].metric("leader_election_master_status", &[]) == 1.0).count(), 1);

    let api = c.api.clone();
    // The active pods each ReplicaSet owns, sampled throughout: with the scale from 6 to
    // 10 racing the handover, a replica acting on stale state would overshoot 10.
    let monitor = Monitor::start(move || {
        let rs = get(&api, &["rs", "-l", "app=web"])["items"].as_array().cloned().unwrap_or_default();
        let pods =
            active(get(&api, &["pods", "-l", "app=web"])["items"].as_array().cloned().unwrap_or_default());
        rs.iter()
            .map(|r| {
                let uid = &r["metadata"]["uid"];
                pods.iter().filter(|p| p["metadata"]["ownerReferences"][0]["uid"] == *uid).count()
            })
            .collect::<Vec<_>>()
    });
    let killed = Instant::now();
    c.kcm[leader].kill9();
    c.kubectl(&["scale", "deployment/web", "--replicas=10"]);
    let took = wait_for("a new leader", Duration::from_secs(30), POLL, || {
        let h = holder();
        (!h.is_empty() && h != first).then(|| killed.elapsed())
    });
    eprintln!("lease handed over {took:?} after the leader was killed");
    c.wait_available("web", 10);
    let samples = monitor.finish();
    let most = samples.iter().flatten().max().copied().unwrap_or(0);
    assert!(most <= 10, "a ReplicaSet had {most} pods; 10 were desired");
    assert_eq!(c.active_pods("app=web").len(), 10);
}

/// openssl in `dir`, failing the test with its stderr.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out =
        std::process::Command::new("openssl").current_dir(dir).args(args).output().expect("running openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A new key (`newkey`, as openssl's -newkey takes it) and PKCS#10 request for `subject`:
/// `dir/<name>.key` and `dir/<name>.csr`.
fn new_request(dir: &std::path::Path, name: &str, subject: &str, newkey: &[&str]) {
    let (key, csr) = (format!("{name}.key"), format!("{name}.csr"));
    let mut args = vec!["req", "-new", "-nodes", "-subj", subject, "-keyout", &key, "-out", &csr, "-newkey"];
    args.extend_from_slice(newkey);
    openssl(dir, &args);
}

/// A CSR object for the PEM request in `dir/<name>.csr`.
fn csr_object(dir: &std::path::Path, name: &str, signer: &str, usages: &[&str]) -> String {
    use base64::Engine;
    let pem = std::fs::read(dir.join(format!("{name}.csr"))).expect("csr");
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(pem),
            "signerName": signer,
            "usages": usages,
            "expirationSeconds": 3600,
        },
    })
    .to_string()
}

/// The Certificates API's controllers: `csrsigning` issues certificates from a kubeadm-style
/// CA (an RSA PKCS#1 key) that verify against it and authenticate to the API server;
/// `csrapproving` approves a kubelet client CSR from a bootstrapper after a
/// SubjectAccessReview and leaves one from a user without that permission pending; a request
/// the signer's policy refuses is failed, not signed.
#[test]
fn certificate_signing_requests_are_approved_and_signed() {
    use base64::Engine;
    let pki = tempfile::tempdir().expect("tempdir");
    let d = pki.path();
    openssl(d, &["genrsa", "-traditional", "-out", "ca.key", "2048"]);
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "ca.key",
            "-subj",
            "/CN=cluster-ca",
            "-days",
            "2",
            "-out",
            "ca.crt",
        ],
    );
    let client_ca = format!("--client-ca-file={}", d.join("ca.crt").display());
    let signing = [
        format!("--cluster-signing-cert-file={}", d.join("ca.crt").display()),
        format!("--cluster-signing-key-file={}", d.join("ca.key").display()),
    ];
    let signing: Vec<&str> = signing.iter().map(String::as_str).collect();
    let c = Cluster::start_with(&[], &["--authorization-mode=Node,RBAC", &client_ca], &signing, None);
    let create_as = |name: &str, signer: &str, usages: &[&str], as_user: &[&str]| {
        let mut args = vec!["create", "-f", "-"];
        args.extend_from_slice(as_user);
        let out = c.api.kubectl_stdin(&args, &csr_object(d, name, signer, usages));
        assert!(out.status.success(), "creating {name}: {}", String::from_utf8_lossy(&out.stderr));
    };
    // Waits for the certificate, writes it to `<name>.crt` and has OpenSSL check its chain
    // (including the authority key identifier against the CA's).
    let issued = |name: &str| {
        let b64 = wait_for(&format!("{name}'s certificate"), WAIT, POLL, || {
            c.get(&["csr", name])["status"]["certificate"].as_str().map(String::from)
        });
        let pem = base64::engine::general_purpose::STANDARD.decode(b64).expect("base64");
        let file = format!("{name}.crt");
        std::fs::write(d.join(&file), &pem).expect("write cert");
        openssl(d, &["verify", "-CAfile", "ca.crt", &file]);
    };
    let client = ["digital signature", "client auth"];

    // A user's client certificate, approved by the admin, then used.
    new_request(d, "alice", "/O=devs/CN=alice", &["rsa:2048"]);
    create_as("alice", "kubernetes.io/kube-apiserver-client", &client, &[]);
    c.kubectl(&["certificate", "approve", "alice"]);
    issued("alice");
    let server = format!("--server={}", c.api.url());
    let ca = format!("--certificate-authority={}", c.api.dir.path().join("certs/apiserver.crt").display());
    let (cert, key) = (
        format!("--client-certificate={}", d.join("alice.crt").display()),
        format!("--client-key={}", d.join("alice.key").display()),
    );
    let whoami = c.api.kubectl_ok(&[
        "--kubeconfig=/dev/null",
        &server,
        &ca,
        &cert,
        &key,
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username} {.status.userInfo.groups}",
    ]);
    assert!(whoami.starts_with("alice ") && whoami.contains("devs"), "whoami: {whoami}");

    // Kubelet client certificates: bootstrappers may have theirs auto-approved (kubeadm's
    // binding), anyone else's waits for a person. Both may create CSRs (kubeadm's
    // kubelet-bootstrap binding).
    c.kubectl(&[
        "create",
        "clusterrolebinding",
        "node-autoapprove-bootstrap",
        "--clusterrole=system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        "--group=system:bootstrappers",
    ]);
    c.kubectl(&[
        "create",
        "clusterrolebinding",
        "kubelet-bootstrap",
        "--clusterrole=system:node-bootstrapper",
        "--group=system:bootstrappers",
        "--user=mallory",
    ]);
    let kubelet = "kubernetes.io/kube-apiserver-client-kubelet";
    // Named as kubelets name theirs (base64url: capitals and underscores are fine).
    const N1: &str = "node-csr-4Q4kQU9Svr_tCw";
    new_request(d, "mallory", "/O=system:nodes/CN=system:node:n2", &["rsa:2048"]);
    create_as("mallory", kubelet, &client, &["--as=mallory"]);
    new_request(
        d,
        N1,
        "/O=system:nodes/CN=system:node:n1",
        &["ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"],
    );
    create_as(N1, kubelet, &client, &["--as=system:bootstrap:abcdef", "--as-group=system:bootstrappers"]);
    issued(N1);
    let n1 = c.get(&["csr", N1]);
    let approved = &n1["status"]["conditions"][0];
    assert_eq!(
        (approved["type"].as_str(), approved["reason"].as_str()),
        (Some("Approved"), Some("AutoApproved")),
        "{n1}"
    );
    let mallory = c.get(&["csr", "mallory"]);
    assert!(mallory["status"].get("conditions").is_none(), "mallory's CSR was acted on: {mallory}");

    // A serving certificate without any name: approved by the admin, failed by the signer.
    new_request(d, "serving", "/O=system:nodes/CN=system:node:n1", &["rsa:2048"]);
    create_as("serving", "kubernetes.io/kubelet-serving", &["digital signature", "server auth"], &[]);
    c.kubectl(&["certificate", "approve", "serving"]);
    let failed = wait_for("the serving CSR to fail", WAIT, POLL, || {
        let conds = c.get(&["csr", "serving"])["status"]["conditions"].as_array()?.clone();
        conds.into_iter().find(|c| c["type"] == "Failed")
    });
    assert_eq!(failed["reason"], "SignerValidationFailure");
    assert!(c.get(&["csr", "serving"])["status"].get("certificate").is_none());
}
