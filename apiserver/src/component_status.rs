//! `componentstatuses` (core/v1, deprecated upstream but still served): the health of
//! etcd and of the scheduler and controller manager on this host, probed when asked
//! (upstream's `registry/core/componentstatus`). Nothing is stored; get and list only.
//!
//! As upstream: `etcd-0` is this server's storage (a read of the current revision), and
//! `scheduler` / `controller-manager` are `GET https://127.0.0.1:<port>/healthz` on their
//! default secure ports (10259, 10257) without verifying their certificates. A component
//! that cannot be reached is `Healthy: False` with the dial error as its message.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty, Limited};
use rustls::ClientConfig;
use serde_json::{Value, json};

use crate::errors::{ApiError, ApiResult};
use crate::proxy::{self, Location};
use crate::storage::etcd3::Etcd;

/// Upstream's `probeTimeOut`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);
/// The most of a healthz body kept as the message.
const MAX_BODY: usize = 10 * 1024;
/// Upstream's `ports.KubeControllerManagerPort` and the scheduler's default secure port.
const COMPONENTS: &[(&str, u16)] = &[("controller-manager", 10257), ("scheduler", 10259)];
const ETCD: &str = "etcd-0";

/// The names served, in list order (upstream sorts them).
fn names() -> Vec<&'static str> {
    let mut n: Vec<&str> = COMPONENTS.iter().map(|(n, _)| *n).chain([ETCD]).collect();
    n.sort_unstable();
    n
}

fn insecure_tls() -> Arc<ClientConfig> {
    static TLS: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    TLS.get_or_init(|| {
        component_base::tls::insecure_client_config(None, &[b"http/1.1"])
            .expect("a client configuration without certificates always builds")
    })
    .clone()
}

/// One component's condition: (healthy, message, error).
async fn probe(etcd: &Etcd, name: &str) -> (bool, String, String) {
    if name == ETCD {
        return match tokio::time::timeout(PROBE_TIMEOUT, etcd.current_revision()).await {
            Ok(Ok(_)) => (true, "ok".into(), String::new()),
            Ok(Err(e)) => (false, String::new(), e.to_string()),
            Err(_) => (false, String::new(), "etcd did not answer in time".into()),
        };
    }
    let port = COMPONENTS.iter().find(|(n, _)| *n == name).map(|(_, p)| *p).unwrap_or_default();
    let loc = Location {
        tls: Some(insecure_tls()),
        hosts: vec!["127.0.0.1".into()],
        port,
        path_and_query: "/healthz".into(),
        server_name: None,
    };
    let url = loc.url();
    let fetch = async {
        let (io, authority) = proxy::dial(&loc, PROBE_TIMEOUT).await?;
        let req = Request::get("/healthz")
            .header(http::header::HOST, authority)
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let resp = proxy::send(io, req).await?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_BODY).collect().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, String::from_utf8_lossy(&body.to_bytes()).into_owned()))
    };
    match tokio::time::timeout(PROBE_TIMEOUT, fetch).await {
        // Upstream's HTTP prober: 2xx and 3xx are success, with the body as message.
        Ok(Ok((status, body))) if status.as_u16() < 400 => (true, body, String::new()),
        Ok(Ok((status, _))) => {
            (false, format!("HTTP probe failed with statuscode: {}", status.as_u16()), String::new())
        }
        Ok(Err(e)) => (false, format!("Get \"{url}\": {e}"), String::new()),
        Err(_) => (false, format!("Get \"{url}\": context deadline exceeded"), String::new()),
    }
}

fn object(name: &str, (healthy, message, error): (bool, String, String)) -> Value {
    let mut condition = json!({ "type": "Healthy", "status": if healthy { "True" } else { "False" } });
    if !message.is_empty() {
        condition["message"] = json!(message);
    }
    if !error.is_empty() {
        condition["error"] = json!(error);
    }
    json!({
        "kind": "ComponentStatus",
        "apiVersion": "v1",
        "metadata": { "name": name, "creationTimestamp": null },
        "conditions": [condition],
    })
}

/// `GET /api/v1/componentstatuses/<name>`.
pub async fn get(etcd: &Etcd, name: &str) -> ApiResult<Value> {
    if !names().contains(&name) {
        // Upstream answers an unknown component with a plain 500.
        return Err(ApiError::new(500, "", format!("Component not found: {name}")));
    }
    Ok(object(name, probe(etcd, name).await))
}

/// `GET /api/v1/componentstatuses`: every component, probed at once. Label and field
/// selectors apply to the (label-less) objects by name, as upstream.
pub async fn list(etcd: &Etcd, name_filter: Option<&str>) -> Value {
    let names: Vec<&str> = names().into_iter().filter(|n| name_filter.is_none_or(|f| f == *n)).collect();
    let probes = futures::future::join_all(names.iter().map(|n| probe(etcd, n))).await;
    let items: Vec<Value> = names.iter().zip(probes).map(|(n, p)| object(n, p)).collect();
    json!({ "kind": "ComponentStatusList", "apiVersion": "v1", "metadata": {}, "items": items })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::etcd3::EtcdConfig;

    #[tokio::test]
    async fn unreachable_components_are_unhealthy() {
        let etcd =
            Etcd::connect(&EtcdConfig { servers: vec!["http://127.0.0.1:1".into()], ..Default::default() })
                .unwrap();
        let e = get(&etcd, "nope").await.unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (500, "Component not found: nope"));
        assert_eq!(names(), ["controller-manager", "etcd-0", "scheduler"]);
        let o = object("scheduler", (false, "Get \"x\": boom".into(), String::new()));
        assert_eq!(
            o["conditions"][0],
            json!({ "type": "Healthy", "status": "False", "message": "Get \"x\": boom" })
        );
    }
}
