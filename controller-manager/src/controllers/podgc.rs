//! The pod garbage collector: every 20 s it deletes terminated pods beyond
//! `--terminated-pod-gc-threshold` (oldest first), pods bound to Nodes that no longer
//! exist, terminating pods that were never scheduled, and terminating pods on Nodes taken
//! out of service — the pods no kubelet will ever finish deleting.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::controller::{self, Context};
use crate::informers::Informer;
use crate::podutil;

const PERIOD: Duration = Duration::from_secs(20);
/// How long a Node must stay missing before its pods are collected: a Node that was
/// only briefly absent from the informer (re-created, or a lagging watch) keeps them.
const QUARANTINE: Duration = Duration::from_secs(40);
const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

struct PodGc {
    client: kube::Client,
    pods: Arc<Informer<Pod>>,
    nodes: Arc<Informer<Node>>,
    threshold: i64,
    /// Node names first seen missing, and when.
    missing: Mutex<HashMap<String, Instant>>,
}

pub fn start(ctx: &Context) -> Result<(), controller::Error> {
    let gc = Arc::new(PodGc {
        client: ctx.client.clone(),
        pods: ctx.informers.get::<Pod>(),
        nodes: ctx.informers.get::<Node>(),
        threshold: ctx.options.terminated_pod_gc_threshold,
        missing: Mutex::default(),
    });
    let informers = ctx.informers.clone();
    let shutdown = ctx.shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = informers.wait_synced() => {}
            () = shutdown.wait() => return,
        }
        let mut tick = tokio::time::interval(PERIOD);
        loop {
            tokio::select! {
                _ = tick.tick() => gc.collect().await,
                () = shutdown.wait() => return,
            }
        }
    });
    Ok(())
}

/// The terminated pods to delete, oldest first, so that at most `threshold` remain.
fn terminated_over_threshold(pods: &[Arc<Pod>], threshold: i64) -> Vec<Arc<Pod>> {
    if threshold <= 0 {
        return Vec::new();
    }
    let mut done: Vec<Arc<Pod>> = pods.iter().filter(|p| podutil::is_terminal(p)).cloned().collect();
    let excess = done.len() as i64 - threshold;
    if excess <= 0 {
        return Vec::new();
    }
    done.sort_by(|a, b| {
        let t = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        t(a).cmp(&t(b)).then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    done.truncate(excess as usize);
    done
}

impl PodGc {
    async fn collect(&self) {
        let pods = self.pods.list();
        for pod in terminated_over_threshold(&pods, self.threshold) {
            self.delete(&pod, None, false).await;
        }
        self.collect_orphaned(&pods).await;
        for pod in pods.iter().filter(|p| podutil::is_terminating(p) && podutil::node_name(p).is_empty()) {
            self.delete(pod, Some("PodGC: unscheduled pod is terminating"), true).await;
        }
        self.collect_out_of_service(&pods).await;
    }

    /// Pods bound to Nodes that have been gone for the quarantine, confirmed with a live GET.
    async fn collect_orphaned(&self, pods: &[Arc<Pod>]) {
        let mut candidates: HashMap<String, Vec<Arc<Pod>>> = HashMap::new();
        for pod in pods {
            let node = podutil::node_name(pod);
            if !node.is_empty() && self.nodes.get(node).is_none() {
                candidates.entry(node.to_owned()).or_default().push(pod.clone());
            }
        }
        let now = Instant::now();
        let due: Vec<String> = {
            let mut missing = self.missing.lock();
            missing.retain(|n, _| candidates.contains_key(n));
            candidates
                .keys()
                .filter(|n| now.duration_since(*missing.entry((*n).clone()).or_insert(now)) >= QUARANTINE)
                .cloned()
                .collect()
        };
        let api = Api::<Node>::all(self.client.clone());
        for node in due {
            match api.get_opt(&node).await {
                Ok(None) => {}
                Ok(Some(_)) => {
                    self.missing.lock().remove(&node);
                    continue;
                }
                Err(err) => {
                    tracing::warn!(%node, %err, "checking whether a node exists");
                    continue;
                }
            }
            for pod in candidates.remove(&node).unwrap_or_default() {
                let msg = "PodGC: node no longer exists";
                self.delete(&pod, Some(msg), true).await;
            }
        }
    }

    /// Terminating pods on a Node that is not ready and tainted out-of-service: its
    /// kubelet is known to be gone, so nobody else will finish them.
    async fn collect_out_of_service(&self, pods: &[Arc<Pod>]) {
        for pod in pods.iter().filter(|p| podutil::is_terminating(p)) {
            let Some(node) = self.nodes.get(podutil::node_name(pod)) else { continue };
            let ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status == "True");
            let out = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == OUT_OF_SERVICE));
            if !ready && out {
                self.delete(pod, Some("PodGC: node is out of service"), true).await;
            }
        }
    }

    /// Deletes a pod (with grace 0 when `force`); a pod not yet finished is first marked
    /// Failed with a DisruptionTarget condition saying why, as upstream.
    async fn delete(&self, pod: &Pod, reason: Option<&str>, force: bool) {
        let (ns, name) = podutil::namespace_name(pod);
        let api = Api::<Pod>::namespaced(self.client.clone(), ns);
        if let Some(message) = reason
            && !podutil::is_terminal(pod)
        {
            let condition = PodCondition {
                type_: "DisruptionTarget".into(),
                status: "True".into(),
                reason: Some("DeletionByPodGC".into()),
                message: Some(message.into()),
                last_transition_time: Some(Time(k8s_openapi::jiff::Timestamp::now())),
                ..PodCondition::default()
            };
            let patch = serde_json::json!({
                "status": {"phase": "Failed", "conditions": [condition]}
            });
            if let Err(err) = api.patch_status(name, &PatchParams::default(), &Patch::Strategic(patch)).await
                && controller::api_code(&err) != Some(404)
            {
                tracing::warn!(pod = %format!("{ns}/{name}"), %err, "marking pod failed");
            }
        }
        let dp = DeleteParams {
            grace_period_seconds: force.then_some(0),
            preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
            ..DeleteParams::default()
        };
        match api.delete(name, &dp).await {
            Ok(_) => tracing::info!(pod = %format!("{ns}/{name}"), "garbage collected pod"),
            Err(err) if matches!(controller::api_code(&err), Some(404 | 409)) => {}
            Err(err) => tracing::warn!(pod = %format!("{ns}/{name}"), %err, "deleting pod"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;
    use kube::api::ObjectMeta;

    fn pod(name: &str, phase: &str, created: i64) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(k8s_openapi::jiff::Timestamp::from_second(created).unwrap())),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus { phase: Some(phase.into()), ..PodStatus::default() }),
            ..Pod::default()
        })
    }

    #[test]
    fn oldest_terminated_beyond_threshold() {
        let pods = vec![
            pod("new", "Succeeded", 30),
            pod("running", "Running", 1),
            pod("old", "Failed", 10),
            pod("mid", "Succeeded", 20),
        ];
        let names = |v: Vec<Arc<Pod>>| v.iter().map(|p| p.metadata.name.clone().unwrap()).collect::<Vec<_>>();
        assert_eq!(names(terminated_over_threshold(&pods, 1)), vec!["old", "mid"]);
        assert!(terminated_over_threshold(&pods, 3).is_empty());
        assert!(terminated_over_threshold(&pods, 0).is_empty());
    }
}
