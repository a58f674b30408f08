//! The command line. Flag names are the legacy kube-dns binary's where it had one
//! (`--domain`, `--dns-bind-address`, `--dns-port`, `--kubecfg-file`, `--nameservers`),
//! with the names the rest of this project uses as aliases; ports default to CoreDNS's
//! (53, metrics 9153, health 8080, ready 8181), which the addon manifest's probes expect.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::Error;
use crate::forward;
use crate::records::PodMode;

#[derive(Debug, Parser)]
#[command(
    name = "kube-dns",
    about = "Cluster DNS: answers the Kubernetes DNS-based service discovery schema for the cluster domain and forwards other names to the node's resolvers."
)]
pub struct Flags {
    /// The cluster domain (the kubelet's clusterDomain) served from the API.
    #[arg(long, alias = "cluster-domain", default_value = "cluster.local")]
    pub domain: String,
    /// The address to serve DNS on (UDP and TCP).
    #[arg(long, default_value = "0.0.0.0")]
    pub dns_bind_address: IpAddr,
    /// The port to serve DNS on (UDP and TCP).
    #[arg(long, default_value_t = 53)]
    pub dns_port: u16,
    /// Kubeconfig naming the API server and credentials; in-cluster config without it.
    #[arg(long, alias = "kubecfg-file")]
    pub kubeconfig: Option<PathBuf>,
    /// The API server URL, overriding the kubeconfig's.
    #[arg(long, alias = "kube-master-url")]
    pub master: Option<String>,
    /// Resolvers to forward names outside the cluster domain to (IP or IP:port, comma
    /// separated), instead of the nameservers of --resolv-conf.
    #[arg(long, alias = "nameservers", value_delimiter = ',')]
    pub upstream: Vec<String>,
    /// The resolver configuration whose nameservers get names outside the cluster domain.
    #[arg(long, default_value = "/etc/resolv.conf")]
    pub resolv_conf: PathBuf,
    /// Where /metrics is served (CoreDNS's prometheus plugin); empty disables it.
    #[arg(long, default_value = "0.0.0.0:9153")]
    pub metrics_bind_address: String,
    /// Where /health is served (liveness; CoreDNS's health plugin); empty disables it.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub health_bind_address: String,
    /// Where /ready is served (200 once the watches have listed; CoreDNS's ready plugin);
    /// empty disables it.
    #[arg(long, default_value = "0.0.0.0:8181")]
    pub ready_bind_address: String,
    /// TTL of the records served from the cluster state, in seconds.
    #[arg(long, default_value_t = 30)]
    pub ttl: u32,
    /// Answers from upstream kept at most (0 disables the cache).
    #[arg(long, default_value_t = 9984)]
    pub cache_size: usize,
    /// The longest an upstream answer is cached, in seconds (CoreDNS's `cache 30`).
    #[arg(long, default_value_t = 30)]
    pub cache_ttl: u64,
    /// `insecure`: `<a-b-c-d>.<ns>.pod.<zone>` answers the address it spells; `disabled`:
    /// no pod records.
    #[arg(long, default_value = "insecure", value_parser = ["insecure", "disabled"])]
    pub pods: String,
    /// Log verbosity.
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub verbosity: u8,
}

/// Everything [`run`](crate::run) needs.
#[derive(Debug, Clone)]
pub struct Config {
    pub domain: String,
    pub dns_addr: SocketAddr,
    pub kubeconfig: Option<PathBuf>,
    pub master: Option<String>,
    pub upstreams: Vec<SocketAddr>,
    pub metrics_addr: Option<SocketAddr>,
    pub health_addr: Option<SocketAddr>,
    pub ready_addr: Option<SocketAddr>,
    pub ttl: u32,
    pub cache_size: usize,
    pub cache_ttl: Duration,
    pub pods: PodMode,
}

fn optional_addr(flag: &str, value: &str) -> Result<Option<SocketAddr>, Error> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    // ":9153" as CoreDNS writes it: every address.
    let full = if value.starts_with(':') { format!("0.0.0.0{value}") } else { value.to_owned() };
    full.parse()
        .map(Some)
        .map_err(|_| Error::Config(format!("--{flag} {value:?}: want HOST:PORT with an IP address")))
}

impl Flags {
    pub fn into_config(self) -> Result<Config, Error> {
        let domain = self.domain.trim().trim_end_matches('.').to_ascii_lowercase();
        if domain.is_empty() {
            return Err(Error::Config("--domain must not be empty".into()));
        }
        crate::records::Zone::new(&domain, self.ttl, PodMode::Disabled)
            .map_err(|e| Error::Config(format!("--domain {domain:?}: {e}")))?;
        let dns_addr = SocketAddr::new(self.dns_bind_address, self.dns_port);
        let upstreams = if self.upstream.iter().any(|u| !u.trim().is_empty()) {
            self.upstream
                .iter()
                .filter(|u| !u.trim().is_empty())
                .map(|u| forward::parse_upstream(u))
                .collect::<Result<Vec<_>, _>>()?
        } else {
            forward::resolv_conf_nameservers(&self.resolv_conf)?
        };
        if let Some(own) = upstreams.iter().find(|u| forward::is_self(&dns_addr, u)) {
            return Err(Error::Config(format!(
                "upstream {own} is this server ({dns_addr}): names outside {domain} would loop; give --upstream"
            )));
        }
        if self.cache_ttl == 0 && self.cache_size > 0 {
            return Err(Error::Config("--cache-ttl must be at least 1 (or --cache-size=0)".into()));
        }
        Ok(Config {
            domain,
            dns_addr,
            kubeconfig: self.kubeconfig,
            master: self.master,
            upstreams,
            metrics_addr: optional_addr("metrics-bind-address", &self.metrics_bind_address)?,
            health_addr: optional_addr("health-bind-address", &self.health_bind_address)?,
            ready_addr: optional_addr("ready-bind-address", &self.ready_bind_address)?,
            ttl: self.ttl,
            cache_size: self.cache_size,
            cache_ttl: Duration::from_secs(self.cache_ttl),
            pods: if self.pods == "disabled" { PodMode::Disabled } else { PodMode::Insecure },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, Error> {
        let mut all = vec!["kube-dns"];
        all.extend_from_slice(args);
        Flags::try_parse_from(all).map_err(|e| Error::Config(e.to_string()))?.into_config()
    }

    #[test]
    fn defaults_and_aliases() {
        let c = parse(&["--upstream=127.0.0.1:5300"]).unwrap();
        assert_eq!(c.domain, "cluster.local");
        assert_eq!(c.dns_addr, "0.0.0.0:53".parse().unwrap());
        assert_eq!(c.metrics_addr, Some("0.0.0.0:9153".parse().unwrap()));
        assert_eq!(c.health_addr, Some("0.0.0.0:8080".parse().unwrap()));
        assert_eq!(c.ready_addr, Some("0.0.0.0:8181".parse().unwrap()));
        assert_eq!((c.ttl, c.cache_size, c.cache_ttl), (30, 9984, Duration::from_secs(30)));
        let c = parse(&[
            "--cluster-domain=Example.Org.",
            "--nameservers=10.0.0.1,10.0.0.2:5353",
            "--metrics-bind-address=:9999",
            "--ready-bind-address=",
        ])
        .unwrap();
        assert_eq!(c.domain, "example.org");
        assert_eq!(c.upstreams, ["10.0.0.1:53".parse().unwrap(), "10.0.0.2:5353".parse().unwrap()]);
        assert_eq!(c.metrics_addr, Some("0.0.0.0:9999".parse().unwrap()));
        assert_eq!(c.ready_addr, None);
    }

    #[test]
    fn bad_values_are_errors() {
        for args in [
            &["--upstream=dns.example"][..],
            &["--upstream=127.0.0.1", "--dns-port=53"],
            &["--upstream=127.0.0.1:5300", "--metrics-bind-address=localhost:1"],
            &["--upstream=127.0.0.1:5300", "--domain=."],
            &["--upstream=127.0.0.1:5300", "--pods=verified"],
            &["--resolv-conf=/nonexistent"],
        ] {
            assert!(parse(args).is_err(), "{args:?}");
        }
    }
}
