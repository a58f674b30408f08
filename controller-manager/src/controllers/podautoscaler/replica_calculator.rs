//! Upstream's `ReplicaCalculator`: from the pods the target selects and the metrics
//! reported for them, the replica count that brings the metric to its target.
//!
//! Every function here is pure over its inputs (pods, metrics, `now`), so the cases of
//! upstream's `replica_calculator_test.go` run without a cluster. The shape of each
//! calculation:
//!
//! 1. Pods being deleted or `Failed` are ignored; `Pending` pods, and for CPU pods still
//!    warming up (see [`group_pods`]), are *unready*; pods without a metric are *missing*.
//! 2. `usageRatio = current / target` over the ready pods with metrics. Within
//!    `tolerance` (0.1) of 1.0 nothing changes; with no unready or missing pods the answer
//!    is `ceil(usageRatio × readyPods)`.
//! 3. Otherwise the ratio is recomputed conservatively: missing pods count as using 100 %
//!    of their request (or the target, if that is higher) on a scale-down and 0 % on a
//!    scale-up; unready pods count as 0 % on a scale-up. If that flips the direction or
//!    lands within tolerance, the current count stays.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::podutil;

/// One pod's metric value (milli-units), when it was observed and over what window.
#[derive(Debug, Clone, PartialEq)]
pub struct PodMetric {
    pub timestamp: Timestamp,
    pub window: Duration,
    pub value: i64,
}

/// Pod name → metric, for the pods of one namespace.
pub type PodMetricsInfo = BTreeMap<String, PodMetric>;

/// Why no replica count could be computed; the messages are upstream's.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalcError {
    #[error("no pods returned by selector while calculating replica count")]
    NoPods,
    #[error("did not receive metrics for targeted pods (pods might be unready)")]
    NoMetricsForTargetedPods,
    #[error("missing request for {resource} in container {container} of Pod {pod}")]
    MissingRequest { resource: String, container: String, pod: String },
    #[error("no metrics returned matched known pods")]
    NoMatchingMetrics,
    #[error("unable to calculate ready pods: {0}")]
    ReadyPods(Box<CalcError>),
}

/// The controller's tuning, from its flags.
#[derive(Debug, Clone)]
pub struct ReplicaCalculator {
    /// `--horizontal-pod-autoscaler-tolerance`: a ratio this close to 1.0 is no change.
    pub tolerance: f64,
    /// `--horizontal-pod-autoscaler-cpu-initialization-period`.
    pub cpu_initialization_period: Duration,
    /// `--horizontal-pod-autoscaler-initial-readiness-delay`.
    pub delay_of_initial_readiness_status: Duration,
}

/// A resource-utilization answer: replicas, utilization (percent of request) and the
/// raw average value (milli-units) the status reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceReplicas {
    pub replicas: i32,
    pub utilization: i32,
    pub raw_utilization: i64,
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_add(SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)).unwrap_or(Timestamp::MAX)
}

/// The pods grouped as the calculation needs them: (ready pods with metrics, unready,
/// missing a metric, ignored).
#[derive(Debug, Default, PartialEq)]
pub struct Groups {
    pub ready: usize,
    pub unready: BTreeSet<String>,
    pub missing: BTreeSet<String>,
    pub ignored: BTreeSet<String>,
}

/// Upstream's `groupPods`. For CPU only, a pod is unready while its metric may still
/// reflect start-up: within the CPU initialization period of its start, when it is not
/// Ready or its sample predates one window after its last readiness transition; after
/// that period, when it is not Ready and has never been (its readiness last changed
/// within the initial readiness delay of its start).
pub fn group_pods(
    pods: &[Arc<Pod>],
    metrics: &PodMetricsInfo,
    resource: &str,
    cpu_initialization_period: Duration,
    delay_of_initial_readiness_status: Duration,
    now: Timestamp,
) -> Groups {
    let mut g = Groups::default();
    for pod in pods {
        let n = name(pod);
        if podutil::is_terminating(pod) || podutil::phase(pod) == "Failed" {
            g.ignored.insert(n);
            continue;
        }
        if podutil::phase(pod) == "Pending" {
            g.unready.insert(n);
            continue;
        }
        let Some(metric) = metrics.get(&n) else {
            g.missing.insert(n);
            continue;
        };
        if resource == "cpu" {
            let condition = podutil::condition(pod, "Ready");
            let start = pod.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0);
            let unready = match (condition, start) {
                (Some(c), Some(start)) => {
                    let transition = c.last_transition_time.as_ref().map(|t| t.0).unwrap_or_default();
                    if add(start, cpu_initialization_period) > now {
                        c.status == "False" || metric.timestamp < add(transition, metric.window)
                    } else {
                        c.status == "False" && add(start, delay_of_initial_readiness_status) > transition
                    }
                }
                _ => true,
            };
            if unready {
                g.unready.insert(n);
                continue;
            }
        }
        g.ready += 1;
    }
    g
}

/// Upstream's `calculatePodRequests`: each pod's summed request of `resource` over its
/// containers and restartable (sidecar) init containers, or only `container`'s.
pub fn calculate_pod_requests(
    pods: &[Arc<Pod>],
    container: &str,
    resource: &str,
) -> Result<BTreeMap<String, i64>, CalcError> {
    let mut requests = BTreeMap::new();
    for pod in pods {
        let Some(spec) = pod.spec.as_ref() else {
            requests.insert(name(pod), 0);
            continue;
        };
        let sidecars =
            spec.init_containers.iter().flatten().filter(|c| c.restart_policy.as_deref() == Some("Always"));
        let mut sum = 0i64;
        for c in spec.containers.iter().chain(sidecars) {
            if !container.is_empty() && c.name != container {
                continue;
            }
            let request =
                c.resources.as_ref().and_then(|r| r.requests.as_ref()).and_then(|r| r.get(resource));
            match request.and_then(|q| component_base::quantity::parse_milli(&q.0)) {
                Some(milli) => sum = sum.saturating_add(milli),
                None => {
                    return Err(CalcError::MissingRequest {
                        resource: resource.to_owned(),
                        container: c.name.clone(),
                        pod: name(pod),
                    });
                }
            }
        }
        requests.insert(name(pod), sum);
    }
    Ok(requests)
}

/// Upstream's `GetResourceUtilizationRatio`: (usage ratio, utilization in whole percent
/// of the requests, average raw value). Metrics of pods without a known request are
/// extraneous and skipped.
pub fn resource_utilization_ratio(
    metrics: &PodMetricsInfo,
    requests: &BTreeMap<String, i64>,
    target_utilization: i32,
) -> Result<(f64, i32, i64), CalcError> {
    let (mut metrics_total, mut requests_total, mut entries) = (0i64, 0i64, 0i64);
    for (pod, metric) in metrics {
        let Some(request) = requests.get(pod) else { continue };
        metrics_total += metric.value;
        requests_total += request;
        entries += 1;
    }
    if requests_total == 0 {
        return Err(CalcError::NoMatchingMetrics);
    }
    let utilization = (metrics_total * 100 / requests_total) as i32;
    Ok((f64::from(utilization) / f64::from(target_utilization), utilization, metrics_total / entries))
}

/// Upstream's `GetMetricUsageRatio`: (usage ratio, average usage).
pub fn metric_usage_ratio(metrics: &PodMetricsInfo, target_usage: i64) -> (f64, i64) {
    let total: i64 = metrics.values().map(|m| m.value).sum();
    let current = total / (metrics.len().max(1) as i64);
    (current as f64 / target_usage as f64, current)
}

fn remove(metrics: &mut PodMetricsInfo, pods: &BTreeSet<String>) {
    for p in pods {
        metrics.remove(p);
    }
}

fn zero_metric() -> PodMetric {
    PodMetric { timestamp: Timestamp::UNIX_EPOCH, window: Duration::ZERO, value: 0 }
}

fn ceil_i32(x: f64) -> i32 {
    x.ceil() as i32
}

impl ReplicaCalculator {
    fn within_tolerance(&self, ratio: f64) -> bool {
        (1.0 - ratio).abs() <= self.tolerance
    }

    /// Upstream's `GetResourceReplicas`: a target utilization (percent of request) of
    /// `resource`, summed over the pods' containers (or only `container`).
    #[allow(clippy::too_many_arguments)]
    pub fn resource_replicas(
        &self,
        current_replicas: i32,
        target_utilization: i32,
        resource: &str,
        container: &str,
        pods: &[Arc<Pod>],
        mut metrics: PodMetricsInfo,
        now: Timestamp,
    ) -> Result<ResourceReplicas, CalcError> {
        if pods.is_empty() {
            return Err(CalcError::NoPods);
        }
        let g = group_pods(
            pods,
            &metrics,
            resource,
            self.cpu_initialization_period,
            self.delay_of_initial_readiness_status,
            now,
        );
        remove(&mut metrics, &g.ignored);
        remove(&mut metrics, &g.unready);
        if metrics.is_empty() {
            return Err(CalcError::NoMetricsForTargetedPods);
        }
        let requests = calculate_pod_requests(pods, container, resource)?;
        let (usage_ratio, utilization, raw) =
            resource_utilization_ratio(&metrics, &requests, target_utilization)?;
        let answer = |replicas| ResourceReplicas { replicas, utilization, raw_utilization: raw };

        let scale_up_with_unready = !g.unready.is_empty() && usage_ratio > 1.0;
        if !scale_up_with_unready && g.missing.is_empty() {
            if self.within_tolerance(usage_ratio) {
                return Ok(answer(current_replicas));
            }
            return Ok(answer(ceil_i32(usage_ratio * g.ready as f64)));
        }
        if !g.missing.is_empty() {
            if usage_ratio < 1.0 {
                // A scale-down assumes the silent pods use all of their request, or the
                // target when that is above 100 %: never less than they might.
                let fallback = i64::from(target_utilization.max(100));
                for p in &g.missing {
                    let value = requests.get(p).copied().unwrap_or(0) * fallback / 100;
                    metrics.insert(p.clone(), PodMetric { value, ..zero_metric() });
                }
            } else if usage_ratio > 1.0 {
                for p in &g.missing {
                    metrics.insert(p.clone(), zero_metric());
                }
            }
        }
        if scale_up_with_unready {
            for p in &g.unready {
                metrics.insert(p.clone(), zero_metric());
            }
        }
        let (new_ratio, _, _) = resource_utilization_ratio(&metrics, &requests, target_utilization)?;
        if self.within_tolerance(new_ratio)
            || (usage_ratio < 1.0 && new_ratio > 1.0)
            || (usage_ratio > 1.0 && new_ratio < 1.0)
        {
            return Ok(answer(current_replicas));
        }
        let new_replicas = ceil_i32(new_ratio * metrics.len() as f64);
        if (new_ratio < 1.0 && new_replicas > current_replicas)
            || (new_ratio > 1.0 && new_replicas < current_replicas)
        {
            return Ok(answer(current_replicas));
        }
        Ok(answer(new_replicas))
    }

    /// Upstream's `calcPlainMetricReplicas`: a target average value per pod (milli-units),
    /// for resource AverageValue targets (`resource` is its name) and Pods metrics
    /// (`resource` empty). Returns (replicas, average usage).
    pub fn plain_metric_replicas(
        &self,
        mut metrics: PodMetricsInfo,
        current_replicas: i32,
        target_usage: i64,
        resource: &str,
        pods: &[Arc<Pod>],
        now: Timestamp,
    ) -> Result<(i32, i64), CalcError> {
        if pods.is_empty() {
            return Err(CalcError::NoPods);
        }
        let g = group_pods(
            pods,
            &metrics,
            resource,
            self.cpu_initialization_period,
            self.delay_of_initial_readiness_status,
            now,
        );
        remove(&mut metrics, &g.ignored);
        remove(&mut metrics, &g.unready);
        if metrics.is_empty() {
            return Err(CalcError::NoMetricsForTargetedPods);
        }
        let (usage_ratio, usage) = metric_usage_ratio(&metrics, target_usage);
        let scale_up_with_unready = !g.unready.is_empty() && usage_ratio > 1.0;
        if !scale_up_with_unready && g.missing.is_empty() {
            if self.within_tolerance(usage_ratio) {
                return Ok((current_replicas, usage));
            }
            return Ok((ceil_i32(usage_ratio * g.ready as f64), usage));
        }
        if !g.missing.is_empty() {
            if usage_ratio < 1.0 {
                for p in &g.missing {
                    metrics.insert(p.clone(), PodMetric { value: target_usage, ..zero_metric() });
                }
            } else if usage_ratio > 1.0 {
                for p in &g.missing {
                    metrics.insert(p.clone(), zero_metric());
                }
            }
        }
        if scale_up_with_unready {
            for p in &g.unready {
                metrics.insert(p.clone(), zero_metric());
            }
        }
        let (new_ratio, _) = metric_usage_ratio(&metrics, target_usage);
        if self.within_tolerance(new_ratio)
            || (usage_ratio < 1.0 && new_ratio > 1.0)
            || (usage_ratio > 1.0 && new_ratio < 1.0)
        {
            return Ok((current_replicas, usage));
        }
        let new_replicas = ceil_i32(new_ratio * metrics.len() as f64);
        if (new_ratio < 1.0 && new_replicas > current_replicas)
            || (new_ratio > 1.0 && new_replicas < current_replicas)
        {
            return Ok((current_replicas, usage));
        }
        Ok((new_replicas, usage))
    }

    /// Upstream's `getUsageRatioReplicaCount`, for Object and External Value targets: the
    /// ready pods scaled by the ratio; from zero replicas, `ceil(ratio)` (scale from zero).
    pub fn usage_ratio_replica_count(
        &self,
        current_replicas: i32,
        usage_ratio: f64,
        pods: &[Arc<Pod>],
    ) -> Result<i32, CalcError> {
        if current_replicas == 0 {
            return Ok(ceil_i32(usage_ratio));
        }
        if self.within_tolerance(usage_ratio) {
            return Ok(current_replicas);
        }
        if pods.is_empty() {
            return Err(CalcError::ReadyPods(Box::new(CalcError::NoPods)));
        }
        let ready = pods.iter().filter(|p| podutil::phase(p) == "Running" && podutil::is_ready(p)).count();
        Ok(ceil_i32(usage_ratio * ready as f64))
    }

    /// Upstream's `GetObjectPerPodMetricReplicas` and `GetExternalPerPodMetricReplicas`:
    /// a total `usage` against a per-pod average target. Returns (replicas, per-pod usage).
    pub fn per_pod_replicas(&self, status_replicas: i32, target_average: i64, usage: i64) -> (i32, i64) {
        let mut replicas = status_replicas;
        let ratio = usage as f64 / (target_average as f64 * f64::from(replicas));
        if (1.0 - ratio).abs() > self.tolerance {
            replicas = ceil_i32(usage as f64 / target_average as f64);
        }
        (replicas, (usage as f64 / f64::from(status_replicas)).ceil() as i64)
    }
}

#[cfg(test)]
mod tests;
