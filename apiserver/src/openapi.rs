//! OpenAPI documents: `/openapi/v2` and `/openapi/v3` (per group-version), generated from
//! the Rust types of the served resources.

use crate::errors::{ApiError, ApiResult};
use crate::handlers::BoxBody;

#[derive(Default)]
pub struct OpenApi {}

impl OpenApi {
    pub fn respond(&self, path: &str, _accept: &str) -> ApiResult<http::Response<BoxBody>> {
        Err(ApiError::no_route(path))
    }
}
