//! DaemonSets and StatefulSets end to end: our etcd, kube-apiserver, kube-scheduler and
//! kube-controller-manager, nodes played by [`FakeKubelet`] (pods bound to them become
//! Running and Ready, graceful deletions finish at once), driven with real kubectl
//! (`apply`, `taint`, `rollout status/history/undo`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use parking_lot::Mutex;
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
    kcm: Component,
    _sched: Component,
    api: Arc<KubeApiserver>,
    _etcd: Etcd,
    _keys: tempfile::TempDir,
}

impl Cluster {
    /// As a kubeadm cluster runs: Node,RBAC authorization and each controller acting as its
    /// own `kube-system` service account, so a permission missing from a controller's
    /// bootstrap role fails here.
    fn start(nodes: &[&str], controllers: &str) -> Cluster {
        let etcd = Etcd::start(EtcdOptions::default());
        let keys = tempfile::tempdir().expect("tempdir");
        let (key, public) = rsa_key(keys.path(), "sa");
        // No node lifecycle controller lifts the not-ready taint from new nodes here.
        let args = [
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition,ResourceQuota".to_string(),
            "--authorization-mode=Node,RBAC".to_string(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
            format!("--service-account-signing-key-file={}", key.display()),
            format!("--service-account-key-file={}", public.display()),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let api = Arc::new(KubeApiserver::start(&etcd.endpoint(), &args));
        let sched = KubeScheduler::start(&api, &["--leader-elect=false"]);
        let kubelet = FakeKubelet::start(&api.kubeconfig, nodes);
        let kcm = KubeControllerManager::start(
            &api,
            &[
                "--leader-elect=false",
                "--use-service-account-credentials",
                &format!("--controllers={controllers}"),
            ],
        );
        Cluster { kubelet, kcm, _sched: sched, api, _etcd: etcd, _keys: keys }
    }

    /// No controller panicked or was refused by RBAC along the way.
    fn assert_clean_log(&self) {
        let log = self.kcm.log_tail(100_000);
        let bad: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("panicked") || l.to_lowercase().contains("forbidden"))
            .collect();
        assert!(bad.is_empty(), "controller-manager log:\n{}", bad.join("\n"));
    }

    fn kubectl(&self, args: &[&str]) -> String {
        self.api.kubectl_ok(args)
    }

    fn apply(&self, manifest: &Value) {
        let out = self.api.kubectl_stdin(&["apply", "-f", "-"], &manifest.to_string());
        assert!(out.status.success(), "apply failed: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn get(&self, args: &[&str]) -> Value {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        e2e::json(&self.kubectl(&a))
    }

    fn items(&self, args: &[&str]) -> Vec<Value> {
        self.get(args)["items"].as_array().cloned().unwrap_or_default()
    }

    fn active_pods(&self, selector: &str) -> Vec<Value> {
        self.items(&["pods", "-l", selector])
            .into_iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect()
    }
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn image(pod: &Value) -> &str {
    pod["spec"]["containers"][0]["image"].as_str().unwrap_or_default()
}

fn daemonset(name: &str, image: &str, tolerations: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image}], "tolerations": tolerations},
            },
        },
    })
}

/// Every pod event of one label selector, in the API server's order, recorded on a thread.
struct PodWatch {
    events: Arc<Mutex<Vec<(bool, Pod)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PodWatch {
    fn start(kubeconfig: &std::path::Path, selector: &str) -> PodWatch {
        let events = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (ev, st, kc, sel) = (events.clone(), stop.clone(), kubeconfig.to_owned(), selector.to_owned());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let client = e2e::fake_kubelet::client(&kc).await;
                let stream = watcher(Api::<Pod>::all(client), watcher::Config::default().labels(&sel));
                futures::pin_mut!(stream);
                while !st.load(Ordering::SeqCst) {
                    match tokio::time::timeout(Duration::from_millis(100), stream.next()).await {
                        Ok(Some(Ok(watcher::Event::InitDone))) => {
                            let _ = ready_tx.send(());
                        }
                        Ok(Some(Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)))) => {
                            ev.lock().push((false, p))
                        }
                        Ok(Some(Ok(watcher::Event::Delete(p)))) => ev.lock().push((true, p)),
                        Ok(None) => return,
                        _ => {}
                    }
                }
            });
        });
        ready_rx.recv_timeout(WAIT).expect("pod watch listed");
        PodWatch { events, stop, thread: Some(thread) }
    }

    fn finish(mut self) -> Vec<(bool, Pod)> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.events.lock())
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The most nodes without a ready, non-terminating pod at any point of `events`.
fn max_unavailable_nodes(events: &[(bool, Pod)], nodes: &[&str]) -> usize {
    let mut pods: BTreeMap<String, Pod> = BTreeMap::new();
    let mut worst = 0;
    for (deleted, pod) in events {
        let name = pod.metadata.name.clone().unwrap_or_default();
        if *deleted {
            pods.remove(&name);
        } else {
            pods.insert(name, pod.clone());
        }
        let serving = |node: &str| {
            pods.values().any(|p| {
                let v = serde_json::to_value(p).unwrap();
                v["spec"]["nodeName"] == node && v["metadata"]["deletionTimestamp"].is_null() && is_ready(&v)
            })
        };
        worst = worst.max(nodes.iter().filter(|n| !serving(n)).count());
    }
    worst
}

fn wait_daemonset(c: &Cluster, name: &str, desired: i64) {
    wait_for(&format!("daemonset {name} rolled out on {desired} nodes"), WAIT, POLL, || {
        let ds = c.get(&["ds", name]);
        let s = &ds["status"];
        let n = |k: &str| s[k].as_i64().unwrap_or(0);
        let done = ds["metadata"]["generation"] == s["observedGeneration"]
            && n("desiredNumberScheduled") == desired
            && n("currentNumberScheduled") == desired
            && n("updatedNumberScheduled") == desired
            && n("numberReady") == desired
            && n("numberAvailable") == desired
            && n("numberUnavailable") == 0;
        (done && c.active_pods(&format!("app={name}")).len() as i64 == desired).then_some(())
    });
}

#[test]
fn daemonset_runs_one_pod_per_node_rolls_and_respects_taints() {
    let nodes = ["node-a", "node-b"];
    let c = Cluster::start(&nodes, "daemonset-controller,garbage-collector-controller");
    c.apply(&daemonset("ds", "localhost/busybox:1", json!([])));
    wait_daemonset(&c, "ds", 2);
    let pods = c.active_pods("app=ds");
    let mut on: Vec<&str> = pods.iter().map(|p| p["spec"]["nodeName"].as_str().unwrap()).collect();
    on.sort();
    assert_eq!(on, nodes, "one pod per node");
    for p in &pods {
        // Pinned to its node through node affinity, placed by the scheduler, with the
        // tolerations every daemon gets.
        let terms = &p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"];
        assert_eq!(terms[0]["matchFields"][0]["key"], "metadata.name");
        assert_eq!(terms[0]["matchFields"][0]["values"][0], p["spec"]["nodeName"]);
        let tolerations: Vec<&str> =
            p["spec"]["tolerations"].as_array().unwrap().iter().filter_map(|t| t["key"].as_str()).collect();
        for k in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
            "node.kubernetes.io/unschedulable",
        ] {
            assert!(tolerations.contains(&k), "toleration {k} in {tolerations:?}");
        }
        assert_eq!(p["metadata"]["labels"]["pod-template-generation"], "1");
        assert!(p["metadata"]["labels"]["controller-revision-hash"].is_string());
    }
    let out = c.kubectl(&["rollout", "status", "ds/ds", "--timeout=60s"]);
    assert!(out.contains("successfully rolled out"), "{out}");

    // A rolling update with maxUnavailable 1 replaces the pods one node at a time.
    let watch = PodWatch::start(&c.api.kubeconfig, "app=ds");
    c.kubectl(&["set", "image", "ds/ds", "c=localhost/busybox:2"]);
    let out = c.kubectl(&["rollout", "status", "ds/ds", "--timeout=60s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
    wait_daemonset(&c, "ds", 2);
    let events = watch.finish();
    assert!(events.len() > 4, "the rollout was observed: {} events", events.len());
    assert_eq!(max_unavailable_nodes(&events, &nodes), 1, "at most one node without a ready pod at a time");
    assert!(c.active_pods("app=ds").iter().all(|p| image(p) == "localhost/busybox:2"));

    // History: two ControllerRevisions; undo goes back to the first template.
    let revs = c.items(&["controllerrevisions", "-l", "app=ds"]);
    assert_eq!(revs.len(), 2, "one revision per template");
    let history = c.kubectl(&["rollout", "history", "ds/ds"]);
    let lines: Vec<&str> = history
        .lines()
        .skip_while(|l| !l.starts_with("REVISION"))
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 2, "two revisions in history:\n{history}");
    c.kubectl(&["rollout", "undo", "ds/ds"]);
    c.kubectl(&["rollout", "status", "ds/ds", "--timeout=60s"]);
    wait_for("undo restored the first image", WAIT, POLL, || {
        let pods = c.active_pods("app=ds");
        (pods.len() == 2 && pods.iter().all(|p| image(p) == "localhost/busybox:1" && is_ready(p)))
            .then_some(())
    });
    let revs = c.items(&["controllerrevisions", "-l", "app=ds"]);
    assert_eq!(revs.len(), 2, "undo reuses the first revision");
    assert!(revs.iter().any(|r| r["revision"] == 3), "the restored revision is renumbered as newest");

    // A failed daemon pod is replaced.
    let victim = c.active_pods("app=ds")[0]["metadata"]["name"].as_str().unwrap().to_owned();
    c.kubectl(&["patch", "pod", &victim, "--subresource=status", "-p", r#"{"status":{"phase":"Failed"}}"#]);
    wait_for("failed daemon pod replaced", WAIT, POLL, || {
        let pods = c.active_pods("app=ds");
        (pods.len() == 2 && pods.iter().all(|p| p["metadata"]["name"] != victim.as_str() && is_ready(p)))
            .then_some(())
    });

    // A tainted node gets no pod unless the DaemonSet tolerates the taint; the pod already
    // there stays (NoSchedule), but is counted as misscheduled.
    c.kubectl(&["taint", "nodes", "node-b", "dedicated=infra:NoSchedule"]);
    c.apply(&daemonset("picky", "localhost/busybox:1", json!([])));
    wait_daemonset(&c, "picky", 1);
    let picky = c.active_pods("app=picky");
    assert_eq!(picky[0]["spec"]["nodeName"], "node-a");
    wait_for("the first DaemonSet counts node-b as misscheduled", WAIT, POLL, || {
        let s = c.get(&["ds", "ds"])["status"].clone();
        (s["numberMisscheduled"] == 1 && s["desiredNumberScheduled"] == 1).then_some(())
    });
    assert_eq!(c.active_pods("app=ds").len(), 2, "NoSchedule does not evict the running daemon");
    c.apply(&daemonset(
        "picky",
        "localhost/busybox:1",
        json!([{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}]),
    ));
    wait_daemonset(&c, "picky", 2);

    // A NoExecute taint the daemon does not tolerate removes it from the node.
    c.kubectl(&["taint", "nodes", "node-a", "evict=now:NoExecute"]);
    wait_daemonset(&c, "picky", 1);
    assert_eq!(c.active_pods("app=picky")[0]["spec"]["nodeName"], "node-b");
    c.assert_clean_log();
}

/// A `local-path-provisioner` process for one fake node, its volumes in a directory of
/// its own (standing in for that node's disk).
struct Provisioner {
    child: std::process::Child,
    dir: tempfile::TempDir,
    log: std::path::PathBuf,
}

impl Provisioner {
    fn start(api: &KubeApiserver, node: &str) -> Provisioner {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("provisioner.log");
        let out = std::fs::File::create(&log).expect("log");
        let child = std::process::Command::new(e2e::bin("local-path-provisioner"))
            .arg(format!("--kubeconfig={}", api.kubeconfig.display()))
            .arg(format!("--node-name={node}"))
            .arg(format!("--base-dir={}", dir.path().join("volumes").display()))
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("starting local-path-provisioner");
        Provisioner { child, dir, log }
    }

    fn volumes(&self) -> std::path::PathBuf {
        self.dir.path().join("volumes")
    }

    fn entries(&self) -> Vec<String> {
        std::fs::read_dir(self.volumes())
            .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
            .unwrap_or_default()
    }
}

impl Drop for Provisioner {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- provisioner log ---\n{}", std::fs::read_to_string(&self.log).unwrap_or_default());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const VOLUME_CONTROLLERS: &str = "statefulset-controller,persistentvolume-binder-controller,\
    ephemeral-volume-controller,garbage-collector-controller";

fn standard_class() -> Value {
    json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "standard", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "k8s-rs.io/local-path",
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    })
}

fn statefulset(image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web"},
        "spec": {
            "serviceName": "nginx",
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": image,
                    "volumeMounts": [{"name": "www", "mountPath": "/data"}]}]},
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "www"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }],
        },
    })
}

fn pod_named<'a>(pods: &'a [Value], name: &str) -> Option<&'a Value> {
    pods.iter().find(|p| p["metadata"]["name"] == name)
}

fn wait_statefulset(c: &Cluster, replicas: i64, updated: i64) -> Value {
    wait_for(&format!("statefulset web: {replicas} ready, {updated} updated"), WAIT, POLL, || {
        let s = c.get(&["sts", "web"]);
        let st = &s["status"];
        let n = |k: &str| st[k].as_i64().unwrap_or(0);
        let done = s["metadata"]["generation"] == st["observedGeneration"]
            && n("replicas") == replicas
            && n("readyReplicas") == replicas
            && n("availableReplicas") == replicas
            && n("updatedReplicas") == updated;
        let pods = c.active_pods("app=web");
        (done && pods.len() as i64 == replicas && pods.iter().all(is_ready)).then_some(s)
    })
}

#[test]
fn statefulset_orders_pods_keeps_claims_and_updates_by_partition() {
    let nodes = ["node-a", "node-b"];
    let c = Cluster::start(&nodes, VOLUME_CONTROLLERS);
    let provisioners: Vec<Provisioner> = nodes.iter().map(|n| Provisioner::start(&c.api, n)).collect();
    c.apply(&standard_class());
    c.apply(&json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "nginx"},
        "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 80}]}}));
    let watch = PodWatch::start(&c.api.kubeconfig, "app=web");
    c.apply(&statefulset("localhost/busybox:1"));
    let sts = wait_statefulset(&c, 3, 3);
    assert_eq!(sts["status"]["currentRevision"], sts["status"]["updateRevision"]);
    // The API server defaults `rollingUpdate: {partition: 0}`, so kubectl reports a
    // partitioned rollout, as against upstream.
    let out = c.kubectl(&["rollout", "status", "sts/web", "--timeout=60s"]);
    assert!(out.contains("roll out complete: 3 new pods have been updated"), "{out}");

    // OrderedReady: web-N is created only once web-(N-1) is Running and Ready.
    let events = watch.finish();
    let first = |f: &dyn Fn(&Value) -> bool| {
        events.iter().position(|(d, p)| !d && f(&serde_json::to_value(p).unwrap()))
    };
    for i in 1..3 {
        let created = first(&|p| p["metadata"]["name"] == format!("web-{i}")).expect("created");
        let prev_ready =
            first(&|p| p["metadata"]["name"] == format!("web-{}", i - 1) && is_ready(p)).expect("ready");
        assert!(prev_ready < created, "web-{i} created before web-{} was ready", i - 1);
    }

    // Identity: names, labels, hostname and subdomain; each pod its own bound claim from
    // the default class, provisioned on the pod's node.
    let pods = c.active_pods("app=web");
    let mut volumes = BTreeMap::new();
    for i in 0..3 {
        let name = format!("web-{i}");
        let p = pod_named(&pods, &name).expect("pod");
        assert_eq!(p["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"], name.as_str());
        assert_eq!(p["metadata"]["labels"]["apps.kubernetes.io/pod-index"], i.to_string());
        assert_eq!(p["spec"]["hostname"], name.as_str());
        assert_eq!(p["spec"]["subdomain"], "nginx");
        let claim = format!("www-web-{i}");
        let vols = p["spec"]["volumes"].as_array().unwrap();
        assert!(vols.iter().any(|v| v["persistentVolumeClaim"]["claimName"] == claim.as_str()));
        let pvc = c.get(&["pvc", &claim]);
        assert_eq!(pvc["status"]["phase"], "Bound");
        assert_eq!(pvc["spec"]["storageClassName"], "standard");
        assert_eq!(pvc["metadata"]["labels"]["app"], "web");
        let pv_name = pvc["spec"]["volumeName"].as_str().unwrap().to_owned();
        let pv = c.get(&["pv", &pv_name]);
        assert_eq!(pv["status"]["phase"], "Bound");
        assert_eq!(pv["spec"]["claimRef"]["name"], claim.as_str());
        let node = p["spec"]["nodeName"].as_str().unwrap();
        assert_eq!(
            pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
                [0],
            node
        );
        let prov = &provisioners[nodes.iter().position(|n| *n == node).unwrap()];
        assert!(prov.entries().iter().any(|e| e.starts_with(&pv_name)), "{pv_name} directory on {node}");
        volumes.insert(claim, (pvc["metadata"]["uid"].clone(), pv_name));
    }

    // web-1 deleted comes back as web-1 with the same claim and volume.
    let old_uid = pod_named(&pods, "web-1").unwrap()["metadata"]["uid"].clone();
    c.kubectl(&["delete", "pod", "web-1", "--wait=false"]);
    wait_for("web-1 recreated", WAIT, POLL, || {
        let pods = c.active_pods("app=web");
        pod_named(&pods, "web-1").filter(|p| p["metadata"]["uid"] != old_uid && is_ready(p)).cloned()
    });
    let pvc = c.get(&["pvc", "www-web-1"]);
    assert_eq!(pvc["metadata"]["uid"], volumes["www-web-1"].0, "the same claim");
    assert_eq!(pvc["spec"]["volumeName"], volumes["www-web-1"].1.as_str(), "the same volume");
    wait_statefulset(&c, 3, 3);

    // A partitioned rolling update touches only ordinals >= partition.
    c.kubectl(&[
        "patch",
        "sts",
        "web",
        "-p",
        r#"{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"partition":2}}}}"#,
    ]);
    c.kubectl(&["set", "image", "sts/web", "c=localhost/busybox:2"]);
    let sts = wait_statefulset(&c, 3, 1);
    let update_rev = sts["status"]["updateRevision"].as_str().unwrap().to_owned();
    assert_ne!(sts["status"]["currentRevision"], update_rev.as_str());
    let pods = c.active_pods("app=web");
    for (name, img) in
        [("web-0", "localhost/busybox:1"), ("web-1", "localhost/busybox:1"), ("web-2", "localhost/busybox:2")]
    {
        assert_eq!(image(pod_named(&pods, name).unwrap()), img, "{name}");
    }
    assert_eq!(
        pod_named(&pods, "web-2").unwrap()["metadata"]["labels"]["controller-revision-hash"],
        update_rev.as_str()
    );
    let out = c.kubectl(&["rollout", "status", "sts/web", "--timeout=60s"]);
    assert!(out.contains("partitioned roll out complete: 1 new pods have been updated"), "{out}");

    // Partition 0: the rest follow, highest ordinal first.
    let watch = PodWatch::start(&c.api.kubeconfig, "app=web");
    c.kubectl(&[
        "patch",
        "sts",
        "web",
        "-p",
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"partition":0}}}}"#,
    ]);
    let sts = wait_statefulset(&c, 3, 3);
    assert_eq!(sts["status"]["currentRevision"], update_rev.as_str(), "the update became current");
    let events = watch.finish();
    let deleting = |name: &str| {
        events.iter().position(|(d, p)| {
            let v = serde_json::to_value(p).unwrap();
            v["metadata"]["name"] == name && (*d || !v["metadata"]["deletionTimestamp"].is_null())
        })
    };
    assert!(deleting("web-1").unwrap() < deleting("web-0").unwrap(), "web-1 replaced before web-0");
    assert!(c.active_pods("app=web").iter().all(|p| image(p) == "localhost/busybox:2"));

    // History and undo.
    let history = c.kubectl(&["rollout", "history", "sts/web"]);
    assert!(
        history.lines().filter(|l| l.trim_start().starts_with(char::is_numeric)).count() == 2,
        "{history}"
    );
    c.kubectl(&["rollout", "undo", "sts/web"]);
    wait_for("undo rolled web back", WAIT, POLL, || {
        let pods = c.active_pods("app=web");
        (pods.len() == 3 && pods.iter().all(|p| image(p) == "localhost/busybox:1" && is_ready(p)))
            .then_some(())
    });

    // whenScaled: Delete — scaling down removes the claim of the removed ordinal, and its
    // released volume (reclaim policy Delete) is deleted with its directory.
    c.kubectl(&[
        "patch",
        "sts",
        "web",
        "-p",
        r#"{"spec":{"persistentVolumeClaimRetentionPolicy":{"whenScaled":"Delete"}}}"#,
    ]);
    c.kubectl(&["scale", "sts/web", "--replicas=2"]);
    let gone_pv = volumes["www-web-2"].1.clone();
    wait_for("www-web-2 and its volume deleted", WAIT, POLL, || {
        let claim_gone = !c.api.kubectl(&["get", "pvc", "www-web-2"]).status.success();
        let pv_gone = !c.api.kubectl(&["get", "pv", &gone_pv]).status.success();
        let dir_gone = provisioners.iter().all(|p| !p.entries().iter().any(|e| e.starts_with(&gone_pv)));
        (claim_gone && pv_gone && dir_gone).then_some(())
    });
    assert!(c.api.kubectl(&["get", "pvc", "www-web-1"]).status.success(), "www-web-1 kept");
    wait_statefulset(&c, 2, 2);
    c.assert_clean_log();
}

fn pv(name: &str, class: &str, size: &str, policy: &str, path: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": class,
            "persistentVolumeReclaimPolicy": policy, "hostPath": {"path": path}},
    })
}

fn pvc(name: &str, class: Option<&str>, size: &str) -> Value {
    let mut c = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
    });
    if let Some(class) = class {
        c["spec"]["storageClassName"] = json!(class);
    }
    c
}

fn phase(c: &Cluster, kind: &str, name: &str) -> String {
    let out = c.api.kubectl(&["get", kind, name, "-o", "jsonpath={.status.phase}"]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn events_for(c: &Cluster, name: &str) -> String {
    c.kubectl(&[
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.name={name}"),
        "-o",
        "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
    ])
}

#[test]
fn persistent_volumes_bind_release_and_reclaim() {
    let c = Cluster::start(&["node-a"], VOLUME_CONTROLLERS);
    let prov = Provisioner::start(&c.api, "node-a");

    // Static binding: the smallest fitting volume of the class; both sides Bound.
    c.apply(&pv("big", "manual", "5Gi", "Retain", "/tmp/e2e-pv-big"));
    c.apply(&pv("small", "manual", "2Gi", "Retain", "/tmp/e2e-pv-small"));
    // Only Available volumes are matched (as upstream): wait for the controller to say so.
    wait_for("volumes available", WAIT, POLL, || {
        (phase(&c, "pv", "big") == "Available" && phase(&c, "pv", "small") == "Available").then_some(())
    });
    c.apply(&pvc("claim", Some("manual"), "1Gi"));
    wait_for("claim bound", WAIT, POLL, || (phase(&c, "pvc", "claim") == "Bound").then_some(()));
    let claim = c.get(&["pvc", "claim"]);
    assert_eq!(claim["spec"]["volumeName"], "small");
    assert_eq!(claim["status"]["capacity"]["storage"], "2Gi");
    assert_eq!(claim["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"], "yes");
    wait_for("volume bound", WAIT, POLL, || (phase(&c, "pv", "small") == "Bound").then_some(()));
    assert_eq!(c.get(&["pv", "small"])["spec"]["claimRef"]["uid"], claim["metadata"]["uid"]);
    assert_eq!(phase(&c, "pv", "big"), "Available");

    // Retain: the volume stays, Released, after its claim goes.
    c.kubectl(&["delete", "pvc", "claim"]);
    wait_for("small released", WAIT, POLL, || (phase(&c, "pv", "small") == "Released").then_some(()));

    // Delete on a hostPath under /tmp: the controller removes the directory and the volume
    // (upstream's in-tree hostPath deleter); elsewhere the volume is marked Failed.
    let scratch = tempfile::Builder::new().prefix("e2e-pv-").tempdir_in("/tmp").expect("tempdir");
    let data = scratch.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("file"), b"x").unwrap();
    c.apply(&pv("deletable", "scratch", "1Gi", "Delete", &data.display().to_string()));
    c.apply(&pv("outside", "scratch-outside", "1Gi", "Delete", "/var/e2e-not-deleted"));
    c.apply(&pvc("d1", Some("scratch"), "1Gi"));
    c.apply(&pvc("d2", Some("scratch-outside"), "1Gi"));
    wait_for("d1 and d2 bound", WAIT, POLL, || {
        (phase(&c, "pvc", "d1") == "Bound" && phase(&c, "pvc", "d2") == "Bound").then_some(())
    });
    c.kubectl(&["delete", "pvc", "d1", "d2"]);
    wait_for("deletable deleted", WAIT, POLL, || {
        (!c.api.kubectl(&["get", "pv", "deletable"]).status.success() && !data.exists()).then_some(())
    });
    wait_for("outside failed", WAIT, POLL, || (phase(&c, "pv", "outside") == "Failed").then_some(()));
    let msg = c.get(&["pv", "outside"])["status"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(msg.contains("host_path deleter only supports /tmp/.+"), "{msg}");

    // A claim without a class made before any default class exists gets the default
    // class once there is one; WaitForFirstConsumer keeps it Pending until a pod uses it.
    c.apply(&pvc("late", None, "1Gi"));
    wait_for("late pending", WAIT, POLL, || (phase(&c, "pvc", "late") == "Pending").then_some(()));
    assert!(c.get(&["pvc", "late"])["spec"]["storageClassName"].is_null());
    c.apply(&standard_class());
    wait_for("late assigned the default class", WAIT, POLL, || {
        (c.get(&["pvc", "late"])["spec"]["storageClassName"] == "standard").then_some(())
    });
    wait_for("WaitForFirstConsumer event", WAIT, POLL, || {
        events_for(&c, "late")
            .contains("WaitForFirstConsumer: waiting for first consumer to be created before binding")
            .then_some(())
    });

    // A pod with a generic ephemeral volume: its claim is made for it, provisioned on the
    // node the scheduler picked, and goes (with its volume) when the pod goes.
    c.apply(&json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "eph"},
        "spec": {"containers": [{"name": "c", "image": "localhost/busybox:1"}],
            "volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}]},
    }));
    let pv_name = wait_for("eph-scratch bound and the pod running", WAIT, POLL, || {
        let claim = c.get(&["pvc", "eph-scratch"]);
        let pod = c.get(&["pod", "eph"]);
        (claim["status"]["phase"] == "Bound" && is_ready(&pod))
            .then(|| claim["spec"]["volumeName"].as_str().unwrap().to_owned())
    });
    let claim = c.get(&["pvc", "eph-scratch"]);
    assert_eq!(claim["metadata"]["ownerReferences"][0]["kind"], "Pod");
    assert_eq!(claim["metadata"]["annotations"]["volume.kubernetes.io/selected-node"], "node-a");
    assert_eq!(
        claim["metadata"]["annotations"]["volume.kubernetes.io/storage-provisioner"],
        "k8s-rs.io/local-path"
    );
    let pv = c.get(&["pv", &pv_name]);
    assert_eq!(pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"], "k8s-rs.io/local-path");
    assert!(prov.entries().iter().any(|e| e.starts_with(&pv_name)));
    c.kubectl(&["delete", "pod", "eph"]);
    wait_for("eph-scratch, its volume and directory gone", WAIT, POLL, || {
        let claim_gone = !c.api.kubectl(&["get", "pvc", "eph-scratch"]).status.success();
        let pv_gone = !c.api.kubectl(&["get", "pv", &pv_name]).status.success();
        (claim_gone && pv_gone && !prov.entries().iter().any(|e| e.starts_with(&pv_name))).then_some(())
    });

    // An Immediate class names its provisioner on the claim at once.
    c.apply(&json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "now"}, "provisioner": "example.com/nfs", "volumeBindingMode": "Immediate"}));
    c.apply(&pvc("nfs", Some("now"), "1Gi"));
    wait_for("external provisioning requested", WAIT, POLL, || {
        let claim = c.get(&["pvc", "nfs"]);
        (claim["metadata"]["annotations"]["volume.kubernetes.io/storage-provisioner"] == "example.com/nfs"
            && events_for(&c, "nfs").contains("ExternalProvisioning"))
        .then_some(())
    });
    c.assert_clean_log();
}

#[test]
fn statefulset_parallel_on_delete_and_start_ordinal() {
    let c = Cluster::start(&["node-a"], VOLUME_CONTROLLERS);
    // Parallel: every pod is created without waiting for its predecessors, even while the
    // first is held not-ready.
    c.kubelet.set_ready("default/par-0", false);
    let mut set = statefulset("localhost/busybox:1");
    set["metadata"]["name"] = json!("par");
    set["spec"]["selector"] = json!({"matchLabels": {"app": "par"}});
    set["spec"]["template"]["metadata"]["labels"] = json!({"app": "par"});
    set["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = json!([]);
    set["spec"]["volumeClaimTemplates"] = json!([]);
    set["spec"]["podManagementPolicy"] = json!("Parallel");
    set["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    c.apply(&set);
    wait_for("par-1 and par-2 created while par-0 is not ready", WAIT, POLL, || {
        let pods = c.active_pods("app=par");
        let p0 = pod_named(&pods, "par-0")?;
        (pod_named(&pods, "par-1").is_some() && pod_named(&pods, "par-2").is_some() && !is_ready(p0))
            .then_some(())
    });
    c.kubelet.set_ready("default/par-0", true);
    wait_for("par ready", WAIT, POLL, || {
        let s = c.get(&["sts", "par"]);
        (s["status"]["readyReplicas"] == 3).then_some(())
    });

    // OnDelete: a new template changes no pod until one is deleted.
    c.kubectl(&["set", "image", "sts/par", "c=localhost/busybox:2"]);
    let dbg = c.api.clone();
    let _dump = Dump(move || dbg.kubectl_ok(&["get", "sts,controllerrevisions,pods", "-o", "yaml"]));
    let s = wait_for("new revision observed", WAIT, POLL, || {
        let s = c.get(&["sts", "par"]);
        (s["status"]["observedGeneration"] == s["metadata"]["generation"]
            && s["status"]["updateRevision"] != s["status"]["currentRevision"])
            .then_some(s)
    });
    assert_eq!(s["status"]["updatedReplicas"].as_i64().unwrap_or(0), 0);
    assert!(c.active_pods("app=par").iter().all(|p| image(p) == "localhost/busybox:1"));
    c.kubectl(&["delete", "pod", "par-1", "--wait=false"]);
    wait_for("par-1 recreated at the new revision", WAIT, POLL, || {
        let pods = c.active_pods("app=par");
        let p1 = pod_named(&pods, "par-1")?;
        (image(p1) == "localhost/busybox:2" && is_ready(p1)).then_some(())
    });
    let pods = c.active_pods("app=par");
    assert_eq!(image(pod_named(&pods, "par-0").unwrap()), "localhost/busybox:1");
    assert_eq!(image(pod_named(&pods, "par-2").unwrap()), "localhost/busybox:1");

    // spec.ordinals.start: the pods are renumbered from the start ordinal.
    c.kubectl(&["patch", "sts", "par", "-p", r#"{"spec":{"ordinals":{"start":5},"replicas":2}}"#]);
    wait_for("pods par-5 and par-6 only", WAIT, POLL, || {
        let pods = c.active_pods("app=par");
        let mut names: Vec<&str> = pods.iter().filter_map(|p| p["metadata"]["name"].as_str()).collect();
        names.sort();
        (names == ["par-5", "par-6"] && pods.iter().all(is_ready)).then_some(())
    });
    c.assert_clean_log();
}

struct Dump<F: Fn() -> String>(F);
impl<F: Fn() -> String> Drop for Dump<F> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("DUMP:\n{}", (self.0)());
        }
    }
}
