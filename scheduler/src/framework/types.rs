//! The scheduler's view of pods and nodes: each API object is parsed once, when it enters
//! the cache or queue, into the sums and matchers the plugins test against thousands of
//! nodes per second (upstream's `PodInfo`, `NodeInfo` and `framework.Resource`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Node, Pod, PodAffinityTerm, Taint, Toleration};

use super::labels::{Labels, NodeSelectorMatcher, Selector};
use super::quantity::{parse_milli, parse_value};

/// CPU the scheduler assumes for a container that requests none, when scoring only
/// (upstream's `DefaultMilliCPURequest`), so empty pods still spread.
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Memory assumed likewise (`DefaultMemoryRequest`, 200 MiB).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// Amounts of each resource: cpu in millicores, the rest in units.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resource {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub allowed_pods: i64,
    /// Extended resources (`example.com/gpu`), hugepages and anything else by name.
    pub scalar: BTreeMap<String, i64>,
}

impl Resource {
    /// Reads a resource list (`requests`, `allocatable`, `overhead`).
    pub fn from_list(
        list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    ) -> Self {
        let mut r = Resource::default();
        for (name, q) in list.into_iter().flatten() {
            r.set(name, &q.0);
        }
        r
    }

    fn set(&mut self, name: &str, quantity: &str) {
        match name {
            "cpu" => self.milli_cpu = parse_milli(quantity).unwrap_or(0),
            "memory" => self.memory = parse_value(quantity).unwrap_or(0),
            "ephemeral-storage" => self.ephemeral_storage = parse_value(quantity).unwrap_or(0),
            "pods" => self.allowed_pods = parse_value(quantity).unwrap_or(0),
            other => {
                self.scalar.insert(other.to_owned(), parse_value(quantity).unwrap_or(0));
            }
        }
    }

    /// The amount of `name`, as used in messages and scoring strategies.
    pub fn get(&self, name: &str) -> i64 {
        match name {
            "cpu" => self.milli_cpu,
            "memory" => self.memory,
            "ephemeral-storage" => self.ephemeral_storage,
            "pods" => self.allowed_pods,
            other => self.scalar.get(other).copied().unwrap_or(0),
        }
    }

    pub fn add(&mut self, other: &Resource) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        self.ephemeral_storage += other.ephemeral_storage;
        self.allowed_pods += other.allowed_pods;
        for (k, v) in &other.scalar {
            *self.scalar.entry(k.clone()).or_default() += v;
        }
    }

    pub fn sub(&mut self, other: &Resource) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
        self.ephemeral_storage -= other.ephemeral_storage;
        self.allowed_pods -= other.allowed_pods;
        for (k, v) in &other.scalar {
            *self.scalar.entry(k.clone()).or_default() -= v;
        }
    }

    /// Each resource the larger of the two.
    pub fn max_with(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_default();
            *e = (*e).max(*v);
        }
    }

    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.scalar.values().all(|v| *v == 0)
    }
}

/// A host port a pod asks for: (hostIP, protocol, port); hostIP `0.0.0.0` means all.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub ip: String,
    pub protocol: String,
    pub port: i32,
}

impl HostPort {
    /// Whether two pods asking for these could not share a node.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

/// One pod (anti-)affinity term, resolved: which namespaces it looks at, which pods in
/// them, and over which topology.
#[derive(Debug, Clone)]
pub struct AffinityTerm {
    pub namespaces: Vec<String>,
    /// `namespaceSelector`: namespaces whose labels match also count. `None` with an empty
    /// `namespaces` list means the pod's own namespace.
    pub namespace_selector: Option<Selector>,
    pub selector: Selector,
    pub topology_key: String,
    pub weight: i32,
}

impl AffinityTerm {
    fn new(term: &PodAffinityTerm, own_namespace: &str, weight: i32) -> Self {
        let mut namespaces = term.namespaces.clone().unwrap_or_default();
        let namespace_selector =
            term.namespace_selector.as_ref().map(|s| Selector::from_label_selector(Some(s)));
        if namespaces.is_empty() && namespace_selector.is_none() {
            namespaces.push(own_namespace.to_owned());
        }
        // matchLabelKeys / mismatchLabelKeys are folded into the selector by the API server
        // at pod creation upstream (v1.31+), so the scheduler reads only the selector.
        let selector = Selector::from_label_selector(term.label_selector.as_ref());
        Self { namespaces, namespace_selector, selector, topology_key: term.topology_key.clone(), weight }
    }

    /// Whether `pod` (in a namespace with `ns_labels`) is one this term selects.
    pub fn matches(&self, pod: &PodInfo, ns_labels: &HashMap<String, Labels>) -> bool {
        let in_namespace = self.namespaces.contains(&pod.namespace)
            || self
                .namespace_selector
                .as_ref()
                .is_some_and(|s| s.matches(ns_labels.get(&pod.namespace).unwrap_or(&Labels::new())));
        in_namespace && self.selector.matches(&pod.labels)
    }
}

/// A pod as the scheduler sees it, parsed once.
#[derive(Debug)]
pub struct PodInfo {
    pub pod: Arc<Pod>,
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// `namespace/name`, the queue's key.
    pub key: String,
    pub labels: Labels,
    pub priority: i32,
    pub scheduler_name: String,
    pub node_name: String,
    pub nominated_node_name: String,
    pub terminating: bool,
    /// What the pod occupies on a node: containers, the largest init step, overhead.
    pub requests: Resource,
    /// cpu and memory with the scoring defaults for containers that request none.
    pub non_zero_cpu: i64,
    pub non_zero_memory: i64,
    pub host_ports: Vec<HostPort>,
    pub tolerations: Vec<Toleration>,
    pub node_selector: Labels,
    pub required_node_affinity: Option<NodeSelectorMatcher>,
    pub preferred_node_affinity: Vec<(i32, NodeSelectorMatcher)>,
    pub required_affinity: Vec<AffinityTerm>,
    pub required_anti_affinity: Vec<AffinityTerm>,
    pub preferred_affinity: Vec<AffinityTerm>,
    pub preferred_anti_affinity: Vec<AffinityTerm>,
    pub scheduling_gates: Vec<String>,
    pub images: Vec<String>,
    /// `status.startTime` (or creation) in seconds, for preemption's tie-break.
    pub start_time: i64,
}

fn container_requests(c: &Container) -> Resource {
    Resource::from_list(c.resources.as_ref().and_then(|r| r.requests.as_ref()))
}

fn non_zero(c: &Container) -> (i64, i64) {
    let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
    let get = |name: &str| requests.and_then(|r| r.get(name)).map(|q| q.0.as_str());
    let cpu = get("cpu").and_then(parse_milli).unwrap_or(DEFAULT_MILLI_CPU_REQUEST);
    let memory = get("memory").and_then(parse_value).unwrap_or(DEFAULT_MEMORY_REQUEST);
    (cpu, memory)
}

/// Upstream's `PodRequests`: the sum of the containers plus restartable (sidecar) init
/// containers, or the largest single init step if larger, plus the pod's overhead.
/// Returns (requests, non-zero cpu, non-zero memory).
pub fn pod_requests(pod: &Pod) -> (Resource, i64, i64) {
    let Some(spec) = pod.spec.as_ref() else { return (Resource::default(), 0, 0) };
    let mut sum = Resource::default();
    let (mut nz_cpu, mut nz_mem) = (0, 0);
    for c in &spec.containers {
        sum.add(&container_requests(c));
        let (cpu, mem) = non_zero(c);
        nz_cpu += cpu;
        nz_mem += mem;
    }
    let mut sidecars = Resource::default();
    let mut init_peak = Resource::default();
    let (mut nz_init_cpu, mut nz_init_mem) = (0, 0);
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&r);
            let (cpu, mem) = non_zero(c);
            nz_cpu += cpu;
            nz_mem += mem;
            let mut step = sidecars.clone();
            step.allowed_pods = 0;
            init_peak.max_with(&step);
        } else {
            let mut step = sidecars.clone();
            step.add(&r);
            init_peak.max_with(&step);
            let (cpu, mem) = non_zero(c);
            nz_init_cpu = nz_init_cpu.max(cpu);
            nz_init_mem = nz_init_mem.max(mem);
        }
    }
    sum.add(&sidecars);
    sum.max_with(&init_peak);
    let overhead = Resource::from_list(spec.overhead.as_ref());
    sum.add(&overhead);
    let nz_cpu = nz_cpu.max(nz_init_cpu) + overhead.milli_cpu;
    let nz_mem = nz_mem.max(nz_init_mem) + overhead.memory;
    (sum, nz_cpu, nz_mem)
}

impl PodInfo {
    pub fn new(pod: Arc<Pod>) -> Self {
        let meta = &pod.metadata;
        let namespace = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let (requests, non_zero_cpu, non_zero_memory) = pod_requests(&pod);
        let mut host_ports = Vec::new();
        for c in &spec.containers {
            for p in c.ports.iter().flatten() {
                if let Some(port) = p.host_port.filter(|p| *p > 0) {
                    host_ports.push(HostPort {
                        ip: p.host_ip.clone().filter(|i| !i.is_empty()).unwrap_or_else(|| "0.0.0.0".into()),
                        protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                        port,
                    });
                }
            }
        }
        let affinity = spec.affinity.clone().unwrap_or_default();
        let node_affinity = affinity.node_affinity.unwrap_or_default();
        let required_node_affinity = node_affinity
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .map(|r| NodeSelectorMatcher::new(&r.node_selector_terms));
        let preferred_node_affinity = node_affinity
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .filter(|p| p.weight != 0)
            .map(|p| (p.weight, NodeSelectorMatcher::new(std::slice::from_ref(&p.preference))))
            .collect();
        let pod_affinity = affinity.pod_affinity.unwrap_or_default();
        let pod_anti_affinity = affinity.pod_anti_affinity.unwrap_or_default();
        let required = |terms: &Option<Vec<PodAffinityTerm>>| -> Vec<AffinityTerm> {
            terms.iter().flatten().map(|t| AffinityTerm::new(t, &namespace, 1)).collect()
        };
        let preferred =
            |terms: &Option<Vec<k8s_openapi::api::core::v1::WeightedPodAffinityTerm>>| -> Vec<AffinityTerm> {
                terms
                    .iter()
                    .flatten()
                    .map(|t| AffinityTerm::new(&t.pod_affinity_term, &namespace, t.weight))
                    .collect()
            };
        let status = pod.status.clone().unwrap_or_default();
        let start_time = status
            .start_time
            .as_ref()
            .or(meta.creation_timestamp.as_ref())
            .map(|t| t.0.as_second())
            .unwrap_or(0);
        Self {
            uid: meta.uid.clone().unwrap_or_default(),
            key: format!("{namespace}/{name}"),
            labels: meta.labels.clone().unwrap_or_default(),
            priority: spec.priority.unwrap_or(0),
            scheduler_name: spec.scheduler_name.clone().unwrap_or_else(|| "default-scheduler".into()),
            node_name: spec.node_name.clone().unwrap_or_default(),
            nominated_node_name: status.nominated_node_name.clone().unwrap_or_default(),
            terminating: meta.deletion_timestamp.is_some(),
            requests,
            non_zero_cpu,
            non_zero_memory,
            host_ports,
            tolerations: spec.tolerations.clone().unwrap_or_default(),
            node_selector: spec.node_selector.clone().unwrap_or_default(),
            required_node_affinity,
            preferred_node_affinity,
            required_affinity: required(&pod_affinity.required_during_scheduling_ignored_during_execution),
            required_anti_affinity: required(
                &pod_anti_affinity.required_during_scheduling_ignored_during_execution,
            ),
            preferred_affinity: preferred(&pod_affinity.preferred_during_scheduling_ignored_during_execution),
            preferred_anti_affinity: preferred(
                &pod_anti_affinity.preferred_during_scheduling_ignored_during_execution,
            ),
            scheduling_gates: spec.scheduling_gates.iter().flatten().map(|g| g.name.clone()).collect(),
            images: spec
                .init_containers
                .iter()
                .flatten()
                .chain(&spec.containers)
                .filter_map(|c| c.image.clone())
                .collect(),
            start_time,
            namespace,
            name,
            pod,
        }
    }

    /// Whether the pod has any inter-pod affinity or anti-affinity term.
    pub fn has_affinity(&self) -> bool {
        !self.required_affinity.is_empty()
            || !self.required_anti_affinity.is_empty()
            || !self.preferred_affinity.is_empty()
            || !self.preferred_anti_affinity.is_empty()
    }

    /// The same pod, placed on `node` (what the cache holds while a binding is in flight).
    pub fn assumed_on(&self, node: &str) -> PodInfo {
        let mut pod = (*self.pod).clone();
        if let Some(spec) = pod.spec.as_mut() {
            spec.node_name = Some(node.to_owned());
        }
        PodInfo::new(Arc::new(pod))
    }
}

/// A node with the pods placed on it and what they use.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub name: String,
    /// `None` while pods name a node the informer has not delivered yet (or just deleted).
    pub node: Option<Arc<Node>>,
    pub labels: Labels,
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
    pub allocatable: Resource,
    pub requested: Resource,
    pub non_zero_cpu: i64,
    pub non_zero_memory: i64,
    pub pods: Vec<Arc<PodInfo>>,
    pub used_ports: Vec<HostPort>,
    /// Image name (as listed in `status.images`) → size in bytes.
    pub images: HashMap<String, i64>,
    pub pods_with_affinity: usize,
    pub pods_with_required_anti_affinity: usize,
}

impl NodeInfo {
    pub fn empty(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            node: None,
            labels: Labels::new(),
            taints: Vec::new(),
            unschedulable: false,
            allocatable: Resource::default(),
            requested: Resource::default(),
            non_zero_cpu: 0,
            non_zero_memory: 0,
            pods: Vec::new(),
            used_ports: Vec::new(),
            images: HashMap::new(),
            pods_with_affinity: 0,
            pods_with_required_anti_affinity: 0,
        }
    }

    pub fn set_node(&mut self, node: Arc<Node>) {
        self.labels = node.metadata.labels.clone().unwrap_or_default();
        let spec = node.spec.clone().unwrap_or_default();
        self.taints = spec.taints.unwrap_or_default();
        self.unschedulable = spec.unschedulable.unwrap_or(false);
        let status = node.status.clone().unwrap_or_default();
        self.allocatable = Resource::from_list(status.allocatable.as_ref().or(status.capacity.as_ref()));
        self.images.clear();
        for image in status.images.iter().flatten() {
            for name in image.names.iter().flatten() {
                self.images.insert(name.clone(), image.size_bytes.unwrap_or(0));
            }
        }
        self.node = Some(node);
    }

    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests);
        self.non_zero_cpu += pod.non_zero_cpu;
        self.non_zero_memory += pod.non_zero_memory;
        self.used_ports.extend(pod.host_ports.iter().cloned());
        if pod.has_affinity() {
            self.pods_with_affinity += 1;
        }
        if !pod.required_anti_affinity.is_empty() {
            self.pods_with_required_anti_affinity += 1;
        }
        self.pods.push(pod);
    }

    /// Removes the pod with `uid`; returns it if it was here.
    pub fn remove_pod(&mut self, uid: &str) -> Option<Arc<PodInfo>> {
        let i = self.pods.iter().position(|p| p.uid == uid)?;
        let pod = self.pods.swap_remove(i);
        self.requested.sub(&pod.requests);
        self.non_zero_cpu -= pod.non_zero_cpu;
        self.non_zero_memory -= pod.non_zero_memory;
        for port in &pod.host_ports {
            if let Some(j) = self.used_ports.iter().position(|p| p == port) {
                self.used_ports.swap_remove(j);
            }
        }
        if pod.has_affinity() {
            self.pods_with_affinity -= 1;
        }
        if !pod.required_anti_affinity.is_empty() {
            self.pods_with_required_anti_affinity -= 1;
        }
        Some(pod)
    }
}
