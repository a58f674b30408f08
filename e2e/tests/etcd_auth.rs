//! etcd's auth API (users, roles, key-range permissions, `auth enable`, simple and JWT
//! tokens, client-certificate identities): the same etcdctl session is run against
//! Debian's etcd 3.4 and ours and must print the same, step by step; what etcdctl cannot
//! show (token lifetimes, JWT verification, snapshots carrying users) is checked with
//! a gRPC client and with Debian's `etcdctl snapshot restore`.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use e2e::cluster::{plan, restore_and_start};
use e2e::pki::Pki;
use e2e::{Etcd, EtcdOptions, Flavor, loopback_ip};
use proto::etcdserverpb::{
    AuthRoleGrantPermissionRequest, AuthUserAddRequest, AuthUserGrantRoleRequest, AuthenticateRequest,
    LeaseGrantRequest, LeaseTimeToLiveRequest, PutRequest, RangeRequest, auth_client::AuthClient,
    kv_client::KvClient, lease_client::LeaseClient,
};
use tonic::Code;
use tonic::transport::Channel;

/// One etcdctl invocation: arguments and optional stdin.
struct Step(Vec<&'static str>, Option<&'static str>);

fn step(args: &[&'static str]) -> Step {
    Step(args.to_vec(), None)
}

fn run(e: &Etcd, args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = e.etcdctl_cmd(args);
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("running etcdctl");
    if let Some(input) = stdin {
        use std::io::Write;
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("writing stdin");
    }
    // A watch the server refuses ends by itself; one it accepts would run forever.
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("waiting for etcdctl").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("etcdctl output")
}

/// What a step printed, without what differs between runs anyway (log lines with
/// timestamps, the endpoint's address).
fn transcript(e: &Etcd, args: &[&str], out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stderr: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            l.starts_with("Error:") || l.starts_with("watch was canceled") || l.starts_with("Failed to")
        })
        .collect();
    let text = format!("$ {}\nrc={:?}\n{stdout}{}", args.join(" "), out.status.code(), stderr.join("\n"));
    text.replace(&e.endpoint(), "EP")
}

/// The session: bootstrapping root, a role with ranges, what its user may and may not
/// do, the management errors, a restart, a password change and a role deletion, then
/// auth disabled again.
fn session(e: &mut Etcd) -> Vec<String> {
    let before_restart = [
        step(&["auth", "enable"]),
        step(&["user", "add", "root:pw"]),
        // etcdctl creates and grants the root role when the server says it is missing.
        step(&["auth", "enable"]),
        step(&["get", "x"]),
        step(&["--user", "root:wrong", "get", "x"]),
        step(&["--user", "root:pw", "user", "add", "alice:a"]),
        step(&["--user", "root:pw", "user", "add", "root:x"]),
        step(&["--user", "root:pw", "role", "add", "r1"]),
        step(&["--user", "root:pw", "role", "grant-permission", "r1", "readwrite", "/a", "/b"]),
        step(&["--user", "root:pw", "role", "grant-permission", "r1", "read", "--prefix", "/p/"]),
        step(&["--user", "root:pw", "role", "grant-permission", "r1", "write", "/w"]),
        step(&["--user", "root:pw", "user", "grant-role", "alice", "r1"]),
        step(&["--user", "root:pw", "put", "/p/x", "px"]),
        step(&["--user", "alice:a", "put", "/a1", "v"]),
        step(&["--user", "alice:a", "put", "/b", "v"]),
        step(&["--user", "alice:a", "get", "/p/x"]),
        step(&["--user", "alice:a", "put", "/p/x", "1"]),
        step(&["--user", "alice:a", "get", "/a", "--prefix"]),
        step(&["--user", "alice:a", "get", "/a", "/b"]),
        step(&["--user", "alice:a", "get", "/a", "/c"]),
        step(&["--user", "alice:a", "put", "/w", "1"]),
        step(&["--user", "alice:a", "get", "/w"]),
        step(&["--user", "alice:a", "del", "/a1", "--prev-kv"]),
        step(&["--user", "alice:a", "del", "/w", "--prev-kv"]),
        Step(
            vec!["--user", "alice:a", "txn"],
            Some("value(\"/p/x\") = \"px\"\n\nput /a2 t\n\nput /zz t\n\n"),
        ),
        Step(
            vec!["--user", "alice:a", "txn"],
            Some("value(\"/p/x\") = \"px\"\n\nput /a2 t\n\nput /a3 t\n\n"),
        ),
        step(&["--user", "alice:a", "watch", "/zz"]),
        step(&["--user", "alice:a", "user", "get", "alice"]),
        step(&["--user", "alice:a", "user", "get", "root"]),
        step(&["--user", "alice:a", "role", "get", "r1"]),
        step(&["--user", "alice:a", "role", "get", "root"]),
        step(&["--user", "alice:a", "user", "list"]),
        step(&["--user", "alice:a", "role", "list"]),
        step(&["--user", "alice:a", "user", "add", "eve:e"]),
        step(&["--user", "alice:a", "auth", "disable"]),
        step(&["--user", "alice:a", "defrag"]),
        step(&["--user", "alice:a", "compaction", "1"]),
        step(&["--user", "alice:a", "alarm", "list"]),
        step(&["--user", "root:pw", "user", "delete", "root"]),
        step(&["--user", "root:pw", "user", "revoke-role", "root", "root"]),
        step(&["--user", "root:pw", "role", "delete", "root"]),
        step(&["--user", "root:pw", "role", "revoke-permission", "r1", "/zz"]),
        step(&["--user", "root:pw", "role", "grant-permission", "nosuch", "read", "x"]),
        step(&["--user", "root:pw", "user", "grant-role", "alice", "nosuch"]),
        step(&["--user", "root:pw", "user", "revoke-role", "alice", "nosuch"]),
        step(&["--user", "root:pw", "role", "add", "r1"]),
        step(&["--user", "root:pw", "user", "delete", "nosuch"]),
        step(&["--user", "root:pw", "user", "list"]),
        step(&["--user", "root:pw", "role", "list"]),
        step(&["--user", "root:pw", "role", "get", "r1"]),
        // A user without a password authenticates only by certificate.
        step(&["--user", "root:pw", "user", "add", "carol", "--no-password"]),
        step(&["--user", "carol:x", "get", "/a1"]),
        // An empty new password matches nothing, not even the empty one.
        step(&["--user", "root:pw", "user", "add", "dave:d"]),
        Step(vec!["--user", "root:pw", "user", "passwd", "dave", "--interactive=false"], Some("\n")),
        step(&["--user", "dave:d", "get", "/a1"]),
    ];
    let after_restart = [
        step(&["--user", "alice:a", "get", "/a", "--prefix", "--keys-only"]),
        step(&["--user", "root:pw", "role", "revoke-permission", "r1", "/a", "/b"]),
        step(&["--user", "alice:a", "get", "/a1"]),
        Step(vec!["--user", "root:pw", "user", "passwd", "alice", "--interactive=false"], Some("b2\n")),
        step(&["--user", "alice:a", "get", "/p/x"]),
        step(&["--user", "alice:b2", "get", "/p/x"]),
        step(&["--user", "root:pw", "role", "delete", "r1"]),
        step(&["--user", "root:pw", "user", "get", "alice"]),
        step(&["--user", "alice:b2", "get", "/p/x"]),
        step(&["--user", "root:pw", "auth", "disable"]),
        step(&["get", "/p/x"]),
        step(&["user", "list"]),
    ];
    let mut out = Vec::new();
    for Step(args, stdin) in &before_restart {
        out.push(transcript(e, args, &run(e, args, *stdin)));
    }
    // Users, roles and the enabled flag are stored: they survive a restart.
    e.health_user = Some("root:pw".into());
    e.restart();
    for Step(args, stdin) in &after_restart {
        out.push(transcript(e, args, &run(e, args, *stdin)));
    }
    out
}

#[test]
fn etcdctl_auth_session_prints_what_upstream_prints() {
    let mut real = Etcd::start(EtcdOptions { flavor: Flavor::Real, ..Default::default() });
    let want = session(&mut real);
    drop(real);
    let mut ours = Etcd::start(EtcdOptions::default());
    let got = session(&mut ours);
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(
            g,
            w,
            "ours (left) and Debian's etcd 3.4 (right) differ\nserver log:\n{}",
            ours.log_tail(20)
        );
    }
    assert_eq!(got.len(), want.len());
    // The session is not vacuous: what it must show, shown by both.
    let all = got.join("\n");
    for must in [
        "Error: etcdserver: root user does not exist",
        "Authentication Enabled",
        "Error: etcdserver: user name is empty",
        "Error: etcdserver: authentication failed, invalid user ID or password",
        "$ --user alice:a put /a1 v\nrc=Some(0)\nOK",
        "$ --user alice:a put /b v\nrc=Some(1)\nError: etcdserver: permission denied",
        "watch was canceled (rpc error: code = PermissionDenied desc = etcdserver: permission denied)",
        "Error: etcdserver: invalid auth management",
        "auth: permission denied",
        "Authentication Disabled",
        "auth: authentication failed, password was given for no password user",
    ] {
        assert!(all.contains(must), "session lacks {must:?}:\n{all}");
    }
}

fn openssl(args: &[&str]) {
    let out = Command::new("openssl").args(args).output().expect("openssl (install-deps installs it)");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

async fn connect(e: &Etcd) -> Channel {
    Channel::from_shared(e.endpoint()).expect("endpoint").connect().await.expect("connecting")
}

fn with_token<T>(msg: T, token: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut().insert("token", token.parse().expect("ascii token"));
    r
}

async fn token(auth: &mut AuthClient<Channel>, name: &str, password: &str) -> String {
    let req = AuthenticateRequest { name: name.into(), password: password.into() };
    auth.authenticate(req).await.expect("authenticate").into_inner().token
}

/// Makes root (password pw) and alice (password a, read-write on /a..) and enables auth.
fn bootstrap(e: &mut Etcd) {
    for args in [
        &["user", "add", "root:pw"][..],
        &["role", "add", "root"],
        &["user", "grant-role", "root", "root"],
        &["user", "add", "alice:a"],
        &["role", "add", "r1"],
        &["role", "grant-permission", "r1", "readwrite", "/a", "/b"],
        &["user", "grant-role", "alice", "r1"],
        &["auth", "enable"],
    ] {
        e.etcdctl_ok(args);
    }
    e.health_user = Some("root:pw".into());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_tokens_are_stateless_and_carry_the_auth_revision() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = (dir.path().join("jwt.key"), dir.path().join("jwt.pub"));
    let (k, p) = (key.to_str().unwrap(), public.to_str().unwrap());
    openssl(&["genrsa", "-out", k, "2048"]);
    openssl(&["rsa", "-in", k, "-pubout", "-out", p]);
    let spec = format!("--auth-token=jwt,pub-key={p},priv-key={k},sign-method=RS256,ttl=10m");
    let mut e = Etcd::start(EtcdOptions { extra_args: vec![spec], ..Default::default() });
    bootstrap(&mut e);
    // etcdctl authenticates and uses the JWT like any token.
    assert_eq!(e.etcdctl_ok(&["--user", "alice:a", "put", "/a1", "1"]), "OK\n");

    let mut auth = AuthClient::new(connect(&e).await);
    let jwt = token(&mut auth, "alice", "a").await;
    assert_eq!(jwt.split('.').count(), 3, "a JWT: {jwt}");
    let mut kv = KvClient::new(connect(&e).await);
    let get = |key: &str| RangeRequest { key: key.into(), ..Default::default() };
    assert_eq!(kv.range(with_token(get("/a1"), &jwt)).await.unwrap().into_inner().kvs.len(), 1);
    let denied = kv.range(with_token(get("/z"), &jwt)).await.unwrap_err();
    assert_eq!((denied.code(), denied.message()), (Code::PermissionDenied, "etcdserver: permission denied"));

    // No state behind it: the token still works after a restart.
    e.restart();
    let mut kv = KvClient::new(connect(&e).await);
    assert_eq!(kv.range(with_token(get("/a1"), &jwt)).await.unwrap().into_inner().kvs.len(), 1);

    // A forged signature is not a token.
    let (head, _) = jwt.rsplit_once('.').unwrap();
    let forged = format!("{head}.AAAA");
    let err = kv.range(with_token(get("/a1"), &forged)).await.unwrap_err();
    assert_eq!((err.code(), err.message()), (Code::Unauthenticated, "etcdserver: invalid auth token"));

    // Any change to users or roles makes older JWTs stale (clients authenticate again).
    let mut auth = AuthClient::new(connect(&e).await);
    let root = token(&mut auth, "root", "pw").await;
    let perm = proto::authpb::Permission { perm_type: 0, key: b"/q".to_vec(), range_end: vec![] };
    auth.role_grant_permission(with_token(
        AuthRoleGrantPermissionRequest { name: "r1".into(), perm: Some(perm) },
        &root,
    ))
    .await
    .expect("grant");
    let err = kv.range(with_token(get("/a1"), &jwt)).await.unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (Code::InvalidArgument, "etcdserver: revision of auth store is old")
    );
    let fresh = token(&mut auth, "alice", "a").await;
    assert_eq!(kv.range(with_token(get("/q"), &fresh)).await.unwrap().into_inner().count, 0);

    // A bad key file is a startup error naming the flag.
    let out = Command::new(e2e::bin("etcd"))
        .arg("--auth-token=jwt,pub-key=/nonexistent.pem,sign-method=RS256")
        .arg(format!("--data-dir={}", dir.path().join("d").display()))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--auth-token"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_tokens_are_checked_at_apply_and_forgotten_on_restart() {
    let mut e = Etcd::start(EtcdOptions::default());
    bootstrap(&mut e);
    let mut auth = AuthClient::new(connect(&e).await);
    let alice = token(&mut auth, "alice", "a").await;
    let (prefix, index) = alice.split_once('.').expect("simple token: <random>.<n>");
    assert!(prefix.len() == 16 && prefix.chars().all(|c| c.is_ascii_alphabetic()), "{alice}");
    assert!(index.parse::<u64>().is_ok(), "{alice}");

    let mut kv = KvClient::new(connect(&e).await);
    let put = |key: &str| PutRequest { key: key.into(), value: b"v".to_vec(), ..Default::default() };
    kv.put(with_token(put("/a5"), &alice)).await.expect("alice may write /a5");
    let err = kv.put(with_token(put("/c"), &alice)).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);

    // Wrong passwords and Authenticate while auth is disabled.
    let err = auth.authenticate(AuthenticateRequest { name: "alice".into(), password: "x".into() }).await;
    assert_eq!(err.unwrap_err().message(), "etcdserver: authentication failed, invalid user ID or password");

    // A granted role takes effect for the next request of the same token.
    let root = token(&mut auth, "root", "pw").await;
    auth.user_grant_role(with_token(
        AuthUserGrantRoleRequest { user: "alice".into(), role: "root".into() },
        &root,
    ))
    .await
    .expect("grant root to alice");
    kv.put(with_token(put("/c"), &alice)).await.expect("alice is root now");

    // Which keys a lease holds is data: only for a caller who may read them all.
    let mut lease = LeaseClient::new(connect(&e).await);
    let granted = lease.lease_grant(with_token(LeaseGrantRequest { ttl: 600, id: 0 }, &root)).await.unwrap();
    let id = granted.into_inner().id;
    let secret = PutRequest { key: b"/secret".to_vec(), lease: id, ..Default::default() };
    kv.put(with_token(secret, &root)).await.expect("root puts a leased key");
    let bob = {
        let mut auth = AuthClient::new(connect(&e).await);
        auth.user_add(with_token(
            AuthUserAddRequest { name: "bob".into(), password: "b".into(), ..Default::default() },
            &root,
        ))
        .await
        .expect("add bob");
        token(&mut auth, "bob", "b").await
    };
    let ttl = |keys: bool| LeaseTimeToLiveRequest { id, keys };
    let err = lease.lease_time_to_live(with_token(ttl(true), &bob)).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    let err = lease.lease_time_to_live(ttl(true)).await.unwrap_err();
    assert_eq!(err.message(), "etcdserver: user name is empty");
    assert_eq!(
        lease.lease_time_to_live(with_token(ttl(false), &bob)).await.unwrap().into_inner().granted_ttl,
        600
    );
    let keys = lease.lease_time_to_live(with_token(ttl(true), &root)).await.unwrap().into_inner().keys;
    assert_eq!(keys, vec![b"/secret".to_vec()]);

    // Simple tokens live in memory: after a restart the client must authenticate again.
    e.restart();
    let mut kv = KvClient::new(connect(&e).await);
    let err = kv.put(with_token(put("/a6"), &alice)).await.unwrap_err();
    assert_eq!((err.code(), err.message()), (Code::Unauthenticated, "etcdserver: invalid auth token"));
    let mut auth = AuthClient::new(connect(&e).await);
    let again = token(&mut auth, "alice", "a").await;
    kv.put(with_token(put("/a6"), &again)).await.expect("a new token works");
}

#[test]
fn client_certificate_common_name_is_the_user() {
    let ip = loopback_ip();
    let pki = Pki::new(ip);
    for flavor in [Flavor::Real, Flavor::Ours] {
        let e = Etcd::start(EtcdOptions {
            flavor,
            ip: Some(ip),
            tls: Some(pki.server.clone()),
            ..Default::default()
        });
        e.etcdctl_ok(&["user", "add", "root:pw"]);
        e.etcdctl_ok(&["auth", "enable"]);
        // The client certificate's CN is "root": no password needed.
        assert_eq!(e.etcdctl_ok(&["put", "k", "v"]), "OK\n", "{flavor:?}");
        assert_eq!(e.etcdctl_ok(&["user", "list"]), "root\n", "{flavor:?}");
        // A token, when given, wins over the certificate.
        e.etcdctl_ok(&["user", "add", "bob:b"]);
        let out = e.etcdctl(&["--user", "bob:b", "put", "k", "w"]);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("etcdserver: permission denied"),
            "{flavor:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn snapshots_carry_users_roles_and_the_enabled_flag() {
    for (from, to) in [(Flavor::Ours, Flavor::Real), (Flavor::Real, Flavor::Ours)] {
        let what = format!("{from:?} snapshot restored into {to:?}");
        let mut old = Etcd::start(EtcdOptions { flavor: from, ..Default::default() });
        bootstrap(&mut old);
        old.etcdctl_ok(&["--user", "alice:a", "put", "/a1", "v1"]);
        let snap = old.dir.path().join("snap.db");
        // Only root may take a snapshot.
        let out = old.etcdctl(&["--user", "alice:a", "snapshot", "save", snap.to_str().unwrap()]);
        assert!(String::from_utf8_lossy(&out.stderr).contains("auth: permission denied"), "{what}");
        old.etcdctl_ok(&["--user", "root:pw", "snapshot", "save", snap.to_str().unwrap()]);

        let new = restore_and_start(to, &snap, Some("root:pw"));
        assert_eq!(
            new.etcdctl_ok(&["--user", "alice:a", "get", "/a1", "--print-value-only"]),
            "v1\n",
            "{what}"
        );
        let out = new.etcdctl(&["get", "/a1"]);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("user name is empty"),
            "{what}: auth stayed on"
        );
        assert_eq!(new.etcdctl_ok(&["--user", "root:pw", "user", "list"]), "alice\nroot\n", "{what}");
        assert_eq!(
            new.etcdctl_ok(&["--user", "root:pw", "role", "get", "r1"]),
            "Role r1\nKV Read:\n\t[/a, /b) (prefix /a)\nKV Write:\n\t[/a, /b) (prefix /a)\n",
            "{what}"
        );
        let out = new.etcdctl(&["--user", "alice:a", "put", "/z", "1"]);
        assert!(String::from_utf8_lossy(&out.stderr).contains("permission denied"), "{what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_share_users_and_simple_tokens_through_raft() {
    let (specs, initial) = plan(3);
    // A small snapshot count, so the member stopped below catches up from a raft
    // snapshot (the auth state must travel in it) rather than from the log.
    let mut members: Vec<Etcd> =
        specs.iter().map(|s| s.start(&initial, &["--snapshot-count", "20"])).collect();
    for m in &mut members {
        m.wait_ready();
    }
    members[2].kill9();
    // If it led, wait for the others to elect a leader before writing.
    members[0].wait_ready();
    bootstrap(&mut members[0]);
    // More writes than the leader keeps in its log after compacting it (5000 entries).
    let mut auth = AuthClient::new(connect(&members[0]).await);
    let root = token(&mut auth, "root", "pw").await;
    let channel = connect(&members[0]).await;
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writers: Vec<_> = (0..16)
        .map(|_| {
            let (mut kv, next, root) = (KvClient::new(channel.clone()), next.clone(), root.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= 5600 {
                        return;
                    }
                    let put = PutRequest {
                        key: format!("/a/{i}").into_bytes(),
                        value: b"v".to_vec(),
                        ..Default::default()
                    };
                    kv.put(with_token(put, &root)).await.unwrap_or_else(|e| panic!("put {i}: {e}"));
                }
            })
        })
        .collect();
    for w in writers {
        w.await.expect("writer");
    }
    members[2].health_user = Some("root:pw".into());
    members[2].restart();
    assert!(
        members[2].log_contains("installed raft snapshot"),
        "the member caught up without a raft snapshot; log:\n{}",
        members[2].log_tail(30)
    );

    // A token issued by one member is known to every member.
    let alice = token(&mut auth, "alice", "a").await;
    for m in &members {
        let mut kv = KvClient::new(connect(m).await);
        let put = PutRequest {
            key: format!("/a/{}", m.name).into_bytes(),
            value: b"x".to_vec(),
            ..Default::default()
        };
        kv.put(with_token(put, &alice)).await.unwrap_or_else(|e| panic!("{}: {e}", m.name));
        let put = PutRequest { key: b"/c".to_vec(), ..Default::default() };
        let err = kv.put(with_token(put, &alice)).await.unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied, "{}", m.name);
    }
    // The member that caught up enforces the same permissions on reads.
    let out = members[2].etcdctl(&["--user", "alice:a", "get", "/c"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("permission denied"));
    assert_eq!(members[2].etcdctl_ok(&["--user", "alice:a", "get", "/a/m1", "--print-value-only"]), "x\n");
}
