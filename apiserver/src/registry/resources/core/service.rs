//! Services (upstream's `SetDefaults_Service`, the IP-family defaults of the service REST
//! storage, `dropTypeDependentFields`, `ValidateService` and `ValidateServiceUpdate`).
//! Cluster IPs and node ports themselves are allocated by [`crate::services`], after
//! these checks.

use serde_json::{Value, json};

use super::pod_spec::set_default;
use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::resources::{at_mut, items_mut};
use crate::validation::{self as v, NameRule, child, index, key, labels, qualified_name, show};

pub struct ServiceHooks;

fn s<'a>(v: &'a Value, f: &str) -> &'a str {
    v[f].as_str().unwrap_or_default()
}

fn typ(svc: &Value) -> &str {
    svc["spec"]["type"].as_str().unwrap_or("ClusterIP")
}

fn externally_accessible(svc: &Value) -> bool {
    matches!(typ(svc), "LoadBalancer" | "NodePort")
        || (typ(svc) == "ClusterIP" && svc["spec"]["externalIPs"].as_array().is_some_and(|a| !a.is_empty()))
}

fn cluster_ips(svc: &Value) -> Vec<&str> {
    svc["spec"]["clusterIPs"].as_array().into_iter().flatten().filter_map(Value::as_str).collect()
}

fn headless(svc: &Value) -> bool {
    cluster_ips(svc) == ["None"]
}

fn needs_cluster_ip(svc: &Value) -> bool {
    typ(svc) != "ExternalName"
}

fn needs_node_port(svc: &Value) -> bool {
    match typ(svc) {
        "NodePort" => true,
        "LoadBalancer" => svc["spec"]["allocateLoadBalancerNodePorts"].as_bool().unwrap_or(true),
        _ => false,
    }
}

fn needs_health_check(svc: &Value) -> bool {
    typ(svc) == "LoadBalancer" && s(&svc["spec"], "externalTrafficPolicy") == "Local"
}

fn remove(v: &mut Value, f: &str) {
    if let Some(o) = v.as_object_mut() {
        o.remove(f);
    }
}

/// Wipes what a type change leaves meaningless, unless the client changed it too
/// (upstream's `dropTypeDependentFields`).
fn drop_type_dependent_fields(new: &mut Value, old: &Value) {
    let same = |new: &Value, f: &str| new["spec"][f] == old["spec"][f];
    if needs_cluster_ip(old) && !needs_cluster_ip(new) {
        if same(new, "clusterIP") && same(new, "clusterIPs") {
            remove(&mut new["spec"], "clusterIP");
            remove(&mut new["spec"], "clusterIPs");
        }
        for f in ["ipFamilies", "ipFamilyPolicy"] {
            if same(new, f) {
                remove(&mut new["spec"], f);
            }
        }
    }
    let node_ports = |svc: &Value| -> Vec<Value> {
        svc["spec"]["ports"].as_array().into_iter().flatten().map(|p| p["nodePort"].clone()).collect()
    };
    if needs_node_port(old)
        && !needs_node_port(new)
        && node_ports(new) == node_ports(old)
        && let Some(spec) = new.get_mut("spec")
    {
        items_mut(spec, "ports").for_each(|p| remove(p, "nodePort"));
    }
    if needs_health_check(old) && !needs_health_check(new) && same(new, "healthCheckNodePort") {
        remove(&mut new["spec"], "healthCheckNodePort");
    }
    if typ(old) == "LoadBalancer" && typ(new) != "LoadBalancer" {
        for f in ["allocateLoadBalancerNodePorts", "loadBalancerClass"] {
            if same(new, f) {
                remove(&mut new["spec"], f);
            }
        }
    }
    if externally_accessible(old) && !externally_accessible(new) && same(new, "externalTrafficPolicy") {
        remove(&mut new["spec"], "externalTrafficPolicy");
    }
}

fn validate_port(p: &Value, require_name: bool, names: &mut Vec<String>, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = s(p, "name");
    if require_name && name.is_empty() {
        errs.push(FieldError::required(child(path, "name"), ""));
    } else if !name.is_empty() {
        errs.extend(v::dns1123_label(&child(path, "name"), name));
        if names.iter().any(|n| n == name) {
            errs.push(FieldError::duplicate(child(path, "name"), name));
        } else {
            names.push(name.to_string());
        }
    }
    errs.extend(v::port_num(&child(path, "port"), p["port"].as_i64().unwrap_or(0)));
    errs.extend(v::protocol(&child(path, "protocol"), &p["protocol"]));
    errs.extend(v::port_num_or_name(&child(path, "targetPort"), &p["targetPort"]));
    if let Some(ap) = p["appProtocol"].as_str() {
        errs.extend(qualified_name(&child(path, "appProtocol"), ap));
    }
    errs
}

/// `ValidateServiceClusterIPsRelatedFields`.
fn validate_cluster_ips(svc: &Value) -> Vec<FieldError> {
    if typ(svc) == "ExternalName" {
        return Vec::new();
    }
    let mut errs = Vec::new();
    let spec = &svc["spec"];
    let ips = cluster_ips(svc);
    let ips_value = || show(&spec["clusterIPs"]);
    let cip = s(spec, "clusterIP");
    if !cip.is_empty() {
        if ips.is_empty() {
            errs.push(FieldError::required("spec.clusterIPs", ""));
        } else if ips[0] != cip {
            errs.push(FieldError::invalid(
                "spec.clusterIPs",
                ips_value(),
                "first value must match `clusterIP`",
            ));
        }
    } else if !ips.is_empty() {
        errs.push(FieldError::invalid(
            "spec.clusterIPs",
            ips_value(),
            "must be empty when `clusterIP` is not specified",
        ));
    }
    let mut seen = Vec::new();
    for (i, f) in spec["ipFamilies"].as_array().into_iter().flatten().enumerate() {
        let f = f.as_str().unwrap_or_default();
        if !["IPv4", "IPv6"].contains(&f) {
            errs.push(FieldError::not_supported(index("spec.ipFamilies", i), f, &["IPv4", "IPv6"]));
        }
        if seen.contains(&f) {
            errs.push(FieldError::duplicate(index("spec.ipFamilies", i), f));
        }
        seen.push(f);
    }
    if let Some(p) = spec["ipFamilyPolicy"].as_str() {
        const POLICIES: &[&str] = &["PreferDualStack", "RequireDualStack", "SingleStack"];
        if !POLICIES.contains(&p) {
            errs.push(FieldError::not_supported("spec.ipFamilyPolicy", p, POLICIES));
        }
    }
    let mut invalid = false;
    for (i, ip) in ips.iter().enumerate() {
        if i == 0 && *ip == "None" {
            if ips.len() > 1 {
                invalid = true;
                errs.push(FieldError::invalid(
                    "spec.clusterIPs",
                    ips_value(),
                    "'None' must be the first and only value",
                ));
            }
            continue;
        }
        let e = v::ip(&index("spec.clusterIPs", i), ip);
        invalid |= !e.is_empty();
        errs.extend(e);
    }
    if ips.len() > 2 {
        errs.push(FieldError::invalid("spec.clusterIPs", ips_value(), "may only hold up to 2 values"));
    }
    if invalid {
        return errs;
    }
    let is_v6 = |ip: &str| ip.contains(':');
    if ips.len() == 2 && is_v6(ips[0]) == is_v6(ips[1]) {
        errs.push(FieldError::invalid(
            "spec.clusterIPs",
            ips_value(),
            "may specify no more than one IP for each IP family",
        ));
    }
    if !headless(svc) {
        for (i, (ip, family)) in ips.iter().zip(seen.iter()).enumerate() {
            if *family == "IPv4" && is_v6(ip) {
                errs.push(FieldError::invalid(
                    index("spec.clusterIPs", i),
                    *ip,
                    format!("expected an IPv4 value as indicated by `ipFamilies[{i}]`"),
                ));
            }
            if *family == "IPv6" && !is_v6(ip) {
                errs.push(FieldError::invalid(
                    index("spec.clusterIPs", i),
                    *ip,
                    format!("expected an IPv6 value as indicated by `ipFamilies[{i}]`"),
                ));
            }
        }
    }
    errs
}

impl Hooks for ServiceHooks {
    fn default(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        if !spec.is_object() {
            *spec = json!({});
        }
        if s(spec, "sessionAffinity").is_empty() {
            spec["sessionAffinity"] = json!("None");
        }
        match s(spec, "sessionAffinity") {
            "None" => remove(spec, "sessionAffinityConfig"),
            "ClientIP" if spec["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"].is_null() => {
                spec["sessionAffinityConfig"] = json!({ "clientIP": { "timeoutSeconds": 10800 } });
            }
            _ => {}
        }
        if s(spec, "type").is_empty() {
            spec["type"] = json!("ClusterIP");
        }
        // Zero means unset for these (protobuf clients send the zeros JSON omits).
        if spec["healthCheckNodePort"].as_i64() == Some(0) {
            remove(spec, "healthCheckNodePort");
        }
        if spec["publishNotReadyAddresses"].as_bool() == Some(false) {
            remove(spec, "publishNotReadyAddresses");
        }
        for p in items_mut(spec, "ports") {
            if p["nodePort"].as_i64() == Some(0) {
                remove(p, "nodePort");
            }
        }
        {
            for p in items_mut(spec, "ports") {
                if s(p, "protocol").is_empty() {
                    p["protocol"] = json!("TCP");
                }
                let unset = match &p["targetPort"] {
                    Value::Null => true,
                    Value::Number(n) => n.as_i64() == Some(0),
                    Value::String(s) => s.is_empty(),
                    _ => false,
                };
                if unset {
                    p["targetPort"] = p["port"].clone();
                }
            }
        }
        let t = s(spec, "type").to_string();
        // The v1 shape carries clusterIP and clusterIPs; either sets the other.
        if !s(spec, "clusterIP").is_empty() && spec["clusterIPs"].as_array().is_none_or(Vec::is_empty) {
            spec["clusterIPs"] = json!([spec["clusterIP"].clone()]);
        }
        if t != "ExternalName" {
            let headless_selectorless = spec["clusterIPs"] == json!(["None"])
                && spec["selector"].as_object().is_none_or(|m| m.is_empty());
            // What the service REST storage fills in for a single-stack IPv4 cluster.
            let policy = if headless_selectorless { "RequireDualStack" } else { "SingleStack" };
            set_default(spec, "ipFamilyPolicy", json!(policy));
            if spec["ipFamilies"].as_array().is_none_or(Vec::is_empty) {
                spec["ipFamilies"] = json!(["IPv4"]);
            }
        }
        if matches!(t.as_str(), "NodePort" | "LoadBalancer" | "ClusterIP") {
            set_default(spec, "internalTrafficPolicy", json!("Cluster"));
        }
        if t == "LoadBalancer" {
            set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
        }
        if externally_accessible(obj) && s(&obj["spec"], "externalTrafficPolicy").is_empty() {
            obj["spec"]["externalTrafficPolicy"] = json!("Cluster");
        }
        if !obj["status"]["loadBalancer"].is_object() {
            obj["status"]["loadBalancer"] = json!({});
        }
        if t == "LoadBalancer"
            && let Some(lb) = at_mut(obj, &["status", "loadBalancer"])
        {
            for i in items_mut(lb, "ingress").filter(|i| !s(i, "ip").is_empty()) {
                set_default(i, "ipMode", json!("VIP"));
            }
        }
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        crate::registry::resource::copy_field(new, old, "status");
        drop_type_dependent_fields(new, old);
    }

    fn validate(&self, svc: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &svc["spec"];
        let t = s(spec, "type");
        let ann = &svc["metadata"]["annotations"];
        if let (Some(mode), Some(hints)) = (
            ann.get("service.kubernetes.io/topology-mode").and_then(Value::as_str),
            ann.get("service.kubernetes.io/topology-aware-hints").and_then(Value::as_str),
        ) && mode != hints
        {
            errs.push(FieldError::invalid(
                key("metadata.annotations", "service.kubernetes.io/topology-mode"),
                mode,
                "must match annotations[service.kubernetes.io/topology-aware-hints] when both are specified",
            ));
        }
        let ports = spec["ports"].as_array().map(Vec::as_slice).unwrap_or_default();
        if ports.is_empty() && !headless(svc) && t != "ExternalName" {
            errs.push(FieldError::required("spec.ports", ""));
        }
        match t {
            "LoadBalancer" | "NodePort" if headless(svc) => errs.push(FieldError::invalid(
                "spec.clusterIPs[0]",
                "None",
                format!("may not be set to 'None' for {t} services"),
            )),
            "ExternalName" => {
                if !cluster_ips(svc).is_empty() {
                    errs.push(FieldError::forbidden(
                        "spec.clusterIPs",
                        "may not be set for ExternalName services",
                    ));
                }
                if spec["ipFamilies"].as_array().is_some_and(|a| !a.is_empty()) {
                    errs.push(FieldError::forbidden(
                        "spec.ipFamilies",
                        "may not be set for ExternalName services",
                    ));
                }
                if !spec["ipFamilyPolicy"].is_null() {
                    errs.push(FieldError::forbidden(
                        "spec.ipFamilyPolicy",
                        "may not be set for ExternalName services",
                    ));
                }
                let cname = s(spec, "externalName");
                let cname = cname.strip_suffix('.').unwrap_or(cname);
                if cname.is_empty() {
                    errs.push(FieldError::required("spec.externalName", ""));
                } else {
                    errs.extend(v::dns1123_subdomain("spec.externalName", cname));
                }
            }
            _ => {}
        }
        let mut names = Vec::new();
        for (i, p) in ports.iter().enumerate() {
            errs.extend(validate_port(p, ports.len() > 1, &mut names, &index("spec.ports", i)));
        }
        if spec["selector"].is_object() {
            errs.extend(labels("spec.selector", spec.get("selector")));
        }
        match s(spec, "sessionAffinity") {
            "" => errs.push(FieldError::required("spec.sessionAffinity", "")),
            "ClientIP" => {
                let cfg = &spec["sessionAffinityConfig"];
                let when = "when session affinity type is ClientIP";
                if !cfg.is_object() {
                    errs.push(FieldError::required("spec.sessionAffinityConfig", when));
                } else if !cfg["clientIP"].is_object() {
                    errs.push(FieldError::required("spec.sessionAffinityConfig.clientIP", when));
                } else {
                    match cfg["clientIP"]["timeoutSeconds"].as_i64() {
                        None => errs.push(FieldError::required(
                            "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                            when,
                        )),
                        Some(n) if n <= 0 || n > 86400 => errs.push(FieldError::invalid(
                            "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                            n,
                            "must be greater than 0 and less than 86400",
                        )),
                        _ => {}
                    }
                }
            }
            "None" => {
                if !spec["sessionAffinityConfig"].is_null() {
                    errs.push(FieldError::forbidden(
                        "spec.sessionAffinityConfig",
                        "must not be set when session affinity is None",
                    ));
                }
            }
            other => {
                errs.push(FieldError::not_supported("spec.sessionAffinity", other, &["ClientIP", "None"]))
            }
        }
        errs.extend(validate_cluster_ips(svc));
        for (i, ip) in spec["externalIPs"].as_array().into_iter().flatten().enumerate() {
            let ip = ip.as_str().unwrap_or_default();
            let e = v::ip(&index("spec.externalIPs", i), ip);
            if e.is_empty() {
                errs.extend(v::endpoint_ip(&index("spec.externalIPs", i), ip));
            } else {
                errs.extend(e);
            }
        }
        const TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
        if t.is_empty() {
            errs.push(FieldError::required("spec.type", ""));
        } else if !TYPES.contains(&t) {
            errs.push(FieldError::not_supported("spec.type", t, TYPES));
        }
        if t == "ClusterIP" {
            for (i, p) in ports.iter().enumerate() {
                if p["nodePort"].as_i64().unwrap_or(0) != 0 {
                    errs.push(FieldError::forbidden(
                        child(&index("spec.ports", i), "nodePort"),
                        "may not be used when `type` is 'ClusterIP'",
                    ));
                }
            }
        }
        let mut node_ports = Vec::new();
        let mut port_keys = Vec::new();
        for (i, p) in ports.iter().enumerate() {
            let np = p["nodePort"].as_i64().unwrap_or(0);
            if np != 0 {
                let k = (s(p, "protocol"), np);
                if node_ports.contains(&k) {
                    errs.push(FieldError::duplicate(child(&index("spec.ports", i), "nodePort"), np));
                }
                node_ports.push(k);
            }
            let k = (s(p, "protocol"), p["port"].as_i64().unwrap_or(0));
            if port_keys.contains(&k) {
                errs.push(FieldError::duplicate(
                    index("spec.ports", i),
                    json!({ "port": k.1, "protocol": k.0 }).to_string(),
                ));
            }
            port_keys.push(k);
        }
        let ranges = spec["loadBalancerSourceRanges"].as_array().map(Vec::as_slice).unwrap_or_default();
        if !ranges.is_empty() {
            if t != "LoadBalancer" {
                errs.push(FieldError::forbidden(
                    "spec.LoadBalancerSourceRanges",
                    "may only be used when `type` is 'LoadBalancer'",
                ));
            }
            for (i, r) in ranges.iter().enumerate() {
                errs.extend(v::cidr(
                    &index("spec.LoadBalancerSourceRanges", i),
                    r.as_str().unwrap_or_default().trim(),
                ));
            }
        }
        if !spec["allocateLoadBalancerNodePorts"].is_null() && t != "LoadBalancer" {
            errs.push(FieldError::forbidden(
                "spec.allocateLoadBalancerNodePorts",
                "may only be used when `type` is 'LoadBalancer'",
            ));
        }
        if t == "LoadBalancer" && spec["allocateLoadBalancerNodePorts"].is_null() {
            errs.push(FieldError::required("allocateLoadBalancerNodePorts", ""));
        }
        match (t, spec["loadBalancerClass"].as_str()) {
            ("LoadBalancer", Some(c)) => errs.extend(qualified_name("spec.loadBalancerClass", c)),
            (_, Some(_)) => errs.push(FieldError::forbidden(
                "spec.loadBalancerClass",
                "may only be used when `type` is 'LoadBalancer'",
            )),
            _ => {}
        }
        let etp = s(spec, "externalTrafficPolicy");
        if !externally_accessible(svc) {
            if !etp.is_empty() {
                errs.push(FieldError::invalid(
                    "spec.externalTrafficPolicy",
                    etp,
                    "may only be set for externally-accessible services",
                ));
            }
        } else if etp.is_empty() {
            errs.push(FieldError::required("spec.externalTrafficPolicy", ""));
        } else if !["Cluster", "Local"].contains(&etp) {
            errs.push(FieldError::not_supported("spec.externalTrafficPolicy", etp, &["Cluster", "Local"]));
        }
        let hc = spec["healthCheckNodePort"].as_i64().unwrap_or(0);
        if !needs_health_check(svc) && hc != 0 {
            errs.push(FieldError::invalid(
                "spec.healthCheckNodePort",
                hc,
                "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
            ));
        } else if hc != 0 {
            errs.extend(v::port_num("spec.healthCheckNodePort", hc));
        }
        match spec["internalTrafficPolicy"].as_str() {
            None if matches!(t, "NodePort" | "LoadBalancer" | "ClusterIP") => {
                errs.push(FieldError::required("spec.internalTrafficPolicy", ""))
            }
            Some(p) if !["Cluster", "Local"].contains(&p) => {
                errs.push(FieldError::not_supported("spec.internalTrafficPolicy", p, &["Cluster", "Local"]))
            }
            _ => {}
        }
        if let Some(d) = spec["trafficDistribution"].as_str()
            && d != "PreferClose"
        {
            errs.push(FieldError::not_supported("spec.trafficDistribution", d, &["PreferClose"]));
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let external = typ(new) == "ExternalName" || typ(old) == "ExternalName";
        let (ni, oi) = (cluster_ips(new), cluster_ips(old));
        let ips_value = show(&new["spec"]["clusterIPs"]);
        if !(external || headless(new) && headless(old)) {
            let changed = "may not change once set";
            if ni.len() == oi.len() {
                for (i, ip) in oi.iter().enumerate() {
                    if *ip != ni[i] {
                        errs.push(FieldError::invalid(
                            index("spec.clusterIPs", i),
                            ips_value.clone(),
                            changed,
                        ));
                    }
                }
            } else if oi.len() > ni.len() {
                if ni.is_empty() {
                    errs.push(FieldError::invalid(
                        "spec.clusterIPs[0]",
                        ips_value.clone(),
                        "primary clusterIP can not be unset",
                    ));
                } else if ni[0] != oi[0] {
                    errs.push(FieldError::invalid("spec.clusterIPs[0]", ips_value.clone(), changed));
                }
                if ni.len() == 1 && s(&new["spec"], "ipFamilyPolicy") != "SingleStack" {
                    errs.push(FieldError::invalid(
                        "spec.ipFamilyPolicy",
                        v::show(&new["spec"]["ipFamilyPolicy"]),
                        "must be set to 'SingleStack' when releasing the secondary clusterIP",
                    ));
                }
            } else if !oi.is_empty() && ni[0] != oi[0] {
                errs.push(FieldError::invalid("spec.clusterIPs[0]", ips_value.clone(), changed));
            }
        }
        if !external && headless(new) == headless(old) && !headless(new) {
            let fam = |svc: &Value| -> Vec<Value> {
                svc["spec"]["ipFamilies"].as_array().cloned().unwrap_or_default()
            };
            let (nf, of) = (fam(new), fam(old));
            if (nf.len() == of.len() && nf != of) || (!nf.is_empty() && !of.is_empty() && nf[0] != of[0]) {
                errs.push(FieldError::invalid(
                    "spec.ipFamilies[0]",
                    show(&new["spec"]["ipFamilies"]),
                    "may not change once set",
                ));
            }
        }
        if typ(new) == "LoadBalancer"
            && typ(old) == "LoadBalancer"
            && new["spec"]["loadBalancerClass"] != old["spec"]["loadBalancerClass"]
        {
            errs.push(FieldError::invalid(
                "spec.loadBalancerClass",
                show(&new["spec"]["loadBalancerClass"]),
                "may not change once set",
            ));
        }
        if needs_health_check(old)
            && needs_health_check(new)
            && new["spec"]["healthCheckNodePort"] != old["spec"]["healthCheckNodePort"]
        {
            errs.push(FieldError::forbidden("spec.healthCheckNodePort", "field is immutable"));
        }
        errs
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Dns1035Label
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaulted(spec: Value) -> Value {
        let mut svc = json!({ "metadata": { "name": "web", "namespace": "default" }, "spec": spec });
        ServiceHooks.default(&mut svc);
        svc
    }

    fn texts(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(FieldError::to_text).collect()
    }

    #[test]
    fn defaults() {
        let svc = defaulted(json!({ "selector": { "app": "web" }, "ports": [{ "port": 80 }] }));
        let spec = &svc["spec"];
        assert_eq!(spec["type"], "ClusterIP");
        assert_eq!(spec["sessionAffinity"], "None");
        assert_eq!(spec["ports"][0], json!({ "port": 80, "protocol": "TCP", "targetPort": 80 }));
        assert_eq!(spec["ipFamilies"], json!(["IPv4"]));
        assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
        assert_eq!(spec["internalTrafficPolicy"], "Cluster");
        assert!(spec["externalTrafficPolicy"].is_null());
        assert!(ServiceHooks.validate(&svc).is_empty(), "{:?}", ServiceHooks.validate(&svc));
        let lb =
            defaulted(json!({ "type": "LoadBalancer", "ports": [{ "port": 80, "targetPort": "http" }] }));
        assert_eq!(lb["spec"]["externalTrafficPolicy"], "Cluster");
        assert_eq!(lb["spec"]["allocateLoadBalancerNodePorts"], true);
        assert_eq!(lb["spec"]["ports"][0]["targetPort"], "http");
        let headless = defaulted(json!({ "clusterIP": "None" }));
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
        assert_eq!(headless["spec"]["ipFamilyPolicy"], "RequireDualStack");
        assert!(ServiceHooks.validate(&headless).is_empty());
        let ext = defaulted(json!({ "type": "ExternalName", "externalName": "example.com." }));
        assert!(ext["spec"]["ipFamilies"].is_null());
        assert!(ServiceHooks.validate(&ext).is_empty());
    }

    #[test]
    fn invalid_services() {
        let svc = defaulted(
            json!({ "type": "ClusterIP", "ports": [{ "port": 80, "nodePort": 30000 }, { "port": 80, "name": "b" }] }),
        );
        let t = texts(ServiceHooks.validate(&svc));
        assert!(t.contains(&"spec.ports[0].name: Required value".to_string()), "{t:?}");
        assert!(t.contains(
            &"spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'".to_string()
        ));
        assert!(t.iter().any(|e| e.starts_with("spec.ports[1]: Duplicate value")));
        assert_eq!(texts(ServiceHooks.validate(&defaulted(json!({})))), vec!["spec.ports: Required value"]);
        let bad = defaulted(json!({ "type": "Magic", "ports": [{ "port": 0 }] }));
        let t = texts(ServiceHooks.validate(&bad));
        assert!(
            t.contains(
                &"spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive".to_string()
            ),
            "{t:?}"
        );
        assert!(t.iter().any(|e| e.starts_with("spec.type: Unsupported value: \"Magic\"")));
        assert_eq!(ServiceHooks.name_rule(), NameRule::Dns1035Label);
    }

    #[test]
    fn cluster_ip_is_immutable_and_type_changes_wipe() {
        let old = defaulted(json!({ "clusterIP": "10.0.0.10", "ports": [{ "port": 80 }] }));
        let mut new = old.clone();
        new["spec"]["clusterIP"] = json!("10.0.0.11");
        new["spec"]["clusterIPs"] = json!(["10.0.0.11"]);
        assert_eq!(
            texts(ServiceHooks.validate_update(&new, &old)),
            vec!["spec.clusterIPs[0]: Invalid value: [\"10.0.0.11\"]: may not change once set"]
        );
        let mut ext = old.clone();
        ext["spec"]["type"] = json!("ExternalName");
        ext["spec"]["externalName"] = json!("example.com");
        ServiceHooks.prepare_for_update(&mut ext, &old);
        ServiceHooks.default(&mut ext);
        assert!(ext["spec"]["clusterIP"].is_null() && ext["spec"]["ipFamilies"].is_null());
        assert!(ServiceHooks.validate(&ext).is_empty(), "{:?}", ServiceHooks.validate(&ext));
    }
}
