//! Connection tracking: the stale-UDP-entry reconciler (a UDP "connection" whose endpoint
//! went away keeps being DNATed to it until the entry expires, which never happens while
//! the client keeps sending), over ctnetlink; and the conntrack sysctls kube-proxy sets
//! from its configuration.

pub mod cleanup;
pub mod netlink;
pub mod sysctl;

pub use cleanup::clean_stale_entries;
pub use netlink::{Conntrack, Flow, Tuple};
pub use sysctl::{ConntrackSettings, apply_settings};
