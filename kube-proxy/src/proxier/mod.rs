//! The proxiers: what turns Services and endpoints into kernel rules. [`Proxier`] holds
//! what both modes share (change tracking, the bounded-frequency sync loop, metrics,
//! health, health-check node ports, conntrack cleanup) around a [`Backend`] that writes
//! one IP family's rules: [`nftables::NftablesBackend`] or [`iptables::IptablesBackend`].
//! [`MetaProxier`] feeds every family's proxier the same events (dual-stack).

pub mod iptables;
pub mod nftables;
#[cfg(test)]
mod testutil;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use crate::bounded_frequency_runner::BoundedFrequencyRunner;
use crate::conntrack::{Conntrack, clean_stale_entries};
use crate::endpoint::Endpoint;
use crate::endpointschangetracker::{
    EndpointsChangeTracker, EndpointsMap, local_ready_endpoints, update_endpoints_map,
};
use crate::healthcheck::{ProxierHealth, ServiceHealthServer};
use crate::metrics::{Metrics, TrafficPolicyLabel, unix_seconds};
use crate::nftables::Family;
use crate::servicechangetracker::{ServiceChangeTracker, update_service_map};
use crate::serviceport::{NamespacedName, ServicePort, ServicePortMap, health_check_node_ports};
use crate::topology::NodeLabels;

/// How often a full sync happens even when nothing forces one.
pub const FULL_SYNC_PERIOD: Duration = Duration::from_secs(3600);

/// What the event handlers drive (upstream's `proxy.Provider`).
pub trait Provider: Send + Sync {
    /// A Service was added (`old` None), updated, or deleted (`new` None).
    fn on_service(&self, old: Option<&Service>, new: Option<&Service>);
    /// Every Service of the initial list has been delivered.
    fn on_services_synced(&self);
    /// An EndpointSlice was added, updated, or (`removed`) deleted.
    fn on_endpoint_slice(&self, slice: &EndpointSlice, removed: bool);
    fn on_endpoint_slices_synced(&self);
    /// This node's Node object, or None once it is deleted.
    fn on_node(&self, node: Option<&Node>);
    /// Starts the sync loop.
    fn start(self: Arc<Self>) -> std::io::Result<()>;
    /// Stops the sync loop.
    fn stop(&self);
}

/// What a sync of one family's rules needs to know.
pub struct SyncContext<'a, S, E> {
    pub services: &'a ServicePortMap<S>,
    pub endpoints: &'a EndpointsMap<E>,
    pub node_labels: &'a NodeLabels,
    /// Rewrite everything, rather than only what changed.
    pub full: bool,
    /// Services whose ports or endpoints changed since the last sync.
    pub updated: &'a HashSet<NamespacedName>,
}

/// What a successful sync reports.
#[derive(Debug, Default)]
pub struct SyncStats {
    /// Services with `internalTrafficPolicy: Local` and no local endpoints.
    pub no_local_internal: usize,
    /// Services with `externalTrafficPolicy: Local` and no local endpoints.
    pub no_local_external: usize,
}

/// One mode's writer of one family's rules.
pub trait Backend: Send + 'static {
    type Svc: ServicePort;
    type Ep: Endpoint;
    fn sync(&mut self, ctx: &SyncContext<'_, Self::Svc, Self::Ep>) -> Result<SyncStats, String>;
    /// Housekeeping left for a later sync (stale chains to delete), and when.
    fn resync_after(&self) -> Option<Duration> {
        None
    }
}

struct Changes<S, E> {
    services: ServiceChangeTracker<S>,
    endpoints: EndpointsChangeTracker<E>,
    /// The Node's labels as last seen, and whether they changed since the last sync.
    node_labels: NodeLabels,
    node_labels_changed: bool,
    services_synced: bool,
    slices_synced: bool,
}

struct SyncState<B: Backend> {
    backend: B,
    services: ServicePortMap<B::Svc>,
    endpoints: EndpointsMap<B::Ep>,
    node_labels: NodeLabels,
    need_full_sync: bool,
    last_full_sync: Option<Instant>,
    service_health: Option<ServiceHealthServer>,
    conntrack: Option<Conntrack>,
}

/// Settings of the sync loop.
#[derive(Debug, Clone)]
pub struct LoopConfig {
    pub min_sync_period: Duration,
    pub sync_period: Duration,
}

/// One IP family's proxier.
pub struct Proxier<B: Backend> {
    family: Family,
    changes: Mutex<Changes<B::Svc, B::Ep>>,
    initialized: AtomicBool,
    state: Mutex<SyncState<B>>,
    runner: OnceLock<(BoundedFrequencyRunner, Mutex<Option<std::thread::JoinHandle<()>>>)>,
    health: Arc<ProxierHealth>,
    metrics: Metrics,
    loop_config: LoopConfig,
}

impl<B: Backend> Proxier<B> {
    pub fn new(
        family: Family,
        hostname: &str,
        backend: B,
        loop_config: LoopConfig,
        health: Arc<ProxierHealth>,
        metrics: Metrics,
        service_health: Option<ServiceHealthServer>,
        conntrack: Option<Conntrack>,
    ) -> Arc<Self> {
        Arc::new(Proxier {
            family,
            changes: Mutex::new(Changes {
                services: ServiceChangeTracker::new(family),
                endpoints: EndpointsChangeTracker::new(family, hostname),
                node_labels: NodeLabels::new(),
                node_labels_changed: false,
                services_synced: false,
                slices_synced: false,
            }),
            initialized: AtomicBool::new(false),
            state: Mutex::new(SyncState {
                backend,
                services: ServicePortMap::new(),
                endpoints: EndpointsMap::new(),
                node_labels: NodeLabels::new(),
                need_full_sync: true,
                last_full_sync: None,
                service_health,
                conntrack,
            }),
            runner: OnceLock::new(),
            health,
            metrics,
            loop_config,
        })
    }

    /// Asks for a sync soon (upstream's `Sync`).
    fn queue_sync(&self) {
        self.health.queued_update(self.family);
        self.metrics.sync_proxy_rules_last_queued_timestamp.set(unix_seconds(SystemTime::now()));
        if let Some((runner, _)) = self.runner.get() {
            runner.run();
        }
    }

    fn set_initialized(&self, changes: &Changes<B::Svc, B::Ep>) {
        self.initialized.store(changes.services_synced && changes.slices_synced, Ordering::SeqCst);
    }

    /// Runs one sync now, on the calling thread. The sync loop calls this; tests too.
    pub fn sync_proxy_rules(&self) {
        if !self.initialized.load(Ordering::SeqCst) {
            tracing::debug!(family = ?self.family, "not syncing rules until Services and EndpointSlices have been received");
            return;
        }
        let start = Instant::now();
        let mut state = self.state.lock();
        let (svc_result, ep_result) = {
            let mut changes = self.changes.lock();
            let s = update_service_map(&mut state.services, &mut changes.services);
            let e = update_endpoints_map(&mut state.endpoints, &mut changes.endpoints);
            if changes.node_labels_changed {
                changes.node_labels_changed = false;
                state.node_labels = changes.node_labels.clone();
                state.need_full_sync = true;
            }
            self.metrics.service_changes_pending.set(changes.services.pending() as i64);
            self.metrics.endpoint_changes_pending.set(changes.endpoints.pending() as i64);
            (s, e)
        };
        let full =
            state.need_full_sync || state.last_full_sync.is_none_or(|t| t.elapsed() > FULL_SYNC_PERIOD);
        let updated: HashSet<NamespacedName> =
            svc_result.updated_services.union(&ep_result.updated_services).cloned().collect();
        let st = &mut *state;
        let result = st.backend.sync(&SyncContext {
            services: &st.services,
            endpoints: &st.endpoints,
            node_labels: &st.node_labels,
            full,
            updated: &updated,
        });
        let elapsed = start.elapsed();
        self.metrics.sync_proxy_rules_latency.observe(elapsed.as_secs_f64());
        if full {
            self.metrics.sync_full_proxy_rules_latency.observe(elapsed.as_secs_f64());
        } else {
            self.metrics.sync_partial_proxy_rules_latency.observe(elapsed.as_secs_f64());
        }
        let stats = match result {
            Ok(stats) => stats,
            Err(err) => {
                tracing::error!(family = ?self.family, %err, retry_in = ?self.loop_config.sync_period, "sync failed");
                // The changes are consumed: only a full sync can rebuild from here.
                state.need_full_sync = true;
                if let Some((runner, _)) = self.runner.get() {
                    runner.retry_after(self.loop_config.sync_period);
                }
                return;
            }
        };
        tracing::info!(
            family = ?self.family,
            full,
            services = state.services.len(),
            updated = updated.len(),
            elapsed = ?elapsed,
            "SyncProxyRules complete"
        );
        state.need_full_sync = false;
        if full {
            state.last_full_sync = Some(Instant::now());
        }
        if let Some(after) = state.backend.resync_after()
            && let Some((runner, _)) = self.runner.get()
        {
            runner.retry_after(after);
        }
        let now = SystemTime::now();
        for (svc, times) in &ep_result.last_change_trigger_times {
            for t in times {
                let latency = now.duration_since(*t).unwrap_or_default();
                self.metrics.network_programming_latency.observe(latency.as_secs_f64());
                tracing::debug!(endpoint = %svc, elapsed = latency.as_secs_f64(), "Network programming");
            }
        }
        let label = |p: &str| TrafficPolicyLabel { traffic_policy: p.to_owned() };
        self.metrics
            .no_local_endpoints_total
            .get_or_create(&label("internal"))
            .set(stats.no_local_internal as i64);
        self.metrics
            .no_local_endpoints_total
            .get_or_create(&label("external"))
            .set(stats.no_local_external as i64);
        self.health.updated(self.family);
        self.metrics.sync_proxy_rules_last_timestamp.set(unix_seconds(now));
        let st = &mut *state;
        if let Some(hs) = &st.service_health {
            hs.sync_services(&health_check_node_ports(&st.services));
            hs.sync_endpoints(&local_ready_endpoints(&st.endpoints));
        }
        if ep_result.conntrack_cleanup_required
            && let Some(ct) = st.conntrack.as_mut()
        {
            clean_stale_entries(ct, self.family, &st.services, &st.endpoints, &self.metrics);
        }
    }

    /// Read access to the backend (tests inspect the fake kernel through it).
    pub fn with_backend<T>(&self, f: impl FnOnce(&mut B) -> T) -> T {
        f(&mut self.state.lock().backend)
    }
}

impl<B: Backend> Provider for Proxier<B> {
    fn on_service(&self, old: Option<&Service>, new: Option<&Service>) {
        self.metrics.service_changes_total.inc();
        let pending = {
            let mut c = self.changes.lock();
            let p = c.services.update(old, new);
            self.metrics.service_changes_pending.set(c.services.pending() as i64);
            p
        };
        if pending && self.initialized.load(Ordering::SeqCst) {
            self.queue_sync();
        }
    }

    fn on_services_synced(&self) {
        let mut c = self.changes.lock();
        c.services_synced = true;
        self.set_initialized(&c);
        drop(c);
        self.queue_sync();
    }

    fn on_endpoint_slice(&self, slice: &EndpointSlice, removed: bool) {
        self.metrics.endpoint_changes_total.inc();
        let changed = {
            let mut c = self.changes.lock();
            let changed = c.endpoints.endpoint_slice_update(slice, removed);
            self.metrics.endpoint_changes_pending.set(c.endpoints.pending() as i64);
            changed
        };
        if changed && self.initialized.load(Ordering::SeqCst) {
            self.queue_sync();
        }
    }

    fn on_endpoint_slices_synced(&self) {
        let mut c = self.changes.lock();
        c.slices_synced = true;
        self.set_initialized(&c);
        drop(c);
        self.queue_sync();
    }

    fn on_node(&self, node: Option<&Node>) {
        let labels: NodeLabels = node.and_then(|n| n.metadata.labels.clone()).unwrap_or_default();
        let mut c = self.changes.lock();
        if c.node_labels == labels && node.is_some() {
            return;
        }
        c.node_labels = labels;
        c.node_labels_changed = true;
        drop(c);
        self.queue_sync();
    }

    fn start(self: Arc<Self>) -> std::io::Result<()> {
        let weak = Arc::downgrade(&self);
        let name = match self.family {
            Family::Ip => "sync-ipv4",
            Family::Ip6 => "sync-ipv6",
        };
        let (runner, handle) = BoundedFrequencyRunner::start(
            name,
            move || {
                if let Some(p) = weak.upgrade() {
                    p.sync_proxy_rules();
                }
            },
            self.loop_config.min_sync_period,
            self.loop_config.sync_period,
            2,
        )?;
        // Healthy while starting; the queued time covers the wait for the informers.
        self.health.updated(self.family);
        self.metrics.sync_proxy_rules_last_queued_timestamp.set(unix_seconds(SystemTime::now()));
        if self.runner.set((runner, Mutex::new(Some(handle)))).is_err() {
            return Err(std::io::Error::other("proxier started twice"));
        }
        if self.initialized.load(Ordering::SeqCst) {
            self.queue_sync();
        }
        Ok(())
    }

    fn stop(&self) {
        if let Some((runner, handle)) = self.runner.get() {
            runner.stop();
            if let Some(h) = handle.lock().take() {
                let _ = h.join();
            }
        }
        if let Some(hs) = &self.state.lock().service_health {
            hs.close_all();
        }
    }
}

/// Feeds every family's proxier (upstream's `metaproxier`).
pub struct MetaProxier {
    pub proxiers: Vec<Arc<dyn Provider>>,
}

impl Provider for MetaProxier {
    fn on_service(&self, old: Option<&Service>, new: Option<&Service>) {
        self.proxiers.iter().for_each(|p| p.on_service(old, new));
    }
    fn on_services_synced(&self) {
        self.proxiers.iter().for_each(|p| p.on_services_synced());
    }
    fn on_endpoint_slice(&self, slice: &EndpointSlice, removed: bool) {
        self.proxiers.iter().for_each(|p| p.on_endpoint_slice(slice, removed));
    }
    fn on_endpoint_slices_synced(&self) {
        self.proxiers.iter().for_each(|p| p.on_endpoint_slices_synced());
    }
    fn on_node(&self, node: Option<&Node>) {
        self.proxiers.iter().for_each(|p| p.on_node(node));
    }
    fn start(self: Arc<Self>) -> std::io::Result<()> {
        for p in &self.proxiers {
            p.clone().start()?;
        }
        Ok(())
    }
    fn stop(&self) {
        self.proxiers.iter().for_each(|p| p.stop());
    }
}

/// The first `chars` characters of the base32 (RFC 4648) encoding of the SHA-256 of
/// `input`: upstream's chain-name hash.
pub fn hash_base32(input: &str, chars: usize) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let digest = Sha256::digest(input.as_bytes());
    let mut out = String::with_capacity(chars);
    let mut buffer: u64 = 0;
    let mut bits = 0;
    for byte in digest.iter() {
        buffer = (buffer << 8) | u64::from(*byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[((buffer >> bits) & 31) as usize] as char);
            if out.len() == chars {
                return out;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base32_of_sha256() {
        // sha256("") = e3b0c442..., whose base32 starts "4OYMIQUY7QOBJGX3".
        assert_eq!(hash_base32("", 16), "4OYMIQUY7QOBJGX3");
        assert_eq!(hash_base32("ns1/svc1/tcp/p80", 8).len(), 8);
    }
}
