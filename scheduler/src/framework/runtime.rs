//! A profile: the plugins enabled at each extension point, in order, with score weights,
//! and the functions that run them as upstream's `frameworkImpl` does (first rejection
//! wins at Filter, weighted sum at Score).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{CycleState, NodeInfo, Plugin, PodInfo, PostFilterResult, Rejection, Status, events};
use crate::cache::Cache;

/// One extension point's plugins.
pub type Plugins = Vec<Arc<dyn Plugin>>;

#[derive(Default)]
pub struct Profile {
    /// `schedulerName` of the pods this profile schedules.
    pub name: String,
    pub pre_enqueue: Plugins,
    pub pre_filter: Plugins,
    pub filter: Plugins,
    pub post_filter: Plugins,
    pub pre_score: Plugins,
    pub score: Vec<(Arc<dyn Plugin>, i64)>,
    pub reserve: Plugins,
    pub permit: Plugins,
    pub pre_bind: Plugins,
    pub bind: Plugins,
    pub post_bind: Plugins,
    /// The profile's `percentageOfNodesToScore`, overriding the global one.
    pub percentage_of_nodes_to_score: Option<i32>,
    /// Every plugin instance, by name (for event registration).
    pub all: HashMap<&'static str, Arc<dyn Plugin>>,
}

impl Profile {
    pub fn run_pre_enqueue(&self, pod: &PodInfo) -> Status {
        for p in &self.pre_enqueue {
            if let Some(pe) = p.as_pre_enqueue() {
                pe.pre_enqueue(pod).map_err(|r| r.by(p.name()))?;
            }
        }
        Ok(())
    }

    pub fn run_pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snapshot: &Cache) -> Status {
        for p in &self.pre_filter {
            if let Some(pf) = p.as_pre_filter() {
                pf.pre_filter(state, pod, snapshot).map_err(|r| r.by(p.name()))?;
            }
        }
        Ok(())
    }

    pub fn run_filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        for p in &self.filter {
            if let Some(f) = p.as_filter() {
                f.filter(state, pod, node).map_err(|r| r.by(p.name()))?;
            }
        }
        Ok(())
    }

    /// Filter with the pods nominated to `node` at this pod's priority or above counted as
    /// if already there (so a preemptor's room is not taken by a lower-priority pod), and
    /// then, if that passes, without them (so affinity to a nominated pod that may never
    /// arrive is not relied upon), as upstream's `RunFilterPluginsWithNominatedPods`.
    pub fn run_filter_with_nominated(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        snapshot: &Cache,
    ) -> Status {
        let nominated: Vec<&Arc<PodInfo>> = snapshot
            .nominated_pods(&node.name)
            .iter()
            .filter(|n| n.uid != pod.uid && n.priority >= pod.priority)
            .collect();
        if nominated.is_empty() {
            return self.run_filter(state, pod, node);
        }
        let mut with = node.clone();
        let mut with_state = state.clone();
        for n in nominated {
            let placed = Arc::new(n.assumed_on(&node.name));
            self.add_pod_to_state(&mut with_state, pod, &placed, &with);
            with.add_pod(placed);
        }
        self.run_filter(&with_state, pod, &with)?;
        self.run_filter(state, pod, node)
    }

    pub fn add_pod_to_state(&self, state: &mut CycleState, pod: &PodInfo, other: &PodInfo, node: &NodeInfo) {
        for p in &self.pre_filter {
            if let Some(pf) = p.as_pre_filter() {
                pf.add_pod(state, pod, other, node);
            }
        }
    }

    pub fn remove_pod_from_state(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
    ) {
        for p in &self.pre_filter {
            if let Some(pf) = p.as_pre_filter() {
                pf.remove_pod(state, pod, other, node);
            }
        }
    }

    pub fn run_post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Cache,
        rejections: &HashMap<String, Rejection>,
    ) -> Option<PostFilterResult> {
        let mut last = None;
        for p in &self.post_filter {
            if let Some(pf) = p.as_post_filter() {
                let result = pf.post_filter(self, state, pod, snapshot, rejections);
                if result.nominated_node.is_some() {
                    return Some(result);
                }
                last = Some(result);
            }
        }
        last
    }

    pub fn run_pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Cache,
        nodes: &[&NodeInfo],
    ) {
        for p in &self.pre_score {
            if let Some(ps) = p.as_pre_score() {
                ps.pre_score(state, pod, snapshot, nodes);
            }
        }
    }

    /// Weighted sum of every Score plugin's normalized score, per node (same order).
    pub fn run_score(&self, state: &CycleState, pod: &PodInfo, nodes: &[&NodeInfo]) -> Vec<i64> {
        let mut total = vec![0i64; nodes.len()];
        let mut scores = vec![0i64; nodes.len()];
        for (p, weight) in &self.score {
            let Some(s) = p.as_score() else { continue };
            for (slot, node) in scores.iter_mut().zip(nodes) {
                *slot = s.score(state, pod, node);
            }
            s.normalize(state, pod, &mut scores);
            for (t, s) in total.iter_mut().zip(&scores) {
                *t += s * weight;
            }
        }
        total
    }

    pub fn run_reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for (i, p) in self.reserve.iter().enumerate() {
            if let Some(r) = p.as_reserve()
                && let Err(rejection) = r.reserve(state, pod, node)
            {
                for q in self.reserve[..i].iter().rev() {
                    if let Some(r) = q.as_reserve() {
                        r.unreserve(state, pod, node);
                    }
                }
                return Err(rejection.by(p.name()));
            }
        }
        Ok(())
    }

    pub fn run_unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        for p in self.reserve.iter().rev() {
            if let Some(r) = p.as_reserve() {
                r.unreserve(state, pod, node);
            }
        }
    }

    pub fn run_permit(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        for p in &self.permit {
            if let Some(pm) = p.as_permit() {
                pm.permit(state, pod, node).map_err(|r| r.by(p.name()))?;
            }
        }
        Ok(())
    }

    pub async fn run_pre_bind(&self, pod: &PodInfo, node: &str) -> Status {
        for p in &self.pre_bind {
            if let Some(pb) = p.as_pre_bind() {
                pb.pre_bind(pod, node).await.map_err(|r| r.by(p.name()))?;
            }
        }
        Ok(())
    }

    pub async fn run_bind(&self, pod: &PodInfo, node: &str) -> Status {
        for p in &self.bind {
            if let Some(b) = p.as_bind() {
                return b.bind(pod, node).await.map_err(|mut r| {
                    r.reasons = vec![format!("running Bind plugin {:?}: {}", p.name(), r.reasons.join(", "))];
                    r.by(p.name())
                });
            }
        }
        Err(Rejection::error("no bind plugin is enabled"))
    }

    pub fn run_post_bind(&self, pod: &PodInfo, node: &str) {
        for p in &self.post_bind {
            if let Some(pb) = p.as_post_bind() {
                pb.post_bind(pod, node);
            }
        }
    }

    /// The events that may help a pod the named plugins rejected; any event when none is
    /// named (the pod failed for a reason no plugin owns).
    pub fn events_for(&self, plugins: &HashSet<&'static str>) -> u32 {
        if plugins.is_empty() {
            return events::ALL;
        }
        plugins
            .iter()
            .map(|name| self.all.get(name).map_or(events::ALL, |p| p.events()))
            .fold(0, |a, b| a | b)
    }
}
