//! The kubelet-managed `/etc/hosts` (upstream's `makeHostsMount` and `ensureHostsFile` in
//! `kubelet_pods.go`): one file per pod, `<pod dir>/etc-hosts`, written once and mounted
//! read-write at `/etc/hosts` in each of its containers that does not mount something there
//! itself. It names the pod's own IPs with its hostname (and `<hostname>.<domain>` when it
//! has a subdomain, which is how a StatefulSet pod resolves its own FQDN without DNS), then
//! `spec.hostAliases`. A host-network pod gets the node's `/etc/hosts` plus its aliases.

use std::io;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{HostAlias, Pod};

/// The first line of a managed file; upstream's e2e tells managed files by it.
const MANAGED_HEADER: &str = "# Kubernetes-managed hosts file.\n";
const MANAGED_HEADER_HOST_NETWORK: &str = "# Kubernetes-managed hosts file (host network).\n";

/// Where the container sees it.
pub const ETC_HOSTS: &str = "/etc/hosts";

/// The node's own hosts file, the base of a host-network pod's.
const NODE_HOSTS: &str = "/etc/hosts";

/// The file for a pod in its own network namespace.
pub fn managed_content(pod_ips: &[String], hostname: &str, domain: &str, aliases: &[HostAlias]) -> String {
    let mut out = String::from(MANAGED_HEADER);
    out.push_str(
        "127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\n\
         fe00::1\tip6-allnodes\n\
         fe00::2\tip6-allrouters\n",
    );
    for ip in pod_ips {
        if domain.is_empty() {
            out.push_str(&format!("{ip}\t{hostname}\n"));
        } else {
            out.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n"));
        }
    }
    out.push_str(&alias_entries(aliases));
    out
}

/// The file for a host-network pod: the node's, then the aliases.
pub fn host_network_content(node_hosts: &str, aliases: &[HostAlias]) -> String {
    let mut out = String::from(MANAGED_HEADER_HOST_NETWORK);
    out.push_str(node_hosts);
    out.push_str(&alias_entries(aliases));
    out
}

/// `spec.hostAliases`, one line per entry with all its names.
fn alias_entries(aliases: &[HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n# Entries added by HostAliases.\n");
    for a in aliases {
        let names = a.hostnames.clone().unwrap_or_default().join("\t");
        out.push_str(&format!("{}\t{names}\n", a.ip));
    }
    out
}

/// Whether container `mounts` leave `/etc/hosts` to the kubelet.
pub fn container_wants_managed(mount_paths: impl IntoIterator<Item = impl AsRef<str>>) -> bool {
    !mount_paths.into_iter().any(|p| p.as_ref().trim_end_matches('/') == ETC_HOSTS)
}

/// Writes the pod's file unless it exists (a container may have edited it, and every
/// container of the pod shares it) and returns its path; `None` when there is nothing to
/// manage yet (a pod network namespace without an IP).
pub fn ensure(
    pod_dir: &Path,
    pod: &Pod,
    pod_ips: &[String],
    cluster_domain: &str,
) -> io::Result<Option<PathBuf>> {
    let spec = pod.spec.as_ref();
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    if !host_network && pod_ips.is_empty() {
        return Ok(None);
    }
    let path = pod_dir.join("etc-hosts");
    if path.exists() {
        return Ok(Some(path));
    }
    let aliases = spec.and_then(|s| s.host_aliases.clone()).unwrap_or_default();
    let content = if host_network {
        let node = std::fs::read_to_string(NODE_HOSTS).unwrap_or_default();
        host_network_content(&node, &aliases)
    } else {
        let (hostname, domain) = crate::dns::hostname_and_domain(pod, cluster_domain)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        managed_content(pod_ips, &hostname, &domain, &aliases)
    };
    std::fs::create_dir_all(pod_dir)?;
    // Written aside and renamed, so a container starting meanwhile never sees half a file.
    let tmp = pod_dir.join(".etc-hosts.tmp");
    std::fs::write(&tmp, content)?;
    std::fs::rename(&tmp, &path)?;
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alias(ip: &str, names: &[&str]) -> HostAlias {
        HostAlias { ip: ip.into(), hostnames: Some(names.iter().map(|s| s.to_string()).collect()) }
    }

    #[test]
    fn pod_with_subdomain_names_its_fqdn_then_aliases() {
        let text = managed_content(
            &["10.88.0.5".into()],
            "web-0",
            "web.default.svc.cluster.local",
            &[alias("123.45.67.89", &["foo", "bar"]), alias("10.0.0.1", &["baz"])],
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "# Kubernetes-managed hosts file.");
        assert_eq!(lines[1], "127.0.0.1\tlocalhost");
        assert_eq!(lines[7], "10.88.0.5\tweb-0.web.default.svc.cluster.local\tweb-0");
        assert_eq!(lines[8], "");
        assert_eq!(lines[9], "# Entries added by HostAliases.");
        assert_eq!(lines[10], "123.45.67.89\tfoo\tbar");
        assert_eq!(lines[11], "10.0.0.1\tbaz");
    }

    #[test]
    fn pod_without_subdomain_or_aliases() {
        let text = managed_content(&["10.88.0.5".into(), "fd00::5".into()], "p", "", &[]);
        assert!(text.ends_with("fe00::2\tip6-allrouters\n10.88.0.5\tp\nfd00::5\tp\n"), "{text}");
    }

    #[test]
    fn host_network_keeps_the_node_file() {
        let text = host_network_content("127.0.0.1 localhost\n", &[alias("1.2.3.4", &["a"])]);
        assert_eq!(
            text,
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n\n# Entries added by HostAliases.\n1.2.3.4\ta\n"
        );
    }

    #[test]
    fn a_container_mounting_etc_hosts_keeps_its_own() {
        assert!(container_wants_managed(["/data", "/etc"]));
        assert!(!container_wants_managed(["/etc/hosts"]));
    }
}
