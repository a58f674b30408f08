//! NodeName: a pod that names its node (`spec.nodeName`) fits only that node. The queue
//! never holds such pods (they are bound already), so this matters for preemption's and
//! other callers' what-if checks, as upstream.

use crate::framework::{CycleState, Filter, NodeInfo, Plugin, PodInfo, Rejection, Status, events};

pub const NAME: &str = "NodeName";
pub const REASON: &str = "node(s) didn't match the requested node name";

pub struct NodeName;

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events(&self) -> u32 {
        events::NODE_ADD
    }
    fn as_filter(&self) -> Option<&dyn Filter> {
        Some(self)
    }
}

impl Filter for NodeName {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if pod.node_name.is_empty() || pod.node_name == node.name {
            Ok(())
        } else {
            Err(Rejection::unresolvable(REASON))
        }
    }
}
