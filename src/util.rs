//! Small helpers shared by command families: number parsing and formatting
//! with Redis's exact rules, and the per-command clock.
//!
//! A leaf: it imports nothing of the crate, and the per-command clock is
//! its only state; it must not know the store, commands or connections.

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

/// A point in time for measuring how long a command ran (commandstats,
/// SLOWLOG): the cycle counter where there is one (a few ns, where a clock
/// read costs tens), else the monotonic clock.
#[derive(Clone, Copy)]
pub struct Stopwatch {
    #[cfg(target_arch = "x86_64")]
    cycles: u64,
    #[cfg(not(target_arch = "x86_64"))]
    at: std::time::Instant,
}

impl Stopwatch {
    pub fn start() -> Stopwatch {
        #[cfg(target_arch = "x86_64")]
        return Stopwatch { cycles: stamp() };
        #[cfg(not(target_arch = "x86_64"))]
        return Stopwatch {
            at: std::time::Instant::now(),
        };
    }

    /// Microseconds since `start`.
    pub fn micros(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        return (stamp().wrapping_sub(self.cycles) as f64 / cycles_per_us()) as u64;
        #[cfg(not(target_arch = "x86_64"))]
        return self.at.elapsed().as_micros() as u64;
    }
}

/// The cycle counter's rate, measured once against the monotonic clock
/// over 2 ms (the invariant TSC of x86_64 CPUs of the last decade ticks at
/// a constant rate). Each end of the window is a clock reading paired
/// with the cycle count taken around it (`clock_and_cycles`): a thread
/// preempted between the two reads would otherwise skew the rate, and
/// every duration after it, for the life of the process (seen on a loaded
/// machine: a 50 ms DEBUG SLEEP logged as 31 ms).
#[cfg(target_arch = "x86_64")]
fn cycles_per_us() -> f64 {
    static RATE: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *RATE.get_or_init(|| {
        let (t0, c0) = clock_and_cycles();
        while t0.elapsed() < std::time::Duration::from_millis(2) {
            std::hint::spin_loop();
        }
        let (t1, c1) = clock_and_cycles();
        let dt = t1.duration_since(t0);
        (c1.wrapping_sub(c0) as f64 / dt.as_secs_f64() / 1e6).max(1.0)
    })
}

/// A monotonic clock reading and the cycle count at the same moment: of a
/// few tries, the one whose cycle stamps before and after the clock read
/// are closest, with the count taken halfway between them.
#[cfg(target_arch = "x86_64")]
fn clock_and_cycles() -> (std::time::Instant, u64) {
    let mut best: Option<(u64, std::time::Instant, u64)> = None;
    for _ in 0..8 {
        let before = stamp();
        let t = std::time::Instant::now();
        let gap = stamp().wrapping_sub(before);
        if best.is_none_or(|(g, _, _)| gap < g) {
            best = Some((gap, t, before.wrapping_add(gap / 2)));
        }
    }
    let (_, t, c) = best.expect("eight tries");
    (t, c)
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

/// `%f` with its trailing zeros (and a bare point) trimmed, as Redis's
/// trimDoubleString prints a percentile: 50 -> "50", 99.9 -> "99.9".
pub fn f_trimmed(v: f64) -> String {
    trim_zeros(&format!("{v:.6}")).to_string()
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

/// C's `isspace` in the C locale.
pub fn c_isspace(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn starts_with_ic(s: &[u8], p: &str) -> bool {
    s.len() >= p.len() && s[..p.len()].eq_ignore_ascii_case(p.as_bytes())
}

/// `v * 2^e` without intermediate overflow (C's ldexp, near enough).
fn ldexp(mut v: f64, mut e: i64) -> f64 {
    while e > 1000 {
        v *= 2f64.powi(1000);
        e -= 1000;
        if v.is_infinite() {
            return v;
        }
    }
    while e < -1000 {
        v *= 2f64.powi(-1000);
        e += 1000;
        if v == 0.0 {
            return v;
        }
    }
    v * 2f64.powi(e as i32)
}

/// What C's strto* functions skip before the digits: leading whitespace
/// (C's isspace), then one `+` or `-`. Returns (where the sign is, where
/// the digits start, negative).
pub fn space_and_sign(s: &[u8]) -> (usize, usize, bool) {
    let mut i = 0;
    while i < s.len() && c_isspace(s[i]) {
        i += 1;
    }
    match s.get(i) {
        Some(b'-') => (i, i + 1, true),
        Some(b'+') => (i, i + 1, false),
        _ => (i, i, false),
    }
}

/// C's `strtod` on `s`: the value, the bytes consumed (0: no conversion),
/// and whether it set ERANGE (overflow to infinity or underflow to zero).
/// Accepts leading whitespace, a sign, `inf`/`infinity`/`nan[(...)]` in any
/// case, hexadecimal (`0x1p3`) and decimal forms.
pub fn strtod(s: &[u8]) -> (f64, usize, bool) {
    let (num_start, i, neg) = space_and_sign(s);
    let sign = if neg { -1.0 } else { 1.0 };
    let rest = &s[i..];
    if starts_with_ic(rest, "infinity") {
        return (sign * f64::INFINITY, i + 8, false);
    }
    if starts_with_ic(rest, "inf") {
        return (sign * f64::INFINITY, i + 3, false);
    }
    if starts_with_ic(rest, "nan") {
        let mut end = i + 3;
        if s.get(end) == Some(&b'(') {
            let mut j = end + 1;
            while j < s.len() && (s[j].is_ascii_alphanumeric() || s[j] == b'_') {
                j += 1;
            }
            if s.get(j) == Some(&b')') {
                end = j + 1;
            }
        }
        return (f64::NAN, end, false);
    }
    let hexdigit = |c: u8| (c as char).to_digit(16);
    if rest.len() >= 2
        && rest[0] == b'0'
        && (rest[1] | 0x20) == b'x'
        && (rest.get(2).and_then(|&c| hexdigit(c)).is_some()
            || (rest.get(2) == Some(&b'.') && rest.get(3).and_then(|&c| hexdigit(c)).is_some()))
    {
        let mut j = i + 2;
        let mut m: u64 = 0;
        let mut e: i64 = 0;
        while let Some(d) = s.get(j).and_then(|&c| hexdigit(c)) {
            if m < 1 << 59 {
                m = m * 16 + d as u64;
            } else {
                e += 4;
            }
            j += 1;
        }
        if s.get(j) == Some(&b'.') {
            j += 1;
            while let Some(d) = s.get(j).and_then(|&c| hexdigit(c)) {
                if m < 1 << 59 {
                    m = m * 16 + d as u64;
                    e -= 4;
                }
                j += 1;
            }
        }
        if matches!(s.get(j), Some(b'p' | b'P')) {
            let mut k = j + 1;
            let eneg = match s.get(k) {
                Some(b'-') => {
                    k += 1;
                    true
                }
                Some(b'+') => {
                    k += 1;
                    false
                }
                _ => false,
            };
            if s.get(k).is_some_and(|c| c.is_ascii_digit()) {
                let mut x: i64 = 0;
                while let Some(c) = s.get(k).filter(|c| c.is_ascii_digit()) {
                    x = (x * 10 + (c - b'0') as i64).min(1 << 40);
                    k += 1;
                }
                e += if eneg { -x } else { x };
                j = k;
            }
        }
        let v = ldexp(m as f64, e);
        let erange = v.is_infinite() || (v == 0.0 && m != 0);
        return (sign * v, j, erange);
    }
    // Decimal: digits [. digits] [e [sign] digits], at least one digit.
    let mut j = i;
    let mut digits = 0;
    let mut nonzero = false;
    while let Some(&c) = s.get(j).filter(|c| c.is_ascii_digit()) {
        digits += 1;
        nonzero |= c != b'0';
        j += 1;
    }
    if s.get(j) == Some(&b'.') {
        let mut k = j + 1;
        let mut frac = 0;
        while let Some(&c) = s.get(k).filter(|c| c.is_ascii_digit()) {
            frac += 1;
            nonzero |= c != b'0';
            k += 1;
        }
        if digits + frac > 0 {
            digits += frac;
            j = k;
        }
    }
    if digits == 0 {
        return (0.0, 0, false);
    }
    if matches!(s.get(j), Some(b'e' | b'E')) {
        let mut k = j + 1;
        if matches!(s.get(k), Some(b'+' | b'-')) {
            k += 1;
        }
        if s.get(k).is_some_and(|c| c.is_ascii_digit()) {
            while s.get(k).is_some_and(|c| c.is_ascii_digit()) {
                k += 1;
            }
            j = k;
        }
    }
    // Only ASCII digits, signs, '.', 'e' were taken: valid UTF-8 that
    // Rust's (correctly rounded, as glibc's) parser accepts.
    let text = std::str::from_utf8(&s[num_start..j]).unwrap_or("0");
    let v: f64 = text.parse().unwrap_or(0.0);
    let erange = v.is_infinite() || (v == 0.0 && nonzero);
    (v, j, erange)
}

/// Whether a client address ("ip:port", "[ip6]:port") is on loopback as
/// Redis's connIsLocal judges it: an IPv4 address in 127.0.0.0/8, or ::1.
pub fn is_local_addr(addr: &str) -> bool {
    addr.starts_with("127.") || addr.starts_with("[::1]:") || addr == "::1"
}

/// Bytes in double quotes, escaped like Redis's `sdscatrepr`: `\\`, `"`,
/// `\n`, `\r`, `\t`, `\a` and `\b` by name, any other byte outside
/// printable ASCII as `\xNN`. For MONITOR's arguments, CONFIG REWRITE's
/// string values and the config lines made of the server's command line.
pub fn repr(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() + 2);
    s.push('"');
    for &c in b {
        match c {
            b'\\' => s.push_str("\\\\"),
            b'"' => s.push_str("\\\""),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            0x07 => s.push_str("\\a"),
            0x08 => s.push_str("\\b"),
            c if c.is_ascii_graphic() || c == b' ' => s.push(c as char),
            c => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s.push('"');
    s
}

/// Redis's debugDelay, for its testing knobs (`key-load-delay`): sleeps
/// `usec` microseconds; a negative value is a 1 in -`usec` chance of
/// sleeping 1 µs.
pub fn debug_delay(usec: i64) {
    let usec = if usec < 0 {
        u64::from(rand::random::<u64>().is_multiple_of(usec.unsigned_abs()))
    } else {
        usec as u64
    };
    if usec > 0 {
        std::thread::sleep(std::time::Duration::from_micros(usec));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cycle-counter stopwatch agrees with the monotonic clock: the
    /// rate calibration is right (a 50 ms sleep is 50 ms in SLOWLOG).
    #[test]
    fn stopwatch_agrees_with_the_clock() {
        // The first reading calibrates (2 ms): not inside the measure.
        Stopwatch::start().micros();
        let (sw, t) = (Stopwatch::start(), std::time::Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(30));
        let (us, clock) = (sw.micros(), t.elapsed().as_micros() as u64);
        assert!(us >= 30_000, "{us} µs");
        assert!(
            us.abs_diff(clock) <= clock / 50 + 1000,
            "{us} µs by cycles, {clock} µs by the clock"
        );
    }

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

    #[test]
    fn repr_escapes_like_sdscatrepr() {
        assert_eq!(repr(b""), r#""""#);
        assert_eq!(repr(b"a b~!"), r#""a b~!""#);
        assert_eq!(repr(b"\\\"\n\r\t\x07\x08"), r#""\\\"\n\r\t\a\b""#);
        assert_eq!(
            repr(&[0, 0x0b, 0x1f, 0x7f, 0x80, 0xff]),
            r#""\x00\x0b\x1f\x7f\x80\xff""#
        );
        assert_eq!(repr("é".as_bytes()), r#""\xc3\xa9""#);
    }
}
