//! Where NodePorts are served (upstream's `NodePortAddresses`): the node's interface
//! addresses, read over rtnetlink, that fall in `--nodeport-addresses` (CIDRs, or
//! `primary` for the Node's own IP). No CIDR of a family means every address of it.

use std::net::IpAddr;

use futures::TryStreamExt;
use netlink_packet_route::address::AddressAttribute;

use crate::cidr::Cidr;
use crate::nftables::Family;

/// The `--nodeport-addresses` keyword for the Node's primary IP(s).
pub const PRIMARY: &str = "primary";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePortAddresses {
    family: Family,
    cidrs: Vec<Cidr>,
    match_all: bool,
}

impl NodePortAddresses {
    /// From the (already validated) flag values; `node_ip` is what `primary` stands for
    /// in this family.
    pub fn new(family: Family, values: &[String], node_ip: Option<IpAddr>) -> NodePortAddresses {
        let mut cidrs = Vec::new();
        for v in values {
            if v == PRIMARY {
                if let Some(ip) = node_ip.filter(|ip| Family::of(ip) == family) {
                    cidrs.push(Cidr::host(ip));
                }
                continue;
            }
            if let Ok(c) = v.parse::<Cidr>()
                && Family::of(&c.addr) == family
            {
                cidrs.push(c.network());
            }
        }
        let match_all = cidrs.is_empty() || cidrs.iter().any(Cidr::is_all);
        NodePortAddresses { family, cidrs, match_all }
    }

    /// Whether NodePorts are open on every address of the family.
    pub fn match_all(&self) -> bool {
        self.match_all
    }

    /// Whether 127.0.0.0/8 addresses are among them (iptables' localhost NodePorts).
    pub fn contains_ipv4_loopback(&self) -> bool {
        self.family == Family::Ip
            && (self.match_all || self.cidrs.iter().any(|c| c.contains(&"127.0.0.1".parse().expect("an IP"))))
    }

    /// The CIDRs as given (for logs).
    pub fn cidrs(&self) -> &[Cidr] {
        &self.cidrs
    }

    /// This family's interface addresses that NodePorts are served on.
    pub fn node_ips(&self, addrs: &[IpAddr]) -> Vec<IpAddr> {
        let mut out: Vec<IpAddr> = addrs
            .iter()
            .filter(|ip| Family::of(ip) == self.family)
            .filter(|ip| self.match_all || self.cidrs.iter().any(|c| c.contains(ip)))
            .copied()
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// Every address configured on the node's interfaces, through rtnetlink.
pub async fn interface_addrs() -> std::io::Result<Vec<IpAddr>> {
    let (conn, handle, _) = rtnetlink::new_connection()?;
    let task = tokio::spawn(conn);
    let result: Result<Vec<IpAddr>, rtnetlink::Error> = async {
        let mut stream = handle.address().get().execute();
        let mut out = Vec::new();
        while let Some(msg) = stream.try_next().await? {
            // IFA_LOCAL is the interface's own address on point-to-point links, where
            // IFA_ADDRESS is the peer's; prefer it when present.
            let mut local = None;
            let mut address = None;
            for attr in &msg.attributes {
                match attr {
                    AddressAttribute::Local(ip) => local = Some(*ip),
                    AddressAttribute::Address(ip) => address = Some(*ip),
                    _ => {}
                }
            }
            if let Some(ip) = local.or(address) {
                out.push(ip);
            }
        }
        Ok(out)
    }
    .await;
    task.abort();
    result.map_err(|e| std::io::Error::other(format!("listing interface addresses over rtnetlink: {e}")))
}

/// [`interface_addrs`] from a thread outside the runtime (the sync loop's).
pub fn interface_addrs_blocking(rt: &tokio::runtime::Handle) -> std::io::Result<Vec<IpAddr>> {
    rt.block_on(interface_addrs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primary_and_cidrs_per_family() {
        let node_ip: IpAddr = "192.168.1.5".parse().unwrap();
        let addrs: Vec<IpAddr> =
            ["127.0.0.1", "192.168.1.5", "10.1.2.3", "fd00::5"].iter().map(|s| s.parse().unwrap()).collect();
        let p = NodePortAddresses::new(Family::Ip, &[PRIMARY.into()], Some(node_ip));
        assert!(!p.match_all());
        assert_eq!(p.node_ips(&addrs), vec![node_ip]);
        let all = NodePortAddresses::new(Family::Ip, &[], Some(node_ip));
        assert!(all.match_all() && all.contains_ipv4_loopback());
        assert_eq!(all.node_ips(&addrs).len(), 3);
        // Only IPv6 CIDRs given: the IPv4 side matches everything, as upstream.
        let v6 = NodePortAddresses::new(Family::Ip, &["fd00::/64".into()], None);
        assert!(v6.match_all());
        let ten = NodePortAddresses::new(Family::Ip, &["10.0.0.0/8".into()], None);
        assert_eq!(ten.node_ips(&addrs), vec!["10.1.2.3".parse::<IpAddr>().unwrap()]);
    }

    #[tokio::test]
    async fn reads_loopback_over_rtnetlink() {
        let addrs = interface_addrs().await.unwrap();
        assert!(addrs.iter().any(|ip| ip.is_loopback()), "{addrs:?}");
    }
}
