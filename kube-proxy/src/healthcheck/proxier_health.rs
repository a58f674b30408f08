//! `/healthz` and `/livez` on `--healthz-bind-address`: 200 while every IP family's
//! proxier has synced what was queued within the health timeout (twice the sync period),
//! 503 once a queued change waits longer. `/healthz` also turns 503 when the Node is
//! being deleted or tainted for deletion by the cluster autoscaler, so load balancers
//! drain it first.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use k8s_openapi::api::core::v1::Node;
use parking_lot::Mutex;

use super::go_time_string;
use crate::metrics::{CodeLabel, Metrics};
use crate::nftables::Family;

/// The taint the cluster autoscaler puts on a Node it is about to delete.
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

#[derive(Debug, Default)]
struct State {
    /// Per family, when the last sync succeeded.
    last_updated: HashMap<Family, SystemTime>,
    /// Per family, when the oldest change not yet synced was queued.
    oldest_pending: HashMap<Family, Instant>,
}

pub struct ProxierHealth {
    timeout: Duration,
    state: Mutex<State>,
    node_eligible: AtomicBool,
    started: Instant,
    metrics: Metrics,
}

impl ProxierHealth {
    pub fn new(timeout: Duration, metrics: Metrics) -> Arc<ProxierHealth> {
        Arc::new(ProxierHealth {
            timeout,
            state: Mutex::new(State::default()),
            node_eligible: AtomicBool::new(true),
            started: Instant::now(),
            metrics,
        })
    }

    /// A change for `family` waits for a sync.
    pub fn queued_update(&self, family: Family) {
        self.state.lock().oldest_pending.entry(family).or_insert_with(Instant::now);
    }

    /// `family`'s rules reflect everything queued so far.
    pub fn updated(&self, family: Family) {
        let mut st = self.state.lock();
        st.oldest_pending.remove(&family);
        st.last_updated.insert(family, SystemTime::now());
    }

    /// Whether no queued change has waited longer than the timeout.
    pub fn is_healthy(&self) -> bool {
        let st = self.state.lock();
        st.oldest_pending.values().all(|t| t.elapsed() < self.timeout)
    }

    /// Notes whether the Node may receive traffic (not being deleted).
    pub fn sync_node(&self, node: &Node) {
        let deleting = node.metadata.deletion_timestamp.is_some();
        let tainted = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == TO_BE_DELETED_TAINT));
        self.node_eligible.store(!deleting && !tainted, Ordering::SeqCst);
    }

    fn monotonic(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// The answer to `path` (`/healthz` or `/livez`), as upstream words it.
    pub fn respond(&self, path: &str) -> Response<Full<Bytes>> {
        let healthy = self.is_healthy();
        let now = SystemTime::now();
        let last =
            self.state.lock().last_updated.values().min().copied().unwrap_or(self.started_system_time());
        let mono = self.monotonic();
        // A healthy proxy reports "now" as its last update, as older releases did.
        let last_updated = if healthy { go_time_string(now, Some(mono)) } else { go_time_string(last, None) };
        let current = go_time_string(now, Some(mono));
        let (status, body, family) = match path {
            "/healthz" => {
                let eligible = self.node_eligible.load(Ordering::SeqCst);
                let ok = healthy && eligible;
                (
                    ok,
                    format!(
                        "{{\"lastUpdated\": {:?},\"currentTime\": {:?}, \"nodeEligible\": {eligible}}}",
                        last_updated, current
                    ),
                    &self.metrics.proxy_healthz_total,
                )
            }
            "/livez" => (
                healthy,
                format!("{{\"lastUpdated\": {:?},\"currentTime\": {:?}}}", last_updated, current),
                &self.metrics.proxy_livez_total,
            ),
            _ => {
                return Response::builder()
                    .status(StatusCode::NOT_FOUND)
                    .header("Content-Type", "text/plain; charset=utf-8")
                    .body(Full::new(Bytes::from_static(b"404 page not found\n")))
                    .expect("static response");
            }
        };
        let code = if status { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
        family.get_or_create(&CodeLabel { code: code.as_u16().to_string() }).inc();
        Response::builder()
            .status(code)
            .header("Content-Type", "application/json")
            .header("X-Content-Type-Options", "nosniff")
            .body(Full::new(Bytes::from(body)))
            .expect("valid response")
    }

    fn started_system_time(&self) -> SystemTime {
        SystemTime::now() - self.started.elapsed()
    }

    /// Serves `/healthz` and `/livez` on `listener` until `shutdown`.
    pub async fn serve(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        shutdown: component_base::shutdown::Shutdown,
    ) {
        let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            let this = self.clone();
            async move { Ok::<_, Infallible>(this.respond(req.uri().path())) }
        });
        component_base::http::serve(listener, None, svc, shutdown, Default::default()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};

    async fn body(r: Response<Full<Bytes>>) -> (u16, String) {
        let status = r.status().as_u16();
        let b = r.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(b.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn unhealthy_when_a_queued_change_waits_too_long() {
        let h = ProxierHealth::new(Duration::from_millis(50), Metrics::new());
        assert_eq!(body(h.respond("/healthz")).await.0, 200, "healthy while starting");
        h.queued_update(Family::Ip);
        assert!(h.is_healthy(), "not late yet");
        std::thread::sleep(Duration::from_millis(80));
        let (code, text) = body(h.respond("/livez")).await;
        assert_eq!(code, 503, "{text}");
        h.updated(Family::Ip);
        let (code, text) = body(h.respond("/healthz")).await;
        assert_eq!(code, 200);
        assert!(
            text.starts_with("{\"lastUpdated\": \"") && text.ends_with("\"nodeEligible\": true}"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn node_being_deleted_fails_healthz_only() {
        let h = ProxierHealth::new(Duration::from_secs(60), Metrics::new());
        let node = Node {
            spec: Some(NodeSpec {
                taints: Some(vec![Taint {
                    key: TO_BE_DELETED_TAINT.into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        h.sync_node(&node);
        assert_eq!(body(h.respond("/healthz")).await.0, 503);
        assert_eq!(body(h.respond("/livez")).await.0, 200);
    }
}
