//! Stream commands (Redis 7.0's t_stream.c): XADD, XRANGE, XREAD, the
//! consumer groups and XINFO, with Redis's replies, errors, keyspace
//! events and propagation (XADD with the ID and trimming it resolved;
//! XREADGROUP, XCLAIM and XAUTOCLAIM as the XCLAIM and XGROUP SETID
//! records Redis writes instead of themselves).
//!
//! Reaches the keyspace only through `Ctx`'s typed lookups, and the
//! blocking registry only through `block_on`; the structure is
//! `types::stream`'s. Must not notify anyone itself: the guard records
//! each change.

use bytes::Bytes;

use super::*;
use crate::blocking::TimeoutReply;
use crate::types::listpack::Elem;
use crate::types::stream::{
    AddError, Entry, Group, NewId, NodeLimits, Stream, StreamId, Trim, INVALID_ENTRIES_READ,
};
use crate::util::{cmd_time_ms, eq_ic, parse_i64};

const READ: &[&str] = &["read", "stream", "slow"];
const READ_FAST: &[&str] = &["read", "stream", "fast"];
const WRITE: &[&str] = &["write", "stream", "slow"];
const WRITE_FAST: &[&str] = &["write", "stream", "fast"];
const BLOCK_READ: &[&str] = &["read", "stream", "slow", "blocking"];
const BLOCK_WRITE: &[&str] = &["write", "stream", "slow", "blocking"];

const ONE: (i32, i32, i32) = (1, 1, 1);
const G: &str = "stream";
use super::WRITE as W;

#[rustfmt::skip]
static XGROUP_SUBS: &[Spec] = &[
    spec("create", -5, W | DENYOOM, (2, 2, 1), G, "5.0.0", "Create a consumer group.", WRITE, xgroup),
    spec("createconsumer", 5, W | DENYOOM, (2, 2, 1), G, "6.2.0", "Create a consumer in a consumer group.", WRITE, xgroup),
    spec("delconsumer", 5, W, (2, 2, 1), G, "5.0.0", "Delete a consumer from a consumer group.", WRITE, xgroup),
    spec("destroy", 4, W, (2, 2, 1), G, "5.0.0", "Destroy a consumer group.", WRITE, xgroup),
    spec("help", 2, LOADING | STALE, (0, 0, 0), G, "5.0.0", "Show helpful text about the different subcommands", &["stream", "slow"], xgroup),
    spec("setid", -5, W, (2, 2, 1), G, "5.0.0", "Set a consumer group to an arbitrary last delivered ID value.", WRITE, xgroup),
];

#[rustfmt::skip]
static XINFO_SUBS: &[Spec] = &[
    spec("consumers", 4, READONLY, (2, 2, 1), G, "5.0.0", "List the consumers in a consumer group", READ, xinfo),
    spec("groups", 3, READONLY, (2, 2, 1), G, "5.0.0", "List the consumer groups of a stream", READ, xinfo),
    spec("help", 2, LOADING | STALE, (0, 0, 0), G, "5.0.0", "Show helpful text about the different subcommands", &["stream", "slow"], xinfo),
    spec("stream", -3, READONLY, (2, 2, 1), G, "5.0.0", "Get information about a stream", READ, xinfo),
];

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    spec("xadd", -5, W | DENYOOM | FAST, ONE, G, "5.0.0", "Appends a new entry to a stream", WRITE_FAST, xadd),
    spec("xlen", 2, READONLY | FAST, ONE, G, "5.0.0", "Return the number of entries in a stream", READ_FAST, xlen),
    spec("xrange", -4, READONLY, ONE, G, "5.0.0", "Return a range of elements in a stream, with IDs matching the specified IDs interval", READ, xrange),
    spec("xrevrange", -4, READONLY, ONE, G, "5.0.0", "Return a range of elements in a stream, with IDs matching the specified IDs interval, in reverse order (from greater to smaller IDs) compared to XRANGE", READ, xrevrange),
    spec("xdel", -3, W | FAST, ONE, G, "5.0.0", "Removes the specified entries from the stream. Returns the number of items actually deleted, that may be different from the number of IDs passed in case certain IDs do not exist.", WRITE_FAST, xdel),
    spec("xtrim", -4, W, ONE, G, "5.0.0", "Trims the stream to (approximately if '~' is passed) a certain size", WRITE, xtrim),
    spec("xsetid", -3, W | DENYOOM | FAST, ONE, G, "5.0.0", "An internal command for replicating stream values", WRITE_FAST, xsetid),
    spec("xread", -4, READONLY | BLOCKING, (0, 0, 0), G, "5.0.0", "Return never seen elements in multiple streams, with IDs greater than the ones reported by the caller for each stream. Can block.", BLOCK_READ, xread),
    spec("xreadgroup", -7, W | BLOCKING, (0, 0, 0), G, "5.0.0", "Return new entries from a stream using a consumer group, or access the history of the pending entries for a given consumer. Can block.", BLOCK_WRITE, xreadgroup),
    spec("xack", -4, W | FAST, ONE, G, "5.0.0", "Marks a pending message as correctly processed, effectively removing it from the pending entries list of the consumer group. Return value of the command is the number of messages successfully acknowledged, that is, the IDs we were actually able to resolve in the PEL.", WRITE_FAST, xack),
    spec("xpending", -3, READONLY, ONE, G, "5.0.0", "Return information and entries from a stream consumer group pending entries list, that are messages fetched but never acknowledged.", READ, xpending),
    spec("xclaim", -6, W | FAST, ONE, G, "5.0.0", "Changes (or acquires) ownership of a message in a consumer group, as if the message was delivered to the specified consumer.", WRITE_FAST, xclaim),
    spec("xautoclaim", -6, W | FAST, ONE, G, "6.2.0", "Changes (or acquires) ownership of messages in a consumer group, as if the messages were delivered to the specified consumer.", WRITE_FAST, xautoclaim),
    Spec { subs: XGROUP_SUBS, ..spec("xgroup", -2, 0, (0, 0, 0), G, "5.0.0", "A container for consumer groups commands", &["slow"], xgroup) },
    Spec { subs: XINFO_SUBS, ..spec("xinfo", -2, 0, (0, 0, 0), G, "5.0.0", "A container for stream introspection commands", &["slow"], xinfo) },
];

const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";

fn ev(name: &'static str) -> Event {
    Event::stream(name)
}

/// A change to a stream's groups: notified by name, but not a modification
/// of the key for WATCH and tracking (Redis signals only XADD, XDEL,
/// XTRIM and the creation of a stream).
fn quiet(name: &'static str) -> Event {
    Event::stream(name).unsignaled()
}

/// A group's bookkeeping with no event (XREADGROUP, XACK, XCLAIM).
const BOOKKEEPING: Event = Event::stream("").unsignaled();

/// Redis's string2ull: a non-negative `long long`, or what strtoull takes
/// (leading spaces, a sign, up to 2^64-1) over the whole string.
fn string2ull(s: &[u8]) -> Option<u64> {
    if let Some(v) = parse_i64(s) {
        return (v >= 0).then_some(v as u64);
    }
    let (_, i, neg) = crate::util::space_and_sign(s);
    if i >= s.len() {
        return None;
    }
    let mut v: u64 = 0;
    for &c in &s[i..] {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    Some(if neg { v.wrapping_neg() } else { v })
}

/// streamGenericParseIDOrReply without the reply: (ID, sequence given).
/// `strict` refuses `-` and `+`; `star` allows `<ms>-*` (XADD).
fn parse_id(a: &[u8], missing_seq: u64, strict: bool, star: bool) -> Option<(StreamId, bool)> {
    if a.len() > 127 {
        return None;
    }
    // A C string: it ends at a NUL.
    let a = a.split(|&c| c == 0).next().unwrap_or(&[]);
    if a == b"-" {
        return (!strict).then_some((StreamId::MIN, true));
    }
    if a == b"+" {
        return (!strict).then_some((StreamId::MAX, true));
    }
    let (ms, seq) = match a.iter().position(|&c| c == b'-') {
        Some(d) => (&a[..d], Some(&a[d + 1..])),
        None => (a, None),
    };
    let ms = string2ull(ms)?;
    match seq {
        Some(b"*") if star => Some((StreamId::new(ms, 0), false)),
        Some(s) => Some((StreamId::new(ms, string2ull(s)?), true)),
        None => Some((StreamId::new(ms, missing_seq), true)),
    }
}

/// An ID argument, or the invalid-ID error.
fn id_arg(ctx: &mut Ctx, a: &[u8], missing_seq: u64, strict: bool) -> Option<StreamId> {
    match parse_id(a, missing_seq, strict, false) {
        Some((id, _)) => Some(id),
        None => {
            ctx.error(INVALID_ID);
            None
        }
    }
}

/// Several strict IDs (XDEL, XACK), or None after the error reply.
fn id_args(ctx: &mut Ctx, args: &[Bytes]) -> Option<Vec<StreamId>> {
    args.iter().map(|a| id_arg(ctx, a, 0, true)).collect()
}

/// A range bound: `(` excludes it (streamParseIntervalIDOrReply), moved
/// one ID in; the error when it cannot move.
fn bound_arg(ctx: &mut Ctx, a: &[u8], end: bool) -> Option<StreamId> {
    let excl = a.len() > 1 && a[0] == b'(';
    let missing = if end { u64::MAX } else { 0 };
    if !excl {
        return id_arg(ctx, a, missing, false);
    }
    let id = id_arg(ctx, &a[1..], missing, true)?;
    let moved = if end { id.decr() } else { id.incr() };
    if moved.is_none() {
        ctx.error(if end {
            "ERR invalid end ID for the interval"
        } else {
            "ERR invalid start ID for the interval"
        });
    }
    moved
}

fn id_bytes(id: StreamId) -> Bytes {
    Bytes::from(id.to_bytes())
}

fn bulk_elem(out: &mut Out, e: Elem<'_>) {
    match e {
        Elem::Str(s) => out.bulk(s),
        Elem::Int(v) => out.bulk_int(v),
    }
}

/// One entry as Redis replies it: `[id, [field, value, ...]]`.
fn reply_entry(out: &mut Out, e: &Entry<'_>) {
    out.array(2);
    out.bulk(&e.id.to_bytes());
    out.array(e.len() * 2);
    for (f, v) in e.fields() {
        bulk_elem(out, f);
        bulk_elem(out, v);
    }
}

fn node_limits(ctx: &Ctx) -> NodeLimits {
    let c = ctx.store.config();
    NodeLimits {
        max_bytes: c.stream_node_max_bytes,
        max_entries: c.stream_node_max_entries as usize,
    }
}

/// XADD's and XTRIM's options (streamParseAddOrTrimArgsOrReply).
#[derive(Default)]
struct TrimArgs {
    trim: Option<Trim>,
    approx: bool,
    limit: u64,
    /// Index of the threshold argument (for the rewrite).
    at: usize,
    nomkstream: bool,
    id: Option<(StreamId, bool)>,
}

/// Parses from argument 2; for XADD, returns the index of the ID.
fn trim_args(ctx: &mut Ctx, args: &[Bytes], xadd: bool) -> Option<(TrimArgs, usize)> {
    let mut t = TrimArgs::default();
    let mut i = 2;
    let mut limit: Option<i64> = None;
    let mut maxlen_given = false;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let o = &args[i][..];
        if xadd && o == b"*" {
            break;
        } else if (eq_ic(o, "maxlen") || eq_ic(o, "minid")) && more > 0 {
            if t.trim.is_some() || maxlen_given {
                ctx.error("ERR syntax error, MAXLEN and MINID options at the same time are not compatible");
                return None;
            }
            t.approx = false;
            let next = &args[i + 1][..];
            if more >= 2 && next == b"~" {
                t.approx = true;
                i += 1;
            } else if more >= 2 && next == b"=" {
                i += 1;
            }
            if eq_ic(o, "maxlen") {
                let v = arg_i64(ctx, &args[i + 1])?;
                if v < 0 {
                    ctx.error("ERR The MAXLEN argument must be >= 0.");
                    return None;
                }
                t.trim = Some(Trim::MaxLen(v as u64));
                maxlen_given = true;
            } else {
                let Some((id, _)) = parse_id(&args[i + 1], 0, true, false) else {
                    ctx.error(INVALID_ID);
                    return None;
                };
                t.trim = Some(Trim::MinId(id));
            }
            i += 1;
            t.at = i;
        } else if eq_ic(o, "limit") && more > 0 {
            let v = arg_i64(ctx, &args[i + 1])?;
            if v < 0 {
                ctx.error("ERR The LIMIT argument must be >= 0.");
                return None;
            }
            limit = Some(v);
            i += 1;
        } else if xadd && eq_ic(o, "nomkstream") {
            t.nomkstream = true;
        } else if xadd {
            let Some(id) = parse_id(o, 0, true, true) else {
                ctx.error(INVALID_ID);
                return None;
            };
            t.id = Some(id);
            break;
        } else {
            ctx.error(SYNTAX);
            return None;
        }
        i += 1;
    }
    if limit.is_some_and(|l| l > 0) && t.trim.is_none() {
        ctx.error("ERR syntax error, LIMIT cannot be used without specifying a trimming strategy");
        return None;
    }
    if !xadd && t.trim.is_none() {
        ctx.error("ERR syntax error, XTRIM must be called with a trimming strategy");
        return None;
    }
    if ctx.conn.obey {
        t.limit = 0;
    } else if let Some(l) = limit {
        if !t.approx {
            ctx.error("ERR syntax error, LIMIT cannot be used without the special ~ option");
            return None;
        }
        t.limit = l as u64;
    } else if t.approx {
        let per = ctx.store.config().stream_node_max_entries;
        let l = per.saturating_mul(100);
        t.limit = if l <= 0 { 10000 } else { l.min(1_000_000) } as u64;
    }
    Some((t, i))
}

/// The rewritten threshold after an approximate trim: `=` and what the
/// stream now holds (its length, or its first ID).
fn rewrite_trim(args: &mut [Bytes], t: &TrimArgs, s: &Stream) {
    let Some(how) = t.trim else { return };
    if !t.approx {
        return;
    }
    args[t.at - 1] = Bytes::from_static(b"=");
    args[t.at] = match how {
        Trim::MaxLen(_) => Bytes::from(s.len().to_string()),
        Trim::MinId(_) => id_bytes(s.first_entry_id().unwrap_or_default()),
    };
}

fn xadd(ctx: &mut Ctx, args: &[Bytes]) {
    let Some((t, idpos)) = trim_args(ctx, args, true) else {
        return;
    };
    let fields = idpos + 1;
    if args.len() < fields + 2 || (args.len() - fields) % 2 == 1 {
        return ctx.error("ERR wrong number of arguments for 'xadd' command");
    }
    if let Some((id, true)) = t.id {
        if id.is_zero() {
            return ctx.error("ERR The ID specified in XADD must be greater than 0-0");
        }
    }
    let lim = node_limits(ctx);
    let now = cmd_time_ms().max(0) as u64;
    let Some((id, logged)) = xadd_apply(ctx, args, &t, idpos, now, lim) else {
        return;
    };
    let mut logged = logged;
    if !matches!(t.id, Some((_, true))) {
        let mut v = logged.unwrap_or_else(|| args.to_vec());
        v[idpos] = id_bytes(id);
        logged = Some(v);
    }
    if let Some(v) = logged {
        ctx.conn.rewrite = Some(vec![(ctx.conn.db, v)]);
    }
}

/// XADD's write: the new ID and the trimming's rewrite, or None after an
/// error reply.
fn xadd_apply(
    ctx: &mut Ctx,
    args: &[Bytes],
    t: &TrimArgs,
    idpos: usize,
    now: u64,
    lim: NodeLimits,
) -> Option<(StreamId, Option<Vec<Bytes>>)> {
    let fields = idpos + 1;
    let (db, out) = ctx.db_out();
    let guard = if t.nomkstream {
        match typed(out, db.write::<Stream>(&args[1], ev("xadd"))) {
            Some(Some(g)) => Some(g),
            Some(None) => {
                out.null();
                return None;
            }
            None => return None,
        }
    } else {
        typed(out, db.write_or_create::<Stream>(&args[1], ev("xadd")))
    };
    let mut s = guard?;
    if s.last_id() == StreamId::MAX {
        s.no_change();
        out.error("ERR The stream has exhausted the last possible ID, unable to add more items");
        return None;
    }
    let new = match t.id {
        None => NewId::Auto,
        Some((id, true)) => NewId::Exact(id),
        Some((id, false)) => NewId::Ms(id.ms),
    };
    let id = match s.add(&args[fields..], new, now, lim) {
        Ok(id) => id,
        Err(e) => {
            s.no_change();
            out.error(match e {
                AddError::NotGreater => "ERR The ID specified in XADD is equal or smaller than the target stream top item",
                AddError::TooLarge => "ERR Elements are too large to be stored",
            });
            return None;
        }
    };
    out.bulk(&id.to_bytes());
    let mut logged: Option<Vec<Bytes>> = None;
    if let Some(how) = t.trim {
        if s.trim(how, t.approx, t.limit) > 0 {
            s.then(ev("xtrim"));
        }
        if t.approx {
            let mut v = args.to_vec();
            rewrite_trim(&mut v, t, &s);
            logged = Some(v);
        }
    }
    Some((id, logged))
}

fn xlen(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    let Some(s) = typed(out, db.read::<Stream>(&args[1])) else {
        return;
    };
    out.int(s.map_or(0, |s| s.len() as i64));
}

fn xrange(ctx: &mut Ctx, args: &[Bytes]) {
    range_cmd(ctx, args, false)
}

fn xrevrange(ctx: &mut Ctx, args: &[Bytes]) {
    range_cmd(ctx, args, true)
}

fn range_cmd(ctx: &mut Ctx, args: &[Bytes], rev: bool) {
    let (sa, ea) = if rev {
        (&args[3], &args[2])
    } else {
        (&args[2], &args[3])
    };
    let Some(start) = bound_arg(ctx, sa, false) else {
        return;
    };
    let Some(end) = bound_arg(ctx, ea, true) else {
        return;
    };
    let mut count: i64 = -1;
    let mut j = 4;
    while j < args.len() {
        if eq_ic(&args[j], "count") && j + 1 < args.len() {
            let Some(c) = arg_i64(ctx, &args[j + 1]) else {
                return;
            };
            count = c.max(0);
            j += 2;
        } else {
            return ctx.error(SYNTAX);
        }
    }
    let (db, out) = ctx.db_out();
    let Some(s) = typed(out, db.read::<Stream>(&args[1])) else {
        return;
    };
    let Some(s) = s else {
        out.array(0);
        return;
    };
    if count == 0 {
        out.null_array();
        return;
    }
    let n = if count < 0 {
        usize::MAX
    } else {
        count as usize
    };
    let entries: Vec<Entry<'_>> = s.range(start, end, rev).take(n).collect();
    out.array(entries.len());
    for e in &entries {
        reply_entry(out, e);
    }
}

fn xdel(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(ids) = id_args(ctx, &args[2..]) else {
        return;
    };
    let (db, out) = ctx.db_out();
    let Some(s) = typed(out, db.write::<Stream>(&args[1], ev("xdel"))) else {
        return;
    };
    let Some(mut s) = s else {
        out.int(0);
        return;
    };
    let mut deleted = 0;
    let mut first_went = false;
    let mut max = StreamId::MIN;
    let first = s.first_id();
    for id in ids {
        if s.delete(id) {
            first_went |= id == first;
            max = max.max(id);
            deleted += 1;
        }
    }
    if deleted > 0 {
        s.after_deletes(max, first_went);
    } else {
        s.no_change();
    }
    out.int(deleted);
}

fn xtrim(ctx: &mut Ctx, args: &[Bytes]) {
    let Some((t, _)) = trim_args(ctx, args, false) else {
        return;
    };
    let logged = {
        let (db, out) = ctx.db_out();
        let Some(s) = typed(out, db.write::<Stream>(&args[1], ev("xtrim"))) else {
            return;
        };
        let Some(mut s) = s else {
            out.int(0);
            return;
        };
        let Some(how) = t.trim else { return };
        let n = s.trim(how, t.approx, t.limit);
        let mut logged = None;
        if n == 0 {
            s.no_change();
        } else if t.approx {
            let mut v = args.to_vec();
            rewrite_trim(&mut v, &t, &s);
            logged = Some(v);
        }
        out.int(n as i64);
        logged
    };
    if let Some(v) = logged {
        ctx.conn.rewrite = Some(vec![(ctx.conn.db, v)]);
    }
}

fn xsetid(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(id) = id_arg(ctx, &args[2], 0, true) else {
        return;
    };
    let mut added: i64 = -1;
    let mut max_del = StreamId::MIN;
    let mut i = 3;
    while i < args.len() {
        let more = args.len() - 1 - i;
        if eq_ic(&args[i], "entriesadded") && more > 0 {
            let Some(v) = arg_i64(ctx, &args[i + 1]) else {
                return;
            };
            if v < 0 {
                return ctx.error("ERR entries_added must be positive");
            }
            added = v;
        } else if eq_ic(&args[i], "maxdeletedid") && more > 0 {
            let Some(m) = id_arg(ctx, &args[i + 1], 0, true) else {
                return;
            };
            if id < m {
                return ctx.error(
                    "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                );
            }
            max_del = m;
        } else {
            return ctx.error(SYNTAX);
        }
        i += 2;
    }
    let (db, out) = ctx.db_out();
    let Some(s) = typed(out, db.write::<Stream>(&args[1], quiet("xsetid"))) else {
        return;
    };
    let Some(mut s) = s else {
        out.error(NO_SUCH_KEY);
        return;
    };
    if !s.is_empty() {
        let top = s
            .range(StreamId::MIN, StreamId::MAX, true)
            .next()
            .map(|e| e.id)
            .unwrap_or_default();
        if id < top {
            s.no_change();
            out.error("ERR The ID specified in XSETID is smaller than the target stream top item");
            return;
        }
        if added != -1 && s.len() > added as u64 {
            s.no_change();
            out.error(
                "ERR The entries_added specified in XSETID is smaller than the target stream length",
            );
            return;
        }
    }
    let added = if added == -1 {
        s.entries_added()
    } else {
        added as u64
    };
    let max_del = if max_del.is_zero() {
        s.max_deleted()
    } else {
        max_del
    };
    s.set_meta(id, added, max_del);
    out.ok();
}

// ---------------------------------------------------------------------------
// XREAD and XREADGROUP

/// XREAD/XREADGROUP's parsed options.
struct ReadArgs {
    block: Option<Option<i64>>,
    count: usize,
    /// Index of the first key.
    streams: usize,
    n: usize,
    group: Option<(Bytes, Bytes)>,
    noack: bool,
}

fn read_args(ctx: &mut Ctx, args: &[Bytes], group_cmd: bool) -> Option<ReadArgs> {
    let name = String::from_utf8_lossy(&args[0]).to_string();
    let mut r = ReadArgs {
        block: None,
        count: 0,
        streams: 0,
        n: 0,
        group: None,
        noack: false,
    };
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - i - 1;
        let o = &args[i];
        if eq_ic(o, "block") && more > 0 {
            if ctx.conn.in_script {
                ctx.error(&format!(
                    "ERR {name} command is not allowed with BLOCK option from scripts"
                ));
                return None;
            }
            i += 1;
            r.block = Some(parse_ms_timeout(ctx, &args[i])?);
        } else if eq_ic(o, "count") && more > 0 {
            i += 1;
            let c = arg_i64(ctx, &args[i])?;
            r.count = c.max(0) as usize;
        } else if eq_ic(o, "streams") && more > 0 {
            r.streams = i + 1;
            let n = args.len() - r.streams;
            if !n.is_multiple_of(2) {
                ctx.error("ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.");
                return None;
            }
            r.n = n / 2;
            break;
        } else if eq_ic(o, "group") && more >= 2 {
            if !group_cmd {
                ctx.error(
                    "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                );
                return None;
            }
            r.group = Some((args[i + 1].clone(), args[i + 2].clone()));
            i += 2;
        } else if eq_ic(o, "noack") {
            if !group_cmd {
                ctx.error(
                    "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                );
                return None;
            }
            r.noack = true;
        } else {
            ctx.error(SYNTAX);
            return None;
        }
        i += 1;
    }
    if r.streams == 0 {
        ctx.error(SYNTAX);
        return None;
    }
    if group_cmd && r.group.is_none() {
        ctx.error("ERR Missing GROUP option for XREADGROUP");
        return None;
    }
    Some(r)
}

/// BLOCK's milliseconds (getTimeoutFromObjectOrReply in ms): an integer,
/// 0 for no deadline, else an absolute deadline.
fn parse_ms_timeout(ctx: &mut Ctx, a: &[u8]) -> Option<Option<i64>> {
    let Some(ms) = parse_i64(a) else {
        ctx.error("ERR timeout is not an integer or out of range");
        return None;
    };
    if ms < 0 {
        ctx.error("ERR timeout is negative");
        return None;
    }
    if ms == 0 {
        return Some(None);
    }
    Some(Some(cmd_time_ms().saturating_add(ms)))
}

fn xread(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(r) = read_args(ctx, args, false) else {
        return;
    };
    let keys = &args[r.streams..r.streams + r.n];
    let idargs = &args[r.streams + r.n..];
    // Run again for a waiter: Redis serves blocked XREADs only from a
    // stream, so a key that now holds another type keeps it waiting (the
    // other keys are not looked at; their IDs were resolved at block time).
    if let Some(k) = ctx.conn.serving.clone() {
        if ctx.db().check_type::<Stream>(&k).is_err() {
            // Asking to block again leaves the waiter as it is (deadline
            // included): `waiters::serve_command`.
            return block_on_with(
                ctx,
                keys,
                None,
                TimeoutReply::NullArray,
                args.to_vec(),
                false,
            );
        }
    }
    // The IDs first (`$`: the stream's last ID now), every key's type.
    let mut ids = Vec::with_capacity(r.n);
    for (k, a) in keys.iter().zip(idargs) {
        let serving_other = ctx.conn.serving.as_ref().is_some_and(|s| s != k);
        let (db, out) = ctx.db_out();
        let s = if serving_other {
            None
        } else {
            match typed(out, db.read::<Stream>(k)) {
                Some(s) => s,
                None => return,
            }
        };
        let last = s.map(|s| s.last_id());
        if &a[..] == b"$" {
            ids.push(last.unwrap_or_default());
            continue;
        }
        if &a[..] == b">" {
            return ctx.error("ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.");
        }
        let Some(id) = id_arg(ctx, a, 0, true) else {
            return;
        };
        ids.push(id);
    }
    let count = match (r.count, ctx.conn.serving.is_some()) {
        (0, true) => 1000,
        (c, _) => c,
    };
    let n = if count == 0 { usize::MAX } else { count };
    let resp3 = ctx.out.resp3;
    let mut served = 0;
    let mut body = Out::scratch(resp3);
    for (k, gt) in keys.iter().zip(&ids) {
        if !may_take(ctx, k) {
            continue;
        }
        let db = ctx.db();
        let Ok(Some(s)) = db.read::<Stream>(k) else {
            continue;
        };
        let Some(start) = gt.incr() else { continue };
        let entries: Vec<Entry<'_>> = s.range(start, StreamId::MAX, false).take(n).collect();
        if entries.is_empty() {
            continue;
        }
        served += 1;
        if !resp3 {
            body.array(2);
        }
        body.bulk(k);
        body.array(entries.len());
        for e in &entries {
            reply_entry(&mut body, e);
        }
    }
    if served > 0 {
        if resp3 {
            ctx.out.map(served);
        } else {
            ctx.out.array(served);
        }
        ctx.out.raw(&body.buf);
        return;
    }
    match r.block {
        Some(deadline) => {
            // Wait for IDs above those resolved now (`$` included).
            let mut again = args.to_vec();
            for (i, id) in ids.iter().enumerate() {
                again[r.streams + r.n + i] = id_bytes(*id);
            }
            block_on_with(ctx, keys, deadline, TimeoutReply::NullArray, again, false);
        }
        _ => ctx.out.null_array(),
    }
}

fn xreadgroup(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(r) = read_args(ctx, args, true) else {
        return;
    };
    let Some((gname, cname)) = r.group.clone() else {
        return;
    };
    let keys = &args[r.streams..r.streams + r.n];
    let idargs = &args[r.streams + r.n..];
    let serving = ctx.conn.serving.clone();
    // Served after a wait: the key went away or its group did.
    if let Some(k) = &serving {
        let (db, _) = ctx.db_out();
        match db.read::<Stream>(k) {
            Ok(Some(s)) if s.group(&gname).is_none() => {
                return ctx.error(
                    "NOGROUP the consumer group this client was blocked on no longer exists",
                );
            }
            Ok(Some(_)) => {}
            _ => return ctx.error("UNBLOCKED the stream key no longer exists"),
        }
    }
    // IDs: None for `>`.
    let mut ids: Vec<Option<StreamId>> = Vec::with_capacity(r.n);
    for (k, a) in keys.iter().zip(idargs) {
        let (db, out) = ctx.db_out();
        let Some(s) = typed(out, db.read::<Stream>(k)) else {
            return;
        };
        if s.is_none_or(|s| s.group(&gname).is_none()) {
            return nogroup(out, k, &gname, " in XREADGROUP with GROUP option");
        }
        if &a[..] == b"$" {
            return ctx.error("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.");
        }
        if &a[..] == b">" {
            ids.push(None);
            continue;
        }
        let Some(id) = id_arg(ctx, a, 0, true) else {
            return;
        };
        ids.push(Some(id));
    }
    let count = match (r.count, serving.is_some()) {
        (0, true) => 1000,
        (c, _) => c,
    };
    let n = if count == 0 { usize::MAX } else { count };
    let resp3 = ctx.out.resp3;
    let now = cmd_time_ms();
    let db_index = ctx.conn.db;
    let mut served = 0;
    let mut body = Out::scratch(resp3);
    let mut log: Vec<Vec<Bytes>> = Vec::new();
    for (k, want) in keys.iter().zip(&ids) {
        if !may_take(ctx, k) {
            continue;
        }
        let (db, _) = ctx.db_out();
        let Ok(Some(peek)) = db.read::<Stream>(k) else {
            continue;
        };
        let Some(g) = peek.group(&gname) else {
            continue;
        };
        // New entries only when the stream has some past the group's.
        let new_ready = want.is_none()
            && peek
                .range(StreamId::MIN, StreamId::MAX, true)
                .next()
                .is_some_and(|e| e.id > g.last_id);
        if want.is_none() && !new_ready {
            continue;
        }
        let created = peek
            .group(&gname)
            .is_some_and(|g| g.consumer(&cname).is_none());
        let event = if created {
            quiet("xgroup-createconsumer")
        } else {
            BOOKKEEPING
        };
        let Ok(Some(mut s)) = db.write::<Stream>(k, event) else {
            continue;
        };
        let Some((g, view)) = s.with_group(&gname) else {
            continue;
        };
        if created {
            g.create_consumer(&cname, now);
            if r.noack {
                log.push(vec![
                    b("XGROUP"),
                    b("CREATECONSUMER"),
                    k.clone(),
                    gname.clone(),
                    cname.clone(),
                ]);
            }
        } else {
            g.touch_consumer(&cname, now);
        }
        served += 1;
        if !resp3 {
            body.array(2);
        }
        body.bulk(k);
        match want {
            Some(from) => {
                // The consumer's own pending entries from `from` on.
                let Some(start) = from.incr().or(Some(*from)) else {
                    continue;
                };
                let start = if from.is_zero() { StreamId::MIN } else { start };
                let _ = start;
                let pend: Vec<StreamId> = g
                    .consumer(&cname)
                    .map(|c| {
                        c.pending_from(from.incr().unwrap_or(StreamId::MAX))
                            .take(n)
                            .collect()
                    })
                    .unwrap_or_default();
                body.array(pend.len());
                for pid in pend {
                    match view.range(pid, pid, false).next() {
                        Some(e) => {
                            reply_entry(&mut body, &e);
                            g.redeliver(pid, now);
                        }
                        None => {
                            body.array(2);
                            body.bulk(&pid.to_bytes());
                            body.null_array();
                        }
                    }
                }
            }
            None => {
                let start = g.last_id.incr().unwrap_or(StreamId::MAX);
                let entries: Vec<Entry<'_>> =
                    view.range(start, StreamId::MAX, false).take(n).collect();
                body.array(entries.len());
                for e in &entries {
                    view.advance(g, e.id);
                    reply_entry(&mut body, e);
                    if !r.noack {
                        g.deliver(e.id, &cname, now);
                        log.push(xclaim_record(k, &gname, g, e.id));
                    }
                }
                if r.noack && !entries.is_empty() {
                    log.push(setid_record(k, &gname, g.last_id, g.entries_read));
                }
            }
        }
    }
    if served > 0 {
        if resp3 {
            ctx.out.map(served);
        } else {
            ctx.out.array(served);
        }
        ctx.out.raw(&body.buf);
        log_records(ctx, db_index, log);
        return;
    }
    match r.block {
        Some(deadline) => {
            block_on_with(
                ctx,
                keys,
                deadline,
                TimeoutReply::NullArray,
                args.to_vec(),
                true,
            );
        }
        _ => ctx.out.null_array(),
    }
}

fn b(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

/// The XCLAIM Redis propagates for pending entry `id` of group `g` as it
/// stands (delivered, claimed, or about to go with its deleted entry).
fn xclaim_record(key: &Bytes, gname: &Bytes, g: &Group, id: StreamId) -> Vec<Bytes> {
    let (owner, time, count) = match g.pending(&id) {
        Some(n) => (g.owner(n).clone(), n.delivery_time, n.delivery_count),
        None => (Bytes::new(), 0, 0),
    };
    vec![
        b("XCLAIM"),
        key.clone(),
        gname.clone(),
        owner,
        b("0"),
        id_bytes(id),
        b("TIME"),
        Bytes::from(time.to_string()),
        b("RETRYCOUNT"),
        Bytes::from(count.to_string()),
        b("FORCE"),
        b("JUSTID"),
        b("LASTID"),
        id_bytes(g.last_id),
    ]
}

/// Logs a command's records in its place (in MULTI/EXEC when several).
fn log_records(ctx: &mut Ctx, db: usize, log: Vec<Vec<Bytes>>) {
    ctx.conn.rewrite = Some(super::propagate::wrap(
        log.into_iter().map(|v| (db, v)).collect(),
    ));
}

/// The XGROUP SETID Redis propagates when a group's last ID moved.
fn setid_record(key: &Bytes, group: &Bytes, last: StreamId, read: i64) -> Vec<Bytes> {
    vec![
        b("XGROUP"),
        b("SETID"),
        key.clone(),
        group.clone(),
        id_bytes(last),
        b("ENTRIESREAD"),
        Bytes::from(read.to_string()),
    ]
}

// ---------------------------------------------------------------------------
// Groups

/// `NOGROUP No such key '<key>' or consumer group '<group>'<tail>`.
fn nogroup(out: &mut Out, key: &[u8], group: &[u8], tail: &str) {
    let mut msg = b"NOGROUP No such key '".to_vec();
    msg.extend_from_slice(key);
    msg.extend_from_slice(b"' or consumer group '");
    msg.extend_from_slice(group);
    msg.extend_from_slice(b"'");
    msg.extend_from_slice(tail.as_bytes());
    out.error_bytes(&msg);
}

/// `NOGROUP No such consumer group '<group>' for key name '<key>'`.
fn nogroup_for_key(out: &mut Out, group: &[u8], key: &[u8]) {
    let mut msg = b"NOGROUP No such consumer group '".to_vec();
    msg.extend_from_slice(group);
    msg.extend_from_slice(b"' for key name '");
    msg.extend_from_slice(key);
    msg.extend_from_slice(b"'");
    out.error_bytes(&msg);
}

const XGROUP_HELP: &[&str] = &[
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
];

/// XGROUP's `<id|$>`: Some(None) for `$` (the stream's last ID), None
/// after the error reply.
fn id_or_last(ctx: &mut Ctx, a: &[u8], strict: bool) -> Option<Option<StreamId>> {
    if a == b"$" {
        return Some(None);
    }
    id_arg(ctx, a, 0, strict).map(Some)
}

fn xgroup(ctx: &mut Ctx, args: &[Bytes]) {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    if sub == "help" && args.len() == 2 {
        return super::server::reply_help(ctx, "XGROUP", XGROUP_HELP);
    }
    let mut mkstream = false;
    let mut entries_read = INVALID_ENTRIES_READ;
    if args.len() >= 4 {
        let mut i = 5;
        while i < args.len() {
            if sub == "create" && eq_ic(&args[i], "mkstream") {
                mkstream = true;
                i += 1;
            } else if (sub == "create" || sub == "setid")
                && eq_ic(&args[i], "entriesread")
                && i + 1 < args.len()
            {
                let Some(v) = arg_i64(ctx, &args[i + 1]) else {
                    return;
                };
                if v < 0 && v != INVALID_ENTRIES_READ {
                    return ctx.error("ERR value for ENTRIESREAD must be positive or -1");
                }
                entries_read = v;
                i += 2;
            } else {
                return subcommand_syntax_error(ctx.out, args);
            }
        }
    }
    if args.len() < 4 {
        return subcommand_syntax_error(ctx.out, args);
    }
    let key = &args[2];
    let gname = &args[3];
    let exists = {
        let (db, out) = ctx.db_out();
        match typed(out, db.check_type::<Stream>(key)) {
            Some(e) => e,
            None => return,
        }
    };
    if !mkstream {
        if !exists {
            return ctx.error("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.");
        }
        let has_group = {
            let (db, _) = ctx.db_out();
            matches!(db.read::<Stream>(key), Ok(Some(s)) if s.group(gname).is_some())
        };
        if !has_group && matches!(sub.as_str(), "setid" | "createconsumer" | "delconsumer") {
            return nogroup_for_key(ctx.out, gname, key);
        }
    }
    let now = cmd_time_ms();
    match sub.as_str() {
        "create" if (5..=8).contains(&args.len()) => {
            let Some(id) = id_or_last(ctx, &args[4], true) else {
                return;
            };
            let (db, out) = ctx.db_out();
            let event = if exists {
                quiet("xgroup-create")
            } else {
                ev("xgroup-create")
            };
            let Ok(mut s) = db.write_or_create::<Stream>(key, event) else {
                return;
            };
            let id = id.unwrap_or(s.last_id());
            if s.group(gname).is_some() {
                s.no_change();
                drop(s);
                out.error("BUSYGROUP Consumer Group name already exists");
                return;
            }
            s.create_group(gname, id, entries_read);
            out.ok();
        }
        "setid" if args.len() == 5 || args.len() == 7 => {
            let Some(id) = id_or_last(ctx, &args[4], false) else {
                return;
            };
            let (db, out) = ctx.db_out();
            let Ok(Some(mut s)) = db.write::<Stream>(key, quiet("xgroup-setid")) else {
                return;
            };
            let id = id.unwrap_or(s.last_id());
            if let Some(g) = s.group_mut(gname) {
                g.last_id = id;
                g.entries_read = entries_read;
            }
            out.ok();
        }
        "destroy" if args.len() == 4 => {
            let (db, out) = ctx.db_out();
            let Ok(Some(mut s)) = db.write::<Stream>(key, quiet("xgroup-destroy")) else {
                return;
            };
            if s.group(gname).is_some() {
                s.destroy_group(gname);
                out.int(1);
            } else {
                s.no_change();
                out.int(0);
            }
        }
        "createconsumer" | "delconsumer" if args.len() == 5 => {
            let create = sub == "createconsumer";
            let event = if create {
                quiet("xgroup-createconsumer")
            } else {
                quiet("xgroup-delconsumer")
            };
            let (db, out) = ctx.db_out();
            let Ok(Some(mut s)) = db.write::<Stream>(key, event) else {
                return;
            };
            let exists = s
                .group(gname)
                .is_some_and(|g| g.consumer(&args[4]).is_some());
            if exists == create {
                // Nothing to do: the consumer exists, or does not.
                s.no_change();
                out.int(0);
                return;
            }
            let g = s.group_mut(gname);
            let n = match g {
                Some(g) if create => g.create_consumer(&args[4], now) as usize,
                Some(g) => g.delete_consumer(&args[4]).unwrap_or(0),
                None => 0,
            };
            out.int(n as i64);
        }
        _ => subcommand_syntax_error(ctx.out, args),
    }
}

fn xack(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    let Some(s) = typed(out, db.read::<Stream>(&args[1])) else {
        return;
    };
    if s.is_none_or(|s| s.group(&args[2]).is_none()) {
        return ctx.out.int(0);
    }
    let Some(ids) = id_args(ctx, &args[3..]) else {
        return;
    };
    let (db, out) = ctx.db_out();
    let Ok(Some(mut s)) = db.write::<Stream>(&args[1], BOOKKEEPING) else {
        return;
    };
    let pending = s.group(&args[2]).map_or(0, |g| {
        ids.iter().filter(|id| g.pending(id).is_some()).count()
    });
    if pending == 0 {
        s.no_change();
        out.int(0);
        return;
    }
    let mut n = 0;
    if let Some(g) = s.group_mut(&args[2]) {
        for id in ids {
            n += g.ack(id) as i64;
        }
    }
    out.int(n);
}

fn xpending(ctx: &mut Ctx, args: &[Bytes]) {
    let just_info = args.len() == 3;
    if args.len() != 3 && !(6..=9).contains(&args.len()) {
        return ctx.error(SYNTAX);
    }
    let mut range = None;
    let mut minidle = 0i64;
    let mut consumer: Option<&Bytes> = None;
    if args.len() >= 6 {
        let mut at = 3;
        if eq_ic(&args[3], "idle") {
            let Some(v) = arg_i64(ctx, &args[4]) else {
                return;
            };
            minidle = v;
            if args.len() < 8 {
                return ctx.error(SYNTAX);
            }
            at += 2;
        }
        let Some(count) = args.get(at + 2).and_then(|a| parse_i64(a)) else {
            return ctx.error(NOT_INT);
        };
        let Some(start) = bound_arg(ctx, &args[at], false) else {
            return;
        };
        let Some(end) = bound_arg(ctx, &args[at + 1], true) else {
            return;
        };
        consumer = args.get(at + 3);
        range = Some((start, end, count.max(0) as usize));
    }
    let now = cmd_time_ms();
    let (db, out) = ctx.db_out();
    let Some(s) = typed(out, db.read::<Stream>(&args[1])) else {
        return;
    };
    let Some(g) = s.and_then(|s| s.group(&args[2])) else {
        return nogroup(ctx.out, &args[1], &args[2], "");
    };
    if just_info {
        out.array(4);
        out.int(g.pending_len() as i64);
        match (g.first_pending(), g.last_pending()) {
            (Some(a), Some(z)) => {
                out.bulk(&a.to_bytes());
                out.bulk(&z.to_bytes());
                let with: Vec<(&Bytes, usize)> = g
                    .consumers()
                    .filter(|(_, c)| c.pending() > 0)
                    .map(|(n, c)| (n, c.pending()))
                    .collect();
                out.array(with.len());
                for (n, p) in with {
                    out.array(2);
                    out.bulk(n);
                    out.bulk_int(p as i64);
                }
            }
            _ => {
                out.null();
                out.null();
                out.null_array();
            }
        }
        return;
    }
    let Some((start, end, count)) = range else {
        return;
    };
    let ids: Vec<StreamId> = match consumer {
        Some(c) => match g.consumer(c) {
            Some(c) => c.pending_from(start).take_while(|id| *id <= end).collect(),
            None => {
                out.array(0);
                return;
            }
        },
        None => g.pending_range(start, end).map(|(id, _)| id).collect(),
    };
    let mut rows = Vec::new();
    for id in ids {
        if rows.len() >= count {
            break;
        }
        let Some(n) = g.pending(&id) else { continue };
        if minidle != 0 && now - n.delivery_time < minidle {
            continue;
        }
        rows.push((
            id,
            g.owner(n).clone(),
            (now - n.delivery_time).max(0),
            n.delivery_count,
        ));
    }
    out.array(rows.len());
    for (id, owner, idle, deliveries) in rows {
        out.array(4);
        out.bulk(&id.to_bytes());
        out.bulk(&owner);
        out.int(idle);
        out.int(deliveries as i64);
    }
}

fn xclaim(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    let Some(s) = typed(out, db.read::<Stream>(&args[1])) else {
        return;
    };
    if s.is_none_or(|s| s.group(&args[2]).is_none()) {
        return nogroup(ctx.out, &args[1], &args[2], "");
    }
    let Some(minidle) = parse_i64(&args[4]) else {
        return ctx.error("ERR Invalid min-idle-time argument for XCLAIM");
    };
    let minidle = minidle.max(0);
    let mut ids = Vec::new();
    let mut j = 5;
    while j < args.len() {
        match parse_id(&args[j], 0, true, false) {
            Some((id, _)) => ids.push((id, j)),
            None => break,
        }
        j += 1;
    }
    let now = cmd_time_ms();
    let (mut force, mut justid) = (false, false);
    let mut time: Option<i64> = None;
    let mut retry: Option<i64> = None;
    let mut last = StreamId::MIN;
    while j < args.len() {
        let more = args.len() - 1 - j;
        let o = &args[j];
        let int = |a: &[u8], what: &str| -> Result<i64, String> {
            parse_i64(a).ok_or_else(|| format!("ERR Invalid {what} option argument for XCLAIM"))
        };
        if eq_ic(o, "force") {
            force = true;
        } else if eq_ic(o, "justid") {
            justid = true;
        } else if eq_ic(o, "idle") && more > 0 {
            j += 1;
            match int(&args[j], "IDLE") {
                Ok(v) => time = Some(now.wrapping_sub(v)),
                Err(e) => return ctx.error(&e),
            }
        } else if eq_ic(o, "time") && more > 0 {
            j += 1;
            match int(&args[j], "TIME") {
                Ok(v) => time = Some(v),
                Err(e) => return ctx.error(&e),
            }
        } else if eq_ic(o, "retrycount") && more > 0 {
            j += 1;
            match int(&args[j], "RETRYCOUNT") {
                Ok(v) => retry = Some(v),
                Err(e) => return ctx.error(&e),
            }
        } else if eq_ic(o, "lastid") && more > 0 {
            j += 1;
            let Some(id) = id_arg(ctx, &args[j], 0, true) else {
                return;
            };
            last = id;
        } else {
            let mut msg = b"ERR Unrecognized XCLAIM option '".to_vec();
            msg.extend_from_slice(crate::util::c_str(o));
            msg.push(b'\'');
            return ctx.out.error_bytes(&msg);
        }
        j += 1;
    }
    let time = match time {
        Some(t) if t >= 0 && t <= now => t,
        _ => now,
    };
    let (key, gname, cname) = (&args[1], &args[2], &args[3]);
    let db_index = ctx.conn.db;
    let (db, out) = ctx.db_out();
    let Ok(Some(mut s)) = db.write::<Stream>(key, BOOKKEEPING) else {
        return;
    };
    let mut log = Vec::new();
    let mut body = Out::scratch(out.resp3);
    let mut n = 0;
    let mut created = false;
    let mut changed = false;
    {
        let Some((g, view)) = s.with_group(gname) else {
            return;
        };
        let mut propagate_last = false;
        if last > g.last_id {
            g.last_id = last;
            propagate_last = true;
            changed = true;
        }
        for (id, _) in ids {
            let entry = view.range(id, id, false).next();
            let nack = g.pending(&id).copied();
            if entry.is_none() {
                if nack.is_some() {
                    log.push(xclaim_record(key, gname, g, id));
                    propagate_last = false;
                    g.ack(id);
                    changed = true;
                }
                continue;
            }
            let owned = match nack {
                Some(nk) => Some(nk),
                None if force => None,
                None => continue,
            };
            if let Some(nk) = owned {
                if minidle > 0 && now - nk.delivery_time < minidle {
                    continue;
                }
            }
            let prev = owned.map_or(0, |nk| nk.delivery_count);
            let count = match retry {
                Some(r) if r >= 0 => r as u64,
                _ if !justid => prev + 1,
                _ => prev,
            };
            let (_, new) = g.claim_for(id, cname, time, count, now);
            created |= new;
            reply_claimed(&mut body, justid, id, entry.as_ref());
            n += 1;
            log.push(xclaim_record(key, gname, g, id));
            propagate_last = false;
            changed = true;
        }
        if propagate_last {
            log.push(setid_record(key, gname, g.last_id, g.entries_read));
        }
    }
    if created {
        s.set_event(quiet("xgroup-createconsumer"));
    }
    if !changed && !created {
        s.no_change();
    }
    drop(s);
    out.array(n);
    out.raw(&body.buf);
    log_records(ctx, db_index, log);
}

/// A claimed entry in XCLAIM's and XAUTOCLAIM's reply: its ID (JUSTID)
/// or the entry.
fn reply_claimed(body: &mut Out, justid: bool, id: StreamId, entry: Option<&Entry<'_>>) {
    if justid {
        body.bulk(&id.to_bytes());
    } else if let Some(e) = entry {
        reply_entry(body, e);
    }
}

fn xautoclaim(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(minidle) = parse_i64(&args[4]) else {
        return ctx.error("ERR Invalid min-idle-time argument for XAUTOCLAIM");
    };
    let minidle = minidle.max(0);
    let Some(start) = bound_arg(ctx, &args[5], false) else {
        return;
    };
    let mut count: i64 = 100;
    let mut justid = false;
    let mut j = 6;
    while j < args.len() {
        let more = args.len() - 1 - j;
        if eq_ic(&args[j], "count") && more > 0 {
            let max = i64::MAX / 16;
            match parse_i64(&args[j + 1]) {
                Some(v) if (1..=max).contains(&v) => count = v,
                _ => return ctx.error("ERR COUNT must be > 0"),
            }
            j += 1;
        } else if eq_ic(&args[j], "justid") {
            justid = true;
        } else {
            return ctx.error(SYNTAX);
        }
        j += 1;
    }
    let (key, gname, cname) = (&args[1], &args[2], &args[3]);
    let (db, out) = ctx.db_out();
    let Some(s) = typed(out, db.read::<Stream>(key)) else {
        return;
    };
    if s.is_none_or(|s| s.group(gname).is_none()) {
        return nogroup(ctx.out, key, gname, "");
    }
    let now = cmd_time_ms();
    let db_index = ctx.conn.db;
    let (db, out) = ctx.db_out();
    let Ok(Some(mut s)) = db.write::<Stream>(key, BOOKKEEPING) else {
        return;
    };
    let mut log = Vec::new();
    let mut body = Out::scratch(out.resp3);
    let mut claimed = 0;
    let mut deleted = Vec::new();
    let mut created = false;
    let next;
    {
        let Some((g, view)) = s.with_group(gname) else {
            return;
        };
        let mut attempts = count.saturating_mul(10);
        let mut left = count;
        let mut cursor = Some(start);
        loop {
            if attempts == 0 || left == 0 {
                break;
            }
            attempts -= 1;
            let Some(from) = cursor else { break };
            let Some((id, nk)) = g
                .pending_range(from, StreamId::MAX)
                .next()
                .map(|(i, n)| (i, *n))
            else {
                cursor = None;
                break;
            };
            cursor = id.incr();
            if view.range(id, id, false).next().is_none() {
                log.push(xclaim_record(key, gname, g, id));
                g.ack(id);
                deleted.push(id);
                left -= 1;
                continue;
            }
            if minidle > 0 && now - nk.delivery_time < minidle {
                continue;
            }
            let count = nk.delivery_count + u64::from(!justid);
            let (_, new) = g.claim_for(id, cname, now, count, now);
            created |= new;
            reply_claimed(
                &mut body,
                justid,
                id,
                view.range(id, id, false).next().as_ref(),
            );
            claimed += 1;
            left -= 1;
            log.push(xclaim_record(key, gname, g, id));
        }
        next = cursor
            .and_then(|c| g.pending_range(c, StreamId::MAX).next().map(|(i, _)| i))
            .unwrap_or_default();
    }
    if created {
        s.set_event(quiet("xgroup-createconsumer"));
    }
    if log.is_empty() && !created {
        s.no_change();
    }
    drop(s);
    out.array(3);
    out.bulk(&next.to_bytes());
    out.array(claimed);
    out.raw(&body.buf);
    out.array(deleted.len());
    for id in deleted {
        out.bulk(&id.to_bytes());
    }
    log_records(ctx, db_index, log);
}

// ---------------------------------------------------------------------------
// XINFO

const XINFO_HELP: &[&str] = &[
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
];

fn lag(out: &mut Out, s: &Stream, g: &crate::types::stream::Group) {
    match s.lag(g) {
        Some(l) => out.int(l),
        None => out.null(),
    }
}

fn entries_read(out: &mut Out, v: i64) {
    if v != INVALID_ENTRIES_READ {
        out.int(v);
    } else {
        out.null();
    }
}

fn xinfo(ctx: &mut Ctx, args: &[Bytes]) {
    if eq_ic(&args[1], "help") {
        if args.len() != 2 {
            return subcommand_syntax_error(ctx.out, args);
        }
        return super::server::reply_help(ctx, "XINFO", XINFO_HELP);
    }
    if args.len() < 3 {
        return subcommand_syntax_error(ctx.out, args);
    }
    let now = cmd_time_ms();
    let (db, out) = ctx.db_out();
    let Some(s) = typed(out, db.read::<Stream>(&args[2])) else {
        return;
    };
    let Some(s) = s else {
        out.error(NO_SUCH_KEY);
        return;
    };
    if eq_ic(&args[1], "consumers") && args.len() == 4 {
        let Some(g) = s.group(&args[3]) else {
            return nogroup_for_key(out, &args[3], &args[2]);
        };
        out.array(g.consumer_count());
        for (name, c) in g.consumers() {
            out.map(3);
            out.bulk(b"name");
            out.bulk(name);
            out.bulk(b"pending");
            out.int(c.pending() as i64);
            out.bulk(b"idle");
            out.int((now - c.seen_time).max(0));
        }
    } else if eq_ic(&args[1], "groups") && args.len() == 3 {
        out.array(s.group_count());
        for (name, g) in s.groups() {
            out.map(6);
            out.bulk(b"name");
            out.bulk(name);
            out.bulk(b"consumers");
            out.int(g.consumer_count() as i64);
            out.bulk(b"pending");
            out.int(g.pending_len() as i64);
            out.bulk(b"last-delivered-id");
            out.bulk(&g.last_id.to_bytes());
            out.bulk(b"entries-read");
            entries_read(out, g.entries_read);
            out.bulk(b"lag");
            lag(out, s, g);
        }
    } else if eq_ic(&args[1], "stream") {
        let opts = &args[3..];
        let mut full = true;
        let mut count: i64 = 10;
        if opts.is_empty() {
            full = false;
        } else {
            if (opts.len() != 1 && opts.len() != 3) || !eq_ic(&opts[0], "full") {
                return subcommand_syntax_error(out, args);
            }
            if opts.len() == 3 {
                if !eq_ic(&opts[1], "count") {
                    return subcommand_syntax_error(out, args);
                }
                let Some(c) = parse_i64(&opts[2]) else {
                    out.error(NOT_INT);
                    return;
                };
                count = if c < 0 { 10 } else { c };
            }
        }
        let lim = if count == 0 {
            usize::MAX
        } else {
            count as usize
        };
        out.map(if full { 9 } else { 10 });
        out.bulk(b"length");
        out.int(s.len() as i64);
        out.bulk(b"radix-tree-keys");
        out.int(s.node_count() as i64);
        out.bulk(b"radix-tree-nodes");
        out.int(s.radix_nodes() as i64);
        out.bulk(b"last-generated-id");
        out.bulk(&s.last_id().to_bytes());
        out.bulk(b"max-deleted-entry-id");
        out.bulk(&s.max_deleted().to_bytes());
        out.bulk(b"entries-added");
        out.int(s.entries_added() as i64);
        out.bulk(b"recorded-first-entry-id");
        out.bulk(&s.first_id().to_bytes());
        if !full {
            out.bulk(b"groups");
            out.int(s.group_count() as i64);
            out.bulk(b"first-entry");
            match s.range(StreamId::MIN, StreamId::MAX, false).next() {
                Some(e) => reply_entry(out, &e),
                None => out.null(),
            }
            out.bulk(b"last-entry");
            match s.range(StreamId::MIN, StreamId::MAX, true).next() {
                Some(e) => reply_entry(out, &e),
                None => out.null(),
            }
            return;
        }
        out.bulk(b"entries");
        let entries: Vec<Entry<'_>> = s
            .range(StreamId::MIN, StreamId::MAX, false)
            .take(lim)
            .collect();
        out.array(entries.len());
        for e in &entries {
            reply_entry(out, e);
        }
        out.bulk(b"groups");
        out.array(s.group_count());
        for (name, g) in s.groups() {
            out.map(7);
            out.bulk(b"name");
            out.bulk(name);
            out.bulk(b"last-delivered-id");
            out.bulk(&g.last_id.to_bytes());
            out.bulk(b"entries-read");
            entries_read(out, g.entries_read);
            out.bulk(b"lag");
            lag(out, s, g);
            out.bulk(b"pel-count");
            out.int(g.pending_len() as i64);
            out.bulk(b"pending");
            let pel: Vec<_> = g
                .pending_range(StreamId::MIN, StreamId::MAX)
                .take(lim)
                .collect();
            out.array(pel.len());
            for (id, n) in pel {
                out.array(4);
                out.bulk(&id.to_bytes());
                out.bulk(g.owner(n));
                out.int(n.delivery_time);
                out.int(n.delivery_count as i64);
            }
            out.bulk(b"consumers");
            out.array(g.consumer_count());
            for (cname, c) in g.consumers() {
                out.map(4);
                out.bulk(b"name");
                out.bulk(cname);
                out.bulk(b"seen-time");
                out.int(c.seen_time);
                out.bulk(b"pel-count");
                out.int(c.pending() as i64);
                out.bulk(b"pending");
                let ids: Vec<StreamId> = c.pending_ids().take(lim).collect();
                out.array(ids.len());
                for id in ids {
                    let n = g.pending(&id).copied();
                    out.array(3);
                    out.bulk(&id.to_bytes());
                    out.int(n.map_or(0, |n| n.delivery_time));
                    out.int(n.map_or(0, |n| n.delivery_count as i64));
                }
            }
        }
    } else {
        subcommand_syntax_error(out, args);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_as_redis_parses_them() {
        let p = |s: &str| parse_id(s.as_bytes(), 0, false, false).map(|(i, _)| (i.ms, i.seq));
        assert_eq!(p("1-2"), Some((1, 2)));
        assert_eq!(p("5"), Some((5, 0)));
        assert_eq!(p("-"), Some((0, 0)));
        assert_eq!(p("+"), Some((u64::MAX, u64::MAX)));
        assert_eq!(
            p("18446744073709551615-18446744073709551615"),
            Some((u64::MAX, u64::MAX))
        );
        assert_eq!(p("18446744073709551616"), None);
        assert_eq!(p("1-"), None);
        assert_eq!(p("-1"), None);
        assert_eq!(p("a"), None);
        assert_eq!(p(" 1-1"), Some((1, 1)));
        assert_eq!(p("+1-1"), Some((1, 1)));
        assert!(parse_id(b"-", 0, true, false).is_none());
        assert_eq!(
            parse_id(b"5-*", 0, true, true),
            Some((StreamId::new(5, 0), false))
        );
        assert!(parse_id(b"5-*", 0, true, false).is_none());
    }
}
