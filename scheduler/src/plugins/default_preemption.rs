//! DefaultPreemption: when no node fits, find a node where evicting lower-priority pods
//! would make room, evicting as few and as unimportant pods as possible and, above all,
//! as few as possible that a PodDisruptionBudget protects. The pod is then nominated to
//! that node (`status.nominatedNodeName`) and waits there for the victims to go.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Deserialize;

use crate::cache::Cache;
use crate::framework::labels::Selector;
use crate::framework::runtime::Profile;
use crate::framework::{
    Code, CycleState, NodeInfo, Plugin, PodInfo, PostFilter, PostFilterResult, Rejection,
};

pub const NAME: &str = "DefaultPreemption";

/// `DefaultPreemptionArgs`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    #[serde(default = "ten")]
    pub min_candidate_nodes_percentage: i64,
    #[serde(default = "hundred")]
    pub min_candidate_nodes_absolute: i64,
}

fn ten() -> i64 {
    10
}
fn hundred() -> i64 {
    100
}

impl Default for Args {
    fn default() -> Self {
        Self { min_candidate_nodes_percentage: 10, min_candidate_nodes_absolute: 100 }
    }
}

pub struct DefaultPreemption {
    args: Args,
}

impl DefaultPreemption {
    pub fn new(args: Args) -> Result<Self, String> {
        if !(0..=100).contains(&args.min_candidate_nodes_percentage) || args.min_candidate_nodes_absolute < 0
        {
            return Err(
                "minCandidateNodesPercentage must be in 0..=100 and minCandidateNodesAbsolute >= 0".into()
            );
        }
        Ok(Self { args })
    }
}

struct Candidate {
    node: String,
    /// Highest priority first.
    victims: Vec<Arc<PodInfo>>,
    pdb_violations: usize,
}

/// One budget's remaining allowance while victims are chosen.
struct Budget {
    namespace: String,
    selector: Selector,
    allowed: i64,
    disrupted: Vec<String>,
}

fn budgets(snapshot: &Cache) -> Vec<Budget> {
    snapshot
        .pdbs
        .values()
        .map(|pdb| {
            let spec = pdb.spec.clone().unwrap_or_default();
            // A budget with no (or an empty) selector protects nothing, as upstream.
            let selector = match spec.selector.as_ref() {
                Some(s)
                    if s.match_labels.as_ref().is_some_and(|m| !m.is_empty())
                        || s.match_expressions.as_ref().is_some_and(|m| !m.is_empty()) =>
                {
                    Selector::from_label_selector(Some(s))
                }
                _ => Selector::nothing(),
            };
            let status = pdb.status.clone().unwrap_or_default();
            Budget {
                namespace: pdb.metadata.namespace.clone().unwrap_or_default(),
                selector,
                allowed: i64::from(status.disruptions_allowed),
                disrupted: status.disrupted_pods.unwrap_or_default().into_keys().collect(),
            }
        })
        .collect()
}

/// Splits pods (most important first) into those whose eviction would exceed a budget and
/// those that would not, charging each budget as it goes.
fn split_by_budget(
    pods: Vec<Arc<PodInfo>>,
    mut budgets: Vec<Budget>,
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let (mut violating, mut ok) = (Vec::new(), Vec::new());
    for p in pods {
        let mut violates = false;
        for b in budgets.iter_mut() {
            if b.namespace != p.namespace || !b.selector.matches(&p.labels) || b.disrupted.contains(&p.name) {
                continue;
            }
            b.allowed -= 1;
            violates |= b.allowed < 0;
        }
        if violates { violating.push(p) } else { ok.push(p) }
    }
    (violating, ok)
}

impl DefaultPreemption {
    fn select_victims(
        &self,
        profile: &Profile,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        snapshot: &Cache,
    ) -> Result<Candidate, Rejection> {
        let mut node = node.clone();
        let mut state = state.clone();
        let mut lower: Vec<Arc<PodInfo>> =
            node.pods.iter().filter(|p| p.priority < pod.priority).cloned().collect();
        if lower.is_empty() {
            return Err(Rejection::unresolvable("No preemption victims found for incoming pod"));
        }
        for p in &lower {
            node.remove_pod(&p.uid);
            profile.remove_pod_from_state(&mut state, pod, p, &node);
        }
        profile.run_filter_with_nominated(&state, pod, &node, snapshot)?;
        // Most important first: higher priority, then the one running longer.
        lower.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.start_time.cmp(&b.start_time)));
        let (violating, ok) = split_by_budget(lower, budgets(snapshot));
        let mut victims = Vec::new();
        let mut pdb_violations = 0;
        let mut reprieve = |p: Arc<PodInfo>, violates: bool, node: &mut NodeInfo, state: &mut CycleState| {
            node.add_pod(p.clone());
            profile.add_pod_to_state(state, pod, &p, node);
            if profile.run_filter_with_nominated(state, pod, node, snapshot).is_err() {
                node.remove_pod(&p.uid);
                profile.remove_pod_from_state(state, pod, &p, node);
                pdb_violations += usize::from(violates);
                victims.push(p);
            }
        };
        for p in violating {
            reprieve(p, true, &mut node, &mut state);
        }
        for p in ok {
            reprieve(p, false, &mut node, &mut state);
        }
        victims.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.start_time.cmp(&b.start_time)));
        Ok(Candidate { node: node.name.clone(), victims, pdb_violations })
    }
}

/// Upstream's `pickOneNodeForPreemption` order: fewest budget violations, then the lowest
/// highest-priority victim, the lowest priority sum, the fewest victims, and the latest
/// start among the most important victims.
fn pick(candidates: Vec<Candidate>) -> Option<Candidate> {
    candidates.into_iter().min_by(|a, b| {
        let key = |c: &Candidate| {
            let highest = c.victims.first().map_or(i64::MIN, |v| i64::from(v.priority));
            let sum: i64 = c.victims.iter().map(|v| i64::from(v.priority) + (1 << 31)).sum();
            let earliest_important = c
                .victims
                .iter()
                .filter(|v| i64::from(v.priority) == highest)
                .map(|v| v.start_time)
                .min()
                .unwrap_or(0);
            (c.pdb_violations, highest, sum, c.victims.len(), std::cmp::Reverse(earliest_important))
        };
        key(a).cmp(&key(b))
    })
}

/// Whether the pod carries the DisruptionTarget condition a scheduler's preemption sets.
fn preempted_by_scheduler(p: &PodInfo) -> bool {
    let conditions = p.pod.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
    conditions.iter().any(|c| {
        c.type_ == "DisruptionTarget"
            && c.status == "True"
            && c.reason.as_deref() == Some("PreemptionByScheduler")
    })
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilter> {
        Some(self)
    }
}

impl PostFilter for DefaultPreemption {
    fn post_filter(
        &self,
        profile: &Profile,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Cache,
        rejections: &HashMap<String, Rejection>,
    ) -> PostFilterResult {
        let total = snapshot.node_count();
        let policy = pod.pod.spec.as_ref().and_then(|s| s.preemption_policy.as_deref());
        if policy == Some("Never") {
            return PostFilterResult {
                message: "not eligible due to preemptionPolicy=Never.".into(),
                ..Default::default()
            };
        }
        // The cache knows a nomination made moments ago, before the pod's status shows it.
        let nominated = snapshot.nominated_node(&pod.uid).unwrap_or(&pod.nominated_node_name);
        if !nominated.is_empty()
            && let Some(n) = snapshot.node(nominated)
            && n.pods.iter().any(|p| p.terminating && p.priority < pod.priority && preempted_by_scheduler(p))
        {
            return PostFilterResult {
                message: "not eligible due to a terminating pod on the nominated node.".into(),
                ..Default::default()
            };
        }
        let potential: Vec<&NodeInfo> = snapshot
            .nodes()
            .filter(|n| rejections.get(&n.name).is_some_and(|r| r.code == Code::Unschedulable))
            .collect();
        let unhelpful = total - potential.len();
        if potential.is_empty() {
            return PostFilterResult {
                message: format!(
                    "0/{total} nodes are available: {total} Preemption is not helpful for scheduling."
                ),
                ..Default::default()
            };
        }
        let wanted = ((potential.len() as i64 * self.args.min_candidate_nodes_percentage / 100)
            .max(self.args.min_candidate_nodes_absolute) as usize)
            .clamp(1, potential.len());
        let offset = rand::random_range(0..potential.len());
        let mut candidates = Vec::new();
        // Why each examined node is no candidate, for the message when none is.
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        for i in 0..potential.len() {
            let node = potential[(offset + i) % potential.len()];
            match self.select_victims(profile, state, pod, node, snapshot) {
                // Room without evicting anyone means Filter and preemption disagree.
                Ok(c) if c.victims.is_empty() => {
                    let reason = format!("expected at least one victim pod on node {:?}", c.node);
                    *reasons.entry(reason).or_default() += 1;
                }
                Ok(c) => {
                    candidates.push(c);
                    // As upstream: enough candidates, and at least one that violates no
                    // budget, if one exists among the nodes examined so far.
                    let safe = candidates.iter().any(|c| c.pdb_violations == 0);
                    if candidates.len() >= wanted && safe {
                        break;
                    }
                }
                Err(r) => {
                    for reason in r.reasons {
                        *reasons.entry(reason).or_default() += 1;
                    }
                }
            }
        }
        let found = candidates.len();
        let Some(best) = pick(candidates) else {
            if unhelpful > 0 {
                *reasons.entry("Preemption is not helpful for scheduling".into()).or_default() += unhelpful;
            }
            let mut parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
            parts.sort();
            return PostFilterResult {
                message: format!("0/{total} nodes are available: {}.", parts.join(", ")),
                ..Default::default()
            };
        };
        tracing::debug!(pod = %pod.key, node = %best.node, victims = best.victims.len(), candidates = found, "preemption");
        let clear_nominations = snapshot
            .nominated_pods(&best.node)
            .iter()
            .filter(|p| p.priority < pod.priority && p.uid != pod.uid)
            .cloned()
            .collect();
        PostFilterResult {
            nominated_node: Some(best.node),
            victims: best.victims,
            clear_nominations,
            message: String::new(),
        }
    }
}
