//! The `hostgw` binary: flags, then the agent until SIGTERM/SIGINT (or `--cleanup`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use component_base::shutdown::{Shutdown, on_signals};
use hostgw::cidr::Cidr;

/// Routes every node's pod CIDR via that node, writes this node's bridge CNI network and
/// masquerades pod traffic leaving the cluster.
#[derive(Parser, Debug)]
#[command(name = "hostgw", version)]
struct Flags {
    /// kubeconfig of the agent's identity (it lists and watches Nodes); in-cluster config
    /// when absent.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// This host's Node name; empty on a host that only routes to the nodes' pods.
    #[arg(long, env = "NODE_NAME", default_value = "")]
    node_name: String,
    /// The cluster's pod networks, comma-separated (at most one per family).
    #[arg(long, value_delimiter = ',')]
    cluster_cidr: Vec<Cidr>,
    /// The CNI conflist to write from the node's pod CIDRs; none: leave CNI alone.
    #[arg(long)]
    cni_conf_file: Option<PathBuf>,
    /// The bridge the pods join.
    #[arg(long, default_value = "cni0")]
    cni_bridge: String,
    /// The CNI network's name (keep it stable while pods exist).
    #[arg(long, default_value = "hostgw")]
    cni_network_name: String,
    /// host-local IPAM's lease directory (default: the plugin's own, /var/lib/cni/networks).
    #[arg(long)]
    cni_ipam_data_dir: Option<PathBuf>,
    /// Masquerade pod traffic whose destination is outside --cluster-cidr.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    masquerade: bool,
    /// How often routes are re-checked without a Node change.
    #[arg(long, default_value = "30s", value_parser = component_base::duration::parse)]
    resync_period: Duration,
    /// Remove every route and rule the agent wrote, then exit.
    #[arg(long)]
    cleanup: bool,
    /// Log verbosity, as klog's -v.
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    verbosity: u8,
}

fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    component_base::logging::init(flags.verbosity, None)?;
    if flags.cluster_cidr.iter().filter(|c| c.is_ipv4()).count() > 1
        || flags.cluster_cidr.iter().filter(|c| !c.is_ipv4()).count() > 1
    {
        anyhow::bail!("--cluster-cidr: at most one CIDR per IP family");
    }
    let node_name = Some(flags.node_name.clone()).filter(|n| !n.is_empty());
    if flags.cni_conf_file.is_some() && node_name.is_none() {
        anyhow::bail!("--cni-conf-file needs --node-name: the network is the node's own pod CIDR");
    }
    if flags.cni_bridge.is_empty() || flags.cni_bridge.len() > 15 || flags.cni_bridge.contains('/') {
        anyhow::bail!(
            "--cni-bridge {:?}: a Linux interface name has 1 to 15 bytes and no '/'",
            flags.cni_bridge
        );
    }
    let cfg = hostgw::Config {
        kubeconfig: flags.kubeconfig,
        node_name,
        cluster_cidrs: flags.cluster_cidr,
        cni: flags.cni_conf_file.map(|conf_file| hostgw::cni::Options {
            conf_file,
            network_name: flags.cni_network_name,
            bridge: flags.cni_bridge,
            ipam_data_dir: flags.cni_ipam_data_dir,
        }),
        masquerade: flags.masquerade,
        resync: flags.resync_period,
    };
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?.block_on(async move {
        if flags.cleanup {
            hostgw::cleanup().await?;
            return Ok(());
        }
        let shutdown = Shutdown::new();
        on_signals(shutdown.clone())?;
        hostgw::run(cfg, shutdown).await?;
        Ok(())
    })
}
