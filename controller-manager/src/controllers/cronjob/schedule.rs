//! Cron schedules as upstream reads them (robfig/cron v3's `ParseStandard`): five fields
//! `minute hour day-of-month month day-of-week` with `*`, `?`, lists, ranges, steps and
//! month/weekday names; the descriptors `@yearly` ... `@hourly` and `@every <duration>`;
//! an optional `TZ=<zone>` / `CRON_TZ=<zone>` prefix. Next times are found in the zone's
//! civil time, stepping hours and minutes in absolute time as upstream does, so a time
//! skipped by a spring-forward change is skipped and one repeated in the autumn runs twice.
//!
//! Time zones come from the system's tz database (`/usr/share/zoneinfo`, Debian's
//! `tzdata`), read with jiff's TZif support.

use std::time::Duration;

use k8s_openapi::jiff::civil::DateTime;
use k8s_openapi::jiff::tz::TimeZone;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Why a schedule or time zone cannot be used; the text is upstream's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

fn err(s: impl Into<String>) -> ParseError {
    ParseError(s.into())
}

/// Where upstream (Go's `time.LoadLocation`) finds zone files.
const ZONEINFO_DIRS: &[&str] =
    &["/usr/share/zoneinfo", "/usr/share/lib/zoneinfo", "/usr/lib/locale/TZ", "/etc/zoneinfo"];
/// A zone file is small (the largest in tzdata is a few KB); refuse anything huge.
const MAX_ZONE_FILE: u64 = 1 << 20;

/// Loads a zone by IANA name: `""` and `"UTC"` are UTC, `"Local"` the process's zone.
pub fn load_location(name: &str) -> Result<TimeZone, ParseError> {
    match name {
        "" | "UTC" => return Ok(TimeZone::UTC),
        "Local" => return Ok(local()),
        _ => {}
    }
    // As Go: no absolute paths, no `..`, no backslashes.
    if name.starts_with('/') || name.contains('\\') || name.split('/').any(|p| p == ".." || p.is_empty()) {
        return Err(err(format!("unknown time zone {name}")));
    }
    let mut dirs: Vec<String> = Vec::new();
    if let Ok(z) = std::env::var("ZONEINFO") {
        dirs.push(z);
    }
    dirs.extend(ZONEINFO_DIRS.iter().map(|s| s.to_string()));
    for dir in dirs {
        let path = std::path::Path::new(&dir).join(name);
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        if !meta.is_file() || meta.len() > MAX_ZONE_FILE {
            continue;
        }
        if let Ok(data) = std::fs::read(&path)
            && let Ok(tz) = TimeZone::tzif(name, &data)
        {
            return Ok(tz);
        }
    }
    Err(err(format!("unknown time zone {name}")))
}

/// The process's zone: `$TZ`, else `/etc/localtime`, else UTC (as Go's `time.Local`).
fn local() -> TimeZone {
    if let Ok(tz) = std::env::var("TZ") {
        let name = tz.trim_start_matches(':');
        return load_location(if name.is_empty() { "UTC" } else { name }).unwrap_or(TimeZone::UTC);
    }
    std::fs::read("/etc/localtime")
        .ok()
        .and_then(|d| TimeZone::tzif("Local", &d).ok())
        .unwrap_or(TimeZone::UTC)
}

const STAR: u64 = 1 << 63;

#[derive(Clone, Copy)]
struct Bounds {
    min: u32,
    max: u32,
    names: &'static [(&'static str, u32)],
}

const MINUTES: Bounds = Bounds { min: 0, max: 59, names: &[] };
const HOURS: Bounds = Bounds { min: 0, max: 23, names: &[] };
const DOM: Bounds = Bounds { min: 1, max: 31, names: &[] };
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        ("jan", 1),
        ("feb", 2),
        ("mar", 3),
        ("apr", 4),
        ("may", 5),
        ("jun", 6),
        ("jul", 7),
        ("aug", 8),
        ("sep", 9),
        ("oct", 10),
        ("nov", 11),
        ("dec", 12),
    ],
};
const DOW: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &[("sun", 0), ("mon", 1), ("tue", 2), ("wed", 3), ("thu", 4), ("fri", 5), ("sat", 6)],
};

fn all(b: Bounds) -> u64 {
    bits(b.min, b.max, 1) | STAR
}

fn bits(min: u32, max: u32, step: u32) -> u64 {
    if step == 1 {
        return (!(u64::MAX << (max + 1))) & (u64::MAX << min);
    }
    let mut b = 0;
    let mut i = min;
    while i <= max {
        b |= 1 << i;
        i += step;
    }
    b
}

/// A parsed schedule.
#[derive(Debug, Clone)]
pub enum Schedule {
    Cron(Cron),
    /// `@every <duration>`: fixed intervals, in whole seconds, from the last run.
    Every(Duration),
}

#[derive(Debug, Clone)]
pub struct Cron {
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
    tz: TimeZone,
}

impl Schedule {
    /// Parses `spec`; `default_tz` applies when it has no `TZ=`/`CRON_TZ=` prefix.
    pub fn parse(spec: &str, default_tz: TimeZone) -> Result<Schedule, ParseError> {
        let mut spec = spec.trim();
        if spec.is_empty() {
            return Err(err("empty spec string"));
        }
        let mut tz = default_tz;
        if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
            let eq = spec.find('=').expect("prefix has =");
            let sp = spec.find(' ').ok_or_else(|| {
                err(format!("provided bad location {}: unknown time zone", &spec[eq + 1..]))
            })?;
            let name = &spec[eq + 1..sp];
            tz = load_location(name).map_err(|e| err(format!("provided bad location {name}: {e}")))?;
            spec = spec[sp..].trim();
        }
        if let Some(d) = spec.strip_prefix('@') {
            return descriptor(d, spec, tz);
        }
        let fields: Vec<&str> = spec.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(err(format!(
                "expected exactly 5 fields, found {}: [{}]",
                fields.len(),
                fields.join(" ")
            )));
        }
        Ok(Schedule::Cron(Cron {
            minute: field(fields[0], MINUTES)?,
            hour: field(fields[1], HOURS)?,
            dom: field(fields[2], DOM)?,
            month: field(fields[3], MONTHS)?,
            dow: field(fields[4], DOW)?,
            tz,
        }))
    }

    /// The first activation strictly after `t` (at whole seconds), or `None` when there is
    /// none within five years (a schedule like `0 0 30 2 *`).
    pub fn next(&self, t: Timestamp) -> Option<Timestamp> {
        match self {
            Schedule::Every(d) => {
                let sub = t.subsec_nanosecond() as i64;
                t.checked_add(SignedDuration::from_nanos(d.as_nanos() as i64 - sub)).ok()
            }
            Schedule::Cron(c) => c.next(t),
        }
    }
}

fn descriptor(d: &str, spec: &str, tz: TimeZone) -> Result<Schedule, ParseError> {
    let one = |b: u32| 1u64 << b;
    let (minute, hour, dom, month, dow) = match d {
        "yearly" | "annually" => (one(0), one(0), one(1), one(1), all(DOW)),
        "monthly" => (one(0), one(0), one(1), all(MONTHS), all(DOW)),
        "weekly" => (one(0), one(0), all(DOM), all(MONTHS), one(0)),
        "daily" | "midnight" => (one(0), one(0), all(DOM), all(MONTHS), all(DOW)),
        "hourly" => (one(0), all(HOURS), all(DOM), all(MONTHS), all(DOW)),
        _ => {
            if let Some(dur) = d.strip_prefix("every ") {
                let dur = parse_go_duration(dur.trim()).ok_or_else(|| {
                    err(format!("failed to parse duration {spec}: time: invalid duration {:?}", dur.trim()))
                })?;
                // Below a second runs every second; otherwise whole seconds, as upstream.
                let secs = dur.as_secs().max(1);
                return Ok(Schedule::Every(Duration::from_secs(secs)));
            }
            return Err(err(format!("unrecognized descriptor: {spec}")));
        }
    };
    Ok(Schedule::Cron(Cron { minute, hour, dom, month, dow, tz }))
}

fn field(f: &str, b: Bounds) -> Result<u64, ParseError> {
    let mut out = 0;
    for expr in f.split(',') {
        out |= range(expr, b)?;
    }
    Ok(out)
}

fn range(expr: &str, b: Bounds) -> Result<u64, ParseError> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_high.len() == 1;
    let (start, mut end, mut extra);
    if low_high[0] == "*" || low_high[0] == "?" {
        start = b.min;
        end = b.max;
        extra = STAR;
    } else {
        start = int_or_name(low_high[0], b.names)?;
        end = match low_high.len() {
            1 => start,
            2 => int_or_name(low_high[1], b.names)?,
            _ => return Err(err(format!("too many hyphens: {expr}"))),
        };
        extra = 0;
    }
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = must_int(range_and_step[1])?;
            // `N/step` means `N-max/step`.
            if single {
                end = b.max;
            }
            if step > 1 {
                extra = 0;
            }
            step
        }
        _ => return Err(err(format!("too many slashes: {expr}"))),
    };
    if start < b.min {
        return Err(err(format!("beginning of range ({start}) below minimum ({}): {expr}", b.min)));
    }
    if end > b.max {
        return Err(err(format!("end of range ({end}) above maximum ({}): {expr}", b.max)));
    }
    if start > end {
        return Err(err(format!("beginning of range ({start}) beyond end of range ({end}): {expr}")));
    }
    if step == 0 {
        return Err(err(format!("step of range should be a positive number: {expr}")));
    }
    Ok(bits(start, end, step) | extra)
}

fn int_or_name(s: &str, names: &[(&str, u32)]) -> Result<u32, ParseError> {
    let lower = s.to_ascii_lowercase();
    if let Some((_, v)) = names.iter().find(|(n, _)| *n == lower) {
        return Ok(*v);
    }
    must_int(s)
}

fn must_int(s: &str) -> Result<u32, ParseError> {
    let n: i64 = s.parse().map_err(|_| {
        err(format!("failed to parse int from {s}: strconv.Atoi: parsing {s:?}: invalid syntax"))
    })?;
    if n < 0 {
        return Err(err(format!("negative number ({n}) not allowed: {s}")));
    }
    // Anything this large is out of every field's range; keep the bit shifts defined.
    Ok(n.min(1000) as u32)
}

/// Go's `time.ParseDuration` (`1h30m`, `90s`, `1.5h`, `300ms`).
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.starts_with('-') {
        return None; // a negative interval is no schedule
    }
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let n: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += n * unit;
    }
    (total.is_finite() && total < 9.2e9).then(|| Duration::from_secs_f64(total))
}

impl Cron {
    fn day_matches(&self, dt: DateTime) -> bool {
        let dom = self.dom & (1 << dt.day()) != 0;
        let dow = self.dow & (1 << dt.weekday().to_sunday_zero_offset()) != 0;
        // Both restricted: either may match; otherwise both must (`*` always does).
        if self.dom & STAR != 0 || self.dow & STAR != 0 { dom && dow } else { dom || dow }
    }

    fn civil(&self, t: Timestamp) -> DateTime {
        self.tz.to_datetime(t)
    }

    /// A civil time in the zone; one skipped by a transition resolves later, as Go's.
    fn at(&self, dt: DateTime) -> Option<Timestamp> {
        self.tz.to_timestamp(dt).ok()
    }

    fn next(&self, t: Timestamp) -> Option<Timestamp> {
        // The next whole second, then the next whole minute (seconds are always 0).
        let mut t =
            t.checked_add(SignedDuration::from_nanos(1_000_000_000 - t.subsec_nanosecond() as i64)).ok()?;
        let dt = self.civil(t);
        if dt.second() != 0 {
            t = t.checked_add(SignedDuration::from_secs(60 - dt.second() as i64)).ok()?;
        }
        let year_limit = self.civil(t).year() as i32 + 5;
        let mut added = false;
        'wrap: loop {
            let dt = self.civil(t);
            if dt.year() as i32 > year_limit {
                return None;
            }
            while self.month & (1 << self.civil(t).month()) == 0 {
                let dt = self.civil(t);
                if !added {
                    added = true;
                    t = self.at(DateTime::new(dt.year(), dt.month(), 1, 0, 0, 0, 0).ok()?)?;
                }
                let dt = self.civil(t);
                let next =
                    dt.date().first_of_month().checked_add(k8s_openapi::jiff::Span::new().months(1)).ok()?;
                t = self.at(next.to_datetime(dt.time()))?;
                if self.civil(t).month() == 1 {
                    continue 'wrap;
                }
            }
            while !self.day_matches(self.civil(t)) {
                let dt = self.civil(t);
                if !added {
                    added = true;
                    t = self.at(dt.date().to_datetime(k8s_openapi::jiff::civil::Time::midnight()))?;
                }
                let dt = self.civil(t);
                let next = dt.date().tomorrow().ok()?;
                t = self.at(next.to_datetime(dt.time()))?;
                // Midnight may not exist on a transition day: land on it again.
                let h = self.civil(t).hour() as i64;
                if h != 0 {
                    let shift = if h > 12 { 24 - h } else { -h };
                    t = t.checked_add(SignedDuration::from_hours(shift)).ok()?;
                }
                if self.civil(t).day() == 1 {
                    continue 'wrap;
                }
            }
            while self.hour & (1 << self.civil(t).hour()) == 0 {
                let dt = self.civil(t);
                if !added {
                    added = true;
                    t = self.at(dt.date().at(dt.hour(), 0, 0, 0))?;
                }
                t = t.checked_add(SignedDuration::from_hours(1)).ok()?;
                if self.civil(t).hour() == 0 {
                    continue 'wrap;
                }
            }
            while self.minute & (1 << self.civil(t).minute()) == 0 {
                if !added {
                    added = true;
                    let secs = t.as_second();
                    t = Timestamp::from_second(secs - secs.rem_euclid(60)).ok()?;
                }
                t = t.checked_add(SignedDuration::from_mins(1)).ok()?;
                if self.civil(t).minute() == 0 {
                    continue 'wrap;
                }
            }
            return Some(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn next(spec: &str, from: &str) -> String {
        let s = Schedule::parse(spec, TimeZone::UTC).unwrap();
        s.next(utc(from)).map(|t| t.to_string()).unwrap_or_default()
    }

    #[test]
    fn standard_fields_and_descriptors() {
        assert_eq!(next("*/1 * * * *", "2024-03-01T10:00:00Z"), "2024-03-01T10:01:00Z");
        assert_eq!(next("*/1 * * * *", "2024-03-01T10:00:30.5Z"), "2024-03-01T10:01:00Z");
        assert_eq!(next("*/15 * * * *", "2024-03-01T10:16:00Z"), "2024-03-01T10:30:00Z");
        assert_eq!(next("5 4 * * sun", "2024-03-01T00:00:00Z"), "2024-03-03T04:05:00Z");
        assert_eq!(next("0 0 1,15 * *", "2024-03-02T00:00:00Z"), "2024-03-15T00:00:00Z");
        assert_eq!(next("0 12 * JAN-MAR MON-FRI", "2024-03-29T13:00:00Z"), "2025-01-01T12:00:00Z");
        assert_eq!(next("@hourly", "2024-03-01T10:59:59Z"), "2024-03-01T11:00:00Z");
        assert_eq!(next("@daily", "2024-12-31T10:00:00Z"), "2025-01-01T00:00:00Z");
        assert_eq!(next("@weekly", "2024-03-01T10:00:00Z"), "2024-03-03T00:00:00Z");
        assert_eq!(next("@monthly", "2024-03-01T10:00:00Z"), "2024-04-01T00:00:00Z");
        assert_eq!(next("@yearly", "2024-03-01T10:00:00Z"), "2025-01-01T00:00:00Z");
        assert_eq!(next("@every 90s", "2024-03-01T10:00:00.25Z"), "2024-03-01T10:01:30Z");
        // Both day fields restricted: either matches (the 13th, or any Friday).
        assert_eq!(next("0 0 13 * 5", "2024-09-01T00:00:00Z"), "2024-09-06T00:00:00Z");
        // Feb 29 exists only in leap years; Feb 30 never does.
        assert_eq!(next("0 0 29 2 *", "2024-03-01T00:00:00Z"), "2028-02-29T00:00:00Z");
        assert_eq!(next("0 0 30 2 *", "2024-03-01T00:00:00Z"), "");
    }

    #[test]
    fn bad_specs_say_why() {
        let e = |s: &str| Schedule::parse(s, TimeZone::UTC).unwrap_err().0;
        assert_eq!(e("* * * *"), "expected exactly 5 fields, found 4: [* * * *]");
        assert_eq!(e("60 * * * *"), "end of range (60) above maximum (59): 60");
        assert_eq!(e("* * 0 * *"), "beginning of range (0) below minimum (1): 0");
        assert_eq!(e("5-1 * * * *"), "beginning of range (5) beyond end of range (1): 5-1");
        assert_eq!(e("*/0 * * * *"), "step of range should be a positive number: */0");
        assert_eq!(e("@fortnightly"), "unrecognized descriptor: @fortnightly");
        assert!(e("x * * * *").starts_with("failed to parse int from x"));
        assert!(e("TZ=Mars/Olympus * * * * *").starts_with("provided bad location Mars/Olympus"));
        assert!(load_location("../etc/passwd").is_err());
    }

    #[test]
    fn time_zones_and_dst() {
        let ny = load_location("America/New_York").expect("tzdata installed (hack/install-deps.sh)");
        let s = Schedule::parse("30 2 * * *", ny.clone()).unwrap();
        // 2024-03-10: 02:00 EST jumps to 03:00 EDT, so 02:30 does not exist that day.
        assert_eq!(s.next(utc("2024-03-09T05:00:00Z")).unwrap().to_string(), "2024-03-09T07:30:00Z");
        assert_eq!(s.next(utc("2024-03-09T05:00:00Z")).unwrap().to_zoned(ny.clone()).hour(), 2);
        assert_eq!(s.next(utc("2024-03-09T08:00:00Z")).unwrap().to_string(), "2024-03-11T06:30:00Z");
        // 2024-11-03: 01:30 happens twice (EDT, then EST); upstream runs both.
        let s = Schedule::parse("30 1 * * *", ny.clone()).unwrap();
        let first = s.next(utc("2024-11-03T04:00:00Z")).unwrap();
        assert_eq!(first.to_string(), "2024-11-03T05:30:00Z");
        assert_eq!(s.next(first).unwrap().to_string(), "2024-11-03T06:30:00Z");
        // A prefix zone wins over the default one.
        let s = Schedule::parse("CRON_TZ=Asia/Tokyo 0 9 * * *", TimeZone::UTC).unwrap();
        assert_eq!(s.next(utc("2024-03-01T00:00:00Z")).unwrap().to_string(), "2024-03-02T00:00:00Z");
        let s = Schedule::parse("TZ=UTC 0 9 * * *", ny).unwrap();
        assert_eq!(s.next(utc("2024-03-01T00:00:00Z")).unwrap().to_string(), "2024-03-01T09:00:00Z");
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("10"), None);
        assert_eq!(parse_go_duration("5x"), None);
    }
}
