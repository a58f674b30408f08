//! The scheduling queue, as upstream's `PriorityQueue`: pods waiting to be tried are in
//! *activeQ* (highest priority first, then oldest); pods that failed wait out a per-pod
//! exponential backoff in *backoffQ*; pods no node could take park in the
//! *unschedulable* pool until a cluster event that could help one of the plugins that
//! rejected them (or, at the latest, after five minutes). Gated pods (PreEnqueue said no)
//! wait until their own update.
//!
//! A pod is *in flight* from `pop` until the scheduler reports the outcome; an event that
//! arrives meanwhile sends a failed pod to backoff instead of the unschedulable pool, so
//! the event that would have helped it is not lost.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::framework::PodInfo;
use crate::framework::events::ALL as ALL_EVENTS;
use crate::framework::runtime::Profile;

/// How long a pod may sit in the unschedulable pool without any helpful event.
pub const UNSCHEDULABLE_MAX_STAY: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Place {
    Active,
    Backoff(Instant),
    Unschedulable(Instant),
    Gated,
    InFlight,
}

struct Entry {
    pod: Arc<PodInfo>,
    place: Place,
    /// Queue order among equal priorities; renewed each time the pod (re-)enters activeQ.
    seq: u64,
    attempts: u32,
    /// When the pod was first seen, for the scheduling SLI.
    first_seen: Instant,
    /// When the last attempt ended (backoff counts from here).
    last_failure: Option<Instant>,
    /// Plugins that rejected the pod in its last attempt.
    rejected_by: HashSet<&'static str>,
}

/// A pod handed to a scheduling cycle.
#[derive(Clone)]
pub struct QueuedPod {
    pub pod: Arc<PodInfo>,
    pub attempts: u32,
    pub first_seen: Instant,
}

/// Pods per queue, for `scheduler_pending_pods`.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Pending {
    pub active: usize,
    pub backoff: usize,
    pub unschedulable: usize,
    pub gated: usize,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    active: BTreeSet<(Reverse<i32>, u64, String)>,
    backoff: BTreeSet<(Instant, String)>,
    /// Keys of the entries in the unschedulable pool, so events need not scan every entry.
    unschedulable: HashSet<String>,
    seq: u64,
    /// The events seen since the last `pop`: the window in which the pod now in its
    /// scheduling cycle could have missed the event that helps it.
    events_since_pop: u32,
    /// The pod popped last, whose scheduling cycle `events_since_pop` is about.
    last_popped: String,
    closed: bool,
}

pub struct SchedulingQueue {
    inner: Mutex<Inner>,
    notify: Notify,
    profiles: Arc<HashMap<String, Profile>>,
    initial_backoff: Duration,
    max_backoff: Duration,
}

impl Inner {
    fn unlink(&mut self, key: &str) {
        self.unschedulable.remove(key);
        let Some(e) = self.entries.get(key) else { return };
        match e.place {
            Place::Active => {
                self.active.remove(&(Reverse(e.pod.priority), e.seq, key.to_owned()));
            }
            Place::Backoff(at) => {
                self.backoff.remove(&(at, key.to_owned()));
            }
            _ => {}
        }
    }

    fn make_active(&mut self, key: &str) {
        self.unlink(key);
        self.seq += 1;
        let seq = self.seq;
        if let Some(e) = self.entries.get_mut(key) {
            e.place = Place::Active;
            e.seq = seq;
            self.active.insert((Reverse(e.pod.priority), seq, key.to_owned()));
        }
    }

    fn make_backoff(&mut self, key: &str, until: Instant) {
        self.unlink(key);
        if let Some(e) = self.entries.get_mut(key) {
            e.place = Place::Backoff(until);
            self.backoff.insert((until, key.to_owned()));
        }
    }
}

impl SchedulingQueue {
    pub fn new(
        profiles: Arc<HashMap<String, Profile>>,
        initial_backoff: Duration,
        max_backoff: Duration,
    ) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            notify: Notify::new(),
            profiles,
            initial_backoff,
            max_backoff,
        }
    }

    fn backoff_until(&self, e: &Entry) -> Instant {
        let exp = e.attempts.saturating_sub(1).min(16);
        let d = self.initial_backoff.saturating_mul(1 << exp).min(self.max_backoff);
        e.last_failure.map_or_else(Instant::now, |t| t + d)
    }

    fn admits(&self, pod: &PodInfo) -> bool {
        self.profiles.get(&pod.scheduler_name).is_none_or(|p| p.run_pre_enqueue(pod).is_ok())
    }

    /// A pending pod was added or updated (from the informer).
    pub fn add_or_update(&self, pod: Arc<PodInfo>) {
        let admitted = self.admits(&pod);
        let mut q = self.inner.lock();
        let key = pod.key.clone();
        let Some(e) = q.entries.get_mut(&key) else {
            q.entries.insert(
                key.clone(),
                Entry {
                    pod,
                    place: Place::Gated,
                    seq: 0,
                    attempts: 0,
                    first_seen: Instant::now(),
                    last_failure: None,
                    rejected_by: HashSet::new(),
                },
            );
            if admitted {
                q.make_active(&key);
                drop(q);
                self.notify.notify_one();
            }
            return;
        };
        let changed_spec = e.pod.pod.spec != pod.pod.spec || e.pod.labels != pod.labels;
        let priority_changed = e.pod.priority != pod.priority;
        let place = e.place;
        // Re-key an active entry whose priority moved.
        if priority_changed && place == Place::Active {
            q.unlink(&key);
        }
        let e = q.entries.get_mut(&key).expect("present");
        e.pod = pod;
        match place {
            Place::Active if priority_changed => q.make_active(&key),
            // Changed while being tried: if this attempt fails, the change may be what
            // makes it fit, so it must not wait in the unschedulable pool.
            Place::InFlight if changed_spec && q.last_popped == key => q.events_since_pop = ALL_EVENTS,
            Place::Gated if admitted => {
                q.make_active(&key);
                drop(q);
                self.notify.notify_one();
            }
            Place::Unschedulable(_) if changed_spec && admitted => {
                // The pod itself changed: it may fit now; it still serves its backoff.
                let until = self.backoff_until(q.entries.get(&key).expect("present"));
                if until <= Instant::now() {
                    q.make_active(&key);
                    drop(q);
                    self.notify.notify_one();
                } else {
                    q.make_backoff(&key, until);
                }
            }
            _ => {}
        }
    }

    /// The pod is gone or bound: forget it.
    pub fn delete(&self, key: &str) {
        let mut q = self.inner.lock();
        q.unlink(key);
        q.entries.remove(key);
    }

    /// After a re-list: forgets pods that are no longer pending.
    pub fn retain(&self, keys: &HashSet<String>) {
        let mut q = self.inner.lock();
        let gone: Vec<String> = q.entries.keys().filter(|k| !keys.contains(*k)).cloned().collect();
        for key in gone {
            q.unlink(&key);
            q.entries.remove(&key);
        }
    }

    /// Waits for the next pod of activeQ; `None` once closed.
    pub async fn pop(&self) -> Option<QueuedPod> {
        loop {
            let notified = self.notify.notified();
            {
                let mut q = self.inner.lock();
                if q.closed {
                    return None;
                }
                if let Some(first) = q.active.pop_first() {
                    q.events_since_pop = 0;
                    q.last_popped = first.2.clone();
                    let e = q.entries.get_mut(&first.2).expect("active entries exist");
                    e.place = Place::InFlight;
                    e.attempts += 1;
                    return Some(QueuedPod {
                        pod: e.pod.clone(),
                        attempts: e.attempts,
                        first_seen: e.first_seen,
                    });
                }
            }
            notified.await;
        }
    }

    pub fn close(&self) {
        self.inner.lock().closed = true;
        self.notify.notify_waiters();
    }

    /// The attempt of the pod popped last failed because no node fits (`rejected_by` the
    /// named plugins). If an event that may help it arrived during the attempt, it goes
    /// to backoff rather than waiting for another such event.
    pub fn add_unschedulable(&self, key: &str, rejected_by: HashSet<&'static str>) {
        let mut q = self.inner.lock();
        let missed = q.events_since_pop;
        let Some(e) = q.entries.get_mut(key) else { return };
        if e.place != Place::InFlight {
            return;
        }
        e.last_failure = Some(Instant::now());
        let interested =
            self.profiles.get(&e.pod.scheduler_name).map_or(ALL_EVENTS, |p| p.events_for(&rejected_by));
        e.rejected_by = rejected_by;
        if missed & interested != 0 {
            let until = self.backoff_until(e);
            q.make_backoff(key, until);
        } else {
            e.place = Place::Unschedulable(Instant::now());
            q.unschedulable.insert(key.to_owned());
        }
    }

    /// The attempt failed for another reason (an API error, a lost binding race): retry
    /// after the backoff.
    pub fn add_backoff(&self, key: &str) {
        let mut q = self.inner.lock();
        let Some(e) = q.entries.get_mut(key) else { return };
        if e.place != Place::InFlight {
            return;
        }
        e.last_failure = Some(Instant::now());
        e.rejected_by.clear();
        let until = self.backoff_until(e);
        q.make_backoff(key, until);
    }

    /// Moves unschedulable pods that `event` (a set of `framework::events`) may help.
    pub fn move_for_event(&self, event: u32) {
        let mut q = self.inner.lock();
        q.events_since_pop |= event;
        let now = Instant::now();
        let mut to_move = Vec::new();
        for key in &q.unschedulable {
            let Some(e) = q.entries.get(key) else { continue };
            {
                let interested = self
                    .profiles
                    .get(&e.pod.scheduler_name)
                    .map_or(ALL_EVENTS, |p| p.events_for(&e.rejected_by));
                if interested & event != 0 {
                    to_move.push((key.clone(), self.backoff_until(e)));
                }
            }
        }
        let woke = to_move.iter().any(|(_, until)| *until <= now);
        for (key, until) in to_move {
            if until <= now { q.make_active(&key) } else { q.make_backoff(&key, until) }
        }
        drop(q);
        if woke {
            self.notify.notify_one();
        }
    }

    /// Moves pods whose backoff has expired to activeQ, and pods that stayed too long in
    /// the unschedulable pool to backoff/active. Called every second.
    pub fn flush(&self) {
        let mut q = self.inner.lock();
        let now = Instant::now();
        let mut woke = false;
        while let Some((at, key)) = q.backoff.first().cloned() {
            if at > now {
                break;
            }
            q.make_active(&key);
            woke = true;
        }
        let stale: Vec<String> = q
            .unschedulable
            .iter()
            .filter(|k| {
                q.entries.get(*k).is_some_and(
                    |e| matches!(e.place, Place::Unschedulable(since) if now.duration_since(since) >= UNSCHEDULABLE_MAX_STAY),
                )
            })
            .cloned()
            .collect();
        for key in stale {
            q.make_active(&key);
            woke = true;
        }
        drop(q);
        if woke {
            self.notify.notify_waiters();
            self.notify.notify_one();
        }
    }

    pub fn pending(&self) -> Pending {
        let q = self.inner.lock();
        let mut p = Pending::default();
        for e in q.entries.values() {
            match e.place {
                Place::Active | Place::InFlight => p.active += 1,
                Place::Backoff(_) => p.backoff += 1,
                Place::Unschedulable(_) => p.unschedulable += 1,
                Place::Gated => p.gated += 1,
            }
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::events;
    use crate::plugins::testing::pod;

    fn queue() -> SchedulingQueue {
        SchedulingQueue::new(Arc::new(HashMap::new()), Duration::from_millis(1), Duration::from_millis(10))
    }

    fn info(name: &str, priority: i32) -> Arc<PodInfo> {
        let mut p = pod(name, "0", "0");
        p.spec.as_mut().unwrap().priority = Some(priority);
        Arc::new(PodInfo::new(Arc::new(p)))
    }

    #[tokio::test]
    async fn higher_priority_first_then_fifo() {
        let q = queue();
        q.add_or_update(info("low", 0));
        q.add_or_update(info("high", 10));
        q.add_or_update(info("low2", 0));
        assert_eq!(q.pop().await.unwrap().pod.name, "high");
        assert_eq!(q.pop().await.unwrap().pod.name, "low");
        assert_eq!(q.pop().await.unwrap().pod.name, "low2");
    }

    #[tokio::test]
    async fn unschedulable_pods_wait_for_an_event() {
        let q = queue();
        q.add_or_update(info("p", 0));
        let popped = q.pop().await.unwrap();
        q.add_unschedulable(&popped.pod.key, HashSet::new());
        assert_eq!(q.pending().unschedulable, 1);
        std::thread::sleep(Duration::from_millis(5));
        q.move_for_event(events::NODE_ADD);
        q.flush();
        assert_eq!(q.pending().active, 1);
        assert_eq!(q.pop().await.unwrap().attempts, 2);
    }

    #[tokio::test]
    async fn an_event_during_the_attempt_is_not_lost() {
        let q = queue();
        q.add_or_update(info("p", 0));
        let popped = q.pop().await.unwrap();
        q.move_for_event(events::NODE_ADD);
        q.add_unschedulable(&popped.pod.key, HashSet::new());
        assert_eq!(q.pending().backoff, 1);
    }

    #[tokio::test]
    async fn only_events_the_rejecting_plugin_cares_about_move_a_pod() {
        use crate::plugins::node_resources_fit::{Args, NAME, NodeResourcesFit};
        let mut profile = Profile { name: "default-scheduler".into(), ..Profile::default() };
        profile.all.insert(NAME, Arc::new(NodeResourcesFit::new(Args::default()).unwrap()));
        let q = SchedulingQueue::new(
            Arc::new(HashMap::from([("default-scheduler".to_string(), profile)])),
            Duration::from_millis(1),
            Duration::from_millis(10),
        );
        q.add_or_update(info("p", 0));
        let popped = q.pop().await.unwrap();
        // A label change during the attempt cannot help a pod short of cpu.
        q.move_for_event(events::NODE_LABEL);
        q.add_unschedulable(&popped.pod.key, HashSet::from([NAME]));
        assert_eq!(q.pending().unschedulable, 1);
        q.move_for_event(events::NODE_TAINT);
        assert_eq!(q.pending().unschedulable, 1);
        std::thread::sleep(Duration::from_millis(5));
        q.move_for_event(events::ASSIGNED_POD_DELETE);
        assert_eq!(q.pending().active, 1);
    }

    #[tokio::test]
    async fn an_update_during_the_attempt_is_not_lost() {
        let q = queue();
        q.add_or_update(info("p", 0));
        let popped = q.pop().await.unwrap();
        let mut changed = (*popped.pod.pod).clone();
        changed.spec.as_mut().unwrap().node_selector = Some([("disk".to_string(), "ssd".to_string())].into());
        q.add_or_update(Arc::new(PodInfo::new(Arc::new(changed))));
        q.add_unschedulable(&popped.pod.key, HashSet::new());
        assert_eq!(q.pending().backoff, 1);
    }
}
