//! iptables as kube-proxy uses it (upstream's `pkg/util/iptables`): whole tables written
//! atomically with `iptables-restore --noflush` (chains named in the input are flushed
//! and rewritten, other chains left alone), chains and jump rules in the built-in chains
//! ensured one by one, and `iptables-save` to see what exists. [`Runner`] runs Debian's
//! `iptables`/`ip6tables` (nf_tables or legacy backend, whichever is installed);
//! [`fake::Fake`] models the tables for tests.

pub mod fake;

use std::io::Write;
use std::process::{Command, Stdio};

use crate::nftables::Family;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    Filter,
    Nat,
    Mangle,
}

impl Table {
    pub fn name(self) -> &'static str {
        match self {
            Table::Filter => "filter",
            Table::Nat => "nat",
            Table::Mangle => "mangle",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command could not be run at all (not installed, say).
    #[error("running {cmd}: {source}")]
    Exec {
        cmd: String,
        #[source]
        source: std::io::Error,
    },
    /// The command ran and failed.
    #[error("{cmd} failed (exit {code:?}): {stderr}")]
    Failed { cmd: String, code: Option<i32>, stderr: String },
}

impl Error {
    /// iptables says a rule or chain does not exist (exit status 1 with a "does not
    /// exist"/"No chain" message, as upstream's `IsNotFoundError` reads it).
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::Failed { stderr, .. } => {
                let s = stderr.to_ascii_lowercase();
                s.contains("does not exist") || s.contains("no chain/target/match") || s.contains("bad rule")
            }
            Error::Exec { .. } => false,
        }
    }
}

/// What the iptables proxier needs (upstream's `utiliptables.Interface`).
pub trait Interface: Send {
    fn family(&self) -> Family;
    /// Creates the chain if missing; returns whether it existed.
    fn ensure_chain(&mut self, table: Table, chain: &str) -> Result<bool, Error>;
    /// Inserts the rule at the top of the chain if it is not there; returns whether it was.
    fn ensure_rule_prepend(&mut self, table: Table, chain: &str, args: &[String]) -> Result<bool, Error>;
    fn delete_rule(&mut self, table: Table, chain: &str, args: &[String]) -> Result<(), Error>;
    fn chain_exists(&mut self, table: Table, chain: &str) -> Result<bool, Error>;
    /// `iptables-save -t <table>`.
    fn save(&mut self, table: Table) -> Result<String, Error>;
    /// `iptables-restore --noflush --counters` of several tables at once.
    fn restore_all(&mut self, data: &[u8]) -> Result<(), Error>;
    /// Whether MASQUERADE takes `--random-fully`.
    fn has_random_fully(&self) -> bool;
}

/// Runs the real binaries.
pub struct Runner {
    family: Family,
    random_fully: bool,
}

impl Runner {
    pub fn new(family: Family) -> Runner {
        let mut r = Runner { family, random_fully: false };
        // iptables 1.6.2 added --random-fully; Debian 12 has 1.8.9. Ask the binary.
        r.random_fully = r
            .run_cmd(r.bin(), &["--version".into()], None)
            .map(|out| version_at_least(&out, (1, 6, 2)))
            .unwrap_or(false);
        r
    }

    fn bin(&self) -> &'static str {
        match self.family {
            Family::Ip => "iptables",
            Family::Ip6 => "ip6tables",
        }
    }

    fn run_cmd(&self, bin: &str, args: &[String], stdin: Option<&[u8]>) -> Result<String, Error> {
        let cmd = format!("{bin} {}", args.join(" "));
        let mut c = Command::new(bin);
        c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        c.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
        let mut child = c.spawn().map_err(|source| Error::Exec { cmd: cmd.clone(), source })?;
        if let Some(data) = stdin {
            let mut pipe = child.stdin.take().expect("piped stdin");
            pipe.write_all(data).map_err(|source| Error::Exec { cmd: cmd.clone(), source })?;
        }
        let out = child.wait_with_output().map_err(|source| Error::Exec { cmd: cmd.clone(), source })?;
        if !out.status.success() {
            let mut cmd = cmd;
            cmd.truncate(200);
            return Err(Error::Failed {
                cmd,
                code: out.status.code(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `-w 5 -W 100000`: wait for the xtables lock (legacy backend) rather than fail.
    fn args(table: Table, op: &str, chain: &str, rest: &[String]) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "-w".into(),
            "5".into(),
            "-W".into(),
            "100000".into(),
            "-t".into(),
            table.name().into(),
            op.into(),
            chain.into(),
        ];
        a.extend(rest.iter().cloned());
        a
    }
}

/// Whether `iptables vX.Y.Z ...` is at least `min`.
fn version_at_least(out: &str, min: (u32, u32, u32)) -> bool {
    let Some(v) = out.split_whitespace().find_map(|w| w.strip_prefix('v')) else { return false };
    let parts: Vec<u32> = v.split('.').map(|p| p.parse().unwrap_or(0)).collect();
    let got = (
        parts.first().copied().unwrap_or(0),
        parts.get(1).copied().unwrap_or(0),
        parts.get(2).copied().unwrap_or(0),
    );
    got >= min
}

impl Interface for Runner {
    fn family(&self) -> Family {
        self.family
    }

    fn ensure_chain(&mut self, table: Table, chain: &str) -> Result<bool, Error> {
        match self.run_cmd(self.bin(), &Self::args(table, "-N", chain, &[]), None) {
            Ok(_) => Ok(false),
            Err(Error::Failed { code: Some(1), stderr, .. })
                if stderr.to_ascii_lowercase().contains("exists") =>
            {
                Ok(true)
            }
            Err(e) => Err(e),
        }
    }

    fn ensure_rule_prepend(&mut self, table: Table, chain: &str, args: &[String]) -> Result<bool, Error> {
        match self.run_cmd(self.bin(), &Self::args(table, "-C", chain, args), None) {
            Ok(_) => return Ok(true),
            Err(Error::Failed { code: Some(1), .. }) => {}
            Err(e) => return Err(e),
        }
        self.run_cmd(self.bin(), &Self::args(table, "-I", chain, args), None)?;
        Ok(false)
    }

    fn delete_rule(&mut self, table: Table, chain: &str, args: &[String]) -> Result<(), Error> {
        self.run_cmd(self.bin(), &Self::args(table, "-D", chain, args), None).map(|_| ())
    }

    fn chain_exists(&mut self, table: Table, chain: &str) -> Result<bool, Error> {
        match self.run_cmd(self.bin(), &Self::args(table, "-S", chain, &["1".into()]), None) {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(Error::Failed { code: Some(1), .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn save(&mut self, table: Table) -> Result<String, Error> {
        let bin = format!("{}-save", self.bin());
        self.run_cmd(&bin, &["-t".into(), table.name().into()], None)
    }

    fn restore_all(&mut self, data: &[u8]) -> Result<(), Error> {
        let bin = format!("{}-restore", self.bin());
        let args: Vec<String> =
            ["-w", "5", "-W", "100000", "--noflush", "--counters"].iter().map(|s| s.to_string()).collect();
        self.run_cmd(&bin, &args, Some(data)).map(|_| ())
    }

    fn has_random_fully(&self) -> bool {
        self.random_fully
    }
}

/// The chain names declared in `iptables-save` output (`:NAME POLICY [p:b]` lines).
pub fn chains_of_save(save: &str) -> Vec<String> {
    save.lines()
        .filter_map(|l| l.strip_prefix(':'))
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect()
}

/// Splits an iptables argument string the way iptables-restore does: on whitespace,
/// with double-quoted parts kept together (quotes removed).
pub fn split_args(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_args() {
        assert!(version_at_least("iptables v1.8.9 (nf_tables)", (1, 6, 2)));
        assert!(!version_at_least("iptables v1.4.21", (1, 6, 2)));
        assert_eq!(
            split_args(r#"-m comment --comment "ns1/svc1:p80 cluster IP" -j KUBE-SVC-X"#),
            vec!["-m", "comment", "--comment", "ns1/svc1:p80 cluster IP", "-j", "KUBE-SVC-X"]
        );
        assert_eq!(
            chains_of_save("*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SVC-X - [0:0]\n-A X\nCOMMIT\n"),
            vec!["PREROUTING", "KUBE-SVC-X"]
        );
    }
}
