//! EndpointSlice changes accumulated between syncs (upstream's `EndpointsChangeTracker`
//! and `EndpointSliceCache`): each Service's slices as last applied and as pending, so a
//! sync rebuilds the endpoints of only the Services whose slices changed in a way that
//! matters (addresses, ports, conditions, node, hints), and learns which those are.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::marker::PhantomData;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::endpoint::{BaseEndpointInfo, Endpoint};
use crate::nftables::{Family, Protocol};
use crate::serviceport::{NamespacedName, ServicePortName, parse_protocol};

/// The label naming an EndpointSlice's Service.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// When the EndpointSlice controller saw the change that produced this version of the
/// slice: the start of network programming latency.
pub const LAST_CHANGE_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// Every Service port's endpoints, sorted by `ip:port`.
pub type EndpointsMap<E> = HashMap<ServicePortName, Vec<Arc<E>>>;

/// The parts of an endpoint that matter to a proxier.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SliceEndpoint {
    addr: IpAddr,
    node_name: Option<String>,
    ready: bool,
    serving: bool,
    terminating: bool,
    zone_hints: BTreeSet<String>,
}

/// The parts of a slice that matter to a proxier; equal infos mean no change to apply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct SliceInfo {
    /// (name, protocol, port), sorted.
    ports: Vec<(String, Protocol, u16)>,
    endpoints: Vec<SliceEndpoint>,
}

impl SliceInfo {
    fn from_slice(slice: &EndpointSlice) -> SliceInfo {
        let mut ports: Vec<(String, Protocol, u16)> = slice
            .ports
            .iter()
            .flatten()
            .filter_map(|p| {
                let port = u16::try_from(p.port?).ok().filter(|p| *p != 0)?;
                Some((p.name.clone().unwrap_or_default(), parse_protocol(p.protocol.as_deref())?, port))
            })
            .collect();
        ports.sort();
        let endpoints = slice
            .endpoints
            .iter()
            .filter_map(|e| {
                // Upstream uses the first address only (the API allows exactly one today).
                let addr: IpAddr = e.addresses.first()?.parse().ok()?;
                let c = e.conditions.as_ref();
                let ready = c.and_then(|c| c.ready).unwrap_or(true);
                Some(SliceEndpoint {
                    addr,
                    node_name: e.node_name.clone(),
                    ready,
                    serving: c.and_then(|c| c.serving).unwrap_or(ready),
                    terminating: c.and_then(|c| c.terminating).unwrap_or(false),
                    zone_hints: e
                        .hints
                        .as_ref()
                        .and_then(|h| h.for_zones.as_ref())
                        .map(|z| z.iter().map(|z| z.name.clone()).collect())
                        .unwrap_or_default(),
                })
            })
            .collect();
        SliceInfo { ports, endpoints }
    }
}

/// One Service's slices.
#[derive(Debug, Default)]
struct ServiceSlices {
    applied: BTreeMap<String, SliceInfo>,
    /// Slices changed since the last sync; `None` for a deleted slice.
    pending: BTreeMap<String, Option<SliceInfo>>,
    /// The Service ports currently in the proxier's map from these slices.
    ports: Vec<ServicePortName>,
}

/// What a sync learns from [`update_endpoints_map`].
#[derive(Debug, Default)]
pub struct UpdateEndpointsMapResult {
    /// Services whose endpoints changed.
    pub updated_services: HashSet<NamespacedName>,
    /// For each such Service, when the changes were triggered (from the slices' annotation).
    pub last_change_trigger_times: HashMap<NamespacedName, Vec<SystemTime>>,
    /// A UDP Service lost an endpoint or got its first ones: stale conntrack entries may
    /// send its traffic nowhere.
    pub conntrack_cleanup_required: bool,
}

/// EndpointSlice changes of one IP family since the last sync.
pub struct EndpointsChangeTracker<E> {
    family: Family,
    hostname: String,
    services: HashMap<NamespacedName, ServiceSlices>,
    /// Services with pending changes.
    dirty: HashSet<NamespacedName>,
    trigger_times: HashMap<NamespacedName, Vec<SystemTime>>,
    /// Trigger times before this are from before we started and say nothing about us.
    start: SystemTime,
    _endpoint: PhantomData<fn() -> E>,
}

impl<E: Endpoint> EndpointsChangeTracker<E> {
    pub fn new(family: Family, hostname: &str) -> Self {
        Self {
            family,
            hostname: hostname.to_owned(),
            services: HashMap::new(),
            dirty: HashSet::new(),
            trigger_times: HashMap::new(),
            start: SystemTime::now(),
            _endpoint: PhantomData,
        }
    }

    /// Records an added, updated or (with `remove`) deleted slice. Returns whether the
    /// proxier has something new to apply.
    pub fn endpoint_slice_update(&mut self, slice: &EndpointSlice, remove: bool) -> bool {
        let wanted = match self.family {
            Family::Ip => "IPv4",
            Family::Ip6 => "IPv6",
        };
        if slice.address_type != wanted {
            return false;
        }
        let (Some(namespace), Some(name)) =
            (slice.metadata.namespace.as_deref(), slice.metadata.name.as_deref())
        else {
            return false;
        };
        let Some(service) = slice.metadata.labels.as_ref().and_then(|l| l.get(LABEL_SERVICE_NAME)) else {
            tracing::debug!(slice = %format!("{namespace}/{name}"), "EndpointSlice without the {LABEL_SERVICE_NAME} label, ignored");
            return false;
        };
        let key = NamespacedName::new(namespace, service);
        let info = if remove { None } else { Some(SliceInfo::from_slice(slice)) };
        let entry = self.services.entry(key.clone()).or_default();
        let current = match entry.pending.get(name) {
            Some(p) => p.as_ref(),
            None => entry.applied.get(name),
        };
        if current == info.as_ref() {
            return false;
        }
        entry.pending.insert(name.to_owned(), info);
        self.dirty.insert(key.clone());
        if remove {
            // A deletion's trigger time is the last update's, not this change's.
            self.trigger_times.remove(&key);
        } else if let Some(t) = slice
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(LAST_CHANGE_TRIGGER_TIME))
            .and_then(|s| parse_rfc3339(s))
            && t > self.start
        {
            self.trigger_times.entry(key).or_default().push(t);
        }
        true
    }

    /// Number of Services with changes not yet applied.
    pub fn pending(&self) -> usize {
        self.dirty.len()
    }

    /// The endpoints of one Service from its applied slices, by Service port.
    fn endpoints_of(
        &self,
        service: &NamespacedName,
        slices: &ServiceSlices,
    ) -> BTreeMap<ServicePortName, Vec<Arc<E>>> {
        let mut by_port: BTreeMap<ServicePortName, BTreeMap<String, BaseEndpointInfo>> = BTreeMap::new();
        for info in slices.applied.values() {
            for (port_name, protocol, port) in &info.ports {
                let spn = ServicePortName {
                    service: service.clone(),
                    port: port_name.clone(),
                    protocol: *protocol,
                };
                let set = by_port.entry(spn).or_default();
                for e in &info.endpoints {
                    if Family::of(&e.addr) != self.family {
                        continue;
                    }
                    let mut base = BaseEndpointInfo::new(e.addr, *port);
                    base.is_local = e.node_name.as_deref() == Some(self.hostname.as_str());
                    base.ready = e.ready;
                    base.serving = e.serving;
                    base.terminating = e.terminating;
                    base.zone_hints = e.zone_hints.clone();
                    // The same endpoint in two slices: keep one, a local one if either is.
                    match set.get(&base.endpoint) {
                        Some(existing) if !base.is_local || existing.is_local => {}
                        _ => {
                            set.insert(base.endpoint.clone(), base);
                        }
                    }
                }
            }
        }
        by_port
            .into_iter()
            .filter(|(_, eps)| !eps.is_empty())
            .map(|(spn, eps)| {
                let list = eps.into_values().map(|b| Arc::new(E::new(b, &spn))).collect();
                (spn, list)
            })
            .collect()
    }
}

/// Applies the tracker's pending changes to `map`.
pub fn update_endpoints_map<E: Endpoint>(
    map: &mut EndpointsMap<E>,
    tracker: &mut EndpointsChangeTracker<E>,
) -> UpdateEndpointsMapResult {
    let mut result = UpdateEndpointsMapResult {
        last_change_trigger_times: std::mem::take(&mut tracker.trigger_times),
        ..Default::default()
    };
    let dirty: Vec<NamespacedName> = tracker.dirty.drain().collect();
    for service in dirty {
        let Some(mut slices) = tracker.services.remove(&service) else { continue };
        for (name, info) in std::mem::take(&mut slices.pending) {
            match info {
                Some(info) => {
                    slices.applied.insert(name, info);
                }
                None => {
                    slices.applied.remove(&name);
                }
            }
        }
        let current = tracker.endpoints_of(&service, &slices);
        let mut previous = BTreeMap::new();
        for spn in std::mem::take(&mut slices.ports) {
            if let Some(eps) = map.remove(&spn) {
                previous.insert(spn, eps);
            }
        }
        let same = previous.len() == current.len()
            && previous.iter().zip(&current).all(|((pa, ea), (pb, eb))| {
                pa == pb && ea.len() == eb.len() && ea.iter().zip(eb).all(|(a, b)| a.base() == b.base())
            });
        if !same {
            result.updated_services.insert(service.clone());
            if udp_endpoints_lost_or_gained(&previous, &current) {
                result.conntrack_cleanup_required = true;
            }
        }
        slices.ports = current.keys().cloned().collect();
        map.extend(current);
        if !slices.applied.is_empty() {
            tracker.services.insert(service, slices);
        }
    }
    result.last_change_trigger_times.retain(|svc, _| result.updated_services.contains(svc));
    result
}

/// Whether a UDP port lost a serving endpoint, or went from none to some.
fn udp_endpoints_lost_or_gained<E: Endpoint>(
    previous: &BTreeMap<ServicePortName, Vec<Arc<E>>>,
    current: &BTreeMap<ServicePortName, Vec<Arc<E>>>,
) -> bool {
    let serving = |eps: Option<&Vec<Arc<E>>>| -> HashSet<String> {
        eps.into_iter().flatten().filter(|e| e.base().serving).map(|e| e.base().endpoint.clone()).collect()
    };
    let ports: BTreeSet<&ServicePortName> =
        previous.keys().chain(current.keys()).filter(|p| p.protocol == Protocol::Udp).collect();
    ports.into_iter().any(|spn| {
        let before = serving(previous.get(spn));
        let after = serving(current.get(spn));
        !before.is_subset(&after) || (before.is_empty() && !after.is_empty())
    })
}

/// Count of ready local endpoints per Service, for health-check node ports.
pub fn local_ready_endpoints<E: Endpoint>(map: &EndpointsMap<E>) -> HashMap<NamespacedName, usize> {
    let mut ips: HashMap<NamespacedName, HashSet<IpAddr>> = HashMap::new();
    for (spn, eps) in map {
        for e in eps {
            let b = e.base();
            if b.is_local && b.ready {
                ips.entry(spn.service.clone()).or_default().insert(b.ip);
            }
        }
    }
    ips.into_iter().map(|(k, v)| (k, v.len())).collect()
}

/// Parses an RFC 3339 timestamp (`2024-05-06T07:08:09.123456789Z`, or with an offset).
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b'T' || b[10] == b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut nanos = 0u32;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.find(|c: char| !c.is_ascii_digit()).unwrap_or(frac.len());
        if digits == 0 {
            return None;
        }
        let mut d = frac[..digits.min(9)].to_owned();
        while d.len() < 9 {
            d.push('0');
        }
        nanos = d.parse().ok()?;
        rest = &frac[digits..];
    }
    let offset_secs = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) => {
            let h: i64 = o[1..3].parse().ok()?;
            let m: i64 = o[4..6].parse().ok()?;
            let sign = if o.starts_with('-') { -1 } else { 1 };
            sign * (h * 3600 + m * 60)
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    let secs = u64::try_from(secs).ok()?;
    Some(SystemTime::UNIX_EPOCH + std::time::Duration::new(secs, nanos))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{Endpoint as ApiEndpoint, EndpointConditions, EndpointPort};
    use kube::api::ObjectMeta;
    use std::time::Duration;

    #[derive(Debug)]
    struct Ep(BaseEndpointInfo);
    impl Endpoint for Ep {
        fn new(base: BaseEndpointInfo, _: &ServicePortName) -> Self {
            Ep(base)
        }
        fn base(&self) -> &BaseEndpointInfo {
            &self.0
        }
    }

    fn slice(name: &str, protocol: &str, eps: &[(&str, Option<bool>, Option<&str>)]) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                namespace: Some("ns1".into()),
                name: Some(name.into()),
                labels: Some([(LABEL_SERVICE_NAME.to_string(), "svc1".to_string())].into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            ports: Some(vec![EndpointPort {
                name: Some("p80".into()),
                port: Some(80),
                protocol: Some(protocol.into()),
                ..Default::default()
            }]),
            endpoints: eps
                .iter()
                .map(|(ip, ready, node)| ApiEndpoint {
                    addresses: vec![ip.to_string()],
                    conditions: Some(EndpointConditions { ready: *ready, ..Default::default() }),
                    node_name: node.map(String::from),
                    ..Default::default()
                })
                .collect(),
        }
    }

    #[test]
    fn merges_slices_sorts_and_reports_changes_once() {
        let mut t = EndpointsChangeTracker::<Ep>::new(Family::Ip, "node1");
        let mut map = EndpointsMap::new();
        assert!(t.endpoint_slice_update(&slice("a", "TCP", &[("10.0.0.2", None, Some("node1"))]), false));
        assert!(t.endpoint_slice_update(&slice("b", "TCP", &[("10.0.0.1", Some(false), None)]), false));
        // The same content again is no change.
        assert!(!t.endpoint_slice_update(&slice("b", "TCP", &[("10.0.0.1", Some(false), None)]), false));
        let r = update_endpoints_map(&mut map, &mut t);
        assert_eq!(r.updated_services.len(), 1);
        let eps: Vec<_> = map
            .values()
            .next()
            .unwrap()
            .iter()
            .map(|e| (e.0.endpoint.clone(), e.0.ready, e.0.is_local))
            .collect();
        assert_eq!(eps, vec![("10.0.0.1:80".into(), false, false), ("10.0.0.2:80".into(), true, true)]);
        assert_eq!(local_ready_endpoints(&map).values().copied().collect::<Vec<_>>(), vec![1]);
        // Nothing pending: a sync changes nothing.
        assert!(update_endpoints_map(&mut map, &mut t).updated_services.is_empty());
        // Deleting both slices removes the port.
        t.endpoint_slice_update(&slice("a", "TCP", &[]), true);
        t.endpoint_slice_update(&slice("b", "TCP", &[]), true);
        let r = update_endpoints_map(&mut map, &mut t);
        assert_eq!(r.updated_services.len(), 1);
        assert!(map.is_empty());
    }

    #[test]
    fn udp_endpoint_removal_requires_conntrack_cleanup() {
        let mut t = EndpointsChangeTracker::<Ep>::new(Family::Ip, "node1");
        let mut map = EndpointsMap::new();
        t.endpoint_slice_update(&slice("a", "UDP", &[("10.0.0.1", None, None)]), false);
        assert!(update_endpoints_map(&mut map, &mut t).conntrack_cleanup_required, "first endpoints");
        t.endpoint_slice_update(
            &slice("a", "UDP", &[("10.0.0.1", None, None), ("10.0.0.2", None, None)]),
            false,
        );
        assert!(!update_endpoints_map(&mut map, &mut t).conntrack_cleanup_required, "an endpoint added");
        t.endpoint_slice_update(&slice("a", "UDP", &[("10.0.0.2", None, None)]), false);
        assert!(update_endpoints_map(&mut map, &mut t).conntrack_cleanup_required, "an endpoint removed");
    }

    #[test]
    fn wrong_family_and_unlabeled_slices_are_ignored() {
        let mut t = EndpointsChangeTracker::<Ep>::new(Family::Ip6, "node1");
        assert!(!t.endpoint_slice_update(&slice("a", "TCP", &[("10.0.0.1", None, None)]), false));
        let mut t = EndpointsChangeTracker::<Ep>::new(Family::Ip, "node1");
        let mut s = slice("a", "TCP", &[("10.0.0.1", None, None)]);
        s.metadata.labels = None;
        assert!(!t.endpoint_slice_update(&s, false));
    }

    #[test]
    fn rfc3339() {
        let t = parse_rfc3339("2024-03-05T07:08:09.5Z").unwrap();
        assert_eq!(t, SystemTime::UNIX_EPOCH + Duration::from_millis(1_709_622_489_500));
        let o = parse_rfc3339("2024-03-05T09:08:09.5+02:00").unwrap();
        assert_eq!(t, o);
        assert!(parse_rfc3339("yesterday").is_none());
    }
}
