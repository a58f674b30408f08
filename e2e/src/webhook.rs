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
    rt: Option<tokio::runtime::Runtime>,
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
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let listener = rt.block_on(tokio::net::TcpListener::bind((ip, 0))).expect("bind webhook");
        let addr = listener.local_addr().expect("addr");
        let calls = Arc::new(AtomicUsize::new(0));
        let handler: Arc<Handler> = Arc::new(handler);
        let counter = calls.clone();
        rt.spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                let acceptor = acceptor.clone();
                let handler = handler.clone();
                let calls = counter.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let service = hyper::service::service_fn(move |req| {
                        let handler = handler.clone();
                        let calls = calls.clone();
                        async move { Ok::<_, Infallible>(serve(req, &*handler, &calls).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        WebhookServer { rt: Some(rt), addr, calls }
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
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        self.stop();
    }
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
