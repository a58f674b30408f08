//! A control-plane component process for tests (kube-scheduler, kube-controller-manager),
//! pointed at a [`KubeApiserver`] with its admin kubeconfig, serving its HTTPS port on a
//! free loopback address.

use std::io::Read;
use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::apiserver::KubeApiserver;
use crate::{free_port, loopback_ip, wait_for};

pub struct Component {
    name: &'static str,
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub ip: Ipv4Addr,
    pub port: u16,
}

impl Component {
    /// Starts the binary `name` with `extra_args` and waits until `/healthz` answers.
    pub fn start(name: &'static str, api: &KubeApiserver, extra_args: &[&str]) -> Component {
        let dir = tempfile::tempdir().expect("tempdir");
        let ip = loopback_ip();
        let port = free_port(ip);
        let log = std::fs::File::create(dir.path().join(format!("{name}.log"))).expect("log");
        let child = Command::new(crate::bin(name))
            .arg(format!("--kubeconfig={}", api.kubeconfig.display()))
            .arg(format!("--bind-address={ip}"))
            .arg(format!("--secure-port={port}"))
            .arg(format!("--cert-dir={}", dir.path().join("certs").display()))
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        let mut s = Component { name, child: Some(child), dir, ip, port };
        wait_for(&format!("{name} /healthz"), Duration::from_secs(30), Duration::from_millis(100), || {
            if let Some(Ok(Some(status))) = s.child.as_mut().map(|c| c.try_wait()) {
                panic!("{name} exited with {status}; log:\n{}", s.log_tail(40));
            }
            (s.get("/healthz").0 == 200).then_some(())
        });
        s
    }

    /// GET `path` on the secure port (self-signed certificate): (status, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        let out = Command::new("curl")
            .args([
                "-sk",
                "-o",
                "-",
                "-w",
                "\n%{http_code}",
                &format!("https://{}:{}{path}", self.ip, self.port),
            ])
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_owned())
    }

    /// The value of the first sample of `metric` whose line contains every label in
    /// `labels` (`profile="bin-packer"`), or 0.
    pub fn metric(&self, metric: &str, labels: &[&str]) -> f64 {
        let (_, body) = self.get("/metrics");
        body.lines()
            .filter(|l| l.starts_with(metric) && labels.iter().all(|x| l.contains(x)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .next()
            .unwrap_or(0.0)
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(self.dir.path().join(format!("{}.log", self.name))) {
            let _ = f.read_to_string(&mut s);
        }
        let all: Vec<&str> = s.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- {} log ---\n{}", self.name, self.log_tail(60));
        }
        self.kill9();
    }
}

/// kube-scheduler.
pub struct KubeScheduler;

impl KubeScheduler {
    pub fn start(api: &KubeApiserver, extra_args: &[&str]) -> Component {
        Component::start("kube-scheduler", api, extra_args)
    }
}

/// kube-controller-manager.
pub struct KubeControllerManager;

impl KubeControllerManager {
    pub fn start(api: &KubeApiserver, extra_args: &[&str]) -> Component {
        Component::start("kube-controller-manager", api, extra_args)
    }
}
