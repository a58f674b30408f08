//! Installing a raft snapshot from the leader: the state machine is replaced by the
//! snapshot's contents, the raft log restarts after its index, and every in-memory view
//! (index, leases, alarms, members, watchers) is rebuilt from the backend.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Instant;

use raft::eraftpb::Snapshot;
use rocksdb::WriteBatch;

use super::{META_CONSISTENT_INDEX, Node};
use crate::backend::STATE_CFS;

impl Node {
    pub(super) fn install_snapshot(&mut self, snap: &Snapshot) -> Result<(), String> {
        let meta = snap.get_metadata();
        let path = PathBuf::from(String::from_utf8_lossy(&snap.data).into_owned());
        let start = Instant::now();
        let records = crate::snapshot::read_file(&path)
            .map_err(|e| format!("reading snapshot {}: {e}", path.display()))?;
        let mut batch = WriteBatch::default();
        for cf in STATE_CFS {
            // Every key of ours sorts below this bound (revisions and lease ids are
            // positive, meta keys are ASCII).
            batch.delete_range_cf(self.backend.cf(cf), &[][..], &[0xffu8; 32][..]);
        }
        for r in &records {
            batch.put_cf(self.backend.cf(r.cf), &r.key, &r.value);
        }
        // The snapshot is the leader's: its own id must not replace ours.
        self.backend.put_meta_u64(&mut batch, crate::bootstrap::META_LOCAL_ID, self.cfg.id);
        self.raw.mut_store().apply_snapshot(&mut batch, meta.index, meta.term, meta.get_conf_state().clone());
        self.backend.put_meta_u64(&mut batch, META_CONSISTENT_INDEX, meta.index);
        self.backend.write(batch, true).map_err(|e| format!("installing snapshot: {e}"))?;

        let seen = self.applier.store.current_rev();
        let leased = self.applier.store.reload().map_err(|e| format!("reloading the store: {e}"))?;
        self.applier
            .lessor
            .reload(&self.backend, self.cfg.lease_extend)
            .map_err(|e| format!("reloading leases: {e}"))?;
        for (key, lease) in leased {
            self.applier.lessor.attach(lease, &key);
        }
        self.applier.alarms.reload(&self.backend).map_err(|e| format!("reloading alarms: {e}"))?;
        self.applier.auth.reload(&self.backend).map_err(|e| format!("reloading auth: {e}"))?;
        self.applier.members.reload(&self.backend).map_err(|e| format!("reloading members: {e}"))?;
        self.applier.watchable.resync_all(seen);
        self.transport.update_peers(&self.applier.members.list());

        self.applied = meta.index;
        self.last_log_compaction = meta.index;
        self.status.applied.store(meta.index, Ordering::Release);
        self.status.commit.fetch_max(meta.index, Ordering::AcqRel);
        let _ = std::fs::remove_file(&path);
        tracing::info!(
            index = meta.index,
            term = meta.term,
            records = records.len(),
            revision = self.applier.store.current_rev(),
            took = ?start.elapsed(),
            "installed raft snapshot"
        );
        Ok(())
    }
}
