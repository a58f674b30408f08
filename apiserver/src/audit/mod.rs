//! Audit: one `audit.k8s.io/v1` Event per request stage the policy selects.
//!
//! - [`options`]: the `--audit-*` flags.

pub mod options;
