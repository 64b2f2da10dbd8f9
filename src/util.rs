//! Small helpers shared by command families: number parsing and formatting
//! with Redis's exact rules, and the per-command clock.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static CMD_TIME_MS: AtomicI64 = AtomicI64::new(0);

/// Wall-clock milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Wall-clock microseconds since the Unix epoch.
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// Fixes the time seen by the command about to run, like Redis's cached
/// `mstime` per command: a key cannot expire half-way through one command.
pub fn set_cmd_time() -> i64 {
    let t = now_ms();
    CMD_TIME_MS.store(t, Ordering::Relaxed);
    CMD_TIME_STAMP.store(stamp(), Ordering::Relaxed);
    t
}

/// Cycle-counter reading taken when `CMD_TIME_MS` was last set.
static CMD_TIME_STAMP: AtomicU64 = AtomicU64::new(0);

/// Cycles within which the fixed clock is reused: at any clock rate over
/// 1 GHz this is under 50 µs, far below the clock's 1 ms resolution.
const REUSE_CYCLES: u64 = 50_000;

#[cfg(target_arch = "x86_64")]
fn stamp() -> u64 {
    // SAFETY: RDTSC has no preconditions on x86_64.
    unsafe { std::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn stamp() -> u64 {
    0
}

/// `set_cmd_time` for the next command of a batch: the clock read a few
/// microseconds ago is reused (a pipelined batch of short commands would
/// otherwise read the clock once per command). Any longer gap, a slow
/// command or another thread's clock, reads it again.
pub fn refresh_cmd_time() {
    if cfg!(target_arch = "x86_64") && CMD_TIME_MS.load(Ordering::Relaxed) != 0 {
        let age = stamp().wrapping_sub(CMD_TIME_STAMP.load(Ordering::Relaxed));
        if age < REUSE_CYCLES {
            return;
        }
    }
    set_cmd_time();
}

/// The time fixed for the running command.
pub fn cmd_time_ms() -> i64 {
    match CMD_TIME_MS.load(Ordering::Relaxed) {
        0 => now_ms(),
        t => t,
    }
}

/// Redis's 24-bit LRU clock in seconds.
pub fn lru_clock() -> u32 {
    ((cmd_time_ms() / 1000) as u32) & 0x00ff_ffff
}

/// Seconds since an entry's `lru` stamp (OBJECT IDLETIME).
pub fn idle_seconds(lru: u32) -> u64 {
    let now = lru_clock();
    if now >= lru {
        (now - lru) as u64
    } else {
        (now + (0x00ff_ffff - lru)) as u64
    }
}

/// Parses an integer exactly like Redis's `string2ll`: no spaces, no '+',
/// no leading zeros, within i64.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (neg, d) = if s[0] == b'-' {
        (true, &s[1..])
    } else {
        (false, s)
    };
    if d.is_empty() || !(b'1'..=b'9').contains(&d[0]) {
        return None;
    }
    let mut v: u64 = 0;
    for &c in d {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    if neg {
        if v > i64::MAX as u64 + 1 {
            None
        } else {
            Some((v as i64).wrapping_neg())
        }
    } else if v > i64::MAX as u64 {
        None
    } else {
        Some(v as i64)
    }
}

/// Whether Redis would store this string with the "int" encoding.
pub fn is_int_encodable(s: &[u8]) -> bool {
    s.len() <= 20 && parse_i64(s).is_some()
}

/// Parses a double like Redis's `string2d`/`strtod` use for scores and
/// INCRBYFLOAT arguments: no leading space, whole string consumed, not NaN.
pub fn parse_f64(s: &[u8]) -> Option<f64> {
    if s.is_empty() || s[0].is_ascii_whitespace() || s[s.len() - 1].is_ascii_whitespace() {
        return None;
    }
    let t = std::str::from_utf8(s).ok()?;
    let lower = t.to_ascii_lowercase();
    let v = match lower.as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        _ => {
            // Rust accepts forms strtod rejects ("1_0" no, but "inf" handled above);
            // reject anything with characters strtod would not consume.
            if !t
                .bytes()
                .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-'))
            {
                // strtod also takes hex floats; Redis users almost never send them.
                return None;
            }
            t.parse::<f64>().ok()?
        }
    };
    if v.is_nan() {
        None
    } else {
        Some(v)
    }
}

/// Formats like C's `%.17g` (what Redis 7.0 uses for double replies).
pub fn fmt_double(d: f64) -> String {
    if d.is_nan() {
        return "nan".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf".into() } else { "-inf".into() };
    }
    fmt_g(d, 17)
}

/// C's `%.{p}g`.
pub fn fmt_g(d: f64, p: usize) -> String {
    if d == 0.0 {
        return if d.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let e = format!("{:.*e}", p - 1, d);
    let (mant, exp) = e.split_once('e').unwrap();
    let x: i32 = exp.parse().unwrap();
    if x < -4 || x >= p as i32 {
        let mant = trim_zeros(mant);
        let sign = if x < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", x.abs())
    } else {
        let decimals = (p as i32 - 1 - x).max(0) as usize;
        trim_zeros(&format!("{:.*}", decimals, d)).to_string()
    }
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// ASCII-case-insensitive comparison for command and option names.
pub fn eq_ic(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

/// An argument as C code sees it: cut at its first NUL byte. Redis compares
/// option names and prints arguments as C strings ("NX\0junk" is NX), so
/// every such comparison or message goes through here.
pub fn c_str(a: &[u8]) -> &[u8] {
    match memchr::memchr(0, a) {
        Some(i) => &a[..i],
        None => a,
    }
}

/// `c_str(a)` equals `name`, ignoring ASCII case (an option name check).
pub fn c_str_eq(a: &[u8], name: &str) -> bool {
    c_str(a).eq_ignore_ascii_case(name.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        assert_eq!(parse_i64(b"01"), None);
        assert_eq!(parse_i64(b"-0"), None);
        assert_eq!(parse_i64(b"+1"), None);
        assert_eq!(parse_i64(b" 1"), None);
    }

    #[test]
    fn doubles() {
        assert_eq!(fmt_double(1.5), "1.5");
        assert_eq!(fmt_double(0.1), "0.10000000000000001");
        assert_eq!(fmt_double(1e20), "1e+20");
        assert_eq!(fmt_double(3.0), "3");
        assert_eq!(fmt_double(1e-5), "1.0000000000000001e-05");
    }
}
