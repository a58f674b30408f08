//! The `etcd` binary: parse etcd's flags, start the server, stop on SIGTERM/SIGINT.

use clap::Parser;
use component_base::shutdown::{Shutdown, on_signals};

fn main() -> anyhow::Result<()> {
    let flags = etcd::config::Flags::parse();
    component_base::logging::init(0, Some(&flags.log_level))?;
    let cfg = flags.into_config()?;
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async move {
        let shutdown = Shutdown::new();
        on_signals(shutdown.clone())?;
        let running = etcd::start(cfg, shutdown.clone()).await?;
        shutdown.wait().await;
        tracing::info!("received shutdown signal, stopping");
        running.wait().await;
        Ok(())
    })
}
