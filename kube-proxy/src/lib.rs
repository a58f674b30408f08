//! kube-proxy: watches Services, EndpointSlices and its own Node through the API server
//! and programs this node's kernel so that Service IPs and NodePorts reach endpoints.
//!
//! # Layout
//!
//! - [`options`], [`apis`]: flags and `KubeProxyConfiguration`, merged and validated.
//! - [`server`]: putting it together; [`config`]: the watches feeding the proxiers.
//! - [`serviceport`], [`endpoint`], [`servicechangetracker`], [`endpointschangetracker`],
//!   [`topology`]: Services and endpoints as a proxier sees them, changes between syncs,
//!   and which endpoints this node uses.
//! - [`proxier`]: the sync loop around the [`proxier::nftables`] and
//!   [`proxier::iptables`] rule writers; [`bounded_frequency_runner`] paces it.
//! - [`nftables`]: our nf_tables client (netlink encoder, and a fake for tests);
//!   [`iptables`]: iptables-restore and friends; [`netlink`]: raw netlink framing.
//! - [`conntrack`], [`healthcheck`], [`metrics`], [`nodeport_addresses`],
//!   [`localdetector`], [`cidr`]: the rest of what upstream's kube-proxy does.

pub mod apis;
pub mod bounded_frequency_runner;
pub mod cidr;
pub mod config;
pub mod conntrack;
pub mod endpoint;
pub mod endpointschangetracker;
pub mod healthcheck;
pub mod iptables;
pub mod localdetector;
pub mod metrics;
pub mod netlink;
pub mod nftables;
pub mod nodeport_addresses;
pub mod options;
pub mod proxier;
pub mod server;
pub mod servicechangetracker;
pub mod serviceport;
pub mod topology;
