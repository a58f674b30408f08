//! `lazyfs --backing DIR MOUNTPOINT`: mounts, prints `mounted` on stdout, serves until
//! unmounted. Killing it drops every unsynced write; unmount the dead mount with
//! `umount -l MOUNTPOINT`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use fuser::MountOption;

#[derive(Parser)]
#[command(name = "lazyfs", about = "FUSE passthrough that keeps unsynced writes in memory only")]
struct Args {
    /// The directory that holds what has been fsynced.
    #[arg(long)]
    backing: PathBuf,
    /// Where to mount.
    mountpoint: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let fs = lazyfs::LazyFs::new(args.backing.clone())
        .with_context(|| format!("backing directory {}", args.backing.display()))?;
    let options = [MountOption::FSName("lazyfs".into()), MountOption::Subtype("lazyfs".into())];
    let mut session = fuser::Session::new(fs, &args.mountpoint, &options)
        .with_context(|| format!("mounting on {} (needs root and /dev/fuse)", args.mountpoint.display()))?;
    let mut out = std::io::stdout();
    writeln!(out, "mounted")?;
    out.flush()?;
    session.run().context("serving FUSE requests")?;
    Ok(())
}
