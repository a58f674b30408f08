//! The authentication flags, with upstream's names and defaults
//! (`BuiltInAuthenticationOptions`).

use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// If set, the file that will be used to secure the secure port of the API server via token authentication.
    #[arg(long)]
    pub token_auth_file: Option<PathBuf>,
    /// Enables anonymous requests to the secure port of the API server.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "true", action = clap::ArgAction::Set)]
    pub anonymous_auth: bool,
}
