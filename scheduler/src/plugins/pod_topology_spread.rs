//! PodTopologySpread: `topologySpreadConstraints` keep the number of matching pods per
//! topology domain within `maxSkew` of the emptiest domain (DoNotSchedule, a filter) or
//! prefer nodes in emptier domains (ScheduleAnyway, a score).
//!
//! Only nodes that pass the pod's node affinity/selector (nodeAffinityPolicy Honor, the
//! default) and, with nodeTaintsPolicy Honor, tolerate its taints count as domains.
//! A pod without constraints gets the cluster's default ones (`defaultingType: System`:
//! ScheduleAnyway over hostnames with maxSkew 3 and zones with maxSkew 5), selecting the
//! pods of the same Services, ReplicaSets, StatefulSets and ReplicationControllers.

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use serde::Deserialize;

use super::node_affinity::required_matches;
use crate::cache::Cache;
use crate::framework::labels::{Selector, first_untolerated};
use crate::framework::topology::TopologyCounts;
use crate::framework::{
    CycleState, Filter, MAX_NODE_SCORE, NodeInfo, Plugin, PodInfo, PreFilter, PreScore, Rejection, Score,
    Status, events,
};

pub const NAME: &str = "PodTopologySpread";
pub const REASON: &str = "node(s) didn't match pod topology spread constraints";
pub const MISSING_LABEL_REASON: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";
const HOSTNAME: &str = "kubernetes.io/hostname";

/// `PodTopologySpreadArgs`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    #[serde(default)]
    pub default_constraints: Vec<TopologySpreadConstraint>,
    /// `System` (the default) or `List`.
    #[serde(default)]
    pub defaulting_type: Option<String>,
}

pub struct PodTopologySpread {
    /// Applied to pods that have no constraints of their own.
    defaults: Vec<TopologySpreadConstraint>,
    /// The defaults are upstream's built-in ones (`defaultingType: System`).
    system_defaulted: bool,
}

impl PodTopologySpread {
    pub fn new(args: Args) -> Result<Self, String> {
        let system_defaulted = args.defaulting_type.as_deref().unwrap_or("System") == "System";
        let defaults = match args.defaulting_type.as_deref().unwrap_or("System") {
            "System" => {
                if !args.default_constraints.is_empty() {
                    return Err("defaultConstraints: must be empty with defaultingType System".into());
                }
                let soft = |key: &str, skew: i32| TopologySpreadConstraint {
                    max_skew: skew,
                    topology_key: key.to_owned(),
                    when_unsatisfiable: "ScheduleAnyway".into(),
                    ..TopologySpreadConstraint::default()
                };
                vec![soft(HOSTNAME, 3), soft("topology.kubernetes.io/zone", 5)]
            }
            "List" => {
                if args.default_constraints.iter().any(|c| c.label_selector.is_some()) {
                    return Err(
                        "defaultConstraints[*].labelSelector: must not be set (it is derived per pod)".into(),
                    );
                }
                args.default_constraints
            }
            other => {
                return Err(format!(
                    "defaultingType: Unsupported value: \"{other}\": supported values: \"System\", \"List\""
                ));
            }
        };
        Ok(Self { defaults, system_defaulted })
    }
}

#[derive(Clone, Debug)]
struct Constraint {
    max_skew: i64,
    key: String,
    selector: Selector,
    min_domains: i64,
    honor_affinity: bool,
    honor_taints: bool,
}

impl PodTopologySpread {
    /// The pod's constraints of one kind (`hard`: DoNotSchedule), or the defaults when it
    /// has none, selecting what the pod's Services and controllers select (no defaults
    /// when nothing selects the pod).
    fn constraints(&self, pod: &PodInfo, hard: bool, snapshot: &Cache) -> Vec<Constraint> {
        let spec = pod.pod.spec.as_ref();
        let own: &[TopologySpreadConstraint] =
            spec.and_then(|s| s.topology_spread_constraints.as_deref()).unwrap_or(&[]);
        if !own.is_empty() {
            return parse(pod, own, hard, None);
        }
        if self.defaults.is_empty() {
            return Vec::new();
        }
        match snapshot.default_selector(pod) {
            Some(selector) => parse(pod, &self.defaults, hard, Some(selector)),
            None => Vec::new(),
        }
    }
}

fn parse(
    pod: &PodInfo,
    list: &[TopologySpreadConstraint],
    hard: bool,
    default_selector: Option<Selector>,
) -> Vec<Constraint> {
    list.iter()
        .filter(|c| (c.when_unsatisfiable == "DoNotSchedule") == hard)
        .map(|c| {
            let mut selector = match &default_selector {
                Some(s) => s.clone(),
                None => Selector::from_label_selector(c.label_selector.as_ref()),
            };
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
    // An empty selector counts nothing, as upstream's countPodsMatchSelector.
    if c.selector.is_empty() {
        return 0;
    }
    node.pods
        .iter()
        .filter(|p| !p.terminating && p.namespace == pod.namespace && c.selector.matches(&p.labels))
        .count() as i64
}

#[derive(Clone, Default)]
struct FilterState {
    constraints: Vec<Constraint>,
    /// Matching pods per domain (domains of eligible nodes exist, possibly at 0).
    counts: TopologyCounts,
    /// Per constraint, the smallest count among its key's domains (0 when fewer than
    /// minDomains exist).
    min: Vec<i64>,
}

impl FilterState {
    fn recompute_min(&mut self) {
        self.min = self
            .constraints
            .iter()
            .map(|c| {
                let (n, min) =
                    self.counts.domains(&c.key).fold((0i64, i64::MAX), |(n, m), (_, c)| (n + 1, m.min(*c)));
                if n < c.min_domains { 0 } else { min }
            })
            .collect();
    }

    fn account(&mut self, pod: &PodInfo, other: &PodInfo, node: &NodeInfo, delta: i64) {
        if other.namespace != pod.namespace {
            return;
        }
        let mut changed = false;
        for c in &self.constraints {
            let Some(v) = node.labels.get(&c.key) else { continue };
            if c.selector.matches(&other.labels) {
                changed |= self.counts.add_existing(&c.key, v, delta);
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
        let constraints = self.constraints(pod, true, snapshot);
        let mut s = FilterState { constraints, ..FilterState::default() };
        if !s.constraints.is_empty() {
            for node in snapshot.nodes() {
                // A node counts only if it has every constraint's key.
                if !s.constraints.iter().all(|c| node.labels.contains_key(&c.key)) {
                    continue;
                }
                for c in &s.constraints {
                    if counts_node(c, pod, node) {
                        s.counts.add(&c.key, &node.labels[&c.key], matching_pods(c, pod, node));
                    }
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
        for (c, min) in s.constraints.iter().zip(&s.min) {
            let Some(count) = s.counts.for_node(&c.key, &node.labels) else {
                return Err(Rejection::unresolvable(MISSING_LABEL_REASON));
            };
            let self_match = i64::from(c.selector.matches(&pod.labels));
            if count + self_match - *min > c.max_skew {
                return Err(Rejection::unschedulable(REASON));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Default)]
struct ScoreState {
    constraints: Vec<Constraint>,
    counts: TopologyCounts,
    /// Per constraint, `ln(domains + 2)`: keys with more domains weigh more per pod.
    weights: Vec<f64>,
    /// Nodes lacking a constraint's key are ignored — except under the system defaults,
    /// where a cluster without zone labels still spreads over hostnames, as upstream.
    require_all: bool,
}

fn has_all(constraints: &[Constraint], node: &NodeInfo) -> bool {
    constraints.iter().all(|c| node.labels.contains_key(&c.key))
}

impl PreScore for PodTopologySpread {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, snapshot: &Cache, nodes: &[&NodeInfo]) {
        let constraints = self.constraints(pod, false, snapshot);
        if constraints.is_empty() {
            state.write(NAME, ScoreState::default());
            return;
        }
        let own = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_ref())
            .is_some_and(|c| !c.is_empty());
        let require_all = own || !self.system_defaulted;
        let value =
            |c: &Constraint, node: &NodeInfo| node.labels.get(&c.key).map_or("", String::as_str).to_owned();
        let mut domains: Vec<std::collections::HashSet<String>> = vec![Default::default(); constraints.len()];
        for node in nodes {
            if require_all && !has_all(&constraints, node) {
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                domains[i].insert(value(c, node));
            }
        }
        let weights = domains.iter().map(|d| ((d.len() + 2) as f64).ln()).collect();
        let mut counts = TopologyCounts::default();
        for node in snapshot.nodes() {
            if require_all && !has_all(&constraints, node) {
                continue;
            }
            for c in &constraints {
                // Per-node domains are counted directly at Score time.
                if c.key == HOSTNAME || !counts_node(c, pod, node) {
                    continue;
                }
                counts.add(&c.key, &value(c, node), matching_pods(c, pod, node));
            }
        }
        state.write(NAME, ScoreState { constraints, counts, weights, require_all });
    }
}

impl Score for PodTopologySpread {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let Some(s) = state.read::<ScoreState>(NAME) else { return 0 };
        if s.constraints.is_empty() {
            return 0;
        }
        if s.require_all && !has_all(&s.constraints, node) {
            // Marks the node as ignored for normalization.
            return -1;
        }
        let mut score = 0.0;
        for (c, weight) in s.constraints.iter().zip(&s.weights) {
            let Some(v) = node.labels.get(&c.key) else { continue };
            let count = if c.key == HOSTNAME { matching_pods(c, pod, node) } else { s.counts.get(&c.key, v) };
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

    fn plugin() -> PodTopologySpread {
        PodTopologySpread::new(Args::default()).unwrap()
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
        plugin().pre_filter(&mut state, &incoming, &cache).unwrap();
        let err = plugin().filter(&state, &incoming, cache.node("a1").unwrap()).unwrap_err();
        assert_eq!(err.reasons, vec![REASON.to_string()]);
        assert!(plugin().filter(&state, &incoming, cache.node("b1").unwrap()).is_ok());
        let err = plugin().filter(&state, &incoming, cache.node("nolabel").unwrap()).unwrap_err();
        assert_eq!(err.reasons, vec![MISSING_LABEL_REASON.to_string()]);
    }

    #[test]
    fn system_defaults_spread_a_replicasets_pods_over_hosts() {
        let mut cache = Cache::new();
        for n in ["n1", "n2"] {
            cache.add_or_update_node(Arc::new(labeled(node(n, "4", "8Gi"), HOSTNAME, n)));
        }
        cache.controllers.insert(
            "rs-uid".into(),
            Selector::from_label_selector(Some(
                &serde_json::from_value(serde_json::json!({"matchLabels": {"app": "web"}})).unwrap(),
            )),
        );
        let owned = |name: &str| {
            let mut p = pod(name, "0", "0");
            p.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
            p.metadata.owner_references = Some(vec![serde_json::from_value(serde_json::json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-uid", "controller": true
            })).unwrap()]);
            p
        };
        cache.add_or_update_pod(Arc::new(PodInfo::new(Arc::new(bound(owned("a"), "n1")))));
        let incoming = PodInfo::new(Arc::new(owned("b")));
        let plugin = plugin();
        let mut state = CycleState::default();
        let nodes: Vec<&NodeInfo> = cache.nodes().collect();
        plugin.pre_score(&mut state, &incoming, &cache, &nodes);
        let mut scores: Vec<i64> = nodes.iter().map(|n| plugin.score(&state, &incoming, n)).collect();
        plugin.normalize(&state, &incoming, &mut scores);
        let by_name: std::collections::HashMap<&str, i64> =
            nodes.iter().map(|n| n.name.as_str()).zip(scores).collect();
        assert!(by_name["n2"] > by_name["n1"], "{by_name:?}");
        // A pod nothing selects gets no default constraints.
        let loner = PodInfo::new(Arc::new(pod("c", "0", "0")));
        assert!(plugin.constraints(&loner, false, &cache).is_empty());
    }
}
