//! ctnetlink: dumping the conntrack table of one address family and deleting entries by
//! their original tuple.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use crate::netlink::{self as nl, Attr, Builder, Messages, Socket};
use crate::nftables::Family;

const NETLINK_NETFILTER: libc::c_int = 12;
const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_NEW: u16 = 0;
const IPCTNL_MSG_CT_GET: u16 = 1;
const IPCTNL_MSG_CT_DELETE: u16 = 2;

const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;

/// Deletions sent per datagram.
const DELETE_CHUNK: usize = 500;

/// One direction of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tuple {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    pub src_port: u16,
    pub dst_port: u16,
}

/// A conntrack entry: the original direction (client to service) and the reply direction
/// (endpoint back to client, after DNAT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    pub orig: Tuple,
    pub reply: Tuple,
}

/// A ctnetlink socket.
pub struct Conntrack {
    sock: Socket,
}

impl Conntrack {
    pub fn new() -> io::Result<Conntrack> {
        Ok(Conntrack { sock: Socket::open(NETLINK_NETFILTER)? })
    }

    fn msg_type(msg: u16) -> u16 {
        (NFNL_SUBSYS_CTNETLINK << 8) | msg
    }

    fn af(family: Family) -> u8 {
        match family {
            Family::Ip => libc::AF_INET as u8,
            Family::Ip6 => libc::AF_INET6 as u8,
        }
    }

    /// Every entry of `family` whose protocol is `proto`.
    pub fn list(&mut self, family: Family, proto: u8) -> io::Result<Vec<Flow>> {
        for _ in 0..5 {
            let seq = self.sock.next_seq();
            let mut b = Builder::new();
            b.begin_nf(
                Self::msg_type(IPCTNL_MSG_CT_GET),
                nl::NLM_F_REQUEST | nl::NLM_F_DUMP,
                seq,
                Self::af(family),
                0,
            );
            b.end();
            let mut flows = Vec::new();
            let res = self.sock.dump(&b.buf, Duration::from_secs(60), |m| {
                if m.ty != Self::msg_type(IPCTNL_MSG_CT_NEW) {
                    return Ok(());
                }
                let mut orig = None;
                let mut reply = None;
                for a in m.nf_attrs() {
                    match a.ty {
                        CTA_TUPLE_ORIG => orig = parse_tuple(&a),
                        CTA_TUPLE_REPLY => reply = parse_tuple(&a),
                        _ => {}
                    }
                }
                if let (Some(orig), Some(reply)) = (orig, reply)
                    && orig.proto == proto
                {
                    flows.push(Flow { orig, reply });
                }
                Ok(())
            });
            match res {
                Ok(()) => return Ok(flows),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other("conntrack dump kept being interrupted"))
    }

    /// Deletes the entries with these original tuples; entries already gone are not an
    /// error. Returns how many were deleted.
    pub fn delete(&mut self, family: Family, tuples: &[Tuple]) -> io::Result<usize> {
        let mut deleted = 0;
        for chunk in tuples.chunks(DELETE_CHUNK) {
            let mut b = Builder::new();
            let first = self.sock.next_seq();
            let mut last = first;
            for (i, t) in chunk.iter().enumerate() {
                if i > 0 {
                    last = self.sock.next_seq();
                }
                b.begin_nf(
                    Self::msg_type(IPCTNL_MSG_CT_DELETE),
                    nl::NLM_F_REQUEST | nl::NLM_F_ACK,
                    last,
                    Self::af(family),
                    0,
                );
                b.nest_begin(CTA_TUPLE_ORIG);
                b.nest_begin(CTA_TUPLE_IP);
                match (t.src, t.dst) {
                    (IpAddr::V4(s), IpAddr::V4(d)) => {
                        b.attr(CTA_IP_V4_SRC, &s.octets());
                        b.attr(CTA_IP_V4_DST, &d.octets());
                    }
                    (IpAddr::V6(s), IpAddr::V6(d)) => {
                        b.attr(CTA_IP_V6_SRC, &s.octets());
                        b.attr(CTA_IP_V6_DST, &d.octets());
                    }
                    _ => return Err(io::Error::other("conntrack tuple mixes address families")),
                }
                b.nest_end();
                b.nest_begin(CTA_TUPLE_PROTO);
                b.attr_u8(CTA_PROTO_NUM, t.proto);
                b.attr_be16(CTA_PROTO_SRC_PORT, t.src_port);
                b.attr_be16(CTA_PROTO_DST_PORT, t.dst_port);
                b.nest_end();
                b.nest_end();
                b.end();
            }
            self.sock.send(&b.buf)?;
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut answered = 0;
            while answered < chunk.len() {
                let data = self.sock.recv(deadline)?.to_vec();
                for msg in Messages::new(&data) {
                    let msg = msg?;
                    if msg.ty != nl::NLMSG_ERROR {
                        continue;
                    }
                    let err = msg.error()?;
                    if err.seq < first || err.seq > last {
                        continue;
                    }
                    answered += 1;
                    match err.errno {
                        0 => deleted += 1,
                        libc::ENOENT => {}
                        errno => {
                            return Err(io::Error::other(format!(
                                "deleting a conntrack entry: {}",
                                io::Error::from_raw_os_error(errno)
                            )));
                        }
                    }
                }
            }
        }
        Ok(deleted)
    }
}

fn parse_tuple(attr: &Attr<'_>) -> Option<Tuple> {
    let mut src = None;
    let mut dst = None;
    let mut proto = None;
    let mut sport = 0;
    let mut dport = 0;
    for a in attr.nested() {
        match a.ty {
            CTA_TUPLE_IP => {
                for ip in a.nested() {
                    match ip.ty {
                        CTA_IP_V4_SRC => src = v4(ip.value),
                        CTA_IP_V4_DST => dst = v4(ip.value),
                        CTA_IP_V6_SRC => src = v6(ip.value),
                        CTA_IP_V6_DST => dst = v6(ip.value),
                        _ => {}
                    }
                }
            }
            CTA_TUPLE_PROTO => {
                for p in a.nested() {
                    match p.ty {
                        CTA_PROTO_NUM => proto = p.u8(),
                        CTA_PROTO_SRC_PORT => sport = p.be16().unwrap_or(0),
                        CTA_PROTO_DST_PORT => dport = p.be16().unwrap_or(0),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some(Tuple { src: src?, dst: dst?, proto: proto?, src_port: sport, dst_port: dport })
}

fn v4(b: &[u8]) -> Option<IpAddr> {
    let o: [u8; 4] = b.get(..4)?.try_into().ok()?;
    Some(IpAddr::V4(Ipv4Addr::from(o)))
}

fn v6(b: &[u8]) -> Option<IpAddr> {
    let o: [u8; 16] = b.get(..16)?.try_into().ok()?;
    Some(IpAddr::V6(Ipv6Addr::from(o)))
}
