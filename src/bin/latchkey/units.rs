//! Duration arguments (`500ms`, `10s`, `2m`, `1h`, a plain number = seconds)
//! and UTC RFC 3339 timestamps with milliseconds, without a date crate.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Parses `500ms`, `10s`, `1.5s`, `2m`, `1h` or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale = match unit {
        "ms" => 0.001,
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "invalid duration {s:?}: use e.g. 500ms, 10s, 2m, 1h"
            ))
        }
    };
    // A number must start with a digit: "", ".5" and "1.2.3" are refused.
    if !num.starts_with(|c: char| c.is_ascii_digit()) || num.matches('.').count() > 1 {
        return Err(format!(
            "invalid duration {s:?}: use e.g. 500ms, 10s, 2m, 1h"
        ));
    }
    let v: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
    Duration::try_from_secs_f64(v * scale).map_err(|_| format!("duration {s:?} is too large"))
}

/// Like [`parse_duration`] but refuses zero (a zero lease would expire at
/// once) and more than a server TTL can hold (it counts milliseconds from
/// now in an i64; a million years is far inside that).
pub fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("duration {s:?} must be greater than zero"));
    }
    if d > Duration::from_secs(1_000_000 * 365 * 24 * 3600) {
        return Err(format!("duration {s:?} is too large"));
    }
    Ok(d)
}

/// Shows a duration the way the user would type it.
pub fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 || !ms.is_multiple_of(1000) {
        format!("{ms}ms")
    } else {
        format!("{}s", ms / 1000)
    }
}

/// The current time as `2026-11-22T07:40:01.123Z`.
pub fn now_rfc3339() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    rfc3339_ms(ms)
}

/// Formats milliseconds since the Unix epoch (UTC).
pub fn rfc3339_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60,
        ms.rem_euclid(1000)
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in [
            "", "ms", "-1", "1x", "1.2.3", ".5", "1 s", "s10", "1e3", "inf", "1e400",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_duration(&"9".repeat(40)).is_err());
        assert!(parse_positive_duration("0ms").is_err());
        assert!(parse_positive_duration("10000000000000h").is_err());
        assert_eq!(
            parse_positive_duration("87600h"),
            Ok(Duration::from_secs(87600 * 3600))
        );
        assert_eq!(show_duration(Duration::from_millis(200)), "200ms");
        assert_eq!(show_duration(Duration::from_secs(3)), "3s");
    }

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_795_333_201_123), "2026-11-22T07:40:01.123Z");
        assert_eq!(rfc3339_ms(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
        assert_eq!(rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
    }
}
