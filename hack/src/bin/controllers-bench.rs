//! Load generator for kube-controller-manager (hack/bench/controllers.sh): fake Nodes whose
//! kubelets are played by e2e's FakeKubelet, then
//!   baseline  this tool creating `--big` pods itself (what the API server and etcd allow),
//!   big       one Deployment of `--big` replicas: time until every pod exists, and is ready,
//!   many      `--deployments` Deployments of `--replicas`: time until every pod exists,
//!   rolling   a new image for all of them: time until every rollout completed.
//! Prints one line per phase.

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

    namespace(&client, "many").await?;
    let deployments = Api::<Deployment>::namespaced(client.clone(), "many");
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
    drop(kubelet);
    Ok(())
}
