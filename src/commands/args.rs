//! Argument helpers the command families share, and Redis's common error
//! texts. Pure parsing and replies: nothing here runs a command.
//!
//! Must not touch the store: `Ctx` is used only to write an error reply;
//! it knows `db::WrongType`, `resp::Out` and `util`.

use bytes::Bytes;

use super::context::Ctx;
use crate::db::WrongType;
use crate::resp::Out;
use crate::util::{c_str, eq_ic};

// Error texts shared by families, exactly as Redis 7 prints them.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

pub const SYNTAX: &str = "ERR syntax error";

pub const NOT_INT: &str = "ERR value is not an integer or out of range";

pub const NOT_FLOAT: &str = "ERR value is not a valid float";

pub const NO_SUCH_KEY: &str = "ERR no such key";

pub const NOAUTH: &str = "NOAUTH Authentication required.";

pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

pub const NOREPLICAS: &str = "NOREPLICAS Not enough good replicas to write.";

/// The one place a typed lookup's `WrongType` becomes Redis's WRONGTYPE
/// error: `let Some(v) = typed(ctx.out, db.read::<Hash>(key)) else { return };`
pub fn typed<T>(out: &mut Out, r: Result<T, WrongType>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(WrongType) => {
            out.error(WRONGTYPE);
            None
        }
    }
}

/// A float argument as Redis's getDoubleFromObject takes it (scores,
/// increments, weights, GEO coordinates and distances): the whole argument
/// through `strtod`, no leading space, no overflow or underflow, not NaN.
pub fn parse_float(a: &[u8]) -> Option<f64> {
    if a.is_empty() || crate::util::c_isspace(a[0]) {
        return None;
    }
    let (v, n, erange) = crate::util::strtod(a);
    if n != a.len() || erange || v.is_nan() {
        return None;
    }
    Some(v)
}

/// Parses an integer argument or replies with `ERR value is not an integer`.
pub fn arg_i64(ctx: &mut Ctx, a: &[u8]) -> Option<i64> {
    match crate::util::parse_i64(a) {
        Some(v) => Some(v),
        None => {
            ctx.error(NOT_INT);
            None
        }
    }
}

/// A blocking command's timeout in seconds (fractions allowed; 0 =
/// forever) as an absolute deadline in ms; None after replying the error
/// Redis 7.0 gives.
pub fn parse_timeout(ctx: &mut Ctx, a: &[u8]) -> Option<Option<i64>> {
    // Redis's string2ld: strtold over the whole argument, no leading
    // space, hex accepted, NaN refused.
    let (secs, n, _) = crate::util::strtod(a);
    if a.is_empty() || crate::util::c_isspace(a[0]) || n != a.len() || secs.is_nan() {
        ctx.error("ERR timeout is not a float or out of range");
        return None;
    }
    let ms = secs * 1000.0;
    // Redis converts to a long long: out-of-range values come out negative.
    let ms = if ms.is_finite() && ms.abs() < i64::MAX as f64 {
        ms.ceil() as i64
    } else {
        -1
    };
    if ms < 0 {
        ctx.error("ERR timeout is negative");
        return None;
    }
    if ms == 0 {
        return Some(None);
    }
    Some(Some(crate::util::cmd_time_ms().saturating_add(ms)))
}

/// A start..=end index range as Redis normalises it for LRANGE, LTRIM,
/// ZRANGE and friends on a value of `len` elements: negative indexes count
/// from the end, the range is clamped, None when it is empty.
pub fn norm_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let mut start = if start < 0 {
        start.saturating_add(len)
    } else {
        start
    };
    let mut end = if end < 0 {
        end.saturating_add(len)
    } else {
        end
    };
    if start < 0 {
        start = 0;
    }
    if start > end || start >= len {
        return None;
    }
    if end >= len {
        end = len - 1;
    }
    Some((start as usize, end as usize))
}

/// Most picks HRANDFIELD, SRANDMEMBER and ZRANDMEMBER write with a
/// negative count: Redis streams any number (and an absurd one holds the
/// server and its memory without bound); latchkey refuses replies this
/// large with `ERR value is out of range`.
pub const MAX_RANDOM_REPEATS: u64 = 1 << 25;

/// LMPOP/BLMPOP/ZMPOP/BZMPOP arguments from `numkeys` on: the keys, the
/// side (`which` parses LEFT|RIGHT or MIN|MAX), the COUNT (default 1).
pub fn mpop_args<'a, E>(
    ctx: &mut Ctx,
    args: &'a [Bytes],
    which: impl Fn(&[u8]) -> Option<E>,
) -> Option<(&'a [Bytes], E, usize)> {
    let n = match crate::util::parse_i64(&args[0]) {
        Some(n) if n > 0 => n as usize,
        _ => {
            ctx.error("ERR numkeys should be greater than 0");
            return None;
        }
    };
    if n > args.len() - 1 {
        ctx.error(SYNTAX);
        return None;
    }
    let keys = &args[1..=n];
    let rest = &args[n + 1..];
    let Some(end) = rest.first().and_then(|a| which(a)) else {
        ctx.error(SYNTAX);
        return None;
    };
    let count = match &rest[1..] {
        [] => 1,
        [opt, c] if crate::util::eq_ic(opt, "count") => match crate::util::parse_i64(c) {
            Some(c) if c > 0 => c as usize,
            _ => {
                ctx.error("ERR count should be greater than 0");
                return None;
            }
        },
        _ => {
            ctx.error(SYNTAX);
            return None;
        }
    };
    Some((keys, end, count))
}

/// Parses a SCAN cursor like C's `strtoul` as Redis calls it: leading white
/// space is refused, a sign is accepted ("-1" wraps), the text ends at a NUL.
pub fn parse_cursor(a: &[u8]) -> Option<u64> {
    if a.first().is_some_and(|c| matches!(c, b' ' | b'\t'..=b'\r')) {
        return None;
    }
    let s = c_str(a);
    if s.is_empty() {
        return Some(0);
    }
    let (neg, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    Some(if neg { v.wrapping_neg() } else { v })
}

/// The options of SCAN and of HSCAN/SSCAN/ZSCAN (Redis's
/// scanGenericCommand).
pub(crate) struct ScanOpts<'a> {
    /// COUNT: at least 1, default 10.
    pub count: i64,
    /// MATCH; None for none or a lone "*" (Redis skips the matcher then).
    pub pattern: Option<&'a [u8]>,
    /// TYPE (SCAN only), cut at a NUL as Redis reads it.
    pub type_name: Option<&'a [u8]>,
}

/// Parses `[MATCH pattern] [COUNT count] [TYPE type]` (the arguments after
/// the cursor); Err is Redis's error reply. TYPE is a syntax error unless
/// `allow_type` (only SCAN has it).
pub(crate) fn parse_scan_opts(
    opts: &[Bytes],
    allow_type: bool,
) -> Result<ScanOpts<'_>, &'static str> {
    let mut o = ScanOpts {
        count: 10,
        pattern: None,
        type_name: None,
    };
    let mut i = 0;
    while i < opts.len() {
        let has_value = opts.len() - i >= 2;
        let a = &opts[i];
        if eq_ic(a, "count") && has_value {
            match crate::util::parse_i64(&opts[i + 1]) {
                None => return Err(NOT_INT),
                Some(n) if n < 1 => return Err(SYNTAX),
                Some(n) => o.count = n,
            }
        } else if eq_ic(a, "match") && has_value {
            let p = &opts[i + 1][..];
            o.pattern = if p == b"*" { None } else { Some(p) };
        } else if allow_type && eq_ic(a, "type") && has_value {
            o.type_name = Some(c_str(&opts[i + 1]));
        } else {
            return Err(SYNTAX);
        }
        i += 2;
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_parse_as_string2d() {
        assert_eq!(parse_float(b"1"), Some(1.0));
        assert_eq!(parse_float(b"-1.5e3"), Some(-1500.0));
        assert_eq!(parse_float(b"+inf"), Some(f64::INFINITY));
        assert_eq!(parse_float(b"-Infinity"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_float(b"0x10"), Some(16.0));
        assert_eq!(parse_float(b"0x1p-2"), Some(0.25));
        assert_eq!(parse_float(b".5"), Some(0.5));
        assert_eq!(parse_float(b"5."), Some(5.0));
        assert_eq!(parse_float(b"4.9e-324"), Some(5e-324));
        assert_eq!(parse_float(b" 1"), None);
        assert_eq!(parse_float(b"1 "), None);
        assert_eq!(parse_float(b""), None);
        assert_eq!(parse_float(b"nan"), None);
        assert_eq!(parse_float(b"1e400"), None);
        assert_eq!(parse_float(b"1e-400"), None);
        assert_eq!(parse_float(b"1e"), None);
        assert_eq!(parse_float(b"infinit"), None);
        assert_eq!(parse_float(b"1\x002"), None);
        assert_eq!(parse_float(b"."), None);
        assert_eq!(parse_float(b"0x"), None);
    }
}
