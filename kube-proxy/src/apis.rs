//! `KubeProxyConfiguration` (`kubeproxy.config.k8s.io/v1alpha1`), the `--config` file:
//! its fields as upstream names them, decoded strictly (an unknown field is an error, as
//! upstream's strict decoding), with upstream's defaults.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";
pub const KIND: &str = "KubeProxyConfiguration";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ClientConnection {
    pub kubeconfig: String,
    pub accept_content_types: String,
    pub content_type: String,
    pub qps: f32,
    pub burst: i32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Logging {
    pub format: String,
    pub flush_frequency: serde_json::Value,
    pub verbosity: u8,
    pub vmodule: serde_json::Value,
    pub options: serde_json::Value,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct IPTables {
    pub masquerade_bit: Option<i32>,
    pub masquerade_all: bool,
    pub localhost_node_ports: Option<bool>,
    pub sync_period: String,
    pub min_sync_period: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct NFTables {
    pub masquerade_bit: Option<i32>,
    pub masquerade_all: bool,
    pub sync_period: String,
    pub min_sync_period: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Conntrack {
    pub max_per_core: Option<i32>,
    pub min: Option<i32>,
    pub tcp_established_timeout: Option<String>,
    pub tcp_close_wait_timeout: Option<String>,
    pub tcp_be_liberal: bool,
    pub udp_timeout: String,
    pub udp_stream_timeout: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DetectLocal {
    pub bridge_interface: String,
    pub interface_name_prefix: String,
}

/// The v1alpha1 object. Sections of modes this build does not have (`ipvs`, `winkernel`)
/// are accepted as upstream accepts them on a platform where they do not apply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeProxyConfiguration {
    pub api_version: String,
    pub kind: String,
    pub feature_gates: BTreeMap<String, bool>,
    pub client_connection: ClientConnection,
    pub logging: Logging,
    pub hostname_override: String,
    pub bind_address: String,
    pub healthz_bind_address: String,
    pub metrics_bind_address: String,
    pub bind_address_hard_fail: bool,
    pub enable_profiling: bool,
    pub show_hidden_metrics_for_version: String,
    pub mode: String,
    pub iptables: IPTables,
    pub ipvs: serde_json::Value,
    pub nftables: NFTables,
    pub winkernel: serde_json::Value,
    pub detect_local_mode: String,
    pub detect_local: DetectLocal,
    #[serde(rename = "clusterCIDR")]
    pub cluster_cidr: String,
    pub node_port_addresses: Vec<String>,
    pub oom_score_adj: Option<i32>,
    pub conntrack: Conntrack,
    pub config_sync_period: String,
    pub port_range: String,
    pub windows_run_as_service: bool,
}

/// Why a configuration file was refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("decoding {path}: {message}")]
    Decode { path: String, message: String },
}

impl KubeProxyConfiguration {
    /// Reads and strictly decodes a YAML or JSON file.
    pub fn load(path: &std::path::Path) -> Result<Self, Error> {
        let p = path.display().to_string();
        let data = std::fs::read_to_string(path).map_err(|source| Error::Read { path: p.clone(), source })?;
        Self::decode(&data).map_err(|message| Error::Decode { path: p, message })
    }

    /// Decodes a file's content, checking apiVersion and kind, and applies defaults.
    pub fn decode(data: &str) -> Result<Self, String> {
        let mut c: KubeProxyConfiguration =
            serde_yaml::from_str(data).map_err(|e| format!("strict decoding error: {e}"))?;
        if c.kind != KIND {
            return Err(format!("kind {:?} is not {KIND:?}", c.kind));
        }
        if c.api_version != API_VERSION {
            return Err(format!("no kind \"{KIND}\" is registered for version {:?}", c.api_version));
        }
        c.set_defaults();
        Ok(c)
    }

    /// Upstream's defaults (`SetDefaults_KubeProxyConfiguration`), for fields left empty.
    pub fn set_defaults(&mut self) {
        let set = |s: &mut String, v: &str| {
            if s.is_empty() {
                *s = v.to_owned();
            }
        };
        self.api_version = API_VERSION.into();
        self.kind = KIND.into();
        set(&mut self.bind_address, "0.0.0.0");
        let v6 = self.bind_address.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_ipv6());
        let (healthz, metrics) = if v6 { ("[::]", "[::1]") } else { ("0.0.0.0", "127.0.0.1") };
        set(&mut self.healthz_bind_address, &format!("{healthz}:10256"));
        set(&mut self.metrics_bind_address, &format!("{metrics}:10249"));
        self.oom_score_adj.get_or_insert(-999);
        set(&mut self.iptables.sync_period, "30s");
        set(&mut self.iptables.min_sync_period, "1s");
        self.iptables.masquerade_bit.get_or_insert(14);
        self.iptables.localhost_node_ports.get_or_insert(true);
        set(&mut self.nftables.sync_period, "30s");
        set(&mut self.nftables.min_sync_period, "1s");
        self.nftables.masquerade_bit.get_or_insert(14);
        self.conntrack.max_per_core.get_or_insert(32 * 1024);
        self.conntrack.min.get_or_insert(128 * 1024);
        self.conntrack.tcp_established_timeout.get_or_insert_with(|| "24h0m0s".into());
        self.conntrack.tcp_close_wait_timeout.get_or_insert_with(|| "1h0m0s".into());
        set(&mut self.config_sync_period, "15m0s");
        set(&mut self.client_connection.content_type, "application/vnd.kubernetes.protobuf");
        if self.client_connection.qps == 0.0 {
            self.client_connection.qps = 5.0;
        }
        if self.client_connection.burst == 0 {
            self.client_connection.burst = 10;
        }
        set(&mut self.detect_local_mode, "ClusterCIDR");
        set(&mut self.logging.format, "text");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_with_defaults_and_rejects_unknown_fields() {
        let c = KubeProxyConfiguration::decode(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\nclusterCIDR: 10.0.0.0/8\nnftables:\n  minSyncPeriod: 0s\nconntrack:\n  maxPerCore: 0\n",
        )
        .unwrap();
        assert_eq!(c.mode, "nftables");
        assert_eq!(c.nftables.min_sync_period, "0s");
        assert_eq!(c.nftables.sync_period, "30s");
        assert_eq!(c.conntrack.max_per_core, Some(0));
        assert_eq!(c.healthz_bind_address, "0.0.0.0:10256");
        assert_eq!(c.metrics_bind_address, "127.0.0.1:10249");
        let err = KubeProxyConfiguration::decode(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nnftable: {}\n",
        )
        .unwrap_err();
        assert!(err.contains("strict decoding error") && err.contains("nftable"), "{err}");
        let err =
            KubeProxyConfiguration::decode("apiVersion: v1\nkind: KubeProxyConfiguration\n").unwrap_err();
        assert!(err.contains("version"), "{err}");
    }
}
