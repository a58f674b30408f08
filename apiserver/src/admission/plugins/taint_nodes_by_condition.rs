//! TaintNodesByCondition (upstream's `plugin/pkg/admission/nodetaint`): a new Node starts
//! tainted `node.kubernetes.io/not-ready:NoSchedule`, so nothing is scheduled to it before
//! its kubelet reports ready (the node lifecycle controller then removes the taint).

use serde_json::{Value, json};

use crate::admission::{Attributes, Operation, Plugin};
use crate::errors::ApiResult;

pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

pub struct TaintNodesByCondition;

/// Adds the not-ready NoSchedule taint unless the node has one (same key and effect).
pub fn add_not_ready_taint(node: &mut Value) {
    let present = node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["key"] == NOT_READY_TAINT && t["effect"] == "NoSchedule");
    if present {
        return;
    }
    if !node["spec"].is_object() {
        node["spec"] = json!({});
    }
    if !node["spec"]["taints"].is_array() {
        node["spec"]["taints"] = json!([]);
    }
    if let Some(taints) = node["spec"]["taints"].as_array_mut() {
        taints.push(json!({ "key": NOT_READY_TAINT, "effect": "NoSchedule" }));
    }
}

#[async_trait::async_trait]
impl Plugin for TaintNodesByCondition {
    fn name(&self) -> &'static str {
        "TaintNodesByCondition"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> ApiResult<()> {
        if attrs.is("", "nodes")
            && attrs.operation == Operation::Create
            && let Some(node) = attrs.object.as_mut()
        {
            add_not_ready_taint(node);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taints_once() {
        let mut node = json!({ "metadata": { "name": "n" } });
        add_not_ready_taint(&mut node);
        assert_eq!(node["spec"]["taints"], json!([{ "key": NOT_READY_TAINT, "effect": "NoSchedule" }]));
        add_not_ready_taint(&mut node);
        assert_eq!(node["spec"]["taints"].as_array().unwrap().len(), 1);
        let mut other = json!({ "spec": { "taints": [{ "key": NOT_READY_TAINT, "effect": "NoExecute" }] } });
        add_not_ready_taint(&mut other);
        assert_eq!(other["spec"]["taints"].as_array().unwrap().len(), 2);
    }
}
