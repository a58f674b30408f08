//! PrioritySort: the active queue serves higher `spec.priority` first, then the pod that
//! entered the queue earlier.

use crate::framework::{Plugin, PodInfo, QueueSort};

pub const NAME: &str = "PrioritySort";

pub struct PrioritySort;

impl Plugin for PrioritySort {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSort> {
        Some(self)
    }
}

impl QueueSort for PrioritySort {
    fn less(&self, a: &PodInfo, a_seq: u64, b: &PodInfo, b_seq: u64) -> bool {
        (a.priority, std::cmp::Reverse(a_seq)) > (b.priority, std::cmp::Reverse(b_seq))
    }
}
