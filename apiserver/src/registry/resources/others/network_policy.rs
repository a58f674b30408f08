//! NetworkPolicies (upstream's `SetDefaults_NetworkPolicy`/`NetworkPolicyPort` and
//! `ValidateNetworkPolicy`).

use serde_json::{Value, json};

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::resources::items_mut;
use crate::validation::{self as v, child, index, label_selector, show};

pub struct NetworkPolicyHooks;

fn validate_port(p: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(proto) = p["protocol"].as_str()
        && !v::SUPPORTED_PROTOCOLS.contains(&proto)
    {
        errs.push(FieldError::not_supported(child(path, "protocol"), proto, &["TCP", "UDP", "SCTP"]));
    }
    let end = p["endPort"].as_i64();
    match &p["port"] {
        Value::Number(n) => {
            let port = n.as_i64().unwrap_or(0);
            errs.extend(v::port_num(&child(path, "port"), port));
            if let Some(e) = end {
                if e < port {
                    errs.push(FieldError::invalid(
                        child(path, "endPort"),
                        e,
                        "must be greater than or equal to `port`",
                    ));
                }
                errs.extend(v::port_num(&child(path, "endPort"), e));
            }
        }
        Value::String(s) => {
            if let Some(e) = end {
                errs.push(FieldError::invalid(
                    child(path, "endPort"),
                    e,
                    "may not be specified when `port` is non-numeric",
                ));
            }
            errs.extend(v::port_name(&child(path, "port"), s));
        }
        _ => {
            if let Some(e) = end {
                errs.push(FieldError::invalid(
                    child(path, "endPort"),
                    e,
                    "may not be specified when `port` is not specified",
                ));
            }
        }
    }
    errs
}

fn parse_cidr(c: &str) -> Option<(std::net::IpAddr, u8)> {
    let (ip, bits) = c.split_once('/')?;
    Some((ip.parse().ok()?, bits.parse().ok()?))
}

fn contains(outer: (std::net::IpAddr, u8), inner: std::net::IpAddr) -> bool {
    match (outer.0, inner) {
        (std::net::IpAddr::V4(a), std::net::IpAddr::V4(b)) => {
            let mask = if outer.1 == 0 { 0 } else { u32::MAX << (32 - u32::from(outer.1.min(32))) };
            (u32::from(a) & mask) == (u32::from(b) & mask)
        }
        (std::net::IpAddr::V6(a), std::net::IpAddr::V6(b)) => {
            let mask = if outer.1 == 0 { 0 } else { u128::MAX << (128 - u32::from(outer.1.min(128))) };
            (u128::from(a) & mask) == (u128::from(b) & mask)
        }
        _ => false,
    }
}

fn validate_peer(p: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut n = 0;
    for f in ["podSelector", "namespaceSelector"] {
        if p[f].is_object() {
            n += 1;
            errs.extend(label_selector(&child(path, f), &p[f]));
        }
    }
    let block = &p["ipBlock"];
    if block.is_object() {
        n += 1;
        let bp = child(path, "ipBlock");
        let c = block["cidr"].as_str().unwrap_or_default();
        if c.is_empty() {
            errs.push(FieldError::required(child(&bp, "cidr"), ""));
        } else {
            errs.extend(v::cidr(&child(&bp, "cidr"), c));
            if let Some(outer) = parse_cidr(c) {
                for (i, e) in block["except"].as_array().into_iter().flatten().enumerate() {
                    let ep = index(&child(&bp, "except"), i);
                    let e = e.as_str().unwrap_or_default();
                    let errs_e = v::cidr(&ep, e);
                    if !errs_e.is_empty() {
                        errs.extend(errs_e);
                        continue;
                    }
                    if let Some(inner) = parse_cidr(e)
                        && (!contains(outer, inner.0) || outer.1 >= inner.1)
                    {
                        errs.push(FieldError::invalid(ep, e, "must be a strict subset of `cidr`"));
                    }
                }
            }
        }
    }
    if n == 0 {
        errs.push(FieldError::required(path, "must specify a peer"));
    } else if n > 1 && block.is_object() {
        errs.push(FieldError::forbidden(path, "may not specify both ipBlock and another peer"));
    }
    errs
}

impl Hooks for NetworkPolicyHooks {
    fn default(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        for dir in ["ingress", "egress"] {
            for rule in items_mut(spec, dir) {
                for p in items_mut(rule, "ports") {
                    if p["protocol"].is_null() {
                        p["protocol"] = json!("TCP");
                    }
                }
            }
        }
        if spec["policyTypes"].as_array().is_none_or(Vec::is_empty) {
            let mut types = vec![json!("Ingress")];
            if spec["egress"].as_array().is_some_and(|e| !e.is_empty()) {
                types.push(json!("Egress"));
            }
            spec["policyTypes"] = Value::Array(types);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let spec = &obj["spec"];
        let mut errs = label_selector("spec.podSelector", &spec["podSelector"]);
        for (dir, peers) in [("ingress", "from"), ("egress", "to")] {
            for (i, rule) in spec[dir].as_array().into_iter().flatten().enumerate() {
                let rp = index(&format!("spec.{dir}"), i);
                for (j, p) in rule["ports"].as_array().into_iter().flatten().enumerate() {
                    errs.extend(validate_port(p, &index(&child(&rp, "ports"), j)));
                }
                for (j, p) in rule[peers].as_array().into_iter().flatten().enumerate() {
                    errs.extend(validate_peer(p, &index(&child(&rp, peers), j)));
                }
            }
        }
        let types = spec["policyTypes"].as_array().map(Vec::as_slice).unwrap_or_default();
        if types.len() > 2 {
            errs.push(FieldError::invalid(
                "spec.policyTypes",
                show(&spec["policyTypes"]),
                "may not specify more than two policyTypes",
            ));
            return errs;
        }
        for (i, t) in types.iter().enumerate() {
            let t = t.as_str().unwrap_or_default();
            if !["Ingress", "Egress"].contains(&t) {
                errs.push(FieldError::not_supported(index("spec.policyTypes", i), t, &["Ingress", "Egress"]));
            }
        }
        errs
    }

    fn has_status(&self) -> bool {
        false
    }

    fn tracks_generation(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_types_default_and_peers() {
        let mut np =
            json!({ "spec": { "podSelector": {}, "egress": [{ "ports": [{ "port": 53 }], "to": [{}] }] } });
        NetworkPolicyHooks.default(&mut np);
        assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(np["spec"]["egress"][0]["ports"][0]["protocol"], "TCP");
        let texts: Vec<String> = NetworkPolicyHooks.validate(&np).iter().map(FieldError::to_text).collect();
        assert_eq!(texts, vec!["spec.egress[0].to[0]: Required value: must specify a peer"]);
        let mut only = json!({ "spec": { "podSelector": {} } });
        NetworkPolicyHooks.default(&mut only);
        assert_eq!(only["spec"]["policyTypes"], json!(["Ingress"]));
        let block = json!({ "spec": { "podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{ "from": [{ "ipBlock": { "cidr": "10.0.0.0/16", "except": ["10.1.0.0/24"] } }] }] } });
        assert!(
            NetworkPolicyHooks.validate(&block)[0].to_text().ends_with("must be a strict subset of `cidr`")
        );
    }
}
