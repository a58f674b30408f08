//! The scheduler's Prometheus metrics, named and labelled as upstream's.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use component_base::metrics::Registry;

type Labels = Vec<(&'static str, String)>;

/// Upstream's buckets: 1 ms doubling 15 times.
fn attempt_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// 10 ms doubling 20 times.
fn sli_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 20))
}

pub struct Metrics {
    schedule_attempts: Family<Labels, Counter>,
    attempt_duration: Family<Labels, Histogram, fn() -> Histogram>,
    pending_pods: Family<Labels, Gauge>,
    preemption_attempts: Counter,
    preemption_victims: Histogram,
    sli_duration: Family<Labels, Histogram, fn() -> Histogram>,
    pub leader: Family<Labels, Gauge>,
}

/// The outcome label of `scheduler_schedule_attempts_total`.
#[derive(Debug, Clone, Copy)]
pub enum Result {
    Scheduled,
    Unschedulable,
    Error,
}

impl Result {
    fn as_str(self) -> &'static str {
        match self {
            Result::Scheduled => "scheduled",
            Result::Unschedulable => "unschedulable",
            Result::Error => "error",
        }
    }
}

impl Metrics {
    pub fn new(registry: &Registry) -> Self {
        let m = Self {
            schedule_attempts: Family::default(),
            attempt_duration: Family::new_with_constructor(attempt_buckets),
            pending_pods: Family::default(),
            preemption_attempts: Counter::default(),
            preemption_victims: Histogram::new(exponential_buckets(1.0, 2.0, 7)),
            sli_duration: Family::new_with_constructor(sli_buckets),
            leader: Family::default(),
        };
        // prometheus-client appends `_total` to counters itself.
        registry.register(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem.",
            m.schedule_attempts.clone(),
        );
        registry.register(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            m.attempt_duration.clone(),
        );
        registry.register(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the scheduler never attempted to schedule because they are gated.",
            m.pending_pods.clone(),
        );
        registry.register(
            "scheduler_preemption_attempts",
            "Total preemption attempts in the cluster till now",
            m.preemption_attempts.clone(),
        );
        registry.register(
            "scheduler_preemption_victims",
            "Number of selected preemption victims",
            m.preemption_victims.clone(),
        );
        registry.register(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue and might involve multiple scheduling attempts.",
            m.sli_duration.clone(),
        );
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
            m.leader.clone(),
        );
        m
    }

    pub fn attempt(&self, profile: &str, result: Result, seconds: f64) {
        let labels = vec![("profile", profile.to_owned()), ("result", result.as_str().to_owned())];
        self.schedule_attempts.get_or_create(&labels).inc();
        self.attempt_duration.get_or_create(&labels).observe(seconds);
    }

    pub fn scheduled(&self, attempts: u32, seconds: f64) {
        let attempts = if attempts >= 15 { "15+".to_owned() } else { attempts.to_string() };
        self.sli_duration.get_or_create(&vec![("attempts", attempts)]).observe(seconds);
    }

    pub fn preemption(&self, victims: usize) {
        self.preemption_attempts.inc();
        self.preemption_victims.observe(victims as f64);
    }

    pub fn set_pending(&self, p: crate::queue::Pending) {
        for (queue, n) in [
            ("active", p.active),
            ("backoff", p.backoff),
            ("unschedulable", p.unschedulable),
            ("gated", p.gated),
        ] {
            self.pending_pods.get_or_create(&vec![("queue", queue.to_owned())]).set(n as i64);
        }
    }
}
