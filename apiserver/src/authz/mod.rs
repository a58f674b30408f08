//! Authorization: may this user do this (upstream's `pkg/authorization` and
//! `pkg/kubeapiserver/authorizer`). Members of `system:masters` are allowed first, then the
//! modes of `--authorization-mode` are asked in order; the first that allows or denies
//! decides, and a request no mode allows is refused with 403.
//!
//! - [`options`]: the authorization flags.
//! - [`source`]: the watch caches the authorizers read (a fake for tests).
//! - [`rbac`]: rule matching, rule resolution and the `RBAC` mode.
//! - [`bootstrap_policy`]: the default roles and bindings, reconciled at startup.
//! - [`node`]: the `Node` mode (kubelets reach what their pods use).
//! - [`webhook`]: the `Webhook` mode (SubjectAccessReviews to a remote service).
//! - [`escalation`]: no one grants through RBAC what they do not hold.
//! - [`reviews`]: SubjectAccessReview and its kin.
//! - [`impersonation`]: the `Impersonate-*` headers.
//!
//! The [`Authorizer`] trait is async because the webhook asks over HTTP; the others answer
//! from memory without awaiting.

pub mod bootstrap_policy;
pub mod escalation;
pub mod impersonation;
pub mod node;
pub mod options;
pub mod rbac;
pub mod reviews;
pub mod source;
pub mod webhook;

use std::sync::Arc;

use crate::authn::{User, names};
use crate::errors::{ApiError, ApiResult};
use crate::handlers::request::RequestInfo;
use crate::registry::Registry;
use rbac::Rule;

/// What a request wants to do (upstream's `authorizer.Attributes`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    pub user: User,
    /// get, list, watch, create, update, patch, delete, deletecollection, or a special
    /// verb (impersonate, bind, escalate, use, approve, ...); for non-resource requests
    /// the lower-cased HTTP method, as upstream (get, post, put, patch, delete, head).
    pub verb: String,
    /// True for `/api/...` and `/apis/...` resource requests; false for other paths.
    pub resource_request: bool,
    pub namespace: String,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// The URL path of a non-resource request.
    pub path: String,
}

/// One authorizer's answer (upstream's `authorizer.Decision` plus its reason).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow(String),
    Deny(String),
    NoOpinion(String),
}

impl Decision {
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allow(_))
    }

    pub fn reason(&self) -> &str {
        match self {
            Decision::Allow(r) | Decision::Deny(r) | Decision::NoOpinion(r) => r,
        }
    }
}

/// A decision and the error met while making it (upstream returns both: a webhook that
/// cannot be reached abstains and reports why, SubjectAccessReview shows it as
/// `status.evaluationError`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation {
    pub decision: Decision,
    pub error: Option<String>,
}

impl From<Decision> for Evaluation {
    fn from(decision: Decision) -> Self {
        Self { decision, error: None }
    }
}

/// The rules a user holds as far as one mode can tell (upstream's `RuleResolver.RulesFor`):
/// what SelfSubjectRulesReview reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleSet {
    /// Rules with resources.
    pub resource: Vec<Rule>,
    /// Rules with nonResourceURLs.
    pub non_resource: Vec<Rule>,
    /// The mode cannot list everything it would allow.
    pub incomplete: bool,
    pub errors: Vec<String>,
}

impl RuleSet {
    /// Splits policy rules as upstream's RBAC `RulesFor` does: a rule with both kinds of
    /// entries counts in both lists.
    pub fn from_rules(rules: &[Rule]) -> Self {
        let mut set = Self::default();
        for r in rules {
            if !r.resources.is_empty() {
                set.resource.push(Rule { non_resource_urls: Vec::new(), ..r.clone() });
            }
            if !r.non_resource_urls.is_empty() {
                set.non_resource.push(Rule::urls(&str_refs(&r.verbs), &str_refs(&r.non_resource_urls)));
            }
        }
        set
    }

    /// Upstream's `utilerrors.NewAggregate(errs).Error()`.
    pub fn error(&self) -> Option<String> {
        aggregate(&self.errors)
    }
}

fn str_refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Joins errors as upstream's `utilerrors.Aggregate` prints them.
pub fn aggregate(errors: &[String]) -> Option<String> {
    match errors {
        [] => None,
        [one] => Some(one.clone()),
        many => Some(format!("[{}]", many.join(", "))),
    }
}

/// One authorization mode.
#[async_trait::async_trait]
pub trait Authorizer: Send + Sync {
    async fn authorize(&self, attrs: &Attributes) -> Evaluation;

    /// The rules `user` holds in `namespace` ("" = cluster-wide only). Modes that cannot
    /// enumerate say so with `incomplete`.
    fn rules_for(&self, _user: &User, _namespace: &str) -> RuleSet {
        RuleSet::default()
    }
}

/// Allows everything (`AlwaysAllow`).
pub struct AlwaysAllow;

#[async_trait::async_trait]
impl Authorizer for AlwaysAllow {
    async fn authorize(&self, _: &Attributes) -> Evaluation {
        Decision::Allow(String::new()).into()
    }

    fn rules_for(&self, _: &User, _: &str) -> RuleSet {
        RuleSet {
            resource: vec![Rule::new(&["*"], &["*"], &["*"])],
            non_resource: vec![Rule::urls(&["*"], &["*"])],
            ..Default::default()
        }
    }
}

/// Denies everything (`AlwaysDeny`).
pub struct AlwaysDeny;

#[async_trait::async_trait]
impl Authorizer for AlwaysDeny {
    async fn authorize(&self, _: &Attributes) -> Evaluation {
        Decision::Deny(String::new()).into()
    }
}

/// The modes of `--authorization-mode`, asked in order, behind the `system:masters`
/// short cut; plus the RBAC rule resolver, which escalation checks use whatever the modes
/// (upstream's RBAC storage always checks escalation).
pub struct Chain {
    pub modes: Vec<(String, Box<dyn Authorizer>)>,
    pub rbac: Arc<rbac::Resolver>,
}

impl Chain {
    /// The modes `--authorization-mode` names, in its order.
    pub fn new(opts: &options::Options, registry: &Arc<Registry>) -> Result<Self, String> {
        let rbac = Arc::new(rbac::Resolver::from_registry(registry));
        let modes = opts.authorization_mode.clone();
        if modes.is_empty() {
            return Err("at least one authorization-mode must be passed".into());
        }
        opts.validate(&modes)?;
        let mut seen = std::collections::HashSet::new();
        let mut chain: Vec<(String, Box<dyn Authorizer>)> = Vec::new();
        for m in &modes {
            if !seen.insert(m.as_str()) {
                return Err(format!("authorization-mode {m:?} has mode specified more than once"));
            }
            let mode: Box<dyn Authorizer> = match m.as_str() {
                "AlwaysAllow" => Box::new(AlwaysAllow),
                "AlwaysDeny" => Box::new(AlwaysDeny),
                "RBAC" => Box::new(rbac::RbacAuthorizer(rbac.clone())),
                "Node" => Box::new(node::NodeAuthorizer::from_registry(registry)),
                "Webhook" => Box::new(webhook::Webhook::from_options(opts)?),
                "ABAC" => return Err("--authorization-mode: ABAC is not supported by this server".into()),
                other => {
                    return Err(format!(
                        "--authorization-mode: unknown authorization mode {other:?} specified; supported: AlwaysAllow, AlwaysDeny, RBAC, Node, Webhook"
                    ));
                }
            };
            chain.push((m.clone(), mode));
        }
        Ok(Self { modes: chain, rbac })
    }

    /// A chain of the given modes (tests, and servers built in-process).
    pub fn from_parts(modes: Vec<(String, Box<dyn Authorizer>)>, rbac: Arc<rbac::Resolver>) -> Self {
        Self { modes, rbac }
    }

    /// The first decision that is not NoOpinion; NoOpinion when every mode abstains (a
    /// refusal: upstream denies what no one allowed). Reasons and errors of abstaining
    /// modes are joined as upstream's union authorizer does.
    pub async fn evaluate(&self, attrs: &Attributes) -> Evaluation {
        // Upstream puts a privileged-group authorizer in front of every mode.
        if attrs.user.groups.iter().any(|g| g == names::SYSTEM_PRIVILEGED_GROUP) {
            return Decision::Allow(String::new()).into();
        }
        let mut reasons = Vec::new();
        let mut errors = Vec::new();
        for (_, m) in &self.modes {
            let Evaluation { decision, error } = m.authorize(attrs).await;
            if let Some(e) = error {
                errors.push(e);
            }
            match decision {
                Decision::NoOpinion(r) => {
                    if !r.is_empty() {
                        reasons.push(r);
                    }
                }
                decided => return Evaluation { decision: decided, error: aggregate(&errors) },
            }
        }
        Evaluation { decision: Decision::NoOpinion(reasons.join("\n")), error: aggregate(&errors) }
    }

    pub async fn authorize(&self, attrs: &Attributes) -> Decision {
        self.evaluate(attrs).await.decision
    }

    /// 403 with upstream's message unless some mode allows the request.
    pub async fn check(&self, attrs: &Attributes) -> ApiResult<()> {
        match self.authorize(attrs).await {
            Decision::Allow(_) => Ok(()),
            d => Err(forbidden(attrs, d.reason())),
        }
    }

    /// The union of what every mode can tell about `user`'s rules in `namespace`.
    pub fn rules_for(&self, user: &User, namespace: &str) -> RuleSet {
        let mut all = RuleSet::default();
        for (_, m) in &self.modes {
            let r = m.rules_for(user, namespace);
            all.resource.extend(r.resource);
            all.non_resource.extend(r.non_resource);
            all.incomplete |= r.incomplete;
            all.errors.extend(r.errors);
        }
        all
    }
}

/// Upstream's `responsewriters.Forbidden` message and details.
pub fn forbidden(attrs: &Attributes, reason: &str) -> ApiError {
    let user = &attrs.user.name;
    let mut msg = if !attrs.resource_request {
        format!("forbidden: User \"{user}\" cannot {} path \"{}\"", attrs.verb, attrs.path)
    } else {
        let resource = if attrs.subresource.is_empty() {
            attrs.resource.clone()
        } else {
            format!("{}/{}", attrs.resource, attrs.subresource)
        };
        let qualified = crate::errors::qualified(&attrs.resource, &attrs.api_group);
        let object = if attrs.name.is_empty() {
            format!("{qualified} is forbidden")
        } else {
            format!("{qualified} \"{}\" is forbidden", attrs.name)
        };
        let scope = if attrs.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{}\"", attrs.namespace)
        };
        format!(
            "{object}: User \"{user}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
            attrs.verb, attrs.api_group
        )
    };
    if !reason.is_empty() {
        msg.push_str(": ");
        msg.push_str(reason);
    }
    let mut err = ApiError::forbidden(msg);
    if attrs.resource_request {
        err.details = Some(serde_json::json!({
            "name": attrs.name,
            "group": attrs.api_group,
            "kind": attrs.resource,
        }));
    }
    err
}

/// The attributes of a request as upstream's `RequestInfoResolver` derives them. A list or
/// watch whose field selector pins `metadata.name` is about that one object (upstream sets
/// the name from it, so RBAC resourceNames and the Node authorizer apply to it).
pub fn attributes(
    user: &User,
    info: Option<&RequestInfo>,
    method: &http::Method,
    path: &str,
    query: &crate::handlers::Query,
) -> Attributes {
    match info {
        Some(i) => {
            let mut name = i.name.clone().unwrap_or_default();
            if name.is_empty()
                && matches!(i.verb, "list" | "watch")
                && let Some(pinned) = query.get("fieldSelector").and_then(|s| selected_name(s))
            {
                name = pinned;
            }
            Attributes {
                user: user.clone(),
                verb: i.verb.to_string(),
                resource_request: true,
                namespace: i.namespace.clone().unwrap_or_default(),
                api_group: i.group.clone(),
                api_version: i.version.clone(),
                resource: i.resource.clone(),
                subresource: i.subresource.clone().unwrap_or_default(),
                name,
                path: path.to_string(),
            }
        }
        None => Attributes {
            user: user.clone(),
            verb: method.as_str().to_ascii_lowercase(),
            resource_request: false,
            path: path.to_string(),
            ..Default::default()
        },
    }
}

/// The value a field selector requires `metadata.name` to equal (upstream's
/// `RequiresExactMatch("metadata.name")`).
fn selected_name(selector: &str) -> Option<String> {
    selector.split(',').find_map(|part| {
        let (field, value) = part.split_once("==").or_else(|| part.split_once('='))?;
        (field.trim() == "metadata.name" && !field.ends_with('!')).then(|| value.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn forbidden_messages_match_upstream() {
        let attrs = Attributes {
            user: user("alice", &[]),
            verb: "list".into(),
            resource_request: true,
            namespace: "default".into(),
            api_group: "apps".into(),
            resource: "deployments".into(),
            ..Default::default()
        };
        assert_eq!(
            forbidden(&attrs, "").message,
            "deployments.apps is forbidden: User \"alice\" cannot list resource \"deployments\" in API group \"apps\" in the namespace \"default\""
        );
        let attrs = Attributes {
            user: user("bob", &[]),
            verb: "impersonate".into(),
            resource_request: true,
            resource: "users".into(),
            name: "x".into(),
            ..Default::default()
        };
        let e = forbidden(&attrs, "");
        assert_eq!(
            e.message,
            "users \"x\" is forbidden: User \"bob\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        );
        assert_eq!(e.code, 403);
        let attrs = Attributes {
            user: user("c", &[]),
            verb: "get".into(),
            path: "/metrics".into(),
            ..Default::default()
        };
        assert_eq!(forbidden(&attrs, "").message, "forbidden: User \"c\" cannot get path \"/metrics\"");
    }

    #[test]
    fn attributes_follow_request_info() {
        let q: crate::handlers::Query =
            [("fieldSelector".to_string(), "metadata.name=s1".to_string())].into();
        let info = crate::handlers::request::parse(&http::Method::GET, "/api/v1/namespaces/ns/secrets", true);
        let a = attributes(
            &user("u", &[]),
            info.as_ref(),
            &http::Method::GET,
            "/api/v1/namespaces/ns/secrets",
            &q,
        );
        assert_eq!((a.verb.as_str(), a.name.as_str(), a.namespace.as_str()), ("watch", "s1", "ns"));
        let a = attributes(&user("u", &[]), None, &http::Method::POST, "/foo", &Default::default());
        assert_eq!((a.verb.as_str(), a.resource_request), ("post", false));
        assert_eq!(selected_name("spec.nodeName=n, metadata.name==x"), Some("x".into()));
        assert_eq!(selected_name("metadata.name!=x"), None);
    }

    struct Fixed(Decision, Option<&'static str>);

    #[async_trait::async_trait]
    impl Authorizer for Fixed {
        async fn authorize(&self, _: &Attributes) -> Evaluation {
            Evaluation { decision: self.0.clone(), error: self.1.map(str::to_string) }
        }
    }

    #[tokio::test]
    async fn chain_asks_modes_in_order() {
        let rbac = Arc::new(rbac::Resolver::empty());
        let chain = Chain::from_parts(
            vec![
                ("A".into(), Box::new(Fixed(Decision::NoOpinion("first".into()), Some("boom")))),
                ("B".into(), Box::new(Fixed(Decision::NoOpinion("second".into()), None))),
            ],
            rbac.clone(),
        );
        let attrs = Attributes { user: user("u", &[]), verb: "get".into(), ..Default::default() };
        let ev = chain.evaluate(&attrs).await;
        assert_eq!(ev.decision, Decision::NoOpinion("first\nsecond".into()));
        assert_eq!(ev.error.as_deref(), Some("boom"));
        assert!(chain.check(&attrs).await.is_err());
        // system:masters is allowed before any mode is asked.
        let deny = Chain::from_parts(vec![("AlwaysDeny".into(), Box::new(AlwaysDeny))], rbac.clone());
        let admin = Attributes { user: user("root", &[names::SYSTEM_PRIVILEGED_GROUP]), ..attrs.clone() };
        assert!(deny.authorize(&admin).await.allowed());
        assert!(!deny.authorize(&attrs).await.allowed());
        let allow = Chain::from_parts(vec![("AlwaysAllow".into(), Box::new(AlwaysAllow))], rbac);
        assert!(allow.check(&attrs).await.is_ok());
        assert_eq!(allow.rules_for(&attrs.user, "ns").resource.len(), 1);
    }
}
