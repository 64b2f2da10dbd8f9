//! Hash field expiration: Redis 7.4's HEXPIRE, HPEXPIRE, HEXPIREAT,
//! HPEXPIREAT, HTTL, HPTTL, HEXPIRETIME, HPEXPIRETIME and HPERSIST, and
//! Redis 8.0's HGETEX, HSETEX and HGETDEL (also Valkey 9.0's forms of the
//! first nine). Replies, error texts and the order of the checks follow
//! Redis's t_hash.c and the redis.io command pages.
//!
//! Field deadlines live in `types::hash` (beside the fields); the keyspace
//! (`db`) deletes due fields when the key is looked up or by the active
//! expiry cycle, so a command here never sees an expired field. The guard
//! records each command's event (`hexpire`, `hpersist`, `hdel`, `hset`);
//! what a command leaves in the log is built by `propagate` (absolute
//! HPEXPIREAT, HDEL for deleted fields, as Redis rewrites them).

use bytes::Bytes;

use super::hash::{limits, ONE, READ_FAST, RF, WDF, WF, WRITE_FAST};
use super::propagate;
use super::*;
use crate::db::Guard;
use crate::types::hash::Hash;
use crate::util::{cmd_time_ms, eq_ic, parse_i64};

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    spec("hexpire", -6, WDF, ONE, "hash", "7.4.0", "Set expiry for hash field using relative time to expire (seconds)", WRITE_FAST, hexpire),
    spec("hpexpire", -6, WDF, ONE, "hash", "7.4.0", "Set expiry for hash field using relative time to expire (milliseconds)", WRITE_FAST, hpexpire),
    spec("hexpireat", -6, WDF, ONE, "hash", "7.4.0", "Set expiry for hash field using an absolute Unix timestamp (seconds)", WRITE_FAST, hexpireat),
    spec("hpexpireat", -6, WDF, ONE, "hash", "7.4.0", "Set expiry for hash field using an absolute Unix timestamp (milliseconds)", WRITE_FAST, hpexpireat),
    spec("httl", -5, RF, ONE, "hash", "7.4.0", "Returns the TTL in seconds of a hash field.", READ_FAST, httl),
    spec("hpttl", -5, RF, ONE, "hash", "7.4.0", "Returns the TTL in milliseconds of a hash field.", READ_FAST, hpttl),
    spec("hexpiretime", -5, RF, ONE, "hash", "7.4.0", "Returns the expiration time of a hash field as a Unix timestamp, in seconds.", READ_FAST, hexpiretime),
    spec("hpexpiretime", -5, RF, ONE, "hash", "7.4.0", "Returns the expiration time of a hash field as a Unix timestamp, in msec.", READ_FAST, hpexpiretime),
    spec("hpersist", -5, WF, ONE, "hash", "7.4.0", "Removes the expiration time for each specified field", WRITE_FAST, hpersist),
    spec("hgetex", -5, WF, ONE, "hash", "8.0.0", "Get the value of one or more fields of a given hash key, and optionally set their expiration.", WRITE_FAST, hgetex),
    spec("hsetex", -6, WDF, ONE, "hash", "8.0.0", "Set the value of one or more fields of a given hash key, and optionally set their expiration.", WRITE_FAST, hsetex),
    spec("hgetdel", -5, WF, ONE, "hash", "8.0.0", "Returns the value of a field and deletes it from the hash.", WRITE_FAST, hgetdel),
];

/// Redis's `HFE_MAX_ABS_TIME_MSEC` (`EB_EXPIRE_TIME_MAX >> 2`, 2^46 - 1):
/// the latest deadline a command may set.
const MAX_ABS_MS: i64 = ((1i64 << 48) - 1) >> 2;

const MISSING_FIELDS: &str =
    "ERR Mandatory argument FIELDS is missing or not at the right position";
const NUMFIELDS_MISMATCH: &str = "ERR The `numfields` parameter must match the number of arguments";
const NUMFIELDS_POSITIVE: &str = "ERR Number of fields must be a positive integer";

/// Redis's parseExpireTime: an expire argument in `secs` or milliseconds,
/// plus `base` (now for relative forms), as a Unix time in milliseconds.
fn parse_expire(a: &[u8], secs: bool, base: i64, name: &str) -> Result<i64, String> {
    let mut v = parse_i64(a).ok_or_else(|| NOT_INT.to_string())?;
    if v < 0 {
        return Err("ERR invalid expire time, must be >= 0".into());
    }
    let bad = || format!("ERR invalid expire time in '{name}' command");
    if secs {
        if v > MAX_ABS_MS / 1000 {
            return Err(bad());
        }
        v *= 1000;
    }
    if v > MAX_ABS_MS - base {
        return Err(bad());
    }
    Ok(v + base)
}

/// `FIELDS numfields field ...` starting at `at` and running to the end of
/// the arguments: the fields, or the error reply. `positive` is the
/// command's text for a count that is not a positive integer.
fn fields_at<'a>(args: &'a [Bytes], at: usize, positive: &str) -> Result<&'a [Bytes], String> {
    if at + 1 >= args.len() {
        return Err(arity_error(&args[0]));
    }
    if !eq_ic(&args[at], "fields") {
        return Err(MISSING_FIELDS.into());
    }
    let n = match parse_i64(&args[at + 1]) {
        Some(n) if n >= 1 => n,
        _ => return Err(positive.into()),
    };
    let fields = &args[at + 2..];
    if n as u64 != fields.len() as u64 {
        return Err(NUMFIELDS_MISMATCH.into());
    }
    Ok(fields)
}

/// The write lookup of the FIELDS commands, after their arguments are
/// checked: writes the reply's array header; for a missing key answers
/// `missing` per field and returns None (Redis: a missing key is an empty
/// hash).
fn open_fields<'a>(
    db: &'a mut Db,
    out: &mut Out,
    key: &Bytes,
    fields: &[Bytes],
    event: &'static str,
    missing: fn(&mut Out),
) -> Option<Guard<'a, Hash>> {
    let g = typed(out, db.write::<Hash>(key, Event::hash(event)))?;
    out.array(fields.len());
    if g.is_none() {
        fields.iter().for_each(|_| missing(out));
    }
    g
}

/// The type check and `FIELDS` arguments at index 2 of HPERSIST and
/// HGETDEL, in Redis's order; None once answered.
fn simple_fields<'a>(db: &mut Db, out: &mut Out, args: &'a [Bytes]) -> Option<&'a [Bytes]> {
    typed(out, db.check_type::<Hash>(&args[1]))?;
    match fields_at(args, 2, NUMFIELDS_POSITIVE) {
        Ok(f) => Some(f),
        Err(e) => {
            out.error(&e);
            None
        }
    }
}

fn arity_error(name: &[u8]) -> String {
    format!(
        "ERR wrong number of arguments for '{}' command",
        String::from_utf8_lossy(name).to_lowercase()
    )
}

/// HEXPIRE's NX | XX | GT | LT.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cond {
    Nx,
    Xx,
    Gt,
    Lt,
}

impl Cond {
    fn parse(a: &[u8]) -> Option<Cond> {
        [
            ("nx", Cond::Nx),
            ("xx", Cond::Xx),
            ("gt", Cond::Gt),
            ("lt", Cond::Lt),
        ]
        .into_iter()
        .find(|(s, _)| eq_ic(a, s))
        .map(|(_, c)| c)
    }

    /// Whether a field whose deadline is `prev` may get `when` (a field
    /// without one counts as never expiring, as Redis).
    fn allows(self, prev: Option<i64>, when: i64) -> bool {
        match self {
            Cond::Nx => prev.is_none(),
            Cond::Xx => prev.is_some(),
            Cond::Gt => prev.is_some_and(|p| when > p),
            Cond::Lt => prev.is_none_or(|p| when < p),
        }
    }
}

/// Whether a deadline is already due, so the field is deleted instead of
/// getting it (Redis's checkAlreadyExpired; the AOF's replay keeps it, as
/// Redis while loading).
fn already_due(ctx: &Ctx, when: i64) -> bool {
    when <= cmd_time_ms() && !ctx.conn.obey
}

fn hexpire(ctx: &mut Ctx, args: &[Bytes]) {
    hexpire_generic(ctx, args, "hexpire", true, true);
}

fn hpexpire(ctx: &mut Ctx, args: &[Bytes]) {
    hexpire_generic(ctx, args, "hpexpire", false, true);
}

fn hexpireat(ctx: &mut Ctx, args: &[Bytes]) {
    hexpire_generic(ctx, args, "hexpireat", true, false);
}

fn hpexpireat(ctx: &mut Ctx, args: &[Bytes]) {
    hexpire_generic(ctx, args, "hpexpireat", false, false);
}

/// HEXPIRE key time [NX | XX | GT | LT] FIELDS numfields field ...: per
/// field -2 (no such field), 0 (condition not met), 1 (set), 2 (deleted:
/// the time is already due).
fn hexpire_generic(ctx: &mut Ctx, args: &[Bytes], name: &str, secs: bool, relative: bool) {
    let key = &args[1];
    let base = if relative { cmd_time_ms() } else { 0 };
    let due_check = |ctx: &Ctx, w: i64| already_due(ctx, w);
    let dbid = ctx.conn.db;
    {
        let (db, out) = ctx.db_out();
        if typed(out, db.check_type::<Hash>(key)).is_none() {
            return;
        }
    }
    let when = match parse_expire(&args[2], secs, base, name) {
        Ok(w) => w,
        Err(e) => return ctx.error(&e),
    };
    let cond = Cond::parse(&args[3]);
    let at = if cond.is_some() { 4 } else { 3 };
    let fields = match fields_at(
        args,
        at,
        "ERR Parameter `numFields` should be greater than 0",
    ) {
        Ok(f) => f,
        Err(e) => return ctx.error(&e),
    };
    let delete = due_check(ctx, when);
    let db = ctx.store.ks.db_mut(dbid);
    let out = &mut *ctx.out;
    let Some(mut h) = open_fields(db, out, key, fields, "hexpire", |o| o.int(-2)) else {
        return;
    };
    h.enable_field_ttls();
    let mut updated = Vec::new();
    let mut deleted = Vec::new();
    for f in fields {
        if !h.contains(f) {
            out.int(-2);
        } else if !cond.is_none_or(|c| c.allows(h.field_ttl(f), when)) {
            out.int(0);
        } else if delete {
            h.remove(f);
            deleted.push(f.clone());
            out.int(2);
        } else {
            h.set_field_ttl(f, when);
            updated.push(f.clone());
            out.int(1);
        }
    }
    if !deleted.is_empty() {
        h.set_event(Event::hash("hdel"));
    } else if updated.is_empty() {
        h.no_change();
    }
    drop(h);
    if !deleted.is_empty() || !updated.is_empty() {
        let then = (!updated.is_empty()).then(|| {
            let mut v = vec![
                Bytes::from_static(b"HPEXPIREAT"),
                key.clone(),
                Bytes::from(when.to_string()),
            ];
            if cond.is_some() {
                v.push(args[3].clone());
            }
            v.push(Bytes::from_static(b"FIELDS"));
            v.push(Bytes::from(updated.len().to_string()));
            v.extend(updated);
            v
        });
        ctx.conn.rewrite = Some(propagate::hash_fields(dbid, key, &deleted, then));
    }
}

fn httl(ctx: &mut Ctx, args: &[Bytes]) {
    httl_generic(ctx, args, true, true);
}

fn hpttl(ctx: &mut Ctx, args: &[Bytes]) {
    httl_generic(ctx, args, false, true);
}

fn hexpiretime(ctx: &mut Ctx, args: &[Bytes]) {
    httl_generic(ctx, args, true, false);
}

fn hpexpiretime(ctx: &mut Ctx, args: &[Bytes]) {
    httl_generic(ctx, args, false, false);
}

/// HTTL key FIELDS numfields field ...: per field -2 (no such field), -1
/// (no TTL), or the TTL / deadline (seconds rounded up, as Redis).
fn httl_generic(ctx: &mut Ctx, args: &[Bytes], secs: bool, relative: bool) {
    let now = cmd_time_ms();
    let base = if relative { now } else { 0 };
    let (db, out) = ctx.db_out();
    let Some(h) = typed(out, db.read::<Hash>(&args[1])) else {
        return;
    };
    let fields = match fields_at(args, 2, NUMFIELDS_POSITIVE) {
        Ok(f) => f,
        Err(e) => return out.error(&e),
    };
    out.array(fields.len());
    for f in fields {
        match h {
            Some(h) if h.contains(f) => match h.field_ttl(f) {
                None => out.int(-1),
                // Due but not deleted yet (a read during CLIENT PAUSE):
                // gone, as Redis answers.
                Some(w) if w < now => out.int(-2),
                Some(w) if secs => out.int((w + 999 - base) / 1000),
                Some(w) => out.int(w - base),
            },
            _ => out.int(-2),
        }
    }
}

/// HPERSIST key FIELDS numfields field ...: per field -2, -1 (no TTL) or 1.
fn hpersist(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    let Some(fields) = simple_fields(db, out, args) else {
        return;
    };
    let Some(mut h) = open_fields(db, out, &args[1], fields, "hpersist", |o| o.int(-2)) else {
        return;
    };
    let mut changed = false;
    for f in fields {
        if !h.contains(f) {
            out.int(-2);
        } else if h.field_ttl(f).is_none() {
            out.int(-1);
        } else {
            h.persist_field(f);
            changed = true;
            out.int(1);
        }
    }
    if !changed {
        h.no_change();
    }
}

/// HGETEX's expiration option.
#[derive(Clone, Copy, PartialEq, Eq)]
enum GetExOpt {
    None,
    Persist,
    /// EX, PX, EXAT or PXAT: the deadline.
    At(i64),
}

/// HGETEX key [EX seconds | PX ms | EXAT s | PXAT ms | PERSIST] FIELDS
/// numfields field ...: the values (nil for a missing field), setting or
/// clearing the TTL of the fields found.
fn hgetex(ctx: &mut Ctx, args: &[Bytes]) {
    let key = &args[1];
    let dbid = ctx.conn.db;
    {
        let (db, out) = ctx.db_out();
        if typed(out, db.check_type::<Hash>(key)).is_none() {
            return;
        }
    }
    let now = cmd_time_ms();
    let o = &args[2];
    let (opt, at) = if eq_ic(o, "persist") {
        (GetExOpt::Persist, 3)
    } else if let Some((secs, base)) = [
        ("ex", true, now),
        ("px", false, now),
        ("exat", true, 0),
        ("pxat", false, 0),
    ]
    .iter()
    .find(|(n, ..)| eq_ic(o, n))
    .map(|(_, s, b)| (*s, *b))
    {
        match parse_expire(&args[3], secs, base, "hgetex") {
            Ok(w) => (GetExOpt::At(w), 4),
            Err(e) => return ctx.error(&e),
        }
    } else {
        (GetExOpt::None, 2)
    };
    let fields = match fields_at(args, at, NUMFIELDS_POSITIVE) {
        Ok(f) => f,
        Err(e) => return ctx.error(&e),
    };
    let delete = matches!(opt, GetExOpt::At(w) if already_due(ctx, w));
    let db = ctx.store.ks.db_mut(dbid);
    let out = &mut *ctx.out;
    let Some(mut h) = open_fields(db, out, key, fields, "hexpire", Out::null) else {
        return;
    };
    if opt != GetExOpt::None {
        h.enable_field_ttls();
    }
    let (mut updated, mut deleted) = (0, Vec::new());
    for f in fields {
        match h.get(f) {
            Some(v) => out.bulk(v),
            None => {
                out.null();
                continue;
            }
        }
        match opt {
            GetExOpt::None => {}
            GetExOpt::Persist => updated += h.persist_field(f) as usize,
            GetExOpt::At(_) if delete => {
                h.remove(f);
                deleted.push(f.clone());
            }
            GetExOpt::At(w) => {
                h.set_field_ttl(f, w);
                updated += 1;
            }
        }
    }
    if updated > 0 {
        if opt == GetExOpt::Persist {
            h.set_event(Event::hash("hpersist"));
        }
    } else if !deleted.is_empty() {
        h.set_event(Event::hash("hdel"));
    } else {
        h.no_change();
    }
    drop(h);
    let logged = if updated > 0 {
        // HPERSIST / HPEXPIREAT with the command's fields, as Redis
        // rewrites HGETEX.
        let mut v = match opt {
            GetExOpt::At(w) => vec![
                Bytes::from_static(b"HPEXPIREAT"),
                key.clone(),
                Bytes::from(w.to_string()),
            ],
            _ => vec![Bytes::from_static(b"HPERSIST"), key.clone()],
        };
        v.extend_from_slice(&args[at..]);
        Some(propagate::hash_fields(dbid, key, &[], Some(v)))
    } else if !deleted.is_empty() {
        Some(propagate::hash_fields(dbid, key, &deleted, None))
    } else {
        None
    };
    if logged.is_some() {
        ctx.conn.rewrite = logged;
    }
}

/// HSETEX's parsed options.
struct SetEx<'a> {
    fnx: bool,
    fxx: bool,
    /// The deadline (EX, PX, EXAT, PXAT) and the index of its argument.
    at: Option<(i64, usize)>,
    keepttl: bool,
    pairs: &'a [Bytes],
}

/// Redis's hsetexParseArgs.
fn parse_setex(args: &[Bytes]) -> Result<SetEx<'_>, String> {
    let now = cmd_time_ms();
    let mut o = SetEx {
        fnx: false,
        fxx: false,
        at: None,
        keepttl: false,
        pairs: &[],
    };
    const ONE_EXPIRY: &str =
        "ERR Only one of EX, PX, EXAT, PXAT or KEEPTTL arguments can be specified";
    let mut i = 2;
    while i < args.len() {
        let a = &args[i];
        if eq_ic(a, "fields") {
            if i + 3 >= args.len() {
                return Err(arity_error(&args[0]));
            }
            let n = match parse_i64(&args[i + 1]) {
                Some(n) if (1..=i32::MAX as i64).contains(&n) => n as usize,
                _ => return Err("ERR invalid number of fields".into()),
            };
            let rest = &args[i + 2..];
            if !rest.len().is_multiple_of(2) || n != rest.len() / 2 {
                return Err(arity_error(&args[0]));
            }
            o.pairs = rest;
            return Ok(o);
        }
        let expiry = [
            ("ex", true, now),
            ("px", false, now),
            ("exat", true, 0),
            ("pxat", false, 0),
        ]
        .into_iter()
        .find(|(n, ..)| eq_ic(a, n));
        if let Some((_, secs, base)) = expiry {
            if o.at.is_some() || o.keepttl {
                return Err(ONE_EXPIRY.into());
            }
            if i + 1 >= args.len() {
                return Err("ERR missing expire time".into());
            }
            i += 1;
            o.at = Some((parse_expire(&args[i], secs, base, "hsetex")?, i));
        } else if eq_ic(a, "keepttl") {
            if o.at.is_some() || o.keepttl {
                return Err(ONE_EXPIRY.into());
            }
            o.keepttl = true;
        } else if eq_ic(a, "fxx") || eq_ic(a, "fnx") {
            if o.fxx || o.fnx {
                return Err("ERR Only one of FXX or FNX arguments can be specified".into());
            }
            o.fxx = eq_ic(a, "fxx");
            o.fnx = !o.fxx;
        } else {
            return Err(format!(
                "ERR unknown argument: {}",
                String::from_utf8_lossy(a)
            ));
        }
        i += 1;
    }
    Err(arity_error(&args[0]))
}

/// HSETEX key [FNX | FXX] [EX | PX | EXAT | PXAT time | KEEPTTL] FIELDS
/// numfields field value ...: 1 when the fields were set, 0 when FNX/FXX
/// stopped it.
fn hsetex(ctx: &mut Ctx, args: &[Bytes]) {
    let o = match parse_setex(args) {
        Ok(o) => o,
        Err(e) => return ctx.error(&e),
    };
    let key = &args[1];
    let dbid = ctx.conn.db;
    let lim = limits(ctx);
    let delete = o.at.is_some_and(|(w, _)| already_due(ctx, w));
    let db = ctx.store.ks.db_mut(dbid);
    let out = &mut *ctx.out;
    let exists = match typed(out, db.check_type::<Hash>(key)) {
        Some(e) => e,
        None => return,
    };
    if !exists && o.fxx {
        return out.int(0);
    }
    let Some(mut h) = typed(out, db.write_or_create::<Hash>(key, Event::hash("hset"))) else {
        return;
    };
    if o.fnx || o.fxx {
        let found = o
            .pairs
            .chunks_exact(2)
            .filter(|p| h.contains(&p[0]))
            .count();
        let n = o.pairs.len() / 2;
        if (o.fnx && found > 0) || (o.fxx && found < n) {
            h.no_change();
            return out.int(0);
        }
    }
    let keep = o.at.is_some() || o.keepttl;
    if o.at.is_some() {
        h.enable_field_ttls();
    }
    for p in o.pairs.chunks_exact(2) {
        if keep {
            h.insert_keep_ttl(&p[0], &p[1], &lim);
        } else {
            h.insert(&p[0], &p[1], &lim);
        }
        if let Some((w, _)) = o.at {
            if delete {
                h.remove(&p[0]);
            } else {
                h.set_field_ttl(&p[0], w);
            }
        }
    }
    if o.at.is_some() {
        h.then(Event::hash(if delete { "hdel" } else { "hexpire" }));
    }
    drop(h);
    out.int(1);
    if delete {
        let fields: Vec<Bytes> = o.pairs.chunks_exact(2).map(|p| p[0].clone()).collect();
        ctx.conn.rewrite = Some(propagate::hash_fields(dbid, key, &fields, None));
    } else if let Some((w, i)) = o.at {
        // EX, PX and EXAT are logged as PXAT with the deadline.
        let mut v = args.to_vec();
        v[i - 1] = Bytes::from_static(b"PXAT");
        v[i] = Bytes::from(w.to_string());
        ctx.conn.rewrite = Some(vec![(dbid, v)]);
    }
}

/// HGETDEL key FIELDS numfields field ...: the values (nil for a missing
/// field), deleting the fields found; logged as HDEL.
fn hgetdel(ctx: &mut Ctx, args: &[Bytes]) {
    let key = &args[1];
    let dbid = ctx.conn.db;
    let db = ctx.store.ks.db_mut(dbid);
    let out = &mut *ctx.out;
    let Some(fields) = simple_fields(db, out, args) else {
        return;
    };
    let Some(mut h) = open_fields(db, out, key, fields, "hdel", Out::null) else {
        return;
    };
    let mut deleted = 0;
    for f in fields {
        match h.get(f) {
            Some(v) => {
                out.bulk(v);
                h.remove(f);
                deleted += 1;
            }
            None => out.null(),
        }
    }
    if deleted == 0 {
        h.no_change();
        return;
    }
    drop(h);
    let mut v = vec![Bytes::from_static(b"HDEL"), key.clone()];
    v.extend_from_slice(fields);
    ctx.conn.rewrite = Some(vec![(dbid, v)]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expire_argument_bounds_as_redis() {
        assert_eq!(parse_expire(b"10", true, 5, "hexpire"), Ok(10_005));
        assert_eq!(
            parse_expire(b"-1", false, 0, "hpexpire").unwrap_err(),
            "ERR invalid expire time, must be >= 0"
        );
        assert_eq!(
            parse_expire(b"x", false, 0, "hpexpire").unwrap_err(),
            NOT_INT
        );
        assert_eq!(
            parse_expire(&MAX_ABS_MS.to_string().into_bytes(), false, 0, "hpexpireat"),
            Ok(MAX_ABS_MS)
        );
        assert_eq!(
            parse_expire(
                &(MAX_ABS_MS + 1).to_string().into_bytes(),
                false,
                0,
                "hpexpireat"
            )
            .unwrap_err(),
            "ERR invalid expire time in 'hpexpireat' command"
        );
        assert!(parse_expire(
            &(MAX_ABS_MS / 1000 + 1).to_string().into_bytes(),
            true,
            0,
            "hexpireat"
        )
        .is_err());
    }

    #[test]
    fn conditions_treat_no_ttl_as_infinite() {
        assert!(Cond::Nx.allows(None, 5) && !Cond::Nx.allows(Some(1), 5));
        assert!(Cond::Xx.allows(Some(1), 5) && !Cond::Xx.allows(None, 5));
        assert!(
            Cond::Gt.allows(Some(1), 5)
                && !Cond::Gt.allows(None, 5)
                && !Cond::Gt.allows(Some(5), 5)
        );
        assert!(
            Cond::Lt.allows(None, 5) && Cond::Lt.allows(Some(9), 5) && !Cond::Lt.allows(Some(5), 5)
        );
    }
}
