//! What a handler may need to know about the connection a request came on:
//! the peer address for logs and audit, and the verified client certificate
//! chain for x509 authentication (kube-apiserver, etcd's `--client-cert-auth`).

use std::net::SocketAddr;
use std::sync::Arc;

use http::Request;
use hyper::service::Service;
use rustls_pki_types::CertificateDer;

/// Inserted into every request's extensions by [`serve`](super::serve);
/// read it with `request.extensions().get::<ConnectionInfo>()` (tonic exposes
/// the same extensions on `tonic::Request`).
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    /// The client's address.
    pub peer: SocketAddr,
    /// Whether the connection is TLS.
    pub tls: bool,
    /// The client's certificate chain, leaf first, if it presented one; it has
    /// been verified against the server's client CA.
    pub client_certificates: Option<Arc<[CertificateDer<'static>]>>,
    /// The ALPN protocol agreed in the handshake.
    pub alpn: Option<Arc<[u8]>>,
}

/// Wraps the caller's service to tag each request with its [`ConnectionInfo`].
#[derive(Debug, Clone)]
pub(super) struct WithConnectionInfo<S> {
    pub(super) inner: S,
    pub(super) info: ConnectionInfo,
}

impl<S, B> Service<Request<B>> for WithConnectionInfo<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn call(&self, mut request: Request<B>) -> Self::Future {
        request.extensions_mut().insert(self.info.clone());
        self.inner.call(request)
    }
}
