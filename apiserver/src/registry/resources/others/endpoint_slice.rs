//! EndpointSlices (upstream's `SetDefaults_EndpointPort` and `ValidateEndpointSlice`);
//! the generation counts every change, as upstream's strategy does.

use serde_json::{Value, json};

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::resources::items_mut;
use crate::validation::{self as v, child, index, qualified_name};

pub struct EndpointSliceHooks;

const MAX_ENDPOINTS: usize = 1000;
const MAX_ADDRESSES: usize = 100;
const MAX_PORTS: usize = 20000;
const ADDRESS_TYPES: &[&str] = &["FQDN", "IPv4", "IPv6"];

fn validate_address(addr_type: &str, a: &str, path: &str) -> Vec<FieldError> {
    match addr_type {
        "IPv4" | "IPv6" => {
            let family_ok = match a.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V4(_)) => addr_type == "IPv4",
                Ok(std::net::IpAddr::V6(_)) => addr_type == "IPv6",
                Err(_) => false,
            };
            let mut errs = Vec::new();
            if !family_ok {
                let what = if addr_type == "IPv4" {
                    "IPv4 address, (e.g. 10.9.8.7)"
                } else {
                    "IPv6 address, (e.g. 2001:db8::1)"
                };
                errs.push(FieldError::invalid(path, a, format!("must be a valid {what}")));
            }
            errs.extend(v::endpoint_ip(path, a));
            errs
        }
        "FQDN" => {
            let trimmed = a.strip_suffix('.').unwrap_or(a);
            let mut errs = v::dns1123_subdomain(path, trimmed);
            if errs.is_empty() && !trimmed.contains('.') {
                errs.push(FieldError::invalid(
                    path,
                    a,
                    "should be a domain with at least two segments separated by dots",
                ));
            }
            errs
        }
        _ => Vec::new(),
    }
}

impl Hooks for EndpointSliceHooks {
    fn default(&self, obj: &mut Value) {
        for p in items_mut(obj, "ports") {
            if p["name"].is_null() {
                p["name"] = json!("");
            }
            if p["protocol"].is_null() {
                p["protocol"] = json!("TCP");
            }
        }
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        obj["metadata"]["generation"] = json!(1);
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        let strip = |o: &Value| {
            let mut o = o.clone();
            if let Some(m) = o.as_object_mut() {
                m.remove("metadata");
            }
            o
        };
        let (mut n, mut o) = (strip(new), strip(old));
        self.default(&mut n);
        self.default(&mut o);
        if n != o || new["metadata"]["labels"] != old["metadata"]["labels"] {
            let g = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            new["metadata"]["generation"] = json!(g);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let addr_type = obj["addressType"].as_str().unwrap_or_default();
        if addr_type.is_empty() {
            errs.push(FieldError::required("addressType", ""));
        } else if !ADDRESS_TYPES.contains(&addr_type) {
            errs.push(FieldError::not_supported("addressType", addr_type, ADDRESS_TYPES));
        }
        let endpoints = obj["endpoints"].as_array().map(Vec::as_slice).unwrap_or_default();
        if endpoints.len() > MAX_ENDPOINTS {
            errs.push(v::too_many("endpoints", endpoints.len(), MAX_ENDPOINTS));
        } else {
            for (i, ep) in endpoints.iter().enumerate() {
                let ep_path = index("endpoints", i);
                let ap = child(&ep_path, "addresses");
                let addrs = ep["addresses"].as_array().map(Vec::as_slice).unwrap_or_default();
                if addrs.is_empty() {
                    errs.push(FieldError::required(ap.clone(), "must contain at least 1 address"));
                } else if addrs.len() > MAX_ADDRESSES {
                    errs.push(v::too_many(ap.clone(), addrs.len(), MAX_ADDRESSES));
                }
                for (j, a) in addrs.iter().enumerate() {
                    errs.extend(validate_address(addr_type, a.as_str().unwrap_or_default(), &index(&ap, j)));
                }
                if let Some(n) = ep["nodeName"].as_str() {
                    errs.extend(v::dns1123_subdomain(&child(&ep_path, "nodeName"), n));
                }
                if let Some(h) = ep["hostname"].as_str() {
                    errs.extend(v::dns1123_label(&child(&ep_path, "hostname"), h));
                }
                let zones = ep["hints"]["forZones"].as_array().map(Vec::as_slice).unwrap_or_default();
                let zp = child(&child(&ep_path, "hints"), "forZones");
                if zones.len() > 8 {
                    errs.push(v::too_many(zp, zones.len(), 8));
                } else {
                    let mut seen = Vec::new();
                    for (j, z) in zones.iter().enumerate() {
                        let name = z["name"].as_str().unwrap_or_default();
                        let np = child(&index(&zp, j), "name");
                        if seen.contains(&name) {
                            errs.push(FieldError::duplicate(np.clone(), name));
                        }
                        seen.push(name);
                        errs.extend(v::label_value(&np, name));
                    }
                }
            }
        }
        let ports = obj["ports"].as_array().map(Vec::as_slice).unwrap_or_default();
        if ports.len() > MAX_PORTS {
            errs.push(v::too_many("ports", ports.len(), MAX_PORTS));
            return errs;
        }
        let mut names = Vec::new();
        for (i, p) in ports.iter().enumerate() {
            let pp = index("ports", i);
            let name = p["name"].as_str().unwrap_or_default();
            if !name.is_empty() {
                errs.extend(v::dns1123_label(&child(&pp, "name"), name));
            }
            if names.contains(&name) {
                errs.push(FieldError::duplicate(child(&pp, "name"), name));
            } else {
                names.push(name);
            }
            errs.extend(v::protocol(&child(&pp, "protocol"), &p["protocol"]));
            if let Some(ap) = p["appProtocol"].as_str() {
                errs.extend(qualified_name(&child(&pp, "appProtocol"), ap));
            }
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        v::immutable("addressType", &new["addressType"], &old["addressType"])
    }

    fn has_status(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_limits_and_address_types() {
        let mut s = json!({ "addressType": "IPv4", "endpoints": [{ "addresses": ["10.0.0.1"] }], "ports": [{ "port": 80 }] });
        EndpointSliceHooks.default(&mut s);
        assert_eq!(s["ports"][0], json!({ "port": 80, "name": "", "protocol": "TCP" }));
        assert!(EndpointSliceHooks.validate(&s).is_empty());
        s["addressType"] = json!("IP");
        s["endpoints"] = json!((0..1001).map(|_| json!({ "addresses": ["10.0.0.1"] })).collect::<Vec<_>>());
        let texts: Vec<String> = EndpointSliceHooks.validate(&s).iter().map(FieldError::to_text).collect();
        assert_eq!(
            texts,
            vec![
                "addressType: Unsupported value: \"IP\": supported values: \"FQDN\", \"IPv4\", \"IPv6\"",
                "endpoints: Too many: 1001: must have at most 1000 items",
            ]
        );
        let old = json!({ "addressType": "IPv4" });
        let new = json!({ "addressType": "IPv6" });
        assert_eq!(
            EndpointSliceHooks.validate_update(&new, &old)[0].to_text(),
            "addressType: Invalid value: \"IPv6\": field is immutable"
        );
    }

    #[test]
    fn generation_counts_changes() {
        let mut s = json!({ "metadata": { "name": "s" }, "addressType": "IPv4" });
        EndpointSliceHooks.prepare_for_create(&mut s);
        assert_eq!(s["metadata"]["generation"], 1);
        let mut n = s.clone();
        n["endpoints"] = json!([{ "addresses": ["10.0.0.2"] }]);
        EndpointSliceHooks.prepare_for_update(&mut n, &s);
        assert_eq!(n["metadata"]["generation"], 2);
    }
}
