//! One peer's outbound raft traffic: a task that sends whatever is queued as one batch,
//! waits for the answer, and repeats; and the streaming of a snapshot file.

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::Sender as StdSender;
use std::time::Duration;

use proto::etcdpeer::{RaftBatch, SnapshotChunk};
use raft::eraftpb::Message;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{PeerClient, encode};
use crate::metrics::Metrics;
use crate::node::NodeMsg;

/// What a peer answers a member that was removed from the cluster.
pub const REMOVED: &str = "the member has been permanently removed from the cluster";

/// How long one batch may take before it is given up.
const BATCH_TIMEOUT: Duration = Duration::from_secs(3);

/// Most bytes of raft messages sent in one call.
const MAX_BATCH_BYTES: usize = 8 << 20;
/// Snapshot file chunk size.
const SNAPSHOT_CHUNK: usize = 256 * 1024;
/// How long to wait before retrying a peer that failed, at most.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Sends queued raft messages to peer `id` until the queue closes.
pub async fn run(
    id: u64,
    mut client: PeerClient,
    mut rx: mpsc::Receiver<Message>,
    node: StdSender<NodeMsg>,
    metrics: Arc<Metrics>,
) {
    let mut failures: u32 = 0;
    let peer = format!("{id:x}");
    while let Some(first) = rx.recv().await {
        let mut messages = vec![encode(&first)];
        let mut bytes = messages[0].len();
        while bytes < MAX_BATCH_BYTES {
            let Ok(m) = rx.try_recv() else { break };
            let e = encode(&m);
            bytes += e.len();
            messages.push(e);
        }
        // A batch stuck on a dead connection is dropped rather than delivered late: raft
        // sends fresh messages once the peer answers again.
        let mut request = tonic::Request::new(RaftBatch { messages });
        request.set_timeout(BATCH_TIMEOUT);
        match client.raft(request).await {
            Ok(_) => {
                if failures > 0 {
                    tracing::info!(peer, "peer is reachable again");
                }
                failures = 0;
            }
            Err(status)
                if status.code() == tonic::Code::PermissionDenied && status.message().contains(REMOVED) =>
            {
                // The peers know this member was removed: it must stop, as etcd does.
                let _ = node.send(NodeMsg::RemovedFromCluster);
                return;
            }
            Err(status) => {
                failures = failures.saturating_add(1);
                if failures == 1 || failures.is_power_of_two() {
                    tracing::warn!(peer, failures, "sending raft messages failed: {}", status.message());
                }
                metrics.peer_sent_failures.inc();
                // raft stops sending appends to an unreachable peer until it answers again.
                if node.send(NodeMsg::ReportUnreachable(id)).is_err() {
                    return;
                }
                let backoff =
                    Duration::from_millis(50u64.saturating_mul(u64::from(failures))).min(MAX_BACKOFF);
                tokio::time::sleep(backoff).await;
                // What piled up meanwhile is stale: raft will send fresh messages.
                while rx.try_recv().is_ok() {}
            }
        }
    }
}

/// Streams a raft snapshot message and its file to a peer; returns the bytes sent.
pub async fn send_snapshot(mut client: PeerClient, msg: Message, path: &Path) -> std::io::Result<u64> {
    let mut file = tokio::fs::File::open(path).await?;
    let (tx, rx) = mpsc::channel::<SnapshotChunk>(4);
    let first = SnapshotChunk { message: encode(&msg), data: Vec::new() };
    tx.send(first).await.map_err(|_| std::io::Error::other("snapshot stream closed"))?;
    let call = tokio::spawn(async move { client.snapshot(ReceiverStream::new(rx)).await });
    let mut sent = 0u64;
    loop {
        let mut buf = vec![0u8; SNAPSHOT_CHUNK];
        let n = file.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        buf.truncate(n);
        sent += n as u64;
        if tx.send(SnapshotChunk { message: Vec::new(), data: buf }).await.is_err() {
            break; // the call failed; its error is reported below
        }
    }
    drop(tx);
    match call.await {
        Ok(Ok(_)) => Ok(sent),
        Ok(Err(status)) => {
            Err(std::io::Error::other(format!("peer refused the snapshot: {}", status.message())))
        }
        Err(e) => Err(std::io::Error::other(format!("snapshot task: {e}"))),
    }
}
