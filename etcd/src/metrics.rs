//! etcd's Prometheus metrics, under etcd's names so existing dashboards and alerts work.
//! Some of etcd's "`_total`" metrics are gauges there; they are gauges here too. Sizes and
//! counts that live in the store are read at scrape time by [`StoreCollector`].

use std::fmt;
use std::sync::Arc;

use component_base::metrics::Registry;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use crate::backend::Backend;
use crate::mvcc::{KvStore, WatchableStore};

/// A histogram per peer (label `To`), as etcd's network metrics are.
type PerPeerHistogram = Family<Vec<(String, String)>, Histogram, fn() -> Histogram>;

pub struct Metrics {
    pub registry: Registry,
    pub has_leader: Gauge,
    pub is_leader: Gauge,
    pub leader_changes: Counter,
    pub proposals_committed: Gauge,
    pub proposals_applied: Gauge,
    pub proposals_pending: Gauge,
    pub proposals_failed: Counter,
    pub wal_fsync: Histogram,
    pub backend_commit: Histogram,
    peer_rtt: PerPeerHistogram,
    pub peer_sent_failures: Counter,
}

impl Metrics {
    pub fn new(version: &str, quota_bytes: u64) -> Self {
        let registry = Registry::with_process_metrics();
        let disk_buckets = || Histogram::new(exponential_buckets(0.001, 2.0, 14));
        let m = Self {
            registry,
            has_leader: Gauge::default(),
            is_leader: Gauge::default(),
            leader_changes: Counter::default(),
            proposals_committed: Gauge::default(),
            proposals_applied: Gauge::default(),
            proposals_pending: Gauge::default(),
            proposals_failed: Counter::default(),
            wal_fsync: disk_buckets(),
            backend_commit: disk_buckets(),
            peer_rtt: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0001, 2.0, 16))),
            peer_sent_failures: Counter::default(),
        };
        let r = &m.registry;
        r.register(
            "etcd_server_has_leader",
            "Whether or not a leader exists. 1 is existence, 0 is not",
            m.has_leader.clone(),
        );
        r.register(
            "etcd_server_is_leader",
            "Whether or not this member is a leader. 1 if is, 0 otherwise",
            m.is_leader.clone(),
        );
        // Counters get their `_total` suffix from the encoder.
        r.register(
            "etcd_server_leader_changes_seen",
            "The number of leader changes seen",
            m.leader_changes.clone(),
        );
        r.register(
            "etcd_server_proposals_committed_total",
            "The total number of consensus proposals committed",
            m.proposals_committed.clone(),
        );
        r.register(
            "etcd_server_proposals_applied_total",
            "The total number of consensus proposals applied",
            m.proposals_applied.clone(),
        );
        r.register(
            "etcd_server_proposals_pending",
            "The current number of pending proposals to commit",
            m.proposals_pending.clone(),
        );
        r.register(
            "etcd_server_proposals_failed",
            "The total number of failed proposals seen",
            m.proposals_failed.clone(),
        );
        r.register(
            "etcd_disk_wal_fsync_duration_seconds",
            "The latency distributions of fsync called by WAL",
            m.wal_fsync.clone(),
        );
        r.register(
            "etcd_disk_backend_commit_duration_seconds",
            "The latency distributions of commit called by backend",
            m.backend_commit.clone(),
        );
        r.register(
            "etcd_network_peer_round_trip_time_seconds",
            "Round-Trip-Time histogram between peers",
            m.peer_rtt.clone(),
        );
        r.register(
            "etcd_network_peer_sent_failures",
            "The total number of send failures to peers",
            m.peer_sent_failures.clone(),
        );
        let quota: Gauge = Gauge::default();
        quota.set(quota_bytes as i64);
        r.register("etcd_server_quota_backend_bytes", "Current backend storage quota size in bytes", quota);
        let versions: Family<Vec<(String, String)>, Gauge> = Family::default();
        versions.get_or_create(&vec![("server_version".to_string(), version.to_string())]).set(1);
        r.register(
            "etcd_server_version",
            "Which version is running. 1 for 'server_version' label with current version",
            versions,
        );
        m
    }

    /// The round-trip time histogram towards one peer (hex id).
    pub fn peer_rtt(&self, peer: &str) -> Histogram {
        self.peer_rtt.get_or_create(&vec![("To".to_string(), peer.to_string())]).clone()
    }

    /// Adds the metrics read from the store at scrape time.
    pub fn register_store(&self, backend: Arc<Backend>, store: Arc<KvStore>, watchable: Arc<WatchableStore>) {
        self.registry.register_collector(Box::new(StoreCollector { backend, store, watchable }));
    }
}

struct StoreCollector {
    backend: Arc<Backend>,
    store: Arc<KvStore>,
    watchable: Arc<WatchableStore>,
}

impl fmt::Debug for StoreCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreCollector").field("db", &self.backend.path()).finish()
    }
}

impl Collector for StoreCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let (synced, unsynced) = self.watchable.counts();
        let gauges: [(&str, &str, i64); 6] = [
            (
                "etcd_mvcc_db_total_size_in_bytes",
                "Total size of the underlying database physically allocated in bytes",
                self.backend.size() as i64,
            ),
            (
                "etcd_mvcc_db_total_size_in_use_in_bytes",
                "Total size of the underlying database logically in use in bytes",
                self.backend.size_in_use() as i64,
            ),
            ("etcd_debugging_mvcc_keys_total", "Total number of keys", self.store.index_len() as i64),
            (
                "etcd_debugging_mvcc_current_revision",
                "The current revision of store",
                self.store.current_rev(),
            ),
            ("etcd_debugging_mvcc_watcher_total", "Total number of watchers", (synced + unsynced) as i64),
            (
                "etcd_debugging_mvcc_slow_watcher_total",
                "Total number of unsynced slow watchers",
                unsynced as i64,
            ),
        ];
        for (name, help, v) in gauges {
            let g = ConstGauge::new(v);
            let m = encoder.encode_descriptor(name, help, None, g.metric_type())?;
            g.encode(m)?;
        }
        Ok(())
    }
}
