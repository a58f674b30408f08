//! Client-side rate limiting of API requests, as client-go's `--kube-api-qps` and
//! `--kube-api-burst`: a token bucket that lets `burst` requests through at once and then
//! `qps` per second. The wait happens in `poll_ready`, so requests queue in the client's
//! buffer in arrival order instead of racing for tokens.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// A token bucket shared by every clone of the layer's services.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// `qps` tokens per second, at most `burst` saved; a full bucket to start with.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self { qps, burst, state: Mutex::new((burst, Instant::now())) }
    }

    /// Takes one token, possibly on credit, and says how long to wait until it is owed.
    /// Like golang.org/x/time/rate's `Reserve`, debts queue later callers behind earlier.
    pub fn reserve(&self) -> Duration {
        let mut s = self.state.lock();
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(s.1).as_secs_f64();
        s.0 = (s.0 + elapsed * self.qps).min(self.burst) - 1.0;
        s.1 = now;
        if s.0 >= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(-s.0 / self.qps) }
    }
}

/// Wraps a service so that each request first takes a token.
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    bucket: Arc<TokenBucket>,
}

impl RateLimitLayer {
    /// A limit of `qps` requests per second with bursts of `burst`.
    pub fn new(qps: f64, burst: u32) -> Self {
        Self { bucket: Arc::new(TokenBucket::new(qps, burst)) }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit { inner, bucket: self.bucket.clone(), wait: None, ready: false }
    }
}

/// The service [`RateLimitLayer`] builds.
pub struct RateLimit<S> {
    inner: S,
    bucket: Arc<TokenBucket>,
    wait: Option<Pin<Box<Sleep>>>,
    /// A token has been taken for the next `call`.
    ready: bool,
}

impl<S, R> Service<R> for RateLimit<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        if !self.ready {
            if self.wait.is_none() {
                let delay = self.bucket.reserve();
                if !delay.is_zero() {
                    self.wait = Some(Box::pin(tokio::time::sleep(delay)));
                }
            }
            if let Some(wait) = self.wait.as_mut() {
                if wait.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
            }
            self.ready = true;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> S::Future {
        self.ready = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn burst_then_steady_rate() {
        let b = TokenBucket::new(10.0, 3);
        for _ in 0..3 {
            assert_eq!(b.reserve(), Duration::ZERO);
        }
        // The fourth owes one token: 100 ms at 10 qps; the fifth queues behind it.
        assert_eq!(b.reserve(), Duration::from_millis(100));
        assert_eq!(b.reserve(), Duration::from_millis(200));
        tokio::time::advance(Duration::from_secs(1)).await;
        // 10 tokens accrued, 2 were owed, capped at the burst.
        assert_eq!(b.reserve(), Duration::ZERO);
    }
}
