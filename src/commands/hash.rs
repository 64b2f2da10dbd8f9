//! Hash commands (Redis's t_hash.c).
//!
//! Every lookup goes through the keyspace's typed lookups (`Db::read`,
//! `Db::write`, `Db::write_or_create`), so WRONGTYPE, keyspace events and
//! the deletion of an emptied hash happen in one place. Replies are written
//! straight from the hash's storage; the listpack/hashtable conversion rules
//! live in `types::hash`, which gets the current limits on every write.
//!
//! Reaches the keyspace only through `Ctx` (and the config for the listpack
//! limits); SCAN parsing and `long double` arithmetic are the shared
//! `args` and `longdouble`'s. Must not notify anyone itself: the guard
//! records each change.

use bytes::Bytes;
use rand::Rng;

use super::longdouble::{incr_by_float, FloatError};
use super::Pushes;
use super::*;
use crate::resp::Out;
use crate::types::hash::Hash;
use crate::types::pack::Limits;
use crate::util::{eq_ic, parse_i64};

pub(super) const READ_FAST: &[&str] = &["read", "hash", "fast"];
const READ_SLOW: &[&str] = &["read", "hash", "slow"];
pub(super) const WRITE_FAST: &[&str] = &["write", "hash", "fast"];

pub(super) const WDF: u32 = WRITE | DENYOOM | FAST;
pub(super) const WF: u32 = WRITE | FAST;
pub(super) const RF: u32 = READONLY | FAST;
pub(super) const ONE: (i32, i32, i32) = (1, 1, 1);

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    spec("hset", -4, WDF, ONE, "hash", "2.0.0", "Set the string value of a hash field", WRITE_FAST, hset),
    spec("hsetnx", 4, WDF, ONE, "hash", "2.0.0", "Set the value of a hash field, only if the field does not exist", WRITE_FAST, hsetnx),
    spec("hget", 3, RF, ONE, "hash", "2.0.0", "Get the value of a hash field", READ_FAST, hget),
    spec("hmget", -3, RF, ONE, "hash", "2.0.0", "Get the values of all the given hash fields", READ_FAST, hmget),
    spec("hmset", -4, WDF, ONE, "hash", "2.0.0", "Set multiple hash fields to multiple values", WRITE_FAST, hmset),
    spec("hdel", -3, WF, ONE, "hash", "2.0.0", "Delete one or more hash fields", WRITE_FAST, hdel).pushes(Pushes::First),
    spec("hlen", 2, RF, ONE, "hash", "2.0.0", "Get the number of fields in a hash", READ_FAST, hlen),
    spec("hstrlen", 3, RF, ONE, "hash", "3.2.0", "Get the length of the value of a hash field", READ_FAST, hstrlen),
    spec("hexists", 3, RF, ONE, "hash", "2.0.0", "Determine if a hash field exists", READ_FAST, hexists),
    spec("hkeys", 2, READONLY, ONE, "hash", "2.0.0", "Get all the fields in a hash", READ_SLOW, hkeys),
    spec("hvals", 2, READONLY, ONE, "hash", "2.0.0", "Get all the values in a hash", READ_SLOW, hvals),
    spec("hgetall", 2, READONLY, ONE, "hash", "2.0.0", "Get all the fields and values in a hash", READ_SLOW, hgetall),
    spec("hincrby", 4, WDF, ONE, "hash", "2.0.0", "Increment the integer value of a hash field by the given number", WRITE_FAST, hincrby),
    spec("hincrbyfloat", 4, WDF, ONE, "hash", "2.6.0", "Increment the float value of a hash field by the given amount", WRITE_FAST, hincrbyfloat),
    spec("hrandfield", -2, READONLY, ONE, "hash", "6.2.0", "Get one or multiple random fields from a hash", READ_SLOW, hrandfield),
    spec("hscan", -3, READONLY, ONE, "hash", "2.8.0", "Incrementally iterate hash fields and associated values", READ_SLOW, hscan),
];

/// The listpack limits (`hash-max-listpack-entries` / `-value`).
pub(super) fn limits(ctx: &Ctx) -> Limits {
    Limits {
        max_entries: ctx.store.config().hash_max_listpack_entries,
        max_value: ctx.store.config().hash_max_listpack_value,
    }
}

/// HSET/HMSET: sets every pair; the number of new fields, or None after a
/// reply (arity, WRONGTYPE).
fn set_pairs(ctx: &mut Ctx, args: &[Bytes], name: &str) -> Option<usize> {
    if args.len() % 2 == 1 {
        ctx.error(&format!(
            "ERR wrong number of arguments for '{name}' command"
        ));
        return None;
    }
    let lim = limits(ctx);
    let (db, out) = ctx.db_out();
    let mut h = typed(
        out,
        db.write_or_create::<Hash>(&args[1], Event::hash("hset")),
    )?;
    // An over-long field or value converts a listpack as it goes in (Redis
    // converts before the first write; a hashtable has no order to tell).
    let mut added = 0;
    for p in args[2..].chunks_exact(2) {
        added += h.insert(&p[0], &p[1], &lim) as usize;
    }
    Some(added)
}

fn hset(ctx: &mut Ctx, args: &[Bytes]) {
    if let Some(n) = set_pairs(ctx, args, "hset") {
        ctx.out.int(n as i64);
    }
}

fn hmset(ctx: &mut Ctx, args: &[Bytes]) {
    if set_pairs(ctx, args, "hmset").is_some() {
        ctx.out.ok();
    }
}

fn hsetnx(ctx: &mut Ctx, args: &[Bytes]) {
    let lim = limits(ctx);
    let (db, out) = ctx.db_out();
    let Some(mut h) = typed(
        out,
        db.write_or_create::<Hash>(&args[1], Event::hash("hset")),
    ) else {
        return;
    };
    if h.insert_nx(&args[2], &args[3], &lim) {
        out.int(1);
    } else {
        h.no_change();
        out.int(0);
    }
}

fn hget(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    let Some(h) = typed(out, db.read::<Hash>(&args[1])) else {
        return;
    };
    match h.and_then(|h| h.get(&args[2])) {
        Some(v) => out.bulk(v),
        None => out.null(),
    }
}

fn hmget(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    let Some(h) = typed(out, db.read::<Hash>(&args[1])) else {
        return;
    };
    out.array(args.len() - 2);
    for f in &args[2..] {
        match h.and_then(|h| h.get(f)) {
            Some(v) => out.bulk(v),
            None => out.null(),
        }
    }
}

fn hdel(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    let Some(g) = typed(out, db.write::<Hash>(&args[1], Event::hash("hdel"))) else {
        return;
    };
    let Some(mut h) = g else {
        return out.int(0);
    };
    let mut deleted = 0;
    for f in &args[2..] {
        if h.remove(f) {
            deleted += 1;
            if h.is_empty() {
                break;
            }
        }
    }
    if deleted == 0 {
        h.no_change();
    }
    out.int(deleted);
}

fn hlen(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    if let Some(h) = typed(out, db.read::<Hash>(&args[1])) {
        out.int(h.map_or(0, |h| h.len() as i64));
    }
}

fn hstrlen(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    if let Some(h) = typed(out, db.read::<Hash>(&args[1])) {
        out.int(h.and_then(|h| h.value_len(&args[2])).unwrap_or(0) as i64);
    }
}

fn hexists(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    if let Some(h) = typed(out, db.read::<Hash>(&args[1])) {
        out.int(h.is_some_and(|h| h.contains(&args[2])) as i64);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Keys,
    Vals,
    Both,
}

/// HKEYS / HVALS (arrays) and HGETALL (a map).
fn getall_generic(ctx: &mut Ctx, args: &[Bytes], part: Part) {
    let (db, out) = ctx.db_out();
    let Some(h) = typed(out, db.read::<Hash>(&args[1])) else {
        return;
    };
    let n = h.map_or(0, |h| h.len());
    if part == Part::Both {
        out.map(n);
    } else {
        out.array(n);
    }
    let Some(h) = h else {
        return;
    };
    for (f, v) in h.iter() {
        if part != Part::Vals {
            out.bulk(f);
        }
        if part != Part::Keys {
            out.bulk(v);
        }
    }
}

fn hkeys(ctx: &mut Ctx, args: &[Bytes]) {
    getall_generic(ctx, args, Part::Keys);
}

fn hvals(ctx: &mut Ctx, args: &[Bytes]) {
    getall_generic(ctx, args, Part::Vals);
}

fn hgetall(ctx: &mut Ctx, args: &[Bytes]) {
    getall_generic(ctx, args, Part::Both);
}

/// `cur + incr` as HINCRBY computes it: Err is the error reply.
fn incr_i64(cur: Option<&[u8]>, incr: i64) -> Result<i64, &'static str> {
    let cur = match cur {
        None => 0,
        Some(b) => parse_i64(b).ok_or("ERR hash value is not an integer")?,
    };
    cur.checked_add(incr)
        .ok_or("ERR increment or decrement would overflow")
}

fn hincrby(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(incr) = arg_i64(ctx, &args[3]) else {
        return;
    };
    let lim = limits(ctx);
    let (db, out) = ctx.db_out();
    let Some(mut h) = typed(
        out,
        db.write_or_create::<Hash>(&args[1], Event::hash("hincrby")),
    ) else {
        return;
    };
    let mut value = 0;
    let r = h.update_with(&args[2], &lim, |cur| {
        value = incr_i64(cur, incr)?;
        Ok::<_, &'static str>(Digits::new(value))
    });
    match r {
        Ok(_) => out.int(value),
        Err(e) => {
            h.no_change();
            out.error(e);
        }
    }
}

/// An i64's decimal digits on the stack (what HINCRBY stores).
struct Digits {
    buf: [u8; 20],
    len: u8,
}

impl Digits {
    fn new(v: i64) -> Digits {
        let mut f = itoa::Buffer::new();
        let s = f.format(v).as_bytes();
        let mut buf = [0u8; 20];
        buf[..s.len()].copy_from_slice(s);
        Digits {
            buf,
            len: s.len() as u8,
        }
    }
}

impl AsRef<[u8]> for Digits {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }
}

/// Why HINCRBYFLOAT failed: the error reply, decided in Redis's order
/// (the increment is checked before the key and the stored value).
fn float_error(incr: &[u8], e: FloatError) -> &'static str {
    // Rare paths: look at the increment alone to tell the cases apart.
    match incr_by_float(None, incr) {
        Err(FloatError::Increment | FloatError::Value) => NOT_FLOAT,
        Err(FloatError::NanOrInf) => "ERR value is NaN or Infinity",
        Ok(_) => match e {
            FloatError::Value => "ERR hash value is not a float",
            FloatError::Increment => NOT_FLOAT,
            FloatError::NanOrInf => "ERR increment would produce NaN or Infinity",
        },
    }
}

fn hincrbyfloat(ctx: &mut Ctx, args: &[Bytes]) {
    let lim = limits(ctx);
    let incr = &args[3];
    let (db, out) = ctx.db_out();
    let g = db.write_or_create::<Hash>(&args[1], Event::hash("hincrbyfloat"));
    let mut h = match g {
        Ok(h) => h,
        Err(w) => {
            // A bad increment is reported before the type.
            if let Err(e) = incr_by_float(None, incr) {
                return out.error(float_error(incr, e));
            }
            typed(out, Err::<(), _>(w));
            return;
        }
    };
    match h.update_with(&args[2], &lim, |cur| incr_by_float(cur, incr)) {
        Ok(v) => out.bulk(&v),
        Err(e) => {
            h.no_change();
            out.error(float_error(incr, e));
        }
    }
}

/// One HRANDFIELD pick: the field, or in WITHVALUES mode the pair (a
/// 2-array in RESP3, two flat elements in RESP2).
fn write_pick(out: &mut Out, f: &[u8], v: &[u8], withvalues: bool) {
    if withvalues && out.resp3 {
        out.array(2);
    }
    out.bulk(f);
    if withvalues {
        out.bulk(v);
    }
}

/// The reply header for `n` picks.
fn picks_header(out: &mut Out, n: usize, withvalues: bool) {
    if withvalues && !out.resp3 {
        out.array(n * 2);
    } else {
        out.array(n);
    }
}

/// HRANDFIELD key [count [WITHVALUES]]
fn hrandfield(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len() == 2 {
        let (db, out) = ctx.db_out();
        let Some(h) = typed(out, db.read::<Hash>(&args[1])) else {
            return;
        };
        return match h.and_then(|h| h.random_entry(rand::thread_rng().gen())) {
            Some((f, _)) => out.bulk(f),
            None => out.null(),
        };
    }
    let Some(l) = arg_i64(ctx, &args[2]) else {
        return;
    };
    if l == i64::MIN {
        return ctx.error(
            "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
        );
    }
    let withvalues = match args.len() {
        3 => false,
        4 if eq_ic(&args[3], "withvalues") => true,
        _ => return ctx.error(SYNTAX),
    };
    // Redis doubles the count for the flat RESP2 reply.
    if withvalues && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&l) {
        return ctx.error("ERR value is out of range");
    }
    let (db, out) = ctx.db_out();
    let Some(h) = typed(out, db.read::<Hash>(&args[1])) else {
        return;
    };
    let Some(h) = h.filter(|h| !h.is_empty()) else {
        return out.array(0);
    };
    let count = l.unsigned_abs();
    if count == 0 {
        return out.array(0);
    }
    let mut rng = rand::thread_rng();
    if l < 0 || count == 1 {
        // Independent picks, repeats allowed, in random order.
        if count > MAX_RANDOM_REPEATS {
            return out.error("ERR value is out of range");
        }
        let count = count as usize;
        picks_header(out, count, withvalues);
        if h.is_listpack() {
            // Index the small listpack once instead of walking it per pick.
            let all: Vec<(&[u8], &[u8])> = h.iter().collect();
            for _ in 0..count {
                let (f, v) = all[rng.gen_range(0..all.len())];
                write_pick(out, f, v, withvalues);
            }
        } else {
            for _ in 0..count {
                if let Some((f, v)) = h.random_entry(rng.gen()) {
                    write_pick(out, f, v, withvalues);
                }
            }
        }
        return;
    }
    let len = h.len();
    if count >= len as u64 {
        // The whole hash.
        picks_header(out, len, withvalues);
        for (f, v) in h.iter() {
            write_pick(out, f, v, withvalues);
        }
        return;
    }
    let picks = h.random_distinct(count as usize, &mut || rng.gen());
    picks_header(out, picks.len(), withvalues);
    for (f, v) in picks {
        write_pick(out, f, v, withvalues);
    }
}

/// HSCAN key cursor [MATCH pattern] [COUNT count]
fn hscan(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(mut cursor) = parse_cursor(&args[2]) else {
        return ctx.error("ERR invalid cursor");
    };
    let key = &args[1];
    let (db, out) = ctx.db_out();
    // Redis answers a missing key (and WRONGTYPE) before it looks at the
    // options.
    let Some(exists) = typed(out, db.check_type::<Hash>(key)) else {
        return;
    };
    let opts = if exists {
        match parse_scan_opts(&args[3..], false) {
            Ok(o) => Some(o),
            Err(e) => return out.error(e),
        }
    } else {
        None
    };
    let (Some(opts), Ok(Some(h))) = (opts, db.read::<Hash>(key)) else {
        out.array(2);
        out.bulk(b"0");
        return out.array(0);
    };
    let keep = |f: &[u8]| {
        opts.pattern
            .is_none_or(|p| crate::glob::matches(p, f, false))
    };
    if h.is_listpack() {
        // A listpack is returned whole, with cursor 0, as Redis.
        let n = match opts.pattern {
            None => h.len(),
            Some(_) => h.iter().filter(|(f, _)| keep(f)).count(),
        };
        out.array(2);
        out.bulk(b"0");
        out.array(n * 2);
        for (f, v) in h.iter().filter(|(f, _)| keep(f)) {
            out.bulk(f);
            out.bulk(v);
        }
        return;
    }
    // The matches are encoded into a scratch reply: their number goes
    // before them.
    let mut found = Out::scratch(out.resp3);
    let mut matched = 0usize;
    // Like Redis: stop after COUNT pairs (counted before MATCH filters
    // them) or ten times COUNT buckets.
    let mut scanned: i64 = 0;
    let mut budget = opts.count.saturating_mul(10);
    loop {
        cursor = h.scan_step(cursor, |f, v| {
            scanned += 1;
            if keep(f) {
                matched += 1;
                found.bulk(f);
                found.bulk(v);
            }
        });
        if cursor == 0 || budget == 0 || scanned >= opts.count {
            break;
        }
        budget -= 1;
    }
    out.array(2);
    out.bulk_int(cursor as i64);
    out.array(matched * 2);
    out.raw(&found.buf);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hincrby_arithmetic_as_redis() {
        assert_eq!(incr_i64(None, 5), Ok(5));
        assert_eq!(incr_i64(Some(b"-3"), 3), Ok(0));
        assert_eq!(incr_i64(Some(b"9223372036854775807"), 0), Ok(i64::MAX));
        assert_eq!(
            incr_i64(Some(b"9223372036854775807"), -9223372036854775808),
            Ok(-1)
        );
        let overflow = Err("ERR increment or decrement would overflow");
        assert_eq!(incr_i64(Some(b"9223372036854775807"), 1), overflow);
        assert_eq!(incr_i64(Some(b"-9223372036854775808"), -1), overflow);
        let not_int = Err("ERR hash value is not an integer");
        for bad in [
            &b""[..],
            b" 1",
            b"+1",
            b"01",
            b"-0",
            b"1.0",
            b"99999999999999999999",
        ] {
            assert_eq!(incr_i64(Some(bad), 1), not_int, "{bad:?}");
        }
        for v in [0, -1, 42, i64::MIN, i64::MAX] {
            assert_eq!(Digits::new(v).as_ref(), v.to_string().as_bytes());
        }
    }

    #[test]
    fn hincrbyfloat_errors_in_redis_order() {
        let e = |cur: &[u8], incr: &[u8]| {
            let err = incr_by_float(Some(cur), incr).unwrap_err();
            float_error(incr, err)
        };
        assert_eq!(e(b"1", b"abc"), NOT_FLOAT);
        assert_eq!(e(b"abc", b"abc"), NOT_FLOAT);
        assert_eq!(e(b"abc", b"inf"), "ERR value is NaN or Infinity");
        assert_eq!(e(b"1", b"-inf"), "ERR value is NaN or Infinity");
        assert_eq!(e(b"1", b"nan"), NOT_FLOAT);
        assert_eq!(e(b"abc", b"1"), "ERR hash value is not a float");
        // string2ld reads a stored "inf": the sum is what fails.
        assert_eq!(
            e(b"inf", b"1"),
            "ERR increment would produce NaN or Infinity"
        );
        assert_eq!(
            e(b"1e4932", b"1e4932"),
            "ERR increment would produce NaN or Infinity"
        );
    }

    #[test]
    fn hrandfield_reply_shapes() {
        for (resp3, withvalues, want) in [
            (false, false, &b"*2\r\n$1\r\na\r\n$1\r\na\r\n"[..]),
            (
                false,
                true,
                b"*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\na\r\n$1\r\n1\r\n",
            ),
            (
                true,
                true,
                b"*2\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n",
            ),
        ] {
            let mut out = Out::new(resp3);
            picks_header(&mut out, 2, withvalues);
            for _ in 0..2 {
                write_pick(&mut out, b"a", b"1", withvalues);
            }
            assert_eq!(out.buf, want);
        }
    }
}
