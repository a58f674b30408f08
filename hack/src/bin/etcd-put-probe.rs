//! Failover probe for any etcd v3 server: starts a Put every `--every-ms`, round-robin
//! over the endpoints, each allowed `--timeout-ms`, until one is acknowledged; prints how
//! long after `--since-unix-ns` (say, the moment the leader was killed) that was. Used by
//! hack/bench/etcd-cluster.sh to time leader failover for real etcd and ours alike.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use proto::etcdserverpb::PutRequest;
use proto::etcdserverpb::kv_client::KvClient;
use tonic::transport::Endpoint;

#[derive(Parser, Debug)]
struct Args {
    /// host:port of the servers to write through, comma-separated.
    #[arg(long, alias = "endpoint")]
    endpoints: String,
    /// Start of the measurement in nanoseconds since the Unix epoch (default: now).
    #[arg(long)]
    since_unix_ns: Option<u128>,
    /// Interval between attempts.
    #[arg(long, default_value_t = 10)]
    every_ms: u64,
    /// How long one attempt may take.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 60)]
    give_up_s: u64,
}

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_nanos()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let since = args.since_unix_ns.unwrap_or_else(now_ns);
    let mut clients = Vec::new();
    for ep in args.endpoints.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let ch = Endpoint::from_shared(format!("http://{ep}"))?
            .connect_timeout(Duration::from_millis(500))
            .timeout(Duration::from_millis(args.timeout_ms))
            .connect_lazy();
        clients.push(KvClient::new(ch));
    }
    anyhow::ensure!(!clients.is_empty(), "--endpoints names no server");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tick = tokio::time::interval(Duration::from_millis(args.every_ms.max(1)));
    let mut attempts = 0usize;
    let give_up = tokio::time::sleep(Duration::from_secs(args.give_up_s));
    tokio::pin!(give_up);
    let done = loop {
        tokio::select! {
            Some(at) = rx.recv() => break Some(at),
            _ = &mut give_up => break None,
            _ = tick.tick() => {
                let mut kv = clients[attempts % clients.len()].clone();
                attempts += 1;
                let tx = tx.clone();
                tokio::spawn(async move {
                    let req = PutRequest { key: b"/bench/failover".to_vec(), value: b"p".to_vec(), ..Default::default() };
                    if kv.put(req).await.is_ok() {
                        let _ = tx.send(now_ns());
                    }
                });
            }
        }
    };
    let Some(at) = done else {
        anyhow::bail!("no put succeeded within {} s ({attempts} attempts)", args.give_up_s);
    };
    println!("failover_ms={:.0} attempts={attempts}", at.saturating_sub(since) as f64 / 1e6);
    Ok(())
}
