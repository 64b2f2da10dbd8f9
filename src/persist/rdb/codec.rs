//! RDB's building blocks, as Redis 7.0 writes them: lengths, strings
//! (integer-encoded, LZF-compressed or raw), Redis's CRC64; liblzf is
//! `types::lzf`'s.
//! Shared by FUNCTION DUMP/RESTORE, DUMP/RESTORE and the RDB file.
//!
//! A leaf of the format: must not know values, databases or files (it knows
//! `util::parse_i64` only); `value`, `file` and `payload` build on it.

/// Redis's crc64 (Jones polynomial, reflected, no final xor), eight bytes
/// a step (slicing-by-8, as Redis's crcspeed): `crc` carries on from an
/// earlier call, so a stream can be summed in pieces.
pub fn crc64(mut crc: u64, data: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
    static TABLES: std::sync::OnceLock<Box<[[u64; 256]; 8]>> = std::sync::OnceLock::new();
    let t = TABLES.get_or_init(|| {
        let mut t = Box::new([[0u64; 256]; 8]);
        for i in 0..256 {
            let mut c = i as u64;
            for _ in 0..8 {
                c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            }
            t[0][i] = c;
        }
        for i in 0..256 {
            for k in 1..8 {
                let prev = t[k - 1][i];
                t[k][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            }
        }
        t
    });
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let v = crc ^ u64::from_le_bytes(c.try_into().expect("8 bytes"));
        crc = t[7][(v & 0xff) as usize]
            ^ t[6][((v >> 8) & 0xff) as usize]
            ^ t[5][((v >> 16) & 0xff) as usize]
            ^ t[4][((v >> 24) & 0xff) as usize]
            ^ t[3][((v >> 32) & 0xff) as usize]
            ^ t[2][((v >> 40) & 0xff) as usize]
            ^ t[1][((v >> 48) & 0xff) as usize]
            ^ t[0][(v >> 56) as usize];
    }
    for &b in chunks.remainder() {
        crc = t[0][((crc ^ b as u64) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

pub use crate::types::lzf::{lzf_compress, lzf_decompress};

// ---------------------------------------------------------------------------
// RDB strings.

pub fn save_len(out: &mut Vec<u8>, len: usize) {
    if len < 1 << 6 {
        out.push(len as u8);
    } else if len < 1 << 14 {
        out.push(0x40 | (len >> 8) as u8);
        out.push(len as u8);
    } else if len <= u32::MAX as usize {
        out.push(0x80);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
}

pub fn save_string(out: &mut Vec<u8>, s: &[u8]) {
    save_string_with(out, s, true);
}

/// Redis's rdbSaveRawString: a short decimal integer in its integer
/// encoding (8, 16 or 32 bits), else LZF when `compress`
/// (`rdbcompression`), the string is over 20 bytes and shrinks by more
/// than 4, else raw.
pub fn save_string_with(out: &mut Vec<u8>, s: &[u8], compress: bool) {
    if s.len() <= 11 {
        if let Some(v) =
            crate::util::parse_i64(s).filter(|v| itoa::Buffer::new().format(*v).as_bytes() == s)
        {
            if let Ok(b) = i8::try_from(v) {
                out.extend_from_slice(&[0xc0, b as u8]);
                return;
            }
            if let Ok(b) = i16::try_from(v) {
                out.push(0xc1);
                out.extend_from_slice(&b.to_le_bytes());
                return;
            }
            if let Ok(b) = i32::try_from(v) {
                out.push(0xc2);
                out.extend_from_slice(&b.to_le_bytes());
                return;
            }
        }
    }
    if compress && s.len() > 20 {
        if let Some(c) = lzf_compress(s, s.len() - 4) {
            save_lzf(out, &c, s.len());
            return;
        }
    }
    save_len(out, s.len());
    out.extend_from_slice(s);
}

/// Redis's rdbSaveLzfBlob: an LZF-encoded string of `orig_len` bytes
/// compressed to `c`.
pub fn save_lzf(out: &mut Vec<u8>, c: &[u8], orig_len: usize) {
    out.push(0xc3);
    save_len(out, c.len());
    save_len(out, orig_len);
    out.extend_from_slice(c);
}

/// A little-endian signed integer of 1 to 8 bytes, sign-extended (the
/// integers of RDB strings, listpacks, ziplists and intsets).
pub use crate::types::listpack::le_int;

/// A length, or (true, encoding) for an encoded string.
pub fn load_len(p: &[u8], pos: &mut usize) -> Option<(bool, u64)> {
    let b = *p.get(*pos)?;
    *pos += 1;
    match b >> 6 {
        0 => Some((false, (b & 0x3f) as u64)),
        1 => {
            let b2 = *p.get(*pos)?;
            *pos += 1;
            Some((false, (((b & 0x3f) as u64) << 8) | b2 as u64))
        }
        3 => Some((true, (b & 0x3f) as u64)),
        _ if b == 0x80 => {
            let v = p.get(*pos..*pos + 4)?;
            *pos += 4;
            Some((false, u32::from_be_bytes(v.try_into().ok()?) as u64))
        }
        _ if b == 0x81 => {
            let v = p.get(*pos..*pos + 8)?;
            *pos += 8;
            Some((false, u64::from_be_bytes(v.try_into().ok()?)))
        }
        _ => None,
    }
}

pub fn load_string(p: &[u8], pos: &mut usize) -> Option<Vec<u8>> {
    load_string_ref(p, pos).map(std::borrow::Cow::into_owned)
}

/// `load_string`, borrowing a raw string from `p` instead of copying it.
pub fn load_string_ref<'a>(p: &'a [u8], pos: &mut usize) -> Option<std::borrow::Cow<'a, [u8]>> {
    let (enc, n) = load_len(p, pos)?;
    if !enc {
        let n = usize::try_from(n).ok()?;
        let s = p.get(*pos..pos.checked_add(n)?)?;
        *pos += n;
        return Some(std::borrow::Cow::Borrowed(s));
    }
    load_encoded(p, pos, n).map(std::borrow::Cow::Owned)
}

fn load_encoded(p: &[u8], pos: &mut usize, n: u64) -> Option<Vec<u8>> {
    let int = |bytes: &[u8]| -> Vec<u8> { le_int(bytes).to_string().into_bytes() };
    let width = match n {
        0 => 1,
        1 => 2,
        2 => 4,
        3 => {
            let (_, clen) = load_len(p, pos)?;
            let (_, len) = load_len(p, pos)?;
            let clen = usize::try_from(clen).ok()?;
            let c = p.get(*pos..pos.checked_add(clen)?)?;
            *pos += clen;
            return lzf_decompress(c, usize::try_from(len).ok()?);
        }
        _ => return None,
    };
    let v = p.get(*pos..*pos + width)?;
    *pos += width;
    Some(int(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_check_value() {
        // Redis's crc64 test: crc64(0, "123456789") = e9c6d914c4b8d9ca.
        assert_eq!(crc64(0, b"123456789"), 0xe9c6_d914_c4b8_d9ca);
        // Eight at a time equals one at a time, in any split.
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7919 % 251) as u8).collect();
        let mut one = 0u64;
        for b in &data {
            one = crc64(one, std::slice::from_ref(b));
        }
        assert_eq!(crc64(0, &data), one);
        let (a, b) = data.split_at(333);
        assert_eq!(crc64(crc64(0, a), b), one);
    }
}
