//! `kube-proxy`'s command line (upstream's flag names) and the [`ProxyConfig`] it resolves
//! to: the `--config` file's `KubeProxyConfiguration` (or its defaults), then every flag
//! given on the command line on top, as upstream merges them; then validation, with
//! errors naming the field as upstream's do.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use component_base::duration::parse as parse_duration;

use crate::apis::KubeProxyConfiguration;
use crate::cidr::Cidr;
use crate::conntrack::ConntrackSettings;
use crate::nodeport_addresses::PRIMARY;

#[derive(Debug, Parser, Default)]
#[command(
    name = "kube-proxy",
    about = "The Kubernetes network proxy: programs this node's nftables or iptables so that Service IPs and NodePorts reach their endpoints."
)]
pub struct Flags {
    /// The path to the configuration file (a KubeProxyConfiguration).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Path to kubeconfig file with authorization information (the master location can be
    /// overridden by the master flag).
    #[arg(long)]
    pub kubeconfig: Option<String>,
    /// The address of the Kubernetes API server (overrides any value in kubeconfig).
    #[arg(long)]
    pub master: Option<String>,
    /// Which proxy mode to use: 'nftables' (default here) or 'iptables'.
    #[arg(long)]
    pub proxy_mode: Option<String>,
    /// If non-empty, will be used as the name of the Node that kube-proxy is running on.
    #[arg(long)]
    pub hostname_override: Option<String>,
    /// The CIDR range of the pods in the cluster (a comma-separated dual-stack pair at most),
    /// used to tell pod traffic from other traffic.
    #[arg(long)]
    pub cluster_cidr: Option<String>,
    /// CIDR ranges (or 'primary') of the node addresses NodePorts accept traffic on.
    #[arg(long, value_delimiter = ',')]
    pub nodeport_addresses: Option<Vec<String>>,
    /// The IP address and port for the metrics server (default 127.0.0.1:10249); empty disables it.
    #[arg(long)]
    pub metrics_bind_address: Option<String>,
    /// The IP address and port for the health check server (default 0.0.0.0:10256); empty disables it.
    #[arg(long)]
    pub healthz_bind_address: Option<String>,
    /// Overrides kube-proxy's idea of what its node's primary IP is.
    #[arg(long)]
    pub bind_address: Option<String>,
    /// If true, failing to bind a port is fatal.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub bind_address_hard_fail: Option<bool>,
    /// If true, clean up every rule kube-proxy ever wrote (both modes) and exit.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub cleanup: bool,
    /// SNAT all traffic sent via Service cluster IPs.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub masquerade_all: Option<bool>,
    /// The bit of the fwmark space to mark packets requiring SNAT with; in [0, 31].
    #[arg(long)]
    pub iptables_masquerade_bit: Option<i32>,
    /// How often rules are fully re-synchronized (applies to nftables mode too, as upstream).
    #[arg(long)]
    pub iptables_sync_period: Option<String>,
    /// The minimum period between rule syncs; 0 syncs on every change.
    #[arg(long)]
    pub iptables_min_sync_period: Option<String>,
    /// Allow NodePorts on 127.0.0.1 in iptables mode (sets route_localnet).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub iptables_localhost_nodeports: Option<bool>,
    #[arg(long)]
    pub conntrack_max_per_core: Option<i32>,
    #[arg(long)]
    pub conntrack_min: Option<i32>,
    #[arg(long)]
    pub conntrack_tcp_timeout_established: Option<String>,
    #[arg(long)]
    pub conntrack_tcp_timeout_close_wait: Option<String>,
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub conntrack_tcp_be_liberal: Option<bool>,
    #[arg(long)]
    pub conntrack_udp_timeout: Option<String>,
    #[arg(long)]
    pub conntrack_udp_timeout_stream: Option<String>,
    /// ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix.
    #[arg(long)]
    pub detect_local_mode: Option<String>,
    #[arg(long)]
    pub pod_bridge_interface: Option<String>,
    #[arg(long)]
    pub pod_interface_name_prefix: Option<String>,
    /// The oom_score_adj of the kube-proxy process, in [-1000, 1000].
    #[arg(long)]
    pub oom_score_adj: Option<i32>,
    #[arg(long)]
    pub kube_api_qps: Option<f32>,
    #[arg(long)]
    pub kube_api_burst: Option<i32>,
    #[arg(long)]
    pub kube_api_content_type: Option<String>,
    /// How often configuration from the apiserver is refreshed.
    #[arg(long)]
    pub config_sync_period: Option<String>,
    /// Profiling handlers (not available in this implementation; false only).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub profiling: Option<bool>,
    #[arg(long)]
    pub show_hidden_metrics_for_version: Option<String>,
    /// Log verbosity.
    #[arg(short = 'v', long = "v")]
    pub verbosity: Option<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    Nftables,
    Iptables,
}

impl ProxyMode {
    pub fn name(self) -> &'static str {
        match self {
            ProxyMode::Nftables => "nftables",
            ProxyMode::Iptables => "iptables",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DetectLocalMode {
    ClusterCidr,
    NodeCidr,
    BridgeInterface(String),
    InterfaceNamePrefix(String),
}

/// Everything kube-proxy runs with, validated.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub mode: ProxyMode,
    pub kubeconfig: Option<PathBuf>,
    pub master: Option<String>,
    /// This node's name (`--hostname-override`, else the host name in lower case).
    pub hostname: String,
    pub bind_address: IpAddr,
    pub bind_address_hard_fail: bool,
    pub healthz_bind_address: Option<SocketAddr>,
    pub metrics_bind_address: Option<SocketAddr>,
    pub cluster_cidrs: Vec<Cidr>,
    pub node_port_addresses: Vec<String>,
    pub sync_period: Duration,
    pub min_sync_period: Duration,
    pub masquerade_all: bool,
    pub masquerade_bit: u32,
    pub localhost_nodeports: bool,
    pub detect_local: DetectLocalMode,
    pub conntrack: ConntrackSettings,
    pub oom_score_adj: i32,
    pub qps: f32,
    pub burst: u32,
    pub cleanup: bool,
    pub verbosity: u8,
    /// The merged configuration, as `/configz` shows it.
    pub raw: KubeProxyConfiguration,
}

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    File(#[from] crate::apis::Error),
    #[error("invalid configuration: {}", .0.join("; "))]
    Invalid(Vec<String>),
}

fn invalid(field: &str, value: impl std::fmt::Debug, why: &str) -> String {
    format!("KubeProxyConfiguration.{field}: Invalid value: {value:?}: {why}")
}

/// A bind address: `IP:port`, an IP (the default port is added), or empty (disabled).
fn parse_bind_address(
    field: &str,
    value: &str,
    default_port: u16,
    errs: &mut Vec<String>,
) -> Option<SocketAddr> {
    let v = value.trim();
    if v.is_empty() {
        return None;
    }
    if let Ok(sa) = v.parse::<SocketAddr>() {
        return Some(sa);
    }
    if let Ok(ip) = v.trim_matches(|c| c == '[' || c == ']').parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, default_port));
    }
    errs.push(invalid(field, v, "must be IP:port"));
    None
}

fn duration(field: &str, value: &str, errs: &mut Vec<String>) -> Duration {
    match parse_duration(value) {
        Ok(d) => d,
        Err(e) => {
            errs.push(invalid(field, value, &e));
            Duration::ZERO
        }
    }
}

/// The host name kube-proxy assumes its Node has (upstream: lower-cased `os.Hostname`).
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for its length; gethostname NUL-terminates within it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).trim().to_lowercase()
}

impl Flags {
    /// The configuration file (or defaults) with the given flags on top.
    pub fn merged(&self) -> Result<KubeProxyConfiguration, Error> {
        let mut c = match &self.config {
            Some(path) => KubeProxyConfiguration::load(path)?,
            None => {
                let mut c = KubeProxyConfiguration::default();
                c.set_defaults();
                c
            }
        };
        if let Some(v) = &self.kubeconfig {
            c.client_connection.kubeconfig = v.clone();
        }
        if let Some(v) = &self.proxy_mode {
            c.mode = v.clone();
        }
        if let Some(v) = &self.hostname_override {
            c.hostname_override = v.clone();
        }
        if let Some(v) = &self.cluster_cidr {
            c.cluster_cidr = v.clone();
        }
        if let Some(v) = &self.nodeport_addresses {
            c.node_port_addresses =
                v.iter().filter(|s| !s.trim().is_empty()).map(|s| s.trim().to_owned()).collect();
        }
        if let Some(v) = &self.metrics_bind_address {
            c.metrics_bind_address = v.clone();
        }
        if let Some(v) = &self.healthz_bind_address {
            c.healthz_bind_address = v.clone();
        }
        if let Some(v) = &self.bind_address {
            c.bind_address = v.clone();
        }
        if let Some(v) = self.bind_address_hard_fail {
            c.bind_address_hard_fail = v;
        }
        if let Some(v) = self.masquerade_all {
            c.iptables.masquerade_all = v;
            c.nftables.masquerade_all = v;
        }
        if let Some(v) = self.iptables_masquerade_bit {
            c.iptables.masquerade_bit = Some(v);
            c.nftables.masquerade_bit = Some(v);
        }
        if let Some(v) = &self.iptables_sync_period {
            c.iptables.sync_period = v.clone();
            c.nftables.sync_period = v.clone();
        }
        if let Some(v) = &self.iptables_min_sync_period {
            c.iptables.min_sync_period = v.clone();
            c.nftables.min_sync_period = v.clone();
        }
        if let Some(v) = self.iptables_localhost_nodeports {
            c.iptables.localhost_node_ports = Some(v);
        }
        if let Some(v) = self.conntrack_max_per_core {
            c.conntrack.max_per_core = Some(v);
        }
        if let Some(v) = self.conntrack_min {
            c.conntrack.min = Some(v);
        }
        if let Some(v) = &self.conntrack_tcp_timeout_established {
            c.conntrack.tcp_established_timeout = Some(v.clone());
        }
        if let Some(v) = &self.conntrack_tcp_timeout_close_wait {
            c.conntrack.tcp_close_wait_timeout = Some(v.clone());
        }
        if let Some(v) = self.conntrack_tcp_be_liberal {
            c.conntrack.tcp_be_liberal = v;
        }
        if let Some(v) = &self.conntrack_udp_timeout {
            c.conntrack.udp_timeout = v.clone();
        }
        if let Some(v) = &self.conntrack_udp_timeout_stream {
            c.conntrack.udp_stream_timeout = v.clone();
        }
        if let Some(v) = &self.detect_local_mode {
            c.detect_local_mode = v.clone();
        }
        if let Some(v) = &self.pod_bridge_interface {
            c.detect_local.bridge_interface = v.clone();
        }
        if let Some(v) = &self.pod_interface_name_prefix {
            c.detect_local.interface_name_prefix = v.clone();
        }
        if let Some(v) = self.oom_score_adj {
            c.oom_score_adj = Some(v);
        }
        if let Some(v) = self.kube_api_qps {
            c.client_connection.qps = v;
        }
        if let Some(v) = self.kube_api_burst {
            c.client_connection.burst = v;
        }
        if let Some(v) = &self.kube_api_content_type {
            c.client_connection.content_type = v.clone();
        }
        if let Some(v) = &self.config_sync_period {
            c.config_sync_period = v.clone();
        }
        if let Some(v) = self.profiling {
            c.enable_profiling = v;
        }
        if let Some(v) = &self.show_hidden_metrics_for_version {
            c.show_hidden_metrics_for_version = v.clone();
        }
        if let Some(v) = self.verbosity {
            c.logging.verbosity = v;
        }
        Ok(c)
    }

    /// Merges and validates.
    pub fn into_config(self) -> Result<ProxyConfig, Error> {
        let c = self.merged()?;
        resolve(c, self.master.clone(), self.cleanup)
    }
}

/// Validates a merged configuration into what kube-proxy runs with.
pub fn resolve(
    c: KubeProxyConfiguration,
    master: Option<String>,
    cleanup: bool,
) -> Result<ProxyConfig, Error> {
    let mut errs = Vec::new();
    let mode = match c.mode.as_str() {
        "" | "nftables" => ProxyMode::Nftables,
        "iptables" => ProxyMode::Iptables,
        "ipvs" => {
            errs.push(invalid(
                "Mode",
                &c.mode,
                "the ipvs proxy mode is not supported by this kube-proxy; use nftables or iptables",
            ));
            ProxyMode::Nftables
        }
        other => {
            errs.push(invalid("Mode", other, "must be nftables or iptables"));
            ProxyMode::Nftables
        }
    };
    let (sync, min_sync, masq_all, masq_bit) = match mode {
        ProxyMode::Nftables => (
            ("NFTables.SyncPeriod", c.nftables.sync_period.as_str()),
            ("NFTables.MinSyncPeriod", c.nftables.min_sync_period.as_str()),
            c.nftables.masquerade_all,
            ("NFTables.MasqueradeBit", c.nftables.masquerade_bit.unwrap_or(14)),
        ),
        ProxyMode::Iptables => (
            ("IPTables.SyncPeriod", c.iptables.sync_period.as_str()),
            ("IPTables.MinSyncPeriod", c.iptables.min_sync_period.as_str()),
            c.iptables.masquerade_all,
            ("IPTables.MasqueradeBit", c.iptables.masquerade_bit.unwrap_or(14)),
        ),
    };
    let sync_period = duration(sync.0, sync.1, &mut errs);
    if sync_period.is_zero() {
        errs.push(invalid(sync.0, sync.1, "must be greater than 0"));
    }
    let min_sync_period = duration(min_sync.0, min_sync.1, &mut errs);
    if !(0..=31).contains(&masq_bit.1) {
        errs.push(invalid(masq_bit.0, masq_bit.1, "must be within the range [0, 31]"));
    }
    let bind_address: IpAddr = c.bind_address.parse().unwrap_or_else(|_| {
        errs.push(invalid(
            "BindAddress",
            &c.bind_address,
            "not a valid textual representation of an IP address",
        ));
        IpAddr::from([0, 0, 0, 0])
    });
    let healthz_bind_address =
        parse_bind_address("HealthzBindAddress", &c.healthz_bind_address, 10256, &mut errs);
    let metrics_bind_address =
        parse_bind_address("MetricsBindAddress", &c.metrics_bind_address, 10249, &mut errs);
    let mut cluster_cidrs = Vec::new();
    for part in c.cluster_cidr.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match part.parse::<Cidr>() {
            Ok(cidr) => cluster_cidrs.push(cidr),
            Err(e) => errs.push(invalid("ClusterCIDR", &c.cluster_cidr, &e)),
        }
    }
    if cluster_cidrs.len() > 2
        || (cluster_cidrs.len() == 2 && cluster_cidrs[0].is_ipv4() == cluster_cidrs[1].is_ipv4())
    {
        errs.push(invalid(
            "ClusterCIDR",
            &c.cluster_cidr,
            "only one CIDR allowed or a valid DualStack CIDR (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)",
        ));
    }
    let mut node_port_addresses = c.node_port_addresses.clone();
    for a in &node_port_addresses {
        if a != PRIMARY && a.parse::<Cidr>().is_err() {
            errs.push(invalid("NodePortAddresses", a, "must be a valid CIDR or \"primary\""));
        }
    }
    // Unset means every address in iptables mode and the Node's own IPs in nftables mode.
    if node_port_addresses.is_empty() && mode == ProxyMode::Nftables {
        node_port_addresses.push(PRIMARY.to_owned());
    }
    let detect_local = match c.detect_local_mode.as_str() {
        "" | "ClusterCIDR" => DetectLocalMode::ClusterCidr,
        "NodeCIDR" => DetectLocalMode::NodeCidr,
        "BridgeInterface" => {
            if c.detect_local.bridge_interface.is_empty() {
                errs.push(invalid(
                    "DetectLocal.BridgeInterface",
                    "",
                    "must be set with detectLocalMode BridgeInterface",
                ));
            }
            DetectLocalMode::BridgeInterface(c.detect_local.bridge_interface.clone())
        }
        "InterfaceNamePrefix" => {
            if c.detect_local.interface_name_prefix.is_empty() {
                errs.push(invalid(
                    "DetectLocal.InterfaceNamePrefix",
                    "",
                    "must be set with detectLocalMode InterfaceNamePrefix",
                ));
            }
            DetectLocalMode::InterfaceNamePrefix(c.detect_local.interface_name_prefix.clone())
        }
        other => {
            errs.push(invalid(
                "DetectLocalMode",
                other,
                "must be one of ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix",
            ));
            DetectLocalMode::ClusterCidr
        }
    };
    let ct = &c.conntrack;
    let opt_duration = |field: &str, v: &Option<String>, errs: &mut Vec<String>| {
        v.as_deref().filter(|s| !s.is_empty()).map(|s| duration(field, s, errs))
    };
    let conntrack = ConntrackSettings {
        max_per_core: ct.max_per_core.unwrap_or(0),
        min: ct.min.unwrap_or(0),
        tcp_established_timeout: opt_duration(
            "Conntrack.TCPEstablishedTimeout",
            &ct.tcp_established_timeout,
            &mut errs,
        ),
        tcp_close_wait_timeout: opt_duration(
            "Conntrack.TCPCloseWaitTimeout",
            &ct.tcp_close_wait_timeout,
            &mut errs,
        ),
        tcp_be_liberal: ct.tcp_be_liberal,
        udp_timeout: opt_duration("Conntrack.UDPTimeout", &Some(ct.udp_timeout.clone()), &mut errs),
        udp_stream_timeout: opt_duration(
            "Conntrack.UDPStreamTimeout",
            &Some(ct.udp_stream_timeout.clone()),
            &mut errs,
        ),
    };
    if conntrack.max_per_core < 0 {
        errs.push(invalid(
            "Conntrack.MaxPerCore",
            conntrack.max_per_core,
            "must be greater than or equal to 0",
        ));
    }
    if conntrack.min < 0 {
        errs.push(invalid("Conntrack.Min", conntrack.min, "must be greater than or equal to 0"));
    }
    let oom = c.oom_score_adj.unwrap_or(-999);
    if !(-1000..=1000).contains(&oom) {
        errs.push(invalid("OOMScoreAdj", oom, "must be within the range [-1000, 1000]"));
    }
    if c.client_connection.burst < 0 || c.client_connection.qps < 0.0 {
        errs.push(invalid(
            "ClientConnection",
            (c.client_connection.qps, c.client_connection.burst),
            "QPS and Burst must not be negative",
        ));
    }
    if !c.client_connection.content_type.is_empty()
        && !["application/json", "application/vnd.kubernetes.protobuf"]
            .contains(&c.client_connection.content_type.as_str())
    {
        errs.push(invalid(
            "ClientConnection.ContentType",
            &c.client_connection.content_type,
            "must be application/json or application/vnd.kubernetes.protobuf",
        ));
    }
    if c.enable_profiling {
        errs.push(invalid(
            "EnableProfiling",
            true,
            "profiling handlers are not available in this kube-proxy",
        ));
    }
    if !c.show_hidden_metrics_for_version.is_empty() {
        errs.push(invalid(
            "ShowHiddenMetricsForVersion",
            &c.show_hidden_metrics_for_version,
            "this kube-proxy has no hidden metrics to show",
        ));
    }
    if let Some((gate, _)) = c.feature_gates.iter().next() {
        errs.push(invalid("FeatureGates", gate, "unrecognized feature gate"));
    }
    if c.logging.format != "text" {
        errs.push(invalid("Logging.Format", &c.logging.format, "only the text format is supported"));
    }
    duration("ConfigSyncPeriod", &c.config_sync_period, &mut errs);
    if !errs.is_empty() {
        return Err(Error::Invalid(errs));
    }
    let hostname = if c.hostname_override.trim().is_empty() {
        host_name()
    } else {
        c.hostname_override.trim().to_lowercase()
    };
    let kubeconfig =
        Some(c.client_connection.kubeconfig.clone()).filter(|s| !s.is_empty()).map(PathBuf::from);
    Ok(ProxyConfig {
        mode,
        kubeconfig,
        master,
        hostname,
        bind_address,
        bind_address_hard_fail: c.bind_address_hard_fail,
        healthz_bind_address,
        metrics_bind_address,
        cluster_cidrs,
        node_port_addresses,
        sync_period,
        min_sync_period,
        masquerade_all: masq_all,
        masquerade_bit: masq_bit.1 as u32,
        localhost_nodeports: c.iptables.localhost_node_ports.unwrap_or(true),
        detect_local,
        conntrack,
        oom_score_adj: oom,
        qps: c.client_connection.qps,
        burst: c.client_connection.burst.max(1) as u32,
        cleanup,
        verbosity: c.logging.verbosity,
        raw: c,
    })
}

/// A duration as Go prints it (`30s`, `1m0s`, `1h0m0s`, `500ms`), for `/configz`.
pub fn go_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    if d < Duration::from_secs(1) {
        let ms = d.as_secs_f64() * 1000.0;
        return format!("{}ms", trim_float(ms));
    }
    let total = d.as_secs_f64();
    let h = (total / 3600.0).floor();
    let m = ((total - h * 3600.0) / 60.0).floor();
    let s = total - h * 3600.0 - m * 60.0;
    if h > 0.0 {
        format!("{h}h{m}m{}s", trim_float(s))
    } else if m > 0.0 {
        format!("{m}m{}s", trim_float(s))
    } else {
        format!("{}s", trim_float(s))
    }
}

fn trim_float(v: f64) -> String {
    let s = format!("{v:.9}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> Flags {
        let mut all = vec!["kube-proxy"];
        all.extend_from_slice(args);
        Flags::parse_from(all)
    }

    #[test]
    fn flags_override_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(
            &path,
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: iptables\nclusterCIDR: 10.0.0.0/8\nmetricsBindAddress: 127.0.0.1:9999\niptables:\n  syncPeriod: 10s\n",
        )
        .unwrap();
        let cfg = flags(&[
            "--config",
            path.to_str().unwrap(),
            "--proxy-mode=nftables",
            "--iptables-min-sync-period=0s",
            "--hostname-override=Node1",
            "-v=4",
        ])
        .into_config()
        .unwrap();
        assert_eq!(cfg.mode, ProxyMode::Nftables);
        assert_eq!(cfg.cluster_cidrs, vec!["10.0.0.0/8".parse().unwrap()]);
        assert_eq!(cfg.metrics_bind_address, Some("127.0.0.1:9999".parse().unwrap()));
        // The file's iptables.syncPeriod does not apply in nftables mode.
        assert_eq!(cfg.sync_period, Duration::from_secs(30));
        assert_eq!(cfg.min_sync_period, Duration::ZERO);
        assert_eq!(cfg.hostname, "node1");
        assert_eq!(cfg.verbosity, 4);
        assert_eq!(cfg.node_port_addresses, vec!["primary"]);
        assert_eq!(cfg.healthz_bind_address, Some("0.0.0.0:10256".parse().unwrap()));
    }

    #[test]
    fn bad_values_are_named() {
        let err = flags(&[
            "--proxy-mode=ipvs",
            "--cluster-cidr=10.0.0.0/8,10.1.0.0/16",
            "--iptables-masquerade-bit=40",
            "--nodeport-addresses=bogus",
        ])
        .into_config()
        .unwrap_err()
        .to_string();
        for needle in [
            "KubeProxyConfiguration.Mode",
            "ClusterCIDR",
            "NFTables.MasqueradeBit",
            "NodePortAddresses: Invalid value: \"bogus\"",
        ] {
            assert!(err.contains(needle), "{needle} not in {err}");
        }
        let cfg = flags(&["--metrics-bind-address=", "--proxy-mode", "iptables"]).into_config().unwrap();
        assert_eq!(cfg.metrics_bind_address, None);
        assert!(cfg.node_port_addresses.is_empty());
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::from_secs(30)), "30s");
        assert_eq!(go_duration(Duration::from_secs(900)), "15m0s");
        assert_eq!(go_duration(Duration::from_secs(86400)), "24h0m0s");
        assert_eq!(go_duration(Duration::from_millis(500)), "500ms");
    }
}
