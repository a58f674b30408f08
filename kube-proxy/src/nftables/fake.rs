//! An in-memory nftables table with the kernel's rules for what a transaction may do
//! (missing objects, chains still in use, clashing elements), applied all or nothing, and
//! dumped in `nft` syntax in a stable order, so tests compare whole rulesets as text.

use std::collections::BTreeMap;

use super::{
    Chain, Element, Error, Family, Interface, KeyType, KeyValue, Op, Rule, Set, Transaction, render_chain,
    render_element, render_rule, render_set,
};

#[derive(Debug, Clone)]
struct FakeChain {
    chain: Chain,
    rules: Vec<Rule>,
}

#[derive(Debug, Clone)]
struct FakeSet {
    set: Set,
    elements: BTreeMap<Vec<KeyValue>, Element>,
}

#[derive(Debug, Clone, Default)]
struct FakeTable {
    comment: Option<String>,
    chains: BTreeMap<String, FakeChain>,
    sets: BTreeMap<String, FakeSet>,
}

/// A fake [`Interface`].
#[derive(Debug, Clone)]
pub struct Fake {
    family: Family,
    name: String,
    table: Option<FakeTable>,
    /// Transactions run so far (including failed ones).
    pub runs: usize,
    /// The operations of the last transaction run.
    pub last: Vec<Op>,
}

fn kernel(what: impl Into<String>, errno: i32) -> Error {
    Error::Kernel { what: what.into(), errno, message: None }
}

impl Fake {
    pub fn new(family: Family, table: &str) -> Fake {
        Fake { family, name: table.to_owned(), table: None, runs: 0, last: Vec::new() }
    }

    /// The table in `nft -f` syntax: the table, its chains, sets and maps, then each chain's
    /// rules and each set's elements, all sorted by name (rules keep their order).
    pub fn dump(&self) -> String {
        let Some(t) = &self.table else { return String::new() };
        let f = self.family.name();
        let name = &self.name;
        let mut out = Vec::new();
        let comment = t.comment.as_ref().map(|c| format!(" {{ comment \"{c}\" ; }}")).unwrap_or_default();
        out.push(format!("add table {f} {name}{comment}"));
        for c in t.chains.values() {
            out.push(format!("add chain {f} {name} {}{}", c.chain.name, render_chain(&c.chain)));
        }
        for s in t.sets.values() {
            let kind = if s.set.map { "map" } else { "set" };
            out.push(format!("add {kind} {f} {name} {}{}", s.set.name, render_set(&s.set)));
        }
        for c in t.chains.values() {
            for r in &c.rules {
                out.push(format!("add rule {f} {name} {} {}", c.chain.name, render_rule(r, self.family)));
            }
        }
        for s in t.sets.values() {
            let mut elems: Vec<String> = s.elements.values().map(render_element).collect();
            elems.sort();
            for e in elems {
                out.push(format!("add element {f} {name} {} {e}", s.set.name));
            }
        }
        out.join("\n") + "\n"
    }

    /// The rules of one chain, in nft syntax.
    pub fn rules(&self, chain: &str) -> Vec<String> {
        self.table
            .as_ref()
            .and_then(|t| t.chains.get(chain))
            .map(|c| c.rules.iter().map(|r| render_rule(r, self.family)).collect())
            .unwrap_or_default()
    }

    /// The elements of one set or map, in nft syntax.
    pub fn elements(&self, set: &str) -> Vec<String> {
        self.table
            .as_ref()
            .and_then(|t| t.sets.get(set))
            .map(|s| s.elements.values().map(render_element).collect())
            .unwrap_or_default()
    }

    pub fn has_table(&self) -> bool {
        self.table.is_some()
    }
}

impl FakeTable {
    /// Whether any rule (other than in `except`) or map element sends packets to `chain`.
    fn chain_referenced(&self, chain: &str) -> bool {
        self.chains
            .values()
            .flat_map(|c| &c.rules)
            .any(|r| r.stmts.iter().any(|s| s.targets().contains(&chain)))
            || self
                .sets
                .values()
                .flat_map(|s| s.elements.values())
                .any(|e| e.value.as_ref().and_then(|v| v.target()) == Some(chain))
    }

    fn set_referenced(&self, set: &str) -> bool {
        self.chains.values().flat_map(|c| &c.rules).any(|r| r.stmts.iter().any(|s| s.sets().contains(&set)))
    }

    fn apply(&mut self, op: &Op, family: Family) -> Result<(), Error> {
        let what = super::render_op(op, family, "fake");
        match op {
            Op::AddTable { .. } | Op::DeleteTable => unreachable!("handled by the caller"),
            Op::AddChain(chain) => match self.chains.get(&chain.name) {
                // Without a hook, "add" leaves an existing (base) chain as it is; with one,
                // the hook must match.
                Some(existing) if chain.base.is_some() && existing.chain.base != chain.base => {
                    return Err(kernel(what, libc::EOPNOTSUPP));
                }
                Some(_) => {}
                None => {
                    self.chains
                        .insert(chain.name.clone(), FakeChain { chain: chain.clone(), rules: Vec::new() });
                }
            },
            Op::FlushChain(name) => match self.chains.get_mut(name) {
                Some(c) => c.rules.clear(),
                None => return Err(kernel(what, libc::ENOENT)),
            },
            Op::DeleteChain(name) => {
                // The chain's own rules go with it; references from elsewhere keep it.
                let Some(c) = self.chains.remove(name) else { return Err(kernel(what, libc::ENOENT)) };
                if self.chain_referenced(name) {
                    self.chains.insert(name.clone(), c);
                    return Err(kernel(what, libc::EBUSY));
                }
            }
            Op::AddRule(rule) => {
                if !self.chains.contains_key(&rule.chain) {
                    return Err(kernel(what, libc::ENOENT));
                }
                for s in &rule.stmts {
                    if s.targets().iter().any(|t| !self.chains.contains_key(*t))
                        || s.sets().iter().any(|t| !self.sets.contains_key(*t))
                    {
                        return Err(kernel(what, libc::ENOENT));
                    }
                }
                self.chains.get_mut(&rule.chain).expect("checked").rules.push(rule.clone());
            }
            Op::AddSet(set) => match self.sets.get(&set.name) {
                Some(existing) if existing.set.key != set.key || existing.set.map != set.map => {
                    return Err(kernel(what, libc::EEXIST));
                }
                Some(_) => {}
                None => {
                    self.sets
                        .insert(set.name.clone(), FakeSet { set: set.clone(), elements: BTreeMap::new() });
                }
            },
            Op::FlushSet(name) => match self.sets.get_mut(name) {
                Some(s) => s.elements.clear(),
                None => return Err(kernel(what, libc::ENOENT)),
            },
            Op::DeleteSet(name) => {
                if !self.sets.contains_key(name) {
                    return Err(kernel(what, libc::ENOENT));
                }
                if self.set_referenced(name) {
                    return Err(kernel(what, libc::EBUSY));
                }
                self.sets.remove(name);
            }
            Op::AddElement(e) => {
                if let Some(t) = e.value.as_ref().and_then(|v| v.target())
                    && !self.chains.contains_key(t)
                {
                    return Err(kernel(what, libc::ENOENT));
                }
                let Some(s) = self.sets.get_mut(&e.set) else { return Err(kernel(what, libc::ENOENT)) };
                if !key_matches(&s.set.key, &e.key) || s.set.map != e.value.is_some() {
                    return Err(kernel(what, libc::EINVAL));
                }
                match s.elements.get(&e.key) {
                    Some(existing) if existing.value != e.value => return Err(kernel(what, libc::EEXIST)),
                    Some(_) => {}
                    None => {
                        s.elements.insert(e.key.clone(), e.clone());
                    }
                }
            }
            Op::DeleteElement(e) => {
                let Some(s) = self.sets.get_mut(&e.set) else { return Err(kernel(what, libc::ENOENT)) };
                if s.elements.remove(&e.key).is_none() {
                    return Err(kernel(what, libc::ENOENT));
                }
            }
        }
        Ok(())
    }
}

fn key_matches(types: &[KeyType], key: &[KeyValue]) -> bool {
    types.len() == key.len()
        && types.iter().zip(key).all(|(t, k)| match (t, k) {
            (KeyType::Ipv4Addr, KeyValue::Addr(ip)) => ip.is_ipv4(),
            (KeyType::Ipv6Addr, KeyValue::Addr(ip)) => ip.is_ipv6(),
            (KeyType::InetProto, KeyValue::Proto(_)) => true,
            (KeyType::InetService, KeyValue::Port(_)) => true,
            _ => false,
        })
}

impl Interface for Fake {
    fn family(&self) -> Family {
        self.family
    }

    fn table(&self) -> String {
        self.name.clone()
    }

    fn run(&mut self, tx: &Transaction) -> Result<(), Error> {
        self.runs += 1;
        self.last = tx.ops.clone();
        let mut table = self.table.clone();
        for op in &tx.ops {
            match op {
                Op::AddTable { comment } => {
                    let t = table.get_or_insert_with(FakeTable::default);
                    if t.comment.is_none() {
                        t.comment = comment.clone();
                    }
                }
                Op::DeleteTable => {
                    if table.take().is_none() {
                        return Err(kernel("delete table", libc::ENOENT));
                    }
                }
                op => match table.as_mut() {
                    Some(t) => t.apply(op, self.family)?,
                    None => return Err(kernel(super::render_op(op, self.family, &self.name), libc::ENOENT)),
                },
            }
        }
        self.table = table;
        Ok(())
    }

    fn list_chains(&mut self) -> Result<Vec<String>, Error> {
        match &self.table {
            Some(t) => Ok(t.chains.keys().cloned().collect()),
            None => Err(Error::NotFound(self.name.clone())),
        }
    }

    fn list_sets(&mut self) -> Result<Vec<String>, Error> {
        match &self.table {
            Some(t) => Ok(t.sets.keys().cloned().collect()),
            None => Err(Error::NotFound(self.name.clone())),
        }
    }
}

/// A fake shared with the test that reads it back while a proxier writes through it.
pub type Shared = std::sync::Arc<parking_lot::Mutex<Fake>>;

impl Interface for Shared {
    fn family(&self) -> Family {
        self.lock().family
    }

    fn table(&self) -> String {
        self.lock().name.clone()
    }

    fn run(&mut self, tx: &Transaction) -> Result<(), Error> {
        self.lock().run(tx)
    }

    fn list_chains(&mut self) -> Result<Vec<String>, Error> {
        self.lock().list_chains()
    }

    fn list_sets(&mut self) -> Result<Vec<String>, Error> {
        self.lock().list_sets()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Protocol, Stmt, Verdict};
    use super::*;

    fn base_tx() -> Transaction {
        let mut tx = Transaction::new();
        tx.push(Op::AddTable { comment: Some("rules for kube-proxy".into()) });
        tx.add_chain("a");
        tx.add_chain("b");
        tx.push(Op::AddSet(Set::verdict_map(
            "m",
            vec![KeyType::Ipv4Addr, KeyType::InetProto, KeyType::InetService],
            None,
        )));
        tx
    }

    #[test]
    fn transactions_are_all_or_nothing() {
        let mut f = Fake::new(Family::Ip, "kube-proxy");
        f.run(&base_tx()).unwrap();
        let before = f.dump();
        let mut tx = Transaction::new();
        tx.add_rule("a", vec![Stmt::goto("b")]);
        tx.add_rule("a", vec![Stmt::goto("missing")]);
        let err = f.run(&tx).unwrap_err();
        assert!(err.is_not_found(), "{err}");
        assert_eq!(f.dump(), before);
    }

    #[test]
    fn chains_in_use_cannot_be_deleted() {
        let mut f = Fake::new(Family::Ip, "kube-proxy");
        let mut tx = base_tx();
        tx.push(Op::AddElement(Element {
            set: "m".into(),
            key: vec![
                KeyValue::Addr("10.0.0.1".parse().unwrap()),
                KeyValue::Proto(Protocol::Tcp),
                KeyValue::Port(80),
            ],
            value: Some(Verdict::Goto("b".into())),
            comment: None,
        }));
        f.run(&tx).unwrap();
        let mut del = Transaction::new();
        del.push(Op::DeleteChain("b".into()));
        assert!(matches!(f.run(&del), Err(Error::Kernel { errno, .. }) if errno == libc::EBUSY));
        let mut flush_then_del = Transaction::new();
        flush_then_del.push(Op::FlushSet("m".into()));
        flush_then_del.push(Op::DeleteChain("b".into()));
        f.run(&flush_then_del).unwrap();
        assert_eq!(
            f.dump(),
            "add table ip kube-proxy { comment \"rules for kube-proxy\" ; }\n\
             add chain ip kube-proxy a\n\
             add map ip kube-proxy m { type ipv4_addr . inet_proto . inet_service : verdict ; }\n"
        );
    }

    #[test]
    fn changed_map_values_clash() {
        let mut f = Fake::new(Family::Ip, "kube-proxy");
        f.run(&base_tx()).unwrap();
        let elem = |target: &str| Element {
            set: "m".into(),
            key: vec![
                KeyValue::Addr("10.0.0.1".parse().unwrap()),
                KeyValue::Proto(Protocol::Udp),
                KeyValue::Port(53),
            ],
            value: Some(Verdict::Goto(target.into())),
            comment: None,
        };
        let mut tx = Transaction::new();
        tx.push(Op::AddElement(elem("a")));
        tx.push(Op::AddElement(elem("a")));
        f.run(&tx).unwrap();
        let mut tx = Transaction::new();
        tx.push(Op::AddElement(elem("b")));
        assert!(matches!(f.run(&tx), Err(Error::Kernel { errno, .. }) if errno == libc::EEXIST));
        assert_eq!(f.elements("m"), vec!["{ 10.0.0.1 . udp . 53 : goto a }"]);
    }
}
