//! Authorization: may this user do this (upstream's `pkg/authorization`). The modes of
//! `--authorization-mode` are asked in order; the first that allows or denies decides,
//! and a request no mode allows is refused with 403.
//!
//! - [`options`]: the authorization flags.

pub mod options;

use std::sync::Arc;

use crate::authn::User;
use crate::registry::Registry;
use crate::errors::{ApiError, ApiResult};
use crate::handlers::request::RequestInfo;

/// What a request wants to do (upstream's `authorizer.Attributes`).
#[derive(Clone, Debug, Default)]
pub struct Attributes {
    pub user: User,
    /// get, list, watch, create, update, patch, delete, deletecollection, or a special
    /// verb (impersonate, bind, escalate, use, approve, ...); for non-resource requests
    /// the lower-cased HTTP method mapped as upstream (get, post→create, put→update, ...).
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

/// One authorization mode.
pub trait Authorizer: Send + Sync {
    fn authorize(&self, attrs: &Attributes) -> Decision;
}

/// Allows everything (`AlwaysAllow`).
pub struct AlwaysAllow;

impl Authorizer for AlwaysAllow {
    fn authorize(&self, _: &Attributes) -> Decision {
        Decision::Allow(String::new())
    }
}

/// Denies everything (`AlwaysDeny`).
pub struct AlwaysDeny;

impl Authorizer for AlwaysDeny {
    fn authorize(&self, _: &Attributes) -> Decision {
        Decision::Deny(String::new())
    }
}

/// The modes of `--authorization-mode`, asked in order.
pub struct Chain {
    pub modes: Vec<(String, Box<dyn Authorizer>)>,
}

impl Chain {
    /// The modes `--authorization-mode` names, in its order.
    pub fn new(opts: &options::Options, _registry: &Arc<Registry>) -> Result<Self, String> {
        let mut modes: Vec<(String, Box<dyn Authorizer>)> = Vec::new();
        for m in &opts.authorization_mode {
            let mode: Box<dyn Authorizer> = match m.as_str() {
                "AlwaysAllow" => Box::new(AlwaysAllow),
                "AlwaysDeny" => Box::new(AlwaysDeny),
                other => return Err(format!("--authorization-mode: unknown authorization mode {other:?}")),
            };
            modes.push((m.clone(), mode));
        }
        Ok(Self { modes })
    }

    /// The first decision that is not NoOpinion; NoOpinion when every mode abstains
    /// (a refusal: upstream denies what no one allowed). Reasons of abstaining modes are
    /// joined as upstream's union authorizer does.
    pub fn authorize(&self, attrs: &Attributes) -> Decision {
        let mut reasons = Vec::new();
        for (_, m) in &self.modes {
            match m.authorize(attrs) {
                Decision::NoOpinion(r) => {
                    if !r.is_empty() {
                        reasons.push(r);
                    }
                }
                decided => return decided,
            }
        }
        Decision::NoOpinion(reasons.join("\n"))
    }

    /// 403 with upstream's message unless some mode allows the request.
    pub fn check(&self, attrs: &Attributes) -> ApiResult<()> {
        match self.authorize(attrs) {
            Decision::Allow(_) => Ok(()),
            d => Err(forbidden(attrs, d.reason())),
        }
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

/// The attributes of a request as upstream's `RequestInfoResolver` derives them.
pub fn attributes(user: &User, info: Option<&RequestInfo>, method: &http::Method, path: &str) -> Attributes {
    match info {
        Some(i) => Attributes {
            user: user.clone(),
            verb: i.verb.to_string(),
            resource_request: true,
            namespace: i.namespace.clone().unwrap_or_default(),
            api_group: i.group.clone(),
            api_version: i.version.clone(),
            resource: i.resource.clone(),
            subresource: i.subresource.clone().unwrap_or_default(),
            name: i.name.clone().unwrap_or_default(),
            path: path.to_string(),
        },
        None => Attributes {
            user: user.clone(),
            verb: match *method {
                http::Method::POST => "create",
                http::Method::PUT => "update",
                http::Method::PATCH => "patch",
                http::Method::DELETE => "delete",
                _ => "get",
            }
            .to_string(),
            resource_request: false,
            path: path.to_string(),
            ..Default::default()
        },
    }
}
