//! One endpoint (address and port) of a Service port, with what the proxier needs to
//! choose among endpoints: readiness, serving/terminating, locality and zone hints.

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::serviceport::ServicePortName;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseEndpointInfo {
    pub ip: IpAddr,
    pub port: u16,
    /// `ip:port` (`[ip]:port` for IPv6), the endpoint's identity and sort key.
    pub endpoint: String,
    /// On this node.
    pub is_local: bool,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// Zones the EndpointSlice controller hinted this endpoint for (PreferClose).
    pub zone_hints: BTreeSet<String>,
}

impl BaseEndpointInfo {
    pub fn new(ip: IpAddr, port: u16) -> Self {
        let endpoint = match ip {
            IpAddr::V4(a) => format!("{a}:{port}"),
            IpAddr::V6(a) => format!("[{a}]:{port}"),
        };
        Self {
            ip,
            port,
            endpoint,
            is_local: false,
            ready: true,
            serving: true,
            terminating: false,
            zone_hints: BTreeSet::new(),
        }
    }
}

/// A proxier's own view of an endpoint (the base plus precomputed chain names).
pub trait Endpoint: Send + Sync + 'static {
    fn new(base: BaseEndpointInfo, service: &ServicePortName) -> Self;
    fn base(&self) -> &BaseEndpointInfo;
}
