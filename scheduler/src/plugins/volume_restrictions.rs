//! VolumeRestrictions: a ReadWriteOncePod claim may be used by one pod in the cluster, and
//! the same GCE PD, AWS EBS volume or iSCSI LUN cannot be mounted twice on one node
//! (unless every use of a GCE PD / iSCSI LUN is read-only).

use k8s_openapi::api::core::v1::Volume;

use super::volume_binding::claim_names;
use crate::cache::Cache;
use crate::framework::{CycleState, Filter, NodeInfo, Plugin, PodInfo, PreFilter, Rejection, Status, events};

pub const NAME: &str = "VolumeRestrictions";
pub const DISK_CONFLICT_REASON: &str = "node(s) had no available disk";
pub const RWOP_REASON: &str =
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";

pub struct VolumeRestrictions;

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events(&self) -> u32 {
        events::ASSIGNED_POD_DELETE | events::PVC | events::NODE_ADD
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilter> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn Filter> {
        Some(self)
    }
}

fn volumes(pod: &PodInfo) -> &[Volume] {
    pod.pod.spec.as_ref().and_then(|s| s.volumes.as_deref()).unwrap_or(&[])
}

fn conflict(a: &Volume, b: &Volume) -> bool {
    if let (Some(x), Some(y)) = (&a.gce_persistent_disk, &b.gce_persistent_disk) {
        return x.pd_name == y.pd_name && !(x.read_only.unwrap_or(false) && y.read_only.unwrap_or(false));
    }
    if let (Some(x), Some(y)) = (&a.aws_elastic_block_store, &b.aws_elastic_block_store) {
        return x.volume_id == y.volume_id;
    }
    if let (Some(x), Some(y)) = (&a.iscsi, &b.iscsi) {
        return x.iqn == y.iqn
            && x.lun == y.lun
            && !(x.read_only.unwrap_or(false) && y.read_only.unwrap_or(false));
    }
    false
}

/// The pod's ReadWriteOncePod claims and how many other pods use them: a Filter
/// rejection (not a PreFilter one) so that preemption can free a claim by evicting its
/// holder, as upstream.
#[derive(Clone, Default)]
struct State {
    rwop_claims: Vec<String>,
    conflicts: i64,
}

fn uses_any(other: &PodInfo, pod: &PodInfo, claims: &[String]) -> bool {
    other.uid != pod.uid
        && other.namespace == pod.namespace
        && claim_names(other).iter().any(|c| claims.contains(c))
}

impl PreFilter for VolumeRestrictions {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snapshot: &Cache) -> Status {
        let rwop_claims: Vec<String> = claim_names(pod)
            .into_iter()
            .filter(|c| {
                snapshot.pvcs.get(&format!("{}/{c}", pod.namespace)).is_some_and(|pvc| {
                    pvc.spec
                        .as_ref()
                        .and_then(|s| s.access_modes.as_ref())
                        .is_some_and(|m| m.iter().any(|m| m == "ReadWriteOncePod"))
                })
            })
            .collect();
        let conflicts = if rwop_claims.is_empty() {
            0
        } else {
            snapshot.nodes().flat_map(|n| n.pods.iter()).filter(|o| uses_any(o, pod, &rwop_claims)).count()
                as i64
        };
        state.write(NAME, State { rwop_claims, conflicts });
        Ok(())
    }

    fn add_pod(&self, state: &mut CycleState, pod: &PodInfo, other: &PodInfo, _node: &NodeInfo) {
        if let Some(s) = state.read_mut::<State>(NAME)
            && uses_any(other, pod, &s.rwop_claims)
        {
            s.conflicts += 1;
        }
    }

    fn remove_pod(&self, state: &mut CycleState, pod: &PodInfo, other: &PodInfo, _node: &NodeInfo) {
        if let Some(s) = state.read_mut::<State>(NAME)
            && uses_any(other, pod, &s.rwop_claims)
        {
            s.conflicts -= 1;
        }
    }
}

impl Filter for VolumeRestrictions {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if state.read::<State>(NAME).is_some_and(|s| s.conflicts > 0) {
            return Err(Rejection::unschedulable(RWOP_REASON));
        }
        let mine = volumes(pod);
        if mine.is_empty() {
            return Ok(());
        }
        let clash =
            node.pods.iter().any(|other| volumes(other).iter().any(|v| mine.iter().any(|m| conflict(m, v))));
        if clash { Err(Rejection::unschedulable(DISK_CONFLICT_REASON)) } else { Ok(()) }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::plugins::testing::{bound, node, pod};

    fn with_claim(mut p: k8s_openapi::api::core::v1::Pod) -> k8s_openapi::api::core::v1::Pod {
        p.spec.as_mut().unwrap().volumes = Some(vec![
            serde_json::from_value(
                serde_json::json!({"name": "d", "persistentVolumeClaim": {"claimName": "data"}}),
            )
            .unwrap(),
        ]);
        p
    }

    #[test]
    fn a_read_write_once_pod_claim_in_use_is_a_preemptable_conflict() {
        let mut cache = Cache::new();
        cache.add_or_update_node(Arc::new(node("n1", "4", "8Gi")));
        cache.pvcs.insert(
            "default/data".into(),
            Arc::new(
                serde_json::from_value(
                    serde_json::json!({"metadata": {"name": "data", "namespace": "default"},
                "spec": {"accessModes": ["ReadWriteOncePod"]}}),
                )
                .unwrap(),
            ),
        );
        let holder = Arc::new(PodInfo::new(Arc::new(bound(with_claim(pod("a", "0", "0")), "n1"))));
        cache.add_or_update_pod(holder.clone());
        let incoming = PodInfo::new(Arc::new(with_claim(pod("b", "0", "0"))));
        let mut state = CycleState::default();
        VolumeRestrictions.pre_filter(&mut state, &incoming, &cache).unwrap();
        let n1 = cache.node("n1").unwrap();
        let err = VolumeRestrictions.filter(&state, &incoming, n1).unwrap_err();
        assert_eq!((err.code, err.reasons[0].as_str()), (crate::framework::Code::Unschedulable, RWOP_REASON));
        VolumeRestrictions.remove_pod(&mut state, &incoming, &holder, n1);
        assert!(VolumeRestrictions.filter(&state, &incoming, n1).is_ok());
    }
}
