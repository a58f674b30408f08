//! Load generator for kube-apiserver: concurrent clients creating, getting and listing pods
//! (namespace and cluster scope) while watchers follow every pod, each client on its own
//! HTTP/2 connection as separate client-go processes would be. Prints, per verb, the count,
//! the throughput and the latency percentiles. Used by hack/bench/apiserver.sh.
//!
//!   apiserver-bench --server https://127.0.0.1:6443 --token T --ca apiserver.crt create --pods 10000
//!   apiserver-bench ... read --seconds 20
//!   apiserver-bench ... list-all --times 10

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;

#[derive(Parser, Debug)]
struct Args {
    /// https://host:port of the API server.
    #[arg(long)]
    server: String,
    /// Bearer token.
    #[arg(long)]
    token: String,
    /// CA file to verify the server's certificate.
    #[arg(long)]
    ca: std::path::PathBuf,
    /// Concurrent clients, each with its own connection.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Namespaces the pods are spread over (bench-0 … bench-N-1).
    #[arg(long, default_value_t = 100)]
    namespaces: usize,
    /// What to create, get and list: `pods`, `configmaps`, or `crontabs` (custom resources
    /// of the `crontabs.stable.example.com` CRD hack/bench/apiserver.sh creates). The
    /// objects are named bench-pod-N whatever their kind.
    #[arg(long, default_value = "pods")]
    resource: Resource,
    #[command(subcommand)]
    phase: Phase,
}

#[derive(Subcommand, Debug)]
enum Phase {
    /// Create pods (numbered from --start) while --watchers cluster-scope watches follow them.
    Create {
        #[arg(long, default_value_t = 10_000)]
        pods: usize,
        #[arg(long, default_value_t = 0)]
        start: usize,
        #[arg(long, default_value_t = 4)]
        watchers: usize,
    },
    /// For --seconds: each client gets random pods and lists a random namespace, in turn.
    Read {
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// Pods that exist (bench-pod-0 … bench-pod-(N-1)).
        #[arg(long, default_value_t = 10_000)]
        pods: usize,
    },
    /// Lists every pod in the cluster, one request at a time, from the watch cache
    /// (resourceVersion=0), consistently (no resourceVersion) and in pages of 500.
    ListAll {
        #[arg(long, default_value_t = 5)]
        times: usize,
    },
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Resource {
    Pods,
    Configmaps,
    Crontabs,
}

impl Resource {
    /// The group-version prefix and the resource's name in URLs.
    fn path(self) -> (&'static str, &'static str) {
        match self {
            Resource::Pods => ("/api/v1", "pods"),
            Resource::Configmaps => ("/api/v1", "configmaps"),
            Resource::Crontabs => ("/apis/stable.example.com/v1", "crontabs"),
        }
    }

    /// All objects (`/api/v1/pods`).
    fn all(self) -> String {
        let (gv, r) = self.path();
        format!("{gv}/{r}")
    }

    /// The objects of namespace `ns`.
    fn in_ns(self, ns: &str) -> String {
        let (gv, r) = self.path();
        format!("{gv}/namespaces/{ns}/{r}")
    }

    /// Object `i` and its namespace.
    fn object(self, i: usize, namespaces: usize) -> (String, Bytes) {
        match self {
            Resource::Pods => pod(i, namespaces),
            Resource::Configmaps | Resource::Crontabs => {
                let ns = format!("bench-{}", i % namespaces);
                let meta = serde_json::json!({
                    "name": format!("bench-pod-{i}"),
                    "namespace": ns,
                    "labels": {"app": "bench", "shard": (i % 10).to_string()},
                });
                let body = match self {
                    Resource::Configmaps => serde_json::json!({
                        "apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                        "data": {"cronSpec": "*/5 * * * *", "image": "registry.k8s.io/pause:3.10", "replicas": "3"},
                    }),
                    _ => serde_json::json!({
                        "apiVersion": "stable.example.com/v1", "kind": "CronTab", "metadata": meta,
                        "spec": {"cronSpec": "*/5 * * * *", "image": "registry.k8s.io/pause:3.10", "replicas": 3},
                    }),
                };
                (ns, Bytes::from(body.to_string()))
            }
        }
    }
}

type Sender = SendRequest<Full<Bytes>>;

struct Client {
    tx: Sender,
    authority: String,
    token: String,
}

impl Client {
    async fn connect(args: &Args, tls: Arc<rustls::ClientConfig>) -> anyhow::Result<Client> {
        let url: hyper::Uri = args.server.parse().context("--server")?;
        let host = url.host().context("--server has no host")?.to_string();
        let port = url.port_u16().unwrap_or(443);
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await.context("connecting")?;
        tcp.set_nodelay(true)?;
        let name = rustls::pki_types::ServerName::try_from(host.clone())?;
        let stream =
            tokio_rustls::TlsConnector::from(tls).connect(name, tcp).await.context("TLS handshake")?;
        let (tx, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(4 << 20)
            .initial_connection_window_size(16 << 20)
            .handshake(TokioIo::new(stream))
            .await?;
        tokio::spawn(conn);
        Ok(Client { tx, authority: format!("{host}:{port}"), token: args.token.clone() })
    }

    fn request(&self, method: &str, path: &str, body: Bytes) -> hyper::Request<Full<Bytes>> {
        hyper::Request::builder()
            .method(method)
            .uri(format!("https://{}{path}", self.authority))
            .header("authorization", format!("Bearer {}", self.token))
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(Full::new(body))
            .expect("request")
    }

    /// Sends a request and reads the whole answer; fails on a non-2xx status.
    async fn call(&mut self, method: &str, path: &str, body: Bytes) -> anyhow::Result<Bytes> {
        self.tx.ready().await?;
        let resp = self.tx.send_request(self.request(method, path, body)).await?;
        let status = resp.status();
        let bytes = resp.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            bail!("{method} {path}: {status}: {}", String::from_utf8_lossy(&bytes[..bytes.len().min(300)]));
        }
        Ok(bytes)
    }
}

/// Latencies per verb, in microseconds.
#[derive(Default)]
struct Recorder {
    samples: Mutex<HashMap<&'static str, Vec<u32>>>,
}

impl Recorder {
    fn record(&self, verb: &'static str, took: Duration) {
        self.samples.lock().entry(verb).or_default().push(took.as_micros().min(u32::MAX as u128) as u32);
    }

    fn report(&self, elapsed: Duration) {
        let mut all = self.samples.lock();
        let mut verbs: Vec<_> = all.keys().copied().collect();
        verbs.sort();
        for verb in verbs {
            let v = all.get_mut(verb).expect("verb");
            v.sort_unstable();
            let pct = |p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)] as f64 / 1000.0;
            println!(
                "{verb:<14} count={:<7} qps={:<9.1} p50_ms={:<8.2} p99_ms={:<8.2} max_ms={:.2}",
                v.len(),
                v.len() as f64 / elapsed.as_secs_f64(),
                pct(0.50),
                pct(0.99),
                v[v.len() - 1] as f64 / 1000.0
            );
        }
    }
}

/// A pod shaped like a typical workload pod (about 1 KiB of JSON).
fn pod(i: usize, namespaces: usize) -> (String, Bytes) {
    let ns = format!("bench-{}", i % namespaces);
    let name = format!("bench-pod-{i}");
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"app": "bench", "shard": (i % 10).to_string(), "pod-template-hash": "5d8f9c7b6"},
            "annotations": {"bench.k8s-rs.io/created-by": "apiserver-bench"}
        },
        "spec": {
            "containers": [{
                "name": "app",
                "image": "registry.k8s.io/pause:3.10",
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "MODE", "value": "bench"}, {"name": "INDEX", "value": i.to_string()}],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}
            }],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30
        }
    });
    (ns, Bytes::from(body.to_string()))
}

async fn ensure_namespaces(c: &mut Client, n: usize) -> anyhow::Result<()> {
    for i in 0..n {
        let body = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("bench-{i}")}});
        let req = c.request("POST", "/api/v1/namespaces", Bytes::from(body.to_string()));
        c.tx.ready().await?;
        let resp = c.tx.send_request(req).await?;
        let status = resp.status();
        resp.into_body().collect().await?;
        if !status.is_success() && status.as_u16() != 409 {
            bail!("creating namespace bench-{i}: {status}");
        }
    }
    Ok(())
}

/// Follows a cluster-scope pod watch, recording for each ADDED pod the time from the start
/// of its create request to the event's arrival.
async fn watch(
    mut c: Client,
    resource: Resource,
    rv: String,
    started: Arc<Mutex<HashMap<String, Instant>>>,
    rec: Arc<Recorder>,
    stop: Arc<AtomicBool>,
    seen: Arc<AtomicUsize>,
) -> anyhow::Result<()> {
    c.tx.ready().await?;
    let path = format!("{}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true", resource.all());
    let resp = c.tx.send_request(c.request("GET", &path, Bytes::new())).await?;
    anyhow::ensure!(resp.status().is_success(), "watch: {}", resp.status());
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let Ok(frame) = tokio::time::timeout(Duration::from_millis(200), body.frame()).await else {
            continue;
        };
        let Some(frame) = frame else { break };
        let Ok(data) = frame?.into_data() else { continue };
        buf.extend_from_slice(&data);
        while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            let ev: serde_json::Value = serde_json::from_slice(&line).context("watch event")?;
            if ev["type"] == "ADDED" {
                let name = ev["object"]["metadata"]["name"].as_str().unwrap_or_default();
                if let Some(t) = started.lock().get(name) {
                    rec.record("watch-event", t.elapsed());
                }
                seen.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

async fn create(
    args: &Args,
    tls: Arc<rustls::ClientConfig>,
    pods: usize,
    start: usize,
    watchers: usize,
) -> anyhow::Result<()> {
    let mut admin = Client::connect(args, tls.clone()).await?;
    ensure_namespaces(&mut admin, args.namespaces).await?;
    let list = admin.call("GET", &format!("{}?limit=1", args.resource.all()), Bytes::new()).await?;
    let rv = serde_json::from_slice::<serde_json::Value>(&list)?["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string();
    let rec = Arc::new(Recorder::default());
    let started = Arc::new(Mutex::new(HashMap::with_capacity(pods)));
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicUsize::new(0));
    let mut watch_tasks = Vec::new();
    for _ in 0..watchers {
        let c = Client::connect(args, tls.clone()).await?;
        watch_tasks.push(tokio::spawn(watch(
            c,
            args.resource,
            rv.clone(),
            started.clone(),
            rec.clone(),
            stop.clone(),
            seen.clone(),
        )));
    }
    let next = Arc::new(AtomicUsize::new(start));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.clients {
        let mut c = Client::connect(args, tls.clone()).await?;
        let (rec, next, started) = (rec.clone(), next.clone(), started.clone());
        let (namespaces, resource) = (args.namespaces, args.resource);
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= start + pods {
                    return anyhow::Ok(());
                }
                let (ns, body) = resource.object(i, namespaces);
                let t = Instant::now();
                started.lock().insert(format!("bench-pod-{i}"), t);
                c.call("POST", &resource.in_ns(&ns), body).await?;
                rec.record("create", t.elapsed());
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let elapsed = t0.elapsed();
    // Every watcher should see every pod.
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.load(Ordering::Relaxed) < pods * watchers && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in watch_tasks {
        t.await??;
    }
    println!(
        "# created {pods} pods in {:.1}s; watch events seen {} of {}",
        elapsed.as_secs_f64(),
        seen.load(Ordering::Relaxed),
        pods * watchers
    );
    rec.report(elapsed);
    Ok(())
}

async fn read(args: &Args, tls: Arc<rustls::ClientConfig>, seconds: u64, pods: usize) -> anyhow::Result<()> {
    let rec = Arc::new(Recorder::default());
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for w in 0..args.clients {
        let mut c = Client::connect(args, tls.clone()).await?;
        let rec = rec.clone();
        let (namespaces, resource) = (args.namespaces, args.resource);
        tasks.push(tokio::spawn(async move {
            let mut x = (w as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut n = 0u64;
            while Instant::now() < end {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x % pods as u64) as usize;
                let ns = format!("bench-{}", i % namespaces);
                let t = Instant::now();
                if n.is_multiple_of(2) {
                    c.call("GET", &format!("{}/bench-pod-{i}", resource.in_ns(&ns)), Bytes::new()).await?;
                    rec.record("get", t.elapsed());
                } else {
                    c.call("GET", &resource.in_ns(&ns), Bytes::new()).await?;
                    rec.record("list-namespace", t.elapsed());
                }
                n += 1;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    rec.report(t0.elapsed());
    Ok(())
}

async fn list_all(args: &Args, tls: Arc<rustls::ClientConfig>, times: usize) -> anyhow::Result<()> {
    let rec = Recorder::default();
    let mut c = Client::connect(args, tls).await?;
    let t0 = Instant::now();
    let mut items = 0;
    for _ in 0..times {
        let t = Instant::now();
        let b = c.call("GET", &format!("{}?resourceVersion=0", args.resource.all()), Bytes::new()).await?;
        rec.record("list-all-rv0", t.elapsed());
        items = serde_json::from_slice::<serde_json::Value>(&b)?["items"].as_array().map_or(0, Vec::len);
        let t = Instant::now();
        c.call("GET", &args.resource.all(), Bytes::new()).await?;
        rec.record("list-all", t.elapsed());
        let t = Instant::now();
        let mut cont = String::new();
        loop {
            let b = c
                .call("GET", &format!("{}?limit=500&continue={cont}", args.resource.all()), Bytes::new())
                .await?;
            let v: serde_json::Value = serde_json::from_slice(&b)?;
            cont = v["metadata"]["continue"].as_str().unwrap_or_default().to_string();
            if cont.is_empty() {
                break;
            }
        }
        rec.record("list-all-paged", t.elapsed());
    }
    println!("# {items} pods per list");
    rec.report(t0.elapsed());
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let tls = component_base::tls::client_config(Some(&args.ca), None, &[b"h2"]).context("--ca")?;
    match args.phase {
        Phase::Create { pods, start, watchers } => create(&args, tls, pods, start, watchers).await,
        Phase::Read { seconds, pods } => read(&args, tls, seconds, pods).await,
        Phase::ListAll { times } => list_all(&args, tls, times).await,
    }
}
