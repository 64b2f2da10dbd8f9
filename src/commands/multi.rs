//! Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH, as Redis 7.0's
//! multi.c and processCommand do them.
//!
//! Queueing is part of check-and-route (`super::check` calls `route`): in
//! MULTI, a command that passed the checks is copied into the connection's
//! `Transaction` and answered `+QUEUED`; one refused there flags the
//! transaction, so EXEC fails with EXECABORT. EXEC runs the queued commands
//! through the re-entrant `call`, one array reply. WATCH's registry and
//! dirty flags are `crate::transaction`, held by the keyspace and driven by
//! its hook: the registry sits below the keyspace, so it cannot share this
//! folder (commands depend on the keyspace).
//!
//! Reaches the WATCH registry and the databases only through `Ctx`; EXEC
//! re-admits each queued command (`admit`, `Caller::Exec`) and runs it
//! through `call`, never a handler directly. TPCHECK's judgement is `locks`'.

use bytes::Bytes;

use super::*;
use super::{MULTI_OOM_OK, RUNS_IN_MULTI};

const TX_FLAGS: u32 = NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY;
const TX_FAST: &[&str] = &["fast", "transaction"];

pub static COMMANDS: &[Spec] = &[
    spec(
        "multi",
        1,
        TX_FLAGS,
        (0, 0, 0),
        "transactions",
        "1.2.0",
        "Mark the start of a transaction block",
        TX_FAST,
        multi,
    )
    .rules(RUNS_IN_MULTI),
    spec(
        "exec",
        1,
        NOSCRIPT | LOADING | STALE | SKIP_SLOWLOG,
        (0, 0, 0),
        "transactions",
        "1.2.0",
        "Execute all commands issued after MULTI",
        &["slow", "transaction"],
        exec,
    )
    .rules(RUNS_IN_MULTI | MULTI_OOM_OK),
    spec(
        "discard",
        1,
        TX_FLAGS,
        (0, 0, 0),
        "transactions",
        "2.0.0",
        "Discard all commands issued after MULTI",
        TX_FAST,
        discard,
    )
    .rules(RUNS_IN_MULTI | MULTI_OOM_OK),
    spec(
        "watch",
        -2,
        TX_FLAGS,
        (1, -1, 1),
        "transactions",
        "2.2.0",
        "Watch the given keys to determine execution of the MULTI/EXEC block",
        TX_FAST,
        watch,
    )
    .rules(RUNS_IN_MULTI),
    spec(
        "unwatch",
        1,
        TX_FLAGS,
        (0, 0, 0),
        "transactions",
        "2.2.0",
        "Forget about all watched keys",
        TX_FAST,
        unwatch,
    ),
];

const EXECABORT: &str = "EXECABORT Transaction discarded because of previous errors.";

/// A connection's open transaction (Redis's `mstate` and the
/// CLIENT_DIRTY_EXEC flag).
#[derive(Default)]
pub struct Transaction {
    /// The queued commands, arguments copied out of the read buffer.
    cmds: Vec<(&'static Spec, Vec<Bytes>)>,
    /// A command was refused while queueing: EXEC fails with EXECABORT.
    aborted: bool,
    /// The queued commands' flags together (Redis's `mstate.cmd_flags`):
    /// EXEC is refused under OOM if one may grow memory, and waits out a
    /// CLIENT PAUSE WRITE if one may write.
    flags: u32,
    /// Bytes of queued arguments, as Redis's `argv_len_sums` (CLIENT LIST
    /// `multi-mem`).
    mem: usize,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("queued", &self.cmds.len())
            .field("aborted", &self.aborted)
            .finish()
    }
}

impl Transaction {
    /// The queued commands' flags together.
    pub fn flags(&self) -> u32 {
        self.flags
    }

    /// A command was refused while queueing (Redis's flagTransaction):
    /// EXEC answers EXECABORT.
    pub(super) fn abort(&mut self) {
        self.aborted = true;
    }

    /// Queues a command that passed the checks (copied out of the read
    /// buffer); returns the queue's length and memory.
    fn queue(&mut self, spec: &'static Spec, args: &[Bytes]) -> (usize, usize) {
        let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
        self.mem += args.iter().map(|a| a.len()).sum::<usize>() + 8 * args.len();
        self.flags |= spec.flags;
        self.cmds.push((spec, args));
        (self.cmds.len(), self.mem)
    }
}

/// Check-and-route's MULTI step while a script is busy, without the
/// store (Redis runs MULTI and queues `allow-busy` commands then, and
/// refuses the rest with BUSY, flagging the transaction). `spec` was
/// admitted as `allow-busy`; true when answered here, false when it needs
/// the store (outside MULTI; inside, EXEC, DISCARD, WATCH, QUIT, RESET):
/// it waits for the script's end. CLIENT LIST's transaction figures catch up with the
/// next command queued with the store, or the transaction's end.
pub(super) fn route_busy(
    conn: &mut ConnState,
    out: &mut Out,
    spec: &'static Spec,
    args: &[Bytes],
) -> bool {
    let is_multi = crate::util::eq_ic(&args[0], "multi");
    match conn.multi.as_mut() {
        None if is_multi => {
            conn.multi = Some(Transaction::default());
            out.ok();
        }
        Some(_) if is_multi => out.error("ERR MULTI calls can not be nested"),
        Some(_) if spec.rules & RUNS_IN_MULTI != 0 => return false,
        Some(tx) => {
            if !tx.aborted {
                tx.queue(spec, args);
            }
            out.simple("QUEUED");
        }
        None => return false,
    }
    true
}

/// EXEC, DISCARD, WATCH and UNWATCH while a script is busy, answered
/// without the store as Redis answers them then: EXEC is refused, which
/// discards the transaction (if any) and unwatches (rejectCommand's
/// execCommandAbort); DISCARD, WATCH and UNWATCH run. What they change in
/// the store waits in `conn.later` until it is free: dropped watches, and
/// new ones, which are dirty at once if the keyspace changed after the
/// WATCH (any key: the script's writes are not tracked per key until the
/// watch is in the store, so a change to another key fails the EXEC too,
/// which a WATCH allows). False for any other command.
pub(super) fn answer_busy(
    gate: &crate::scripting::Gate,
    conn: &mut ConnState,
    out: &mut Out,
    args: &[Bytes],
) -> bool {
    let name = &args[0];
    let in_multi = conn.multi.is_some();
    if crate::util::eq_ic(name, "exec") {
        // With or without MULTI (rejectCommand aborts any EXEC).
        let busy = gate.busy_error();
        out.error(&format!(
            "EXECABORT Transaction discarded because of: {busy}"
        ));
    } else if crate::util::eq_ic(name, "discard") {
        if !in_multi {
            out.error("ERR DISCARD without MULTI");
            return true;
        }
        out.ok();
    } else if crate::util::eq_ic(name, "watch") {
        if in_multi {
            out.error("ERR WATCH inside MULTI is not allowed");
        } else {
            conn.later.push(Later::Watch {
                db: conn.db,
                keys: args[1..].to_vec(),
                dirty: gate.dirty(),
            });
            out.ok();
        }
        return true;
    } else if crate::util::eq_ic(name, "unwatch") && !in_multi {
        out.ok();
    } else {
        return false;
    }
    conn.multi = None;
    conn.later.push(Later::Unwatched);
    true
}

/// The store learns that a transaction ended while a script was busy.
pub(super) fn unwatched(ctx: &mut Ctx) {
    ctx.store.ks.tx.unwatch_all(ctx.conn.id);
    if ctx.conn.multi.is_none() {
        set_info(ctx, None, 0);
    }
}

/// Check-and-route's MULTI step: `checked` is what the checks let through
/// (None: they refused it and wrote the error, which flags the
/// transaction). Returns the command to run now, or None once it is queued.
#[inline(always)]
pub fn route(
    ctx: &mut Ctx,
    args: &[Bytes],
    checked: Option<&'static Spec>,
) -> Option<&'static Spec> {
    let id = ctx.conn.id;
    let Some(tx) = ctx.conn.multi.as_mut() else {
        return checked;
    };
    let Some(spec) = checked else {
        // Postponed by CLIENT PAUSE is not refused: it runs (or is queued)
        // when the pause ends.
        if ctx.conn.postponed.is_none() {
            tx.aborted = true;
        }
        return None;
    };
    if spec.rules & RUNS_IN_MULTI != 0 {
        return Some(spec);
    }
    // No point keeping commands of a transaction that cannot run (a
    // pipelining client may queue many after the error).
    if !tx.aborted && !ctx.store.ks.tx.is_dirty(id) {
        let (n, mem) = tx.queue(spec, args);
        set_info(ctx, Some(n), mem);
    }
    ctx.out.simple("QUEUED");
    None
}

/// EXEC itself refused by check-and-route (arity, OOM), its error written
/// at `mark`: the transaction, if any, is discarded and the error becomes
/// an EXECABORT naming it (Redis's execCommandAbort).
pub fn exec_refused(ctx: &mut Ctx, mark: usize) {
    let written = ctx.out.buf[mark..].to_vec();
    ctx.out.truncate(mark);
    let error = written
        .strip_prefix(b"-")
        .unwrap_or(&written)
        .strip_suffix(b"\r\n")
        .unwrap_or(&written);
    let error = error.strip_prefix(b"ERR ").unwrap_or(error);
    let mut msg = b"EXECABORT Transaction discarded because of: ".to_vec();
    msg.extend_from_slice(error);
    end(ctx);
    ctx.out.error_bytes(&msg);
}

/// The connection's CLIENT LIST figures for its transaction.
fn set_info(ctx: &mut Ctx, count: Option<usize>, mem: usize) {
    if let Some(c) = ctx.store.clients.get_mut(&ctx.conn.id) {
        c.info.multi = count;
        c.info.multi_mem = mem;
    }
}

/// Ends the connection's transaction, if any, and unwatches its keys
/// (Redis's discardTransaction): EXEC, DISCARD, RESET.
pub fn end(ctx: &mut Ctx) {
    ctx.conn.multi = None;
    set_info(ctx, None, 0);
    ctx.store.ks.tx.unwatch_all(ctx.conn.id);
}

fn multi(ctx: &mut Ctx, _args: &[Bytes]) {
    if ctx.conn.multi.is_some() {
        return ctx.error("ERR MULTI calls can not be nested");
    }
    ctx.conn.multi = Some(Transaction::default());
    set_info(ctx, Some(0), 0);
    ctx.out.ok();
}

fn discard(ctx: &mut Ctx, _args: &[Bytes]) {
    if ctx.conn.multi.is_none() {
        return ctx.error("ERR DISCARD without MULTI");
    }
    end(ctx);
    ctx.out.ok();
}

fn watch(ctx: &mut Ctx, args: &[Bytes]) {
    if ctx.conn.multi.is_some() {
        return ctx.error("ERR WATCH inside MULTI is not allowed");
    }
    watch_keys(ctx, ctx.conn.db, &args[1..]);
    ctx.out.ok();
}

fn watch_keys(ctx: &mut Ctx, db: usize, keys: &[Bytes]) {
    let id = ctx.conn.id;
    for key in keys {
        // Redis's keyIsExpired: a key whose TTL passed is not deleted here.
        let stored = ctx.store.ks.db(db).stored_expired(key);
        ctx.store.ks.tx.watch(id, (db, key.clone()), stored);
    }
}

/// The store learns of a WATCH answered while a script was busy.
pub(super) fn watched_while_busy(ctx: &mut Ctx, db: usize, keys: &[Bytes], dirty: u64) {
    watch_keys(ctx, db, keys);
    if ctx.store.ks.dirty() != dirty {
        ctx.store.ks.tx.dirty(ctx.conn.id);
    }
}

fn unwatch(ctx: &mut Ctx, _args: &[Bytes]) {
    ctx.store.ks.tx.unwatch_all(ctx.conn.id);
    ctx.out.ok();
}

/// Whether a WATCH of `id` fails its EXEC: a watched key changed, or one
/// not expired when watched has expired since (Redis's isWatchedKeyExpired).
fn watch_failed(store: &Store, id: ClientId) -> bool {
    let ks = &store.ks;
    ks.tx.is_dirty(id)
        || ks
            .tx
            .any_expired_since(id, |(db, key)| ks.db(*db).stored_expired(key) == Some(true))
}

/// The first queued TPCHECK that fails, judged in the database it would
/// run in (following the SELECTs queued before it).
fn fencing_failed(ctx: &mut Ctx, cmds: &[(&'static Spec, Vec<Bytes>)]) -> Option<String> {
    let mut db = ctx.conn.db;
    for (spec, args) in cmds {
        if spec.name == "select" {
            if let Some(d) = crate::util::parse_i64(&args[1]) {
                db = (d.max(0) as usize).min(ctx.store.ks.dbs().len() - 1);
            }
        } else if spec.name == "tpcheck" {
            // A lazily expired lock has no holder.
            ctx.store.ks.db_mut(db).exists(&args[1]);
            super::settle(ctx.store, Some(ctx.conn.id));
            if let Some(e) = super::locks::fencing_error(ctx.store, db, &args[1], &args[2]) {
                return Some(e);
            }
        }
    }
    None
}

/// Drops what was written from `mark` while replies are off or skipped
/// (the queued command's own reply only: the dispatcher judges EXEC's).
fn drop_if_silenced(ctx: &mut Ctx, mark: usize) {
    let pushed = std::mem::take(&mut ctx.conn.reply_pushed);
    if !pushed && (ctx.conn.reply_mode == ReplyMode::Off || ctx.conn.skip_reply) {
        ctx.out.truncate(mark);
    }
}

fn exec(ctx: &mut Ctx, _args: &[Bytes]) {
    let Some(tx) = ctx.conn.multi.as_mut() else {
        return ctx.error("ERR EXEC without MULTI");
    };
    // The connection stays in MULTI while the commands run (CLIENT LIST
    // shows `x`; Redis's CLIENT_MULTI), with the queue taken out.
    let (aborted, cmds) = (tx.aborted, std::mem::take(&mut tx.cmds));
    let id = ctx.conn.id;
    if aborted {
        end(ctx);
        return ctx.error(EXECABORT);
    }
    if watch_failed(ctx.store, id) {
        end(ctx);
        return ctx.out.null_array();
    }
    // TPCHECKs queued in the transaction are its conditions: a stale
    // fencing token runs none of it (a holder that lost its lock writes
    // nothing), and EXEC answers the check's STALE error.
    if let Some(e) = fencing_failed(ctx, &cmds) {
        end(ctx);
        return ctx.error(&e);
    }
    ctx.store.ks.tx.unwatch_all(id);
    // Waiters the transaction makes ready are served after EXEC (by the
    // dispatcher's `settle`), never between its commands.
    let settling = ctx.store.ks.begin_settling();
    // The writes to log for the transaction (AOF, replication).
    let mut log: Vec<crate::effects::Logged> = Vec::new();
    let mut before: Option<Vec<u8>> = None;
    // CLIENT REPLY applies to each reply as it is written, as Redis's
    // addReply: a CLIENT REPLY OFF or ON inside the transaction silences or
    // restores the replies after it (the array header keeps the count).
    let mut mark = ctx.out.len();
    ctx.out.array(cmds.len());
    drop_if_silenced(ctx, mark);
    for (spec, args) in cmds {
        mark = ctx.out.len();
        // Permissions are checked again: they may have changed since the
        // command was queued.
        if !matches!(
            super::admit(super::Caller::Exec(ctx, spec), &args),
            super::Verdict::Run(_)
        ) {
            continue;
        }
        let db = ctx.conn.db;
        let r = call(ctx, spec, &args);
        // Nothing blocks inside a transaction: a blocking command that
        // found nothing replies as on its timeout (Redis's DENY_BLOCKING).
        if let Some(req) = ctx.conn.block.take() {
            timeout_reply(ctx.store, ctx.conn.id, ctx.out, req.on_timeout);
        }
        drop_if_silenced(ctx, mark);
        log.extend(super::propagate::logged(ctx, spec, &args, db, r));
        // Pushes a command asked to precede its reply (WATCHEX) go before
        // the whole array, with everything the transaction pushed so far.
        if std::mem::take(&mut ctx.conn.pushes_first) {
            ctx.conn
                .signal
                .take_pending(before.get_or_insert_with(Vec::new));
        }
    }
    if settling {
        ctx.store.ks.end_settling();
    }
    if let Some(before) = before {
        let mut after = Vec::new();
        ctx.conn.signal.take_pending(&mut after);
        ctx.conn.signal.queue(&before);
        ctx.conn.pushes_first = true;
        ctx.out.buf.extend_from_slice(&after);
    }
    end(ctx);
    ctx.conn.rewrite = Some(super::propagate::wrap(log));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn args(cmd: &str) -> Vec<Bytes> {
        cmd.split(' ').map(|a| Bytes::from(a.to_string())).collect()
    }

    /// Check-and-route then call, as the dispatcher does.
    fn run(ctx: &mut Ctx, cmd: &str) -> Option<Record> {
        let a = args(cmd);
        let spec = check(ctx, &a)?;
        Some(call(ctx, spec, &a))
    }

    #[test]
    fn exec_returns_the_writes_it_ran_as_one_record() {
        let mut store = Store::new(Config::default(), crate::commands::acl_catalog());
        let mut conn = ConnState::new(1, true);
        let mut out = Out::new(false);
        let mut ctx = Ctx {
            store: &mut store,
            conn: &mut conn,
            out: &mut out,
        };
        assert!(run(&mut ctx, "MULTI").is_some());
        for cmd in ["SET a 1", "GET a", "SADD s x", "SADD s x", "INCR a"] {
            assert!(run(&mut ctx, cmd).is_none(), "{cmd} is queued");
        }
        let r = run(&mut ctx, "EXEC").expect("EXEC runs");
        // The second SADD and the GET changed nothing: not logged.
        assert_eq!(r.dirty, 3);
        let mut want: Vec<(usize, Vec<Bytes>)> = ["MULTI", "SET a 1", "SADD s x", "INCR a", "EXEC"]
            .iter()
            .map(|c| (0, args(c)))
            .collect();
        assert_eq!(r.rewrite, Some(std::mem::take(&mut want)));
        assert!(ctx.conn.multi.is_none());
        assert!(out
            .buf
            .ends_with(b"*5\r\n+OK\r\n$1\r\n1\r\n:1\r\n:0\r\n:2\r\n"));
    }
}
