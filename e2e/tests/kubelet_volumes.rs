//! Persistent volumes on a real node: our kubelet over containerd mounting the volume a
//! claim is bound to — a static hostPath volume, and a volume the local-path provisioner
//! made for a StatefulSet's claim template — with the scheduler's delayed binding, the
//! PV controller and the StatefulSet controller in between. Needs root and containerd.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use e2e::apiserver::KubeApiserver;
use e2e::component::{Component, KubeControllerManager, KubeScheduler};
use e2e::containerd::{self, BUSYBOX, Containerd};
use e2e::kubelet::Kubelet;
use e2e::{Etcd, EtcdOptions, wait_for};

const WAIT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(250);

fn get(api: &KubeApiserver, args: &[&str]) -> Option<Value> {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    let out = api.kubectl(&a);
    out.status.success().then(|| e2e::json(&String::from_utf8_lossy(&out.stdout)))
}

fn apply(api: &KubeApiserver, v: &Value) {
    let out = api.kubectl_stdin(&["apply", "-f", "-"], &v.to_string());
    assert!(out.status.success(), "apply: {}", String::from_utf8_lossy(&out.stderr));
}

fn running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
}

#[test]
fn kubelet_mounts_claims_of_static_and_provisioned_volumes() {
    assert!(containerd::available(), "needs root and containerd (hack/install-deps.sh)");
    let etcd = Etcd::start(EtcdOptions::default());
    let api = Arc::new(KubeApiserver::start(
        &etcd.endpoint(),
        &["--disable-admission-plugins=ServiceAccount,TaintNodesByCondition,ResourceQuota"],
    ));
    let _sched: Component = KubeScheduler::start(&api, &["--leader-elect=false"]);
    let _kcm: Component = KubeControllerManager::start(
        &api,
        &["--leader-elect=false", "--controllers=statefulset-controller,persistentvolume-binder-controller"],
    );
    let ctrd = Containerd::start();
    let kubelet = Kubelet::start(Some(&api), &ctrd, "vol-node", None, "");
    wait_for("node Ready", WAIT, POLL, || {
        let n = get(&api, &["node", "vol-node"])?;
        n["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
            .then_some(())
    });
    let disk = tempfile::tempdir().expect("tempdir");
    let base = disk.path().join("local-path");
    let mut provisioner = std::process::Command::new(e2e::bin("local-path-provisioner"))
        .arg(format!("--kubeconfig={}", api.kubeconfig.display()))
        .arg("--node-name=vol-node")
        .arg(format!("--base-dir={}", base.display()))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("local-path-provisioner");

    // A static hostPath volume, bound to a claim, mounted by a pod that writes to it.
    let static_dir = disk.path().join("static");
    apply(
        &api,
        &json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "static"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "manual",
            "hostPath": {"path": static_dir.display().to_string(), "type": "DirectoryOrCreate"}}}),
    );
    apply(
        &api,
        &json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"storageClassName": "manual", "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}}}),
    );
    apply(
        &api,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "writer"},
        "spec": {"containers": [{"name": "c", "image": BUSYBOX,
            "command": ["sh", "-c", "echo written-by-pod > /data/out && sleep 3600"],
            "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}}),
    );
    wait_for("the pod wrote into the static volume", WAIT, POLL, || {
        let pod = get(&api, &["pod", "writer"])?;
        let text = std::fs::read_to_string(static_dir.join("out")).ok()?;
        (running(&pod) && text.trim() == "written-by-pod").then_some(())
    });

    // A StatefulSet whose claim comes from the default class: provisioned on this node
    // once its pod is scheduled here, then mounted.
    apply(
        &api,
        &json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "standard", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "k8s-rs.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"}),
    );
    apply(
        &api,
        &json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"serviceName": "db", "replicas": 1, "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": BUSYBOX,
                "command": ["sh", "-c", "hostname > /var/lib/db/name && sleep 3600"],
                "volumeMounts": [{"name": "state", "mountPath": "/var/lib/db"}]}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "state"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}),
    );
    let written = wait_for("db-0 wrote its name into the provisioned volume", WAIT, POLL, || {
        let pod = get(&api, &["pod", "db-0"])?;
        let pvc = get(&api, &["pvc", "state-db-0"])?;
        let pv = pvc["spec"]["volumeName"].as_str()?.to_owned();
        let dir = std::fs::read_dir(&base)
            .ok()?
            .flatten()
            .find(|e| e.file_name().to_string_lossy().starts_with(&pv))?;
        let text = std::fs::read_to_string(dir.path().join("name")).ok()?;
        (running(&pod) && pvc["status"]["phase"] == "Bound").then_some(text)
    });
    assert_eq!(written.trim(), "db-0", "the pod's hostname is its ordinal identity");
    let _ = provisioner.kill();
    let _ = provisioner.wait();
    drop(kubelet);
}
