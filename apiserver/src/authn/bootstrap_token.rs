//! Bootstrap tokens (`--enable-bootstrap-token-auth`, upstream's
//! `plugin/pkg/auth/authenticator/token/bootstrap`): a token `<id>.<secret>` matches the
//! Secret `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token`,
//! which kubeadm creates for nodes joining the cluster. The user is
//! `system:bootstrap:<id>` in `system:bootstrappers` plus the Secret's extra groups.
//!
//! A token that does not match is not an error here: the chain goes on, and the request
//! fails as an unknown bearer token (upstream only logs why).

use std::sync::Arc;

use serde_json::Value;

use super::serviceaccount::secret_data;
use super::{Authenticated, Objects, User, Verdict};

pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
pub const SECRET_PREFIX: &str = "bootstrap-token-";
pub const USER_PREFIX: &str = "system:bootstrap:";
pub const DEFAULT_GROUP: &str = "system:bootstrappers";
const EXTRA_GROUP_PREFIX: &str = "system:bootstrappers:";
const NAMESPACE: &str = "kube-system";

pub struct BootstrapTokens {
    pub objects: Arc<dyn Objects>,
}

/// Splits `[a-z0-9]{6}.[a-z0-9]{16}` into id and secret.
pub fn parse_token(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let ok =
        |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (ok(id, 6) && ok(secret, 16)).then_some((id, secret))
}

impl BootstrapTokens {
    pub fn authenticate(&self, token: &str, now: i64) -> Verdict {
        let Some((id, secret)) = parse_token(token) else { return Verdict::NotMine };
        let name = format!("{SECRET_PREFIX}{id}");
        let Some(obj) = self.objects.get("secrets", Some(NAMESPACE), &name) else { return Verdict::NotMine };
        match validate(&obj, id, secret, now) {
            Ok(user) => Verdict::Authenticated(Authenticated { user, audiences: Vec::new() }),
            Err(why) => {
                tracing::debug!(secret = %name, why, "bootstrap token refused");
                Verdict::NotMine
            }
        }
    }
}

fn data(secret: &Value, key: &str) -> String {
    secret_data(secret, key).and_then(|b| String::from_utf8(b).ok()).unwrap_or_default()
}

/// Whether the token Secret `secret` admits `id.token_secret` at `now`; the user if so.
pub fn validate(secret: &Value, id: &str, token_secret: &str, now: i64) -> Result<User, &'static str> {
    if !secret["metadata"]["deletionTimestamp"].is_null() {
        return Err("is deleted and awaiting removal");
    }
    if secret["type"].as_str() != Some(SECRET_TYPE) || !secret["data"].is_object() {
        return Err("has invalid type");
    }
    if !super::constant_time_eq(data(secret, "token-secret").as_bytes(), token_secret.as_bytes()) {
        return Err("has invalid value for key token-secret");
    }
    if data(secret, "token-id") != id {
        return Err("has invalid value for key token-id");
    }
    let expiration = data(secret, "expiration");
    if !expiration.is_empty() {
        match parse_rfc3339(&expiration) {
            Some(t) if t > now => {}
            Some(_) => return Err("has expired"),
            None => return Err("has an unparseable expiration time"),
        }
    }
    if data(secret, "usage-bootstrap-authentication") != "true" {
        return Err("not marked usage-bootstrap-authentication=true");
    }
    let mut groups = vec![DEFAULT_GROUP.to_string()];
    let extra = data(secret, "auth-extra-groups");
    if !extra.is_empty() {
        for group in extra.split(',') {
            if !valid_extra_group(group) {
                return Err("has invalid value for key auth-extra-groups");
            }
            groups.push(group.to_string());
        }
    }
    // Upstream returns a sorted set.
    groups.sort();
    groups.dedup();
    Ok(User { name: format!("{USER_PREFIX}{id}"), groups, ..Default::default() })
}

/// Upstream's `\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z`.
fn valid_extra_group(group: &str) -> bool {
    let Some(rest) = group.strip_prefix(EXTRA_GROUP_PREFIX) else { return false };
    let body_ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b':' || b == b'-';
    match rest.as_bytes().split_last() {
        Some((&last, body)) => {
            (last.is_ascii_lowercase() || last.is_ascii_digit())
                && body.len() <= 255
                && body.iter().all(|b| body_ok(*b))
        }
        None => false,
    }
}

/// RFC 3339 (`2024-01-02T03:04:05Z`, fractions and `+hh:mm` offsets allowed) to Unix
/// seconds.
fn parse_rfc3339(s: &str) -> Option<i64> {
    let base = s.get(..19)?;
    let secs = crate::table::parse_time(&format!("{base}Z"))?;
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = &frac[digits..];
    }
    let offset = match rest.as_bytes() {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let num = |a: u8, b: u8| -> Option<i64> {
                (a.is_ascii_digit() && b.is_ascii_digit())
                    .then(|| i64::from(a - b'0') * 10 + i64::from(b - b'0'))
            };
            let minutes = num(*h1, *h2)? * 60 + num(*m1, *m2)?;
            if *sign == b'+' { minutes * 60 } else { -minutes * 60 }
        }
        _ => return None,
    };
    Some(secs - offset)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use base64::Engine;
    use serde_json::json;

    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn secret(extra: &[(&str, &str)]) -> Value {
        let mut data = json!({
            "token-id": b64("abcdef"),
            "token-secret": b64("0123456789abcdef"),
            "usage-bootstrap-authentication": b64("true"),
        });
        for (k, v) in extra {
            data[*k] = json!(b64(v));
        }
        json!({"metadata": {"name": "bootstrap-token-abcdef", "namespace": "kube-system"},
               "type": SECRET_TYPE, "data": data})
    }

    struct Fake(HashMap<String, Value>);

    impl Objects for Fake {
        fn get(&self, resource: &str, ns: Option<&str>, name: &str) -> Option<Value> {
            self.0.get(&format!("{resource}/{}/{name}", ns.unwrap_or_default())).cloned()
        }
    }

    #[test]
    fn token_format() {
        assert_eq!(parse_token("abcdef.0123456789abcdef"), Some(("abcdef", "0123456789abcdef")));
        for bad in [
            "abcde.0123456789abcdef",
            "ABCDEF.0123456789abcdef",
            "abcdef.0123456789abcde",
            "abcdef0123456789abcdef",
        ] {
            assert_eq!(parse_token(bad), None, "{bad}");
        }
    }

    #[test]
    fn valid_tokens_and_their_groups() {
        let now = 1_700_000_000;
        let user = validate(&secret(&[]), "abcdef", "0123456789abcdef", now).unwrap();
        assert_eq!(user.name, "system:bootstrap:abcdef");
        assert_eq!(user.groups, vec!["system:bootstrappers"]);

        let extra = secret(&[("auth-extra-groups", "system:bootstrappers:kubeadm:default-node-token")]);
        let user = validate(&extra, "abcdef", "0123456789abcdef", now).unwrap();
        assert_eq!(
            user.groups,
            vec!["system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token"]
        );

        let future = secret(&[("expiration", "2033-05-18T03:33:20+02:00")]);
        assert!(validate(&future, "abcdef", "0123456789abcdef", now).is_ok());
    }

    #[test]
    fn invalid_tokens_are_refused() {
        let now = 1_700_000_000;
        let ok = "0123456789abcdef";
        assert!(validate(&secret(&[]), "abcdef", "0123456789abcdee", now).is_err());
        assert!(validate(&secret(&[]), "abcdeg", ok, now).is_err(), "token-id must match");
        assert!(validate(&secret(&[("expiration", "2020-01-01T00:00:00Z")]), "abcdef", ok, now).is_err());
        assert!(validate(&secret(&[("expiration", "soon")]), "abcdef", ok, now).is_err());
        assert!(
            validate(&secret(&[("usage-bootstrap-authentication", "false")]), "abcdef", ok, now).is_err()
        );
        assert!(validate(&secret(&[("auth-extra-groups", "system:masters")]), "abcdef", ok, now).is_err());
        assert!(
            validate(&secret(&[("auth-extra-groups", "system:bootstrappers:")]), "abcdef", ok, now).is_err()
        );
        let mut wrong_type = secret(&[]);
        wrong_type["type"] = json!("Opaque");
        assert!(validate(&wrong_type, "abcdef", ok, now).is_err());
        let mut deleting = secret(&[]);
        deleting["metadata"]["deletionTimestamp"] = json!("2023-01-01T00:00:00Z");
        assert!(validate(&deleting, "abcdef", ok, now).is_err());
    }

    #[test]
    fn the_authenticator_reads_kube_system_secrets() {
        let objects =
            Fake(HashMap::from([("secrets/kube-system/bootstrap-token-abcdef".to_string(), secret(&[]))]));
        let tokens = BootstrapTokens { objects: Arc::new(objects) };
        assert!(matches!(tokens.authenticate("abcdef.0123456789abcdef", 0), Verdict::Authenticated(_)));
        assert_eq!(tokens.authenticate("abcdef.0123456789abcdee", 0), Verdict::NotMine);
        assert_eq!(tokens.authenticate("zzzzzz.0123456789abcdef", 0), Verdict::NotMine);
        assert_eq!(tokens.authenticate("not-a-bootstrap-token", 0), Verdict::NotMine);
    }
}
