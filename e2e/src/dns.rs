//! Cluster DNS for tests: our `kube-dns` process on a loopback address and free port,
//! queried with real `dig` (Debian's bind9-dnsutils), and a fake upstream resolver on
//! loopback that answers from a table and counts the questions it gets, so tests can see
//! what was forwarded and what the cache answered (nothing leaves the machine).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use parking_lot::Mutex;

use crate::apiserver::KubeApiserver;
use crate::{free_port, loopback_ip, wait_for};

/// A running `kube-dns`.
pub struct KubeDns {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    /// Where DNS is served.
    pub ip: Ipv4Addr,
    pub port: u16,
    /// Where /metrics, /health and /ready are served.
    pub http_ip: Ipv4Addr,
    pub metrics_port: u16,
    pub health_port: u16,
    pub ready_port: u16,
}

impl KubeDns {
    /// Starts kube-dns against `api` (its admin kubeconfig), forwarding to `upstream`, and
    /// waits until `/ready` says its watches have listed.
    pub fn start(api: &KubeApiserver, upstream: SocketAddr, extra_args: &[&str]) -> KubeDns {
        Self::start_at(api, None, upstream, extra_args)
    }

    /// As [`start`](Self::start), serving DNS on `dns` (a pod network's gateway on port 53,
    /// say) instead of a loopback address; the HTTP ports stay on loopback.
    pub fn start_at(
        api: &KubeApiserver,
        dns: Option<SocketAddr>,
        upstream: SocketAddr,
        extra_args: &[&str],
    ) -> KubeDns {
        let dir = tempfile::tempdir().expect("tempdir");
        let http_ip = loopback_ip();
        let (ip, port) = match dns {
            Some(SocketAddr::V4(a)) => (*a.ip(), a.port()),
            Some(other) => panic!("an IPv4 address for kube-dns, not {other}"),
            None => {
                // UDP and TCP share the port: pick one free for both.
                let port = loop {
                    let p = free_port(http_ip);
                    if UdpSocket::bind((http_ip, p)).is_ok() {
                        break p;
                    }
                };
                (http_ip, port)
            }
        };
        let (metrics_port, health_port, ready_port) =
            (free_port(http_ip), free_port(http_ip), free_port(http_ip));
        let log = std::fs::File::create(dir.path().join("kube-dns.log")).expect("log");
        let child = Command::new(crate::bin("kube-dns"))
            .arg(format!("--kubeconfig={}", api.kubeconfig.display()))
            .arg(format!("--dns-bind-address={ip}"))
            .arg(format!("--dns-port={port}"))
            .arg(format!("--upstream={upstream}"))
            .arg(format!("--metrics-bind-address={http_ip}:{metrics_port}"))
            .arg(format!("--health-bind-address={http_ip}:{health_port}"))
            .arg(format!("--ready-bind-address={http_ip}:{ready_port}"))
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("starting kube-dns");
        let mut d =
            KubeDns { child: Some(child), dir, ip, port, http_ip, metrics_port, health_port, ready_port };
        wait_for("kube-dns /ready", Duration::from_secs(60), Duration::from_millis(100), || {
            if let Some(Ok(Some(status))) = d.child.as_mut().map(|c| c.try_wait()) {
                panic!("kube-dns exited with {status}; log:\n{}", d.log_tail(40));
            }
            (d.http(d.ready_port, "/ready").0 == 200).then_some(())
        });
        d
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((self.ip, self.port))
    }

    /// Runs `dig` against this server.
    pub fn dig(&self, args: &[&str]) -> Dig {
        dig(self.addr(), args)
    }

    /// GET `path` on one of the HTTP ports: (status, body).
    pub fn http(&self, port: u16, path: &str) -> (u16, String) {
        let out = Command::new("curl")
            .args(["-s", "--max-time", "5", "-o", "-", "-w", "\n%{http_code}"])
            .arg(format!("http://{}:{port}{path}", self.http_ip))
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_owned())
    }

    /// The sum of the samples of `metric` whose labels contain every one of `labels`.
    pub fn metric(&self, metric: &str, labels: &[&str]) -> f64 {
        let (_, body) = self.http(self.metrics_port, "/metrics");
        body.lines()
            .filter(|l| l.split(['{', ' ']).next() == Some(metric) && labels.iter().all(|x| l.contains(x)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(self.dir.path().join("kube-dns.log")) {
            let _ = f.read_to_string(&mut s);
        }
        let all: Vec<&str> = s.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for KubeDns {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- kube-dns log ---\n{}", self.log_tail(60));
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One record of a dig section: owner, TTL, type, data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rr {
    pub name: String,
    pub ttl: u32,
    pub rtype: String,
    pub data: String,
}

/// What dig printed, parsed.
#[derive(Debug, Clone)]
pub struct Dig {
    /// `NOERROR`, `NXDOMAIN`, ... (empty when no answer came).
    pub status: String,
    /// Header flags: `qr`, `aa`, `tc`, `rd`, `ra`.
    pub flags: Vec<String>,
    pub answer: Vec<Rr>,
    pub authority: Vec<Rr>,
    pub additional: Vec<Rr>,
    pub raw: String,
}

impl Dig {
    /// The answer section's data of records of type `rtype`, sorted.
    pub fn data(&self, rtype: &str) -> Vec<String> {
        let mut v: Vec<String> =
            self.answer.iter().filter(|r| r.rtype == rtype).map(|r| r.data.clone()).collect();
        v.sort();
        v
    }

    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

/// `dig @addr -p port <args>` with one try and a 5 s timeout, parsed.
pub fn dig(addr: SocketAddr, args: &[&str]) -> Dig {
    let out = Command::new("dig")
        .arg(format!("@{}", addr.ip()))
        .args(["-p", &addr.port().to_string(), "+tries=1", "+time=5", "+nocmd", "+nostats"])
        .args(args)
        .output()
        .expect("dig (bind9-dnsutils; hack/install-deps.sh installs it)");
    let raw = String::from_utf8_lossy(&out.stdout).to_string();
    let mut d = Dig {
        status: String::new(),
        flags: Vec::new(),
        answer: Vec::new(),
        authority: Vec::new(),
        additional: Vec::new(),
        raw: raw.clone(),
    };
    let mut section = "";
    for line in raw.lines() {
        if let Some(rest) = line.split("status: ").nth(1) {
            d.status = rest.split(',').next().unwrap_or("").trim().to_owned();
        } else if let Some(rest) = line.strip_prefix(";; flags: ") {
            d.flags = rest.split(';').next().unwrap_or("").split_whitespace().map(String::from).collect();
        } else if line.starts_with(";; ANSWER SECTION") {
            section = "answer";
        } else if line.starts_with(";; AUTHORITY SECTION") {
            section = "authority";
        } else if line.starts_with(";; ADDITIONAL SECTION") {
            section = "additional";
        } else if line.trim().is_empty() || line.starts_with(';') {
            if line.trim().is_empty() {
                section = "";
            }
        } else if !section.is_empty() {
            let mut words = line.split_whitespace();
            let (Some(name), Some(ttl), Some(_class), Some(rtype)) =
                (words.next(), words.next(), words.next(), words.next())
            else {
                continue;
            };
            let rr = Rr {
                name: name.to_owned(),
                ttl: ttl.parse().unwrap_or(0),
                rtype: rtype.to_owned(),
                data: words.collect::<Vec<_>>().join(" "),
            };
            match section {
                "answer" => d.answer.push(rr),
                "authority" => d.authority.push(rr),
                _ => d.additional.push(rr),
            }
        }
    }
    d
}

/// What the fake upstream answers for a name.
#[derive(Debug, Clone)]
pub enum Upstream {
    /// These records (TTL, data) for the asked type.
    Records(u32, Vec<RData>),
    /// NXDOMAIN with a SOA whose minimum is the given TTL.
    NxDomain(u32),
    /// Over UDP a truncated empty answer; over TCP these records.
    TruncatedOverUdp(u32, Vec<RData>),
}

/// A resolver on loopback (UDP and TCP on one port) answering from a table; unknown
/// names get NXDOMAIN. Counts every question by lowercased name.
pub struct FakeUpstream {
    pub addr: SocketAddr,
    asked: Arc<Mutex<HashMap<String, usize>>>,
    stop: Arc<AtomicBool>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl FakeUpstream {
    pub fn start(table: Vec<(&str, RecordType, Upstream)>) -> FakeUpstream {
        let table: Arc<HashMap<(String, RecordType), Upstream>> =
            Arc::new(table.into_iter().map(|(n, t, a)| ((n.to_ascii_lowercase(), t), a)).collect());
        let ip = loopback_ip();
        let (udp, tcp) = loop {
            let tcp = TcpListener::bind((ip, 0)).expect("tcp");
            if let Ok(udp) = UdpSocket::bind(tcp.local_addr().expect("addr")) {
                break (udp, tcp);
            }
        };
        let addr = udp.local_addr().expect("addr");
        let asked = Arc::new(Mutex::new(HashMap::new()));
        let stop = Arc::new(AtomicBool::new(false));
        udp.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
        tcp.set_nonblocking(true).expect("nonblocking");
        let mut threads = Vec::new();
        {
            let (table, asked, stop) = (table.clone(), asked.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, from)) = udp.recv_from(&mut buf) else { continue };
                    if let Some(out) = answer(&table, &asked, &buf[..n], true) {
                        let _ = udp.send_to(&out, from);
                    }
                }
            }));
        }
        {
            let (table, asked, stop) = (table, asked.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok((mut s, _)) = tcp.accept() else {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    };
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut len = [0u8; 2];
                    if s.read_exact(&mut len).is_err() {
                        continue;
                    }
                    let mut q = vec![0u8; u16::from_be_bytes(len) as usize];
                    if s.read_exact(&mut q).is_err() {
                        continue;
                    }
                    if let Some(out) = answer(&table, &asked, &q, false) {
                        let _ = s.write_all(&(out.len() as u16).to_be_bytes());
                        let _ = s.write_all(&out);
                    }
                }
            }));
        }
        FakeUpstream { addr, asked, stop, threads: Mutex::new(threads) }
    }

    /// How many times `name` was asked (any type, UDP and TCP).
    pub fn asked(&self, name: &str) -> usize {
        self.asked.lock().get(&name.to_ascii_lowercase()).copied().unwrap_or(0)
    }

    /// Stops answering; returns once the sockets are closed (with their threads).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.stop();
    }
}

fn answer(
    table: &HashMap<(String, RecordType), Upstream>,
    asked: &Mutex<HashMap<String, usize>>,
    query: &[u8],
    udp: bool,
) -> Option<Vec<u8>> {
    let req = Message::from_vec(query).ok()?;
    let q = req.queries.first()?.clone();
    let name = q.name().to_lowercase().to_ascii();
    *asked.lock().entry(name.clone()).or_default() += 1;
    let mut m = Message::new(req.metadata.id, MessageType::Response, OpCode::Query);
    m.metadata.recursion_desired = req.metadata.recursion_desired;
    m.metadata.recursion_available = true;
    m.add_query(q.clone());
    let records = |ttl: u32, data: &[RData], m: &mut Message| {
        for d in data {
            m.add_answer(Record::from_rdata(q.name().clone(), ttl, d.clone()));
        }
    };
    match table.get(&(name.clone(), q.query_type())) {
        Some(Upstream::Records(ttl, data)) => records(*ttl, data, &mut m),
        Some(Upstream::TruncatedOverUdp(_, _)) if udp => m.metadata.truncation = true,
        Some(Upstream::TruncatedOverUdp(ttl, data)) => records(*ttl, data, &mut m),
        Some(Upstream::NxDomain(min)) => nxdomain(&mut m, *min),
        None if table.keys().any(|(n, _)| *n == name) => {}
        None => nxdomain(&mut m, 60),
    }
    m.to_vec().ok()
}

fn nxdomain(m: &mut Message, minimum: u32) {
    m.metadata.response_code = ResponseCode::NXDomain;
    let zone = Name::from_ascii("example.").expect("name");
    let soa = hickory_proto::rr::rdata::SOA::new(zone.clone(), zone.clone(), 1, 3600, 600, 86400, minimum);
    m.add_authority(Record::from_rdata(zone, 3600, RData::SOA(soa)));
}
