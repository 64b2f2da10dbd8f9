//! The lock service's command family (Latchkey's own commands):
//! connection-bound keys, lines, shares, fencing and existence watches. The
//! state they work on is `crate::keyspace::locks`.
//!
//! ```text
//! SETTP key value [EX s|PX ms] [QUEUE] [TOKEN]
//!                        SETNX that binds the key to this connection, with an
//!                        optional TTL; QUEUE waits in line for a taken key
//!                        (ACQUIRED push with the fencing token; the TTL
//!                        starts at the hand-over); TOKEN replies the
//!                        acquisition's fencing token instead of 1.
//! SETTP key value SHARED | PERMITS n [QUEUE] [TOKEN]
//!                        a share of a read-write lock (readers; the writer
//!                        is a plain SETTP) or one of n permits of a
//!                        semaphore, granted first come first served.
//! TPRELEASE key value    let go of this connection's share or key.
//! TPINFO key             owner, token, since, waiting, mode, holders of a
//!                        held key, or nil.
//! TPCHECK key token      OK if `token` is the key's current fencing token,
//!                        a STALE error otherwise; queued in MULTI, it is a
//!                        condition of the whole EXEC.
//! TPSESSION [ms]         this connection's liveness timeout: closed (its
//!                        keys released) when nothing arrives for that long.
//! TPSESSION ID           this session's identity (32 hex digits), the name
//!                        replicas know it by.
//! TPRESUME id            after a failover, take over the session `id` of the
//!                        old primary (its holds): its keys, as TPKEYS.
//! TPDEQUEUE key [value]  leave SETTP's queue for a key.
//! TPQUEUE key            ids of the connections queued for a key, in order.
//! WATCHEX key            +EXIST / +NOEXIST now, then ADD / DEL pushes.
//! UNWATCHEX [key ...]    number of watches removed (all without keys).
//! TPOWNER key            id of the connection a key is bound to, or nil.
//! TPKEYS [client-id]     keys bound to a connection (default: this one).
//! ```

use bytes::Bytes;

use super::*;

// Every latchkey command is in @latchkey, so `+@latchkey` allows the
// lock service (with key patterns saying where).
const WRITE_FAST: &[&str] = &["write", "string", "fast", "latchkey"];
const READ_FAST: &[&str] = &["read", "keyspace", "fast", "latchkey"];
const WATCH_FAST: &[&str] = &["read", "fast", "latchkey"];
const CONN_FAST: &[&str] = &["fast", "connection", "latchkey"];

pub static COMMANDS: &[Spec] = &[
    spec(
        "settp",
        -3,
        WRITE | DENYOOM | FAST,
        (1, 1, 1),
        "string",
        "latchkey",
        "Set a key bound to this connection, only if it does not exist",
        WRITE_FAST,
        settp,
    ),
    spec(
        "watchex",
        2,
        READONLY | FAST | NOSCRIPT,
        (1, 1, 1),
        "generic",
        "latchkey",
        "Watch a key's existence: ADD/DEL pushes follow",
        WATCH_FAST,
        watchex,
    ),
    spec(
        "unwatchex",
        -1,
        FAST | NOSCRIPT,
        (1, -1, 1),
        "generic",
        "latchkey",
        "Stop watching keys (all when none given)",
        CONN_FAST,
        unwatchex,
    ),
    spec(
        "tpdequeue",
        -2,
        FAST,
        (1, 1, 1),
        "generic",
        "latchkey",
        "Leave SETTP's queue for a key",
        CONN_FAST,
        tpdequeue,
    ),
    spec(
        "tpqueue",
        2,
        READONLY | FAST,
        (1, 1, 1),
        "generic",
        "latchkey",
        "Ids of the connections queued for a key by SETTP ... QUEUE",
        READ_FAST,
        tpqueue,
    ),
    spec(
        "tpowner",
        2,
        READONLY | FAST,
        (1, 1, 1),
        "generic",
        "latchkey",
        "Id of the connection a bound key belongs to",
        READ_FAST,
        tpowner,
    ),
    spec(
        "tpinfo",
        2,
        READONLY | FAST,
        (1, 1, 1),
        "generic",
        "latchkey",
        "Holder, fencing token, age and line length of a bound key",
        READ_FAST,
        tpinfo,
    ),
    spec(
        "tpcheck",
        3,
        READONLY | FAST,
        (1, 1, 1),
        "generic",
        "latchkey",
        "Refuse unless a token is the key's current fencing token",
        READ_FAST,
        tpcheck,
    ),
    spec(
        "tprelease",
        3,
        WRITE | FAST,
        (1, 1, 1),
        "generic",
        "latchkey",
        "Release this connection's hold of a lock: its share, or the key",
        WRITE_FAST,
        tprelease,
    ),
    spec(
        "tpresume",
        2,
        WRITE | FAST | NOSCRIPT,
        (0, 0, 0),
        "connection",
        "latchkey",
        "Take over a session of the old primary after a failover",
        &["write", "fast", "connection", "latchkey"],
        tpresume,
    ),
    spec(
        "tpsession",
        -1,
        FAST | NOSCRIPT,
        (0, 0, 0),
        "connection",
        "latchkey",
        "Set or get this connection's liveness timeout (ms)",
        CONN_FAST,
        tpsession,
    ),
    spec(
        "tpkeys",
        -1,
        READONLY,
        (0, 0, 0),
        "generic",
        "latchkey",
        "Keys bound to a connection",
        CONN_FAST,
        tpkeys,
    ),
];

/// SETTP's options.
struct SettpOpts {
    queue: bool,
    /// TTL in ms.
    ttl: Option<i64>,
    /// Reply the fencing token.
    token: bool,
    /// SHARED or PERMITS n: a share of the key, not the key itself.
    share: Option<crate::ids::ShareKind>,
}

/// SETTP's options: `[EX seconds | PX milliseconds] [QUEUE] [TOKEN]`, in
/// any order; or the error already written.
fn settp_opts(ctx: &mut Ctx, args: &[Bytes]) -> Result<SettpOpts, ()> {
    use super::strings::opts::{expire_at, EX, PX};
    let mut queue = false;
    let mut token = false;
    let mut share = None;
    let mut unit = 0;
    let mut ttl_arg: Option<&Bytes> = None;
    let mut j = 3;
    while j < args.len() {
        let a = &args[j];
        let next = args.get(j + 1);
        if a.eq_ignore_ascii_case(b"QUEUE") {
            queue = true;
        } else if a.eq_ignore_ascii_case(b"TOKEN") {
            token = true;
        } else if a.eq_ignore_ascii_case(b"SHARED") && share.is_none() {
            share = Some(crate::ids::ShareKind::Read);
        } else if a.eq_ignore_ascii_case(b"PERMITS") && share.is_none() && next.is_some() {
            match next.and_then(|n| crate::util::parse_i64(n)) {
                Some(n) if (1..=u32::MAX as i64).contains(&n) => {
                    share = Some(crate::ids::ShareKind::Permits(n as u32));
                }
                _ => {
                    ctx.error("ERR PERMITS must be a positive integer");
                    return Err(());
                }
            }
            j += 1;
        } else if let (Some(u), Some(n)) = (
            match &a.to_ascii_lowercase()[..] {
                b"ex" => Some(EX),
                b"px" => Some(PX),
                _ => None,
            },
            next,
        ) {
            // As SET: EX and PX together is a syntax error; a repeat wins.
            if unit != 0 && unit != u {
                ctx.error(SYNTAX);
                return Err(());
            }
            unit = u;
            ttl_arg = Some(n);
            j += 1;
        } else {
            ctx.error(SYNTAX);
            return Err(());
        }
        j += 1;
    }
    if share.is_some() && ttl_arg.is_some() {
        // A shared key has many holders: no one lease fits it.
        ctx.error("ERR EX and PX cannot be used with SHARED or PERMITS");
        return Err(());
    }
    let ttl = match ttl_arg {
        None => None,
        Some(n) => match expire_at(unit, n) {
            Ok(at) => Some(at - crate::util::cmd_time_ms()),
            Err(e) => {
                super::strings::expire_error(ctx.out, e, "settp");
                return Err(());
            }
        },
    };
    Ok(SettpOpts {
        queue,
        ttl,
        token,
        share,
    })
}

fn settp(ctx: &mut Ctx, args: &[Bytes]) {
    let Ok(SettpOpts {
        queue,
        ttl,
        token,
        share,
    }) = settp_opts(ctx, args)
    else {
        return;
    };
    let key = &args[1];
    let db_id = ctx.conn.db;
    let id = ctx.conn.id;
    // A lazy expiry here may free a queued key: hand it over first, so a
    // newcomer never cuts in front of the line.
    let exists = ctx.db().exists(key) || {
        super::settle(ctx.store, Some(id));
        ctx.db().exists(key)
    };
    let granted = match share {
        None => !exists,
        Some(kind) => ctx.store.ks.share_admits(&(db_id, key.clone()), kind),
    };
    if granted || queue {
        // The session's timeout travels with its holds (a promoted
        // replica keeps a detached session that long).
        note_timeout(ctx);
    }
    if !granted {
        if queue {
            // A copy: the argument is a slice of the whole read buffer.
            let value = Bytes::copy_from_slice(&args[2]);
            let wait = crate::blocking::Wait::Lock {
                value,
                ttl_ms: ttl,
                share,
            };
            let dk = crate::ids::own_key(db_id, key);
            ctx.store.ks.queue_lock(id, dk, wait, false);
        }
        return ctx.out.int(0);
    }
    if let Some(kind) = share {
        let value = Bytes::copy_from_slice(&args[2]);
        let t = ctx
            .store
            .ks
            .take_share(id, (db_id, key.clone()), kind, value);
        return grant_reply(ctx, t, if token { t as i64 } else { 1 });
    }
    let db = ctx.db();
    db.set_str(key, &args[2], false, false);
    if let Some(ttl) = ttl {
        let at = crate::util::cmd_time_ms().saturating_add(ttl);
        db.set_expire(key, at);
    }
    let t = ctx.store.ks.bind(id, (db_id, key.clone()));
    grant_reply(ctx, t, if token { t as i64 } else { 1 });
}

/// The error of a grant that not enough replicas acknowledged in time.
pub const NOREPLICAS_LOCK: &str =
    "NOREPLICAS Not enough replicas acknowledged the lock in time (tp-min-acks).";

/// Tells a grant (fencing token `token`) its `reply`: at once, or with
/// `tp-min-acks` on a primary once that many Latchkey replicas
/// acknowledged the stream past its lock record (a wait for no key, as
/// WAIT's, served when their ACKs come); at `tp-min-acks-timeout`
/// the grant is undone and the reply is NOREPLICAS. In MULTI or a script,
/// where nothing waits, it is undone at once unless already acknowledged.
fn grant_reply(ctx: &mut Ctx, token: u64, reply: i64) {
    let (n, wait_ms) = {
        let c = ctx.store.config();
        (c.tp_min_acks, c.tp_min_acks_timeout)
    };
    if n == 0 || ctx.store.repl.has_master() {
        return ctx.out.int(reply);
    }
    // The grant's lock record goes to the stream first.
    crate::persist::aof_write_out(&mut ctx.store.ks, &mut ctx.store.persist);
    let wait = crate::blocking::TimeoutReply::LockAcks {
        offset: ctx.store.repl.lock_marker(),
        numreplicas: n,
        token,
        reply,
    };
    if super::wait::acks_reached(ctx.store, wait) {
        return ctx.out.int(reply);
    }
    ctx.store.repl.request_acks();
    let deadline = crate::util::now_ms().saturating_add(wait_ms as i64);
    super::block_on(ctx, &[], Some(deadline), wait);
}

/// The binding of `key` in the connection's database, after a lazy expiry
/// of the key is settled (an expired lock has no holder).
fn binding(ctx: &mut Ctx, key: &Bytes) -> Option<crate::keyspace::locks::Bound> {
    ctx.db().exists(key);
    super::settle(ctx.store, Some(ctx.conn.id));
    ctx.store
        .ks
        .bindings()
        .get(&(ctx.conn.db, key.clone()))
        .copied()
}

fn tpinfo(ctx: &mut Ctx, args: &[Bytes]) {
    use crate::ids::ShareKind;
    let dk = (ctx.conn.db, args[1].clone());
    // (owner, token, since, mode, holders, permits)
    let held = match binding(ctx, &args[1]) {
        Some(b) => Some((b.owner, b.token, b.since, "exclusive", 1, None)),
        None => ctx.store.ks.shares().get(&dk).map(|sh| {
            let h = &sh.holders;
            let (mode, permits) = match sh.kind {
                ShareKind::Read => ("shared", None),
                ShareKind::Permits(n) => ("semaphore", Some(n)),
            };
            (
                h.first().map_or(0, |h| h.client),
                h.iter().map(|h| h.token).max().unwrap_or(0),
                h.iter().map(|h| h.since).min().unwrap_or(0),
                mode,
                h.len(),
                permits,
            )
        }),
    };
    let Some((owner, token, since, mode, holders, permits)) = held else {
        return ctx.out.null();
    };
    let waiting = ctx.store.ks.blocking.lock_waiters(&dk).len();
    ctx.out.map(6 + usize::from(permits.is_some()));
    ctx.out.bulk(b"owner");
    ctx.out.int(owner as i64);
    ctx.out.bulk(b"token");
    ctx.out.int(token as i64);
    ctx.out.bulk(b"since");
    ctx.out.int(since);
    ctx.out.bulk(b"waiting");
    ctx.out.int(waiting as i64);
    ctx.out.bulk(b"mode");
    ctx.out.bulk(mode.as_bytes());
    ctx.out.bulk(b"holders");
    ctx.out.int(holders as i64);
    if let Some(n) = permits {
        ctx.out.bulk(b"permits");
        ctx.out.int(n as i64);
    }
}

/// TPRELEASE key value: lets go of this connection's hold with `value`:
/// its share of a shared key, or the key itself if it is bound to this
/// connection and holds `value`. 1 if something was released.
fn tprelease(ctx: &mut Ctx, args: &[Bytes]) {
    let dk = (ctx.conn.db, args[1].clone());
    let id = ctx.conn.id;
    binding(ctx, &args[1]);
    if ctx.store.ks.shares().get(&dk).is_some() {
        let n = ctx
            .store
            .ks
            .release_share(id, &dk, Some(&args[2]), crate::db::Cause::Command);
        return ctx.out.int(n as i64);
    }
    if ctx.store.ks.bindings().owner(&dk) != Some(id) {
        return ctx.out.int(0);
    }
    let (db, out) = ctx.db_out();
    match db.get_str(&args[1]) {
        Ok(Some(v)) if v == &args[2][..] => {
            db.remove(&args[1]);
            out.int(1);
        }
        _ => out.int(0),
    }
}

/// The STALE error when `token` is not the current fencing token of `key`
/// in database `db` (unbound: nobody holds it, so every token is stale).
pub fn fencing_error(
    store: &crate::server::Store,
    db: usize,
    key: &Bytes,
    token: &[u8],
) -> Option<String> {
    let Some(t) = crate::util::parse_i64(token).filter(|t| *t >= 0) else {
        return Some(NOT_INT.to_string());
    };
    let dk = (db, key.clone());
    // A shared key: current if one of its holders has it.
    let current = match (store.ks.bindings().get(&dk), store.ks.shares().get(&dk)) {
        (Some(b), _) => Some((b.token == t as u64, b.token)),
        (None, Some(sh)) => {
            let newest = sh.holders.iter().map(|h| h.token).max().unwrap_or(0);
            Some((sh.holders.iter().any(|h| h.token == t as u64), newest))
        }
        (None, None) => None,
    };
    match current {
        Some((true, _)) => None,
        Some((false, c)) => Some(format!(
            "STALE fencing token {t} is not the current one ({c}) for this key"
        )),
        None => Some(format!("STALE fencing token {t}: the key is not held")),
    }
}

fn tpcheck(ctx: &mut Ctx, args: &[Bytes]) {
    binding(ctx, &args[1]);
    match fencing_error(ctx.store, ctx.conn.db, &args[1], &args[2]) {
        None => ctx.out.ok(),
        Some(e) => ctx.error(&e),
    }
}

/// Notes the connection's session timeout now (its own, else the
/// server's `tp-session-timeout`) with its lock session.
fn note_timeout(ctx: &mut Ctx) {
    let ms = crate::keyspace::locks::session::timeout_ms(
        ctx.conn.session_ms,
        ctx.store.config().tp_session_timeout,
        true,
    );
    ctx.store.ks.note_session_timeout(ctx.conn.id, ms);
}

fn tpsession(ctx: &mut Ctx, args: &[Bytes]) {
    match args.len() {
        1 => ctx.out.int(ctx.conn.session_ms as i64),
        2 if crate::util::eq_ic(&args[1], "id") => {
            // The session's identity (what names it on replicas, and what
            // its client presents to resume it after a failover).
            let sid = ctx.store.ks.session_sid(ctx.conn.id, &ctx.conn.user);
            ctx.out.bulk(format!("{sid:032x}").as_bytes())
        }
        2 => match crate::util::parse_i64(&args[1]) {
            Some(ms) if ms >= 0 => {
                ctx.conn.session_ms = ms as u64;
                note_timeout(ctx);
                ctx.out.ok()
            }
            _ => ctx.error("ERR timeout is not an integer or out of range"),
        },
        _ => ctx.error(SYNTAX),
    }
}

fn watchex(ctx: &mut Ctx, args: &[Bytes]) {
    // Settle every earlier change (and a lazy expiry of this key) first, so
    // the state registered here is the one the next push flips from.
    super::settle(ctx.store, Some(ctx.conn.id));
    let exists = ctx.db().exists(&args[1]);
    super::settle(ctx.store, Some(ctx.conn.id));
    ctx.store
        .ks
        .watches
        .add(ctx.conn.id, (ctx.conn.db, args[1].clone()), exists);
    // Pushes those changes caused for this connection (its other watches
    // of this key, say) precede the reply: they happened before the state
    // it reports, so a client adding a watcher on the reply skips them.
    ctx.conn.pushes_first = true;
    ctx.out.simple(if exists { "EXIST" } else { "NOEXIST" });
}

fn unwatchex(ctx: &mut Ctx, args: &[Bytes]) {
    let id = ctx.conn.id;
    let n = if args.len() == 1 {
        ctx.store.ks.watches.remove_all(id)
    } else {
        let db = ctx.conn.db;
        args[1..]
            .iter()
            .filter(|k| ctx.store.ks.watches.remove(id, &(db, (*k).clone())))
            .count()
    };
    ctx.out.int(n as i64);
}

fn tpdequeue(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len() > 3 {
        return ctx.error(SYNTAX);
    }
    let dk = (ctx.conn.db, args[1].clone());
    let n = ctx
        .store
        .ks
        .dequeue_locks(ctx.conn.id, &dk, args.get(2).map(|v| &v[..]));
    ctx.out.int(n as i64);
}

fn tpqueue(ctx: &mut Ctx, args: &[Bytes]) {
    let ids = ctx
        .store
        .ks
        .blocking
        .lock_waiters(&(ctx.conn.db, args[1].clone()));
    ctx.out.array(ids.len());
    for id in ids {
        ctx.out.int(id as i64);
    }
}

fn tpowner(ctx: &mut Ctx, args: &[Bytes]) {
    let dk = (ctx.conn.db, args[1].clone());
    // A lazily expired key has no owner; settle it first.
    ctx.db().exists(&args[1]);
    super::settle(ctx.store, Some(ctx.conn.id));
    match ctx.store.ks.bindings().owner(&dk) {
        Some(id) => ctx.out.int(id as i64),
        None => ctx.out.null(),
    }
}

/// TPRESUME id: takes over a session of the old primary after a
/// failover (detached since the promotion, within its grace); replies
/// what it holds, as TPKEYS, bound and shared keys alike.
fn tpresume(ctx: &mut Ctx, args: &[Bytes]) {
    let sid = std::str::from_utf8(&args[1])
        .ok()
        .filter(|s| s.len() == 32)
        .and_then(|s| crate::ids::Sid::from_str_radix(s, 16).ok());
    let Some(sid) = sid else {
        return ctx.error("ERR invalid session id");
    };
    let id = ctx.conn.id;
    if ctx.store.ks.held_by(id) > 0 || ctx.store.ks.blocking.lock_waits_of(id) > 0 {
        return ctx.error("ERR this connection already takes part in the lock service");
    }
    let resp3 = ctx.out.resp3;
    let Some(held) = ctx.store.ks.resume(sid, id, &ctx.conn.user, resp3) else {
        return ctx.error("ERR no such session to resume");
    };
    ctx.out.array(held.len());
    for ((db, k), value, token) in held {
        ctx.out.array(4);
        ctx.out.int(db as i64);
        ctx.out.bulk(&k);
        ctx.out.bulk(&value);
        match token {
            Some(t) => ctx.out.int(t as i64),
            None => ctx.out.null(),
        }
    }
}

fn tpkeys(ctx: &mut Ctx, args: &[Bytes]) {
    let id = match args.len() {
        1 => ctx.conn.id,
        2 => match crate::util::parse_i64(&args[1]) {
            Some(v) if v > 0 => v as ClientId,
            _ => return ctx.error(NOT_INT),
        },
        _ => return ctx.error(SYNTAX),
    };
    let mut keys = ctx.store.ks.bindings().keys_of(id);
    keys.sort();
    ctx.out.array(keys.len());
    for (db, k) in keys {
        // A connection may bind keys in several databases: pair each key
        // with its database index.
        ctx.out.array(2);
        ctx.out.int(db as i64);
        ctx.out.bulk(&k);
    }
}
