//! Flags, under etcd's names and defaults, and the validated server configuration built
//! from them. Flags this server does not implement are not declared, so they are refused
//! by the parser instead of being accepted and ignored. Like etcd, every flag can also be
//! given as an `ETCD_*` environment variable.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use url::Url;

/// etcd's default backend quota when `--quota-backend-bytes` is 0: 2 GiB.
pub const DEFAULT_QUOTA_BYTES: u64 = 2 << 30;
/// Hard ceiling etcd puts on the quota: 8 GiB.
pub const MAX_QUOTA_BYTES: u64 = 8 << 30;

#[derive(Debug, Parser)]
#[command(name = "etcd", version = crate::SERVER_VERSION, about = "A Raft key-value store speaking the etcd v3 API")]
pub struct Flags {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Human-readable name for this member.
    #[arg(long, env = "ETCD_NAME", default_value = "default")]
    pub name: String,
    /// Path to the data directory (default: ${name}.etcd).
    #[arg(long, env = "ETCD_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// List of URLs to listen on for client traffic.
    #[arg(long, env = "ETCD_LISTEN_CLIENT_URLS", default_value = "http://localhost:2379")]
    pub listen_client_urls: String,
    /// List of this member's client URLs to advertise to the public.
    #[arg(long, env = "ETCD_ADVERTISE_CLIENT_URLS", default_value = "http://localhost:2379")]
    pub advertise_client_urls: String,
    /// List of URLs to listen on for peer traffic.
    #[arg(long, env = "ETCD_LISTEN_PEER_URLS", default_value = "http://localhost:2380")]
    pub listen_peer_urls: String,
    /// List of this member's peer URLs to advertise to the rest of the cluster.
    #[arg(long, env = "ETCD_INITIAL_ADVERTISE_PEER_URLS", default_value = "http://localhost:2380")]
    pub initial_advertise_peer_urls: String,
    /// Initial cluster configuration for bootstrapping (name=peerURL,...).
    #[arg(long, env = "ETCD_INITIAL_CLUSTER")]
    pub initial_cluster: Option<String>,
    /// Initial cluster state ('new' or 'existing').
    #[arg(long, env = "ETCD_INITIAL_CLUSTER_STATE", default_value = "new")]
    pub initial_cluster_state: String,
    /// Initial cluster token for the etcd cluster during bootstrap.
    #[arg(long, env = "ETCD_INITIAL_CLUSTER_TOKEN", default_value = "etcd-cluster")]
    pub initial_cluster_token: String,
    /// List of URLs to listen on for the metrics and health endpoints.
    #[arg(long, env = "ETCD_LISTEN_METRICS_URLS", default_value = "")]
    pub listen_metrics_urls: String,
    /// Raise alarms when backend size exceeds the given quota (0 defaults to 2 GiB).
    #[arg(long, env = "ETCD_QUOTA_BACKEND_BYTES", default_value_t = 0)]
    pub quota_backend_bytes: u64,
    /// Maximum client request size in bytes the server will accept.
    #[arg(long, env = "ETCD_MAX_REQUEST_BYTES", default_value_t = 1_572_864)]
    pub max_request_bytes: u32,
    /// Maximum number of operations permitted in a transaction.
    #[arg(long, env = "ETCD_MAX_TXN_OPS", default_value_t = 128)]
    pub max_txn_ops: u32,
    /// Interpret 'auto-compaction-retention' one of: periodic|revision.
    #[arg(long, env = "ETCD_AUTO_COMPACTION_MODE", default_value = "periodic")]
    pub auto_compaction_mode: String,
    /// Auto compaction retention for the mvcc key value store. 0 means disable.
    #[arg(long, env = "ETCD_AUTO_COMPACTION_RETENTION", default_value = "0")]
    pub auto_compaction_retention: String,
    /// Number of committed transactions to trigger a snapshot (raft log compaction).
    #[arg(long, env = "ETCD_SNAPSHOT_COUNT", default_value_t = 100_000)]
    pub snapshot_count: u64,
    /// Time (in milliseconds) of a heartbeat interval.
    #[arg(long, env = "ETCD_HEARTBEAT_INTERVAL", default_value_t = 100)]
    pub heartbeat_interval: u64,
    /// Time (in milliseconds) for an election to timeout.
    #[arg(long, env = "ETCD_ELECTION_TIMEOUT", default_value_t = 1000)]
    pub election_timeout: u64,
    /// Path to the client server TLS cert file.
    #[arg(long, env = "ETCD_CERT_FILE")]
    pub cert_file: Option<PathBuf>,
    /// Path to the client server TLS key file.
    #[arg(long, env = "ETCD_KEY_FILE")]
    pub key_file: Option<PathBuf>,
    /// Path to the client server TLS trusted CA cert file.
    #[arg(long, env = "ETCD_TRUSTED_CA_FILE")]
    pub trusted_ca_file: Option<PathBuf>,
    /// Enable client cert authentication.
    #[arg(long, env = "ETCD_CLIENT_CERT_AUTH", num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub client_cert_auth: bool,
    /// Path to the peer server TLS cert file.
    #[arg(long, env = "ETCD_PEER_CERT_FILE")]
    pub peer_cert_file: Option<PathBuf>,
    /// Path to the peer server TLS key file.
    #[arg(long, env = "ETCD_PEER_KEY_FILE")]
    pub peer_key_file: Option<PathBuf>,
    /// Path to the peer server TLS trusted CA file.
    #[arg(long, env = "ETCD_PEER_TRUSTED_CA_FILE")]
    pub peer_trusted_ca_file: Option<PathBuf>,
    /// Enable peer client cert authentication.
    #[arg(long, env = "ETCD_PEER_CLIENT_CERT_AUTH", num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub peer_client_cert_auth: bool,
    /// Duration of periodic watch progress notifications.
    #[arg(long, env = "ETCD_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL", default_value = "10m")]
    pub experimental_watch_progress_notify_interval: String,
    /// Log level: debug, info, warn, error, panic, or fatal.
    #[arg(long, env = "ETCD_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Auth token type: 'simple', or 'jwt,pub-key=<path>,priv-key=<path>,sign-method=<alg>,ttl=<duration>'.
    #[arg(long, env = "ETCD_AUTH_TOKEN", default_value = "simple")]
    pub auth_token: String,
    /// Seconds a simple token lives without being used.
    #[arg(long, env = "ETCD_AUTH_TOKEN_TTL", default_value_t = 300)]
    pub auth_token_ttl: u64,
    /// bcrypt cost of hashed passwords (4 to 31).
    #[arg(long, env = "ETCD_BCRYPT_COST", default_value_t = 10)]
    pub bcrypt_cost: u32,
    /// Disables fsync, unsafe, will cause data loss.
    #[arg(long, env = "ETCD_UNSAFE_NO_FSYNC", num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub unsafe_no_fsync: bool,
}

/// Subcommands beside running the server.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Snapshot tools.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
}

#[derive(Debug, clap::Subcommand)]
pub enum SnapshotCommand {
    /// Create the data dir of a member of a new cluster from a snapshot file.
    Restore(crate::restore::RestoreArgs),
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--{flag}: {reason}")]
    Invalid { flag: &'static str, reason: String },
}

fn invalid(flag: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { flag, reason: reason.into() }
}

#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub trusted_ca: Option<PathBuf>,
    pub client_cert_auth: bool,
}

/// Whether this member starts a new cluster or joins a running one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterState {
    New,
    Existing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoCompaction {
    Off,
    /// Keep at least this much history (by time).
    Periodic(Duration),
    /// Keep this many revisions.
    Revision(i64),
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub name: String,
    pub data_dir: PathBuf,
    pub listen_client_urls: Vec<Url>,
    pub advertise_client_urls: Vec<Url>,
    pub listen_peer_urls: Vec<Url>,
    pub advertise_peer_urls: Vec<Url>,
    /// name → peer URLs of the initial cluster.
    pub initial_cluster: Vec<(String, Vec<Url>)>,
    pub initial_cluster_state: ClusterState,
    pub initial_cluster_token: String,
    pub listen_metrics_urls: Vec<Url>,
    pub quota_backend_bytes: u64,
    pub max_request_bytes: usize,
    pub max_txn_ops: usize,
    pub auto_compaction: AutoCompaction,
    pub snapshot_count: u64,
    pub heartbeat: Duration,
    pub election_timeout: Duration,
    pub client_tls: Option<TlsFiles>,
    pub peer_tls: Option<TlsFiles>,
    pub watch_progress_notify_interval: Duration,
    pub log_level: String,
    /// `--auth-token`, parsed (and its key files read) when the server starts.
    pub auth_token: String,
    pub auth_token_ttl: Duration,
    pub bcrypt_cost: u32,
    /// `--unsafe-no-fsync`: acknowledged writes are not on disk until the OS writes them.
    pub unsafe_no_fsync: bool,
}

impl ServerConfig {
    /// Ticks in an election timeout.
    pub fn election_ticks(&self) -> usize {
        (self.election_timeout.as_millis() / self.heartbeat.as_millis().max(1)) as usize
    }

    /// How long a client request may wait for raft before "request timed out"
    /// (etcd: 5s plus two election timeouts).
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(5) + self.election_timeout * 2
    }

    /// Shortest lease TTL, so that a lease survives a leader election (etcd's minTTL:
    /// 1.5 election timeouts, rounded up to whole seconds).
    pub fn min_lease_ttl(&self) -> i64 {
        let ms = self.election_timeout.as_millis() as i64 * 3 / 2;
        (ms + 999) / 1000
    }
}

impl Flags {
    pub fn into_config(self) -> Result<ServerConfig, ConfigError> {
        let listen_client_urls = parse_urls("listen-client-urls", &self.listen_client_urls)?;
        let advertise_client_urls = parse_urls("advertise-client-urls", &self.advertise_client_urls)?;
        let listen_peer_urls = parse_urls("listen-peer-urls", &self.listen_peer_urls)?;
        let advertise_peer_urls =
            parse_urls("initial-advertise-peer-urls", &self.initial_advertise_peer_urls)?;
        let listen_metrics_urls = if self.listen_metrics_urls.is_empty() {
            Vec::new()
        } else {
            parse_urls("listen-metrics-urls", &self.listen_metrics_urls)?
        };
        let initial_cluster_raw = self
            .initial_cluster
            .clone()
            .unwrap_or_else(|| format!("{}={}", self.name, self.initial_advertise_peer_urls));
        let initial_cluster = parse_initial_cluster(&initial_cluster_raw)?;

        let initial_cluster_state = match self.initial_cluster_state.as_str() {
            "new" => ClusterState::New,
            "existing" => ClusterState::Existing,
            other => {
                return Err(invalid(
                    "initial-cluster-state",
                    format!("unexpected value {other:?}, want 'new' or 'existing'"),
                ));
            }
        };
        let Some((_, own_urls)) = initial_cluster.iter().find(|(n, _)| *n == self.name) else {
            return Err(invalid(
                "initial-cluster",
                format!("{initial_cluster_raw} does not contain this member's name {:?}", self.name),
            ));
        };
        let mut a: Vec<String> = own_urls.iter().map(Url::to_string).collect();
        let mut b: Vec<String> = advertise_peer_urls.iter().map(Url::to_string).collect();
        a.sort();
        b.sort();
        if a != b {
            return Err(invalid(
                "initial-cluster",
                format!(
                    "has {}={} but missing from --initial-advertise-peer-urls={} (URLs must match)",
                    self.name,
                    a.join(","),
                    b.join(",")
                ),
            ));
        }

        if self.heartbeat_interval == 0 {
            return Err(invalid("heartbeat-interval", "must be positive"));
        }
        if self.election_timeout < 5 * self.heartbeat_interval {
            return Err(invalid(
                "election-timeout",
                format!(
                    "{}ms should be at least 5 times --heartbeat-interval ({}ms)",
                    self.election_timeout, self.heartbeat_interval
                ),
            ));
        }
        if self.election_timeout > 50_000 {
            return Err(invalid("election-timeout", "is too long, and should be set less than 50 seconds"));
        }
        let quota_backend_bytes = match self.quota_backend_bytes {
            0 => DEFAULT_QUOTA_BYTES,
            q if q > MAX_QUOTA_BYTES => {
                return Err(invalid(
                    "quota-backend-bytes",
                    format!("{q} exceeds the maximum {MAX_QUOTA_BYTES}"),
                ));
            }
            q => q,
        };
        if self.max_request_bytes == 0 {
            return Err(invalid("max-request-bytes", "must be positive"));
        }
        if self.max_txn_ops == 0 {
            return Err(invalid("max-txn-ops", "must be positive"));
        }
        let auto_compaction =
            parse_auto_compaction(&self.auto_compaction_mode, &self.auto_compaction_retention)?;

        let needs_client_tls = listen_client_urls.iter().any(|u| u.scheme() == "https");
        let client_tls = tls_files(
            "cert-file",
            self.cert_file,
            self.key_file,
            self.trusted_ca_file,
            self.client_cert_auth,
            needs_client_tls,
        )?;
        let needs_peer_tls = listen_peer_urls.iter().any(|u| u.scheme() == "https");
        let peer_tls = tls_files(
            "peer-cert-file",
            self.peer_cert_file,
            self.peer_key_file,
            self.peer_trusted_ca_file,
            self.peer_client_cert_auth,
            needs_peer_tls,
        )?;
        let watch_progress_notify_interval =
            parse_go_duration(&self.experimental_watch_progress_notify_interval)
                .map_err(|e| invalid("experimental-watch-progress-notify-interval", e))?;
        if watch_progress_notify_interval.is_zero() {
            return Err(invalid("experimental-watch-progress-notify-interval", "must be positive"));
        }

        if !(4..=31).contains(&self.bcrypt_cost) {
            return Err(invalid("bcrypt-cost", format!("{} is outside 4..=31", self.bcrypt_cost)));
        }
        if self.auth_token_ttl == 0 {
            return Err(invalid("auth-token-ttl", "must be positive"));
        }

        Ok(ServerConfig {
            auth_token: self.auth_token,
            auth_token_ttl: Duration::from_secs(self.auth_token_ttl),
            bcrypt_cost: self.bcrypt_cost,
            unsafe_no_fsync: self.unsafe_no_fsync,
            data_dir: self.data_dir.unwrap_or_else(|| PathBuf::from(format!("{}.etcd", self.name))),
            name: self.name,
            listen_client_urls,
            advertise_client_urls,
            listen_peer_urls,
            advertise_peer_urls,
            initial_cluster,
            initial_cluster_state,
            initial_cluster_token: self.initial_cluster_token,
            listen_metrics_urls,
            quota_backend_bytes,
            max_request_bytes: self.max_request_bytes as usize,
            max_txn_ops: self.max_txn_ops as usize,
            auto_compaction,
            snapshot_count: self.snapshot_count,
            heartbeat: Duration::from_millis(self.heartbeat_interval),
            election_timeout: Duration::from_millis(self.election_timeout),
            client_tls,
            peer_tls,
            watch_progress_notify_interval,
            log_level: self.log_level,
        })
    }
}

fn tls_files(
    flag: &'static str,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    trusted_ca: Option<PathBuf>,
    client_cert_auth: bool,
    required: bool,
) -> Result<Option<TlsFiles>, ConfigError> {
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(TlsFiles { cert, key, trusted_ca, client_cert_auth })),
        (None, None) if required => Err(invalid(flag, "an https URL needs a certificate and key")),
        (None, None) if client_cert_auth || trusted_ca.is_some() => {
            Err(invalid(flag, "client certificate authentication needs a server certificate and key"))
        }
        (None, None) => Ok(None),
        _ => Err(invalid(flag, "the certificate and the key file must be given together")),
    }
}

/// Parses a comma-separated URL list; only http and https with an explicit host:port.
pub fn parse_urls(flag: &'static str, s: &str) -> Result<Vec<Url>, ConfigError> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let u = Url::parse(part).map_err(|e| invalid(flag, format!("{part:?}: {e}")))?;
        if u.scheme() != "http" && u.scheme() != "https" {
            return Err(invalid(flag, format!("{part:?}: URL scheme must be http or https")));
        }
        if u.host_str().is_none() || u.port_or_known_default().is_none() {
            return Err(invalid(flag, format!("{part:?}: URL must have a host and port")));
        }
        if u.path() != "/" && !u.path().is_empty() {
            return Err(invalid(flag, format!("{part:?}: URL must not have a path")));
        }
        out.push(u);
    }
    if out.is_empty() {
        return Err(invalid(flag, "no URLs given"));
    }
    Ok(out)
}

fn parse_initial_cluster(s: &str) -> Result<Vec<(String, Vec<Url>)>, ConfigError> {
    let mut members: Vec<(String, Vec<Url>)> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((name, url)) = part.split_once('=') else {
            return Err(invalid("initial-cluster", format!("{part:?} is not name=URL")));
        };
        let url = parse_urls("initial-cluster", url)?.remove(0);
        match members.iter_mut().find(|(n, _)| n == name) {
            Some((_, urls)) => urls.push(url),
            None => members.push((name.to_string(), vec![url])),
        }
    }
    if members.is_empty() {
        return Err(invalid("initial-cluster", "empty"));
    }
    Ok(members)
}

fn parse_auto_compaction(mode: &str, retention: &str) -> Result<AutoCompaction, ConfigError> {
    if retention == "0" || retention.is_empty() {
        return Ok(AutoCompaction::Off);
    }
    match mode {
        "periodic" => {
            // A bare number means hours, as etcd reads it.
            let d = match retention.parse::<u64>() {
                Ok(h) => Duration::from_secs(h * 3600),
                Err(_) => {
                    parse_go_duration(retention).map_err(|e| invalid("auto-compaction-retention", e))?
                }
            };
            if d.is_zero() { Ok(AutoCompaction::Off) } else { Ok(AutoCompaction::Periodic(d)) }
        }
        "revision" => {
            let n = retention.parse::<i64>().map_err(|_| {
                invalid("auto-compaction-retention", format!("{retention:?} is not a revision count"))
            })?;
            if n < 0 {
                return Err(invalid("auto-compaction-retention", "must not be negative"));
            }
            Ok(AutoCompaction::Revision(n))
        }
        other => {
            Err(invalid("auto-compaction-mode", format!("unknown mode {other:?}, want periodic or revision")))
        }
    }
}

/// Parses a Go duration string such as "1h30m", "500ms", "10s".
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    if rest.is_empty() {
        return Err("empty duration".into());
    }
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_end);
        let value: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
        let unit_end = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let secs = match unit {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return Err(format!("invalid duration {s:?}: unknown unit {unit:?}")),
        };
        total += Duration::from_secs_f64(value * secs);
        rest = tail;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> Flags {
        let mut v = vec!["etcd"];
        v.extend_from_slice(args);
        Flags::try_parse_from(v).unwrap()
    }

    #[test]
    fn defaults_match_etcd() {
        let c = flags(&[]).into_config().unwrap();
        assert_eq!(c.name, "default");
        assert_eq!(c.data_dir, PathBuf::from("default.etcd"));
        assert_eq!(c.quota_backend_bytes, 2 << 30);
        assert_eq!(c.max_request_bytes, 1_572_864);
        assert_eq!(c.election_ticks(), 10);
        assert_eq!(c.min_lease_ttl(), 2);
        assert_eq!(c.auto_compaction, AutoCompaction::Off);
    }

    #[test]
    fn unknown_and_unimplemented_flags_are_refused() {
        assert!(Flags::try_parse_from(["etcd", "--wal-dir", "/x"]).is_err());
        let multi = flags(&[
            "--name",
            "a",
            "--initial-advertise-peer-urls",
            "http://127.0.0.1:1",
            "--initial-cluster",
            "a=http://127.0.0.1:1,b=http://127.0.0.1:2",
            "--initial-cluster-state",
            "existing",
        ]);
        let c = multi.into_config().unwrap();
        assert_eq!((c.initial_cluster.len(), c.initial_cluster_state), (2, ClusterState::Existing));
        assert!(flags(&["--initial-cluster-state", "old"]).into_config().is_err());
        let mismatch = flags(&["--name", "a", "--initial-cluster", "a=http://127.0.0.1:9"]);
        assert!(mismatch.into_config().is_err());
    }

    #[test]
    fn bool_flags_take_go_syntax() {
        let f = flags(&["--client-cert-auth", "--cert-file", "c", "--key-file", "k"]);
        assert!(f.client_cert_auth);
        assert!(!f.unsafe_no_fsync);
        assert!(flags(&["--unsafe-no-fsync"]).into_config().unwrap().unsafe_no_fsync);
        assert!(!flags(&["--unsafe-no-fsync=false"]).into_config().unwrap().unsafe_no_fsync);
        let f = flags(&["--client-cert-auth=false"]);
        assert!(!f.client_cert_auth);
    }

    #[test]
    fn durations_and_compaction() {
        assert_eq!(parse_go_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_go_duration("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_go_duration("5x").is_err());
        assert_eq!(
            parse_auto_compaction("periodic", "2").unwrap(),
            AutoCompaction::Periodic(Duration::from_secs(7200))
        );
        assert_eq!(parse_auto_compaction("revision", "1000").unwrap(), AutoCompaction::Revision(1000));
        assert!(parse_auto_compaction("weekly", "1").is_err());
    }
}
