//! The server's connected clients: what CLIENT LIST shows of each, and the
//! out-of-band output queue through which anyone may push to one (WATCHEX
//! pushes, lock hand-offs, MONITOR lines, later pub/sub messages).
//!
//! `Clients` is the keyspace's [`Outbox`]: the keyspace decides who must be
//! told what, this module delivers it under the pubsub output-buffer limit.
//!
//! Must not touch the keyspace, commands or sockets: it queues bytes and
//! wakes or kills a connection's task through its `ClientSignal`; a client
//! leaves the table only through `Store::client_gone`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::Notify;

use crate::ids::ClientId;
use crate::keyspace::Outbox;

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
    /// Its blocked command was ended from outside with an error after
    /// which the connection closes (Redis's CLIENT_CLOSE_AFTER_REPLY set
    /// by disconnectAllBlockedClients).
    close_after: AtomicBool,
    pending: parking_lot::Mutex<Vec<u8>>,
    has_pending: AtomicBool,
    /// Pushes written without the store lock, not yet in INFO's
    /// total_net_output_bytes (added at the next batch or disconnect).
    pub unreported_out: std::sync::atomic::AtomicU64,
    /// Handed a queued lock since the idle timer last looked: the wait is
    /// over, so the idle `timeout` counts from the hand-off.
    pub granted: AtomicBool,
    /// The connection's own buffers as its task last saw them: query
    /// buffer length and capacity, reply bytes not yet written (CLIENT
    /// LIST of another client, client eviction).
    qbuf: AtomicUsize,
    qbuf_cap: AtomicUsize,
    unsent: AtomicUsize,
}

/// A connection's buffer figures (`ClientSignal::buffers`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Buffers {
    pub qbuf: usize,
    pub qbuf_cap: usize,
    pub unsent: usize,
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

    /// Its task publishes its buffers (plain stores: only it writes them).
    pub fn set_buffers(&self, b: Buffers) {
        self.qbuf.store(b.qbuf, Ordering::Relaxed);
        self.qbuf_cap.store(b.qbuf_cap, Ordering::Relaxed);
        self.unsent.store(b.unsent, Ordering::Relaxed);
    }

    pub fn buffers(&self) -> Buffers {
        Buffers {
            qbuf: self.qbuf.load(Ordering::Relaxed),
            qbuf_cap: self.qbuf_cap.load(Ordering::Relaxed),
            unsent: self.unsent.load(Ordering::Relaxed),
        }
    }

    /// The connection closes once what is queued for it is written (its
    /// task runs nothing more).
    pub fn close_after_reply(&self) {
        self.close_after.store(true, Ordering::SeqCst);
    }

    pub fn close_after_requested(&self) -> bool {
        self.close_after.load(Ordering::SeqCst)
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
    /// CLIENT NO-TOUCH ON (Redis 7.2): CLIENT LIST's `T` flag.
    pub no_touch: bool,
    pub signal: Arc<ClientSignal>,
    /// CLIENT LIST figures kept current by the code that owns them.
    pub info: ClientInfo,
    /// When queued pushes first went over the soft output limit.
    pub obuf_soft_since: Option<i64>,
    /// Its memory as last counted into `Clients`' total (kept only while
    /// `maxmemory-clients` is set).
    mem: usize,
}

impl ClientHandle {
    /// A handle for a connection just registered.
    pub fn new(
        id: ClientId,
        addr: String,
        laddr: String,
        fd: i32,
        created_ms: i64,
        signal: Arc<ClientSignal>,
    ) -> ClientHandle {
        ClientHandle {
            id,
            addr,
            laddr,
            fd,
            name: None,
            lib_name: None,
            lib_ver: None,
            user: "default".into(),
            db: 0,
            resp: 2,
            created_ms,
            last_ms: created_ms,
            last_cmd: "NULL".into(),
            monitor: false,
            no_evict: false,
            no_touch: false,
            signal,
            info: Default::default(),
            obuf_soft_since: None,
            mem: 0,
        }
    }

    /// Its memory as last counted for client eviction.
    pub fn accounted(&self) -> usize {
        self.mem
    }
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

/// `client-output-buffer-limit pubsub hard soft seconds`: what a client may
/// have queued out of band before it is disconnected (0 = no limit).
#[derive(Debug, Clone, Copy, Default)]
pub struct PushLimits {
    pub hard: u64,
    pub soft: u64,
    pub soft_seconds: u64,
}

/// Every connected client by id, in id order (CLIENT LIST's order).
#[derive(Debug, Default)]
pub struct Clients {
    map: BTreeMap<ClientId, ClientHandle>,
    limits: PushLimits,
    /// `maxmemory-clients` in bytes (0: no client eviction).
    eviction_limit: usize,
    /// The sum of the handles' `mem` while eviction is on.
    mem_total: usize,
    /// Whether `mem_total` was counted since eviction went on.
    fresh: bool,
}

impl Clients {
    pub fn new(limits: PushLimits) -> Clients {
        Clients {
            map: BTreeMap::new(),
            limits,
            eviction_limit: 0,
            mem_total: 0,
            fresh: false,
        }
    }

    /// `maxmemory-clients` as bytes (0: off). Turned off, the counts are
    /// forgotten; turned on, they are counted afresh at the next check.
    pub fn set_eviction_limit(&mut self, limit: usize) {
        if limit == 0 && self.eviction_limit != 0 {
            for c in self.map.values_mut() {
                c.mem = 0;
            }
            self.mem_total = 0;
            self.fresh = false;
        }
        self.eviction_limit = limit;
    }

    pub fn eviction_limit(&self) -> usize {
        self.eviction_limit
    }

    /// Records what a client uses now.
    pub fn account(&mut self, id: ClientId, mem: usize) {
        if let Some(c) = self.map.get_mut(&id) {
            self.mem_total = self.mem_total.saturating_sub(c.mem) + mem;
            c.mem = mem;
        }
    }

    /// Every client was just counted.
    pub fn mark_fresh(&mut self) {
        self.fresh = true;
    }

    pub fn is_fresh(&self) -> bool {
        self.fresh
    }

    /// What the clients use together, as last counted.
    pub fn mem_total(&self) -> usize {
        self.mem_total
    }

    /// Out-of-band bytes queued for a client count at once.
    fn account_queued(&mut self, id: ClientId, n: usize) {
        if self.eviction_limit != 0 {
            if let Some(c) = self.map.get_mut(&id) {
                c.mem += n;
                self.mem_total += n;
            }
        }
    }

    pub fn set_limits(&mut self, limits: PushLimits) {
        self.limits = limits;
    }

    pub fn get(&self, id: &ClientId) -> Option<&ClientHandle> {
        self.map.get(id)
    }

    pub fn get_mut(&mut self, id: &ClientId) -> Option<&mut ClientHandle> {
        self.map.get_mut(id)
    }

    pub fn insert(&mut self, handle: ClientHandle) {
        self.map.insert(handle.id, handle);
    }

    /// Removes a client's handle (its task may still be running down).
    pub fn remove(&mut self, id: &ClientId) -> Option<ClientHandle> {
        let c = self.map.remove(id)?;
        self.mem_total = self.mem_total.saturating_sub(c.mem);
        Some(c)
    }

    pub fn values(&self) -> impl Iterator<Item = &ClientHandle> {
        self.map.values()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Queues out-of-band bytes for a client and wakes its task, under the
    /// pubsub output-buffer limit: a client that does not read its pushes
    /// is disconnected instead of growing server memory without bound.
    pub fn push_limited(&mut self, id: ClientId, bytes: &[u8]) {
        let PushLimits {
            hard,
            soft,
            soft_seconds: secs,
        } = self.limits;
        let Some(c) = self.map.get_mut(&id) else {
            return;
        };
        // With the replies its task holds unwritten (a client that stops
        // reading stops taking them too).
        let used = (c.signal.queue(bytes) + c.signal.buffers().unsent) as u64;
        c.signal.wake.notify_one();
        if self.eviction_limit != 0 {
            c.mem += bytes.len();
            self.mem_total += bytes.len();
        }
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

    /// Queues out-of-band bytes for a client (no limit: MONITOR) and wakes
    /// its task.
    pub fn push_to(&mut self, id: ClientId, bytes: &[u8]) {
        if let Some(c) = self.map.get_mut(&id) {
            c.signal.queue(bytes);
            c.signal.wake.notify_one();
        }
        self.account_queued(id, bytes.len());
    }
}

impl Outbox for Clients {
    fn protocol(&self, id: ClientId) -> Option<u8> {
        self.map
            .get(&id)
            .filter(|c| !c.signal.is_killed())
            .map(|c| c.resp)
    }

    fn push(&mut self, id: ClientId, bytes: &[u8]) {
        self.push_limited(id, bytes);
    }

    fn lock_granted(&mut self, id: ClientId) {
        if let Some(c) = self.map.get(&id) {
            c.signal.granted.store(true, Ordering::Relaxed);
        }
    }
}
