//! Latchkey's own commands: connection-bound keys and existence watches.
//!
//! ```text
//! SETTP key value [EX s|PX ms] [QUEUE]
//!                        SETNX that binds the key to this connection, with an
//!                        optional TTL; QUEUE waits in line for a taken key
//!                        (ACQUIRED push; the TTL starts at the hand-over).
//! TPDEQUEUE key [value]  leave SETTP's queue for a key.
//! TPQUEUE key            ids of the connections queued for a key, in order.
//! WATCHEX key            +EXIST / +NOEXIST now, then ADD / DEL pushes.
//! UNWATCHEX [key ...]    number of watches removed (all without keys).
//! TPOWNER key            id of the connection a key is bound to, or nil.
//! TPKEYS [client-id]     keys bound to a connection (default: this one).
//! ```

use bytes::Bytes;

use super::*;

const WRITE_FAST: &[&str] = &["write", "string", "fast"];
const READ_FAST: &[&str] = &["read", "keyspace", "fast"];
const CONN_FAST: &[&str] = &["fast", "connection"];

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
        READ_FAST,
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

/// SETTP's options: `[EX seconds | PX milliseconds] [QUEUE]`, in any order.
/// Returns (queue, TTL in ms), or the error already written.
fn settp_opts(ctx: &mut Ctx, args: &[Bytes]) -> Result<(bool, Option<i64>), ()> {
    use super::strings::opts::{expire_at, EX, PX};
    let mut queue = false;
    let mut unit = 0;
    let mut ttl_arg: Option<&Bytes> = None;
    let mut j = 3;
    while j < args.len() {
        let a = &args[j];
        let next = args.get(j + 1);
        if a.eq_ignore_ascii_case(b"QUEUE") {
            queue = true;
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
    Ok((queue, ttl))
}

fn settp(ctx: &mut Ctx, args: &[Bytes]) {
    let Ok((queue, ttl)) = settp_opts(ctx, args) else {
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
    if exists {
        if queue {
            // A copy: the argument is a slice of the whole read buffer.
            let value = Bytes::copy_from_slice(&args[2]);
            let wait = crate::blocking::Wait::Lock { value, ttl_ms: ttl };
            let keys = vec![crate::ids::own_key(db_id, key)];
            ctx.store.ks.blocking.add(id, keys, wait);
        }
        return ctx.out.int(0);
    }
    let db = ctx.db();
    db.set_str(key, &args[2], false, false);
    if let Some(ttl) = ttl {
        let at = crate::util::cmd_time_ms().saturating_add(ttl);
        db.set_expire(key, at);
    }
    ctx.store.ks.bind(id, (db_id, key.clone()));
    ctx.out.int(1);
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
        .blocking
        .remove_locks(ctx.conn.id, &dk, args.get(2).map(|v| &v[..]));
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
