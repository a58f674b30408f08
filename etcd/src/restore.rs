//! `etcd snapshot restore`: seeds the data dir of a member of a *new* cluster from a file
//! written by `etcdctl snapshot save` against one of our members. Like `etcdctl snapshot
//! restore`, it keeps the keys, their history above the compaction point, and leases, and
//! drops the old cluster's membership and alarms: the new cluster's members come from the
//! flags. Run it once per member with that member's flags, then start the members with
//! `--initial-cluster-state new` and the same `--initial-cluster`.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use rocksdb::WriteBatch;

use crate::backend::{Backend, CF_KEY, CF_LEASE, CF_META};
use crate::config::{ClusterState, Flags};
use crate::mvcc::kvstore::{META_CURRENT_REV, META_FINISHED_COMPACT, META_SCHEDULED_COMPACT};

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The snapshot file (from `etcdctl snapshot save`).
    pub file: PathBuf,
    #[arg(long, default_value = "default")]
    pub name: String,
    /// The data dir to create (default: ${name}.etcd); it must not exist yet.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    #[arg(long)]
    pub initial_cluster: Option<String>,
    #[arg(long, default_value = "etcd-cluster")]
    pub initial_cluster_token: String,
    #[arg(long, default_value = "http://localhost:2380")]
    pub initial_advertise_peer_urls: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("data dir {0} already exists; restore needs a fresh one")]
    DataDirExists(PathBuf),
    #[error("snapshot {path}: {source}")]
    Snapshot {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Start(#[from] crate::StartError),
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
}

/// Meta keys that carry over: the revision counter and compaction progress belong to the
/// key-value history, and the auth state (users, roles, enabled) to the data as etcd
/// restores it; everything else in meta (members, alarms, ids, raft progress) belongs
/// to the old cluster.
const KEPT_META: [&[u8]; 3] = [META_CURRENT_REV, META_SCHEDULED_COMPACT, META_FINISHED_COMPACT];

pub async fn run(args: RestoreArgs) -> Result<PathBuf, RestoreError> {
    // Reuse the server's flag validation for the cluster description.
    let mut argv = vec![
        "etcd".to_string(),
        "--name".into(),
        args.name.clone(),
        "--initial-cluster-token".into(),
        args.initial_cluster_token.clone(),
        "--initial-advertise-peer-urls".into(),
        args.initial_advertise_peer_urls.clone(),
    ];
    if let Some(ic) = &args.initial_cluster {
        argv.extend(["--initial-cluster".to_string(), ic.clone()]);
    }
    if let Some(d) = &args.data_dir {
        argv.extend(["--data-dir".to_string(), d.display().to_string()]);
    }
    let cfg = <Flags as clap::Parser>::try_parse_from(argv)
        .map_err(|e| crate::config::ConfigError::Invalid { flag: "restore", reason: e.to_string() })?
        .into_config()?;
    debug_assert_eq!(cfg.initial_cluster_state, ClusterState::New);
    if cfg.data_dir.exists() {
        return Err(RestoreError::DataDirExists(cfg.data_dir));
    }
    let records = crate::snapshot::read_file(&args.file)
        .map_err(|source| RestoreError::Snapshot { path: args.file.clone(), source })?;

    let db_dir = cfg.data_dir.join("member").join("db");
    crate::create_private_dir(&db_dir)?;
    let backend = Arc::new(Backend::open(&db_dir)?);
    let mut batch = WriteBatch::default();
    let mut kept = 0usize;
    for r in &records {
        let keep = r.cf == CF_KEY
            || r.cf == CF_LEASE
            || (r.cf == CF_META
                && (KEPT_META.contains(&r.key.as_slice()) || crate::auth::is_meta_key(&r.key)));
        if keep {
            batch.put_cf(backend.cf(r.cf), &r.key, &r.value);
            kept += 1;
        }
    }
    backend.write(batch, true)?;
    // Then the new cluster's membership and raft state, exactly as a new member writes them.
    crate::bootstrap::membership(&cfg, &backend, None).await?;
    tracing::info!(records = kept, data_dir = %cfg.data_dir.display(), "restored snapshot");
    Ok(cfg.data_dir)
}
