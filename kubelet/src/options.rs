//! The kubelet's command line, with upstream's flag names. Flags override the `--config`
//! file, as upstream's (deprecated but honoured) flags do.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use clap::Parser;

use crate::config::{Error, KubeletConfiguration};

#[derive(Debug, Parser)]
#[command(
    name = "kubelet",
    about = "The node agent: runs the pods bound to this node through the container runtime."
)]
pub struct Flags {
    /// Path to a kubeconfig file naming the API server and the kubelet's credentials.
    /// Without it the kubelet runs standalone: only static pods.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubelet's KubeletConfiguration file (kubelet.config.k8s.io/v1beta1).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The CRI endpoint (unix:///path/to/containerd.sock); overrides containerRuntimeEndpoint.
    #[arg(long)]
    pub container_runtime_endpoint: Option<String>,
    /// Use this name for the Node instead of the hostname.
    #[arg(long)]
    pub hostname_override: Option<String>,
    /// The IP address reported as the Node's InternalIP.
    #[arg(long)]
    pub node_ip: Option<IpAddr>,
    /// Labels to add when registering the Node (key=value,...).
    #[arg(long, value_delimiter = ',')]
    pub node_labels: Vec<String>,
    /// Register the Node with the API server.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub register_node: Option<bool>,
    /// Directory for the kubelet's files (volume mounts, pod directories, certificates).
    #[arg(long, default_value = "/var/lib/kubelet")]
    pub root_dir: PathBuf,
    /// Directory for the kubelet's self-signed serving certificate when tlsCertFile is not set
    /// (default <root-dir>/pki).
    #[arg(long)]
    pub cert_dir: Option<PathBuf>,
    /// DNS server IPs for pods (comma-separated); overrides clusterDNS. Pods with
    /// dnsPolicy ClusterFirst use them as their only nameservers.
    #[arg(long, value_delimiter = ',')]
    pub cluster_dns: Vec<String>,
    /// The cluster's DNS domain; overrides clusterDomain. Pods' search path starts with
    /// `<ns>.svc.<domain> svc.<domain> <domain>`.
    #[arg(long)]
    pub cluster_domain: Option<String>,
    /// The resolver configuration pods of dnsPolicy Default get (and ClusterFirst pods'
    /// search domains come from); "" for none. Overrides resolvConf.
    #[arg(long)]
    pub resolv_conf: Option<PathBuf>,
    /// Log verbosity.
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub verbosity: u8,
}

/// Everything `run` needs.
#[derive(Debug, Clone)]
pub struct Options {
    pub config: KubeletConfiguration,
    pub kubeconfig: Option<PathBuf>,
    pub node_name: String,
    pub node_ip: Option<IpAddr>,
    pub node_labels: BTreeMap<String, String>,
    pub root_dir: PathBuf,
    pub cert_dir: PathBuf,
}

impl Flags {
    pub fn into_options(self) -> Result<Options, Error> {
        let mut config = match &self.config {
            Some(path) => KubeletConfiguration::from_file(path)?,
            None => KubeletConfiguration::default(),
        };
        if let Some(e) = self.container_runtime_endpoint {
            config.container_runtime_endpoint = e;
        }
        if let Some(r) = self.register_node {
            config.register_node = r;
        }
        let cluster_dns: Vec<String> = self.cluster_dns.into_iter().filter(|s| !s.is_empty()).collect();
        if !cluster_dns.is_empty() {
            for ip in &cluster_dns {
                ip.parse::<IpAddr>()
                    .map_err(|_| Error::Invalid(format!("--cluster-dns: {ip:?} is not an IP address")))?;
            }
            config.cluster_dns = cluster_dns;
        }
        if let Some(d) = self.cluster_domain {
            config.cluster_domain = d;
        }
        if let Some(r) = self.resolv_conf {
            config.resolv_conf = r;
        }
        config.runtime_socket()?;
        let node_name = match self.hostname_override {
            Some(h) => h,
            None => hostname()?,
        }
        .trim()
        .to_lowercase();
        if node_name.is_empty() {
            return Err(Error::Invalid("the node name is empty".into()));
        }
        let mut node_labels = BTreeMap::new();
        for l in self.node_labels.iter().filter(|l| !l.is_empty()) {
            let (k, v) = l
                .split_once('=')
                .ok_or_else(|| Error::Invalid(format!("--node-labels: {l:?} is not key=value")))?;
            node_labels.insert(k.to_string(), v.to_string());
        }
        let cert_dir = self.cert_dir.unwrap_or_else(|| self.root_dir.join("pki"));
        Ok(Options {
            config,
            kubeconfig: self.kubeconfig,
            node_name,
            node_ip: self.node_ip,
            node_labels,
            root_dir: self.root_dir,
            cert_dir,
        })
    }
}

fn hostname() -> Result<String, Error> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_err(|e| Error::Invalid(format!("reading the hostname: {e}")))
}
