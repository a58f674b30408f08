//! Ingresses (upstream's `ValidateIngressCreate`/`Update`).

use serde_json::Value;

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::validation::{self as v, child, index, show};

pub struct IngressHooks;

fn wildcard_subdomain(path: &str, host: &str) -> Vec<FieldError> {
    match host.strip_prefix("*.") {
        Some(rest) if v::is_dns1123_subdomain(rest) => Vec::new(),
        _ => vec![FieldError::invalid(
            path,
            host,
            "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character (e.g. '*.example.com', regex used for validation is '\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        )],
    }
}

fn validate_host(path: &str, host: &str) -> Vec<FieldError> {
    if host.contains('*') { wildcard_subdomain(path, host) } else { v::dns1123_subdomain(path, host) }
}

fn validate_backend(b: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match (b["resource"].is_object(), b["service"].is_object()) {
        (true, true) => {
            errs.push(FieldError::invalid(path, "", "cannot set both resource and service backends"))
        }
        (true, false) => {
            let r = &b["resource"];
            let rp = child(path, "resource");
            if let Some(g) = r["apiGroup"].as_str() {
                errs.extend(v::dns1123_subdomain(&child(&rp, "apiGroup"), g));
            }
            for f in ["kind", "name"] {
                let val = r[f].as_str().unwrap_or_default();
                if val.is_empty() {
                    errs.push(FieldError::required(child(&rp, f), ""));
                } else {
                    errs.extend(v::NameRule::PathSegment.check(&child(&rp, f), val));
                }
            }
        }
        (false, true) => {
            let s = &b["service"];
            let name = s["name"].as_str().unwrap_or_default();
            let np = format!("{path}.service.name");
            if name.is_empty() {
                errs.push(FieldError::required(np, ""));
            } else {
                errs.extend(v::dns1035_label(&np, name));
            }
            let port_name = s["port"]["name"].as_str().unwrap_or_default();
            let number = s["port"]["number"].as_i64().unwrap_or(0);
            match (port_name.is_empty(), number == 0) {
                (false, false) => {
                    errs.push(FieldError::invalid(path, "", "cannot set both port name & port number"))
                }
                (false, true) => errs.extend(v::port_name(&format!("{path}.service.port.name"), port_name)),
                (true, false) => errs.extend(v::port_num(&format!("{path}.service.port.number"), number)),
                (true, true) => errs.push(FieldError::required(path, "port name or number is required")),
            }
        }
        (false, false) => errs.push(FieldError::invalid(path, "", "resource or service backend is required")),
    }
    errs
}

fn validate_path(p: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(t) = p["pathType"].as_str() else {
        return vec![FieldError::required(child(path, "pathType"), "pathType must be specified")];
    };
    let value = p["path"].as_str().unwrap_or_default();
    let pp = child(path, "path");
    match t {
        "Exact" | "Prefix" => {
            if !value.starts_with('/') {
                errs.push(FieldError::invalid(pp.clone(), value, "must be an absolute path"));
            }
            for seq in ["//", "/./", "/../", "%2f", "%2F"] {
                if value.contains(seq) {
                    errs.push(FieldError::invalid(pp.clone(), value, format!("must not contain '{seq}'")));
                }
            }
            for suffix in ["/..", "/."] {
                if value.ends_with(suffix) {
                    errs.push(FieldError::invalid(pp.clone(), value, format!("cannot end with '{suffix}'")));
                }
            }
        }
        "ImplementationSpecific" => {
            if !value.is_empty() && !value.starts_with('/') {
                errs.push(FieldError::invalid(pp, value, "must be an absolute path"));
            }
        }
        other => errs.push(FieldError::not_supported(
            child(path, "pathType"),
            other,
            &["Exact", "ImplementationSpecific", "Prefix"],
        )),
    }
    errs.extend(validate_backend(&p["backend"], &child(path, "backend")));
    errs
}

impl Hooks for IngressHooks {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let spec = &obj["spec"];
        let mut errs = Vec::new();
        let rules = spec["rules"].as_array().map(Vec::as_slice).unwrap_or_default();
        if rules.is_empty() && spec["defaultBackend"].is_null() {
            errs.push(FieldError::invalid(
                "spec",
                show(&spec["rules"]),
                "either `defaultBackend` or `rules` must be specified",
            ));
        }
        if spec["defaultBackend"].is_object() {
            errs.extend(validate_backend(&spec["defaultBackend"], "spec.defaultBackend"));
        }
        for (i, r) in rules.iter().enumerate() {
            let rp = index("spec.rules", i);
            if let Some(h) = r["host"].as_str().filter(|h| !h.is_empty()) {
                if h.parse::<std::net::IpAddr>().is_ok() {
                    errs.push(FieldError::invalid(
                        child(&rp, "host"),
                        h,
                        "must be a DNS name, not an IP address",
                    ));
                }
                errs.extend(validate_host(&child(&rp, "host"), h));
            }
            if r["http"].is_object() {
                let paths = r["http"]["paths"].as_array().map(Vec::as_slice).unwrap_or_default();
                let hp = format!("{rp}.http.paths");
                if paths.is_empty() {
                    errs.push(FieldError::required(hp.clone(), ""));
                }
                for (j, p) in paths.iter().enumerate() {
                    errs.extend(validate_path(p, &index(&hp, j)));
                }
            }
        }
        for (i, tls) in spec["tls"].as_array().into_iter().flatten().enumerate() {
            let tp = index("spec.tls", i);
            for (j, h) in tls["hosts"].as_array().into_iter().flatten().enumerate() {
                errs.extend(validate_host(&index(&child(&tp, "hosts"), j), h.as_str().unwrap_or_default()));
            }
            if let Some(s) = tls["secretName"].as_str().filter(|s| !s.is_empty()) {
                errs.extend(v::dns1123_subdomain(&child(&tp, "secretName"), s));
            }
        }
        if let Some(c) = spec["ingressClassName"].as_str() {
            errs.extend(v::dns1123_subdomain("spec.ingressClassName", c));
        }
        if let (Some(a), Some(c)) = (
            obj["metadata"]["annotations"]["kubernetes.io/ingress.class"].as_str(),
            spec["ingressClassName"].as_str(),
        ) && a != c
        {
            errs.push(FieldError::invalid(
                "annotations.kubernetes.io/ingress.class",
                a,
                "must match `ingressClassName` when both are specified",
            ));
        }
        errs
    }

    fn tracks_generation(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rules_and_backends() {
        let ing = json!({ "spec": { "rules": [{ "host": "foo.example.com", "http": { "paths": [
            { "path": "/api", "pathType": "Prefix", "backend": { "service": { "name": "api", "port": { "number": 80 } } } },
            { "path": "api", "pathType": "Exact", "backend": { "service": { "name": "api" } } },
        ] } }] } });
        let texts: Vec<String> = IngressHooks.validate(&ing).iter().map(FieldError::to_text).collect();
        assert_eq!(
            texts,
            vec![
                "spec.rules[0].http.paths[1].path: Invalid value: \"api\": must be an absolute path",
                "spec.rules[0].http.paths[1].backend: Required value: port name or number is required",
            ]
        );
        assert!(
            IngressHooks.validate(&json!({ "spec": {} }))[0]
                .to_text()
                .ends_with("either `defaultBackend` or `rules` must be specified")
        );
    }
}
