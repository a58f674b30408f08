//! DefaultTolerationSeconds (upstream's `plugin/pkg/admission/defaulttolerationseconds`):
//! a pod that does not say how long it tolerates its node being not-ready or unreachable
//! tolerates each for `--default-not-ready-toleration-seconds` /
//! `--default-unreachable-toleration-seconds` (300 s), after which the taint eviction
//! controller moves it elsewhere.

use serde_json::{Value, json};

use super::Context;
use crate::admission::{Attributes, Operation, Plugin};
use crate::errors::ApiResult;

const NOT_READY: &str = "node.kubernetes.io/not-ready";
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

pub struct DefaultTolerationSeconds {
    not_ready: i64,
    unreachable: i64,
}

impl DefaultTolerationSeconds {
    pub fn new(ctx: &Context<'_>) -> Self {
        Self {
            not_ready: ctx.opts.default_not_ready_toleration_seconds,
            unreachable: ctx.opts.default_unreachable_toleration_seconds,
        }
    }
}

/// Whether a toleration covers NoExecute taints with `key` (an empty key or effect
/// matches all).
fn tolerates(t: &Value, key: &str) -> bool {
    let k = t["key"].as_str().unwrap_or_default();
    let e = t["effect"].as_str().unwrap_or_default();
    (k == key || k.is_empty()) && (e == "NoExecute" || e.is_empty())
}

/// Adds the two tolerations the pod lacks.
pub fn add_tolerations(spec: &mut Value, not_ready: i64, unreachable: i64) {
    let existing = spec["tolerations"].as_array().cloned().unwrap_or_default();
    let mut added = Vec::new();
    for (key, secs) in [(NOT_READY, not_ready), (UNREACHABLE, unreachable)] {
        if !existing.iter().any(|t| tolerates(t, key)) {
            added.push(
                json!({ "key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": secs }),
            );
        }
    }
    if added.is_empty() {
        return;
    }
    if !spec["tolerations"].is_array() {
        spec["tolerations"] = json!([]);
    }
    if let Some(list) = spec["tolerations"].as_array_mut() {
        list.extend(added);
    }
}

#[async_trait::async_trait]
impl Plugin for DefaultTolerationSeconds {
    fn name(&self) -> &'static str {
        "DefaultTolerationSeconds"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> ApiResult<()> {
        if attrs.is("", "pods")
            && matches!(attrs.operation, Operation::Create | Operation::Update)
            && let Some(pod) = attrs.object.as_mut()
            && pod["spec"].is_object()
        {
            add_tolerations(&mut pod["spec"], self.not_ready, self.unreachable);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_what_is_missing() {
        let mut spec = json!({ "containers": [] });
        add_tolerations(&mut spec, 300, 200);
        assert_eq!(
            spec["tolerations"],
            json!([
                { "key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300 },
                { "key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 200 },
            ])
        );
        let mut own = json!({ "tolerations": [{ "key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5 }] });
        add_tolerations(&mut own, 300, 300);
        assert_eq!(own["tolerations"].as_array().unwrap().len(), 2);
        assert_eq!(own["tolerations"][0]["tolerationSeconds"], 5);
        let mut all = json!({ "tolerations": [{ "operator": "Exists" }] });
        add_tolerations(&mut all, 300, 300);
        assert_eq!(all["tolerations"].as_array().unwrap().len(), 1);
    }
}
