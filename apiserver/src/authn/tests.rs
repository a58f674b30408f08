//! The chain as a whole: order, 401s, anonymous requests, the authenticated group, and
//! TokenReview. Objects come from [`FakeObjects`] instead of the watch caches.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use component_base::http::ConnectionInfo;
use http::HeaderMap;
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::serviceaccount::claims::{Binding, ObjectRef, TokenClaims};
use super::*;

/// In-memory [`Objects`], keyed by resource, namespace and name.
#[derive(Default)]
pub(crate) struct FakeObjects(Mutex<HashMap<String, Value>>);

impl FakeObjects {
    fn key(resource: &str, ns: Option<&str>, name: &str) -> String {
        format!("{resource}/{}/{name}", ns.unwrap_or_default())
    }

    pub(crate) fn put(&self, resource: &str, ns: Option<&str>, obj: Value) {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
        self.0.lock().insert(Self::key(resource, ns, &name), obj);
    }

    pub(crate) fn remove(&self, resource: &str, ns: Option<&str>, name: &str) {
        self.0.lock().remove(&Self::key(resource, ns, name));
    }
}

impl Objects for FakeObjects {
    fn get(&self, resource: &str, ns: Option<&str>, name: &str) -> Option<Value> {
        self.0.lock().get(&Self::key(resource, ns, name)).cloned()
    }
}

const ISS: &str = "https://kubernetes.default.svc";

struct Setup {
    _dir: tempfile::TempDir,
    opts: options::Options,
    ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, data: &[u8]| -> PathBuf {
        let p = dir.path().join(name);
        std::fs::write(&p, data).unwrap();
        p
    };
    let tokens = write("tokens.csv", b"admin-token,admin,1,\"system:masters\"\n");
    let ca = x509::tests::ca("client CA");
    let ca_file = write("ca.crt", ca.pem().as_bytes());
    let key = write("sa.key", include_bytes!("../../../component-base/testdata/sa-rsa.key"));
    let opts = options::Options {
        token_auth_file: Some(tokens),
        anonymous_auth: true,
        client_ca_file: Some(ca_file),
        enable_bootstrap_token_auth: true,
        service_account_key_files: Vec::new(),
        service_account_signing_key_file: Some(key),
        service_account_issuers: vec![ISS.into()],
        service_account_jwks_uri: None,
        api_audiences: Vec::new(),
        service_account_max_token_expiration: std::time::Duration::ZERO,
        service_account_lookup: true,
        service_account_extend_token_expiration: true,
        request_header: Default::default(),
    };
    Setup { _dir: dir, opts, ca }
}

fn objects() -> Arc<FakeObjects> {
    let f = FakeObjects::default();
    f.put("serviceaccounts", Some("default"), json!({"metadata": {"name": "default", "uid": "sa-uid"}}));
    Arc::new(f)
}

fn bearer(token: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(http::header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
    h
}

fn conn(chain: Vec<rustls::pki_types::CertificateDer<'static>>) -> ConnectionInfo {
    ConnectionInfo {
        peer: "127.0.0.1:1".parse().unwrap(),
        tls: true,
        client_certificates: Some(Arc::from(chain)),
        alpn: None,
    }
}

fn sa_token(authn: &Authenticator) -> String {
    let issuer = authn.issuer().expect("signing key and issuer configured");
    let claims = TokenClaims {
        issuer: ISS,
        namespace: "default",
        service_account: ObjectRef { name: "default".into(), uid: "sa-uid".into() },
        binding: Binding::None,
        audiences: authn.api_audiences(),
        expiration_seconds: 3600,
        warn_after_seconds: 0,
        jti: "j",
    };
    issuer.sign(&claims, crate::table::unix_now()).unwrap()
}

#[test]
fn tokens_anonymous_and_401s() {
    let s = setup();
    let authn = Authenticator::new(&s.opts, objects(), None).unwrap();

    let admin = authn.authenticate(&bearer("admin-token"), None).unwrap();
    assert_eq!(admin.name, "admin");
    assert_eq!(admin.groups, vec!["system:masters", "system:authenticated"]);

    let sa = authn.authenticate(&bearer(&sa_token(&authn)), None).unwrap();
    assert_eq!(sa.name, "system:serviceaccount:default:default");
    assert!(sa.groups.contains(&"system:authenticated".to_string()));

    let anonymous = authn.authenticate(&HeaderMap::new(), None).unwrap();
    assert_eq!(
        (anonymous.name.as_str(), anonymous.groups.as_slice()),
        ("system:anonymous", &["system:unauthenticated".to_string()][..])
    );

    for bad in ["nope", "abcdef.0123456789abcdef", "a.b.c"] {
        let e = authn.authenticate(&bearer(bad), None).unwrap_err();
        assert_eq!((e.code, e.reason, e.message.as_str()), (401, "Unauthorized", "Unauthorized"), "{bad}");
    }
    // `Bearer` with nothing after it is no credential at all.
    let mut empty = HeaderMap::new();
    empty.insert(http::header::AUTHORIZATION, "Bearer ".parse().unwrap());
    assert_eq!(authn.authenticate(&empty, None).unwrap().name, "system:anonymous");

    let mut closed = s.opts.clone();
    closed.anonymous_auth = false;
    let authn = Authenticator::new(&closed, objects(), None).unwrap();
    assert_eq!(authn.authenticate(&HeaderMap::new(), None).unwrap_err().code, 401);
}

#[test]
fn client_certificates_come_first_and_bad_ones_do_not_block_tokens() {
    let s = setup();
    let authn = Authenticator::new(&s.opts, objects(), None).unwrap();
    let good = x509::tests::client(&s.ca, Some("carol"), &["ops"]);
    let u = authn.authenticate(&bearer("admin-token"), Some(&conn(vec![good]))).unwrap();
    assert_eq!(
        (u.name.as_str(), u.groups.as_slice()),
        ("carol", &["ops".to_string(), "system:authenticated".to_string()][..])
    );

    let forged = x509::tests::client(&x509::tests::ca("rogue CA"), Some("admin"), &["system:masters"]);
    let e = authn.authenticate(&HeaderMap::new(), Some(&conn(vec![forged.clone()]))).unwrap_err();
    assert_eq!(e.code, 401, "a presented, bad certificate is not anonymous");
    assert_eq!(authn.authenticate(&bearer("admin-token"), Some(&conn(vec![forged]))).unwrap().name, "admin");
}

#[test]
fn token_reviews() {
    let s = setup();
    let authn = Authenticator::new(&s.opts, objects(), None).unwrap();
    let review = |token: &str, audiences: Value| {
        reviews::token_review(
            &authn,
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token, "audiences": audiences}}),
        )
        .unwrap()
    };
    let ok = review(&sa_token(&authn), Value::Null);
    assert_eq!(ok["status"]["authenticated"], true);
    assert_eq!(ok["status"]["user"]["username"], "system:serviceaccount:default:default");
    assert_eq!(ok["status"]["user"]["uid"], "sa-uid");
    assert_eq!(ok["status"]["audiences"], json!([ISS]));

    let static_token = review("admin-token", Value::Null);
    assert_eq!(static_token["status"]["user"]["groups"], json!(["system:masters", "system:authenticated"]));

    // A static token is not good for an audience other than the API's.
    let elsewhere = review("admin-token", json!(["vault"]));
    assert_eq!(elsewhere["status"].get("authenticated"), None);
    assert_eq!(elsewhere["status"]["error"], "invalid bearer token");

    let bad = review("garbage", Value::Null);
    assert_eq!(bad["status"]["error"], "invalid bearer token");
    assert_eq!(bad["status"]["user"], json!({}));

    let empty = reviews::token_review(&authn, &json!({"spec": {}})).unwrap_err();
    assert_eq!(empty.code, 400);
}

#[test]
fn startup_errors() {
    let s = setup();
    let mut half = s.opts.clone();
    half.service_account_signing_key_file = None;
    assert!(Authenticator::new(&half, objects(), None).is_err());
    let mut missing = s.opts.clone();
    missing.client_ca_file = Some("/nonexistent/ca.crt".into());
    assert!(Authenticator::new(&missing, objects(), None).is_err());
    let mut no_sa = s.opts.clone();
    no_sa.service_account_signing_key_file = None;
    no_sa.service_account_issuers.clear();
    let authn = Authenticator::new(&no_sa, objects(), None).unwrap();
    assert!(authn.issuer().is_none());
}
