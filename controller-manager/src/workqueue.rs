//! The rate-limited work queue each controller drains, with client-go's guarantees: a key
//! queued many times is processed once; a key is never handed to two workers at once (a
//! re-add while it is processed waits until `done`); failed keys come back after a
//! per-item exponential backoff (5 ms doubling to 1000 s) bounded by an overall token
//! bucket (10 per second, bursts of 100), whichever is later.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use tokio::sync::Notify;
use tokio::time::Instant;

use component_base::client::ratelimit::TokenBucket;
use component_base::metrics::Registry;

type Labels = Vec<(&'static str, String)>;

fn duration_buckets() -> Histogram {
    // Upstream's: 10^-8 s growing tenfold to 10 s.
    Histogram::new(exponential_buckets(1e-8, 10.0, 10))
}

/// The `workqueue_*` metrics, labelled by queue name as upstream.
pub struct Metrics {
    depth: Family<Labels, Gauge>,
    adds: Family<Labels, Counter>,
    retries: Family<Labels, Counter>,
    queue_duration: Family<Labels, Histogram, fn() -> Histogram>,
    work_duration: Family<Labels, Histogram, fn() -> Histogram>,
}

impl Metrics {
    pub fn new(registry: &Registry) -> Arc<Self> {
        let m = Self {
            depth: Family::default(),
            adds: Family::default(),
            retries: Family::default(),
            queue_duration: Family::new_with_constructor(duration_buckets),
            work_duration: Family::new_with_constructor(duration_buckets),
        };
        registry.register("workqueue_depth", "Current depth of workqueue", m.depth.clone());
        registry.register("workqueue_adds", "Total number of adds handled by workqueue", m.adds.clone());
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            m.retries.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested.",
            m.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            m.work_duration.clone(),
        );
        Arc::new(m)
    }
}

#[derive(Default)]
struct State {
    queue: VecDeque<String>,
    /// Keys waiting to be processed (queued, or re-added while processing).
    dirty: HashSet<String>,
    processing: HashMap<String, Instant>,
    queued_at: HashMap<String, Instant>,
    /// Failures per key since it last succeeded.
    failures: HashMap<String, u32>,
    shutting_down: bool,
}

/// A named, rate-limited, de-duplicating queue of object keys.
pub struct Queue {
    name: String,
    labels: Labels,
    state: Mutex<State>,
    notify: Notify,
    bucket: TokenBucket,
    base_delay: Duration,
    max_delay: Duration,
    metrics: Option<Arc<Metrics>>,
}

impl Queue {
    /// A queue with client-go's default controller rate limiter.
    pub fn new(name: &str, metrics: Option<Arc<Metrics>>) -> Arc<Self> {
        Self::with_backoff(name, metrics, Duration::from_millis(5), Duration::from_secs(1000))
    }

    /// A queue whose per-item backoff runs from `base` to `max`.
    pub fn with_backoff(
        name: &str,
        metrics: Option<Arc<Metrics>>,
        base: Duration,
        max: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_owned(),
            labels: vec![("name", name.to_owned())],
            state: Mutex::default(),
            notify: Notify::new(),
            bucket: TokenBucket::new(10.0, 100),
            base_delay: base,
            max_delay: max,
            metrics,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Queues `key` unless it is already waiting.
    pub fn add(&self, key: impl Into<String>) {
        let key = key.into();
        let mut s = self.state.lock();
        if s.shutting_down || s.dirty.contains(&key) {
            return;
        }
        if let Some(m) = &self.metrics {
            m.adds.get_or_create(&self.labels).inc();
        }
        s.dirty.insert(key.clone());
        if s.processing.contains_key(&key) {
            // Picked up again by `done`: never two workers on one key.
            return;
        }
        s.queued_at.insert(key.clone(), Instant::now());
        s.queue.push_back(key);
        self.set_depth(&s);
        drop(s);
        self.notify.notify_one();
    }

    /// Queues `key` after `delay`.
    pub fn add_after(self: &Arc<Self>, key: impl Into<String>, delay: Duration) {
        let key = key.into();
        if delay.is_zero() {
            return self.add(key);
        }
        let q = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            q.add(key);
        });
    }

    /// Queues `key` after its backoff: the later of its per-item exponential delay and
    /// the overall token bucket.
    pub fn add_rate_limited(self: &Arc<Self>, key: impl Into<String>) {
        let key = key.into();
        let per_item = {
            let mut s = self.state.lock();
            let n = s.failures.entry(key.clone()).or_default();
            let exp = 2f64.powi((*n).min(40) as i32);
            *n += 1;
            self.base_delay.mul_f64(exp).min(self.max_delay)
        };
        if let Some(m) = &self.metrics {
            m.retries.get_or_create(&self.labels).inc();
        }
        let delay = per_item.max(self.bucket.reserve());
        self.add_after(key, delay);
    }

    /// Clears `key`'s backoff after a success.
    pub fn forget(&self, key: &str) {
        self.state.lock().failures.remove(key);
    }

    /// How many times `key` has failed since it last succeeded.
    pub fn num_requeues(&self, key: &str) -> u32 {
        self.state.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// The next key to process, or `None` once the queue is shut down.
    pub async fn get(&self) -> Option<String> {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.state.lock();
                if let Some(key) = s.queue.pop_front() {
                    s.dirty.remove(&key);
                    let now = Instant::now();
                    if let (Some(m), Some(at)) = (&self.metrics, s.queued_at.remove(&key)) {
                        m.queue_duration.get_or_create(&self.labels).observe((now - at).as_secs_f64());
                    }
                    s.processing.insert(key.clone(), now);
                    self.set_depth(&s);
                    return Some(key);
                }
                if s.shutting_down {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Marks `key` processed; if it was re-added meanwhile it is queued again now.
    pub fn done(&self, key: &str) {
        let mut s = self.state.lock();
        let started = s.processing.remove(key);
        if let (Some(m), Some(at)) = (&self.metrics, started) {
            m.work_duration.get_or_create(&self.labels).observe(at.elapsed().as_secs_f64());
        }
        if s.dirty.contains(key) && !s.shutting_down {
            s.queued_at.insert(key.to_owned(), Instant::now());
            s.queue.push_back(key.to_owned());
            self.set_depth(&s);
            drop(s);
            self.notify.notify_one();
        }
    }

    pub fn len(&self) -> usize {
        self.state.lock().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops handing out keys; workers finish what they hold.
    pub fn shut_down(&self) {
        self.state.lock().shutting_down = true;
        self.notify.notify_waiters();
    }

    fn set_depth(&self, s: &State) {
        if let Some(m) = &self.metrics {
            m.depth.get_or_create(&self.labels).set(s.queue.len() as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_worker_per_key_and_readd_while_processing() {
        let q = Queue::new("test", None);
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        let k = q.get().await.unwrap();
        assert_eq!(k, "a");
        // Re-added while processing: not handed out until done.
        q.add("a");
        assert_eq!(q.get().await.unwrap(), "b");
        assert!(q.is_empty());
        q.done("a");
        assert_eq!(q.get().await.unwrap(), "a");
        q.done("a");
        q.done("b");
        q.shut_down();
        assert_eq!(q.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_exponentially() {
        let q = Queue::new("test", None);
        for n in 0..4 {
            q.add_rate_limited("k");
            assert_eq!(q.num_requeues("k"), n + 1);
        }
        q.forget("k");
        assert_eq!(q.num_requeues("k"), 0);
        let start = Instant::now();
        q.add_rate_limited("k");
        assert_eq!(q.get().await.unwrap(), "k");
        assert!(start.elapsed() >= Duration::from_millis(5));
    }
}
