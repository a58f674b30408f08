//! Endpoints (upstream's `SetDefaults_Endpoints` and `ValidateEndpoints`).

use serde_json::{Value, json};

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::resources::items_mut;
use crate::validation::{self as v, child, index, qualified_name};

pub struct EndpointsHooks;

fn validate_address(a: &Value, path: &str) -> Vec<FieldError> {
    let ip = a["ip"].as_str().unwrap_or_default();
    let mut errs = v::ip(&child(path, "ip"), ip);
    if let Some(h) = a["hostname"].as_str().filter(|h| !h.is_empty()) {
        errs.extend(v::dns1123_label(&child(path, "hostname"), h));
    }
    if let Some(n) = a["nodeName"].as_str() {
        errs.extend(v::dns1123_subdomain(&child(path, "nodeName"), n));
    }
    errs.extend(v::endpoint_ip(&child(path, "ip"), ip));
    errs
}

impl Hooks for EndpointsHooks {
    fn default(&self, obj: &mut Value) {
        for subset in items_mut(obj, "subsets") {
            for p in items_mut(subset, "ports") {
                if p["protocol"].as_str().is_none_or(str::is_empty) {
                    p["protocol"] = json!("TCP");
                }
            }
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for (i, ss) in obj["subsets"].as_array().into_iter().flatten().enumerate() {
            let sp = index("subsets", i);
            let count = |f: &str| ss[f].as_array().map(Vec::len).unwrap_or(0);
            if count("addresses") == 0 && count("notReadyAddresses") == 0 {
                errs.push(FieldError::required(
                    sp.clone(),
                    "must specify `addresses` or `notReadyAddresses`",
                ));
            }
            for list in ["addresses", "notReadyAddresses"] {
                for (j, a) in ss[list].as_array().into_iter().flatten().enumerate() {
                    errs.extend(validate_address(a, &index(&child(&sp, list), j)));
                }
            }
            let ports = ss["ports"].as_array().map(Vec::as_slice).unwrap_or_default();
            for (j, p) in ports.iter().enumerate() {
                let pp = index(&child(&sp, "ports"), j);
                let name = p["name"].as_str().unwrap_or_default();
                if ports.len() > 1 && name.is_empty() {
                    errs.push(FieldError::required(child(&pp, "name"), ""));
                } else if !name.is_empty() {
                    errs.extend(v::dns1123_label(&child(&pp, "name"), name));
                }
                errs.extend(v::port_num(&child(&pp, "port"), p["port"].as_i64().unwrap_or(0)));
                errs.extend(v::protocol(&child(&pp, "protocol"), &p["protocol"]));
                if let Some(ap) = p["appProtocol"].as_str() {
                    errs.extend(qualified_name(&child(&pp, "appProtocol"), ap));
                }
            }
        }
        errs
    }

    fn has_status(&self) -> bool {
        false
    }

    fn create_on_update(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_default_and_subsets_need_addresses() {
        let mut e = json!({ "subsets": [{ "addresses": [{ "ip": "10.1.2.3" }], "ports": [{ "port": 80 }] }, { "ports": [{ "port": 0, "name": "a" }, { "port": 1 }] }] });
        EndpointsHooks.default(&mut e);
        assert_eq!(e["subsets"][0]["ports"][0]["protocol"], "TCP");
        let texts: Vec<String> = EndpointsHooks.validate(&e).iter().map(FieldError::to_text).collect();
        assert_eq!(
            texts,
            vec![
                "subsets[1]: Required value: must specify `addresses` or `notReadyAddresses`",
                "subsets[1].ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
                "subsets[1].ports[1].name: Required value",
            ]
        );
    }
}
