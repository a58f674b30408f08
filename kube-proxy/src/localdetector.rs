//! How a proxier tells pod traffic from other traffic (upstream's `LocalTrafficDetector`,
//! `detectLocalMode`): by the cluster's pod CIDR, this node's pod CIDR, the pods' bridge,
//! or the pods' interface name prefix. Traffic that is not local gets masqueraded when it
//! goes to a cluster IP, and pod traffic short-circuits `Local` external policies.

use crate::cidr::Cidr;
use crate::nftables::{Dir, Stmt};

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LocalDetector {
    /// No way to tell (no cluster CIDR of this family): no such rules.
    #[default]
    None,
    /// Pods have addresses in this CIDR.
    Cidr(Cidr),
    /// Pod traffic arrives on this bridge.
    Bridge(String),
    /// Pod traffic arrives on interfaces whose names start with this.
    InterfacePrefix(String),
}

impl LocalDetector {
    pub fn is_implemented(&self) -> bool {
        !matches!(self, LocalDetector::None)
    }

    fn nft(&self, negate: bool) -> Vec<Stmt> {
        match self {
            LocalDetector::None => Vec::new(),
            LocalDetector::Cidr(c) => {
                let n = c.network();
                vec![Stmt::Addr { dir: Dir::Src, negate, addr: n.addr, prefix: n.prefix }]
            }
            LocalDetector::Bridge(name) => vec![Stmt::IifName { name: name.clone(), prefix: false, negate }],
            LocalDetector::InterfacePrefix(p) => {
                vec![Stmt::IifName { name: p.clone(), prefix: true, negate }]
            }
        }
    }

    /// nft matches for pod traffic.
    pub fn if_local_nft(&self) -> Vec<Stmt> {
        self.nft(false)
    }

    /// nft matches for traffic not from pods.
    pub fn if_not_local_nft(&self) -> Vec<Stmt> {
        self.nft(true)
    }

    fn ipt(&self, negate: bool) -> Vec<String> {
        let mut out = Vec::new();
        if negate && self.is_implemented() {
            out.push("!".to_owned());
        }
        match self {
            LocalDetector::None => {}
            LocalDetector::Cidr(c) => out.extend(["-s".to_owned(), c.network().to_string()]),
            LocalDetector::Bridge(name) => out.extend(["-i".to_owned(), name.clone()]),
            LocalDetector::InterfacePrefix(p) => out.extend(["-i".to_owned(), format!("{p}+")]),
        }
        out
    }

    /// iptables matches for pod traffic.
    pub fn if_local_ipt(&self) -> Vec<String> {
        self.ipt(false)
    }

    /// iptables matches for traffic not from pods.
    pub fn if_not_local_ipt(&self) -> Vec<String> {
        self.ipt(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nftables::Family;

    #[test]
    fn both_syntaxes() {
        let d = LocalDetector::Cidr("10.0.0.0/8".parse().unwrap());
        assert_eq!(d.if_not_local_ipt(), vec!["!", "-s", "10.0.0.0/8"]);
        assert_eq!(d.if_not_local_nft()[0].render(Family::Ip), "ip saddr != 10.0.0.0/8");
        let p = LocalDetector::InterfacePrefix("veth".into());
        assert_eq!(p.if_local_ipt(), vec!["-i", "veth+"]);
        assert_eq!(p.if_not_local_nft()[0].render(Family::Ip), "iifname != \"veth*\"");
        assert!(LocalDetector::None.if_not_local_ipt().is_empty());
    }
}
