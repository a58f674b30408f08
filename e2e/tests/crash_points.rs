//! Crashes at exactly the crash-sensitive steps of the raft loop, through the server's
//! failpoints (FAILPOINTS): before and after persisting entries, before and after
//! applying them. The member exits at that step while writers run; after a restart every
//! acknowledged write is there with its revision, and revisions have no holes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use e2e::{Etcd, EtcdOptions};
use proto::etcdserverpb::kv_client::KvClient;
use proto::etcdserverpb::{PutRequest, RangeRequest};
use tonic::transport::Endpoint;

const WRITERS: usize = 6;

/// Acknowledged puts: (key, revision of the put).
type Acked = Vec<(Vec<u8>, i64)>;

/// Writes from several tasks until the server goes away; returns the acknowledged
/// (key, revision) pairs.
fn write_until_crash(etcd: &Etcd) -> Vec<(Vec<u8>, i64)> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let addr = etcd.client_addr();
    let acked: Arc<Mutex<Acked>> = Arc::default();
    rt.block_on(async {
        let ch = Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .timeout(Duration::from_secs(5))
            .connect_lazy();
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let mut client = KvClient::new(ch.clone());
            let acked = acked.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0.. {
                    let key = format!("/crash/{w}/{i:06}").into_bytes();
                    let req = PutRequest { key: key.clone(), value: key.clone(), ..Default::default() };
                    match client.put(req).await {
                        Ok(r) => acked.lock().unwrap().push((key, r.into_inner().header.unwrap().revision)),
                        Err(_) => return,
                    }
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
    Arc::try_unwrap(acked).unwrap().into_inner().unwrap()
}

fn read_all(etcd: &Etcd) -> HashMap<Vec<u8>, (i64, i64)> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let ch = Endpoint::from_shared(format!("http://{}", etcd.client_addr())).unwrap().connect_lazy();
        let mut client = KvClient::new(ch).max_decoding_message_size(256 << 20);
        let resp = client
            .range(RangeRequest {
                key: b"/crash/".to_vec(),
                range_end: b"/crash0".to_vec(),
                ..Default::default()
            })
            .await
            .expect("range after restart")
            .into_inner();
        resp.kvs.into_iter().map(|kv| (kv.key, (kv.mod_revision, kv.version))).collect()
    })
}

fn crash_at(failpoint: &str) {
    // Off for the first 150 passes, then the step fails and the member exits, mid-load.
    let spec = format!("{failpoint}=150*off->return");
    let mut etcd = Etcd::start(EtcdOptions { env: vec![("FAILPOINTS".into(), spec)], ..Default::default() });
    let acked = write_until_crash(&etcd);
    let code = etcd.wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(2), "the member should exit at failpoint {failpoint}:\n{}", etcd.log_tail(20));
    assert!(etcd.log_tail(5).contains(&format!("failpoint {failpoint}")), "{}", etcd.log_tail(10));
    assert!(acked.len() > 50, "only {} puts were acknowledged before {failpoint}", acked.len());

    etcd.env.clear();
    etcd.restart();
    let stored = read_all(&etcd);
    for (key, rev) in &acked {
        let got = stored.get(key);
        assert_eq!(
            got.map(|g| g.0),
            Some(*rev),
            "acknowledged {} lost or changed after a crash at {failpoint}",
            String::from_utf8_lossy(key)
        );
    }
    // Every stored put (acknowledged or not) has its own revision, and together they fill
    // the range from the first one without holes.
    let mut revs: Vec<i64> = stored.values().map(|v| v.0).collect();
    revs.sort_unstable();
    revs.dedup();
    assert_eq!(revs.len(), stored.len(), "two keys share a revision");
    let (first, last) = (revs[0], *revs.last().unwrap());
    assert_eq!((last - first + 1) as usize, revs.len(), "holes in the revisions {first}..={last}");
    assert!(stored.len() >= acked.len());
    assert!(stored.len() <= acked.len() + WRITERS, "more unacknowledged writes than writers");
}

#[test]
fn crash_before_persisting_entries() {
    crash_at("raft_before_save");
}

#[test]
fn crash_after_persisting_entries() {
    crash_at("raft_after_save");
}

#[test]
fn crash_before_applying() {
    crash_at("raft_before_apply");
}

#[test]
fn crash_after_applying() {
    crash_at("raft_after_apply");
}
