//! Resources that are not stored: each create is answered from the request alone
//! (TokenReview, SelfSubjectReview, SubjectAccessReview and its kin), as upstream's
//! "create-only" REST storages. Returns None for every other resource.

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
    _q: &Query,
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
    let output = codec::negotiate(req.headers());
    let (headers, body) = super::body_of(req).await?;
    if info.namespace.is_some() || info.name.is_some() {
        return Err(ApiError::no_route(&path));
    }
    if info.verb != "create" {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let output = match output? {
        Output::Table => Output::Json,
        o => o,
    };
    let out = answer(codec::decode(&headers, &body)?)?;
    let (ct, bytes) = codec::encode(&out, output);
    Ok(super::full(StatusCode::CREATED, ct, bytes))
}
