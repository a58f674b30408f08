//! Auto-compaction (`--auto-compaction-mode` / `--auto-compaction-retention`), with
//! etcd's semantics. Only the leader compacts; the compaction itself goes through raft.
//!
//! - periodic, retention R: the revision is sampled every R/10 (at most every 6 minutes);
//!   once R has passed, and then every min(R, 1h), the store is compacted to the revision
//!   sampled R ago.
//! - revision, retention N: every 5 minutes the store is compacted to current - N.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::etcdserverpb::{CompactionRequest, InternalRaftRequest};

use crate::config::AutoCompaction;
use crate::error::EtcdError;
use crate::server::EtcdServer;

const REVISION_MODE_INTERVAL: Duration = Duration::from_secs(5 * 60);

async fn compact(server: &EtcdServer, rev: i64) -> Result<(), EtcdError> {
    let req = InternalRaftRequest {
        compaction: Some(CompactionRequest { revision: rev, physical: false }),
        ..Default::default()
    };
    match server.propose(req).await {
        Ok(_) | Err(EtcdError::Compacted) => {
            tracing::info!(revision = rev, "auto-compacted");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

pub async fn run(
    server: Arc<EtcdServer>,
    mode: AutoCompaction,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    match mode {
        AutoCompaction::Off => {}
        AutoCompaction::Revision(keep) => {
            let mut last = 0;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(REVISION_MODE_INTERVAL) => {}
                    _ = shutdown.changed() => return,
                }
                let rev = server.store.current_rev() - keep;
                if !server.node.status.is_leader() || rev <= 0 || rev == last {
                    continue;
                }
                match compact(&server, rev).await {
                    Ok(()) => last = rev,
                    Err(e) => tracing::warn!(revision = rev, "auto-compaction failed: {e}"),
                }
            }
        }
        AutoCompaction::Periodic(retention) => {
            let capped = retention.min(Duration::from_secs(3600));
            let sample_every = capped / 10;
            let keep_samples = (retention.as_secs_f64() / sample_every.as_secs_f64()) as usize + 1;
            let mut samples: VecDeque<i64> = VecDeque::new();
            let mut last_success = Instant::now();
            let mut wait = retention;
            loop {
                samples.push_back(server.store.current_rev());
                if samples.len() > keep_samples {
                    samples.pop_front();
                }
                tokio::select! {
                    _ = tokio::time::sleep(sample_every) => {}
                    _ = shutdown.changed() => return,
                }
                if last_success.elapsed() < wait || !server.node.status.is_leader() {
                    continue;
                }
                wait = capped;
                let rev = samples[0];
                match compact(&server, rev).await {
                    Ok(()) => last_success = Instant::now(),
                    Err(e) => tracing::warn!(revision = rev, "auto-compaction failed: {e}"),
                }
            }
        }
    }
}
