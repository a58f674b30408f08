//! Small builders of API objects for the plugins' unit tests.

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::framework::{NodeInfo, PodInfo};

pub fn node(name: &str, cpu: &str, memory: &str) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}
    }))
    .unwrap()
}

/// A pod requesting `cpu` and `memory` ("0" for none).
pub fn pod(name: &str, cpu: &str, memory: &str) -> Pod {
    let mut requests = serde_json::Map::new();
    if cpu != "0" {
        requests.insert("cpu".into(), cpu.into());
    }
    if memory != "0" {
        requests.insert("memory".into(), memory.into());
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": requests}}]}
    }))
    .unwrap()
}

pub fn bound(mut pod: Pod, node: &str) -> Pod {
    pod.spec.as_mut().unwrap().node_name = Some(node.into());
    pod
}

pub fn labeled(mut node: Node, key: &str, value: &str) -> Node {
    node.metadata.labels.get_or_insert_default().insert(key.into(), value.into());
    node
}

pub fn with_taint(mut node: Node, key: &str, value: &str, effect: &str) -> Node {
    let taint =
        serde_json::from_value(serde_json::json!({"key": key, "value": value, "effect": effect})).unwrap();
    node.spec.get_or_insert_default().taints.get_or_insert_default().push(taint);
    node
}

pub fn with_toleration(mut pod: Pod, key: &str, value: &str) -> Pod {
    let t =
        serde_json::from_value(serde_json::json!({"key": key, "value": value, "operator": "Equal"})).unwrap();
    pod.spec.as_mut().unwrap().tolerations.get_or_insert_default().push(t);
    pod
}

pub fn with_anti_affinity(mut pod: Pod, key: &str, value: &str, topology: &str) -> Pod {
    pod.spec.as_mut().unwrap().affinity = Some(
        serde_json::from_value(
            serde_json::json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {key: value}}, "topologyKey": topology}
            ]}}),
        )
        .unwrap(),
    );
    pod
}

pub fn node_info(node: Node) -> NodeInfo {
    let mut info = NodeInfo::empty(node.metadata.name.as_deref().unwrap());
    info.set_node(std::sync::Arc::new(node));
    info
}

pub fn pod_info(pod: Pod) -> PodInfo {
    PodInfo::new(std::sync::Arc::new(pod))
}
