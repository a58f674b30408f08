//! Our etcd driven through the etcd v3 gRPC API with tonic clients, as clientv3 drives it:
//! watch stream semantics (ids, batching, filters, prev_kv, cancel, progress, fragments,
//! slow watchers), transactions, range options, leases across a restart, and the
//! maintenance service. Each test starts its own server and asserts what a client sees.
//!
//! Every expectation here was checked against real etcd 3.4.23: set
//! `E2E_GRPC_FLAVOR=real` to run the same tests against `/usr/bin/etcd`.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use e2e::{Etcd, EtcdOptions, Flavor, wait_for};
use prost::Message;
use proto::etcdserverpb::alarm_request::AlarmAction;
use proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use proto::etcdserverpb::kv_client::KvClient;
use proto::etcdserverpb::lease_client::LeaseClient;
use proto::etcdserverpb::maintenance_client::MaintenanceClient;
use proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use proto::etcdserverpb::request_op::Request as Op;
use proto::etcdserverpb::response_op::Response as OpResponse;
use proto::etcdserverpb::watch_client::WatchClient;
use proto::etcdserverpb::watch_create_request::FilterType;
use proto::etcdserverpb::watch_request::RequestUnion;
use proto::etcdserverpb::{
    AlarmRequest, CompactionRequest, Compare, DeleteRangeRequest, HashKvRequest, LeaseGrantRequest,
    LeaseKeepAliveRequest, LeaseLeasesRequest, LeaseRevokeRequest, LeaseTimeToLiveRequest, PutRequest,
    RangeRequest, RangeResponse, RequestOp, ResponseOp, SnapshotRequest, StatusRequest, TxnRequest,
    TxnResponse, WatchCancelRequest, WatchCreateRequest, WatchProgressRequest, WatchRequest, WatchResponse,
};
use proto::mvccpb::event::EventType;
use proto::mvccpb::{Event, KeyValue};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status, Streaming};

/// How long one expected watch response may take.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a response that must NOT come is waited for.
const QUIET: Duration = Duration::from_millis(500);
/// Upper bound for any test's async part.
const TEST_TIMEOUT: Duration = Duration::from_secs(300);

// ---------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------

/// The server under test: ours, or real etcd 3.4 with `E2E_GRPC_FLAVOR=real`.
fn flavor() -> Flavor {
    match std::env::var("E2E_GRPC_FLAVOR").as_deref() {
        Ok("real") => Flavor::Real,
        _ => Flavor::Ours,
    }
}

fn start(extra_args: &[&str]) -> Etcd {
    Etcd::start(EtcdOptions {
        flavor: flavor(),
        extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

/// Runs a test's async part with an overall deadline.
fn run<F: Future>(rt: &tokio::runtime::Runtime, what: &str, f: F) -> F::Output {
    rt.block_on(async {
        tokio::time::timeout(TEST_TIMEOUT, f)
            .await
            .unwrap_or_else(|_| panic!("{what}: not done within {TEST_TIMEOUT:?}"))
    })
}

/// A new HTTP/2 connection to `etcd`'s client port (every call dials its own), with no
/// per-request deadline so streams may stay open; must be called inside a runtime.
fn channel(etcd: &Etcd) -> Channel {
    Endpoint::from_shared(format!("http://{}", etcd.client_addr()))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(5))
        .connect_lazy()
}

fn kv_client(etcd: &Etcd) -> KvClient<Channel> {
    KvClient::new(channel(etcd)).max_decoding_message_size(64 << 20)
}

/// A Watch stream: requests go through a channel, responses are read with timeouts.
struct WatchStream {
    requests: mpsc::Sender<WatchRequest>,
    /// The call itself is awaited lazily: grpc-go sends response headers only with the
    /// first response, so awaiting it before the first request would wait forever.
    opening: Option<JoinHandle<Result<Streaming<WatchResponse>, Status>>>,
    responses: Option<Streaming<WatchResponse>>,
}

impl WatchStream {
    fn open(ch: Channel) -> Self {
        Self::open_with(ch, false)
    }

    /// With `has_leader`, the stream carries clientv3's `hasleader: true` metadata.
    fn open_with(ch: Channel, has_leader: bool) -> Self {
        let (tx, rx) = mpsc::channel(64);
        let mut request = tonic::Request::new(ReceiverStream::new(rx));
        if has_leader {
            request.metadata_mut().insert("hasleader", "true".parse().expect("metadata value"));
        }
        let mut client = WatchClient::new(ch).max_decoding_message_size(64 << 20);
        let opening = tokio::spawn(async move { client.watch(request).await.map(|r| r.into_inner()) });
        Self { requests: tx, opening: Some(opening), responses: None }
    }

    async fn send(&self, r: RequestUnion) {
        self.requests
            .send(WatchRequest { request_union: Some(r) })
            .await
            .expect("watch request stream closed");
    }

    /// Sends a create request and returns the `created` response (nothing else may be in
    /// flight on the stream).
    async fn create(&mut self, c: WatchCreateRequest) -> WatchResponse {
        self.send(RequestUnion::CreateRequest(c.clone())).await;
        let r = self.next().await;
        assert!(r.created && !r.canceled && r.events.is_empty(), "answer to {c:?}: {r:?}");
        r
    }

    async fn cancel(&self, watch_id: i64) {
        self.send(RequestUnion::CancelRequest(WatchCancelRequest { watch_id })).await;
    }

    async fn request_progress(&self) {
        self.send(RequestUnion::ProgressRequest(WatchProgressRequest {})).await;
    }

    async fn responses(&mut self) -> &mut Streaming<WatchResponse> {
        if let Some(opening) = self.opening.take() {
            let stream = opening.await.expect("watch call task").expect("opening the watch stream");
            self.responses = Some(stream);
        }
        self.responses.as_mut().expect("opened")
    }

    /// The next response, or None if none comes within `d`.
    async fn next_within(&mut self, d: Duration) -> Option<WatchResponse> {
        let deadline = tokio::time::Instant::now() + d;
        let responses = tokio::time::timeout_at(deadline, self.responses()).await.ok()?;
        match tokio::time::timeout_at(deadline, responses.message()).await {
            Err(_) => None,
            Ok(Ok(Some(r))) => Some(r),
            Ok(Ok(None)) => panic!("the server ended the watch stream"),
            Ok(Err(status)) => panic!("watch stream failed: {status:?}"),
        }
    }

    async fn next(&mut self) -> WatchResponse {
        self.next_within(RESPONSE_TIMEOUT)
            .await
            .unwrap_or_else(|| panic!("no watch response within {RESPONSE_TIMEOUT:?}"))
    }

    /// The next response that carries events (skipping nothing else: any other response
    /// is a failure).
    async fn next_events(&mut self) -> WatchResponse {
        let r = self.next().await;
        assert!(!r.events.is_empty() && !r.created && !r.canceled, "expected events, got {r:?}");
        r
    }
}

fn create_req(key: &[u8], range_end: &[u8]) -> WatchCreateRequest {
    WatchCreateRequest { key: key.to_vec(), range_end: range_end.to_vec(), ..Default::default() }
}

/// The end of the range of keys with prefix `p` (clientv3's GetPrefixRangeEnd).
fn prefix_end(p: &[u8]) -> Vec<u8> {
    let mut end = p.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn kv_of(e: &Event) -> &KeyValue {
    e.kv.as_ref().expect("event without kv")
}

/// (type, key, value, mod_revision) of an event, for comparisons.
fn ev(e: &Event) -> (EventType, String, String, i64) {
    let kv = kv_of(e);
    (
        e.r#type(),
        String::from_utf8_lossy(&kv.key).into(),
        String::from_utf8_lossy(&kv.value).into(),
        kv.mod_revision,
    )
}

fn put_ev(key: &str, value: &str, rev: i64) -> (EventType, String, String, i64) {
    (EventType::Put, key.into(), value.into(), rev)
}

/// The header revision of a response (every response type used here has a header).
fn header_rev<T: HasHeader>(r: &T) -> i64 {
    r.header_revision()
}

trait HasHeader {
    fn header_revision(&self) -> i64;
}

macro_rules! has_header {
    ($($t:ty),*) => {$(
        impl HasHeader for $t {
            fn header_revision(&self) -> i64 {
                self.header.as_ref().expect(concat!(stringify!($t), " without header")).revision
            }
        }
    )*};
}
has_header!(
    WatchResponse,
    RangeResponse,
    TxnResponse,
    proto::etcdserverpb::PutResponse,
    proto::etcdserverpb::DeleteRangeResponse
);

async fn put(kv: &mut KvClient<Channel>, key: &str, value: &str) -> i64 {
    let r = kv
        .put(PutRequest { key: key.into(), value: value.into(), ..Default::default() })
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e:?}"))
        .into_inner();
    header_rev(&r)
}

async fn get(kv: &mut KvClient<Channel>, key: &str) -> RangeResponse {
    kv.range(RangeRequest { key: key.into(), ..Default::default() })
        .await
        .unwrap_or_else(|e| panic!("get {key}: {e:?}"))
        .into_inner()
}

async fn range(kv: &mut KvClient<Channel>, req: RangeRequest) -> RangeResponse {
    kv.range(req.clone()).await.unwrap_or_else(|e| panic!("range {req:?}: {e:?}")).into_inner()
}

/// The store's current revision.
async fn current_rev(kv: &mut KvClient<Channel>) -> i64 {
    header_rev(&get(kv, "current-revision-probe").await)
}

async fn txn(kv: &mut KvClient<Channel>, req: TxnRequest) -> TxnResponse {
    kv.txn(req.clone()).await.unwrap_or_else(|e| panic!("txn {req:?}: {e:?}")).into_inner()
}

fn op_put(key: &str, value: &str) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestPut(PutRequest {
            key: key.into(),
            value: value.into(),
            ..Default::default()
        })),
    }
}

fn op_get(key: &str) -> RequestOp {
    RequestOp { request: Some(Op::RequestRange(RangeRequest { key: key.into(), ..Default::default() })) }
}

fn cmp(key: &str, target: CompareTarget, result: CompareResult, value: TargetUnion) -> Compare {
    Compare {
        key: key.into(),
        target: target as i32,
        result: result as i32,
        target_union: Some(value),
        ..Default::default()
    }
}

fn keys_of(r: &RangeResponse) -> Vec<String> {
    r.kvs.iter().map(|kv| String::from_utf8_lossy(&kv.key).into()).collect()
}

fn assert_status(status: &Status, code: Code, message: &str, what: &str) {
    assert_eq!((status.code(), status.message()), (code, message), "{what}: {status:?}");
}

// ---------------------------------------------------------------------------------------
// 1. Watch stream semantics
// ---------------------------------------------------------------------------------------

/// Two watchers on one stream get ids 0 and 1; created responses carry the current
/// revision; the events of one txn arrive together at the txn's revision; prev_kv is
/// absent for a key's first put and present afterwards.
#[test]
fn watch_ids_headers_txn_batching_and_prev_kv() {
    let rt = runtime();
    let etcd = start(&[]);
    run(&rt, "watch ids", async {
        let mut kv = kv_client(&etcd);
        let rev0 = put(&mut kv, "/w/x", "before").await;

        let mut w = WatchStream::open(channel(&etcd));
        let c0 = w.create(create_req(b"/w/", &prefix_end(b"/w/"))).await;
        assert_eq!(c0.watch_id, 0, "first watcher of a stream: {c0:?}");
        assert_eq!(header_rev(&c0), rev0, "created response's header revision: {c0:?}");
        let c1 = w.create(WatchCreateRequest { prev_kv: true, ..create_req(b"/w/a", b"") }).await;
        assert_eq!(c1.watch_id, 1, "second watcher of a stream: {c1:?}");
        assert_eq!(header_rev(&c1), rev0, "created response's header revision: {c1:?}");

        // Two puts in one txn: one revision, one response per watcher.
        let t = txn(
            &mut kv,
            TxnRequest { success: vec![op_put("/w/a", "a1"), op_put("/w/b", "b1")], ..Default::default() },
        )
        .await;
        assert!(t.succeeded);
        let rev1 = header_rev(&t);
        assert_eq!(rev1, rev0 + 1, "a txn of two puts takes one revision");

        let mut by_id: HashMap<i64, WatchResponse> = HashMap::new();
        for _ in 0..2 {
            let r = w.next_events().await;
            assert!(
                by_id.insert(r.watch_id, r.clone()).is_none(),
                "two responses for watcher {}: {r:?}",
                r.watch_id
            );
        }
        let r0 = &by_id[&0];
        assert_eq!(header_rev(r0), rev1, "header revision of the txn's events: {r0:?}");
        assert_eq!(
            r0.events.iter().map(ev).collect::<Vec<_>>(),
            [put_ev("/w/a", "a1", rev1), put_ev("/w/b", "b1", rev1)],
            "both puts of the txn in one response"
        );
        let r1 = &by_id[&1];
        assert_eq!(header_rev(r1), rev1);
        assert_eq!(r1.events.iter().map(ev).collect::<Vec<_>>(), [put_ev("/w/a", "a1", rev1)]);
        assert_eq!(r1.events[0].prev_kv, None, "prev_kv of a key's first put");
        let created = kv_of(&r1.events[0]);
        assert_eq!((created.create_revision, created.version), (rev1, 1));

        // The second put of /w/a carries the first as prev_kv.
        let rev2 = put(&mut kv, "/w/a", "a2").await;
        let mut by_id: HashMap<i64, WatchResponse> = HashMap::new();
        for _ in 0..2 {
            let r = w.next_events().await;
            by_id.insert(r.watch_id, r);
        }
        assert_eq!(by_id[&0].events.iter().map(ev).collect::<Vec<_>>(), [put_ev("/w/a", "a2", rev2)]);
        assert_eq!(by_id[&0].events[0].prev_kv, None, "prev_kv without asking for it");
        let e = &by_id[&1].events[0];
        assert_eq!(ev(e), put_ev("/w/a", "a2", rev2));
        assert_eq!((kv_of(e).create_revision, kv_of(e).version), (rev1, 2));
        let prev = e.prev_kv.as_ref().expect("prev_kv of the second put");
        assert_eq!(
            (prev.key.as_slice(), prev.value.as_slice(), prev.mod_revision, prev.version),
            (&b"/w/a"[..], &b"a1"[..], rev1, 1)
        );

        // A delete: the event's kv is just the key and the revision.
        let d = kv
            .delete_range(DeleteRangeRequest { key: b"/w/a".to_vec(), ..Default::default() })
            .await
            .expect("delete /w/a")
            .into_inner();
        let rev3 = d.header.expect("header").revision;
        let mut by_id: HashMap<i64, WatchResponse> = HashMap::new();
        for _ in 0..2 {
            let r = w.next_events().await;
            by_id.insert(r.watch_id, r);
        }
        for id in [0, 1] {
            let e = &by_id[&id].events[0];
            assert_eq!(e.r#type(), EventType::Delete, "watcher {id}: {e:?}");
            assert_eq!(
                e.kv,
                Some(KeyValue { key: b"/w/a".to_vec(), mod_revision: rev3, ..Default::default() }),
                "watcher {id}: kv of a delete event"
            );
        }
        let prev = by_id[&1].events[0].prev_kv.as_ref().expect("prev_kv of a delete");
        assert_eq!((prev.value.as_slice(), prev.mod_revision), (&b"a2"[..], rev2));

        // One DeleteRange over several keys: one response, one revision.
        let d = kv
            .delete_range(DeleteRangeRequest {
                key: b"/w/".to_vec(),
                range_end: prefix_end(b"/w/"),
                ..Default::default()
            })
            .await
            .expect("delete /w/")
            .into_inner();
        assert_eq!(d.deleted, 2);
        let rev4 = header_rev(&d);
        let r = w.next_events().await;
        assert_eq!(r.watch_id, 0);
        assert_eq!(
            r.events
                .iter()
                .map(|e| (e.r#type(), kv_of(e).key.clone(), kv_of(e).mod_revision))
                .collect::<Vec<_>>(),
            [(EventType::Delete, b"/w/b".to_vec(), rev4), (EventType::Delete, b"/w/x".to_vec(), rev4)],
            "the deletes of one DeleteRange"
        );
        assert!(w.next_within(QUIET).await.is_none(), "watcher 1 saw a delete of a key it does not watch");
    });
}

/// NOPUT delivers only deletes, NODELETE only puts.
#[test]
fn watch_filters() {
    let rt = runtime();
    let etcd = start(&[]);
    run(&rt, "watch filters", async {
        let mut kv = kv_client(&etcd);
        let mut w = WatchStream::open(channel(&etcd));
        let noput = w
            .create(WatchCreateRequest { filters: vec![FilterType::Noput as i32], ..create_req(b"f", b"") })
            .await
            .watch_id;
        let mut w2 = WatchStream::open(channel(&etcd));
        let nodelete = w2
            .create(WatchCreateRequest {
                filters: vec![FilterType::Nodelete as i32],
                ..create_req(b"f", b"")
            })
            .await
            .watch_id;

        let r_put = put(&mut kv, "f", "1").await;
        let r_del = header_rev(
            &kv.delete_range(DeleteRangeRequest { key: b"f".to_vec(), ..Default::default() })
                .await
                .expect("delete")
                .into_inner(),
        );
        let r_put2 = put(&mut kv, "f", "2").await;

        let r = w.next_events().await;
        assert_eq!(r.watch_id, noput);
        assert_eq!(
            r.events.iter().map(|e| (e.r#type(), kv_of(e).mod_revision)).collect::<Vec<_>>(),
            [(EventType::Delete, r_del)],
            "NOPUT watcher: the first thing it sees is the delete"
        );
        let r = w2.next_events().await;
        assert_eq!(r.watch_id, nodelete);
        assert_eq!(r.events.iter().map(ev).collect::<Vec<_>>(), [put_ev("f", "1", r_put)]);
        let r = w2.next_events().await;
        assert_eq!(
            r.events.iter().map(ev).collect::<Vec<_>>(),
            [put_ev("f", "2", r_put2)],
            "NODELETE skipped the delete"
        );
        assert!(w.next_within(QUIET).await.is_none(), "NOPUT watcher got a put");
    });
}

/// cancel_request answers with a canceled response and stops that watcher's events; a
/// cancel of an unknown id gets no answer at all.
#[test]
fn watch_cancel() {
    let rt = runtime();
    let etcd = start(&[]);
    run(&rt, "watch cancel", async {
        let mut kv = kv_client(&etcd);
        let mut w = WatchStream::open(channel(&etcd));
        let a = w.create(create_req(b"a", b"")).await.watch_id;
        let b = w.create(create_req(b"b", b"")).await.watch_id;
        put(&mut kv, "a", "1").await;
        let r = w.next_events().await;
        assert_eq!(r.watch_id, a);

        let rev = current_rev(&mut kv).await;
        w.cancel(a).await;
        let r = w.next().await;
        assert!(r.canceled && !r.created && r.events.is_empty(), "answer to cancel: {r:?}");
        assert_eq!((r.watch_id, header_rev(&r)), (a, rev), "canceled response: {r:?}");

        // The canceled watcher's key is written first: were its event delivered, it would
        // come before b's.
        put(&mut kv, "a", "2").await;
        let rb = put(&mut kv, "b", "1").await;
        let r = w.next_events().await;
        assert_eq!(
            (r.watch_id, r.events.iter().map(ev).collect::<Vec<_>>()),
            (b, vec![put_ev("b", "1", rb)])
        );

        // Unknown id: no response; the next thing on the stream is b's next event.
        w.cancel(42).await;
        let rb = put(&mut kv, "b", "2").await;
        let r = w.next().await;
        assert!(!r.canceled, "cancel of an unknown watch id was answered: {r:?}");
        assert_eq!(
            (r.watch_id, r.events.iter().map(ev).collect::<Vec<_>>()),
            (b, vec![put_ev("b", "2", rb)])
        );
        // Cancelling the same id twice: the second is unknown too.
        w.cancel(a).await;
        assert!(w.next_within(QUIET).await.is_none(), "second cancel of watcher {a} was answered");
    });
}

/// A watch from a past revision replays the history in one response at the current
/// revision, with prev_kv looked up in the history too.
#[test]
fn watch_history_with_prev_kv() {
    let rt = runtime();
    let etcd = start(&[]);
    run(&rt, "history watch", async {
        let mut kv = kv_client(&etcd);
        let r1 = put(&mut kv, "h", "v1").await;
        let r2 = put(&mut kv, "h", "v2").await;
        let r3 = put(&mut kv, "h", "v3").await;
        let rd = header_rev(
            &kv.delete_range(DeleteRangeRequest { key: b"h".to_vec(), ..Default::default() })
                .await
                .expect("delete")
                .into_inner(),
        );
        let now = put(&mut kv, "other", "x").await;
        let mut w = WatchStream::open(channel(&etcd));
        let c =
            w.create(WatchCreateRequest { start_revision: r2, prev_kv: true, ..create_req(b"h", b"") }).await;
        assert_eq!(header_rev(&c), now);
        let r = w.next_events().await;
        assert_eq!(header_rev(&r), now, "header revision of a catch-up response");
        let got: Vec<_> = r
            .events
            .iter()
            .map(|e| {
                (
                    e.r#type(),
                    kv_of(e).mod_revision,
                    e.prev_kv.as_ref().map(|p| (p.value.clone(), p.mod_revision)),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (EventType::Put, r2, Some((b"v1".to_vec(), r1))),
                (EventType::Put, r3, Some((b"v2".to_vec(), r2))),
                (EventType::Delete, rd, Some((b"v3".to_vec(), r3))),
            ],
            "history from revision {r2} with prev_kv"
        );
    });
}

/// A start revision in the future is accepted and delivers once that revision is written.
#[test]
fn watch_future_start_revision() {
    let rt = runtime();
    let etcd = start(&[]);
    run(&rt, "future watch", async {
        let mut kv = kv_client(&etcd);
        let rev = current_rev(&mut kv).await;
        let mut w = WatchStream::open(channel(&etcd));
        let c = w.create(WatchCreateRequest { start_revision: rev + 3, ..create_req(b"k", b"") }).await;
        assert_eq!(header_rev(&c), rev);
        put(&mut kv, "k", "1").await;
        put(&mut kv, "k", "2").await;
        assert!(w.next_within(QUIET).await.is_none(), "events before the start revision");
        let r3 = put(&mut kv, "k", "3").await;
        assert_eq!(r3, rev + 3);
        let r = w.next_events().await;
        assert_eq!(r.events.iter().map(ev).collect::<Vec<_>>(), [put_ev("k", "3", r3)]);
    });
}

/// progress_request is answered with watch_id -1, no events and the current revision.
#[test]
fn watch_progress_request() {
    let rt = runtime();
    let etcd = start(&[]);
    run(&rt, "progress request", async {
        let mut kv = kv_client(&etcd);
        let mut w = WatchStream::open(channel(&etcd));
        w.create(create_req(b"watched", b"")).await;
        for i in 0..5 {
            put(&mut kv, "unwatched", &i.to_string()).await;
        }
        let rev = current_rev(&mut kv).await;
        w.request_progress().await;
        let r = w.next().await;
        assert_eq!(
            (r.watch_id, r.created, r.canceled, r.events.len(), header_rev(&r)),
            (-1, false, false, 0, rev),
            "progress response: {r:?}"
        );
    });
}

/// range_end "\0" watches the key and everything after it; an empty key with range_end
/// "\0" watches every key; an empty key alone watches the key "\0".
#[test]
fn watch_from_key_and_empty_key() {
    let rt = runtime();
    let etcd = start(&[]);
    run(&rt, "from-key watch", async {
        let mut kv = kv_client(&etcd);
        let mut from_m = WatchStream::open(channel(&etcd));
        from_m.create(create_req(b"m", b"\0")).await;
        let mut all = WatchStream::open(channel(&etcd));
        all.create(create_req(b"", b"\0")).await;
        let mut empty = WatchStream::open(channel(&etcd));
        empty.create(create_req(b"", b"")).await;

        let ra = put(&mut kv, "a", "1").await;
        let rm = put(&mut kv, "m", "2").await;
        let rz = put(&mut kv, "\u{ff}z", "3").await;
        let r0 = put(&mut kv, "\0", "4").await;

        let mut got = Vec::new();
        while got.len() < 2 {
            got.extend(from_m.next_events().await.events.iter().map(ev));
        }
        assert_eq!(got, [put_ev("m", "2", rm), put_ev("\u{ff}z", "3", rz)], "watch from m");
        let mut got = Vec::new();
        while got.len() < 4 {
            got.extend(all.next_events().await.events.iter().map(ev));
        }
        assert_eq!(
            got,
            [put_ev("a", "1", ra), put_ev("m", "2", rm), put_ev("\u{ff}z", "3", rz), put_ev("\0", "4", r0)],
            "watch of everything"
        );
        let r = empty.next_events().await;
        assert_eq!(
            r.events.iter().map(ev).collect::<Vec<_>>(),
            [put_ev("\0", "4", r0)],
            "watch of the empty key"
        );
        assert!(from_m.next_within(QUIET).await.is_none(), "watch from m saw a key before m");
    });
}

/// clientv3's WithRequireLeader metadata: with a leader the watch works as usual.
#[test]
fn watch_with_hasleader_metadata() {
    let rt = runtime();
    let etcd = start(&[]);
    run(&rt, "hasleader watch", async {
        let mut kv = kv_client(&etcd);
        let mut w = WatchStream::open_with(channel(&etcd), true);
        let c = w.create(create_req(b"k", b"")).await;
        assert_eq!(c.watch_id, 0);
        let rev = put(&mut kv, "k", "v").await;
        let r = w.next_events().await;
        assert_eq!(r.events.iter().map(ev).collect::<Vec<_>>(), [put_ev("k", "v", rev)]);
    });
}

/// Explicit watch ids are honoured and skipped by the automatic ones; a duplicate id and
/// an empty key range are refused with created+canceled and a reason.
#[test]
fn watch_explicit_ids_and_refused_creates() {
    let rt = runtime();
    let etcd = start(&[]);
    run(&rt, "explicit watch ids", async {
        let mut kv = kv_client(&etcd);
        let rev = current_rev(&mut kv).await;
        let mut w = WatchStream::open(channel(&etcd));
        let mut ids = Vec::new();
        for explicit in [0, 0, 3, 0, 0, 0] {
            ids.push(
                w.create(WatchCreateRequest { watch_id: explicit, ..create_req(b"k", b"") }).await.watch_id,
            );
        }
        assert_eq!(ids, [0, 1, 3, 2, 4, 5], "automatic ids skip the explicit one");

        w.send(RequestUnion::CreateRequest(WatchCreateRequest { watch_id: 3, ..create_req(b"k", b"") }))
            .await;
        let r = w.next().await;
        assert_eq!(
            (r.watch_id, r.created, r.canceled, r.cancel_reason.as_str(), header_rev(&r)),
            (-1, true, true, "mvcc: duplicate watch ID provided on the WatchStream", rev),
            "duplicate watch id: {r:?}"
        );
        w.send(RequestUnion::CreateRequest(create_req(b"k", b"a"))).await;
        let r = w.next().await;
        assert_eq!(
            (r.watch_id, r.created, r.canceled, r.cancel_reason.as_str()),
            (-1, true, true, "mvcc: watcher range is empty"),
            "range_end before the key: {r:?}"
        );

        // The stream still works, for every watcher, explicit or not.
        let r1 = put(&mut kv, "k", "v").await;
        let mut seen: Vec<i64> = Vec::new();
        while seen.len() < ids.len() {
            let r = w.next_events().await;
            assert_eq!(
                r.events.iter().map(ev).collect::<Vec<_>>(),
                [put_ev("k", "v", r1)],
                "watcher {}",
                r.watch_id
            );
            seen.push(r.watch_id);
        }
        seen.sort_unstable();
        assert_eq!(seen, [0, 1, 2, 3, 4, 5]);
    });
}

// ---------------------------------------------------------------------------------------
// 2. Slow watchers never block writers
// ---------------------------------------------------------------------------------------

const SLOW_PUTS: usize = 20_000;
const SLOW_WRITERS: usize = 16;

/// A watcher that reads nothing while 20,000 puts of 1 KiB land under its prefix: every
/// put completes, and the watcher then receives each event exactly once, in order.
#[test]
fn slow_watcher_does_not_block_writers_and_catches_up() {
    let rt = runtime();
    let etcd = start(&[]);
    let (mut w, first_rev) = run(&rt, "slow watcher: writes", async {
        let mut kv = kv_client(&etcd);
        let mut w = WatchStream::open(channel(&etcd));
        w.create(create_req(b"/slow/", &prefix_end(b"/slow/"))).await;
        let first_rev = current_rev(&mut kv).await + 1;
        // A watcher that does read, on its own connection: it gets everything meanwhile.
        let mut fast = WatchStream::open(channel(&etcd));
        fast.create(create_req(b"/slow/", &prefix_end(b"/slow/"))).await;
        let fast_reader = tokio::spawn(async move {
            let mut next = first_rev;
            while next < first_rev + SLOW_PUTS as i64 {
                let r = fast.next_within(Duration::from_secs(60)).await.unwrap_or_else(|| {
                    panic!(
                        "the reading watcher stalled at revision {next} while another watcher did not read"
                    )
                });
                for e in &r.events {
                    assert_eq!(
                        kv_of(e).mod_revision,
                        next,
                        "reading watcher: revisions out of order or missing"
                    );
                    next += 1;
                }
            }
        });

        // The writers use their own connection: the unread watch stream holds on to its
        // connection's flow-control window.
        let writers_ch = channel(&etcd);
        let done = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let tasks: Vec<_> = (0..SLOW_WRITERS)
            .map(|wi| {
                let mut kv = KvClient::new(writers_ch.clone());
                let done = done.clone();
                tokio::spawn(async move {
                    for i in (wi..SLOW_PUTS).step_by(SLOW_WRITERS) {
                        let key = format!("/slow/{i:05}");
                        let value = vec![b'a' + (i % 26) as u8; 1024];
                        kv.put(PutRequest { key: key.into_bytes(), value, ..Default::default() })
                            .await
                            .unwrap_or_else(|e| panic!("put {i}: {e:?}"));
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let all = async {
            for t in tasks {
                t.await.expect("writer task");
            }
        };
        if tokio::time::timeout(Duration::from_secs(120), all).await.is_err() {
            panic!(
                "only {} of {SLOW_PUTS} puts completed within 120 s while a watcher did not read",
                done.load(Ordering::Relaxed)
            );
        }
        eprintln!("{SLOW_PUTS} puts of 1 KiB with an unread watcher took {:?}", started.elapsed());
        tokio::time::timeout(Duration::from_secs(120), fast_reader)
            .await
            .expect("the reading watcher got all events within 120 s")
            .expect("reading watcher");
        assert_eq!(current_rev(&mut kv).await, first_rev + SLOW_PUTS as i64 - 1);
        (w, first_rev)
    });

    let (code, body) = etcd.http_get("/metrics");
    assert_eq!(code, 200);
    let line = body
        .lines()
        .find(|l| l.starts_with("etcd_debugging_mvcc_slow_watcher_total"))
        .unwrap_or_else(|| panic!("no etcd_debugging_mvcc_slow_watcher_total sample in /metrics"));
    eprintln!("while the watcher is behind: {line}");

    run(&rt, "slow watcher: catch-up", async {
        let mut revs = Vec::with_capacity(SLOW_PUTS);
        let mut keys = HashSet::new();
        while revs.len() < SLOW_PUTS {
            let r = w.next_within(Duration::from_secs(30)).await.unwrap_or_else(|| {
                panic!(
                    "watcher stalled after {} of {SLOW_PUTS} events (last revision {:?})",
                    revs.len(),
                    revs.last()
                )
            });
            assert!(
                !r.canceled && !r.created && r.compact_revision == 0,
                "unexpected response: {:?}",
                WatchResponse { events: vec![], ..r }
            );
            for e in &r.events {
                let kv = kv_of(e);
                assert_eq!(e.r#type(), EventType::Put);
                assert!(
                    kv.mod_revision <= header_rev(&r),
                    "event at {} in a response at {}",
                    kv.mod_revision,
                    header_rev(&r)
                );
                let i: usize = std::str::from_utf8(&kv.key[b"/slow/".len()..])
                    .expect("utf-8")
                    .parse()
                    .expect("key index");
                assert_eq!(
                    kv.value,
                    vec![b'a' + (i % 26) as u8; 1024],
                    "value of {}",
                    String::from_utf8_lossy(&kv.key)
                );
                assert!(
                    keys.insert(kv.key.clone()),
                    "event for {} delivered twice",
                    String::from_utf8_lossy(&kv.key)
                );
                revs.push(kv.mod_revision);
            }
        }
        let expected: Vec<i64> = (first_rev..first_rev + SLOW_PUTS as i64).collect();
        if revs != expected {
            let first_bad = revs.iter().zip(&expected).position(|(a, b)| a != b);
            panic!(
                "event revisions are not {first_rev}.. in order without gaps; first mismatch at index {first_bad:?}"
            );
        }
        assert!(w.next_within(QUIET).await.is_none(), "more events than puts");
    });
}

// ---------------------------------------------------------------------------------------
// 3. Fragmented watch responses
// ---------------------------------------------------------------------------------------

const FRAG_MAX_REQUEST_BYTES: usize = 100_000;
/// etcd fragments at max-request-bytes plus gRPC's 512 KiB overhead allowance.
const FRAG_LIMIT: usize = FRAG_MAX_REQUEST_BYTES + 512 * 1024;
const FRAG_VALUES: usize = 12;
const FRAG_VALUE_SIZE: usize = 60_000;

/// A catch-up batch larger than the fragment limit is split into fragments when the
/// watcher asked for it, and sent whole when it did not.
#[test]
fn watch_fragments_large_responses() {
    let rt = runtime();
    let etcd = start(&["--max-request-bytes", &FRAG_MAX_REQUEST_BYTES.to_string()]);
    run(&rt, "fragments", async {
        let mut kv = kv_client(&etcd);
        let mut revs = Vec::new();
        for i in 0..FRAG_VALUES {
            let r = kv
                .put(PutRequest {
                    key: format!("/frag/{i:02}").into(),
                    value: vec![b'0' + i as u8; FRAG_VALUE_SIZE],
                    ..Default::default()
                })
                .await
                .expect("60 KB put")
                .into_inner();
            revs.push(header_rev(&r));
        }
        let rev = *revs.last().expect("puts");

        let mut w = WatchStream::open(channel(&etcd));
        let id = w
            .create(WatchCreateRequest {
                start_revision: 1,
                fragment: true,
                ..create_req(b"/frag/", &prefix_end(b"/frag/"))
            })
            .await
            .watch_id;
        let mut parts = Vec::new();
        loop {
            let r = w.next_events().await;
            assert_eq!(r.watch_id, id);
            let last = !r.fragment;
            parts.push(r);
            if last {
                break;
            }
            assert!(parts.len() <= FRAG_VALUES, "more fragments than events");
        }
        let sizes: Vec<(usize, usize)> = parts.iter().map(|p| (p.events.len(), p.encoded_len())).collect();
        eprintln!("fragments (events, bytes): {sizes:?}");
        assert!(
            parts.len() >= 2,
            "a {} byte catch-up was not fragmented: {sizes:?}",
            FRAG_VALUES * FRAG_VALUE_SIZE
        );
        for p in &parts {
            assert!(
                p.events.len() == 1 || p.encoded_len() < FRAG_LIMIT,
                "fragment over {FRAG_LIMIT} bytes: {sizes:?}"
            );
            assert_eq!(header_rev(p), rev, "fragment header revision");
        }
        let union: Vec<i64> =
            parts.iter().flat_map(|p| p.events.iter().map(|e| kv_of(e).mod_revision)).collect();
        assert_eq!(union, revs, "the fragments together carry every event once, in order");

        // Without fragment: one response with everything.
        let mut w = WatchStream::open(channel(&etcd));
        w.create(WatchCreateRequest { start_revision: 1, ..create_req(b"/frag/", &prefix_end(b"/frag/")) })
            .await;
        let r = w.next_events().await;
        assert!(!r.fragment, "fragment flag without asking for fragments");
        assert!(r.encoded_len() >= FRAG_LIMIT, "{} bytes", r.encoded_len());
        assert_eq!(
            r.events.iter().map(|e| kv_of(e).mod_revision).collect::<Vec<_>>(),
            revs,
            "unfragmented catch-up"
        );
    });
}

// ---------------------------------------------------------------------------------------
// 4. progress_notify
// ---------------------------------------------------------------------------------------

#[test]
fn watch_progress_notify() {
    let rt = runtime();
    let etcd = start(&["--experimental-watch-progress-notify-interval", "1s"]);
    run(&rt, "progress notify", async {
        let mut kv = kv_client(&etcd);
        put(&mut kv, "other", "1").await;
        let mut w = WatchStream::open(channel(&etcd));
        let id = w
            .create(WatchCreateRequest { progress_notify: true, ..create_req(b"quiet", b"") })
            .await
            .watch_id;
        let rev = current_rev(&mut kv).await;
        let r = w
            .next_within(Duration::from_secs(5))
            .await
            .expect("no progress notification within 5 s with a 1 s interval");
        assert_eq!(
            (r.watch_id, r.created, r.canceled, r.events.len(), header_rev(&r)),
            (id, false, false, 0, rev),
            "progress notification: {r:?}"
        );
    });
}

// ---------------------------------------------------------------------------------------
// 5. Txn semantics
// ---------------------------------------------------------------------------------------

#[test]
fn txn_semantics() {
    let rt = runtime();
    let etcd = start(&[]);
    run(&rt, "txn", async {
        let mut kv = kv_client(&etcd);
        let rev0 = current_rev(&mut kv).await;

        // A nested txn in the success branch; all its puts share one revision.
        let inner = TxnRequest {
            compare: vec![cmp(
                "n/missing",
                CompareTarget::Version,
                CompareResult::Equal,
                TargetUnion::Version(0),
            )],
            success: vec![op_put("n/inner", "i")],
            failure: vec![op_put("n/wrong", "w")],
        };
        let t = txn(
            &mut kv,
            TxnRequest {
                success: vec![
                    RequestOp { request: Some(Op::RequestTxn(inner)) },
                    op_put("n/outer", "o"),
                    op_put("n/third", "t"),
                ],
                ..Default::default()
            },
        )
        .await;
        let rev1 = header_rev(&t);
        assert!(t.succeeded);
        assert_eq!(rev1, rev0 + 1, "a txn with several puts takes exactly one revision");
        let Some(OpResponse::ResponseTxn(nested)) = &t.responses[0].response else {
            panic!("first response is not a txn: {t:?}")
        };
        assert!(nested.succeeded, "nested txn: {nested:?}");
        assert!(
            matches!(nested.responses[..], [ResponseOp { response: Some(OpResponse::ResponsePut(_)) }]),
            "{nested:?}"
        );
        let Some(OpResponse::ResponsePut(p)) = &t.responses[1].response else { panic!("{t:?}") };
        assert_eq!(p.header.as_ref().map(|h| h.revision), Some(rev1), "nested response header revision");
        let r = range(
            &mut kv,
            RangeRequest { key: b"n/".to_vec(), range_end: prefix_end(b"n/"), ..Default::default() },
        )
        .await;
        assert_eq!(keys_of(&r), ["n/inner", "n/outer", "n/third"]);
        assert!(r.kvs.iter().all(|kv| kv.mod_revision == rev1), "{r:?}");

        // The same key twice, also across nesting levels: refused. In the two branches of
        // one nested txn: fine.
        let nested = |success: Vec<RequestOp>, failure: Vec<RequestOp>| RequestOp {
            request: Some(Op::RequestTxn(TxnRequest { success, failure, ..Default::default() })),
        };
        for (what, ops) in [
            ("put, put", vec![op_put("d", "1"), op_put("d", "2")]),
            ("put, nested put", vec![op_put("d", "1"), nested(vec![op_put("d", "2")], vec![])]),
            (
                "put, delete range covering it",
                vec![
                    op_put("d/1", "1"),
                    RequestOp {
                        request: Some(Op::RequestDeleteRange(DeleteRangeRequest {
                            key: b"d/".to_vec(),
                            range_end: prefix_end(b"d/"),
                            ..Default::default()
                        })),
                    },
                ],
            ),
        ] {
            let e = kv.txn(TxnRequest { success: ops, ..Default::default() }).await.expect_err(what);
            assert_status(&e, Code::InvalidArgument, "etcdserver: duplicate key given in txn request", what);
        }
        let t = txn(
            &mut kv,
            TxnRequest {
                success: vec![nested(vec![op_put("d", "s")], vec![op_put("d", "f")])],
                ..Default::default()
            },
        )
        .await;
        assert!(t.succeeded, "one key in both branches of a nested txn");
        assert_eq!(get(&mut kv, "d").await.kvs[0].value, b"s");

        // Compares against a missing key: its version is 0, but its value compares false.
        let missing_version =
            cmp("missing", CompareTarget::Version, CompareResult::Equal, TargetUnion::Version(0));
        let t = txn(&mut kv, TxnRequest { compare: vec![missing_version], ..Default::default() }).await;
        assert!(t.succeeded, "version(missing) == 0");
        let missing_value =
            cmp("missing", CompareTarget::Value, CompareResult::Equal, TargetUnion::Value(vec![]));
        let t = txn(&mut kv, TxnRequest { compare: vec![missing_value], ..Default::default() }).await;
        assert!(!t.succeeded, "value(missing) == \"\" must fail: a missing value compares false");
        let missing_value =
            cmp("missing", CompareTarget::Value, CompareResult::NotEqual, TargetUnion::Value(b"x".to_vec()));
        let t = txn(&mut kv, TxnRequest { compare: vec![missing_value], ..Default::default() }).await;
        assert!(!t.succeeded, "value(missing) != \"x\" must fail too");

        // A compare with range_end holds only if it holds for every key in the range.
        put(&mut kv, "r/1", "x").await;
        put(&mut kv, "r/2", "x").await;
        put(&mut kv, "r/3", "x").await;
        let r3 = put(&mut kv, "r/3", "y").await;
        let over = |target, result, value| Compare {
            range_end: prefix_end(b"r/"),
            ..cmp("r/", target, result, value)
        };
        for (c, want) in [
            (over(CompareTarget::Version, CompareResult::Greater, TargetUnion::Version(0)), true),
            (over(CompareTarget::Version, CompareResult::Equal, TargetUnion::Version(1)), false),
            (over(CompareTarget::Mod, CompareResult::Less, TargetUnion::ModRevision(r3 + 1)), true),
            (over(CompareTarget::Mod, CompareResult::Less, TargetUnion::ModRevision(r3)), false),
            (over(CompareTarget::Value, CompareResult::Equal, TargetUnion::Value(b"x".to_vec())), false),
            (over(CompareTarget::Value, CompareResult::NotEqual, TargetUnion::Value(b"z".to_vec())), true),
            (over(CompareTarget::Value, CompareResult::Greater, TargetUnion::Value(b"w".to_vec())), true),
            (over(CompareTarget::Value, CompareResult::Less, TargetUnion::Value(b"y".to_vec())), false),
            (over(CompareTarget::Value, CompareResult::Less, TargetUnion::Value(b"y\0".to_vec())), true),
            (over(CompareTarget::Create, CompareResult::Less, TargetUnion::CreateRevision(r3)), true),
            (over(CompareTarget::Lease, CompareResult::Equal, TargetUnion::Lease(0)), true),
            (
                Compare {
                    range_end: prefix_end(b"none/"),
                    ..cmp("none/", CompareTarget::Version, CompareResult::Equal, TargetUnion::Version(0))
                },
                true,
            ),
        ] {
            let t = txn(&mut kv, TxnRequest { compare: vec![c.clone()], ..Default::default() }).await;
            assert_eq!(t.succeeded, want, "{c:?}");
        }

        // A read-only txn does not move the revision.
        let before = current_rev(&mut kv).await;
        let t =
            txn(&mut kv, TxnRequest { success: vec![op_get("r/1"), op_get("r/2")], ..Default::default() })
                .await;
        assert_eq!(header_rev(&t), before, "header of a read-only txn");
        assert_eq!(current_rev(&mut kv).await, before, "a read-only txn changed the revision");
        // Neither does a txn whose taken branch is empty.
        let t = txn(
            &mut kv,
            TxnRequest {
                compare: vec![cmp(
                    "r/1",
                    CompareTarget::Version,
                    CompareResult::Equal,
                    TargetUnion::Version(9),
                )],
                success: vec![op_put("r/x", "x")],
                ..Default::default()
            },
        )
        .await;
        assert!(!t.succeeded);
        assert_eq!(
            current_rev(&mut kv).await,
            before,
            "a failed txn with no failure ops changed the revision"
        );

        // 128 operations are fine, 129 are too many.
        let puts = |n: usize| (0..n).map(|i| op_put(&format!("many/{i:03}"), "v")).collect::<Vec<_>>();
        let t = txn(&mut kv, TxnRequest { success: puts(128), ..Default::default() }).await;
        assert_eq!(header_rev(&t), before + 1);
        let e = kv
            .txn(TxnRequest { success: puts(129), ..Default::default() })
            .await
            .expect_err("a txn of 129 puts");
        assert_status(
            &e,
            Code::InvalidArgument,
            "etcdserver: too many operations in txn request",
            "129 puts",
        );
        let compares = (0..129)
            .map(|i| {
                cmp(&format!("c{i}"), CompareTarget::Version, CompareResult::Equal, TargetUnion::Version(0))
            })
            .collect();
        let e = kv
            .txn(TxnRequest { compare: compares, ..Default::default() })
            .await
            .expect_err("a txn of 129 compares");
        assert_status(
            &e,
            Code::InvalidArgument,
            "etcdserver: too many operations in txn request",
            "129 compares",
        );

        // ignore_value needs an existing key, and keeps its value.
        let e = kv
            .put(PutRequest { key: b"absent".to_vec(), ignore_value: true, ..Default::default() })
            .await
            .expect_err("ignore_value on a missing key");
        assert_status(
            &e,
            Code::InvalidArgument,
            "etcdserver: key not found",
            "ignore_value on a missing key",
        );
        let e = kv
            .put(PutRequest {
                key: b"r/1".to_vec(),
                value: b"v".to_vec(),
                ignore_value: true,
                ..Default::default()
            })
            .await
            .expect_err("ignore_value with a value");
        assert_status(
            &e,
            Code::InvalidArgument,
            "etcdserver: value is provided",
            "ignore_value with a value",
        );
        let p = kv
            .put(PutRequest { key: b"r/1".to_vec(), ignore_value: true, prev_kv: true, ..Default::default() })
            .await
            .expect("ignore_value on an existing key")
            .into_inner();
        assert_eq!(p.prev_kv.map(|kv| kv.value), Some(b"x".to_vec()));
        let got = get(&mut kv, "r/1").await;
        assert_eq!(
            (got.kvs[0].value.as_slice(), got.kvs[0].version),
            (&b"x"[..], 2),
            "value after an ignore_value put"
        );

        // Ops in a txn see the writes of the ops before them.
        let t = txn(
            &mut kv,
            TxnRequest {
                success: vec![
                    op_put("ryw/1", "one"),
                    op_get("ryw/1"),
                    RequestOp {
                        request: Some(Op::RequestRange(RangeRequest {
                            key: b"ryw/".to_vec(),
                            range_end: prefix_end(b"ryw/"),
                            count_only: true,
                            ..Default::default()
                        })),
                    },
                    RequestOp {
                        request: Some(Op::RequestDeleteRange(DeleteRangeRequest {
                            key: b"ryw/0".to_vec(),
                            ..Default::default()
                        })),
                    },
                ],
                ..Default::default()
            },
        )
        .await;
        let trev = header_rev(&t);
        let Some(OpResponse::ResponseRange(got)) = &t.responses[1].response else { panic!("{t:?}") };
        assert_eq!(
            got.kvs
                .iter()
                .map(|kv| (kv.value.as_slice(), kv.mod_revision, kv.create_revision, kv.version))
                .collect::<Vec<_>>(),
            [(&b"one"[..], trev, trev, 1)],
            "a range after a put in the same txn"
        );
        let Some(OpResponse::ResponseRange(counted)) = &t.responses[2].response else { panic!("{t:?}") };
        assert_eq!(counted.count, 1, "count after a put in the same txn");
        let Some(OpResponse::ResponseDeleteRange(deleted)) = &t.responses[3].response else {
            panic!("{t:?}")
        };
        assert_eq!(deleted.deleted, 0);
        let t = txn(
            &mut kv,
            TxnRequest {
                success: vec![
                    RequestOp {
                        request: Some(Op::RequestDeleteRange(DeleteRangeRequest {
                            key: b"ryw/1".to_vec(),
                            ..Default::default()
                        })),
                    },
                    op_get("ryw/1"),
                ],
                ..Default::default()
            },
        )
        .await;
        let Some(OpResponse::ResponseRange(got)) = &t.responses[1].response else { panic!("{t:?}") };
        assert!(got.kvs.is_empty() && got.count == 0, "a range after a delete in the same txn: {got:?}");
        assert_eq!(header_rev(&t), trev + 1);

        // Compare on a key's lease.
        let lease = LeaseClient::new(channel(&etcd))
            .lease_grant(LeaseGrantRequest { ttl: 60, id: 0 })
            .await
            .expect("grant")
            .into_inner()
            .id;
        kv.put(PutRequest { key: b"leased".to_vec(), value: b"v".to_vec(), lease, ..Default::default() })
            .await
            .expect("put with lease");
        for (c, want) in [
            (cmp("leased", CompareTarget::Lease, CompareResult::Equal, TargetUnion::Lease(lease)), true),
            (cmp("leased", CompareTarget::Lease, CompareResult::Equal, TargetUnion::Lease(0)), false),
            (cmp("r/1", CompareTarget::Lease, CompareResult::Equal, TargetUnion::Lease(0)), true),
            (cmp("missing", CompareTarget::Lease, CompareResult::Equal, TargetUnion::Lease(0)), true),
        ] {
            let t = txn(&mut kv, TxnRequest { compare: vec![c.clone()], ..Default::default() }).await;
            assert_eq!(t.succeeded, want, "{c:?}");
        }
        // ignore_lease keeps the key's lease; it needs an existing key and no lease.
        kv.put(PutRequest {
            key: b"leased".to_vec(),
            value: b"v2".to_vec(),
            ignore_lease: true,
            ..Default::default()
        })
        .await
        .expect("ignore_lease put");
        let got = get(&mut kv, "leased").await;
        assert_eq!(
            (got.kvs[0].value.as_slice(), got.kvs[0].lease),
            (&b"v2"[..], lease),
            "after an ignore_lease put"
        );
        let e = kv
            .put(PutRequest {
                key: b"absent".to_vec(),
                value: b"v".to_vec(),
                ignore_lease: true,
                ..Default::default()
            })
            .await
            .expect_err("ignore_lease on a missing key");
        assert_status(
            &e,
            Code::InvalidArgument,
            "etcdserver: key not found",
            "ignore_lease on a missing key",
        );
        let e = kv
            .put(PutRequest {
                key: b"leased".to_vec(),
                value: b"v".to_vec(),
                lease,
                ignore_lease: true,
                ..Default::default()
            })
            .await
            .expect_err("ignore_lease with a lease");
        assert_status(
            &e,
            Code::InvalidArgument,
            "etcdserver: lease is provided",
            "ignore_lease with a lease",
        );

        // prev_kv on put and on delete.
        let p = kv
            .put(PutRequest {
                key: b"r/2".to_vec(),
                value: b"new".to_vec(),
                prev_kv: true,
                ..Default::default()
            })
            .await
            .expect("put with prev_kv")
            .into_inner();
        assert_eq!(p.prev_kv.map(|kv| (kv.value, kv.version)), Some((b"x".to_vec(), 1)));
        let p = kv
            .put(PutRequest {
                key: b"brand-new".to_vec(),
                value: b"v".to_vec(),
                prev_kv: true,
                ..Default::default()
            })
            .await
            .expect("put with prev_kv")
            .into_inner();
        assert_eq!(p.prev_kv, None, "prev_kv of a new key");
        let d = kv
            .delete_range(DeleteRangeRequest {
                key: b"r/".to_vec(),
                range_end: prefix_end(b"r/"),
                prev_kv: true,
            })
            .await
            .expect("delete with prev_kv")
            .into_inner();
        assert_eq!(d.deleted, 3);
        let prev: Vec<(Vec<u8>, Vec<u8>)> = d.prev_kvs.into_iter().map(|kv| (kv.key, kv.value)).collect();
        assert_eq!(
            prev,
            [
                (b"r/1".to_vec(), b"x".to_vec()),
                (b"r/2".to_vec(), b"new".to_vec()),
                (b"r/3".to_vec(), b"y".to_vec())
            ]
        );
    });

    // With --max-txn-ops 200, 129 operations pass.
    drop(etcd);
    let etcd = start(&["--max-txn-ops", "200"]);
    run(&rt, "max-txn-ops 200", async {
        let mut kv = kv_client(&etcd);
        let puts = (0..129).map(|i| op_put(&format!("many/{i:03}"), "v")).collect();
        let t = txn(&mut kv, TxnRequest { success: puts, ..Default::default() }).await;
        assert_eq!(t.responses.len(), 129);
        let e = kv
            .txn(TxnRequest {
                success: (0..201).map(|i| op_put(&format!("more/{i:03}"), "v")).collect(),
                ..Default::default()
            })
            .await
            .expect_err("a txn of 201 puts");
        assert_status(
            &e,
            Code::InvalidArgument,
            "etcdserver: too many operations in txn request",
            "201 puts",
        );
    });
}

// ---------------------------------------------------------------------------------------
// 6. Range options
// ---------------------------------------------------------------------------------------

#[test]
fn range_options() {
    let rt = runtime();
    let etcd = start(&[]);
    run(&rt, "range options", async {
        let mut kv = kv_client(&etcd);
        let base = current_rev(&mut kv).await;
        // Final state (revisions relative to base):
        //   key  create  mod  version  value
        //   a    +4      +4   1        m
        //   b    +1      +8   3        z
        //   c    +3      +6   2        a
        //   d    +2      +10  4        q
        for (k, v) in [
            ("b", "b1"),
            ("d", "d1"),
            ("c", "c1"),
            ("a", "m"),
            ("b", "b2"),
            ("c", "a"),
            ("d", "d2"),
            ("b", "z"),
            ("d", "d3"),
            ("d", "q"),
        ] {
            put(&mut kv, k, v).await;
        }
        let all = || RangeRequest { key: b"a".to_vec(), range_end: b"e".to_vec(), ..Default::default() };
        let r = range(&mut kv, all()).await;
        let facts: Vec<(String, i64, i64, i64, String)> = r
            .kvs
            .iter()
            .map(|kv| {
                (
                    String::from_utf8_lossy(&kv.key).into(),
                    kv.create_revision - base,
                    kv.mod_revision - base,
                    kv.version,
                    String::from_utf8_lossy(&kv.value).into(),
                )
            })
            .collect();
        assert_eq!(
            facts,
            [
                ("a".into(), 4, 4, 1, "m".into()),
                ("b".into(), 1, 8, 3, "z".into()),
                ("c".into(), 3, 6, 2, "a".into()),
                ("d".into(), 2, 10, 4, "q".into())
            ]
        );
        assert_eq!((r.count, r.more, header_rev(&r)), (4, false, base + 10));

        // limit, more, count.
        let r = range(&mut kv, RangeRequest { limit: 2, ..all() }).await;
        assert_eq!((keys_of(&r), r.more, r.count), (vec!["a".to_string(), "b".into()], true, 4));
        let r = range(&mut kv, RangeRequest { limit: 4, ..all() }).await;
        assert_eq!((keys_of(&r).len(), r.more, r.count), (4, false, 4));

        // Revision filters; count is taken before filtering.
        for (req, want) in [
            (RangeRequest { min_mod_revision: base + 6, ..all() }, vec!["b", "c", "d"]),
            (RangeRequest { max_mod_revision: base + 6, ..all() }, vec!["a", "c"]),
            (RangeRequest { min_create_revision: base + 3, ..all() }, vec!["a", "c"]),
            (RangeRequest { max_create_revision: base + 2, ..all() }, vec!["b", "d"]),
            (
                RangeRequest { min_mod_revision: base + 5, max_mod_revision: base + 8, ..all() },
                vec!["b", "c"],
            ),
            (RangeRequest { max_create_revision: base, ..all() }, vec![]),
        ] {
            let r = range(&mut kv, req.clone()).await;
            assert_eq!(
                (keys_of(&r), r.count, r.more),
                (want.iter().map(|s| s.to_string()).collect(), 4, false),
                "{req:?}"
            );
        }
        // A filter with a limit: more says whether filtered results were cut.
        let r = range(&mut kv, RangeRequest { min_mod_revision: base + 6, limit: 2, ..all() }).await;
        assert_eq!((keys_of(&r), r.count, r.more), (vec!["b".to_string(), "c".into()], 4, true));

        // Sorting.
        for (target, asc) in [
            (SortTarget::Key, ["a", "b", "c", "d"]),
            (SortTarget::Version, ["a", "c", "b", "d"]),
            (SortTarget::Create, ["b", "d", "c", "a"]),
            (SortTarget::Mod, ["a", "c", "b", "d"]),
            (SortTarget::Value, ["c", "a", "d", "b"]),
        ] {
            let sorted = |order: SortOrder| RangeRequest {
                sort_target: target as i32,
                sort_order: order as i32,
                ..all()
            };
            let r = range(&mut kv, sorted(SortOrder::Ascend)).await;
            assert_eq!(keys_of(&r), asc, "{target:?} ascending");
            let r = range(&mut kv, sorted(SortOrder::Descend)).await;
            let desc: Vec<&str> = asc.iter().rev().copied().collect();
            assert_eq!(keys_of(&r), desc, "{target:?} descending");
            // No order with a target other than the key means ascending.
            let r = range(&mut kv, sorted(SortOrder::None)).await;
            assert_eq!(keys_of(&r), asc, "{target:?} with sort_order NONE");
            // Sorting happens before the limit.
            let r = range(&mut kv, RangeRequest { limit: 1, ..sorted(SortOrder::Descend) }).await;
            assert_eq!(
                (keys_of(&r), r.more, r.count),
                (vec![desc[0].to_string()], true, 4),
                "{target:?} descending, limit 1"
            );
        }

        // keys_only and count_only.
        let r = range(&mut kv, RangeRequest { keys_only: true, ..all() }).await;
        assert_eq!(keys_of(&r), ["a", "b", "c", "d"]);
        assert!(
            r.kvs.iter().all(|kv| kv.value.is_empty() && kv.version > 0 && kv.mod_revision > 0),
            "keys_only: {r:?}"
        );
        let r = range(&mut kv, RangeRequest { count_only: true, ..all() }).await;
        assert_eq!((r.kvs.len(), r.count, r.more), (0, 4, false), "count_only");

        // serializable reads see the same data.
        let lin = range(&mut kv, all()).await;
        let ser = range(&mut kv, RangeRequest { serializable: true, ..all() }).await;
        assert_eq!(ser.kvs, lin.kvs, "serializable read");
        assert_eq!(header_rev(&ser), header_rev(&lin));

        // Reads at a revision.
        let at = |rev: i64| RangeRequest { revision: rev, ..all() };
        let r = range(&mut kv, at(base + 4)).await;
        let got: Vec<(String, String)> = r
            .kvs
            .iter()
            .map(|kv| (String::from_utf8_lossy(&kv.key).into(), String::from_utf8_lossy(&kv.value).into()))
            .collect();
        assert_eq!(
            got,
            [
                ("a".to_string(), "m".to_string()),
                ("b".into(), "b1".into()),
                ("c".into(), "c1".into()),
                ("d".into(), "d1".into())
            ]
        );
        assert_eq!(header_rev(&r), base + 10, "header of a read in the past carries the current revision");
        let t = txn(
            &mut kv,
            TxnRequest {
                success: vec![RequestOp { request: Some(Op::RequestRange(at(base + 4))) }],
                ..Default::default()
            },
        )
        .await;
        assert_eq!(header_rev(&t), base + 10, "header of a read-only txn");
        let Some(OpResponse::ResponseRange(inner)) = &t.responses[0].response else { panic!("{t:?}") };
        assert_eq!(inner.kvs.len(), 4);
        assert_eq!(header_rev(inner), base + 10, "header of a range in the past inside a txn");
        let r = range(&mut kv, RangeRequest { count_only: true, ..at(base + 2) }).await;
        assert_eq!((r.count, header_rev(&r)), (2, base + 10), "count_only in the past");
        let r = range(&mut kv, at(base)).await;
        assert_eq!((r.kvs.len(), r.count), (0, 0), "before the first put");
        let r = range(&mut kv, at(0)).await;
        assert_eq!(r.kvs, lin.kvs, "revision 0 is the current revision");
        let e = kv.range(at(base + 11)).await.expect_err("a future revision");
        assert_status(
            &e,
            Code::OutOfRange,
            "etcdserver: mvcc: required revision is a future revision",
            "future revision",
        );

        // A compacted revision.
        kv.compact(CompactionRequest { revision: base + 5, physical: true }).await.expect("compact");
        let e = kv.range(at(base + 4)).await.expect_err("a compacted revision");
        assert_status(
            &e,
            Code::OutOfRange,
            "etcdserver: mvcc: required revision has been compacted",
            "compacted revision",
        );
        let r = range(&mut kv, at(base + 5)).await;
        assert_eq!(keys_of(&r), ["a", "b", "c", "d"], "the compaction revision itself stays readable");
        let e = kv
            .compact(CompactionRequest { revision: base + 3, physical: false })
            .await
            .expect_err("compact again below");
        assert_status(
            &e,
            Code::OutOfRange,
            "etcdserver: mvcc: required revision has been compacted",
            "compacting below",
        );

        // No key.
        let e = kv.range(RangeRequest::default()).await.expect_err("a range without a key");
        assert_status(&e, Code::InvalidArgument, "etcdserver: key is not provided", "empty key");
        let e = kv
            .range(RangeRequest { range_end: vec![0], ..Default::default() })
            .await
            .expect_err("empty key, range_end \\0");
        assert_status(
            &e,
            Code::InvalidArgument,
            "etcdserver: key is not provided",
            "empty key with range_end \\0",
        );

        // Deleted keys are not counted; the revision before the delete still has them.
        kv.delete_range(DeleteRangeRequest { key: b"c".to_vec(), ..Default::default() })
            .await
            .expect("delete c");
        let r = range(&mut kv, RangeRequest { limit: 1, ..all() }).await;
        assert_eq!((keys_of(&r), r.count, r.more), (vec!["a".to_string()], 3, true), "after deleting c");
        let r = range(&mut kv, RangeRequest { count_only: true, ..all() }).await;
        assert_eq!(r.count, 3, "count_only after deleting c");
        let r = range(&mut kv, at(base + 10)).await;
        assert_eq!(
            (keys_of(&r), r.count),
            (vec!["a".to_string(), "b".into(), "c".into(), "d".into()], 4),
            "before the delete"
        );
    });
}

// ---------------------------------------------------------------------------------------
// 7. Leases across a restart
// ---------------------------------------------------------------------------------------

async fn time_to_live(ch: Channel, id: i64) -> proto::etcdserverpb::LeaseTimeToLiveResponse {
    let mut r = LeaseClient::new(ch)
        .lease_time_to_live(LeaseTimeToLiveRequest { id, keys: true })
        .await
        .expect("lease time-to-live")
        .into_inner();
    r.keys.sort();
    r
}

#[test]
fn leases_survive_restart() {
    let rt = runtime();
    let mut etcd = start(&[]);
    let (long, short) = run(&rt, "leases before restart", async {
        let mut leases = LeaseClient::new(channel(&etcd));
        let mut kv = kv_client(&etcd);
        let long =
            leases.lease_grant(LeaseGrantRequest { ttl: 60, id: 0 }).await.expect("grant").into_inner();
        assert_eq!(long.ttl, 60);
        let short =
            leases.lease_grant(LeaseGrantRequest { ttl: 3, id: 0 }).await.expect("grant").into_inner();
        // A TTL below the minimum (1.5 election timeouts, rounded up: 2 s) is raised to it.
        let tiny = leases.lease_grant(LeaseGrantRequest { ttl: 1, id: 0 }).await.expect("grant").into_inner();
        assert_eq!(tiny.ttl, 2, "granted TTL of a 1 s lease: {tiny:?}");
        for (key, lease) in [
            ("l/1", long.id),
            ("l/2", long.id),
            ("s/1", short.id),
            ("l/3", long.id),
            ("l/4", long.id),
            ("l/5", short.id),
        ] {
            kv.put(PutRequest { key: key.into(), value: b"v".to_vec(), lease, ..Default::default() })
                .await
                .expect("put with lease");
        }
        // Detached before the restart: l/3 by a put without a lease, l/4 by a delete, and l/5
        // moved from the short lease to the long one.
        put(&mut kv, "l/3", "no lease").await;
        kv.delete_range(DeleteRangeRequest { key: b"l/4".to_vec(), ..Default::default() })
            .await
            .expect("delete l/4");
        kv.put(PutRequest {
            key: b"l/5".to_vec(),
            value: b"v".to_vec(),
            lease: long.id,
            ..Default::default()
        })
        .await
        .expect("put with lease");
        (long.id, short.id)
    });

    etcd.restart();

    run(&rt, "leases after restart", async {
        let ch = channel(&etcd);
        let mut kv = KvClient::new(ch.clone());
        let ttl = time_to_live(ch.clone(), long).await;
        assert_eq!(ttl.id, long);
        assert_eq!(ttl.granted_ttl, 60, "granted TTL after restart: {ttl:?}");
        assert!(ttl.ttl > 0 && ttl.ttl <= 62, "remaining TTL after restart: {ttl:?}");
        assert_eq!(
            ttl.keys,
            [b"l/1".to_vec(), b"l/2".to_vec(), b"l/5".to_vec()],
            "keys attached after restart"
        );
        let short_ttl = time_to_live(ch.clone(), short).await;
        assert_eq!(short_ttl.keys, [b"s/1".to_vec()], "keys of the short lease after restart");
        let r = get(&mut kv, "l/1").await;
        assert_eq!(r.kvs.first().map(|kv| kv.lease), Some(long), "lease of l/1 after restart");
        let listed = LeaseClient::new(ch.clone())
            .lease_leases(LeaseLeasesRequest {})
            .await
            .expect("leases")
            .into_inner();
        assert!(listed.leases.iter().any(|l| l.id == long), "lease list after restart: {listed:?}");

        // Keep-alive works after the restart.
        let (tx, rx) = mpsc::channel(4);
        tx.send(LeaseKeepAliveRequest { id: long }).await.expect("queue keep-alive");
        let mut responses = LeaseClient::new(ch.clone())
            .lease_keep_alive(ReceiverStream::new(rx))
            .await
            .expect("keep-alive stream")
            .into_inner();
        for _ in 0..2 {
            let r = tokio::time::timeout(RESPONSE_TIMEOUT, responses.message())
                .await
                .expect("keep-alive response in time")
                .expect("keep-alive stream")
                .expect("keep-alive response");
            assert_eq!((r.id, r.ttl), (long, 60), "keep-alive response after restart");
            tx.send(LeaseKeepAliveRequest { id: long }).await.expect("queue keep-alive");
        }
        // A keep-alive for a lease that does not exist answers TTL 0 on the same stream.
        let _ = tokio::time::timeout(RESPONSE_TIMEOUT, responses.message())
            .await
            .expect("third keep-alive response");
        tx.send(LeaseKeepAliveRequest { id: 0x1234 }).await.expect("queue keep-alive");
        let r = tokio::time::timeout(RESPONSE_TIMEOUT, responses.message())
            .await
            .expect("keep-alive response in time")
            .expect("keep-alive stream")
            .expect("keep-alive response");
        assert_eq!((r.id, r.ttl), (0x1234, 0), "keep-alive of an unknown lease");

        // Its id is still taken after the restart; unknown leases are refused.
        let mut leases = LeaseClient::new(ch.clone());
        let e = leases
            .lease_grant(LeaseGrantRequest { ttl: 10, id: long })
            .await
            .expect_err("grant of an existing id");
        assert_status(
            &e,
            Code::FailedPrecondition,
            "etcdserver: lease already exists",
            "grant of an existing id",
        );
        let e =
            leases.lease_grant(LeaseGrantRequest { ttl: 9_000_000_001, id: 0 }).await.expect_err("huge TTL");
        assert_status(&e, Code::OutOfRange, "etcdserver: too large lease TTL", "huge TTL");
        let e = leases
            .lease_revoke(LeaseRevokeRequest { id: 0x1234 })
            .await
            .expect_err("revoke of an unknown lease");
        assert_status(
            &e,
            Code::NotFound,
            "etcdserver: requested lease not found",
            "revoke of an unknown lease",
        );
        let e = kv
            .put(PutRequest { key: b"x".to_vec(), value: b"v".to_vec(), lease: 0x1234, ..Default::default() })
            .await
            .expect_err("put with an unknown lease");
        assert_status(
            &e,
            Code::NotFound,
            "etcdserver: requested lease not found",
            "put with an unknown lease",
        );
        let unknown = time_to_live(ch.clone(), 0x1234).await;
        assert_eq!(unknown.ttl, -1, "time-to-live of an unknown lease: {unknown:?}");

        // Revoking it after the restart deletes its keys.
        LeaseClient::new(ch.clone()).lease_revoke(LeaseRevokeRequest { id: long }).await.expect("revoke");
        let r = range(
            &mut kv,
            RangeRequest { key: b"l/".to_vec(), range_end: prefix_end(b"l/"), ..Default::default() },
        )
        .await;
        assert_eq!(
            keys_of(&r),
            ["l/3"],
            "keys left after revoking the lease (l/3 was detached before the restart)"
        );
        let ttl = time_to_live(ch.clone(), long).await;
        assert_eq!(ttl.ttl, -1, "time-to-live of a revoked lease: {ttl:?}");
    });

    // The 3 s lease still expires after the restart.
    let started = Instant::now();
    wait_for(
        "the 3 s lease's key to go after the restart",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let gone = rt.block_on(async {
                let mut kv = KvClient::new(channel(&etcd));
                get(&mut kv, "s/1").await.kvs.is_empty()
            });
            gone.then_some(())
        },
    );
    eprintln!("3 s lease expired {:?} after the restart", started.elapsed());
    let ttl = rt.block_on(async { time_to_live(channel(&etcd), short).await });
    assert_eq!(ttl.ttl, -1, "expired lease: {ttl:?}");
}

// ---------------------------------------------------------------------------------------
// 8. Maintenance
// ---------------------------------------------------------------------------------------

#[test]
fn maintenance_status_hashkv_alarm_snapshot() {
    let rt = runtime();
    let mut etcd = start(&[]);
    let hash_after = run(&rt, "maintenance", async {
        let ch = channel(&etcd);
        let mut kv = KvClient::new(ch.clone());
        let mut m = MaintenanceClient::new(ch.clone()).max_decoding_message_size(64 << 20);
        for i in 0..10 {
            put(&mut kv, &format!("m/{i}"), &"x".repeat(100)).await;
        }
        let rev = current_rev(&mut kv).await;

        let st = m.status(StatusRequest {}).await.expect("status").into_inner();
        let header = st.header.expect("status header");
        assert_eq!(st.version, "3.4.23");
        assert_eq!(st.leader, header.member_id, "a single member leads itself: {st:?}");
        assert_ne!(st.leader, 0);
        assert_eq!(header.revision, rev, "status header revision");
        assert!(st.raft_index >= st.raft_applied_index && st.raft_applied_index > 0, "raft indexes: {st:?}");
        assert!(st.raft_term >= 1 && header.raft_term == st.raft_term, "raft term: {st:?}");
        assert!(
            st.db_size > 0 && st.db_size_in_use > 0 && st.db_size_in_use <= st.db_size,
            "db sizes: {st:?}"
        );
        assert!(st.errors.is_empty() && !st.is_learner, "{st:?}");

        // HashKV: stable for a revision, different once there is more history.
        let hash = |revision: i64| {
            let mut m = m.clone();
            async move { m.hash_kv(HashKvRequest { revision }).await }
        };
        let h0 = hash(0).await.expect("hashkv").into_inner();
        let h1 = hash(rev).await.expect("hashkv").into_inner();
        assert_eq!(h0.hash, h1.hash, "hash of the current revision vs the same revision by number");
        assert_eq!(h0.compact_revision, -1, "compact_revision before any compaction");
        assert_eq!(h0.header.as_ref().map(|h| h.revision), Some(rev));
        assert_eq!(
            hash(rev).await.expect("hashkv").into_inner().hash,
            h0.hash,
            "hash of the same revision twice"
        );
        put(&mut kv, "m/0", "changed").await;
        let h2 = hash(0).await.expect("hashkv").into_inner();
        assert_ne!(h2.hash, h0.hash, "hash after a put");
        assert_eq!(
            hash(rev).await.expect("hashkv").into_inner().hash,
            h0.hash,
            "hash of an old revision after a put"
        );
        let e = hash(rev + 5).await.expect_err("hashkv of a future revision");
        assert_status(
            &e,
            Code::OutOfRange,
            "etcdserver: mvcc: required revision is a future revision",
            "hashkv future",
        );
        kv.compact(CompactionRequest { revision: rev - 2, physical: true }).await.expect("compact");
        let h3 = hash(0).await.expect("hashkv").into_inner();
        assert_eq!(h3.compact_revision, rev - 2, "compact_revision after a compaction");
        let e = hash(rev - 3).await.expect_err("hashkv of a compacted revision");
        assert_status(
            &e,
            Code::OutOfRange,
            "etcdserver: mvcc: required revision has been compacted",
            "hashkv compacted",
        );

        // No alarms.
        let alarms = m
            .alarm(AlarmRequest { action: AlarmAction::Get as i32, member_id: 0, alarm: 0 })
            .await
            .expect("alarm get")
            .into_inner();
        assert!(alarms.alarms.is_empty(), "alarms: {alarms:?}");

        // Snapshot: the database followed by its sha256; remaining_bytes counts down to 0.
        let mut snap = m.snapshot(SnapshotRequest {}).await.expect("snapshot").into_inner();
        let mut blob = Vec::new();
        let mut remaining = Vec::new();
        while let Some(chunk) = tokio::time::timeout(RESPONSE_TIMEOUT, snap.message())
            .await
            .expect("snapshot chunk in time")
            .expect("snapshot stream")
        {
            blob.extend_from_slice(&chunk.blob);
            remaining.push((blob.len(), chunk.remaining_bytes));
        }
        assert!(blob.len() > 32, "snapshot of {} bytes", blob.len());
        assert_eq!(
            blob.len() % 512,
            32,
            "snapshot length {} is not a multiple of 512 plus a 32-byte hash",
            blob.len()
        );
        assert!(
            remaining.windows(2).all(|w| w[0].1 >= w[1].1),
            "remaining_bytes must not grow: {remaining:?}"
        );
        assert_eq!(remaining.last().map(|r| r.1), Some(0), "remaining_bytes of the last message");
        let (db, sum) = blob.split_at(blob.len() - 32);
        assert_eq!(Sha256::digest(db).as_slice(), sum, "snapshot trailer is the sha256 of the database");
        // Each database chunk tells how much of the database is left after it.
        for &(sent, left) in &remaining[..remaining.len() - 1] {
            assert_eq!(
                sent as u64 + left,
                db.len() as u64,
                "remaining_bytes after {sent} bytes: {remaining:?}"
            );
        }
        (h3.hash, h3.header.as_ref().expect("hashkv header").revision)
    });

    // The hash of a revision is the same after a restart.
    let (hash, rev) = hash_after;
    etcd.restart();
    run(&rt, "hashkv after restart", async {
        let mut m = MaintenanceClient::new(channel(&etcd));
        let h = m.hash_kv(HashKvRequest { revision: rev }).await.expect("hashkv after restart").into_inner();
        assert_eq!(h.hash, hash, "hash of revision {rev} before and after a restart");
    });
}
