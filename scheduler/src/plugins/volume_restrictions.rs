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

impl PreFilter for VolumeRestrictions {
    fn pre_filter(&self, _state: &mut CycleState, pod: &PodInfo, snapshot: &Cache) -> Status {
        let rwop: Vec<String> = claim_names(pod)
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
        if rwop.is_empty() {
            return Ok(());
        }
        let in_use = snapshot.nodes().flat_map(|n| n.pods.iter()).any(|other| {
            other.uid != pod.uid
                && other.namespace == pod.namespace
                && claim_names(other).iter().any(|c| rwop.contains(c))
        });
        if in_use { Err(Rejection::unresolvable(RWOP_REASON)) } else { Ok(()) }
    }
}

impl Filter for VolumeRestrictions {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let mine = volumes(pod);
        if mine.is_empty() {
            return Ok(());
        }
        let clash =
            node.pods.iter().any(|other| volumes(other).iter().any(|v| mine.iter().any(|m| conflict(m, v))));
        if clash { Err(Rejection::unschedulable(DISK_CONFLICT_REASON)) } else { Ok(()) }
    }
}
