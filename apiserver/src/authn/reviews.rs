//! The create-only authentication.k8s.io resources (upstream's
//! `pkg/registry/authentication`): TokenReview asks whether a bearer token is valid
//! and whose it is (webhook token authenticators, the kubelet's
//! `--authentication-token-webhook`); SelfSubjectReview answers who the requester is
//! (`kubectl auth whoami`).

use serde_json::{Value, json};

use super::{Authenticator, User};
use crate::errors::{ApiError, ApiResult};

const API_VERSION: &str = "authentication.k8s.io/v1";

/// A user as the API writes `UserInfo` (empty fields omitted).
pub fn user_info(user: &User) -> Value {
    let mut info = serde_json::Map::new();
    if !user.name.is_empty() {
        info.insert("username".into(), json!(user.name));
    }
    if !user.uid.is_empty() {
        info.insert("uid".into(), json!(user.uid));
    }
    if !user.groups.is_empty() {
        info.insert("groups".into(), json!(user.groups));
    }
    if !user.extra.is_empty() {
        info.insert("extra".into(), json!(user.extra));
    }
    Value::Object(info)
}

/// Answers a TokenReview: the request echoed with `status` filled in. An invalid token is
/// not an error of the review (status.authenticated false, status.error why).
pub fn token_review(authn: &Authenticator, review: &Value) -> ApiResult<Value> {
    if let Some(kind) = review["kind"].as_str().filter(|k| !k.is_empty() && *k != "TokenReview") {
        return Err(ApiError::bad_request(format!("not a TokenReview: {kind}")));
    }
    let token = review["spec"]["token"].as_str().unwrap_or_default();
    if token.is_empty() {
        return Err(ApiError::bad_request("token is required for TokenReview in authentication"));
    }
    let requested: Vec<String> = review["spec"]["audiences"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    let audiences = if requested.is_empty() { authn.api_audiences().to_vec() } else { requested };

    let mut status = serde_json::Map::new();
    match authn.authenticate_token(token, &audiences) {
        Ok(a) => {
            if !audiences.is_empty() && !a.audiences.iter().any(|x| audiences.contains(x)) {
                tracing::error!(want = ?audiences, got = ?a.audiences, "error validating audience");
                return Err(ApiError::internal("error validating audiences"));
            }
            status.insert("authenticated".into(), json!(true));
            status.insert("user".into(), user_info(&a.user));
            if !a.audiences.is_empty() {
                status.insert("audiences".into(), json!(a.audiences));
            }
        }
        Err(e) => {
            status.insert("user".into(), json!({}));
            status.insert("error".into(), json!(e));
        }
    }
    let mut out = review.clone();
    out["kind"] = json!("TokenReview");
    out["apiVersion"] = json!(API_VERSION);
    if !out["metadata"].is_object() {
        out["metadata"] = json!({"creationTimestamp": null});
    }
    out["status"] = Value::Object(status);
    Ok(out)
}

/// Answers a SelfSubjectReview for `user`, the requester.
pub fn self_subject_review(user: &User, now: i64) -> Value {
    json!({
        "kind": "SelfSubjectReview",
        "apiVersion": API_VERSION,
        "metadata": {"creationTimestamp": crate::registry::store::rfc3339(now)},
        "status": {"userInfo": user_info(user)},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_info_omits_empty_fields() {
        let mut user =
            User { name: "alice".into(), groups: vec!["system:authenticated".into()], ..Default::default() };
        assert_eq!(user_info(&user), json!({"username": "alice", "groups": ["system:authenticated"]}));
        user.extra.insert("k".into(), vec!["v".into()]);
        user.uid = "1".into();
        assert_eq!(user_info(&user)["extra"], json!({"k": ["v"]}));
        let ssr = self_subject_review(&user, 0);
        assert_eq!(ssr["status"]["userInfo"]["username"], "alice");
        assert_eq!(ssr["metadata"]["creationTimestamp"], "1970-01-01T00:00:00Z");
    }
}
