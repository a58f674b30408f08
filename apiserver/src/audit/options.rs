//! The audit flags, with upstream's names and defaults (`AuditOptions`).

#[derive(Debug, Clone, clap::Args)]
pub struct Options {}
