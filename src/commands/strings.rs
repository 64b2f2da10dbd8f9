//! String commands (Redis's t_string.c).
//!
//! Lookups follow Redis: commands that read (GET, MGET, GETRANGE, ...) use
//! `get_str`, which counts keyspace hits/misses; write commands (INCR, APPEND,
//! SETRANGE, SET without GET) use `get_str_write`, which does not.
//! Beside Redis 7.0's, the compare-and-set forms clients send: Redis 8.4's
//! SET IFEQ/IFNE/IFDEQ/IFDNE, DELEX and DIGEST (digests in `digest`), and
//! Valkey 9.0's DELIFEQ. Must not touch lock state: a write here reaches
//! a SETTP binding only through the keyspace hook, as a plain SET or DEL.

mod digest;
mod lcs;
pub(super) mod opts;

use bytes::Bytes;

use super::longdouble::{incr_by_float, FloatError};
use super::*;
use opts::ExpireError;

/// Redis's default proto-max-bulk-len: the largest string a command may build.
pub const PROTO_MAX_BULK_LEN: usize = 512 * 1024 * 1024;

const READ_FAST: &[&str] = &["read", "string", "fast"];
const READ_SLOW: &[&str] = &["read", "string", "slow"];
const WRITE_FAST: &[&str] = &["write", "string", "fast"];
const WRITE_SLOW: &[&str] = &["write", "string", "slow"];

const W: u32 = WRITE;
const WD: u32 = WRITE | DENYOOM;
const WDF: u32 = WRITE | DENYOOM | FAST;
const RF: u32 = READONLY | FAST;
const ONE: (i32, i32, i32) = (1, 1, 1);

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    spec("get", 2, RF, ONE, "string", "1.0.0", "Get the value of a key", READ_FAST, get),
    spec("set", -3, WD, ONE, "string", "1.0.0", "Set the string value of a key", WRITE_SLOW, set).pushes(Pushes::Set),
    spec("setnx", 3, WDF, ONE, "string", "1.0.0", "Set the value of a key, only if the key does not exist", WRITE_FAST, setnx).pushes(Pushes::First),
    spec("setex", 4, WD, ONE, "string", "2.0.0", "Set the value and expiration of a key", WRITE_SLOW, setex).pushes(Pushes::First),
    spec("psetex", 4, WD, ONE, "string", "2.6.0", "Set the value and expiration in milliseconds of a key", WRITE_SLOW, psetex).pushes(Pushes::First),
    spec("mget", -2, RF, (1, -1, 1), "string", "1.0.0", "Get the values of all the given keys", READ_FAST, mget),
    spec("mset", -3, WD, (1, -1, 2), "string", "1.0.1", "Set multiple keys to multiple values", WRITE_SLOW, mset).pushes(Pushes::First),
    spec("msetnx", -3, WD, (1, -1, 2), "string", "1.0.1", "Set multiple keys to multiple values, only if none of the keys exist", WRITE_SLOW, msetnx).pushes(Pushes::First),
    spec("getset", 3, WDF, ONE, "string", "1.0.0", "Set the string value of a key and return its old value", WRITE_FAST, getset).pushes(Pushes::NewAfter),
    spec("getdel", 2, W | FAST, ONE, "string", "6.2.0", "Get the value of a key and delete the key", WRITE_FAST, getdel),
    spec("delifeq", 3, W | FAST, ONE, "string", "9.0.0", "Delete the key if its value equals the given string", WRITE_FAST, delifeq),
    spec("delex", -2, W | FAST, ONE, "string", "8.4.0", "Conditionally removes the specified key based on value or digest comparison.", WRITE_FAST, delex).pushes(Pushes::First),
    spec("digest", 2, RF, ONE, "string", "8.4.0", "Returns the XXH3 hash of a string value.", READ_FAST, digest_cmd),
    spec("getex", -2, W | FAST, ONE, "string", "6.2.0", "Get the value of a key and optionally set its expiration", WRITE_FAST, getex),
    spec("append", 3, WDF, ONE, "string", "2.0.0", "Append a value to a key", WRITE_FAST, append).pushes(Pushes::First),
    spec("strlen", 2, RF, ONE, "string", "2.2.0", "Get the length of the value stored in a key", READ_FAST, strlen),
    spec("incr", 2, WDF, ONE, "string", "1.0.0", "Increment the integer value of a key by one", WRITE_FAST, incr).pushes(Pushes::First),
    spec("decr", 2, WDF, ONE, "string", "1.0.0", "Decrement the integer value of a key by one", WRITE_FAST, decr).pushes(Pushes::First),
    spec("incrby", 3, WDF, ONE, "string", "1.0.0", "Increment the integer value of a key by the given amount", WRITE_FAST, incrby).pushes(Pushes::First),
    spec("decrby", 3, WDF, ONE, "string", "1.0.0", "Decrement the integer value of a key by the given number", WRITE_FAST, decrby).pushes(Pushes::First),
    spec("incrbyfloat", 3, WDF, ONE, "string", "2.6.0", "Increment the float value of a key by the given amount", WRITE_FAST, incrbyfloat).pushes(Pushes::First),
    spec("getrange", 4, READONLY, ONE, "string", "2.4.0", "Get a substring of the string stored at a key", READ_SLOW, getrange),
    spec("substr", 4, READONLY, ONE, "string", "1.0.0", "Get a substring of the string stored at a key", READ_SLOW, getrange),
    spec("setrange", 4, WD, ONE, "string", "2.2.0", "Overwrite part of a string at key starting at the specified offset", WRITE_SLOW, setrange).pushes(Pushes::First),
    spec("lcs", -3, READONLY, (1, 2, 1), "string", "7.0.0", "Find longest common substring", READ_SLOW, lcs::lcs),
];

use super::Pushes;
use crate::util::c_str_eq as cstr_eq;

fn get(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    match db.get_str(&args[1]) {
        Ok(Some(v)) => out.bulk(v),
        Ok(None) => out.null(),
        Err(_) => out.error(WRONGTYPE),
    }
}

/// Redis's getGenericCommand: replies with the value or null; Err after
/// replying WRONGTYPE.
fn get_reply(ctx: &mut Ctx, key: &[u8]) -> Result<bool, ()> {
    let (db, out) = ctx.db_out();
    match db.get_str(key) {
        Ok(Some(v)) => {
            out.bulk(v);
            Ok(true)
        }
        Ok(None) => {
            out.null();
            Ok(false)
        }
        Err(_) => {
            out.error(WRONGTYPE);
            Err(())
        }
    }
}

pub(super) fn expire_error(out: &mut Out, e: ExpireError, cmd: &str) {
    match e {
        ExpireError::NotInt => out.error(NOT_INT),
        ExpireError::Invalid => out.error(&format!("ERR invalid expire time in '{cmd}' command")),
    }
}

/// Which reply SETNX-style callers want instead of +OK / null.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Replies {
    OkNull,
    OneZero,
}

/// Redis's setGenericCommand: expire check, optional GET, NX/XX, store.
fn set_generic(ctx: &mut Ctx, cmd: &str, key: &Bytes, val: &[u8], o: opts::Opts, replies: Replies) {
    let when = match o.expire {
        Some(arg) => match opts::expire_at(o.flags, arg) {
            Ok(ms) => Some(ms),
            Err(e) => return expire_error(ctx.out, e, cmd),
        },
        None => None,
    };
    let get = o.flags & opts::GET != 0;
    if get && get_reply(ctx, key).is_err() {
        return;
    }
    let db = ctx.db();
    let found = db.get_str_write(key).map_or(true, |v| v.is_some());
    let cond = o.flags & (opts::IFEQ | opts::IFNE | opts::IFDEQ | opts::IFDNE);
    // Redis 8.4's setGenericCommand: IFEQ/IFDEQ never create the key,
    // IFNE/IFDNE do; an existing key must be a string to be compared.
    let mut fails = (o.flags & opts::NX != 0 && found)
        || (o.flags & (opts::XX | opts::IFEQ | opts::IFDEQ) != 0 && !found);
    if !fails && found && cond != 0 {
        fails = match db.get_str(key) {
            Ok(Some(cur)) => !digest::holds(cond, o.cmp.unwrap_or_default(), cur),
            Ok(None) => false,
            Err(_) => return ctx.error(WRONGTYPE),
        };
    }
    if fails {
        if !get {
            match replies {
                Replies::OkNull => ctx.out.null(),
                Replies::OneZero => ctx.out.int(0),
            }
        }
        return;
    }
    db.set_str(key, val, o.flags & opts::KEEPTTL != 0, false);
    if let Some(ms) = when {
        // A time already passed (EXAT/PXAT) leaves the key to expire lazily.
        db.set_expire_lazy(key, ms);
    }
    if !get {
        match replies {
            Replies::OkNull => ctx.out.ok(),
            Replies::OneZero => ctx.out.int(1),
        }
    }
}

/// SET key value [NX | XX | IFEQ v | IFNE v | IFDEQ d | IFDNE d] [GET]
/// [EX s | PX ms | EXAT ts | PXAT ms-ts | KEEPTTL] (the IF* conditions are
/// Redis 8.4's: https://redis.io/docs/latest/commands/set/).
fn set(ctx: &mut Ctx, args: &[Bytes]) {
    let Ok(o) = opts::parse(args, 3, true) else {
        return ctx.error(SYNTAX);
    };
    if o.flags & (opts::IFDEQ | opts::IFDNE) != 0 && !o.cmp.is_some_and(digest::valid) {
        return ctx.error(digest::BAD_DIGEST);
    }
    set_generic(ctx, "set", &args[1], &args[2], o, Replies::OkNull);
}

fn setnx(ctx: &mut Ctx, args: &[Bytes]) {
    let o = opts::Opts {
        flags: opts::NX,
        expire: None,
        cmp: None,
    };
    set_generic(ctx, "setnx", &args[1], &args[2], o, Replies::OneZero);
}

fn setex(ctx: &mut Ctx, args: &[Bytes]) {
    let o = opts::Opts {
        flags: opts::EX,
        expire: Some(&args[2]),
        cmp: None,
    };
    set_generic(ctx, "setex", &args[1], &args[3], o, Replies::OkNull);
}

fn psetex(ctx: &mut Ctx, args: &[Bytes]) {
    let o = opts::Opts {
        flags: opts::PX,
        expire: Some(&args[2]),
        cmp: None,
    };
    set_generic(ctx, "psetex", &args[1], &args[3], o, Replies::OkNull);
}

fn mget(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    out.array(args.len() - 1);
    for k in &args[1..] {
        match db.get_str(k) {
            Ok(Some(v)) => out.bulk(v),
            _ => out.null(),
        }
    }
}

fn mset(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len().is_multiple_of(2) {
        return ctx.error("ERR wrong number of arguments for 'mset' command");
    }
    let db = ctx.db();
    for kv in args[1..].chunks_exact(2) {
        db.set_str(&kv[0], &kv[1], false, false);
    }
    ctx.out.ok();
}

fn msetnx(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len().is_multiple_of(2) {
        return ctx.error("ERR wrong number of arguments for 'msetnx' command");
    }
    let db = ctx.db();
    for kv in args[1..].chunks_exact(2) {
        if db.get_str_write(&kv[0]).map_or(true, |v| v.is_some()) {
            return ctx.out.int(0);
        }
    }
    for kv in args[1..].chunks_exact(2) {
        db.set_str(&kv[0], &kv[1], false, false);
    }
    ctx.out.int(1);
}

fn getset(ctx: &mut Ctx, args: &[Bytes]) {
    if get_reply(ctx, &args[1]).is_err() {
        return;
    }
    ctx.db().set_str(&args[1], &args[2], false, false);
}

fn getdel(ctx: &mut Ctx, args: &[Bytes]) {
    if let Ok(true) = get_reply(ctx, &args[1]) {
        ctx.db().remove(&args[1]);
    }
}

/// DELIFEQ key value (Valkey 9): the safe lock release. Deletes only while
/// the key still holds the caller's token; 0 when absent or different.
fn delifeq(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    match db.get_str(&args[1]) {
        Err(_) => out.error(WRONGTYPE),
        Ok(Some(v)) if v == &args[2][..] => {
            db.remove(&args[1]);
            out.int(1);
        }
        Ok(_) => out.int(0),
    }
}

/// DELEX key [IFEQ v | IFNE v | IFDEQ d | IFDNE d] (Redis 8.4,
/// https://redis.io/docs/latest/commands/delex/): without a condition a
/// DEL of one key of any type; with one, the key must be a string and is
/// deleted only if the condition holds. 1 if deleted, else 0.
fn delex(ctx: &mut Ctx, args: &[Bytes]) {
    let cond = match args.len() {
        2 => None,
        4 => {
            let Some(c) = opts::condition(&args[2]) else {
                return ctx.error(SYNTAX);
            };
            if c & (opts::IFDEQ | opts::IFDNE) != 0 && !digest::valid(&args[3]) {
                return ctx.error(digest::BAD_DIGEST);
            }
            Some(c)
        }
        _ => return ctx.error(SYNTAX),
    };
    let (db, out) = ctx.db_out();
    let Some(c) = cond else {
        return out.int(i64::from(db.remove(&args[1])));
    };
    match db.get_str_write(&args[1]) {
        Err(_) => out.error(WRONGTYPE),
        Ok(Some(cur)) if digest::holds(c, &args[3], cur) => {
            db.remove(&args[1]);
            out.int(1);
        }
        Ok(_) => out.int(0),
    }
}

/// DIGEST key (Redis 8.4, https://redis.io/docs/latest/commands/digest/):
/// the value's XXH3 digest as 16 hex digits; null for a missing key.
fn digest_cmd(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    match db.get_str(&args[1]) {
        Ok(Some(v)) => out.bulk(&digest::hex(v)),
        Ok(None) => out.null(),
        Err(_) => out.error(WRONGTYPE),
    }
}

/// GETEX key [EX s | PX ms | EXAT ts | PXAT ms-ts | PERSIST]
fn getex(ctx: &mut Ctx, args: &[Bytes]) {
    let Ok(o) = opts::parse(args, 2, false) else {
        return ctx.error(SYNTAX);
    };
    let key = &args[1];
    let (db, out) = ctx.db_out();
    let val = match db.get_str(key) {
        Ok(Some(v)) => v,
        Ok(None) => return out.null(),
        Err(_) => return out.error(WRONGTYPE),
    };
    // The expire is validated only once the key is known to exist.
    let when = match o.expire {
        Some(arg) => match opts::expire_at(o.flags, arg) {
            Ok(ms) => Some(ms),
            Err(e) => return expire_error(out, e, "getex"),
        },
        None => None,
    };
    out.bulk(val);
    if let Some(ms) = when {
        // A time already passed (EXAT/PXAT) deletes the key, as in Redis.
        db.set_expire(key, ms);
    } else if o.flags & opts::PERSIST != 0 {
        db.persist(key);
    }
}

fn append(ctx: &mut Ctx, args: &[Bytes]) {
    let max = ctx.store.config().proto_max_bulk_len;
    let (key, add) = (&args[1], &args[2]);
    let db = ctx.db();
    let len = match db.get_str_write(key) {
        Err(_) => return ctx.error(WRONGTYPE),
        Ok(None) => {
            db.set_str_ev(key, add, false, false, Event::string("append"));
            return ctx.out.int(add.len() as i64);
        }
        Ok(Some(v)) => v.len(),
    };
    if len + add.len() > max {
        return ctx.error("ERR string exceeds maximum allowed size (proto-max-bulk-len)");
    }
    // Even an empty append converts the value to "raw", as in Redis.
    let Ok(Some(v)) = db.str_mut(key) else {
        unreachable!("key checked above");
    };
    v.extend_from_slice(add);
    let total = v.len();
    db.touch_modified(key, Event::string("append"));
    ctx.out.int(total as i64);
}

fn strlen(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    match db.get_str(&args[1]) {
        Ok(v) => out.int(v.map_or(0, |v| v.len()) as i64),
        Err(_) => out.error(WRONGTYPE),
    }
}

/// Redis's incrDecrCommand: the value must be a string2ll integer; the TTL
/// is kept.
fn incr_by(ctx: &mut Ctx, key: &Bytes, by: i64) {
    let db = ctx.db();
    let cur = match db.get_str_write(key) {
        Err(_) => return ctx.error(WRONGTYPE),
        Ok(None) => 0,
        Ok(Some(v)) => match crate::util::parse_i64(v) {
            Some(n) => n,
            None => return ctx.error(NOT_INT),
        },
    };
    let Some(n) = cur.checked_add(by) else {
        return ctx.error("ERR increment or decrement would overflow");
    };
    db.set_str_ev(
        key,
        itoa::Buffer::new().format(n).as_bytes(),
        true,
        false,
        Event::string("incrby"),
    );
    ctx.out.int(n);
}

fn incr(ctx: &mut Ctx, args: &[Bytes]) {
    incr_by(ctx, &args[1], 1);
}

fn decr(ctx: &mut Ctx, args: &[Bytes]) {
    incr_by(ctx, &args[1], -1);
}

fn incrby(ctx: &mut Ctx, args: &[Bytes]) {
    if let Some(by) = arg_i64(ctx, &args[2]) {
        incr_by(ctx, &args[1], by);
    }
}

fn decrby(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(by) = arg_i64(ctx, &args[2]) else {
        return;
    };
    if by == i64::MIN {
        return ctx.error("ERR decrement would overflow");
    }
    incr_by(ctx, &args[1], -by);
}

fn incrbyfloat(ctx: &mut Ctx, args: &[Bytes]) {
    let key = &args[1];
    let db = ctx.db();
    let res = match db.get_str_write(key) {
        Err(_) => return ctx.error(WRONGTYPE),
        Ok(cur) => incr_by_float(cur, &args[2]),
    };
    match res {
        Ok(v) => {
            // Stored like Redis's createStringObjectFromLongDouble: never
            // "int" encoded, and the TTL is kept.
            db.set_str_ev(key, &v, true, true, Event::string("incrbyfloat"));
            ctx.out.bulk(&v);
        }
        Err(FloatError::Value | FloatError::Increment) => ctx.error(NOT_FLOAT),
        Err(FloatError::NanOrInf) => ctx.error("ERR increment would produce NaN or Infinity"),
    }
}

/// GETRANGE / SUBSTR key start end: inclusive, negative counts from the end.
fn getrange(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(start) = arg_i64(ctx, &args[2]) else {
        return;
    };
    let Some(end) = arg_i64(ctx, &args[3]) else {
        return;
    };
    let (db, out) = ctx.db_out();
    let s = match db.get_str(&args[1]) {
        Ok(Some(s)) => s,
        Ok(None) => return out.bulk(b""),
        Err(_) => return out.error(WRONGTYPE),
    };
    match range(s.len(), start, end) {
        Some((a, b)) => out.bulk(&s[a..=b]),
        None => out.bulk(b""),
    }
}

/// The inclusive byte range GETRANGE returns, or None for an empty reply.
fn range(len: usize, mut start: i64, mut end: i64) -> Option<(usize, usize)> {
    if (start < 0 && end < 0 && start > end) || len == 0 {
        return None;
    }
    let n = len as i64;
    if start < 0 {
        start = start.saturating_add(n);
    }
    if end < 0 {
        end = end.saturating_add(n);
    }
    let start = start.max(0);
    let end = end.max(0).min(n - 1);
    (start <= end).then_some((start as usize, end as usize))
}

/// SETRANGE key offset value: zero-pads, keeps the TTL, converts to "raw".
fn setrange(ctx: &mut Ctx, args: &[Bytes]) {
    let max = ctx.store.config().proto_max_bulk_len;
    let (key, val) = (&args[1], &args[3]);
    let Some(offset) = arg_i64(ctx, &args[2]) else {
        return;
    };
    if offset < 0 {
        return ctx.error("ERR offset is out of range");
    }
    let db = ctx.db();
    let cur_len = match db.get_str_write(key) {
        Err(_) => return ctx.error(WRONGTYPE),
        Ok(v) => v.map(|v| v.len()),
    };
    if val.is_empty() {
        return ctx.out.int(cur_len.unwrap_or(0) as i64);
    }
    let end = (offset as u64).checked_add(val.len() as u64);
    let Some(end) = end.filter(|&e| e <= max as u64) else {
        return ctx.error("ERR string exceeds maximum allowed size (proto-max-bulk-len)");
    };
    let (offset, end) = (offset as usize, end as usize);
    if cur_len.is_none() {
        // A new key: build the whole value, then make it raw like Redis's
        // createObject (no extra change event: str_mut only re-encodes).
        let mut v = vec![0u8; end];
        v[offset..].copy_from_slice(val);
        db.set_str_ev(key, &v, false, false, Event::string("setrange"));
        let _ = db.str_mut(key);
        return ctx.out.int(end as i64);
    }
    let Ok(Some(v)) = db.str_mut(key) else {
        unreachable!("key checked above");
    };
    if v.len() < end {
        v.resize(end, 0);
    }
    v[offset..end].copy_from_slice(val);
    let total = v.len();
    db.touch_modified(key, Event::string("setrange"));
    ctx.out.int(total as i64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getrange_indexes() {
        assert_eq!(range(5, 0, -1), Some((0, 4)));
        assert_eq!(range(5, -3, -1), Some((2, 4)));
        assert_eq!(range(5, -1, -3), None);
        assert_eq!(range(5, 3, 1), None);
        assert_eq!(range(5, 0, 100), Some((0, 4)));
        assert_eq!(range(5, -100, 2), Some((0, 2)));
        assert_eq!(range(5, 10, 20), None);
        assert_eq!(range(0, 0, -1), None);
        assert_eq!(range(5, i64::MIN, i64::MAX), Some((0, 4)));
        assert_eq!(range(5, i64::MAX, i64::MAX), None);
        assert_eq!(range(5, -1, i64::MIN), None);
    }

    #[test]
    fn option_names_stop_at_nul() {
        assert!(cstr_eq(b"IDX", "idx"));
        assert!(cstr_eq(b"len\0x", "len"));
        assert!(!cstr_eq(b"lenx", "len"));
    }
}
