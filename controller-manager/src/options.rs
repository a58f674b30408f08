//! `kube-controller-manager`'s command line, with upstream's flag names and defaults.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use component_base::duration::parse as parse_duration;

use crate::controllers;

#[derive(Debug, Parser)]
#[command(
    name = "kube-controller-manager",
    about = "The Kubernetes controller manager: the control loops that reconcile the cluster's state."
)]
pub struct Flags {
    /// Path to kubeconfig file with authorization and master location information.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The address of the Kubernetes API server (overrides any value in kubeconfig).
    #[arg(long)]
    pub master: Option<String>,
    /// Controllers to enable: '*' enables all on-by-default controllers, 'foo' enables
    /// the controller named 'foo', '-foo' disables it.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,
    /// Start a leader election client and gain leadership before executing the main loop.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "true", action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub leader_elect_lease_duration: Duration,
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub leader_elect_renew_deadline: Duration,
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub leader_elect_retry_period: Duration,
    /// The type of resource object used for locking; only `leases`.
    #[arg(long, default_value = "leases")]
    pub leader_elect_resource_lock: String,
    #[arg(long, default_value = "kube-controller-manager")]
    pub leader_elect_resource_name: String,
    #[arg(long, default_value = "kube-system")]
    pub leader_elect_resource_namespace: String,
    /// The IP address on which to listen for the --secure-port port.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// The port on which to serve HTTPS (/healthz, /livez, /readyz, /metrics); 0 disables it.
    #[arg(long, default_value_t = 10257)]
    pub secure_port: u16,
    /// The directory where the self-signed serving certificate is written when
    /// --tls-cert-file is not given.
    #[arg(long, default_value = "/var/run/kubernetes")]
    pub cert_dir: PathBuf,
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,
    /// If true, use individual service account credentials for each controller.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub use_service_account_credentials: bool,
    /// QPS to use while talking with kubernetes apiserver.
    #[arg(long, default_value_t = 20.0)]
    pub kube_api_qps: f32,
    /// Burst to use while talking with kubernetes apiserver.
    #[arg(long, default_value_t = 30)]
    pub kube_api_burst: u32,
    #[arg(long, default_value_t = 5)]
    pub concurrent_deployment_syncs: usize,
    #[arg(long, default_value_t = 5)]
    pub concurrent_replicaset_syncs: usize,
    /// ReplicationController workers.
    #[arg(long, default_value_t = 5)]
    pub concurrent_rc_syncs: usize,
    /// Job controller workers.
    #[arg(long, default_value_t = 5)]
    pub concurrent_job_syncs: usize,
    /// CronJob controller workers.
    #[arg(long, default_value_t = 5)]
    pub concurrent_cron_job_syncs: usize,
    /// TTL-after-finished controller workers.
    #[arg(long, default_value_t = 5)]
    pub concurrent_ttl_after_finished_syncs: usize,
    /// Endpoints controller workers.
    #[arg(long, default_value_t = 5)]
    pub concurrent_endpoint_syncs: usize,
    /// EndpointSlice controller workers.
    #[arg(long, default_value_t = 5)]
    pub concurrent_service_endpoint_syncs: usize,
    #[arg(long, default_value_t = 20)]
    pub concurrent_gc_syncs: usize,
    #[arg(long, default_value_t = 10)]
    pub concurrent_namespace_syncs: usize,
    #[arg(long, default_value_t = 5)]
    pub concurrent_resource_quota_syncs: usize,
    /// DaemonSet controller workers.
    #[arg(long, default_value_t = 2)]
    pub concurrent_daemonset_syncs: usize,
    /// StatefulSet controller workers.
    #[arg(long, default_value_t = 5)]
    pub concurrent_statefulset_syncs: usize,
    /// Ephemeral volume controller workers.
    #[arg(long, default_value_t = 5)]
    pub concurrent_ephemeralvolume_syncs: usize,
    /// The period for syncing persistent volumes and persistent volume claims.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub pvclaimbinder_sync_period: Duration,
    /// Enables the generic garbage collector.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "true", action = clap::ArgAction::Set)]
    pub enable_garbage_collector: bool,
    /// The period for syncing NodeStatus in the node lifecycle controller.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub node_monitor_period: Duration,
    /// How long a running Node may be unresponsive before it is marked unhealthy.
    #[arg(long, default_value = "50s", value_parser = parse_duration)]
    pub node_monitor_grace_period: Duration,
    /// How long a starting Node may be unresponsive before it is marked unhealthy.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub node_startup_grace_period: Duration,
    /// Nodes per second to taint for eviction when their zone is healthy.
    #[arg(long, default_value_t = 0.1)]
    pub node_eviction_rate: f32,
    /// Nodes per second to taint for eviction when their zone is unhealthy.
    #[arg(long, default_value_t = 0.01)]
    pub secondary_node_eviction_rate: f32,
    /// Zones with at most this many nodes stop evicting (rather than slow down) when unhealthy.
    #[arg(long, default_value_t = 50)]
    pub large_cluster_size_threshold: u32,
    /// Fraction of NotReady nodes (at least 3) that makes a zone unhealthy.
    #[arg(long, default_value_t = 0.55)]
    pub unhealthy_zone_threshold: f32,
    /// Whether to allocate a pod CIDR to each Node from --cluster-cidr.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub allocate_node_cidrs: bool,
    /// CIDR range for pods in the cluster (one IPv4 and/or one IPv6, comma separated).
    #[arg(long)]
    pub cluster_cidr: Option<String>,
    /// Mask size for node CIDRs (24 for IPv4, 64 for IPv6 when unset).
    #[arg(long)]
    pub node_cidr_mask_size: Option<u8>,
    #[arg(long)]
    pub node_cidr_mask_size_ipv4: Option<u8>,
    #[arg(long)]
    pub node_cidr_mask_size_ipv6: Option<u8>,
    /// The service ClusterIP range, kept out of node CIDRs when it overlaps --cluster-cidr.
    #[arg(long)]
    pub service_cluster_ip_range: Option<String>,
    /// The root CA published to every namespace as the `kube-root-ca.crt` ConfigMap
    /// (the kubeconfig's CA when unset).
    #[arg(long)]
    pub root_ca_file: Option<PathBuf>,
    /// Terminated pods kept before the pod garbage collector deletes the oldest (0 = never).
    #[arg(long, default_value_t = 12500)]
    pub terminated_pod_gc_threshold: i64,
    /// The period for recomputing quota usage.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub resource_quota_sync_period: Duration,
    /// The period for re-syncing namespace life-cycle updates.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub namespace_sync_period: Duration,
    /// The period for syncing the number of pods in horizontal pod autoscalers.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub horizontal_pod_autoscaler_sync_period: Duration,
    /// The minimum change (from 1.0) in the desired-to-actual metrics ratio for the
    /// horizontal pod autoscaler to consider scaling.
    #[arg(long, default_value_t = 0.1)]
    pub horizontal_pod_autoscaler_tolerance: f64,
    /// How far back the autoscaler looks for a higher recommendation before scaling down.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub horizontal_pod_autoscaler_downscale_stabilization: Duration,
    /// The period after pod start when CPU samples might be skipped.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub horizontal_pod_autoscaler_cpu_initialization_period: Duration,
    /// The period after pod start during which readiness changes count as initial readiness.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub horizontal_pod_autoscaler_initial_readiness_delay: Duration,
    /// Horizontal pod autoscaler workers.
    #[arg(long, default_value_t = 5)]
    pub concurrent_horizontal_pod_autoscaler_syncs: usize,
    /// PEM CA certificate the CSR signers issue certificates with (every
    /// `kubernetes.io/*` signer without a pair of its own below).
    #[arg(long)]
    pub cluster_signing_cert_file: Option<PathBuf>,
    /// PEM private key of --cluster-signing-cert-file.
    #[arg(long)]
    pub cluster_signing_key_file: Option<PathBuf>,
    /// The longest lifetime of an issued certificate (a request's expirationSeconds may
    /// ask for less).
    #[arg(long, default_value = "8760h", value_parser = parse_duration)]
    pub cluster_signing_duration: Duration,
    /// CA certificate and key for the kubernetes.io/kubelet-serving signer.
    #[arg(long)]
    pub cluster_signing_kubelet_serving_cert_file: Option<PathBuf>,
    #[arg(long)]
    pub cluster_signing_kubelet_serving_key_file: Option<PathBuf>,
    /// CA certificate and key for the kubernetes.io/kube-apiserver-client-kubelet signer.
    #[arg(long)]
    pub cluster_signing_kubelet_client_cert_file: Option<PathBuf>,
    #[arg(long)]
    pub cluster_signing_kubelet_client_key_file: Option<PathBuf>,
    /// CA certificate and key for the kubernetes.io/kube-apiserver-client signer.
    #[arg(long)]
    pub cluster_signing_kube_apiserver_client_cert_file: Option<PathBuf>,
    #[arg(long)]
    pub cluster_signing_kube_apiserver_client_key_file: Option<PathBuf>,
    /// CA certificate and key for the kubernetes.io/legacy-unknown signer.
    #[arg(long)]
    pub cluster_signing_legacy_unknown_cert_file: Option<PathBuf>,
    #[arg(long)]
    pub cluster_signing_legacy_unknown_key_file: Option<PathBuf>,
    /// Log verbosity.
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub verbosity: u8,
}

/// Why the flags cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

/// The validated flags.
#[derive(Debug, Clone)]
pub struct Options {
    pub kubeconfig: Option<PathBuf>,
    pub master: Option<String>,
    /// The canonical names of the controllers to run.
    pub controllers: Vec<&'static str>,
    pub leader_elect: bool,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    pub lease_name: String,
    pub lease_namespace: String,
    pub bind_address: IpAddr,
    pub secure_port: u16,
    pub cert_dir: PathBuf,
    pub tls: Option<(PathBuf, PathBuf)>,
    pub use_service_account_credentials: bool,
    pub kube_api_qps: f32,
    pub kube_api_burst: u32,
    pub concurrent_deployment_syncs: usize,
    pub concurrent_replicaset_syncs: usize,
    pub concurrent_rc_syncs: usize,
    pub concurrent_job_syncs: usize,
    pub concurrent_cron_job_syncs: usize,
    pub concurrent_ttl_after_finished_syncs: usize,
    pub concurrent_endpoint_syncs: usize,
    pub concurrent_service_endpoint_syncs: usize,
    pub concurrent_gc_syncs: usize,
    pub concurrent_namespace_syncs: usize,
    pub concurrent_resource_quota_syncs: usize,
    pub concurrent_daemonset_syncs: usize,
    pub concurrent_statefulset_syncs: usize,
    pub concurrent_ephemeralvolume_syncs: usize,
    pub pvclaimbinder_sync_period: Duration,
    pub node_monitor_period: Duration,
    pub node_monitor_grace_period: Duration,
    pub node_startup_grace_period: Duration,
    pub node_eviction_rate: f32,
    pub secondary_node_eviction_rate: f32,
    pub large_cluster_size_threshold: u32,
    pub unhealthy_zone_threshold: f32,
    pub allocate_node_cidrs: bool,
    pub cluster_cidr: Option<String>,
    pub node_cidr_mask_size_ipv4: u8,
    pub node_cidr_mask_size_ipv6: u8,
    pub service_cluster_ip_range: Option<String>,
    pub root_ca_file: Option<PathBuf>,
    pub terminated_pod_gc_threshold: i64,
    pub resource_quota_sync_period: Duration,
    pub namespace_sync_period: Duration,
    pub horizontal_pod_autoscaler_sync_period: Duration,
    pub horizontal_pod_autoscaler_tolerance: f64,
    pub horizontal_pod_autoscaler_downscale_stabilization: Duration,
    pub horizontal_pod_autoscaler_cpu_initialization_period: Duration,
    pub horizontal_pod_autoscaler_initial_readiness_delay: Duration,
    pub concurrent_horizontal_pod_autoscaler_syncs: usize,
    /// The CSR signers that have a CA: signer name, CA certificate, CA key.
    pub csr_signers: Vec<(&'static str, PathBuf, PathBuf)>,
    pub cluster_signing_duration: Duration,
}

impl Flags {
    /// Each `kubernetes.io/*` signer's CA files, as upstream: a signer's own pair, else the
    /// general --cluster-signing-cert-file/-key-file; the general pair and the per-signer
    /// ones may not be mixed.
    fn csr_signers(&self) -> Result<Vec<(&'static str, PathBuf, PathBuf)>, Invalid> {
        use crate::controllers::certificates::signer;
        let pair = |flag: &str, c: &Option<PathBuf>, k: &Option<PathBuf>| match (c, k) {
            (Some(c), Some(k)) => Ok(Some((c.clone(), k.clone()))),
            (None, None) => Ok(None),
            _ => Err(Invalid(format!(
                "--cluster-signing-{flag}cert-file and --cluster-signing-{flag}key-file go together"
            ))),
        };
        let general = pair("", &self.cluster_signing_cert_file, &self.cluster_signing_key_file)?;
        let own = [
            (
                signer::KUBELET_SERVING,
                pair(
                    "kubelet-serving-",
                    &self.cluster_signing_kubelet_serving_cert_file,
                    &self.cluster_signing_kubelet_serving_key_file,
                )?,
            ),
            (
                signer::KUBE_APISERVER_CLIENT_KUBELET,
                pair(
                    "kubelet-client-",
                    &self.cluster_signing_kubelet_client_cert_file,
                    &self.cluster_signing_kubelet_client_key_file,
                )?,
            ),
            (
                signer::KUBE_APISERVER_CLIENT,
                pair(
                    "kube-apiserver-client-",
                    &self.cluster_signing_kube_apiserver_client_cert_file,
                    &self.cluster_signing_kube_apiserver_client_key_file,
                )?,
            ),
            (
                signer::LEGACY_UNKNOWN,
                pair(
                    "legacy-unknown-",
                    &self.cluster_signing_legacy_unknown_cert_file,
                    &self.cluster_signing_legacy_unknown_key_file,
                )?,
            ),
        ];
        if general.is_some() && own.iter().any(|(_, p)| p.is_some()) {
            return Err(Invalid(
                "cannot specify --cluster-signing-{cert,key}-file and other --cluster-signing-*-file flags at the same time".into(),
            ));
        }
        Ok(own
            .into_iter()
            .filter_map(|(name, p)| p.or_else(|| general.clone()).map(|(c, k)| (name, c, k)))
            .collect())
    }

    pub fn into_options(self) -> Result<Options, Invalid> {
        if self.leader_elect_resource_lock != "leases" {
            return Err(Invalid(format!(
                "--leader-elect-resource-lock: only \"leases\" is supported, not {:?}",
                self.leader_elect_resource_lock
            )));
        }
        let csr_signers = self.csr_signers()?;
        let tls = match (self.tls_cert_file, self.tls_private_key_file) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => return Err(Invalid("--tls-cert-file and --tls-private-key-file go together".into())),
        };
        let mut enabled = controllers::select(&self.controllers).map_err(Invalid)?;
        if !self.enable_garbage_collector {
            enabled.retain(|c| *c != controllers::GARBAGE_COLLECTOR);
        }
        if self.allocate_node_cidrs && self.cluster_cidr.is_none() {
            return Err(Invalid("--allocate-node-cidrs requires --cluster-cidr".into()));
        }
        if self.kube_api_qps <= 0.0 || self.kube_api_burst == 0 {
            return Err(Invalid("--kube-api-qps and --kube-api-burst must be positive".into()));
        }
        if self.horizontal_pod_autoscaler_sync_period.is_zero() {
            return Err(Invalid("--horizontal-pod-autoscaler-sync-period must be positive".into()));
        }
        if self.horizontal_pod_autoscaler_tolerance.is_nan() || self.horizontal_pod_autoscaler_tolerance < 0.0
        {
            return Err(Invalid("--horizontal-pod-autoscaler-tolerance must not be negative".into()));
        }
        if !(0.0..=1.0).contains(&self.unhealthy_zone_threshold) {
            return Err(Invalid("--unhealthy-zone-threshold must be between 0 and 1".into()));
        }
        Ok(Options {
            kubeconfig: self.kubeconfig,
            master: self.master,
            controllers: enabled,
            leader_elect: self.leader_elect,
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
            lease_name: self.leader_elect_resource_name,
            lease_namespace: self.leader_elect_resource_namespace,
            bind_address: self.bind_address,
            secure_port: self.secure_port,
            cert_dir: self.cert_dir,
            tls,
            use_service_account_credentials: self.use_service_account_credentials,
            kube_api_qps: self.kube_api_qps,
            kube_api_burst: self.kube_api_burst,
            concurrent_deployment_syncs: self.concurrent_deployment_syncs,
            concurrent_replicaset_syncs: self.concurrent_replicaset_syncs,
            concurrent_rc_syncs: self.concurrent_rc_syncs,
            concurrent_job_syncs: self.concurrent_job_syncs,
            concurrent_cron_job_syncs: self.concurrent_cron_job_syncs,
            concurrent_ttl_after_finished_syncs: self.concurrent_ttl_after_finished_syncs,
            concurrent_endpoint_syncs: self.concurrent_endpoint_syncs,
            concurrent_service_endpoint_syncs: self.concurrent_service_endpoint_syncs,
            concurrent_gc_syncs: self.concurrent_gc_syncs,
            concurrent_namespace_syncs: self.concurrent_namespace_syncs,
            concurrent_resource_quota_syncs: self.concurrent_resource_quota_syncs,
            concurrent_daemonset_syncs: self.concurrent_daemonset_syncs.max(1),
            concurrent_statefulset_syncs: self.concurrent_statefulset_syncs.max(1),
            concurrent_ephemeralvolume_syncs: self.concurrent_ephemeralvolume_syncs.max(1),
            pvclaimbinder_sync_period: self.pvclaimbinder_sync_period,
            node_monitor_period: self.node_monitor_period,
            node_monitor_grace_period: self.node_monitor_grace_period,
            node_startup_grace_period: self.node_startup_grace_period,
            node_eviction_rate: self.node_eviction_rate,
            secondary_node_eviction_rate: self.secondary_node_eviction_rate,
            large_cluster_size_threshold: self.large_cluster_size_threshold,
            unhealthy_zone_threshold: self.unhealthy_zone_threshold,
            allocate_node_cidrs: self.allocate_node_cidrs,
            cluster_cidr: self.cluster_cidr,
            node_cidr_mask_size_ipv4: self
                .node_cidr_mask_size_ipv4
                .or(self.node_cidr_mask_size)
                .unwrap_or(24),
            node_cidr_mask_size_ipv6: self
                .node_cidr_mask_size_ipv6
                .or(self.node_cidr_mask_size)
                .unwrap_or(64),
            service_cluster_ip_range: self.service_cluster_ip_range,
            root_ca_file: self.root_ca_file,
            terminated_pod_gc_threshold: self.terminated_pod_gc_threshold,
            resource_quota_sync_period: self.resource_quota_sync_period,
            namespace_sync_period: self.namespace_sync_period,
            horizontal_pod_autoscaler_sync_period: self.horizontal_pod_autoscaler_sync_period,
            horizontal_pod_autoscaler_tolerance: self.horizontal_pod_autoscaler_tolerance,
            horizontal_pod_autoscaler_downscale_stabilization: self
                .horizontal_pod_autoscaler_downscale_stabilization,
            horizontal_pod_autoscaler_cpu_initialization_period: self
                .horizontal_pod_autoscaler_cpu_initialization_period,
            horizontal_pod_autoscaler_initial_readiness_delay: self
                .horizontal_pod_autoscaler_initial_readiness_delay,
            concurrent_horizontal_pod_autoscaler_syncs: self
                .concurrent_horizontal_pod_autoscaler_syncs
                .max(1),
            csr_signers,
            cluster_signing_duration: self.cluster_signing_duration,
        })
    }
}
