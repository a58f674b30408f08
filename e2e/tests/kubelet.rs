//! The kubelet against real containerd + runc + CNI, with our etcd, kube-apiserver,
//! kube-scheduler and kube-controller-manager, driven with real kubectl. Each test runs its
//! own containerd (private root, socket, bridge and pod CIDR) and kubelet (private root dir,
//! log dir, static pod dir and cgroup root). Needs root and containerd; fails without them.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use e2e::apiserver::{ADMIN_TOKEN, KubeApiserver};
use e2e::certs::{TestCa, rsa_key};
use e2e::component::{Component, KubeControllerManager, KubeScheduler};
use e2e::containerd::{self, BUSYBOX, Containerd};
use e2e::kubelet::Kubelet;
use e2e::{Etcd, EtcdOptions, wait_for};

const WAIT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(250);

/// Field order matters for drop: kubelet before containerd (which kills what is left),
/// the control plane last.
struct Cluster {
    kubelet: Kubelet,
    ctrd: Containerd,
    _kcm: Option<Component>,
    _sched: Component,
    api: Arc<KubeApiserver>,
    _etcd: Etcd,
    _keys: tempfile::TempDir,
    _ca: TestCa,
}

impl Cluster {
    fn start(node: &str, kcm: bool, kcm_args: &[&str], kubelet_config: &str) -> Cluster {
        let etcd = Etcd::start(EtcdOptions::default());
        let keys = tempfile::tempdir().expect("tempdir");
        let (key, public) = rsa_key(keys.path(), "sa");
        // The API server reaches kubelets with a client certificate the kubelets' client CA
        // signed (logs, exec, port-forward), as kubeadm sets it up.
        let ca = TestCa::new("kubelet-client-ca");
        let client = ca.client_cert("kube-apiserver-kubelet-client", Some("system:masters"));
        let args = [
            format!("--kubelet-client-certificate={}", client.cert.display()),
            format!("--kubelet-client-key={}", client.key.display()),
            "--kubelet-preferred-address-types=InternalIP,Hostname".to_string(),
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition,ResourceQuota".to_string(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
            format!("--service-account-signing-key-file={}", key.display()),
            format!("--service-account-key-file={}", public.display()),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let api = Arc::new(KubeApiserver::start(&etcd.endpoint(), &args));
        let sched = KubeScheduler::start(&api, &["--leader-elect=false"]);
        let kcm = kcm.then(|| KubeControllerManager::start(&api, kcm_args));
        let ctrd = Containerd::start();
        let kubelet = Kubelet::start(Some(&api), &ctrd, node, Some(&ca.cert), kubelet_config);
        let c = Cluster { kubelet, ctrd, _kcm: kcm, _sched: sched, api, _etcd: etcd, _keys: keys, _ca: ca };
        c.wait_node_ready(node);
        c
    }

    fn kubectl(&self, args: &[&str]) -> String {
        self.api.kubectl_ok(args)
    }

    fn apply(&self, yaml: &str) {
        let out = self.api.kubectl_stdin(&["apply", "-f", "-"], yaml);
        assert!(out.status.success(), "apply: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn get(&self, args: &[&str]) -> Value {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        e2e::json(&self.kubectl(&a))
    }

    fn try_get(&self, args: &[&str]) -> Option<Value> {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        let out = self.api.kubectl(&a);
        out.status.success().then(|| e2e::json(&String::from_utf8_lossy(&out.stdout)))
    }

    fn wait_node_ready(&self, node: &str) {
        wait_for(&format!("node {node} Ready"), WAIT, POLL, || {
            let n = self.try_get(&["node", node])?;
            conditions(&n).iter().any(|c| c["type"] == "Ready" && c["status"] == "True").then_some(())
        });
    }

    /// Waits until pod `name` satisfies `pred`, returning it.
    fn wait_pod(&self, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        wait_for(&format!("pod {name}: {what}"), WAIT, POLL, || {
            self.try_get(&["pod", name]).filter(|p| pred(p))
        })
    }

    /// The kubelet API's log of a container (the admin token passes its authorization).
    fn logs(&self, pod: &str, container: &str) -> String {
        let (code, body) =
            self.kubelet.get(&format!("/containerLogs/default/{pod}/{container}"), Some(ADMIN_TOKEN));
        assert_eq!(code, 200, "containerLogs: {body}");
        body
    }

    /// Containers (and sandboxes) containerd holds for pod `uid`.
    fn runtime_objects(&self, uid: &str) -> Vec<String> {
        let filter = format!("labels.\"io.kubernetes.pod.uid\"=={uid}");
        let out = self.ctrd.ctr(&["containers", "ls", "-q", &filter]);
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).filter(|l| !l.is_empty()).collect()
    }

    /// Asserts nothing of pod `uid` is left: runtime objects, pod dir, log dir, cgroups.
    fn assert_cleaned_up(&self, uid: &str) {
        wait_for(&format!("pod {uid} cleaned up"), WAIT, POLL, || {
            let objects = self.runtime_objects(uid);
            let dir = self.kubelet.root_dir.join("pods").join(uid).exists();
            let logs = std::fs::read_dir(self.kubelet.dir.path().join("pod-logs"))
                .into_iter()
                .flatten()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with(uid));
            let cgroups = self.kubelet.pod_cgroups().iter().any(|p| p.to_string_lossy().ends_with(uid));
            (objects.is_empty() && !dir && !logs && !cgroups).then_some(())
        });
    }
}

fn conditions(obj: &Value) -> Vec<Value> {
    obj["status"]["conditions"].as_array().cloned().unwrap_or_default()
}

fn condition(pod: &Value, type_: &str) -> String {
    conditions(pod)
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
        .to_string()
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

fn container_status(pod: &Value, i: usize) -> Value {
    pod["status"]["containerStatuses"][i].clone()
}

fn restart_count(pod: &Value) -> i64 {
    container_status(pod, 0)["restartCount"].as_i64().unwrap_or(0)
}

/// These tests must run where CI runs them (root, containerd from hack/install-deps.sh): a
/// missing prerequisite is a failure, never a silent pass.
fn skip() -> bool {
    assert!(
        containerd::available(),
        "kubelet e2e tests need root and containerd: run hack/install-deps.sh as root"
    );
    false
}

fn curl(url: &str) -> Option<String> {
    let out = Command::new("curl").args(["-sf", "--max-time", "5", url]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

/// `cat` through kube-rs's WebSocket exec: what is written to stdin comes back once stdin
/// is closed (v5's close signal), and the status is Success.
fn kube_rs_exec(kubeconfig: &std::path::Path, pod: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = e2e::fake_kubelet::client(kubeconfig).await;
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client, "default");
        let params = kube::api::AttachParams::default().stdin(true).stdout(true).stderr(false);
        let mut proc = pods.exec(pod, ["cat"], &params).await.expect("kube-rs exec");
        let mut stdin = proc.stdin().unwrap();
        stdin.write_all(b"through websocket\n").await.unwrap();
        // Shutting the writer down is kube-rs's end of stdin (dropping one half is not).
        stdin.shutdown().await.unwrap();
        let mut out = String::new();
        let mut stdout = proc.stdout().unwrap();
        tokio::time::timeout(Duration::from_secs(30), stdout.read_to_string(&mut out))
            .await
            .expect("cat ends once stdin closes")
            .unwrap();
        assert_eq!(out, "through websocket\n");
        let status = proc.take_status().unwrap().await.expect("a status on the error channel");
        assert_eq!(status.status.as_deref(), Some("Success"), "{status:?}");
    });
}

#[test]
fn node_pods_network_api_and_cleanup() {
    if skip() {
        return;
    }
    let c = Cluster::start("kl-node-1", true, &[], "");
    let node = c.get(&["node", "kl-node-1"]);
    let info = &node["status"]["nodeInfo"];
    assert!(info["containerRuntimeVersion"].as_str().unwrap().starts_with("containerd://"), "{info}");
    assert_eq!(info["kubeletVersion"], "v1.32.0");
    assert_eq!(info["operatingSystem"], "linux");
    assert!(node["status"]["capacity"]["cpu"].is_string() && node["status"]["allocatable"]["pods"] == "110");
    let wide = c.kubectl(&["get", "nodes", "-o", "wide"]);
    assert!(wide.contains(&c.kubelet.ip.to_string()) && wide.contains("containerd://"), "{wide}");
    // The Lease is renewed (every 10 s: a quarter of 40 s).
    let lease = c.get(&["lease", "-n", "kube-node-lease", "kl-node-1"]);
    let first = lease["spec"]["renewTime"].as_str().unwrap().to_string();
    assert_eq!(lease["spec"]["holderIdentity"], "kl-node-1");
    wait_for("the node lease renewed", Duration::from_secs(30), POLL, || {
        let l = c.get(&["lease", "-n", "kube-node-lease", "kl-node-1"]);
        (l["spec"]["renewTime"].as_str() != Some(&first)).then_some(())
    });

    // A deployment of three web servers: Running, Ready, IPs from the bridge's CIDR.
    c.kubectl(&[
        "create",
        "deployment",
        "web",
        &format!("--image={BUSYBOX}"),
        "--replicas=3",
        "--",
        "httpd",
        "-f",
        "-p",
        "8080",
    ]);
    let prefix = c.ctrd.pod_cidr.rsplit_once('.').unwrap().0.to_string();
    let pods = wait_for("3 web pods Running and Ready", WAIT, POLL, || {
        let pods = c.get(&["pods", "-l", "app=web"])["items"].as_array().cloned().unwrap_or_default();
        (pods.len() == 3 && pods.iter().all(|p| phase(p) == "Running" && condition(p, "Ready") == "True"))
            .then_some(pods)
    });
    for p in &pods {
        let ip = p["status"]["podIP"].as_str().unwrap();
        assert!(ip.starts_with(&prefix), "pod IP {ip} not in {}", c.ctrd.pod_cidr);
        let cs = container_status(p, 0);
        assert!(cs["containerID"].as_str().unwrap().starts_with("containerd://"), "{cs}");
        assert!(
            cs["state"]["running"]["startedAt"].is_string() && cs["ready"] == true && cs["started"] == true
        );
        assert_eq!(p["status"]["qosClass"], "BestEffort");
        assert_eq!(p["status"]["hostIP"], c.kubelet.ip.to_string());
        for cond in ["PodScheduled", "Initialized", "ContainersReady", "PodReadyToStartContainers"] {
            assert_eq!(condition(p, cond), "True", "{cond}: {p}");
        }
    }
    // Host to pod: httpd serves the container's files; /etc/hostname is the pod's name.
    let target = &pods[0];
    let target_ip = target["status"]["podIP"].as_str().unwrap().to_string();
    let target_name = target["metadata"]["name"].as_str().unwrap().to_string();
    let body = curl(&format!("http://{target_ip}:8080/etc/hostname")).expect("host reaches the pod");
    assert_eq!(body.trim(), target_name);
    // Pod to pod.
    c.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: client\nspec:\n  restartPolicy: Never\n  containers:\n  - name: wget\n    image: {BUSYBOX}\n    imagePullPolicy: IfNotPresent\n    command: [wget, -q, -O, '-', 'http://{target_ip}:8080/etc/hostname']\n"
    ));
    let client = c.wait_pod("client", "Succeeded", |p| phase(p) == "Succeeded");
    assert_eq!(container_status(&client, 0)["state"]["terminated"]["exitCode"], 0);
    assert_eq!(container_status(&client, 0)["state"]["terminated"]["reason"], "Completed");
    assert_eq!(c.logs("client", "wget").trim(), target_name);

    // kubectl through the API server to the kubelet: logs, exec (with stdin), cp, port-forward.
    assert_eq!(c.kubectl(&["logs", "client"]).trim(), target_name);
    let ls = c.kubectl(&["exec", &target_name, "--", "ls", "/"]);
    assert!(ls.lines().any(|l| l == "bin") && ls.lines().any(|l| l == "etc"), "{ls}");
    // kubectl speaks WebSocket v5 to the API server, which translates to SPDY for the
    // kubelet; at -v=4 client-go says when it falls back to SPDY, which must not happen.
    let out = c.api.kubectl_stdin(
        &["exec", "-v=4", "-i", &target_name, "--", "sh", "-c", "cat > /tmp/in; tr a-z A-Z < /tmp/in"],
        "from stdin\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "FROM STDIN\n", "{stderr}");
    assert!(!stderr.to_lowercase().contains("fallback"), "kubectl fell back to SPDY: {stderr}");
    // kube-rs speaks only WebSocket (v5 preferred): stdin closed mid-session ends `cat`.
    kube_rs_exec(&c.api.kubeconfig, &target_name);
    let local = c.kubelet.dir.path().join("cp-src.txt");
    std::fs::write(&local, "copied both ways\n").unwrap();
    c.kubectl(&["cp", local.to_str().unwrap(), &format!("default/{target_name}:/tmp/cp.txt")]);
    let back = c.kubelet.dir.path().join("cp-back.txt");
    c.kubectl(&["cp", &format!("default/{target_name}:/tmp/cp.txt"), back.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(&back).unwrap(), "copied both ways\n");
    let port = e2e::free_port(std::net::Ipv4Addr::LOCALHOST);
    let mut forward =
        c.api.kubectl_spawn(&["port-forward", &format!("pod/{target_name}"), &format!("{port}:8080")]);
    forward.read_lines(1, Duration::from_secs(30));
    let via_forward =
        curl(&format!("http://127.0.0.1:{port}/etc/hostname")).expect("a request through port-forward");
    assert_eq!(via_forward.trim(), target_name);
    drop(forward);

    // The kubelet API: authenticated and authorized; /pods and /metrics.
    assert_eq!(c.kubelet.get("/pods", None).0, 401, "anonymous is refused");
    assert_eq!(c.kubelet.get("/pods", Some("not-a-token")).0, 401);
    let (code, body) = c.kubelet.get("/pods", Some(ADMIN_TOKEN));
    assert_eq!(code, 200);
    assert!(e2e::json(&body)["items"].as_array().unwrap().len() >= 4, "{body}");
    // Three web pods run; the finished client's sandbox is stopped (soon after it
    // finished), as upstream.
    let metrics = wait_for("the client's sandbox stopped", WAIT, POLL, || {
        let (_, metrics) = c.kubelet.get("/metrics", Some(ADMIN_TOKEN));
        metrics.contains("kubelet_running_pods 3\n").then_some(metrics)
    });
    for m in [
        "kubelet_running_pods 3",
        "kubelet_pod_start_duration_seconds_count",
        "kubelet_pleg_relist_duration_seconds_bucket",
    ] {
        assert!(metrics.contains(m), "{m} not in /metrics");
    }
    assert!(metrics.contains("kubelet_running_containers{container_state=\"running\"} 3"), "{metrics}");
    // /stats/summary: the node from its cgroups and filesystems, the pods with containers
    // as containerd counts them; the target pod's network saw the requests above.
    let (code, body) = c.kubelet.get("/stats/summary", Some(ADMIN_TOKEN));
    assert_eq!(code, 200, "{body}");
    let summary = e2e::json(&body);
    let node = &summary["node"];
    assert_eq!(node["nodeName"], "kl-node-1");
    assert!(node["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap() > 0, "{node}");
    assert!(node["memory"]["workingSetBytes"].as_u64().unwrap() > 0, "{node}");
    assert!(node["fs"]["capacityBytes"].as_u64().unwrap() > 0, "{node}");
    assert!(node["runtime"]["imageFs"]["usedBytes"].as_u64().unwrap() > 0, "{node}");
    assert!(node["rlimit"]["curproc"].as_u64().unwrap() > 0, "{node}");
    let stats = summary["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == target_name.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{target_name} not in {summary}"));
    assert_eq!(stats["podRef"]["uid"], target["metadata"]["uid"]);
    let container = &stats["containers"][0];
    assert_eq!(container["name"], "busybox", "{stats}");
    assert!(container["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap() > 0, "{stats}");
    assert!(container["memory"]["workingSetBytes"].as_u64().unwrap() > 0, "{stats}");
    assert!(container["logs"]["capacityBytes"].as_u64().unwrap() > 0, "{stats}");
    assert!(stats["memory"]["usageBytes"].as_u64().unwrap() > 0, "{stats}");
    assert!(stats["process_stats"]["process_count"].as_u64().unwrap() >= 2, "pause and httpd: {stats}");
    assert_eq!(stats["network"]["name"], "eth0", "{stats}");
    assert!(stats["network"]["rxBytes"].as_u64().unwrap() > 0, "{stats}");
    let volume_names: Vec<&str> =
        stats["volume"].as_array().unwrap().iter().filter_map(|v| v["name"].as_str()).collect();
    for v in target["spec"]["volumes"].as_array().into_iter().flatten() {
        assert!(volume_names.contains(&v["name"].as_str().unwrap()), "{v} not in {stats}");
    }
    // A second summary has CPU rates.
    let again = e2e::json(&c.kubelet.get("/stats/summary?only_cpu_and_memory=true", Some(ADMIN_TOKEN)).1);
    assert!(again["node"]["cpu"]["usageNanoCores"].is_u64(), "{again}");
    assert!(again["node"].get("fs").is_none(), "only CPU and memory: {again}");

    // Deleting a pod stops it within its grace period and leaves nothing behind.
    let uid = target["metadata"]["uid"].as_str().unwrap().to_string();
    assert!(!c.runtime_objects(&uid).is_empty());
    c.kubectl(&["delete", "pod", &target_name, "--grace-period=3", "--wait=true", "--timeout=60s"]);
    c.assert_cleaned_up(&uid);
    // The ReplicaSet replaced it; scaling to zero stops them all.
    c.kubectl(&["scale", "deployment", "web", "--replicas=0"]);
    let uids: Vec<String> =
        pods.iter().skip(1).map(|p| p["metadata"]["uid"].as_str().unwrap().to_string()).collect();
    wait_for("web pods gone", WAIT, POLL, || {
        c.get(&["pods", "-l", "app=web"])["items"].as_array().is_some_and(|a| a.is_empty()).then_some(())
    });
    for uid in uids {
        c.assert_cleaned_up(&uid);
    }
}

#[test]
fn restarts_probes_and_crash_loop() {
    if skip() {
        return;
    }
    let c = Cluster::start("kl-node-2", true, &[], "");
    c.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: crash
spec:
  containers:
  - name: c
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "echo attempt; exit 3"]
---
apiVersion: v1
kind: Pod
metadata:
  name: live
spec:
  containers:
  - name: c
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "touch /tmp/healthy; sleep 4; rm /tmp/healthy; sleep 600"]
    livenessProbe:
      exec:
        command: [cat, /tmp/healthy]
      periodSeconds: 1
      failureThreshold: 2
---
apiVersion: v1
kind: Pod
metadata:
  name: ready
  labels: {{app: ready}}
spec:
  containers:
  - name: c
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "echo ok > /tmp/ready; httpd -p 8080 -h /tmp; sleep 8; rm /tmp/ready; sleep 600"]
    ports:
    - containerPort: 8080
      name: web
    readinessProbe:
      httpGet:
        path: /ready
        port: web
      periodSeconds: 1
      failureThreshold: 1
    startupProbe:
      tcpSocket:
        port: 8080
      periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata:
  name: ready
spec:
  selector: {{app: ready}}
  ports:
  - port: 80
    targetPort: 8080
"#
    ));
    // Readiness: Ready (and a ready endpoint) while /ready is served, then not.
    c.wait_pod("ready", "Ready", |p| condition(p, "Ready") == "True");
    let endpoint_ready = |want: bool| {
        wait_for(&format!("endpointslice endpoint ready={want}"), WAIT, POLL, || {
            let slices = c.get(&["endpointslices", "-l", "kubernetes.io/service-name=ready"]);
            let eps = slices["items"][0]["endpoints"].as_array().cloned().unwrap_or_default();
            eps.iter().any(|e| e["conditions"]["ready"] == want).then_some(())
        })
    };
    endpoint_ready(true);
    c.wait_pod("ready", "not Ready after /ready disappears", |p| {
        condition(p, "Ready") == "False" && container_status(p, 0)["state"]["running"].is_object()
    });
    endpoint_ready(false);

    // Liveness: the failing probe restarts the container.
    let live = c.wait_pod("live", "restarted by its liveness probe", |p| restart_count(p) >= 1);
    assert!(container_status(&live, 0)["lastState"]["terminated"].is_object(), "{live}");

    // A crashing container: restarts with growing back-off, CrashLoopBackOff in between.
    let crash = c.wait_pod("crash", "CrashLoopBackOff after 2 restarts", |p| {
        restart_count(p) >= 2 && container_status(p, 0)["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    });
    assert_eq!(phase(&crash), "Running", "a crash-looping pod stays Running, as upstream");
    assert_eq!(container_status(&crash, 0)["lastState"]["terminated"]["exitCode"], 3);
    let events = c.kubectl(&["get", "events", "--field-selector", "involvedObject.name=crash", "-o", "json"]);
    assert!(events.contains("BackOff") && events.contains("Started"), "{events}");
    // The previous instance's log, through kubectl and through the kubelet API; -f follows.
    assert_eq!(c.kubectl(&["logs", "crash", "--previous"]).trim(), "attempt");
    c.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ticker\nspec:\n  containers:\n  - name: c\n    image: {BUSYBOX}\n    command: [sh, -c, 'i=0; while true; do echo tick $i; i=$((i+1)); sleep 1; done']\n"
    ));
    c.wait_pod("ticker", "Running", |p| phase(p) == "Running");
    let mut follow = c.api.kubectl_spawn(&["logs", "-f", "ticker"]);
    let lines = follow.read_lines(3, Duration::from_secs(30)).to_vec();
    assert_eq!(lines[..3], ["tick 0", "tick 1", "tick 2"], "{lines:?}");
    drop(follow);
    // limitBytes cuts bytes, not lines (conformance: "kubectl logs should be able to
    // retrieve and filter logs"); with -f too.
    assert_eq!(c.kubectl(&["logs", "ticker", "--limit-bytes=1"]), "t");
    assert_eq!(c.kubectl(&["logs", "ticker", "--limit-bytes=9", "-f"]), "tick 0\nti");
    let (code, body) = c.kubelet.get("/containerLogs/default/crash/c?previous=true", Some(ADMIN_TOKEN));
    assert_eq!((code, body.trim()), (200, "attempt"));
    // The log over WebSocket (upstream's wsstream reader, as the conformance spec "should
    // support retrieving logs from the container over websockets" reads it): binary
    // messages, or base64 text ones, then a normal close.
    let path = "/api/v1/namespaces/default/pods/crash/log?previous=true";
    let (head, messages) = c.api.websocket_messages(path, Some("binary.k8s.io"));
    assert!(head.starts_with("HTTP/1.1 101") && head.contains("binary.k8s.io"), "{head}");
    assert!(messages.iter().all(|(op, _)| *op == 2), "{messages:?}");
    let text: Vec<u8> = messages.iter().flat_map(|(_, m)| m.clone()).collect();
    assert_eq!(String::from_utf8_lossy(&text), "attempt\n");
    let (_, messages) = c.api.websocket_messages(path, Some("base64.binary.k8s.io"));
    let decoded: Vec<u8> = messages
        .iter()
        .flat_map(|(op, m)| {
            assert_eq!(*op, 1, "base64 comes as text");
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, m).expect("base64")
        })
        .collect();
    assert_eq!(String::from_utf8_lossy(&decoded), "attempt\n");
    let (_, probes) = c.kubelet.get("/metrics/probes", Some(ADMIN_TOKEN));
    assert!(probes.contains("prober_probe_total{") && probes.contains("probe_type=\"Liveness\""), "{probes}");

    // httpGet lifecycle hooks: postStart after the start, preStop before the stop, each one
    // GET to another pod (a one-request-at-a-time `nc` that prints what it receives), with
    // upstream's User-Agent, as the conformance spec "should execute poststart http hook
    // properly" checks it.
    c.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: hook-handler
spec:
  containers:
  - name: c
    image: {BUSYBOX}
    command: [sh, -c, "while true; do printf 'HTTP/1.1 200 OK\\r\\nContent-Length: 0\\r\\n\\r\\n' | nc -l -p 8080; done"]
"#
    ));
    let handler = c.wait_pod("hook-handler", "Running with an IP", |p| {
        phase(p) == "Running" && p["status"]["podIP"].is_string()
    });
    let handler_ip = handler["status"]["podIP"].as_str().expect("podIP").to_owned();
    c.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: hooked
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: c
    image: {BUSYBOX}
    command: [sleep, "600"]
    lifecycle:
      postStart:
        httpGet: {{host: "{handler_ip}", port: 8080, path: "/echo?msg=poststart"}}
      preStop:
        httpGet: {{host: "{handler_ip}", port: 8080, path: "/echo?msg=prestop"}}
"#
    ));
    c.wait_pod("hooked", "Running", |p| phase(p) == "Running");
    let received = |what: &str| {
        wait_for(&format!("the handler receives {what}"), WAIT, POLL, || {
            let log = c.logs("hook-handler", "c");
            log.contains(&format!("GET /echo?msg={what} HTTP/1.1")).then_some(log)
        })
    };
    let log = received("poststart");
    assert!(log.contains("User-Agent: kube-lifecycle/1.32"), "{log}");
    c.kubectl(&["delete", "pod", "hooked", "--wait=false"]);
    received("prestop");

    // Admission: a pod bound straight to the node (past the scheduler's port check) that
    // asks for a host port another pod holds is rejected for good, as upstream's kubelet
    // does (the StatefulSet conformance spec "Should recreate evicted statefulset").
    for name in ["port-holder", "port-taker"] {
        c.apply(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeName: kl-node-2\n  containers:\n  - name: c\n    image: {BUSYBOX}\n    command: [sleep, '600']\n    ports:\n    - containerPort: 80\n      hostPort: 18080\n"
        ));
        if name == "port-holder" {
            c.wait_pod(name, "Running", |p| phase(p) == "Running");
        }
    }
    let taker = c.wait_pod("port-taker", "rejected", |p| phase(p) == "Failed");
    assert_eq!(taker["status"]["reason"], "NodePorts", "{taker}");
    assert!(
        taker["status"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Pod was rejected: Predicate NodePorts failed")),
        "{taker}"
    );
    assert_eq!(phase(&c.get(&["pod", "port-holder"])), "Running");

    // activeDeadlineSeconds: past it, the containers stop and the pod fails for good.
    c.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: deadline\nspec:\n  activeDeadlineSeconds: 3\n  containers:\n  - name: c\n    image: {BUSYBOX}\n    command: [sleep, '600']\n"
    ));
    let failed = c.wait_pod("deadline", "failed at its deadline", |p| phase(p) == "Failed");
    assert_eq!(failed["status"]["reason"], "DeadlineExceeded", "{failed}");
    assert!(container_status(&failed, 0)["state"]["terminated"].is_object(), "{failed}");
}

#[test]
fn volumes_env_and_service_account_tokens() {
    if skip() {
        return;
    }
    let c = Cluster::start("kl-node-3", false, &[], "");
    c.kubectl(&["create", "serviceaccount", "default"]);
    c.kubectl(&["create", "configmap", "cfg", "--from-literal=greeting=hello"]);
    c.kubectl(&["create", "secret", "generic", "sec", "--from-literal=password=s3cret"]);
    c.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: vols
  labels: {{tier: test}}
spec:
  serviceAccountName: default
  containers:
  - name: c
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    env:
    - name: GREETING
      valueFrom: {{configMapKeyRef: {{name: cfg, key: greeting}}}}
    - name: POD_NAME
      valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
    - name: COMBINED
      value: "$(GREETING)-$(POD_NAME)"
    command: [sh, -c, "echo env=$COMBINED; cat /sec/password; echo; cat /dapi/labels; echo; echo token=$(cat /tok/token); touch /scratch/x; while true; do echo cm=$(cat /cm/greeting); sleep 1; done"]
    volumeMounts:
    - {{name: cm, mountPath: /cm}}
    - {{name: sec, mountPath: /sec, readOnly: true}}
    - {{name: dapi, mountPath: /dapi}}
    - {{name: tok, mountPath: /tok}}
    - {{name: scratch, mountPath: /scratch}}
  volumes:
  - name: cm
    configMap: {{name: cfg}}
  - name: sec
    secret: {{secretName: sec, defaultMode: 0400}}
  - name: dapi
    downwardAPI:
      items:
      - path: labels
        fieldRef: {{fieldPath: metadata.labels}}
  - name: tok
    projected:
      sources:
      - serviceAccountToken: {{path: token, expirationSeconds: 3600}}
  - name: scratch
    emptyDir: {{medium: Memory, sizeLimit: 16Mi}}
"#
    ));
    c.wait_pod("vols", "Running", |p| phase(p) == "Running");
    let log = wait_for("the pod's output", WAIT, POLL, || {
        let l = c.logs("vols", "c");
        l.contains("cm=hello").then_some(l)
    });
    assert!(log.contains("env=hello-vols"), "{log}");
    assert!(log.contains("s3cret"), "{log}");
    assert!(log.contains("tier=\"test\""), "{log}");
    let token = log.lines().find_map(|l| l.strip_prefix("token=")).expect("token line").trim().to_string();
    // The projected token authenticates as the pod's service account.
    let out = c.api.kubectl(&["auth", "whoami", "-o", "json", "--token", &token]);
    let whoami = String::from_utf8_lossy(&out.stdout);
    assert!(
        whoami.contains("system:serviceaccount:default:default"),
        "{whoami} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Secrets and memory emptyDirs are tmpfs, never disk.
    let pod = c.get(&["pod", "vols"]);
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let vol_dir = c.kubelet.root_dir.join("pods").join(&uid).join("volumes");
    for v in ["kubernetes.io~secret/sec", "kubernetes.io~empty-dir/scratch", "kubernetes.io~projected/tok"] {
        let p = vol_dir.join(v).display().to_string();
        assert!(mounts.lines().any(|l| l.contains(&format!(" {p} tmpfs "))), "{p} is not a tmpfs");
    }
    // An updated ConfigMap reaches the mounted file (at the next sync, 10 s here).
    c.kubectl(&["patch", "configmap", "cfg", "-p", r#"{"data":{"greeting":"bonjour"}}"#]);
    wait_for("the updated configmap in the volume", WAIT, POLL, || {
        c.logs("vols", "c").contains("cm=bonjour").then_some(())
    });
    // A missing ConfigMap: CreateContainerConfigError, not a crash.
    c.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: nocm\nspec:\n  containers:\n  - name: c\n    image: {BUSYBOX}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, '600']\n    env:\n    - name: X\n      valueFrom: {{configMapKeyRef: {{name: missing, key: k}}}}\n"
    ));
    c.wait_pod("nocm", "CreateContainerConfigError", |p| {
        container_status(p, 0)["state"]["waiting"]["reason"] == "CreateContainerConfigError"
    });
    // An image that cannot be pulled: ErrImagePull, then ImagePullBackOff.
    c.apply("apiVersion: v1\nkind: Pod\nmetadata:\n  name: noimage\nspec:\n  containers:\n  - name: c\n    image: localhost/does-not-exist:1\n");
    c.wait_pod("noimage", "ImagePullBackOff", |p| {
        container_status(p, 0)["state"]["waiting"]["reason"] == "ImagePullBackOff"
    });
    c.kubectl(&["delete", "pod", "vols", "--grace-period=2", "--wait=true", "--timeout=60s"]);
    c.assert_cleaned_up(&uid);
    assert!(
        !std::fs::read_to_string("/proc/self/mounts").unwrap().contains(&uid),
        "volume mounts left behind"
    );
}

#[test]
fn static_pods_standalone_and_mirrored() {
    if skip() {
        return;
    }
    let manifest = |cmd: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: static-web\n  labels: {{role: static}}\nspec:\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: web\n    image: {BUSYBOX}\n    imagePullPolicy: IfNotPresent\n    command: [sh, -c, '{cmd}']\n"
        )
    };
    // Without any API server: the static pod runs.
    let ctrd = Containerd::start();
    {
        let standalone = Kubelet::start(None, &ctrd, "kl-standalone", None, "");
        std::fs::write(standalone.manifests.join("web.yaml"), manifest("sleep 600")).unwrap();
        wait_for("the static pod's container runs without an API server", WAIT, POLL, || {
            let out = ctrd.ctr(&["containers", "ls", "-q", "labels.\"io.kubernetes.container.name\"==web"]);
            let ids = String::from_utf8_lossy(&out.stdout).to_string();
            let id = ids.lines().next()?.to_string();
            let info = ctrd.ctr(&["tasks", "ls"]);
            String::from_utf8_lossy(&info.stdout)
                .lines()
                .any(|l| l.starts_with(&id) && l.contains("RUNNING"))
                .then_some(())
        });
    }
    drop(ctrd);

    let c = Cluster::start("kl-node-4", false, &[], "");
    std::fs::write(c.kubelet.manifests.join("web.yaml"), manifest("httpd -f -p 8080")).unwrap();
    let name = "static-web-kl-node-4";
    let mirror =
        c.wait_pod(name, "mirror pod Running", |p| phase(p) == "Running" && condition(p, "Ready") == "True");
    let ann = &mirror["metadata"]["annotations"];
    assert_eq!(ann["kubernetes.io/config.source"], "file");
    assert_eq!(ann["kubernetes.io/config.mirror"], ann["kubernetes.io/config.hash"]);
    assert_eq!(mirror["metadata"]["ownerReferences"][0]["kind"], "Node");
    let ip = mirror["status"]["podIP"].as_str().unwrap().to_string();
    let static_uid = ann["kubernetes.io/config.hash"].as_str().unwrap().to_string();
    let containers_before = c.runtime_objects(&static_uid);
    assert_eq!(containers_before.len(), 2, "sandbox + container: {containers_before:?}");

    // Deleting the mirror pod does not stop the static pod; the mirror comes back.
    let mirror_uid = mirror["metadata"]["uid"].as_str().unwrap().to_string();
    c.kubectl(&["delete", "pod", name, "--wait=false"]);
    c.wait_pod(name, "mirror pod recreated", |p| p["metadata"]["uid"].as_str() != Some(mirror_uid.as_str()));
    assert_eq!(c.runtime_objects(&static_uid), containers_before, "the static pod kept running");
    assert!(curl(&format!("http://{ip}:8080/etc/hostname")).is_some());

    // A changed manifest is a new pod; a removed manifest stops it and its mirror.
    std::fs::write(c.kubelet.manifests.join("web.yaml"), manifest("sleep 600")).unwrap();
    let changed = c.wait_pod(name, "the changed static pod", |p| {
        p["metadata"]["annotations"]["kubernetes.io/config.hash"].as_str().is_some_and(|h| h != static_uid)
            && phase(p) == "Running"
    });
    c.assert_cleaned_up(&static_uid);
    let new_uid =
        changed["metadata"]["annotations"]["kubernetes.io/config.hash"].as_str().unwrap().to_string();
    std::fs::remove_file(c.kubelet.manifests.join("web.yaml")).unwrap();
    c.assert_cleaned_up(&new_uid);
    wait_for("the mirror pod deleted", WAIT, POLL, || c.try_get(&["pod", name]).is_none().then_some(()));
}

#[test]
fn stopped_kubelet_node_goes_not_ready_and_pods_move() {
    if skip() {
        return;
    }
    let mut c = Cluster::start(
        "kl-node-5",
        true,
        &["--node-monitor-period=1s", "--node-monitor-grace-period=8s"],
        "",
    );
    c.apply(&format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: movers
spec:
  replicas: 2
  selector:
    matchLabels: {{app: movers}}
  template:
    metadata:
      labels: {{app: movers}}
    spec:
      terminationGracePeriodSeconds: 1
      tolerations:
      - {{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}}
      - {{key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}}
      containers:
      - name: c
        image: {BUSYBOX}
        command: [sleep, "3600"]
"#
    ));
    wait_for("2 movers Running on kl-node-5", WAIT, POLL, || {
        let pods = c.get(&["pods", "-l", "app=movers"])["items"].as_array().cloned().unwrap_or_default();
        (pods.len() == 2
            && pods.iter().all(|p| phase(p) == "Running" && p["spec"]["nodeName"] == "kl-node-5"))
        .then_some(())
    });
    // A second node (a fake kubelet keeps it alive), then the real kubelet stops.
    let _spare = e2e::fake_kubelet::FakeKubelet::start(&c.api.kubeconfig, &["kl-spare"]);
    c.kubelet.kill();
    wait_for("kl-node-5 NotReady (Unknown)", WAIT, POLL, || {
        let n = c.get(&["node", "kl-node-5"]);
        conditions(&n).iter().any(|c| c["type"] == "Ready" && c["status"] == "Unknown").then_some(())
    });
    wait_for("the movers evicted and replaced on kl-spare", WAIT, POLL, || {
        let pods = c.get(&["pods", "-l", "app=movers"])["items"].as_array().cloned().unwrap_or_default();
        let live: Vec<&Value> =
            pods.iter().filter(|p| p["metadata"]["deletionTimestamp"].is_null()).collect();
        (live.len() == 2 && live.iter().all(|p| p["spec"]["nodeName"] == "kl-spare")).then_some(())
    });
    // The kubelet comes back: the node is Ready again and the evicted pods' containers go.
    c.kubelet.restart();
    c.wait_node_ready("kl-node-5");
    wait_for("evicted pods finished on kl-node-5", WAIT, POLL, || {
        let pods = c.get(&["pods", "-l", "app=movers"])["items"].as_array().cloned().unwrap_or_default();
        pods.iter().all(|p| p["spec"]["nodeName"] == "kl-spare").then_some(())
    });
}

#[test]
fn sub_paths_expand_and_never_leave_their_volume() {
    if skip() {
        return;
    }
    let c = Cluster::start("kl-node-subpath", false, &[], "");
    // subPathExpr from the pod's name: the directory is made in the volume, with the
    // volume's mode, and what the container writes there shows in the whole volume.
    c.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: subexpr
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    env:
    - name: POD_NAME
      valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
    command: [sh, -c, "echo hi > /mine/f && test -f /whole/subexpr/f && echo ok; sleep 600"]
    volumeMounts:
    - {{name: work, mountPath: /mine, subPathExpr: "$(POD_NAME)"}}
    - {{name: work, mountPath: /whole}}
  volumes:
  - {{name: work, emptyDir: {{}}}}
"#
    ));
    c.wait_pod("subexpr", "Running", |p| phase(p) == "Running");
    wait_for("subPathExpr pod's output", WAIT, POLL, || c.logs("subexpr", "c").contains("ok").then_some(()));

    // A symlink an earlier container planted in the volume, pointing out of it: the main
    // container's subPath through it is refused (CreateContainerConfigError), the host's
    // directory is never mounted.
    c.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: escape
spec:
  initContainers:
  - name: plant
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "ln -s /etc /work/escape"]
    volumeMounts:
    - {{name: work, mountPath: /work}}
  containers:
  - name: c
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: [sleep, "600"]
    volumeMounts:
    - {{name: work, mountPath: /hostetc, subPath: escape}}
  volumes:
  - {{name: work, emptyDir: {{}}}}
"#
    ));
    c.wait_pod("escape", "CreateContainerConfigError", |p| {
        container_status(p, 0)["state"]["waiting"]["reason"] == "CreateContainerConfigError"
    });
    let pod = c.get(&["pod", "escape"]);
    let msg = container_status(&pod, 0)["state"]["waiting"]["message"].as_str().unwrap_or("").to_string();
    assert!(msg.contains("failed to prepare subPath for volumeMount \"work\""), "{msg}");
    assert!(!std::fs::read_to_string("/proc/self/mounts").unwrap().lines().any(|l| l.starts_with("/etc ")));

    // An expansion that yields an absolute path, or a variable with no value: refused
    // with upstream's reasons.
    c.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: absolute
spec:
  containers:
  - name: c
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: [sleep, "600"]
    env:
    - {{name: P, value: /tmp}}
    volumeMounts:
    - {{name: work, mountPath: /x, subPathExpr: "$(P)"}}
  volumes:
  - {{name: work, emptyDir: {{}}}}
"#
    ));
    c.wait_pod("absolute", "CreateContainerConfigError", |p| {
        container_status(p, 0)["state"]["waiting"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("must not be an absolute path"))
    });
    let uid = c.get(&["pod", "subexpr"])["metadata"]["uid"].as_str().unwrap().to_string();
    c.kubectl(&[
        "delete",
        "pod",
        "subexpr",
        "escape",
        "absolute",
        "--grace-period=1",
        "--wait=true",
        "--timeout=60s",
    ]);
    c.assert_cleaned_up(&uid);
}

/// Ephemeral containers as `kubectl debug` adds them: started in the running pod, in the
/// target container's process namespace, reported in `ephemeralContainerStatuses`,
/// reachable by exec and logs, and never restarted once they end.
#[test]
fn ephemeral_containers_with_kubectl_debug() {
    if skip() {
        return;
    }
    let c = Cluster::start("kl-node-debug", false, &[], "");
    c.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: target
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: {BUSYBOX}
    imagePullPolicy: IfNotPresent
    command: [sleep, "600"]
"#
    ));
    c.wait_pod("target", "Running", |p| phase(p) == "Running");
    let ephemeral = |p: &Value, name: &str| -> Value {
        p["status"]["ephemeralContainerStatuses"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["name"] == name).cloned())
            .unwrap_or(Value::Null)
    };
    c.kubectl(&[
        "debug",
        "target",
        &format!("--image={BUSYBOX}"),
        "--image-pull-policy=IfNotPresent",
        "--container=debugger",
        "--target=app",
        "--",
        "sleep",
        "600",
    ]);
    c.wait_pod("target", "debugger running", |p| ephemeral(p, "debugger")["state"]["running"].is_object());
    // The target's processes are visible from the debugger.
    let ps = c.kubectl(&["exec", "target", "-c", "debugger", "--", "ps", "-o", "args"]);
    assert_eq!(ps.lines().filter(|l| l.trim() == "sleep 600").count(), 2, "{ps}");
    // One that ends stays ended; its log is kept.
    c.kubectl(&[
        "debug",
        "target",
        &format!("--image={BUSYBOX}"),
        "--image-pull-policy=IfNotPresent",
        "--container=once",
        "--",
        "sh",
        "-c",
        "echo debugged; exit 3",
    ]);
    let pod =
        c.wait_pod("target", "once terminated", |p| ephemeral(p, "once")["state"]["terminated"].is_object());
    let once = ephemeral(&pod, "once");
    assert_eq!(once["state"]["terminated"]["exitCode"], 3, "{once}");
    assert_eq!(once["restartCount"], 0, "{once}");
    assert_eq!(c.logs("target", "once").trim(), "debugged");
    // The pod itself is untouched: still running and ready.
    let pod = c.get(&["pod", "target"]);
    assert_eq!(phase(&pod), "Running");
    assert_eq!(condition(&pod, "Ready"), "True");
    // Adding one again under a name in use is refused by the API server.
    let out =
        c.api.kubectl(&["debug", "target", &format!("--image={BUSYBOX}"), "--container=app", "--", "true"]);
    assert!(!out.status.success(), "a second container named app was accepted");
}
