//! The klog line layout, `Lmmdd hh:mm:ss.uuuuuu   pid target] message k=v`, so
//! our components' logs read (and sort, and grep) like upstream's.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// Formats events as klog does, with the tracing target where klog puts `file:line`.
///
/// Times are UTC: reading the local zone safely needs a timezone database this
/// crate does not carry, and the components run in containers on UTC anyway.
#[derive(Debug, Default, Clone, Copy)]
pub struct KlogFormat {
    _private: (),
}

impl<S, N> FormatEvent<S, N> for KlogFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        write_header(
            &mut writer,
            level_letter(meta.level()),
            SystemTime::now(),
            std::process::id(),
            meta.target(),
        )?;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                writer.write_str(span.name())?;
                let extensions = span.extensions();
                if let Some(fields) = extensions.get::<FormattedFields<N>>()
                    && !fields.is_empty()
                {
                    write!(writer, "{{{fields}}}")?;
                }
                writer.write_str(": ")?;
            }
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// klog's severities are I, W, E and F; tracing's debug and trace get D and T.
fn level_letter(level: &Level) -> char {
    match *level {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        Level::INFO => 'I',
        Level::DEBUG => 'D',
        Level::TRACE => 'T',
    }
}

fn write_header(
    writer: &mut impl fmt::Write,
    letter: char,
    now: SystemTime,
    pid: u32,
    target: &str,
) -> fmt::Result {
    // A clock before 1970 is a broken host, not a reason to drop the line.
    let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since_epoch.as_secs();
    let (_, month, day) = civil_from_days(secs / 86_400);
    let day_secs = secs % 86_400;
    write!(
        writer,
        "{letter}{month:02}{day:02} {:02}:{:02}:{:02}.{:06} {pid:>7} {target}] ",
        day_secs / 3600,
        day_secs / 60 % 60,
        day_secs % 60,
        since_epoch.subsec_micros(),
    )
}

/// Converts days since 1970-01-01 to a (year, month, day) date in the proleptic
/// Gregorian calendar (Howard Hinnant's `civil_from_days`), to avoid a date crate
/// for one log prefix.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Shift the epoch to 0000-03-01 so leap days fall at the end of a 400-year era.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        // 2000-02-29 (a leap day of a century divisible by 400) is day 11_016.
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(20_453), (2025, 12, 31));
    }

    #[test]
    fn header_matches_klog() {
        // 2024-03-05 07:08:09.012345 UTC
        let at = UNIX_EPOCH + Duration::from_micros(1_709_622_489_012_345);
        let mut line = String::new();
        write_header(&mut line, 'I', at, 42, "etcd::raft").unwrap();
        assert_eq!(line, "I0305 07:08:09.012345      42 etcd::raft] ");
    }

    #[test]
    fn level_letters() {
        let letters: String = [Level::ERROR, Level::WARN, Level::INFO, Level::DEBUG, Level::TRACE]
            .iter()
            .map(level_letter)
            .collect();
        assert_eq!(letters, "EWIDT");
    }
}
