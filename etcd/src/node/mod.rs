//! The raft node: one thread that owns the `RawNode`, takes proposals and read requests
//! from the gRPC side over a channel, and runs the Ready loop. Everything that reaches the
//! channel while the previous Ready is being persisted is handled together, so concurrent
//! writes share one fsync (group commit).
//!
//! Membership changes are applied in [`conf_change`]; snapshots from the leader are
//! installed in [`install`].

mod conf_change;
mod install;
mod peer_guard;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeV2, Entry, EntryType, Message};
use raft::{RawNode, StateRole};
use rocksdb::WriteBatch;
use tokio::sync::oneshot;

use crate::apply::{Applier, ApplyResult};
use crate::backend::Backend;
use crate::error::EtcdError;
use crate::membership::Member;
use crate::metrics::Metrics;
use crate::raftlog::RaftLog;

/// Meta key of the last applied raft index (etcd's "consistent_index").
pub const META_CONSISTENT_INDEX: &[u8] = b"consistent_index";

/// Raft log entries kept after log compaction, for followers that lag a little
/// (etcd's SnapshotCatchUpEntries).
pub const CATCH_UP_ENTRIES: u64 = 5000;

/// Most proposals held while no leader is known; more fail at once.
const MAX_PENDING_PROPOSALS: usize = 10_000;

pub enum NodeMsg {
    /// Propose `data` (an encoded InternalRaftRequest whose id is `id`).
    Propose { id: u64, data: Vec<u8>, done: oneshot::Sender<ApplyResult> },
    /// Resolve once this member has applied everything committed when the request arrived
    /// and a quorum confirmed its leadership (ReadIndex).
    ReadIndex { done: ReadWaiter },
    /// A raft message from a peer.
    Raft(Box<Message>),
    /// Propose a membership change; answered with the members once it is applied.
    ProposeConfChange { cc: ConfChange, done: oneshot::Sender<Result<Vec<Member>, EtcdError>> },
    /// The transport could not deliver to this peer.
    ReportUnreachable(u64),
    /// A snapshot sent to `to` arrived (or failed).
    ReportSnapshot { to: u64, ok: bool },
    /// Hand leadership to another voter (MoveLeader).
    TransferLeader(u64),
    /// A peer said this member was removed from the cluster.
    RemovedFromCluster,
    /// The raft progress of every member, as the leader tracks it.
    Progress { done: oneshot::Sender<Vec<PeerProgress>> },
}

/// How far a member's log matches the leader's.
#[derive(Clone, Copy, Debug)]
pub struct PeerProgress {
    pub id: u64,
    pub matched: u64,
    pub is_learner: bool,
}

/// Raft facts other threads read without asking the node.
#[derive(Default)]
pub struct RaftStatus {
    pub id: u64,
    pub leader: AtomicU64,
    pub term: AtomicU64,
    pub commit: AtomicU64,
    pub applied: AtomicU64,
}

impl RaftStatus {
    pub fn leader(&self) -> u64 {
        self.leader.load(Ordering::Acquire)
    }
    pub fn term(&self) -> u64 {
        self.term.load(Ordering::Acquire)
    }
    pub fn is_leader(&self) -> bool {
        self.id != 0 && self.leader() == self.id
    }
}

/// Sends raft messages to peers.
pub trait Transport: Send {
    /// Queues messages; returns the peers they could not be queued for.
    fn send(&mut self, msgs: Vec<Message>) -> Vec<u64>;
    /// The cluster's members changed: connect to new ones, drop removed ones.
    fn update_peers(&mut self, members: &[Member]);
}

pub struct NodeConfig {
    pub id: u64,
    pub tick: Duration,
    pub election_ticks: usize,
    pub snapshot_count: u64,
    /// Added to every lease's TTL when this member becomes leader.
    pub lease_extend: Duration,
    /// The raft index the stored state machine has applied.
    pub applied: u64,
}

/// Entries applied into a batch that is not stored yet.
struct Applied {
    last: u64,
    results: Vec<(u64, ApplyResult)>,
    /// Results of membership changes, by ConfChange id.
    conf_results: Vec<(u64, Result<Vec<Member>, EtcdError>)>,
    /// How many of the results answer proposals made on this member.
    own: i64,
    pending: crate::apply::PendingPublish,
}

/// A client waiting for a linearizable read to be allowed.
type ReadWaiter = oneshot::Sender<Result<(), EtcdError>>;

/// A batch of linearizable reads waiting on one ReadIndex request.
struct ReadBatch {
    ctx: Vec<u8>,
    issued: Instant,
    waiters: Vec<ReadWaiter>,
}

pub struct Node {
    raw: RawNode<RaftLog>,
    applier: Applier,
    backend: Arc<Backend>,
    status: Arc<RaftStatus>,
    metrics: Arc<Metrics>,
    transport: Box<dyn Transport>,
    cfg: NodeConfig,
    /// Clients waiting for their proposal to apply, by request id.
    waiters: HashMap<u64, oneshot::Sender<ApplyResult>>,
    /// Clients waiting for a membership change to apply, by ConfChange id.
    conf_waiters: HashMap<u64, oneshot::Sender<Result<Vec<Member>, EtcdError>>>,
    /// Set once this member has applied its own removal.
    removed: bool,
    /// Set once the process is on its way out after a removal.
    exiting: bool,
    /// Peers the transport could not reach during the current Ready.
    unreachable: Vec<u64>,
    /// Proposals made while no leader was known, proposed again once one is.
    pending: Vec<(u64, Vec<u8>)>,
    /// Reads not yet sent to raft.
    reads_queued: Vec<ReadWaiter>,
    /// The ReadIndex request in flight.
    read_in_flight: Option<ReadBatch>,
    /// Reads whose index is known, waiting for apply to reach it.
    reads_waiting_apply: Vec<(u64, Vec<ReadWaiter>)>,
    read_ctx_seq: u64,
    applied: u64,
    last_log_compaction: u64,
}

impl Node {
    pub fn new(
        raw: RawNode<RaftLog>,
        applier: Applier,
        status: Arc<RaftStatus>,
        metrics: Arc<Metrics>,
        transport: Box<dyn Transport>,
        cfg: NodeConfig,
    ) -> Self {
        let applied = cfg.applied;
        status.applied.store(applied, Ordering::Release);
        Self {
            raw,
            backend: applier.backend.clone(),
            applier,
            status,
            metrics,
            transport,
            cfg,
            waiters: HashMap::new(),
            conf_waiters: HashMap::new(),
            removed: false,
            exiting: false,
            unreachable: Vec::new(),
            pending: Vec::new(),
            reads_queued: Vec::new(),
            read_in_flight: None,
            reads_waiting_apply: Vec::new(),
            read_ctx_seq: 0,
            applied,
            last_log_compaction: applied,
        }
    }

    /// Runs until every sender of `rx` is gone. A failure to persist is fatal: the process
    /// exits rather than acknowledge what it could not store.
    pub fn run(mut self, rx: Receiver<NodeMsg>) {
        let members = self.applier.members.list();
        self.transport.update_peers(&members);
        let single_voter = self.raw.raft.prs().conf().voters().ids().len() == 1
            && self.raw.raft.prs().conf().voters().contains(self.cfg.id);
        if single_voter {
            // Nobody else can win: do not wait an election timeout to lead.
            let _ = self.raw.campaign();
        }
        let mut next_tick = Instant::now() + self.cfg.tick;
        loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(msg) => self.handle(msg),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            // Everything queued meanwhile joins this Ready: one fsync for all of it.
            while let Ok(msg) = rx.try_recv() {
                self.handle(msg);
            }
            if Instant::now() >= next_tick {
                next_tick += self.cfg.tick;
                if next_tick < Instant::now() {
                    next_tick = Instant::now() + self.cfg.tick;
                }
                self.raw.tick();
                self.on_tick();
            }
            self.issue_reads();
            if let Err(e) = self.on_ready() {
                tracing::error!("fatal: {e}");
                std::process::exit(2);
            }
        }
    }

    fn handle(&mut self, msg: NodeMsg) {
        match msg {
            NodeMsg::Propose { id, data, done } => {
                self.waiters.insert(id, done);
                self.propose(id, data);
            }
            NodeMsg::ReadIndex { done } => self.reads_queued.push(done),
            NodeMsg::Raft(m) => {
                if let Some(why) = peer_guard::refusal(&self.raw.raft, &m) {
                    tracing::error!(from = format!("{:x}", m.from), "refusing a raft message: {why}");
                    return;
                }
                if let Err(e) = self.raw.step(*m) {
                    tracing::debug!("dropping raft message: {e}");
                }
            }
            NodeMsg::ProposeConfChange { cc, done } => self.propose_conf_change(cc, done),
            NodeMsg::ReportUnreachable(id) => self.raw.report_unreachable(id),
            NodeMsg::ReportSnapshot { to, ok } => {
                let status = if ok { raft::SnapshotStatus::Finish } else { raft::SnapshotStatus::Failure };
                self.raw.report_snapshot(to, status);
            }
            NodeMsg::TransferLeader(to) => self.raw.transfer_leader(to),
            NodeMsg::RemovedFromCluster => self.on_removed(),
            NodeMsg::Progress { done } => {
                let prs = self.raw.raft.prs();
                let learners = prs.conf().learners();
                let list = prs
                    .iter()
                    .map(|(id, pr)| PeerProgress {
                        id: *id,
                        matched: pr.matched,
                        is_learner: learners.contains(id),
                    })
                    .collect();
                let _ = done.send(list);
            }
        }
    }

    fn propose(&mut self, id: u64, data: Vec<u8>) {
        if self.status.leader() == raft::INVALID_ID {
            if self.pending.len() >= MAX_PENDING_PROPOSALS {
                self.fail(id, EtcdError::NoLeader);
            } else {
                self.pending.push((id, data));
            }
            return;
        }
        self.metrics.proposals_pending.inc();
        match self.raw.propose(Vec::new(), data) {
            Ok(()) => {}
            Err(raft::Error::ProposalDropped) => {
                self.metrics.proposals_pending.dec();
                self.metrics.proposals_failed.inc();
                self.fail(id, EtcdError::NoLeader);
            }
            Err(e) => {
                self.metrics.proposals_pending.dec();
                self.metrics.proposals_failed.inc();
                self.fail(id, EtcdError::Internal(e.to_string()));
            }
        }
    }

    fn fail(&mut self, id: u64, err: EtcdError) {
        if let Some(tx) = self.waiters.remove(&id) {
            let _ = tx.send(Err(err));
        }
    }

    /// Sends messages and tells raft which peers could not be reached.
    /// Hands messages to the transport; peers it could not queue for are reported to raft
    /// after the Ready is advanced (raft-rs must not change between the two).
    fn send(&mut self, msgs: Vec<Message>) {
        if msgs.is_empty() {
            return;
        }
        for id in self.transport.send(msgs) {
            if !self.unreachable.contains(&id) {
                self.unreachable.push(id);
            }
        }
    }

    fn report_unreachable(&mut self) {
        for id in std::mem::take(&mut self.unreachable) {
            self.raw.report_unreachable(id);
        }
    }

    fn on_tick(&mut self) {
        // Clients that gave up leave their waiter behind; forget those.
        self.waiters.retain(|_, tx| !tx.is_closed());
        self.conf_waiters.retain(|_, tx| !tx.is_closed());
        self.reads_queued.retain(|tx| !tx.is_closed());
        // raft drops a ReadIndex while the new leader has not committed in its term; ask
        // again rather than leave the readers hanging.
        let retry_after = self.cfg.tick * 2;
        if let Some(b) = &self.read_in_flight
            && b.issued.elapsed() >= retry_after
        {
            let b = self.read_in_flight.take().expect("checked");
            self.reads_queued.extend(b.waiters);
        }
    }

    fn issue_reads(&mut self) {
        if self.read_in_flight.is_some() || self.reads_queued.is_empty() {
            return;
        }
        if self.status.leader() == raft::INVALID_ID {
            return;
        }
        self.read_ctx_seq += 1;
        let ctx = self.read_ctx_seq.to_be_bytes().to_vec();
        self.raw.read_index(ctx.clone());
        let waiters = std::mem::take(&mut self.reads_queued);
        self.read_in_flight = Some(ReadBatch { ctx, issued: Instant::now(), waiters });
    }

    /// One pass of the Ready loop, in raft-rs's documented order.
    fn on_ready(&mut self) -> Result<(), String> {
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut ready = self.raw.ready();

        // 1. A leader sends appends before persisting them (raft thesis §10.2.1).
        self.send(ready.take_messages());

        // 2. A snapshot from the leader replaces the state machine.
        if !ready.snapshot().is_empty() {
            let snap = ready.snapshot().clone();
            self.install_snapshot(&snap)?;
        }

        // 3. Apply entries committed by earlier Readies.
        self.apply(ready.take_committed_entries())?;

        // 4. Persist new entries and hard state, with one fsync.
        let mut batch = WriteBatch::default();
        let log = self.raw.mut_store();
        log.append(&mut batch, ready.entries());
        if let Some(hs) = ready.hs() {
            log.set_hard_state(&mut batch, hs);
        }
        // A leader that is the only voter commits an entry the moment it is stored: apply
        // it in the same write, which then is the only write this Ready needs.
        let early = if self.sole_voter_leader()
            && ready.entries().iter().all(|e| e.get_entry_type() == EntryType::EntryNormal)
        {
            self.apply_into(&mut batch, ready.entries())?
        } else {
            None
        };
        if !batch.is_empty() {
            fail::fail_point!("raft_before_save", |_| Err("failpoint raft_before_save".into()));
            let start = Instant::now();
            self.backend.write(batch, ready.must_sync()).map_err(|e| format!("persisting raft log: {e}"))?;
            self.metrics.wal_fsync.observe(start.elapsed().as_secs_f64());
            fail::fail_point!("raft_after_save", |_| Err("failpoint raft_after_save".into()));
        }
        if let Some(applied) = early {
            self.finish_apply(applied)?;
        }

        // 5. Messages that had to wait for persistence (votes, append responses).
        self.send(ready.take_persisted_messages());

        if let Some(ss) = ready.ss() {
            self.on_soft_state(ss.leader_id, ss.raft_state);
        }
        self.on_read_states(ready.take_read_states());

        // 6. Advance; entries committed by this Ready come back in the LightReady.
        let mut light = self.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.status.commit.store(commit, Ordering::Release);
        }
        self.send(light.take_messages());
        self.apply(light.take_committed_entries())?;
        self.raw.advance_apply();
        self.report_unreachable();
        self.repropose_pending();
        self.status.term.store(self.raw.raft.term, Ordering::Release);
        Ok(())
    }

    /// True when this member leads and no other member votes: its log is the quorum.
    fn sole_voter_leader(&self) -> bool {
        let voters = self.raw.raft.prs().conf().voters();
        self.raw.raft.state == StateRole::Leader && voters.ids().len() == 1 && voters.contains(self.cfg.id)
    }

    fn on_soft_state(&mut self, leader: u64, role: StateRole) {
        let old = self.status.leader.swap(leader, Ordering::AcqRel);
        if old != leader {
            if leader != raft::INVALID_ID {
                self.metrics.leader_changes.inc();
            }
            self.metrics.has_leader.set(i64::from(leader != raft::INVALID_ID));
            tracing::info!(leader = format!("{leader:x}"), term = self.raw.raft.term, "raft leader changed");
        }
        let leading = role == StateRole::Leader;
        self.metrics.is_leader.set(i64::from(leading));
        if leading && !self.applier.lessor.is_primary() {
            self.applier.lessor.promote(self.cfg.lease_extend);
        } else if !leading && self.applier.lessor.is_primary() {
            self.applier.lessor.demote();
        }
    }

    /// Proposals held while no leader was known go out once one is. Only between Readies:
    /// raft-rs forbids new proposals between `ready()` and `advance()`.
    fn repropose_pending(&mut self) {
        if self.status.leader() != raft::INVALID_ID && !self.pending.is_empty() {
            for (id, data) in std::mem::take(&mut self.pending) {
                self.propose(id, data);
            }
        }
    }

    fn on_read_states(&mut self, states: Vec<raft::ReadState>) {
        for rs in states {
            let matches = self.read_in_flight.as_ref().is_some_and(|b| b.ctx == rs.request_ctx);
            if matches {
                let b = self.read_in_flight.take().expect("checked");
                self.reads_waiting_apply.push((rs.index, b.waiters));
            }
        }
        self.release_reads();
    }

    fn release_reads(&mut self) {
        let applied = self.applied;
        self.reads_waiting_apply.retain_mut(|(index, waiters)| {
            if *index > applied {
                return true;
            }
            for w in waiters.drain(..) {
                let _ = w.send(Ok(()));
            }
            false
        });
    }

    /// Applies committed entries in one backend batch that also records the applied index.
    fn apply(&mut self, entries: Vec<Entry>) -> Result<(), String> {
        let mut batch = WriteBatch::default();
        let Some(applied) = self.apply_into(&mut batch, &entries)? else { return Ok(()) };
        let start = Instant::now();
        self.backend.write(batch, false).map_err(|e| format!("persisting applied state: {e}"))?;
        self.metrics.backend_commit.observe(start.elapsed().as_secs_f64());
        self.finish_apply(applied)
    }

    /// Applies the entries not applied yet into `batch`, with the applied index and commit
    /// index they reach. Nothing is visible until the batch is stored and [`Node::finish_apply`]
    /// runs.
    fn apply_into(&mut self, batch: &mut WriteBatch, entries: &[Entry]) -> Result<Option<Applied>, String> {
        let fresh: Vec<&Entry> = entries.iter().filter(|e| e.index > self.applied).collect();
        let Some(last) = fresh.last().map(|e| e.index) else { return Ok(None) };
        fail::fail_point!("raft_before_apply", |_| Err("failpoint raft_before_apply".into()));
        let mut results = Vec::new();
        let mut conf_results = Vec::new();
        let mut own = 0i64;
        let mut ab = self.applier.begin(batch);
        for e in fresh {
            match e.get_entry_type() {
                EntryType::EntryNormal => {
                    if e.data.is_empty() {
                        continue; // a new leader's empty entry
                    }
                    let (id, result) = ab.apply_entry(&e.data);
                    if self.waiters.contains_key(&id) {
                        own += 1;
                    }
                    results.push((id, result));
                }
                EntryType::EntryConfChange => {
                    // Undecodable: skipped alike by every member (see conf_change::apply).
                    let cc = match ConfChange::parse_from_bytes(&e.data) {
                        Ok(cc) => cc,
                        Err(err) => {
                            tracing::error!(
                                index = e.index,
                                "skipping an undecodable membership change: {err}"
                            );
                            continue;
                        }
                    };
                    let (result, removed_self) = conf_change::apply(
                        &mut self.raw,
                        &self.applier.members,
                        &self.backend,
                        self.cfg.id,
                        ab.batch(),
                        &cc,
                    )?;
                    self.removed |= removed_self;
                    conf_results.push((cc.id, result));
                }
                EntryType::EntryConfChangeV2 => {
                    // Only raft-rs itself writes these (leaving a joint configuration); this
                    // server proposes single-step ConfChanges.
                    let applied = ConfChangeV2::parse_from_bytes(&e.data)
                        .map_err(|err| err.to_string())
                        .and_then(|cc| self.raw.apply_conf_change(&cc).map_err(|err| err.to_string()));
                    match applied {
                        Ok(cs) => self.raw.mut_store().set_conf_state(ab.batch(), cs),
                        Err(err) => {
                            tracing::error!(index = e.index, "skipping a configuration change: {err}")
                        }
                    }
                }
            }
        }
        self.backend.put_meta_u64(ab.batch(), META_CONSISTENT_INDEX, last);
        let commit = self.status.commit.load(Ordering::Acquire).max(last);
        self.raw.mut_store().set_commit(ab.batch(), commit);
        Ok(Some(Applied { last, results, conf_results, own, pending: ab.finish() }))
    }

    /// Makes an applied batch that is now stored visible, and answers its proposers.
    fn finish_apply(&mut self, a: Applied) -> Result<(), String> {
        self.applier.publish(a.pending);
        fail::fail_point!("raft_after_apply", |_| Err("failpoint raft_after_apply".into()));
        let last = a.last;
        self.applied = last;
        self.status.applied.store(last, Ordering::Release);
        self.status.commit.fetch_max(last, Ordering::AcqRel);
        self.metrics.proposals_committed.set(self.status.commit.load(Ordering::Acquire) as i64);
        self.metrics.proposals_applied.set(last as i64);
        self.metrics.proposals_pending.dec_by(a.own);
        for (id, result) in a.results {
            if let Some(tx) = self.waiters.remove(&id) {
                let _ = tx.send(result);
            }
        }
        let membership_changed = !a.conf_results.is_empty();
        for (id, result) in a.conf_results {
            if let Some(tx) = self.conf_waiters.remove(&id) {
                let _ = tx.send(result);
            }
        }
        if membership_changed {
            self.transport.update_peers(&self.applier.members.list());
        }
        self.raw.mut_store().set_applied(last);
        if self.removed {
            self.on_removed();
        }
        self.release_reads();
        self.raw.mut_store().release_cache(last);
        self.maybe_compact_log()
    }

    /// Trims the raft log once `--snapshot-count` entries were applied since the last
    /// trim. The state machine in the backend is itself the snapshot.
    fn maybe_compact_log(&mut self) -> Result<(), String> {
        if self.applied < self.last_log_compaction + self.cfg.snapshot_count.max(1) {
            return Ok(());
        }
        self.last_log_compaction = self.applied;
        let Some(upto) = self.applied.checked_sub(CATCH_UP_ENTRIES) else { return Ok(()) };
        let mut batch = WriteBatch::default();
        self.raw.mut_store().compact(&mut batch, upto).map_err(|e| format!("compacting raft log: {e}"))?;
        // Synced: entries may only leave the log once the applied state they produced is
        // durable, and a synced write makes every earlier (unsynced) apply write durable.
        self.backend.write(batch, true).map_err(|e| format!("compacting raft log: {e}"))?;
        tracing::info!(compacted_to = upto, "compacted raft log");
        Ok(())
    }
}

/// The handle gRPC handlers use to reach the node.
#[derive(Clone)]
pub struct NodeHandle {
    pub tx: Sender<NodeMsg>,
    pub status: Arc<RaftStatus>,
}
