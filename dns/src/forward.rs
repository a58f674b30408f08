//! Names outside the cluster go to the node's resolvers (`nameserver` lines of
//! `/etc/resolv.conf`, or `--upstream`), as CoreDNS's `forward . /etc/resolv.conf`: over UDP,
//! again over TCP when the answer was truncated (or over TCP from the start for a client
//! that asked over TCP), each upstream in turn until one answers.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::Semaphore;

use crate::metrics::{Metrics, ToLabels, ToRcodeLabels};

/// How long one upstream has to answer before the next is tried (CoreDNS's read timeout).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a question may take across all upstreams (CoreDNS's overall deadline).
pub const DEADLINE: Duration = Duration::from_secs(5);
/// Forwarded questions in flight at once; more are refused (CoreDNS's `max_concurrent`).
pub const MAX_CONCURRENT: usize = 1000;
/// The UDP payload size offered to upstreams (the DNS flag day's 1232).
const UDP_PAYLOAD: u16 = 1232;
/// Largest UDP datagram read back; anything bigger cannot arrive on UDP.
const MAX_UDP: usize = 65_535;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{MAX_CONCURRENT} forwarded queries already in flight")]
    Overloaded,
    #[error("no upstream answered: {0}")]
    Unanswered(String),
    #[error("encoding the query: {0}")]
    Encode(#[from] hickory_proto::ProtoError),
    #[error("reading {path}: {source}")]
    ResolvConf { path: String, source: std::io::Error },
    #[error("{0}: no nameserver to forward to; give --upstream")]
    NoUpstream(String),
    #[error("--upstream {0:?}: want IP or IP:port")]
    BadUpstream(String),
}

/// The `nameserver` addresses of a resolv.conf (port 53). Link-local IPv6 servers with a
/// zone (`fe80::1%eth0`) are skipped: a socket address cannot carry the zone name here.
pub fn resolv_conf_nameservers(path: &Path) -> Result<Vec<SocketAddr>, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| Error::ResolvConf { path: path.display().to_string(), source })?;
    let servers: Vec<SocketAddr> = text
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next()? == "nameserver").then_some(())?;
            words.next()?.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 53))
        })
        .collect();
    if servers.is_empty() {
        return Err(Error::NoUpstream(path.display().to_string()));
    }
    Ok(servers)
}

/// `IP`, `IP:port` or `[IPv6]:port`.
pub fn parse_upstream(s: &str) -> Result<SocketAddr, Error> {
    let s = s.trim();
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    s.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)).map_err(|_| Error::BadUpstream(s.to_owned()))
}

/// Whether forwarding to `upstream` would reach this server itself, listening on `listen`
/// (a loop that would only end when the forwarding deadline does).
pub fn is_self(listen: &SocketAddr, upstream: &SocketAddr) -> bool {
    upstream.port() == listen.port()
        && (upstream.ip() == listen.ip() || (listen.ip().is_unspecified() && upstream.ip().is_loopback()))
}

/// What the client asked that the upstream must be asked too.
#[derive(Debug, Clone)]
pub struct Question {
    pub query: Query,
    pub recursion_desired: bool,
    pub checking_disabled: bool,
    pub dnssec_ok: bool,
    /// The client came over TCP: its answer may be large, so ask over TCP.
    pub tcp: bool,
}

#[derive(Debug)]
pub struct Forwarder {
    upstreams: Vec<SocketAddr>,
    /// Where the next question starts, so load spreads over the upstreams.
    next: AtomicUsize,
    inflight: Semaphore,
    metrics: Arc<Metrics>,
}

impl Forwarder {
    pub fn new(upstreams: Vec<SocketAddr>, metrics: Arc<Metrics>) -> Forwarder {
        Forwarder { upstreams, next: AtomicUsize::new(0), inflight: Semaphore::new(MAX_CONCURRENT), metrics }
    }

    pub fn upstreams(&self) -> &[SocketAddr] {
        &self.upstreams
    }

    /// The upstreams' answer to `q`.
    pub async fn forward(&self, q: &Question) -> Result<Message, Error> {
        let Ok(_permit) = self.inflight.try_acquire() else {
            self.metrics.forward_rejects.inc();
            return Err(Error::Overloaded);
        };
        let mut request = Message::new(rand::random(), MessageType::Query, OpCode::Query);
        request.metadata.recursion_desired = q.recursion_desired;
        request.metadata.checking_disabled = q.checking_disabled;
        request.add_query(q.query.clone());
        let mut edns = Edns::new();
        edns.set_max_payload(UDP_PAYLOAD);
        edns.set_dnssec_ok(q.dnssec_ok);
        request.set_edns(edns);
        let bytes = request.to_vec()?;
        let id = request.metadata.id;

        let deadline = Instant::now() + DEADLINE;
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut failures = Vec::new();
        for i in 0..self.upstreams.len() {
            let to = self.upstreams[(start + i) % self.upstreams.len()];
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let to_label = ToLabels { to: to.to_string() };
            self.metrics.forward_requests.get_or_create(&to_label).inc();
            let began = Instant::now();
            let result =
                tokio::time::timeout(ATTEMPT_TIMEOUT.min(left), exchange(to, &bytes, id, &q.query, q.tcp))
                    .await;
            match result {
                Ok(Ok(response)) => {
                    let labels = ToRcodeLabels {
                        to: to.to_string(),
                        rcode: crate::metrics::rcode_label(response.metadata.response_code),
                    };
                    self.metrics.forward_responses.get_or_create(&labels).inc();
                    self.metrics
                        .forward_duration
                        .get_or_create(&labels)
                        .observe(began.elapsed().as_secs_f64());
                    return Ok(response);
                }
                Ok(Err(err)) => failures.push(format!("{to}: {err}")),
                Err(_) => failures.push(format!("{to}: no answer within {:?}", ATTEMPT_TIMEOUT.min(left))),
            }
        }
        Err(Error::Unanswered(failures.join("; ")))
    }
}

/// One question to one upstream: UDP first unless `tcp`, TCP when UDP's answer was truncated.
async fn exchange(
    to: SocketAddr,
    bytes: &[u8],
    id: u16,
    query: &Query,
    tcp: bool,
) -> std::io::Result<Message> {
    if !tcp {
        let response = udp_exchange(to, bytes, id, query).await?;
        if !response.metadata.truncation {
            return Ok(response);
        }
    }
    tcp_exchange(to, bytes, id, query).await
}

fn invalid(msg: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg.into())
}

/// Whether `response` answers our question: same ID, one question equal to ours (names
/// compare case-insensitively). Anything else on our socket is ignored (a late answer to
/// another question, or a spoofing attempt).
fn answers(response: &Message, id: u16, query: &Query) -> bool {
    response.metadata.id == id
        && response.metadata.message_type == MessageType::Response
        && response.queries.len() == 1
        && response.queries[0].query_type() == query.query_type()
        && response.queries[0].query_class() == query.query_class()
        && response.queries[0].name().eq_ignore_root(query.name())
}

async fn udp_exchange(to: SocketAddr, bytes: &[u8], id: u16, query: &Query) -> std::io::Result<Message> {
    let local: SocketAddr = if to.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(to).await?;
    socket.send(bytes).await?;
    let mut buf = vec![0u8; MAX_UDP];
    loop {
        let n = socket.recv(&mut buf).await?;
        match Message::from_vec(&buf[..n]) {
            Ok(response) if answers(&response, id, query) => return Ok(response),
            _ => continue,
        }
    }
}

async fn tcp_exchange(to: SocketAddr, bytes: &[u8], id: u16, query: &Query) -> std::io::Result<Message> {
    let mut stream = TcpStream::connect(to).await?;
    let len = u16::try_from(bytes.len()).map_err(|_| invalid("query longer than 65535 bytes"))?;
    let mut framed = Vec::with_capacity(bytes.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(bytes);
    stream.write_all(&framed).await?;
    loop {
        let len = stream.read_u16().await? as usize;
        let mut buf = vec![0u8; len];
        stream.read_exact(&mut buf).await?;
        match Message::from_vec(&buf) {
            Ok(response) if answers(&response, id, query) => return Ok(response),
            Ok(_) => continue,
            Err(err) => return Err(invalid(format!("undecodable answer: {err}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn resolv_conf_and_upstream_flags() {
        let mut f = tempfile_like();
        writeln!(f.1, "# comment\nsearch example.com\nnameserver 10.0.0.2\nnameserver fe80::1%eth0\nnameserver ::1\noptions ndots:2").unwrap();
        let got = resolv_conf_nameservers(&f.0).unwrap();
        assert_eq!(got, ["10.0.0.2:53".parse().unwrap(), "[::1]:53".parse().unwrap()]);
        std::fs::write(&f.0, "search x\n").unwrap();
        assert!(matches!(resolv_conf_nameservers(&f.0), Err(Error::NoUpstream(_))));
        assert_eq!(parse_upstream("127.0.0.1").unwrap(), "127.0.0.1:53".parse().unwrap());
        assert_eq!(parse_upstream("127.0.0.1:5353").unwrap(), "127.0.0.1:5353".parse().unwrap());
        assert_eq!(parse_upstream("[::1]:5353").unwrap(), "[::1]:5353".parse().unwrap());
        assert!(parse_upstream("dns.example").is_err());
        let _ = std::fs::remove_file(&f.0);
    }

    fn tempfile_like() -> (std::path::PathBuf, std::fs::File) {
        let path = std::env::temp_dir().join(format!(
            "kube-dns-resolv-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        let f = std::fs::File::create(&path).unwrap();
        (path, f)
    }

    /// A loopback upstream that answers every query with one A record, truncated over UDP
    /// when `truncate` is set: the forwarder must then come back over TCP.
    async fn fake_upstream(truncate: bool) -> SocketAddr {
        // UDP and TCP on one port: another test may hold the TCP side of a free UDP port.
        let (udp, addr, tcp) = 'bind: {
            for _ in 0..50 {
                let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
                let addr = udp.local_addr().unwrap();
                if let Ok(tcp) = tokio::net::TcpListener::bind(addr).await {
                    break 'bind (udp, addr, tcp);
                }
            }
            panic!("no loopback port free for both UDP and TCP");
        };
        let reply = |req: &Message, tc: bool| {
            let mut m = Message::new(req.metadata.id, MessageType::Response, OpCode::Query);
            m.add_query(req.queries[0].clone());
            m.metadata.truncation = tc;
            if !tc {
                let rdata = hickory_proto::rr::RData::A(hickory_proto::rr::rdata::A([192, 0, 2, 1].into()));
                m.add_answer(hickory_proto::rr::Record::from_rdata(req.queries[0].name().clone(), 60, rdata));
            }
            m.to_vec().unwrap()
        };
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let (n, from) = udp.recv_from(&mut buf).await.unwrap();
                let req = Message::from_vec(&buf[..n]).unwrap();
                udp.send_to(&reply(&req, truncate), from).await.unwrap();
            }
        });
        tokio::spawn(async move {
            loop {
                let (mut s, _) = tcp.accept().await.unwrap();
                let len = s.read_u16().await.unwrap() as usize;
                let mut buf = vec![0u8; len];
                s.read_exact(&mut buf).await.unwrap();
                let out = reply(&Message::from_vec(&buf).unwrap(), false);
                s.write_all(&(out.len() as u16).to_be_bytes()).await.unwrap();
                s.write_all(&out).await.unwrap();
            }
        });
        addr
    }

    fn question(tcp: bool) -> Question {
        let name = hickory_proto::rr::Name::from_ascii("Example.COM.").unwrap();
        Question {
            query: Query::query(name, hickory_proto::rr::RecordType::A),
            recursion_desired: true,
            checking_disabled: false,
            dnssec_ok: false,
            tcp,
        }
    }

    fn forwarder(upstreams: Vec<SocketAddr>) -> Forwarder {
        let metrics =
            Arc::new(Metrics::register(&component_base::metrics::Registry::new(), "dns://:53".into()));
        Forwarder::new(upstreams, metrics)
    }

    #[tokio::test]
    async fn udp_then_tcp_on_truncation() {
        let plain = fake_upstream(false).await;
        let truncating = fake_upstream(true).await;
        for (upstream, tcp) in [(plain, false), (truncating, false), (plain, true)] {
            let f = forwarder(vec![upstream]);
            let answer = f.forward(&question(tcp)).await.unwrap();
            assert_eq!(answer.answers.len(), 1, "{upstream} tcp={tcp}");
            assert!(!answer.metadata.truncation);
        }
    }

    #[tokio::test]
    async fn a_silent_upstream_is_skipped() {
        // Bound but never read: the query times out and the next upstream answers.
        let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let good = fake_upstream(false).await;
        let f = forwarder(vec![silent.local_addr().unwrap(), good]);
        for _ in 0..2 {
            let answer = f.forward(&question(false)).await.unwrap();
            assert_eq!(answer.answers.len(), 1);
        }
        let only_silent = forwarder(vec![silent.local_addr().unwrap()]);
        let err = only_silent.forward(&question(false)).await.unwrap_err();
        assert!(matches!(err, Error::Unanswered(_)), "{err}");
    }
}
