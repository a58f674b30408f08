//! A container's environment: `env` (value, fieldRef, resourceFieldRef, configMapKeyRef,
//! secretKeyRef), `envFrom`, service links, and `$(VAR)` expansion, as upstream's
//! `makeEnvironmentVariables`.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service,
};

use crate::kuberuntime::quantity_milli;

/// The API objects a pod refers to, fetched before its containers start. `None` marks an
/// object that does not exist.
#[derive(Debug, Default, Clone)]
pub struct PodObjects {
    pub configmaps: HashMap<String, Option<ConfigMap>>,
    pub secrets: HashMap<String, Option<Secret>>,
    /// Services visible to the pod for service links: its namespace's (when
    /// `enableServiceLinks`) and `default/kubernetes`.
    pub services: Vec<Service>,
    /// The pod's PersistentVolumeClaims by name, each with its bound volume (if bound).
    pub claims: HashMap<String, Option<(PersistentVolumeClaim, Option<PersistentVolume>)>>,
}

impl PodObjects {
    pub fn configmap_value(&self, name: &str, key: &str) -> Result<Option<String>, String> {
        match self.configmaps.get(name) {
            Some(Some(cm)) => Ok(cm.data.as_ref().and_then(|d| d.get(key).cloned()).or_else(|| {
                cm.binary_data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            })),
            _ => Err(format!("configmap \"{name}\" not found")),
        }
    }

    pub fn secret_value(&self, name: &str, key: &str) -> Result<Option<String>, String> {
        match self.secrets.get(name) {
            Some(Some(s)) => Ok(s
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                .or_else(|| s.string_data.as_ref().and_then(|d| d.get(key).cloned()))),
            _ => Err(format!("secret \"{name}\" not found")),
        }
    }
}

/// The node facts downward API references need.
#[derive(Debug, Clone, Default)]
pub struct NodeFacts {
    pub host_ip: String,
    pub allocatable_cpu_milli: i64,
    pub allocatable_memory: i64,
    pub allocatable_ephemeral: i64,
}

/// The value of a `fieldRef` path for this pod (shared with downwardAPI volumes).
pub fn field_ref(pod: &Pod, path: &str, pod_ips: &[String], host_ip: &str) -> Result<String, String> {
    let m = &pod.metadata;
    let spec = pod.spec.clone().unwrap_or_default();
    let map_key = |prefix: &str| -> Option<String> {
        path.strip_prefix(prefix)?.strip_prefix("['")?.strip_suffix("']").map(String::from)
    };
    if let Some(k) = map_key("metadata.labels") {
        return Ok(m.labels.as_ref().and_then(|l| l.get(&k)).cloned().unwrap_or_default());
    }
    if let Some(k) = map_key("metadata.annotations") {
        return Ok(m.annotations.as_ref().and_then(|l| l.get(&k)).cloned().unwrap_or_default());
    }
    Ok(match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(m.labels.as_ref()),
        "metadata.annotations" => format_map(m.annotations.as_ref()),
        "spec.nodeName" => spec.node_name.unwrap_or_default(),
        "spec.serviceAccountName" => spec.service_account_name.unwrap_or_default(),
        "status.hostIP" | "status.hostIPs" => host_ip.to_string(),
        "status.podIP" => pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => pod_ips.join(","),
        other => return Err(format!("unsupported fieldRef path {other:?}")),
    })
}

/// `key="value"` lines sorted by key: the downward API's format for labels and annotations.
pub fn format_map(m: Option<&BTreeMap<String, String>>) -> String {
    m.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}\n", serde_json::to_string(v).unwrap_or_default()))
        .collect::<String>()
        .trim_end()
        .to_string()
}

/// A `resourceFieldRef` value: the container's request or limit divided by `divisor`
/// (rounded up), limits defaulting to the node's allocatable, as upstream.
pub fn resource_field_ref(
    pod: &Pod,
    container: &str,
    resource: &str,
    divisor: Option<&str>,
    node: &NodeFacts,
) -> Result<String, String> {
    let c = crate::kuberuntime::all_containers(pod)
        .find(|c| c.name == container)
        .ok_or_else(|| format!("container {container:?} not found"))?;
    let res = c.resources.clone().unwrap_or_default();
    let (kind, name) =
        resource.split_once('.').ok_or_else(|| format!("unsupported resource {resource:?}"))?;
    let map = match kind {
        "limits" => res.limits.as_ref(),
        "requests" => res.requests.as_ref(),
        _ => return Err(format!("unsupported resource {resource:?}")),
    };
    let milli = quantity_milli(map, name).or_else(|| {
        (kind == "limits").then(|| match name {
            "cpu" => node.allocatable_cpu_milli,
            "memory" => node.allocatable_memory * 1000,
            "ephemeral-storage" => node.allocatable_ephemeral * 1000,
            _ => 0,
        })
    });
    let milli = milli.unwrap_or(0);
    let divisor = match divisor {
        Some(d) if !d.is_empty() => {
            component_base::quantity::parse_milli(d).ok_or_else(|| format!("invalid divisor {d:?}"))?
        }
        _ => 1000,
    };
    // A zero divisor is the API's unset value (clients serialise an empty Quantity as
    // "0"): upstream divides by 1 then.
    let divisor = if divisor == 0 { 1000 } else { divisor };
    if divisor < 0 {
        return Err(format!("invalid divisor for {resource}"));
    }
    Ok(((milli + divisor - 1) / divisor).to_string())
}

/// Service link variables for `services` (upstream's docker-links-compatible names).
fn service_envs(services: &[Service]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for svc in services {
        let spec = svc.spec.clone().unwrap_or_default();
        let Some(ip) = spec.cluster_ip.filter(|ip| !ip.is_empty() && ip != "None") else { continue };
        let name = svc.metadata.name.clone().unwrap_or_default().to_uppercase().replace('-', "_");
        let ports = spec.ports.unwrap_or_default();
        let Some(first) = ports.first() else { continue };
        out.push((format!("{name}_SERVICE_HOST"), ip.clone()));
        out.push((format!("{name}_SERVICE_PORT"), first.port.to_string()));
        for p in &ports {
            if let Some(pn) = p.name.as_ref().filter(|n| !n.is_empty()) {
                out.push((
                    format!("{name}_SERVICE_PORT_{}", pn.to_uppercase().replace('-', "_")),
                    p.port.to_string(),
                ));
            }
        }
        let proto =
            |p: &k8s_openapi::api::core::v1::ServicePort| p.protocol.clone().unwrap_or_else(|| "TCP".into());
        out.push((format!("{name}_PORT"), format!("{}://{ip}:{}", proto(first).to_lowercase(), first.port)));
        for p in &ports {
            let pr = proto(p);
            let prefix = format!("{name}_PORT_{}_{}", p.port, pr.to_uppercase());
            out.push((prefix.clone(), format!("{}://{ip}:{}", pr.to_lowercase(), p.port)));
            out.push((format!("{prefix}_PROTO"), pr.to_lowercase()));
            out.push((format!("{prefix}_PORT"), p.port.to_string()));
            out.push((format!("{prefix}_ADDR"), ip.clone()));
        }
    }
    out
}

/// The container's environment in upstream's order: service links, envFrom, env; later
/// entries override earlier ones. Errors are the container's CreateContainerConfigError
/// message.
pub fn container_envs(
    pod: &Pod,
    c: &Container,
    objects: &PodObjects,
    pod_ips: &[String],
    node: &NodeFacts,
) -> Result<Vec<(String, String)>, String> {
    let mut vars: Vec<(String, String)> = Vec::new();
    let set = |vars: &mut Vec<(String, String)>, k: String, v: String| {
        if let Some(e) = vars.iter_mut().find(|(name, _)| *name == k) {
            e.1 = v;
        } else {
            vars.push((k, v));
        }
    };
    for (k, v) in service_envs(&objects.services) {
        set(&mut vars, k, v);
    }
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            match objects.configmaps.get(&r.name) {
                Some(Some(cm)) => {
                    for (k, v) in cm.data.clone().unwrap_or_default() {
                        set(&mut vars, format!("{prefix}{k}"), v);
                    }
                }
                _ if r.optional == Some(true) => {}
                _ => return Err(format!("configmap \"{}\" not found", r.name)),
            }
        }
        if let Some(r) = &from.secret_ref {
            match objects.secrets.get(&r.name) {
                Some(Some(s)) => {
                    for (k, v) in s.data.clone().unwrap_or_default() {
                        set(&mut vars, format!("{prefix}{k}"), String::from_utf8_lossy(&v.0).into_owned());
                    }
                }
                _ if r.optional == Some(true) => {}
                _ => return Err(format!("secret \"{}\" not found", r.name)),
            }
        }
    }
    for e in c.env.iter().flatten() {
        let value = if let Some(src) = &e.value_from {
            if let Some(f) = &src.field_ref {
                field_ref(pod, &f.field_path, pod_ips, &node.host_ip)?
            } else if let Some(r) = &src.resource_field_ref {
                let container =
                    r.container_name.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| c.name.clone());
                resource_field_ref(
                    pod,
                    &container,
                    &r.resource,
                    r.divisor.as_ref().map(|d| d.0.as_str()),
                    node,
                )?
            } else if let Some(r) = &src.config_map_key_ref {
                match objects.configmap_value(&r.name, &r.key) {
                    Ok(Some(v)) => v,
                    _ if r.optional == Some(true) => continue,
                    Ok(None) => return Err(format!("couldn't find key {} in ConfigMap {}", r.key, r.name)),
                    Err(e) => return Err(e),
                }
            } else if let Some(r) = &src.secret_key_ref {
                match objects.secret_value(&r.name, &r.key) {
                    Ok(Some(v)) => v,
                    _ if r.optional == Some(true) => continue,
                    Ok(None) => return Err(format!("couldn't find key {} in Secret {}", r.key, r.name)),
                    Err(e) => return Err(e),
                }
            } else {
                String::new()
            }
        } else {
            expand(e.value.as_deref().unwrap_or_default(), &vars)
        };
        set(&mut vars, e.name.clone(), value);
    }
    Ok(vars)
}

/// Upstream's `$(VAR)` expansion: `$(NAME)` becomes NAME's value when defined, `$$` is a
/// literal `$`, anything else stays as written.
pub fn expand(input: &str, vars: &[(String, String)]) -> String {
    let mut out = String::with_capacity(input.len());
    let bytes = input.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            if bytes[i + 1] == b'$' {
                out.push('$');
                i += 2;
                continue;
            }
            if bytes[i + 1] == b'(' {
                if let Some(end) = input[i + 2..].find(')') {
                    let name = &input[i + 2..i + 2 + end];
                    if let Some((_, v)) = vars.iter().rev().find(|(k, _)| k == name) {
                        out.push_str(v);
                        i += end + 3;
                        continue;
                    }
                }
            }
        }
        let ch = input[i..].chars().next().unwrap_or('\u{fffd}');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Go clients send an unset divisor as "0" (the zero Quantity); the conformance spec
    /// "node allocatable (cpu) as default cpu limit" does. It means 1, as upstream.
    #[test]
    fn zero_divisor_means_one() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "250m", "memory": "32Mi"}}}]}
        }))
        .unwrap();
        let node =
            NodeFacts { allocatable_cpu_milli: 2000, allocatable_memory: 1 << 30, ..Default::default() };
        let get = |res: &str, d: Option<&str>| resource_field_ref(&pod, "c", res, d, &node);
        assert_eq!(get("limits.cpu", Some("0")).unwrap(), "2");
        assert_eq!(get("requests.cpu", Some("0")).unwrap(), "1");
        assert_eq!(get("requests.cpu", Some("1m")).unwrap(), "250");
        assert_eq!(get("requests.memory", Some("0")).unwrap(), (32u64 << 20).to_string());
        assert_eq!(get("limits.memory", None).unwrap(), (1u64 << 30).to_string());
        assert!(get("limits.cpu", Some("-1")).is_err());
    }

    #[test]
    fn envs_in_order_with_refs_and_expansion() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c",
                "resources": {"limits": {"memory": "64Mi"}},
                "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
                "env": [
                    {"name": "A", "value": "x"},
                    {"name": "B", "value": "$(A)-$(MISSING)-$$"},
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                    {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                    {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                    {"name": "O", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k", "optional": true}}}
                ]}]}
        }))
        .unwrap();
        let mut objects = PodObjects::default();
        objects
            .configmaps
            .insert("cm".into(), Some(serde_json::from_value(json!({"data": {"one": "1"}})).unwrap()));
        objects
            .secrets
            .insert("s".into(), Some(serde_json::from_value(json!({"data": {"k": "c2VjcmV0"}})).unwrap()));
        objects.services.push(
            serde_json::from_value(json!({"metadata": {"name": "kubernetes"}, "spec": {"clusterIP": "10.0.0.1", "ports": [{"name": "https", "port": 443}]}})).unwrap(),
        );
        let c = &pod.spec.as_ref().unwrap().containers[0];
        let env: HashMap<_, _> =
            container_envs(&pod, c, &objects, &["10.1.0.5".into()], &NodeFacts::default())
                .unwrap()
                .into_iter()
                .collect();
        assert_eq!(env["CM_one"], "1");
        assert_eq!(env["B"], "x-$(MISSING)-$");
        assert_eq!(env["POD"], "p");
        assert_eq!(env["APP"], "web");
        assert_eq!(env["IP"], "10.1.0.5");
        assert_eq!(env["MEM"], "64");
        assert_eq!(env["S"], "secret");
        assert!(!env.contains_key("O"));
        assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.0.0.1");
        assert_eq!(env["KUBERNETES_SERVICE_PORT"], "443");
        assert_eq!(env["KUBERNETES_PORT_443_TCP"], "tcp://10.0.0.1:443");

        objects.secrets.insert("s".into(), None);
        assert_eq!(
            container_envs(&pod, c, &objects, &[], &NodeFacts::default()).unwrap_err(),
            "secret \"s\" not found"
        );
    }
}
