//! The Kubernetes DNS-based service discovery specification (schema 1.1.0): from the
//! cluster state and a question to the records, NODATA or NXDOMAIN.
//!
//! Where the specification is silent this follows CoreDNS's `kubernetes` plugin with
//! `pods insecure`, the upstream default: a name that exists answers NODATA for other
//! types (so a resolver walking the search path moves on, and an AAAA question beside an
//! IPv4-only Service does not poison the A answer); a name that does not exist answers
//! NXDOMAIN; a headless Service without ready endpoints does not exist.

use std::net::IpAddr;

use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, PTR, SOA, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use rand::seq::SliceRandom;

use crate::cluster::{ReadyEndpoint, Service, ServiceKind, State};
use crate::names::ZoneName;

/// The schema version `dns-version.<zone>` reports.
pub const SCHEMA_VERSION: &str = "1.1.0";

/// How `<a-b-c-d>.<ns>.pod.<zone>` is answered (CoreDNS's `pods` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodMode {
    /// The address the name spells, for any namespace that exists (`pods insecure`).
    Insecure,
    /// No pod records: NXDOMAIN.
    Disabled,
}

/// The zone and the answers' parameters.
#[derive(Debug, Clone)]
pub struct Zone {
    /// The cluster domain, lowercased, as an FQDN (`cluster.local.`).
    pub name: Name,
    /// Its labels, lowercased.
    pub labels: Vec<String>,
    /// TTL of every record served from the cluster state.
    pub ttl: u32,
    pub pods: PodMode,
}

impl Zone {
    pub fn new(domain: &str, ttl: u32, pods: PodMode) -> Result<Zone, hickory_proto::ProtoError> {
        let trimmed = domain.trim_end_matches('.');
        let name = Name::from_ascii(format!("{}.", trimmed.to_ascii_lowercase()))?;
        let labels = crate::names::labels(&name).unwrap_or_default();
        Ok(Zone { name, labels, ttl, pods })
    }

    /// `<rel>.<zone>` as a name; `rel` comes from the API (DNS labels) or this module.
    fn child(&self, rel: &str) -> Option<Name> {
        Name::from_ascii(format!("{rel}.{}", self.name)).ok()
    }

    /// The zone's SOA record, whose minimum (the negative-caching TTL) is the record TTL.
    pub fn soa(&self, serial: u32) -> Record {
        let mname = self.child("ns.dns").unwrap_or_else(|| self.name.clone());
        let rname = self.child("hostmaster").unwrap_or_else(|| self.name.clone());
        let soa = SOA::new(mname, rname, serial, 7200, 1800, 86400, self.ttl);
        Record::from_rdata(self.name.clone(), self.ttl, RData::SOA(soa))
    }
}

/// What the zone says about a question.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Records for the answer section, and records for the additional section.
    Answer { answers: Vec<Record>, additionals: Vec<Record> },
    /// An ExternalName Service: its CNAME, and the target a resolver follows for the
    /// question's type.
    Alias { cname: Record, target: Name },
    /// The name exists, but has no records of the asked type.
    NoData,
    /// The name does not exist.
    NxDomain,
}

/// The answer to `qtype` at `qname` (which parses as `name` inside `zone`).
pub fn lookup(state: &State, zone: &Zone, qname: &Name, name: &ZoneName, qtype: RecordType) -> Outcome {
    let ttl = zone.ttl;
    match name {
        ZoneName::Apex => match qtype {
            RecordType::SOA => answer(vec![zone.soa(state.serial())]),
            RecordType::NS => match zone.child("ns.dns") {
                Some(ns) => answer(vec![Record::from_rdata(qname.clone(), ttl, RData::NS(NS(ns)))]),
                None => Outcome::NoData,
            },
            _ => Outcome::NoData,
        },
        ZoneName::DnsVersion => match qtype {
            RecordType::TXT => answer(vec![Record::from_rdata(
                qname.clone(),
                ttl,
                RData::TXT(TXT::new(vec![SCHEMA_VERSION.to_owned()])),
            )]),
            _ => Outcome::NoData,
        },
        ZoneName::Subtree(_) => Outcome::NoData,
        ZoneName::Namespace { namespace, .. } => {
            if state.namespace_exists(namespace) {
                Outcome::NoData
            } else {
                Outcome::NxDomain
            }
        }
        ZoneName::Pod { namespace, pod } => {
            if zone.pods == PodMode::Disabled || !state.namespace_exists(namespace) {
                return Outcome::NxDomain;
            }
            match crate::names::pod_ip(pod) {
                Some(ip) => addresses(qname, ttl, [ip], qtype, Vec::new()),
                None => Outcome::NxDomain,
            }
        }
        ZoneName::Service { namespace, service } => {
            let Some(svc) = existing_service(state, namespace, service) else { return Outcome::NxDomain };
            service_lookup(state, zone, qname, svc, qtype)
        }
        ZoneName::Endpoint { namespace, service, endpoint } => {
            let Some(svc) = existing_service(state, namespace, service) else { return Outcome::NxDomain };
            if matches!(svc.kind, ServiceKind::ExternalName(_)) {
                return Outcome::NxDomain;
            }
            let matching: Vec<ReadyEndpoint> =
                state.ready_endpoints(svc).into_iter().filter(|e| e.hostname() == *endpoint).collect();
            if matching.is_empty() {
                return Outcome::NxDomain;
            }
            let ips: Vec<IpAddr> =
                matching.iter().flat_map(|e| e.endpoint.addresses.iter().copied()).collect();
            match qtype {
                RecordType::SRV => {
                    let targets: Vec<(u16, Name, Vec<IpAddr>)> = matching
                        .iter()
                        .flat_map(|e| {
                            e.ports.iter().map(|p| (p.port, qname.clone(), e.endpoint.addresses.clone()))
                        })
                        .collect();
                    srv_answer(qname, ttl, targets)
                }
                _ => addresses(qname, ttl, ips, qtype, Vec::new()),
            }
        }
        ZoneName::Port { namespace, service, port, protocol } => {
            let Some(svc) = existing_service(state, namespace, service) else { return Outcome::NxDomain };
            let matches = |p: &crate::cluster::Port| {
                p.name.eq_ignore_ascii_case(port) && p.protocol.eq_ignore_ascii_case(protocol)
            };
            // (port, target, the target's addresses) per SRV record.
            let targets: Vec<(u16, Name, Vec<IpAddr>)> = match &svc.kind {
                ServiceKind::ExternalName(_) => return Outcome::NxDomain,
                ServiceKind::ClusterIp(ips) => {
                    let Some(target) = service_name(zone, svc) else { return Outcome::NxDomain };
                    svc.ports
                        .iter()
                        .filter(|p| matches(p))
                        .map(|p| (p.port, target.clone(), ips.clone()))
                        .collect()
                }
                ServiceKind::Headless => state
                    .ready_endpoints(svc)
                    .iter()
                    .flat_map(|e| {
                        let target = endpoint_name(zone, svc, &e.hostname());
                        e.ports.iter().filter(|p| matches(p)).filter_map(move |p| {
                            Some((p.port, target.clone()?, e.endpoint.addresses.clone()))
                        })
                    })
                    .collect(),
            };
            if targets.is_empty() {
                return Outcome::NxDomain;
            }
            match qtype {
                RecordType::SRV => srv_answer(qname, ttl, targets),
                // As CoreDNS: the port name also resolves to the addresses behind it.
                _ => addresses(qname, ttl, targets.into_iter().flat_map(|t| t.2), qtype, Vec::new()),
            }
        }
        ZoneName::Unknown => Outcome::NxDomain,
    }
}

/// The Service, if it and its namespace exist.
fn existing_service<'s>(state: &'s State, namespace: &str, service: &str) -> Option<&'s Service> {
    if !state.namespace_exists(namespace) {
        return None;
    }
    state.service(namespace, service)
}

fn service_lookup(state: &State, zone: &Zone, qname: &Name, svc: &Service, qtype: RecordType) -> Outcome {
    let ttl = zone.ttl;
    match &svc.kind {
        ServiceKind::ExternalName(target) => {
            // An IP address is not a name to alias; CoreDNS serves nothing for it either.
            if target.parse::<IpAddr>().is_ok() {
                return Outcome::NxDomain;
            }
            let Ok(target) = Name::from_ascii(format!("{}.", target.trim_end_matches('.'))) else {
                return Outcome::NxDomain;
            };
            let cname = Record::from_rdata(qname.clone(), ttl, RData::CNAME(CNAME(target.clone())));
            if qtype == RecordType::CNAME { answer(vec![cname]) } else { Outcome::Alias { cname, target } }
        }
        ServiceKind::ClusterIp(ips) => match qtype {
            RecordType::SRV => {
                let Some(target) = service_name(zone, svc) else { return Outcome::NoData };
                let targets = svc.ports.iter().map(|p| (p.port, target.clone(), ips.clone())).collect();
                srv_answer(qname, ttl, targets)
            }
            _ => addresses(qname, ttl, ips.iter().copied(), qtype, Vec::new()),
        },
        ServiceKind::Headless => {
            let ready = state.ready_endpoints(svc);
            if ready.is_empty() {
                return Outcome::NxDomain;
            }
            match qtype {
                RecordType::SRV => {
                    let targets: Vec<(u16, Name, Vec<IpAddr>)> = ready
                        .iter()
                        .flat_map(|e| {
                            let target = endpoint_name(zone, svc, &e.hostname());
                            e.ports.iter().filter_map(move |p| {
                                Some((p.port, target.clone()?, e.endpoint.addresses.clone()))
                            })
                        })
                        .collect();
                    if targets.is_empty() { Outcome::NoData } else { srv_answer(qname, ttl, targets) }
                }
                _ => addresses(
                    qname,
                    ttl,
                    ready.iter().flat_map(|e| e.endpoint.addresses.iter().copied()),
                    qtype,
                    Vec::new(),
                ),
            }
        }
    }
}

/// `<service>.<ns>.svc.<zone>`.
fn service_name(zone: &Zone, svc: &Service) -> Option<Name> {
    zone.child(&format!("{}.{}.svc", svc.name, svc.namespace))
}

/// `<hostname>.<service>.<ns>.svc.<zone>`.
fn endpoint_name(zone: &Zone, svc: &Service, hostname: &str) -> Option<Name> {
    zone.child(&format!("{hostname}.{}.{}.svc", svc.name, svc.namespace))
}

fn answer(answers: Vec<Record>) -> Outcome {
    Outcome::Answer { answers, additionals: Vec::new() }
}

/// A or AAAA records of `ips` at `owner` for an A or AAAA question, deduplicated and
/// shuffled (clients take the first; the order spreads them, as CoreDNS's `loadbalance`);
/// NODATA for other types or when no address has the asked family.
fn addresses(
    owner: &Name,
    ttl: u32,
    ips: impl IntoIterator<Item = IpAddr>,
    qtype: RecordType,
    additionals: Vec<Record>,
) -> Outcome {
    let mut seen: Vec<IpAddr> = Vec::new();
    for ip in ips {
        let wanted =
            matches!((qtype, ip), (RecordType::A, IpAddr::V4(_)) | (RecordType::AAAA, IpAddr::V6(_)));
        if wanted && !seen.contains(&ip) {
            seen.push(ip);
        }
    }
    if seen.is_empty() {
        return Outcome::NoData;
    }
    seen.shuffle(&mut rand::rng());
    let answers = seen.iter().map(|ip| address_record(owner, ttl, *ip)).collect();
    Outcome::Answer { answers, additionals }
}

fn address_record(owner: &Name, ttl: u32, ip: IpAddr) -> Record {
    let data = match ip {
        IpAddr::V4(v4) => RData::A(A(v4)),
        IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
    };
    Record::from_rdata(owner.clone(), ttl, data)
}

/// SRV records (priority 0, weights sharing 100 as CoreDNS's) for `(port, target,
/// target's addresses)`, with the targets' A/AAAA records as additionals.
fn srv_answer(owner: &Name, ttl: u32, mut targets: Vec<(u16, Name, Vec<IpAddr>)>) -> Outcome {
    targets.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    targets.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
    if targets.is_empty() {
        return Outcome::NoData;
    }
    let weight = u16::try_from((100 / targets.len()).max(1)).unwrap_or(1);
    let mut answers = Vec::with_capacity(targets.len());
    let mut additionals: Vec<Record> = Vec::new();
    for (port, target, ips) in targets {
        answers.push(Record::from_rdata(
            owner.clone(),
            ttl,
            RData::SRV(SRV::new(0, weight, port, target.clone())),
        ));
        for ip in ips {
            let record = address_record(&target, ttl, ip);
            if !additionals.contains(&record) {
                additionals.push(record);
            }
        }
    }
    Outcome::Answer { answers, additionals }
}

/// PTR records for `ip` at `qname`: the Service whose ClusterIP it is, else every ready
/// endpoint with that address (`<hostname>.<service>.<ns>.svc.<zone>`). Empty when the
/// address is not the cluster's, so the question can go upstream.
pub fn reverse(state: &State, zone: &Zone, qname: &Name, ip: &IpAddr) -> Vec<Record> {
    let ptr = |target: Name| Record::from_rdata(qname.clone(), zone.ttl, RData::PTR(PTR(target)));
    if let Some(svc) = state.service_by_cluster_ip(ip) {
        return service_name(zone, svc).map(ptr).into_iter().collect();
    }
    state
        .endpoints_by_ip(ip)
        .into_iter()
        .filter_map(|(svc, hostname)| endpoint_name(zone, svc, &hostname))
        .map(ptr)
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Service as ApiService;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use serde_json::json;

    use super::*;
    use crate::cluster::Cluster;

    fn zone() -> Zone {
        Zone::new("cluster.local", 30, PodMode::Insecure).unwrap()
    }

    /// A cluster with namespaces default and kube-system and the Services of the
    /// specification's examples.
    fn cluster() -> Cluster {
        let c = Cluster::new();
        c.replace_namespaces(["default".to_owned(), "kube-system".to_owned()]);
        let svc = |v: serde_json::Value| c.apply_service(&serde_json::from_value::<ApiService>(v).unwrap());
        svc(json!({"metadata": {"name": "kubernetes", "namespace": "default"},
                   "spec": {"clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"],
                            "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}}));
        svc(json!({"metadata": {"name": "dual", "namespace": "default"},
                   "spec": {"clusterIPs": ["10.96.0.7", "fd00::7"],
                            "ports": [{"port": 80}]}}));
        svc(json!({"metadata": {"name": "headless", "namespace": "default"},
                   "spec": {"clusterIP": "None",
                            "ports": [{"name": "https", "port": 443}, {"name": "dns", "port": 53, "protocol": "UDP"}]}}));
        svc(json!({"metadata": {"name": "empty", "namespace": "default"}, "spec": {"clusterIP": "None"}}));
        svc(json!({"metadata": {"name": "foo", "namespace": "default"},
                   "spec": {"type": "ExternalName", "externalName": "www.example.com"}}));
        svc(json!({"metadata": {"name": "byip", "namespace": "default"},
                   "spec": {"type": "ExternalName", "externalName": "192.0.2.1"}}));
        c.apply_slice(
            &serde_json::from_value::<EndpointSlice>(json!({
                "metadata": {"name": "headless-1", "namespace": "default",
                             "labels": {"kubernetes.io/service-name": "headless"}},
                "addressType": "IPv4",
                "ports": [{"name": "https", "port": 443, "protocol": "TCP"}],
                "endpoints": [
                    {"addresses": ["10.3.0.100"], "hostname": "my-pet", "conditions": {"ready": true}},
                    {"addresses": ["10.3.0.2"], "conditions": {"ready": true}},
                    {"addresses": ["10.3.0.3"], "conditions": {"ready": false}}
                ]
            }))
            .unwrap(),
        );
        c.apply_slice(
            &serde_json::from_value::<EndpointSlice>(json!({
                "metadata": {"name": "kubernetes", "namespace": "default",
                             "labels": {"kubernetes.io/service-name": "kubernetes"}},
                "addressType": "IPv4",
                "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
                "endpoints": [{"addresses": ["192.168.1.1"], "conditions": {"ready": true}}]
            }))
            .unwrap(),
        );
        c
    }

    fn ask(c: &Cluster, name: &str, qtype: RecordType) -> Outcome {
        let zone = zone();
        let qname = Name::from_ascii(name).unwrap();
        let labels = crate::names::labels(&qname).unwrap();
        let parsed = crate::names::parse(&labels, &zone.labels).expect("in the zone");
        lookup(&c.read(), &zone, &qname, &parsed, qtype)
    }

    /// The answer section as sorted `type data` strings.
    fn rdata(outcome: &Outcome) -> Vec<String> {
        let Outcome::Answer { answers, .. } = outcome else { panic!("not an answer: {outcome:?}") };
        let mut v: Vec<String> = answers.iter().map(|r| format!("{} {}", r.record_type(), r.data)).collect();
        v.sort();
        v
    }

    #[test]
    fn cluster_ip_service_a_aaaa_srv() {
        let c = cluster();
        assert_eq!(rdata(&ask(&c, "kubernetes.default.svc.cluster.local.", RecordType::A)), ["A 10.96.0.1"]);
        assert_eq!(
            ask(&c, "kubernetes.default.svc.cluster.local.", RecordType::AAAA),
            Outcome::NoData,
            "an IPv4 Service has no AAAA record, but the name exists"
        );
        assert_eq!(rdata(&ask(&c, "Dual.Default.SVC.cluster.local.", RecordType::AAAA)), ["AAAA fd00::7"]);
        let srv = ask(&c, "_https._tcp.kubernetes.default.svc.cluster.local.", RecordType::SRV);
        assert_eq!(rdata(&srv), ["SRV 0 100 443 kubernetes.default.svc.cluster.local."]);
        let Outcome::Answer { additionals, .. } = &srv else { unreachable!() };
        assert_eq!(additionals.len(), 1);
        assert_eq!(additionals[0].name.to_string(), "kubernetes.default.svc.cluster.local.");
        assert_eq!(
            ask(&c, "_http._tcp.kubernetes.default.svc.cluster.local.", RecordType::SRV),
            Outcome::NxDomain,
            "no such port"
        );
        assert_eq!(
            ask(&c, "_https._udp.kubernetes.default.svc.cluster.local.", RecordType::SRV),
            Outcome::NxDomain,
            "no such protocol"
        );
        assert_eq!(ask(&c, "kubernetes.default.svc.cluster.local.", RecordType::TXT), Outcome::NoData);
        let Outcome::Answer { answers, .. } = ask(&c, "kubernetes.default.svc.cluster.local.", RecordType::A)
        else {
            unreachable!()
        };
        assert_eq!(answers[0].ttl, 30);
        assert_eq!(answers[0].name.to_string(), "kubernetes.default.svc.cluster.local.");
    }

    #[test]
    fn headless_service_endpoints_and_hostnames() {
        let c = cluster();
        assert_eq!(
            rdata(&ask(&c, "headless.default.svc.cluster.local.", RecordType::A)),
            ["A 10.3.0.100", "A 10.3.0.2"],
            "one record per ready endpoint; 10.3.0.3 is not ready"
        );
        assert_eq!(
            rdata(&ask(&c, "my-pet.headless.default.svc.cluster.local.", RecordType::A)),
            ["A 10.3.0.100"]
        );
        assert_eq!(
            rdata(&ask(&c, "10-3-0-2.headless.default.svc.cluster.local.", RecordType::A)),
            ["A 10.3.0.2"]
        );
        assert_eq!(ask(&c, "10-3-0-3.headless.default.svc.cluster.local.", RecordType::A), Outcome::NxDomain);
        assert_eq!(ask(&c, "nobody.headless.default.svc.cluster.local.", RecordType::A), Outcome::NxDomain);
        assert_eq!(ask(&c, "my-pet.headless.default.svc.cluster.local.", RecordType::AAAA), Outcome::NoData);
        assert_eq!(
            rdata(&ask(&c, "_https._tcp.headless.default.svc.cluster.local.", RecordType::SRV)),
            [
                "SRV 0 50 443 10-3-0-2.headless.default.svc.cluster.local.",
                "SRV 0 50 443 my-pet.headless.default.svc.cluster.local."
            ]
        );
        assert_eq!(
            ask(&c, "_dns._udp.headless.default.svc.cluster.local.", RecordType::SRV),
            Outcome::NxDomain,
            "the Service's port is not among the endpoints' ports"
        );
        assert_eq!(
            ask(&c, "empty.default.svc.cluster.local.", RecordType::A),
            Outcome::NxDomain,
            "a headless Service without ready endpoints answers NXDOMAIN, as the specification says"
        );
    }

    #[test]
    fn external_name_is_a_cname() {
        let c = cluster();
        match ask(&c, "foo.default.svc.cluster.local.", RecordType::A) {
            Outcome::Alias { cname, target } => {
                assert_eq!(target.to_string(), "www.example.com.");
                assert_eq!(format!("{}", cname.data), "www.example.com.");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            rdata(&ask(&c, "foo.default.svc.cluster.local.", RecordType::CNAME)),
            ["CNAME www.example.com."]
        );
        assert_eq!(ask(&c, "byip.default.svc.cluster.local.", RecordType::A), Outcome::NxDomain);
        assert_eq!(ask(&c, "_x._tcp.foo.default.svc.cluster.local.", RecordType::SRV), Outcome::NxDomain);
    }

    #[test]
    fn nxdomain_and_nodata_along_the_search_path() {
        let c = cluster();
        for (name, want) in [
            ("cluster.local.", Outcome::NoData),
            ("svc.cluster.local.", Outcome::NoData),
            ("pod.cluster.local.", Outcome::NoData),
            ("default.svc.cluster.local.", Outcome::NoData),
            ("nosuchns.svc.cluster.local.", Outcome::NxDomain),
            ("missing.default.svc.cluster.local.", Outcome::NxDomain),
            ("kubernetes.nosuchns.svc.cluster.local.", Outcome::NxDomain),
            // What `example.com` with ndots:5 expands to first: must be a fast NXDOMAIN.
            ("example.com.default.svc.cluster.local.", Outcome::NxDomain),
            ("example.com.svc.cluster.local.", Outcome::NxDomain),
            ("example.com.cluster.local.", Outcome::NxDomain),
            ("dns-version.cluster.local.", Outcome::NoData),
        ] {
            assert_eq!(ask(&c, name, RecordType::A), want, "{name}");
        }
        assert_eq!(rdata(&ask(&c, "dns-version.cluster.local.", RecordType::TXT)), ["TXT 1.1.0"]);
        assert!(matches!(ask(&c, "cluster.local.", RecordType::SOA), Outcome::Answer { .. }));
        assert_eq!(rdata(&ask(&c, "cluster.local.", RecordType::NS)), ["NS ns.dns.cluster.local."]);
    }

    #[test]
    fn pod_records() {
        let c = cluster();
        assert_eq!(rdata(&ask(&c, "10-244-1-5.default.pod.cluster.local.", RecordType::A)), ["A 10.244.1.5"]);
        assert_eq!(rdata(&ask(&c, "fd00--5.default.pod.cluster.local.", RecordType::AAAA)), ["AAAA fd00::5"]);
        assert_eq!(ask(&c, "10-244-1-5.default.pod.cluster.local.", RecordType::AAAA), Outcome::NoData);
        assert_eq!(ask(&c, "10-244-1-5.nosuchns.pod.cluster.local.", RecordType::A), Outcome::NxDomain);
        assert_eq!(ask(&c, "web.default.pod.cluster.local.", RecordType::A), Outcome::NxDomain);
        let zone = Zone::new("cluster.local", 30, PodMode::Disabled).unwrap();
        let qname = Name::from_ascii("10-244-1-5.default.pod.cluster.local.").unwrap();
        let parsed = ZoneName::Pod { namespace: "default".into(), pod: "10-244-1-5".into() };
        assert_eq!(lookup(&c.read(), &zone, &qname, &parsed, RecordType::A), Outcome::NxDomain);
    }

    #[test]
    fn ptr_for_service_and_endpoint_addresses() {
        let c = cluster();
        let zone = zone();
        let ptr = |ip: &str| {
            let ip: IpAddr = ip.parse().unwrap();
            let qname = Name::from_ascii(crate::names::reverse_name(&ip)).unwrap();
            reverse(&c.read(), &zone, &qname, &ip).iter().map(|r| format!("{}", r.data)).collect::<Vec<_>>()
        };
        assert_eq!(ptr("10.96.0.1"), ["kubernetes.default.svc.cluster.local."]);
        assert_eq!(ptr("fd00::7"), ["dual.default.svc.cluster.local."]);
        assert_eq!(ptr("10.3.0.100"), ["my-pet.headless.default.svc.cluster.local."]);
        assert_eq!(ptr("10.3.0.2"), ["10-3-0-2.headless.default.svc.cluster.local."]);
        assert_eq!(ptr("192.168.1.1"), ["192-168-1-1.kubernetes.default.svc.cluster.local."]);
        assert!(ptr("10.3.0.3").is_empty(), "not ready");
        assert!(ptr("8.8.8.8").is_empty());
    }

    #[test]
    fn soa_carries_the_ttl_as_its_minimum() {
        let soa = zone().soa(42);
        let RData::SOA(data) = &soa.data else { panic!() };
        assert_eq!((data.serial, data.minimum), (42, 30));
        assert_eq!(data.mname.to_string(), "ns.dns.cluster.local.");
    }
}
