//! A stand-in for kubelets in controller tests and benchmarks: it registers Nodes, renews
//! their Leases in `kube-node-lease` while they are "alive", marks the pods bound to them
//! Running and Ready (with a pod IP) unless told to hold a pod (or a node's pods)
//! not-ready, and finishes graceful deletions as a kubelet would once its containers
//! stopped. No containers run.
//!
//! Pods that should run to completion say how in annotations: [`EXIT_CODE`] (every
//! container exits with it; [`EXIT_CODES_BY_INDEX`] per Indexed Job index) after
//! [`RUN_SECONDS`] (default 0) of running. With
//! `restartPolicy: Never` (or exit code 0) the pod then becomes `Succeeded`/`Failed` with
//! terminated container states, as a kubelet reports them; with `OnFailure` a non-zero
//! exit restarts the container instead (`restartCount` grows every `RUN_SECONDS`).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use serde_json::json;

/// Annotation: the exit code every container of the pod exits with.
pub const EXIT_CODE: &str = "fake-kubelet.k8s-rs.io/exit-code";
/// Annotation: seconds the containers run before exiting (fractions allowed).
pub const RUN_SECONDS: &str = "fake-kubelet.k8s-rs.io/run-seconds";
/// Annotation: exit codes of Indexed Job pods by completion index (`1=3,4=42`), over
/// [`EXIT_CODE`].
pub const EXIT_CODES_BY_INDEX: &str = "fake-kubelet.k8s-rs.io/exit-codes-by-index";

#[derive(Default)]
struct State {
    /// Node name → whether its Lease is renewed.
    nodes: Mutex<HashMap<String, bool>>,
    /// Pods (`namespace/name`) held not-ready.
    not_ready: Mutex<HashSet<String>>,
    /// Nodes whose pods are all held not-ready.
    not_ready_nodes: Mutex<HashSet<String>>,
    stop: AtomicBool,
    next_ip: AtomicU32,
}

pub struct FakeKubelet {
    state: Arc<State>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A client for the admin kubeconfig.
pub async fn client(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("config");
    kube::Client::try_from(config).expect("client")
}

fn now() -> String {
    Timestamp::now().to_string()
}

impl FakeKubelet {
    /// Registers `nodes` (Ready, 32 CPUs, 64 GiB, 250 pods each; `zone` label from the
    /// `zones` list, round robin) and starts playing their kubelets.
    pub fn start(kubeconfig: &Path, nodes: &[&str]) -> FakeKubelet {
        let state = Arc::new(State::default());
        for n in nodes {
            state.nodes.lock().insert(n.to_string(), true);
        }
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let st = state.clone();
        let kubeconfig = kubeconfig.to_owned();
        let thread = std::thread::spawn(move || {
            let rt =
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async move {
                let client = client(&kubeconfig).await;
                register(&client, &st).await;
                let _ = ready_tx.send(());
                run(client, st).await;
            });
        });
        ready_rx.recv_timeout(Duration::from_secs(60)).expect("fake kubelet registered its nodes");
        FakeKubelet { state, thread: Some(thread) }
    }

    /// Stops (or resumes) renewing `node`'s Lease, as a kubelet that died would.
    pub fn set_alive(&self, node: &str, alive: bool) {
        self.state.nodes.lock().insert(node.to_owned(), alive);
    }

    /// Holds every pod on `node` not-ready (or lets them be ready again).
    pub fn set_node_pods_ready(&self, node: &str, ready: bool) {
        let mut held = self.state.not_ready_nodes.lock();
        if ready {
            held.remove(node);
        } else {
            held.insert(node.to_owned());
        }
    }

    /// Holds the pod `namespace/name` not-ready (or lets it be ready again).
    pub fn set_ready(&self, pod: &str, ready: bool) {
        let mut held = self.state.not_ready.lock();
        if ready {
            held.remove(pod);
        } else {
            held.insert(pod.to_owned());
        }
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn register(client: &kube::Client, state: &State) {
    let nodes: Vec<String> = state.nodes.lock().keys().cloned().collect();
    let api = Api::<Node>::all(client.clone());
    for (i, name) in nodes.iter().enumerate() {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": format!("zone-{}", i % 2),
            }},
        }))
        .unwrap();
        match api.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("creating node {name}: {e}"),
        }
        let status = json!({"status": {
            "capacity": {"cpu": "32", "memory": "64Gi", "pods": "250"},
            "allocatable": {"cpu": "32", "memory": "64Gi", "pods": "250"},
            "addresses": [{"type": "InternalIP", "address": format!("10.0.0.{}", i + 1)}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status", "lastHeartbeatTime": now(),
                "lastTransitionTime": now()}],
        }});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await.expect("node status");
    }
}

async fn renew_leases(client: &kube::Client, state: &State) {
    let alive: Vec<String> = state.nodes.lock().iter().filter(|(_, a)| **a).map(|(n, _)| n.clone()).collect();
    let api = Api::<Lease>::namespaced(client.clone(), "kube-node-lease");
    for node in alive {
        let renew = serde_json::to_value(MicroTime(Timestamp::now())).unwrap();
        let patch = json!({"spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": renew}});
        let result = match api.patch(&node, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Err(kube::Error::Api(s)) if s.code == 404 => {
                let mut lease = patch.clone();
                lease["metadata"] = json!({"name": node});
                let lease: Lease = serde_json::from_value(lease).unwrap();
                api.create(&PostParams::default(), &lease).await.map(drop)
            }
            r => r.map(drop),
        };
        if let Err(e) = result {
            eprintln!("fake kubelet: renewing lease {node}: {e}");
        }
    }
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// What the kubelet of `pod`'s node would do next, if anything.
async fn handle(client: kube::Client, state: Arc<State>, pod: Arc<Pod>) {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api = Api::<Pod>::namespaced(client, &ns);
    if pod.metadata.deletion_timestamp.is_some() {
        // Finalizers keep the pod after the delete: report the stopped containers first
        // (a kubelet marks a deleted pod terminal), once.
        let lingers = pod.metadata.finalizers.as_ref().is_some_and(|f| !f.is_empty());
        if lingers && is_terminal(&pod) {
            return;
        }
        if lingers && !is_terminal(&pod) {
            let patch = terminal_status(&pod, 137);
            let _ = api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch)).await;
        }
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
            ..DeleteParams::default()
        };
        let _ = api.delete(&name, &dp).await;
        return;
    }
    if is_terminal(&pod) {
        return;
    }
    let has_ip = pod.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some();
    if has_ip && let Some(code) = exit_code(&pod) {
        // Running: exit once the run time is over (a scan comes by at least every 200 ms).
        let started = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.first())
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.running.as_ref())
            .and_then(|r| r.started_at.as_ref())
            .map(|t| t.0)
            .unwrap_or_else(Timestamp::now);
        if Timestamp::now().duration_since(started).as_secs_f64() < run_seconds(&pod) {
            return;
        }
        let restart = pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()).unwrap_or("Always");
        let patch = if code != 0 && restart != "Never" {
            restarted_status(&pod, code)
        } else {
            terminal_status(&pod, code)
        };
        let _ = api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch)).await;
        return;
    }
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    let want_ready = !state.not_ready.lock().contains(&format!("{ns}/{name}"))
        && !state.not_ready_nodes.lock().contains(&node);
    if has_ip && is_ready(&pod) == want_ready {
        return;
    }
    let ip = match pod.status.as_ref().and_then(|s| s.pod_ip.clone()) {
        Some(ip) => ip,
        None => {
            let n = state.next_ip.fetch_add(1, Ordering::SeqCst);
            format!("10.88.{}.{}", n / 250, n % 250 + 1)
        }
    };
    let ready = if want_ready { "True" } else { "False" };
    let containers: Vec<_> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| {
            json!({"name": c.name, "ready": want_ready, "started": true, "restartCount": 0,
                "image": c.image, "imageID": "", "containerID": format!("fake://{name}-{}", c.name),
                "state": {"running": {"startedAt": now()}}})
        })
        .collect();
    let patch = json!({"status": {
        "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "10.0.0.1",
        "startTime": pod.status.as_ref().and_then(|s| s.start_time.clone()).map(|t| t.0.to_string()).unwrap_or_else(now),
        "conditions": [
            {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": now()},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now()},
            {"type": "Ready", "status": ready, "lastTransitionTime": now()},
            {"type": "ContainersReady", "status": ready, "lastTransitionTime": now()},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()},
        ],
        "containerStatuses": containers,
    }});
    let _ = api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch)).await;
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

fn exit_code(pod: &Pod) -> Option<i32> {
    let by_index = annotation(pod, "batch.kubernetes.io/job-completion-index").and_then(|ix| {
        annotation(pod, EXIT_CODES_BY_INDEX)?
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .find(|(i, _)| i.trim() == ix)
            .and_then(|(_, code)| code.trim().parse().ok())
    });
    by_index.or_else(|| annotation(pod, EXIT_CODE)?.parse().ok())
}

fn run_seconds(pod: &Pod) -> f64 {
    annotation(pod, RUN_SECONDS).and_then(|s| s.parse().ok()).unwrap_or(0.0)
}

fn container_names(pod: &Pod) -> Vec<(String, String)> {
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
        .collect()
}

/// The status of a pod whose containers all exited with `code`: `Succeeded` for 0.
fn terminal_status(pod: &Pod, code: i32) -> serde_json::Value {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let started =
        pod.status.as_ref().and_then(|s| s.start_time.clone()).map(|t| t.0.to_string()).unwrap_or_else(now);
    let reason = if code == 0 { "Completed" } else { "Error" };
    let containers: Vec<_> = container_names(pod)
        .into_iter()
        .map(|(c, image)| {
            json!({"name": c, "ready": false, "started": false, "image": image, "imageID": "",
                "containerID": format!("fake://{name}-{c}"),
                "restartCount": 0,
                "state": {"terminated": {"exitCode": code, "reason": reason, "startedAt": started,
                    "finishedAt": now(), "containerID": format!("fake://{name}-{c}")}}})
        })
        .collect();
    let not_ready = |t: &str| json!({"type": t, "status": "False", "reason": "PodCompleted", "lastTransitionTime": now()});
    json!({"status": {
        "phase": if code == 0 { "Succeeded" } else { "Failed" },
        "startTime": started,
        "conditions": [
            {"type": "PodReadyToStartContainers", "status": "False", "lastTransitionTime": now()},
            {"type": "Initialized", "status": "True", "reason": "PodCompleted", "lastTransitionTime": now()},
            not_ready("Ready"),
            not_ready("ContainersReady"),
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()},
        ],
        "containerStatuses": containers,
    }})
}

/// A container restarted after exiting with `code` (`restartPolicy: OnFailure`/`Always`).
fn restarted_status(pod: &Pod, code: i32) -> serde_json::Value {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let restarts = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map(|c| c.restart_count)
        .unwrap_or(0);
    let containers: Vec<_> = container_names(pod)
        .into_iter()
        .map(|(c, image)| {
            json!({"name": c, "ready": true, "started": true, "image": image, "imageID": "",
                "containerID": format!("fake://{name}-{c}"), "restartCount": restarts + 1,
                "state": {"running": {"startedAt": now()}},
                "lastState": {"terminated": {"exitCode": code, "reason": "Error", "finishedAt": now()}}})
        })
        .collect();
    json!({"status": {"containerStatuses": containers}})
}

async fn run(client: kube::Client, state: Arc<State>) {
    let (store, writer) = reflector::store::<Pod>();
    let pods = Api::<Pod>::all(client.clone());
    let stream = reflector::reflector(writer, watcher(pods, watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    let changed = Arc::new(tokio::sync::Notify::new());
    {
        let changed = changed.clone();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while stream.next().await.is_some() {
                changed.notify_one();
            }
        });
    }
    let mut last_lease = std::time::Instant::now() - Duration::from_secs(10);
    while !state.stop.load(Ordering::SeqCst) {
        if last_lease.elapsed() >= Duration::from_secs(1) {
            renew_leases(&client, &state).await;
            last_lease = std::time::Instant::now();
        }
        scan(&client, &state, &store).await;
        let _ = tokio::time::timeout(Duration::from_millis(200), changed.notified()).await;
    }
}

async fn scan(client: &kube::Client, state: &Arc<State>, store: &Store<Pod>) {
    let nodes: HashSet<String> =
        state.nodes.lock().iter().filter(|(_, a)| **a).map(|(n, _)| n.clone()).collect();
    let work: Vec<Arc<Pod>> = store
        .state()
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| nodes.contains(n)))
        .collect();
    futures::stream::iter(work)
        .for_each_concurrent(16, |pod| handle(client.clone(), state.clone(), pod))
        .await;
}
