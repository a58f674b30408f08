//! A kubelet process for tests: our binary against a test [`Containerd`], registered with a
//! [`KubeApiserver`] (or standalone), its root dir, pod logs, static pod directory and
//! cgroup root all private to the test. On drop the kubelet is killed (its pods are not:
//! the test's containerd removes them).

use std::io::Read;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::apiserver::KubeApiserver;
use crate::containerd::Containerd;
use crate::{free_port, loopback_ip, wait_for};

pub struct Kubelet {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub node: String,
    pub ip: Ipv4Addr,
    pub port: u16,
    pub healthz_port: u16,
    pub manifests: PathBuf,
    pub root_dir: PathBuf,
    pub cgroup_root: String,
    runtime_socket: PathBuf,
    args: Vec<String>,
    /// The network namespace it runs in (None: the test's own).
    netns: Option<String>,
}

impl Kubelet {
    /// Starts a kubelet named `node`, trusting client certificates from `client_ca`;
    /// `extra_config` is appended to its KubeletConfiguration YAML.
    pub fn start(
        api: Option<&KubeApiserver>,
        ctrd: &Containerd,
        node: &str,
        client_ca: Option<&std::path::Path>,
        extra_config: &str,
    ) -> Kubelet {
        let ip = loopback_ip();
        Kubelet::start_at(api, ctrd, node, None, ip, free_port(ip), client_ca, extra_config)
    }

    /// Starts a kubelet as [`Kubelet::start`] does, inside network namespace `netns` (a
    /// node of a multi-node test) with `ip` as its node IP and serving address, its API on
    /// `port` and healthz on `port + 1`.
    #[allow(clippy::too_many_arguments)]
    pub fn start_at(
        api: Option<&KubeApiserver>,
        ctrd: &Containerd,
        node: &str,
        netns: Option<&str>,
        ip: Ipv4Addr,
        port: u16,
        client_ca: Option<&std::path::Path>,
        extra_config: &str,
    ) -> Kubelet {
        let dir = tempfile::Builder::new().prefix("kubelet").tempdir().expect("tempdir");
        let healthz_port = if netns.is_some() { port + 1 } else { free_port(ip) };
        let manifests = dir.path().join("manifests");
        std::fs::create_dir_all(&manifests).expect("manifests");
        let root_dir = dir.path().join("root");
        let cgroup_root = format!("/k8srs-e2e-{}", dir.path().file_name().unwrap().to_string_lossy());
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 staticPodPath: {manifests}\nfileCheckFrequency: 1s\nsyncFrequency: 10s\n\
                 containerRuntimeEndpoint: unix://{sock}\ncgroupRoot: {cgroup_root}\n\
                 podLogsDir: {logs}\naddress: {ip}\nport: {port}\nhealthzBindAddress: {ip}\nhealthzPort: {healthz_port}\n\
                 clusterDomain: cluster.local\nauthentication:\n  anonymous:\n    enabled: false\n  webhook:\n    enabled: true\n{x509}\
                 authorization:\n  mode: Webhook\n{extra_config}",
                x509 = client_ca.map(|ca| format!("  x509:\n    clientCAFile: {}\n", ca.display())).unwrap_or_default(),
                manifests = manifests.display(),
                sock = ctrd.socket.display(),
                logs = dir.path().join("pod-logs").display(),
            ),
        )
        .expect("config");
        let mut args = vec![
            format!("--config={}", config.display()),
            format!("--hostname-override={node}"),
            format!("--root-dir={}", root_dir.display()),
            format!("--node-ip={ip}"),
        ];
        if let Some(api) = api {
            args.push(format!("--kubeconfig={}", api.kubeconfig.display()));
        }
        let mut k = Kubelet {
            child: None,
            dir,
            node: node.to_string(),
            ip,
            port,
            healthz_port,
            manifests,
            root_dir,
            cgroup_root,
            runtime_socket: ctrd.socket.clone(),
            args,
            netns: netns.map(str::to_owned),
        };
        k.spawn();
        k
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("kubelet.log"))
            .expect("log");
        let mut cmd = Command::new(crate::bin("kubelet"));
        if let Some(ns) = &self.netns {
            crate::netns::command_in(&mut cmd, ns);
        }
        let child = cmd
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("starting kubelet");
        self.child = Some(child);
        let url = format!("http://{}:{}/healthz", self.ip, self.healthz_port);
        wait_for("kubelet healthz", Duration::from_secs(60), Duration::from_millis(100), || {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!("kubelet exited with {status}; log:\n{}", self.log_tail(40));
            }
            let out = Command::new("curl").args(["-sf", &url]).output().ok()?;
            out.status.success().then_some(())
        });
    }

    /// Stops the kubelet (SIGKILL, as a crash); its pods keep running.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again with the same flags.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// GET `path` on the kubelet's HTTPS port with `token` (curl, self-signed): (status, body).
    pub fn get(&self, path: &str, token: Option<&str>) -> (u16, String) {
        let mut cmd = Command::new("curl");
        cmd.args(["-sk", "-o", "-", "-w", "\n%{http_code}"]);
        if let Some(t) = token {
            cmd.arg("-H").arg(format!("Authorization: Bearer {t}"));
        }
        let out = cmd.arg(format!("https://{}:{}{path}", self.ip, self.port)).output().expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_owned())
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(self.dir.path().join("kubelet.log")) {
            let _ = f.read_to_string(&mut s);
        }
        let all: Vec<&str> = s.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The pod cgroup directories left in every hierarchy under this kubelet's cgroup root.
    pub fn pod_cgroups(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for ctrl in std::fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten() {
            for qos in ["", "burstable/", "besteffort/"] {
                let dir =
                    PathBuf::from(format!("{}{}/kubepods/{qos}", ctrl.path().display(), self.cgroup_root));
                for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                    if e.file_name().to_string_lossy().starts_with("pod") {
                        found.push(e.path());
                    }
                }
            }
        }
        found
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- kubelet {} log ---\n{}", self.node, self.log_tail(80));
        }
        self.kill();
        // Its containers go before its cgroup root can (containerd itself stops later).
        crate::containerd::remove_all_containers(&self.runtime_socket);
        crate::unmount_under(self.dir.path());
        // The cgroup root of this kubelet: remove what is left, deepest first.
        for ctrl in std::fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten() {
            let root = PathBuf::from(format!("{}{}", ctrl.path().display(), self.cgroup_root));
            remove_cgroup_tree(&root);
        }
    }
}

fn remove_cgroup_tree(dir: &std::path::Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().is_dir() {
            remove_cgroup_tree(&e.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}
