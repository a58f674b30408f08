//! Test harness for end-to-end tests: starts the project's real binaries (and, as a
//! baseline, Debian's real etcd) as processes on their own loopback addresses, and drives
//! them with real clients (`etcdctl` from Debian's etcd-client, tonic gRPC clients).
//!
//! Every process started here is killed by PID when its handle drops; every data
//! directory is a tempdir. Tests wait for conditions with timeouts, never fixed sleeps.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub mod apiserver;
pub mod certs;
pub mod cluster;
pub mod component;
pub mod containerd;
pub mod dns;
pub mod extension_server;
pub mod fake_cluster;
pub mod fake_kubelet;
pub mod kubelet;
pub mod lazyfs;
pub mod netns;
pub mod nodes;
pub mod pki;
pub mod webhook;

/// Debian's etcdctl 3.4: the client whose behaviour the tests hold our server to.
pub const ETCDCTL: &str = "/usr/bin/etcdctl";
/// Debian's etcd 3.4: a reference server (make-mirror source, benchmark baseline).
pub const REAL_ETCD: &str = "/usr/bin/etcd";

/// Path of one of the workspace's binaries, built next to the test executables
/// (`hack/test.sh` builds them first).
pub fn bin(name: &str) -> PathBuf {
    if let Ok(dir) = std::env::var("K8S_RS_BIN_DIR") {
        return Path::new(&dir).join(name);
    }
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> → target/<profile>/<name>
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
    let p = profile_dir.join(name);
    assert!(p.exists(), "{} not built; run `cargo build --release --bins` (hack/test.sh does)", p.display());
    p
}

/// Detaches every mount at or below `dir` (deepest first): what a kubelet or containerd of
/// a test left behind (tmpfs volumes, pod network namespaces, overlay rootfs).
pub fn unmount_under(dir: &Path) {
    let prefix = dir.display().to_string();
    let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(String::from))
        .filter(|m| m == &prefix || m.starts_with(&format!("{prefix}/")))
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in mounts {
        let Ok(path) = std::ffi::CString::new(m) else { continue };
        // SAFETY: a valid NUL-terminated path.
        unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
    }
}

/// A multi-threaded tokio runtime for a test's gRPC clients.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

/// A gRPC channel to a server's client port; must be called inside a runtime.
pub fn channel(etcd: &Etcd) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{}", etcd.client_addr()))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .connect_lazy()
}

/// Parses JSON output, failing the test with the text if it is not JSON.
pub fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// Waits until `f` returns Some, polling every `every`, or panics after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, every: Duration, f: impl FnMut() -> Option<T>) -> T {
    try_wait_for(timeout, every, f)
        .unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for {what}"))
}

/// Polls `f` every `every` until it returns Some; None once `timeout` has passed (for
/// callers that report the last state they saw themselves).
pub fn try_wait_for<T>(timeout: Duration, every: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(every);
    }
}

static ADDR_SEQ: AtomicU32 = AtomicU32::new(0);

/// A loopback address of its own for one test server, so parallel tests never collide:
/// 127.x.y.z chosen from the process id and a counter.
pub fn loopback_ip() -> Ipv4Addr {
    let n = ADDR_SEQ.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let a = 10 + (pid % 200) as u8;
    let b = ((pid / 200) % 250) as u8 + 1;
    let c = (n % 250) as u8 + 1;
    Ipv4Addr::new(127, a, b, c)
}

/// Ports this process has already handed out, per address.
static HANDED_OUT: std::sync::Mutex<Vec<(Ipv4Addr, u16)>> = std::sync::Mutex::new(Vec::new());

/// A free port on `ip`, never one this process handed out before: the probe listener is
/// closed before the caller binds, so the kernel may offer the same port to the next call
/// (a member's client and peer ports once collided that way).
pub fn free_port(ip: Ipv4Addr) -> u16 {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = TcpListener::bind((ip, 0)).expect("bind loopback").local_addr().expect("addr").port();
        if !handed_out.contains(&(ip, port)) {
            handed_out.push((ip, port));
            return port;
        }
    }
}

/// TLS material for a server and its clients.
#[derive(Clone, Debug)]
pub struct ClientTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Which etcd binary to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// The project's etcd.
    Ours,
    /// Debian's etcd 3.4.
    Real,
}

/// How to start an etcd server.
#[derive(Clone, Debug)]
pub struct EtcdOptions {
    pub flavor: Flavor,
    pub extra_args: Vec<String>,
    /// Serve clients over https with these files; clients must present a certificate.
    pub tls: Option<ServerTls>,
    /// The loopback address to use (one is picked when None).
    pub ip: Option<Ipv4Addr>,
    /// Member name (default "test").
    pub name: Option<String>,
    /// Ports to use (free ones are picked when None).
    pub client_port: Option<u16>,
    pub peer_port: Option<u16>,
    /// `--initial-cluster` (default: this member alone) and `--initial-cluster-state`.
    pub initial_cluster: Option<String>,
    pub initial_cluster_state: Option<String>,
    /// Return without waiting for the member to be healthy (members of a new cluster only
    /// become healthy once a quorum runs).
    pub no_wait: bool,
    /// Extra environment for the process (FAILPOINTS, say).
    pub env: Vec<(String, String)>,
    /// Peer traffic over mutual TLS with these files.
    pub peer_tls: Option<ServerTls>,
    /// An existing data dir to use (a restored snapshot, say) instead of a fresh one.
    pub data_dir: Option<PathBuf>,
    /// `user:password` the readiness check authenticates as (a data dir with auth on).
    pub health_user: Option<String>,
}

#[derive(Clone, Debug)]
pub struct ServerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    /// What clients use to connect.
    pub client: ClientTls,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        Self {
            flavor: Flavor::Ours,
            extra_args: Vec::new(),
            tls: None,
            ip: None,
            name: None,
            client_port: None,
            peer_port: None,
            initial_cluster: None,
            initial_cluster_state: None,
            no_wait: false,
            env: Vec::new(),
            peer_tls: None,
            data_dir: None,
            health_user: None,
        }
    }
}

/// A running etcd process with its own data dir and addresses.
pub struct Etcd {
    child: Option<Child>,
    args: Vec<String>,
    binary: PathBuf,
    /// Environment for the next (re)start.
    pub env: Vec<(String, String)>,
    pub dir: tempfile::TempDir,
    pub name: String,
    pub ip: Ipv4Addr,
    pub client_port: u16,
    pub peer_port: u16,
    pub tls: Option<ServerTls>,
    /// `user:password` for the readiness check once auth is enabled: etcdctl's
    /// `endpoint health` reads a key, which needs a user then.
    pub health_user: Option<String>,
    /// Directories removed with the member (a restored data dir, say).
    kept: Vec<tempfile::TempDir>,
}

impl Etcd {
    /// Keeps `dir` until this member is dropped (after its process is gone).
    pub fn keep_alive(&mut self, dir: tempfile::TempDir) {
        self.kept.push(dir);
    }

    pub fn start(opts: EtcdOptions) -> Etcd {
        let dir = tempfile::tempdir().expect("tempdir");
        let ip = opts.ip.unwrap_or_else(loopback_ip);
        let client_port = opts.client_port.unwrap_or_else(|| free_port(ip));
        let peer_port = opts.peer_port.unwrap_or_else(|| free_port(ip));
        let name = opts.name.clone().unwrap_or_else(|| "test".to_string());
        let scheme = if opts.tls.is_some() { "https" } else { "http" };
        let client_url = format!("{scheme}://{ip}:{client_port}");
        let peer_scheme = if opts.peer_tls.is_some() { "https" } else { "http" };
        let peer_url = format!("{peer_scheme}://{ip}:{peer_port}");
        let mut args = vec![
            "--name".to_string(),
            name.clone(),
            "--data-dir".into(),
            opts.data_dir.clone().unwrap_or_else(|| dir.path().join("data")).display().to_string(),
            "--listen-client-urls".into(),
            client_url.clone(),
            "--advertise-client-urls".into(),
            client_url,
            "--listen-peer-urls".into(),
            peer_url.clone(),
            "--initial-advertise-peer-urls".into(),
            peer_url.clone(),
            "--initial-cluster".into(),
            opts.initial_cluster.clone().unwrap_or_else(|| format!("{name}={peer_url}")),
        ];
        if let Some(t) = &opts.peer_tls {
            args.extend([
                "--peer-cert-file".to_string(),
                t.cert.display().to_string(),
                "--peer-key-file".into(),
                t.key.display().to_string(),
                "--peer-trusted-ca-file".into(),
                t.ca.display().to_string(),
                "--peer-client-cert-auth".into(),
            ]);
        }
        if let Some(state) = &opts.initial_cluster_state {
            args.extend(["--initial-cluster-state".to_string(), state.clone()]);
        }
        if let Some(t) = &opts.tls {
            args.extend([
                "--cert-file".to_string(),
                t.cert.display().to_string(),
                "--key-file".into(),
                t.key.display().to_string(),
                "--trusted-ca-file".into(),
                t.ca.display().to_string(),
                "--client-cert-auth".into(),
            ]);
        }
        args.extend(opts.extra_args.iter().cloned());
        let binary = match opts.flavor {
            Flavor::Ours => bin("etcd"),
            Flavor::Real => PathBuf::from(REAL_ETCD),
        };
        let mut etcd = Etcd {
            child: None,
            args,
            binary,
            env: opts.env,
            dir,
            name,
            ip,
            client_port,
            peer_port,
            tls: opts.tls,
            health_user: opts.health_user,
            kept: Vec::new(),
        };
        etcd.spawn();
        if !opts.no_wait {
            etcd.wait_ready();
        }
        etcd
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    fn spawn(&mut self) {
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.log_path()).expect("log file");
        let child = Command::new(&self.binary)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env_remove("ETCDCTL_API")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.binary.display()));
        self.child = Some(child);
    }

    /// Waits until `etcdctl endpoint health` succeeds.
    pub fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("etcd exited with {status} before becoming ready; log:\n{}", self.log_tail(60));
            }
            let user = self.health_user.as_ref().map(|u| format!("--user={u}"));
            let mut args = vec!["endpoint", "health", "--command-timeout=2s"];
            args.extend(user.as_deref());
            let out = self.etcdctl(&args);
            if out.status.success() {
                return;
            }
            assert!(Instant::now() < deadline, "etcd not healthy after 60s; log:\n{}", self.log_tail(60));
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Whether the process is still running (it may exit on its own, e.g. when removed).
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Sends a signal (SIGSTOP/SIGCONT to pause and resume, say).
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        if let Some(c) = &self.child {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), sig);
        }
    }

    /// The peer URL this member advertises.
    pub fn peer_url(&self) -> String {
        let scheme = if self.args.iter().any(|a| a == "--peer-cert-file") { "https" } else { "http" };
        format!("{scheme}://{}:{}", self.ip, self.peer_port)
    }

    /// Starts the process again (after `kill9`) without waiting for it to be healthy.
    pub fn respawn(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// Waits for the process to exit on its own; returns its exit code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            let c = self.child.as_mut()?;
            if let Ok(Some(status)) = c.try_wait() {
                self.child = None;
                return status.code();
            }
            assert!(Instant::now() < deadline, "etcd did not exit within {timeout:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for a clean exit; returns whether it exited successfully.
    pub fn terminate(&mut self) -> bool {
        let Some(mut c) = self.child.take() else { return false };
        let pid = nix::unistd::Pid::from_raw(c.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = c.try_wait() {
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the process again on the same data dir and addresses.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
        self.wait_ready();
    }

    /// The tail of the server's log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(self.log_path()) {
            let _ = f.read_to_string(&mut s);
        }
        let all: Vec<&str> = s.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// host:port as etcdctl's `--endpoints` takes it.
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}:{}", self.ip, self.client_port)
    }

    pub fn client_addr(&self) -> SocketAddr {
        SocketAddr::from((self.ip, self.client_port))
    }

    /// An etcdctl command aimed at this server (with its client certificate when TLS).
    pub fn etcdctl_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(ETCDCTL);
        c.env("ETCDCTL_API", "3").arg(format!("--endpoints={}", self.endpoint()));
        if let Some(t) = &self.tls {
            c.arg(format!("--cacert={}", t.client.ca.display()))
                .arg(format!("--cert={}", t.client.cert.display()))
                .arg(format!("--key={}", t.client.key.display()));
        }
        c.args(args);
        c
    }

    pub fn etcdctl(&self, args: &[&str]) -> Output {
        self.etcdctl_cmd(args).stdin(Stdio::null()).output().expect("running etcdctl")
    }

    /// Runs etcdctl and returns its stdout, failing the test if it fails.
    pub fn etcdctl_ok(&self, args: &[&str]) -> String {
        let out = self.etcdctl(args);
        assert!(
            out.status.success(),
            "etcdctl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    /// Runs etcdctl with `input` on stdin.
    pub fn etcdctl_stdin(&self, args: &[&str], input: &[u8]) -> Output {
        let mut child = self
            .etcdctl_cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running etcdctl");
        child.stdin.take().expect("stdin").write_all(input).expect("writing stdin");
        child.wait_with_output().expect("etcdctl output")
    }

    /// A long-running etcdctl (watch, lock, keep-alive) with piped stdout; killed on drop.
    pub fn etcdctl_spawn(&self, args: &[&str]) -> Spawned {
        let child = self
            .etcdctl_cmd(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running etcdctl");
        Spawned::new(child)
    }

    /// `GET path` over plain HTTP/1.1 on the client port; (status, body).
    pub fn http_get(&self, path: &str) -> (u16, String) {
        http_get(self.client_addr(), path)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- etcd log ({}) ---\n{}", self.binary.display(), self.log_tail(80));
        }
        self.kill9();
    }
}

/// A plain HTTP/1.1 GET; (status, body).
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("write");
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).expect("read");
    let text = String::from_utf8_lossy(&resp).to_string();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    let body =
        if text.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(&body) } else { body };
    (status, body)
}

fn dechunk(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

/// A child process whose stdout lines are read by a thread; killed when dropped.
pub struct Spawned {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl Spawned {
    pub fn new(mut child: Child) -> Self {
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines: rx, seen: Vec::new() }
    }

    /// Reads lines until `n` have been seen in total, or panics after `timeout`.
    pub fn read_lines(&mut self, n: usize, timeout: Duration) -> &[String] {
        let deadline = Instant::now() + timeout;
        while self.seen.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => panic!("expected {n} lines within {timeout:?}, got {:?}", self.seen),
            }
        }
        &self.seen
    }

    /// Like [`Spawned::read_lines`], but None instead of a panic when the lines do not come.
    pub fn read_lines_within(&mut self, n: usize, timeout: Duration) -> Option<&[String]> {
        let deadline = Instant::now() + timeout;
        while self.seen.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => return None,
            }
        }
        Some(&self.seen)
    }

    /// Waits for the process to exit; returns (exit code, stderr).
    pub fn wait(mut self, timeout: Duration) -> (Option<i32>, String) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                return (status.code(), err);
            }
            assert!(Instant::now() < deadline, "process did not exit within {timeout:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig);
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
