//! The disruption controller (upstream `pkg/controller/disruption`): keeps each
//! PodDisruptionBudget's status — healthy pods, the healthy count it needs, how many
//! disruptions it allows now, the pods the eviction API is deleting (`disruptedPods`) and
//! the `DisruptionAllowed` condition — which the API server's `pods/eviction` checks and
//! decrements. Percentages (and any `maxUnavailable`) count against the scale of the pods'
//! controllers (Deployment, ReplicaSet, StatefulSet, ReplicationController, or any
//! resource with a `scale` subresource). When a sync fails the budget is set to allow no
//! disruption: the controller fails safe, never open.
//!
//! It also resets a pod's stale `DisruptionTarget` condition (set by an eviction whose
//! delete never came) after two minutes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, GroupVersionKind, PostParams};

use component_base::labels::Selector;

use crate::controller::{self, Context, Error};
use crate::events::Type;
use crate::informers::{Event, Informer, key_of, split_key};
use crate::owners;
use crate::podutil;
use crate::workqueue::Queue;

/// The events' source, as upstream's disruption controller names itself.
const COMPONENT: &str = "controllermanager";
/// How long a pod stays in `disruptedPods` (not counted healthy) waiting for its deletion.
pub const DELETION_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a `DisruptionTarget` condition may stay on a pod that is not being deleted.
const STALE_POD_DISRUPTION_TIMEOUT: Duration = Duration::from_secs(120);

pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";
const SYNC_FAILED: &str = "SyncFailed";
const SUFFICIENT_PODS: &str = "SufficientPods";
const INSUFFICIENT_PODS: &str = "InsufficientPods";

struct Controller {
    client: kube::Client,
    ctx: Context,
    pdbs: Arc<Informer<PodDisruptionBudget>>,
    pods: Arc<Informer<Pod>>,
    rcs: Arc<Informer<ReplicationController>>,
    rss: Arc<Informer<ReplicaSet>>,
    deployments: Arc<Informer<Deployment>>,
    statefulsets: Arc<Informer<StatefulSet>>,
    queue: Arc<Queue>,
    stale: Arc<Queue>,
}

pub fn start(ctx: &Context) -> Result<(), Error> {
    let ctrl = Arc::new(Controller {
        client: ctx.client.clone(),
        ctx: ctx.clone(),
        pdbs: ctx.informers.get::<PodDisruptionBudget>(),
        pods: ctx.informers.get::<Pod>(),
        rcs: ctx.informers.get::<ReplicationController>(),
        rss: ctx.informers.get::<ReplicaSet>(),
        deployments: ctx.informers.get::<Deployment>(),
        statefulsets: ctx.informers.get::<StatefulSet>(),
        queue: ctx.queue("disruption"),
        stale: ctx.queue("stale_pod_disruption"),
    });
    {
        let c = ctrl.clone();
        ctrl.pdbs.add_handler(move |ev| match ev {
            Event::Add(p) | Event::Update(_, p) | Event::Delete(p) => c.queue.add(key_of(&***p)),
        });
    }
    {
        let c = ctrl.clone();
        ctrl.pods.add_handler(move |ev| {
            let (pod, deleted) = match ev {
                Event::Add(p) | Event::Update(_, p) => (p, false),
                Event::Delete(p) => (p, true),
            };
            if let Some(pdb) = c.pdb_for_pod(pod) {
                c.queue.add(key_of(&*pdb));
            }
            if !deleted && let Some(after) = stale_disruption_condition(pod, Timestamp::now()) {
                c.stale.add_after(key_of(&***pod), after);
            }
        });
    }
    {
        let c = ctrl.clone();
        controller::run_workers(ctx, ctrl.queue.clone(), 1, move |key| {
            let c = c.clone();
            async move { c.sync(&key).await }
        });
    }
    let c = ctrl.clone();
    controller::run_workers(ctx, ctrl.stale.clone(), 1, move |key| {
        let c = c.clone();
        async move { c.sync_stale_pod_disruption(&key).await }
    });
    Ok(())
}

/// A PDB's selector (policy/v1): a nil one selects nothing, an empty one every pod of the
/// namespace.
fn selector_of(pdb: &PodDisruptionBudget) -> Selector {
    Selector::from_label_selector(pdb.spec.as_ref().and_then(|s| s.selector.as_ref()))
}

/// When a pod's `DisruptionTarget` condition becomes stale (zero: now), if it can: not on
/// pods being deleted or finished, nor the kubelet's own (`TerminationByKubelet`).
fn stale_disruption_condition(pod: &Pod, now: Timestamp) -> Option<Duration> {
    if pod.metadata.deletion_timestamp.is_some() || podutil::is_terminal(pod) {
        return None;
    }
    let c = podutil::condition(pod, "DisruptionTarget")?;
    if c.status != "True" || c.reason.as_deref() == Some("TerminationByKubelet") {
        return None;
    }
    let since =
        c.last_transition_time.as_ref().map(|t| now.duration_since(t.0).as_secs_f64()).unwrap_or(f64::MAX);
    Some(Duration::from_secs_f64((STALE_POD_DISRUPTION_TIMEOUT.as_secs_f64() - since).max(0.0)))
}

/// Upstream's `GetScaledValueFromIntOrPercent` rounding up.
pub fn scaled_value(v: &IntOrString, total: i32) -> Result<i32, String> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let pct: i64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid value {s:?}"))?;
            Ok(((pct * total as i64) as f64 / 100.0).ceil() as i32)
        }
    }
}

/// The healthy count a budget needs and the number of pods it expects: (expected,
/// desired healthy).
pub fn desired_healthy(
    min_available: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    pods: usize,
    scale: impl FnOnce() -> Result<i32, String>,
) -> Result<(i32, i32), String> {
    if let Some(max) = max_unavailable {
        let expected = scale()?;
        let desired = (expected - scaled_value(max, expected)?).max(0);
        return Ok((expected, desired));
    }
    match min_available {
        Some(IntOrString::Int(n)) => Ok((pods as i32, *n)),
        Some(min) => {
            let expected = scale()?;
            Ok((expected, scaled_value(min, expected)?))
        }
        None => Ok((0, 0)),
    }
}

/// Upstream's `countHealthyPods`: ready, not being deleted, not evicted recently.
fn count_healthy(pods: &[Arc<Pod>], disrupted: &BTreeMap<String, Time>, now: Timestamp) -> i32 {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            let name = p.metadata.name.as_deref().unwrap_or_default();
            !disrupted.get(name).is_some_and(|t| expires(t) > now)
        })
        .filter(|p| podutil::is_ready(p))
        .count() as i32
}

fn expires(t: &Time) -> Timestamp {
    t.0.checked_add(DELETION_TIMEOUT).unwrap_or(t.0)
}

/// Sets a condition as `meta.SetStatusCondition`: the transition time moves only when the
/// status does.
fn set_condition(conds: &mut Vec<Condition>, c: Condition) {
    match conds.iter_mut().find(|x| x.type_ == c.type_) {
        Some(x) => {
            if x.status != c.status {
                x.status = c.status;
                x.last_transition_time = c.last_transition_time;
            }
            x.reason = c.reason;
            x.message = c.message;
            x.observed_generation = c.observed_generation;
        }
        None => conds.push(c),
    }
}

fn now_time() -> Time {
    let now = Timestamp::now();
    Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// `DisruptionAllowed` from `disruptionsAllowed` (upstream's
/// `UpdateDisruptionAllowedCondition`; the eviction API uses it too).
pub fn update_disruption_allowed_condition(status: &mut PodDisruptionBudgetStatus) {
    let (s, reason) =
        if status.disruptions_allowed > 0 { ("True", SUFFICIENT_PODS) } else { ("False", INSUFFICIENT_PODS) };
    let cond = Condition {
        type_: DISRUPTION_ALLOWED.into(),
        status: s.into(),
        reason: reason.into(),
        message: String::new(),
        observed_generation: status.observed_generation,
        last_transition_time: now_time(),
    };
    set_condition(status.conditions.get_or_insert_with(Vec::new), cond);
}

fn conditions_up_to_date(pdb: &PodDisruptionBudget) -> bool {
    let Some(status) = pdb.status.as_ref() else { return false };
    let Some(c) = status.conditions.iter().flatten().find(|c| c.type_ == DISRUPTION_ALLOWED) else {
        return false;
    };
    if status.observed_generation != pdb.metadata.generation {
        return false;
    }
    if status.disruptions_allowed > 0 {
        c.status == "True" && c.reason == SUFFICIENT_PODS
    } else {
        c.status == "False" && c.reason == INSUFFICIENT_PODS
    }
}

impl Controller {
    fn event<K: kube::Resource<DynamicType = ()>>(&self, obj: &K, kind: Type, reason: &str, message: String) {
        self.ctx.recorder.event(COMPONENT, obj, kind, reason, message);
    }

    /// The first budget of the pod's namespace that selects it (upstream warns when more do).
    fn pdb_for_pod(&self, pod: &Pod) -> Option<Arc<PodDisruptionBudget>> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let matching: Vec<_> =
            self.pdbs.list_namespace(ns).into_iter().filter(|p| selector_of(p).matches(&labels)).collect();
        if matching.len() > 1 {
            let msg = format!(
                "Pod {:?}/{:?} matches multiple PodDisruptionBudgets.  Chose {:?} arbitrarily.",
                ns,
                pod.metadata.name.as_deref().unwrap_or_default(),
                matching[0].metadata.name.as_deref().unwrap_or_default()
            );
            self.event(pod, Type::Warning, "MultiplePodDisruptionBudgets", msg);
        }
        matching.into_iter().next()
    }

    async fn sync(&self, key: &str) -> Result<(), Error> {
        let Some(pdb) = self.pdbs.get(key) else { return Ok(()) };
        match self.try_sync(&pdb).await {
            Ok(()) => Ok(()),
            // Someone else wrote the status (an eviction): just sync again.
            Err(e) if e.is_conflict() => Err(e),
            Err(e) => {
                tracing::warn!(pdb = %key, err = %e, "failed to sync PodDisruptionBudget");
                self.fail_safe(&pdb, &e.to_string()).await
            }
        }
    }

    async fn try_sync(&self, pdb: &PodDisruptionBudget) -> Result<(), Error> {
        let ns = pdb.metadata.namespace.as_deref().unwrap_or_default();
        let selector = selector_of(pdb);
        let pods: Vec<Arc<Pod>> = self
            .pods
            .list_namespace(ns)
            .into_iter()
            .filter(|p| selector.matches(p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())))
            .collect();
        if pods.is_empty() {
            self.event(pdb, Type::Normal, "NoPods", "No matching pods found".into());
        }
        let spec = pdb.spec.clone().unwrap_or_default();
        let uses_scale =
            spec.max_unavailable.is_some() || matches!(spec.min_available, Some(IntOrString::String(_)));
        let mut unmanaged = Vec::new();
        // Only percentages and maxUnavailable need the controllers' scale.
        let expected_scale =
            if uses_scale { self.expected_scale(&pods, &mut unmanaged).await } else { Ok(0) };
        let counts =
            desired_healthy(spec.min_available.as_ref(), spec.max_unavailable.as_ref(), pods.len(), || {
                expected_scale.clone()
            });
        let (expected, desired) = match counts {
            Ok(c) => c,
            Err(e) => {
                self.event(
                    pdb,
                    Type::Warning,
                    "CalculateExpectedPodCountFailed",
                    format!("Failed to calculate the number of expected pods: {e}"),
                );
                return Err(Error::Other(e));
            }
        };
        if !unmanaged.is_empty() {
            self.event(
                pdb,
                Type::Warning,
                "UnmanagedPods",
                format!(
                    "Pods selected by this PodDisruptionBudget (selector: {:?}) were found to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value.",
                    spec.selector
                ),
            );
        }
        let now = Timestamp::now();
        let (disrupted, recheck) = self.disrupted_pod_map(&pods, pdb, now);
        let healthy = count_healthy(&pods, &disrupted, now);
        self.update_status(pdb, healthy, desired, expected, disrupted).await?;
        if let Some(at) = recheck {
            let d = at.duration_since(now).as_secs_f64().max(0.0);
            self.queue.add_after(key_of(pdb), Duration::from_secs_f64(d));
        }
        Ok(())
    }

    /// The sum of the scales of the pods' controllers; pods without one are `unmanaged`.
    async fn expected_scale(&self, pods: &[Arc<Pod>], unmanaged: &mut Vec<String>) -> Result<i32, String> {
        let mut scales: BTreeMap<String, i32> = BTreeMap::new();
        for pod in pods {
            let Some(r) = owners::controller_of(&pod.metadata) else {
                unmanaged.push(pod.metadata.name.clone().unwrap_or_default());
                continue;
            };
            if scales.contains_key(&r.uid) {
                continue;
            }
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            match self.controller_scale(r, ns).await? {
                Some((uid, scale)) => {
                    scales.insert(uid, scale);
                }
                None => {
                    return Err(format!(
                        "found no controllers for pod {:?}",
                        pod.metadata.name.as_deref().unwrap_or_default()
                    ));
                }
            }
        }
        Ok(scales.values().sum())
    }

    /// The controller a reference names and its desired replicas, by upstream's finders.
    async fn controller_scale(&self, r: &OwnerReference, ns: &str) -> Result<Option<(String, i32)>, String> {
        let group = r.api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        let same = |uid: Option<&String>| uid.map(String::as_str) == Some(r.uid.as_str());
        match (r.kind.as_str(), group) {
            ("ReplicationController", "") => {
                if let Some(rc) =
                    self.rcs.get_namespaced(ns, &r.name).filter(|x| same(x.metadata.uid.as_ref()))
                {
                    let n = rc.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                    return Ok(Some((r.uid.clone(), n)));
                }
            }
            ("ReplicaSet", "apps" | "extensions") => {
                if let Some(rs) =
                    self.rss.get_namespaced(ns, &r.name).filter(|x| same(x.metadata.uid.as_ref()))
                {
                    match owners::controller_of(&rs.metadata) {
                        Some(d) if d.kind == "Deployment" => {
                            let dg = d.api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
                            if matches!(dg, "apps" | "extensions")
                                && let Some(dep) = self
                                    .deployments
                                    .get_namespaced(ns, &d.name)
                                    .filter(|x| x.metadata.uid.as_deref() == Some(d.uid.as_str()))
                            {
                                let n = dep.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                                return Ok(Some((d.uid.clone(), n)));
                            }
                        }
                        _ => {
                            let n = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                            return Ok(Some((r.uid.clone(), n)));
                        }
                    }
                }
            }
            ("StatefulSet", "apps") => {
                if let Some(ss) =
                    self.statefulsets.get_namespaced(ns, &r.name).filter(|x| same(x.metadata.uid.as_ref()))
                {
                    let n = ss.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                    return Ok(Some((r.uid.clone(), n)));
                }
            }
            _ => {}
        }
        self.scale_of(r, ns).await
    }

    /// Any other controller: its `scale` subresource, found through discovery.
    async fn scale_of(&self, r: &OwnerReference, ns: &str) -> Result<Option<(String, i32)>, String> {
        let (group, version) = r.api_version.rsplit_once('/').unwrap_or(("", r.api_version.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, &r.kind);
        let (ar, caps) = kube::discovery::pinned_kind(&self.client, &gvk).await.map_err(|e| e.to_string())?;
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &ar);
        match api.get_subresource("scale", &r.name).await {
            Ok(scale) => {
                if scale.metadata.uid.as_deref() != Some(r.uid.as_str()) {
                    return Ok(None);
                }
                let n = scale.data["spec"]["replicas"].as_i64().unwrap_or(0) as i32;
                Ok(Some((r.uid.clone(), n)))
            }
            Err(e) if controller::api_code(&e) == Some(404) => {
                if caps.subresources.iter().any(|(s, _)| s.plural == "scale") {
                    Ok(None)
                } else {
                    Err(format!("{}.{} does not implement the scale subresource", ar.plural, ar.group))
                }
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// `disruptedPods` without the entries whose pod is gone, being deleted, or past the
    /// deletion timeout; and when the earliest remaining entry expires.
    fn disrupted_pod_map(
        &self,
        pods: &[Arc<Pod>],
        pdb: &PodDisruptionBudget,
        now: Timestamp,
    ) -> (BTreeMap<String, Time>, Option<Timestamp>) {
        let mut out = BTreeMap::new();
        let mut recheck: Option<Timestamp> = None;
        let Some(disrupted) = pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref()) else {
            return (out, None);
        };
        for pod in pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let Some(t) = disrupted.get(&name) else { continue };
            let exp = expires(t);
            if exp < now {
                self.event(
                    &**pod,
                    Type::Warning,
                    "NotDeleted",
                    format!(
                        "Pod was expected by PDB {}/{} to be deleted but it wasn't",
                        pdb.metadata.namespace.as_deref().unwrap_or_default(),
                        pdb.metadata.name.as_deref().unwrap_or_default()
                    ),
                );
            } else {
                recheck = Some(recheck.map_or(exp, |r| r.min(exp)));
                out.insert(name, t.clone());
            }
        }
        (out, recheck)
    }

    async fn update_status(
        &self,
        pdb: &PodDisruptionBudget,
        healthy: i32,
        desired: i32,
        expected: i32,
        disrupted: BTreeMap<String, Time>,
    ) -> Result<(), Error> {
        // A budget over no pods allows nothing: its first pods may appear before the
        // next sync.
        let allowed = if expected <= 0 { 0 } else { (healthy - desired).max(0) };
        let old = pdb.status.clone().unwrap_or_default();
        let old_disrupted = old.disrupted_pods.clone().unwrap_or_default();
        if old.current_healthy == healthy
            && old.desired_healthy == desired
            && old.expected_pods == expected
            && old.disruptions_allowed == allowed
            && old_disrupted == disrupted
            && old.observed_generation == pdb.metadata.generation
            && conditions_up_to_date(pdb)
        {
            return Ok(());
        }
        let mut status = PodDisruptionBudgetStatus {
            current_healthy: healthy,
            desired_healthy: desired,
            expected_pods: expected,
            disruptions_allowed: allowed,
            disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
            observed_generation: pdb.metadata.generation,
            conditions: old.conditions,
        };
        update_disruption_allowed_condition(&mut status);
        self.write_status(pdb, status).await
    }

    /// Sets `disruptionsAllowed` to 0 with a `SyncFailed` condition.
    async fn fail_safe(&self, pdb: &PodDisruptionBudget, message: &str) -> Result<(), Error> {
        let mut status = pdb.status.clone().unwrap_or_default();
        status.disruptions_allowed = 0;
        let cond = Condition {
            type_: DISRUPTION_ALLOWED.into(),
            status: "False".into(),
            reason: SYNC_FAILED.into(),
            message: message.into(),
            observed_generation: status.observed_generation,
            last_transition_time: now_time(),
        };
        set_condition(status.conditions.get_or_insert_with(Vec::new), cond);
        self.write_status(pdb, status).await
    }

    /// One status update, guarded by the budget's resourceVersion; a conflict is retried
    /// by the queue.
    async fn write_status(
        &self,
        pdb: &PodDisruptionBudget,
        status: PodDisruptionBudgetStatus,
    ) -> Result<(), Error> {
        let (ns, name) = (
            pdb.metadata.namespace.as_deref().unwrap_or_default(),
            pdb.metadata.name.clone().unwrap_or_default(),
        );
        let mut new = pdb.clone();
        new.status = Some(status);
        let api: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), ns);
        api.replace_status(&name, &PostParams::default(), &new).await?;
        Ok(())
    }

    async fn sync_stale_pod_disruption(&self, key: &str) -> Result<(), Error> {
        let Some(pod) = self.pods.get(key) else { return Ok(()) };
        let Some(after) = stale_disruption_condition(&pod, Timestamp::now()) else { return Ok(()) };
        if !after.is_zero() {
            self.stale.add_after(key.to_owned(), after);
            return Ok(());
        }
        let mut new = (*pod).clone();
        let now = now_time();
        if let Some(c) = new
            .status
            .as_mut()
            .and_then(|s| s.conditions.as_mut())
            .and_then(|cs| cs.iter_mut().find(|c| c.type_ == "DisruptionTarget"))
        {
            c.status = "False".into();
            c.last_transition_time = Some(now.clone());
            c.last_probe_time = Some(now);
            c.reason = None;
            c.message = None;
        }
        let (ns, name) = split_key(key);
        Api::<Pod>::namespaced(self.client.clone(), ns)
            .replace_status(name, &PostParams::default(), &new)
            .await?;
        tracing::info!(pod = %key, "reset stale DisruptionTarget condition to False");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

    fn int(n: i32) -> IntOrString {
        IntOrString::Int(n)
    }

    fn pct(s: &str) -> IntOrString {
        IntOrString::String(s.into())
    }

    #[test]
    fn budget_math_as_upstream() {
        let scale = |n: i32| move || Ok::<i32, String>(n);
        // minAvailable as a number counts the selected pods.
        assert_eq!(desired_healthy(Some(&int(2)), None, 3, scale(10)), Ok((3, 2)));
        // A percentage counts the controllers' scale, rounding up.
        assert_eq!(desired_healthy(Some(&pct("50%")), None, 3, scale(5)), Ok((5, 3)));
        // maxUnavailable, numeric or percent, always against the scale.
        assert_eq!(desired_healthy(None, Some(&int(1)), 3, scale(4)), Ok((4, 3)));
        assert_eq!(desired_healthy(None, Some(&pct("30%")), 3, scale(10)), Ok((10, 7)));
        assert_eq!(desired_healthy(None, Some(&int(20)), 3, scale(4)), Ok((4, 0)));
        assert_eq!(desired_healthy(None, None, 3, scale(4)), Ok((0, 0)));
        assert!(desired_healthy(Some(&pct("x%")), None, 3, scale(4)).is_err());
        let no_controller = || Err::<i32, String>("found no controllers for pod \"p\"".into());
        assert!(desired_healthy(None, Some(&int(1)), 1, no_controller).is_err());
    }

    fn pod(name: &str, ready: bool, deleting: bool) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        if deleting {
            p.metadata.deletion_timestamp = Some(now_time());
        }
        p.status = Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        Arc::new(p)
    }

    #[test]
    fn healthy_excludes_unready_deleting_and_recently_evicted() {
        let now = Timestamp::from_second(10_000).unwrap();
        let pods = vec![
            pod("a", true, false),
            pod("b", false, false),
            pod("c", true, true),
            pod("d", true, false),
            pod("e", true, false),
        ];
        let mut disrupted = BTreeMap::new();
        disrupted.insert("d".to_string(), Time(Timestamp::from_second(9_990).unwrap()));
        // Evicted long ago and still there: counts again.
        disrupted.insert("e".to_string(), Time(Timestamp::from_second(9_000).unwrap()));
        assert_eq!(count_healthy(&pods, &disrupted, now), 2);
    }

    #[test]
    fn condition_follows_disruptions_allowed() {
        let mut s = PodDisruptionBudgetStatus {
            disruptions_allowed: 1,
            observed_generation: Some(2),
            ..Default::default()
        };
        update_disruption_allowed_condition(&mut s);
        let c = &s.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.observed_generation),
            ("True", SUFFICIENT_PODS, Some(2))
        );
        s.disruptions_allowed = 0;
        update_disruption_allowed_condition(&mut s);
        let c = &s.conditions.as_ref().unwrap()[0];
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", INSUFFICIENT_PODS));
        assert_eq!(s.conditions.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn stale_disruption_target() {
        let now = Timestamp::from_second(10_000).unwrap();
        let mut p = (*pod("a", true, false)).clone();
        assert_eq!(stale_disruption_condition(&p, now), None);
        p.status.as_mut().unwrap().conditions.as_mut().unwrap().push(PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            reason: Some("EvictionByEvictionAPI".into()),
            last_transition_time: Some(Time(Timestamp::from_second(9_950).unwrap())),
            ..Default::default()
        });
        assert_eq!(stale_disruption_condition(&p, now), Some(Duration::from_secs(70)));
        p.metadata.deletion_timestamp = Some(now_time());
        assert_eq!(stale_disruption_condition(&p, now), None);
    }
}
