//! The `kube-proxy` binary: flags (and `--config`), then either `--cleanup` or the proxy
//! until SIGTERM/SIGINT.

use clap::Parser;
use component_base::shutdown::{Shutdown, on_signals};

fn main() -> anyhow::Result<()> {
    let flags = kube_proxy::options::Flags::parse();
    component_base::logging::init(flags.verbosity.unwrap_or(0), None)?;
    let cfg = flags.into_config()?;
    // The config file's logging.verbosity applies when -v was not given.
    component_base::logging::init(cfg.verbosity, None)?;
    if cfg.cleanup {
        kube_proxy::server::cleanup()?;
        return Ok(());
    }
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async move {
        let shutdown = Shutdown::new();
        on_signals(shutdown.clone())?;
        kube_proxy::server::run(cfg, shutdown).await?;
        Ok(())
    })
}
