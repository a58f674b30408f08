//! The nf_tables netlink encoder against the real kernel, in a network namespace of the
//! test's own (the test thread unshares one, so nothing touches the host's rules): the
//! rules a proxier writes must be accepted, read back by `nft list` as the statements we
//! meant, and partial syncs, listing and deletion must work. Needs root and Debian's
//! `nftables` (for `nft list`, used only to check).

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use kube::api::ObjectMeta;
use kube_proxy::healthcheck::ProxierHealth;
use kube_proxy::localdetector::LocalDetector;
use kube_proxy::metrics::Metrics;
use kube_proxy::nftables::netlink::Netlink;
use kube_proxy::nftables::{Family, Interface};
use kube_proxy::nodeport_addresses::NodePortAddresses;
use kube_proxy::proxier::nftables::{Config, KUBE_PROXY_TABLE, NftablesBackend};
use kube_proxy::proxier::{LoopConfig, Provider, Proxier};

/// Moves this test's thread into a new, empty network namespace.
fn private_netns() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root (it creates a network namespace)");
    // SAFETY: unshare affects only the calling thread's network namespace.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "unshare(CLONE_NEWNET): {}", std::io::Error::last_os_error());
    assert!(
        Command::new("nft").arg("--version").output().is_ok_and(|o| o.status.success()),
        "`nft` not found: run hack/install-deps.sh (package nftables)"
    );
}

fn nft_list(family: &str) -> String {
    let out =
        Command::new("nft").args(["list", "table", family, KUBE_PROXY_TABLE]).output().expect("running nft");
    assert!(out.status.success(), "nft list failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn service(ns: &str, name: &str, f: impl FnOnce(&mut ServiceSpec)) -> Service {
    let mut spec = ServiceSpec::default();
    f(&mut spec);
    Service {
        metadata: ObjectMeta { namespace: Some(ns.into()), name: Some(name.into()), ..Default::default() },
        spec: Some(spec),
        status: None,
    }
}

fn slice(ns: &str, svc: &str, family: &str, ips: &[&str], port: i32, proto: &str) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(format!("{svc}-1")),
            labels: Some([("kubernetes.io/service-name".to_string(), svc.to_string())].into()),
            ..Default::default()
        },
        address_type: family.into(),
        endpoints: ips
            .iter()
            .map(|ip| Endpoint { addresses: vec![ip.to_string()], ..Default::default() })
            .collect(),
        ports: Some(vec![EndpointPort {
            name: Some("p".into()),
            port: Some(port),
            protocol: Some(proto.into()),
            ..Default::default()
        }]),
    }
}

fn proxier(family: Family, node_ports: &[&str], node_ip: &str) -> Arc<Proxier<NftablesBackend>> {
    let nft = Netlink::new(family, KUBE_PROXY_TABLE).expect("netlink socket");
    let cidr = if family == Family::Ip { "10.0.0.0/8" } else { "fd00:10::/64" };
    let node_ip: std::net::IpAddr = node_ip.parse().unwrap();
    let config = Config {
        masquerade_all: false,
        masquerade_bit: 14,
        local_detector: LocalDetector::Cidr(cidr.parse().unwrap()),
        node_ip: Some(node_ip),
        node_port_addresses: NodePortAddresses::new(
            family,
            &node_ports.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            Some(node_ip),
        ),
        service_cidrs: vec![],
    };
    let backend =
        NftablesBackend::new(Box::new(nft), config, Box::new(move || Ok(vec![node_ip])), Metrics::new());
    Proxier::new(
        family,
        "node1",
        backend,
        LoopConfig { min_sync_period: Duration::ZERO, sync_period: Duration::from_secs(30) },
        ProxierHealth::new(Duration::from_secs(60), Metrics::new()),
        Metrics::new(),
        None,
        None,
    )
}

fn p(name: &str, port: i32, proto: &str, node_port: Option<i32>) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port,
        protocol: Some(proto.into()),
        node_port,
        ..Default::default()
    }
}

#[test]
fn kernel_accepts_and_lists_what_we_write() {
    private_netns();
    let px = proxier(Family::Ip, &["primary"], "192.168.0.2");
    let svc1 = service("ns1", "svc1", |s| {
        s.type_ = Some("NodePort".into());
        s.cluster_ip = Some("172.30.0.41".into());
        s.ports = Some(vec![p("p", 80, "TCP", Some(30080))]);
        s.session_affinity = Some("ClientIP".into());
    });
    let svc2 = service("ns1", "svc2", |s| {
        s.cluster_ip = Some("172.30.0.42".into());
        s.ports = Some(vec![p("p", 53, "UDP", None)]);
    });
    let svc3 = service("ns1", "svc3", |s| {
        s.type_ = Some("LoadBalancer".into());
        s.external_traffic_policy = Some("Local".into());
        s.cluster_ip = Some("172.30.0.43".into());
        s.external_ips = Some(vec!["192.168.99.1".into()]);
        s.ports = Some(vec![p("p", 443, "SCTP", Some(30443))]);
    });
    px.on_service(None, Some(&svc1));
    px.on_service(None, Some(&svc2));
    px.on_service(None, Some(&svc3));
    px.on_endpoint_slice(&slice("ns1", "svc1", "IPv4", &["10.180.0.1", "10.180.0.2"], 8080, "TCP"), false);
    px.on_endpoint_slice(&slice("ns1", "svc3", "IPv4", &["10.180.0.3"], 443, "SCTP"), false);
    px.on_services_synced();
    px.on_endpoint_slices_synced();
    px.sync_proxy_rules();
    let listed = nft_list("ip");
    if std::env::var_os("SHOW_NFT").is_some() {
        eprintln!("{listed}");
    }
    for needle in [
        "comment \"rules for kube-proxy\"",
        "chain nat-prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tjump services",
        "type filter hook input priority -110; policy accept;",
        "ct state new jump service-endpoints-check",
        "ip daddr . meta l4proto . th dport vmap @service-ips",
        "ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports",
        "elements = { 192.168.0.2 }",
        "172.30.0.41 . tcp . 80 : goto service-",
        "172.30.0.42 . udp . 53 comment \"ns1/svc2:p\" : goto reject-chain",
        "sctp . 30443 : goto external-",
        "tcp dport 80 ip saddr != 10.0.0.0/8 jump mark-for-masquerade",
        "numgen random mod 2 0 goto endpoint-",
        "meta l4proto tcp dnat to 10.180.0.1:8080",
        "meta l4proto sctp dnat to 10.180.0.3:443",
        "update @affinity-",
        "flags dynamic,timeout",
        "timeout 3h",
        "fib saddr type local jump mark-for-masquerade",
        "masquerade fully-random",
        "reject",
    ] {
        assert!(listed.contains(needle), "missing {needle:?} in nft's listing:\n{listed}");
    }
    let mut nft = Netlink::new(Family::Ip, KUBE_PROXY_TABLE).unwrap();
    let chains = nft.list_chains().unwrap();
    assert!(chains.iter().any(|c| c.starts_with("endpoint-")), "{chains:?}");
    let sets = nft.list_sets().unwrap();
    assert!(
        sets.iter().any(|s| s == "service-ips") && sets.iter().any(|s| s.starts_with("affinity-")),
        "{sets:?}"
    );

    // A partial sync: one endpoint replaced; the old endpoint's chain is flushed, then deleted.
    px.on_endpoint_slice(&slice("ns1", "svc1", "IPv4", &["10.180.0.1", "10.180.0.9"], 8080, "TCP"), false);
    px.sync_proxy_rules();
    let listed = nft_list("ip");
    assert!(
        listed.contains("dnat to 10.180.0.9:8080") && !listed.contains("dnat to 10.180.0.2:8080"),
        "{listed}"
    );
    std::thread::sleep(Duration::from_millis(1100));
    px.sync_proxy_rules();
    let chains = Netlink::new(Family::Ip, KUBE_PROXY_TABLE).unwrap().list_chains().unwrap();
    assert_eq!(chains.iter().filter(|c| c.starts_with("endpoint-")).count(), 3, "{chains:?}");

    // svc1 deleted: its chains and affinity sets go.
    px.on_service(Some(&svc1), None);
    px.sync_proxy_rules();
    std::thread::sleep(Duration::from_millis(1100));
    px.sync_proxy_rules();
    let listed = nft_list("ip");
    assert!(!listed.contains("ns1/svc1") && !listed.contains("affinity-"), "{listed}");

    assert!(kube_proxy::nftables::netlink::delete_table(Family::Ip, KUBE_PROXY_TABLE).unwrap());
    assert!(!kube_proxy::nftables::netlink::delete_table(Family::Ip, KUBE_PROXY_TABLE).unwrap());
}

#[test]
fn kernel_ipv6_table() {
    private_netns();
    let px = proxier(Family::Ip6, &[], "fd00:192::2");
    let svc = service("ns1", "svc1", |s| {
        s.type_ = Some("NodePort".into());
        s.cluster_ips = Some(vec!["fd00:172:30::41".into()]);
        s.ports = Some(vec![p("p", 80, "TCP", Some(30080))]);
    });
    px.on_service(None, Some(&svc));
    px.on_endpoint_slice(&slice("ns1", "svc1", "IPv6", &["fd00:10::1"], 8080, "TCP"), false);
    px.on_services_synced();
    px.on_endpoint_slices_synced();
    px.sync_proxy_rules();
    let listed = nft_list("ip6");
    for needle in [
        "fd00:172:30::41 . tcp . 80 : goto service-",
        "ip6 daddr fd00:172:30::41 tcp dport 80 ip6 saddr != fd00:10::/64 jump mark-for-masquerade",
        "dnat to [fd00:10::1]:8080",
        "fib daddr type local ip6 daddr != ::1 meta l4proto . th dport vmap @service-nodeports",
    ] {
        assert!(listed.contains(needle), "missing {needle:?} in nft's listing:\n{listed}");
    }
}

#[test]
fn kernel_errors_name_the_operation() {
    private_netns();
    let mut nft = Netlink::new(Family::Ip, KUBE_PROXY_TABLE).unwrap();
    let mut tx = kube_proxy::nftables::Transaction::new();
    tx.push(kube_proxy::nftables::Op::AddTable { comment: None });
    tx.add_chain("a");
    tx.add_rule("a", vec![kube_proxy::nftables::Stmt::goto("missing-chain")]);
    let err = nft.run(&tx).unwrap_err().to_string();
    assert!(err.contains("add rule ip kube-proxy a goto missing-chain"), "{err}");
    assert!(err.contains("errno 2"), "{err}");
    // All or nothing: the table from the failed batch does not exist.
    assert!(nft.list_chains().unwrap_err().is_not_found());
}
