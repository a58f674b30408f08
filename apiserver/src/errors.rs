//! API errors as `metav1.Status`: every failure leaves the server through [`ApiError`], with
//! upstream's `reason`, HTTP code and message wording, so kubectl and client libraries
//! recognize them (`kubectl` prints the message; clients branch on reason and code).

use serde_json::{Value, json};

/// One field-level problem, as upstream's `field.Error`.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    pub kind: FieldErrorKind,
    /// Path like `spec.containers[0].image`.
    pub field: String,
    /// The offending value, printed in the message when there is one.
    pub value: Option<String>,
    pub detail: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldErrorKind {
    Required,
    Invalid,
    NotSupported,
    Duplicate,
    Forbidden,
    TooLong,
    TooMany,
    TypeInvalid,
    NotFound,
}

impl FieldErrorKind {
    fn reason(self) -> &'static str {
        match self {
            Self::Required => "FieldValueRequired",
            Self::Invalid => "FieldValueInvalid",
            Self::NotSupported => "FieldValueNotSupported",
            Self::Duplicate => "FieldValueDuplicate",
            Self::Forbidden => "FieldValueForbidden",
            Self::TooLong => "FieldValueTooLong",
            Self::TooMany => "FieldValueTooMany",
            Self::TypeInvalid => "FieldValueTypeInvalid",
            Self::NotFound => "FieldValueNotFound",
        }
    }

    fn words(self) -> &'static str {
        match self {
            Self::Required => "Required value",
            Self::Invalid => "Invalid value",
            Self::NotSupported => "Unsupported value",
            Self::Duplicate => "Duplicate value",
            Self::Forbidden => "Forbidden",
            Self::TooLong => "Too long",
            Self::TooMany => "Too many",
            Self::TypeInvalid => "Invalid value",
            Self::NotFound => "Not found",
        }
    }
}

impl FieldError {
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self { kind: FieldErrorKind::Required, field: field.into(), value: None, detail: detail.into() }
    }

    pub fn invalid(
        field: impl Into<String>,
        value: impl std::fmt::Display,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            kind: FieldErrorKind::Invalid,
            field: field.into(),
            value: Some(value.to_string()),
            detail: detail.into(),
        }
    }

    pub fn not_supported(
        field: impl Into<String>,
        value: impl std::fmt::Display,
        supported: &[&str],
    ) -> Self {
        let quoted: Vec<String> = supported.iter().map(|s| format!("\"{s}\"")).collect();
        Self {
            kind: FieldErrorKind::NotSupported,
            field: field.into(),
            value: Some(value.to_string()),
            detail: format!("supported values: {}", quoted.join(", ")),
        }
    }

    pub fn duplicate(field: impl Into<String>, value: impl std::fmt::Display) -> Self {
        Self {
            kind: FieldErrorKind::Duplicate,
            field: field.into(),
            value: Some(value.to_string()),
            detail: String::new(),
        }
    }

    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self { kind: FieldErrorKind::Forbidden, field: field.into(), value: None, detail: detail.into() }
    }

    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        Self {
            kind: FieldErrorKind::TooLong,
            field: field.into(),
            value: None,
            detail: format!("must have at most {max} bytes"),
        }
    }

    pub fn not_found(field: impl Into<String>, value: impl std::fmt::Display) -> Self {
        Self {
            kind: FieldErrorKind::NotFound,
            field: field.into(),
            value: Some(value.to_string()),
            detail: String::new(),
        }
    }

    /// The cause message, as upstream words it (without the field path).
    fn cause_message(&self) -> String {
        let mut s = self.kind.words().to_string();
        if let Some(v) = &self.value
            && self.kind != FieldErrorKind::Forbidden
        {
            s.push_str(&format!(": {}", quote_value(v)));
        }
        if !self.detail.is_empty() {
            s.push_str(&format!(": {}", self.detail));
        }
        s
    }

    /// `field: message`, as it appears in an Invalid error's text.
    pub fn to_text(&self) -> String {
        format!("{}: {}", self.field, self.cause_message())
    }
}

/// Upstream quotes string values and prints numbers and booleans bare.
fn quote_value(v: &str) -> String {
    if v.parse::<f64>().is_ok() || v == "true" || v == "false" || v.starts_with('{') || v.starts_with('[') {
        v.to_string()
    } else {
        format!("\"{v}\"")
    }
}

/// An error response: a `metav1.Status` with failure details.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
    /// Seconds a client should wait before retrying (429 and 503).
    pub retry_after: Option<u64>,
    /// `metadata.continue` of the Status: for an expired continue token, one that goes on
    /// from the same place at the current revision (an inconsistent list), as upstream.
    pub continue_token: Option<String>,
}

/// Group and resource of an object, for error messages (`deployments.apps "x" ...`).
pub fn qualified(resource: &str, group: &str) -> String {
    if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") }
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self { code, reason, message: message.into(), details: None, retry_after: None, continue_token: None }
    }

    fn with_details(mut self, name: &str, group: &str, kind: &str) -> Self {
        let mut d = json!({ "name": name, "kind": kind });
        if !group.is_empty() {
            d["group"] = json!(group);
        }
        self.details = Some(d);
        self
    }

    pub fn not_found(resource: &str, group: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{} \"{name}\" not found", qualified(resource, group)))
            .with_details(name, group, resource)
    }

    pub fn already_exists(resource: &str, group: &str, name: &str) -> Self {
        Self::new(409, "AlreadyExists", format!("{} \"{name}\" already exists", qualified(resource, group)))
            .with_details(name, group, resource)
    }

    pub fn conflict(resource: &str, group: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} \"{name}\": {why}", qualified(resource, group)),
        )
        .with_details(name, group, resource)
    }

    /// The optimistic-concurrency conflict every stale update gets.
    pub fn stale(resource: &str, group: &str, name: &str) -> Self {
        Self::conflict(
            resource,
            group,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn invalid(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> Self {
        let texts: Vec<String> = errors.iter().map(FieldError::to_text).collect();
        let summary = if texts.len() == 1 { texts[0].clone() } else { format!("[{}]", texts.join(", ")) };
        let qualified_kind = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
        let mut e = Self::new(422, "Invalid", format!("{qualified_kind} \"{name}\" is invalid: {summary}"))
            .with_details(name, group, kind);
        let causes: Vec<Value> = errors
            .iter()
            .map(|f| json!({ "reason": f.kind.reason(), "message": f.cause_message(), "field": f.field }))
            .collect();
        if let Some(d) = e.details.as_mut() {
            d["causes"] = Value::Array(causes);
        }
        e
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(413, "RequestEntityTooLarge", message)
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf; got {content_type}"
            ),
        )
    }

    pub fn too_many_requests(retry_after: u64) -> Self {
        let mut e = Self::new(429, "TooManyRequests", "Too many requests, please try again later.");
        e.details = Some(json!({ "retryAfterSeconds": retry_after }));
        e.retry_after = Some(retry_after);
        e
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", format!("Internal error occurred: {}", message.into()))
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// The page a path that does not exist gets.
    pub fn no_route(path: &str) -> Self {
        Self::new(404, "NotFound", format!("the server could not find the requested resource (path {path})"))
            .with_empty_details()
    }

    fn with_empty_details(mut self) -> Self {
        self.details = Some(json!({}));
        self
    }

    pub fn is_not_found(&self) -> bool {
        self.code == 404
    }

    pub fn is_conflict(&self) -> bool {
        self.reason == "Conflict"
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        if let Some(c) = &self.continue_token {
            s["metadata"]["continue"] = json!(c);
        }
        s
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

pub type ApiResult<T> = Result<T, ApiError>;

/// A success Status (what some deletes return).
pub fn success_status(name: &str, group: &str, kind: &str, uid: &str) -> Value {
    let mut details = json!({ "name": name, "kind": kind, "uid": uid });
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_match_upstream_wording() {
        assert_eq!(ApiError::not_found("pods", "", "x").message, "pods \"x\" not found");
        assert_eq!(
            ApiError::not_found("deployments", "apps", "x").message,
            "deployments.apps \"x\" not found"
        );
        let e = ApiError::invalid(
            "Pod",
            "",
            "p",
            &[
                FieldError::required("spec.containers", ""),
                FieldError::invalid("metadata.name", "A_B", "a lowercase RFC 1123 subdomain"),
            ],
        );
        assert_eq!(
            e.message,
            "Pod \"p\" is invalid: [spec.containers: Required value, metadata.name: Invalid value: \"A_B\": a lowercase RFC 1123 subdomain]"
        );
        let st = e.to_status();
        assert_eq!(st["code"], 422);
        assert_eq!(st["details"]["causes"][0]["reason"], "FieldValueRequired");
        assert_eq!(st["details"]["causes"][1]["field"], "metadata.name");
        let one = ApiError::invalid(
            "Deployment",
            "apps",
            "d",
            &[FieldError::invalid("spec.replicas", -1, "must be greater than or equal to 0")],
        );
        assert_eq!(
            one.message,
            "Deployment.apps \"d\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0"
        );
    }
}
