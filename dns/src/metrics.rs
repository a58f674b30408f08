//! `/metrics` under CoreDNS's metric names and labels, so the dashboards and alerts
//! written for the upstream addon read this server unchanged.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use component_base::metrics::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub server: String,
    pub zone: String,
    pub view: String,
    pub proto: String,
    pub family: String,
    pub r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResponseLabels {
    pub server: String,
    pub zone: String,
    pub view: String,
    pub rcode: String,
    pub plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DurationLabels {
    pub server: String,
    pub zone: String,
    pub view: String,
    pub r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    pub server: String,
    pub r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerLabels {
    pub server: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToLabels {
    pub to: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToRcodeLabels {
    pub to: String,
    pub rcode: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// CoreDNS's request-duration buckets: 0.25 ms doubling to about 8 s.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.00025, 2.0, 16))
}

/// Every metric the server exports.
#[derive(Debug)]
pub struct Metrics {
    /// `server` label value: `dns://<bind>:<port>` as CoreDNS writes it.
    pub server: String,
    pub requests: Family<RequestLabels, Counter>,
    pub responses: Family<ResponseLabels, Counter>,
    pub duration: HistogramFamily<DurationLabels>,
    pub cache_hits: Family<CacheLabels, Counter>,
    pub cache_misses: Family<ServerLabels, Counter>,
    pub cache_entries: Family<CacheLabels, Gauge>,
    pub cache_evictions: Family<CacheLabels, Counter>,
    pub forward_requests: Family<ToLabels, Counter>,
    pub forward_responses: Family<ToRcodeLabels, Counter>,
    pub forward_duration: HistogramFamily<ToRcodeLabels>,
    pub forward_rejects: Counter,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &Registry, server: String) -> Metrics {
        let m = Metrics {
            server,
            requests: Family::default(),
            responses: Family::default(),
            duration: Family::new_with_constructor(duration_histogram as fn() -> Histogram),
            cache_hits: Family::default(),
            cache_misses: Family::default(),
            cache_entries: Family::default(),
            cache_evictions: Family::default(),
            forward_requests: Family::default(),
            forward_responses: Family::default(),
            forward_duration: Family::new_with_constructor(duration_histogram as fn() -> Histogram),
            forward_rejects: Counter::default(),
        };
        registry.register(
            "coredns_dns_requests",
            "Counter of DNS requests made per zone, protocol and family.",
            m.requests.clone(),
        );
        registry.register("coredns_dns_responses", "Counter of response status codes.", m.responses.clone());
        registry.register(
            "coredns_dns_request_duration_seconds",
            "Histogram of the time (in seconds) each request took per zone.",
            m.duration.clone(),
        );
        registry.register("coredns_cache_hits", "The count of cache hits.", m.cache_hits.clone());
        registry.register("coredns_cache_misses", "The count of cache misses.", m.cache_misses.clone());
        registry.register(
            "coredns_cache_entries",
            "The number of elements in the cache.",
            m.cache_entries.clone(),
        );
        registry.register(
            "coredns_cache_evictions",
            "The count of cache evictions.",
            m.cache_evictions.clone(),
        );
        registry.register(
            "coredns_forward_requests",
            "Counter of requests made per upstream.",
            m.forward_requests.clone(),
        );
        registry.register(
            "coredns_forward_responses",
            "Counter of responses received per upstream.",
            m.forward_responses.clone(),
        );
        registry.register(
            "coredns_forward_request_duration_seconds",
            "Histogram of the time each request took.",
            m.forward_duration.clone(),
        );
        registry.register(
            "coredns_forward_max_concurrent_rejects",
            "Counter of the number of queries rejected because the concurrent queries were at maximum.",
            m.forward_rejects.clone(),
        );
        // Present from the first scrape, as CoreDNS's are.
        for kind in ["success", "denial"] {
            let _ = m.cache_entries.get_or_create(&m.cache_labels(kind));
            let _ = m.cache_hits.get_or_create(&m.cache_labels(kind));
        }
        let _ = m.cache_misses.get_or_create(&ServerLabels { server: m.server.clone() });
        m
    }

    pub fn cache_labels(&self, kind: &str) -> CacheLabels {
        CacheLabels { server: self.server.clone(), r#type: kind.to_owned() }
    }
}

/// The `type` label of a question type: the common ones by name, the rest `other`, as
/// CoreDNS bounds the label's cardinality.
pub fn type_label(qtype: hickory_proto::rr::RecordType) -> &'static str {
    use hickory_proto::rr::RecordType as T;
    match qtype {
        T::A => "A",
        T::AAAA => "AAAA",
        T::CNAME => "CNAME",
        T::HTTPS => "HTTPS",
        T::MX => "MX",
        T::NS => "NS",
        T::PTR => "PTR",
        T::SOA => "SOA",
        T::SRV => "SRV",
        T::TXT => "TXT",
        T::ANY => "ANY",
        T::AXFR => "AXFR",
        T::IXFR => "IXFR",
        _ => "other",
    }
}

/// The rcode as Go's miekg/dns names it (`NOERROR`, `NXDOMAIN`, ...).
pub fn rcode_label(rcode: hickory_proto::op::ResponseCode) -> String {
    use hickory_proto::op::ResponseCode as R;
    match rcode {
        R::NoError => "NOERROR".into(),
        R::FormErr => "FORMERR".into(),
        R::ServFail => "SERVFAIL".into(),
        R::NXDomain => "NXDOMAIN".into(),
        R::NotImp => "NOTIMP".into(),
        R::Refused => "REFUSED".into(),
        R::YXDomain => "YXDOMAIN".into(),
        R::YXRRSet => "YXRRSET".into(),
        R::NXRRSet => "NXRRSET".into(),
        R::NotAuth => "NOTAUTH".into(),
        R::NotZone => "NOTZONE".into(),
        R::BADVERS => "BADVERS".into(),
        other => format!("RCODE{}", u16::from(other)),
    }
}
