//! The cache of forwarded answers: positive answers for the smallest TTL among their
//! records, denials (NXDOMAIN, NODATA) for their SOA's negative TTL (RFC 2308), both capped
//! by `--cache-ttl` as CoreDNS's `cache 30`; TTLs count down while an answer is cached.
//!
//! Bounded: the entries are spread over shards (one lock each, so parallel queries rarely
//! contend); a full shard drops its expired entries, then an arbitrary one.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, Record, RecordType};
use parking_lot::Mutex;

use crate::metrics::Metrics;

/// TTL of a denial that carries no SOA (CoreDNS's fail-safe).
const DENIAL_WITHOUT_SOA_TTL: u32 = 5;
const SHARDS: usize = 16;

/// What one cached answer is keyed by: the question, and the flags that change what an
/// upstream answers (DNSSEC OK, Checking Disabled).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    /// Lowercased, as names compare.
    pub name: String,
    pub qtype: u16,
    pub qclass: u16,
    pub dnssec_ok: bool,
    pub checking_disabled: bool,
}

/// Positive answers and denials are counted apart, as CoreDNS does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Success,
    Denial,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Success => "success",
            Kind::Denial => "denial",
        }
    }
}

/// An answer as the cache hands it out, TTLs already reduced by its age.
#[derive(Debug, Clone, PartialEq)]
pub struct Cached {
    pub rcode: ResponseCode,
    pub authentic_data: bool,
    pub answers: Vec<Record>,
    pub authorities: Vec<Record>,
    pub additionals: Vec<Record>,
}

#[derive(Debug)]
struct Entry {
    answer: Arc<Cached>,
    kind: Kind,
    stored: Instant,
    ttl: u32,
}

#[derive(Debug)]
pub struct Cache {
    shards: Vec<Mutex<HashMap<Key, Entry>>>,
    hasher: std::collections::hash_map::RandomState,
    per_shard: usize,
    max_ttl: u32,
    metrics: Arc<Metrics>,
}

impl Cache {
    /// A cache of at most `capacity` answers (0 disables it), none kept longer than `max_ttl`.
    pub fn new(capacity: usize, max_ttl: Duration, metrics: Arc<Metrics>) -> Cache {
        let per_shard = capacity.div_ceil(SHARDS);
        Cache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: Default::default(),
            per_shard,
            max_ttl: u32::try_from(max_ttl.as_secs()).unwrap_or(u32::MAX),
            metrics,
        }
    }

    fn shard(&self, key: &Key) -> &Mutex<HashMap<Key, Entry>> {
        let mut h = self.hasher.build_hasher();
        key.hash(&mut h);
        &self.shards[(h.finish() as usize) % SHARDS]
    }

    /// The cached answer to `key`, if it has not expired.
    pub fn get(&self, key: &Key) -> Option<Cached> {
        self.get_at(key, Instant::now())
    }

    fn get_at(&self, key: &Key, now: Instant) -> Option<Cached> {
        let found = {
            let mut shard = self.shard(key).lock();
            match shard.get(key) {
                Some(e) => {
                    let age =
                        u32::try_from(now.saturating_duration_since(e.stored).as_secs()).unwrap_or(u32::MAX);
                    if age >= e.ttl {
                        let e = shard.remove(key).expect("present");
                        self.metrics
                            .cache_entries
                            .get_or_create(&self.metrics.cache_labels(e.kind.label()))
                            .dec();
                        None
                    } else {
                        Some((e.answer.clone(), e.kind, e.ttl - age))
                    }
                }
                None => None,
            }
        };
        let Some((answer, kind, remaining)) = found else {
            self.metrics
                .cache_misses
                .get_or_create(&crate::metrics::ServerLabels { server: self.metrics.server.clone() })
                .inc();
            return None;
        };
        self.metrics.cache_hits.get_or_create(&self.metrics.cache_labels(kind.label())).inc();
        let age = |records: &[Record]| -> Vec<Record> {
            records
                .iter()
                .map(|r| {
                    let mut r = r.clone();
                    r.ttl = r.ttl.min(remaining);
                    r
                })
                .collect()
        };
        Some(Cached {
            rcode: answer.rcode,
            authentic_data: answer.authentic_data,
            answers: age(&answer.answers),
            authorities: age(&answer.authorities),
            additionals: age(&answer.additionals),
        })
    }

    /// Caches `response` under `key` when it is cacheable: a complete NOERROR or NXDOMAIN
    /// answer with a TTL above zero. Returns how long it is kept, which also caps the TTLs
    /// of this first reply (as CoreDNS does: a client should not see 300 now and 30 from
    /// the cache next time).
    pub fn insert(&self, key: Key, response: &Message) -> Option<u32> {
        self.insert_at(key, response, Instant::now())
    }

    fn insert_at(&self, key: Key, response: &Message, now: Instant) -> Option<u32> {
        if self.per_shard == 0 || response.metadata.truncation {
            return None;
        }
        let (kind, ttl) = classify(response)?;
        let ttl = ttl.min(self.max_ttl);
        if ttl == 0 {
            return None;
        }
        let entry = Entry {
            answer: Arc::new(Cached {
                rcode: response.metadata.response_code,
                authentic_data: response.metadata.authentic_data,
                answers: response.answers.clone(),
                authorities: response.authorities.clone(),
                additionals: response.additionals.clone(),
            }),
            kind,
            stored: now,
            ttl,
        };
        let mut shard = self.shard(&key).lock();
        if !shard.contains_key(&key) && shard.len() >= self.per_shard {
            self.make_room(&mut shard, now);
        }
        if let Some(old) = shard.insert(key, entry) {
            self.metrics.cache_entries.get_or_create(&self.metrics.cache_labels(old.kind.label())).dec();
        }
        self.metrics.cache_entries.get_or_create(&self.metrics.cache_labels(kind.label())).inc();
        Some(ttl)
    }

    /// Drops the shard's expired entries, and one more if that freed nothing.
    fn make_room(&self, shard: &mut HashMap<Key, Entry>, now: Instant) {
        let expired: Vec<Key> = shard
            .iter()
            .filter(|(_, e)| now.saturating_duration_since(e.stored).as_secs() >= u64::from(e.ttl))
            .map(|(k, _)| k.clone())
            .collect();
        let mut victims = expired;
        if victims.is_empty() {
            // The map's iteration order is seeded per process: an arbitrary, unbiased pick.
            victims.extend(shard.keys().next().cloned());
        }
        for key in victims {
            if let Some(e) = shard.remove(&key) {
                let labels = self.metrics.cache_labels(e.kind.label());
                self.metrics.cache_entries.get_or_create(&labels).dec();
                self.metrics.cache_evictions.get_or_create(&labels).inc();
            }
        }
    }

    /// Entries held now (expired ones included until they are looked up or evicted).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether `response` is a positive answer or a denial, and for how long it may be cached.
fn classify(response: &Message) -> Option<(Kind, u32)> {
    match response.metadata.response_code {
        ResponseCode::NoError if !response.answers.is_empty() => {
            let ttl = response
                .answers
                .iter()
                .chain(&response.authorities)
                .chain(&response.additionals)
                .filter(|r| r.record_type() != RecordType::OPT)
                .map(|r| r.ttl)
                .min()?;
            Some((Kind::Success, ttl))
        }
        ResponseCode::NoError | ResponseCode::NXDomain => {
            let soa_ttl = response.authorities.iter().find_map(|r| match &r.data {
                RData::SOA(soa) => Some(r.ttl.min(soa.minimum)),
                _ => None,
            });
            Some((Kind::Denial, soa_ttl.unwrap_or(DENIAL_WITHOUT_SOA_TTL)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use hickory_proto::op::{MessageType, OpCode};
    use hickory_proto::rr::Name;
    use hickory_proto::rr::rdata::{A, SOA};

    use super::*;

    fn cache(capacity: usize, max_ttl: u64) -> Cache {
        let metrics =
            Arc::new(Metrics::register(&component_base::metrics::Registry::new(), "dns://:53".into()));
        Cache::new(capacity, Duration::from_secs(max_ttl), metrics)
    }

    fn key(name: &str) -> Key {
        Key { name: name.into(), qtype: 1, qclass: 1, dnssec_ok: false, checking_disabled: false }
    }

    fn response(rcode: ResponseCode, answers: &[(u32, [u8; 4])], soa: Option<(u32, u32)>) -> Message {
        let mut m = Message::new(1, MessageType::Response, OpCode::Query);
        m.metadata.response_code = rcode;
        let name = Name::from_ascii("example.com.").unwrap();
        for (ttl, ip) in answers {
            m.add_answer(Record::from_rdata(name.clone(), *ttl, RData::A(A(Ipv4Addr::from(*ip)))));
        }
        if let Some((ttl, minimum)) = soa {
            let soa = SOA::new(name.clone(), name.clone(), 1, 1, 1, 1, minimum);
            m.add_authority(Record::from_rdata(name.clone(), ttl, RData::SOA(soa)));
        }
        m
    }

    #[test]
    fn positive_answers_count_down_from_the_smallest_ttl() {
        let c = cache(100, 3600);
        let t0 = Instant::now();
        c.insert_at(
            key("example.com."),
            &response(ResponseCode::NoError, &[(300, [1, 2, 3, 4]), (60, [1, 2, 3, 5])], None),
            t0,
        );
        let hit = c.get_at(&key("example.com."), t0 + Duration::from_secs(20)).expect("cached");
        assert_eq!(hit.answers.iter().map(|r| r.ttl).collect::<Vec<_>>(), [40, 40]);
        assert!(c.get_at(&key("example.com."), t0 + Duration::from_secs(60)).is_none(), "expired at 60 s");
        assert!(c.is_empty(), "an expired entry is dropped when found");
    }

    #[test]
    fn cache_ttl_caps_and_denials_use_the_soa() {
        let c = cache(100, 30);
        let t0 = Instant::now();
        c.insert_at(key("a."), &response(ResponseCode::NoError, &[(3600, [1, 1, 1, 1])], None), t0);
        assert!(c.get_at(&key("a."), t0 + Duration::from_secs(29)).is_some());
        assert!(c.get_at(&key("a."), t0 + Duration::from_secs(30)).is_none(), "capped at --cache-ttl");
        c.insert_at(key("nx."), &response(ResponseCode::NXDomain, &[], Some((3600, 10))), t0);
        let hit = c.get_at(&key("nx."), t0 + Duration::from_secs(4)).expect("denial cached");
        assert_eq!(hit.rcode, ResponseCode::NXDomain);
        assert_eq!(hit.authorities[0].ttl, 6);
        assert!(c.get_at(&key("nx."), t0 + Duration::from_secs(10)).is_none(), "SOA minimum bounds a denial");
        c.insert_at(key("nodata."), &response(ResponseCode::NoError, &[], None), t0);
        assert!(c.get_at(&key("nodata."), t0 + Duration::from_secs(4)).is_some());
        assert!(
            c.get_at(&key("nodata."), t0 + Duration::from_secs(5)).is_none(),
            "fail-safe 5 s without a SOA"
        );
    }

    #[test]
    fn failures_truncated_and_zero_ttl_answers_are_not_cached() {
        let c = cache(100, 30);
        c.insert(key("s."), &response(ResponseCode::ServFail, &[], None));
        c.insert(key("r."), &response(ResponseCode::Refused, &[], None));
        c.insert(key("z."), &response(ResponseCode::NoError, &[(0, [1, 1, 1, 1])], None));
        let mut tc = response(ResponseCode::NoError, &[(60, [1, 1, 1, 1])], None);
        tc.metadata.truncation = true;
        c.insert(key("t."), &tc);
        assert!(c.is_empty());
        let off = cache(0, 30);
        off.insert(key("a."), &response(ResponseCode::NoError, &[(60, [1, 1, 1, 1])], None));
        assert!(off.is_empty(), "capacity 0 disables the cache");
    }

    #[test]
    fn size_is_bounded() {
        let c = cache(32, 30);
        for i in 0..1000 {
            c.insert(key(&format!("n{i}.")), &response(ResponseCode::NoError, &[(60, [1, 1, 1, 1])], None));
        }
        assert!(c.len() <= 32, "{} entries", c.len());
        assert!(c.len() >= 16, "{} entries", c.len());
        let text = component_base::metrics::encode_text(&{
            let r = component_base::metrics::Registry::new();
            let m = Metrics::register(&r, "dns://:53".into());
            m.cache_evictions.get_or_create(&m.cache_labels("success")).inc();
            r
        })
        .unwrap();
        assert!(
            text.contains("coredns_cache_evictions_total{server=\"dns://:53\",type=\"success\"} 1"),
            "{text}"
        );
    }
}
