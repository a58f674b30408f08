//! The `kubelet` binary: flags and config, then the node agent until SIGTERM/SIGINT.

use clap::Parser;
use component_base::shutdown::{Shutdown, on_signals};

fn main() -> anyhow::Result<()> {
    let flags = kubelet::options::Flags::parse();
    component_base::logging::init(flags.verbosity, None)?;
    let opts = flags.into_options()?;
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async move {
        let shutdown = Shutdown::new();
        on_signals(shutdown.clone())?;
        kubelet::run(opts, shutdown).await?;
        Ok(())
    })
}
