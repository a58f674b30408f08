//! Read benchmark for any etcd v3 server: preloads keys, then runs concurrent Range
//! requests (linearizable or serializable) for a fixed time and prints throughput and
//! latency percentiles. Used by hack/bench/etcd.sh and hack/bench/etcd-cluster.sh against
//! real etcd and ours alike. Given several endpoints (comma-separated), the connections
//! are spread over them round-robin, so every member of a cluster serves reads. With
//! `--user`, it authenticates once and sends the token with every request (auth enabled).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use proto::etcdserverpb::auth_client::AuthClient;
use proto::etcdserverpb::kv_client::KvClient;
use proto::etcdserverpb::{AuthenticateRequest, PutRequest, RangeRequest};
use tonic::metadata::AsciiMetadataValue;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

#[derive(Parser, Debug)]
struct Args {
    /// host:port of the server, or several, comma-separated (the members of a cluster).
    #[arg(long, alias = "endpoints")]
    endpoint: String,
    /// Keys to preload (and read back).
    #[arg(long, default_value_t = 10_000)]
    keys: usize,
    /// Value size in bytes.
    #[arg(long, default_value_t = 256)]
    value_size: usize,
    /// Concurrent readers.
    #[arg(long, default_value_t = 100)]
    clients: usize,
    /// Connections the readers share (spread over the endpoints).
    #[arg(long, default_value_t = 10)]
    conns: usize,
    /// Seconds to read for.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Serve reads locally instead of through ReadIndex.
    #[arg(long)]
    serializable: bool,
    /// Skip the preload (keys are already there).
    #[arg(long)]
    no_preload: bool,
    /// name:password to authenticate as (the server has auth enabled).
    #[arg(long)]
    user: Option<String>,
}

/// Puts the auth token, if any, on every request.
#[derive(Clone)]
struct Token(Option<AsciiMetadataValue>);

impl Interceptor for Token {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(t) = &self.0 {
            req.metadata_mut().insert("token", t.clone());
        }
        Ok(req)
    }
}

type Client = KvClient<InterceptedService<Channel, Token>>;

fn key(i: usize) -> Vec<u8> {
    format!("/bench/read/{i:08}").into_bytes()
}

async fn connect(endpoint: &str, user: Option<&str>) -> anyhow::Result<Client> {
    let ch = Endpoint::from_shared(format!("http://{endpoint}"))?
        .connect()
        .await
        .with_context(|| format!("connecting to {endpoint}"))?;
    let token = match user {
        None => None,
        Some(user) => {
            let (name, password) = user.split_once(':').context("--user is name:password")?;
            let req = AuthenticateRequest { name: name.into(), password: password.into() };
            let token = AuthClient::new(ch.clone()).authenticate(req).await?.into_inner().token;
            Some(token.parse().context("token is not ASCII")?)
        }
    };
    Ok(KvClient::with_interceptor(ch, Token(token)).max_decoding_message_size(64 << 20))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let endpoints: Vec<&str> = args.endpoint.split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
    anyhow::ensure!(!endpoints.is_empty(), "--endpoint names no server");
    let mut conns = Vec::new();
    for i in 0..args.conns.max(endpoints.len()) {
        conns.push(connect(endpoints[i % endpoints.len()], args.user.as_deref()).await?);
    }
    if !args.no_preload {
        let value = vec![b'v'; args.value_size];
        let per = args.keys.div_ceil(conns.len());
        let mut tasks = Vec::new();
        for (c, client) in conns.iter().enumerate() {
            let mut client = client.clone();
            let value = value.clone();
            let range = (c * per)..((c + 1) * per).min(args.keys);
            tasks.push(tokio::spawn(async move {
                for i in range {
                    client
                        .put(PutRequest { key: key(i), value: value.clone(), ..Default::default() })
                        .await?;
                }
                anyhow::Ok(())
            }));
        }
        for t in tasks {
            t.await??;
        }
    }

    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..args.clients {
        let mut client = conns[c % conns.len()].clone();
        let stop = stop.clone();
        let (keys, serializable) = (args.keys, args.serializable);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0u64;
            let mut i = c.wrapping_mul(7919);
            while !stop.load(Ordering::Relaxed) {
                i = i.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let k = key((i >> 33) % keys);
                let start = Instant::now();
                let r = client.range(RangeRequest { key: k, serializable, ..Default::default() }).await;
                match r {
                    Ok(resp) if resp.get_ref().kvs.len() == 1 => lat.push(start.elapsed()),
                    _ => errors += 1,
                }
            }
            (lat, errors)
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.duration)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await?;
        all.extend(l);
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    println!(
        "reads/s={:.0} p50_ms={:.3} p99_ms={:.3} max_ms={:.3} errors={} mode={}",
        all.len() as f64 / elapsed,
        pct(0.50).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        all.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        errors,
        if args.serializable { "serializable" } else { "linearizable" }
    );
    Ok(())
}
