//! The aggregation layer (upstream's kube-aggregator, which upstream runs in front of the
//! built-in server in the same process):
//!
//! - [`autoregister`]: an APIService for every group version this server serves, built-in
//!   (`kube-aggregator.kubernetes.io/automanaged: onstart`, written once at start) and
//!   from CustomResourceDefinitions (`automanaged: true`, kept in step with the CRDs).
//! - [`available`]: each APIService's `Available` condition, and the proxy's table.
//! - [`proxy`]: requests for a service-backed group version sent on to its extension API
//!   server; [`crate::discovery`] merges those servers' groups into its documents.
//!
//! Not here (issue 21): OpenAPI aggregation (the extension servers' `/openapi/v2` and
//! `/openapi/v3` are not merged into ours).

pub mod autoregister;
pub mod available;
pub mod proxy;

use std::sync::Arc;
use std::time::Duration;

use crate::cacher::{EventType, Filter};
use crate::registry::Registry;
use crate::registry::store::Store;

pub const GROUP: &str = "apiregistration.k8s.io";

/// How often everything is looked at again without a change to an APIService (CRDs,
/// Services and endpoints change without telling this controller).
const RESYNC: Duration = Duration::from_secs(2);

/// The APIServices' store.
pub fn api_services(registry: &Registry) -> Arc<Store> {
    registry.find(GROUP, "v1", "apiservices").expect("APIServices are a built-in resource")
}

/// Runs the controllers for ever.
pub async fn run(registry: Arc<Registry>, aggregator: Arc<proxy::Aggregator>) {
    let store = api_services(&registry);
    if store.watch_cache && !store.cacher.wait_ready(Duration::from_secs(120)).await {
        tracing::warn!("the APIService watch cache did not list in 120s");
    }
    let mut autoregister = autoregister::AutoRegister::default();
    loop {
        let watch = if store.watch_cache {
            store.cacher.watch(Filter::default(), None, false, false).ok()
        } else {
            None
        };
        let (mut events, id) = match watch {
            Some((events, id)) => (Some(events), Some(id)),
            None => (None, None),
        };
        loop {
            if let Err(e) = autoregister.sync(&registry, &store).await {
                tracing::warn!("registering APIServices: {}", e.message);
            }
            if let Err(e) = available::sync(&registry, &store, &aggregator).await {
                tracing::warn!("checking APIServices' availability: {}", e.message);
            }
            let Some(ev) = events.as_mut() else {
                tokio::time::sleep(RESYNC).await;
                continue;
            };
            match tokio::time::timeout(RESYNC, ev.recv()).await {
                Ok(Some(e)) if e.kind == EventType::Error => break,
                Ok(Some(_)) | Err(_) => {}
                Ok(None) => break,
            }
        }
        if let Some(id) = id {
            store.cacher.stop_watch(id);
        }
    }
}
