//! Go's `time.ParseDuration` syntax (`1m30s`, `500ms`), which every upstream duration
//! flag and config field uses.

use std::time::Duration;

/// Go's `time.ParseDuration` for the forms configs use: `15s`, `1m30s`, `500ms`, `1h`.
pub fn parse(s: &str) -> Result<Duration, String> {
    let mut total = 0f64;
    let mut rest = s.trim();
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(format!("invalid duration {s:?}"));
    }
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or(format!("invalid duration {s:?}: missing unit"))?;
        let value: f64 = rest[..n].parse().map_err(|_| format!("invalid duration {s:?}"))?;
        rest = &rest[n..];
        let u = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            unit => return Err(format!("invalid duration {s:?}: unknown unit {unit:?}")),
        };
        total += value * scale;
        rest = &rest[u..];
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse("15s").unwrap(), Duration::from_secs(15));
        assert_eq!(parse("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        assert!(parse("5x").is_err());
        assert!(parse("5").is_err());
    }
}
