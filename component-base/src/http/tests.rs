//! Server tests over real sockets on 127.0.0.1:0.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

use super::*;
use crate::metrics::Registry;
use crate::shutdown::Shutdown;
use crate::tls::test_certs::TestPki;
use crate::tls::{client_config, server_config};

const WAIT: Duration = Duration::from_secs(10);

struct Running {
    addr: SocketAddr,
    shutdown: Shutdown,
    task: JoinHandle<()>,
}

impl Running {
    /// Triggers shutdown and checks the server returns.
    async fn stop(self) {
        self.shutdown.trigger();
        tokio::time::timeout(WAIT, self.task).await.expect("server stopped within the grace period").unwrap();
    }
}

async fn start<S, B>(tls: Option<Arc<rustls::ServerConfig>>, service: S, options: ServeOptions) -> Running
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let task = tokio::spawn(serve(listener, tls, service, shutdown.clone(), options));
    Running { addr, shutdown, task }
}

fn observability() -> EndpointsService {
    Endpoints::new()
        .metrics("/metrics", Registry::with_process_metrics())
        .health("/health", HealthFormat::EtcdJson, "etcd", |_| async { Ok(()) })
        .health("/readyz", HealthFormat::Kubernetes, "ping", |_| async { Ok(()) })
        .into_service()
}

/// One HTTP/1.1 request on a fresh connection, read to the server's close.
async fn raw_get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(WAIT, stream.read_to_string(&mut response))
        .await
        .expect("response in time")
        .unwrap();
    response
}

#[tokio::test]
async fn serves_metrics_and_health_then_stops() {
    let server = start(None, observability(), ServeOptions::default()).await;

    let metrics = raw_get(server.addr, "/metrics").await;
    assert!(metrics.starts_with("HTTP/1.1 200 OK\r\n"), "{metrics}");
    assert!(
        metrics.to_ascii_lowercase().contains("content-type: text/plain; version=0.0.4; charset=utf-8\r\n"),
        "{metrics}"
    );
    assert!(metrics.contains("\nprocess_resident_memory_bytes "), "{metrics}");

    let health = raw_get(server.addr, "/health").await;
    assert!(health.starts_with("HTTP/1.1 200 OK\r\n"), "{health}");
    assert!(health.ends_with(r#"{"health":"true","reason":""}"#), "{health}");
    let ready = raw_get(server.addr, "/readyz").await;
    assert!(ready.ends_with("\r\n\r\nok"), "{ready}");

    let addr = server.addr;
    server.stop().await;
    assert!(TcpStream::connect(addr).await.is_err(), "listener closed");
}

#[tokio::test]
async fn garbage_closes_only_its_connection() {
    let server = start(None, observability(), ServeOptions::default()).await;
    let mut junk = TcpStream::connect(server.addr).await.unwrap();
    junk.write_all(b"\x00\x01\x02 not http at all\r\n\r\n").await.unwrap();
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(WAIT, junk.read_to_end(&mut reply)).await.expect("junk connection closed");
    assert!(raw_get(server.addr, "/health").await.starts_with("HTTP/1.1 200"));
    server.stop().await;
}

/// Answers with the request's [`ConnectionInfo`] as text, through a boxed body as
/// a service multiplexing gRPC and HTTP would return.
async fn echo_connection(
    request: Request<Incoming>,
) -> Result<Response<UnsyncBoxBody<Bytes, Infallible>>, Infallible> {
    let info = request.extensions().get::<ConnectionInfo>().cloned();
    let body = match info {
        Some(info) => format!(
            "tls={} certs={} alpn={} version={:?}",
            info.tls,
            info.client_certificates.map_or(0, |c| c.len()),
            info.alpn.map(|a| String::from_utf8_lossy(&a).into_owned()).unwrap_or_default(),
            request.version(),
        ),
        None => "no connection info".to_owned(),
    };
    Ok(Response::new(Full::new(Bytes::from(body)).boxed_unsync()))
}

#[tokio::test]
async fn http2_over_mutual_tls_carries_connection_info() {
    let pki = TestPki::new();
    let alpn: &[&[u8]] = &[b"h2", b"http/1.1"];
    let tls = server_config(&pki.server_cert, &pki.server_key, Some(&pki.ca), false, alpn).unwrap();
    let server = start(Some(tls), service_fn(echo_connection), ServeOptions::default()).await;

    // Plaintext at a TLS port fails the handshake and must not disturb the server.
    let plaintext = raw_get(server.addr, "/").await;
    assert!(!plaintext.contains("200 OK"), "{plaintext}");

    let client = client_config(Some(&pki.ca), Some((&pki.client_cert, &pki.client_key)), &[b"h2"]).unwrap();
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let stream = TlsConnector::from(client).connect(name, tcp).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
    let connection = tokio::spawn(connection);
    let request = Request::builder().uri("https://localhost/whoami").body(Empty::<Bytes>::new()).unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "tls=true certs=1 alpn=h2 version=HTTP/2.0");

    // Shutdown sends GOAWAY; the client's connection ends instead of hanging.
    server.stop().await;
    drop(sender);
    tokio::time::timeout(WAIT, connection).await.expect("client connection closed").unwrap().ok();
}

#[tokio::test]
async fn connection_limit_holds_extra_clients_back() {
    let options = ServeOptions { max_connections: 1, ..ServeOptions::default() };
    let server = start(None, observability(), options).await;

    // The first client keeps its connection open after one request.
    let mut first = TcpStream::connect(server.addr).await.unwrap();
    first.write_all(b"GET /readyz HTTP/1.1\r\nHost: test\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 512];
    let n = first.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));

    // The second waits in the backlog while the slot is taken...
    let second = tokio::spawn(raw_get(server.addr, "/readyz"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "second client served beyond the limit");

    // ...and is served once the first leaves.
    drop(first);
    let response = tokio::time::timeout(WAIT, second).await.unwrap().unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    server.stop().await;
}

#[tokio::test]
async fn grace_period_bounds_the_drain() {
    let stuck = service_fn(|_request: Request<Incoming>| async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
    });
    let options = ServeOptions { grace_period: Duration::from_millis(200), ..ServeOptions::default() };
    let server = start(None, stuck, options).await;
    let mut client = TcpStream::connect(server.addr).await.unwrap();
    client.write_all(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n").await.unwrap();
    // Let the request reach the handler before shutting down.
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.stop().await;
    let mut rest = Vec::new();
    let _ =
        tokio::time::timeout(WAIT, client.read_to_end(&mut rest)).await.expect("stuck connection was cut");
}
