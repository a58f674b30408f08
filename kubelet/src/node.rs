//! The kubelet's Node: registration (labels, taints, capacity, addresses, nodeInfo), the
//! status (conditions from the runtime's state, allocatable after eviction thresholds,
//! images), written on change and at least every `nodeStatusReportFrequency`, and the
//! heartbeat Lease in `kube-node-lease` renewed every quarter of its duration.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec,
    NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::config::KubeletConfiguration;
use crate::options::Options;
use crate::{KUBELET_VERSION, Kubelet, cri};

/// What the machine is, read once at start.
#[derive(Debug, Clone, Default)]
pub struct MachineFacts {
    pub cpu_milli: i64,
    pub memory_capacity: i64,
    pub ephemeral_capacity: i64,
    pub internal_ip: String,
    pub hostname: String,
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
    pub kernel: String,
    pub os_image: String,
    pub arch: String,
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The first non-loopback IPv4 address of the host.
fn host_ipv4() -> Option<String> {
    let mut addrs: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below; we only read entries with an IPv4 family.
    unsafe {
        if libc::getifaddrs(&mut addrs) != 0 {
            return None;
        }
        let mut found = None;
        let mut cur = addrs;
        while !cur.is_null() {
            let a = (*cur).ifa_addr;
            if !a.is_null() && i32::from((*a).sa_family) == libc::AF_INET {
                let sin = a as *const libc::sockaddr_in;
                let ip = std::net::Ipv4Addr::from(u32::from_be((*sin).sin_addr.s_addr));
                if !ip.is_loopback() {
                    found = Some(ip.to_string());
                    break;
                }
            }
            cur = (*cur).ifa_next;
        }
        libc::freeifaddrs(addrs);
        found
    }
}

/// When the machine booted (`btime` in `/proc/stat`), RFC 3339.
pub fn boot_time() -> Option<String> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let secs: i64 = stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
    Some(crate::stats::rfc3339(k8s_openapi::jiff::Timestamp::from_second(secs).ok()?))
}

pub fn machine_facts(opts: &Options) -> MachineFacts {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: i64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let cpus = std::thread::available_parallelism().map(|n| n.get() as i64).unwrap_or(1);
    let _ = std::fs::create_dir_all(&opts.root_dir);
    let ephemeral = crate::stats::statvfs(&opts.root_dir).map_or(0, |fs| fs.capacity as i64);
    let os_image = std::fs::read_to_string("/etc/os-release")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME=").map(|v| v.trim_matches('"').to_string()))
        .unwrap_or_else(|| "Linux".into());
    let machine_id = read_trim("/etc/machine-id");
    let uuid = read_trim("/sys/class/dmi/id/product_uuid");
    MachineFacts {
        cpu_milli: cpus * 1000,
        memory_capacity: mem_kib * 1024,
        ephemeral_capacity: ephemeral,
        internal_ip: opts
            .node_ip
            .map(|ip| ip.to_string())
            .or_else(host_ipv4)
            .unwrap_or_else(|| "127.0.0.1".into()),
        hostname: opts.node_name.clone(),
        system_uuid: if uuid.is_empty() { machine_id.clone() } else { uuid },
        machine_id,
        boot_id: read_trim("/proc/sys/kernel/random/boot_id"),
        kernel: read_trim("/proc/sys/kernel/osrelease"),
        os_image,
        arch: match std::env::consts::ARCH {
            "x86_64" => "amd64".into(),
            "aarch64" => "arm64".into(),
            other => other.into(),
        },
    }
}

/// `capacity` minus the hard eviction threshold `signal` (a quantity or a percentage).
fn minus_threshold(config: &KubeletConfiguration, signal: &str, capacity: i64) -> i64 {
    let reserve = match config.eviction_hard.get(signal) {
        Some(v) if v.ends_with('%') => {
            v.trim_end_matches('%').parse::<f64>().map(|p| (capacity as f64 * p / 100.0) as i64).unwrap_or(0)
        }
        Some(v) => component_base::quantity::parse_value(v).unwrap_or(0),
        None => 0,
    };
    (capacity - reserve).max(0)
}

impl MachineFacts {
    pub fn allocatable_memory(&self, config: &KubeletConfiguration) -> i64 {
        minus_threshold(config, "memory.available", self.memory_capacity)
    }

    pub fn allocatable_ephemeral(&self, config: &KubeletConfiguration) -> i64 {
        minus_threshold(config, "nodefs.available", self.ephemeral_capacity)
    }

    fn resources(&self, config: &KubeletConfiguration, allocatable: bool) -> BTreeMap<String, Quantity> {
        let (mem, eph) = if allocatable {
            (self.allocatable_memory(config), self.allocatable_ephemeral(config))
        } else {
            (self.memory_capacity, self.ephemeral_capacity)
        };
        BTreeMap::from([
            ("cpu".to_string(), Quantity(component_base::quantity::format_milli(self.cpu_milli, false))),
            ("memory".to_string(), Quantity(format!("{}Ki", mem / 1024))),
            ("ephemeral-storage".to_string(), Quantity(eph.to_string())),
            ("pods".to_string(), Quantity(config.max_pods.to_string())),
            ("hugepages-2Mi".to_string(), Quantity("0".into())),
        ])
    }
}

/// The Node object this kubelet registers.
fn initial_node(k: &Kubelet, facts: &MachineFacts) -> Node {
    let mut labels: BTreeMap<String, String> = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), k.opts.node_name.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), facts.arch.clone()),
        ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
        ("beta.kubernetes.io/arch".to_string(), facts.arch.clone()),
    ]);
    labels.extend(k.opts.node_labels.clone());
    let taints: Vec<Taint> = k
        .config()
        .register_with_taints
        .iter()
        .map(|t| Taint {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: t.effect.clone(),
            time_added: None,
        })
        .collect();
    Node {
        metadata: ObjectMeta {
            name: Some(k.opts.node_name.clone()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                "volumes.kubernetes.io/controller-managed-attach-detach".to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(NodeSpec { taints: (!taints.is_empty()).then_some(taints), ..Default::default() }),
        status: None,
    }
}

/// Registers the Node (retrying until the API server takes it), then keeps its status and
/// Lease current until shutdown.
pub async fn run(k: Arc<Kubelet>, client: kube::Client, facts: MachineFacts, version: cri::VersionResponse) {
    let nodes: Api<Node> = Api::all(client.clone());
    if k.config().register_node {
        let node = initial_node(&k, &facts);
        loop {
            match nodes.create(&PostParams::default(), &node).await {
                Ok(_) => {
                    tracing::info!(node = %k.opts.node_name, "registered node");
                    break;
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    tracing::info!(node = %k.opts.node_name, "node already registered");
                    break;
                }
                Err(err) => {
                    tracing::warn!(%err, "registering node; retrying");
                    tokio::select! {
                        () = k.shutdown.wait() => return,
                        () = tokio::time::sleep(Duration::from_secs(2)) => {}
                    }
                }
            }
        }
    }
    tokio::spawn(run_lease(k.clone(), client.clone()));
    let update = KubeletConfiguration::duration(&k.config().node_status_update_frequency);
    let report = KubeletConfiguration::duration(&k.config().node_status_report_frequency);
    let mut last: Option<(NodeStatus, Instant)> = None;
    loop {
        let status = node_status(&k, &facts, &version, last.as_ref().map(|(s, _)| s)).await;
        let due = match &last {
            None => true,
            Some((prev, at)) => !same_ignoring_heartbeats(prev, &status) || at.elapsed() >= report,
        };
        if due {
            let patch = serde_json::json!({ "status": status });
            match nodes.patch_status(&k.opts.node_name, &PatchParams::default(), &Patch::Merge(&patch)).await
            {
                Ok(_) => last = Some((status, Instant::now())),
                Err(err) => tracing::warn!(%err, "updating node status"),
            }
        }
        tokio::select! {
            () = k.shutdown.wait() => return,
            () = tokio::time::sleep(update) => {}
        }
    }
}

fn same_ignoring_heartbeats(a: &NodeStatus, b: &NodeStatus) -> bool {
    let strip = |s: &NodeStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_heartbeat_time = None;
        }
        s
    };
    strip(a) == strip(b)
}

async fn node_status(
    k: &Kubelet,
    facts: &MachineFacts,
    version: &cri::VersionResponse,
    prev: Option<&NodeStatus>,
) -> NodeStatus {
    let now = Time(Timestamp::now());
    // Ready follows the runtime: both RuntimeReady and NetworkReady must hold.
    let not_ready: Option<String> = match k.runtime.status().await {
        Ok(s) => s
            .status
            .unwrap_or_default()
            .conditions
            .iter()
            .filter(|c| !c.status && (c.r#type == "RuntimeReady" || c.r#type == "NetworkReady"))
            .map(|c| format!("container runtime {} is false: {}: {}", c.r#type, c.reason, c.message))
            .reduce(|a, b| format!("{a}, {b}")),
        Err(err) => Some(format!("container runtime is down: {err}")),
    };
    let cond = |type_: &str, status: bool, reason: &str, message: &str| {
        let s = if status { "True" } else { "False" };
        let since = prev
            .and_then(|p| p.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == type_ && c.status == s))
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| now.clone());
        NodeCondition {
            type_: type_.into(),
            status: s.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_heartbeat_time: Some(now.clone()),
            last_transition_time: Some(since),
        }
    };
    let ready = match &not_ready {
        None => cond("Ready", true, "KubeletReady", "kubelet is posting ready status"),
        Some(msg) => cond("Ready", false, "KubeletNotReady", msg),
    };
    let images = match k.runtime.list_images().await {
        Ok(mut list) => {
            list.sort_by_key(|i| std::cmp::Reverse(i.size));
            list.truncate(50);
            list.into_iter()
                .map(|i| ContainerImage {
                    names: Some(i.repo_digests.into_iter().chain(i.repo_tags).collect()),
                    size_bytes: Some(i.size as i64),
                })
                .collect()
        }
        Err(_) => Vec::new(),
    };
    NodeStatus {
        capacity: Some(facts.resources(k.config(), false)),
        allocatable: Some(facts.resources(k.config(), true)),
        conditions: Some(vec![
            cond(
                "MemoryPressure",
                false,
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            cond("DiskPressure", false, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            cond("PIDPressure", false, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            ready,
        ]),
        addresses: Some(vec![
            NodeAddress { type_: "InternalIP".into(), address: facts.internal_ip.clone() },
            NodeAddress { type_: "Hostname".into(), address: facts.hostname.clone() },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: i32::from(k.config().port) }),
        }),
        node_info: Some(NodeSystemInfo {
            machine_id: facts.machine_id.clone(),
            system_uuid: facts.system_uuid.clone(),
            boot_id: facts.boot_id.clone(),
            kernel_version: facts.kernel.clone(),
            os_image: facts.os_image.clone(),
            container_runtime_version: format!("{}://{}", version.runtime_name, version.runtime_version),
            kubelet_version: KUBELET_VERSION.into(),
            kube_proxy_version: String::new(),
            operating_system: "linux".into(),
            architecture: facts.arch.clone(),
            ..Default::default()
        }),
        images: Some(images),
        ..Default::default()
    }
}

/// Renews `kube-node-lease/<node>` every quarter of `nodeLeaseDurationSeconds`.
async fn run_lease(k: Arc<Kubelet>, client: kube::Client) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let duration = k.config().node_lease_duration_seconds;
    let interval = Duration::from_millis((duration as u64) * 250);
    let name = k.opts.node_name.clone();
    loop {
        let now = MicroTime(Timestamp::now());
        let result = match leases.get_opt(&name).await {
            Ok(Some(mut lease)) => {
                let spec = lease.spec.get_or_insert_default();
                spec.holder_identity = Some(name.clone());
                spec.lease_duration_seconds = Some(duration);
                spec.renew_time = Some(now);
                leases.replace(&name, &PostParams::default(), &lease).await.map(|_| ())
            }
            Ok(None) => {
                let owner = Api::<Node>::all(client.clone())
                    .get_opt(&name)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|n| n.metadata.uid);
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some("kube-node-lease".into()),
                        owner_references: owner.map(|uid| {
                            vec![OwnerReference {
                                api_version: "v1".into(),
                                kind: "Node".into(),
                                name: name.clone(),
                                uid,
                                ..Default::default()
                            }]
                        }),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(name.clone()),
                        lease_duration_seconds: Some(duration),
                        renew_time: Some(now),
                        ..Default::default()
                    }),
                };
                leases.create(&PostParams::default(), &lease).await.map(|_| ())
            }
            Err(err) => Err(err),
        };
        // On a failure retry sooner, as upstream's controller backs off from 200 ms.
        let wait = match result {
            Ok(()) => interval,
            Err(err) => {
                tracing::warn!(%err, "renewing the node lease");
                Duration::from_secs(1)
            }
        };
        tokio::select! {
            () = k.shutdown.wait() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}
