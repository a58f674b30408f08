//! The shapes of names inside the cluster zone, as the Kubernetes DNS specification (and
//! CoreDNS's `kubernetes` plugin, for what the specification leaves open) reads them.
//!
//! Parsing only splits labels: whether a Service, endpoint or namespace exists is the
//! business of [`records`](crate::records). Comparisons are case-insensitive, so every
//! label comes out lowercased.

use hickory_proto::rr::Name;

/// Which of the two subtrees of the zone a name is under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subtree {
    /// `svc.<zone>`: Services and their endpoints.
    Svc,
    /// `pod.<zone>`: the deprecated `<a-b-c-d>.<ns>.pod.<zone>` records.
    Pod,
}

/// What a name inside the zone asks about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZoneName {
    /// `<zone>` itself (SOA, NS).
    Apex,
    /// `dns-version.<zone>`: the schema version TXT record.
    DnsVersion,
    /// `svc.<zone>` or `pod.<zone>`: names that exist only as parents of others.
    Subtree(Subtree),
    /// `<ns>.svc.<zone>` or `<ns>.pod.<zone>`: exists when the namespace does.
    Namespace { subtree: Subtree, namespace: String },
    /// `<service>.<ns>.svc.<zone>`.
    Service { namespace: String, service: String },
    /// `<endpoint>.<service>.<ns>.svc.<zone>`: an endpoint by its hostname.
    Endpoint { namespace: String, service: String, endpoint: String },
    /// `_<port>._<proto>.<service>.<ns>.svc.<zone>` (the underscores are optional, as in
    /// CoreDNS).
    Port { namespace: String, service: String, port: String, protocol: String },
    /// `<a-b-c-d>.<ns>.pod.<zone>` (or the IPv6 form with `-` for `:`).
    Pod { namespace: String, pod: String },
    /// Inside the zone, but no name the specification defines: NXDOMAIN.
    Unknown,
}

/// Lowercased labels of `name`, left to right, or None when a label is not UTF-8
/// (no Kubernetes object can have such a name).
pub fn labels(name: &Name) -> Option<Vec<String>> {
    name.iter().map(|l| std::str::from_utf8(l).ok().map(str::to_ascii_lowercase)).collect()
}

/// Reads `qname` relative to `zone` (both as lowercased labels); None when the name is not
/// inside the zone.
pub fn parse(qname: &[String], zone: &[String]) -> Option<ZoneName> {
    let rest = qname.strip_suffix(zone)?;
    Some(parse_relative(rest))
}

fn parse_relative(rest: &[String]) -> ZoneName {
    let Some((last, rest)) = rest.split_last() else { return ZoneName::Apex };
    let subtree = match last.as_str() {
        "svc" => Subtree::Svc,
        "pod" => Subtree::Pod,
        "dns-version" if rest.is_empty() => return ZoneName::DnsVersion,
        _ => return ZoneName::Unknown,
    };
    let Some((namespace, rest)) = rest.split_last() else { return ZoneName::Subtree(subtree) };
    let namespace = namespace.clone();
    let Some((object, rest)) = rest.split_last() else {
        return ZoneName::Namespace { subtree, namespace };
    };
    match (subtree, rest) {
        (Subtree::Pod, []) => ZoneName::Pod { namespace, pod: object.clone() },
        (Subtree::Pod, _) => ZoneName::Unknown,
        (Subtree::Svc, []) => ZoneName::Service { namespace, service: object.clone() },
        (Subtree::Svc, [endpoint]) => {
            ZoneName::Endpoint { namespace, service: object.clone(), endpoint: endpoint.clone() }
        }
        (Subtree::Svc, [port, protocol]) => ZoneName::Port {
            namespace,
            service: object.clone(),
            port: strip_underscore(port),
            protocol: strip_underscore(protocol),
        },
        // Deeper names are too long to mean anything here.
        (Subtree::Svc, _) => ZoneName::Unknown,
    }
}

fn strip_underscore(label: &str) -> String {
    label.strip_prefix('_').unwrap_or(label).to_owned()
}

/// The address a pod name spells: `10-1-2-3` is IPv4 when it has exactly three dashes and
/// no empty group, otherwise every dash stands for a colon (`fd00--1` is `fd00::1`), as
/// CoreDNS reads it.
pub fn pod_ip(pod: &str) -> Option<std::net::IpAddr> {
    let text = if pod.matches('-').count() == 3 && !pod.contains("--") {
        pod.replace('-', ".")
    } else {
        pod.replace('-', ":")
    };
    text.parse().ok()
}

/// The hostname the specification lets an implementation choose for an endpoint without
/// one: its address with dashes, as CoreDNS spells it (`10-1-2-3`, `fd00--1`, and a
/// trailing `-` of an IPv6 address completed with `0`).
pub fn address_hostname(ip: &std::net::IpAddr) -> String {
    match ip {
        std::net::IpAddr::V4(v4) => v4.to_string().replace('.', "-"),
        std::net::IpAddr::V6(v6) => {
            let mut s = v6.to_string().replace(':', "-");
            if s.ends_with('-') {
                s.push('0');
            }
            s
        }
    }
}

/// The address a reverse name (`d.c.b.a.in-addr.arpa`, or 32 nibbles under `ip6.arpa`)
/// stands for, or None when it is not a complete address.
pub fn reverse_ip(qname: &[String]) -> Option<std::net::IpAddr> {
    if let Some(rest) = qname.strip_suffix(&["in-addr".to_owned(), "arpa".to_owned()]) {
        if rest.len() != 4 {
            return None;
        }
        let mut octets = [0u8; 4];
        for (i, label) in rest.iter().rev().enumerate() {
            // "01" is not how a reverse name spells 1; refuse it rather than alias it.
            if label.len() > 1 && label.starts_with('0') {
                return None;
            }
            octets[i] = label.parse().ok()?;
        }
        return Some(std::net::IpAddr::from(octets));
    }
    if let Some(rest) = qname.strip_suffix(&["ip6".to_owned(), "arpa".to_owned()]) {
        if rest.len() != 32 {
            return None;
        }
        let mut bytes = [0u8; 16];
        for (i, label) in rest.iter().rev().enumerate() {
            let [c] = label.as_bytes() else { return None };
            let nibble = (*c as char).to_digit(16)? as u8;
            bytes[i / 2] |= if i % 2 == 0 { nibble << 4 } else { nibble };
        }
        return Some(std::net::IpAddr::from(bytes));
    }
    None
}

/// Whether `qname` is under one of the reverse zones (`in-addr.arpa`, `ip6.arpa`).
pub fn is_reverse(qname: &[String]) -> bool {
    matches!(qname, [.., a, b] if b == "arpa" && (a == "in-addr" || a == "ip6"))
}

/// The reverse name of `ip`, as a PTR record's owner.
pub fn reverse_name(ip: &std::net::IpAddr) -> String {
    match ip {
        std::net::IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            format!("{d}.{c}.{b}.{a}.in-addr.arpa.")
        }
        std::net::IpAddr::V6(v6) => {
            let mut s = String::with_capacity(73);
            for byte in v6.octets().iter().rev() {
                s.push_str(&format!("{:x}.{:x}.", byte & 0xf, byte >> 4));
            }
            s.push_str("ip6.arpa.");
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(s: &str) -> Vec<String> {
        labels(&Name::from_ascii(s).unwrap()).unwrap()
    }

    fn p(s: &str) -> Option<ZoneName> {
        parse(&l(s), &l("cluster.local."))
    }

    #[test]
    fn shapes_of_the_specification() {
        assert_eq!(p("cluster.local."), Some(ZoneName::Apex));
        assert_eq!(p("Dns-Version.Cluster.Local."), Some(ZoneName::DnsVersion));
        assert_eq!(p("svc.cluster.local."), Some(ZoneName::Subtree(Subtree::Svc)));
        assert_eq!(p("pod.cluster.local."), Some(ZoneName::Subtree(Subtree::Pod)));
        assert_eq!(
            p("kube-system.svc.cluster.local."),
            Some(ZoneName::Namespace { subtree: Subtree::Svc, namespace: "kube-system".into() })
        );
        assert_eq!(
            p("WEB.Default.svc.cluster.local."),
            Some(ZoneName::Service { namespace: "default".into(), service: "web".into() })
        );
        assert_eq!(
            p("web-0.db.default.svc.cluster.local."),
            Some(ZoneName::Endpoint {
                namespace: "default".into(),
                service: "db".into(),
                endpoint: "web-0".into()
            })
        );
        assert_eq!(
            p("_https._TCP.kubernetes.default.svc.cluster.local."),
            Some(ZoneName::Port {
                namespace: "default".into(),
                service: "kubernetes".into(),
                port: "https".into(),
                protocol: "tcp".into()
            })
        );
        assert_eq!(
            p("10-1-2-3.default.pod.cluster.local."),
            Some(ZoneName::Pod { namespace: "default".into(), pod: "10-1-2-3".into() })
        );
    }

    #[test]
    fn other_names_in_the_zone_are_unknown_and_outside_names_none() {
        for name in [
            "foo.cluster.local.",
            "dns-version.x.cluster.local.",
            "a.b.c.web.default.svc.cluster.local.",
            "x.10-1-2-3.default.pod.cluster.local.",
        ] {
            assert_eq!(p(name), Some(ZoneName::Unknown), "{name}");
        }
        assert_eq!(p("example.com."), None);
        assert_eq!(p("local."), None);
        // A search-path expansion of an external name is inside the zone, and unknown.
        assert_eq!(
            p("example.com.default.svc.cluster.local."),
            Some(ZoneName::Endpoint {
                namespace: "default".into(),
                service: "com".into(),
                endpoint: "example".into()
            })
        );
    }

    #[test]
    fn pod_names_spell_addresses() {
        assert_eq!(pod_ip("10-244-0-5"), Some("10.244.0.5".parse().unwrap()));
        assert_eq!(pod_ip("fd00--1"), Some("fd00::1".parse().unwrap()));
        assert_eq!(pod_ip("1-2-3"), None);
        assert_eq!(pod_ip("300-1-1-1"), None);
        assert_eq!(pod_ip("web"), None);
        assert_eq!(address_hostname(&"10.0.0.7".parse().unwrap()), "10-0-0-7");
        assert_eq!(address_hostname(&"fd00::1".parse().unwrap()), "fd00--1");
        assert_eq!(address_hostname(&"fd00::".parse().unwrap()), "fd00--0");
    }

    #[test]
    fn reverse_names_round_trip() {
        for ip in ["10.96.0.10", "2001:db8::1", "fd00::"] {
            let ip: std::net::IpAddr = ip.parse().unwrap();
            let name = reverse_name(&ip);
            assert!(is_reverse(&l(&name)), "{name}");
            assert_eq!(reverse_ip(&l(&name)), Some(ip), "{name}");
        }
        assert_eq!(reverse_name(&"10.96.0.10".parse().unwrap()), "10.0.96.10.in-addr.arpa.");
        assert_eq!(reverse_ip(&l("96.10.in-addr.arpa.")), None);
        assert_eq!(reverse_ip(&l("010.0.96.10.in-addr.arpa.")), None);
        assert_eq!(reverse_ip(&l("x.0.96.10.in-addr.arpa.")), None);
        assert!(!is_reverse(&l("example.com.")));
    }
}
