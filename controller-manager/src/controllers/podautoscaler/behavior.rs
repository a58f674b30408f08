//! What turns a metric's raw proposal into the replica count actually set: the
//! stabilization window over recent recommendations, the scale-rate policies over recent
//! scale events, and the min/max clamp — upstream's `normalizeDesiredReplicas` (no
//! `spec.behavior`) and `normalizeDesiredReplicasWithBehaviors`.
//!
//! The history is kept in memory per HPA, as upstream: a restarted controller starts
//! afresh (its first recommendation is the current size, so it never scales down
//! straight after a restart). Time is always passed in, so every case is a pure test.

use std::time::Duration;

use k8s_openapi::api::autoscaling::v2::{HPAScalingRules, HorizontalPodAutoscalerBehavior};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Without `spec.behavior`, a scale-up may at most double the replicas, or reach 4.
const SCALE_UP_LIMIT_FACTOR: f64 = 2.0;
const SCALE_UP_LIMIT_MINIMUM: f64 = 4.0;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Recommendation {
    replicas: i32,
    at: Timestamp,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct ScaleEvent {
    /// How many replicas were added (or removed); never negative.
    change: i32,
    at: Timestamp,
    /// Older than the longest policy period: its slot may be reused.
    outdated: bool,
}

/// One HPA's memory: its unstabilized recommendations and its recent scale events.
#[derive(Debug, Default, Clone)]
pub struct History {
    recommendations: Vec<Recommendation>,
    scale_up: Vec<ScaleEvent>,
    scale_down: Vec<ScaleEvent>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Select {
    Max,
    Min,
    Disabled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    Pods,
    Percent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub kind: PolicyKind,
    pub value: i32,
    pub period_seconds: i32,
}

/// One direction's `HPAScalingRules` with every field filled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    pub stabilization_window_seconds: i32,
    pub select: Select,
    pub policies: Vec<Policy>,
}

/// Both directions' rules: `spec.behavior` with upstream's defaults for what it leaves out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behavior {
    pub scale_up: Rules,
    pub scale_down: Rules,
}

fn rules_from(given: Option<&HPAScalingRules>, defaults: Rules) -> Rules {
    let Some(given) = given else { return defaults };
    let select = match given.select_policy.as_deref() {
        Some("Min") => Select::Min,
        Some("Disabled") => Select::Disabled,
        Some("Max") => Select::Max,
        _ => defaults.select,
    };
    let policies = match given.policies.as_ref() {
        Some(p) => p
            .iter()
            .map(|p| Policy {
                kind: if p.type_ == "Pods" { PolicyKind::Pods } else { PolicyKind::Percent },
                value: p.value,
                period_seconds: p.period_seconds,
            })
            .collect(),
        None => defaults.policies,
    };
    Rules {
        stabilization_window_seconds: given
            .stabilization_window_seconds
            .unwrap_or(defaults.stabilization_window_seconds),
        select,
        policies,
    }
}

impl Behavior {
    /// Upstream's `GenerateHPAScaleUpRules`/`GenerateHPAScaleDownRules`, and
    /// `maybeInitScaleDownStabilizationWindow`: a scale-down window left unset is
    /// `--horizontal-pod-autoscaler-downscale-stabilization`.
    pub fn from_spec(b: &HorizontalPodAutoscalerBehavior, downscale_stabilization: Duration) -> Self {
        let up = Rules {
            stabilization_window_seconds: 0,
            select: Select::Max,
            policies: vec![
                Policy { kind: PolicyKind::Pods, value: 4, period_seconds: 15 },
                Policy { kind: PolicyKind::Percent, value: 100, period_seconds: 15 },
            ],
        };
        let down = Rules {
            stabilization_window_seconds: downscale_stabilization.as_secs().min(i32::MAX as u64) as i32,
            select: Select::Max,
            policies: vec![Policy { kind: PolicyKind::Percent, value: 100, period_seconds: 15 }],
        };
        Behavior {
            scale_up: rules_from(b.scale_up.as_ref(), up),
            scale_down: rules_from(b.scale_down.as_ref(), down),
        }
    }
}

fn minus(now: Timestamp, d: Duration) -> Timestamp {
    now.checked_sub(SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)).unwrap_or(Timestamp::MIN)
}

fn seconds(s: i32) -> Duration {
    Duration::from_secs(s.max(0) as u64)
}

/// A normalized answer with the condition reason and message that explain it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limited {
    pub replicas: i32,
    pub reason: &'static str,
    pub message: &'static str,
}

const WITHIN_RANGE: Limited = Limited {
    replicas: 0,
    reason: "DesiredWithinRange",
    message: "the desired count is within the acceptable range",
};
const TOO_MANY: (&str, &str) =
    ("TooManyReplicas", "the desired replica count is more than the maximum replica count");
const TOO_FEW: (&str, &str) =
    ("TooFewReplicas", "the desired replica count is less than the minimum replica count");
const UP_LIMIT: (&str, &str) =
    ("ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate");
const DOWN_LIMIT: (&str, &str) =
    ("ScaleDownLimit", "the desired replica count is decreasing faster than the maximum scale rate");

fn limited(replicas: i32, (reason, message): (&'static str, &'static str)) -> Limited {
    Limited { replicas, reason, message }
}

impl History {
    /// Upstream's `recordInitialRecommendation`: the first recommendation is the current
    /// size, so a new (or restarted) controller waits out a window before scaling down.
    pub fn record_initial(&mut self, current: i32, now: Timestamp) {
        if self.recommendations.is_empty() {
            self.recommendations.push(Recommendation { replicas: current, at: now });
        }
    }

    /// Replaces one recommendation `stale` says is too old, else appends.
    fn record(&mut self, replicas: i32, now: Timestamp, stale: impl Fn(&Recommendation) -> bool) {
        let rec = Recommendation { replicas, at: now };
        match self.recommendations.iter().rposition(stale) {
            Some(i) => self.recommendations[i] = rec,
            None => self.recommendations.push(rec),
        }
    }

    /// Upstream's `stabilizeRecommendation` (no behavior): the highest recommendation of
    /// the downscale window, this one included.
    pub fn stabilize(&mut self, window: Duration, desired: i32, now: Timestamp) -> i32 {
        let cutoff = minus(now, window);
        let max = self
            .recommendations
            .iter()
            .filter(|r| r.at >= cutoff)
            .map(|r| r.replicas)
            .fold(desired, i32::max);
        self.record(desired, now, |r| r.at < cutoff);
        max
    }

    /// Upstream's `stabilizeRecommendationWithBehaviors`: the current size brought within
    /// [lowest recommendation of the scale-up window, highest of the scale-down window].
    /// Returns the stabilized count with the AbleToScale reason and message to use when it
    /// differs from `desired`.
    pub fn stabilize_with_behavior(
        &mut self,
        b: &Behavior,
        current: i32,
        desired: i32,
        now: Timestamp,
    ) -> (i32, &'static str, &'static str) {
        let up_cutoff = minus(now, seconds(b.scale_up.stabilization_window_seconds));
        let down_cutoff = minus(now, seconds(b.scale_down.stabilization_window_seconds));
        let (mut up, mut down) = (desired, desired);
        for r in &self.recommendations {
            if r.at > up_cutoff {
                up = up.min(r.replicas);
            }
            if r.at > down_cutoff {
                down = down.max(r.replicas);
            }
        }
        let recommendation = current.max(up).min(down);
        self.record(desired, now, |r| r.at < up_cutoff && r.at < down_cutoff);
        if desired >= current {
            (
                recommendation,
                "ScaleUpStabilized",
                "recent recommendations were lower than current one, applying the lowest recent recommendation",
            )
        } else {
            (
                recommendation,
                "ScaleDownStabilized",
                "recent recommendations were higher than current one, applying the highest recent recommendation",
            )
        }
    }

    /// Upstream's `convertDesiredReplicasWithBehaviorRate`: `desired` limited by the
    /// policies of its direction (over the events of each policy's period) and by
    /// min/max replicas.
    pub fn limit_with_behavior(
        &self,
        b: &Behavior,
        current: i32,
        desired: i32,
        min_replicas: i32,
        max_replicas: i32,
        now: Timestamp,
    ) -> Limited {
        if desired > current {
            let limit =
                scale_up_limit(current, &self.scale_up, &self.scale_down, &b.scale_up, now).max(current);
            let (max_allowed, why) =
                if max_replicas > limit { (limit, UP_LIMIT) } else { (max_replicas, TOO_MANY) };
            if desired > max_allowed {
                return limited(max_allowed, why);
            }
        } else if desired < current {
            let limit =
                scale_down_limit(current, &self.scale_up, &self.scale_down, &b.scale_down, now).min(current);
            let (min_allowed, why) =
                if min_replicas < limit { (limit, DOWN_LIMIT) } else { (min_replicas, TOO_FEW) };
            if desired < min_allowed {
                return limited(min_allowed, why);
            }
        }
        Limited { replicas: desired, ..WITHIN_RANGE }
    }

    /// Upstream's `storeScaleEvent`: remembered only under a behavior (the policies are
    /// its only reader), reusing a slot older than the direction's longest policy period.
    pub fn store_scale_event(&mut self, b: Option<&Behavior>, prev: i32, new: i32, now: Timestamp) {
        let Some(b) = b else { return };
        let (events, rules, change) = if new > prev {
            (&mut self.scale_up, &b.scale_up, new - prev)
        } else {
            (&mut self.scale_down, &b.scale_down, prev - new)
        };
        let longest = rules.policies.iter().map(|p| p.period_seconds).max().unwrap_or(0).max(0);
        let cutoff = minus(now, seconds(longest));
        for e in events.iter_mut() {
            if e.at < cutoff {
                e.outdated = true;
            }
        }
        let event = ScaleEvent { change, at: now, outdated: false };
        match events.iter().rposition(|e| e.outdated) {
            Some(i) => events[i] = event,
            None => events.push(event),
        }
    }
}

/// Upstream's `convertDesiredReplicasWithRules` (no behavior): min/max, and at most
/// double (or 4) on a scale-up, against a bogus metric spike.
pub fn limit_without_behavior(current: i32, desired: i32, min_replicas: i32, max_replicas: i32) -> Limited {
    let scale_up_limit = (SCALE_UP_LIMIT_FACTOR * f64::from(current)).max(SCALE_UP_LIMIT_MINIMUM) as i32;
    let (max_allowed, why) =
        if max_replicas > scale_up_limit { (scale_up_limit, UP_LIMIT) } else { (max_replicas, TOO_MANY) };
    if desired < min_replicas {
        limited(min_replicas, TOO_FEW)
    } else if desired > max_allowed {
        limited(max_allowed, why)
    } else {
        Limited { replicas: desired, ..WITHIN_RANGE }
    }
}

/// Replicas added (or removed) by the events strictly inside the last `period_seconds`.
fn change_in_period(period_seconds: i32, events: &[ScaleEvent], now: Timestamp) -> i32 {
    let cutoff = minus(now, seconds(period_seconds));
    events.iter().filter(|e| e.at > cutoff).map(|e| e.change).sum()
}

/// Upstream's `calculateScaleUpLimitWithScalingRules`: the most replicas the policies
/// allow now, each from the size at the start of its period.
fn scale_up_limit(
    current: i32,
    up: &[ScaleEvent],
    down: &[ScaleEvent],
    rules: &Rules,
    now: Timestamp,
) -> i32 {
    let (mut result, pick): (i32, fn(i32, i32) -> i32) = match rules.select {
        Select::Disabled => return current,
        Select::Min => (i32::MAX, i32::min),
        Select::Max => (i32::MIN, i32::max),
    };
    for p in &rules.policies {
        let start = current - change_in_period(p.period_seconds, up, now)
            + change_in_period(p.period_seconds, down, now);
        let proposed = match p.kind {
            PolicyKind::Pods => start + p.value,
            // Rounded up: a small target must still be able to grow.
            PolicyKind::Percent => (f64::from(start) * (1.0 + f64::from(p.value) / 100.0)).ceil() as i32,
        };
        result = pick(result, proposed);
    }
    result
}

/// Upstream's `calculateScaleDownLimitWithBehaviors`: the fewest replicas the policies
/// allow now. `Min` picks the smallest change, so the largest count.
fn scale_down_limit(
    current: i32,
    up: &[ScaleEvent],
    down: &[ScaleEvent],
    rules: &Rules,
    now: Timestamp,
) -> i32 {
    let (mut result, pick): (i32, fn(i32, i32) -> i32) = match rules.select {
        Select::Disabled => return current,
        Select::Min => (i32::MIN, i32::max),
        Select::Max => (i32::MAX, i32::min),
    };
    for p in &rules.policies {
        let start = current - change_in_period(p.period_seconds, up, now)
            + change_in_period(p.period_seconds, down, now);
        let proposed = match p.kind {
            PolicyKind::Pods => start - p.value,
            PolicyKind::Percent => (f64::from(start) * (1.0 - f64::from(p.value) / 100.0)) as i32,
        };
        result = pick(result, proposed);
    }
    result
}

#[cfg(test)]
mod tests;
