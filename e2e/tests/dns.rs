//! Cluster DNS: our kube-dns against our etcd + kube-apiserver (and the controller-manager's
//! EndpointSlice controller, for endpoints made from pods), queried with real `dig` over
//! UDP and TCP on a loopback address; names outside the cluster go to a fake upstream on
//! loopback that counts what reaches it. The kubelet's side (a pod's /etc/resolv.conf)
//! runs real pods in containerd.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::rr::rdata::{A, TXT};
use hickory_proto::rr::{RData, RecordType};

use e2e::apiserver::KubeApiserver;
use e2e::component::{Component, KubeControllerManager};
use e2e::dns::{FakeUpstream, KubeDns, Upstream};
use e2e::{Etcd, EtcdOptions, wait_for};

const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);

/// The control plane kube-dns watches. Field order is drop order: kube-dns first.
struct Plane {
    dns: KubeDns,
    upstream: FakeUpstream,
    _kcm: Option<Component>,
    api: KubeApiserver,
    _etcd: Etcd,
}

impl Plane {
    fn start(kcm: bool, upstream: FakeUpstream, dns_args: &[&str]) -> Plane {
        let etcd = Etcd::start(EtcdOptions::default());
        let api = KubeApiserver::start(&etcd.endpoint(), &[]);
        let kcm = kcm.then(|| {
            KubeControllerManager::start(&api, &["--leader-elect=false", "--controllers=endpointslice"])
        });
        let dns = KubeDns::start(&api, upstream.addr, dns_args);
        Plane { dns, upstream, _kcm: kcm, api, _etcd: etcd }
    }

    fn apply(&self, yaml: &str) {
        let out = self.api.kubectl_stdin(&["apply", "-f", "-"], yaml);
        assert!(out.status.success(), "apply: {}\n{yaml}", String::from_utf8_lossy(&out.stderr));
    }

    fn cluster_ip(&self, ns: &str, svc: &str) -> String {
        self.api.kubectl_ok(&["get", "svc", "-n", ns, svc, "-o", "jsonpath={.spec.clusterIP}"])
    }

    /// Waits until `dig args` satisfies `pred` (the watches are eventually consistent).
    fn wait_dig(&self, args: &[&str], what: &str, pred: impl Fn(&e2e::dns::Dig) -> bool) -> e2e::dns::Dig {
        let mut last = None;
        wait_for(what, WAIT, POLL, || {
            let d = self.dns.dig(args);
            let ok = pred(&d);
            last = Some(d.raw.clone());
            ok.then_some(d)
        })
    }
}

fn upstream_table() -> FakeUpstream {
    FakeUpstream::start(vec![
        (
            "www.example.com.",
            RecordType::A,
            Upstream::Records(300, vec![RData::A(A([192, 0, 2, 53].into()))]),
        ),
        ("short.example.", RecordType::A, Upstream::Records(3, vec![RData::A(A([192, 0, 2, 3].into()))])),
        ("nx.example.", RecordType::A, Upstream::NxDomain(20)),
        (
            "big.example.",
            RecordType::TXT,
            Upstream::TruncatedOverUdp(
                60,
                (0..40).map(|i| RData::TXT(TXT::new(vec![format!("{i:02}-{}", "x".repeat(40))]))).collect(),
            ),
        ),
        (
            "53.2.0.192.in-addr.arpa.",
            RecordType::PTR,
            Upstream::Records(
                60,
                vec![RData::PTR(hickory_proto::rr::rdata::PTR(
                    hickory_proto::rr::Name::from_ascii("www.example.com.").unwrap(),
                ))],
            ),
        ),
    ])
}

/// Pods made Ready by hand (no kubelet here): the EndpointSlice controller turns them into
/// endpoints with the hostnames of those whose `subdomain` names the headless Service.
fn make_ready(api: &KubeApiserver, name: &str, ip: &str, ready: bool) {
    let status = format!(
        r#"{{"status":{{"phase":"Running","podIP":"{ip}","podIPs":[{{"ip":"{ip}"}}],"conditions":[{{"type":"Ready","status":"{}"}}]}}}}"#,
        if ready { "True" } else { "False" }
    );
    api.kubectl_ok(&[
        "patch",
        "pod",
        "-n",
        "app",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        &status,
    ]);
}

#[test]
fn cluster_names_answered_as_the_specification() {
    let p = Plane::start(true, upstream_table(), &[]);
    let mut pods = String::new();
    for host in ["db-0", "db-1", "db-2"] {
        pods.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {host}, namespace: app, labels: {{app: db}}}}\n\
             spec:\n  hostname: {host}\n  subdomain: db\n  containers: [{{name: c, image: localhost/busybox:1.35}}]\n"
        ));
    }
    let big_endpoints: String = (1..=60)
        .map(|i| format!("- addresses: [\"10.251.0.{i}\"]\n  conditions: {{ready: true}}\n"))
        .collect();
    p.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: app}}\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: app}}\n\
         spec:\n  ports: [{{name: http, port: 80, protocol: TCP}}, {{name: dns, port: 53, protocol: UDP}}]\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {{name: db, namespace: app}}\n\
         spec:\n  clusterIP: None\n  selector: {{app: db}}\n  ports: [{{name: pg, port: 5432}}]\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {{name: ext, namespace: app}}\n\
         spec: {{type: ExternalName, externalName: www.example.com}}\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {{name: big, namespace: app}}\nspec: {{clusterIP: None}}\n---\n\
         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: big-1, namespace: app, labels: {{kubernetes.io/service-name: big}}}}\n\
         addressType: IPv4\nports: [{{name: x, port: 1}}]\nendpoints:\n{big_endpoints}{pods}"
    ));
    make_ready(&p.api, "db-0", "10.250.0.10", true);
    make_ready(&p.api, "db-1", "10.250.0.11", true);
    make_ready(&p.api, "db-2", "10.250.0.12", false);
    let web_ip = p.cluster_ip("app", "web");

    // A ClusterIP Service: its address, authoritative, with the configured TTL.
    let a = p.wait_dig(&["web.app.svc.cluster.local", "A"], "web's A record", |d| !d.answer.is_empty());
    assert_eq!(a.status, "NOERROR");
    assert!(a.has_flag("aa"), "{}", a.raw);
    assert_eq!(a.data("A"), [web_ip.clone()]);
    assert_eq!(a.answer[0].ttl, 30);
    // Names compare case-insensitively; the answer keeps the question's spelling.
    let upper = p.dns.dig(&["WEB.App.SVC.cluster.local", "A"]);
    assert_eq!(upper.data("A"), [web_ip.clone()]);
    assert_eq!(upper.answer[0].name, "WEB.App.SVC.cluster.local.");
    // No AAAA for an IPv4 Service, but the name exists: NODATA with the zone's SOA.
    let aaaa = p.dns.dig(&["web.app.svc.cluster.local", "AAAA"]);
    assert_eq!((aaaa.status.as_str(), aaaa.answer.len()), ("NOERROR", 0), "{}", aaaa.raw);
    assert_eq!(aaaa.authority[0].rtype, "SOA");
    // SRV for named ports, with the target's address as additional.
    let srv = p.dns.dig(&["_http._tcp.web.app.svc.cluster.local", "SRV"]);
    assert_eq!(srv.data("SRV"), ["0 100 80 web.app.svc.cluster.local."]);
    assert!(srv.additional.iter().any(|r| r.rtype == "A" && r.data == web_ip), "{}", srv.raw);
    assert_eq!(
        p.dns.dig(&["_dns._udp.web.app.svc.cluster.local", "SRV"]).data("SRV"),
        ["0 100 53 web.app.svc.cluster.local."]
    );
    assert_eq!(p.dns.dig(&["_dns._tcp.web.app.svc.cluster.local", "SRV"]).status, "NXDOMAIN");
    // PTR for the ClusterIP.
    assert_eq!(p.dns.dig(&["-x", &web_ip]).data("PTR"), ["web.app.svc.cluster.local."]);

    // A headless Service: one record per ready endpoint (db-2 is not ready).
    let db = p.wait_dig(&["db.app.svc.cluster.local", "A"], "db's endpoints", |d| d.answer.len() == 2);
    assert_eq!(db.data("A"), ["10.250.0.10", "10.250.0.11"]);
    assert_eq!(p.dns.dig(&["db-1.db.app.svc.cluster.local", "A"]).data("A"), ["10.250.0.11"]);
    assert_eq!(p.dns.dig(&["db-2.db.app.svc.cluster.local", "A"]).status, "NXDOMAIN", "not ready");
    assert_eq!(
        p.dns.dig(&["_pg._tcp.db.app.svc.cluster.local", "SRV"]).data("SRV"),
        ["0 50 5432 db-0.db.app.svc.cluster.local.", "0 50 5432 db-1.db.app.svc.cluster.local."]
    );
    assert_eq!(p.dns.dig(&["-x", "10.250.0.11"]).data("PTR"), ["db-1.db.app.svc.cluster.local."]);
    // The watch follows readiness.
    make_ready(&p.api, "db-2", "10.250.0.12", true);
    p.wait_dig(&["db.app.svc.cluster.local", "A"], "db-2 ready", |d| d.answer.len() == 3);
    assert_eq!(p.dns.dig(&["db-2.db.app.svc.cluster.local", "A"]).data("A"), ["10.250.0.12"]);

    // ExternalName: a CNAME, and the target resolved upstream.
    let ext = p.dns.dig(&["ext.app.svc.cluster.local", "A"]);
    assert_eq!(ext.status, "NOERROR");
    assert_eq!(ext.data("CNAME"), ["www.example.com."]);
    assert_eq!(ext.data("A"), ["192.0.2.53"], "{}", ext.raw);

    // Pod records, the schema version.
    assert_eq!(p.dns.dig(&["10-250-0-99.app.pod.cluster.local", "A"]).data("A"), ["10.250.0.99"]);
    assert_eq!(p.dns.dig(&["10-250-0-99.nosuchns.pod.cluster.local", "A"]).status, "NXDOMAIN");
    assert_eq!(p.dns.dig(&["dns-version.cluster.local", "TXT"]).data("TXT"), ["\"1.1.0\""]);

    // NXDOMAIN for what does not exist, NODATA for what does: what a resolver walking the
    // search path needs (and every answer from us, none forwarded).
    for (name, status, answers) in [
        ("nope.app.svc.cluster.local", "NXDOMAIN", 0),
        ("app.svc.cluster.local", "NOERROR", 0),
        ("nosuchns.svc.cluster.local", "NXDOMAIN", 0),
        ("svc.cluster.local", "NOERROR", 0),
        ("www.example.com.app.svc.cluster.local", "NXDOMAIN", 0),
        ("www.example.com.svc.cluster.local", "NXDOMAIN", 0),
        ("www.example.com.cluster.local", "NXDOMAIN", 0),
    ] {
        let d = p.dns.dig(&[name, "A"]);
        assert_eq!((d.status.as_str(), d.answer.len()), (status, answers), "{name}: {}", d.raw);
        assert!(d.has_flag("aa"), "{name}: {}", d.raw);
        assert_eq!(d.authority.first().map(|r| r.rtype.as_str()), Some("SOA"), "{name}: {}", d.raw);
    }
    assert_eq!(p.upstream.asked("www.example.com.app.svc.cluster.local."), 0);

    // TCP; and a UDP answer bigger than 512 bytes without EDNS is truncated (TC), while
    // over TCP it is whole.
    assert_eq!(p.dns.dig(&["+tcp", "web.app.svc.cluster.local", "A"]).data("A"), [web_ip.clone()]);
    let big = p.wait_dig(&["+tcp", "big.app.svc.cluster.local", "A"], "big's 60 endpoints", |d| {
        d.answer.len() == 60
    });
    assert!(!big.has_flag("tc"));
    let truncated = p.dns.dig(&["+noedns", "+ignore", "big.app.svc.cluster.local", "A"]);
    assert!(truncated.has_flag("tc"), "{}", truncated.raw);
    assert!(truncated.answer.len() < 60, "{}", truncated.raw);
    let edns = p.dns.dig(&["+bufsize=4096", "+ignore", "big.app.svc.cluster.local", "A"]);
    assert!(!edns.has_flag("tc") && edns.answer.len() == 60, "{}", edns.raw);

    // Deletions are followed.
    p.api.kubectl_ok(&["delete", "svc", "-n", "app", "web"]);
    p.wait_dig(&["web.app.svc.cluster.local", "A"], "web gone", |d| d.status == "NXDOMAIN");
    assert!(p.dns.dig(&["-x", &web_ip]).data("PTR").is_empty());

    let requests = p.dns.metric("coredns_dns_requests_total", &["type=\"A\"", "proto=\"udp\""]);
    assert!(requests >= 10.0, "coredns_dns_requests_total {requests}");
    assert!(
        p.dns.metric("coredns_dns_responses_total", &["rcode=\"NXDOMAIN\"", "plugin=\"kubernetes\""]) >= 5.0
    );
}

#[test]
fn other_names_forwarded_cached_and_metrics() {
    let p = Plane::start(false, upstream_table(), &[]);
    let (code, body) = p.dns.http(p.dns.health_port, "/health");
    assert_eq!((code, body.as_str()), (200, "ok"));

    // Forwarded, then answered from the cache: the upstream sees one question, and the
    // TTL is capped at --cache-ttl (30) and counts down.
    let first = p.dns.dig(&["www.example.com", "A"]);
    assert_eq!(first.status, "NOERROR", "{}", first.raw);
    assert_eq!(first.data("A"), ["192.0.2.53"]);
    assert!(!first.has_flag("aa"), "a forwarded answer is not authoritative: {}", first.raw);
    assert!(first.has_flag("ra"));
    assert_eq!(first.answer[0].ttl, 30, "{}", first.raw);
    let second = p.dns.dig(&["WWW.example.com", "A"]);
    assert_eq!(second.data("A"), ["192.0.2.53"]);
    assert!(second.answer[0].ttl <= 30);
    assert_eq!(p.upstream.asked("www.example.com."), 1, "the second answer came from the cache");
    assert!(p.dns.metric("coredns_cache_hits_total", &["type=\"success\""]) >= 1.0);
    assert!(p.dns.metric("coredns_cache_misses_total", &[]) >= 1.0);

    // The cache respects the upstream's shorter TTL (3 s): asked again once it expired.
    assert_eq!(p.dns.dig(&["short.example", "A"]).answer[0].ttl, 3);
    p.dns.dig(&["short.example", "A"]);
    assert_eq!(p.upstream.asked("short.example."), 1);
    wait_for(
        "short.example to expire from the cache",
        Duration::from_secs(20),
        Duration::from_millis(500),
        || {
            p.dns.dig(&["short.example", "A"]);
            (p.upstream.asked("short.example.") == 2).then_some(())
        },
    );

    // Denials are forwarded and cached too (NXDOMAIN with the upstream's SOA).
    let nx = p.dns.dig(&["nx.example", "A"]);
    assert_eq!(nx.status, "NXDOMAIN", "{}", nx.raw);
    assert!(!nx.has_flag("aa"));
    assert_eq!(p.dns.dig(&["nx.example", "A"]).status, "NXDOMAIN");
    assert_eq!(p.upstream.asked("nx.example."), 1);
    assert!(p.dns.metric("coredns_cache_hits_total", &["type=\"denial\""]) >= 1.0);

    // An upstream answer truncated over UDP is fetched again over TCP; the client gets it
    // whole over TCP, or truncated to its own UDP size.
    let big = p.dns.dig(&["+tcp", "big.example", "TXT"]);
    assert_eq!(big.answer.len(), 40, "{}", big.raw);
    let small = p.dns.dig(&["+ignore", "+bufsize=1232", "big.example", "TXT"]);
    assert!(small.has_flag("tc"), "{}", small.raw);

    // Reverse names of addresses that are not the cluster's go upstream as well.
    assert_eq!(p.dns.dig(&["-x", "192.0.2.53"]).data("PTR"), ["www.example.com."]);

    // /metrics: request counts by type and rcode, durations, cache and forward counters,
    // in a form promtool accepts.
    let forwarded = p.dns.metric("coredns_forward_requests_total", &[&format!("to=\"{}\"", p.upstream.addr)]);
    assert!(forwarded >= 4.0, "coredns_forward_requests_total {forwarded}");
    assert!(p.dns.metric("coredns_dns_responses_total", &["plugin=\"cache\""]) >= 2.0);
    assert!(p.dns.metric("coredns_dns_request_duration_seconds_count", &["type=\"A\""]) >= 5.0);
    let (code, text) = p.dns.http(p.dns.metrics_port, "/metrics");
    assert_eq!(code, 200);
    promtool_check(&text);

    // With the upstream gone, an uncached name fails with SERVFAIL (after the forwarding
    // deadline), while cluster names still answer.
    p.upstream.stop();
    let failed = p.dns.dig(&["+time=10", "gone.example", "A"]);
    assert_eq!(failed.status, "SERVFAIL", "{}", failed.raw);
    assert_eq!(p.dns.dig(&["kubernetes.default.svc.cluster.local", "A"]).answer.len(), 1);
}

fn promtool_check(text: &str) {
    use std::io::Write;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus; hack/install-deps.sh installs it)");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The lines of a resolv.conf: (nameservers, search domains, options).
fn resolv(text: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut ns, mut search, mut options) = (Vec::new(), Vec::new(), Vec::new());
    for line in text.lines() {
        let mut w = line.split_whitespace();
        match w.next() {
            Some("nameserver") => ns.extend(w.map(String::from)),
            Some("search") => search = w.map(String::from).collect(),
            Some("options") => options.extend(w.map(String::from)),
            _ => {}
        }
    }
    (ns, search, options)
}

/// Real pods in containerd: the kubelet writes each pod's /etc/resolv.conf by dnsPolicy
/// (ClusterFirst: clusterDNS with the cluster search path and ndots:5; Default: the node's
/// --resolv-conf; None: only dnsConfig), sets hostname/subdomain as the pod's name, and a
/// ClusterFirst pod resolves a Service through kube-dns. kube-dns listens on the pod
/// network's gateway (port 53) and is the kubelet's clusterDNS, so no Service routing
/// (kube-proxy) is needed to reach it here.
#[test]
fn pods_get_resolv_conf_by_dns_policy_and_resolve_services() {
    use e2e::apiserver::ADMIN_TOKEN;
    use e2e::containerd::{self, BUSYBOX, Containerd};
    use e2e::kubelet::Kubelet;

    assert!(
        containerd::available(),
        "this test runs pods: it needs root and containerd (hack/install-deps.sh)"
    );
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(&etcd.endpoint(), &[]);
    let ctrd = Containerd::start();
    // The bridge's gateway, the first address of the pod CIDR: reachable from every pod.
    let gateway: std::net::Ipv4Addr = {
        let base: std::net::Ipv4Addr = ctrd.pod_cidr.split('/').next().unwrap().parse().unwrap();
        let [a, b, c, _] = base.octets();
        [a, b, c, 1].into()
    };
    let node_resolv = ctrd.dir.path().join("node-resolv.conf");
    std::fs::write(&node_resolv, "nameserver 192.0.2.1\nsearch corp.example\noptions timeout:2\n").unwrap();
    let kubelet = Kubelet::start(
        Some(&api),
        &ctrd,
        "dns-node",
        None,
        &format!("clusterDNS: [\"{gateway}\"]\nresolvConf: {}\n", node_resolv.display()),
    );
    let pod = |name: &str, extra: &str, script: &str| {
        format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  nodeName: dns-node\n{extra}  \
             containers:\n  - name: c\n    image: {BUSYBOX}\n    command: [sh, -c, '{script}; echo ---; sleep 3600']\n"
        )
    };
    let apply = |yaml: &str| {
        let out = api.kubectl_stdin(&["apply", "-f", "-"], yaml);
        assert!(out.status.success(), "apply: {}\n{yaml}", String::from_utf8_lossy(&out.stderr));
    };
    let logs = |name: &str| -> String {
        wait_for(&format!("pod {name}'s output"), Duration::from_secs(120), POLL, || {
            let (code, body) = kubelet.get(&format!("/containerLogs/default/{name}/c"), Some(ADMIN_TOKEN));
            (code == 200 && body.contains("---")).then_some(body)
        })
    };
    apply(&format!(
        "{}{}",
        pod("host-dns", "  dnsPolicy: Default\n", "cat /etc/resolv.conf"),
        pod(
            "custom-dns",
            "  dnsPolicy: None\n  dnsConfig:\n    nameservers: [192.0.2.99]\n    searches: [my.example]\n    \
             options: [{name: ndots, value: \"2\"}, {name: edns0}]\n",
            "cat /etc/resolv.conf"
        ),
    ));
    let (ns, search, options) = resolv(&logs("host-dns"));
    assert_eq!(
        (ns, search, options),
        (vec!["192.0.2.1".into()], vec!["corp.example".into()], vec!["timeout:2".into()])
    );
    let (ns, search, options) = resolv(&logs("custom-dns"));
    assert_eq!(ns, ["192.0.2.99"]);
    assert_eq!(search, ["my.example"]);
    let mut options = options;
    options.sort();
    assert_eq!(options, ["edns0", "ndots:2"]);

    // The pods made the bridge (and its gateway address): kube-dns can serve there now.
    let upstream = upstream_table();
    let dns = KubeDns::start_at(&api, Some(SocketAddr::from((gateway, 53))), upstream.addr, &[]);
    apply(
        "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec:\n  ports: [{name: http, port: 80}]\n",
    );
    let web_ip = api.kubectl_ok(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    wait_for("kube-dns to know web", WAIT, POLL, || {
        (dns.dig(&["web.default.svc.cluster.local", "A"]).data("A") == [web_ip.clone()]).then_some(())
    });
    apply(&pod(
        "cluster-dns",
        "  hostname: db-0\n  subdomain: db\n  setHostnameAsFQDN: true\n",
        "cat /etc/resolv.conf; echo hostname=$(hostname); nslookup web.default.svc.cluster.local; nslookup www.example.com",
    ));
    let out = logs("cluster-dns");
    let (ns, search, options) = resolv(&out);
    assert_eq!(ns, [gateway.to_string()], "{out}");
    assert_eq!(
        search,
        ["default.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"],
        "{out}"
    );
    assert_eq!(options, ["ndots:5"], "{out}");
    assert!(out.contains("hostname=db-0.db.default.svc.cluster.local"), "{out}");
    assert!(
        out.contains(&format!("Address: {web_ip}")),
        "the pod resolved the Service through kube-dns:\n{out}"
    );
    assert!(out.contains("Address: 192.0.2.53"), "and an external name through its upstream:\n{out}");
    drop(dns);
    drop(kubelet);
}

/// The DNS addon as a cluster runs it (`cluster/addons/dns/kube-dns.yaml.in`, what
/// `hack/local-up-cluster.sh` applies): kube-dns from its own image as a Deployment in
/// kube-system, reaching the API server through the `kubernetes` Service with its service
/// account, behind the `kube-dns` Service that is the kubelet's clusterDNS. A pod resolves
/// a Service by its short name through it, and the Deployment's pods are Ready by their
/// readiness probe (kube-dns's /ready, true once its watches have listed).
#[test]
fn addon_deployment_serves_the_cluster() {
    use e2e::containerd::BUSYBOX;
    use e2e::nodes::{CLUSTER_DNS_IP, ClusterOptions, NodeCluster};

    let cluster = NodeCluster::start(ClusterOptions {
        nodes: 1,
        kube_proxy: Some("nftables".into()),
        service_accounts: true,
        kubelet_config: format!("clusterDNS: [\"{CLUSTER_DNS_IP}\"]\n"),
        ..Default::default()
    });
    let image = cluster.nodes[0].containerd.import_component("kube-dns");
    let template = std::fs::read_to_string(
        e2e::containerd::hack("local-up-cluster.sh")
            .parent()
            .unwrap()
            .join("../cluster/addons/dns/kube-dns.yaml.in"),
    )
    .expect("cluster/addons/dns/kube-dns.yaml.in");
    let manifest = template
        .replace("__DNS__DOMAIN__", "cluster.local")
        .replace("__DNS__SERVER__", CLUSTER_DNS_IP)
        .replace("__DNS__IMAGE__", &image)
        .replace("__DNS__REPLICAS__", "1");
    let api = &cluster.api;
    let out = api.kubectl_stdin(&["apply", "-f", "-"], &manifest);
    assert!(out.status.success(), "apply the addon: {}", String::from_utf8_lossy(&out.stderr));
    let out =
        api.kubectl(&["-n", "kube-system", "rollout", "status", "deployment/kube-dns", "--timeout=180s"]);
    assert!(
        out.status.success(),
        "kube-dns Deployment not available: {}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(
            &api.kubectl(&["-n", "kube-system", "describe", "pods", "-l", "k8s-app=kube-dns"]).stdout
        ),
        cluster.service_diagnostics()
    );

    let apply = |yaml: &str| {
        let out = api.kubectl_stdin(&["apply", "-f", "-"], yaml);
        assert!(out.status.success(), "apply: {}\n{yaml}", String::from_utf8_lossy(&out.stderr));
    };
    apply(
        "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec:\n  ports: [{name: http, port: 80}]\n",
    );
    let web_ip = api.kubectl_ok(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: client, namespace: default}}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {BUSYBOX}\n    \
         command: [sleep, \"3600\"]\n"
    ));
    let out = api.kubectl(&["wait", "--for=condition=Ready", "pod/client", "--timeout=180s"]);
    assert!(out.status.success(), "client pod: {}", String::from_utf8_lossy(&out.stderr));
    let mut last = String::new();
    let answered = e2e::try_wait_for(WAIT, Duration::from_secs(1), || {
        let out = api.kubectl(&["exec", "client", "--", "nslookup", "web"]);
        last = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        last.contains(&format!("Address: {web_ip}")).then_some(())
    });
    assert!(
        answered.is_some(),
        "the pod did not resolve `web` to {web_ip} through the addon:\n{last}\n{}\nkube-dns logs:\n{}",
        cluster.service_diagnostics(),
        String::from_utf8_lossy(
            &api.kubectl(&["-n", "kube-system", "logs", "-l", "k8s-app=kube-dns", "--tail=40"]).stdout
        )
    );
    assert!(last.contains(CLUSTER_DNS_IP), "answered by the kube-dns Service's address:\n{last}");
}
