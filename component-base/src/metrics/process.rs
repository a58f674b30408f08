//! The `process_*` metrics of Go's client (`collectors.NewProcessCollector`),
//! read from `/proc/self` at scrape time so dashboards and `etcdctl check
//! datascale` built for upstream components work against ours.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Reports CPU time, memory, file descriptors and start time of this process.
///
/// A value whose source cannot be read (no `/proc`, say) is left out of the
/// scrape rather than failing it, as Go's collector does.
#[derive(Debug, Default)]
pub struct ProcessCollector {
    _private: (),
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let sample = Sample::read();
        if let Some(v) = sample.cpu_seconds {
            let help = "Total user and system CPU time spent in seconds.";
            encode(&mut encoder, "process_cpu_seconds", help, &ConstCounter::new(v))?;
        }
        let gauges = [
            ("process_open_fds", "Number of open file descriptors.", sample.open_fds),
            ("process_max_fds", "Maximum number of open file descriptors.", sample.max_fds),
            ("process_virtual_memory_bytes", "Virtual memory size in bytes.", sample.virtual_memory_bytes),
            (
                "process_virtual_memory_max_bytes",
                "Maximum amount of virtual memory available in bytes.",
                sample.virtual_memory_max_bytes,
            ),
            ("process_resident_memory_bytes", "Resident memory size in bytes.", sample.resident_memory_bytes),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                sample.start_time_seconds,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                encode(&mut encoder, name, help, &ConstGauge::new(v))?;
            }
        }
        Ok(())
    }
}

fn encode(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: &impl EncodeMetric,
) -> fmt::Result {
    let metric_encoder = encoder.encode_descriptor(name, help, None, metric.metric_type())?;
    metric.encode(metric_encoder)
}

/// One reading of the process's state; `None` where the source was unreadable.
#[derive(Debug, Default, PartialEq)]
struct Sample {
    cpu_seconds: Option<f64>,
    open_fds: Option<f64>,
    max_fds: Option<f64>,
    virtual_memory_bytes: Option<f64>,
    virtual_memory_max_bytes: Option<f64>,
    resident_memory_bytes: Option<f64>,
    start_time_seconds: Option<f64>,
}

impl Sample {
    fn read() -> Self {
        let mut sample = Sample {
            open_fds: count_open_fds(),
            max_fds: soft_limit(Limit::OpenFiles),
            virtual_memory_max_bytes: soft_limit(Limit::AddressSpace),
            ..Sample::default()
        };
        let stat = read_proc("/proc/self/stat").and_then(|s| parse_stat(&s));
        let (Some(stat), Some(ticks)) = (stat, sysconf(libc::_SC_CLK_TCK)) else {
            return sample;
        };
        let ticks = ticks as f64;
        sample.cpu_seconds = Some((stat.utime + stat.stime) as f64 / ticks);
        sample.virtual_memory_bytes = Some(stat.vsize as f64);
        sample.resident_memory_bytes =
            sysconf(libc::_SC_PAGESIZE).map(|page| stat.rss_pages as f64 * page as f64);
        sample.start_time_seconds = read_proc("/proc/stat")
            .and_then(|s| parse_boot_time(&s))
            .map(|boot| boot as f64 + stat.start_ticks as f64 / ticks);
        sample
    }
}

fn read_proc(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .inspect_err(|err| tracing::debug!(path, %err, "process metrics: cannot read"))
        .ok()
}

/// The fields of `/proc/self/stat` (see proc(5)) that Go's collector reports.
#[derive(Debug, PartialEq)]
struct Stat {
    utime: u64,
    stime: u64,
    start_ticks: u64,
    vsize: u64,
    rss_pages: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) is in parentheses and
/// may itself hold spaces and parentheses, so fields are counted from its last `)`.
fn parse_stat(stat: &str) -> Option<Stat> {
    let (_, rest) = stat.rsplit_once(')')?;
    // rest starts at field 3 (state); field n is at index n - 3.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime: field(14)?,
        stime: field(15)?,
        start_ticks: field(22)?,
        vsize: field(23)?,
        // rss is signed in the kernel's format but never negative in practice.
        rss_pages: field(24)?,
    })
}

/// The `btime` line of `/proc/stat`: boot time in seconds since the epoch.
fn parse_boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat.lines().find_map(|line| line.strip_prefix("btime "))?.trim().parse().ok()
}

fn count_open_fds() -> Option<f64> {
    // The directory handle itself shows up in the listing, as it does for Go.
    let entries = std::fs::read_dir("/proc/self/fd")
        .inspect_err(|err| tracing::debug!(%err, "process metrics: cannot list fds"))
        .ok()?;
    Some(entries.count() as f64)
}

/// The resource limits Go's collector reports.
#[derive(Debug, Clone, Copy)]
enum Limit {
    OpenFiles,
    AddressSpace,
}

/// A soft resource limit; unlimited reads as `u64::MAX`, as Go's procfs reports it.
fn soft_limit(which: Limit) -> Option<f64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    let limit_ptr = &raw mut limit;
    // SAFETY: getrlimit only writes the rlimit struct we pass by a valid pointer.
    let rc = unsafe {
        match which {
            Limit::OpenFiles => libc::getrlimit(libc::RLIMIT_NOFILE, limit_ptr),
            Limit::AddressSpace => libc::getrlimit(libc::RLIMIT_AS, limit_ptr),
        }
    };
    (rc == 0).then_some(limit.rlim_cur as f64)
}

fn sysconf(name: libc::c_int) -> Option<libc::c_long> {
    // SAFETY: sysconf takes a plain integer and touches no memory of ours.
    let value = unsafe { libc::sysconf(name) };
    (value > 0).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_command_name() {
        let line = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 1234 0 0 0 \
                    150 50 0 0 20 0 8 0 98765 123456789 2048 18446744073709551615 \
                    1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(
            parse_stat(line),
            Some(Stat { utime: 150, stime: 50, start_ticks: 98765, vsize: 123456789, rss_pages: 2048 })
        );
    }

    #[test]
    fn truncated_stat_is_none() {
        assert_eq!(parse_stat("4242 (cmd) S 1 2 3"), None);
        assert_eq!(parse_stat("no parenthesis at all"), None);
    }

    #[test]
    fn boot_time() {
        let proc_stat = "cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n";
        assert_eq!(parse_boot_time(proc_stat), Some(1_700_000_000));
        assert_eq!(parse_boot_time("cpu 1\n"), None);
    }

    #[test]
    fn live_sample_is_plausible() {
        let sample = Sample::read();
        assert!(sample.resident_memory_bytes.unwrap() > 0.0);
        assert!(sample.virtual_memory_bytes.unwrap() >= sample.resident_memory_bytes.unwrap());
        assert!(sample.open_fds.unwrap() >= 3.0);
        assert!(sample.max_fds.unwrap() >= sample.open_fds.unwrap());
        let started = sample.start_time_seconds.unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(started <= now + 1.0 && started > now - 86_400.0, "{started} vs {now}");
    }
}
