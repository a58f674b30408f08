//! Masquerade for pod traffic that leaves the cluster: source in the cluster CIDR,
//! destination outside it. Traffic between pods (on any node) keeps its source address,
//! which is why the bridge itself does not masquerade.
//!
//! The rules live in an nftables table of their own (`hostgw`, one per family), replaced
//! as a whole in one `nft -f` transaction. They change only when the cluster CIDRs do
//! (at start), so a one-shot `nft` run is the simplest correct tool here; the per-sync
//! paths of kube-proxy are another matter.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::cidr::Cidr;

pub const TABLE: &str = "hostgw";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("running nft: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("nft refused the ruleset: {0}")]
    Nft(String),
}

/// The nft script that (re)creates the tables for these cluster CIDRs; with no CIDR of a
/// family, that family's table is only removed.
pub fn script(cluster_cidrs: &[Cidr]) -> String {
    let mut s = String::new();
    for (family, v4) in [("ip", true), ("ip6", false)] {
        // "add" first so the delete never fails on a table that does not exist yet.
        s.push_str(&format!("add table {family} {TABLE}\ndelete table {family} {TABLE}\n"));
        let cidrs: Vec<String> =
            cluster_cidrs.iter().filter(|c| c.is_ipv4() == v4).map(ToString::to_string).collect();
        if cidrs.is_empty() {
            continue;
        }
        let set = cidrs.join(", ");
        let multicast = if v4 { "224.0.0.0/4" } else { "ff00::/8" };
        s.push_str(&format!(
            "table {family} {TABLE} {{\n\
             \tchain postrouting {{\n\
             \t\ttype nat hook postrouting priority srcnat; policy accept;\n\
             \t\t{family} saddr {{ {set} }} {family} daddr != {{ {set} }} {family} daddr != {multicast} masquerade\n\
             \t}}\n\
             }}\n"
        ));
    }
    s
}

/// Applies [`script`] in one transaction.
pub fn apply(cluster_cidrs: &[Cidr]) -> Result<(), Error> {
    run_nft(&script(cluster_cidrs))
}

/// Removes both tables.
pub fn cleanup() -> Result<(), Error> {
    run_nft(&script(&[]))
}

fn run_nft(script: &str) -> Result<(), Error> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Error::Spawn)?;
    child.stdin.take().expect("piped stdin").write_all(script.as_bytes()).map_err(Error::Spawn)?;
    let out = child.wait_with_output().map_err(Error::Spawn)?;
    if !out.status.success() {
        return Err(Error::Nft(String::from_utf8_lossy(&out.stderr).trim().to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_masquerades_only_off_cluster_traffic() {
        let s = script(&["10.88.0.0/16".parse().unwrap()]);
        assert!(s.contains(
            "ip saddr { 10.88.0.0/16 } ip daddr != { 10.88.0.0/16 } ip daddr != 224.0.0.0/4 masquerade"
        ));
        // No IPv6 cluster CIDR: the ip6 table is only removed.
        assert!(s.contains("delete table ip6 hostgw\n"));
        assert!(!s.contains("table ip6 hostgw {"));
    }
}
