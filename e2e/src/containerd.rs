//! A private containerd for a test: its own root, state, socket, CNI bridge and pod CIDR
//! (written by `hack/containerd-config.sh`), with the project's images imported by
//! `hack/build-images.sh`. On drop every task it runs is killed, containerd stops, mounts
//! under its directory are detached and its bridge is deleted.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::wait_for;

/// The repository's `hack/` directory.
pub fn hack(script: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("hack").join(script)
}

/// The test image (`hack/build-images.sh`), under its versioned tag: pull policy IfNotPresent.
pub const BUSYBOX: &str = "localhost/busybox:1.35";

pub struct Containerd {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub bridge: String,
    pub pod_cidr: String,
    /// The network namespace it runs in (None: the test's own).
    pub netns: Option<String>,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// True when this machine can run containers (root, containerd installed).
pub fn available() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root && Path::new("/usr/bin/containerd").exists()
}

impl Containerd {
    pub fn start() -> Containerd {
        Containerd::start_in(None)
    }

    /// Starts containerd inside network namespace `netns` (a node of a multi-node test):
    /// its CNI bridge and pod network namespaces are made there.
    pub fn start_in(netns: Option<&str>) -> Containerd {
        let dir = tempfile::Builder::new().prefix("ctrd").tempdir().expect("tempdir");
        // A bridge name and a /24 no other test process on this machine uses at once.
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let bridge = format!("k8s{}x{n}", pid % 100_000);
        let pod_cidr = format!("10.{}.{}.0/24", 100 + (pid % 100), (pid / 100 % 200) + n);
        let out = Command::new("bash")
            .arg(hack("containerd-config.sh"))
            .args([dir.path().to_str().expect("utf-8 path"), &pod_cidr, &bridge])
            .output()
            .expect("containerd-config.sh");
        assert!(out.status.success(), "containerd-config.sh: {}", String::from_utf8_lossy(&out.stderr));
        let socket = dir.path().join("containerd.sock");
        let log = std::fs::File::create(dir.path().join("containerd.log")).expect("log");
        let mut cmd = Command::new("containerd");
        if let Some(ns) = netns {
            crate::netns::command_in(&mut cmd, ns);
        }
        let child = cmd
            .arg("--config")
            .arg(dir.path().join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("starting containerd");
        let c =
            Containerd { child: Some(child), dir, socket, bridge, pod_cidr, netns: netns.map(str::to_owned) };
        wait_for("containerd socket", Duration::from_secs(30), Duration::from_millis(100), || {
            c.ctr(&["version"]).status.success().then_some(())
        });
        c.build_images(&[]);
        c
    }

    /// `hack/build-images.sh --address <this socket> <args>`, which must succeed.
    fn build_images(&self, args: &[&str]) {
        let out = Command::new("bash")
            .arg(hack("build-images.sh"))
            .arg("--address")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("build-images.sh");
        assert!(
            out.status.success(),
            "build-images.sh {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Builds the image of one of our binaries (`hack/build-images.sh --component`) and
    /// imports it here, returning its name (`localhost/<name>:local`).
    pub fn import_component(&self, name: &str) -> String {
        self.build_images(&["--component", &format!("{name}={}", crate::bin(name).display())]);
        format!("localhost/{name}:local")
    }

    /// `ctr` against this instance, in the CRI's `k8s.io` namespace.
    pub fn ctr(&self, args: &[&str]) -> std::process::Output {
        Command::new("ctr")
            .arg("--address")
            .arg(&self.socket)
            .args(["-n", "k8s.io"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("running ctr")
    }

    /// IDs of the containers (sandboxes included) containerd holds.
    pub fn containers(&self) -> Vec<String> {
        let out = self.ctr(&["containers", "ls", "-q"]);
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).filter(|l| !l.is_empty()).collect()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let s = std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default();
        let all: Vec<&str> = s.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// Kills and deletes every task and container of the containerd at `socket` (`k8s.io`
/// namespace); runc removes their cgroups.
pub fn remove_all_containers(socket: &std::path::Path) {
    let ctr = |args: &[&str]| {
        Command::new("ctr")
            .arg("--address")
            .arg(socket)
            .args(["-n", "k8s.io"])
            .args(args)
            .stdin(Stdio::null())
            .output()
    };
    let containers = || -> Vec<String> {
        let out = ctr(&["containers", "ls", "-q"]).map(|o| o.stdout).unwrap_or_default();
        String::from_utf8_lossy(&out).lines().filter(|l| !l.is_empty()).map(str::to_string).collect()
    };
    for id in containers() {
        let _ = ctr(&["tasks", "kill", "-s", "SIGKILL", &id]);
    }
    for id in containers() {
        let _ = ctr(&["tasks", "delete", "-f", &id]);
        let _ = ctr(&["containers", "delete", &id]);
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- containerd log ---\n{}", self.log_tail(30));
        }
        // Tasks outlive containerd (their shims are separate processes): kill them first.
        remove_all_containers(&self.socket);
        if let Some(mut c) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while std::time::Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        crate::unmount_under(self.dir.path());
        // Inside a namespace the bridge and the NAT rules go with the namespace.
        if self.netns.is_none() {
            let _ = Command::new("ip").args(["link", "delete", &self.bridge]).output();
            remove_cni_nat_rules(&format!("k8srs-{}", self.bridge));
        }
    }
}

/// Removes the NAT rules CNI's bridge and portmap plugins wrote for `network`'s pods (a
/// masquerade chain per pod, hostPort DNAT chains) and their chains. They stay in the host's
/// tables when pods are killed rather than torn down through CNI DEL, and a stale hostPort
/// DNAT would swallow later connections to that port on this machine.
pub fn remove_cni_nat_rules(network: &str) {
    let Ok(out) = Command::new("iptables-save").args(["-t", "nat"]).output() else { return };
    let Some(script) = cni_nat_cleanup(&String::from_utf8_lossy(&out.stdout), network) else { return };
    let Ok(mut child) = Command::new("iptables-restore")
        .arg("--noflush")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    else {
        return;
    };
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        let _ = stdin.write_all(script.as_bytes());
    }
    let _ = child.wait();
}

/// The `iptables-restore --noflush` input deleting `network`'s rules (found by the
/// `name: "<network>"` comment CNI puts on each) and the per-pod chains they jump to.
fn cni_nat_cleanup(saved: &str, network: &str) -> Option<String> {
    let tag = format!("name: \\\"{network}\\\"");
    let mut deletes = String::new();
    let mut chains = Vec::new();
    for rule in saved.lines().filter_map(|l| l.strip_prefix("-A ")).filter(|l| l.contains(&tag)) {
        deletes.push_str(&format!("-D {rule}\n"));
        let target = rule.split(" -j ").nth(1).and_then(|t| t.split_whitespace().next()).unwrap_or("");
        if target.starts_with("CNI-") && !target.starts_with("CNI-HOSTPORT-") {
            chains.push(target.to_string());
        }
    }
    if deletes.is_empty() {
        return None;
    }
    let mut script = format!("*nat\n{deletes}");
    for c in chains {
        script.push_str(&format!("-F {c}\n-X {c}\n"));
    }
    script.push_str("COMMIT\n");
    Some(script)
}

#[cfg(test)]
mod tests {
    #[test]
    fn cni_nat_cleanup_takes_only_the_network() {
        let saved = r#"*nat
-A POSTROUTING -s 10.1.0.3/32 -m comment --comment "name: \"k8srs-k8s1x0\" id: \"ab\"" -j CNI-252080583844c0f4a0e99d38
-A POSTROUTING -s 10.2.0.3/32 -m comment --comment "name: \"k8srs-k8s2x0\" id: \"cd\"" -j CNI-e2139bd06284531182c694f1
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"k8srs-k8s1x0\" id: \"ab\"" -m multiport --dports 18080 -j CNI-DN-96d2dc452acef29182ced
COMMIT
"#;
        let script = super::cni_nat_cleanup(saved, "k8srs-k8s1x0").unwrap();
        assert!(script.contains("-D POSTROUTING -s 10.1.0.3/32"));
        assert!(!script.contains("10.2.0.3"));
        assert!(script.contains("-F CNI-252080583844c0f4a0e99d38\n-X CNI-252080583844c0f4a0e99d38\n"));
        assert!(script.contains("-X CNI-DN-96d2dc452acef29182ced"));
        assert!(super::cni_nat_cleanup(saved, "k8srs-k8s3x0").is_none());
    }
}
