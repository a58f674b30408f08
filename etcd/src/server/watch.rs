//! The Watch service (etcd's `v3rpc/watch.go`): one bidirectional stream carries many
//! watchers. A receive task turns create/cancel/progress requests into watchers on the
//! watchable store; a send task turns what the store delivers into `WatchResponse`s, adding
//! previous values and splitting large responses into fragments when asked to.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::Stream;
use parking_lot::Mutex;
use prost::Message;
use proto::etcdserverpb::watch_server::Watch;
use proto::etcdserverpb::{
    WatchCreateRequest, WatchRequest, WatchResponse, watch_create_request::FilterType,
    watch_request::RequestUnion,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::EtcdServer;
use crate::auth::{Access, Origin};
use crate::error::EtcdError;
use crate::mvcc::{KeyRange, RangeEnd, RangeOptions, WatchMsg, WatchSpec, WatcherKey};

/// Buffered messages per stream before its watchers fall back to catching up from history
/// (etcd's chanBufLen).
const STREAM_BUFFER: usize = 128;
/// Bytes gRPC may add around a request; fragments are cut at max-request-bytes plus this.
const GRPC_OVERHEAD: usize = 512 * 1024;

static STREAM_IDS: AtomicU64 = AtomicU64::new(1);

pub struct WatchService {
    pub server: Arc<EtcdServer>,
}

#[derive(Clone, Copy, Default)]
struct WatcherOpts {
    prev_kv: bool,
    fragment: bool,
}

#[derive(Default)]
struct StreamState {
    watchers: HashMap<i64, WatcherOpts>,
    next_id: i64,
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchResponse, Status>> + Send>>;

/// clientv3's WithRequireLeader: refuse a stream while the cluster has no leader.
pub fn require_leader<T>(server: &EtcdServer, request: &Request<T>) -> Result<(), Status> {
    let wants_leader = request.metadata().get("hasleader").is_some_and(|v| v == "true");
    if wants_leader && server.node.status.leader() == raft::INVALID_ID {
        return Err(EtcdError::NoLeader.into());
    }
    Ok(())
}

#[tonic::async_trait]
impl Watch for WatchService {
    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<Streaming<WatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        require_leader(&self.server, &request)?;
        // Who the stream is: each create request is authorized against it again, as
        // etcd does, so a simple token is looked up (and renewed) per watch.
        let mut who = Request::new(());
        *who.metadata_mut() = request.metadata().clone();
        if let Some(conn) = request.extensions().get::<component_base::http::ConnectionInfo>() {
            who.extensions_mut().insert(conn.clone());
        }
        let inbound = request.into_inner();
        let stream = STREAM_IDS.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel::<WatchMsg>(STREAM_BUFFER);
        let (out_tx, out_rx) = mpsc::channel::<Result<WatchResponse, Status>>(16);
        let state = Arc::new(Mutex::new(StreamState::default()));
        tokio::spawn(recv_loop(self.server.clone(), who, inbound, tx, state.clone(), stream));
        tokio::spawn(send_loop(self.server.clone(), rx, out_tx, state, stream));
        Ok(Response::new(Box::pin(ReceiverStream::new(out_rx))))
    }
}

async fn recv_loop(
    server: Arc<EtcdServer>,
    who: Request<()>,
    mut inbound: Streaming<WatchRequest>,
    tx: mpsc::Sender<WatchMsg>,
    state: Arc<Mutex<StreamState>>,
    stream: u64,
) {
    loop {
        let req = match inbound.message().await {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!("watch stream {stream} ended: {e}");
                break;
            }
        };
        match req.request_union {
            Some(RequestUnion::CreateRequest(c)) => {
                let alive = create(&server, &who, &tx, &state, stream, c).await;
                if !alive {
                    break;
                }
            }
            Some(RequestUnion::CancelRequest(c)) => {
                let known = state.lock().watchers.remove(&c.watch_id).is_some();
                if known && server.watchable.cancel(WatcherKey { stream, id: c.watch_id }) {
                    let resp = WatchResponse {
                        header: Some(server.header(server.store.current_rev())),
                        watch_id: c.watch_id,
                        canceled: true,
                        ..Default::default()
                    };
                    if tx.send(WatchMsg::Control(resp)).await.is_err() {
                        break;
                    }
                }
            }
            Some(RequestUnion::ProgressRequest(_)) => server.watchable.request_progress(stream, tx.clone()),
            None => {}
        }
    }
    // The client is gone: drop its watchers (and with them the store's senders, which ends
    // the send loop once it drained).
    server.watchable.cancel_stream(stream);
}

/// Handles a create request; false if the stream is gone.
async fn create(
    server: &EtcdServer,
    who: &Request<()>,
    tx: &mpsc::Sender<WatchMsg>,
    state: &Mutex<StreamState>,
    stream: u64,
    c: WatchCreateRequest,
) -> bool {
    let current = server.store.current_rev();
    let refuse = |id: i64, reason: &str| {
        WatchMsg::Control(WatchResponse {
            header: Some(server.header(current)),
            watch_id: id,
            created: true,
            canceled: true,
            cancel_reason: reason.to_string(),
            ..Default::default()
        })
    };
    // An empty key means the smallest key, "\0".
    let key = if c.key.is_empty() { vec![0] } else { c.key.clone() };
    let range = KeyRange::from_request(&key, &c.range_end);
    if let RangeEnd::Before(end) = &range.end
        && end.as_slice() <= key.as_slice()
    {
        return tx.send(refuse(-1, "mvcc: watcher range is empty")).await.is_ok();
    }
    let permitted = server.caller(who).and_then(|caller| match caller {
        None => Ok(()),
        Some(info) => server.auth.check_range(&Origin::Client(info), &key, &c.range_end, Access::Read),
    });
    if permitted.is_err() {
        // etcd's reason is the gRPC error's text.
        let reason = "rpc error: code = PermissionDenied desc = etcdserver: permission denied";
        return tx.send(refuse(-1, reason)).await.is_ok();
    }
    let id = {
        let mut st = state.lock();
        if c.watch_id != 0 {
            if st.watchers.contains_key(&c.watch_id) { None } else { Some(c.watch_id) }
        } else {
            while st.watchers.contains_key(&st.next_id) {
                st.next_id += 1;
            }
            let id = st.next_id;
            st.next_id += 1;
            Some(id)
        }
    };
    let Some(id) = id else {
        return tx.send(refuse(-1, "mvcc: duplicate watch ID provided on the WatchStream")).await.is_ok();
    };
    let filters: Vec<FilterType> = c.filters().collect();
    state.lock().watchers.insert(id, WatcherOpts { prev_kv: c.prev_kv, fragment: c.fragment });
    let created = WatchResponse {
        header: Some(server.header(current)),
        watch_id: id,
        created: true,
        ..Default::default()
    };
    if tx.send(WatchMsg::Control(created)).await.is_err() {
        return false;
    }
    // "From now" means after the revision the created response reported, even if writes
    // land before the watcher is registered.
    let start_rev = if c.start_revision == 0 { current + 1 } else { c.start_revision };
    let spec = WatchSpec {
        range,
        // etcd 3.4 answers a negative start revision as a compacted one.
        start_rev,
        filter_put: filters.contains(&FilterType::Noput),
        filter_delete: filters.contains(&FilterType::Nodelete),
        progress_notify: c.progress_notify,
    };
    server.watchable.watch(WatcherKey { stream, id }, spec, tx.clone());
    true
}

async fn send_loop(
    server: Arc<EtcdServer>,
    mut rx: mpsc::Receiver<WatchMsg>,
    out: mpsc::Sender<Result<WatchResponse, Status>>,
    state: Arc<Mutex<StreamState>>,
    stream: u64,
) {
    let fragment_limit = server.limits.max_request_bytes + GRPC_OVERHEAD;
    while let Some(msg) = rx.recv().await {
        let responses = match msg {
            WatchMsg::Events { watch_id, mut events, revision } => {
                let Some(opts) = state.lock().watchers.get(&watch_id).copied() else {
                    continue; // canceled while these were queued
                };
                if opts.prev_kv {
                    for ev in &mut events {
                        let Some(kv) = &ev.kv else { continue };
                        let at = RangeOptions { rev: kv.mod_revision - 1, ..Default::default() };
                        if let Ok(mut r) = server.store.range(&KeyRange::single(&kv.key), at) {
                            ev.prev_kv = r.kvs.pop();
                        }
                    }
                }
                let resp = WatchResponse {
                    header: Some(server.header(revision)),
                    watch_id,
                    events,
                    ..Default::default()
                };
                if opts.fragment { fragment(resp, fragment_limit) } else { vec![resp] }
            }
            WatchMsg::Compacted { watch_id, compact_revision } => {
                state.lock().watchers.remove(&watch_id);
                // etcd sends this one with no revision in its header.
                vec![WatchResponse {
                    header: Some(server.header(0)),
                    watch_id,
                    canceled: true,
                    compact_revision: if compact_revision == 0 { -1 } else { compact_revision },
                    ..Default::default()
                }]
            }
            WatchMsg::Progress { revision } => vec![WatchResponse {
                header: Some(server.header(revision)),
                watch_id: -1,
                ..Default::default()
            }],
            WatchMsg::Control(resp) => vec![resp],
        };
        for resp in responses {
            if out.send(Ok(resp)).await.is_err() {
                server.watchable.cancel_stream(stream);
                return;
            }
        }
    }
}

/// Splits a response whose events exceed `limit` bytes into fragments, all but the last
/// marked `fragment` (etcd's sendFragments). A single event is never split.
fn fragment(resp: WatchResponse, limit: usize) -> Vec<WatchResponse> {
    if resp.encoded_len() < limit || resp.events.len() < 2 {
        return vec![resp];
    }
    let template = WatchResponse { events: Vec::new(), fragment: true, ..resp.clone() };
    let mut out = Vec::new();
    let mut cur = template.clone();
    for ev in resp.events {
        cur.events.push(ev);
        if cur.events.len() > 1 && cur.encoded_len() >= limit {
            let ev = cur.events.pop().expect("just pushed");
            out.push(std::mem::replace(&mut cur, template.clone()));
            cur.events.push(ev);
        }
    }
    cur.fragment = false;
    out.push(cur);
    out
}

/// Sends progress notifications to watchers that asked for them, until shutdown.
pub async fn run_progress_loop(server: Arc<EtcdServer>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval(server.limits.watch_progress_notify_interval);
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = ticker.tick() => server.watchable.notify_progress(),
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::mvccpb::{Event, KeyValue};

    #[test]
    fn fragments_split_at_the_limit_and_keep_single_events_whole() {
        let ev = |n: usize| Event {
            kv: Some(KeyValue { key: b"k".to_vec(), value: vec![0; n], ..Default::default() }),
            ..Default::default()
        };
        let resp =
            WatchResponse { watch_id: 3, events: vec![ev(600), ev(600), ev(600)], ..Default::default() };
        let parts = fragment(resp, 1000);
        assert_eq!(parts.len(), 3);
        assert!(parts[0].fragment && parts[1].fragment && !parts[2].fragment);
        assert!(parts.iter().all(|p| p.watch_id == 3 && p.events.len() == 1));
        let one = WatchResponse { events: vec![ev(5000)], ..Default::default() };
        assert_eq!(fragment(one, 1000).len(), 1);
    }
}
