//! The admission flags, with upstream's names (`AdmissionOptions`).

#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Admission plugins that should be enabled in addition to default enabled ones.
    #[arg(long, value_delimiter = ',')]
    pub enable_admission_plugins: Vec<String>,
    /// Admission plugins that should be disabled although they are in the default enabled plugins list.
    #[arg(long, value_delimiter = ',')]
    pub disable_admission_plugins: Vec<String>,
}
