//! The kubelet's metrics (upstream's names): running pods and containers, pod start
//! latency, PLEG relist latency, and probe results for `/metrics/probes`.

use component_base::metrics::Registry;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ContainerStateLabel {
    pub container_state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    pub probe_type: String,
    pub result: String,
    pub container: String,
    pub pod: String,
    pub namespace: String,
    pub pod_uid: String,
}

pub struct Metrics {
    pub registry: Registry,
    pub probes: Registry,
    pub running_pods: Gauge,
    pub running_containers: Family<ContainerStateLabel, Gauge>,
    pub pod_start_duration: Histogram,
    pub pleg_relist_duration: Histogram,
    pub prober_probe_total: Family<ProbeLabels, prometheus_client::metrics::counter::Counter>,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::with_process_metrics();
        let running_pods = Gauge::default();
        registry.register(
            "kubelet_running_pods",
            "Number of pods that have a running pod sandbox",
            running_pods.clone(),
        );
        let running_containers = Family::<ContainerStateLabel, Gauge>::default();
        registry.register(
            "kubelet_running_containers",
            "Number of containers currently running",
            running_containers.clone(),
        );
        let pod_start_duration = Histogram::new(exponential_buckets(0.5, 2.0, 12));
        registry.register(
            "kubelet_pod_start_duration_seconds",
            "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
            pod_start_duration.clone(),
        );
        let pleg_relist_duration = Histogram::new(exponential_buckets(0.005, 2.0, 12));
        registry.register(
            "kubelet_pleg_relist_duration_seconds",
            "Duration in seconds for relisting pods in PLEG",
            pleg_relist_duration.clone(),
        );
        let probes = Registry::new();
        let prober_probe_total = Family::default();
        probes.register(
            "prober_probe",
            "Cumulative number of a liveness, readiness or startup probe for a container by result",
            prober_probe_total.clone(),
        );
        Self {
            registry,
            probes,
            running_pods,
            running_containers,
            pod_start_duration,
            pleg_relist_duration,
            prober_probe_total,
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
