//! The scheduler cache: every node with the pods placed on it, including *assumed* pods
//! (chosen by a scheduling cycle, binding still in flight), so the next cycle already sees
//! their resources used. Also the cluster objects plugins consult (namespaces' labels,
//! PVCs, PVs, PodDisruptionBudgets) and pods nominated to nodes by preemption.
//!
//! Nodes live in a vector (with a name index) so a cycle can walk them in a stable order
//! from a rotating start index without hashing 5000 names per pod.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;

use crate::framework::events;
use crate::framework::labels::{Labels, Selector};
use crate::framework::types::{NodeInfo, PodInfo};

#[derive(Debug)]
struct PodEntry {
    pod: Arc<PodInfo>,
    node: String,
    /// Placed by this scheduler, not yet seen bound through the informer.
    assumed: bool,
}

#[derive(Debug, Default)]
pub struct Cache {
    nodes: Vec<NodeInfo>,
    index: HashMap<String, usize>,
    pods: HashMap<String, PodEntry>,
    /// Namespace name → labels, for affinity terms' namespaceSelector. Shared, because
    /// each cycle's affinity state holds it.
    pub namespaces: Arc<HashMap<String, Labels>>,
    /// `namespace/name` → claim.
    pub pvcs: HashMap<String, Arc<PersistentVolumeClaim>>,
    pub pvs: HashMap<String, Arc<PersistentVolume>>,
    /// StorageClasses by name (delayed binding and provisioning).
    pub storage_classes: HashMap<String, Arc<StorageClass>>,
    /// `namespace/name` → budget.
    pub pdbs: HashMap<String, Arc<PodDisruptionBudget>>,
    /// Services' selectors, by `namespace/name`: (namespace, selector).
    pub services: HashMap<String, (String, Labels)>,
    /// ReplicaSets', StatefulSets' and ReplicationControllers' selectors by uid, for
    /// the pods they control (default topology spreading).
    pub controllers: HashMap<String, Selector>,
    /// Node → pending pods nominated to it by preemption.
    nominated: HashMap<String, Vec<Arc<PodInfo>>>,
    nominated_node_of: HashMap<String, String>,
    /// Image name → number of nodes that have it (ImageLocality's spread factor).
    image_nodes: HashMap<String, usize>,
}

impl Cache {
    pub fn new() -> Self {
        Self::default()
    }

    fn slot(&mut self, name: &str) -> &mut NodeInfo {
        let i = match self.index.get(name) {
            Some(i) => *i,
            None => {
                self.nodes.push(NodeInfo::empty(name));
                self.index.insert(name.to_owned(), self.nodes.len() - 1);
                self.nodes.len() - 1
            }
        };
        &mut self.nodes[i]
    }

    fn drop_slot_if_unused(&mut self, name: &str) {
        let Some(&i) = self.index.get(name) else { return };
        if self.nodes[i].node.is_some() || !self.nodes[i].pods.is_empty() {
            return;
        }
        self.index.remove(name);
        self.nodes.swap_remove(i);
        if let Some(moved) = self.nodes.get(i) {
            self.index.insert(moved.name.clone(), i);
        }
    }

    /// Adds or replaces a node; returns which [`events`] the change amounts to.
    pub fn add_or_update_node(&mut self, node: Arc<Node>) -> u32 {
        let name = node.metadata.name.clone().unwrap_or_default();
        let old_images: Vec<String> =
            self.get_any(&name).map(|n| n.images.keys().cloned().collect()).unwrap_or_default();
        let info = self.slot(&name);
        let before = info.node.is_some().then(|| {
            (info.labels.clone(), info.taints.clone(), info.unschedulable, info.allocatable.clone())
        });
        info.set_node(node);
        let new_images: Vec<String> = info.images.keys().cloned().collect();
        let mask = match before {
            None => events::NODE_ADD,
            Some((labels, taints, unschedulable, allocatable)) => {
                let mut m = events::NODE_OTHER;
                if labels != info.labels {
                    m |= events::NODE_LABEL;
                }
                if taints != info.taints || unschedulable != info.unschedulable {
                    m |= events::NODE_TAINT;
                }
                if allocatable != info.allocatable {
                    m |= events::NODE_ALLOCATABLE;
                }
                m
            }
        };
        for image in old_images {
            if let Some(c) = self.image_nodes.get_mut(&image) {
                *c = c.saturating_sub(1);
            }
        }
        for image in new_images {
            *self.image_nodes.entry(image).or_default() += 1;
        }
        mask
    }

    pub fn remove_node(&mut self, name: &str) {
        let Some(&i) = self.index.get(name) else { return };
        let images: Vec<String> = self.nodes[i].images.keys().cloned().collect();
        for image in images {
            if let Some(c) = self.image_nodes.get_mut(&image) {
                *c = c.saturating_sub(1);
            }
        }
        let info = &mut self.nodes[i];
        info.node = None;
        info.images.clear();
        self.drop_slot_if_unused(name);
    }

    /// All slots, in the cache's order; some may lack a Node object.
    pub fn node_slots(&self) -> &[NodeInfo] {
        &self.nodes
    }

    /// Nodes that exist (have a Node object).
    pub fn nodes(&self) -> impl Iterator<Item = &NodeInfo> {
        self.nodes.iter().filter(|n| n.node.is_some())
    }

    pub fn node_count(&self) -> usize {
        self.nodes.iter().filter(|n| n.node.is_some()).count()
    }

    /// The node `name`, if it exists.
    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.get_any(name).filter(|n| n.node.is_some())
    }

    fn get_any(&self, name: &str) -> Option<&NodeInfo> {
        self.index.get(name).map(|i| &self.nodes[*i])
    }

    /// How many nodes have `image` (under any of its names).
    pub fn nodes_with_image(&self, image: &str) -> usize {
        self.image_nodes.get(image).copied().unwrap_or(0)
    }

    /// Counts `pod` on `node` before its binding is confirmed.
    pub fn assume(&mut self, pod: Arc<PodInfo>, node: &str) {
        self.clear_nomination(&pod.uid);
        self.place(pod, node, true);
    }

    fn place(&mut self, pod: Arc<PodInfo>, node: &str, assumed: bool) {
        let uid = pod.uid.clone();
        self.slot(node).add_pod(pod.clone());
        self.pods.insert(uid, PodEntry { pod, node: node.to_owned(), assumed });
    }

    /// Undoes [`Cache::assume`] after a failed binding; a pod the informer has since
    /// confirmed stays.
    pub fn forget(&mut self, uid: &str) {
        if self.pods.get(uid).is_some_and(|e| e.assumed) {
            self.remove_pod(uid);
        }
    }

    /// Records a pod the informer reports as bound, replacing its assumed copy.
    /// Returns `true` if the pod was not in the cache before (an add, not an update).
    pub fn add_or_update_pod(&mut self, pod: Arc<PodInfo>) -> bool {
        let is_new = !self.pods.contains_key(&pod.uid);
        if !is_new {
            self.remove_pod(&pod.uid);
        }
        self.clear_nomination(&pod.uid);
        let node = pod.node_name.clone();
        self.place(pod, &node, false);
        is_new
    }

    /// Removes a pod from its node; returns it if it was cached.
    pub fn remove_pod(&mut self, uid: &str) -> Option<Arc<PodInfo>> {
        let entry = self.pods.remove(uid)?;
        if let Some(&i) = self.index.get(&entry.node) {
            self.nodes[i].remove_pod(uid);
        }
        self.drop_slot_if_unused(&entry.node);
        Some(entry.pod)
    }

    /// Whether the pod is placed (assumed or bound), and so must not be scheduled again.
    pub fn is_placed(&self, uid: &str) -> bool {
        self.pods.contains_key(uid)
    }

    pub fn is_assumed(&self, uid: &str) -> bool {
        self.pods.get(uid).is_some_and(|e| e.assumed)
    }

    /// Confirmed (not assumed) pods whose uid is not in `keep`: after a re-list, the pods
    /// deleted while the watch was down.
    pub fn bound_pods_except(&self, keep: &std::collections::HashSet<String>) -> Vec<String> {
        self.pods
            .iter()
            .filter(|(uid, e)| !e.assumed && !keep.contains(*uid))
            .map(|(uid, _)| uid.clone())
            .collect()
    }

    /// Existing nodes whose name is not in `keep`.
    pub fn node_names_except(&self, keep: &std::collections::HashSet<String>) -> Vec<String> {
        self.nodes().filter(|n| !keep.contains(&n.name)).map(|n| n.name.clone()).collect()
    }

    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// Upstream's `DefaultSelector`: the selectors of the Services selecting `pod` and of
    /// its controller (ReplicaSet, StatefulSet, ReplicationController), ANDed; `None`
    /// when nothing selects it.
    pub fn default_selector(&self, pod: &PodInfo) -> Option<Selector> {
        let mut selector = Selector::everything();
        let mut any = false;
        for (ns, sel) in self.services.values() {
            if *ns == pod.namespace
                && !sel.is_empty()
                && sel.iter().all(|(k, v)| pod.labels.get(k) == Some(v))
            {
                for (k, v) in sel {
                    selector.require(k, Some(v));
                }
                any = true;
            }
        }
        let owners = pod.pod.metadata.owner_references.as_deref().unwrap_or(&[]);
        for owner in owners.iter().filter(|o| o.controller == Some(true)) {
            if let Some(sel) = self.controllers.get(&owner.uid) {
                selector.and(sel);
                any = true;
            }
        }
        any.then_some(selector)
    }

    /// Pending pods nominated to `node`.
    pub fn nominated_pods(&self, node: &str) -> &[Arc<PodInfo>] {
        if self.nominated.is_empty() {
            return &[];
        }
        self.nominated.get(node).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Records that `pod` waits for room on `node` (its `status.nominatedNodeName`).
    pub fn nominate(&mut self, pod: Arc<PodInfo>, node: &str) {
        self.clear_nomination(&pod.uid);
        if node.is_empty() || self.pods.contains_key(&pod.uid) {
            return;
        }
        self.nominated_node_of.insert(pod.uid.clone(), node.to_owned());
        self.nominated.entry(node.to_owned()).or_default().push(pod);
    }

    /// The node `uid` is nominated to, as this scheduler last decided or saw.
    pub fn nominated_node(&self, uid: &str) -> Option<&str> {
        self.nominated_node_of.get(uid).map(String::as_str)
    }

    pub fn clear_nomination(&mut self, uid: &str) {
        let Some(node) = self.nominated_node_of.remove(uid) else { return };
        if let Some(list) = self.nominated.get_mut(&node) {
            list.retain(|p| p.uid != uid);
            if list.is_empty() {
                self.nominated.remove(&node);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{node, pod};

    #[test]
    fn assumed_pods_count_until_forgotten() {
        let mut cache = Cache::new();
        cache.add_or_update_node(Arc::new(node("n1", "4", "8Gi")));
        let p = Arc::new(PodInfo::new(Arc::new(pod("p", "1", "1Gi"))));
        cache.assume(Arc::new(p.assumed_on("n1")), "n1");
        assert_eq!(cache.node("n1").unwrap().requested.milli_cpu, 1000);
        assert!(cache.is_placed(&p.uid));
        cache.forget(&p.uid);
        assert_eq!(cache.node("n1").unwrap().requested.milli_cpu, 0);
        assert!(!cache.is_placed(&p.uid));
    }

    #[test]
    fn confirmed_pod_replaces_assumed_and_survives_forget() {
        let mut cache = Cache::new();
        cache.add_or_update_node(Arc::new(node("n1", "4", "8Gi")));
        let p = PodInfo::new(Arc::new(pod("p", "1", "1Gi")));
        let placed = Arc::new(p.assumed_on("n1"));
        cache.assume(placed.clone(), "n1");
        assert!(!cache.add_or_update_pod(placed.clone()));
        cache.forget(&p.uid);
        assert_eq!(cache.node("n1").unwrap().pods.len(), 1);
        cache.remove_pod(&p.uid);
        cache.remove_node("n1");
        assert_eq!(cache.node_slots().len(), 0);
    }

    #[test]
    fn node_update_events() {
        let mut cache = Cache::new();
        let mut n = node("n1", "4", "8Gi");
        assert_eq!(cache.add_or_update_node(Arc::new(n.clone())), events::NODE_ADD);
        n.metadata.labels.get_or_insert_default().insert("zone".into(), "a".into());
        let mask = cache.add_or_update_node(Arc::new(n));
        assert!(mask & events::NODE_LABEL != 0 && mask & events::NODE_TAINT == 0);
    }
}
