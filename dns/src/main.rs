//! The `kube-dns` binary: flags, then the DNS server until SIGTERM/SIGINT.

use clap::Parser;
use component_base::shutdown::{Shutdown, on_signals};

fn main() -> anyhow::Result<()> {
    let flags = dns::Flags::parse();
    if std::env::var_os("RUST_LOG").is_none() && flags.verbosity < 6 {
        // hickory-server logs two lines per request at info: a query log, not a server
        // log, and a cost on every query. -v=6 or RUST_LOG brings it back.
        // SAFETY: no other thread exists yet to read the environment concurrently.
        unsafe { std::env::set_var("RUST_LOG", "hickory_server=warn,hickory_net=warn,hickory_proto=warn") };
    }
    component_base::logging::init(flags.verbosity, None)?;
    let config = flags.into_config()?;
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async move {
        let shutdown = Shutdown::new();
        on_signals(shutdown.clone())?;
        dns::run(config, shutdown).await?;
        Ok(())
    })
}
