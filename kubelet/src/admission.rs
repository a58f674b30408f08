//! Pod admission on the node (upstream's `lifecycle.PredicateAdmitHandler`): before a new
//! pod starts, the kubelet checks it against the pods it already runs, and rejects it when
//! it cannot run here. The scheduler checks the same, but its view can be stale, and a pod
//! bound by hand (`spec.nodeName`) or from a manifest never went through it. A rejected pod
//! fails for good (phase `Failed`), so that its controller replaces it.
//!
//! Checked here: host ports (upstream's `NodePorts` predicate). Not checked: resources,
//! node affinity and name (the scheduler's checks of those hold for our pods; upstream's
//! kubelet re-checks them).

use k8s_openapi::api::core::v1::Pod;

/// The reason and message of a rejection, as upstream's `rejectPod` writes them into the
/// pod's status and a Warning event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: &'static str,
    pub message: String,
}

/// One host port a pod asks for: (host IP, protocol, port).
type HostPort = (String, String, i32);

fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else { return Vec::new() };
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.is_some_and(|h| h > 0))
        .map(|p| {
            let ip = p.host_ip.clone().filter(|ip| !ip.is_empty()).unwrap_or_else(|| "0.0.0.0".into());
            (ip, p.protocol.clone().unwrap_or_else(|| "TCP".into()), p.host_port.unwrap_or_default())
        })
        .collect()
}

/// Two host ports clash on the same protocol and port when either listens on every
/// address or both on the same one (the scheduler's `HostPortInfo` rule).
fn clash(a: &HostPort, b: &HostPort) -> bool {
    a.1 == b.1 && a.2 == b.2 && (a.0 == b.0 || a.0 == "0.0.0.0" || b.0 == "0.0.0.0")
}

/// Whether `pod` may run beside `admitted` (the node's admitted pods that have not
/// finished).
pub fn admit<'a>(pod: &Pod, admitted: impl IntoIterator<Item = &'a Pod>) -> Result<(), Rejection> {
    let wanted = host_ports(pod);
    if wanted.is_empty() {
        return Ok(());
    }
    let taken: Vec<HostPort> = admitted.into_iter().flat_map(host_ports).collect();
    if wanted.iter().any(|w| taken.iter().any(|t| clash(w, t))) {
        return Err(Rejection {
            reason: "NodePorts",
            message: "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
                .into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ports: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"spec": {"containers": [{"name": "c", "ports": ports}]}})).unwrap()
    }

    #[test]
    fn host_ports_clash_by_protocol_port_and_address() {
        let web = pod(json!([{"containerPort": 80, "hostPort": 8080}]));
        let same = pod(json!([{"containerPort": 81, "hostPort": 8080}]));
        let udp = pod(json!([{"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}]));
        let other_ip = pod(json!([{"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"}]));
        let other_ip2 = pod(json!([{"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.2"}]));
        let no_host_port = pod(json!([{"containerPort": 8080}]));
        let err = admit(&same, [&web]).unwrap_err();
        assert_eq!(err.reason, "NodePorts");
        assert!(err.message.starts_with("Predicate NodePorts failed"), "{}", err.message);
        assert!(admit(&udp, [&web]).is_ok(), "another protocol");
        assert!(admit(&other_ip, [&web]).is_err(), "0.0.0.0 takes every address");
        assert!(admit(&other_ip2, [&other_ip]).is_ok(), "two distinct addresses");
        assert!(admit(&no_host_port, [&web]).is_ok());
        assert!(admit(&web, []).is_ok());
    }
}
