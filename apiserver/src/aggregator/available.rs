//! Upstream's APIService availability controller: the `Available` condition of every
//! APIService, in upstream's reasons and words. A local one is always available. A
//! service-backed one is checked as upstream checks it: the Service exists and listens on
//! the port, its endpoints have an address for that port, and the extension server
//! answers `GET /apis/<group>/<version>` with 2xx within 5 s. What the pass finds is also
//! the proxy's table ([`super::proxy::Aggregator`]): whether requests are sent on, and the
//! discovery document aggregated discovery shows.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine;
use serde_json::{Value, json};

use crate::errors::ApiResult;
use crate::registry::Registry;
use crate::registry::store::{Store, now_rfc3339};

use super::proxy::{Aggregator, Backend};

/// An `Available` condition's status, reason and message.
#[derive(Debug, PartialEq)]
pub struct Availability {
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

fn unavailable(reason: &'static str, message: String) -> Availability {
    Availability { status: "False", reason, message }
}

pub async fn sync(registry: &Registry, store: &Store, aggregator: &Aggregator) -> ApiResult<()> {
    let list = store.list(&Default::default()).await?;
    let mut backends = HashMap::new();
    for item in list["items"].as_array().into_iter().flatten() {
        let (want, backend) = check(registry, aggregator, item).await?;
        if let Some(b) = backend {
            backends.insert((b.group.clone(), b.version.clone()), Arc::new(b));
        }
        let current = condition(item);
        if current.is_some_and(|c| {
            c["status"] == want.status && c["reason"] == want.reason && c["message"] == want.message.as_str()
        }) {
            continue;
        }
        let name = item["metadata"]["name"].as_str().unwrap_or_default();
        let result = store
            .guaranteed_update(None, name, Some("status"), false, |old| {
                let mut new = old.clone();
                set_condition(&mut new, &want);
                Ok(new)
            })
            .await;
        match result {
            Ok(_) => {}
            // Deleted meanwhile: nothing to report.
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    aggregator.set_backends(backends);
    Ok(())
}

fn condition(obj: &Value) -> Option<&Value> {
    obj["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Available")
}

/// Sets the `Available` condition, its transition time moving only when the status does.
fn set_condition(obj: &mut Value, want: &Availability) {
    let since = match condition(obj) {
        Some(c) if c["status"] == want.status => c["lastTransitionTime"].clone(),
        _ => json!(now_rfc3339()),
    };
    let cond = json!({
        "type": "Available",
        "status": want.status,
        "lastTransitionTime": since,
        "reason": want.reason,
        "message": want.message,
    });
    if !obj["status"]["conditions"].is_array() {
        obj["status"]["conditions"] = json!([]);
    }
    let conditions = obj["status"]["conditions"].as_array_mut().expect("set above");
    match conditions.iter_mut().find(|c| c["type"] == "Available") {
        Some(c) => *c = cond,
        None => conditions.push(cond),
    }
}

/// What the APIService's `Available` condition should say, and for a service-backed one
/// how it is reached.
pub async fn check(
    registry: &Registry,
    aggregator: &Aggregator,
    api_service: &Value,
) -> ApiResult<(Availability, Option<Backend>)> {
    let spec = &api_service["spec"];
    let svc_ref = &spec["service"];
    if !svc_ref.is_object() {
        let local = Availability {
            status: "True",
            reason: "Local",
            message: "Local APIServices are always available".into(),
        };
        return Ok((local, None));
    }
    let ns = svc_ref["namespace"].as_str().unwrap_or_default();
    let name = svc_ref["name"].as_str().unwrap_or_default();
    let port = svc_ref["port"].as_i64().unwrap_or(443);
    let ca_bundle = spec["caBundle"]
        .as_str()
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .unwrap_or_default();
    let insecure = spec["insecureSkipTLSVerify"].as_bool().unwrap_or(false);
    let tls = match aggregator.tls(&ca_bundle, insecure) {
        Ok(t) => t,
        Err(e) => return Ok((unavailable("FailedDiscoveryCheck", e), None)),
    };
    let mut backend = Backend {
        api_service: api_service["metadata"]["name"].as_str().unwrap_or_default().to_string(),
        group: spec["group"].as_str().unwrap_or_default().to_string(),
        version: spec["version"].as_str().unwrap_or_default().to_string(),
        namespace: ns.to_string(),
        service: name.to_string(),
        port: u16::try_from(port).unwrap_or(443),
        tls,
        group_priority_minimum: spec["groupPriorityMinimum"].as_i64().unwrap_or(0),
        version_priority: spec["versionPriority"].as_i64().unwrap_or(0),
        available: false,
        resources: None,
    };
    let service = match registry.core("services").get(Some(ns), name, Some(0)).await {
        Ok(s) => s,
        Err(e) if e.is_not_found() => {
            let why = unavailable("ServiceNotFound", format!("service/{name} in {ns:?} is not present"));
            return Ok((why, Some(backend)));
        }
        Err(e) => return Err(e),
    };
    let is_external = service["spec"]["type"] == "ExternalName";
    if !is_external {
        let Some(service_port) = service["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["port"].as_i64() == Some(port))
        else {
            let why = unavailable(
                "ServicePortError",
                format!("service/{name} in {ns:?} is not listening on port {port}"),
            );
            return Ok((why, Some(backend)));
        };
        let port_name = service_port["name"].as_str().unwrap_or_default();
        let endpoints = match registry.core("endpoints").get(Some(ns), name, Some(0)).await {
            Ok(e) => e,
            Err(e) if e.is_not_found() => {
                let why = unavailable(
                    "EndpointsNotFound",
                    format!("cannot find endpoints for service/{name} in {ns:?}"),
                );
                return Ok((why, Some(backend)));
            }
            Err(e) => return Err(e),
        };
        let ready = endpoints["subsets"].as_array().into_iter().flatten().any(|subset| {
            subset["addresses"].as_array().is_some_and(|a| !a.is_empty())
                && subset["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|p| p["name"].as_str().unwrap_or_default() == port_name)
        });
        if !ready {
            let why = unavailable(
                "MissingEndpoints",
                format!(
                    "endpoints for service/{name} in {ns:?} have no addresses with port name {port_name:?}"
                ),
            );
            return Ok((why, Some(backend)));
        }
    }
    match aggregator.discover(&backend).await {
        Ok(doc) => {
            backend.available = true;
            backend.resources = Some(doc);
            let passed =
                Availability { status: "True", reason: "Passed", message: "all checks passed".into() };
            Ok((passed, Some(backend)))
        }
        Err(message) => Ok((unavailable("FailedDiscoveryCheck", message), Some(backend))),
    }
}
