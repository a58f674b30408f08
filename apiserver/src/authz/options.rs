//! The authorization flags, with upstream's names and defaults
//! (`BuiltInAuthorizationOptions`).

#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Ordered list of plug-ins to do authorization on secure port.
    #[arg(long, default_value = "AlwaysAllow", value_delimiter = ',')]
    pub authorization_mode: Vec<String>,
}
