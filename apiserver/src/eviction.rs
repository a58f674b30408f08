//! `pods/eviction` (upstream's `EvictionREST`): deletes a pod only if its
//! PodDisruptionBudget allows one more disruption, taking that disruption from the budget
//! (`disruptionsAllowed - 1` and the pod in `disruptedPods`) in one write guarded by the
//! budget's resourceVersion, so two concurrent evictions never both spend the last one.
//! A spent budget answers 429 `TooManyRequests`, which `kubectl drain` retries. Pods that
//! already finished (or are pending, or being deleted) are deleted without a budget check;
//! unready pods follow the budget's `unhealthyPodEvictionPolicy`. Both policy/v1 and
//! policy/v1beta1 Eviction bodies are accepted, as upstream.

use component_base::labels::{Labels, Selector};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};

use crate::admission::Operation;
use crate::errors::{ApiError, ApiResult};
use crate::registry::Registry;
use crate::registry::store::{DeleteOptions, Store, now_rfc3339};

/// Upstream's `MaxDisruptedPodSize`: more evictions than this not yet confirmed by the
/// disruption controller and the budget refuses further ones.
const MAX_DISRUPTED_POD_SIZE: usize = 2000;
/// Upstream's `EvictionsRetry`: conflicts on the budget are retried this often.
const CONFLICT_RETRIES: usize = 20;
const TOO_MANY_MESSAGE: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// The 429 a spent (or not yet processed) budget gets, with the `DisruptionBudget` cause.
fn too_many_requests(retry_after: u64, cause: String) -> ApiError {
    let mut e = ApiError::new(429, "TooManyRequests", TOO_MANY_MESSAGE);
    let mut details = json!({ "causes": [{ "reason": "DisruptionBudget", "message": cause }] });
    if retry_after > 0 {
        details["retryAfterSeconds"] = json!(retry_after);
        e.retry_after = Some(retry_after);
    }
    e.details = Some(details);
    e
}

fn still_processing(pdb: &str) -> ApiError {
    too_many_requests(10, format!("The disruption budget {pdb} is still being processed by the server."))
}

fn pdb_forbidden(name: &str, why: &str) -> ApiError {
    let mut e = ApiError::forbidden(format!("poddisruptionbudget.policy \"{name}\" is forbidden: {why}"));
    e.details = Some(json!({ "name": name, "group": "policy", "kind": "poddisruptionbudget" }));
    e
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// A pod that finished, never started or is already going: evicting it disrupts nothing.
fn can_ignore_pdb(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed" | "Pending")
        || !pod["metadata"]["deletionTimestamp"].is_null()
}

/// Whether the delete must be pinned to the pod's resourceVersion (it might become ready
/// meanwhile and start counting for a budget).
fn should_enforce_resource_version(pod: &Value) -> bool {
    !matches!(phase(pod), "Succeeded" | "Failed") && pod["metadata"]["deletionTimestamp"].is_null()
}

/// The delete options of an Eviction: its `deleteOptions`, with the request's dry run
/// (the two must agree when both are given).
fn delete_options(eviction: &Value, query_dry_run: bool) -> ApiResult<DeleteOptions> {
    let d = &eviction["deleteOptions"];
    let body_dry: Vec<String> = d["dryRun"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str().map(String::from)).collect())
        .unwrap_or_default();
    let query: Vec<String> = if query_dry_run { vec!["All".into()] } else { Vec::new() };
    if !body_dry.is_empty() && !query.is_empty() && body_dry != query {
        return Err(ApiError::bad_request(format!(
            "Non-matching dry-run options in request and content: {query:?} and {body_dry:?}"
        )));
    }
    for v in &body_dry {
        if v != "All" {
            return Err(ApiError::bad_request(format!("Invalid dry run value: {v:?}")));
        }
    }
    let propagation = d["propagationPolicy"]
        .as_str()
        .map(str::to_string)
        .or_else(|| d["orphanDependents"].as_bool().filter(|o| *o).map(|_| "Orphan".to_string()));
    if let Some(p) = &propagation
        && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
    {
        return Err(ApiError::bad_request(format!(
            "propagationPolicy {p} is not supported: use Orphan, Background or Foreground"
        )));
    }
    Ok(DeleteOptions {
        grace_period: d["gracePeriodSeconds"].as_i64(),
        propagation,
        orphan_dependents: d["orphanDependents"].as_bool(),
        precondition_uid: d["preconditions"]["uid"].as_str().map(str::to_string),
        precondition_rv: d["preconditions"]["resourceVersion"].as_str().map(str::to_string),
        dry_run: query_dry_run || !body_dry.is_empty(),
    })
}

/// Evicts pod `ns/name` as the `eviction` body asks; answers the Status to return (201).
pub async fn evict(
    registry: &Registry,
    pods: &Store,
    ns: &str,
    name: &str,
    eviction: &Value,
    query_dry_run: bool,
) -> ApiResult<Value> {
    match eviction["apiVersion"].as_str() {
        None | Some("policy/v1" | "policy/v1beta1") => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unsupported Eviction apiVersion {other:?}: expected policy/v1 or policy/v1beta1"
            )));
        }
    }
    if let Some(kind) = eviction["kind"].as_str()
        && kind != "Eviction"
    {
        return Err(ApiError::bad_request(format!("not a Eviction object: {kind}")));
    }
    if eviction["metadata"]["name"].as_str().unwrap_or_default() != name {
        return Err(ApiError::bad_request("name in URL does not match name in Eviction object"));
    }
    let opts = delete_options(eviction, query_dry_run)?;
    // Validating admission sees the Eviction (NodeRestriction limits nodes to their pods).
    crate::admission::run(
        &pods.res.info,
        Operation::Create,
        Some("eviction"),
        Some(ns),
        name,
        Some(eviction.clone()),
        None,
        opts.dry_run,
    )
    .await?;

    // Pods that can be deleted without a budget: retried on conflicts unless the client
    // pinned a resourceVersion itself.
    let mut pod = Value::Null;
    let mut deleted = false;
    for attempt in 0..CONFLICT_RETRIES {
        pod = pods.get(Some(ns), name, None).await?;
        if !can_ignore_pdb(&pod) {
            break;
        }
        let mut o = opts.clone();
        if should_enforce_resource_version(&pod) && o.precondition_rv.is_none() {
            o.precondition_rv = pod["metadata"]["resourceVersion"].as_str().map(str::to_string);
        }
        match add_condition_and_delete(pods, ns, name, o).await {
            Err(e) if e.is_conflict() && opts.precondition_rv.is_none() && attempt + 1 < CONFLICT_RETRIES => {
                continue;
            }
            Err(e) => return Err(e),
            Ok(()) => {
                deleted = true;
                break;
            }
        }
    }
    if deleted {
        return Ok(success());
    }

    let pdb_store = registry
        .find("policy", "v1", "poddisruptionbudgets")
        .ok_or_else(|| ApiError::internal("PodDisruptionBudgets are not served"))?;
    let pdbs = matching_pdbs(&pdb_store, ns, &pod).await?;
    if pdbs.len() > 1 {
        let mut e = ApiError::new(
            500,
            "",
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        );
        e.details = None;
        return Err(e);
    }
    let mut pin_to_pod_version = false;
    let mut pdb_name = String::new();
    if let Some(pdb) = pdbs.into_iter().next() {
        pdb_name = pdb["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let status = &pdb["status"];
        let (healthy, desired) =
            (status["currentHealthy"].as_i64().unwrap_or(0), status["desiredHealthy"].as_i64().unwrap_or(0));
        let unhealthy_ok = !is_ready(&pod)
            && (pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
                || (healthy >= desired && desired > 0));
        if unhealthy_ok {
            // An unready pod does not count as healthy: deleting it spends nothing, as
            // long as it does not become ready first (pinned to its resourceVersion).
            pin_to_pod_version = true;
        } else {
            check_and_decrement(&pdb_store, ns, &pdb_name, name, opts.dry_run).await?;
        }
    }
    let mut o = opts.clone();
    if pin_to_pod_version {
        o.precondition_rv = pod["metadata"]["resourceVersion"].as_str().map(str::to_string);
    }
    match add_condition_and_delete(pods, ns, name, o).await {
        Err(e) if e.is_conflict() && pin_to_pod_version && opts.precondition_rv.is_none() => {
            Err(still_processing(&pdb_name))
        }
        Err(e) => Err(e),
        Ok(()) => Ok(success()),
    }
}

fn success() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}

/// The budgets of the pod's namespace whose selector matches it; as upstream's eviction,
/// an empty or missing selector matches nothing here.
async fn matching_pdbs(store: &Store, ns: &str, pod: &Value) -> ApiResult<Vec<Value>> {
    let list = store
        .list(&crate::registry::store::ListOptions {
            filter: crate::cacher::Filter { namespace: Some(ns.to_string()), ..Default::default() },
            ..Default::default()
        })
        .await?;
    let labels: Labels = serde_json::from_value(pod["metadata"]["labels"].clone()).unwrap_or_default();
    let mut out = Vec::new();
    for pdb in list["items"].as_array().cloned().unwrap_or_default() {
        let Ok(sel) = serde_json::from_value::<Option<LabelSelector>>(pdb["spec"]["selector"].clone()) else {
            continue;
        };
        let selector = Selector::from_label_selector(sel.as_ref());
        if selector.is_empty() || !selector.matches(&labels) {
            continue;
        }
        out.push(pdb);
    }
    Ok(out)
}

/// Takes one disruption from the budget, retrying on conflicts with a fresh read.
async fn check_and_decrement(
    store: &Store,
    ns: &str,
    pdb_name: &str,
    pod_name: &str,
    dry_run: bool,
) -> ApiResult<()> {
    for _ in 0..CONFLICT_RETRIES {
        let (pdb, rev) = store.get_fresh(Some(ns), pdb_name).await?;
        let status = &pdb["status"];
        let observed = status["observedGeneration"].as_i64().unwrap_or(0);
        if observed < pdb["metadata"]["generation"].as_i64().unwrap_or(0) {
            return Err(still_processing(pdb_name));
        }
        let allowed = status["disruptionsAllowed"].as_i64().unwrap_or(0);
        if allowed < 0 {
            return Err(pdb_forbidden(pdb_name, "pdb disruptions allowed is negative"));
        }
        if status["disruptedPods"].as_object().map_or(0, |m| m.len()) > MAX_DISRUPTED_POD_SIZE {
            return Err(pdb_forbidden(
                pdb_name,
                "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
            ));
        }
        if allowed == 0 {
            return Err(too_many_requests(
                0,
                format!(
                    "The disruption budget {pdb_name} needs {} healthy pods and has {} currently",
                    status["desiredHealthy"].as_i64().unwrap_or(0),
                    status["currentHealthy"].as_i64().unwrap_or(0)
                ),
            ));
        }
        if dry_run {
            return Ok(());
        }
        let mut new = pdb.clone();
        new["status"]["disruptionsAllowed"] = json!(allowed - 1);
        if allowed - 1 == 0 {
            set_insufficient_pods(&mut new);
        }
        if !new["status"]["disruptedPods"].is_object() {
            new["status"]["disruptedPods"] = json!({});
        }
        // The controller does not count this pod healthy while it is being deleted.
        new["status"]["disruptedPods"][pod_name] = json!(now_rfc3339());
        let new = store.prepare_update(new, &pdb, Some("status"))?;
        match store.write_update(Some(ns), pdb_name, new, rev).await {
            Err(e) if e.is_conflict() => continue,
            other => return other.map(|_| ()),
        }
    }
    Err(ApiError::timeout(format!("couldn't update PodDisruptionBudget {pdb_name:?} due to conflicts")))
}

/// `DisruptionAllowed=False/InsufficientPods`, as the disruption controller would set it.
fn set_insufficient_pods(pdb: &mut Value) {
    let generation = pdb["status"]["observedGeneration"].clone();
    if !pdb["status"]["conditions"].is_array() {
        pdb["status"]["conditions"] = json!([]);
    }
    let conds = pdb["status"]["conditions"].as_array_mut().expect("made an array");
    let now = now_rfc3339();
    match conds.iter_mut().find(|c| c["type"] == "DisruptionAllowed") {
        Some(c) => {
            if c["status"] != "False" {
                c["status"] = json!("False");
                c["lastTransitionTime"] = json!(now);
            }
            c["reason"] = json!("InsufficientPods");
            c["message"] = json!("");
            c["observedGeneration"] = generation;
        }
        None => conds.push(json!({
            "type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods", "message": "",
            "observedGeneration": generation, "lastTransitionTime": now,
        })),
    }
}

/// Marks the pod `DisruptionTarget` (reason `EvictionByEvictionAPI`) through its status,
/// then deletes it with `opts`. A resourceVersion precondition is checked against the pod
/// before the status write and moved to the version that write made.
async fn add_condition_and_delete(
    pods: &Store,
    ns: &str,
    name: &str,
    mut opts: DeleteOptions,
) -> ApiResult<()> {
    if !opts.dry_run {
        let mut done = false;
        for _ in 0..CONFLICT_RETRIES {
            let (old, rev) = pods.get_fresh(Some(ns), name).await?;
            if let Some(uid) = &opts.precondition_uid
                && old["metadata"]["uid"].as_str() != Some(uid.as_str())
            {
                return Err(ApiError::conflict(
                    "pods",
                    "",
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        old["metadata"]["uid"].as_str().unwrap_or_default()
                    ),
                ));
            }
            if let Some(want) = &opts.precondition_rv
                && want.parse::<i64>().ok() != Some(rev)
            {
                return Err(ApiError::conflict(
                    "pods",
                    "",
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {rev}"
                    ),
                ));
            }
            let mut new = old.clone();
            set_disruption_target(&mut new);
            if new == old {
                done = true;
                break;
            }
            let new = pods.prepare_update(new, &old, Some("status"))?;
            match pods.write_update(Some(ns), name, new, rev).await {
                Err(e) if e.is_conflict() => continue,
                Err(e) => return Err(e),
                Ok(written) => {
                    if opts.precondition_rv.is_some() {
                        opts.precondition_rv =
                            written["metadata"]["resourceVersion"].as_str().map(str::to_string);
                    }
                    done = true;
                    break;
                }
            }
        }
        if !done {
            return Err(ApiError::stale("pods", "", name));
        }
    }
    pods.delete(Some(ns), name, &opts).await.map(|_| ())
}

fn set_disruption_target(pod: &mut Value) {
    if !pod["status"]["conditions"].is_array() {
        pod["status"]["conditions"] = json!([]);
    }
    let conds = pod["status"]["conditions"].as_array_mut().expect("made an array");
    let wanted = json!({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting"});
    match conds.iter_mut().find(|c| c["type"] == "DisruptionTarget") {
        Some(c) => {
            if c["status"] != "True" {
                c["lastTransitionTime"] = json!(now_rfc3339());
            }
            c["status"] = wanted["status"].clone();
            c["reason"] = wanted["reason"].clone();
            c["message"] = wanted["message"].clone();
        }
        None => {
            let mut c = wanted;
            c["lastProbeTime"] = Value::Null;
            c["lastTransitionTime"] = json!(now_rfc3339());
            conds.push(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spent_budget_is_a_429_with_the_cause() {
        let e =
            too_many_requests(0, "The disruption budget web needs 2 healthy pods and has 2 currently".into());
        let s = e.to_status();
        assert_eq!(s["code"], 429);
        assert_eq!(s["reason"], "TooManyRequests");
        assert_eq!(s["message"], "Cannot evict pod as it would violate the pod's disruption budget.");
        assert_eq!(s["details"]["causes"][0]["reason"], "DisruptionBudget");
        assert!(s["details"]["retryAfterSeconds"].is_null());
        let s = still_processing("web").to_status();
        assert_eq!(s["details"]["retryAfterSeconds"], 10);
    }

    #[test]
    fn finished_pending_and_terminating_pods_skip_the_budget() {
        let pod = |phase: &str, deleting: bool| {
            let mut p = json!({"metadata": {}, "status": {"phase": phase}});
            if deleting {
                p["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
            }
            p
        };
        assert!(can_ignore_pdb(&pod("Succeeded", false)));
        assert!(can_ignore_pdb(&pod("Failed", false)));
        assert!(can_ignore_pdb(&pod("Pending", false)));
        assert!(can_ignore_pdb(&pod("Running", true)));
        assert!(!can_ignore_pdb(&pod("Running", false)));
        assert!(should_enforce_resource_version(&pod("Pending", false)));
        assert!(!should_enforce_resource_version(&pod("Failed", false)));
    }

    #[test]
    fn delete_options_and_dry_run() {
        let ev = json!({"deleteOptions": {"gracePeriodSeconds": 5, "dryRun": ["All"], "preconditions": {"uid": "u"}}});
        let o = delete_options(&ev, false).unwrap();
        assert_eq!((o.grace_period, o.dry_run, o.precondition_uid.as_deref()), (Some(5), true, Some("u")));
        assert!(delete_options(&json!({}), true).unwrap().dry_run);
        let bad = json!({"deleteOptions": {"dryRun": ["Nope"]}});
        assert!(delete_options(&bad, false).is_err());
    }

    #[test]
    fn disruption_target_condition() {
        let mut p = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        set_disruption_target(&mut p);
        let c = &p["status"]["conditions"][1];
        assert_eq!(
            (c["type"].as_str(), c["reason"].as_str()),
            (Some("DisruptionTarget"), Some("EvictionByEvictionAPI"))
        );
        let before = p.clone();
        set_disruption_target(&mut p);
        assert_eq!(p, before);
    }
}
