//! The append-only file in Redis 7's multi-part layout: in `appenddirname`,
//! a manifest (`<appendfilename>.manifest`) naming one base file (an RDB
//! snapshot, `<name>.<seq>.base.rdb`, or with `aof-use-rdb-preamble no`
//! the commands that rebuild the data, `<name>.<seq>.base.aof`) and the
//! incremental files
//! (`<name>.<seq>.incr.aof`) written since, in RESP, each command preceded
//! by a SELECT when its database differs from the last one written.
//!
//! Owns the files and their bytes. Must not touch the keyspace, the
//! config or the dispatcher: `super::append` decides what to log (the
//! effects stream's Command records) and replays the files through the
//! command runner it is given.
//!
//! Durability. Logged commands go to a buffer; the buffer is written to
//! the incremental file (write(2)) before the replies of the commands
//! that filled it are sent. With `appendfsync always` the replies also
//! wait until an fsync covered their bytes: one fsync thread syncs
//! whatever has been written and releases every waiter up to that point
//! (group commit: one fsync for all connections that wrote meanwhile).
//! With `everysec` the same thread syncs about once a second; with `no`
//! the kernel decides.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use bytes::Bytes;

use crate::config::Fsync;

/// One file of the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub name: String,
    pub seq: u64,
    /// 'b' base, 'i' incremental, 'h' history (to delete).
    pub kind: char,
}

/// The manifest: the base and the incremental files, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    pub base: Option<Part>,
    pub incr: Vec<Part>,
    pub history: Vec<Part>,
}

impl Manifest {
    /// Parses Redis 7's manifest text (aofLoadManifestFromFile).
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let mut m = Manifest::default();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let args = crate::resp::split_args(line.as_bytes())
                .ok_or("Invalid AOF manifest file format")?;
            if args.len() < 6 || args.len() % 2 != 0 {
                return Err("Invalid AOF manifest file format".into());
            }
            let (mut name, mut seq, mut kind) = (None, None, None);
            for kv in args.chunks(2) {
                let v = String::from_utf8_lossy(&kv[1]).into_owned();
                match &kv[0][..] {
                    b"file" => name = Some(v),
                    b"seq" => seq = v.parse::<u64>().ok(),
                    b"type" => kind = v.chars().next(),
                    _ => {}
                }
            }
            let (Some(name), Some(seq), Some(kind)) = (name, seq, kind) else {
                return Err("Invalid AOF manifest file format".into());
            };
            if name.contains('/') {
                return Err("File can't be a path, just a filename".into());
            }
            let part = Part { name, seq, kind };
            match kind {
                'b' => {
                    if m.base.is_some() {
                        return Err("Found duplicate base file information".into());
                    }
                    m.base = Some(part);
                }
                'i' => {
                    if m.incr.last().is_some_and(|p| p.seq >= seq) {
                        return Err("Found a non-monotonic sequence number".into());
                    }
                    m.incr.push(part);
                }
                'h' => m.history.push(part),
                _ => return Err("Unknown AOF file type".into()),
            }
        }
        if m.base.is_none() && m.incr.is_empty() {
            return Err("Found an empty AOF manifest".into());
        }
        Ok(m)
    }

    /// The manifest's text, as Redis writes it.
    pub fn format(&self) -> String {
        let mut s = String::new();
        let mut line = |p: &Part| {
            s.push_str(&format!("file {} seq {} type {}\n", p.name, p.seq, p.kind));
        };
        if let Some(b) = &self.base {
            line(b);
        }
        for p in &self.history {
            line(p);
        }
        for p in &self.incr {
            line(p);
        }
        s
    }
}

/// What the fsync thread and the connections share, outside the store lock.
///
/// Offsets count bytes logged since start-up, across files: `queued`
/// (handed over by `Aof::write_out`) >= `written` (write(2) done) >=
/// `durable` (an fsync covered them). With `always`, `write_out` only
/// queues the batch: the fsync thread writes everything queued and syncs
/// it in one go, so neither the write(2) nor the fsync runs under the
/// store lock, and a write(2) never waits behind an fsync of the same
/// file there. With the other policies `write_out` writes at once.
pub struct Sync {
    queued: AtomicU64,
    written: AtomicU64,
    durable: AtomicU64,
    policy: AtomicU8,
    file: Mutex<Option<Arc<std::fs::File>>>,
    wake: Condvar,
    /// Queued bytes not yet written (`always`).
    pending: Mutex<Vec<u8>>,
    /// Held while bytes go to the file (the thread's write and fsync, a
    /// drain from the store's side): writes stay in order.
    io: Mutex<()>,
    /// Bytes in the current file, written.
    file_len: AtomicU64,
    /// The last write by the fsync thread failed, and why (cleared by one
    /// that works): writes are refused meanwhile, as after any AOF write
    /// error.
    error: Mutex<Option<String>>,
    /// `error` is set.
    failing: std::sync::atomic::AtomicBool,
    /// Wakes connections waiting for `durable`.
    pub synced: tokio::sync::Notify,
    /// What an fsync covered (`durable` also counts what `appendfsync no`
    /// leaves to the kernel): WAITAOF's local acknowledgement.
    fsynced: AtomicU64,
    /// A WAITAOF waits: each fsync is worth a look at the waiters.
    acks_wanted: std::sync::atomic::AtomicBool,
    stopped: std::sync::atomic::AtomicBool,
}

impl Default for Sync {
    fn default() -> Self {
        Sync {
            queued: AtomicU64::new(0),
            written: AtomicU64::new(0),
            durable: AtomicU64::new(0),
            policy: AtomicU8::new(Fsync::EverySec.code()),
            file: Mutex::new(None),
            wake: Condvar::new(),
            pending: Mutex::new(Vec::new()),
            io: Mutex::new(()),
            file_len: AtomicU64::new(0),
            error: Mutex::new(None),
            failing: std::sync::atomic::AtomicBool::new(false),
            synced: tokio::sync::Notify::new(),
            fsynced: AtomicU64::new(0),
            acks_wanted: std::sync::atomic::AtomicBool::new(false),
            stopped: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl Sync {
    /// Bytes logged so far.
    pub fn queued(&self) -> u64 {
        self.queued.load(Ordering::Acquire)
    }

    /// Bytes an fsync covered (not what `appendfsync no` left to the
    /// kernel), as Redis's fsynced_reploff.
    pub fn fsynced(&self) -> u64 {
        self.fsynced.load(Ordering::Acquire)
    }

    /// Asks for `synced` to be watched for WAITAOF (`true`), or says
    /// nobody waits any more.
    pub fn want_acks(&self, on: bool) {
        self.acks_wanted.store(on, Ordering::Release);
    }

    pub fn acks_wanted(&self) -> bool {
        self.acks_wanted.load(Ordering::Acquire)
    }

    /// The offset a reply must wait for before it is sent (`always`
    /// only): everything logged so far, so no reply shows a change that
    /// is not on disk yet. While the file cannot be written, only the
    /// replies of batches that `logged` changes wait (the others, reads
    /// and INFO, go out: writes are refused meanwhile).
    pub fn must_wait(&self, logged: bool) -> Option<u64> {
        if self.policy.load(Ordering::Relaxed) != Fsync::Always.code() {
            return None;
        }
        if !logged && self.failing.load(Ordering::Relaxed) {
            return None;
        }
        let q = self.queued.load(Ordering::Acquire);
        (self.durable.load(Ordering::Acquire) < q).then_some(q)
    }

    pub fn is_durable(&self, upto: u64) -> bool {
        self.durable.load(Ordering::Acquire) >= upto
    }

    /// Waits until an fsync covered `upto` bytes.
    pub async fn wait_durable(&self, upto: u64) {
        loop {
            let n = self.synced.notified();
            if self.is_durable(upto) {
                return;
            }
            self.kick();
            n.await;
        }
    }

    /// Ends the fsync thread (the server stops).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        self.kick();
    }

    fn kick(&self) {
        let _g = self.file.lock().expect("aof sync lock");
        self.wake.notify_one();
    }

    /// The fsync thread's write failure, if the last one failed.
    fn error(&self) -> Option<String> {
        if !self.failing.load(Ordering::Relaxed) {
            return None;
        }
        self.error.lock().expect("aof error lock").clone()
    }

    /// Writes the queued bytes to `file` (the caller holds `io`). A
    /// partial write is cut off again (as Redis does) and the bytes stay
    /// queued, so a retry never leaves half a command in the file.
    fn write_pending(&self, file: &std::fs::File) -> Result<(), String> {
        let bytes = std::mem::take(&mut *self.pending.lock().expect("aof pending lock"));
        if bytes.is_empty() {
            return Ok(());
        }
        let len = self.file_len.load(Ordering::Acquire);
        if let Err(e) = { file }.write_all(&bytes) {
            let _ = file.set_len(len);
            let mut p = self.pending.lock().expect("aof pending lock");
            let newer = std::mem::replace(&mut *p, bytes);
            p.extend_from_slice(&newer);
            let e = strerror(&e);
            *self.error.lock().expect("aof error lock") = Some(e.clone());
            self.failing.store(true, Ordering::Relaxed);
            return Err(e);
        }
        self.file_len
            .fetch_add(bytes.len() as u64, Ordering::AcqRel);
        self.written.fetch_add(bytes.len() as u64, Ordering::AcqRel);
        if self.failing.swap(false, Ordering::Relaxed) {
            *self.error.lock().expect("aof error lock") = None;
        }
        Ok(())
    }

    /// The fsync thread: with `always`, writes what was queued and syncs
    /// it as soon as there is some; with `everysec`, syncs about once a
    /// second; then releases the waiters. Ends with the process.
    pub fn run(self: Arc<Self>) {
        while !self.stopped.load(Ordering::Relaxed) {
            let file = {
                let g = self.file.lock().expect("aof sync lock");
                // Checked under the lock `kick` takes: a kick that came
                // while the last fsync ran is not lost.
                let behind = self.policy.load(Ordering::Relaxed) == Fsync::Always.code()
                    && self.durable.load(Ordering::Acquire) < self.queued.load(Ordering::Acquire);
                let g = if behind {
                    g
                } else {
                    self.wake
                        .wait_timeout(g, Duration::from_secs(1))
                        .expect("aof sync lock")
                        .0
                };
                g.clone()
            };
            let policy = self.policy.load(Ordering::Relaxed);
            {
                let _io = self.io.lock().expect("aof io lock");
                if let Some(f) = &file {
                    if self.write_pending(f).is_err() {
                        drop(_io);
                        // Tried again soon; writes are refused meanwhile.
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                }
                let w = self.written.load(Ordering::Acquire);
                if let Some(f) = &file {
                    if policy != Fsync::No.code() && self.durable.load(Ordering::Acquire) < w {
                        if let Err(e) = f.sync_data() {
                            tracing::warn!("fsync of the AOF failed: {e}");
                            continue;
                        }
                        self.durable.fetch_max(w, Ordering::AcqRel);
                        self.fsynced.fetch_max(w, Ordering::AcqRel);
                    }
                }
                if policy == Fsync::No.code() {
                    self.durable.fetch_max(w, Ordering::AcqRel);
                }
            }
            self.synced.notify_waiters();
        }
    }
}

/// An open AOF: the manifest and the incremental file being appended to.
pub struct Aof {
    dir: PathBuf,
    name: String,
    pub manifest: Manifest,
    file: Arc<std::fs::File>,
    buf: Vec<u8>,
    /// The database of the last SELECT written to the current file.
    db: Option<usize>,
    /// Bytes in the current incremental file.
    size: u64,
    /// Bytes of every file of the manifest (aof_current_size).
    total: u64,
    /// `total` after the last rewrite or the load (aof_base_size): the
    /// automatic rewrite compares the growth with it.
    pub base_total: u64,
    pub sync: Arc<Sync>,
    /// Logging goes to a temporary file the manifest does not name yet:
    /// the AOF was just turned on and its first base is being written
    /// (Redis's AOF_WAIT_REWRITE). The rewrite's end names it.
    pending: bool,
}

fn io(e: std::io::Error) -> String {
    e.to_string()
}

/// An I/O error as C's strerror says it (Redis's texts carry that).
pub fn strerror(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Writes `bytes` to `path` durably: a temporary file, fsync, rename, the
/// directory's fsync.
pub fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    if let Some(d) = path.parent() {
        if let Ok(d) = std::fs::File::open(d) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// The base file of generation `seq`: `.base.rdb` or `.base.aof`.
fn base_part(name: &str, seq: u64, rdb: bool) -> Part {
    let ext = if rdb { "rdb" } else { "aof" };
    Part {
        name: format!("{name}.{seq}.base.{ext}"),
        seq,
        kind: 'b',
    }
}

impl Aof {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The manifest's path for `appendfilename` in `dir`.
    pub fn manifest_path(dir: &Path, name: &str) -> PathBuf {
        dir.join(format!("{name}.manifest"))
    }

    /// Redis 7's upgrade of a Redis 6 AOF: `old` (the single
    /// `appendfilename` in `dir`) moves into the AOF directory as the base
    /// of a manifest with no incremental file yet.
    pub fn upgrade(old: &Path, dir: &Path, name: &str) -> Result<Manifest, String> {
        std::fs::create_dir_all(dir).map_err(io)?;
        std::fs::rename(old, dir.join(name)).map_err(io)?;
        let manifest = Manifest {
            base: Some(Part {
                name: name.to_string(),
                seq: 1,
                kind: 'b',
            }),
            incr: Vec::new(),
            history: Vec::new(),
        };
        write_durably(
            &Self::manifest_path(dir, name),
            manifest.format().as_bytes(),
        )?;
        Ok(manifest)
    }

    /// Reads the manifest in `dir`, if there is one.
    pub fn read_manifest(dir: &Path, name: &str) -> Result<Option<Manifest>, String> {
        match std::fs::read_to_string(Self::manifest_path(dir, name)) {
            Ok(t) => Manifest::parse(&t).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Starts a new generation: `base` (an RDB file's bytes, or commands
    /// when not `rdb`) as base file seq n+1 and an empty incremental file
    /// seq n+1; the manifest is switched to them atomically and the old
    /// files are deleted.
    pub fn create(
        dir: &Path,
        name: &str,
        (base, rdb): (&[u8], bool),
        previous: Option<&Manifest>,
        sync: Arc<Sync>,
    ) -> Result<Aof, String> {
        std::fs::create_dir_all(dir).map_err(io)?;
        let seq = previous
            .map(|m| {
                let b = m.base.as_ref().map_or(0, |p| p.seq);
                let i = m.incr.last().map_or(0, |p| p.seq);
                b.max(i)
            })
            .unwrap_or(0)
            + 1;
        let base_part = base_part(name, seq, rdb);
        let incr_part = Part {
            name: format!("{name}.{seq}.incr.aof"),
            seq,
            kind: 'i',
        };
        write_durably(&dir.join(&base_part.name), base)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(dir.join(&incr_part.name))
            .map_err(io)?;
        file.sync_all().map_err(io)?;
        let manifest = Manifest {
            base: Some(base_part),
            incr: vec![incr_part],
            history: Vec::new(),
        };
        write_durably(
            &Self::manifest_path(dir, name),
            manifest.format().as_bytes(),
        )?;
        if let Some(old) = previous {
            for p in old.base.iter().chain(&old.incr).chain(&old.history) {
                if manifest.base.as_ref().is_some_and(|b| b.name == p.name)
                    || manifest.incr.iter().any(|i| i.name == p.name)
                {
                    continue;
                }
                let _ = std::fs::remove_file(dir.join(&p.name));
            }
        }
        Ok(Self::with_file(dir, name, manifest, file, 0, sync))
    }

    /// The temporary incremental file of an AOF being turned on.
    fn temp_name(name: &str) -> String {
        format!("temp-{name}.incr")
    }

    /// Turning the AOF on: logging starts at once into a temporary file,
    /// while the first base is written in the background (`begin_rewrite`
    /// then `finish_rewrite`, which names both in a new manifest). Until
    /// then the files on disk are `previous` (or none) and stay as they are.
    pub fn open_pending(
        dir: &Path,
        name: &str,
        previous: Option<Manifest>,
        sync: Arc<Sync>,
    ) -> Result<Aof, String> {
        std::fs::create_dir_all(dir).map_err(io)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(dir.join(Self::temp_name(name)))
            .map_err(io)?;
        let mut aof = Self::with_file(dir, name, previous.unwrap_or_default(), file, 0, sync);
        aof.pending = true;
        Ok(aof)
    }

    /// Whether the first base of this AOF is still to be written.
    pub fn is_pending(&self) -> bool {
        self.pending
    }

    /// Opens the last incremental file of `manifest` for appending (after
    /// a load), cut to `valid` bytes if its tail was a partial command.
    pub fn resume(
        dir: &Path,
        name: &str,
        manifest: Manifest,
        valid: Option<u64>,
        sync: Arc<Sync>,
    ) -> Result<Aof, String> {
        let mut manifest = manifest;
        if manifest.incr.is_empty() {
            // An upgraded Redis 6 file is a base alone: logging goes to a
            // new incremental file, which the manifest now names.
            let seq = manifest.base.as_ref().map_or(0, |b| b.seq) + 1;
            manifest.incr.push(Part {
                name: format!("{name}.{seq}.incr.aof"),
                seq,
                kind: 'i',
            });
            std::fs::File::create(dir.join(&manifest.incr[0].name)).map_err(io)?;
            write_durably(
                &Self::manifest_path(dir, name),
                manifest.format().as_bytes(),
            )?;
        }
        let last = manifest.incr.last().expect("an incremental file");
        let path = dir.join(&last.name);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io)?;
        if let Some(v) = valid {
            file.set_len(v).map_err(io)?;
        }
        let size = file.metadata().map_err(io)?.len();
        Ok(Self::with_file(dir, name, manifest, file, size, sync))
    }

    fn with_file(
        dir: &Path,
        name: &str,
        manifest: Manifest,
        file: std::fs::File,
        size: u64,
        sync: Arc<Sync>,
    ) -> Aof {
        let file = Arc::new(file);
        *sync.file.lock().expect("aof sync lock") = Some(file.clone());
        sync.file_len.store(size, Ordering::Release);
        // Offsets count on across files (waiters keep their targets);
        // what the previous file had was synced when it closed.
        let w = sync.written.load(Ordering::Acquire);
        sync.durable.fetch_max(w, Ordering::AcqRel);
        sync.fsynced.fetch_max(w, Ordering::AcqRel);
        let mut aof = Aof {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            manifest,
            file,
            buf: Vec::new(),
            db: None,
            size,
            total: 0,
            base_total: 0,
            sync,
            pending: false,
        };
        aof.total = aof.files_size();
        aof.base_total = aof.total;
        aof
    }

    /// The sizes of the manifest's files on disk.
    fn files_size(&self) -> u64 {
        self.manifest
            .base
            .iter()
            .chain(&self.manifest.incr)
            .filter_map(|p| std::fs::metadata(self.dir.join(&p.name)).ok())
            .map(|m| m.len())
            .sum()
    }

    /// Logged bytes not yet written to the file (aof_buffer_length).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// aof_current_size.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The next sequence number of this AOF's files.
    fn next_seq(&self) -> u64 {
        let b = self.manifest.base.as_ref().map_or(0, |p| p.seq);
        let i = self.manifest.incr.last().map_or(0, |p| p.seq);
        b.max(i) + 1
    }

    /// A background rewrite begins: logging moves to a new incremental
    /// file, which the manifest lists at once after the old ones (a crash
    /// before the new base is done loads old base, old increments and
    /// this one). Returns the base file the rewrite must write (an RDB
    /// file when `rdb`, commands otherwise).
    pub fn begin_rewrite(&mut self, rdb: bool) -> Result<Part, String> {
        if self.pending {
            // Logging already goes to a file of its own.
            self.write_out()?;
            tracing::info!(
                "Creating AOF incr file {} on background rewrite",
                Self::temp_name(&self.name)
            );
            return Ok(base_part(&self.name, self.next_seq(), rdb));
        }
        self.sync_now()?;
        let seq = self.next_seq();
        let incr = Part {
            name: format!("{}.{seq}.incr.aof", self.name),
            seq,
            kind: 'i',
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(self.dir.join(&incr.name))
            .map_err(io)?;
        tracing::info!("Creating AOF incr file {} on background rewrite", incr.name);
        // Empty: the manifest's write below syncs the directory entry.
        let mut manifest = self.manifest.clone();
        manifest.incr.push(incr);
        write_durably(
            &Self::manifest_path(&self.dir, &self.name),
            manifest.format().as_bytes(),
        )?;
        self.manifest = manifest;
        let file = Arc::new(file);
        *self.sync.file.lock().expect("aof sync lock") = Some(file.clone());
        self.sync.file_len.store(0, Ordering::Release);
        let w = self.sync.written.load(Ordering::Acquire);
        self.sync.durable.fetch_max(w, Ordering::AcqRel);
        self.sync.fsynced.fetch_max(w, Ordering::AcqRel);
        self.file = file;
        self.db = None;
        self.size = 0;
        Ok(base_part(&self.name, seq, rdb))
    }

    /// The rewrite's base file is written: the manifest becomes that base
    /// and the incremental file opened at the start; older files go.
    pub fn finish_rewrite(&mut self, base: Part) -> Result<(), String> {
        let incr = if self.pending {
            // The temporary file becomes the generation's incremental file
            // (renamed while open: logging goes on into it).
            let incr = Part {
                name: format!("{}.{}.incr.aof", self.name, base.seq),
                seq: base.seq,
                kind: 'i',
            };
            let temp = Self::temp_name(&self.name);
            std::fs::rename(self.dir.join(&temp), self.dir.join(&incr.name)).map_err(io)?;
            tracing::info!(
                "Successfully renamed the temporary AOF incr file {temp} into {}",
                incr.name
            );
            incr
        } else {
            match self.manifest.incr.last() {
                Some(i) => i.clone(),
                None => return Err("no incremental file".into()),
            }
        };
        let old = std::mem::replace(
            &mut self.manifest,
            Manifest {
                base: Some(base),
                incr: vec![incr],
                history: Vec::new(),
            },
        );
        if let Err(e) = write_durably(
            &Self::manifest_path(&self.dir, &self.name),
            self.manifest.format().as_bytes(),
        ) {
            let new = std::mem::replace(&mut self.manifest, old);
            if self.pending {
                let _ = std::fs::rename(
                    self.dir.join(&new.incr[0].name),
                    self.dir.join(Self::temp_name(&self.name)),
                );
            }
            return Err(e);
        }
        self.pending = false;
        for p in old.base.iter().chain(&old.incr).chain(&old.history) {
            let keep = self.manifest.base.iter().chain(&self.manifest.incr);
            if !keep.into_iter().any(|k| k.name == p.name) {
                // Redis's words; the removal here is not deferred.
                tracing::info!("Removing the history file {} in the background", p.name);
                let _ = std::fs::remove_file(self.dir.join(&p.name));
            }
        }
        self.total = self.files_size() + self.buf.len() as u64;
        self.base_total = self.total;
        Ok(())
    }

    pub fn set_policy(&self, p: Fsync) {
        self.sync.policy.store(p.code(), Ordering::Relaxed);
    }

    /// Logs one command run in database `db`.
    pub fn feed(&mut self, db: usize, args: &[Bytes]) {
        if self.db != Some(db) {
            let d = db.to_string();
            encode(&mut self.buf, &[b"SELECT", d.as_bytes()]);
            self.db = Some(db);
        }
        encode(&mut self.buf, args);
    }

    /// Hands the buffer to the file before the replies go out: with
    /// `always` it is queued for the fsync thread (which writes and syncs
    /// it; the replies wait for that), otherwise written now. Err while
    /// writes to the file fail.
    pub fn write_out(&mut self) -> Result<(), String> {
        let always = self.sync.policy.load(Ordering::Relaxed) == Fsync::Always.code();
        if self.buf.is_empty() {
            return match self.sync.error() {
                Some(e) => Err(e),
                None => Ok(()),
            };
        }
        let n = self.buf.len() as u64;
        if always {
            self.sync
                .pending
                .lock()
                .expect("aof pending lock")
                .extend_from_slice(&self.buf);
            self.sync.queued.fetch_add(n, Ordering::AcqRel);
            self.buf.clear();
            self.size += n;
            self.total += n;
            self.sync.kick();
            return match self.sync.error() {
                Some(e) => Err(e),
                None => Ok(()),
            };
        }
        // Queued bytes (the policy was `always` a moment ago) go first.
        if self.sync.queued.load(Ordering::Acquire) != self.sync.written.load(Ordering::Acquire) {
            let _io = self.sync.io.lock().expect("aof io lock");
            self.sync.write_pending(&self.file)?;
        }
        let len = self.sync.file_len.load(Ordering::Acquire);
        if let Err(e) = (&*self.file).write_all(&self.buf) {
            // A partial write is cut off again (as Redis does), so the
            // retry does not leave half a command in the file.
            let _ = self.file.set_len(len);
            return Err(strerror(&e));
        }
        self.sync.file_len.fetch_add(n, Ordering::AcqRel);
        self.sync.queued.fetch_add(n, Ordering::AcqRel);
        self.sync.written.fetch_add(n, Ordering::AcqRel);
        self.size += n;
        self.total += n;
        self.buf.clear();
        Ok(())
    }

    /// Writes and fsyncs everything now (shutdown, turning the AOF off,
    /// before a switch to a new file).
    pub fn sync_now(&mut self) -> Result<(), String> {
        self.write_out()?;
        let _io = self.sync.io.lock().expect("aof io lock");
        self.sync.write_pending(&self.file)?;
        self.file.sync_data().map_err(io)
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Aof {
    fn drop(&mut self) {
        let _ = self.sync_now();
        if self.pending {
            // Never named by a manifest: nothing on disk needs it.
            let _ = std::fs::remove_file(self.dir.join(Self::temp_name(&self.name)));
        }
        // What could not be written is dropped with the file.
        {
            let _io = self.sync.io.lock().expect("aof io lock");
            self.sync.pending.lock().expect("aof pending lock").clear();
            self.sync.failing.store(false, Ordering::Relaxed);
            *self.sync.error.lock().expect("aof error lock") = None;
        }
        let q = self.sync.queued.load(Ordering::Acquire);
        self.sync.written.fetch_max(q, Ordering::AcqRel);
        if let Ok(mut g) = self.sync.file.lock() {
            *g = None;
        }
        // Everything written is synced now: release the waiters.
        let w = self.sync.written.load(Ordering::Acquire);
        self.sync.durable.fetch_max(w, Ordering::AcqRel);
        self.sync.fsynced.fetch_max(w, Ordering::AcqRel);
        self.sync.synced.notify_waiters();
    }
}

/// A command in RESP, as Redis writes it to the AOF.
pub fn encode<A: AsRef<[u8]>>(out: &mut Vec<u8>, args: &[A]) {
    // Room for all of it at once (a length takes at most 20 digits):
    // growing piece by piece reallocated a SET's encoding three or four
    // times, about 1,500 instructions per propagated command.
    out.reserve(23 + args.iter().map(|a| a.as_ref().len() + 25).sum::<usize>());
    let mut n = itoa::Buffer::new();
    out.push(b'*');
    out.extend_from_slice(n.format(args.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    for a in args {
        out.push(b'$');
        let a = a.as_ref();
        out.extend_from_slice(n.format(a.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// One command read back from an AOF, or where reading stopped.
pub enum Read {
    Command(Vec<Bytes>),
    /// A `#...` line (Redis 7's annotations, such as `#TS:`): the text
    /// after the `#`, without the line end.
    Annotation(Vec<u8>),
    /// The file ends inside a command: the bytes before it are valid.
    Truncated {
        valid: usize,
    },
    /// Not an AOF command at `at`.
    Bad {
        at: usize,
    },
}

/// Reads the command at `*pos` of an AOF's bytes (None at the end).
pub fn read_command(p: &[u8], pos: &mut usize) -> Option<Read> {
    let start = *pos;
    if start >= p.len() {
        return None;
    }
    if p[start] == b'#' {
        // An annotation line, skipped by Redis's loader.
        return Some(match p[start..].iter().position(|&c| c == b'\n') {
            Some(nl) => {
                *pos = start + nl + 1;
                let text = &p[start + 1..start + nl];
                Read::Annotation(text.strip_suffix(b"\r").unwrap_or(text).to_vec())
            }
            None => Read::Truncated { valid: start },
        });
    }
    let line = |pos: &mut usize, lead: u8| -> Result<i64, bool> {
        // Err(true): truncated; Err(false): bad.
        if *pos >= p.len() {
            return Err(true);
        }
        if p[*pos] != lead {
            return Err(false);
        }
        let Some(nl) = p[*pos..].windows(2).position(|w| w == b"\r\n") else {
            return Err(true);
        };
        let v = std::str::from_utf8(&p[*pos + 1..*pos + nl])
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or(false)?;
        *pos += nl + 2;
        Ok(v)
    };
    let fail = |trunc: bool| {
        Some(if trunc {
            Read::Truncated { valid: start }
        } else {
            Read::Bad { at: start }
        })
    };
    let n = match line(pos, b'*') {
        Ok(n) if n >= 1 => n,
        Ok(_) => return fail(false),
        Err(t) => return fail(t),
    };
    let mut args = Vec::with_capacity(n.min(1024) as usize);
    for _ in 0..n {
        let len = match line(pos, b'$') {
            Ok(l) if l >= 0 => l as usize,
            Ok(_) => return fail(false),
            Err(t) => return fail(t),
        };
        if *pos + len + 2 > p.len() {
            return fail(true);
        }
        if &p[*pos + len..*pos + len + 2] != b"\r\n" {
            return fail(false);
        }
        args.push(Bytes::copy_from_slice(&p[*pos..*pos + len]));
        *pos += len + 2;
    }
    Some(Read::Command(args))
}

/// Items per command in an AOF-format base (Redis's
/// AOF_REWRITE_ITEMS_PER_CMD).
const ITEMS_PER_CMD: usize = 64;

/// A command's header: `*n` and its name.
fn command_head(out: &mut Vec<u8>, argc: usize, name: &[u8]) {
    let mut n = itoa::Buffer::new();
    out.push(b'*');
    out.extend_from_slice(n.format(argc).as_bytes());
    out.extend_from_slice(b"\r\n");
    bulk(out, name);
}

/// One argument.
fn bulk(out: &mut Vec<u8>, a: &[u8]) {
    let mut n = itoa::Buffer::new();
    out.push(b'$');
    out.extend_from_slice(n.format(a.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(a);
    out.extend_from_slice(b"\r\n");
}

/// Writes `items` (each `width` arguments) as `name key item...` commands
/// of at most ITEMS_PER_CMD items each.
fn batched<I, F>(
    out: &mut Vec<u8>,
    name: &[u8],
    key: &[u8],
    len: usize,
    width: usize,
    items: I,
    mut put: F,
) where
    I: Iterator,
    F: FnMut(&mut Vec<u8>, I::Item),
{
    let mut left = len;
    let mut in_cmd = 0;
    for item in items {
        if in_cmd == 0 {
            let count = left.min(ITEMS_PER_CMD);
            command_head(out, 2 + count * width, name);
            bulk(out, key);
            in_cmd = count;
        }
        put(out, item);
        in_cmd -= 1;
        left -= 1;
    }
}

/// SELECT in an AOF-format base: the keys that follow are database `db`'s.
pub fn write_select(out: &mut Vec<u8>, db: usize) {
    let d = db.to_string();
    encode(out, &[b"SELECT", d.as_bytes()]);
}

/// The annotation that carries the last fencing token given (an AOF
/// base in commands has no AUX field; Redis skips `#` lines).
pub const FENCE_ANNOTATION: &str = "lk-fence-token:";

/// Writes the fencing-token annotation.
pub fn write_fence(out: &mut Vec<u8>, token: u64) {
    out.extend_from_slice(format!("#{FENCE_ANNOTATION}{token}\r\n").as_bytes());
}

/// A function library as the command that loads it.
pub fn write_function(out: &mut Vec<u8>, code: &[u8]) {
    encode(out, &[&b"FUNCTION"[..], b"LOAD", code]);
}

/// One key as the commands that rebuild it, for a base in AOF format
/// (`aof-use-rdb-preamble no`), as Redis's rewrite writes them: SET,
/// RPUSH, SADD, ZADD or HMSET in batches of 64 items (a hash's field TTLs
/// as HPEXPIREAT), then PEXPIREAT.
pub fn write_key(out: &mut Vec<u8>, key: &[u8], v: crate::db::ValueRef<'_>, expire: Option<i64>) {
    use crate::db::ValueRef;
    use crate::types::Value;
    match v {
        ValueRef::Str(s) => encode(out, &[b"SET", key, s]),
        ValueRef::Obj(Value::Str(s)) => encode(out, &[b"SET", key, s]),
        ValueRef::Obj(Value::List(l)) => {
            batched(out, b"RPUSH", key, l.len(), 1, l.iter(), |o, e| bulk(o, &e))
        }
        ValueRef::Obj(Value::Set(s)) => batched(out, b"SADD", key, s.len(), 1, s.iter(), |o, m| {
            bulk(o, &m.to_cow())
        }),
        ValueRef::Obj(Value::ZSet(z)) => {
            batched(out, b"ZADD", key, z.len(), 2, z.iter(), |o, (m, score)| {
                bulk(o, crate::util::fmt_double(score).as_bytes());
                bulk(o, m);
            })
        }
        ValueRef::Obj(Value::Hash(h)) => {
            batched(out, b"HMSET", key, h.len(), 2, h.iter(), |o, (f, v)| {
                bulk(o, f);
                bulk(o, v);
            });
            // Field TTLs (Redis 7.4's rewriteHashObject): one HPEXPIREAT
            // per field that has one.
            if h.ttl_count() > 0 {
                for (f, _) in h.iter() {
                    if let Some(w) = h.field_ttl(f) {
                        let w = w.to_string();
                        encode(out, &[b"HPEXPIREAT", key, w.as_bytes(), b"FIELDS", b"1", f]);
                    }
                }
            }
        }
        ValueRef::Obj(Value::Stream(s)) => write_stream(out, key, s),
    }
    if let Some(when) = expire {
        let w = when.to_string();
        encode(out, &[b"PEXPIREAT", key, w.as_bytes()]);
    }
}

/// A stream as Redis's rewrite writes it: an XADD per entry (an empty
/// stream as an XADD that MAXLEN 0 removes at once), XSETID with its
/// counters, then per group XGROUP CREATE and its consumers, as XCLAIM
/// per pending entry or XGROUP CREATECONSUMER for one with none.
fn write_stream(out: &mut Vec<u8>, key: &[u8], s: &crate::types::Stream) {
    use crate::types::stream::StreamId;
    let id = |i: StreamId| i.to_bytes();
    if !s.is_empty() {
        for e in s.range(StreamId::MIN, StreamId::MAX, false) {
            let mut parts: Vec<Vec<u8>> = vec![b"XADD".to_vec(), key.to_vec(), id(e.id)];
            for (f, v) in e.fields() {
                parts.push(f.to_vec());
                parts.push(v.to_vec());
            }
            let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
            encode(out, &refs);
        }
    } else {
        encode(
            out,
            &[&b"XADD"[..], key, b"MAXLEN", b"0", b"0-1", b"x", b"y"],
        );
    }
    let added = s.entries_added().to_string();
    encode(
        out,
        &[
            &b"XSETID"[..],
            key,
            &id(s.last_id()),
            b"ENTRIESADDED",
            added.as_bytes(),
            b"MAXDELETEDID",
            &id(s.max_deleted()),
        ],
    );
    for (name, g) in s.groups() {
        let read = g.entries_read.to_string();
        encode(
            out,
            &[
                &b"XGROUP"[..],
                b"CREATE",
                key,
                name,
                &id(g.last_id),
                b"ENTRIESREAD",
                read.as_bytes(),
            ],
        );
        for (cname, c) in g.consumers() {
            if c.pending() == 0 {
                encode(out, &[&b"XGROUP"[..], b"CREATECONSUMER", key, name, cname]);
                continue;
            }
            for pid in c.pending_ids() {
                let Some(n) = g.pending(&pid) else { continue };
                let (t, k) = (n.delivery_time.to_string(), n.delivery_count.to_string());
                encode(
                    out,
                    &[
                        &b"XCLAIM"[..],
                        key,
                        name,
                        cname,
                        b"0",
                        &id(pid),
                        b"TIME",
                        t.as_bytes(),
                        b"RETRYCOUNT",
                        k.as_bytes(),
                        b"JUSTID",
                        b"FORCE",
                    ],
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trip_and_errors() {
        let text = "file appendonly.aof.1.base.rdb seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n";
        let m = Manifest::parse(text).unwrap();
        assert_eq!(m.base.as_ref().unwrap().name, "appendonly.aof.1.base.rdb");
        assert_eq!(m.incr.len(), 1);
        assert_eq!(m.format(), text);
        assert!(Manifest::parse("").is_err());
        assert!(Manifest::parse("file a seq 1").is_err());
        assert!(Manifest::parse("file a/b seq 1 type i").is_err());
        assert!(Manifest::parse("file a seq 2 type i\nfile b seq 1 type i").is_err());
    }

    #[test]
    fn commands_read_back_and_tails() {
        let mut b = Vec::new();
        encode(&mut b, &[&b"SET"[..], b"k", b"v"]);
        encode(&mut b, &[&b"DEL"[..], b"k"]);
        let mut pos = 0;
        assert!(matches!(read_command(&b, &mut pos), Some(Read::Command(a)) if a.len() == 3));
        assert!(matches!(read_command(&b, &mut pos), Some(Read::Command(a)) if a.len() == 2));
        assert!(read_command(&b, &mut pos).is_none());
        let first = b.len() - "*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n".len();
        for cut in first + 1..b.len() {
            let mut pos = first;
            assert!(
                matches!(read_command(&b[..cut], &mut pos), Some(Read::Truncated { valid }) if valid == first),
                "{cut}"
            );
        }
        let mut pos = 0;
        assert!(matches!(
            read_command(b"hello", &mut pos),
            Some(Read::Bad { at: 0 })
        ));
    }
}
