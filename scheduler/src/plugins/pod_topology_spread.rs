//! PodTopologySpread: `topologySpreadConstraints` keep the number of matching pods per
//! topology domain within `maxSkew` of the emptiest domain (DoNotSchedule, a filter) or
//! prefer nodes in emptier domains (ScheduleAnyway, a score).
//!
//! Only nodes that pass the pod's node affinity/selector (nodeAffinityPolicy Honor, the
//! default) and, with nodeTaintsPolicy Honor, tolerate its taints count as domains.
//! Cluster-level default constraints (for pods with none) are not applied: they need the
//! Services/ReplicaSets/StatefulSets selecting a pod, which this scheduler does not watch.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::TopologySpreadConstraint;

use super::node_affinity::required_matches;
use crate::cache::Cache;
use crate::framework::labels::{Selector, first_untolerated};
use crate::framework::{
    CycleState, Filter, MAX_NODE_SCORE, NodeInfo, Plugin, PodInfo, PreFilter, PreScore, Rejection, Score,
    Status, events,
};

pub const NAME: &str = "PodTopologySpread";
pub const REASON: &str = "node(s) didn't match pod topology spread constraints";
pub const MISSING_LABEL_REASON: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";
const HOSTNAME: &str = "kubernetes.io/hostname";

pub struct PodTopologySpread;

#[derive(Clone, Debug)]
struct Constraint {
    max_skew: i64,
    key: String,
    selector: Selector,
    min_domains: i64,
    honor_affinity: bool,
    honor_taints: bool,
}

fn constraints(pod: &PodInfo, hard: bool) -> Vec<Constraint> {
    let spec = pod.pod.spec.as_ref();
    let list: &[TopologySpreadConstraint] =
        spec.and_then(|s| s.topology_spread_constraints.as_deref()).unwrap_or(&[]);
    list.iter()
        .filter(|c| (c.when_unsatisfiable == "DoNotSchedule") == hard)
        .map(|c| {
            let mut selector = Selector::from_label_selector(c.label_selector.as_ref());
            for key in c.match_label_keys.iter().flatten() {
                if let Some(v) = pod.labels.get(key) {
                    selector.require(key, Some(v));
                }
            }
            Constraint {
                max_skew: i64::from(c.max_skew),
                key: c.topology_key.clone(),
                selector,
                min_domains: i64::from(c.min_domains.unwrap_or(1)),
                honor_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
                honor_taints: c.node_taints_policy.as_deref() == Some("Honor"),
            }
        })
        .collect()
}

fn counts_node(c: &Constraint, pod: &PodInfo, node: &NodeInfo) -> bool {
    (!c.honor_affinity || required_matches(pod, node))
        && (!c.honor_taints
            || first_untolerated(&node.taints, &pod.tolerations, &["NoSchedule", "NoExecute"]).is_none())
}

fn matching_pods(c: &Constraint, pod: &PodInfo, node: &NodeInfo) -> i64 {
    node.pods
        .iter()
        .filter(|p| !p.terminating && p.namespace == pod.namespace && c.selector.matches(&p.labels))
        .count() as i64
}

#[derive(Clone, Default)]
struct FilterState {
    constraints: Vec<Constraint>,
    /// (key, value) → matching pods in that domain.
    counts: HashMap<(String, String), i64>,
    /// key → smallest count among its domains (0 when fewer than minDomains exist).
    min: HashMap<String, i64>,
}

impl FilterState {
    fn recompute_min(&mut self) {
        self.min.clear();
        for c in &self.constraints {
            let domains: Vec<i64> =
                self.counts.iter().filter(|((k, _), _)| *k == c.key).map(|(_, n)| *n).collect();
            let min = if (domains.len() as i64) < c.min_domains {
                0
            } else {
                domains.into_iter().min().unwrap_or(0)
            };
            self.min.insert(c.key.clone(), min);
        }
    }

    fn account(&mut self, pod: &PodInfo, other: &PodInfo, node: &NodeInfo, delta: i64) {
        if other.namespace != pod.namespace {
            return;
        }
        let mut changed = false;
        for c in &self.constraints {
            let Some(v) = node.labels.get(&c.key) else { continue };
            if !c.selector.matches(&other.labels) {
                continue;
            }
            if let Some(n) = self.counts.get_mut(&(c.key.clone(), v.clone())) {
                *n += delta;
                changed = true;
            }
        }
        if changed {
            self.recompute_min();
        }
    }
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events(&self) -> u32 {
        events::ASSIGNED_POD_ADD
            | events::ASSIGNED_POD_UPDATE
            | events::ASSIGNED_POD_DELETE
            | events::NODE_ADD
            | events::NODE_LABEL
            | events::NODE_TAINT
            | events::NODE_DELETE
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilter> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn Filter> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScore> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn Score> {
        Some(self)
    }
}

impl PreFilter for PodTopologySpread {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snapshot: &Cache) -> Status {
        let constraints = constraints(pod, true);
        let mut s = FilterState { constraints, ..FilterState::default() };
        if !s.constraints.is_empty() {
            for node in snapshot.nodes() {
                // A node counts only if it has every constraint's key.
                if !s.constraints.iter().all(|c| node.labels.contains_key(&c.key)) {
                    continue;
                }
                for c in &s.constraints {
                    if !counts_node(c, pod, node) {
                        continue;
                    }
                    let value = node.labels[&c.key].clone();
                    *s.counts.entry((c.key.clone(), value)).or_default() += matching_pods(c, pod, node);
                }
            }
            s.recompute_min();
        }
        state.write(NAME, s);
        Ok(())
    }

    fn add_pod(&self, state: &mut CycleState, pod: &PodInfo, other: &PodInfo, node: &NodeInfo) {
        if let Some(s) = state.read_mut::<FilterState>(NAME) {
            s.account(pod, other, node, 1);
        }
    }

    fn remove_pod(&self, state: &mut CycleState, pod: &PodInfo, other: &PodInfo, node: &NodeInfo) {
        if let Some(s) = state.read_mut::<FilterState>(NAME) {
            s.account(pod, other, node, -1);
        }
    }
}

impl Filter for PodTopologySpread {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<FilterState>(NAME) else {
            return Err(Rejection::error("PodTopologySpread: PreFilter state missing"));
        };
        for c in &s.constraints {
            let Some(value) = node.labels.get(&c.key) else {
                return Err(Rejection::unresolvable(MISSING_LABEL_REASON));
            };
            let self_match = i64::from(c.selector.matches(&pod.labels));
            let count = s.counts.get(&(c.key.clone(), value.clone())).copied().unwrap_or(0);
            let min = s.min.get(&c.key).copied().unwrap_or(0);
            if count + self_match - min > c.max_skew {
                return Err(Rejection::unschedulable(REASON));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Default)]
struct ScoreState {
    constraints: Vec<Constraint>,
    counts: HashMap<(String, String), i64>,
    /// Per constraint, `ln(domains + 2)`: keys with more domains weigh more per pod.
    weights: Vec<f64>,
}

impl PreScore for PodTopologySpread {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, snapshot: &Cache, nodes: &[&NodeInfo]) {
        let constraints = constraints(pod, false);
        if constraints.is_empty() {
            state.write(NAME, ScoreState::default());
            return;
        }
        let mut domains: Vec<std::collections::HashSet<&String>> =
            vec![Default::default(); constraints.len()];
        for node in nodes {
            if constraints.iter().all(|c| node.labels.contains_key(&c.key)) {
                for (i, c) in constraints.iter().enumerate() {
                    domains[i].insert(&node.labels[&c.key]);
                }
            }
        }
        let weights = domains.iter().map(|d| ((d.len() + 2) as f64).ln()).collect();
        let mut counts = HashMap::new();
        for node in snapshot.nodes() {
            if !constraints.iter().all(|c| node.labels.contains_key(&c.key)) {
                continue;
            }
            for c in &constraints {
                // Per-node domains are counted directly at Score time.
                if c.key == HOSTNAME || !counts_node(c, pod, node) {
                    continue;
                }
                let value = node.labels[&c.key].clone();
                *counts.entry((c.key.clone(), value)).or_default() += matching_pods(c, pod, node);
            }
        }
        state.write(NAME, ScoreState { constraints, counts, weights });
    }
}

impl Score for PodTopologySpread {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let Some(s) = state.read::<ScoreState>(NAME) else { return 0 };
        if s.constraints.is_empty() {
            return 0;
        }
        if !s.constraints.iter().all(|c| node.labels.contains_key(&c.key)) {
            // Marks the node as ignored for normalization.
            return -1;
        }
        let mut score = 0.0;
        for (c, weight) in s.constraints.iter().zip(&s.weights) {
            let count = if c.key == HOSTNAME {
                matching_pods(c, pod, node)
            } else {
                s.counts.get(&(c.key.clone(), node.labels[&c.key].clone())).copied().unwrap_or(0)
            };
            score += count as f64 * weight + (c.max_skew - 1) as f64;
        }
        score.round() as i64
    }

    fn normalize(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) {
        if state.read::<ScoreState>(NAME).is_none_or(|s| s.constraints.is_empty()) {
            return;
        }
        let counted = scores.iter().copied().filter(|s| *s >= 0);
        let (min, max) = counted.fold((i64::MAX, i64::MIN), |(lo, hi), s| (lo.min(s), hi.max(s)));
        for s in scores.iter_mut() {
            *s = if *s < 0 {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - *s) / max
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::plugins::testing::{bound, labeled, node, pod};

    fn spread_pod(name: &str) -> k8s_openapi::api::core::v1::Pod {
        let mut p = pod(name, "0", "0");
        p.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
        p.spec.as_mut().unwrap().topology_spread_constraints = Some(vec![
            serde_json::from_value(serde_json::json!({
                "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}}
            }))
            .unwrap(),
        ]);
        p
    }

    #[test]
    fn skew_is_bounded() {
        let mut cache = Cache::new();
        cache.add_or_update_node(Arc::new(labeled(node("a1", "4", "8Gi"), "zone", "a")));
        cache.add_or_update_node(Arc::new(labeled(node("b1", "4", "8Gi"), "zone", "b")));
        cache.add_or_update_node(Arc::new(node("nolabel", "4", "8Gi")));
        cache.add_or_update_pod(Arc::new(PodInfo::new(Arc::new(bound(spread_pod("p1"), "a1")))));
        let incoming = PodInfo::new(Arc::new(spread_pod("p2")));
        let mut state = CycleState::default();
        PodTopologySpread.pre_filter(&mut state, &incoming, &cache).unwrap();
        let err = PodTopologySpread.filter(&state, &incoming, cache.node("a1").unwrap()).unwrap_err();
        assert_eq!(err.reasons, vec![REASON.to_string()]);
        assert!(PodTopologySpread.filter(&state, &incoming, cache.node("b1").unwrap()).is_ok());
        let err = PodTopologySpread.filter(&state, &incoming, cache.node("nolabel").unwrap()).unwrap_err();
        assert_eq!(err.reasons, vec![MISSING_LABEL_REASON.to_string()]);
    }
}
