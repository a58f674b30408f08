//! The etcd v3 client the API server stores everything through: reads, optimistic writes
//! guarded by `mod_revision`, and watches. Objects are JSON; an object's
//! `resourceVersion` is the etcd `mod_revision` of its key.
//!
//! Every value crosses the [`ValueTransformer`] here and nowhere else: written values on
//! their way into a put, read values as they come out of a range, a failed transaction or
//! a watch event. A value that does not transform back fails the read (the object is
//! unreadable: a 500 above), it is never handed up as if it were the object.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use proto::etcdserverpb::kv_client::KvClient;
use proto::etcdserverpb::watch_client::WatchClient;
use proto::etcdserverpb::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest, WatchCreateRequest,
    WatchRequest, request_op, response_op, watch_request,
};
use proto::mvccpb::event::EventType;
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint, Uri};

use super::value::{Slot, TransformError, ValueTransformer};

/// Largest value etcd accepts by default (`--max-request-bytes`, 1.5 MiB), less room for
/// the request around it: larger objects are refused before they reach etcd.
pub const MAX_OBJECT_BYTES: usize = 1_536 * 1024 - 4096;
/// Keys fetched per range request when listing a prefix.
pub const PAGE: i64 = 5_000;
/// How long one etcd call may take before the request fails.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("key {0} already exists")]
    AlreadyExists(String),
    #[error("key {0} not found")]
    NotFound(String),
    /// The key changed since the expected revision; the current object, if any, comes along.
    #[error("key {key} was modified (expected revision {expected})")]
    Conflict { key: String, expected: i64, current: Option<(Vec<u8>, i64)> },
    #[error("revision {0} has been compacted")]
    Compacted(i64),
    #[error("object of {0} bytes is larger than etcd accepts")]
    TooLarge(usize),
    #[error("etcd: {0}")]
    Etcd(String),
}

impl From<tonic::Status> for StorageError {
    fn from(s: tonic::Status) -> Self {
        if s.message().contains("required revision has been compacted") {
            return StorageError::Compacted(0);
        }
        StorageError::Etcd(s.message().to_string())
    }
}

pub type StorageResult<T> = Result<T, StorageError>;

/// A key-value with its revision.
#[derive(Clone, Debug)]
pub struct Kv {
    pub key: String,
    pub value: Vec<u8>,
    pub mod_revision: i64,
}

/// One range read: the keys, the revision read at, and the key to continue from when
/// etcd has more.
pub struct Page {
    pub kvs: Vec<Kv>,
    pub revision: i64,
    pub next: Option<Vec<u8>>,
}

/// What a watch delivers: changes, or news that the store reached a revision.
#[derive(Clone, Debug)]
pub enum WatchItem {
    Changes(Vec<Change>),
    /// etcd reached this revision with no further change under the prefix.
    Progress(i64),
}

/// A running watch: its items, and a way to ask etcd how far it has got.
pub struct WatchStream {
    pub items: mpsc::Receiver<StorageResult<WatchItem>>,
    requests: mpsc::Sender<WatchRequest>,
}

impl WatchStream {
    /// Asks etcd for a progress notification (answered once the watch is current).
    pub fn request_progress(&self) {
        let req = WatchRequest {
            request_union: Some(watch_request::RequestUnion::ProgressRequest(Default::default())),
        };
        let _ = self.requests.try_send(req);
    }

    /// A handle that can request progress while `items` is consumed elsewhere.
    pub fn progress_handle(&self) -> ProgressHandle {
        ProgressHandle(self.requests.clone())
    }
}

#[derive(Clone)]
pub struct ProgressHandle(mpsc::Sender<WatchRequest>);

impl ProgressHandle {
    pub fn request(&self) {
        let req = WatchRequest {
            request_union: Some(watch_request::RequestUnion::ProgressRequest(Default::default())),
        };
        let _ = self.0.try_send(req);
    }
}

/// A change to a key, from a watch.
#[derive(Clone, Debug)]
pub struct Change {
    pub key: String,
    /// None when the key was deleted.
    pub value: Option<Vec<u8>>,
    pub prev_value: Option<Vec<u8>>,
    pub mod_revision: i64,
}

/// Connection settings for `--etcd-servers` and the `--etcd-*file` flags.
#[derive(Clone, Debug, Default)]
pub struct EtcdConfig {
    pub servers: Vec<String>,
    pub ca_file: Option<std::path::PathBuf>,
    pub cert_file: Option<std::path::PathBuf>,
    pub key_file: Option<std::path::PathBuf>,
}

#[derive(Clone)]
pub struct Etcd {
    kv: KvClient<Channel>,
    watch: WatchClient<Channel>,
    /// Observed request durations, for etcd_request_duration_seconds.
    pub observe: Arc<Mutex<Option<Observer>>>,
    /// What values pass through on their way to and from etcd (encryption at rest); shared
    /// by every clone, so it can be set once the stores exist.
    transformer: Slot,
}

/// Called with the operation and duration of every etcd request.
pub type Observer = Box<dyn Fn(&str, Duration) + Send + Sync>;

impl Etcd {
    /// Connects (lazily) to the servers; calls fail over between them.
    pub fn connect(cfg: &EtcdConfig) -> Result<Self, String> {
        if cfg.servers.is_empty() {
            return Err("--etcd-servers must be specified".into());
        }
        let tls = match (&cfg.ca_file, &cfg.cert_file, &cfg.key_file) {
            (None, None, None) => None,
            (ca, cert, key) => {
                let pair = match (cert, key) {
                    (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
                    (None, None) => None,
                    _ => return Err("--etcd-certfile and --etcd-keyfile go together".into()),
                };
                Some(
                    component_base::tls::client_config(ca.as_deref(), pair, &[b"h2"])
                        .map_err(|e| e.to_string())?,
                )
            }
        };
        let mut endpoints = Vec::new();
        for s in &cfg.servers {
            let url = url::Url::parse(s).map_err(|e| format!("--etcd-servers {s}: {e}"))?;
            let host = url.host_str().ok_or_else(|| format!("--etcd-servers {s}: no host"))?.to_string();
            let port = url.port_or_known_default().unwrap_or(2379);
            if url.scheme() == "https" && tls.is_none() {
                return Err(format!("--etcd-servers {s}: https needs --etcd-cafile"));
            }
            let ep = Endpoint::from_shared(format!("http://{host}:{port}"))
                .map_err(|e| e.to_string())?
                .connect_timeout(Duration::from_secs(5))
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(30))
                .keep_alive_timeout(Duration::from_secs(10));
            endpoints.push((ep, url.scheme() == "https"));
        }
        let channel = if let Some(cfg) = tls {
            // tonic balances over plain endpoints; with TLS, use the first server through a
            // TLS connector (etcd clients commonly point at one local member).
            let (ep, _) = endpoints.remove(0);
            let connector =
                tower::service_fn(move |uri: Uri| component_base::tls::connect(cfg.clone(), uri, 2379));
            ep.connect_with_connector_lazy(connector)
        } else if endpoints.len() == 1 {
            endpoints.remove(0).0.connect_lazy()
        } else {
            Channel::balance_list(endpoints.into_iter().map(|(e, _)| e))
        };
        let limit = 64 << 20;
        Ok(Self {
            kv: KvClient::new(channel.clone()).max_decoding_message_size(limit),
            watch: WatchClient::new(channel).max_decoding_message_size(limit),
            observe: Arc::new(Mutex::new(None)),
            transformer: Slot::default(),
        })
    }

    /// Routes every value written and read from now on through `t` (for all clones).
    /// Set it before anything reads: values written before are read through it too.
    pub fn set_transformer(&self, t: Arc<dyn ValueTransformer>) {
        *self.transformer.write() = Some(t);
    }

    fn timed<T>(&self, op: &str, start: std::time::Instant, r: T) -> T {
        if let Some(f) = self.observe.lock().as_ref() {
            f(op, start.elapsed());
        }
        r
    }

    async fn call<F, T>(&self, op: &str, f: F) -> StorageResult<T>
    where
        F: std::future::Future<Output = Result<T, tonic::Status>>,
    {
        let start = std::time::Instant::now();
        let r = match tokio::time::timeout(CALL_TIMEOUT, f).await {
            Ok(r) => r.map_err(StorageError::from),
            Err(_) => Err(StorageError::Etcd(format!("{op} timed out"))),
        };
        self.timed(op, start, r)
    }

    /// One key, if present.
    pub async fn get(&self, key: &str) -> StorageResult<Option<Kv>> {
        let mut kv = self.kv.clone();
        let req = RangeRequest { key: key.as_bytes().to_vec(), ..Default::default() };
        let resp = self.call("get", async move { kv.range(req).await }).await?.into_inner();
        let t = self.transformer();
        resp.kvs
            .into_iter()
            .next()
            .map(|k| {
                let key = String::from_utf8_lossy(&k.key).into_owned();
                let value = from_storage(t.as_deref(), &key, k.value)?;
                Ok(Kv { key, value, mod_revision: k.mod_revision })
            })
            .transpose()
    }

    /// The transformer in use, if any (cloned out so no lock is held across awaits).
    fn transformer(&self) -> Option<Arc<dyn ValueTransformer>> {
        self.transformer.read().clone()
    }

    /// Every key under `prefix` at revision `rev` (0: the current one), read in pages;
    /// also the revision read at.
    pub async fn list(&self, prefix: &str, rev: i64) -> StorageResult<(Vec<Kv>, i64)> {
        let end = prefix_end(prefix.as_bytes());
        let mut out = Vec::new();
        let mut from = prefix.as_bytes().to_vec();
        let mut at = rev;
        loop {
            let page = self.range_page(from, end.clone(), at, PAGE).await?;
            at = page.revision;
            out.extend(page.kvs);
            match page.next {
                Some(next) => from = next,
                None => return Ok((out, at)),
            }
        }
    }

    /// At most `limit` keys in `[from, end)` at revision `rev` (0: the current one).
    pub async fn range_page(&self, from: Vec<u8>, end: Vec<u8>, rev: i64, limit: i64) -> StorageResult<Page> {
        let mut kv = self.kv.clone();
        let req = RangeRequest { key: from, range_end: end, limit, revision: rev, ..Default::default() };
        let resp = self.call("list", async move { kv.range(req).await }).await?.into_inner();
        let revision = if rev == 0 { resp.header.as_ref().map_or(0, |h| h.revision) } else { rev };
        let next = resp.more.then(|| resp.kvs.last().map(|k| [k.key.as_slice(), &[0]].concat())).flatten();
        let t = self.transformer();
        let kvs = resp
            .kvs
            .into_iter()
            .map(|k| {
                let key = String::from_utf8_lossy(&k.key).into_owned();
                let value = from_storage(t.as_deref(), &key, k.value)?;
                Ok(Kv { key, value, mod_revision: k.mod_revision })
            })
            .collect::<StorageResult<_>>()?;
        Ok(Page { kvs, revision, next })
    }

    /// The store's current revision.
    pub async fn current_revision(&self) -> StorageResult<i64> {
        let mut kv = self.kv.clone();
        // A read of a key nobody writes: cheap, and linearizable, so the revision is fresh.
        let req = RangeRequest { key: b"\0revision-probe".to_vec(), count_only: true, ..Default::default() };
        let resp = self.call("get", async move { kv.range(req).await }).await?.into_inner();
        Ok(resp.header.map_or(0, |h| h.revision))
    }

    /// Creates `key` only if it does not exist; returns the new revision.
    pub async fn create(&self, key: &str, value: Vec<u8>) -> StorageResult<i64> {
        check_size(&value)?;
        let value = to_storage(self.transformer().as_deref(), key, value)?;
        check_size(&value)?;
        let cmp = compare_create_revision(key, 0);
        let put = put_op(key, value);
        let (ok, rev, _) = self.txn(vec![cmp], vec![put], Vec::new()).await?;
        if !ok {
            return Err(StorageError::AlreadyExists(key.to_string()));
        }
        Ok(rev)
    }

    /// Replaces `key` if it is still at `expected` (its mod revision); returns the new
    /// revision, or the current object on conflict.
    pub async fn update(&self, key: &str, value: Vec<u8>, expected: i64) -> StorageResult<i64> {
        check_size(&value)?;
        let value = to_storage(self.transformer().as_deref(), key, value)?;
        check_size(&value)?;
        let cmp = compare_mod_revision(key, expected);
        let (ok, rev, current) = self.txn(vec![cmp], vec![put_op(key, value)], vec![get_op(key)]).await?;
        if !ok {
            return Err(conflict(key, expected, current));
        }
        Ok(rev)
    }

    /// Deletes `key` if it is still at `expected`; returns the deletion's revision.
    pub async fn delete(&self, key: &str, expected: i64) -> StorageResult<i64> {
        let cmp = compare_mod_revision(key, expected);
        let del = RequestOp {
            request: Some(request_op::Request::RequestDeleteRange(DeleteRangeRequest {
                key: key.as_bytes().to_vec(),
                ..Default::default()
            })),
        };
        let (ok, rev, current) = self.txn(vec![cmp], vec![del], vec![get_op(key)]).await?;
        if !ok {
            return Err(conflict(key, expected, current));
        }
        Ok(rev)
    }

    async fn txn(
        &self,
        compare: Vec<Compare>,
        success: Vec<RequestOp>,
        failure: Vec<RequestOp>,
    ) -> StorageResult<(bool, i64, Option<(Vec<u8>, i64)>)> {
        let mut kv = self.kv.clone();
        let req = TxnRequest { compare, success, failure };
        let resp = self.call("txn", async move { kv.txn(req).await }).await?.into_inner();
        let rev = resp.header.map_or(0, |h| h.revision);
        let mut current = None;
        if !resp.succeeded {
            let t = self.transformer();
            for r in resp.responses {
                if let Some(response_op::Response::ResponseRange(rr)) = r.response
                    && let Some(k) = rr.kvs.into_iter().next()
                {
                    let key = String::from_utf8_lossy(&k.key);
                    current = Some((from_storage(t.as_deref(), &key, k.value)?, k.mod_revision));
                }
            }
        }
        Ok((resp.succeeded, rev, current))
    }

    /// Watches `prefix` from revision `from` (inclusive). Changes arrive on the returned
    /// channel in revision order; the channel closes when the watch ends (a compacted
    /// start revision reports `Err(Compacted)` first).
    pub async fn watch(&self, prefix: &str, from: i64) -> StorageResult<WatchStream> {
        let (req_tx, req_rx) = mpsc::channel::<WatchRequest>(4);
        let create = WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(WatchCreateRequest {
                key: prefix.as_bytes().to_vec(),
                range_end: prefix_end(prefix.as_bytes()),
                start_revision: from,
                prev_kv: true,
                progress_notify: true,
                ..Default::default()
            })),
        };
        req_tx.send(create).await.map_err(|_| StorageError::Etcd("watch request".into()))?;
        let mut client = self.watch.clone();
        let mut stream =
            client.watch(tokio_stream::wrappers::ReceiverStream::new(req_rx)).await?.into_inner();
        let (tx, rx) = mpsc::channel(256);
        let requests = req_tx.clone();
        let transformer = self.transformer.clone();
        tokio::spawn(async move {
            // Keep the request side open for as long as the watch runs.
            let _keep = req_tx;
            loop {
                let msg = match stream.message().await {
                    Ok(Some(m)) => m,
                    Ok(None) => return,
                    Err(e) => {
                        let _ = tx.send(Err(StorageError::from(e))).await;
                        return;
                    }
                };
                if msg.compact_revision != 0 {
                    let _ = tx.send(Err(StorageError::Compacted(msg.compact_revision))).await;
                    return;
                }
                if msg.canceled {
                    let _ = tx
                        .send(Err(StorageError::Etcd(format!("watch canceled: {}", msg.cancel_reason))))
                        .await;
                    return;
                }
                if msg.events.is_empty() {
                    if !msg.created
                        && let Some(h) = msg.header
                        && tx.send(Ok(WatchItem::Progress(h.revision))).await.is_err()
                    {
                        return;
                    }
                    continue;
                }
                let t = transformer.read().clone();
                let changes = msg
                    .events
                    .into_iter()
                    .filter_map(|ev| {
                        let kv = ev.kv?;
                        let deleted = ev.r#type == EventType::Delete as i32;
                        let key = String::from_utf8_lossy(&kv.key).into_owned();
                        let value =
                            if deleted { None } else { Some(from_storage(t.as_deref(), &key, kv.value)) };
                        let prev_value = ev.prev_kv.map(|p| from_storage(t.as_deref(), &key, p.value));
                        Some((key, value.transpose(), prev_value.transpose(), kv.mod_revision))
                    })
                    .map(|(key, value, prev_value, mod_revision)| {
                        Ok(Change { key, value: value?, prev_value: prev_value?, mod_revision })
                    })
                    .collect::<StorageResult<Vec<_>>>();
                // A value that does not read back ends the watch with the error, as
                // upstream's watcher does; the watch cache then re-lists.
                let item = changes.map(WatchItem::Changes);
                let failed = item.is_err();
                if tx.send(item).await.is_err() || failed {
                    return;
                }
            }
        });
        Ok(WatchStream { items: rx, requests })
    }
}

/// The value stored under `key`, through the transformer if there is one.
fn from_storage(t: Option<&dyn ValueTransformer>, key: &str, data: Vec<u8>) -> StorageResult<Vec<u8>> {
    match t {
        None => Ok(data),
        Some(t) => t.from_storage(key, data).map_err(|e| transform_error(key, &e)),
    }
}

/// The bytes to store for `value` under `key`.
fn to_storage(t: Option<&dyn ValueTransformer>, key: &str, value: Vec<u8>) -> StorageResult<Vec<u8>> {
    match t {
        None => Ok(value),
        Some(t) => t.to_storage(key, value).map_err(|e| transform_error(key, &e)),
    }
}

/// Upstream's wording (`unable to transform key ...`); an etcd-level error, so it
/// reaches the client as a 500 InternalError.
fn transform_error(key: &str, e: &TransformError) -> StorageError {
    StorageError::Etcd(format!("unable to transform key {key:?}: {e}"))
}

fn check_size(value: &[u8]) -> StorageResult<()> {
    if value.len() > MAX_OBJECT_BYTES {
        return Err(StorageError::TooLarge(value.len()));
    }
    Ok(())
}

fn conflict(key: &str, expected: i64, current: Option<(Vec<u8>, i64)>) -> StorageError {
    match current {
        None if expected != 0 => StorageError::NotFound(key.to_string()),
        current => StorageError::Conflict { key: key.to_string(), expected, current },
    }
}

fn compare_create_revision(key: &str, rev: i64) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Create as i32,
        key: key.as_bytes().to_vec(),
        target_union: Some(TargetUnion::CreateRevision(rev)),
        range_end: Vec::new(),
    }
}

fn compare_mod_revision(key: &str, rev: i64) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Mod as i32,
        key: key.as_bytes().to_vec(),
        target_union: Some(TargetUnion::ModRevision(rev)),
        range_end: Vec::new(),
    }
}

fn put_op(key: &str, value: Vec<u8>) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestPut(PutRequest {
            key: key.as_bytes().to_vec(),
            value,
            ..Default::default()
        })),
    }
}

fn get_op(key: &str) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestRange(RangeRequest {
            key: key.as_bytes().to_vec(),
            ..Default::default()
        })),
    }
}

/// The end of the key range of everything that starts with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}
