//! An HTTPS webhook for tests: a hyper server on its own loopback address with a serving
//! certificate from a [`TestCa`], answering AdmissionReviews (`admission.k8s.io`) and
//! ConversionReviews (`apiextensions.k8s.io`) with whatever the test's handler decides. It runs on its own tokio runtime so that
//! [`WebhookServer::stop`] closes the listener and every kept-alive connection at once, as
//! a crashed webhook would.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::certs::TestCa;

/// Largest review the server reads.
const MAX_BODY: usize = 4 << 20;

/// Decides one review: given the request path and the review's `request`, returns its
/// `response` (the server fills in `uid`).
pub type Handler = dyn Fn(&str, &Value) -> Value + Send + Sync;

pub struct WebhookServer {
    rt: ServerRuntime,
    pub addr: SocketAddr,
    calls: Arc<AtomicUsize>,
}

impl WebhookServer {
    /// Starts serving on a fresh loopback address.
    pub fn start(
        ca: &TestCa,
        handler: impl Fn(&str, &Value) -> Value + Send + Sync + 'static,
    ) -> WebhookServer {
        let ip = crate::loopback_ip();
        let serving = ca.serving_cert(IpAddr::V4(ip));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![rustls::pki_types::CertificateDer::from(serving.cert_der)],
                rustls::pki_types::PrivateKeyDer::Pkcs8(serving.key_der.into()),
            )
            .expect("serving certificate");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let (rt, listener) = ServerRuntime::bind(SocketAddr::new(IpAddr::V4(ip), 0));
        let addr = listener.local_addr().expect("addr");
        let calls = Arc::new(AtomicUsize::new(0));
        let handler: Arc<Handler> = Arc::new(handler);
        let counter = calls.clone();
        spawn_https(&rt, listener, acceptor, move |req| {
            let handler = handler.clone();
            let calls = counter.clone();
            async move { serve(req, &*handler, &calls).await }
        });
        WebhookServer { rt, addr, calls }
    }

    /// `https://<ip>:<port><path>`, for a webhook's `clientConfig.url`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// How many reviews have been answered.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Stops serving: the listener and all open connections close.
    pub fn stop(&mut self) {
        self.rt.stop();
    }
}

/// A test server's own tokio runtime: stopping (or dropping) it closes the listener and
/// every open connection at once, as a crashed server would.
pub(crate) struct ServerRuntime(Option<tokio::runtime::Runtime>);

impl ServerRuntime {
    /// A one-worker runtime, with a listener bound to `addr` on it.
    pub(crate) fn bind(addr: SocketAddr) -> (ServerRuntime, tokio::net::TcpListener) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let listener = rt.block_on(tokio::net::TcpListener::bind(addr)).expect("bind test server");
        (ServerRuntime(Some(rt)), listener)
    }

    pub(crate) fn stop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for ServerRuntime {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Accepts TLS connections on `listener` for ever (on `rt`), answering every HTTP/1.1
/// request on them with `respond`.
pub(crate) fn spawn_https<F, Fut>(
    rt: &ServerRuntime,
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    respond: F,
) where
    F: Fn(Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let Some(rt) = rt.0.as_ref() else { return };
    rt.spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { continue };
            let acceptor = acceptor.clone();
            let respond = respond.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let service = hyper::service::service_fn(move |req| {
                    let answer = respond(req);
                    async move { Ok::<_, Infallible>(answer.await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
}

async fn serve(
    req: Request<hyper::body::Incoming>,
    handler: &Handler,
    calls: &AtomicUsize,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return reply(StatusCode::BAD_REQUEST, format!("reading body: {e}").into()),
    };
    let review: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return reply(StatusCode::BAD_REQUEST, format!("not JSON: {e}").into()),
    };
    let request = &review["request"];
    let mut response = handler(&path, request);
    response["uid"] = request["uid"].clone();
    calls.fetch_add(1, Ordering::SeqCst);
    // The review comes back as the kind and version it was sent in.
    let api_version = review["apiVersion"].as_str().unwrap_or("admission.k8s.io/v1");
    let kind = review["kind"].as_str().unwrap_or("AdmissionReview");
    let out = json!({"apiVersion": api_version, "kind": kind, "response": response});
    reply(StatusCode::OK, out.to_string().into())
}

fn reply(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    r
}
