//! The resourcequota controller: keeps each ResourceQuota's `status.hard` equal to its
//! spec and `status.used` equal to what its namespace really consumes (pods and their
//! requests/limits, services, claims, object counts), recomputed whenever a counted object
//! changes and every `--resource-quota-sync-period`, so usage charged by admission that
//! never materialised is given back.

use std::collections::BTreeMap;
use std::sync::Arc;

use component_base::quantity::{format_milli, is_binary, parse_milli};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, PersistentVolumeClaim, Pod, ReplicationController, ResourceQuota,
    ResourceQuotaStatus, Secret, Service,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::Resource;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::discovery::{self, Scope};

use crate::controller::{self, Context, Error};
use crate::informers::{Event, Informer};
use crate::podutil;

struct Informers {
    quotas: Arc<Informer<ResourceQuota>>,
    pods: Arc<Informer<Pod>>,
    services: Arc<Informer<Service>>,
    claims: Arc<Informer<PersistentVolumeClaim>>,
    configmaps: Arc<Informer<ConfigMap>>,
    secrets: Arc<Informer<Secret>>,
    rcs: Arc<Informer<ReplicationController>>,
    /// `count/<resource>.<group>` of workload kinds, from the informers their controllers
    /// share, so that deleting one gives its count back at once (the conformance spec
    /// "capture the life of a replica set" waits for that).
    object_counts: Vec<ObjectCount>,
    /// Live counts of resources without an informer here, by `(namespace, key)`, so that a
    /// burst of pod events does not turn into a burst of discovery and LIST requests.
    counted: parking_lot::Mutex<std::collections::HashMap<(String, String), (tokio::time::Instant, i64)>>,
}

/// A quota key and how many objects of its kind a namespace holds.
type ObjectCount = (&'static str, Box<dyn Fn(&str) -> usize + Send + Sync>);

/// An [`ObjectCount`] from the shared informer of `K`, whose deletes re-check the quotas.
fn object_count<K>(
    f: &crate::informers::Factory,
    key: &'static str,
    quotas: &Arc<Informer<ResourceQuota>>,
    queue: &Arc<crate::workqueue::Queue>,
) -> ObjectCount
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let informer: Arc<Informer<K>> = f.get();
    on_change(&informer, quotas, queue, |_, _| false);
    (key, Box::new(move |ns| informer.list_namespace(ns).len()))
}

/// How long a live count of `count/<resource>.<group>` is reused.
const COUNT_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// Re-checks every quota of the namespace when an object's usage may have gone down
/// (upstream's replenishment): on deletes, and on updates `released` says released usage.
/// Creations are not recounted: admission charged them already, and a recount from an
/// informer that has not seen the new object yet would write the usage back down and let
/// the next create past the limit.
fn on_change<K>(
    informer: &Informer<K>,
    quotas: &Arc<Informer<ResourceQuota>>,
    queue: &Arc<crate::workqueue::Queue>,
    released: fn(&K, &K) -> bool,
) where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (quotas, queue) = (Arc::downgrade(quotas), queue.clone());
    informer.add_handler(move |e| {
        let obj = match e {
            Event::Add(_) => return,
            Event::Update(old, new) if !released(old, new) => return,
            Event::Update(_, o) | Event::Delete(o) => o,
        };
        let Some(quotas) = quotas.upgrade() else { return };
        let ns = obj.meta().namespace.as_deref().unwrap_or_default();
        for q in quotas.list_namespace(ns) {
            queue.add(crate::informers::key_of(&*q));
        }
    });
}

pub fn start(ctx: &Context) -> Result<(), Error> {
    let f = &ctx.informers;
    let quotas: Arc<Informer<ResourceQuota>> = f.get();
    let queue = ctx.queue("resourcequota_primary");
    let object_counts = vec![
        object_count::<ReplicaSet>(f, "count/replicasets.apps", &quotas, &queue),
        object_count::<Deployment>(f, "count/deployments.apps", &quotas, &queue),
        object_count::<StatefulSet>(f, "count/statefulsets.apps", &quotas, &queue),
        object_count::<DaemonSet>(f, "count/daemonsets.apps", &quotas, &queue),
        object_count::<Job>(f, "count/jobs.batch", &quotas, &queue),
        object_count::<CronJob>(f, "count/cronjobs.batch", &quotas, &queue),
    ];
    let inf = Arc::new(Informers {
        quotas,
        pods: f.get(),
        services: f.get(),
        claims: f.get(),
        configmaps: f.get(),
        secrets: f.get(),
        rcs: f.get(),
        object_counts,
        counted: Default::default(),
    });
    {
        let queue = queue.clone();
        let quotas = Arc::downgrade(&inf.quotas);
        inf.quotas.add_handler(move |e| {
            let q = match e {
                // Only a new `spec.hard` needs a sync: `status.used` changes are admission's
                // own charges, which a recount from a lagging informer would undo.
                Event::Update(_, q) => {
                    let (spec, status) = (
                        q.spec.as_ref().and_then(|s| s.hard.as_ref()),
                        q.status.as_ref().and_then(|s| s.hard.as_ref()),
                    );
                    if spec != status {
                        queue.add(crate::informers::key_of(&***q));
                    }
                    return;
                }
                Event::Add(q) | Event::Delete(q) => q,
            };
            // A quota added or removed changes the `resourcequotas` count of its neighbours.
            let Some(quotas) = quotas.upgrade() else { return };
            for other in quotas.list_namespace(q.metadata.namespace.as_deref().unwrap_or_default()) {
                queue.add(crate::informers::key_of(&*other));
            }
            if matches!(e, Event::Add(_)) {
                queue.add(crate::informers::key_of(&***q));
            }
        });
    }
    // A pod stops counting when it finishes; a service's type or a claim's size may change
    // its usage; configmap, secret and RC updates never do.
    on_change(&inf.pods, &inf.quotas, &queue, |old, new| {
        let now = k8s_openapi::jiff::Timestamp::now();
        pod_counts(old, now) && !pod_counts(new, now)
    });
    on_change(&inf.services, &inf.quotas, &queue, |old, new| {
        old.spec.as_ref().and_then(|s| s.type_.as_ref()) != new.spec.as_ref().and_then(|s| s.type_.as_ref())
    });
    on_change(&inf.claims, &inf.quotas, &queue, |old, new| old.spec != new.spec || old.status != new.status);
    on_change(&inf.configmaps, &inf.quotas, &queue, |_, _| false);
    on_change(&inf.secrets, &inf.quotas, &queue, |_, _| false);
    on_change(&inf.rcs, &inf.quotas, &queue, |_, _| false);
    {
        // The full resync: recount everything, whatever events said.
        let (queue, quotas, period) =
            (queue.clone(), inf.quotas.clone(), ctx.options.resource_quota_sync_period);
        let shutdown = ctx.shutdown.clone();
        if !period.is_zero() {
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(period);
                tick.tick().await;
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        () = shutdown.wait() => return,
                    }
                    for q in quotas.list() {
                        queue.add(crate::informers::key_of(&*q));
                    }
                }
            });
        }
    }
    let client = ctx.client.clone();
    let workers = ctx.options.concurrent_resource_quota_syncs;
    controller::run_workers(ctx, queue, workers, move |key| sync(client.clone(), inf.clone(), key));
    Ok(())
}

/// Usage in thousandths, per quota resource name.
type Usage = BTreeMap<String, i64>;

fn add(usage: &mut Usage, key: &str, milli: i64) {
    *usage.entry(key.to_owned()).or_default() += milli;
}

fn quantities(list: Option<&BTreeMap<String, Quantity>>) -> impl Iterator<Item = (&String, i64)> {
    list.into_iter().flatten().filter_map(|(k, q)| parse_milli(&q.0).map(|v| (k, v)))
}

/// A pod's effective requests or limits: the larger of its app containers' sum and any
/// init container, plus overhead (upstream's `PodRequests`/`PodLimits`, without sidecars).
fn pod_resources(pod: &Pod, limits: bool) -> BTreeMap<String, i64> {
    let Some(spec) = &pod.spec else { return BTreeMap::new() };
    let of = |c: &Container| {
        let r = c.resources.as_ref();
        if limits { r.and_then(|r| r.limits.as_ref()) } else { r.and_then(|r| r.requests.as_ref()) }.cloned()
    };
    let mut sum: BTreeMap<String, i64> = BTreeMap::new();
    for c in &spec.containers {
        for (k, v) in quantities(of(c).as_ref()) {
            *sum.entry(k.clone()).or_default() += v;
        }
    }
    // Init containers run one at a time before the app containers, except sidecars
    // (`restartPolicy: Always`), which keep running beside everything started after them.
    let mut sidecars: BTreeMap<String, i64> = BTreeMap::new();
    let mut init_peak: BTreeMap<String, i64> = BTreeMap::new();
    for c in spec.init_containers.iter().flatten() {
        let sidecar = c.restart_policy.as_deref() == Some("Always");
        for (k, v) in quantities(of(c).as_ref()) {
            let running = sidecars.get(k).copied().unwrap_or(0);
            let e = init_peak.entry(k.clone()).or_default();
            *e = (*e).max(running + v);
            if sidecar {
                *sidecars.entry(k.clone()).or_default() += v;
            }
        }
    }
    for (k, v) in sidecars {
        *sum.entry(k).or_default() += v;
    }
    for (k, v) in init_peak {
        let e = sum.entry(k).or_default();
        *e = (*e).max(v);
    }
    for (k, v) in quantities(spec.overhead.as_ref()) {
        *sum.entry(k.clone()).or_default() += v;
    }
    sum
}

fn is_best_effort(pod: &Pod) -> bool {
    pod.spec.as_ref().is_none_or(|s| {
        s.containers.iter().chain(s.init_containers.iter().flatten()).all(|c| {
            c.resources.as_ref().is_none_or(|r| {
                r.requests.as_ref().is_none_or(|m| m.is_empty())
                    && r.limits.as_ref().is_none_or(|m| m.is_empty())
            })
        })
    })
}

/// Whether the quota's scopes and scope selector cover `pod`.
fn pod_in_scope(quota: &ResourceQuota, pod: &Pod) -> bool {
    let spec = quota.spec.as_ref();
    let terminating = pod.spec.as_ref().and_then(|s| s.active_deadline_seconds).is_some_and(|d| d >= 0);
    let scope_ok = |scope: &str, op: &str, values: &[String]| -> bool {
        let matched = match scope {
            "Terminating" => terminating,
            "NotTerminating" => !terminating,
            "BestEffort" => is_best_effort(pod),
            "NotBestEffort" => !is_best_effort(pod),
            "CrossNamespacePodAffinity" => {
                let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
                let terms = affinity.into_iter().flat_map(|a| {
                    let pa = a.pod_affinity.as_ref();
                    let aa = a.pod_anti_affinity.as_ref();
                    pa.and_then(|p| p.required_during_scheduling_ignored_during_execution.clone())
                        .into_iter()
                        .flatten()
                        .chain(
                            aa.and_then(|p| p.required_during_scheduling_ignored_during_execution.clone())
                                .into_iter()
                                .flatten(),
                        )
                        .chain(
                            pa.and_then(|p| p.preferred_during_scheduling_ignored_during_execution.clone())
                                .into_iter()
                                .flatten()
                                .map(|w| w.pod_affinity_term),
                        )
                        .chain(
                            aa.and_then(|p| p.preferred_during_scheduling_ignored_during_execution.clone())
                                .into_iter()
                                .flatten()
                                .map(|w| w.pod_affinity_term),
                        )
                        .collect::<Vec<_>>()
                });
                let mut cross = false;
                for t in terms {
                    cross |= t.namespaces.is_some_and(|n| !n.is_empty()) || t.namespace_selector.is_some();
                }
                cross
            }
            "PriorityClass" => {
                let pc = pod.spec.as_ref().and_then(|s| s.priority_class_name.as_deref());
                return match op {
                    "In" => pc.is_some_and(|p| values.iter().any(|v| v == p)),
                    "NotIn" => pc.is_none_or(|p| !values.iter().any(|v| v == p)),
                    "DoesNotExist" => pc.is_none_or(str::is_empty),
                    _ => pc.is_some_and(|p| !p.is_empty()),
                };
            }
            _ => true,
        };
        match op {
            "DoesNotExist" | "NotIn" => !matched,
            _ => matched,
        }
    };
    let scopes_ok =
        spec.and_then(|s| s.scopes.as_ref()).into_iter().flatten().all(|s| scope_ok(s, "Exists", &[]));
    let selector_ok = spec
        .and_then(|s| s.scope_selector.as_ref())
        .and_then(|s| s.match_expressions.as_ref())
        .into_iter()
        .flatten()
        .all(|e| scope_ok(&e.scope_name, &e.operator, e.values.as_deref().unwrap_or_default()));
    scopes_ok && selector_ok
}

fn is_scoped(quota: &ResourceQuota) -> bool {
    let spec = quota.spec.as_ref();
    spec.and_then(|s| s.scopes.as_ref()).is_some_and(|s| !s.is_empty())
        || spec
            .and_then(|s| s.scope_selector.as_ref())
            .and_then(|s| s.match_expressions.as_ref())
            .is_some_and(|e| !e.is_empty())
}

/// A pod still counts unless finished, or deleted with its grace period already over.
fn pod_counts(pod: &Pod, now: k8s_openapi::jiff::Timestamp) -> bool {
    if podutil::is_terminal(pod) {
        return false;
    }
    match (&pod.metadata.deletion_timestamp, pod.metadata.deletion_grace_period_seconds) {
        (Some(t), Some(grace)) => now.as_second() <= t.0.as_second() + grace,
        _ => true,
    }
}

fn pod_usage(usage: &mut Usage, pod: &Pod) {
    add(usage, "pods", 1000);
    for (k, v) in pod_resources(pod, false) {
        add(usage, &format!("requests.{k}"), v);
        if matches!(k.as_str(), "cpu" | "memory" | "ephemeral-storage") || k.starts_with("hugepages-") {
            add(usage, &k, v);
        }
    }
    for (k, v) in pod_resources(pod, true) {
        add(usage, &format!("limits.{k}"), v);
    }
}

fn service_usage(usage: &mut Usage, svc: &Service) {
    add(usage, "services", 1000);
    add(usage, "count/services", 1000);
    let spec = svc.spec.as_ref();
    let type_ = spec.and_then(|s| s.type_.as_deref()).unwrap_or("ClusterIP");
    if type_ == "LoadBalancer" {
        add(usage, "services.loadbalancers", 1000);
    }
    if matches!(type_, "NodePort" | "LoadBalancer") {
        let ports = spec.and_then(|s| s.ports.as_ref()).map_or(0, |p| p.len()) as i64;
        add(usage, "services.nodeports", ports * 1000);
    }
}

fn claim_usage(usage: &mut Usage, pvc: &PersistentVolumeClaim) {
    add(usage, "persistentvolumeclaims", 1000);
    add(usage, "count/persistentvolumeclaims", 1000);
    let storage = pvc
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| parse_milli(&q.0))
        .unwrap_or(0);
    add(usage, "requests.storage", storage);
    if let Some(class) = pvc.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()) {
        add(usage, &format!("{class}.storageclass.storage.k8s.io/requests.storage"), storage);
        add(usage, &format!("{class}.storageclass.storage.k8s.io/persistentvolumeclaims"), 1000);
    }
}

fn count_usage(usage: &mut Usage, resource: &str, n: usize) {
    add(usage, resource, n as i64 * 1000);
    add(usage, &format!("count/{resource}"), n as i64 * 1000);
}

/// Usage of the namespace from the informers, for the quota's scopes.
fn compute(inf: &Informers, quota: &ResourceQuota, ns: &str) -> Usage {
    let mut usage = Usage::new();
    let now = k8s_openapi::jiff::Timestamp::now();
    for pod in inf.pods.list_namespace(ns) {
        if !pod_in_scope(quota, &pod) {
            continue;
        }
        // Object count: every pod; compute and `pods`: only those still running.
        add(&mut usage, "count/pods", 1000);
        if pod_counts(&pod, now) {
            pod_usage(&mut usage, &pod);
        }
    }
    // Scopes narrow a quota to pods: other objects count only in unscoped quotas.
    if !is_scoped(quota) {
        for svc in inf.services.list_namespace(ns) {
            service_usage(&mut usage, &svc);
        }
        for pvc in inf.claims.list_namespace(ns) {
            claim_usage(&mut usage, &pvc);
        }
        count_usage(&mut usage, "configmaps", inf.configmaps.list_namespace(ns).len());
        count_usage(&mut usage, "secrets", inf.secrets.list_namespace(ns).len());
        count_usage(&mut usage, "replicationcontrollers", inf.rcs.list_namespace(ns).len());
        count_usage(&mut usage, "resourcequotas", inf.quotas.list_namespace(ns).len());
        for (key, count) in &inf.object_counts {
            add(&mut usage, key, count(ns) as i64 * 1000);
        }
    }
    usage
}

/// `count/<resource>.<group>` for resources without an informer here: a live list.
async fn count_other(client: &kube::Client, ns: &str, key: &str) -> Result<Option<i64>, Error> {
    let Some(what) = key.strip_prefix("count/") else { return Ok(None) };
    let (resource, group) = what.split_once('.').unwrap_or((what, ""));
    let group = discovery::group(client, group).await?;
    for (ar, caps) in group.recommended_resources() {
        if ar.plural == resource && caps.scope == Scope::Namespaced {
            let list = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar)
                .list(&ListParams::default())
                .await?;
            return Ok(Some(list.items.len() as i64 * 1000));
        }
    }
    Ok(None)
}

async fn cached_count(
    client: &kube::Client,
    inf: &Informers,
    ns: &str,
    key: &str,
) -> Result<Option<i64>, Error> {
    let id = (ns.to_owned(), key.to_owned());
    if let Some((at, v)) = inf.counted.lock().get(&id)
        && at.elapsed() < COUNT_TTL
    {
        return Ok(Some(*v));
    }
    let v = count_other(client, ns, key).await?;
    if let Some(v) = v {
        inf.counted.lock().insert(id, (tokio::time::Instant::now(), v));
    }
    Ok(v)
}

async fn sync(client: kube::Client, inf: Arc<Informers>, key: String) -> Result<(), Error> {
    let Some(quota) = inf.quotas.get(&key) else { return Ok(()) };
    let (ns, name) = crate::informers::split_key(&key);
    let hard = quota.spec.as_ref().and_then(|s| s.hard.clone()).unwrap_or_default();
    let usage = compute(&inf, &quota, ns);
    let mut used = BTreeMap::new();
    for (k, h) in &hard {
        let v = match usage.get(k) {
            Some(v) => *v,
            None if k.starts_with("count/") && !is_scoped(&quota) => {
                match cached_count(&client, &inf, ns, k).await {
                    Ok(Some(v)) => v,
                    Ok(None) => continue,
                    Err(err) => {
                        tracing::warn!(quota = %key, resource = %k, %err, "counting objects for quota");
                        continue;
                    }
                }
            }
            // Resources with no evaluator (an extended resource no pod requests): zero.
            None => 0,
        };
        used.insert(k.clone(), Quantity(format_milli(v, is_binary(&h.0))));
    }
    let status = quota.status.clone().unwrap_or_default();
    let same = |a: &Option<BTreeMap<String, Quantity>>, b: &BTreeMap<String, Quantity>| {
        let a = a.clone().unwrap_or_default();
        a.len() == b.len()
            && a.iter().all(|(k, q)| b.get(k).is_some_and(|o| parse_milli(&o.0) == parse_milli(&q.0)))
    };
    if same(&status.hard, &hard) && same(&status.used, &used) {
        return Ok(());
    }
    let mut updated = (*quota).clone();
    updated.status = Some(ResourceQuotaStatus { hard: Some(hard), used: Some(used) });
    match Api::<ResourceQuota>::namespaced(client, ns)
        .replace_status(name, &PostParams::default(), &updated)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if controller::api_code(&e) == Some(404) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

    fn container(req: &[(&str, &str)], lim: &[(&str, &str)]) -> Container {
        let m = |l: &[(&str, &str)]| {
            Some(l.iter().map(|(k, v)| (k.to_string(), Quantity(v.to_string()))).collect())
        };
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements { requests: m(req), limits: m(lim), ..Default::default() }),
            ..Container::default()
        }
    }

    #[test]
    fn pod_requests_take_the_larger_of_init_and_app_containers() {
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![
                    container(&[("cpu", "100m"), ("memory", "64Mi")], &[("cpu", "200m")]),
                    container(&[("cpu", "150m")], &[]),
                ],
                init_containers: Some(vec![container(&[("cpu", "500m")], &[])]),
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        let mut usage = Usage::new();
        pod_usage(&mut usage, &pod);
        assert_eq!(usage["requests.cpu"], 500);
        assert_eq!(usage["cpu"], 500);
        assert_eq!(usage["requests.memory"], 64 * 1024 * 1024 * 1000);
        assert_eq!(usage["limits.cpu"], 200);
        assert_eq!(usage["pods"], 1000);
        assert!(!is_best_effort(&pod));
        assert!(is_best_effort(&Pod { spec: Some(PodSpec::default()), ..Pod::default() }));
    }
}
