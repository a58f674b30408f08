//! The TokenRequest API: `POST .../serviceaccounts/<name>/token` (upstream's
//! `pkg/registry/core/serviceaccount/storage/token.go`). The request names audiences, a
//! lifetime and optionally an object (Pod, Secret or Node) the token dies with; the answer
//! is the same TokenRequest with `status.token` and `status.expirationTimestamp`.
//!
//! Served only when a signing key and issuer are configured; otherwise the subresource
//! does not exist, as upstream does not register it.

use serde_json::{Value, json};

use super::claims::{Binding, ObjectRef, TokenClaims};
use super::{EXPIRATION_EXTENSION_SECONDS, Issuer, WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS};
use crate::errors::{ApiError, ApiResult, FieldError};
use crate::registry::Registry;

const KIND: &str = "TokenRequest";
const GROUP: &str = "authentication.k8s.io";
const API_VERSION: &str = "authentication.k8s.io/v1";

/// `spec.expirationSeconds` when the request leaves it out (upstream's defaulting).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 60 * 60;
const MIN_EXPIRATION_SECONDS: i64 = 10 * 60;
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;

/// `spec.boundObjectRef`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BoundObjectRef {
    pub kind: String,
    pub api_version: String,
    pub name: String,
    pub uid: String,
}

impl BoundObjectRef {
    /// The group of `apiVersion` (empty for `v1`).
    fn group(&self) -> &str {
        self.api_version.rsplit_once('/').map_or("", |(g, _)| g)
    }

    /// As Go prints a `GroupVersionKind`: `apps/v1, Kind=Deployment`, `/v1, Kind=Pod`.
    fn gvk(&self) -> String {
        let version = self.api_version.rsplit_once('/').map_or(self.api_version.as_str(), |(_, v)| v);
        format!("{}/{version}, Kind={}", self.group(), self.kind)
    }
}

/// A decoded, defaulted TokenRequest.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenRequest {
    /// `metadata` as sent (name and namespace are filled in).
    pub metadata: Value,
    pub audiences: Vec<String>,
    pub expiration_seconds: i64,
    pub bound: Option<BoundObjectRef>,
}

fn string_at(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_default().to_string()
}

impl TokenRequest {
    /// Decodes the body of a request for service account `ns/name`: the body may not
    /// name another account, and a missing lifetime is an hour.
    pub fn decode(body: &Value, ns: &str, name: &str) -> ApiResult<Self> {
        if let Some(kind) = body["kind"].as_str().filter(|k| !k.is_empty() && *k != KIND) {
            return Err(ApiError::bad_request(format!("expected a TokenRequest, got {kind}")));
        }
        let metadata = if body["metadata"].is_object() { body["metadata"].clone() } else { json!({}) };
        let invalid = |field: &str, value: &str, detail: &str| {
            ApiError::invalid(KIND, GROUP, name, &[FieldError::invalid(field, value, detail)])
        };
        if let Some(n) = metadata["name"].as_str().filter(|n| !n.is_empty() && *n != name) {
            return Err(invalid("metadata.name", n, "must match the service account name if specified"));
        }
        if let Some(n) = metadata["namespace"].as_str().filter(|n| !n.is_empty() && *n != ns) {
            return Err(invalid(
                "metadata.namespace",
                n,
                "must match the service account namespace if specified",
            ));
        }
        let spec = &body["spec"];
        let audiences = spec["audiences"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        let expiration_seconds = match &spec["expirationSeconds"] {
            Value::Null => DEFAULT_EXPIRATION_SECONDS,
            v => v
                .as_i64()
                .ok_or_else(|| ApiError::bad_request("spec.expirationSeconds must be an integer"))?,
        };
        let bound = spec["boundObjectRef"].is_object().then(|| {
            let r = &spec["boundObjectRef"];
            BoundObjectRef {
                kind: string_at(r, "kind"),
                api_version: string_at(r, "apiVersion"),
                name: string_at(r, "name"),
                uid: string_at(r, "uid"),
            }
        });
        Ok(TokenRequest { metadata, audiences, expiration_seconds, bound })
    }

    /// Upstream's `ValidateTokenRequest` (after defaulting): 10 minutes to 2^32 seconds.
    pub fn validate(&self) -> ApiResult<()> {
        let mut errs = Vec::new();
        let field = "spec.expirationSeconds";
        if self.expiration_seconds < MIN_EXPIRATION_SECONDS {
            errs.push(FieldError::invalid(
                field,
                self.expiration_seconds,
                "may not specify a duration less than 10 minutes",
            ));
        }
        if self.expiration_seconds > MAX_EXPIRATION_SECONDS {
            errs.push(FieldError::invalid(
                field,
                self.expiration_seconds,
                "may not specify a duration larger than 2^32 seconds",
            ));
        }
        if errs.is_empty() { Ok(()) } else { Err(ApiError::invalid(KIND, GROUP, "", &errs)) }
    }
}

/// What a token's lifetime becomes (see [`lifetime`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lifetime {
    /// `spec.expirationSeconds` after the cap: what the response reports.
    pub requested: i64,
    /// Seconds until the token's `exp`.
    pub token: i64,
    /// Seconds until `warnafter`; 0 for none.
    pub warn_after: i64,
    /// The warning for the client when the cap shortened the request.
    pub warning: Option<String>,
}

/// Caps the request by `--service-account-max-token-expiration` (with a warning), then,
/// for the admission plugin's pod-bound request of exactly 3607 s for the API's
/// audiences, extends the token to a year with `warnafter` at 3607 s, as upstream.
pub fn lifetime(issuer: &Issuer, req: &TokenRequest, bound_to_pod: bool) -> Lifetime {
    let mut requested = req.expiration_seconds;
    let mut warning = None;
    if issuer.max_expiration_seconds > 0 && requested > issuer.max_expiration_seconds {
        warning = Some(format!(
            "requested expiration of {requested} seconds shortened to {} seconds",
            issuer.max_expiration_seconds
        ));
        requested = issuer.max_expiration_seconds;
    }
    let for_the_api = req.audiences.iter().all(|a| issuer.api_audiences.contains(a));
    if issuer.extend_expiration
        && bound_to_pod
        && requested == WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS
        && for_the_api
    {
        return Lifetime { requested, token: EXPIRATION_EXTENSION_SECONDS, warn_after: requested, warning };
    }
    Lifetime { requested, token: requested, warn_after: 0, warning }
}

/// Serves one TokenRequest for service account `ns/name`; with `dry_run` everything is
/// checked but no token is signed.
pub async fn create(
    issuer: &Issuer,
    registry: &Registry,
    ns: &str,
    name: &str,
    body: &Value,
    dry_run: bool,
) -> ApiResult<Value> {
    TokenRequest::decode(body, ns, name)?;
    let accounts = registry.core("serviceaccounts");
    // Admission sees the request as a create of `serviceaccounts/token` (NodeRestriction
    // allows a node only tokens bound to its own pods; webhooks may look too).
    let body = crate::admission::run(
        &accounts.res.info,
        crate::admission::Operation::Create,
        Some("token"),
        Some(ns),
        name,
        Some(body.clone()),
        None,
        dry_run,
    )
    .await?
    .unwrap_or_else(|| body.clone());
    let mut req = TokenRequest::decode(&body, ns, name)?;
    let account = accounts.get(Some(ns), name, None).await?;
    if req.audiences.is_empty() {
        req.audiences = issuer.api_audiences.clone();
    }
    req.metadata["name"] = json!(name);
    req.metadata["namespace"] = json!(ns);
    let now = crate::table::unix_now();
    req.metadata["creationTimestamp"] = json!(crate::registry::store::rfc3339(now));
    req.validate()?;

    let binding = match &req.bound {
        None => Binding::None,
        Some(r) => bind(registry, ns, name, r).await?,
    };
    let life = lifetime(issuer, &req, matches!(binding, Binding::Pod { .. }));
    if let (Some(w), Some(scope)) = (&life.warning, crate::context::current()) {
        scope.warn(w.clone());
    }
    req.expiration_seconds = life.requested;

    let token = if dry_run {
        String::new()
    } else {
        let jti = crate::registry::store::new_uid();
        let claims = TokenClaims {
            issuer: &issuer.issuer,
            namespace: ns,
            service_account: ObjectRef::of(&account),
            binding,
            audiences: &req.audiences,
            expiration_seconds: life.token,
            warn_after_seconds: life.warn_after,
            jti: &jti,
        };
        issuer.sign(&claims, now).map_err(|e| ApiError::internal(format!("failed to generate token: {e}")))?
    };

    let mut spec = json!({"audiences": req.audiences, "expirationSeconds": req.expiration_seconds});
    if let Some(r) = &req.bound {
        let mut b = json!({"kind": r.kind, "apiVersion": r.api_version, "name": r.name});
        if !r.uid.is_empty() {
            b["uid"] = json!(r.uid);
        }
        spec["boundObjectRef"] = b;
    }
    Ok(json!({
        "kind": KIND,
        "apiVersion": API_VERSION,
        "metadata": req.metadata,
        "spec": spec,
        "status": {
            "token": token,
            "expirationTimestamp": crate::registry::store::rfc3339(now + req.expiration_seconds),
        },
    }))
}

/// Looks up the object a token is to be bound to, as upstream: it must exist, a pod must
/// run as this service account, and a given uid must match.
async fn bind(registry: &Registry, ns: &str, account: &str, r: &BoundObjectRef) -> ApiResult<Binding> {
    let (binding, uid) = match (r.group(), r.kind.as_str()) {
        ("", "Pod") => {
            let pod = registry.core("pods").get(Some(ns), &r.name, None).await?;
            if pod["spec"]["serviceAccountName"].as_str().unwrap_or_default() != account {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token for serviceaccount \"{account}\" to pod running with different serviceaccount name."
                )));
            }
            let node = match pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
                None => None,
                Some(node_name) => {
                    let nodes = registry.core("nodes");
                    // From the watch cache first, then a live read, as upstream.
                    let found = match nodes.get(None, node_name, Some(0)).await {
                        Ok(n) => Ok(n),
                        Err(_) => nodes.get(None, node_name, None).await,
                    };
                    match found {
                        Ok(n) => Some(ObjectRef::of(&n)),
                        // The node is gone: keep its name so the token still says where
                        // the pod was placed.
                        Err(e) if e.is_not_found() => {
                            Some(ObjectRef { name: node_name.to_string(), uid: String::new() })
                        }
                        Err(e) => return Err(ApiError::internal(e.message)),
                    }
                }
            };
            let pod_ref = ObjectRef::of(&pod);
            let uid = pod_ref.uid.clone();
            (Binding::Pod { pod: pod_ref, node }, uid)
        }
        ("", "Node") => {
            let node = ObjectRef::of(&registry.core("nodes").get(None, &r.name, None).await?);
            let uid = node.uid.clone();
            (Binding::Node(node), uid)
        }
        ("", "Secret") => {
            let secret = ObjectRef::of(&registry.core("secrets").get(Some(ns), &r.name, None).await?);
            let uid = secret.uid.clone();
            (Binding::Secret(secret), uid)
        }
        _ => return Err(ApiError::bad_request(format!("cannot bind token to object of type {}", r.gvk()))),
    };
    if !r.uid.is_empty() && uid != r.uid {
        return Err(ApiError::conflict(
            &r.kind,
            r.group(),
            &r.name,
            &format!(
                "the UID in the bound object reference ({}) does not match the UID in record. The object might have been deleted and then recreated",
                r.uid
            ),
        ));
    }
    Ok(binding)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::serviceaccount::keys::SigningKey;

    fn issuer(max: i64, extend: bool) -> Issuer {
        let key =
            SigningKey::from_pem(include_bytes!("../../../../component-base/testdata/sa-rsa.key")).unwrap();
        Issuer::new(
            "https://kubernetes.default.svc".into(),
            key,
            vec!["https://kubernetes.default.svc".into()],
            max,
            extend,
        )
    }

    #[test]
    fn decoding_defaults_and_validates() {
        // What `kubectl create token default` sends.
        let body = json!({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": null},
            "spec": {"audiences": null, "expirationSeconds": null, "boundObjectRef": null},
            "status": {"token": "", "expirationTimestamp": null}});
        let req = TokenRequest::decode(&body, "default", "default").unwrap();
        assert_eq!((req.expiration_seconds, req.audiences.len(), req.bound.clone()), (3600, 0, None));
        assert!(req.validate().is_ok());

        let short = TokenRequest::decode(&json!({"spec": {"expirationSeconds": 60}}), "ns", "sa").unwrap();
        let err = short.validate().unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(
            err.message,
            "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"
        );
        let long =
            TokenRequest::decode(&json!({"spec": {"expirationSeconds": (1i64 << 32) + 1}}), "ns", "sa")
                .unwrap();
        assert!(long.validate().unwrap_err().message.contains("larger than 2^32 seconds"));

        let other = TokenRequest::decode(&json!({"metadata": {"name": "x"}}), "ns", "sa").unwrap_err();
        assert_eq!(other.code, 422);
        assert!(
            other.message.contains("must match the service account name if specified"),
            "{}",
            other.message
        );

        let bound = json!({"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p"}}});
        let req = TokenRequest::decode(&bound, "ns", "sa").unwrap();
        let r = req.bound.unwrap();
        assert_eq!(
            (r.kind.as_str(), r.name.as_str(), r.group(), r.gvk()),
            ("Pod", "p", "", "/v1, Kind=Pod".into())
        );
        let apps =
            BoundObjectRef { kind: "Deployment".into(), api_version: "apps/v1".into(), ..Default::default() };
        assert_eq!((apps.group(), apps.gvk()), ("apps", "apps/v1, Kind=Deployment".to_string()));
    }

    #[test]
    fn lifetimes_are_capped_and_extended_as_upstream() {
        let req = |secs: i64, auds: &[&str]| TokenRequest {
            metadata: json!({}),
            audiences: auds.iter().map(|s| s.to_string()).collect(),
            expiration_seconds: secs,
            bound: None,
        };
        let api = "https://kubernetes.default.svc";
        let life = |max: i64, extend: bool, secs: i64, auds: &[&str], pod: bool| {
            let l = lifetime(&issuer(max, extend), &req(secs, auds), pod);
            (l.requested, l.token, l.warn_after, l.warning)
        };
        // No cap, no extension.
        assert_eq!(life(0, true, 7200, &[api], false), (7200, 7200, 0, None));
        // The cap shortens with a warning.
        let (r, l, w, warning) = life(3600, true, 7200, &[api], false);
        assert_eq!((r, l, w), (3600, 3600, 0));
        assert_eq!(warning.unwrap(), "requested expiration of 7200 seconds shortened to 3600 seconds");
        // The admission plugin's pod-bound 3607 s request gets a year, warning after 3607 s.
        assert_eq!(life(0, true, 3607, &[api], true), (3607, EXPIRATION_EXTENSION_SECONDS, 3607, None));
        // ... but not when unbound, for other audiences, or with the extension off.
        assert_eq!(life(0, true, 3607, &[api], false).1, 3607);
        assert_eq!(life(0, true, 3607, &["vault"], true).1, 3607);
        assert_eq!(life(0, false, 3607, &[api], true).1, 3607);
        // A cap below 3607 s leaves nothing to extend.
        assert_eq!(life(3600, true, 3607, &[api], true).1, 3600);
    }
}
