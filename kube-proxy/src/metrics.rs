//! kube-proxy's metrics, with upstream's names (subsystem `kubeproxy`), buckets and labels.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

use component_base::metrics::Registry;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TableLabel {
    pub table: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TrafficPolicyLabel {
    pub traffic_policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    pub code: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// Every metric kube-proxy exports; cheap to clone (the metrics are shared handles).
#[derive(Clone)]
pub struct Metrics {
    pub sync_proxy_rules_latency: Histogram,
    pub sync_full_proxy_rules_latency: Histogram,
    pub sync_partial_proxy_rules_latency: Histogram,
    pub network_programming_latency: Histogram,
    pub sync_proxy_rules_last_timestamp: FloatGauge,
    pub sync_proxy_rules_last_queued_timestamp: FloatGauge,
    pub endpoint_changes_pending: Gauge,
    pub endpoint_changes_total: Counter,
    pub service_changes_pending: Gauge,
    pub service_changes_total: Counter,
    pub iptables_restore_failures_total: Counter,
    pub iptables_partial_restore_failures_total: Counter,
    pub iptables_rules_total: Family<TableLabel, Gauge>,
    pub iptables_rules_last: Family<TableLabel, Gauge>,
    pub nftables_sync_failures_total: Counter,
    pub nftables_cleanup_failures_total: Counter,
    pub no_local_endpoints_total: Family<TrafficPolicyLabel, Gauge>,
    pub proxy_healthz_total: Family<CodeLabel, Counter>,
    pub proxy_livez_total: Family<CodeLabel, Counter>,
    pub conntrack_reconciler_sync_duration: Histogram,
    pub conntrack_reconciler_deleted_entries_total: Counter,
}

fn sync_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// Upstream's network-programming buckets: quarter seconds, then seconds up to a minute,
/// then coarser up to five minutes.
fn network_programming_buckets() -> Histogram {
    let mut b = vec![0.25, 0.5];
    b.extend((1..=59).map(f64::from));
    b.extend((0..12).map(|i| 60.0 + 5.0 * f64::from(i)));
    b.extend((0..7).map(|i| 120.0 + 30.0 * f64::from(i)));
    Histogram::new(b)
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        Metrics {
            sync_proxy_rules_latency: sync_buckets(),
            sync_full_proxy_rules_latency: sync_buckets(),
            sync_partial_proxy_rules_latency: sync_buckets(),
            network_programming_latency: network_programming_buckets(),
            sync_proxy_rules_last_timestamp: FloatGauge::default(),
            sync_proxy_rules_last_queued_timestamp: FloatGauge::default(),
            endpoint_changes_pending: Gauge::default(),
            endpoint_changes_total: Counter::default(),
            service_changes_pending: Gauge::default(),
            service_changes_total: Counter::default(),
            iptables_restore_failures_total: Counter::default(),
            iptables_partial_restore_failures_total: Counter::default(),
            iptables_rules_total: Family::default(),
            iptables_rules_last: Family::default(),
            nftables_sync_failures_total: Counter::default(),
            nftables_cleanup_failures_total: Counter::default(),
            no_local_endpoints_total: Family::default(),
            proxy_healthz_total: Family::default(),
            proxy_livez_total: Family::default(),
            conntrack_reconciler_sync_duration: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            conntrack_reconciler_deleted_entries_total: Counter::default(),
        }
    }

    /// Registers every metric under its upstream name.
    pub fn register(&self, registry: &Registry) {
        let r = registry;
        r.register(
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds",
            self.sync_proxy_rules_latency.clone(),
        );
        r.register(
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for full resyncs",
            self.sync_full_proxy_rules_latency.clone(),
        );
        r.register(
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for partial resyncs",
            self.sync_partial_proxy_rules_latency.clone(),
        );
        r.register(
            "kubeproxy_network_programming_duration_seconds",
            "In Cluster Network Programming Latency in seconds",
            self.network_programming_latency.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "The last time proxy rules were successfully synced",
            self.sync_proxy_rules_last_timestamp.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
            "The last time a sync of proxy rules was queued",
            self.sync_proxy_rules_last_queued_timestamp.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
            "Pending proxy rules Endpoint changes",
            self.endpoint_changes_pending.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes",
            "Cumulative proxy rules Endpoint changes",
            self.endpoint_changes_total.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_service_changes_pending",
            "Pending proxy rules Service changes",
            self.service_changes_pending.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_service_changes",
            "Cumulative proxy rules Service changes",
            self.service_changes_total.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_iptables_restore_failures",
            "Cumulative proxy iptables restore failures",
            self.iptables_restore_failures_total.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures",
            "Cumulative proxy iptables partial restore failures",
            self.iptables_partial_restore_failures_total.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_iptables_total",
            "Total number of iptables rules owned by kube-proxy",
            self.iptables_rules_total.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_iptables_last",
            "Number of iptables rules written by kube-proxy in last sync",
            self.iptables_rules_last.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_nftables_sync_failures",
            "Cumulative proxy nftables sync failures",
            self.nftables_sync_failures_total.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_nftables_cleanup_failures",
            "Cumulative proxy nftables cleanup failures",
            self.nftables_cleanup_failures_total.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "Number of services with a Local traffic policy and no endpoints",
            self.no_local_endpoints_total.clone(),
        );
        r.register(
            "kubeproxy_proxy_healthz",
            "Cumulative proxy healthz HTTP status",
            self.proxy_healthz_total.clone(),
        );
        r.register(
            "kubeproxy_proxy_livez",
            "Cumulative proxy livez HTTP status",
            self.proxy_livez_total.clone(),
        );
        r.register(
            "kubeproxy_conntrack_reconciler_sync_duration_seconds",
            "ReconcileConntrackFlowsLatency latency in seconds",
            self.conntrack_reconciler_sync_duration.clone(),
        );
        r.register(
            "kubeproxy_conntrack_reconciler_deleted_entries",
            "Cumulative conntrack flows deleted by conntrack reconciler",
            self.conntrack_reconciler_deleted_entries_total.clone(),
        );
    }
}

/// Seconds since the Unix epoch, for timestamp gauges.
pub fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or(Duration::ZERO).as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_names_in_the_text() {
        let registry = Registry::new();
        let m = Metrics::new();
        m.register(&registry);
        m.endpoint_changes_total.inc();
        m.network_programming_latency.observe(0.3);
        m.no_local_endpoints_total
            .get_or_create(&TrafficPolicyLabel { traffic_policy: "internal".into() })
            .set(1);
        let text = registry.encode_text().unwrap();
        for needle in [
            "kubeproxy_sync_proxy_rules_endpoint_changes_total 1",
            "kubeproxy_network_programming_duration_seconds_bucket{le=\"0.5\"} 1",
            "# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge",
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total{traffic_policy=\"internal\"} 1",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }
}
