//! Serving the waiters of the one blocking registry (`crate::blocking`):
//! registering a connection's wait when its command blocked, and serving
//! the waits the last command made ready (`settle`), in Redis's blocking
//! order, each as the blocked command run again (`serve_command`).
//!
//! Holds no waiters itself: they are `crate::blocking`'s, reached through
//! the store. Must not touch sockets: a served reply is queued on the
//! client's signal. Served commands skip `admit` (checked when they blocked).

use bytes::Bytes;

use super::context::{BlockRequest, ConnState, Ctx};
use super::propagate;
use super::table::{lookup, Spec};
use crate::blocking::{TimeoutReply, Wait, WaitId};
use crate::resp::Out;
use crate::server::{ClientId, Store};

/// Registers the wait a blocking command asked for: this connection runs
/// nothing more until it is served, times out or is unblocked.
pub(super) fn block(ctx: &mut Ctx, args: &[Bytes], req: BlockRequest, silent: bool) {
    let db = ctx.conn.db;
    let keys = req
        .keys
        .iter()
        .map(|k| crate::ids::own_key(db, k))
        .collect();
    // Copies: the arguments are slices of the whole read buffer.
    let args = match req.again {
        Some(v) => v.iter().map(|a| Bytes::copy_from_slice(a)).collect(),
        None => args.iter().map(|a| Bytes::copy_from_slice(a)).collect(),
    };
    let wid = ctx.store.ks.blocking.add(
        ctx.conn.id,
        keys,
        Wait::Command {
            args,
            db,
            deadline: req.deadline,
            on_timeout: req.on_timeout,
            silent,
            when_gone: req.when_gone,
        },
    );
    ctx.conn.blocked = Some((wid, req.deadline));
}

/// Drains the keyspace hook and serves every waiter whose key became ready,
/// each key's line in arrival order, until nothing more is ready (serving
/// one waiter can make another key ready: BLMOVE onto a list someone else
/// blocks on). Runs after each top-level command, expiry cycle and
/// disconnect.
///
/// Not re-entrant: a command run to serve a waiter may itself call
/// `settle` (a write settling queued keys); that inner call only drains
/// the hook, and this loop serves what became ready, so no waiter is served
/// twice.
pub fn settle(store: &mut Store, by: Option<ClientId>) {
    if !store.ks.begin_settling() {
        store.drain_events(by);
        return;
    }
    store.ks.gate_grants = store.config().tp_min_acks > 0 && !store.repl.has_master();
    settle_loop(store, by);
    store.ks.end_settling();
    if store.ks.has_pending_grants() {
        serve_grants(store);
    }
}

/// Hand-overs held back for `tp-min-acks` (`Keyspace::gate_grants`):
/// each is given the offset that follows its lock record once that is in
/// the stream, is told (`ACQUIRED`) once enough Latchkey replicas
/// acknowledged it, and at `tp-min-acks-timeout` is undone with its
/// waiter put back at the head of its line (it keeps its place; the line
/// is served again). A hand-over lost meanwhile (its client gone, its key
/// deleted) is dropped. Returns how many still wait.
pub fn serve_grants(store: &mut Store) -> usize {
    if !store.ks.has_pending_grants() {
        return 0;
    }
    let (n, wait_ms) = {
        let c = store.config();
        (c.tp_min_acks, c.tp_min_acks_timeout as i64)
    };
    let gate = n > 0 && !store.repl.has_master();
    let mut grants = store.ks.take_pending_grants();
    if gate && grants.iter().any(|g| g.offset.is_none()) {
        crate::persist::aof_write_out(&mut store.ks, &mut store.persist);
        let off = store.repl.lock_marker();
        for g in grants.iter_mut().filter(|g| g.offset.is_none()) {
            g.offset = Some(off);
        }
        store.repl.request_acks();
    }
    let now = crate::util::now_ms();
    let mut left = Vec::new();
    let mut undone = false;
    for g in grants.drain(..) {
        if !store.ks.holds_token(g.client, g.token) {
            continue;
        }
        let acked = g
            .offset
            .is_some_and(|o| store.repl.count_lock_acks(o) as u64 >= n);
        if !gate || acked {
            store.tell_grant(g.client, &g.frame);
        } else if now - g.since >= wait_ms {
            store.undo_grant(g.client, g.token);
            store.ks.queue_lock(g.client, g.key, g.wait, true);
            undone = true;
        } else {
            left.push(g);
        }
    }
    let waiting = left.len();
    store.ks.keep_pending_grants(left);
    if undone {
        // Its line is served again (its head is the waiter put back).
        settle(store, None);
    }
    waiting
}

fn settle_loop(store: &mut Store, by: Option<ClientId>) {
    loop {
        store.drain_events(by);
        if !store.ks.blocking.has_ready() {
            return;
        }
        for dk in store.ks.blocking.take_ready() {
            for wid in store.ks.blocking.line(&dk) {
                let Some(w) = store.ks.blocking.get(wid) else {
                    continue;
                };
                match w.wait {
                    Wait::Lock { .. } => {
                        if store.hand_over_lock(wid) {
                            break;
                        }
                    }
                    Wait::Command { .. } => serve_command(store, wid, &dk.1, by),
                }
            }
        }
    }
}

/// Runs blocked command `wid` again as its client. If it is served (it
/// wrote a reply instead of asking to block), its reply is queued to the
/// client, which is woken, and the waiter leaves every line. `by` is as
/// for `settle`.
fn serve_command(store: &mut Store, wid: WaitId, ready: &Bytes, by: Option<ClientId>) {
    let Some(w) = store.ks.blocking.get(wid) else {
        return;
    };
    let Wait::Command {
        args,
        db,
        silent,
        when_gone,
        ..
    } = &w.wait
    else {
        return;
    };
    let (client, args, db, silent, when_gone) = (w.client, args.clone(), *db, *silent, *when_gone);
    // A blocked command waits for data at its key: while the key is gone
    // there is nothing to serve (this keeps a write to a key with many
    // waiters from re-running every one of them), unless it answers that.
    if !when_gone && !store.ks.db_mut(db).exists(ready) {
        return;
    }
    let Some((resp3, signal)) = store
        .clients
        .get(&client)
        .filter(|c| !c.signal.is_killed())
        .map(|c| (c.resp == 3, c.signal.clone()))
    else {
        store.ks.blocking.remove(wid);
        return;
    };
    let Some(spec) = lookup(&args[0]) else {
        store.ks.blocking.remove(wid);
        return;
    };
    let mut conn = ConnState::new(client, true);
    conn.db = db;
    conn.serving = Some(ready.clone());
    conn.signal = signal.clone();
    let mut out = Out::new(resp3);
    let mut ctx = Ctx {
        store,
        conn: &mut conn,
        out: &mut out,
    };
    // The handler alone, not `call`: the command was counted (and shown to
    // MONITOR) when it first ran, as Redis counts a blocked command once.
    // The changes it makes are drained by `settle`'s loop (or below, first,
    // when its record is kept).
    let before = ctx.store.ks.db_mut(db).events.len();
    (spec.run)(&mut ctx, &args);
    if ctx.store.ks.effects.on() && ctx.store.ks.db_mut(db).events.len() > before {
        // As a command's, its records follow those the hook makes for
        // its changes (the DEL of a key it expired lazily).
        ctx.store.drain_events(by);
        match ctx.conn.rewrite.take() {
            Some(v) => ctx.store.ks.effects.commands(v),
            None => {
                let logged = propagate::served(&args, ready);
                ctx.store.ks.effects.command(db, logged);
            }
        }
    } else if let Some(v) = ctx.conn.rewrite.take() {
        // Changes the hook does not see as key events (a group's
        // pending list) are still logged.
        if ctx.store.ks.effects.on() {
            ctx.store.ks.effects.commands(v);
        }
    }
    if conn.block.is_some() {
        return;
    }
    store.ks.blocking.remove(wid);
    if !silent {
        signal.queue(&out.buf);
    }
    signal.wake.notify_one();
}

/// Asks the dispatcher to block this command on `keys`, or (run by
/// MULTI/EXEC or a script, where nothing may block: later issues) replies
/// the timeout reply at once.
pub fn block_on(ctx: &mut Ctx, keys: &[Bytes], deadline: Option<i64>, on_timeout: TimeoutReply) {
    ctx.conn.block = Some(BlockRequest {
        keys: keys.to_vec(),
        deadline,
        on_timeout,
        again: None,
        when_gone: false,
    });
}

/// `block_on`, running `again` instead of the command when served (and
/// when a key is deleted, with `when_gone`).
pub fn block_on_with(
    ctx: &mut Ctx,
    keys: &[Bytes],
    deadline: Option<i64>,
    on_timeout: TimeoutReply,
    again: Vec<Bytes>,
    when_gone: bool,
) {
    ctx.conn.block = Some(BlockRequest {
        keys: keys.to_vec(),
        deadline,
        on_timeout,
        again: Some(again),
        when_gone,
    });
}

/// Whether a blocking command may take from `key` now: any of its keys
/// when it first runs; only the key that became ready when it runs again
/// to serve a waiter (as Redis serves a waiter from the ready key).
pub fn may_take(ctx: &Ctx, key: &Bytes) -> bool {
    ctx.conn.serving.as_ref().is_none_or(|k| k == key)
}

/// The reply of a blocked command whose wait ended without data (WAITAOF:
/// the acknowledgements it has).
pub fn timeout_reply(store: &mut Store, client: ClientId, out: &mut Out, r: TimeoutReply) {
    match r {
        TimeoutReply::NullArray => out.null_array(),
        TimeoutReply::NullBulk => out.null(),
        TimeoutReply::Acks { offset, .. } => {
            out.array(2);
            out.int(super::wait::local_acks(store, offset));
            // Redis 7.0 replicas acknowledge no AOF fsync (no FACK).
            out.int(0);
        }
        TimeoutReply::ReplAcks { offset, .. } => {
            out.int(store.repl.count_acks(offset) as i64);
        }
        TimeoutReply::LockAcks { token, reply, .. } => {
            if super::wait::acks_reached(store, r) {
                // Told only if it still holds it (a hold taken away while
                // it waited was never its to be told of).
                out.int(if store.ks.holds_token(client, token) {
                    reply
                } else {
                    0
                });
            } else {
                store.undo_grant(client, token);
                out.error(super::locks::NOREPLICAS_LOCK);
            }
        }
        TimeoutReply::Shutdown => out.error(super::server::SHUTDOWN_FAILED),
    }
}

/// Answers the WAITAOF waits whose acknowledgements are now enough (after
/// an fsync), and those the AOF was turned off under (an error, as Redis).
/// Returns how many still wait.
pub fn serve_acks(store: &mut Store) -> usize {
    let mut left = serve_grants(store);
    for wid in store.ks.blocking.keyless() {
        let Some(w) = store.ks.blocking.get(wid) else {
            continue;
        };
        let Wait::Command {
            on_timeout, silent, ..
        } = w.wait
        else {
            continue;
        };
        let client = w.client;
        let error = super::wait::aof_gone(store, on_timeout);
        if error.is_none() && !super::wait::acks_reached(store, on_timeout) {
            left += 1;
            continue;
        }
        store.ks.blocking.remove(wid);
        let Some(resp) = store.clients.get(&client).map(|c| c.resp) else {
            continue;
        };
        let mut out = Out::new(resp == 3);
        match error {
            Some(e) => out.error(e),
            None => timeout_reply(store, client, &mut out, on_timeout),
        }
        let Some(c) = store.clients.get(&client) else {
            continue;
        };
        if !silent {
            c.signal.queue(&out.buf);
        }
        c.signal.wake.notify_one();
    }
    left
}

/// A write about to touch a queued key whose TTL has passed (not yet
/// expired by the active cycle) would expire it lazily and could re-create
/// it before the queue's hand-over runs: expire and hand over first, so
/// nobody cuts in front of the line (SETTP does the same for itself).
pub(super) fn settle_queued_keys(ctx: &mut Ctx, spec: &Spec, args: &[Bytes]) {
    if spec.first_key <= 0 || spec.step <= 0 {
        return;
    }
    let n = args.len() as i32;
    let last = if spec.last_key < 0 {
        n + spec.last_key
    } else {
        spec.last_key
    };
    for i in (spec.first_key..=last.min(n - 1)).step_by(spec.step as usize) {
        settle_queued_key(ctx, &args[i as usize]);
    }
}

/// `settle_queued_keys` for one key a command is about to write that its
/// spec's key positions do not name (SORT's STORE destination).
pub fn settle_queued_key(ctx: &mut Ctx, key: &Bytes) {
    let db = ctx.conn.db;
    if ctx.store.ks.blocking.has(&(db, key.clone())) && !ctx.db().exists(key) {
        settle(ctx.store, Some(ctx.conn.id));
    }
}
