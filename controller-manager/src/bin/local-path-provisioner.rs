//! The `local-path-provisioner` binary: one per node, provisioning node-local volumes for
//! claims of its StorageClass (see `controller_manager::local_path`).

use std::path::PathBuf;

use clap::Parser;
use component_base::shutdown::{Shutdown, on_signals};
use controller_manager::local_path::{self, Config, DEFAULT_NAME};

#[derive(Debug, Parser)]
#[command(
    name = "local-path-provisioner",
    about = "Provisions node-local PersistentVolumes for claims scheduled to this node."
)]
struct Flags {
    /// Path to kubeconfig file with authorization and master location information.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The address of the Kubernetes API server (overrides any value in kubeconfig).
    #[arg(long)]
    master: Option<String>,
    /// The node this instance provisions on (its volumes live on this node's disk).
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    /// The provisioner name StorageClasses use.
    #[arg(long, default_value = DEFAULT_NAME)]
    provisioner_name: String,
    /// The directory volumes are made in.
    #[arg(long, default_value = "/opt/local-path-provisioner")]
    base_dir: PathBuf,
    #[arg(long, default_value_t = 20.0)]
    kube_api_qps: f32,
    #[arg(long, default_value_t = 30)]
    kube_api_burst: u32,
    /// Log verbosity.
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    verbosity: u8,
}

fn main() -> anyhow::Result<()> {
    let f = Flags::parse();
    component_base::logging::init(f.verbosity, None)?;
    anyhow::ensure!(
        f.kube_api_qps > 0.0 && f.kube_api_burst > 0,
        "--kube-api-qps and --kube-api-burst must be positive"
    );
    let cfg = Config {
        kubeconfig: f.kubeconfig,
        master: f.master,
        node_name: f.node_name,
        provisioner_name: f.provisioner_name,
        base_dir: f.base_dir,
        kube_api_qps: f.kube_api_qps,
        kube_api_burst: f.kube_api_burst,
    };
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?.block_on(async move {
        let shutdown = Shutdown::new();
        on_signals(shutdown.clone())?;
        local_path::run(cfg, shutdown).await?;
        Ok(())
    })
}
