//! Raft messages from peers that raft-rs would take as proof of a broken log and abort
//! the process on (its `fatal!`s), refused before they are stepped.
//!
//! Upstream etcd trusts its peers as raft does and panics on these; here a malformed or
//! hostile message from a peer, or one from a member whose log was lost, must not stop
//! this member. A refused message is as if the network had dropped it, which raft
//! tolerates. Each refusal is logged at error level: a correct cluster never sends one.

use raft::Raft;
use raft::eraftpb::{Message, MessageType};

use crate::raftlog::RaftLog;

/// Why `m` must not reach raft, or None when it may.
pub fn refusal(raft: &Raft<RaftLog>, m: &Message) -> Option<String> {
    let log = &raft.raft_log;
    let entries = m.get_entries();
    // Forwarded proposals and read requests travel without a term, every other message
    // with one; raft-rs aborts when it would pass on or answer a message that breaks this
    // ("term should (not) be set when sending").
    let termless = matches!(m.get_msg_type(), MessageType::MsgPropose | MessageType::MsgReadIndex);
    if termless != (m.term == 0) {
        let has = if m.term == 0 { "without" } else { "with" };
        return Some(format!("a {:?} {has} a term", m.get_msg_type()));
    }
    // A campaign at the next term would wrap around to term 0.
    if m.term == u64::MAX {
        return Some("a message at the last possible term".into());
    }
    match m.get_msg_type() {
        // raft-rs: "stepped empty MsgProp".
        MessageType::MsgPropose if entries.is_empty() => Some("a proposal without entries".into()),
        MessageType::MsgAppend => {
            // raft-rs reads the term of an index outside its log as 0, so an append "after"
            // such an index with log term 0 matches: entries beyond the last index leave a
            // gap raft-rs aborts on, entries below the first conflict with committed ones.
            // A correct leader's entries after index 0 all have a term.
            if m.index > 0 && m.log_term == 0 {
                return Some(format!("an append after index {} with log term 0", m.index));
            }
            // Entries must follow the message's index one by one: raft-rs slices the
            // batch by index arithmetic.
            if let Some((i, e)) =
                entries.iter().enumerate().find(|(i, e)| Some(e.index) != m.index.checked_add(1 + *i as u64))
            {
                return Some(format!("entry {i} has index {} after index {}", e.index, m.index));
            }
            // A rejection hint is searched for down the log from the message's index;
            // raft-rs aborts if the search leaves the log ("term(i) must be valid").
            if m.term >= raft.term
                && m.index >= log.committed
                && !log.match_term(m.index, m.log_term)
                && log.find_conflict_by_term(m.index.min(log.last_index()), m.log_term).1.is_none()
            {
                return Some(format!(
                    "an append at index {} term {} that no entry of this log (first index {}) can answer",
                    m.index,
                    m.log_term,
                    log.first_index()
                ));
            }
            None
        }
        // raft-rs: "to_commit is out of range [last_index]". From a correct leader this
        // means this member lost acknowledged log entries.
        MessageType::MsgHeartbeat if m.term >= raft.term && m.commit > log.last_index() => Some(format!(
            "a heartbeat committing index {} beyond this log's last index {} (was this member's log lost?)",
            m.commit,
            log.last_index()
        )),
        _ => None,
    }
}
