//! A kube-apiserver process for tests: our binary in front of an etcd (ours or Debian's),
//! with a static token for an admin user and a kubeconfig that real kubectl and kube-rs use.

use std::io::Read;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::{Spawned, free_port, loopback_ip};

/// Debian's/the machine's kubectl (v1.32): the client the API server is held to.
pub const KUBECTL: &str = "kubectl";

/// The bearer token of the test's admin user (group system:masters).
pub const ADMIN_TOKEN: &str = "e2e-admin-token";

pub struct KubeApiserver {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub ip: Ipv4Addr,
    pub port: u16,
    pub kubeconfig: PathBuf,
}

impl KubeApiserver {
    /// Starts kube-apiserver against `etcd_endpoint` and waits for /readyz.
    pub fn start(etcd_endpoint: &str, extra_args: &[&str]) -> KubeApiserver {
        KubeApiserver::start_on(loopback_ip(), etcd_endpoint, extra_args)
    }

    /// Starts kube-apiserver serving on `ip` (an address other hosts reach, such as a
    /// multi-node test's hub address) and waits for /readyz.
    pub fn start_on(ip: Ipv4Addr, etcd_endpoint: &str, extra_args: &[&str]) -> KubeApiserver {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port(ip);
        let certs = dir.path().join("certs");
        std::fs::create_dir_all(&certs).expect("cert dir");
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, format!("{ADMIN_TOKEN},admin,admin-uid,system:masters\n")).expect("tokens");
        let kubeconfig = dir.path().join("admin.kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://{ip}:{port}\n    certificate-authority: {}\n  name: e2e\ncontexts:\n- context:\n    cluster: e2e\n    user: admin\n  name: e2e\ncurrent-context: e2e\nusers:\n- name: admin\n  user:\n    token: {ADMIN_TOKEN}\n",
                // The self-signed serving certificate the server writes there, as upstream,
                // holds its own CA.
                certs.join("apiserver.crt").display()
            ),
        )
        .expect("kubeconfig");
        let log = std::fs::File::create(dir.path().join("kube-apiserver.log")).expect("log");
        let child = Command::new(crate::bin("kube-apiserver"))
            .arg(format!("--etcd-servers={etcd_endpoint}"))
            .arg(format!("--bind-address={ip}"))
            .arg(format!("--secure-port={port}"))
            .arg(format!("--cert-dir={}", certs.display()))
            .arg(format!("--token-auth-file={}", tokens.display()))
            .args(default_admission(extra_args))
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("starting kube-apiserver");
        let mut a = KubeApiserver { child: Some(child), dir, ip, port, kubeconfig };
        a.wait_ready();
        a
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                panic!("kube-apiserver exited with {status}; log:\n{}", self.log_tail(60));
            }
            let out = self.kubectl(&["get", "--raw", "/readyz"]);
            if out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok" {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready after 60s; log:\n{}",
                self.log_tail(60)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn url(&self) -> String {
        format!("https://{}:{}", self.ip, self.port)
    }

    pub fn kubectl_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(KUBECTL);
        c.env("KUBECONFIG", &self.kubeconfig).env_remove("KUBERNETES_SERVICE_HOST").args(args);
        c
    }

    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_cmd(args).stdin(Stdio::null()).output().expect("running kubectl")
    }

    /// Runs kubectl and returns stdout, failing the test (with stderr and the server log) if it fails.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}\n{}\n--- apiserver log ---\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout),
            self.log_tail(20)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    /// Runs kubectl expecting failure; returns stderr, failing the test if it succeeds.
    pub fn kubectl_err(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            !out.status.success(),
            "kubectl {args:?} succeeded, expected a failure:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Runs kubectl with `input` on stdin (`apply -f -`, say).
    pub fn kubectl_stdin(&self, args: &[&str], input: &str) -> Output {
        use std::io::Write;
        let mut child = self
            .kubectl_cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running kubectl");
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("stdin");
        child.wait_with_output().expect("kubectl output")
    }

    /// A long-running kubectl (`get -w`) whose stdout lines are collected.
    pub fn kubectl_spawn(&self, args: &[&str]) -> Spawned {
        let child = self
            .kubectl_cmd(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running kubectl");
        Spawned::new(child)
    }

    /// One request as the admin with curl (`-k`): `headers` as `Name: value`, the body
    /// sent as is. Returns the status code and the body.
    pub fn request(&self, method: &str, path: &str, headers: &[&str], body: Option<&[u8]>) -> (u16, String) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut c = Command::new("curl");
        c.args(["-sk", "--max-time", "30", "-o"])
            .arg(dir.path().join("body"))
            .args(["-w", "%{http_code}", "-X", method, "-H"])
            .arg(format!("Authorization: Bearer {ADMIN_TOKEN}"));
        for h in headers {
            c.args(["-H", h]);
        }
        c.arg(format!("{}{path}", self.url()));
        if let Some(b) = body {
            let f = dir.path().join("request");
            std::fs::write(&f, b).expect("request body");
            c.arg("--data-binary").arg(format!("@{}", f.display()));
        }
        let out = c.output().expect("running curl");
        let code = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0);
        (code, std::fs::read_to_string(dir.path().join("body")).unwrap_or_default())
    }

    /// A WebSocket GET of `path` as the admin, offering `protocol`, read until the server
    /// closes (at most 30 s): the response head, then each data message's opcode (1 text,
    /// 2 binary) and payload. `openssl s_client` carries the TLS, so the handshake and
    /// the frames are exactly the bytes on the wire.
    pub fn websocket_messages(&self, path: &str, protocol: Option<&str>) -> (String, Vec<(u8, Vec<u8>)>) {
        use std::io::Write;
        let mut head = format!(
            "GET {path} HTTP/1.1\r\nHost: {}:{}\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
            self.ip, self.port
        );
        if let Some(p) = protocol {
            head.push_str(&format!("Sec-WebSocket-Protocol: {p}\r\n"));
        }
        head.push_str("\r\n");
        let mut child = Command::new("timeout")
            .args(["30", "openssl", "s_client", "-quiet", "-ign_eof", "-connect"])
            .arg(format!("{}:{}", self.ip, self.port))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("running openssl s_client");
        child.stdin.take().expect("stdin").write_all(head.as_bytes()).expect("writing the handshake");
        let out = child.wait_with_output().expect("openssl s_client").stdout;
        let end = out.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4).unwrap_or(out.len());
        let mut messages = Vec::new();
        let mut rest = &out[end..];
        while rest.len() >= 2 {
            let opcode = rest[0] & 0x0f;
            let (len, skip) = match rest[1] & 0x7f {
                126 if rest.len() >= 4 => (u16::from_be_bytes([rest[2], rest[3]]) as usize, 4),
                127 if rest.len() >= 10 => (u64::from_be_bytes(rest[2..10].try_into().unwrap()) as usize, 10),
                n if n < 126 => (n as usize, 2),
                _ => break,
            };
            let Some(payload) = rest.get(skip..skip + len) else { break };
            if opcode == 1 || opcode == 2 {
                messages.push((opcode, payload.to_vec()));
            }
            rest = &rest[skip + len..];
        }
        (String::from_utf8_lossy(&out[..end]).into_owned(), messages)
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(self.dir.path().join("kube-apiserver.log")) {
            let _ = f.read_to_string(&mut s);
        }
        let all: Vec<&str> = s.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }
}

impl Drop for KubeApiserver {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- kube-apiserver log ---\n{}", self.log_tail(80));
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Tests that do not choose admission plugins run without ServiceAccount and
/// TaintNodesByCondition, as upstream's integration test servers do: no
/// serviceaccount controller makes `default` accounts for their pods, and no node
/// lifecycle controller lifts the not-ready taint from their Node objects.
fn default_admission(extra_args: &[&str]) -> Vec<&'static str> {
    let chooses = extra_args
        .iter()
        .any(|a| a.starts_with("--disable-admission-plugins") || a.starts_with("--enable-admission-plugins"));
    if chooses {
        Vec::new()
    } else {
        vec!["--disable-admission-plugins=ServiceAccount,TaintNodesByCondition"]
    }
}
