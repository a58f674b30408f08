//! VolumeBinding: every PersistentVolumeClaim the pod mounts must be usable on the node.
//! A bound claim's volume must admit the node (its node affinity). A claim of a
//! `WaitForFirstConsumer` class is bound here, for the node chosen (upstream's delayed
//! binding): to a matching Available volume the node can reach (pre-binding it:
//! `spec.claimRef`), else by its class's provisioner on that node (the
//! `volume.kubernetes.io/selected-node` annotation). PreBind writes those decisions and
//! waits for the PV controller (and provisioner) to finish binding before the pod is bound.
//! A claim of an `Immediate` class must be bound already.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, PostParams};
use parking_lot::Mutex;

use component_base::volume::{self as vol, BIND_COMPLETED, BOUND_BY_CONTROLLER, ForNode, SELECTED_NODE};

use crate::cache::Cache;
use crate::framework::labels::{Labels, NodeSelectorMatcher};
use crate::framework::{
    CycleState, Filter, NodeInfo, Plugin, PodInfo, PreBind, PreFilter, Rejection, Reserve, Status, events,
};

pub const NAME: &str = "VolumeBinding";
pub const UNBOUND_REASON: &str = "pod has unbound immediate PersistentVolumeClaims";
pub const CONFLICT_REASON: &str = "node(s) had volume node affinity conflict";
pub const NO_MATCH_REASON: &str = "node(s) didn't find available persistent volumes to bind";
/// The class provisioner that means "static volumes only".
const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";
/// How long PreBind waits for the claims to be bound (upstream's `bindTimeoutSeconds`).
const BIND_TIMEOUT: Duration = Duration::from_secs(600);
const BIND_POLL: Duration = Duration::from_millis(500);

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

/// A claim this scheduler binds (delayed binding), with what it may bind to.
#[derive(Clone)]
struct Unbound {
    claim: Arc<PersistentVolumeClaim>,
    /// Volumes of the claim's class (the only ones it can bind to).
    volumes: Vec<Arc<PersistentVolume>>,
    /// The class's provisioner, when it can provision.
    provisioner: Option<String>,
    /// The class's allowed topologies (OR of ANDed label requirements); empty: anywhere.
    topologies: Vec<Vec<(String, Vec<String>)>>,
}

/// What binding a claim on one node means.
#[derive(Clone)]
enum Action {
    /// Pre-bind this volume to the claim.
    Bind(Arc<PersistentVolume>, Arc<PersistentVolumeClaim>),
    /// Ask the provisioner for a volume on the node.
    Provision(Arc<PersistentVolumeClaim>),
}

#[derive(Clone, Default)]
struct State {
    /// Bound volumes' node affinity, by PV name.
    affinities: HashMap<String, NodeSelectorMatcher>,
    unbound: Vec<Unbound>,
    /// Volumes another pod's decisions already hold.
    taken: HashSet<String>,
    /// Filter's decisions per feasible node, for Reserve (shared by clones of the state).
    decisions: Arc<Mutex<HashMap<String, Vec<Action>>>>,
}

/// Decisions reserved for pods, until PreBind writes them or Unreserve drops them.
#[derive(Default)]
struct Reserved {
    by_pod: HashMap<String, Vec<Action>>,
    volumes: HashSet<String>,
}

pub struct VolumeBinding {
    client: kube::Client,
    reserved: Mutex<Reserved>,
}

impl VolumeBinding {
    pub fn new(client: kube::Client) -> Self {
        Self { client, reserved: Mutex::default() }
    }
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events(&self) -> u32 {
        events::PVC | events::PV | events::STORAGE_CLASS | events::NODE_ADD | events::NODE_LABEL
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilter> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn Filter> {
        Some(self)
    }
    fn as_reserve(&self) -> Option<&dyn Reserve> {
        Some(self)
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBind> {
        Some(self)
    }
}

fn delays_binding(class: Option<&StorageClass>) -> bool {
    class.and_then(|c| c.volume_binding_mode.as_deref()) == Some("WaitForFirstConsumer")
}

fn topologies(class: &StorageClass) -> Vec<Vec<(String, Vec<String>)>> {
    class
        .allowed_topologies
        .iter()
        .flatten()
        .map(|t| {
            t.match_label_expressions.iter().flatten().map(|r| (r.key.clone(), r.values.clone())).collect()
        })
        .collect()
}

fn topology_matches(terms: &[Vec<(String, Vec<String>)>], labels: &Labels) -> bool {
    terms.is_empty()
        || terms.iter().any(|t| t.iter().all(|(k, values)| labels.get(k).is_some_and(|v| values.contains(v))))
}

impl PreFilter for VolumeBinding {
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo, snapshot: &Cache) -> Status {
        let mut s = State { taken: self.reserved.lock().volumes.clone(), ..State::default() };
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
                let class = snapshot.storage_classes.get(vol::claim_class(pvc));
                if !delays_binding(class.map(|c| &**c)) {
                    return Err(Rejection::unresolvable(UNBOUND_REASON));
                }
                let class = class.expect("delayed binding has a class");
                let name = vol::claim_class(pvc);
                let volumes =
                    snapshot.pvs.values().filter(|pv| vol::volume_class(pv) == name).cloned().collect();
                let provisioner =
                    Some(class.provisioner.clone()).filter(|p| !p.is_empty() && p != NO_PROVISIONER);
                s.unbound.push(Unbound {
                    claim: pvc.clone(),
                    volumes,
                    provisioner,
                    topologies: topologies(class),
                });
                continue;
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

/// What binding the pod's unbound claims on `node` takes, or why it cannot be done there.
fn plan(s: &State, node: &str, labels: &Labels) -> Result<Vec<Action>, &'static str> {
    let mut actions = Vec::new();
    let mut chosen: HashSet<String> = HashSet::new();
    for u in &s.unbound {
        let selected = u.claim.metadata.annotations.as_ref().and_then(|a| a.get(SELECTED_NODE));
        if let Some(selected) = selected {
            // Already given to a provisioner for a node: only that node will do.
            if selected != node {
                return Err(NO_MATCH_REASON);
            }
            actions.push(Action::Provision(u.claim.clone()));
            continue;
        }
        let for_node = ForNode { name: node, labels };
        let excluded = |name: &str| s.taken.contains(name) || chosen.contains(name);
        if let Some(pv) = vol::find_matching_volume(&u.claim, &u.volumes, Some(&for_node), &excluded, true) {
            chosen.insert(pv.metadata.name.clone().unwrap_or_default());
            actions.push(Action::Bind(pv, u.claim.clone()));
            continue;
        }
        if u.provisioner.is_none() || !topology_matches(&u.topologies, labels) {
            return Err(NO_MATCH_REASON);
        }
        actions.push(Action::Provision(u.claim.clone()));
    }
    Ok(actions)
}

impl Filter for VolumeBinding {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<State>(NAME) else { return Ok(()) };
        if !s.affinities.values().all(|m| m.matches(&node.name, &node.labels)) {
            return Err(Rejection::unresolvable(CONFLICT_REASON));
        }
        if s.unbound.is_empty() {
            return Ok(());
        }
        let actions = plan(s, &node.name, &node.labels).map_err(Rejection::unresolvable)?;
        s.decisions.lock().insert(node.name.clone(), actions);
        Ok(())
    }
}

impl Reserve for VolumeBinding {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let Some(s) = state.read::<State>(NAME) else { return Ok(()) };
        if s.unbound.is_empty() {
            return Ok(());
        }
        let Some(actions) = s.decisions.lock().get(node).cloned() else {
            return Err(Rejection::error(format!("no volume decisions for node {node}")));
        };
        let mut r = self.reserved.lock();
        for a in &actions {
            if let Action::Bind(pv, _) = a {
                r.volumes.insert(pv.metadata.name.clone().unwrap_or_default());
            }
        }
        r.by_pod.insert(pod.uid.clone(), actions);
        Ok(())
    }

    fn unreserve(&self, _state: &mut CycleState, pod: &PodInfo, _node: &str) {
        let mut r = self.reserved.lock();
        if let Some(actions) = r.by_pod.remove(&pod.uid) {
            for a in actions {
                if let Action::Bind(pv, _) = a {
                    r.volumes.remove(pv.metadata.name.as_deref().unwrap_or_default());
                }
            }
        }
    }
}

impl VolumeBinding {
    /// Writes the decisions (upstream `BindPodVolumes`): volumes pre-bound to their
    /// claims, claims annotated with the node for their provisioner.
    async fn write(&self, actions: &[Action], node: &str) -> Result<(), String> {
        let pvs: Api<PersistentVolume> = Api::all(self.client.clone());
        for a in actions {
            match a {
                Action::Bind(pv, claim) => {
                    let name = pv.metadata.name.clone().unwrap_or_default();
                    let mut updated =
                        pvs.get(&name).await.map_err(|e| format!("persistentvolume {name}: {e}"))?;
                    let spec = updated.spec.get_or_insert_with(Default::default);
                    if spec.claim_ref.as_ref().is_some_and(|r| r.uid.is_some() && r.uid != claim.metadata.uid)
                    {
                        return Err(format!("persistentvolume {name} was bound to another claim"));
                    }
                    spec.claim_ref = Some(vol::claim_ref(claim));
                    updated
                        .metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .insert(BOUND_BY_CONTROLLER.into(), "yes".into());
                    pvs.replace(&name, &PostParams::default(), &updated)
                        .await
                        .map_err(|e| format!("binding persistentvolume {name}: {e}"))?;
                }
                Action::Provision(claim) => {
                    let ns = claim.metadata.namespace.clone().unwrap_or_default();
                    let name = claim.metadata.name.clone().unwrap_or_default();
                    let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
                    let mut updated =
                        api.get(&name).await.map_err(|e| format!("persistentvolumeclaim {name}: {e}"))?;
                    let annotations = updated.metadata.annotations.get_or_insert_with(Default::default);
                    if annotations.get(SELECTED_NODE).map(String::as_str) == Some(node) {
                        continue;
                    }
                    annotations.insert(SELECTED_NODE.into(), node.into());
                    api.replace(&name, &PostParams::default(), &updated)
                        .await
                        .map_err(|e| format!("selecting node for persistentvolumeclaim {name}: {e}"))?;
                }
            }
        }
        Ok(())
    }

    /// Whether every decided claim is bound (upstream `checkBindings`); an error when a
    /// decision can no longer come true.
    async fn bound(&self, actions: &[Action], node: &str) -> Result<bool, String> {
        for a in actions {
            let claim = match a {
                Action::Bind(_, c) | Action::Provision(c) => c,
            };
            let ns = claim.metadata.namespace.clone().unwrap_or_default();
            let name = claim.metadata.name.clone().unwrap_or_default();
            let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
            let Some(fresh) = api.get_opt(&name).await.map_err(|e| e.to_string())? else {
                return Err(format!("persistentvolumeclaim {name} was deleted"));
            };
            if fresh.metadata.uid != claim.metadata.uid {
                return Err(format!("persistentvolumeclaim {name} was replaced"));
            }
            let annotations = fresh.metadata.annotations.as_ref();
            let volume = fresh.spec.as_ref().and_then(|s| s.volume_name.clone()).filter(|v| !v.is_empty());
            let complete = annotations.is_some_and(|a| a.contains_key(BIND_COMPLETED));
            if let Action::Provision(_) = a
                && volume.is_none()
                && annotations.and_then(|a| a.get(SELECTED_NODE)).is_none()
            {
                return Err(format!("selectedNode annotation reset for PVC {name:?}"));
            }
            let Some(volume) = volume.filter(|_| complete) else { return Ok(false) };
            let pvs: Api<PersistentVolume> = Api::all(self.client.clone());
            let Some(pv) = pvs.get_opt(&volume).await.map_err(|e| e.to_string())? else { return Ok(false) };
            if pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).and_then(|r| r.uid.as_ref())
                != claim.metadata.uid.as_ref()
            {
                return Err(format!("persistentvolume {volume} is bound to another claim"));
            }
            let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
            if let Some(n) = nodes.get_opt(node).await.map_err(|e| e.to_string())? {
                let labels = n.metadata.labels.unwrap_or_default();
                if !vol::node_affinity_matches(&pv, node, &labels) {
                    return Err(format!(
                        "persistentvolume {volume} node affinity doesn't match node {node:?}"
                    ));
                }
            }
        }
        Ok(true)
    }
}

impl PreBind for VolumeBinding {
    fn pre_bind<'a>(&'a self, pod: &'a PodInfo, node: &'a str) -> BoxFuture<'a, Status> {
        Box::pin(async move {
            let actions = self.reserved.lock().by_pod.get(&pod.uid).cloned();
            let Some(actions) = actions.filter(|a| !a.is_empty()) else { return Ok(()) };
            self.write(&actions, node).await.map_err(Rejection::error)?;
            let deadline = tokio::time::Instant::now() + BIND_TIMEOUT;
            loop {
                if self.bound(&actions, node).await.map_err(Rejection::error)? {
                    break;
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(Rejection::error(format!(
                        "binding volumes: timed out after {BIND_TIMEOUT:?}"
                    )));
                }
                tokio::time::sleep(BIND_POLL).await;
            }
            // Bound: the informer now shows these volumes as taken.
            let mut r = self.reserved.lock();
            r.by_pod.remove(&pod.uid);
            for a in &actions {
                if let Action::Bind(pv, _) = a {
                    r.volumes.remove(pv.metadata.name.as_deref().unwrap_or_default());
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{node, node_info, pod_info};
    use serde_json::json;

    fn claim(name: &str, class: &str) -> Arc<PersistentVolumeClaim> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                    "storageClassName": class},
            }))
            .unwrap(),
        )
    }

    fn class(name: &str, provisioner: &str, mode: &str) -> Arc<StorageClass> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name}, "provisioner": provisioner,
                "volumeBindingMode": mode}))
            .unwrap(),
        )
    }

    fn local_pv(name: &str, class: &str, host: &str) -> Arc<PersistentVolume> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                    "storageClassName": class, "local": {"path": "/mnt"},
                    "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}]}}},
                "status": {"phase": "Available"},
            }))
            .unwrap(),
        )
    }

    fn pod_with(claims: &[&str]) -> PodInfo {
        let volumes: Vec<_> =
            claims.iter().map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}})).collect();
        pod_info(
            serde_json::from_value(json!({
                "metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
                "spec": {"containers": [{"name": "c", "image": "i"}], "volumes": volumes},
            }))
            .unwrap(),
        )
    }

    fn host(name: &str) -> NodeInfo {
        let mut n = node(name, "4", "8Gi");
        n.metadata.labels = Some([("kubernetes.io/hostname".to_string(), name.to_string())].into());
        node_info(n)
    }

    fn plugin() -> VolumeBinding {
        // A client that is never called by these synchronous extension points.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        VolumeBinding::new(kube::Client::try_from(config).unwrap())
    }

    #[tokio::test]
    async fn delayed_binding_picks_a_local_volume_or_provisions() {
        let mut cache = Cache::new();
        cache.storage_classes.insert("local".into(), class("local", NO_PROVISIONER, "WaitForFirstConsumer"));
        cache
            .storage_classes
            .insert("standard".into(), class("standard", "example.com/p", "WaitForFirstConsumer"));
        cache.storage_classes.insert("now".into(), class("now", "example.com/p", "Immediate"));
        cache.pvcs.insert("default/static".into(), claim("static", "local"));
        cache.pvcs.insert("default/dynamic".into(), claim("dynamic", "standard"));
        cache.pvcs.insert("default/immediate".into(), claim("immediate", "now"));
        cache.pvs.insert("pv-n1".into(), local_pv("pv-n1", "local", "n1"));
        let vb = plugin();

        let pod = pod_with(&["immediate"]);
        let mut state = CycleState::default();
        assert!(vb.pre_filter(&mut state, &pod, &cache).is_err(), "an unbound Immediate claim");

        let pod = pod_with(&["static", "dynamic"]);
        let mut state = CycleState::default();
        vb.pre_filter(&mut state, &pod, &cache).unwrap();
        assert!(vb.filter(&state, &pod, &host("n2")).is_err(), "no local volume on n2");
        vb.filter(&state, &pod, &host("n1")).unwrap();
        vb.reserve(&mut state, &pod, "n1").unwrap();
        let actions = vb.reserved.lock().by_pod["uid-p"].clone();
        assert!(matches!(&actions[0], Action::Bind(pv, _) if pv.metadata.name.as_deref() == Some("pv-n1")));
        assert!(matches!(&actions[1], Action::Provision(c) if c.metadata.name.as_deref() == Some("dynamic")));

        // Reserved for this pod: another pod cannot take the same volume.
        let mut other = pod_with(&["static"]);
        other.uid = "uid-q".into();
        let mut state2 = CycleState::default();
        vb.pre_filter(&mut state2, &other, &cache).unwrap();
        assert!(vb.filter(&state2, &other, &host("n1")).is_err());
        vb.unreserve(&mut state, &pod, "n1");
        let mut state3 = CycleState::default();
        vb.pre_filter(&mut state3, &other, &cache).unwrap();
        vb.filter(&state3, &other, &host("n1")).unwrap();
    }

    #[tokio::test]
    async fn selected_node_and_topologies_restrict_nodes() {
        let mut cache = Cache::new();
        let mut c = (*class("zoned", "example.com/p", "WaitForFirstConsumer")).clone();
        c.allowed_topologies = Some(vec![
            serde_json::from_value(
                json!({"matchLabelExpressions": [{"key": "kubernetes.io/hostname", "values": ["n1"]}]}),
            )
            .unwrap(),
        ]);
        cache.storage_classes.insert("zoned".into(), Arc::new(c));
        cache.pvcs.insert("default/a".into(), claim("a", "zoned"));
        let vb = plugin();
        let pod = pod_with(&["a"]);
        let mut state = CycleState::default();
        vb.pre_filter(&mut state, &pod, &cache).unwrap();
        vb.filter(&state, &pod, &host("n1")).unwrap();
        assert!(vb.filter(&state, &pod, &host("n2")).is_err());

        let mut selected = (*claim("a", "zoned")).clone();
        selected.metadata.annotations = Some([(SELECTED_NODE.to_string(), "n3".to_string())].into());
        cache.pvcs.insert("default/a".into(), Arc::new(selected));
        let mut state = CycleState::default();
        vb.pre_filter(&mut state, &pod, &cache).unwrap();
        assert!(vb.filter(&state, &pod, &host("n1")).is_err(), "only the selected node");
        vb.filter(&state, &pod, &host("n3")).unwrap();
    }
}
