//! NamespaceLifecycle (upstream's `plugin/namespace/lifecycle`): nothing is created in a
//! namespace that does not exist or is terminating, nothing is updated in one that does
//! not exist, and the namespaces every cluster relies on (`default`, `kube-system`,
//! `kube-public`) are never deleted.
//!
//! The watch cache may lag: a namespace missing from it is looked up in etcd before the
//! request is refused, and a namespace deleted in the last 30 seconds is always read from
//! etcd, so a create racing its namespace's deletion sees the deletion.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};

use super::Context;
use crate::admission::{Attributes, Operation, Plugin, forbidden, lookup};
use crate::errors::{ApiError, ApiResult};
use crate::registry::resource::ResourceInfo;
use crate::registry::store::Store;

/// Namespaces that may not be deleted.
const IMMORTAL: &[&str] = &["default", "kube-system", "kube-public"];
/// How long a deleted namespace is read from etcd rather than the cache.
const FORCE_LIVE_LOOKUP: Duration = Duration::from_secs(30);
/// How long a create waits for the cache to show a namespace it does not have yet.
const MISSING_NAMESPACE_WAIT: Duration = Duration::from_millis(50);

pub struct NamespaceLifecycle {
    namespaces: Arc<Store>,
    /// Namespaces deleted lately, with when.
    recently_deleted: Mutex<HashMap<String, Instant>>,
}

impl NamespaceLifecycle {
    pub fn new(ctx: &Context<'_>) -> Result<Self, String> {
        Ok(Self {
            namespaces: lookup::store(ctx.registry, "", "v1", "namespaces")?,
            recently_deleted: Mutex::new(HashMap::new()),
        })
    }

    fn deleted_lately(&self, ns: &str) -> bool {
        let mut map = self.recently_deleted.lock();
        map.retain(|_, at| at.elapsed() < FORCE_LIVE_LOOKUP);
        map.contains_key(ns)
    }

    async fn namespace(&self, ns: &str, create: bool) -> ApiResult<Option<Value>> {
        let mut found = cached(&self.namespaces, ns).await?;
        if found.is_none() && create {
            tokio::time::sleep(MISSING_NAMESPACE_WAIT).await;
            found = cached(&self.namespaces, ns).await?;
        }
        let active = found.as_ref().is_some_and(|n| phase(n) != "Terminating");
        if found.is_none() || (active && self.deleted_lately(ns)) {
            found = lookup::fresh(&self.namespaces, None, ns).await?;
        }
        Ok(found)
    }
}

/// The namespace as the watch cache holds it.
async fn cached(store: &Store, ns: &str) -> ApiResult<Option<Value>> {
    match store.get(None, ns, Some(0)).await {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

fn phase(ns: &Value) -> &str {
    ns["status"]["phase"].as_str().unwrap_or("Active")
}

/// The refusal of a create in a terminating namespace, with the cause controllers look for.
pub fn terminating(attrs: &Attributes<'_>, ns: &str) -> ApiError {
    let mut err = forbidden(
        attrs,
        format!("unable to create new content in namespace {ns} because it is being terminated"),
    );
    if let Some(d) = err.details.as_mut() {
        d["causes"] = json!([{
            "reason": "NamespaceTerminating",
            "message": format!("namespace {ns} is being terminated"),
            "field": "metadata.namespace",
        }]);
    }
    err
}

/// The same check for a create made outside the admission chain (the handlers' Service
/// create), where the object's name is not known yet.
pub async fn check_create(namespaces: &Store, resource: &ResourceInfo, ns: &str) -> ApiResult<()> {
    let mut found = cached(namespaces, ns).await?;
    if found.is_none() {
        found = lookup::fresh(namespaces, None, ns).await?;
    }
    match found {
        None => Err(ApiError::not_found("namespaces", "", ns)),
        Some(n) if phase(&n) == "Terminating" => {
            let what = crate::errors::qualified(resource.plural, resource.group);
            let mut err = ApiError::forbidden(format!(
                "{what} is forbidden: unable to create new content in namespace {ns} because it is being terminated"
            ));
            err.details = Some(json!({
                "kind": resource.plural,
                "causes": [{
                    "reason": "NamespaceTerminating",
                    "message": format!("namespace {ns} is being terminated"),
                    "field": "metadata.namespace",
                }],
            }));
            Err(err)
        }
        Some(_) => Ok(()),
    }
}

#[async_trait::async_trait]
impl Plugin for NamespaceLifecycle {
    fn name(&self) -> &'static str {
        "NamespaceLifecycle"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> ApiResult<()> {
        let is_namespace = attrs.is_resource("", "namespaces");
        if attrs.operation == Operation::Delete && is_namespace && IMMORTAL.contains(&attrs.name) {
            return Err(forbidden(attrs, "this namespace may not be deleted"));
        }
        if is_namespace {
            if attrs.operation == Operation::Delete {
                self.recently_deleted.lock().insert(attrs.name.to_string(), Instant::now());
            }
            return Ok(());
        }
        let Some(ns) = attrs.namespace.filter(|n| !n.is_empty()) else { return Ok(()) };
        if attrs.operation == Operation::Delete {
            return Ok(());
        }
        let create = attrs.operation == Operation::Create;
        match self.namespace(ns, create).await? {
            None => Err(ApiError::not_found("namespaces", "", ns)),
            Some(n) if create && phase(&n) == "Terminating" => Err(terminating(attrs, ns)),
            Some(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::plugins::tests::{attrs, namespaces_info, pods_info};

    #[test]
    fn immortal_and_terminating_messages() {
        let user = Default::default();
        let info = namespaces_info();
        let a = attrs(&info, Operation::Delete, "default", None, None, &user);
        let e = forbidden(&a, "this namespace may not be deleted");
        assert_eq!(e.code, 403);
        assert_eq!(e.message, "namespaces \"default\" is forbidden: this namespace may not be deleted");
        let pods = pods_info();
        let p = attrs(
            &pods,
            Operation::Create,
            "web",
            Some(json!({ "metadata": { "name": "web" } })),
            None,
            &user,
        );
        let e = terminating(&p, "gone");
        assert_eq!(
            e.message,
            "pods \"web\" is forbidden: unable to create new content in namespace gone because it is being terminated"
        );
        let d = e.details.unwrap();
        assert_eq!(d["kind"], "pods");
        assert_eq!(d["causes"][0]["reason"], "NamespaceTerminating");
        assert_eq!(d["causes"][0]["field"], "metadata.namespace");
    }
}
