//! VolumeBinding (basic): every PersistentVolumeClaim the pod mounts must exist and be
//! bound, and the bound PersistentVolume's node affinity must admit the node. Delayed
//! binding (WaitForFirstConsumer: choosing or provisioning a volume for the node) is not
//! done here; such a claim stays unbound and the pod unschedulable until it is bound.

use std::collections::HashMap;

use crate::cache::Cache;
use crate::framework::labels::NodeSelectorMatcher;
use crate::framework::{CycleState, Filter, NodeInfo, Plugin, PodInfo, PreFilter, Rejection, Status, events};

pub const NAME: &str = "VolumeBinding";
pub const UNBOUND_REASON: &str = "pod has unbound immediate PersistentVolumeClaims";
pub const CONFLICT_REASON: &str = "node(s) had volume node affinity conflict";

pub struct VolumeBinding;

/// The claim names a pod mounts (generic ephemeral volumes as `<pod>-<volume>`).
pub fn claim_names(pod: &PodInfo) -> Vec<String> {
    let volumes = pod.pod.spec.as_ref().and_then(|s| s.volumes.as_deref()).unwrap_or(&[]);
    volumes
        .iter()
        .filter_map(|v| {
            if let Some(c) = &v.persistent_volume_claim {
                Some(c.claim_name.clone())
            } else {
                v.ephemeral.as_ref().map(|_| format!("{}-{}", pod.name, v.name))
            }
        })
        .collect()
}

#[derive(Clone, Default)]
struct State {
    /// Bound volumes' node affinity, by PV name.
    affinities: HashMap<String, NodeSelectorMatcher>,
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events(&self) -> u32 {
        events::PVC | events::PV | events::NODE_ADD | events::NODE_LABEL
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilter> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn Filter> {
        Some(self)
    }
}

impl PreFilter for VolumeBinding {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snapshot: &Cache) -> Status {
        let mut s = State::default();
        for claim in claim_names(pod) {
            let Some(pvc) = snapshot.pvcs.get(&format!("{}/{claim}", pod.namespace)) else {
                return Err(Rejection::unresolvable(format!("persistentvolumeclaim \"{claim}\" not found")));
            };
            if pvc.metadata.deletion_timestamp.is_some() {
                return Err(Rejection::unresolvable(format!(
                    "persistentvolumeclaim \"{claim}\" is being deleted"
                )));
            }
            let volume = pvc.spec.as_ref().and_then(|s| s.volume_name.clone()).unwrap_or_default();
            if volume.is_empty() {
                return Err(Rejection::unresolvable(UNBOUND_REASON));
            }
            let Some(pv) = snapshot.pvs.get(&volume) else {
                return Err(Rejection::unresolvable(format!("persistentvolume \"{volume}\" not found")));
            };
            if let Some(required) =
                pv.spec.as_ref().and_then(|s| s.node_affinity.as_ref()).and_then(|a| a.required.as_ref())
            {
                s.affinities.insert(volume, NodeSelectorMatcher::new(&required.node_selector_terms));
            }
        }
        state.write(NAME, s);
        Ok(())
    }
}

impl Filter for VolumeBinding {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<State>(NAME) else { return Ok(()) };
        if s.affinities.values().all(|m| m.matches(&node.name, &node.labels)) {
            Ok(())
        } else {
            Err(Rejection::unresolvable(CONFLICT_REASON))
        }
    }
}
