//! Redis 8.4's value digests (https://redis.io/docs/latest/commands/digest/):
//! the XXH3 64-bit hash of a string value as 16 lower-case hex digits, and
//! the compare-and-set conditions of SET and DELEX (IFEQ, IFNE, IFDEQ,
//! IFDNE) judged against a current value.
//!
//! Pure functions of bytes: must not touch `Ctx`, the store or replies.

#[cfg(test)]
use super::opts::IFDNE;
use super::opts::{IFDEQ, IFEQ, IFNE};

/// Width of a digest in hex digits (Redis's DIGEST_HEX_LENGTH).
pub const HEX_LEN: usize = 16;

/// The error for an IFDEQ/IFDNE digest that is not 16 hex digits.
pub const BAD_DIGEST: &str = "ERR must be exactly 16 hexadecimal characters";

/// DIGEST's reply for `value`: XXH3-64 (seed 0), zero-padded lower-case
/// hex, as Redis 8.4.0 writes it (redis/redis#14502 made it fixed-width).
pub fn hex(value: &[u8]) -> [u8; HEX_LEN] {
    let h = xxhash_rust::xxh3::xxh3_64(value);
    let mut out = [0u8; HEX_LEN];
    for (i, d) in out.iter_mut().enumerate() {
        let nibble = (h >> (60 - 4 * i)) & 0xf;
        *d = b"0123456789abcdef"[nibble as usize];
    }
    out
}

/// Whether `d` is a digest IFDEQ/IFDNE accept: exactly 16 hex digits of
/// either case.
pub fn valid(d: &[u8]) -> bool {
    d.len() == HEX_LEN && d.iter().all(u8::is_ascii_hexdigit)
}

/// Whether the condition in `flags` (one of IFEQ, IFNE, IFDEQ, IFDNE)
/// holds for the current value `cur` and the given `cmp`. Digests compare
/// without regard to case, as Redis's strcasecmp.
pub fn holds(flags: u32, cmp: &[u8], cur: &[u8]) -> bool {
    if flags & (IFEQ | IFNE) != 0 {
        (cur == cmp) == (flags & IFEQ != 0)
    } else {
        hex(cur).eq_ignore_ascii_case(cmp) == (flags & IFDEQ != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_as_redis_writes_them() {
        // The example of https://redis.io/docs/latest/commands/digest/.
        assert_eq!(&hex(b"Hello world"), b"b6acb9d84a38ff74");
        // redis/redis#14496's value, whose hash has leading zero digits.
        let v = b"v8lf0c11xh8ymlqztfd3eeq16kfn4sspw7fqmnuuq3k3t75em5wdizgcdw7uc26nnf961u2jkfzkjytls2kwlj7626sd";
        assert_eq!(&hex(v), b"00006c38adf31777");
        assert!(valid(b"B6ACB9D84A38FF74"));
        assert!(!valid(b"b6acb9d84a38ff7"));
        assert!(!valid(b"b6acb9d84a38ff74a"));
        assert!(!valid(b"g6acb9d84a38ff74"));
    }

    #[test]
    fn conditions() {
        assert!(holds(IFEQ, b"a", b"a"));
        assert!(!holds(IFEQ, b"a", b"b"));
        assert!(holds(IFNE, b"a", b"b"));
        assert!(!holds(IFNE, b"a", b"a"));
        assert!(holds(IFDEQ, b"B6ACB9D84A38FF74", b"Hello world"));
        assert!(!holds(IFDNE, b"b6acb9d84a38ff74", b"Hello world"));
        assert!(holds(IFDNE, b"0000000000000000", b"Hello world"));
    }
}
