//! Sorted set commands (Redis's t_zset.c), blocking pops included.
//!
//! Lookups go through the keyspace's typed lookups (`Db::read`,
//! `Db::write`, `Db::write_or_create`, `Db::replace`), so WRONGTYPE,
//! keyspace events and the deletion of an emptied set happen in one place.
//! Numbers are parsed as Redis parses them: scores and weights with
//! `string2d` (strtod over the whole argument, no leading space, no
//! overflow), range bounds with a bare `strtod` (leading spaces and
//! overflow to infinity accepted, as `zslParseRange`).
//!
//! Reaches the keyspace only through `Ctx` (and the config for the listpack
//! limits); blocking pops ask `waiters` to wait (`block_on`). Must not
//! notify anyone itself: the guard and `Db::replace` record each change.

use std::collections::HashMap;

use bytes::Bytes;
use rand::Rng;

use super::*;
use crate::blocking::TimeoutReply;
use crate::db::ValueRef;
use crate::types::pack::Limits;
use crate::types::set::SetMember;
use crate::types::zset::{LexBound, ScoreRange};
use crate::types::{Kind, Set, ZSet};
use crate::util::{eq_ic, parse_i64};

const READ_FAST: &[&str] = &["read", "sortedset", "fast"];
const READ_SLOW: &[&str] = &["read", "sortedset", "slow"];
const WRITE_FAST: &[&str] = &["write", "sortedset", "fast"];
const WRITE_SLOW: &[&str] = &["write", "sortedset", "slow"];
const WRITE_BLOCK_FAST: &[&str] = &["write", "sortedset", "fast", "blocking"];
const WRITE_BLOCK_SLOW: &[&str] = &["write", "sortedset", "slow", "blocking"];

const WDF: u32 = WRITE | DENYOOM | FAST;
const WD: u32 = WRITE | DENYOOM;
const WF: u32 = WRITE | FAST;
const RF: u32 = READONLY | FAST;
const ONE: (i32, i32, i32) = (1, 1, 1);
const NONE: (i32, i32, i32) = (0, 0, 0);
const G: &str = "sorted-set";

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    spec("zadd", -4, WDF, ONE, G, "1.2.0", "Add one or more members to a sorted set, or update its score if it already exists", WRITE_FAST, zadd),
    spec("zincrby", 4, WDF, ONE, G, "1.2.0", "Increment the score of a member in a sorted set", WRITE_FAST, zincrby),
    spec("zrem", -3, WF, ONE, G, "1.2.0", "Remove one or more members from a sorted set", WRITE_FAST, zrem).pushes(Pushes::First),
    spec("zcard", 2, RF, ONE, G, "1.2.0", "Get the number of members in a sorted set", READ_FAST, zcard),
    spec("zcount", 4, RF, ONE, G, "2.0.0", "Count the members in a sorted set with scores within the given values", READ_FAST, zcount),
    spec("zlexcount", 4, RF, ONE, G, "2.8.9", "Count the number of members in a sorted set between a given lexicographical range", READ_FAST, zlexcount),
    spec("zscore", 3, RF, ONE, G, "1.2.0", "Get the score associated with the given member in a sorted set", READ_FAST, zscore),
    spec("zmscore", -3, RF, ONE, G, "6.2.0", "Get the score associated with the given members in a sorted set", READ_FAST, zmscore),
    spec("zrank", -3, RF, ONE, G, "2.0.0", "Determine the index of a member in a sorted set", READ_FAST, zrank),
    spec("zrevrank", -3, RF, ONE, G, "2.0.0", "Determine the index of a member in a sorted set, with scores ordered from high to low", READ_FAST, zrevrank),
    spec("zrange", -4, READONLY, ONE, G, "1.2.0", "Return a range of members in a sorted set", READ_SLOW, zrange),
    spec("zrangestore", -5, WD, (1, 2, 1), G, "6.2.0", "Store a range of members from sorted set into another key", WRITE_SLOW, zrangestore),
    spec("zrangebyscore", -4, READONLY, ONE, G, "1.0.5", "Return a range of members in a sorted set, by score", READ_SLOW, zrangebyscore),
    spec("zrevrangebyscore", -4, READONLY, ONE, G, "2.2.0", "Return a range of members in a sorted set, by score, with scores ordered from high to low", READ_SLOW, zrevrangebyscore),
    spec("zrangebylex", -4, READONLY, ONE, G, "2.8.9", "Return a range of members in a sorted set, by lexicographical range", READ_SLOW, zrangebylex),
    spec("zrevrangebylex", -4, READONLY, ONE, G, "2.8.9", "Return a range of members in a sorted set, by lexicographical range, ordered from higher to lower strings.", READ_SLOW, zrevrangebylex),
    spec("zrevrange", -4, READONLY, ONE, G, "1.2.0", "Return a range of members in a sorted set, by index, with scores ordered from high to low", READ_SLOW, zrevrange),
    spec("zremrangebyrank", 4, WRITE, ONE, G, "2.0.0", "Remove all members in a sorted set within the given indexes", WRITE_SLOW, zremrangebyrank).pushes(Pushes::First),
    spec("zremrangebyscore", 4, WRITE, ONE, G, "1.2.0", "Remove all members in a sorted set within the given scores", WRITE_SLOW, zremrangebyscore).pushes(Pushes::First),
    spec("zremrangebylex", 4, WRITE, ONE, G, "2.8.9", "Remove all members in a sorted set between the given lexicographical range", WRITE_SLOW, zremrangebylex).pushes(Pushes::First),
    spec("zpopmin", -2, WF, ONE, G, "5.0.0", "Remove and return members with the lowest scores in a sorted set", WRITE_FAST, zpopmin),
    spec("zpopmax", -2, WF, ONE, G, "5.0.0", "Remove and return members with the highest scores in a sorted set", WRITE_FAST, zpopmax),
    spec("zmpop", -4, WRITE, NONE, G, "7.0.0", "Remove and return members with scores in a sorted set", WRITE_SLOW, zmpop),
    spec("bzpopmin", -3, WF | NOSCRIPT | BLOCKING, (1, -2, 1), G, "5.0.0", "Remove and return the member with the lowest score from one or more sorted sets, or block until one is available", WRITE_BLOCK_FAST, bzpopmin),
    spec("bzpopmax", -3, WF | NOSCRIPT | BLOCKING, (1, -2, 1), G, "5.0.0", "Remove and return the member with the highest score from one or more sorted sets, or block until one is available", WRITE_BLOCK_FAST, bzpopmax),
    spec("bzmpop", -5, WRITE | BLOCKING, NONE, G, "7.0.0", "Remove and return members with scores in a sorted set or block until one is available", WRITE_BLOCK_SLOW, bzmpop),
    spec("zrandmember", -2, READONLY, ONE, G, "6.2.0", "Get one or multiple random elements from a sorted set", READ_SLOW, zrandmember),
    spec("zunion", -3, READONLY, NONE, G, "6.2.0", "Add multiple sorted sets", READ_SLOW, zunion),
    spec("zinter", -3, READONLY, NONE, G, "6.2.0", "Intersect multiple sorted sets", READ_SLOW, zinter),
    spec("zdiff", -3, READONLY, NONE, G, "6.2.0", "Subtract multiple sorted sets", READ_SLOW, zdiff),
    spec("zunionstore", -4, WD, ONE, G, "2.0.0", "Add multiple sorted sets and store the resulting sorted set in a new key", WRITE_SLOW, zunionstore),
    spec("zinterstore", -4, WD, ONE, G, "2.0.0", "Intersect multiple sorted sets and store the resulting sorted set in a new key", WRITE_SLOW, zinterstore),
    spec("zdiffstore", -4, WD, ONE, G, "6.2.0", "Subtract multiple sorted sets and store the resulting sorted set in a new key", WRITE_SLOW, zdiffstore),
    spec("zintercard", -3, READONLY, NONE, G, "7.0.0", "Intersect multiple sorted sets and return the cardinality of the result", READ_SLOW, zintercard),
    spec("zscan", -3, READONLY, ONE, G, "2.8.0", "Incrementally iterate sorted sets elements and associated scores", READ_SLOW, zscan),
];

const NOT_FLOAT_RANGE: &str = "ERR min or max is not a float";
const NOT_LEX_RANGE: &str = "ERR min or max not valid string range item";
const NAN_RESULT: &str = "ERR resulting score is not a number (NaN)";

/// The conversion thresholds (`zset-max-listpack-entries`/`-value`).
fn limits(ctx: &Ctx) -> Limits {
    Limits {
        max_entries: ctx.store.config().zset_max_listpack_entries,
        max_value: ctx.store.config().zset_max_listpack_value,
    }
}

// ---------------------------------------------------------------------------
// Number and range parsing

use super::Pushes;
use crate::util::strtod;

/// ZMPOP's MIN|MAX: whether to pop the highest scores.
fn min_max(a: &[u8]) -> Option<bool> {
    if eq_ic(a, "min") {
        Some(false)
    } else if eq_ic(a, "max") {
        Some(true)
    } else {
        None
    }
}

/// One end of a score range (`zslParseRange`): `(` for exclusive, then
/// whatever `strtod` consumes up to the end (an empty rest is 0).
fn parse_range_item(a: &[u8]) -> Option<(f64, bool)> {
    let (body, excl) = match a.first() {
        Some(b'(') => (&a[1..], true),
        _ => (a, false),
    };
    let (v, n, _) = strtod(body);
    // strtod stops at a NUL; Redis then checks that it stopped at the end
    // of the C string, which a NUL also is.
    let stop = body.get(n).copied().unwrap_or(0);
    if stop != 0 || v.is_nan() {
        return None;
    }
    Some((v, excl))
}

fn parse_score_range(min: &[u8], max: &[u8]) -> Option<ScoreRange> {
    let (min, min_excl) = parse_range_item(min)?;
    let (max, max_excl) = parse_range_item(max)?;
    Some(ScoreRange {
        min,
        max,
        min_excl,
        max_excl,
    })
}

/// One end of a lex range (`zslParseLexRangeItem`): `-`, `+`, `[x`, `(x`.
/// Redis reads the C string, so `+` followed by a NUL is still `+`.
fn parse_lex_item(a: &[u8]) -> Option<LexBound<'_>> {
    match a.first()? {
        b'+' if a.get(1).is_none_or(|&c| c == 0) => Some(LexBound::PosInf),
        b'-' if a.get(1).is_none_or(|&c| c == 0) => Some(LexBound::NegInf),
        b'(' => Some(LexBound::Excl(&a[1..])),
        b'[' => Some(LexBound::Incl(&a[1..])),
        _ => None,
    }
}

fn parse_lex_range<'a>(min: &'a [u8], max: &'a [u8]) -> Option<(LexBound<'a>, LexBound<'a>)> {
    Some((parse_lex_item(min)?, parse_lex_item(max)?))
}

/// A score reply (`Out::double`: RESP3 double, RESP2 bulk in `%.17g`
/// form), without formatting through a `String` for the common integral
/// scores: below 2^53 `%.17g` prints them as plain integers.
fn put_score(out: &mut Out, s: f64) {
    match small_int(s) {
        Some(i) if out.resp3 => {
            out.raw(b",");
            out.raw(itoa::Buffer::new().format(i).as_bytes());
            out.raw(b"\r\n");
        }
        Some(i) => out.bulk(itoa::Buffer::new().format(i).as_bytes()),
        None => out.double(s),
    }
}

/// A score as a bulk string in `%.17g` form in both protocols (ZSCAN).
fn put_score_bulk(out: &mut Out, s: f64) {
    match small_int(s) {
        Some(i) => out.bulk(itoa::Buffer::new().format(i).as_bytes()),
        None => out.bulk(crate::util::fmt_double(s).as_bytes()),
    }
}

/// The score as an integer when `%.17g` prints it as one (not -0).
fn small_int(s: f64) -> Option<i64> {
    (s.fract() == 0.0 && s.abs() < 9_007_199_254_740_992.0 && !(s == 0.0 && s.is_sign_negative()))
        .then_some(s as i64)
}

/// Writes elements as ZRANGE does: members, or with scores a flat array
/// (RESP2) or an array of [member, score] pairs (RESP3).
fn reply_elems<'a>(
    out: &mut Out,
    it: impl ExactSizeIterator<Item = (&'a [u8], f64)>,
    withscores: bool,
) {
    let n = it.len();
    if withscores && !out.resp3 {
        out.array(2 * n);
    } else {
        out.array(n);
    }
    for (m, s) in it {
        if withscores && out.resp3 {
            out.array(2);
        }
        out.bulk(m);
        if withscores {
            put_score(out, s);
        }
    }
}

// ---------------------------------------------------------------------------
// ZADD, ZINCRBY, ZREM

fn zadd(ctx: &mut Ctx, args: &[Bytes]) {
    zadd_generic(ctx, args, false);
}

fn zincrby(ctx: &mut Ctx, args: &[Bytes]) {
    zadd_generic(ctx, args, true);
}

/// Redis's zaddGenericCommand; ZINCRBY is ZADD with INCR forced, GEOADD
/// the ZADD it rewrites itself to. Returns whether the set changed.
pub(super) fn zadd_generic(ctx: &mut Ctx, args: &[Bytes], mut incr: bool) -> bool {
    let (mut nx, mut xx, mut gt, mut lt, mut ch) = (false, false, false, false, false);
    let mut idx = 2;
    while let Some(a) = args.get(idx) {
        if eq_ic(a, "nx") {
            nx = true;
        } else if eq_ic(a, "xx") {
            xx = true;
        } else if eq_ic(a, "ch") {
            ch = true;
        } else if eq_ic(a, "incr") {
            incr = true;
        } else if eq_ic(a, "gt") {
            gt = true;
        } else if eq_ic(a, "lt") {
            lt = true;
        } else {
            break;
        }
        idx += 1;
    }
    let elements = args.len() - idx;
    if !elements.is_multiple_of(2) || elements == 0 {
        ctx.error(SYNTAX);
        return false;
    }
    let elements = elements / 2;
    if nx && xx {
        ctx.error("ERR XX and NX options at the same time are not compatible");
        return false;
    }
    if (nx && (gt || lt)) || (gt && lt) {
        ctx.error("ERR GT, LT, and/or NX options at the same time are not compatible");
        return false;
    }
    if incr && elements > 1 {
        ctx.error("ERR INCR option supports a single increment-element pair");
        return false;
    }
    let mut scores = Vec::with_capacity(elements);
    for j in 0..elements {
        match parse_float(&args[idx + 2 * j]) {
            Some(s) => scores.push(s),
            None => {
                ctx.error(NOT_FLOAT);
                return false;
            }
        }
    }
    let limits = limits(ctx);
    let (db, out) = ctx.db_out();
    let ev = Event::zset(if incr { "zincr" } else { "zadd" });
    let g = if xx {
        db.write::<ZSet>(&args[1], ev)
    } else {
        db.write_or_create::<ZSet>(&args[1], ev).map(Some)
    };
    let Some(g) = typed(out, g) else {
        return false;
    };
    let Some(mut z) = g else {
        // XX on a missing key: nothing to do.
        if incr {
            out.null();
        } else {
            out.int(0);
        }
        return false;
    };
    let (mut added, mut updated, mut processed) = (0i64, 0i64, 0i64);
    let mut last = 0.0;
    let plain = !(nx || xx || gt || lt || incr);
    for (j, &score) in scores.iter().enumerate() {
        let member = &args[idx + 2 * j + 1];
        if plain {
            match z.insert(member, score, &limits) {
                None => added += 1,
                Some(old) if old != score => updated += 1,
                Some(_) => {}
            }
            processed += 1;
            continue;
        }
        let mut score = score;
        match z.score(member) {
            Some(cur) => {
                if nx {
                    continue;
                }
                if incr {
                    score += cur;
                    if score.is_nan() {
                        if added + updated == 0 {
                            z.no_change();
                        }
                        out.error(NAN_RESULT);
                        return false;
                    }
                }
                if (lt && score >= cur) || (gt && score <= cur) {
                    continue;
                }
                if score != cur {
                    z.insert(member, score, &limits);
                    updated += 1;
                }
            }
            None => {
                if xx {
                    continue;
                }
                z.insert(member, score, &limits);
                added += 1;
            }
        }
        processed += 1;
        last = score;
    }
    if added + updated == 0 {
        z.no_change();
    }
    drop(z);
    if incr {
        if processed > 0 {
            put_score(out, last);
        } else {
            out.null();
        }
    } else {
        out.int(if ch { added + updated } else { added });
    }
    added + updated > 0
}

fn zrem(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    let Some(g) = typed(out, db.write::<ZSet>(&args[1], Event::zset("zrem"))) else {
        return;
    };
    let Some(mut z) = g else {
        return out.int(0);
    };
    let mut deleted = 0;
    for m in &args[2..] {
        if z.contains(m) {
            z.remove(m);
            deleted += 1;
            if z.is_empty() {
                break;
            }
        }
    }
    if deleted == 0 {
        z.no_change();
    }
    drop(z);
    out.int(deleted);
}

// ---------------------------------------------------------------------------
// Reads of one set

fn zcard(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    if let Some(z) = typed(out, db.read::<ZSet>(&args[1])) {
        out.int(z.map_or(0, |z| z.len() as i64));
    }
}

fn zcount(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(r) = parse_score_range(&args[2], &args[3]) else {
        return ctx.error(NOT_FLOAT_RANGE);
    };
    let (db, out) = ctx.db_out();
    if let Some(z) = typed(out, db.read::<ZSet>(&args[1])) {
        out.int(z.map_or(0, |z| z.count_in_score(&r) as i64));
    }
}

fn zlexcount(ctx: &mut Ctx, args: &[Bytes]) {
    let Some((min, max)) = parse_lex_range(&args[2], &args[3]) else {
        return ctx.error(NOT_LEX_RANGE);
    };
    let (db, out) = ctx.db_out();
    if let Some(z) = typed(out, db.read::<ZSet>(&args[1])) {
        out.int(z.map_or(0, |z| z.count_in_lex(&min, &max) as i64));
    }
}

fn zscore(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    if let Some(z) = typed(out, db.read::<ZSet>(&args[1])) {
        match z.and_then(|z| z.score(&args[2])) {
            Some(s) => put_score(out, s),
            None => out.null(),
        }
    }
}

fn zmscore(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    if let Some(z) = typed(out, db.read::<ZSet>(&args[1])) {
        out.array(args.len() - 2);
        for m in &args[2..] {
            match z.and_then(|z| z.score(m)) {
                Some(s) => put_score(out, s),
                None => out.null(),
            }
        }
    }
}

/// Redis 7.2's zrankGenericCommand (ZRANK/ZREVRANK key member
/// [WITHSCORE], https://redis.io/docs/latest/commands/zrank/): more than
/// one option is an arity error, an unknown one a syntax error, both before
/// the key is looked up. With WITHSCORE the reply is [rank, score] (the
/// score as ZSCORE writes it) and a missing key or member is a null array
/// (`*-1` in RESP2, `_` in RESP3).
fn rank_generic(ctx: &mut Ctx, args: &[Bytes], rev: bool) {
    if args.len() > 4 {
        return ctx.error(&format!(
            "ERR wrong number of arguments for '{}' command",
            if rev { "zrevrank" } else { "zrank" }
        ));
    }
    let withscore = match args.get(3) {
        None => false,
        Some(a) if eq_ic(a, "withscore") => true,
        Some(_) => return ctx.error(SYNTAX),
    };
    let (db, out) = ctx.db_out();
    if let Some(z) = typed(out, db.read::<ZSet>(&args[1])) {
        let found = z.and_then(|z| Some((z.rank(&args[2], rev)?, z.score(&args[2])?)));
        match found {
            Some((r, s)) if withscore => {
                out.array(2);
                out.int(r as i64);
                put_score(out, s);
            }
            Some((r, _)) => out.int(r as i64),
            None if withscore => out.null_array(),
            None => out.null(),
        }
    }
}

fn zrank(ctx: &mut Ctx, args: &[Bytes]) {
    rank_generic(ctx, args, false);
}

fn zrevrank(ctx: &mut Ctx, args: &[Bytes]) {
    rank_generic(ctx, args, true);
}

// ---------------------------------------------------------------------------
// ZRANGE and friends

#[derive(Clone, Copy, PartialEq, Eq)]
enum RangeType {
    Auto,
    Rank,
    Score,
    Lex,
}

/// A parsed range of any kind.
enum Range<'a> {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexBound<'a>, LexBound<'a>),
}

/// Redis's zrangeGenericCommand: the key at `args[start]`, then min, max
/// and options. `dst`: ZRANGESTORE's destination. `rev`: None lets REV be
/// given as an option.
fn zrange_generic(
    ctx: &mut Ctx,
    args: &[Bytes],
    start: usize,
    dst: Option<&Bytes>,
    mut rt: RangeType,
    mut rev: Option<bool>,
) {
    let key = &args[start];
    let mut withscores = false;
    let mut offset: i64 = 0;
    let mut limit: i64 = -1;
    let mut j = start + 3;
    while j < args.len() {
        let a = &args[j];
        let left = args.len() - j - 1;
        if dst.is_none() && eq_ic(a, "withscores") {
            withscores = true;
        } else if eq_ic(a, "limit") && left >= 2 {
            let Some(o) = arg_i64(ctx, &args[j + 1]) else {
                return;
            };
            let Some(l) = arg_i64(ctx, &args[j + 2]) else {
                return;
            };
            offset = o;
            limit = l;
            j += 2;
        } else if rev.is_none() && eq_ic(a, "rev") {
            rev = Some(true);
        } else if rt == RangeType::Auto && eq_ic(a, "bylex") {
            rt = RangeType::Lex;
        } else if rt == RangeType::Auto && eq_ic(a, "byscore") {
            rt = RangeType::Score;
        } else {
            return ctx.error(SYNTAX);
        }
        j += 1;
    }
    let rev = rev.unwrap_or(false);
    if rt == RangeType::Auto {
        rt = RangeType::Rank;
    }
    if limit != -1 && rt == RangeType::Rank {
        return ctx.error(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        );
    }
    if withscores && rt == RangeType::Lex {
        return ctx.error("ERR syntax error, WITHSCORES not supported in combination with BYLEX");
    }
    let (mut min, mut max) = (&args[start + 1], &args[start + 2]);
    if rev && rt != RangeType::Rank {
        std::mem::swap(&mut min, &mut max);
    }
    let range = match rt {
        RangeType::Score => match parse_score_range(min, max) {
            Some(r) => Range::Score(r),
            None => return ctx.error(NOT_FLOAT_RANGE),
        },
        RangeType::Lex => match parse_lex_range(min, max) {
            Some((a, b)) => Range::Lex(a, b),
            None => return ctx.error(NOT_LEX_RANGE),
        },
        _ => {
            let Some(a) = arg_i64(ctx, min) else {
                return;
            };
            let Some(b) = arg_i64(ctx, max) else {
                return;
            };
            Range::Rank(a, b)
        }
    };
    let limits = limits(ctx);
    let (db, out) = ctx.db_out();
    let Some(z) = typed(out, db.read::<ZSet>(key)) else {
        return;
    };
    let empty = ZSet::new();
    let found = z.is_some();
    let z = z.unwrap_or(&empty);
    // A negative offset selects nothing; a negative count is no limit.
    let count = usize::try_from(limit).ok();
    let (it, rank_len) = match &range {
        Range::Rank(a, b) => match norm_range(*a, *b, z.len()) {
            Some((a, b)) => (z.range_by_rank(a, b, rev), Some(b - a + 1)),
            None => (z.range_from(0, 0, false), Some(0)),
        },
        _ if offset < 0 => (z.range_from(0, 0, false), None),
        Range::Score(r) => (z.range_by_score(r, rev, offset as usize, count), None),
        Range::Lex(a, b) => (z.range_by_lex(a, b, rev, offset as usize, count), None),
    };
    let Some(dst) = dst else {
        if !found {
            return out.array(0);
        }
        return reply_elems(out, it, withscores);
    };
    // ZRANGESTORE: a rank range knows its length up front (zsetTypeCreate);
    // the others start as a listpack and convert as they grow.
    let mut res = match rank_len {
        Some(n) => ZSet::with_capacity_hint(n, 0, &limits),
        None => ZSet::new(),
    };
    for (m, s) in it {
        res.insert(m, s, &limits);
    }
    let n = res.len();
    db.replace(dst, res, Event::zset("zrangestore"));
    out.int(n as i64);
}

fn zrange(ctx: &mut Ctx, args: &[Bytes]) {
    zrange_generic(ctx, args, 1, None, RangeType::Auto, None);
}

fn zrangestore(ctx: &mut Ctx, args: &[Bytes]) {
    zrange_generic(ctx, args, 2, Some(&args[1]), RangeType::Auto, None);
}

fn zrangebyscore(ctx: &mut Ctx, args: &[Bytes]) {
    zrange_generic(ctx, args, 1, None, RangeType::Score, Some(false));
}

fn zrevrangebyscore(ctx: &mut Ctx, args: &[Bytes]) {
    zrange_generic(ctx, args, 1, None, RangeType::Score, Some(true));
}

fn zrangebylex(ctx: &mut Ctx, args: &[Bytes]) {
    zrange_generic(ctx, args, 1, None, RangeType::Lex, Some(false));
}

fn zrevrangebylex(ctx: &mut Ctx, args: &[Bytes]) {
    zrange_generic(ctx, args, 1, None, RangeType::Lex, Some(true));
}

fn zrevrange(ctx: &mut Ctx, args: &[Bytes]) {
    zrange_generic(ctx, args, 1, None, RangeType::Rank, Some(true));
}

// ---------------------------------------------------------------------------
// ZREMRANGEBY*

fn zremrange_generic(ctx: &mut Ctx, args: &[Bytes], rt: RangeType) {
    let range = match rt {
        RangeType::Score => match parse_score_range(&args[2], &args[3]) {
            Some(r) => Range::Score(r),
            None => return ctx.error(NOT_FLOAT_RANGE),
        },
        RangeType::Lex => match parse_lex_range(&args[2], &args[3]) {
            Some((a, b)) => Range::Lex(a, b),
            None => return ctx.error(NOT_LEX_RANGE),
        },
        _ => {
            let Some(a) = arg_i64(ctx, &args[2]) else {
                return;
            };
            let Some(b) = arg_i64(ctx, &args[3]) else {
                return;
            };
            Range::Rank(a, b)
        }
    };
    let ev = match rt {
        RangeType::Score => "zremrangebyscore",
        RangeType::Lex => "zremrangebylex",
        _ => "zremrangebyrank",
    };
    let (db, out) = ctx.db_out();
    let Some(g) = typed(out, db.write::<ZSet>(&args[1], Event::zset(ev))) else {
        return;
    };
    let Some(mut z) = g else {
        return out.int(0);
    };
    let n = match &range {
        Range::Rank(a, b) => match norm_range(*a, *b, z.len()) {
            Some((a, b)) => z.remove_range_by_rank(a, b),
            None => 0,
        },
        Range::Score(r) => {
            if z.count_in_score(r) == 0 {
                0
            } else {
                z.remove_range_by_score(r)
            }
        }
        Range::Lex(a, b) => {
            if z.count_in_lex(a, b) == 0 {
                0
            } else {
                z.remove_range_by_lex(a, b)
            }
        }
    };
    if n == 0 {
        z.no_change();
    }
    drop(z);
    out.int(n as i64);
}

fn zremrangebyrank(ctx: &mut Ctx, args: &[Bytes]) {
    zremrange_generic(ctx, args, RangeType::Rank);
}

fn zremrangebyscore(ctx: &mut Ctx, args: &[Bytes]) {
    zremrange_generic(ctx, args, RangeType::Score);
}

fn zremrangebylex(ctx: &mut Ctx, args: &[Bytes]) {
    zremrange_generic(ctx, args, RangeType::Lex);
}

// ---------------------------------------------------------------------------
// Pops

/// How a pop replies (Redis's genericZpopCommand flags).
#[derive(Clone, Copy)]
struct PopReply {
    /// The key goes first (BZPOP*, ZMPOP, BZMPOP).
    emit_key: bool,
    /// [member, score] pairs in a nested array (ZMPOP; ZPOP* with a count in RESP3).
    nested: bool,
}

/// Pops up to `count` (None: one, unnested) from the first existing set of
/// `keys` and replies; false when every key is missing (nothing written),
/// true after any reply (WRONGTYPE included). A blocked command run again
/// for a written key (`conn.serving`) passes over keys of another type, as
/// Redis serves a waiter only from a key of the type it waits for.
fn pop_serve(
    ctx: &mut Ctx,
    keys: &[Bytes],
    max: bool,
    count: Option<usize>,
    how: PopReply,
) -> bool {
    let ev = Event::zset(if max { "zpopmax" } else { "zpopmin" });
    let serving = ctx.conn.serving.is_some();
    for key in keys {
        if !may_take(ctx, key) {
            continue;
        }
        let (db, out) = ctx.db_out();
        let g = match db.write::<ZSet>(key, ev) {
            // Served only from a sorted set: another type waits on.
            Err(_) if serving => return false,
            g => g,
        };
        let Some(g) = typed(out, g) else {
            return true;
        };
        let Some(mut z) = g else {
            continue;
        };
        if count == Some(0) {
            out.array(0);
            return true;
        }
        let n = count.unwrap_or(1).min(z.len());
        match (how.emit_key, how.nested) {
            (false, false) => out.array(2 * n),
            (false, true) => out.array(n),
            (true, false) => {
                out.array(2 * n + 1);
                out.bulk(key);
            }
            (true, true) => {
                out.array(2);
                out.bulk(key);
                out.array(n);
            }
        }
        for _ in 0..n {
            if let Some((m, s)) = z.pop(max) {
                if how.nested {
                    out.array(2);
                }
                out.bulk(&m);
                put_score(out, s);
            }
        }
        return true;
    }
    false
}

fn zpop_generic(ctx: &mut Ctx, args: &[Bytes], max: bool) {
    if args.len() > 3 {
        return ctx.error(SYNTAX);
    }
    let count = match args.get(2) {
        None => None,
        Some(a) => match parse_i64(a) {
            Some(n) if n >= 0 => Some(n as usize),
            _ => return ctx.error("ERR value is out of range, must be positive"),
        },
    };
    let how = PopReply {
        emit_key: false,
        nested: ctx.out.resp3 && count.is_some(),
    };
    if !pop_serve(ctx, &args[1..2], max, count, how) {
        ctx.out.array(0);
    }
}

fn zpopmin(ctx: &mut Ctx, args: &[Bytes]) {
    zpop_generic(ctx, args, false);
}

fn zpopmax(ctx: &mut Ctx, args: &[Bytes]) {
    zpop_generic(ctx, args, true);
}

fn bzpop_generic(ctx: &mut Ctx, args: &[Bytes], max: bool) {
    let Some(deadline) = parse_timeout(ctx, &args[args.len() - 1]) else {
        return;
    };
    let keys = &args[1..args.len() - 1];
    let how = PopReply {
        emit_key: true,
        nested: false,
    };
    if !pop_serve(ctx, keys, max, None, how) {
        block_on(ctx, keys, deadline, TimeoutReply::NullArray);
    }
}

fn bzpopmin(ctx: &mut Ctx, args: &[Bytes]) {
    bzpop_generic(ctx, args, false);
}

fn bzpopmax(ctx: &mut Ctx, args: &[Bytes]) {
    bzpop_generic(ctx, args, true);
}

const MPOP_REPLY: PopReply = PopReply {
    emit_key: true,
    nested: true,
};

fn zmpop(ctx: &mut Ctx, args: &[Bytes]) {
    let Some((keys, max, count)) = mpop_args(ctx, &args[1..], min_max) else {
        return;
    };
    if !pop_serve(ctx, keys, max, Some(count), MPOP_REPLY) {
        ctx.out.null_array();
    }
}

fn bzmpop(ctx: &mut Ctx, args: &[Bytes]) {
    let Some((keys, max, count)) = mpop_args(ctx, &args[2..], min_max) else {
        return;
    };
    // Redis parses the timeout last here.
    let Some(deadline) = parse_timeout(ctx, &args[1]) else {
        return;
    };
    if !pop_serve(ctx, keys, max, Some(count), MPOP_REPLY) {
        block_on(ctx, keys, deadline, TimeoutReply::NullArray);
    }
}

// ---------------------------------------------------------------------------
// ZRANDMEMBER

fn zrandmember(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len() == 2 {
        let (db, out) = ctx.db_out();
        let Some(z) = typed(out, db.read::<ZSet>(&args[1])) else {
            return;
        };
        let Some(z) = z else {
            return out.null();
        };
        let r = rand::thread_rng().gen_range(0..z.len().max(1));
        match z.get_by_rank(r, false) {
            Some((m, _)) => out.bulk(m),
            None => out.null(),
        }
        return;
    }
    let Some(l) = arg_i64(ctx, &args[2]) else {
        return;
    };
    if l == i64::MIN {
        return ctx.error(
            "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
        );
    }
    let withscores = match args.len() {
        3 => false,
        4 if eq_ic(&args[3], "withscores") => true,
        _ => return ctx.error(SYNTAX),
    };
    if withscores && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&l) {
        return ctx.error("ERR value is out of range");
    }
    let (db, out) = ctx.db_out();
    let Some(z) = typed(out, db.read::<ZSet>(&args[1])) else {
        return;
    };
    let Some(z) = z else {
        return out.array(0);
    };
    let size = z.len();
    let mut rng = rand::thread_rng();
    let header = |out: &mut Out, n: usize| {
        if withscores && !out.resp3 {
            out.array(2 * n);
        } else {
            out.array(n);
        }
    };
    let emit = |out: &mut Out, m: &[u8], s: f64| {
        if withscores && out.resp3 {
            out.array(2);
        }
        out.bulk(m);
        if withscores {
            put_score(out, s);
        }
    };
    if l == 0 {
        return out.array(0);
    }
    if l < 0 && l.unsigned_abs() > MAX_RANDOM_REPEATS {
        return out.error("ERR value is out of range");
    }
    let count = l.unsigned_abs() as usize;
    if l < 0 || count == 1 {
        // Repeats allowed: independent draws. A listpack is decoded once.
        header(out, count);
        if z.is_compact() {
            let all: Vec<(&[u8], f64)> = z.iter().collect();
            for _ in 0..count {
                let (m, s) = all[rng.gen_range(0..size)];
                emit(out, m, s);
            }
        } else {
            for _ in 0..count {
                if let Some((m, s)) = z.get_by_rank(rng.gen_range(0..size), false) {
                    emit(out, m, s);
                }
            }
        }
        return;
    }
    if count >= size {
        header(out, size);
        for (m, s) in z.iter() {
            emit(out, m, s);
        }
        return;
    }
    header(out, count);
    if count * 3 > size || z.is_compact() {
        // Selection sampling in one ordered pass.
        let mut need = count;
        for (i, (m, s)) in z.iter().enumerate() {
            if need == 0 {
                break;
            }
            if rng.gen_range(0..size - i) < need {
                emit(out, m, s);
                need -= 1;
            }
        }
    } else {
        let mut seen = std::collections::HashSet::with_capacity(count);
        while seen.len() < count {
            let r = rng.gen_range(0..size);
            if seen.insert(r) {
                if let Some((m, s)) = z.get_by_rank(r, false) {
                    emit(out, m, s);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// ZUNION, ZINTER, ZDIFF, their STORE forms, ZINTERCARD

#[derive(Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy)]
enum Agg {
    Sum,
    Min,
    Max,
}

/// zunionInterAggregate: SUM turns inf + -inf (NaN) into 0.
fn aggregate(t: &mut f64, v: f64, agg: Agg) {
    match agg {
        Agg::Sum => {
            *t += v;
            if t.is_nan() {
                *t = 0.0;
            }
        }
        Agg::Min => {
            if v < *t {
                *t = v;
            }
        }
        Agg::Max => {
            if v > *t {
                *t = v;
            }
        }
    }
}

/// An input of the set operations: a sorted set or a plain set (score 1).
enum Src<'a> {
    Z(&'a ZSet),
    S(&'a Set),
}

impl Src<'_> {
    fn for_each(&self, mut f: impl FnMut(&[u8], f64)) {
        match self {
            Src::Z(z) => z.iter().for_each(|(m, s)| f(m, s)),
            Src::S(s) => {
                for m in s.iter() {
                    match m {
                        SetMember::Int(v) => f(itoa::Buffer::new().format(v).as_bytes(), 1.0),
                        SetMember::Bytes(b) => f(b, 1.0),
                    }
                }
            }
        }
    }

    fn score(&self, m: &[u8]) -> Option<f64> {
        match self {
            Src::Z(z) => z.score(m),
            Src::S(s) => s.contains(m).then_some(1.0),
        }
    }
}

/// An input already type-checked: re-borrowed without counting a hit.
fn peek_src<'a>(db: &'a mut crate::db::Db, key: &[u8]) -> Option<Src<'a>> {
    match db.peek(key)? {
        ValueRef::Obj(v) => ZSet::of(v).map(Src::Z).or_else(|| Set::of(v).map(Src::S)),
        ValueRef::Str(_) => None,
    }
}

/// Members back to back in one buffer, with their scores: the working set
/// of ZINTER/ZDIFF without one allocation per member.
#[derive(Default)]
struct Elems {
    bytes: Vec<u8>,
    items: Vec<(usize, usize, f64)>,
}

impl Elems {
    fn push(&mut self, m: &[u8], s: f64) {
        self.items.push((self.bytes.len(), m.len(), s));
        self.bytes.extend_from_slice(m);
    }

    fn member(&self, i: usize) -> &[u8] {
        let (a, n, _) = self.items[i];
        &self.bytes[a..a + n]
    }
}

/// zunionInterDiffGenericCommand. `numkeys_at`: index of numkeys; `dst`:
/// the STORE destination; `card`: ZINTERCARD.
fn zsetop(
    ctx: &mut Ctx,
    args: &[Bytes],
    name: &str,
    numkeys_at: usize,
    dst: Option<&Bytes>,
    op: SetOp,
    card: bool,
) {
    let Some(setnum) = arg_i64(ctx, &args[numkeys_at]) else {
        return;
    };
    if setnum < 1 {
        return ctx.error(&format!(
            "ERR at least 1 input key is needed for '{name}' command"
        ));
    }
    if setnum as u64 > (args.len() - numkeys_at - 1) as u64 {
        return ctx.error(SYNTAX);
    }
    let setnum = setnum as usize;
    let keys = &args[numkeys_at + 1..numkeys_at + 1 + setnum];
    // Every input is looked up (and type-checked) before the options.
    let mut lens = Vec::with_capacity(setnum);
    {
        let (db, out) = ctx.db_out();
        for key in keys {
            let len = match db.read::<ZSet>(key) {
                Ok(z) => z.map_or(0, |z| z.len()),
                Err(_) => match typed(out, db.read::<Set>(key)) {
                    Some(s) => s.map_or(0, |s| s.len()),
                    None => return,
                },
            };
            lens.push(len);
        }
    }
    let mut weights = vec![1.0f64; setnum];
    let mut agg = Agg::Sum;
    let mut withscores = false;
    let mut limit: usize = 0;
    let mut j = numkeys_at + 1 + setnum;
    while j < args.len() {
        let remaining = args.len() - j;
        let a = &args[j];
        if op != SetOp::Diff && !card && remaining > setnum && eq_ic(a, "weights") {
            j += 1;
            for w in weights.iter_mut() {
                match parse_float(&args[j]) {
                    Some(v) => *w = v,
                    None => return ctx.error("ERR weight value is not a float"),
                }
                j += 1;
            }
        } else if op != SetOp::Diff && !card && remaining >= 2 && eq_ic(a, "aggregate") {
            let v = &args[j + 1];
            agg = if eq_ic(v, "sum") {
                Agg::Sum
            } else if eq_ic(v, "min") {
                Agg::Min
            } else if eq_ic(v, "max") {
                Agg::Max
            } else {
                return ctx.error(SYNTAX);
            };
            j += 2;
        } else if dst.is_none() && !card && eq_ic(a, "withscores") {
            withscores = true;
            j += 1;
        } else if card && remaining >= 2 && eq_ic(a, "limit") {
            match parse_i64(&args[j + 1]) {
                Some(l) if l >= 0 => limit = l as usize,
                _ => return ctx.error("ERR LIMIT can't be negative"),
            }
            j += 2;
        } else {
            return ctx.error(SYNTAX);
        }
    }
    // Inputs in processing order: by size for union and intersection (a
    // stable sort, as glibc's qsort, so SUM adds in a fixed order).
    let mut order: Vec<usize> = (0..setnum).collect();
    if op != SetOp::Diff {
        order.sort_by_key(|&i| lens[i]);
    }
    let db = ctx.db();
    let mut res = Elems::default();
    match op {
        SetOp::Union => {
            let mut acc: HashMap<Box<[u8]>, f64, foldhash::fast::RandomState> = HashMap::default();
            for &i in &order {
                if lens[i] == 0 {
                    continue;
                }
                let w = weights[i];
                let Some(src) = peek_src(db, &keys[i]) else {
                    continue;
                };
                src.for_each(|m, s| {
                    let mut v = w * s;
                    if v.is_nan() {
                        v = 0.0;
                    }
                    match acc.get_mut(m) {
                        Some(t) => aggregate(t, v, agg),
                        None => {
                            acc.insert(m.into(), v);
                        }
                    }
                });
            }
            for (m, s) in &acc {
                res.push(m, *s);
            }
        }
        SetOp::Inter | SetOp::Diff => {
            let first = order[0];
            if lens[first] > 0 {
                if let Some(src) = peek_src(db, &keys[first]) {
                    let w = if op == SetOp::Inter {
                        weights[first]
                    } else {
                        1.0
                    };
                    src.for_each(|m, s| {
                        let mut v = w * s;
                        if v.is_nan() {
                            v = 0.0;
                        }
                        res.push(m, v);
                    });
                }
            }
            for &i in &order[1..] {
                if res.items.is_empty() {
                    break;
                }
                if lens[i] == 0 {
                    // Only a difference gets here (an intersection's
                    // smallest input would have been this empty one).
                    continue;
                }
                let Some(src) = peek_src(db, &keys[i]) else {
                    continue;
                };
                let w = weights[i];
                let mut kept = Vec::with_capacity(res.items.len());
                for k in 0..res.items.len() {
                    let found = src.score(res.member(k));
                    let mut item = res.items[k];
                    match (op, found) {
                        (SetOp::Inter, Some(v)) => {
                            aggregate(&mut item.2, v * w, agg);
                            kept.push(item);
                        }
                        (SetOp::Diff, None) => kept.push(item),
                        _ => {}
                    }
                }
                res.items = kept;
            }
        }
    }
    if card {
        let n = res.items.len();
        let n = if limit > 0 { n.min(limit) } else { n };
        return ctx.out.int(n as i64);
    }
    let Elems { bytes, mut items } = res;
    let member = |&(a, n, _): &(usize, usize, f64)| &bytes[a..a + n];
    items.sort_by(|x, y| {
        x.2.partial_cmp(&y.2)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| member(x).cmp(member(y)))
    });
    match dst {
        None => reply_elems(
            ctx.out,
            items.iter().map(|it| (member(it), it.2)),
            withscores,
        ),
        Some(dst) => {
            let ev = match op {
                SetOp::Union => "zunionstore",
                SetOp::Inter => "zinterstore",
                SetOp::Diff => "zdiffstore",
            };
            store_result(ctx, dst, items.iter().map(|it| (member(it), it.2)), ev);
        }
    }
}

/// Stores a *STORE command's result at `dst` and replies with its size:
/// a new sorted set in the encoding Redis ends with for that many members
/// that long (zsetConvertToListpackIfNeeded), replacing whatever `dst`
/// held and its TTL, recording `ev`; an empty result deletes `dst`
/// instead (recording `del` if it existed). Returns the size.
pub(super) fn store_result<'a>(
    ctx: &mut Ctx,
    dst: &Bytes,
    items: impl ExactSizeIterator<Item = (&'a [u8], f64)> + Clone,
    ev: &'static str,
) -> usize {
    let limits = limits(ctx);
    let n = items.len();
    let maxlen = items.clone().map(|(m, _)| m.len()).max().unwrap_or(0);
    let mut z = ZSet::with_capacity_hint(n, maxlen, &limits);
    for (m, s) in items {
        z.insert(m, s, &limits);
    }
    ctx.db().replace(dst, z, Event::zset(ev));
    ctx.out.int(n as i64);
    n
}

fn zunion(ctx: &mut Ctx, args: &[Bytes]) {
    zsetop(ctx, args, "zunion", 1, None, SetOp::Union, false);
}

fn zinter(ctx: &mut Ctx, args: &[Bytes]) {
    zsetop(ctx, args, "zinter", 1, None, SetOp::Inter, false);
}

fn zdiff(ctx: &mut Ctx, args: &[Bytes]) {
    zsetop(ctx, args, "zdiff", 1, None, SetOp::Diff, false);
}

fn zunionstore(ctx: &mut Ctx, args: &[Bytes]) {
    zsetop(
        ctx,
        args,
        "zunionstore",
        2,
        Some(&args[1]),
        SetOp::Union,
        false,
    );
}

fn zinterstore(ctx: &mut Ctx, args: &[Bytes]) {
    zsetop(
        ctx,
        args,
        "zinterstore",
        2,
        Some(&args[1]),
        SetOp::Inter,
        false,
    );
}

fn zdiffstore(ctx: &mut Ctx, args: &[Bytes]) {
    zsetop(
        ctx,
        args,
        "zdiffstore",
        2,
        Some(&args[1]),
        SetOp::Diff,
        false,
    );
}

fn zintercard(ctx: &mut Ctx, args: &[Bytes]) {
    zsetop(ctx, args, "zintercard", 1, None, SetOp::Inter, true);
}

// ---------------------------------------------------------------------------
// ZSCAN

fn zscan(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(mut cursor) = parse_cursor(&args[2]) else {
        return ctx.error("ERR invalid cursor");
    };
    {
        let (db, out) = ctx.db_out();
        match typed(out, db.read::<ZSet>(&args[1])) {
            None => return,
            Some(None) => {
                out.array(2);
                out.bulk(b"0");
                out.array(0);
                return;
            }
            Some(Some(_)) => {}
        }
    }
    let mut count: i64 = 10;
    let mut pattern: Option<&[u8]> = None;
    let mut i = 3;
    while i < args.len() {
        let has_value = args.len() - i >= 2;
        let a = &args[i];
        if eq_ic(a, "count") && has_value {
            let Some(n) = arg_i64(ctx, &args[i + 1]) else {
                return;
            };
            if n < 1 {
                return ctx.error(SYNTAX);
            }
            count = n;
        } else if eq_ic(a, "match") && has_value {
            let p = &args[i + 1][..];
            pattern = if p == b"*" { None } else { Some(p) };
        } else {
            return ctx.error(SYNTAX);
        }
        i += 2;
    }
    let (db, out) = ctx.db_out();
    let Some(z) = peek_src(db, &args[1]) else {
        return;
    };
    let Src::Z(z) = z else {
        return;
    };
    let mut found = Elems::default();
    // Like Redis: each element puts two entries on its list; stop after
    // `count` entries or ten times as many steps.
    let mut budget = count.saturating_mul(10);
    loop {
        cursor = z.scan_step(cursor, |m, s| {
            if pattern.is_none_or(|p| crate::glob::matches(p, m, false)) {
                found.push(m, s);
            }
        });
        if cursor == 0 || budget == 0 || (found.items.len() as i64).saturating_mul(2) >= count {
            break;
        }
        budget -= 1;
    }
    out.array(2);
    out.bulk(itoa::Buffer::new().format(cursor).as_bytes());
    out.array(2 * found.items.len());
    for k in 0..found.items.len() {
        out.bulk(found.member(k));
        put_score_bulk(out, found.items[k].2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_as_zslparserange() {
        let r = parse_score_range(b"(1", b"+inf").unwrap();
        assert_eq!(
            (r.min, r.min_excl, r.max, r.max_excl),
            (1.0, true, f64::INFINITY, false)
        );
        // strtod skips leading spaces; an empty rest is 0; overflow is inf.
        assert_eq!(parse_range_item(b" 1"), Some((1.0, false)));
        assert_eq!(parse_range_item(b"("), Some((0.0, true)));
        assert_eq!(parse_range_item(b""), Some((0.0, false)));
        assert_eq!(parse_range_item(b"1e400"), Some((f64::INFINITY, false)));
        assert_eq!(parse_range_item(b"1\x00x"), Some((1.0, false)));
        assert_eq!(parse_range_item(b"1 "), None);
        assert_eq!(parse_range_item(b"nan"), None);
        assert_eq!(parse_range_item(b"[1"), None);
    }

    #[test]
    fn lex_items() {
        assert_eq!(parse_lex_item(b"-"), Some(LexBound::NegInf));
        assert_eq!(parse_lex_item(b"+"), Some(LexBound::PosInf));
        assert_eq!(parse_lex_item(b"+\x00a"), Some(LexBound::PosInf));
        assert_eq!(parse_lex_item(b"[a"), Some(LexBound::Incl(b"a")));
        assert_eq!(parse_lex_item(b"("), Some(LexBound::Excl(b"")));
        assert_eq!(parse_lex_item(b"+a"), None);
        assert_eq!(parse_lex_item(b"a"), None);
        assert_eq!(parse_lex_item(b""), None);
    }

    #[test]
    fn index_ranges() {
        assert_eq!(norm_range(0, -1, 3), Some((0, 2)));
        assert_eq!(norm_range(i64::MIN, i64::MAX, 3), Some((0, 2)));
        assert_eq!(norm_range(2, 1, 3), None);
        assert_eq!(norm_range(0, -1, 0), None);
    }

    /// Runs one command on `store` (RESP2) and returns its reply as
    /// redis-cli prints it, one value a line.
    fn run(store: &mut crate::server::Store, args: &[&str]) -> String {
        let buf = super::super::run_for_test(store, 0, args);
        let text = String::from_utf8_lossy(&buf).into_owned();
        let mut lines = Vec::new();
        let mut it = text.split("\r\n").filter(|l| !l.is_empty());
        while let Some(l) = it.next() {
            match l.as_bytes()[0] {
                b'*' => {}
                b'$' => lines.push(it.next().unwrap_or("").to_string()),
                _ => lines.push(l[1..].to_string()),
            }
        }
        lines.join(" ")
    }

    fn sadd(store: &mut crate::server::Store, key: &str, members: &[&str]) {
        let key = Bytes::from(key.to_string());
        let mut s = store
            .ks
            .db_mut(0)
            .write_or_create::<Set>(&key, Event::set("sadd"))
            .unwrap();
        for m in members {
            s.insert(m.as_bytes(), 512);
        }
    }

    /// Plain sets as inputs (score 1), expected replies from Redis 7.0.15
    /// (the compat cases need SADD, which is another family).
    #[test]
    fn set_inputs_score_one() {
        let mut st = crate::server::Store::new(
            crate::config::Config::default(),
            crate::commands::acl_catalog(),
        );
        let st = &mut st;
        run(st, &["zadd", "a", "1", "x", "2", "y"]);
        run(st, &["zadd", "b", "5", "2", "1", "q"]);
        sadd(st, "s", &["y", "z"]);
        sadd(st, "n", &["1", "2", "30"]);
        let cases: &[(&[&str], &str)] = &[
            (&["zunion", "2", "a", "s", "WITHSCORES"], "x 1 z 1 y 3"),
            (&["zunion", "2", "s", "s", "WITHSCORES"], "y 2 z 2"),
            (&["zinter", "2", "a", "s", "WITHSCORES"], "y 3"),
            (&["zdiff", "2", "a", "s", "WITHSCORES"], "x 1"),
            (&["zintercard", "2", "a", "s"], "1"),
            (
                &["zunion", "2", "n", "b", "weights", "2", "3", "withscores"],
                "1 2 30 2 q 3 2 17",
            ),
            (
                &["zinter", "2", "n", "b", "aggregate", "max", "withscores"],
                "2 5",
            ),
            (&["zdiff", "2", "n", "b"], "1 30"),
            (&["zunionstore", "d", "2", "s", "n"], "5"),
            (
                &["zrange", "d", "0", "-1", "withscores"],
                "1 1 2 1 30 1 y 1 z 1",
            ),
            (&["object", "encoding", "d"], "listpack"),
        ];
        for (cmd, want) in cases {
            assert_eq!(run(st, cmd), *want, "{cmd:?}");
        }
        run(st, &["set", "str", "v"]);
        assert!(run(st, &["zunion", "2", "a", "str"]).starts_with("WRONGTYPE"));
        assert!(run(st, &["zinter", "1", "str"]).starts_with("WRONGTYPE"));
    }

    /// ZSCAN with small counts on a skiplist reaches cursor 0 having
    /// returned every element (with its score) at least once.
    #[test]
    fn zscan_iterates_everything() {
        let mut st = crate::server::Store::new(
            crate::config::Config::default(),
            crate::commands::acl_catalog(),
        );
        let st = &mut st;
        run(st, &["config", "set", "zset-max-listpack-entries", "0"]);
        for i in 0..300 {
            let (score, member) = (i.to_string(), format!("m{i}"));
            run(st, &["zadd", "z", &score, &member]);
        }
        let mut seen = std::collections::BTreeMap::new();
        let mut cursor = "0".to_string();
        for _ in 0..10_000 {
            let reply = run(st, &["zscan", "z", &cursor, "COUNT", "7"]);
            let mut words = reply.split(' ');
            cursor = words.next().unwrap().to_string();
            let rest: Vec<&str> = words.collect();
            for pair in rest.chunks(2) {
                seen.insert(pair[0].to_string(), pair[1].to_string());
            }
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(cursor, "0");
        assert_eq!(seen.len(), 300);
        assert_eq!(seen.get("m42").map(String::as_str), Some("42"));
    }

    #[test]
    fn integral_scores_reply_as_double_does() {
        for s in [
            0.0,
            -0.0,
            1.0,
            -7.0,
            1e15,
            9_007_199_254_740_991.0,
            2.5,
            1e300,
            f64::INFINITY,
        ] {
            for resp3 in [false, true] {
                let (mut a, mut b) = (Out::new(resp3), Out::new(resp3));
                put_score(&mut a, s);
                b.double(s);
                assert_eq!(a.buf, b.buf, "{s}");
                let (mut a, mut b) = (Out::new(resp3), Out::new(resp3));
                put_score_bulk(&mut a, s);
                b.bulk(crate::util::fmt_double(s).as_bytes());
                assert_eq!(a.buf, b.buf, "{s}");
            }
        }
    }

    #[test]
    fn sum_of_opposite_infinities_is_zero() {
        let mut t = f64::INFINITY;
        aggregate(&mut t, f64::NEG_INFINITY, Agg::Sum);
        assert_eq!(t, 0.0);
        let mut t = 1.0;
        aggregate(&mut t, f64::NAN, Agg::Min);
        assert_eq!(t, 1.0);
    }
}
