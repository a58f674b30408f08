//! The authorization.k8s.io/v1 reviews (upstream's `pkg/registry/authorization`): create-only
//! resources answered from the authorizer, never stored.
//!
//! - SubjectAccessReview: may the user in `spec` do what `spec` describes.
//! - LocalSubjectAccessReview: the same, limited to the URL's namespace.
//! - SelfSubjectAccessReview: may I (`kubectl auth can-i`).
//! - SelfSubjectRulesReview: what may I do in `spec.namespace` (`kubectl auth can-i --list`).
//!
//! Each answers 201 with the request object and its `status`.

use std::collections::BTreeMap;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{Value, json};

use super::{Attributes, Chain};
use crate::authn::User;
use crate::errors::{ApiError, ApiResult, FieldError};
use crate::handlers::codec;
use crate::handlers::request::RequestInfo;
use crate::handlers::{BoxBody, full};

pub const GROUP: &str = "authorization.k8s.io";

/// The kind of each review resource and whether it is namespaced.
pub const RESOURCES: &[(&str, &str, bool)] = &[
    ("subjectaccessreviews", "SubjectAccessReview", false),
    ("selfsubjectaccessreviews", "SelfSubjectAccessReview", false),
    ("localsubjectaccessreviews", "LocalSubjectAccessReview", true),
    ("selfsubjectrulesreviews", "SelfSubjectRulesReview", false),
];

/// Serves a request to one of [`RESOURCES`].
pub async fn serve(
    chain: &Chain,
    info: &RequestInfo,
    req: Request<Incoming>,
) -> ApiResult<Response<BoxBody>> {
    let path = req.uri().path().to_string();
    let Some(&(_, kind, namespaced)) = RESOURCES.iter().find(|(p, _, _)| *p == info.resource) else {
        return Err(ApiError::no_route(&path));
    };
    if info.name.is_some() || info.subresource.is_some() || namespaced != info.namespace.is_some() {
        return Err(ApiError::no_route(&path));
    }
    if info.verb != "create" {
        return Err(ApiError::method_not_allowed(format!(
            "{} is not supported on {kind}: the only verb is create",
            info.verb
        )));
    }
    let output = codec::negotiate_untabled(req.headers())?;
    let (headers, body) = crate::handlers::body_of(req).await?;
    let obj = codec::decode(&headers, &body)?;
    let user = crate::context::current().map(|s| s.user.clone()).unwrap_or_default();
    let answer = review(chain, kind, info.namespace.as_deref(), &user, obj).await?;
    let (ct, bytes) = codec::encode(&answer, output);
    Ok(full(StatusCode::CREATED, ct, bytes))
}

fn invalid(kind: &str, errs: &[FieldError]) -> ApiError {
    ApiError::invalid(kind, GROUP, "", errs)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_string)).collect()
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// Upstream's `ResourceAttributesFrom` / `NonResourceAttributesFrom`.
fn attributes_of(user: User, spec: &Value) -> Attributes {
    let r = &spec["resourceAttributes"];
    if r.is_object() {
        return Attributes {
            user,
            verb: text(&r["verb"]),
            resource_request: true,
            namespace: text(&r["namespace"]),
            api_group: text(&r["group"]),
            api_version: text(&r["version"]),
            resource: text(&r["resource"]),
            subresource: text(&r["subresource"]),
            name: text(&r["name"]),
            path: String::new(),
        };
    }
    let n = &spec["nonResourceAttributes"];
    Attributes { user, verb: text(&n["verb"]), path: text(&n["path"]), ..Default::default() }
}

/// Upstream's `ValidateSubjectAccessReviewSpec` (and its self variant without the user).
fn validate_spec(spec: &Value, needs_user: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let resource = spec["resourceAttributes"].is_object();
    let non_resource = spec["nonResourceAttributes"].is_object();
    if resource && non_resource {
        errs.push(FieldError::invalid(
            "spec.nonResourceAttributes",
            spec["nonResourceAttributes"].to_string(),
            "cannot be specified in combination with resourceAttributes",
        ));
    }
    if !resource && !non_resource {
        errs.push(FieldError::invalid(
            "spec.resourceAttributes",
            "null",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ));
    }
    if needs_user && text(&spec["user"]).is_empty() && strings(&spec["groups"]).is_empty() {
        errs.push(FieldError::invalid("spec.user", "", "at least one of user or group must be specified"));
    }
    errs
}

/// The metadata a review may carry: none (upstream refuses anything else but
/// managedFields; a namespace is allowed on LocalSubjectAccessReview).
fn metadata_empty(obj: &Value, allow_namespace: bool) -> bool {
    obj["metadata"].as_object().is_none_or(|m| {
        m.iter().all(|(k, v)| {
            v.is_null()
                || (k == "managedFields")
                || (k == "creationTimestamp" && v.is_null())
                || (allow_namespace && k == "namespace")
                || v.as_object().is_some_and(|o| o.is_empty())
                || v.as_array().is_some_and(|a| a.is_empty())
                || v.as_str() == Some("")
                // Go's zero values, as a protobuf body decodes them (`generation: 0`).
                || v.as_i64() == Some(0)
                || v.as_bool() == Some(false)
        })
    })
}

fn user_from_spec(spec: &Value) -> User {
    let extra: BTreeMap<String, Vec<String>> =
        spec["extra"].as_object().into_iter().flatten().map(|(k, v)| (k.clone(), strings(v))).collect();
    User { name: text(&spec["user"]), uid: text(&spec["uid"]), groups: strings(&spec["groups"]), extra }
}

/// Answers one review body. `namespace` is the URL's (LocalSubjectAccessReview only);
/// `requester` the user of the request (the self reviews).
pub async fn review(
    chain: &Chain,
    kind: &str,
    namespace: Option<&str>,
    requester: &User,
    mut obj: Value,
) -> ApiResult<Value> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(format!("not a {kind}")));
    }
    obj["apiVersion"] = json!(format!("{GROUP}/v1"));
    obj["kind"] = json!(kind);
    if obj["metadata"].is_null() {
        obj["metadata"] = json!({});
    }
    if obj["metadata"].get("creationTimestamp").is_none() {
        obj["metadata"]["creationTimestamp"] = Value::Null;
    }
    let spec = obj["spec"].clone();
    match kind {
        "SubjectAccessReview" => {
            let mut errs = validate_spec(&spec, true);
            if !metadata_empty(&obj, false) {
                errs.push(FieldError::invalid("metadata", obj["metadata"].to_string(), "must be empty"));
            }
            if !errs.is_empty() {
                return Err(invalid(kind, &errs));
            }
            let attrs = attributes_of(user_from_spec(&spec), &spec);
            obj["status"] = status(chain, &attrs).await;
        }
        "LocalSubjectAccessReview" => {
            let url_ns = namespace.unwrap_or_default();
            if url_ns.is_empty() {
                return Err(ApiError::bad_request(format!("namespace is required on this type: {url_ns}")));
            }
            let obj_ns = obj["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
            if !obj_ns.is_empty() && obj_ns != url_ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            obj["metadata"]["namespace"] = json!(url_ns);
            let mut errs = validate_spec(&spec, true);
            if !metadata_empty(&obj, true) {
                errs.push(FieldError::invalid(
                    "metadata",
                    obj["metadata"].to_string(),
                    "must be empty except for namespace",
                ));
            }
            if spec["resourceAttributes"].is_object()
                && text(&spec["resourceAttributes"]["namespace"]) != url_ns
            {
                errs.push(FieldError::invalid(
                    "spec.resourceAttributes.namespace",
                    text(&spec["resourceAttributes"]["namespace"]),
                    "must match metadata.namespace",
                ));
            }
            if spec["nonResourceAttributes"].is_object() {
                errs.push(FieldError::invalid(
                    "spec.nonResourceAttributes",
                    spec["nonResourceAttributes"].to_string(),
                    "disallowed on this kind of request",
                ));
            }
            if !errs.is_empty() {
                return Err(invalid(kind, &errs));
            }
            let attrs = attributes_of(user_from_spec(&spec), &spec);
            obj["status"] = status(chain, &attrs).await;
        }
        "SelfSubjectAccessReview" => {
            let errs = validate_spec(&spec, false);
            if !errs.is_empty() {
                return Err(invalid(kind, &errs));
            }
            let attrs = attributes_of(requester.clone(), &spec);
            obj["status"] = status(chain, &attrs).await;
        }
        "SelfSubjectRulesReview" => {
            let ns = text(&spec["namespace"]);
            if ns.is_empty() {
                return Err(ApiError::bad_request("no namespace on request"));
            }
            let rules = chain.rules_for(requester, &ns);
            let mut st = json!({
                "resourceRules": rules.resource.iter().map(|r| json!({
                    "verbs": r.verbs,
                    "apiGroups": r.api_groups,
                    "resources": r.resources,
                    "resourceNames": r.resource_names,
                })).map(drop_empty).collect::<Vec<_>>(),
                "nonResourceRules": rules.non_resource.iter().map(|r| json!({
                    "verbs": r.verbs,
                    "nonResourceURLs": r.non_resource_urls,
                })).collect::<Vec<_>>(),
                "incomplete": rules.incomplete,
            });
            if let Some(e) = rules.error() {
                st["evaluationError"] = json!(e);
            }
            // Upstream answers a fresh object: the status alone.
            obj = json!({
                "kind": kind,
                "apiVersion": format!("{GROUP}/v1"),
                "metadata": { "creationTimestamp": null },
                "spec": {},
                "status": st,
            });
        }
        other => return Err(ApiError::bad_request(format!("not a review kind: {other}"))),
    }
    Ok(obj)
}

fn drop_empty(mut v: Value) -> Value {
    if let Some(m) = v.as_object_mut() {
        m.retain(|k, v| k == "verbs" || v.as_array().is_none_or(|a| !a.is_empty()));
    }
    v
}

/// The SubjectAccessReviewStatus of a decision.
async fn status(chain: &Chain, attrs: &Attributes) -> Value {
    let ev = chain.evaluate(attrs).await;
    let mut st = json!({ "allowed": ev.decision.allowed() });
    if matches!(ev.decision, super::Decision::Deny(_)) {
        st["denied"] = json!(true);
    }
    if !ev.decision.reason().is_empty() {
        st["reason"] = json!(ev.decision.reason());
    }
    if let Some(e) = ev.error {
        st["evaluationError"] = json!(e);
    }
    st
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::authz::node::NodeAuthorizer;
    use crate::authz::rbac::tests::{Policy, obj, user};
    use crate::authz::rbac::{GROUP as RBAC, RbacAuthorizer, Rule};
    use crate::authz::source::MemSource;
    use crate::authz::{AlwaysDeny, Authorizer};

    fn chain(with_node: bool) -> Chain {
        let p = Policy::new(
            Vec::new(),
            vec![obj(
                "RoleBinding",
                "dev",
                "jane",
                json!({
                    "roleRef": { "apiGroup": RBAC, "kind": "ClusterRole", "name": "pods" },
                    "subjects": [{ "kind": "User", "name": "jane", "apiGroup": RBAC }],
                }),
            )],
            vec![
                obj(
                    "ClusterRole",
                    "",
                    "pods",
                    json!({ "rules": [Rule::new(&["get", "list"], &[""], &["pods"])] }),
                ),
                obj("ClusterRole", "", "health", json!({ "rules": [Rule::urls(&["get"], &["/healthz"])] })),
            ],
            // URLs are not namespaced: only cluster bindings grant them.
            vec![obj(
                "ClusterRoleBinding",
                "",
                "jane-health",
                json!({
                    "roleRef": { "apiGroup": RBAC, "kind": "ClusterRole", "name": "health" },
                    "subjects": [{ "kind": "User", "name": "jane", "apiGroup": RBAC }],
                }),
            )],
        );
        let rbac = Arc::new(p.resolver());
        let mut modes: Vec<(String, Box<dyn Authorizer>)> = Vec::new();
        if with_node {
            modes.push((
                "Node".into(),
                Box::new(NodeAuthorizer::new(MemSource::new(Vec::new()), MemSource::new(Vec::new()))),
            ));
        }
        modes.push(("RBAC".into(), Box::new(RbacAuthorizer(rbac.clone()))));
        Chain::from_parts(modes, rbac)
    }

    #[tokio::test]
    async fn subject_access_reviews() {
        let c = chain(false);
        let nobody = User::default();
        let sar = json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": { "user": "jane", "resourceAttributes": { "namespace": "dev", "verb": "get", "resource": "pods" } },
        });
        let out = review(&c, "SubjectAccessReview", None, &nobody, sar).await.unwrap();
        assert_eq!(out["status"]["allowed"], true);
        assert_eq!(
            out["status"]["reason"],
            "RBAC: allowed by RoleBinding \"jane/dev\" of ClusterRole \"pods\" to User \"jane\""
        );
        assert_eq!(out["spec"]["user"], "jane");
        let sar = json!({ "spec": { "user": "jane", "resourceAttributes": { "namespace": "prod", "verb": "get", "resource": "pods" } } });
        let out = review(&c, "SubjectAccessReview", None, &nobody, sar).await.unwrap();
        assert_eq!(out["status"], json!({ "allowed": false }));
        // Metadata of Go's zero values (a protobuf body decodes `generation: 0`) is empty;
        // a name is not.
        let zero = json!({ "metadata": { "creationTimestamp": null, "generation": 0 },
            "spec": { "user": "jane", "resourceAttributes": { "verb": "get", "resource": "pods" } } });
        review(&c, "SubjectAccessReview", None, &nobody, zero.clone()).await.unwrap();
        let mut named = zero;
        named["metadata"]["name"] = json!("x");
        let err = review(&c, "SubjectAccessReview", None, &nobody, named).await.unwrap_err();
        assert!(
            err.message.contains("metadata: Invalid value") && err.message.contains("must be empty"),
            "{}",
            err.message
        );
        let err = review(
            &c,
            "SubjectAccessReview",
            None,
            &nobody,
            json!({ "spec": { "resourceAttributes": { "verb": "get" } } }),
        )
        .await
        .unwrap_err();
        assert_eq!(err.code, 422);
        assert!(err.message.contains("at least one of user or group must be specified"), "{}", err.message);
        let err = review(&c, "SubjectAccessReview", None, &nobody, json!({ "spec": { "user": "x" } }))
            .await
            .unwrap_err();
        assert!(
            err.message
                .contains("exactly one of nonResourceAttributes or resourceAttributes must be specified")
        );
        // A deny from a mode shows as denied.
        let deny = Chain::from_parts(
            vec![("AlwaysDeny".into(), Box::new(AlwaysDeny))],
            Arc::new(crate::authz::rbac::Resolver::empty()),
        );
        let out = review(
            &deny,
            "SubjectAccessReview",
            None,
            &nobody,
            json!({ "spec": { "user": "x", "nonResourceAttributes": { "path": "/x", "verb": "get" } } }),
        )
        .await
        .unwrap();
        assert_eq!(out["status"], json!({ "allowed": false, "denied": true }));
    }

    #[tokio::test]
    async fn local_and_self_reviews() {
        let c = chain(false);
        let jane = user("jane", &["system:authenticated"]);
        let lsar = json!({ "spec": { "user": "jane", "resourceAttributes": { "namespace": "dev", "verb": "list", "resource": "pods" } } });
        let out = review(&c, "LocalSubjectAccessReview", Some("dev"), &jane, lsar.clone()).await.unwrap();
        assert_eq!(out["status"]["allowed"], true);
        assert_eq!(out["metadata"]["namespace"], "dev");
        let err = review(&c, "LocalSubjectAccessReview", Some("prod"), &jane, lsar).await.unwrap_err();
        assert!(err.message.contains("must match metadata.namespace"), "{}", err.message);
        let ssar = json!({ "spec": { "nonResourceAttributes": { "path": "/healthz", "verb": "get" } } });
        let out = review(&c, "SelfSubjectAccessReview", None, &jane, ssar).await.unwrap();
        assert_eq!(out["status"]["allowed"], true);
        let ssar = json!({ "spec": { "resourceAttributes": { "namespace": "dev", "verb": "delete", "resource": "pods" } } });
        let out = review(&c, "SelfSubjectAccessReview", None, &jane, ssar).await.unwrap();
        assert_eq!(out["status"]["allowed"], false);
    }

    #[tokio::test]
    async fn rules_reviews() {
        let c = chain(false);
        let jane = user("jane", &["system:authenticated"]);
        let out =
            review(&c, "SelfSubjectRulesReview", None, &jane, json!({ "spec": { "namespace": "dev" } }))
                .await
                .unwrap();
        assert_eq!(
            out["status"],
            json!({
                "resourceRules": [{ "verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"] }],
                "nonResourceRules": [{ "verbs": ["get"], "nonResourceURLs": ["/healthz"] }],
                "incomplete": false,
            })
        );
        // kubectl asks in protobuf: the answer must survive the encoding.
        let wire = crate::protobuf::encode(&out).expect("encodes");
        let back = crate::protobuf::decode(&wire).expect("decodes");
        assert_eq!(back["status"]["nonResourceRules"], out["status"]["nonResourceRules"], "{back}");
        let err = review(&c, "SelfSubjectRulesReview", None, &jane, json!({ "spec": {} })).await.unwrap_err();
        assert_eq!(err.message, "no namespace on request");
        // A node asking, with the Node mode in the chain: incomplete, as upstream.
        let c = chain(true);
        let node = user("system:node:n1", &["system:nodes"]);
        let out =
            review(&c, "SelfSubjectRulesReview", None, &node, json!({ "spec": { "namespace": "dev" } }))
                .await
                .unwrap();
        assert_eq!(out["status"]["incomplete"], true);
        assert_eq!(out["status"]["evaluationError"], "node authorizer does not support user rule resolution");
    }
}
