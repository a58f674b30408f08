//! Objects every cluster has from the start (upstream's bootstrap controllers): the
//! default namespaces, the built-in priority classes, and the `kubernetes` service with
//! endpoints pointing at this API server.

use std::net::IpAddr;

use serde_json::{Value, json};

use crate::errors::ApiResult;
use crate::registry::Registry;
use crate::services::Services;

const NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

async fn ensure(
    registry: &Registry,
    group: &str,
    plural: &str,
    ns: Option<&str>,
    obj: Value,
) -> ApiResult<()> {
    let store = registry.find(group, "v1", plural).expect("bootstrap resources are registered");
    let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
    match store.get_fresh(ns, &name).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => match store.create(ns, obj, false).await {
            Ok(_) => Ok(()),
            Err(e) if e.reason == "AlreadyExists" => Ok(()),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    }
}

pub async fn run(registry: &Registry, services: &Services, advertise: IpAddr, port: u16) -> ApiResult<()> {
    for ns in NAMESPACES {
        ensure(
            registry,
            "",
            "namespaces",
            None,
            json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": ns } }),
        )
        .await?;
    }
    for (name, value, desc) in [
        (
            "system-node-critical",
            2_000_001_000,
            "Used for system critical pods that must not be moved from their current node.",
        ),
        (
            "system-cluster-critical",
            2_000_000_000,
            "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
        ),
    ] {
        let pc = json!({
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": { "name": name },
            "value": value,
            "globalDefault": false,
            "description": desc,
            "preemptionPolicy": "PreemptLowerPriority",
        });
        ensure(registry, "scheduling.k8s.io", "priorityclasses", None, pc).await?;
    }
    let svc = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": "kubernetes", "namespace": "default", "labels": { "component": "apiserver", "provider": "kubernetes" } },
        "spec": {
            "type": "ClusterIP",
            "clusterIP": services.cidr.first().to_string(),
            "ports": [{ "name": "https", "port": 443, "protocol": "TCP", "targetPort": port }],
            "sessionAffinity": "None",
        },
    });
    let store = registry.core("services");
    match store.get_fresh(Some("default"), "kubernetes").await {
        Ok(_) => {}
        Err(e) if e.is_not_found() => {
            services.create(&store, Some("default"), svc, false).await?;
        }
        Err(e) => return Err(e),
    }
    let eps = json!({
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": { "name": "kubernetes", "namespace": "default", "labels": { "endpointslice.kubernetes.io/skip-mirror": "true" } },
        "subsets": [{ "addresses": [{ "ip": advertise.to_string() }], "ports": [{ "name": "https", "port": port, "protocol": "TCP" }] }],
    });
    let endpoints = registry.core("endpoints");
    match endpoints.get_fresh(Some("default"), "kubernetes").await {
        Ok((old, _)) if old["subsets"] == eps["subsets"] => {}
        Ok(_) => {
            endpoints.update(Some("default"), "kubernetes", eps, None, false, None).await?;
        }
        Err(e) if e.is_not_found() => {
            endpoints.create(Some("default"), eps, false).await?;
        }
        Err(e) => return Err(e),
    }
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": { "name": "kubernetes", "namespace": "default", "labels": { "kubernetes.io/service-name": "kubernetes", "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io" } },
        "addressType": "IPv4",
        "endpoints": [{ "addresses": [advertise.to_string()], "conditions": { "ready": true } }],
        "ports": [{ "name": "https", "port": port, "protocol": "TCP" }],
    });
    ensure(registry, "discovery.k8s.io", "endpointslices", Some("default"), slice).await?;
    Ok(())
}
