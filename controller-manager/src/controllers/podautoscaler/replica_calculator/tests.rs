//! Upstream's `replica_calculator_test.go` cases, with its testing tuning: tolerance 0.1,
//! CPU initialization period 2 minutes, initial readiness delay 10 seconds. Pods whose
//! start time is not given started long ago (upstream's zero time), their Ready
//! condition last changed when they started.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, PodCondition, PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::*;

fn now() -> Timestamp {
    "2024-06-01T12:00:00Z".parse().unwrap()
}

fn long_ago() -> Timestamp {
    "2000-01-01T00:00:00Z".parse().unwrap()
}

/// Started (and became Ready) within the CPU initialization period, less than a metric
/// window ago: its sample may still be start-up.
fn hot() -> Timestamp {
    now() - SignedDuration::from_secs(30)
}

/// Started before the CPU initialization period.
fn cool() -> Timestamp {
    now() - SignedDuration::from_secs(600)
}

fn calc() -> ReplicaCalculator {
    ReplicaCalculator {
        tolerance: 0.1,
        cpu_initialization_period: Duration::from_secs(120),
        delay_of_initial_readiness_status: Duration::from_secs(10),
    }
}

/// A test's pods, one entry per pod in each vector (defaults when shorter).
#[derive(Default)]
struct Pods {
    n: usize,
    /// Each container's `resource` request; `None`: the container has none.
    requests: Vec<Option<&'static str>>,
    readiness: Vec<&'static str>,
    phase: Vec<&'static str>,
    deleting: Vec<bool>,
    start: Vec<Timestamp>,
}

impl Pods {
    fn new(n: usize) -> Self {
        Pods { n, ..Default::default() }
    }

    fn build(&self, resource: &str) -> Vec<Arc<Pod>> {
        (0..self.n)
            .map(|i| {
                let start = self.start.get(i).copied().unwrap_or_else(long_ago);
                let request = self.requests.get(i).copied().unwrap_or(Some("1"));
                let requests =
                    request.map(|r| BTreeMap::from([(resource.to_owned(), Quantity(r.to_owned()))]));
                Arc::new(Pod {
                    metadata: ObjectMeta {
                        name: Some(format!("test-pod-{i}")),
                        namespace: Some("test-namespace".into()),
                        labels: Some(BTreeMap::from([("name".into(), "test-pod".into())])),
                        deletion_timestamp: self
                            .deleting
                            .get(i)
                            .copied()
                            .unwrap_or(false)
                            .then(|| Time(now())),
                        ..Default::default()
                    },
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "container".into(),
                            resources: Some(ResourceRequirements { requests, ..Default::default() }),
                            ports: Some(vec![ContainerPort { container_port: 80, ..Default::default() }]),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                    status: Some(PodStatus {
                        phase: Some(self.phase.get(i).copied().unwrap_or("Running").into()),
                        start_time: Some(Time(start)),
                        conditions: Some(vec![PodCondition {
                            type_: "Ready".into(),
                            status: self.readiness.get(i).copied().unwrap_or("True").into(),
                            last_transition_time: Some(Time(start)),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }),
                })
            })
            .collect()
    }
}

/// Metrics for the first `levels.len()` pods, sampled now over a minute's window.
fn metrics(levels: &[i64]) -> PodMetricsInfo {
    levels
        .iter()
        .enumerate()
        .map(|(i, v)| {
            (
                format!("test-pod-{i}"),
                PodMetric { timestamp: now(), window: Duration::from_secs(60), value: *v },
            )
        })
        .collect()
}

fn cpu(current: i32, pods: &Pods, levels: &[i64], target: i32) -> Result<ResourceReplicas, CalcError> {
    calc().resource_replicas(current, target, "cpu", "", &pods.build("cpu"), metrics(levels), now())
}

fn plain(current: i32, pods: &Pods, levels: &[i64], target: i64) -> Result<(i32, i64), CalcError> {
    calc().plain_metric_replicas(metrics(levels), current, target, "", &pods.build("cpu"), now())
}

fn ok(replicas: i32, utilization: i32, raw: i64) -> Result<ResourceReplicas, CalcError> {
    Ok(ResourceReplicas { replicas, utilization, raw_utilization: raw })
}

#[test]
fn scale_up() {
    assert_eq!(cpu(3, &Pods::new(3), &[300, 500, 700], 30), ok(5, 50, 500));
}

#[test]
fn scale_up_unready_less_scale() {
    let pods = Pods { readiness: vec!["False", "True", "True"], ..Pods::new(3) };
    assert_eq!(cpu(3, &pods, &[300, 500, 700], 30), ok(4, 60, 600));
}

#[test]
fn scale_up_hot_cpu_less_scale() {
    let pods = Pods { start: vec![hot(), cool(), cool()], ..Pods::new(3) };
    assert_eq!(cpu(3, &pods, &[300, 500, 700], 30), ok(4, 60, 600));
}

#[test]
fn scale_up_unready_no_scale() {
    let pods = Pods { readiness: vec!["True", "False", "False"], ..Pods::new(3) };
    assert_eq!(cpu(3, &pods, &[400, 500, 700], 30), ok(3, 40, 400));
}

#[test]
fn scale_hot_cpu_no_scale() {
    let pods = Pods { start: vec![cool(), hot(), hot()], ..Pods::new(3) };
    assert_eq!(cpu(3, &pods, &[400, 500, 700], 30), ok(3, 40, 400));
}

#[test]
fn scale_up_ignores_failed_pods() {
    let pods = Pods {
        readiness: vec!["True", "True", "False", "False"],
        phase: vec!["Running", "Running", "Failed", "Failed"],
        ..Pods::new(4)
    };
    assert_eq!(cpu(2, &pods, &[500, 700], 30), ok(4, 60, 600));
}

#[test]
fn scale_up_ignores_deleting_pods() {
    let pods = Pods {
        readiness: vec!["True", "True", "False", "False"],
        deleting: vec![false, false, true, true],
        ..Pods::new(4)
    };
    assert_eq!(cpu(2, &pods, &[500, 700], 30), ok(4, 60, 600));
}

#[test]
fn pending_pods_are_unready_for_every_resource() {
    let pods = Pods { phase: vec!["Running", "Pending", "Pending"], ..Pods::new(3) };
    // Memory: readiness does not matter, but a Pending pod's sample is still discarded.
    let r =
        calc().resource_replicas(3, 30, "memory", "", &pods.build("memory"), metrics(&[900, 0, 0]), now());
    // 90 % against 30 %: ratio 3, the two pending pods count as 0 % → 30 % → no change.
    assert_eq!(r, ok(3, 90, 900));
}

#[test]
fn scale_down() {
    assert_eq!(cpu(5, &Pods::new(5), &[100, 300, 500, 250, 250], 50), ok(3, 28, 280));
}

#[test]
fn scale_down_ignores_unready_pods() {
    let pods = Pods { readiness: vec!["True", "True", "True", "False", "False"], ..Pods::new(5) };
    assert_eq!(cpu(5, &pods, &[100, 300, 500, 250, 250], 50), ok(2, 30, 300));
}

#[test]
fn scale_down_ignores_hot_cpu_pods() {
    let pods = Pods { start: vec![cool(), cool(), cool(), hot(), hot()], ..Pods::new(5) };
    assert_eq!(cpu(5, &pods, &[100, 300, 500, 250, 250], 50), ok(2, 30, 300));
}

#[test]
fn scale_down_ignores_failed_pods() {
    let pods = Pods {
        readiness: vec!["True", "True", "True", "True", "True", "False", "False"],
        phase: vec!["Running", "Running", "Running", "Running", "Running", "Failed", "Failed"],
        ..Pods::new(7)
    };
    assert_eq!(cpu(5, &pods, &[100, 300, 500, 250, 250], 50), ok(3, 28, 280));
}

#[test]
fn tolerance() {
    let pods = Pods { requests: vec![Some("0.9"), Some("1.0"), Some("1.1")], ..Pods::new(3) };
    assert_eq!(cpu(3, &pods, &[1010, 1030, 1020], 100), ok(3, 102, 1020));
}

#[test]
fn tolerance_custom_metric() {
    assert_eq!(plain(3, &Pods::new(3), &[20000, 21000, 21000], 20000), Ok((3, 20666)));
}

#[test]
fn scale_up_custom_metric() {
    assert_eq!(plain(3, &Pods::new(3), &[20000, 10000, 30000], 15000), Ok((4, 20000)));
}

#[test]
fn scale_up_custom_metric_ignores_readiness_and_warm_up() {
    // Only CPU discounts unready or warming pods: a custom metric counts all three.
    let pods =
        Pods { readiness: vec!["False", "True", "False"], start: vec![hot(), cool(), hot()], ..Pods::new(3) };
    assert_eq!(plain(3, &pods, &[50000, 10000, 30000], 15000), Ok((6, 30000)));
}

#[test]
fn scale_down_custom_metric() {
    assert_eq!(plain(5, &Pods::new(5), &[12000, 12000, 12000, 12000, 12000], 20000), Ok((3, 12000)));
}

#[test]
fn missing_metrics_scale_down() {
    // Pods 2 and 3 report nothing: on a scale-down they count as using their whole request.
    assert_eq!(cpu(4, &Pods::new(4), &[400, 95], 100), ok(3, 24, 247));
}

#[test]
fn missing_metrics_no_change_eq() {
    assert_eq!(cpu(2, &Pods::new(2), &[1000], 100), ok(2, 100, 1000));
}

#[test]
fn missing_metrics_no_change_gt() {
    // A scale-up counts the silent pod as idle: 95 % overall, within tolerance.
    assert_eq!(cpu(2, &Pods::new(2), &[1900], 100), ok(2, 190, 1900));
}

#[test]
fn missing_metrics_no_change_lt() {
    assert_eq!(cpu(2, &Pods::new(2), &[600], 100), ok(2, 60, 600));
}

#[test]
fn missing_metrics_unready_change() {
    let pods = Pods { readiness: vec!["False", "True", "True"], ..Pods::new(3) };
    assert_eq!(cpu(3, &pods, &[100, 450], 50), ok(3, 45, 450));
}

#[test]
fn missing_metrics_unready_scale_up() {
    let pods = Pods { readiness: vec!["False", "True", "True"], ..Pods::new(3) };
    assert_eq!(cpu(3, &pods, &[100, 2000], 50), ok(4, 200, 2000));
}

#[test]
fn missing_metrics_unready_scale_down() {
    let pods = Pods { readiness: vec!["False", "True", "True", "True"], ..Pods::new(4) };
    assert_eq!(cpu(4, &pods, &[100, 100, 100], 50), ok(3, 10, 100));
}

#[test]
fn missing_metrics_above_100_percent_target() {
    // On a scale-down a silent pod is assumed at the target when that exceeds 100 %:
    // (100 + 100 + 3000 + 3000) / 4000 = 155 % against 300 % → ceil(0.516 × 4) = 3.
    assert_eq!(cpu(4, &Pods::new(4), &[100, 100], 300), ok(3, 10, 100));
}

#[test]
fn rolling_update_with_max_surge() {
    // A surge pod without metrics must not make the autoscaler grow during a scale-down.
    assert_eq!(cpu(2, &Pods::new(3), &[100, 100], 50), ok(2, 10, 100));
}

#[test]
fn no_metrics() {
    assert_eq!(cpu(1, &Pods::new(1), &[], 100), Err(CalcError::NoMetricsForTargetedPods));
}

#[test]
fn no_pods() {
    assert_eq!(cpu(1, &Pods::new(0), &[], 100), Err(CalcError::NoPods));
}

#[test]
fn empty_cpu_request() {
    let pods = Pods { requests: vec![None], ..Pods::new(1) };
    let err = cpu(1, &pods, &[200], 100).unwrap_err();
    assert_eq!(err.to_string(), "missing request for cpu in container container of Pod test-pod-0");
}

#[test]
fn requests_sum_sidecars_or_one_container() {
    let mut pod = (*Pods::new(1).build("cpu")[0]).clone();
    let spec = pod.spec.as_mut().unwrap();
    let with = |name: &str, cpu: &str| Container {
        name: name.into(),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([("cpu".to_owned(), Quantity(cpu.into()))])),
            ..Default::default()
        }),
        ..Default::default()
    };
    spec.containers.push(with("second", "500m"));
    // A restartable init container (a sidecar) runs alongside and counts; a plain one does not.
    spec.init_containers = Some(vec![
        Container { restart_policy: Some("Always".into()), ..with("sidecar", "250m") },
        with("init", "4"),
    ]);
    let pods = vec![Arc::new(pod)];
    assert_eq!(calculate_pod_requests(&pods, "", "cpu").unwrap()["test-pod-0"], 1750);
    assert_eq!(calculate_pod_requests(&pods, "second", "cpu").unwrap()["test-pod-0"], 500);
    // ContainerResource: only that container's usage against only its request.
    let m = BTreeMap::from([(
        "test-pod-0".to_owned(),
        PodMetric { timestamp: now(), window: Duration::from_secs(60), value: 1000 },
    )]);
    let r = calc().resource_replicas(1, 100, "cpu", "second", &pods, m, now()).unwrap();
    assert_eq!((r.replicas, r.utilization), (2, 200));
}

#[test]
fn warm_up_rules() {
    let c = calc();
    let group = |start: Timestamp, ready: &str, transition: Timestamp, sample: Timestamp| {
        let mut pod = (*Pods::new(1).build("cpu")[0]).clone();
        let st = pod.status.as_mut().unwrap();
        st.start_time = Some(Time(start));
        let cond = &mut st.conditions.as_mut().unwrap()[0];
        cond.status = ready.into();
        cond.last_transition_time = Some(Time(transition));
        let m = BTreeMap::from([(
            "test-pod-0".to_owned(),
            PodMetric { timestamp: sample, window: Duration::from_secs(30), value: 1 },
        )]);
        let g = group_pods(
            &[Arc::new(pod)],
            &m,
            "cpu",
            c.cpu_initialization_period,
            c.delay_of_initial_readiness_status,
            now(),
        );
        g.ready == 1
    };
    let s = |secs: i64| now() - SignedDuration::from_secs(secs);
    // Within the initialization period: ready, and sampled a full window after becoming so.
    assert!(group(s(100), "True", s(60), s(10)));
    // ... but a sample from before a window had passed since becoming ready is start-up.
    assert!(!group(s(100), "True", s(60), s(40)));
    assert!(!group(s(100), "False", s(200), s(0)));
    // After the period: unready only if it never was ready (last change within the delay).
    assert!(group(s(600), "False", s(300), s(0)));
    assert!(!group(s(600), "False", s(595), s(0)));
    assert!(group(s(600), "True", s(595), s(0)));
}

#[test]
fn object_and_external_counts() {
    let c = calc();
    let pods = Pods { readiness: vec!["True", "True", "False"], ..Pods::new(3) };
    let pods = pods.build("cpu");
    // Object Value: the ready pods scaled by the ratio; within tolerance, no change.
    assert_eq!(c.usage_ratio_replica_count(3, 2.0, &pods), Ok(4));
    assert_eq!(c.usage_ratio_replica_count(3, 1.05, &pods), Ok(3));
    // From zero replicas: scale to ceil(ratio).
    assert_eq!(c.usage_ratio_replica_count(0, 2.2, &[]), Ok(3));
    assert_eq!(c.usage_ratio_replica_count(0, 0.0, &[]), Ok(0));
    assert!(c.usage_ratio_replica_count(2, 2.0, &[]).is_err());
    // Per pod: a total of 8000m against 1000m per pod, from 4 replicas → 8, 2000m each.
    assert_eq!(c.per_pod_replicas(4, 1000, 8000), (8, 2000));
    assert_eq!(c.per_pod_replicas(4, 1000, 4200), (4, 1050));
}

#[test]
fn utilization_ratio_skips_unknown_pods() {
    let requests = BTreeMap::from([("a".to_owned(), 1000), ("b".to_owned(), 1000)]);
    let mut m = metrics(&[]);
    for (name, v) in [("a", 500), ("b", 700), ("stranger", 9000)] {
        m.insert(name.into(), PodMetric { timestamp: now(), window: Duration::ZERO, value: v });
    }
    assert_eq!(resource_utilization_ratio(&m, &requests, 50), Ok((1.2, 60, 600)));
    let none = BTreeMap::from([("z".to_owned(), 1000)]);
    assert_eq!(resource_utilization_ratio(&m, &none, 50), Err(CalcError::NoMatchingMetrics));
}
