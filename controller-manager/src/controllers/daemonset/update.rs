//! The DaemonSet controller's decisions, free of I/O (upstream `daemon_controller.go`'s
//! `podsShouldBeOnNode` and `update.go`'s `rollingUpdate`): which nodes need a pod, which
//! pods must go, and how far a rolling update may go in one step.
//!
//! Pods are grouped by the node they are for ([`super::util::target_node`]); a node in the
//! map with no pods is a node that should run one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use super::util::{is_pod_updated, sort_oldest_first};
use crate::history::HASH_LABEL;
use crate::podutil;

pub type NodePods = BTreeMap<String, Vec<Arc<Pod>>>;

/// What one node needs: a new pod, and pods to delete.
#[derive(Debug, Default, PartialEq)]
pub struct NodeActions {
    pub create: bool,
    pub delete: Vec<Arc<Pod>>,
}

/// Upstream's `podsShouldBeOnNode`. `may_delete_failed` is asked before a failed pod is
/// deleted, so the caller can back off a node whose kubelet keeps rejecting the pod (and
/// record the event); a pod it refuses is left for a later sync.
#[allow(clippy::too_many_arguments)]
pub fn node_actions(
    should_run: bool,
    keep_running: bool,
    pods: Option<&Vec<Arc<Pod>>>,
    surge: bool,
    hash: &str,
    min_ready: Duration,
    now: Timestamp,
    may_delete_failed: &mut dyn FnMut(&Pod) -> bool,
) -> NodeActions {
    let mut out = NodeActions::default();
    match pods {
        None if should_run => out.create = true,
        None => {}
        Some(pods) if keep_running => {
            let mut running = Vec::new();
            for pod in pods.iter().filter(|p| !podutil::is_terminating(p)) {
                match podutil::phase(pod) {
                    "Failed" => {
                        if may_delete_failed(pod) {
                            out.delete.push(pod.clone());
                        }
                    }
                    "Succeeded" => out.delete.push(pod.clone()),
                    _ => running.push(pod.clone()),
                }
            }
            sort_oldest_first(&mut running);
            if !surge {
                // One pod per node: the oldest stays.
                out.delete.extend(running.iter().skip(1).cloned());
                return out;
            }
            if running.is_empty() {
                out.create = should_run;
                return out;
            }
            // Surging: at most the oldest pod of the current revision and the oldest of an
            // older one; the old one goes once the new is available (or the old is not ready).
            let (mut newest, mut oldest) = (None, None);
            for pod in running {
                let current =
                    pod.metadata.labels.as_ref().and_then(|l| l.get(HASH_LABEL)).map(String::as_str)
                        == Some(hash);
                let slot = if current { &mut newest } else { &mut oldest };
                if slot.is_none() {
                    *slot = Some(pod);
                } else {
                    out.delete.push(pod);
                }
            }
            if let (Some(new), Some(old)) = (newest, oldest)
                && (!podutil::is_ready(&old) || podutil::is_available(&new, min_ready, now))
            {
                out.delete.push(old);
            }
        }
        Some(pods) => {
            out.delete.extend(pods.iter().filter(|p| !podutil::is_terminating(p)).cloned());
        }
    }
    out
}

/// The one current and one old pod on a node, or `None` when there are more of either
/// (the core loop prunes those first). Pods being deleted do not count.
fn updated_and_old(
    pods: &[Arc<Pod>],
    hash: &str,
    generation: Option<i64>,
) -> Option<(Option<Arc<Pod>>, Option<Arc<Pod>>)> {
    let (mut new, mut old) = (None, None);
    for pod in pods.iter().filter(|p| !podutil::is_terminating(p)) {
        let slot = if is_pod_updated(pod, hash, generation) { &mut new } else { &mut old };
        if slot.is_some() {
            return None;
        }
        *slot = Some(pod.clone());
    }
    Some((new, old))
}

/// A rolling update without surge: the old pods to delete now, keeping at most
/// `max_unavailable` pods unavailable. An old pod that is not available anyway is always
/// replaced; nodes without a pod, or with two, count as unavailable.
pub fn plan_without_surge(
    nodes: &NodePods,
    hash: &str,
    generation: Option<i64>,
    max_unavailable: i32,
    min_ready: Duration,
    now: Timestamp,
) -> Vec<Arc<Pod>> {
    let mut unavailable = 0;
    let mut replace = Vec::new();
    let mut candidates = Vec::new();
    for pods in nodes.values() {
        let Some((new, old)) = updated_and_old(pods, hash, generation) else {
            unavailable += 1;
            continue;
        };
        match (new, old) {
            (None, None) | (Some(_), Some(_)) => unavailable += 1,
            (Some(new), None) => {
                if !podutil::is_available(&new, min_ready, now) {
                    unavailable += 1;
                }
            }
            (None, Some(old)) => {
                if !podutil::is_available(&old, min_ready, now) {
                    replace.push(old);
                    unavailable += 1;
                } else if unavailable < max_unavailable {
                    candidates.push(old);
                }
            }
        }
    }
    let room = (max_unavailable - unavailable).max(0) as usize;
    replace.extend(candidates.into_iter().take(room));
    replace
}

/// A rolling update with surge: (old pods to delete, nodes to start a new pod on). A new
/// pod starts beside an old one on at most `max_surge` nodes at a time (at once where the
/// old one is unavailable); the old one goes when the new one is available. Old pods on
/// nodes that should no longer run one go only while enough pods elsewhere are available.
#[allow(clippy::too_many_arguments)]
pub fn plan_with_surge(
    nodes: &NodePods,
    should_run: &dyn Fn(&str) -> bool,
    hash: &str,
    generation: Option<i64>,
    max_surge: i32,
    desired: i32,
    min_ready: Duration,
    now: Timestamp,
) -> (Vec<Arc<Pod>>, Vec<String>) {
    let mut delete = Vec::new();
    let mut should_not_run = Vec::new();
    let mut allowed = Vec::new();
    let mut candidates = Vec::new();
    let (mut surging, mut available) = (0, 0);
    for (node, pods) in nodes {
        let Some((new, old)) = updated_and_old(pods, hash, generation) else {
            surging += 1;
            continue;
        };
        let counted = old.as_ref().or(new.as_ref());
        if counted.is_some_and(|p| podutil::is_available(p, min_ready, now)) {
            available += 1;
        }
        match (new, old) {
            (_, None) => {}
            (None, Some(old)) => {
                if !podutil::is_available(&old, min_ready, now) {
                    if should_run(node) {
                        allowed.push(node.clone());
                    } else {
                        delete.push(old);
                    }
                } else if !should_run(node) {
                    should_not_run.push(old);
                } else if surging < max_surge {
                    candidates.push(node.clone());
                }
            }
            (Some(new), Some(old)) => {
                if podutil::is_available(&new, min_ready, now) {
                    delete.push(old);
                } else {
                    surging += 1;
                }
            }
        }
    }
    // Full availability is the point of surging: a pod on a node that should no longer
    // run one goes only while more than the desired number are available elsewhere.
    let deletable = (available - desired).max(0) as usize;
    delete.extend(should_not_run.into_iter().take(deletable));
    let room = (max_surge - surging).max(0) as usize;
    allowed.extend(candidates.into_iter().take(room));
    (delete, allowed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn pod(name: &str, hash: &str, ready: bool, created: i64) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {HASH_LABEL: hash},
                    "creationTimestamp": ts(created).to_string()},
                "spec": {"nodeName": "n", "containers": []},
                "status": {"phase": "Running", "conditions": [{"type": "Ready",
                    "status": if ready { "True" } else { "False" },
                    "lastTransitionTime": ts(created).to_string()}]},
            }))
            .unwrap(),
        )
    }

    fn failed(name: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name}, "status": {"phase": "Failed"}}))
                .unwrap(),
        )
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
        pods.iter().map(|p| p.metadata.name.as_deref().unwrap()).collect()
    }

    const NOW: i64 = 1_000_000;

    #[test]
    fn core_loop_per_node() {
        let mut yes = |_: &Pod| true;
        let z = Duration::ZERO;
        let a = node_actions(true, true, None, false, "h", z, ts(NOW), &mut yes);
        assert!(a.create && a.delete.is_empty());
        // Excess pods: the oldest stays.
        let pods = vec![pod("young", "h", true, 20), pod("old", "h", true, 10)];
        let a = node_actions(true, true, Some(&pods), false, "h", z, ts(NOW), &mut yes);
        assert_eq!(names(&a.delete), vec!["young"]);
        // Failed pods are deleted unless backing off; the node then has no running pod.
        let pods = vec![failed("f")];
        let a = node_actions(true, true, Some(&pods), false, "h", z, ts(NOW), &mut yes);
        assert_eq!(names(&a.delete), vec!["f"]);
        let a = node_actions(true, true, Some(&pods), false, "h", z, ts(NOW), &mut |_: &Pod| false);
        assert!(a.delete.is_empty());
        // No longer wanted: everything goes.
        let pods = vec![pod("p", "h", true, 10)];
        let a = node_actions(false, false, Some(&pods), false, "h", z, ts(NOW), &mut yes);
        assert_eq!(names(&a.delete), vec!["p"]);
        // Surge: the old pod goes once the new one is available.
        let pods = vec![pod("old", "o", true, 10), pod("new", "h", false, 20)];
        let a = node_actions(true, true, Some(&pods), true, "h", z, ts(NOW), &mut yes);
        assert!(a.delete.is_empty());
        let pods = vec![pod("old", "o", true, 10), pod("new", "h", true, 20)];
        let a = node_actions(true, true, Some(&pods), true, "h", z, ts(NOW), &mut yes);
        assert_eq!(names(&a.delete), vec!["old"]);
    }

    #[test]
    fn rolling_without_surge_respects_max_unavailable() {
        let mut nodes = NodePods::new();
        for i in 0..4 {
            nodes.insert(format!("n{i}"), vec![pod(&format!("p{i}"), "old", true, 10)]);
        }
        let z = Duration::ZERO;
        assert_eq!(plan_without_surge(&nodes, "h", None, 1, z, ts(NOW)).len(), 1);
        assert_eq!(plan_without_surge(&nodes, "h", None, 2, z, ts(NOW)).len(), 2);
        // One node mid-update (no pod yet): nothing more may go with maxUnavailable 1.
        nodes.insert("n0".into(), vec![]);
        assert!(plan_without_surge(&nodes, "h", None, 1, z, ts(NOW)).is_empty());
        // An unavailable old pod is replaced regardless.
        nodes.insert("n1".into(), vec![pod("sick", "old", false, 10)]);
        assert_eq!(names(&plan_without_surge(&nodes, "h", None, 1, z, ts(NOW))), vec!["sick"]);
        // Updated and available everywhere: nothing to do.
        let mut done = NodePods::new();
        done.insert("n".into(), vec![pod("p", "h", true, 10)]);
        assert!(plan_without_surge(&done, "h", None, 1, z, ts(NOW)).is_empty());
        // minReadySeconds: a new pod ready for less than that is unavailable.
        done.insert("m".into(), vec![pod("q", "old", true, 10)]);
        done.insert("n".into(), vec![pod("p", "h", true, NOW - 5)]);
        assert!(plan_without_surge(&done, "h", None, 1, Duration::from_secs(30), ts(NOW)).is_empty());
    }

    #[test]
    fn rolling_with_surge() {
        let mut nodes = NodePods::new();
        for i in 0..3 {
            nodes.insert(format!("n{i}"), vec![pod(&format!("p{i}"), "old", true, 10)]);
        }
        let run = |_: &str| true;
        let z = Duration::ZERO;
        let (del, create) = plan_with_surge(&nodes, &run, "h", None, 1, 3, z, ts(NOW));
        assert!(del.is_empty());
        assert_eq!(create, vec!["n0"]);
        // n0 surged and its new pod is not yet available: no more surge.
        nodes.get_mut("n0").unwrap().push(pod("new0", "h", false, 20));
        let (del, create) = plan_with_surge(&nodes, &run, "h", None, 1, 3, z, ts(NOW));
        assert!(del.is_empty() && create.is_empty());
        // Available now: the old pod goes, and the next node may surge.
        nodes.insert("n0".into(), vec![pod("p0", "old", true, 10), pod("new0", "h", true, 20)]);
        let (del, create) = plan_with_surge(&nodes, &run, "h", None, 1, 3, z, ts(NOW));
        assert_eq!(names(&del), vec!["p0"]);
        assert_eq!(create, vec!["n1"]);
    }
}
