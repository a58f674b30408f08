//! Watch responses: a chunked stream of `{"type":..., "object":...}` events, one per line
//! (or Table rows when kubectl asks for a Table), until `timeoutSeconds` or the client
//! goes away.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::codec::Output;
use super::query;
use super::request::RequestInfo;
use super::{Api, BoxBody, BoxError, Query, filter_for, rv_of};
use crate::cacher::EventType;
use crate::errors::{ApiError, ApiResult};
use crate::registry::store::Store;
use crate::table::IncludeObject;

pub async fn serve(
    api: &Api,
    store: Arc<Store>,
    info: &RequestInfo,
    q: &Query,
    output: Output,
) -> ApiResult<Response<BoxBody>> {
    let filter = filter_for(&store, info, q)?;
    let rv = rv_of(q)?;
    let bookmarks = query::flag(q, "allowWatchBookmarks");
    // Upstream picks a random duration in [min-request-timeout, 2x) when none (or 0) is
    // given; a negative one ends the watch at once.
    let timeout = match query::int_param(q, "timeoutSeconds")? {
        Some(t) if t != 0 => Duration::from_secs(t.max(0) as u64),
        _ => {
            let min = api.limits.min_request_timeout;
            min + Duration::from_secs(rand::random_range(0..=min.as_secs().max(1)))
        }
    };
    let send_initial = send_initial_events(q, bookmarks)?;
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, BoxError>>(64);
    let (mut events, id) = match store.watch(filter, rv, bookmarks, send_initial).await {
        Ok(w) => w,
        // A resourceVersion older than the cache's window: upstream's cacher answers with
        // a watch that carries one ERROR event (410 Expired), not with an HTTP error, and
        // clients relist on that event (kube-rs' watcher retries an HTTP 410 with the same
        // resourceVersion for ever).
        Err(e) if e.code == 410 => {
            let mut line =
                serde_json::to_vec(&json!({ "type": "ERROR", "object": e.to_status() })).unwrap_or_default();
            line.push(b'\n');
            let _ = tx.try_send(Ok(Frame::data(Bytes::from(line))));
            drop(tx);
            return Ok(stream_response(rx));
        }
        Err(e) => return Err(e),
    };
    let include = IncludeObject::parse(q.get("includeObject").map(String::as_str));
    let watch_store = store.clone();
    tokio::spawn(async move {
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut first = true;
        loop {
            let ev = tokio::select! {
                ev = events.recv() => ev,
                _ = &mut deadline => None,
                _ = tx.closed() => None,
            };
            let Some(ev) = ev else { break };
            let line = match output {
                Output::Table if !matches!(ev.kind, EventType::Bookmark | EventType::Error) => {
                    let t = crate::table::table_of(&watch_store.res, &ev.obj.value(), include, first);
                    first = false;
                    let mut line = serde_json::to_vec(&json!({ "type": ev.kind.as_str(), "object": t }))
                        .unwrap_or_default();
                    line.push(b'\n');
                    line
                }
                // The cached encoding goes out as it is.
                _ => {
                    let kind = ev.kind.as_str();
                    let mut line = Vec::with_capacity(ev.obj.json.len() + kind.len() + 24);
                    line.extend_from_slice(br#"{"type":""#);
                    line.extend_from_slice(kind.as_bytes());
                    line.extend_from_slice(br#"","object":"#);
                    line.extend_from_slice(&ev.obj.json);
                    line.extend_from_slice(b"}\n");
                    line
                }
            };
            if tx.send(Ok(Frame::data(Bytes::from(line)))).await.is_err() {
                break;
            }
        }
        if let Some(id) = id {
            watch_store.cacher.stop_watch(id);
        }
    });
    Ok(stream_response(rx))
}

/// The streamed response carrying the watch's events.
fn stream_response(rx: mpsc::Receiver<Result<Frame<Bytes>, BoxError>>) -> Response<BoxBody> {
    let body = StreamBody::new(ReceiverStream::new(rx)).boxed_unsync();
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::OK;
    resp.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    resp.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-cache, private"));
    resp
}

/// `sendInitialEvents=true` (a streaming list, "watch-list"): the current state as ADDED
/// events, then a bookmark annotated `k8s.io/initial-events-end`. Checked as upstream:
/// it needs `allowWatchBookmarks=true` and `resourceVersionMatch=NotOlderThan`.
fn send_initial_events(q: &Query, bookmarks: bool) -> ApiResult<bool> {
    let send = query::flag(q, "sendInitialEvents");
    let rv_match = q.get("resourceVersionMatch").map(String::as_str).filter(|m| !m.is_empty());
    if send && rv_match != Some("NotOlderThan") {
        return Err(ApiError::bad_request(
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    if send && !bookmarks {
        return Err(ApiError::bad_request(
            "allowWatchBookmarks: Forbidden: allowWatchBookmarks must be set to true when sendInitialEvents is set",
        ));
    }
    if !send && rv_match.is_some() {
        return Err(ApiError::bad_request(
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ));
    }
    Ok(send)
}
