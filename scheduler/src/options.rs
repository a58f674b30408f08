//! `kube-scheduler`'s command line, with upstream's flag names. Flags given explicitly
//! override the `--config` file, as upstream's deprecated-but-honoured flags do.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::Parser;

use crate::config::{Config, Error, parse_duration};

#[derive(Debug, Parser)]
#[command(name = "kube-scheduler", about = "The Kubernetes scheduler: assigns pods to nodes.")]
pub struct Flags {
    /// The path to the KubeSchedulerConfiguration file.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Path to kubeconfig file with authorization and master location information.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The address of the Kubernetes API server (overrides any value in kubeconfig).
    #[arg(long)]
    pub master: Option<String>,
    /// Start a leader election client and gain leadership before executing the main loop.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub leader_elect: Option<bool>,
    /// How long non-leader candidates wait after observing a renewal before taking over.
    #[arg(long)]
    pub leader_elect_lease_duration: Option<String>,
    /// How long the leader keeps retrying to renew before it stops leading.
    #[arg(long)]
    pub leader_elect_renew_deadline: Option<String>,
    /// The interval between attempts to acquire or renew leadership.
    #[arg(long)]
    pub leader_elect_retry_period: Option<String>,
    /// The type of resource object used for locking; only `leases`.
    #[arg(long)]
    pub leader_elect_resource_lock: Option<String>,
    /// The name of the Lease used for leader election.
    #[arg(long)]
    pub leader_elect_resource_name: Option<String>,
    /// The namespace of the Lease used for leader election.
    #[arg(long)]
    pub leader_elect_resource_namespace: Option<String>,
    /// The IP address on which to listen for the --secure-port port.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// The port on which to serve HTTPS (/healthz, /livez, /readyz, /metrics); 0 disables it.
    #[arg(long, default_value_t = 10259)]
    pub secure_port: u16,
    /// The directory where the self-signed serving certificate is written when
    /// --tls-cert-file is not given.
    #[arg(long, default_value = "/var/run/kubernetes")]
    pub cert_dir: PathBuf,
    /// File containing the default x509 serving certificate (with intermediates).
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// File containing the x509 private key matching --tls-cert-file.
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,
    /// Log verbosity.
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub verbosity: u8,
}

/// Everything `run` needs.
#[derive(Debug, Clone)]
pub struct Options {
    pub config: Config,
    pub master: Option<String>,
    pub bind_address: IpAddr,
    pub secure_port: u16,
    pub cert_dir: PathBuf,
    pub tls: Option<(PathBuf, PathBuf)>,
}

impl Flags {
    pub fn into_options(self) -> Result<Options, Error> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        if self.kubeconfig.is_some() {
            config.kubeconfig = self.kubeconfig.clone();
        }
        let le = &mut config.leader_election;
        if let Some(v) = self.leader_elect {
            le.leader_elect = v;
        }
        for (flag, value, into) in [
            ("--leader-elect-lease-duration", &self.leader_elect_lease_duration, &mut le.lease_duration),
            ("--leader-elect-renew-deadline", &self.leader_elect_renew_deadline, &mut le.renew_deadline),
            ("--leader-elect-retry-period", &self.leader_elect_retry_period, &mut le.retry_period),
        ] {
            if let Some(v) = value {
                *into = parse_duration(v).map_err(|e| Error::Invalid(format!("{flag}: {e}")))?;
            }
        }
        if let Some(lock) = self.leader_elect_resource_lock.as_deref().filter(|l| *l != "leases") {
            return Err(Error::Invalid(format!(
                "--leader-elect-resource-lock: only \"leases\" is supported, not {lock:?}"
            )));
        }
        if let Some(n) = self.leader_elect_resource_name {
            le.resource_name = n;
        }
        if let Some(n) = self.leader_elect_resource_namespace {
            le.resource_namespace = n;
        }
        let tls = match (self.tls_cert_file, self.tls_private_key_file) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => return Err(Error::Invalid("--tls-cert-file and --tls-private-key-file go together".into())),
        };
        Ok(Options {
            config,
            master: self.master,
            bind_address: self.bind_address,
            secure_port: self.secure_port,
            cert_dir: self.cert_dir,
            tls,
        })
    }
}
