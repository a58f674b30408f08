//! NodeUnschedulable: cordoned nodes (`spec.unschedulable`) take only pods that tolerate
//! the `node.kubernetes.io/unschedulable:NoSchedule` taint.

use k8s_openapi::api::core::v1::Taint;

use crate::framework::labels::tolerates;
use crate::framework::{CycleState, Filter, NodeInfo, Plugin, PodInfo, Rejection, Status, events};

pub const NAME: &str = "NodeUnschedulable";
pub const REASON: &str = "node(s) were unschedulable";

pub struct NodeUnschedulable;

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events(&self) -> u32 {
        events::NODE_ADD | events::NODE_TAINT
    }
    fn as_filter(&self) -> Option<&dyn Filter> {
        Some(self)
    }
}

impl Filter for NodeUnschedulable {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !node.unschedulable {
            return Ok(());
        }
        let taint = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        };
        if pod.tolerations.iter().any(|t| tolerates(t, &taint)) {
            return Ok(());
        }
        Err(Rejection::unresolvable(REASON))
    }
}
