//! InterPodAffinity: required pod affinity and anti-affinity (the incoming pod's terms
//! and, symmetrically, existing pods' anti-affinity towards it), and preferred terms as a
//! score, all over topology domains (`topologyKey` label values).

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;

use crate::cache::Cache;
use crate::framework::labels::Labels;
use crate::framework::topology::TopologyCounts;
use crate::framework::types::AffinityTerm;
use crate::framework::{
    CycleState, Filter, MAX_NODE_SCORE, NodeInfo, Plugin, PodInfo, PreFilter, PreScore, Rejection, Score,
    Status, events,
};

pub const NAME: &str = "InterPodAffinity";
pub const AFFINITY_REASON: &str = "node(s) didn't match pod affinity rules";
pub const ANTI_AFFINITY_REASON: &str = "node(s) didn't match pod anti-affinity rules";
pub const EXISTING_ANTI_AFFINITY_REASON: &str = "node(s) didn't satisfy existing pods anti-affinity rules";

/// `InterPodAffinityArgs`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    #[serde(default = "default_hard_weight")]
    pub hard_pod_affinity_weight: i64,
    #[serde(default)]
    pub ignore_preferred_terms_of_existing_pods: bool,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            hard_pod_affinity_weight: default_hard_weight(),
            ignore_preferred_terms_of_existing_pods: false,
        }
    }
}

fn default_hard_weight() -> i64 {
    1
}

pub struct InterPodAffinity {
    args: Args,
}

impl InterPodAffinity {
    pub fn new(args: Args) -> Result<Self, String> {
        if !(0..=100).contains(&args.hard_pod_affinity_weight) {
            return Err(format!(
                "hardPodAffinityWeight: {} must be in 0..=100",
                args.hard_pod_affinity_weight
            ));
        }
        Ok(Self { args })
    }
}

#[derive(Clone, Default)]
struct FilterState {
    /// Domains where an existing pod's required anti-affinity forbids the incoming pod.
    existing_anti: TopologyCounts,
    /// Domains with pods matching all the incoming pod's required affinity terms.
    affinity: TopologyCounts,
    /// Domains with pods matching one of the incoming pod's required anti-affinity terms.
    anti: TopologyCounts,
    namespaces: Arc<HashMap<String, Labels>>,
}

#[derive(Clone, Default)]
struct ScoreState {
    /// Accumulated score per domain.
    topology: TopologyCounts,
}

fn matches_all(terms: &[AffinityTerm], pod: &PodInfo, ns: &HashMap<String, Labels>) -> bool {
    !terms.is_empty() && terms.iter().all(|t| t.matches(pod, ns))
}

impl FilterState {
    /// Counts (`delta` = +1 or −1) what `existing` on `node` contributes.
    fn account(&mut self, pod: &PodInfo, existing: &PodInfo, node: &NodeInfo, delta: i64) {
        let bump = |counts: &mut TopologyCounts, key: &str| {
            if let Some(v) = node.labels.get(key) {
                counts.add(key, v, delta);
            }
        };
        for t in &existing.required_anti_affinity {
            if t.matches(pod, &self.namespaces) {
                bump(&mut self.existing_anti, &t.topology_key);
            }
        }
        if matches_all(&pod.required_affinity, existing, &self.namespaces) {
            for t in &pod.required_affinity {
                bump(&mut self.affinity, &t.topology_key);
            }
        }
        for t in &pod.required_anti_affinity {
            if t.matches(existing, &self.namespaces) {
                bump(&mut self.anti, &t.topology_key);
            }
        }
    }
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events(&self) -> u32 {
        events::ASSIGNED_POD_ADD
            | events::ASSIGNED_POD_UPDATE
            | events::ASSIGNED_POD_DELETE
            | events::NODE_ADD
            | events::NODE_LABEL
            | events::NAMESPACE
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

impl PreFilter for InterPodAffinity {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snapshot: &Cache) -> Status {
        let mut s = FilterState { namespaces: snapshot.namespaces.clone(), ..FilterState::default() };
        let incoming_terms = !pod.required_affinity.is_empty() || !pod.required_anti_affinity.is_empty();
        for node in snapshot.nodes() {
            if !incoming_terms && node.pods_with_required_anti_affinity == 0 {
                continue;
            }
            for existing in &node.pods {
                if incoming_terms || !existing.required_anti_affinity.is_empty() {
                    s.account(pod, existing, node, 1);
                }
            }
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

impl Filter for InterPodAffinity {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<FilterState>(NAME) else {
            return Err(Rejection::error("InterPodAffinity: PreFilter state missing"));
        };
        // Affinity first: every term's topology must exist on the node and hold a match,
        // unless no pod anywhere matches and the pod matches its own terms (the first pod
        // of a group that wants to be together).
        if !pod.required_affinity.is_empty() {
            let mut all_exist = true;
            for t in &pod.required_affinity {
                match s.affinity.for_node(&t.topology_key, &node.labels) {
                    None => return Err(Rejection::unresolvable(AFFINITY_REASON)),
                    Some(n) => all_exist &= n > 0,
                }
            }
            let first_of_group =
                !s.affinity.any_positive() && matches_all(&pod.required_affinity, pod, &s.namespaces);
            if !(all_exist || first_of_group) {
                return Err(Rejection::unresolvable(AFFINITY_REASON));
            }
        }
        if pod
            .required_anti_affinity
            .iter()
            .any(|t| s.anti.for_node(&t.topology_key, &node.labels).is_some_and(|n| n > 0))
        {
            return Err(Rejection::unschedulable(ANTI_AFFINITY_REASON));
        }
        if s.existing_anti.node_in_positive(&node.labels) {
            return Err(Rejection::unschedulable(EXISTING_ANTI_AFFINITY_REASON));
        }
        Ok(())
    }
}

impl PreScore for InterPodAffinity {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, snapshot: &Cache, _nodes: &[&NodeInfo]) {
        let incoming = !pod.preferred_affinity.is_empty() || !pod.preferred_anti_affinity.is_empty();
        let mut s = ScoreState::default();
        // The option skips scoring altogether for pods without preferred terms; a pod with
        // some still sees existing pods' terms, as upstream.
        if self.args.ignore_preferred_terms_of_existing_pods && !incoming {
            state.write(NAME, s);
            return;
        }
        let ns = &snapshot.namespaces;
        let mut add = |key: &str, node: &NodeInfo, weight: i64| {
            if let Some(v) = node.labels.get(key) {
                s.topology.add(key, v, weight);
            }
        };
        for node in snapshot.nodes() {
            if !incoming && node.pods_with_affinity == 0 {
                continue;
            }
            for existing in &node.pods {
                for t in &pod.preferred_affinity {
                    if t.matches(existing, ns) {
                        add(&t.topology_key, node, i64::from(t.weight));
                    }
                }
                for t in &pod.preferred_anti_affinity {
                    if t.matches(existing, ns) {
                        add(&t.topology_key, node, -i64::from(t.weight));
                    }
                }
                if !existing.has_affinity() {
                    continue;
                }
                if self.args.hard_pod_affinity_weight > 0 {
                    for t in &existing.required_affinity {
                        if t.matches(pod, ns) {
                            add(&t.topology_key, node, self.args.hard_pod_affinity_weight);
                        }
                    }
                }
                for t in &existing.preferred_affinity {
                    if t.matches(pod, ns) {
                        add(&t.topology_key, node, i64::from(t.weight));
                    }
                }
                for t in &existing.preferred_anti_affinity {
                    if t.matches(pod, ns) {
                        add(&t.topology_key, node, -i64::from(t.weight));
                    }
                }
            }
        }
        state.write(NAME, s);
    }
}

impl Score for InterPodAffinity {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> i64 {
        let Some(s) = state.read::<ScoreState>(NAME) else { return 0 };
        s.topology.node_sum(&node.labels)
    }

    fn normalize(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) {
        if state.read::<ScoreState>(NAME).is_none_or(|s| s.topology.is_empty()) {
            return;
        }
        let max = scores.iter().copied().max().unwrap_or(0);
        let min = scores.iter().copied().min().unwrap_or(0);
        let diff = max - min;
        for s in scores.iter_mut() {
            *s = if diff > 0 { MAX_NODE_SCORE * (*s - min) / diff } else { 0 };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{bound, labeled, node, pod, with_anti_affinity};

    #[test]
    fn anti_affinity_keeps_replicas_apart() {
        let mut cache = Cache::new();
        cache.add_or_update_node(Arc::new(labeled(node("n1", "4", "8Gi"), "kubernetes.io/hostname", "n1")));
        cache.add_or_update_node(Arc::new(labeled(node("n2", "4", "8Gi"), "kubernetes.io/hostname", "n2")));
        let first = with_anti_affinity(labeled_pod("a", "web"), "app", "web", "kubernetes.io/hostname");
        cache.add_or_update_pod(Arc::new(PodInfo::new(Arc::new(bound(first, "n1")))));
        let second = PodInfo::new(Arc::new(with_anti_affinity(
            labeled_pod("b", "web"),
            "app",
            "web",
            "kubernetes.io/hostname",
        )));
        let plugin = InterPodAffinity::new(Args::default()).unwrap();
        let mut state = CycleState::default();
        plugin.pre_filter(&mut state, &second, &cache).unwrap();
        let on_n1 = plugin.filter(&state, &second, cache.node("n1").unwrap()).unwrap_err();
        assert_eq!(on_n1.reasons, vec![ANTI_AFFINITY_REASON.to_string()]);
        assert!(plugin.filter(&state, &second, cache.node("n2").unwrap()).is_ok());
        // A pod without terms is still kept off n1 by the existing pod's anti-affinity.
        let plain = PodInfo::new(Arc::new(labeled_pod("c", "web")));
        let mut state = CycleState::default();
        plugin.pre_filter(&mut state, &plain, &cache).unwrap();
        let err = plugin.filter(&state, &plain, cache.node("n1").unwrap()).unwrap_err();
        assert_eq!(err.reasons, vec![EXISTING_ANTI_AFFINITY_REASON.to_string()]);
    }

    fn labeled_pod(name: &str, app: &str) -> k8s_openapi::api::core::v1::Pod {
        let mut p = pod(name, "0", "0");
        p.metadata.labels = Some([("app".to_string(), app.to_string())].into());
        p
    }
}
