//! DUMP payloads, as Redis's createDumpPayload/verifyDumpPayload: a body
//! (a value's type byte and RDB encoding for DUMP, function libraries for
//! FUNCTION DUMP), then the RDB version (2 bytes, little endian) and the
//! CRC64 of everything before it (8 bytes, little endian).
//!
//! Must not touch the keyspace or the function libraries: callers hand it
//! a value or a body and take bytes or a `types::Value` back.

use super::codec::crc64;
use super::value::{self, Limits};
use crate::db::ValueRef;
use crate::types::Value;

/// The version a payload carries; newer ones are refused.
pub const VERSION: u16 = super::file::VERSION as u16;

/// Redis's reply to a payload whose footer does not hold.
pub const BAD_FOOTER: &str = "DUMP payload version or checksum are wrong";

/// Appends the version and the checksum to `body`.
pub fn seal(mut body: Vec<u8>) -> Vec<u8> {
    body.extend_from_slice(&VERSION.to_le_bytes());
    let crc = crc64(0, &body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

/// Whether `p` ends in a footer of a version this server reads and a
/// matching checksum. Readers then parse `p` from the start; as Redis's
/// reader over the whole buffer, they may run into the footer.
pub fn verify(p: &[u8]) -> bool {
    if p.len() < 10 {
        return false;
    }
    let footer = &p[p.len() - 10..];
    if u16::from_le_bytes([footer[0], footer[1]]) > VERSION {
        return false;
    }
    crc64(0, &p[..p.len() - 8]).to_le_bytes() == footer[2..]
}

/// DUMP's payload of one value.
pub fn dump(v: ValueRef<'_>, compress: bool, list_fill: i64) -> Vec<u8> {
    let mut body = Vec::new();
    value::save(&mut body, v, compress, list_fill);
    seal(body)
}

/// Why a RESTORE payload was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum RestoreError {
    /// The footer: Redis's BAD_FOOTER.
    Footer,
    /// The body: Redis's "Bad data format".
    Format,
}

/// The value in a DUMP payload. An empty collection is a bad format, as
/// in Redis (such a value cannot live at a key).
pub fn restore(p: &[u8], lim: &Limits) -> Result<Value, RestoreError> {
    if !verify(p) {
        return Err(RestoreError::Footer);
    }
    let t = p[0];
    if !value::is_value_type(t) {
        return Err(RestoreError::Format);
    }
    let mut pos = 1;
    match value::load(p, &mut pos, t, lim) {
        Ok(v) if !v.is_empty_collection() => Ok(v),
        _ => Err(RestoreError::Format),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_payload_of_a_short_string() {
        let lim = Limits::default();
        let err = |p: &[u8]| restore(p, &lim).err();
        // redis-server 7.0.15: SET foo bar; DUMP foo.
        let want = b"\x00\x03bar\x0a\x00\xe6\xbe\x49\x60\xee\x66\xfd\x17";
        assert_eq!(dump(ValueRef::Str(b"bar"), true, -2), want);
        assert!(matches!(restore(want, &lim), Ok(Value::Str(s)) if s == b"bar"));
        let mut bad = want.to_vec();
        bad[2] ^= 1;
        assert_eq!(err(&bad), Some(RestoreError::Footer));
        assert_eq!(err(b"abc"), Some(RestoreError::Footer));
        // A newer version is refused even with a right checksum.
        let mut newer = b"\x00\x03bar".to_vec();
        newer.extend_from_slice(&11u16.to_le_bytes());
        let crc = crc64(0, &newer);
        newer.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(err(&newer), Some(RestoreError::Footer));
        // A sealed body that is not a value.
        assert_eq!(err(&seal(vec![0xf5, 1, b'x'])), Some(RestoreError::Format));
        // An empty list.
        assert_eq!(err(&seal(vec![1, 0])), Some(RestoreError::Format));
    }
}
