//! WebSocket clients of `pods/exec`, `pods/attach` and `pods/portforward` in front of a
//! kubelet that speaks SPDY (upstream's `StreamTranslatorHandler` and port-forward
//! tunneling handler, on by default since v1.30/v1.31 with kubectl v1.32 using them).
//!
//! - exec/attach with `v5.channel.k8s.io` offered: the client gets a WebSocket speaking the
//!   channel protocol (one binary message per chunk, first byte the channel: 0 stdin,
//!   1 stdout, 2 stderr, 3 error, 4 resize; `255, <ch>` closes channel `ch` for writing),
//!   the kubelet gets a SPDY connection with one stream per channel
//!   (`X-Stream-Protocol-Version: v4.channel.k8s.io`), bytes pumped between the two. A
//!   closed stdin becomes a FIN on its stream: what v5 adds over v4, and why kubectl
//!   needs the translation (containerd's own WebSocket support stops at v4).
//! - port-forward with `SPDY/3.1+portforward.k8s.io` offered: the client speaks SPDY inside
//!   WebSocket binary messages; the kubelet gets the same SPDY bytes on an upgraded
//!   connection (`portforward.k8s.io`).
//!
//! Other WebSocket requests (v4 and older channel protocols) are proxied unchanged to the
//! kubelet, which answers them itself, as upstream.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::{
    CloseFrame, Message, Role, WebSocketConfig, frame::coding::CloseCode,
};

use crate::errors::{ApiError, ApiResult};
use crate::handlers::BoxBody;
use crate::proxy::{self, Location};
use crate::spdy;

pub const V5_CHANNEL_PROTOCOL: &str = "v5.channel.k8s.io";
pub const PORT_FORWARD_TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";

/// The channel numbers of the remote command protocol.
const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
const CLOSE: u8 = 255;

/// The largest WebSocket message accepted from a client (kubectl sends stdin in 32 KiB
/// pieces); and the most read from the kubelet per message sent back.
const MAX_MESSAGE: usize = 4 << 20;
const CHUNK: usize = 32 * 1024;

/// Which translation a request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    RemoteCommand { stdin: bool, stdout: bool, stderr: bool, tty: bool },
    PortForwardTunnel,
}

impl Mode {
    fn client_protocol(self) -> &'static str {
        match self {
            Mode::RemoteCommand { .. } => V5_CHANNEL_PROTOCOL,
            Mode::PortForwardTunnel => PORT_FORWARD_TUNNEL_PROTOCOL,
        }
    }

    fn kubelet_protocol(self) -> &'static str {
        match self {
            Mode::RemoteCommand { .. } => "v4.channel.k8s.io",
            Mode::PortForwardTunnel => "portforward.k8s.io",
        }
    }
}

/// The translation `sub` with these headers gets, if any.
pub fn mode(
    sub: &str,
    headers: &HeaderMap,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
) -> Option<Mode> {
    if !crate::wsstream::is_websocket(headers) {
        return None;
    }
    // Comma lists and repeated headers alike.
    let offered = proxy::header_list(headers, header::SEC_WEBSOCKET_PROTOCOL);
    match sub {
        // With a TTY, stderr is merged into stdout: no stream for it (as the kubelet expects).
        "exec" | "attach" if offered.iter().any(|p| p == V5_CHANNEL_PROTOCOL) => {
            Some(Mode::RemoteCommand { stdin, stdout, stderr: stderr && !tty, tty })
        }
        "portforward" if offered.iter().any(|p| p == PORT_FORWARD_TUNNEL_PROTOCOL) => {
            Some(Mode::PortForwardTunnel)
        }
        _ => None,
    }
}

/// Upgrades the kubelet connection to SPDY, then answers the client's WebSocket handshake
/// and runs the translation in the background. A kubelet that refuses gets its answer
/// passed back, as a plain proxy would.
pub async fn serve(
    loc: &Location,
    mut req: Request<Incoming>,
    mode: Mode,
    dial_timeout: Duration,
) -> ApiResult<Response<BoxBody>> {
    let key = req
        .headers()
        .get(header::SEC_WEBSOCKET_KEY)
        .map(|k| k.as_bytes().to_vec())
        .ok_or_else(|| ApiError::bad_request("missing Sec-WebSocket-Key"))?;
    let client = req.extensions().get::<component_base::http::ConnectionInfo>().map(|c| c.peer.ip());
    let (io, authority) = proxy::dial(loc, dial_timeout)
        .await
        .map_err(|e| ApiError::new(500, "", format!("error dialing backend: {e}")))?;
    let mut headers = proxy::request_headers(req.headers(), true, &authority, client);
    let websocket: Vec<_> =
        headers.keys().filter(|name| name.as_str().starts_with("sec-websocket-")).cloned().collect();
    for name in websocket {
        headers.remove(name);
    }
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    headers.insert("x-stream-protocol-version", HeaderValue::from_static(mode.kubelet_protocol()));
    let mut out = Request::builder().method(req.method().clone()).uri(loc.path_and_query.as_str());
    if let Some(h) = out.headers_mut() {
        *h = headers;
    }
    let out = out
        .body(Empty::<Bytes>::new())
        .map_err(|e| ApiError::internal(format!("building the backend request: {e}")))?;
    let client_upgrade = hyper::upgrade::on(&mut req);
    let mut resp = proxy::send(io, out)
        .await
        .map_err(|e| ApiError::new(500, "", format!("error dialing backend: {e}")))?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Ok(proxy::refused(loc, resp).await);
    }
    let backend_upgrade = hyper::upgrade::on(&mut resp);
    proxy::when_upgraded(
        client_upgrade,
        backend_upgrade,
        loc.url(),
        move |client, backend, url| async move {
            let config = WebSocketConfig::default()
                .max_message_size(Some(MAX_MESSAGE))
                .max_frame_size(Some(MAX_MESSAGE));
            let ws = WebSocketStream::from_raw_socket(TokioIo::new(client), Role::Server, Some(config)).await;
            match mode {
                Mode::RemoteCommand { .. } => remote_command(ws, backend, mode, &url).await,
                Mode::PortForwardTunnel => tunnel(ws, backend, &url).await,
            }
        },
    );
    crate::wsstream::switching_protocols(&key, Some(mode.client_protocol()))
}

type Ws = WebSocketStream<TokioIo<Upgraded>>;

type WsSink = futures::stream::SplitSink<Ws, Message>;

/// Ends the client's WebSocket with a normal close, once the kubelet's side ended.
async fn close(ws_tx: &mut WsSink) {
    let _ = ws_tx.send(Message::Close(Some(CloseFrame { code: CloseCode::Normal, reason: "".into() }))).await;
    let _ = ws_tx.close().await;
}

/// exec/attach: channel messages ↔ SPDY streams.
async fn remote_command(ws: Ws, backend: Upgraded, mode: Mode, url: &str) {
    let Mode::RemoteCommand { stdin, stdout, stderr, tty } = mode else { return };
    let (mut ws_tx, mut ws_rx) = ws.split();
    let (mut rd, mut wr) = tokio::io::split(TokioIo::new(backend));
    // One writer of SPDY frames: the stdin pump and PING answers share it.
    let (frames, mut queue) = mpsc::channel::<Vec<u8>>(16);
    let writer = tokio::spawn(async move {
        while let Some(f) = queue.recv().await {
            if wr.write_all(&f).await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    });

    // Streams in client-go's order; ids are odd, from 1.
    let mut enc = spdy::HeaderEncoder::default();
    let mut channel_of = HashMap::new();
    let mut stream_of = HashMap::new();
    let wanted = [
        ("error", ERROR, true),
        ("stdin", STDIN, stdin),
        ("stdout", STDOUT, stdout),
        ("stderr", STDERR, stderr),
        ("resize", RESIZE, tty),
    ];
    let mut id = 1u32;
    for (kind, channel, on) in wanted {
        if !on {
            continue;
        }
        let block = match enc.encode(&[("streamType", kind)]) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!("stream translator: {e}");
                return;
            }
        };
        if frames.send(spdy::syn_stream(id, &block)).await.is_err() {
            return;
        }
        channel_of.insert(id, channel);
        stream_of.insert(channel, id);
        id += 2;
    }
    // As upstream: an empty message on the lowest writable channel tells the client the
    // connection is up.
    let first = if stdout {
        STDOUT
    } else if stderr {
        STDERR
    } else {
        ERROR
    };
    if ws_tx.send(Message::Binary(Bytes::from(vec![first]))).await.is_err() {
        return;
    }

    // Client → kubelet: stdin, resize, and v5's close of stdin.
    let upstream = {
        let frames = frames.clone();
        async move {
            while let Some(msg) = ws_rx.next().await {
                let data = match msg {
                    Ok(Message::Binary(d)) => d,
                    Ok(Message::Close(_)) | Err(_) => break,
                    Ok(_) => continue,
                };
                let Some((&channel, payload)) = data.split_first() else { continue };
                let (target, fin) = match channel {
                    CLOSE if payload.len() == 1 => (payload[0], true),
                    STDIN | RESIZE => (channel, false),
                    _ => continue,
                };
                let Some(&stream) = stream_of.get(&target) else { continue };
                if fin {
                    if frames.send(spdy::data(stream, true, &[])).await.is_err() {
                        break;
                    }
                    continue;
                }
                for piece in payload.chunks(CHUNK) {
                    if frames.send(spdy::data(stream, false, piece)).await.is_err() {
                        return;
                    }
                }
            }
        }
    };

    // Kubelet → client: stdout, stderr and the error stream's status; PINGs answered.
    let downstream = async {
        loop {
            match spdy::read_frame(&mut rd).await {
                Ok(Some(spdy::Frame::Data { stream, data, .. })) => {
                    let Some(&channel) = channel_of.get(&stream) else { continue };
                    for piece in data.chunks(CHUNK) {
                        let mut m = Vec::with_capacity(piece.len() + 1);
                        m.push(channel);
                        m.extend_from_slice(piece);
                        if ws_tx.send(Message::Binary(m.into())).await.is_err() {
                            return;
                        }
                    }
                }
                Ok(Some(spdy::Frame::Control { kind: spdy::PING, payload, .. })) => {
                    let _ = frames.send(spdy::control(spdy::PING, 0, &payload)).await;
                }
                Ok(Some(spdy::Frame::Control { kind: spdy::GOAWAY, .. })) | Ok(None) => break,
                Ok(Some(spdy::Frame::Control { .. })) => {}
                Err(e) => {
                    tracing::debug!(url, err = %e, "kubelet stream broke");
                    break;
                }
            }
        }
        close(&mut ws_tx).await;
    };
    // The session ends with the kubelet's side (the command exited) or the client's.
    tokio::select! {
        _ = downstream => {}
        _ = upstream => {}
    }
    drop(frames);
    writer.abort();
    tracing::debug!(url, "translated stream ended");
}

/// port-forward: the client's SPDY, carried in binary messages, to and from the kubelet.
async fn tunnel(ws: Ws, backend: Upgraded, url: &str) {
    let (mut ws_tx, mut ws_rx) = ws.split();
    let (mut rd, mut wr) = tokio::io::split(TokioIo::new(backend));
    let upstream = async {
        while let Some(msg) = ws_rx.next().await {
            match msg {
                Ok(Message::Binary(d)) => {
                    if wr.write_all(&d).await.is_err() {
                        break;
                    }
                }
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let _ = wr.shutdown().await;
    };
    let downstream = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if ws_tx.send(Message::Binary(Bytes::copy_from_slice(&buf[..n]))).await.is_err() {
                        return;
                    }
                }
            }
        }
        close(&mut ws_tx).await;
    };
    tokio::select! {
        _ = downstream => {}
        _ = upstream => {}
    }
    tracing::debug!(url, "port-forward tunnel ended");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn which_requests_are_translated() {
        let ws = |protocols: &str| {
            headers(&[
                ("connection", "Upgrade"),
                ("upgrade", "websocket"),
                ("sec-websocket-protocol", protocols),
            ])
        };
        let exec = Mode::RemoteCommand { stdin: true, stdout: true, stderr: false, tty: false };
        assert_eq!(
            mode("exec", &ws("v5.channel.k8s.io, v4.channel.k8s.io"), true, true, false, false),
            Some(exec)
        );
        assert_eq!(
            mode("attach", &ws("v4.channel.k8s.io,v5.channel.k8s.io"), false, true, true, true),
            Some(Mode::RemoteCommand { stdin: false, stdout: true, stderr: false, tty: true })
        );
        // v4 only: the kubelet answers it itself.
        assert_eq!(mode("exec", &ws("v4.channel.k8s.io"), true, true, false, false), None);
        assert_eq!(
            mode("portforward", &ws("SPDY/3.1+portforward.k8s.io"), false, false, false, false),
            Some(Mode::PortForwardTunnel)
        );
        assert_eq!(mode("portforward", &ws("v4.channel.k8s.io"), false, false, false, false), None);
        // SPDY upgrades are proxied as they are.
        let spdy = headers(&[
            ("connection", "Upgrade"),
            ("upgrade", "SPDY/3.1"),
            ("sec-websocket-protocol", "v5.channel.k8s.io"),
        ]);
        assert_eq!(mode("exec", &spdy, true, true, false, false), None);
    }
}
