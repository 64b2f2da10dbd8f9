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

use crate::db::{Event, Owned};
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
    let c = store.config();
    let now = crate::util::now_ms();
    let codes = store.scripting.functions.codes();
    let opts = SaveOptions {
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
        functions: codes,
    };
    file::save(store.ks.dbs().iter(), &opts)
}

/// SAVE: writes the snapshot to a temporary file in `dir`, syncs it and
/// renames it over `dbfilename` (so a crash leaves the old file or the new
/// one, never half of one); then LASTSAVE and the change counter move.
pub fn save(store: &mut Store) -> Result<(), String> {
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
    tracing::info!("DB saved on disk");
    Ok(())
}

/// Loads a file's keys and function libraries into the store (emptied
/// first by the caller, or not: then a key already there is an error
/// unless `merge`, where the file's value replaces it). Returns how many
/// keys were loaded.
pub fn load_bytes(store: &mut Store, bytes: &[u8], merge: bool) -> Result<usize, LoadError> {
    let lim = limits(store);
    let databases = store.config().databases;
    let loaded = file::load(bytes, &lim, crate::util::now_ms(), databases)?;
    let codes: Vec<Bytes> = loaded.functions.into_iter().map(Bytes::from).collect();
    let gate = store.scripting.gate.clone();
    store
        .scripting
        .functions
        .restore(codes, crate::scripting::functions::Policy::Flush, &gate)
        .map_err(|e| LoadError {
            offset: 0,
            message: format!("function libraries: {e}"),
        })?;
    let mut n = 0;
    for (db, keys) in loaded.dbs {
        let d = store.ks.db_mut(db);
        for k in keys {
            let owned = Owned::loaded(k.value, k.expire);
            if d.put(&Bytes::from(k.key), owned, Event::generic("restore")) && !merge {
                return Err(LoadError {
                    offset: 0,
                    message: format!("duplicate key in database {db}"),
                });
            }
            n += 1;
        }
    }
    Ok(n)
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
