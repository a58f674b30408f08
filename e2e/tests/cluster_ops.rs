//! Cluster operations beyond raft itself: peers over mutual TLS, and seeding a new
//! cluster from `etcdctl snapshot save` with `etcd snapshot restore`.

use std::process::Command;
use std::time::Duration;

use e2e::cluster::{plan, restore_and_start};
use e2e::pki::Pki;
use e2e::{Etcd, EtcdOptions, json, wait_for};

const LONG: Duration = Duration::from_secs(30);

/// Starts every member of a planned cluster with `opts` for each, then waits for them.
fn start_all(mut members: Vec<Etcd>) -> Vec<Etcd> {
    for m in &mut members {
        m.wait_ready();
    }
    members
}

#[test]
fn peers_talk_over_mutual_tls_and_refuse_certificate_less_clients() {
    let (specs, _) = plan(3);
    let ips: Vec<_> = specs.iter().map(|s| s.ip).collect();
    let pki = Pki::for_ips(&ips);
    let initial = specs
        .iter()
        .map(|s| format!("{}=https://{}:{}", s.name, s.ip, s.peer_port))
        .collect::<Vec<_>>()
        .join(",");
    let members = start_all(
        specs
            .iter()
            .map(|s| {
                Etcd::start(EtcdOptions {
                    ip: Some(s.ip),
                    name: Some(s.name.clone()),
                    client_port: Some(s.client_port),
                    peer_port: Some(s.peer_port),
                    initial_cluster: Some(initial.clone()),
                    peer_tls: Some(pki.server.clone()),
                    no_wait: true,
                    ..Default::default()
                })
            })
            .collect(),
    );
    // Raft works across the TLS links: a write on one member is read on the others.
    members[0].etcdctl_ok(&["put", "tls-key", "over-tls"]);
    for m in &members {
        assert_eq!(m.etcdctl_ok(&["get", "tls-key", "--print-value-only"]), "over-tls\n");
    }
    let listed = members[1].etcdctl_ok(&["member", "list"]);
    assert_eq!(listed.matches("https://").count(), 3, "{listed}");

    // The peer port serves only clients with a certificate from the peer CA.
    let url = format!("https://{}:{}/members", members[2].ip, members[2].peer_port);
    let ca = pki.server.ca.display().to_string();
    let without =
        Command::new("curl").args(["-sS", "--max-time", "5", "--cacert", &ca, &url]).output().unwrap();
    assert!(!without.status.success(), "a peer without a client certificate got in");
    let with = Command::new("curl")
        .args(["-sS", "--max-time", "5", "--cacert", &ca])
        .args(["--cert", &pki.server.client.cert.display().to_string()])
        .args(["--key", &pki.server.client.key.display().to_string(), &url])
        .output()
        .unwrap();
    assert!(with.status.success(), "{}", String::from_utf8_lossy(&with.stderr));
    let body = json(&String::from_utf8_lossy(&with.stdout));
    assert_eq!(body.as_array().map(Vec::len), Some(3), "{body}");
}

#[test]
fn snapshot_restore_seeds_a_new_cluster() {
    let old = Etcd::start(EtcdOptions::default());
    for i in 0..20 {
        old.etcdctl_ok(&["put", &format!("/restore/{i:02}"), &format!("v{i}")]);
    }
    let lease = old.etcdctl_ok(&["lease", "grant", "600"]);
    let lease_id = lease.split_whitespace().nth(1).unwrap().to_string();
    old.etcdctl_ok(&["put", "/restore/leased", "l", &format!("--lease={lease_id}")]);
    old.etcdctl_ok(&["compaction", "10"]);
    let snap = old.dir.path().join("backup.db");
    old.etcdctl_ok(&["snapshot", "save", snap.to_str().unwrap()]);

    let (specs, initial) = plan(3);
    let dirs = tempfile::tempdir().unwrap();
    let members: Vec<Etcd> = specs
        .iter()
        .map(|s| {
            let data_dir = dirs.path().join(&s.name);
            let out = Command::new(e2e::bin("etcd"))
                .args(["snapshot", "restore", snap.to_str().unwrap(), "--name", &s.name])
                .args(["--data-dir", data_dir.to_str().unwrap(), "--initial-cluster", &initial])
                .args(["--initial-advertise-peer-urls", &s.peer_url(), "--initial-cluster-token", "restored"])
                .output()
                .unwrap();
            assert!(out.status.success(), "restore failed: {}", String::from_utf8_lossy(&out.stderr));
            // A second restore into the same dir is refused rather than mixed in.
            let again = Command::new(e2e::bin("etcd"))
                .args(["snapshot", "restore", snap.to_str().unwrap(), "--name", &s.name])
                .args(["--data-dir", data_dir.to_str().unwrap(), "--initial-cluster", &initial])
                .args(["--initial-advertise-peer-urls", &s.peer_url()])
                .output()
                .unwrap();
            assert!(!again.status.success());
            Etcd::start(EtcdOptions {
                ip: Some(s.ip),
                name: Some(s.name.clone()),
                client_port: Some(s.client_port),
                peer_port: Some(s.peer_port),
                initial_cluster: Some(initial.clone()),
                extra_args: vec!["--initial-cluster-token".into(), "restored".into()],
                data_dir: Some(data_dir),
                no_wait: true,
                ..Default::default()
            })
        })
        .collect();
    let members = start_all(members);
    for m in &members {
        let keys = m.etcdctl_ok(&["get", "/restore/", "--prefix", "--keys-only", "--consistency=s"]);
        assert_eq!(keys.lines().filter(|l| !l.is_empty()).count(), 21, "{}: {keys}", m.name);
        assert_eq!(m.etcdctl_ok(&["get", "/restore/07", "--print-value-only"]), "v7\n");
    }
    // The lease came along with its key; the old cluster's membership did not.
    let ttl = members[1].etcdctl_ok(&["lease", "timetolive", &lease_id, "--keys"]);
    assert!(ttl.contains("granted with TTL(600s)") && ttl.contains("/restore/leased"), "{ttl}");
    let listed = members[0].etcdctl_ok(&["member", "list"]);
    assert_eq!(listed.lines().count(), 3, "{listed}");
    assert!(!listed.contains(&old.peer_url()), "{listed}");
    // History below the compaction stays compacted; the new cluster keeps writing.
    let err = members[0].etcdctl(&["get", "/restore/00", "--rev=5"]);
    assert!(String::from_utf8_lossy(&err.stderr).contains("compacted"));
    members[2].etcdctl_ok(&["put", "/restore/new", "after"]);
    wait_for("the new write on every member", LONG, Duration::from_millis(100), || {
        members
            .iter()
            .all(|m| m.etcdctl_ok(&["get", "/restore/new", "--consistency=s"]).contains("after"))
            .then_some(())
    });
}

/// Snapshots in etcd's own layout (a bbolt database and its sha256), both ways: ours is
/// read by Debian's `etcdctl snapshot status` and restored by `etcdctl snapshot restore`
/// into a data dir that upstream etcd runs; upstream's is restored by our `etcd snapshot
/// restore`. Keys, values, leases and revisions survive each way.
#[test]
fn snapshots_move_between_upstream_etcd_and_ours() {
    for (from, to) in [(e2e::Flavor::Ours, e2e::Flavor::Real), (e2e::Flavor::Real, e2e::Flavor::Ours)] {
        let old = Etcd::start(EtcdOptions { flavor: from, ..Default::default() });
        for i in 0..300 {
            old.etcdctl_ok(&["put", &format!("/move/{i:03}"), &format!("value-{i}-{}", "x".repeat(i % 50))]);
        }
        old.etcdctl_ok(&["put", "/move/007", "rewritten"]);
        old.etcdctl_ok(&["del", "/move/299"]);
        let lease = old.etcdctl_ok(&["lease", "grant", "900"]);
        let lease_id = lease.split_whitespace().nth(1).unwrap().to_string();
        old.etcdctl_ok(&["put", "/move/leased", "l", &format!("--lease={lease_id}")]);
        let rev =
            json(&old.etcdctl_ok(&["endpoint", "status", "-w", "json"]))[0]["Status"]["header"]["revision"]
                .as_i64()
                .unwrap();
        let snap = old.dir.path().join("backup.db");
        old.etcdctl_ok(&["snapshot", "save", snap.to_str().unwrap()]);

        // Upstream's tool reads the file: the revision, and every key of every bucket.
        let status = json(&old.etcdctl_ok(&["snapshot", "status", snap.to_str().unwrap(), "-w", "json"]));
        assert_eq!(status["revision"].as_i64(), Some(rev), "{from:?}: {status}");
        assert!(status["totalKey"].as_i64().unwrap() >= 302, "{from:?}: {status}");

        let new = restore_and_start(to, &snap, None);
        let what = format!("{from:?} snapshot restored into {to:?}");
        let keys = new.etcdctl_ok(&["get", "/move/", "--prefix", "--keys-only"]);
        assert_eq!(keys.lines().filter(|l| !l.is_empty()).count(), 300, "{what}: {keys}");
        assert_eq!(new.etcdctl_ok(&["get", "/move/007", "--print-value-only"]), "rewritten\n", "{what}");
        assert_eq!(
            new.etcdctl_ok(&["get", "/move/120", "--print-value-only"]),
            format!("value-120-{}\n", "x".repeat(20))
        );
        let got = json(&new.etcdctl_ok(&["get", "/move/007", "-w", "json"]));
        assert_eq!(got["kvs"][0]["version"], 2, "{what}: {got}");
        let ttl = new.etcdctl_ok(&["lease", "timetolive", &lease_id, "--keys"]);
        assert!(ttl.contains("granted with TTL(900s)") && ttl.contains("/move/leased"), "{what}: {ttl}");
        // The revision goes on from where the old cluster was.
        new.etcdctl_ok(&["put", "/move/after", "x"]);
        let after = json(&new.etcdctl_ok(&["get", "/move/after", "-w", "json"]));
        assert!(after["kvs"][0]["mod_revision"].as_i64().unwrap() > rev, "{what}: {after} after {rev}");
    }
}
