//! In-memory iptables tables that take `iptables-restore --noflush` input with its
//! semantics (a declared chain is flushed, `-X` deletes, the whole input or nothing), for
//! tests that compare whole rulesets in `iptables-save` form.

use std::collections::BTreeMap;

use super::{Error, Interface, Table, split_args};
use crate::nftables::Family;

fn builtins(table: Table) -> &'static [&'static str] {
    match table {
        Table::Filter => &["INPUT", "FORWARD", "OUTPUT"],
        Table::Nat => &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
        Table::Mangle => &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"],
    }
}

type Chains = BTreeMap<String, Vec<Vec<String>>>;

#[derive(Debug, Clone)]
pub struct Fake {
    family: Family,
    tables: BTreeMap<Table, Chains>,
    /// restore_all calls so far, and the last input.
    pub restores: usize,
    pub last_restore: String,
}

fn fail(msg: impl Into<String>) -> Error {
    Error::Failed { cmd: "fake iptables".into(), code: Some(1), stderr: msg.into() }
}

fn quote(arg: &str) -> String {
    if arg.contains(' ') || arg.is_empty() { format!("\"{arg}\"") } else { arg.to_owned() }
}

impl Fake {
    pub fn new(family: Family) -> Fake {
        let mut tables = BTreeMap::new();
        for t in [Table::Filter, Table::Nat, Table::Mangle] {
            let chains: Chains = builtins(t).iter().map(|c| (c.to_string(), Vec::new())).collect();
            tables.insert(t, chains);
        }
        Fake { family, tables, restores: 0, last_restore: String::new() }
    }

    fn table(&mut self, t: Table) -> &mut Chains {
        self.tables.get_mut(&t).expect("all tables exist")
    }

    /// One table in `iptables-save` form: built-in chains first, then ours sorted; rules
    /// in chain order.
    pub fn dump_table(&self, t: Table) -> String {
        let chains = &self.tables[&t];
        let mut out = vec![format!("*{}", t.name())];
        let mut names: Vec<&String> =
            builtins(t).iter().filter_map(|b| chains.get_key_value(*b).map(|(k, _)| k)).collect();
        names.extend(chains.keys().filter(|k| !builtins(t).contains(&k.as_str())));
        for n in &names {
            let policy = if builtins(t).contains(&n.as_str()) { "ACCEPT" } else { "-" };
            out.push(format!(":{n} {policy} [0:0]"));
        }
        for n in &names {
            for r in &chains[*n] {
                out.push(format!("-A {n} {}", r.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ")));
            }
        }
        out.push("COMMIT".into());
        out.join("\n") + "\n"
    }

    /// Whether a chain exists in a table.
    pub fn has_chain(&self, t: Table, chain: &str) -> bool {
        self.tables[&t].contains_key(chain)
    }

    /// Applies restore input to `tables`.
    fn apply(tables: &mut BTreeMap<Table, Chains>, data: &str) -> Result<(), Error> {
        let mut current: Option<Table> = None;
        for (i, line) in data.lines().enumerate() {
            let line = line.trim();
            let err = |m: &str| fail(format!("line {}: {m}: {line}", i + 1));
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(name) = line.strip_prefix('*') {
                current = Some(match name {
                    "filter" => Table::Filter,
                    "nat" => Table::Nat,
                    "mangle" => Table::Mangle,
                    _ => return Err(err("unknown table")),
                });
                continue;
            }
            let Some(t) = current else { return Err(err("no table")) };
            let chains = tables.get_mut(&t).expect("all tables exist");
            if line == "COMMIT" {
                current = None;
            } else if let Some(decl) = line.strip_prefix(':') {
                let name = decl.split_whitespace().next().ok_or_else(|| err("empty chain line"))?;
                // --noflush: declaring a chain creates or flushes it.
                chains.insert(name.to_owned(), Vec::new());
            } else {
                let args = split_args(line);
                match args.first().map(String::as_str) {
                    Some("-A") => {
                        let chain = args.get(1).ok_or_else(|| err("no chain"))?;
                        let rule = args[2..].to_vec();
                        check_targets(chains, &rule).map_err(|m| err(&m))?;
                        chains.get_mut(chain).ok_or_else(|| err("no such chain"))?.push(rule);
                    }
                    Some("-X") => {
                        let chain = args.get(1).ok_or_else(|| err("no chain"))?;
                        match chains.get(chain) {
                            None => return Err(err("no such chain")),
                            Some(rules) if !rules.is_empty() => return Err(err("chain not empty")),
                            _ => {}
                        }
                        if referenced(chains, chain) {
                            return Err(err("chain in use"));
                        }
                        chains.remove(chain);
                    }
                    _ => return Err(err("unsupported line")),
                }
            }
        }
        if current.is_some() {
            return Err(fail("missing COMMIT"));
        }
        Ok(())
    }
}

/// `-j`/`-g` targets that are not built-in verdicts must be chains of the table.
fn check_targets(chains: &Chains, rule: &[String]) -> Result<(), String> {
    const BUILTIN_TARGETS: &[&str] =
        &["ACCEPT", "DROP", "RETURN", "REJECT", "DNAT", "SNAT", "MASQUERADE", "MARK", "LOG"];
    for w in rule.windows(2) {
        if (w[0] == "-j" || w[0] == "-g")
            && !BUILTIN_TARGETS.contains(&w[1].as_str())
            && !chains.contains_key(&w[1])
        {
            return Err(format!("no chain {}", w[1]));
        }
    }
    Ok(())
}

fn referenced(chains: &Chains, chain: &str) -> bool {
    chains.values().flatten().any(|r| r.windows(2).any(|w| (w[0] == "-j" || w[0] == "-g") && w[1] == chain))
}

impl Interface for Fake {
    fn family(&self) -> Family {
        self.family
    }

    fn ensure_chain(&mut self, table: Table, chain: &str) -> Result<bool, Error> {
        let chains = self.table(table);
        if chains.contains_key(chain) {
            return Ok(true);
        }
        chains.insert(chain.to_owned(), Vec::new());
        Ok(false)
    }

    fn ensure_rule_prepend(&mut self, table: Table, chain: &str, args: &[String]) -> Result<bool, Error> {
        let chains = self.table(table);
        check_targets(chains, args).map_err(fail)?;
        let rules = chains
            .get_mut(chain)
            .ok_or_else(|| fail(format!("No chain/target/match by that name: {chain}")))?;
        if rules.iter().any(|r| r == args) {
            return Ok(true);
        }
        rules.insert(0, args.to_vec());
        Ok(false)
    }

    fn delete_rule(&mut self, table: Table, chain: &str, args: &[String]) -> Result<(), Error> {
        let rules = self
            .table(table)
            .get_mut(chain)
            .ok_or_else(|| fail("Bad rule (does a matching rule exist in that chain?)"))?;
        let pos = rules
            .iter()
            .position(|r| r == args)
            .ok_or_else(|| fail("Bad rule (does a matching rule exist in that chain?)"))?;
        rules.remove(pos);
        Ok(())
    }

    fn chain_exists(&mut self, table: Table, chain: &str) -> Result<bool, Error> {
        Ok(self.has_chain(table, chain))
    }

    fn save(&mut self, table: Table) -> Result<String, Error> {
        Ok(self.dump_table(table))
    }

    fn restore_all(&mut self, data: &[u8]) -> Result<(), Error> {
        self.restores += 1;
        let text = String::from_utf8_lossy(data).into_owned();
        self.last_restore = text.clone();
        let mut tables = self.tables.clone();
        Self::apply(&mut tables, &text)?;
        self.tables = tables;
        Ok(())
    }

    fn has_random_fully(&self) -> bool {
        true
    }
}

/// A fake shared with the test that reads it back while a proxier writes through it.
pub type Shared = std::sync::Arc<parking_lot::Mutex<Fake>>;

impl Interface for Shared {
    fn family(&self) -> Family {
        self.lock().family
    }
    fn ensure_chain(&mut self, table: Table, chain: &str) -> Result<bool, Error> {
        self.lock().ensure_chain(table, chain)
    }
    fn ensure_rule_prepend(&mut self, table: Table, chain: &str, args: &[String]) -> Result<bool, Error> {
        self.lock().ensure_rule_prepend(table, chain, args)
    }
    fn delete_rule(&mut self, table: Table, chain: &str, args: &[String]) -> Result<(), Error> {
        self.lock().delete_rule(table, chain, args)
    }
    fn chain_exists(&mut self, table: Table, chain: &str) -> Result<bool, Error> {
        self.lock().chain_exists(table, chain)
    }
    fn save(&mut self, table: Table) -> Result<String, Error> {
        self.lock().save(table)
    }
    fn restore_all(&mut self, data: &[u8]) -> Result<(), Error> {
        self.lock().restore_all(data)
    }
    fn has_random_fully(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noflush_restore_semantics() {
        let mut f = Fake::new(Family::Ip);
        f.restore_all(b"*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A KUBE-A -j KUBE-B\n-A KUBE-B -m comment --comment \"x y\" -j RETURN\nCOMMIT\n")
            .unwrap();
        // Only KUBE-A is declared again: KUBE-B keeps its rule.
        f.restore_all(b"*nat\n:KUBE-A - [0:0]\nCOMMIT\n").unwrap();
        let dump = f.dump_table(Table::Nat);
        assert!(dump.contains("-A KUBE-B -m comment --comment \"x y\" -j RETURN"), "{dump}");
        assert!(!dump.contains("-A KUBE-A"), "{dump}");
        // A failed restore changes nothing.
        assert!(f.restore_all(b"*nat\n:KUBE-B - [0:0]\n-A KUBE-B -j KUBE-MISSING\nCOMMIT\n").is_err());
        assert_eq!(f.dump_table(Table::Nat), dump);
        f.restore_all(b"*nat\n:KUBE-B - [0:0]\n-X KUBE-B\nCOMMIT\n").unwrap();
        assert!(!f.has_chain(Table::Nat, "KUBE-B"));
    }
}
