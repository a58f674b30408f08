//! The `kube-apiserver` binary: flags, then the server until SIGTERM/SIGINT.

use clap::Parser;
use component_base::shutdown::{Shutdown, on_signals};

fn main() -> anyhow::Result<()> {
    let flags = apiserver::config::Flags::parse();
    component_base::logging::init(flags.verbosity, None)?;
    let cfg = flags.into_config().map_err(anyhow::Error::msg)?;
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async move {
        let shutdown = Shutdown::new();
        on_signals(shutdown.clone())?;
        let running = apiserver::start(cfg, shutdown.clone()).await?;
        shutdown.wait().await;
        running.wait().await;
        Ok(())
    })
}
