//! Process-wide logging on `tracing`, shaped like klog so that operators reading
//! upstream's logs (and tools grepping them) see the same lines: a level letter,
//! the time, the pid, the source of the line and the message.
//!
//! The level comes from klog's `-v`, from etcd's `--log-level` (which wins when
//! given), and finally from `RUST_LOG`, whose directives refine both.

mod format;

use std::sync::Mutex;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::{Directive, LevelFilter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

pub use format::KlogFormat;

/// Why logging could not be configured.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--log-level` was not one of the names etcd accepts.
    #[error("invalid --log-level {0:?}: want one of debug, info, warn, error, dpanic, panic, fatal")]
    InvalidLogLevel(String),
    /// One directive of `RUST_LOG` did not parse.
    #[error("invalid RUST_LOG directive {directive:?}: {source}")]
    InvalidRustLog {
        /// The offending directive, as written.
        directive: String,
        /// What the parser objected to.
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
}

/// Guards installation: tests call [`init`] from many threads, and the global
/// subscriber can be set only once per process.
static INSTALLED: Mutex<bool> = Mutex::new(false);

/// Installs the global subscriber writing klog-like lines to stderr.
///
/// `verbosity` is klog's `-v`; `log_level` is etcd's `--log-level` and overrides it.
/// `RUST_LOG`, when set, adds per-target directives on top (a bare level there
/// replaces the flag's level), so a developer can turn up one module without
/// changing the command line.
///
/// Calling it again, or after some other global subscriber was installed (a test
/// harness's, say), is a no-op that still validates the arguments: the first
/// configuration stays in force.
pub fn init(verbosity: u8, log_level: Option<&str>) -> Result<(), Error> {
    let level = level(verbosity, log_level)?;
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = filter(level, rust_log.as_deref())?;

    // A poisoned lock only means another init panicked; the flag is still usable.
    let mut installed = INSTALLED.lock().unwrap_or_else(|poison| poison.into_inner());
    if *installed {
        return Ok(());
    }
    let layer = tracing_subscriber::fmt::layer()
        .event_format(KlogFormat::default())
        .with_ansi(false)
        .with_writer(std::io::stderr);
    // Failure means a foreign subscriber is already global: leave it in charge.
    let _ = tracing_subscriber::registry().with(filter).with(layer).try_init();
    *installed = true;
    Ok(())
}

/// The most verbose level to log, from `-v` and `--log-level`.
///
/// klog's verbosities map as: 0..=1 info, 2..=4 debug, 5 and up trace. etcd's
/// `dpanic`, `panic` and `fatal` have no tracing counterpart and mean error.
pub fn level(verbosity: u8, log_level: Option<&str>) -> Result<LevelFilter, Error> {
    match log_level {
        Some(name) => parse_log_level(name),
        None => Ok(match verbosity {
            0..=1 => LevelFilter::INFO,
            2..=4 => LevelFilter::DEBUG,
            _ => LevelFilter::TRACE,
        }),
    }
}

fn parse_log_level(name: &str) -> Result<LevelFilter, Error> {
    match name.to_ascii_lowercase().as_str() {
        "debug" => Ok(LevelFilter::DEBUG),
        "info" => Ok(LevelFilter::INFO),
        "warn" => Ok(LevelFilter::WARN),
        "error" | "dpanic" | "panic" | "fatal" => Ok(LevelFilter::ERROR),
        _ => Err(Error::InvalidLogLevel(name.to_owned())),
    }
}

/// The filter: `level` for everything, then each `RUST_LOG` directive in order.
///
/// Directives of equal specificity replace each other, so a later bare level
/// (`RUST_LOG=warn`) overrides the flag's level while `RUST_LOG=etcd::raft=trace`
/// only refines one target.
fn filter(level: LevelFilter, rust_log: Option<&str>) -> Result<EnvFilter, Error> {
    let mut filter = EnvFilter::default().add_directive(level.into());
    let directives = rust_log.unwrap_or_default().split(',').map(str::trim);
    for raw in directives.filter(|d| !d.is_empty()) {
        let directive: Directive =
            raw.parse().map_err(|source| Error::InvalidRustLog { directive: raw.to_owned(), source })?;
        filter = filter.add_directive(directive);
    }
    Ok(filter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbosity_maps_like_klog() {
        assert_eq!(level(0, None).unwrap(), LevelFilter::INFO);
        assert_eq!(level(1, None).unwrap(), LevelFilter::INFO);
        assert_eq!(level(2, None).unwrap(), LevelFilter::DEBUG);
        assert_eq!(level(4, None).unwrap(), LevelFilter::DEBUG);
        assert_eq!(level(5, None).unwrap(), LevelFilter::TRACE);
        assert_eq!(level(255, None).unwrap(), LevelFilter::TRACE);
    }

    #[test]
    fn log_level_overrides_verbosity() {
        assert_eq!(level(9, Some("warn")).unwrap(), LevelFilter::WARN);
        assert_eq!(level(0, Some("DEBUG")).unwrap(), LevelFilter::DEBUG);
        for name in ["error", "dpanic", "panic", "fatal"] {
            assert_eq!(level(0, Some(name)).unwrap(), LevelFilter::ERROR);
        }
    }

    #[test]
    fn unknown_log_level_is_an_error_naming_it() {
        let err = level(0, Some("loud")).unwrap_err();
        assert!(err.to_string().contains("\"loud\""), "{err}");
    }

    #[test]
    fn rust_log_refines_or_replaces_the_flag_level() {
        assert_eq!(filter(LevelFilter::INFO, None).unwrap().to_string(), "info");
        assert_eq!(filter(LevelFilter::INFO, Some("warn")).unwrap().to_string(), "warn");
        let refined = filter(LevelFilter::INFO, Some("etcd::raft=trace")).unwrap();
        let shown = refined.to_string();
        assert!(shown.contains("etcd::raft=trace") && shown.contains("info"), "{shown}");
    }

    #[test]
    fn bad_rust_log_is_an_error_naming_the_directive() {
        let err = filter(LevelFilter::INFO, Some("info,x=notalevel")).unwrap_err();
        assert!(err.to_string().contains("x=notalevel"), "{err}");
    }

    #[test]
    fn init_twice_is_a_no_op() {
        init(0, None).unwrap();
        init(3, Some("debug")).unwrap();
        assert!(init(0, Some("bogus")).is_err());
        tracing::info!(target: "component_base::test", "logging initialised");
    }
}
