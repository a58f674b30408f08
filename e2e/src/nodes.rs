//! A Kubernetes cluster whose nodes each run in a network namespace of their own, as
//! separate hosts on one L2 segment: the control plane (etcd, kube-apiserver,
//! kube-scheduler, kube-controller-manager) in the hub namespace, and per node a containerd,
//! a kubelet and `hostgw` (routes to the other nodes' pod CIDRs, the node's CNI network).
//!
//! ```text
//!   hub 10.a.b.1: etcd, kube-apiserver, scheduler, controller-manager, hostgw (routes only)
//!    │ br0
//!    ├── node-0 10.a.b.10: containerd (bridge, pods 10.244.x.0/24), kubelet, hostgw
//!    └── node-1 10.a.b.11: ...
//! ```
//!
//! [`NodeCluster::start`] moves the calling thread into the hub (nextest runs each test in
//! a process of its own), so the test's kubectl, curl and kube-rs clients reach the API
//! server and, through the hub's routes, every pod by its IP.
//!
//! With [`ClusterOptions::cluster_dns`], kube-dns serves on the hub address (port 53) behind
//! the `kube-system/kube-dns` Service at [`CLUSTER_DNS_IP`], which is every kubelet's
//! `clusterDNS`: pods resolve names through kube-proxy's rules, as in a real cluster.

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::apiserver::KubeApiserver;
use crate::certs::TestCa;
use crate::component::{Component, KubeControllerManager, KubeScheduler};
use crate::containerd::Containerd;
use crate::dns::{FakeUpstream, KubeDns};
use crate::kubelet::Kubelet;
use crate::netns::{Network, command_in};
use crate::{Etcd, EtcdOptions, wait_for};

/// The pod network all nodes' pod CIDRs (/24 each) are allocated from.
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// The Service ClusterIP range.
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// The ClusterIP of `kube-system/kube-dns` (the 10th address of [`SERVICE_CIDR`], as
/// kubeadm picks it) when [`ClusterOptions::cluster_dns`] is on.
pub const CLUSTER_DNS_IP: &str = "10.96.0.10";
/// The kubelets' API port (each node has an address of its own).
pub const KUBELET_PORT: u16 = 10250;

/// A long-running process of a test (in some namespace), killed on drop, with its log.
pub struct Daemon {
    name: String,
    child: Option<Child>,
    pub log: PathBuf,
}

impl Daemon {
    /// Starts `binary args` in network namespace `netns` (None: the caller's), output to
    /// `<dir>/<name>.log`.
    pub fn start(name: &str, binary: &Path, args: &[String], netns: Option<&str>, dir: &Path) -> Daemon {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("log");
        let mut cmd = Command::new(binary);
        if let Some(ns) = netns {
            command_in(&mut cmd, ns);
        }
        let child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        Daemon { name: name.to_owned(), child: Some(child), log }
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        let all: Vec<&str> = s.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- {} log ---\n{}", self.name, self.log_tail(40));
        }
        self.kill();
    }
}

/// One node: its namespace, address and processes (dropped in field order: agents first,
/// then the kubelet, then containerd, which removes the pods' containers).
pub struct Node {
    /// Present when [`ClusterOptions::kube_proxy`] asked for it.
    pub kube_proxy: Option<Daemon>,
    pub hostgw: Daemon,
    pub kubelet: Kubelet,
    pub containerd: Containerd,
    pub name: String,
    pub netns: String,
    pub ip: Ipv4Addr,
    pub dir: tempfile::TempDir,
}

impl Node {
    /// Runs `args` inside this node's network namespace (`ip`, `nft`, `conntrack`, ...),
    /// returning its output.
    pub fn exec(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = Command::new(args[0]);
        command_in(&mut cmd, &self.netns);
        cmd.args(&args[1..]).stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("running {args:?}: {e}"))
    }
}

/// How to start a [`NodeCluster`].
#[derive(Clone, Debug, Default)]
pub struct ClusterOptions {
    pub nodes: usize,
    pub apiserver_args: Vec<String>,
    pub controller_manager_args: Vec<String>,
    /// Appended to every kubelet's KubeletConfiguration.
    pub kubelet_config: String,
    /// Also run kube-proxy on every node, in this mode (`nftables` or `iptables`).
    pub kube_proxy: Option<String>,
    /// Service accounts as a real cluster has them: signing keys for bound tokens and the
    /// ServiceAccount admission plugin on (tests otherwise run without it, creating no
    /// accounts).
    pub service_accounts: bool,
    /// Cluster DNS: kube-dns in the hub on the hub address, port 53, behind the selector-less
    /// `kube-system/kube-dns` Service ([`CLUSTER_DNS_IP`], with a hand-written
    /// EndpointSlice), and every kubelet's `clusterDNS` set to it. Needs `kube_proxy`, which
    /// carries the pods' queries to it.
    pub cluster_dns: bool,
}

/// The cluster's DNS when [`ClusterOptions::cluster_dns`] is on. kube-dns goes first, then
/// the upstream it forwards to (it answers everything with NXDOMAIN: nothing leaves the
/// machine).
pub struct ClusterDns {
    pub kube_dns: KubeDns,
    pub upstream: FakeUpstream,
}

pub struct NodeCluster {
    pub nodes: Vec<Node>,
    pub dns: Option<ClusterDns>,
    pub hub_hostgw: Daemon,
    pub controller_manager: Component,
    pub scheduler: Component,
    pub api: KubeApiserver,
    pub etcd: Etcd,
    /// The CA the kubelets trust for client certificates (the API server's own is signed
    /// by it, for logs, exec and port-forward).
    pub kubelet_client_ca: TestCa,
    /// The front proxy's CA (kubeadm's `front-proxy-ca`): the API server presents a client
    /// certificate it signed to extension API servers behind APIServices.
    pub front_proxy_ca: TestCa,
    pub dir: tempfile::TempDir,
    /// Last: the namespaces go once every process in them is gone.
    pub net: Network,
}

impl NodeCluster {
    /// Starts a cluster of `opts.nodes` nodes and waits until every node is Ready with a
    /// pod CIDR and its CNI network written.
    pub fn start(opts: ClusterOptions) -> NodeCluster {
        assert!(
            crate::containerd::available(),
            "multi-node tests need root and containerd (hack/install-deps.sh)"
        );
        let net = Network::create(opts.nodes);
        net.enter_hub();
        let dir = tempfile::tempdir().expect("tempdir");
        let etcd = Etcd::start(EtcdOptions::default());
        // The API server reaches kubelets with a client certificate their client CA signed,
        // as kubeadm sets it up.
        let kubelet_client_ca = TestCa::new("kubelet-client-ca");
        let client = kubelet_client_ca.client_cert("kube-apiserver-kubelet-client", Some("system:masters"));
        let kubelet_args = [
            format!("--kubelet-client-certificate={}", client.cert.display()),
            format!("--kubelet-client-key={}", client.key.display()),
            "--kubelet-preferred-address-types=InternalIP,Hostname".to_owned(),
        ];
        let front_proxy_ca = TestCa::new("front-proxy-ca");
        let proxy_client = front_proxy_ca.client_cert("front-proxy-client", None);
        let front_proxy_args = [
            format!("--requestheader-client-ca-file={}", front_proxy_ca.cert.display()),
            "--requestheader-allowed-names=front-proxy-client".to_owned(),
            "--requestheader-username-headers=X-Remote-User".to_owned(),
            "--requestheader-group-headers=X-Remote-Group".to_owned(),
            "--requestheader-extra-headers-prefix=X-Remote-Extra-".to_owned(),
            format!("--proxy-client-cert-file={}", proxy_client.cert.display()),
            format!("--proxy-client-key-file={}", proxy_client.key.display()),
        ];
        let mut api_args: Vec<&str> = vec!["--service-cluster-ip-range", SERVICE_CIDR];
        api_args.extend(kubelet_args.iter().map(String::as_str));
        api_args.extend(front_proxy_args.iter().map(String::as_str));
        let sa_args = if opts.service_accounts {
            let (key, public) = crate::certs::rsa_key(dir.path(), "sa");
            vec![
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_owned(),
                format!("--service-account-signing-key-file={}", key.display()),
                format!("--service-account-key-file={}", public.display()),
                // Upstream's default plugins, ServiceAccount among them.
                "--enable-admission-plugins=NodeRestriction".to_owned(),
            ]
        } else {
            Vec::new()
        };
        api_args.extend(sa_args.iter().map(String::as_str));
        api_args.extend(opts.apiserver_args.iter().map(String::as_str));
        let api = KubeApiserver::start_on(net.hub_ip(), &etcd.endpoint(), &api_args);
        let scheduler = KubeScheduler::start(&api, &[]);
        let cidr_args = [
            // Publishes kube-root-ca.crt, which every service-account token volume projects.
            format!("--root-ca-file={}", api.dir.path().join("certs/apiserver.crt").display()),
            "--allocate-node-cidrs=true".to_owned(),
            format!("--cluster-cidr={CLUSTER_CIDR}"),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        ];
        let mut cm_args: Vec<&str> = cidr_args.iter().map(String::as_str).collect();
        cm_args.extend(opts.controller_manager_args.iter().map(String::as_str));
        let controller_manager = KubeControllerManager::start(&api, &cm_args);
        let mut opts = opts;
        let dns = opts.cluster_dns.then(|| {
            assert!(
                opts.kube_proxy.is_some(),
                "cluster_dns needs kube_proxy: pods reach kube-dns by its Service"
            );
            opts.kubelet_config.push_str(&format!("\nclusterDNS: [\"{CLUSTER_DNS_IP}\"]\n"));
            start_cluster_dns(&api, net.hub_ip())
        });
        // The hub is no node, but the test's clients there reach pods by IP.
        let hub_hostgw = Daemon::start(
            "hostgw-hub",
            &crate::bin("hostgw"),
            &[format!("--kubeconfig={}", api.kubeconfig.display()), "--masquerade=false".into()],
            None,
            dir.path(),
        );
        let mut nodes = Vec::new();
        for i in 0..opts.nodes {
            nodes.push(start_node(&net, i, &api, &kubelet_client_ca.cert, &opts));
        }
        let cluster = NodeCluster {
            nodes,
            dns,
            hub_hostgw,
            controller_manager,
            scheduler,
            api,
            etcd,
            kubelet_client_ca,
            front_proxy_ca,
            dir,
            net,
        };
        for node in &cluster.nodes {
            cluster.wait_node_ready(node);
        }
        cluster
    }

    fn wait_node_ready(&self, node: &Node) {
        let conf = node.containerd.dir.path().join("cni/10-k8srs.conflist");
        wait_for(
            &format!("node {} Ready with its pod CIDR", node.name),
            Duration::from_secs(90),
            Duration::from_millis(250),
            || {
                let out = self.api.kubectl(&[
                    "get",
                    "node",
                    &node.name,
                    "-o",
                    "jsonpath={.spec.podCIDR} {.status.conditions[?(@.type==\"Ready\")].status}",
                ]);
                let text = String::from_utf8_lossy(&out.stdout).to_string();
                let (cidr, ready) = text.split_once(' ')?;
                let written = std::fs::read_to_string(&conf).ok()?;
                (ready == "True" && !cidr.is_empty() && written.contains(cidr)).then_some(())
            },
        );
        if node.kube_proxy.is_some() {
            // Healthy once its first sync is done.
            let url = format!("http://{}:10256/healthz", node.ip);
            wait_for(
                &format!("kube-proxy on {} healthy", node.name),
                Duration::from_secs(60),
                Duration::from_millis(250),
                || {
                    let out = Command::new("curl")
                        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2", &url])
                        .output()
                        .ok()?;
                    (String::from_utf8_lossy(&out.stdout) == "200").then_some(())
                },
            );
        }
    }

    /// The node named `name`.
    pub fn node(&self, name: &str) -> &Node {
        self.nodes.iter().find(|n| n.name == name).unwrap_or_else(|| panic!("no node {name}"))
    }

    /// Waits until pod `ns/name` is Running and Ready, returning its IP.
    pub fn wait_pod_ready(&self, ns: &str, name: &str) -> String {
        wait_for(
            &format!("pod {ns}/{name} ready"),
            Duration::from_secs(90),
            Duration::from_millis(250),
            || {
                let out = self.api.kubectl(&[
                    "get",
                    "pod",
                    "-n",
                    ns,
                    name,
                    "-o",
                    "jsonpath={.status.podIP} {.status.conditions[?(@.type==\"Ready\")].status}",
                ]);
                let text = String::from_utf8_lossy(&out.stdout).to_string();
                let (ip, ready) = text.split_once(' ')?;
                (ready == "True" && !ip.is_empty()).then(|| ip.to_owned())
            },
        )
    }
}

fn start_node(net: &Network, i: usize, api: &KubeApiserver, client_ca: &Path, opts: &ClusterOptions) -> Node {
    let name = format!("node-{i}");
    let netns = net.ns(i).to_owned();
    let ip = net.ip(i);
    let dir = tempfile::Builder::new().prefix("node").tempdir().expect("tempdir");
    // Every real node has a default route; ClusterIP traffic needs one before kube-proxy's
    // DNAT picks the real destination.
    let route = Command::new("ip")
        .args(["-n", &netns, "route", "add", "default", "via", &net.hub_ip().to_string()])
        .output()
        .expect("ip route");
    assert!(route.status.success(), "default route in {netns}: {}", String::from_utf8_lossy(&route.stderr));
    let containerd = Containerd::start_in(Some(&netns));
    let kubelet = Kubelet::start_at(
        Some(api),
        &containerd,
        &name,
        Some(&netns),
        ip,
        KUBELET_PORT,
        Some(client_ca),
        &opts.kubelet_config,
    );
    let hostgw = Daemon::start(
        "hostgw",
        &crate::bin("hostgw"),
        &[
            format!("--kubeconfig={}", api.kubeconfig.display()),
            format!("--node-name={name}"),
            format!("--cluster-cidr={CLUSTER_CIDR}"),
            format!("--cni-conf-file={}", containerd.dir.path().join("cni/10-k8srs.conflist").display()),
            format!("--cni-bridge={}", containerd.bridge),
            format!("--cni-network-name=k8srs-{}", containerd.bridge),
            format!("--cni-ipam-data-dir={}", containerd.dir.path().join("cni-ipam").display()),
        ],
        Some(&netns),
        dir.path(),
    );
    let kube_proxy =
        opts.kube_proxy.as_ref().map(|mode| start_kube_proxy(api, &name, &netns, mode, dir.path()));
    Node { kube_proxy, hostgw, kubelet, containerd, name, netns, ip, dir }
}

/// kube-proxy for node `name`, in its namespace; metrics and healthz on their default
/// ports (each node namespace has its own).
pub fn start_kube_proxy(api: &KubeApiserver, name: &str, netns: &str, mode: &str, dir: &Path) -> Daemon {
    Daemon::start(
        "kube-proxy",
        &crate::bin("kube-proxy"),
        &[
            format!("--kubeconfig={}", api.kubeconfig.display()),
            format!("--proxy-mode={mode}"),
            format!("--hostname-override={name}"),
            format!("--cluster-cidr={CLUSTER_CIDR}"),
            "--metrics-bind-address=0.0.0.0:10249".into(),
            "-v=2".into(),
        ],
        Some(netns),
        dir,
    )
}

/// kube-dns on `hub_ip:53` and the `kube-system/kube-dns` Service in front of it: a
/// selector-less Service at [`CLUSTER_DNS_IP`] whose EndpointSlice (written here, as an
/// addon manager would for an endpoint outside the pod network) names the hub address.
fn start_cluster_dns(api: &KubeApiserver, hub_ip: Ipv4Addr) -> ClusterDns {
    let upstream = FakeUpstream::start(Vec::new());
    let kube_dns = KubeDns::start_at(api, Some(SocketAddr::from((hub_ip, 53))), upstream.addr, &[]);
    let objects = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: kube-system}}\n---\n\
         apiVersion: v1\nkind: Service\n\
         metadata: {{name: kube-dns, namespace: kube-system, labels: {{k8s-app: kube-dns}}}}\n\
         spec:\n  clusterIP: {CLUSTER_DNS_IP}\n  ports:\n\
         \x20 - {{name: dns, port: 53, protocol: UDP, targetPort: 53}}\n\
         \x20 - {{name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}}\n---\n\
         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata:\n  name: kube-dns-e2e\n  namespace: kube-system\n  labels:\n\
         \x20   kubernetes.io/service-name: kube-dns\n\
         \x20   endpointslice.kubernetes.io/managed-by: e2e\n\
         addressType: IPv4\nports:\n\
         - {{name: dns, port: 53, protocol: UDP}}\n\
         - {{name: dns-tcp, port: 53, protocol: TCP}}\n\
         endpoints:\n- addresses: [\"{hub_ip}\"]\n  conditions: {{ready: true}}\n"
    );
    // kube-system may be created by the API server at the same moment: retry.
    wait_for(
        "the kube-dns Service and EndpointSlice created",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || {
            let out = api.kubectl_stdin(&["apply", "-f", "-"], &objects);
            if !out.status.success() {
                eprintln!("applying the kube-dns Service: {}", String::from_utf8_lossy(&out.stderr));
            }
            out.status.success().then_some(())
        },
    );
    ClusterDns { kube_dns, upstream }
}

impl NodeCluster {
    /// The state of the Service path, for a failure message: pods, Services,
    /// EndpointSlices, and per node kube-proxy's log tail, its rules and the routes; the
    /// kube-dns log tail.
    pub fn service_diagnostics(&self) -> String {
        let mut s = String::new();
        for args in [
            &["get", "pods", "-A", "-o", "wide"][..],
            &["get", "services", "-A", "-o", "wide"],
            &["get", "endpointslices", "-A", "-o", "yaml"],
        ] {
            let out = self.api.kubectl(args);
            s.push_str(&format!(
                "--- kubectl {}\n{}{}\n",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        for n in &self.nodes {
            if let Some(kp) = &n.kube_proxy {
                // Its -v=2 debug lines (client requests) would bury the rest.
                let log = std::fs::read_to_string(&kp.log).unwrap_or_default();
                let lines: Vec<&str> =
                    log.lines().filter(|l| !l.starts_with('D') && !l.starts_with('T')).collect();
                let tail = lines[lines.len().saturating_sub(60)..].join("\n");
                s.push_str(&format!("--- {} kube-proxy log (info and above)\n{tail}\n", n.name));
            }
            for cmd in [&["ip", "route"][..], &["nft", "list", "ruleset"], &["iptables-save"]] {
                let out = n.exec(cmd);
                s.push_str(&format!(
                    "--- {} {}\n{}{}",
                    n.name,
                    cmd.join(" "),
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        if let Some(dns) = &self.dns {
            s.push_str(&format!("--- kube-dns log\n{}\n", dns.kube_dns.log_tail(60)));
        }
        s
    }
}
