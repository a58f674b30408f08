//! Text forms of the well-known apimachinery types whose protobuf form is numeric:
//! `metav1.Time` / `MicroTime` (RFC 3339 in UTC) and `metav1.Duration` (Go's
//! `time.Duration.String()`, e.g. `1h2m3.5s`, `500ms`).

/// Go's zero `time.Time` as Unix seconds (0001-01-01T00:00:00Z): gogo-protobuf writes it for
/// an unset non-pointer Time, and its JSON form is `null`.
pub const GO_ZERO_TIME: i64 = -62_135_596_800;

const NANOS_PER_SEC: i64 = 1_000_000_000;

/// Days since 1970-01-01 -> (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// `2006-01-02T15:04:05Z`, or with `micro` `2006-01-02T15:04:05.000000Z`. None for years
/// outside 0..=9999, which Go refuses to marshal too.
pub fn format_time(secs: i64, nanos: i32, micro: bool) -> Option<String> {
    // Normalize nanos into [0, 1e9) first, as Go's time.Unix does.
    let total = i128::from(secs) * i128::from(NANOS_PER_SEC) + i128::from(nanos);
    let secs = i64::try_from(total.div_euclid(i128::from(NANOS_PER_SEC))).ok()?;
    let nanos = total.rem_euclid(i128::from(NANOS_PER_SEC)) as i64;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    if !(0..=9999).contains(&y) {
        return None;
    }
    let (hh, mm, ss) = (sod / 3600, sod / 60 % 60, sod % 60);
    Some(if micro {
        format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{:06}Z", nanos / 1000)
    } else {
        format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z")
    })
}

fn digits(s: &[u8]) -> Option<u32> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.iter().try_fold(0u32, |acc, b| acc.checked_mul(10)?.checked_add(u32::from(b - b'0')))
}

/// Parses RFC 3339 (`2006-01-02T15:04:05[.frac](Z|+07:00)`) into Unix (seconds, nanos).
pub fn parse_time(s: &str) -> Option<(i64, i32)> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let y = i64::from(digits(&b[0..4])?);
    let mo = digits(&b[5..7])?;
    let d = digits(&b[8..10])?;
    let (hh, mm, ss) = (digits(&b[11..13])?, digits(&b[14..16])?, digits(&b[17..19])?);
    if !(1..=12).contains(&mo) || d == 0 || d > days_in_month(y, mo) || hh > 23 || mm > 59 || ss > 59 {
        return None;
    }
    let mut rest = &b[19..];
    let mut nanos = 0i64;
    if rest.first() == Some(&b'.') {
        let n = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 || n > 9 {
            return None;
        }
        nanos = i64::from(digits(&rest[1..=n])?) * 10i64.pow(9 - n as u32);
        rest = &rest[1 + n..];
    }
    let offset = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (oh, om) = (digits(&[*h1, *h2])?, digits(&[*m1, *m2])?);
            if oh > 23 || om > 59 {
                return None;
            }
            let off = i64::from(oh * 3600 + om * 60);
            if *sign == b'-' { -off } else { off }
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + i64::from(hh * 3600 + mm * 60 + ss) - offset;
    Some((secs, nanos as i32))
}

/// Go's `time.Duration.String()`.
pub fn format_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let neg = nanos < 0;
    let u = nanos.unsigned_abs();
    let mut s = String::new();
    if u < 1_000_000_000 {
        // Below one second: a single unit with a fraction (1.5ms, 100ns).
        let (unit, prec) = match u {
            0..1_000 => ("ns", 0),
            1_000..1_000_000 => ("µs", 3),
            _ => ("ms", 6),
        };
        s.push_str(&with_fraction(u, prec));
        s.push_str(unit);
    } else {
        let secs = u / 1_000_000_000;
        let (h, m) = (secs / 3600, secs / 60 % 60);
        if h > 0 {
            s.push_str(&format!("{h}h"));
        }
        if h > 0 || m > 0 {
            s.push_str(&format!("{m}m"));
        }
        s.push_str(&with_fraction(u % 60_000_000_000, 9));
        s.push('s');
    }
    if neg { format!("-{s}") } else { s }
}

/// `v / 10^prec` with the fraction's trailing zeros (and a bare point) dropped.
fn with_fraction(v: u64, prec: u32) -> String {
    let p = 10u64.pow(prec);
    let (int, frac) = (v / p, v % p);
    if frac == 0 {
        return int.to_string();
    }
    let f = format!("{frac:0width$}", width = prec as usize);
    format!("{int}.{}", f.trim_end_matches('0'))
}

/// Parses a Go duration (`300ms`, `-1.5h`, `2h45m`, `0`) into nanoseconds.
pub fn parse_duration(s: &str) -> Option<i64> {
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int: u128 = if int_len == 0 { 0 } else { rest[..int_len].parse().ok()? };
        rest = &rest[int_len..];
        let mut frac = (0u128, 1u128);
        let mut frac_len = 0;
        if let Some(r) = rest.strip_prefix('.') {
            frac_len = r.bytes().take_while(u8::is_ascii_digit).count();
            for c in r[..frac_len].bytes().take(18) {
                frac = (frac.0 * 10 + u128::from(c - b'0'), frac.1 * 10);
            }
            rest = &r[frac_len..];
        }
        if int_len == 0 && frac_len == 0 {
            return None;
        }
        let unit_len = rest.find(|c: char| c == '.' || c.is_ascii_digit()).unwrap_or(rest.len());
        let scale: u128 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.checked_add(int.checked_mul(scale)? + frac.0 * scale / frac.1)?;
        if total > u128::from(i64::MAX as u64) + u128::from(neg) {
            return None;
        }
    }
    let total = total as i128;
    i64::try_from(if neg { -total } else { total }).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_and_parse() {
        assert_eq!(format_time(0, 0, false).unwrap(), "1970-01-01T00:00:00Z");
        assert_eq!(format_time(1_136_214_245, 0, false).unwrap(), "2006-01-02T15:04:05Z");
        assert_eq!(format_time(1_136_214_245, 123_456_789, true).unwrap(), "2006-01-02T15:04:05.123456Z");
        assert_eq!(format_time(951_782_400, 0, false).unwrap(), "2000-02-29T00:00:00Z");
        assert_eq!(format_time(GO_ZERO_TIME, 0, false).unwrap(), "0001-01-01T00:00:00Z");
        assert_eq!(format_time(-1, 0, false).unwrap(), "1969-12-31T23:59:59Z");
        assert_eq!(format_time(GO_ZERO_TIME - 86_400 * 366, 0, false).unwrap(), "0000-01-01T00:00:00Z");
        assert_eq!(format_time(GO_ZERO_TIME - 86_400 * 366 - 1, 0, false), None);
        assert_eq!(format_time(i64::MAX, 0, false), None);
        assert_eq!(parse_time("2006-01-02T15:04:05Z"), Some((1_136_214_245, 0)));
        assert_eq!(parse_time("2006-01-02T15:04:05.123456Z"), Some((1_136_214_245, 123_456_000)));
        assert_eq!(parse_time("2006-01-02T08:04:05-07:00"), Some((1_136_214_245, 0)));
        assert_eq!(parse_time("0001-01-01T00:00:00Z"), Some((GO_ZERO_TIME, 0)));
        for bad in [
            "",
            "2006-01-02",
            "2006-13-02T15:04:05Z",
            "2006-02-30T15:04:05Z",
            "2006-01-02T15:04:05",
            "2006-01-02T15:04:05.Z",
            "2006-01-02T24:04:05Z",
            "2006-01-02T15:04:05+0700",
            "２006-01-02T15:04:05Z",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn durations_match_go() {
        let cases = [
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1µs"),
            (500_000_000, "500ms"),
            (1_500_000_000, "1.5s"),
            (60_000_000_000, "1m0s"),
            (3_723_000_000_000, "1h2m3s"),
            (3_600_000_000_000, "1h0m0s"),
            (-90_000_000_000, "-1m30s"),
            (i64::MAX, "2562047h47m16.854775807s"),
        ];
        for (n, s) in cases {
            assert_eq!(format_duration(n), s);
            assert_eq!(parse_duration(s), Some(n), "{s}");
        }
        assert_eq!(parse_duration("1.5h"), Some(5_400_000_000_000));
        assert_eq!(parse_duration("300us"), Some(300_000));
        assert_eq!(parse_duration("0"), Some(0));
        assert_eq!(format_duration(i64::MIN), "-2562047h47m16.854775808s");
        assert_eq!(parse_duration("-2562047h47m16.854775808s"), Some(i64::MIN));
        for bad in ["", "1", "h", "1x", "9999999999999h", "1.s.", "-", "."] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
