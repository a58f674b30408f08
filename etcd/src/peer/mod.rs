//! The peer transport: how members of one cluster reach each other over the peer URLs
//! (2380 by default), plain or over (mutual) TLS.
//!
//! - [`PeerTransport`] is the raft node's [`Transport`]: one [`link`] task per peer sends
//!   raft messages in batches (one in flight per peer, so batches grow under load and
//!   order is kept); snapshots go as a stream of their own.
//! - [`service`] is the gRPC service peers call: raft messages into the node, snapshots
//!   onto disk, and the lease calls only the leader can answer.
//! - [`connect`] builds the channels and stamps every call with this member's identity.

pub mod connect;
pub mod link;
pub mod probe;
pub mod service;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::Sender as StdSender;

use parking_lot::RwLock;
use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};
use tokio::sync::mpsc;

pub use connect::{Identity, PeerClient};

use crate::membership::Member;
use crate::node::{NodeMsg, Transport};
use crate::snapshotter::Snapshotter;

/// Messages queued per peer before more are dropped (raft resends what is lost).
const LINK_QUEUE: usize = 4096;

/// Clients to every peer, shared with the request path (lease calls go to the leader).
#[derive(Default)]
pub struct PeerClients {
    clients: RwLock<HashMap<u64, PeerClient>>,
}

impl PeerClients {
    pub fn get(&self, id: u64) -> Option<PeerClient> {
        self.clients.read().get(&id).cloned()
    }

    pub fn ids(&self) -> Vec<u64> {
        self.clients.read().keys().copied().collect()
    }
}

struct Link {
    urls: Vec<String>,
    tx: mpsc::Sender<Message>,
    task: tokio::task::JoinHandle<()>,
}

pub struct PeerTransport {
    identity: Identity,
    tls: Option<Arc<rustls::ClientConfig>>,
    runtime: tokio::runtime::Handle,
    node: StdSender<NodeMsg>,
    snapshotter: Arc<Snapshotter>,
    clients: Arc<PeerClients>,
    links: HashMap<u64, Link>,
    metrics: Arc<crate::metrics::Metrics>,
}

impl PeerTransport {
    pub fn new(
        identity: Identity,
        tls: Option<Arc<rustls::ClientConfig>>,
        runtime: tokio::runtime::Handle,
        node: StdSender<NodeMsg>,
        snapshotter: Arc<Snapshotter>,
        clients: Arc<PeerClients>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        Self { identity, tls, runtime, node, snapshotter, clients, links: HashMap::new(), metrics }
    }

    fn send_snapshot(&self, msg: Message) -> bool {
        let to = msg.to;
        let Some(client) = self.clients.get(to) else { return false };
        let Some(path) = self.snapshotter.path_of(&msg.get_snapshot().data) else {
            tracing::error!(to = format!("{to:x}"), "raft snapshot names no file of ours");
            return false;
        };
        let node = self.node.clone();
        self.runtime.spawn(async move {
            let index = msg.get_snapshot().get_metadata().index;
            let ok = match link::send_snapshot(client, msg, &path).await {
                Ok(bytes) => {
                    tracing::info!(to = format!("{to:x}"), index, bytes, "sent raft snapshot");
                    true
                }
                Err(e) => {
                    tracing::warn!(to = format!("{to:x}"), index, "sending raft snapshot failed: {e}");
                    false
                }
            };
            let _ = node.send(NodeMsg::ReportSnapshot { to, ok });
        });
        true
    }
}

impl Transport for PeerTransport {
    fn send(&mut self, msgs: Vec<Message>) -> Vec<u64> {
        let mut unreachable = Vec::new();
        for m in msgs {
            let to = m.to;
            if to == self.identity.member_id {
                continue;
            }
            let delivered = if m.get_msg_type() == MessageType::MsgSnapshot {
                self.send_snapshot(m)
            } else {
                match self.links.get(&to) {
                    Some(link) => link.tx.try_send(m).is_ok(),
                    None => false,
                }
            };
            if !delivered && !unreachable.contains(&to) {
                unreachable.push(to);
            }
        }
        unreachable
    }

    fn update_peers(&mut self, members: &[Member]) {
        let mut wanted: HashMap<u64, &Member> = HashMap::new();
        for m in members {
            if m.id != self.identity.member_id {
                wanted.insert(m.id, m);
            }
        }
        // Links to removed members, or whose URLs changed, go.
        let stale: Vec<u64> = self
            .links
            .iter()
            .filter(|(id, l)| wanted.get(id).is_none_or(|m| m.peer_ur_ls != l.urls))
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            if let Some(l) = self.links.remove(&id) {
                l.task.abort();
            }
            self.clients.clients.write().remove(&id);
        }
        for (id, m) in wanted {
            if self.links.contains_key(&id) {
                continue;
            }
            let client = match connect::client(&m.peer_ur_ls, self.tls.clone(), self.identity, &self.runtime)
            {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(peer = format!("{id:x}"), "cannot reach peer: {e}");
                    continue;
                }
            };
            let (tx, rx) = mpsc::channel(LINK_QUEUE);
            let task = self.runtime.spawn(link::run(
                id,
                client.clone(),
                rx,
                self.node.clone(),
                self.metrics.clone(),
            ));
            self.clients.clients.write().insert(id, client);
            self.links.insert(id, Link { urls: m.peer_ur_ls.clone(), tx, task });
            tracing::info!(peer = format!("{id:x}"), urls = ?m.peer_ur_ls, "added peer");
        }
    }
}

/// Encodes a raft message for the wire.
pub fn encode(m: &Message) -> Vec<u8> {
    m.write_to_bytes().expect("raft messages always encode")
}
