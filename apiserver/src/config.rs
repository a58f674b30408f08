//! kube-apiserver's flags (upstream names and defaults) and the validated configuration.
//! Flags this server does not implement are not declared, so the parser refuses them.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::services::Cidr;

#[derive(Debug, Parser)]
#[command(name = "kube-apiserver", about = "The Kubernetes API server")]
pub struct Flags {
    /// List of etcd servers to connect with (scheme://ip:port), comma separated.
    #[arg(long, value_delimiter = ',')]
    pub etcd_servers: Vec<String>,
    /// The prefix to prepend to all resource paths in etcd.
    #[arg(long, default_value = "/registry")]
    pub etcd_prefix: String,
    /// SSL Certificate Authority file used to secure etcd communication.
    #[arg(long)]
    pub etcd_cafile: Option<PathBuf>,
    /// SSL certification file used to secure etcd communication.
    #[arg(long)]
    pub etcd_certfile: Option<PathBuf>,
    /// SSL key file used to secure etcd communication.
    #[arg(long)]
    pub etcd_keyfile: Option<PathBuf>,
    /// The port on which to serve HTTPS with authentication and authorization.
    #[arg(long, default_value_t = 6443)]
    pub secure_port: u16,
    /// The IP address on which to listen for the --secure-port port.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// The IP address on which to advertise the apiserver to members of the cluster.
    #[arg(long)]
    pub advertise_address: Option<IpAddr>,
    /// The directory where the TLS certs are located (generated there when not given).
    #[arg(long, default_value = "/var/run/kubernetes")]
    pub cert_dir: PathBuf,
    /// File containing the default x509 Certificate for HTTPS.
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// File containing the default x509 private key matching --tls-cert-file.
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,
    /// A CIDR notation IP range from which to assign service cluster IPs.
    #[arg(long, default_value = "10.0.0.0/24")]
    pub service_cluster_ip_range: String,
    /// A port range to reserve for services with NodePort visibility.
    #[arg(long, default_value = "30000-32767")]
    pub service_node_port_range: String,
    /// Comma-separated list of cipher suites for the server (IANA names); the defaults when omitted.
    #[arg(long, value_delimiter = ',')]
    pub tls_cipher_suites: Vec<String>,
    /// Minimum TLS version supported: VersionTLS12 or VersionTLS13.
    #[arg(long)]
    pub tls_min_version: Option<String>,
    #[command(flatten)]
    pub authentication: crate::authn::options::Options,
    #[command(flatten)]
    pub authorization: crate::authz::options::Options,
    #[command(flatten)]
    pub admission: crate::admission::options::Options,
    #[command(flatten)]
    pub audit: crate::audit::options::Options,
    #[command(flatten)]
    pub encryption: crate::encryption::options::Options,
    #[command(flatten)]
    pub kubelet: crate::kubelet_client::Options,
    #[command(flatten)]
    pub aggregator: crate::aggregator::proxy::Options,
    /// The maximum number of non-mutating requests in flight at a given time.
    #[arg(long, default_value_t = 400)]
    pub max_requests_inflight: usize,
    /// The maximum number of mutating requests in flight at a given time.
    #[arg(long, default_value_t = 200)]
    pub max_mutating_requests_inflight: usize,
    /// A duration, the default request timeout.
    #[arg(long, default_value = "1m0s")]
    pub request_timeout: String,
    /// Minimum number of seconds a handler must keep a request open before timing it out (watches).
    #[arg(long, default_value_t = 1800)]
    pub min_request_timeout: u64,
    /// Enable watch caching in the apiserver.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "true", action = clap::ArgAction::Set)]
    pub watch_cache: bool,
    /// Log verbosity.
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub verbosity: u8,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub etcd: crate::storage::etcd3::EtcdConfig,
    pub etcd_prefix: String,
    pub listen: SocketAddr,
    pub advertise: IpAddr,
    pub cert_dir: PathBuf,
    pub tls: Option<(PathBuf, PathBuf)>,
    pub service_cidr: Cidr,
    pub node_ports: (u16, u16),
    pub tls_cipher_suites: Vec<String>,
    pub tls_min_version: Option<String>,
    pub authentication: crate::authn::options::Options,
    pub authorization: crate::authz::options::Options,
    pub admission: crate::admission::options::Options,
    pub audit: crate::audit::options::Options,
    pub encryption: crate::encryption::options::Options,
    pub kubelet: crate::kubelet_client::Options,
    pub aggregator: crate::aggregator::proxy::Options,
    pub max_readonly: usize,
    pub max_mutating: usize,
    pub request_timeout: Duration,
    pub min_request_timeout: Duration,
    pub watch_cache: bool,
}

impl Flags {
    pub fn into_config(self) -> Result<Config, String> {
        if self.etcd_servers.is_empty() {
            return Err("--etcd-servers must be specified".into());
        }
        let service_cidr = Cidr::parse(&self.service_cluster_ip_range)
            .map_err(|e| format!("--service-cluster-ip-range: {e}"))?;
        let (lo, hi) = self
            .service_node_port_range
            .split_once('-')
            .and_then(|(a, b)| Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?)))
            .filter(|(a, b)| a <= b)
            .ok_or_else(|| {
                format!("--service-node-port-range {}: want <low>-<high>", self.service_node_port_range)
            })?;
        let tls = match (self.tls_cert_file, self.tls_private_key_file) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => return Err("--tls-cert-file and --tls-private-key-file go together".into()),
        };
        self.kubelet.validate()?;
        self.aggregator.validate()?;
        let request_timeout = parse_duration(&self.request_timeout)
            .ok_or_else(|| format!("--request-timeout {}: not a duration", self.request_timeout))?;
        let advertise = self.advertise_address.unwrap_or(if self.bind_address.is_unspecified() {
            IpAddr::from([127, 0, 0, 1])
        } else {
            self.bind_address
        });
        Ok(Config {
            etcd: crate::storage::etcd3::EtcdConfig {
                servers: self.etcd_servers,
                ca_file: self.etcd_cafile,
                cert_file: self.etcd_certfile,
                key_file: self.etcd_keyfile,
            },
            etcd_prefix: self.etcd_prefix,
            listen: SocketAddr::new(self.bind_address, self.secure_port),
            advertise,
            cert_dir: self.cert_dir,
            tls,
            service_cidr,
            node_ports: (lo, hi),
            tls_cipher_suites: self.tls_cipher_suites,
            tls_min_version: self.tls_min_version,
            authentication: self.authentication,
            authorization: self.authorization,
            admission: self.admission,
            audit: self.audit,
            encryption: self.encryption,
            kubelet: self.kubelet,
            aggregator: self.aggregator,
            max_readonly: self.max_requests_inflight.max(1),
            max_mutating: self.max_mutating_requests_inflight.max(1),
            request_timeout,
            min_request_timeout: Duration::from_secs(self.min_request_timeout.max(1)),
            watch_cache: self.watch_cache,
        })
    }
}

/// Go durations like `1m0s`, `30s`, `1h`.
fn parse_duration(s: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut num = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            continue;
        }
        let mut unit = c.to_string();
        if c == 'm' && chars.peek() == Some(&'s') {
            unit.push(chars.next()?);
        }
        let v: f64 = num.parse().ok()?;
        num.clear();
        total += v * match unit.as_str() {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            _ => return None,
        };
    }
    if !num.is_empty() {
        total += num.parse::<f64>().ok()?;
    }
    Some(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags() {
        let f = Flags::try_parse_from([
            "kube-apiserver",
            "--etcd-servers=http://127.0.0.1:2379",
            "--secure-port=7443",
        ])
        .unwrap();
        let c = f.into_config().unwrap();
        assert_eq!(c.listen.port(), 7443);
        assert_eq!(c.request_timeout, Duration::from_secs(60));
        assert_eq!(c.node_ports, (30000, 32767));
        assert!(Flags::try_parse_from(["kube-apiserver", "--no-such-flag=X"]).is_err());
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
    }
}
