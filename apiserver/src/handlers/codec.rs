//! Content negotiation: request bodies in JSON, YAML or Kubernetes protobuf; responses in
//! JSON, YAML, protobuf or as a `meta.k8s.io/v1` Table, as the `Accept` header asks.

use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;

use crate::errors::{ApiError, ApiResult};

pub const JSON: &str = "application/json";
pub const YAML: &str = "application/yaml";
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// How a response body is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Json,
    Yaml,
    Protobuf,
    /// A meta.k8s.io Table (kubectl's default view); `v1beta1` tables are answered as v1.
    Table,
}

fn media_type(v: &str) -> &str {
    v.split(';').next().unwrap_or_default().trim()
}

/// Decodes a request body by its Content-Type.
pub fn decode(headers: &HeaderMap, body: &[u8]) -> ApiResult<Value> {
    let ct = headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or(JSON);
    match media_type(ct) {
        "" | JSON | "*/*" => decode_json(body),
        YAML | "application/x-yaml" | "text/yaml" => decode_yaml(body),
        PROTOBUF => crate::protobuf::decode(body),
        other => Err(ApiError::unsupported_media_type(other)),
    }
}

pub fn decode_json(body: &[u8]) -> ApiResult<Value> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding JSON: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request("the request body must be a JSON object"));
    }
    Ok(v)
}

pub fn decode_yaml(body: &[u8]) -> ApiResult<Value> {
    let v: Value = serde_yaml::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request("the request body must be a YAML mapping"));
    }
    Ok(v)
}

/// Picks the response format from Accept, in the client's order of preference.
pub fn negotiate(headers: &HeaderMap) -> ApiResult<Output> {
    negotiate_with(headers, true)
}

/// [`negotiate`] for an endpoint that has no Table form (upstream: no `TableConvertor`,
/// as the review kinds): an `as=Table` offer is passed over like any other unsupported
/// one, so the client's next offer is used, or the answer is 406.
pub fn negotiate_untabled(headers: &HeaderMap) -> ApiResult<Output> {
    negotiate_with(headers, false)
}

fn negotiate_with(headers: &HeaderMap, tables: bool) -> ApiResult<Output> {
    let accept = headers.get(http::header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or(JSON);
    for part in accept.split(',') {
        let part = part.trim();
        let mt = media_type(part);
        let params: Vec<&str> = part.split(';').skip(1).map(str::trim).collect();
        let as_table = params.contains(&"as=Table");
        if as_table && !tables {
            continue;
        }
        match mt {
            JSON if as_table => return Ok(Output::Table),
            JSON | "application/*" | "*/*" | "" => {
                if params.iter().any(|p| p.starts_with("as=")) {
                    continue; // some other conversion (PartialObjectMetadata...) we do not do
                }
                return Ok(Output::Json);
            }
            YAML => return Ok(Output::Yaml),
            PROTOBUF if as_table => return Ok(Output::Table),
            PROTOBUF => {
                if params.iter().any(|p| p.starts_with("as=")) {
                    continue;
                }
                return Ok(Output::Protobuf);
            }
            _ => {}
        }
    }
    Err(ApiError::not_acceptable(
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf",
    ))
}

/// Encodes a response body; returns its Content-Type too.
pub fn encode(v: &Value, output: Output) -> (&'static str, Bytes) {
    match output {
        Output::Yaml => match serde_yaml::to_string(v) {
            Ok(s) => (YAML, Bytes::from(s)),
            Err(_) => (JSON, Bytes::from(crate::serializer::to_vec(v))),
        },
        Output::Protobuf => match crate::protobuf::encode(v) {
            Some(b) => (PROTOBUF, Bytes::from(b)),
            None => (JSON, Bytes::from(crate::serializer::to_vec(v))),
        },
        Output::Json | Output::Table => (JSON, Bytes::from(crate::serializer::to_vec(v))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> Output {
        let mut h = HeaderMap::new();
        h.insert(http::header::ACCEPT, v.parse().unwrap());
        negotiate(&h).unwrap()
    }

    #[test]
    fn negotiation_follows_kubectl_headers() {
        assert_eq!(
            accept(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
            ),
            Output::Table
        );
        assert_eq!(accept("application/json"), Output::Json);
        assert_eq!(accept("application/yaml"), Output::Yaml);
        assert_eq!(accept("*/*"), Output::Json);
        assert_eq!(
            accept("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"),
            Output::Json
        );
        // Without a Table form: the next offer, else 406 (conformance: "should return a 406
        // for a backend which does not implement metadata").
        let untabled = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(http::header::ACCEPT, v.parse().unwrap());
            negotiate_untabled(&h)
        };
        assert_eq!(
            untabled("application/json;as=Table;v=v1;g=meta.k8s.io,application/json").unwrap(),
            Output::Json
        );
        assert_eq!(untabled("application/json;as=Table;v=v1;g=meta.k8s.io").unwrap_err().code, 406);
    }
}
