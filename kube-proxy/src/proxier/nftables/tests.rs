//! Whole-ruleset tests of the nftables proxier against the fake kernel, in the shape of
//! upstream's `TestOverallNFTablesRules`, plus partial-sync tests that hold every partial
//! sync's result to what a full sync from scratch writes.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use parking_lot::Mutex;

use super::*;
use crate::healthcheck::ProxierHealth;
use crate::nftables::fake::{Fake, Shared};
use crate::proxier::testutil::*;
use crate::proxier::{LoopConfig, Provider, Proxier};

struct Harness {
    fake: Shared,
    proxier: Arc<Proxier<NftablesBackend>>,
}

fn harness(family: Family, node_port_addresses: &[&str]) -> Harness {
    let fake: Shared = Arc::new(Mutex::new(Fake::new(family, KUBE_PROXY_TABLE)));
    let (cidr, node_ip, addrs): (&str, &str, Vec<IpAddr>) = match family {
        Family::Ip => {
            ("10.0.0.0/8", "192.168.0.2", vec!["192.168.0.2".parse().unwrap(), "127.0.0.1".parse().unwrap()])
        }
        Family::Ip6 => {
            ("fd00:10::/64", "fd00:192::2", vec!["fd00:192::2".parse().unwrap(), "::1".parse().unwrap()])
        }
    };
    let config = Config {
        masquerade_all: false,
        masquerade_bit: 14,
        local_detector: LocalDetector::Cidr(cidr.parse().unwrap()),
        node_ip: Some(node_ip.parse().unwrap()),
        node_port_addresses: NodePortAddresses::new(
            family,
            &node_port_addresses.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            Some(node_ip.parse().unwrap()),
        ),
        service_cidrs: vec![],
    };
    let backend = NftablesBackend::new(
        Box::new(fake.clone()),
        config,
        Box::new(move || Ok(addrs.clone())),
        Metrics::new(),
    );
    let proxier = Proxier::new(
        family,
        TEST_HOSTNAME,
        backend,
        LoopConfig { min_sync_period: Duration::ZERO, sync_period: Duration::from_secs(30) },
        ProxierHealth::new(Duration::from_secs(60), Metrics::new()),
        Metrics::new(),
        None,
        None,
    );
    Harness { fake, proxier }
}

impl Harness {
    fn load(&self, services: &[Service], slices: &[EndpointSlice]) {
        for s in services {
            self.proxier.on_service(None, Some(s));
        }
        for s in slices {
            self.proxier.on_endpoint_slice(s, false);
        }
        self.proxier.on_services_synced();
        self.proxier.on_endpoint_slices_synced();
    }

    fn sync(&self) {
        self.proxier.sync_proxy_rules();
    }

    fn dump(&self) -> String {
        self.fake.lock().dump()
    }

    /// Operations of the last transaction.
    fn last_ops(&self) -> Vec<String> {
        let f = self.fake.lock();
        f.last.iter().map(|op| crate::nftables::render_op(op, f.family(), KUBE_PROXY_TABLE)).collect()
    }
}

/// What a fresh proxier writes for the same objects in one full sync.
fn fresh_dump(services: &[Service], slices: &[EndpointSlice]) -> String {
    let h = harness(Family::Ip, &["192.168.0.0/24"]);
    h.load(services, slices);
    h.sync();
    h.dump()
}

const BASE_RULES: &str = r#"
add table ip kube-proxy { comment "rules for kube-proxy" ; }
add chain ip kube-proxy cluster-ips-check
add chain ip kube-proxy filter-forward { type filter hook forward priority -110 ; }
add chain ip kube-proxy filter-input { type filter hook input priority -110 ; }
add chain ip kube-proxy filter-output { type filter hook output priority -110 ; }
add chain ip kube-proxy filter-output-post-dnat { type filter hook output priority -90 ; }
add chain ip kube-proxy filter-prerouting { type filter hook prerouting priority -110 ; }
add chain ip kube-proxy firewall-check
add chain ip kube-proxy mark-for-masquerade
add chain ip kube-proxy masquerading
add chain ip kube-proxy nat-output { type nat hook output priority -100 ; }
add chain ip kube-proxy nat-postrouting { type nat hook postrouting priority 100 ; }
add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip kube-proxy nodeport-endpoints-check
add chain ip kube-proxy reject-chain { comment "helper for @no-endpoint-services / @no-endpoint-nodeports" ; }
add chain ip kube-proxy service-endpoints-check
add chain ip kube-proxy services
add set ip kube-proxy cluster-ips { type ipv4_addr ; comment "Active ClusterIPs" ; }
add set ip kube-proxy nodeport-ips { type ipv4_addr ; comment "IPs that accept NodePort traffic" ; }
add map ip kube-proxy firewall-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "destinations that are subject to LoadBalancerSourceRanges" ; }
add map ip kube-proxy no-endpoint-nodeports { type inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to service nodeports with no endpoints" ; }
add map ip kube-proxy no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to services with no endpoints" ; }
add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }
add map ip kube-proxy service-nodeports { type inet_proto . inet_service : verdict ; comment "NodePort traffic" ; }
add rule ip kube-proxy cluster-ips-check ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"
add rule ip kube-proxy filter-forward ct state new jump service-endpoints-check
add rule ip kube-proxy filter-forward ct state new jump cluster-ips-check
add rule ip kube-proxy filter-input ct state new jump nodeport-endpoints-check
add rule ip kube-proxy filter-input ct state new jump service-endpoints-check
add rule ip kube-proxy filter-output ct state new jump service-endpoints-check
add rule ip kube-proxy filter-output ct state new jump firewall-check
add rule ip kube-proxy filter-output-post-dnat ct state new jump cluster-ips-check
add rule ip kube-proxy filter-prerouting ct state new jump firewall-check
add rule ip kube-proxy firewall-check ip daddr . meta l4proto . th dport vmap @firewall-ips
add rule ip kube-proxy mark-for-masquerade mark set mark or 0x004000
add rule ip kube-proxy masquerading mark and 0x004000 == 0 return
add rule ip kube-proxy masquerading mark set mark xor 0x004000
add rule ip kube-proxy masquerading masquerade fully-random
add rule ip kube-proxy nat-output jump services
add rule ip kube-proxy nat-postrouting jump masquerading
add rule ip kube-proxy nat-prerouting jump services
add rule ip kube-proxy nodeport-endpoints-check ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports
add rule ip kube-proxy reject-chain reject
add rule ip kube-proxy service-endpoints-check ip daddr . meta l4proto . th dport vmap @no-endpoint-services
add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip kube-proxy services ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports
add element ip kube-proxy nodeport-ips { 192.168.0.2 }
"#;

/// Upstream's overall test: a ClusterIP Service, a Local LoadBalancer without local
/// endpoints, a NodePort, an ExternalIP Service, a Cluster LoadBalancer with source
/// ranges and affinity, and a Service without endpoints.
fn overall_objects() -> (Vec<Service>, Vec<EndpointSlice>) {
    let services = vec![
        service("ns1", "svc1", |s, _| {
            s.cluster_ip = Some("172.30.0.41".into());
            s.ports = Some(vec![port("p80", 80, "TCP", None)]);
        }),
        service("ns2", "svc2", |s, st| {
            s.type_ = Some("LoadBalancer".into());
            s.external_traffic_policy = Some("Local".into());
            s.cluster_ip = Some("172.30.0.42".into());
            s.ports = Some(vec![port("p80", 80, "TCP", Some(3001))]);
            s.external_ips = Some(vec!["192.168.99.22".into()]);
            s.health_check_node_port = Some(30000);
            lb_ingress(st, &["1.2.3.4"]);
        }),
        service("ns3", "svc3", |s, _| {
            s.type_ = Some("NodePort".into());
            s.cluster_ip = Some("172.30.0.43".into());
            s.ports = Some(vec![port("p80", 80, "TCP", Some(3003))]);
        }),
        service("ns4", "svc4", |s, _| {
            s.type_ = Some("NodePort".into());
            s.cluster_ip = Some("172.30.0.44".into());
            s.external_ips = Some(vec!["192.168.99.33".into()]);
            s.ports = Some(vec![port("p80", 80, "TCP", None)]);
        }),
        service("ns5", "svc5", |s, st| {
            s.type_ = Some("LoadBalancer".into());
            s.external_traffic_policy = Some("Cluster".into());
            s.cluster_ip = Some("172.30.0.45".into());
            s.ports = Some(vec![port("p80", 80, "TCP", Some(3002))]);
            s.health_check_node_port = Some(30000);
            s.load_balancer_source_ranges = Some(vec![" 203.0.113.0/25".into()]);
            client_ip_affinity(s, 10800);
            lb_ingress(st, &["5.6.7.8"]);
        }),
        service("ns6", "svc6", |s, _| {
            s.type_ = Some("ClusterIP".into());
            s.cluster_ip = Some("172.30.0.46".into());
            s.ports = Some(vec![port("p80", 80, "TCP", None)]);
        }),
    ];
    let p80 = [("p80", 80, "TCP")];
    let slices = vec![
        slice("ns1", "svc1", 1, "IPv4", vec![endpoint("10.180.0.1", None)], &p80),
        // Not on this node: svc2 (Local) has no local endpoint.
        slice("ns2", "svc2", 1, "IPv4", vec![endpoint("10.180.0.2", None)], &p80),
        slice("ns3", "svc3", 1, "IPv4", vec![endpoint("10.180.0.3", None)], &p80),
        slice(
            "ns4",
            "svc4",
            1,
            "IPv4",
            vec![endpoint("10.180.0.4", None), endpoint("10.180.0.5", Some(TEST_HOSTNAME))],
            &p80,
        ),
        slice("ns5", "svc5", 1, "IPv4", vec![endpoint("10.180.0.3", None)], &p80),
    ];
    (services, slices)
}

#[test]
fn overall_rules() {
    let h = harness(Family::Ip, &["192.168.0.0/24"]);
    let (services, slices) = overall_objects();
    h.load(&services, &slices);
    h.sync();
    let expected = BASE_RULES.to_owned()
        + r#"
# svc1
add chain ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80
add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 ip daddr 172.30.0.41 tcp dport 80 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 goto endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80
add chain ip kube-proxy endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80
add rule ip kube-proxy endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 ip saddr 10.180.0.1 jump mark-for-masquerade
add rule ip kube-proxy endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 meta l4proto tcp dnat to 10.180.0.1:80
add element ip kube-proxy cluster-ips { 172.30.0.41 }
add element ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 : goto service-ULMVA6XW-ns1/svc1/tcp/p80 }

# svc2: Local policy without a local endpoint; pods and the node itself still get through.
add chain ip kube-proxy service-42NFTM6N-ns2/svc2/tcp/p80
add rule ip kube-proxy service-42NFTM6N-ns2/svc2/tcp/p80 ip daddr 172.30.0.42 tcp dport 80 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
add rule ip kube-proxy service-42NFTM6N-ns2/svc2/tcp/p80 goto endpoint-SGOXE6O3-ns2/svc2/tcp/p80__10.180.0.2/80
add chain ip kube-proxy external-42NFTM6N-ns2/svc2/tcp/p80
add rule ip kube-proxy external-42NFTM6N-ns2/svc2/tcp/p80 ip saddr 10.0.0.0/8 goto service-42NFTM6N-ns2/svc2/tcp/p80 comment "short-circuit pod traffic"
add rule ip kube-proxy external-42NFTM6N-ns2/svc2/tcp/p80 fib saddr type local jump mark-for-masquerade comment "masquerade local traffic"
add rule ip kube-proxy external-42NFTM6N-ns2/svc2/tcp/p80 fib saddr type local goto service-42NFTM6N-ns2/svc2/tcp/p80 comment "short-circuit local traffic"
add chain ip kube-proxy endpoint-SGOXE6O3-ns2/svc2/tcp/p80__10.180.0.2/80
add rule ip kube-proxy endpoint-SGOXE6O3-ns2/svc2/tcp/p80__10.180.0.2/80 ip saddr 10.180.0.2 jump mark-for-masquerade
add rule ip kube-proxy endpoint-SGOXE6O3-ns2/svc2/tcp/p80__10.180.0.2/80 meta l4proto tcp dnat to 10.180.0.2:80
add element ip kube-proxy cluster-ips { 172.30.0.42 }
add element ip kube-proxy service-ips { 172.30.0.42 . tcp . 80 : goto service-42NFTM6N-ns2/svc2/tcp/p80 }
add element ip kube-proxy service-ips { 192.168.99.22 . tcp . 80 : goto external-42NFTM6N-ns2/svc2/tcp/p80 }
add element ip kube-proxy service-ips { 1.2.3.4 . tcp . 80 : goto external-42NFTM6N-ns2/svc2/tcp/p80 }
add element ip kube-proxy service-nodeports { tcp . 3001 : goto external-42NFTM6N-ns2/svc2/tcp/p80 }
add element ip kube-proxy no-endpoint-nodeports { tcp . 3001 comment "ns2/svc2:p80" : drop }
add element ip kube-proxy no-endpoint-services { 1.2.3.4 . tcp . 80 comment "ns2/svc2:p80" : drop }
add element ip kube-proxy no-endpoint-services { 192.168.99.22 . tcp . 80 comment "ns2/svc2:p80" : drop }

# svc3
add chain ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80
add rule ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80 ip daddr 172.30.0.43 tcp dport 80 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
add rule ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80 goto endpoint-UEIP74TE-ns3/svc3/tcp/p80__10.180.0.3/80
add chain ip kube-proxy external-4AT6LBPK-ns3/svc3/tcp/p80
add rule ip kube-proxy external-4AT6LBPK-ns3/svc3/tcp/p80 jump mark-for-masquerade
add rule ip kube-proxy external-4AT6LBPK-ns3/svc3/tcp/p80 goto service-4AT6LBPK-ns3/svc3/tcp/p80
add chain ip kube-proxy endpoint-UEIP74TE-ns3/svc3/tcp/p80__10.180.0.3/80
add rule ip kube-proxy endpoint-UEIP74TE-ns3/svc3/tcp/p80__10.180.0.3/80 ip saddr 10.180.0.3 jump mark-for-masquerade
add rule ip kube-proxy endpoint-UEIP74TE-ns3/svc3/tcp/p80__10.180.0.3/80 meta l4proto tcp dnat to 10.180.0.3:80
add element ip kube-proxy cluster-ips { 172.30.0.43 }
add element ip kube-proxy service-ips { 172.30.0.43 . tcp . 80 : goto service-4AT6LBPK-ns3/svc3/tcp/p80 }
add element ip kube-proxy service-nodeports { tcp . 3003 : goto external-4AT6LBPK-ns3/svc3/tcp/p80 }

# svc4
add chain ip kube-proxy service-LAUZTJTB-ns4/svc4/tcp/p80
add rule ip kube-proxy service-LAUZTJTB-ns4/svc4/tcp/p80 ip daddr 172.30.0.44 tcp dport 80 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
add rule ip kube-proxy service-LAUZTJTB-ns4/svc4/tcp/p80 numgen random mod 2 0 goto endpoint-UNZV3OEC-ns4/svc4/tcp/p80__10.180.0.4/80
add rule ip kube-proxy service-LAUZTJTB-ns4/svc4/tcp/p80 goto endpoint-5RFCDDV7-ns4/svc4/tcp/p80__10.180.0.5/80
add chain ip kube-proxy external-LAUZTJTB-ns4/svc4/tcp/p80
add rule ip kube-proxy external-LAUZTJTB-ns4/svc4/tcp/p80 jump mark-for-masquerade
add rule ip kube-proxy external-LAUZTJTB-ns4/svc4/tcp/p80 goto service-LAUZTJTB-ns4/svc4/tcp/p80
add chain ip kube-proxy endpoint-5RFCDDV7-ns4/svc4/tcp/p80__10.180.0.5/80
add rule ip kube-proxy endpoint-5RFCDDV7-ns4/svc4/tcp/p80__10.180.0.5/80 ip saddr 10.180.0.5 jump mark-for-masquerade
add rule ip kube-proxy endpoint-5RFCDDV7-ns4/svc4/tcp/p80__10.180.0.5/80 meta l4proto tcp dnat to 10.180.0.5:80
add chain ip kube-proxy endpoint-UNZV3OEC-ns4/svc4/tcp/p80__10.180.0.4/80
add rule ip kube-proxy endpoint-UNZV3OEC-ns4/svc4/tcp/p80__10.180.0.4/80 ip saddr 10.180.0.4 jump mark-for-masquerade
add rule ip kube-proxy endpoint-UNZV3OEC-ns4/svc4/tcp/p80__10.180.0.4/80 meta l4proto tcp dnat to 10.180.0.4:80
add element ip kube-proxy cluster-ips { 172.30.0.44 }
add element ip kube-proxy service-ips { 172.30.0.44 . tcp . 80 : goto service-LAUZTJTB-ns4/svc4/tcp/p80 }
add element ip kube-proxy service-ips { 192.168.99.33 . tcp . 80 : goto external-LAUZTJTB-ns4/svc4/tcp/p80 }

# svc5: affinity and source ranges.
add set ip kube-proxy affinity-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80 { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }
add chain ip kube-proxy service-HVFWP5L3-ns5/svc5/tcp/p80
add rule ip kube-proxy service-HVFWP5L3-ns5/svc5/tcp/p80 ip daddr 172.30.0.45 tcp dport 80 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
add rule ip kube-proxy service-HVFWP5L3-ns5/svc5/tcp/p80 ip saddr @affinity-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80 goto endpoint-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80
add rule ip kube-proxy service-HVFWP5L3-ns5/svc5/tcp/p80 goto endpoint-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80
add chain ip kube-proxy external-HVFWP5L3-ns5/svc5/tcp/p80
add rule ip kube-proxy external-HVFWP5L3-ns5/svc5/tcp/p80 jump mark-for-masquerade
add rule ip kube-proxy external-HVFWP5L3-ns5/svc5/tcp/p80 goto service-HVFWP5L3-ns5/svc5/tcp/p80
add chain ip kube-proxy endpoint-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80
add rule ip kube-proxy endpoint-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80 ip saddr 10.180.0.3 jump mark-for-masquerade
add rule ip kube-proxy endpoint-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80 update @affinity-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80 { ip saddr }
add rule ip kube-proxy endpoint-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80 meta l4proto tcp dnat to 10.180.0.3:80
add chain ip kube-proxy firewall-HVFWP5L3-ns5/svc5/tcp/p80
add rule ip kube-proxy firewall-HVFWP5L3-ns5/svc5/tcp/p80 ip saddr 203.0.113.0/25 return
add rule ip kube-proxy firewall-HVFWP5L3-ns5/svc5/tcp/p80 drop
add element ip kube-proxy cluster-ips { 172.30.0.45 }
add element ip kube-proxy service-ips { 172.30.0.45 . tcp . 80 : goto service-HVFWP5L3-ns5/svc5/tcp/p80 }
add element ip kube-proxy service-ips { 5.6.7.8 . tcp . 80 : goto external-HVFWP5L3-ns5/svc5/tcp/p80 }
add element ip kube-proxy service-nodeports { tcp . 3002 : goto external-HVFWP5L3-ns5/svc5/tcp/p80 }
add element ip kube-proxy firewall-ips { 5.6.7.8 . tcp . 80 : goto firewall-HVFWP5L3-ns5/svc5/tcp/p80 }

# svc6: no endpoints, rejected.
add element ip kube-proxy cluster-ips { 172.30.0.46 }
add element ip kube-proxy no-endpoint-services { 172.30.0.46 . tcp . 80 comment "ns6/svc6:p80" : goto reject-chain }
"#;
    assert_same_lines(&h.dump(), &expected);
}

#[test]
fn partial_syncs_touch_only_changed_services_and_match_a_full_sync() {
    let h = harness(Family::Ip, &["192.168.0.0/24"]);
    let (services, mut slices) = overall_objects();
    h.load(&services, &slices);
    h.sync();

    // One endpoint of svc4 moves: only svc4's chains are rewritten.
    slices[3] = slice(
        "ns4",
        "svc4",
        1,
        "IPv4",
        vec![endpoint("10.180.0.4", None), endpoint("10.180.0.6", None)],
        &[("p80", 80, "TCP")],
    );
    h.proxier.on_endpoint_slice(&slices[3], false);
    h.sync();
    let ops = h.last_ops();
    assert!(ops.iter().all(|op| !op.contains("ns1/svc1") && !op.contains("ns5/svc5")), "{ops:#?}");
    assert!(
        ops.iter()
            .any(|op| op
                .contains("flush chain ip kube-proxy endpoint-5RFCDDV7-ns4/svc4/tcp/p80__10.180.0.5/80")),
        "{ops:#?}"
    );
    assert!(ops.len() < 20, "a one-endpoint change wrote {} operations: {ops:#?}", ops.len());

    // The flushed chain goes a second later, on the follow-up sync.
    let stale = "endpoint-5RFCDDV7-ns4/svc4/tcp/p80__10.180.0.5/80";
    assert!(h.dump().contains(&format!("add chain ip kube-proxy {stale}\n")));
    std::thread::sleep(Duration::from_millis(1100));
    h.sync();
    assert!(!h.dump().contains(stale), "stale chain still there");
    assert_same_lines(&h.dump(), &fresh_dump(&services, &slices));

    // A Service deleted, another losing all endpoints, a third changing its port.
    h.proxier.on_service(Some(&services[0]), None);
    h.proxier.on_endpoint_slice(&slices[2], true);
    let mut svc5 = services[4].clone();
    svc5.spec.as_mut().unwrap().ports = Some(vec![port("p80", 8080, "TCP", Some(3002))]);
    h.proxier.on_service(Some(&services[4]), Some(&svc5));
    h.sync();
    std::thread::sleep(Duration::from_millis(1100));
    h.sync();
    let now_services =
        vec![services[1].clone(), services[2].clone(), services[3].clone(), svc5, services[5].clone()];
    let now_slices = vec![slices[1].clone(), slices[3].clone(), slices[4].clone()];
    assert_same_lines(&h.dump(), &fresh_dump(&now_services, &now_slices));
    assert!(h.dump().contains("add element ip kube-proxy no-endpoint-services { 172.30.0.43 . tcp . 80 comment \"ns3/svc3:p80\" : goto reject-chain }"));
    assert!(h.dump().contains("add element ip kube-proxy service-ips { 172.30.0.45 . tcp . 8080 : goto service-HVFWP5L3-ns5/svc5/tcp/p80 }"));
}

#[test]
fn restart_cleans_leftovers_of_an_earlier_run() {
    let (services, slices) = overall_objects();
    let h = harness(Family::Ip, &["192.168.0.0/24"]);
    h.load(&services, &slices);
    h.sync();
    // A new kube-proxy over the same kernel, where svc4 is gone.
    let h2 = harness(Family::Ip, &["192.168.0.0/24"]);
    let kernel = h.fake.lock().clone();
    *h2.fake.lock() = kernel;
    let rest: Vec<Service> =
        services.iter().filter(|s| s.metadata.name.as_deref() != Some("svc4")).cloned().collect();
    let rest_slices: Vec<EndpointSlice> =
        slices.iter().filter(|s| s.metadata.name.as_deref() != Some("svc4-1")).cloned().collect();
    h2.load(&rest, &rest_slices);
    h2.sync();
    std::thread::sleep(Duration::from_millis(1100));
    h2.sync();
    assert_same_lines(&h2.dump(), &fresh_dump(&rest, &rest_slices));
}

#[test]
fn terminating_fallback_internal_local_and_topology() {
    let h = harness(Family::Ip, &["192.168.0.0/24"]);
    let services = vec![
        service("ns1", "term", |s, _| {
            s.cluster_ip = Some("172.30.1.1".into());
            s.ports = Some(vec![port("", 80, "TCP", None)]);
        }),
        service("ns1", "itp", |s, _| {
            s.cluster_ip = Some("172.30.1.2".into());
            s.internal_traffic_policy = Some("Local".into());
            s.ports = Some(vec![port("", 80, "UDP", None)]);
        }),
    ];
    let slices = vec![
        slice(
            "ns1",
            "term",
            1,
            "IPv4",
            vec![
                endpoint_with("10.0.1.1", None, false, true, true),
                endpoint_with("10.0.1.2", None, false, false, true),
            ],
            &[("", 80, "TCP")],
        ),
        slice("ns1", "itp", 1, "IPv4", vec![endpoint("10.0.1.3", Some("other-node"))], &[("", 80, "UDP")]),
    ];
    h.load(&services, &slices);
    h.sync();
    let dump = h.dump();
    // Only the serving one of the terminating endpoints is used.
    assert!(dump.contains("/term/tcp/ goto endpoint-") && !dump.contains("numgen"), "{dump}");
    assert!(dump.contains("dnat to 10.0.1.1:80") && !dump.contains("dnat to 10.0.1.2:80"), "{dump}");
    // internalTrafficPolicy Local with no local endpoint: dropped, not rejected.
    assert!(dump.contains("add element ip kube-proxy no-endpoint-services { 172.30.1.2 . udp . 80 comment \"ns1/itp\" : drop }"), "{dump}");
}

#[test]
fn ipv6_table() {
    let h = harness(Family::Ip6, &[]);
    let services = vec![service("ns1", "svc1", |s, _| {
        s.type_ = Some("NodePort".into());
        s.cluster_ips = Some(vec!["fd00:172:30::41".into()]);
        s.ports = Some(vec![port("p80", 80, "SCTP", Some(3001))]);
    })];
    let slices =
        vec![slice("ns1", "svc1", 1, "IPv6", vec![endpoint("fd00:10::1", None)], &[("p80", 80, "SCTP")])];
    h.load(&services, &slices);
    h.sync();
    let dump = h.dump();
    for line in [
        "add set ip6 kube-proxy cluster-ips { type ipv6_addr ; comment \"Active ClusterIPs\" ; }",
        "add rule ip6 kube-proxy nodeport-endpoints-check ip6 daddr != ::1 meta l4proto . th dport vmap @no-endpoint-nodeports",
        "add rule ip6 kube-proxy services fib daddr type local ip6 daddr != ::1 meta l4proto . th dport vmap @service-nodeports",
        "add element ip6 kube-proxy service-nodeports { sctp . 3001 : goto external-",
        "meta l4proto sctp dnat to [fd00:10::1]:80",
        "ip6 daddr fd00:172:30::41 sctp dport 80 ip6 saddr != fd00:10::/64 jump mark-for-masquerade",
    ] {
        assert!(dump.contains(line), "missing {line:?} in\n{dump}");
    }
    // The nodeport-ips set is not there when NodePorts are on every address.
    assert!(!dump.contains("nodeport-ips"), "{dump}");
}

#[test]
fn failed_transaction_forces_a_full_resync() {
    let h = harness(Family::Ip, &["192.168.0.0/24"]);
    let (services, slices) = overall_objects();
    h.load(&services, &slices);
    h.sync();
    // Someone deletes our table behind our back: the next partial sync fails (its flushes
    // and element deletes find nothing), and the one after rebuilds everything.
    *h.fake.lock() = Fake::new(Family::Ip, KUBE_PROXY_TABLE);
    h.proxier.on_endpoint_slice(
        &slice("ns1", "svc1", 1, "IPv4", vec![endpoint("10.180.0.9", None)], &[("p80", 80, "TCP")]),
        false,
    );
    h.sync();
    assert!(!h.fake.lock().has_table(), "partial sync should have failed on the missing table");
    h.sync();
    let mut now_slices = slices.clone();
    now_slices[0] =
        slice("ns1", "svc1", 1, "IPv4", vec![endpoint("10.180.0.9", None)], &[("p80", 80, "TCP")]);
    assert_same_lines(&h.dump(), &fresh_dump(&services, &now_slices));
}
