//! Bitmap commands (Redis's bitops.c): SETBIT, GETBIT, BITCOUNT, BITPOS,
//! BITOP, BITFIELD and BITFIELD_RO, all on plain string values.
//!
//! Bits are numbered from the most significant bit of the first byte.
//! Reads go through `Db::get_str` (Redis's lookupKeyRead: hits/misses are
//! counted); writes check the type with `Db::get_str_write`, then change
//! the string in place through `Db::str_mut` (which makes it "raw", as
//! Redis's dbUnshareStringValue does) and record the change with
//! `Db::touch_modified`. A key a write creates is stored whole with
//! `Db::put`, already in the raw encoding.
//!
//! As in Redis 7.0.15, SETBIT and BITFIELD record a change (`setbit`) only
//! when a bit actually changed or the string was created or grown.
//!
//! Reaches the keyspace only through `Ctx` (the selected `Db`, and the
//! config's `proto-max-bulk-len`). Must not notify anyone itself: the `Db`
//! methods above record every change for the hook.

use bytes::Bytes;

use super::Pushes;
use super::*;
use crate::db::{Owned, OwnedValue};
use crate::types::Value;
use crate::util::parse_i64;

const READ_FAST: &[&str] = &["read", "bitmap", "fast"];
const READ_SLOW: &[&str] = &["read", "bitmap", "slow"];
const WRITE_SLOW: &[&str] = &["write", "bitmap", "slow"];

const WD: u32 = WRITE | DENYOOM;
const RF: u32 = READONLY | FAST;
const ONE: (i32, i32, i32) = (1, 1, 1);

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    spec("setbit", 4, WD, ONE, "bitmap", "2.2.0", "Sets or clears the bit at offset in the string value stored at key", WRITE_SLOW, setbit).pushes(Pushes::First),
    spec("getbit", 3, RF, ONE, "bitmap", "2.2.0", "Returns the bit value at offset in the string value stored at key", READ_FAST, getbit),
    spec("bitcount", -2, READONLY, ONE, "bitmap", "2.6.0", "Count set bits in a string", READ_SLOW, bitcount),
    spec("bitpos", -3, READONLY, ONE, "bitmap", "2.8.7", "Find first bit set or clear in a string", READ_SLOW, bitpos),
    spec("bitop", -4, WD, (2, -1, 1), "bitmap", "2.6.0", "Perform bitwise operations between strings", WRITE_SLOW, bitop).pushes(Pushes::First),
    spec("bitfield", -2, WD, ONE, "bitmap", "3.2.0", "Perform arbitrary bitfield integer operations on strings", WRITE_SLOW, bitfield),
    spec("bitfield_ro", -2, RF, ONE, "bitmap", "6.0.0", "Perform arbitrary bitfield integer operations on strings. Read-only variant of BITFIELD", READ_FAST, bitfield_ro),
];

const BAD_OFFSET: &str = "ERR bit offset is not an integer or out of range";
const BAD_BIT: &str = "ERR bit is not an integer or out of range";
const BAD_TYPE: &str =
    "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";

/// C's `strcasecmp(arg, name) == 0`: the argument is cut at its first NUL.
fn cstr_eq_ic(a: &[u8], name: &str) -> bool {
    let a = match memchr::memchr(0, a) {
        Some(i) => &a[..i],
        None => a,
    };
    a.eq_ignore_ascii_case(name.as_bytes())
}

/// Redis's getBitOffsetFromArgument: a bit offset below
/// `proto-max-bulk-len` (`max_bytes`) worth of bits; with `hash_bits` (BITFIELD), `#N` means N times the field width
/// (multiplied with C's wrap-around, as Redis does).
fn parse_offset(a: &[u8], hash_bits: Option<u32>, max_bytes: usize) -> Option<u64> {
    let (digits, mult) = match (a.first(), hash_bits) {
        (Some(b'#'), Some(bits)) => (&a[1..], bits as i64),
        _ => (a, 1),
    };
    let off = parse_i64(digits)?.wrapping_mul(mult);
    if off < 0 || (off >> 3) as u64 >= max_bytes as u64 {
        return None;
    }
    Some(off as u64)
}

/// The bit at `offset` (0 beyond the end).
fn bit_at(s: &[u8], offset: u64) -> bool {
    let byte = (offset >> 3) as usize;
    byte < s.len() && s[byte] & (0x80 >> (offset & 7)) != 0
}

/// Stores a string created by a bit command: raw encoding, no TTL.
fn store_new(db: &mut Db, key: &Bytes, v: Vec<u8>, event: Event) {
    let owned = Owned {
        value: OwnedValue::Obj(Value::Str(v)),
        expire: None,
        flags: 0,
    };
    db.put(key, owned, event);
}

/// SETBIT key offset 0|1: replies the bit's previous value.
fn setbit(ctx: &mut Ctx, args: &[Bytes]) {
    let key = &args[1];
    let max = ctx.store.config().proto_max_bulk_len;
    let Some(offset) = parse_offset(&args[2], None, max) else {
        return ctx.error(BAD_OFFSET);
    };
    let on = match parse_i64(&args[3]) {
        Some(v @ (0 | 1)) => v == 1,
        _ => return ctx.error(BAD_BIT),
    };
    let byte = (offset >> 3) as usize;
    let mask = 0x80u8 >> (offset & 7);
    let (db, out) = ctx.db_out();
    let Some(cur) = typed(out, db.get_str_write(key)) else {
        return;
    };
    if cur.is_none() {
        let mut v = vec![0u8; byte + 1];
        if on {
            v[byte] = mask;
        }
        store_new(db, key, v, Event::string("setbit"));
        return out.int(0);
    }
    let Ok(Some(v)) = db.str_mut(key) else {
        return out.int(0);
    };
    let grew = v.len() <= byte;
    if grew {
        v.resize(byte + 1, 0);
    }
    let old = v[byte] & mask != 0;
    if grew || old != on {
        if on {
            v[byte] |= mask;
        } else {
            v[byte] &= !mask;
        }
        db.touch_modified(key, Event::string("setbit"));
    }
    out.int(old as i64);
}

/// GETBIT key offset
fn getbit(ctx: &mut Ctx, args: &[Bytes]) {
    let max = ctx.store.config().proto_max_bulk_len;
    let Some(offset) = parse_offset(&args[2], None, max) else {
        return ctx.error(BAD_OFFSET);
    };
    let (db, out) = ctx.db_out();
    if let Some(s) = typed(out, db.get_str(&args[1])) {
        out.int(s.is_some_and(|s| bit_at(s, offset)) as i64);
    }
}

/// Set bits in `s`, eight bytes at a time.
fn popcount(s: &[u8]) -> u64 {
    let mut chunks = s.chunks_exact(32);
    let mut n = 0u64;
    for c in &mut chunks {
        for w in c.chunks_exact(8) {
            let w = u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            n += w.count_ones() as u64;
        }
    }
    let rest = chunks.remainder();
    let mut words = rest.chunks_exact(8);
    for w in &mut words {
        let w = u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        n += w.count_ones() as u64;
    }
    for b in words.remainder() {
        n += b.count_ones() as u64;
    }
    n
}

/// Set bits from bit `a` to bit `b` inclusive (both inside `s`).
fn count_bits(s: &[u8], a: u64, b: u64) -> u64 {
    let (first, last) = ((a >> 3) as usize, (b >> 3) as usize);
    let mut n = popcount(&s[first..=last]);
    // Take off the bits of the edge bytes that lie outside the range.
    let head = s[first] & !(0xffu8 >> (a & 7));
    let tail = s[last] & (0x7fu8 >> (b & 7));
    n -= (head.count_ones() + tail.count_ones()) as u64;
    n
}

/// Redis 7.0's range normalisation for BITCOUNT/BITPOS on a length of
/// `total` units (bytes or bits): negative counts from the end, clamped
/// into the string. None when the range is empty.
fn norm_range(mut start: i64, mut end: i64, total: i64) -> Option<(u64, u64)> {
    if start < 0 {
        start += total;
    }
    if end < 0 {
        end += total;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= total {
        end = total - 1;
    }
    (start <= end).then_some((start as u64, end as u64))
}

/// BYTE | BIT, compared as C strings; None is a syntax error.
fn parse_unit(a: &[u8]) -> Option<bool> {
    if cstr_eq_ic(a, "bit") {
        Some(true)
    } else if cstr_eq_ic(a, "byte") {
        Some(false)
    } else {
        None
    }
}

/// BITCOUNT key [start end [BYTE | BIT]]. As in Redis 7.0 the key is looked
/// up before the range is parsed: a missing key is 0 whatever follows.
fn bitcount(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    let Some(s) = typed(out, db.get_str(&args[1])) else {
        return;
    };
    let Some(s) = s else {
        return out.int(0);
    };
    let range = match args.len() {
        2 => norm_range(0, -1, s.len() as i64).map(|(a, b)| (a * 8, b * 8 + 7)),
        4 | 5 => {
            let (Some(start), Some(end)) = (parse_i64(&args[2]), parse_i64(&args[3])) else {
                return out.error(NOT_INT);
            };
            if start < 0 && end < 0 && start > end {
                return out.int(0);
            }
            let bits = match args.get(4) {
                None => false,
                Some(a) => match parse_unit(a) {
                    Some(b) => b,
                    None => return out.error(SYNTAX),
                },
            };
            if bits {
                norm_range(start, end, s.len() as i64 * 8)
            } else {
                norm_range(start, end, s.len() as i64).map(|(a, b)| (a * 8, b * 8 + 7))
            }
        }
        _ => return out.error(SYNTAX),
    };
    out.int(range.map_or(0, |(a, b)| count_bits(s, a, b)) as i64);
}

/// The first bit equal to `bit` from bit `a` to bit `b` inclusive (both
/// inside `s`), scanning eight bytes at a time.
fn find_bit(s: &[u8], a: u64, b: u64, bit: bool) -> Option<u64> {
    // A byte or word holds no wanted bit when it equals `skip`.
    let flip = if bit { 0u8 } else { 0xff };
    let (first, last) = ((a >> 3) as usize, (b >> 3) as usize);
    let head_mask = 0xffu8 >> (a & 7);
    let tail_mask = !(0x7fu8 >> (b & 7));
    // Bits set where the wanted value is, restricted to the range.
    let wanted = |i: usize| -> u8 {
        let mut m = s[i] ^ flip;
        if i == first {
            m &= head_mask;
        }
        if i == last {
            m &= tail_mask;
        }
        m
    };
    let at = |i: usize, m: u8| Some(i as u64 * 8 + m.leading_zeros() as u64);
    let m = wanted(first);
    if m != 0 {
        return at(first, m);
    }
    if first == last {
        return None;
    }
    let mut i = first + 1;
    let word_skip = u64::from_ne_bytes([flip; 8]);
    while i + 8 <= last {
        let w = &s[i..i + 8];
        let w = u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        if w != word_skip {
            break;
        }
        i += 8;
    }
    while i < last {
        let m = s[i] ^ flip;
        if m != 0 {
            return at(i, m);
        }
        i += 1;
    }
    let m = wanted(last);
    if m != 0 {
        return at(last, m);
    }
    None
}

/// BITPOS key bit [start [end [BYTE | BIT]]]. Looking for a clear bit
/// without an explicit end treats the string as padded with zeros: the
/// answer is then the first bit past the end when none is found.
fn bitpos(ctx: &mut Ctx, args: &[Bytes]) {
    let bit = match parse_i64(&args[2]) {
        None => return ctx.error(NOT_INT),
        Some(b @ (0 | 1)) => b == 1,
        Some(_) => return ctx.error("ERR The bit argument must be 1 or 0."),
    };
    let (db, out) = ctx.db_out();
    let Some(s) = typed(out, db.get_str(&args[1])) else {
        return;
    };
    let Some(s) = s else {
        return out.int(if bit { -1 } else { 0 });
    };
    let len = s.len() as i64;
    let (range, end_given) = match args.len() {
        3 => (
            norm_range(0, -1, len).map(|(a, b)| (a * 8, b * 8 + 7)),
            false,
        ),
        4..=6 => {
            let Some(start) = parse_i64(&args[3]) else {
                return out.error(NOT_INT);
            };
            let bits = match args.get(5) {
                None => false,
                Some(a) => match parse_unit(a) {
                    Some(b) => b,
                    None => return out.error(SYNTAX),
                },
            };
            let end = match args.get(4) {
                None => -1,
                Some(a) => match parse_i64(a) {
                    Some(e) => e,
                    None => return out.error(NOT_INT),
                },
            };
            let range = if bits {
                norm_range(start, end, len * 8)
            } else {
                norm_range(start, end, len).map(|(a, b)| (a * 8, b * 8 + 7))
            };
            (range, args.len() >= 5)
        }
        _ => return out.error(SYNTAX),
    };
    let Some((a, b)) = range else {
        return out.int(-1);
    };
    match find_bit(s, a, b, bit) {
        Some(p) => out.int(p as i64),
        // Not found: without an end, a clear bit is found just past it.
        None if !bit && !end_given => out.int((b + 1) as i64),
        None => out.int(-1),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum BitOp {
    And,
    Or,
    Xor,
    Not,
}

/// Folds one source string into the result so far; a missing key is "".
fn bitop_fold(res: &mut Vec<u8>, s: &[u8], op: BitOp) {
    let n = res.len().min(s.len());
    match op {
        BitOp::And => {
            res[..n].iter_mut().zip(&s[..n]).for_each(|(r, b)| *r &= b);
            // Past the shorter string the other side counts as zeros.
            res[n..].fill(0);
            res.resize(s.len().max(res.len()), 0);
        }
        BitOp::Or | BitOp::Xor => {
            if op == BitOp::Or {
                res[..n].iter_mut().zip(&s[..n]).for_each(|(r, b)| *r |= b);
            } else {
                res[..n].iter_mut().zip(&s[..n]).for_each(|(r, b)| *r ^= b);
            }
            if s.len() > n {
                res.extend_from_slice(&s[n..]);
            }
        }
        BitOp::Not => {
            res.clear();
            res.extend(s.iter().map(|b| !b));
        }
    }
}

/// BITOP AND|OR|XOR|NOT destkey key [key ...]: replies the result's
/// length; an empty result deletes the destination.
fn bitop(ctx: &mut Ctx, args: &[Bytes]) {
    let name = &args[1];
    let op = if cstr_eq_ic(name, "and") {
        BitOp::And
    } else if cstr_eq_ic(name, "or") {
        BitOp::Or
    } else if cstr_eq_ic(name, "xor") {
        BitOp::Xor
    } else if cstr_eq_ic(name, "not") {
        BitOp::Not
    } else {
        return ctx.error(SYNTAX);
    };
    if op == BitOp::Not && args.len() != 4 {
        return ctx.error("ERR BITOP NOT must be called with a single source key.");
    }
    let (db, out) = ctx.db_out();
    let mut res: Vec<u8> = Vec::new();
    for (i, key) in args[3..].iter().enumerate() {
        let Some(s) = typed(out, db.get_str(key)) else {
            return;
        };
        let s = s.unwrap_or(b"");
        if i == 0 && op != BitOp::Not {
            res.extend_from_slice(s);
        } else {
            bitop_fold(&mut res, s, op);
        }
    }
    let dest = &args[2];
    let len = res.len();
    if len == 0 {
        db.remove(dest);
    } else {
        store_new(db, dest, res, Event::string("set"));
    }
    out.int(len as i64);
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum FieldOp {
    Get,
    Set,
    Incr,
}

#[derive(Clone, Copy, Debug)]
struct Field {
    op: FieldOp,
    signed: bool,
    bits: u32,
    offset: u64,
    /// SET's value or INCRBY's increment.
    val: i64,
    overflow: Overflow,
}

/// A bitfield type: `i1`..`i64` or `u1`..`u63` (lower-case sign only; the
/// width is read as a C string).
fn parse_type(a: &[u8]) -> Option<(bool, u32)> {
    let signed = match a.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return None,
    };
    let w = &a[1..];
    let w = match memchr::memchr(0, w) {
        Some(i) => &w[..i],
        None => w,
    };
    let bits = parse_i64(w)?;
    let max = if signed { 64 } else { 63 };
    (1..=max).contains(&bits).then_some((signed, bits as u32))
}

/// Reads `bits` (1..=64) bits at bit `offset` as an unsigned number; bits
/// past the end of `s` read as zero.
fn get_unsigned(s: &[u8], offset: u64, bits: u32) -> u64 {
    let byte = (offset >> 3) as usize;
    let mut w = [0u8; 16];
    if byte < s.len() {
        let n = (s.len() - byte).min(9);
        w[..n].copy_from_slice(&s[byte..byte + n]);
    }
    let x = u128::from_be_bytes(w) << (offset & 7);
    (x >> (128 - bits)) as u64
}

/// Writes the low `bits` bits of `val` at bit `offset`; `s` must reach the
/// field's last bit.
fn set_unsigned(s: &mut [u8], offset: u64, bits: u32, val: u64) {
    let byte = (offset >> 3) as usize;
    let n = (s.len() - byte).min(9);
    let mut w = [0u8; 16];
    w[..n].copy_from_slice(&s[byte..byte + n]);
    let shift = 128 - bits - (offset & 7) as u32;
    let ones = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let mask = (ones as u128) << shift;
    let x = (u128::from_be_bytes(w) & !mask) | (((val & ones) as u128) << shift);
    s[byte..byte + n].copy_from_slice(&x.to_be_bytes()[..n]);
}

fn get_signed(s: &[u8], offset: u64, bits: u32) -> i64 {
    let u = get_unsigned(s, offset, bits);
    if bits < 64 && u & (1 << (bits - 1)) != 0 {
        (u | (u64::MAX << bits)) as i64
    } else {
        u as i64
    }
}

/// Redis's checkUnsignedBitfieldOverflow: None when `value + incr` fits in
/// `bits` (<= 63) bits, else the wrapped or saturated result (FAIL: 0).
fn unsigned_overflow(value: u64, incr: i64, bits: u32, ow: Overflow) -> Option<u64> {
    let max = (1u64 << bits) - 1;
    let maxincr = max.wrapping_sub(value) as i64;
    let minincr = (value as i64).wrapping_neg();
    let wrap = || value.wrapping_add(incr as u64) & max;
    if value > max || (incr > 0 && incr > maxincr) {
        Some(match ow {
            Overflow::Wrap => wrap(),
            Overflow::Sat => max,
            Overflow::Fail => 0,
        })
    } else if incr < 0 && incr < minincr {
        Some(match ow {
            Overflow::Wrap => wrap(),
            Overflow::Sat => 0,
            Overflow::Fail => 0,
        })
    } else {
        None
    }
}

/// Redis's checkSignedBitfieldOverflow for `bits` (<= 64) bits.
fn signed_overflow(value: i64, incr: i64, bits: u32, ow: Overflow) -> Option<i64> {
    let max = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let maxincr = (max as u64).wrapping_sub(value as u64) as i64;
    let minincr = min.wrapping_sub(value);
    let wrap = || {
        let mut c = (value as u64).wrapping_add(incr as u64);
        if bits < 64 {
            let mask = u64::MAX << bits;
            if c & (1 << (bits - 1)) != 0 {
                c |= mask;
            } else {
                c &= !mask;
            }
        }
        c as i64
    };
    if value > max || (bits != 64 && incr > maxincr) || (value >= 0 && incr > 0 && incr > maxincr) {
        Some(match ow {
            Overflow::Wrap => wrap(),
            Overflow::Sat => max,
            Overflow::Fail => 0,
        })
    } else if value < min
        || (bits != 64 && incr < minincr)
        || (value < 0 && incr < 0 && incr < minincr)
    {
        Some(match ow {
            Overflow::Wrap => wrap(),
            Overflow::Sat => min,
            Overflow::Fail => 0,
        })
    } else {
        None
    }
}

/// Parses BITFIELD's subcommands; Err carries the error reply.
fn parse_fields(args: &[Bytes], max_bytes: usize) -> Result<Vec<Field>, &'static str> {
    let mut fields = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < args.len() {
        let rem = args.len() - j - 1;
        let sub = &args[j];
        let op = if cstr_eq_ic(sub, "get") && rem >= 2 {
            FieldOp::Get
        } else if cstr_eq_ic(sub, "set") && rem >= 3 {
            FieldOp::Set
        } else if cstr_eq_ic(sub, "incrby") && rem >= 3 {
            FieldOp::Incr
        } else if cstr_eq_ic(sub, "overflow") && rem >= 1 {
            let t = &args[j + 1];
            overflow = if cstr_eq_ic(t, "wrap") {
                Overflow::Wrap
            } else if cstr_eq_ic(t, "sat") {
                Overflow::Sat
            } else if cstr_eq_ic(t, "fail") {
                Overflow::Fail
            } else {
                return Err("ERR Invalid OVERFLOW type specified");
            };
            j += 2;
            continue;
        } else {
            return Err(SYNTAX);
        };
        let (signed, bits) = parse_type(&args[j + 1]).ok_or(BAD_TYPE)?;
        let offset = parse_offset(&args[j + 2], Some(bits), max_bytes).ok_or(BAD_OFFSET)?;
        let val = if op == FieldOp::Get {
            0
        } else {
            parse_i64(&args[j + 3]).ok_or(NOT_INT)?
        };
        fields.push(Field {
            op,
            signed,
            bits,
            offset,
            val,
            overflow,
        });
        j += if op == FieldOp::Get { 3 } else { 4 };
    }
    Ok(fields)
}

/// GET of one field, replied.
fn field_get(out: &mut Out, s: &[u8], f: &Field) {
    if f.signed {
        out.int(get_signed(s, f.offset, f.bits));
    } else {
        out.int(get_unsigned(s, f.offset, f.bits) as i64);
    }
}

/// SET or INCRBY of one field, replied (null when OVERFLOW FAIL refused
/// it). Returns whether the stored bits changed.
fn field_write(out: &mut Out, s: &mut [u8], f: &Field) -> bool {
    let incr = f.op == FieldOp::Incr;
    let (old, new, reply) = if f.signed {
        let old = get_signed(s, f.offset, f.bits);
        let (value, by) = if incr { (old, f.val) } else { (f.val, 0) };
        let new = match signed_overflow(value, by, f.bits, f.overflow) {
            Some(_) if f.overflow == Overflow::Fail => {
                out.null();
                return false;
            }
            Some(limit) => limit,
            None => value.wrapping_add(by),
        };
        (old as u64, new as u64, if incr { new } else { old })
    } else {
        let old = get_unsigned(s, f.offset, f.bits);
        let (value, by) = if incr {
            (old, f.val)
        } else {
            (f.val as u64, 0)
        };
        let new = match unsigned_overflow(value, by, f.bits, f.overflow) {
            Some(_) if f.overflow == Overflow::Fail => {
                out.null();
                return false;
            }
            Some(limit) => limit,
            None => value.wrapping_add(by as u64),
        };
        (old, new, if incr { new as i64 } else { old as i64 })
    };
    out.int(reply);
    set_unsigned(s, f.offset, f.bits, new);
    let ones = if f.bits == 64 {
        u64::MAX
    } else {
        (1u64 << f.bits) - 1
    };
    old & ones != new & ones
}

fn bitfield_generic(ctx: &mut Ctx, args: &[Bytes], read_only_cmd: bool) {
    let fields = match parse_fields(args, ctx.store.config().proto_max_bulk_len) {
        Ok(f) => f,
        Err(e) => return ctx.error(e),
    };
    let key = &args[1];
    let (db, out) = ctx.db_out();
    // The last bit any SET/INCRBY reaches: the string grows to cover it.
    let highest = fields
        .iter()
        .filter(|f| f.op != FieldOp::Get)
        .map(|f| f.offset + f.bits as u64 - 1)
        .max();
    let Some(highest) = highest else {
        let Some(s) = typed(out, db.get_str(key)) else {
            return;
        };
        let s = s.unwrap_or(b"");
        out.array(fields.len());
        for f in &fields {
            field_get(out, s, f);
        }
        return;
    };
    if read_only_cmd {
        return out.error("ERR BITFIELD_RO only supports the GET subcommand");
    }
    let Some(cur) = typed(out, db.get_str_write(key)) else {
        return;
    };
    let need = (highest >> 3) as usize + 1;
    let created = cur.is_none();
    if created {
        store_new(db, key, vec![0u8; need], Event::string("setbit"));
    }
    let Ok(Some(v)) = db.str_mut(key) else {
        return out.array(0);
    };
    let grew = v.len() < need;
    if grew {
        v.resize(need, 0);
    }
    out.array(fields.len());
    let mut changed = grew;
    for f in &fields {
        if f.op == FieldOp::Get {
            field_get(out, v, f);
        } else {
            changed |= field_write(out, v, f);
        }
    }
    // A created key recorded its event when it was stored.
    if changed && !created {
        db.touch_modified(key, Event::string("setbit"));
    }
}

/// BITFIELD key [GET type offset | SET type offset value |
/// INCRBY type offset increment | OVERFLOW WRAP|SAT|FAIL] ...
fn bitfield(ctx: &mut Ctx, args: &[Bytes]) {
    bitfield_generic(ctx, args, false);
}

/// BITFIELD_RO key [GET type offset] ...
fn bitfield_ro(ctx: &mut Ctx, args: &[Bytes]) {
    bitfield_generic(ctx, args, true);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets() {
        assert_eq!(
            parse_offset(b"0", None, crate::commands::strings::PROTO_MAX_BULK_LEN),
            Some(0)
        );
        assert_eq!(
            parse_offset(
                b"4294967295",
                None,
                crate::commands::strings::PROTO_MAX_BULK_LEN
            ),
            Some(4294967295)
        );
        assert_eq!(
            parse_offset(
                b"4294967296",
                None,
                crate::commands::strings::PROTO_MAX_BULK_LEN
            ),
            None
        );
        assert_eq!(
            parse_offset(b"-1", None, crate::commands::strings::PROTO_MAX_BULK_LEN),
            None
        );
        assert_eq!(
            parse_offset(b"#1", None, crate::commands::strings::PROTO_MAX_BULK_LEN),
            None
        );
        assert_eq!(
            parse_offset(b"#3", Some(8), crate::commands::strings::PROTO_MAX_BULK_LEN),
            Some(24)
        );
        assert_eq!(
            parse_offset(
                b"#-1",
                Some(8),
                crate::commands::strings::PROTO_MAX_BULK_LEN
            ),
            None
        );
        // C's wrapping multiply: 2^61 * 8 = 2^64 = 0.
        assert_eq!(
            parse_offset(
                b"#2305843009213693952",
                Some(8),
                crate::commands::strings::PROTO_MAX_BULK_LEN
            ),
            Some(0)
        );
        assert_eq!(
            parse_offset(b"", None, crate::commands::strings::PROTO_MAX_BULK_LEN),
            None
        );
        assert_eq!(
            parse_offset(b"#", Some(8), crate::commands::strings::PROTO_MAX_BULK_LEN),
            None
        );
    }

    #[test]
    fn types() {
        assert_eq!(parse_type(b"i8"), Some((true, 8)));
        assert_eq!(parse_type(b"u63"), Some((false, 63)));
        assert_eq!(parse_type(b"i64"), Some((true, 64)));
        assert_eq!(parse_type(b"u64"), None);
        assert_eq!(parse_type(b"i65"), None);
        assert_eq!(parse_type(b"i0"), None);
        assert_eq!(parse_type(b"I8"), None);
        assert_eq!(parse_type(b"i08"), None);
        assert_eq!(parse_type(b"i"), None);
        assert_eq!(parse_type(b""), None);
        assert_eq!(parse_type(b"u8\0zz"), Some((false, 8)));
    }

    #[test]
    fn counting() {
        let s = b"foobar";
        assert_eq!(popcount(s), 26);
        assert_eq!(count_bits(s, 0, 47), 26);
        assert_eq!(count_bits(s, 8, 15), 6);
        assert_eq!(count_bits(s, 5, 30), 17);
        let big: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let slow: u64 = big.iter().map(|b| b.count_ones() as u64).sum();
        assert_eq!(popcount(&big), slow);
        for (a, b) in [(3u64, 7990u64), (0, 7999), (17, 17), (9, 4000)] {
            let slow = (a..=b).filter(|&i| bit_at(&big, i)).count() as u64;
            assert_eq!(count_bits(&big, a, b), slow, "{a}..{b}");
        }
    }

    #[test]
    fn ranges() {
        assert_eq!(norm_range(0, -1, 6), Some((0, 5)));
        assert_eq!(norm_range(-2, -1, 6), Some((4, 5)));
        assert_eq!(norm_range(5, 100, 6), Some((5, 5)));
        assert_eq!(norm_range(6, 100, 6), None);
        assert_eq!(norm_range(0, -1, 0), None);
        assert_eq!(norm_range(i64::MIN, i64::MAX, 48), Some((0, 47)));
        assert_eq!(norm_range(-100, -100, 6), Some((0, 0)));
    }

    #[test]
    fn finding() {
        let mut s = vec![0u8; 40];
        assert_eq!(find_bit(&s, 0, 319, true), None);
        assert_eq!(find_bit(&s, 3, 319, false), Some(3));
        s[33] = 0x10;
        assert_eq!(find_bit(&s, 0, 319, true), Some(33 * 8 + 3));
        assert_eq!(find_bit(&s, 268, 319, true), None);
        assert_eq!(find_bit(&s, 0, 266, true), None);
        assert_eq!(find_bit(&s, 0, 267, true), Some(267));
        let ones = vec![0xffu8; 40];
        assert_eq!(find_bit(&ones, 0, 319, false), None);
        for a in 0..40u64 {
            for b in a..80 {
                let slow = (a..=b).find(|&i| bit_at(&s, i));
                assert_eq!(find_bit(&s, a, b, true), slow);
            }
        }
    }

    #[test]
    fn fields() {
        let mut s = vec![0u8; 10];
        set_unsigned(&mut s, 3, 8, 0xff);
        assert_eq!(s[0], 0x1f);
        assert_eq!(s[1], 0xe0);
        assert_eq!(get_unsigned(&s, 3, 8), 0xff);
        assert_eq!(get_signed(&s, 3, 8), -1);
        set_unsigned(&mut s, 7, 64, u64::MAX);
        assert_eq!(get_signed(&s, 7, 64), -1);
        assert_eq!(get_unsigned(&s, 7, 63), (1 << 63) - 1);
        assert_eq!(get_unsigned(&s, 75, 8), 0);
        assert_eq!(get_unsigned(b"", 1000, 64), 0);
        // Bits past the end read as zero.
        assert_eq!(get_unsigned(&[0xff], 4, 8), 0xf0);
    }

    #[test]
    fn overflows() {
        assert_eq!(unsigned_overflow(250, 10, 8, Overflow::Wrap), Some(4));
        assert_eq!(unsigned_overflow(250, 10, 8, Overflow::Sat), Some(255));
        assert_eq!(unsigned_overflow(5, -10, 8, Overflow::Sat), Some(0));
        assert_eq!(unsigned_overflow(5, -10, 8, Overflow::Wrap), Some(251));
        assert_eq!(unsigned_overflow(5, 10, 8, Overflow::Wrap), None);
        assert_eq!(unsigned_overflow(u64::MAX, 0, 8, Overflow::Sat), Some(255));
        assert_eq!(signed_overflow(127, 1, 8, Overflow::Wrap), Some(-128));
        assert_eq!(signed_overflow(127, 1, 8, Overflow::Sat), Some(127));
        assert_eq!(signed_overflow(-128, -1, 8, Overflow::Sat), Some(-128));
        assert_eq!(signed_overflow(-128, -1, 8, Overflow::Wrap), Some(127));
        assert_eq!(signed_overflow(300, 0, 8, Overflow::Wrap), Some(44));
        assert_eq!(
            signed_overflow(i64::MAX, 1, 64, Overflow::Wrap),
            Some(i64::MIN)
        );
        assert_eq!(
            signed_overflow(i64::MIN, -1, 64, Overflow::Sat),
            Some(i64::MIN)
        );
        assert_eq!(
            signed_overflow(-1, i64::MIN, 64, Overflow::Sat),
            Some(i64::MIN)
        );
        assert_eq!(signed_overflow(-5, 3, 64, Overflow::Sat), None);
    }
}
