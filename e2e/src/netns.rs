//! Clusters whose members each run in a network namespace of their own, so that tests can
//! cut members off from each other with iptables while clients still reach every member.
//! Needs root, `ip` (iproute2) and `iptables` (iptables-nft on Debian 12); `hack/install-deps.sh`
//! installs both.
//!
//! Layout of one [`Network`] (its /24 is unique per test, derived from the pid and a counter):
//!
//! ```text
//!   namespace <p>h (hub)             namespace <p>0         namespace <p>1  ...
//!   br0 10.a.b.1/24 ── v0 ═══veth═══ eth0 10.a.b.10
//!                   └─ v1 ═══veth═══════════════════════════ eth0 10.a.b.11
//! ```
//!
//! Members listen on 2379 (clients) and 2380 (peers) of their own address. Clients run in
//! the hub: etcdctl through `ip netns exec <hub>`, in-process gRPC clients on a thread that
//! entered the hub with [`Network::enter_hub`] (a network namespace is per thread, and
//! threads and processes started from that thread inherit it).
//!
//! A partition is a set of iptables DROP rules inside member namespaces (INPUT from and
//! OUTPUT to the other side's addresses); the hub is never filtered, so a cut-off member can
//! still be asked what it thinks. [`Network::heal`] flushes those rules.
//!
//! Teardown: members are killed by PID when dropped, namespaces (and with them the veths
//! and the bridge) are deleted when the [`Network`] drops, on panic too. Namespaces left
//! behind by a test process that was itself killed (their name carries its pid) are swept
//! the next time a network is created.

use std::fs::File;
use std::io::Read;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::{ETCDCTL, bin, wait_for};

/// Prefix of every namespace this module creates: `<PREFIX><pid>n<seq><role>`.
const PREFIX: &str = "e2e";
pub const CLIENT_PORT: u16 = 2379;
pub const PEER_PORT: u16 = 2380;
/// Host number of member 0 inside the /24 (the hub bridge is .1).
const FIRST_HOST: u8 = 10;

static NET_SEQ: AtomicU32 = AtomicU32::new(0);

/// Panics with a useful message unless this process can build namespaces with `ip` and
/// filter them with `iptables`.
pub fn require_tools() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "network-namespace tests need root");
    for tool in ["ip", "iptables"] {
        let found = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
            .unwrap_or(false)
            || Path::new("/usr/sbin").join(tool).is_file();
        assert!(found, "`{tool}` not found: run hack/install-deps.sh (packages iproute2, iptables)");
    }
}

/// Runs a command to completion, panicking (with its stderr) when it fails.
fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ip netns exec <ns> <args...>`, checked.
fn in_ns(ns: &str, args: &[&str]) -> String {
    let mut all = vec!["netns", "exec", ns];
    all.extend_from_slice(args);
    run("ip", &all)
}

/// Deletes the namespaces of earlier test processes that died without cleaning up (their
/// pid, part of the name, no longer runs), killing whatever still runs inside them.
fn sweep_stale() {
    let Ok(entries) = std::fs::read_dir("/var/run/netns") else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PREFIX) else { continue };
        let Some((pid, _)) = rest.split_once('n') else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if let Ok(out) = Command::new("ip").args(["netns", "pids", &name]).output() {
            for p in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                if let Ok(p) = p.parse::<i32>() {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(p),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
        let _ = Command::new("ip").args(["netns", "del", &name]).status();
    }
}

/// One named network namespace, deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    fn create(name: String) -> Netns {
        run("ip", &["netns", "add", &name]);
        let ns = Netns { name };
        in_ns(&ns.name, &["ip", "link", "set", "lo", "up"]);
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).stderr(Stdio::null()).status();
    }
}

/// A hub namespace with a bridge and `n` member namespaces wired to it.
pub struct Network {
    /// Member namespaces first, so they go before the hub on drop.
    nodes: Vec<Netns>,
    hub: Netns,
    /// 10.a.b.0/24.
    subnet: [u8; 3],
    /// Pairs (i, j) of members that currently cannot talk.
    cut: Vec<(usize, usize)>,
}

impl Network {
    /// Creates the hub, the bridge and `n` member namespaces.
    pub fn create(n: usize) -> Network {
        require_tools();
        sweep_stale();
        assert!(n <= 200, "at most 200 members");
        let pid = std::process::id();
        let seq = NET_SEQ.fetch_add(1, Ordering::Relaxed);
        let k = pid.wrapping_mul(64).wrapping_add(seq);
        let subnet = [10, 64 + ((k >> 8) % 128) as u8, (k % 256) as u8];
        let base = format!("{PREFIX}{pid}n{seq}");
        let hub = Netns::create(format!("{base}h"));
        let mut net = Network { nodes: Vec::new(), hub, subnet, cut: Vec::new() };
        let h = net.hub.name.clone();
        run("ip", &["-n", &h, "link", "add", "br0", "type", "bridge"]);
        run("ip", &["-n", &h, "addr", "add", &format!("{}.1/24", net.prefix()), "dev", "br0"]);
        run("ip", &["-n", &h, "link", "set", "br0", "up"]);
        for i in 0..n {
            let ns = Netns::create(format!("{base}{i}"));
            let veth = format!("v{i}");
            run(
                "ip",
                &["-n", &h, "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns.name],
            );
            run("ip", &["-n", &h, "link", "set", &veth, "master", "br0"]);
            run("ip", &["-n", &h, "link", "set", &veth, "up"]);
            let cidr = format!("{}/24", net.ip(i));
            run("ip", &["-n", &ns.name, "addr", "add", &cidr, "dev", "eth0"]);
            run("ip", &["-n", &ns.name, "link", "set", "eth0", "up"]);
            net.nodes.push(ns);
        }
        net
    }

    fn prefix(&self) -> String {
        format!("{}.{}.{}", self.subnet[0], self.subnet[1], self.subnet[2])
    }

    fn addr(&self, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(self.subnet[0], self.subnet[1], self.subnet[2], host)
    }

    /// Address of member `i`.
    pub fn ip(&self, i: usize) -> Ipv4Addr {
        self.addr(FIRST_HOST + i as u8)
    }

    /// The hub's address on the bridge (where clients come from).
    pub fn hub_ip(&self) -> Ipv4Addr {
        self.addr(1)
    }

    pub fn hub(&self) -> &str {
        &self.hub.name
    }

    /// Namespace of member `i`.
    pub fn ns(&self, i: usize) -> &str {
        &self.nodes[i].name
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Moves the calling thread into the hub namespace: sockets it opens afterwards (and
    /// threads and processes it starts) live in the hub. Use on a dedicated thread only.
    pub fn enter_hub(&self) {
        enter_netns(&self.hub.name);
    }

    /// Splits the members into `groups`: members in different groups cannot talk (DROP both
    /// ways, rules in both members' namespaces); members in no group keep every link.
    pub fn partition(&mut self, groups: &[&[usize]]) {
        for (gi, a) in groups.iter().enumerate() {
            for b in &groups[gi + 1..] {
                for &i in a.iter() {
                    for &j in b.iter() {
                        self.cut_link(i, j);
                    }
                }
            }
        }
    }

    /// Cuts member `i` off from every other member (the hub still reaches it).
    pub fn isolate(&mut self, i: usize) {
        let others: Vec<usize> = (0..self.len()).filter(|&j| j != i).collect();
        self.partition(&[&[i], &others]);
    }

    /// Cuts the link between members `i` and `j` in both directions.
    pub fn cut_link(&mut self, i: usize, j: usize) {
        let (a, b) = (i.min(j), i.max(j));
        if a == b || self.cut.contains(&(a, b)) {
            return;
        }
        for (me, other) in [(a, b), (b, a)] {
            let ip = self.ip(other).to_string();
            let ns = self.nodes[me].name.clone();
            in_ns(&ns, &["iptables", "-w", "-A", "INPUT", "-s", &ip, "-j", "DROP"]);
            in_ns(&ns, &["iptables", "-w", "-A", "OUTPUT", "-d", &ip, "-j", "DROP"]);
        }
        self.cut.push((a, b));
    }

    /// Whether members `i` and `j` are currently cut off from each other.
    pub fn is_cut(&self, i: usize, j: usize) -> bool {
        self.cut.contains(&(i.min(j), i.max(j)))
    }

    /// Removes every partition rule.
    pub fn heal(&mut self) {
        if self.cut.is_empty() {
            return;
        }
        for ns in &self.nodes {
            in_ns(&ns.name, &["iptables", "-w", "-F", "INPUT"]);
            in_ns(&ns.name, &["iptables", "-w", "-F", "OUTPUT"]);
        }
        self.cut.clear();
    }

    /// `iptables -S` of member `i`'s namespace, for failure messages.
    pub fn rules(&self, i: usize) -> String {
        in_ns(&self.nodes[i].name, &["iptables", "-w", "-S"])
    }
}

/// Moves the calling thread into the named network namespace (`setns(2)` on
/// /var/run/netns/<name>; the network namespace is a per-thread attribute).
pub fn enter_netns(name: &str) {
    let f = File::open(format!("/var/run/netns/{name}")).unwrap_or_else(|e| panic!("open netns {name}: {e}"));
    // SAFETY: setns on a valid namespace fd only changes this thread's network namespace.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns({name}): {}", std::io::Error::last_os_error());
}

/// Makes `cmd` start inside the named network namespace. Only the network namespace
/// changes: unlike `ip netns exec`, which also remounts /sys in a mount namespace of its
/// own, the process keeps the host's mounts, which containerd, runc and the kubelet need
/// (cgroups under /sys/fs/cgroup, mounts visible to the test for cleanup).
pub fn command_in<'a>(cmd: &'a mut Command, ns: &str) -> &'a mut Command {
    use std::os::unix::process::CommandExt;
    let f = File::open(format!("/var/run/netns/{ns}")).unwrap_or_else(|e| panic!("open netns {ns}: {e}"));
    // SAFETY: the closure runs in the forked child before exec and only calls setns(2),
    // which is async-signal-safe; the file stays open for as long as `cmd` holds it.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// One etcd member running in its namespace (through `ip netns exec`, which execs, so the
/// child's PID is etcd's own and kill/SIGSTOP reach it directly).
pub struct NetMember {
    child: Option<Child>,
    args: Vec<String>,
    binary: PathBuf,
    paused: bool,
    pub dir: tempfile::TempDir,
    pub name: String,
    pub ns: String,
    /// Where clients run.
    pub hub: String,
    pub ip: Ipv4Addr,
    /// The disk the data dir is on, when it can lose power (dropped after the process).
    pub disk: Option<crate::lazyfs::LazyDisk>,
}

impl NetMember {
    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    fn spawn(&mut self) {
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.log_path()).expect("log file");
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .arg(&self.binary)
            .args(&self.args)
            .env_remove("ETCDCTL_API")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {} in {}: {e}", self.binary.display(), self.ns));
        self.child = Some(child);
        self.paused = false;
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process runs (paused counts as running).
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        if let Some(c) = &self.child {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), sig);
        }
    }

    /// SIGSTOP.
    pub fn pause(&mut self) {
        self.signal(nix::sys::signal::Signal::SIGSTOP);
        self.paused = true;
    }

    /// SIGCONT.
    pub fn resume(&mut self) {
        self.signal(nix::sys::signal::Signal::SIGCONT);
        self.paused = false;
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.paused = false;
    }

    /// The member's machine loses power: the process dies and its disk forgets everything
    /// not fsynced. Needs a cluster started with [`NetCluster::start_on_lazy_disks`].
    pub fn power_cut(&mut self) {
        self.kill9();
        self.disk.as_mut().expect("a member on a lazyfs disk").power_cut();
    }

    /// Starts the process again on the same data dir (after `kill9`) without waiting.
    pub fn respawn(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// Waits until `etcdctl endpoint health` (a linearizable read) succeeds.
    pub fn wait_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "{} exited with {status} before becoming ready; log:\n{}",
                    self.name,
                    self.log_tail(60)
                );
            }
            if self.etcdctl(&["endpoint", "health", "--command-timeout=2s"]).status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} not healthy after {timeout:?}; log:\n{}",
                self.name,
                self.log_tail(60)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The tail of the member's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let mut s = String::new();
        if let Ok(mut f) = File::open(self.log_path()) {
            let _ = f.read_to_string(&mut s);
        }
        let all: Vec<&str> = s.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Panics of the member's threads (a `panicked at` line and the message after it), across
    /// all its restarts.
    pub fn panics(&self) -> Vec<String> {
        let mut s = String::new();
        if let Ok(mut f) = File::open(self.log_path()) {
            let _ = f.read_to_string(&mut s);
        }
        let lines: Vec<&str> = s.lines().collect();
        lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.contains("panicked at"))
            .map(|(i, l)| format!("{l} {}", lines.get(i + 1).unwrap_or(&"")))
            .collect()
    }

    /// Lines of the member's log containing `needle`.
    pub fn log_grep(&self, needle: &str) -> Vec<String> {
        let mut s = String::new();
        if let Ok(mut f) = File::open(self.log_path()) {
            let _ = f.read_to_string(&mut s);
        }
        s.lines().filter(|l| l.contains(needle)).map(str::to_string).collect()
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}:{CLIENT_PORT}", self.ip)
    }

    /// etcdctl aimed at this member, run in the hub namespace.
    pub fn etcdctl(&self, args: &[&str]) -> Output {
        hub_etcdctl(&self.hub, &self.endpoint(), args)
    }

    /// Runs etcdctl and returns its stdout, failing the test if it fails.
    pub fn etcdctl_ok(&self, args: &[&str]) -> String {
        let out = self.etcdctl(args);
        assert!(
            out.status.success(),
            "etcdctl {args:?} against {} failed: {}{}",
            self.name,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }
}

impl Drop for NetMember {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- {} log (ns {}) ---\n{}", self.name, self.ns, self.log_tail(80));
        }
        self.kill9();
    }
}

/// etcdctl in namespace `hub` against `endpoints`.
pub fn hub_etcdctl(hub: &str, endpoints: &str, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", hub, ETCDCTL])
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running etcdctl")
}

/// What `endpoint status` of one member says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    pub member_id: u64,
    /// 0 when the member knows no leader.
    pub leader: u64,
    pub term: u64,
    pub raft_index: u64,
    pub revision: i64,
}

/// A cluster of the project's etcd, one member per namespace of a [`Network`].
pub struct NetCluster {
    /// Members first: they are killed before their namespaces are deleted.
    pub members: Vec<NetMember>,
    pub net: Network,
}

impl NetCluster {
    /// Starts `size` members of a new cluster, each in its own namespace, and waits until
    /// every one is healthy.
    /// The binary is the project's etcd, or the one `NETNS_ETCD` names (e.g. /usr/bin/etcd,
    /// to hold a test itself against Debian's etcd 3.4), with `NETNS_ETCD_ARGS` (split on
    /// whitespace, e.g. `--pre-vote`, which etcd 3.4 leaves off) added to `extra_args`.
    pub fn start(size: usize, extra_args: &[&str]) -> NetCluster {
        let binary = std::env::var_os("NETNS_ETCD").map(PathBuf::from).unwrap_or_else(|| bin("etcd"));
        let env_args = std::env::var("NETNS_ETCD_ARGS").unwrap_or_default();
        let mut args: Vec<&str> = extra_args.to_vec();
        args.extend(env_args.split_whitespace());
        Self::start_binary(&binary, size, &args)
    }

    /// Like [`NetCluster::start`] with another etcd binary (Debian's etcd 3.4, say, to
    /// check a test against the reference implementation).
    pub fn start_binary(binary: &Path, size: usize, extra_args: &[&str]) -> NetCluster {
        Self::launch(binary, size, extra_args, false)
    }

    /// Like [`NetCluster::start`], with every member's data dir on its own lazyfs disk
    /// ([`crate::lazyfs::LazyDisk`]), so that [`NetMember::power_cut`] works.
    pub fn start_on_lazy_disks(size: usize, extra_args: &[&str]) -> NetCluster {
        let binary = std::env::var_os("NETNS_ETCD").map(PathBuf::from).unwrap_or_else(|| bin("etcd"));
        let env_args = std::env::var("NETNS_ETCD_ARGS").unwrap_or_default();
        let mut args: Vec<&str> = extra_args.to_vec();
        args.extend(env_args.split_whitespace());
        Self::launch(&binary, size, &args, true)
    }

    fn launch(binary: &Path, size: usize, extra_args: &[&str], lazy: bool) -> NetCluster {
        let net = Network::create(size);
        let initial: Vec<String> =
            (0..size).map(|i| format!("m{i}=http://{}:{PEER_PORT}", net.ip(i))).collect();
        let initial = initial.join(",");
        let members = (0..size)
            .map(|i| {
                let ip = net.ip(i);
                let dir = tempfile::tempdir().expect("tempdir");
                let disk = lazy.then(crate::lazyfs::LazyDisk::new);
                let data_dir =
                    disk.as_ref().map_or_else(|| dir.path().join("data"), |d| d.path().join("data"));
                let name = format!("m{i}");
                let client_url = format!("http://{ip}:{CLIENT_PORT}");
                let peer_url = format!("http://{ip}:{PEER_PORT}");
                let mut args: Vec<String> = [
                    "--name",
                    &name,
                    "--data-dir",
                    &data_dir.display().to_string(),
                    "--listen-client-urls",
                    &client_url,
                    "--advertise-client-urls",
                    &client_url,
                    "--listen-peer-urls",
                    &peer_url,
                    "--initial-advertise-peer-urls",
                    &peer_url,
                    "--initial-cluster",
                    &initial,
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                args.extend(extra_args.iter().map(|s| s.to_string()));
                let mut m = NetMember {
                    child: None,
                    args,
                    binary: binary.to_path_buf(),
                    paused: false,
                    dir,
                    name,
                    ns: net.ns(i).to_string(),
                    hub: net.hub().to_string(),
                    ip,
                    disk,
                };
                m.spawn();
                m
            })
            .collect();
        let mut c = NetCluster { members, net };
        for m in &mut c.members {
            m.wait_ready(Duration::from_secs(60));
        }
        c
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Endpoints of the members for which `keep` holds, comma-separated.
    pub fn endpoints_where(&self, keep: impl Fn(usize) -> bool) -> String {
        self.members
            .iter()
            .enumerate()
            .filter(|(i, _)| keep(*i))
            .map(|(_, m)| m.endpoint())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `endpoint status` of member `i`, None when it does not answer within 2 s.
    pub fn status(&self, i: usize) -> Option<MemberStatus> {
        let out = self.members[i].etcdctl(&["endpoint", "status", "-w", "json", "--command-timeout=2s"]);
        if !out.status.success() {
            return None;
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let s = &v[0]["Status"];
        Some(MemberStatus {
            member_id: s["header"]["member_id"].as_u64()?,
            leader: s["leader"].as_u64().unwrap_or(0),
            term: s["raftTerm"].as_u64().unwrap_or(0),
            raft_index: s["raftIndex"].as_u64().unwrap_or(0),
            revision: s["header"]["revision"].as_i64().unwrap_or(0),
        })
    }

    /// The index of the member that leads, as every member in `among` agrees; None while
    /// they disagree, know no leader, or the leader is not among them.
    pub fn leader_among(&self, among: &[usize]) -> Option<usize> {
        let statuses: Vec<MemberStatus> = among.iter().map(|&i| self.status(i)).collect::<Option<_>>()?;
        let leader = statuses.first()?.leader;
        if leader == 0 || statuses.iter().any(|s| s.leader != leader) {
            return None;
        }
        among.iter().zip(&statuses).find(|(_, s)| s.member_id == leader).map(|(&i, _)| i)
    }

    /// Waits until the members in `among` agree on a leader among them; returns its index.
    pub fn wait_leader(&self, among: &[usize], timeout: Duration) -> usize {
        wait_for(
            &format!("a leader agreed by members {among:?}"),
            timeout,
            Duration::from_millis(100),
            || self.leader_among(among),
        )
    }

    /// Indices of all members.
    pub fn all(&self) -> Vec<usize> {
        (0..self.len()).collect()
    }

    /// Cuts member `i` off from the others.
    pub fn isolate(&mut self, i: usize) {
        self.net.isolate(i);
    }

    /// Removes every partition.
    pub fn heal(&mut self) {
        self.net.heal();
    }

    /// `endpoint hashkv` of member `i` at revision `rev`.
    pub fn hash(&self, i: usize, rev: i64) -> Option<u64> {
        let out = self.members[i].etcdctl(&[
            "endpoint",
            "hashkv",
            "-w",
            "json",
            "--command-timeout=5s",
            &format!("--rev={rev}"),
        ]);
        if !out.status.success() {
            return None;
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        v[0]["HashKV"]["hash"].as_u64()
    }

    /// Waits until the members in `among` report the same revision and the same KV hash at
    /// it; returns (revision, hash).
    pub fn wait_converged(&self, among: &[usize], timeout: Duration) -> (i64, u64) {
        self.try_converged(among, timeout).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`NetCluster::wait_converged`], but says why instead of panicking.
    pub fn try_converged(&self, among: &[usize], timeout: Duration) -> Result<(i64, u64), String> {
        let mut last = Vec::new();
        let deadline = Instant::now() + timeout;
        loop {
            let revs: Vec<Option<i64>> = among.iter().map(|&i| self.status(i).map(|s| s.revision)).collect();
            if let Some(&Some(rev)) = revs.first()
                && rev > 0
                && revs.iter().all(|r| *r == Some(rev))
            {
                let hashes: Vec<Option<u64>> = among.iter().map(|&i| self.hash(i, rev)).collect();
                if let Some(&Some(h)) = hashes.first()
                    && hashes.iter().all(|x| *x == Some(h))
                {
                    return Ok((rev, h));
                }
                last = hashes.iter().map(|h| format!("{h:?}")).collect();
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "members {among:?} did not converge within {timeout:?}: revisions {revs:?}, hashes {last:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// A 10.x address of this machine on an interface of its own, for a test server that needs
/// an address other than loopback (Endpoints refuse 127.0.0.0/8) while its traffic stays on
/// this machine (a local address is delivered through `lo`). The interface is one end of a
/// veth pair (`e2ed<pid>x<seq>`, peer `e2ep...`; the kernel here has no `dummy` driver),
/// deleted on drop; those of test processes that died are swept at the next creation.
pub struct DummyAddress {
    link: String,
    pub ip: Ipv4Addr,
}

impl DummyAddress {
    pub fn create() -> DummyAddress {
        require_tools();
        sweep_stale_dummies();
        let pid = std::process::id();
        let seq = NET_SEQ.fetch_add(1, Ordering::Relaxed);
        let k = pid.wrapping_mul(64).wrapping_add(seq);
        // 10.200-231.x.y: apart from [`Network`]'s 10.64-191 subnets.
        let ip = Ipv4Addr::new(10, 200 + ((k >> 16) % 32) as u8, ((k >> 8) % 256) as u8, (k % 254) as u8 + 1);
        let link = format!("e2ed{}x{seq}", pid % 1_000_000);
        let peer = format!("e2ep{}x{seq}", pid % 1_000_000);
        run("ip", &["link", "add", &link, "type", "veth", "peer", "name", &peer]);
        let dummy = DummyAddress { link, ip };
        run("ip", &["addr", "add", &format!("{ip}/32"), "dev", &dummy.link]);
        run("ip", &["link", "set", &dummy.link, "up"]);
        dummy
    }
}

impl Drop for DummyAddress {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.link]).stderr(Stdio::null()).status();
    }
}

/// Deletes the interfaces of earlier test processes that no longer run.
fn sweep_stale_dummies() {
    let Ok(entries) = std::fs::read_dir("/sys/class/net") else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((pid, _)) = name.strip_prefix("e2ed").and_then(|r| r.split_once('x')) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new("ip").args(["link", "del", &name]).stderr(Stdio::null()).status();
        }
    }
}
