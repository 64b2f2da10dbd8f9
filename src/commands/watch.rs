//! Latchkey's own commands: connection-bound keys and existence watches.
//!
//! ```text
//! SETTP key value [QUEUE] SETNX that binds the key to this connection;
//!                        QUEUE waits in line for a taken key (ACQUIRED push).
//! TPDEQUEUE key [value]  leave SETTP's queue for a key.
//! TPQUEUE key            ids of the connections queued for a key, in order.
//! WATCHEX key            +EXIST / +NOEXIST now, then ADD / DEL pushes.
//! UNWATCHEX [key ...]    number of watches removed (all without keys).
//! TPOWNER key            id of the connection a key is bound to, or nil.
//! TPKEYS [client-id]     keys bound to a connection (default: this one).
//! ```

use bytes::Bytes;

use super::*;
use crate::db::entry::FLAG_BOUND;

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
        READONLY | FAST,
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
        FAST,
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

fn settp(ctx: &mut Ctx, args: &[Bytes]) {
    let queue = match args.len() {
        3 => false,
        4 if args[3].eq_ignore_ascii_case(b"QUEUE") => true,
        _ => return ctx.error(SYNTAX),
    };
    let key = &args[1];
    let db_id = ctx.conn.db;
    let db = ctx.db();
    if db.exists(key) {
        if queue {
            let id = ctx.conn.id;
            ctx.store
                .queues
                .push(id, (db_id, key.clone()), args[2].clone());
        }
        return ctx.out.int(0);
    }
    db.set_str(key, &args[2], false, false);
    db.set_flag(key, FLAG_BOUND, true);
    ctx.store.bindings.bind(ctx.conn.id, (db_id, key.clone()));
    ctx.out.int(1);
}

fn watchex(ctx: &mut Ctx, args: &[Bytes]) {
    // Settle every earlier change (and a lazy expiry of this key) first, so
    // the state registered here is the one the next push flips from.
    ctx.store.drain_events(Some(ctx.conn.id));
    let exists = ctx.db().exists(&args[1]);
    ctx.store.drain_events(Some(ctx.conn.id));
    ctx.store
        .watches
        .add(ctx.conn.id, (ctx.conn.db, args[1].clone()), exists);
    ctx.out.simple(if exists { "EXIST" } else { "NOEXIST" });
}

fn unwatchex(ctx: &mut Ctx, args: &[Bytes]) {
    let id = ctx.conn.id;
    let n = if args.len() == 1 {
        ctx.store.watches.remove_all(id)
    } else {
        let db = ctx.conn.db;
        args[1..]
            .iter()
            .filter(|k| ctx.store.watches.remove(id, &(db, (*k).clone())))
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
        .queues
        .remove(ctx.conn.id, &dk, args.get(2).map(|v| &v[..]));
    ctx.out.int(n as i64);
}

fn tpqueue(ctx: &mut Ctx, args: &[Bytes]) {
    let ids = ctx.store.queues.waiters(&(ctx.conn.db, args[1].clone()));
    ctx.out.array(ids.len());
    for id in ids {
        ctx.out.int(id as i64);
    }
}

fn tpowner(ctx: &mut Ctx, args: &[Bytes]) {
    let dk = (ctx.conn.db, args[1].clone());
    // A lazily expired key has no owner; settle it first.
    ctx.db().exists(&args[1]);
    ctx.store.drain_events(Some(ctx.conn.id));
    match ctx.store.bindings.owner(&dk) {
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
    let mut keys = ctx.store.bindings.keys_of(id);
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
