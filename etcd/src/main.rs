//! The `etcd` binary: parse etcd's flags, start the server, stop on SIGTERM/SIGINT.

use clap::Parser;
use component_base::shutdown::{Shutdown, on_signals};

fn main() -> anyhow::Result<()> {
    // FAILPOINTS (e.g. `raft_after_save=20*off->return`) arms the raft loop's failpoints
    // for fault tests; a failpoint that "returns" makes the member exit as if it crashed.
    let _failpoints = fail::FailScenario::setup();
    let mut flags = etcd::config::Flags::parse();
    component_base::logging::init(0, Some(&flags.log_level))?;
    if let Some(etcd::config::Command::Snapshot(etcd::config::SnapshotCommand::Restore(args))) =
        flags.command.take()
    {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let dir = rt.block_on(etcd::restore::run(args))?;
        println!("restored snapshot into {}", dir.display());
        return Ok(());
    }
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
