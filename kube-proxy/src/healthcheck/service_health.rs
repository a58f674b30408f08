//! One HTTP server per `externalTrafficPolicy: Local` LoadBalancer Service, on its
//! `healthCheckNodePort` at the node's NodePort addresses: 200 when this node has ready
//! endpoints of the Service (and kube-proxy is healthy), 503 otherwise, with upstream's
//! JSON body, so an external load balancer sends traffic only to nodes that keep it local.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use component_base::shutdown::Shutdown;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use parking_lot::Mutex;

use super::ProxierHealth;
use crate::nftables::Family;
use crate::serviceport::NamespacedName;

struct Instance {
    port: u16,
    endpoints: Arc<AtomicUsize>,
    /// Stops this Service's listeners.
    stop: Shutdown,
}

/// The health-check servers of one IP family.
pub struct ServiceHealthServer {
    family: Family,
    /// Where to listen; the family's unspecified address when NodePorts match everything.
    addrs: Vec<IpAddr>,
    rt: tokio::runtime::Handle,
    proxier: Arc<ProxierHealth>,
    services: Mutex<HashMap<NamespacedName, Instance>>,
}

impl ServiceHealthServer {
    /// `addrs` empty means every address of `family`.
    pub fn new(
        family: Family,
        addrs: Vec<IpAddr>,
        rt: tokio::runtime::Handle,
        proxier: Arc<ProxierHealth>,
    ) -> Self {
        let addrs = if addrs.is_empty() {
            vec![match family {
                Family::Ip => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                Family::Ip6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            }]
        } else {
            addrs
        };
        Self { family, addrs, rt, proxier, services: Mutex::new(HashMap::new()) }
    }

    /// Opens servers for new Services, closes those of Services gone (or moved to another
    /// port), and leaves the rest running. A port that cannot be opened is logged and
    /// retried on the next sync.
    pub fn sync_services(&self, wanted: &BTreeMap<NamespacedName, u16>) {
        let mut services = self.services.lock();
        services.retain(|nsn, inst| {
            let keep = wanted.get(nsn) == Some(&inst.port);
            if !keep {
                tracing::info!(service = %nsn, port = inst.port, "closing healthcheck");
                inst.stop.trigger();
            }
            keep
        });
        for (nsn, port) in wanted {
            if services.contains_key(nsn) {
                continue;
            }
            let endpoints = Arc::new(AtomicUsize::new(0));
            let stop = Shutdown::new();
            match self.listen_all(nsn, *port, &endpoints, &stop) {
                Ok(()) => {
                    tracing::info!(service = %nsn, port, family = ?self.family, "opening healthcheck");
                    services.insert(nsn.clone(), Instance { port: *port, endpoints, stop });
                }
                Err(err) => {
                    stop.trigger();
                    tracing::error!(service = %nsn, port, %err, "failed to start healthcheck");
                }
            }
        }
    }

    /// Sets each Service's count of local ready endpoints (0 for those not listed).
    pub fn sync_endpoints(&self, counts: &HashMap<NamespacedName, usize>) {
        for (nsn, inst) in self.services.lock().iter() {
            inst.endpoints.store(counts.get(nsn).copied().unwrap_or(0), Ordering::SeqCst);
        }
    }

    fn listen_all(
        &self,
        nsn: &NamespacedName,
        port: u16,
        endpoints: &Arc<AtomicUsize>,
        stop: &Shutdown,
    ) -> std::io::Result<()> {
        // Sockets register with the runtime's reactor; this runs on the sync thread.
        let _guard = self.rt.enter();
        let mut listeners = Vec::new();
        for ip in &self.addrs {
            listeners.push(bind(SocketAddr::new(*ip, port))?);
        }
        for listener in listeners {
            let nsn = nsn.clone();
            let endpoints = endpoints.clone();
            let proxier = self.proxier.clone();
            let svc = hyper::service::service_fn(move |_req: Request<hyper::body::Incoming>| {
                let body = respond(&nsn, endpoints.load(Ordering::SeqCst), proxier.is_healthy());
                async move { Ok::<_, Infallible>(body) }
            });
            self.rt.spawn(component_base::http::serve(listener, None, svc, stop.clone(), Default::default()));
        }
        Ok(())
    }

    /// Closes every server (on shutdown).
    pub fn close_all(&self) {
        for (_, inst) in self.services.lock().drain() {
            inst.stop.trigger();
        }
    }
}

/// Binds a listening socket; an IPv6 wildcard is IPv6-only, so the IPv4 family's server
/// can hold the same port on 0.0.0.0.
fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => {
            let s = tokio::net::TcpSocket::new_v6()?;
            let one: libc::c_int = 1;
            // SAFETY: a valid socket and a c_int option value of the size given.
            let rc = unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::IPPROTO_IPV6,
                    libc::IPV6_V6ONLY,
                    &one as *const libc::c_int as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc < 0 {
                return Err(std::io::Error::last_os_error());
            }
            s
        }
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(128)
}

/// Upstream's response: status by local endpoints, a JSON body naming the Service.
fn respond(nsn: &NamespacedName, count: usize, proxy_healthy: bool) -> Response<Full<Bytes>> {
    let status = if count != 0 && proxy_healthy { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let body = format!(
        "{{\n\t\"service\": {{\n\t\t\"namespace\": {:?},\n\t\t\"name\": {:?}\n\t}},\n\t\"localEndpoints\": {count},\n\t\"serviceProxyHealthy\": {proxy_healthy}\n}}",
        nsn.namespace, nsn.name
    );
    Response::builder()
        .status(status)
        .header("Content-Type", "application/json")
        .header("X-Content-Type-Options", "nosniff")
        .body(Full::new(Bytes::from(body)))
        .expect("valid response")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use std::io::{Read, Write};
    use std::time::Duration;

    fn get(addr: SocketAddr) -> (u16, String) {
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(s, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let code = out.split_whitespace().nth(1).unwrap().parse().unwrap();
        (code, out.split_once("\r\n\r\n").unwrap().1.to_owned())
    }

    #[test]
    fn answers_503_then_200_then_closes() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let health = ProxierHealth::new(Duration::from_secs(60), Metrics::new());
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let server = ServiceHealthServer::new(Family::Ip, vec![ip], rt.handle().clone(), health);
        let nsn = NamespacedName::new("ns1", "svc1");
        server.sync_services(&[(nsn.clone(), port)].into());
        let addr = SocketAddr::new(ip, port);
        let (code, body) = get(addr);
        assert_eq!(code, 503);
        assert_eq!(
            body,
            "{\n\t\"service\": {\n\t\t\"namespace\": \"ns1\",\n\t\t\"name\": \"svc1\"\n\t},\n\t\"localEndpoints\": 0,\n\t\"serviceProxyHealthy\": true\n}"
        );
        server.sync_endpoints(&[(nsn.clone(), 2)].into());
        let (code, body) = get(addr);
        assert_eq!(code, 200);
        assert!(body.contains("\"localEndpoints\": 2"), "{body}");
        server.sync_services(&BTreeMap::new());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            assert!(std::time::Instant::now() < deadline, "still listening after close");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
