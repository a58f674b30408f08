//! `KubeletConfiguration` (`kubelet.config.k8s.io/v1beta1`), the `--config` file, with
//! upstream's defaults for the fields this kubelet implements.
//!
//! Decoding is strict first; on an unknown field it warns and decodes leniently, as
//! upstream's kubelet does (so a config written for upstream still starts here). A field
//! that is known upstream but not implemented here is one of the unknown ones.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why the configuration is unusable.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("decoding {path}: {source}")]
    Decode { path: String, source: serde_yaml::Error },
    #[error(
        "{path}: kind must be KubeletConfiguration with apiVersion kubelet.config.k8s.io/v1beta1, got {kind} {api_version}"
    )]
    Kind { path: String, kind: String, api_version: String },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Authentication {
    pub anonymous: Enabled,
    pub webhook: Enabled,
    pub x509: X509,
}

impl Default for Authentication {
    fn default() -> Self {
        // Upstream's v1beta1 defaults: anonymous on, webhook on.
        Self {
            anonymous: Enabled { enabled: true },
            webhook: Enabled { enabled: true },
            x509: X509::default(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Enabled {
    pub enabled: bool,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct X509 {
    #[serde(rename = "clientCAFile")]
    pub client_ca_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Authorization {
    /// `Webhook` (SubjectAccessReview) or `AlwaysAllow`.
    pub mode: String,
}

impl Default for Authorization {
    fn default() -> Self {
        Self { mode: "Webhook".into() }
    }
}

/// A taint to register the Node with.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    pub key: String,
    #[serde(default)]
    pub value: Option<String>,
    pub effect: String,
}

/// The strict form: every field this kubelet implements, nothing else.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct KubeletConfiguration {
    pub api_version: String,
    pub kind: String,
    pub static_pod_path: Option<PathBuf>,
    /// How often the static pod directory is checked for changes.
    pub file_check_frequency: String,
    /// How often each pod is synced even without events (ConfigMap/Secret volumes are
    /// refreshed then).
    pub sync_frequency: String,
    #[serde(rename = "clusterDNS")]
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    pub resolv_conf: PathBuf,
    pub cgroup_driver: String,
    pub cgroup_root: String,
    pub container_runtime_endpoint: String,
    pub runtime_request_timeout: String,
    pub authentication: Authentication,
    pub authorization: Authorization,
    pub address: String,
    pub port: u16,
    pub healthz_bind_address: String,
    pub healthz_port: u16,
    pub node_status_update_frequency: String,
    pub node_status_report_frequency: String,
    pub node_lease_duration_seconds: i32,
    pub max_pods: i64,
    pub eviction_hard: BTreeMap<String, String>,
    pub register_node: bool,
    pub register_with_taints: Vec<Taint>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    pub pod_logs_dir: PathBuf,
    /// The client-side rate limit of requests to the API server (upstream: 50 and 100).
    #[serde(rename = "kubeAPIQPS")]
    pub kube_api_qps: f32,
    #[serde(rename = "kubeAPIBurst")]
    pub kube_api_burst: i32,
}

impl Default for KubeletConfiguration {
    fn default() -> Self {
        Self {
            api_version: "kubelet.config.k8s.io/v1beta1".into(),
            kind: "KubeletConfiguration".into(),
            static_pod_path: None,
            file_check_frequency: "20s".into(),
            sync_frequency: "1m".into(),
            cluster_dns: Vec::new(),
            cluster_domain: String::new(),
            resolv_conf: "/etc/resolv.conf".into(),
            cgroup_driver: "cgroupfs".into(),
            cgroup_root: "/".into(),
            container_runtime_endpoint: "unix:///run/containerd/containerd.sock".into(),
            runtime_request_timeout: "2m".into(),
            authentication: Authentication::default(),
            authorization: Authorization::default(),
            address: "0.0.0.0".into(),
            port: 10250,
            healthz_bind_address: "127.0.0.1".into(),
            healthz_port: 10248,
            node_status_update_frequency: "10s".into(),
            node_status_report_frequency: "5m".into(),
            node_lease_duration_seconds: 40,
            max_pods: 110,
            eviction_hard: [
                ("memory.available", "100Mi"),
                ("nodefs.available", "10%"),
                ("nodefs.inodesFree", "5%"),
                ("imagefs.available", "15%"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            register_node: true,
            register_with_taints: Vec::new(),
            tls_cert_file: None,
            tls_private_key_file: None,
            pod_logs_dir: "/var/log/pods".into(),
            kube_api_qps: 50.0,
            kube_api_burst: 100,
        }
    }
}

/// The lenient twin of [`KubeletConfiguration`]: same fields, unknown ones ignored.
#[derive(Deserialize)]
#[serde(transparent)]
struct Lenient(#[serde(with = "lenient")] KubeletConfiguration);

mod lenient {
    use super::*;
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<KubeletConfiguration, D::Error> {
        // Drop every key the strict form does not know, then decode strictly.
        let mut value = serde_yaml::Value::deserialize(d)?;
        let known =
            serde_yaml::to_value(KubeletConfiguration::default()).map_err(serde::de::Error::custom)?;
        if let (Some(map), Some(known)) = (value.as_mapping_mut(), known.as_mapping()) {
            map.retain(|k, _| known.contains_key(k));
        }
        serde_yaml::from_value(value).map_err(serde::de::Error::custom)
    }
}

impl KubeletConfiguration {
    /// Reads and validates `path`.
    pub fn from_file(path: &Path) -> Result<Self, Error> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: p.clone(), source })?;
        Self::parse(&text, &p)
    }

    /// Decodes `text` (strictly, else leniently with a warning) and validates it.
    pub fn parse(text: &str, path: &str) -> Result<Self, Error> {
        let config = match serde_yaml::from_str::<Self>(text) {
            Ok(c) => c,
            Err(strict) => {
                let Lenient(c) = serde_yaml::from_str(text)
                    .map_err(|source| Error::Decode { path: path.to_string(), source })?;
                tracing::warn!(%path, error = %strict, "strict decoding of the kubelet config failed; unknown fields are ignored");
                c
            }
        };
        if config.kind != "KubeletConfiguration" || config.api_version != "kubelet.config.k8s.io/v1beta1" {
            return Err(Error::Kind {
                path: path.into(),
                kind: config.kind,
                api_version: config.api_version,
            });
        }
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), Error> {
        for (name, value) in [
            ("fileCheckFrequency", &self.file_check_frequency),
            ("syncFrequency", &self.sync_frequency),
            ("runtimeRequestTimeout", &self.runtime_request_timeout),
            ("nodeStatusUpdateFrequency", &self.node_status_update_frequency),
            ("nodeStatusReportFrequency", &self.node_status_report_frequency),
        ] {
            let d =
                component_base::duration::parse(value).map_err(|e| Error::Invalid(format!("{name}: {e}")))?;
            if d.is_zero() {
                return Err(Error::Invalid(format!("{name} must be greater than zero")));
            }
        }
        if self.cgroup_driver != "cgroupfs" {
            return Err(Error::Invalid(format!(
                "cgroupDriver {:?}: only \"cgroupfs\" is supported (this machine's PID 1 is not systemd)",
                self.cgroup_driver
            )));
        }
        if !matches!(self.authorization.mode.as_str(), "Webhook" | "AlwaysAllow") {
            return Err(Error::Invalid(format!(
                "authorization.mode {:?}: must be Webhook or AlwaysAllow",
                self.authorization.mode
            )));
        }
        if self.node_lease_duration_seconds <= 0 {
            return Err(Error::Invalid("nodeLeaseDurationSeconds must be greater than zero".into()));
        }
        if self.kube_api_qps <= 0.0 || self.kube_api_burst <= 0 {
            return Err(Error::Invalid(format!(
                "kubeAPIQPS ({}) and kubeAPIBurst ({}) must be greater than zero",
                self.kube_api_qps, self.kube_api_burst
            )));
        }
        for ip in &self.cluster_dns {
            if ip.parse::<std::net::IpAddr>().is_err() {
                return Err(Error::Invalid(format!("clusterDNS {ip:?} must be a valid IP address")));
            }
        }
        if self.max_pods <= 0 {
            return Err(Error::Invalid("maxPods must be greater than zero".into()));
        }
        for (signal, value) in &self.eviction_hard {
            if !matches!(
                signal.as_str(),
                "memory.available"
                    | "nodefs.available"
                    | "nodefs.inodesFree"
                    | "imagefs.available"
                    | "imagefs.inodesFree"
                    | "pid.available"
            ) {
                return Err(Error::Invalid(format!("evictionHard: unknown signal {signal:?}")));
            }
            if !value.ends_with('%') && component_base::quantity::parse_value(value).is_none() {
                return Err(Error::Invalid(format!(
                    "evictionHard[{signal}]: {value:?} is neither a quantity nor a percentage"
                )));
            }
        }
        for t in &self.register_with_taints {
            if !matches!(t.effect.as_str(), "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
                return Err(Error::Invalid(format!(
                    "registerWithTaints: effect {:?} of taint {}",
                    t.effect, t.key
                )));
            }
        }
        Ok(())
    }

    pub fn duration(value: &str) -> Duration {
        // Validated in `validate`.
        component_base::duration::parse(value).unwrap_or(Duration::from_secs(10))
    }

    /// The unix socket path of `containerRuntimeEndpoint` (`unix:///path` or a bare path).
    pub fn runtime_socket(&self) -> Result<PathBuf, Error> {
        let e = &self.container_runtime_endpoint;
        if let Some(p) = e.strip_prefix("unix://") {
            Ok(PathBuf::from(p))
        } else if e.starts_with('/') {
            Ok(PathBuf::from(e))
        } else {
            Err(Error::Invalid(format!("containerRuntimeEndpoint {e:?}: only unix sockets are supported")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_fields() {
        let c = KubeletConfiguration::parse(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: /m\nclusterDNS: [10.0.0.10]\nclusterDomain: cluster.local\nauthentication:\n  anonymous:\n    enabled: false\n  x509:\n    clientCAFile: /ca.crt\nevictionHard:\n  memory.available: 200Mi\nregisterWithTaints:\n- key: a\n  effect: NoSchedule\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.static_pod_path.as_deref(), Some(Path::new("/m")));
        assert_eq!(c.cluster_dns, ["10.0.0.10"]);
        assert!(!c.authentication.anonymous.enabled);
        assert!(c.authentication.webhook.enabled);
        assert_eq!(c.authentication.x509.client_ca_file.as_deref(), Some(Path::new("/ca.crt")));
        assert_eq!(c.port, 10250);
        assert_eq!(c.healthz_port, 10248);
        assert_eq!((c.kube_api_qps, c.kube_api_burst), (50.0, 100));
        assert_eq!(c.eviction_hard.len(), 1, "a given evictionHard replaces the defaults, as upstream");
        assert_eq!(c.register_with_taints[0].effect, "NoSchedule");
    }

    #[test]
    fn unknown_fields_are_ignored_and_bad_values_refused() {
        let c = KubeletConfiguration::parse(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nserializeImagePulls: false\nmaxPods: 20\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.max_pods, 20);
        for bad in [
            "kind: Foo\napiVersion: v1\n",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsyncFrequency: soon\n",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard: {memory.available: lots}\n",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nauthorization: {mode: RBAC}\n",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDNS: [kube-dns]\n",
        ] {
            assert!(KubeletConfiguration::parse(bad, "t").is_err(), "{bad}");
        }
    }
}
