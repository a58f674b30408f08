//! An extension API server for aggregation tests: HTTPS on a given address with a serving
//! certificate from a [`TestCa`], accepting only clients whose certificate a second CA
//! signed (the front-proxy CA, as a real extension server does through
//! `--requestheader-client-ca-file`), answering with whatever the test's handler decides
//! and keeping every request's path and `X-Remote-*` headers for the test to look at.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;

use crate::certs::TestCa;
use crate::webhook::{ServerRuntime, spawn_https};

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// `X-Remote-User`.
    pub user: Option<String>,
    /// Every `X-Remote-Group` value.
    pub groups: Vec<String>,
    /// Whether an `Authorization` header came along (it must not).
    pub authorization: bool,
}

/// Answers a request: status and JSON body.
pub type Handler = dyn Fn(&Seen) -> (StatusCode, Value) + Send + Sync;

pub struct ExtensionServer {
    rt: ServerRuntime,
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl ExtensionServer {
    /// Serves on `addr` as `name` (the certificate's DNS name), trusting client
    /// certificates of `client_ca` only.
    pub fn start(
        addr: SocketAddr,
        serving_ca: &TestCa,
        name: &str,
        client_ca: &Path,
        handler: impl Fn(&Seen) -> (StatusCode, Value) + Send + Sync + 'static,
    ) -> ExtensionServer {
        let serving = serving_ca.serving_cert_for(name);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(client_ca).expect("client CA") {
            roots.add(c.expect("client CA certificate")).expect("client CA root");
        }
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .expect("client verifier");
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![CertificateDer::from(serving.cert_der)],
                PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes()).expect("key"),
            )
            .expect("serving certificate");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let (rt, listener) = ServerRuntime::bind(addr);
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let log = seen.clone();
        spawn_https(&rt, listener, acceptor, move |req| {
            let answer = serve(req, &*handler, &log);
            async move { answer }
        });
        ExtensionServer { rt, addr, seen }
    }

    /// The requests served so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops serving: the listener and all open connections close.
    pub fn stop(&mut self) {
        self.rt.stop();
    }
}

fn serve(
    req: Request<hyper::body::Incoming>,
    handler: &Handler,
    log: &Mutex<Vec<Seen>>,
) -> Response<Full<Bytes>> {
    let headers = req.headers();
    let text = |v: &hyper::header::HeaderValue| v.to_str().unwrap_or_default().to_string();
    let seen = Seen {
        method: req.method().to_string(),
        path: req.uri().path().to_string(),
        user: headers.get("x-remote-user").map(text),
        groups: headers.get_all("x-remote-group").iter().map(text).collect(),
        authorization: headers.contains_key(hyper::header::AUTHORIZATION),
    };
    let (status, body) = handler(&seen);
    log.lock().unwrap_or_else(|e| e.into_inner()).push(seen);
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    r
}
