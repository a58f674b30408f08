use std::sync::Arc;

use base64::Engine;
use serde_json::json;

use super::claims::{
    Binding, CREDENTIAL_ID_KEY, NODE_NAME_KEY, NODE_UID_KEY, ObjectRef, POD_NAME_KEY, POD_UID_KEY,
    TokenClaims,
};
use super::keys::SigningKey;
use super::*;
use crate::authn::tests::FakeObjects;

const ISS: &str = "https://kubernetes.default.svc";
const NOW: i64 = 1_700_000_000;

fn rsa_key() -> SigningKey {
    SigningKey::from_pem(include_bytes!("../../../../component-base/testdata/sa-rsa.key")).unwrap()
}

fn ec_key() -> SigningKey {
    SigningKey::from_pem(rcgen::KeyPair::generate().unwrap().serialize_pem().as_bytes()).unwrap()
}

fn objects() -> FakeObjects {
    let f = FakeObjects::default();
    f.put(
        "serviceaccounts",
        Some("default"),
        json!({"metadata": {"name": "builder", "namespace": "default", "uid": "sa-uid"}}),
    );
    f.put(
        "pods",
        Some("default"),
        json!({"metadata": {"name": "web", "namespace": "default", "uid": "pod-uid"}}),
    );
    f.put("nodes", None, json!({"metadata": {"name": "n1", "uid": "node-uid"}}));
    f.put(
        "secrets",
        Some("default"),
        json!({"metadata": {"name": "s", "namespace": "default", "uid": "secret-uid"}}),
    );
    f
}

fn authenticator(keys: Vec<keys::PublicKey>, objects: FakeObjects) -> TokenAuthenticator {
    TokenAuthenticator {
        keys,
        issuers: vec![ISS.into()],
        api_audiences: vec![ISS.into()],
        lookup: true,
        objects: Arc::new(objects),
    }
}

fn issue(key: &SigningKey, binding: Binding, audiences: &[String]) -> String {
    let claims = TokenClaims {
        issuer: ISS,
        namespace: "default",
        service_account: ObjectRef { name: "builder".into(), uid: "sa-uid".into() },
        binding,
        audiences,
        expiration_seconds: 3600,
        warn_after_seconds: 0,
        jti: "3f3b2d5e-0000-4000-8000-000000000001",
    };
    jwt::sign(key, &claims.to_json(NOW)).unwrap()
}

fn pod_binding() -> Binding {
    Binding::Pod {
        pod: ObjectRef { name: "web".into(), uid: "pod-uid".into() },
        node: Some(ObjectRef { name: "n1".into(), uid: "node-uid".into() }),
    }
}

fn api() -> Vec<String> {
    vec![ISS.to_string()]
}

#[test]
fn rs256_round_trip_with_pod_binding() {
    let key = rsa_key();
    let token = issue(&key, pod_binding(), &api());
    let parsed = jwt::parse(&token).unwrap();
    assert_eq!((parsed.alg.as_str(), parsed.kid.as_str()), ("RS256", key.key_id()));
    assert_eq!(parsed.claims["sub"], "system:serviceaccount:default:builder");
    assert_eq!(parsed.claims["aud"], json!([ISS]));
    assert_eq!(parsed.claims["kubernetes.io"]["node"], json!({"name": "n1", "uid": "node-uid"}));

    let a = authenticator(vec![key.public.clone()], objects());
    let Verdict::Authenticated(r) = a.authenticate(&token, &[], NOW + 10) else {
        panic!("valid token refused")
    };
    assert_eq!(r.audiences, api());
    let u = r.user;
    assert_eq!((u.name.as_str(), u.uid.as_str()), ("system:serviceaccount:default:builder", "sa-uid"));
    assert_eq!(u.groups, vec!["system:serviceaccounts", "system:serviceaccounts:default"]);
    assert_eq!(u.extra[POD_NAME_KEY], vec!["web"]);
    assert_eq!(u.extra[POD_UID_KEY], vec!["pod-uid"]);
    assert_eq!(u.extra[NODE_NAME_KEY], vec!["n1"]);
    assert_eq!(u.extra[NODE_UID_KEY], vec!["node-uid"]);
    assert_eq!(u.extra[CREDENTIAL_ID_KEY], vec!["JTI=3f3b2d5e-0000-4000-8000-000000000001"]);
}

#[test]
fn es256_round_trip() {
    let key = ec_key();
    let token = issue(&key, Binding::None, &api());
    assert_eq!(jwt::parse(&token).unwrap().alg, "ES256");
    let a = authenticator(vec![rsa_key().public, key.public.clone()], objects());
    let Verdict::Authenticated(r) = a.authenticate(&token, &[], NOW) else { panic!("valid token refused") };
    assert!(!r.user.extra.contains_key(POD_NAME_KEY));
}

#[test]
fn expired_tokens_are_refused() {
    let key = rsa_key();
    let token = issue(&key, Binding::None, &api());
    let a = authenticator(vec![key.public.clone()], objects());
    assert!(
        matches!(a.authenticate(&token, &[], NOW + 3600 + 59), Verdict::Authenticated(_)),
        "within the leeway"
    );
    assert_eq!(
        a.authenticate(&token, &[], NOW + 3600 + 61),
        Verdict::Rejected("service account token has expired".into())
    );
}

#[test]
fn wrong_issuer_or_audience() {
    let key = rsa_key();
    let token = issue(&key, Binding::None, &api());
    let mut other_issuer = authenticator(vec![key.public.clone()], objects());
    other_issuer.issuers = vec!["https://elsewhere".into()];
    assert_eq!(other_issuer.authenticate(&token, &[], NOW), Verdict::NotMine);

    let vault = issue(&key, Binding::None, &["vault".to_string()]);
    let a = authenticator(vec![key.public.clone()], objects());
    let Verdict::Rejected(why) = a.authenticate(&vault, &[], NOW) else {
        panic!("foreign audience accepted")
    };
    assert_eq!(why, format!("token audiences [\"vault\"] is invalid for the target audiences [\"{ISS}\"]"));
    // ... but a TokenReview for that audience accepts it.
    let Verdict::Authenticated(r) = a.authenticate(&vault, &["vault".to_string()], NOW) else { panic!() };
    assert_eq!(r.audiences, vec!["vault"]);
}

#[test]
fn tampered_tokens_and_unknown_keys_are_refused() {
    let key = rsa_key();
    let token = issue(&key, Binding::None, &api());
    let a = authenticator(vec![key.public.clone()], objects());
    let mut parts: Vec<&str> = token.split('.').collect();
    let other = issue(&key, pod_binding(), &api());
    let other_payload = other.split('.').nth(1).unwrap();
    parts[1] = other_payload;
    assert!(matches!(a.authenticate(&parts.join("."), &[], NOW), Verdict::Rejected(_)));

    // Signed by a key the server does not have: its kid matches nothing.
    let stranger = issue(&ec_key(), Binding::None, &api());
    assert_eq!(
        a.authenticate(&stranger, &[], NOW),
        Verdict::Rejected("invalid signature, no keys found".into())
    );
}

#[test]
fn bound_objects_must_still_exist() {
    let key = rsa_key();
    let keys = vec![key.public.clone()];
    let token = issue(&key, pod_binding(), &api());

    let recreated = objects();
    recreated.put(
        "serviceaccounts",
        Some("default"),
        json!({"metadata": {"name": "builder", "uid": "new-uid"}}),
    );
    let Verdict::Rejected(why) = authenticator(keys.clone(), recreated).authenticate(&token, &[], NOW) else {
        panic!()
    };
    assert_eq!(why, "service account UID (new-uid) does not match claim (sa-uid)");

    let gone = objects();
    gone.remove("pods", Some("default"), "web");
    assert_eq!(
        authenticator(keys.clone(), gone).authenticate(&token, &[], NOW),
        Verdict::Rejected("service account token has been invalidated".into())
    );

    // A pod terminating gracefully (deletionTimestamp ahead) keeps its token; one deleted
    // well past the leeway does not.
    let terminating = objects();
    let at = |t: i64| crate::registry::store::rfc3339(t);
    terminating.put(
        "pods",
        Some("default"),
        json!({"metadata": {"name": "web", "uid": "pod-uid", "deletionTimestamp": at(NOW + 30)}}),
    );
    assert!(matches!(
        authenticator(keys.clone(), terminating).authenticate(&token, &[], NOW),
        Verdict::Authenticated(_)
    ));
    let deleted = objects();
    deleted.put(
        "pods",
        Some("default"),
        json!({"metadata": {"name": "web", "uid": "pod-uid", "deletionTimestamp": at(NOW - 120)}}),
    );
    assert!(matches!(
        authenticator(keys.clone(), deleted).authenticate(&token, &[], NOW),
        Verdict::Rejected(_)
    ));

    // A node-bound token checks the node; a secret-bound one the secret.
    let node_token = issue(&key, Binding::Node(ObjectRef { name: "n1".into(), uid: "other".into() }), &api());
    assert!(matches!(
        authenticator(keys.clone(), objects()).authenticate(&node_token, &[], NOW),
        Verdict::Rejected(_)
    ));
    let secret_token =
        issue(&key, Binding::Secret(ObjectRef { name: "s".into(), uid: "secret-uid".into() }), &api());
    assert!(matches!(
        authenticator(keys, objects()).authenticate(&secret_token, &[], NOW),
        Verdict::Authenticated(_)
    ));
}

#[test]
fn legacy_secret_tokens() {
    let key = rsa_key();
    let token = jwt::sign(
        &key,
        &json!({
            "iss": claims::LEGACY_ISSUER,
            "sub": "system:serviceaccount:default:builder",
            "kubernetes.io/serviceaccount/namespace": "default",
            "kubernetes.io/serviceaccount/secret.name": "builder-token",
            "kubernetes.io/serviceaccount/service-account.name": "builder",
            "kubernetes.io/serviceaccount/service-account.uid": "sa-uid",
        }),
    )
    .unwrap();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let with_secret = |stored: &str| {
        let o = objects();
        o.put(
            "secrets",
            Some("default"),
            json!({"metadata": {"name": "builder-token"}, "data": {"token": b64(stored)}}),
        );
        authenticator(vec![key.public.clone()], o)
    };
    let Verdict::Authenticated(r) = with_secret(&token).authenticate(&token, &[], NOW) else {
        panic!("legacy token refused")
    };
    assert_eq!(r.user.name, "system:serviceaccount:default:builder");
    assert_eq!(r.audiences, api());
    assert_eq!(
        with_secret("something else").authenticate(&token, &[], NOW),
        Verdict::Rejected("Token does not match server's copy".into())
    );
    let mut no_lookup = with_secret("something else");
    no_lookup.lookup = false;
    assert!(matches!(no_lookup.authenticate(&token, &[], NOW), Verdict::Authenticated(_)));
}
