//! The accept loop: one task per connection, a semaphore bounding how many are
//! open, and a drain with a deadline on shutdown, so neither a flood of clients
//! nor a stuck one can keep a component from serving or from stopping.

use std::error::Error as StdError;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Body;
use hyper::body::Incoming;
use hyper::service::Service;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use super::authority_fixup::AuthorityFixup;
use super::connection::{ConnectionInfo, WithConnectionInfo};
use crate::shutdown::Shutdown;

type BoxError = Box<dyn StdError + Send + Sync>;

/// Pause after an accept error that is about this process (out of file
/// descriptors, say) rather than about one client, so the loop does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// Limits of [`serve`]. The defaults suit a metrics or health port; an API
/// port sets its own.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Connections open at once. Beyond it the server stops accepting, and new
    /// clients wait in the kernel's backlog instead of exhausting descriptors.
    pub max_connections: usize,
    /// After shutdown, how long open connections may take to finish their
    /// in-flight requests before they are closed.
    pub grace_period: Duration,
    /// How long a client may take over the TLS handshake, so that idle sockets
    /// cannot hold connection slots.
    pub tls_handshake_timeout: Duration,
    /// HTTP/2 streams per connection (etcd's `--max-concurrent-streams`);
    /// `None` keeps hyper's default.
    pub http2_max_concurrent_streams: Option<u32>,
    /// Accept an HTTP/2 `:authority` that holds a URL (`http://host:port`)
    /// by rewriting it to the authority inside before the HTTP/2 server sees
    /// it. grpc-go clients dialed with a URL as their target send such values
    /// (etcdctl 3.4 does, for `endpoint status`, `endpoint hashkv` and
    /// `defrag`) and grpc-go servers accept them, while h2 resets the stream
    /// with PROTOCOL_ERROR. Off by default: it puts a filter on every
    /// connection's reads that parses each inbound HTTP/2 HEADERS frame; see
    /// `authority_fixup` for what it does and does not cover.
    pub lenient_h2_authority: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            grace_period: Duration::from_secs(5),
            tls_handshake_timeout: Duration::from_secs(10),
            http2_max_concurrent_streams: None,
            lenient_h2_authority: false,
        }
    }
}

/// Serves HTTP/1.1 and HTTP/2 (detected per connection, so gRPC and plain HTTP
/// share the port) on `listener` until `shutdown` fires, over TLS when `tls` is
/// given. Upgrades (exec, port-forward) are supported.
///
/// `service` is any hyper service: `hyper::service::service_fn`, or a tower
/// service (tonic's `Routes`, say) wrapped in
/// `hyper_util::service::TowerToHyperService`; its body may be a boxed body
/// such as `UnsyncBoxBody`. Each request carries a [`ConnectionInfo`]
/// extension.
///
/// A failed handshake or an unparsable request closes only its connection
/// (logged at debug). On shutdown the listener is closed at once, open
/// connections are asked to finish (HTTP/2 GOAWAY, HTTP/1 close after the
/// current response), and whatever is left after the grace period is cut.
pub async fn serve<S, B>(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    service: S,
    shutdown: Shutdown,
    options: ServeOptions,
) where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let local = listener.local_addr().ok();
    tracing::debug!(?local, tls = tls.is_some(), "serving HTTP");
    let connection = Arc::new(Connection {
        builder: builder(&options),
        tls: tls.map(TlsAcceptor::from),
        tls_handshake_timeout: options.tls_handshake_timeout,
        lenient_h2_authority: options.lenient_h2_authority,
        shutdown: shutdown.clone(),
    });
    let slots = Arc::new(Semaphore::new(options.max_connections.max(1)));
    let mut open = JoinSet::new();
    let stopped = shutdown.wait();
    tokio::pin!(stopped);

    loop {
        while let Some(finished) = open.try_join_next() {
            log_task_end(finished);
        }
        let permit = tokio::select! {
            biased;
            () = &mut stopped => break,
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                // Never closed; if it were, no connection could be admitted again.
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            biased;
            () = &mut stopped => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let connection = connection.clone();
                let service = service.clone();
                open.spawn(async move { connection.run(stream, peer, service, permit).await });
            }
            Err(err) if is_per_connection(&err) => {
                tracing::debug!(%err, "accept failed for one client");
            }
            Err(err) => {
                tracing::warn!(%err, ?local, "accept failed; backing off");
                tokio::select! {
                    () = &mut stopped => break,
                    () = tokio::time::sleep(ACCEPT_ERROR_BACKOFF) => {}
                }
            }
        }
    }

    drop(listener);
    drain(open, options.grace_period).await;
    tracing::debug!(?local, "HTTP server stopped");
}

fn builder(options: &ServeOptions) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    // The timer lets hyper enforce its HTTP/1 header read timeout (slow clients).
    builder.http1().timer(TokioTimer::new());
    // The HTTP/2 max frame size stays at its default (16 KiB), which
    // `authority_fixup::MAX_FRAME_PAYLOAD` relies on.
    builder.http2().timer(TokioTimer::new()).max_concurrent_streams(options.http2_max_concurrent_streams);
    builder
}

/// Errors that concern only the client being accepted.
fn is_per_connection(err: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(err.kind(), ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted)
}

/// Waits for open connections up to `grace`, then closes the rest.
async fn drain(mut open: JoinSet<()>, grace: Duration) {
    let all_done = async {
        while let Some(finished) = open.join_next().await {
            log_task_end(finished);
        }
    };
    if tokio::time::timeout(grace, all_done).await.is_err() {
        tracing::debug!(remaining = open.len(), "grace period over; closing connections");
        open.shutdown().await;
    }
}

fn log_task_end(finished: Result<(), tokio::task::JoinError>) {
    if let Err(err) = finished
        && err.is_panic()
    {
        tracing::error!(%err, "HTTP connection task panicked");
    }
}

/// What every connection task shares.
struct Connection {
    builder: Builder<TokioExecutor>,
    tls: Option<TlsAcceptor>,
    tls_handshake_timeout: Duration,
    /// [`ServeOptions::lenient_h2_authority`].
    lenient_h2_authority: bool,
    shutdown: Shutdown,
}

impl Connection {
    /// Serves one connection; `_slot` is held until it closes.
    async fn run<S, B>(&self, stream: TcpStream, peer: SocketAddr, service: S, _slot: OwnedSemaphorePermit)
    where
        S: Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        // Small request/response exchanges (gRPC unary, health probes) should not
        // wait on Nagle's algorithm.
        let _ = stream.set_nodelay(true);
        let mut info = ConnectionInfo { peer, tls: false, client_certificates: None, alpn: None };
        let Some(acceptor) = &self.tls else {
            let service = WithConnectionInfo { inner: service, info };
            return self.http(stream, service, peer).await;
        };
        let handshake = tokio::time::timeout(self.tls_handshake_timeout, acceptor.accept(stream));
        let stream = tokio::select! {
            () = self.shutdown.wait() => return,
            handshake = handshake => match handshake {
                Ok(Ok(stream)) => stream,
                Ok(Err(err)) => {
                    tracing::debug!(%peer, %err, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            },
        };
        let (_, session) = stream.get_ref();
        info.tls = true;
        info.client_certificates = session
            .peer_certificates()
            .map(|certs| certs.iter().map(|cert| cert.clone().into_owned()).collect());
        info.alpn = session.alpn_protocol().map(Arc::from);
        let service = WithConnectionInfo { inner: service, info };
        self.http(stream, service, peer).await;
    }

    /// Runs the HTTP protocol on an established stream until the client leaves,
    /// an error closes it, or shutdown has let it finish.
    async fn http<I, S, B>(&self, io: I, service: S, peer: SocketAddr)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        if self.lenient_h2_authority {
            self.drive(AuthorityFixup::new(io), service, peer).await;
        } else {
            self.drive(io, service, peer).await;
        }
    }

    async fn drive<I, S, B>(&self, io: I, service: S, peer: SocketAddr)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        let conn = self.builder.serve_connection_with_upgrades(TokioIo::new(io), service);
        tokio::pin!(conn);
        let result = tokio::select! {
            result = conn.as_mut() => result,
            () = self.shutdown.wait() => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(err) = result {
            tracing::debug!(%peer, %err, "HTTP connection closed with an error");
        }
    }
}

/// Where a component serves HTTPS (`--bind-address`, `--secure-port`, `--cert-dir`,
/// `--tls-cert-file`/`--tls-private-key-file`), as the scheduler and controller manager do.
#[derive(Debug, Clone)]
pub struct SecureServing {
    pub bind_address: std::net::IpAddr,
    /// 0 disables serving.
    pub port: u16,
    pub cert_dir: std::path::PathBuf,
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

impl SecureServing {
    /// The bound listener and TLS config (HTTP/2 and HTTP/1.1), with a self-signed
    /// certificate for `component` when no files were given; `None` when the port is 0.
    pub async fn listen(&self, component: &str) -> Result<Option<(TcpListener, Arc<ServerConfig>)>, String> {
        if self.port == 0 {
            return Ok(None);
        }
        let (cert, key) = crate::tls::self_signed::serving_files(
            self.tls.as_ref(),
            &self.cert_dir,
            component,
            self.bind_address,
        )?;
        let tls = crate::tls::server_config(&cert, &key, None, false, &[b"h2", b"http/1.1"])
            .map_err(|e| e.to_string())?;
        let addr = std::net::SocketAddr::new(self.bind_address, self.port);
        let listener = TcpListener::bind(addr).await.map_err(|e| format!("listening on {addr}: {e}"))?;
        Ok(Some((listener, tls)))
    }
}
