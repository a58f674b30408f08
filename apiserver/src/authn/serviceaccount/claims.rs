//! What a service-account token says and how the server checks it (upstream's
//! `pkg/serviceaccount/claims.go` and `legacy.go`): the claims of bound tokens issued by
//! the TokenRequest API, their validation against the ServiceAccount and the object the
//! token is bound to, and the claims of legacy Secret-based tokens.
//!
//! Objects are read through [`Objects`] (the watch caches); a deleted object's tokens
//! stay valid for [`LEEWAY_SECS`] after its deletionTimestamp, as upstream, so a pod
//! terminating gracefully keeps its identity.

use serde_json::{Value, json};

use super::jwt::{LEEWAY_SECS, Parsed};
use crate::authn::{Objects, User, names};

/// `iss` of the tokens the legacy token controller writes into Secrets.
pub const LEGACY_ISSUER: &str = "kubernetes/serviceaccount";

/// Extra keys of a service account user (upstream's `serviceaccount` package).
pub const POD_NAME_KEY: &str = "authentication.kubernetes.io/pod-name";
pub const POD_UID_KEY: &str = "authentication.kubernetes.io/pod-uid";
pub const NODE_NAME_KEY: &str = "authentication.kubernetes.io/node-name";
pub const NODE_UID_KEY: &str = "authentication.kubernetes.io/node-uid";
pub const CREDENTIAL_ID_KEY: &str = "authentication.kubernetes.io/credential-id";

/// `system:serviceaccount:<ns>:<name>`.
pub fn username(namespace: &str, name: &str) -> String {
    format!("{}{namespace}:{name}", names::SERVICE_ACCOUNT_PREFIX)
}

/// `system:serviceaccounts` and `system:serviceaccounts:<ns>`.
pub fn groups(namespace: &str) -> Vec<String> {
    vec![names::SERVICE_ACCOUNTS_GROUP.to_string(), format!("{}:{namespace}", names::SERVICE_ACCOUNTS_GROUP)]
}

/// A name and uid, as the `kubernetes.io` claim refers to objects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectRef {
    pub name: String,
    pub uid: String,
}

impl ObjectRef {
    pub fn of(obj: &Value) -> Self {
        ObjectRef {
            name: obj["metadata"]["name"].as_str().unwrap_or_default().to_string(),
            uid: obj["metadata"]["uid"].as_str().unwrap_or_default().to_string(),
        }
    }

    fn from_claim(v: &Value) -> Option<Self> {
        v.is_object().then(|| ObjectRef {
            name: v["name"].as_str().unwrap_or_default().to_string(),
            uid: v["uid"].as_str().unwrap_or_default().to_string(),
        })
    }

    /// As go's `omitempty` writes it.
    fn to_claim(&self) -> Value {
        let mut m = serde_json::Map::new();
        if !self.name.is_empty() {
            m.insert("name".into(), json!(self.name));
        }
        if !self.uid.is_empty() {
            m.insert("uid".into(), json!(self.uid));
        }
        Value::Object(m)
    }
}

/// What a token is bound to besides its service account.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Binding {
    #[default]
    None,
    /// A pod, with the node it runs on when it is scheduled (upstream's
    /// ServiceAccountTokenPodNodeInfo); the node's uid is empty if it does not exist.
    Pod {
        pod: ObjectRef,
        node: Option<ObjectRef>,
    },
    Secret(ObjectRef),
    Node(ObjectRef),
}

/// The claims of one bound token (upstream's `Claims`).
#[derive(Clone, Debug)]
pub struct TokenClaims<'a> {
    pub issuer: &'a str,
    pub namespace: &'a str,
    pub service_account: ObjectRef,
    pub binding: Binding,
    pub audiences: &'a [String],
    pub expiration_seconds: i64,
    /// Seconds after issue at which a still-used token is reported stale; 0 for none.
    pub warn_after_seconds: i64,
    pub jti: &'a str,
}

impl TokenClaims<'_> {
    pub fn to_json(&self, now: i64) -> Value {
        let mut k = json!({
            "namespace": self.namespace,
            "serviceaccount": self.service_account.to_claim(),
        });
        match &self.binding {
            Binding::None => {}
            Binding::Pod { pod, node } => {
                k["pod"] = pod.to_claim();
                if let Some(node) = node {
                    k["node"] = node.to_claim();
                }
            }
            Binding::Secret(s) => k["secret"] = s.to_claim(),
            Binding::Node(n) => k["node"] = n.to_claim(),
        }
        if self.warn_after_seconds != 0 {
            k["warnafter"] = json!(now + self.warn_after_seconds);
        }
        json!({
            "iss": self.issuer,
            "sub": username(self.namespace, &self.service_account.name),
            "aud": self.audiences,
            "exp": now + self.expiration_seconds,
            "iat": now,
            "nbf": now,
            "jti": self.jti,
            "kubernetes.io": k,
        })
    }
}

/// Who a valid token identifies (upstream's `ServiceAccountInfo`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceAccountInfo {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub pod_name: String,
    pub pod_uid: String,
    pub node_name: String,
    pub node_uid: String,
    pub credential_id: String,
}

impl ServiceAccountInfo {
    /// The user (upstream's `ServiceAccountInfo.UserInfo`).
    pub fn user(&self) -> User {
        let mut user = User {
            name: username(&self.namespace, &self.name),
            uid: self.uid.clone(),
            groups: groups(&self.namespace),
            ..Default::default()
        };
        let mut put = |k: &str, v: &str| {
            user.extra.insert(k.to_string(), vec![v.to_string()]);
        };
        if !self.pod_name.is_empty() && !self.pod_uid.is_empty() {
            put(POD_NAME_KEY, &self.pod_name);
            put(POD_UID_KEY, &self.pod_uid);
        }
        if !self.credential_id.is_empty() {
            put(CREDENTIAL_ID_KEY, &self.credential_id);
        }
        if !self.node_name.is_empty() {
            put(NODE_NAME_KEY, &self.node_name);
            if !self.node_uid.is_empty() {
                put(NODE_UID_KEY, &self.node_uid);
            }
        }
        user
    }
}

/// Whether `obj` was deleted more than the leeway before `now` (a deletionTimestamp in
/// the future, a pod's grace period, keeps it valid).
fn deleted_before_leeway(obj: &Value, now: i64) -> bool {
    obj["metadata"]["deletionTimestamp"]
        .as_str()
        .and_then(crate::table::parse_time)
        .is_some_and(|t| t < now - LEEWAY_SECS)
}

const INVALIDATED: &str = "service account token has been invalidated";

/// Upstream's bound-token `validator.Validate`: times, then the service account and the
/// bound object must still exist with the uids the token names.
pub fn validate_bound(
    token: &Parsed<'_>,
    objects: &dyn Objects,
    now: i64,
) -> Result<ServiceAccountInfo, String> {
    token.check_times(now).map_err(|e| e.to_string())?;
    let k = &token.claims["kubernetes.io"];
    let namespace = k["namespace"].as_str().unwrap_or_default();
    let sa = ObjectRef::from_claim(&k["serviceaccount"]).unwrap_or_default();

    let account = objects
        .get("serviceaccounts", Some(namespace), &sa.name)
        .ok_or_else(|| format!("serviceaccounts \"{}\" not found", sa.name))?;
    let account_uid = account["metadata"]["uid"].as_str().unwrap_or_default();
    if account_uid != sa.uid {
        return Err(format!("service account UID ({account_uid}) does not match claim ({})", sa.uid));
    }
    if deleted_before_leeway(&account, now) {
        return Err(format!("service account {namespace}/{} has been deleted", sa.name));
    }

    let check = |resource: &str, ns: Option<&str>, r: &ObjectRef, what: &str| -> Result<(), String> {
        let obj = objects.get(resource, ns, &r.name).ok_or_else(|| INVALIDATED.to_string())?;
        let uid = obj["metadata"]["uid"].as_str().unwrap_or_default();
        if uid != r.uid {
            return Err(format!(
                "{what} UID ({uid}) does not match service account {what} ref claim ({})",
                r.uid
            ));
        }
        if deleted_before_leeway(&obj, now) {
            return Err(INVALIDATED.to_string());
        }
        Ok(())
    };
    if let Some(secret) = ObjectRef::from_claim(&k["secret"]) {
        check("secrets", Some(namespace), &secret, "secret")?;
    }
    let pod = ObjectRef::from_claim(&k["pod"]);
    if let Some(pod) = &pod {
        check("pods", Some(namespace), pod, "pod")?;
    }
    let node = ObjectRef::from_claim(&k["node"]);
    if let (Some(node), None) = (&node, &pod) {
        check("nodes", None, node, "node")?;
    }

    let pod = pod.unwrap_or_default();
    let node = node.unwrap_or_default();
    let jti = token.claims["jti"].as_str().unwrap_or_default();
    Ok(ServiceAccountInfo {
        namespace: namespace.to_string(),
        name: sa.name,
        uid: sa.uid,
        pod_name: pod.name,
        pod_uid: pod.uid,
        node_name: node.name,
        node_uid: node.uid,
        credential_id: if jti.is_empty() { String::new() } else { format!("JTI={jti}") },
    })
}

/// Upstream's `legacyValidator.Validate`: the claims a token Secret's token carries, and
/// with `lookup` the Secret still holding exactly this token and the service account
/// still existing. (Upstream also stamps a last-used label on the Secret; this server
/// does not write during authentication.)
pub fn validate_legacy(
    token: &Parsed<'_>,
    raw: &str,
    objects: &dyn Objects,
    lookup: bool,
) -> Result<ServiceAccountInfo, String> {
    let c = &token.claims;
    let claim = |key: &str| c[key].as_str().unwrap_or_default().to_string();
    let subject = claim("sub");
    if subject.is_empty() {
        return Err("sub claim is missing".into());
    }
    let namespace = claim("kubernetes.io/serviceaccount/namespace");
    let secret_name = claim("kubernetes.io/serviceaccount/secret.name");
    let sa_name = claim("kubernetes.io/serviceaccount/service-account.name");
    let sa_uid = claim("kubernetes.io/serviceaccount/service-account.uid");
    for (value, what) in [
        (&namespace, "namespace"),
        (&secret_name, "secretName"),
        (&sa_name, "serviceAccountName"),
        (&sa_uid, "serviceAccountUID"),
    ] {
        if value.is_empty() {
            return Err(format!("{what} claim is missing"));
        }
    }
    if subject != username(&namespace, &sa_name) {
        return Err("sub claim is invalid".into());
    }
    if lookup {
        let invalidated = || "Token has been invalidated".to_string();
        let secret = objects.get("secrets", Some(&namespace), &secret_name).ok_or_else(invalidated)?;
        if !secret["metadata"]["deletionTimestamp"].is_null() {
            return Err(invalidated());
        }
        let stored = super::secret_data(&secret, "token").unwrap_or_default();
        if !super::super::constant_time_eq(&stored, raw.as_bytes()) {
            return Err("Token does not match server's copy".into());
        }
        if secret["metadata"]["labels"]["kubernetes.io/legacy-token-invalid-since"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
        {
            return Err(invalidated());
        }
        let account = objects
            .get("serviceaccounts", Some(&namespace), &sa_name)
            .ok_or_else(|| format!("serviceaccounts \"{sa_name}\" not found"))?;
        if !account["metadata"]["deletionTimestamp"].is_null() {
            return Err(format!("ServiceAccount {namespace}/{sa_name} has been deleted"));
        }
        let uid = account["metadata"]["uid"].as_str().unwrap_or_default();
        if uid != sa_uid {
            return Err(format!("ServiceAccount UID ({uid}) does not match claim ({sa_uid})"));
        }
    }
    Ok(ServiceAccountInfo { namespace, name: sa_name, uid: sa_uid, ..Default::default() })
}
