//! Snapshots: SAVE, BGSAVE and its job's steps, DEBUG RELOAD's and
//! start-up's loads, in Redis's RDB format (`super::rdb`), written by the
//! background job of `super::snapshot` or at once.
//!
//! Must not touch the server, scripting or the dispatcher: it works on a
//! `Host`'s `Parts`; libraries come back through `Host::restore_functions`,
//! and the keyspace hook after a load is `Host::settle`.

use std::io::Write;
use std::path::PathBuf;

use bytes::Bytes;

use super::rdb::file::{self, LoadError, SaveOptions};
use super::rdb::value::Limits;
use super::snapshot::{Format, Job, Step, Target};
use super::{Host, Parts};
use crate::config::Config;
use crate::db::Owned;

/// `dir`/`dbfilename`.
pub fn rdb_path(c: &Config) -> PathBuf {
    PathBuf::from(&c.dir).join(&c.dbfilename)
}

/// The snapshot file's bytes (`dir`/`dbfilename`), for a load.
pub fn read_snapshot(c: &Config) -> std::io::Result<Vec<u8>> {
    std::fs::read(rdb_path(c))
}

/// The encoding limits loaded values are built under.
pub fn limits(c: &Config) -> Limits {
    Limits {
        hash: crate::types::pack::Limits {
            max_entries: c.hash_max_listpack_entries,
            max_value: c.hash_max_listpack_value,
        },
        zset: crate::types::pack::Limits {
            max_entries: c.zset_max_listpack_entries,
            max_value: c.zset_max_listpack_value,
        },
        list_fill: c.list_max_listpack_size,
        list_compress_depth: usize::try_from(c.list_compress_depth).unwrap_or(0),
        set_max_intset: c.set_max_intset_entries,
    }
}

/// The data as it is now, as an RDB file (`aof_base`: an AOF's base).
pub(super) fn image(p: &Parts, aof_base: bool) -> Vec<u8> {
    let codes = p.libraries.codes();
    let opts = save_options(p, codes, aof_base);
    file::save(p.ks.dbs().iter(), &opts)
}

/// The AUX field with the last fencing token given.
const FENCE_AUX: &str = "lk-fence-token";
/// The AUX field with the lock state's last record number
/// (`replication::locklog`).
pub const LOCK_SEQ_AUX: &str = "lk-lock-seq";
/// The AUX field with the lock state, as lock frames.
pub const LOCKS_AUX: &str = "lk-locks";

/// What an RDB file's header says; `aof_base` marks it as an AOF's base.
fn save_options<'a>(p: &Parts, functions: Vec<&'a [u8]>, aof_base: bool) -> SaveOptions<'a> {
    let c = p.config;
    let now = crate::util::now_ms();
    let s = |v: String| v.into_bytes();
    let mut aux = vec![
        ("redis-ver", s(crate::version::REDIS_VERSION.to_string())),
        ("redis-bits", s("64".to_string())),
        ("ctime", s((now / 1000).to_string())),
        ("used-mem", s(crate::stats::used_memory().to_string())),
    ];
    // Where the data is in the replication stream, as Redis's
    // rdbSaveInfoAuxFields.
    if let Some(r) = p.repl.save_info() {
        aux.push(("repl-stream-db", s(r.stream_db.to_string())));
        aux.push(("repl-id", s(r.replid)));
        aux.push(("repl-offset", s(r.offset.to_string())));
    }
    aux.push(("aof-base", s(if aof_base { "1" } else { "0" }.to_string())));
    // Fencing tokens go on above it after a restart (an AUX field Redis
    // ignores).
    aux.push((FENCE_AUX, s(p.ks.bindings().last_token().to_string())));
    // The lock state, for a Latchkey replica's full sync (fields Redis
    // ignores; a load at start-up does not restore it).
    aux.extend(p.repl.lock_aux(p.ks));
    SaveOptions {
        compress: c.rdbcompression,
        checksum: c.rdbchecksum,
        list_fill: c.list_max_listpack_size,
        aux,
        functions,
    }
}

/// SAVE: writes the snapshot to a temporary file in `dir`, syncs it and
/// renames it over `dbfilename` (so a crash leaves the old file or the new
/// one, never half of one); then LASTSAVE and the change counter move.
pub fn save(h: &mut impl Host) -> Result<(), String> {
    save_now(&mut h.parts())
}

pub(super) fn save_now(p: &mut Parts) -> Result<(), String> {
    if p.state.rdb_job_running() {
        return Err("Background save already in progress".into());
    }
    let bytes = image(p, false);
    let path = rdb_path(p.config);
    let tmp = PathBuf::from(&p.config.dir).join(format!("temp-{}.rdb", std::process::id()));
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
    let st = &mut *p.state;
    st.lastsave = crate::util::now_ms() / 1000;
    st.dirty_at_save = p.ks.dirty();
    st.saving.saves += 1;
    tracing::info!("DB saved on disk");
    Ok(())
}

/// Keys a background save step walks (steps repeat under one lock for
/// about 300 µs: `runtime::save_slice`).
pub const BGSAVE_SLICE: usize = 100;

/// A background job writing the databases as they are now to `path`:
/// an RDB file, or with `aof_base` an AOF base in the format
/// `aof-use-rdb-preamble` asks for.
pub(super) fn start_job(p: &mut Parts, path: PathBuf, aof_base: bool) -> std::io::Result<Job> {
    start_job_to(p, Target::File(path), aof_base)
}

/// `start_job` to any target.
fn start_job_to(p: &mut Parts, target: Target, aof_base: bool) -> std::io::Result<Job> {
    let c = p.config;
    let (compress, fill, checksum) = (c.rdbcompression, c.list_max_listpack_size, c.rdbchecksum);
    let preamble = c.aof_use_rdb_preamble || !aof_base;
    let (format, header, encode): (_, _, crate::db::snapshot::Encoder) = if preamble {
        let codes = p.libraries.codes();
        let opts = save_options(p, codes, aof_base);
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
        super::aof::write_fence(&mut header, p.ks.bindings().last_token());
        for code in p.libraries.codes() {
            super::aof::write_function(&mut header, code);
        }
        (
            Format::Aof,
            header,
            std::sync::Arc::new(super::aof::write_key),
        )
    };
    let dirty = p.ks.dirty();
    Job::start(p.ks.dbs_mut(), format, header, encode, target, dirty)
}

/// An RDB file without the data, for a replica that asked for a filtered
/// one (`REPLCONF rdb-filter-only`): the header, the function libraries
/// when `functions`, the end.
pub fn filtered_image(h: &mut impl Host, functions: bool) -> Vec<u8> {
    let p = h.parts();
    let codes = if functions {
        p.libraries.codes()
    } else {
        Vec::new()
    };
    let opts = save_options(&p, codes, false);
    file::save(std::iter::empty(), &opts)
}

/// Where a full sync's snapshot goes.
pub enum SyncTarget {
    /// The RDB file, by a BGSAVE (`repl-diskless-sync no`).
    Disk,
    /// Streamed to the replicas, framed by `prefix` and `suffix`.
    Socket {
        out: Box<dyn Write + Send>,
        prefix: Vec<u8>,
        suffix: Vec<u8>,
    },
}

/// Starts the background job of a replica's full sync, the same walk as
/// BGSAVE: a BGSAVE to the RDB file, or the walk streamed to `target`.
/// Its end counts in `SaveState::rdb_jobs_ended`.
pub fn start_sync_job(h: &mut impl Host, target: SyncTarget) -> Result<(), String> {
    let mut p = h.parts();
    match target {
        SyncTarget::Disk => start_bgsave(&mut p),
        SyncTarget::Socket {
            out,
            prefix,
            suffix,
        } => {
            if p.state.saving.job.is_some() {
                return Err("Background save already in progress".into());
            }
            let target = Target::Stream {
                out,
                prefix,
                suffix,
            };
            let job = start_job_to(&mut p, target, false).map_err(|e| e.to_string())?;
            p.state.saving.job = Some(job);
            p.state.saving.wake.notify_one();
            tracing::info!(
                "Background RDB transfer started by pid {}",
                std::process::id()
            );
            Ok(())
        }
    }
}

/// BGSAVE [SCHEDULE]: the reply's status text, or the error's. A save
/// asked for while another job runs is scheduled when `schedule`, else
/// refused, as Redis's bgsaveCommand.
pub fn bgsave(h: &mut impl Host, schedule: bool) -> Result<&'static str, &'static str> {
    let mut p = h.parts();
    let st = &mut *p.state;
    if st.rewrite_running() || st.job_running() {
        if schedule {
            st.saving.scheduled = true;
            return Ok("Background saving scheduled");
        }
        if st.rewrite_running() {
            return Err("ERR An AOF log rewriting in progress: can't BGSAVE right now. Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible.");
        }
        return Err("ERR Background save already in progress");
    }
    match start_bgsave(&mut p) {
        Ok(()) => Ok("Background saving started"),
        Err(_) => Err("ERR"),
    }
}

/// Starts a background save (`super::snapshot`). Err when one is
/// already running or cannot start.
pub(super) fn start_bgsave(p: &mut Parts) -> Result<(), String> {
    if p.state.saving.job.is_some() {
        return Err("Background save already in progress".into());
    }
    let path = rdb_path(p.config);
    p.state.saving.last_try = crate::util::now_ms() / 1000;
    match start_job(p, path, false) {
        Ok(job) => {
            p.state.saving.job = Some(job);
            p.state.saving.wake.notify_one();
            // The job runs in this process (no fork): its pid is ours.
            tracing::info!("Background saving started by pid {}", std::process::id());
            Ok(())
        }
        Err(e) => {
            p.state.saving.last_bgsave_ok = false;
            tracing::warn!("Can't save in background: {e}");
            Err(format!("Can't save in background: {e}"))
        }
    }
}

/// One slice of the background job; `Done` when none is running (any
/// more). The end of a job is recorded here: LASTSAVE, the change counter,
/// the status, a rewrite's new AOF generation; a scheduled job then
/// starts.
pub fn bgsave_step(h: &mut impl Host, budget: usize) -> Step {
    let mut p = h.parts();
    let Some(job) = p.state.saving.job.as_mut() else {
        return Step::Done(Ok(()));
    };
    let step = job.step(p.ks.dbs_mut(), budget);
    let Step::Done(r) = &step else {
        return step;
    };
    let job = p.state.saving.job.take().expect("a job");
    if let Some(base) = p.state.saving.rewrite.take() {
        super::append::rewrite_finished(&mut p, base, r.clone());
    } else if job.streamed {
        let st = &mut *p.state;
        st.saving.rdb_jobs_ended += 1;
        st.saving.last_rdb_job_ok = r.is_ok();
        match r {
            Ok(()) => tracing::info!("Background RDB transfer terminated with success"),
            Err(e) => tracing::warn!("Background transfer error: {e}"),
        }
    } else {
        p.state.saving.rdb_jobs_ended += 1;
        p.state.saving.last_rdb_job_ok = r.is_ok();
        let st = &mut *p.state;
        st.saving.last_bgsave_secs = job.started.elapsed().as_secs() as i64;
        match r {
            Ok(()) => {
                st.lastsave = crate::util::now_ms() / 1000;
                st.dirty_at_save = job.dirty_at_start;
                st.saving.last_bgsave_ok = true;
                st.saving.saves += 1;
                // Redis's child says this before the parent's line.
                tracing::info!("DB saved on disk");
                tracing::info!("Background saving terminated with success");
            }
            Err(e) => {
                st.saving.last_bgsave_ok = false;
                tracing::warn!("Background saving error: {e}");
            }
        }
    }
    start_scheduled(&mut p);
    step
}

/// After a job: the rewrite or the save asked for while it ran.
pub(super) fn start_scheduled(p: &mut Parts) {
    let st = &mut *p.state;
    let rewrite_due = st.saving.rewrite_not_before <= crate::util::now_ms();
    if st.saving.rewrite_scheduled && rewrite_due {
        st.saving.rewrite_scheduled = false;
        let _ = super::append::rewrite_start(p);
    } else if std::mem::take(&mut st.saving.scheduled) {
        let _ = start_bgsave(p);
    }
}

/// Stops a background job (FLUSHALL, DEBUG RELOAD, SHUTDOWN), as Redis
/// kills its child: no error status, the temporary file removed.
pub fn bgsave_abort(h: &mut impl Host) {
    abort_job(&mut h.parts())
}

pub(super) fn abort_job(p: &mut Parts) {
    if let Some(mut job) = p.state.saving.job.take() {
        job.abort(p.ks.dbs_mut());
        // An aborted rewrite leaves the manifest listing the old files
        // and the new incremental one: complete as it is. A first one
        // starts again.
        if p.state.saving.rewrite.take().is_some() {
            super::append::drop_pending(p);
            p.state.saving.rewrite_not_before = 0;
        } else {
            p.state.saving.rdb_jobs_ended += 1;
            p.state.saving.last_rdb_job_ok = false;
        }
        tracing::info!("Background saving aborted");
    }
}

/// Loads a file's keys and function libraries into the server (emptied
/// first by the caller, or not: then a key already there is an error
/// unless `merge`, where the file's value replaces it). Returns how many
/// keys were loaded.
pub fn load_bytes(h: &mut impl Host, bytes: &[u8], merge: bool) -> Result<usize, LoadError> {
    load_rdb(h, bytes, merge, true).map(|c| c.keys)
}

/// Redis's notice lines for the AUX fields it reports as it loads.
fn log_aux(k: &[u8], v: &[u8]) {
    let v = String::from_utf8_lossy(v);
    let n = || crate::util::parse_i64(v.as_bytes()).unwrap_or(0);
    match k {
        b"redis-ver" => tracing::info!("Loading RDB produced by version {v}"),
        b"ctime" => tracing::info!(
            "RDB age {} seconds",
            (crate::util::now_ms() / 1000 - n()).max(0)
        ),
        b"used-mem" => tracing::info!(
            "RDB memory usage when created {:.2} Mb",
            n() as f64 / (1024.0 * 1024.0)
        ),
        _ => {}
    }
}

/// `load_bytes`; unless `whole`, the RDB data may be followed by other
/// bytes (an AOF base's commands after its RDB preamble).
pub(super) fn load_rdb(
    h: &mut impl Host,
    bytes: &[u8],
    merge: bool,
    whole: bool,
) -> Result<file::Counts, LoadError> {
    use file::{Item, Val};
    let mut codes: Vec<Bytes> = Vec::new();
    let counts = {
        let mut p = h.parts();
        abort_job(&mut p);
        let lim = limits(p.config);
        let databases = p.config.databases;
        let mut db = 0usize;
        let mut touched = vec![false; databases];
        let mut fence = 0u64;
        let (mut rid, mut roff, mut rdb) = (None, None, None);
        let (mut lock_seq, mut locks) = (None, Vec::new());
        let key_load_delay = p.config.key_load_delay;
        let ks = &mut *p.ks;
        // Keys go into the keyspace as they are read: no copy of the
        // dataset.
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
                    // Redis's testing knob: a slower load, per key.
                    crate::util::debug_delay(key_load_delay);
                }
                Item::Function(code) => codes.push(Bytes::from(code)),
                Item::Aux(k, v) if k == FENCE_AUX.as_bytes() => {
                    fence = crate::util::parse_i64(&v).unwrap_or(0).max(0) as u64;
                }
                Item::Aux(k, v) if k == b"repl-id" && v.len() == 40 => {
                    rid = Some(String::from_utf8_lossy(&v).into_owned());
                }
                Item::Aux(k, v) if k == b"repl-offset" => roff = crate::util::parse_i64(&v),
                Item::Aux(k, v) if k == b"repl-stream-db" => rdb = crate::util::parse_i64(&v),
                Item::Aux(k, v) if k == LOCK_SEQ_AUX.as_bytes() => {
                    lock_seq = crate::util::parse_i64(&v).and_then(|n| u64::try_from(n).ok());
                }
                Item::Aux(k, v) if k == LOCKS_AUX.as_bytes() => locks = v,
                Item::Aux(k, v) => log_aux(&k, &v),
            }
            Ok(())
        });
        p.ks.raise_tokens(fence);
        // Valid as Redis's loadDataFromDisk takes it: an ID, an offset
        // and a stream database, none -1.
        p.state.loaded_locks = lock_seq.map(|n| (n, locks));
        p.state.loaded_repl = match (rid, roff, rdb) {
            (Some(replid), Some(offset), Some(stream_db)) if offset != -1 && stream_db != -1 => {
                Some(super::ReplInfo {
                    replid,
                    offset,
                    stream_db,
                })
            }
            _ => None,
        };
        for (i, t) in touched.iter().enumerate() {
            if *t {
                p.ks.db_mut(i).loaded();
            }
        }
        let counts = if whole { r?.whole(bytes.len())? } else { r? };
        p.state.saving.load_keys_expired = counts.expired_skipped;
        p.state.saving.load_keys_loaded = counts.keys;
        counts
    };
    h.restore_functions(codes).map_err(|e| LoadError {
        offset: 0,
        message: format!("function libraries: {e}"),
    })?;
    Ok(counts)
}

/// The load at start-up: the file at `dir`/`dbfilename` if there is one.
/// A file that cannot be read is an error: the server must not start
/// empty over data it failed to load.
pub fn load_at_start(h: &mut impl Host) -> Result<(), String> {
    let path = rdb_path(h.parts().config);
    let bytes = match read_snapshot(h.parts().config) {
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
    match load_rdb(h, &bytes, false, true) {
        Ok(c) => {
            tracing::info!(
                "Done loading RDB, keys loaded: {}, keys expired: {}.",
                c.keys,
                c.expired_skipped
            );
            tracing::info!(
                "DB loaded from disk: {:.3} seconds",
                sw.elapsed().as_secs_f64()
            );
            // The loaded keys' events pass the keyspace hook now, not at
            // the first client's command.
            h.settle();
            let p = h.parts();
            p.state.dirty_at_save = p.ks.dirty();
            Ok(())
        }
        Err(e) => Err(format!(
            "Short read or OOM loading DB. Unrecoverable error, aborting now. {}: {e}",
            path.display()
        )),
    }
}
