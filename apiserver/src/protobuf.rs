//! Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`): the `k8s\0` magic,
//! a `runtime.Unknown` envelope, and the object's message.

use serde_json::Value;

use crate::errors::{ApiError, ApiResult};

/// Decodes a protobuf request body into the object's JSON form.
pub fn decode(_body: &[u8]) -> ApiResult<Value> {
    Err(ApiError::unsupported_media_type("application/vnd.kubernetes.protobuf"))
}

/// Encodes an object as protobuf; None when the kind has no protobuf form here.
pub fn encode(_v: &Value) -> Option<Vec<u8>> {
    None
}
