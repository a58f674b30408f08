//! The probe handlers that reach into the pod over the network (upstream's `pkg/probe/http`,
//! `tcp` and `grpc`): each returns `Ok` for success or the failure message recorded in the
//! `Unhealthy` event. Exec probes go through CRI and live in [`crate::prober`].

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::HTTPHeader;
use proto::grpc::health::v1::health_check_response::ServingStatus;
use proto::grpc::health::v1::{HealthCheckRequest, health_client::HealthClient};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sent unless the probe sets its own `User-Agent` (upstream: `kube-probe/<major>.<minor>`).
const USER_AGENT: &str = "kube-probe/1.32";
/// The most of a response read to find its status line (upstream reads at most 10 KiB).
const MAX_RESPONSE_HEAD: usize = 10 * 1024;

/// `httpGet`: one GET; a status from 200 to 399 is success, as upstream. Redirects are not
/// followed (upstream follows same-host ones): a 3xx counts as success either way.
/// `https` skips certificate verification, as upstream's prober does.
pub async fn http_get(
    https: bool,
    host: &str,
    port: u16,
    path: &str,
    headers: &[HTTPHeader],
) -> Result<(), String> {
    let code = http_status(https, host, port, path, headers, USER_AGENT).await?;
    if (200..400).contains(&code) {
        Ok(())
    } else {
        Err(format!("HTTP probe failed with statuscode: {code}"))
    }
}

/// One GET, answering the response's status code (lifecycle hooks use it too: they send
/// their own `User-Agent` and do not judge the code).
pub async fn http_status(
    https: bool,
    host: &str,
    port: u16,
    path: &str,
    headers: &[HTTPHeader],
    user_agent: &str,
) -> Result<u16, String> {
    let scheme = if https { "https" } else { "http" };
    let url = format!("{scheme}://{}{path}", join_host_port(host, port));
    let fail = |e: &dyn std::fmt::Display| format!("Get \"{url}\": {e}");
    let tcp = TcpStream::connect((host, port)).await.map_err(|e| fail(&e))?;
    let request = http_request(host, port, path, headers, user_agent);
    if https {
        let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| fail(&e))?;
        let tls = tokio_rustls::TlsConnector::from(insecure_tls()?)
            .connect(name, tcp)
            .await
            .map_err(|e| fail(&e))?;
        exchange(tls, &request).await
    } else {
        exchange(tcp, &request).await
    }
    .map_err(|e| fail(&e))
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// The request head: the probe's headers win over the defaults (`Host`, `User-Agent`,
/// `Accept`), as upstream lets them.
fn http_request(host: &str, port: u16, path: &str, headers: &[HTTPHeader], user_agent: &str) -> String {
    let has = |name: &str| headers.iter().any(|h| h.name.eq_ignore_ascii_case(name));
    let mut req = format!("GET {path} HTTP/1.1\r\n");
    if !has("host") {
        req.push_str(&format!("Host: {}\r\n", join_host_port(host, port)));
    }
    if !has("user-agent") {
        req.push_str(&format!("User-Agent: {user_agent}\r\n"));
    }
    if !has("accept") {
        req.push_str("Accept: */*\r\n");
    }
    for h in headers.iter().filter(|h| !h.name.eq_ignore_ascii_case("connection")) {
        req.push_str(&format!("{}: {}\r\n", h.name, h.value));
    }
    req.push_str("Connection: close\r\n\r\n");
    req
}

/// Writes the request and reads up to the status code of the answer.
async fn exchange(mut s: impl AsyncRead + AsyncWrite + Unpin, request: &str) -> Result<u16, String> {
    s.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut head = Vec::with_capacity(256);
    let mut buf = [0u8; 1024];
    while !head.contains(&b'\n') && head.len() < MAX_RESPONSE_HEAD {
        let n = s.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let mut words = line.split_whitespace();
    match (words.next(), words.next().and_then(|c| c.parse().ok())) {
        (Some(v), Some(code)) if v.starts_with("HTTP/") => Ok(code),
        _ => Err("malformed HTTP response".into()),
    }
}

fn insecure_tls() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            component_base::tls::insecure_client_config(None, &[b"http/1.1"]).map_err(|e| e.to_string())
        })
        .clone()
}

/// `tcpSocket`: success when a connection opens.
pub async fn tcp(host: &str, port: u16) -> Result<(), String> {
    TcpStream::connect((host, port))
        .await
        .map(|_| ())
        .map_err(|e| format!("dial tcp {}: {e}", join_host_port(host, port)))
}

/// `grpc`: `grpc.health.v1.Health/Check` for `service` over plaintext HTTP/2 (upstream does
/// not do TLS here either); success only when the answer is `SERVING`.
pub async fn grpc(host: &str, port: u16, service: &str, timeout: Duration) -> Result<(), String> {
    let target = join_host_port(host, port);
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{target}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(timeout)
        .timeout(timeout)
        .user_agent(USER_AGENT)
        .map_err(|e| e.to_string())?;
    let channel = endpoint.connect().await.map_err(|e| {
        format!("timeout: failed to connect service {target:?} within {}s: {e}", timeout.as_secs())
    })?;
    let reply = HealthClient::new(channel).check(HealthCheckRequest { service: service.to_string() }).await;
    match reply {
        Ok(r) => match ServingStatus::try_from(r.into_inner().status) {
            Ok(ServingStatus::Serving) => Ok(()),
            status => Err(format!(
                "service unhealthy (responded with {:?})",
                status.map(|s| s.as_str_name()).unwrap_or("UNKNOWN")
            )),
        },
        Err(s) if s.code() == tonic::Code::Unimplemented => Err(format!(
            "this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
            s.message()
        )),
        Err(s) if s.code() == tonic::Code::DeadlineExceeded => {
            Err(format!("timeout: health rpc did not complete within {}s", timeout.as_secs()))
        }
        Err(s) => Err(format!("error: health rpc probe failed: {}: {}", s.code(), s.message())),
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;

    use proto::grpc::health::v1::HealthCheckResponse;
    use proto::grpc::health::v1::health_server::{Health, HealthServer};
    use tokio::net::TcpListener;

    use super::*;

    /// Answers each connection with the status code named by the request path's last
    /// segment (`/code/503` → 503) and sends the request head back on `seen`.
    async fn http_server(
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> (u16, tokio::sync::mpsc::Receiver<String>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            loop {
                let (tcp, _) = l.accept().await.unwrap();
                let tx = tx.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        Some(cfg) => {
                            let s = tokio_rustls::TlsAcceptor::from(cfg).accept(tcp).await.unwrap();
                            answer(s, tx).await
                        }
                        None => answer(tcp, tx).await,
                    }
                });
            }
        });
        (port, rx)
    }

    async fn answer(mut s: impl AsyncRead + AsyncWrite + Unpin, seen: tokio::sync::mpsc::Sender<String>) {
        let mut head = Vec::new();
        let mut buf = [0u8; 512];
        while !head.ends_with(b"\r\n\r\n") {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                return;
            }
            head.extend_from_slice(&buf[..n]);
        }
        let head = String::from_utf8(head).unwrap();
        let code = head.split_whitespace().nth(1).unwrap().rsplit('/').next().unwrap().to_string();
        seen.send(head).await.unwrap();
        let reply = format!("HTTP/1.1 {code} Whatever\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        s.write_all(reply.as_bytes()).await.unwrap();
        s.shutdown().await.ok();
    }

    #[tokio::test]
    async fn http_codes_and_headers() {
        let (port, mut seen) = http_server(None).await;
        http_get(false, "127.0.0.1", port, "/code/200", &[]).await.unwrap();
        let head = seen.recv().await.unwrap();
        assert!(head.starts_with("GET /code/200 HTTP/1.1\r\n"), "{head}");
        assert!(head.contains(&format!("Host: 127.0.0.1:{port}\r\n")), "{head}");
        assert!(head.contains("User-Agent: kube-probe/1.32\r\n"), "{head}");

        http_get(false, "127.0.0.1", port, "/code/302", &[]).await.unwrap();
        let err = http_get(false, "127.0.0.1", port, "/code/503", &[]).await.unwrap_err();
        assert_eq!(err, "HTTP probe failed with statuscode: 503");
        for _ in 0..2 {
            seen.recv().await.unwrap();
        }

        // The probe's own Host and User-Agent replace the defaults.
        let headers = [
            HTTPHeader { name: "Host".into(), value: "example.test".into() },
            HTTPHeader { name: "user-agent".into(), value: "mine".into() },
        ];
        http_get(false, "127.0.0.1", port, "/code/204", &headers).await.unwrap();
        let head = seen.recv().await.unwrap();
        assert!(head.contains("Host: example.test\r\n") && !head.contains("Host: 127"), "{head}");
        assert!(head.contains("user-agent: mine\r\n") && !head.contains("kube-probe"), "{head}");
    }

    #[tokio::test]
    async fn https_skips_verification() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("s.crt"), dir.path().join("s.key"));
        component_base::tls::self_signed::ensure(&cert, &key, "probe", &["localhost".into()]).unwrap();
        let cfg = component_base::tls::server_config(&cert, &key, None, false, &[b"http/1.1"]).unwrap();
        let (port, mut seen) = http_server(Some(cfg)).await;
        http_get(true, "127.0.0.1", port, "/code/200", &[]).await.unwrap();
        assert!(seen.recv().await.unwrap().starts_with("GET /code/200 "));
        let err = http_get(true, "127.0.0.1", port, "/code/500", &[]).await.unwrap_err();
        assert_eq!(err, "HTTP probe failed with statuscode: 500");
        // Plain HTTP to the TLS port is not a success.
        assert!(http_get(false, "127.0.0.1", port, "/code/200", &[]).await.is_err());
    }

    fn closed_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn tcp_open_and_refused() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        tcp("127.0.0.1", l.local_addr().unwrap().port()).await.unwrap();
        let port = closed_port();
        let err = tcp("127.0.0.1", port).await.unwrap_err();
        assert!(err.starts_with(&format!("dial tcp 127.0.0.1:{port}: ")), "{err}");
        assert!(http_get(false, "127.0.0.1", port, "/", &[]).await.is_err());
    }

    /// Serving for the service "" and "up", NOT_SERVING for anything else.
    struct Checker;

    #[tonic::async_trait]
    impl Health for Checker {
        async fn check(
            &self,
            req: tonic::Request<HealthCheckRequest>,
        ) -> Result<tonic::Response<HealthCheckResponse>, tonic::Status> {
            let ua = req.metadata().get("user-agent").and_then(|v| v.to_str().ok()).unwrap_or_default();
            if !ua.starts_with(USER_AGENT) {
                return Err(tonic::Status::invalid_argument(format!("user agent {ua:?}")));
            }
            let status = match req.into_inner().service.as_str() {
                "" | "up" => ServingStatus::Serving,
                _ => ServingStatus::NotServing,
            };
            Ok(tonic::Response::new(HealthCheckResponse { status: status as i32 }))
        }

        type WatchStream =
            Pin<Box<dyn futures::Stream<Item = Result<HealthCheckResponse, tonic::Status>> + Send>>;

        async fn watch(
            &self,
            _: tonic::Request<HealthCheckRequest>,
        ) -> Result<tonic::Response<Self::WatchStream>, tonic::Status> {
            Err(tonic::Status::unimplemented("watch"))
        }
    }

    #[tokio::test]
    async fn grpc_health_check() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(HealthServer::new(Checker))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(l)),
        );
        let t = Duration::from_secs(5);
        grpc("127.0.0.1", port, "", t).await.unwrap();
        grpc("127.0.0.1", port, "up", t).await.unwrap();
        let err = grpc("127.0.0.1", port, "down", t).await.unwrap_err();
        assert_eq!(err, "service unhealthy (responded with \"NOT_SERVING\")");
        let err = grpc("127.0.0.1", closed_port(), "", t).await.unwrap_err();
        assert!(err.starts_with("timeout: failed to connect service"), "{err}");
    }
}
