//! Server commands (Redis's server.c, db.c, debug.c, object.c, config.c).
//!
//! Reaches state only through `Ctx`; saves, rewrites and SHUTDOWN's save go
//! through `crate::persist`'s functions, MONITOR lines through the client
//! table (`push_to`). SHUTDOWN only flags the store; the runtime stops.

mod command_cmd;
mod config_cmd;
mod debug;
mod docs;
mod info;
mod keyspecs;
mod lolwut;
mod memory;
mod module;
mod shutdown;
mod slowlog;

pub use info::bytes_to_human;
pub use keyspecs::find_keys;
pub use shutdown::{abort_shutdown, prepare_shutdown, shutdown_cron, Shutdown, SHUTDOWN_FAILED};

use bytes::Bytes;

use super::*;
use crate::db::Db;
use crate::util::eq_ic;

const ADMIN_ACL: &[&str] = &["admin", "slow", "dangerous"];
const SLOW: &[&str] = &["slow"];
const KEYSPACE_WRITE_DANGER: &[&str] = &["keyspace", "write", "slow", "dangerous"];
const ADMIN_FLAGS: u32 = ADMIN | NOSCRIPT | LOADING | STALE;

/// A container command (CONFIG, OBJECT, MEMORY, ...): the table resolves its
/// subcommand, so its own handler never runs.
#[allow(clippy::too_many_arguments)]
pub(crate) const fn container(
    name: &'static str,
    group: &'static str,
    since: &'static str,
    summary: &'static str,
    acl: &'static [&'static str],
    subs: &'static [Spec],
) -> Spec {
    Spec {
        name,
        arity: -2,
        flags: 0,
        first_key: 0,
        last_key: 0,
        step: 0,
        group,
        summary,
        since,
        acl,
        run: unreachable_container,
        subs,
        rules: 0,
        pushes: super::Pushes::Events,
    }
}

fn unreachable_container(ctx: &mut Ctx, args: &[Bytes]) {
    // `resolve` always picks a subcommand; kept total for safety.
    let s = String::from_utf8_lossy(args.get(1).map(|a| &a[..]).unwrap_or(b""));
    ctx.error(&format!("ERR unknown subcommand '{s}'"));
}

pub static COMMANDS: &[Spec] = &[
    spec(
        "lolwut",
        -1,
        READONLY | FAST,
        (0, 0, 0),
        "server",
        "5.0.0",
        "Display some computer art and the Redis version",
        &["read", "fast"],
        lolwut::lolwut,
    ),
    spec(
        "info",
        -1,
        LOADING | STALE,
        (0, 0, 0),
        "server",
        "1.0.0",
        "Get information and statistics about the server",
        &["slow", "dangerous"],
        info::info,
    ),
    container(
        "config",
        "server",
        "2.0.0",
        "A container for server configuration commands",
        SLOW,
        config_cmd::SUBS,
    ),
    spec(
        "dbsize",
        1,
        READONLY | FAST,
        (0, 0, 0),
        "server",
        "1.0.0",
        "Return the number of keys in the selected database",
        &["keyspace", "read", "fast"],
        dbsize,
    ),
    spec(
        "flushdb",
        -1,
        WRITE,
        (0, 0, 0),
        "server",
        "1.0.0",
        "Remove all keys from the current database",
        KEYSPACE_WRITE_DANGER,
        flushdb,
    ),
    spec(
        "flushall",
        -1,
        WRITE,
        (0, 0, 0),
        "server",
        "1.0.0",
        "Remove all keys from all databases",
        KEYSPACE_WRITE_DANGER,
        flushall,
    ),
    spec(
        "time",
        1,
        LOADING | STALE | FAST,
        (0, 0, 0),
        "server",
        "2.6.0",
        "Return the current server time",
        &["fast"],
        time,
    ),
    spec(
        "bgrewriteaof",
        1,
        ADMIN | NOSCRIPT | NO_ASYNC_LOADING,
        (0, 0, 0),
        "server",
        "1.0.0",
        "Asynchronously rewrite the append-only file",
        &["admin", "slow", "dangerous"],
        bgrewriteaof,
    ),
    spec(
        "bgsave",
        -1,
        ADMIN | NOSCRIPT | NO_ASYNC_LOADING,
        (0, 0, 0),
        "server",
        "1.0.0",
        "Asynchronously save the dataset to disk",
        &["admin", "slow", "dangerous"],
        bgsave,
    ),
    spec(
        "save",
        1,
        ADMIN | NOSCRIPT | NO_ASYNC_LOADING | NO_MULTI,
        (0, 0, 0),
        "server",
        "1.0.0",
        "Synchronously save the dataset to disk",
        &["admin", "slow", "dangerous"],
        save,
    ),
    spec(
        "lastsave",
        1,
        LOADING | STALE | FAST,
        (0, 0, 0),
        "server",
        "1.0.0",
        "Get the UNIX time stamp of the last successful save to disk",
        &["admin", "fast", "dangerous"],
        lastsave,
    ),
    spec(
        "shutdown",
        -1,
        ADMIN_FLAGS | NO_MULTI | ALLOW_BUSY,
        (0, 0, 0),
        "server",
        "1.0.0",
        "Synchronously save the dataset to disk and then shut down the server",
        ADMIN_ACL,
        shutdown,
    ),
    spec(
        "monitor",
        1,
        ADMIN_FLAGS,
        (0, 0, 0),
        "server",
        "1.0.0",
        "Listen for all requests received by the server in real time",
        ADMIN_ACL,
        monitor,
    ),
    spec(
        "debug",
        -2,
        ADMIN_FLAGS | PROTECTED,
        (0, 0, 0),
        "server",
        "1.0.0",
        "A container for debugging commands",
        ADMIN_ACL,
        debug::debug,
    ),
    container(
        "module",
        "server",
        "4.0.0",
        "A container for module commands",
        &["slow"],
        module::MODULE_SUBS,
    ),
    container(
        "memory",
        "server",
        "4.0.0",
        "A container for memory diagnostics commands",
        SLOW,
        memory::SUBS,
    ),
    container(
        "slowlog",
        "server",
        "2.2.12",
        "A container for slow log commands",
        SLOW,
        slowlog::SLOWLOG_SUBS,
    ),
    container(
        "latency",
        "server",
        "2.8.13",
        "A container for latency diagnostics commands",
        SLOW,
        slowlog::LATENCY_SUBS,
    ),
    container(
        "object",
        "generic",
        "2.2.3",
        "A container for object introspection commands",
        SLOW,
        debug::OBJECT_SUBS,
    ),
    Spec {
        subs: command_cmd::SUBS,
        ..spec(
            "command",
            -1,
            LOADING | STALE,
            (0, 0, 0),
            "server",
            "2.8.13",
            "Get array of Redis command details",
            &["slow", "connection"],
            command_cmd::command,
        )
    },
];

/// Writes a HELP reply: the header line, then `lines`, then HELP's own entry,
/// as Redis's `addReplyHelp` does.
pub(crate) fn reply_help(ctx: &mut Ctx, name: &str, lines: &[&str]) {
    ctx.out.array(lines.len() + 3);
    ctx.out.simple(&format!(
        "{name} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    ));
    for l in lines {
        ctx.out.simple(l);
    }
    ctx.out.simple("HELP");
    ctx.out.simple("    Prints this help.");
}

fn dbsize(ctx: &mut Ctx, _args: &[Bytes]) {
    let n = ctx.db().len();
    ctx.out.int(n as i64);
}

/// Parses FLUSHDB/FLUSHALL's optional SYNC|ASYNC (none: ASYNC under
/// `lazyfree-lazy-user-flush`, Redis's getFlushCommandFlags); None after a
/// syntax error.
fn flush_mode(ctx: &mut Ctx, args: &[Bytes]) -> Option<bool> {
    match args.len() {
        1 => Some(ctx.store.config().tuning.lazyfree_lazy_user_flush),
        2 if eq_ic(&args[1], "sync") => Some(false),
        2 if eq_ic(&args[1], "async") => Some(true),
        _ => {
            ctx.error(SYNTAX);
            None
        }
    }
}

/// Empties one database. ASYNC moves the contents into a fresh `Db` and frees
/// it on another thread, so a huge database does not stall other clients.
/// Only non-empty databases record a `Flushed` event: an empty one has no
/// key anybody could be watching change.
fn flush_db(db: &mut Db, lazy: bool) -> usize {
    let n = db.len();
    if n == 0 {
        return 0;
    }
    if lazy {
        // Counted as one object per key (Redis's emptyDbAsync).
        let mut old = Db::new(db.id);
        db.swap_contents(&mut old);
        db.lazy.clone().free(old, n as u64);
    }
    db.flush();
    n
}

fn flushdb(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(lazy) = flush_mode(ctx, args) else {
        return;
    };
    let db = ctx.db();
    let removed = flush_db(db, lazy);
    // Redis adds the number of removed keys to the dirty counter; the store
    // adds one per recorded event, so only the difference is added here.
    ctx.store
        .ks
        .add_dirty(removed.saturating_sub((removed > 0) as usize) as u64);
    ctx.store.tracking_flushed(false);
    ctx.out.ok();
}

fn flushall(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(lazy) = flush_mode(ctx, args) else {
        return;
    };
    // As Redis's flushAllDataAndResetRDB: a background save stops (its
    // image is of data that is gone), and with save rules set the empty
    // dataset is saved at once.
    crate::persist::bgsave_abort(ctx.store);
    let mut removed = 0;
    let mut events = 0;
    for db in ctx.store.ks.dbs_mut() {
        let n = flush_db(db, lazy);
        removed += n;
        events += (n > 0) as usize;
    }
    if !ctx.store.config().save.is_empty() {
        let _ = crate::persist::save(ctx.store);
    }
    // Redis: dirty += removed keys, then one more for FLUSHALL itself.
    ctx.store.ks.add_dirty((removed - events) as u64 + 1);
    ctx.store.tracking_flushed(true);
    ctx.out.ok();
}

fn time(ctx: &mut Ctx, _args: &[Bytes]) {
    let us = crate::util::now_us();
    ctx.out.array(2);
    ctx.out.bulk_int(us / 1_000_000);
    ctx.out.bulk_int(us % 1_000_000);
}

/// SAVE: the snapshot, written while the server waits (as Redis's).
fn save(ctx: &mut Ctx, _args: &[Bytes]) {
    if ctx.store.persist.rdb_job_running() {
        return ctx.error("ERR Background save already in progress");
    }
    match crate::persist::save(ctx.store) {
        Ok(()) => ctx.out.ok(),
        Err(_) => ctx.error("ERR"),
    }
}

/// BGREWRITEAOF: a new AOF generation. Logging moves to a new
/// incremental file at once and the base is written in the background (as
/// BGSAVE, no fork); with the AOF off, logging stops again when the
/// generation is written, as Redis's.
fn bgrewriteaof(ctx: &mut Ctx, _args: &[Bytes]) {
    match crate::persist::bgrewriteaof(ctx.store) {
        Ok(status) => ctx.out.simple(status),
        Err(e) => ctx.error(e),
    }
}

/// BGSAVE [SCHEDULE]: the snapshot written in the background, without a
/// fork (`crate::persist::snapshot`).
fn bgsave(ctx: &mut Ctx, args: &[Bytes]) {
    let schedule = match args.len() {
        1 => false,
        2 if eq_ic(&args[1], "schedule") => true,
        _ => return ctx.error(SYNTAX),
    };
    match crate::persist::bgsave(ctx.store, schedule) {
        Ok(status) => ctx.out.simple(status),
        Err(e) => ctx.error(e),
    }
}

/// Empties every database as FLUSHALL does (the keyspace hook ends
/// bindings, wakes watchers, invalidates tracking), without FLUSHALL's
/// change count: DEBUG RELOAD.
pub(super) fn empty_all(ctx: &mut Ctx) {
    empty_store(ctx.store, false);
}

/// `empty_all` on the store alone.
fn empty_store(store: &mut Store, lazy: bool) {
    for db in store.ks.dbs_mut() {
        flush_db(db, lazy);
    }
    store.tracking_flushed(true);
}

/// A replica's full sync (Redis's readSyncBulkPayload after the
/// transfer): any snapshot job stops and the master's RDB is loaded.
/// Returns the keys loaded.
///
/// Without `swap` the old data goes first ("Flushing old data"), and a
/// load that fails leaves the dataset empty, as Redis's. With `swap`
/// (`repl-diskless-load swapdb`) the old data is set aside until the
/// load succeeded, then freed in the background; a failed load puts it
/// back, as Redis's temporary databases do.
///
/// The lock state a Latchkey master's RDB carries is applied after the
/// data, its sessions given local ids by `alloc`; the state's last record
/// number is returned with the key count (None: the RDB had none).
pub fn load_from_master(
    store: &mut Store,
    rdb: &[u8],
    swap: bool,
    alloc: &mut dyn FnMut() -> crate::ids::ClientId,
) -> Result<(usize, Option<u64>), String> {
    crate::persist::bgsave_abort(store);
    let mut old = Vec::new();
    if swap {
        for db in store.ks.dbs_mut() {
            let mut aside = Db::new(db.id);
            let n = db.len();
            db.swap_contents(&mut aside);
            if n > 0 {
                // Watchers of the old keys re-check (touchAllWatchedKeysInDb).
                db.flush();
            }
            old.push((aside, n as u64));
        }
        store.tracking_flushed(true);
    } else {
        tracing::info!("MASTER <-> REPLICA sync: Flushing old data");
        // `replica-lazy-flush`: freed in the background (Redis's
        // EMPTYDB_ASYNC).
        let lazy = store.config().repl.replica_lazy_flush;
        empty_store(store, lazy);
    }
    tracing::info!("MASTER <-> REPLICA sync: Loading DB in memory");
    let loaded = crate::persist::load_bytes(store, rdb, false).map_err(|e| e.to_string());
    if loaded.is_err() {
        empty_store(store, false);
        if swap {
            // A swap event, so that existence watchers told DEL by the
            // flush above see their keys again.
            for (db, (aside, _)) in store.ks.dbs_mut().iter_mut().zip(old.iter_mut()) {
                db.swap_with(aside);
            }
            old.clear();
            tracing::info!("MASTER <-> REPLICA sync: Discarding temporary DB in background");
        }
    } else if swap {
        tracing::info!("MASTER <-> REPLICA sync: Swapping active DB with loaded DB");
        for (db, (aside, n)) in store.ks.dbs_mut().iter_mut().zip(old.drain(..)) {
            if n > 0 {
                db.lazy.clone().free(aside, n);
            }
        }
        tracing::info!("MASTER <-> REPLICA sync: Discarding old DB in background");
    }
    crate::persist::Host::settle(store);
    let keys = loaded?;
    store.ks.forget_replicated();
    let seq = restore_locks(store, alloc)?;
    // Redis's restartAOFAfterSYNC: the AOF starts again from the data just
    // loaded (a rewrite), or a restart from it would lack what the sync
    // brought.
    if store.config().appendonly {
        if let Err(e) = crate::persist::bgrewriteaof(store) {
            tracing::warn!("Failed enabling the AOF after successful master synchronization! {e}");
        }
    }
    Ok((keys, seq))
}

/// The lock state the RDB just loaded carried (a Latchkey master's), put
/// in place as replicated sessions given local ids by `alloc`: its last
/// record's number, or None when the RDB had none.
pub fn restore_locks(
    store: &mut Store,
    alloc: &mut dyn FnMut() -> crate::ids::ClientId,
) -> Result<Option<u64>, String> {
    let Some((n, state)) = store.persist.take_loaded_locks() else {
        return Ok(None);
    };
    let records = crate::replication::locklog::decode_state(&state)
        .ok_or_else(|| "the lock state in the RDB cannot be read".to_string())?;
    for r in records {
        store.apply_lock(r, alloc);
    }
    Ok(Some(n))
}

fn lastsave(ctx: &mut Ctx, _args: &[Bytes]) {
    ctx.out.int(ctx.store.persist.lastsave());
}

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]: with save rules set (or
/// SAVE) the snapshot is written first; if that fails the server stays up
/// (unless FORCE), as Redis's prepareForShutdown.
/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT], as Redis's
/// shutdownCommand: the client waits, unanswered, while the replicas
/// catch up (`shutdown`); the server exits, or it is told the error.
fn shutdown(ctx: &mut Ctx, args: &[Bytes]) {
    use crate::config::{SHUTDOWN_FORCE, SHUTDOWN_NOSAVE, SHUTDOWN_NOW, SHUTDOWN_SAVE};
    let (mut flags, mut abort) = (0u32, false);
    for a in &args[1..] {
        if eq_ic(a, "nosave") {
            flags |= SHUTDOWN_NOSAVE;
        } else if eq_ic(a, "save") {
            flags |= SHUTDOWN_SAVE;
        } else if eq_ic(a, "now") {
            flags |= SHUTDOWN_NOW;
        } else if eq_ic(a, "force") {
            flags |= SHUTDOWN_FORCE;
        } else if eq_ic(a, "abort") {
            abort = true;
        } else {
            return ctx.error(SYNTAX);
        }
    }
    if (abort && flags != 0) || (flags & SHUTDOWN_NOSAVE != 0 && flags & SHUTDOWN_SAVE != 0) {
        return ctx.error(SYNTAX);
    }
    if abort {
        if !shutdown::abort_shutdown(ctx.store) {
            return ctx.error("ERR No shutdown in progress.");
        }
        return ctx.out.ok();
    }
    match shutdown::prepare_shutdown(ctx.store, flags) {
        Shutdown::Exit => {}
        Shutdown::Waiting => {
            super::block_on(ctx, &[], None, crate::blocking::TimeoutReply::Shutdown)
        }
        Shutdown::Failed => ctx.error(SHUTDOWN_FAILED),
    }
}

fn monitor(ctx: &mut Ctx, _args: &[Bytes]) {
    let id = ctx.conn.id;
    if !ctx.store.monitors.contains(&id) {
        ctx.store.monitors.push(id);
        if let Some(c) = ctx.store.clients.get_mut(&id) {
            c.monitor = true;
        }
    }
    ctx.out.ok();
}
