//! The node's CNI network: a bridge whose host-local IPAM hands out addresses from the
//! node's own `spec.podCIDRs`, as the node IPAM controller allocated them. containerd
//! watches its CNI config directory, so rewriting the file is how a new pod CIDR reaches
//! the runtime (flannel does the same through its subnet file).
//!
//! The bridge does not masquerade (`ipMasq: false`): traffic between pods of different
//! nodes keeps its pod source address, and only traffic leaving the cluster is
//! masqueraded, by [`crate::masquerade`].

use std::path::{Path, PathBuf};

use crate::cidr::Cidr;

/// Where and under which names the network is written.
#[derive(Clone, Debug)]
pub struct Options {
    /// The conflist file containerd reads (its `conf_dir` takes the first file by name).
    pub conf_file: PathBuf,
    /// The network's name; CNI keys its caches and the bridge plugin its rules by it, so it
    /// must stay the same for as long as pods created under it exist.
    pub network_name: String,
    /// The Linux bridge the pods' veths join (at most 15 bytes).
    pub bridge: String,
    /// host-local's lease directory; its default is the shared `/var/lib/cni/networks`.
    pub ipam_data_dir: Option<PathBuf>,
}

/// The conflist for a node with these pod CIDRs (IPv4 first when dual-stack, as the API
/// server orders them).
pub fn render(opts: &Options, pod_cidrs: &[Cidr]) -> String {
    let ranges: Vec<serde_json::Value> =
        pod_cidrs.iter().map(|c| serde_json::json!([{ "subnet": c.to_string() }])).collect();
    let mut routes = Vec::new();
    if pod_cidrs.iter().any(Cidr::is_ipv4) {
        routes.push(serde_json::json!({ "dst": "0.0.0.0/0" }));
    }
    if pod_cidrs.iter().any(|c| !c.is_ipv4()) {
        routes.push(serde_json::json!({ "dst": "::/0" }));
    }
    let mut ipam = serde_json::json!({ "type": "host-local", "ranges": ranges, "routes": routes });
    if let Some(dir) = &opts.ipam_data_dir {
        ipam["dataDir"] = dir.display().to_string().into();
    }
    let conf = serde_json::json!({
        // Supported by Debian's plugins 1.1.1 and containerd 1.6.
        "cniVersion": "0.4.0",
        "name": opts.network_name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": opts.bridge,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": ipam,
            },
            { "type": "portmap", "capabilities": { "portMappings": true }, "snat": true },
        ],
    });
    let mut text = serde_json::to_string_pretty(&conf).expect("a JSON value serializes");
    text.push('\n');
    text
}

/// Writes `content` to `path` unless it already holds exactly that, through a temporary
/// file and a rename so containerd never reads half a file. Returns whether it wrote.
pub fn write_if_changed(path: &Path, content: &str) -> std::io::Result<bool> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == content) {
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // Not ending in .conflist/.conf/.json: containerd ignores it while it is being written.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content)?;
    std::fs::rename(&tmp, path)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(dir: &Path) -> Options {
        Options {
            conf_file: dir.join("10-k8srs.conflist"),
            network_name: "k8srs-br".into(),
            bridge: "br".into(),
            ipam_data_dir: Some(dir.join("ipam")),
        }
    }

    #[test]
    fn renders_the_pod_cidrs_without_masquerade() {
        let dir = tempfile::tempdir().unwrap();
        let o = opts(dir.path());
        let v: serde_json::Value = serde_json::from_str(&render(
            &o,
            &["10.88.1.0/24".parse().unwrap(), "fd00:1::/64".parse().unwrap()],
        ))
        .unwrap();
        let bridge = &v["plugins"][0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["ipMasq"], false);
        assert_eq!(bridge["ipam"]["ranges"][0][0]["subnet"], "10.88.1.0/24");
        assert_eq!(bridge["ipam"]["ranges"][1][0]["subnet"], "fd00:1::/64");
        assert_eq!(bridge["ipam"]["routes"][1]["dst"], "::/0");
        assert_eq!(v["name"], "k8srs-br");
    }

    #[test]
    fn writes_only_changes() {
        let dir = tempfile::tempdir().unwrap();
        let o = opts(dir.path());
        let text = render(&o, &["10.88.1.0/24".parse().unwrap()]);
        assert!(write_if_changed(&o.conf_file, &text).unwrap());
        assert!(!write_if_changed(&o.conf_file, &text).unwrap());
        assert_eq!(std::fs::read_to_string(&o.conf_file).unwrap(), text);
        assert!(!o.conf_file.with_extension("tmp").exists());
    }
}
