//! A stand-in for kubelets in controller tests and benchmarks: it registers Nodes, renews
//! their Leases in `kube-node-lease` while they are "alive", marks the pods bound to them
//! Running and Ready (with a pod IP) unless told to hold a pod not-ready, and finishes
//! graceful deletions as a kubelet would once its containers stopped. No containers run.

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

#[derive(Default)]
struct State {
    /// Node name → whether its Lease is renewed.
    nodes: Mutex<HashMap<String, bool>>,
    /// Pods (`namespace/name`) held not-ready.
    not_ready: Mutex<HashSet<String>>,
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
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
            ..DeleteParams::default()
        };
        let _ = api.delete(&name, &dp).await;
        return;
    }
    let want_ready = !state.not_ready.lock().contains(&format!("{ns}/{name}"));
    let has_ip = pod.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some();
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
