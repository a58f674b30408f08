//! One worker per pod: each wake-up (a source change, a PLEG event, a probe result, a
//! timer) runs `sync`, which drives the runtime one step towards the pod's spec (sandbox,
//! init containers in order, containers with restart policy and back-off) or, for a pod
//! being deleted or gone, stops and removes everything of it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use component_base::events::Type;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, PersistentVolume, PersistentVolumeClaim, Pod, PodStatus, Secret, Service,
};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::envs::PodObjects;
use crate::kuberuntime::{self, HostMount, SandboxContext};
use crate::pod_manager::{Source, full_name};
use crate::status::{ContainerRecord, ContainerView};
use crate::volumes::{self, CachedToken};
use crate::{Kubelet, cri};

/// Back-off of restarts (CrashLoopBackOff) and image pulls: 10 s doubling to 5 min.
const BACKOFF_INITIAL: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// Upstream never kills with less than this grace (a force delete still gets 2 s).
const MIN_GRACE_SECONDS: i64 = 2;

/// Per-pod state the workers keep between syncs.
#[derive(Default)]
pub struct State {
    /// Restart and pull back-off by `uid/container`: (current delay, when it ends).
    backoff: Mutex<HashMap<String, (Duration, Instant)>>,
    /// Service account tokens of projected volumes, by pod UID.
    tokens: Mutex<HashMap<String, HashMap<(String, usize), CachedToken>>>,
    /// Last status written to the API, by pod UID.
    written: Mutex<HashMap<String, PodStatus>>,
    /// Pods removed from the API before the kubelet saw them terminating: their grace.
    pub removed_grace: Mutex<HashMap<String, i64>>,
    /// When each pod was first seen, and whether its startup latency was observed yet.
    first_seen: Mutex<HashMap<String, (Instant, bool)>>,
    /// Pods admitted to run on this node (upstream's HandlePodAdditions), by UID.
    admitted: Mutex<std::collections::HashSet<String>>,
    /// Pods the kubelet ended for good, with the status reason and message (upstream's
    /// pod sync handlers' ShouldEvict: activeDeadlineSeconds), by UID.
    evicted: Mutex<HashMap<String, (&'static str, &'static str)>>,
}

/// Upstream's activeDeadlineSeconds verdict.
const DEADLINE_EXCEEDED: (&str, &str) =
    ("DeadlineExceeded", "Pod was active on the node longer than the specified deadline");

/// What a sync asks of its worker.
enum Next {
    /// Sync again after this long, or sooner when woken.
    After(Duration),
    /// The pod is gone and everything of it is cleaned up.
    Done,
}

pub async fn run(k: Arc<Kubelet>, uid: String, notify: Arc<Notify>) {
    loop {
        let next = match sync(&k, &uid).await {
            Ok(n) => n,
            Err(err) => {
                tracing::warn!(%uid, %err, "pod sync failed; retrying");
                Next::After(Duration::from_secs(2))
            }
        };
        let wait = match next {
            Next::Done => {
                if k.worker_done(&uid) {
                    return;
                }
                Duration::ZERO
            }
            Next::After(d) => d,
        };
        tokio::select! {
            () = k.shutdown.wait() => return,
            () = notify.notified() => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// The sandboxes and containers of `uid` in the runtime.
async fn runtime_state(
    k: &Kubelet,
    uid: &str,
) -> Result<(Vec<cri::PodSandbox>, Vec<cri::Container>), cri::Error> {
    let sandboxes = k.runtime.list_pod_sandboxes().await?;
    let containers = k.runtime.list_containers().await?;
    let mine = |l: &HashMap<String, String>| l.get(cri::POD_UID_LABEL).map(String::as_str) == Some(uid);
    Ok((
        sandboxes.into_iter().filter(|s| mine(&s.labels)).collect(),
        containers.into_iter().filter(|c| mine(&c.labels)).collect(),
    ))
}

async fn sync(k: &Arc<Kubelet>, uid: &str) -> Result<Next, cri::Error> {
    let entry = k.pods.get(uid);
    if entry.is_none() && k.client.is_some() && !k.pods.api_synced() {
        // Before the first list, "not known" does not mean "deleted".
        return Ok(Next::After(Duration::from_secs(1)));
    }
    let (sandboxes, containers) = runtime_state(k, uid).await?;
    match entry {
        None => {
            let grace = k.worker_state.removed_grace.lock().remove(uid);
            kill_pod(k, uid, None, &sandboxes, &containers, grace).await?;
            cleanup(k, uid, &sandboxes);
            forget(k, uid);
            Ok(Next::Done)
        }
        Some((pod, source)) if pod.metadata.deletion_timestamp.is_some() => {
            let grace = pod.metadata.deletion_grace_period_seconds;
            kill_pod(k, uid, Some(&pod), &sandboxes, &containers, grace).await?;
            cleanup(k, uid, &sandboxes);
            if source == Source::Api {
                // Every container is stopped and the volumes are gone: the API object may go.
                if let Some(client) = &k.client {
                    let api: Api<Pod> =
                        Api::namespaced(client.clone(), pod.metadata.namespace.as_deref().unwrap_or(""));
                    let dp = DeleteParams {
                        grace_period_seconds: Some(0),
                        preconditions: Some(Preconditions {
                            uid: Some(uid.to_string()),
                            resource_version: None,
                        }),
                        ..Default::default()
                    };
                    match api.delete(pod.metadata.name.as_deref().unwrap_or(""), &dp).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                        Err(err) => {
                            tracing::warn!(pod = %full_name(&pod), %err, "final delete");
                            return Ok(Next::After(Duration::from_secs(2)));
                        }
                    }
                }
            }
            Ok(Next::After(Duration::from_secs(5)))
        }
        Some((pod, source)) => sync_running(k, uid, pod, source, sandboxes, containers).await,
    }
}

fn forget(k: &Kubelet, uid: &str) {
    k.statuses.lock().remove(uid);
    k.worker_state.tokens.lock().remove(uid);
    k.worker_state.written.lock().remove(uid);
    k.worker_state.first_seen.lock().remove(uid);
    k.worker_state.admitted.lock().remove(uid);
    k.worker_state.evicted.lock().remove(uid);
    let prefix = format!("{uid}/");
    k.worker_state.backoff.lock().retain(|key, _| !key.starts_with(&prefix));
    k.probes.forget_pod(uid);
}

fn grace_of(pod: Option<&Pod>, containers: &[cri::Container], given: Option<i64>) -> i64 {
    let from_spec = pod
        .and_then(|p| p.spec.as_ref())
        .and_then(|s| s.termination_grace_period_seconds)
        .or_else(|| {
            containers.iter().find_map(|c| {
                c.annotations.get(cri::TERMINATION_GRACE_ANNOTATION).and_then(|g| g.parse().ok())
            })
        })
        .unwrap_or(30);
    given.unwrap_or(from_spec).max(MIN_GRACE_SECONDS)
}

/// Stops every container (preStop hooks first, SIGTERM, SIGKILL after the grace period)
/// and removes the pod's sandboxes (the runtime removes their containers).
async fn kill_pod(
    k: &Arc<Kubelet>,
    uid: &str,
    pod: Option<&Pod>,
    sandboxes: &[cri::PodSandbox],
    containers: &[cri::Container],
    grace: Option<i64>,
) -> Result<(), cri::Error> {
    stop_containers(k, pod, containers, grace).await?;
    for s in sandboxes {
        for r in [k.runtime.stop_pod_sandbox(&s.id).await, k.runtime.remove_pod_sandbox(&s.id).await] {
            match r {
                Err(e) if e.code() != tonic::Code::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    if !sandboxes.is_empty() || !containers.is_empty() {
        tracing::info!(%uid, "pod's containers and sandboxes removed");
    }
    Ok(())
}

/// Stops the running ones of `containers` within the grace period, each after its preStop
/// hook; the stopped containers stay, with their logs and exit codes.
async fn stop_containers(
    k: &Arc<Kubelet>,
    pod: Option<&Pod>,
    containers: &[cri::Container],
    grace: Option<i64>,
) -> Result<(), cri::Error> {
    if containers.is_empty() {
        return Ok(());
    }
    let grace = grace_of(pod, containers, grace);
    let running: Vec<&cri::Container> =
        containers.iter().filter(|c| c.state == cri::ContainerState::ContainerRunning as i32).collect();
    let stops = running.iter().map(|c| {
        let k = k.clone();
        let name = c.labels.get(cri::CONTAINER_NAME_LABEL).cloned().unwrap_or_default();
        let spec = pod.and_then(|p| find_container(p, &name)).cloned();
        let id = c.id.clone();
        let pod = pod.cloned();
        async move {
            let started = Instant::now();
            if let (Some(pod), Some(spec)) = (&pod, &spec) {
                event(&k, pod, Type::Normal, "Killing", format!("Stopping container {name}"));
                if let Some(hook) = spec.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) {
                    let budget = Duration::from_secs(grace.max(0) as u64);
                    let pod_ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default();
                    if let Err(msg) =
                        crate::lifecycle::run(&k.runtime, &id, spec, hook, &pod_ip, budget).await
                    {
                        event(&k, pod, Type::Warning, "FailedPreStopHook", msg);
                    }
                }
            }
            let left = (grace - started.elapsed().as_secs() as i64).max(MIN_GRACE_SECONDS);
            match k.runtime.stop_container(&id, left).await {
                Err(e) if e.code() != tonic::Code::NotFound => Err(e),
                _ => Ok(()),
            }
        }
    });
    for r in futures::future::join_all(stops).await {
        r?;
    }
    Ok(())
}

/// Removes what the runtime leaves behind: volumes and the pod directory, the log
/// directory, and the pod's cgroups in every hierarchy.
fn cleanup(k: &Kubelet, uid: &str, sandboxes: &[cri::PodSandbox]) {
    if let Err(err) = volumes::teardown_pod_dir(&volumes::pod_dir(&k.opts.root_dir, uid)) {
        tracing::warn!(%uid, %err, "tearing down the pod directory");
    }
    for s in sandboxes {
        if let Some(m) = &s.metadata {
            let dir = k.config().pod_logs_dir.join(format!("{}_{}_{}", m.namespace, m.name, m.uid));
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    let root = k.config().cgroup_root.trim_end_matches('/').to_string();
    let Ok(controllers) = std::fs::read_dir("/sys/fs/cgroup") else { return };
    for ctrl in controllers.flatten() {
        for qos in ["", "burstable/", "besteffort/"] {
            let dir = PathBuf::from(format!("{}{root}/kubepods/{qos}pod{uid}", ctrl.path().display()));
            if dir.exists() {
                // Children (containers' cgroups) are gone once the runtime removed them.
                if let Ok(children) = std::fs::read_dir(&dir) {
                    for c in children.flatten() {
                        if c.path().is_dir() {
                            let _ = std::fs::remove_dir(c.path());
                        }
                    }
                }
                if let Err(err) = std::fs::remove_dir(&dir) {
                    tracing::debug!(dir = %dir.display(), %err, "removing pod cgroup");
                }
            }
        }
    }
}

fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    kuberuntime::all_containers(pod).find(|c| c.name == name)
}

pub fn event(k: &Kubelet, pod: &Pod, kind: Type, reason: &str, message: String) {
    if let Some(r) = &k.recorder {
        r.event("kubelet", pod, kind, reason, message);
    }
}

/// Records the warnings of a pod's DNS configuration, on the pod or on the Node.
fn dns_events(k: &Kubelet, pod: &Pod, warnings: Vec<crate::dns::Warning>) {
    let Some(r) = &k.recorder else { return };
    for w in warnings {
        match w.subject {
            crate::dns::Subject::Pod => r.event("kubelet", pod, Type::Warning, w.reason, w.message),
            crate::dns::Subject::Node => {
                // Upstream's node reference: the Node by name, with the name as its UID.
                let node = k8s_openapi::api::core::v1::Node {
                    metadata: kube::api::ObjectMeta {
                        name: Some(k.opts.node_name.clone()),
                        uid: Some(k.opts.node_name.clone()),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                r.event("kubelet", &node, Type::Warning, w.reason, w.message);
            }
        }
    }
}

fn sandbox_context(k: &Kubelet) -> SandboxContext {
    let c = k.config();
    SandboxContext {
        pod_logs_dir: c.pod_logs_dir.clone(),
        cgroup_root: c.cgroup_root.clone(),
        dns: crate::dns::Configurer {
            // Validated when the configuration was loaded.
            cluster_dns: c.cluster_dns.iter().filter_map(|ip| ip.parse().ok()).collect(),
            cluster_domain: c.cluster_domain.clone(),
            resolv_conf: Some(c.resolv_conf.clone()).filter(|p| !p.as_os_str().is_empty()),
            node_ips: k.opts.node_ip.into_iter().collect(),
        },
        node_name: k.opts.node_name.clone(),
    }
}

/// The ConfigMaps, Secrets and Services the pod refers to, read from the API (none for a
/// standalone kubelet). A missing object is recorded as such, not an error.
async fn fetch_objects(k: &Kubelet, pod: &Pod) -> Result<PodObjects, String> {
    let mut objects = PodObjects::default();
    let Some(client) = &k.client else { return Ok(objects) };
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let (mut cms, mut secrets) = (Vec::new(), Vec::new());
    let spec = pod.spec.clone().unwrap_or_default();
    for v in spec.volumes.iter().flatten() {
        cms.extend(v.config_map.as_ref().map(|c| c.name.clone()));
        secrets.extend(v.secret.as_ref().and_then(|s| s.secret_name.clone()));
        for s in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            cms.extend(s.config_map.as_ref().map(|c| c.name.clone()));
            secrets.extend(s.secret.as_ref().map(|c| c.name.clone()));
        }
    }
    let ephemeral = kuberuntime::ephemeral_containers(pod);
    for c in kuberuntime::all_containers(pod).chain(ephemeral.iter().map(|(c, _)| c)) {
        for f in c.env_from.iter().flatten() {
            cms.extend(f.config_map_ref.as_ref().map(|r| r.name.clone()));
            secrets.extend(f.secret_ref.as_ref().map(|r| r.name.clone()));
        }
        for e in c.env.iter().flatten() {
            let Some(src) = &e.value_from else { continue };
            cms.extend(src.config_map_key_ref.as_ref().map(|r| r.name.clone()));
            secrets.extend(src.secret_key_ref.as_ref().map(|r| r.name.clone()));
        }
    }
    let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for name in cms {
        if objects.configmaps.contains_key(&name) {
            continue;
        }
        let obj = cm_api.get_opt(&name).await.map_err(|e| format!("configmap {name}: {e}"))?;
        objects.configmaps.insert(name, obj);
    }
    let secret_api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    for name in secrets {
        if objects.secrets.contains_key(&name) {
            continue;
        }
        let obj = secret_api.get_opt(&name).await.map_err(|e| format!("secret {name}: {e}"))?;
        objects.secrets.insert(name, obj);
    }
    // Claims and their volumes (the Node authorizer lets a node read those of its pods).
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let claim_api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pv_api: Api<PersistentVolume> = Api::all(client.clone());
    for name in volumes::claim_names(&pod_name, &spec) {
        if objects.claims.contains_key(&name) {
            continue;
        }
        let claim =
            claim_api.get_opt(&name).await.map_err(|e| format!("persistentvolumeclaim {name}: {e}"))?;
        let entry = match claim {
            None => None,
            Some(claim) => {
                let volume =
                    claim.spec.as_ref().and_then(|s| s.volume_name.clone()).filter(|v| !v.is_empty());
                let pv = match volume {
                    Some(v) => pv_api.get_opt(&v).await.map_err(|e| format!("persistentvolume {v}: {e}"))?,
                    None => None,
                };
                Some((claim, pv))
            }
        };
        objects.claims.insert(name, entry);
    }
    // Service links: the namespace's services when enabled, the master service always.
    if spec.enable_service_links.unwrap_or(true) {
        let svcs: Api<Service> = Api::namespaced(client.clone(), &ns);
        if let Ok(list) = svcs.list(&ListParams::default()).await {
            objects.services.extend(list.items);
        }
    }
    if ns != "default" || !spec.enable_service_links.unwrap_or(true) {
        let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
        if let Ok(Some(svc)) = svcs.get_opt("kubernetes").await {
            objects.services.push(svc);
        }
    }
    Ok(objects)
}

/// Requests (and renews at 80% of their lifetime, as upstream) the tokens of projected
/// serviceAccountToken sources through the TokenRequest API, bound to the pod.
async fn refresh_tokens(k: &Kubelet, pod: &Pod) -> Result<(), String> {
    use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
    let Some(client) = &k.client else { return Ok(()) };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let sa = spec.service_account_name.clone().unwrap_or_else(|| "default".into());
    let now = std::time::SystemTime::now();
    for v in spec.volumes.iter().flatten() {
        for (i, s) in v.projected.iter().flat_map(|p| p.sources.iter().flatten()).enumerate() {
            let Some(t) = &s.service_account_token else { continue };
            let key = (v.name.clone(), i);
            let fresh =
                k.worker_state.tokens.lock().get(&uid).and_then(|m| m.get(&key)).map(|c| c.refresh_at > now);
            if fresh == Some(true) {
                continue;
            }
            let ttl = t.expiration_seconds.unwrap_or(3600);
            let req = TokenRequest {
                spec: TokenRequestSpec {
                    audiences: t.audience.clone().map(|a| vec![a]).unwrap_or_default(),
                    expiration_seconds: Some(ttl),
                    bound_object_ref: Some(BoundObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Pod".into()),
                        name: pod.metadata.name.clone(),
                        uid: Some(uid.clone()),
                    }),
                },
                ..Default::default()
            };
            let api: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), &ns);
            let resp: TokenRequest = api
                .create_subresource("token", &sa, &Default::default(), &req)
                .await
                .map_err(|e| format!("requesting a token for service account {ns}/{sa}: {e}"))?;
            let token = resp.status.map(|s| s.token).unwrap_or_default();
            // The API may shorten the lifetime; renew at 80% of what was asked.
            let refresh_at = now + Duration::from_secs((ttl as u64) * 8 / 10);
            k.worker_state
                .tokens
                .lock()
                .entry(uid.clone())
                .or_default()
                .insert(key, CachedToken { token, refresh_at });
        }
    }
    Ok(())
}

fn container_name(c: &cri::Container) -> String {
    c.labels.get(cri::CONTAINER_NAME_LABEL).cloned().unwrap_or_default()
}

fn restart_count(c: &cri::Container) -> u32 {
    c.annotations.get(cri::CONTAINER_RESTART_COUNT_ANNOTATION).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The two newest records of each container name in `sandbox`, with full statuses.
async fn records(
    k: &Kubelet,
    sandbox: &str,
    containers: &[cri::Container],
) -> Result<HashMap<String, ContainerRecord>, cri::Error> {
    let mut by_name: HashMap<String, Vec<&cri::Container>> = HashMap::new();
    for c in containers.iter().filter(|c| c.pod_sandbox_id == sandbox) {
        by_name.entry(container_name(c)).or_default().push(c);
    }
    let mut out = HashMap::new();
    for (name, mut list) in by_name {
        list.sort_by_key(|c| (restart_count(c), c.created_at));
        let mut rec = ContainerRecord::default();
        if let Some(c) = list.pop() {
            rec.latest = Some(status_of(k, c).await?);
        }
        if let Some(c) = list.pop() {
            rec.previous = Some(status_of(k, c).await?);
        }
        // Older ones are garbage: upstream keeps one dead container per name for logs.
        for c in list {
            let _ = k.runtime.remove_container(&c.id).await;
        }
        out.insert(name, rec);
    }
    Ok(out)
}

async fn status_of(k: &Kubelet, c: &cri::Container) -> Result<cri::ContainerStatus, cri::Error> {
    match k.runtime.container_status(&c.id).await {
        Ok(s) => Ok(s),
        // Raced with its removal: what the list said is good enough.
        Err(e) if e.code() == tonic::Code::NotFound => Ok(cri::ContainerStatus {
            id: c.id.clone(),
            state: c.state,
            labels: c.labels.clone(),
            annotations: c.annotations.clone(),
            image_ref: c.image_ref.clone(),
            ..Default::default()
        }),
        Err(e) => Err(e),
    }
}

fn is_running(r: &ContainerRecord) -> bool {
    r.latest.as_ref().map(|s| s.state == cri::ContainerState::ContainerRunning as i32).unwrap_or(false)
}

fn exited(r: &ContainerRecord) -> Option<&cri::ContainerStatus> {
    r.latest.as_ref().filter(|s| {
        s.state == cri::ContainerState::ContainerExited as i32
            || s.state == cri::ContainerState::ContainerCreated as i32
    })
}

/// Whether a stopped container should run again under `policy`.
fn should_restart(policy: &str, exit_code: i32) -> bool {
    match policy {
        "Never" => false,
        "OnFailure" => exit_code != 0,
        _ => true,
    }
}

async fn sync_running(
    k: &Arc<Kubelet>,
    uid: &str,
    pod: Pod,
    source: Source,
    sandboxes: Vec<cri::PodSandbox>,
    containers: Vec<cri::Container>,
) -> Result<Next, cri::Error> {
    k.worker_state.first_seen.lock().entry(uid.to_string()).or_insert_with(|| (Instant::now(), false));
    let resync = crate::config::KubeletConfiguration::duration(&k.config().sync_frequency);
    if source == Source::File {
        crate::mirror::sync(k, &pod).await;
    }
    let spec = pod.spec.clone().unwrap_or_default();
    let policy = spec.restart_policy.clone().unwrap_or_else(|| "Always".into());
    let previous = k.statuses.lock().get(uid).cloned();
    let terminal =
        previous.as_ref().and_then(|s| s.phase.as_deref()).is_some_and(|p| p == "Succeeded" || p == "Failed");
    if terminal {
        // A finished pod keeps its status; its sandbox is stopped (not removed: logs stay).
        for s in sandboxes.iter().filter(|s| s.state == cri::PodSandboxState::SandboxReady as i32) {
            k.runtime.stop_pod_sandbox(&s.id).await?;
        }
        return Ok(Next::After(resync));
    }
    if let Err(rejection) = admit(k, uid, &pod, !sandboxes.is_empty()) {
        reject(k, &pod, source, rejection).await;
        return Ok(Next::After(resync));
    }
    // activeDeadlineSeconds, counted from the status's startTime: past it, the pod's
    // containers are stopped and it fails for good.
    let deadline_in = spec.active_deadline_seconds.and_then(|secs| {
        let start = previous.as_ref()?.start_time.as_ref()?.0;
        let elapsed = k8s_openapi::jiff::Timestamp::now().duration_since(start).as_secs();
        Some(Duration::from_secs(secs.saturating_sub(elapsed).max(0) as u64))
    });
    if deadline_in == Some(Duration::ZERO) {
        let (reason, message) = DEADLINE_EXCEEDED;
        k.worker_state.evicted.lock().insert(uid.to_string(), DEADLINE_EXCEEDED);
        event(k, &pod, Type::Normal, reason, message.into());
        // Stopped, not removed: the containers' exit and logs stay, as for any failed pod
        // (the terminal branch stops the sandbox on the next sync).
        stop_containers(k, Some(&pod), &containers, None).await?;
        let host_ip = k.node_facts.read().host_ip.clone();
        let latest = sandboxes.iter().max_by_key(|s| s.created_at).map(|s| s.id.clone()).unwrap_or_default();
        let recs = records(k, &latest, &containers).await?;
        write_status(k, &pod, source, &recs, &HashMap::new(), false, &[], &host_ip).await;
        return Ok(Next::After(resync));
    }

    let mut views: HashMap<String, ContainerView> = HashMap::new();
    let host_ip = k.node_facts.read().host_ip.clone();

    // API objects, tokens and volumes first: without them no container can start.
    let objects = match fetch_objects(k, &pod).await {
        Ok(o) => o,
        Err(err) => {
            tracing::warn!(pod = %full_name(&pod), %err, "reading the pod's objects");
            return Ok(Next::After(Duration::from_secs(2)));
        }
    };
    if let Err(err) = refresh_tokens(k, &pod).await {
        event(k, &pod, Type::Warning, "FailedMount", err.clone());
        return Ok(Next::After(Duration::from_secs(2)));
    }

    // The sandbox: reuse the newest ready one, else replace them all.
    let ready = sandboxes
        .iter()
        .filter(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
        .max_by_key(|s| s.created_at);
    let ctx = sandbox_context(k);
    let (sandbox_id, sandbox_cfg) = match ready {
        Some(s) => {
            let attempt = s.metadata.as_ref().map(|m| m.attempt).unwrap_or(0);
            match kuberuntime::sandbox_config(&ctx, &pod, attempt) {
                // Its DNS warnings were recorded when it was created.
                Ok((cfg, _)) => (s.id.clone(), cfg),
                Err(err) => {
                    let message =
                        format!("Failed to generate sandbox config for pod {:?}: {err}", full_name(&pod));
                    event(k, &pod, Type::Warning, "FailedCreatePodSandBox", message);
                    return Ok(Next::After(Duration::from_secs(5)));
                }
            }
        }
        None => {
            // A pod whose containers all ended for good does not get a new sandbox.
            let done = !sandboxes.is_empty() && policy != "Always" && {
                let recs = match sandboxes.iter().max_by_key(|s| s.created_at) {
                    Some(s) => records(k, &s.id, &containers).await?,
                    None => HashMap::new(),
                };
                spec.containers.iter().all(|c| {
                    recs.get(&c.name).and_then(exited).is_some_and(|s| !should_restart(&policy, s.exit_code))
                })
            };
            if done {
                let latest =
                    sandboxes.iter().max_by_key(|s| s.created_at).map(|s| s.id.clone()).unwrap_or_default();
                let recs = records(k, &latest, &containers).await?;
                write_status(k, &pod, source, &recs, &views, false, &[], &host_ip).await;
                return Ok(Next::After(resync));
            }
            kill_pod(k, uid, Some(&pod), &sandboxes, &containers, Some(MIN_GRACE_SECONDS)).await?;
            let attempt = sandboxes
                .iter()
                .filter_map(|s| s.metadata.as_ref().map(|m| m.attempt + 1))
                .max()
                .unwrap_or(0);
            let cfg = match kuberuntime::sandbox_config(&ctx, &pod, attempt) {
                Ok((cfg, warnings)) => {
                    dns_events(k, &pod, warnings);
                    cfg
                }
                Err(err) => {
                    let message =
                        format!("Failed to generate sandbox config for pod {:?}: {err}", full_name(&pod));
                    event(k, &pod, Type::Warning, "FailedCreatePodSandBox", message);
                    return Ok(Next::After(Duration::from_secs(5)));
                }
            };
            let _ = std::fs::create_dir_all(kuberuntime::pod_log_dir(&ctx.pod_logs_dir, &pod));
            tracing::info!(pod = %full_name(&pod), attempt, "creating pod sandbox");
            match k.runtime.run_pod_sandbox(cfg.clone()).await {
                Ok(id) => (id, cfg),
                Err(err) => {
                    event(
                        k,
                        &pod,
                        Type::Warning,
                        "FailedCreatePodSandBox",
                        format!("Failed to create pod sandbox: {err}"),
                    );
                    return Ok(Next::After(Duration::from_secs(5)));
                }
            }
        }
    };
    let sandbox_status = k.runtime.pod_sandbox_status(&sandbox_id).await?;
    let mut pod_ips: Vec<String> = Vec::new();
    if let Some(net) = &sandbox_status.network {
        pod_ips.extend((!net.ip.is_empty()).then(|| net.ip.clone()));
        pod_ips.extend(net.additional_ips.iter().map(|i| i.ip.clone()));
    }

    let node = k.node_facts.read().clone();
    let tokens = k.worker_state.tokens.lock().get(uid).cloned().unwrap_or_default();
    let src = volumes::Sources { objects: &objects, tokens: &tokens, pod_ips: &pod_ips, node: &node };
    let volume_paths = match volumes::setup(&k.opts.root_dir, &pod, &src) {
        Ok(p) => p,
        Err(err) => {
            event(k, &pod, Type::Warning, "FailedMount", err);
            let recs = records(k, &sandbox_id, &containers).await?;
            write_status(k, &pod, source, &recs, &views, true, &pod_ips, &host_ip).await;
            return Ok(Next::After(Duration::from_secs(2)));
        }
    };

    // The containers of this sandbox, refreshed after what the kill above may have changed.
    let containers = k.runtime.list_containers().await?;
    let containers: Vec<cri::Container> = containers
        .into_iter()
        .filter(|c| c.labels.get(cri::POD_UID_LABEL).map(String::as_str) == Some(uid))
        .collect();
    let recs = records(k, &sandbox_id, &containers).await?;
    let mut wake_in = resync;
    let env = StartEnv {
        pod: &pod,
        sandbox_id: &sandbox_id,
        sandbox_cfg: &sandbox_cfg,
        objects: &objects,
        pod_ips: &pod_ips,
        volume_paths: &volume_paths,
    };

    // Init containers run one at a time, in order, each to success.
    let mut init_done = true;
    for c in spec.init_containers.iter().flatten() {
        let rec = recs.get(&c.name).cloned().unwrap_or_default();
        if is_running(&rec) {
            init_done = false;
            break;
        }
        match exited(&rec) {
            Some(s) if s.state == cri::ContainerState::ContainerExited as i32 && s.exit_code == 0 => continue,
            Some(s) if s.state == cri::ContainerState::ContainerExited as i32 && policy == "Never" => {
                init_done = false;
                break;
            }
            _ => {}
        }
        init_done = false;
        if let Some(d) = start_or_back_off(k, &env, c, &rec, &mut views).await {
            wake_in = wake_in.min(d);
        }
        break;
    }

    if init_done {
        for c in &spec.containers {
            let rec = recs.get(&c.name).cloned().unwrap_or_default();
            if is_running(&rec) {
                let latest = rec.latest.as_ref().expect("running has a record");
                let hash = latest.annotations.get(cri::CONTAINER_HASH_ANNOTATION);
                let liveness_failed = k.probes.liveness_failed(uid, &c.name, &latest.id);
                if hash.map(String::as_str) != Some(kuberuntime::container_hash(c).as_str())
                    || liveness_failed
                {
                    let why = if liveness_failed {
                        "failed liveness probe, will be restarted"
                    } else {
                        "definition changed, will be restarted"
                    };
                    event(k, &pod, Type::Normal, "Killing", format!("Container {} {why}", c.name));
                    let grace = grace_of(Some(&pod), &[], None);
                    k.runtime.stop_container(&latest.id, grace).await?;
                    wake_in = Duration::ZERO;
                    continue;
                }
                k.probes.ensure(k, &pod, c, &latest.id, &pod_ips);
                let (ready, started) = k.probes.state(uid, &c.name, &latest.id, c);
                views.insert(c.name.clone(), ContainerView { waiting: None, ready, started });
                continue;
            }
            if let Some(s) = exited(&rec) {
                if s.state == cri::ContainerState::ContainerExited as i32
                    && !should_restart(&policy, s.exit_code)
                {
                    continue;
                }
            }
            if let Some(d) = start_or_back_off(k, &env, c, &rec, &mut views).await {
                wake_in = wake_in.min(d);
            }
        }
    }

    // Ephemeral containers (added through `pods/ephemeralcontainers`, for debugging):
    // started once each, whether or not the pod finished initializing, never restarted;
    // one with a target shares that container's process namespace.
    for (c, target) in kuberuntime::ephemeral_containers(&pod) {
        if recs.get(&c.name).is_some_and(|r| r.latest.is_some()) {
            continue;
        }
        let target_id = match &target {
            Some(t) => match recs.get(t).filter(|r| is_running(r)).and_then(|r| r.latest.as_ref()) {
                Some(latest) => Some(latest.id.clone()),
                None => {
                    // Upstream starts it anyway and the runtime refuses; waiting for the
                    // target to run says why.
                    let msg = format!("the target container {t:?} is not running");
                    views.insert(
                        c.name.clone(),
                        ContainerView {
                            waiting: Some(("CreateContainerError".into(), msg)),
                            ..Default::default()
                        },
                    );
                    wake_in = wake_in.min(Duration::from_secs(2));
                    continue;
                }
            },
            None => None,
        };
        if let Err((reason, message)) = start_container(k, &env, &c, 0, target_id.as_deref()).await {
            views.insert(
                c.name.clone(),
                ContainerView { waiting: Some((reason, message)), ..Default::default() },
            );
            wake_in = wake_in.min(Duration::from_secs(2));
        }
    }

    // Status from the runtime's view after the actions above.
    let containers = k.runtime.list_containers().await?;
    let containers: Vec<cri::Container> = containers
        .into_iter()
        .filter(|c| c.labels.get(cri::POD_UID_LABEL).map(String::as_str) == Some(uid))
        .collect();
    let recs = records(k, &sandbox_id, &containers).await?;
    for c in &spec.containers {
        if let Some(r) = recs.get(&c.name).filter(|r| is_running(r)) {
            let id = &r.latest.as_ref().expect("running").id;
            let (ready, started) = k.probes.state(uid, &c.name, id, c);
            views.entry(c.name.clone()).or_default().ready = ready;
            views.entry(c.name.clone()).or_default().started = started;
            views.entry(c.name.clone()).or_default().waiting = None;
        }
    }
    let status = write_status(k, &pod, source, &recs, &views, true, &pod_ips, &host_ip).await;
    if status.phase.as_deref() == Some("Running") {
        let all_running = spec.containers.iter().all(|c| recs.get(&c.name).is_some_and(is_running));
        if all_running {
            // Observed once per pod: the first time all its containers run.
            if let Some((seen, observed @ false)) = k.worker_state.first_seen.lock().get_mut(uid) {
                k.metrics.pod_start_duration.observe(seen.elapsed().as_secs_f64());
                *observed = true;
            }
        }
    }
    // Wake at the deadline, whatever else sleeps longer.
    Ok(Next::After(deadline_in.map_or(wake_in, |d| wake_in.min(d + Duration::from_millis(100)))))
}

struct StartEnv<'a> {
    pod: &'a Pod,
    sandbox_id: &'a str,
    sandbox_cfg: &'a cri::PodSandboxConfig,
    objects: &'a PodObjects,
    pod_ips: &'a [String],
    volume_paths: &'a HashMap<String, PathBuf>,
}

/// Starts `c` unless its restart back-off is running; returns when to look again.
async fn start_or_back_off(
    k: &Arc<Kubelet>,
    env: &StartEnv<'_>,
    c: &Container,
    rec: &ContainerRecord,
    views: &mut HashMap<String, ContainerView>,
) -> Option<Duration> {
    let uid = env.pod.metadata.uid.clone().unwrap_or_default();
    let key = format!("{uid}/{}", c.name);
    let attempt = rec.latest.as_ref().map(|_| rec.restart_count() as u32 + 1).unwrap_or(0);
    let restarting = rec.latest.is_some();
    if restarting {
        let now = Instant::now();
        let mut backoff = k.worker_state.backoff.lock();
        if let Some((delay, until)) = backoff.get(&key).copied() {
            if now < until {
                let msg = format!(
                    "back-off {}s restarting failed container={} pod={}",
                    delay.as_secs(),
                    c.name,
                    full_name(env.pod)
                );
                views.insert(
                    c.name.clone(),
                    ContainerView {
                        waiting: Some(("CrashLoopBackOff".into(), msg.clone())),
                        ..Default::default()
                    },
                );
                drop(backoff);
                event(
                    k,
                    env.pod,
                    Type::Warning,
                    "BackOff",
                    format!("Back-off restarting failed container {} in pod {}", c.name, full_name(env.pod)),
                );
                return Some(until - now);
            }
            let next = (delay * 2).min(BACKOFF_MAX);
            backoff.insert(key.clone(), (next, now + next));
        } else {
            backoff.insert(key.clone(), (BACKOFF_INITIAL, now + BACKOFF_INITIAL));
        }
    }
    match start_container(k, env, c, attempt, None).await {
        Ok(()) => None,
        Err((reason, message)) => {
            views.insert(
                c.name.clone(),
                ContainerView { waiting: Some((reason, message)), ..Default::default() },
            );
            Some(Duration::from_secs(2))
        }
    }
}

/// Pulls (per `imagePullPolicy`), creates and starts one container; `target` is the id of
/// the container whose process namespace it joins (an ephemeral container's target).
/// Errors are the waiting reason and message upstream reports.
async fn start_container(
    k: &Arc<Kubelet>,
    env: &StartEnv<'_>,
    c: &Container,
    attempt: u32,
    target: Option<&str>,
) -> Result<(), (String, String)> {
    let pod = env.pod;
    let image = c.image.clone().unwrap_or_default();
    let key = format!("{}/{}#pull", pod.metadata.uid.as_deref().unwrap_or(""), c.name);
    if let Some((_, until)) = k.worker_state.backoff.lock().get(&key).copied() {
        if Instant::now() < until {
            return Err(("ImagePullBackOff".into(), format!("Back-off pulling image \"{image}\"")));
        }
    }
    let present = k
        .runtime
        .image_status(&image)
        .await
        .map_err(|e| ("ErrImagePull".to_string(), e.to_string()))?
        .is_some();
    let policy = c.image_pull_policy.clone().unwrap_or_else(|| "IfNotPresent".into());
    if policy == "Never" && !present {
        let msg = format!("Container image \"{image}\" is not present with pull policy of Never");
        event(k, pod, Type::Warning, "ErrImageNeverPull", msg.clone());
        return Err(("ErrImageNeverPull".into(), msg));
    }
    if policy == "Always" || !present {
        event(k, pod, Type::Normal, "Pulling", format!("Pulling image \"{image}\""));
        let started = Instant::now();
        if let Err(err) = k.runtime.pull_image(&image, env.sandbox_cfg).await {
            let mut backoff = k.worker_state.backoff.lock();
            let delay = backoff.get(&key).map(|(d, _)| (*d * 2).min(BACKOFF_MAX)).unwrap_or(BACKOFF_INITIAL);
            backoff.insert(key, (delay, Instant::now() + delay));
            drop(backoff);
            let msg = format!("Failed to pull image \"{image}\": {err}");
            event(k, pod, Type::Warning, "Failed", msg.clone());
            return Err(("ErrImagePull".into(), msg));
        }
        k.worker_state.backoff.lock().remove(&key);
        event(
            k,
            pod,
            Type::Normal,
            "Pulled",
            format!("Successfully pulled image \"{image}\" in {:?}", started.elapsed()),
        );
    }
    let node = k.node_facts.read().clone();
    let vars = crate::envs::container_envs(pod, c, env.objects, env.pod_ips, &node).map_err(|e| {
        event(k, pod, Type::Warning, "Failed", format!("Error: {e}"));
        ("CreateContainerConfigError".to_string(), e)
    })?;
    let mut mounts = Vec::new();
    let pod_dir = volumes::pod_dir(&k.opts.root_dir, pod.metadata.uid.as_deref().unwrap_or(""));
    for (index, m) in c.volume_mounts.iter().flatten().enumerate() {
        let Some(base) = env.volume_paths.get(&m.name) else {
            return Err((
                "CreateContainerConfigError".into(),
                format!("cannot find volume \"{}\" to mount into container \"{}\"", m.name, c.name),
            ));
        };
        let mut host_path = base.clone();
        let config_error = |msg: String| {
            event(k, pod, Type::Warning, "Failed", format!("Error: {msg}"));
            ("CreateContainerConfigError".to_string(), msg)
        };
        let sub = match (
            m.sub_path.as_deref().filter(|s| !s.is_empty()),
            m.sub_path_expr.as_deref().filter(|s| !s.is_empty()),
        ) {
            (Some(sub), _) => Some(sub.to_owned()),
            (None, Some(expr)) => Some(crate::subpath::expand_expr(expr, &vars).map_err(config_error)?),
            (None, None) => None,
        };
        if let Some(sub) = sub {
            crate::subpath::validate(&sub).map_err(config_error)?;
            let target = pod_dir.join("volume-subpaths").join(&m.name).join(&c.name).join(index.to_string());
            host_path = crate::subpath::prepare(base, &sub, &target).map_err(|e| {
                tracing::warn!(pod = %full_name(pod), container = %c.name, volume = %m.name, "subPath: {e}");
                config_error(format!(
                    "failed to prepare subPath for volumeMount \"{}\" of container \"{}\"",
                    m.name, c.name
                ))
            })?;
        }
        mounts.push(HostMount {
            container_path: m.mount_path.clone(),
            host_path,
            readonly: m.read_only.unwrap_or(false) || volumes::claim_read_only(pod, &m.name),
        });
    }
    if crate::etc_hosts::container_wants_managed(c.volume_mounts.iter().flatten().map(|m| &m.mount_path)) {
        let cluster_domain = k.config().cluster_domain.clone();
        match crate::etc_hosts::ensure(&pod_dir, pod, env.pod_ips, &cluster_domain) {
            Ok(Some(host_path)) => mounts.push(HostMount {
                container_path: crate::etc_hosts::ETC_HOSTS.into(),
                host_path,
                readonly: false,
            }),
            Ok(None) => {}
            Err(e) => {
                let msg = format!("failed to write the pod's /etc/hosts: {e}");
                event(k, pod, Type::Warning, "Failed", format!("Error: {msg}"));
                return Err(("CreateContainerConfigError".into(), msg));
            }
        }
    }
    let dir = volumes::pod_dir(&k.opts.root_dir, pod.metadata.uid.as_deref().unwrap_or(""))
        .join("containers")
        .join(&c.name);
    let term_log = dir.join(format!("{:08x}", rand::random::<u32>()));
    // World-writable, as upstream: the container may run as any user.
    let term_log = std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::write(&term_log, b""))
        .and_then(|_| {
            std::fs::set_permissions(&term_log, std::os::unix::fs::PermissionsExt::from_mode(0o666))
        })
        .ok()
        .map(|_| term_log);
    let kv: Vec<cri::KeyValue> =
        vars.iter().map(|(k, v)| cri::KeyValue { key: k.clone(), value: v.clone() }).collect();
    let mut cfg =
        kuberuntime::container_config(pod, c, attempt, kv, mounts, term_log.as_deref(), k.memory_capacity);
    if let Some(target) = target
        && let Some(ns) = cfg
            .linux
            .as_mut()
            .and_then(|l| l.security_context.as_mut())
            .and_then(|s| s.namespace_options.as_mut())
    {
        ns.pid = cri::NamespaceMode::Target as i32;
        ns.target_id = target.to_string();
    }
    cfg.command = cfg.command.iter().map(|s| crate::envs::expand(s, &vars)).collect();
    cfg.args = cfg.args.iter().map(|s| crate::envs::expand(s, &vars)).collect();
    let id = k.runtime.create_container(env.sandbox_id, cfg, env.sandbox_cfg.clone()).await.map_err(|e| {
        event(k, pod, Type::Warning, "Failed", format!("Error: {e}"));
        ("CreateContainerError".to_string(), e.to_string())
    })?;
    event(k, pod, Type::Normal, "Created", format!("Created container {}", c.name));
    k.runtime.start_container(&id).await.map_err(|e| {
        event(k, pod, Type::Warning, "Failed", format!("Error: {e}"));
        ("RunContainerError".to_string(), e.to_string())
    })?;
    event(k, pod, Type::Normal, "Started", format!("Started container {}", c.name));
    tracing::info!(pod = %full_name(pod), container = %c.name, attempt, "started container");
    if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
        // Upstream bounds nothing but the exec's own timeout; a hook that never ends would
        // hold this pod's worker, so it gets the termination grace period at most.
        let budget = Duration::from_secs(grace_of(Some(pod), &[], None).max(MIN_GRACE_SECONDS) as u64);
        let pod_ip = env.pod_ips.first().map(String::as_str).unwrap_or_default();
        if let Err(msg) = crate::lifecycle::run(&k.runtime, &id, c, hook, pod_ip, budget).await {
            event(k, pod, Type::Warning, "FailedPostStartHook", msg);
            let _ = k.runtime.stop_container(&id, grace_of(Some(pod), &[], None)).await;
        }
    }
    Ok(())
}

/// Computes the status, keeps it, and writes it to the API pod (the mirror pod for a static
/// pod) when it changed.
#[allow(clippy::too_many_arguments)]
/// Admits a new pod once, against the admitted pods that have not finished. A pod that has
/// a sandbox already (found after a kubelet restart) is admitted as it is.
fn admit(k: &Kubelet, uid: &str, pod: &Pod, has_sandbox: bool) -> Result<(), crate::admission::Rejection> {
    let mut admitted = k.worker_state.admitted.lock();
    if admitted.contains(uid) {
        return Ok(());
    }
    if !has_sandbox {
        let finished: std::collections::HashSet<String> = k
            .statuses
            .lock()
            .iter()
            .filter(|(_, s)| matches!(s.phase.as_deref(), Some("Succeeded" | "Failed")))
            .map(|(u, _)| u.clone())
            .collect();
        let others: Vec<Pod> = admitted
            .iter()
            .filter(|u| !finished.contains(*u))
            .filter_map(|u| k.pods.get(u).map(|(p, _)| p))
            .collect();
        crate::admission::admit(pod, &others)?;
    }
    admitted.insert(uid.to_string());
    Ok(())
}

/// Fails a pod the node cannot run, for good, as upstream's `rejectPod`: a Warning event
/// and a `Failed` status with the reason.
async fn reject(k: &Kubelet, pod: &Pod, source: Source, r: crate::admission::Rejection) {
    tracing::info!(pod = %full_name(pod), reason = r.reason, "pod rejected");
    event(k, pod, Type::Warning, r.reason, r.message.clone());
    let status = PodStatus {
        phase: Some("Failed".into()),
        reason: Some(r.reason.into()),
        message: Some(format!("Pod was rejected: {}", r.message)),
        ..Default::default()
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    k.statuses.lock().insert(uid.clone(), status.clone());
    let target = match source {
        Source::Api => Some(pod.clone()),
        Source::File => k.pods.mirror_of(&full_name(pod)),
    };
    if let Some(target) = target {
        patch_status(k, pod, &target, &uid, &status).await;
    }
}

/// Writes `status` to the API object `target` (the pod, or a static pod's mirror) and
/// remembers it as written.
async fn patch_status(k: &Kubelet, pod: &Pod, target: &Pod, uid: &str, status: &PodStatus) {
    let Some(client) = &k.client else { return };
    let api: Api<Pod> = Api::namespaced(client.clone(), target.metadata.namespace.as_deref().unwrap_or(""));
    let patch = serde_json::json!({ "status": status });
    match api
        .patch_status(
            target.metadata.name.as_deref().unwrap_or(""),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => {
            k.worker_state.written.lock().insert(uid.to_string(), status.clone());
        }
        Err(err) => tracing::warn!(pod = %full_name(pod), %err, "writing pod status"),
    }
}

async fn write_status(
    k: &Kubelet,
    pod: &Pod,
    source: Source,
    recs: &HashMap<String, ContainerRecord>,
    views: &HashMap<String, ContainerView>,
    sandbox_ready: bool,
    pod_ips: &[String],
    host_ip: &str,
) -> PodStatus {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let target = match source {
        Source::Api => Some(pod.clone()),
        Source::File => k.pods.mirror_of(&full_name(pod)),
    };
    let previous =
        k.statuses.lock().get(&uid).cloned().or_else(|| target.as_ref().and_then(|t| t.status.clone()));
    let mut status = crate::status::compute(&crate::status::Inputs {
        pod,
        records: recs,
        views,
        sandbox_ready,
        pod_ips,
        host_ip,
        previous: previous.as_ref(),
        now: k8s_openapi::jiff::Timestamp::now(),
    });
    if let Some((reason, message)) = k.worker_state.evicted.lock().get(&uid).copied() {
        status.phase = Some("Failed".into());
        status.reason = Some(reason.into());
        status.message = Some(message.into());
    }
    k.statuses.lock().insert(uid.clone(), status.clone());
    let (Some(_), Some(target)) = (&k.client, target) else { return status };
    if k.worker_state.written.lock().get(&uid) == Some(&status) {
        return status;
    }
    patch_status(k, pod, &target, &uid, &status).await;
    status
}
