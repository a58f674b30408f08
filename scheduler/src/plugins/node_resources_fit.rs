//! NodeResourcesFit: the pod's requests (containers, the largest init step, overhead) must
//! fit in the node's allocatable minus what placed pods request, and the node must have a
//! pod slot left. Scoring follows the configured strategy: LeastAllocated (default,
//! spreads), MostAllocated (packs) or RequestedToCapacityRatio (a piecewise-linear shape).

use serde::Deserialize;

use crate::framework::{
    CycleState, Filter, MAX_NODE_SCORE, NodeInfo, Plugin, PodInfo, Rejection, Score, Status, events,
};

pub const NAME: &str = "NodeResourcesFit";

/// `NodeResourcesFitArgs` (kubescheduler.config.k8s.io/v1).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    #[serde(default)]
    pub ignored_resources: Vec<String>,
    #[serde(default)]
    pub ignored_resource_groups: Vec<String>,
    #[serde(default)]
    pub scoring_strategy: Option<ScoringStrategy>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScoringStrategy {
    #[serde(rename = "type", default = "least_allocated")]
    pub kind: String,
    #[serde(default)]
    pub resources: Vec<ResourceSpec>,
    #[serde(default)]
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatio>,
}

fn least_allocated() -> String {
    "LeastAllocated".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceSpec {
    pub name: String,
    #[serde(default = "one")]
    pub weight: i64,
}

fn one() -> i64 {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestedToCapacityRatio {
    pub shape: Vec<ShapePoint>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShapePoint {
    pub utilization: i64,
    pub score: i64,
}

#[derive(Debug, Clone, PartialEq)]
enum Strategy {
    LeastAllocated,
    MostAllocated,
    /// (utilization %, score 0..=100) points, utilization ascending.
    Ratio(Vec<(i64, i64)>),
}

pub struct NodeResourcesFit {
    strategy: Strategy,
    resources: Vec<(String, i64)>,
    ignored: Vec<String>,
    ignored_groups: Vec<String>,
}

impl NodeResourcesFit {
    pub fn new(args: Args) -> Result<Self, String> {
        let scoring = args.scoring_strategy.unwrap_or(ScoringStrategy {
            kind: least_allocated(),
            resources: Vec::new(),
            requested_to_capacity_ratio: None,
        });
        let strategy = match scoring.kind.as_str() {
            "LeastAllocated" => Strategy::LeastAllocated,
            "MostAllocated" => Strategy::MostAllocated,
            "RequestedToCapacityRatio" => {
                let shape = scoring
                    .requested_to_capacity_ratio
                    .ok_or("scoringStrategy.requestedToCapacityRatio: required for RequestedToCapacityRatio")?
                    .shape;
                if shape.is_empty() {
                    return Err("scoringStrategy.requestedToCapacityRatio.shape: must not be empty".into());
                }
                let mut points = Vec::new();
                for p in shape {
                    if !(0..=100).contains(&p.utilization) || !(0..=10).contains(&p.score) {
                        return Err("scoringStrategy.requestedToCapacityRatio.shape: utilization must be in 0..=100 and score in 0..=10".into());
                    }
                    if points.last().is_some_and(|(u, _)| *u >= p.utilization) {
                        return Err("scoringStrategy.requestedToCapacityRatio.shape: utilization values must be sorted in increasing order".into());
                    }
                    // Config scores are 0..=10; node scores 0..=100.
                    points.push((p.utilization, p.score * MAX_NODE_SCORE / 10));
                }
                Strategy::Ratio(points)
            }
            other => return Err(format!("scoringStrategy.type: Unsupported value: \"{other}\"")),
        };
        let mut resources: Vec<(String, i64)> =
            scoring.resources.into_iter().map(|r| (r.name, r.weight)).collect();
        if resources.is_empty() {
            resources = vec![("cpu".into(), 1), ("memory".into(), 1)];
        }
        if let Some((name, w)) = resources.iter().find(|(_, w)| !(1..=100).contains(w)) {
            return Err(format!("scoringStrategy.resources[{name}].weight: {w} must be in 1..=100"));
        }
        Ok(Self {
            strategy,
            resources,
            ignored: args.ignored_resources,
            ignored_groups: args.ignored_resource_groups,
        })
    }

    fn ignored(&self, name: &str) -> bool {
        self.ignored.iter().any(|i| i == name)
            || name.split_once('/').is_some_and(|(group, _)| self.ignored_groups.iter().any(|g| g == group))
    }

    /// (requested including this pod, allocatable) for scoring `resource` on `node`.
    fn amounts(pod: &PodInfo, node: &NodeInfo, resource: &str) -> (i64, i64) {
        match resource {
            "cpu" => (node.non_zero_cpu + pod.non_zero_cpu, node.allocatable.milli_cpu),
            "memory" => (node.non_zero_memory + pod.non_zero_memory, node.allocatable.memory),
            other => (node.requested.get(other) + pod.requests.get(other), node.allocatable.get(other)),
        }
    }

    fn resource_score(&self, requested: i64, allocatable: i64) -> i64 {
        match &self.strategy {
            Strategy::LeastAllocated => {
                if allocatable == 0 || requested > allocatable {
                    0
                } else {
                    (allocatable - requested) * MAX_NODE_SCORE / allocatable
                }
            }
            Strategy::MostAllocated => {
                if allocatable == 0 {
                    0
                } else {
                    requested.min(allocatable) * MAX_NODE_SCORE / allocatable
                }
            }
            Strategy::Ratio(shape) => {
                let utilization =
                    if allocatable == 0 { 100 } else { (requested * 100 / allocatable).min(100) };
                broken_linear(shape, utilization)
            }
        }
    }
}

fn broken_linear(shape: &[(i64, i64)], x: i64) -> i64 {
    for (i, (u, s)) in shape.iter().enumerate() {
        if x <= *u {
            if i == 0 {
                return *s;
            }
            let (u0, s0) = shape[i - 1];
            return s0 + (s - s0) * (x - u0) / (u - u0);
        }
    }
    shape.last().map_or(0, |(_, s)| *s)
}

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events(&self) -> u32 {
        events::NODE_ADD | events::NODE_ALLOCATABLE | events::ASSIGNED_POD_DELETE
    }
    fn as_filter(&self) -> Option<&dyn Filter> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn Score> {
        Some(self)
    }
}

impl Filter for NodeResourcesFit {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let mut reasons = Vec::new();
        if node.pods.len() as i64 + 1 > node.allocatable.allowed_pods {
            reasons.push("Too many pods".to_string());
        }
        let want = &pod.requests;
        if !want.is_zero() {
            let free = |have: i64, used: i64| have - used;
            if want.milli_cpu > 0
                && want.milli_cpu > free(node.allocatable.milli_cpu, node.requested.milli_cpu)
            {
                reasons.push("Insufficient cpu".into());
            }
            if want.memory > 0 && want.memory > free(node.allocatable.memory, node.requested.memory) {
                reasons.push("Insufficient memory".into());
            }
            if want.ephemeral_storage > 0
                && want.ephemeral_storage
                    > free(node.allocatable.ephemeral_storage, node.requested.ephemeral_storage)
            {
                reasons.push("Insufficient ephemeral-storage".into());
            }
            for (name, amount) in &want.scalar {
                if *amount == 0 || self.ignored(name) {
                    continue;
                }
                if *amount > free(node.allocatable.get(name), node.requested.get(name)) {
                    reasons.push(format!("Insufficient {name}"));
                }
            }
        }
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(Rejection { code: crate::framework::Code::Unschedulable, reasons, plugin: "" })
        }
    }
}

impl Score for NodeResourcesFit {
    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let (mut sum, mut weights) = (0, 0);
        let ratio = matches!(self.strategy, Strategy::Ratio(_));
        for (name, weight) in &self.resources {
            // As upstream: resources the node does not have, and extended resources the
            // pod does not ask for, do not count.
            let extended = !matches!(name.as_str(), "cpu" | "memory" | "ephemeral-storage" | "pods");
            if extended && pod.requests.get(name) == 0 {
                continue;
            }
            let (requested, allocatable) = Self::amounts(pod, node, name);
            if allocatable == 0 {
                continue;
            }
            let score = self.resource_score(requested, allocatable);
            // RequestedToCapacityRatio averages only the resources that scored.
            if ratio && score == 0 {
                continue;
            }
            sum += score * weight;
            weights += weight;
        }
        match weights {
            0 => 0,
            // Rounded for RequestedToCapacityRatio, truncated for the others, as upstream.
            w if ratio => (sum as f64 / w as f64).round() as i64,
            w => sum / w,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{node, node_info, pod, pod_info};

    #[test]
    fn insufficient_resources_are_named() {
        let fit = NodeResourcesFit::new(Args::default()).unwrap();
        let n = node_info(node("n", "1", "1Gi"));
        let p = pod_info(pod("p", "2", "2Gi"));
        let err = fit.filter(&CycleState::default(), &p, &n).unwrap_err();
        assert_eq!(err.reasons, vec!["Insufficient cpu".to_string(), "Insufficient memory".into()]);
        assert!(fit.filter(&CycleState::default(), &pod_info(pod("p", "500m", "512Mi")), &n).is_ok());
    }

    #[test]
    fn least_and_most_allocated_order_nodes_oppositely() {
        let least = NodeResourcesFit::new(Args::default()).unwrap();
        let most: Args =
            serde_json::from_value(serde_json::json!({"scoringStrategy": {"type": "MostAllocated"}}))
                .unwrap();
        let most = NodeResourcesFit::new(most).unwrap();
        let mut busy = node_info(node("busy", "4", "8Gi"));
        busy.add_pod(std::sync::Arc::new(pod_info(crate::plugins::testing::bound(
            pod("x", "2", "4Gi"),
            "busy",
        ))));
        let idle = node_info(node("idle", "4", "8Gi"));
        let p = pod_info(pod("p", "1", "1Gi"));
        let s = CycleState::default();
        assert!(least.score(&s, &p, &idle) > least.score(&s, &p, &busy));
        assert!(most.score(&s, &p, &busy) > most.score(&s, &p, &idle));
    }

    #[test]
    fn ratio_shape_interpolates() {
        assert_eq!(broken_linear(&[(0, 0), (100, 100)], 30), 30);
        assert_eq!(broken_linear(&[(0, 100), (100, 0)], 25), 75);
    }
}
