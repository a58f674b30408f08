//! A small nftables client of our own, shaped like upstream's knftables: a [`Transaction`]
//! of add/flush/delete operations on one table's chains, rules, sets, maps and elements,
//! applied atomically by an [`Interface`]. [`netlink::Netlink`] writes it to the kernel as
//! one nf_tables netlink batch (no `nft` binary on the sync path); [`fake::Fake`] applies
//! it to an in-memory model with the kernel's semantics and dumps it as `nft` text, for
//! tests that compare whole rulesets.
//!
//! Rules are built from typed [`Stmt`]s (only the statements kube-proxy writes), each of
//! which knows its `nft` syntax and its netlink expressions.

pub mod fake;
pub mod netlink;
mod stmt;

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

pub use stmt::{Dir, Stmt};

/// The nftables address family of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    Ip,
    Ip6,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
        }
    }

    /// The `NFPROTO_*` value.
    pub fn nfproto(self) -> u8 {
        match self {
            Family::Ip => 2,
            Family::Ip6 => 10,
        }
    }

    /// The set key type of an address of this family.
    pub fn addr_type(self) -> KeyType {
        match self {
            Family::Ip => KeyType::Ipv4Addr,
            Family::Ip6 => KeyType::Ipv6Addr,
        }
    }

    pub fn of(ip: &IpAddr) -> Family {
        if ip.is_ipv4() { Family::Ip } else { Family::Ip6 }
    }
}

/// Transport protocols a Service port can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }

    /// Lower-case name, as nft and chain names spell it.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// A base chain's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainType {
    Filter,
    Nat,
}

impl ChainType {
    pub fn name(self) -> &'static str {
        match self {
            ChainType::Filter => "filter",
            ChainType::Nat => "nat",
        }
    }
}

/// A netfilter hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    Prerouting,
    Input,
    Forward,
    Output,
    Postrouting,
}

impl Hook {
    pub fn name(self) -> &'static str {
        match self {
            Hook::Prerouting => "prerouting",
            Hook::Input => "input",
            Hook::Forward => "forward",
            Hook::Output => "output",
            Hook::Postrouting => "postrouting",
        }
    }

    /// `NF_INET_*` hook number.
    pub fn number(self) -> u32 {
        match self {
            Hook::Prerouting => 0,
            Hook::Input => 1,
            Hook::Forward => 2,
            Hook::Output => 3,
            Hook::Postrouting => 4,
        }
    }
}

/// nft's named priorities.
pub const DNAT_PRIORITY: i32 = -100;
pub const SNAT_PRIORITY: i32 = 100;

/// Hook, type and priority of a base chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseChain {
    pub kind: ChainType,
    pub hook: Hook,
    pub priority: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub name: String,
    pub base: Option<BaseChain>,
    pub comment: Option<String>,
}

impl Chain {
    pub fn regular(name: impl Into<String>) -> Chain {
        Chain { name: name.into(), base: None, comment: None }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub chain: String,
    pub stmts: Vec<Stmt>,
    pub comment: Option<String>,
}

/// Types of set keys (concatenated in order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyType {
    Ipv4Addr,
    Ipv6Addr,
    InetProto,
    InetService,
}

impl KeyType {
    pub fn name(self) -> &'static str {
        match self {
            KeyType::Ipv4Addr => "ipv4_addr",
            KeyType::Ipv6Addr => "ipv6_addr",
            KeyType::InetProto => "inet_proto",
            KeyType::InetService => "inet_service",
        }
    }

    /// nft's datatype number, from which it knows how to print a set's keys.
    pub(crate) fn datatype(self) -> u32 {
        match self {
            KeyType::Ipv4Addr => 7,
            KeyType::Ipv6Addr => 8,
            KeyType::InetProto => 12,
            KeyType::InetService => 13,
        }
    }

    /// Bytes of the value itself.
    pub(crate) fn len(self) -> usize {
        match self {
            KeyType::Ipv4Addr => 4,
            KeyType::Ipv6Addr => 16,
            KeyType::InetProto => 1,
            KeyType::InetService => 2,
        }
    }
}

/// A set, or a verdict map when `map` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    pub name: String,
    pub key: Vec<KeyType>,
    /// A verdict map (`type ... : verdict`).
    pub map: bool,
    /// Elements expire (`flags timeout`), with this default timeout.
    pub timeout: Option<Duration>,
    /// Updated from the packet path (`flags dynamic`).
    pub dynamic: bool,
    pub comment: Option<String>,
}

impl Set {
    pub fn new(name: impl Into<String>, key: Vec<KeyType>, comment: Option<&str>) -> Set {
        Set {
            name: name.into(),
            key,
            map: false,
            timeout: None,
            dynamic: false,
            comment: comment.map(String::from),
        }
    }

    pub fn verdict_map(name: impl Into<String>, key: Vec<KeyType>, comment: Option<&str>) -> Set {
        Set { map: true, ..Set::new(name, key, comment) }
    }
}

/// One part of a set element's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyValue {
    Addr(IpAddr),
    Proto(Protocol),
    Port(u16),
}

impl fmt::Display for KeyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyValue::Addr(ip) => write!(f, "{ip}"),
            KeyValue::Proto(p) => f.write_str(p.name()),
            KeyValue::Port(p) => write!(f, "{p}"),
        }
    }
}

/// A verdict, as a rule's last statement or a verdict map's value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Verdict {
    Accept,
    Drop,
    Return,
    Jump(String),
    Goto(String),
}

impl Verdict {
    /// The chain this verdict continues in, if any.
    pub fn target(&self) -> Option<&str> {
        match self {
            Verdict::Jump(c) | Verdict::Goto(c) => Some(c),
            _ => None,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Accept => f.write_str("accept"),
            Verdict::Drop => f.write_str("drop"),
            Verdict::Return => f.write_str("return"),
            Verdict::Jump(c) => write!(f, "jump {c}"),
            Verdict::Goto(c) => write!(f, "goto {c}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Element {
    pub set: String,
    pub key: Vec<KeyValue>,
    /// The verdict, for a map's element.
    pub value: Option<Verdict>,
    pub comment: Option<String>,
}

/// One step of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Creates the table if missing.
    AddTable {
        comment: Option<String>,
    },
    /// Deletes the table with everything in it.
    DeleteTable,
    /// Creates the chain if missing (an existing one is left as it is).
    AddChain(Chain),
    /// Deletes every rule of the chain.
    FlushChain(String),
    /// Deletes the chain, which must be empty and unreferenced.
    DeleteChain(String),
    AddRule(Rule),
    /// Creates the set or map if missing.
    AddSet(Set),
    /// Deletes every element of the set or map.
    FlushSet(String),
    DeleteSet(String),
    /// Adds an element; adding one that exists with the same value is not an error.
    AddElement(Element),
    /// Deletes an element, which must exist.
    DeleteElement(Element),
}

/// Operations on one table, applied all or nothing.
#[derive(Debug, Clone, Default)]
pub struct Transaction {
    pub ops: Vec<Op>,
}

impl Transaction {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, op: Op) {
        self.ops.push(op);
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn add_chain(&mut self, name: impl Into<String>) {
        self.ops.push(Op::AddChain(Chain::regular(name)));
    }

    pub fn flush_chain(&mut self, name: impl Into<String>) {
        self.ops.push(Op::FlushChain(name.into()));
    }

    pub fn add_rule(&mut self, chain: &str, stmts: Vec<Stmt>) {
        self.ops.push(Op::AddRule(Rule { chain: chain.to_owned(), stmts, comment: None }));
    }

    pub fn add_rule_with_comment(&mut self, chain: &str, stmts: Vec<Stmt>, comment: &str) {
        self.ops.push(Op::AddRule(Rule {
            chain: chain.to_owned(),
            stmts,
            comment: Some(comment.to_owned()),
        }));
    }

    /// The transaction in `nft -f` syntax, for logs at high verbosity.
    pub fn render(&self, family: Family, table: &str) -> String {
        let mut out = String::new();
        for op in &self.ops {
            out.push_str(&render_op(op, family, table));
            out.push('\n');
        }
        out
    }
}

/// Why a transaction or a listing failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The netlink socket itself failed (not a verdict of nf_tables on our request).
    #[error("nftables netlink socket: {0}")]
    Socket(#[source] std::io::Error),
    /// nf_tables rejected one message of the batch, so none of it was applied.
    #[error("nftables rejected {what}: {} (errno {errno}){}", std::io::Error::from_raw_os_error(*errno), message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Kernel {
        /// The operation the kernel refused, in nft syntax.
        what: String,
        errno: i32,
        /// The kernel's extended-ACK reason.
        message: Option<String>,
    },
    /// The table does not exist.
    #[error("table {0} not found")]
    NotFound(String),
    /// A value cannot be expressed (an over-long name, say).
    #[error("invalid nftables object: {0}")]
    Invalid(String),
}

impl Error {
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound(_))
            || matches!(self, Error::Kernel { errno, .. } if *errno == libc::ENOENT)
    }
}

/// What kube-proxy needs from nftables: atomic transactions on its table and the names of
/// what is in it.
pub trait Interface: Send {
    fn family(&self) -> Family;
    fn table(&self) -> String;
    /// Applies every operation or none.
    fn run(&mut self, tx: &Transaction) -> Result<(), Error>;
    /// The chains of the table; `Error::NotFound` if the table does not exist.
    fn list_chains(&mut self) -> Result<Vec<String>, Error>;
    /// The sets and maps of the table; `Error::NotFound` if the table does not exist.
    fn list_sets(&mut self) -> Result<Vec<String>, Error>;
}

/// nft's limit on chain, set and table names (NFT_NAME_MAXLEN, with the NUL).
pub const NAME_LENGTH_MAX: usize = 256;

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "'"))
}

/// `{ comment "..." ; }` for objects that have only a comment.
fn comment_block(comment: &Option<String>) -> String {
    match comment {
        Some(c) => format!(" {{ comment {} ; }}", quote(c)),
        None => String::new(),
    }
}

pub(crate) fn render_chain(chain: &Chain) -> String {
    let mut parts = Vec::new();
    if let Some(b) = &chain.base {
        parts.push(format!("type {} hook {} priority {}", b.kind.name(), b.hook.name(), b.priority));
    }
    if let Some(c) = &chain.comment {
        parts.push(format!("comment {}", quote(c)));
    }
    if parts.is_empty() { String::new() } else { format!(" {{ {} ; }}", parts.join(" ; ")) }
}

pub(crate) fn render_set(set: &Set) -> String {
    let mut parts = vec![format!(
        "type {}{}",
        set.key.iter().map(|k| k.name()).collect::<Vec<_>>().join(" . "),
        if set.map { " : verdict" } else { "" }
    )];
    let mut flags = Vec::new();
    if set.dynamic {
        flags.push("dynamic");
    }
    if set.timeout.is_some() {
        flags.push("timeout");
    }
    if !flags.is_empty() {
        parts.push(format!("flags {}", flags.join(",")));
    }
    if let Some(t) = set.timeout {
        parts.push(format!("timeout {}s", t.as_secs()));
    }
    if let Some(c) = &set.comment {
        parts.push(format!("comment {}", quote(c)));
    }
    format!(" {{ {} ; }}", parts.join(" ; "))
}

pub(crate) fn render_element(e: &Element) -> String {
    let key = e.key.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(" . ");
    let value = e.value.as_ref().map(|v| format!(" : {v}")).unwrap_or_default();
    let comment = e.comment.as_ref().map(|c| format!(" comment {}", quote(c))).unwrap_or_default();
    format!("{{ {key}{comment}{value} }}")
}

pub(crate) fn render_rule(rule: &Rule, family: Family) -> String {
    let mut s = rule.stmts.iter().map(|st| st.render(family)).collect::<Vec<_>>().join(" ");
    if let Some(c) = &rule.comment {
        s.push_str(&format!(" comment {}", quote(c)));
    }
    s
}

/// One operation in `nft -f` syntax.
pub fn render_op(op: &Op, family: Family, table: &str) -> String {
    let f = family.name();
    match op {
        Op::AddTable { comment } => format!("add table {f} {table}{}", comment_block(comment)),
        Op::DeleteTable => format!("delete table {f} {table}"),
        Op::AddChain(c) => format!("add chain {f} {table} {}{}", c.name, render_chain(c)),
        Op::FlushChain(c) => format!("flush chain {f} {table} {c}"),
        Op::DeleteChain(c) => format!("delete chain {f} {table} {c}"),
        Op::AddRule(r) => format!("add rule {f} {table} {} {}", r.chain, render_rule(r, family)),
        Op::AddSet(s) => {
            format!("add {} {f} {table} {}{}", if s.map { "map" } else { "set" }, s.name, render_set(s))
        }
        Op::FlushSet(s) => format!("flush set {f} {table} {s}"),
        Op::DeleteSet(s) => format!("delete set {f} {table} {s}"),
        Op::AddElement(e) => format!("add element {f} {table} {} {}", e.set, render_element(e)),
        Op::DeleteElement(e) => {
            let key = e.key.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(" . ");
            format!("delete element {f} {table} {} {{ {key} }}", e.set)
        }
    }
}
