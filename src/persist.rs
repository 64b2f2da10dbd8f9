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
use crate::store::Store;

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
    let opts = save_options(store, codes);
    file::save(store.ks.dbs().iter(), &opts)
}

fn save_options<'a>(store: &Store, functions: Vec<&'a [u8]>) -> SaveOptions<'a> {
    let c = store.config();
    let now = crate::util::now_ms();
    SaveOptions {
        compress: c.rdbcompression,
        checksum: c.rdbchecksum,
        list_fill: c.list_max_listpack_size,
        aux: vec![
            (
                "redis-ver",
                crate::commands::connection::REDIS_VERSION.to_string(),
            ),
            ("redis-bits", "64".to_string()),
            ("ctime", (now / 1000).to_string()),
            ("used-mem", crate::store::used_memory().to_string()),
            ("aof-base", "0".to_string()),
        ],
        functions,
    }
}

/// SAVE: writes the snapshot to a temporary file in `dir`, syncs it and
/// renames it over `dbfilename` (so a crash leaves the old file or the new
/// one, never half of one); then LASTSAVE and the change counter move.
pub fn save(store: &mut Store) -> Result<(), String> {
    if store.saving.job.is_some() {
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

/// BGSAVE: starts writing the databases as they are now, in the
/// background (`crate::snapshot`). Err when one is already running.
pub fn bgsave_start(store: &mut Store) -> Result<(), String> {
    if store.saving.job.is_some() {
        return Err("Background save already in progress".into());
    }
    let (compress, fill, checksum) = {
        let c = store.config();
        (c.rdbcompression, c.list_max_listpack_size, c.rdbchecksum)
    };
    let mut header = Vec::with_capacity(1 << 16);
    {
        let codes = store.scripting.functions.codes();
        file::write_header(&mut header, &save_options(store, codes));
    }
    let encode: crate::db::snapshot::Encoder = std::sync::Arc::new(move |out, key, v, expire| {
        file::write_key(out, key, v, expire, compress, fill)
    });
    let path = rdb_path(store);
    let dirty = store.ks.dirty();
    store.saving.last_try = crate::util::now_ms() / 1000;
    match crate::snapshot::Job::start(store.ks.dbs_mut(), header, encode, path, checksum, dirty) {
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
        if std::mem::take(&mut store.saving.scheduled) {
            let _ = bgsave_start(store);
        }
    }
    step
}

/// Stops a background save (FLUSHALL, DEBUG RELOAD, SHUTDOWN), as Redis
/// kills its child: no error status, the temporary file removed.
pub fn bgsave_abort(store: &mut Store) {
    if let Some(mut job) = store.saving.job.take() {
        job.abort(store.ks.dbs_mut());
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
    if store.saving.scheduled {
        store.saving.scheduled = false;
        let _ = bgsave_start(store);
        return;
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
pub fn writes_denied(store: &Store) -> bool {
    let c = store.config();
    c.stop_writes_on_bgsave_error && !c.save.is_empty() && !store.saving.last_bgsave_ok
}

/// Before the process exits (SHUTDOWN, SIGTERM): a background save is
/// stopped; a snapshot is written when `save` (SHUTDOWN SAVE) or, unless
/// `nosave`, when save rules are set. Err when that write failed (the
/// shutdown is then off, unless forced).
pub fn prepare_shutdown(store: &mut Store, save: bool, nosave: bool) -> Result<(), String> {
    bgsave_abort(store);
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
    use file::{Item, Val};
    bgsave_abort(store);
    let lim = limits(store);
    let databases = store.config().databases;
    let mut codes: Vec<Bytes> = Vec::new();
    let mut db = 0usize;
    let mut touched = vec![false; databases];
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
            Item::Aux(..) => {}
        }
        Ok(())
    });
    for (i, t) in touched.iter().enumerate() {
        if *t {
            store.ks.db_mut(i).loaded();
        }
    }
    let counts = r?;
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
    Ok(counts.keys)
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
