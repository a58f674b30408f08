//! Multi-member clusters of our etcd as processes: forming, leader failover, a whole
//! cluster killed mid-write, a lagging member caught up by a raft snapshot, membership
//! changes under load, and a member of another cluster knocking on the peer port. Each
//! test drives real processes with the clients a user has (etcdctl 3.4, a gRPC client)
//! and checks what those clients see.
//!
//! Timing: default flags (heartbeat 100 ms, election timeout 1000 ms). The tests share a
//! small machine with other tests, so waits are generous and only the failover time is
//! held to a bound.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e::cluster::{Cluster, plan};
use e2e::{Etcd, channel, json, runtime, wait_for};
use proto::etcdserverpb::kv_client::KvClient;
use proto::etcdserverpb::{PutRequest, RangeRequest};
use tonic::transport::Channel;

/// Polls `f` until it returns `expected`, then asserts equality with the last value seen,
/// so a timeout fails with what the client actually saw.
fn eventually<T: PartialEq + Debug>(what: &str, timeout: Duration, expected: &T, mut f: impl FnMut() -> T) {
    let deadline = Instant::now() + timeout;
    loop {
        let got = f();
        if &got == expected || Instant::now() > deadline {
            assert_eq!(&got, expected, "{what} (after waiting up to {timeout:?})");
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One row of `etcdctl member list -w json`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Listed {
    id: u64,
    name: String,
    peer_urls: Vec<String>,
    client_urls: Vec<String>,
    learner: bool,
}

/// `member list -w json` as one member serves it: (cluster id, members sorted by name).
fn member_list(m: &Etcd) -> (u64, Vec<Listed>) {
    let v = json(&m.etcdctl_ok(&["member", "list", "-w", "json"]));
    let strings = |x: &serde_json::Value| -> Vec<String> {
        x.as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    let mut members: Vec<Listed> = v["members"]
        .as_array()
        .unwrap_or_else(|| panic!("member list without members: {v}"))
        .iter()
        .map(|m| Listed {
            id: m["ID"].as_u64().expect("member ID"),
            name: m["name"].as_str().unwrap_or_default().to_string(),
            peer_urls: strings(&m["peerURLs"]),
            client_urls: strings(&m["clientURLs"]),
            learner: m["isLearner"].as_bool().unwrap_or(false),
        })
        .collect();
    members.sort_by(|a, b| a.name.cmp(&b.name));
    (v["header"]["cluster_id"].as_u64().expect("cluster_id"), members)
}

/// `endpoint status -w json` of one member, its `Status` object.
fn status_json(m: &Etcd) -> Option<serde_json::Value> {
    let out = m.etcdctl(&["endpoint", "status", "-w", "json", "--command-timeout=3s"]);
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(v[0]["Status"].clone())
}

/// Keys under `prefix` as one member serves them locally (serializable):
/// key → (mod_revision, create_revision, version, value).
type Kvs = BTreeMap<Vec<u8>, (i64, i64, i64, Vec<u8>)>;

fn local_kvs(rt: &tokio::runtime::Runtime, m: &Etcd, prefix: &str) -> (i64, Kvs) {
    let mut end = prefix.as_bytes().to_vec();
    *end.last_mut().expect("non-empty prefix") += 1;
    let resp = rt.block_on(async {
        let mut kv = KvClient::new(channel(m)).max_decoding_message_size(256 << 20);
        kv.range(RangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: end,
            serializable: true,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("serializable range {prefix} on {}: {e}", m.name))
        .into_inner()
    });
    let kvs = resp
        .kvs
        .into_iter()
        .map(|kv| (kv.key, (kv.mod_revision, kv.create_revision, kv.version, kv.value)))
        .collect();
    (resp.header.expect("range header").revision, kvs)
}

/// Checks that every acknowledged put (key, revision; value = key) is in `kvs` with that
/// revision, and that keys written once look like it.
fn check_acked(who: &str, acked: &[(Vec<u8>, i64)], kvs: &Kvs) {
    for (key, rev) in acked {
        let name = String::from_utf8_lossy(key);
        let Some((mod_rev, create_rev, version, value)) = kvs.get(key) else {
            panic!("{who}: acknowledged put of {name} at revision {rev} is missing");
        };
        assert_eq!(mod_rev, rev, "{who}: {name}: mod_revision differs from the acknowledged revision");
        assert_eq!(
            (create_rev, *version),
            (rev, 1),
            "{who}: {name}: create_revision/version of a key put once"
        );
        assert_eq!(value, key, "{who}: {name}: value");
    }
}

/// Acknowledged puts: (key, header.revision of the put's response); the value is the key.
type Acked = Vec<(Vec<u8>, i64)>;

fn hex(id: u64) -> String {
    format!("{id:x}")
}

// ---------------------------------------------------------------------------------------
// 1. Forming
// ---------------------------------------------------------------------------------------

/// What `member list` must say about a cluster whose members all started.
fn expected_members(c: &Cluster) -> Vec<(String, Vec<String>, Vec<String>, bool)> {
    let mut v: Vec<_> =
        c.members.iter().map(|m| (m.name.clone(), vec![m.peer_url()], vec![m.endpoint()], false)).collect();
    v.sort();
    v
}

fn without_ids(members: &[Listed]) -> Vec<(String, Vec<String>, Vec<String>, bool)> {
    members.iter().map(|m| (m.name.clone(), m.peer_urls.clone(), m.client_urls.clone(), m.learner)).collect()
}

fn check_formed(c: &Cluster) {
    let size = c.members.len();
    let expected = expected_members(c);
    // Names and client URLs appear once each member has published itself through raft.
    for m in &c.members {
        eventually(
            &format!("member list from {} (size {size})", m.name),
            Duration::from_secs(30),
            &expected,
            || without_ids(&member_list(m).1),
        );
    }
    let (cluster_id, listed) = member_list(&c.members[0]);
    let ids: BTreeSet<u64> = listed.iter().map(|m| m.id).collect();
    assert_eq!(ids.len(), size, "member IDs are distinct: {listed:?}");
    assert!(!ids.contains(&0), "no member has ID 0: {listed:?}");
    for m in &c.members[1..] {
        let (cid, l) = member_list(m);
        assert_eq!((cid, &l), (cluster_id, &listed), "member list (with IDs and cluster id) from {}", m.name);
    }

    // endpoint status --cluster: etcdctl asks one member for the member list, then every
    // listed client URL for its status.
    let endpoints: BTreeSet<String> = c.members.iter().map(Etcd::endpoint).collect();
    for m in &c.members {
        // (endpoints, member ids, cluster ids, leaders) as one `endpoint status --cluster` shows them.
        type Seen = (BTreeSet<String>, BTreeSet<u64>, BTreeSet<u64>, BTreeSet<u64>);
        let mut seen: Seen = Default::default();
        let agreed = wait_for(
            &format!("endpoint status --cluster via {} to agree on one leader", m.name),
            Duration::from_secs(30),
            Duration::from_millis(200),
            || {
                let v = json(&m.etcdctl_ok(&["endpoint", "status", "--cluster", "-w", "json"]));
                let rows = v.as_array().cloned().unwrap_or_default();
                seen = Default::default();
                for r in &rows {
                    seen.0.insert(r["Endpoint"].as_str().unwrap_or_default().to_string());
                    seen.1.insert(r["Status"]["header"]["member_id"].as_u64().unwrap_or(0));
                    seen.2.insert(r["Status"]["header"]["cluster_id"].as_u64().unwrap_or(0));
                    seen.3.insert(r["Status"]["leader"].as_u64().unwrap_or(0));
                }
                (rows.len() == size && seen.3.len() == 1 && !seen.3.contains(&0)).then(|| seen.clone())
            },
        );
        let (eps, members, clusters, leaders) = agreed;
        assert_eq!(eps, endpoints, "endpoint status --cluster via {} covers every client URL", m.name);
        assert_eq!(members, ids, "endpoint status --cluster via {}: member ids", m.name);
        assert_eq!(
            clusters,
            BTreeSet::from([cluster_id]),
            "endpoint status --cluster via {}: cluster id",
            m.name
        );
        let leader = *leaders.first().expect("one leader");
        assert!(ids.contains(&leader), "the leader {leader:x} is a member: {listed:?}");
    }

    // A put through any member is visible to a linearizable get through every other.
    for (i, w) in c.members.iter().enumerate() {
        let key = format!("/form/{size}/{}", w.name);
        let value = format!("written-via-{}", w.name);
        assert_eq!(w.etcdctl_ok(&["put", &key, &value]).trim(), "OK");
        for (j, r) in c.members.iter().enumerate() {
            if i != j {
                let got = r.etcdctl_ok(&["get", &key, "--print-value-only"]);
                assert_eq!(
                    got.trim(),
                    value,
                    "linearizable get of {key} via {} right after the put via {}",
                    r.name,
                    w.name
                );
            }
        }
    }
}

#[test]
fn three_and_five_member_clusters_form() {
    for size in [3, 5] {
        let c = Cluster::start(size, &[]);
        check_formed(&c);
    }
}

// ---------------------------------------------------------------------------------------
// 2. Leader failover
// ---------------------------------------------------------------------------------------

/// Three election timeouts (the bound) plus 2 s of slack: followers notice the
/// loss after a randomized 1-2 s, a split vote costs one more randomized timeout, and the
/// tests share two cores with other tests, so the new leader's fsyncs and the first
/// commit may be scheduled late.
const FAILOVER_LIMIT: Duration = Duration::from_secs(5);

/// Starts a put every 25 ms, alternating over `channels`, each waiting up to the
/// channel's timeout, until one succeeds; returns when the first succeeded (measured
/// from `since`) and how many were started, or None if none did within `give_up`.
async fn first_put_after(
    channels: Vec<Channel>,
    since: Instant,
    give_up: Duration,
) -> Option<(Duration, usize)> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut started = 0usize;
    let mut tick = tokio::time::interval(Duration::from_millis(25));
    loop {
        tokio::select! {
            Some(at) = rx.recv() => return Some((at - since, started)),
            _ = tick.tick() => {
                if since.elapsed() > give_up {
                    return None;
                }
                let mut kv = KvClient::new(channels[started % channels.len()].clone());
                started += 1;
                let tx = tx.clone();
                tokio::spawn(async move {
                    let req = PutRequest { key: b"/probe".to_vec(), value: b"p".to_vec(), ..Default::default() };
                    if kv.put(req).await.is_ok() {
                        let _ = tx.send(Instant::now());
                    }
                });
            }
        }
    }
}

/// Lines of a member's log that report a panic, for failure messages.
fn panic_lines(m: &Etcd) -> String {
    let log = m.log_tail(usize::MAX);
    let lines: Vec<&str> =
        log.lines().filter(|l| l.contains("panicked at") || l.contains(", raft_id: ")).collect();
    format!(
        "{}: {}",
        m.name,
        if lines.is_empty() { "no panic logged".to_string() } else { lines.join(" / ") }
    )
}

#[test]
fn leader_failover() {
    let rt = runtime();
    let mut c = Cluster::start(3, &[]);
    let old = c.wait_leader(Duration::from_secs(30));
    let (old_id, _, old_term, _) = c.status(old).expect("status of the leader");
    c.etcdctl_ok(&["put", "/failover/0000", "v"]);
    let rest: Vec<usize> = (0..3).filter(|&i| i != old).collect();
    let channels: Vec<Channel> = {
        let _g = rt.enter();
        rest.iter().map(|&i| channel(&c.members[i])).collect()
    };

    let killed_at = Instant::now();
    c.members[old].kill9();
    let Some((took, attempts)) =
        rt.block_on(first_put_after(channels.clone(), killed_at, Duration::from_secs(30)))
    else {
        panic!(
            "no put via the surviving members succeeded within 30 s of killing the leader; {}; {}",
            panic_lines(&c.members[rest[0]]),
            panic_lines(&c.members[rest[1]])
        );
    };
    println!(
        "leader_failover: first put acknowledged {took:?} after kill -9 of the leader ({attempts} attempts)"
    );
    assert!(
        took < FAILOVER_LIMIT,
        "no put succeeded until {took:?} after the leader was killed (limit {FAILOVER_LIMIT:?})"
    );

    let new = c.wait_leader(Duration::from_secs(30));
    assert_ne!(new, old, "a member that was killed cannot lead");
    let (new_id, leader, term, _) = c.status(new).expect("status of the new leader");
    assert_eq!(leader, new_id);
    assert!(term > old_term, "the new leader's term {term} is past the old one {old_term}");

    // Writes resume through both survivors.
    rt.block_on(async {
        for i in 1..=100 {
            let mut kv = KvClient::new(channels[i % 2].clone());
            let key = format!("/failover/{i:04}").into_bytes();
            kv.put(PutRequest { key, value: b"v".to_vec(), ..Default::default() })
                .await
                .unwrap_or_else(|e| panic!("put {i} after failover: {e}"));
        }
    });

    // The old leader comes back as a follower of the new one and catches up.
    c.members[old].respawn();
    c.members[old].wait_ready();
    let (own, following, _, _) = wait_for(
        "the old leader to follow a leader",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || c.status(old).filter(|s| s.1 != 0),
    );
    assert_eq!(own, old_id, "the old leader restarted with its member id");
    assert_ne!(following, old_id, "the restarted old leader must not lead (it follows {following:x})");
    c.wait_converged(Duration::from_secs(60));
    let (_, kvs) = local_kvs(&rt, &c.members[old], "/failover/");
    assert_eq!(kvs.len(), 101, "keys under /failover/ served locally by the restarted old leader");
}

// ---------------------------------------------------------------------------------------
// 3. Whole cluster killed mid-write
// ---------------------------------------------------------------------------------------

/// Writers per member.
const WRITERS_PER_MEMBER: usize = 2;
const ACKS_BEFORE_KILL: usize = 300;

#[test]
fn kill_all_members_during_writes() {
    let rt = runtime();
    let mut c = Cluster::start(3, &[]);
    let writers = WRITERS_PER_MEMBER * c.members.len();
    let acked: Arc<Mutex<Acked>> = Arc::default();
    let count = Arc::new(AtomicUsize::new(0));
    let killing = Arc::new(AtomicBool::new(false));
    let early_errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let handles: Vec<_> = {
        let _g = rt.enter();
        let channels: Vec<Channel> = c.members.iter().map(channel).collect();
        (0..writers)
            .map(|w| {
                let mut kv = KvClient::new(channels[w % channels.len()].clone());
                let (acked, count, killing, early_errors) =
                    (acked.clone(), count.clone(), killing.clone(), early_errors.clone());
                rt.spawn(async move {
                    for i in 0.. {
                        let key = format!("/kall/{w:02}/{i:06}").into_bytes();
                        match kv
                            .put(PutRequest { key: key.clone(), value: key.clone(), ..Default::default() })
                            .await
                        {
                            Ok(r) => {
                                let rev = r.into_inner().header.expect("put header").revision;
                                acked.lock().unwrap().push((key, rev));
                                count.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(e) => {
                                // Stop at the first error: at most one unacknowledged put per
                                // writer may have been committed.
                                if !killing.load(Ordering::SeqCst) {
                                    early_errors.lock().unwrap().push(format!("writer {w} put {i}: {e}"));
                                }
                                return;
                            }
                        }
                    }
                })
            })
            .collect()
    };
    wait_for(
        &format!("{ACKS_BEFORE_KILL} acknowledged puts"),
        Duration::from_secs(120),
        Duration::from_millis(5),
        || {
            let errs = early_errors.lock().unwrap();
            assert!(errs.is_empty(), "writers failed before the kill: {errs:?}");
            (count.load(Ordering::SeqCst) >= ACKS_BEFORE_KILL).then_some(())
        },
    );
    killing.store(true, Ordering::SeqCst);
    for m in &mut c.members {
        m.kill9();
    }
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), async {
            for h in handles {
                h.await.expect("writer task");
            }
        })
        .await
        .expect("writers did not stop within 60 s of the kill")
    });
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    println!(
        "kill_all_members_during_writes: {} puts acknowledged before kill -9 of all members",
        acked.len()
    );

    for m in &mut c.members {
        m.respawn();
    }
    for m in &mut c.members {
        m.wait_ready();
    }
    c.wait_leader(Duration::from_secs(60));
    c.wait_converged(Duration::from_secs(60));

    let mut first: Option<Kvs> = None;
    for m in &c.members {
        let (rev, kvs) = local_kvs(&rt, m, "/kall/");
        check_acked(&format!("after restarting all, {}", m.name), &acked, &kvs);
        let unacked = kvs.len() - acked.len();
        assert!(
            unacked <= writers,
            "{}: {unacked} keys never acknowledged (at most {writers} puts were in flight)",
            m.name
        );
        // Revisions: one per put, 2..=rev without holes (revision 1 is the empty store).
        let revs: HashSet<i64> = kvs.values().map(|v| v.0).collect();
        assert_eq!(revs.len(), kvs.len(), "{}: two keys share a mod_revision", m.name);
        let holes: Vec<i64> = (2..=rev).filter(|r| !revs.contains(r)).collect();
        assert!(holes.is_empty(), "{}: revisions 2..={rev} have holes: {holes:?}", m.name);
        match &first {
            None => first = Some(kvs),
            Some(f) => {
                assert!(f == &kvs, "{} serves different keys/revisions than {}", m.name, c.members[0].name)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// 4. Lagging member caught up by a raft snapshot
// ---------------------------------------------------------------------------------------

/// More puts than the log keeps after compaction (CATCH_UP_ENTRIES = 5000).
const LAG_PUTS: usize = 7000;

#[test]
fn lagging_member_catches_up_by_snapshot() {
    let rt = runtime();
    let mut c = Cluster::start(3, &["--snapshot-count", "100"]);
    let leader = c.wait_leader(Duration::from_secs(30));
    let lagging = (leader + 1) % 3;
    c.etcdctl_ok(&["put", "/lag/before", "v"]);
    c.members[lagging].kill9();

    let started = Instant::now();
    rt.block_on(async {
        let ch = channel(&c.members[leader]);
        let next = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let mut kv = KvClient::new(ch.clone());
                let next = next.clone();
                tokio::spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= LAG_PUTS {
                            return;
                        }
                        let key = format!("/lag/{i:05}").into_bytes();
                        kv.put(PutRequest { key, value: vec![b'x'; 100], ..Default::default() })
                            .await
                            .unwrap_or_else(|e| panic!("put {i} with one member down: {e}"));
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("writer task");
        }
    });
    println!("lagging_member_catches_up_by_snapshot: {LAG_PUTS} puts took {:?}", started.elapsed());
    assert!(
        c.members[leader].log_contains("compacted raft log"),
        "the leader never compacted its raft log with --snapshot-count 100"
    );

    let caught_up = Instant::now();
    c.members[lagging].respawn();
    c.members[lagging].wait_ready();
    c.wait_converged(Duration::from_secs(120));
    println!(
        "lagging_member_catches_up_by_snapshot: the member converged {:?} after restart",
        caught_up.elapsed()
    );
    let m = &c.members[lagging];
    assert!(
        m.log_contains("installed raft snapshot"),
        "{} caught up without installing a raft snapshot; log:\n{}",
        m.name,
        m.log_tail(40)
    );
    let (_, kvs) = local_kvs(&rt, m, "/lag/");
    assert_eq!(kvs.len(), LAG_PUTS + 1, "keys under /lag/ served locally by the member that lagged");
    // It keeps up through the log afterwards.
    c.etcdctl_ok(&["put", "/lag/after", "v"]);
    eventually("the caught-up member sees a later put", Duration::from_secs(30), &"v".to_string(), || {
        m.etcdctl_ok(&["get", "/lag/after", "--print-value-only", "--consistency=s"]).trim().to_string()
    });
}

// ---------------------------------------------------------------------------------------
// 5. Membership changes under load
// ---------------------------------------------------------------------------------------

/// Writes sequential keys through one member until stopped, recording acknowledgements
/// and errors (and carrying on after errors).
struct Writer {
    acked: Arc<Mutex<Acked>>,
    errors: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    /// Errors are recorded with when they happened (seconds since `t0`) and how long the
    /// failed request took.
    fn start(rt: &tokio::runtime::Runtime, m: &Etcd, tag: &str, t0: Instant) -> Writer {
        let _g = rt.enter();
        let mut kv = KvClient::new(channel(m));
        let acked: Arc<Mutex<Acked>> = Arc::default();
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (a, e, s, tag) = (acked.clone(), errors.clone(), stop.clone(), tag.to_string());
        let task = rt.spawn(async move {
            let mut i = 0;
            while !s.load(Ordering::SeqCst) {
                let key = format!("/load/{tag}/{i:06}").into_bytes();
                let sent = Instant::now();
                match kv.put(PutRequest { key: key.clone(), value: key.clone(), ..Default::default() }).await
                {
                    Ok(r) => {
                        a.lock().unwrap().push((key, r.into_inner().header.expect("put header").revision))
                    }
                    Err(err) => {
                        let (at, took) = (t0.elapsed().as_secs_f64(), sent.elapsed());
                        e.lock()
                            .unwrap()
                            .push(format!("{tag} put {i} at {at:.2}s after {took:.2?}: {}", err.message()));
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                i += 1;
            }
        });
        Writer { acked, errors, stop, task }
    }

    fn acks(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Waits until this writer has `more` acknowledgements beyond now.
    fn wait_progress(&self, what: &str, more: usize) {
        let target = self.acks() + more;
        wait_for(
            &format!("{more} more acknowledged puts {what}"),
            Duration::from_secs(60),
            Duration::from_millis(20),
            || (self.acks() >= target).then_some(()),
        );
    }
}

const IN_SYNC: &str = "can only promote a learner member which is in sync with leader";
/// Transient errors the writers may see while leadership moves.
const TOLERATED_WRITE_ERRORS: usize = 5;

#[test]
fn membership_changes_under_load() {
    let rt = runtime();
    let mut c = Cluster::start(3, &[]);
    let first_leader = c.wait_leader(Duration::from_secs(30));
    let followers: Vec<usize> = (0..3).filter(|&i| i != first_leader).collect();
    // Writers go through members that stay; `removed` is the follower taken out at the end.
    let (kept, removed) = (followers[0], followers[1]);
    let t0 = Instant::now();
    let phase =
        |what: &str| println!("membership_changes_under_load: {:.2}s {what}", t0.elapsed().as_secs_f64());
    let writers = [
        Writer::start(&rt, &c.members[first_leader], "a", t0),
        Writer::start(&rt, &c.members[kept], "b", t0),
    ];
    for w in &writers {
        w.wait_progress("before any change", 20);
    }

    // Add a learner; it catches up from the leader.
    phase("member add --learner");
    let learner = c.add_member(true);
    let learner_id = status_json(&c.members[learner]).expect("learner status")["header"]["member_id"]
        .as_u64()
        .expect("member id");
    let (_, listed) = member_list(&c.members[first_leader]);
    let row = listed
        .iter()
        .find(|m| m.id == learner_id)
        .unwrap_or_else(|| panic!("learner not listed: {listed:?}"));
    assert!(row.learner, "member list shows the new member as a learner: {row:?}");
    assert_eq!(
        status_json(&c.members[learner]).expect("status")["isLearner"],
        true,
        "endpoint status of the learner"
    );
    wait_for(
        "the learner to apply what the leader has",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || {
            let lead = status_json(&c.members[first_leader])?["raftIndex"].as_u64()?;
            let own = status_json(&c.members[learner])?["raftAppliedIndex"].as_u64()?;
            (own >= lead).then_some(())
        },
    );
    for w in &writers {
        w.wait_progress("after adding a learner", 20);
    }

    // Promote it once it is in sync.
    phase("member promote");
    let promote_out =
        wait_for("member promote to succeed", Duration::from_secs(60), Duration::from_millis(200), || {
            let out = c.members[first_leader].etcdctl(&["member", "promote", &hex(learner_id)]);
            let stderr = String::from_utf8_lossy(&out.stderr).to_string();
            if out.status.success() {
                Some(String::from_utf8_lossy(&out.stdout).to_string())
            } else {
                assert!(stderr.contains(IN_SYNC), "member promote failed: {stderr}");
                None
            }
        });
    // etcdctl prints member and cluster ids with %16x: space-padded to 16 columns.
    assert!(
        promote_out.contains(&format!("Member {learner_id:16x} promoted in cluster")),
        "member promote printed: {promote_out}"
    );
    eventually("the promoted member's isLearner", Duration::from_secs(30), &Some(false), || {
        status_json(&c.members[learner]).map(|s| s["isLearner"].as_bool().unwrap_or(false))
    });
    for m in [first_leader, kept, removed, learner] {
        let (_, listed) = member_list(&c.members[m]);
        assert!(
            listed.iter().any(|r| r.id == learner_id && !r.learner),
            "member list via {} shows the promoted member as a voter: {listed:?}",
            c.members[m].name
        );
    }
    for w in &writers {
        w.wait_progress("after the promotion", 20);
    }

    // Hand leadership to the new member.
    phase("move-leader");
    let leader = c.wait_leader(Duration::from_secs(30));
    let leader_id = c.status(leader).expect("leader status").0;
    let moved = c.members[leader].etcdctl_ok(&["move-leader", &hex(learner_id)]);
    assert_eq!(
        moved.trim(),
        format!("Leadership transferred from {} to {}", hex(leader_id), hex(learner_id)),
        "move-leader output"
    );
    let all: Vec<usize> = (0..c.members.len()).collect();
    eventually("the leader after move-leader", Duration::from_secs(30), &Some(learner), || {
        c.leader_among(&all)
    });
    for w in &writers {
        w.wait_progress("after move-leader", 20);
    }

    // Remove a follower: it stops on its own and leaves the list.
    phase("member remove");
    let removed_id = c.status(removed).expect("status").0;
    let out = c.members[learner].etcdctl_ok(&["member", "remove", &hex(removed_id)]);
    assert!(
        out.contains(&format!("Member {removed_id:16x} removed from cluster")),
        "member remove printed: {out}"
    );
    wait_for("the removed member to exit", Duration::from_secs(30), Duration::from_millis(100), || {
        (!c.members[removed].is_running()).then_some(())
    });
    for m in [first_leader, kept, learner] {
        let (_, listed) = member_list(&c.members[m]);
        let ids: BTreeSet<u64> = listed.iter().map(|r| r.id).collect();
        assert_eq!(ids.len(), 3, "member list via {} after the removal: {listed:?}", c.members[m].name);
        assert!(
            !ids.contains(&removed_id),
            "member list via {} still lists the removed member",
            c.members[m].name
        );
    }
    for w in &writers {
        w.wait_progress("after the removal", 20);
    }

    phase("stopping the writers");
    for w in &writers {
        w.stop.store(true, Ordering::SeqCst);
    }
    let mut acked = Vec::new();
    let mut errors = Vec::new();
    for w in writers {
        rt.block_on(w.task).expect("writer task");
        acked.extend(std::mem::take(&mut *w.acked.lock().unwrap()));
        errors.extend(std::mem::take(&mut *w.errors.lock().unwrap()));
    }
    println!(
        "membership_changes_under_load: {} puts acknowledged, {} errors: {errors:?}",
        acked.len(),
        errors.len()
    );
    assert!(
        errors.len() <= TOLERATED_WRITE_ERRORS,
        "the writers saw {} errors (at most {TOLERATED_WRITE_ERRORS} tolerated): {errors:?}",
        errors.len()
    );
    c.wait_converged(Duration::from_secs(60));
    for m in [first_leader, kept, learner] {
        let (_, kvs) = local_kvs(&rt, &c.members[m], "/load/");
        check_acked(&c.members[m].name, &acked, &kvs);
    }
}

// ---------------------------------------------------------------------------------------
// 6. A member of another cluster
// ---------------------------------------------------------------------------------------

#[test]
fn peers_from_another_cluster_are_refused() {
    let rt = runtime();
    // Cluster A: three members planned, two started (a quorum), token "a".
    let (specs, initial) = plan(3);
    let token_a = ["--initial-cluster-token", "a"];
    let mut members = vec![specs[0].start(&initial, &token_a), specs[1].start(&initial, &token_a)];
    for m in &mut members {
        m.wait_ready();
    }
    let mut a = Cluster { members, flavor: e2e::Flavor::Ours, extra_args: Vec::new() };
    let leader = a.wait_leader(Duration::from_secs(30));
    a.etcdctl_ok(&["put", "/a/before", "v1"]);
    for m in &a.members {
        eventually(
            &format!("named members in {}'s member list", m.name),
            Duration::from_secs(30),
            &2,
            || member_list(m).1.iter().filter(|r| !r.name.is_empty()).count(),
        );
    }
    let (cluster_a, before) = member_list(&a.members[0]);
    assert_eq!(before.len(), 3, "cluster A lists its three planned members: {before:?}");
    let third = before
        .iter()
        .find(|m| m.peer_urls == [specs[2].peer_url()])
        .expect("the third planned member")
        .clone();
    assert!(
        third.name.is_empty() && third.client_urls.is_empty(),
        "the third member has not started: {third:?}"
    );

    // The third member's place is taken by a member with the same --initial-cluster but
    // token "b": another cluster, whose member and cluster ids differ.
    let stranger = specs[2].start(&initial, &["--initial-cluster-token", "b"]);
    wait_for(
        "the stranger to be refused by cluster A's members",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || stranger.log_contains("cluster ID mismatch").then_some(()),
    );
    // A's members keep serving A, undisturbed.
    for (i, m) in a.members.iter().enumerate() {
        let (cid, listed) = member_list(m);
        assert_eq!(
            (cid, &listed),
            (cluster_a, &before),
            "member list via {} with the stranger around",
            m.name
        );
        let (_, lead, _, _) = a.status(i).expect("status");
        assert_eq!(lead, a.status(leader).expect("status").0, "{}'s leader with the stranger around", m.name);
    }
    a.members[0].etcdctl_ok(&["put", "/a/during", "v2"]);
    assert_eq!(a.members[1].etcdctl_ok(&["get", "/a/during", "--print-value-only"]).trim(), "v2");
    // The stranger serves none of A's data and is not part of A.
    let st = status_json(&stranger).expect("the stranger answers status");
    assert_ne!(
        st["header"]["cluster_id"].as_u64(),
        Some(cluster_a),
        "the stranger reports cluster A's id: {st}"
    );
    assert_eq!(st["leader"].as_u64().unwrap_or(0), 0, "the stranger has no leader: {st}");
    let ids_a: BTreeSet<u64> = before.iter().map(|m| m.id).collect();
    let own = st["header"]["member_id"].as_u64().expect("member id");
    assert!(!ids_a.contains(&own), "the stranger's member id {own:x} is one of A's: {ids_a:x?}");
    let local = stranger.etcdctl_ok(&["get", "/a/", "--prefix", "--consistency=s", "--keys-only"]);
    assert!(local.trim().is_empty(), "the stranger serves cluster A's keys: {local}");
    let lin = stranger.etcdctl(&["get", "/a/before", "--command-timeout=2s"]);
    assert!(
        !lin.status.success(),
        "a linearizable read on the stranger succeeded: {}",
        String::from_utf8_lossy(&lin.stdout)
    );

    // Once the stranger is gone, the real third member (token "a", fresh data dir, same
    // addresses) joins: A's view of it was not damaged.
    drop(stranger);
    let mut third_member = specs[2].start(&initial, &token_a);
    third_member.wait_ready();
    a.members.push(third_member);
    eventually("cluster A's member list once the third member started", Duration::from_secs(30), &3, || {
        member_list(&a.members[0]).1.iter().filter(|m| !m.name.is_empty()).count()
    });
    a.wait_converged(Duration::from_secs(60));
    let (_, kvs) = local_kvs(&rt, &a.members[2], "/a/");
    assert_eq!(kvs.len(), 2, "the third member serves A's keys");
}

// ---------------------------------------------------------------------------------------
// 7. Writes made while there is no leader
// ---------------------------------------------------------------------------------------

/// A member that has lost its quorum knows no leader. Puts sent to it then must either
/// complete once a quorum is back or fail with an error; the member must keep running,
/// and every put it acknowledged must be on every member afterwards, at the revision its
/// response gave.
#[test]
fn writes_sent_without_a_leader_complete_once_quorum_returns() {
    let rt = runtime();
    let mut c = Cluster::start(3, &[]);
    c.wait_leader(Duration::from_secs(30));
    let survivor = 0;
    let ch = {
        let _g = rt.enter();
        channel(&c.members[survivor])
    };
    // Connect now, so the puts below are on the wire at once.
    rt.block_on(async {
        let mut kv = KvClient::new(ch.clone());
        kv.put(PutRequest { key: b"/nolead/0".to_vec(), value: b"v".to_vec(), ..Default::default() }).await
    })
    .expect("put with all members up");
    c.members[1].kill9();
    c.members[2].kill9();
    wait_for("the survivor to know no leader", Duration::from_secs(30), Duration::from_millis(50), || {
        // `leader` is left out of the JSON when it is 0.
        status_json(&c.members[survivor]).filter(|s| s["leader"].as_u64().unwrap_or(0) == 0).map(|_| ())
    });
    let puts: Vec<_> = (1..=5)
        .map(|i| {
            let mut kv = KvClient::new(ch.clone());
            rt.spawn(async move {
                let key = format!("/nolead/{i}").into_bytes();
                kv.put(PutRequest { key, value: b"v".to_vec(), ..Default::default() }).await
            })
        })
        .collect();
    // The puts reach the survivor long before a restarted member can vote (process start
    // plus an election timeout).
    c.members[1].respawn();
    c.members[2].respawn();
    let results: Vec<_> = rt.block_on(async {
        let mut out = Vec::new();
        for p in puts {
            out.push(tokio::time::timeout(Duration::from_secs(30), p).await);
        }
        out
    });
    let mut outcomes = Vec::new();
    let mut acked = Vec::new();
    for (i, r) in results.into_iter().enumerate() {
        let r = r.unwrap_or_else(|_| {
            panic!("put {} sent without a leader neither completed nor failed in 30 s", i + 1)
        });
        outcomes.push(match r.expect("put task") {
            Ok(resp) => {
                let rev = resp.into_inner().header.expect("put header").revision;
                acked.push((format!("/nolead/{}", i + 1).into_bytes(), rev));
                format!("ok at {rev}")
            }
            Err(e) => e.message().to_string(),
        });
    }
    println!(
        "writes_sent_without_a_leader_complete_once_quorum_returns: puts sent without a leader: {outcomes:?}"
    );
    // With the quorum back, the survivor takes writes again.
    let mut last_error = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let out = c.members[survivor].etcdctl(&["put", "/nolead/after", "v", "--command-timeout=3s"]);
        if out.status.success() {
            last_error.clear();
            break;
        }
        last_error =
            String::from_utf8_lossy(&out.stderr).trim().lines().last().unwrap_or_default().to_string();
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        last_error.is_empty(),
        "after the quorum returned, puts via the member that held puts without a leader still fail: {last_error} \
         (the puts it held: {outcomes:?}); {}",
        panic_lines(&c.members[survivor])
    );
    for m in &mut c.members {
        m.wait_ready();
    }
    c.wait_converged(Duration::from_secs(60));
    for m in &c.members {
        let (_, kvs) = local_kvs(&rt, m, "/nolead/");
        for (key, rev) in &acked {
            let got = kvs.get(key).map(|(mod_rev, ..)| *mod_rev);
            assert_eq!(
                got,
                Some(*rev),
                "{}: {} was acknowledged at revision {rev} while there was no leader (outcomes {outcomes:?})",
                m.name,
                String::from_utf8_lossy(key)
            );
        }
    }
}
