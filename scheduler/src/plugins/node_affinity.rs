//! NodeAffinity: `spec.nodeSelector` and required node affinity must match the node's
//! labels (and `metadata.name` fields); preferred terms add their weights to the score.

use crate::framework::{
    CycleState, Filter, NodeInfo, Plugin, PodInfo, Rejection, Score, Status, default_normalize, events,
};

pub const NAME: &str = "NodeAffinity";
pub const REASON: &str = "node(s) didn't match Pod's node affinity/selector";

pub struct NodeAffinity;

/// Whether `node` satisfies the pod's nodeSelector and required node affinity (also used
/// by PodTopologySpread to decide which nodes count towards skew).
pub fn required_matches(pod: &PodInfo, node: &NodeInfo) -> bool {
    pod.node_selector.iter().all(|(k, v)| node.labels.get(k) == Some(v))
        && pod.required_node_affinity.as_ref().is_none_or(|m| m.matches(&node.name, &node.labels))
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events(&self) -> u32 {
        events::NODE_ADD | events::NODE_LABEL
    }
    fn as_filter(&self) -> Option<&dyn Filter> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn Score> {
        Some(self)
    }
}

impl Filter for NodeAffinity {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if required_matches(pod, node) { Ok(()) } else { Err(Rejection::unresolvable(REASON)) }
    }
}

impl Score for NodeAffinity {
    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        pod.preferred_node_affinity
            .iter()
            .filter(|(_, m)| m.matches(&node.name, &node.labels))
            .map(|(w, _)| i64::from(*w))
            .sum()
    }

    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) {
        default_normalize(scores, false);
    }
}
