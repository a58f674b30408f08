//! IP prefixes (`10.0.0.0/8`, `fd00::/64`) as Services, flags and rules use them.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An address with a prefix length. The address keeps whatever host bits were written;
/// [`Cidr::network`] clears them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Cidr> {
        (prefix <= max_prefix(&addr)).then_some(Cidr { addr, prefix })
    }

    /// A single address (`/32` or `/128`).
    pub fn host(addr: IpAddr) -> Cidr {
        Cidr { addr, prefix: max_prefix(&addr) }
    }

    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }

    /// The prefix with its host bits cleared.
    pub fn network(&self) -> Cidr {
        let addr = match self.addr {
            IpAddr::V4(a) => {
                let mask = if self.prefix == 0 { 0 } else { u32::MAX << (32 - self.prefix) };
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) => {
                let mask = if self.prefix == 0 { 0 } else { u128::MAX << (128 - self.prefix) };
                IpAddr::V6((u128::from(a) & mask).into())
            }
        };
        Cidr { addr, prefix: self.prefix }
    }

    pub fn contains(&self, ip: &IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                Cidr { addr: *ip, prefix: self.prefix }.network() == self.network()
            }
            _ => false,
        }
    }

    /// Whether this prefix is the whole address space of its family.
    pub fn is_all(&self) -> bool {
        self.prefix == 0
    }
}

fn max_prefix(addr: &IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Cidr, String> {
        let s = s.trim();
        let (addr, prefix) = s.split_once('/').ok_or_else(|| format!("invalid CIDR address: {s}"))?;
        let addr: IpAddr = addr.parse().map_err(|_| format!("invalid CIDR address: {s}"))?;
        let prefix: u8 = prefix.parse().map_err(|_| format!("invalid CIDR address: {s}"))?;
        Cidr::new(addr, prefix).ok_or_else(|| format!("invalid CIDR address: {s}"))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_contains_network() {
        let c: Cidr = "10.180.3.7/16".parse().unwrap();
        assert_eq!(c.network().to_string(), "10.180.0.0/16");
        assert!(c.contains(&"10.180.255.1".parse().unwrap()));
        assert!(!c.contains(&"10.181.0.1".parse().unwrap()));
        assert!(!c.contains(&"::1".parse().unwrap()));
        let v6: Cidr = "fd00:10::/64".parse().unwrap();
        assert!(v6.contains(&"fd00:10::5".parse().unwrap()));
        assert!("0.0.0.0/0".parse::<Cidr>().unwrap().is_all());
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("10.0.0.0".parse::<Cidr>().is_err());
    }
}
