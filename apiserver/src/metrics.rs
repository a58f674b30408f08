//! The API server's Prometheus metrics, under upstream's names and labels.

use std::sync::Arc;
use std::time::Duration;

use component_base::metrics::Registry;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

type Labels = Vec<(String, String)>;
type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

pub struct Metrics {
    pub registry: Registry,
    requests: Family<Labels, Counter>,
    durations: HistogramFamily,
    etcd_durations: HistogramFamily,
    inflight: Family<Labels, Gauge>,
}

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::with_process_metrics();
        let m = Self {
            registry,
            requests: Family::default(),
            durations: Family::new_with_constructor(latency_histogram),
            etcd_durations: Family::new_with_constructor(latency_histogram),
            inflight: Family::default(),
        };
        let r = &m.registry;
        r.register("apiserver_request", "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code", m.requests.clone());
        r.register("apiserver_request_duration_seconds", "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component", m.durations.clone());
        r.register(
            "etcd_request_duration_seconds",
            "Etcd request latency in seconds for each operation and object type",
            m.etcd_durations.clone(),
        );
        r.register("apiserver_current_inflight_requests", "Maximal number of currently used inflight request limit of this apiserver per request kind in last second", m.inflight.clone());
        m
    }

    pub fn observe(
        &self,
        verb: &str,
        group: &str,
        resource: &str,
        subresource: &str,
        code: u16,
        took: Duration,
    ) {
        let base = vec![
            ("verb".to_string(), verb.to_string()),
            ("group".to_string(), group.to_string()),
            ("resource".to_string(), resource.to_string()),
            ("subresource".to_string(), subresource.to_string()),
            ("component".to_string(), "apiserver".to_string()),
        ];
        let mut with_code = base.clone();
        with_code.push(("code".to_string(), code.to_string()));
        self.requests.get_or_create(&with_code).inc();
        if verb != "WATCH" {
            self.durations.get_or_create(&base).observe(took.as_secs_f64());
        }
    }

    pub fn observe_etcd(&self, operation: &str, took: Duration) {
        self.etcd_durations
            .get_or_create(&vec![("operation".to_string(), operation.to_string())])
            .observe(took.as_secs_f64());
    }

    /// Counts a request in flight (by kind: readOnly / mutating) until the guard drops.
    pub fn inflight(&self, verb: &str) -> InflightGuard {
        let kind = if matches!(verb, "get" | "list" | "watch") { "readOnly" } else { "mutating" };
        let gauge =
            self.inflight.get_or_create(&vec![("request_kind".to_string(), kind.to_string())]).clone();
        gauge.inc();
        InflightGuard(gauge)
    }

    /// Adds the per-resource object counts, read at scrape time.
    pub fn register_storage(&self, registry: Arc<crate::registry::Registry>) {
        self.registry.register_collector(Box::new(StorageObjects(registry)));
    }

    pub fn encode(&self) -> String {
        self.registry.encode_text().unwrap_or_default()
    }
}

/// Decrements the in-flight gauge when the request ends.
pub struct InflightGuard(Gauge);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

struct StorageObjects(Arc<crate::registry::Registry>);

impl std::fmt::Debug for StorageObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StorageObjects")
    }
}

impl Collector for StorageObjects {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let mut metric = encoder.encode_descriptor(
            "apiserver_storage_objects",
            "Number of stored objects at the time of last check split by kind",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for s in &self.0.stores {
            let resource = if s.res.info.group.is_empty() {
                s.res.info.plural.to_string()
            } else {
                format!("{}.{}", s.res.info.plural, s.res.info.group)
            };
            let labels = vec![("resource".to_string(), resource)];
            ConstGauge::new(s.cacher.len() as i64).encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
