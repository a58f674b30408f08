//! A byte stream served over WebSocket (upstream's `wsstream.Reader`): how `pods/log` answers
//! a WebSocket client (the conformance spec "should support retrieving logs from the
//! container over websockets", and browsers, which cannot read a chunked body as it comes).
//! Each chunk read from the stream is one message: binary with the `binary.k8s.io`
//! protocol (or none offered), base64 text with `base64.binary.k8s.io`. The end of the
//! stream closes the WebSocket normally; messages from the client are read and dropped.

use base64::Engine;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{
    CloseFrame, Message, Role, WebSocketConfig, frame::coding::CloseCode,
};

use crate::errors::{ApiError, ApiResult};
use crate::handlers::BoxBody;
use crate::proxy;

pub const BINARY_PROTOCOL: &str = "binary.k8s.io";
pub const BASE64_PROTOCOL: &str = "base64.binary.k8s.io";

/// Messages from the client are never used: a small limit keeps a chatty one cheap.
const MAX_CLIENT_MESSAGE: usize = 64 * 1024;

/// Whether the request asks for a WebSocket.
pub fn is_websocket(headers: &HeaderMap) -> bool {
    proxy::is_upgrade_request(headers)
        && proxy::header_list(headers, header::UPGRADE).iter().any(|p| p.eq_ignore_ascii_case("websocket"))
}

/// The protocol answered for the client's offer: the first one supported, or none when
/// nothing was offered (then binary, as upstream's default). `Err` names what was offered.
fn choose_protocol(offered: &[String]) -> Result<Option<&'static str>, String> {
    if offered.is_empty() {
        return Ok(None);
    }
    for p in offered {
        match p.as_str() {
            BINARY_PROTOCOL => return Ok(Some(BINARY_PROTOCOL)),
            BASE64_PROTOCOL => return Ok(Some(BASE64_PROTOCOL)),
            _ => {}
        }
    }
    Err(format!(
        "requested protocol(s) are not supported: {offered:?}; supports [\"\" \"{BINARY_PROTOCOL}\" \"{BASE64_PROTOCOL}\"]"
    ))
}

/// Answers the client's WebSocket handshake (101) and streams `body` into it in the
/// background.
pub fn serve(req: &mut Request<Incoming>, mut body: BoxBody) -> ApiResult<Response<BoxBody>> {
    let key = req
        .headers()
        .get(header::SEC_WEBSOCKET_KEY)
        .map(|k| k.as_bytes().to_vec())
        .ok_or_else(|| ApiError::bad_request("missing Sec-WebSocket-Key"))?;
    let protocol = choose_protocol(&proxy::header_list(req.headers(), header::SEC_WEBSOCKET_PROTOCOL))
        .map_err(ApiError::bad_request)?;
    let base64 = protocol == Some(BASE64_PROTOCOL);
    let upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else { return };
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_CLIENT_MESSAGE))
            .max_frame_size(Some(MAX_CLIENT_MESSAGE));
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await;
        let (mut tx, mut rx) = ws.split();
        // Read (and drop) what the client sends, so that its close and pings are seen.
        let mut client_gone = tokio::spawn(async move { while let Some(Ok(_)) = rx.next().await {} });
        loop {
            let frame = tokio::select! {
                f = body.frame() => f,
                _ = &mut client_gone => return,
            };
            let data = match frame {
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) if d.is_empty() => continue,
                    Ok(d) => d,
                    Err(_) => continue,
                },
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "log stream ended with an error");
                    break;
                }
                None => break,
            };
            let msg = if base64 {
                Message::Text(base64::engine::general_purpose::STANDARD.encode(&data).into())
            } else {
                Message::Binary(data)
            };
            if tx.send(msg).await.is_err() {
                client_gone.abort();
                return;
            }
        }
        let _ =
            tx.send(Message::Close(Some(CloseFrame { code: CloseCode::Normal, reason: "".into() }))).await;
        let _ = tx.close().await;
        client_gone.abort();
    });
    switching_protocols(&key, protocol)
}

/// The 101 answer to a WebSocket handshake with client key `key`, naming the chosen
/// subprotocol if any.
pub fn switching_protocols(key: &[u8], protocol: Option<&'static str>) -> ApiResult<Response<BoxBody>> {
    let mut r = Response::new(Empty::<Bytes>::new().map_err(|never| match never {}).boxed_unsync());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(
        header::SEC_WEBSOCKET_ACCEPT,
        HeaderValue::from_str(&derive_accept_key(key)).map_err(|e| ApiError::internal(e.to_string()))?,
    );
    if let Some(p) = protocol {
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(p));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_as_upstream_reader() {
        let offer = |ps: &[&str]| choose_protocol(&ps.iter().map(|p| p.to_string()).collect::<Vec<_>>());
        assert_eq!(offer(&[]), Ok(None));
        assert_eq!(offer(&[BINARY_PROTOCOL]), Ok(Some(BINARY_PROTOCOL)));
        assert_eq!(
            offer(&["v4.channel.k8s.io", BASE64_PROTOCOL, BINARY_PROTOCOL]),
            Ok(Some(BASE64_PROTOCOL))
        );
        assert!(offer(&["v4.channel.k8s.io"]).unwrap_err().contains("not supported"));
    }
}
