//! How plugins read the objects they decide by (upstream's informer listers with a live
//! lookup on a miss): the watch cache, at whatever version it holds, and etcd when the
//! cache does not have the object yet (it may lag a write made a moment ago).

use std::sync::Arc;

use serde_json::Value;

use crate::cacher::Filter;
use crate::errors::{ApiError, ApiResult};
use crate::registry::Registry;
use crate::registry::store::{ListOptions, Store};

/// The store of `group`/`version`/`plural`, which a plugin needs to exist.
pub fn store(registry: &Registry, group: &str, version: &str, plural: &str) -> Result<Arc<Store>, String> {
    registry.find(group, version, plural).ok_or_else(|| {
        format!("admission: the server does not serve {}", crate::errors::qualified(plural, group))
    })
}

/// An object from the cache, else from etcd; None when it does not exist.
pub async fn get(store: &Store, ns: Option<&str>, name: &str) -> ApiResult<Option<Value>> {
    match store.get(ns, name, Some(0)).await {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_not_found() => fresh(store, ns, name).await,
        Err(e) => Err(e),
    }
}

/// An object read from etcd; None when it does not exist.
pub async fn fresh(store: &Store, ns: Option<&str>, name: &str) -> ApiResult<Option<Value>> {
    match store.get_fresh(ns, name).await {
        Ok((v, _)) => Ok(Some(v)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The objects of a namespace (all objects for None) as the cache holds them.
pub async fn list(store: &Store, ns: Option<&str>) -> ApiResult<Vec<Value>> {
    let opts = ListOptions {
        filter: Filter { namespace: ns.map(str::to_string), ..Default::default() },
        rv: Some(0),
        ..Default::default()
    };
    let mut list = store.list(&opts).await?;
    match list.get_mut("items").map(Value::take) {
        Some(Value::Array(items)) => Ok(items),
        _ => Err(ApiError::internal("a list without items")),
    }
}

/// `metadata.creationTimestamp` as sortable text (RFC 3339 in UTC sorts by time).
pub fn created(obj: &Value) -> &str {
    obj["metadata"]["creationTimestamp"].as_str().unwrap_or_default()
}

/// `metadata.name`.
pub fn name(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or_default()
}
