//! Real `etcdctl` 3.4 (Debian's etcd-client) against the project's etcd: every command
//! of the acceptance list, checked on what etcdctl prints.

use std::time::Duration;

use e2e::{Etcd, EtcdOptions, Flavor};
use serde_json::Value;

fn etcd() -> Etcd {
    Etcd::start(EtcdOptions::default())
}

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

fn b64(s: &str) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, &x)| acc | (u32::from(x) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

const LONG: Duration = Duration::from_secs(30);

#[test]
fn put_get_ranges_sorting_history_and_json() {
    let e = etcd();
    assert_eq!(e.etcdctl_ok(&["put", "/k/a", "1"]), "OK\n");
    e.etcdctl_ok(&["put", "/k/b", "2"]);
    e.etcdctl_ok(&["put", "/k/c", "3"]);
    e.etcdctl_ok(&["put", "/k/a", "4"]);

    assert_eq!(e.etcdctl_ok(&["get", "/k/a"]), "/k/a\n4\n");
    assert_eq!(e.etcdctl_ok(&["get", "/k/a", "--rev=2"]), "/k/a\n1\n", "history at revision 2");
    assert_eq!(e.etcdctl_ok(&["get", "/k/", "--prefix", "--keys-only"]), "/k/a\n\n/k/b\n\n/k/c\n\n");
    assert_eq!(e.etcdctl_ok(&["get", "/k/", "--prefix", "--limit=2", "--print-value-only"]), "4\n2\n");
    assert_eq!(
        e.etcdctl_ok(&[
            "get",
            "/k/",
            "--prefix",
            "--sort-by=MODIFY",
            "--order=DESCEND",
            "--print-value-only"
        ]),
        "4\n3\n2\n"
    );
    assert_eq!(e.etcdctl_ok(&["get", "/k/b", "/k/d", "--print-value-only"]), "2\n3\n", "[key, range_end)");
    assert_eq!(e.etcdctl_ok(&["get", "/k/b", "--from-key", "--keys-only"]), "/k/b\n\n/k/c\n\n");

    let j = json(&e.etcdctl_ok(&["get", "/k/", "--prefix", "--limit=1", "-w", "json"]));
    assert_eq!(j["count"], 3);
    assert_eq!(j["more"], true);
    assert_eq!(j["header"]["revision"], 5);
    assert!(
        j["header"]["cluster_id"].as_u64().unwrap() > 0 && j["header"]["member_id"].as_u64().unwrap() > 0
    );
    let kv = &j["kvs"][0];
    assert_eq!(kv["key"], b64("/k/a"));
    assert_eq!(
        (kv["create_revision"].as_i64(), kv["mod_revision"].as_i64(), kv["version"].as_i64()),
        (Some(2), Some(5), Some(2))
    );

    let err = e.etcdctl(&["get", "/k/a", "--rev=99"]);
    assert!(
        String::from_utf8_lossy(&err.stderr)
            .contains("etcdserver: mvcc: required revision is a future revision")
    );
}

#[test]
fn delete_with_prev_kv_and_txn_from_stdin() {
    let e = etcd();
    e.etcdctl_ok(&["put", "/d/1", "one"]);
    e.etcdctl_ok(&["put", "/d/2", "two"]);
    assert_eq!(e.etcdctl_ok(&["del", "/d/1", "--prev-kv"]), "1\n/d/1\none\n");
    assert_eq!(e.etcdctl_ok(&["del", "/d/nothing"]), "0\n");

    let script = "mod(\"/d/2\") > \"0\"\nvalue(\"/d/2\") = \"two\"\n\nput /d/3 three\nget /d/2\ndel /d/2\n\nput /d/failed x\n\n";
    let out = e.etcdctl_stdin(&["txn"], script.as_bytes());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "SUCCESS\n\nOK\n\n/d/2\ntwo\n\n1\n");

    let out = e.etcdctl_stdin(&["txn", "-w", "json"], b"value(\"/d/3\") = \"nope\"\n\n\nput /d/f y\n\n");
    let j = json(&String::from_utf8_lossy(&out.stdout));
    // Go's JSON omits a false `succeeded`.
    assert_ne!(j["succeeded"], true, "{j}");
    assert_eq!(e.etcdctl_ok(&["get", "/d/f", "--print-value-only"]), "y\n");
    assert_eq!(e.etcdctl_ok(&["get", "/d/failed"]), "");

    let dup = e.etcdctl_stdin(&["txn"], b"\nput /d/x 1\nput /d/x 2\n\n\n");
    assert!(String::from_utf8_lossy(&dup.stderr).contains("etcdserver: duplicate key given in txn request"));
}

#[test]
fn watch_replays_history_then_streams_live_events() {
    let e = etcd();
    e.etcdctl_ok(&["put", "/w/a", "1"]);
    e.etcdctl_ok(&["put", "/w/b", "2"]);
    e.etcdctl_ok(&["del", "/w/a"]);
    e.etcdctl_ok(&["put", "/other", "x"]);
    let mut watch = e.etcdctl_spawn(&["watch", "--prefix", "/w", "--rev=1"]);
    let history = watch.read_lines(9, LONG).to_vec();
    assert_eq!(history, ["PUT", "/w/a", "1", "PUT", "/w/b", "2", "DELETE", "/w/a", ""]);
    e.etcdctl_ok(&["put", "/w/c", "3"]);
    e.etcdctl_ok(&["put", "/not-watched", "3"]);
    e.etcdctl_ok(&["put", "/w/a", "again"]);
    let live = watch.read_lines(15, LONG)[9..].to_vec();
    assert_eq!(live, ["PUT", "/w/c", "3", "PUT", "/w/a", "again"]);

    // prev-kv shows what a put replaced.
    let mut prev = e.etcdctl_spawn(&["watch", "/w/a", "--prev-kv"]);
    // The watch is registered once etcdctl reads the created response; retry the write
    // until the event shows up.
    let lines = e2e::wait_for("a prev-kv event", LONG, Duration::from_millis(200), || {
        e.etcdctl_ok(&["put", "/w/a", "latest"]);
        prev.read_lines_within(5, Duration::from_millis(500)).map(<[String]>::to_vec)
    });
    assert_eq!(lines[0], "PUT");
    assert_eq!(lines[1], "/w/a");
    assert_eq!(lines[3], "/w/a");
    assert_eq!(lines[4], "latest");
}

#[test]
fn leases_grant_keepalive_timetolive_list_revoke() {
    let e = etcd();
    let out = e.etcdctl_ok(&["lease", "grant", "60"]);
    // "lease 694d77aa9e38260f granted with TTL(60s)"
    let id = out.split_whitespace().nth(1).expect("lease id").to_string();
    assert!(out.ends_with("granted with TTL(60s)\n"), "{out}");
    e.etcdctl_ok(&["put", "/l/1", "v", &format!("--lease={id}")]);
    e.etcdctl_ok(&["put", "/l/2", "v", &format!("--lease={id}")]);

    let ttl = e.etcdctl_ok(&["lease", "timetolive", &id, "--keys"]);
    assert!(ttl.starts_with(&format!("lease {id} granted with TTL(60s), remaining(")), "{ttl}");
    assert!(ttl.contains("attached keys([/l/1 /l/2])"), "{ttl}");
    assert!(e.etcdctl_ok(&["lease", "list"]).contains(&id));

    let mut ka = e.etcdctl_spawn(&["lease", "keep-alive", &id]);
    assert_eq!(ka.read_lines(1, LONG)[0], format!("lease {id} keepalived with TTL(60)"));
    drop(ka);

    assert_eq!(e.etcdctl_ok(&["lease", "revoke", &id]), format!("lease {id} revoked\n"));
    assert_eq!(e.etcdctl_ok(&["get", "/l/", "--prefix"]), "", "keys go with their lease");
    assert_eq!(e.etcdctl_ok(&["lease", "timetolive", &id]), format!("lease {id} already expired\n"));
    let err = e.etcdctl(&["lease", "revoke", &id]);
    assert!(String::from_utf8_lossy(&err.stderr).contains("etcdserver: requested lease not found"));
    let err = e.etcdctl(&["put", "/l/3", "v", &format!("--lease={id}")]);
    assert!(String::from_utf8_lossy(&err.stderr).contains("etcdserver: requested lease not found"));
}

#[test]
fn expired_leases_delete_their_keys() {
    let e = etcd();
    let out = e.etcdctl_ok(&["lease", "grant", "1"]);
    let id = out.split_whitespace().nth(1).unwrap().to_string();
    // The minimum TTL (1.5 election timeouts, rounded up) is granted instead of 1s.
    assert!(out.contains("TTL(2s)"), "{out}");
    e.etcdctl_ok(&["put", "/exp", "v", &format!("--lease={id}")]);
    e2e::wait_for("the lease to expire", LONG, Duration::from_millis(200), || {
        e.etcdctl_ok(&["get", "/exp"]).is_empty().then_some(())
    });
    assert!(!e.etcdctl_ok(&["lease", "list"]).contains(&id));
}

#[test]
fn compaction_and_defrag() {
    let e = etcd();
    for i in 0..20 {
        e.etcdctl_ok(&["put", "/c/k", &i.to_string()]);
    }
    assert_eq!(e.etcdctl_ok(&["compaction", "15"]), "compacted revision 15\n");
    let err = e.etcdctl(&["get", "/c/k", "--rev=10"]);
    assert!(
        String::from_utf8_lossy(&err.stderr)
            .contains("etcdserver: mvcc: required revision has been compacted")
    );
    assert_eq!(e.etcdctl_ok(&["get", "/c/k", "--rev=15", "--print-value-only"]), "13\n");
    assert_eq!(e.etcdctl_ok(&["compaction", "--physical", "18"]), "compacted revision 18\n");
    let err = e.etcdctl(&["compaction", "16"]);
    assert!(String::from_utf8_lossy(&err.stderr).contains("required revision has been compacted"));
    let out = e.etcdctl_ok(&["defrag"]);
    assert!(out.starts_with("Finished defragmenting etcd member["), "{out}");
    assert_eq!(e.etcdctl_ok(&["get", "/c/k", "--print-value-only"]), "19\n");
    let hash = json(&e.etcdctl_ok(&["endpoint", "hashkv", "-w", "json"]));
    assert_eq!(hash[0]["HashKV"]["compact_revision"], 18);
}

#[test]
fn status_health_hashkv_alarms_members() {
    let e = etcd();
    e.etcdctl_ok(&["put", "a", "b"]);
    let table = e.etcdctl_ok(&["endpoint", "status", "-w", "table"]);
    for col in [
        "ENDPOINT",
        "ID",
        "VERSION",
        "DB SIZE",
        "IS LEADER",
        "IS LEARNER",
        "RAFT TERM",
        "RAFT INDEX",
        "RAFT APPLIED INDEX",
        "ERRORS",
    ] {
        assert!(table.contains(col), "{col} missing from\n{table}");
    }
    assert!(table.contains("3.4.23") && table.contains("true") && table.contains("false"), "{table}");
    let st = json(&e.etcdctl_ok(&["endpoint", "status", "-w", "json"]));
    let s = &st[0]["Status"];
    assert_eq!(s["leader"], s["header"]["member_id"], "a single member leads");
    assert!(s["raftIndex"].as_u64().unwrap() >= 2);
    assert!(s["dbSize"].as_i64().unwrap() > 0);

    let health = e.etcdctl(&["endpoint", "health"]);
    assert!(health.status.success());
    assert!(String::from_utf8_lossy(&health.stderr).contains("is healthy: successfully committed proposal"));

    let h1 = e.etcdctl_ok(&["endpoint", "hashkv"]);
    let h2 = e.etcdctl_ok(&["endpoint", "hashkv"]);
    assert_eq!(h1, h2, "hash is stable");
    e.etcdctl_ok(&["put", "a", "c"]);
    assert_ne!(h1, e.etcdctl_ok(&["endpoint", "hashkv"]), "hash follows the data");

    assert_eq!(e.etcdctl_ok(&["alarm", "list"]), "");
    let members = e.etcdctl_ok(&["member", "list"]);
    let fields: Vec<&str> = members.trim().split(", ").collect();
    assert_eq!(fields.len(), 6, "{members}");
    assert_eq!((fields[1], fields[2]), ("started", "test"));
    assert_eq!(fields[3], format!("http://{}:{}", e.ip, e.peer_port));
    assert_eq!(fields[4], e.endpoint());
    assert_eq!(fields[5], "false");
}

#[test]
fn snapshot_save_writes_a_checksummed_file() {
    let e = etcd();
    for i in 0..50 {
        e.etcdctl_ok(&["put", &format!("/s/{i}"), &"x".repeat(100)]);
    }
    let path = e.dir.path().join("snap.db");
    let out = e.etcdctl_ok(&["snapshot", "save", path.to_str().unwrap()]);
    assert_eq!(out, format!("Snapshot saved at {}\n", path.display()));
    let data = std::fs::read(&path).unwrap();
    assert!(data.len() > 5000);
    // etcd's convention, which `snapshot restore` checks: 512-byte pages plus a sha256.
    assert_eq!(data.len() % 512, 32);
}

#[test]
fn lock_is_exclusive_and_released() {
    let e = etcd();
    let mut holder = e.etcdctl_spawn(&["lock", "mylock"]);
    let key = holder.read_lines(1, LONG)[0].clone();
    assert!(key.starts_with("mylock/"), "{key}");

    // While held, a second locker runs its command only after the holder lets go.
    let mut waiter = e.etcdctl_spawn(&["lock", "mylock", "echo", "second-got-it"]);
    assert!(waiter.read_lines_within(1, Duration::from_secs(2)).is_none(), "the lock is held");
    holder.signal(nix::sys::signal::Signal::SIGINT);
    assert_eq!(waiter.read_lines(1, LONG)[0], "second-got-it");
    let (code, _) = waiter.wait(LONG);
    assert_eq!(code, Some(0));
}

#[test]
fn elect_campaigns_and_observers_see_the_leader() {
    let e = etcd();
    let mut leader = e.etcdctl_spawn(&["elect", "myelection", "p1"]);
    let lines = leader.read_lines(2, LONG).to_vec();
    assert!(lines[0].starts_with("myelection/"));
    assert_eq!(lines[1], "p1");
    let mut observer = e.etcdctl_spawn(&["elect", "-l", "myelection"]);
    assert_eq!(observer.read_lines(2, LONG)[1], "p1");
    let mut second = e.etcdctl_spawn(&["elect", "myelection", "p2"]);
    assert!(second.read_lines_within(1, Duration::from_secs(2)).is_none(), "p1 still leads");
    leader.signal(nix::sys::signal::Signal::SIGINT);
    assert_eq!(second.read_lines(2, LONG)[1], "p2");
    assert_eq!(observer.read_lines(4, LONG)[3], "p2", "the observer follows the new leader");
}

#[test]
fn make_mirror_from_real_etcd_to_ours() {
    let real = Etcd::start(EtcdOptions { flavor: Flavor::Real, ..Default::default() });
    let ours = etcd();
    for i in 0..30 {
        real.etcdctl_ok(&["put", &format!("/mm/{i:02}"), &format!("v{i}")]);
    }
    real.etcdctl_ok(&["put", "/elsewhere", "no"]);
    let _mirror = real.etcdctl_spawn(&["make-mirror", "--prefix", "/mm", &ours.endpoint()]);
    e2e::wait_for("the base copy", LONG, Duration::from_millis(100), || {
        (ours.etcdctl_ok(&["get", "/mm", "--prefix", "--keys-only", "-w", "json"]).contains("\"count\":30"))
            .then_some(())
    });
    // Live updates follow through the source's watch: puts and deletes.
    real.etcdctl_ok(&["put", "/mm/new", "fresh"]);
    real.etcdctl_ok(&["del", "/mm/00"]);
    e2e::wait_for("live updates", LONG, Duration::from_millis(100), || {
        let new = ours.etcdctl_ok(&["get", "/mm/new", "--print-value-only"]);
        let gone = ours.etcdctl_ok(&["get", "/mm/00"]);
        (new == "fresh\n" && gone.is_empty()).then_some(())
    });
    assert_eq!(ours.etcdctl_ok(&["get", "/elsewhere"]), "", "only the prefix is mirrored");
    assert_eq!(ours.etcdctl_ok(&["get", "/mm/07", "--print-value-only"]), "v7\n");
}

#[test]
fn check_datascale_small_passes() {
    let e = etcd();
    let out = e.etcdctl_ok(&["check", "datascale", "--load=s"]);
    assert!(out.contains("PASS: Approximate system memory used"), "{out}");
}

#[test]
fn check_perf_small_passes() {
    let e = etcd();
    let out = e.etcdctl_ok(&["check", "perf", "--load=s"]);
    let tail: Vec<&str> = out.lines().rev().take(4).collect();
    assert_eq!(tail[0], "PASS", "{out}");
    assert!(tail[3].contains("PASS: Throughput is"), "{out}");
}

#[test]
fn periodic_auto_compaction_compacts_old_history() {
    let e = Etcd::start(EtcdOptions {
        extra_args: vec!["--auto-compaction-mode=periodic".into(), "--auto-compaction-retention=1s".into()],
        ..Default::default()
    });
    // Keep writing; after the retention period the revision from a second ago is compacted.
    let compacted = e2e::wait_for("an automatic compaction", LONG, Duration::from_millis(100), || {
        e.etcdctl_ok(&["put", "/auto/k", "v"]);
        let hash = json(&e.etcdctl_ok(&["endpoint", "hashkv", "-w", "json"]));
        let rev = hash[0]["HashKV"]["compact_revision"].as_i64().unwrap_or(-1);
        (rev > 1).then_some(rev)
    });
    let err = e.etcdctl(&["get", "/auto/k", &format!("--rev={}", compacted - 1)]);
    assert!(String::from_utf8_lossy(&err.stderr).contains("required revision has been compacted"));
}

#[test]
fn unknown_and_unimplemented_flags_are_refused() {
    let out = std::process::Command::new(e2e::bin("etcd")).args(["--wal-dir", "/tmp/x"]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--wal-dir"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = std::process::Command::new(e2e::bin("etcd"))
        .args(["--auto-compaction-mode", "weekly", "--auto-compaction-retention", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("auto-compaction-mode"));
}
