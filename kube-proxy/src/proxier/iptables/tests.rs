//! Whole-ruleset tests of the iptables proxier against the fake tables, in the shape of
//! upstream's `TestOverallIPTablesRules`, plus partial syncs and cleanup.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use parking_lot::Mutex;

use super::*;
use crate::healthcheck::ProxierHealth;
use crate::iptables::fake::{Fake, Shared};
use crate::proxier::testutil::*;
use crate::proxier::{LoopConfig, Provider, Proxier};

struct Harness {
    fake: Shared,
    proxier: Arc<Proxier<IptablesBackend>>,
}

fn harness() -> Harness {
    let fake: Shared = Arc::new(Mutex::new(Fake::new(Family::Ip)));
    let node_ip: IpAddr = "192.168.0.2".parse().unwrap();
    let config = Config {
        masquerade_all: false,
        masquerade_bit: 14,
        local_detector: LocalDetector::Cidr("10.0.0.0/8".parse().unwrap()),
        node_ip: Some(node_ip),
        node_port_addresses: NodePortAddresses::new(Family::Ip, &[], Some(node_ip)),
        localhost_nodeports: true,
        conntrack_tcp_liberal: false,
        sync_period: Duration::from_secs(30),
    };
    let backend = IptablesBackend::new(
        Box::new(fake.clone()),
        config,
        Box::new(move || Ok(vec![node_ip])),
        Metrics::new(),
    );
    let proxier = Proxier::new(
        Family::Ip,
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

    fn table(&self, t: Table) -> String {
        self.fake.lock().dump_table(t)
    }
}

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
            s.cluster_ip = Some("172.30.0.46".into());
            s.ports = Some(vec![port("p80", 80, "TCP", None)]);
        }),
    ];
    let p80 = [("p80", 80, "TCP")];
    let slices = vec![
        slice("ns1", "svc1", 1, "IPv4", vec![endpoint("10.180.0.1", None)], &p80),
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

const OVERALL_FILTER: &str = r#"
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SERVICES - [0:0]
-A INPUT -j KUBE-FIREWALL
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A OUTPUT -j KUBE-FIREWALL
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m tcp -p tcp -d 192.168.99.22 --dport 80 -j DROP
-A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j DROP
-A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 3001 -j DROP
-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x004000/0x004000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-NODEPORTS -m comment --comment "ns2/svc2:p80 health check node port" -m tcp -p tcp --dport 30000 -j ACCEPT
-A KUBE-PROXY-FIREWALL -m comment --comment "ns5/svc5:p80 traffic not accepted by KUBE-FW-NUKIZ6OKUXPJNT4C" -m tcp -p tcp -d 5.6.7.8 --dport 80 -j DROP
-A KUBE-SERVICES -m comment --comment "ns6/svc6:p80 has no endpoints" -m tcp -p tcp -d 172.30.0.46 --dport 80 -j REJECT
COMMIT
"#;

const OVERALL_NAT: &str = r#"
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-EXT-4SW47YFZTEDKD3PK - [0:0]
:KUBE-EXT-GNZBNJ2PO5MGZ6GT - [0:0]
:KUBE-EXT-NUKIZ6OKUXPJNT4C - [0:0]
:KUBE-EXT-X27LE4BHSL4DOUIK - [0:0]
:KUBE-FW-NUKIZ6OKUXPJNT4C - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-SEP-C6EBXVWJJZMIWKLZ - [0:0]
:KUBE-SEP-I77PXRDZVX7PMWMN - [0:0]
:KUBE-SEP-OYPFS5VJICHGATKP - [0:0]
:KUBE-SEP-RS4RBKLTHTF2IUXJ - [0:0]
:KUBE-SEP-SXIVWICOYRO3J4NJ - [0:0]
:KUBE-SEP-UKSFD7AGPMPPLUHC - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-4SW47YFZTEDKD3PK - [0:0]
:KUBE-SVC-GNZBNJ2PO5MGZ6GT - [0:0]
:KUBE-SVC-NUKIZ6OKUXPJNT4C - [0:0]
:KUBE-SVC-X27LE4BHSL4DOUIK - [0:0]
:KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-NODEPORTS -m comment --comment ns2/svc2:p80 -m tcp -p tcp --dport 3001 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
-A KUBE-NODEPORTS -m comment --comment ns3/svc3:p80 -m tcp -p tcp --dport 3003 -j KUBE-EXT-X27LE4BHSL4DOUIK
-A KUBE-NODEPORTS -m comment --comment ns5/svc5:p80 -m tcp -p tcp --dport 3002 -j KUBE-EXT-NUKIZ6OKUXPJNT4C
-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 80 -j KUBE-SVC-GNZBNJ2PO5MGZ6GT
-A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 external IP" -m tcp -p tcp -d 192.168.99.22 --dport 80 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
-A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 loadbalancer IP" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
-A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
-A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 -j KUBE-SVC-4SW47YFZTEDKD3PK
-A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 external IP" -m tcp -p tcp -d 192.168.99.33 --dport 80 -j KUBE-EXT-4SW47YFZTEDKD3PK
-A KUBE-SERVICES -m comment --comment "ns5/svc5:p80 cluster IP" -m tcp -p tcp -d 172.30.0.45 --dport 80 -j KUBE-SVC-NUKIZ6OKUXPJNT4C
-A KUBE-SERVICES -m comment --comment "ns5/svc5:p80 loadbalancer IP" -m tcp -p tcp -d 5.6.7.8 --dport 80 -j KUBE-FW-NUKIZ6OKUXPJNT4C
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-EXT-4SW47YFZTEDKD3PK -m comment --comment "masquerade traffic for ns4/svc4:p80 external destinations" -j KUBE-MARK-MASQ
-A KUBE-EXT-4SW47YFZTEDKD3PK -j KUBE-SVC-4SW47YFZTEDKD3PK
-A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment "pod traffic for ns2/svc2:p80 external destinations" -s 10.0.0.0/8 -j KUBE-SVC-GNZBNJ2PO5MGZ6GT
-A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment "masquerade LOCAL traffic for ns2/svc2:p80 external destinations" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ
-A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment "route LOCAL traffic for ns2/svc2:p80 external destinations" -m addrtype --src-type LOCAL -j KUBE-SVC-GNZBNJ2PO5MGZ6GT
-A KUBE-EXT-NUKIZ6OKUXPJNT4C -m comment --comment "masquerade traffic for ns5/svc5:p80 external destinations" -j KUBE-MARK-MASQ
-A KUBE-EXT-NUKIZ6OKUXPJNT4C -j KUBE-SVC-NUKIZ6OKUXPJNT4C
-A KUBE-EXT-X27LE4BHSL4DOUIK -m comment --comment "masquerade traffic for ns3/svc3:p80 external destinations" -j KUBE-MARK-MASQ
-A KUBE-EXT-X27LE4BHSL4DOUIK -j KUBE-SVC-X27LE4BHSL4DOUIK
-A KUBE-FW-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 loadbalancer IP" -s 203.0.113.0/25 -j KUBE-EXT-NUKIZ6OKUXPJNT4C
-A KUBE-FW-NUKIZ6OKUXPJNT4C -m comment --comment "other traffic to ns5/svc5:p80 will be dropped by KUBE-PROXY-FIREWALL"
-A KUBE-MARK-MASQ -j MARK --or-mark 0x004000
-A KUBE-POSTROUTING -m mark ! --mark 0x004000/0x004000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x004000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-SEP-C6EBXVWJJZMIWKLZ -m comment --comment ns4/svc4:p80 -s 10.180.0.5 -j KUBE-MARK-MASQ
-A KUBE-SEP-C6EBXVWJJZMIWKLZ -m comment --comment ns4/svc4:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.5:80
-A KUBE-SEP-I77PXRDZVX7PMWMN -m comment --comment ns5/svc5:p80 -s 10.180.0.3 -j KUBE-MARK-MASQ
-A KUBE-SEP-I77PXRDZVX7PMWMN -m comment --comment ns5/svc5:p80 -m recent --name KUBE-SEP-I77PXRDZVX7PMWMN --set -m tcp -p tcp -j DNAT --to-destination 10.180.0.3:80
-A KUBE-SEP-OYPFS5VJICHGATKP -m comment --comment ns3/svc3:p80 -s 10.180.0.3 -j KUBE-MARK-MASQ
-A KUBE-SEP-OYPFS5VJICHGATKP -m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.3:80
-A KUBE-SEP-RS4RBKLTHTF2IUXJ -m comment --comment ns2/svc2:p80 -s 10.180.0.2 -j KUBE-MARK-MASQ
-A KUBE-SEP-RS4RBKLTHTF2IUXJ -m comment --comment ns2/svc2:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.2:80
-A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -s 10.180.0.1 -j KUBE-MARK-MASQ
-A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80
-A KUBE-SEP-UKSFD7AGPMPPLUHC -m comment --comment ns4/svc4:p80 -s 10.180.0.4 -j KUBE-MARK-MASQ
-A KUBE-SEP-UKSFD7AGPMPPLUHC -m comment --comment ns4/svc4:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.4:80
-A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 -> 10.180.0.4:80" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-UKSFD7AGPMPPLUHC
-A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 -> 10.180.0.5:80" -j KUBE-SEP-C6EBXVWJJZMIWKLZ
-A KUBE-SVC-GNZBNJ2PO5MGZ6GT -m comment --comment "ns2/svc2:p80 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-GNZBNJ2PO5MGZ6GT -m comment --comment "ns2/svc2:p80 -> 10.180.0.2:80" -j KUBE-SEP-RS4RBKLTHTF2IUXJ
-A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 cluster IP" -m tcp -p tcp -d 172.30.0.45 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 -> 10.180.0.3:80" -m recent --name KUBE-SEP-I77PXRDZVX7PMWMN --rcheck --seconds 10800 --reap -j KUBE-SEP-I77PXRDZVX7PMWMN
-A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 -> 10.180.0.3:80" -j KUBE-SEP-I77PXRDZVX7PMWMN
-A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 -> 10.180.0.3:80" -j KUBE-SEP-OYPFS5VJICHGATKP
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 -> 10.180.0.1:80" -j KUBE-SEP-SXIVWICOYRO3J4NJ
COMMIT
"#;

#[test]
fn overall_rules() {
    let h = harness();
    let (services, slices) = overall_objects();
    h.load(&services, &slices);
    h.proxier.sync_proxy_rules();
    assert_same_lines(&h.table(Table::Filter), OVERALL_FILTER);
    assert_same_lines(&h.table(Table::Nat), OVERALL_NAT);
    // Order matters within a chain: the NodePort jump comes last in KUBE-SERVICES.
    let nat = h.table(Table::Nat);
    let last = nat.lines().filter(|l| l.starts_with("-A KUBE-SERVICES ")).last().unwrap();
    assert!(last.contains("-j KUBE-NODEPORTS"), "{last}");
}

#[test]
fn partial_sync_writes_only_the_changed_service_and_deletes_stale_chains() {
    let h = harness();
    let (services, mut slices) = overall_objects();
    h.load(&services, &slices);
    h.proxier.sync_proxy_rules();
    slices[3] = slice("ns4", "svc4", 1, "IPv4", vec![endpoint("10.180.0.4", None)], &[("p80", 80, "TCP")]);
    h.proxier.on_endpoint_slice(&slices[3], false);
    h.proxier.sync_proxy_rules();
    let input = h.fake.lock().last_restore.clone();
    assert!(!input.contains(":KUBE-SVC-XPGD46QRK7WJZT7O"), "unchanged svc1 rewritten:\n{input}");
    assert!(input.contains(":KUBE-SVC-4SW47YFZTEDKD3PK"), "{input}");
    assert!(input.contains("-X KUBE-SEP-C6EBXVWJJZMIWKLZ"), "{input}");
    let nat = h.table(Table::Nat);
    // svc1 kept its rules though it was not in the input.
    assert!(
        nat.contains("-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> 10.180.0.1:80\""),
        "{nat}"
    );
    assert!(!nat.contains("KUBE-SEP-C6EBXVWJJZMIWKLZ"), "{nat}");
    assert!(nat.contains("-A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment \"ns4/svc4:p80 -> 10.180.0.4:80\" -j KUBE-SEP-UKSFD7AGPMPPLUHC"), "{nat}");
}

#[test]
fn cleanup_removes_every_chain_and_jump() {
    let h = harness();
    let (services, slices) = overall_objects();
    h.load(&services, &slices);
    h.proxier.sync_proxy_rules();
    let mut fake = h.fake.clone();
    assert!(has_leftovers(&mut fake));
    let errors = cleanup_leftovers(&mut fake);
    assert!(errors.is_empty(), "{errors:?}");
    for t in [Table::Filter, Table::Nat, Table::Mangle] {
        let dump = h.table(t);
        assert!(!dump.contains("KUBE-"), "{dump}");
    }
    assert!(!has_leftovers(&mut fake));
}

#[test]
fn flushed_tables_are_rebuilt_after_the_canary_check() {
    let h = harness();
    let (services, slices) = overall_objects();
    h.load(&services, &slices);
    h.proxier.sync_proxy_rules();
    // Someone flushes everything (a firewall reload, say).
    *h.fake.lock() = Fake::new(Family::Ip);
    h.proxier.with_backend(|b| b.last_canary_check = None);
    h.proxier.on_endpoint_slice(
        &slice("ns1", "svc1", 1, "IPv4", vec![endpoint("10.180.0.7", None)], &[("p80", 80, "TCP")]),
        false,
    );
    h.proxier.sync_proxy_rules();
    let nat = h.table(Table::Nat);
    assert!(
        nat.contains("-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"),
        "{nat}"
    );
    assert!(nat.contains("KUBE-SVC-NUKIZ6OKUXPJNT4C"), "unchanged services rewritten too:\n{nat}");
}
