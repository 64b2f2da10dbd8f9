//! Persistence, all of it: the RDB format (`rdb`), the append-only file's
//! files (`aof`), the background job that writes either without fork
//! (`snapshot`), and the glue that joins them to a server: SAVE, BGSAVE,
//! the save rules, loads (`save`), logging and replaying the AOF
//! (`append`), and the persistence state a server keeps (`State`).
//!
//! What is saved: every key of every database, expired-but-not-yet-deleted
//! ones included (a load drops them), except keys bound to a connection by
//! SETTP, whose connection cannot outlive the process; the function
//! libraries; the last fencing token given. SETTP lines and watches are
//! connection state, never saved.
//!
//! Owns: `State` (the running job, the AOF, the save status) and every
//! file the server writes or reads for its data. Must not touch: the
//! server's `Store`, scripting or the dispatcher. It works on a `Host`
//! (the store, `server::host`): the keyspace, the config and its own
//! state as disjoint borrows (`Parts`), the function libraries as
//! source codes going out and coming back, and the keyspace hook run
//! after a load; AOF replay is a command runner the caller passes.
//! (`db::snapshot` stays with the databases: it is their private walk,
//! which `snapshot` drives.)

pub mod aof;
mod append;
pub mod rdb;
mod save;
pub mod snapshot;

use std::sync::Arc;

use bytes::Bytes;

use crate::config::Config;
use crate::keyspace::Keyspace;

pub use append::{
    aof_dir, aof_reconfigure, aof_stop, aof_write_out, bgrewriteaof, load_aof_at_start, Replay,
};
pub use save::{
    bgsave, bgsave_abort, bgsave_step, filtered_image, limits, load_at_start, load_bytes, rdb_path,
    read_snapshot, save, start_sync_job, SyncTarget, BGSAVE_SLICE,
};

/// What persistence works on, lent by the server that holds it.
pub trait Host {
    /// The parts, borrowed apart.
    fn parts(&mut self) -> Parts<'_>;
    /// Replaces the function libraries with a load's `codes`.
    fn restore_functions(&mut self, codes: Vec<Bytes>) -> Result<(), String>;
    /// Passes what a load or a replayed command changed through the
    /// keyspace hook (events, watches, tracking).
    fn settle(&mut self);
}

/// A `Host`'s parts: the keyspace, the config, persistence's own state
/// and the function libraries (saved with the data).
pub struct Parts<'a> {
    pub ks: &'a mut Keyspace,
    pub config: &'a Config,
    pub state: &'a mut State,
    pub libraries: &'a dyn Libraries,
    /// The replication history the data is at, saved with it (asked
    /// only when an image is made).
    pub repl: &'a dyn ReplSource,
}

/// Where the data is in the replication stream, when it is in one.
pub use save::{LOCKS_AUX, LOCK_SEQ_AUX};

pub trait ReplSource {
    fn save_info(&self) -> Option<ReplInfo>;
    /// AUX fields with the lock state of `ks` (replication's encoding).
    fn lock_aux(&self, _ks: &Keyspace) -> Vec<(&'static str, Vec<u8>)> {
        Vec::new()
    }
}

/// The replication ID and offset the data is at, and the database the
/// stream last selected: the RDB's `repl-id`, `repl-offset` and
/// `repl-stream-db` AUX fields (Redis's rdbSaveInfo), so a replica
/// restarted from its RDB can continue partially.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplInfo {
    pub replid: String,
    pub offset: i64,
    pub stream_db: i64,
}

/// The function libraries as a file holds them.
pub trait Libraries {
    /// Each library's source code, in the order they load.
    fn codes(&self) -> Vec<&[u8]>;
}

/// The persistence state a server keeps: the background job, the AOF
/// while it is on, and the status INFO persistence shows.
pub struct State {
    saving: snapshot::SaveState,
    aof: Option<aof::Aof>,
    /// What connections wait on for `appendfsync always` (and the fsync
    /// thread serves), outside the store lock.
    aof_sync: Arc<aof::Sync>,
    /// LASTSAVE (unix seconds).
    lastsave: i64,
    /// `ks.dirty()` at the last save or load (INFO's
    /// rdb_changes_since_last_save counts from it).
    dirty_at_save: u64,
    /// The replication history the last loaded RDB named.
    loaded_repl: Option<ReplInfo>,
    /// The lock state the last loaded RDB carried: its last record's
    /// number and its frames (`save::LOCK_SEQ_AUX`, `save::LOCKS_AUX`).
    loaded_locks: Option<(u64, Vec<u8>)>,
}

impl State {
    pub fn new(now_secs: i64) -> State {
        State {
            saving: Default::default(),
            aof: None,
            aof_sync: Default::default(),
            lastsave: now_secs,
            dirty_at_save: 0,
            loaded_repl: None,
            loaded_locks: None,
        }
    }

    /// The lock state the last loaded RDB carried (a Latchkey master's
    /// full sync), taken once.
    pub fn take_loaded_locks(&mut self) -> Option<(u64, Vec<u8>)> {
        self.loaded_locks.take()
    }

    /// The replication history the last loaded RDB named (its `repl-id`,
    /// `repl-offset` and `repl-stream-db`, all valid), taken once.
    pub fn take_loaded_repl(&mut self) -> Option<ReplInfo> {
        self.loaded_repl.take()
    }

    /// The save status (INFO persistence) and the running job.
    pub fn status(&self) -> &snapshot::SaveState {
        &self.saving
    }

    /// The AOF, while it is on.
    pub fn aof(&self) -> Option<&aof::Aof> {
        self.aof.as_ref()
    }

    /// The handle connections wait on for `appendfsync always`.
    pub fn aof_sync(&self) -> &Arc<aof::Sync> {
        &self.aof_sync
    }

    /// LASTSAVE.
    pub fn lastsave(&self) -> i64 {
        self.lastsave
    }

    /// Changes since the last save or load, of `dirty` changes in all.
    pub fn changes_since_save(&self, dirty: u64) -> u64 {
        dirty.saturating_sub(self.dirty_at_save)
    }

    /// Whether a background job (a save or an AOF rewrite) is running.
    pub fn job_running(&self) -> bool {
        self.saving.job.is_some()
    }

    /// Whether a background RDB save (not an AOF rewrite) is running.
    pub fn rdb_job_running(&self) -> bool {
        self.saving.job.is_some() && self.saving.rewrite.is_none()
    }

    /// Whether a background AOF rewrite is running.
    pub fn rewrite_running(&self) -> bool {
        self.saving.rewrite.is_some()
    }

    /// What wakes the save task when a job starts.
    pub fn wake(&self) -> Arc<tokio::sync::Notify> {
        self.saving.wake.clone()
    }

    /// Whether writes are refused because the last background save failed
    /// (`stop-writes-on-bgsave-error`, with save rules set) or the AOF
    /// cannot be written, as Redis's writeCommandsDeniedByDiskError.
    pub fn write_denial(&self, c: &Config) -> Option<String> {
        if c.stop_writes_on_bgsave_error && !c.save.is_empty() && !self.saving.last_bgsave_ok {
            return Some(MISCONF_RDB.to_string());
        }
        match (&self.aof, &self.saving.aof_write_error) {
            (Some(_), Some(e)) => Some(format!("MISCONF Errors writing to the AOF file: {e}")),
            _ => None,
        }
    }
}

const MISCONF_RDB: &str = "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). Please check the Redis logs for details about the RDB error.";

/// The save rules (serverCron): a background save starts when one of
/// `save <seconds> <changes>` holds, or a scheduled one can start. After
/// a failed save, not before 5 s passed (CONFIG_BGSAVE_RETRY_DELAY).
pub fn cron(h: &mut impl Host) {
    let mut p = h.parts();
    let st = &mut *p.state;
    if st.saving.job.is_some() {
        return;
    }
    if st.saving.scheduled || st.saving.rewrite_scheduled {
        save::start_scheduled(&mut p);
        return;
    }
    // The AOF grew enough since its last rewrite (Redis's
    // auto-aof-rewrite-percentage / -min-size).
    if let Some(aof) = &st.aof {
        let c = p.config;
        let (perc, min) = (c.auto_aof_rewrite_percentage, c.auto_aof_rewrite_min_size);
        let (size, base) = (aof.total(), aof.base_total.max(1));
        let growth = (size.saturating_mul(100) / base) as i64 - 100;
        if perc > 0 && size > min && growth >= perc {
            tracing::info!("Starting automatic rewriting of AOF on {growth}% growth");
            let _ = append::rewrite_start(&mut p);
            return;
        }
    }
    let now = crate::util::now_ms() / 1000;
    let dirty = p.ks.dirty().saturating_sub(st.dirty_at_save) as i64;
    let retry_ok = st.saving.last_bgsave_ok || now - st.saving.last_try > 5;
    let due = p
        .config
        .save
        .iter()
        .find(|(secs, changes)| dirty >= *changes && now - st.lastsave > *secs);
    if let (Some((secs, changes)), true) = (due, retry_ok) {
        tracing::info!("{changes} changes in {secs} seconds. Saving...");
        let _ = save::start_bgsave(&mut p);
    }
}

/// Before the process exits (SHUTDOWN, SIGTERM): a background save is
/// stopped; a snapshot is written when `save` (SHUTDOWN SAVE) or, unless
/// `nosave`, when save rules are set. Err when that write failed (the
/// shutdown is then off, unless forced).
pub fn prepare_shutdown(h: &mut impl Host, save: bool, nosave: bool) -> Result<(), String> {
    let mut p = h.parts();
    if p.state.aof.as_ref().is_some_and(|a| a.is_pending()) && p.config.appendonly {
        // Nothing on disk holds the data yet, as Redis.
        tracing::warn!("Writing initial AOF, can't exit.");
        return Err("Writing initial AOF".into());
    }
    save::abort_job(&mut p);
    aof_write_out(p.ks, p.state);
    if let Some(aof) = p.state.aof.as_mut() {
        tracing::info!("Calling fsync() on the AOF file.");
        if let Err(e) = aof.sync_now() {
            tracing::warn!("Error syncing the AOF before exiting: {e}");
        }
    }
    if save || (!nosave && !p.config.save.is_empty()) {
        tracing::info!("Saving the final RDB snapshot before exiting.");
        if let Err(e) = save::save_now(&mut p) {
            tracing::warn!("Error trying to save the DB, can't exit: {e}");
            return Err(e);
        }
    }
    Ok(())
}
