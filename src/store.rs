//! The shared server state behind one lock: databases, clients, config, stats.
//!
//! Commands run with `&mut Store` held, one at a time, like Redis's single
//! thread; that is what makes MULTI/EXEC, scripts and WATCHEX's
//! check-and-register atomic without per-key locking. Connection tasks parse
//! and write outside the lock, so the lock is only held for execution.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::Notify;

use crate::blocking::{Blocking, Wait, WaitId};
use crate::config::Config;
use crate::db::entry::FLAG_BOUND;
use crate::db::{Cause, Change, Db, KeyEvent};
use crate::watch::{acquired_frame, push_frame, Bindings, Watches};

pub use crate::ids::{ClientId, DbKey};

/// Wakes a connection task from outside: new pushes to write, or a kill.
/// Also holds the connection's out-of-band output (pushes, MONITOR lines):
/// queued under the store lock by whoever caused it, taken by the
/// connection's own task. It has its own small lock so that a fan-out to
/// thousands of watchers does not make each of them take the store lock
/// again just to collect one push.
#[derive(Debug, Default)]
pub struct ClientSignal {
    pub wake: Notify,
    /// Separate from `wake` so a task blocked writing can wait for a kill
    /// without eating push wake-ups.
    pub kill: Notify,
    pub killed: AtomicBool,
    pending: parking_lot::Mutex<Vec<u8>>,
    has_pending: AtomicBool,
    /// Pushes written without the store lock, not yet in INFO's
    /// total_net_output_bytes (added at the next batch or disconnect).
    pub unreported_out: std::sync::atomic::AtomicU64,
    /// Handed a queued lock since the idle timer last looked: the wait is
    /// over, so the idle `timeout` counts from the hand-off.
    pub granted: AtomicBool,
}

impl ClientSignal {
    /// Queues out-of-band bytes; returns the queue's new length.
    pub fn queue(&self, bytes: &[u8]) -> usize {
        let mut p = self.pending.lock();
        p.extend_from_slice(bytes);
        self.has_pending.store(true, Ordering::Release);
        p.len()
    }

    /// Appends the queued bytes to `into`; returns how many.
    pub fn take_pending(&self, into: &mut Vec<u8>) -> usize {
        if !self.has_pending.load(Ordering::Acquire) {
            return 0;
        }
        let mut p = self.pending.lock();
        self.has_pending.store(false, Ordering::Relaxed);
        let n = p.len();
        into.append(&mut p);
        if p.capacity() > 64 * 1024 {
            *p = Vec::new();
        }
        n
    }

    pub fn pending_len(&self) -> usize {
        if !self.has_pending.load(Ordering::Acquire) {
            return 0;
        }
        self.pending.lock().len()
    }

    fn drop_pending(&self) {
        *self.pending.lock() = Vec::new();
        self.has_pending.store(false, Ordering::Relaxed);
    }

    pub fn kill(&self) {
        self.killed.store(true, Ordering::SeqCst);
        self.wake.notify_one();
        self.kill.notify_one();
    }
    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }
}

/// What the server knows about one connection (CLIENT LIST, KILL, pushes).
#[derive(Debug)]
pub struct ClientHandle {
    pub id: ClientId,
    pub addr: String,
    pub laddr: String,
    pub fd: i32,
    pub name: Option<Bytes>,
    pub lib_name: Option<Bytes>,
    pub lib_ver: Option<Bytes>,
    pub user: String,
    pub db: usize,
    pub resp: u8,
    pub created_ms: i64,
    pub last_ms: i64,
    pub last_cmd: String,
    pub monitor: bool,
    pub no_evict: bool,
    pub signal: Arc<ClientSignal>,
    /// CLIENT LIST figures kept current by the code that owns them.
    pub info: ClientInfo,
    /// When queued pushes first went over the soft output limit.
    pub obuf_soft_since: Option<i64>,
}

/// Per-client figures for CLIENT LIST / CLIENT INFO.
#[derive(Debug, Default, Clone)]
pub struct ClientInfo {
    /// Subscribed channels, patterns and shard channels (pub/sub code keeps
    /// these; any nonzero count makes the client type "pubsub").
    pub sub: usize,
    pub psub: usize,
    pub ssub: usize,
    /// Commands queued inside MULTI (None outside a transaction), and the
    /// bytes of their arguments.
    pub multi: Option<usize>,
    pub multi_mem: usize,
    /// Buffer sizes seen at the client's last command (set by `execute`):
    /// free query-buffer space, reply-buffer capacity and peak use.
    pub qbuf_free: usize,
    pub rbs: usize,
    pub rbp: usize,
}

#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub total_connections: u64,
    pub total_commands: u64,
    pub rejected_connections: u64,
    pub expired_keys: u64,
    pub evicted_keys: u64,
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    pub net_input_bytes: u64,
    pub net_output_bytes: u64,
}

pub struct Store {
    pub dbs: Vec<Db>,
    pub clients: BTreeMap<ClientId, ClientHandle>,
    pub monitors: Vec<ClientId>,
    pub config: Config,
    pub stats: Stats,
    /// Changes since the last save (INFO persistence, LASTSAVE semantics).
    pub dirty: u64,
    pub next_client_id: ClientId,
    pub start_ms: i64,
    pub lastsave: i64,
    pub active_expire: bool,
    /// Set by SHUTDOWN; the server's main loop watches it.
    pub shutdown_requested: bool,
    /// WATCHEX registrations.
    pub watches: Watches,
    /// SETTP keys and their owning connections.
    pub bindings: Bindings,
    /// Everything waiting for a key: blocked commands and `SETTP ... QUEUE`
    /// lock waiters.
    pub blocking: Blocking,
    /// `commands::settle` is serving waiters (it is not re-entrant).
    pub settling: bool,
}

impl Store {
    pub fn new(config: Config) -> Store {
        crate::db::evict::set_globals(
            config.maxmemory_policy,
            config.lfu_log_factor,
            config.lfu_decay_time,
        );
        let n = config.databases.max(1);
        let now = crate::util::now_ms();
        let timer = std::sync::Arc::new(crate::db::ExpiryTimer::default());
        Store {
            dbs: (0..n)
                .map(|i| {
                    let mut db = Db::new(i);
                    db.timer = timer.clone();
                    db
                })
                .collect(),
            clients: BTreeMap::new(),
            monitors: Vec::new(),
            config,
            stats: Stats::default(),
            dirty: 0,
            next_client_id: 1,
            start_ms: now,
            lastsave: now / 1000,
            active_expire: true,
            shutdown_requested: false,
            watches: Watches::default(),
            bindings: Bindings::default(),
            blocking: Blocking::default(),
            settling: false,
        }
    }

    /// Passes every recorded change, in order, to `keyspace_changed` (which
    /// may record further changes: loop until quiet). Serving the keys this
    /// made ready is the dispatcher's `commands::settle`.
    /// `by` is the client whose command is running (None for expiry cycles).
    pub fn drain_events(&mut self, by: Option<ClientId>) {
        // Runs after every command: the databases with changes are found
        // by iterating, not indexing each of the 16 (most calls find one).
        while let Some(i) = self.dbs.iter().position(|d| !d.events.is_empty()) {
            let mut evs = std::mem::take(&mut self.dbs[i].events);
            for ev in evs.drain(..) {
                self.keyspace_changed(&ev, by);
            }
            // Keep a small allocation for the next command; drop a huge
            // one (a million-key DEL) instead of holding it forever.
            if evs.capacity() > 4096 {
                evs = Vec::new();
            }
            if self.dbs[i].events.is_empty() {
                self.dbs[i].events = evs;
                // Changes happened here: deletions may leave the
                // object slab mostly empty.
                self.dbs[i].compact_objects();
            }
        }
    }

    /// Serves lock waiter `wid` (`SETTP ... QUEUE`) if its key is gone:
    /// creates the key with the waiter's value, bound to its connection,
    /// and pushes it `ACQUIRED`. A waiter whose connection has ended (or was
    /// killed for its output buffer and is not yet cleaned up) is dropped.
    /// Returns whether the key is taken afterwards (by this waiter or
    /// already), so the caller stops walking the line.
    pub fn hand_over_lock(&mut self, wid: WaitId) -> bool {
        let Some(w) = self.blocking.get(wid) else {
            return false;
        };
        let Wait::Lock { value, ttl_ms } = &w.wait else {
            return false;
        };
        let (client, dk, value, ttl_ms) = (w.client, w.keys[0].clone(), value.clone(), *ttl_ms);
        let (db, key) = (dk.0, &dk.1);
        if self.dbs[db].exists(key) {
            return true;
        }
        let resp = self
            .clients
            .get(&client)
            .filter(|c| !c.signal.is_killed())
            .map(|c| c.resp);
        self.blocking.remove(wid);
        let Some(resp) = resp else {
            return false;
        };
        self.dbs[db].set_str(key, &value, false, false);
        self.dbs[db].set_flag(key, FLAG_BOUND, true);
        if let Some(ttl) = ttl_ms {
            let at = crate::util::cmd_time_ms().saturating_add(ttl);
            self.dbs[db].set_expire(key, at);
        }
        self.bindings.bind(client, dk.clone());
        if let Some(c) = self.clients.get(&client) {
            c.signal.granted.store(true, Ordering::Relaxed);
        }
        self.push_limited(client, &acquired_frame(resp == 3, key, &value));
        true
    }

    /// THE keyspace hook: called once for every change to every key (write,
    /// delete, expiry, flush, swap), in the order the changes happened, with
    /// the connection that caused it when there is one. WATCH, WATCHEX,
    /// keyspace notifications and client tracking attach here.
    pub fn keyspace_changed(&mut self, ev: &KeyEvent, _by: Option<ClientId>) {
        self.dirty += 1;
        match ev.cause {
            Cause::Expired => self.stats.expired_keys += 1,
            Cause::Evicted => self.stats.evicted_keys += 1,
            _ => {}
        }
        if self.bindings.is_empty() && self.watches.is_empty() && self.blocking.is_empty() {
            return;
        }
        match &ev.change {
            Change::Key {
                key,
                existed,
                exists,
            } => {
                let dk: DbKey = (ev.db, key.clone());
                if self.bindings.owner(&dk).is_some() {
                    // A binding follows its key like a TTL: it ends when the
                    // key is deleted or replaced by a new value. Judge by the
                    // key as it is now, not by this event: a later change in
                    // the same command may have bound it again (SETTP over a
                    // lazily expired key records the expiry, then binds).
                    let still = self.dbs[ev.db]
                        .peek_flags(key)
                        .is_some_and(|f| f & FLAG_BOUND != 0);
                    if !still {
                        self.bindings.unbind(&dk);
                    }
                }
                self.blocking.signal(&dk);
                if existed != exists {
                    self.watch_transition(&dk, *exists);
                }
            }
            Change::Flushed => {
                for dk in self.bindings.keys_in(ev.db) {
                    self.bindings.unbind(&dk);
                }
                for dk in self.watches.present_in(ev.db) {
                    self.watch_transition(&dk, false);
                }
                self.blocking.signal_db(ev.db);
            }
            Change::Swapped { with } => {
                // Bindings follow their keys to the other database, as a
                // TTL (and MOVE's binding) does; the key's FLAG_BOUND went
                // with its contents. SWAPDB records one event per side:
                // swap the registry once, on the lower side's.
                if ev.db < *with {
                    let (a, b) = (ev.db, *with);
                    let mut moved = Vec::new();
                    for dk in self
                        .bindings
                        .keys_in(a)
                        .into_iter()
                        .chain(self.bindings.keys_in(b))
                    {
                        if let Some(owner) = self.bindings.unbind(&dk) {
                            moved.push((owner, dk));
                        }
                    }
                    for (owner, (db, key)) in moved {
                        self.bindings
                            .bind(owner, (if db == a { b } else { a }, key));
                    }
                }
                for dk in self.watches.keys_in(ev.db) {
                    let now = self.dbs[ev.db].peek_flags(&dk.1).is_some();
                    self.watch_transition(&dk, now);
                }
                // Keys that exist after the swap are skipped by hand_over.
                self.blocking.signal_db(ev.db);
            }
        }
    }

    /// Releases everything a connection held: its watches, its places in
    /// every line, its bound keys (deleted, so watchers get DEL; the lines
    /// they free become ready for the dispatcher to serve), its handle.
    /// Runs under the store lock, so no other command can observe the
    /// connection half-gone. Safe to run twice.
    pub fn client_gone(&mut self, id: ClientId) {
        crate::util::set_cmd_time();
        // Watches go first so the connection is not sent its own keys' DELs,
        // and queue places so its own keys are not handed back to it.
        self.watches.remove_all(id);
        self.blocking.remove_client(id);
        // Bound keys are deleted under the same lock as the disconnect: no
        // later command of another client can see them; watchers get DEL.
        for (db, key) in self.bindings.keys_of(id) {
            self.dbs[db].remove_for(&key, crate::db::Cause::Disconnect);
            self.bindings.unbind(&(db, key));
        }
        self.drain_events(None);
        if let Some(c) = self.clients.remove(&id) {
            let n = c.signal.unreported_out.swap(0, Ordering::Relaxed);
            self.stats.net_output_bytes += n;
        }
        self.monitors.retain(|m| *m != id);
    }

    /// RENAME/MOVE: a bound key's binding moves with it to its new name.
    pub fn move_binding(&mut self, from: DbKey, to: DbKey) {
        if let Some(owner) = self.bindings.unbind(&from) {
            self.dbs[to.0].set_flag_quiet(&to.1, FLAG_BOUND, true);
            self.bindings.bind(owner, to);
        }
    }

    /// Pushes ADD/DEL to the watchers of `dk` if its reported state flips.
    fn watch_transition(&mut self, dk: &DbKey, exists: bool) {
        if self.watches.is_empty() {
            return;
        }
        let ids = self.watches.transition(dk, exists);
        if ids.is_empty() {
            return;
        }
        // One encoding per protocol, shared by every watcher.
        let frames = [
            push_frame(false, &dk.1, exists),
            push_frame(true, &dk.1, exists),
        ];
        for id in ids {
            let resp3 = self.clients.get(&id).is_some_and(|c| c.resp == 3);
            self.push_limited(id, &frames[usize::from(resp3)]);
        }
    }

    /// `push_to` under the pubsub output-buffer limit
    /// (`client-output-buffer-limit pubsub hard soft seconds`): a watcher
    /// that does not read its pushes is disconnected instead of growing
    /// server memory without bound.
    pub fn push_limited(&mut self, id: ClientId, bytes: &[u8]) {
        let (hard, soft, secs) = (
            self.config.pubsub_hard_limit,
            self.config.pubsub_soft_limit,
            self.config.pubsub_soft_seconds,
        );
        let Some(c) = self.clients.get_mut(&id) else {
            return;
        };
        let used = c.signal.queue(bytes) as u64;
        c.signal.wake.notify_one();
        let over_hard = hard > 0 && used > hard;
        let over_soft = soft > 0 && used > soft;
        let soft_expired = match (over_soft, c.obuf_soft_since) {
            (false, _) => {
                c.obuf_soft_since = None;
                false
            }
            (true, None) => {
                c.obuf_soft_since = Some(crate::util::now_ms());
                secs == 0
            }
            (true, Some(t)) => {
                crate::util::now_ms() - t
                    >= i64::try_from(secs).unwrap_or(i64::MAX).saturating_mul(1000)
            }
        };
        if over_hard || soft_expired {
            tracing::warn!("closing client {id}: pubsub output buffer limit reached");
            c.signal.drop_pending();
            c.signal.kill();
        }
    }

    /// Queues out-of-band bytes for a client and wakes its task.
    pub fn push_to(&mut self, id: ClientId, bytes: &[u8]) {
        if let Some(c) = self.clients.get_mut(&id) {
            c.signal.queue(bytes);
            c.signal.wake.notify_one();
        }
    }

    /// Deletes expired keys in every database, bounded per call.
    pub fn active_expire_cycle(&mut self, budget: usize) -> usize {
        if !self.active_expire {
            return 0;
        }
        let now = crate::util::set_cmd_time();
        let mut n = 0;
        for db in &mut self.dbs {
            if db.next_expire().is_some_and(|w| w <= now) {
                n += db.expire_cycle(now, budget);
            }
        }
        if n > 0 {
            self.drain_events(None);
        }
        n
    }

    /// Evicts keys under `maxmemory-policy` until memory in use is within
    /// `maxmemory` (Redis's performEvictions). Returns false when it is
    /// still over and nothing more may be evicted (noeviction, only bound
    /// or, under a volatile policy, persistent keys left): the caller then
    /// refuses commands that would grow memory. Evictions go through the
    /// keyspace hook as `evicted` deletions.
    pub fn perform_evictions(&mut self) -> bool {
        let max = self.config.maxmemory;
        if max == 0 {
            return true;
        }
        let policy = self.config.maxmemory_policy;
        let samples = self.config.maxmemory_samples;
        // Bounded per call, as Redis's eviction-tenacity time limit; a
        // call that had to stop while still evicting lets the command run
        // (Redis's EVICT_RUNNING) and the next command evicts more.
        for _ in 0..10_000 {
            if used_memory() <= max {
                return true;
            }
            if policy == crate::db::evict::Policy::NoEviction {
                return false;
            }
            let best = self
                .dbs
                .iter()
                .enumerate()
                .filter_map(|(i, db)| db.evict_sample(policy, samples).map(|(s, k)| (s, i, k)))
                .max_by_key(|(s, _, _)| *s);
            let Some((_, db, key)) = best else {
                return false;
            };
            self.dbs[db].remove_for(&key, Cause::Evicted);
            self.drain_events(None);
        }
        true
    }

    /// Total keys over all databases.
    pub fn total_keys(&self) -> usize {
        self.dbs.iter().map(|d| d.len()).sum()
    }
}

/// Bytes allocated by the process (jemalloc's `stats.allocated`, refreshed):
/// the `used_memory` that `maxmemory` is compared with.
pub fn used_memory() -> u64 {
    use tikv_jemalloc_ctl::{epoch, stats};
    let _ = epoch::advance();
    stats::allocated::read().unwrap_or(0) as u64
}
