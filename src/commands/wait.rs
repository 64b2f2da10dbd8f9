//! WAITAOF (Redis 7.2, https://redis.io/docs/latest/commands/waitaof/):
//! blocks the caller until the append-only file holds every write it made
//! on disk (`numlocal` 1) and `numreplicas` replicas acknowledged them.
//! Redis 7.0 replicas acknowledge no AOF fsync (they send no FACK): the
//! second count is 0, and a wait for replicas ends at its timeout. WAIT
//! (`super::replication`) shares its timeout parsing and its kind of wait.
//!
//! The wait is the one blocking registry's, waiting for no key
//! (`TimeoutReply::Acks`): timeouts, CLIENT UNBLOCK and a client that goes
//! away are handled as for BLPOP, and `waiters::serve_acks` answers it when
//! an fsync covers its offset (the runtime looks after each fsync while
//! someone waits).

use bytes::Bytes;

use super::*;
use crate::blocking::TimeoutReply;

pub static COMMANDS: &[Spec] = &[spec(
    "waitaof",
    4,
    BLOCKING,
    (0, 0, 0),
    "generic",
    "7.2.0",
    "Blocks until all of the preceding write commands sent by the connection are written to the append-only file of the master and/or replicas.",
    &["slow", "blocking", "connection"],
    waitaof,
)];

const AOF_OFF: &str = "ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.";

/// WAITAOF numlocal numreplicas timeout, parsed as Redis 7.2 parses it
/// (getRangeLongFromObjectOrReply 0..1, getPositiveLongFromObjectOrReply,
/// getTimeoutFromObjectOrReply in milliseconds).
fn waitaof(ctx: &mut Ctx, args: &[Bytes]) {
    let numlocal = match crate::util::parse_i64(&args[1]) {
        None => return ctx.error(NOT_INT),
        Some(n) if !(0..=1).contains(&n) => {
            return ctx.error("ERR value is out of range, value must between 0 and 1")
        }
        Some(n) => n as u64,
    };
    let numreplicas = match crate::util::parse_i64(&args[2]) {
        None => return ctx.error(NOT_INT),
        Some(n) if n < 0 => return ctx.error("ERR value is out of range, must be positive"),
        Some(n) => n as u64,
    };
    let deadline = match deadline_ms(&args[3]) {
        Ok(d) => d,
        Err(e) => return ctx.error(e),
    };
    if numlocal > 0 && !ctx.store.config().appendonly {
        return ctx.error(AOF_OFF);
    }
    // The caller's writes of this batch go to the file first: its offset
    // is the log's end after them.
    let sync = ctx.store.persist.aof_sync().clone();
    let before = sync.queued();
    crate::persist::aof_write_out(&mut ctx.store.ks, &mut ctx.store.persist);
    if sync.queued() != before {
        ctx.conn.woff = sync.queued();
    }
    let wait = TimeoutReply::Acks {
        offset: ctx.conn.woff,
        numlocal,
        numreplicas,
    };
    if acks_reached(ctx.store, wait) {
        return super::timeout_reply(ctx.store, ctx.conn.id, ctx.out, wait);
    }
    sync.want_acks(true);
    super::block_on(ctx, &[], deadline, wait);
}

/// A timeout in milliseconds, as Redis's getTimeoutFromObjectOrReply:
/// its deadline (unix ms; None for 0, no timeout), or the error.
pub(super) fn deadline_ms(arg: &[u8]) -> Result<Option<i64>, &'static str> {
    match crate::util::parse_i64(arg) {
        None => Err("ERR timeout is not an integer or out of range"),
        Some(t) if t < 0 => Err("ERR timeout is negative"),
        Some(0) => Ok(None),
        Some(t) => t
            .checked_add(crate::util::now_ms())
            .map(Some)
            .ok_or("ERR timeout is out of range"),
    }
}

/// Local acknowledgements of `offset` (0 or 1): the AOF is on and an fsync
/// covered it (Redis's fsynced_reploff >= woff).
pub(super) fn local_acks(store: &Store, offset: u64) -> i64 {
    (store.config().appendonly && store.persist.aof_sync().fsynced() >= offset) as i64
}

/// Whether a WAITAOF wait has what it asked for.
pub(super) fn acks_reached(store: &Store, wait: TimeoutReply) -> bool {
    match wait {
        TimeoutReply::Acks {
            offset,
            numlocal,
            numreplicas,
        } => local_acks(store, offset) as u64 >= numlocal && numreplicas == 0,
        TimeoutReply::ReplAcks {
            offset,
            numreplicas,
        } => store.repl.count_acks(offset) as u64 >= numreplicas,
        TimeoutReply::LockAcks {
            offset,
            numreplicas,
            ..
        } => store.repl.count_lock_acks(offset) as u64 >= numreplicas,
        _ => false,
    }
}

/// A WAITAOF that asked for the local fsync finds the AOF turned off:
/// Redis answers it this error.
pub(super) fn aof_gone(store: &Store, wait: TimeoutReply) -> Option<&'static str> {
    match wait {
        TimeoutReply::Acks { numlocal, .. } if numlocal > 0 && !store.config().appendonly => {
            Some(AOF_OFF)
        }
        _ => None,
    }
}
