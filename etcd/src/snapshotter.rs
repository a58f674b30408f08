//! Raft snapshots: files holding the state machine as of one applied raft index, sent to a
//! member whose log is too far behind (etcd's `snap.Snapshotter`).
//!
//! The state machine lives in the backend, so a snapshot is a serialized read of it, taken
//! from a rocksdb snapshot. Consistency with the raft index comes from where the rocksdb
//! snapshot is taken: the raft thread asks for one and waits until it exists; it applies
//! nothing meanwhile, so the files holds exactly the state at the applied index. Writing
//! the file then happens off the raft thread, and raft is told "temporarily unavailable"
//! until it is done.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use raft::eraftpb::{ConfState, Snapshot};

use crate::backend::Backend;
use crate::snapshot;

const SUFFIX: &str = ".snap";

/// A snapshot file ready to send.
#[derive(Clone, Debug)]
pub struct SnapFile {
    pub index: u64,
    pub term: u64,
    pub conf_state: ConfState,
    pub path: PathBuf,
}

impl SnapFile {
    /// The raft snapshot message body: metadata, and the file's name as data.
    pub fn to_raft(&self) -> Snapshot {
        let mut s = Snapshot::default();
        let name = self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        s.data = name.into_bytes().into();
        let meta = s.mut_metadata();
        meta.index = self.index;
        meta.term = self.term;
        meta.set_conf_state(self.conf_state.clone());
        s
    }
}

#[derive(Default)]
struct State {
    ready: Option<SnapFile>,
    generating: bool,
}

pub struct Snapshotter {
    dir: PathBuf,
    backend: Arc<Backend>,
    state: Mutex<State>,
}

impl Snapshotter {
    /// Uses `dir` (created if needed; leftovers of earlier runs are removed).
    pub fn new(dir: PathBuf, backend: Arc<Backend>) -> std::io::Result<Arc<Self>> {
        std::fs::create_dir_all(&dir)?;
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "snap" || e == "tmp") {
                let _ = std::fs::remove_file(path);
            }
        }
        Ok(Arc::new(Self { dir, backend, state: Mutex::default() }))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of a snapshot file named in a raft message.
    pub fn path_of(&self, name: &[u8]) -> Option<PathBuf> {
        let name = std::str::from_utf8(name).ok()?;
        // Only a bare file name of ours: never a path that leaves the directory.
        if name.is_empty() || name.contains('/') || name.starts_with('.') || !name.ends_with(SUFFIX) {
            return None;
        }
        Some(self.dir.join(name))
    }

    /// Where to store a snapshot received from `from` at `index`.
    pub fn receive_path(&self, from: u64, index: u64) -> PathBuf {
        self.dir.join(format!("recv-{from:016x}-{index:016x}{SUFFIX}"))
    }

    /// Called by raft storage, on the raft thread. Returns a ready snapshot at or after
    /// `min_index`; otherwise starts one at the state `at` describes (applied index, its
    /// term, the configuration) and returns None.
    pub fn get_or_start(
        self: &Arc<Self>,
        min_index: u64,
        at: impl FnOnce() -> (u64, u64, ConfState),
    ) -> Option<SnapFile> {
        let mut st = self.state.lock();
        if let Some(r) = &st.ready
            && r.index >= min_index
            && r.path.exists()
        {
            return Some(r.clone());
        }
        if st.generating {
            return None;
        }
        st.generating = true;
        drop(st);
        let (index, term, conf_state) = at();
        let (taken_tx, taken_rx) = std::sync::mpsc::channel();
        let this = self.clone();
        let spawned = std::thread::Builder::new().name("snapshot".into()).spawn(move || {
            let backend = this.backend.clone();
            let snap = backend.db().snapshot();
            let _ = taken_tx.send(());
            let path = this.dir.join(format!("{term:016x}-{index:016x}{SUFFIX}"));
            let result = write_file(&backend, &snap, &path);
            drop(snap);
            let mut st = this.state.lock();
            st.generating = false;
            match result {
                Ok(size) => {
                    tracing::info!(index, term, bytes = size, "created raft snapshot");
                    if let Some(old) = st.ready.replace(SnapFile { index, term, conf_state, path }) {
                        let _ = std::fs::remove_file(old.path);
                    }
                }
                Err(e) => tracing::error!(index, "creating raft snapshot failed: {e}"),
            }
        });
        match spawned {
            // Wait only for the rocksdb snapshot: the file is written in the background.
            Ok(_) => {
                let _ = taken_rx.recv();
            }
            Err(e) => {
                tracing::error!("starting the snapshot thread failed: {e}");
                self.state.lock().generating = false;
            }
        }
        None
    }
}

fn write_file(
    backend: &Backend,
    snap: &rocksdb::SnapshotWithThreadMode<'_, rocksdb::DB>,
    path: &Path,
) -> std::io::Result<u64> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
    let size = snapshot::write_from(backend, snap, |_, chunk| f.write_all(chunk), 64 * 1024)?;
    let f = f.into_inner().map_err(|e| e.into_error())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(size)
}
