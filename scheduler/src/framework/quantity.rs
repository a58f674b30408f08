//! Resource quantities (`100m`, `1.5Gi`, `2e3`) as the scheduler counts them: CPU in
//! millicores, everything else in whole units, both rounded up as upstream's
//! `MilliValue()`/`Value()` do, so a request is never under-counted.

/// A quantity's value in thousandths of a unit (rounded up), or `None` when it does not
/// parse. Values beyond `i64` saturate.
pub fn parse_milli(s: &str) -> Option<i64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let split =
        s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let value: f64 = num.parse().ok()?;
    let multiplier: f64 = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0f64.powi(2),
        "Gi" => 1024.0f64.powi(3),
        "Ti" => 1024.0f64.powi(4),
        "Pi" => 1024.0f64.powi(5),
        "Ei" => 1024.0f64.powi(6),
        exp if exp.starts_with(['e', 'E']) => 10f64.powi(exp[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    let milli = (value * multiplier * 1000.0).ceil();
    if !milli.is_finite() {
        return None;
    }
    Some(milli.clamp(i64::MIN as f64, i64::MAX as f64) as i64)
}

/// A quantity in whole units, rounded up.
pub fn parse_value(s: &str) -> Option<i64> {
    parse_milli(s).map(|m| m.div_euclid(1000) + i64::from(m.rem_euclid(1000) != 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_upstream_forms() {
        assert_eq!(parse_milli("100m"), Some(100));
        assert_eq!(parse_milli("1"), Some(1000));
        assert_eq!(parse_milli("1.5"), Some(1500));
        assert_eq!(parse_value("128Mi"), Some(128 << 20));
        assert_eq!(parse_value("1G"), Some(1_000_000_000));
        assert_eq!(parse_value("2e3"), Some(2000));
        assert_eq!(parse_value("1m"), Some(1));
        assert_eq!(parse_milli("abc"), None);
        assert_eq!(parse_milli("1Qi"), None);
    }
}
