//! The admission flags, with upstream's names (`AdmissionOptions`, plus the legacy flags of
//! the DefaultTolerationSeconds plugin that upstream registers beside them).

use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Admission plugins that should be enabled in addition to default enabled ones. The order of plugins in this flag does not matter.
    #[arg(long, value_delimiter = ',')]
    pub enable_admission_plugins: Vec<String>,
    /// Admission plugins that should be disabled although they are in the default enabled plugins list. The order of plugins in this flag does not matter.
    #[arg(long, value_delimiter = ',')]
    pub disable_admission_plugins: Vec<String>,
    /// File with admission control configuration.
    #[arg(long)]
    pub admission_control_config_file: Option<PathBuf>,
    /// Indicates the tolerationSeconds of the toleration for notReady:NoExecute that is added by default to every pod that does not already have such a toleration.
    #[arg(long, default_value_t = 300)]
    pub default_not_ready_toleration_seconds: i64,
    /// Indicates the tolerationSeconds of the toleration for unreachable:NoExecute that is added by default to every pod that does not already have such a toleration.
    #[arg(long, default_value_t = 300)]
    pub default_unreachable_toleration_seconds: i64,
}

impl Default for Options {
    /// The flags' defaults (for in-process servers and tests).
    fn default() -> Self {
        Self {
            enable_admission_plugins: Vec::new(),
            disable_admission_plugins: Vec::new(),
            admission_control_config_file: None,
            default_not_ready_toleration_seconds: 300,
            default_unreachable_toleration_seconds: 300,
        }
    }
}
