//! The dispatchers against webhooks served over TLS in this process: a CA and server
//! certificate made here, servers on `127.0.0.1:0`, and a fake [`Cluster`] for
//! namespaces and service endpoints.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use serde_json::{Value, json};

use super::*;
use crate::authn::User;

/// A CA and a server configuration whose certificate it signed for `names`.
struct Pki {
    ca_pem: String,
    server: Arc<rustls::ServerConfig>,
}

fn pki(names: &[&str]) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let cert = CertificateParams::new(names).unwrap().signed_by(&key, &*ca).unwrap();
    let server =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
    Pki { ca_pem: ca.pem(), server: Arc::new(server) }
}

/// Answers a request (its path and AdmissionReview) with a status and a body.
type Handler = Arc<dyn Fn(&str, Value) -> (u16, Vec<u8>) + Send + Sync>;

/// An HTTPS server; stops accepting when dropped.
struct Server {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(tls: Arc<rustls::ServerConfig>, handler: Handler) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, handler) = (acceptor.clone(), handler.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else { return };
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let handler = handler.clone();
                    async move {
                        let path = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
                        let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let review = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        let (code, out) = handler(&path, review);
                        let resp = hyper::Response::builder()
                            .status(code)
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from(out)))
                            .unwrap();
                        Ok::<_, std::convert::Infallible>(resp)
                    }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
            });
        }
    });
    Server { addr, task }
}

/// An AdmissionReview answer to `review` with `fields` in its response.
fn answer(review: &Value, fields: Value) -> (u16, Vec<u8>) {
    let mut resp = json!({ "uid": review["request"]["uid"], "allowed": true });
    for (k, v) in fields.as_object().into_iter().flatten() {
        resp[k] = v.clone();
    }
    let body = json!({ "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp });
    (200, serde_json::to_vec(&body).unwrap())
}

fn b64(s: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn json_patch(ops: Value) -> Value {
    json!({ "patch": b64(&serde_json::to_vec(&ops).unwrap()), "patchType": "JSONPatch" })
}

#[derive(Default)]
struct FakeCluster {
    namespaces: HashMap<String, Value>,
    /// `namespace/name:port` → address.
    services: HashMap<String, (String, u16)>,
}

#[async_trait::async_trait]
impl Cluster for FakeCluster {
    async fn namespace_labels(&self, name: &str) -> ApiResult<Value> {
        self.namespaces.get(name).cloned().ok_or_else(|| ApiError::not_found("namespaces", "", name))
    }

    async fn resolve(&self, namespace: &str, name: &str, port: u16) -> Result<(String, u16), String> {
        self.services
            .get(&format!("{namespace}/{name}:{port}"))
            .cloned()
            .ok_or_else(|| format!("service \"{name}\" not found"))
    }

    fn normalize(&self, _resource: &ResourceInfo, obj: Value) -> ApiResult<Value> {
        Ok(obj)
    }
}

/// A webhook on pod creates, called at `url` trusting `ca_pem`, with `extra` fields.
fn webhook(name: &str, client_config: Value, extra: Value) -> Value {
    let mut h = json!({
        "name": name,
        "clientConfig": client_config,
        "rules": [{ "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"] }],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        h[k] = v.clone();
    }
    h
}

fn url_config(url: &str, ca_pem: &str) -> Value {
    json!({ "url": url, "caBundle": b64(ca_pem.as_bytes()) })
}

fn compile(hooks: Vec<Value>) -> Vec<Arc<Webhook>> {
    config::compile(&json!({ "metadata": { "name": "cfg" }, "webhooks": hooks }))
}

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

fn user() -> User {
    User { name: "alice".into(), uid: "u-1".into(), groups: vec!["devs".into()], ..Default::default() }
}

fn pod_create<'a>(info: &'a ResourceInfo, user: &'a User, ns: &'a str) -> Attributes<'a> {
    Attributes {
        operation: Operation::Create,
        resource: info,
        subresource: None,
        namespace: Some(ns),
        name: "p",
        object: Some(json!({ "metadata": { "name": "p", "namespace": ns, "labels": { "app": "web" } } })),
        old_object: None,
        user,
        dry_run: false,
    }
}

#[tokio::test]
async fn mutating_json_patch_with_warnings() {
    let pki = pki(&["127.0.0.1"]);
    let seen: Arc<parking_lot::Mutex<Vec<(String, Value)>>> = Default::default();
    let recorded = seen.clone();
    let server = serve(
        pki.server.clone(),
        Arc::new(move |path, review| {
            recorded.lock().push((path.to_string(), review.clone()));
            let mut fields =
                json_patch(json!([{ "op": "add", "path": "/metadata/labels/injected", "value": "yes" }]));
            fields["warnings"] = json!(["careful"]);
            answer(&review, fields)
        }),
    )
    .await;
    let url = format!("https://127.0.0.1:{}/mutate", server.addr.port());
    let hooks = compile(vec![webhook("inject.example.com", url_config(&url, &pki.ca_pem), json!({}))]);
    let (info, user) = (pods(), user());
    let mut attrs = pod_create(&info, &user, "ns");
    let mut warnings = Vec::new();
    mutate(&hooks, &mut attrs, &FakeCluster::default(), &mut warnings).await.unwrap();
    let obj = attrs.object.unwrap();
    assert_eq!(obj["metadata"]["labels"], json!({ "app": "web", "injected": "yes" }));
    assert_eq!(warnings, vec!["careful"]);
    let seen = seen.lock();
    assert_eq!(seen.len(), 1);
    let (path, review) = &seen[0];
    assert_eq!(path, "/mutate?timeout=10s");
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    let req = &review["request"];
    assert_eq!(req["kind"]["kind"], "Pod");
    assert_eq!(req["operation"], "CREATE");
    assert_eq!(req["namespace"], "ns");
    assert_eq!(req["userInfo"]["username"], "alice");
    assert_eq!(req["object"]["metadata"]["labels"]["app"], "web");
    assert_eq!(req["uid"].as_str().map(str::len), Some(36));
}

#[tokio::test]
async fn validating_deny_with_message_and_code() {
    let pki = pki(&["127.0.0.1"]);
    let server = serve(
        pki.server.clone(),
        Arc::new(|_, review| {
            answer(
                &review,
                json!({ "allowed": false, "status": { "code": 403, "message": "no pods today" } }),
            )
        }),
    )
    .await;
    let url = format!("https://127.0.0.1:{}/", server.addr.port());
    let hooks = compile(vec![webhook("deny.example.com", url_config(&url, &pki.ca_pem), json!({}))]);
    let (info, user) = (pods(), user());
    let attrs = pod_create(&info, &user, "ns");
    let err = validate(&hooks, &attrs, &FakeCluster::default(), &mut Vec::new()).await.unwrap_err();
    assert_eq!(err.code, 403);
    assert_eq!(err.message, "admission webhook \"deny.example.com\" denied the request: no pods today");
    // A request the rules do not cover is not sent.
    let mut update = pod_create(&info, &user, "ns");
    update.operation = Operation::Update;
    validate(&hooks, &update, &FakeCluster::default(), &mut Vec::new()).await.unwrap();
}

/// A port nothing listens on: bound, then released.
async fn closed_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test]
async fn failure_policy_fail_and_ignore_when_nothing_listens() {
    let pki = pki(&["127.0.0.1"]);
    let port = closed_port().await;
    let url = format!("https://127.0.0.1:{port}");
    let (info, user) = (pods(), user());
    let attrs = pod_create(&info, &user, "ns");
    let fail = compile(vec![webhook("down.example.com", url_config(&url, &pki.ca_pem), json!({}))]);
    let err = validate(&fail, &attrs, &FakeCluster::default(), &mut Vec::new()).await.unwrap_err();
    assert_eq!((err.code, err.reason), (500, "InternalError"));
    assert_eq!(
        err.message,
        format!(
            "Internal error occurred: failed calling webhook \"down.example.com\": failed to call webhook: Post \"https://127.0.0.1:{port}/?timeout=10s\": dial tcp 127.0.0.1:{port}: connect: connection refused"
        )
    );
    let ignore = compile(vec![webhook(
        "down.example.com",
        url_config(&url, &pki.ca_pem),
        json!({ "failurePolicy": "Ignore" }),
    )]);
    validate(&ignore, &attrs, &FakeCluster::default(), &mut Vec::new()).await.unwrap();
    let mut attrs = pod_create(&info, &user, "ns");
    mutate(&ignore, &mut attrs, &FakeCluster::default(), &mut Vec::new()).await.unwrap();
    assert_eq!(attrs.object.unwrap()["metadata"]["labels"], json!({ "app": "web" }));
}

#[tokio::test]
async fn oversized_and_invalid_responses_are_failed_calls() {
    let pki = pki(&["127.0.0.1"]);
    let server = serve(
        pki.server.clone(),
        Arc::new(|path, review| match path {
            p if p.starts_with("/big") => (200, vec![b' '; client::MAX_RESPONSE_BYTES + 1]),
            p if p.starts_with("/patching") => answer(&review, json_patch(json!([]))),
            p if p.starts_with("/wronguid") => {
                let mut r = review.clone();
                r["request"]["uid"] = json!("other");
                answer(&r, json!({}))
            }
            _ => (500, b"boom".to_vec()),
        }),
    )
    .await;
    let (info, user) = (pods(), user());
    let attrs = pod_create(&info, &user, "ns");
    let port = server.addr.port();
    let cases = [
        (
            "big",
            "failed to call webhook: Post \"https://127.0.0.1:PORT/big?timeout=10s\": the response body is larger than 3145728 bytes",
        ),
        ("patching", "received invalid webhook response: validating webhook may not return response.patch"),
        ("wronguid", "received invalid webhook response: expected response.uid="),
        (
            "error",
            "failed to call webhook: Post \"https://127.0.0.1:PORT/error?timeout=10s\": an error on the server (\"boom\") has prevented the request from succeeding",
        ),
    ];
    for (path, want) in cases {
        let url = format!("https://127.0.0.1:{port}/{path}");
        let hooks = compile(vec![webhook("bad.example.com", url_config(&url, &pki.ca_pem), json!({}))]);
        let err = validate(&hooks, &attrs, &FakeCluster::default(), &mut Vec::new()).await.unwrap_err();
        let want = format!(
            "Internal error occurred: failed calling webhook \"bad.example.com\": {}",
            want.replace("PORT", &port.to_string())
        );
        assert!(err.message.starts_with(&want), "{path}: {}", err.message);
        assert_eq!(err.code, 500);
    }
}

#[tokio::test]
async fn untrusted_certificate_is_a_failed_call() {
    let (served, other) = (pki(&["127.0.0.1"]), pki(&["127.0.0.1"]));
    let server = serve(served.server.clone(), Arc::new(|_, review| answer(&review, json!({})))).await;
    let url = format!("https://127.0.0.1:{}/", server.addr.port());
    let hooks = compile(vec![webhook("tls.example.com", url_config(&url, &other.ca_pem), json!({}))]);
    let (info, user) = (pods(), user());
    let err = validate(&hooks, &pod_create(&info, &user, "ns"), &FakeCluster::default(), &mut Vec::new())
        .await
        .unwrap_err();
    assert!(err.message.contains("tls: invalid peer certificate"), "{}", err.message);
}

#[tokio::test]
async fn timeout_is_a_failed_call() {
    let pki = pki(&["127.0.0.1"]);
    // Accepts connections and never answers (not even the TLS handshake).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = listener.accept().await {
            conns.push(c);
        }
    });
    let url = format!("https://127.0.0.1:{port}/slow");
    let hooks = compile(vec![webhook(
        "slow.example.com",
        url_config(&url, &pki.ca_pem),
        json!({ "timeoutSeconds": 1 }),
    )]);
    let (info, user) = (pods(), user());
    let err = validate(&hooks, &pod_create(&info, &user, "ns"), &FakeCluster::default(), &mut Vec::new())
        .await
        .unwrap_err();
    held.abort();
    assert!(
        err.message.ends_with(&format!(
            "Post \"https://127.0.0.1:{port}/slow?timeout=1s\": context deadline exceeded"
        )),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn reinvocation_if_needed() {
    let pki = pki(&["127.0.0.1"]);
    let a_calls = Arc::new(AtomicUsize::new(0));
    let counter = a_calls.clone();
    // `/a` labels the pod `a=yes` once `b` is there; `/b` adds `b`.
    let server = serve(
        pki.server.clone(),
        Arc::new(move |path, review| {
            let labels = &review["request"]["object"]["metadata"]["labels"];
            if path.starts_with("/a") {
                counter.fetch_add(1, Ordering::SeqCst);
                if labels.get("b").is_some() && labels.get("a").is_none() {
                    return answer(
                        &review,
                        json_patch(json!([{ "op": "add", "path": "/metadata/labels/a", "value": "yes" }])),
                    );
                }
                return answer(&review, json!({}));
            }
            if labels.get("b").is_none() {
                return answer(
                    &review,
                    json_patch(json!([{ "op": "add", "path": "/metadata/labels/b", "value": "yes" }])),
                );
            }
            answer(&review, json!({}))
        }),
    )
    .await;
    let port = server.addr.port();
    let (info, user) = (pods(), user());
    for (policy, want_calls, want_a) in [("IfNeeded", 2, true), ("Never", 1, false)] {
        a_calls.store(0, Ordering::SeqCst);
        let hooks = compile(vec![
            webhook(
                "a.example.com",
                url_config(&format!("https://127.0.0.1:{port}/a"), &pki.ca_pem),
                json!({ "reinvocationPolicy": policy }),
            ),
            webhook(
                "b.example.com",
                url_config(&format!("https://127.0.0.1:{port}/b"), &pki.ca_pem),
                json!({}),
            ),
        ]);
        let mut attrs = pod_create(&info, &user, "ns");
        mutate(&hooks, &mut attrs, &FakeCluster::default(), &mut Vec::new()).await.unwrap();
        let labels = attrs.object.unwrap()["metadata"]["labels"].clone();
        assert_eq!(a_calls.load(Ordering::SeqCst), want_calls, "{policy}");
        assert_eq!(labels.get("a").is_some(), want_a, "{policy}: {labels}");
        assert_eq!(labels["b"], "yes");
    }
}

#[tokio::test]
async fn service_endpoints_and_namespace_selector() {
    // The certificate names only the service's DNS name, not the address dialled.
    let pki = pki(&["hook.webhooks.svc"]);
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let server = serve(
        pki.server.clone(),
        Arc::new(move |_, review| {
            counter.fetch_add(1, Ordering::SeqCst);
            answer(&review, json!({ "allowed": false }))
        }),
    )
    .await;
    let cluster = FakeCluster {
        namespaces: HashMap::from([
            ("prod".to_string(), json!({ "env": "prod" })),
            ("dev".to_string(), json!({ "env": "dev" })),
        ]),
        services: HashMap::from([(
            "webhooks/hook:443".to_string(),
            ("127.0.0.1".to_string(), server.addr.port()),
        )]),
    };
    let cc = json!({
        "service": { "namespace": "webhooks", "name": "hook", "path": "/validate" },
        "caBundle": b64(pki.ca_pem.as_bytes()),
    });
    let hooks = compile(vec![webhook(
        "prod-only.example.com",
        cc,
        json!({ "namespaceSelector": { "matchLabels": { "env": "prod" } } }),
    )]);
    let (info, user) = (pods(), user());
    let err =
        validate(&hooks, &pod_create(&info, &user, "prod"), &cluster, &mut Vec::new()).await.unwrap_err();
    assert_eq!(
        err.message,
        "admission webhook \"prod-only.example.com\" denied the request without explanation"
    );
    validate(&hooks, &pod_create(&info, &user, "dev"), &cluster, &mut Vec::new()).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let missing =
        validate(&hooks, &pod_create(&info, &user, "gone"), &cluster, &mut Vec::new()).await.unwrap_err();
    assert_eq!((missing.code, missing.message.as_str()), (404, "namespaces \"gone\" not found"));
    // A service that does not resolve is a failed call.
    let unknown = compile(vec![webhook(
        "nosvc.example.com",
        json!({ "service": { "namespace": "webhooks", "name": "nope" } }),
        json!({}),
    )]);
    let err =
        validate(&unknown, &pod_create(&info, &user, "dev"), &cluster, &mut Vec::new()).await.unwrap_err();
    assert!(
        err.message
            .ends_with("Post \"https://nope.webhooks.svc:443/?timeout=10s\": service \"nope\" not found"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn object_selector_and_dry_run() {
    let (info, user) = (pods(), user());
    // Nothing listens: a webhook that is called fails the request.
    let url = format!("https://127.0.0.1:{}/", closed_port().await);
    let selective = compile(vec![webhook(
        "sel.example.com",
        json!({ "url": url }),
        json!({ "objectSelector": { "matchLabels": { "app": "db" } } }),
    )]);
    validate(&selective, &pod_create(&info, &user, "ns"), &FakeCluster::default(), &mut Vec::new())
        .await
        .unwrap();
    let side_effects =
        compile(vec![webhook("fx.example.com", json!({ "url": url }), json!({ "sideEffects": "Some" }))]);
    let mut dry = pod_create(&info, &user, "ns");
    dry.dry_run = true;
    let err = validate(&side_effects, &dry, &FakeCluster::default(), &mut Vec::new()).await.unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str()),
        (400, "admission webhook \"fx.example.com\" does not support dry run")
    );
}

#[test]
fn webhook_configurations_are_exempt() {
    let mut info = pods();
    info.group = "admissionregistration.k8s.io";
    info.kind = "ValidatingWebhookConfiguration";
    let user = user();
    let attrs = pod_create(&info, &user, "");
    assert!(matching::is_exempt(&attrs));
    let pods = pods();
    assert!(!matching::is_exempt(&pod_create(&pods, &user, "ns")));
}
