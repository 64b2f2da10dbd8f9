//! HyperLogLog in Redis's own string layout (Redis 7.0's hyperloglog.c),
//! byte for byte: an HLL is a plain string value, so `GET` of a key built
//! by PFADD returns exactly what Redis returns, and a string produced by
//! Redis and `SET` here is a valid HLL. This module only knows the bytes;
//! the commands live in `commands::hyperloglog`.
//!
//! # Layout
//! A 16-byte header: `"HYLL"`, the encoding byte (0 dense, 1 sparse), three
//! unused bytes, then the cached cardinality as 8 little-endian bytes whose
//! most significant bit set means "stale" (invalidation only sets that bit,
//! the other bytes keep the old count, as in Redis). Then the registers:
//! - **dense**: 16384 6-bit registers packed little-endian (register `i` is
//!   bits `6i..6i+6` of the register area), 12288 bytes, 12304 in all.
//! - **sparse**: run-length opcodes. `00xxxxxx` ZERO: `x+1` (1..64) zero
//!   registers; `01xxxxxx yyyyyyyy` XZERO: 14-bit `x:y` + 1 (1..16384) zero
//!   registers; `1vvvvvxx` VAL: `x+1` (1..4) registers of value `v+1`
//!   (1..32). A new HLL is one XZERO covering all 16384 registers.
//!
//! # Hash and estimator
//! An element's register is the low 14 bits of MurmurHash64A (seed
//! 0xadc83b19); its value is the position of the first set bit in the other
//! 50 (1..51). The count is Redis 5+'s estimator (Ertl's "new" estimator:
//! a register histogram through `tau` and `sigma`), computed in the same
//! order of f64 operations, so the numbers are Redis's.
//!
//! # Sparse updates
//! [`set_register`] edits a sparse HLL in place exactly as Redis's
//! hllSparseSet: locate the opcode, split it into at most three, merge
//! adjacent equal VALs in a short window. It promotes to dense when the
//! value exceeds 32 or the string would grow past `sparse_max_bytes`
//! (`hll-sparse-max-bytes`). Corrupt inputs are handled as Redis handles
//! them (the same checks in the same places), never by panicking.
//!
//! # Cost
//! Dense add O(1); sparse add O(sparse length) (bounded by
//! `hll-sparse-max-bytes`); count O(16384) on a stale cache; merge O(16384).

/// Header bytes before the registers.
pub const HDR_SIZE: usize = 16;
/// Index bits.
pub const P: u32 = 14;
/// Bits of the hash left for the run of zeros.
pub const Q: usize = 64 - P as usize;
pub const REGISTERS: usize = 1 << P;
const P_MASK: u64 = REGISTERS as u64 - 1;
const BITS: usize = 6;
pub const REGISTER_MAX: u8 = (1 << BITS) - 1;
/// Size of a dense HLL string.
pub const DENSE_SIZE: usize = HDR_SIZE + (REGISTERS * BITS).div_ceil(8);
pub const DENSE: u8 = 0;
pub const SPARSE: u8 = 1;
/// Largest register value a sparse VAL opcode holds.
pub const SPARSE_VAL_MAX_VALUE: u8 = 32;
const SPARSE_VAL_MAX_LEN: usize = 4;
const SPARSE_ZERO_MAX_LEN: usize = 64;
const SPARSE_XZERO_MAX_LEN: usize = 16384;
/// 0.5 / ln(2).
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;
const SEED: u32 = 0xadc8_3b19;

/// The HLL's registers do not add up to 16384 (or the sparse opcodes run
/// out before the register looked for): Redis's "Corrupted HLL object".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt;

/// Whether `s` passes Redis's isHLLObjectOrReply: at least a header, the
/// magic, a known encoding, and exactly 12304 bytes when dense. (The sparse
/// opcodes are checked only when read.)
pub fn is_valid(s: &[u8]) -> bool {
    s.len() >= HDR_SIZE
        && &s[..4] == b"HYLL"
        && s[4] <= SPARSE
        && (s[4] != DENSE || s.len() == DENSE_SIZE)
}

/// Whether a valid HLL is dense.
pub fn is_dense(s: &[u8]) -> bool {
    s[4] == DENSE
}

/// A new, empty HLL: sparse, one XZERO opcode, cached cardinality 0.
pub fn new_sparse() -> Vec<u8> {
    let mut v = Vec::with_capacity(HDR_SIZE + 2);
    v.extend_from_slice(b"HYLL");
    v.push(SPARSE);
    v.resize(HDR_SIZE, 0);
    let mut left = REGISTERS;
    while left > 0 {
        let n = left.min(SPARSE_XZERO_MAX_LEN);
        v.extend_from_slice(&xzero(n));
        left -= n;
    }
    v
}

/// The cached cardinality, None when stale.
pub fn cached_card(s: &[u8]) -> Option<u64> {
    let b: [u8; 8] = s[8..16].try_into().ok()?;
    (b[7] & 0x80 == 0).then(|| u64::from_le_bytes(b))
}

/// Stores `card` as the cached cardinality (valid unless its top bit is set).
pub fn set_cached_card(s: &mut [u8], card: u64) {
    s[8..16].copy_from_slice(&card.to_le_bytes());
}

/// Marks the cached cardinality stale (only the top bit changes).
pub fn invalidate_cache(s: &mut [u8]) {
    s[15] |= 0x80;
}

/// Austin Appleby's MurmurHash64A as Redis uses it (little-endian reads).
pub fn murmur64a(key: &[u8], seed: u32) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed as u64 ^ (key.len() as u64).wrapping_mul(M);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let mut k = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate() {
            h ^= (b as u64) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// An element's register index and value (Redis's hllPatLen): the low 14
/// bits of the hash pick the register, the value is 1 + the number of
/// zeros before the first set bit of the other 50 (1..=51).
pub fn pat_len(ele: &[u8]) -> (usize, u8) {
    let hash = murmur64a(ele, SEED);
    let index = (hash & P_MASK) as usize;
    let rest = (hash >> P) | (1u64 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

// ---------------------------------------------------------------------------
// Dense registers

/// Register `i` of a dense register area (reads past the end as zero, as
/// Redis reads the string's terminator for the last register).
#[inline]
pub fn dense_get(regs: &[u8], i: usize) -> u8 {
    let byte = i * BITS / 8;
    let fb = (i * BITS) & 7;
    let b0 = regs.get(byte).copied().unwrap_or(0) as u32;
    let b1 = regs.get(byte + 1).copied().unwrap_or(0) as u32;
    (((b0 >> fb) | (b1 << (8 - fb))) & REGISTER_MAX as u32) as u8
}

/// Sets register `i` of a dense register area to `v` (<= 63).
#[inline]
pub fn dense_set(regs: &mut [u8], i: usize, v: u8) {
    let byte = i * BITS / 8;
    let fb = (i * BITS) & 7;
    let v = v as u32;
    let max = REGISTER_MAX as u32;
    if let Some(b) = regs.get_mut(byte) {
        *b &= !(max << fb) as u8;
        *b |= (v << fb) as u8;
    }
    if let Some(b) = regs.get_mut(byte + 1) {
        *b &= !(max >> (8 - fb)) as u8;
        *b |= (v >> (8 - fb)) as u8;
    }
}

/// Raises dense register `i` to `v`; whether it changed.
fn dense_raise(regs: &mut [u8], i: usize, v: u8) -> bool {
    if v > dense_get(regs, i) {
        dense_set(regs, i, v);
        true
    } else {
        false
    }
}

/// Adds each register's value to `histo` (4 registers per 3 bytes).
fn dense_histo(regs: &[u8], histo: &mut [u64; 64]) {
    for c in regs.chunks_exact(3) {
        let (b0, b1, b2) = (c[0] as usize, c[1] as usize, c[2] as usize);
        histo[b0 & 63] += 1;
        histo[((b0 >> 6) | (b1 << 2)) & 63] += 1;
        histo[((b1 >> 4) | (b2 << 4)) & 63] += 1;
        histo[b2 >> 2] += 1;
    }
}

// ---------------------------------------------------------------------------
// Sparse opcodes

#[inline]
fn is_zero(b: u8) -> bool {
    b & 0xc0 == 0
}
#[inline]
fn is_xzero(b: u8) -> bool {
    b & 0xc0 == 0x40
}
#[inline]
fn zero_len(b: u8) -> usize {
    (b & 0x3f) as usize + 1
}
#[inline]
fn xzero_len(b0: u8, b1: u8) -> usize {
    (((b0 & 0x3f) as usize) << 8 | b1 as usize) + 1
}
#[inline]
fn val_value(b: u8) -> u8 {
    ((b >> 2) & 0x1f) + 1
}
#[inline]
fn val_len(b: u8) -> usize {
    (b & 3) as usize + 1
}
#[inline]
fn val(v: u8, len: usize) -> u8 {
    (((v as usize - 1) << 2) | (len - 1)) as u8 | 0x80
}
#[inline]
fn xzero(len: usize) -> [u8; 2] {
    let l = len - 1;
    [((l >> 8) | 0x40) as u8, l as u8]
}

/// One decoded sparse opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Zero(usize),
    XZero(usize),
    /// (value, run length)
    Val(u8, usize),
}

/// The opcodes of a sparse HLL's register area, in order. A truncated
/// final XZERO reads its missing byte as 0 (Redis reads the terminator).
pub fn sparse_ops(sparse: &[u8]) -> impl Iterator<Item = Op> + '_ {
    let mut p = 0;
    std::iter::from_fn(move || {
        let b = *sparse.get(p)?;
        Some(if is_zero(b) {
            p += 1;
            Op::Zero(zero_len(b))
        } else if is_xzero(b) {
            let b1 = sparse.get(p + 1).copied().unwrap_or(0);
            p += 2;
            Op::XZero(xzero_len(b, b1))
        } else {
            p += 1;
            Op::Val(val_value(b), val_len(b))
        })
    })
}

/// Redis's sparse register histogram; Corrupt when the runs do not cover
/// exactly 16384 registers.
fn sparse_histo(sparse: &[u8], histo: &mut [u64; 64]) -> Result<(), Corrupt> {
    let mut idx = 0usize;
    for op in sparse_ops(sparse) {
        match op {
            Op::Zero(n) | Op::XZero(n) => {
                idx += n;
                histo[0] += n as u64;
            }
            Op::Val(v, n) => {
                idx += n;
                histo[v as usize] += n as u64;
            }
        }
    }
    if idx == REGISTERS {
        Ok(())
    } else {
        Err(Corrupt)
    }
}

/// Converts a sparse HLL to dense in place (header, cached cardinality
/// included, kept; encoding byte set to dense). A dense one is left alone.
pub fn sparse_to_dense(s: &mut Vec<u8>) -> Result<(), Corrupt> {
    if is_dense(s) {
        return Ok(());
    }
    let mut d = vec![0u8; DENSE_SIZE];
    d[..HDR_SIZE].copy_from_slice(&s[..HDR_SIZE]);
    d[4] = DENSE;
    let regs = &mut d[HDR_SIZE..];
    let mut idx = 0usize;
    for op in sparse_ops(&s[HDR_SIZE..]) {
        match op {
            Op::Zero(n) | Op::XZero(n) => idx += n,
            Op::Val(v, n) => {
                // A run past the last register is corrupt, even from 16384.
                if idx + n > REGISTERS {
                    return Err(Corrupt);
                }
                for _ in 0..n {
                    dense_set(regs, idx, v);
                    idx += 1;
                }
            }
        }
    }
    if idx != REGISTERS {
        return Err(Corrupt);
    }
    *s = d;
    Ok(())
}

/// Raises register `index` (< 16384) of the valid HLL `s` to `count`
/// (1..=63): Redis's hllDenseSet / hllSparseSet, promoting a sparse HLL to
/// dense when needed. Whether the register changed. Does not touch the
/// cached cardinality except through a promotion, which keeps the header.
pub fn set_register(
    s: &mut Vec<u8>,
    index: usize,
    count: u8,
    sparse_max_bytes: usize,
) -> Result<bool, Corrupt> {
    if is_dense(s) {
        Ok(dense_raise(&mut s[HDR_SIZE..], index, count))
    } else {
        sparse_set(s, index, count, sparse_max_bytes)
    }
}

/// Adds one element (Redis's hllAdd); whether a register changed.
pub fn add(s: &mut Vec<u8>, ele: &[u8], sparse_max_bytes: usize) -> Result<bool, Corrupt> {
    let (index, count) = pat_len(ele);
    set_register(s, index, count, sparse_max_bytes)
}

fn promote(s: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, Corrupt> {
    sparse_to_dense(s)?;
    dense_raise(&mut s[HDR_SIZE..], index, count);
    Ok(true)
}

fn sparse_set(s: &mut Vec<u8>, index: usize, count: u8, max_bytes: usize) -> Result<bool, Corrupt> {
    if count > SPARSE_VAL_MAX_VALUE {
        return promote(s, index, count);
    }
    let at = |s: &[u8], i: usize| s.get(i).copied().unwrap_or(0);
    // Step 1: the opcode covering `index`, the one before it, its first register.
    let end = s.len();
    let mut p = HDR_SIZE;
    let mut first = 0usize;
    let mut prev = None;
    let mut span = 0usize;
    while p < end {
        let b = s[p];
        let oplen;
        if is_zero(b) {
            span = zero_len(b);
            oplen = 1;
        } else if !is_xzero(b) {
            span = val_len(b);
            oplen = 1;
        } else {
            span = xzero_len(b, at(s, p + 1));
            oplen = 2;
        }
        if index < first + span {
            break;
        }
        prev = Some(p);
        p += oplen;
        first += span;
    }
    if span == 0 || p >= end {
        return Err(Corrupt);
    }
    let b = s[p];
    let oldlen = if is_xzero(b) { 2 } else { 1 };
    let has_next = p + oldlen < end;
    let runlen = span;

    // Step 2: trivial in-place cases, else the split sequence.
    let in_place = if !is_zero(b) && !is_xzero(b) {
        if val_value(b) >= count {
            return Ok(false);
        }
        runlen == 1
    } else {
        is_zero(b) && runlen == 1
    };
    if in_place {
        s[p] = val(count, 1);
    } else {
        let mut seq = [0u8; 5];
        let mut n = 0;
        let last = first + span - 1;
        let zeros = |seq: &mut [u8; 5], n: &mut usize, len: usize| {
            if len > SPARSE_ZERO_MAX_LEN {
                seq[*n..*n + 2].copy_from_slice(&xzero(len));
                *n += 2;
            } else {
                seq[*n] = (len - 1) as u8;
                *n += 1;
            }
        };
        if is_zero(b) || is_xzero(b) {
            if index != first {
                zeros(&mut seq, &mut n, index - first);
            }
            seq[n] = val(count, 1);
            n += 1;
            if index != last {
                zeros(&mut seq, &mut n, last - index);
            }
        } else {
            let cur = val_value(b);
            if index != first {
                seq[n] = val(cur, index - first);
                n += 1;
            }
            seq[n] = val(count, 1);
            n += 1;
            if index != last {
                seq[n] = val(cur, last - index);
                n += 1;
            }
        }
        // Step 3: replace the old opcode, unless that grows it too much.
        let new_len = end + n - oldlen;
        if n > oldlen && new_len > max_bytes {
            return promote(s, index, count);
        }
        if has_next {
            s.splice(p..p + oldlen, seq[..n].iter().copied());
        } else {
            s.truncate(p);
            s.extend_from_slice(&seq[..n]);
            s.truncate(new_len);
        }
    }

    // Step 4: merge adjacent equal VALs, up to 5 opcodes from `prev`.
    let mut end = s.len();
    let mut p = prev.unwrap_or(HDR_SIZE);
    let mut scan = 5;
    while p < end && scan > 0 {
        scan -= 1;
        let b = s[p];
        if is_xzero(b) {
            p += 2;
            continue;
        }
        if is_zero(b) {
            p += 1;
            continue;
        }
        if p + 1 < end && !is_zero(s[p + 1]) && !is_xzero(s[p + 1]) {
            let v1 = val_value(b);
            if v1 == val_value(s[p + 1]) {
                let len = val_len(b) + val_len(s[p + 1]);
                if len <= SPARSE_VAL_MAX_LEN {
                    s[p + 1] = val(v1, len);
                    s.remove(p);
                    end -= 1;
                    continue;
                }
            }
        }
        p += 1;
    }
    invalidate_cache(s);
    Ok(true)
}

// ---------------------------------------------------------------------------
// Counting and merging

/// Raises `max[i]` to each register of the valid HLL `s` (Redis's
/// hllMerge); Corrupt when a sparse HLL does not cover 16384 registers.
pub fn merge_into(max: &mut [u8; REGISTERS], s: &[u8]) -> Result<(), Corrupt> {
    let regs = &s[HDR_SIZE..];
    if is_dense(s) {
        for (i, m) in max.iter_mut().enumerate() {
            let v = dense_get(regs, i);
            if v > *m {
                *m = v;
            }
        }
        return Ok(());
    }
    let mut i = 0usize;
    for op in sparse_ops(regs) {
        match op {
            Op::Zero(n) | Op::XZero(n) => i += n,
            Op::Val(v, n) => {
                if i + n > REGISTERS {
                    return Err(Corrupt);
                }
                for m in &mut max[i..i + n] {
                    if v > *m {
                        *m = v;
                    }
                }
                i += n;
            }
        }
    }
    if i == REGISTERS {
        Ok(())
    } else {
        Err(Corrupt)
    }
}

/// The estimated cardinality of the valid HLL `s` (ignores the cache).
pub fn count(s: &[u8]) -> Result<u64, Corrupt> {
    let mut histo = [0u64; 64];
    if is_dense(s) {
        dense_histo(&s[HDR_SIZE..], &mut histo);
    } else {
        sparse_histo(&s[HDR_SIZE..], &mut histo)?;
    }
    Ok(estimate(&histo))
}

/// The estimated cardinality of one register per byte (a merge result).
pub fn count_raw(max: &[u8; REGISTERS]) -> u64 {
    let mut histo = [0u64; 64];
    for &r in max.iter() {
        histo[(r & 63) as usize] += 1;
    }
    estimate(&histo)
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let prev = z;
        z += x * y;
        y += y;
        if prev == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let prev = z;
        y *= 0.5;
        let d = 1.0 - x;
        z -= d * d * y;
        if prev == z {
            return z / 3.0;
        }
    }
}

/// Ertl's estimator over a register histogram, with Redis's arithmetic:
/// the f64 result goes through C's llround (LLONG_MIN when out of range)
/// and back to a double, then to uint64 as gcc converts it on x86-64.
pub fn estimate(histo: &[u64; 64]) -> u64 {
    let m = REGISTERS as f64;
    let mut z = m * tau((m - histo[Q + 1] as f64) / m);
    for j in (1..=Q).rev() {
        z += histo[j] as f64;
        z *= 0.5;
    }
    z += m * sigma(histo[0] as f64 / m);
    let e = ALPHA_INF * m * m / z;
    let e = if e.is_nan() || !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&e) {
        i64::MIN
    } else {
        e.round() as i64
    } as f64;
    const TWO63: f64 = 9_223_372_036_854_775_808.0;
    if e < TWO63 {
        e as i64 as u64
    } else {
        ((e - TWO63) as i64 as u64) ^ (1 << 63)
    }
}

/// PFDEBUG DECODE's text for a sparse register area: `z:N`, `Z:N`, `v:V,N`
/// separated by spaces.
pub fn decode(sparse: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for op in sparse_ops(sparse) {
        let _ = match op {
            Op::Zero(n) => write!(out, "z:{n} "),
            Op::XZero(n) => write!(out, "Z:{n} "),
            Op::Val(v, n) => write!(out, "v:{v},{n} "),
        };
    }
    out.truncate(out.trim_end_matches(' ').len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn murmur64a_vectors() {
        assert_eq!(murmur64a(b"", 0), 0);
        assert_eq!(murmur64a(b"zhenhao", 0x1234), 0xe232aca990972561);
        assert_eq!(murmur64a(b"hash me", 22), 15828218858260124487);
        assert_eq!(murmur64a(b"hash me", 330), 11490980199443804233);
        assert_eq!(murmur64a(b"fransisco", 1), 0x083fdaf4a6d0d3d9);
        assert_eq!(murmur64a(b"aaaa", 0x9747b28c), 0x41da53fdabaf04c8);
    }

    #[test]
    fn new_hll_is_one_xzero() {
        let h = new_sparse();
        assert_eq!(h, hex("48594c4c0100000000000000000000007fff"));
        assert!(is_valid(&h));
        assert_eq!(cached_card(&h), Some(0));
        assert_eq!(count(&h), Ok(0));
        assert_eq!(decode(&h[HDR_SIZE..]), "Z:16384");
    }

    #[test]
    fn validity_checks() {
        let mut h = new_sparse();
        assert!(!is_valid(&h[..15]));
        h[4] = 2;
        assert!(!is_valid(&h));
        h[4] = DENSE;
        assert!(!is_valid(&h));
        let mut d = new_sparse();
        sparse_to_dense(&mut d).unwrap();
        assert_eq!(d.len(), DENSE_SIZE);
        assert!(is_valid(&d));
        assert!(!is_valid(b"HYLX\x01\0\0\0\0\0\0\0\0\0\0\0\x7f\xff"));
    }

    #[test]
    fn register_packing_matches_redis_macros() {
        let mut regs = vec![0u8; (REGISTERS * BITS).div_ceil(8)];
        for i in 0..REGISTERS {
            dense_set(&mut regs, i, (i % 64) as u8);
        }
        for i in 0..REGISTERS {
            assert_eq!(dense_get(&regs, i), (i % 64) as u8);
        }
        // Register 0 is the low 6 bits of byte 0, register 1 starts at bit 6.
        let mut r = vec![0u8; 4];
        dense_set(&mut r, 0, 0x3f);
        assert_eq!(r, [0x3f, 0, 0, 0]);
        dense_set(&mut r, 1, 0x3f);
        assert_eq!(r, [0xff, 0x0f, 0, 0]);
        dense_set(&mut r, 2, 0x01);
        assert_eq!(r, [0xff, 0x1f, 0, 0]);
        dense_set(&mut r, 3, 0x20);
        assert_eq!(r, [0xff, 0x1f, 0x80, 0]);
        dense_set(&mut r, 1, 0);
        assert_eq!(r, [0x3f, 0x10, 0x80, 0]);
        // The histogram reads the same registers.
        let mut histo = [0u64; 64];
        dense_histo(&regs, &mut histo);
        assert!(histo.iter().all(|&n| n == (REGISTERS / 64) as u64));
    }

    #[test]
    fn pat_len_matches_redis() {
        // (register, value) as Redis 7.0's PFDEBUG DECODE shows them.
        for (e, idx, cnt) in [
            ("a", 12711, 2u8),
            ("b", 15780, 1),
            ("c", 8436, 1),
            ("foo", 7348, 5),
            ("hello", 9216, 1),
        ] {
            assert_eq!(pat_len(e.as_bytes()), (idx, cnt), "{e}");
        }
    }

    #[test]
    fn sparse_set_splits_and_merges() {
        let mut h = new_sparse();
        assert_eq!(set_register(&mut h, 100, 3, 3000), Ok(true));
        assert_eq!(decode(&h[HDR_SIZE..]), "Z:100 v:3,1 Z:16283");
        assert_eq!(set_register(&mut h, 100, 2, 3000), Ok(false));
        assert_eq!(set_register(&mut h, 101, 3, 3000), Ok(true));
        assert_eq!(decode(&h[HDR_SIZE..]), "Z:100 v:3,2 Z:16282");
        assert_eq!(set_register(&mut h, 0, 1, 3000), Ok(true));
        assert_eq!(decode(&h[HDR_SIZE..]), "v:1,1 Z:99 v:3,2 Z:16282");
        assert_eq!(set_register(&mut h, 103, 3, 3000), Ok(true));
        assert_eq!(decode(&h[HDR_SIZE..]), "v:1,1 Z:99 v:3,2 z:1 v:3,1 Z:16280");
        assert_eq!(set_register(&mut h, 102, 3, 3000), Ok(true));
        assert_eq!(decode(&h[HDR_SIZE..]), "v:1,1 Z:99 v:3,4 Z:16280");
        assert_eq!(set_register(&mut h, 16383, 32, 3000), Ok(true));
        assert_eq!(decode(&h[HDR_SIZE..]), "v:1,1 Z:99 v:3,4 Z:16279 v:32,1");
        assert_eq!(set_register(&mut h, 5, 4, 3000), Ok(true));
        assert_eq!(
            decode(&h[HDR_SIZE..]),
            "v:1,1 z:4 v:4,1 Z:94 v:3,4 Z:16279 v:32,1"
        );
        // Stale cache after a change.
        assert_eq!(cached_card(&h), None);
        let mut max = [0u8; REGISTERS];
        merge_into(&mut max, &h).unwrap();
        assert_eq!(
            (max[0], max[5], max[100], max[103], max[16383]),
            (1, 4, 3, 3, 32)
        );
        assert_eq!(max.iter().filter(|&&v| v > 0).count(), 7);
    }

    #[test]
    fn promotes_on_big_value_and_on_size() {
        let mut h = new_sparse();
        set_register(&mut h, 10, 5, 3000).unwrap();
        assert_eq!(set_register(&mut h, 20, 33, 3000), Ok(true));
        assert!(is_dense(&h));
        assert_eq!(h.len(), DENSE_SIZE);
        assert_eq!(dense_get(&h[HDR_SIZE..], 10), 5);
        assert_eq!(dense_get(&h[HDR_SIZE..], 20), 33);
        let mut h = new_sparse();
        // 18 bytes; splitting the XZERO grows it past 19.
        assert_eq!(set_register(&mut h, 10, 5, 19), Ok(true));
        assert!(is_dense(&h));
        assert_eq!(dense_get(&h[HDR_SIZE..], 10), 5);
    }

    #[test]
    fn corrupt_sparse_is_detected() {
        let mut h = new_sparse();
        h.truncate(HDR_SIZE);
        assert_eq!(set_register(&mut h, 0, 1, 3000), Err(Corrupt));
        assert_eq!(count(&h), Err(Corrupt));
        let mut h = new_sparse();
        h.push(0x00); // one register too many
        assert_eq!(count(&h), Err(Corrupt));
        let mut max = [0u8; REGISTERS];
        assert_eq!(merge_into(&mut max, &h), Err(Corrupt));
        assert_eq!(sparse_to_dense(&mut h), Err(Corrupt));
        // A VAL run past the end is corrupt even when it starts at 16384.
        let mut h = new_sparse();
        h.push(0x80);
        assert_eq!(merge_into(&mut max, &h), Err(Corrupt));
        assert_eq!(sparse_to_dense(&mut h), Err(Corrupt));
        // A truncated XZERO reads its second byte as 0.
        assert_eq!(decode(&[0x7f]), "Z:16129");
    }

    #[test]
    fn estimator_matches_redis() {
        let mut h = new_sparse();
        for i in 0..1000 {
            add(&mut h, format!("e{i}").as_bytes(), 3000).unwrap();
        }
        let c = count(&h).unwrap();
        let mut max = [0u8; REGISTERS];
        merge_into(&mut max, &h).unwrap();
        assert_eq!(count_raw(&max), c);
        // Redis 7.0.15: PFADD k e0 .. e999, PFCOUNT k -> 1008 (sparse, 1906 bytes).
        assert_eq!(c, 1008);
        assert!(!is_dense(&h));
        assert_eq!(h.len(), 1906);
        // All registers 63: Redis's llround overflow comes out as 2^63.
        let mut all = [0u64; 64];
        all[63] = REGISTERS as u64;
        assert_eq!(estimate(&all), 1 << 63);
        let mut empty = [0u64; 64];
        empty[0] = REGISTERS as u64;
        assert_eq!(estimate(&empty), 0);
    }
}
