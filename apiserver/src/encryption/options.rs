//! The encryption-at-rest flags, with upstream's names (`EtcdOptions`).

use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// The file containing configuration for encryption providers to be used for storing
    /// secrets in etcd.
    #[arg(long)]
    pub encryption_provider_config: Option<PathBuf>,
    /// Determines if the file set by --encryption-provider-config should be automatically
    /// reloaded if the disk contents change. Setting this to true disables the ability to
    /// uniquely identify distinct KMS plugins via the API server healthz endpoints.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub encryption_provider_config_automatic_reload: bool,
}
