//! FUNCTION DUMP / RESTORE payloads as Redis 7.0 writes them: for each
//! library RDB_OPCODE_FUNCTION2 and its code as an RDB string (LZF
//! compressed when longer than 20 bytes and it shrinks, as
//! rdbSaveRawString with `rdbcompression yes`), then the RDB version (2
//! bytes, little endian) and the CRC64 (Jones, reflected, as crc64.c) of
//! everything before it (8 bytes, little endian).
//!
//! Bytes only: must not touch the engine or the libraries (`functions`
//! hands it the codes, FUNCTION RESTORE the payload); the RDB pieces are
//! `crate::persist::rdb`'s.

const OPCODE_FUNCTION_PRE_GA: u8 = 246;
const OPCODE_FUNCTION2: u8 = 245;

use crate::persist::rdb::codec::{load_len, load_string, save_string};
use crate::persist::rdb::payload;

/// The payload of libraries' `codes`.
pub fn encode(codes: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for c in codes {
        out.push(OPCODE_FUNCTION2);
        save_string(&mut out, c);
    }
    payload::seal(out)
}

/// A pre-GA function entry (name, engine, description, code): read to
/// report what Redis reports, never loaded.
fn pre_ga(p: &[u8], pos: &mut usize) -> String {
    if load_string(p, pos).is_none() {
        return "Failed loading library name".into();
    }
    if load_string(p, pos).is_none() {
        return "Failed loading engine name".into();
    }
    let Some((_, has_desc)) = load_len(p, pos) else {
        return "Failed loading library description indicator".into();
    };
    if has_desc != 0 && load_string(p, pos).is_none() {
        return "Failed loading library description".into();
    }
    if load_string(p, pos).is_none() {
        return "Failed loading library blob".into();
    }
    "Pre-GA function format not supported".into()
}

/// The libraries' codes in a payload, or Redis's error text (no ERR).
pub fn decode(p: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    if !payload::verify(p) {
        return Err(payload::BAD_FOOTER.to_string());
    }
    // Reads may run into the footer, as Redis's rio over the whole payload.
    let mut pos = 0;
    let mut codes = Vec::new();
    while p.len() - pos > 10 {
        let t = p[pos];
        pos += 1;
        match t {
            OPCODE_FUNCTION2 => match load_string(p, &mut pos) {
                Some(c) => codes.push(c),
                None => return Err("Failed loading library payload".into()),
            },
            OPCODE_FUNCTION_PRE_GA => return Err(pre_ga(p, &mut pos)),
            _ => return Err("given type is not a function".into()),
        }
    }
    Ok(codes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_round_trip_and_errors() {
        let p = encode(&[b"#!lua name=a\nx", &b"y".repeat(100)]);
        assert_eq!(
            decode(&p).unwrap(),
            vec![b"#!lua name=a\nx".to_vec(), b"y".repeat(100)]
        );
        let mut bad = p.clone();
        bad[3] ^= 1;
        assert!(decode(&bad).is_err());
        assert_eq!(
            encode(&[]),
            [0x0a, 0, 0x5d, 0x9b, 0x5c, 0x40, 0x0f, 0x7f, 0xa2, 0xda]
        );
    }
}
