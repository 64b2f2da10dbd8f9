//! The "script in progress" state that lives outside the store lock.
//!
//! A script runs with the store locked for its whole run (that is what
//! makes it atomic), so a connection that needs the store while a script
//! runs cannot take the lock to learn that it should reply BUSY. The
//! answer, as in Redis, is a small state beside the lock:
//!
//! - the running script (`begin`/`end`, under the store lock) publishes
//!   that it runs, and its Lua count hook (every 100000 instructions, as
//!   Redis's) marks it `busy` once it has run past `busy-reply-threshold`
//!   and stops it when `kill` was asked;
//! - a connection task never blocks on the store lock for long: it tries
//!   it for at most a millisecond at a time, and while a script is `busy`
//!   it answers its commands itself (`commands::answer_busy`): BUSY, or
//!   SCRIPT KILL / SHUTDOWN NOSAVE, which only set flags here.
//!
//! The script itself runs inside `tokio::task::block_in_place`, so the
//! runtime's workers stay free for the other connections while it runs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;

pub const BUSY_ERR: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
/// BUSY while a function runs (Redis's shared.slowscripterr).
pub const BUSY_FUNCTION_ERR: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";
pub const NOTBUSY_ERR: &str = "NOTBUSY No scripts in execution right now.";
pub const UNKILLABLE_ERR: &str = "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.";

/// Shared between the store (the script side) and every connection task.
#[derive(Debug)]
pub struct Gate {
    running: AtomicBool,
    busy: AtomicBool,
    killed: AtomicBool,
    /// Killed even though it wrote (SHUTDOWN NOSAVE).
    forced: AtomicBool,
    wrote: AtomicBool,
    /// When the running script started, in ms since `epoch`.
    started_ms: AtomicU64,
    threshold_ms: AtomicU64,
    /// The ACL users as the script began (they cannot change while it
    /// runs): AUTH and HELLO check credentials with them while busy.
    users: parking_lot::Mutex<Option<crate::acl::Users>>,
    /// The keyspace's change count as of the script's start or its last
    /// write: a WATCH answered while busy takes effect later, dirty if the
    /// count moved past this (a change after the WATCH).
    dirty: AtomicU64,
    epoch: Instant,
    /// The running function's name and command (FUNCTION STATS); None
    /// while an EVAL script runs.
    function: parking_lot::Mutex<Option<(String, Vec<Bytes>)>>,
    /// Library and function counts, for FUNCTION STATS while busy.
    libraries: AtomicU64,
    functions: AtomicU64,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            running: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            killed: AtomicBool::new(false),
            forced: AtomicBool::new(false),
            wrote: AtomicBool::new(false),
            started_ms: AtomicU64::new(0),
            threshold_ms: AtomicU64::new(0),
            users: parking_lot::Mutex::new(None),
            dirty: AtomicU64::new(0),
            epoch: Instant::now(),
            function: parking_lot::Mutex::new(None),
            libraries: AtomicU64::new(0),
            functions: AtomicU64::new(0),
        }
    }
}

/// What SCRIPT KILL found.
#[derive(Debug, PartialEq, Eq)]
pub enum Kill {
    Killed,
    NotBusy,
    Unkillable,
    /// SCRIPT KILL of a function or FUNCTION KILL of a script: this BUSY.
    WrongKind(&'static str),
}

impl Gate {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// A script starts (store lock held). `threshold_ms` 0 never turns busy.
    pub fn begin(&self, threshold_ms: u64, users: crate::acl::Users, dirty: u64) {
        *self.users.lock() = Some(users);
        self.dirty.store(dirty, Ordering::SeqCst);
        self.busy.store(false, Ordering::SeqCst);
        self.killed.store(false, Ordering::SeqCst);
        self.forced.store(false, Ordering::SeqCst);
        self.wrote.store(false, Ordering::SeqCst);
        self.threshold_ms.store(threshold_ms, Ordering::SeqCst);
        self.started_ms.store(self.now_ms(), Ordering::SeqCst);
        *self.function.lock() = None;
        self.running.store(true, Ordering::SeqCst);
    }

    /// The run that began is the function `name`, called by `command`.
    pub fn set_function(&self, name: &str, command: Vec<Bytes>) {
        *self.function.lock() = Some((name.to_string(), command));
    }

    /// The running function (name, command, ms running), if one runs.
    pub fn running_function(&self) -> Option<(String, Vec<Bytes>, u64)> {
        if !self.running() {
            return None;
        }
        let f = self.function.lock().clone()?;
        Some((f.0, f.1, self.elapsed_ms()))
    }

    /// The BUSY error for the run in progress.
    pub fn busy_error(&self) -> &'static str {
        if self.function.lock().is_some() {
            BUSY_FUNCTION_ERR
        } else {
            BUSY_ERR
        }
    }

    pub fn set_counts(&self, libraries: usize, functions: usize) {
        self.libraries.store(libraries as u64, Ordering::SeqCst);
        self.functions.store(functions as u64, Ordering::SeqCst);
    }

    /// (libraries, functions) loaded.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.libraries.load(Ordering::SeqCst),
            self.functions.load(Ordering::SeqCst),
        )
    }

    /// The script ended (store lock still held).
    pub fn end(&self) {
        self.running.store(false, Ordering::SeqCst);
        *self.function.lock() = None;
        *self.users.lock() = None;
        self.busy.store(false, Ordering::SeqCst);
        self.killed.store(false, Ordering::SeqCst);
        self.forced.store(false, Ordering::SeqCst);
    }

    /// Whether a connection opened while busy must authenticate.
    pub fn auth_required(&self) -> bool {
        self.users
            .lock()
            .as_ref()
            .is_some_and(|u| u.auth_required())
    }

    /// The keyspace's change count as of the running script's last write.
    pub fn dirty(&self) -> u64 {
        self.dirty.load(Ordering::SeqCst)
    }

    /// A write of the script ran: the keyspace's change count after it.
    pub fn note_dirty(&self, dirty: u64) {
        self.dirty.store(dirty, Ordering::SeqCst);
    }

    /// The ACL users as the running script began.
    pub fn users(&self) -> Option<crate::acl::Users> {
        self.users.lock().clone()
    }

    pub fn running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    /// Past `busy-reply-threshold`: other clients get BUSY.
    pub fn busy(&self) -> bool {
        self.busy.load(Ordering::SeqCst)
    }

    pub fn set_wrote(&self) {
        self.wrote.store(true, Ordering::SeqCst);
    }

    /// Called by the count hook: turns busy when the threshold passed
    /// (returns true the first time, to log it), and tells whether the
    /// script must stop.
    pub fn tick(&self) -> (bool, bool) {
        let mut turned = false;
        if !self.busy() {
            let t = self.threshold_ms.load(Ordering::SeqCst);
            let elapsed = self.now_ms() - self.started_ms.load(Ordering::SeqCst);
            if t > 0 && elapsed >= t {
                self.busy.store(true, Ordering::SeqCst);
                turned = true;
            }
        }
        (turned, self.killed.load(Ordering::SeqCst))
    }

    pub fn elapsed_ms(&self) -> u64 {
        self.now_ms() - self.started_ms.load(Ordering::SeqCst)
    }

    /// SCRIPT KILL (`eval`) or FUNCTION KILL (from a connection answering
    /// while busy), as Redis's scriptKill.
    pub fn kill(&self, eval: bool) -> Kill {
        if !self.running() {
            return Kill::NotBusy;
        }
        if self.wrote.load(Ordering::SeqCst) && !self.forced.load(Ordering::SeqCst) {
            return Kill::Unkillable;
        }
        let function = self.function.lock().is_some();
        if eval && function {
            return Kill::WrongKind(BUSY_FUNCTION_ERR);
        }
        if !eval && !function {
            return Kill::WrongKind(BUSY_ERR);
        }
        self.killed.store(true, Ordering::SeqCst);
        Kill::Killed
    }

    /// SHUTDOWN NOSAVE while busy: stop the script whatever it did.
    pub fn force_kill(&self) {
        self.forced.store(true, Ordering::SeqCst);
        self.killed.store(true, Ordering::SeqCst);
    }
}
