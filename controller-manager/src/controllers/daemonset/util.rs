//! What a DaemonSet's pods look like and where they belong, free of I/O (upstream
//! `pkg/controller/daemon/util` and the scheduling checks of `daemon_controller.go`): the
//! tolerations added to every daemon pod, the node affinity that pins a pod to its node
//! for the default scheduler, and whether a node should run (or keep running) a pod.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec,
    PodTemplateSpec, Toleration,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use component_base::labels::{NodeSelectorMatcher, first_untolerated};

use crate::controllers::deployment::util::scaled_value;
use crate::history::HASH_LABEL;

/// The pod label carrying the DaemonSet's template generation (deprecated upstream, still
/// written and honoured).
pub const TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";
/// Where the API server keeps a DaemonSet's template generation.
pub const TEMPLATE_GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";

const NO_EXECUTE: &str = "NoExecute";
const NO_SCHEDULE: &str = "NoSchedule";

/// The template generation the API server recorded, if it parses.
pub fn template_generation(ds: &DaemonSet) -> Option<i64> {
    ds.metadata.annotations.as_ref()?.get(TEMPLATE_GENERATION_ANNOTATION)?.parse().ok()
}

/// Upstream's `AddOrUpdateTolerationInPodSpec`: replaces a toleration with the same key,
/// operator, value and effect, else appends.
fn add_or_update_toleration(spec: &mut PodSpec, t: Toleration) {
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    let same = |o: &Toleration| {
        o.key == t.key
            && o.effect == t.effect
            && o.operator.as_deref().unwrap_or("Equal") == t.operator.as_deref().unwrap_or("Equal")
            && o.value.as_deref().unwrap_or("") == t.value.as_deref().unwrap_or("")
    };
    match tolerations.iter_mut().find(|o| same(o)) {
        Some(existing) => *existing = t,
        None => tolerations.push(t),
    }
}

fn exists(key: &str, effect: &str) -> Toleration {
    Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some(effect.into()),
        ..Default::default()
    }
}

/// The tolerations every daemon pod gets (upstream `AddOrUpdateDaemonPodTolerations`):
/// node problems and cordons must not evict or keep out a node's own daemons.
pub fn add_daemon_tolerations(spec: &mut PodSpec) {
    add_or_update_toleration(spec, exists("node.kubernetes.io/not-ready", NO_EXECUTE));
    add_or_update_toleration(spec, exists("node.kubernetes.io/unreachable", NO_EXECUTE));
    add_or_update_toleration(spec, exists("node.kubernetes.io/disk-pressure", NO_SCHEDULE));
    add_or_update_toleration(spec, exists("node.kubernetes.io/memory-pressure", NO_SCHEDULE));
    add_or_update_toleration(spec, exists("node.kubernetes.io/pid-pressure", NO_SCHEDULE));
    add_or_update_toleration(spec, exists("node.kubernetes.io/unschedulable", NO_SCHEDULE));
    if spec.host_network == Some(true) {
        add_or_update_toleration(spec, exists("node.kubernetes.io/network-unavailable", NO_SCHEDULE));
    }
}

/// The template pods are created from (upstream `CreatePodTemplate`): the daemon
/// tolerations, and the generation and hash labels that say which revision a pod runs.
pub fn pod_template(ds: &DaemonSet, hash: &str) -> PodTemplateSpec {
    let mut t = ds.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    add_daemon_tolerations(t.spec.get_or_insert_with(Default::default));
    let labels = t.metadata.get_or_insert_with(Default::default).labels.get_or_insert_with(Default::default);
    if let Some(g) = template_generation(ds) {
        labels.insert(TEMPLATE_GENERATION_LABEL.into(), g.to_string());
    }
    if !hash.is_empty() {
        labels.insert(HASH_LABEL.into(), hash.into());
    }
    t
}

/// Pins a pod to `node` for the default scheduler (upstream
/// `ReplaceDaemonSetPodNodeNameNodeAffinity`): the required node affinity becomes one
/// term matching the node's `metadata.name`. Replacing the user's terms is safe because
/// the controller already checked the node satisfies them.
pub fn pin_to_node(affinity: Option<Affinity>, node: &str) -> Affinity {
    let term = NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: "metadata.name".into(),
            operator: "In".into(),
            values: Some(vec![node.into()]),
        }]),
        ..Default::default()
    };
    let mut affinity = affinity.unwrap_or_default();
    let na = affinity.node_affinity.get_or_insert_with(NodeAffinity::default);
    na.required_during_scheduling_ignored_during_execution =
        Some(NodeSelector { node_selector_terms: vec![term] });
    affinity
}

/// The node a daemon pod is for: its `nodeName`, else the `metadata.name` its required
/// node affinity pins it to (upstream `GetTargetNodeName`).
pub fn target_node(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(n) = spec.node_name.as_ref().filter(|n| !n.is_empty()) {
        return Some(n.clone());
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms.iter().flat_map(|t| t.match_fields.iter().flatten()).find_map(|r| {
        let values = r.values.as_deref().unwrap_or_default();
        (r.key == "metadata.name" && r.operator == "In" && values.len() == 1).then(|| values[0].clone())
    })
}

/// What a DaemonSet's template needs of a node, parsed once per sync.
pub struct Placement {
    node_name: Option<String>,
    node_selector: Vec<(String, String)>,
    affinity: Option<NodeSelectorMatcher>,
    tolerations: Vec<Toleration>,
}

impl Placement {
    pub fn new(ds: &DaemonSet) -> Self {
        let mut spec = ds.spec.as_ref().and_then(|s| s.template.spec.clone()).unwrap_or_default();
        add_daemon_tolerations(&mut spec);
        let affinity = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| na.required_during_scheduling_ignored_during_execution.as_ref())
            .map(|r| NodeSelectorMatcher::new(&r.node_selector_terms));
        Self {
            node_name: spec.node_name.filter(|n| !n.is_empty()),
            node_selector: spec.node_selector.unwrap_or_default().into_iter().collect(),
            affinity,
            tolerations: spec.tolerations.unwrap_or_default(),
        }
    }

    /// (should run, should continue running) on `node` (upstream `NodeShouldRunDaemonPod`):
    /// a pod already there stays while no untolerated NoExecute taint arrives, even if a
    /// new NoSchedule taint would keep a new one out.
    pub fn on(&self, node: &Node) -> (bool, bool) {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        if self.node_name.as_deref().is_some_and(|n| n != name) {
            return (false, false);
        }
        let empty = Default::default();
        let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
        let selected = self.node_selector.iter().all(|(k, v)| labels.get(k) == Some(v));
        if !selected || self.affinity.as_ref().is_some_and(|m| !m.matches(name, labels)) {
            return (false, false);
        }
        let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref()).unwrap_or_default();
        if first_untolerated(taints, &self.tolerations, &[NO_EXECUTE, NO_SCHEDULE]).is_some() {
            let keep = first_untolerated(taints, &self.tolerations, &[NO_EXECUTE]).is_none();
            return (false, keep);
        }
        (true, true)
    }
}

/// Whether a pod runs the DaemonSet's current template: its hash label, or (for pods made
/// before hashes) its template generation (upstream `IsPodUpdated`).
pub fn is_pod_updated(pod: &Pod, hash: &str, generation: Option<i64>) -> bool {
    let labels = pod.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    let generation_matches =
        generation.is_some_and(|g| label(TEMPLATE_GENERATION_LABEL) == Some(g.to_string().as_str()));
    let hash_matches = !hash.is_empty() && label(HASH_LABEL) == Some(hash);
    hash_matches || generation_matches
}

/// Scheduled pods first, then the oldest, then by name (upstream
/// `podByCreationTimestampAndPhase`).
pub fn sort_oldest_first(pods: &mut [Arc<Pod>]) {
    pods.sort_by(|a, b| {
        let scheduled =
            |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| !n.is_empty());
        let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        scheduled(b)
            .cmp(&scheduled(a))
            .then_with(|| created(a).cmp(&created(b)))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
}

fn rolling(ds: &DaemonSet) -> Option<&k8s_openapi::api::apps::v1::RollingUpdateDaemonSet> {
    let s = ds.spec.as_ref()?.update_strategy.as_ref()?;
    if s.type_.as_deref().unwrap_or("RollingUpdate") != "RollingUpdate" {
        return None;
    }
    s.rolling_update.as_ref()
}

pub fn is_rolling_update(ds: &DaemonSet) -> bool {
    let t = ds.spec.as_ref().and_then(|s| s.update_strategy.as_ref()).and_then(|s| s.type_.as_deref());
    t.is_none_or(|t| t == "RollingUpdate")
}

/// maxSurge resolved against `desired` (rounded up); 0 unless rolling with a surge.
pub fn surge_count(ds: &DaemonSet, desired: i32) -> Result<i32, crate::controller::Error> {
    match rolling(ds).and_then(|r| r.max_surge.as_ref()) {
        Some(v) => scaled_value(v, desired, true),
        None => Ok(0),
    }
}

/// maxUnavailable resolved against `desired` (rounded up); 0 unless rolling.
pub fn unavailable_count(ds: &DaemonSet, desired: i32) -> Result<i32, crate::controller::Error> {
    match rolling(ds) {
        Some(r) => scaled_value(r.max_unavailable.as_ref().unwrap_or(&IntOrString::Int(1)), desired, true),
        None => Ok(0),
    }
}

/// Whether an update may run an extra pod per node (a non-zero maxSurge).
pub fn allows_surge(ds: &DaemonSet) -> bool {
    surge_count(ds, 1).is_ok_and(|n| n != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ds(spec: serde_json::Value) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "d", "namespace": "ns",
                "annotations": {TEMPLATE_GENERATION_ANNOTATION: "3"}},
            "spec": {"selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}}, "spec": spec}},
        }))
        .unwrap()
    }

    fn node(name: &str, labels: serde_json::Value, taints: serde_json::Value) -> Node {
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}}),
        )
        .unwrap()
    }

    #[test]
    fn daemon_tolerations_are_added_once() {
        let mut spec: PodSpec = serde_json::from_value(json!({
            "containers": [],
            "hostNetwork": true,
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": 5}],
        }))
        .unwrap();
        add_daemon_tolerations(&mut spec);
        add_daemon_tolerations(&mut spec);
        let t = spec.tolerations.unwrap();
        assert_eq!(t.len(), 7);
        // The user's not-ready toleration is replaced by the unbounded one.
        assert!(t.iter().all(|t| t.toleration_seconds.is_none()));
        assert!(t.iter().any(|t| t.key.as_deref() == Some("node.kubernetes.io/network-unavailable")));
    }

    #[test]
    fn template_carries_generation_hash_and_tolerations() {
        let d = ds(json!({"containers": [{"name": "c", "image": "i"}]}));
        let t = pod_template(&d, "abc");
        let labels = t.metadata.unwrap().labels.unwrap();
        assert_eq!(labels[TEMPLATE_GENERATION_LABEL], "3");
        assert_eq!(labels[HASH_LABEL], "abc");
        assert_eq!(t.spec.unwrap().tolerations.unwrap().len(), 6);
    }

    #[test]
    fn pinning_replaces_required_terms_and_is_read_back() {
        let affinity: Affinity = serde_json::from_value(json!({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [{"key": "x", "operator": "Exists"}]}}]}}))
        .unwrap();
        let pinned = pin_to_node(Some(affinity), "n1");
        let na = pinned.node_affinity.as_ref().unwrap();
        assert_eq!(
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
                .unwrap()
                .node_selector_terms
                .len(),
            1
        );
        assert!(na.preferred_during_scheduling_ignored_during_execution.is_some());
        let pod = Pod {
            spec: Some(PodSpec { affinity: Some(pinned), ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(target_node(&pod).as_deref(), Some("n1"));
        let bound = Pod {
            spec: Some(PodSpec { node_name: Some("n2".into()), ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(target_node(&bound).as_deref(), Some("n2"));
        assert_eq!(target_node(&Pod::default()), None);
    }

    #[test]
    fn should_run_follows_selector_affinity_and_taints() {
        let d = ds(json!({
            "containers": [],
            "nodeSelector": {"disk": "ssd"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
        }));
        let p = Placement::new(&d);
        let ok = json!({"disk": "ssd", "zone": "a"});
        assert_eq!(p.on(&node("n", ok.clone(), json!([]))), (true, true));
        assert_eq!(p.on(&node("n", json!({"disk": "hdd", "zone": "a"}), json!([]))), (false, false));
        assert_eq!(p.on(&node("n", json!({"disk": "ssd", "zone": "b"}), json!([]))), (false, false));
        // A NoSchedule taint keeps new pods out but lets a running one stay.
        let no_schedule = json!([{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]);
        assert_eq!(p.on(&node("n", ok.clone(), no_schedule)), (false, true));
        let no_execute = json!([{"key": "dedicated", "value": "x", "effect": "NoExecute"}]);
        assert_eq!(p.on(&node("n", ok.clone(), no_execute)), (false, false));
        // The automatic tolerations cover cordons and node problems.
        let cordoned = json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]);
        assert_eq!(p.on(&node("n", ok.clone(), cordoned)), (true, true));
        // A toleration in the template lets the pod onto a tainted node.
        let tolerant = ds(json!({"containers": [],
            "tolerations": [{"key": "dedicated", "operator": "Exists"}]}));
        let tainted = json!([{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]);
        assert_eq!(Placement::new(&tolerant).on(&node("n", json!({}), tainted)), (true, true));
        // spec.nodeName names the only node.
        let named = ds(json!({"containers": [], "nodeName": "other"}));
        assert_eq!(Placement::new(&named).on(&node("n", json!({}), json!([]))), (false, false));
    }

    #[test]
    fn updated_by_hash_or_generation() {
        let pod = |labels: serde_json::Value| -> Pod {
            serde_json::from_value(json!({"metadata": {"labels": labels}})).unwrap()
        };
        assert!(is_pod_updated(&pod(json!({HASH_LABEL: "h"})), "h", Some(2)));
        assert!(is_pod_updated(&pod(json!({TEMPLATE_GENERATION_LABEL: "2"})), "h", Some(2)));
        assert!(!is_pod_updated(
            &pod(json!({HASH_LABEL: "old", TEMPLATE_GENERATION_LABEL: "1"})),
            "h",
            Some(2)
        ));
    }

    #[test]
    fn surge_and_unavailable_counts() {
        let mut d = ds(json!({"containers": []}));
        d.spec.as_mut().unwrap().update_strategy = Some(
            serde_json::from_value(json!({"type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "10%"}}))
            .unwrap(),
        );
        assert_eq!(surge_count(&d, 15).unwrap(), 2);
        assert_eq!(unavailable_count(&d, 15).unwrap(), 0);
        assert!(allows_surge(&d));
        d.spec.as_mut().unwrap().update_strategy =
            Some(serde_json::from_value(json!({"type": "OnDelete"})).unwrap());
        assert_eq!(unavailable_count(&d, 15).unwrap(), 0);
        assert!(!allows_surge(&d));
        assert!(!is_rolling_update(&d));
    }
}
