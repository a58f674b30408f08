//! Linearizability of our etcd under faults, checked with porcupine (WGL search).
//!
//! A 3-member cluster runs in network namespaces (`e2e::netns`), each member's data dir on
//! its own lazyfs disk (`e2e::lazyfs`), so a nemesis can inject four fault kinds on random
//! members (the leader half of the time): kill -9 and restart, power loss (kill -9, the
//! disk drops every unsynced write, restart), SIGSTOP and SIGCONT, and an iptables
//! partition and heal. Meanwhile concurrent
//! clients, each pinned to one member, run random linearizable gets, puts and
//! compare-and-sets (a Txn: value == expected → put) on a few keys, every written value
//! unique. Each operation records when it was invoked and when its answer came back (one
//! monotonic clock). Then porcupine must find a linearization of every key's history.
//!
//! Clients are tonic `KvClient`s on a runtime whose threads entered the hub namespace (a
//! network namespace is a per-thread attribute, inherited by threads the runtime starts), so
//! they use the same gRPC calls as the other e2e tests without a helper process per
//! operation; the nemesis runs on the test thread, which stays in the root namespace and
//! drives members by PID and `ip netns exec`.
//!
//! Outcomes: a get that fails changed nothing and is left out. A write that fails before
//! reaching the server (connection refused while the member is down) is left out too. Any
//! other failed or timed-out write may or may not have taken effect: it is recorded with an
//! unknown outcome, returning at the end of time, as porcupine's etcd model does, so the
//! checker may place it anywhere after its invocation (or nowhere, by putting it last).
//!
//! Knobs (environment): LIN_SECONDS (workload duration, default 25), LIN_CLIENTS (5),
//! LIN_KEYS (3), LIN_OP_TIMEOUT_MS (2000), LIN_CHECK_TIMEOUT (checker budget in seconds,
//! 120), LIN_SEED (random choices), LIN_OUT (directory for the failure visualization),
//! NETNS_ETCD (another etcd binary, e.g. /usr/bin/etcd to hold the test itself against
//! Debian's etcd 3.4).
//! `hack/linearizability.sh` runs it for 300 s.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use e2e::netns::{CLIENT_PORT, NetCluster, enter_netns};
use porcupine_rs::{CheckResult, Model, Operation};
use proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use proto::etcdserverpb::kv_client::KvClient;
use proto::etcdserverpb::request_op::Request;
use proto::etcdserverpb::{Compare, PutRequest, RangeRequest, RequestOp, TxnRequest};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tonic::transport::{Channel, Endpoint};

// ---------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------

/// One operation on one key, with what the client saw.
#[derive(Clone, Debug, PartialEq, Eq)]
enum KvOp {
    /// A linearizable get that answered `value` (None: no such key).
    Get { key: usize, value: Option<u64> },
    /// A put, acknowledged or of unknown outcome (the history says which by its return time).
    Put { key: usize, value: u64 },
    /// Txn `value(key) == expect ? put(key, new) : {}`; `succeeded` None when the outcome is
    /// unknown.
    Cas { key: usize, expect: u64, new: u64, succeeded: Option<bool> },
}

impl KvOp {
    fn key(&self) -> usize {
        match self {
            KvOp::Get { key, .. } | KvOp::Put { key, .. } | KvOp::Cas { key, .. } => *key,
        }
    }
}

/// A map of independent registers: each key is checked on its own (porcupine partitions).
/// The state is the key's value, None while it does not exist. etcd's value comparison
/// against a missing key is false, so a CAS on a missing key never succeeds.
#[derive(Clone, Debug)]
struct KvModel;

impl Model for KvModel {
    type State = Option<u64>;
    type Op = KvOp;
    /// The member the client talked to.
    type Metadata = usize;

    fn partition_operations(history: &[Operation<Self>]) -> Vec<Vec<Operation<Self>>> {
        let mut by_key: BTreeMap<usize, Vec<Operation<Self>>> = BTreeMap::new();
        for op in history {
            by_key.entry(op.op.key()).or_default().push(op.clone());
        }
        by_key.into_values().collect()
    }

    fn init() -> Option<u64> {
        None
    }

    fn step(state: &Option<u64>, op: &KvOp) -> (bool, Option<u64>) {
        match op {
            KvOp::Get { value, .. } => (state == value, *state),
            KvOp::Put { value, .. } => (true, Some(*value)),
            KvOp::Cas { expect, new, succeeded, .. } => {
                let hit = *state == Some(*expect);
                let consistent = succeeded.is_none_or(|s| s == hit);
                (consistent, if hit { Some(*new) } else { *state })
            }
        }
    }

    fn describe_operation(op: &KvOp) -> String {
        match op {
            KvOp::Get { key, value } => format!("get(k{key}) -> {value:?}"),
            KvOp::Put { key, value } => format!("put(k{key}, {value})"),
            KvOp::Cas { key, expect, new, succeeded } => {
                let r = succeeded.map_or("unknown".to_string(), |s| s.to_string());
                format!("cas(k{key}, {expect} -> {new}) -> {r}")
            }
        }
    }
}

/// Return time of an operation whose outcome is unknown.
const NEVER: i64 = i64::MAX;

fn op(client: u32, call: i64, ret: i64, kv: KvOp) -> Operation<KvModel> {
    Operation { client_id: Some(client), call_time: call, return_time: ret, op: kv, metadata: None }
}

// The checker itself must reject what it should: hand-made histories.

#[test]
fn checker_rejects_stale_read_after_completed_write() {
    let ok = vec![
        op(0, 0, 10, KvOp::Put { key: 0, value: 1 }),
        op(1, 5, 15, KvOp::Get { key: 0, value: None }), // concurrent with the put: fine
        op(1, 20, 30, KvOp::Get { key: 0, value: Some(1) }),
    ];
    assert_eq!(porcupine_rs::check_operations_timeout(&ok, Duration::from_secs(10)), CheckResult::Ok);
    let stale = vec![
        op(0, 0, 10, KvOp::Put { key: 0, value: 1 }),
        op(1, 20, 30, KvOp::Get { key: 0, value: None }), // after the put completed
    ];
    assert_eq!(porcupine_rs::check_operations_timeout(&stale, Duration::from_secs(10)), CheckResult::Illegal);
    // Two keys: one fine, one with a stale read after an overwrite.
    let mixed = vec![
        op(0, 0, 10, KvOp::Put { key: 0, value: 1 }),
        op(0, 11, 20, KvOp::Put { key: 1, value: 2 }),
        op(0, 21, 30, KvOp::Put { key: 1, value: 3 }),
        op(1, 31, 40, KvOp::Get { key: 0, value: Some(1) }),
        op(2, 41, 50, KvOp::Get { key: 1, value: Some(2) }),
    ];
    assert_eq!(porcupine_rs::check_operations_timeout(&mixed, Duration::from_secs(10)), CheckResult::Illegal);
}

#[test]
fn checker_understands_cas_and_unknown_outcomes() {
    // A CAS that succeeded, then a read of the value it replaced: illegal.
    let h = vec![
        op(0, 0, 10, KvOp::Put { key: 0, value: 1 }),
        op(1, 11, 20, KvOp::Cas { key: 0, expect: 1, new: 2, succeeded: Some(true) }),
        op(2, 21, 30, KvOp::Get { key: 0, value: Some(1) }),
    ];
    assert_eq!(porcupine_rs::check_operations_timeout(&h, Duration::from_secs(10)), CheckResult::Illegal);
    // A CAS that says it failed although the value matched: illegal.
    let h = vec![
        op(0, 0, 10, KvOp::Put { key: 0, value: 1 }),
        op(1, 11, 20, KvOp::Cas { key: 0, expect: 1, new: 2, succeeded: Some(false) }),
    ];
    assert_eq!(porcupine_rs::check_operations_timeout(&h, Duration::from_secs(10)), CheckResult::Illegal);
    // A CAS on a missing key fails.
    let h = vec![op(1, 0, 10, KvOp::Cas { key: 0, expect: 1, new: 2, succeeded: Some(false) })];
    assert_eq!(porcupine_rs::check_operations_timeout(&h, Duration::from_secs(10)), CheckResult::Ok);
    // A timed-out put may have happened (its value is read later) ...
    let h = vec![
        op(0, 0, NEVER, KvOp::Put { key: 0, value: 7 }),
        op(1, 50, 60, KvOp::Get { key: 0, value: Some(7) }),
        op(1, 70, 80, KvOp::Get { key: 0, value: Some(7) }),
    ];
    assert_eq!(porcupine_rs::check_operations_timeout(&h, Duration::from_secs(10)), CheckResult::Ok);
    // ... or not.
    let h = vec![
        op(0, 0, NEVER, KvOp::Put { key: 0, value: 7 }),
        op(1, 50, 60, KvOp::Get { key: 0, value: None }),
    ];
    assert_eq!(porcupine_rs::check_operations_timeout(&h, Duration::from_secs(10)), CheckResult::Ok);
    // But once seen it cannot be unseen.
    let h = vec![
        op(0, 0, NEVER, KvOp::Put { key: 0, value: 7 }),
        op(1, 50, 60, KvOp::Get { key: 0, value: Some(7) }),
        op(1, 70, 80, KvOp::Get { key: 0, value: None }),
    ];
    assert_eq!(porcupine_rs::check_operations_timeout(&h, Duration::from_secs(10)), CheckResult::Illegal);
    // An unknown CAS may have applied.
    let h = vec![
        op(0, 0, 10, KvOp::Put { key: 0, value: 1 }),
        op(1, 11, NEVER, KvOp::Cas { key: 0, expect: 1, new: 2, succeeded: None }),
        op(2, 30, 40, KvOp::Get { key: 0, value: Some(2) }),
    ];
    assert_eq!(porcupine_rs::check_operations_timeout(&h, Duration::from_secs(10)), CheckResult::Ok);
}

// ---------------------------------------------------------------------------------------
// The workload
// ---------------------------------------------------------------------------------------

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v}: not a valid value")),
        Err(_) => default,
    }
}

struct Config {
    seconds: u64,
    clients: usize,
    keys: usize,
    op_timeout: Duration,
    check_timeout: Duration,
    seed: u64,
}

impl Config {
    fn from_env() -> Config {
        let seed = std::env::var("LIN_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
        Config {
            seconds: env_or("LIN_SECONDS", 25),
            clients: env_or("LIN_CLIENTS", 5),
            keys: env_or("LIN_KEYS", 3),
            op_timeout: Duration::from_millis(env_or("LIN_OP_TIMEOUT_MS", 2000)),
            check_timeout: Duration::from_secs(env_or("LIN_CHECK_TIMEOUT", 120)),
            seed,
        }
    }
}

fn key_name(k: usize) -> Vec<u8> {
    format!("lin/k{k}").into_bytes()
}

/// How one operation ended.
enum Outcome {
    /// Answered: the op with what the server said.
    Ok(KvOp),
    /// Did not take effect (a failed get; a write refused before it reached the server).
    Failed,
    /// Might have taken effect.
    Unknown(KvOp),
}

/// One client's record of one operation.
struct Record {
    client: u32,
    member: usize,
    call: i64,
    /// None: unknown outcome.
    ret: Option<i64>,
    op: KvOp,
}

#[derive(Default)]
struct ClientLog {
    records: Vec<Record>,
    failed: usize,
    /// Error texts → count, for the report.
    errors: BTreeMap<String, usize>,
}

/// Whether a failed call certainly never reached the server: the connection could not be
/// made (the member is down). Everything else is ambiguous for a write.
fn never_sent(status: &tonic::Status) -> bool {
    use std::error::Error;
    if status.code() != tonic::Code::Unavailable {
        return false;
    }
    let mut text = status.message().to_string();
    let mut src = status.source();
    while let Some(e) = src {
        text.push_str(&format!(": {e}"));
        src = e.source();
    }
    text.contains("tcp connect error") || text.contains("Connection refused")
}

fn error_class(status: &tonic::Status) -> String {
    let msg: String = status.message().chars().take(60).collect();
    format!("{:?}: {msg}", status.code())
}

/// What one client needs.
struct ClientCtx {
    id: u32,
    /// The member it talks to.
    member: usize,
    keys: usize,
    op_timeout: Duration,
    seed: u64,
    /// Time zero of the history.
    start: Instant,
    /// The next value to write (unique across clients).
    values: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

async fn run_client(ctx: ClientCtx, mut kv: KvClient<Channel>) -> ClientLog {
    let ClientCtx { id, member, keys: cfg_keys, op_timeout, seed, start, values, stop } = ctx;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut log = ClientLog::default();
    // The last value this client saw per key: what its CAS expects.
    let mut seen: Vec<Option<u64>> = vec![None; cfg_keys];
    let now = || start.elapsed().as_nanos() as i64;
    while !stop.load(Ordering::Relaxed) {
        let key = rng.random_range(0..cfg_keys);
        let dice = rng.random_range(0..10);
        let call = now();
        let (outcome, err) = if dice < 4 {
            let req = RangeRequest { key: key_name(key), serializable: false, ..Default::default() };
            match tokio::time::timeout(op_timeout, kv.range(req)).await {
                Ok(Ok(resp)) => {
                    let value = resp.into_inner().kvs.first().map(|kv| {
                        String::from_utf8_lossy(&kv.value).parse::<u64>().expect("a value this test wrote")
                    });
                    seen[key] = value.or(seen[key]);
                    (Outcome::Ok(KvOp::Get { key, value }), None)
                }
                Ok(Err(s)) => (Outcome::Failed, Some(error_class(&s))),
                Err(_) => (Outcome::Failed, Some("client timeout".into())),
            }
        } else if dice < 7 {
            let value = values.fetch_add(1, Ordering::Relaxed);
            let kvop = KvOp::Put { key, value };
            let req = PutRequest {
                key: key_name(key),
                value: value.to_string().into_bytes(),
                ..Default::default()
            };
            match tokio::time::timeout(op_timeout, kv.put(req)).await {
                Ok(Ok(_)) => {
                    seen[key] = Some(value);
                    (Outcome::Ok(kvop), None)
                }
                Ok(Err(s)) if never_sent(&s) => (Outcome::Failed, Some(error_class(&s))),
                Ok(Err(s)) => (Outcome::Unknown(kvop), Some(error_class(&s))),
                Err(_) => (Outcome::Unknown(kvop), Some("client timeout".into())),
            }
        } else {
            let new = values.fetch_add(1, Ordering::Relaxed);
            // Mostly the value last seen (so CAS often succeeds), sometimes a stale guess.
            let expect = match seen[key] {
                Some(v) if rng.random_bool(0.8) => v,
                _ => rng.random_range(1..new.max(2)),
            };
            let req = TxnRequest {
                compare: vec![Compare {
                    result: CompareResult::Equal as i32,
                    target: CompareTarget::Value as i32,
                    key: key_name(key),
                    range_end: Vec::new(),
                    target_union: Some(TargetUnion::Value(expect.to_string().into_bytes())),
                }],
                success: vec![RequestOp {
                    request: Some(Request::RequestPut(PutRequest {
                        key: key_name(key),
                        value: new.to_string().into_bytes(),
                        ..Default::default()
                    })),
                }],
                failure: Vec::new(),
            };
            let unknown = KvOp::Cas { key, expect, new, succeeded: None };
            match tokio::time::timeout(op_timeout, kv.txn(req)).await {
                Ok(Ok(resp)) => {
                    let succeeded = resp.into_inner().succeeded;
                    if succeeded {
                        seen[key] = Some(new);
                    }
                    (Outcome::Ok(KvOp::Cas { key, expect, new, succeeded: Some(succeeded) }), None)
                }
                Ok(Err(s)) if never_sent(&s) => (Outcome::Failed, Some(error_class(&s))),
                Ok(Err(s)) => (Outcome::Unknown(unknown), Some(error_class(&s))),
                Err(_) => (Outcome::Unknown(unknown), Some("client timeout".into())),
            }
        };
        let ret = now();
        match outcome {
            Outcome::Ok(op) => log.records.push(Record { client: id, member, call, ret: Some(ret), op }),
            Outcome::Unknown(op) => log.records.push(Record { client: id, member, call, ret: None, op }),
            Outcome::Failed => log.failed += 1,
        }
        if let Some(e) = err {
            *log.errors.entry(e).or_default() += 1;
            // Back off a little after an error, so a dead member is not hammered.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    log
}

/// Starts the clients on a thread that entered `hub`; returns the handle to join.
fn spawn_clients(
    cfg: &Config,
    hub: String,
    ips: Vec<std::net::Ipv4Addr>,
    start: Instant,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<ClientLog>> {
    let (clients, keys, op_timeout, seed) = (cfg.clients, cfg.keys, cfg.op_timeout, cfg.seed);
    std::thread::Builder::new()
        .name("lin-clients".into())
        .spawn(move || {
            // Before the runtime exists, so its worker threads start in the hub too.
            enter_netns(&hub);
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("tokio runtime");
            rt.block_on(async move {
                let values = Arc::new(AtomicU64::new(1));
                let tasks: Vec<_> = (0..clients)
                    .map(|c| {
                        let member = c % ips.len();
                        let ch = Endpoint::from_shared(format!("http://{}:{CLIENT_PORT}", ips[member]))
                            .expect("endpoint")
                            .connect_timeout(Duration::from_secs(1))
                            .connect_lazy();
                        let ctx = ClientCtx {
                            id: c as u32,
                            member,
                            keys,
                            op_timeout,
                            seed: seed.wrapping_add(c as u64 + 1),
                            start,
                            values: values.clone(),
                            stop: stop.clone(),
                        };
                        tokio::spawn(run_client(ctx, KvClient::new(ch)))
                    })
                    .collect();
                let mut logs = Vec::new();
                for t in tasks {
                    logs.push(t.await.expect("client task"));
                }
                logs
            })
        })
        .expect("client thread")
}

// ---------------------------------------------------------------------------------------
// The nemesis
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    Kill,
    Pause,
    Partition,
    PowerLoss,
}

/// A fault event on the history's clock.
struct FaultEvent {
    at: i64,
    what: String,
}

/// Injects faults on random members (the leader half of the time) until `until`: one fault
/// at a time, held 0.5–1.5 s, then repaired, then 0.3–1 s of calm.
fn nemesis(
    c: &mut NetCluster,
    rng: &mut StdRng,
    start: Instant,
    until: Instant,
) -> (Vec<FaultEvent>, BTreeMap<Fault, usize>) {
    let mut events = Vec::new();
    let mut counts = BTreeMap::new();
    let now = |start: Instant| start.elapsed().as_nanos() as i64;
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(rng.random_range(300..1000)));
        let leader = c.leader_among(&c.all());
        let target = match leader {
            Some(l) if rng.random_bool(0.5) => l,
            _ => rng.random_range(0..c.len()),
        };
        let fault = [Fault::Kill, Fault::Pause, Fault::Partition, Fault::PowerLoss][rng.random_range(0..4)];
        let hold = Duration::from_millis(rng.random_range(500..1500));
        let role = if leader == Some(target) { " (leader)" } else { "" };
        events.push(FaultEvent { at: now(start), what: format!("{fault:?} m{target}{role} for {hold:?}") });
        match fault {
            Fault::Kill => c.members[target].kill9(),
            Fault::PowerLoss => c.members[target].power_cut(),
            Fault::Pause => c.members[target].pause(),
            Fault::Partition => c.isolate(target),
        }
        std::thread::sleep(hold);
        match fault {
            Fault::Kill | Fault::PowerLoss => c.members[target].respawn(),
            Fault::Pause => c.members[target].resume(),
            Fault::Partition => c.heal(),
        }
        events.push(FaultEvent { at: now(start), what: format!("repaired m{target}") });
        *counts.entry(fault).or_default() += 1;
    }
    (events, counts)
}

// ---------------------------------------------------------------------------------------
// Reporting a violation
// ---------------------------------------------------------------------------------------

fn ms(t: i64) -> String {
    if t == NEVER { "∞".into() } else { format!("{:.3}", t as f64 / 1e6) }
}

/// Explains why one key's history is not linearizable: where the longest partial
/// linearization ends, the operations around it, the faults near it, and a visualization.
fn explain(key: usize, ops: &[Operation<KvModel>], faults: &[FaultEvent], timeout: Duration) -> String {
    let (_, info) = porcupine_rs::check_operations_info_timeout::<KvModel>(ops, timeout);
    let mut out = String::new();
    let dir = std::env::var("LIN_OUT").map(std::path::PathBuf::from).unwrap_or_else(|_| std::env::temp_dir());
    let html = dir.join(format!("linearizability-{}-k{key}.html", std::process::id()));
    match porcupine_rs::visualize_path::<KvModel>(&info, &html) {
        Ok(()) => out.push_str(&format!("visualization: {}\n", html.display())),
        Err(e) => out.push_str(&format!("visualization failed: {e}\n")),
    }
    let longest: Vec<usize> = info
        .partial_linearizations
        .first()
        .and_then(|p| p.iter().max_by_key(|l| l.len()).cloned())
        .unwrap_or_default();
    let part = info.partition_ops.first().map(Vec::as_slice).unwrap_or(ops);
    let done: std::collections::HashSet<usize> = longest.iter().copied().collect();
    // The first operation (by invocation) the longest linearization could not place.
    let mut order: Vec<usize> = (0..part.len()).collect();
    order.sort_by_key(|&i| part[i].call_time);
    let stuck = order.iter().copied().find(|i| !done.contains(i)).unwrap_or(0);
    let t = part[stuck].call_time;
    out.push_str(&format!(
        "k{key}: longest partial linearization places {} of {} ops; first unplaced: client {} on m{} [{} ms, {} ms] {}\n",
        longest.len(),
        part.len(),
        part[stuck].client_id.unwrap_or(0),
        part[stuck].metadata.unwrap_or(0),
        ms(part[stuck].call_time),
        ms(part[stuck].return_time),
        KvModel::describe_operation(&part[stuck].op)
    ));
    out.push_str("last placed ops:\n");
    for &i in &longest[longest.len().saturating_sub(8)..] {
        let o = &part[i];
        out.push_str(&format!(
            "  client {} m{} [{} ms, {} ms] {}\n",
            o.client_id.unwrap_or(0),
            o.metadata.unwrap_or(0),
            ms(o.call_time),
            ms(o.return_time),
            KvModel::describe_operation(&o.op)
        ));
    }
    out.push_str("ops invoked within 1 s of it:\n");
    for &i in &order {
        let o = &part[i];
        if (o.call_time - t).abs() < 1_000_000_000 {
            out.push_str(&format!(
                "  {}client {} m{} [{} ms, {} ms] {}\n",
                if done.contains(&i) { "  " } else { "! " },
                o.client_id.unwrap_or(0),
                o.metadata.unwrap_or(0),
                ms(o.call_time),
                ms(o.return_time),
                KvModel::describe_operation(&o.op)
            ));
        }
    }
    out.push_str("faults within 5 s before it:\n");
    for f in faults.iter().filter(|f| f.at <= t + 1_000_000_000 && f.at > t - 5_000_000_000) {
        out.push_str(&format!("  {} ms {}\n", ms(f.at), f.what));
    }
    out
}

// ---------------------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------------------

#[test]
fn linearizable_under_kill_pause_and_partition() {
    let cfg = Config::from_env();
    println!(
        "linearizability: {} s, {} clients, {} keys, op timeout {:?}, seed {} (LIN_SEED to replay the choices)",
        cfg.seconds, cfg.clients, cfg.keys, cfg.op_timeout, cfg.seed
    );
    let mut c = NetCluster::start_on_lazy_disks(3, &[]);
    c.wait_leader(&c.all(), Duration::from_secs(30));
    let ips: Vec<_> = c.members.iter().map(|m| m.ip).collect();

    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let clients = spawn_clients(&cfg, c.net.hub().to_string(), ips, start, stop.clone());
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let until = Instant::now() + Duration::from_secs(cfg.seconds);
    let (faults, fault_counts) = nemesis(&mut c, &mut rng, start, until);
    // A calm tail, so the history ends with the cluster whole again.
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let logs = clients.join().expect("client thread panicked");
    let workload = start.elapsed();

    // Repair whatever the nemesis left broken (it repairs each fault; this is belt and braces).
    c.heal();
    for m in &mut c.members {
        if m.is_paused() {
            m.resume();
        }
        if !m.is_running() {
            m.respawn();
        }
    }

    let mut history = Vec::new();
    let (mut ok, mut unknown, mut failed) = (0usize, 0usize, 0usize);
    let mut per_kind: BTreeMap<&str, [usize; 2]> = BTreeMap::new();
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for log in logs {
        failed += log.failed;
        for (e, n) in log.errors {
            *errors.entry(e).or_default() += n;
        }
        for r in log.records {
            let kind = match r.op {
                KvOp::Get { .. } => "get",
                KvOp::Put { .. } => "put",
                KvOp::Cas { succeeded: Some(true), .. } => "cas ok",
                KvOp::Cas { succeeded: Some(false), .. } => "cas failed compare",
                KvOp::Cas { succeeded: None, .. } => "cas",
            };
            let e = per_kind.entry(kind).or_default();
            if r.ret.is_some() {
                ok += 1;
                e[0] += 1;
            } else {
                unknown += 1;
                e[1] += 1;
            }
            history.push(Operation {
                client_id: Some(r.client),
                call_time: r.call,
                return_time: r.ret.unwrap_or(NEVER),
                op: r.op,
                metadata: Some(r.member),
            });
        }
    }
    let fault_total: usize = fault_counts.values().sum();
    println!(
        "workload {:.1?}: {} ops recorded ({ok} ok, {unknown} unknown outcome) + {failed} failed",
        workload,
        ok + unknown
    );
    println!("  by kind [ok, unknown]: {per_kind:?}");
    println!("  faults: {fault_total} {fault_counts:?}");
    println!("  errors seen by clients: {errors:?}");
    for f in &faults {
        println!("    {:>10} ms  {}", ms(f.at), f.what);
    }
    assert!(ok > 100, "too few successful operations ({ok}) for a meaningful check; errors: {errors:?}");
    assert!(fault_total > 0, "the nemesis injected no fault");

    let t = Instant::now();
    let result = porcupine_rs::check_operations_timeout::<KvModel>(&history, cfg.check_timeout);
    println!("porcupine: {result:?} in {:.1?} for {} ops", t.elapsed(), history.len());
    let mut problems = Vec::new();
    match result {
        CheckResult::Ok => {}
        CheckResult::Unknown => problems.push(format!(
            "porcupine could not decide within {:?} ({} ops): treated as failure; raise LIN_CHECK_TIMEOUT or shorten LIN_SECONDS",
            cfg.check_timeout,
            history.len()
        )),
        CheckResult::Illegal => {
            let mut report = String::from("history is NOT linearizable:\n");
            for key in 0..cfg.keys {
                let ops: Vec<_> = history.iter().filter(|o| o.op.key() == key).cloned().collect();
                if porcupine_rs::check_operations_timeout::<KvModel>(&ops, cfg.check_timeout) == CheckResult::Illegal {
                    report.push_str(&explain(key, &ops, &faults, cfg.check_timeout));
                }
            }
            problems.push(report);
        }
    }

    // After the faults stop, the cluster must come back whole: one leader, one KV hash.
    let all = c.all();
    match wait_for_leader(&c, Duration::from_secs(30)) {
        Some(l) => match c.try_converged(&all, Duration::from_secs(60)) {
            Ok((rev, hash)) => {
                println!("after repair: leader m{l}, all members at revision {rev}, hash {hash:x}")
            }
            Err(e) => problems.push(format!("after repair: {e}")),
        },
        None => {
            let statuses: Vec<String> = (0..c.len())
                .map(|i| match c.status(i) {
                    Some(s) => format!(
                        "m{i}: id {:x} leader {:x} term {} index {} rev {}",
                        s.member_id, s.leader, s.term, s.raft_index, s.revision
                    ),
                    None => format!("m{i}: no answer"),
                })
                .collect();
            problems.push(format!(
                "after repair: members did not agree on a leader within 30s: {}",
                statuses.join("; ")
            ))
        }
    }
    for (i, m) in c.members.iter().enumerate() {
        let panics = m.panics();
        if !panics.is_empty() {
            problems.push(format!(
                "m{i} ({}) panicked {} times:\n  {}",
                m.ns,
                panics.len(),
                panics.join("\n  ")
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn wait_for_leader(c: &NetCluster, timeout: Duration) -> Option<usize> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(l) = c.leader_among(&c.all()) {
            return Some(l);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}
