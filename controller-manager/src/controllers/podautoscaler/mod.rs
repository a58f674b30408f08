//! The horizontal pod autoscaler (upstream's `pkg/controller/podautoscaler`): every sync
//! period, for each autoscaling/v2 HorizontalPodAutoscaler, read the target's `scale`
//! subresource, compute a replica count from each metric ([`replica_calculator`] over
//! [`metrics`]), take the largest, stabilize and rate-limit it ([`behavior`]), write the
//! Scale when it differs, and report it all in the HPA's status and conditions:
//!
//! - `AbleToScale`: whether the Scale could be read and written (`SucceededGetScale`,
//!   `FailedGetScale`, `SucceededRescale`, `FailedUpdateScale`), or why the count is held
//!   (`ScaleUpStabilized`, `ScaleDownStabilized`, `ReadyForNewScale`).
//! - `ScalingActive`: whether a count could be computed (`ValidMetricFound`,
//!   `FailedGet<Type>Metric`, `InvalidSelector`, `AmbiguousSelector`, `ScalingDisabled`).
//! - `ScalingLimited`: whether min/max or the scale rate cut the count (`TooFewReplicas`,
//!   `TooManyReplicas`, `ScaleUpLimit`, `ScaleDownLimit`, `DesiredWithinRange`).
//!
//! Each HPA is synced every `--horizontal-pod-autoscaler-sync-period`, and changes to it
//! are picked up at the next period too (upstream's fixed-interval rate limiter): the
//! autoscaler polls metrics, so reacting faster would only add load.

pub mod behavior;
pub mod metrics;
pub mod replica_calculator;
pub mod scale;
pub mod selector;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::autoscaling::v2::{
    ContainerResourceMetricStatus, ExternalMetricStatus, HorizontalPodAutoscaler,
    HorizontalPodAutoscalerCondition, HorizontalPodAutoscalerStatus, MetricIdentifier, MetricSpec,
    MetricStatus, MetricTarget, MetricValueStatus, ObjectMetricStatus, PodsMetricStatus,
    ResourceMetricStatus,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use parking_lot::Mutex;

use component_base::labels::{Labels, Selector};

use crate::controller::{self, Context, Error};
use crate::events::Type;
use crate::informers::{Event, Informer, key_of};
use crate::workqueue::Queue;

use behavior::{Behavior, History};
use metrics::MetricsClient;
use replica_calculator::ReplicaCalculator;

/// The event source upstream's recorder names.
const COMPONENT: &str = "horizontal-pod-autoscaler";

const ABLE_TO_SCALE: &str = "AbleToScale";
const SCALING_ACTIVE: &str = "ScalingActive";
const SCALING_LIMITED: &str = "ScalingLimited";

struct Controller {
    client: kube::Client,
    ctx: Context,
    hpas: Arc<Informer<HorizontalPodAutoscaler>>,
    pods: Arc<Informer<Pod>>,
    queue: Arc<Queue>,
    metrics: MetricsClient,
    calc: ReplicaCalculator,
    resync: Duration,
    downscale_stabilization: Duration,
    /// Per HPA key: recent recommendations and scale events (see [`behavior`]).
    history: Mutex<HashMap<String, History>>,
    /// Per HPA key, the pod selector of its target as last seen: two HPAs whose pods
    /// overlap would fight, so such a selector is refused (`AmbiguousSelector`).
    selectors: Mutex<HashMap<String, Selector>>,
    /// Keys with a delayed add pending, so repeated events schedule one sync per period
    /// (client-go's delaying queue keeps one waiting entry per key).
    waiting: Mutex<HashSet<String>>,
}

pub fn start(ctx: &Context) -> Result<(), Error> {
    let hpas = ctx.informers.get::<HorizontalPodAutoscaler>();
    let pods = ctx.informers.get::<Pod>();
    let queue = ctx.queue("horizontalpodautoscaler");
    let o = &ctx.options;
    let ctrl = Arc::new(Controller {
        client: ctx.client.clone(),
        ctx: ctx.clone(),
        hpas: hpas.clone(),
        pods,
        queue: queue.clone(),
        metrics: MetricsClient::new(ctx.client.clone()),
        calc: ReplicaCalculator {
            tolerance: o.horizontal_pod_autoscaler_tolerance,
            cpu_initialization_period: o.horizontal_pod_autoscaler_cpu_initialization_period,
            delay_of_initial_readiness_status: o.horizontal_pod_autoscaler_initial_readiness_delay,
        },
        resync: o.horizontal_pod_autoscaler_sync_period,
        downscale_stabilization: o.horizontal_pod_autoscaler_downscale_stabilization,
        history: Mutex::default(),
        selectors: Mutex::default(),
        waiting: Mutex::default(),
    });
    {
        let c = ctrl.clone();
        hpas.add_handler(move |ev| match ev {
            Event::Add(h) | Event::Update(_, h) => c.enqueue(key_of(&***h)),
            Event::Delete(h) => {
                let key = key_of(&***h);
                c.queue.forget(&key);
                c.selectors.lock().remove(&key);
            }
        });
    }
    let c = ctrl.clone();
    controller::run_workers(ctx, queue, o.concurrent_horizontal_pod_autoscaler_syncs, move |key| {
        let c = c.clone();
        async move {
            c.sync(&key).await;
            Ok(())
        }
    });
    Ok(())
}

/// Upstream's `setConditionInList`: the condition's transition time moves only when its
/// status does.
fn set_condition(
    status: &mut HorizontalPodAutoscalerStatus,
    type_: &str,
    value: &str,
    reason: &str,
    message: String,
) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let i = match conditions.iter().position(|c| c.type_ == type_) {
        Some(i) => i,
        None => {
            conditions
                .push(HorizontalPodAutoscalerCondition { type_: type_.to_owned(), ..Default::default() });
            conditions.len() - 1
        }
    };
    let c = &mut conditions[i];
    if c.status != value {
        c.last_transition_time = Some(Time(Timestamp::now()));
    }
    c.status = value.to_owned();
    c.reason = Some(reason.to_owned());
    c.message = Some(message);
}

/// A ScalingActive=False condition for a metric that could not be computed.
struct Unable {
    reason: &'static str,
    message: String,
}

/// One metric's answer: the proposed count and how the metric is described in the
/// rescale reason.
struct Proposal {
    replicas: i32,
    metric: String,
}

/// Why one metric gave no answer: the condition to set and the error to report.
struct MetricFailure {
    condition: Unable,
    err: String,
}

fn milli_quantity(milli: i64) -> Quantity {
    Quantity(component_base::quantity::format_milli(milli, false))
}

fn target_milli(q: Option<&Quantity>) -> Option<i64> {
    q.and_then(|q| component_base::quantity::parse_milli(&q.0))
}

/// The text of an API error as client-go prints it (the status message).
fn api_error_text(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        other => other.to_string(),
    }
}

impl Controller {
    fn event(&self, hpa: &HorizontalPodAutoscaler, kind: Type, reason: &str, message: String) {
        self.ctx.recorder.event(COMPONENT, hpa, kind, reason, message);
    }

    /// Queues `key` one sync period from now, unless it is already waiting.
    fn enqueue(self: &Arc<Self>, key: String) {
        if !self.waiting.lock().insert(key.clone()) {
            return;
        }
        let c = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(c.resync).await;
            c.waiting.lock().remove(&key);
            c.queue.add(key);
        });
    }

    async fn sync(self: &Arc<Self>, key: &str) {
        let Some(hpa) = self.hpas.get(key) else {
            tracing::info!(hpa = key, "horizontal pod autoscaler has been deleted");
            self.history.lock().remove(key);
            return;
        };
        if let Err(err) = self.reconcile(&hpa, key).await {
            tracing::info!(hpa = key, %err, "reconciling horizontal pod autoscaler");
        }
        // Upstream re-adds every key after each sync: the autoscaler is a poll loop.
        self.enqueue(key.to_owned());
    }

    async fn update_status_if_needed(
        &self,
        original: &HorizontalPodAutoscalerStatus,
        hpa: &HorizontalPodAutoscaler,
    ) -> Result<(), Error> {
        if hpa.status.as_ref() == Some(original) {
            return Ok(());
        }
        let (ns, name) = (
            hpa.metadata.namespace.as_deref().unwrap_or_default(),
            hpa.metadata.name.as_deref().unwrap_or_default(),
        );
        let api: Api<HorizontalPodAutoscaler> = Api::namespaced(self.client.clone(), ns);
        match api.replace_status(name, &PostParams::default(), hpa).await {
            Ok(_) => Ok(()),
            Err(err) => {
                self.event(hpa, Type::Warning, "FailedUpdateStatus", api_error_text(&err));
                Err(Error::Other(format!("failed to update status for {name}: {}", api_error_text(&err))))
            }
        }
    }

    /// Upstream's `reconcileAutoscaler`.
    async fn reconcile(&self, shared: &HorizontalPodAutoscaler, key: &str) -> Result<(), Error> {
        let mut hpa = shared.clone();
        let original = hpa.status.clone().unwrap_or_default();
        let mut status = original.clone();
        let spec = hpa.spec.clone().unwrap_or_default();
        let ns = hpa.metadata.namespace.clone().unwrap_or_default();
        let target = &spec.scale_target_ref;
        let reference = format!("{}/{}/{}", target.kind, ns, target.name);

        let resolved =
            scale::resolve(&self.client, target.api_version.as_deref().unwrap_or_default(), &target.kind)
                .await;
        let fetched = match resolved {
            Err(e) => Err(e.to_string()),
            Ok(ar) => scale::get(&self.client, &ar, &ns, &target.name)
                .await
                .map(|s| (ar, s))
                .map_err(|e| api_error_text(&e)),
        };
        let (ar, mut scale) = match fetched {
            Ok(x) => x,
            Err(err) => {
                self.event(&hpa, Type::Warning, "FailedGetScale", err.clone());
                set_condition(
                    &mut status,
                    ABLE_TO_SCALE,
                    "False",
                    "FailedGetScale",
                    format!("the HPA controller was unable to get the target's current scale: {err}"),
                );
                hpa.status = Some(status);
                if let Err(e) = self.update_status_if_needed(&original, &hpa).await {
                    tracing::info!(hpa = key, err = %e, "updating status");
                }
                return Err(Error::Other(format!(
                    "failed to query scale subresource for {reference}: {err}"
                )));
            }
        };
        set_condition(
            &mut status,
            ABLE_TO_SCALE,
            "True",
            "SucceededGetScale",
            "the HPA controller was able to get the target's current scale".into(),
        );
        let current = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        let now = Timestamp::now();
        self.history.lock().entry(key.to_owned()).or_default().record_initial(current, now);

        let min_replicas = spec.min_replicas.unwrap_or(1);
        let max_replicas = spec.max_replicas;
        let mut metric_statuses: Option<Vec<MetricStatus>> = None;
        let mut desired = 0;
        let mut rescale_reason = String::new();
        let mut result = Ok(());
        let rescale;
        if current == 0 && min_replicas != 0 {
            rescale = false;
            set_condition(
                &mut status,
                SCALING_ACTIVE,
                "False",
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero".into(),
            );
        } else if current > max_replicas {
            rescale_reason = "Current number of replicas above Spec.MaxReplicas".into();
            desired = max_replicas;
            rescale = desired != current;
        } else if current < min_replicas {
            rescale_reason = "Current number of replicas below Spec.MinReplicas".into();
            desired = min_replicas;
            rescale = desired != current;
        } else {
            hpa.status = Some(status);
            let computed = self
                .compute_replicas_for_metrics(&mut hpa, &scale, spec.metrics.as_deref().unwrap_or_default())
                .await;
            status = hpa.status.take().unwrap_or_default();
            let (proposed, metric, statuses, err) = match computed {
                Err((statuses, err)) => {
                    status.current_replicas = Some(current);
                    status.current_metrics = statuses;
                    hpa.status = Some(status);
                    if let Err(e) = self.update_status_if_needed(&original, &hpa).await {
                        tracing::info!(hpa = key, err = %e, "updating status");
                    }
                    self.event(&hpa, Type::Warning, "FailedComputeMetricsReplicas", err.clone());
                    return Err(Error::Other(format!(
                        "failed to compute desired number of replicas based on listed metrics for {reference}: {err}"
                    )));
                }
                Ok(x) => x,
            };
            // Some metrics failed but the others ask for more: scale on them, report the rest.
            if let Some(err) = err {
                result = Err(Error::Other(err));
            }
            metric_statuses = Some(statuses);
            tracing::debug!(hpa = key, proposed, metric = %metric, "proposing desired replicas");
            let mut rescale_metric = String::new();
            if proposed > desired {
                desired = proposed;
                rescale_metric = metric;
            }
            if desired > current {
                rescale_reason = format!("{rescale_metric} above target");
            }
            if desired < current {
                rescale_reason = "All metrics below target".into();
            }
            desired = match spec.behavior.as_ref() {
                None => self.normalize(&mut status, key, current, desired, min_replicas, max_replicas, now),
                Some(b) => {
                    let b = Behavior::from_spec(b, self.downscale_stabilization);
                    self.normalize_with_behavior(
                        &mut status,
                        key,
                        &b,
                        current,
                        desired,
                        min_replicas,
                        max_replicas,
                        now,
                    )
                }
            };
            rescale = desired != current;
        }

        if rescale {
            if let Some(s) = scale.spec.as_mut() {
                s.replicas = Some(desired);
            } else {
                scale.spec = Some(k8s_openapi::api::autoscaling::v1::ScaleSpec { replicas: Some(desired) });
            }
            if let Err(e) = self.write_scale(&ar, &ns, &scale).await {
                let err = api_error_text(&e);
                self.event(
                    &hpa,
                    Type::Warning,
                    "FailedRescale",
                    format!("New size: {desired}; reason: {rescale_reason}; error: {err}"),
                );
                set_condition(
                    &mut status,
                    ABLE_TO_SCALE,
                    "False",
                    "FailedUpdateScale",
                    format!("the HPA controller was unable to update the target scale: {err}"),
                );
                status.current_replicas = Some(current);
                status.current_metrics = metric_statuses;
                hpa.status = Some(status);
                if let Err(e) = self.update_status_if_needed(&original, &hpa).await {
                    tracing::info!(hpa = key, err = %e, "updating status");
                }
                return Err(Error::Other(format!("failed to rescale {reference}: {err}")));
            }
            set_condition(
                &mut status,
                ABLE_TO_SCALE,
                "True",
                "SucceededRescale",
                format!("the HPA controller was able to update the target scale to {desired}"),
            );
            self.event(
                &hpa,
                Type::Normal,
                "SuccessfulRescale",
                format!("New size: {desired}; reason: {rescale_reason}"),
            );
            let b = spec.behavior.as_ref().map(|b| Behavior::from_spec(b, self.downscale_stabilization));
            self.history.lock().entry(key.to_owned()).or_default().store_scale_event(
                b.as_ref(),
                current,
                desired,
                now,
            );
            tracing::info!(hpa = key, current, desired, reason = %rescale_reason, "successfully rescaled");
            status.last_scale_time = Some(Time(now));
        } else {
            tracing::debug!(hpa = key, desired, "decided not to scale");
            desired = current;
        }
        status.current_replicas = Some(current);
        status.desired_replicas = desired;
        status.current_metrics = metric_statuses;
        hpa.status = Some(status);
        self.update_status_if_needed(&original, &hpa).await?;
        result
    }

    async fn write_scale(&self, ar: &kube::api::ApiResource, ns: &str, scale: &Scale) -> kube::Result<Scale> {
        scale::update(&self.client, ar, ns, scale).await
    }

    /// Upstream's `normalizeDesiredReplicas` (no `spec.behavior`).
    #[allow(clippy::too_many_arguments)]
    fn normalize(
        &self,
        status: &mut HorizontalPodAutoscalerStatus,
        key: &str,
        current: i32,
        desired: i32,
        min_replicas: i32,
        max_replicas: i32,
        now: Timestamp,
    ) -> i32 {
        let stabilized = self.history.lock().entry(key.to_owned()).or_default().stabilize(
            self.downscale_stabilization,
            desired,
            now,
        );
        if stabilized != desired {
            set_condition(
                status,
                ABLE_TO_SCALE,
                "True",
                "ScaleDownStabilized",
                "recent recommendations were higher than current one, applying the highest recent recommendation"
                    .into(),
            );
        } else {
            set_condition(
                status,
                ABLE_TO_SCALE,
                "True",
                "ReadyForNewScale",
                "recommended size matches current size".into(),
            );
        }
        let limited = behavior::limit_without_behavior(current, stabilized, min_replicas, max_replicas);
        let value = if limited.replicas == stabilized { "False" } else { "True" };
        set_condition(status, SCALING_LIMITED, value, limited.reason, limited.message.into());
        limited.replicas
    }

    /// Upstream's `normalizeDesiredReplicasWithBehaviors`.
    #[allow(clippy::too_many_arguments)]
    fn normalize_with_behavior(
        &self,
        status: &mut HorizontalPodAutoscalerStatus,
        key: &str,
        b: &Behavior,
        current: i32,
        desired: i32,
        min_replicas: i32,
        max_replicas: i32,
        now: Timestamp,
    ) -> i32 {
        let mut history = self.history.lock();
        let h = history.entry(key.to_owned()).or_default();
        let (stabilized, reason, message) = h.stabilize_with_behavior(b, current, desired, now);
        if stabilized != desired {
            set_condition(status, ABLE_TO_SCALE, "True", reason, message.into());
        } else {
            set_condition(
                status,
                ABLE_TO_SCALE,
                "True",
                "ReadyForNewScale",
                "recommended size matches current size".into(),
            );
        }
        let limited = h.limit_with_behavior(b, current, stabilized, min_replicas, max_replicas, now);
        let value = if limited.replicas == stabilized { "False" } else { "True" };
        set_condition(status, SCALING_LIMITED, value, limited.reason, limited.message.into());
        limited.replicas
    }

    /// Upstream's `validateAndParseSelector`: the Scale's selector must be present,
    /// parse, and select pods no other HPA's target selects. Returns the selector and
    /// the pods it selects.
    fn validate_selector(
        &self,
        hpa: &mut HorizontalPodAutoscaler,
        selector: &str,
    ) -> Result<(Selector, Vec<Arc<Pod>>), String> {
        let status = hpa.status.get_or_insert_with(Default::default);
        if selector.is_empty() {
            set_condition(
                status,
                SCALING_ACTIVE,
                "False",
                "InvalidSelector",
                "the HPA target's scale is missing a selector".into(),
            );
            let msg = "selector is required".to_owned();
            self.event(hpa, Type::Warning, "SelectorRequired", msg.clone());
            return Err(msg);
        }
        let parsed = match selector::parse(selector) {
            Ok(s) => Selector::from_label_selector(Some(&s)),
            Err(e) => {
                let msg =
                    format!("couldn't convert selector into a corresponding internal selector object: {e}");
                set_condition(status, SCALING_ACTIVE, "False", "InvalidSelector", msg.clone());
                self.event(hpa, Type::Warning, "InvalidSelector", msg.clone());
                return Err(msg);
            }
        };
        let ns = hpa.metadata.namespace.clone().unwrap_or_default();
        let key = key_of(&*hpa);
        let pods = self.pods_matching(&ns, &parsed);
        let mut selecting: Vec<String> = {
            let mut selectors = self.selectors.lock();
            selectors.insert(key, parsed.clone());
            let prefix = format!("{ns}/");
            let empty = Labels::new();
            selectors
                .iter()
                .filter(|(k, _)| k.starts_with(&prefix))
                .filter(|(_, s)| pods.iter().any(|p| s.matches(p.metadata.labels.as_ref().unwrap_or(&empty))))
                .map(|(k, _)| k.clone())
                .collect()
        };
        if selecting.len() > 1 {
            selecting.sort();
            let msg = format!("pods by selector {selector} are controlled by multiple HPAs: {selecting:?}");
            let status = hpa.status.get_or_insert_with(Default::default);
            set_condition(status, SCALING_ACTIVE, "False", "AmbiguousSelector", msg.clone());
            self.event(hpa, Type::Warning, "AmbiguousSelector", msg.clone());
            return Err(msg);
        }
        Ok((parsed, pods))
    }

    fn pods_matching(&self, ns: &str, selector: &Selector) -> Vec<Arc<Pod>> {
        let empty = Labels::new();
        self.pods
            .list_namespace(ns)
            .into_iter()
            .filter(|p| selector.matches(p.metadata.labels.as_ref().unwrap_or(&empty)))
            .collect()
    }

    /// Upstream's `computeReplicasForMetrics`: the largest proposal over the metrics,
    /// with their statuses. Failing metrics are skipped, unless all fail or the others
    /// would scale down (a missing metric must not shrink the target): then the first
    /// failure's condition is set and the whole computation fails. Returns (replicas,
    /// metric, statuses, error of skipped metrics), or (statuses, error).
    #[allow(clippy::type_complexity)]
    async fn compute_replicas_for_metrics(
        &self,
        hpa: &mut HorizontalPodAutoscaler,
        scale: &Scale,
        specs: &[MetricSpec],
    ) -> Result<(i32, String, Vec<MetricStatus>, Option<String>), (Option<Vec<MetricStatus>>, String)> {
        let selector_text = scale.status.as_ref().and_then(|s| s.selector.clone()).unwrap_or_default();
        let (_, pods) = self.validate_selector(hpa, &selector_text).map_err(|e| (None, e))?;
        let spec_replicas = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        let status_replicas = scale.status.as_ref().map(|s| s.replicas).unwrap_or(0);
        // Upstream keeps a zero-valued status (type "") for each metric that failed.
        let mut statuses = vec![MetricStatus::default(); specs.len()];
        let (mut replicas, mut metric) = (0, String::new());
        let mut invalid = 0usize;
        let mut first_failure: Option<MetricFailure> = None;
        for (i, spec) in specs.iter().enumerate() {
            let ctx = MetricContext {
                hpa: &*hpa,
                spec_replicas,
                status_replicas,
                selector: &selector_text,
                pods: &pods,
            };
            match self.compute_replicas_for_metric(&ctx, spec, &mut statuses[i]).await {
                Ok(p) => {
                    if replicas == 0 || p.replicas > replicas {
                        replicas = p.replicas;
                        metric = p.metric;
                    }
                }
                Err(f) => {
                    // As upstream: the event carries the metric's own error, the returned
                    // error the wrapped one.
                    self.event(hpa, Type::Warning, f.condition.reason, f.condition.message.clone());
                    if first_failure.is_none() {
                        first_failure = Some(f);
                    }
                    invalid += 1;
                }
            }
        }
        let err = first_failure.as_ref().map(|f| {
            format!("invalid metrics ({invalid} invalid out of {}), first error is: {}", specs.len(), f.err)
        });
        if invalid >= specs.len() || (invalid > 0 && replicas < spec_replicas) {
            if let Some(f) = first_failure {
                let status = hpa.status.get_or_insert_with(Default::default);
                set_condition(
                    status,
                    SCALING_ACTIVE,
                    "False",
                    f.condition.reason,
                    format!("the HPA was unable to compute the replica count: {}", f.condition.message),
                );
            }
            return Err((
                Some(statuses),
                err.unwrap_or_else(|| "no metrics to compute a replica count from".into()),
            ));
        }
        let status = hpa.status.get_or_insert_with(Default::default);
        set_condition(
            status,
            SCALING_ACTIVE,
            "True",
            "ValidMetricFound",
            format!("the HPA was able to successfully calculate a replica count from {metric}"),
        );
        Ok((replicas, metric, statuses, err))
    }

    /// Upstream's `computeReplicasForMetric`, one metric source type per arm.
    async fn compute_replicas_for_metric(
        &self,
        c: &MetricContext<'_>,
        spec: &MetricSpec,
        status: &mut MetricStatus,
    ) -> Result<Proposal, MetricFailure> {
        let fail = |reason: &'static str, inner: String, outer: String| MetricFailure {
            condition: Unable { reason, message: inner },
            err: outer,
        };
        match spec.type_.as_str() {
            "Resource" => {
                let Some(src) = spec.resource.as_ref() else {
                    return Err(fail(
                        "FailedGetResourceMetric",
                        "missing resource metric source".into(),
                        String::new(),
                    ));
                };
                self.resource_metric(c, &src.name, "", &src.target)
                    .await
                    .map(|(p, current)| {
                        *status = MetricStatus {
                            type_: "Resource".into(),
                            resource: Some(ResourceMetricStatus { name: src.name.clone(), current }),
                            ..Default::default()
                        };
                        p
                    })
                    .map_err(|e| {
                        let outer = format!("failed to get {} resource metric value: {e}", src.name);
                        fail("FailedGetResourceMetric", e, outer)
                    })
            }
            "ContainerResource" => {
                let Some(src) = spec.container_resource.as_ref() else {
                    return Err(fail(
                        "FailedGetContainerResourceMetric",
                        "missing container resource metric source".into(),
                        String::new(),
                    ));
                };
                self.resource_metric(c, &src.name, &src.container, &src.target)
                    .await
                    .map(|(p, current)| {
                        *status = MetricStatus {
                            type_: "ContainerResource".into(),
                            container_resource: Some(ContainerResourceMetricStatus {
                                name: src.name.clone(),
                                container: src.container.clone(),
                                current,
                            }),
                            ..Default::default()
                        };
                        p
                    })
                    .map_err(|e| {
                        let outer = format!("failed to get {} container metric value: {e}", src.container);
                        fail("FailedGetContainerResourceMetric", e, outer)
                    })
            }
            "Pods" => {
                let Some(src) = spec.pods.as_ref() else {
                    return Err(fail(
                        "FailedGetPodsMetric",
                        "missing pods metric source".into(),
                        String::new(),
                    ));
                };
                let name = &src.metric.name;
                let result: Result<Proposal, String> = async {
                    let target = target_milli(src.target.average_value.as_ref()).ok_or_else(|| {
                        "invalid pods metric source: an average value target was not set".to_owned()
                    })?;
                    let metric_selector = selector::to_string(src.metric.selector.as_ref());
                    let (metrics, _) = self
                        .metrics
                        .raw_metric(name, c.namespace(), c.selector, &metric_selector)
                        .await
                        .map_err(|e| format!("unable to get metric {name}: {e}"))?;
                    let (replicas, usage) = self
                        .calc
                        .plain_metric_replicas(metrics, c.spec_replicas, target, "", c.pods, Timestamp::now())
                        .map_err(|e| e.to_string())?;
                    *status = MetricStatus {
                        type_: "Pods".into(),
                        pods: Some(PodsMetricStatus {
                            metric: MetricIdentifier {
                                name: name.clone(),
                                selector: src.metric.selector.clone(),
                            },
                            current: MetricValueStatus {
                                average_value: Some(milli_quantity(usage)),
                                ..Default::default()
                            },
                        }),
                        ..Default::default()
                    };
                    Ok(Proposal { replicas, metric: format!("pods metric {name}") })
                }
                .await;
                result.map_err(|e| {
                    fail("FailedGetPodsMetric", e.clone(), format!("failed to get pods metric value: {e}"))
                })
            }
            "Object" => {
                let Some(src) = spec.object.as_ref() else {
                    return Err(fail(
                        "FailedGetObjectMetric",
                        "missing object metric source".into(),
                        String::new(),
                    ));
                };
                let result = self.object_metric(c, src, status).await;
                result.map_err(|e| {
                    fail(
                        "FailedGetObjectMetric",
                        e.clone(),
                        format!("failed to get object metric value: {e}"),
                    )
                })
            }
            "External" => {
                let Some(src) = spec.external.as_ref() else {
                    return Err(fail(
                        "FailedGetExternalMetric",
                        "missing external metric source".into(),
                        String::new(),
                    ));
                };
                let name = src.metric.name.clone();
                let result = self.external_metric(c, src, status).await;
                result.map_err(|e| {
                    fail(
                        "FailedGetExternalMetric",
                        e.clone(),
                        format!("failed to get {name} external metric value: {e}"),
                    )
                })
            }
            other => {
                let e = format!("unknown metric source type {other:?}");
                Err(fail("InvalidMetricSourceType", e.clone(), e))
            }
        }
    }

    /// Upstream's `computeStatusForResourceMetricGeneric`: a Utilization target through
    /// `GetResourceReplicas`, an AverageValue target through `GetRawResourceReplicas`.
    async fn resource_metric(
        &self,
        c: &MetricContext<'_>,
        resource: &str,
        container: &str,
        target: &MetricTarget,
    ) -> Result<(Proposal, MetricValueStatus), String> {
        let fetch = || async {
            self.metrics
                .resource_metric(resource, c.namespace(), c.selector, container)
                .await
                .map(|(m, _)| m)
                .map_err(|e| format!("unable to get metrics for resource {resource}: {e}"))
        };
        if let Some(average) = target_milli(target.average_value.as_ref()) {
            let inner: Result<_, String> = async {
                let metrics = fetch().await?;
                self.calc
                    .plain_metric_replicas(
                        metrics,
                        c.spec_replicas,
                        average,
                        resource,
                        c.pods,
                        Timestamp::now(),
                    )
                    .map_err(|e| e.to_string())
            }
            .await;
            let (replicas, raw) = inner.map_err(|e| format!("failed to get {resource} usage: {e}"))?;
            let current =
                MetricValueStatus { average_value: Some(milli_quantity(raw)), ..Default::default() };
            return Ok((Proposal { replicas, metric: format!("{resource} resource") }, current));
        }
        let Some(utilization) = target.average_utilization else {
            return Err("invalid resource metric source: neither an average utilization target nor an average value (usage) target was set".into());
        };
        let inner: Result<_, String> = async {
            let metrics = fetch().await?;
            self.calc
                .resource_replicas(
                    c.spec_replicas,
                    utilization,
                    resource,
                    container,
                    c.pods,
                    metrics,
                    Timestamp::now(),
                )
                .map_err(|e| e.to_string())
        }
        .await;
        let r = inner.map_err(|e| format!("failed to get {resource} utilization: {e}"))?;
        let metric = if container.is_empty() {
            format!("{resource} resource utilization (percentage of request)")
        } else {
            format!("{resource} container resource utilization (percentage of request)")
        };
        let current = MetricValueStatus {
            average_utilization: Some(r.utilization),
            average_value: Some(milli_quantity(r.raw_utilization)),
            value: None,
        };
        Ok((Proposal { replicas: r.replicas, metric }, current))
    }

    /// Upstream's `computeStatusForObjectMetric`.
    async fn object_metric(
        &self,
        c: &MetricContext<'_>,
        src: &k8s_openapi::api::autoscaling::v2::ObjectMetricSource,
        status: &mut MetricStatus,
    ) -> Result<Proposal, String> {
        let name = &src.metric.name;
        let object = &src.described_object;
        let metric_selector = selector::to_string(src.metric.selector.as_ref());
        let ns = c.namespace();
        let fetch = || async {
            let ar =
                scale::resolve(&self.client, object.api_version.as_deref().unwrap_or_default(), &object.kind)
                    .await
                    .map_err(|e| e.to_string());
            let result = match ar {
                Ok(ar) => self
                    .metrics
                    .object_metric(name, ns, object, &ar.plural, &metric_selector)
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e),
            };
            result.map_err(|e| {
                format!("unable to get metric {name}: {} on {ns} {}/{e}", object.kind, object.name)
            })
        };
        let identifier = MetricIdentifier { name: name.clone(), selector: src.metric.selector.clone() };
        if src.target.type_ == "Value"
            && let Some(target) = target_milli(src.target.value.as_ref())
        {
            let (usage, _) = fetch().await?;
            let ratio = usage as f64 / target as f64;
            let replicas = self
                .calc
                .usage_ratio_replica_count(c.spec_replicas, ratio, c.pods)
                .map_err(|e| e.to_string())?;
            *status = MetricStatus {
                type_: "Object".into(),
                object: Some(ObjectMetricStatus {
                    described_object: object.clone(),
                    metric: identifier,
                    current: MetricValueStatus { value: Some(milli_quantity(usage)), ..Default::default() },
                }),
                ..Default::default()
            };
            return Ok(Proposal { replicas, metric: format!("{} metric {name}", object.kind) });
        }
        if src.target.type_ == "AverageValue"
            && let Some(target) = target_milli(src.target.average_value.as_ref())
        {
            let (usage, _) = fetch().await?;
            let (replicas, per_pod) = self.calc.per_pod_replicas(c.status_replicas, target, usage);
            *status = MetricStatus {
                type_: "Object".into(),
                object: Some(ObjectMetricStatus {
                    described_object: object.clone(),
                    metric: identifier,
                    current: MetricValueStatus {
                        average_value: Some(milli_quantity(per_pod)),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            };
            return Ok(Proposal { replicas, metric: format!("external metric {name}({metric_selector})") });
        }
        Err("invalid object metric source: neither a value target nor an average value target was set".into())
    }

    /// Upstream's `computeStatusForExternalMetric`.
    async fn external_metric(
        &self,
        c: &MetricContext<'_>,
        src: &k8s_openapi::api::autoscaling::v2::ExternalMetricSource,
        status: &mut MetricStatus,
    ) -> Result<Proposal, String> {
        let name = &src.metric.name;
        let metric_selector = selector::to_string(src.metric.selector.as_ref());
        let ns = c.namespace();
        let fetch = || async {
            self.metrics
                .external_metric(name, ns, &metric_selector)
                .await
                .map(|(values, _)| values.iter().sum::<i64>())
                .map_err(|e| format!("unable to get external metric {ns}/{name}/{metric_selector}: {e}"))
        };
        let identifier = MetricIdentifier { name: name.clone(), selector: src.metric.selector.clone() };
        let description = format!("external metric {name}({metric_selector})");
        if let Some(target) = target_milli(src.target.average_value.as_ref()) {
            let usage = fetch().await?;
            let (replicas, per_pod) = self.calc.per_pod_replicas(c.status_replicas, target, usage);
            *status = MetricStatus {
                type_: "External".into(),
                external: Some(ExternalMetricStatus {
                    metric: identifier,
                    current: MetricValueStatus {
                        average_value: Some(milli_quantity(per_pod)),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            };
            return Ok(Proposal { replicas, metric: description });
        }
        if let Some(target) = target_milli(src.target.value.as_ref()) {
            let usage = fetch().await?;
            let ratio = usage as f64 / target as f64;
            let replicas = self
                .calc
                .usage_ratio_replica_count(c.spec_replicas, ratio, c.pods)
                .map_err(|e| e.to_string())?;
            *status = MetricStatus {
                type_: "External".into(),
                external: Some(ExternalMetricStatus {
                    metric: identifier,
                    current: MetricValueStatus { value: Some(milli_quantity(usage)), ..Default::default() },
                }),
                ..Default::default()
            };
            return Ok(Proposal { replicas, metric: description });
        }
        Err("invalid external metric source: neither a value target nor an average value target was set"
            .into())
    }
}

/// What every metric of one HPA is computed against.
struct MetricContext<'a> {
    hpa: &'a HorizontalPodAutoscaler,
    /// The Scale's `spec.replicas`.
    spec_replicas: i32,
    /// The Scale's `status.replicas`.
    status_replicas: i32,
    /// The Scale's selector, as the metrics APIs take it.
    selector: &'a str,
    /// The pods it selects.
    pods: &'a [Arc<Pod>],
}

impl MetricContext<'_> {
    fn namespace(&self) -> &str {
        self.hpa.metadata.namespace.as_deref().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_keep_their_transition_time_until_the_status_changes() {
        let mut status = HorizontalPodAutoscalerStatus::default();
        set_condition(&mut status, ABLE_TO_SCALE, "True", "SucceededGetScale", "a".into());
        set_condition(&mut status, SCALING_ACTIVE, "False", "FailedGetResourceMetric", "b".into());
        let old = Time("2020-01-01T00:00:00Z".parse().unwrap());
        for c in status.conditions.as_mut().unwrap() {
            c.last_transition_time = Some(old.clone());
        }
        // Same status, new reason: the time stays.
        set_condition(&mut status, SCALING_ACTIVE, "False", "FailedGetPodsMetric", "c".into());
        // New status: the time moves.
        set_condition(&mut status, ABLE_TO_SCALE, "False", "FailedGetScale", "d".into());
        let cs = status.conditions.unwrap();
        assert_eq!(
            cs.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            vec![ABLE_TO_SCALE, SCALING_ACTIVE]
        );
        assert_ne!(cs[0].last_transition_time, Some(old.clone()));
        assert_eq!((cs[0].reason.as_deref(), cs[0].message.as_deref()), (Some("FailedGetScale"), Some("d")));
        assert_eq!(cs[1].last_transition_time, Some(old));
        assert_eq!(cs[1].reason.as_deref(), Some("FailedGetPodsMetric"));
    }

    #[test]
    fn metric_quantities_are_canonical() {
        assert_eq!(milli_quantity(250).0, "250m");
        assert_eq!(milli_quantity(2000).0, "2");
        assert_eq!(target_milli(Some(&Quantity("1.5".into()))), Some(1500));
    }
}
