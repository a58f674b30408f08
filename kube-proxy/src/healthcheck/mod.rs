//! kube-proxy's health endpoints: its own `/healthz` and `/livez` (healthy unless a queued
//! change has waited longer than the timeout for a sync), and one HTTP server per
//! `externalTrafficPolicy: Local` LoadBalancer Service on its `healthCheckNodePort`,
//! telling load balancers whether this node has local endpoints.

mod proxier_health;
mod service_health;

pub use proxier_health::ProxierHealth;
pub use service_health::ServiceHealthServer;

use std::time::{SystemTime, UNIX_EPOCH};

/// A time as Go's `time.Time.String()` prints it (`2006-01-02 15:04:05.999999999 +0000
/// UTC`), which upstream's health bodies carry, with the monotonic `m=+<secs>` suffix
/// when `monotonic` (seconds since the process started) is given.
pub(crate) fn go_time_string(t: SystemTime, monotonic: Option<f64>) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (y, mo, da) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    let mut frac = String::new();
    if d.subsec_nanos() != 0 {
        frac = format!(".{:09}", d.subsec_nanos()).trim_end_matches('0').to_owned();
    }
    let mut out =
        format!("{y:04}-{mo:02}-{da:02} {:02}:{:02}:{:02}{frac} +0000 UTC", s / 3600, s / 60 % 60, s % 60);
    if let Some(m) = monotonic {
        out.push_str(&format!(" m=+{m:.9}"));
    }
    out
}

/// (year, month, day) of days since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn go_time_format() {
        let t = UNIX_EPOCH + Duration::from_nanos(1_709_622_489_012_345_000);
        assert_eq!(go_time_string(t, None), "2024-03-05 07:08:09.012345 +0000 UTC");
        assert_eq!(go_time_string(UNIX_EPOCH, Some(1.5)), "1970-01-01 00:00:00 +0000 UTC m=+1.500000000");
    }
}
