//! Load generator and meter for kube-proxy (hack/bench/kube-proxy.sh). Subcommands:
//!   populate  namespace `bench` with Services `svc-<i>` (one TCP port `http` 80 -> 8080, a
//!             ClusterIP) up to `--services`, each with one EndpointSlice `svc-<i>-0` of
//!             `--endpoints` ready endpoints, created concurrently; and the Node kube-proxy
//!             runs as (`--node`, InternalIP `--node-ip`). Creates only what is missing, so
//!             growing sizes reuse what earlier rounds made.
//!   measure   one kube-proxy run the script has just started (`--pid`, `--start-unix`):
//!             - waits for its first IPv4 sync (a full one) in its log (`--log`: the metrics
//!               mix the IPv4 and IPv6 proxiers) and reads start -> synced and its duration;
//!             - then `--updates` EndpointSlice updates, `--interval-ms` apart, round-robin
//!               over 10 Services spread over the range: one endpoint replaced by a new IP,
//!               `endpoints.kubernetes.io/last-change-trigger-time` set to now. For each, the
//!               `kubeproxy_sync_partial_proxy_rules_duration_seconds` delta of the sync that
//!               programmed it, and the programming latency: trigger time -> that sync's end
//!               (`..._last_timestamp_seconds`, set after the kernel took the rules; what
//!               kube-proxy feeds `kubeproxy_network_programming_duration_seconds`, whose
//!               0.25 s buckets are too coarse to print). The kernel is checked (untimed)
//!               before and after: every endpoint of those Services in the netns's rules;
//!             - kube-proxy's CPU seconds (/proc/PID/stat) and peak RSS (VmHWM).
//!             Prints one line and appends one row to `--results`.
//!   report    the table of `--results`, nftables/iptables ratios per size, and the goals.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail, ensure};
use clap::{Parser, Subcommand};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NS: &str = "bench";
/// First endpoint address of the initial slices (inside --cluster-cidr 10.128.0.0/12).
const ENDPOINT_BASE: Ipv4Addr = Ipv4Addr::new(10, 128, 0, 0);
/// First address the updates use; each run gets its own block of 65536.
const UPDATE_BASE: Ipv4Addr = Ipv4Addr::new(10, 140, 0, 0);
const TARGET_PORT: u16 = 8080;
/// How many Services the updates go round-robin over.
const UPDATED_SERVICES: usize = 10;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    Populate(PopulateArgs),
    Measure(MeasureArgs),
    Report(ReportArgs),
}

#[derive(Parser)]
struct PopulateArgs {
    #[arg(long)]
    kubeconfig: PathBuf,
    #[arg(long)]
    services: usize,
    #[arg(long, default_value_t = 10)]
    endpoints: usize,
    #[arg(long)]
    node: String,
    #[arg(long)]
    node_ip: Ipv4Addr,
    /// Requests in flight.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
}

#[derive(Parser)]
struct MeasureArgs {
    #[arg(long)]
    kubeconfig: PathBuf,
    /// nftables or iptables.
    #[arg(long)]
    mode: String,
    /// Services present (for the Services updated and the report).
    #[arg(long)]
    services: usize,
    #[arg(long, default_value_t = 10)]
    endpoints: usize,
    /// kube-proxy's pid.
    #[arg(long)]
    pid: u32,
    /// When the script started kube-proxy (Unix seconds).
    #[arg(long)]
    start_unix: f64,
    /// kube-proxy's log (the first IPv4 full sync is read from it).
    #[arg(long)]
    log: PathBuf,
    /// kube-proxy's metrics address, HOST:PORT.
    #[arg(long)]
    metrics: String,
    /// The network namespace kube-proxy runs in.
    #[arg(long)]
    netns: String,
    #[arg(long, default_value_t = 100)]
    updates: usize,
    #[arg(long, default_value_t = 2200)]
    interval_ms: u64,
    /// Distinguishes the runs of one script run (the block of new endpoint addresses).
    #[arg(long, default_value_t = 0)]
    run_index: u32,
    /// Seconds to wait for the first sync.
    #[arg(long, default_value_t = 900)]
    sync_timeout: u64,
    /// Tab-separated results, appended to.
    #[arg(long)]
    results: PathBuf,
}

#[derive(Parser)]
struct ReportArgs {
    #[arg(long)]
    results: PathBuf,
    /// Goals: nftables full sync of the largest size, seconds; one-endpoint change, ms.
    #[arg(long, default_value_t = 1.0)]
    goal_full_sync_s: f64,
    #[arg(long, default_value_t = 50.0)]
    goal_change_ms: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Populate(a) => populate(a).await,
        Cmd::Measure(a) => measure(a).await,
        Cmd::Report(a) => report(&a),
    }
}

async fn client(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(cfg)?)
}

fn endpoint_ip(service: usize, endpoint: usize, per_service: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(ENDPOINT_BASE) + (service * per_service + endpoint) as u32 + 1)
}

fn slice_endpoints(ips: &[Ipv4Addr]) -> serde_json::Value {
    ips.iter()
        .map(|ip| {
            json!({
                "addresses": [ip.to_string()],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": "elsewhere",
            })
        })
        .collect()
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

async fn populate(a: PopulateArgs) -> anyhow::Result<()> {
    let client = client(&a.kubeconfig).await?;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}}))?;
    match Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(e) if is_conflict(&e) => {}
        Err(e) => return Err(e).context("creating the namespace"),
    }
    let nodes = Api::<Node>::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": a.node, "labels": {"kubernetes.io/hostname": a.node}},
        "status": {"addresses": [{"type": "InternalIP", "address": a.node_ip.to_string()},
                                 {"type": "Hostname", "address": a.node}]},
    }))?;
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(e) if is_conflict(&e) => {}
        Err(e) => return Err(e).context("creating the Node"),
    }
    // Status may be dropped on create; set it through the subresource too.
    nodes
        .patch_status(
            &a.node,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"addresses": [
                {"type": "InternalIP", "address": a.node_ip.to_string()},
                {"type": "Hostname", "address": a.node}]}})),
        )
        .await
        .context("setting the Node's addresses")?;

    let services = Api::<Service>::namespaced(client.clone(), NS);
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), NS);
    let have_svc: BTreeSet<String> = services
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    let have_slice: BTreeSet<String> = slices
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    let todo: Vec<usize> = (0..a.services)
        .filter(|i| !have_svc.contains(&format!("svc-{i}")) || !have_slice.contains(&format!("svc-{i}-0")))
        .collect();
    let start = Instant::now();
    let n = todo.len();
    futures::stream::iter(todo)
        .map(|i| {
            let services = services.clone();
            let slices = slices.clone();
            let per = a.endpoints;
            async move {
                let name = format!("svc-{i}");
                let svc: Service = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {"ports": [{"name": "http", "port": 80, "targetPort": TARGET_PORT, "protocol": "TCP"}]},
                }))?;
                match services.create(&PostParams::default(), &svc).await {
                    Ok(_) => {}
                    Err(e) if is_conflict(&e) => {}
                    Err(e) => return Err(anyhow::Error::from(e).context(format!("creating Service {name}"))),
                }
                let ips: Vec<Ipv4Addr> = (0..per).map(|j| endpoint_ip(i, j, per)).collect();
                let slice: EndpointSlice = serde_json::from_value(json!({
                    "metadata": {
                        "name": format!("{name}-0"),
                        "labels": {
                            "kubernetes.io/service-name": name,
                            "endpointslice.kubernetes.io/managed-by": "kube-proxy-bench",
                        },
                    },
                    "addressType": "IPv4",
                    "endpoints": slice_endpoints(&ips),
                    "ports": [{"name": "http", "port": TARGET_PORT, "protocol": "TCP"}],
                }))?;
                match slices.create(&PostParams::default(), &slice).await {
                    Ok(_) => {}
                    Err(e) if is_conflict(&e) => {}
                    Err(e) => return Err(anyhow::Error::from(e).context(format!("creating EndpointSlice {name}-0"))),
                }
                anyhow::Ok(())
            }
        })
        .buffer_unordered(a.concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    let took = start.elapsed().as_secs_f64();
    println!(
        "populate  {} Services x {} endpoints present: created {n} Services + {n} EndpointSlices in {took:.1}s ({:.0} objects/s)",
        a.services,
        a.endpoints,
        2.0 * n as f64 / took.max(1e-9)
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// /proc, /metrics, time

fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz)
}

/// A `/proc/PID/status` field in MiB (VmHWM, VmRSS).
fn status_mib(pid: u32, field: &str) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

/// RFC 3339 in UTC with nanoseconds, as the annotation carries it.
fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, sod) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60,
        d.subsec_nanos()
    )
}

/// One scrape: series (`name` or `name{labels}`) to value.
#[derive(Default, Clone)]
struct Scrape(HashMap<String, f64>);

impl Scrape {
    fn get(&self, series: &str) -> f64 {
        self.0.get(series).copied().unwrap_or(0.0)
    }

    /// Cumulative buckets of an unlabelled histogram, by upper bound.
    fn buckets(&self, name: &str) -> Vec<(f64, f64)> {
        let prefix = format!("{name}_bucket{{le=\"");
        let mut b: Vec<(f64, f64)> = self
            .0
            .iter()
            .filter_map(|(k, v)| {
                let le = k.strip_prefix(&prefix)?.strip_suffix("\"}")?;
                let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
                Some((le, *v))
            })
            .collect();
        b.sort_by(|x, y| x.0.total_cmp(&y.0));
        b
    }
}

async fn scrape(addr: &str) -> anyhow::Result<Scrape> {
    let mut s = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr)).await??;
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf)).await??;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").context("no HTTP header end")?;
    ensure!(
        head.starts_with("HTTP/1.") && head.contains(" 200"),
        "metrics: {}",
        head.lines().next().unwrap_or("")
    );
    let mut m = HashMap::new();
    for line in body.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if let Some((series, value)) = line.rsplit_once(' ')
            && let Ok(v) = value.trim().parse::<f64>()
        {
            m.insert(series.trim().to_owned(), v);
        }
    }
    Ok(Scrape(m))
}

const PARTIAL: &str = "kubeproxy_sync_partial_proxy_rules_duration_seconds";
const LAST_SYNC: &str = "kubeproxy_sync_proxy_rules_last_timestamp_seconds";
const NETPROG: &str = "kubeproxy_network_programming_duration_seconds";

/// Nearest-rank percentile of sorted samples.
fn pct(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Prometheus' histogram_quantile over the difference of two scrapes.
fn histogram_quantile(before: &Scrape, after: &Scrape, name: &str, q: f64) -> f64 {
    let b0: HashMap<u64, f64> = before.buckets(name).into_iter().map(|(le, v)| (le.to_bits(), v)).collect();
    let b: Vec<(f64, f64)> = after
        .buckets(name)
        .into_iter()
        .map(|(le, v)| (le, v - b0.get(&le.to_bits()).copied().unwrap_or(0.0)))
        .collect();
    let Some(&(_, total)) = b.last() else { return f64::NAN };
    if total <= 0.0 {
        return f64::NAN;
    }
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for &(le, cum) in &b {
        if cum >= rank {
            if le.is_infinite() {
                return prev.0;
            }
            let in_bucket = cum - prev.1;
            return if in_bucket <= 0.0 { le } else { prev.0 + (le - prev.0) * (rank - prev.1) / in_bucket };
        }
        prev = (le, cum);
    }
    f64::NAN
}

// ---------------------------------------------------------------------------------------
// A thread inside the network namespace, running nft/iptables there.

enum Job {
    Run { args: Vec<String>, reply: tokio::sync::oneshot::Sender<anyhow::Result<String>> },
}

fn run_cmd(args: &[String]) -> anyhow::Result<String> {
    let out =
        Command::new(&args[0]).args(&args[1..]).output().with_context(|| format!("running {}", args[0]))?;
    ensure!(
        out.status.success(),
        "{} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn netns_thread(netns: &str) -> anyhow::Result<std::sync::mpsc::Sender<Job>> {
    let (tx, rx) = std::sync::mpsc::channel::<Job>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<()>>();
    let path = format!("/var/run/netns/{netns}");
    std::thread::Builder::new().name("netns".into()).spawn(move || {
        let entered = (|| -> anyhow::Result<()> {
            let f = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
            // SAFETY: setns on an open namespace fd affects only this thread.
            let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
            ensure!(rc == 0, "setns {path}: {}", std::io::Error::last_os_error());
            Ok(())
        })();
        let ok = entered.is_ok();
        let _ = ready_tx.send(entered);
        if !ok {
            return;
        }
        for job in rx {
            match job {
                Job::Run { args, reply } => {
                    let _ = reply.send(run_cmd(&args));
                }
            }
        }
    })?;
    ready_rx.recv()??;
    Ok(tx)
}

async fn in_ns(tx: &std::sync::mpsc::Sender<Job>, args: &[&str]) -> anyhow::Result<String> {
    let (reply, rx) = tokio::sync::oneshot::channel();
    tx.send(Job::Run { args: args.iter().map(|s| s.to_string()).collect(), reply })
        .map_err(|_| anyhow::anyhow!("netns thread gone"))?;
    rx.await?
}

// ---------------------------------------------------------------------------------------

struct Row {
    mode: String,
    services: usize,
    endpoints: usize,
    start_to_sync_s: f64,
    full_sync_s: f64,
    partial_p50_ms: f64,
    partial_p99_ms: f64,
    partial_mean_ms: f64,
    lat_p50_ms: f64,
    lat_p99_ms: f64,
    kp_lat_p50_ms: f64,
    kp_lat_p99_ms: f64,
    hist_p50_s: f64,
    hist_p99_s: f64,
    cpu_sync_s: f64,
    cpu_total_s: f64,
    rss_mib: f64,
    poll_ms: f64,
    updates: usize,
}

const HEADER: &str = "mode\tservices\tendpoints\tstart_to_sync_s\tfull_sync_s\tpartial_p50_ms\tpartial_p99_ms\tpartial_mean_ms\tlat_p50_ms\tlat_p99_ms\tkp_lat_p50_ms\tkp_lat_p99_ms\thist_p50_s\thist_p99_s\tcpu_sync_s\tcpu_total_s\tpeak_rss_mib\tpoll_ms\tupdates";

impl Row {
    fn tsv(&self) -> String {
        format!(
            "{}\t{}\t{}\t{:.3}\t{:.4}\t{:.2}\t{:.2}\t{:.2}\t{:.1}\t{:.1}\t{:.1}\t{:.1}\t{:.3}\t{:.3}\t{:.2}\t{:.2}\t{:.1}\t{:.2}\t{}",
            self.mode,
            self.services,
            self.endpoints,
            self.start_to_sync_s,
            self.full_sync_s,
            self.partial_p50_ms,
            self.partial_p99_ms,
            self.partial_mean_ms,
            self.lat_p50_ms,
            self.lat_p99_ms,
            self.kp_lat_p50_ms,
            self.kp_lat_p99_ms,
            self.hist_p50_s,
            self.hist_p99_s,
            self.cpu_sync_s,
            self.cpu_total_s,
            self.rss_mib,
            self.poll_ms,
            self.updates
        )
    }

    fn parse(line: &str) -> Option<Row> {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() < 19 || f[0] == "mode" {
            return None;
        }
        let x = |i: usize| f[i].parse::<f64>().unwrap_or(f64::NAN);
        Some(Row {
            mode: f[0].to_owned(),
            services: f[1].parse().ok()?,
            endpoints: f[2].parse().ok()?,
            start_to_sync_s: x(3),
            full_sync_s: x(4),
            partial_p50_ms: x(5),
            partial_p99_ms: x(6),
            partial_mean_ms: x(7),
            lat_p50_ms: x(8),
            lat_p99_ms: x(9),
            kp_lat_p50_ms: x(10),
            kp_lat_p99_ms: x(11),
            hist_p50_s: x(12),
            hist_p99_s: x(13),
            cpu_sync_s: x(14),
            cpu_total_s: x(15),
            rss_mib: x(16),
            poll_ms: x(17),
            updates: f[18].parse().ok()?,
        })
    }
}

/// The first `family=Ip full=true` sync in kube-proxy's log: (time of day in seconds, its
/// duration in seconds). The histograms mix both families (the IPv6 proxier syncs too).
fn first_ipv4_full_sync(log: &Path) -> Option<(f64, f64)> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text.lines().find(|l| {
        l.contains("SyncProxyRules complete") && l.contains(" family=Ip ") && l.contains(" full=true")
    })?;
    let tod = line.split_whitespace().nth(1)?;
    let mut it = tod.split(':');
    let (h, m, sec): (f64, f64, f64) =
        (it.next()?.parse().ok()?, it.next()?.parse().ok()?, it.next()?.parse().ok()?);
    let el = line.split_whitespace().find_map(|w| w.strip_prefix("elapsed="))?;
    let secs = if let Some(v) = el.strip_suffix("ms") {
        v.parse::<f64>().ok()? / 1e3
    } else if let Some(v) = el.strip_suffix("µs") {
        v.parse::<f64>().ok()? / 1e6
    } else if let Some(v) = el.strip_suffix("ns") {
        v.parse::<f64>().ok()? / 1e9
    } else {
        el.strip_suffix('s')?.parse::<f64>().ok()?
    };
    Some((h * 3600.0 + m * 60.0 + sec, secs))
}

async fn measure(a: MeasureArgs) -> anyhow::Result<()> {
    ensure!(a.mode == "nftables" || a.mode == "iptables", "--mode nftables|iptables");
    let client = client(&a.kubeconfig).await?;
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), NS);

    // 1. The first IPv4 sync (a full one).
    let deadline = Instant::now() + Duration::from_secs(a.sync_timeout);
    let (tod, full_sync) = loop {
        ensure!(alive(a.pid), "kube-proxy (pid {}) exited before its first sync; see its log", a.pid);
        if let Some(x) = first_ipv4_full_sync(&a.log) {
            break x;
        }
        ensure!(Instant::now() < deadline, "no sync within {}s", a.sync_timeout);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let cpu_sync = cpu_seconds(a.pid).unwrap_or(f64::NAN);
    let start_to_sync = (tod - a.start_unix.rem_euclid(86400.0)).rem_euclid(86400.0);

    // 2. Let whatever was queued behind it run, then check the kernel has every endpoint
    // of the Services we will update.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let tx = netns_thread(&a.netns)?;
    let ids: Vec<usize> =
        (0..UPDATED_SERVICES.min(a.services)).map(|k| k * a.services / UPDATED_SERVICES).collect();
    let mut current: HashMap<usize, Vec<Ipv4Addr>> = HashMap::new();
    for &i in &ids {
        let s = slices.get(&format!("svc-{i}-0")).await?;
        let ips = s.endpoints.iter().filter_map(|e| e.addresses.first()?.parse().ok()).collect::<Vec<_>>();
        ensure!(ips.len() == a.endpoints, "svc-{i}-0 has {} endpoints", ips.len());
        current.insert(i, ips);
    }
    verify(&tx, &a.mode, &current).await.context("after the first sync")?;

    // 3. The updates.
    let mut kp_lat = Vec::new();
    let mut partial = Vec::new();
    let before_all = scrape(&a.metrics).await?;
    let interval = Duration::from_millis(a.interval_ms);
    let mut next = Instant::now();
    for k in 0..a.updates {
        tokio::time::sleep_until(next.into()).await;
        next += interval;
        let i = ids[k % ids.len()];
        let j = (k / ids.len()) % a.endpoints;
        let new_ip = Ipv4Addr::from(u32::from(UPDATE_BASE) + (a.run_index << 16) + k as u32 + 1);
        let mut ips = current[&i].clone();
        ips[j] = new_ip;
        let m0 = scrape(&a.metrics).await?;
        let now_wall = SystemTime::now();
        slices
            .patch(
                &format!("svc-{i}-0"),
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {"annotations": {"endpoints.kubernetes.io/last-change-trigger-time": rfc3339(now_wall)}},
                    "endpoints": slice_endpoints(&ips),
                })),
            )
            .await?;
        current.insert(i, ips);
        // The sync that programmed it: its histogram entry, then the timestamp it sets at
        // its end (after the kernel accepted the rules).
        let trigger = now_wall.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
        let wait_until = Instant::now() + Duration::from_secs(30);
        loop {
            let m1 = scrape(&a.metrics).await?;
            let dn = m1.get(&format!("{PARTIAL}_count")) - m0.get(&format!("{PARTIAL}_count"));
            if dn >= 1.0 && m1.get(LAST_SYNC) > trigger {
                let ds = m1.get(&format!("{PARTIAL}_sum")) - m0.get(&format!("{PARTIAL}_sum"));
                partial.push(ds / dn * 1000.0);
                kp_lat.push((m1.get(LAST_SYNC) - trigger) * 1000.0);
                break;
            }
            if Instant::now() > wait_until {
                eprintln!("update {k}: no partial sync recorded within 30s");
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after_all = scrape(&a.metrics).await?;
    let cpu_total = cpu_seconds(a.pid).unwrap_or(f64::NAN);
    let rss = status_mib(a.pid, "VmHWM:").unwrap_or(f64::NAN);
    ensure!(alive(a.pid), "kube-proxy exited during the run");
    verify(&tx, &a.mode, &current).await.context("after the updates")?;

    for v in [&mut kp_lat, &mut partial] {
        v.sort_by(f64::total_cmp);
    }
    let mean = |v: &[f64]| if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 };
    let row = Row {
        mode: a.mode.clone(),
        services: a.services,
        endpoints: a.endpoints,
        start_to_sync_s: start_to_sync,
        full_sync_s: full_sync,
        partial_p50_ms: pct(&partial, 0.5),
        partial_p99_ms: pct(&partial, 0.99),
        partial_mean_ms: mean(&partial[..]),
        lat_p50_ms: pct(&kp_lat, 0.5),
        lat_p99_ms: pct(&kp_lat, 0.99),
        kp_lat_p50_ms: pct(&kp_lat, 0.5),
        kp_lat_p99_ms: pct(&kp_lat, 0.99),
        hist_p50_s: histogram_quantile(&before_all, &after_all, NETPROG, 0.5),
        hist_p99_s: histogram_quantile(&before_all, &after_all, NETPROG, 0.99),
        cpu_sync_s: cpu_sync,
        cpu_total_s: cpu_total,
        rss_mib: rss,
        poll_ms: f64::NAN,
        updates: kp_lat.len(),
    };
    println!(
        "{:<8} {:>6} svc x {} ep: start->synced {:.2}s, full sync {:.3}s, partial sync p50 {:.1}ms p99 {:.1}ms, \
         programming latency (trigger -> end of the sync that wrote it) p50 {:.0}ms p99 {:.0}ms, \
         CPU {:.1}s to first sync / {:.1}s total, peak RSS {:.0} MiB",
        row.mode,
        row.services,
        row.endpoints,
        row.start_to_sync_s,
        row.full_sync_s,
        row.partial_p50_ms,
        row.partial_p99_ms,
        row.lat_p50_ms,
        row.lat_p99_ms,
        row.cpu_sync_s,
        row.cpu_total_s,
        row.rss_mib
    );
    let new = !a.results.exists();
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&a.results)?;
    if new {
        writeln!(f, "{HEADER}")?;
    }
    writeln!(f, "{}", row.tsv())?;
    Ok(())
}

/// Every endpoint of the updated Services is in the kernel: one listing of the namespace's
/// rules (nftables endpoint-chain names hold `__IP/port`; iptables DNATs `IP:port`).
async fn verify(
    tx: &std::sync::mpsc::Sender<Job>,
    mode: &str,
    current: &HashMap<usize, Vec<Ipv4Addr>>,
) -> anyhow::Result<()> {
    let listing = if mode == "nftables" {
        in_ns(tx, &["nft", "list", "chains", "ip"]).await?
    } else {
        in_ns(tx, &["iptables-save", "-t", "nat"]).await?
    };
    for (i, ips) in current {
        for ip in ips {
            let needle = if mode == "nftables" {
                format!("-{NS}/svc-{i}/tcp/http__{ip}/{TARGET_PORT} {{")
            } else {
                format!("--to-destination {ip}:{TARGET_PORT}")
            };
            ensure!(
                listing.contains(&needle),
                "{mode}: {NS}/svc-{i}'s endpoint {ip} is not in the kernel ({needle:?})"
            );
        }
    }
    Ok(())
}

fn report(a: &ReportArgs) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(&a.results).with_context(|| format!("reading {}", a.results.display()))?;
    let rows: Vec<Row> = text.lines().filter_map(Row::parse).collect();
    if rows.is_empty() {
        bail!("no results in {}", a.results.display());
    }
    println!();
    println!(
        "{:<9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>7}",
        "mode",
        "services",
        "start->s",
        "full s",
        "part p50",
        "part p99",
        "lat p50",
        "lat p99",
        "kp p50",
        "kp p99",
        "hist p99",
        "cpu@sync",
        "cpu tot",
        "RSS MiB"
    );
    println!(
        "{:<9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>7}",
        "", "x10 ep", "(s)", "(s)", "(ms)", "(ms)", "(ms)", "(ms)", "(ms)", "(ms)", "(s)", "(s)", "(s)", ""
    );
    for r in &rows {
        println!(
            "{:<9} {:>8} {:>9.2} {:>9.3} {:>9.1} {:>9.1} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>9.2} {:>8.1} {:>8.1} {:>7.0}",
            r.mode,
            r.services,
            r.start_to_sync_s,
            r.full_sync_s,
            r.partial_p50_ms,
            r.partial_p99_ms,
            r.lat_p50_ms,
            r.lat_p99_ms,
            r.kp_lat_p50_ms,
            r.kp_lat_p99_ms,
            r.hist_p99_s,
            r.cpu_sync_s,
            r.cpu_total_s,
            r.rss_mib
        );
    }
    println!();
    let by: BTreeMap<(usize, &str), &Row> = rows.iter().map(|r| ((r.services, r.mode.as_str()), r)).collect();
    let sizes: BTreeSet<usize> = rows.iter().map(|r| r.services).collect();
    println!("ratio nftables/iptables (below 1: nftables better)");
    println!(
        "{:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "services", "start->s", "full", "part p50", "lat p50", "lat p99", "cpu tot", "RSS"
    );
    for s in &sizes {
        if let (Some(n), Some(i)) = (by.get(&(*s, "nftables")), by.get(&(*s, "iptables"))) {
            println!(
                "{:>8} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                s,
                n.start_to_sync_s / i.start_to_sync_s,
                n.full_sync_s / i.full_sync_s,
                n.partial_p50_ms / i.partial_p50_ms,
                n.lat_p50_ms / i.lat_p50_ms,
                n.lat_p99_ms / i.lat_p99_ms,
                n.cpu_total_s / i.cpu_total_s,
                n.rss_mib / i.rss_mib
            );
        }
    }
    println!();
    if let Some(big) = sizes.iter().max()
        && let Some(n) = by.get(&(*big, "nftables"))
    {
        let ok = |b: bool| if b { "met" } else { "NOT met" };
        println!(
            "goal: nftables full sync of {big} Services <= {:.1}s: {:.3}s ({})",
            a.goal_full_sync_s,
            n.full_sync_s,
            ok(n.full_sync_s <= a.goal_full_sync_s)
        );
        println!(
            "goal: one-endpoint change <= {:.0}ms (nftables, {big} Services): partial sync p50 {:.1}ms p99 {:.1}ms ({}); trigger -> programmed p50 {:.0}ms p99 {:.0}ms ({})",
            a.goal_change_ms,
            n.partial_p50_ms,
            n.partial_p99_ms,
            ok(n.partial_p99_ms <= a.goal_change_ms),
            n.lat_p50_ms,
            n.lat_p99_ms,
            ok(n.lat_p99_ms <= a.goal_change_ms)
        );
    }
    println!(
        "columns: start->s = kube-proxy started -> its first IPv4 sync done; full = that (full) sync's duration \
         (both from its log); part = the partial sync programming each update (sync_partial histogram delta); \
         lat = kp = trigger-time annotation (set when the PATCH is sent) -> end of the sync that wrote it ({} updates \
         per run{}); hist p99 = that histogram (0.25s buckets); cpu = kube-proxy \
         user+sys seconds until the first sync and for the whole run; RSS = VmHWM.",
        rows[0].updates, ""
    );
    Ok(())
}
