//! Multi-member clusters of the project's etcd as processes, each member on its own
//! loopback address, for the raft fault tests.

use std::time::{Duration, Instant};

use crate::{Etcd, EtcdOptions, Flavor, free_port, loopback_ip, wait_for};

pub struct Cluster {
    pub members: Vec<Etcd>,
    pub flavor: Flavor,
    /// Extra flags every member (including ones added later) gets.
    pub extra_args: Vec<String>,
}

impl Cluster {
    /// Starts `size` members of a new cluster and waits until every one is healthy.
    pub fn start(size: usize, extra_args: &[&str]) -> Cluster {
        Self::start_flavor(size, extra_args, Flavor::Ours)
    }

    pub fn start_flavor(size: usize, extra_args: &[&str], flavor: Flavor) -> Cluster {
        let specs: Vec<(String, std::net::Ipv4Addr, u16, u16)> = (0..size)
            .map(|i| {
                let ip = loopback_ip();
                (format!("m{i}"), ip, free_port(ip), free_port(ip))
            })
            .collect();
        let initial: Vec<String> = specs.iter().map(|(n, ip, _, p)| format!("{n}=http://{ip}:{p}")).collect();
        let initial = initial.join(",");
        let extra_args: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
        let members = specs
            .into_iter()
            .map(|(name, ip, client_port, peer_port)| {
                Etcd::start(EtcdOptions {
                    flavor,
                    ip: Some(ip),
                    name: Some(name),
                    client_port: Some(client_port),
                    peer_port: Some(peer_port),
                    initial_cluster: Some(initial.clone()),
                    extra_args: extra_args.clone(),
                    no_wait: true,
                    ..Default::default()
                })
            })
            .collect();
        let mut c = Cluster { members, flavor, extra_args };
        for m in &mut c.members {
            m.wait_ready();
        }
        c
    }

    /// All client endpoints, comma-separated, as etcdctl's `--endpoints` takes them.
    pub fn endpoints(&self) -> String {
        self.members.iter().map(Etcd::endpoint).collect::<Vec<_>>().join(",")
    }

    /// Endpoints of the members for which `keep` holds.
    pub fn endpoints_where(&self, keep: impl Fn(usize) -> bool) -> String {
        self.members
            .iter()
            .enumerate()
            .filter(|(i, _)| keep(*i))
            .map(|(_, m)| m.endpoint())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// etcdctl against every member.
    pub fn etcdctl(&self, args: &[&str]) -> std::process::Output {
        let mut c = std::process::Command::new(crate::ETCDCTL);
        c.env("ETCDCTL_API", "3").arg(format!("--endpoints={}", self.endpoints())).args(args);
        c.output().expect("running etcdctl")
    }

    pub fn etcdctl_ok(&self, args: &[&str]) -> String {
        let out = self.etcdctl(args);
        assert!(
            out.status.success(),
            "etcdctl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    }

    /// `endpoint status -w json` of one member: (member id, leader id, raft term, is learner).
    pub fn status(&self, i: usize) -> Option<(u64, u64, u64, bool)> {
        let out = self.members[i].etcdctl(&["endpoint", "status", "-w", "json", "--command-timeout=2s"]);
        if !out.status.success() {
            return None;
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let s = &v[0]["Status"];
        Some((
            s["header"]["member_id"].as_u64()?,
            s["leader"].as_u64()?,
            s["raftTerm"].as_u64()?,
            s["isLearner"].as_bool().unwrap_or(false),
        ))
    }

    /// The index of the member that leads, as the members in `among` agree.
    pub fn leader_among(&self, among: &[usize]) -> Option<usize> {
        let mut leader_id = None;
        for &i in among {
            let (_, leader, _, _) = self.status(i)?;
            if leader == 0 || leader_id.is_some_and(|l| l != leader) {
                return None;
            }
            leader_id = Some(leader);
        }
        let leader_id = leader_id?;
        among.iter().copied().find(|&i| self.status(i).is_some_and(|s| s.0 == leader_id))
    }

    /// Waits until the running members agree on a leader; returns its index.
    pub fn wait_leader(&mut self, timeout: Duration) -> usize {
        let running: Vec<usize> = (0..self.members.len()).filter(|&i| self.members[i].is_running()).collect();
        wait_for("an agreed leader", timeout, Duration::from_millis(50), || self.leader_among(&running))
    }

    /// Adds a member with `member add` (as a learner when asked), starts it with
    /// `--initial-cluster-state existing`, and returns its index once it serves.
    pub fn add_member(&mut self, learner: bool) -> usize {
        let ip = loopback_ip();
        let (client_port, peer_port) = (free_port(ip), free_port(ip));
        let name = format!("m{}", self.members.len());
        let peer_url = format!("http://{ip}:{peer_port}");
        let mut args = vec!["member", "add", name.as_str(), "--peer-urls", peer_url.as_str()];
        if learner {
            args.push("--learner");
        }
        let out = self.etcdctl_ok(&args);
        let initial = out
            .lines()
            .find_map(|l| l.strip_prefix("ETCD_INITIAL_CLUSTER=\""))
            .and_then(|l| l.strip_suffix('"'))
            .unwrap_or_else(|| panic!("member add printed no ETCD_INITIAL_CLUSTER: {out}"))
            .to_string();
        let member = Etcd::start(EtcdOptions {
            flavor: self.flavor,
            ip: Some(ip),
            name: Some(name),
            client_port: Some(client_port),
            peer_port: Some(peer_port),
            initial_cluster: Some(initial),
            initial_cluster_state: Some("existing".into()),
            extra_args: self.extra_args.clone(),
            ..Default::default()
        });
        self.members.push(member);
        self.members.len() - 1
    }

    /// `endpoint hashkv` of every running member at `rev` (0 = current).
    pub fn hashes(&mut self, rev: i64) -> Vec<u64> {
        let rev = format!("--rev={rev}");
        let mut out = Vec::new();
        for m in self.members.iter_mut() {
            if !m.is_running() {
                continue;
            }
            let v: serde_json::Value =
                serde_json::from_str(&m.etcdctl_ok(&["endpoint", "hashkv", "-w", "json", &rev]))
                    .expect("hashkv json");
            out.push(v[0]["HashKV"]["hash"].as_u64().unwrap_or(0));
        }
        out
    }

    /// Waits until every running member reports the same KV hash at the same revision.
    pub fn wait_converged(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            // Compare at a revision every member has: the smallest current one.
            let revs: Vec<i64> = self
                .members
                .iter_mut()
                .filter_map(|m| m.is_running().then_some(m))
                .map(|m| {
                    let out = m.etcdctl(&["get", "x", "-w", "json", "--consistency=s"]);
                    serde_json::from_slice::<serde_json::Value>(&out.stdout)
                        .ok()
                        .and_then(|v| v["header"]["revision"].as_i64())
                        .unwrap_or(0)
                })
                .collect();
            let max = revs.iter().copied().max().unwrap_or(0);
            if revs.iter().all(|&r| r == max) && max > 0 {
                let h = self.hashes(max);
                if h.windows(2).all(|w| w[0] == w[1]) {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "members did not converge within {timeout:?}: revisions {revs:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Where one member of a cluster will live before it is started: for tests that start
/// members one by one, or with flags that differ between members (another cluster token).
#[derive(Clone, Debug)]
pub struct MemberSpec {
    pub name: String,
    pub ip: std::net::Ipv4Addr,
    pub client_port: u16,
    pub peer_port: u16,
}

/// Addresses for `size` members named `m0`, `m1`, … and the `--initial-cluster` naming
/// them all.
pub fn plan(size: usize) -> (Vec<MemberSpec>, String) {
    let specs: Vec<MemberSpec> = (0..size)
        .map(|i| {
            let ip = loopback_ip();
            MemberSpec { name: format!("m{i}"), ip, client_port: free_port(ip), peer_port: free_port(ip) }
        })
        .collect();
    let initial = specs.iter().map(|s| format!("{}={}", s.name, s.peer_url())).collect::<Vec<_>>().join(",");
    (specs, initial)
}

impl MemberSpec {
    pub fn peer_url(&self) -> String {
        format!("http://{}:{}", self.ip, self.peer_port)
    }

    /// Options for this member of a new cluster described by `initial_cluster`, not
    /// waiting for it to be healthy (that needs a quorum); callers add the rest.
    pub fn options(&self, initial_cluster: &str) -> EtcdOptions {
        EtcdOptions {
            ip: Some(self.ip),
            name: Some(self.name.clone()),
            client_port: Some(self.client_port),
            peer_port: Some(self.peer_port),
            initial_cluster: Some(initial_cluster.to_string()),
            no_wait: true,
            ..Default::default()
        }
    }

    /// Starts this member of a new cluster described by `initial_cluster`, with a fresh
    /// data dir, without waiting for it to be healthy (that needs a quorum).
    pub fn start(&self, initial_cluster: &str, extra_args: &[&str]) -> Etcd {
        Etcd::start(EtcdOptions {
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            ..self.options(initial_cluster)
        })
    }
}

/// Restores `snap` (an `etcdctl snapshot save` file) into a fresh data dir with `to`'s
/// tool (Debian's `etcdctl snapshot restore`, or our `etcd snapshot restore`) and starts
/// a single member of that flavor on it; `health_user` as in [`EtcdOptions`].
pub fn restore_and_start(to: Flavor, snap: &std::path::Path, health_user: Option<&str>) -> Etcd {
    let (specs, initial) = plan(1);
    let spec = &specs[0];
    let dirs = tempfile::tempdir().expect("tempdir");
    let data_dir = dirs.path().join("restored");
    let mut restore = match to {
        Flavor::Real => {
            let mut c = std::process::Command::new(crate::ETCDCTL);
            c.env("ETCDCTL_API", "3");
            c
        }
        Flavor::Ours => std::process::Command::new(crate::bin("etcd")),
    };
    let out = restore
        .arg("snapshot")
        .arg("restore")
        .arg(snap)
        .args(["--name", &spec.name, "--data-dir", data_dir.to_str().expect("utf-8 path")])
        .args(["--initial-cluster", &initial, "--initial-advertise-peer-urls", &spec.peer_url()])
        .output()
        .expect("running the restore tool");
    assert!(
        out.status.success(),
        "{to:?} restore of {}: {}",
        snap.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut etcd = Etcd::start(EtcdOptions {
        flavor: to,
        ip: Some(spec.ip),
        name: Some(spec.name.clone()),
        client_port: Some(spec.client_port),
        peer_port: Some(spec.peer_port),
        initial_cluster: Some(initial.clone()),
        data_dir: Some(data_dir),
        health_user: health_user.map(str::to_string),
        ..Default::default()
    });
    // The restored data dir lives as long as the member.
    etcd.keep_alive(dirs);
    etcd
}

impl Etcd {
    /// Whether the server's log (all of it) contains `needle`.
    pub fn log_contains(&self, needle: &str) -> bool {
        self.log_tail(usize::MAX).contains(needle)
    }
}
