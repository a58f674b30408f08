//! `hostgw`: the pod network across nodes, in the manner of flannel's host-gw backend.
//!
//! Layout:
//! - [`routes`]: a route to every other Node's `spec.podCIDRs` via its InternalIP, kept in
//!   step with the Node objects (added, moved, removed) through rtnetlink;
//! - [`cni`]: this node's bridge CNI config, written from its own pod CIDRs as the node
//!   IPAM controller allocated them;
//! - [`masquerade`]: source NAT for pod traffic leaving the cluster CIDR.
//!
//! It watches Nodes through the API server only, like every component. Run it on every node
//! (a DaemonSet, or a host process beside the kubelet), and on any host that is no node but
//! must reach pods (`--node-name` empty: routes only).

pub mod cidr;
pub mod cni;
pub mod masquerade;
pub mod routes;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Notify;

use component_base::shutdown::Shutdown;

use crate::cidr::Cidr;

/// What the agent is started with (flags, see `main.rs`).
#[derive(Clone, Debug)]
pub struct Config {
    pub kubeconfig: Option<PathBuf>,
    /// This host's Node; `None` on a host that only needs routes to every node's pods.
    pub node_name: Option<String>,
    /// The cluster's pod networks (`--cluster-cidr`): what is masqueraded when it leaves.
    pub cluster_cidrs: Vec<Cidr>,
    /// Where to write this node's CNI network; `None` leaves CNI alone.
    pub cni: Option<cni::Options>,
    pub masquerade: bool,
    /// How often routes are checked even when no Node changed (someone may delete them).
    pub resync: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Client(#[from] component_base::client::Error),
    #[error(transparent)]
    Routes(#[from] routes::Error),
    #[error(transparent)]
    Masquerade(#[from] masquerade::Error),
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Runs until `shutdown`. Routes and rules stay in place when it stops, so pod traffic
/// keeps flowing across a restart; `cleanup` removes them.
pub async fn run(cfg: Config, shutdown: Shutdown) -> Result<(), Error> {
    enable_forwarding(&cfg.cluster_cidrs)?;
    if cfg.masquerade {
        masquerade::apply(&cfg.cluster_cidrs)?;
    }
    let client = component_base::client::from_flags(cfg.kubeconfig.as_deref(), None).await?;
    let netlink = routes::Netlink::connect()?;

    let (store, writer) = reflector::store::<Node>();
    let changed = Arc::new(Notify::new());
    let events = reflector::reflector(writer, watcher(Api::<Node>::all(client), watcher::Config::default()))
        .default_backoff();
    let notify = changed.clone();
    let watch = tokio::spawn(async move {
        events
            .for_each(|event| {
                if let Err(e) = event {
                    tracing::warn!("watching nodes: {e}");
                }
                notify.notify_one();
                std::future::ready(())
            })
            .await;
    });

    let stop = shutdown.wait();
    tokio::pin!(stop);
    tokio::select! {
        ready = store.wait_until_ready() => { let _ = ready; }
        _ = &mut stop => { watch.abort(); return Ok(()); }
    }
    tracing::info!(node = cfg.node_name.as_deref().unwrap_or(""), "node cache synced");
    loop {
        if let Err(e) = reconcile(&cfg, &store, &netlink).await {
            tracing::error!("syncing the pod network: {e}");
        }
        tokio::select! {
            _ = changed.notified() => {}
            _ = tokio::time::sleep(cfg.resync) => {}
            _ = &mut stop => break,
        }
    }
    watch.abort();
    Ok(())
}

/// One pass: this node's CNI config, then routes added and removed to match the Nodes.
async fn reconcile(cfg: &Config, store: &Store<Node>, netlink: &routes::Netlink) -> Result<(), Error> {
    let nodes = store.state();
    if let (Some(name), Some(opts)) = (&cfg.node_name, &cfg.cni)
        && let Some(own) = nodes.iter().find(|n| n.metadata.name.as_deref() == Some(name))
    {
        let cidrs = routes::pod_cidrs(own);
        if !cidrs.is_empty() {
            let text = cni::render(opts, &cidrs);
            let wrote = cni::write_if_changed(&opts.conf_file, &text)
                .map_err(|source| Error::Write { path: opts.conf_file.display().to_string(), source })?;
            if wrote {
                tracing::info!(file = %opts.conf_file.display(), ?cidrs, "wrote the node's CNI network");
            }
        }
    }
    let want = routes::desired(cfg.node_name.as_deref(), &nodes);
    let have = netlink.ours().await?;
    for stale in have.difference(&want) {
        // A node moved: the replacement below covers it; a node gone: its route goes.
        if want.iter().any(|w| w.dst == stale.dst) {
            continue;
        }
        netlink.delete(stale).await?;
        tracing::info!(dst = %stale.dst, gateway = %stale.gateway, "removed route");
    }
    for route in want.difference(&have) {
        match netlink.replace(route).await {
            Ok(()) => tracing::info!(dst = %route.dst, gateway = %route.gateway, "added route"),
            // An unreachable gateway (a node on another segment) must not stop the others.
            Err(e) => tracing::warn!("{e}"),
        }
    }
    Ok(())
}

/// Forwarding on for the families of the cluster (a pod's packets to another node are
/// forwarded by this host). The bridge plugin turns IPv4 forwarding on too, but only once a
/// pod exists here; a node must forward before that.
fn enable_forwarding(cluster_cidrs: &[Cidr]) -> Result<(), Error> {
    let mut files = vec!["/proc/sys/net/ipv4/ip_forward"];
    if cluster_cidrs.iter().any(|c| !c.is_ipv4()) {
        files.push("/proc/sys/net/ipv6/conf/all/forwarding");
    }
    for f in files {
        std::fs::write(f, "1").map_err(|source| Error::Write { path: f.to_owned(), source })?;
    }
    Ok(())
}

/// Removes every route with our protocol and the masquerade tables, as `--cleanup` does.
pub async fn cleanup() -> Result<(), Error> {
    let netlink = routes::Netlink::connect()?;
    for route in netlink.ours().await? {
        netlink.delete(&route).await?;
    }
    masquerade::cleanup()?;
    Ok(())
}
