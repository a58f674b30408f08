//! Services: cluster IPs from `--service-cluster-ip-range` and node ports from
//! `--service-node-port-range`, never handed out twice (also under concurrent creates) and
//! released when the service goes. Allocations are rebuilt from the stored services at
//! startup; one lock orders all allocations of this server.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::errors::{ApiError, ApiResult, FieldError};
use crate::registry::store::{Recorder, Store};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub base: u32,
    pub prefix: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Self, String> {
        let (ip, len) = s.split_once('/').ok_or_else(|| format!("{s} is not a CIDR"))?;
        let ip: Ipv4Addr =
            ip.parse().map_err(|_| format!("{s}: not an IPv4 address (only IPv4 ranges are supported)"))?;
        let prefix: u8 = len.parse().map_err(|_| format!("{s}: bad prefix length"))?;
        if !(8..=30).contains(&prefix) {
            return Err(format!("{s}: prefix length must be between 8 and 30"));
        }
        let mask = u32::MAX << (32 - prefix);
        Ok(Self { base: u32::from(ip) & mask, prefix })
    }

    fn size(self) -> u32 {
        1u32 << (32 - self.prefix)
    }

    fn contains(self, ip: u32) -> bool {
        ip & (u32::MAX << (32 - self.prefix)) == self.base
    }

    /// The first usable address (what the `kubernetes` service gets).
    pub fn first(self) -> Ipv4Addr {
        Ipv4Addr::from(self.base + 1)
    }
}

#[derive(Default)]
struct Used {
    ips: HashSet<u32>,
    ports: HashSet<u16>,
}

pub struct Services {
    pub cidr: Cidr,
    pub ports: (u16, u16),
    used: Mutex<Used>,
}

fn field_err(name: &str, e: FieldError) -> ApiError {
    ApiError::invalid("Service", "", name, &[e])
}

impl Services {
    pub fn new(cidr: Cidr, ports: (u16, u16)) -> Self {
        Self { cidr, ports, used: Mutex::default() }
    }

    /// Records the allocations of services already stored.
    pub fn load(&self, services: &[Value]) {
        let mut used = self.used.lock();
        for s in services {
            for ip in cluster_ips(s) {
                used.ips.insert(ip);
            }
            for p in node_ports(s) {
                used.ports.insert(p);
            }
        }
    }

    fn allocate_ip(&self, used: &mut Used) -> Option<u32> {
        // Skip the network address, the first address (the API server's) and broadcast.
        let n = self.cidr.size();
        let start = rand::random_range(2..n - 1);
        (0..n - 3).map(|i| self.cidr.base + 2 + (start - 2 + i) % (n - 3)).find(|ip| !used.ips.contains(ip))
    }

    fn allocate_port(&self, used: &Used) -> Option<u16> {
        let (lo, hi) = self.ports;
        let n = u32::from(hi - lo) + 1;
        let start = rand::random_range(0..n);
        (0..n).map(|i| lo + ((start + i) % n) as u16).find(|p| !used.ports.contains(p))
    }

    /// Fills in and reserves the service's cluster IP and node ports; returns what was
    /// reserved so a failed create can give it back.
    fn reserve(&self, svc: &mut Value, old: Option<&Value>) -> ApiResult<(Vec<u32>, Vec<u16>)> {
        let name = svc["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let mut used = self.used.lock();
        let mut ips = Vec::new();
        let mut ports = Vec::new();
        let typ = svc["spec"]["type"].as_str().unwrap_or("ClusterIP").to_string();
        if typ != "ExternalName" {
            let requested = svc["spec"]["clusterIP"].as_str().unwrap_or_default().to_string();
            let old_ip = old.and_then(|o| o["spec"]["clusterIP"].as_str()).unwrap_or_default().to_string();
            if requested.is_empty() && !old_ip.is_empty() {
                svc["spec"]["clusterIP"] = json!(old_ip);
                svc["spec"]["clusterIPs"] = json!([old_ip]);
            } else if requested != "None" && (requested.is_empty() || requested != old_ip) {
                let ip = if requested.is_empty() {
                    self.allocate_ip(&mut used)
                        .ok_or_else(|| ApiError::internal("failed to allocate a serviceIP: range is full"))?
                } else {
                    let ip: Ipv4Addr = requested.parse().map_err(|_| {
                        field_err(
                            &name,
                            FieldError::invalid(
                                "spec.clusterIPs[0]",
                                &requested,
                                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                            ),
                        )
                    })?;
                    let ip = u32::from(ip);
                    if !self.cidr.contains(ip) {
                        return Err(field_err(
                            &name,
                            FieldError::invalid(
                                "spec.clusterIPs",
                                &requested,
                                "failed to allocate IP: the provided IP is not in the valid range",
                            ),
                        ));
                    }
                    if used.ips.contains(&ip) {
                        return Err(field_err(
                            &name,
                            FieldError::invalid(
                                "spec.clusterIPs",
                                &requested,
                                "failed to allocate IP: provided IP is already allocated",
                            ),
                        ));
                    }
                    ip
                };
                used.ips.insert(ip);
                ips.push(ip);
                let s = Ipv4Addr::from(ip).to_string();
                svc["spec"]["clusterIP"] = json!(s);
                svc["spec"]["clusterIPs"] = json!([s]);
            } else if requested == "None" {
                svc["spec"]["clusterIPs"] = json!(["None"]);
            }
        }
        if matches!(typ.as_str(), "NodePort" | "LoadBalancer") {
            let old_ports: Vec<(String, u16)> = old
                .and_then(|o| o["spec"]["ports"].as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|p| {
                            Some((
                                p["name"].as_str().unwrap_or_default().to_string(),
                                p["nodePort"].as_u64()? as u16,
                            ))
                        })
                        .collect()
                })
                .unwrap_or_default();
            if let Some(list) = svc["spec"]["ports"].as_array_mut() {
                for (i, p) in list.iter_mut().enumerate() {
                    let pname = p["name"].as_str().unwrap_or_default().to_string();
                    let keep = old_ports.iter().find(|(n, _)| *n == pname).map(|(_, port)| *port);
                    // 0 is "allocate one", as upstream reads it (protobuf clients always send
                    // the field: conformance's ExternalName to NodePort sends 0).
                    match p["nodePort"].as_u64().filter(|&n| n != 0) {
                        Some(n) if u16::try_from(n).ok() == keep && keep.is_some() => {}
                        Some(n) => {
                            if n < u64::from(self.ports.0) || n > u64::from(self.ports.1) {
                                return Err(field_err(
                                    &name,
                                    FieldError::invalid(
                                        format!("spec.ports[{i}].nodePort"),
                                        n,
                                        format!(
                                            "provided port is not in the valid range. The range of valid ports is {}-{}",
                                            self.ports.0, self.ports.1
                                        ),
                                    ),
                                ));
                            }
                            let n = n as u16; // in range, checked above
                            if used.ports.contains(&n) {
                                return Err(field_err(
                                    &name,
                                    FieldError::invalid(
                                        format!("spec.ports[{i}].nodePort"),
                                        n,
                                        "provided port is already allocated",
                                    ),
                                ));
                            }
                            used.ports.insert(n);
                            ports.push(n);
                        }
                        None => {
                            let n = match keep {
                                Some(k) => k,
                                None => {
                                    let n = self.allocate_port(&used).ok_or_else(|| {
                                        ApiError::internal("failed to allocate a nodePort: range is full")
                                    })?;
                                    used.ports.insert(n);
                                    ports.push(n);
                                    n
                                }
                            };
                            p["nodePort"] = json!(n);
                        }
                    }
                }
            }
        }
        Ok((ips, ports))
    }

    fn unreserve(&self, ips: &[u32], ports: &[u16]) {
        let mut used = self.used.lock();
        for ip in ips {
            used.ips.remove(ip);
        }
        for p in ports {
            used.ports.remove(p);
        }
    }

    pub async fn create(
        &self,
        store: &Store,
        ns: Option<&str>,
        obj: Value,
        dry_run: bool,
    ) -> ApiResult<Value> {
        let svc = store.prepare_create(ns, obj)?;
        let mut svc = store.admit(crate::admission::Operation::Create, None, svc, None, dry_run).await?;
        let (ips, ports) = self.reserve(&mut svc, None)?;
        if dry_run {
            self.unreserve(&ips, &ports);
            return Ok(svc);
        }
        match store.insert(svc).await {
            Ok(v) => Ok(v),
            Err(e) => {
                self.unreserve(&ips, &ports);
                Err(e)
            }
        }
    }

    pub async fn update(
        &self,
        store: &Store,
        ns: Option<&str>,
        name: &str,
        obj: Value,
        dry_run: bool,
        record: Option<&Recorder<'_>>,
    ) -> ApiResult<(Value, bool)> {
        let (old, _) = store.get_fresh(ns, name).await?;
        let mut obj = obj;
        let (ips, ports) = self.reserve(&mut obj, Some(&old))?;
        match store.update(ns, name, obj, None, dry_run, record).await {
            Ok((v, created)) => {
                if dry_run {
                    self.unreserve(&ips, &ports);
                } else {
                    // What the old version held and the new one does not is free again.
                    let keep_ips: Vec<u32> = cluster_ips(&v);
                    let keep_ports: Vec<u16> = node_ports(&v);
                    let gone_ips: Vec<u32> =
                        cluster_ips(&old).into_iter().filter(|i| !keep_ips.contains(i)).collect();
                    let gone_ports: Vec<u16> =
                        node_ports(&old).into_iter().filter(|p| !keep_ports.contains(p)).collect();
                    self.unreserve(&gone_ips, &gone_ports);
                }
                Ok((v, created))
            }
            Err(e) => {
                self.unreserve(&ips, &ports);
                Err(e)
            }
        }
    }

    /// Frees what a deleted service held.
    pub fn release(&self, svc: &Value) {
        self.unreserve(&cluster_ips(svc), &node_ports(svc));
    }
}

fn cluster_ips(s: &Value) -> Vec<u32> {
    s["spec"]["clusterIPs"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()?.parse::<Ipv4Addr>().ok()).map(u32::from).collect())
        .or_else(|| {
            s["spec"]["clusterIP"]
                .as_str()
                .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
                .map(|ip| vec![u32::from(ip)])
        })
        .unwrap_or_default()
}

fn node_ports(s: &Value) -> Vec<u16> {
    s["spec"]["ports"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["nodePort"].as_u64()).map(|p| p as u16).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_unique_and_in_range() {
        let s = Services::new(Cidr::parse("10.96.0.0/28").unwrap(), (30000, 30002));
        let mut seen = HashSet::new();
        for _ in 0..13 {
            let mut svc =
                json!({"metadata": {"name": "x"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}});
            match s.reserve(&mut svc, None) {
                Ok((ips, _)) => {
                    for ip in ips {
                        assert!(seen.insert(ip), "duplicate IP");
                        assert!(ip > s.cidr.base + 1 && ip < s.cidr.base + 15);
                    }
                }
                Err(e) => {
                    assert!(e.message.contains("nodePort") || e.message.contains("range is full"), "{e}")
                }
            }
        }
        assert_eq!(Cidr::parse("10.96.0.0/12").unwrap().first(), Ipv4Addr::new(10, 96, 0, 1));
        assert!(Cidr::parse("fd00::/108").is_err());
    }
}
