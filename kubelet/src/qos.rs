//! A pod's QoS class (`status.qosClass`), computed as upstream's `GetPodQOS`: Guaranteed when
//! every container limits cpu and memory and requests (defaulted from limits) equal them,
//! BestEffort when nothing is requested or limited, Burstable otherwise.

use k8s_openapi::api::core::v1::Pod;

use crate::kuberuntime::{all_containers, quantity_milli};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

pub fn qos_class(pod: &Pod) -> QosClass {
    let mut any = false;
    let mut guaranteed = true;
    for c in all_containers(pod) {
        let res = c.resources.clone().unwrap_or_default();
        let nonzero = |m: Option<&std::collections::BTreeMap<_, _>>| {
            m.map(|m| m.iter().any(|(k, _): (&String, _)| matches!(k.as_str(), "cpu" | "memory")))
                .unwrap_or(false)
        };
        any |= nonzero(res.requests.as_ref()) || nonzero(res.limits.as_ref());
        for r in ["cpu", "memory"] {
            let limit = quantity_milli(res.limits.as_ref(), r);
            let request = quantity_milli(res.requests.as_ref(), r).or(limit);
            if limit.is_none() || request != limit {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => QosClass::BestEffort,
        (true, true) => QosClass::Guaranteed,
        (true, false) => QosClass::Burstable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn class(containers: serde_json::Value) -> QosClass {
        qos_class(&serde_json::from_value(json!({"spec": {"containers": containers}})).unwrap())
    }

    #[test]
    fn classes() {
        assert_eq!(class(json!([{"name": "a"}])), QosClass::BestEffort);
        assert_eq!(
            class(json!([{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}])),
            QosClass::Guaranteed
        );
        assert_eq!(
            class(
                json!([{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}}])
            ),
            QosClass::Burstable
        );
        assert_eq!(
            class(
                json!([{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}, {"name": "b"}])
            ),
            QosClass::Burstable
        );
    }
}
