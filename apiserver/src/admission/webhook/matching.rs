//! Which webhooks a request concerns (upstream's `predicates/rules`, `predicates/namespace`
//! and `predicates/object`): a webhook is called when one of its rules matches the
//! request's operation, group, version, resource, subresource and scope, its
//! namespaceSelector matches the labels of the request's namespace, and its
//! objectSelector matches the labels of the object or of the object it replaces.
//!
//! `matchPolicy: Equivalent` would also send a webhook requests for other versions of a
//! resource it names (converted to the version it asked for). This server serves each
//! resource in exactly one version, so there is no other version to convert from, and
//! `Equivalent` and `Exact` match the same requests: only exact matching is done.

use serde_json::Value;

use super::config::{Rule, Webhook};
use crate::admission::{Attributes, Operation};
use crate::validation;

/// The facts of a request that rules look at.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub operation: Operation,
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    /// The request's namespace as upstream's attributes carry it: a Namespace object's
    /// own name for requests on namespaces, None for other cluster-scoped objects.
    pub namespace: Option<&'a str>,
}

impl<'a> Request<'a> {
    pub fn of(attrs: &'a Attributes<'_>) -> Self {
        let r = attrs.resource;
        Self {
            operation: attrs.operation,
            group: r.group,
            version: r.version,
            resource: r.plural,
            subresource: attrs.subresource.unwrap_or_default(),
            namespace: request_namespace(attrs),
        }
    }

    /// Whether the request is for core/v1 namespaces (cluster-scoped, but carrying
    /// their own name as namespace).
    fn is_namespace(&self) -> bool {
        self.group.is_empty() && self.version == "v1" && self.resource == "namespaces"
    }
}

/// The namespace upstream puts in `admission.Attributes` (and in AdmissionReview):
/// requests on a namespace carry the namespace's own name.
pub fn request_namespace<'a>(attrs: &'a Attributes<'_>) -> Option<&'a str> {
    let r = attrs.resource;
    if r.group.is_empty() && r.plural == "namespaces" {
        return Some(attrs.name).filter(|n| !n.is_empty());
    }
    attrs.namespace.filter(|n| !n.is_empty())
}

fn exact_or_wildcard(items: &[String], requested: &str) -> bool {
    items.iter().any(|i| i == "*" || i == requested)
}

/// Upstream's `rules.Matcher.Matches`.
pub fn rule_matches(rule: &Rule, req: &Request<'_>) -> bool {
    let scope = match rule.scope.as_str() {
        "" | "*" => true,
        "Namespaced" => !req.is_namespace() && req.namespace.is_some(),
        "Cluster" => req.is_namespace() || req.namespace.is_none(),
        _ => false,
    };
    let operation = rule.operations.iter().any(|op| op == "*" || op == req.operation.as_str());
    let resource = rule.resources.iter().any(|rs| {
        let (res, sub) = rs.split_once('/').unwrap_or((rs, ""));
        (res == "*" || res == req.resource) && (sub == "*" || sub == req.subresource)
    });
    scope
        && operation
        && exact_or_wildcard(&rule.api_groups, req.group)
        && exact_or_wildcard(&rule.api_versions, req.version)
        && resource
}

/// Whether any rule of the webhook matches.
pub fn rules_match(hook: &Webhook, req: &Request<'_>) -> bool {
    hook.rules.iter().any(|r| rule_matches(r, req))
}

/// A label selector against labels: an absent or empty selector selects everything.
pub fn selector_matches(selector: &Value, labels: Option<&Value>) -> bool {
    if selector.is_null() || validation::selector_is_empty(selector) {
        return true;
    }
    validation::selector_matches(selector, labels.unwrap_or(&Value::Null))
}

/// Upstream's `MatchObjectSelector`: the object's labels or, failing that, those of the
/// object it replaces (so a webhook sees deletes, and updates that remove the label).
pub fn object_selector_matches(hook: &Webhook, object: Option<&Value>, old: Option<&Value>) -> bool {
    let sel = &hook.object_selector;
    if sel.is_null() || validation::selector_is_empty(sel) {
        return true;
    }
    let matches = |o: Option<&Value>| o.is_some_and(|o| selector_matches(sel, o["metadata"].get("labels")));
    matches(object) || matches(old)
}

/// Whether the namespace selector must be consulted for this request: cluster-scoped
/// objects other than namespaces are never exempted by it (upstream's
/// `MatchNamespaceSelector`).
pub fn needs_namespace(hook: &Webhook, req: &Request<'_>) -> bool {
    let sel = &hook.namespace_selector;
    !(req.namespace.is_none() && req.resource != "namespaces")
        && !(sel.is_null() || validation::selector_is_empty(sel))
}

/// Kinds webhooks are never called for, so a broken webhook cannot lock its own
/// configuration (upstream's `IsExemptAdmissionConfigurationResource`).
pub fn is_exempt(attrs: &Attributes<'_>) -> bool {
    attrs.resource.group == "admissionregistration.k8s.io"
        && matches!(
            attrs.resource.kind,
            "ValidatingWebhookConfiguration"
                | "MutatingWebhookConfiguration"
                | "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding"
                | "MutatingAdmissionPolicy"
                | "MutatingAdmissionPolicyBinding"
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(ops: &[&str], groups: &[&str], versions: &[&str], resources: &[&str], scope: &str) -> Rule {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        Rule {
            operations: v(ops),
            api_groups: v(groups),
            api_versions: v(versions),
            resources: v(resources),
            scope: scope.to_string(),
        }
    }

    fn req<'a>(
        op: Operation,
        group: &'a str,
        resource: &'a str,
        sub: &'a str,
        ns: Option<&'a str>,
    ) -> Request<'a> {
        Request { operation: op, group, version: "v1", resource, subresource: sub, namespace: ns }
    }

    #[test]
    fn rules_table() {
        use Operation::*;
        let pod = req(Create, "", "pods", "", Some("default"));
        let pod_status = req(Update, "", "pods", "status", Some("default"));
        let deploy_scale = req(Update, "apps", "deployments", "scale", Some("default"));
        let node = req(Create, "", "nodes", "", None);
        let namespace = req(Delete, "", "namespaces", "", Some("ns1"));
        let cases: Vec<(Rule, Request, bool)> = vec![
            (rule(&["CREATE"], &[""], &["v1"], &["pods"], "*"), pod, true),
            (rule(&["UPDATE"], &[""], &["v1"], &["pods"], "*"), pod, false),
            (rule(&["*"], &["*"], &["*"], &["*"], "*"), pod, true),
            (rule(&["*"], &["apps"], &["v1"], &["pods"], "*"), pod, false),
            (rule(&["*"], &[""], &["v2"], &["pods"], "*"), pod, false),
            // A bare resource does not match its subresources; `*` neither.
            (rule(&["*"], &[""], &["v1"], &["pods"], "*"), pod_status, false),
            (rule(&["*"], &["*"], &["*"], &["*"], "*"), pod_status, false),
            (rule(&["*"], &[""], &["v1"], &["pods/status"], "*"), pod_status, true),
            (rule(&["*"], &[""], &["v1"], &["pods/*"], "*"), pod_status, true),
            (rule(&["*"], &["*"], &["*"], &["*/scale"], "*"), deploy_scale, true),
            (rule(&["*"], &["*"], &["*"], &["*/*"], "*"), deploy_scale, true),
            (rule(&["*"], &["*"], &["*"], &["*/*"], "*"), pod, true),
            (rule(&["*"], &["*"], &["*"], &["*/status"], "*"), deploy_scale, false),
            // Scopes: namespaces are cluster-scoped although they carry a namespace.
            (rule(&["*"], &["*"], &["*"], &["*"], "Namespaced"), pod, true),
            (rule(&["*"], &["*"], &["*"], &["*"], "Namespaced"), node, false),
            (rule(&["*"], &["*"], &["*"], &["*"], "Namespaced"), namespace, false),
            (rule(&["*"], &["*"], &["*"], &["*"], "Cluster"), pod, false),
            (rule(&["*"], &["*"], &["*"], &["*"], "Cluster"), node, true),
            (rule(&["*"], &["*"], &["*"], &["*"], "Cluster"), namespace, true),
            (rule(&["DELETE"], &[""], &["v1"], &["namespaces"], "*"), namespace, true),
            (rule(&["CONNECT"], &["*"], &["*"], &["*"], "*"), pod, false),
        ];
        for (i, (r, q, want)) in cases.iter().enumerate() {
            assert_eq!(rule_matches(r, q), *want, "case {i}: {r:?} vs {q:?}");
        }
    }

    #[test]
    fn selectors_table() {
        let labels = json!({ "env": "prod", "tier": "web" });
        let cases = [
            (json!(null), true),
            (json!({}), true),
            (json!({ "matchLabels": { "env": "prod" } }), true),
            (json!({ "matchLabels": { "env": "dev" } }), false),
            (
                json!({ "matchExpressions": [{ "key": "tier", "operator": "In", "values": ["web", "db"] }] }),
                true,
            ),
            (
                json!({ "matchExpressions": [{ "key": "tier", "operator": "NotIn", "values": ["web"] }] }),
                false,
            ),
            (json!({ "matchExpressions": [{ "key": "skip", "operator": "DoesNotExist" }] }), true),
            (json!({ "matchExpressions": [{ "key": "skip", "operator": "Exists" }] }), false),
        ];
        for (i, (sel, want)) in cases.iter().enumerate() {
            assert_eq!(selector_matches(sel, Some(&labels)), *want, "case {i}: {sel}");
        }
        // No labels at all: only selectors that need no label match.
        let not_in = json!({ "matchExpressions": [{ "key": "skip", "operator": "NotIn", "values": ["x"] }] });
        assert!(selector_matches(&not_in, None));
        assert!(!selector_matches(&json!({ "matchLabels": { "a": "b" } }), None));
    }
}
