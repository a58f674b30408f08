//! The arithmetic of rollouts, free of I/O (upstream `pkg/controller/deployment/util`):
//! template hashes, surge/unavailability bounds, how far to scale each ReplicaSet, the
//! revision and replica annotations, and the status and conditions a Deployment reports.

use serde_json::Value;
use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use crate::controller::Error;

pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
const DEPRECATED_ROLLBACK_TO: &str = "deprecated.deployment.rollback.to";
/// Upstream's `maxRevHistoryLengthInChars`.
const MAX_REVISION_HISTORY_CHARS: usize = 2000;

pub const AVAILABLE: &str = "Available";
pub const PROGRESSING: &str = "Progressing";
pub const REPLICA_FAILURE: &str = "ReplicaFailure";
pub const NEW_RS_REASON: &str = "NewReplicaSetCreated";
pub const FOUND_NEW_RS_REASON: &str = "FoundNewReplicaSet";
pub const RS_UPDATED_REASON: &str = "ReplicaSetUpdated";
pub const NEW_RS_AVAILABLE_REASON: &str = "NewReplicaSetAvailable";
pub const TIMED_OUT_REASON: &str = "ProgressDeadlineExceeded";
pub const PAUSED_REASON: &str = "DeploymentPaused";
pub const RESUMED_REASON: &str = "DeploymentResumed";
pub const FAILED_RS_CREATE_REASON: &str = "ReplicaSetCreateError";
const MIN_AVAILABLE_REASON: &str = "MinimumReplicasAvailable";
const MIN_UNAVAILABLE_REASON: &str = "MinimumReplicasUnavailable";

/// Upstream's `SafeEncodeString` alphabet: no vowels (no words), no look-alikes.
pub(crate) const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// FNV-1a, 32 bit.
fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(*b)).wrapping_mul(0x0100_0193))
}

/// The `pod-template-hash` of a template: FNV-1a over its canonical JSON (plus the
/// collision count, so a collision yields a new name), each decimal digit of the hash
/// mapped to the safe alphabet as upstream's `ComputeHash` does.
pub fn compute_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(&normalized(template)).unwrap_or_default();
    if let Some(c) = collision_count {
        bytes.extend_from_slice(c.to_string().as_bytes());
    }
    fnv1a32(&bytes)
        .to_string()
        .bytes()
        .map(|b| char::from(SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()]))
        .collect()
}

/// Fields that are plain (non-pointer) values in upstream's Go types, where `false` or `0`
/// is the same as unset: Go drops them from JSON, but a template written as protobuf (as
/// kubectl does) arrives here with them spelled out, and one written as JSON without. Both
/// must compare, and hash, the same.
const ZERO_IS_UNSET: &[&str] = &[
    "stdin",
    "stdinOnce",
    "tty",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "readOnly",
    "hostPort",
    "initialDelaySeconds",
    "generation",
];

fn prune_zero_values(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, v| {
                let zero = matches!(v, Value::Bool(false)) || v.as_i64() == Some(0);
                !(zero && ZERO_IS_UNSET.contains(&k.as_str()))
            });
            // Empty maps are Go's nil maps.
            m.retain(|k, v| {
                !(matches!(k.as_str(), "labels" | "annotations")
                    && v.as_object().is_some_and(|o| o.is_empty()))
            });
            m.values_mut().for_each(prune_zero_values);
        }
        Value::Array(a) => a.iter_mut().for_each(prune_zero_values),
        _ => {}
    }
}

/// A template as compared by `EqualIgnoreHash`: without the hash label, and with Go's
/// zero values and empty maps the same as absent ones (upstream compares semantically).
pub(crate) fn normalized(t: &PodTemplateSpec) -> Value {
    let mut v = serde_json::to_value(t).unwrap_or_default();
    if let Some(labels) = v.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) {
        labels.remove(POD_TEMPLATE_HASH);
    }
    prune_zero_values(&mut v);
    v
}

pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    normalized(a) == normalized(b)
}

/// Resolves an int-or-percent against `total`, rounding percentages up or down.
pub fn scaled_value(v: &IntOrString, total: i32, round_up: bool) -> Result<i32, Error> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let pct: i64 = s.strip_suffix('%').and_then(|p| p.parse().ok()).ok_or_else(|| {
                Error::Other(format!("invalid value for IntOrString: {s:?} is not a percentage"))
            })?;
            let exact = pct as f64 * f64::from(total) / 100.0;
            Ok(if round_up { exact.ceil() } else { exact.floor() } as i32)
        }
    }
}

/// Upstream's `ResolveFenceposts`: (maxSurge, maxUnavailable) for `desired` replicas;
/// if both round to zero, one pod may be unavailable so the rollout can still move.
pub fn resolve_fenceposts(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    desired: i32,
) -> Result<(i32, i32), Error> {
    let quarter = IntOrString::String("25%".into());
    let surge = scaled_value(max_surge.unwrap_or(&quarter), desired, true)?;
    let unavailable = scaled_value(max_unavailable.unwrap_or(&quarter), desired, false)?;
    if surge == 0 && unavailable == 0 {
        return Ok((0, 1));
    }
    Ok((surge, unavailable))
}

pub fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub fn rs_available(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0)
}

pub fn rs_actual(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map(|s| s.replicas).unwrap_or(0)
}

fn rs_ready(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0)
}

pub fn is_rolling_update(d: &Deployment) -> bool {
    let t = d.spec.as_ref().and_then(|s| s.strategy.as_ref()).and_then(|s| s.type_.as_deref());
    t.is_none_or(|t| t == "RollingUpdate")
}

pub fn is_recreate(d: &Deployment) -> bool {
    !is_rolling_update(d)
}

fn fenceposts(d: &Deployment) -> (i32, i32) {
    let ru = d.spec.as_ref().and_then(|s| s.strategy.as_ref()).and_then(|s| s.rolling_update.as_ref());
    let surge = ru.and_then(|r| r.max_surge.as_ref());
    let unavailable = ru.and_then(|r| r.max_unavailable.as_ref());
    // The API server validates both; a value it let through and we cannot read counts 0.
    resolve_fenceposts(surge, unavailable, replicas(d)).unwrap_or((0, 1))
}

pub fn max_surge(d: &Deployment) -> i32 {
    if !is_rolling_update(d) {
        return 0;
    }
    fenceposts(d).0
}

pub fn max_unavailable(d: &Deployment) -> i32 {
    let desired = replicas(d);
    if !is_rolling_update(d) || desired == 0 {
        return 0;
    }
    fenceposts(d).1.min(desired)
}

fn creation(rs: &ReplicaSet) -> Option<Timestamp> {
    rs.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

/// Oldest first, ties by name (upstream's `ReplicaSetsByCreationTimestamp`).
pub fn by_creation(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    creation(a).cmp(&creation(b)).then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// Largest first; among equals the newest (`newer`) or the oldest first.
fn by_size(a: &ReplicaSet, b: &ReplicaSet, newer: bool) -> Ordering {
    rs_replicas(b)
        .cmp(&rs_replicas(a))
        .then_with(|| if newer { by_creation(b, a) } else { by_creation(a, b) })
}

pub fn revision(rs: &ReplicaSet) -> i64 {
    rs.metadata.annotations.as_ref().and_then(|a| a.get(REVISION)).and_then(|v| v.parse().ok()).unwrap_or(0)
}

pub fn max_revision<'a>(rss: impl IntoIterator<Item = &'a ReplicaSet>) -> i64 {
    rss.into_iter().map(revision).max().unwrap_or(0)
}

/// The ReplicaSet running the deployment's template: the oldest whose template equals
/// it ignoring the hash label.
pub fn find_new<'a>(d: &Deployment, rss: &'a [ReplicaSet]) -> Option<&'a ReplicaSet> {
    let template = &d.spec.as_ref()?.template;
    let mut sorted: Vec<&ReplicaSet> = rss.iter().collect();
    sorted.sort_by(|a, b| by_creation(a, b));
    sorted.into_iter().find(|rs| {
        rs.spec.as_ref().and_then(|s| s.template.as_ref()).is_some_and(|t| equal_ignore_hash(t, template))
    })
}

/// Whether any ReplicaSet with pods was last scaled for a different replica count:
/// then the deployment was scaled, and a scale (not a rollout step) is due.
pub fn is_scaling_event(d: &Deployment, rss: &[ReplicaSet]) -> bool {
    let want = replicas(d);
    rss.iter()
        .filter(|rs| rs_replicas(rs) > 0)
        .filter_map(|rs| annotation_i32(rs, DESIRED_REPLICAS))
        .any(|desired| desired != want)
}

fn annotation_i32(rs: &ReplicaSet, key: &str) -> Option<i32> {
    rs.metadata.annotations.as_ref()?.get(key)?.parse().ok()
}

/// Upstream's `NewRSNewReplicas`: how big the new ReplicaSet may be now.
pub fn new_rs_new_replicas(d: &Deployment, all: &[&ReplicaSet], new_rs: &ReplicaSet) -> i32 {
    let desired = replicas(d);
    if !is_rolling_update(d) {
        return desired;
    }
    let current: i32 = all.iter().map(|rs| rs_replicas(rs)).sum();
    let max_total = desired + max_surge(d);
    if current >= max_total {
        return rs_replicas(new_rs);
    }
    let scale_up = (max_total - current).min(desired - rs_replicas(new_rs));
    rs_replicas(new_rs) + scale_up.max(0)
}

/// Sets the desired/max replica annotations; whether anything changed.
pub fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i32, max: i32) -> bool {
    let a = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (k, v) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        let v = v.to_string();
        if a.get(k) != Some(&v) {
            a.insert(k.to_owned(), v);
            changed = true;
        }
    }
    changed
}

fn skip_copy(key: &str) -> bool {
    [LAST_APPLIED, REVISION, REVISION_HISTORY, DESIRED_REPLICAS, MAX_REPLICAS, DEPRECATED_ROLLBACK_TO]
        .contains(&key)
}

/// Upstream's `SetNewReplicaSetAnnotations`: copies the deployment's annotations (so
/// `kubernetes.io/change-cause` shows in `rollout history`), raises the revision to
/// `new_revision` (keeping the old one in revision-history on a rollback), and for a new
/// ReplicaSet sets the replica annotations. Whether anything changed.
pub fn set_new_rs_annotations(d: &Deployment, rs: &mut ReplicaSet, new_revision: i64, exists: bool) -> bool {
    let mut changed = false;
    let a = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (k, v) in d.metadata.annotations.iter().flatten() {
        if skip_copy(k) || a.get(k) == Some(v) {
            continue;
        }
        a.insert(k.clone(), v.clone());
        changed = true;
    }
    let old = a.get(REVISION).cloned();
    let old_rev = match old.as_deref() {
        None | Some("") => 0,
        Some(s) => match s.parse::<i64>() {
            Ok(n) => n,
            // Not ours to fix; leave the ReplicaSet's revision alone.
            Err(_) => return changed,
        },
    };
    if old_rev < new_revision {
        a.insert(REVISION.to_owned(), new_revision.to_string());
        changed = true;
        if let Some(old) = old.filter(|o| !o.is_empty()) {
            let history = a.get(REVISION_HISTORY).cloned().unwrap_or_default();
            if history.is_empty() {
                a.insert(REVISION_HISTORY.to_owned(), old);
            } else {
                let mut parts: Vec<&str> = history.split(',').collect();
                let mut total = history.len() + old.len() + 1;
                let mut start = 0;
                while total > MAX_REVISION_HISTORY_CHARS && start < parts.len() {
                    total -= parts[start].len() + 1;
                    start += 1;
                }
                if total <= MAX_REVISION_HISTORY_CHARS {
                    parts = parts.split_off(start);
                    parts.push(&old);
                    let joined = parts.join(",");
                    a.insert(REVISION_HISTORY.to_owned(), joined);
                }
            }
        }
    }
    if !exists && set_replicas_annotations(rs, replicas(d), replicas(d) + max_surge(d)) {
        changed = true;
    }
    changed
}

/// Upstream's `FindActiveOrLatest`: the only ReplicaSet with replicas, or the newest
/// (new first) if none has any; `None` when several have replicas.
pub fn find_active_or_latest<'a>(
    new_rs: Option<&'a ReplicaSet>,
    old: &[&'a ReplicaSet],
) -> Option<&'a ReplicaSet> {
    if new_rs.is_none() && old.is_empty() {
        return None;
    }
    let mut old_sorted = old.to_vec();
    old_sorted.sort_by(|a, b| by_creation(b, a));
    let active: Vec<&ReplicaSet> =
        old_sorted.iter().copied().chain(new_rs).filter(|rs| rs_replicas(rs) > 0).collect();
    match active.len() {
        0 => new_rs.or_else(|| old_sorted.first().copied()),
        1 => Some(active[0]),
        _ => None,
    }
}

/// The new ReplicaSet is at the full count and all of it available.
pub fn is_saturated(d: &Deployment, rs: Option<&ReplicaSet>) -> bool {
    let Some(rs) = rs else { return false };
    let want = replicas(d);
    annotation_i32(rs, DESIRED_REPLICAS) == Some(want) && rs_replicas(rs) == want && rs_available(rs) == want
}

/// Upstream's `getReplicaSetFraction`: this ReplicaSet's share of a resize, proportional
/// to its size at the deployment's last scale (the max-replicas annotation).
fn rs_fraction(rs: &ReplicaSet, d: &Deployment) -> i32 {
    let desired = replicas(d);
    if desired == 0 {
        return -rs_replicas(rs);
    }
    let deployment_replicas = desired + max_surge(d);
    let annotated = annotation_i32(rs, MAX_REPLICAS)
        .unwrap_or_else(|| d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0));
    if annotated == 0 {
        return 0;
    }
    let size = f64::from(rs_replicas(rs)) * f64::from(deployment_replicas) / f64::from(annotated);
    size.round() as i32 - rs_replicas(rs)
}

fn proportion(rs: &ReplicaSet, d: &Deployment, to_add: i32, added: i32) -> i32 {
    if rs_replicas(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = rs_fraction(rs, d);
    let allowed = to_add - added;
    if to_add > 0 { fraction.min(allowed) } else { fraction.max(allowed) }
}

/// Upstream's proportional scaling during a rollout: each active ReplicaSet gets its
/// share of the change; leftovers go to the largest. Returns (index into `active`, new
/// size, "up"/"down") in the order to apply.
pub fn proportional_scale(d: &Deployment, active: &[&ReplicaSet]) -> Vec<(usize, i32, &'static str)> {
    let total: i32 = active.iter().map(|rs| rs_replicas(rs)).sum();
    let allowed = if replicas(d) > 0 { replicas(d) + max_surge(d) } else { 0 };
    let to_add = allowed - total;
    let mut order: Vec<usize> = (0..active.len()).collect();
    let op = match to_add.cmp(&0) {
        Ordering::Greater => {
            order.sort_by(|&a, &b| by_size(active[a], active[b], true));
            "up"
        }
        Ordering::Less => {
            order.sort_by(|&a, &b| by_size(active[a], active[b], false));
            "down"
        }
        Ordering::Equal => "",
    };
    let mut added = 0;
    let mut sizes: Vec<i32> = Vec::with_capacity(order.len());
    for &i in &order {
        let rs = active[i];
        if to_add != 0 {
            let p = proportion(rs, d, to_add, added);
            sizes.push(rs_replicas(rs) + p);
            added += p;
        } else {
            sizes.push(rs_replicas(rs));
        }
    }
    if to_add != 0 && !sizes.is_empty() {
        sizes[0] = (sizes[0] + to_add - added).max(0);
    }
    order.into_iter().zip(sizes).map(|(i, s)| (i, s, op)).collect()
}

/// Upstream's `cleanupUnhealthyReplicas`: scales down old ReplicaSets' unavailable pods
/// (oldest ReplicaSet first), at most `max_cleanup` in all. (index, new size) pairs.
pub fn plan_cleanup_unhealthy(old: &[ReplicaSet], max_cleanup: i32) -> Vec<(usize, i32)> {
    let mut order: Vec<usize> = (0..old.len()).collect();
    order.sort_by(|&a, &b| by_creation(&old[a], &old[b]));
    let mut total = 0;
    let mut plan = Vec::new();
    for i in order {
        if total >= max_cleanup {
            break;
        }
        let rs = &old[i];
        let (spec, avail) = (rs_replicas(rs), rs_available(rs));
        if spec == 0 || spec == avail {
            continue;
        }
        let down = (max_cleanup - total).min(spec - avail).max(0);
        if down == 0 {
            continue;
        }
        plan.push((i, spec - down));
        total += down;
    }
    plan
}

/// Upstream's `scaleDownOldReplicaSetsForRollingUpdate`: scales old ReplicaSets down
/// (oldest first) as far as availability above `replicas - maxUnavailable` allows;
/// `available` is the available count over all ReplicaSets.
pub fn plan_scale_down_old(d: &Deployment, old: &[ReplicaSet], available: i32) -> Vec<(usize, i32)> {
    let min_available = replicas(d) - max_unavailable(d);
    if available <= min_available {
        return Vec::new();
    }
    let wanted = available - min_available;
    let mut order: Vec<usize> = (0..old.len()).collect();
    order.sort_by(|&a, &b| by_creation(&old[a], &old[b]));
    let mut total = 0;
    let mut plan = Vec::new();
    for i in order {
        if total >= wanted {
            break;
        }
        let spec = rs_replicas(&old[i]);
        if spec == 0 {
            continue;
        }
        let down = spec.min(wanted - total);
        plan.push((i, spec - down));
        total += down;
    }
    plan
}

/// How far old ReplicaSets may shrink in one step of a rolling update (upstream's
/// `maxScaledDown` in `reconcileOldReplicaSets`).
pub fn max_scaled_down(d: &Deployment, all: &[&ReplicaSet], new_rs: &ReplicaSet) -> i32 {
    let all_pods: i32 = all.iter().map(|rs| rs_replicas(rs)).sum();
    let min_available = replicas(d) - max_unavailable(d);
    let new_unavailable = rs_replicas(new_rs) - rs_available(new_rs);
    all_pods - min_available - new_unavailable
}

pub fn now() -> Timestamp {
    // API times carry whole seconds; comparing against finer ones would always differ.
    let t = Timestamp::now();
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

pub fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: Timestamp,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

pub fn get_condition<'a>(status: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    status.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

/// Upstream's `SetDeploymentCondition`: no change when status and reason are the same;
/// the transition time is kept while the status is.
pub fn set_condition(status: &mut DeploymentStatus, mut cond: DeploymentCondition) {
    if let Some(cur) = get_condition(status, &cond.type_) {
        if cur.status == cond.status && cur.reason == cond.reason {
            return;
        }
        if cur.status == cond.status {
            cond.last_transition_time = cur.last_transition_time.clone();
        }
    }
    remove_condition(status, &cond.type_);
    status.conditions.get_or_insert_with(Vec::new).push(cond);
}

pub fn remove_condition(status: &mut DeploymentStatus, type_: &str) {
    if let Some(c) = status.conditions.as_mut() {
        c.retain(|c| c.type_ != type_);
    }
}

pub fn progress_deadline(d: &Deployment) -> Option<i32> {
    d.spec.as_ref().and_then(|s| s.progress_deadline_seconds).filter(|s| *s != i32::MAX)
}

fn nz(v: i32) -> Option<i32> {
    (v != 0).then_some(v)
}

fn st(v: Option<i32>) -> i32 {
    v.unwrap_or(0)
}

/// Two status counts are equal, absent counting as zero.
pub fn st_eq(a: Option<i32>, b: Option<i32>) -> bool {
    st(a) == st(b)
}

/// Upstream's `calculateStatus`: counts over all ReplicaSets and the Available condition.
pub fn calculate_status(
    d: &Deployment,
    all: &[&ReplicaSet],
    new_rs: Option<&ReplicaSet>,
    now: Timestamp,
) -> DeploymentStatus {
    let available = all.iter().map(|rs| rs_available(rs)).sum::<i32>();
    let total = all.iter().map(|rs| rs_replicas(rs)).sum::<i32>();
    let old = d.status.clone().unwrap_or_default();
    let mut status = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: nz(all.iter().map(|rs| rs_actual(rs)).sum()),
        updated_replicas: nz(new_rs.map(rs_actual).unwrap_or(0)),
        ready_replicas: nz(all.iter().map(|rs| rs_ready(rs)).sum()),
        available_replicas: nz(available),
        unavailable_replicas: nz((total - available).max(0)),
        collision_count: old.collision_count,
        conditions: old.conditions.clone(),
        terminating_replicas: old.terminating_replicas,
    };
    let cond = if available >= replicas(d) - max_unavailable(d) {
        new_condition(
            AVAILABLE,
            "True",
            MIN_AVAILABLE_REASON,
            "Deployment has minimum availability.".into(),
            now,
        )
    } else {
        new_condition(
            AVAILABLE,
            "False",
            MIN_UNAVAILABLE_REASON,
            "Deployment does not have minimum availability.".into(),
            now,
        )
    };
    set_condition(&mut status, cond);
    status
}

/// Every pod is updated and available, and the status describes the current spec.
pub fn is_complete(d: &Deployment, s: &DeploymentStatus) -> bool {
    let want = replicas(d);
    st(s.updated_replicas) == want
        && st(s.replicas) == want
        && st(s.available_replicas) == want
        && s.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
}

/// Whether the new status shows progress over the recorded one.
pub fn is_progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = d.status.clone().unwrap_or_default();
    let old_old = st(old.replicas) - st(old.updated_replicas);
    let new_old = st(new.replicas) - st(new.updated_replicas);
    st(new.updated_replicas) > st(old.updated_replicas)
        || new_old < old_old
        || st(new.ready_replicas) > st(old.ready_replicas)
        || st(new.available_replicas) > st(old.available_replicas)
}

/// Whether the last progress is older than the progress deadline.
pub fn is_timed_out(d: &Deployment, new: &DeploymentStatus, now: Timestamp) -> bool {
    let Some(deadline) = progress_deadline(d) else { return false };
    let Some(cond) = get_condition(new, PROGRESSING) else { return false };
    match cond.reason.as_deref() {
        Some(NEW_RS_AVAILABLE_REASON) => false,
        Some(TIMED_OUT_REASON) => true,
        _ => cond
            .last_update_time
            .as_ref()
            .is_some_and(|t| t.0.as_second() + i64::from(deadline) < now.as_second()),
    }
}

/// Whether two statuses are the same as upstream's `DeepEqual` sees them (zero counts
/// written or omitted alike).
pub fn status_equal(a: &DeploymentStatus, b: &DeploymentStatus) -> bool {
    a.observed_generation == b.observed_generation
        && st(a.replicas) == st(b.replicas)
        && st(a.updated_replicas) == st(b.updated_replicas)
        && st(a.ready_replicas) == st(b.ready_replicas)
        && st(a.available_replicas) == st(b.available_replicas)
        && st(a.unavailable_replicas) == st(b.unavailable_replicas)
        && a.collision_count == b.collision_count
        && a.conditions.as_deref().unwrap_or_default() == b.conditions.as_deref().unwrap_or_default()
}

/// The first `ReplicaFailure` of the new ReplicaSet, else of an old one, as a
/// deployment condition.
pub fn replica_failure(all: &[&ReplicaSet], new_rs: Option<&ReplicaSet>) -> Option<DeploymentCondition> {
    let failure = |rs: &ReplicaSet| {
        let c = rs
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == REPLICA_FAILURE && c.status == "True")?;
        Some(DeploymentCondition {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
            last_update_time: c.last_transition_time.clone(),
            last_transition_time: c.last_transition_time.clone(),
        })
    };
    new_rs.and_then(failure).or_else(|| {
        all.iter()
            .filter(|rs| new_rs.is_none_or(|n| n.metadata.uid != rs.metadata.uid))
            .find_map(|rs| failure(rs))
    })
}

/// Old ReplicaSets to delete beyond the revision history limit: lowest revisions first,
/// only those with no replicas at all and a status that caught up.
pub fn cleanup_candidates<'a>(old: &[&'a ReplicaSet], limit: i32) -> Vec<&'a ReplicaSet> {
    let mut alive: Vec<&ReplicaSet> =
        old.iter().copied().filter(|rs| rs.metadata.deletion_timestamp.is_none()).collect();
    let diff = alive.len() as i64 - i64::from(limit.max(0));
    if diff <= 0 {
        return Vec::new();
    }
    alive.sort_by(|a, b| revision(a).cmp(&revision(b)).then_with(|| by_creation(a, b)));
    alive
        .into_iter()
        .take(diff as usize)
        .filter(|rs| {
            let observed = rs.status.as_ref().and_then(|s| s.observed_generation).unwrap_or(0);
            rs_actual(rs) == 0 && rs_replicas(rs) == 0 && rs.metadata.generation.unwrap_or(0) <= observed
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{
        DeploymentSpec, DeploymentStrategy, ReplicaSetSpec, ReplicaSetStatus, RollingUpdateDeployment,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn deployment(replicas: i32, surge: IntOrString, unavailable: IntOrString) -> Deployment {
        Deployment {
            metadata: ObjectMeta { name: Some("web".into()), generation: Some(1), ..Default::default() },
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                strategy: Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: Some(surge),
                        max_unavailable: Some(unavailable),
                    }),
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn rs(name: &str, created: i64, spec: i32, available: i32) -> ReplicaSet {
        ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(name.into()),
                creation_timestamp: Some(Time(Timestamp::from_second(created).unwrap())),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec { replicas: Some(spec), ..Default::default() }),
            status: Some(ReplicaSetStatus {
                replicas: spec,
                available_replicas: Some(available),
                ..Default::default()
            }),
        }
    }

    fn pct(s: &str) -> IntOrString {
        IntOrString::String(s.into())
    }

    #[test]
    fn hash_is_stable_safe_and_collision_sensitive() {
        let t = PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some([("app".into(), "web".into())].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let h = compute_hash(&t, None);
        assert_eq!(h, compute_hash(&t, None));
        assert!(!h.is_empty() && h.bytes().all(|b| SAFE_ALPHABET.contains(&b)));
        assert_ne!(h, compute_hash(&t, Some(1)));
        let mut t2 = t.clone();
        t2.metadata.as_mut().unwrap().labels.as_mut().unwrap().insert(POD_TEMPLATE_HASH.into(), h.clone());
        assert!(equal_ignore_hash(&t, &t2));
        t2.metadata.as_mut().unwrap().labels.as_mut().unwrap().insert("app".into(), "api".into());
        assert!(!equal_ignore_hash(&t, &t2));
        // FNV-1a reference vectors.
        assert_eq!(fnv1a32(b""), 0x811c9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c292c);
    }

    #[test]
    fn fenceposts_round_surge_up_and_unavailable_down() {
        assert_eq!(resolve_fenceposts(Some(&pct("25%")), Some(&pct("25%")), 10).unwrap(), (3, 2));
        assert_eq!(resolve_fenceposts(None, None, 1).unwrap(), (1, 0));
        assert_eq!(resolve_fenceposts(Some(&IntOrString::Int(0)), Some(&pct("10%")), 5).unwrap(), (0, 1));
        assert_eq!(
            resolve_fenceposts(Some(&IntOrString::Int(2)), Some(&IntOrString::Int(1)), 5).unwrap(),
            (2, 1)
        );
        assert!(resolve_fenceposts(Some(&pct("x")), None, 5).is_err());
        let d = deployment(3, IntOrString::Int(0), IntOrString::Int(5));
        assert_eq!(max_unavailable(&d), 3);
    }

    #[test]
    fn new_rs_scales_up_within_surge() {
        let d = deployment(10, pct("25%"), pct("25%"));
        let old = rs("old", 1, 10, 10);
        let new = rs("new", 2, 0, 0);
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), 3);
        let new = rs("new", 2, 3, 0);
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), 3);
        let old = rs("old", 1, 8, 8);
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), 5);
        let mut recreate = d.clone();
        recreate.spec.as_mut().unwrap().strategy =
            Some(DeploymentStrategy { type_: Some("Recreate".into()), rolling_update: None });
        assert_eq!(new_rs_new_replicas(&recreate, &[&old, &new], &new), 10);
    }

    #[test]
    fn old_rs_scale_down_respects_availability() {
        let d = deployment(10, pct("25%"), pct("25%"));
        let old = vec![rs("old", 1, 10, 10)];
        let new = rs("new", 2, 3, 0);
        // 13 pods, 8 must stay available, 3 new ones unavailable: 2 may go.
        assert_eq!(max_scaled_down(&d, &[&old[0], &new], &new), 2);
        assert_eq!(plan_scale_down_old(&d, &old, 10), vec![(0, 8)]);
        // Unhealthy old pods go first, oldest ReplicaSet first.
        let old = vec![rs("b", 5, 4, 1), rs("a", 1, 3, 3)];
        assert_eq!(plan_cleanup_unhealthy(&old, 2), vec![(0, 2)]);
        assert_eq!(plan_scale_down_old(&d, &old, 12), vec![(1, 0), (0, 3)]);
        assert_eq!(plan_scale_down_old(&d, &old, 8), vec![]);
    }

    #[test]
    fn proportional_scaling_splits_by_share() {
        // 10 replicas mid-rollout (surge 3), scaled to 20: 13 -> 25 (+12).
        let mut d = deployment(20, pct("25%"), pct("25%"));
        d.status = Some(DeploymentStatus { replicas: Some(13), ..Default::default() });
        let mut old = rs("old", 1, 8, 8);
        let mut new = rs("new", 2, 5, 0);
        for r in [&mut old, &mut new] {
            set_replicas_annotations(r, 10, 13);
        }
        let plan = proportional_scale(&d, &[&old, &new]);
        let size = |i: usize| plan.iter().find(|(j, _, _)| *j == i).unwrap().1;
        assert_eq!(size(0) + size(1), 25);
        assert_eq!((size(0), size(1)), (15, 10));
        assert!(plan.iter().all(|(_, _, op)| *op == "up"));
        // Down to 0 empties everything.
        let d0 = deployment(0, pct("25%"), pct("25%"));
        let plan = proportional_scale(&d0, &[&old, &new]);
        assert!(plan.iter().all(|(_, s, op)| *s == 0 && *op == "down"));
    }

    #[test]
    fn revision_annotations_and_rollback_history() {
        let mut d = deployment(3, pct("25%"), pct("25%"));
        d.metadata.annotations = Some(
            [
                ("kubernetes.io/change-cause".to_string(), "v2".to_string()),
                (LAST_APPLIED.to_string(), "{}".to_string()),
                (REVISION.to_string(), "9".to_string()),
            ]
            .into(),
        );
        let mut r = rs("x", 1, 0, 0);
        assert!(set_new_rs_annotations(&d, &mut r, 1, false));
        let a = r.metadata.annotations.clone().unwrap();
        assert_eq!(a.get(REVISION).map(String::as_str), Some("1"));
        assert_eq!(a.get("kubernetes.io/change-cause").map(String::as_str), Some("v2"));
        assert!(!a.contains_key(LAST_APPLIED));
        assert_eq!(a.get(DESIRED_REPLICAS).map(String::as_str), Some("3"));
        assert_eq!(a.get(MAX_REPLICAS).map(String::as_str), Some("4"));
        // Rolled back to later: revision bumps, history remembers.
        assert!(set_new_rs_annotations(&d, &mut r, 3, true));
        let a = r.metadata.annotations.clone().unwrap();
        assert_eq!(a.get(REVISION).map(String::as_str), Some("3"));
        assert_eq!(a.get(REVISION_HISTORY).map(String::as_str), Some("1"));
        assert!(!set_new_rs_annotations(&d, &mut r, 2, true));
    }

    #[test]
    fn conditions_keep_transition_time() {
        let t0 = Timestamp::from_second(1000).unwrap();
        let t1 = Timestamp::from_second(2000).unwrap();
        let mut s = DeploymentStatus::default();
        set_condition(&mut s, new_condition(PROGRESSING, "True", NEW_RS_REASON, "a".into(), t0));
        set_condition(&mut s, new_condition(PROGRESSING, "True", RS_UPDATED_REASON, "b".into(), t1));
        let c = get_condition(&s, PROGRESSING).unwrap();
        assert_eq!(c.reason.as_deref(), Some(RS_UPDATED_REASON));
        assert_eq!(c.last_transition_time.as_ref().unwrap().0, t0);
        assert_eq!(c.last_update_time.as_ref().unwrap().0, t1);
        let mut d = deployment(3, pct("25%"), pct("25%"));
        d.spec.as_mut().unwrap().progress_deadline_seconds = Some(600);
        assert!(!is_timed_out(&d, &s, Timestamp::from_second(2500).unwrap()));
        assert!(is_timed_out(&d, &s, Timestamp::from_second(2601).unwrap()));
    }

    #[test]
    fn cleanup_only_empty_lowest_revisions() {
        let mut a = rs("a", 1, 0, 0);
        a.metadata.annotations = Some([(REVISION.to_string(), "1".to_string())].into());
        let mut b = rs("b", 2, 1, 1);
        b.metadata.annotations = Some([(REVISION.to_string(), "2".to_string())].into());
        let mut c = rs("c", 3, 0, 0);
        c.metadata.annotations = Some([(REVISION.to_string(), "3".to_string())].into());
        let got = cleanup_candidates(&[&c, &b, &a], 1);
        assert_eq!(got.iter().map(|r| r.metadata.name.as_deref().unwrap()).collect::<Vec<_>>(), vec!["a"]);
    }
}
