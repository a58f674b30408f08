//! Encryption at rest: values of the configured resources are transformed before they
//! reach etcd and back after they are read (upstream's `storage/value`).
//!
//! - [`options`]: `--encryption-provider-config`.

pub mod options;
