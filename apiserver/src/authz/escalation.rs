//! Escalation prevention (upstream's `pkg/registry/rbac/*/policybased` storages and
//! `pkg/registry/rbac/validation`): a user may only create or update a Role or ClusterRole
//! whose rules they already hold, and only bind a role whose rules they hold, unless they
//! may `escalate` roles or `bind` that role. Members of `system:masters` hold everything.
//!
//! Example: a user with `edit` in namespace `dev` who creates a Role there granting
//! `create rolebindings` is refused:
//! `roles.rbac.authorization.k8s.io "r" is forbidden: user "u" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:
//! {APIGroups:["rbac.authorization.k8s.io"], Resources:["rolebindings"], Verbs:["create"]}`.

use std::collections::{BTreeSet, HashMap};

use serde::Deserialize;
use serde_json::Value;

use super::rbac::{GROUP, RoleRef, Rule};
use super::{Attributes, Chain};
use crate::admission::Operation;
use crate::authn::{User, names};
use crate::errors::{ApiError, ApiResult};
use crate::registry::resource::ResourceInfo;

/// Whether the owner's rules cover every rule given; the uncovered pieces otherwise
/// (upstream's `Covers`, which compares rules broken down to one verb, group, resource and
/// name each).
pub fn covers(owner: &[Rule], servant: &[Rule]) -> (bool, Vec<Rule>) {
    let mut missing = Vec::new();
    for rule in servant {
        for sub in breakdown(rule) {
            if !owner.iter().any(|o| rule_covers(o, &sub)) {
                missing.push(sub);
            }
        }
    }
    (missing.is_empty(), missing)
}

/// Upstream's `BreakdownRule`.
pub fn breakdown(rule: &Rule) -> Vec<Rule> {
    let mut out = Vec::new();
    for g in &rule.api_groups {
        for r in &rule.resources {
            for v in &rule.verbs {
                if rule.resource_names.is_empty() {
                    out.push(Rule::new(&[v], &[g], &[r]));
                } else {
                    for n in &rule.resource_names {
                        out.push(Rule::new(&[v], &[g], &[r]).names(&[n]));
                    }
                }
            }
        }
    }
    for u in &rule.non_resource_urls {
        for v in &rule.verbs {
            out.push(Rule::urls(&[v], &[u]));
        }
    }
    out
}

fn has(set: &[String], v: &str) -> bool {
    set.iter().any(|s| s == v)
}

fn has_all(set: &[String], want: &[String]) -> bool {
    want.iter().all(|w| has(set, w))
}

/// Upstream's `ruleCovers` for a broken-down `sub`.
fn rule_covers(owner: &Rule, sub: &Rule) -> bool {
    let verbs = has(&owner.verbs, "*") || has_all(&owner.verbs, &sub.verbs);
    let groups = has(&owner.api_groups, "*") || has_all(&owner.api_groups, &sub.api_groups);
    let resources = resource_covers_all(&owner.resources, &sub.resources);
    let urls = sub.non_resource_urls.iter().all(|p| owner.non_resource_urls.iter().any(|o| url_covers(o, p)));
    let names = if sub.resource_names.is_empty() {
        owner.resource_names.is_empty()
    } else {
        owner.resource_names.is_empty() || has_all(&owner.resource_names, &sub.resource_names)
    };
    verbs && groups && resources && names && urls
}

fn resource_covers_all(set: &[String], covers: &[String]) -> bool {
    if has(set, "*") || has_all(set, covers) {
        return true;
    }
    covers.iter().all(|path| {
        has(set, path) || path.split_once('/').is_some_and(|(_, sub)| has(set, &format!("*/{sub}")))
    })
}

fn url_covers(owner: &str, sub: &str) -> bool {
    owner == sub || owner.strip_suffix('*').is_some_and(|p| sub.starts_with(p.trim_end_matches('*')))
}

/// Upstream's `CompactRules`: broken-down rules on one group and resource (and at most one
/// name) merged back, their verbs appended.
pub fn compact(rules: Vec<Rule>) -> Vec<Rule> {
    let mut out = Vec::new();
    let mut simple: HashMap<(String, String, Option<String>), Rule> = HashMap::new();
    let mut order = Vec::new();
    for r in rules {
        let is_simple = r.resource_names.len() <= 1
            && r.non_resource_urls.is_empty()
            && r.api_groups.len() == 1
            && r.resources.len() == 1;
        if !is_simple {
            out.push(r);
            continue;
        }
        let key = (r.api_groups[0].clone(), r.resources[0].clone(), r.resource_names.first().cloned());
        match simple.get_mut(&key) {
            Some(existing) => existing.verbs.extend(r.verbs),
            None => {
                order.push(key.clone());
                simple.insert(key, r);
            }
        }
    }
    out.extend(order.into_iter().filter_map(|k| simple.remove(&k)));
    out
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
fn quoted_list(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", items.join(" "))
}

/// Upstream's `CompactString`.
pub fn compact_string(r: &Rule) -> String {
    let mut parts = Vec::new();
    for (label, v) in [
        ("APIGroups", &r.api_groups),
        ("Resources", &r.resources),
        ("NonResourceURLs", &r.non_resource_urls),
        ("ResourceNames", &r.resource_names),
        ("Verbs", &r.verbs),
    ] {
        if !v.is_empty() {
            parts.push(format!("{label}:{}", quoted_list(v)));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

/// Upstream's `ConfirmNoEscalation`: the error text when `user`, holding `owned` (with
/// `resolution_errors` met resolving them), may not grant `rules`.
pub fn confirm_no_escalation(
    user: &User,
    owned: &[Rule],
    resolution_errors: &[String],
    rules: &[Rule],
) -> Result<(), String> {
    let (ok, missing) = covers(owned, rules);
    if ok {
        return Ok(());
    }
    let described: BTreeSet<String> = compact(missing).iter().map(compact_string).collect();
    let mut msg = format!(
        "user {:?} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        quoted_list(&user.groups),
        described.into_iter().collect::<Vec<_>>().join("\n")
    );
    if !resolution_errors.is_empty() {
        // Upstream prints a one-element slice holding the aggregated error.
        let all = super::aggregate(resolution_errors).unwrap_or_default();
        msg.push_str(&format!("; resolution errors: [{all}]"));
    }
    Err(msg)
}

/// `* on *` and `* on every URL`: what an aggregationRule could gather.
fn full_authority() -> Vec<Rule> {
    vec![Rule::new(&["*"], &["*"], &["*"]), Rule::urls(&["*"], &["*"])]
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RbacObject {
    rules: Vec<Rule>,
    role_ref: Option<RoleRef>,
    aggregation_rule: Option<Value>,
}

fn decode(obj: &Value) -> RbacObject {
    serde_json::from_value(obj.clone()).unwrap_or_default()
}

/// upstream's `IsOnlyMutatingGCFields`: only ownerReferences and finalizers changed.
fn only_gc_fields(new: &Value, old: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for f in ["ownerReferences", "finalizers", "resourceVersion", "managedFields", "generation"] {
                m.remove(f);
            }
        }
        v
    };
    strip(new) == strip(old)
}

fn forbidden(info: &ResourceInfo, name: &str, why: &str) -> ApiError {
    let mut e = ApiError::forbidden(format!(
        "{} \"{name}\" is forbidden: {why}",
        crate::errors::qualified(info.plural, info.group)
    ));
    e.details = Some(serde_json::json!({ "name": name, "group": info.group, "kind": info.plural }));
    e
}

/// The check the store makes before writing an RBAC object on a user's behalf. Objects
/// of other resources, deletes, and the server's own writes (no request scope) pass.
pub async fn check(info: &ResourceInfo, op: Operation, obj: &Value, old: Option<&Value>) -> ApiResult<()> {
    if info.group != GROUP || !matches!(op, Operation::Create | Operation::Update) {
        return Ok(());
    }
    let Some(scope) = crate::context::current() else { return Ok(()) };
    let Some(chain) = scope.authorizer.clone() else { return Ok(()) };
    let user = &scope.user;
    // system:masters is how the server's own loopback clients act: it holds everything.
    if user.groups.iter().any(|g| g == names::SYSTEM_PRIVILEGED_GROUP) {
        return Ok(());
    }
    if let Some(old) = old
        && only_gc_fields(obj, old)
    {
        return Ok(());
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = obj["metadata"]["namespace"].as_str().unwrap_or_default();
    let new = decode(obj);
    match info.kind {
        "Role" | "ClusterRole" => {
            let escalate = Attributes {
                user: user.clone(),
                verb: "escalate".into(),
                resource_request: true,
                namespace: namespace.into(),
                api_group: GROUP.into(),
                api_version: "*".into(),
                resource: info.plural.into(),
                name: name.into(),
                ..Default::default()
            };
            if chain.authorize(&escalate).await.allowed() {
                return Ok(());
            }
            let (owned, errors) = chain.rbac.rules_for(user, namespace);
            confirm_no_escalation(user, &owned, &errors, &new.rules)
                .map_err(|e| forbidden(info, name, &e))?;
            let had_aggregation =
                old.is_some_and(|o| decode(o).aggregation_rule.is_some_and(|a| !a.is_null()));
            if info.kind == "ClusterRole"
                && (new.aggregation_rule.is_some_and(|a| !a.is_null()) || had_aggregation)
                && confirm_no_escalation(user, &owned, &errors, &full_authority()).is_err()
            {
                return Err(forbidden(
                    info,
                    name,
                    "must have cluster-admin privileges to use the aggregationRule",
                ));
            }
            Ok(())
        }
        "RoleBinding" | "ClusterRoleBinding" => {
            let Some(role_ref) = new.role_ref else { return Ok(()) };
            if binding_authorized(&chain, user, &role_ref, namespace).await {
                return Ok(());
            }
            let rules =
                chain.rbac.role_ref_rules(&role_ref, namespace).map_err(|e| forbidden(info, name, &e))?;
            let (owned, errors) = chain.rbac.rules_for(user, namespace);
            confirm_no_escalation(user, &owned, &errors, &rules).map_err(|e| forbidden(info, name, &e))
        }
        _ => Ok(()),
    }
}

/// Upstream's `BindingAuthorized`: may the user `bind` the referenced role here.
async fn binding_authorized(chain: &Chain, user: &User, role_ref: &RoleRef, namespace: &str) -> bool {
    let resource = match role_ref.kind.as_str() {
        "ClusterRole" => "clusterroles",
        "Role" => "roles",
        _ => return false,
    };
    let attrs = Attributes {
        user: user.clone(),
        verb: "bind".into(),
        resource_request: true,
        namespace: namespace.into(),
        api_group: role_ref.api_group.clone(),
        resource: resource.into(),
        name: role_ref.name.clone(),
        ..Default::default()
    };
    chain.authorize(&attrs).await.allowed()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::authz::rbac::RbacAuthorizer;
    use crate::authz::rbac::tests::{Policy, obj, user};
    use crate::context::{RequestScope, scope};

    #[test]
    fn covering_rules() {
        let owner = vec![
            Rule::new(&["get", "list"], &[""], &["pods", "pods/log"]),
            Rule::new(&["*"], &["apps"], &["*"]),
            Rule::new(&["get"], &[""], &["*/status"]),
            Rule::new(&["get"], &[""], &["secrets"]).names(&["a", "b"]),
            Rule::urls(&["get"], &["/healthz/*"]),
        ];
        let ok = |servant: Rule| covers(&owner, &[servant]).0;
        assert!(ok(Rule::new(&["get"], &[""], &["pods"])));
        assert!(ok(Rule::new(&["list"], &[""], &["pods/log"])));
        assert!(!ok(Rule::new(&["watch"], &[""], &["pods"])));
        assert!(ok(Rule::new(&["delete", "create"], &["apps"], &["deployments", "deployments/scale"])));
        assert!(ok(Rule::new(&["get"], &[""], &["nodes/status"])));
        assert!(!ok(Rule::new(&["get"], &[""], &["nodes"])));
        assert!(ok(Rule::new(&["get"], &[""], &["secrets"]).names(&["a"])));
        assert!(!ok(Rule::new(&["get"], &[""], &["secrets"])));
        assert!(ok(Rule::urls(&["get"], &["/healthz/etcd"])));
        assert!(!ok(Rule::urls(&["get"], &["/healthz"])));
        let (_, missing) = covers(&owner, &[Rule::new(&["watch", "delete"], &[""], &["pods"])]);
        assert_eq!(compact(missing), vec![Rule::new(&["watch", "delete"], &[""], &["pods"])]);
    }

    #[test]
    fn escalation_message() {
        let u = user("jane", &["devs", "system:authenticated"]);
        let err = confirm_no_escalation(
            &u,
            &[Rule::new(&["get"], &[""], &["pods"])],
            &[],
            &[
                Rule::new(&["get", "create"], &[""], &["pods", "secrets"]),
                Rule::urls(&["get"], &["/metrics"]),
            ],
        )
        .unwrap_err();
        assert_eq!(
            err,
            "user \"jane\" (groups=[\"devs\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n\
             {APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"create\"]}\n\
             {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"create\"]}\n\
             {NonResourceURLs:[\"/metrics\"], Verbs:[\"get\"]}"
        );
    }

    fn chain(p: &Policy) -> Arc<Chain> {
        let rbac = Arc::new(p.resolver());
        Arc::new(Chain::from_parts(vec![("RBAC".into(), Box::new(RbacAuthorizer(rbac.clone())))], rbac))
    }

    fn policy() -> Policy {
        let edit = Rule::new(&["*"], &[""], &["pods", "configmaps"]);
        Policy::new(
            Vec::new(),
            vec![obj(
                "RoleBinding",
                "dev",
                "jane-edit",
                json!({
                    "roleRef": { "apiGroup": GROUP, "kind": "ClusterRole", "name": "editor" },
                    "subjects": [{ "kind": "User", "name": "jane", "apiGroup": GROUP }],
                }),
            )],
            vec![
                // Not `*` on roles: that would include `escalate` and `bind`.
                obj(
                    "ClusterRole",
                    "",
                    "editor",
                    json!({ "rules": [
                    edit,
                    Rule::new(&["get", "list", "create", "update", "delete"], &[GROUP], &["roles", "rolebindings"]),
                ] }),
                ),
                obj(
                    "ClusterRole",
                    "",
                    "secrets",
                    json!({ "rules": [Rule::new(&["get"], &[""], &["secrets"])] }),
                ),
                obj(
                    "ClusterRole",
                    "",
                    "binder",
                    json!({ "rules": [Rule::new(&["bind"], &[GROUP], &["clusterroles"]).names(&["secrets"])] }),
                ),
            ],
            vec![obj(
                "ClusterRoleBinding",
                "",
                "bob-binder",
                json!({
                    "roleRef": { "apiGroup": GROUP, "kind": "ClusterRole", "name": "binder" },
                    "subjects": [{ "kind": "User", "name": "bob", "apiGroup": GROUP }],
                }),
            )],
        )
    }

    fn info(kind: &'static str, plural: &'static str, namespaced: bool) -> ResourceInfo {
        crate::registry::resources::all()
            .into_iter()
            .find(|r| r.info.kind == kind && r.info.plural == plural && r.info.namespaced == namespaced)
            .map(|r| r.info.clone())
            .expect("rbac resources are registered")
    }

    async fn as_user(u: User, chain: Arc<Chain>, info: &ResourceInfo, obj: Value) -> ApiResult<()> {
        let s = Arc::new(RequestScope {
            user: u,
            admission: None,
            authorizer: Some(chain),
            warnings: Default::default(),
        });
        scope(s, check(info, Operation::Create, &obj, None)).await
    }

    #[tokio::test]
    async fn roles_and_bindings_need_held_rules() {
        let p = policy();
        let c = chain(&p);
        let jane = user("jane", &["system:authenticated"]);
        let role = info("Role", "roles", true);
        let ok_role = obj("Role", "dev", "r", json!({ "rules": [Rule::new(&["get"], &[""], &["pods"])] }));
        assert!(as_user(jane.clone(), c.clone(), &role, ok_role.clone()).await.is_ok());
        let bad_role =
            obj("Role", "dev", "r", json!({ "rules": [Rule::new(&["get"], &[""], &["secrets"])] }));
        let err = as_user(jane.clone(), c.clone(), &role, bad_role.clone()).await.unwrap_err();
        assert_eq!(err.code, 403);
        assert!(err.message.starts_with("roles.rbac.authorization.k8s.io \"r\" is forbidden: user \"jane\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"), "{}", err.message);
        // The same role elsewhere: jane holds nothing there.
        let other = obj("Role", "prod", "r", json!({ "rules": [Rule::new(&["get"], &[""], &["pods"])] }));
        assert!(as_user(jane.clone(), c.clone(), &role, other).await.is_err());
        // Binding a role whose rules jane holds is fine; one she lacks is not.
        let rb = info("RoleBinding", "rolebindings", true);
        let bind = |role: &str| {
            obj(
                "RoleBinding",
                "dev",
                "b",
                json!({
                    "roleRef": { "apiGroup": GROUP, "kind": "ClusterRole", "name": role },
                    "subjects": [{ "kind": "User", "name": "x", "apiGroup": GROUP }],
                }),
            )
        };
        assert!(as_user(jane.clone(), c.clone(), &rb, bind("editor")).await.is_ok());
        assert!(as_user(jane.clone(), c.clone(), &rb, bind("secrets")).await.is_err());
        let err = as_user(jane.clone(), c.clone(), &rb, bind("missing")).await.unwrap_err();
        assert!(
            err.message.contains("clusterrole.rbac.authorization.k8s.io \"missing\" not found"),
            "{}",
            err.message
        );
        // bob may `bind` the secrets role without holding it.
        let bob = user("bob", &[]);
        assert!(as_user(bob.clone(), c.clone(), &rb, bind("secrets")).await.is_ok());
        assert!(as_user(bob, c.clone(), &rb, bind("editor")).await.is_err());
        // Whoever may `escalate` roles may create any role.
        p.cluster_role_bindings.set(vec![obj(
            "ClusterRoleBinding",
            "",
            "carl-escalates",
            json!({
                "roleRef": { "apiGroup": GROUP, "kind": "ClusterRole", "name": "escalator" },
                "subjects": [{ "kind": "User", "name": "carl", "apiGroup": GROUP }],
            }),
        )]);
        p.cluster_roles.set(vec![obj(
            "ClusterRole",
            "",
            "escalator",
            json!({ "rules": [Rule::new(&["escalate"], &[GROUP], &["roles"])] }),
        )]);
        assert!(as_user(user("carl", &[]), c.clone(), &role, bad_role.clone()).await.is_ok());
        // system:masters and the server's own writes are not checked.
        let root = user("root", &["system:masters"]);
        assert!(as_user(root, c.clone(), &role, bad_role.clone()).await.is_ok());
        assert!(check(&role, Operation::Create, &bad_role, None).await.is_ok());
        // aggregationRule needs full authority.
        let cr = info("ClusterRole", "clusterroles", false);
        let agg = obj(
            "ClusterRole",
            "",
            "agg",
            json!({ "aggregationRule": { "clusterRoleSelectors": [{ "matchLabels": { "a": "b" } }] } }),
        );
        let err = as_user(jane, c, &cr, agg).await.unwrap_err();
        assert!(
            err.message.ends_with("must have cluster-admin privileges to use the aggregationRule"),
            "{}",
            err.message
        );
    }
}
