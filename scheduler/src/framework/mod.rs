//! The scheduling framework: upstream's extension points as traits, the per-cycle state
//! plugins share, and [`runtime::Profile`], which runs a profile's plugins in order.
//!
//! A plugin implements [`Plugin`] (its name and the cluster events that may make a pod it
//! rejected schedulable again) and hands out the extension points it takes part in
//! through the `as_*` methods; the scheduler never needs to know concrete plugin types.

pub use component_base::labels;
pub use component_base::quantity;
pub mod runtime;
pub mod topology;
pub mod types;

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::cache::Cache;
pub use types::{NodeInfo, PodInfo, Resource};

/// Highest score a Score plugin gives a node (after normalization).
pub const MAX_NODE_SCORE: i64 = 100;

/// Cluster events, as a bit set, that can turn a rejection into a fit: the queue moves a
/// pod out of the unschedulable pool only for an event one of its rejecting plugins
/// registered (upstream's `EventsToRegister`).
pub mod events {
    pub const NODE_ADD: u32 = 1 << 0;
    pub const NODE_LABEL: u32 = 1 << 1;
    pub const NODE_TAINT: u32 = 1 << 2;
    pub const NODE_ALLOCATABLE: u32 = 1 << 3;
    /// Anything else about a node: conditions, images, addresses.
    pub const NODE_OTHER: u32 = 1 << 4;
    pub const NODE_DELETE: u32 = 1 << 5;
    /// A pod was bound to a node (or the cache learned of one).
    pub const ASSIGNED_POD_ADD: u32 = 1 << 6;
    /// A bound pod's labels changed.
    pub const ASSIGNED_POD_UPDATE: u32 = 1 << 7;
    pub const ASSIGNED_POD_DELETE: u32 = 1 << 8;
    pub const PVC: u32 = 1 << 9;
    pub const PV: u32 = 1 << 10;
    pub const NAMESPACE: u32 = 1 << 11;
    pub const STORAGE_CLASS: u32 = 1 << 12;
    pub const ALL: u32 = u32::MAX;
    /// Any change to a node.
    pub const NODE_ANY: u32 = NODE_ADD | NODE_LABEL | NODE_TAINT | NODE_ALLOCATABLE | NODE_OTHER;
}

/// How a plugin turned a pod away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Does not fit now; preemption may help.
    Unschedulable,
    /// Does not fit and evicting pods would not change that (missing label, node name).
    UnschedulableAndUnresolvable,
    /// Something went wrong; retried with backoff.
    Error,
}

/// A plugin's "no", with the reasons shown to users (`Insufficient cpu`).
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub code: Code,
    pub reasons: Vec<String>,
    /// Filled in by the framework with the rejecting plugin's name.
    pub plugin: &'static str,
}

impl Rejection {
    pub fn unschedulable(reason: impl Into<String>) -> Self {
        Self { code: Code::Unschedulable, reasons: vec![reason.into()], plugin: "" }
    }

    pub fn unresolvable(reason: impl Into<String>) -> Self {
        Self { code: Code::UnschedulableAndUnresolvable, reasons: vec![reason.into()], plugin: "" }
    }

    pub fn error(reason: impl Into<String>) -> Self {
        Self { code: Code::Error, reasons: vec![reason.into()], plugin: "" }
    }

    pub fn by(mut self, plugin: &'static str) -> Self {
        if self.plugin.is_empty() {
            self.plugin = plugin;
        }
        self
    }
}

/// Filter/score results of one plugin for one pod.
pub type Status = Result<(), Rejection>;

/// Data a plugin computes once per cycle (in PreFilter or PreScore) for its per-node
/// calls. Cloneable, because preemption tries victims on copies.
pub trait StateData: Any + Send + Sync {
    fn clone_box(&self) -> Box<dyn StateData>;
}

impl<T: Any + Clone + Send + Sync> StateData for T {
    fn clone_box(&self) -> Box<dyn StateData> {
        Box::new(self.clone())
    }
}

/// Per-pod, per-cycle state keyed by plugin.
#[derive(Default)]
pub struct CycleState {
    data: HashMap<&'static str, Box<dyn StateData>>,
}

impl Clone for CycleState {
    fn clone(&self) -> Self {
        Self { data: self.data.iter().map(|(k, v)| (*k, (**v).clone_box())).collect() }
    }
}

impl CycleState {
    pub fn write<T: StateData>(&mut self, key: &'static str, value: T) {
        self.data.insert(key, Box::new(value));
    }

    pub fn read<T: 'static>(&self, key: &'static str) -> Option<&T> {
        self.data.get(key).and_then(|b| (&**b as &dyn Any).downcast_ref::<T>())
    }

    pub fn read_mut<T: 'static>(&mut self, key: &'static str) -> Option<&mut T> {
        self.data.get_mut(key).and_then(|b| (&mut **b as &mut dyn Any).downcast_mut::<T>())
    }
}

/// Every plugin: a name, the events it cares about, and its extension points.
pub trait Plugin: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    /// Events after which a pod this plugin rejected may fit.
    fn events(&self) -> u32 {
        events::ALL
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSort> {
        None
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueue> {
        None
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilter> {
        None
    }
    fn as_filter(&self) -> Option<&dyn Filter> {
        None
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilter> {
        None
    }
    fn as_pre_score(&self) -> Option<&dyn PreScore> {
        None
    }
    fn as_score(&self) -> Option<&dyn Score> {
        None
    }
    fn as_reserve(&self) -> Option<&dyn Reserve> {
        None
    }
    fn as_permit(&self) -> Option<&dyn Permit> {
        None
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBind> {
        None
    }
    fn as_bind(&self) -> Option<&dyn Bind> {
        None
    }
    fn as_post_bind(&self) -> Option<&dyn PostBind> {
        None
    }
}

/// Orders the active queue: `less(a, b)` when `a` should be tried first.
pub trait QueueSort {
    fn less(&self, a: &PodInfo, a_seq: u64, b: &PodInfo, b_seq: u64) -> bool;
}

/// Decides whether a pod may enter the active queue at all (scheduling gates).
pub trait PreEnqueue {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status;
}

/// Runs once per cycle before any Filter: computes state, or rejects the pod outright.
pub trait PreFilter {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snapshot: &Cache) -> Status;
    /// Updates this plugin's state as if `other` were added to `node` (preemption and
    /// nominated pods evaluate "what if" placements without rebuilding the state).
    fn add_pod(&self, _state: &mut CycleState, _pod: &PodInfo, _other: &PodInfo, _node: &NodeInfo) {}
    /// The reverse of [`PreFilter::add_pod`].
    fn remove_pod(&self, _state: &mut CycleState, _pod: &PodInfo, _other: &PodInfo, _node: &NodeInfo) {}
}

/// Whether a pod can run on one node. Called concurrently for many nodes.
pub trait Filter: Send + Sync {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;
}

/// What a PostFilter (preemption) decided.
#[derive(Debug, Default)]
pub struct PostFilterResult {
    /// The node the pod is nominated to once its victims are gone.
    pub nominated_node: Option<String>,
    /// Pods to delete to make room.
    pub victims: Vec<Arc<PodInfo>>,
    /// Lower-priority pods nominated to that node whose nomination must be cleared.
    pub clear_nominations: Vec<Arc<PodInfo>>,
    /// Explanation for the FailedScheduling message when nothing could be done.
    pub message: String,
}

/// Runs when no node fits (preemption).
pub trait PostFilter {
    fn post_filter(
        &self,
        profile: &runtime::Profile,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Cache,
        rejections: &HashMap<String, Rejection>,
    ) -> PostFilterResult;
}

/// Runs once before scoring with the feasible nodes.
pub trait PreScore {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, snapshot: &Cache, nodes: &[&NodeInfo]);
}

/// Ranks feasible nodes, 0..=100 after normalization.
pub trait Score: Send + Sync {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64;
    /// Rescales raw scores of all nodes (same order as the nodes) to 0..=100.
    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, _scores: &mut [i64]) {}
}

/// Claims resources for the pod on its chosen node; Unreserve undoes it on failure.
pub trait Reserve {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status;
    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str);
}

/// Approves (or rejects) the binding of a reserved pod.
pub trait Permit {
    fn permit(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status;
}

/// Work before the Binding is written (volumes).
pub trait PreBind: Send + Sync {
    fn pre_bind<'a>(&'a self, pod: &'a PodInfo, node: &'a str) -> BoxFuture<'a, Status>;
}

/// Writes the placement. The first Bind plugin that handles the pod wins.
pub trait Bind: Send + Sync {
    fn bind<'a>(&'a self, pod: &'a PodInfo, node: &'a str) -> BoxFuture<'a, Status>;
}

/// Informational, after a successful bind.
pub trait PostBind: Send + Sync {
    fn post_bind(&self, pod: &PodInfo, node: &str);
}

/// Scales `scores` so the highest becomes 100 (or, `reverse`, the lowest), as upstream's
/// `DefaultNormalizeScore`.
pub fn default_normalize(scores: &mut [i64], reverse: bool) {
    let max = scores.iter().copied().max().unwrap_or(0);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = MAX_NODE_SCORE);
        }
        return;
    }
    for s in scores.iter_mut() {
        let v = MAX_NODE_SCORE * *s / max;
        *s = if reverse { MAX_NODE_SCORE - v } else { v };
    }
}
