//! The on-disk backend: one rocksdb database whose column families keep the raft log apart
//! from the state machine. Keeping them in one database (one write-ahead log) is what lets
//! an apply batch cover MVCC data, leases and the applied index atomically, while the raft
//! log can still be truncated and compacted on its own.

use std::path::{Path, PathBuf};

use rocksdb::{
    BlockBasedOptions, BottommostLevelCompaction, Cache, ColumnFamily, ColumnFamilyDescriptor,
    CompactOptions, DB, DBRecoveryMode, IteratorMode, Options, ReadOptions, WriteBatch, WriteOptions,
};

/// Raft log entries, hard state, conf state and the log's compaction point.
pub const CF_RAFT: &str = "raft";
/// MVCC revisions → `mvccpb.KeyValue`, like etcd's "key" bucket.
pub const CF_KEY: &str = "key";
/// Lease id → granted TTL, like etcd's "lease" bucket.
pub const CF_LEASE: &str = "lease";
/// Applied index, revisions, compaction progress, members, alarms.
pub const CF_META: &str = "meta";

/// The column families that hold the state machine (what `dbSize` and quota count).
pub const STATE_CFS: [&str; 3] = [CF_KEY, CF_LEASE, CF_META];

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("opening the database in {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: rocksdb::Error,
    },
    #[error("database: {0}")]
    Db(#[from] rocksdb::Error),
    #[error("database is corrupt: {0}")]
    Corrupt(String),
}

pub type Result<T, E = BackendError> = std::result::Result<T, E>;

pub struct Backend {
    db: DB,
    path: PathBuf,
    /// `--unsafe-no-fsync`: writes asked to be synced are not.
    no_fsync: bool,
}

impl Backend {
    /// Opens (or creates) the database under `dir`.
    pub fn open(dir: &Path) -> Result<Self> {
        Self::open_with(dir, false)
    }

    /// `open`, and with `no_fsync` (etcd's `--unsafe-no-fsync`) no write waits for the disk:
    /// a crash of the machine may then lose acknowledged writes. The power-loss tests use it
    /// to show that they notice.
    pub fn open_with(dir: &Path, no_fsync: bool) -> Result<Self> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        // A torn tail of never-acknowledged writes is dropped; everything synced survives.
        opts.set_wal_recovery_mode(DBRecoveryMode::PointInTime);
        opts.set_max_background_jobs(2);
        opts.set_keep_log_file_num(4);
        // Keys of one write batch share a WAL record; a small WAL limit forces flushes of the
        // raft column family (whose entries are deleted soon after apply) instead of letting
        // the WAL grow with long-dead data.
        opts.set_max_total_wal_size(256 << 20);
        // Overwrite old log files instead of growing new ones: an fdatasync of a file whose
        // size does not change needs no journal commit, which makes every group commit
        // cheaper (etcd preallocates its WAL segments for the same reason).
        opts.set_recycle_log_file_num(4);

        let cache = Cache::new_lru_cache(128 << 20);
        let cf_opts = |name: &str| {
            let mut o = Options::default();
            let mut table = BlockBasedOptions::default();
            table.set_block_cache(&cache);
            table.set_bloom_filter(10.0, false);
            o.set_block_based_table_factory(&table);
            if name == CF_RAFT {
                // Log entries live briefly: a smaller memtable keeps recovery short.
                o.set_write_buffer_size(32 << 20);
            }
            ColumnFamilyDescriptor::new(name, o)
        };
        let cfs = [CF_RAFT, CF_KEY, CF_LEASE, CF_META].map(cf_opts);
        let db = DB::open_cf_descriptors(&opts, dir, cfs)
            .map_err(|source| BackendError::Open { path: dir.to_path_buf(), source })?;
        Ok(Self { db, path: dir.to_path_buf(), no_fsync })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn db(&self) -> &DB {
        &self.db
    }

    /// The handle of a column family created by `open`.
    pub fn cf(&self, name: &str) -> &ColumnFamily {
        // Every name used here is created by `open`; a miss is a programming error.
        self.db.cf_handle(name).unwrap_or_else(|| panic!("column family {name} not opened"))
    }

    /// Writes a batch. With `sync`, returns only once the WAL is on stable storage.
    pub fn write(&self, batch: WriteBatch, sync: bool) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(sync && !self.no_fsync);
        self.db.write_opt(batch, &wo)?;
        Ok(())
    }

    pub fn get(&self, cf: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get_cf(self.cf(cf), key)?)
    }

    pub fn get_meta_u64(&self, key: &[u8]) -> Result<Option<u64>> {
        match self.get(CF_META, key)? {
            None => Ok(None),
            Some(v) => {
                let bytes: [u8; 8] = v.as_slice().try_into().map_err(|_| {
                    BackendError::Corrupt(format!(
                        "meta key {} holds {} bytes, want 8",
                        String::from_utf8_lossy(key),
                        v.len()
                    ))
                })?;
                Ok(Some(u64::from_be_bytes(bytes)))
            }
        }
    }

    pub fn put_meta_u64(&self, batch: &mut WriteBatch, key: &[u8], value: u64) {
        batch.put_cf(self.cf(CF_META), key, value.to_be_bytes());
    }

    /// Visits every pair of a column family in key order, starting at `from`.
    pub fn scan(
        &self,
        cf: &str,
        from: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let mut ro = ReadOptions::default();
        ro.fill_cache(false);
        let iter =
            self.db.iterator_cf_opt(self.cf(cf), ro, IteratorMode::From(from, rocksdb::Direction::Forward));
        for item in iter {
            let (k, v) = item?;
            if !visit(&k, &v)? {
                break;
            }
        }
        Ok(())
    }

    fn int_property(&self, cf: &str, name: &str) -> u64 {
        self.db.property_int_value_cf(self.cf(cf), name).ok().flatten().unwrap_or(0)
    }

    /// Bytes the state machine occupies: table files plus memtables. Like etcd's bbolt file,
    /// it only shrinks when compaction frees data and defragmentation rewrites the files.
    pub fn size(&self) -> u64 {
        STATE_CFS
            .iter()
            .map(|cf| {
                self.int_property(cf, "rocksdb.total-sst-files-size")
                    + self.int_property(cf, "rocksdb.cur-size-all-mem-tables")
            })
            .sum()
    }

    /// Bytes of live data in the state machine (estimate), as etcd's `dbSizeInUse`.
    pub fn size_in_use(&self) -> u64 {
        STATE_CFS
            .iter()
            .map(|cf| {
                self.int_property(cf, "rocksdb.estimate-live-data-size")
                    + self.int_property(cf, "rocksdb.cur-size-all-mem-tables")
            })
            .sum::<u64>()
            .min(self.size())
    }

    /// Rewrites every column family so deleted and overwritten data leaves the disk.
    pub fn defragment(&self) -> Result<()> {
        let mut co = CompactOptions::default();
        co.set_bottommost_level_compaction(BottommostLevelCompaction::Force);
        co.set_exclusive_manual_compaction(true);
        for cf in [CF_RAFT, CF_KEY, CF_LEASE, CF_META] {
            let handle = self.cf(cf);
            self.db.flush_cf(handle)?;
            self.db.compact_range_cf_opt(handle, None::<&[u8]>, None::<&[u8]>, &co);
        }
        Ok(())
    }
}
