//! RBAC (upstream's `plugin/pkg/auth/authorizer/rbac` and `pkg/registry/rbac/validation`):
//! policy rules and how they match a request, which bindings apply to a user, and the
//! `RBAC` authorization mode.
//!
//! The four watch caches (roles, rolebindings, clusterroles, clusterrolebindings) are read
//! through [`Derived`] indexes: bindings are indexed by subject (user name, group name;
//! a ServiceAccount subject is its user name `system:serviceaccount:<ns>:<name>`) and roles
//! by name, each rebuilt only when its cache's revision moves. A request looks up the
//! user's name and groups, not every binding.
//!
//! Example: ClusterRoleBinding `ops` binds ClusterRole `view` to Group `team`. A `get pods`
//! by a user in `team` finds `ops` under `Group team`, resolves `view`'s rules, and one of
//! them allows: `RBAC: allowed by ClusterRoleBinding "ops" of ClusterRole "view" to Group "team"`.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::source::{CacheSource, Derived, MemSource, Source};
use super::{Attributes, Authorizer, Decision, Evaluation, RuleSet};
use crate::authn::User;
use crate::registry::Registry;

pub const GROUP: &str = "rbac.authorization.k8s.io";
const SA_PREFIX: &str = "system:serviceaccount:";

/// A `PolicyRule`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Rule {
    pub verbs: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
    #[serde(rename = "nonResourceURLs", skip_serializing_if = "Vec::is_empty")]
    pub non_resource_urls: Vec<String>,
}

fn owned(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

impl Rule {
    /// A resource rule (upstream's `NewRule(verbs...).Groups(...).Resources(...)`).
    pub fn new(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Self {
        Self {
            verbs: owned(verbs),
            api_groups: owned(groups),
            resources: owned(resources),
            ..Default::default()
        }
    }

    /// A non-resource rule.
    pub fn urls(verbs: &[&str], urls: &[&str]) -> Self {
        Self { verbs: owned(verbs), non_resource_urls: owned(urls), ..Default::default() }
    }

    /// Restricts the rule to the named objects.
    pub fn names(mut self, names: &[&str]) -> Self {
        self.resource_names = owned(names);
        self
    }

    /// Upstream's `VerbMatches`.
    pub fn verb_matches(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == "*" || v == verb)
    }

    /// Upstream's `APIGroupMatches`.
    pub fn group_matches(&self, group: &str) -> bool {
        self.api_groups.iter().any(|g| g == "*" || g == group)
    }

    /// Upstream's `ResourceMatches`: `*`, the exact `resource[/subresource]`, or
    /// `*/subresource` for a request on a subresource. `pods` does not cover `pods/log`.
    pub fn resource_matches(&self, combined: &str, subresource: &str) -> bool {
        self.resources.iter().any(|r| {
            r == "*"
                || r == combined
                || (!subresource.is_empty() && r.strip_prefix("*/").is_some_and(|s| s == subresource))
        })
    }

    /// Upstream's `ResourceNameMatches`: no names listed means any object, including the
    /// nameless requests (list, create, deletecollection); listed names need that name.
    pub fn name_matches(&self, name: &str) -> bool {
        self.resource_names.is_empty() || self.resource_names.iter().any(|n| n == name)
    }

    /// Upstream's `NonResourceURLMatches`: `*`, exact, or a prefix ending in `*`.
    pub fn url_matches(&self, path: &str) -> bool {
        self.non_resource_urls.iter().any(|u| {
            u == "*" || u == path || u.strip_suffix('*').is_some_and(|prefix| path.starts_with(prefix))
        })
    }

    /// Upstream's `RuleAllows`.
    pub fn allows(&self, attrs: &Attributes) -> bool {
        if !self.verb_matches(&attrs.verb) {
            return false;
        }
        if !attrs.resource_request {
            return self.url_matches(&attrs.path);
        }
        let combined = if attrs.subresource.is_empty() {
            attrs.resource.clone()
        } else {
            format!("{}/{}", attrs.resource, attrs.subresource)
        };
        self.group_matches(&attrs.api_group)
            && self.resource_matches(&combined, &attrs.subresource)
            && self.name_matches(&attrs.name)
    }
}

/// Upstream's `RulesAllow`.
pub fn rules_allow(attrs: &Attributes, rules: &[Rule]) -> bool {
    rules.iter().any(|r| r.allows(attrs))
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Subject {
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

impl Subject {
    pub fn user(name: &str) -> Self {
        Self { kind: "User".into(), api_group: GROUP.into(), name: name.into(), ..Default::default() }
    }

    pub fn group(name: &str) -> Self {
        Self { kind: "Group".into(), api_group: GROUP.into(), name: name.into(), ..Default::default() }
    }

    pub fn service_account(namespace: &str, name: &str) -> Self {
        Self {
            kind: "ServiceAccount".into(),
            name: name.into(),
            namespace: namespace.into(),
            ..Default::default()
        }
    }

    /// The index key this subject matches users by; None if it can match no one
    /// (upstream's `appliesToUser`: a ServiceAccount needs a namespace, the binding's one
    /// when the subject names none).
    fn key(&self, binding_namespace: &str) -> Option<Key> {
        match self.kind.as_str() {
            "User" => Some(Key::User(self.name.clone())),
            "Group" => Some(Key::Group(self.name.clone())),
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() { binding_namespace } else { &self.namespace };
                (!ns.is_empty()).then(|| Key::User(format!("{SA_PREFIX}{ns}:{}", self.name)))
            }
            _ => None,
        }
    }

    /// Upstream's `describeSubject`.
    fn describe(&self, binding_namespace: &str) -> String {
        if self.kind == "ServiceAccount" {
            let ns = if self.namespace.is_empty() { binding_namespace } else { &self.namespace };
            return format!("{} \"{}/{ns}\"", self.kind, self.name);
        }
        format!("{} \"{}\"", self.kind, self.name)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RoleRef {
    pub api_group: String,
    pub kind: String,
    pub name: String,
}

impl RoleRef {
    pub fn cluster_role(name: &str) -> Self {
        Self { api_group: GROUP.into(), kind: "ClusterRole".into(), name: name.into() }
    }

    pub fn role(name: &str) -> Self {
        Self { api_group: GROUP.into(), kind: "Role".into(), name: name.into() }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    User(String),
    Group(String),
}

/// The parts of an object the indexes keep.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Meta {
    name: String,
    namespace: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct BindingObject {
    metadata: Meta,
    role_ref: RoleRef,
    subjects: Vec<Subject>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RoleObject {
    metadata: Meta,
    rules: Vec<Rule>,
}

/// Bindings of one kind, by (namespace, subject key); cluster bindings use namespace "".
#[derive(Default)]
pub struct Bindings {
    items: Vec<BindingObject>,
    by_subject: HashMap<(String, Key), Vec<usize>>,
}

impl Bindings {
    fn build(objects: &[Bytes]) -> Self {
        let mut items: Vec<BindingObject> =
            objects.iter().filter_map(|b| serde_json::from_slice(b).ok()).collect();
        items.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        let mut by_subject: HashMap<(String, Key), Vec<usize>> = HashMap::new();
        for (i, b) in items.iter().enumerate() {
            for s in &b.subjects {
                if let Some(k) = s.key(&b.metadata.namespace) {
                    let list = by_subject.entry((b.metadata.namespace.clone(), k)).or_default();
                    if list.last() != Some(&i) {
                        list.push(i);
                    }
                }
            }
        }
        Self { items, by_subject }
    }

    /// The bindings in `namespace` that apply to `user`, in name order, each with the
    /// first of its subjects that matches.
    fn applying<'a>(&'a self, user: &User, namespace: &str) -> Vec<(&'a BindingObject, &'a Subject)> {
        let mut idx: BTreeSet<usize> = BTreeSet::new();
        let mut look = |k: Key| {
            if let Some(list) = self.by_subject.get(&(namespace.to_string(), k)) {
                idx.extend(list.iter().copied());
            }
        };
        look(Key::User(user.name.clone()));
        for g in &user.groups {
            look(Key::Group(g.clone()));
        }
        idx.into_iter()
            .filter_map(|i| {
                let b = &self.items[i];
                let s = b.subjects.iter().find(|s| applies_to(s, user, &b.metadata.namespace))?;
                Some((b, s))
            })
            .collect()
    }
}

/// Upstream's `appliesToUser`.
fn applies_to(s: &Subject, user: &User, binding_namespace: &str) -> bool {
    match s.key(binding_namespace) {
        Some(Key::User(n)) => n == user.name,
        Some(Key::Group(g)) => user.groups.contains(&g),
        None => false,
    }
}

/// Roles of one kind by `namespace/name` (cluster roles: by name).
#[derive(Default)]
pub struct Roles(HashMap<String, Arc<[Rule]>>);

impl Roles {
    fn build(objects: &[Bytes]) -> Self {
        let mut map = HashMap::new();
        for b in objects {
            if let Ok(r) = serde_json::from_slice::<RoleObject>(b) {
                let key = role_key(&r.metadata.namespace, &r.metadata.name);
                map.insert(key, Arc::from(r.rules));
            }
        }
        Self(map)
    }
}

fn role_key(namespace: &str, name: &str) -> String {
    if namespace.is_empty() { name.to_string() } else { format!("{namespace}/{name}") }
}

/// One binding that applies, resolved: where the rules come from and the rules.
struct Applied<'a> {
    binding: &'a BindingObject,
    subject: &'a Subject,
    cluster: bool,
    rules: Result<Arc<[Rule]>, String>,
}

impl Applied<'_> {
    /// Upstream's `clusterRoleBindingDescriber` / `roleBindingDescriber`.
    fn describe(&self) -> String {
        let b = self.binding;
        if self.cluster {
            format!(
                "ClusterRoleBinding \"{}\" of {} \"{}\" to {}",
                b.metadata.name,
                b.role_ref.kind,
                b.role_ref.name,
                self.subject.describe("")
            )
        } else {
            format!(
                "RoleBinding \"{}/{}\" of {} \"{}\" to {}",
                b.metadata.name,
                b.metadata.namespace,
                b.role_ref.kind,
                b.role_ref.name,
                self.subject.describe(&b.metadata.namespace)
            )
        }
    }
}

/// The RBAC rule resolver (upstream's `DefaultRuleResolver`) over the four watch caches.
pub struct Resolver {
    roles: Derived<Roles>,
    role_bindings: Derived<Bindings>,
    cluster_roles: Derived<Roles>,
    cluster_role_bindings: Derived<Bindings>,
}

/// The state of the four indexes at one moment.
struct Snapshot {
    roles: Arc<Roles>,
    role_bindings: Arc<Bindings>,
    cluster_roles: Arc<Roles>,
    cluster_role_bindings: Arc<Bindings>,
}

impl Resolver {
    pub fn new(
        roles: Arc<dyn Source>,
        role_bindings: Arc<dyn Source>,
        cluster_roles: Arc<dyn Source>,
        cluster_role_bindings: Arc<dyn Source>,
    ) -> Self {
        Self {
            roles: Derived::new(roles, Roles::build),
            role_bindings: Derived::new(role_bindings, Bindings::build),
            cluster_roles: Derived::new(cluster_roles, Roles::build),
            cluster_role_bindings: Derived::new(cluster_role_bindings, Bindings::build),
        }
    }

    /// Over the server's watch caches (empty sources for a registry without RBAC).
    pub fn from_registry(registry: &Registry) -> Self {
        let src = |plural: &str| -> Arc<dyn Source> {
            match registry.find(GROUP, "v1", plural) {
                Some(store) => Arc::new(CacheSource(store)),
                None => MemSource::new(Vec::new()),
            }
        };
        Self::new(src("roles"), src("rolebindings"), src("clusterroles"), src("clusterrolebindings"))
    }

    /// No policy at all.
    pub fn empty() -> Self {
        Self::new(
            MemSource::new(Vec::new()),
            MemSource::new(Vec::new()),
            MemSource::new(Vec::new()),
            MemSource::new(Vec::new()),
        )
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            roles: self.roles.get(),
            role_bindings: self.role_bindings.get(),
            cluster_roles: self.cluster_roles.get(),
            cluster_role_bindings: self.cluster_role_bindings.get(),
        }
    }

    /// Upstream's `GetRoleReferenceRules`; errors worded as its listers'.
    pub fn role_ref_rules(&self, role_ref: &RoleRef, namespace: &str) -> Result<Arc<[Rule]>, String> {
        self.snapshot().role_ref_rules(role_ref, namespace)
    }

    /// Every rule that applies to `user` in `namespace` ("" = cluster bindings only), and
    /// the errors met resolving them (a binding to a missing role). Upstream's `RulesFor`.
    pub fn rules_for(&self, user: &User, namespace: &str) -> (Vec<Rule>, Vec<String>) {
        let snap = self.snapshot();
        let mut rules = Vec::new();
        let mut errors = Vec::new();
        for a in snap.applied(user, namespace) {
            match a.rules {
                Ok(r) => rules.extend(r.iter().cloned()),
                Err(e) => errors.push(e),
            }
        }
        (rules, errors)
    }

    /// Upstream's RBAC `Authorize`: allowed by the first binding with a matching rule;
    /// otherwise no opinion, with the resolution errors as the reason.
    pub fn authorize(&self, attrs: &Attributes) -> Decision {
        let snap = self.snapshot();
        let mut errors = Vec::new();
        for a in snap.applied(&attrs.user, &attrs.namespace) {
            match &a.rules {
                Ok(rules) => {
                    if rules_allow(attrs, rules) {
                        return Decision::Allow(format!("RBAC: allowed by {}", a.describe()));
                    }
                }
                Err(e) => errors.push(e.clone()),
            }
        }
        match super::aggregate(&errors) {
            Some(e) => Decision::NoOpinion(format!("RBAC: {e}")),
            None => Decision::NoOpinion(String::new()),
        }
    }
}

impl Snapshot {
    fn role_ref_rules(&self, role_ref: &RoleRef, namespace: &str) -> Result<Arc<[Rule]>, String> {
        match role_ref.kind.as_str() {
            "Role" => self
                .roles
                .0
                .get(&role_key(namespace, &role_ref.name))
                .cloned()
                .ok_or_else(|| format!("role.{GROUP} \"{}\" not found", role_ref.name)),
            "ClusterRole" => self
                .cluster_roles
                .0
                .get(&role_ref.name)
                .cloned()
                .ok_or_else(|| format!("clusterrole.{GROUP} \"{}\" not found", role_ref.name)),
            other => Err(format!("unsupported role reference kind: \"{other}\"")),
        }
    }

    /// Cluster bindings first, then the namespace's bindings (upstream's `VisitRulesFor`).
    fn applied<'a>(&'a self, user: &User, namespace: &str) -> Vec<Applied<'a>> {
        let mut out = Vec::new();
        for (binding, subject) in self.cluster_role_bindings.applying(user, "") {
            let rules = self.role_ref_rules(&binding.role_ref, "");
            out.push(Applied { binding, subject, cluster: true, rules });
        }
        if !namespace.is_empty() {
            for (binding, subject) in self.role_bindings.applying(user, namespace) {
                let rules = self.role_ref_rules(&binding.role_ref, namespace);
                out.push(Applied { binding, subject, cluster: false, rules });
            }
        }
        out
    }
}

/// The `RBAC` authorization mode.
pub struct RbacAuthorizer(pub Arc<Resolver>);

#[async_trait::async_trait]
impl Authorizer for RbacAuthorizer {
    async fn authorize(&self, attrs: &Attributes) -> Evaluation {
        self.0.authorize(attrs).into()
    }

    fn rules_for(&self, user: &User, namespace: &str) -> RuleSet {
        let (rules, errors) = self.0.rules_for(user, namespace);
        RuleSet { errors, ..RuleSet::from_rules(&rules) }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::{Value, json};

    pub fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        }
    }

    pub fn res(user: &User, verb: &str, group: &str, resource: &str, ns: &str, name: &str) -> Attributes {
        let (resource, sub) = resource.split_once('/').unwrap_or((resource, ""));
        Attributes {
            user: user.clone(),
            verb: verb.into(),
            resource_request: true,
            namespace: ns.into(),
            api_group: group.into(),
            api_version: "v1".into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            path: String::new(),
        }
    }

    fn url(user: &User, verb: &str, path: &str) -> Attributes {
        Attributes { user: user.clone(), verb: verb.into(), path: path.into(), ..Default::default() }
    }

    #[test]
    fn rule_matching_table() {
        let u = user("u", &[]);
        let cases: Vec<(Rule, Attributes, bool)> = vec![
            (Rule::new(&["get"], &[""], &["pods"]), res(&u, "get", "", "pods", "ns", "p"), true),
            (Rule::new(&["get"], &[""], &["pods"]), res(&u, "list", "", "pods", "ns", ""), false),
            (Rule::new(&["*"], &[""], &["pods"]), res(&u, "deletecollection", "", "pods", "ns", ""), true),
            (Rule::new(&["get"], &["apps"], &["pods"]), res(&u, "get", "", "pods", "ns", "p"), false),
            (Rule::new(&["get"], &["*"], &["pods"]), res(&u, "get", "x.io", "pods", "", "p"), true),
            // A resource does not cover its subresources.
            (Rule::new(&["get"], &[""], &["pods"]), res(&u, "get", "", "pods/log", "ns", "p"), false),
            (Rule::new(&["get"], &[""], &["pods/log"]), res(&u, "get", "", "pods/log", "ns", "p"), true),
            (Rule::new(&["get"], &[""], &["*/log"]), res(&u, "get", "", "pods/log", "ns", "p"), true),
            (Rule::new(&["get"], &[""], &["*/log"]), res(&u, "get", "", "pods", "ns", "p"), false),
            (Rule::new(&["get"], &[""], &["*/status"]), res(&u, "get", "", "pods/log", "ns", "p"), false),
            (Rule::new(&["get"], &[""], &["*"]), res(&u, "get", "", "pods/exec", "ns", "p"), true),
            // Resource names: listed names need the name, nameless requests do not match.
            (
                Rule::new(&["get"], &[""], &["secrets"]).names(&["a"]),
                res(&u, "get", "", "secrets", "ns", "a"),
                true,
            ),
            (
                Rule::new(&["get"], &[""], &["secrets"]).names(&["a"]),
                res(&u, "get", "", "secrets", "ns", "b"),
                false,
            ),
            (
                Rule::new(&["list"], &[""], &["secrets"]).names(&["a"]),
                res(&u, "list", "", "secrets", "ns", ""),
                false,
            ),
            (Rule::new(&["create"], &[""], &["secrets"]), res(&u, "create", "", "secrets", "ns", ""), true),
            // Non-resource URLs.
            (Rule::urls(&["get"], &["/healthz"]), url(&u, "get", "/healthz"), true),
            (Rule::urls(&["get"], &["/healthz"]), url(&u, "get", "/healthz/etcd"), false),
            (Rule::urls(&["get"], &["/healthz/*"]), url(&u, "get", "/healthz/etcd"), true),
            (Rule::urls(&["get"], &["/apis*"]), url(&u, "get", "/apis/apps"), true),
            (Rule::urls(&["*"], &["*"]), url(&u, "post", "/anything"), true),
            (Rule::urls(&["get"], &["/metrics"]), url(&u, "post", "/metrics"), false),
            // A resource rule never matches a URL and the other way round.
            (Rule::new(&["*"], &["*"], &["*"]), url(&u, "get", "/healthz"), false),
            (Rule::urls(&["*"], &["*"]), res(&u, "get", "", "pods", "ns", "p"), false),
        ];
        for (i, (rule, attrs, want)) in cases.iter().enumerate() {
            assert_eq!(rule.allows(attrs), *want, "case {i}: {rule:?} vs {attrs:?}");
        }
    }

    pub fn obj(kind: &str, ns: &str, name: &str, body: Value) -> Value {
        let mut o = json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": { "name": name } });
        if !ns.is_empty() {
            o["metadata"]["namespace"] = json!(ns);
        }
        if let (Some(m), Some(b)) = (o.as_object_mut(), body.as_object()) {
            m.extend(b.clone());
        }
        o
    }

    pub struct Policy {
        pub roles: Arc<MemSource>,
        pub role_bindings: Arc<MemSource>,
        pub cluster_roles: Arc<MemSource>,
        pub cluster_role_bindings: Arc<MemSource>,
    }

    impl Policy {
        pub fn new(roles: Vec<Value>, rbs: Vec<Value>, croles: Vec<Value>, crbs: Vec<Value>) -> Self {
            Self {
                roles: MemSource::new(roles),
                role_bindings: MemSource::new(rbs),
                cluster_roles: MemSource::new(croles),
                cluster_role_bindings: MemSource::new(crbs),
            }
        }

        pub fn resolver(&self) -> Resolver {
            Resolver::new(
                self.roles.clone(),
                self.role_bindings.clone(),
                self.cluster_roles.clone(),
                self.cluster_role_bindings.clone(),
            )
        }
    }

    fn sample() -> Policy {
        Policy::new(
            vec![obj(
                "Role",
                "dev",
                "pod-reader",
                json!({ "rules": [{ "verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"] }] }),
            )],
            vec![
                obj(
                    "RoleBinding",
                    "dev",
                    "read-pods",
                    json!({
                        "roleRef": { "apiGroup": GROUP, "kind": "Role", "name": "pod-reader" },
                        "subjects": [{ "kind": "User", "name": "jane", "apiGroup": GROUP }, { "kind": "ServiceAccount", "name": "bot" }],
                    }),
                ),
                obj(
                    "RoleBinding",
                    "dev",
                    "dangling",
                    json!({
                        "roleRef": { "apiGroup": GROUP, "kind": "Role", "name": "gone" },
                        "subjects": [{ "kind": "Group", "name": "devs", "apiGroup": GROUP }],
                    }),
                ),
                obj(
                    "RoleBinding",
                    "dev",
                    "cluster-view",
                    json!({
                        "roleRef": { "apiGroup": GROUP, "kind": "ClusterRole", "name": "secret-reader" },
                        "subjects": [{ "kind": "Group", "name": "devs", "apiGroup": GROUP }],
                    }),
                ),
            ],
            vec![obj(
                "ClusterRole",
                "",
                "secret-reader",
                json!({ "rules": [{ "verbs": ["get"], "apiGroups": [""], "resources": ["secrets"] }] }),
            )],
            vec![obj(
                "ClusterRoleBinding",
                "",
                "readers",
                json!({
                    "roleRef": { "apiGroup": GROUP, "kind": "ClusterRole", "name": "secret-reader" },
                    "subjects": [{ "kind": "Group", "name": "auditors", "apiGroup": GROUP }, { "kind": "ServiceAccount", "name": "nons" }],
                }),
            )],
        )
    }

    #[test]
    fn bindings_apply_by_subject_and_scope() {
        let p = sample();
        let r = p.resolver();
        let jane = user("jane", &["system:authenticated"]);
        assert_eq!(
            r.authorize(&res(&jane, "get", "", "pods", "dev", "p")),
            Decision::Allow(
                "RBAC: allowed by RoleBinding \"read-pods/dev\" of Role \"pod-reader\" to User \"jane\""
                    .into()
            )
        );
        // A RoleBinding grants only in its namespace.
        assert_eq!(
            r.authorize(&res(&jane, "get", "", "pods", "prod", "p")),
            Decision::NoOpinion(String::new())
        );
        // A service account subject without namespace means the binding's namespace.
        let bot = user("system:serviceaccount:dev:bot", &[]);
        assert_eq!(
            r.authorize(&res(&bot, "list", "", "pods", "dev", "")),
            Decision::Allow(
                "RBAC: allowed by RoleBinding \"read-pods/dev\" of Role \"pod-reader\" to ServiceAccount \"bot/dev\"".into()
            )
        );
        let auditor = user("a", &["auditors"]);
        assert_eq!(
            r.authorize(&res(&auditor, "get", "", "secrets", "any", "s")),
            Decision::Allow(
                "RBAC: allowed by ClusterRoleBinding \"readers\" of ClusterRole \"secret-reader\" to Group \"auditors\"".into()
            )
        );
        // A cluster binding's service account needs a namespace: it matches no one.
        assert!(
            !r.authorize(&res(&user("system:serviceaccount::nons", &[]), "get", "", "secrets", "", "s"))
                .allowed()
        );
        // Missing roles are reported, and do not stop other bindings.
        let dev = user("d", &["devs"]);
        assert!(r.authorize(&res(&dev, "get", "", "secrets", "dev", "s")).allowed());
        assert_eq!(
            r.authorize(&res(&dev, "delete", "", "secrets", "dev", "s")),
            Decision::NoOpinion("RBAC: role.rbac.authorization.k8s.io \"gone\" not found".into())
        );
        let (rules, errors) = r.rules_for(&dev, "dev");
        assert_eq!(rules, vec![Rule::new(&["get"], &[""], &["secrets"])]);
        assert_eq!(errors.len(), 1);
        // Cluster-wide rules only without a namespace.
        assert!(r.rules_for(&jane, "").0.is_empty());
    }

    #[test]
    fn indexes_follow_the_caches() {
        let p = sample();
        let r = p.resolver();
        let carl = user("carl", &[]);
        assert!(!r.authorize(&res(&carl, "get", "", "secrets", "", "s")).allowed());
        p.cluster_role_bindings.set(vec![obj(
            "ClusterRoleBinding",
            "",
            "carl",
            json!({
                "roleRef": { "apiGroup": GROUP, "kind": "ClusterRole", "name": "secret-reader" },
                "subjects": [{ "kind": "User", "name": "carl", "apiGroup": GROUP }],
            }),
        )]);
        assert!(r.authorize(&res(&carl, "get", "", "secrets", "", "s")).allowed());
        p.cluster_roles.set(Vec::new());
        assert_eq!(
            r.authorize(&res(&carl, "get", "", "secrets", "", "s")),
            Decision::NoOpinion(
                "RBAC: clusterrole.rbac.authorization.k8s.io \"secret-reader\" not found".into()
            )
        );
    }

    #[test]
    fn rules_serialize_as_upstream() {
        let r = Rule::urls(&["get"], &["/healthz"]);
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({ "verbs": ["get"], "nonResourceURLs": ["/healthz"] })
        );
        let back: Rule =
            serde_json::from_value(json!({ "verbs": ["get"], "nonResourceURLs": ["/x"] })).unwrap();
        assert_eq!(back.non_resource_urls, vec!["/x"]);
    }
}
