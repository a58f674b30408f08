//! Namespace lifecycle: a deleted namespace turns `Terminating` and stays until its
//! finalizers are gone (the namespace controller empties it and clears `spec.finalizers`
//! through the `finalize` subresource); then it is deleted.

use serde_json::{Value, json};

use crate::errors::ApiResult;
use crate::registry::store::{DeleteOptions, Deleted, Store, now_rfc3339};

fn spec_finalizers(ns: &Value) -> Vec<Value> {
    ns["spec"]["finalizers"].as_array().cloned().unwrap_or_default()
}

fn meta_finalizers(ns: &Value) -> Vec<Value> {
    ns["metadata"]["finalizers"].as_array().cloned().unwrap_or_default()
}

pub async fn delete(store: &Store, name: &str, opts: &DeleteOptions) -> ApiResult<Deleted> {
    let mut admitted = false;
    for _ in 0..5 {
        let (mut ns, rev) = store.get_fresh(None, name).await?;
        if spec_finalizers(&ns).is_empty() && meta_finalizers(&ns).is_empty() {
            return store.delete(None, name, opts).await;
        }
        // A namespace with finalizers is only marked, not deleted through `Store::delete`:
        // admitted here (NamespaceLifecycle refuses deleting default, kube-system and
        // kube-public).
        if !admitted {
            let op = crate::admission::Operation::Delete;
            crate::admission::run(&store.res.info, op, None, None, name, None, Some(&ns), opts.dry_run)
                .await?;
            admitted = true;
        }
        if ns["metadata"]["deletionTimestamp"].is_null() {
            ns["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            ns["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        }
        ns["status"]["phase"] = json!("Terminating");
        if opts.dry_run {
            return Ok(Deleted::Pending(ns));
        }
        match store.write_update(None, name, ns, rev).await {
            Ok(v) => return Ok(Deleted::Pending(v)),
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e),
        }
    }
    Err(crate::errors::ApiError::stale("namespaces", "", name))
}

/// Replaces `spec.finalizers`; a terminating namespace with no finalizers left is deleted.
pub async fn finalize(store: &Store, name: &str, body: Value, dry_run: bool) -> ApiResult<Value> {
    for _ in 0..5 {
        let (mut ns, rev) = store.get_fresh(None, name).await?;
        ns["spec"]["finalizers"] = body["spec"]["finalizers"].clone();
        if ns["spec"]["finalizers"].is_null() {
            ns["spec"].as_object_mut().map(|s| s.remove("finalizers"));
        }
        if dry_run {
            return Ok(ns);
        }
        let done = !ns["metadata"]["deletionTimestamp"].is_null()
            && spec_finalizers(&ns).is_empty()
            && meta_finalizers(&ns).is_empty();
        let result = if done {
            store.etcd.delete(&format!("{}{name}", store.prefix), rev).await.map(|_| ns.clone())
        } else {
            match store.write_update(None, name, ns.clone(), rev).await {
                Ok(v) => return Ok(v),
                Err(e) if e.is_conflict() => continue,
                Err(e) => return Err(e),
            }
        };
        match result {
            Ok(v) => return Ok(v),
            Err(crate::storage::etcd3::StorageError::Conflict { .. }) => continue,
            Err(e) => return Err(crate::errors::ApiError::internal(e.to_string())),
        }
    }
    Err(crate::errors::ApiError::stale("namespaces", "", name))
}
