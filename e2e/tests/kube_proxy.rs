//! kube-proxy in both modes against our etcd + kube-apiserver, all inside network
//! namespaces this test creates (never the host's):
//!
//! ```text
//!   hub 10.a.b.1: etcd, kube-apiserver, the test's NodePort clients
//!    ├── node 10.a.b.10: kube-proxy (the node under test), its ClusterIP clients
//!    ├── b1   10.a.b.11: backend "b1" (TCP 8080, UDP 5353)
//!    └── b2   10.a.b.12: backend "b2"
//! ```
//!
//! Services and EndpointSlices are written by hand (no controllers), the backends are
//! threads of this test serving in their namespaces, and every check is traffic a user
//! would send: connections to ClusterIPs, NodePorts, the healthCheckNodePort, a UDP
//! conversation across a backend change, an established connection across a kube-proxy
//! restart; then the other mode takes over (removing this mode's rules) and `--cleanup`
//! removes everything. Real pods across nodes are in `services.rs`.
//!
//! Needs root, iproute2, nftables, iptables and prometheus's `promtool`
//! (hack/install-deps.sh); a missing prerequisite fails.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::time::Duration;

use e2e::apiserver::KubeApiserver;
use e2e::netns::{Network, command_in, enter_netns};
use e2e::nodes::Daemon;
use e2e::{Etcd, EtcdOptions, wait_for};

const NODE: &str = "kp-node";
const WAIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(200);

const WEB_IP: &str = "10.96.1.1";
const STICKY_IP: &str = "10.96.1.2";
const EMPTY_IP: &str = "10.96.1.3";
const LOCAL_IP: &str = "10.96.1.4";
const DNS_IP: &str = "10.96.1.5";
const WEB_NODE_PORT: u16 = 30080;
const LOCAL_NODE_PORT: u16 = 30081;
const LOCAL_HEALTH_PORT: u16 = 30082;

/// The control plane, the namespaces and the kube-proxy under test.
struct Setup {
    proxy: Option<Daemon>,
    api: KubeApiserver,
    _etcd: Etcd,
    dir: tempfile::TempDir,
    /// Last: the namespaces go once every process in them is gone.
    net: Network,
}

impl Setup {
    fn start() -> Setup {
        let net = Network::create(3);
        net.enter_hub();
        let etcd = Etcd::start(EtcdOptions::default());
        let api = KubeApiserver::start_on(
            net.hub_ip(),
            &etcd.endpoint(),
            &["--service-cluster-ip-range=10.96.0.0/16"],
        );
        // ClusterIP traffic needs a route before DNAT picks the real destination.
        ip_in(net.ns(0), &["route", "add", "default", "via", &net.hub_ip().to_string()]);
        let node = format!(
            r#"{{"apiVersion":"v1","kind":"Node","metadata":{{"name":"{NODE}","labels":{{"kubernetes.io/hostname":"{NODE}"}}}}}}"#
        );
        apply(&api, &node);
        let status =
            format!(r#"{{"status":{{"addresses":[{{"type":"InternalIP","address":"{}"}}]}}}}"#, net.ip(0));
        api.kubectl_ok(&["patch", "node", NODE, "--subresource=status", "--type=merge", "-p", &status]);
        serve(net.ns(1), "b1");
        serve(net.ns(2), "b2");
        Setup { proxy: None, api, _etcd: etcd, dir: tempfile::tempdir().expect("tempdir"), net }
    }

    fn node_ip(&self) -> Ipv4Addr {
        self.net.ip(0)
    }

    fn node_ns(&self) -> String {
        self.net.ns(0).to_owned()
    }

    fn start_proxy(&mut self, mode: &str) {
        let args = [
            format!("--kubeconfig={}", self.api.kubeconfig.display()),
            format!("--proxy-mode={mode}"),
            format!("--hostname-override={NODE}"),
            "--cluster-cidr=10.244.0.0/16".into(),
            "--metrics-bind-address=0.0.0.0:10249".into(),
            "-v=2".into(),
        ];
        let d = Daemon::start(
            &format!("kube-proxy-{mode}"),
            &e2e::bin("kube-proxy"),
            &args,
            Some(&self.node_ns()),
            self.dir.path(),
        );
        self.proxy = Some(d);
        // A fresh process reports 0 until its first sync is done.
        wait_for(&format!("kube-proxy ({mode}) synced"), WAIT, POLL, || {
            self.assert_proxy_running();
            (self.metric("kubeproxy_sync_proxy_rules_last_timestamp_seconds")? > 0.0).then_some(())
        });
    }

    fn assert_proxy_running(&mut self) {
        let p = self.proxy.as_mut().expect("kube-proxy started");
        assert!(p.is_running(), "kube-proxy exited:\n{}", p.log_tail(40));
    }

    fn kill_proxy(&mut self) {
        if let Some(mut p) = self.proxy.take() {
            p.kill();
        }
    }

    fn metrics_text(&self) -> Option<String> {
        get(SocketAddr::from((self.node_ip(), 10249)), "/metrics").ok().map(|(_, body)| body)
    }

    /// A metric's value (the first sample of that exact name).
    fn metric(&self, name: &str) -> Option<f64> {
        let text = self.metrics_text()?;
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
    }

    /// Asks `addr` from the node's namespace (as a process of the node would).
    fn ask_from_node(&self, addr: &str) -> std::io::Result<(String, String)> {
        let addr: SocketAddr = addr.parse().expect("address");
        in_netns(&self.node_ns(), move || ask(addr))
    }

    /// Waits until exactly `mode`'s rules are in the kernel. The first-sync metric that
    /// `start_proxy` waits for is shared by the IPv4 and IPv6 proxiers (as upstream's), so
    /// one family may still be syncing when it turns non-zero.
    fn wait_for_mode_rules(&self, mode: &str) {
        let mut last = (String::new(), String::new());
        let found = e2e::try_wait_for(WAIT, POLL, || {
            last = self.kernel_rules();
            only_mode_rules(mode, &last.0, &last.1).then_some(())
        });
        assert!(found.is_some(), "want only {mode} rules: {}\n{}", last.0, last.1);
    }

    /// The node's nftables tables and iptables rules, as `nft`/`iptables-save` list them.
    fn kernel_rules(&self) -> (String, String) {
        let ns = self.node_ns();
        let tables = run_in(&ns, &["nft", "list", "tables"]);
        let mut ipt = run_in(&ns, &["iptables-save"]);
        ipt.push_str(&run_in(&ns, &["ip6tables-save"]));
        (tables, ipt)
    }
}

/// `ip <args>` inside `ns`, checked.
fn ip_in(ns: &str, args: &[&str]) {
    let out = Command::new("ip").arg("-n").arg(ns).args(args).output().expect("ip");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Runs a command inside `ns`, returning its stdout; fails the test if it fails.
fn run_in(ns: &str, args: &[&str]) -> String {
    let mut cmd = Command::new(args[0]);
    command_in(&mut cmd, ns);
    let out = cmd
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {args:?}: {e}"));
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn apply(api: &KubeApiserver, manifest: &str) {
    let out = api.kubectl_stdin(&["apply", "-f", "-"], manifest);
    assert!(out.status.success(), "kubectl apply: {}\n{manifest}", String::from_utf8_lossy(&out.stderr));
}

/// Runs `f` on a thread inside network namespace `ns` (sockets it opens stay there).
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = ns.to_owned();
    std::thread::spawn(move || {
        enter_netns(&ns);
        f()
    })
    .join()
    .unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// A backend in namespace `ns`: TCP 8080 answers each line with `<name> <client address>`,
/// UDP 5353 answers each datagram with `<name>`. Threads of this test process, gone with it.
fn serve(ns: &str, name: &'static str) {
    let (tcp, udp) = in_netns(ns, || {
        (
            TcpListener::bind("0.0.0.0:8080").expect("bind tcp"),
            UdpSocket::bind("0.0.0.0:5353").expect("bind udp"),
        )
    });
    std::thread::spawn(move || {
        for conn in tcp.incoming().flatten() {
            std::thread::spawn(move || {
                let peer = conn.peer_addr().map(|a| a.ip().to_string()).unwrap_or_default();
                let mut w = conn.try_clone().expect("clone");
                let mut line = String::new();
                let mut r = BufReader::new(conn);
                while r.read_line(&mut line).is_ok_and(|n| n > 0) {
                    if writeln!(w, "{name} {peer}").is_err() {
                        return;
                    }
                    line.clear();
                }
            });
        }
    });
    std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        while let Ok((_, from)) = udp.recv_from(&mut buf) {
            let _ = udp.send_to(name.as_bytes(), from);
        }
    });
}

/// One line over `conn`: (backend name, client address the backend saw).
fn exchange(conn: &mut TcpStream) -> std::io::Result<(String, String)> {
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    conn.write_all(b"hi\n")?;
    let mut line = String::new();
    BufReader::new(conn.try_clone()?).read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next()) {
        (Some(n), Some(p)) => Ok((n.to_owned(), p.to_owned())),
        _ => Err(std::io::Error::new(ErrorKind::UnexpectedEof, format!("short answer {line:?}"))),
    }
}

/// A new connection to `addr` and one exchange. A connection that is refused fails at
/// once with ConnectionRefused; a dropped one with TimedOut after 5 s.
fn ask(addr: SocketAddr) -> std::io::Result<(String, String)> {
    let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    exchange(&mut conn)
}

/// A plain HTTP GET that reports errors instead of panicking: (status, body).
fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::Read;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)?;
    let text = String::from_utf8_lossy(&resp).to_string();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

fn service(name: &str, ip: &str, extra_spec: &str, ports: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"name":"{name}","namespace":"default"}},
"spec":{{"clusterIP":"{ip}",{extra_spec}"ports":[{ports}]}}}}"#
    )
}

/// An EndpointSlice for Service `svc` with endpoints (ip, nodeName), all ready.
fn slice(svc: &str, endpoints: &[(Ipv4Addr, &str)], port: u16, proto: &str, annotations: &str) -> String {
    let eps: Vec<String> = endpoints
        .iter()
        .map(|(ip, node)| {
            format!(r#"{{"addresses":["{ip}"],"nodeName":"{node}","conditions":{{"ready":true}}}}"#)
        })
        .collect();
    format!(
        r#"{{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{{"name":"{svc}-1","namespace":"default",
"labels":{{"kubernetes.io/service-name":"{svc}","endpointslice.kubernetes.io/managed-by":"e2e"}},"annotations":{{{annotations}}}}},
"addressType":"IPv4","endpoints":[{}],"ports":[{{"name":"p","port":{port},"protocol":"{proto}"}}]}}"#,
        eps.join(",")
    )
}

fn tcp_port(port: u16, node_port: Option<u16>) -> String {
    let np = node_port.map(|p| format!(r#","nodePort":{p}"#)).unwrap_or_default();
    format!(r#"{{"name":"p","port":{port},"protocol":"TCP","targetPort":8080{np}}}"#)
}

/// The whole scenario in `mode`, then a switch to `other` and `--cleanup`.
fn scenario(mode: &str, other: &str) {
    let mut s = Setup::start();
    let (b1, b2) = (s.net.ip(1), s.net.ip(2));
    s.start_proxy(mode);
    let before = chrono_like_now();
    let api = &s.api;

    // Trigger times have whole seconds and kube-proxy measures only those after its own
    // start: take one from a second that began after the start.
    let now = wait_for("the next second", WAIT, Duration::from_millis(50), || {
        Some(chrono_like_now()).filter(|n| *n != before)
    });
    apply(api, &service("web", WEB_IP, r#""type":"NodePort","#, &tcp_port(80, Some(WEB_NODE_PORT))));
    apply(
        api,
        &slice(
            "web",
            &[(b1, "elsewhere"), (b2, "elsewhere")],
            8080,
            "TCP",
            &format!(r#""endpoints.kubernetes.io/last-change-trigger-time":"{now}""#),
        ),
    );
    apply(api, &service("sticky", STICKY_IP, r#""sessionAffinity":"ClientIP","#, &tcp_port(80, None)));
    apply(api, &slice("sticky", &[(b1, "elsewhere"), (b2, "elsewhere")], 8080, "TCP", ""));
    apply(api, &service("empty", EMPTY_IP, "", &tcp_port(80, None)));
    apply(
        api,
        &service(
            "local",
            LOCAL_IP,
            &format!(
                r#""type":"LoadBalancer","externalTrafficPolicy":"Local","healthCheckNodePort":{LOCAL_HEALTH_PORT},"#
            ),
            &tcp_port(80, Some(LOCAL_NODE_PORT)),
        ),
    );
    apply(api, &slice("local", &[(b1, "elsewhere")], 8080, "TCP", ""));
    apply(api, &service("dns", DNS_IP, "", r#"{"name":"p","port":53,"protocol":"UDP","targetPort":5353}"#));
    apply(api, &slice("dns", &[(b1, "elsewhere")], 5353, "UDP", ""));

    // ClusterIP from the node: every endpoint answers over many connections.
    let web = format!("{WEB_IP}:80");
    wait_for("web's ClusterIP answers", WAIT, POLL, || s.ask_from_node(&web).ok());
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        seen.insert(s.ask_from_node(&web).expect("web answers").0);
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["b1", "b2"], "not every endpoint was chosen");

    // NodePort from another host (the hub): answered, and masqueraded so that the
    // backend answers through this node.
    let node_port = SocketAddr::from((s.node_ip(), WEB_NODE_PORT));
    let (_, client) = ask(node_port).expect("NodePort answers from the hub");
    assert_eq!(
        client,
        s.node_ip().to_string(),
        "NodePort traffic from off the node is masqueraded to the node's IP"
    );

    // sessionAffinity ClientIP: one client, one backend.
    let sticky = format!("{STICKY_IP}:80");
    let first = wait_for("sticky's ClusterIP answers", WAIT, POLL, || s.ask_from_node(&sticky).ok()).0;
    for _ in 0..20 {
        assert_eq!(
            s.ask_from_node(&sticky).expect("sticky answers").0,
            first,
            "ClientIP affinity did not pin a backend"
        );
    }

    // A Service without endpoints is rejected at once, not left to time out. (It was created
    // after sticky: until kube-proxy's next sync, the packet still goes out by the default
    // route and the hub answers "network unreachable".)
    let refused = || match s.ask_from_node(&format!("{EMPTY_IP}:80")) {
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => Some(Ok(())),
        Err(e) if e.kind() == ErrorKind::NetworkUnreachable => None,
        other => Some(Err(other)),
    };
    if let Err(other) = wait_for("empty's ClusterIP rules", WAIT, POLL, refused) {
        panic!("a Service without endpoints should refuse connections, got {other:?}");
    }

    // externalTrafficPolicy Local: the health check says 503 without a local endpoint,
    // 200 once the endpoint is on this node.
    let hc = SocketAddr::from((s.node_ip(), LOCAL_HEALTH_PORT));
    let (code, body) = wait_for("healthCheckNodePort serving", WAIT, POLL, || get(hc, "/").ok());
    assert_eq!(code, 503, "healthCheckNodePort without local endpoints: {body}");
    assert!(body.contains(r#""localEndpoints": 0"#), "{body}");
    apply(api, &slice("local", &[(b1, NODE)], 8080, "TCP", ""));
    let body =
        wait_for("healthCheckNodePort 200", WAIT, POLL, || get(hc, "/").ok().filter(|(c, _)| *c == 200)).1;
    assert!(body.contains(r#""localEndpoints": 1"#) && body.contains(r#""name": "local""#), "{body}");
    // Local keeps the client's address (no masquerade), so the reply must come back through
    // the node to be un-DNATed, as a pod's does through its node's bridge. b1 sits beside
    // the node on the hub's bridge here, so route its replies to the hub via the node.
    let hub = format!("{}/32", s.net.hub_ip());
    let node_ip = s.node_ip().to_string();
    ip_in(s.net.ns(1), &["route", "add", &hub, "via", &node_ip]);
    wait_for("Local NodePort answers", WAIT, POLL, || {
        ask(SocketAddr::from((s.node_ip(), LOCAL_NODE_PORT))).ok()
    });
    ip_in(s.net.ns(1), &["route", "del", &hub, "via", &node_ip]);

    // UDP: a conversation goes on with the new backend once its only backend is replaced,
    // because kube-proxy deletes the conntrack entry that pinned it to the old one.
    let udp = in_netns(&s.node_ns(), || UdpSocket::bind("0.0.0.0:0").expect("udp"));
    udp.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let dns: SocketAddr = format!("{DNS_IP}:53").parse().unwrap();
    let mut talk = || {
        udp.send_to(b"q", dns).ok()?;
        let mut buf = [0u8; 64];
        let (n, _) = udp.recv_from(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    };
    assert_eq!(wait_for("UDP Service answers", WAIT, POLL, &mut talk), "b1");
    apply(api, &slice("dns", &[(b2, "elsewhere")], 5353, "UDP", ""));
    wait_for("UDP conversation moves to the new backend", WAIT, POLL, || (talk()? == "b2").then_some(()));

    // Scaling to zero: connections are refused at once, on the ClusterIP and the NodePort.
    apply(api, &slice("web", &[], 8080, "TCP", ""));
    wait_for("web refuses connections without endpoints", WAIT, POLL, || match s.ask_from_node(&web) {
        Ok(_) => None,
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => Some(()),
        Err(e) => panic!("expected a fast REJECT, got {e}"),
    });
    match ask(node_port) {
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
        other => panic!("a NodePort without endpoints should refuse connections, got {other:?}"),
    }
    apply(api, &slice("web", &[(b1, "elsewhere"), (b2, "elsewhere")], 8080, "TCP", ""));
    wait_for("web answers again", WAIT, POLL, || s.ask_from_node(&web).ok());

    // /metrics is valid Prometheus text with upstream's names; the slice carrying a
    // trigger time was measured.
    let text = s.metrics_text().expect("metrics");
    promtool_check(&text);
    for name in [
        "kubeproxy_sync_proxy_rules_duration_seconds_bucket",
        "kubeproxy_network_programming_duration_seconds_count",
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
        "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
        "kubeproxy_sync_proxy_rules_endpoint_changes_total",
        "kubeproxy_sync_proxy_rules_service_changes_total",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics:\n{text}");
    }
    assert!(s.metric("kubeproxy_network_programming_duration_seconds_count").unwrap_or(0.0) >= 1.0, "{text}");
    let (code, body) = get(SocketAddr::from((s.node_ip(), 10256)), "/healthz").expect("healthz");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("lastUpdated") && body.contains(r#""nodeEligible": true"#), "{body}");
    let (code, _) = get(SocketAddr::from((s.node_ip(), 10256)), "/livez").expect("livez");
    assert_eq!(code, 200);

    // A restart keeps established connections flowing (conntrack holds their NAT), both
    // while kube-proxy is gone and after the new one rewrote every rule.
    let web_addr: SocketAddr = web.parse().unwrap();
    let mut conn =
        in_netns(&s.node_ns(), move || TcpStream::connect_timeout(&web_addr, Duration::from_secs(5)))
            .expect("connect to web");
    let (backend, _) = exchange(&mut conn).expect("exchange");
    s.kill_proxy();
    assert_eq!(exchange(&mut conn).expect("exchange with kube-proxy down").0, backend);
    s.start_proxy(mode);
    assert_eq!(exchange(&mut conn).expect("exchange after the restart").0, backend);
    s.ask_from_node(&web).expect("new connections after the restart");

    // The other mode takes over: this mode's rules go, the other's work.
    s.wait_for_mode_rules(mode);
    s.kill_proxy();
    s.start_proxy(other);
    s.wait_for_mode_rules(other);
    s.ask_from_node(&web).expect("web answers in the other mode");

    // --cleanup removes everything either mode wrote.
    s.kill_proxy();
    let out = run_in(&s.node_ns(), &[e2e::bin("kube-proxy").to_str().unwrap(), "--cleanup"]);
    let (tables, ipt) = s.kernel_rules();
    assert!(!tables.contains("kube-proxy"), "nftables table left after --cleanup: {tables}\n{out}");
    assert!(!ipt.contains("KUBE-"), "iptables chains left after --cleanup:\n{ipt}");
}

/// Exactly `mode`'s rules are in the kernel.
fn only_mode_rules(mode: &str, tables: &str, ipt: &str) -> bool {
    let has_table = tables.contains("table ip kube-proxy");
    let has_chains = ipt.contains(":KUBE-SERVICES") && ipt.contains("KUBE-SVC-");
    match mode {
        "nftables" => has_table && !ipt.contains("KUBE-"),
        _ => has_chains && !has_table,
    }
}

fn promtool_check(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (package prometheus; run hack/install-deps.sh)");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    // Upstream names these gauges with a `_total` suffix; promtool's lint (exit 3) flags
    // them. Any other problem, or a parse error (exit 1), fails.
    const UPSTREAM_GAUGES: &[&str] =
        &["kubeproxy_sync_proxy_rules_no_local_endpoints_total", "kubeproxy_sync_proxy_rules_iptables_total"];
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let upstream_names_only = out.status.code() == Some(3)
        && text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .all(|l| UPSTREAM_GAUGES.iter().any(|g| l.starts_with(&format!("{g} non-counter metrics"))));
    assert!(
        out.status.success() || upstream_names_only,
        "promtool check metrics failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// RFC 3339 UTC with seconds, as the EndpointSlice controller writes trigger times.
fn chrono_like_now() -> String {
    let out = Command::new("date").args(["-u", "+%Y-%m-%dT%H:%M:%SZ"]).output().expect("date");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn nftables_mode_then_switch_to_iptables_and_cleanup() {
    scenario("nftables", "iptables");
}

#[test]
fn iptables_mode_then_switch_to_nftables_and_cleanup() {
    scenario("iptables", "nftables");
}
