//! Facts about pods that several controllers need, with upstream's definitions
//! (`pkg/api/v1/pod` and `controller_utils.go`): readiness, availability, activity.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;

/// The pod's condition of this type.
pub fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

/// The `Ready` condition is `True`.
pub fn is_ready(pod: &Pod) -> bool {
    condition(pod, "Ready").is_some_and(|c| c.status == "True")
}

/// Ready for at least `min_ready` at `now`: upstream's `IsPodAvailable`.
pub fn is_available(pod: &Pod, min_ready: Duration, now: Timestamp) -> bool {
    let Some(c) = condition(pod, "Ready").filter(|c| c.status == "True") else { return false };
    if min_ready.is_zero() {
        return true;
    }
    match &c.last_transition_time {
        Some(t) => {
            let since = now.duration_since(t.0);
            since.as_secs_f64() >= min_ready.as_secs_f64()
        }
        None => false,
    }
}

/// How long until a ready pod becomes available, if it is ready and not yet available.
pub fn until_available(pod: &Pod, min_ready: Duration, now: Timestamp) -> Option<Duration> {
    let c = condition(pod, "Ready").filter(|c| c.status == "True")?;
    let t = c.last_transition_time.as_ref()?;
    let since = now.duration_since(t.0).as_secs_f64().max(0.0);
    let left = min_ready.as_secs_f64() - since;
    (left > 0.0).then(|| Duration::from_secs_f64(left))
}

pub fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

/// Finished: `Succeeded` or `Failed`.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Counts towards a controller's replicas: not finished and not being deleted
/// (upstream's `IsPodActive`).
pub fn is_active(pod: &Pod) -> bool {
    !is_terminal(pod) && !is_terminating(pod)
}

pub fn node_name(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("")
}

pub fn namespace_name(pod: &Pod) -> (&str, &str) {
    (pod.metadata.namespace.as_deref().unwrap_or(""), pod.metadata.name.as_deref().unwrap_or(""))
}
