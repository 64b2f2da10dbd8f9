//! Set commands (Redis's t_set.c).
//!
//! Every lookup goes through the keyspace's typed lookups (`Db::read`,
//! `Db::write`, `Db::write_or_create`, `Db::replace`), so WRONGTYPE,
//! keyspace events and the deletion of an emptied set happen in one place.
//!
//! The keyspace lends one value at a time, so the multi-key commands look
//! every key up first (counting hits and misses and checking types in key
//! order, as Redis), then work on one set at a time: SINTER and SDIFF copy
//! the members of the set they iterate (the smallest for SINTER, the first
//! for SDIFF) and filter that copy against each other set in turn.
//! Destinations and SUNION/SDIFF results are built member by member into a
//! new set, as Redis builds its `dstset`: an intset while every member is an
//! integer and there are at most `set-max-intset-entries`.
//!
//! Reaches the keyspace only through `Ctx` (and the config for
//! `set-max-intset-entries`). Must not notify anyone itself: the guard and
//! `Db::replace` record each change.

use bytes::Bytes;
use rand::Rng;

use super::Pushes;
use super::*;
use crate::db::{Db, ValueRef};
use crate::resp::Out;
use crate::types::set::{parse_int_member, SetMember};
use crate::types::{Kind, Set};
use crate::util::{eq_ic, parse_i64};

const READ_FAST: &[&str] = &["read", "set", "fast"];
const READ_SLOW: &[&str] = &["read", "set", "slow"];
const WRITE_FAST: &[&str] = &["write", "set", "fast"];
const WRITE_SLOW: &[&str] = &["write", "set", "slow"];

const WDF: u32 = WRITE | DENYOOM | FAST;
const WD: u32 = WRITE | DENYOOM;
const WF: u32 = WRITE | FAST;
const RF: u32 = READONLY | FAST;
const ONE: (i32, i32, i32) = (1, 1, 1);
const ALL: (i32, i32, i32) = (1, -1, 1);

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    spec("sadd", -3, WDF, ONE, "set", "1.0.0", "Add one or more members to a set", WRITE_FAST, sadd).pushes(Pushes::First),
    spec("srem", -3, WF, ONE, "set", "1.0.0", "Remove one or more members from a set", WRITE_FAST, srem).pushes(Pushes::First),
    spec("smembers", 2, READONLY, ONE, "set", "1.0.0", "Get all the members in a set", READ_SLOW, smembers),
    spec("sismember", 3, RF, ONE, "set", "1.0.0", "Determine if a given value is a member of a set", READ_FAST, sismember),
    spec("smismember", -3, RF, ONE, "set", "6.2.0", "Returns the membership associated with the given elements for a set", READ_FAST, smismember),
    spec("scard", 2, RF, ONE, "set", "1.0.0", "Get the number of members in a set", READ_FAST, scard),
    spec("spop", -2, WF, ONE, "set", "1.0.0", "Remove and return one or multiple random members from a set", WRITE_FAST, spop).pushes(Pushes::Spop),
    spec("srandmember", -2, READONLY, ONE, "set", "1.0.0", "Get one or multiple random members from a set", READ_SLOW, srandmember),
    spec("smove", 4, WF, (1, 2, 1), "set", "1.0.0", "Move a member from one set to another", WRITE_FAST, smove).pushes(Pushes::First),
    spec("sinter", -2, READONLY, ALL, "set", "1.0.0", "Intersect multiple sets", READ_SLOW, sinter),
    spec("sintercard", -3, READONLY, (0, 0, 0), "set", "7.0.0", "Intersect multiple sets and return the cardinality of the result", READ_SLOW, sintercard),
    spec("sinterstore", -3, WD, ALL, "set", "1.0.0", "Intersect multiple sets and store the resulting set in a key", WRITE_SLOW, sinterstore),
    spec("sunion", -2, READONLY, ALL, "set", "1.0.0", "Add multiple sets", READ_SLOW, sunion),
    spec("sunionstore", -3, WD, ALL, "set", "1.0.0", "Add multiple sets and store the resulting set in a key", WRITE_SLOW, sunionstore),
    spec("sdiff", -2, READONLY, ALL, "set", "1.0.0", "Subtract multiple sets", READ_SLOW, sdiff),
    spec("sdiffstore", -3, WD, ALL, "set", "1.0.0", "Subtract multiple sets and store the resulting set in a key", WRITE_SLOW, sdiffstore),
    spec("sscan", -3, READONLY, ONE, "set", "2.8.0", "Incrementally iterate Set elements", READ_SLOW, sscan),
];

/// The intset size limit (`set-max-intset-entries`).
fn max_intset(ctx: &Ctx) -> usize {
    ctx.store.config().set_max_intset_entries
}

fn bulk_member(out: &mut Out, m: SetMember<'_>) {
    match m {
        SetMember::Int(v) => out.bulk_int(v),
        SetMember::Bytes(b) => out.bulk(b),
    }
}

/// Replies `s` as a RESP3 set (an array in RESP2), in iteration order.
fn reply_set(out: &mut Out, s: &Set) {
    out.set(s.len());
    for m in s.iter() {
        bulk_member(out, m);
    }
}

fn sadd(ctx: &mut Ctx, args: &[Bytes]) {
    let max = max_intset(ctx);
    let (db, out) = ctx.db_out();
    let Some(mut s) = typed(out, db.write_or_create::<Set>(&args[1], Event::set("sadd"))) else {
        return;
    };
    let mut added = 0;
    for m in &args[2..] {
        added += s.insert(m, max) as i64;
    }
    if added == 0 {
        s.no_change();
    }
    out.int(added);
}

fn srem(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    let Some(g) = typed(out, db.write::<Set>(&args[1], Event::set("srem"))) else {
        return;
    };
    let Some(mut s) = g else {
        return out.int(0);
    };
    let mut removed = 0;
    for m in &args[2..] {
        removed += s.remove(m) as i64;
        if s.is_empty() {
            break;
        }
    }
    if removed == 0 {
        s.no_change();
    }
    out.int(removed);
}

fn smembers(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    match typed(out, db.read::<Set>(&args[1])) {
        Some(Some(s)) => reply_set(out, s),
        Some(None) => out.set(0),
        None => {}
    }
}

fn sismember(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    if let Some(s) = typed(out, db.read::<Set>(&args[1])) {
        out.int(s.is_some_and(|s| s.contains(&args[2])) as i64);
    }
}

fn smismember(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    let Some(s) = typed(out, db.read::<Set>(&args[1])) else {
        return;
    };
    out.array(args.len() - 2);
    for m in &args[2..] {
        out.int(s.is_some_and(|s| s.contains(m)) as i64);
    }
}

fn scard(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    if let Some(s) = typed(out, db.read::<Set>(&args[1])) {
        out.int(s.map_or(0, |s| s.len() as i64));
    }
}

fn spop(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len() > 3 {
        return ctx.error(SYNTAX);
    }
    let count = match args.get(2) {
        None => None,
        Some(a) => match parse_i64(a) {
            Some(n) if n >= 0 => Some(n as u64),
            _ => return ctx.error("ERR value is out of range, must be positive"),
        },
    };
    let max = max_intset(ctx);
    let dbid = ctx.conn.db;
    // Logged as what it removed (a replay must not pick again), as
    // Redis propagates SPOP as SREM (DEL when it took the whole set).
    let mut logged: Vec<Bytes> = vec![Bytes::from_static(b"SREM"), args[1].clone()];
    {
        let (db, out) = ctx.db_out();
        let Some(g) = typed(out, db.write::<Set>(&args[1], Event::set("spop"))) else {
            return;
        };
        let Some(mut s) = g else {
            return match count {
                None => out.null(),
                Some(_) => out.set(0),
            };
        };
        let mut rng = rand::thread_rng();
        match count {
            None => match s.pop_random(rng.gen()) {
                Some(m) => {
                    out.bulk(&m);
                    logged.push(Bytes::from(m.to_vec()));
                }
                None => out.null(),
            },
            Some(0) => out.set(0),
            Some(n) if n >= s.len() as u64 => {
                reply_all_as_union(out, &s, max);
                // Emptied: the guard records "spop", then deletes the key.
                *s = Set::new();
                logged = vec![Bytes::from_static(b"DEL"), args[1].clone()];
            }
            Some(n) => {
                out.set(n as usize);
                for _ in 0..n {
                    if let Some(m) = s.pop_random(rng.gen()) {
                        out.bulk(&m);
                        logged.push(Bytes::from(m.to_vec()));
                    }
                }
            }
        }
    }
    if logged.len() > 2 || logged[0] == "DEL" {
        ctx.conn.rewrite = Some(vec![(dbid, logged)]);
    }
}

/// SPOP of the whole set replies what SUNION of the key would (Redis
/// calls it): the members as inserted into a new set, which comes out
/// sorted when they are all integers and fit an intset.
fn reply_all_as_union(out: &mut Out, s: &Set, max: usize) {
    if !s.is_intset() && s.len() <= max {
        let ints: Option<Vec<i64>> = s
            .iter()
            .map(|m| match m {
                SetMember::Int(v) => Some(v),
                SetMember::Bytes(b) => parse_int_member(b),
            })
            .collect();
        if let Some(mut ints) = ints {
            ints.sort_unstable();
            out.set(ints.len());
            for v in ints {
                out.bulk_int(v);
            }
            return;
        }
    }
    reply_set(out, s);
}

fn srandmember(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len() > 3 {
        return ctx.error(SYNTAX);
    }
    let Some(count) = args.get(2) else {
        let (db, out) = ctx.db_out();
        if let Some(s) = typed(out, db.read::<Set>(&args[1])) {
            match s.and_then(|s| s.random_member(rand::thread_rng().gen())) {
                Some(m) => bulk_member(out, m),
                None => out.null(),
            }
        }
        return;
    };
    let Some(count) = arg_i64(ctx, count) else {
        return;
    };
    if count == i64::MIN {
        return ctx.error(
            "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
        );
    }
    let (db, out) = ctx.db_out();
    let Some(s) = typed(out, db.read::<Set>(&args[1])) else {
        return;
    };
    let Some(s) = s else {
        return out.array(0);
    };
    let mut rng = rand::thread_rng();
    let n = count.unsigned_abs();
    if n == 0 {
        return out.array(0);
    }
    if count < 0 || n == 1 {
        // Independent picks, repeats allowed (Redis's case 1).
        if n > MAX_RANDOM_REPEATS {
            return out.error("ERR value is out of range");
        }
        out.array(n as usize);
        for _ in 0..n {
            if let Some(m) = s.random_member(rng.gen()) {
                bulk_member(out, m);
            }
        }
        return;
    }
    if n >= s.len() as u64 {
        out.array(s.len());
        for m in s.iter() {
            bulk_member(out, m);
        }
        return;
    }
    let picked = s.random_distinct(n as usize, &mut || rng.gen());
    out.array(picked.len());
    for m in picked {
        bulk_member(out, m);
    }
}

fn smove(ctx: &mut Ctx, args: &[Bytes]) {
    let (src, dst, member) = (&args[1], &args[2], &args[3]);
    let max = max_intset(ctx);
    let (db, out) = ctx.db_out();
    let Some(exists) = typed(out, db.check_type::<Set>(src)) else {
        return;
    };
    if !exists {
        return out.int(0);
    }
    if typed(out, db.check_type::<Set>(dst)).is_none() {
        return;
    }
    if src == dst {
        // A no-op: only whether the member is there.
        let found =
            matches!(db.write::<Set>(src, Event::set("srem")), Ok(Some(s)) if s.contains(member));
        return out.int(found as i64);
    }
    let removed = match db.write::<Set>(src, Event::set("srem")) {
        Ok(Some(mut s)) => {
            let r = s.remove(member);
            if !r {
                s.no_change();
            }
            r
        }
        _ => false,
    };
    if !removed {
        return out.int(0);
    }
    if let Ok(mut s) = db.write_or_create::<Set>(dst, Event::set("sadd")) {
        if !s.insert(member, max) {
            s.no_change();
        }
    }
    out.int(1);
}

// ---------------------------------------------------------------------------
// SINTER, SUNION, SDIFF and their variants

/// Looks every key up as a set, in order (Redis's lookupKeyRead and
/// checkType: hits and misses counted, the first WRONGTYPE replied): each
/// set's cardinality, None for a missing key. None after the error.
fn lookup_all(db: &mut Db, out: &mut Out, keys: &[Bytes]) -> Option<Vec<Option<usize>>> {
    let mut cards = Vec::with_capacity(keys.len());
    for k in keys {
        cards.push(typed(out, db.read::<Set>(k))?.map(|s| s.len()));
    }
    Some(cards)
}

/// A set `lookup_all` found (no second hit counted; no WRONGTYPE left).
fn peek<'a>(db: &'a mut Db, key: &[u8]) -> Option<&'a Set> {
    match db.peek(key)? {
        ValueRef::Obj(v) => Set::of(v),
        ValueRef::Str(_) => None,
    }
}

/// Members copied out of one set, in its iteration order, to be filtered
/// against other sets: integers as they are, strings in one buffer.
enum Members {
    Ints(Vec<i64>),
    Strs {
        buf: Vec<u8>,
        spans: Vec<(usize, usize)>,
    },
}

impl Members {
    fn of(s: &Set) -> Members {
        if s.is_intset() {
            let ints = s
                .iter()
                .filter_map(|m| match m {
                    SetMember::Int(v) => Some(v),
                    SetMember::Bytes(_) => None,
                })
                .collect();
            return Members::Ints(ints);
        }
        let mut buf = Vec::new();
        let mut spans = Vec::with_capacity(s.len());
        for m in s.iter() {
            let at = buf.len();
            m.write_to(&mut buf);
            spans.push((at, buf.len()));
        }
        Members::Strs { buf, spans }
    }

    fn len(&self) -> usize {
        match self {
            Members::Ints(v) => v.len(),
            Members::Strs { spans, .. } => spans.len(),
        }
    }

    fn retain(&mut self, mut keep: impl FnMut(SetMember<'_>) -> bool) {
        match self {
            Members::Ints(v) => v.retain(|&i| keep(SetMember::Int(i))),
            Members::Strs { buf, spans } => {
                spans.retain(|&(a, b)| keep(SetMember::Bytes(&buf[a..b])))
            }
        }
    }

    fn for_each(&self, mut f: impl FnMut(SetMember<'_>)) {
        match self {
            Members::Ints(v) => v.iter().for_each(|&i| f(SetMember::Int(i))),
            Members::Strs { buf, spans } => spans
                .iter()
                .for_each(|&(a, b)| f(SetMember::Bytes(&buf[a..b]))),
        }
    }

    /// How many are in `s`, counting up to `limit` (0: no limit).
    fn count_in(&self, s: &Set, limit: usize) -> usize {
        let mut n = 0;
        let full = |n: usize| limit != 0 && n >= limit;
        match self {
            Members::Ints(v) => {
                for &i in v {
                    if full(n) {
                        break;
                    }
                    n += s.contains_int(i) as usize;
                }
            }
            Members::Strs { buf, spans } => {
                for &(a, b) in spans {
                    if full(n) {
                        break;
                    }
                    n += s.contains(&buf[a..b]) as usize;
                }
            }
        }
        n
    }

    fn into_set(self, max: usize) -> Set {
        let mut s = Set::new();
        self.for_each(|m| {
            s.insert_member(m, max);
        });
        s
    }
}

/// What SINTER's family does with the intersection.
#[derive(Clone, Copy)]
enum Inter<'a> {
    Reply,
    /// SINTERCARD with its LIMIT (0: none).
    Card(usize),
    Store(&'a Bytes),
}

/// The reply (and the destination's deletion) for an empty intersection.
fn empty_inter(db: &mut Db, out: &mut Out, mode: Inter) {
    match mode {
        Inter::Reply => out.set(0),
        Inter::Card(_) => out.int(0),
        Inter::Store(dst) => {
            db.remove(dst);
            out.int(0);
        }
    }
}

fn inter_generic(ctx: &mut Ctx, keys: &[Bytes], mode: Inter) {
    let max = max_intset(ctx);
    let (db, out) = ctx.db_out();
    let Some(cards) = lookup_all(db, out, keys) else {
        return;
    };
    if cards.iter().any(|c| c.is_none()) {
        // A missing key is an empty set: so is the intersection.
        return empty_inter(db, out, mode);
    }
    // Smallest first (a stable sort, as glibc's qsort is for Redis).
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| cards[i]);
    let first = order[0];
    let others: Vec<usize> = order[1..]
        .iter()
        .copied()
        .filter(|&i| keys[i] != keys[first])
        .collect();
    let Some(small) = peek(db, &keys[first]) else {
        return empty_inter(db, out, mode);
    };
    if others.is_empty() {
        return match mode {
            Inter::Reply => reply_set(out, small),
            Inter::Card(limit) => {
                let n = small.len();
                out.int(if limit == 0 { n } else { n.min(limit) } as i64)
            }
            Inter::Store(dst) => {
                let mut s = Set::new();
                for m in small.iter() {
                    s.insert_member(m, max);
                }
                let n = s.len();
                db.replace(dst, s, Event::set("sinterstore"));
                out.int(n as i64);
            }
        };
    }
    let mut cand = Members::of(small);
    for (n, &j) in others.iter().enumerate() {
        let Some(s) = peek(db, &keys[j]) else {
            continue;
        };
        if let Inter::Card(limit) = mode {
            if n + 1 == others.len() {
                return out.int(cand.count_in(s, limit) as i64);
            }
        }
        cand.retain(|m| s.contains_member(m));
        if cand.len() == 0 {
            break;
        }
    }
    match mode {
        Inter::Reply => {
            out.set(cand.len());
            cand.for_each(|m| bulk_member(out, m));
        }
        Inter::Card(_) => out.int(cand.len() as i64),
        Inter::Store(dst) => {
            let s = cand.into_set(max);
            let n = s.len();
            db.replace(dst, s, Event::set("sinterstore"));
            out.int(n as i64);
        }
    }
}

fn sinter(ctx: &mut Ctx, args: &[Bytes]) {
    inter_generic(ctx, &args[1..], Inter::Reply);
}

fn sinterstore(ctx: &mut Ctx, args: &[Bytes]) {
    inter_generic(ctx, &args[2..], Inter::Store(&args[1]));
}

fn sintercard(ctx: &mut Ctx, args: &[Bytes]) {
    let numkeys = match parse_i64(&args[1]) {
        Some(n) if n > 0 => n as u64,
        _ => return ctx.error("ERR numkeys should be greater than 0"),
    };
    if numkeys > (args.len() - 2) as u64 {
        return ctx.error("ERR Number of keys can't be greater than number of args");
    }
    let keys_end = 2 + numkeys as usize;
    let mut limit = 0usize;
    let mut i = keys_end;
    while i < args.len() {
        if eq_ic(&args[i], "limit") && i + 1 < args.len() {
            match parse_i64(&args[i + 1]) {
                Some(l) if l >= 0 => limit = usize::try_from(l).unwrap_or(usize::MAX),
                _ => return ctx.error("ERR LIMIT can't be negative"),
            }
            i += 2;
        } else {
            return ctx.error(SYNTAX);
        }
    }
    inter_generic(ctx, &args[2..keys_end], Inter::Card(limit));
}

/// SUNION/SUNIONSTORE: every member of every set, inserted into a new set.
fn union_generic(ctx: &mut Ctx, keys: &[Bytes], dst: Option<&Bytes>) {
    let max = max_intset(ctx);
    let (db, out) = ctx.db_out();
    let Some(cards) = lookup_all(db, out, keys) else {
        return;
    };
    let mut res = Set::new();
    for (k, c) in keys.iter().zip(&cards) {
        if c.is_none() {
            continue;
        }
        if let Some(s) = peek(db, k) {
            for m in s.iter() {
                res.insert_member(m, max);
            }
        }
    }
    finish(db, out, res, dst, "sunionstore");
}

/// SDIFF/SDIFFSTORE with Redis's choice of algorithm (it decides the
/// destination's encoding): 1 filters a copy of the first set against the
/// others and inserts what is left; 2 inserts the whole first set and
/// removes the others' members.
fn diff_generic(ctx: &mut Ctx, keys: &[Bytes], dst: Option<&Bytes>) {
    let max = max_intset(ctx);
    let (db, out) = ctx.db_out();
    let Some(cards) = lookup_all(db, out, keys) else {
        return;
    };
    let mut res = Set::new();
    // A key repeating the first one makes the difference empty.
    let same = cards[0].is_some() && keys[1..].iter().any(|k| *k == keys[0]);
    if let (Some(c0), false) = (cards[0], same) {
        let mut others: Vec<usize> = (1..keys.len()).filter(|&j| cards[j].is_some()).collect();
        let one = (c0 as u128 * (others.len() as u128 + 1)) / 2;
        let two = c0 as u128
            + others
                .iter()
                .map(|&j| cards[j].unwrap_or(0) as u128)
                .sum::<u128>();
        if one <= two {
            // Largest first: members are dropped sooner.
            others.sort_by(|&a, &b| cards[b].cmp(&cards[a]));
            if let Some(s) = peek(db, &keys[0]) {
                let mut cand = Members::of(s);
                for j in others {
                    if cand.len() == 0 {
                        break;
                    }
                    if let Some(s) = peek(db, &keys[j]) {
                        cand.retain(|m| !s.contains_member(m));
                    }
                }
                res = cand.into_set(max);
            }
        } else {
            if let Some(s) = peek(db, &keys[0]) {
                for m in s.iter() {
                    res.insert_member(m, max);
                }
            }
            for j in others {
                if res.is_empty() {
                    break;
                }
                if let Some(s) = peek(db, &keys[j]) {
                    for m in s.iter() {
                        res.remove_member(m);
                    }
                }
            }
        }
    }
    finish(db, out, res, dst, "sdiffstore");
}

/// Replies the result of SUNION/SDIFF, or stores it at `dst` (an empty one
/// deletes `dst`) and replies its cardinality.
fn finish(db: &mut Db, out: &mut Out, res: Set, dst: Option<&Bytes>, event: &'static str) {
    match dst {
        None => reply_set(out, &res),
        Some(dst) => {
            let n = res.len();
            db.replace(dst, res, Event::set(event));
            out.int(n as i64);
        }
    }
}

fn sunion(ctx: &mut Ctx, args: &[Bytes]) {
    union_generic(ctx, &args[1..], None);
}

fn sunionstore(ctx: &mut Ctx, args: &[Bytes]) {
    union_generic(ctx, &args[2..], Some(&args[1]));
}

fn sdiff(ctx: &mut Ctx, args: &[Bytes]) {
    diff_generic(ctx, &args[1..], None);
}

fn sdiffstore(ctx: &mut Ctx, args: &[Bytes]) {
    diff_generic(ctx, &args[2..], Some(&args[1]));
}

fn empty_scan(out: &mut Out) {
    out.array(2);
    out.bulk(b"0");
    out.array(0);
}

/// SSCAN key cursor [MATCH pattern] [COUNT count]. As Redis: the cursor is
/// checked first, then the key (missing: an empty scan, whatever the
/// options), then the options; an intset is returned whole with cursor 0.
fn sscan(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(mut cursor) = parse_cursor(&args[2]) else {
        return ctx.error("ERR invalid cursor");
    };
    let (db, out) = ctx.db_out();
    let Some(exists) = typed(out, db.read::<Set>(&args[1]).map(|s| s.is_some())) else {
        return;
    };
    if !exists {
        return empty_scan(out);
    }
    let opts = match parse_scan_opts(&args[3..], false) {
        Ok(o) => o,
        Err(e) => return ctx.error(e),
    };
    let (db, out) = ctx.db_out();
    let Some(s) = peek(db, &args[1]) else {
        return empty_scan(out);
    };
    // The matching members, written as they are visited (Redis stops after
    // `count` members visited, matching or not, or ten times as many steps).
    let mut found = Out::scratch(out.resp3);
    let mut visited: i64 = 0;
    let mut matched = 0usize;
    let mut num = itoa::Buffer::new();
    let mut budget = opts.count.saturating_mul(10);
    loop {
        cursor = s.scan_step(cursor, |m| {
            visited += 1;
            let keep = match (opts.pattern, m) {
                (None, _) => true,
                (Some(p), SetMember::Int(v)) => {
                    crate::glob::matches(p, num.format(v).as_bytes(), false)
                }
                (Some(p), SetMember::Bytes(b)) => crate::glob::matches(p, b, false),
            };
            if keep {
                matched += 1;
                bulk_member(&mut found, m);
            }
        });
        if cursor == 0 || budget == 0 || visited >= opts.count {
            break;
        }
        budget -= 1;
    }
    out.array(2);
    out.bulk_int(cursor as i64);
    out.array(matched);
    out.raw(&found.buf);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_of(ms: &[&str]) -> Set {
        Set::from_members(ms.iter().map(|m| m.as_bytes()), 512)
    }

    fn collect(m: &Members) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        m.for_each(|x| v.push(x.to_vec()));
        v
    }

    #[test]
    fn members_filter_and_count_in_both_encodings() {
        let ints = set_of(&["1", "2", "3", "4"]);
        let strs = set_of(&["1", "2", "x", "y"]);
        let mut a = Members::of(&ints);
        assert!(matches!(a, Members::Ints(_)));
        assert_eq!(a.count_in(&strs, 0), 2);
        assert_eq!(a.count_in(&strs, 1), 1);
        assert_eq!(a.count_in(&ints, 3), 3);
        a.retain(|m| strs.contains_member(m));
        assert_eq!(collect(&a), vec![b"1".to_vec(), b"2".to_vec()]);
        let s = a.into_set(512);
        assert_eq!((s.encoding(), s.len()), ("intset", 2));

        let mut b = Members::of(&strs);
        assert!(matches!(b, Members::Strs { .. }));
        assert_eq!(b.len(), 4);
        assert_eq!(b.count_in(&ints, 0), 2);
        b.retain(|m| !ints.contains_member(m));
        let mut got = collect(&b);
        got.sort();
        assert_eq!(got, vec![b"x".to_vec(), b"y".to_vec()]);
        assert_eq!(b.into_set(512).encoding(), "hashtable");

        let mut e = Members::of(&Set::new());
        assert_eq!(e.len(), 0);
        e.retain(|_| true);
        assert_eq!(e.count_in(&ints, 3), 0);
    }

    #[test]
    fn whole_pop_replies_like_a_union() {
        // A hashtable of integers comes out sorted (rebuilt as an intset).
        let mut s = set_of(&["b", "30", "-1", "2"]);
        assert!(s.remove(b"b"));
        let mut out = Out::new(false);
        reply_all_as_union(&mut out, &s, 512);
        assert_eq!(out.buf, b"*3\r\n$2\r\n-1\r\n$1\r\n2\r\n$2\r\n30\r\n");
        // Over the intset limit: iteration order, every member once.
        let mut out = Out::new(true);
        reply_all_as_union(&mut out, &s, 2);
        assert!(out.buf.starts_with(b"~3\r\n"));
        let want = b"~3\r\n$2\r\n-1\r\n$1\r\n2\r\n$2\r\n30\r\n";
        assert_eq!(out.buf.len(), want.len());
    }
}
