//! Load generator for kube-controller-manager (hack/bench/controllers.sh): fake Nodes whose
//! kubelets are played by e2e's FakeKubelet, then
//!   baseline  this tool creating `--big` pods itself (what the API server and etcd allow),
//!   big       one Deployment of `--big` replicas: time until every pod exists, and is ready,
//!   many      `--deployments` Deployments of `--replicas`: time until every pod exists,
//!   rolling   a new image for all of them: time until every rollout completed,
//!   job       one Job of `--job-completions` (`--job-parallelism` at a time) whose pods the
//!             fake kubelet finishes at once: time until Complete, completions/s, and the
//!             controller-manager's CPU seconds over the phase (`--kcm-pid`).
//! Prints one line per phase; `--phases` picks some (default: all).

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

#[derive(Parser, Debug)]
struct Args {
    #[arg(long)]
    kubeconfig: std::path::PathBuf,
    #[arg(long, default_value_t = 30)]
    nodes: usize,
    #[arg(long, default_value_t = 3000)]
    big: usize,
    #[arg(long, default_value_t = 100)]
    deployments: usize,
    #[arg(long, default_value_t = 30)]
    replicas: usize,
    #[arg(long, default_value_t = 1000)]
    job_completions: usize,
    #[arg(long, default_value_t = 100)]
    job_parallelism: usize,
    /// The controller-manager's pid, to report its CPU over the job phase.
    #[arg(long)]
    kcm_pid: Option<u32>,
    /// Comma-separated phases to run: baseline,big,many,rolling,job,daemonset.
    #[arg(long, default_value = "baseline,big,many,rolling,job,daemonset")]
    phases: String,
    /// Nodes the daemonset phase spreads over (fake nodes are added up to this many).
    #[arg(long, default_value_t = 1000)]
    ds_nodes: usize,
}

/// User + system CPU seconds of a process so far.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the `(comm)`, which may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz)
}

/// The daemonset phase: fake nodes added up to `--ds-nodes`, then one DaemonSet: time until
/// a pod exists for every node, and until every one is scheduled and ready.
async fn daemonset_phase(client: &kube::Client, args: &Args, store: &Store<Pod>) -> anyhow::Result<()> {
    let extra: Vec<String> = (args.nodes..args.ds_nodes).map(|i| format!("ds-node-{i}")).collect();
    let kubeconfig = args.kubeconfig.clone();
    let kubelet = tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = extra.iter().map(String::as_str).collect();
        e2e::fake_kubelet::FakeKubelet::start(&kubeconfig, &refs)
    })
    .await
    .context("fake kubelet for the daemonset nodes")?;
    let nodes =
        Api::<k8s_openapi::api::core::v1::Node>::all(client.clone()).list(&ListParams::default()).await?;
    let total = nodes.items.len();
    namespace(client, "ds").await?;
    let ds: k8s_openapi::api::apps::v1::DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "bench"},
        "spec": {
            "selector": {"matchLabels": {"app": "bench-ds"}},
            "template": {
                "metadata": {"labels": {"app": "bench-ds"}},
                "spec": {"containers": [{"name": "c", "image": "localhost/busybox:1"}]},
            },
        },
    }))?;
    let cpu_before = args.kcm_pid.and_then(cpu_seconds);
    let start = Instant::now();
    Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(client.clone(), "ds")
        .create(&PostParams::default(), &ds)
        .await?;
    let exist = until(start, "daemon pods", || count(store, "ds", false) == total).await;
    let cpu = match (cpu_before, args.kcm_pid.and_then(cpu_seconds)) {
        (Some(b), Some(a)) => format!(", controller-manager CPU {:.1}s until then", a - b),
        _ => String::new(),
    };
    let ready = until(start, "daemon pods ready", || count(store, "ds", true) == total).await;
    println!(
        "daemonset 1 DaemonSet x {total} nodes: all pods created after {:.1}s ({:.0} pods/s){cpu}, all scheduled and ready after {:.1}s",
        exist.as_secs_f64(),
        total as f64 / exist.as_secs_f64(),
        ready.as_secs_f64()
    );
    drop(kubelet);
    Ok(())
}

/// The job phase: one Job, its pods finished by the fake kubelet as soon as they run.
async fn job_phase(client: &kube::Client, args: &Args) -> anyhow::Result<()> {
    namespace(client, "batch").await?;
    let jobs = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), "batch");
    let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(json!({
        "metadata": {"name": "bench"},
        "spec": {
            "completions": args.job_completions,
            "parallelism": args.job_parallelism,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {e2e::fake_kubelet::EXIT_CODE: "0"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "localhost/busybox:1"}]},
            },
        },
    }))?;
    let cpu_before = args.kcm_pid.and_then(cpu_seconds);
    let start = Instant::now();
    jobs.create(&PostParams::default(), &job).await?;
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let j = jobs.get("bench").await?;
        let s = j.status.unwrap_or_default();
        let done = s.conditions.iter().flatten().any(|c| c.type_ == "Complete" && c.status == "True");
        let failed = s.conditions.iter().flatten().any(|c| c.type_ == "Failed" && c.status == "True");
        anyhow::ensure!(!failed, "the bench Job failed: {:?}", s.conditions);
        if done {
            anyhow::ensure!(s.succeeded == Some(args.job_completions as i32), "succeeded {:?}", s.succeeded);
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the bench Job did not complete");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = start.elapsed().as_secs_f64();
    let cpu = match (cpu_before, args.kcm_pid.and_then(cpu_seconds)) {
        (Some(b), Some(a)) => format!(
            ", controller-manager CPU {:.1}s ({:.1} ms per completion)",
            a - b,
            (a - b) * 1000.0 / args.job_completions as f64
        ),
        _ => String::new(),
    };
    println!(
        "job       1 Job x {} completions (parallelism {}): Complete after {:.1}s ({:.1} completions/s){cpu}",
        args.job_completions,
        args.job_parallelism,
        took,
        args.job_completions as f64 / took
    );
    Ok(())
}

fn deployment(name: &str, replicas: usize, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image}]},
            },
        },
    }))
    .expect("deployment")
}

async fn namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await?;
    Ok(())
}

/// Waits until `f` holds, checking every 50 ms; returns the time since `start`.
async fn until(start: Instant, what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(1800);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}

fn count(store: &Store<Pod>, ns: &str, ready: bool) -> usize {
    store
        .state()
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns) && p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            !ready
                || p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count()
}

async fn rolled_out(api: &Api<Deployment>, replicas: i32, image: &str) -> anyhow::Result<bool> {
    let list = api.list(&ListParams::default()).await?;
    Ok(list.items.iter().all(|d| {
        let s = d.status.clone().unwrap_or_default();
        let spec_image =
            d.spec.as_ref().map(|s| s.template.spec.as_ref().map(|p| p.containers[0].image.clone()));
        spec_image == Some(Some(Some(image.to_owned())))
            && s.observed_generation == d.metadata.generation
            && s.updated_replicas == Some(replicas)
            && s.available_replicas == Some(replicas)
            && s.replicas == Some(replicas)
    }))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let names: Vec<String> = (0..args.nodes).map(|i| format!("bench-node-{i}")).collect();
    let kubeconfig = args.kubeconfig.clone();
    let kubelet = tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        e2e::fake_kubelet::FakeKubelet::start(&kubeconfig, &refs)
    })
    .await
    .context("fake kubelet")?;
    let client = e2e::fake_kubelet::client(&args.kubeconfig).await;
    let (store, writer) = reflector::store::<Pod>();
    let stream =
        reflector::reflector(writer, watcher(Api::<Pod>::all(client.clone()), watcher::Config::default()))
            .default_backoff()
            .touched_objects();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while stream.next().await.is_some() {}
    });
    store.wait_until_ready().await.context("pod store")?;
    let phases: Vec<&str> = args.phases.split(',').map(str::trim).collect();
    let run = |p: &str| phases.contains(&p);
    if run("baseline") {
        // Baseline: the same number of pods, created by this tool with 32 requests in flight.
        namespace(&client, "baseline").await?;
        let pods = Api::<Pod>::namespaced(client.clone(), "baseline");
        let start = Instant::now();
        futures::stream::iter(0..args.big)
            .for_each_concurrent(32, |i| {
                let pods = pods.clone();
                async move {
                    let pod: Pod = serde_json::from_value(json!({
                        "metadata": {"name": format!("p-{i}"), "labels": {"app": "baseline"}},
                        "spec": {"containers": [{"name": "c", "image": "localhost/busybox:1"}]},
                    }))
                    .expect("pod");
                    pods.create(&PostParams::default(), &pod).await.expect("creating a baseline pod");
                }
            })
            .await;
        let exist = until(start, "baseline pods", || count(&store, "baseline", false) == args.big).await;
        println!(
            "baseline  {} pods created directly: all exist after {:.1}s ({:.0} pods/s)",
            args.big,
            exist.as_secs_f64(),
            args.big as f64 / exist.as_secs_f64()
        );
    }
    if run("big") {
        namespace(&client, "big").await?;
        let start = Instant::now();
        Api::<Deployment>::namespaced(client.clone(), "big")
            .create(&PostParams::default(), &deployment("big", args.big, "localhost/busybox:1"))
            .await?;
        let exist = until(start, "big pods", || count(&store, "big", false) == args.big).await;
        let ready = until(start, "big pods ready", || count(&store, "big", true) == args.big).await;
        println!(
            "big       1 Deployment x {}: all pods exist after {:.1}s ({:.0} pods/s), all ready after {:.1}s",
            args.big,
            exist.as_secs_f64(),
            args.big as f64 / exist.as_secs_f64(),
            ready.as_secs_f64()
        );
    }
    let deployments = Api::<Deployment>::namespaced(client.clone(), "many");
    if run("many") {
        namespace(&client, "many").await?;
        let total = args.deployments * args.replicas;
        let start = Instant::now();
        for i in 0..args.deployments {
            deployments
                .create(
                    &PostParams::default(),
                    &deployment(&format!("d-{i}"), args.replicas, "localhost/busybox:1"),
                )
                .await?;
        }
        let exist = until(start, "many pods", || count(&store, "many", false) == total).await;
        let ready = until(start, "many pods ready", || count(&store, "many", true) == total).await;
        println!(
            "many      {} Deployments x {}: all pods exist after {:.1}s ({:.0} pods/s), all ready after {:.1}s",
            args.deployments,
            args.replicas,
            exist.as_secs_f64(),
            total as f64 / exist.as_secs_f64(),
            ready.as_secs_f64()
        );
    }
    if run("rolling") {
        let start = Instant::now();
        for i in 0..args.deployments {
            let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "localhost/busybox:2"}]}}}});
            deployments.patch(&format!("d-{i}"), &PatchParams::default(), &Patch::Strategic(patch)).await?;
        }
        let deadline = Instant::now() + Duration::from_secs(1800);
        while !rolled_out(&deployments, args.replicas as i32, "localhost/busybox:2").await? {
            anyhow::ensure!(Instant::now() < deadline, "rolling update did not finish");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        println!(
            "rolling   {} Deployments x {} to a new image: all rollouts complete after {:.1}s",
            args.deployments,
            args.replicas,
            start.elapsed().as_secs_f64()
        );
    }
    if run("job") {
        job_phase(&client, &args).await?;
    }
    if run("daemonset") {
        daemonset_phase(&client, &args, &store).await?;
    }
    drop(kubelet);
    Ok(())
}
