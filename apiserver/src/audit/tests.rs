//! A request's events end to end, without a server: an auditor over an in-memory sink.

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::*;

#[derive(Clone, Default)]
struct Memory(Arc<Mutex<Vec<Value>>>);

impl log::Sink for Memory {
    fn write_event(&mut self, line: &[u8]) -> io::Result<()> {
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1, "one line per event");
        self.0.lock().push(serde_json::from_slice(line).map_err(io::Error::other)?);
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn auditor(policy: &str) -> (Arc<Auditor>, Memory) {
    let mem = Memory::default();
    let p = Policy::parse(format!("apiVersion: audit.k8s.io/v1\nkind: Policy\n{policy}").as_bytes()).unwrap();
    (Auditor::with_backend(p, LogBackend::start(mem.clone(), Mode::Blocking, Format::Json, 16)), mem)
}

fn user(name: &str) -> User {
    User {
        name: name.into(),
        uid: "u-1".into(),
        groups: vec!["system:authenticated".into()],
        ..Default::default()
    }
}

fn body(v: &Value) -> BoxBody {
    http_body_util::Full::new(Bytes::from(serde_json::to_vec(v).unwrap()))
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn json_response(status: StatusCode, v: &Value) -> Response<BoxBody> {
    let mut r = Response::new(body(v));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn request(method: &str, uri: &str) -> Request<()> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("user-agent", "kubectl/v1.32.0 (linux/amd64)")
        .header("x-forwarded-for", "10.0.0.1, 10.0.0.2")
        .body(())
        .unwrap()
}

#[tokio::test]
async fn create_at_request_response() {
    let (a, mem) =
        auditor("rules:\n- level: RequestResponse\n  resources: [{group: '', resources: [configmaps]}]\n");
    let req = request("POST", "/api/v1/namespaces/default/configmaps?fieldManager=kubectl");
    let audit = a.begin(&req, "id-1");
    let sent = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","managedFields":[{"manager":"x"}]},"data":{"k":"v"}});
    let created = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"default","uid":"abc","resourceVersion":"7"},"data":{"k":"v"}});
    let resp = scope(Some(audit.clone()), async {
        authenticated(&user("alice")).await.unwrap();
        authorized(&user("alice"), &Decision::Allow("RBAC: allowed".into()));
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        request_body(&h, &Bytes::from(serde_json::to_vec(&sent).unwrap()));
        json_response(StatusCode::CREATED, &created)
    })
    .await;
    let resp = audit.finish(resp, None).await;
    // The response still carries its body.
    let got: Value = serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(got, created);
    let events = mem.0.lock().clone();
    assert_eq!(events.len(), 2);
    let (rr, rc) = (&events[0], &events[1]);
    assert_eq!(rr["stage"], "RequestReceived");
    assert_eq!(rr["requestReceivedTimestamp"], rr["stageTimestamp"]);
    assert!(rr.get("annotations").is_none(), "authorization comes after RequestReceived");
    assert!(rr.get("requestObject").is_none());
    assert_eq!(rc["stage"], "ResponseComplete");
    assert_eq!(rc["kind"], "Event");
    assert_eq!(rc["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(rc["level"], "RequestResponse");
    assert_eq!(rc["auditID"], "id-1");
    assert_eq!(rc["verb"], "create");
    assert_eq!(rc["requestURI"], "/api/v1/namespaces/default/configmaps?fieldManager=kubectl");
    assert_eq!(rc["user"], json!({"username":"alice","uid":"u-1","groups":["system:authenticated"]}));
    assert_eq!(rc["sourceIPs"], json!(["10.0.0.1", "10.0.0.2"]));
    assert_eq!(rc["userAgent"], "kubectl/v1.32.0 (linux/amd64)");
    assert_eq!(
        rc["objectRef"],
        json!({"resource":"configmaps","namespace":"default","name":"cm","apiVersion":"v1"})
    );
    assert_eq!(rc["responseStatus"], json!({"metadata":{},"code":201}));
    assert_eq!(rc["requestObject"], sent);
    assert_eq!(rc["responseObject"], created);
    assert_eq!(
        rc["annotations"],
        json!({"authorization.k8s.io/decision":"allow","authorization.k8s.io/reason":"RBAC: allowed"})
    );
    let ts = rc["stageTimestamp"].as_str().unwrap();
    assert_eq!(ts.len(), "2024-12-01T11:00:00.123456Z".len(), "{ts}");
}

#[tokio::test]
async fn metadata_level_omits_bodies_and_managed_fields_option() {
    let (a, mem) = auditor(
        "omitStages: [RequestReceived]\nrules:\n- level: Request\n  verbs: [update]\n  omitManagedFields: true\n- level: Metadata\n",
    );
    let req = request("PUT", "/apis/apps/v1/namespaces/ns/deployments/d");
    let audit = a.begin(&req, "id-2");
    let sent = json!({"metadata":{"name":"d","uid":"u9","resourceVersion":"41","managedFields":[{"m":1}]},"spec":{}});
    let resp = scope(Some(audit.clone()), async {
        authenticated(&user("bob")).await.unwrap();
        request_body(&HeaderMap::new(), &Bytes::from(serde_json::to_vec(&sent).unwrap()));
        json_response(StatusCode::OK, &json!({}))
    })
    .await;
    audit.finish(resp, None).await;
    let events = mem.0.lock().clone();
    assert_eq!(events.len(), 1, "RequestReceived omitted");
    let ev = &events[0];
    assert_eq!(ev["level"], "Request");
    assert_eq!(ev["objectRef"]["uid"], "u9");
    assert_eq!(ev["objectRef"]["resourceVersion"], "41");
    assert_eq!(ev["objectRef"]["apiGroup"], "apps");
    assert!(ev["requestObject"]["metadata"].get("managedFields").is_none());
    assert!(ev.get("responseObject").is_none());

    // Metadata level: no request object.
    let req = request("GET", "/api/v1/namespaces/ns/pods/p");
    let audit = a.begin(&req, "id-3");
    scope(Some(audit.clone()), authenticated(&user("bob"))).await.unwrap();
    audit.finish(json_response(StatusCode::OK, &json!({})), None).await;
    let ev = mem.0.lock().last().cloned().unwrap();
    assert_eq!(ev["level"], "Metadata");
    assert_eq!(ev["verb"], "get");
    assert!(ev.get("requestObject").is_none() && ev.get("responseObject").is_none());
}

#[tokio::test]
async fn failures_forbidden_and_unauthenticated() {
    let (a, mem) = auditor("rules:\n- level: Metadata\n");
    let req = request("DELETE", "/api/v1/namespaces/ns/secrets/s");
    let audit = a.begin(&req, "id-4");
    let err = ApiError::forbidden("secrets \"s\" is forbidden: User \"eve\" cannot delete resource");
    scope(Some(audit.clone()), async {
        authenticated(&user("eve")).await.unwrap();
        authorized(&user("eve"), &Decision::NoOpinion(String::new()));
    })
    .await;
    audit.finish(crate::handlers::error_response(&err), Some(&err)).await;
    let ev = mem.0.lock().last().cloned().unwrap();
    assert_eq!(ev["annotations"]["authorization.k8s.io/decision"], "forbid");
    assert_eq!(
        ev["responseStatus"],
        json!({"metadata":{},"status":"Failure","message":"secrets \"s\" is forbidden: User \"eve\" cannot delete resource","reason":"Forbidden","code":403})
    );

    // No user: one ResponseStarted event, user {}.
    let req = Request::builder().uri("/api/v1/pods").header("authorization", "Bearer nope").body(()).unwrap();
    let audit = a.begin(&req, "id-5");
    let n = mem.0.lock().len();
    audit
        .finish(crate::handlers::error_response(&ApiError::unauthorized()), Some(&ApiError::unauthorized()))
        .await;
    let events = mem.0.lock().clone();
    assert_eq!(events.len(), n + 1);
    let ev = &events[n];
    assert_eq!(ev["stage"], "ResponseStarted");
    assert_eq!(ev["user"], json!({}));
    assert_eq!(ev["verb"], "list");
    assert_eq!(
        ev["responseStatus"],
        json!({"metadata":{},"message":"Authentication failed, attempted: bearer","code":401})
    );
}

#[tokio::test]
async fn impersonation_and_non_resource_verbs() {
    let (a, mem) = auditor("rules:\n- level: Metadata\n  users: [admin]\n");
    let req = request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews");
    let audit = a.begin(&req, "id-6");
    scope(Some(audit.clone()), async {
        authenticated(&user("admin")).await.unwrap();
        authorized(&user("system:serviceaccount:ns:sa"), &Decision::Allow(String::new()));
    })
    .await;
    audit.finish(json_response(StatusCode::CREATED, &json!({})), None).await;
    let ev = mem.0.lock().last().cloned().unwrap();
    assert_eq!(ev["user"]["username"], "admin", "the policy and user are the authenticated ones");
    assert_eq!(ev["impersonatedUser"]["username"], "system:serviceaccount:ns:sa");

    let req = request("POST", "/some/path");
    let audit = a.begin(&req, "id-7");
    scope(Some(audit.clone()), authenticated(&user("admin"))).await.unwrap();
    audit.finish(json_response(StatusCode::NOT_FOUND, &json!({})), None).await;
    let ev = mem.0.lock().last().cloned().unwrap();
    assert_eq!(ev["verb"], "post");
    assert!(ev.get("objectRef").is_none());

    // Users the policy does not name are not recorded at all.
    let n = mem.0.lock().len();
    let audit = a.begin(&request("GET", "/api/v1/pods"), "id-8");
    scope(Some(audit.clone()), authenticated(&user("carol"))).await.unwrap();
    audit.finish(json_response(StatusCode::OK, &json!({})), None).await;
    assert_eq!(mem.0.lock().len(), n);
}

#[tokio::test]
async fn watch_gets_response_started_then_complete_when_the_body_ends() {
    let (a, mem) = auditor("rules:\n- level: RequestResponse\n");
    let req = request("GET", "/api/v1/namespaces/ns/pods?watch=true");
    let audit = a.begin(&req, "id-9");
    scope(Some(audit.clone()), authenticated(&user("w"))).await.unwrap();
    let resp = audit.finish(json_response(StatusCode::OK, &json!({"type":"ADDED"})), None).await;
    {
        let events = mem.0.lock().clone();
        assert_eq!(events.last().unwrap()["stage"], "ResponseStarted");
        assert_eq!(events.last().unwrap()["verb"], "watch");
        assert!(events.last().unwrap().get("responseObject").is_none(), "watches are never buffered");
    }
    let _ = resp.into_body().collect().await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while mem.0.lock().last().unwrap()["stage"] != "ResponseComplete" && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let events = mem.0.lock().clone();
    assert_eq!(
        events.iter().map(|e| e["stage"].as_str().unwrap()).collect::<Vec<_>>(),
        ["RequestReceived", "ResponseStarted", "ResponseComplete"]
    );
}

#[tokio::test]
async fn panic_and_strict_mode() {
    let (a, mem) = auditor("rules:\n- level: Metadata\n");
    let audit = a.begin(&request("GET", "/api/v1/pods"), "id-10");
    scope(Some(audit.clone()), authenticated(&user("p"))).await.unwrap();
    audit.panicked("boom").await;
    // Nothing after the Panic event.
    audit.finish(json_response(StatusCode::INTERNAL_SERVER_ERROR, &json!({})), None).await;
    let ev = mem.0.lock().last().cloned().unwrap();
    assert_eq!(ev["stage"], "Panic");
    assert_eq!(ev["responseStatus"]["message"], "APIServer panic'd: boom");

    /// Refuses every write.
    struct Broken;
    impl log::Sink for Broken {
        fn write_event(&mut self, _: &[u8]) -> io::Result<()> {
            Err(io::Error::other("read-only file system"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let p = Policy::parse(b"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Metadata}]").unwrap();
    let strict =
        Auditor::with_backend(p.clone(), LogBackend::start(Broken, Mode::BlockingStrict, Format::Json, 4));
    let audit = strict.begin(&request("GET", "/api/v1/pods"), "x");
    let e = scope(Some(audit), authenticated(&user("s"))).await.unwrap_err();
    assert_eq!((e.code, e.message.as_str()), (500, "Internal error occurred: failed to store audit event"));
    let lenient = Auditor::with_backend(p, LogBackend::start(Broken, Mode::Blocking, Format::Json, 4));
    let audit = lenient.begin(&request("GET", "/api/v1/pods"), "x");
    assert!(scope(Some(audit), authenticated(&user("s"))).await.is_ok());
}

#[test]
fn request_ids_and_helpers() {
    let mut h = HeaderMap::new();
    assert_eq!(request_id(&h).len(), 36);
    h.insert("audit-id", HeaderValue::from_static("client-chosen"));
    assert_eq!(request_id(&h), "client-chosen");
    let mut long = HeaderMap::new();
    long.insert(header::USER_AGENT, HeaderValue::from_str(&"a".repeat(2000)).unwrap());
    assert_eq!(user_agent(&long), format!("{}...TRUNCATED", "a".repeat(1024)));
    let mut v =
        json!({"items":[{"metadata":{"name":"a","managedFields":[1]}}],"metadata":{"managedFields":[2]}});
    drop_managed_fields(&mut v);
    assert_eq!(v, json!({"items":[{"metadata":{"name":"a"}}],"metadata":{}}));
    let dep = Attributes {
        resource_request: true,
        api_version: "v1".into(),
        resource: "componentstatuses".into(),
        ..Default::default()
    };
    assert_eq!(deprecation(&dep), Some(None));
    assert_eq!(deprecation(&Attributes { resource: "pods".into(), ..dep }), None);
    let req = Request::builder().uri("/x?access_token=t").body(()).unwrap();
    assert_eq!(auth_methods(&req), "Authentication failed, attempted: access_token");
    assert_eq!(auth_methods(&request("GET", "/")), "Authentication failed, no credentials provided");
}

#[test]
fn auditor_from_flags() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Metadata}]\n")
        .unwrap();
    let mut o = options::Options { audit_policy_file: Some(policy.clone()), ..Default::default() };
    assert!(Auditor::new(&o).unwrap().is_none(), "no log path: nothing to record");
    o.audit_log_path = Some(dir.path().join("audit.log").display().to_string());
    assert!(Auditor::new(&o).unwrap().is_some());
    o.audit_policy_file = None;
    assert!(Auditor::new(&o).unwrap().is_none(), "no policy: nothing recorded");
    std::fs::write(&policy, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []\n").unwrap();
    o.audit_policy_file = Some(policy);
    assert!(Auditor::new(&o).unwrap_err().contains("loaded illegal policy with 0 rules"));
    o.audit_log_mode = "sync".into();
    assert!(Auditor::new(&o).unwrap_err().contains("invalid audit log mode sync"));
}

#[test]
fn non_resource_url_ending_in_a_multibyte_character_is_checked_not_a_panic() {
    // Found by fuzzing: the wildcard check sliced the string inside the last character.
    let doc = |url: &str| {
        format!(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  nonResourceURLs: [\"{url}\"]\n"
        )
    };
    assert!(Policy::parse(doc("/healthzɥ").as_bytes()).is_ok());
    let err = Policy::parse(doc("/health*ɥ").as_bytes()).unwrap_err();
    assert!(err.contains("wildcards '*' must be the final character"), "{err}");
}
