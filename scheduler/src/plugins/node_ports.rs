//! NodePorts: a pod asking for a host port fits only nodes where no placed pod holds the
//! same port and protocol on an overlapping host IP.

use crate::framework::{CycleState, Filter, NodeInfo, Plugin, PodInfo, Rejection, Status, events};

pub const NAME: &str = "NodePorts";
pub const REASON: &str = "node(s) didn't have free ports for the requested pod ports";

pub struct NodePorts;

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events(&self) -> u32 {
        events::NODE_ADD | events::ASSIGNED_POD_DELETE
    }
    fn as_filter(&self) -> Option<&dyn Filter> {
        Some(self)
    }
}

impl Filter for NodePorts {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let taken = pod.host_ports.iter().any(|want| node.used_ports.iter().any(|used| used.conflicts(want)));
        if taken { Err(Rejection::unschedulable(REASON)) } else { Ok(()) }
    }
}
