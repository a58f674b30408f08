//! Power loss: etcd members whose data dirs are on `lazyfs` disks (`e2e::lazyfs`), which
//! keep written-but-not-fsynced data only in memory. Under load, a member is killed and its
//! disk loses power (the unsynced data is dropped), then both come back. Every write the
//! cluster acknowledged must still be there with its revision, and the revisions of all
//! stored writes must have no hole. Killing processes alone (`crash_points.rs`) cannot show
//! this: the page cache survives a `kill -9`, so an etcd that never fsyncs would pass.
//!
//! `without_fsync_a_power_cut_loses_acknowledged_writes` runs the same cycle against
//! `--unsafe-no-fsync` (the backend's sync switched off) and requires that writes are lost:
//! the proof that the other tests can fail.
//!
//! Environment: POWER_LOSS_CYCLES (power cuts per test, default 3), POWER_LOSS_SEED.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use e2e::lazyfs::LazyDisk;
use e2e::{Etcd, EtcdOptions};
use proto::etcdserverpb::kv_client::KvClient;
use proto::etcdserverpb::{PutRequest, RangeRequest};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tonic::transport::Endpoint;

const WRITERS: usize = 6;
const PREFIX: &[u8] = b"/power/";
const PREFIX_END: &[u8] = b"/power0";

/// Acknowledged puts: (key, revision of the put).
type Acked = Vec<(Vec<u8>, i64)>;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn rng() -> StdRng {
    let seed = env_or("POWER_LOSS_SEED", rand::random::<u64>());
    eprintln!("POWER_LOSS_SEED={seed}");
    StdRng::seed_from_u64(seed)
}

/// Writers putting fresh keys (each key is written once) until stopped. A put that fails
/// is not retried with the same key: its outcome is unknown, and a later success must not
/// be mistaken for it.
struct Load {
    acked: Arc<Mutex<Acked>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Load {
    /// Writer `w` talks to `endpoints[w % len]`; keys are `/power/<round>/<w>/<i>`.
    fn start(endpoints: Vec<SocketAddr>, round: usize) -> Load {
        let acked: Arc<Mutex<Acked>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (a, s) = (acked.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let rt = e2e::runtime();
            rt.block_on(async move {
                let mut tasks = Vec::new();
                for w in 0..WRITERS {
                    let addr = endpoints[w % endpoints.len()];
                    let ch = Endpoint::from_shared(format!("http://{addr}"))
                        .expect("endpoint")
                        .connect_timeout(Duration::from_secs(1))
                        .timeout(Duration::from_secs(5))
                        .connect_lazy();
                    let mut client = KvClient::new(ch);
                    let (acked, stop) = (a.clone(), s.clone());
                    tasks.push(tokio::spawn(async move {
                        for i in 0.. {
                            if stop.load(Ordering::Relaxed) {
                                return;
                            }
                            let key = format!("/power/{round:03}/{w}/{i:07}").into_bytes();
                            let req =
                                PutRequest { key: key.clone(), value: key.clone(), ..Default::default() };
                            match client.put(req).await {
                                Ok(r) => {
                                    let rev = r.into_inner().header.expect("response header").revision;
                                    acked.lock().unwrap().push((key, rev));
                                }
                                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                            }
                        }
                    }));
                }
                for t in tasks {
                    let _ = t.await;
                }
            });
        });
        Load { acked, stop, thread: Some(thread) }
    }

    fn count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Waits until at least `n` puts were acknowledged in all.
    fn wait_for(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.count() < n {
            assert!(Instant::now() < deadline, "only {} of {n} puts acknowledged after 60s", self.count());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops the writers; returns what was acknowledged.
    fn finish(mut self) -> Acked {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("load thread");
        }
        std::mem::take(&mut *self.acked.lock().unwrap())
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Every stored `/power/` key with (mod revision, version), read linearizably from `etcd`.
fn read_all(etcd: &Etcd) -> HashMap<Vec<u8>, (i64, i64)> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let ch = Endpoint::from_shared(format!("http://{}", etcd.client_addr())).unwrap().connect_lazy();
        let mut client = KvClient::new(ch).max_decoding_message_size(256 << 20);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let req =
                RangeRequest { key: PREFIX.to_vec(), range_end: PREFIX_END.to_vec(), ..Default::default() };
            match client.range(req).await {
                Ok(r) => {
                    return r
                        .into_inner()
                        .kvs
                        .into_iter()
                        .map(|kv| (kv.key, (kv.mod_revision, kv.version)))
                        .collect();
                }
                // A restarted member may still be catching up or electing.
                Err(e) if Instant::now() < deadline => {
                    eprintln!("range on {}: {e}; retrying", etcd.name);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("range on {} after the power cut: {e}", etcd.name),
            }
        }
    })
}

/// The acknowledged writes that are missing or changed in `stored`.
fn lost(stored: &HashMap<Vec<u8>, (i64, i64)>, acked: &Acked) -> Vec<String> {
    acked
        .iter()
        .filter(|(key, rev)| stored.get(key).map(|s| s.0) != Some(*rev))
        .map(|(key, rev)| {
            format!(
                "{} (acknowledged at revision {rev}, stored {:?})",
                String::from_utf8_lossy(key),
                stored.get(key)
            )
        })
        .collect()
}

/// No acknowledged write lost, each key written once, and the revisions of everything
/// stored (acknowledged or not) contiguous from the first put on.
fn check(stored: &HashMap<Vec<u8>, (i64, i64)>, acked: &Acked, what: &str) {
    let lost = lost(stored, acked);
    assert!(
        lost.is_empty(),
        "{what}: {} of {} acknowledged writes lost, e.g. {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(5)]
    );
    assert!(stored.values().all(|(_, version)| *version == 1), "{what}: a key was written twice");
    let mut revs: Vec<i64> = stored.values().map(|v| v.0).collect();
    revs.sort_unstable();
    revs.dedup();
    assert_eq!(revs.len(), stored.len(), "{what}: two keys share a revision");
    // Only puts of fresh keys ever ran, from revision 2 (the first write) on.
    let last = *revs.last().expect("something stored");
    assert_eq!(revs[0], 2, "{what}: the first put's revision is missing");
    assert_eq!((last - 1) as usize, revs.len(), "{what}: holes in the revisions 2..={last}");
}

fn member_on(disk: &LazyDisk, extra_args: &[&str]) -> Etcd {
    Etcd::start(EtcdOptions {
        data_dir: Some(disk.path().join("etcd")),
        extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    })
}

#[test]
fn single_member_keeps_every_acknowledged_write_across_power_cuts() {
    let mut rng = rng();
    let mut disk = LazyDisk::new();
    let mut etcd = member_on(&disk, &[]);
    let mut acked = Acked::new();
    for round in 0..env_or("POWER_LOSS_CYCLES", 3) {
        let load = Load::start(vec![etcd.client_addr()], round);
        load.wait_for(rng.random_range(100..600));
        // The power goes out under load: the process dies, then its disk forgets.
        etcd.kill9();
        disk.power_cut();
        acked.extend(load.finish());
        etcd.restart();
        check(&read_all(&etcd), &acked, &format!("after power cut {}", disk.power_cuts));
    }
    eprintln!("{} power cuts survived, {} acknowledged writes kept", disk.power_cuts, acked.len());
}

#[test]
fn without_fsync_a_power_cut_loses_acknowledged_writes() {
    let mut disk = LazyDisk::new();
    let mut etcd = member_on(&disk, &["--unsafe-no-fsync"]);
    let load = Load::start(vec![etcd.client_addr()], 0);
    load.wait_for(300);
    etcd.kill9();
    disk.power_cut();
    let acked = load.finish();
    etcd.respawn();
    // Without fsync the member may not even find a usable database after the cut: either
    // way, acknowledged writes must be gone, or the other tests here prove nothing.
    let deadline = Instant::now() + Duration::from_secs(30);
    let healthy = loop {
        if !etcd.is_running() {
            break false;
        }
        if etcd.etcdctl(&["endpoint", "health", "--command-timeout=2s"]).status.success() {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let missing = if healthy { lost(&read_all(&etcd), &acked).len() } else { acked.len() };
    eprintln!(
        "--unsafe-no-fsync: {missing} of {} acknowledged writes lost (member healthy: {healthy})",
        acked.len()
    );
    assert!(
        missing > 0,
        "no acknowledged write was lost without fsync: the power cut did not drop unsynced data"
    );
}

#[test]
fn three_members_keep_every_acknowledged_write_across_power_cuts() {
    let mut rng = rng();
    let mut disks: Vec<LazyDisk> = (0..3).map(|_| LazyDisk::new()).collect();
    let (specs, initial) = e2e::cluster::plan(3);
    let mut members: Vec<Etcd> = specs
        .iter()
        .zip(&disks)
        .map(|(s, disk)| {
            Etcd::start(EtcdOptions { data_dir: Some(disk.path().join("etcd")), ..s.options(&initial) })
        })
        .collect();
    members.iter_mut().for_each(Etcd::wait_ready);
    let endpoints: Vec<SocketAddr> = members.iter().map(Etcd::client_addr).collect();
    let mut acked = Acked::new();
    for round in 0..env_or("POWER_LOSS_CYCLES", 3) {
        let load = Load::start(endpoints.clone(), round);
        let before = rng.random_range(100..600);
        load.wait_for(before);
        // Even rounds: the whole cluster loses power at once. Odd rounds: one member does,
        // and the others go on taking writes before it comes back.
        let victims: Vec<usize> = if round % 2 == 0 { vec![0, 1, 2] } else { vec![rng.random_range(0..3)] };
        for &v in &victims {
            members[v].kill9();
        }
        for &v in &victims {
            disks[v].power_cut();
        }
        if victims.len() == 1 {
            load.wait_for(load.count() + 100);
        }
        acked.extend(load.finish());
        for &v in &victims {
            members[v].respawn();
        }
        members.iter_mut().for_each(Etcd::wait_ready);
        for m in &members {
            check(
                &read_all(m),
                &acked,
                &format!("member {} after round {round} (lost power: {victims:?})", m.name),
            );
        }
    }
    let cuts: usize = disks.iter().map(|d| d.power_cuts).sum();
    eprintln!("{cuts} member power cuts survived, {} acknowledged writes kept", acked.len());
}
