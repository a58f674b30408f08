//! The conntrack settings of kube-proxy's configuration, written to the network
//! namespace's `net.netfilter` sysctls as upstream does at startup: the table size
//! (`maxPerCore` × CPUs, at least `min`; 0 leaves it alone), TCP established and
//! close-wait timeouts, TCP liberal mode and the UDP timeouts. A value already in place
//! is not written.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// What `conntrack:` in the configuration asks for (`None`/zero: leave it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConntrackSettings {
    pub max_per_core: i32,
    pub min: i32,
    pub tcp_established_timeout: Option<Duration>,
    pub tcp_close_wait_timeout: Option<Duration>,
    pub tcp_be_liberal: bool,
    pub udp_timeout: Option<Duration>,
    pub udp_stream_timeout: Option<Duration>,
}

/// Why a setting could not be applied.
#[derive(Debug, thiserror::Error)]
#[error("setting {path}: {source}")]
pub struct Error {
    pub path: String,
    #[source]
    pub source: std::io::Error,
}

fn read(path: &Path) -> std::io::Result<i64> {
    std::fs::read_to_string(path)?.trim().parse().map_err(std::io::Error::other)
}

fn set(root: &Path, name: &str, value: i64) -> Result<(), Error> {
    let path = root.join(name);
    let err = |source| Error { path: path.display().to_string(), source };
    if read(&path).map_err(err)? == value {
        return Ok(());
    }
    tracing::info!(sysctl = %name, value, "setting conntrack sysctl");
    std::fs::write(&path, value.to_string()).map_err(err)
}

/// Applies `s` under `root` (`/proc/sys/net/netfilter` outside tests).
pub fn apply_settings_at(root: &Path, s: &ConntrackSettings, cpus: usize) -> Result<(), Error> {
    if s.max_per_core > 0 {
        let max = (i64::from(s.max_per_core) * cpus as i64).max(i64::from(s.min));
        let path = root.join("nf_conntrack_max");
        let current = read(&path).map_err(|source| Error { path: path.display().to_string(), source })?;
        // Only ever raised. In a network namespace other than the host's the table size
        // is read-only: the host's setting applies, as with upstream in a container.
        if current < max {
            match set(root, "nf_conntrack_max", max) {
                Ok(()) => {}
                Err(e)
                    if matches!(e.source.raw_os_error(), Some(libc::EACCES | libc::EPERM | libc::EROFS)) =>
                {
                    tracing::warn!(current, wanted = max, "nf_conntrack_max is read-only here; leaving it");
                }
                Err(e) => return Err(e),
            }
        }
    }
    let secs = |d: Duration| d.as_secs() as i64;
    if let Some(t) = s.tcp_established_timeout.filter(|d| !d.is_zero()) {
        set(root, "nf_conntrack_tcp_timeout_established", secs(t))?;
    }
    if let Some(t) = s.tcp_close_wait_timeout.filter(|d| !d.is_zero()) {
        set(root, "nf_conntrack_tcp_timeout_close_wait", secs(t))?;
    }
    if s.tcp_be_liberal {
        set(root, "nf_conntrack_tcp_be_liberal", 1)?;
    }
    if let Some(t) = s.udp_timeout.filter(|d| !d.is_zero()) {
        set(root, "nf_conntrack_udp_timeout", secs(t))?;
    }
    if let Some(t) = s.udp_stream_timeout.filter(|d| !d.is_zero()) {
        set(root, "nf_conntrack_udp_timeout_stream", secs(t))?;
    }
    Ok(())
}

/// Applies `s` to this network namespace.
pub fn apply_settings(s: &ConntrackSettings) -> Result<(), Error> {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    apply_settings_at(&PathBuf::from("/proc/sys/net/netfilter"), s, cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_only_what_differs() {
        let dir = tempfile::tempdir().unwrap();
        for (name, v) in [
            ("nf_conntrack_max", "1000"),
            ("nf_conntrack_tcp_timeout_established", "86400"),
            ("nf_conntrack_tcp_timeout_close_wait", "60"),
            ("nf_conntrack_tcp_be_liberal", "0"),
        ] {
            std::fs::write(dir.path().join(name), v).unwrap();
        }
        let s = ConntrackSettings {
            max_per_core: 100,
            min: 5000,
            tcp_established_timeout: Some(Duration::from_secs(86400)),
            tcp_close_wait_timeout: Some(Duration::from_secs(3600)),
            tcp_be_liberal: true,
            ..Default::default()
        };
        apply_settings_at(dir.path(), &s, 2).unwrap();
        let get = |n: &str| std::fs::read_to_string(dir.path().join(n)).unwrap();
        assert_eq!(get("nf_conntrack_max"), "5000");
        assert_eq!(get("nf_conntrack_tcp_timeout_close_wait"), "3600");
        assert_eq!(get("nf_conntrack_tcp_be_liberal"), "1");
        // A missing sysctl (udp timeouts not asked for) is never touched.
        assert!(!dir.path().join("nf_conntrack_udp_timeout").exists());
    }
}
