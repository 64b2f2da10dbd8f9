//! RDB's building blocks, as Redis 7.0 writes them: lengths, strings
//! (integer-encoded, LZF-compressed or raw), Redis's CRC64 and liblzf.
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

// ---------------------------------------------------------------------------
// LZF (liblzf 3.5 as Redis vendors it: HLOG 16, VERY_FAST, table zeroed).

const HLOG: u32 = 16;
const HSIZE: usize = 1 << HLOG;
const MAX_LIT: usize = 1 << 5;
const MAX_OFF: usize = 1 << 13;
const MAX_REF: usize = (1 << 8) + (1 << 3);

fn idx(h: u32) -> usize {
    ((h >> (3 * 8 - HLOG)).wrapping_sub(h.wrapping_mul(5)) as usize) & (HSIZE - 1)
}

/// One more literal byte; a full run of MAX_LIT is closed.
fn literal(out: &mut [u8], op: &mut usize, lit: &mut usize, byte: u8) {
    *lit += 1;
    out[*op] = byte;
    *op += 1;
    if *lit == MAX_LIT {
        out[*op - *lit - 1] = (*lit - 1) as u8;
        *lit = 0;
        *op += 1;
    }
}

/// lzf_compress into at most `out_len` bytes; None when it does not fit.
pub fn lzf_compress(input: &[u8], out_len: usize) -> Option<Vec<u8>> {
    let in_len = input.len();
    if in_len == 0 {
        return None;
    }
    let mut htab = vec![0usize; HSIZE];
    let mut out = vec![0u8; out_len];
    let (mut ip, mut op, mut lit) = (0usize, 1usize, 0usize);
    let at = |i: usize| input.get(i).copied().unwrap_or(0) as u32;
    let mut hval = (at(0) << 8) | at(1);
    if out_len == 0 {
        return None;
    }
    while in_len >= 2 && ip < in_len - 2 {
        hval = (hval << 8) | at(ip + 2);
        let slot = idx(hval);
        let r = htab[slot];
        htab[slot] = ip;
        let off = ip.wrapping_sub(r).wrapping_sub(1);
        if off < MAX_OFF
            && r > 0
            && input[r + 2] == input[ip + 2]
            && input[r] == input[ip]
            && input[r + 1] == input[ip + 1]
        {
            let mut len = 2usize;
            let maxlen = (in_len - ip - len).min(MAX_REF);
            // Room for the back reference, tested before the run is
            // closed (a full run may have left `op` one past the end).
            if op - (lit == 0) as usize + 3 + 1 >= out_len {
                return None;
            }
            out[op - lit - 1] = (lit as u8).wrapping_sub(1);
            op -= (lit == 0) as usize;
            'm: {
                if maxlen > 16 {
                    for _ in 0..16 {
                        len += 1;
                        if input[r + len] != input[ip + len] {
                            break 'm;
                        }
                    }
                }
                loop {
                    len += 1;
                    if !(len < maxlen && input[r + len] == input[ip + len]) {
                        break;
                    }
                }
            }
            len -= 2;
            ip += 1;
            if len < 7 {
                out[op] = ((off >> 8) + (len << 5)) as u8;
                op += 1;
            } else {
                out[op] = ((off >> 8) + (7 << 5)) as u8;
                out[op + 1] = (len - 7) as u8;
                op += 2;
            }
            out[op] = off as u8;
            op += 1;
            lit = 0;
            op += 1;
            ip += len + 1;
            if ip >= in_len - 2 {
                break;
            }
            ip -= 2;
            hval = (at(ip) << 8) | at(ip + 1);
            hval = (hval << 8) | at(ip + 2);
            htab[idx(hval)] = ip;
            ip += 1;
            hval = (hval << 8) | at(ip + 2);
            htab[idx(hval)] = ip;
            ip += 1;
        } else {
            if op >= out_len {
                return None;
            }
            literal(&mut out, &mut op, &mut lit, input[ip]);
            ip += 1;
        }
    }
    if op + 3 > out_len {
        return None;
    }
    while ip < in_len {
        literal(&mut out, &mut op, &mut lit, input[ip]);
        ip += 1;
    }
    out[op - lit - 1] = (lit as u8).wrapping_sub(1);
    op -= (lit == 0) as usize;
    out.truncate(op);
    Some(out)
}

/// lzf_decompress to exactly `out_len` bytes.
pub fn lzf_decompress(input: &[u8], out_len: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(out_len);
    let mut ip = 0;
    while ip < input.len() {
        let ctrl = input[ip] as usize;
        ip += 1;
        if ctrl < 32 {
            let n = ctrl + 1;
            let lit = input.get(ip..ip + n)?;
            if out.len() + n > out_len {
                return None;
            }
            out.extend_from_slice(lit);
            ip += n;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += *input.get(ip)? as usize;
                ip += 1;
            }
            let back = ((ctrl & 0x1f) << 8) + *input.get(ip)? as usize + 1;
            ip += 1;
            if back > out.len() || out.len() + len + 2 > out_len {
                return None;
            }
            let start = out.len() - back;
            for i in 0..len + 2 {
                out.push(out[start + i]);
            }
        }
    }
    (out.len() == out_len).then_some(out)
}

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
            out.push(0xc3);
            save_len(out, c.len());
            save_len(out, s.len());
            out.extend_from_slice(&c);
            return;
        }
    }
    save_len(out, s.len());
    out.extend_from_slice(s);
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

    #[test]
    fn lzf_round_trip() {
        let data = b"redis.register_function('a', function() return 1 end) redis.register_function('b', function() return 1 end)".repeat(5);
        let c = lzf_compress(&data, data.len() - 4).unwrap();
        assert!(c.len() < data.len());
        assert_eq!(lzf_decompress(&c, data.len()).unwrap(), data);
    }

    #[test]
    fn lzf_round_trip_varied_inputs() {
        // Pseudo-random text over small alphabets: literals, short and
        // long matches, runs past MAX_LIT and MAX_REF.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for alphabet in [2u64, 4, 26, 200] {
            for len in [21usize, 64, 300, 5000] {
                let data: Vec<u8> = (0..len)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        b'a'.wrapping_add((seed % alphabet) as u8)
                    })
                    .collect();
                if let Some(c) = lzf_compress(&data, data.len() - 4) {
                    assert_eq!(lzf_decompress(&c, data.len()).unwrap(), data);
                }
            }
        }
        // A full literal run ending one byte before the output's end, then
        // a match (this listpack of a sorted set once overran the buffer).
        let lp = b"%\x00\x00\x00\x08\x00\x81c\x02\x84-inf\x05\x81a\x02\x01\x01\x81b\x02\x832.5\x04\x81d\x02\x83inf\x04\xff";
        assert_eq!(lzf_compress(lp, lp.len() - 4), None);
        let same = vec![b'z'; 3000];
        let c = lzf_compress(&same, same.len() - 4).unwrap();
        assert_eq!(lzf_decompress(&c, same.len()).unwrap(), same);
    }

    proptest::proptest! {
        /// Any input, any output bound: no panic; what fits round trips.
        #[test]
        fn lzf_never_overruns(
            data in proptest::collection::vec(proptest::sample::select(vec![b'a', b'b', b'c', 0u8, 0xff]), 0..700),
            slack in 0usize..80,
        ) {
            let out_len = (data.len() + 40).saturating_sub(slack);
            if let Some(c) = lzf_compress(&data, out_len) {
                proptest::prop_assert!(c.len() <= out_len);
                proptest::prop_assert_eq!(lzf_decompress(&c, data.len()).unwrap(), data);
            }
        }
    }
}
