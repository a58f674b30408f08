//! Liveness, readiness and startup probes: one task per probe of each running container,
//! with upstream's timing fields (initialDelaySeconds, periodSeconds, timeoutSeconds,
//! successThreshold, failureThreshold). Results wake the pod's worker: readiness drives
//! the Ready condition, a failed liveness or startup probe restarts the container.
//! Handlers: exec (CRI ExecSync) here; httpGet (HTTP and HTTPS), tcpSocket and grpc in
//! [`crate::probe`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use component_base::events::Type;
use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use parking_lot::Mutex;
use tokio::task::JoinHandle;

use crate::metrics::ProbeLabels;
use crate::{Kubelet, probe};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Liveness,
    Readiness,
    Startup,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
            Kind::Startup => "Startup",
        }
    }
}

struct Entry {
    container_id: String,
    ready: bool,
    started: bool,
    liveness_failed: bool,
    tasks: Vec<JoinHandle<()>>,
}

/// Probe state by (pod UID, container name), for the current container of that name.
#[derive(Default)]
pub struct Probes {
    entries: Arc<Mutex<HashMap<(String, String), Entry>>>,
}

impl Probes {
    /// Starts the probes of container `id` unless they run already.
    pub fn ensure(&self, k: &Arc<Kubelet>, pod: &Pod, c: &Container, id: &str, pod_ips: &[String]) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let key = (uid.clone(), c.name.clone());
        let mut entries = self.entries.lock();
        if entries.get(&key).is_some_and(|e| e.container_id == id) {
            return;
        }
        if let Some(old) = entries.remove(&key) {
            old.tasks.iter().for_each(JoinHandle::abort);
        }
        let mut tasks = Vec::new();
        let host = pod_ips.first().cloned().unwrap_or_else(|| k.node_facts.read().host_ip.clone());
        for (kind, probe) in [
            (Kind::Startup, &c.startup_probe),
            (Kind::Liveness, &c.liveness_probe),
            (Kind::Readiness, &c.readiness_probe),
        ] {
            if let Some(p) = probe {
                let worker = Worker {
                    k: k.clone(),
                    entries: self.entries.clone(),
                    key: key.clone(),
                    id: id.to_string(),
                    kind,
                    probe: p.clone(),
                    pod: pod.clone(),
                    container: c.clone(),
                    host: host.clone(),
                };
                tasks.push(tokio::spawn(worker.run()));
            }
        }
        entries.insert(
            key,
            Entry {
                container_id: id.to_string(),
                ready: c.readiness_probe.is_none(),
                started: c.startup_probe.is_none(),
                liveness_failed: false,
                tasks,
            },
        );
    }

    /// (ready, started) of container `id`: without probes, a running container is both.
    pub fn state(&self, uid: &str, name: &str, id: &str, c: &Container) -> (bool, bool) {
        let entries = self.entries.lock();
        match entries.get(&(uid.to_string(), name.to_string())).filter(|e| e.container_id == id) {
            Some(e) => (e.ready && e.started, e.started),
            None => (c.readiness_probe.is_none() && c.startup_probe.is_none(), c.startup_probe.is_none()),
        }
    }

    pub fn liveness_failed(&self, uid: &str, name: &str, id: &str) -> bool {
        let entries = self.entries.lock();
        entries
            .get(&(uid.to_string(), name.to_string()))
            .is_some_and(|e| e.container_id == id && e.liveness_failed)
    }

    pub fn forget_pod(&self, uid: &str) {
        self.entries.lock().retain(|(u, _), e| {
            if u == uid {
                e.tasks.iter().for_each(JoinHandle::abort);
                false
            } else {
                true
            }
        });
    }
}

struct Worker {
    k: Arc<Kubelet>,
    entries: Arc<Mutex<HashMap<(String, String), Entry>>>,
    key: (String, String),
    id: String,
    kind: Kind,
    probe: Probe,
    pod: Pod,
    container: Container,
    host: String,
}

impl Worker {
    fn with_entry<R>(&self, f: impl FnOnce(&mut Entry) -> R) -> Option<R> {
        let mut entries = self.entries.lock();
        entries.get_mut(&self.key).filter(|e| e.container_id == self.id).map(f)
    }

    async fn run(self) {
        let p = &self.probe;
        let period = Duration::from_secs(p.period_seconds.unwrap_or(10).max(1) as u64);
        let timeout = Duration::from_secs(p.timeout_seconds.unwrap_or(1).max(1) as u64);
        let success_threshold = p.success_threshold.unwrap_or(1).max(1);
        let failure_threshold = p.failure_threshold.unwrap_or(3).max(1);
        tokio::time::sleep(Duration::from_secs(p.initial_delay_seconds.unwrap_or(0).max(0) as u64)).await;
        let (mut successes, mut failures) = (0, 0);
        loop {
            let started = self.with_entry(|e| e.started);
            let Some(started) = started else { return };
            // Liveness and readiness wait for the startup probe, as upstream.
            if self.kind == Kind::Startup || started {
                let result = tokio::time::timeout(timeout, self.probe_once(timeout))
                    .await
                    .unwrap_or_else(|_| Err(format!("timeout after {}s", timeout.as_secs())));
                let labels = ProbeLabels {
                    probe_type: self.kind.as_str().into(),
                    result: if result.is_ok() { "successful".into() } else { "failed".into() },
                    container: self.container.name.clone(),
                    pod: self.pod.metadata.name.clone().unwrap_or_default(),
                    namespace: self.pod.metadata.namespace.clone().unwrap_or_default(),
                    pod_uid: self.key.0.clone(),
                };
                self.k.metrics.prober_probe_total.get_or_create(&labels).inc();
                match result {
                    Ok(()) => {
                        failures = 0;
                        successes += 1;
                        if successes >= success_threshold && self.record(true) {
                            if self.kind == Kind::Startup {
                                return;
                            }
                        }
                    }
                    Err(msg) => {
                        successes = 0;
                        failures += 1;
                        crate::pod_workers::event(
                            &self.k,
                            &self.pod,
                            Type::Warning,
                            "Unhealthy",
                            format!("{} probe failed: {msg}", self.kind.as_str()),
                        );
                        if failures >= failure_threshold {
                            self.record(false);
                            if self.kind != Kind::Readiness {
                                return;
                            }
                        }
                    }
                }
            }
            tokio::time::sleep(period).await;
        }
    }

    /// Records a threshold crossing; wakes the pod's worker when something changed.
    fn record(&self, ok: bool) -> bool {
        let changed = self.with_entry(|e| match self.kind {
            Kind::Readiness => std::mem::replace(&mut e.ready, ok) != ok,
            Kind::Startup if ok => !std::mem::replace(&mut e.started, true),
            Kind::Startup | Kind::Liveness if !ok => !std::mem::replace(&mut e.liveness_failed, true),
            _ => false,
        });
        if changed == Some(true) {
            self.k.wake(&self.key.0);
        }
        changed.is_some()
    }

    async fn probe_once(&self, timeout: Duration) -> Result<(), String> {
        let p = &self.probe;
        if let Some(exec) = &p.exec {
            let r =
                self.k.runtime.exec_sync(&self.id, exec.command.clone().unwrap_or_default(), timeout).await;
            return match r {
                Ok(resp) if resp.exit_code == 0 => Ok(()),
                Ok(resp) => Err(format!(
                    "command exited with {}: {}",
                    resp.exit_code,
                    String::from_utf8_lossy(&resp.stdout).trim()
                )),
                Err(e) => Err(e.to_string()),
            };
        }
        if let Some(h) = &p.http_get {
            let https = h.scheme.as_deref().is_some_and(|s| s.eq_ignore_ascii_case("HTTPS"));
            let port = self.port(&h.port)?;
            let host = h.host.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| self.host.clone());
            let path = h.path.clone().filter(|p| !p.is_empty()).unwrap_or_else(|| "/".into());
            let path = if path.starts_with('/') { path } else { format!("/{path}") };
            return probe::http_get(https, &host, port, &path, h.http_headers.as_deref().unwrap_or_default())
                .await;
        }
        if let Some(t) = &p.tcp_socket {
            let port = self.port(&t.port)?;
            let host = t.host.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| self.host.clone());
            return probe::tcp(&host, port).await;
        }
        if let Some(g) = &p.grpc {
            let port = u16::try_from(g.port).map_err(|_| format!("invalid port {}", g.port))?;
            return probe::grpc(&self.host, port, g.service.as_deref().unwrap_or_default(), timeout).await;
        }
        Err("probe has no handler".into())
    }

    fn port(&self, port: &IntOrString) -> Result<u16, String> {
        match port {
            IntOrString::Int(p) => u16::try_from(*p).map_err(|_| format!("invalid port {p}")),
            IntOrString::String(name) => self
                .container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name))
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| format!("port {name:?} not found in the container's ports")),
        }
    }
}
