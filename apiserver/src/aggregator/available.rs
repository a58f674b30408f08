//! Upstream's APIService availability controller: the `Available` condition of every
//! APIService. A local one is always available. A service-backed one is checked as
//! upstream checks it (the Service exists, listens on the port, has endpoints with an
//! address for that port), in upstream's reasons and words; one that passes is still
//! `False` with `ProxyNotImplemented`, because this server does not proxy to extension
//! API servers yet (issue 21), where upstream would go on to a discovery check.

use serde_json::{Value, json};

use crate::errors::ApiResult;
use crate::registry::Registry;
use crate::registry::store::{Store, now_rfc3339};

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

pub async fn sync(registry: &Registry, store: &Store) -> ApiResult<()> {
    let list = store.list(&Default::default()).await?;
    for item in list["items"].as_array().into_iter().flatten() {
        let want = check(registry, item).await?;
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

/// What the APIService's `Available` condition should say.
pub async fn check(registry: &Registry, api_service: &Value) -> ApiResult<Availability> {
    let spec = &api_service["spec"];
    let svc_ref = &spec["service"];
    if !svc_ref.is_object() {
        return Ok(Availability {
            status: "True",
            reason: "Local",
            message: "Local APIServices are always available".into(),
        });
    }
    let ns = svc_ref["namespace"].as_str().unwrap_or_default();
    let name = svc_ref["name"].as_str().unwrap_or_default();
    let port = svc_ref["port"].as_i64().unwrap_or(443);
    let service = match registry.core("services").get(Some(ns), name, Some(0)).await {
        Ok(s) => s,
        Err(e) if e.is_not_found() => {
            return Ok(unavailable("ServiceNotFound", format!("service/{name} in {ns:?} is not present")));
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
            return Ok(unavailable(
                "ServicePortError",
                format!("service/{name} in {ns:?} is not listening on port {port}"),
            ));
        };
        let port_name = service_port["name"].as_str().unwrap_or_default();
        let endpoints = match registry.core("endpoints").get(Some(ns), name, Some(0)).await {
            Ok(e) => e,
            Err(e) if e.is_not_found() => {
                return Ok(unavailable(
                    "EndpointsNotFound",
                    format!("cannot find endpoints for service/{name} in {ns:?}"),
                ));
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
            return Ok(unavailable(
                "MissingEndpoints",
                format!(
                    "endpoints for service/{name} in {ns:?} have no addresses with port name {port_name:?}"
                ),
            ));
        }
    }
    let gv = format!(
        "{}/{}",
        spec["group"].as_str().unwrap_or_default(),
        spec["version"].as_str().unwrap_or_default()
    );
    Ok(unavailable(
        "ProxyNotImplemented",
        format!("this kube-apiserver does not proxy to extension API servers yet; {gv} is not served"),
    ))
}
