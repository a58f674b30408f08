//! The pod lifecycle event generator: relists the runtime every second and wakes the worker
//! of each pod whose containers or sandboxes changed state, so a container's exit is acted
//! on within about a second rather than at the next periodic sync. Pods the runtime has but
//! no source wants (deleted while the kubelet was down, say) get a worker that removes them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::metrics::ContainerStateLabel;
use crate::{Kubelet, cri};

const RELIST_PERIOD: Duration = Duration::from_secs(1);

pub async fn run(k: Arc<Kubelet>) {
    let mut last: HashMap<String, Vec<(String, i32)>> = HashMap::new();
    let mut tick = tokio::time::interval(RELIST_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = k.shutdown.wait() => return,
            _ = tick.tick() => {}
        }
        let started = Instant::now();
        let (sandboxes, containers) =
            match (k.runtime.list_pod_sandboxes().await, k.runtime.list_containers().await) {
                (Ok(s), Ok(c)) => (s, c),
                (Err(err), _) | (_, Err(err)) => {
                    tracing::warn!(%err, "PLEG relist");
                    continue;
                }
            };
        k.metrics.pleg_relist_duration.observe(started.elapsed().as_secs_f64());
        let mut now: HashMap<String, Vec<(String, i32)>> = HashMap::new();
        let mut running_pods = 0;
        for s in &sandboxes {
            let Some(uid) = s.labels.get(cri::POD_UID_LABEL) else { continue };
            running_pods += i64::from(s.state == cri::PodSandboxState::SandboxReady as i32);
            now.entry(uid.clone()).or_default().push((s.id.clone(), 100 + s.state));
        }
        let mut states: HashMap<&str, i64> = HashMap::new();
        for c in &containers {
            let state = match c.state {
                0 => "created",
                1 => "running",
                2 => "exited",
                _ => "unknown",
            };
            *states.entry(state).or_default() += 1;
            let Some(uid) = c.labels.get(cri::POD_UID_LABEL) else { continue };
            now.entry(uid.clone()).or_default().push((c.id.clone(), c.state));
        }
        k.metrics.running_pods.set(running_pods);
        for state in ["created", "running", "exited", "unknown"] {
            k.metrics
                .running_containers
                .get_or_create(&ContainerStateLabel { container_state: state.into() })
                .set(states.get(state).copied().unwrap_or(0));
        }
        for v in now.values_mut() {
            v.sort();
        }
        let synced = k.client.is_none() || k.pods.api_synced();
        for (uid, state) in &now {
            let changed = last.get(uid) != Some(state);
            let orphan = synced && k.pods.get(uid).is_none() && !k.has_worker(uid);
            if changed || orphan {
                k.wake(uid);
            }
        }
        for uid in last.keys() {
            if !now.contains_key(uid) {
                k.wake(uid);
            }
        }
        last = now;
        // Housekeeping at the relist's pace: mirror pods left by removed static pods.
        crate::mirror::cleanup_orphans(&k).await;
    }
}
