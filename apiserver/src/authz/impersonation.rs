//! Impersonation (upstream's `endpoints/filters/impersonation.go`): a request with
//! `Impersonate-User` (and optionally `Impersonate-Group`, repeated, `Impersonate-Uid`,
//! `Impersonate-Extra-<key>`) acts as that user, once the requester may `impersonate` each
//! part: `users` or, for `system:serviceaccount:<ns>:<name>`, `serviceaccounts` in `<ns>`
//! (core group); `groups` (core); `uids` and `userextras/<key>` (authentication.k8s.io).

use std::collections::BTreeMap;

use http::HeaderMap;

use super::{Attributes, Chain, forbidden};
use crate::authn::{User, names};
use crate::errors::{ApiError, ApiResult};

pub const USER_HEADER: &str = "impersonate-user";
pub const GROUP_HEADER: &str = "impersonate-group";
pub const UID_HEADER: &str = "impersonate-uid";
pub const EXTRA_PREFIX: &str = "impersonate-extra-";

/// One thing asked to be impersonated (upstream's ObjectReference per request).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Request {
    User(String),
    ServiceAccount { namespace: String, name: String },
    Group(String),
    Extra { key: String, value: String },
    Uid(String),
}

impl Request {
    /// Go's `%v` of the ObjectReference upstream builds (for the 400 message).
    fn go_value(&self) -> String {
        // Kind Namespace Name UID APIVersion ResourceVersion FieldPath
        let (kind, ns, name, api_version, field_path) = match self {
            Request::User(n) => ("User", "", n.as_str(), "", ""),
            Request::ServiceAccount { namespace, name } => {
                ("ServiceAccount", namespace.as_str(), name.as_str(), "", "")
            }
            Request::Group(n) => ("Group", "", n.as_str(), "", ""),
            Request::Extra { key, value } => {
                ("UserExtra", "", value.as_str(), "authentication.k8s.io/v1", key.as_str())
            }
            Request::Uid(u) => ("UID", "", u.as_str(), "authentication.k8s.io/v1", ""),
        };
        format!("{{{kind} {ns} {name}  {api_version}  {field_path}}}")
    }
}

/// Upstream's `serviceaccount.SplitUsername`.
fn split_service_account(user: &str) -> Option<(String, String)> {
    let rest = user.strip_prefix(names::SERVICE_ACCOUNT_PREFIX)?;
    let (ns, name) = rest.split_once(':')?;
    if ns.is_empty() || name.is_empty() || name.contains(':') {
        return None;
    }
    Some((ns.to_string(), name.to_string()))
}

/// Upstream's `unescapeExtraKey` (a malformed escape keeps the key as sent).
fn unescape(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
            match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(b) => {
                    out.push(b);
                    i += 3;
                    continue;
                }
                None => return key.to_string(),
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| key.to_string())
}

fn header_values<'a>(headers: &'a HeaderMap, name: &str) -> Vec<&'a str> {
    headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).collect()
}

/// Upstream's `buildImpersonationRequests`.
fn requests(headers: &HeaderMap) -> ApiResult<Vec<Request>> {
    let mut out = Vec::new();
    let user = header_values(headers, USER_HEADER).first().copied().unwrap_or_default();
    let has_user = !user.is_empty();
    if has_user {
        out.push(match split_service_account(user) {
            Some((namespace, name)) => Request::ServiceAccount { namespace, name },
            None => Request::User(user.to_string()),
        });
    }
    let groups = header_values(headers, GROUP_HEADER);
    let has_groups = !groups.is_empty();
    out.extend(groups.into_iter().map(|g| Request::Group(g.to_string())));
    let mut has_extra = false;
    let mut extra_names: Vec<&str> =
        headers.keys().map(http::HeaderName::as_str).filter(|n| n.starts_with(EXTRA_PREFIX)).collect();
    extra_names.dedup();
    for name in extra_names {
        has_extra = true;
        let key = unescape(&name[EXTRA_PREFIX.len()..].to_ascii_lowercase());
        for value in header_values(headers, name) {
            out.push(Request::Extra { key: key.clone(), value: value.to_string() });
        }
    }
    let uid = header_values(headers, UID_HEADER).first().copied().unwrap_or_default();
    let has_uid = !uid.is_empty();
    if has_uid {
        out.push(Request::Uid(uid.to_string()));
    }
    if (has_groups || has_extra || has_uid) && !has_user {
        let list: Vec<String> = out.iter().map(Request::go_value).collect();
        return Err(ApiError::bad_request(format!(
            "requested [{}] without impersonating a user",
            list.join(" ")
        )));
    }
    Ok(out)
}

/// The user a request acts as: `requester` itself without `Impersonate-*` headers, else
/// the impersonated user once every part is authorized (403 naming the first refused
/// part; 400 for groups, extras or a uid without a user).
pub async fn impersonate(chain: &Chain, requester: User, headers: &HeaderMap) -> ApiResult<User> {
    let reqs = requests(headers)?;
    if reqs.is_empty() {
        return Ok(requester);
    }
    let groups_specified = !header_values(headers, GROUP_HEADER).is_empty();
    let mut name = String::new();
    let mut groups: Vec<String> = Vec::new();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut uid = String::new();
    for r in &reqs {
        let mut attrs = Attributes {
            user: requester.clone(),
            verb: "impersonate".into(),
            resource_request: true,
            api_version: "v1".into(),
            ..Default::default()
        };
        match r {
            Request::ServiceAccount { namespace, name: sa } => {
                attrs.resource = "serviceaccounts".into();
                attrs.namespace = namespace.clone();
                attrs.name = sa.clone();
                name = format!("{}{namespace}:{sa}", names::SERVICE_ACCOUNT_PREFIX);
                if !groups_specified {
                    groups = vec![
                        names::SERVICE_ACCOUNTS_GROUP.to_string(),
                        format!("{}:{namespace}", names::SERVICE_ACCOUNTS_GROUP),
                    ];
                }
            }
            Request::User(u) => {
                attrs.resource = "users".into();
                attrs.name = u.clone();
                name = u.clone();
            }
            Request::Group(g) => {
                attrs.resource = "groups".into();
                attrs.name = g.clone();
                groups.push(g.clone());
            }
            Request::Extra { key, value } => {
                attrs.api_group = "authentication.k8s.io".into();
                attrs.resource = "userextras".into();
                attrs.subresource = key.clone();
                attrs.name = value.clone();
                extra.entry(key.clone()).or_default().push(value.clone());
            }
            Request::Uid(u) => {
                attrs.api_group = "authentication.k8s.io".into();
                attrs.resource = "uids".into();
                attrs.name = u.clone();
                uid = u.clone();
            }
        }
        let decision = chain.evaluate(&attrs).await;
        if decision.error.is_some() || !decision.decision.allowed() {
            return Err(forbidden(&attrs, decision.decision.reason()));
        }
    }
    if name != names::ANONYMOUS {
        if !groups.iter().any(|g| g == names::ALL_AUTHENTICATED || g == names::ALL_UNAUTHENTICATED) {
            groups.push(names::ALL_AUTHENTICATED.to_string());
        }
    } else if !groups.iter().any(|g| g == names::ALL_UNAUTHENTICATED) {
        groups.push(names::ALL_UNAUTHENTICATED.to_string());
    }
    tracing::debug!(requester = %requester.name, user = %name, ?groups, "impersonating");
    Ok(User { name, uid, groups, extra })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::authz::rbac::tests::{Policy, obj, user};
    use crate::authz::rbac::{GROUP, RbacAuthorizer, Rule};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    }

    fn chain() -> Chain {
        let p = Policy::new(
            Vec::new(),
            vec![obj(
                "RoleBinding",
                "ns",
                "sa-imp",
                json!({
                    "roleRef": { "apiGroup": GROUP, "kind": "ClusterRole", "name": "sa-impersonator" },
                    "subjects": [{ "kind": "User", "name": "dev", "apiGroup": GROUP }],
                }),
            )],
            vec![
                obj(
                    "ClusterRole",
                    "",
                    "impersonator",
                    json!({ "rules": [
                    Rule::new(&["impersonate"], &[""], &["users", "groups"]),
                    Rule::new(&["impersonate"], &["authentication.k8s.io"], &["userextras/scopes", "uids"]),
                ] }),
                ),
                obj(
                    "ClusterRole",
                    "",
                    "sa-impersonator",
                    json!({ "rules": [Rule::new(&["impersonate"], &[""], &["serviceaccounts"])] }),
                ),
                obj(
                    "ClusterRole",
                    "",
                    "jane-only",
                    json!({ "rules": [Rule::new(&["impersonate"], &[""], &["users"]).names(&["jane"])] }),
                ),
            ],
            vec![
                obj(
                    "ClusterRoleBinding",
                    "",
                    "imp",
                    json!({
                        "roleRef": { "apiGroup": GROUP, "kind": "ClusterRole", "name": "impersonator" },
                        "subjects": [{ "kind": "User", "name": "admin", "apiGroup": GROUP }],
                    }),
                ),
                obj(
                    "ClusterRoleBinding",
                    "",
                    "jane",
                    json!({
                        "roleRef": { "apiGroup": GROUP, "kind": "ClusterRole", "name": "jane-only" },
                        "subjects": [{ "kind": "User", "name": "dev", "apiGroup": GROUP }],
                    }),
                ),
            ],
        );
        let rbac = Arc::new(p.resolver());
        Chain::from_parts(vec![("RBAC".into(), Box::new(RbacAuthorizer(rbac.clone())))], rbac)
    }

    #[tokio::test]
    async fn impersonation_is_authorized_part_by_part() {
        let c = chain();
        let admin = user("admin", &["system:authenticated"]);
        // No headers: the requester.
        assert_eq!(impersonate(&c, admin.clone(), &HeaderMap::new()).await.unwrap(), admin);
        let u = impersonate(
            &c,
            admin.clone(),
            &headers(&[
                ("Impersonate-User", "jane"),
                ("Impersonate-Group", "devs"),
                ("Impersonate-Group", "ops"),
                ("Impersonate-Extra-Scopes", "view"),
                ("Impersonate-Extra-Scopes", "edit"),
                ("Impersonate-Uid", "1234"),
            ]),
        )
        .await
        .unwrap();
        assert_eq!(u.name, "jane");
        assert_eq!(u.groups, vec!["devs", "ops", "system:authenticated"]);
        assert_eq!(u.extra.get("scopes").unwrap(), &vec!["view".to_string(), "edit".to_string()]);
        assert_eq!(u.uid, "1234");
        // An extra key the requester may not set.
        let err = impersonate(
            &c,
            admin.clone(),
            &headers(&[("Impersonate-User", "jane"), ("Impersonate-Extra-Foo%2Fbar", "x")]),
        )
        .await
        .unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            "userextras.authentication.k8s.io \"x\" is forbidden: User \"admin\" cannot impersonate resource \"userextras/foo/bar\" in API group \"authentication.k8s.io\" at the cluster scope"
        );
        // dev may impersonate jane only, and service accounts of ns.
        let dev = user("dev", &["system:authenticated"]);
        assert!(impersonate(&c, dev.clone(), &headers(&[("Impersonate-User", "jane")])).await.is_ok());
        let err = impersonate(&c, dev.clone(), &headers(&[("Impersonate-User", "bob")])).await.unwrap_err();
        assert_eq!(
            err.message,
            "users \"bob\" is forbidden: User \"dev\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        );
        let sa =
            impersonate(&c, dev.clone(), &headers(&[("Impersonate-User", "system:serviceaccount:ns:robot")]))
                .await
                .unwrap();
        assert_eq!(sa.name, "system:serviceaccount:ns:robot");
        assert_eq!(
            sa.groups,
            vec!["system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"]
        );
        let err =
            impersonate(&c, dev, &headers(&[("Impersonate-User", "system:serviceaccount:other:robot")]))
                .await
                .unwrap_err();
        assert!(err.message.contains(
            "cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"other\""
        ));
        // Groups without a user.
        let err =
            impersonate(&c, admin.clone(), &headers(&[("Impersonate-Group", "devs")])).await.unwrap_err();
        assert_eq!(err.code, 400);
        assert_eq!(err.message, "requested [{Group  devs    }] without impersonating a user");
        // Anonymous gets system:unauthenticated; explicit system:unauthenticated stops system:authenticated.
        let anon = impersonate(&c, admin.clone(), &headers(&[("Impersonate-User", "system:anonymous")]))
            .await
            .unwrap();
        assert_eq!(anon.groups, vec!["system:unauthenticated"]);
        let u = impersonate(
            &c,
            admin,
            &headers(&[("Impersonate-User", "x"), ("Impersonate-Group", "system:unauthenticated")]),
        )
        .await
        .unwrap();
        assert_eq!(u.groups, vec!["system:unauthenticated"]);
    }

    #[test]
    fn extra_keys_are_unescaped() {
        assert_eq!(unescape("foo%2fbar"), "foo/bar");
        assert_eq!(unescape("bad%zz"), "bad%zz");
        assert_eq!(split_service_account("system:serviceaccount:ns:n"), Some(("ns".into(), "n".into())));
        assert_eq!(split_service_account("system:serviceaccount:ns"), None);
    }
}
