//! The append-only file joined to the server (`super::aof` has the files):
//! the effects stream's records go to the incremental file; BGREWRITEAOF
//! starts a new generation; start-up replays the base and the increments
//! through a command runner the caller gives.
//!
//! Owns `aof_write_out`, THE propagation point. Must not touch the server,
//! scripting or the dispatcher: it works on a `Host`'s `Parts` and the
//! keyspace's effects stream, and replays through the `Replay` it is given.

use std::path::PathBuf;

use bytes::Bytes;

use super::aof::{self, Aof};
use super::{Host, Parts, State};
use crate::config::Config;
use crate::keyspace::Keyspace;

/// `dir`/`appenddirname`.
pub fn aof_dir(c: &Config) -> PathBuf {
    PathBuf::from(&c.dir).join(&c.appenddirname)
}

/// THE propagation point: the records of the stream of effects
/// (`crate::effects::Stream`) leave here, and only here, in the order the
/// changes were made (`crate::effects::Stream::publish` states the
/// guarantee): Command records into the AOF's buffer, every record to the
/// attached sinks. Then the buffer is written to the file.
///
/// It runs when a connection's batch is done, before its replies go out
/// (`runtime::conn`); on the cron, every 1/hz s, which takes what active
/// expiry, disconnects and lock hand-overs made between batches; before
/// the AOF changes (on, off, a new file: `set_aof`, a rewrite's start),
/// so each record reaches the file that was logging when it was made;
/// and before shutdown's sync.
///
/// After a failed write the log stays buffered and writes are refused
/// (`State::write_denial`) until a later try (the next batch, or the
/// cron) works, as Redis's.
pub fn aof_write_out(ks: &mut Keyspace, st: &mut State) {
    let aof = &mut st.aof;
    ks.effects.publish(&mut |db, args| {
        if let Some(aof) = aof.as_mut() {
            aof.feed(db, args);
        }
    });
    let Some(aof) = st.aof.as_mut() else {
        return;
    };
    match aof.write_out() {
        Ok(()) => {
            if st.saving.aof_write_error.take().is_some() {
                tracing::warn!("AOF write error looks solved, Redis can write again.");
            }
        }
        Err(e) => {
            if st.saving.aof_write_error.is_none() {
                tracing::warn!("Error writing to the AOF file: {e}");
            }
            st.saving.aof_write_error = Some(e);
        }
    }
}

/// Every change of what logs (the AOF on, off, or a new one) goes
/// through here: the records made before it leave first, so each reaches
/// the file that was logging when it was made (or none).
fn set_aof(p: &mut Parts, aof: Option<Aof>) {
    aof_write_out(p.ks, p.state);
    p.ks.effects.set_aof(aof.is_some());
    p.state.aof = aof;
}

/// BGREWRITEAOF: the reply's status text, or the error's. While another
/// job runs the rewrite is scheduled, as Redis's bgrewriteaofCommand.
pub fn bgrewriteaof(h: &mut impl Host) -> Result<&'static str, &'static str> {
    let mut p = h.parts();
    if p.state.rewrite_running() {
        return Err("ERR Background append only file rewriting already in progress");
    }
    if p.state.job_running() {
        p.state.saving.rewrite_scheduled = true;
        return Ok("Background append only file rewriting scheduled");
    }
    match rewrite_start(&mut p) {
        Ok(()) => Ok("Background append only file rewriting started"),
        Err(e) => {
            tracing::warn!("Can't rewrite append only file: {e}");
            Err("ERR Can't rewrite append only file in background: fork failed")
        }
    }
}

/// BGREWRITEAOF with the AOF on: logging moves to a new incremental file
/// at once, and the new base is written in the background by the same
/// walk as BGSAVE; when it is done the manifest switches to it.
pub(super) fn rewrite_start(p: &mut Parts) -> Result<(), String> {
    if p.state.saving.job.is_some() {
        return Err("a background job is running".into());
    }
    let rdb = p.config.aof_use_rdb_preamble;
    if p.state.aof.is_none() {
        // The AOF is being turned on (or BGREWRITEAOF with it off):
        // logging starts now into a file of its own, which the new
        // manifest names with the base when the base is written.
        let dir = aof_dir(p.config);
        let name = &p.config.appendfilename;
        let previous = Aof::read_manifest(&dir, name).unwrap_or(None);
        let aof = Aof::open_pending(&dir, name, previous, p.state.aof_sync.clone())?;
        aof.set_policy(p.config.appendfsync);
        set_aof(p, Some(aof));
        p.state.saving.aof_write_error = None;
    }
    // What was logged before goes to the file it was logged in.
    aof_write_out(p.ks, p.state);
    let aof = p.state.aof.as_mut().expect("an AOF");
    let base = aof.begin_rewrite(rdb)?;
    let path = aof.dir().join(&base.name);
    match super::save::start_job(p, path, true) {
        Ok(job) => {
            p.state.saving.job = Some(job);
            p.state.saving.rewrite = Some(base);
            p.state.saving.wake.notify_one();
            // The job runs in this process (no fork): its pid is ours.
            tracing::info!(
                "Background append only file rewriting started by pid {}",
                std::process::id()
            );
            Ok(())
        }
        Err(e) => {
            p.state.saving.last_rewrite_ok = false;
            drop_pending(p);
            Err(format!("Can't rewrite append only file in background: {e}"))
        }
    }
}

/// The end of a rewrite's job (`r`): the manifest switches to the new
/// base, or the rewrite failed.
pub(super) fn rewrite_finished(p: &mut Parts, base: aof::Part, r: Result<(), String>) {
    // As Redis: the job's end first, then the switch to the new files.
    if r.is_ok() {
        tracing::info!("Background AOF rewrite terminated with success");
    }
    let finished = r.and_then(|()| match p.state.aof.as_mut() {
        Some(aof) => aof.finish_rewrite(base),
        None => Err("the AOF was turned off".into()),
    });
    match finished {
        Ok(()) => {
            p.state.saving.last_rewrite_ok = true;
            p.state.saving.aof_rewrites += 1;
            tracing::info!("Background AOF rewrite finished successfully");
            if !p.config.appendonly {
                // BGREWRITEAOF with the AOF off: the files are written,
                // logging stops.
                stop(p);
            }
        }
        Err(e) => {
            p.state.saving.last_rewrite_ok = false;
            tracing::warn!("Background AOF rewrite error: {e}");
            drop_pending(p);
        }
    }
}

/// A first rewrite that did not complete: its AOF is dropped (its file
/// was never named by a manifest); with `appendonly yes` a new try is
/// scheduled, not before 5 s (Redis retries until the AOF is on).
pub(super) fn drop_pending(p: &mut Parts) {
    if !p.state.aof.as_ref().is_some_and(|a| a.is_pending()) {
        return;
    }
    set_aof(p, None);
    p.state.saving.aof_write_error = None;
    if p.config.appendonly {
        p.state.saving.rewrite_scheduled = true;
        p.state.saving.rewrite_not_before = crate::util::now_ms() + 5000;
    }
}

/// The data as it is now, as an AOF base file: an RDB file that says so,
/// or commands (`aof-use-rdb-preamble no`). True when it is an RDB file.
fn aof_base(p: &Parts) -> (Vec<u8>, bool) {
    if p.config.aof_use_rdb_preamble {
        return (super::save::image(p, true), true);
    }
    let mut out = Vec::new();
    aof::write_fence(&mut out, p.ks.bindings().last_token());
    for code in p.libraries.codes() {
        aof::write_function(&mut out, code);
    }
    for (j, db) in p.ks.dbs().iter().enumerate() {
        if db.is_empty() {
            continue;
        }
        aof::write_select(&mut out, j);
        db.for_each_stored(|key, v, expire, bound| {
            if !bound {
                aof::write_key(&mut out, key, v, expire);
            }
        });
    }
    (out, false)
}

/// A new AOF generation from the data as it is now (start-up with the
/// AOF on and no AOF yet): the base is written, the manifest switched to
/// it and a fresh incremental file, and the old files are deleted.
/// Logging goes on into the new incremental file.
fn new_generation(p: &mut Parts) -> Result<(), String> {
    let dir = aof_dir(p.config);
    let name = &p.config.appendfilename;
    let previous = Aof::read_manifest(&dir, name).unwrap_or(None);
    // The old file's buffered commands are part of the data the base has.
    set_aof(p, None);
    let base = aof_base(p);
    let aof = Aof::create(
        &dir,
        name,
        (&base.0, base.1),
        previous.as_ref(),
        p.state.aof_sync.clone(),
    )?;
    // A new file: an earlier write error is behind us.
    p.state.saving.aof_write_error = None;
    aof.set_policy(p.config.appendfsync);
    set_aof(p, Some(aof));
    p.state.dirty_at_save = p.ks.dirty();
    Ok(())
}

/// Turns logging off (CONFIG SET appendonly no, DEBUG LOADAOF): the file
/// is synced and closed; its data stays on disk.
pub fn aof_stop(h: &mut impl Host) {
    stop(&mut h.parts())
}

fn stop(p: &mut Parts) {
    if p.state.rewrite_running() {
        super::save::abort_job(p);
    }
    set_aof(p, None);
    p.state.saving.aof_write_error = None;
}

/// After CONFIG SET: the AOF follows `appendonly` (`was` is its value
/// before) and `appendfsync`. Turning it on starts the first base in the
/// background (scheduled after a running BGSAVE), as Redis's
/// startAppendOnly; logging starts with it.
pub fn aof_reconfigure(h: &mut impl Host, was: bool) -> Result<(), String> {
    let mut p = h.parts();
    match (was, p.config.appendonly) {
        (false, true) if p.state.rewrite_running() => {
            // BGREWRITEAOF with the AOF off is writing a generation: the
            // AOF goes on from it.
        }
        (false, true) if p.state.job_running() => {
            p.state.saving.rewrite_scheduled = true;
            p.state.saving.rewrite_not_before = 0;
        }
        (false, true) => {
            p.state.saving.rewrite_not_before = 0;
            rewrite_start(&mut p)?;
        }
        (true, false) => {
            p.state.saving.rewrite_scheduled = false;
            stop(&mut p);
        }
        _ => {}
    }
    if let Some(aof) = &p.state.aof {
        aof.set_policy(p.config.appendfsync);
    }
    Ok(())
}

/// Runs one command read back from the AOF against the host: the
/// dispatcher's `commands::replay::aof_client`, given by the caller so that
/// persistence does not depend on the dispatcher.
pub type Replay<'a, H> = &'a mut dyn FnMut(&mut H, &[Bytes]) -> Result<(), String>;

/// Start-up with `appendonly yes` (and DEBUG LOADAOF): the base file,
/// then every incremental file in order, replayed through `replay`; with
/// no AOF yet, a first generation from the (empty) data, as Redis 7. A
/// last command cut short is dropped when `aof-load-truncated` (the file
/// is cut there), and stops start-up otherwise; anything else unreadable
/// stops it.
pub fn load_aof_at_start<H: Host>(h: &mut H, replay: Replay<H>) -> Result<(), String> {
    let (dir, name, old, load_truncated) = {
        let c = h.parts().config;
        let old = PathBuf::from(&c.dir).join(&c.appendfilename);
        (
            aof_dir(c),
            c.appendfilename.clone(),
            old,
            c.aof_load_truncated,
        )
    };
    let manifest = match Aof::read_manifest(&dir, &name) {
        Ok(Some(m)) => m,
        // A Redis 6 AOF: upgraded to the multi-part layout, as Redis 7.
        Ok(None) if !dir.exists() && old.is_file() => {
            tracing::info!(
                "Creating AOF manifest for the old AOF file {}",
                old.display()
            );
            Aof::upgrade(&old, &dir, &name)?
        }
        Ok(None) => return new_generation(&mut h.parts()),
        Err(e) => return Err(format!("Bad AOF manifest {}: {e}", dir.display())),
    };
    let sw = std::time::Instant::now();
    if let Some(base) = &manifest.base {
        let path = dir.join(&base.name);
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        // An RDB file, an RDB preamble and commands, or commands only.
        let mut pos = 0;
        if bytes.starts_with(b"REDIS") {
            let counts = super::save::load_rdb(h, &bytes, false, false)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            h.settle();
            pos = counts.end;
        }
        if replay_commands(h, replay, &bytes, pos, &path)?.is_some() {
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
        if let Some(valid) = replay_commands(h, replay, &bytes, 0, &path)? {
            if n != last {
                return Err(format!(
                    "Unexpected end of file reading the append only file {}",
                    path.display()
                ));
            }
            if !load_truncated {
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
    let mut p = h.parts();
    p.state.dirty_at_save = p.ks.dirty();
    let aof = Aof::resume(&dir, &name, manifest, valid_tail, p.state.aof_sync.clone())?;
    aof.set_policy(p.config.appendfsync);
    set_aof(&mut p, Some(aof));
    Ok(())
}

/// Replays the commands of an AOF file's `bytes` from `pos`. Returns
/// where the valid part ends when the file is cut short (a partial last
/// command, or a MULTI without its EXEC); anything unreadable is an error.
fn replay_commands<H: Host>(
    h: &mut H,
    replay: Replay<H>,
    bytes: &[u8],
    mut pos: usize,
    path: &std::path::Path,
) -> Result<Option<usize>, String> {
    // A transaction runs when its EXEC is read: one cut short is
    // dropped with the tail.
    let mut multi: Option<(usize, Vec<Vec<Bytes>>)> = None;
    let mut truncated_at = None;
    while let Some(r) = aof::read_command(bytes, &mut pos) {
        match r {
            aof::Read::Command(args) => {
                if crate::util::eq_ic(&args[0], "multi") {
                    multi = Some((pos, Vec::new()));
                } else if crate::util::eq_ic(&args[0], "exec") {
                    for a in multi.take().map(|m| m.1).unwrap_or_default() {
                        replay(h, &a)?;
                    }
                } else if let Some((_, q)) = multi.as_mut() {
                    q.push(args);
                } else {
                    replay(h, &args)?;
                }
                h.settle();
                // Redis's testing knob: a slower load, per command.
                let delay = h.parts().config.key_load_delay;
                crate::util::debug_delay(delay);
            }
            aof::Read::Annotation(text) => {
                if let Some(t) = text.strip_prefix(aof::FENCE_ANNOTATION.as_bytes()) {
                    let t = crate::util::parse_i64(t).unwrap_or(0).max(0) as u64;
                    h.parts().ks.raise_tokens(t);
                }
            }
            aof::Read::Truncated { valid } => {
                truncated_at = Some(valid);
                break;
            }
            aof::Read::Bad { at } => {
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
