//! Resource quantities (`100m`, `1.5Gi`, `2e3`) as the scheduler and quota count them: CPU in
//! millicores, everything else in whole units, both rounded up as upstream's
//! `MilliValue()`/`Value()` do, so a request is never under-counted. The arithmetic is
//! exact (integers with a decimal scale): floating point would turn `700m` into 701.

/// A quantity's value in thousandths of a unit (rounded up), or `None` when it does not
/// parse. Values beyond `i64` saturate.
pub fn parse_milli(s: &str) -> Option<i64> {
    let s = s.trim();
    let split =
        s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let (negative, num) = match num.as_bytes().first() {
        Some(b'-') => (true, &num[1..]),
        Some(b'+') => (false, &num[1..]),
        _ => (false, num),
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if (int.is_empty() && frac.is_empty()) || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    // The digits as an integer `mantissa` × 10^`exp10`.
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Some(if negative { i64::MIN } else { i64::MAX });
    }
    let mantissa: i128 = if digits.is_empty() { 0 } else { digits.parse().ok()? };
    let mut exp10 = -(frac.len() as i32);
    let mut binary: u32 = 0;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => binary = 10,
        "Mi" => binary = 20,
        "Gi" => binary = 30,
        "Ti" => binary = 40,
        "Pi" => binary = 50,
        "Ei" => binary = 60,
        e if e.starts_with(['e', 'E']) => exp10 += e[1..].parse::<i32>().ok()?,
        _ => return None,
    }
    // Millis: one more factor of 1000.
    exp10 += 3;
    let saturated = if negative { i64::MIN } else { i64::MAX };
    let mut value = mantissa.checked_mul(1i128 << binary)?;
    if exp10 >= 0 {
        for _ in 0..exp10 {
            match value.checked_mul(10) {
                Some(v) if v <= i64::MAX as i128 => value = v,
                _ => return Some(saturated),
            }
        }
    } else {
        let divisor = 10i128.checked_pow(exp10.unsigned_abs()).unwrap_or(i128::MAX);
        // Round up (away from zero for the magnitude, as upstream rounds requests up).
        value = value / divisor + i128::from(value % divisor != 0);
    }
    // Sign first, then saturate: -2^63 fits, and every negative overflow ends at i64::MIN
    // like the ones above (found by fuzzing: `-7E` printed and re-read came back 1 higher).
    let signed = if negative { -value } else { value };
    Some(i64::try_from(signed).unwrap_or(saturated))
}

/// A quantity in whole units, rounded up.
pub fn parse_value(s: &str) -> Option<i64> {
    parse_milli(s).map(|m| m.div_euclid(1000) + i64::from(m.rem_euclid(1000) != 0))
}

/// Whether a quantity is written with a binary suffix (`Ki` ... `Ei`), the format upstream
/// keeps when it prints sums of such quantities.
pub fn is_binary(s: &str) -> bool {
    s.trim_end().ends_with('i')
}

/// A value in thousandths of a unit in upstream's canonical form: `1500m`, `2`, `2k`, or
/// with `binary` and a whole number of bytes, the largest exact binary suffix (`128Mi`).
pub fn format_milli(milli: i64, binary: bool) -> String {
    if milli % 1000 != 0 {
        return format!("{milli}m");
    }
    let value = milli / 1000;
    if value == 0 {
        return "0".into();
    }
    let suffixes: &[(&str, i64)] = if binary {
        &[
            ("Ei", 1 << 60),
            ("Pi", 1 << 50),
            ("Ti", 1 << 40),
            ("Gi", 1 << 30),
            ("Mi", 1 << 20),
            ("Ki", 1 << 10),
        ]
    } else {
        &[
            ("E", 1_000_000_000_000_000_000),
            ("P", 1_000_000_000_000_000),
            ("T", 1_000_000_000_000),
            ("G", 1_000_000_000),
            ("M", 1_000_000),
            ("k", 1_000),
        ]
    };
    for (suffix, unit) in suffixes {
        if value % unit == 0 {
            return format!("{}{suffix}", value / unit);
        }
    }
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_format() {
        assert_eq!(format_milli(1500, false), "1500m");
        assert_eq!(format_milli(2000, false), "2");
        assert_eq!(format_milli(2_000_000, false), "2k");
        assert_eq!(format_milli(0, true), "0");
        assert_eq!(format_milli(128 * 1024 * 1024 * 1000, true), "128Mi");
        assert_eq!(format_milli(1000 * 1000, true), "1000");
        assert!(is_binary("64Mi") && !is_binary("64M"));
    }

    #[test]
    fn negative_overflow_saturates_at_the_minimum_everywhere() {
        // Found by fuzzing: printed saturated values must read back as themselves.
        assert_eq!(parse_milli("-7E"), Some(i64::MIN));
        assert_eq!(parse_milli(&format_milli(i64::MIN, false)), Some(i64::MIN));
        assert_eq!(parse_milli("-9223372036854775808m"), Some(i64::MIN));
        assert_eq!(parse_milli("9223372036854775808m"), Some(i64::MAX));
    }

    #[test]
    fn parses_upstream_forms_exactly() {
        assert_eq!(parse_milli("100m"), Some(100));
        assert_eq!(parse_milli("700m"), Some(700));
        assert_eq!(parse_milli("3800m"), Some(3800));
        assert_eq!(parse_milli("0.7"), Some(700));
        assert_eq!(parse_milli("1"), Some(1000));
        assert_eq!(parse_milli("1.5"), Some(1500));
        assert_eq!(parse_milli("1500u"), Some(2));
        assert_eq!(parse_value("128Mi"), Some(128 << 20));
        assert_eq!(parse_value("1.5Gi"), Some(3 << 29));
        assert_eq!(parse_value("1G"), Some(1_000_000_000));
        assert_eq!(parse_value("2e3"), Some(2000));
        assert_eq!(parse_value("1m"), Some(1));
        assert_eq!(parse_value("9999999999999999999999"), Some(i64::MAX / 1000 + 1));
        assert_eq!(parse_milli("abc"), None);
        assert_eq!(parse_milli("1Qi"), None);
        assert_eq!(parse_milli(""), None);
        for n in 0..5000 {
            assert_eq!(parse_milli(&format!("{n}m")), Some(n));
        }
    }
}
