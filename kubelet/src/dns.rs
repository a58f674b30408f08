//! A pod's DNS, as upstream's `pkg/kubelet/network/dns`: the resolver configuration the
//! runtime writes into the sandbox's /etc/resolv.conf by `dnsPolicy` (ClusterFirst: the
//! cluster DNS Service with the cluster search path and `ndots:5`; Default: the node's
//! `--resolv-conf`; None: only `dnsConfig`), `dnsConfig` merged on top, and glibc's limits
//! enforced with the same events; and the pod's hostname and domain.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, PodDNSConfig};

use crate::cri;

/// glibc's limits, as upstream validates them.
pub const MAX_NAMESERVERS: usize = 3;
pub const MAX_SEARCH_PATHS: usize = 32;
pub const MAX_SEARCH_LIST_CHARS: usize = 2048;
/// A search domain longer than a DNS subdomain makes some resolvers abort.
const MAX_SEARCH_DOMAIN_CHARS: usize = 253;
/// A resolv.conf larger than this is refused (upstream's `maxResolvConfLength`).
const MAX_RESOLV_CONF_BYTES: u64 = 10 << 20;
/// What ClusterFirst pods get as options, replacing the node's.
const DEFAULT_OPTIONS: &[&str] = &["ndots:5"];

/// The node's side of pod DNS: the kubelet's `clusterDNS`, `clusterDomain` and `resolvConf`.
#[derive(Debug, Clone, Default)]
pub struct Configurer {
    pub cluster_dns: Vec<IpAddr>,
    pub cluster_domain: String,
    /// The node's resolver configuration; None (`resolvConf: ""`) means none: pods of the
    /// Default policy then ask a resolver on their own loopback, as upstream.
    pub resolv_conf: Option<PathBuf>,
    pub node_ips: Vec<IpAddr>,
}

/// Which object an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    Pod,
    Node,
}

/// A warning event to record, as upstream records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub subject: Subject,
    pub reason: &'static str,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PodDnsType {
    Cluster,
    Host,
    None,
}

fn pod_dns_type(pod: &Pod) -> PodDnsType {
    let spec = pod.spec.as_ref();
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    match spec.and_then(|s| s.dns_policy.as_deref()) {
        Some("None") => PodDnsType::None,
        Some("ClusterFirstWithHostNet") => PodDnsType::Cluster,
        Some("ClusterFirst") | None if !host_network => PodDnsType::Cluster,
        Some("ClusterFirst") | None | Some("Default") => PodDnsType::Host,
        Some(other) => {
            // The API server rejects other values; a static pod file may still hold one.
            tracing::error!(policy = other, "invalid dnsPolicy; falling back to ClusterFirst");
            PodDnsType::Cluster
        }
    }
}

/// The resolver configuration of a resolv.conf: nameservers accumulate, the last `search`
/// wins (with `.` dropped and trailing dots trimmed), options accumulate with a later one
/// replacing an earlier one of the same name. `domain` lines are ignored, as upstream.
pub fn parse_resolv_conf(text: &str) -> Result<cri::DnsConfig, String> {
    let mut dns = cri::DnsConfig::default();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.first() {
            Some(&"nameserver") => match fields.get(1) {
                Some(ns) => dns.servers.push((*ns).to_owned()),
                None => return Err("nameserver list is empty".into()),
            },
            Some(&"search") => {
                dns.searches = fields[1..]
                    .iter()
                    .filter(|s| **s != ".")
                    .map(|s| s.trim_end_matches('.').to_owned())
                    .collect();
            }
            Some(&"options") => append_options(&mut dns.options, fields[1..].iter().map(|s| (*s).to_owned())),
            _ => {}
        }
    }
    Ok(dns)
}

/// Appends options, a later one replacing an earlier one of the same name in place.
fn append_options(options: &mut Vec<String>, new: impl IntoIterator<Item = String>) {
    for option in new {
        let name = option.split(':').next().unwrap_or("").to_owned();
        match options.iter_mut().find(|o| o.split(':').next() == Some(name.as_str())) {
            Some(existing) => *existing = option,
            None => options.push(option),
        }
    }
}

/// `v` without repeated entries, first occurrence kept.
fn omit_duplicates(v: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(v.len());
    for s in v {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

fn read_resolv_conf(path: &Path) -> Result<cri::DnsConfig, String> {
    use std::io::Read;
    let file =
        std::fs::File::open(path).map_err(|e| format!("opening resolv conf {}: {e}", path.display()))?;
    let mut text = String::new();
    file.take(MAX_RESOLV_CONF_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("reading resolv conf {}: {e}", path.display()))?;
    if text.len() as u64 > MAX_RESOLV_CONF_BYTES {
        return Err(format!("resolv conf {} is larger than {MAX_RESOLV_CONF_BYTES} bytes", path.display()));
    }
    parse_resolv_conf(&text)
        .map_err(|e| format!("Encountered error while parsing resolv conf file. Error: {e}"))
}

impl Configurer {
    /// The host's resolver configuration (empty without a resolv.conf).
    fn host_dns(&self) -> Result<cri::DnsConfig, String> {
        match &self.resolv_conf {
            Some(path) => read_resolv_conf(path),
            None => Ok(cri::DnsConfig::default()),
        }
    }

    /// `<ns>.svc.<domain> svc.<domain> <domain>`, then the host's search domains.
    fn cluster_first_searches(&self, host: Vec<String>, namespace: &str) -> Vec<String> {
        if self.cluster_domain.is_empty() {
            return host;
        }
        let d = &self.cluster_domain;
        let mut searches = vec![format!("{namespace}.svc.{d}"), format!("svc.{d}"), d.clone()];
        searches.extend(host);
        omit_duplicates(searches)
    }

    /// The pod's DNS configuration and the warnings to record about it; an error when the
    /// node's resolv.conf cannot be read (the sandbox cannot be created then, as upstream).
    pub fn pod_dns(&self, pod: &Pod) -> Result<(cri::DnsConfig, Vec<Warning>), String> {
        let mut warnings = Vec::new();
        let mut dns = self.host_dns()?;
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let mut kind = pod_dns_type(pod);
        if kind == PodDnsType::Cluster && self.cluster_dns.is_empty() {
            let message = "kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.";
            tracing::warn!(pod = %format!("{namespace}/{}", pod.metadata.name.as_deref().unwrap_or_default()), "{message}");
            warnings.push(Warning {
                subject: Subject::Node,
                reason: "MissingClusterDNS",
                message: message.into(),
            });
            warnings.push(Warning {
                subject: Subject::Pod,
                reason: "MissingClusterDNS",
                message: format!(
                    "pod: \"{}_{namespace}({})\". {message}",
                    pod.metadata.name.as_deref().unwrap_or_default(),
                    pod.metadata.uid.as_deref().unwrap_or_default()
                ),
            });
            kind = PodDnsType::Host;
        }
        match kind {
            PodDnsType::None => dns = cri::DnsConfig::default(),
            PodDnsType::Cluster => {
                // The cluster DNS server is the only nameserver: it forwards what it does
                // not serve to the node's resolvers itself.
                dns.servers = self.cluster_dns.iter().map(IpAddr::to_string).collect();
                dns.searches = self.cluster_first_searches(std::mem::take(&mut dns.searches), namespace);
                dns.options = DEFAULT_OPTIONS.iter().map(|s| (*s).to_owned()).collect();
            }
            PodDnsType::Host => {
                if self.resolv_conf.is_none() {
                    // No resolv.conf: "the nameserver on the local machine", per family.
                    for ip in &self.node_ips {
                        dns.servers.push(if ip.is_ipv6() { "::1" } else { "127.0.0.1" }.into());
                    }
                    if dns.servers.is_empty() {
                        dns.servers.push("127.0.0.1".into());
                    }
                    dns.searches = vec![".".into()];
                }
            }
        }
        if let Some(extra) = pod.spec.as_ref().and_then(|s| s.dns_config.as_ref()) {
            merge_dns_config(&mut dns, extra);
        }
        fit_limits(&mut dns, &mut warnings);
        Ok((dns, warnings))
    }
}

/// `dnsConfig` appended: nameservers and searches without duplicates, options by name
/// (the pod's win).
fn merge_dns_config(dns: &mut cri::DnsConfig, extra: &PodDNSConfig) {
    let mut servers = std::mem::take(&mut dns.servers);
    servers.extend(extra.nameservers.iter().flatten().cloned());
    dns.servers = omit_duplicates(servers);
    let mut searches = std::mem::take(&mut dns.searches);
    searches.extend(extra.searches.iter().flatten().cloned());
    dns.searches = omit_duplicates(searches);
    append_options(
        &mut dns.options,
        extra.options.iter().flatten().map(|o| {
            let name = o.name.clone().unwrap_or_default();
            match o.value.as_deref() {
                Some(v) if !v.is_empty() => format!("{name}:{v}"),
                _ => name,
            }
        }),
    );
}

/// glibc's limits, with upstream's DNSConfigForming warnings.
fn fit_limits(dns: &mut cri::DnsConfig, warnings: &mut Vec<Warning>) {
    if dns.servers.len() > MAX_NAMESERVERS {
        dns.servers.truncate(MAX_NAMESERVERS);
        warnings.push(Warning {
            subject: Subject::Pod,
            reason: "DNSConfigForming",
            message: format!(
                "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: {}",
                dns.servers.join(" ")
            ),
        });
    }
    let mut exceeded = false;
    if dns.searches.len() > MAX_SEARCH_PATHS {
        dns.searches.truncate(MAX_SEARCH_PATHS);
        exceeded = true;
    }
    let before = dns.searches.len();
    dns.searches.retain(|s| s.len() <= MAX_SEARCH_DOMAIN_CHARS);
    exceeded |= dns.searches.len() != before;
    while dns.searches.join(" ").len() > MAX_SEARCH_LIST_CHARS {
        dns.searches.pop();
        exceeded = true;
    }
    if exceeded {
        warnings.push(Warning {
            subject: Subject::Pod,
            reason: "DNSConfigForming",
            message: format!(
                "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
                dns.searches.join(" ")
            ),
        });
    }
}

/// The pod's hostname (spec.hostname, else its name, cut to 63 characters without a
/// trailing `-` or `.`) and domain (`<subdomain>.<ns>.svc.<clusterDomain>` when it has a
/// subdomain), as upstream's `GeneratePodHostNameAndDomain`.
pub fn hostname_and_domain(pod: &Pod, cluster_domain: &str) -> Result<(String, String), String> {
    let spec = pod.spec.as_ref();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let mut hostname = name.clone();
    if let Some(h) = spec.and_then(|s| s.hostname.as_deref()).filter(|h| !h.is_empty()) {
        if !is_dns1123_label(h) {
            return Err(format!("pod Hostname {h:?} is not a valid DNS label"));
        }
        hostname = h.to_owned();
    }
    if hostname.len() > 63 {
        let cut = hostname[..63].trim_end_matches(['-', '.']).to_owned();
        tracing::error!(pod = %name, truncated = %cut, "hostname for pod was too long, truncated it");
        if cut.is_empty() {
            return Err(format!("hostname for pod {name:?} was invalid: {hostname:?}"));
        }
        hostname = cut;
    }
    let mut domain = String::new();
    if let Some(sub) = spec.and_then(|s| s.subdomain.as_deref()).filter(|s| !s.is_empty()) {
        if !is_dns1123_label(sub) {
            return Err(format!("pod Subdomain {sub:?} is not a valid DNS label"));
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        domain = format!("{sub}.{ns}.svc.{cluster_domain}");
    }
    Ok((hostname, domain))
}

/// The name the sandbox's kernel gets: the hostname, or `<hostname>.<domain>` with
/// `setHostnameAsFQDN` (at most 64 characters, the kernel's limit).
pub fn kernel_hostname(pod: &Pod, hostname: &str, domain: &str) -> Result<String, String> {
    let fqdn_wanted = pod.spec.as_ref().and_then(|s| s.set_hostname_as_fqdn).unwrap_or(false);
    if domain.is_empty() || !fqdn_wanted {
        return Ok(hostname.to_owned());
    }
    let fqdn = format!("{hostname}.{domain}");
    if fqdn.len() > 64 {
        return Err(format!(
            "failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long (64 characters is the max, {} characters requested)",
            fqdn.len()
        ));
    }
    Ok(fqdn)
}

fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "web", "namespace": "app", "uid": "u1"}, "spec": spec}),
        )
        .unwrap()
    }

    fn configurer(resolv: &str) -> (Configurer, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("resolv.conf");
        std::fs::write(&path, resolv).unwrap();
        let c = Configurer {
            cluster_dns: vec!["10.96.0.10".parse().unwrap()],
            cluster_domain: "cluster.local".into(),
            resolv_conf: Some(path),
            node_ips: vec!["192.168.0.5".parse().unwrap()],
        };
        (c, dir)
    }

    const HOST: &str = "# generated\nnameserver 192.168.0.1\nnameserver 192.168.0.2\nsearch corp.example. lab.example .\ndomain ignored.example\noptions timeout:2 attempts:3\noptions timeout:1\n";

    #[test]
    fn resolv_conf_parsing() {
        let d = parse_resolv_conf(HOST).unwrap();
        assert_eq!(d.servers, ["192.168.0.1", "192.168.0.2"]);
        assert_eq!(d.searches, ["corp.example", "lab.example"]);
        assert_eq!(d.options, ["timeout:1", "attempts:3"]);
        assert!(parse_resolv_conf("nameserver\n").is_err());
    }

    #[test]
    fn cluster_first() {
        let (c, _d) = configurer(HOST);
        let (dns, warnings) = c.pod_dns(&pod(json!({"containers": []}))).unwrap();
        assert_eq!(dns.servers, ["10.96.0.10"]);
        assert_eq!(
            dns.searches,
            ["app.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example", "lab.example"]
        );
        assert_eq!(dns.options, ["ndots:5"], "the node's options are replaced");
        assert!(warnings.is_empty());
        // hostNetwork pods use the node's DNS unless they ask for ClusterFirstWithHostNet.
        let (dns, _) = c
            .pod_dns(&pod(json!({"containers": [], "hostNetwork": true, "dnsPolicy": "ClusterFirst"})))
            .unwrap();
        assert_eq!(dns.servers, ["192.168.0.1", "192.168.0.2"]);
        let (dns, _) = c
            .pod_dns(&pod(
                json!({"containers": [], "hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet"}),
            ))
            .unwrap();
        assert_eq!(dns.servers, ["10.96.0.10"]);
    }

    #[test]
    fn default_none_and_dns_config() {
        let (c, _d) = configurer(HOST);
        let (dns, _) = c.pod_dns(&pod(json!({"containers": [], "dnsPolicy": "Default"}))).unwrap();
        assert_eq!(dns.servers, ["192.168.0.1", "192.168.0.2"]);
        assert_eq!(dns.searches, ["corp.example", "lab.example"]);
        assert_eq!(dns.options, ["timeout:1", "attempts:3"]);
        let (dns, _) = c
            .pod_dns(&pod(json!({"containers": [], "dnsPolicy": "None", "dnsConfig": {
                "nameservers": ["1.2.3.4", "1.2.3.4"], "searches": ["ns1.svc.cluster-domain.example", "my.dns.search.suffix"],
                "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}})))
            .unwrap();
        assert_eq!(dns.servers, ["1.2.3.4"]);
        assert_eq!(dns.searches, ["ns1.svc.cluster-domain.example", "my.dns.search.suffix"]);
        assert_eq!(dns.options, ["ndots:2", "edns0"]);
        // dnsConfig merges into ClusterFirst: its options replace same-named ones.
        let (dns, _) = c
            .pod_dns(&pod(json!({"containers": [], "dnsConfig": {"nameservers": ["10.96.0.10", "8.8.8.8"],
                "searches": ["cluster.local", "extra.example"], "options": [{"name": "ndots", "value": "1"}]}})))
            .unwrap();
        assert_eq!(dns.servers, ["10.96.0.10", "8.8.8.8"]);
        assert_eq!(dns.searches.last().unwrap(), "extra.example");
        assert_eq!(dns.searches.iter().filter(|s| *s == "cluster.local").count(), 1);
        assert_eq!(dns.options, ["ndots:1"]);
    }

    #[test]
    fn without_cluster_dns_cluster_first_falls_back_to_default_with_events() {
        let (mut c, _d) = configurer(HOST);
        c.cluster_dns.clear();
        let (dns, warnings) = c.pod_dns(&pod(json!({"containers": []}))).unwrap();
        assert_eq!(dns.servers, ["192.168.0.1", "192.168.0.2"]);
        assert_eq!(dns.searches, ["corp.example", "lab.example"]);
        let subjects: Vec<_> = warnings.iter().map(|w| (w.subject, w.reason)).collect();
        assert_eq!(subjects, [(Subject::Node, "MissingClusterDNS"), (Subject::Pod, "MissingClusterDNS")]);
        assert!(
            warnings[1].message.contains("Falling back to \"Default\" policy"),
            "{}",
            warnings[1].message
        );
    }

    #[test]
    fn no_resolv_conf_means_the_local_resolver() {
        let (mut c, _d) = configurer(HOST);
        c.resolv_conf = None;
        c.node_ips = vec!["192.168.0.5".parse().unwrap(), "fd00::5".parse().unwrap()];
        let (dns, _) = c.pod_dns(&pod(json!({"containers": [], "dnsPolicy": "Default"}))).unwrap();
        assert_eq!(dns.servers, ["127.0.0.1", "::1"]);
        assert_eq!(dns.searches, ["."]);
        let (dns, _) = c.pod_dns(&pod(json!({"containers": []}))).unwrap();
        assert_eq!(dns.searches, ["app.svc.cluster.local", "svc.cluster.local", "cluster.local"]);
        c.resolv_conf = Some("/nonexistent/resolv.conf".into());
        assert!(c.pod_dns(&pod(json!({"containers": []}))).unwrap_err().contains("/nonexistent/resolv.conf"));
    }

    #[test]
    fn limits() {
        let (c, _d) = configurer("nameserver 1.1.1.1\n");
        let many: Vec<String> = (0..40).map(|i| format!("d{i}.example")).collect();
        let long = "x".repeat(254);
        let mut searches = vec![long];
        searches.extend(many);
        let (dns, warnings) = c
            .pod_dns(&pod(json!({"containers": [], "dnsPolicy": "None", "dnsConfig": {
                "nameservers": ["1.1.1.1", "2.2.2.2", "3.3.3.3", "4.4.4.4"], "searches": searches}})))
            .unwrap();
        assert_eq!(dns.servers, ["1.1.1.1", "2.2.2.2", "3.3.3.3"]);
        assert_eq!(dns.searches.len(), 31, "32 kept, then the 254-character one dropped");
        assert!(dns.searches.iter().all(|s| s.len() <= 253));
        let reasons: Vec<_> =
            warnings.iter().map(|w| w.message.split(',').next().unwrap().to_owned()).collect();
        assert_eq!(reasons, ["Nameserver limits were exceeded", "Search Line limits were exceeded"]);
        // The whole line at most 2048 characters: cut from the end.
        let wide: Vec<String> = (0..20).map(|i| format!("{i:02}{}", "y".repeat(200))).collect();
        let (dns, _) = c
            .pod_dns(&pod(json!({"containers": [], "dnsPolicy": "None", "dnsConfig": {"searches": wide}})))
            .unwrap();
        assert!(dns.searches.join(" ").len() <= MAX_SEARCH_LIST_CHARS);
        assert_eq!(dns.searches.len(), 10);
    }

    #[test]
    fn hostnames_and_domains() {
        let p = pod(json!({"containers": [], "hostname": "db-0", "subdomain": "db"}));
        let (h, d) = hostname_and_domain(&p, "cluster.local").unwrap();
        assert_eq!((h.as_str(), d.as_str()), ("db-0", "db.app.svc.cluster.local"));
        assert_eq!(kernel_hostname(&p, &h, &d).unwrap(), "db-0");
        let fqdn =
            pod(json!({"containers": [], "hostname": "db-0", "subdomain": "db", "setHostnameAsFQDN": true}));
        assert_eq!(kernel_hostname(&fqdn, &h, &d).unwrap(), "db-0.db.app.svc.cluster.local");
        assert!(kernel_hostname(&fqdn, &"a".repeat(40), &d).unwrap_err().contains("too long"));
        let (h, d) = hostname_and_domain(&pod(json!({"containers": []})), "cluster.local").unwrap();
        assert_eq!((h.as_str(), d.as_str()), ("web", ""));
        let mut long = pod(json!({"containers": []}));
        long.metadata.name = Some(format!("{}-{}", "a".repeat(62), "b".repeat(10)));
        assert_eq!(
            hostname_and_domain(&long, "cluster.local").unwrap().0,
            "a".repeat(62),
            "cut at 63, '-' trimmed"
        );
        assert!(hostname_and_domain(&pod(json!({"containers": [], "hostname": "Bad_Name"})), "c").is_err());
        assert!(hostname_and_domain(&pod(json!({"containers": [], "subdomain": "-x"})), "c").is_err());
    }
}
