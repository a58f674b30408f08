//! Pod-specific verbs: binding a pod to a node (`pods/binding`, what the scheduler posts).

use serde_json::{Value, json};

use crate::errors::{ApiError, ApiResult};
use crate::registry::store::{Store, now_rfc3339};

/// Assigns a pod to the node a Binding names and marks it scheduled, as upstream's
/// `BindingREST` does. A pod already bound (or being deleted) cannot be bound again.
pub async fn bind(store: &Store, ns: &str, name: &str, binding: &Value, dry_run: bool) -> ApiResult<()> {
    let target = &binding["target"];
    let node = target["name"].as_str().filter(|n| !n.is_empty()).ok_or_else(|| {
        ApiError::invalid("Binding", "", name, &[crate::errors::FieldError::required("target.name", "")])
    })?;
    if let Some(kind) = target["kind"].as_str()
        && !kind.is_empty()
        && kind != "Node"
    {
        return Err(ApiError::invalid(
            "Binding",
            "",
            name,
            &[crate::errors::FieldError::not_supported("target.kind", kind, &["Node"])],
        ));
    }
    // Admission sees a create of `pods/binding` (webhooks may match it), as upstream.
    let binding = &crate::admission::run(
        &store.res.info,
        crate::admission::Operation::Create,
        Some("binding"),
        Some(ns),
        name,
        Some(binding.clone()),
        None,
        dry_run,
    )
    .await?
    .unwrap_or_else(|| binding.clone());
    for _ in 0..5 {
        let (mut pod, rev) = store.get_fresh(Some(ns), name).await?;
        if !pod["metadata"]["deletionTimestamp"].is_null() {
            return Err(ApiError::conflict(
                "pods",
                "",
                name,
                "pod is being deleted, cannot be assigned to a host",
            ));
        }
        if let Some(current) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
            return Err(ApiError::conflict(
                "pods",
                "",
                name,
                &format!("pod {name} is already assigned to node \"{current}\""),
            ));
        }
        if let Some(uid) = binding["metadata"]["uid"].as_str().filter(|u| !u.is_empty())
            && pod["metadata"]["uid"].as_str() != Some(uid)
        {
            return Err(ApiError::conflict(
                "pods",
                "",
                name,
                "Precondition failed: UID in precondition does not match",
            ));
        }
        pod["spec"]["nodeName"] = json!(node);
        if let Some(ann) = binding["metadata"]["annotations"].as_object() {
            for (k, v) in ann {
                pod["metadata"]["annotations"][k] = v.clone();
            }
        }
        set_condition(&mut pod, "PodScheduled", "True");
        if dry_run {
            return Ok(());
        }
        match store.write_update(Some(ns), name, pod, rev).await {
            Err(e) if e.is_conflict() => continue,
            other => return other.map(|_| ()),
        }
    }
    Err(ApiError::stale("pods", "", name))
}

/// Sets (or adds) a pod condition, updating its transition time when the status changes.
pub fn set_condition(pod: &mut Value, kind: &str, status: &str) {
    if !pod["status"]["conditions"].is_array() {
        pod["status"]["conditions"] = json!([]);
    }
    let conds = pod["status"]["conditions"].as_array_mut().expect("made an array");
    let now = now_rfc3339();
    match conds.iter_mut().find(|c| c["type"] == kind) {
        Some(c) => {
            if c["status"] != status {
                c["lastTransitionTime"] = json!(now);
            }
            c["status"] = json!(status);
        }
        None => conds.push(
            json!({ "type": kind, "status": status, "lastProbeTime": null, "lastTransitionTime": now }),
        ),
    }
}
