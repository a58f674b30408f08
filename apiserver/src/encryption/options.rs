//! The encryption-at-rest flags, with upstream's names (`EtcdOptions`).

#[derive(Debug, Clone, clap::Args)]
pub struct Options {}
