//! kube-scheduler against our etcd and kube-apiserver, driven with real kubectl. Nodes are
//! created through the API (no kubelet: a node is just an object with allocatable
//! resources), pods are created pending, and the tests watch where the scheduler binds
//! them and what it reports.

use std::time::Duration;

use serde_json::{Value, json};

use e2e::apiserver::KubeApiserver;
use e2e::component::{Component, KubeScheduler};
use e2e::{Etcd, EtcdOptions, wait_for};

const WAIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(200);

struct Cluster {
    sched: Vec<Component>,
    api: KubeApiserver,
    _etcd: Etcd,
}

impl Cluster {
    fn start(scheduler_args: &[&str]) -> Cluster {
        let etcd = Etcd::start(EtcdOptions::default());
        // The tests set spec.priority directly, which Priority admission refuses as upstream.
        let api = KubeApiserver::start(
            &etcd.endpoint(),
            &["--disable-admission-plugins=ServiceAccount,TaintNodesByCondition,Priority"],
        );
        let sched = KubeScheduler::start(&api, scheduler_args);
        let c = Cluster { sched: vec![sched], api, _etcd: etcd };
        wait_for("scheduler ready", WAIT, POLL, || (c.sched[0].get("/readyz").0 == 200).then_some(()));
        c
    }

    fn apply(&self, objects: &[Value]) {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
        let out = self.api.kubectl_stdin(&["apply", "-f", "-"], &list.to_string());
        assert!(out.status.success(), "apply failed: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn get(&self, args: &[&str]) -> Value {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        e2e::json(&self.api.kubectl_ok(&a))
    }

    fn node_of(&self, pod: &str) -> Option<String> {
        let p = self.get(&["pod", pod]);
        p["spec"]["nodeName"].as_str().map(str::to_owned)
    }

    fn wait_bound(&self, pod: &str) -> String {
        wait_for(&format!("pod {pod} bound"), WAIT, POLL, || self.node_of(pod))
    }

    /// Waits for a FailedScheduling event about `pod` and returns its message.
    fn wait_failed(&self, pod: &str) -> String {
        wait_for(&format!("FailedScheduling for {pod}"), WAIT, POLL, || {
            self.events(pod).into_iter().find(|(r, _)| r == "FailedScheduling").map(|(_, m)| m)
        })
    }

    fn events(&self, pod: &str) -> Vec<(String, String)> {
        let list = self.get(&["events"]);
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["involvedObject"]["name"] == pod)
            .map(|e| {
                (
                    e["reason"].as_str().unwrap_or("").to_owned(),
                    e["message"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    }

    /// Deletes every pod at once (no kubelet would ever confirm a graceful deletion).
    fn clear(&self) {
        self.api.kubectl_ok(&["delete", "pods", "--all", "--force", "--grace-period=0", "--wait=false"]);
        self.api.kubectl_ok(&["delete", "nodes", "--all"]);
        self.api.kubectl_ok(&["delete", "events", "--all"]);
        // The scheduler's cache must have seen the deletions before the next scenario.
        wait_for("pods gone", WAIT, POLL, || {
            self.get(&["pods"])["items"].as_array().unwrap().is_empty().then_some(())
        });
    }
}

fn node(name: &str, cpu: &str, memory: &str, labels: Value) -> Value {
    let mut labels = labels;
    labels["kubernetes.io/hostname"] = json!(name);
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}
        }
    })
}

/// A pending pod requesting `cpu`/`memory` ("0" for none); `extra` is merged into its spec.
fn pod(name: &str, cpu: &str, memory: &str, extra: Value) -> Value {
    let mut requests = serde_json::Map::new();
    if cpu != "0" {
        requests.insert("cpu".into(), json!(cpu));
    }
    if memory != "0" {
        requests.insert("memory".into(), json!(memory));
    }
    let mut spec = json!({"containers": [{"name": "c", "image": "localhost/busybox:latest", "resources": {"requests": requests}}]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    let labels = spec.as_object_mut().unwrap().remove("labels").unwrap_or(json!({}));
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec})
}

#[test]
fn plugins_place_pods_as_upstream() {
    let c = Cluster::start(&[]);

    // NodeResourcesFit: only the big node has room.
    c.apply(&[node("small", "1", "2Gi", json!({})), node("big", "4", "8Gi", json!({}))]);
    c.apply(&[pod("fits-big", "2", "1Gi", json!({}))]);
    assert_eq!(c.wait_bound("fits-big"), "big");
    c.apply(&[pod("too-big", "8", "1Gi", json!({}))]);
    let msg = c.wait_failed("too-big");
    assert_eq!(
        msg,
        "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    );
    let cond = c.get(&["pod", "too-big"])["status"]["conditions"][0].clone();
    assert_eq!(
        (cond["type"].as_str(), cond["status"].as_str(), cond["reason"].as_str()),
        (Some("PodScheduled"), Some("False"), Some("Unschedulable"))
    );
    c.clear();

    // TaintToleration, NodeAffinity (nodeSelector, required and preferred), NodeUnschedulable.
    let mut tainted = node("tainted", "4", "8Gi", json!({"disk": "ssd"}));
    tainted["spec"] = json!({"taints": [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]});
    let mut cordoned = node("cordoned", "4", "8Gi", json!({"disk": "ssd"}));
    cordoned["spec"] = json!({"unschedulable": true});
    c.apply(&[
        tainted,
        cordoned,
        node("plain", "4", "8Gi", json!({"disk": "hdd"})),
        node("fast", "4", "8Gi", json!({"disk": "ssd", "zone": "z1"})),
    ]);
    c.apply(&[
        pod("needs-ssd", "100m", "0", json!({"nodeSelector": {"disk": "ssd"}})),
        pod("unplaceable", "100m", "0", json!({
            "nodeSelector": {"dedicated-ok": "x"},
        })),
        pod("prefers-z1", "100m", "0", json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}}
        ]}}})),
        pod("on-tainted", "100m", "0", json!({
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["tainted"]}]}
            ]}}}
        })),
    ]);
    // The only untainted, schedulable ssd node.
    assert_eq!(c.wait_bound("needs-ssd"), "fast");
    assert_eq!(c.wait_bound("prefers-z1"), "fast");
    assert_eq!(c.wait_bound("on-tainted"), "tainted");
    assert_eq!(
        c.wait_failed("unplaceable"),
        "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: infra}, 1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
    );
    c.clear();

    // NodePorts: one host port per node.
    c.apply(&[node("p1", "4", "8Gi", json!({})), node("p2", "4", "8Gi", json!({}))]);
    let ports = |name: &str| {
        let mut p = pod(name, "100m", "0", json!({}));
        p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": 8080}]);
        p
    };
    c.apply(&[ports("web-1"), ports("web-2")]);
    let (a, b) = (c.wait_bound("web-1"), c.wait_bound("web-2"));
    assert_ne!(a, b, "two pods with hostPort 8080 on one node");
    c.apply(&[ports("web-3")]);
    assert!(c.wait_failed("web-3").contains("2 node(s) didn't have free ports for the requested pod ports"));
    c.clear();

    // InterPodAffinity: replicas apart (required anti-affinity), a client next to its server.
    c.apply(&[
        node("h1", "4", "8Gi", json!({})),
        node("h2", "4", "8Gi", json!({})),
        node("h3", "4", "8Gi", json!({})),
    ]);
    let replica = |name: &str| {
        pod(
            name,
            "100m",
            "0",
            json!({"labels": {"app": "db"}, "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
            ]}}}),
        )
    };
    c.apply(&[replica("db-0"), replica("db-1"), replica("db-2")]);
    let mut hosts: Vec<String> = ["db-0", "db-1", "db-2"].iter().map(|p| c.wait_bound(p)).collect();
    hosts.sort();
    assert_eq!(hosts, ["h1", "h2", "h3"]);
    c.apply(&[replica("db-3")]);
    assert!(c.wait_failed("db-3").contains("3 node(s) didn't match pod anti-affinity rules"));
    c.apply(&[pod(
        "client",
        "100m",
        "0",
        json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname",
             "namespaces": ["default"]}
        ]}}}),
    )]);
    let client_node = c.wait_bound("client");
    assert!(["h1", "h2", "h3"].contains(&client_node.as_str()));
    c.clear();

    // PodTopologySpread: 6 pods over two zones of two nodes each, maxSkew 1.
    c.apply(&[
        node("a1", "4", "8Gi", json!({"topology.kubernetes.io/zone": "a"})),
        node("a2", "4", "8Gi", json!({"topology.kubernetes.io/zone": "a"})),
        node("b1", "4", "8Gi", json!({"topology.kubernetes.io/zone": "b"})),
        node("b2", "4", "8Gi", json!({"topology.kubernetes.io/zone": "b"})),
    ]);
    let spread = |name: &str| {
        pod(
            name,
            "100m",
            "0",
            json!({"labels": {"app": "spread"}, "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchLabels": {"app": "spread"}}}
            ]}),
        )
    };
    for i in 0..6 {
        // One at a time, so every decision sees the previous ones bound.
        let name = format!("s-{i}");
        c.apply(&[spread(&name)]);
        c.wait_bound(&name);
    }
    let zone_a = (0..6).filter(|i| c.node_of(&format!("s-{i}")).unwrap().starts_with('a')).count();
    assert_eq!(zone_a, 3, "skew between zones exceeds 1");
    c.clear();

    // SchedulingGates: held until the gate is removed. NodeName: a pod that names its node
    // is never touched by the scheduler.
    c.apply(&[node("g1", "4", "8Gi", json!({}))]);
    c.apply(&[
        pod("gated", "100m", "0", json!({"schedulingGates": [{"name": "example.com/wait"}]})),
        pod("pinned", "100m", "0", json!({"nodeName": "g1"})),
    ]);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(c.node_of("gated"), None);
    assert!(c.events("gated").is_empty(), "a gated pod was tried: {:?}", c.events("gated"));
    c.api.kubectl_ok(&[
        "patch",
        "pod",
        "gated",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/schedulingGates"}]"#,
    ]);
    assert_eq!(c.wait_bound("gated"), "g1");
    assert!(c.events("pinned").is_empty(), "the scheduler acted on a pod with spec.nodeName");
    assert!(c.sched[0].metric("scheduler_schedule_attempts_total", &["result=\"scheduled\""]) >= 1.0);
}

#[test]
fn unschedulable_pod_is_scheduled_when_a_node_fits() {
    let c = Cluster::start(&[]);
    c.apply(&[node("tiny", "500m", "1Gi", json!({}))]);
    c.apply(&[pod("waiting", "2", "1Gi", json!({}))]);
    assert!(c.wait_failed("waiting").starts_with("0/1 nodes are available: 1 Insufficient cpu."));
    wait_for("pod counted as unschedulable", WAIT, POLL, || {
        (c.sched[0].metric("scheduler_pending_pods", &["queue=\"unschedulable\""]) == 1.0).then_some(())
    });
    let added = std::time::Instant::now();
    c.apply(&[node("roomy", "4", "8Gi", json!({}))]);
    assert_eq!(c.wait_bound("waiting"), "roomy");
    // Moved by the node-add event, well before the 5-minute flush of the unschedulable pool.
    assert!(added.elapsed() < Duration::from_secs(30));
    let scheduled = c.events("waiting").into_iter().filter(|(r, _)| r == "Scheduled").count();
    assert_eq!(scheduled, 1);
}

#[test]
fn preemption_spares_pods_a_budget_protects() {
    let c = Cluster::start(&[]);
    c.apply(&[node("n1", "2", "4Gi", json!({})), node("n2", "2", "4Gi", json!({}))]);
    // Low-priority pods placed directly, one per node; `guarded` is covered by a PDB that
    // allows no disruption (no disruption controller runs, so its status stays at 0).
    c.apply(&[
        pod("guarded", "2", "1Gi", json!({"nodeName": "n1", "priority": 0, "labels": {"app": "guarded"}})),
        pod("victim", "2", "1Gi", json!({"nodeName": "n2", "priority": 0})),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "guard"},
               "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}}),
    ]);
    c.apply(&[pod("important", "2", "1Gi", json!({"priority": 1000}))]);
    let nominated = wait_for("nomination", WAIT, POLL, || {
        c.get(&["pod", "important"])["status"]["nominatedNodeName"].as_str().map(str::to_owned)
    });
    assert_eq!(nominated, "n2");
    // The victim is being deleted; the guarded pod is untouched.
    wait_for("victim terminating", WAIT, POLL, || {
        c.get(&["pod", "victim"])["metadata"]["deletionTimestamp"].as_str().map(|_| ())
    });
    assert!(c.get(&["pod", "guarded"])["metadata"]["deletionTimestamp"].is_null());
    assert_eq!(c.node_of("important"), None, "bound before the victim was gone");
    // What the kubelet would do once the victim's containers stopped.
    c.api.kubectl_ok(&["delete", "pod", "victim", "--force", "--grace-period=0"]);
    assert_eq!(c.wait_bound("important"), "n2");
    assert!(c.events("victim").iter().any(|(r, m)| r == "Preempted" && m.contains("on node n2")));
    assert_eq!(c.sched[0].metric("scheduler_preemption_attempts_total", &[]), 1.0);
}

#[test]
fn a_second_profile_packs_while_the_default_spreads() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
- schedulerName: default-scheduler
- schedulerName: bin-packer
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
",
    )
    .unwrap();
    let c = Cluster::start(&[&format!("--config={}", config.display())]);
    c.apply(&[
        node("k1", "4", "8Gi", json!({})),
        node("k2", "4", "8Gi", json!({})),
        node("k3", "4", "8Gi", json!({})),
    ]);
    for i in 0..3 {
        let name = format!("packed-{i}");
        c.apply(&[pod(&name, "1", "2Gi", json!({"schedulerName": "bin-packer"}))]);
        c.wait_bound(&name);
    }
    let packed: std::collections::HashSet<String> =
        (0..3).map(|i| c.node_of(&format!("packed-{i}")).unwrap()).collect();
    assert_eq!(packed.len(), 1, "bin-packer spread its pods: {packed:?}");
    c.api.kubectl_ok(&["delete", "pods", "--all", "--force", "--grace-period=0"]);
    wait_for("pods gone", WAIT, POLL, || {
        c.get(&["pods"])["items"].as_array().unwrap().is_empty().then_some(())
    });
    for i in 0..3 {
        let name = format!("spread-{i}");
        c.apply(&[pod(&name, "1", "2Gi", json!({}))]);
        c.wait_bound(&name);
    }
    let spread: std::collections::HashSet<String> =
        (0..3).map(|i| c.node_of(&format!("spread-{i}")).unwrap()).collect();
    assert_eq!(spread.len(), 3, "default profile packed its pods: {spread:?}");
    // A pod for a scheduler that does not exist here is left alone.
    c.apply(&[pod("foreign", "1", "1Gi", json!({"schedulerName": "someone-else"}))]);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(c.node_of("foreign"), None);
    assert!(c.events("foreign").is_empty());
    assert!(
        c.sched[0]
            .metric("scheduler_schedule_attempts_total", &["profile=\"bin-packer\"", "result=\"scheduled\""])
            >= 3.0
    );

    // A bad configuration is refused with a clear message, not ignored.
    std::fs::write(&config, "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: x\n  plugins:\n    score:\n      enabled:\n      - name: NoSuchPlugin\n").unwrap();
    let out = std::process::Command::new(e2e::bin("kube-scheduler"))
        .args([
            &format!("--config={}", config.display()),
            &format!("--kubeconfig={}", c.api.kubeconfig.display()),
            "--secure-port=0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("plugin \"NoSuchPlugin\" does not exist"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_standby_replica_takes_over_the_lease() {
    let args = [
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=500ms",
    ];
    let mut c = Cluster::start(&args);
    let standby = KubeScheduler::start(&c.api, &args);
    c.sched.push(standby);
    let lease = |c: &Cluster| c.get(&["lease", "-n", "kube-system", "kube-scheduler"]);
    let first = lease(&c)["spec"]["holderIdentity"].as_str().unwrap().to_owned();
    assert_eq!(c.sched[0].metric("leader_election_master_status", &[]), 1.0);
    assert_eq!(c.sched[1].metric("leader_election_master_status", &[]), 0.0);
    assert_ne!(c.sched[1].get("/readyz").0, 200, "the standby reports ready");
    c.apply(&[node("l1", "8", "16Gi", json!({})), node("l2", "8", "16Gi", json!({}))]);
    let batch = |prefix: &str| -> Vec<Value> {
        (0..10).map(|i| pod(&format!("{prefix}-{i}"), "100m", "0", json!({}))).collect()
    };
    c.apply(&batch("before"));
    for i in 0..10 {
        c.wait_bound(&format!("before-{i}"));
    }
    assert_eq!(c.sched[1].metric("scheduler_schedule_attempts_total", &[]), 0.0, "the standby scheduled");

    c.sched[0].kill9();
    let killed = std::time::Instant::now();
    c.apply(&batch("after"));
    for i in 0..10 {
        c.wait_bound(&format!("after-{i}"));
    }
    // Took over within the lease duration plus a retry period and scheduling time.
    assert!(killed.elapsed() < Duration::from_secs(20), "failover took {:?}", killed.elapsed());
    let second = lease(&c)["spec"]["holderIdentity"].as_str().unwrap().to_owned();
    assert_ne!(first, second);
    assert_eq!(lease(&c)["spec"]["leaseTransitions"], 1);
    // Every pod was bound exactly once.
    for prefix in ["before", "after"] {
        for i in 0..10 {
            let pod = format!("{prefix}-{i}");
            let n = c.events(&pod).iter().filter(|(r, _)| r == "Scheduled").count();
            assert_eq!(n, 1, "{pod} has {n} Scheduled events");
        }
    }
}
