//! A StatefulSet's pods and claims, free of I/O (upstream `stateful_set_utils.go`):
//! ordinal identity (`<set>-<ordinal>`, hostname and subdomain, the pod-name and
//! pod-index labels), the claims of each ordinal (`<template>-<set>-<ordinal>`), the owner
//! references a claim should carry under `persistentVolumeClaimRetentionPolicy`, and the
//! status counts.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;

use crate::controllers::deployment::util::scaled_value;
use crate::history::{self, HASH_LABEL};
use crate::owners;
use crate::podutil;

/// The pod's own name, as a label (so a Service can select one member).
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The pod's ordinal, as a label.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// `(parent, ordinal)` from a pod name `<parent>-<digits>` (upstream's `(.*)-([0-9]+)$`,
/// the ordinal a 32-bit integer).
pub fn parent_and_ordinal(name: &str) -> Option<(&str, i32)> {
    let (parent, digits) = name.rsplit_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((parent, digits.parse().ok()?))
}

/// The pod's ordinal, or -1.
pub fn ordinal(pod: &Pod) -> i32 {
    parent_and_ordinal(pod.metadata.name.as_deref().unwrap_or_default()).map_or(-1, |(_, o)| o)
}

pub fn set_name(set: &StatefulSet) -> &str {
    set.metadata.name.as_deref().unwrap_or_default()
}

pub fn replicas(set: &StatefulSet) -> i32 {
    set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1).max(0)
}

/// `spec.ordinals.start`, else 0.
pub fn start_ordinal(set: &StatefulSet) -> i32 {
    set.spec.as_ref().and_then(|s| s.ordinals.as_ref()).and_then(|o| o.start).unwrap_or(0)
}

/// The last ordinal the set runs (inclusive).
pub fn end_ordinal(set: &StatefulSet) -> i32 {
    start_ordinal(set) + replicas(set) - 1
}

pub fn in_ordinal_range(pod: &Pod, set: &StatefulSet) -> bool {
    let o = ordinal(pod);
    o >= start_ordinal(set) && o <= end_ordinal(set)
}

pub fn pod_name(set: &StatefulSet, ordinal: i32) -> String {
    format!("{}-{ordinal}", set_name(set))
}

pub fn claim_name(template: &PersistentVolumeClaim, set: &StatefulSet, ordinal: i32) -> String {
    format!("{}-{}-{ordinal}", template.metadata.name.as_deref().unwrap_or_default(), set_name(set))
}

/// Whether the pod's name makes it a member of the set.
pub fn is_member(set: &StatefulSet, pod: &Pod) -> bool {
    parent_and_ordinal(pod.metadata.name.as_deref().unwrap_or_default())
        .is_some_and(|(p, _)| p == set_name(set))
}

fn templates(set: &StatefulSet) -> &[PersistentVolumeClaim] {
    set.spec.as_ref().and_then(|s| s.volume_claim_templates.as_deref()).unwrap_or_default()
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// Name, namespace and pod-name label as the set would give them (upstream
/// `identityMatches`).
pub fn identity_matches(set: &StatefulSet, pod: &Pod) -> bool {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let Some((parent, ord)) = parent_and_ordinal(name) else { return false };
    ord >= 0
        && parent == set_name(set)
        && name == pod_name(set, ord)
        && pod.metadata.namespace == set.metadata.namespace
        && label(pod, POD_NAME_LABEL) == Some(name)
}

/// Every claim template is mounted from its claim for this ordinal.
pub fn storage_matches(set: &StatefulSet, pod: &Pod) -> bool {
    let ord = ordinal(pod);
    if ord < 0 {
        return false;
    }
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref()).unwrap_or_default();
    templates(set).iter().all(|t| {
        let want = claim_name(t, set, ord);
        volumes.iter().any(|v| {
            Some(v.name.as_str()) == t.metadata.name.as_deref()
                && v.persistent_volume_claim.as_ref().is_some_and(|c| c.claim_name == want)
        })
    })
}

/// The claims of one ordinal, by template name: the template with the claim's name, the
/// set's namespace, and the selector's labels added to the template's.
pub fn claims_for(set: &StatefulSet, ordinal: i32) -> BTreeMap<String, PersistentVolumeClaim> {
    let selector_labels = set.spec.as_ref().and_then(|s| s.selector.match_labels.clone()).unwrap_or_default();
    templates(set)
        .iter()
        .map(|t| {
            let mut claim = t.clone();
            claim.metadata.name = Some(claim_name(t, set, ordinal));
            claim.metadata.namespace = set.metadata.namespace.clone();
            let labels = claim.metadata.labels.get_or_insert_with(Default::default);
            labels.extend(selector_labels.clone());
            claim.status = None;
            (t.metadata.name.clone().unwrap_or_default(), claim)
        })
        .collect()
}

/// Mounts each claim template from this ordinal's claim, replacing any volume of the same
/// name (upstream `updateStorage`).
pub fn update_storage(set: &StatefulSet, pod: &mut Pod) {
    let claims = claims_for(set, ordinal(pod));
    let spec = pod.spec.get_or_insert_with(Default::default);
    let mut volumes: Vec<Volume> = claims
        .iter()
        .map(|(name, claim)| Volume {
            name: name.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.metadata.name.clone().unwrap_or_default(),
                read_only: None,
            }),
            ..Default::default()
        })
        .collect();
    volumes.extend(spec.volumes.take().into_iter().flatten().filter(|v| !claims.contains_key(&v.name)));
    spec.volumes = Some(volumes);
}

/// Name, namespace and the identity labels (upstream `updateIdentity`).
pub fn update_identity(set: &StatefulSet, pod: &mut Pod) {
    let ord = ordinal(pod);
    let name = pod_name(set, ord);
    pod.metadata.name = Some(name.clone());
    pod.metadata.namespace = set.metadata.namespace.clone();
    let labels = pod.metadata.labels.get_or_insert_with(Default::default);
    labels.insert(POD_NAME_LABEL.into(), name);
    labels.insert(POD_INDEX_LABEL.into(), ord.to_string());
}

/// The pod of `ordinal` from the set's template: identity, hostname and subdomain (only
/// at creation: they are immutable), and its claims mounted.
pub fn new_pod(set: &StatefulSet, ordinal: i32) -> Pod {
    let template = set.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let mut pod = Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(set, ordinal)),
            namespace: set.metadata.namespace.clone(),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![owners::controller_ref(set)]),
            ..Default::default()
        },
        spec: Some(template.spec.unwrap_or_default()),
        status: None,
    };
    update_identity(set, &mut pod);
    let service = set.spec.as_ref().and_then(|s| s.service_name.clone()).filter(|s| !s.is_empty());
    if let Some(spec) = pod.spec.as_mut() {
        spec.hostname = pod.metadata.name.clone();
        spec.subdomain = service;
    }
    update_storage(set, &mut pod);
    pod
}

fn partition(set: &StatefulSet) -> Option<i32> {
    rolling_update(set).map(|r| r.partition.unwrap_or(0))
}

fn rolling_update(
    set: &StatefulSet,
) -> Option<&k8s_openapi::api::apps::v1::RollingUpdateStatefulSetStrategy> {
    set.spec.as_ref()?.update_strategy.as_ref()?.rolling_update.as_ref()
}

pub fn is_on_delete(set: &StatefulSet) -> bool {
    set.spec.as_ref().and_then(|s| s.update_strategy.as_ref()).and_then(|s| s.type_.as_deref())
        == Some("OnDelete")
}

pub fn is_rolling(set: &StatefulSet) -> bool {
    !is_on_delete(set)
}

/// A missing pod is created at the current revision below the partition (or below the
/// current replica count without a rollingUpdate block), at the update revision above
/// (upstream `newVersionedStatefulSetPod`).
pub fn new_versioned_pod(
    current_set: &StatefulSet,
    update_set: &StatefulSet,
    current_revision: &str,
    update_revision: &str,
    ordinal: i32,
) -> Pod {
    let start = start_ordinal(current_set);
    let current_replicas = current_set.status.as_ref().and_then(|s| s.current_replicas).unwrap_or(0);
    let at_current = match partition(current_set) {
        None => is_rolling(current_set) && ordinal < start + current_replicas,
        Some(p) => ordinal < start + p,
    };
    let (set, revision) =
        if at_current { (current_set, current_revision) } else { (update_set, update_revision) };
    let mut pod = new_pod(set, ordinal);
    pod.metadata.labels.get_or_insert_with(Default::default).insert(HASH_LABEL.into(), revision.into());
    pod
}

pub fn pod_revision(pod: &Pod) -> &str {
    label(pod, HASH_LABEL).unwrap_or_default()
}

/// The set as of `rev`: its template replaced by the revision's (upstream
/// `ApplyRevision`, whose patch replaces exactly `spec.template`).
pub fn apply_revision(set: &StatefulSet, rev: &ControllerRevision) -> StatefulSet {
    let mut out = set.clone();
    if let (Some(t), Some(spec)) = (history::template_of(rev), out.spec.as_mut()) {
        spec.template = t;
    }
    out
}

pub fn is_created(pod: &Pod) -> bool {
    !podutil::phase(pod).is_empty()
}

pub fn is_running_and_ready(pod: &Pod) -> bool {
    podutil::phase(pod) == "Running" && podutil::is_ready(pod)
}

pub fn is_available(pod: &Pod, min_ready: Duration, now: Timestamp) -> bool {
    podutil::is_available(pod, min_ready, now)
}

/// Not available, or on its way out.
pub fn is_unavailable(pod: &Pod, min_ready: Duration, now: Timestamp) -> bool {
    !is_available(pod, min_ready, now) || podutil::is_terminating(pod)
}

pub fn min_ready(set: &StatefulSet) -> Duration {
    Duration::from_secs(set.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0).max(0) as u64)
}

/// Parallel pod management: create and delete without waiting on neighbours.
pub fn allows_burst(set: &StatefulSet) -> bool {
    set.spec.as_ref().and_then(|s| s.pod_management_policy.as_deref()) == Some("Parallel")
}

/// maxUnavailable resolved against the replicas (rounded down, at least 1), when the set
/// gives one. Upstream honours it behind the `MaxUnavailableStatefulSet` gate; the API
/// server here keeps the field, so the controller honours it too.
pub fn max_unavailable(set: &StatefulSet) -> Option<Result<i32, crate::controller::Error>> {
    let v = rolling_update(set)?.max_unavailable.as_ref()?;
    Some(scaled_value(v, replicas(set), false).map(|n| n.max(1)))
}

pub fn update_min(set: &StatefulSet) -> i32 {
    partition(set).unwrap_or(0)
}

/// Retention for `whenDeleted` / `whenScaled`: true means Delete.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retention {
    pub delete_when_deleted: bool,
    pub delete_when_scaled: bool,
}

pub fn retention(set: &StatefulSet) -> Retention {
    let p = set.spec.as_ref().and_then(|s| s.persistent_volume_claim_retention_policy.as_ref());
    let is_delete = |v: Option<&String>| v.map(String::as_str) == Some("Delete");
    Retention {
        delete_when_deleted: is_delete(p.and_then(|p| p.when_deleted.as_ref())),
        delete_when_scaled: is_delete(p.and_then(|p| p.when_scaled.as_ref())),
    }
}

fn refs(claim: &PersistentVolumeClaim) -> &[OwnerReference] {
    claim.metadata.owner_references.as_deref().unwrap_or_default()
}

/// Whether `r` names this object (kind, apiVersion and name; the UID may differ).
fn matches_ref(r: &OwnerReference, api_version: &str, kind: &str, name: &str) -> bool {
    r.api_version == api_version && r.kind == kind && r.name == name
}

fn set_ref_matches(r: &OwnerReference, set: &StatefulSet) -> bool {
    matches_ref(r, "apps/v1", "StatefulSet", set_name(set))
}

fn pod_ref_matches(r: &OwnerReference, pod: &Pod) -> bool {
    matches_ref(r, "v1", "Pod", pod.metadata.name.as_deref().unwrap_or_default())
}

fn uid(meta: &ObjectMeta) -> &str {
    meta.uid.as_deref().unwrap_or_default()
}

fn has_owner_ref(claim: &PersistentVolumeClaim, owner: &ObjectMeta) -> bool {
    refs(claim).iter().any(|r| r.uid == uid(owner))
}

/// A reference to the set (or pod) by name whose UID is another's: left by a previous
/// object of that name.
pub fn has_stale_set_ref(claim: &PersistentVolumeClaim, set: &StatefulSet) -> bool {
    refs(claim).iter().find(|r| set_ref_matches(r, set)).is_some_and(|r| r.uid != uid(&set.metadata))
}

pub fn has_stale_pod_ref(claim: &PersistentVolumeClaim, pod: &Pod) -> bool {
    refs(claim).iter().find(|r| pod_ref_matches(r, pod)).is_some_and(|r| r.uid != uid(&pod.metadata))
}

/// Under a Delete policy, another controller of the claim (or a stale reference to ours)
/// means the claim is not ours to manage.
pub fn has_unexpected_controller(claim: &PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) -> bool {
    let r = retention(set);
    if !r.delete_when_deleted && !r.delete_when_scaled {
        return false;
    }
    refs(claim).iter().any(|o| {
        if set_ref_matches(o, set) {
            o.uid != uid(&set.metadata)
        } else if pod_ref_matches(o, pod) {
            o.uid != uid(&pod.metadata)
        } else {
            o.controller == Some(true)
        }
    })
}

fn has_non_controller_owner(claim: &PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) -> bool {
    refs(claim)
        .iter()
        .any(|o| (o.uid == uid(&set.metadata) || o.uid == uid(&pod.metadata)) && o.controller != Some(true))
}

/// Whether the claim's owner references already express the retention policy (upstream
/// `isClaimOwnerUpToDate`): Delete-when-deleted means owned by the set while the pod is in
/// range; Delete-when-scaled means owned by the pod once it is scaled away.
pub fn claim_owner_up_to_date(claim: &PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) -> bool {
    if has_stale_set_ref(claim, set) || has_stale_pod_ref(claim, pod) {
        return true;
    }
    if has_unexpected_controller(claim, set, pod) {
        return !(has_owner_ref(claim, &set.metadata) || has_owner_ref(claim, &pod.metadata));
    }
    if has_non_controller_owner(claim, set, pod) {
        return false;
    }
    let r = retention(set);
    let scaled_down = !in_ordinal_range(pod, set);
    let (set_ref, pod_ref) = (has_owner_ref(claim, &set.metadata), has_owner_ref(claim, &pod.metadata));
    match (r.delete_when_deleted, r.delete_when_scaled) {
        (false, false) => !set_ref && !pod_ref,
        (true, false) => set_ref && !pod_ref,
        (false, true) => !set_ref && scaled_down == pod_ref,
        (true, true) => scaled_down != set_ref && scaled_down == pod_ref,
    }
}

fn controller_ref_to(api_version: &str, kind: &str, meta: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Rewrites the claim's references to the set and pod to express the retention policy
/// (upstream `updateClaimOwnerRefForSetAndPod`).
pub fn update_claim_owner_refs(claim: &mut PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) {
    let unexpected = has_unexpected_controller(claim, set, pod);
    let mut refs: Vec<OwnerReference> = refs(claim)
        .iter()
        .filter(|r| !set_ref_matches(r, set) && !pod_ref_matches(r, pod))
        .cloned()
        .collect();
    if !unexpected {
        let r = retention(set);
        let scaled_down = !in_ordinal_range(pod, set);
        let add = |refs: &mut Vec<OwnerReference>, new: OwnerReference| {
            if !refs.iter().any(|r| r.uid == new.uid) {
                refs.push(new);
            }
        };
        if r.delete_when_scaled && scaled_down {
            add(&mut refs, controller_ref_to("v1", "Pod", &pod.metadata));
        }
        if r.delete_when_deleted && !(r.delete_when_scaled && scaled_down) {
            add(&mut refs, controller_ref_to("apps/v1", "StatefulSet", &set.metadata));
        }
    }
    claim.metadata.owner_references = (!refs.is_empty()).then_some(refs);
}

/// The counts a StatefulSet reports (its revisions' names aside).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Counts {
    pub replicas: i32,
    pub ready: i32,
    pub available: i32,
    pub current: i32,
    pub updated: i32,
}

/// Counts over `pods` (upstream `computeReplicaStatus`): created pods, running and ready,
/// available, and those at the current / update revision that are not terminating.
pub fn count<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    min_ready: Duration,
    now: Timestamp,
    current: &str,
    update: &str,
) -> Counts {
    let mut c = Counts::default();
    for pod in pods {
        let created = is_created(pod);
        if created {
            c.replicas += 1;
        }
        if is_running_and_ready(pod) {
            c.ready += 1;
            if is_available(pod, min_ready, now) {
                c.available += 1;
            }
        }
        if created && !podutil::is_terminating(pod) {
            let rev = pod_revision(pod);
            c.current += i32::from(rev == current);
            c.updated += i32::from(rev == update);
        }
    }
    c
}

/// The status fields compared to decide whether to write (upstream `inconsistentStatus`).
pub fn inconsistent(old: &StatefulSetStatus, new: &StatefulSetStatus) -> bool {
    let n = |v: Option<i32>| v.unwrap_or(0);
    new.observed_generation.unwrap_or(0) > old.observed_generation.unwrap_or(0)
        || new.replicas != old.replicas
        || n(new.current_replicas) != n(old.current_replicas)
        || n(new.ready_replicas) != n(old.ready_replicas)
        || n(new.updated_replicas) != n(old.updated_replicas)
        || new.current_revision != old.current_revision
        || n(new.available_replicas) != n(old.available_replicas)
        || new.update_revision != old.update_revision
}

/// Once every wanted pod runs the update revision and is ready, it becomes the current one.
pub fn complete_rolling_update(set: &StatefulSet, status: &mut StatefulSetStatus) {
    let want = replicas(set);
    let n = |v: Option<i32>| v.unwrap_or(0);
    if is_rolling(set)
        && n(status.updated_replicas) == want
        && n(status.ready_replicas) == want
        && status.replicas == want
    {
        status.current_replicas = status.updated_replicas;
        status.current_revision = status.update_revision.clone();
    }
}

pub fn write_counts(status: &mut StatefulSetStatus, c: &Counts) {
    let nonzero = |n: i32| (n != 0).then_some(n);
    status.replicas = c.replicas;
    status.ready_replicas = nonzero(c.ready);
    status.available_replicas = Some(c.available);
    status.current_replicas = nonzero(c.current);
    status.updated_replicas = nonzero(c.updated);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(policy: (&str, &str)) -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "set-uid"},
            "spec": {
                "replicas": 3,
                "serviceName": "nginx",
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "i"}],
                        "volumes": [{"name": "www", "emptyDir": {}}, {"name": "other", "emptyDir": {}}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "www", "labels": {"tier": "data"}},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                    "status": {"phase": "Pending"}}],
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": policy.0, "whenScaled": policy.1},
            },
        }))
        .unwrap()
    }

    #[test]
    fn ordinals_parse_like_upstream() {
        assert_eq!(parent_and_ordinal("web-0"), Some(("web", 0)));
        assert_eq!(parent_and_ordinal("my-web-12"), Some(("my-web", 12)));
        assert_eq!(parent_and_ordinal("web"), None);
        assert_eq!(parent_and_ordinal("web-x"), None);
        assert_eq!(parent_and_ordinal("web-99999999999"), None);
    }

    #[test]
    fn new_pod_has_identity_and_claims() {
        let s = set(("Retain", "Retain"));
        let pod = new_pod(&s, 1);
        assert_eq!(pod.metadata.name.as_deref(), Some("web-1"));
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[POD_NAME_LABEL], "web-1");
        assert_eq!(labels[POD_INDEX_LABEL], "1");
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!((spec.hostname.as_deref(), spec.subdomain.as_deref()), (Some("web-1"), Some("nginx")));
        // The template's emptyDir named like the claim is replaced by the claim.
        let vols = spec.volumes.as_ref().unwrap();
        assert_eq!(vols.len(), 2);
        let www = vols.iter().find(|v| v.name == "www").unwrap();
        assert_eq!(www.persistent_volume_claim.as_ref().unwrap().claim_name, "www-web-1");
        assert!(identity_matches(&s, &pod) && storage_matches(&s, &pod));
        let claims = claims_for(&s, 1);
        let c = &claims["www"];
        assert_eq!(c.metadata.name.as_deref(), Some("www-web-1"));
        let l = c.metadata.labels.as_ref().unwrap();
        assert_eq!((l["app"].as_str(), l["tier"].as_str()), ("web", "data"));
        assert!(c.status.is_none());
    }

    #[test]
    fn start_ordinal_shifts_range_and_partition() {
        let mut s = set(("Retain", "Retain"));
        s.spec.as_mut().unwrap().ordinals = Some(serde_json::from_value(json!({"start": 5})).unwrap());
        s.spec.as_mut().unwrap().update_strategy = Some(
            serde_json::from_value(json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}))
                .unwrap(),
        );
        assert_eq!((start_ordinal(&s), end_ordinal(&s)), (5, 7));
        let p = |o| new_versioned_pod(&s, &s, "cur", "upd", o);
        assert_eq!(pod_revision(&p(5)), "cur");
        assert_eq!(pod_revision(&p(6)), "upd");
        assert!(!in_ordinal_range(&new_pod(&s, 4), &s));
    }

    fn with_uid(mut pod: Pod, uid: &str) -> Pod {
        pod.metadata.uid = Some(uid.into());
        pod
    }

    fn claim() -> PersistentVolumeClaim {
        serde_json::from_value(json!({"metadata": {"name": "www-web-1"}})).unwrap()
    }

    #[test]
    fn retention_policy_owner_refs() {
        for (policy, in_range_owners, scaled_owners) in [
            (("Retain", "Retain"), vec![], vec![]),
            (("Delete", "Retain"), vec!["StatefulSet"], vec!["StatefulSet"]),
            (("Retain", "Delete"), vec![], vec!["Pod"]),
            (("Delete", "Delete"), vec!["StatefulSet"], vec!["Pod"]),
        ] {
            let s = set(policy);
            for (ord, want) in [(1, &in_range_owners), (7, &scaled_owners)] {
                let pod = with_uid(new_pod(&s, ord), "pod-uid");
                let mut c = claim();
                assert_eq!(claim_owner_up_to_date(&c, &s, &pod), want.is_empty(), "{policy:?} {ord}");
                update_claim_owner_refs(&mut c, &s, &pod);
                let kinds: Vec<&str> =
                    c.metadata.owner_references.iter().flatten().map(|r| r.kind.as_str()).collect();
                assert_eq!(&kinds, want, "{policy:?} ordinal {ord}");
                assert!(claim_owner_up_to_date(&c, &s, &pod));
            }
        }
    }

    #[test]
    fn stale_and_foreign_references_are_left_alone() {
        let s = set(("Delete", "Delete"));
        let pod = with_uid(new_pod(&s, 1), "pod-uid");
        let mut c = claim();
        c.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: "web-1".into(),
            uid: "old-pod-uid".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        assert!(has_stale_pod_ref(&c, &pod));
        assert!(claim_owner_up_to_date(&c, &s, &pod));
        c.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "example.com/v1".into(),
            kind: "Other".into(),
            name: "x".into(),
            uid: "x".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        assert!(has_unexpected_controller(&c, &s, &pod));
        assert!(claim_owner_up_to_date(&c, &s, &pod));
    }

    #[test]
    fn counts_and_completion() {
        let s = set(("Retain", "Retain"));
        let pod = |name: &str, rev: &str, phase: &str, ready: bool| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": name, "labels": {HASH_LABEL: rev}},
                "status": {"phase": phase, "conditions": [{"type": "Ready",
                    "status": if ready { "True" } else { "False" }}]}}))
            .unwrap()
        };
        let pods = [
            pod("web-0", "a", "Running", true),
            pod("web-1", "b", "Running", true),
            pod("web-2", "b", "Pending", false),
        ];
        let c = count(pods.iter(), Duration::ZERO, Timestamp::now(), "a", "b");
        assert_eq!(c, Counts { replicas: 3, ready: 2, available: 2, current: 1, updated: 2 });
        let mut status = StatefulSetStatus {
            update_revision: Some("b".into()),
            current_revision: Some("a".into()),
            ..Default::default()
        };
        write_counts(&mut status, &Counts { replicas: 3, ready: 3, available: 3, current: 0, updated: 3 });
        complete_rolling_update(&s, &mut status);
        assert_eq!(status.current_revision.as_deref(), Some("b"));
        assert_eq!(status.current_replicas, Some(3));
        assert!(inconsistent(&StatefulSetStatus::default(), &status));
        assert!(!inconsistent(&status, &status));
    }

    #[test]
    fn max_unavailable_rounds_down_to_at_least_one() {
        let mut s = set(("Retain", "Retain"));
        assert!(max_unavailable(&s).is_none());
        s.spec.as_mut().unwrap().update_strategy = Some(
            serde_json::from_value(
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}}),
            )
            .unwrap(),
        );
        assert_eq!(max_unavailable(&s).unwrap().unwrap(), 1);
        s.spec.as_mut().unwrap().update_strategy = Some(
            serde_json::from_value(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}}))
                .unwrap(),
        );
        assert_eq!(max_unavailable(&s).unwrap().unwrap(), 2);
    }
}
