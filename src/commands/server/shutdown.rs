//! SHUTDOWN and a signal's shutdown, as Redis 7.0's prepareForShutdown,
//! isReadyToShutdown, finishShutdown and abortShutdown: a master whose
//! replicas have not acknowledged its offset asks them (`REPLCONF GETACK
//! *`), pauses writes and waits for them up to `shutdown-timeout`
//! seconds (`shutdown_cron`, run by the runtime ten times a second, as
//! Redis's serverCron), then saves and exits. The SHUTDOWN client waits
//! unanswered (`TimeoutReply::Shutdown`); SHUTDOWN ABORT cancels and
//! gives it `SHUTDOWN_FAILED`.

use crate::config::{SHUTDOWN_FORCE, SHUTDOWN_NOSAVE, SHUTDOWN_NOW, SHUTDOWN_SAVE};
use crate::server::{PausePurpose, ShutdownPending, Store};

/// What a waiting SHUTDOWN is told when the shutdown does not happen.
pub const SHUTDOWN_FAILED: &str = "ERR Errors trying to SHUTDOWN. Check logs.";

/// Where a shutdown is.
#[derive(Debug, PartialEq, Eq)]
pub enum Shutdown {
    /// Done: the server exits (`Store::shutdown_requested` is set).
    Exit,
    /// Waiting for the replicas (or another shutdown already is).
    Waiting,
    /// Saving failed: the server stays up.
    Failed,
}

/// Redis's prepareForShutdown with `flags` (`config::SHUTDOWN_*`).
pub fn prepare_shutdown(store: &mut Store, flags: u32) -> Shutdown {
    if store.shutdown_pending.is_some() {
        return Shutdown::Waiting;
    }
    tracing::warn!("User requested shutdown...");
    let timeout = store.config().repl.shutdown_timeout;
    if flags & SHUTDOWN_NOW == 0 && timeout != 0 && store.paused().is_none() {
        // Lock records move no offset: a PING after the last one makes
        // the replicas' ACKs of our offset say that they applied them.
        crate::persist::aof_write_out(&mut store.ks, &mut store.persist);
        store.repl.lock_marker();
    }
    if flags & SHUTDOWN_NOW == 0 && timeout != 0 && !store.repl.replicas_caught_up() {
        let deadline = crate::util::now_ms().saturating_add(timeout.saturating_mul(1000));
        store.shutdown_pending = Some(ShutdownPending { deadline, flags });
        if store.paused().is_none() {
            // What was written goes out first, then the question.
            crate::persist::aof_write_out(&mut store.ks, &mut store.persist);
            store.repl.request_acks();
        }
        store.pause_for(PausePurpose::Shutdown, i64::MAX, false);
        tracing::info!("Waiting for replicas before shutting down.");
        return Shutdown::Waiting;
    }
    finish(store, flags)
}

/// Redis's finishShutdown: the replicas behind are logged, the AOF
/// synced and the snapshot saved (as the flags and `save` say). A failed
/// save (without FORCE) cancels the shutdown.
fn finish(store: &mut Store, flags: u32) -> Shutdown {
    store.repl.log_lagging();
    let saved = crate::persist::prepare_shutdown(
        store,
        flags & SHUTDOWN_SAVE != 0,
        flags & SHUTDOWN_NOSAVE != 0,
    );
    if saved.is_err() && flags & SHUTDOWN_FORCE == 0 {
        tracing::warn!(
            "Errors trying to shut down the server. Check the logs for more information."
        );
        cancel(store);
        return Shutdown::Failed;
    }
    store.shutdown_pending = None;
    store.shutdown_requested = true;
    Shutdown::Exit
}

/// A waiting shutdown finishes once every replica caught up or its time
/// is up (Redis's serverCron). True when the server must exit now.
pub fn shutdown_cron(store: &mut Store) -> bool {
    let Some(p) = store.shutdown_pending else {
        return false;
    };
    if crate::util::now_ms() < p.deadline && !store.repl.replicas_caught_up() {
        return false;
    }
    finish(store, p.flags) == Shutdown::Exit
}

/// SHUTDOWN ABORT (Redis's abortShutdown): false when none waits.
pub fn abort_shutdown(store: &mut Store) -> bool {
    if store.shutdown_pending.is_none() {
        return false;
    }
    cancel(store);
    tracing::info!("Shutdown manually aborted.");
    true
}

/// Redis's cancelShutdown: writes resume and each waiting SHUTDOWN gets
/// `SHUTDOWN_FAILED`.
fn cancel(store: &mut Store) {
    store.shutdown_pending = None;
    for wid in store.ks.blocking.keyless() {
        let Some(w) = store.ks.blocking.get(wid) else {
            continue;
        };
        let crate::blocking::Wait::Command {
            on_timeout: crate::blocking::TimeoutReply::Shutdown,
            ..
        } = w.wait
        else {
            continue;
        };
        let client = w.client;
        store.ks.blocking.remove(wid);
        if let Some(c) = store.clients.get(&client) {
            let mut out = crate::resp::Out::new(c.resp == 3);
            out.error(SHUTDOWN_FAILED);
            c.signal.queue(&out.buf);
            c.signal.wake.notify_one();
        }
    }
    store.unpause_for(PausePurpose::Shutdown);
}

/// INFO server's shutdown_in_milliseconds while a shutdown waits.
pub fn shutdown_in_ms(store: &Store) -> Option<i64> {
    store
        .shutdown_pending
        .map(|p| (p.deadline - crate::util::now_ms()).max(0))
}
