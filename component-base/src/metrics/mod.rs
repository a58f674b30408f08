//! The metrics registry every component exposes on `/metrics`, in the Prometheus
//! text format (0.0.4) that Prometheus, `promtool` and `etcdctl check datascale`
//! read, plus the `process_*` metrics Go's client registers by default.

mod process;

use std::sync::Arc;

use parking_lot::{RwLock, RwLockWriteGuard};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::registry::{Metric, Registry as PromRegistry};

pub use process::ProcessCollector;
/// Re-exported so callers build metrics with the exact version this crate encodes.
pub use prometheus_client;

/// The `Content-Type` of [`encode_text`]'s output, as Go's `expfmt.FmtText`.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Why metrics could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A metric or collector failed while writing itself out.
    #[error("encoding metrics in the Prometheus text format failed")]
    Encode(#[from] std::fmt::Error),
}

/// A shared handle on one prometheus-client registry.
///
/// prometheus-client needs `&mut` to register but only `&` to encode; the lock
/// lets subsystems register their metrics whenever they start while the HTTP
/// server keeps encoding from the same registry. Clones share the registry.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    inner: Arc<RwLock<PromRegistry>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry holding the [`ProcessCollector`], as Go's default registry does,
    /// so `/metrics` carries `process_resident_memory_bytes` and friends.
    pub fn with_process_metrics() -> Self {
        let registry = Self::new();
        registry.register_collector(Box::new(ProcessCollector::default()));
        registry
    }

    /// Exclusive access to the underlying registry, for sub-registries (prefixes,
    /// constant labels) and anything else this wrapper does not forward.
    ///
    /// The guard is not `Send`: do not hold it across an `.await`.
    pub fn registry_mut(&self) -> RwLockWriteGuard<'_, PromRegistry> {
        self.inner.write()
    }

    /// Registers `metric` under `name`. Counters are exposed as `name_total`,
    /// so `name` must not end in `_total` itself.
    pub fn register(&self, name: impl Into<String>, help: impl Into<String>, metric: impl Metric) {
        self.inner.write().register(name, help, metric);
    }

    /// Registers a collector, which is asked for its metrics on every scrape.
    pub fn register_collector(&self, collector: Box<dyn Collector>) {
        self.inner.write().register_collector(collector);
    }

    /// The registry in the Prometheus text format; see [`encode_text`].
    pub fn encode_text(&self) -> Result<String, Error> {
        let mut out = String::new();
        prometheus_text::encode(&mut out, &self.inner.read())?;
        Ok(out)
    }
}

/// Encodes every metric of `registry` in the Prometheus text format 0.0.4: no
/// `# EOF` or `# UNIT` lines, counters suffixed `_total`; serve it with
/// [`CONTENT_TYPE`].
pub fn encode_text(registry: &Registry) -> Result<String, Error> {
    registry.encode_text()
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::process::{Command, Stdio};

    use prometheus_client::encoding::EncodeLabelSet;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
    use prometheus_client::registry::Unit;

    use super::*;

    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct MethodLabels {
        method: String,
    }

    /// A registry with one metric of each kind a component is likely to use.
    fn sample_registry() -> Registry {
        let registry = Registry::with_process_metrics();
        let requests = Family::<MethodLabels, Counter>::default();
        requests.get_or_create(&MethodLabels { method: "Range".into() }).inc_by(3);
        registry.register("etcd_requests", "Requests served.", requests);
        let leader = Gauge::<i64>::default();
        leader.set(1);
        registry.register("etcd_server_has_leader", "Whether a leader exists.", leader);
        let fsync = Histogram::new(exponential_buckets(0.001, 2.0, 4));
        fsync.observe(0.003);
        registry.registry_mut().register_with_unit(
            "etcd_disk_wal_fsync_duration",
            "The latency distributions of fsync called by WAL.",
            Unit::Seconds,
            fsync,
        );
        registry
    }

    #[test]
    fn text_has_process_metrics_and_prometheus_names() {
        let text = encode_text(&sample_registry()).unwrap();
        for line in [
            "# TYPE process_resident_memory_bytes gauge",
            "# TYPE process_cpu_seconds_total counter",
            "# TYPE process_start_time_seconds gauge",
            "# TYPE process_open_fds gauge",
            "# TYPE process_max_fds gauge",
            "# TYPE process_virtual_memory_bytes gauge",
            "etcd_requests_total{method=\"Range\"} 3",
            "etcd_server_has_leader 1",
            "etcd_disk_wal_fsync_duration_seconds_bucket{le=\"0.004\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains("# EOF"), "{text}");
        assert!(!text.contains("# UNIT"), "{text}");
        let rss = text
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .expect("an rss sample");
        assert!(rss.parse::<f64>().unwrap() > 0.0, "{rss}");
    }

    #[test]
    fn promtool_accepts_the_text() {
        let text = encode_text(&sample_registry()).unwrap();
        let child = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match child {
            Ok(child) => child,
            Err(err) => {
                eprintln!("skipping: promtool not runnable ({err})");
                return;
            }
        };
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "promtool rejected the text: {}{}\n{text}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn clones_share_one_registry() {
        let registry = Registry::new();
        let clone = registry.clone();
        clone.register("late_gauge", "Registered after the server started.", Gauge::<i64>::default());
        assert!(registry.encode_text().unwrap().contains("late_gauge 0"));
    }
}
