//! TaintToleration: NoSchedule/NoExecute taints repel pods that do not tolerate them;
//! among feasible nodes, fewer untolerated PreferNoSchedule taints score higher.

use crate::framework::labels::{first_untolerated, tolerates};
use crate::framework::{
    CycleState, Filter, NodeInfo, Plugin, PodInfo, Rejection, Score, Status, default_normalize, events,
};

pub const NAME: &str = "TaintToleration";

pub struct TaintToleration;

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events(&self) -> u32 {
        events::NODE_ADD | events::NODE_TAINT
    }
    fn as_filter(&self) -> Option<&dyn Filter> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn Score> {
        Some(self)
    }
}

impl Filter for TaintToleration {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match first_untolerated(&node.taints, &pod.tolerations, &["NoSchedule", "NoExecute"]) {
            None => Ok(()),
            Some(t) => Err(Rejection::unresolvable(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                t.key,
                t.value.as_deref().unwrap_or("")
            ))),
        }
    }
}

impl Score for TaintToleration {
    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        // Only tolerations that can apply to PreferNoSchedule count here.
        node.taints
            .iter()
            .filter(|t| t.effect == "PreferNoSchedule")
            .filter(|t| {
                !pod.tolerations.iter().any(|tol| {
                    matches!(tol.effect.as_deref(), None | Some("") | Some("PreferNoSchedule"))
                        && tolerates(tol, t)
                })
            })
            .count() as i64
    }

    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) {
        default_normalize(scores, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{node_info, pod_info, with_taint, with_toleration};

    #[test]
    fn taints_repel_and_tolerations_admit() {
        let node =
            node_info(with_taint(crate::plugins::testing::node("n", "1", "1Gi"), "gpu", "yes", "NoSchedule"));
        let plain = pod_info(crate::plugins::testing::pod("p", "0", "0"));
        let err = TaintToleration.filter(&CycleState::default(), &plain, &node).unwrap_err();
        assert_eq!(err.reasons, vec!["node(s) had untolerated taint {gpu: yes}".to_string()]);
        let tolerant = pod_info(with_toleration(crate::plugins::testing::pod("p", "0", "0"), "gpu", "yes"));
        assert!(TaintToleration.filter(&CycleState::default(), &tolerant, &node).is_ok());
    }
}
