//! Which PersistentVolume a claim should bind to, free of I/O (upstream
//! `pkg/controller/volume/persistentvolume/index.go` and component-helpers'
//! `storage/volume`, shared by the PV controller and the scheduler): volumes
//! pre-bound to the claim win; otherwise the smallest Available volume of the claim's
//! class, size, volume mode and selector, among those with the fewest access modes that
//! still cover the claim's.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim};

use crate::labels::{NodeSelectorMatcher, Selector};
use crate::quantity::parse_value;

/// The beta class annotation, still honoured before `storageClassName`.
pub const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// On a claim: the PV controller finished binding it.
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// On a claim or volume: the binding was made by a controller (not pre-bound by a user).
pub const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// On a claim of a WaitForFirstConsumer class: the node the scheduler chose for its pod,
/// where a provisioner must make the volume.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// On a claim: the provisioner asked to make its volume.
pub const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
pub const BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// On a volume: the provisioner that made it (and deletes it).
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// On a StorageClass: the class claims without one get.
pub const IS_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
pub const BETA_IS_DEFAULT_CLASS: &str = "storageclass.beta.kubernetes.io/is-default-class";

/// A claim's class: the beta annotation, else `storageClassName`, else "".
pub fn claim_class(claim: &PersistentVolumeClaim) -> &str {
    if let Some(c) = claim.metadata.annotations.as_ref().and_then(|a| a.get(BETA_CLASS)) {
        return c;
    }
    claim.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()).unwrap_or_default()
}

/// Whether the claim asked for a class at all (`""` counts: it asks for none).
pub fn claim_has_class(claim: &PersistentVolumeClaim) -> bool {
    claim.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(BETA_CLASS))
        || claim.spec.as_ref().is_some_and(|s| s.storage_class_name.is_some())
}

pub fn volume_class(pv: &PersistentVolume) -> &str {
    if let Some(c) = pv.metadata.annotations.as_ref().and_then(|a| a.get(BETA_CLASS)) {
        return c;
    }
    pv.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()).unwrap_or_default()
}

/// `Filesystem` unless `Block`.
fn mode(m: Option<&String>) -> &str {
    m.map(String::as_str).filter(|m| !m.is_empty()).unwrap_or("Filesystem")
}

pub fn volume_mode_mismatch(claim: &PersistentVolumeClaim, pv: &PersistentVolume) -> bool {
    mode(claim.spec.as_ref().and_then(|s| s.volume_mode.as_ref()))
        != mode(pv.spec.as_ref().and_then(|s| s.volume_mode.as_ref()))
}

/// The claim's requested size in bytes.
pub fn requested_bytes(claim: &PersistentVolumeClaim) -> i64 {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| parse_value(&q.0))
        .unwrap_or(0)
}

pub fn capacity_bytes(pv: &PersistentVolume) -> i64 {
    pv.spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| parse_value(&q.0))
        .unwrap_or(0)
}

fn claim_modes(claim: &PersistentVolumeClaim) -> BTreeSet<&str> {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or_default()
        .iter()
        .map(String::as_str)
        .collect()
}

fn volume_modes(pv: &PersistentVolume) -> BTreeSet<&str> {
    pv.spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or_default()
        .iter()
        .map(String::as_str)
        .collect()
}

/// The `claimRef` that binds a volume to `claim` (with its UID and resourceVersion).
pub fn claim_ref(claim: &PersistentVolumeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: claim.metadata.namespace.clone(),
        name: claim.metadata.name.clone(),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        ..Default::default()
    }
}

/// Whether the volume's claimRef names this claim (and its UID, when set).
pub fn is_bound_to(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else { return false };
    r.name.as_deref() == claim.metadata.name.as_deref()
        && r.namespace.as_deref() == claim.metadata.namespace.as_deref()
        && r.uid.as_deref().is_none_or(|u| u.is_empty() || Some(u) == claim.metadata.uid.as_deref())
}

/// Whether the volume's required node affinity admits a node with these labels.
pub fn node_affinity_matches(
    pv: &PersistentVolume,
    node: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    match pv.spec.as_ref().and_then(|s| s.node_affinity.as_ref()).and_then(|a| a.required.as_ref()) {
        Some(required) => NodeSelectorMatcher::new(&required.node_selector_terms).matches(node, labels),
        None => true,
    }
}

/// Why a volume the user named cannot serve the claim (upstream
/// `checkVolumeSatisfyClaim`), if it cannot.
pub fn volume_unsatisfying(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> Option<String> {
    if capacity_bytes(pv) < requested_bytes(claim) {
        return Some("requested PV is too small".into());
    }
    if volume_class(pv) != claim_class(claim) {
        return Some("storageClassName does not match".into());
    }
    if volume_mode_mismatch(claim, pv) {
        return Some("incompatible volumeMode".into());
    }
    if !claim_modes(claim).is_subset(&volume_modes(pv)) {
        return Some("incompatible accessMode".into());
    }
    None
}

/// A node the scheduler is placing the claim's pod on: the volume must admit it.
pub struct ForNode<'a> {
    pub name: &'a str,
    pub labels: &'a std::collections::BTreeMap<String, String>,
}

/// Upstream `FindMatchingVolume` over one group of volumes. With `node` (the scheduler's
/// path) node affinity and access modes are checked too; without it, a claim whose class
/// delays binding is left to the scheduler unless a volume is pre-bound to it.
pub fn find_matching_volume(
    claim: &PersistentVolumeClaim,
    volumes: &[Arc<PersistentVolume>],
    node: Option<&ForNode<'_>>,
    excluded: &dyn Fn(&str) -> bool,
    delay_binding: bool,
) -> Option<Arc<PersistentVolume>> {
    let requested = requested_bytes(claim);
    let class = claim_class(claim);
    let selector =
        claim.spec.as_ref().and_then(|s| s.selector.as_ref()).map(|s| Selector::from_label_selector(Some(s)));
    let mut smallest: Option<(i64, &Arc<PersistentVolume>)> = None;
    for pv in volumes {
        if excluded(pv.metadata.name.as_deref().unwrap_or_default()) {
            continue;
        }
        let claimed = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_some();
        if claimed && !is_bound_to(pv, claim) {
            continue;
        }
        let size = capacity_bytes(pv);
        if size < requested || volume_mode_mismatch(claim, pv) || pv.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let affinity_ok = node.is_none_or(|n| node_affinity_matches(pv, n.name, n.labels));
        if is_bound_to(pv, claim) {
            // Pre-bound (by the user, or a provisioner for this claim): this or nothing.
            return affinity_ok.then(|| pv.clone());
        }
        if node.is_none() && delay_binding {
            continue;
        }
        let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase != Some("Available") {
            continue;
        }
        let labels = pv.metadata.labels.clone().unwrap_or_default();
        if selector.as_ref().is_some_and(|s| !s.matches(&labels)) || volume_class(pv) != class || !affinity_ok
        {
            continue;
        }
        if node.is_some() && !claim_modes(claim).is_subset(&volume_modes(pv)) {
            continue;
        }
        if smallest.is_none_or(|(s, _)| size < s) {
            smallest = Some((size, pv));
        }
    }
    smallest.map(|(_, pv)| pv.clone())
}

/// The controller's choice for a claim (upstream `findBestMatchForClaim`): volumes are
/// tried in groups by their access modes, fewest modes first, among the groups whose
/// modes cover the claim's.
pub fn find_best_match(
    claim: &PersistentVolumeClaim,
    volumes: &[Arc<PersistentVolume>],
    delay_binding: bool,
) -> Option<Arc<PersistentVolume>> {
    let wanted = claim_modes(claim);
    let mut groups: Vec<(BTreeSet<&str>, Vec<Arc<PersistentVolume>>)> = Vec::new();
    for pv in volumes {
        let modes = volume_modes(pv);
        if !wanted.is_subset(&modes) {
            continue;
        }
        match groups.iter_mut().find(|(m, _)| *m == modes) {
            Some((_, g)) => g.push(pv.clone()),
            None => groups.push((modes, vec![pv.clone()])),
        }
    }
    groups.sort_by(|a, b| a.0.len().cmp(&b.0.len()).then_with(|| a.0.cmp(&b.0)));
    groups.iter().find_map(|(_, g)| find_matching_volume(claim, g, None, &|_| false, delay_binding))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pv(name: &str, size: &str, modes: &[&str], class: &str, phase: &str) -> Arc<PersistentVolume> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"tier": "fast"}},
                "spec": {"capacity": {"storage": size}, "accessModes": modes, "storageClassName": class,
                    "hostPath": {"path": "/tmp/x"}},
                "status": {"phase": phase},
            }))
            .unwrap(),
        )
    }

    fn claim(size: &str, modes: &[&str], class: Option<&str>) -> PersistentVolumeClaim {
        let mut c: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": "cuid"},
            "spec": {"accessModes": modes, "resources": {"requests": {"storage": size}}},
        }))
        .unwrap();
        c.spec.as_mut().unwrap().storage_class_name = class.map(str::to_owned);
        c
    }

    fn name(pv: Option<Arc<PersistentVolume>>) -> Option<String> {
        pv.and_then(|p| p.metadata.name.clone())
    }

    #[test]
    fn smallest_fitting_volume_of_the_class() {
        let vols = vec![
            pv("big", "10Gi", &["ReadWriteOnce"], "", "Available"),
            pv("small", "2Gi", &["ReadWriteOnce"], "", "Available"),
            pv("tiny", "512Mi", &["ReadWriteOnce"], "", "Available"),
            pv("other-class", "1Gi", &["ReadWriteOnce"], "gold", "Available"),
            pv("released", "1Gi", &["ReadWriteOnce"], "", "Released"),
        ];
        assert_eq!(
            name(find_best_match(&claim("1Gi", &["ReadWriteOnce"], Some("")), &vols, false)).as_deref(),
            Some("small")
        );
        assert_eq!(
            name(find_best_match(&claim("1Gi", &["ReadWriteOnce"], Some("gold")), &vols, false)).as_deref(),
            Some("other-class")
        );
        assert_eq!(name(find_best_match(&claim("20Gi", &["ReadWriteOnce"], Some("")), &vols, false)), None);
        // Delayed binding is the scheduler's business.
        assert_eq!(name(find_best_match(&claim("1Gi", &["ReadWriteOnce"], Some("")), &vols, true)), None);
    }

    #[test]
    fn fewest_access_modes_first_and_modes_must_cover() {
        let vols = vec![
            pv("rwo-rox", "1Gi", &["ReadWriteOnce", "ReadOnlyMany"], "", "Available"),
            pv("rwo", "5Gi", &["ReadWriteOnce"], "", "Available"),
            pv("rwx", "1Gi", &["ReadWriteMany"], "", "Available"),
        ];
        // The larger single-mode volume beats the smaller two-mode one.
        assert_eq!(
            name(find_best_match(&claim("1Gi", &["ReadWriteOnce"], Some("")), &vols, false)).as_deref(),
            Some("rwo")
        );
        assert_eq!(
            name(find_best_match(&claim("1Gi", &["ReadOnlyMany"], Some("")), &vols, false)).as_deref(),
            Some("rwo-rox")
        );
        assert_eq!(
            name(find_best_match(&claim("1Gi", &["ReadWriteOnce", "ReadWriteMany"], Some("")), &vols, false)),
            None
        );
    }

    #[test]
    fn prebound_selector_and_volume_mode() {
        let mut pre = (*pv("pre", "1Gi", &["ReadWriteOnce"], "", "Available")).clone();
        pre.spec.as_mut().unwrap().claim_ref =
            Some(serde_json::from_value(json!({"namespace": "ns", "name": "c"})).unwrap());
        let vols = vec![pv("free", "1Gi", &["ReadWriteOnce"], "", "Available"), Arc::new(pre)];
        let c = claim("1Gi", &["ReadWriteOnce"], Some(""));
        assert_eq!(
            name(find_best_match(&c, &vols, true)).as_deref(),
            Some("pre"),
            "pre-bound wins, even delayed"
        );
        let mut other = c.clone();
        other.metadata.name = Some("d".into());
        assert_eq!(name(find_best_match(&other, &vols, false)).as_deref(), Some("free"));
        let mut sel = c.clone();
        sel.spec.as_mut().unwrap().selector =
            Some(serde_json::from_value(json!({"matchLabels": {"tier": "slow"}})).unwrap());
        sel.metadata.name = Some("e".into());
        assert_eq!(name(find_best_match(&sel, &vols, false)), None);
        let mut block = other.clone();
        block.spec.as_mut().unwrap().volume_mode = Some("Block".into());
        assert_eq!(name(find_best_match(&block, &vols, false)), None);
        assert_eq!(
            volume_unsatisfying(&vols[0], &claim("2Gi", &["ReadWriteOnce"], Some(""))).as_deref(),
            Some("requested PV is too small")
        );
    }

    #[test]
    fn node_path_checks_affinity() {
        let mut local = (*pv("local", "1Gi", &["ReadWriteOnce"], "local", "Available")).clone();
        local.spec.as_mut().unwrap().node_affinity = Some(
            serde_json::from_value(json!({"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}))
            .unwrap(),
        );
        let vols = vec![Arc::new(local)];
        let c = claim("1Gi", &["ReadWriteOnce"], Some("local"));
        let l1 = [("kubernetes.io/hostname".to_string(), "n1".to_string())].into();
        let l2 = [("kubernetes.io/hostname".to_string(), "n2".to_string())].into();
        let n1 = ForNode { name: "n1", labels: &l1 };
        let n2 = ForNode { name: "n2", labels: &l2 };
        assert!(find_matching_volume(&c, &vols, Some(&n1), &|_| false, true).is_some());
        assert!(find_matching_volume(&c, &vols, Some(&n2), &|_| false, true).is_none());
        assert!(find_matching_volume(&c, &vols, Some(&n1), &|n| n == "local", true).is_none());
    }
}
