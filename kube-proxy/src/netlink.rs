//! Raw netlink for the netfilter subsystems kube-proxy speaks to (nf_tables and conntrack):
//! a blocking socket, a message builder with (nested) attributes, and a parser for what
//! the kernel sends back. Framing is netlink's own (`struct nlmsghdr`, `struct nlattr`,
//! 4-byte alignment) plus netfilter's `struct nfgenmsg`; nothing here knows nf_tables.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

pub const NLMSG_HDRLEN: usize = 16;
pub const NFGENMSG_LEN: usize = 4;
pub const NLA_HDRLEN: usize = 4;
/// Nested attributes carry this flag, as libmnl sets it.
pub const NLA_F_NESTED: u16 = 0x8000;

pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_MULTI: u16 = 0x2;
pub const NLM_F_ACK: u16 = 0x4;
pub const NLM_F_DUMP_INTR: u16 = 0x10;
pub const NLM_F_DUMP: u16 = 0x300;
pub const NLM_F_CREATE: u16 = 0x400;
pub const NLM_F_APPEND: u16 = 0x800;

pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;

const NETLINK_EXT_ACK: libc::c_int = 11;
const NETLINK_CAP_ACK: libc::c_int = 10;
/// Extended-ACK attribute carrying the kernel's human-readable reason.
const NLMSGERR_ATTR_MSG: u16 = 1;
/// In an error message's flags: the echoed request was cut to its header (NETLINK_CAP_ACK).
const NLM_F_CAPPED: u16 = 0x100;
/// ... and extended-ACK attributes follow it.
const NLM_F_ACK_TLVS: u16 = 0x200;

/// Largest datagram read at once. Dumps come in messages of at most a few pages; the
/// buffer is big enough for any of them.
const RECV_BUFFER: usize = 1 << 20;

/// Rounds up to netlink's 4-byte alignment.
pub const fn align(len: usize) -> usize {
    (len + 3) & !3
}

/// A netlink socket bound to the kernel for one protocol (NETLINK_NETFILTER, say).
#[derive(Debug)]
pub struct Socket {
    fd: OwnedFd,
    /// Next sequence number; every message sent gets its own.
    seq: u32,
    /// The size the send buffer was last raised to, so it is raised only when needed.
    sndbuf: usize,
    buf: Vec<u8>,
}

impl Socket {
    /// Opens and binds a socket for `protocol`, asking for extended ACKs (the kernel's reason
    /// for a failure) and capped ACKs (errors do not echo the whole request back).
    pub fn open(protocol: libc::c_int) -> io::Result<Socket> {
        // SAFETY: plain socket(2) call; the fd is owned right after.
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_nl is plain data; zero is a valid value (pid 0: kernel assigns).
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: addr is a valid sockaddr_nl of the size given.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &addr as *const libc::sockaddr_nl as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        let sock = Socket { fd, seq: initial_seq(), sndbuf: 0, buf: vec![0; RECV_BUFFER] };
        // Best effort: older kernels lack them, and everything still works without.
        let _ = sock.setsockopt(libc::SOL_NETLINK, NETLINK_EXT_ACK, 1);
        let _ = sock.setsockopt(libc::SOL_NETLINK, NETLINK_CAP_ACK, 1);
        // Room for the errors of a large batch; forced when root, so wmem/rmem_max do not cap it.
        let rcv = 4 << 20;
        if sock.setsockopt(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, rcv).is_err() {
            let _ = sock.setsockopt(libc::SOL_SOCKET, libc::SO_RCVBUF, rcv);
        }
        Ok(sock)
    }

    fn setsockopt(&self, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
        // SAFETY: value is a live c_int of the size given.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                &value as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    /// A fresh sequence number.
    pub fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Sends `buf` (one or more messages) to the kernel in one datagram. The kernel
    /// handles a netlink datagram in the sender's context, so when this returns the
    /// kernel has processed it (a batch is committed or aborted).
    pub fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        // The kernel refuses datagrams larger than the send buffer (less 32 bytes of
        // overhead): grow it to fit big batches, past wmem_max when root.
        let want = buf.len() + 4096;
        if want > self.sndbuf && want > 200_000 {
            let size = want.min(i32::MAX as usize) as libc::c_int;
            if self.setsockopt(libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, size).is_err() {
                self.setsockopt(libc::SOL_SOCKET, libc::SO_SNDBUF, size)?;
            }
            self.sndbuf = want;
        }
        // SAFETY: sockaddr_nl zeroed is the kernel's address (pid 0).
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        loop {
            // SAFETY: buf and addr are valid for the lengths given.
            let n = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    buf.as_ptr() as *const libc::c_void,
                    buf.len(),
                    0,
                    &addr as *const libc::sockaddr_nl as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
                )
            };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            if n as usize != buf.len() {
                return Err(io::Error::other(format!("netlink sent {n} of {} bytes", buf.len())));
            }
            return Ok(());
        }
    }

    /// Receives one datagram (possibly several messages), waiting at most until `deadline`.
    pub fn recv(&mut self, deadline: Instant) -> io::Result<&[u8]> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut pfd = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            let ms = left.as_millis().min(i32::MAX as u128) as libc::c_int;
            // SAFETY: one valid pollfd.
            let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
            if rc < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            if rc == 0 {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "no netlink reply from the kernel"));
            }
            // SAFETY: buf is valid for its length.
            let n = unsafe {
                libc::recv(self.fd.as_raw_fd(), self.buf.as_mut_ptr() as *mut libc::c_void, self.buf.len(), 0)
            };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            return Ok(&self.buf[..n as usize]);
        }
    }

    /// Runs a dump request (built with `NLM_F_DUMP`) and hands every reply message to
    /// `each` until the kernel says it is done. A dump interrupted by a concurrent change
    /// (`NLM_F_DUMP_INTR`) is reported as `ErrorKind::Interrupted` so the caller can retry.
    pub fn dump(
        &mut self,
        request: &[u8],
        timeout: Duration,
        mut each: impl FnMut(&Message<'_>) -> io::Result<()>,
    ) -> io::Result<()> {
        self.send(request)?;
        let deadline = Instant::now() + timeout;
        let mut interrupted = false;
        loop {
            let data = self.recv(deadline)?.to_vec();
            for msg in Messages::new(&data) {
                let msg = msg?;
                if msg.flags & NLM_F_DUMP_INTR != 0 {
                    interrupted = true;
                }
                match msg.ty {
                    NLMSG_DONE => {
                        if interrupted {
                            return Err(io::Error::new(
                                io::ErrorKind::Interrupted,
                                "netlink dump interrupted",
                            ));
                        }
                        return Ok(());
                    }
                    NLMSG_ERROR => {
                        let err = msg.error()?;
                        if err.errno != 0 {
                            return Err(io::Error::from_raw_os_error(err.errno));
                        }
                    }
                    _ => each(&msg)?,
                }
            }
        }
    }
}

/// Sequence numbers start from the clock so that replies to an earlier socket of the same
/// process are never mistaken for ours.
fn initial_seq() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(1)
}

/// Builds netlink messages back to back in one buffer (a batch is many messages sent as
/// one datagram).
#[derive(Debug, Default)]
pub struct Builder {
    pub buf: Vec<u8>,
    /// Start of the message being built.
    msg_start: usize,
    /// Starts of the open nested attributes.
    nests: Vec<usize>,
}

impl Builder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a message with a netfilter header (`nfgenmsg`).
    pub fn begin_nf(&mut self, ty: u16, flags: u16, seq: u32, family: u8, res_id: u16) {
        debug_assert!(self.nests.is_empty(), "message begun inside an attribute");
        self.msg_start = self.buf.len();
        self.buf.extend_from_slice(&0u32.to_ne_bytes()); // length, set by `end`
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(&flags.to_ne_bytes());
        self.buf.extend_from_slice(&seq.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it in
        self.buf.push(family);
        self.buf.push(0); // NFNETLINK_V0
        self.buf.extend_from_slice(&res_id.to_be_bytes());
    }

    /// Finishes the current message by writing its length.
    pub fn end(&mut self) {
        debug_assert!(self.nests.is_empty(), "message ended with an open attribute");
        let len = (self.buf.len() - self.msg_start) as u32;
        self.buf[self.msg_start..self.msg_start + 4].copy_from_slice(&len.to_ne_bytes());
    }

    /// Bytes of the message being built so far.
    pub fn message_len(&self) -> usize {
        self.buf.len() - self.msg_start
    }

    pub fn attr(&mut self, ty: u16, value: &[u8]) {
        let len = NLA_HDRLEN + value.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(value);
        self.pad();
    }

    pub fn attr_u8(&mut self, ty: u16, value: u8) {
        self.attr(ty, &[value]);
    }

    /// A 16-bit value in network byte order, as netfilter attributes are.
    pub fn attr_be16(&mut self, ty: u16, value: u16) {
        self.attr(ty, &value.to_be_bytes());
    }

    /// A 32-bit value in network byte order, as netfilter attributes are.
    pub fn attr_be32(&mut self, ty: u16, value: u32) {
        self.attr(ty, &value.to_be_bytes());
    }

    pub fn attr_be64(&mut self, ty: u16, value: u64) {
        self.attr(ty, &value.to_be_bytes());
    }

    /// A NUL-terminated string.
    pub fn attr_str(&mut self, ty: u16, value: &str) {
        let len = NLA_HDRLEN + value.len() + 1;
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(value.as_bytes());
        self.buf.push(0);
        self.pad();
    }

    pub fn nest_begin(&mut self, ty: u16) {
        self.nests.push(self.buf.len());
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf.extend_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
    }

    /// Closes the innermost nested attribute. Its length must fit netlink's 16 bits;
    /// callers keep nests (element lists) below that.
    pub fn nest_end(&mut self) {
        let start = self.nests.pop().expect("nest_end without nest_begin");
        let len = self.buf.len() - start;
        debug_assert!(len <= u16::MAX as usize, "nested attribute of {len} bytes");
        self.buf[start..start + 2].copy_from_slice(&(len as u16).to_ne_bytes());
    }

    /// Bytes written since the innermost open nest began.
    pub fn nest_len(&self) -> usize {
        self.nests.last().map(|s| self.buf.len() - s).unwrap_or(0)
    }

    fn pad(&mut self) {
        let aligned = align(self.buf.len());
        self.buf.resize(aligned, 0);
    }
}

/// One message received from the kernel.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    pub ty: u16,
    pub flags: u16,
    pub seq: u32,
    /// Everything after the netlink header.
    pub payload: &'a [u8],
}

/// What an `NLMSG_ERROR` message says: `errno` 0 is an ACK.
#[derive(Debug, Clone)]
pub struct ErrorMsg {
    /// A positive errno, or 0.
    pub errno: i32,
    /// The sequence number of the request it answers.
    pub seq: u32,
    /// The kernel's extended-ACK message, if it gave one.
    pub message: Option<String>,
}

impl<'a> Message<'a> {
    /// The attributes after a netfilter header.
    pub fn nf_attrs(&self) -> Attrs<'a> {
        Attrs::new(self.payload.get(NFGENMSG_LEN..).unwrap_or(&[]))
    }

    /// Decodes an `NLMSG_ERROR` payload.
    pub fn error(&self) -> io::Result<ErrorMsg> {
        let p = self.payload;
        if p.len() < 4 + NLMSG_HDRLEN {
            return Err(io::Error::other("short netlink error message"));
        }
        let code = i32::from_ne_bytes(p[0..4].try_into().expect("4 bytes"));
        let orig_len = u32::from_ne_bytes(p[4..8].try_into().expect("4 bytes")) as usize;
        let seq = u32::from_ne_bytes(p[12..16].try_into().expect("4 bytes"));
        let mut message = None;
        if self.flags & NLM_F_ACK_TLVS != 0 {
            // The echoed request is only its header when capped, or whole otherwise.
            let echoed = if self.flags & NLM_F_CAPPED != 0 { NLMSG_HDRLEN } else { align(orig_len) };
            if let Some(tlvs) = p.get(4 + echoed..) {
                for attr in Attrs::new(tlvs) {
                    if attr.ty == NLMSGERR_ATTR_MSG {
                        let s = attr.value.split(|b| *b == 0).next().unwrap_or_default();
                        message = Some(String::from_utf8_lossy(s).into_owned());
                    }
                }
            }
        }
        Ok(ErrorMsg { errno: -code, seq, message })
    }
}

/// Iterates over the messages of a received datagram.
pub struct Messages<'a> {
    data: &'a [u8],
}

impl<'a> Messages<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self { data }
    }
}

impl<'a> Iterator for Messages<'a> {
    type Item = io::Result<Message<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.data.len() < NLMSG_HDRLEN {
            return None;
        }
        let len = u32::from_ne_bytes(self.data[0..4].try_into().expect("4 bytes")) as usize;
        if len < NLMSG_HDRLEN || len > self.data.len() {
            self.data = &[];
            return Some(Err(io::Error::other(format!("malformed netlink message of length {len}"))));
        }
        let ty = u16::from_ne_bytes(self.data[4..6].try_into().expect("2 bytes"));
        let flags = u16::from_ne_bytes(self.data[6..8].try_into().expect("2 bytes"));
        let seq = u32::from_ne_bytes(self.data[8..12].try_into().expect("4 bytes"));
        let msg = Message { ty, flags, seq, payload: &self.data[NLMSG_HDRLEN..len] };
        self.data = self.data.get(align(len)..).unwrap_or(&[]);
        Some(Ok(msg))
    }
}

/// One attribute.
#[derive(Debug, Clone, Copy)]
pub struct Attr<'a> {
    /// The type without the nested/byte-order flags.
    pub ty: u16,
    pub value: &'a [u8],
}

impl<'a> Attr<'a> {
    /// A NUL-terminated string attribute.
    pub fn str(&self) -> String {
        let s = self.value.split(|b| *b == 0).next().unwrap_or_default();
        String::from_utf8_lossy(s).into_owned()
    }

    pub fn be16(&self) -> Option<u16> {
        Some(u16::from_be_bytes(self.value.get(..2)?.try_into().ok()?))
    }

    pub fn be32(&self) -> Option<u32> {
        Some(u32::from_be_bytes(self.value.get(..4)?.try_into().ok()?))
    }

    pub fn u8(&self) -> Option<u8> {
        self.value.first().copied()
    }

    /// The attributes nested in this one.
    pub fn nested(&self) -> Attrs<'a> {
        Attrs::new(self.value)
    }
}

/// Iterates over a run of attributes; stops quietly at anything malformed.
pub struct Attrs<'a> {
    data: &'a [u8],
}

impl<'a> Attrs<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self { data }
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Attr<'a>;

    fn next(&mut self) -> Option<Attr<'a>> {
        if self.data.len() < NLA_HDRLEN {
            return None;
        }
        let len = u16::from_ne_bytes(self.data[0..2].try_into().expect("2 bytes")) as usize;
        let ty = u16::from_ne_bytes(self.data[2..4].try_into().expect("2 bytes")) & 0x3fff;
        if len < NLA_HDRLEN || len > self.data.len() {
            self.data = &[];
            return None;
        }
        let attr = Attr { ty, value: &self.data[NLA_HDRLEN..len] };
        self.data = self.data.get(align(len)..).unwrap_or(&[]);
        Some(attr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_frames_and_parser_reads_back() {
        let mut b = Builder::new();
        b.begin_nf(0x0a00, NLM_F_REQUEST, 7, 2, 0);
        b.attr_str(1, "kube-proxy");
        b.nest_begin(2);
        b.attr_be32(1, 0x01020304);
        b.attr_u8(2, 9);
        b.nest_end();
        b.end();
        assert_eq!(b.buf.len() % 4, 0);
        let msgs: Vec<_> = Messages::new(&b.buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0].seq, 7);
        let attrs: Vec<_> = msgs[0].nf_attrs().collect();
        assert_eq!(attrs[0].str(), "kube-proxy");
        let inner: Vec<_> = attrs[1].nested().collect();
        assert_eq!(inner[0].be32(), Some(0x01020304));
        assert_eq!(inner[1].u8(), Some(9));
    }

    #[test]
    fn error_message_with_extended_ack() {
        // An NLMSG_ERROR for seq 42, EEXIST, capped, with an extack message.
        let mut payload = Vec::new();
        payload.extend_from_slice(&(-17i32).to_ne_bytes());
        let mut hdr = vec![0u8; NLMSG_HDRLEN];
        hdr[0..4].copy_from_slice(&100u32.to_ne_bytes());
        hdr[8..12].copy_from_slice(&42u32.to_ne_bytes());
        payload.extend_from_slice(&hdr);
        let text = b"Chain exists\0";
        payload.extend_from_slice(&((NLA_HDRLEN + text.len()) as u16).to_ne_bytes());
        payload.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
        payload.extend_from_slice(text);
        payload.resize(align(payload.len()), 0);
        let msg =
            Message { ty: NLMSG_ERROR, flags: NLM_F_CAPPED | NLM_F_ACK_TLVS, seq: 1, payload: &payload };
        let err = msg.error().unwrap();
        // The seq read is the echoed request's (bytes 8..12 of its header).
        assert_eq!(err.errno, 17);
        assert_eq!(err.message.as_deref(), Some("Chain exists"));
    }
}
