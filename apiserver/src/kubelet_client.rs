//! The API server's client of the kubelets (upstream's `pkg/kubelet/client`): which of a
//! Node's addresses and which port to dial, and the TLS to dial with, for `pods/log`,
//! `pods/exec`, `pods/attach`, `pods/portforward` and `nodes/proxy` ([`crate::connect`]).
//!
//! As upstream, without `--kubelet-certificate-authority` the kubelet's serving
//! certificate is not verified (kubelets serve self-signed certificates by default), and
//! the client certificate is presented when `--kubelet-client-certificate` is given.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;
use serde_json::Value;

use crate::errors::{ApiError, ApiResult};

/// The address types a Node may report (`status.addresses[].type`).
pub const ADDRESS_TYPES: &[&str] = &["Hostname", "ExternalIP", "InternalIP", "ExternalDNS", "InternalDNS"];

/// The port a kubelet serves on when its Node does not say (`daemonEndpoints`).
pub const DEFAULT_KUBELET_PORT: u16 = 10250;

/// The label old kubelets reported their host name in.
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

fn duration(s: &str) -> Result<Duration, String> {
    component_base::duration::parse(s)
}

/// The kubelet client flags, with upstream's names and defaults.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// List of the preferred NodeAddressTypes to use for kubelet connections.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "Hostname,InternalDNS,InternalIP,ExternalDNS,ExternalIP"
    )]
    pub kubelet_preferred_address_types: Vec<String>,
    /// Path to a client cert file for TLS.
    #[arg(long)]
    pub kubelet_client_certificate: Option<PathBuf>,
    /// Path to a client key file for TLS.
    #[arg(long)]
    pub kubelet_client_key: Option<PathBuf>,
    /// Path to a cert file for the certificate authority.
    #[arg(long)]
    pub kubelet_certificate_authority: Option<PathBuf>,
    /// Timeout for kubelet operations (here: connecting, TLS included).
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub kubelet_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            kubelet_preferred_address_types: [
                "Hostname",
                "InternalDNS",
                "InternalIP",
                "ExternalDNS",
                "ExternalIP",
            ]
            .map(String::from)
            .to_vec(),
            kubelet_client_certificate: None,
            kubelet_client_key: None,
            kubelet_certificate_authority: None,
            kubelet_timeout: Duration::from_secs(5),
        }
    }
}

impl Options {
    pub fn validate(&self) -> Result<(), String> {
        for t in &self.kubelet_preferred_address_types {
            if !ADDRESS_TYPES.contains(&t.as_str()) {
                return Err(format!(
                    "--kubelet-preferred-address-types: {t:?} is not a node address type (want one of {})",
                    ADDRESS_TYPES.join(", ")
                ));
            }
        }
        if self.kubelet_client_certificate.is_some() != self.kubelet_client_key.is_some() {
            return Err("--kubelet-client-certificate and --kubelet-client-key go together".into());
        }
        Ok(())
    }
}

/// Where one node's kubelet is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeConnection {
    /// The node's addresses in the order of `--kubelet-preferred-address-types`. The
    /// first is upstream's choice; the next ones are dialed only when a name before
    /// them does not resolve (a Hostname that is not in DNS).
    pub hosts: Vec<String>,
    pub port: u16,
}

/// The TLS configurations of kubelet connections and the address preferences.
pub struct KubeletClient {
    /// Verifying the kubelet against `--kubelet-certificate-authority`, or not at all
    /// without one.
    tls: Arc<ClientConfig>,
    /// Never verifying (a log request's `insecureSkipTLSVerifyBackend`).
    insecure: Arc<ClientConfig>,
    preferred: Vec<String>,
    pub timeout: Duration,
}

impl KubeletClient {
    pub fn new(opts: &Options) -> Result<Self, String> {
        opts.validate()?;
        let cert_and_key = opts.kubelet_client_certificate.as_deref().zip(opts.kubelet_client_key.as_deref());
        let insecure = component_base::tls::insecure_client_config(cert_and_key, &[b"http/1.1"])
            .map_err(|e| format!("--kubelet-client-certificate/--kubelet-client-key: {e}"))?;
        let tls = match &opts.kubelet_certificate_authority {
            Some(ca) => component_base::tls::client_config(Some(ca), cert_and_key, &[b"http/1.1"])
                .map_err(|e| format!("--kubelet-certificate-authority: {e}"))?,
            None => insecure.clone(),
        };
        Ok(Self {
            tls,
            insecure,
            preferred: opts.kubelet_preferred_address_types.clone(),
            timeout: opts.kubelet_timeout,
        })
    }

    /// The TLS configuration of a connection (`skip_verify`: the caller asked not to verify).
    pub fn tls(&self, skip_verify: bool) -> Arc<ClientConfig> {
        if skip_verify { self.insecure.clone() } else { self.tls.clone() }
    }

    /// Where the kubelet of `node` (a Node object) listens (upstream's
    /// `NodeConnectionInfoGetter`): its preferred addresses and its daemon endpoint port.
    pub fn connection(&self, node: &Value) -> ApiResult<NodeConnection> {
        let hosts = preferred_addresses(node, &self.preferred);
        if hosts.is_empty() {
            return Err(ApiError::new(
                500,
                "",
                format!("no preferred addresses found; known addresses: {}", known_addresses(node)),
            ));
        }
        Ok(NodeConnection { hosts, port: kubelet_port(node) })
    }
}

/// The node's addresses in preference order, without repeats. A preferred `Hostname`
/// that the node does not report falls back to its `kubernetes.io/hostname` label, as
/// upstream's `GetPreferredNodeAddress`.
pub fn preferred_addresses(node: &Value, preferred: &[String]) -> Vec<String> {
    let addresses = node["status"]["addresses"].as_array().cloned().unwrap_or_default();
    let mut out: Vec<String> = Vec::new();
    for kind in preferred {
        let mut found = false;
        for a in &addresses {
            if a["type"].as_str() == Some(kind.as_str())
                && let Some(addr) = a["address"].as_str().filter(|s| !s.is_empty())
            {
                found = true;
                if !out.iter().any(|o| o == addr) {
                    out.push(addr.to_string());
                }
            }
        }
        if !found
            && kind == "Hostname"
            && let Some(h) = node["metadata"]["labels"][HOSTNAME_LABEL].as_str().filter(|s| !s.is_empty())
            && !out.iter().any(|o| o == h)
        {
            out.push(h.to_string());
        }
    }
    out
}

/// Go's `%v` of the node's address list, for the error message.
fn known_addresses(node: &Value) -> String {
    let list: Vec<String> = node["status"]["addresses"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| {
                    format!(
                        "{{{} {}}}",
                        x["type"].as_str().unwrap_or_default(),
                        x["address"].as_str().unwrap_or_default()
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    format!("[{}]", list.join(" "))
}

/// `status.daemonEndpoints.kubeletEndpoint.Port`, or 10250 when not set.
pub fn kubelet_port(node: &Value) -> u16 {
    node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .unwrap_or(DEFAULT_KUBELET_PORT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node() -> Value {
        json!({
            "metadata": { "name": "n1", "labels": { "kubernetes.io/hostname": "n1-label" } },
            "status": {
                "addresses": [
                    { "type": "InternalIP", "address": "127.0.0.7" },
                    { "type": "Hostname", "address": "n1" },
                    { "type": "ExternalIP", "address": "203.0.113.9" },
                ],
                "daemonEndpoints": { "kubeletEndpoint": { "Port": 41000 } },
            }
        })
    }

    fn order(s: &str) -> Vec<String> {
        s.split(',').map(String::from).collect()
    }

    #[test]
    fn address_preference() {
        let n = node();
        let default = Options::default().kubelet_preferred_address_types;
        assert_eq!(preferred_addresses(&n, &default), ["n1", "127.0.0.7", "203.0.113.9"]);
        assert_eq!(preferred_addresses(&n, &order("InternalIP,Hostname")), ["127.0.0.7", "n1"]);
        assert_eq!(preferred_addresses(&n, &order("ExternalDNS")), Vec::<String>::new());
        // No Hostname address: the hostname label stands in.
        let mut n2 = n.clone();
        n2["status"]["addresses"].as_array_mut().unwrap().retain(|a| a["type"] != "Hostname");
        assert_eq!(preferred_addresses(&n2, &order("Hostname,InternalIP")), ["n1-label", "127.0.0.7"]);
    }

    #[test]
    fn port_and_errors() {
        assert_eq!(kubelet_port(&node()), 41000);
        assert_eq!(kubelet_port(&json!({"status": {}})), DEFAULT_KUBELET_PORT);
        let c = KubeletClient::new(&Options {
            kubelet_preferred_address_types: order("ExternalDNS"),
            ..Default::default()
        })
        .unwrap();
        let e = c.connection(&node()).unwrap_err();
        assert_eq!(e.code, 500);
        assert_eq!(
            e.message,
            "no preferred addresses found; known addresses: [{InternalIP 127.0.0.7} {Hostname n1} {ExternalIP 203.0.113.9}]"
        );
        let c = KubeletClient::new(&Options::default()).unwrap();
        assert_eq!(
            c.connection(&node()).unwrap(),
            NodeConnection { hosts: order("n1,127.0.0.7,203.0.113.9"), port: 41000 }
        );
    }

    #[test]
    fn flags() {
        let bad =
            Options { kubelet_preferred_address_types: order("InternalIP,Bogus"), ..Default::default() };
        assert!(bad.validate().unwrap_err().contains("\"Bogus\""));
        let half = Options { kubelet_client_key: Some("k.pem".into()), ..Default::default() };
        assert!(half.validate().is_err());
    }
}
