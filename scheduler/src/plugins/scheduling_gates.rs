//! SchedulingGates: a pod with `spec.schedulingGates` waits outside the active queue until
//! every gate is removed.

use crate::framework::{Plugin, PodInfo, PreEnqueue, Rejection, Status};

pub const NAME: &str = "SchedulingGates";

pub struct SchedulingGates;

impl Plugin for SchedulingGates {
    fn name(&self) -> &'static str {
        NAME
    }
    // Only an update of the pod itself lifts a gate; the queue re-runs PreEnqueue then.
    fn events(&self) -> u32 {
        0
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueue> {
        Some(self)
    }
}

impl PreEnqueue for SchedulingGates {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        if pod.scheduling_gates.is_empty() {
            return Ok(());
        }
        Err(Rejection::unresolvable(format!(
            "waiting for scheduling gates: [{}]",
            pod.scheduling_gates.join(" ")
        )))
    }
}
