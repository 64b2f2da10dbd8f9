//! INCRBYFLOAT arithmetic through the C `long double` shim (csrc/longdouble.c),
//! so results match Redis digit for digit. Also usable by HINCRBYFLOAT.
//! Its "human" formatting also prints the coordinates GEOPOS and WITHCOORD
//! reply with (`human`).
//!
//! Arithmetic and formatting only: must not touch `Ctx`, the store or
//! replies; its callers (`strings`, `hash`, `geo`) read and write the values.

use std::os::raw::{c_char, c_int};

extern "C" {
    fn lk_incrbyfloat(
        cur: *const c_char,
        curlen: usize,
        has_cur: c_int,
        incr: *const c_char,
        incrlen: usize,
        out: *mut c_char,
        outlen: usize,
    ) -> c_int;
    fn lk_ld2string_human(value: f64, out: *mut c_char, outlen: usize) -> c_int;
}

/// Redis's MAX_LONG_DOUBLE_CHARS: room for "%.17Lf" of the largest long double.
const OUT_CAP: usize = 5 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatError {
    /// The stored value is not a valid float.
    Value,
    /// The increment is not a valid float.
    Increment,
    /// The sum is NaN or infinite.
    NanOrInf,
}

/// `cur + incr` parsed and formatted like Redis (string2ld, ld2string
/// LD_STR_HUMAN). `cur == None` is a missing key, i.e. 0.
pub fn incr_by_float(cur: Option<&[u8]>, incr: &[u8]) -> Result<Vec<u8>, FloatError> {
    let mut out = [0u8; OUT_CAP];
    let (cp, cl) = match cur {
        Some(c) => (c.as_ptr(), c.len()),
        None => (std::ptr::null(), 0),
    };
    // SAFETY: every pointer is valid for the given length; the shim copies
    // its inputs into NUL-terminated buffers and writes at most OUT_CAP bytes.
    let n = unsafe {
        lk_incrbyfloat(
            cp as *const c_char,
            cl,
            cur.is_some() as c_int,
            incr.as_ptr() as *const c_char,
            incr.len(),
            out.as_mut_ptr() as *mut c_char,
            out.len(),
        )
    };
    match n {
        -1 => Err(FloatError::Value),
        -2 => Err(FloatError::Increment),
        -3 => Err(FloatError::NanOrInf),
        n if n > 0 => Ok(out[..n as usize].to_vec()),
        // Cannot happen: OUT_CAP fits every finite long double.
        _ => Err(FloatError::NanOrInf),
    }
}

/// A double as Redis's addReplyHumanLongDouble prints it: `%.17Lf` of
/// the value as a `long double`, trailing zeros (and a bare '.') removed,
/// "-0" as "0"; "inf"/"-inf" for infinities.
pub fn human(v: f64) -> Vec<u8> {
    // A finite double has at most 309 integer digits.
    let mut out = [0u8; 400];
    // SAFETY: the shim writes at most `out.len()` bytes into `out`.
    let n = unsafe { lk_ld2string_human(v, out.as_mut_ptr() as *mut c_char, out.len()) };
    out[..n.max(0) as usize].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(cur: &str, by: &str) -> Result<String, FloatError> {
        incr_by_float(Some(cur.as_bytes()), by.as_bytes()).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn long_double_digits() {
        assert_eq!(add("10.5", "0.1").unwrap(), "10.6");
        assert_eq!(add("0.1", "0.2").unwrap(), "0.3");
        assert_eq!(add("3", "0").unwrap(), "3");
        assert_eq!(add("1", "-1").unwrap(), "0");
        assert_eq!(add("-0", "0").unwrap(), "0");
        assert_eq!(add("5.0e3", "2.0e2").unwrap(), "5200");
        assert_eq!(add("1", "1e-20").unwrap(), "1");
        assert_eq!(
            add("0", "0.00000000000000001").unwrap(),
            "0.00000000000000001"
        );
        assert_eq!(add("0", "0.000000000000000001").unwrap(), "0");
        assert_eq!(add("0x10", "1").unwrap(), "17");
        // Values checked against Redis 7.0.15.
        assert_eq!(add("1", "1e30").unwrap(), "1000000000000000000024696061952");
        assert_eq!(incr_by_float(None, b"-1.5").unwrap(), b"-1.5");
    }

    #[test]
    fn human_digits() {
        let h = |v: f64| String::from_utf8(human(v)).unwrap();
        // GEOPOS of Palermo and of a point at the limits, Redis 7.0.15.
        assert_eq!(h(13.361389338970184), "13.36138933897018433");
        assert_eq!(h(85.05112878), "85.0511287799999991");
        assert_eq!(h(180.0), "180");
        assert_eq!(h(-0.0), "0");
        assert_eq!(h(0.5), "0.5");
        assert_eq!(h(f64::NEG_INFINITY), "-inf");
        assert_eq!(h(1e300).len(), 301);
    }

    #[test]
    fn parse_rejects_like_string2ld() {
        for bad in [
            "", " 1", "1 ", "1a", "nan", "NaN", "1e99999", "-1e99999", "1e-99999", "1\x001",
        ] {
            assert_eq!(add("1", bad), Err(FloatError::Increment), "{bad:?}");
            assert_eq!(add(bad, "1"), Err(FloatError::Value), "{bad:?}");
        }
        let long = "1".repeat(5120);
        assert_eq!(add("1", &long), Err(FloatError::Increment));
        assert!(add("1", &"1".repeat(5119)).is_err()); // overflow to inf
        assert_eq!(add("1", "inf"), Err(FloatError::NanOrInf));
        assert_eq!(add("inf", "-inf"), Err(FloatError::NanOrInf));
        let big = add("1.7e308", "1.7e308").unwrap();
        assert_eq!(big.len(), 309);
        assert!(big.starts_with("34000000000000000000627355605039519359"));
        assert!(add("1", &"1".repeat(4000))
            .unwrap()
            .starts_with("11111111111111111111348446938781924879"));
    }
}
