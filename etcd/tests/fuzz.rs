//! Fuzz tests of what etcd reads from outside: snapshot files (`etcd snapshot restore`
//! takes any file, ours or upstream's bbolt one) and the pieces of their bbolt layout.
//! Mutated valid inputs must be refused with an error, never a panic or a hang. Bounded
//! and deterministic here; `hack/fuzz.sh` runs them for longer from random seeds.

use std::collections::BTreeMap;

use component_base::fuzz;
use etcd::backend::{Backend, CF_KEY, CF_LEASE, CF_META};
use etcd::mvcc::revision::Revision;
use etcd::{bbolt, snapshot};
use prost::Message;
use proto::mvccpb::KeyValue;
use rocksdb::WriteBatch;

const ITERATIONS: usize = 3000;

/// A small state machine: a few revisions, a lease, the meta keys, a user.
fn backend() -> (tempfile::TempDir, Backend) {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::open(dir.path()).unwrap();
    let mut batch = WriteBatch::default();
    for i in 1..=5i64 {
        let kv = KeyValue {
            key: format!("/k/{i}").into_bytes(),
            value: vec![b'v'; i as usize * 10],
            create_revision: i,
            mod_revision: i,
            version: 1,
            lease: 0,
        };
        batch.put_cf(backend.cf(CF_KEY), Revision::new(i, 0).to_bytes(), kv.encode_to_vec());
    }
    batch.put_cf(backend.cf(CF_LEASE), 7u64.to_be_bytes(), 60u64.to_be_bytes());
    batch.put_cf(backend.cf(CF_META), b"currentRev", 5u64.to_be_bytes());
    batch.put_cf(backend.cf(CF_META), b"auth/enabled", [1]);
    batch.put_cf(backend.cf(CF_META), b"authUsers/root", b"\x0a\x04root".to_vec());
    backend.write(batch, true).unwrap();
    (dir, backend)
}

fn collect(write: impl FnOnce(&mut dyn FnMut(u64, &[u8]) -> std::io::Result<()>)) -> Vec<u8> {
    let mut out = Vec::new();
    write(&mut |_, chunk| {
        out.extend_from_slice(chunk);
        Ok(())
    });
    out
}

#[test]
fn snapshot_readers_refuse_damaged_files() {
    let (_dir, b) = backend();
    let ours = collect(|sink| {
        snapshot::write(&b, sink, 4096).unwrap();
    });
    let etcds = collect(|sink| {
        snapshot::write_bbolt(&b, sink, 4096).unwrap();
    });
    assert!(snapshot::read(&ours[..]).is_ok() && snapshot::read(&etcds[..]).is_ok(), "seeds are valid");
    fuzz::run("snapshot::read", &[ours, etcds], ITERATIONS, |input| {
        let _ = snapshot::read(input);
    });
}

#[test]
fn bbolt_reader_refuses_damaged_pages() {
    let mut buckets: bbolt::Buckets = BTreeMap::new();
    for (name, n) in [(&b"key"[..], 40), (b"meta", 3), (b"authUsers", 2)] {
        let pairs = (0..n).map(|i| (format!("k{i:04}").into_bytes(), vec![b'x'; 1 + i * 7])).collect();
        buckets.insert(name.to_vec(), pairs);
    }
    let file = bbolt::write(&buckets);
    assert_eq!(bbolt::read(&file).unwrap(), buckets, "seed round-trips");
    fuzz::run("bbolt::read", &[file], ITERATIONS, |input| {
        let _ = bbolt::read(input);
    });
}

// ---------------------------------------------------------------------------------------
// The gRPC request handlers, on a running member
// ---------------------------------------------------------------------------------------

mod grpc {
    use std::net::TcpListener;
    use std::sync::Once;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use clap::Parser;
    use component_base::fuzz;
    use component_base::shutdown::Shutdown;
    use prost::Message;
    use proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
    use proto::etcdserverpb::kv_client::KvClient;
    use proto::etcdserverpb::lease_client::LeaseClient;
    use proto::etcdserverpb::maintenance_client::MaintenanceClient;
    use proto::etcdserverpb::request_op::Request as Op;
    use proto::etcdserverpb::watch_client::WatchClient;
    use proto::etcdserverpb::watch_request::RequestUnion;
    use proto::etcdserverpb::*;
    use tonic::Code;
    use tonic::transport::{Channel, Endpoint};

    /// Panics anywhere in the process, the server's own tasks included: a handler that
    /// panics inside tonic only resets its stream, which a client cannot tell from a
    /// network error.
    static PANICS: AtomicUsize = AtomicUsize::new(0);

    fn count_panics() {
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            let default = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                PANICS.fetch_add(1, Ordering::SeqCst);
                default(info);
            }));
        });
    }

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    /// One request, as `kind` (which RPC) and the protobuf body.
    fn request(kind: u8, msg: &impl Message) -> Vec<u8> {
        let mut v = vec![kind];
        v.extend(msg.encode_to_vec());
        v
    }

    fn seeds() -> Vec<Vec<u8>> {
        let put =
            PutRequest { key: b"/a".to_vec(), value: b"1".to_vec(), prev_kv: true, ..Default::default() };
        let range = RangeRequest {
            key: b"/".to_vec(),
            range_end: b"0".to_vec(),
            limit: 10,
            sort_order: 1,
            sort_target: 3,
            min_mod_revision: 1,
            max_create_revision: 100,
            ..Default::default()
        };
        let compare = Compare {
            result: CompareResult::Greater as i32,
            target: CompareTarget::Version as i32,
            key: b"/a".to_vec(),
            range_end: b"/b".to_vec(),
            target_union: Some(TargetUnion::Version(0)),
        };
        let txn = TxnRequest {
            compare: vec![compare],
            success: vec![
                RequestOp { request: Some(Op::RequestPut(put.clone())) },
                RequestOp {
                    request: Some(Op::RequestTxn(TxnRequest {
                        success: vec![RequestOp { request: Some(Op::RequestRange(range.clone())) }],
                        ..Default::default()
                    })),
                },
            ],
            failure: vec![RequestOp {
                request: Some(Op::RequestDeleteRange(DeleteRangeRequest {
                    key: b"/a".to_vec(),
                    range_end: vec![0],
                    prev_kv: true,
                })),
            }],
        };
        let watch = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: b"/".to_vec(),
                range_end: vec![0],
                start_revision: 1,
                progress_notify: true,
                filters: vec![1],
                prev_kv: true,
                watch_id: 7,
                fragment: true,
            })),
        };
        vec![
            request(0, &range),
            request(1, &put),
            request(2, &DeleteRangeRequest { key: b"/a".to_vec(), range_end: b"/z".to_vec(), prev_kv: true }),
            request(3, &txn),
            request(4, &CompactionRequest { revision: 3, physical: true }),
            request(5, &LeaseGrantRequest { ttl: 60, id: 0 }),
            request(6, &LeaseRevokeRequest { id: 1 }),
            request(7, &LeaseTimeToLiveRequest { id: 1, keys: true }),
            request(8, &watch),
            request(9, &HashKvRequest { revision: 2 }),
        ]
    }

    /// Reads choices off a fuzz input (zeros once it is used up).
    struct Choices<'a>(&'a [u8]);

    impl Choices<'_> {
        fn byte(&mut self) -> u8 {
            let Some((b, rest)) = self.0.split_first() else { return 0 };
            self.0 = rest;
            *b
        }
        fn below(&mut self, n: u64) -> u64 {
            u64::from(self.byte()) % n
        }
        /// Keys, range ends and values near the edges: empty, `\0` (from-key), prefixes.
        fn key(&mut self) -> Vec<u8> {
            match self.below(6) {
                0 => Vec::new(),
                1 => vec![0],
                2 => b"/a".to_vec(),
                3 => b"/".to_vec(),
                4 => vec![0xff; 1 + self.below(4) as usize],
                _ => format!("/k/{}", self.byte()).into_bytes(),
            }
        }
        /// Numbers near the edges of revisions, TTLs, ids and limits.
        fn number(&mut self) -> i64 {
            match self.below(7) {
                0 => 0,
                1 => -1,
                2 => i64::MAX,
                3 => i64::MIN,
                4 => 1,
                _ => i64::from(self.byte()),
            }
        }
        fn range(&mut self) -> RangeRequest {
            RangeRequest {
                key: self.key(),
                range_end: self.key(),
                limit: self.number(),
                revision: self.number(),
                sort_order: self.number() as i32,
                sort_target: self.number() as i32,
                serializable: self.byte() & 1 == 1,
                keys_only: self.byte() & 1 == 1,
                count_only: self.byte() & 1 == 1,
                min_mod_revision: self.number(),
                max_mod_revision: self.number(),
                min_create_revision: self.number(),
                max_create_revision: self.number(),
            }
        }
        fn put(&mut self) -> PutRequest {
            PutRequest {
                key: self.key(),
                value: self.key(),
                lease: self.number(),
                prev_kv: self.byte() & 1 == 1,
                ignore_value: self.byte() & 1 == 1,
                ignore_lease: self.byte() & 1 == 1,
            }
        }
        fn op(&mut self, depth: u32) -> RequestOp {
            let request = match self.below(if depth < 3 { 4 } else { 3 }) {
                0 => Op::RequestRange(self.range()),
                1 => Op::RequestPut(self.put()),
                2 => Op::RequestDeleteRange(DeleteRangeRequest {
                    key: self.key(),
                    range_end: self.key(),
                    prev_kv: self.byte() & 1 == 1,
                }),
                _ => Op::RequestTxn(self.txn(depth + 1)),
            };
            RequestOp { request: Some(request) }
        }
        fn txn(&mut self, depth: u32) -> TxnRequest {
            let compare = (0..self.below(3))
                .map(|_| {
                    let target = self.below(5) as i32;
                    Compare {
                        result: self.below(5) as i32,
                        target,
                        key: self.key(),
                        range_end: self.key(),
                        target_union: Some(match target {
                            0 => TargetUnion::Version(self.number()),
                            1 => TargetUnion::CreateRevision(self.number()),
                            2 => TargetUnion::ModRevision(self.number()),
                            3 => TargetUnion::Value(self.key()),
                            _ => TargetUnion::Lease(self.number()),
                        }),
                    }
                })
                .collect();
            let success = (0..self.below(4)).map(|_| self.op(depth)).collect();
            let failure = (0..self.below(3)).map(|_| self.op(depth)).collect();
            TxnRequest { compare, success, failure }
        }
    }

    /// A request built from the input's bytes, field by field: valid protobuf every time,
    /// with values chosen to reach the handlers' edge cases.
    fn generated(input: &[u8]) -> Vec<u8> {
        let mut c = Choices(input);
        match c.below(10) as u8 {
            0 => request(0, &c.range()),
            1 => request(1, &c.put()),
            2 => request(
                2,
                &DeleteRangeRequest { key: c.key(), range_end: c.key(), prev_kv: c.byte() & 1 == 1 },
            ),
            3 => request(3, &c.txn(0)),
            4 => request(4, &CompactionRequest { revision: c.number(), physical: c.byte() & 1 == 1 }),
            5 => request(5, &LeaseGrantRequest { ttl: c.number(), id: c.number() }),
            6 => request(6, &LeaseRevokeRequest { id: c.number() }),
            7 => request(7, &LeaseTimeToLiveRequest { id: c.number(), keys: c.byte() & 1 == 1 }),
            8 => {
                let create = WatchCreateRequest {
                    key: c.key(),
                    range_end: c.key(),
                    start_revision: c.number(),
                    progress_notify: c.byte() & 1 == 1,
                    filters: (0..c.below(3)).map(|_| c.number() as i32).collect(),
                    prev_kv: c.byte() & 1 == 1,
                    watch_id: c.number(),
                    fragment: c.byte() & 1 == 1,
                };
                request(8, &WatchRequest { request_union: Some(RequestUnion::CreateRequest(create)) })
            }
            _ => request(9, &HashKvRequest { revision: c.number() }),
        }
    }

    /// Sends one request: Ok(false) when it did not decode (nothing sent), else the
    /// answer; a deadline means the server hung on it.
    async fn send(ch: &Channel, input: &[u8]) -> Result<bool, tonic::Status> {
        let Some((&kind, body)) = input.split_first() else { return Ok(false) };
        macro_rules! call {
            ($client:ident, $method:ident, $req:ty) => {{
                let Ok(req) = <$req>::decode(body) else { return Ok(false) };
                $client::new(ch.clone()).$method(req).await.map(|_| true)
            }};
        }
        match kind % 10 {
            0 => call!(KvClient, range, RangeRequest),
            1 => call!(KvClient, put, PutRequest),
            2 => call!(KvClient, delete_range, DeleteRangeRequest),
            3 => call!(KvClient, txn, TxnRequest),
            4 => call!(KvClient, compact, CompactionRequest),
            5 => call!(LeaseClient, lease_grant, LeaseGrantRequest),
            6 => call!(LeaseClient, lease_revoke, LeaseRevokeRequest),
            7 => call!(LeaseClient, lease_time_to_live, LeaseTimeToLiveRequest),
            8 => {
                let Ok(req) = WatchRequest::decode(body) else { return Ok(false) };
                let mut stream = WatchClient::new(ch.clone())
                    .watch(tokio_stream::iter([req, WatchRequest::default()]))
                    .await?
                    .into_inner();
                // The answer to the create (created, or canceled with the reason).
                match tokio::time::timeout(Duration::from_secs(5), stream.message()).await {
                    Ok(r) => r.map(|_| true),
                    Err(_) => Err(tonic::Status::deadline_exceeded("no answer to a watch request")),
                }
            }
            _ => call!(MaintenanceClient, hash_kv, HashKvRequest),
        }
    }

    /// A member on free ports with channels to its client and peer ports: alone (and
    /// leading), or one of a cluster whose other members never start, so that a test can
    /// speak for them.
    struct Member {
        rt: tokio::runtime::Runtime,
        running: Option<etcd::Running>,
        shutdown: Shutdown,
        ch: Channel,
        peer: Channel,
        _dir: tempfile::TempDir,
    }

    impl Member {
        fn start(absent_peers: usize) -> Member {
            count_panics();
            let rt =
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            let dir = tempfile::tempdir().unwrap();
            let peer = format!("http://127.0.0.1:{}", free_port());
            let mut initial = vec![format!("default={peer}")];
            initial.extend((0..absent_peers).map(|i| format!("absent{i}=http://127.0.0.1:{}", free_port())));
            let flags = etcd::config::Flags::try_parse_from([
                "etcd",
                "--data-dir",
                dir.path().join("data").to_str().unwrap(),
                "--listen-client-urls",
                "http://127.0.0.1:0",
                "--advertise-client-urls",
                "http://127.0.0.1:2379",
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
                "--initial-cluster",
                &initial.join(","),
                "--log-level",
                "error",
            ])
            .unwrap();
            let cfg = flags.into_config().unwrap();
            let shutdown = Shutdown::new();
            let running = rt.block_on(etcd::start(cfg, shutdown.clone())).expect("member starts");
            let endpoint = |addr: String| {
                Endpoint::from_shared(addr).unwrap().timeout(Duration::from_secs(10)).connect_lazy()
            };
            let _guard = rt.enter();
            let ch = endpoint(format!("http://{}", running.client_addrs[0]));
            let peer_ch = endpoint(peer);
            drop(_guard);
            let m = Member { rt, running: Some(running), shutdown, ch, peer: peer_ch, _dir: dir };
            if absent_peers == 0 {
                m.wait_writable();
            }
            m
        }

        /// Waits until a put goes through raft (the member leads).
        fn wait_writable(&self) {
            self.rt.block_on(async {
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                let put = || PutRequest { key: b"/a".to_vec(), ..Default::default() };
                while KvClient::new(self.ch.clone()).put(put()).await.is_err() {
                    assert!(std::time::Instant::now() < deadline, "the member takes no writes");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            });
        }
    }

    impl Drop for Member {
        fn drop(&mut self) {
            self.shutdown.trigger();
            if let Some(r) = self.running.take() {
                self.rt.block_on(r.wait());
            }
        }
    }

    #[test]
    fn grpc_requests_to_a_running_member() {
        let m = Member::start(0);
        let outcomes = std::sync::Mutex::new(std::collections::BTreeMap::<String, usize>::new());
        fuzz::run("etcd gRPC handlers", &seeds(), 600, |input| {
            // Odd inputs are requests as bytes (mutated protobuf), even ones choices for
            // a generated request.
            let request = if input.len() % 2 == 1 { input.to_vec() } else { generated(input) };
            let result = m.rt.block_on(send(&m.ch, &request));
            assert_eq!(PANICS.load(Ordering::SeqCst), 0, "the server panicked on this request");
            let outcome = match &result {
                Ok(false) => "not sent".to_string(),
                Ok(true) => "ok".to_string(),
                Err(status) => format!("{:?}", status.code()),
            };
            *outcomes.lock().unwrap().entry(outcome).or_default() += 1;
            if let Err(status) = result {
                assert_ne!(status.code(), Code::DeadlineExceeded, "no answer: {status}");
                assert_ne!(status.code(), Code::Unavailable, "the server went away: {status}");
            }
        });
        // Requests that did not decode are not sent; the rest must mostly be answered.
        let outcomes = outcomes.into_inner().unwrap();
        eprintln!("answers: {outcomes:?}");
        assert!(outcomes.get("ok").copied().unwrap_or(0) >= 50, "few requests succeeded: {outcomes:?}");
        // Still serving.
        m.rt.block_on(
            KvClient::new(m.ch.clone()).range(RangeRequest { key: b"/a".to_vec(), ..Default::default() }),
        )
        .expect("the member still answers after the fuzzing");
    }

    /// Raft messages as peer `from` sends them to `local` (mutations may change either:
    /// the transport checks that they agree with the call's headers).
    fn raft_seeds(from: u64, local: u64, term: u64, last: u64) -> Vec<Vec<u8>> {
        use protobuf::Message as _;
        use raft::eraftpb::{Entry, Message as RaftMessage, MessageType};
        let msg = |t: MessageType, term: u64, index: u64, log_term: u64, commit: u64, entries: Vec<Entry>| {
            let mut m = RaftMessage::default();
            m.set_msg_type(t);
            m.from = from;
            m.to = local;
            m.term = term;
            m.index = index;
            m.log_term = log_term;
            m.commit = commit;
            m.set_entries(entries.into());
            m.write_to_bytes().unwrap()
        };
        let entry = |index: u64, term: u64, data: &[u8]| {
            let mut e = Entry::default();
            e.index = index;
            e.term = term;
            e.data = data.to_vec().into();
            e
        };
        let put = InternalRaftRequest {
            put: Some(PutRequest { key: b"/p".to_vec(), value: b"v".to_vec(), ..Default::default() }),
            ..Default::default()
        }
        .encode_to_vec();
        vec![
            msg(MessageType::MsgHeartbeat, term, 0, 0, last, vec![]),
            msg(MessageType::MsgHeartbeatResponse, term, 0, 0, 0, vec![]),
            msg(MessageType::MsgAppend, term, last, term, last, vec![entry(last + 1, term, &put)]),
            msg(MessageType::MsgAppendResponse, term, last, 0, 0, vec![]),
            msg(MessageType::MsgRequestPreVote, term + 1, last, term, 0, vec![]),
            msg(MessageType::MsgRequestVote, term, last + 5, term, 0, vec![]),
            msg(MessageType::MsgReadIndex, term, 0, 0, 0, vec![entry(0, 0, b"ctx")]),
            msg(MessageType::MsgPropose, term, 0, 0, 0, vec![entry(0, 0, &put)]),
            msg(MessageType::MsgTimeoutNow, term, 0, 0, 0, vec![]),
        ]
    }

    /// A raft message built from the input's bytes: a peer's message type, with term,
    /// index, commit and entries near this member's own (and sometimes far off).
    fn generated_raft(input: &[u8], from: u64, local: u64, term: u64, last: u64) -> Vec<u8> {
        use protobuf::Message as _;
        use raft::eraftpb::{Entry, EntryType, Message as RaftMessage, MessageType};
        let mut c = Choices(input);
        let near = |c: &mut Choices<'_>, base: u64| match c.below(6) {
            0 => 0,
            1 => u64::MAX,
            2 => base.saturating_sub(1),
            3 => base + 1,
            4 => base + u64::from(c.byte()),
            _ => base,
        };
        const TYPES: [MessageType; 12] = [
            MessageType::MsgAppend,
            MessageType::MsgAppendResponse,
            MessageType::MsgRequestVote,
            MessageType::MsgRequestVoteResponse,
            MessageType::MsgRequestPreVote,
            MessageType::MsgRequestPreVoteResponse,
            MessageType::MsgHeartbeat,
            MessageType::MsgHeartbeatResponse,
            MessageType::MsgPropose,
            MessageType::MsgReadIndex,
            MessageType::MsgReadIndexResp,
            MessageType::MsgTimeoutNow,
        ];
        let mut m = RaftMessage::default();
        m.set_msg_type(TYPES[c.below(TYPES.len() as u64) as usize]);
        m.from = if c.below(8) == 0 { u64::from(c.byte()) } else { from };
        m.to = local;
        m.term = near(&mut c, term);
        m.log_term = near(&mut c, term);
        m.index = near(&mut c, last);
        m.commit = near(&mut c, last);
        m.reject = c.byte() & 1 == 1;
        m.reject_hint = near(&mut c, last);
        let first = m.index.wrapping_add(1);
        let entries: Vec<Entry> = (0..c.below(4))
            .map(|i| {
                let mut e = Entry::default();
                e.index = if c.below(6) == 0 { near(&mut c, last) } else { first.wrapping_add(i) };
                e.term = near(&mut c, term);
                e.set_entry_type(
                    [EntryType::EntryNormal, EntryType::EntryConfChange, EntryType::EntryConfChangeV2]
                        [c.below(3) as usize],
                );
                let len = c.below(16) as usize;
                e.data = (0..len).map(|_| c.byte()).collect::<Vec<u8>>().into();
                e
            })
            .collect();
        m.set_entries(entries.into());
        m.write_to_bytes().expect("encodable")
    }

    #[test]
    fn raft_peer_messages_to_a_running_member() {
        use proto::etcdpeer::RaftBatch;
        use proto::etcdpeer::peer_client::PeerClient;
        // Two members that never start: the fuzzer speaks for them, with their ids, so its
        // messages reach raft as a member's would.
        let m = Member::start(2);
        let server = m.running.as_ref().unwrap().server.clone();
        let (local, cluster) = (server.member_id(), server.cluster_id());
        let absent = server.members.list().into_iter().map(|p| p.id).find(|id| *id != local).unwrap();
        let status =
            m.rt.block_on(MaintenanceClient::new(m.ch.clone()).status(StatusRequest {}))
                .unwrap()
                .into_inner();
        let seeds = raft_seeds(absent, local, status.raft_term, status.raft_index);
        // A crash of the raft thread ends this process: keep the input it died on.
        let last = std::env::temp_dir().join("fuzz-raft-peer-last.bin");
        let outcomes = std::sync::Mutex::new(std::collections::BTreeMap::<String, usize>::new());
        fuzz::run("raft peer messages", &seeds, 600, |input| {
            // Odd inputs are messages as bytes (mutated protobuf), even ones choices for a
            // generated message.
            let bytes = if input.len() % 2 == 1 {
                input.to_vec()
            } else {
                generated_raft(input, absent, local, status.raft_term, status.raft_index)
            };
            let Ok(msg) = <raft::eraftpb::Message as protobuf::Message>::parse_from_bytes(&bytes) else {
                *outcomes.lock().unwrap().entry("not sent".into()).or_default() += 1;
                return;
            };
            let _ = std::fs::write(&last, &bytes);
            let mut req = tonic::Request::new(RaftBatch { messages: vec![bytes] });
            req.metadata_mut().insert("x-etcd-cluster-id", format!("{cluster:x}").parse().unwrap());
            req.metadata_mut().insert("x-etcd-member-id", format!("{:x}", msg.from).parse().unwrap());
            let outcome = match m.rt.block_on(PeerClient::new(m.peer.clone()).raft(req)) {
                Ok(_) => "delivered".to_string(),
                Err(status) => format!("{:?}", status.code()),
            };
            *outcomes.lock().unwrap().entry(outcome).or_default() += 1;
            assert_eq!(PANICS.load(Ordering::SeqCst), 0, "the member panicked on this message");
        });
        let _ = std::fs::remove_file(&last);
        let outcomes = outcomes.into_inner().unwrap();
        eprintln!("raft messages: {outcomes:?}");
        assert!(
            outcomes.get("delivered").copied().unwrap_or(0) >= 100,
            "few messages reached raft: {outcomes:?}"
        );
        // Whatever the messages claimed, the member still answers.
        m.rt.block_on(MaintenanceClient::new(m.ch.clone()).status(StatusRequest {}))
            .expect("the member still answers after the fuzzing");
    }
}
