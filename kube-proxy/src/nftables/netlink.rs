//! Transactions written to the kernel as nf_tables netlink batches: BATCH_BEGIN, one
//! message per object (tables, chains, rules with their expressions, sets, elements),
//! BATCH_END, sent as one datagram, so that nf_tables commits all of it or none. Every
//! failure in the batch comes back as an `NLMSG_ERROR` naming the message's sequence
//! number; the last message asks for an ACK, so its answer marks the end of the replies.

use std::collections::HashMap;
use std::io;
use std::time::{Duration, Instant};

use super::{Element, Error, Family, Interface, KeyValue, Op, Rule, Set, Transaction, Verdict, render_op};
use crate::netlink::{self as nl, Builder, Messages, Socket};

const NETLINK_NETFILTER: libc::c_int = 12;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 16;
const NFNL_MSG_BATCH_END: u16 = 17;

const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_GETTABLE: u16 = 1;
const NFT_MSG_DELTABLE: u16 = 2;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_GETCHAIN: u16 = 4;
const NFT_MSG_DELCHAIN: u16 = 5;
const NFT_MSG_NEWRULE: u16 = 6;
const NFT_MSG_DELRULE: u16 = 8;
const NFT_MSG_NEWSET: u16 = 9;
const NFT_MSG_GETSET: u16 = 10;
const NFT_MSG_DELSET: u16 = 11;
const NFT_MSG_NEWSETELEM: u16 = 12;
const NFT_MSG_DELSETELEM: u16 = 14;

const NFTA_TABLE_NAME: u16 = 1;
const NFTA_TABLE_FLAGS: u16 = 2;
const NFTA_TABLE_USERDATA: u16 = 6;

const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_CHAIN_USERDATA: u16 = 12;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;

const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_RULE_USERDATA: u16 = 7;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;

const NFTA_SET_TABLE: u16 = 1;
const NFTA_SET_NAME: u16 = 2;
const NFTA_SET_FLAGS: u16 = 3;
const NFTA_SET_KEY_TYPE: u16 = 4;
const NFTA_SET_KEY_LEN: u16 = 5;
const NFTA_SET_DATA_TYPE: u16 = 6;
const NFTA_SET_DATA_LEN: u16 = 7;
const NFTA_SET_ID: u16 = 10;
const NFTA_SET_TIMEOUT: u16 = 11;
const NFTA_SET_USERDATA: u16 = 13;

const NFT_SET_MAP: u32 = 0x8;
const NFT_SET_TIMEOUT: u32 = 0x10;
const NFT_SET_EVAL: u32 = 0x20;
const NFT_DATA_VERDICT: u32 = 0xffff_ff00;
/// Concatenated datatypes: each part shifts the ones before it left by this many bits.
const TYPE_BITS: u32 = 6;

const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
const NFTA_SET_ELEM_LIST_SET: u16 = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
const NFTA_SET_ELEM_KEY: u16 = 1;
const NFTA_SET_ELEM_DATA: u16 = 2;
const NFTA_SET_ELEM_USERDATA: u16 = 6;

const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;
const NFTA_VERDICT_CHAIN: u16 = 2;

const NF_DROP: i32 = 0;
const NF_ACCEPT: i32 = 1;
const NFT_JUMP: i32 = -3;
const NFT_GOTO: i32 = -4;
const NFT_RETURN: i32 = -5;

/// libnftnl's user-data TLVs, read back by `nft list` for comments.
const UDATA_COMMENT: u8 = 0; // NFTNL_UDATA_{TABLE,CHAIN,RULE}_COMMENT, NFTNL_UDATA_SET_ELEM_COMMENT
const UDATA_SET_COMMENT: u8 = 7;

/// How long the kernel may take to answer a batch; a full sync of a large cluster
/// commits hundreds of thousands of objects.
const REPLY_TIMEOUT: Duration = Duration::from_secs(120);

/// A register: the verdict register, the first 128-bit one, or a 32-bit one (index from
/// NFT_REG32_00), as concatenations need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reg {
    Verdict,
    R1,
    R32(u32),
}

impl Reg {
    fn number(self) -> u32 {
        match self {
            Reg::Verdict => 0,
            Reg::R1 => 1,
            Reg::R32(i) => 8 + i,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Neq,
}

/// nf_tables expressions, as the kernel executes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    Payload {
        dreg: Reg,
        base: u32,
        offset: u32,
        len: u32,
    },
    MetaLoad {
        key: u32,
        dreg: Reg,
    },
    MetaSet {
        key: u32,
        sreg: Reg,
    },
    CtState {
        dreg: Reg,
    },
    Cmp {
        sreg: Reg,
        op: CmpOp,
        data: Vec<u8>,
    },
    /// `reg = (reg & mask) ^ xor`
    Bitwise {
        reg: Reg,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    /// A named set lookup (a match), or with `verdict` a verdict map lookup. There are
    /// deliberately no anonymous sets: binding one walks the kernel's whole pending
    /// transaction (`nft_set_trans_bind`), which made a sync with one per Service quadratic.
    Lookup {
        sreg: Reg,
        set: String,
        verdict: bool,
    },
    Immediate {
        dreg: Reg,
        data: Vec<u8>,
    },
    Verdict(Verdict),
    NumgenRandom {
        dreg: Reg,
        modulus: u32,
    },
    Fib {
        dreg: Reg,
        result: u32,
        flags: u32,
    },
    Dnat {
        family: Family,
        addr: Reg,
        proto: Reg,
    },
    Masq {
        flags: u32,
    },
    Reject {
        code: u8,
    },
    DynsetUpdate {
        sreg: Reg,
        set: String,
    },
}

/// Writes transactions to one table of one family through nf_tables netlink.
pub struct Netlink {
    family: Family,
    table: String,
    sock: Socket,
    /// Transaction-unique ids (NFTA_SET_ID) of the sets a batch creates.
    next_set_id: u32,
}

impl Netlink {
    pub fn new(family: Family, table: &str) -> Result<Netlink, Error> {
        let sock = Socket::open(NETLINK_NETFILTER).map_err(Error::Socket)?;
        Ok(Netlink { family, table: table.to_owned(), sock, next_set_id: 0 })
    }

    fn msg_type(msg: u16) -> u16 {
        (NFNL_SUBSYS_NFTABLES << 8) | msg
    }

    /// Whether the table exists.
    fn table_exists(&mut self) -> Result<bool, Error> {
        let seq = self.sock.next_seq();
        let mut b = Builder::new();
        b.begin_nf(
            Self::msg_type(NFT_MSG_GETTABLE),
            nl::NLM_F_REQUEST | nl::NLM_F_ACK,
            seq,
            self.family.nfproto(),
            0,
        );
        b.attr_str(NFTA_TABLE_NAME, &self.table);
        b.end();
        self.sock.send(&b.buf).map_err(Error::Socket)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut found = false;
        loop {
            let data = self.sock.recv(deadline).map_err(Error::Socket)?.to_vec();
            for msg in Messages::new(&data) {
                let msg = msg.map_err(Error::Socket)?;
                if msg.seq != seq {
                    continue;
                }
                if msg.ty == nl::NLMSG_ERROR {
                    let err = msg.error().map_err(Error::Socket)?;
                    return match err.errno {
                        0 => Ok(found),
                        libc::ENOENT => Ok(false),
                        errno => Err(Error::Kernel {
                            what: format!("get table {}", self.table),
                            errno,
                            message: err.message,
                        }),
                    };
                }
                found = true;
            }
        }
    }

    /// Names of the objects a dump of `msg` returns for our table.
    fn list(&mut self, msg: u16, table_attr: u16, name_attr: u16) -> Result<Vec<String>, Error> {
        if !self.table_exists()? {
            return Err(Error::NotFound(self.table.clone()));
        }
        for _ in 0..5 {
            let seq = self.sock.next_seq();
            let mut b = Builder::new();
            b.begin_nf(
                Self::msg_type(msg),
                nl::NLM_F_REQUEST | nl::NLM_F_DUMP,
                seq,
                self.family.nfproto(),
                0,
            );
            b.attr_str(table_attr, &self.table);
            b.end();
            let mut names = Vec::new();
            let table = self.table.clone();
            let res = self.sock.dump(&b.buf, Duration::from_secs(60), |m| {
                let mut t = None;
                let mut n = None;
                for a in m.nf_attrs() {
                    if a.ty == table_attr {
                        t = Some(a.str());
                    } else if a.ty == name_attr {
                        n = Some(a.str());
                    }
                }
                if t.as_deref() == Some(table.as_str())
                    && let Some(n) = n
                {
                    names.push(n);
                }
                Ok(())
            });
            match res {
                Ok(()) => return Ok(names),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    return Err(Error::NotFound(self.table.clone()));
                }
                Err(e) => return Err(Error::Socket(e)),
            }
        }
        Err(Error::Socket(io::Error::other("netlink dump kept being interrupted by concurrent changes")))
    }
}

impl Interface for Netlink {
    fn family(&self) -> Family {
        self.family
    }

    fn table(&self) -> String {
        self.table.clone()
    }

    fn run(&mut self, tx: &Transaction) -> Result<(), Error> {
        if tx.is_empty() {
            return Ok(());
        }
        let mut enc = Encoder {
            b: Builder::new(),
            family: self.family,
            table: &self.table,
            seq: 0,
            what: HashMap::new(),
            next_set_id: &mut self.next_set_id,
            last_msg_start: 0,
        };
        // Sequence numbers are consecutive from the batch's first; replies name them.
        let first = self.sock.next_seq();
        enc.seq = first;
        enc.batch_marker(NFNL_MSG_BATCH_BEGIN);
        for (i, op) in tx.ops.iter().enumerate() {
            enc.op(op, i)?;
        }
        // The last real message asks for an ACK: its reply comes after every error.
        let last_seq = enc.seq;
        enc.set_ack_on_last();
        enc.batch_marker(NFNL_MSG_BATCH_END);
        let Encoder { b, what, seq, .. } = enc;
        // Keep the socket's counter past the sequence numbers this batch used.
        while self.sock.next_seq() != seq {}
        self.sock.send(&b.buf).map_err(Error::Socket)?;
        drop(b);

        let deadline = Instant::now() + REPLY_TIMEOUT;
        let mut first_error: Option<Error> = None;
        loop {
            let data = self.sock.recv(deadline).map_err(Error::Socket)?.to_vec();
            for msg in Messages::new(&data) {
                let msg = msg.map_err(Error::Socket)?;
                if msg.ty != nl::NLMSG_ERROR {
                    continue;
                }
                let err = msg.error().map_err(Error::Socket)?;
                if err.seq < first || err.seq > last_seq {
                    continue; // a stray reply to an earlier request
                }
                if err.errno != 0 && first_error.is_none() {
                    let op = what.get(&err.seq).map(|i| render_op(&tx.ops[*i], self.family, &self.table));
                    first_error = Some(Error::Kernel {
                        what: op.unwrap_or_else(|| format!("message {} of the batch", err.seq - first)),
                        errno: err.errno,
                        message: err.message,
                    });
                }
                if err.seq == last_seq {
                    return match first_error {
                        Some(e) => Err(e),
                        None => Ok(()),
                    };
                }
            }
        }
    }

    fn list_chains(&mut self) -> Result<Vec<String>, Error> {
        self.list(NFT_MSG_GETCHAIN, NFTA_CHAIN_TABLE, NFTA_CHAIN_NAME)
    }

    fn list_sets(&mut self) -> Result<Vec<String>, Error> {
        self.list(NFT_MSG_GETSET, NFTA_SET_TABLE, NFTA_SET_NAME)
    }
}

/// Builds one batch.
struct Encoder<'a> {
    b: Builder,
    family: Family,
    table: &'a str,
    /// Sequence number of the last message begun.
    seq: u32,
    /// Which operation each message came from, for error reports.
    what: HashMap<u32, usize>,
    next_set_id: &'a mut u32,
    /// Offset of the last real message, to set its ACK flag.
    last_msg_start: usize,
}

impl Encoder<'_> {
    fn batch_marker(&mut self, ty: u16) {
        self.seq = self.seq.wrapping_add(1);
        self.b.begin_nf(ty, nl::NLM_F_REQUEST, self.seq, libc::AF_UNSPEC as u8, NFNL_SUBSYS_NFTABLES);
        self.b.end();
    }

    fn begin(&mut self, msg: u16, flags: u16, op: usize) {
        self.seq = self.seq.wrapping_add(1);
        self.what.insert(self.seq, op);
        self.last_msg_start = self.b.buf.len();
        self.b.begin_nf(
            Netlink::msg_type(msg),
            nl::NLM_F_REQUEST | flags,
            self.seq,
            self.family.nfproto(),
            0,
        );
    }

    fn set_ack_on_last(&mut self) {
        let start = self.last_msg_start;
        let flags = u16::from_ne_bytes([self.b.buf[start + 6], self.b.buf[start + 7]]) | nl::NLM_F_ACK;
        self.b.buf[start + 6..start + 8].copy_from_slice(&flags.to_ne_bytes());
    }

    fn op(&mut self, op: &Op, i: usize) -> Result<(), Error> {
        match op {
            Op::AddTable { comment } => {
                self.begin(NFT_MSG_NEWTABLE, nl::NLM_F_CREATE, i);
                self.b.attr_str(NFTA_TABLE_NAME, self.table);
                self.b.attr_be32(NFTA_TABLE_FLAGS, 0);
                if let Some(c) = comment {
                    self.b.attr(NFTA_TABLE_USERDATA, &udata(UDATA_COMMENT, &cstr(c)));
                }
                self.b.end();
            }
            Op::DeleteTable => {
                self.begin(NFT_MSG_DELTABLE, 0, i);
                self.b.attr_str(NFTA_TABLE_NAME, self.table);
                self.b.end();
            }
            Op::AddChain(chain) => {
                check_name(&chain.name)?;
                self.begin(NFT_MSG_NEWCHAIN, nl::NLM_F_CREATE, i);
                self.b.attr_str(NFTA_CHAIN_TABLE, self.table);
                self.b.attr_str(NFTA_CHAIN_NAME, &chain.name);
                if let Some(base) = &chain.base {
                    self.b.nest_begin(NFTA_CHAIN_HOOK);
                    self.b.attr_be32(NFTA_HOOK_HOOKNUM, base.hook.number());
                    self.b.attr_be32(NFTA_HOOK_PRIORITY, base.priority as u32);
                    self.b.nest_end();
                    self.b.attr_be32(NFTA_CHAIN_POLICY, NF_ACCEPT as u32);
                    self.b.attr_str(NFTA_CHAIN_TYPE, base.kind.name());
                }
                if let Some(c) = &chain.comment {
                    self.b.attr(NFTA_CHAIN_USERDATA, &udata(UDATA_COMMENT, &cstr(c)));
                }
                self.b.end();
            }
            Op::FlushChain(name) => {
                self.begin(NFT_MSG_DELRULE, 0, i);
                self.b.attr_str(NFTA_RULE_TABLE, self.table);
                self.b.attr_str(NFTA_RULE_CHAIN, name);
                self.b.end();
            }
            Op::DeleteChain(name) => {
                self.begin(NFT_MSG_DELCHAIN, 0, i);
                self.b.attr_str(NFTA_CHAIN_TABLE, self.table);
                self.b.attr_str(NFTA_CHAIN_NAME, name);
                self.b.end();
            }
            Op::AddRule(rule) => self.rule(rule, i)?,
            Op::AddSet(set) => {
                check_name(&set.name)?;
                self.set(set, i);
            }
            Op::FlushSet(name) => {
                self.begin(NFT_MSG_DELSETELEM, 0, i);
                self.b.attr_str(NFTA_SET_ELEM_LIST_TABLE, self.table);
                self.b.attr_str(NFTA_SET_ELEM_LIST_SET, name);
                self.b.end();
            }
            Op::DeleteSet(name) => {
                self.begin(NFT_MSG_DELSET, 0, i);
                self.b.attr_str(NFTA_SET_TABLE, self.table);
                self.b.attr_str(NFTA_SET_NAME, name);
                self.b.end();
            }
            Op::AddElement(e) => {
                self.begin(NFT_MSG_NEWSETELEM, nl::NLM_F_CREATE, i);
                self.b.attr_str(NFTA_SET_ELEM_LIST_TABLE, self.table);
                self.b.attr_str(NFTA_SET_ELEM_LIST_SET, &e.set);
                self.b.nest_begin(NFTA_SET_ELEM_LIST_ELEMENTS);
                self.element(e, true);
                self.b.nest_end();
                self.b.end();
            }
            Op::DeleteElement(e) => {
                self.begin(NFT_MSG_DELSETELEM, 0, i);
                self.b.attr_str(NFTA_SET_ELEM_LIST_TABLE, self.table);
                self.b.attr_str(NFTA_SET_ELEM_LIST_SET, &e.set);
                self.b.nest_begin(NFTA_SET_ELEM_LIST_ELEMENTS);
                self.element(e, false);
                self.b.nest_end();
                self.b.end();
            }
        }
        Ok(())
    }

    fn element(&mut self, e: &Element, with_value: bool) {
        self.b.nest_begin(NFTA_LIST_ELEM);
        self.b.nest_begin(NFTA_SET_ELEM_KEY);
        self.b.attr(NFTA_DATA_VALUE, &key_bytes(&e.key));
        self.b.nest_end();
        if with_value {
            if let Some(v) = &e.value {
                self.b.nest_begin(NFTA_SET_ELEM_DATA);
                self.verdict(v);
                self.b.nest_end();
            }
            if let Some(c) = &e.comment {
                self.b.attr(NFTA_SET_ELEM_USERDATA, &udata(UDATA_COMMENT, &cstr(c)));
            }
        }
        self.b.nest_end();
    }

    fn verdict(&mut self, v: &Verdict) {
        verdict_attr(&mut self.b, v);
    }

    fn set(&mut self, set: &Set, i: usize) {
        let mut flags = 0;
        if set.map {
            flags |= NFT_SET_MAP;
        }
        if set.timeout.is_some() {
            flags |= NFT_SET_TIMEOUT;
        }
        if set.dynamic {
            flags |= NFT_SET_EVAL;
        }
        let key_type = set.key.iter().fold(0u32, |acc, k| (acc << TYPE_BITS) | k.datatype());
        let key_len: usize = set.key.iter().map(|k| padded(k.len())).sum();
        self.begin(NFT_MSG_NEWSET, nl::NLM_F_CREATE, i);
        self.b.attr_str(NFTA_SET_TABLE, self.table);
        self.b.attr_str(NFTA_SET_NAME, &set.name);
        self.b.attr_be32(NFTA_SET_FLAGS, flags);
        self.b.attr_be32(NFTA_SET_KEY_TYPE, key_type);
        self.b.attr_be32(NFTA_SET_KEY_LEN, key_len as u32);
        if set.map {
            self.b.attr_be32(NFTA_SET_DATA_TYPE, NFT_DATA_VERDICT);
            self.b.attr_be32(NFTA_SET_DATA_LEN, 0);
        }
        if let Some(t) = set.timeout {
            self.b.attr_be64(NFTA_SET_TIMEOUT, t.as_millis() as u64);
        }
        *self.next_set_id = self.next_set_id.wrapping_add(1);
        self.b.attr_be32(NFTA_SET_ID, *self.next_set_id);
        if let Some(c) = &set.comment {
            self.b.attr(NFTA_SET_USERDATA, &udata(UDATA_SET_COMMENT, &cstr(c)));
        }
        self.b.end();
    }

    fn rule(&mut self, rule: &Rule, i: usize) -> Result<(), Error> {
        let mut exprs = Vec::new();
        for stmt in &rule.stmts {
            stmt.lower(self.family, &mut exprs);
        }
        self.begin(NFT_MSG_NEWRULE, nl::NLM_F_CREATE | nl::NLM_F_APPEND, i);
        self.b.attr_str(NFTA_RULE_TABLE, self.table);
        self.b.attr_str(NFTA_RULE_CHAIN, &rule.chain);
        self.b.nest_begin(NFTA_RULE_EXPRESSIONS);
        for e in &exprs {
            self.expr(e);
        }
        self.b.nest_end();
        if let Some(c) = &rule.comment {
            self.b.attr(NFTA_RULE_USERDATA, &udata(UDATA_COMMENT, &cstr(c)));
        }
        if self.b.message_len() > u16::MAX as usize {
            return Err(Error::Invalid(format!("rule in chain {} is too large", rule.chain)));
        }
        self.b.end();
        Ok(())
    }

    fn expr(&mut self, e: &Expr) {
        const DREG: u16 = 1;
        let b = &mut self.b;
        let begin = |b: &mut Builder, name: &str| {
            b.nest_begin(NFTA_LIST_ELEM);
            b.attr_str(NFTA_EXPR_NAME, name);
            b.nest_begin(NFTA_EXPR_DATA);
        };
        let end = |b: &mut Builder| {
            b.nest_end();
            b.nest_end();
        };
        let data_value = |b: &mut Builder, ty: u16, v: &[u8]| {
            b.nest_begin(ty);
            b.attr(NFTA_DATA_VALUE, v);
            b.nest_end();
        };
        match e {
            Expr::Payload { dreg, base, offset, len } => {
                begin(b, "payload");
                b.attr_be32(DREG, dreg.number()); // NFTA_PAYLOAD_DREG
                b.attr_be32(2, *base); // NFTA_PAYLOAD_BASE
                b.attr_be32(3, *offset); // NFTA_PAYLOAD_OFFSET
                b.attr_be32(4, *len); // NFTA_PAYLOAD_LEN
                end(b);
            }
            Expr::MetaLoad { key, dreg } => {
                begin(b, "meta");
                b.attr_be32(1, dreg.number()); // NFTA_META_DREG
                b.attr_be32(2, *key); // NFTA_META_KEY
                end(b);
            }
            Expr::MetaSet { key, sreg } => {
                begin(b, "meta");
                b.attr_be32(2, *key); // NFTA_META_KEY
                b.attr_be32(3, sreg.number()); // NFTA_META_SREG
                end(b);
            }
            Expr::CtState { dreg } => {
                begin(b, "ct");
                b.attr_be32(1, dreg.number()); // NFTA_CT_DREG
                b.attr_be32(2, 0); // NFTA_CT_KEY: NFT_CT_STATE
                end(b);
            }
            Expr::Cmp { sreg, op, data } => {
                begin(b, "cmp");
                b.attr_be32(1, sreg.number()); // NFTA_CMP_SREG
                b.attr_be32(2, if *op == CmpOp::Eq { 0 } else { 1 }); // NFTA_CMP_OP
                data_value(b, 3, data); // NFTA_CMP_DATA
                end(b);
            }
            Expr::Bitwise { reg, mask, xor } => {
                begin(b, "bitwise");
                b.attr_be32(1, reg.number()); // NFTA_BITWISE_SREG
                b.attr_be32(2, reg.number()); // NFTA_BITWISE_DREG
                b.attr_be32(3, mask.len() as u32); // NFTA_BITWISE_LEN
                data_value(b, 4, mask); // NFTA_BITWISE_MASK
                data_value(b, 5, xor); // NFTA_BITWISE_XOR
                end(b);
            }
            Expr::Lookup { sreg, set, verdict } => {
                begin(b, "lookup");
                b.attr_str(1, set); // NFTA_LOOKUP_SET
                b.attr_be32(2, sreg.number()); // NFTA_LOOKUP_SREG
                if *verdict {
                    b.attr_be32(3, Reg::Verdict.number()); // NFTA_LOOKUP_DREG
                }
                end(b);
            }
            Expr::Immediate { dreg, data } => {
                begin(b, "immediate");
                b.attr_be32(1, dreg.number()); // NFTA_IMMEDIATE_DREG
                data_value(b, 2, data); // NFTA_IMMEDIATE_DATA
                end(b);
            }
            Expr::Verdict(v) => {
                begin(b, "immediate");
                b.attr_be32(1, Reg::Verdict.number()); // NFTA_IMMEDIATE_DREG
                b.nest_begin(2); // NFTA_IMMEDIATE_DATA
                verdict_attr(b, v);
                b.nest_end();
                end(b);
            }
            Expr::NumgenRandom { dreg, modulus } => {
                begin(b, "numgen");
                b.attr_be32(1, dreg.number()); // NFTA_NG_DREG
                b.attr_be32(2, *modulus); // NFTA_NG_MODULUS
                b.attr_be32(3, 1); // NFTA_NG_TYPE: NFT_NG_RANDOM
                b.attr_be32(4, 0); // NFTA_NG_OFFSET
                end(b);
            }
            Expr::Fib { dreg, result, flags } => {
                begin(b, "fib");
                b.attr_be32(1, dreg.number()); // NFTA_FIB_DREG
                b.attr_be32(2, *result); // NFTA_FIB_RESULT
                b.attr_be32(3, *flags); // NFTA_FIB_FLAGS
                end(b);
            }
            Expr::Dnat { family, addr, proto } => {
                begin(b, "nat");
                b.attr_be32(1, 1); // NFTA_NAT_TYPE: NFT_NAT_DNAT
                b.attr_be32(2, family.nfproto() as u32); // NFTA_NAT_FAMILY
                b.attr_be32(3, addr.number()); // NFTA_NAT_REG_ADDR_MIN
                b.attr_be32(5, proto.number()); // NFTA_NAT_REG_PROTO_MIN
                end(b);
            }
            Expr::Masq { flags } => {
                begin(b, "masq");
                b.attr_be32(1, *flags); // NFTA_MASQ_FLAGS
                end(b);
            }
            Expr::Reject { code } => {
                begin(b, "reject");
                b.attr_be32(1, 0); // NFTA_REJECT_TYPE: NFT_REJECT_ICMP_UNREACH
                b.attr_u8(2, *code); // NFTA_REJECT_ICMP_CODE
                end(b);
            }
            Expr::DynsetUpdate { sreg, set } => {
                begin(b, "dynset");
                b.attr_str(1, set); // NFTA_DYNSET_SET_NAME
                b.attr_be32(3, 1); // NFTA_DYNSET_OP: NFT_DYNSET_OP_UPDATE
                b.attr_be32(4, sreg.number()); // NFTA_DYNSET_SREG_KEY
                end(b);
            }
        }
    }
}

fn verdict_attr(b: &mut Builder, v: &Verdict) {
    let (code, chain) = match v {
        Verdict::Accept => (NF_ACCEPT, None),
        Verdict::Drop => (NF_DROP, None),
        Verdict::Return => (NFT_RETURN, None),
        Verdict::Jump(c) => (NFT_JUMP, Some(c)),
        Verdict::Goto(c) => (NFT_GOTO, Some(c)),
    };
    b.nest_begin(NFTA_DATA_VERDICT);
    b.attr_be32(NFTA_VERDICT_CODE, code as u32);
    if let Some(c) = chain {
        b.attr_str(NFTA_VERDICT_CHAIN, c);
    }
    b.nest_end();
}

/// A set element's key: each part in network byte order, padded to 4 bytes, as the
/// registers a concatenation is loaded into hold it.
pub(crate) fn key_bytes(key: &[KeyValue]) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    for k in key {
        let start = out.len();
        match k {
            KeyValue::Addr(ip) => out.extend_from_slice(&super::stmt::addr_bytes(ip)),
            KeyValue::Proto(p) => out.push(p.number()),
            KeyValue::Port(p) => out.extend_from_slice(&p.to_be_bytes()),
        }
        let len = out.len() - start;
        out.resize(start + padded(len), 0);
    }
    out
}

fn padded(len: usize) -> usize {
    (len + 3) & !3
}

fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// One libnftnl user-data TLV (type, length, value). Comments are cut to what a TLV holds.
fn udata(ty: u8, value: &[u8]) -> Vec<u8> {
    let value = &value[..value.len().min(255)];
    let mut v = vec![ty, value.len() as u8];
    v.extend_from_slice(value);
    v
}

fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty() || name.len() >= super::NAME_LENGTH_MAX {
        return Err(Error::Invalid(format!(
            "name {name:?} must be 1 to {} bytes",
            super::NAME_LENGTH_MAX - 1
        )));
    }
    Ok(())
}

/// Deletes the table `name` of `family` if it exists (everything kube-proxy wrote in that
/// family). Returns whether there was one.
pub fn delete_table(family: Family, name: &str) -> Result<bool, Error> {
    let mut nft = Netlink::new(family, name)?;
    if !nft.table_exists()? {
        return Ok(false);
    }
    let mut tx = Transaction::new();
    tx.push(Op::DeleteTable);
    match nft.run(&tx) {
        Ok(()) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::super::KeyType;
    use super::*;

    #[test]
    fn keys_are_padded_per_part() {
        let key = key_bytes(&[
            KeyValue::Addr("10.0.0.1".parse().unwrap()),
            KeyValue::Proto(super::super::Protocol::Tcp),
            KeyValue::Port(80),
        ]);
        assert_eq!(key, vec![10, 0, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0]);
    }

    #[test]
    fn concatenated_key_type_is_nfts() {
        let t = [KeyType::Ipv4Addr, KeyType::InetProto, KeyType::InetService]
            .iter()
            .fold(0u32, |acc, k| (acc << TYPE_BITS) | k.datatype());
        assert_eq!(t, (7 << 12) | (12 << 6) | 13);
    }
}
