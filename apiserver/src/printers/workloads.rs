//! apps and batch: Deployment, ReplicaSet, StatefulSet, DaemonSet, ControllerRevision,
//! Job, CronJob.

use serde_json::Value;

use super::format::{
    age, arr_at, condition_true, container_cells, count, int_at, label_selector, labels, len_at, num, obj_at,
    selector, since, str_at, text, time_at,
};
use super::{AGE, CONTAINERS, Column, IMAGES, boolean, integer, string, wide};
use crate::table;

/// `spec.replicas`, which v1 defaults to 1.
fn replicas(obj: &Value) -> i64 {
    obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)
}

pub static DEPLOYMENT: &[Column] = &[
    string("Ready", "Number of the pod with ready state"),
    string(
        "Up-to-date",
        "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
    ),
    string(
        "Available",
        "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    wide(
        "Selector",
        "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
    ),
];

/// READY is `ready/desired`; SELECTOR is the selector's string (`""` when empty).
pub fn deployment(obj: &Value, now: i64) -> Vec<Value> {
    let [names, images] = container_cells(obj, "/spec/template");
    let sel = selector(&obj["spec"]["selector"]).unwrap_or_else(|()| "<invalid>".to_string());
    vec![
        text(format!("{}/{}", int_at(obj, "/status/readyReplicas"), replicas(obj))),
        count(int_at(obj, "/status/updatedReplicas")),
        count(int_at(obj, "/status/availableReplicas")),
        age(obj, now),
        names,
        images,
        text(sel),
    ]
}

pub static REPLICA_SET: &[Column] = &[
    integer("Desired", "Replicas is the number of desired replicas."),
    integer("Current", "Replicas is the most recently observed number of replicas."),
    integer("Ready", "The number of ready replicas for this replica set."),
    AGE,
    CONTAINERS,
    IMAGES,
    wide("Selector", "Selector is a label query over pods that should match the replica count."),
];

pub fn replica_set(obj: &Value, now: i64) -> Vec<Value> {
    let [names, images] = container_cells(obj, "/spec/template");
    vec![
        num(replicas(obj)),
        num(int_at(obj, "/status/replicas")),
        num(int_at(obj, "/status/readyReplicas")),
        age(obj, now),
        names,
        images,
        text(label_selector(&obj["spec"]["selector"])),
    ]
}

pub static STATEFUL_SET: &[Column] =
    &[string("Ready", "Number of the pod with ready state"), AGE, CONTAINERS, IMAGES];

pub fn stateful_set(obj: &Value, now: i64) -> Vec<Value> {
    let [names, images] = container_cells(obj, "/spec/template");
    vec![
        text(format!("{}/{}", int_at(obj, "/status/readyReplicas"), replicas(obj))),
        age(obj, now),
        names,
        images,
    ]
}

pub static DAEMON_SET: &[Column] = &[
    integer("Desired", "The total number of nodes that should be running the daemon pod."),
    integer(
        "Current",
        "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.",
    ),
    integer(
        "Ready",
        "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.",
    ),
    integer("Up-to-date", "The total number of nodes that are running updated daemon pod"),
    integer(
        "Available",
        "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available.",
    ),
    string("Node Selector", "NodeSelector is a selector which must be true for the pod to fit on a node."),
    AGE,
    CONTAINERS,
    IMAGES,
    wide("Selector", "A label query over pods that are managed by the daemon set."),
];

pub fn daemon_set(obj: &Value, now: i64) -> Vec<Value> {
    let [names, images] = container_cells(obj, "/spec/template");
    vec![
        num(int_at(obj, "/status/desiredNumberScheduled")),
        num(int_at(obj, "/status/currentNumberScheduled")),
        num(int_at(obj, "/status/numberReady")),
        num(int_at(obj, "/status/updatedNumberScheduled")),
        num(int_at(obj, "/status/numberAvailable")),
        text(labels(&obj["spec"]["template"]["spec"]["nodeSelector"])),
        age(obj, now),
        names,
        images,
        text(label_selector(&obj["spec"]["selector"])),
    ]
}

pub static CONTROLLER_REVISION: &[Column] = &[
    string("Controller", "Controller of the object"),
    string("Revision", "Revision indicates the revision of the state represented by Data."),
    AGE,
];

/// CONTROLLER is `kind.group/name` of the controlling owner (`daemonset.apps/fluentd`).
pub fn controller_revision(obj: &Value, now: i64) -> Vec<Value> {
    let owner = arr_at(obj, "/metadata/ownerReferences").iter().find(|r| r["controller"] == true);
    let controller = match owner {
        None => "<none>".to_string(),
        Some(r) => {
            let api_version = str_at(r, "/apiVersion");
            let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
            let (kind, name) = (str_at(r, "/kind"), str_at(r, "/name"));
            match (group, kind) {
                ("", "") => name.to_string(),
                ("", k) => format!("{}/{name}", k.to_lowercase()),
                (g, k) => format!("{}.{}/{name}", k.to_lowercase(), g.to_lowercase()),
            }
        }
    };
    vec![text(controller), count(int_at(obj, "/revision")), age(obj, now)]
}

pub static JOB: &[Column] = &[
    string("Status", "Status of the job."),
    string("Completions", "The number of pods which reached phase Succeeded."),
    string("Duration", "Time required to complete the job."),
    AGE,
    CONTAINERS,
    IMAGES,
    wide("Selector", "A label query over pods that should match the pod count."),
];

/// STATUS is Complete, Failed, Terminating, Suspended, FailureTarget or Running (first
/// match wins); COMPLETIONS `succeeded/completions` (`n/1 of P` for a parallel job
/// without completions); DURATION from start to completion, or to now while running.
pub fn job(obj: &Value, now: i64) -> Vec<Value> {
    let succeeded = int_at(obj, "/status/succeeded");
    let completions = match obj.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(c) => format!("{succeeded}/{c}"),
        None => match int_at(obj, "/spec/parallelism") {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let duration = match (time_at(obj, "/status/startTime"), time_at(obj, "/status/completionTime")) {
        (None, _) => String::new(),
        (Some(start), None) => table::human_duration(now - start),
        (Some(start), Some(end)) => table::human_duration(end - start),
    };
    let conditions = arr_at(obj, "/status/conditions");
    let has = |kind: &str| condition_true(conditions, kind);
    let status = if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if obj.pointer("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null()) {
        "Terminating"
    } else if has("Suspended") {
        "Suspended"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let [names, images] = container_cells(obj, "/spec/template");
    vec![
        text(status),
        text(completions),
        text(duration),
        age(obj, now),
        names,
        images,
        text(label_selector(&obj["spec"]["selector"])),
    ]
}

pub static CRON_JOB: &[Column] = &[
    string("Schedule", "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron."),
    string(
        "Timezone",
        "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.",
    ),
    boolean(
        "Suspend",
        "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.",
    ),
    integer("Active", "A list of pointers to currently running jobs."),
    string("Last Schedule", "Information when was the last time the job was successfully scheduled."),
    AGE,
    CONTAINERS,
    IMAGES,
    wide("Selector", "A label query over pods that should match the pod count."),
];

/// SUSPEND prints `True`/`False` as upstream's `printBoolPtr` (a string cell in a
/// boolean column; v1 defaults an unset suspend to false).
pub fn cron_job(obj: &Value, now: i64) -> Vec<Value> {
    let suspend = if obj.pointer("/spec/suspend") == Some(&Value::Bool(true)) { "True" } else { "False" };
    let last = match time_at(obj, "/status/lastScheduleTime") {
        Some(t) => since(Some(t), now),
        None => "<none>".to_string(),
    };
    let template = "/spec/jobTemplate/spec/template";
    let [names, images] = container_cells(obj, template);
    let selector = obj_at(obj, "/spec/jobTemplate/spec/selector").cloned().unwrap_or(Value::Null);
    vec![
        text(str_at(obj, "/spec/schedule")),
        text(obj.pointer("/spec/timeZone").and_then(Value::as_str).unwrap_or("<none>")),
        text(suspend),
        num(len_at(obj, "/status/active")),
        text(last),
        age(obj, now),
        names,
        images,
        text(label_selector(&selector)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_700_000_000;

    fn meta() -> Value {
        json!({ "name": "x", "creationTimestamp": "2023-11-14T22:08:20Z" })
    }

    fn template() -> Value {
        json!({ "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "nginx", "image": "nginx:1.27" }, { "name": "log", "image": "busybox" }] } })
    }

    #[test]
    fn deployments() {
        let d = json!({ "metadata": meta(),
            "spec": { "replicas": 3, "selector": { "matchLabels": { "app": "web" } }, "template": template() },
            "status": { "replicas": 3, "updatedReplicas": 3, "readyReplicas": 2, "availableReplicas": 2 } });
        assert_eq!(
            deployment(&d, NOW),
            vec![
                json!("2/3"),
                json!("3"),
                json!("2"),
                json!("5m"),
                json!("nginx,log"),
                json!("nginx:1.27,busybox"),
                json!("app=web")
            ]
        );
        let fresh = json!({ "metadata": meta(), "spec": { "template": template() } });
        assert_eq!(deployment(&fresh, NOW)[..3], [json!("0/1"), json!("0"), json!("0")]);
        assert_eq!(deployment(&fresh, NOW)[6], json!(""));
    }

    #[test]
    fn replica_stateful_daemon_sets() {
        let rs = json!({ "metadata": meta(),
            "spec": { "replicas": 2, "selector": { "matchLabels": { "app": "web", "pod-template-hash": "abc" } }, "template": template() },
            "status": { "replicas": 2, "readyReplicas": 1 } });
        assert_eq!(replica_set(&rs, NOW)[..4], [json!(2), json!(2), json!(1), json!("5m")]);
        assert_eq!(replica_set(&rs, NOW)[6], json!("app=web,pod-template-hash=abc"));
        let sts = json!({ "metadata": meta(), "spec": { "replicas": 3, "template": template() }, "status": { "readyReplicas": 3 } });
        assert_eq!(stateful_set(&sts, NOW)[..2], [json!("3/3"), json!("5m")]);
        let ds = json!({ "metadata": meta(),
            "spec": { "selector": { "matchLabels": { "app": "agent" } },
                      "template": { "spec": { "nodeSelector": { "kubernetes.io/os": "linux" }, "containers": [] } } },
            "status": { "desiredNumberScheduled": 2, "currentNumberScheduled": 2, "numberReady": 1,
                        "updatedNumberScheduled": 2, "numberAvailable": 1 } });
        assert_eq!(
            daemon_set(&ds, NOW),
            vec![
                json!(2),
                json!(2),
                json!(1),
                json!(2),
                json!(1),
                json!("kubernetes.io/os=linux"),
                json!("5m"),
                json!(""),
                json!(""),
                json!("app=agent")
            ]
        );
    }

    #[test]
    fn controller_revisions() {
        let cr = json!({ "metadata": { "name": "fluentd-5d4", "ownerReferences": [
            { "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "fluentd", "controller": true } ] }, "revision": 2 });
        assert_eq!(controller_revision(&cr, NOW)[..2], [json!("daemonset.apps/fluentd"), json!("2")]);
        assert_eq!(controller_revision(&json!({}), NOW)[0], json!("<none>"));
    }

    #[test]
    fn jobs() {
        let running = json!({ "metadata": meta(),
            "spec": { "completions": 3, "parallelism": 1, "template": template(), "selector": { "matchLabels": {
                "batch.kubernetes.io/controller-uid": "u1" } } },
            "status": { "startTime": "2023-11-14T22:10:00Z", "active": 1, "succeeded": 1 } });
        assert_eq!(
            job(&running, NOW),
            vec![
                json!("Running"),
                json!("1/3"),
                json!("3m20s"),
                json!("5m"),
                json!("nginx,log"),
                json!("nginx:1.27,busybox"),
                json!("batch.kubernetes.io/controller-uid=u1")
            ]
        );
        let complete = json!({ "metadata": meta(), "spec": { "completions": 1 },
            "status": { "startTime": "2023-11-14T22:10:00Z", "completionTime": "2023-11-14T22:10:12Z", "succeeded": 1,
                        "conditions": [{ "type": "SuccessCriteriaMet", "status": "True" }, { "type": "Complete", "status": "True" }] } });
        assert_eq!(job(&complete, NOW)[..3], [json!("Complete"), json!("1/1"), json!("12s")]);
        let failed = json!({ "spec": { "parallelism": 2 }, "status": {
            "conditions": [{ "type": "FailureTarget", "status": "True" }, { "type": "Failed", "status": "True" }] } });
        assert_eq!(job(&failed, NOW)[..3], [json!("Failed"), json!("0/1 of 2"), json!("")]);
        let suspended = json!({ "spec": { "suspend": true }, "status": { "conditions": [{ "type": "Suspended", "status": "True" }] } });
        assert_eq!(job(&suspended, NOW)[0], json!("Suspended"));
        let mut deleting = suspended.clone();
        deleting["metadata"] = json!({ "deletionTimestamp": "2023-11-14T22:13:00Z" });
        assert_eq!(job(&deleting, NOW)[0], json!("Terminating"));
    }

    #[test]
    fn cron_jobs() {
        let cj = json!({ "metadata": meta(),
            "spec": { "schedule": "*/5 * * * *", "suspend": false,
                      "jobTemplate": { "spec": { "template": template() } } },
            "status": { "active": [{ "name": "x-1" }], "lastScheduleTime": "2023-11-14T22:10:00Z" } });
        assert_eq!(
            cron_job(&cj, NOW),
            vec![
                json!("*/5 * * * *"),
                json!("<none>"),
                json!("False"),
                json!(1),
                json!("3m20s"),
                json!("5m"),
                json!("nginx,log"),
                json!("nginx:1.27,busybox"),
                json!("<none>")
            ]
        );
        let utc = json!({ "spec": { "schedule": "@daily", "timeZone": "Etc/UTC", "suspend": true } });
        let row = cron_job(&utc, NOW);
        assert_eq!((&row[1], &row[2], &row[4]), (&json!("Etc/UTC"), &json!("True"), &json!("<none>")));
    }
}

pub static HORIZONTAL_POD_AUTOSCALER: &[Column] = &[
    string(
        "Reference",
        "reference to scaled resource; horizontal pod autoscaler will learn the current resource consumption and will set the desired number of pods by using its Scale subresource.",
    ),
    string(
        "Targets",
        "metrics contains the specifications for which to use to calculate the desired replica count (the maximum replica count across all metrics will be used).",
    ),
    string(
        "MinPods",
        "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down.",
    ),
    string(
        "MaxPods",
        "maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up.",
    ),
    string(
        "Replicas",
        "currentReplicas is current number of replicas of pods managed by this autoscaler, as last seen by the autoscaler.",
    ),
    AGE,
];

/// Upstream prints both versions from its internal (v2-like) type: a v1 object is
/// converted first. MAXPODS and REPLICAS are numbers in string columns, as upstream's.
pub fn horizontal_pod_autoscaler(obj: &Value, now: i64) -> Vec<Value> {
    let v2;
    let obj = if obj["apiVersion"] == "autoscaling/v1" {
        v2 = crate::registry::resources::autoscaling::conversion::v1_to_v2(obj.clone());
        &v2
    } else {
        obj
    };
    let min = match obj.pointer("/spec/minReplicas").and_then(Value::as_i64) {
        Some(m) => m.to_string(),
        None => "<unset>".to_string(),
    };
    vec![
        text(format!(
            "{}/{}",
            str_at(obj, "/spec/scaleTargetRef/kind"),
            str_at(obj, "/spec/scaleTargetRef/name")
        )),
        text(hpa_metrics(arr_at(obj, "/spec/metrics"), arr_at(obj, "/status/currentMetrics"))),
        text(min),
        num(int_at(obj, "/spec/maxReplicas")),
        num(int_at(obj, "/status/currentReplicas")),
        age(obj, now),
    ]
}

/// Upstream's `formatHPAMetrics` (1.30 and later: resource metrics named), at most two
/// metrics and `+ N more...`.
fn hpa_metrics(specs: &[Value], statuses: &[Value]) -> String {
    if specs.is_empty() {
        return "<none>".to_string();
    }
    const MAX: usize = 2;
    let q = |v: &Value| {
        crate::validation::canonical_quantity(&match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    };
    let unknown = || "<unknown>".to_string();
    let list: Vec<String> = specs
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let status = statuses.get(i);
            let current = |key: &str, field: &str| {
                status.and_then(|s| s.get(key)).and_then(|s| s["current"].get(field)).filter(|v| !v.is_null())
            };
            match spec["type"].as_str().unwrap_or_default() {
                kind @ ("External" | "Object") => {
                    let key = if kind == "External" { "external" } else { "object" };
                    let target = &spec[key]["target"];
                    if !target["averageValue"].is_null() {
                        let cur = current(key, "averageValue").map(q).unwrap_or_else(unknown);
                        format!("{cur}/{} (avg)", q(&target["averageValue"]))
                    } else {
                        let cur = status
                            .and_then(|s| s.get(key))
                            .map(|s| q(&s["current"]["value"]))
                            .unwrap_or_else(unknown);
                        format!("{cur}/{}", q(&target["value"]))
                    }
                }
                "Pods" => {
                    let cur = status
                        .and_then(|s| s.get("pods"))
                        .map(|s| q(&s["current"]["averageValue"]))
                        .unwrap_or_else(unknown);
                    format!("{cur}/{}", q(&spec["pods"]["target"]["averageValue"]))
                }
                kind @ ("Resource" | "ContainerResource") => {
                    let key = if kind == "Resource" { "resource" } else { "containerResource" };
                    let src = &spec[key];
                    let name = src["name"].as_str().unwrap_or_default();
                    if !src["target"]["averageValue"].is_null() {
                        let cur = status
                            .and_then(|s| s.get(key))
                            .map(|s| q(&s["current"]["averageValue"]))
                            .unwrap_or_else(unknown);
                        format!("{name}: {cur}/{}", q(&src["target"]["averageValue"]))
                    } else {
                        let cur = current(key, "averageUtilization")
                            .map(|u| format!("{u}%"))
                            .unwrap_or_else(unknown);
                        let target = match src["target"]["averageUtilization"].as_i64() {
                            Some(u) => format!("{u}%"),
                            None => "<auto>".to_string(),
                        };
                        format!("{name}: {cur}/{target}")
                    }
                }
                _ => "<unknown type>".to_string(),
            }
        })
        .collect();
    if list.len() > MAX {
        format!("{} + {} more...", list[..MAX].join(", "), list.len() - MAX)
    } else {
        list.join(", ")
    }
}

#[cfg(test)]
mod hpa_tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn targets() {
        let t1 = json!({ "apiVersion": "autoscaling/v2", "spec": { "scaleTargetRef": { "kind": "Deployment", "name": "web" }, "minReplicas": 1, "maxReplicas": 5,
            "metrics": [{ "type": "Resource", "resource": { "name": "cpu", "target": { "type": "Utilization", "averageUtilization": 80 } } }] },
            "status": { "currentReplicas": 2, "currentMetrics": [{ "type": "Resource", "resource": { "name": "cpu", "current": { "averageUtilization": 55 } } }] } });
        let row = horizontal_pod_autoscaler(&t1, 0);
        assert_eq!(
            &row[..5],
            &[json!("Deployment/web"), json!("cpu: 55%/80%"), json!("1"), json!(5), json!(2)]
        );
        let t2 = json!({ "spec": { "metrics": [
            { "type": "Resource", "resource": { "name": "memory", "target": { "type": "AverageValue", "averageValue": "100Mi" } } },
            { "type": "Pods", "pods": { "metric": { "name": "qps" }, "target": { "type": "AverageValue", "averageValue": "10" } } },
            { "type": "External", "external": { "metric": { "name": "queue" }, "target": { "type": "AverageValue", "averageValue": "30" } } },
        ] } });
        assert_eq!(
            horizontal_pod_autoscaler(&t2, 0)[1],
            json!("memory: <unknown>/100Mi, <unknown>/10 + 1 more...")
        );
        let v1 = json!({ "apiVersion": "autoscaling/v1", "spec": { "scaleTargetRef": { "kind": "Deployment", "name": "web" }, "maxReplicas": 3 } });
        assert_eq!(horizontal_pod_autoscaler(&v1, 0)[1], json!("cpu: <unknown>/80%"));
        assert_eq!(horizontal_pod_autoscaler(&v1, 0)[2], json!("<unset>"));
    }
}
