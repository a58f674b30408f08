//! Resources that are not stored: each create is answered from the request alone
//! (TokenReview, SelfSubjectReview, SubjectAccessReview and its kin), as upstream's
//! "create-only" REST storages. Returns None for every other resource.

use hyper::body::Incoming;
use hyper::{Request, Response};

use super::request::RequestInfo;
use super::{Api, BoxBody, Query};
use crate::errors::ApiResult;

pub async fn serve(
    _api: &Api,
    info: &RequestInfo,
    _q: &Query,
    _req: Request<Incoming>,
) -> Result<ApiResult<Response<BoxBody>>, Request<Incoming>> {
    match (info.group.as_str(), info.version.as_str(), info.resource.as_str()) {
        _ => Err(_req),
    }
}
