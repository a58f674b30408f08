//! NodeResourcesBalancedAllocation: prefers nodes where, with the pod placed, cpu and
//! memory are used in similar fractions (score = (1 − standard deviation) × 100).

use crate::framework::{CycleState, MAX_NODE_SCORE, NodeInfo, Plugin, PodInfo, Score};

pub const NAME: &str = "NodeResourcesBalancedAllocation";

pub struct BalancedAllocation;

impl Plugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_score(&self) -> Option<&dyn Score> {
        Some(self)
    }
}

impl Score for BalancedAllocation {
    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let fraction = |requested: i64, allocatable: i64| {
            if allocatable <= 0 { 1.0 } else { (requested as f64 / allocatable as f64).min(1.0) }
        };
        let cpu = fraction(node.requested.milli_cpu + pod.requests.milli_cpu, node.allocatable.milli_cpu);
        let memory = fraction(node.requested.memory + pod.requests.memory, node.allocatable.memory);
        // The population standard deviation of two values is half their distance.
        let std = (cpu - memory).abs() / 2.0;
        ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
    }
}
