//! List commands (Redis's t_list.c), blocking pops included.
//!
//! Every lookup goes through the keyspace's typed lookups (`Db::read`,
//! `Db::write`, `Db::write_or_create`), so WRONGTYPE, keyspace events and
//! the deletion of an emptied list happen in one place. Blocking commands
//! that find nothing set `ctx.conn.block`; the dispatcher registers the
//! wait and runs the command again when one of its keys is written.
//!
//! Reaches the keyspace only through `Ctx`. Must not touch the blocking
//! registry: a pop that finds nothing asks `waiters` (`block_on`), and a
//! served pop checks `may_take`.

use bytes::Bytes;

use super::Pushes;
use super::*;
use crate::blocking::TimeoutReply;
use crate::types::List;
use crate::util::{eq_ic, parse_i64};

const READ_FAST: &[&str] = &["read", "list", "fast"];
const READ_SLOW: &[&str] = &["read", "list", "slow"];
const WRITE_FAST: &[&str] = &["write", "list", "fast"];
const WRITE_SLOW: &[&str] = &["write", "list", "slow"];
const WRITE_BLOCK: &[&str] = &["write", "list", "slow", "blocking"];

const WDF: u32 = WRITE | DENYOOM | FAST;
const WD: u32 = WRITE | DENYOOM;
const WF: u32 = WRITE | FAST;
const RF: u32 = READONLY | FAST;
const ONE: (i32, i32, i32) = (1, 1, 1);

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    spec("lpush", -3, WDF, ONE, "list", "1.0.0", "Prepend one or multiple elements to a list", WRITE_FAST, lpush),
    spec("rpush", -3, WDF, ONE, "list", "1.0.0", "Append one or multiple elements to a list", WRITE_FAST, rpush),
    spec("lpushx", -3, WDF, ONE, "list", "2.2.0", "Prepend an element to a list, only if the list exists", WRITE_FAST, lpushx),
    spec("rpushx", -3, WDF, ONE, "list", "2.2.0", "Append an element to a list, only if the list exists", WRITE_FAST, rpushx),
    spec("lpop", -2, WF, ONE, "list", "1.0.0", "Remove and get the first elements in a list", WRITE_FAST, lpop),
    spec("rpop", -2, WF, ONE, "list", "1.0.0", "Remove and get the last elements in a list", WRITE_FAST, rpop),
    spec("llen", 2, RF, ONE, "list", "1.0.0", "Get the length of a list", READ_FAST, llen),
    spec("lindex", 3, READONLY, ONE, "list", "1.0.0", "Get an element from a list by its index", READ_SLOW, lindex),
    spec("lset", 4, WD, ONE, "list", "1.0.0", "Set the value of an element in a list by its index", WRITE_SLOW, lset),
    spec("lrange", 4, READONLY, ONE, "list", "1.0.0", "Get a range of elements from a list", READ_SLOW, lrange),
    spec("ltrim", 4, WRITE, ONE, "list", "1.0.0", "Trim a list to the specified range", WRITE_SLOW, ltrim).pushes(Pushes::First),
    spec("lrem", 4, WRITE, ONE, "list", "1.0.0", "Remove elements from a list", WRITE_SLOW, lrem).pushes(Pushes::First),
    spec("linsert", 5, WD, ONE, "list", "2.2.0", "Insert an element before or after another element in a list", WRITE_SLOW, linsert).pushes(Pushes::First),
    spec("lpos", -3, READONLY, ONE, "list", "6.0.6", "Return the index of matching elements on a list", READ_SLOW, lpos),
    spec("lmove", 5, WD, (1, 2, 1), "list", "6.2.0", "Pop an element from a list, push it to another list and return it", WRITE_SLOW, lmove).pushes(Pushes::Move),
    spec("rpoplpush", 3, WD, (1, 2, 1), "list", "1.2.0", "Remove the last element in a list, prepend it to another list and return it", WRITE_SLOW, rpoplpush).pushes(Pushes::Move),
    spec("lmpop", -4, WRITE, (0, 0, 0), "list", "7.0.0", "Pop elements from a list", WRITE_SLOW, lmpop),
    spec("blpop", -3, WRITE | NOSCRIPT | BLOCKING, (1, -2, 1), "list", "2.0.0", "Remove and get the first element in a list, or block until one is available", WRITE_BLOCK, blpop),
    spec("brpop", -3, WRITE | NOSCRIPT | BLOCKING, (1, -2, 1), "list", "2.0.0", "Remove and get the last element in a list, or block until one is available", WRITE_BLOCK, brpop),
    spec("blmove", 6, WD | NOSCRIPT | BLOCKING, (1, 2, 1), "list", "6.2.0", "Pop an element from a list, push it to another list and return it; or block until one is available", WRITE_BLOCK, blmove).pushes(Pushes::Move),
    spec("brpoplpush", 4, WD | NOSCRIPT | BLOCKING, (1, 2, 1), "list", "2.2.0", "Pop an element from a list, push it to another list and return it; or block until one is available", WRITE_BLOCK, brpoplpush).pushes(Pushes::Move),
    spec("blmpop", -5, WRITE | BLOCKING, (0, 0, 0), "list", "7.0.0", "Pop elements from a list or block until one is available", WRITE_BLOCK, blmpop),
];

/// The list node size limit (`list-max-listpack-size`).
fn fill(ctx: &Ctx) -> i64 {
    ctx.store.config().list_max_listpack_size
}

/// The compress depth a new list takes (`list-compress-depth`).
fn depth(ctx: &Ctx) -> usize {
    usize::try_from(ctx.store.config().list_compress_depth).unwrap_or(0)
}

/// A list just created by a write lookup (empty: an emptied list is
/// deleted) takes the compress depth as Redis's quicklistCreate does.
fn created(l: &mut List, depth: usize) {
    if l.is_empty() {
        l.set_compress_depth(depth);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Left,
    Right,
}

impl End {
    fn parse(a: &[u8]) -> Option<End> {
        if eq_ic(a, "left") {
            Some(End::Left)
        } else if eq_ic(a, "right") {
            Some(End::Right)
        } else {
            None
        }
    }
    fn pop_event(self) -> Event {
        match self {
            End::Left => Event::list("lpop"),
            End::Right => Event::list("rpop"),
        }
    }
    fn push_event(self) -> Event {
        match self {
            End::Left => Event::list("lpush"),
            End::Right => Event::list("rpush"),
        }
    }
}

fn pop(l: &mut List, end: End) -> Option<Vec<u8>> {
    match end {
        End::Left => l.pop_front(),
        End::Right => l.pop_back(),
    }
}

fn push(l: &mut List, end: End, v: &[u8], fill: i64) {
    match end {
        End::Left => l.push_front(v, fill),
        End::Right => l.push_back(v, fill),
    }
}

fn push_generic(ctx: &mut Ctx, args: &[Bytes], end: End, only_existing: bool) {
    let fill = fill(ctx);
    let depth = depth(ctx);
    let (db, out) = ctx.db_out();
    let ev = end.push_event();
    let g = if only_existing {
        db.write::<List>(&args[1], ev)
    } else {
        db.write_or_create::<List>(&args[1], ev).map(Some)
    };
    let Some(g) = typed(out, g) else {
        return;
    };
    let Some(mut l) = g else {
        return out.int(0);
    };
    created(&mut l, depth);
    for v in &args[2..] {
        push(&mut l, end, v, fill);
    }
    out.int(l.len() as i64);
}

fn lpush(ctx: &mut Ctx, args: &[Bytes]) {
    push_generic(ctx, args, End::Left, false);
}

fn rpush(ctx: &mut Ctx, args: &[Bytes]) {
    push_generic(ctx, args, End::Right, false);
}

fn lpushx(ctx: &mut Ctx, args: &[Bytes]) {
    push_generic(ctx, args, End::Left, true);
}

fn rpushx(ctx: &mut Ctx, args: &[Bytes]) {
    push_generic(ctx, args, End::Right, true);
}

fn pop_generic(ctx: &mut Ctx, args: &[Bytes], end: End) {
    if args.len() > 3 {
        return ctx.error(&format!(
            "ERR wrong number of arguments for '{}' command",
            if end == End::Left { "lpop" } else { "rpop" }
        ));
    }
    let count = match args.get(2) {
        None => None,
        Some(a) => match parse_i64(a) {
            Some(n) if n >= 0 => Some(n as usize),
            _ => return ctx.error("ERR value is out of range, must be positive"),
        },
    };
    let (db, out) = ctx.db_out();
    let Some(g) = typed(out, db.write::<List>(&args[1], end.pop_event())) else {
        return;
    };
    let Some(mut l) = g else {
        return match count {
            None => out.null(),
            Some(_) => out.null_array(),
        };
    };
    match count {
        None => match pop(&mut l, end) {
            Some(v) => out.bulk(&v),
            None => out.null(),
        },
        Some(0) => {
            l.no_change();
            out.array(0);
        }
        Some(n) => {
            let n = n.min(l.len());
            out.array(n);
            for _ in 0..n {
                if let Some(v) = pop(&mut l, end) {
                    out.bulk(&v);
                }
            }
        }
    }
}

fn lpop(ctx: &mut Ctx, args: &[Bytes]) {
    pop_generic(ctx, args, End::Left);
}

fn rpop(ctx: &mut Ctx, args: &[Bytes]) {
    pop_generic(ctx, args, End::Right);
}

fn llen(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    if let Some(l) = typed(out, db.read::<List>(&args[1])) {
        out.int(l.map_or(0, |l| l.len() as i64));
    }
}

/// A list index as Redis normalises it: negative counts from the tail.
fn norm_index(i: i64, len: usize) -> Option<usize> {
    let i = if i < 0 { i.checked_add(len as i64)? } else { i };
    (i >= 0 && (i as usize) < len).then_some(i as usize)
}

fn lindex(ctx: &mut Ctx, args: &[Bytes]) {
    // As Redis: the key first (missing: nil, whatever the index), then the index.
    let (db, out) = ctx.db_out();
    let Some(l) = typed(out, db.read::<List>(&args[1])) else {
        return;
    };
    let Some(l) = l else {
        return out.null();
    };
    let Some(i) = crate::util::parse_i64(&args[2]) else {
        return out.error(NOT_INT);
    };
    match norm_index(i, l.len()).and_then(|i| l.get(i)) {
        Some(v) => out.bulk(&v),
        None => out.null(),
    }
}

fn lset(ctx: &mut Ctx, args: &[Bytes]) {
    let fill = fill(ctx);
    let (db, out) = ctx.db_out();
    let Some(g) = typed(out, db.write::<List>(&args[1], Event::list("lset"))) else {
        return;
    };
    let Some(mut l) = g else {
        return out.error(NO_SUCH_KEY);
    };
    // As Redis: the key first, then the index.
    let Some(i) = crate::util::parse_i64(&args[2]) else {
        l.no_change();
        return out.error(NOT_INT);
    };
    match norm_index(i, l.len()) {
        Some(i) => {
            l.set(i, &args[3], fill);
            out.ok();
        }
        None => out.error("ERR index out of range"),
    }
}

fn lrange(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(start) = arg_i64(ctx, &args[2]) else {
        return;
    };
    let Some(end) = arg_i64(ctx, &args[3]) else {
        return;
    };
    let (db, out) = ctx.db_out();
    let Some(l) = typed(out, db.read::<List>(&args[1])) else {
        return;
    };
    let Some(l) = l else {
        return out.array(0);
    };
    match norm_range(start, end, l.len()) {
        None => out.array(0),
        Some((a, b)) => {
            out.array(b - a + 1);
            l.for_each_in(a, b, |v| out.bulk(v));
        }
    }
}

fn ltrim(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(start) = arg_i64(ctx, &args[2]) else {
        return;
    };
    let Some(end) = arg_i64(ctx, &args[3]) else {
        return;
    };
    let (db, out) = ctx.db_out();
    let Some(g) = typed(out, db.write::<List>(&args[1], Event::list("ltrim"))) else {
        return;
    };
    if let Some(mut l) = g {
        match norm_range(start, end, l.len()) {
            Some((a, b)) => l.trim(a, b),
            None => l.clear(),
        }
    }
    out.ok();
}

fn lrem(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(count) = arg_i64(ctx, &args[2]) else {
        return;
    };
    let (db, out) = ctx.db_out();
    let Some(g) = typed(out, db.write::<List>(&args[1], Event::list("lrem"))) else {
        return;
    };
    let Some(mut l) = g else {
        return out.int(0);
    };
    let n = l.remove(count, &args[3]);
    if n == 0 {
        l.no_change();
    }
    out.int(n as i64);
}

fn linsert(ctx: &mut Ctx, args: &[Bytes]) {
    let before = if eq_ic(&args[2], "before") {
        true
    } else if eq_ic(&args[2], "after") {
        false
    } else {
        return ctx.error(SYNTAX);
    };
    let fill = fill(ctx);
    let (db, out) = ctx.db_out();
    let Some(g) = typed(out, db.write::<List>(&args[1], Event::list("linsert"))) else {
        return;
    };
    let Some(mut l) = g else {
        return out.int(0);
    };
    match l.insert(&args[3], before, &args[4], fill) {
        Some(n) => out.int(n as i64),
        None => {
            l.no_change();
            out.int(-1)
        }
    }
}

fn lpos(ctx: &mut Ctx, args: &[Bytes]) {
    let mut rank: i64 = 1;
    let mut count: Option<usize> = None;
    let mut maxlen: usize = 0;
    let mut i = 3;
    while i < args.len() {
        let opt = &args[i];
        let Some(val) = args.get(i + 1) else {
            return ctx.error(SYNTAX);
        };
        if eq_ic(opt, "rank") {
            let Some(r) = arg_i64(ctx, val) else {
                return;
            };
            if r == 0 {
                return ctx.error("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list");
            }
            // Redis negates the rank to search from the tail; LONG_MIN
            // stays negative there and matches from the first one.
            rank = if r == i64::MIN { -1 } else { r };
        } else if eq_ic(opt, "count") {
            // Redis gives the same error for a count that is not a number.
            match parse_i64(val) {
                Some(c) if c >= 0 => count = Some(c as usize),
                _ => return ctx.error("ERR COUNT can't be negative"),
            }
        } else if eq_ic(opt, "maxlen") {
            match parse_i64(val) {
                Some(m) if m >= 0 => maxlen = m as usize,
                _ => return ctx.error("ERR MAXLEN can't be negative"),
            }
        } else {
            return ctx.error(SYNTAX);
        }
        i += 2;
    }
    let (db, out) = ctx.db_out();
    let Some(l) = typed(out, db.read::<List>(&args[1])) else {
        return;
    };
    let found = match l {
        Some(l) => l.positions(&args[2], rank, count.unwrap_or(1), maxlen),
        None => Vec::new(),
    };
    match count {
        Some(_) => {
            out.array(found.len());
            for p in found {
                out.int(p as i64);
            }
        }
        None => match found.first() {
            Some(p) => out.int(*p as i64),
            None => out.null(),
        },
    }
}

/// Pops from `src` and pushes onto `dst` (LMOVE and friends). Returns the
/// moved element, None when `src` is missing or empty, Err after a
/// WRONGTYPE reply (both keys are checked before anything changes).
fn move_one(
    ctx: &mut Ctx,
    src: &Bytes,
    dst: &Bytes,
    from: End,
    to: End,
) -> Result<Option<Vec<u8>>, ()> {
    let fill = fill(ctx);
    let depth = depth(ctx);
    let serving = ctx.conn.serving.is_some();
    let (db, out) = ctx.db_out();
    // A waiter is served only from a list: another type waits on.
    if serving && db.check_type::<List>(src).is_err() {
        return Ok(None);
    }
    let Some(exists) = typed(out, db.check_type::<List>(src)) else {
        return Err(());
    };
    if !exists {
        return Ok(None);
    }
    if typed(out, db.check_type::<List>(dst)).is_none() {
        return Err(());
    }
    // Redis reports the push before the pop (lmoveGenericCommand), so the
    // events are recorded in that order.
    if src == dst {
        // A rotation: one value throughout, never emptied in between.
        let Ok(Some(mut l)) = db.write::<List>(src, to.push_event()) else {
            return Ok(None);
        };
        let Some(v) = pop(&mut l, from) else {
            return Ok(None);
        };
        push(&mut l, to, &v, fill);
        drop(l);
        db.touch_modified(src, from.pop_event());
        return Ok(Some(v));
    }
    // The value is copied first, pushed, then popped (which may delete src).
    let v = match db.write::<List>(src, from.pop_event()) {
        Ok(Some(l)) => match from {
            End::Left => l.front(),
            End::Right => l.back(),
        }
        .map(<[u8]>::to_vec),
        _ => None,
    };
    let Some(v) = v else {
        return Ok(None);
    };
    if let Ok(mut l) = db.write_or_create::<List>(dst, to.push_event()) {
        created(&mut l, depth);
        push(&mut l, to, &v, fill);
    }
    if let Ok(Some(mut l)) = db.write::<List>(src, from.pop_event()) {
        pop(&mut l, from);
    }
    Ok(Some(v))
}

fn lmove(ctx: &mut Ctx, args: &[Bytes]) {
    let (Some(from), Some(to)) = (End::parse(&args[3]), End::parse(&args[4])) else {
        return ctx.error(SYNTAX);
    };
    if let Ok(v) = move_one(ctx, &args[1], &args[2], from, to) {
        match v {
            Some(v) => ctx.out.bulk(&v),
            None => ctx.out.null(),
        }
    }
}

fn rpoplpush(ctx: &mut Ctx, args: &[Bytes]) {
    if let Ok(v) = move_one(ctx, &args[1], &args[2], End::Right, End::Left) {
        match v {
            Some(v) => ctx.out.bulk(&v),
            None => ctx.out.null(),
        }
    }
}

fn bpop_generic(ctx: &mut Ctx, args: &[Bytes], end: End) {
    let Some(deadline) = parse_timeout(ctx, &args[args.len() - 1]) else {
        return;
    };
    let keys = &args[1..args.len() - 1];
    for key in keys {
        if !may_take(ctx, key) {
            continue;
        }
        let serving = ctx.conn.serving.is_some();
        let (db, out) = ctx.db_out();
        match db.write::<List>(key, end.pop_event()) {
            // Served only from a list: another type waits on.
            Err(_) if serving => break,
            Err(e) => {
                typed::<()>(out, Err(e));
                return;
            }
            Ok(Some(mut l)) => {
                if let Some(v) = pop(&mut l, end) {
                    out.array(2);
                    out.bulk(key);
                    out.bulk(&v);
                    return;
                }
            }
            Ok(None) => {}
        }
    }
    block_on(ctx, keys, deadline, TimeoutReply::NullArray);
}

fn blpop(ctx: &mut Ctx, args: &[Bytes]) {
    bpop_generic(ctx, args, End::Left);
}

fn brpop(ctx: &mut Ctx, args: &[Bytes]) {
    bpop_generic(ctx, args, End::Right);
}

fn bmove_generic(ctx: &mut Ctx, args: &[Bytes], from: End, to: End, timeout: &[u8]) {
    let Some(deadline) = parse_timeout(ctx, timeout) else {
        return;
    };
    match move_one(ctx, &args[1], &args[2], from, to) {
        Err(()) => {}
        Ok(Some(v)) => ctx.out.bulk(&v),
        Ok(None) => block_on(ctx, &args[1..2], deadline, TimeoutReply::NullBulk),
    }
}

fn blmove(ctx: &mut Ctx, args: &[Bytes]) {
    let (Some(from), Some(to)) = (End::parse(&args[3]), End::parse(&args[4])) else {
        return ctx.error(SYNTAX);
    };
    bmove_generic(ctx, args, from, to, &args[5]);
}

fn brpoplpush(ctx: &mut Ctx, args: &[Bytes]) {
    bmove_generic(ctx, args, End::Right, End::Left, &args[3]);
}

/// Pops up to `count` from the first non-empty list of `keys` and replies
/// `[key, [elements]]`; false when every list is missing or empty (nothing
/// written), true after any reply (WRONGTYPE included).
fn mpop_serve(ctx: &mut Ctx, keys: &[Bytes], end: End, count: usize) -> bool {
    for key in keys {
        if !may_take(ctx, key) {
            continue;
        }
        let serving = ctx.conn.serving.is_some();
        let (db, out) = ctx.db_out();
        let g = match db.write::<List>(key, end.pop_event()) {
            // Served only from a list: another type waits on.
            Err(_) if serving => return false,
            r => r,
        };
        let Some(g) = typed(out, g) else {
            return true;
        };
        if let Some(mut l) = g {
            let n = count.min(l.len());
            out.array(2);
            out.bulk(key);
            out.array(n);
            for _ in 0..n {
                if let Some(v) = pop(&mut l, end) {
                    out.bulk(&v);
                }
            }
            return true;
        }
    }
    false
}

fn lmpop(ctx: &mut Ctx, args: &[Bytes]) {
    let Some((keys, end, count)) = mpop_args(ctx, &args[1..], End::parse) else {
        return;
    };
    if !mpop_serve(ctx, keys, end, count) {
        ctx.out.null_array();
    }
}

fn blmpop(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(deadline) = parse_timeout(ctx, &args[1]) else {
        return;
    };
    let Some((keys, end, count)) = mpop_args(ctx, &args[2..], End::parse) else {
        return;
    };
    if !mpop_serve(ctx, keys, end, count) {
        block_on(ctx, keys, deadline, TimeoutReply::NullArray);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_normalise_as_redis() {
        assert_eq!(norm_range(0, -1, 3), Some((0, 2)));
        assert_eq!(norm_range(-100, 100, 3), Some((0, 2)));
        assert_eq!(norm_range(2, 1, 3), None);
        assert_eq!(norm_range(3, 5, 3), None);
        assert_eq!(norm_range(i64::MIN, i64::MAX, 3), Some((0, 2)));
        assert_eq!(norm_index(-1, 3), Some(2));
        assert_eq!(norm_index(-4, 3), None);
        assert_eq!(norm_index(i64::MIN, 3), None);
        assert_eq!(norm_index(3, 3), None);
    }
}
