//! The `Node` authorization mode (upstream's `plugin/pkg/auth/authorizer/node`). A kubelet
//! (user `system:node:<name>` in group `system:nodes`) may read the secrets, configmaps,
//! persistent volume claims, persistent volumes and resource claims the pods bound to its
//! node use, create tokens for those pods' service accounts, and manage its own Lease and
//! CSINode; everything else it gets from the `system:node` rules, granted here directly
//! (the `system:node` ClusterRoleBinding is empty). Other users: no opinion.
//!
//! Upstream keeps a graph fed by informers (pod → node, secret → pod, pvc → pod, pv → pvc,
//! secret → pv). Here each node's reachable objects are computed from the pods watch cache
//! (only that node's pods, by the `spec.nodeName` field) and a persistent-volume index,
//! and kept until the pods or volumes change. A request costs a hash lookup.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::Value;

use super::bootstrap_policy::node_rules;
use super::rbac::{Rule, rules_allow};
use super::source::{CacheSource, Derived, MemSource, Source};
use super::{Attributes, Authorizer, Decision, Evaluation, RuleSet};
use crate::authn::{User, names};
use crate::registry::Registry;

/// How many nodes' access sets are kept before the cache starts over.
const MAX_NODES: usize = 20_000;

/// A namespaced object: (namespace, name).
type Ref = (String, String);

/// What one node's pods reach.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct NodeAccess {
    pub secrets: HashSet<Ref>,
    pub configmaps: HashSet<Ref>,
    pub pvcs: HashSet<Ref>,
    pub service_accounts: HashSet<Ref>,
    pub resource_claims: HashSet<Ref>,
    pub pvs: HashSet<String>,
}

/// Persistent volumes by the claim they are bound to, with the secrets each uses.
#[derive(Default)]
pub struct PvIndex {
    by_claim: HashMap<Ref, Vec<(String, Vec<Ref>)>>,
}

impl PvIndex {
    fn build(objects: &[Bytes]) -> Self {
        let mut by_claim: HashMap<Ref, Vec<(String, Vec<Ref>)>> = HashMap::new();
        for b in objects {
            let Ok(pv) = serde_json::from_slice::<Value>(b) else { continue };
            let claim = &pv["spec"]["claimRef"];
            let (Some(ns), Some(name)) = (claim["namespace"].as_str(), claim["name"].as_str()) else {
                continue;
            };
            let pv_name = pv["metadata"]["name"].as_str().unwrap_or_default().to_string();
            by_claim.entry((ns.into(), name.into())).or_default().push((pv_name, pv_secrets(&pv, ns)));
        }
        Self { by_claim }
    }
}

/// The secrets a kubelet reads to mount a volume (upstream's `VisitPVSecretNames`, the
/// kubelet-visible ones); a reference without namespace means the claim's.
fn pv_secrets(pv: &Value, claim_ns: &str) -> Vec<Ref> {
    let spec = &pv["spec"];
    let mut out = Vec::new();
    if let Some(name) = spec["azureFile"]["secretName"].as_str() {
        let ns = spec["azureFile"]["secretNamespace"].as_str().filter(|n| !n.is_empty()).unwrap_or(claim_ns);
        out.push((ns.to_string(), name.to_string()));
    }
    let mut push = |r: &Value, default_ns: &str| {
        if let Some(name) = r["name"].as_str().filter(|n| !n.is_empty()) {
            let ns = r["namespace"].as_str().filter(|n| !n.is_empty()).unwrap_or(default_ns);
            out.push((ns.to_string(), name.to_string()));
        }
    };
    for src in ["cephfs", "cinder", "flexVolume", "rbd", "scaleIO", "iscsi", "storageos"] {
        push(&spec[src]["secretRef"], claim_ns);
    }
    for r in ["nodeStageSecretRef", "nodePublishSecretRef", "nodeExpandSecretRef"] {
        push(&spec["csi"][r], claim_ns);
    }
    out
}

fn name_of(v: &Value) -> Option<&str> {
    v.as_str().filter(|s| !s.is_empty())
}

/// Adds what one pod references (upstream's `AddPod`: `VisitPodSecretNames`,
/// `VisitPodConfigmapNames`, claims of volumes and ephemeral volumes, the service account,
/// resource claims).
pub fn add_pod(pod: &Value, access: &mut NodeAccess) {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let spec = &pod["spec"];
    let r = |n: &str| (ns.to_string(), n.to_string());
    if let Some(sa) = name_of(&spec["serviceAccountName"]) {
        access.service_accounts.insert(r(sa));
    }
    for s in spec["imagePullSecrets"].as_array().into_iter().flatten() {
        if let Some(n) = name_of(&s["name"]) {
            access.secrets.insert(r(n));
        }
    }
    for kind in ["initContainers", "containers", "ephemeralContainers"] {
        for c in spec[kind].as_array().into_iter().flatten() {
            for e in c["envFrom"].as_array().into_iter().flatten() {
                if let Some(n) = name_of(&e["secretRef"]["name"]) {
                    access.secrets.insert(r(n));
                }
                if let Some(n) = name_of(&e["configMapRef"]["name"]) {
                    access.configmaps.insert(r(n));
                }
            }
            for e in c["env"].as_array().into_iter().flatten() {
                if let Some(n) = name_of(&e["valueFrom"]["secretKeyRef"]["name"]) {
                    access.secrets.insert(r(n));
                }
                if let Some(n) = name_of(&e["valueFrom"]["configMapKeyRef"]["name"]) {
                    access.configmaps.insert(r(n));
                }
            }
        }
    }
    for v in spec["volumes"].as_array().into_iter().flatten() {
        if let Some(n) = name_of(&v["secret"]["secretName"]) {
            access.secrets.insert(r(n));
        }
        if let Some(n) = name_of(&v["configMap"]["name"]) {
            access.configmaps.insert(r(n));
        }
        for src in v["projected"]["sources"].as_array().into_iter().flatten() {
            if let Some(n) = name_of(&src["secret"]["name"]) {
                access.secrets.insert(r(n));
            }
            if let Some(n) = name_of(&src["configMap"]["name"]) {
                access.configmaps.insert(r(n));
            }
        }
        for src in ["cephfs", "cinder", "flexVolume", "rbd", "scaleIO", "iscsi", "storageos"] {
            if let Some(n) = name_of(&v[src]["secretRef"]["name"]) {
                access.secrets.insert(r(n));
            }
        }
        if let Some(n) = name_of(&v["azureFile"]["secretName"]) {
            access.secrets.insert(r(n));
        }
        if let Some(n) = name_of(&v["csi"]["nodePublishSecretRef"]["name"]) {
            access.secrets.insert(r(n));
        }
        if let Some(n) = name_of(&v["persistentVolumeClaim"]["claimName"]) {
            access.pvcs.insert(r(n));
        } else if !v["ephemeral"].is_null()
            && let Some(vol) = name_of(&v["name"])
        {
            // The claim the ephemeral volume controller creates: `<pod>-<volume>`.
            access.pvcs.insert(r(&format!("{pod_name}-{vol}")));
        }
    }
    let statuses = pod["status"]["resourceClaimStatuses"].as_array().cloned().unwrap_or_default();
    for c in spec["resourceClaims"].as_array().into_iter().flatten() {
        let claim = name_of(&c["resourceClaimName"]).map(str::to_string).or_else(|| {
            let name = c["name"].as_str()?;
            statuses
                .iter()
                .find(|s| s["name"] == name)
                .and_then(|s| name_of(&s["resourceClaimName"]).map(str::to_string))
        });
        if let Some(claim) = claim {
            access.resource_claims.insert(r(&claim));
        }
    }
}

/// A node's access, computed at some pods revision and persistent-volume index.
struct Entry {
    pods_rev: i64,
    pvs: Arc<PvIndex>,
    access: Arc<NodeAccess>,
}

/// The `Node` authorizer.
pub struct NodeAuthorizer {
    pods: Arc<dyn Source>,
    pvs: Derived<PvIndex>,
    rules: Vec<Rule>,
    entries: Mutex<HashMap<String, Entry>>,
}

/// The node a user is, if it is one (upstream's `NodeIdentity`): `Some("")` for a node
/// user whose name lacks the node.
pub fn node_identity(user: &User) -> Option<&str> {
    let name = user.name.strip_prefix(names::NODE_USER_PREFIX)?;
    user.groups.iter().any(|g| g == names::NODES_GROUP).then_some(name)
}

fn no_opinion(reason: impl Into<String>) -> Evaluation {
    Decision::NoOpinion(reason.into()).into()
}

fn allow() -> Evaluation {
    Decision::Allow(String::new()).into()
}

#[derive(Clone, Copy)]
enum Kind {
    Secret,
    ConfigMap,
    Pvc,
    Pv,
    ResourceClaim,
    ServiceAccount,
    /// VolumeAttachments are not served here: nothing reaches them.
    VolumeAttachment,
}

impl NodeAuthorizer {
    pub fn new(pods: Arc<dyn Source>, pvs: Arc<dyn Source>) -> Self {
        Self {
            pods,
            pvs: Derived::new(pvs, PvIndex::build),
            rules: node_rules(),
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub fn from_registry(registry: &Registry) -> Self {
        let src = |plural: &str| -> Arc<dyn Source> {
            match registry.find("", "v1", plural) {
                Some(store) => Arc::new(CacheSource(store)),
                None => MemSource::new(Vec::new()),
            }
        };
        Self::new(src("pods"), src("persistentvolumes"))
    }

    /// What `node`'s pods reach now.
    pub fn access(&self, node: &str) -> Arc<NodeAccess> {
        let pods_rev = self.pods.revision();
        let pvs = self.pvs.get();
        {
            let entries = self.entries.lock();
            if let Some(e) = entries.get(node)
                && e.pods_rev == pods_rev
                && Arc::ptr_eq(&e.pvs, &pvs)
            {
                return e.access.clone();
            }
        }
        let mut access = NodeAccess::default();
        for b in self.pods.objects(Some(("spec.nodeName", node))) {
            if let Ok(pod) = serde_json::from_slice::<Value>(&b) {
                add_pod(&pod, &mut access);
            }
        }
        for claim in &access.pvcs {
            for (pv, secrets) in pvs.by_claim.get(claim).into_iter().flatten() {
                access.pvs.insert(pv.clone());
                access.secrets.extend(secrets.iter().cloned());
            }
        }
        let access = Arc::new(access);
        let mut entries = self.entries.lock();
        if entries.len() >= MAX_NODES {
            entries.clear();
        }
        entries.insert(node.to_string(), Entry { pods_rev, pvs, access: access.clone() });
        access
    }

    /// Upstream's `authorize`/`hasPathFrom`: is the object reachable from the node.
    fn reachable(&self, node: &str, kind: Kind, attrs: &Attributes) -> Evaluation {
        if attrs.name.is_empty() {
            return no_opinion("No Object name found");
        }
        let a = self.access(node);
        let r = (attrs.namespace.clone(), attrs.name.clone());
        let found = match kind {
            Kind::Secret => a.secrets.contains(&r),
            Kind::ConfigMap => a.configmaps.contains(&r),
            Kind::Pvc => a.pvcs.contains(&r),
            Kind::Pv => a.pvs.contains(&attrs.name),
            Kind::ResourceClaim => a.resource_claims.contains(&r),
            Kind::ServiceAccount => a.service_accounts.contains(&r),
            Kind::VolumeAttachment => false,
        };
        if found {
            allow()
        } else {
            no_opinion(format!("no relationship found between node '{node}' and this object"))
        }
    }

    /// Upstream's `authorizeReadNamespacedObject`: get, list, watch of one named object.
    fn read_namespaced(&self, node: &str, kind: Kind, attrs: &Attributes) -> Evaluation {
        if !matches!(attrs.verb.as_str(), "get" | "list" | "watch") {
            return no_opinion("can only read resources of this type");
        }
        if !attrs.subresource.is_empty() {
            return no_opinion("cannot read subresource");
        }
        if attrs.namespace.is_empty() {
            return no_opinion("can only read namespaced object of this type");
        }
        self.reachable(node, kind, attrs)
    }

    /// Upstream's `authorizeGet`.
    fn get(&self, node: &str, kind: Kind, attrs: &Attributes) -> Evaluation {
        if attrs.verb != "get" {
            return no_opinion("can only get individual resources of this type");
        }
        if !attrs.subresource.is_empty() {
            return no_opinion("cannot get subresource");
        }
        self.reachable(node, kind, attrs)
    }

    /// Upstream's `authorizeStatusUpdate`.
    fn status_update(&self, node: &str, kind: Kind, attrs: &Attributes) -> Evaluation {
        if !matches!(attrs.verb.as_str(), "update" | "patch") {
            return no_opinion("can only get/update/patch this type");
        }
        if attrs.subresource != "status" {
            return no_opinion("can only update status subresource");
        }
        self.reachable(node, kind, attrs)
    }

    /// Upstream's `authorizeCreateToken`.
    fn create_token(&self, node: &str, attrs: &Attributes) -> Evaluation {
        if attrs.verb != "create" || attrs.name.is_empty() {
            return no_opinion("can only create tokens for individual service accounts");
        }
        if attrs.subresource != "token" {
            return no_opinion("can only create token subresource of serviceaccount");
        }
        self.reachable(node, Kind::ServiceAccount, attrs)
    }

    /// Upstream's `authorizeLease`: the node's own Lease in kube-node-lease (the name is
    /// unknown on create; NodeRestriction checks it).
    fn lease(node: &str, attrs: &Attributes) -> Evaluation {
        if !matches!(attrs.verb.as_str(), "get" | "create" | "update" | "patch" | "delete") {
            return no_opinion("can only get, create, update, patch, or delete a node lease");
        }
        if attrs.namespace != "kube-node-lease" {
            return no_opinion("can only access leases in the \"kube-node-lease\" system namespace");
        }
        if attrs.verb != "create" && attrs.name != node {
            return no_opinion("can only access node lease with the same name as the requesting node");
        }
        allow()
    }

    /// Upstream's `authorizeCSINode`.
    fn csi_node(node: &str, attrs: &Attributes) -> Evaluation {
        if !matches!(attrs.verb.as_str(), "get" | "create" | "update" | "patch" | "delete") {
            return no_opinion("can only get, create, update, patch, or delete a CSINode");
        }
        if !attrs.subresource.is_empty() {
            return no_opinion("cannot authorize CSINode subresources");
        }
        if attrs.verb != "create" && attrs.name != node {
            return no_opinion("can only access CSINode with the same name as the requesting node");
        }
        allow()
    }
}

#[async_trait::async_trait]
impl Authorizer for NodeAuthorizer {
    async fn authorize(&self, attrs: &Attributes) -> Evaluation {
        let Some(node) = node_identity(&attrs.user) else { return no_opinion("") };
        if node.is_empty() {
            return no_opinion(format!("unknown node for user {:?}", attrs.user.name));
        }
        if attrs.resource_request {
            match (attrs.api_group.as_str(), attrs.resource.as_str()) {
                ("", "secrets") => return self.read_namespaced(node, Kind::Secret, attrs),
                ("", "configmaps") => return self.read_namespaced(node, Kind::ConfigMap, attrs),
                ("", "persistentvolumeclaims") if attrs.subresource == "status" => {
                    return self.status_update(node, Kind::Pvc, attrs);
                }
                ("", "persistentvolumeclaims") => return self.get(node, Kind::Pvc, attrs),
                ("", "persistentvolumes") => return self.get(node, Kind::Pv, attrs),
                ("resource.k8s.io", "resourceclaims") => return self.get(node, Kind::ResourceClaim, attrs),
                ("storage.k8s.io", "volumeattachments") => {
                    return self.get(node, Kind::VolumeAttachment, attrs);
                }
                ("", "serviceaccounts") => return self.create_token(node, attrs),
                ("coordination.k8s.io", "leases") => return Self::lease(node, attrs),
                ("storage.k8s.io", "csinodes") => return Self::csi_node(node, attrs),
                _ => {}
            }
        }
        // Everything else is not subdivided: the static node rules decide.
        if rules_allow(attrs, &self.rules) { allow() } else { no_opinion("") }
    }

    fn rules_for(&self, user: &User, _namespace: &str) -> RuleSet {
        if node_identity(user).is_some() {
            return RuleSet {
                incomplete: true,
                errors: vec!["node authorizer does not support user rule resolution".into()],
                ..Default::default()
            };
        }
        RuleSet::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::authz::rbac::tests::{res, user};

    fn pod(ns: &str, name: &str, node: &str, spec: Value) -> Value {
        let mut s = spec;
        s["nodeName"] = json!(node);
        json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "namespace": ns, "name": name }, "spec": s })
    }

    fn setup() -> (Arc<MemSource>, Arc<MemSource>, NodeAuthorizer) {
        let pods = MemSource::new(vec![
            pod(
                "app",
                "web",
                "n1",
                json!({
                    "serviceAccountName": "web-sa",
                    "imagePullSecrets": [{ "name": "pull" }],
                    "containers": [{
                        "name": "c",
                        "env": [
                            { "name": "A", "valueFrom": { "secretKeyRef": { "name": "env-secret", "key": "k" } } },
                            { "name": "B", "valueFrom": { "configMapKeyRef": { "name": "env-cm", "key": "k" } } },
                        ],
                        "envFrom": [{ "configMapRef": { "name": "from-cm" } }],
                    }],
                    "initContainers": [{ "name": "i", "envFrom": [{ "secretRef": { "name": "init-secret" } }] }],
                    "volumes": [
                        { "name": "s", "secret": { "secretName": "vol-secret" } },
                        { "name": "p", "projected": { "sources": [{ "configMap": { "name": "proj-cm" } }, { "secret": { "name": "proj-secret" } }] } },
                        { "name": "data", "persistentVolumeClaim": { "claimName": "data" } },
                        { "name": "scratch", "ephemeral": { "volumeClaimTemplate": { "spec": {} } } },
                    ],
                }),
            ),
            pod(
                "app",
                "other",
                "n2",
                json!({ "volumes": [{ "name": "s", "secret": { "secretName": "n2-secret" } }] }),
            ),
        ]);
        let pvs = MemSource::new(vec![json!({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": { "name": "pv-data" },
            "spec": {
                "claimRef": { "namespace": "app", "name": "data" },
                "csi": { "driver": "d", "volumeHandle": "h", "nodePublishSecretRef": { "name": "csi-secret", "namespace": "storage" } },
            },
        })]);
        let a = NodeAuthorizer::new(pods.clone(), pvs.clone());
        (pods, pvs, a)
    }

    fn n1() -> User {
        user("system:node:n1", &["system:nodes", "system:authenticated"])
    }

    async fn allowed(a: &NodeAuthorizer, attrs: Attributes) -> bool {
        a.authorize(&attrs).await.decision.allowed()
    }

    #[tokio::test]
    async fn nodes_reach_what_their_pods_use() {
        let (_, _, a) = setup();
        let n = n1();
        for s in ["pull", "env-secret", "init-secret", "vol-secret", "proj-secret"] {
            assert!(allowed(&a, res(&n, "get", "", "secrets", "app", s)).await, "{s}");
        }
        assert!(allowed(&a, res(&n, "watch", "", "secrets", "app", "vol-secret")).await);
        for c in ["env-cm", "from-cm", "proj-cm"] {
            assert!(allowed(&a, res(&n, "get", "", "configmaps", "app", c)).await, "{c}");
        }
        assert!(allowed(&a, res(&n, "get", "", "persistentvolumeclaims", "app", "data")).await);
        assert!(allowed(&a, res(&n, "get", "", "persistentvolumeclaims", "app", "web-scratch")).await);
        assert!(allowed(&a, res(&n, "patch", "", "persistentvolumeclaims/status", "app", "data")).await);
        assert!(allowed(&a, res(&n, "get", "", "persistentvolumes", "", "pv-data")).await);
        assert!(allowed(&a, res(&n, "get", "", "secrets", "storage", "csi-secret")).await);
        assert!(allowed(&a, res(&n, "create", "", "serviceaccounts/token", "app", "web-sa")).await);
        // Not its pods' objects, wrong verbs, nameless requests.
        let ev = a.authorize(&res(&n, "get", "", "secrets", "app", "n2-secret")).await;
        assert_eq!(
            ev.decision,
            Decision::NoOpinion("no relationship found between node 'n1' and this object".into())
        );
        assert!(!allowed(&a, res(&n, "list", "", "secrets", "app", "")).await);
        assert!(!allowed(&a, res(&n, "update", "", "secrets", "app", "vol-secret")).await);
        assert!(!allowed(&a, res(&n, "list", "", "persistentvolumeclaims", "app", "data")).await);
        assert!(!allowed(&a, res(&n, "create", "", "serviceaccounts/token", "app", "default")).await);
        assert!(!allowed(&a, res(&n, "get", "", "serviceaccounts", "app", "web-sa")).await);
        // Leases and CSINodes of its own name.
        assert!(
            allowed(&a, res(&n, "update", "coordination.k8s.io", "leases", "kube-node-lease", "n1")).await
        );
        assert!(allowed(&a, res(&n, "create", "coordination.k8s.io", "leases", "kube-node-lease", "")).await);
        assert!(
            !allowed(&a, res(&n, "update", "coordination.k8s.io", "leases", "kube-node-lease", "n2")).await
        );
        assert!(!allowed(&a, res(&n, "get", "coordination.k8s.io", "leases", "default", "n1")).await);
        assert!(allowed(&a, res(&n, "get", "storage.k8s.io", "csinodes", "", "n1")).await);
        // The static node rules: pods, nodes, events.
        assert!(allowed(&a, res(&n, "list", "", "pods", "", "")).await);
        assert!(allowed(&a, res(&n, "patch", "", "nodes/status", "", "n1")).await);
        assert!(!allowed(&a, res(&n, "delete", "", "nodes", "", "n1")).await);
        // Non-nodes get no opinion; a node user outside system:nodes is not a node.
        assert_eq!(
            a.authorize(&res(&user("bob", &[]), "get", "", "secrets", "app", "pull")).await.decision,
            Decision::NoOpinion(String::new())
        );
        assert!(!allowed(&a, res(&user("system:node:n1", &[]), "get", "", "secrets", "app", "pull")).await);
        let ev = a.authorize(&res(&user("system:node:", &["system:nodes"]), "get", "", "pods", "", "")).await;
        assert_eq!(ev.decision, Decision::NoOpinion("unknown node for user \"system:node:\"".into()));
        assert!(a.rules_for(&n, "app").incomplete);
    }

    #[tokio::test]
    async fn access_follows_pod_changes() {
        let (pods, _, a) = setup();
        let n2 = user("system:node:n2", &["system:nodes"]);
        assert!(allowed(&a, res(&n2, "get", "", "secrets", "app", "n2-secret")).await);
        assert!(!allowed(&a, res(&n2, "get", "", "secrets", "app", "vol-secret")).await);
        // The pod moves to n2: access moves with it.
        pods.set(vec![pod(
            "app",
            "web",
            "n2",
            json!({ "volumes": [{ "name": "s", "secret": { "secretName": "vol-secret" } }] }),
        )]);
        assert!(allowed(&a, res(&n2, "get", "", "secrets", "app", "vol-secret")).await);
        assert!(!allowed(&a, res(&n2, "get", "", "secrets", "app", "n2-secret")).await);
        assert!(!allowed(&a, res(&n1(), "get", "", "secrets", "app", "vol-secret")).await);
    }
}
