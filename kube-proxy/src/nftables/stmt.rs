//! The rule statements kube-proxy writes, each with its `nft` spelling (for dumps, logs
//! and the fake) and its nf_tables expressions (for the kernel), encoded the way `nft`
//! itself encodes them so that `nft list` prints them back in the same words.

use std::net::IpAddr;

use super::netlink::{CmpOp, Expr, Reg};
use super::{Family, Protocol, Verdict};

/// Which address of the packet a statement looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    Src,
    Dst,
}

impl Dir {
    fn name(self) -> &'static str {
        match self {
            Dir::Src => "saddr",
            Dir::Dst => "daddr",
        }
    }
}

/// One statement (a match or an action) of a rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Stmt {
    /// `ct state new`
    CtStateNew,
    /// `ip daddr 10.0.0.1`, `ip saddr != 10.0.0.0/8`: an address or a prefix.
    Addr {
        dir: Dir,
        negate: bool,
        addr: IpAddr,
        prefix: u8,
    },
    /// `ip daddr @set`
    AddrInSet {
        dir: Dir,
        set: String,
    },
    /// `meta l4proto tcp`
    L4Proto(Protocol),
    /// `tcp dport 80`
    Dport(Protocol, u16),
    /// `fib saddr type local`: the address is one of this host's.
    FibLocal(Dir),
    /// `iifname "cbr0"`, or with `prefix`, `iifname "veth*"`; `iifname != ...` negated.
    IifName {
        name: String,
        prefix: bool,
        negate: bool,
    },
    /// `mark and 0x4000 == 0`
    MarkUnset(u32),
    /// `ip daddr . meta l4proto . th dport vmap @map`
    DaddrProtoPortVmap(String),
    /// `meta l4proto . th dport vmap @map`
    ProtoPortVmap(String),
    /// `numgen random mod N 0`: true with probability 1/N. A Service chain picks among
    /// N endpoints with rules `numgen random mod N-i 0 goto endpoint_i` (as iptables mode's
    /// `statistic` matches), not with upstream's `numgen ... vmap { ... }`: each such
    /// anonymous map costs a walk of the whole kernel transaction when it is bound.
    NumgenPick(u32),
    /// `mark set mark or 0x4000`
    MarkSetOr(u32),
    /// `mark set mark xor 0x4000`
    MarkSetXor(u32),
    /// `masquerade fully-random`
    Masquerade,
    /// `dnat to 10.0.0.1:80`
    Dnat(IpAddr, u16),
    /// `update @set { ip saddr }`: refreshes (or adds) the source address in a timeout set.
    UpdateSaddr(String),
    /// `reject` (ICMP port unreachable).
    Reject,
    Verdict(Verdict),
}

impl Stmt {
    /// `ip daddr <addr>`
    pub fn daddr(addr: IpAddr) -> Stmt {
        Stmt::Addr { dir: Dir::Dst, negate: false, addr, prefix: full_prefix(&addr) }
    }

    /// `ip saddr <addr>`
    pub fn saddr(addr: IpAddr) -> Stmt {
        Stmt::Addr { dir: Dir::Src, negate: false, addr, prefix: full_prefix(&addr) }
    }

    pub fn jump(chain: impl Into<String>) -> Stmt {
        Stmt::Verdict(Verdict::Jump(chain.into()))
    }

    pub fn goto(chain: impl Into<String>) -> Stmt {
        Stmt::Verdict(Verdict::Goto(chain.into()))
    }

    /// Chains this statement sends packets to.
    pub fn targets(&self) -> Vec<&str> {
        match self {
            Stmt::Verdict(v) => v.target().into_iter().collect(),
            _ => Vec::new(),
        }
    }

    /// Sets this statement reads or writes.
    pub fn sets(&self) -> Vec<&str> {
        match self {
            Stmt::AddrInSet { set, .. }
            | Stmt::DaddrProtoPortVmap(set)
            | Stmt::ProtoPortVmap(set)
            | Stmt::UpdateSaddr(set) => vec![set],
            _ => Vec::new(),
        }
    }

    /// The statement in nft syntax.
    pub fn render(&self, family: Family) -> String {
        let ip = family.name();
        match self {
            Stmt::CtStateNew => "ct state new".into(),
            Stmt::Addr { dir, negate, addr, prefix } => {
                let op = if *negate { "!= " } else { "" };
                if *prefix == full_prefix(addr) {
                    format!("{ip} {} {op}{addr}", dir.name())
                } else {
                    format!("{ip} {} {op}{addr}/{prefix}", dir.name())
                }
            }
            Stmt::AddrInSet { dir, set } => format!("{ip} {} @{set}", dir.name()),
            Stmt::L4Proto(p) => format!("meta l4proto {}", p.name()),
            Stmt::Dport(p, port) => format!("{} dport {port}", p.name()),
            Stmt::FibLocal(dir) => format!("fib {} type local", dir.name()),
            Stmt::IifName { name, prefix, negate } => {
                format!(
                    "iifname {}\"{name}{}\"",
                    if *negate { "!= " } else { "" },
                    if *prefix { "*" } else { "" }
                )
            }
            Stmt::MarkUnset(m) => format!("mark and {m:#08x} == 0"),
            Stmt::DaddrProtoPortVmap(map) => format!("{ip} daddr . meta l4proto . th dport vmap @{map}"),
            Stmt::ProtoPortVmap(map) => format!("meta l4proto . th dport vmap @{map}"),
            Stmt::NumgenPick(n) => format!("numgen random mod {n} 0"),
            Stmt::MarkSetOr(m) => format!("mark set mark or {m:#08x}"),
            Stmt::MarkSetXor(m) => format!("mark set mark xor {m:#08x}"),
            Stmt::Masquerade => "masquerade fully-random".into(),
            Stmt::Dnat(addr, port) => match addr {
                IpAddr::V4(a) => format!("dnat to {a}:{port}"),
                IpAddr::V6(a) => format!("dnat to [{a}]:{port}"),
            },
            Stmt::UpdateSaddr(set) => format!("update @{set} {{ {ip} saddr }}"),
            Stmt::Reject => "reject".into(),
            Stmt::Verdict(v) => v.to_string(),
        }
    }

    /// The statement as nf_tables expressions, appended to `out`.
    pub(crate) fn lower(&self, family: Family, out: &mut Vec<Expr>) {
        let r = Reg::R1;
        match self {
            Stmt::CtStateNew => {
                out.push(Expr::CtState { dreg: r });
                out.push(Expr::Bitwise {
                    reg: r,
                    mask: CT_STATE_NEW.to_ne_bytes().to_vec(),
                    xor: vec![0; 4],
                });
                out.push(Expr::Cmp { sreg: r, op: CmpOp::Neq, data: vec![0; 4] });
            }
            Stmt::Addr { dir, negate, addr, prefix } => {
                let (offset, bytes) = addr_payload(family, *dir);
                out.push(Expr::Payload { dreg: r, base: NETWORK_HEADER, offset, len: bytes });
                let value = addr_bytes(addr);
                let op = if *negate { CmpOp::Neq } else { CmpOp::Eq };
                if *prefix == full_prefix(addr) {
                    out.push(Expr::Cmp { sreg: r, op, data: value });
                } else {
                    let mask = prefix_mask(bytes as usize, *prefix);
                    let masked: Vec<u8> = value.iter().zip(&mask).map(|(v, m)| v & m).collect();
                    out.push(Expr::Bitwise { reg: r, mask, xor: vec![0; bytes as usize] });
                    out.push(Expr::Cmp { sreg: r, op, data: masked });
                }
            }
            Stmt::AddrInSet { dir, set } => {
                let (offset, bytes) = addr_payload(family, *dir);
                out.push(Expr::Payload { dreg: r, base: NETWORK_HEADER, offset, len: bytes });
                out.push(Expr::Lookup { sreg: r, set: set.clone(), verdict: false });
            }
            Stmt::L4Proto(p) => {
                out.push(Expr::MetaLoad { key: META_L4PROTO, dreg: r });
                out.push(Expr::Cmp { sreg: r, op: CmpOp::Eq, data: vec![p.number()] });
            }
            Stmt::Dport(p, port) => {
                out.push(Expr::MetaLoad { key: META_L4PROTO, dreg: r });
                out.push(Expr::Cmp { sreg: r, op: CmpOp::Eq, data: vec![p.number()] });
                out.push(Expr::Payload { dreg: r, base: TRANSPORT_HEADER, offset: 2, len: 2 });
                out.push(Expr::Cmp { sreg: r, op: CmpOp::Eq, data: port.to_be_bytes().to_vec() });
            }
            Stmt::FibLocal(dir) => {
                let flags = match dir {
                    Dir::Src => FIB_F_SADDR,
                    Dir::Dst => FIB_F_DADDR,
                };
                out.push(Expr::Fib { dreg: r, result: FIB_RESULT_ADDRTYPE, flags });
                out.push(Expr::Cmp { sreg: r, op: CmpOp::Eq, data: RTN_LOCAL.to_ne_bytes().to_vec() });
            }
            Stmt::IifName { name, prefix, negate } => {
                out.push(Expr::MetaLoad { key: META_IIFNAME, dreg: r });
                let mut data = name.as_bytes().to_vec();
                if !prefix {
                    data.resize(IFNAMSIZ, 0);
                }
                let op = if *negate { CmpOp::Neq } else { CmpOp::Eq };
                out.push(Expr::Cmp { sreg: r, op, data });
            }
            Stmt::MarkUnset(m) => {
                out.push(Expr::MetaLoad { key: META_MARK, dreg: r });
                out.push(Expr::Bitwise { reg: r, mask: m.to_ne_bytes().to_vec(), xor: vec![0; 4] });
                out.push(Expr::Cmp { sreg: r, op: CmpOp::Eq, data: vec![0; 4] });
            }
            Stmt::DaddrProtoPortVmap(map) => {
                // A concatenation fills consecutive 32-bit registers, each part padded to 4 bytes.
                let (offset, bytes) = addr_payload(family, Dir::Dst);
                out.push(Expr::Payload { dreg: Reg::R32(0), base: NETWORK_HEADER, offset, len: bytes });
                let next = bytes as u32 / 4;
                out.push(Expr::MetaLoad { key: META_L4PROTO, dreg: Reg::R32(next) });
                out.push(Expr::Payload {
                    dreg: Reg::R32(next + 1),
                    base: TRANSPORT_HEADER,
                    offset: 2,
                    len: 2,
                });
                out.push(Expr::Lookup { sreg: Reg::R32(0), set: map.clone(), verdict: true });
            }
            Stmt::ProtoPortVmap(map) => {
                out.push(Expr::MetaLoad { key: META_L4PROTO, dreg: Reg::R32(0) });
                out.push(Expr::Payload { dreg: Reg::R32(1), base: TRANSPORT_HEADER, offset: 2, len: 2 });
                out.push(Expr::Lookup { sreg: Reg::R32(0), set: map.clone(), verdict: true });
            }
            Stmt::NumgenPick(n) => {
                out.push(Expr::NumgenRandom { dreg: r, modulus: *n });
                out.push(Expr::Cmp { sreg: r, op: CmpOp::Eq, data: vec![0; 4] });
            }
            Stmt::MarkSetOr(m) => {
                out.push(Expr::MetaLoad { key: META_MARK, dreg: r });
                out.push(Expr::Bitwise {
                    reg: r,
                    mask: (!m).to_ne_bytes().to_vec(),
                    xor: m.to_ne_bytes().to_vec(),
                });
                out.push(Expr::MetaSet { key: META_MARK, sreg: r });
            }
            Stmt::MarkSetXor(m) => {
                out.push(Expr::MetaLoad { key: META_MARK, dreg: r });
                out.push(Expr::Bitwise {
                    reg: r,
                    mask: u32::MAX.to_ne_bytes().to_vec(),
                    xor: m.to_ne_bytes().to_vec(),
                });
                out.push(Expr::MetaSet { key: META_MARK, sreg: r });
            }
            Stmt::Masquerade => out.push(Expr::Masq { flags: NF_NAT_RANGE_PROTO_RANDOM_FULLY }),
            Stmt::Dnat(addr, port) => {
                out.push(Expr::Immediate { dreg: Reg::R32(0), data: addr_bytes(addr) });
                out.push(Expr::Immediate { dreg: Reg::R32(4), data: port.to_be_bytes().to_vec() });
                out.push(Expr::Dnat { family: Family::of(addr), addr: Reg::R32(0), proto: Reg::R32(4) });
            }
            Stmt::UpdateSaddr(set) => {
                let (offset, bytes) = addr_payload(family, Dir::Src);
                out.push(Expr::Payload { dreg: r, base: NETWORK_HEADER, offset, len: bytes });
                out.push(Expr::DynsetUpdate { sreg: r, set: set.clone() });
            }
            Stmt::Reject => {
                let code = match family {
                    Family::Ip => ICMP_PORT_UNREACH,
                    Family::Ip6 => ICMPV6_PORT_UNREACH,
                };
                out.push(Expr::Reject { code });
            }
            Stmt::Verdict(v) => out.push(Expr::Verdict(v.clone())),
        }
    }
}

/// A prefix covering the whole address.
pub fn full_prefix(addr: &IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

pub(crate) fn addr_bytes(addr: &IpAddr) -> Vec<u8> {
    match addr {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// Offset and length of the source or destination address in the network header.
fn addr_payload(family: Family, dir: Dir) -> (u32, u32) {
    match (family, dir) {
        (Family::Ip, Dir::Src) => (12, 4),
        (Family::Ip, Dir::Dst) => (16, 4),
        (Family::Ip6, Dir::Src) => (8, 16),
        (Family::Ip6, Dir::Dst) => (24, 16),
    }
}

fn prefix_mask(bytes: usize, prefix: u8) -> Vec<u8> {
    let mut mask = vec![0u8; bytes];
    for (i, byte) in mask.iter_mut().enumerate() {
        let bits = (prefix as usize).saturating_sub(i * 8).min(8);
        *byte = if bits == 0 { 0 } else { 0xffu8 << (8 - bits) };
    }
    mask
}

const NETWORK_HEADER: u32 = 1;
const TRANSPORT_HEADER: u32 = 2;
const META_MARK: u32 = 3;
const META_IIFNAME: u32 = 6;
const META_L4PROTO: u32 = 16;
const IFNAMSIZ: usize = 16;
/// `ct state` bits: NF_CT_STATE_BIT(IP_CT_NEW).
const CT_STATE_NEW: u32 = 1 << 3;
const FIB_RESULT_ADDRTYPE: u32 = 3;
const FIB_F_SADDR: u32 = 1 << 0;
const FIB_F_DADDR: u32 = 1 << 1;
const RTN_LOCAL: u32 = 2;
const NF_NAT_RANGE_PROTO_RANDOM_FULLY: u32 = 1 << 4;
const ICMP_PORT_UNREACH: u8 = 3;
const ICMPV6_PORT_UNREACH: u8 = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_nft() {
        let f = Family::Ip;
        let cidr = Stmt::Addr { dir: Dir::Src, negate: true, addr: "10.0.0.0".parse().unwrap(), prefix: 8 };
        assert_eq!(cidr.render(f), "ip saddr != 10.0.0.0/8");
        assert_eq!(Stmt::daddr("172.30.0.41".parse().unwrap()).render(f), "ip daddr 172.30.0.41");
        assert_eq!(Stmt::MarkSetOr(0x4000).render(f), "mark set mark or 0x004000");
        assert_eq!(Stmt::MarkUnset(0x4000).render(f), "mark and 0x004000 == 0");
        assert_eq!(Stmt::NumgenPick(2).render(f), "numgen random mod 2 0");
        assert_eq!(Stmt::Dnat("fd00::1".parse().unwrap(), 80).render(Family::Ip6), "dnat to [fd00::1]:80");
        assert_eq!(Stmt::UpdateSaddr("s".into()).render(Family::Ip6), "update @s { ip6 saddr }");
    }

    #[test]
    fn prefix_masks() {
        assert_eq!(prefix_mask(4, 8), vec![0xff, 0, 0, 0]);
        assert_eq!(prefix_mask(4, 12), vec![0xff, 0xf0, 0, 0]);
        assert_eq!(prefix_mask(4, 32), vec![0xff; 4]);
        assert_eq!(prefix_mask(16, 64)[7..9], [0xff, 0]);
    }
}
