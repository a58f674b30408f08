//! The request handler hickory's server calls for every query (UDP or TCP): the cluster
//! zone answered from the informers' state, reverse names of cluster addresses answered
//! likewise, everything else through the cache to the upstreams. Truncation to the
//! client's UDP size is the server's (hickory's encoder sets TC and the client retries on
//! TCP).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use hickory_proto::op::{Edns, Metadata, OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, Record, RecordType};
use hickory_server::net::runtime::Time;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;

use crate::cache::{Cache, Key};
use crate::cluster::Cluster;
use crate::forward::{self, Forwarder, Question};
use crate::metrics::{DurationLabels, Metrics, RequestLabels, ResponseLabels};
use crate::names;
use crate::records::{self, Outcome, Zone};

/// How many CNAMEs inside the zone are followed before giving up (a loop of
/// ExternalNames pointing at each other).
const MAX_ALIAS_CHAIN: usize = 8;
/// Largest UDP response offered to EDNS clients, whatever they advertise.
const MAX_UDP_PAYLOAD: u16 = 4096;

/// What answers a query, and the metric's `plugin` label naming it.
#[derive(Debug)]
struct Reply {
    rcode: ResponseCode,
    authoritative: bool,
    authentic_data: bool,
    answers: Vec<Record>,
    authorities: Vec<Record>,
    additionals: Vec<Record>,
    plugin: &'static str,
}

impl Reply {
    fn error(rcode: ResponseCode) -> Reply {
        Reply {
            rcode,
            authoritative: false,
            authentic_data: false,
            answers: Vec::new(),
            authorities: Vec::new(),
            additionals: Vec::new(),
            plugin: "",
        }
    }
}

pub struct Handler {
    pub cluster: Arc<Cluster>,
    /// Set once every informer has listed: until then the zone's answers would be wrong
    /// (NXDOMAIN for Services not seen yet), so the zone answers SERVFAIL, as CoreDNS.
    pub synced: Arc<AtomicBool>,
    pub zone: Zone,
    pub forwarder: Arc<Forwarder>,
    pub cache: Arc<Cache>,
    pub metrics: Arc<Metrics>,
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let started = Instant::now();
        let qtype = request.queries.queries().first().map(|q| q.query_type());
        let type_label = qtype.map(crate::metrics::type_label).unwrap_or("other").to_owned();
        let proto = match request.protocol() {
            Protocol::Udp => "udp",
            _ => "tcp",
        };
        let family = if request.src().is_ipv4() { "1" } else { "2" };
        self.metrics
            .requests
            .get_or_create(&RequestLabels {
                server: self.metrics.server.clone(),
                zone: ".".into(),
                view: String::new(),
                proto: proto.into(),
                family: family.into(),
                r#type: type_label.clone(),
            })
            .inc();

        let reply = self.resolve(request).await;

        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.authoritative = reply.authoritative;
        metadata.recursion_available = true;
        metadata.authentic_data = reply.authentic_data;
        metadata.response_code = reply.rcode;
        // The client's EDNS buffer size bounds a UDP answer (hickory's encoder truncates to
        // the response's OPT size, or to 512 bytes without one, and sets TC).
        let edns = request.edns.as_ref().map(|asked| {
            let mut e = Edns::new();
            e.set_max_payload(asked.max_payload().clamp(512, MAX_UDP_PAYLOAD));
            e.set_dnssec_ok(asked.flags().dnssec_ok);
            e
        });
        let mut builder = MessageResponseBuilder::from_message_request(request);
        if let Some(e) = &edns {
            builder.edns(e);
        }
        let response = builder.build(
            metadata,
            reply.answers.iter(),
            reply.authorities.iter(),
            std::iter::empty(),
            reply.additionals.iter(),
        );
        let info = match response_handle.send_response(response).await {
            Ok(info) => info,
            Err(err) => {
                tracing::debug!(%err, src = %request.src(), "sending the response failed");
                let mut failed = Metadata::response_from_request(&request.metadata);
                failed.response_code = ResponseCode::ServFail;
                ResponseInfo::from(hickory_proto::op::Header { metadata: failed, counts: Default::default() })
            }
        };

        self.metrics
            .responses
            .get_or_create(&ResponseLabels {
                server: self.metrics.server.clone(),
                zone: ".".into(),
                view: String::new(),
                rcode: crate::metrics::rcode_label(reply.rcode),
                plugin: reply.plugin.into(),
            })
            .inc();
        self.metrics
            .duration
            .get_or_create(&DurationLabels {
                server: self.metrics.server.clone(),
                zone: ".".into(),
                view: String::new(),
                r#type: type_label,
            })
            .observe(started.elapsed().as_secs_f64());
        info
    }
}

impl Handler {
    async fn resolve(&self, request: &Request) -> Reply {
        if request.metadata.op_code != OpCode::Query {
            return Reply::error(ResponseCode::NotImp);
        }
        // Exactly one question, as every resolver sends.
        let Ok(info) = request.request_info() else { return Reply::error(ResponseCode::FormErr) };
        let query = info.query.original().clone();
        let qname = query.name().clone();
        let qtype = query.query_type();
        let question = Question {
            query: query.clone(),
            recursion_desired: request.metadata.recursion_desired,
            checking_disabled: request.metadata.checking_disabled,
            dnssec_ok: request.edns.as_ref().is_some_and(|e| e.flags().dnssec_ok),
            tcp: request.protocol() != Protocol::Udp,
        };
        let Some(labels) = names::labels(&qname) else { return self.forward(&question).await };

        if let Some(name) = names::parse(&labels, &self.zone.labels) {
            if !matches!(query.query_class(), DNSClass::IN | DNSClass::ANY) {
                return Reply::error(ResponseCode::Refused);
            }
            if matches!(qtype, RecordType::AXFR | RecordType::IXFR) {
                return Reply::error(ResponseCode::Refused);
            }
            if !self.synced.load(Ordering::Acquire) {
                return Reply::error(ResponseCode::ServFail);
            }
            let outcome = records::lookup(&self.cluster.read(), &self.zone, &qname, &name, qtype);
            return self.zone_reply(outcome, &question).await;
        }

        if names::is_reverse(&labels)
            && qtype == RecordType::PTR
            && self.synced.load(Ordering::Acquire)
            && let Some(ip) = names::reverse_ip(&labels)
        {
            let records = records::reverse(&self.cluster.read(), &self.zone, &qname, &ip);
            if !records.is_empty() {
                let mut reply = self.authoritative(ResponseCode::NoError);
                reply.answers = records;
                return reply;
            }
            // Not a cluster address: the node's resolvers may know it (CoreDNS's
            // `fallthrough in-addr.arpa ip6.arpa`).
        }
        self.forward(&question).await
    }

    fn authoritative(&self, rcode: ResponseCode) -> Reply {
        Reply { authoritative: true, plugin: "kubernetes", ..Reply::error(rcode) }
    }

    /// The reply for an outcome of the zone; an ExternalName's target is followed inside
    /// the zone or upstream, and its records appended after the CNAMEs.
    async fn zone_reply(&self, outcome: Outcome, question: &Question) -> Reply {
        let qtype = question.query.query_type();
        let mut reply = self.authoritative(ResponseCode::NoError);
        let mut outcome = outcome;
        for _ in 0..MAX_ALIAS_CHAIN {
            match outcome {
                Outcome::Answer { answers, additionals } => {
                    reply.answers.extend(answers);
                    reply.additionals.extend(additionals);
                    return reply;
                }
                Outcome::NoData | Outcome::NxDomain if !reply.answers.is_empty() => {
                    // The alias exists; what it points at has nothing of this type.
                    return reply;
                }
                Outcome::NoData => {
                    reply.authorities.push(self.soa());
                    return reply;
                }
                Outcome::NxDomain => {
                    reply.rcode = ResponseCode::NXDomain;
                    reply.authorities.push(self.soa());
                    return reply;
                }
                Outcome::Alias { cname, target } => {
                    reply.answers.push(cname);
                    match self.zone_name(&target) {
                        Some(name) => {
                            outcome =
                                records::lookup(&self.cluster.read(), &self.zone, &target, &name, qtype);
                        }
                        None => {
                            let upstream =
                                Question { query: Query::query(target, qtype), ..question.clone() };
                            let resolved = self.forward(&upstream).await;
                            // A failed lookup of the target still leaves the CNAME to answer with.
                            if resolved.rcode == ResponseCode::NoError {
                                reply.answers.extend(resolved.answers);
                            }
                            return reply;
                        }
                    }
                }
            }
        }
        tracing::warn!(name = %question.query.name(), "ExternalName chain longer than {MAX_ALIAS_CHAIN}");
        Reply::error(ResponseCode::ServFail)
    }

    fn zone_name(&self, name: &Name) -> Option<names::ZoneName> {
        names::parse(&names::labels(name)?, &self.zone.labels)
    }

    fn soa(&self) -> Record {
        self.zone.soa(self.cluster.read().serial())
    }

    /// The upstreams' answer, from the cache when it has one.
    async fn forward(&self, question: &Question) -> Reply {
        let key = Key {
            name: question.query.name().to_lowercase().to_ascii(),
            qtype: u16::from(question.query.query_type()),
            qclass: u16::from(question.query.query_class()),
            dnssec_ok: question.dnssec_ok,
            checking_disabled: question.checking_disabled,
        };
        if let Some(hit) = self.cache.get(&key) {
            return Reply {
                rcode: hit.rcode,
                authoritative: false,
                authentic_data: hit.authentic_data,
                answers: hit.answers,
                authorities: hit.authorities,
                additionals: hit.additionals,
                plugin: "cache",
            };
        }
        match self.forwarder.forward(question).await {
            Ok(mut response) => {
                if let Some(ttl) = self.cache.insert(key, &response) {
                    for r in response
                        .answers
                        .iter_mut()
                        .chain(&mut response.authorities)
                        .chain(&mut response.additionals)
                    {
                        r.ttl = r.ttl.min(ttl);
                    }
                }
                Reply {
                    rcode: response.metadata.response_code,
                    authoritative: false,
                    authentic_data: response.metadata.authentic_data,
                    answers: response.answers,
                    authorities: response.authorities,
                    additionals: response.additionals,
                    plugin: "forward",
                }
            }
            Err(forward::Error::Overloaded) => {
                Reply { plugin: "forward", ..Reply::error(ResponseCode::Refused) }
            }
            Err(err) => {
                tracing::warn!(name = %question.query.name(), qtype = %question.query.query_type(), %err, "forwarding failed");
                Reply { plugin: "forward", ..Reply::error(ResponseCode::ServFail) }
            }
        }
    }
}
