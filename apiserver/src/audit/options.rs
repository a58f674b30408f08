//! The audit flags, with upstream's names and defaults (`AuditOptions`, log backend).
//! The webhook backend, truncation and batch tuning beyond the buffer size are not
//! implemented, so their flags are not declared.

use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Path to the file that defines the audit policy configuration.
    #[arg(long)]
    pub audit_policy_file: Option<PathBuf>,
    /// If set, all requests coming to the apiserver will be logged to this file. '-' means
    /// standard out.
    #[arg(long)]
    pub audit_log_path: Option<String>,
    /// The maximum number of days to retain old audit log files based on the timestamp
    /// encoded in their filename.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub audit_log_maxage: i64,
    /// The maximum number of old audit log files to retain. Setting a value of 0 will mean
    /// there's no restriction on the number of files.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub audit_log_maxbackup: i64,
    /// The maximum size in megabytes of the audit log file before it gets rotated.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub audit_log_maxsize: i64,
    /// Format of saved audits. "legacy" indicates 1-line text format for each event. "json"
    /// indicates structured json format. Known formats are legacy,json.
    #[arg(long, default_value = "json")]
    pub audit_log_format: String,
    /// Strategy for sending audit events. Blocking indicates sending events should block
    /// server responses. Batch causes the backend to buffer and write events
    /// asynchronously. Known modes are batch,blocking,blocking-strict.
    #[arg(long, default_value = "blocking")]
    pub audit_log_mode: String,
    /// The size of the buffer to store events before batching and writing. Only used in
    /// batch mode.
    #[arg(long, default_value_t = 10000, allow_negative_numbers = true)]
    pub audit_log_batch_buffer_size: i64,
    /// If set, the rotated log files will be compressed using gzip.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub audit_log_compress: bool,
    /// API group and version used for serializing audit events written to log.
    #[arg(long, default_value = "audit.k8s.io/v1")]
    pub audit_log_version: String,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            audit_policy_file: None,
            audit_log_path: None,
            audit_log_maxage: 0,
            audit_log_maxbackup: 0,
            audit_log_maxsize: 0,
            audit_log_format: "json".into(),
            audit_log_mode: "blocking".into(),
            audit_log_batch_buffer_size: 10000,
            audit_log_compress: false,
            audit_log_version: "audit.k8s.io/v1".into(),
        }
    }
}

impl Options {
    /// Upstream's `AuditLogOptions.Validate`: only checked when the log backend is on.
    pub fn validate(&self) -> Vec<String> {
        if self.audit_log_path.as_deref().is_none_or(str::is_empty) {
            return Vec::new();
        }
        let mut errs = Vec::new();
        if super::log::Mode::parse(&self.audit_log_mode).is_none() {
            errs.push(format!(
                "invalid audit log mode {}, allowed modes are {:?}",
                self.audit_log_mode,
                super::log::Mode::ALLOWED
            ));
        }
        if self.audit_log_mode == "batch" && self.audit_log_batch_buffer_size <= 0 {
            errs.push(format!(
                "invalid audit batch log buffer size {}, must be a positive number",
                self.audit_log_batch_buffer_size
            ));
        }
        if self.audit_log_version != "audit.k8s.io/v1" {
            errs.push(format!("invalid group version, allowed versions are {:?}", "[audit.k8s.io/v1]"));
        }
        if super::log::Format::parse(&self.audit_log_format).is_none() {
            errs.push(format!(
                "invalid audit log format {}, allowed formats are {:?}",
                self.audit_log_format,
                super::log::Format::ALLOWED
            ));
        }
        for (flag, v) in [
            ("--audit-log-maxage", self.audit_log_maxage),
            ("--audit-log-maxbackup", self.audit_log_maxbackup),
            ("--audit-log-maxsize", self.audit_log_maxsize),
        ] {
            if v < 0 {
                errs.push(format!("{flag} {v} can't be a negative number"));
            }
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        o: Options,
    }

    #[test]
    fn defaults_and_validation() {
        let c = Cmd::try_parse_from(["x"]).unwrap();
        assert_eq!(c.o.audit_log_mode, "blocking");
        assert_eq!(c.o.audit_log_format, "json");
        assert_eq!(c.o.audit_log_batch_buffer_size, 10000);
        assert!(c.o.validate().is_empty());
        let c = Cmd::try_parse_from([
            "x",
            "--audit-log-path=/tmp/a.log",
            "--audit-log-mode=async",
            "--audit-log-format=yaml",
            "--audit-log-maxage=-1",
            "--audit-log-compress",
        ])
        .unwrap();
        assert!(c.o.audit_log_compress);
        let errs = c.o.validate();
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(
            errs[0].contains(
                "invalid audit log mode async, allowed modes are \"batch,blocking,blocking-strict\""
            )
        );
        assert!(errs[2].contains("--audit-log-maxage -1 can't be a negative number"));
    }
}
