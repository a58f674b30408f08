//! Runs a function on request, but never more often than `min_interval` allows (with a
//! burst), and at least every `max_interval` (upstream's `async.BoundedFrequencyRunner`).
//! Requests that arrive while the function runs collapse into one more run. The function
//! runs on a thread of its own, since syncs block on netlink and iptables-restore.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

#[derive(Debug, Default)]
struct State {
    /// A run was asked for with [`BoundedFrequencyRunner::run`].
    requested: bool,
    /// A run is due at this time ([`BoundedFrequencyRunner::retry_after`]).
    retry_at: Option<Instant>,
    stop: bool,
}

struct Inner {
    state: Mutex<State>,
    wake: Condvar,
}

/// Handle to the runner; clones share it.
#[derive(Clone)]
pub struct BoundedFrequencyRunner {
    inner: Arc<Inner>,
}

/// A token bucket allowing `burst` runs at once, refilled one per `min_interval`.
struct Limiter {
    min_interval: Duration,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Limiter {
    fn refill(&mut self, now: Instant) {
        if self.min_interval.is_zero() {
            return;
        }
        let gained = now.saturating_duration_since(self.last).as_secs_f64() / self.min_interval.as_secs_f64();
        self.tokens = (self.tokens + gained).min(self.burst);
        self.last = now;
    }

    /// When a token is available (now, or later).
    fn available_at(&mut self, now: Instant) -> Instant {
        if self.min_interval.is_zero() {
            return now;
        }
        self.refill(now);
        if self.tokens >= 1.0 { now } else { now + self.min_interval.mul_f64(1.0 - self.tokens) }
    }

    fn take(&mut self, now: Instant) {
        if !self.min_interval.is_zero() {
            self.refill(now);
            self.tokens = (self.tokens - 1.0).max(0.0);
        }
    }
}

impl BoundedFrequencyRunner {
    /// Starts the runner's thread, named `name`. `f` first runs when asked to, or after
    /// `max_interval`.
    pub fn start(
        name: &str,
        mut f: impl FnMut() + Send + 'static,
        min_interval: Duration,
        max_interval: Duration,
        burst: u32,
    ) -> std::io::Result<(BoundedFrequencyRunner, JoinHandle<()>)> {
        let inner = Arc::new(Inner { state: Mutex::new(State::default()), wake: Condvar::new() });
        let runner = BoundedFrequencyRunner { inner: inner.clone() };
        let handle = std::thread::Builder::new().name(name.to_owned()).spawn(move || {
            let mut limiter = Limiter {
                min_interval,
                burst: f64::from(burst.max(1)),
                tokens: f64::from(burst.max(1)),
                last: Instant::now(),
            };
            let mut last_run = Instant::now();
            loop {
                {
                    let mut st = inner.state.lock();
                    loop {
                        if st.stop {
                            return;
                        }
                        let now = Instant::now();
                        let periodic = last_run + max_interval;
                        let mut due = periodic;
                        if let Some(r) = st.retry_at {
                            due = due.min(r);
                        }
                        if st.requested {
                            due = now;
                        }
                        // Whatever is due waits for a token as well.
                        let at = due.max(limiter.available_at(now));
                        if at <= now {
                            break;
                        }
                        inner.wake.wait_for(&mut st, at - now);
                    }
                    st.requested = false;
                    st.retry_at = None;
                }
                let now = Instant::now();
                limiter.take(now);
                last_run = now;
                f();
            }
        })?;
        Ok((runner, handle))
    }

    /// Asks for a run as soon as the rate limit allows.
    pub fn run(&self) {
        self.inner.state.lock().requested = true;
        self.inner.wake.notify_one();
    }

    /// Asks for a run after `interval` (sooner if one is due anyway).
    pub fn retry_after(&self, interval: Duration) {
        let mut st = self.inner.state.lock();
        let at = Instant::now() + interval;
        st.retry_at = Some(st.retry_at.map_or(at, |r| r.min(at)));
        drop(st);
        self.inner.wake.notify_one();
    }

    /// Stops the thread after the current run, if any.
    pub fn stop(&self) {
        self.inner.state.lock().stop = true;
        self.inner.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn wait_until(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn bursts_then_limits_and_collapses_requests() {
        let runs = Arc::new(AtomicUsize::new(0));
        let r2 = runs.clone();
        let (runner, handle) = BoundedFrequencyRunner::start(
            "test-runner",
            move || {
                r2.fetch_add(1, Ordering::SeqCst);
            },
            Duration::from_millis(300),
            Duration::from_secs(3600),
            2,
        )
        .unwrap();
        runner.run();
        wait_until("first run", || runs.load(Ordering::SeqCst) == 1);
        runner.run();
        wait_until("burst run", || runs.load(Ordering::SeqCst) == 2);
        // The bucket is empty: many requests make one run, after the minimum interval.
        let start = Instant::now();
        for _ in 0..10 {
            runner.run();
        }
        wait_until("limited run", || runs.load(Ordering::SeqCst) == 3);
        assert!(start.elapsed() >= Duration::from_millis(250), "{:?}", start.elapsed());
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(runs.load(Ordering::SeqCst), 3, "requests collapsed into one run");
        runner.stop();
        handle.join().unwrap();
    }

    #[test]
    fn runs_at_max_interval_and_on_retry() {
        let runs = Arc::new(AtomicUsize::new(0));
        let r2 = runs.clone();
        let (runner, handle) = BoundedFrequencyRunner::start(
            "test-runner",
            move || {
                r2.fetch_add(1, Ordering::SeqCst);
            },
            Duration::ZERO,
            Duration::from_millis(100),
            1,
        )
        .unwrap();
        wait_until("periodic runs", || runs.load(Ordering::SeqCst) >= 2);
        runner.stop();
        handle.join().unwrap();

        let runs = Arc::new(AtomicUsize::new(0));
        let r2 = runs.clone();
        let (runner, handle) = BoundedFrequencyRunner::start(
            "test-runner",
            move || {
                r2.fetch_add(1, Ordering::SeqCst);
            },
            Duration::ZERO,
            Duration::from_secs(3600),
            1,
        )
        .unwrap();
        runner.retry_after(Duration::from_millis(50));
        wait_until("retry", || runs.load(Ordering::SeqCst) == 1);
        runner.stop();
        handle.join().unwrap();
    }
}
