//! NodeRestriction (upstream's `plugin/pkg/admission/noderestriction`): a kubelet
//! (`system:node:<name>` in `system:nodes`) may only write what concerns its own node —
//! its Node object (without relabelling or untainting itself), its Lease, the pods bound
//! to it, and mirror pods that refer to no other API object; and it may only ask for
//! service account tokens bound to pods on it.
//!
//! The Node authorizer decides which objects a kubelet may read; this plugin restricts
//! what it writes, including fields the authorizer cannot see.

use std::sync::Arc;

use serde_json::Value;

use super::Context;
use super::service_account::{is_mirror, secret_names};
use crate::admission::{Attributes, Operation, Plugin, forbidden, lookup};
use crate::authn::{User, names};
use crate::errors::{ApiError, ApiResult};
use crate::registry::store::Store;

/// Labels a kubelet may set on its Node (upstream's `kubeletapis.IsKubeletLabel`).
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];
/// Label namespaces a kubelet may set labels in (and their subdomains).
const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];
/// Labels only administrators may set, for steering workloads to nodes securely.
const NODE_RESTRICTION_NAMESPACE: &str = "node-restriction.kubernetes.io";
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

pub struct NodeRestriction {
    nodes: Arc<Store>,
    pods: Arc<Store>,
}

impl NodeRestriction {
    pub fn new(ctx: &Context<'_>) -> Result<Self, String> {
        Ok(Self {
            nodes: lookup::store(ctx.registry, "", "v1", "nodes")?,
            pods: lookup::store(ctx.registry, "", "v1", "pods")?,
        })
    }
}

/// The node a user acts for (upstream's `NodeIdentity`): Some(name) for a user named
/// `system:node:<name>` in `system:nodes` (the name may be empty), None for everyone else.
pub fn node_identity(user: &User) -> Option<&str> {
    let name = user.name.strip_prefix(names::NODE_USER_PREFIX)?;
    user.groups.iter().any(|g| g == names::NODES_GROUP).then_some(name)
}

fn label_namespace(key: &str) -> &str {
    key.split_once('/').map(|(ns, _)| ns).unwrap_or_default()
}

fn in_namespace(ns: &str, domain: &str) -> bool {
    ns == domain || ns.ends_with(&format!(".{domain}"))
}

pub fn is_kubelet_label(key: &str) -> bool {
    KUBELET_LABELS.contains(&key)
        || KUBELET_LABEL_NAMESPACES.iter().any(|d| in_namespace(label_namespace(key), d))
}

fn is_kubernetes_label(key: &str) -> bool {
    let ns = label_namespace(key);
    in_namespace(ns, "kubernetes.io") || in_namespace(ns, "k8s.io")
}

/// Label keys added, removed or changed from `old` to `new`.
fn modified_labels(new: &Value, old: &Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let (n, o) = (new.as_object().unwrap_or(&empty), old.as_object().unwrap_or(&empty));
    let mut keys: Vec<String> =
        n.keys().chain(o.keys()).filter(|k| n.get(*k) != o.get(*k)).cloned().collect();
    keys.sort();
    keys.dedup();
    keys
}

/// The modified labels a kubelet may not set (sorted).
pub fn forbidden_labels(new: &Value, old: &Value) -> Vec<String> {
    modified_labels(new, old)
        .into_iter()
        .filter(|k| {
            in_namespace(label_namespace(k), NODE_RESTRICTION_NAMESPACE)
                || (is_kubernetes_label(k) && !is_kubelet_label(k))
        })
        .collect()
}

/// Names of the config maps a pod refers to (upstream's `VisitPodConfigmapNames`).
fn refers_to_config_maps(spec: &Value) -> bool {
    let containers = ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|l| spec[*l].as_array().into_iter().flatten());
    for c in containers {
        if c["envFrom"].as_array().into_iter().flatten().any(|e| e["configMapRef"].is_object())
            || c["env"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|e| e["valueFrom"]["configMapKeyRef"].is_object())
        {
            return true;
        }
    }
    spec["volumes"].as_array().into_iter().flatten().any(|v| {
        v["configMap"].is_object()
            || v["projected"]["sources"].as_array().into_iter().flatten().any(|s| s["configMap"].is_object())
    })
}

impl NodeRestriction {
    async fn admit_pod_create(&self, node: &str, attrs: &Attributes<'_>) -> ApiResult<()> {
        let Some(pod) = &attrs.object else { return Ok(()) };
        let no = |msg: String| Err(forbidden(attrs, msg));
        if !is_mirror(pod) {
            return no(format!(
                "pod does not have \"kubernetes.io/config.mirror\" annotation, node \"{node}\" can only create mirror pods"
            ));
        }
        if pod["spec"]["nodeName"].as_str() != Some(node) {
            return no(format!("node \"{node}\" can only create pods with spec.nodeName set to itself"));
        }
        let owners = pod["metadata"]["ownerReferences"].as_array().cloned().unwrap_or_default();
        if owners.len() > 1 {
            return no(format!(
                "node \"{node}\" can only create pods with a single owner reference set to itself"
            ));
        }
        if let Some(owner) = owners.first() {
            if owner["apiVersion"] != "v1" || owner["kind"] != "Node" || owner["name"].as_str() != Some(node)
            {
                return no(format!(
                    "node \"{node}\" can only create pods with an owner reference set to itself"
                ));
            }
            if owner["controller"].as_bool() != Some(true) {
                return no(format!(
                    "node \"{node}\" can only create pods with a controller owner reference set to itself"
                ));
            }
            if owner["blockOwnerDeletion"].as_bool() == Some(true) {
                return no(format!("node \"{node}\" must not set blockOwnerDeletion on an owner reference"));
            }
            let Some(n) = lookup::get(&self.nodes, None, node).await? else {
                return Err(ApiError::not_found("nodes", "", node));
            };
            let (want, got) = (
                owner["uid"].as_str().unwrap_or_default(),
                n["metadata"]["uid"].as_str().unwrap_or_default(),
            );
            if want != got {
                return no(format!("node {node} UID mismatch: expected {want} got {got}"));
            }
        }
        let spec = &pod["spec"];
        if spec["serviceAccountName"].as_str().is_some_and(|s| !s.is_empty()) {
            return no(format!("node \"{node}\" can not create pods that reference a service account"));
        }
        if !secret_names(spec).is_empty() {
            return no(format!("node \"{node}\" can not create pods that reference secrets"));
        }
        if refers_to_config_maps(spec) {
            return no(format!("node \"{node}\" can not create pods that reference configmaps"));
        }
        let volumes = spec["volumes"].as_array().cloned().unwrap_or_default();
        if volumes.iter().any(|v| {
            v["projected"]["sources"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| s["clusterTrustBundle"].is_object())
        }) {
            return no(format!("node \"{node}\" can not create pods that reference clustertrustbundles"));
        }
        if volumes.iter().any(|v| v["persistentVolumeClaim"].is_object()) {
            return no(format!("node \"{node}\" can not create pods that reference persistentvolumeclaims"));
        }
        Ok(())
    }

    fn admit_pod(&self, node: &str, attrs: &Attributes<'_>) -> Option<ApiResult<()>> {
        match (attrs.subresource, attrs.operation) {
            (None, Operation::Create) => None,
            (None, Operation::Delete) => {
                let bound = attrs.old_object.is_some_and(|p| p["spec"]["nodeName"].as_str() == Some(node));
                Some(if bound {
                    Ok(())
                } else {
                    Err(forbidden(
                        attrs,
                        format!("node \"{node}\" can only delete pods with spec.nodeName set to itself"),
                    ))
                })
            }
            (None, op) => Some(Err(forbidden(
                attrs,
                format!(
                    "unexpected operation \"{}\", node \"{node}\" can only create and delete mirror pods",
                    op.as_str()
                ),
            ))),
            (Some("status"), Operation::Update) => {
                let Some(old) = attrs.old_object else { return Some(Ok(())) };
                if old["spec"]["nodeName"].as_str() != Some(node) {
                    return Some(Err(forbidden(
                        attrs,
                        format!(
                            "node \"{node}\" can only update pod status for pods with spec.nodeName set to itself"
                        ),
                    )));
                }
                let new = attrs.object.as_ref().map(|p| &p["metadata"]["labels"]).unwrap_or(&Value::Null);
                if !modified_labels(new, &old["metadata"]["labels"]).is_empty() {
                    return Some(Err(forbidden(
                        attrs,
                        format!("node \"{node}\" cannot update labels through pod status"),
                    )));
                }
                Some(Ok(()))
            }
            (Some("status"), op) => {
                Some(Err(forbidden(attrs, format!("unexpected operation \"{}\"", op.as_str()))))
            }
            (Some("eviction"), Operation::Create) => None,
            (Some("eviction"), op) => {
                Some(Err(forbidden(attrs, format!("unexpected operation {}", op.as_str()))))
            }
            (Some(sub), _) => Some(Err(forbidden(
                attrs,
                format!("unexpected pod subresource \"{sub}\", only 'status' and 'eviction' are allowed"),
            ))),
        }
    }

    async fn admit_eviction(&self, node: &str, attrs: &Attributes<'_>) -> ApiResult<()> {
        let name = if attrs.name.is_empty() {
            attrs.object.as_ref().and_then(|e| e["metadata"]["name"].as_str()).unwrap_or_default()
        } else {
            attrs.name
        };
        if name.is_empty() {
            return Err(forbidden(attrs, "could not determine pod from request data"));
        }
        let Some(pod) = lookup::get(&self.pods, attrs.namespace, name).await? else {
            return Err(ApiError::not_found("pods", "", name));
        };
        if pod["spec"]["nodeName"].as_str() != Some(node) {
            return Err(forbidden(
                attrs,
                format!("node {node} can only evict pods with spec.nodeName set to itself"),
            ));
        }
        Ok(())
    }

    async fn admit_token_request(&self, node: &str, attrs: &Attributes<'_>) -> ApiResult<()> {
        if attrs.operation != Operation::Create || attrs.subresource != Some("token") {
            return Ok(());
        }
        let Some(tr) = &attrs.object else { return Ok(()) };
        let r = &tr["spec"]["boundObjectRef"];
        let ref_name = r["name"].as_str().unwrap_or_default();
        if r["apiVersion"] != "v1" || r["kind"] != "Pod" || ref_name.is_empty() {
            return Err(forbidden(attrs, "node requested token not bound to a pod"));
        }
        let uid = r["uid"].as_str().unwrap_or_default();
        if uid.is_empty() {
            return Err(forbidden(attrs, "node requested token with a pod binding without a uid"));
        }
        let Some(pod) = lookup::get(&self.pods, attrs.namespace, ref_name).await? else {
            return Err(ApiError::not_found("pods", "", ref_name));
        };
        if pod["metadata"]["uid"].as_str() != Some(uid) {
            return Err(forbidden(
                attrs,
                format!(
                    "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
                ),
            ));
        }
        if pod["spec"]["nodeName"].as_str() != Some(node) {
            return Err(forbidden(
                attrs,
                "node requested token bound to a pod scheduled on a different node",
            ));
        }
        Ok(())
    }

    fn admit_lease(&self, node: &str, attrs: &Attributes<'_>) -> ApiResult<()> {
        if attrs.namespace != Some(NODE_LEASE_NAMESPACE) {
            return Err(forbidden(
                attrs,
                format!("can only access leases in the \"{NODE_LEASE_NAMESPACE}\" system namespace"),
            ));
        }
        let name = match (attrs.operation, &attrs.object) {
            (Operation::Create, Some(lease)) => lease["metadata"]["name"].as_str().unwrap_or_default(),
            _ => attrs.name,
        };
        if name != node {
            return Err(forbidden(
                attrs,
                "can only access node lease with the same name as the requesting node",
            ));
        }
        Ok(())
    }

    fn admit_pvc(&self, node: &str, attrs: &Attributes<'_>) -> ApiResult<()> {
        if attrs.subresource != Some("status") {
            return Err(forbidden(attrs, "may only update PVC status"));
        }
        if attrs.operation != Operation::Update {
            return Err(forbidden(attrs, format!("unexpected operation \"{}\"", attrs.operation.as_str())));
        }
        let (Some(new), Some(old)) = (&attrs.object, attrs.old_object) else { return Ok(()) };
        let strip = |pvc: &Value| {
            let mut p = pvc.clone();
            if let Some(m) = p["metadata"].as_object_mut() {
                m.remove("resourceVersion");
                m.remove("managedFields");
            }
            if let Some(s) = p["status"].as_object_mut() {
                for f in ["capacity", "conditions", "allocatedResources", "allocatedResourceStatuses"] {
                    s.remove(f);
                }
            }
            p
        };
        if strip(new) != strip(old) {
            return Err(forbidden(
                attrs,
                format!(
                    "node \"{node}\" is not allowed to update fields other than status.capacity and status.conditions"
                ),
            ));
        }
        Ok(())
    }
}

/// A kubelet's write to a Node: only its own, without a config source, forbidden labels
/// or changed taints.
pub fn admit_node(node: &str, attrs: &Attributes<'_>) -> ApiResult<()> {
    if attrs.name != node {
        return Err(forbidden(
            attrs,
            format!("node \"{node}\" is not allowed to modify node \"{}\"", attrs.name),
        ));
    }
    let Some(new) = &attrs.object else { return Ok(()) };
    match (attrs.operation, attrs.old_object) {
        (Operation::Create, _) => {
            if !new["spec"]["configSource"].is_null() {
                return Err(forbidden(
                    attrs,
                    format!("node \"{node}\" is not allowed to create pods with a non-nil configSource"),
                ));
            }
            let bad = forbidden_labels(&new["metadata"]["labels"], &Value::Null);
            if !bad.is_empty() {
                return Err(forbidden(
                    attrs,
                    format!("node \"{node}\" is not allowed to set the following labels: {}", bad.join(", ")),
                ));
            }
        }
        (Operation::Update, Some(old)) => {
            let source = &new["spec"]["configSource"];
            if !source.is_null() && source != &old["spec"]["configSource"] {
                return Err(forbidden(
                    attrs,
                    format!(
                        "node \"{node}\" is not allowed to update configSource to a new non-nil configSource"
                    ),
                ));
            }
            if taints(new) != taints(old) {
                return Err(forbidden(attrs, format!("node \"{node}\" is not allowed to modify taints")));
            }
            let bad = forbidden_labels(&new["metadata"]["labels"], &old["metadata"]["labels"]);
            if !bad.is_empty() {
                return Err(forbidden(attrs, format!("is not allowed to modify labels: {}", bad.join(", "))));
            }
        }
        _ => {}
    }
    Ok(())
}

fn taints(node: &Value) -> Vec<Value> {
    node["spec"]["taints"].as_array().cloned().unwrap_or_default()
}

#[async_trait::async_trait]
impl Plugin for NodeRestriction {
    fn name(&self) -> &'static str {
        "NodeRestriction"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> ApiResult<()> {
        let Some(node) = node_identity(attrs.user) else { return Ok(()) };
        if matches!(attrs.operation, Operation::Connect) {
            return Ok(());
        }
        if node.is_empty() {
            return Err(forbidden(
                attrs,
                format!("could not determine node from user \"{}\"", attrs.user.name),
            ));
        }
        let node = node.to_string();
        match (attrs.resource.group, attrs.resource.plural) {
            ("", "pods") => match self.admit_pod(&node, attrs) {
                Some(done) => done,
                None if attrs.subresource == Some("eviction") => self.admit_eviction(&node, attrs).await,
                None => self.admit_pod_create(&node, attrs).await,
            },
            ("", "nodes") => admit_node(&node, attrs),
            ("", "persistentvolumeclaims") => self.admit_pvc(&node, attrs),
            ("", "serviceaccounts") => self.admit_token_request(&node, attrs).await,
            ("coordination.k8s.io", "leases") => self.admit_lease(&node, attrs),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::plugins::tests::{attrs, nodes_info};
    use serde_json::json;

    fn kubelet(name: &str) -> User {
        User {
            name: format!("system:node:{name}"),
            groups: vec!["system:nodes".into()],
            ..Default::default()
        }
    }

    #[test]
    fn identity_needs_the_group_and_the_prefix() {
        assert_eq!(node_identity(&kubelet("n1")), Some("n1"));
        let no_group = User { name: "system:node:n1".into(), ..Default::default() };
        assert_eq!(node_identity(&no_group), None);
        let other = User { name: "alice".into(), groups: vec!["system:nodes".into()], ..Default::default() };
        assert_eq!(node_identity(&other), None);
    }

    #[test]
    fn kubelet_labels() {
        for ok in [
            "kubernetes.io/hostname",
            "beta.kubernetes.io/arch",
            "node.kubernetes.io/instance-type",
            "kubelet.kubernetes.io/anything",
            "foo.node.kubernetes.io/x",
            "topology.kubernetes.io/zone",
            "example.com/mine",
            "plain",
        ] {
            assert!(forbidden_labels(&json!({ ok: "v" }), &Value::Null).is_empty(), "{ok}");
        }
        let bad = forbidden_labels(
            &json!({ "node-restriction.kubernetes.io/x": "a", "kubernetes.io/role": "b", "x.k8s.io/y": "c" }),
            &Value::Null,
        );
        assert_eq!(bad, vec!["kubernetes.io/role", "node-restriction.kubernetes.io/x", "x.k8s.io/y"]);
        // Removing a label counts as modifying it.
        assert_eq!(
            forbidden_labels(&json!({}), &json!({ "kubernetes.io/role": "b" })),
            vec!["kubernetes.io/role"]
        );
    }

    #[tokio::test]
    async fn nodes_only_change_themselves_and_keep_taints() {
        let info = nodes_info();
        let user = kubelet("n1");
        let plugin_check = |a: &Attributes<'_>| admit_node("n1", a);
        let other = json!({ "metadata": { "name": "n2" } });
        let a = attrs(&info, Operation::Update, "n2", Some(other.clone()), Some(&other), &user);
        assert_eq!(
            plugin_check(&a).unwrap_err().message,
            "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\""
        );
        let old = json!({ "metadata": { "name": "n1" }, "spec": { "taints": [{ "key": "k", "effect": "NoSchedule" }] } });
        let mut new = old.clone();
        new["spec"]["taints"] = json!([]);
        let b = attrs(&info, Operation::Update, "n1", Some(new), Some(&old), &user);
        assert_eq!(
            plugin_check(&b).unwrap_err().message,
            "nodes \"n1\" is forbidden: node \"n1\" is not allowed to modify taints"
        );
        let mut relabel = old.clone();
        relabel["metadata"]["labels"] = json!({ "node-role.kubernetes.io/control-plane": "" });
        let c = attrs(&info, Operation::Update, "n1", Some(relabel), Some(&old), &user);
        assert_eq!(
            plugin_check(&c).unwrap_err().message,
            "nodes \"n1\" is forbidden: is not allowed to modify labels: node-role.kubernetes.io/control-plane"
        );
        let created = json!({ "metadata": { "name": "n1", "labels": { "kubernetes.io/hostname": "n1" } } });
        let d = attrs(&info, Operation::Create, "n1", Some(created), None, &user);
        assert!(plugin_check(&d).is_ok());
    }
}
