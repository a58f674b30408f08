//! Resources that are not stored: each create is answered from the request alone
//! (TokenReview, SelfSubjectReview, SubjectAccessReview and its kin), as upstream's
//! "create-only" REST storages; `bindings` (the pods' binding, named by the body); and
//! `componentstatuses`, probed when read ([`crate::component_status`]). Every other
//! request is handed back.

use http::StatusCode;
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::Value;

use super::codec::{self, Output};
use super::request::RequestInfo;
use super::{Api, BoxBody, Query};
use crate::errors::{ApiError, ApiResult};

pub async fn serve(
    api: &Api,
    info: &RequestInfo,
    q: &Query,
    req: Request<Incoming>,
) -> Result<ApiResult<Response<BoxBody>>, Request<Incoming>> {
    match (info.group.as_str(), info.version.as_str(), info.resource.as_str()) {
        ("authentication.k8s.io", "v1", "tokenreviews") => {
            Ok(create_only(info, req, |review| crate::authn::reviews::token_review(&api.authn, &review))
                .await)
        }
        ("authentication.k8s.io", "v1", "selfsubjectreviews") => Ok(create_only(info, req, |_| {
            let user = crate::context::current().map(|s| s.user.clone()).unwrap_or_default();
            Ok(crate::authn::reviews::self_subject_review(&user, crate::table::unix_now()))
        })
        .await),
        ("", "v1", "bindings") => Ok(binding(api, info, q, req).await),
        ("", "v1", "componentstatuses") => Ok(component_statuses(api, info, q, req).await),
        ("authorization.k8s.io", "v1", r)
            if crate::authz::reviews::RESOURCES.iter().any(|(p, _, _)| *p == r) =>
        {
            Ok(crate::authz::reviews::serve(&api.authz, info, req).await)
        }
        _ => Err(req),
    }
}

/// Serves a cluster-scoped create-only resource: decodes the body, answers with
/// `answer`'s object and 201, as upstream's create handler.
async fn create_only(
    info: &RequestInfo,
    req: Request<Incoming>,
    answer: impl FnOnce(Value) -> ApiResult<Value>,
) -> ApiResult<Response<BoxBody>> {
    let path = req.uri().path().to_string();
    let output = codec::negotiate_untabled(req.headers());
    let (headers, body) = super::body_of(req).await?;
    if info.namespace.is_some() || info.name.is_some() {
        return Err(ApiError::no_route(&path));
    }
    if info.verb != "create" {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let output = output?;
    let out = answer(codec::decode(&headers, &body)?)?;
    let (ct, bytes) = codec::encode(&out, output);
    Ok(super::full(StatusCode::CREATED, ct, bytes))
}

/// `POST /api/v1/namespaces/<ns>/bindings`: binds the pod the body names (the older form
/// of `pods/<name>/binding`, which the scheduler used to call).
async fn binding(
    api: &Api,
    info: &RequestInfo,
    q: &Query,
    req: Request<Incoming>,
) -> ApiResult<Response<BoxBody>> {
    let path = req.uri().path().to_string();
    let (headers, body) = super::body_of(req).await?;
    let Some(ns) = info.namespace.as_deref().filter(|_| info.name.is_none()) else {
        return Err(ApiError::no_route(&path));
    };
    if info.verb != "create" {
        return Err(super::unsupported_verb(&binding_info(), info.verb));
    }
    let binding = codec::decode(&headers, &body)?;
    let name = binding["metadata"]["name"].as_str().unwrap_or_default().to_string();
    if name.is_empty() {
        return Err(ApiError::bad_request("name is required in the request body"));
    }
    crate::pods::bind(&api.registry.core("pods"), ns, &name, &binding, super::dry_run(q)).await?;
    Ok(super::json_response(
        StatusCode::CREATED,
        &serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

fn binding_info() -> crate::registry::resource::ResourceInfo {
    use k8s_openapi::api::core::v1::Binding;
    crate::registry::resource::info_of::<Binding>("binding", &[], &[], true, &[], "").with_verbs(&["create"])
}

fn component_status_info() -> crate::registry::resource::ResourceInfo {
    use k8s_openapi::api::core::v1::ComponentStatus;
    crate::registry::resource::info_of::<ComponentStatus>("componentstatus", &["cs"], &[], false, &[], "")
        .with_verbs(&["get", "list"])
}

/// `componentstatuses`: get and list, answered by probing (JSON, YAML, protobuf or a
/// table, as a stored resource's).
async fn component_statuses(
    api: &Api,
    info: &RequestInfo,
    q: &Query,
    req: Request<Incoming>,
) -> ApiResult<Response<BoxBody>> {
    let path = req.uri().path().to_string();
    let output = codec::negotiate(req.headers());
    let _ = super::body_of(req).await?;
    let res = component_status_info();
    if info.namespace.is_some() || info.subresource.is_some() {
        return Err(ApiError::no_route(&path));
    }
    if !res.serves(info.verb) {
        return Err(super::unsupported_verb(&res, info.verb));
    }
    let out = match info.name.as_deref() {
        Some(name) => crate::component_status::get(&api.etcd, name).await?,
        None => {
            let labels = crate::selectors::LabelSelector::parse(
                q.get("labelSelector").map(String::as_str).unwrap_or_default(),
            )?;
            let fields = crate::selectors::FieldSelector::parse(
                q.get("fieldSelector").map(String::as_str).unwrap_or_default(),
                &[],
            )?;
            let mut list = crate::component_status::list(&api.etcd, fields.equals("metadata.name")).await;
            if let Some(items) = list["items"].as_array_mut() {
                items.retain(|o| labels.matches(o["metadata"].get("labels")));
            }
            list
        }
    };
    let body = match output? {
        Output::Table => {
            let include = crate::table::IncludeObject::parse(q.get("includeObject").map(String::as_str));
            let t = crate::table::to_table(&res, &out, include, true);
            let (ct, bytes) = codec::encode(&t, Output::Json);
            return Ok(super::full(StatusCode::OK, ct, bytes));
        }
        o => codec::encode(&out, o),
    };
    let mut resp = super::full(StatusCode::OK, body.0, body.1);
    // As upstream's deprecation of the v1 API.
    resp.headers_mut().append(
        http::header::WARNING,
        http::HeaderValue::from_static("299 - \"v1 ComponentStatus is deprecated in v1.19+\""),
    );
    Ok(resp)
}
