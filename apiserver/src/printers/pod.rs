//! Pod: READY, STATUS, RESTARTS, AGE; wide IP, NODE, NOMINATED NODE, READINESS GATES.
//!
//! STATUS follows upstream's `printPod`: it starts from the phase (or `status.reason`),
//! then the first init container that has not finished names it (`Init:1/3`,
//! `Init:CrashLoopBackOff`, `Init:ExitCode:2`), else the last regular container that is
//! waiting or terminated does (`ContainerCreating`, `CrashLoopBackOff`, `Completed`,
//! `ExitCode:1`), and a pod being deleted is `Terminating`. For example a pod whose only
//! container waits with reason CrashLoopBackOff after 4 restarts, the last ending 65
//! seconds ago, prints `0/1  CrashLoopBackOff  4 (65s ago)`.

use serde_json::Value;

use super::format::{arr_at, condition_true, int_at, obj_at, or, str_at, text, time_at};
use super::{AGE, Column, string, wide};
use crate::table;

pub static COLUMNS: &[Column] = &[
    string("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    string("Status", "The aggregate status of the containers in this pod."),
    string(
        "Restarts",
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    AGE,
    wide(
        "IP",
        "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
    ),
    wide("Node", "NodeName indicates in which node this pod is scheduled."),
    wide("Nominated Node", "nominatedNodeName is set only when this pod preempts other pods on the node."),
    wide("Readiness Gates", "If specified, all readiness gates will be evaluated for pod readiness."),
];

/// The reason a pod's status carries when its node is lost (`node.NodeUnreachablePodReason`).
const NODE_LOST: &str = "NodeLost";

pub fn cells(pod: &Value, now: i64) -> Vec<Value> {
    let s = summarize(pod);
    let restarts = match s.last_restart {
        Some(t) if s.restarts != 0 => format!("{} ({} ago)", s.restarts, table::human_duration(now - t)),
        _ => s.restarts.to_string(),
    };
    let ip = match arr_at(pod, "/status/podIPs").first() {
        Some(first) => str_at(first, "/ip"),
        None => str_at(pod, "/status/podIP"),
    };
    vec![
        text(format!("{}/{}", s.ready, s.total)),
        text(s.reason),
        text(restarts),
        text(table::age(&pod["metadata"]["creationTimestamp"], now)),
        text(or(ip, "<none>")),
        text(or(str_at(pod, "/spec/nodeName"), "<none>")),
        text(or(str_at(pod, "/status/nominatedNodeName"), "<none>")),
        text(readiness_gates(pod)),
    ]
}

/// What READY, STATUS and RESTARTS are computed from.
struct Summary {
    ready: usize,
    total: usize,
    reason: String,
    restarts: i64,
    /// When the most recently restarted container counted in `restarts` last ended.
    last_restart: Option<i64>,
}

fn summarize(pod: &Value) -> Summary {
    let conditions = arr_at(pod, "/status/conditions");
    // Upstream's registry sets phase Pending on create; an object without one is new.
    let phase = match str_at(pod, "/status/phase") {
        "" => "Pending",
        p => p,
    };
    let mut reason = match str_at(pod, "/status/reason") {
        "" => phase.to_string(),
        r => r.to_string(),
    };
    if conditions.iter().any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated") {
        reason = "SchedulingGated".to_string();
    }

    let init_specs = arr_at(pod, "/spec/initContainers");
    // Sidecars (init containers with restartPolicy Always) count as containers.
    let restartable =
        |name: &str| init_specs.iter().any(|c| c["name"] == name && c["restartPolicy"] == "Always");
    let sidecars = init_specs.iter().filter(|c| c["restartPolicy"] == "Always").count();
    let mut s = Summary {
        ready: 0,
        total: arr_at(pod, "/spec/containers").len() + sidecars,
        reason,
        restarts: 0,
        last_restart: None,
    };

    let mut sidecar_restarts = 0;
    let mut sidecar_last_restart = None;
    let mut initializing = false;
    for (i, c) in arr_at(pod, "/status/initContainerStatuses").iter().enumerate() {
        let count = c["restartCount"].as_i64().unwrap_or(0);
        let finished = time_at(c, "/lastState/terminated/finishedAt");
        s.restarts += count;
        s.last_restart = s.last_restart.max(finished);
        let sidecar = restartable(c["name"].as_str().unwrap_or(""));
        if sidecar {
            sidecar_restarts += count;
            sidecar_last_restart = sidecar_last_restart.max(finished);
        }
        let terminated = obj_at(c, "/state/terminated");
        let waiting_reason = str_at(c, "/state/waiting/reason");
        match terminated {
            Some(t) if t["exitCode"].as_i64().unwrap_or(0) == 0 => continue,
            _ if sidecar && c["started"] == true => {
                if c["ready"] == true {
                    s.ready += 1;
                }
                continue;
            }
            Some(t) => {
                s.reason = match (str_at(t, "/reason"), int_at(t, "/signal")) {
                    ("", 0) => format!("Init:ExitCode:{}", int_at(t, "/exitCode")),
                    ("", signal) => format!("Init:Signal:{signal}"),
                    (r, _) => format!("Init:{r}"),
                };
            }
            None if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" => {
                s.reason = format!("Init:{waiting_reason}");
            }
            None => s.reason = format!("Init:{i}/{}", init_specs.len()),
        }
        initializing = true;
        break;
    }

    if !initializing || condition_true(conditions, "Initialized") {
        s.restarts = sidecar_restarts;
        s.last_restart = sidecar_last_restart;
        let mut has_running = false;
        for c in arr_at(pod, "/status/containerStatuses").iter().rev() {
            s.restarts += c["restartCount"].as_i64().unwrap_or(0);
            s.last_restart = s.last_restart.max(time_at(c, "/lastState/terminated/finishedAt"));
            let waiting = str_at(c, "/state/waiting/reason");
            let terminated = obj_at(c, "/state/terminated");
            if !waiting.is_empty() {
                s.reason = waiting.to_string();
            } else if let Some(t) = terminated {
                s.reason = match (str_at(t, "/reason"), int_at(t, "/signal")) {
                    ("", 0) => format!("ExitCode:{}", int_at(t, "/exitCode")),
                    ("", signal) => format!("Signal:{signal}"),
                    (r, _) => r.to_string(),
                };
            } else if c["ready"] == true && obj_at(c, "/state/running").is_some() {
                has_running = true;
                s.ready += 1;
            }
        }
        // A pod with a container still running is not Completed.
        if s.reason == "Completed" && has_running {
            s.reason = if condition_true(conditions, "Ready") { "Running" } else { "NotReady" }.to_string();
        }
    }

    if pod.pointer("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null()) {
        if str_at(pod, "/status/reason") == NODE_LOST {
            s.reason = "Unknown".to_string();
        } else if phase != "Succeeded" && phase != "Failed" {
            s.reason = "Terminating".to_string();
        }
    }
    s
}

/// `true/total` over `spec.readinessGates`, `<none>` without gates.
fn readiness_gates(pod: &Value) -> String {
    let gates = arr_at(pod, "/spec/readinessGates");
    if gates.is_empty() {
        return "<none>".to_string();
    }
    let conditions = arr_at(pod, "/status/conditions");
    let met = gates
        .iter()
        .filter(|g| condition_true(conditions, g["conditionType"].as_str().unwrap_or("")))
        .count();
    format!("{met}/{}", gates.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_700_000_000; // 2023-11-14T22:13:20Z

    fn pod(spec: Value, status: Value) -> Value {
        json!({
            "metadata": { "name": "p", "creationTimestamp": "2023-11-14T22:03:20Z" },
            "spec": spec,
            "status": status,
        })
    }

    fn row(p: &Value) -> Vec<String> {
        cells(p, NOW).iter().map(|c| c.as_str().unwrap().to_string()).collect()
    }

    fn one_container() -> Value {
        json!({ "containers": [{ "name": "app", "image": "nginx" }] })
    }

    #[test]
    fn running_pod() {
        let p = pod(
            json!({ "containers": [{ "name": "a" }, { "name": "b" }], "nodeName": "n1" }),
            json!({
                "phase": "Running",
                "podIP": "10.0.0.5",
                "podIPs": [{ "ip": "10.0.0.5" }],
                "conditions": [{ "type": "Ready", "status": "True" }],
                "containerStatuses": [
                    { "name": "a", "ready": true, "restartCount": 0, "state": { "running": {} } },
                    { "name": "b", "ready": true, "restartCount": 0, "state": { "running": {} } },
                ],
            }),
        );
        assert_eq!(row(&p), ["2/2", "Running", "0", "10m", "10.0.0.5", "n1", "<none>", "<none>"]);
    }

    #[test]
    fn new_pod_is_pending_with_placeholders() {
        let p = pod(one_container(), json!({}));
        assert_eq!(row(&p), ["0/1", "Pending", "0", "10m", "<none>", "<none>", "<none>", "<none>"]);
    }

    #[test]
    fn container_creating() {
        let p = pod(
            one_container(),
            json!({ "phase": "Pending", "containerStatuses": [
                { "name": "app", "ready": false, "restartCount": 0,
                  "state": { "waiting": { "reason": "ContainerCreating" } } } ] }),
        );
        assert_eq!(row(&p)[..3], ["0/1", "ContainerCreating", "0"]);
    }

    #[test]
    fn crash_loop_shows_when_it_last_restarted() {
        let p = pod(
            one_container(),
            json!({ "phase": "Running", "containerStatuses": [
                { "name": "app", "ready": false, "restartCount": 4,
                  "state": { "waiting": { "reason": "CrashLoopBackOff", "message": "back-off" } },
                  "lastState": { "terminated": { "exitCode": 1, "reason": "Error",
                                                 "finishedAt": "2023-11-14T22:12:15Z" } } } ] }),
        );
        assert_eq!(row(&p)[..3], ["0/1", "CrashLoopBackOff", "4 (65s ago)"]);
    }

    #[test]
    fn completed_and_exit_codes() {
        let done = pod(
            one_container(),
            json!({ "phase": "Succeeded", "containerStatuses": [
                { "name": "app", "ready": false, "restartCount": 0,
                  "state": { "terminated": { "exitCode": 0, "reason": "Completed" } } } ] }),
        );
        assert_eq!(row(&done)[..3], ["0/1", "Completed", "0"]);

        let killed = pod(
            one_container(),
            json!({ "phase": "Failed", "containerStatuses": [
                { "name": "app", "restartCount": 0, "state": { "terminated": { "exitCode": 137, "signal": 9 } } } ] }),
        );
        assert_eq!(row(&killed)[1], "Signal:9");
        let failed = pod(
            one_container(),
            json!({ "phase": "Failed", "containerStatuses": [
                { "name": "app", "restartCount": 0, "state": { "terminated": { "exitCode": 3 } } } ] }),
        );
        assert_eq!(row(&failed)[1], "ExitCode:3");
    }

    #[test]
    fn completed_with_a_running_container_is_running_or_not_ready() {
        let status = |ready: &str| {
            json!({ "phase": "Running", "conditions": [{ "type": "Ready", "status": ready }],
                "containerStatuses": [
                    { "name": "a", "ready": false, "state": { "terminated": { "exitCode": 0, "reason": "Completed" } } },
                    { "name": "b", "ready": true, "state": { "running": {} } },
                ] })
        };
        let spec = json!({ "containers": [{ "name": "a" }, { "name": "b" }] });
        assert_eq!(row(&pod(spec.clone(), status("True")))[..2], ["1/2", "Running"]);
        assert_eq!(row(&pod(spec, status("False")))[..2], ["1/2", "NotReady"]);
    }

    #[test]
    fn init_containers() {
        let spec = json!({ "initContainers": [{ "name": "i1" }, { "name": "i2" }], "containers": [{ "name": "app" }] });
        let waiting = json!({ "phase": "Pending", "initContainerStatuses": [
            { "name": "i1", "restartCount": 0, "state": { "running": {} } },
            { "name": "i2", "restartCount": 0, "state": { "waiting": { "reason": "PodInitializing" } } } ],
            "containerStatuses": [{ "name": "app", "state": { "waiting": { "reason": "PodInitializing" } } }] });
        assert_eq!(row(&pod(spec.clone(), waiting))[..3], ["0/1", "Init:0/2", "0"]);

        let second = json!({ "phase": "Pending", "initContainerStatuses": [
            { "name": "i1", "state": { "terminated": { "exitCode": 0, "reason": "Completed" } } },
            { "name": "i2", "state": { "running": {} } } ] });
        assert_eq!(row(&pod(spec.clone(), second))[1], "Init:1/2");

        let crashing = json!({ "phase": "Pending", "initContainerStatuses": [
            { "name": "i1", "restartCount": 3, "state": { "waiting": { "reason": "CrashLoopBackOff" } },
              "lastState": { "terminated": { "exitCode": 1, "finishedAt": "2023-11-14T22:13:00Z" } } } ] });
        assert_eq!(row(&pod(spec.clone(), crashing))[..3], ["0/1", "Init:CrashLoopBackOff", "3 (20s ago)"]);

        let failed = json!({ "phase": "Failed", "initContainerStatuses": [
            { "name": "i1", "state": { "terminated": { "exitCode": 2 } } } ] });
        assert_eq!(row(&pod(spec, failed))[1], "Init:ExitCode:2");
    }

    #[test]
    fn one_init_container_pending() {
        let spec = json!({ "initContainers": [{ "name": "init" }], "containers": [{ "name": "app" }] });
        let status = json!({ "phase": "Pending", "initContainerStatuses": [
            { "name": "init", "ready": false, "restartCount": 0, "state": { "waiting": { "reason": "PodInitializing" } } } ] });
        assert_eq!(row(&pod(spec, status))[..3], ["0/1", "Init:0/1", "0"]);
    }

    #[test]
    fn sidecars_count_as_containers() {
        let spec = json!({ "initContainers": [{ "name": "proxy", "restartPolicy": "Always" }],
                           "containers": [{ "name": "app" }] });
        let status = json!({ "phase": "Running",
            "conditions": [{ "type": "Initialized", "status": "True" }, { "type": "Ready", "status": "True" }],
            "initContainerStatuses": [{ "name": "proxy", "started": true, "ready": true, "restartCount": 1,
                "state": { "running": {} },
                "lastState": { "terminated": { "exitCode": 1, "finishedAt": "2023-11-14T21:13:20Z" } } }],
            "containerStatuses": [{ "name": "app", "ready": true, "restartCount": 0, "state": { "running": {} } }] });
        assert_eq!(row(&pod(spec, status))[..3], ["2/2", "Running", "1 (60m ago)"]);
    }

    #[test]
    fn terminating_and_node_lost() {
        let mut p = pod(
            one_container(),
            json!({ "phase": "Running", "containerStatuses": [
                { "name": "app", "ready": true, "state": { "running": {} } } ] }),
        );
        p["metadata"]["deletionTimestamp"] = json!("2023-11-14T22:13:00Z");
        assert_eq!(row(&p)[..2], ["1/1", "Terminating"]);
        p["status"]["reason"] = json!("NodeLost");
        assert_eq!(row(&p)[1], "Unknown");
        // A finished pod keeps its status while it is deleted.
        p["status"] = json!({ "phase": "Succeeded", "containerStatuses": [
            { "name": "app", "state": { "terminated": { "exitCode": 0, "reason": "Completed" } } } ] });
        assert_eq!(row(&p)[1], "Completed");
    }

    #[test]
    fn scheduling_gated_and_evicted() {
        let gated = pod(
            one_container(),
            json!({ "phase": "Pending", "conditions": [
                { "type": "PodScheduled", "status": "False", "reason": "SchedulingGated" } ] }),
        );
        assert_eq!(row(&gated)[1], "SchedulingGated");
        let evicted = pod(one_container(), json!({ "phase": "Failed", "reason": "Evicted" }));
        assert_eq!(row(&evicted)[1], "Evicted");
    }

    #[test]
    fn readiness_gates_and_nominated_node() {
        let p = pod(
            json!({ "containers": [{ "name": "a" }],
                    "readinessGates": [{ "conditionType": "x/one" }, { "conditionType": "x/two" }] }),
            json!({ "phase": "Pending", "nominatedNodeName": "n2",
                    "conditions": [{ "type": "x/one", "status": "True" }, { "type": "x/two", "status": "False" }] }),
        );
        assert_eq!(row(&p)[6..], ["n2", "1/2"]);
        assert_eq!(cells(&p, NOW).len(), COLUMNS.len());
    }
}
