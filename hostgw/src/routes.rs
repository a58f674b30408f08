//! Host-gateway routes: for every other Node, its `spec.podCIDRs` via its InternalIP of the
//! same family. This needs the nodes on one L2 segment (the gateway must be on-link), as
//! flannel's host-gw backend does.
//!
//! The routes are written with a route protocol of our own ([`ROUTE_PROTOCOL`]), so the
//! agent can list exactly the routes it owns and delete the ones whose node went away,
//! without touching routes anyone else installed.

use std::collections::BTreeSet;
use std::net::IpAddr;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Node;
use netlink_packet_route::AddressFamily;
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol};
use rtnetlink::RouteMessageBuilder;

use crate::cidr::Cidr;

/// Unassigned in iproute2's `rt_protos`; `ip route show proto 77` lists what we own.
pub const ROUTE_PROTOCOL: u8 = 77;

/// One route to another node's pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Route {
    pub dst: Cidr,
    pub gateway: IpAddr,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("opening a route netlink socket: {0}")]
    Socket(#[source] std::io::Error),
    #[error("listing routes: {0}")]
    List(#[source] rtnetlink::Error),
    #[error("adding route {route:?}: {source}")]
    Add {
        route: Route,
        #[source]
        source: rtnetlink::Error,
    },
    #[error("deleting route {route:?}: {source}")]
    Delete {
        route: Route,
        #[source]
        source: rtnetlink::Error,
    },
}

/// The pod CIDRs of a node: `spec.podCIDRs`, or the older single `spec.podCIDR`.
pub fn pod_cidrs(node: &Node) -> Vec<Cidr> {
    let Some(spec) = node.spec.as_ref() else { return Vec::new() };
    let mut raw: Vec<&String> = spec.pod_cidrs.iter().flatten().collect();
    if raw.is_empty() {
        raw.extend(spec.pod_cidr.as_ref());
    }
    raw.into_iter()
        .filter_map(|s| match s.parse() {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(node = node.metadata.name.as_deref().unwrap_or(""), "ignoring pod CIDR: {e}");
                None
            }
        })
        .collect()
}

/// The node's InternalIP addresses.
fn internal_ips(node: &Node) -> impl Iterator<Item = IpAddr> + '_ {
    node.status
        .iter()
        .flat_map(|s| s.addresses.iter().flatten())
        .filter(|a| a.type_ == "InternalIP")
        .filter_map(|a| a.address.parse().ok())
}

/// The routes this host needs: every node but `own` (none, on a host that is not a node,
/// such as a router or a client namespace), each pod CIDR via the node's first InternalIP
/// of that family. A node without a pod CIDR or an address of the family gets no route.
pub fn desired(own: Option<&str>, nodes: &[impl AsRef<Node>]) -> BTreeSet<Route> {
    let mut out = BTreeSet::new();
    for node in nodes.iter().map(AsRef::as_ref) {
        if own.is_some() && node.metadata.name.as_deref() == own {
            continue;
        }
        for dst in pod_cidrs(node) {
            if let Some(gateway) = internal_ips(node).find(|ip| ip.is_ipv4() == dst.is_ipv4()) {
                out.insert(Route { dst, gateway });
            }
        }
    }
    out
}

/// The kernel's main routing table, through rtnetlink.
pub struct Netlink {
    handle: rtnetlink::Handle,
}

impl Netlink {
    /// Opens the socket; must be called inside a tokio runtime (the connection task is
    /// spawned on it).
    pub fn connect() -> Result<Self, Error> {
        let (conn, handle, _) = rtnetlink::new_connection().map_err(Error::Socket)?;
        tokio::spawn(conn);
        Ok(Netlink { handle })
    }

    /// Every route of the main table with our protocol, both families.
    pub async fn ours(&self) -> Result<BTreeSet<Route>, Error> {
        let mut out = BTreeSet::new();
        let queries = [
            RouteMessageBuilder::<std::net::Ipv4Addr>::new().build(),
            RouteMessageBuilder::<std::net::Ipv6Addr>::new().build(),
        ];
        for query in queries {
            let mut routes = self.handle.route().get(query).execute();
            while let Some(msg) = routes.try_next().await.map_err(Error::List)? {
                if msg.header.protocol != RouteProtocol::Other(ROUTE_PROTOCOL)
                    || msg.header.table != RouteHeader::RT_TABLE_MAIN
                {
                    continue;
                }
                if let Some(route) = parse(&msg) {
                    out.insert(route);
                }
            }
        }
        Ok(out)
    }

    /// Adds the route, replacing one to the same destination (a node's new address).
    pub async fn replace(&self, route: &Route) -> Result<(), Error> {
        self.handle
            .route()
            .add(message(route))
            .replace()
            .execute()
            .await
            .map_err(|source| Error::Add { route: *route, source })
    }

    pub async fn delete(&self, route: &Route) -> Result<(), Error> {
        self.handle
            .route()
            .del(message(route))
            .execute()
            .await
            .map_err(|source| Error::Delete { route: *route, source })
    }
}

fn message(route: &Route) -> RouteMessage {
    let builder = match (route.dst.addr, route.gateway) {
        (IpAddr::V4(dst), IpAddr::V4(gw)) => RouteMessageBuilder::<std::net::Ipv4Addr>::new()
            .destination_prefix(dst, route.dst.len)
            .gateway(gw)
            .build(),
        (IpAddr::V6(dst), IpAddr::V6(gw)) => RouteMessageBuilder::<std::net::Ipv6Addr>::new()
            .destination_prefix(dst, route.dst.len)
            .gateway(gw)
            .build(),
        // desired() pairs families; a mixed route cannot be built.
        _ => unreachable!("route {route:?} mixes address families"),
    };
    let mut msg = builder;
    msg.header.protocol = RouteProtocol::Other(ROUTE_PROTOCOL);
    msg
}

fn parse(msg: &RouteMessage) -> Option<Route> {
    let addr = |a: &RouteAddress| match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    };
    let mut dst = match msg.header.address_family {
        AddressFamily::Inet => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        AddressFamily::Inet6 => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        _ => return None,
    };
    let mut gateway = None;
    for attr in &msg.attributes {
        match attr {
            RouteAttribute::Destination(a) => dst = addr(a)?,
            RouteAttribute::Gateway(a) => gateway = addr(a),
            _ => {}
        }
    }
    Some(Route { dst: Cidr { addr: dst, len: msg.header.destination_prefix_length }, gateway: gateway? })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeSpec, NodeStatus};

    fn node(name: &str, cidrs: &[&str], ips: &[&str]) -> Node {
        Node {
            metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
            spec: Some(NodeSpec {
                pod_cidrs: Some(cidrs.iter().map(|s| s.to_string()).collect()),
                pod_cidr: cidrs.first().map(|s| s.to_string()),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                addresses: Some(
                    ips.iter()
                        .map(|ip| NodeAddress { type_: "InternalIP".into(), address: ip.to_string() })
                        .chain([NodeAddress { type_: "Hostname".into(), address: name.into() }])
                        .collect(),
                ),
                ..Default::default()
            }),
        }
    }

    struct N(Node);
    impl AsRef<Node> for N {
        fn as_ref(&self) -> &Node {
            &self.0
        }
    }

    #[test]
    fn routes_every_other_node_by_family() {
        let nodes = vec![
            N(node("a", &["10.88.0.0/24"], &["10.1.0.10"])),
            N(node("b", &["10.88.1.0/24", "fd00:1::/64"], &["10.1.0.11", "fd01::11"])),
            N(node("c", &["10.88.2.0/24"], &[])),
            N(node("d", &[], &["10.1.0.13"])),
        ];
        let got: Vec<String> =
            desired(Some("a"), &nodes).iter().map(|r| format!("{} via {}", r.dst, r.gateway)).collect();
        assert_eq!(got, ["10.88.1.0/24 via 10.1.0.11", "fd00:1::/64 via fd01::11"]);
        // A host that is no node routes to every node.
        assert_eq!(desired(None, &nodes).len(), 3);
    }

    #[test]
    fn message_round_trips() {
        let r = Route { dst: "10.88.3.0/24".parse().unwrap(), gateway: "10.1.0.12".parse().unwrap() };
        let m = message(&r);
        assert_eq!(m.header.protocol, RouteProtocol::Other(ROUTE_PROTOCOL));
        assert_eq!(parse(&m), Some(r));
    }
}
