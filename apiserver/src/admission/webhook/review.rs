//! The AdmissionReview exchanged with a webhook (upstream's `webhook/request` and
//! `webhook/errors`): the request built from the admission attributes, the checks a
//! response must pass, and the error a rejection turns into.

use base64::Engine;
use serde::Deserialize;
use serde_json::{Value, json};

use super::matching::request_namespace;
use crate::admission::{Attributes, Operation};
use crate::errors::ApiError;

/// The AdmissionReview versions this server speaks, in its order of preference when a
/// webhook accepts several (it takes the webhook's own order, as upstream).
const V1: &str = "v1";
const V1BETA1: &str = "v1beta1";

/// The first AdmissionReview version in the webhook's list that this server can send.
pub fn pick_version(accepted: &[String]) -> Option<&'static str> {
    accepted.iter().find_map(|v| match v.as_str() {
        V1 => Some(V1),
        V1BETA1 => Some(V1BETA1),
        _ => None,
    })
}

/// The options object of the request's operation, as upstream passes
/// `GetOperationOptions()` (the server does not keep `fieldManager` or the delete's
/// propagation here; only `dryRun` is carried).
fn options(op: Operation, dry_run: bool) -> Value {
    let kind = match op {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
        Operation::Delete => "DeleteOptions",
        Operation::Connect => return Value::Null,
    };
    let mut o = json!({ "kind": kind, "apiVersion": "meta.k8s.io/v1" });
    if dry_run {
        o["dryRun"] = json!(["All"]);
    }
    o
}

/// The AdmissionReview sent to a webhook (upstream's `CreateV1AdmissionReview`; v1beta1
/// has the same shape under its own apiVersion).
pub fn request(version: &str, uid: &str, attrs: &Attributes<'_>) -> Value {
    let r = attrs.resource;
    // A subresource with a kind of its own (pods/binding → Binding, serviceaccounts/token
    // → TokenRequest) is reported with that kind, as upstream.
    let own_kind = attrs
        .object
        .as_ref()
        .filter(|o| attrs.subresource.is_some() && o["kind"].as_str().is_some_and(|k| k != r.kind));
    let kind = match own_kind {
        Some(o) => {
            let api_version = o["apiVersion"].as_str().unwrap_or_default();
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            json!({ "group": group, "version": version, "kind": o["kind"] })
        }
        None => json!({ "group": r.group, "version": r.version, "kind": r.kind }),
    };
    let resource = json!({ "group": r.group, "version": r.version, "resource": r.plural });
    let mut req = json!({
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "operation": attrs.operation.as_str(),
        "userInfo": {},
        "object": attrs.object.clone().unwrap_or(Value::Null),
        "oldObject": attrs.old_object.cloned().unwrap_or(Value::Null),
        "dryRun": attrs.dry_run,
        "options": options(attrs.operation, attrs.dry_run),
    });
    // Empty strings are omitted, as Go's `omitempty` does.
    let mut put = |k: &str, v: &str| {
        if !v.is_empty() {
            req[k] = json!(v);
        }
    };
    put("subResource", attrs.subresource.unwrap_or_default());
    put("requestSubResource", attrs.subresource.unwrap_or_default());
    put("name", attrs.name);
    put("namespace", request_namespace(attrs).unwrap_or_default());
    let u = attrs.user;
    let info = &mut req["userInfo"];
    if !u.name.is_empty() {
        info["username"] = json!(u.name);
    }
    if !u.uid.is_empty() {
        info["uid"] = json!(u.uid);
    }
    if !u.groups.is_empty() {
        info["groups"] = json!(u.groups);
    }
    if !u.extra.is_empty() {
        info["extra"] = json!(u.extra);
    }
    json!({ "apiVersion": format!("admission.k8s.io/{version}"), "kind": "AdmissionReview", "request": req })
}

/// What a webhook answered, once checked.
#[derive(Debug, Default, PartialEq)]
pub struct Outcome {
    pub allowed: bool,
    /// The decoded `patch` bytes (a JSON document, not yet parsed).
    pub patch: Vec<u8>,
    /// `JSONPatch`, the only type upstream applies; others are refused by the caller.
    pub patch_type: String,
    /// `response.status`, a metav1.Status, for rejections.
    pub status: Option<Value>,
    pub warnings: Vec<String>,
}

/// Why a response could not be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ResponseError {
    /// The body is not an AdmissionReview (upstream: the client's decode error).
    #[error("{0}")]
    Decode(String),
    /// An AdmissionReview that breaks the protocol (upstream's `VerifyAdmissionResponse`).
    #[error("{0}")]
    Invalid(String),
}

#[derive(Deserialize)]
struct ReviewIn {
    #[serde(default, rename = "apiVersion")]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    response: Option<ResponseIn>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResponseIn {
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    allowed: Option<bool>,
    #[serde(default)]
    status: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    patch: Option<String>,
    #[serde(default)]
    patch_type: Option<String>,
    #[serde(default)]
    warnings: Option<Vec<String>>,
}

/// `group/version, Kind=kind`, as Go prints a GroupVersionKind.
fn gvk_string(api_version: &str, kind: &str) -> String {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    format!("{group}/{version}, Kind={kind}")
}

/// Checks a webhook's response body against the request `uid` it answers.
pub fn verify(version: &str, uid: &str, mutating: bool, body: &[u8]) -> Result<Outcome, ResponseError> {
    let review: ReviewIn = serde_json::from_slice(body).map_err(|e| ResponseError::Decode(e.to_string()))?;
    let Some(resp) = review.response else {
        return Err(ResponseError::Invalid("webhook response was absent".into()));
    };
    let patch = match resp.patch.as_deref() {
        None | Some("") => Vec::new(),
        Some(p) => base64::engine::general_purpose::STANDARD
            .decode(p)
            .map_err(|e| ResponseError::Decode(format!("illegal base64 data in response.patch: {e}")))?,
    };
    let invalid = |m: &str| Err(ResponseError::Invalid(m.to_string()));
    let mut out = Outcome {
        allowed: resp.allowed.unwrap_or(false),
        patch: Vec::new(),
        patch_type: String::new(),
        status: resp.status.map(Value::Object),
        warnings: resp.warnings.unwrap_or_default(),
    };
    if version == V1BETA1 {
        // v1beta1 responses were never checked for uid, kind or patchType.
        if mutating && !patch.is_empty() {
            out.patch = patch;
            out.patch_type = "JSONPatch".into();
        }
        return Ok(out);
    }
    let got_uid = resp.uid.unwrap_or_default();
    if got_uid != uid {
        return Err(ResponseError::Invalid(format!("expected response.uid={uid:?}, got {got_uid:?}")));
    }
    let (api_version, kind) = (review.api_version.unwrap_or_default(), review.kind.unwrap_or_default());
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(ResponseError::Invalid(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {}",
            gvk_string(&api_version, &kind)
        )));
    }
    if mutating {
        match (&resp.patch_type, patch.is_empty()) {
            (None, false) => return invalid("webhook returned response.patch but not response.patchType"),
            (Some(_), true) => return invalid("webhook returned response.patchType but not response.patch"),
            (Some(t), false) if t.is_empty() => {
                return Err(ResponseError::Invalid(format!(
                    "webhook returned invalid response.patchType of {t:?}"
                )));
            }
            _ => {}
        }
        out.patch = patch;
        out.patch_type = resp.patch_type.unwrap_or_default();
    } else {
        if !patch.is_empty() {
            return invalid("validating webhook may not return response.patch");
        }
        if resp.patch_type.is_some() {
            return invalid("validating webhook may not return response.patchType");
        }
    }
    Ok(out)
}

/// The reasons of metav1.Status this server can report (its errors carry static reasons);
/// a webhook's other reasons are dropped from the returned Status.
fn known_reason(reason: &str) -> &'static str {
    const REASONS: &[&str] = &[
        "Unauthorized",
        "Forbidden",
        "NotFound",
        "AlreadyExists",
        "Conflict",
        "Gone",
        "Invalid",
        "ServerTimeout",
        "StoreReadError",
        "Timeout",
        "TooManyRequests",
        "BadRequest",
        "MethodNotAllowed",
        "NotAcceptable",
        "RequestEntityTooLarge",
        "UnsupportedMediaType",
        "InternalError",
        "Expired",
        "ServiceUnavailable",
    ];
    REASONS.iter().find(|r| **r == reason).copied().unwrap_or("")
}

/// The error a rejection becomes (upstream's `ToStatusErr`): the webhook's status, with
/// a code of at least 400 and the message prefixed with who denied the request.
pub fn rejection(webhook: &str, status: Option<&Value>) -> ApiError {
    let empty = json!({});
    let status = status.unwrap_or(&empty);
    let denied = format!("admission webhook \"{webhook}\" denied the request");
    let message = status["message"].as_str().unwrap_or_default();
    let reason = status["reason"].as_str().unwrap_or_default();
    let message = if !message.is_empty() {
        format!("{denied}: {message}")
    } else if !reason.is_empty() {
        format!("{denied}: {reason}")
    } else {
        format!("{denied} without explanation")
    };
    let code = status["code"].as_i64().unwrap_or(0);
    // Below 400 would not be a rejection; beyond 599 is no HTTP status a client knows.
    let code = if code < 400 { 400 } else { u16::try_from(code).ok().filter(|c| *c <= 599).unwrap_or(500) };
    let mut e = ApiError::new(code, known_reason(reason), message);
    if status["details"].is_object() {
        e.details = Some(status["details"].clone());
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::User;
    use crate::registry::resource::ResourceInfo;

    fn pods() -> ResourceInfo {
        ResourceInfo {
            group: "",
            version: "v1",
            kind: "Pod",
            plural: "pods",
            singular: "pod",
            short_names: &[],
            categories: &[],
            namespaced: true,
            subresources: &["status"],
            etcd_resource: "pods",
            verbs: ResourceInfo::ALL_VERBS,
            storage_version: None,
        }
    }

    #[test]
    fn builds_request() {
        let info = pods();
        let user = User { name: "alice".into(), groups: vec!["devs".into()], ..Default::default() };
        let old = json!({ "metadata": { "name": "p" } });
        let attrs = Attributes {
            operation: Operation::Update,
            resource: &info,
            subresource: Some("status"),
            namespace: Some("ns"),
            name: "p",
            object: Some(json!({ "metadata": { "name": "p", "labels": { "a": "b" } } })),
            old_object: Some(&old),
            user: &user,
            dry_run: true,
        };
        let r = request("v1", "uid-1", &attrs);
        assert_eq!(r["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(r["kind"], "AdmissionReview");
        let q = &r["request"];
        assert_eq!(q["uid"], "uid-1");
        assert_eq!(q["kind"], json!({ "group": "", "version": "v1", "kind": "Pod" }));
        assert_eq!(q["resource"], json!({ "group": "", "version": "v1", "resource": "pods" }));
        assert_eq!(q["subResource"], "status");
        assert_eq!(q["requestSubResource"], "status");
        assert_eq!(q["namespace"], "ns");
        assert_eq!(q["operation"], "UPDATE");
        assert_eq!(q["userInfo"], json!({ "username": "alice", "groups": ["devs"] }));
        assert_eq!(q["oldObject"], old);
        assert_eq!(q["dryRun"], true);
        assert_eq!(
            q["options"],
            json!({ "kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1", "dryRun": ["All"] })
        );
    }

    #[test]
    fn a_subresource_with_its_own_kind_is_reviewed_as_that_kind() {
        let info = pods();
        let user = User::default();
        let binding = json!({ "apiVersion": "v1", "kind": "Binding", "metadata": { "name": "p" } });
        let attrs = Attributes {
            operation: Operation::Create,
            resource: &info,
            subresource: Some("binding"),
            namespace: Some("ns"),
            name: "p",
            object: Some(binding),
            old_object: None,
            user: &user,
            dry_run: false,
        };
        let q = &request("v1", "uid-2", &attrs)["request"];
        assert_eq!(q["kind"], json!({ "group": "", "version": "v1", "kind": "Binding" }));
        assert_eq!(q["resource"], json!({ "group": "", "version": "v1", "resource": "pods" }));
        assert_eq!(q["subResource"], "binding");
    }

    #[test]
    fn namespace_requests_carry_their_own_name() {
        let mut info = pods();
        info.kind = "Namespace";
        info.plural = "namespaces";
        let user = User::default();
        let attrs = Attributes {
            operation: Operation::Delete,
            resource: &info,
            subresource: None,
            namespace: None,
            name: "team-a",
            object: None,
            old_object: None,
            user: &user,
            dry_run: false,
        };
        let r = request("v1beta1", "u", &attrs);
        assert_eq!(r["apiVersion"], "admission.k8s.io/v1beta1");
        assert_eq!(r["request"]["namespace"], "team-a");
        assert_eq!(r["request"]["object"], Value::Null);
        assert!(r["request"].get("subResource").is_none());
        assert_eq!(r["request"]["options"]["kind"], "DeleteOptions");
    }

    fn body(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn verifies_responses() {
        let ok = |resp: Value| {
            body(json!({ "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp }))
        };
        let patch = base64::engine::general_purpose::STANDARD.encode(b"[]");
        let got = verify(
            "v1",
            "u",
            true,
            &ok(
                json!({ "uid": "u", "allowed": true, "patch": patch, "patchType": "JSONPatch", "warnings": ["w"] }),
            ),
        );
        assert_eq!(
            got,
            Ok(Outcome {
                allowed: true,
                patch: b"[]".to_vec(),
                patch_type: "JSONPatch".into(),
                status: None,
                warnings: vec!["w".into()]
            })
        );
        let err = |v: &str, mutating: bool, b: Vec<u8>| verify(v, "u", mutating, &b).unwrap_err().to_string();
        assert_eq!(
            err("v1", true, ok(json!({ "uid": "x", "allowed": true }))),
            "expected response.uid=\"u\", got \"x\""
        );
        assert_eq!(
            err("v1", true, body(json!({ "response": { "uid": "u" } }))),
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got /, Kind="
        );
        assert_eq!(err("v1", true, body(json!({ "apiVersion": "x" }))), "webhook response was absent");
        assert_eq!(
            err("v1", true, ok(json!({ "uid": "u", "patch": patch }))),
            "webhook returned response.patch but not response.patchType"
        );
        assert_eq!(
            err("v1", false, ok(json!({ "uid": "u", "patch": patch, "patchType": "JSONPatch" }))),
            "validating webhook may not return response.patch"
        );
        assert!(err("v1", true, b"not json".to_vec()).contains("expected"));
        assert!(matches!(
            verify("v1", "u", true, &ok(json!({ "uid": "u", "allowed": "yes" }))),
            Err(ResponseError::Decode(_))
        ));
        // v1beta1: no uid or kind checks, and patches need no patchType.
        let beta =
            verify("v1beta1", "u", true, &body(json!({ "response": { "allowed": true, "patch": patch } })))
                .unwrap();
        assert_eq!(beta.patch_type, "JSONPatch");
    }

    #[test]
    fn rejections() {
        let e = rejection(
            "deny.example.com",
            Some(&json!({ "code": 403, "message": "no pods today", "reason": "Forbidden" })),
        );
        assert_eq!((e.code, e.reason), (403, "Forbidden"));
        assert_eq!(e.message, "admission webhook \"deny.example.com\" denied the request: no pods today");
        let e = rejection("deny.example.com", None);
        assert_eq!((e.code, e.reason), (400, ""));
        assert_eq!(
            e.message,
            "admission webhook \"deny.example.com\" denied the request without explanation"
        );
        let e = rejection("d.example.com", Some(&json!({ "code": 200, "reason": "Weird" })));
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "admission webhook \"d.example.com\" denied the request: Weird")
        );
    }
}
