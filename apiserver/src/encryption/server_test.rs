//! Encryption at rest and the audit log through a real server: the system's etcd
//! (`/usr/bin/etcd`), the API server in process, curl as the client. Ignored by default
//! (it needs those binaries); run with
//! `cargo test --release -p apiserver --lib server_test -- --ignored`.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use serde_json::Value;

use crate::storage::etcd3::{Etcd, EtcdConfig};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn curl(args: &[&str]) -> (String, String) {
    let out = Command::new("curl").args(["-sk", "-D", "/dev/stderr"]).args(args).output().unwrap();
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[tokio::test]
#[ignore = "needs /usr/bin/etcd and curl"]
async fn secrets_are_encrypted_and_requests_audited() {
    let dir = tempfile::tempdir().unwrap();
    let (client, peer) = (free_port(), free_port());
    let etcd_url = format!("http://127.0.0.1:{client}");
    let _etcd = Killed(
        Command::new("/usr/bin/etcd")
            .args(["--data-dir", &dir.path().join("etcd").display().to_string()])
            .args(["--listen-client-urls", &etcd_url, "--advertise-client-urls", &etcd_url])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let key = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
    let enc = write(
        dir.path(),
        "enc.yaml",
        &format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys: [{{name: key1, secret: {key}}}]\n  - identity: {{}}\n"
        ),
    );
    let policy = write(
        dir.path(),
        "policy.yaml",
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  nonResourceURLs: ['/healthz*', '/readyz*', '/livez*']\n- level: RequestResponse\n  resources: [{group: '', resources: [configmaps]}]\n- level: Metadata\n",
    );
    let log = dir.path().join("audit.log");
    let (base, shutdown) = start_server(dir.path(), &etcd_url, &enc, &policy, &log).await;
    let secret = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"stringData":{"password":"hunter2-plaintext"}}"#;
    let url = format!("{base}/api/v1/namespaces/default/secrets");
    let (out, headers) = tokio::task::spawn_blocking(move || {
        curl(&["-X", "POST", "-H", "Content-Type: application/json", "--data", secret, &url])
    })
    .await
    .unwrap();
    assert!(out.contains("\"name\":\"s\""), "{out}");
    let audit_id = headers
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("audit-id: ").map(|v| v.trim().to_string()))
        .expect("Audit-Id header");

    // etcd holds ciphertext; the API serves the data.
    let raw = Etcd::connect(&EtcdConfig { servers: vec![etcd_url.clone()], ..Default::default() })
        .unwrap()
        .get("/registry/secrets/default/s")
        .await
        .unwrap()
        .unwrap();
    assert!(raw.value.starts_with(b"k8s:enc:aescbc:v1:key1:"));
    let text = String::from_utf8_lossy(&raw.value);
    assert!(!text.contains("hunter2") && !text.contains("aHVudGVyMi1wbGFpbnRleHQ"), "{text}");
    let url = format!("{base}/api/v1/namespaces/default/secrets/s");
    let (got, _) = tokio::task::spawn_blocking(move || curl(&[&url])).await.unwrap();
    let got: Value = serde_json::from_str(&got).unwrap();
    assert_eq!(got["data"]["password"], "aHVudGVyMi1wbGFpbnRleHQ=");
    // A configmap is stored as is.
    let url = format!("{base}/api/v1/namespaces/default/configmaps");
    let cm = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"k":"v"}}"#;
    tokio::task::spawn_blocking(move || {
        curl(&["-X", "POST", "-H", "Content-Type: application/json", "--data", cm, &url])
    })
    .await
    .unwrap();
    let url = format!("{base}/healthz");
    tokio::task::spawn_blocking(move || curl(&[&url])).await.unwrap();

    let events: Vec<Value> =
        std::fs::read_to_string(&log).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mine: Vec<&Value> = events.iter().filter(|e| e["auditID"] == audit_id.as_str()).collect();
    assert_eq!(mine.len(), 2, "{events:#?}");
    assert_eq!(mine[1]["stage"], "ResponseComplete");
    assert_eq!(mine[1]["verb"], "create");
    assert_eq!(mine[1]["objectRef"]["name"], "s");
    assert_eq!(mine[1]["responseStatus"]["code"], 201);
    assert_eq!(mine[1]["user"]["username"], "system:anonymous");
    assert!(mine[1].get("requestObject").is_none(), "secrets are audited at Metadata");
    let cm_event = events
        .iter()
        .find(|e| e["objectRef"]["resource"] == "configmaps" && e["stage"] == "ResponseComplete");
    assert_eq!(cm_event.unwrap()["responseObject"]["data"]["k"], "v");
    assert!(!events.iter().any(|e| e["requestURI"] == "/healthz"));
    shutdown.trigger();

    // Rotation: key2 first, key1 still listed. A new server reads the key1 value (through
    // its watch cache's initial list) and a write moves it to key2.
    let key2 = base64::engine::general_purpose::STANDARD.encode([9u8; 32]);
    let enc = write(
        dir.path(),
        "enc2.yaml",
        &format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys: [{{name: key2, secret: {key2}}}, {{name: key1, secret: {key}}}]\n"
        ),
    );
    let (base, shutdown) = start_server(dir.path(), &etcd_url, &enc, &policy, &log).await;
    let url = format!("{base}/api/v1/namespaces/default/secrets/s");
    let (got, _) = tokio::task::spawn_blocking(move || {
        let patch = r#"{"metadata":{"labels":{"rotated":"yes"}}}"#;
        curl(&["-X", "PATCH", "-H", "Content-Type: application/merge-patch+json", "--data", patch, &url])
    })
    .await
    .unwrap();
    let got: Value = serde_json::from_str(&got).unwrap();
    assert_eq!(got["data"]["password"], "aHVudGVyMi1wbGFpbnRleHQ=", "{got}");
    let raw = Etcd::connect(&EtcdConfig { servers: vec![etcd_url.clone()], ..Default::default() })
        .unwrap()
        .get("/registry/secrets/default/s")
        .await
        .unwrap()
        .unwrap();
    assert!(raw.value.starts_with(b"k8s:enc:aescbc:v1:key2:"));
    shutdown.trigger();
}

/// Starts the API server on a free port over `etcd_url`; retries while etcd starts.
async fn start_server(
    dir: &Path,
    etcd_url: &str,
    enc: &str,
    policy: &str,
    log: &Path,
) -> (String, component_base::shutdown::Shutdown) {
    let port = free_port();
    let args = [
        format!("--etcd-servers={etcd_url}"),
        format!("--secure-port={port}"),
        "--bind-address=127.0.0.1".into(),
        format!("--cert-dir={}", dir.join("certs").display()),
        format!("--encryption-provider-config={enc}"),
        format!("--audit-policy-file={policy}"),
        format!("--audit-log-path={}", log.display()),
    ];
    let flags = <crate::config::Flags as clap::Parser>::try_parse_from(
        std::iter::once("kube-apiserver".to_string()).chain(args),
    )
    .unwrap();
    let cfg = flags.into_config().unwrap();
    let shutdown = component_base::shutdown::Shutdown::new();
    for _ in 0..50 {
        if crate::start(cfg.clone(), shutdown.clone()).await.is_ok() {
            return (format!("https://127.0.0.1:{port}"), shutdown);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the API server did not start");
}
