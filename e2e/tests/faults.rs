//! Fault tests for our etcd: crashes mid-write, a full backend, bad TLS clients, oversized
//! and malformed requests, compacted watches, and the observability endpoints. Each test
//! drives its own server with the clients a user would use (etcdctl 3.4, a gRPC client,
//! raw sockets) and checks what those clients see.

use std::collections::{BTreeMap, HashSet};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e::pki::Pki;
use e2e::{ETCDCTL, Etcd, EtcdOptions, channel, http_get, json, loopback_ip, runtime, wait_for};
use proto::etcdserverpb::kv_client::KvClient;
use proto::etcdserverpb::{PutRequest, RangeRequest};
use rand::RngCore;

/// The last line of etcdctl's stderr: its `Error: ...` line (clientv3 logs a JSON
/// "retrying of unary invoker failed" warning before it).
fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().lines().last().unwrap_or_default().to_string()
}

// ---------------------------------------------------------------------------------------
// 1. Durability across kill -9
// ---------------------------------------------------------------------------------------

const WRITERS: usize = 8;
/// Acknowledged puts: (key, header.revision of the put's response).
type Acked = Vec<(Vec<u8>, i64)>;
/// Acknowledged puts to wait for (per cycle) before pulling the plug.
const ACKS_BEFORE_KILL: usize = 400;

/// Runs `WRITERS` concurrent put loops until `ACKS_BEFORE_KILL` puts are acknowledged, then
/// kills the server while they are still writing. Returns every acknowledged (key, revision).
fn write_until_killed(rt: &tokio::runtime::Runtime, etcd: &mut Etcd, cycle: usize) -> Acked {
    let acked: Arc<Mutex<Acked>> = Arc::default();
    let count = Arc::new(AtomicUsize::new(0));
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let finished = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = {
        let _guard = rt.enter();
        let ch = channel(etcd);
        (0..WRITERS)
            .map(|w| {
                let mut client = KvClient::new(ch.clone());
                let (acked, count, errors, finished) =
                    (acked.clone(), count.clone(), errors.clone(), finished.clone());
                rt.spawn(async move {
                    for i in 0.. {
                        let key = format!("/dur/{cycle}/{w:02}/{i:06}").into_bytes();
                        let req = PutRequest { key: key.clone(), value: key.clone(), ..Default::default() };
                        match client.put(req).await {
                            Ok(resp) => {
                                let rev = resp.into_inner().header.expect("put response header").revision;
                                acked.lock().unwrap().push((key, rev));
                                count.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(e) => {
                                errors.lock().unwrap().push(format!("writer {w} put {i}: {e}"));
                                break;
                            }
                        }
                    }
                    finished.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect()
    };
    wait_for(
        &format!("{ACKS_BEFORE_KILL} acknowledged puts"),
        Duration::from_secs(120),
        Duration::from_millis(5),
        || {
            assert_eq!(
                finished.load(Ordering::SeqCst),
                0,
                "writers failed before the kill: {:?}",
                errors.lock().unwrap()
            );
            (count.load(Ordering::SeqCst) >= ACKS_BEFORE_KILL).then_some(())
        },
    );
    // Every writer is still running: only the kill may end them.
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "writers failed before the kill: {:?}",
        errors.lock().unwrap()
    );
    etcd.kill9();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), async {
            for h in handles {
                h.await.expect("writer task");
            }
        })
        .await
        .expect("writers did not stop within 60s of the kill")
    });
    Arc::try_unwrap(acked).expect("writers done").into_inner().unwrap()
}

/// Reads everything under `/dur/` linearizably and checks it against the acknowledged puts.
fn check_durable(rt: &tokio::runtime::Runtime, etcd: &Etcd, acked: &[(Vec<u8>, i64)], cycles: usize) {
    let resp = rt.block_on(async {
        let mut client = KvClient::new(channel(etcd)).max_decoding_message_size(256 << 20);
        client
            .range(RangeRequest {
                key: b"/dur/".to_vec(),
                range_end: b"/dur0".to_vec(),
                serializable: false,
                ..Default::default()
            })
            .await
            .expect("range /dur/ after restart")
            .into_inner()
    });
    let present: BTreeMap<Vec<u8>, (i64, i64, i64, Vec<u8>)> = resp
        .kvs
        .iter()
        .map(|kv| (kv.key.clone(), (kv.mod_revision, kv.create_revision, kv.version, kv.value.clone())))
        .collect();
    for (key, rev) in acked {
        let name = String::from_utf8_lossy(key);
        let Some((mod_rev, _, _, value)) = present.get(key) else {
            panic!("acknowledged put of {name} at revision {rev} is lost after kill -9 and restart");
        };
        assert_eq!(mod_rev, rev, "{name}: mod_revision after restart differs from the acknowledged revision");
        assert_eq!(value, key, "{name}: value after restart");
    }
    for (key, (mod_rev, create_rev, version, _)) in &present {
        // Each key is written exactly once.
        assert_eq!(
            (create_rev, version),
            (mod_rev, &1),
            "{}: create_revision/version of a key put once",
            String::from_utf8_lossy(key)
        );
    }
    let mut revs: Vec<i64> = present.values().map(|v| v.0).collect();
    revs.sort_unstable();
    let distinct: HashSet<i64> = revs.iter().copied().collect();
    assert_eq!(distinct.len(), revs.len(), "two keys share a mod_revision");
    let (min, max) = (revs[0], *revs.last().expect("keys"));
    assert_eq!(min, 2, "the first put after bootstrap (revision 1) must get revision 2");
    let holes: Vec<i64> = (min..=max).filter(|r| !distinct.contains(r)).collect();
    assert!(holes.is_empty(), "revisions {min}..={max} have holes: {holes:?}");
    let header_rev = resp.header.expect("range header").revision;
    assert_eq!(header_rev, max, "store revision after restart vs the newest put");
    // At most one put per writer per crash was in flight: committed but never acknowledged.
    let unacked = present.len() - acked.len();
    assert!(
        unacked <= WRITERS * cycles,
        "{unacked} keys present that were never acknowledged (at most {} puts were in flight)",
        WRITERS * cycles
    );
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    let rt = runtime();
    let mut etcd = Etcd::start(EtcdOptions::default());
    let mut acked = Vec::new();
    for cycle in 0..2 {
        acked.extend(write_until_killed(&rt, &mut etcd, cycle));
        etcd.restart();
        check_durable(&rt, &etcd, &acked, cycle + 1);
    }
}

// ---------------------------------------------------------------------------------------
// 2. Backend quota
// ---------------------------------------------------------------------------------------

const QUOTA: u64 = 16 << 20;
const NOSPACE: &str = "Error: etcdserver: mvcc: database space exceeded";

fn status(etcd: &Etcd) -> serde_json::Value {
    let out = json(&etcd.etcdctl_ok(&["endpoint", "status", "-w", "json"]));
    out[0]["Status"].clone()
}

#[test]
fn quota_nospace_then_recover() {
    let etcd = Etcd::start(EtcdOptions {
        extra_args: vec!["--quota-backend-bytes".into(), QUOTA.to_string()],
        ..Default::default()
    });
    let value = vec![b'v'; 256 << 10];
    let mut failure = None;
    let mut puts = 0;
    // 64 such puts fill 16 MiB; allow twice that before calling the quota ignored.
    for _ in 0..128 {
        let out = etcd.etcdctl_stdin(&["put", "big"], &value);
        if !out.status.success() {
            failure = Some(stderr_of(&out));
            break;
        }
        puts += 1;
    }
    let failure = failure.unwrap_or_else(|| {
        panic!(
            "128 puts of 256 KiB (32 MiB of history) under a 16 MiB quota all succeeded; status {}",
            status(&etcd)
        )
    });
    assert_eq!(failure, NOSPACE, "error of the put that exceeded the quota (after {puts} puts)");

    let alarms = etcd.etcdctl_ok(&["alarm", "list"]);
    assert!(alarms.contains("alarm:NOSPACE"), "alarm list: {alarms:?}");
    let st = status(&etcd);
    let errors = st["errors"].as_array().cloned().unwrap_or_default();
    assert!(
        errors.iter().any(|e| e.as_str().is_some_and(|s| s.contains("alarm:NOSPACE"))),
        "endpoint status errors: {st}"
    );
    let table = etcd.etcdctl_ok(&["endpoint", "status", "-w", "table"]);
    assert!(table.contains("ERRORS") && table.contains("alarm:NOSPACE"), "endpoint status table:\n{table}");

    // While the alarm is active every put fails, even a tiny one; reads still work.
    let out = etcd.etcdctl(&["put", "small", "v"]);
    assert!(!out.status.success(), "a put succeeded under the NOSPACE alarm");
    assert_eq!(stderr_of(&out), NOSPACE);
    assert_eq!(etcd.etcdctl_ok(&["get", "big", "--keys-only"]).trim(), "big");
    assert_eq!(etcd.etcdctl_ok(&["get", "small", "--keys-only"]).trim(), "");

    // Recover: compact away the history, defragment, disarm.
    let size_before = st["dbSize"].as_i64().expect("dbSize");
    let rev = st["header"]["revision"].as_i64().expect("header.revision");
    let compacted = etcd.etcdctl_ok(&["compaction", "--physical", &rev.to_string()]);
    assert_eq!(compacted.trim(), format!("compacted revision {rev}"));
    etcd.etcdctl_ok(&["defrag"]);
    let size_after = status(&etcd)["dbSize"].as_i64().expect("dbSize");
    eprintln!("dbSize before compaction+defrag: {size_before}, after: {size_after} (quota {QUOTA})");
    assert!(
        (size_after as u64) < QUOTA / 2,
        "defrag after compaction did not shrink the database: dbSize {size_before} -> {size_after}, quota {QUOTA}"
    );
    etcd.etcdctl_ok(&["alarm", "disarm"]);
    assert_eq!(etcd.etcdctl_ok(&["alarm", "list"]).trim(), "", "alarms after disarm");
    let errors = status(&etcd)["errors"].clone();
    assert!(
        errors.is_null() || errors.as_array().is_some_and(Vec::is_empty),
        "status errors after disarm: {errors}"
    );

    assert_eq!(etcd.etcdctl_ok(&["put", "small", "after"]).trim(), "OK");
    assert_eq!(etcd.etcdctl_ok(&["get", "small", "--print-value-only"]).trim(), "after");
    let out = etcd.etcdctl_stdin(&["put", "big"], &value);
    assert!(out.status.success(), "a 256 KiB put after recovery failed: {}", stderr_of(&out));
}

// ---------------------------------------------------------------------------------------
// 3. TLS
// ---------------------------------------------------------------------------------------

/// etcdctl against `endpoint` with exactly the given flags (TLS files, timeouts).
fn etcdctl_raw(endpoint: &str, tls_flags: &[String], args: &[&str]) -> std::process::Output {
    Command::new(ETCDCTL)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(tls_flags)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running etcdctl")
}

/// Sends `request` on a fresh connection and returns whatever comes back before the
/// server closes the connection (or 10 s pass); a reset counts as a close.
fn raw_exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let _ = s.write_all(request);
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
            Err(_) => break,
        }
    }
    got
}

#[test]
fn client_tls_and_mutual_auth() {
    let ip = loopback_ip();
    let pki = Pki::new(ip);
    let etcd = Etcd::start(EtcdOptions { ip: Some(ip), tls: Some(pki.server.clone()), ..Default::default() });
    let endpoint = etcd.endpoint();
    assert!(endpoint.starts_with("https://"), "{endpoint}");

    assert_eq!(etcd.etcdctl_ok(&["put", "k", "v"]).trim(), "OK");
    assert_eq!(etcd.etcdctl_ok(&["get", "k", "--print-value-only"]).trim(), "v");

    // Trusting the server but presenting no certificate: refused.
    let timeouts = ["--dial-timeout=2s".to_string(), "--command-timeout=3s".into()];
    let ca_only = [&timeouts[..], &[format!("--cacert={}", pki.server.ca.display())]].concat();
    let out = etcdctl_raw(&endpoint, &ca_only, &["put", "a", "b"]);
    assert!(
        !out.status.success(),
        "a put without a client certificate succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    // A client certificate from another CA: refused.
    let other = Pki::new(ip);
    let foreign = [
        &timeouts[..],
        &[
            format!("--cacert={}", pki.server.ca.display()),
            format!("--cert={}", other.server.client.cert.display()),
            format!("--key={}", other.server.client.key.display()),
        ],
    ]
    .concat();
    let out = etcdctl_raw(&endpoint, &foreign, &["put", "a", "c"]);
    assert!(!out.status.success(), "a put with a certificate from an unknown CA succeeded");

    // Plain gRPC and plain HTTP to the TLS port get nothing useful.
    let plain = format!("http://{}", etcd.client_addr());
    let out = etcdctl_raw(&plain, &timeouts, &["put", "a", "d"]);
    assert!(!out.status.success(), "a plaintext put to the TLS port succeeded");
    let reply =
        raw_exchange(etcd.client_addr(), b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let text = String::from_utf8_lossy(&reply);
    assert!(!text.starts_with("HTTP/1.1 200"), "plain HTTP on the TLS port was served: {text}");

    // None of the refused writes landed, and the server still serves authenticated clients.
    assert_eq!(etcd.etcdctl_ok(&["get", "a", "--keys-only"]).trim(), "", "a refused put was applied");
    assert_eq!(etcd.etcdctl_ok(&["put", "k", "v2"]).trim(), "OK");
    assert_eq!(etcd.etcdctl_ok(&["get", "k", "--print-value-only"]).trim(), "v2");
}

// ---------------------------------------------------------------------------------------
// 3b. Maintenance commands with URL endpoints
// ---------------------------------------------------------------------------------------

/// `etcdctl endpoint status`, `endpoint hashkv` and `defrag` dial each endpoint on its own
/// and send it, as typed (`http://ip:port`), as the HTTP/2 `:authority`; etcd serves them.
#[test]
fn maintenance_commands_accept_endpoint_urls() {
    let etcd = Etcd::start(EtcdOptions::default());
    let ep = etcd.endpoint();
    assert!(ep.starts_with("http://"), "{ep}");
    etcd.etcdctl_ok(&["put", "k", "v"]);

    let st = json(&etcd.etcdctl_ok(&["endpoint", "status", "-w", "json"]));
    assert_eq!(st[0]["Endpoint"], ep.as_str(), "endpoint status: {st}");
    assert_eq!(st[0]["Status"]["version"], "3.4.23", "endpoint status: {st}");
    let hash = etcd.etcdctl_ok(&["endpoint", "hashkv"]);
    assert!(hash.starts_with(&format!("{ep}, ")), "endpoint hashkv: {hash}");
    let out = etcd.etcdctl_ok(&["defrag"]);
    assert_eq!(out.trim(), format!("Finished defragmenting etcd member[{ep}]"));
}

// ---------------------------------------------------------------------------------------
// 4. Oversized requests
// ---------------------------------------------------------------------------------------

fn assert_serving(etcd: &Etcd, n: usize) {
    let key = format!("alive-{n}");
    assert_eq!(etcd.etcdctl_ok(&["put", &key, "yes"]).trim(), "OK", "put after fault {n}");
    assert_eq!(etcd.etcdctl_ok(&["get", &key, "--print-value-only"]).trim(), "yes", "get after fault {n}");
    let (code, body) = etcd.http_get("/health");
    assert_eq!(code, 200, "/health after fault {n}: {body}");
}

#[test]
fn oversized_request_is_refused_and_server_keeps_serving() {
    let etcd = Etcd::start(EtcdOptions::default());

    // Just under --max-request-bytes (1.5 MiB) is accepted.
    let out = etcd.etcdctl_stdin(&["put", "under"], &vec![b'u'; 1_500_000]);
    assert!(out.status.success(), "a 1.5 MB put failed: {}", stderr_of(&out));

    // 1.6 MiB: over --max-request-bytes but under the gRPC limit, refused by the server.
    let out = etcd.etcdctl_stdin(&["put", "big"], &vec![b'x'; 1_677_722]);
    assert!(!out.status.success(), "a 1.6 MiB put succeeded");
    assert_eq!(stderr_of(&out), "Error: etcdserver: request is too large");
    assert_serving(&etcd, 1);

    // 3 MiB: etcdctl refuses to send it (its own gRPC limit); the server is untouched.
    let out = etcd.etcdctl_stdin(&["put", "huge"], &vec![b'y'; 3 << 20]);
    assert!(!out.status.success(), "a 3 MiB put via etcdctl succeeded");
    assert_serving(&etcd, 2);

    // 3 MiB from a client without that limit reaches the server's transport limit.
    let rt = runtime();
    let status = rt.block_on(async {
        let mut client = KvClient::new(channel(&etcd)).max_encoding_message_size(16 << 20);
        client
            .put(PutRequest { key: b"huge".to_vec(), value: vec![b'y'; 3 << 20], ..Default::default() })
            .await
            .expect_err("a 3 MiB put over gRPC succeeded")
    });
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "3 MiB put: {status:?}");
    assert_serving(&etcd, 3);

    assert_eq!(etcd.etcdctl_ok(&["get", "big", "--keys-only"]).trim(), "");
    assert_eq!(etcd.etcdctl_ok(&["get", "huge", "--keys-only"]).trim(), "");
    assert_eq!(etcd.etcdctl_ok(&["get", "under", "--keys-only"]).trim(), "under");
}

// ---------------------------------------------------------------------------------------
// 5. Garbage on the client port
// ---------------------------------------------------------------------------------------

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// HPACK "literal header field without indexing", name from the static table
/// (index < 15), value as a plain string shorter than 127 bytes.
fn hpack_literal(name_index: u8, value: &str) -> Vec<u8> {
    let mut v = vec![name_index, value.len() as u8];
    v.extend_from_slice(value.as_bytes());
    v
}

/// A gRPC request header block for KV/Put, hand-encoded in HPACK.
fn grpc_put_headers() -> Vec<u8> {
    let mut h = vec![0x83, 0x86]; // :method POST, :scheme http
    h.extend(hpack_literal(4, "/etcdserverpb.KV/Put")); // :path
    h.extend(hpack_literal(1, "localhost")); // :authority
    // content-type is static index 31: 4-bit prefix 15, then 16.
    h.extend([0x0f, 0x10, 16]);
    h.extend_from_slice(b"application/grpc");
    h.extend([0x00, 2]);
    h.extend_from_slice(b"te");
    h.extend([8]);
    h.extend_from_slice(b"trailers");
    h
}

/// Reads HTTP/2 frames until the server ends stream 1 (trailers or RST_STREAM), sends
/// GOAWAY, or closes the connection. Panics if it does none of these within 10 s.
fn await_stream_end(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        assert!(
            Instant::now() < deadline,
            "no answer to the 4 GiB message within 10 s; frames seen: {seen:?}"
        );
        let mut head = [0u8; 9];
        match s.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("no answer to the 4 GiB message within 10 s; frames seen: {seen:?}")
            }
            Err(_) => return format!("connection closed after frames {seen:?}"),
        }
        let len = (head[0] as usize) << 16 | (head[1] as usize) << 8 | head[2] as usize;
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        if s.read_exact(&mut payload).is_err() {
            return format!("connection closed after frames {seen:?}");
        }
        seen.push((kind, flags, stream));
        match (kind, stream) {
            (0x1, 1) if flags & 0x1 != 0 => return format!("trailers on stream 1 after {seen:?}"),
            (0x3, 1) => return format!("RST_STREAM on stream 1 after {seen:?}"),
            (0x7, _) => return format!("GOAWAY after {seen:?}"),
            _ => {}
        }
    }
}

#[test]
fn garbage_on_the_client_port_does_not_wedge_the_server() {
    let etcd = Etcd::start(EtcdOptions::default());
    let addr = etcd.client_addr();
    let mut rng = rand::rng();

    // Random bytes: the server drops the connection instead of waiting for sense.
    let mut junk = vec![0u8; 64 << 10];
    rng.fill_bytes(&mut junk);
    junk[0] = b'Z'; // never a valid start of an HTTP/1 method or the HTTP/2 preface
    raw_exchange(addr, &junk);
    assert_serving(&etcd, 1);

    // The HTTP/2 preface, then frames that make no sense: a DATA frame on stream 0, an
    // oversized frame of an unknown type, and random bytes.
    let mut bad = H2_PREFACE.to_vec();
    bad.extend(h2_frame(0x4, 0, 0, &[]));
    bad.extend(h2_frame(0x0, 0, 0, b"data on the connection stream"));
    bad.extend([0xff, 0xff, 0xff, 0xee, 0x00, 0x7f, 0xff, 0xff, 0xff]);
    let mut tail = vec![0u8; 4096];
    rng.fill_bytes(&mut tail);
    bad.extend(tail);
    raw_exchange(addr, &bad);
    assert_serving(&etcd, 2);

    // Truncated HTTP/1.1 requests left open while other clients are served.
    let open: Vec<TcpStream> = (0..32)
        .map(|_| {
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
            s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Half: a").expect("write half request");
            s
        })
        .collect();
    assert_serving(&etcd, 3);
    drop(open);

    // A gRPC message whose length prefix claims 4 GiB: answered, not buffered.
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    let mut req = H2_PREFACE.to_vec();
    req.extend(h2_frame(0x4, 0, 0, &[]));
    req.extend(h2_frame(0x1, 0x4, 1, &grpc_put_headers()));
    req.extend(h2_frame(0x0, 0, 1, &[0, 0xff, 0xff, 0xff, 0xff, 0x0a, 0x01, b'k']));
    s.write_all(&req).expect("write grpc request");
    let outcome = await_stream_end(&mut s);
    eprintln!("4 GiB length prefix: {outcome}");
    assert_serving(&etcd, 4);
    drop(s);
    assert_eq!(etcd.etcdctl_ok(&["get", "k", "--keys-only"]).trim(), "", "the truncated put was applied");
}

// ---------------------------------------------------------------------------------------
// 6. Watch from a compacted revision
// ---------------------------------------------------------------------------------------

#[test]
fn watch_at_compacted_revision_reports_it() {
    let etcd = Etcd::start(EtcdOptions::default());
    for i in 0..5 {
        etcd.etcdctl_ok(&["put", "k", &format!("v{i}")]); // revisions 2..=6
    }
    assert_eq!(etcd.etcdctl_ok(&["compaction", "4"]).trim(), "compacted revision 4");

    let (code, stderr) = etcd.etcdctl_spawn(&["watch", "k", "--rev=2"]).wait(Duration::from_secs(30));
    assert_eq!(code, Some(5), "exit code of a watch from a compacted revision; stderr: {stderr}");
    assert!(stderr.contains("required revision has been compacted"), "stderr: {stderr}");

    let mut watch = etcd.etcdctl_spawn(&["watch", "k", "--rev=2", "-w", "json"]);
    let line = watch.read_lines(1, Duration::from_secs(30))[0].clone();
    let resp = json(&line);
    assert_eq!(resp["CompactRevision"], 4, "watch response: {line}");
    assert_eq!(resp["Canceled"], true, "watch response: {line}");
    let (code, stderr) = watch.wait(Duration::from_secs(30));
    assert_eq!(code, Some(5), "json watch exit; stderr: {stderr}");

    // From the compaction point on, the history is still there.
    let mut watch = etcd.etcdctl_spawn(&["watch", "k", "--rev=4"]);
    let lines = watch.read_lines(9, Duration::from_secs(10)).to_vec();
    assert_eq!(lines, ["PUT", "k", "v2", "PUT", "k", "v3", "PUT", "k", "v4"]);
}

// ---------------------------------------------------------------------------------------
// 7. Metrics, health, version
// ---------------------------------------------------------------------------------------

const METRIC_NAMES: [&str; 8] = [
    "etcd_server_has_leader",
    "etcd_server_leader_changes_seen_total",
    "etcd_server_proposals_committed_total",
    "etcd_server_proposals_applied_total",
    "etcd_mvcc_db_total_size_in_bytes",
    "etcd_disk_wal_fsync_duration_seconds_bucket",
    "etcd_disk_backend_commit_duration_seconds_bucket",
    "process_resident_memory_bytes",
];

/// Checks a /metrics body: the etcd metrics are there as samples and promtool parses it.
fn check_metrics(where_: &str, body: &str) {
    let samples: Vec<&str> = body.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(
        samples.contains(&"etcd_server_has_leader 1"),
        "{where_}: no `etcd_server_has_leader 1` in:\n{body}"
    );
    for name in METRIC_NAMES {
        assert!(
            samples.iter().any(|l| l.strip_prefix(name).is_some_and(|r| r.starts_with([' ', '{']))),
            "{where_}: no sample of {name}"
        );
    }
    let mut promtool = Command::new("/usr/bin/promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running promtool");
    promtool.stdin.take().expect("stdin").write_all(body.as_bytes()).expect("feeding promtool");
    let out = promtool.wait_with_output().expect("promtool output");
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // promtool 2.42: 0 = clean, 3 = lint findings only (real etcd 3.4.23 has those too:
    // gauges named *_total), 1 = the exposition does not parse.
    assert!(
        matches!(out.status.code(), Some(0 | 3)),
        "{where_}: promtool check metrics {}:\n{report}",
        out.status
    );
    assert!(!report.contains("error while linting"), "{where_}: promtool:\n{report}");
}

#[test]
fn metrics_parse_and_name_etcd_metrics() {
    let ip = loopback_ip();
    let metrics_addr = SocketAddr::from((ip, e2e::free_port(ip)));
    let etcd = Etcd::start(EtcdOptions {
        ip: Some(ip),
        extra_args: vec!["--listen-metrics-urls".into(), format!("http://{metrics_addr}")],
        ..Default::default()
    });
    etcd.etcdctl_ok(&["put", "k", "v"]);

    let (code, body) = etcd.http_get("/metrics");
    assert_eq!(code, 200, "/metrics on the client port: {body}");
    check_metrics("client port", &body);

    let (code, body) = etcd.http_get("/health");
    assert_eq!(code, 200, "/health: {body}");
    let health = json(&body);
    assert_eq!(health["health"], "true", "/health: {body}");
    // etcd 3.4.23 answers {"health":"true"}; 3.5 adds "reason":"".
    assert!(health.get("reason").is_none_or(|r| *r == ""), "/health: {body}");

    let (code, body) = etcd.http_get("/version");
    assert_eq!(code, 200, "/version: {body}");
    assert!(body.contains(r#""etcdserver":"3.4.23""#), "/version: {body}");

    let (code, body) = http_get(metrics_addr, "/metrics");
    assert_eq!(code, 200, "/metrics on --listen-metrics-urls: {body}");
    check_metrics("metrics port", &body);
    let (code, body) = http_get(metrics_addr, "/health");
    assert_eq!(code, 200, "/health on the metrics port: {body}");
    assert_eq!(json(&body)["health"], "true", "/health on the metrics port: {body}");
}
