//! IP prefixes as they appear in Node `spec.podCIDRs` and `--cluster-cidr`: parsed strictly
//! (the address must be the network address, as the API server validates pod CIDRs).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An IPv4 or IPv6 network, `addr/len` with no host bits set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    pub addr: IpAddr,
    pub len: u8,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid CIDR {input:?}: {reason}")]
pub struct ParseError {
    input: String,
    reason: &'static str,
}

impl Cidr {
    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }

    /// Whether `ip` lies inside this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = if self.len == 0 { 0 } else { u32::MAX << (32 - u32::from(self.len)) };
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = if self.len == 0 { 0 } else { u128::MAX << (128 - u32::from(self.len)) };
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| ParseError { input: s.to_owned(), reason };
        let (addr, len) = s.trim().split_once('/').ok_or_else(|| err("no /prefix length"))?;
        let addr: IpAddr = addr.parse().map_err(|_| err("not an IP address"))?;
        let len: u8 = len.parse().map_err(|_| err("prefix length is not a number"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if len > max {
            return Err(err("prefix length too long for the address family"));
        }
        let cidr = Cidr { addr, len };
        let host_bits_clear = match addr {
            IpAddr::V4(a) => len == 32 || u32::from(a) & (u32::MAX >> len) == 0,
            IpAddr::V6(a) => len == 128 || u128::from(a) & (u128::MAX >> len) == 0,
        };
        if !host_bits_clear {
            return Err(err("host bits are set (not a network address)"));
        }
        Ok(cidr)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_networks_and_refuses_hosts() {
        let c: Cidr = "10.88.1.0/24".parse().unwrap();
        assert_eq!(c.to_string(), "10.88.1.0/24");
        assert!(c.contains("10.88.1.77".parse().unwrap()));
        assert!(!c.contains("10.88.2.1".parse().unwrap()));
        assert!(!c.contains("fd00::1".parse().unwrap()));
        let v6: Cidr = "fd00:10:88:1::/64".parse().unwrap();
        assert!(v6.contains("fd00:10:88:1::9".parse().unwrap()));
        assert!("10.88.1.1/24".parse::<Cidr>().is_err());
        assert!("10.88.1.0".parse::<Cidr>().is_err());
        assert!("10.88.1.0/33".parse::<Cidr>().is_err());
        assert!("x/8".parse::<Cidr>().is_err());
        assert!("0.0.0.0/0".parse::<Cidr>().unwrap().contains("1.2.3.4".parse().unwrap()));
    }
}
