//! BGSAVE without fork: a background save job that writes an RDB file of
//! the databases as they were when it began, while commands go on.
//!
//! Each database keeps its own part of the image (`db::snapshot`: a walk
//! in rank order, and the keys a write touched ahead of the walk, written
//! before the write). This job drives those walks a slice at a time from
//! the server's save task (each slice holds the store lock for well under
//! a millisecond), frames their records into the file's sections
//! (SELECTDB, RESIZEDB once per database), and hands the bytes to a writer
//! thread, which computes the CRC64, writes a temporary file, syncs it and
//! renames it over `dbfilename`. Memory beyond the dataset: the records in
//! flight (a bounded queue) and the keys changed ahead of the walk.
//!
//! Owns the job and its writer thread. Must not touch the keyspace's
//! other state, the config or the save status: it knows the databases and
//! the RDB framing; `super::save` starts, steps and finishes the job.

use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::Instant;

use super::rdb::codec::crc64;
use super::rdb::file::{write_eof, write_select};
use crate::db::snapshot::Encoder;
use crate::db::Db;

/// Chunks in flight to the writer; beyond that the walk waits.
const QUEUE: usize = 64;
/// A chunk is handed over once it holds this much.
const CHUNK: usize = 256 * 1024;

/// The file a job writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// An RDB file (BGSAVE; an AOF base with `aof-use-rdb-preamble yes`):
    /// SELECTDB and RESIZEDB sections, EOF, the CRC64 (zeros without
    /// `rdbchecksum`).
    Rdb { checksum: bool },
    /// An AOF base in commands (`aof-use-rdb-preamble no`): SELECT before
    /// each section, nothing at the end.
    Aof,
}

/// Where a job's bytes go.
pub enum Target {
    /// A file, written to a temporary one then renamed over `path`.
    File(PathBuf),
    /// A stream (a diskless sync's replicas): `prefix`, the bytes, the
    /// checksum, `suffix`; nothing is synced or renamed.
    Stream {
        out: Box<dyn Write + Send>,
        prefix: Vec<u8>,
        suffix: Vec<u8>,
    },
}

enum Msg {
    Data(Vec<u8>),
    /// The end: append the checksum (or zeros), sync, rename.
    Finish,
}

/// What a step did.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Wrote records; more to do.
    Progress,
    /// The writer is behind (or finishing): nothing to do for now.
    Waiting,
    /// The file is written (or failed).
    Done(Result<(), String>),
}

/// A background save in progress.
pub struct Job {
    format: Format,
    /// The database being walked.
    cur: usize,
    /// The database the last SELECTDB named.
    section: Option<usize>,
    /// Databases whose RESIZEDB was written.
    resized: Vec<bool>,
    buf: Vec<u8>,
    tx: Option<SyncSender<Msg>>,
    done: Receiver<Result<(), String>>,
    writer: Option<JoinHandle<()>>,
    /// EOF is in the buffer: the walks are over.
    eof: bool,
    /// Finish was queued.
    finished: bool,
    /// Keys written by databases whose part ended.
    written_done: usize,
    pub started: Instant,
    /// `ks.dirty()` when the save began.
    pub dirty_at_start: u64,
    /// Keys in the image (INFO current_save_keys_total).
    pub keys_total: usize,
    /// Written to a stream (a diskless sync), not a file.
    pub streamed: bool,
}

impl Job {
    /// Starts a save of `dbs` to `path`: `header` holds the file's start
    /// (signature, AUX fields, function libraries); `encode` writes one
    /// key's record. A file target's temporary file is created in its
    /// directory.
    pub fn start(
        dbs: &mut [Db],
        format: Format,
        header: Vec<u8>,
        encode: Encoder,
        target: Target,
        dirty: u64,
    ) -> std::io::Result<Job> {
        let (tx, rx) = sync_channel::<Msg>(QUEUE);
        let (done_tx, done) = sync_channel(1);
        let streamed = matches!(target, Target::Stream { .. });
        let writer = match target {
            Target::File(path) => {
                let dir = path.parent().map(PathBuf::from).unwrap_or_default();
                let tmp = dir.join(format!("temp-bgsave-{}.rdb", std::process::id()));
                let file = std::fs::File::create(&tmp)?;
                std::thread::Builder::new()
                    .name("bgsave-writer".into())
                    .spawn(move || {
                        let r = write_file(file, &tmp, &path, format, rx);
                        if r.is_err() {
                            let _ = std::fs::remove_file(&tmp);
                        }
                        let _ = done_tx.send(r);
                    })?
            }
            Target::Stream {
                out,
                prefix,
                suffix,
            } => std::thread::Builder::new()
                .name("sync-writer".into())
                .spawn(move || {
                    let r = write_stream(out, &prefix, &suffix, format, rx);
                    let _ = done_tx.send(r);
                })?,
        };
        let mut keys_total = 0;
        for db in dbs.iter_mut() {
            db.snap_begin(encode.clone());
            keys_total += db.snap_sizes().0;
        }
        Ok(Job {
            format,
            cur: 0,
            section: None,
            resized: vec![false; dbs.len()],
            buf: header,
            tx: Some(tx),
            done,
            writer: Some(writer),
            eof: false,
            finished: false,
            written_done: 0,
            started: Instant::now(),
            dirty_at_start: dirty,
            keys_total,
            streamed,
        })
    }

    /// Keys written so far.
    pub fn keys_written(&self, dbs: &[Db]) -> usize {
        self.written_done + dbs.iter().map(|d| d.snap_written()).sum::<usize>()
    }

    fn select(&mut self, dbs: &[Db], d: usize) {
        if self.section != Some(d) {
            match self.format {
                Format::Rdb { .. } => {
                    let sizes = (!self.resized[d]).then(|| dbs[d].snap_sizes());
                    write_select(&mut self.buf, d, sizes);
                }
                Format::Aof => super::aof::write_select(&mut self.buf, d),
            }
            self.resized[d] = true;
            self.section = Some(d);
        }
    }

    /// Hands the buffer to the writer; false when its queue is full.
    fn flush(&mut self) -> bool {
        if self.buf.is_empty() {
            return true;
        }
        let Some(tx) = &self.tx else {
            return true;
        };
        match tx.try_send(Msg::Data(std::mem::take(&mut self.buf))) {
            Ok(()) => true,
            Err(TrySendError::Full(Msg::Data(b))) => {
                self.buf = b;
                false
            }
            // The writer stopped (an I/O error): its result says why.
            Err(_) => true,
        }
    }

    /// One slice: about `budget` keys walked, plus what writes put ahead.
    pub fn step(&mut self, dbs: &mut [Db], budget: usize) -> Step {
        if self.eof {
            if !self.finished {
                if !self.flush() {
                    return Step::Waiting;
                }
                match self.tx.as_ref().map(|tx| tx.try_send(Msg::Finish)) {
                    Some(Err(TrySendError::Full(_))) => return Step::Waiting,
                    _ => {
                        self.tx = None;
                        self.finished = true;
                    }
                }
            }
            return match self.done.try_recv() {
                Ok(r) => {
                    if let Some(w) = self.writer.take() {
                        let _ = w.join();
                    }
                    Step::Done(r)
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => Step::Waiting,
                Err(_) => Step::Done(Err("the writer thread ended".into())),
            };
        }
        if self.buf.len() >= CHUNK && !self.flush() {
            return Step::Waiting;
        }
        if let Ok(r) = self.done.try_recv() {
            // The writer gave up early (disk full, ...).
            self.abort(dbs);
            return Step::Done(r.and(Err("the writer stopped early".into())));
        }
        for d in 0..dbs.len() {
            let ahead = dbs[d].snap_take_ahead();
            if !ahead.is_empty() {
                self.select(dbs, d);
                self.buf.extend_from_slice(&ahead);
            }
        }
        while self.cur < dbs.len() && !dbs[self.cur].snap_active() {
            self.cur += 1;
        }
        if self.cur < dbs.len() {
            let d = self.cur;
            self.select(dbs, d);
            if dbs[d].snap_step(&mut self.buf, budget) {
                let ahead = dbs[d].snap_take_ahead();
                self.buf.extend_from_slice(&ahead);
                self.written_done += dbs[d].snap_written();
                dbs[d].snap_end();
                self.cur += 1;
            }
        }
        if self.cur >= dbs.len() {
            if let Format::Rdb { .. } = self.format {
                write_eof(&mut self.buf);
            }
            self.eof = true;
        }
        if self.buf.len() >= CHUNK || self.eof {
            self.flush();
        }
        Step::Progress
    }

    /// Stops the save: the walks end, the writer removes its file.
    pub fn abort(&mut self, dbs: &mut [Db]) {
        for db in dbs.iter_mut() {
            db.snap_end();
        }
        self.tx = None;
        self.buf = Vec::new();
        // A file's writer removes its temporary file: waited for. A
        // stream's may be blocked on a replica that stopped reading (until
        // its link gives up): not waited for under the store lock; it ends
        // by itself, its channel closed.
        if let Some(w) = self.writer.take() {
            if !self.streamed {
                let _ = w.join();
            }
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // Without a Finish the writer deletes its temporary file.
        self.tx = None;
    }
}

/// The writer thread of a stream: `prefix`, what it receives, the CRC64
/// over it (RDB), `suffix`. An ended channel without Finish is an abort.
fn write_stream(
    out: Box<dyn Write + Send>,
    prefix: &[u8],
    suffix: &[u8],
    format: Format,
    rx: Receiver<Msg>,
) -> Result<(), String> {
    let mut w = std::io::BufWriter::with_capacity(256 * 1024, out);
    w.write_all(prefix).map_err(|e| e.to_string())?;
    let crc = relay(&mut w, format, rx)?;
    if let Format::Rdb { .. } = format {
        w.write_all(&crc.to_le_bytes()).map_err(|e| e.to_string())?;
    }
    w.write_all(suffix).map_err(|e| e.to_string())?;
    w.flush().map_err(|e| e.to_string())
}

/// Writes what the walk sends until Finish; the CRC64 of it (RDB with
/// `rdbchecksum`, else 0). Err on a write error or an abort.
fn relay(w: &mut impl Write, format: Format, rx: Receiver<Msg>) -> Result<u64, String> {
    let checksum = format == Format::Rdb { checksum: true };
    let mut crc = 0u64;
    loop {
        match rx.recv() {
            Ok(Msg::Data(b)) => {
                if checksum {
                    crc = crc64(crc, &b);
                }
                w.write_all(&b).map_err(|e| e.to_string())?;
            }
            Ok(Msg::Finish) => return Ok(crc),
            Err(_) => return Err("aborted".into()),
        }
    }
}

/// The writer thread: everything it receives, the CRC64 over it (RDB),
/// sync, rename, sync of the directory. An ended channel without Finish
/// is an abort.
fn write_file(
    file: std::fs::File,
    tmp: &std::path::Path,
    path: &std::path::Path,
    format: Format,
    rx: Receiver<Msg>,
) -> Result<(), String> {
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    let crc = relay(&mut w, format, rx)?;
    if let Format::Rdb { .. } = format {
        w.write_all(&crc.to_le_bytes()).map_err(|e| e.to_string())?;
    }
    let f = w.into_inner().map_err(|e| e.to_string())?;
    f.sync_all().map_err(|e| e.to_string())?;
    std::fs::rename(tmp, path).map_err(|e| e.to_string())?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Persistence status the server keeps (INFO persistence).
#[derive(Debug)]
pub struct SaveState {
    /// The background save in progress.
    pub job: Option<Job>,
    /// BGSAVE SCHEDULE: start one when the current one ends.
    pub scheduled: bool,
    /// rdb_last_bgsave_status.
    pub last_bgsave_ok: bool,
    /// rdb_last_bgsave_time_sec (-1 before the first).
    pub last_bgsave_secs: i64,
    /// When the last background save was tried (unix seconds): after a
    /// failure the save rules wait 5 s before the next try, as Redis.
    pub last_try: i64,
    /// rdb_saves: snapshots written since start-up.
    pub saves: u64,
    /// aof_rewrites: AOF generations started since start-up.
    pub aof_rewrites: u64,
    /// The running job writes this AOF base file (a BGREWRITEAOF), not
    /// the RDB snapshot.
    pub rewrite: Option<super::aof::Part>,
    /// BGREWRITEAOF asked while another job ran.
    pub rewrite_scheduled: bool,
    /// A scheduled rewrite waits until then (ms): a failed first rewrite
    /// is tried again, not at once.
    pub rewrite_not_before: i64,
    /// aof_last_bgrewrite_status.
    pub last_rewrite_ok: bool,
    /// The last AOF write failed (aof_last_write_status), and why: writes
    /// are refused until a write works again.
    pub aof_write_error: Option<String>,
    /// rdb_last_load_keys_loaded / rdb_last_load_keys_expired.
    pub load_keys_loaded: usize,
    pub load_keys_expired: usize,
    /// Wakes the save task (a BGSAVE was started).
    pub wake: std::sync::Arc<tokio::sync::Notify>,
    /// Background RDB jobs (saves and diskless syncs, not AOF rewrites)
    /// ended so far, whether they succeeded, failed or were stopped:
    /// replication waits for the one it started by this count.
    pub rdb_jobs_ended: u64,
    /// Whether the last of them succeeded.
    pub last_rdb_job_ok: bool,
}

impl Default for SaveState {
    fn default() -> Self {
        SaveState {
            job: None,
            scheduled: false,
            last_bgsave_ok: true,
            last_bgsave_secs: -1,
            last_try: 0,
            saves: 0,
            aof_rewrites: 0,
            rewrite: None,
            rewrite_scheduled: false,
            rewrite_not_before: 0,
            last_rewrite_ok: true,
            aof_write_error: None,
            load_keys_loaded: 0,
            load_keys_expired: 0,
            wake: Default::default(),
            rdb_jobs_ended: 0,
            last_rdb_job_ok: false,
        }
    }
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("cur", &self.cur)
            .field("finished", &self.finished)
            .finish()
    }
}
