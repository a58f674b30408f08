//! kube-apiserver security, end to end with real kubectl v1.32: x509 and service-account
//! token authentication, RBAC with upstream's bootstrap roles, the Node authorizer and
//! NodeRestriction, admission (webhooks over HTTPS, ResourceQuota, LimitRanger,
//! PodSecurity and the other default plugins), audit logging and encryption at rest.
//!
//! Each test starts its own etcd and kube-apiserver. Authorizers and admission plugins read
//! bindings, quotas and namespaces from caches that follow etcd, as upstream's informers
//! do, so each check that depends on a fresh object waits for it to take effect.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD as B64, URL_SAFE_NO_PAD as B64URL};
use serde_json::{Value, json};

use e2e::apiserver::KubeApiserver;
use e2e::certs::{Credential, Kubeconfig, TestCa, rsa_key};
use e2e::component::KubeControllerManager;
use e2e::webhook::WebhookServer;
use e2e::{Etcd, EtcdOptions, wait_for};

const WAIT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(200);
const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// Upstream's default admission plugins, ServiceAccount included (these tests make each
/// namespace's `default` account themselves), less TaintNodesByCondition: no node
/// lifecycle controller runs to lift the taint it puts on new Nodes.
const DEFAULT_ADMISSION: &str = "--disable-admission-plugins=TaintNodesByCondition";

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(s: &str) -> Value {
    e2e::json(s)
}

/// `kubectl apply -f -` as admin, failing the test if it fails.
fn apply(api: &KubeApiserver, manifest: &str) {
    let out = api.kubectl_stdin(&["apply", "-f", "-"], manifest);
    assert!(
        out.status.success(),
        "apply failed: {}\n{manifest}\n--- apiserver log ---\n{}",
        stderr(&out),
        api.log_tail(20)
    );
}

/// `kubectl create -f -` as admin; the raw output, for tests that expect refusals.
fn create(api: &KubeApiserver, manifest: &str) -> Output {
    api.kubectl_stdin(&["create", "-f", "-"], manifest)
}

/// A namespace with a `default` ServiceAccount (no serviceaccount controller runs in
/// these tests, and the ServiceAccount admission plugin refuses pods whose account is
/// missing).
fn namespace(api: &KubeApiserver, name: &str, labels: &[&str]) {
    api.kubectl_ok(&["create", "namespace", name]);
    if !labels.is_empty() {
        let mut args = vec!["label", "namespace", name];
        args.extend_from_slice(labels);
        api.kubectl_ok(&args);
    }
    api.kubectl_ok(&["create", "serviceaccount", "default", "-n", name]);
}

fn pod_yaml(ns: &str, name: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{app: e2e}}\nspec:\n{extra_spec}  containers:\n  - name: c\n    image: registry.k8s.io/pause:3.10\n"
    )
}

/// GET `path` without credentials (curl, trusting the server's certificate): (status, body).
fn anonymous_get(api: &KubeApiserver, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-w", "\n%{http_code}", "--cacert"])
        .arg(api.dir.path().join("certs").join("apiserver.crt"))
        .arg(format!("{}{path}", api.url()))
        .output()
        .expect("curl");
    let text = stdout(&out);
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// The row for `resource` in `kubectl auth can-i --list` output.
fn can_i_row(list: &str, resource: &str) -> Option<String> {
    list.lines().find(|l| l.split_whitespace().next() == Some(resource)).map(str::to_owned)
}

// ---------------------------------------------------------------------------------------
// 1. x509 client certificates, anonymous requests, RBAC, access reviews, impersonation.
// ---------------------------------------------------------------------------------------

#[test]
fn authn_and_rbac() {
    let ca = TestCa::new("e2e client CA");
    let etcd = Etcd::start(EtcdOptions::default());
    let client_ca = format!("--client-ca-file={}", ca.cert.display());
    let api = KubeApiserver::start(
        &etcd.endpoint(),
        &[&client_ca, "--authorization-mode=Node,RBAC", "--anonymous-auth=false", DEFAULT_ADMISSION],
    );
    // admin, edit and view are aggregated ClusterRoles: as upstream, their rules are filled
    // in by kube-controller-manager's clusterrole-aggregation controller.
    let _kcm = KubeControllerManager::start(&api, &["--controllers=clusterrole-aggregation"]);
    wait_for("aggregated admin/edit/view rules", WAIT, POLL, || {
        ["admin", "edit", "view"]
            .iter()
            .all(|r| {
                let role = json(&api.kubectl_ok(&["get", "clusterrole", r, "-o", "json"]));
                role["rules"].as_array().is_some_and(|rules| !rules.is_empty())
            })
            .then_some(())
    });
    let view = json(&api.kubectl_ok(&["get", "clusterrole", "view", "-o", "json"]));
    assert_eq!(
        view["aggregationRule"]["clusterRoleSelectors"][0]["matchLabels"]["rbac.authorization.k8s.io/aggregate-to-view"],
        "true"
    );
    let masters = json(&api.kubectl_ok(&["get", "clusterrolebinding", "cluster-admin", "-o", "json"]));
    assert_eq!(masters["roleRef"]["name"], "cluster-admin");
    assert_eq!(masters["subjects"][0]["name"], "system:masters", "{masters}");

    let dir = tempfile::tempdir().expect("tempdir");
    let alice = Kubeconfig::write(
        &api,
        dir.path(),
        "alice",
        Credential::Cert(&ca.client_cert("alice", Some("devs"))),
    );
    let bob = Kubeconfig::write(&api, dir.path(), "bob", Credential::Cert(&ca.client_cert("bob", None)));
    let other_ca = TestCa::new("a CA the server does not trust");
    let mallory = Kubeconfig::write(
        &api,
        dir.path(),
        "mallory",
        Credential::Cert(&other_ca.client_cert("mallory", Some("system:masters"))),
    );

    // No credentials with --anonymous-auth=false: 401. (curl: kubectl, given a user without
    // credentials, prompts for a username instead of sending the request.)
    let (code, body) = anonymous_get(&api, "/api/v1/namespaces/default/pods");
    assert_eq!(code, 401, "{body}");
    let status = json(&body);
    assert_eq!(status["kind"], "Status", "{body}");
    assert_eq!(status["reason"], "Unauthorized", "{body}");
    // A certificate from another CA, even one claiming system:masters: 401, not a TLS failure.
    let err = mallory.kubectl_err(&["get", "pods"]);
    assert!(err.contains("Unauthorized"), "{err}");

    // Authenticated, but no bindings: 403 with upstream's message.
    let err = alice.kubectl_err(&["get", "pods"]);
    assert!(
        err.contains(
            r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "default""#
        ),
        "{err}"
    );
    // An X.509 v1 certificate from openssl (no extensions file), as many guides make
    // them: accepted for client authentication, as upstream accepts it.
    let carol_cert = ca.openssl_client_cert("carol", Some("devs"));
    let carol = Kubeconfig::write(&api, dir.path(), "carol", Credential::Cert(&carol_cert));
    let carol_me = json(&carol.kubectl_ok(&["auth", "whoami", "-o", "json"]));
    assert_eq!(carol_me["status"]["userInfo"]["username"], "carol", "{carol_me}");
    assert!(carol_me["status"]["userInfo"]["groups"].as_array().is_some_and(|g| g.contains(&json!("devs"))));
    // kubectl speaks TLS 1.3; the handshake signature is checked differently in TLS 1.2.
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "--tls-max",
            "1.2",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
        ])
        .args(["-d", r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#, "--cacert"])
        .arg(api.dir.path().join("certs").join("apiserver.crt"))
        .arg("--cert")
        .arg(&carol_cert.cert)
        .arg("--key")
        .arg(&carol_cert.key)
        .arg(format!("{}/apis/authentication.k8s.io/v1/selfsubjectreviews", api.url()))
        .output()
        .expect("curl");
    let review = json(&stdout(&out));
    assert_eq!(review["status"]["userInfo"]["username"], "carol", "TLS 1.2: {review} {}", stderr(&out));
    let me = json(&alice.kubectl_ok(&["auth", "whoami", "-o", "json"]));
    assert_eq!(me["kind"], "SelfSubjectReview", "{me}");
    assert_eq!(me["status"]["userInfo"]["username"], "alice", "{me}");
    let groups: Vec<&str> = me["status"]["userInfo"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(groups.contains(&"devs") && groups.contains(&"system:authenticated"), "{me}");
    let table = alice.kubectl_ok(&["auth", "whoami"]);
    assert!(
        table.contains("Username") && table.contains("alice") && table.contains("system:authenticated"),
        "{table}"
    );

    // view in team for alice, admin in team for bob.
    api.kubectl_ok(&["create", "namespace", "team"]);
    api.kubectl_ok(&[
        "create",
        "rolebinding",
        "alice-view",
        "--clusterrole=view",
        "--user=alice",
        "-n",
        "team",
    ]);
    api.kubectl_ok(&[
        "create",
        "rolebinding",
        "bob-admin",
        "--clusterrole=admin",
        "--user=bob",
        "-n",
        "team",
    ]);
    api.kubectl_ok(&["create", "configmap", "settings", "-n", "team", "--from-literal=k=v"]);
    wait_for("alice may list pods in team", WAIT, POLL, || {
        alice.kubectl(&["get", "pods", "-n", "team"]).status.success().then_some(())
    });
    let cms = alice.kubectl_ok(&["get", "configmaps", "-n", "team", "-o", "name"]);
    assert!(cms.contains("configmap/settings"), "{cms}");
    let err = alice.kubectl_err(&["get", "pods", "-n", "default"]);
    assert!(
        err.contains(
            r#"User "alice" cannot list resource "pods" in API group "" in the namespace "default""#
        ),
        "{err}"
    );
    let err = alice.kubectl_err(&["create", "configmap", "mine", "-n", "team"]);
    assert!(
        err.contains(r#"configmaps is forbidden: User "alice" cannot create resource "configmaps" in API group "" in the namespace "team""#),
        "{err}"
    );
    let err = alice.kubectl_err(&["get", "secrets", "-n", "team"]);
    assert!(err.contains(r#"User "alice" cannot list resource "secrets""#), "{err}");

    // SelfSubjectAccessReview and SelfSubjectRulesReview.
    let out = alice.kubectl(&["auth", "can-i", "create", "pods", "-n", "team"]);
    assert_eq!(stdout(&out).trim(), "no", "{}", stderr(&out));
    assert!(!out.status.success());
    let out = alice.kubectl(&["auth", "can-i", "watch", "pods", "-n", "team"]);
    assert_eq!(stdout(&out).trim(), "yes", "{}", stderr(&out));
    let out = alice.kubectl(&["auth", "can-i", "list", "pods", "-n", "default"]);
    assert_eq!(stdout(&out).trim(), "no", "{}", stderr(&out));
    let list = alice.kubectl_ok(&["auth", "can-i", "--list", "-n", "team"]);
    let pods = can_i_row(&list, "pods").unwrap_or_else(|| panic!("no pods row:\n{list}"));
    assert!(pods.contains("[get list watch]"), "{list}");
    assert!(can_i_row(&list, "secrets").is_none(), "view must not read secrets:\n{list}");
    let ssar = can_i_row(&list, "selfsubjectaccessreviews.authorization.k8s.io")
        .unwrap_or_else(|| panic!("system:basic-user rules missing:\n{list}"));
    assert!(ssar.contains("[create]"), "{list}");

    // Escalation prevention: bob (admin in team) may grant what he holds, not more.
    wait_for("bob may bind view in team", WAIT, POLL, || {
        bob.kubectl(&[
            "create",
            "rolebinding",
            "carol-view",
            "--clusterrole=view",
            "--user=carol",
            "-n",
            "team",
        ])
        .status
        .success()
        .then_some(())
    });
    let err = bob.kubectl_err(&[
        "create",
        "rolebinding",
        "bob-root",
        "--clusterrole=cluster-admin",
        "--user=bob",
        "-n",
        "team",
    ]);
    assert!(err.contains(r#"rolebindings.rbac.authorization.k8s.io "bob-root" is forbidden"#), "{err}");
    assert!(err.contains("is attempting to grant RBAC permissions not currently held"), "{err}");
    let err = bob.kubectl_err(&[
        "create",
        "clusterrolebinding",
        "bob-root",
        "--clusterrole=cluster-admin",
        "--user=bob",
    ]);
    assert!(err.contains("forbidden"), "{err}");

    // Impersonation: the admin may act as alice (and gets alice's answers); alice may not
    // act as anyone until she is granted impersonate on that user.
    let out = api.kubectl_ok(&["--as=alice", "get", "configmaps", "-n", "team", "-o", "name"]);
    assert!(out.contains("configmap/settings"), "{out}");
    let out = api.kubectl(&["--as=alice", "get", "pods", "-n", "default"]);
    assert!(
        stderr(&out).contains(
            r#"User "alice" cannot list resource "pods" in API group "" in the namespace "default""#
        ),
        "{}",
        stderr(&out)
    );
    let me = json(&api.kubectl_ok(&["--as=alice", "--as-group=devs", "auth", "whoami", "-o", "json"]));
    assert_eq!(me["status"]["userInfo"]["username"], "alice", "{me}");
    assert!(
        me["status"]["userInfo"]["groups"].as_array().is_some_and(|g| g.contains(&json!("devs"))),
        "{me}"
    );
    let err = alice.kubectl_err(&["--as=bob", "get", "pods", "-n", "team"]);
    assert!(
        err.contains(r#"users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope"#),
        "{err}"
    );
    api.kubectl_ok(&[
        "create",
        "clusterrole",
        "impersonate-bob",
        "--verb=impersonate",
        "--resource=users",
        "--resource-name=bob",
    ]);
    api.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "alice-as-bob",
        "--clusterrole=impersonate-bob",
        "--user=alice",
    ]);
    wait_for("alice may impersonate bob", WAIT, POLL, || {
        alice
            .kubectl(&["--as=bob", "create", "configmap", "from-bob", "-n", "team"])
            .status
            .success()
            .then_some(())
    });
    let err = alice.kubectl_err(&["--as=carol", "get", "pods", "-n", "team"]);
    assert!(err.contains(r#"users "carol" is forbidden"#), "{err}");

    // Without anonymous auth, health checks need credentials too.
    let (code, body) = anonymous_get(&api, "/readyz");
    assert_eq!(code, 401, "GET /readyz without credentials: {body}");
}

// ---------------------------------------------------------------------------------------
// 2. Service-account tokens: TokenRequest, TokenReview, bound tokens, refusals.
// ---------------------------------------------------------------------------------------

/// An RSA key pair as kubeadm makes one: PKCS#8 private key and PKIX public key, PEM.
fn jwt_claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).unwrap_or_else(|| panic!("not a JWT: {token}"));
    serde_json::from_slice(&B64URL.decode(payload).expect("base64url payload")).expect("JSON claims")
}

/// `token` with its claims edited by `edit` and signed again (RS256) with `key`; the
/// header (alg, kid) is kept.
fn resign(token: &str, key: &Path, edit: impl FnOnce(&mut Value)) -> String {
    let header = token.split('.').next().expect("header");
    let mut claims = jwt_claims(token);
    edit(&mut claims);
    let pem = std::fs::read_to_string(key).expect("key");
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = B64.decode(b64).expect("PEM body");
    let pair = ring::signature::RsaKeyPair::from_pkcs8(&der).expect("RSA PKCS#8 key");
    let msg = format!("{header}.{}", B64URL.encode(claims.to_string()));
    let mut sig = vec![0; pair.public().modulus_len()];
    pair.sign(&ring::signature::RSA_PKCS1_SHA256, &ring::rand::SystemRandom::new(), msg.as_bytes(), &mut sig)
        .expect("sign");
    format!("{msg}.{}", B64URL.encode(sig))
}

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs() as i64
}

#[test]
fn service_account_tokens() {
    let keys = tempfile::tempdir().expect("tempdir");
    let (sa_key, sa_pub) = rsa_key(keys.path(), "sa");
    let (foreign_key, _) = rsa_key(keys.path(), "foreign");
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(
        &etcd.endpoint(),
        &[
            &format!("--service-account-issuer={ISSUER}"),
            &format!("--service-account-signing-key-file={}", sa_key.display()),
            &format!("--service-account-key-file={}", sa_pub.display()),
            &format!("--api-audiences={ISSUER}"),
            "--authorization-mode=Node,RBAC",
            "--anonymous-auth=false",
            DEFAULT_ADMISSION,
        ],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let as_token =
        |name: &str, token: &str| Kubeconfig::write(&api, dir.path(), name, Credential::Token(token));
    let refused = |name: &str, token: &str| {
        let err = as_token(name, token).kubectl_err(&["auth", "whoami"]);
        assert!(err.contains("Unauthorized"), "{name}: {err}");
    };

    namespace(&api, "team", &[]);
    let token = api.kubectl_ok(&["create", "token", "default", "-n", "team"]).trim().to_owned();
    let claims = jwt_claims(&token);
    assert_eq!(claims["iss"], ISSUER, "{claims}");
    assert_eq!(claims["sub"], "system:serviceaccount:team:default", "{claims}");
    assert_eq!(claims["aud"], json!([ISSUER]), "{claims}");
    assert_eq!(claims["kubernetes.io"]["namespace"], "team", "{claims}");
    assert_eq!(claims["kubernetes.io"]["serviceaccount"]["name"], "default", "{claims}");
    let exp = claims["exp"].as_i64().expect("exp");
    let iat = claims["iat"].as_i64().expect("iat");
    assert_eq!(exp - iat, 3600, "default expiration is an hour: {claims}");

    // The token authenticates as the service account.
    let sa = as_token("sa", &token);
    let me = json(&sa.kubectl_ok(&["auth", "whoami", "-o", "json"]));
    let user = &me["status"]["userInfo"];
    assert_eq!(user["username"], "system:serviceaccount:team:default", "{me}");
    for g in ["system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"] {
        assert!(user["groups"].as_array().is_some_and(|gs| gs.contains(&json!(g))), "{g} missing: {me}");
    }
    let err = sa.kubectl_err(&["get", "pods", "-n", "team"]);
    assert!(
        err.contains(r#"User "system:serviceaccount:team:default" cannot list resource "pods""#),
        "no bindings, so 403: {err}"
    );

    // Service account issuer discovery: the OIDC document names the issuer and the JWKS,
    // whose key (found by the token's `kid`) verifies the token's signature, as a relying
    // party outside the cluster would check it.
    let config = json(&api.kubectl_ok(&["get", "--raw", "/.well-known/openid-configuration"]));
    assert_eq!(config["issuer"], ISSUER, "{config}");
    assert!(
        config["jwks_uri"]
            .as_str()
            .is_some_and(|u| u.starts_with("https://") && u.ends_with("/openid/v1/jwks")),
        "{config}"
    );
    assert_eq!(config["id_token_signing_alg_values_supported"], json!(["RS256"]), "{config}");
    let jwks = json(&api.kubectl_ok(&["get", "--raw", "/openid/v1/jwks"]));
    let header: Value =
        serde_json::from_slice(&B64URL.decode(token.split('.').next().expect("header")).expect("base64"))
            .expect("JSON header");
    let jwk = jwks["keys"]
        .as_array()
        .and_then(|ks| ks.iter().find(|k| k["kid"] == header["kid"]))
        .unwrap_or_else(|| panic!("no key {} in {jwks}", header["kid"]));
    let component = |name: &str| B64URL.decode(jwk[name].as_str().expect("member")).expect("base64");
    let (signed, sig) = token.rsplit_once('.').expect("signature");
    ring::signature::RsaPublicKeyComponents { n: component("n"), e: component("e") }
        .verify(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            signed.as_bytes(),
            &B64URL.decode(sig).expect("base64"),
        )
        .expect("the token verifies with the published key");
    // Service accounts may read both (the system:service-account-issuer-discovery binding).
    sa.kubectl_ok(&["get", "--raw", "/openid/v1/jwks"]);

    // TokenReview by the admin.
    let review = |t: &str| {
        let body =
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": t}});
        let out = api.kubectl_stdin(&["create", "-f", "-", "-o", "json"], &body.to_string());
        assert!(out.status.success(), "TokenReview: {}", stderr(&out));
        json(&stdout(&out))
    };
    let r = review(&token);
    assert_eq!(r["status"]["authenticated"], true, "{r}");
    assert_eq!(r["status"]["user"]["username"], "system:serviceaccount:team:default", "{r}");
    assert_eq!(r["status"]["audiences"], json!([ISSUER]), "{r}");
    let r = review("not-a-token");
    assert_ne!(r["status"]["authenticated"], true, "{r}");

    // Refused: garbage, a tampered payload, an expired token, one signed by another key,
    // one for another audience.
    refused("garbage", "garbage-token");
    let parts: Vec<&str> = token.split('.').collect();
    let mut forged = jwt_claims(&token);
    forged["sub"] = json!("system:serviceaccount:kube-system:default");
    refused("tampered", &format!("{}.{}.{}", parts[0], B64URL.encode(forged.to_string()), parts[2]));
    let t = now();
    refused(
        "expired",
        &resign(&token, &sa_key, |c| {
            c["iat"] = json!(t - 7200);
            c["nbf"] = json!(t - 7200);
            c["exp"] = json!(t - 3600);
        }),
    );
    refused("foreign", &resign(&token, &foreign_key, |_| {}));
    // Sanity check of resign itself: the same claims signed with the server's key pass.
    as_token("resigned", &resign(&token, &sa_key, |_| {})).kubectl_ok(&["auth", "whoami"]);
    let elsewhere =
        api.kubectl_ok(&["create", "token", "default", "-n", "team", "--audience=https://elsewhere.example"]);
    refused("elsewhere", elsewhere.trim());

    // A token bound to a pod lives as long as the pod.
    let out = create(&api, &pod_yaml("team", "p", ""));
    assert!(out.status.success(), "{}", stderr(&out));
    let bound = api
        .kubectl_ok(&[
            "create",
            "token",
            "default",
            "-n",
            "team",
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            "p",
        ])
        .trim()
        .to_owned();
    assert_eq!(jwt_claims(&bound)["kubernetes.io"]["pod"]["name"], "p", "{}", jwt_claims(&bound));
    let bound_user = as_token("bound", &bound);
    let me = json(&bound_user.kubectl_ok(&["auth", "whoami", "-o", "json"]));
    assert_eq!(me["status"]["userInfo"]["username"], "system:serviceaccount:team:default", "{me}");
    assert_eq!(
        me["status"]["userInfo"]["extra"]["authentication.kubernetes.io/pod-name"],
        json!(["p"]),
        "{me}"
    );
    let err = api.kubectl(&[
        "create",
        "token",
        "default",
        "-n",
        "team",
        "--bound-object-kind",
        "Pod",
        "--bound-object-name",
        "absent",
    ]);
    assert!(!err.status.success(), "a token bound to a missing pod");
    api.kubectl_ok(&["delete", "pod", "p", "-n", "team", "--grace-period=0", "--force"]);
    // Authenticated tokens are cached for 10 s, as upstream's token cache does: the
    // refusal comes within that.
    wait_for("the pod-bound token is refused", WAIT, POLL, || {
        let out = bound_user.kubectl(&["auth", "whoami"]);
        (!out.status.success() && stderr(&out).contains("Unauthorized")).then_some(())
    });
    sa.kubectl_ok(&["auth", "whoami"]);

    // Deleting the service account revokes its tokens.
    api.kubectl_ok(&["create", "serviceaccount", "temp", "-n", "team"]);
    let temp_token = api.kubectl_ok(&["create", "token", "temp", "-n", "team"]).trim().to_owned();
    let temp = as_token("temp", &temp_token);
    temp.kubectl_ok(&["auth", "whoami"]);
    api.kubectl_ok(&["delete", "serviceaccount", "temp", "-n", "team"]);
    wait_for("a deleted service account's token is refused", WAIT, POLL, || {
        let out = temp.kubectl(&["auth", "whoami"]);
        (!out.status.success() && stderr(&out).contains("Unauthorized")).then_some(())
    });
}

// ---------------------------------------------------------------------------------------
// 3. The Node authorizer and NodeRestriction.
// ---------------------------------------------------------------------------------------

#[test]
fn node_authorizer() {
    let ca = TestCa::new("e2e client CA");
    let keys = tempfile::tempdir().expect("tempdir");
    let (sa_key, sa_pub) = rsa_key(keys.path(), "sa");
    let etcd = Etcd::start(EtcdOptions::default());
    let client_ca = format!("--client-ca-file={}", ca.cert.display());
    let api = KubeApiserver::start(
        &etcd.endpoint(),
        &[
            &client_ca,
            "--authorization-mode=Node,RBAC",
            "--anonymous-auth=false",
            "--enable-admission-plugins=NodeRestriction",
            &format!("--service-account-issuer={ISSUER}"),
            &format!("--service-account-signing-key-file={}", sa_key.display()),
            &format!("--service-account-key-file={}", sa_pub.display()),
        ],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let n1 = Kubeconfig::write(
        &api,
        dir.path(),
        "system:node:n1",
        Credential::Cert(&ca.client_cert("system:node:n1", Some("system:nodes"))),
    );

    namespace(&api, "team", &[]);
    for node in ["n1", "n2"] {
        apply(
            &api,
            &format!(
                "apiVersion: v1\nkind: Node\nmetadata:\n  name: {node}\n  labels: {{kubernetes.io/hostname: {node}}}\n"
            ),
        );
    }
    for s in ["s1", "s2", "s3"] {
        api.kubectl_ok(&["create", "secret", "generic", s, "-n", "team", "--from-literal=k=v"]);
    }
    api.kubectl_ok(&["create", "serviceaccount", "runner", "-n", "team"]);
    for (pod, node, secret) in [("p1", "n1", "s1"), ("p2", "n2", "s2")] {
        let spec = format!(
            "  nodeName: {node}\n  serviceAccountName: runner\n  volumes:\n  - name: s\n    secret: {{secretName: {secret}}}\n"
        );
        let out = create(&api, &pod_yaml("team", pod, &spec));
        assert!(out.status.success(), "{}", stderr(&out));
    }

    let me = json(&n1.kubectl_ok(&["auth", "whoami", "-o", "json"]));
    assert_eq!(me["status"]["userInfo"]["username"], "system:node:n1", "{me}");
    assert!(
        me["status"]["userInfo"]["groups"].as_array().is_some_and(|g| g.contains(&json!("system:nodes"))),
        "{me}"
    );

    // A secret used by a pod on n1: readable by n1.
    wait_for("n1 may get s1", WAIT, POLL, || {
        n1.kubectl(&["get", "secret", "s1", "-n", "team"]).status.success().then_some(())
    });
    // A secret used only by a pod on n2, and one no pod uses: refused.
    for s in ["s2", "s3"] {
        let err = n1.kubectl_err(&["get", "secret", s, "-n", "team"]);
        assert!(
            err.contains(&format!(
                r#"secrets "{s}" is forbidden: User "system:node:n1" cannot get resource "secrets" in API group "" in the namespace "team""#
            )),
            "{err}"
        );
        assert!(err.contains("no relationship found between node 'n1' and this object"), "{err}");
    }
    let err = n1.kubectl_err(&["get", "secrets", "-n", "team"]);
    assert!(err.contains(r#"User "system:node:n1" cannot list resource "secrets""#), "{err}");
    let err = n1.kubectl_err(&["get", "secrets", "-A"]);
    assert!(err.contains("forbidden"), "{err}");

    // Nodes: n1 may read nodes and modify itself; NodeRestriction refuses changes to n2.
    n1.kubectl_ok(&["get", "node", "n2"]);
    n1.kubectl_ok(&["label", "node", "n1", "e2e=own"]);
    let err = n1.kubectl_err(&["label", "node", "n2", "e2e=other"]);
    assert!(err.contains(r#"node "n1" is not allowed to modify node "n2""#), "{err}");
    let labels = json(&api.kubectl_ok(&["get", "node", "n2", "-o", "json"]));
    assert!(labels["metadata"]["labels"]["e2e"].is_null(), "{labels}");
    // NodeRestriction: a node may not delete another node's pods either.
    let err = n1.kubectl_err(&["delete", "pod", "p2", "-n", "team", "--wait=false"]);
    assert!(err.contains("forbidden"), "{err}");

    // Tokens: the Node authorizer lets n1 request tokens of accounts its pods run as;
    // NodeRestriction only ones bound to a pod on n1.
    let uid =
        |pod: &str| api.kubectl_ok(&["get", "pod", pod, "-n", "team", "-o", "jsonpath={.metadata.uid}"]);
    let token_for = |pod: &str| {
        let uid = format!("--bound-object-uid={}", uid(pod));
        let name = format!("--bound-object-name={pod}");
        n1.kubectl(&["create", "token", "runner", "-n", "team", "--bound-object-kind=Pod", &name, &uid])
    };
    let out = token_for("p1");
    assert!(out.status.success(), "n1 refused a token bound to its own pod: {}", stderr(&out));
    let err = stderr(&token_for("p2"));
    assert!(err.contains("node requested token bound to a pod scheduled on a different node"), "{err}");
    let err = n1.kubectl_err(&["create", "token", "runner", "-n", "team"]);
    assert!(err.contains("node requested token not bound to a pod"), "{err}");

    // The graph follows pods: once p1 is gone, n1 loses s1.
    api.kubectl_ok(&["delete", "pod", "p1", "-n", "team", "--grace-period=0", "--force"]);
    wait_for("n1 loses s1 with p1", WAIT, POLL, || {
        let out = n1.kubectl(&["get", "secret", "s1", "-n", "team"]);
        (!out.status.success() && stderr(&out).contains("forbidden")).then_some(())
    });
}

// ---------------------------------------------------------------------------------------
// 4. Mutating and validating admission webhooks over HTTPS.
// ---------------------------------------------------------------------------------------

/// The webhook's policy: `/mutate` labels objects `mutated=yes` (unless annotated
/// `e2e.k8s.io/skip-mutation`), `/validate` denies objects without that label.
fn webhook_handler(path: &str, request: &Value) -> Value {
    // A subresource with a kind of its own is reviewed as that kind, as upstream.
    if request["subResource"] == "binding"
        && request["kind"] != json!({"group": "", "version": "v1", "kind": "Binding"})
    {
        return json!({"allowed": false, "status": {"code": 400, "message": format!("binding reviewed as {}", request["kind"])}});
    }
    let object = &request["object"];
    let labels = &object["metadata"]["labels"];
    match path {
        "/mutate" => {
            if object["metadata"]["annotations"]["e2e.k8s.io/skip-mutation"].is_string() {
                return json!({"allowed": true});
            }
            let patch = if labels.is_object() {
                json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}])
            } else {
                json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}])
            };
            json!({"allowed": true, "patchType": "JSONPatch", "patch": B64.encode(patch.to_string())})
        }
        "/validate" if labels["mutated"] == "yes" => json!({"allowed": true}),
        "/validate" => {
            json!({"allowed": false, "status": {"code": 403, "message": "objects here must carry mutated=yes"}})
        }
        _ => json!({"allowed": false, "status": {"code": 404, "message": "no such webhook"}}),
    }
}

fn webhook_config(kind: &str, name: &str, url: &str, ca_bundle: &str, operations: &str) -> String {
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: {kind}
metadata:
  name: {name}
webhooks:
- name: {name}.e2e.k8s.io
  clientConfig:
    url: {url}
    caBundle: {ca_bundle}
  rules:
  - operations: {operations}
    apiGroups: [""]
    apiVersions: [v1]
    resources: [pods, pods/binding, configmaps]
  namespaceSelector:
    matchLabels: {{webhooks: "on"}}
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: 5
"#
    )
}

fn configmap(ns: &str, name: &str, skip_mutation: bool) -> String {
    let annotations =
        if skip_mutation { "  annotations: {e2e.k8s.io/skip-mutation: \"true\"}\n" } else { "" };
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n{annotations}data: {{k: v}}\n"
    )
}

#[test]
fn webhooks() {
    let ca = TestCa::new("e2e webhook CA");
    let mut hook = WebhookServer::start(&ca, webhook_handler);
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(&etcd.endpoint(), &[DEFAULT_ADMISSION]);
    namespace(&api, "hooked", &["webhooks=on"]);
    namespace(&api, "plain", &[]);
    let bundle = B64.encode(ca.pem());
    let label = |kind: &str, ns: &str, name: &str| -> Value {
        json(&api.kubectl_ok(&["get", kind, name, "-n", ns, "-o", "json"]))["metadata"]["labels"]["mutated"]
            .clone()
    };

    apply(
        &api,
        &webhook_config("MutatingWebhookConfiguration", "mutate", &hook.url("/mutate"), &bundle, "[CREATE]"),
    );
    let mut n = 0;
    wait_for("the mutating webhook labels new configmaps", WAIT, POLL, || {
        n += 1;
        let name = format!("probe-{n}");
        let out = create(&api, &configmap("hooked", &name, false));
        assert!(out.status.success(), "{}", stderr(&out));
        (label("configmap", "hooked", &name) == "yes").then_some(())
    });
    assert!(hook.calls() > 0);
    // Pods too, keeping their own labels.
    let out = create(&api, &pod_yaml("hooked", "web", ""));
    assert!(out.status.success(), "{}", stderr(&out));
    let pod = json(&api.kubectl_ok(&["get", "pod", "web", "-n", "hooked", "-o", "json"]));
    assert_eq!(pod["metadata"]["labels"], json!({"app": "e2e", "mutated": "yes"}), "{pod}");
    // Namespaces outside the selector are left alone.
    let out = create(&api, &configmap("plain", "untouched", false));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(label("configmap", "plain", "untouched").is_null());

    apply(
        &api,
        &webhook_config(
            "ValidatingWebhookConfiguration",
            "validate",
            &hook.url("/validate"),
            &bundle,
            "[CREATE, UPDATE]",
        ),
    );
    wait_for("the validating webhook denies unlabelled configmaps", WAIT, POLL, || {
        n += 1;
        let out = create(&api, &configmap("hooked", &format!("skipped-{n}"), true));
        if out.status.success() {
            return None;
        }
        let err = stderr(&out);
        assert!(
            err.contains(
                r#"admission webhook "validate.e2e.k8s.io" denied the request: objects here must carry mutated=yes"#
            ),
            "{err}"
        );
        Some(())
    });
    // Mutated objects pass validation; removing the label on update does not.
    let out = create(&api, &configmap("hooked", "kept", false));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(label("configmap", "hooked", "kept"), "yes");
    let out = api.kubectl(&["label", "configmap", "kept", "-n", "hooked", "mutated-"]);
    assert!(!out.status.success() && stderr(&out).contains("denied the request"), "{}", stderr(&out));
    assert_eq!(label("configmap", "hooked", "kept"), "yes");
    // A binding (`pods/binding`, the scheduler's write) is admitted like any create.
    let files = tempfile::tempdir().expect("tempdir");
    let bind = |skip_mutation: bool| {
        let annotations =
            if skip_mutation { r#""annotations":{"e2e.k8s.io/skip-mutation":"true"}"# } else { "" };
        let path = files.path().join("binding.json");
        std::fs::write(
            &path,
            format!(
                r#"{{"apiVersion":"v1","kind":"Binding","metadata":{{"name":"web"{}{annotations}}},"target":{{"kind":"Node","name":"n1"}}}}"#,
                if skip_mutation { "," } else { "" }
            ),
        )
        .expect("binding");
        let path = path.display().to_string();
        api.kubectl(&["create", "--raw", "/api/v1/namespaces/hooked/pods/web/binding", "-f", &path])
    };
    let out = bind(true);
    assert!(!out.status.success() && stderr(&out).contains("denied the request"), "{}", stderr(&out));
    let out = bind(false);
    assert!(out.status.success(), "{}", stderr(&out));
    let node = api.kubectl_ok(&["get", "pod", "web", "-n", "hooked", "-o", "jsonpath={.spec.nodeName}"]);
    assert_eq!(node, "n1");

    // The webhook goes away: failurePolicy Fail refuses, Ignore admits.
    hook.stop();
    let out = create(&api, &configmap("hooked", "while-down", false));
    assert!(!out.status.success(), "admitted with the webhook down and failurePolicy: Fail");
    assert!(stderr(&out).contains(r#"failed calling webhook "mutate.e2e.k8s.io""#), "{}", stderr(&out));
    let ignore = r#"[{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]"#;
    api.kubectl_ok(&["patch", "mutatingwebhookconfiguration", "mutate", "--type=json", "-p", ignore]);
    api.kubectl_ok(&["patch", "validatingwebhookconfiguration", "validate", "--type=json", "-p", ignore]);
    let admitted = wait_for("failurePolicy: Ignore admits", WAIT, POLL, || {
        n += 1;
        let name = format!("ignored-{n}");
        create(&api, &configmap("hooked", &name, false)).status.success().then_some(name)
    });
    assert!(label("configmap", "hooked", &admitted).is_null(), "no webhook ran, so no label");
}

// ---------------------------------------------------------------------------------------
// 5. ResourceQuota, LimitRanger, PodSecurity and the other default pod admission plugins.
// ---------------------------------------------------------------------------------------

#[test]
fn quota_limits_podsecurity() {
    let etcd = Etcd::start(EtcdOptions::default());
    let api = std::sync::Arc::new(KubeApiserver::start(&etcd.endpoint(), &[DEFAULT_ADMISSION]));

    // ResourceQuota. No resourcequota controller runs here: the admin writes the status it
    // would write. configmaps=0 lets the test see when admission has the quota.
    namespace(&api, "quota", &[]);
    apply(
        &api,
        "apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: q\n  namespace: quota\nspec:\n  hard: {pods: \"2\", configmaps: \"0\"}\n",
    );
    api.kubectl_ok(&[
        "patch",
        "resourcequota",
        "q",
        "-n",
        "quota",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status": {"hard": {"pods": "2", "configmaps": "0"}, "used": {"pods": "0", "configmaps": "0"}}}"#,
    ]);
    wait_for("the quota is enforced", WAIT, POLL, || {
        let out = api.kubectl(&["create", "configmap", "probe", "-n", "quota"]);
        if out.status.success() {
            api.kubectl_ok(&["delete", "configmap", "probe", "-n", "quota"]);
            return None;
        }
        let err = stderr(&out);
        assert!(
            err.contains(
                "exceeded quota: q, requested: configmaps=1, used: configmaps=0, limited: configmaps=0"
            ),
            "{err}"
        );
        Some(())
    });
    let handles: Vec<_> = (0..10)
        .map(|i| {
            let api = api.clone();
            std::thread::spawn(move || create(&api, &pod_yaml("quota", &format!("burst-{i}"), "")))
        })
        .collect();
    let results: Vec<Output> = handles.into_iter().map(|h| h.join().expect("thread")).collect();
    let created = results.iter().filter(|o| o.status.success()).count();
    let errors: Vec<String> = results.iter().filter(|o| !o.status.success()).map(stderr).collect();
    assert_eq!(created, 2, "exactly the quota's two pods are admitted; refusals: {errors:#?}");
    for e in &errors {
        assert!(e.contains("exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"), "{e}");
    }
    let q = json(&api.kubectl_ok(&["get", "resourcequota", "q", "-n", "quota", "-o", "json"]));
    assert_eq!(q["status"]["used"]["pods"], "2", "{q}");

    // LimitRanger fills in defaults and enforces maxima; ServiceAccount, Priority and
    // DefaultTolerationSeconds run on every pod.
    namespace(&api, "limits", &[]);
    apply(
        &api,
        "apiVersion: v1\nkind: LimitRange\nmetadata:\n  name: defaults\n  namespace: limits\nspec:\n  limits:\n  - type: Container\n    default: {cpu: 500m, memory: 128Mi}\n    defaultRequest: {cpu: 100m, memory: 64Mi}\n    max: {cpu: \"1\"}\n",
    );
    let mut n = 0;
    let pod = wait_for("LimitRanger defaults", WAIT, POLL, || {
        n += 1;
        let name = format!("sized-{n}");
        let out = create(&api, &pod_yaml("limits", &name, ""));
        assert!(out.status.success(), "{}", stderr(&out));
        let pod = json(&api.kubectl_ok(&["get", "pod", &name, "-n", "limits", "-o", "json"]));
        (!pod["spec"]["containers"][0]["resources"]["limits"].is_null()).then_some(pod)
    });
    let resources = &pod["spec"]["containers"][0]["resources"];
    assert_eq!(resources["limits"], json!({"cpu": "500m", "memory": "128Mi"}), "{pod}");
    assert_eq!(resources["requests"], json!({"cpu": "100m", "memory": "64Mi"}), "{pod}");
    assert!(
        pod["metadata"]["annotations"]["kubernetes.io/limit-ranger"]
            .as_str()
            .is_some_and(|a| a.starts_with("LimitRanger plugin set:")),
        "{pod}"
    );
    assert_eq!(pod["spec"]["serviceAccountName"], "default", "{pod}");
    assert!(
        pod["spec"]["volumes"].as_array().is_some_and(|v| v
            .iter()
            .any(|v| v["name"].as_str().is_some_and(|n| n.starts_with("kube-api-access-")))),
        "ServiceAccount admission mounts the API credentials: {pod}"
    );
    assert_eq!(pod["spec"]["priority"], 0, "{pod}");
    let tolerations = pod["spec"]["tolerations"].as_array().cloned().unwrap_or_default();
    for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
        assert!(
            tolerations.contains(
                &json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
            ),
            "DefaultTolerationSeconds for {key}: {pod}"
        );
    }
    let big = "  containers:\n  - name: c\n    image: registry.k8s.io/pause:3.10\n    resources: {limits: {cpu: \"2\"}}\n";
    let out = create(
        &api,
        &format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: big\n  namespace: limits\nspec:\n{big}"),
    );
    assert!(!out.status.success(), "a pod over the LimitRange max was admitted");
    assert!(
        stderr(&out).contains("maximum cpu usage per Container is 1, but limit is 2"),
        "{}",
        stderr(&out)
    );

    // PodSecurity: restricted enforced refuses a privileged pod, admits a hardened one;
    // warn only warns.
    namespace(&api, "secure", &["pod-security.kubernetes.io/enforce=restricted"]);
    namespace(&api, "warned", &["pod-security.kubernetes.io/warn=restricted"]);
    let privileged = |ns: &str, name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  containers:\n  - name: c\n    image: registry.k8s.io/pause:3.10\n    securityContext: {{privileged: true}}\n"
        )
    };
    let err = wait_for("PodSecurity enforces restricted", WAIT, POLL, || {
        let out =
            api.kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], &privileged("secure", "priv"));
        (!out.status.success()).then(|| stderr(&out))
    });
    assert!(err.contains(r#"pods "priv" is forbidden: violates PodSecurity "restricted:latest""#), "{err}");
    assert!(
        err.contains(r#"privileged (container "c" must not set securityContext.privileged=true)"#),
        "{err}"
    );
    let out = create(&api, &privileged("secure", "priv"));
    assert!(!out.status.success(), "privileged pod admitted under restricted");
    let hardened = "  securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}\n  containers:\n  - name: c\n    image: registry.k8s.io/pause:3.10\n    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}\n";
    let out = create(
        &api,
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hardened\n  namespace: secure\nspec:\n{hardened}"
        ),
    );
    assert!(out.status.success(), "a restricted-compliant pod: {}", stderr(&out));
    let warning = wait_for("PodSecurity warns", WAIT, POLL, || {
        let out =
            api.kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], &privileged("warned", "loud"));
        assert!(out.status.success(), "warn mode must admit: {}", stderr(&out));
        let err = stderr(&out);
        err.contains("would violate PodSecurity").then_some(err)
    });
    assert!(warning.contains(r#"Warning: would violate PodSecurity "restricted:latest""#), "{warning}");
}

// ---------------------------------------------------------------------------------------
// 6. Audit logging and encryption at rest.
// ---------------------------------------------------------------------------------------

#[test]
fn audit_and_encryption() {
    let files = tempfile::tempdir().expect("tempdir");
    let policy = files.path().join("audit-policy.yaml");
    std::fs::write(&policy, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n")
        .expect("policy");
    let audit_log = files.path().join("audit.log");
    let key: [u8; 32] = rand::random();
    let encryption = files.path().join("encryption.yaml");
    std::fs::write(
        &encryption,
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n      - name: key1\n        secret: {}\n  - identity: {{}}\n",
            B64.encode(key)
        ),
    )
    .expect("encryption config");
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(
        &etcd.endpoint(),
        &[
            &format!("--audit-policy-file={}", policy.display()),
            &format!("--audit-log-path={}", audit_log.display()),
            &format!("--encryption-provider-config={}", encryption.display()),
            DEFAULT_ADMISSION,
        ],
    );

    // Encryption at rest: secrets are stored sealed, configmaps (not configured) are not;
    // both read back through the API in the clear.
    api.kubectl_ok(&["create", "secret", "generic", "s1", "--from-literal=password=s3cret-value"]);
    api.kubectl_ok(&["create", "configmap", "plain", "--from-literal=k=visible-value"]);
    let raw = etcd.etcdctl(&["get", "/registry/secrets/default/s1", "--print-value-only"]);
    assert!(raw.status.success(), "{}", stderr(&raw));
    assert!(raw.stdout.starts_with(b"k8s:enc:aescbc:v1:key1:"), "{}", String::from_utf8_lossy(&raw.stdout));
    let sealed = &raw.stdout;
    assert!(!sealed.windows(b"s3cret-value".len()).any(|w| w == b"s3cret-value"), "plaintext in etcd");
    let data = api.kubectl_ok(&["get", "secret", "s1", "-o", "jsonpath={.data}"]);
    assert_eq!(json(&data), json!({"password": B64.encode("s3cret-value")}));
    let raw = etcd.etcdctl(&["get", "/registry/configmaps/default/plain", "--print-value-only"]);
    assert!(
        raw.stdout.windows(b"visible-value".len()).any(|w| w == b"visible-value"),
        "configmaps are not encrypted"
    );
    // Updates are sealed too.
    api.kubectl_ok(&[
        "patch",
        "secret",
        "s1",
        "--type=merge",
        "-p",
        r#"{"stringData": {"password": "rotated-value"}}"#,
    ]);
    let raw = etcd.etcdctl(&["get", "/registry/secrets/default/s1", "--print-value-only"]);
    assert!(raw.stdout.starts_with(b"k8s:enc:aescbc:v1:key1:"));
    let data = api.kubectl_ok(&["get", "secret", "s1", "-o", "jsonpath={.data.password}"]);
    assert_eq!(data, B64.encode("rotated-value"));

    // Audit: one ResponseComplete event per request, at Metadata level.
    api.kubectl_ok(&["create", "configmap", "audited", "--from-literal=k=v"]);
    api.kubectl_ok(&["get", "--raw", "/api/v1/namespaces/default/configmaps/audited"]);
    let out = api.kubectl(&["get", "--raw", "/api/v1/namespaces/default/configmaps/missing"]);
    assert!(!out.status.success());
    // --wait=false: kubectl would otherwise GET the object until it is gone.
    api.kubectl_ok(&["delete", "configmap", "audited", "--wait=false"]);

    let events = wait_for("the audit log has the requests", WAIT, POLL, || {
        let text = std::fs::read_to_string(&audit_log).ok()?;
        let events: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("audit line is not JSON ({e}): {l}")))
            .collect();
        let done = events.iter().any(|e| {
            e["stage"] == "ResponseComplete" && e["verb"] == "delete" && e["objectRef"]["name"] == "audited"
        });
        done.then_some(events)
    });
    for e in &events {
        assert_eq!(e["apiVersion"], "audit.k8s.io/v1", "{e}");
        assert_eq!(e["kind"], "Event", "{e}");
        assert_eq!(e["level"], "Metadata", "{e}");
        assert!(e["auditID"].as_str().is_some_and(|id| !id.is_empty()), "{e}");
        assert!(e.get("requestObject").is_none() && e.get("responseObject").is_none(), "Metadata level: {e}");
    }
    let complete = |verb: &str, name: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| {
                e["stage"] == "ResponseComplete"
                    && e["verb"] == verb
                    && e["objectRef"]["resource"] == "configmaps"
                    && e["objectRef"]["namespace"] == "default"
                    && e["objectRef"]["name"] == name
            })
            .collect()
    };
    for (verb, name, code) in [
        ("create", "audited", 201),
        ("get", "audited", 200),
        ("get", "missing", 404),
        ("delete", "audited", 200),
    ] {
        let found = complete(verb, name);
        assert_eq!(found.len(), 1, "one ResponseComplete for {verb} {name}: {found:#?}");
        let e = found[0];
        assert_eq!(e["user"]["username"], "admin", "{e}");
        assert!(e["user"]["groups"].as_array().is_some_and(|g| g.contains(&json!("system:masters"))), "{e}");
        assert_eq!(e["objectRef"]["apiVersion"], "v1", "{e}");
        assert_eq!(e["responseStatus"]["code"], code, "{e}");
        assert!(
            e["requestURI"].as_str().is_some_and(|u| u.starts_with("/api/v1/namespaces/default/configmaps")),
            "{e}"
        );
        assert!(e["userAgent"].as_str().is_some_and(|u| u.starts_with("kubectl")), "{e}");
        assert!(e["sourceIPs"].as_array().is_some_and(|ips| !ips.is_empty()), "{e}");
        // Every request is also logged when received, under the same audit ID.
        let received =
            events.iter().filter(|r| r["auditID"] == e["auditID"] && r["stage"] == "RequestReceived").count();
        assert_eq!(received, 1, "one RequestReceived for {verb} {name}");
    }

    // PodSecurity's audit mode: the pod is admitted, its event carries the violation.
    api.kubectl_ok(&["create", "namespace", "audited-ns"]);
    api.kubectl_ok(&["label", "namespace", "audited-ns", "pod-security.kubernetes.io/audit=restricted"]);
    api.kubectl_ok(&["create", "serviceaccount", "default", "-n", "audited-ns"]);
    let out = api.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: loud\n  namespace: audited-ns\nspec:\n  containers:\n  - name: c\n    image: registry.k8s.io/pause:3.10\n    securityContext: {privileged: true}\n",
    );
    assert!(out.status.success(), "audit mode refused a pod: {}", stderr(&out));
    let annotations = wait_for("the pod's audit event", WAIT, POLL, || {
        let text = std::fs::read_to_string(&audit_log).ok()?;
        text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find_map(|e| {
            (e["stage"] == "ResponseComplete" && e["verb"] == "create" && e["objectRef"]["name"] == "loud")
                .then(|| e["annotations"].clone())
        })
    });
    let violations = annotations["pod-security.kubernetes.io/audit-violations"].as_str().unwrap_or_default();
    assert!(
        violations.starts_with(r#"would violate PodSecurity "restricted:latest": privileged"#),
        "{annotations}"
    );
    assert_eq!(
        annotations["pod-security.kubernetes.io/enforce-policy"], "privileged:latest",
        "{annotations}"
    );

    // Key rotation as upstream documents it: a new key first, the old one still listed;
    // a restarted server reads key1 values and any write re-seals them with key2.
    drop(api);
    let key2: [u8; 32] = rand::random();
    std::fs::write(
        &encryption,
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n      - name: key2\n        secret: {}\n      - name: key1\n        secret: {}\n",
            B64.encode(key2),
            B64.encode(key)
        ),
    )
    .expect("rotated encryption config");
    let api = KubeApiserver::start(
        &etcd.endpoint(),
        &[&format!("--encryption-provider-config={}", encryption.display()), DEFAULT_ADMISSION],
    );
    let data = api.kubectl_ok(&["get", "secret", "s1", "-o", "jsonpath={.data.password}"]);
    assert_eq!(data, B64.encode("rotated-value"), "a key1 value read under key2,key1");
    api.kubectl_ok(&["label", "secret", "s1", "rotated=yes"]);
    let raw = etcd.etcdctl(&["get", "/registry/secrets/default/s1", "--print-value-only"]);
    assert!(raw.stdout.starts_with(b"k8s:enc:aescbc:v1:key2:"), "{}", String::from_utf8_lossy(&raw.stdout));
}

/// The test webhook server itself, with curl: the test above depends on its answers.
#[test]
fn webhook_server_answers_reviews() {
    let ca = TestCa::new("e2e webhook CA");
    let mut hook = WebhookServer::start(&ca, webhook_handler);
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u-1", "object": {"metadata": {"name": "x"}}},
    });
    let base = hook.url("");
    let post = |path: &str| {
        Command::new("curl")
            .args(["-sS", "--max-time", "5", "--cacert"])
            .arg(&ca.cert)
            .args([
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                &review.to_string(),
                &format!("{base}{path}"),
            ])
            .output()
            .expect("curl")
    };
    let out = post("/mutate");
    assert!(out.status.success(), "{}", stderr(&out));
    let answer = json(&stdout(&out));
    assert_eq!(answer["kind"], "AdmissionReview", "{answer}");
    assert_eq!(answer["response"]["uid"], "u-1", "{answer}");
    assert_eq!(answer["response"]["patchType"], "JSONPatch", "{answer}");
    let patch = B64.decode(answer["response"]["patch"].as_str().expect("patch")).expect("base64");
    assert_eq!(
        serde_json::from_slice::<Value>(&patch).expect("JSON patch"),
        json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}])
    );
    let answer = json(&stdout(&post("/validate")));
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    assert_eq!(hook.calls(), 2);
    hook.stop();
    assert!(!post("/validate").status.success(), "still serving after stop");
}
