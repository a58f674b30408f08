//! Load generator for kube-scheduler, modelled on upstream's scheduler_perf: creates fake
//! Nodes (objects only), optionally fills them with initial pods, then creates the measured
//! pods and follows them with a watch until every one is bound. Prints throughput (pods
//! bound per second, from the first create to the last binding) and the create→bound
//! latency percentiles. Used by hack/bench/scheduler.sh.
//!
//!   scheduler-bench --kubeconfig admin.kubeconfig --variant basic --nodes 5000 --pods 10000
//!
//! Variants: `basic` (cpu/memory requests), `anti-affinity` (required pod anti-affinity per
//! host), `topology-spread` (maxSkew 1 over zones, DoNotSchedule), `preemption` (nodes
//! filled by low-priority pods; high-priority pods must evict one each — this tool then
//! plays the kubelet and removes the victims it is asked to terminate).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use serde_json::json;

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq)]
enum Variant {
    Basic,
    AntiAffinity,
    TopologySpread,
    Preemption,
}

#[derive(Parser, Debug)]
struct Args {
    #[arg(long)]
    kubeconfig: std::path::PathBuf,
    #[arg(long, value_enum, default_value = "basic")]
    variant: Variant,
    #[arg(long, default_value_t = 5000)]
    nodes: usize,
    /// Pods placed before the measurement (preemption: low-priority pods filling the nodes).
    #[arg(long, default_value_t = 0)]
    init_pods: usize,
    /// Measured pods.
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// Concurrent creates.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Give up after this long.
    #[arg(long, default_value_t = 900)]
    timeout_seconds: u64,
    /// Only create the pods (no scheduler runs): the API server's create rate, the baseline.
    #[arg(long)]
    create_only: bool,
}

const NS: &str = "bench";
const ZONES: usize = 10;

fn node(i: usize, cpu: &str) -> Node {
    let name = format!("bench-node-{i}");
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": format!("zone-{}", i % ZONES),
        }},
        "status": {
            "capacity": {"cpu": cpu, "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    }))
    .expect("node")
}

fn pod(name: &str, variant: Variant, phase: &str) -> Pod {
    let mut spec = json!({"containers": [{"name": "pause", "image": "localhost/pause:3.10",
        "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}]});
    match (variant, phase) {
        (Variant::AntiAffinity, _) => {
            spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"color": "green"}}, "topologyKey": "kubernetes.io/hostname"}]}});
        }
        (Variant::TopologySpread, _) => {
            spec["topologySpreadConstraints"] = json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"color": "green"}}}]);
        }
        (Variant::Preemption, "init") => {
            spec["containers"][0]["resources"]["requests"]["cpu"] = json!("1");
            spec["priority"] = json!(0);
        }
        (Variant::Preemption, _) => {
            spec["containers"][0]["resources"]["requests"]["cpu"] = json!("1");
            spec["priority"] = json!(1000);
        }
        _ => {}
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "labels": {"color": "green", "phase": phase}},
        "spec": spec
    }))
    .expect("pod")
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// Creates `names` concurrently; returns when every create has answered.
async fn create_pods(
    api: &Api<Pod>,
    names: Vec<String>,
    variant: Variant,
    phase: &str,
    clients: usize,
    started: &Mutex<HashMap<String, Instant>>,
) -> anyhow::Result<()> {
    futures::stream::iter(names)
        .map(|name| async move {
            started.lock().insert(name.clone(), Instant::now());
            api.create(&PostParams::default(), &pod(&name, variant, phase))
                .await
                .with_context(|| format!("creating {name}"))
        })
        .buffer_unordered(clients)
        .try_for_each(|_| async { Ok(()) })
        .await
}

/// Follows pods of `phase` until `count` are bound; returns bind times by name.
async fn wait_bound(
    api: Api<Pod>,
    phase: &'static str,
    count: usize,
    deadline: Instant,
) -> anyhow::Result<HashMap<String, Instant>> {
    let mut bound: HashMap<String, Instant> = HashMap::new();
    let cfg = watcher::Config::default().labels(&format!("phase={phase}"));
    let mut stream = watcher(api, cfg).default_backoff().boxed();
    loop {
        let next = tokio::time::timeout_at(deadline.into(), stream.next()).await;
        let Ok(Some(event)) = next else {
            bail!("{} of {count} pods bound before the deadline", bound.len())
        };
        let pods: Vec<Pod> = match event {
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => vec![p],
            _ => continue,
        };
        for p in pods {
            let name = p.metadata.name.clone().unwrap_or_default();
            if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                bound.entry(name).or_insert_with(Instant::now);
            }
        }
        if bound.len() >= count {
            return Ok(bound);
        }
    }
}

/// Plays the kubelet for preemption victims: a pod marked for deletion is removed at once.
async fn kubelet(api: Api<Pod>) {
    let mut stream =
        watcher(api.clone(), watcher::Config::default().labels("phase=init")).default_backoff().boxed();
    while let Some(event) = stream.next().await {
        if let Ok(watcher::Event::Apply(p)) = event
            && p.metadata.deletion_timestamp.is_some()
        {
            let name = p.metadata.name.clone().unwrap_or_default();
            let api = api.clone();
            tokio::spawn(async move {
                let _ = api
                    .delete(&name, &DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() })
                    .await;
            });
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let kc = kube::config::Kubeconfig::read_from(&args.kubeconfig)?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    config.read_timeout = None;
    let client = kube::Client::try_from(config)?;
    let deadline = Instant::now() + Duration::from_secs(args.timeout_seconds);

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}}))?;
    let _ = namespaces.create(&PostParams::default(), &ns).await;

    let nodes: Api<Node> = Api::all(client.clone());
    let cpu = "4";
    let t = Instant::now();
    futures::stream::iter(0..args.nodes)
        .map(|i| {
            let nodes = nodes.clone();
            async move { nodes.create(&PostParams::default(), &node(i, cpu)).await.map(|_| ()) }
        })
        .buffer_unordered(args.clients)
        .try_for_each(|_| async { Ok(()) })
        .await
        .context("creating nodes")?;
    eprintln!("created {} nodes in {:.1}s", args.nodes, t.elapsed().as_secs_f64());

    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let started = Arc::new(Mutex::new(HashMap::new()));
    if args.init_pods > 0 {
        let names: Vec<String> = (0..args.init_pods).map(|i| format!("init-{i}")).collect();
        let waiter = tokio::spawn(wait_bound(pods.clone(), "init", args.init_pods, deadline));
        create_pods(&pods, names, args.variant, "init", args.clients, &started).await?;
        waiter.await??;
        eprintln!("{} initial pods bound", args.init_pods);
    }
    if args.variant == Variant::Preemption {
        tokio::spawn(kubelet(pods.clone()));
    }
    started.lock().clear();
    let names: Vec<String> = (0..args.pods).map(|i| format!("measure-{i}")).collect();
    let waiter =
        (!args.create_only).then(|| tokio::spawn(wait_bound(pods.clone(), "measure", args.pods, deadline)));
    let t0 = Instant::now();
    create_pods(&pods, names, args.variant, "measure", args.clients, &started).await?;
    let create_secs = t0.elapsed().as_secs_f64();
    let variant = format!("{:?}", args.variant).to_lowercase();
    if args.create_only {
        println!(
            "create-only variant={variant} pods={} seconds={create_secs:.2} pods_per_s={:.0}",
            args.pods,
            args.pods as f64 / create_secs
        );
        return Ok(());
    }
    let bound = waiter.expect("waiter").await??;
    let last = bound.values().max().copied().unwrap_or(t0);
    let total = last.duration_since(t0).as_secs_f64();
    let started = started.lock();
    let mut lat: Vec<f64> = bound
        .iter()
        .filter_map(|(name, at)| {
            started.get(name).map(|s| at.saturating_duration_since(*s).as_secs_f64() * 1000.0)
        })
        .collect();
    lat.sort_by(|a, b| a.total_cmp(b));
    println!(
        "schedule variant={variant} nodes={} pods={} create_s={create_secs:.2} total_s={total:.2} pods_per_s={:.0} p50_ms={:.0} p99_ms={:.0} max_ms={:.0}",
        args.nodes,
        args.pods,
        args.pods as f64 / total,
        percentile(&lat, 0.50),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or(0.0),
    );
    Ok(())
}
