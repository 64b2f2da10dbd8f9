//! Snapshots on disk in Redis's RDB format: SAVE, DEBUG RELOAD and the
//! load at start-up. The format itself is `crate::rdb`; this module joins
//! it to the store, the config and the file system.
//!
//! What is saved: every key of every database, expired-but-not-yet-deleted
//! ones included (a load drops them), except keys bound to a connection by
//! SETTP, whose connection cannot outlive the process; and the function
//! libraries. SETTP lines and watches are connection state, never saved.

use std::io::Write;
use std::path::PathBuf;

use bytes::Bytes;

use crate::db::Owned;
use crate::rdb::file::{self, LoadError, SaveOptions};
use crate::rdb::value::Limits;
use crate::server::Store;

/// `dir`/`dbfilename`.
pub fn rdb_path(store: &Store) -> PathBuf {
    let c = store.config();
    PathBuf::from(&c.dir).join(&c.dbfilename)
}

/// The encoding limits loaded values are built under.
pub fn limits(store: &Store) -> Limits {
    let c = store.config();
    Limits {
        hash: crate::types::hash::Limits {
            max_entries: c.hash_max_listpack_entries,
            max_value: c.hash_max_listpack_value,
        },
        zset: crate::types::zset::Limits {
            max_entries: c.zset_max_listpack_entries,
            max_value: c.zset_max_listpack_value,
        },
        list_fill: c.list_max_listpack_size,
        set_max_intset: c.set_max_intset_entries,
    }
}

/// The whole dataset as an RDB file's bytes.
pub fn snapshot(store: &Store) -> Vec<u8> {
    let codes = store.scripting.functions.codes();
    let opts = save_options(store, codes, false);
    file::save(store.ks.dbs().iter(), &opts)
}

/// The AUX field with the last fencing token given.
const FENCE_AUX: &str = "lk-fence-token";

/// What an RDB file's header says; `aof_base` marks it as an AOF's base.
fn save_options<'a>(store: &Store, functions: Vec<&'a [u8]>, aof_base: bool) -> SaveOptions<'a> {
    let c = store.config();
    let now = crate::util::now_ms();
    SaveOptions {
        compress: c.rdbcompression,
        checksum: c.rdbchecksum,
        list_fill: c.list_max_listpack_size,
        aux: vec![
            ("redis-ver", crate::version::REDIS_VERSION.to_string()),
            ("redis-bits", "64".to_string()),
            ("ctime", (now / 1000).to_string()),
            ("used-mem", crate::server::used_memory().to_string()),
            ("aof-base", if aof_base { "1" } else { "0" }.to_string()),
            // Fencing tokens go on above it after a restart (an AUX field
            // Redis ignores).
            (FENCE_AUX, store.ks.bindings().last_token().to_string()),
        ],
        functions,
    }
}

/// SAVE: writes the snapshot to a temporary file in `dir`, syncs it and
/// renames it over `dbfilename` (so a crash leaves the old file or the new
/// one, never half of one); then LASTSAVE and the change counter move.
pub fn save(store: &mut Store) -> Result<(), String> {
    if rdb_job_running(store) {
        return Err("Background save already in progress".into());
    }
    let bytes = snapshot(store);
    let path = rdb_path(store);
    let tmp = PathBuf::from(&store.config().dir).join(format!("temp-{}.rdb", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        // The rename itself is durable once the directory is synced.
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_file(&tmp);
        tracing::warn!("Failed saving the DB: {e}");
        return Err(e.to_string());
    }
    store.lastsave = crate::util::now_ms() / 1000;
    store.dirty_at_save = store.ks.dirty();
    store.saving.saves += 1;
    tracing::info!("DB saved on disk");
    Ok(())
}

/// Keys a background save slice walks.
pub const BGSAVE_SLICE: usize = 2000;

/// Whether a background RDB save (not an AOF rewrite) is running.
pub fn rdb_job_running(store: &Store) -> bool {
    store.saving.job.is_some() && store.saving.rewrite.is_none()
}

/// Whether a background AOF rewrite is running.
pub fn rewrite_running(store: &Store) -> bool {
    store.saving.rewrite.is_some()
}

/// A background job writing the databases as they are now to `path`:
/// an RDB file, or with `aof_base` an AOF base in the format
/// `aof-use-rdb-preamble` asks for.
fn start_job(
    store: &mut Store,
    path: PathBuf,
    aof_base: bool,
) -> std::io::Result<crate::snapshot::Job> {
    use crate::snapshot::Format;
    let (compress, fill, checksum, preamble) = {
        let c = store.config();
        let preamble = c.aof_use_rdb_preamble || !aof_base;
        (
            c.rdbcompression,
            c.list_max_listpack_size,
            c.rdbchecksum,
            preamble,
        )
    };
    let (format, header, encode): (_, _, crate::db::snapshot::Encoder) = if preamble {
        let codes = store.scripting.functions.codes();
        let opts = save_options(store, codes, aof_base);
        let mut header = Vec::with_capacity(1 << 16);
        file::write_header(&mut header, &opts);
        let encode = std::sync::Arc::new(
            move |out: &mut Vec<u8>, key: &[u8], v: crate::db::ValueRef<'_>, expire| {
                file::write_key(out, key, v, expire, compress, fill)
            },
        );
        (Format::Rdb { checksum }, header, encode)
    } else {
        let mut header = Vec::new();
        crate::aof::write_fence(&mut header, store.ks.bindings().last_token());
        for code in store.scripting.functions.codes() {
            crate::aof::write_function(&mut header, code);
        }
        (
            Format::Aof,
            header,
            std::sync::Arc::new(crate::aof::write_key),
        )
    };
    let dirty = store.ks.dirty();
    crate::snapshot::Job::start(store.ks.dbs_mut(), format, header, encode, path, dirty)
}

/// BGREWRITEAOF with the AOF on: logging moves to a new incremental file
/// at once, and the new base is written in the background by the same
/// walk as BGSAVE; when it is done the manifest switches to it.
pub fn rewrite_start(store: &mut Store) -> Result<(), String> {
    if store.saving.job.is_some() {
        return Err("a background job is running".into());
    }
    let rdb = store.config().aof_use_rdb_preamble;
    if store.aof.is_none() {
        // The AOF is being turned on (or BGREWRITEAOF with it off):
        // logging starts now into a file of its own, which the new
        // manifest names with the base when the base is written.
        let dir = aof_dir(store);
        let name = store.config().appendfilename.clone();
        let previous = crate::aof::Aof::read_manifest(&dir, &name).unwrap_or(None);
        let aof = crate::aof::Aof::open_pending(&dir, &name, previous, store.aof_sync.clone())?;
        aof.set_policy(store.config().appendfsync);
        set_aof(store, Some(aof));
        store.saving.aof_write_error = None;
    }
    // What was logged before goes to the file it was logged in.
    aof_write_out(store);
    let aof = store.aof.as_mut().expect("an AOF");
    let base = aof.begin_rewrite(rdb)?;
    let path = aof.dir().join(&base.name);
    match start_job(store, path, true) {
        Ok(job) => {
            store.saving.job = Some(job);
            store.saving.rewrite = Some(base);
            store.saving.wake.notify_one();
            tracing::info!("Background append only file rewriting started");
            Ok(())
        }
        Err(e) => {
            store.saving.last_rewrite_ok = false;
            drop_pending(store);
            Err(format!("Can't rewrite append only file in background: {e}"))
        }
    }
}

/// A first rewrite that did not complete: its AOF is dropped (its file
/// was never named by a manifest); with `appendonly yes` a new try is
/// scheduled, not before 5 s (Redis retries until the AOF is on).
fn drop_pending(store: &mut Store) {
    if !store.aof.as_ref().is_some_and(|a| a.is_pending()) {
        return;
    }
    set_aof(store, None);
    store.saving.aof_write_error = None;
    if store.config().appendonly {
        store.saving.rewrite_scheduled = true;
        store.saving.rewrite_not_before = crate::util::now_ms() + 5000;
    }
}

/// BGSAVE: starts writing the databases as they are now, in the
/// background (`crate::snapshot`). Err when one is already running.
pub fn bgsave_start(store: &mut Store) -> Result<(), String> {
    if store.saving.job.is_some() {
        return Err("Background save already in progress".into());
    }
    let path = rdb_path(store);
    store.saving.last_try = crate::util::now_ms() / 1000;
    match start_job(store, path, false) {
        Ok(job) => {
            store.saving.job = Some(job);
            store.saving.wake.notify_one();
            tracing::info!("Background saving started");
            Ok(())
        }
        Err(e) => {
            store.saving.last_bgsave_ok = false;
            tracing::warn!("Can't save in background: {e}");
            Err(format!("Can't save in background: {e}"))
        }
    }
}

/// One slice of the background save; false when none is running (any
/// more). The end of a save is recorded here: LASTSAVE, the change
/// counter, the status; a scheduled save then starts.
pub fn bgsave_step(store: &mut Store, budget: usize) -> crate::snapshot::Step {
    use crate::snapshot::Step;
    let Some(job) = store.saving.job.as_mut() else {
        return Step::Done(Ok(()));
    };
    let step = job.step(store.ks.dbs_mut(), budget);
    if let Step::Done(r) = &step {
        let job = store.saving.job.take().expect("a job");
        if let Some(base) = store.saving.rewrite.take() {
            let finished = r.clone().and_then(|()| match store.aof.as_mut() {
                Some(aof) => aof.finish_rewrite(base),
                None => Err("the AOF was turned off".into()),
            });
            match finished {
                Ok(()) => {
                    store.saving.last_rewrite_ok = true;
                    store.saving.aof_rewrites += 1;
                    tracing::info!("Background AOF rewrite terminated with success");
                    if !store.config().appendonly {
                        // BGREWRITEAOF with the AOF off: the files are
                        // written, logging stops.
                        aof_stop(store);
                    }
                }
                Err(e) => {
                    store.saving.last_rewrite_ok = false;
                    tracing::warn!("Background AOF rewrite error: {e}");
                    drop_pending(store);
                }
            }
            start_scheduled(store);
            return step;
        }
        store.saving.last_bgsave_secs = job.started.elapsed().as_secs() as i64;
        match r {
            Ok(()) => {
                store.lastsave = crate::util::now_ms() / 1000;
                store.dirty_at_save = job.dirty_at_start;
                store.saving.last_bgsave_ok = true;
                store.saving.saves += 1;
                tracing::info!("Background saving terminated with success");
            }
            Err(e) => {
                store.saving.last_bgsave_ok = false;
                tracing::warn!("Background saving error: {e}");
            }
        }
        start_scheduled(store);
    }
    step
}

/// After a job: the rewrite or the save asked for while it ran.
fn start_scheduled(store: &mut Store) {
    let rewrite_due = store.saving.rewrite_not_before <= crate::util::now_ms();
    if store.saving.rewrite_scheduled && rewrite_due {
        store.saving.rewrite_scheduled = false;
        let _ = rewrite_start(store);
    } else if std::mem::take(&mut store.saving.scheduled) {
        let _ = bgsave_start(store);
    }
}

/// Stops a background save (FLUSHALL, DEBUG RELOAD, SHUTDOWN), as Redis
/// kills its child: no error status, the temporary file removed.
pub fn bgsave_abort(store: &mut Store) {
    if let Some(mut job) = store.saving.job.take() {
        job.abort(store.ks.dbs_mut());
        // An aborted rewrite leaves the manifest listing the old files
        // and the new incremental one: complete as it is. A first one
        // starts again.
        if store.saving.rewrite.take().is_some() {
            drop_pending(store);
            store.saving.rewrite_not_before = 0;
        }
        tracing::info!("Background saving aborted");
    }
}

/// The save rules (serverCron): a background save starts when one of
/// `save <seconds> <changes>` holds, or a scheduled one can start. After
/// a failed save, not before 5 s passed (CONFIG_BGSAVE_RETRY_DELAY).
pub fn cron(store: &mut Store) {
    if store.saving.job.is_some() {
        return;
    }
    if store.saving.scheduled || store.saving.rewrite_scheduled {
        start_scheduled(store);
        return;
    }
    // The AOF grew enough since its last rewrite (Redis's
    // auto-aof-rewrite-percentage / -min-size).
    if let Some(aof) = &store.aof {
        let c = store.config();
        let (perc, min) = (c.auto_aof_rewrite_percentage, c.auto_aof_rewrite_min_size);
        let (size, base) = (aof.total(), aof.base_total.max(1));
        let growth = (size.saturating_mul(100) / base) as i64 - 100;
        if perc > 0 && size > min && growth >= perc {
            tracing::info!("Starting automatic rewriting of AOF on {growth}% growth");
            let _ = rewrite_start(store);
            return;
        }
    }
    let now = crate::util::now_ms() / 1000;
    let dirty = store.ks.dirty().saturating_sub(store.dirty_at_save) as i64;
    let retry_ok = store.saving.last_bgsave_ok || now - store.saving.last_try > 5;
    let due = store
        .config()
        .save
        .iter()
        .find(|(secs, changes)| dirty >= *changes && now - store.lastsave > *secs);
    if let (Some((secs, changes)), true) = (due, retry_ok) {
        tracing::info!("{changes} changes in {secs} seconds. Saving...");
        let _ = bgsave_start(store);
    }
}

/// Whether writes are refused because the last background save failed
/// (`stop-writes-on-bgsave-error`, with save rules set), as Redis's
/// writeCommandsDeniedByDiskError.
pub fn write_denial(store: &Store) -> Option<String> {
    let c = store.config();
    if c.stop_writes_on_bgsave_error && !c.save.is_empty() && !store.saving.last_bgsave_ok {
        return Some(MISCONF_RDB.to_string());
    }
    match (&store.aof, &store.saving.aof_write_error) {
        (Some(_), Some(e)) => Some(format!("MISCONF Errors writing to the AOF file: {e}")),
        _ => None,
    }
}

const MISCONF_RDB: &str = "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). Please check the Redis logs for details about the RDB error.";

/// Before the process exits (SHUTDOWN, SIGTERM): a background save is
/// stopped; a snapshot is written when `save` (SHUTDOWN SAVE) or, unless
/// `nosave`, when save rules are set. Err when that write failed (the
/// shutdown is then off, unless forced).
pub fn prepare_shutdown(store: &mut Store, save: bool, nosave: bool) -> Result<(), String> {
    if store.aof.as_ref().is_some_and(|a| a.is_pending()) && store.config().appendonly {
        // Nothing on disk holds the data yet, as Redis.
        tracing::warn!("Writing initial AOF, can't exit.");
        return Err("Writing initial AOF".into());
    }
    bgsave_abort(store);
    aof_write_out(store);
    if let Some(aof) = store.aof.as_mut() {
        if let Err(e) = aof.sync_now() {
            tracing::warn!("Error syncing the AOF before exiting: {e}");
        }
    }
    if save || (!nosave && !store.config().save.is_empty()) {
        tracing::info!("Saving the final RDB snapshot before exiting.");
        if let Err(e) = self::save(store) {
            tracing::warn!("Error trying to save the DB, can't exit: {e}");
            return Err(e);
        }
    }
    Ok(())
}

/// Loads a file's keys and function libraries into the store (emptied
/// first by the caller, or not: then a key already there is an error
/// unless `merge`, where the file's value replaces it). Returns how many
/// keys were loaded.
pub fn load_bytes(store: &mut Store, bytes: &[u8], merge: bool) -> Result<usize, LoadError> {
    load_rdb(store, bytes, merge, true).map(|c| c.keys)
}

/// `load_bytes`; unless `whole`, the RDB data may be followed by other
/// bytes (an AOF base's commands after its RDB preamble).
fn load_rdb(
    store: &mut Store,
    bytes: &[u8],
    merge: bool,
    whole: bool,
) -> Result<file::Counts, LoadError> {
    use file::{Item, Val};
    bgsave_abort(store);
    let lim = limits(store);
    let databases = store.config().databases;
    let mut codes: Vec<Bytes> = Vec::new();
    let mut db = 0usize;
    let mut touched = vec![false; databases];
    let mut fence = 0u64;
    let ks = &mut store.ks;
    // Keys go into the store as they are read: no copy of the dataset.
    let r = file::load_with(bytes, &lim, crate::util::now_ms(), databases, &mut |item| {
        match item {
            Item::Select(n) => db = n,
            Item::Resize(n) => ks.db_mut(db).reserve(n.min(1 << 24) as usize),
            Item::Key { key, value, expire } => {
                touched[db] = true;
                let d = ks.db_mut(db);
                let existed = match value {
                    Val::Str(s) => d.load_insert_str(&key, &s, expire),
                    Val::Obj(v) => d.load_insert(&key, Owned::loaded(v, expire)),
                };
                if existed && !merge {
                    return Err(format!("duplicate key in database {db}"));
                }
            }
            Item::Function(code) => codes.push(Bytes::from(code)),
            Item::Aux(k, v) if k == FENCE_AUX.as_bytes() => {
                fence = crate::util::parse_i64(&v).unwrap_or(0).max(0) as u64;
            }
            Item::Aux(..) => {}
        }
        Ok(())
    });
    store.ks.raise_tokens(fence);
    for (i, t) in touched.iter().enumerate() {
        if *t {
            store.ks.db_mut(i).loaded();
        }
    }
    let counts = if whole { r?.whole(bytes.len())? } else { r? };
    store.saving.load_keys_expired = counts.expired_skipped;
    store.saving.load_keys_loaded = counts.keys;
    let gate = store.scripting.gate.clone();
    store
        .scripting
        .functions
        .restore(codes, crate::scripting::functions::Policy::Flush, &gate)
        .map_err(|e| LoadError {
            offset: 0,
            message: format!("function libraries: {e}"),
        })?;
    Ok(counts)
}

/// The load at start-up: the file at `dir`/`dbfilename` if there is one.
/// A file that cannot be read is an error: the server must not start
/// empty over data it failed to load.
pub fn load_at_start(store: &mut Store) -> Result<(), String> {
    let path = rdb_path(store);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(format!(
                "Fatal error loading the DB {}: {e}",
                path.display()
            ))
        }
    };
    let sw = std::time::Instant::now();
    match load_bytes(store, &bytes, false) {
        Ok(n) => {
            tracing::info!(
                "DB loaded from disk: {n} keys, {:.3} seconds",
                sw.elapsed().as_secs_f64()
            );
            // The loaded keys' events pass the keyspace hook now, not at
            // the first client's command.
            store.drain_events(None);
            store.dirty_at_save = store.ks.dirty();
            Ok(())
        }
        Err(e) => Err(format!(
            "Short read or OOM loading DB. Unrecoverable error, aborting now. {}: {e}",
            path.display()
        )),
    }
}

// ---------------------------------------------------------------------------
// The AOF (`crate::aof` has the files): what the dispatcher logs goes to
// the incremental file; start-up replays the base and the increments.

/// `dir`/`appenddirname`.
pub fn aof_dir(store: &Store) -> PathBuf {
    let c = store.config();
    PathBuf::from(&c.dir).join(&c.appenddirname)
}

/// THE propagation point: the records of the stream of effects
/// (`crate::effects::Stream`) leave here, and only here, in the order the
/// changes were made (`crate::effects::Stream::publish` states the
/// guarantee): Command records into the AOF's buffer, every record to the
/// attached sinks. Then the buffer is written to the file.
///
/// It runs when a connection's batch is done, before its replies go out
/// (`server::conn`); on the cron, every 1/hz s, which takes what active
/// expiry, disconnects and lock hand-overs made between batches; before
/// the AOF changes (on, off, a new file: `set_aof`, a rewrite's start),
/// so each record reaches the file that was logging when it was made;
/// and before shutdown's sync.
///
/// After a failed write the log stays buffered and writes are refused
/// (`write_denial`) until a later try (the next batch, or the cron)
/// works, as Redis's.
pub fn aof_write_out(store: &mut Store) {
    let aof = &mut store.aof;
    store.ks.effects.publish(&mut |db, args| {
        if let Some(aof) = aof.as_mut() {
            aof.feed(db, args);
        }
    });
    let Some(aof) = store.aof.as_mut() else {
        return;
    };
    match aof.write_out() {
        Ok(()) => {
            if store.saving.aof_write_error.take().is_some() {
                tracing::warn!("AOF write error looks solved, Redis can write again.");
            }
        }
        Err(e) => {
            if store.saving.aof_write_error.is_none() {
                tracing::warn!("Error writing to the AOF file: {e}");
            }
            store.saving.aof_write_error = Some(e);
        }
    }
}

/// The data as it is now, as an AOF base file: an RDB file that says so,
/// or commands (`aof-use-rdb-preamble no`). True when it is an RDB file.
fn aof_base(store: &Store) -> (Vec<u8>, bool) {
    let codes = store.scripting.functions.codes();
    if store.config().aof_use_rdb_preamble {
        let opts = save_options(store, codes, true);
        return (file::save(store.ks.dbs().iter(), &opts), true);
    }
    let mut out = Vec::new();
    crate::aof::write_fence(&mut out, store.ks.bindings().last_token());
    for code in codes {
        crate::aof::write_function(&mut out, code);
    }
    for (j, db) in store.ks.dbs().iter().enumerate() {
        if db.is_empty() {
            continue;
        }
        crate::aof::write_select(&mut out, j);
        db.for_each_stored(|key, v, expire, bound| {
            if !bound {
                crate::aof::write_key(&mut out, key, v, expire);
            }
        });
    }
    (out, false)
}

/// A new AOF generation from the data as it is now (turning the AOF on,
/// BGREWRITEAOF): the base is written, the manifest switched to it and a
/// fresh incremental file, and the old files are deleted. Logging goes
/// on into the new incremental file.
pub fn aof_rewrite(store: &mut Store) -> Result<(), String> {
    let dir = aof_dir(store);
    let name = store.config().appendfilename.clone();
    let previous = crate::aof::Aof::read_manifest(&dir, &name).unwrap_or(None);
    // The old file's buffered commands are part of the data the base has.
    set_aof(store, None);
    let base = aof_base(store);
    let aof = crate::aof::Aof::create(
        &dir,
        &name,
        (&base.0, base.1),
        previous.as_ref(),
        store.aof_sync.clone(),
    )?;
    // A new file: an earlier write error is behind us.
    store.saving.aof_write_error = None;
    aof.set_policy(store.config().appendfsync);
    set_aof(store, Some(aof));
    Ok(())
}

/// Every change of what logs (the AOF on, off, or a new one) goes
/// through here: the records made before it leave first, so each reaches
/// the file that was logging when it was made (or none).
fn set_aof(store: &mut Store, aof: Option<crate::aof::Aof>) {
    aof_write_out(store);
    store.ks.effects.set_aof(aof.is_some());
    store.aof = aof;
}

/// Turns logging off (CONFIG SET appendonly no): the file is synced and
/// closed; its data stays on disk.
pub fn aof_stop(store: &mut Store) {
    if rewrite_running(store) {
        bgsave_abort(store);
    }
    set_aof(store, None);
    store.saving.aof_write_error = None;
}

/// After CONFIG SET: the AOF follows `appendonly` (`was` is its value
/// before) and `appendfsync`. Turning it on starts the first base in the
/// background (scheduled after a running BGSAVE), as Redis's
/// startAppendOnly; logging starts with it.
pub fn aof_reconfigure(store: &mut Store, was: bool) -> Result<(), String> {
    match (was, store.config().appendonly) {
        (false, true) if rewrite_running(store) => {
            // BGREWRITEAOF with the AOF off is writing a generation: the
            // AOF goes on from it.
        }
        (false, true) if store.saving.job.is_some() => {
            store.saving.rewrite_scheduled = true;
            store.saving.rewrite_not_before = 0;
        }
        (false, true) => {
            store.saving.rewrite_not_before = 0;
            rewrite_start(store)?;
        }
        (true, false) => {
            store.saving.rewrite_scheduled = false;
            aof_stop(store);
        }
        _ => {}
    }
    if let Some(aof) = &store.aof {
        aof.set_policy(store.config().appendfsync);
    }
    Ok(())
}

/// Runs one command read back from the AOF against the store: the
/// dispatcher's `commands::replay::aof_client`, given by the caller so that
/// persistence does not depend on the dispatcher.
pub type Replay<'a> = &'a mut dyn FnMut(&mut Store, &[Bytes]) -> Result<(), String>;

/// Start-up with `appendonly yes`: the base file, then every incremental
/// file in order, replayed through the dispatcher; with no AOF yet, a
/// first generation from the (empty) data, as Redis 7. A last command cut
/// short is dropped when `aof-load-truncated` (the file is cut there),
/// and stops start-up otherwise; anything else unreadable stops it.
pub fn load_aof_at_start(store: &mut Store, replay: Replay) -> Result<(), String> {
    let dir = aof_dir(store);
    let name = store.config().appendfilename.clone();
    let old = PathBuf::from(&store.config().dir).join(&name);
    let manifest = match crate::aof::Aof::read_manifest(&dir, &name) {
        Ok(Some(m)) => m,
        // A Redis 6 AOF: upgraded to the multi-part layout, as Redis 7.
        Ok(None) if !dir.exists() && old.is_file() => {
            tracing::info!(
                "Creating AOF manifest for the old AOF file {}",
                old.display()
            );
            crate::aof::Aof::upgrade(&old, &dir, &name)?
        }
        Ok(None) => return aof_rewrite(store),
        Err(e) => return Err(format!("Bad AOF manifest {}: {e}", dir.display())),
    };
    let sw = std::time::Instant::now();
    if let Some(base) = &manifest.base {
        let path = dir.join(&base.name);
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        // An RDB file, an RDB preamble and commands, or commands only.
        let mut pos = 0;
        if bytes.starts_with(b"REDIS") {
            let counts = load_rdb(store, &bytes, false, false)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            store.drain_events(None);
            pos = counts.end;
        }
        if replay_commands(store, replay, &bytes, pos, &path)?.is_some() {
            // Only the last file may be cut short.
            return Err(format!(
                "Unexpected end of file reading the append only file {}",
                path.display()
            ));
        }
    }
    let mut valid_tail = None;
    let last = manifest.incr.len().saturating_sub(1);
    for (n, part) in manifest.incr.iter().enumerate() {
        let path = dir.join(&part.name);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && n == last => Vec::new(),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        if let Some(valid) = replay_commands(store, replay, &bytes, 0, &path)? {
            if n != last {
                return Err(format!(
                    "Unexpected end of file reading the append only file {}",
                    path.display()
                ));
            }
            if !store.config().aof_load_truncated {
                return Err(format!(
                    "Unexpected end of file reading the append only file {}. You can: 1) Make a backup of your AOF file, then use ./redis-check-aof --fix <filename.manifest>. 2) Alternatively you can set the 'aof-load-truncated' configuration option to yes and restart the server.",
                    path.display()
                ));
            }
            tracing::warn!(
                "!!! Warning: short read while loading the AOF file {}!!! AOF loaded anyway because aof-load-truncated is enabled",
                path.display()
            );
            valid_tail = Some(valid as u64);
        }
    }
    tracing::info!(
        "DB loaded from append only file: {:.3} seconds",
        sw.elapsed().as_secs_f64()
    );
    store.dirty_at_save = store.ks.dirty();
    let aof = crate::aof::Aof::resume(&dir, &name, manifest, valid_tail, store.aof_sync.clone())?;
    aof.set_policy(store.config().appendfsync);
    set_aof(store, Some(aof));
    Ok(())
}

/// Replays the commands of an AOF file's `bytes` from `pos`. Returns
/// where the valid part ends when the file is cut short (a partial last
/// command, or a MULTI without its EXEC); anything unreadable is an error.
fn replay_commands(
    store: &mut Store,
    replay: Replay,
    bytes: &[u8],
    mut pos: usize,
    path: &std::path::Path,
) -> Result<Option<usize>, String> {
    // A transaction runs when its EXEC is read: one cut short is
    // dropped with the tail.
    let mut multi: Option<(usize, Vec<Vec<Bytes>>)> = None;
    let mut truncated_at = None;
    while let Some(r) = crate::aof::read_command(bytes, &mut pos) {
        match r {
            crate::aof::Read::Command(args) => {
                if crate::util::eq_ic(&args[0], "multi") {
                    multi = Some((pos, Vec::new()));
                } else if crate::util::eq_ic(&args[0], "exec") {
                    for a in multi.take().map(|m| m.1).unwrap_or_default() {
                        replay(store, &a)?;
                    }
                } else if let Some((_, q)) = multi.as_mut() {
                    q.push(args);
                } else {
                    replay(store, &args)?;
                }
                store.drain_events(None);
            }
            crate::aof::Read::Annotation(text) => {
                if let Some(t) = text.strip_prefix(crate::aof::FENCE_ANNOTATION.as_bytes()) {
                    let t = crate::util::parse_i64(t).unwrap_or(0).max(0) as u64;
                    store.ks.raise_tokens(t);
                }
            }
            crate::aof::Read::Truncated { valid } => {
                truncated_at = Some(valid);
                break;
            }
            crate::aof::Read::Bad { at } => {
                return Err(format!(
                    "Bad file format reading the append only file {} at offset {at}",
                    path.display()
                ))
            }
        }
    }
    if let Some((at, _)) = multi {
        // A transaction without its EXEC: cut before its MULTI.
        truncated_at = Some(
            truncated_at
                .unwrap_or(bytes.len())
                .min(multi_start(bytes, at)),
        );
    }
    Ok(truncated_at)
}

/// The offset of the MULTI whose queued commands start at `after`.
fn multi_start(bytes: &[u8], after: usize) -> usize {
    const MULTI: &[u8] = b"*1\r\n$5\r\n";
    bytes[..after]
        .windows(MULTI.len())
        .rposition(|w| w == MULTI)
        .unwrap_or(after)
}
