//! Replication in Redis's own protocol, the primary's side: the
//! replication IDs and offset, the backlog, and the table of replicas
//! (each one a connection that sent SYNC or PSYNC, run by
//! `runtime::link`).
//!
//! The stream replicas get is the effects stream (`crate::effects`): a
//! [`Feed`] attached as a sink takes the Command records at the one
//! propagation point (`persist::aof_write_out`), in order, and turns them
//! into bytes with the AOF's encoding (a SELECT when the database
//! changes). Lock records are not sent: a Redis replica gets exactly what
//! Redis would send it. Every byte fed counts in `master_repl_offset`, goes
//! to the backlog and to each replica past the start of its sync.
//!
//! A full sync uses the same walk as BGSAVE (`persist::snapshot`), without
//! fork: to the RDB file (`repl-diskless-sync no`), or streamed to the
//! replicas' sockets in Redis's `$EOF:<mark>` framing. The offset in
//! `+FULLRESYNC` is the stream's when the walk starts; what is fed after
//! it waits in the replica's buffer until the RDB is sent.
//!
//! Owns: the replication state (`State`, behind [`Replication`], shared
//! by the sink, the store and the link tasks). Must not touch the server,
//! the dispatcher or the runtime: it works on a persistence `Host` and the
//! config it is given.

pub mod backlog;
pub mod locklog;
mod outbuf;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::config::Config;
use crate::effects::{Effect, Sink};
use crate::ids::ClientId;
use backlog::Backlog;
use locklog::LockLog;
pub use outbuf::OutBuf;

/// What a connection told with REPLCONF before SYNC/PSYNC.
#[derive(Debug, Clone, Default)]
pub struct Hello {
    /// `listening-port` (0: not given).
    pub port: u16,
    /// `ip-address`.
    pub ip: Option<String>,
    /// `capa eof`: takes the diskless `$EOF:` framing.
    pub eof: bool,
    /// `capa psync2`: `+CONTINUE <replid>`.
    pub psync2: bool,
    /// `capa latchkey`: a Latchkey replica, which takes lock records
    /// (`locklog`).
    pub latchkey: bool,
    /// `lk-seq`: the last lock record it applied (to continue partially).
    pub lk_seq: Option<u64>,
    /// `rdb-only 1`: the RDB only, no command stream (redis-cli --rdb).
    pub rdb_only: bool,
    /// `rdb-filter-only`: an RDB without the data, with the function
    /// libraries when true (redis-cli --replica, --functions-rdb).
    pub filter: Option<bool>,
    /// SYNC/PSYNC made the connection a replica: after this batch its
    /// task runs the link.
    pub handoff: bool,
}

/// Where a replica is in its sync (Redis's SLAVE_STATE_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Waits for a snapshot to start.
    WaitBgsaveStart,
    /// Its snapshot is being made (`+FULLRESYNC` sent).
    WaitBgsaveEnd,
    /// The RDB is being sent.
    SendBulk,
    /// Takes the command stream.
    Online,
}

impl LinkState {
    /// Redis's replstateToString.
    fn name(self) -> &'static str {
        match self {
            LinkState::WaitBgsaveStart | LinkState::WaitBgsaveEnd => "wait_bgsave",
            LinkState::SendBulk => "send_bulk",
            LinkState::Online => "online",
        }
    }
}

/// The RDB a replica is sent.
pub enum Payload {
    /// The snapshot file, opened when it was done: `$<len>\r\n` and its bytes.
    File { file: std::fs::File, len: u64 },
    /// The walk's bytes as they are made, framed (`$EOF:<mark>\r\n ...
    /// <mark>`); the channel ends with the walk.
    Stream(tokio::sync::mpsc::Receiver<Bytes>),
    /// A filtered RDB, made at once and framed as a streamed one.
    Bytes(Vec<u8>),
}

/// One replica.
struct Link {
    hello: Hello,
    /// The peer's IP (when no `ip-address` was given).
    peer_ip: String,
    state: LinkState,
    /// SYNC (not PSYNC): sends no ACKs.
    pre_psync: bool,
    /// Bytes written before anything else (`+FULLRESYNC`, `+CONTINUE`).
    head: Vec<u8>,
    /// The RDB, once there is one to send.
    payload: Option<Payload>,
    /// The stream since its sync's offset, not yet written.
    buf: OutBuf,
    /// What the link's task took last and is writing (or wrote): counted
    /// with `buf` as the replica's output buffer until it takes again.
    in_flight: usize,
    /// After a diskless transfer the stream waits for the first ACK.
    stream_on_ack: bool,
    /// Attached to the running snapshot.
    in_job: bool,
    ack_off: i64,
    ack_time: Instant,
    /// Since when the link waits for its snapshot to start.
    waiting_since: Instant,
    /// Why the link must close (output buffer limits, a failed sync).
    close: Option<String>,
    soft_since: Option<Instant>,
    /// Since when `buf` holds only records that may wait
    /// ([`LAZY_RECORDS`]): None when it is empty or holds anything else.
    lazy_since: Option<Instant>,
    wake: Arc<Notify>,
    /// Interrupts the task's writes when the link must close.
    abort: Arc<Notify>,
}

/// How Redis's log names a replica: its announced or peer IP and its
/// listening port (replicationGetSlaveName).
pub fn replica_name(hello: &Hello, peer_ip: &str) -> String {
    let ip = hello.ip.as_deref().unwrap_or(peer_ip);
    let ip = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_string()
    };
    match hello.port {
        0 => format!("{ip}:<unknown-replica-port>"),
        p => format!("{ip}:{p}"),
    }
}

impl Link {
    /// The replica's output buffer, as allocated: what waits, and what
    /// its task is writing (Redis counts every byte not yet in the
    /// socket, in the blocks that hold them).
    fn output(&self) -> usize {
        self.head.capacity() + self.buf.allocated() + self.in_flight
    }

    fn name(&self) -> String {
        replica_name(&self.hello, &self.peer_ip)
    }

    fn ip(&self) -> &str {
        self.hello.ip.as_deref().unwrap_or(&self.peer_ip)
    }
}

/// The snapshot replicas wait on.
struct Job {
    /// Streamed to sockets (diskless), or the RDB file.
    socket: bool,
    /// `persist` jobs ended before it started: one more means it ended.
    ended_before: u64,
}

/// INFO stats' sync counters.
#[derive(Debug, Default, Clone, Copy)]
pub struct SyncStats {
    pub full: u64,
    pub partial_ok: u64,
    pub partial_err: u64,
}

struct State {
    replid: String,
    replid2: String,
    /// master_repl_offset: bytes of the stream so far.
    offset: i64,
    /// The offset after the last change record (not a PING or GETACK):
    /// what WAIT asks replicas to have acknowledged.
    data_offset: i64,
    second_offset: i64,
    backlog: Option<Backlog>,
    /// The lock records sent last, for Latchkey replicas' partial syncs.
    locklog: LockLog,
    /// The lock state here is the history's up to `locklog.seq()` (a
    /// primary's own; a replica's after a full sync that carried it). A
    /// replica without it asks for no partial sync of lock records.
    lock_valid: bool,
    /// The last ACK offset of each Latchkey replica that went lately, by
    /// its name (a replica that went, promoted or restarting, vouches for
    /// the lock state as long as a live one with that ACK would:
    /// `lock_replicas_in_touch`).
    gone_lock_acks: Vec<(String, i64)>,
    /// The lock marks sent lately: when, and the offset a replica that
    /// applied the mark acknowledges (`lock_mark`).
    lock_marks: std::collections::VecDeque<(Instant, i64)>,
    links: BTreeMap<ClientId, Link>,
    /// The database the stream's last SELECT named.
    seldb: Option<usize>,
    stats: SyncStats,
    /// Since when no replica is connected (the backlog's TTL).
    no_replicas_since: Instant,
    /// The feed is attached to the effects stream (asked for, and then
    /// its sink's id once attached).
    attached: bool,
    sink_id: Option<u64>,
    job: Option<Job>,
    last_ping: Instant,
    /// The replica class's output limits (hard, soft, seconds).
    limits: (u64, u64, u64),
    /// `repl-timeout`.
    timeout: Duration,
    /// The master this server follows (REPLICAOF), None on a master.
    master: Option<Upstream>,
    /// Our replication ID and offset describe a history a master can
    /// continue (Redis's cached master): PSYNC asks with them.
    can_psync: bool,
    /// Bumped on every REPLICAOF: the master link task follows it.
    master_gen: tokio::sync::watch::Sender<u64>,
    /// The database the master's stream has selected (kept across links,
    /// as Redis's cached master keeps its db).
    master_db: usize,
    /// A FAILOVER under way (Redis's failover_state and its target).
    failover: Option<Failover>,
}

/// A FAILOVER (Redis's failover_state, target_replica_host/port,
/// failover_end_time, force_failover).
#[derive(Debug, Clone)]
struct Failover {
    /// Handing over: this server follows the target and sends it
    /// `PSYNC ... FAILOVER` (else it waits for a replica to catch up).
    in_progress: bool,
    /// The replica (host, port): the one asked for, or the first that
    /// caught up.
    target: Option<(String, u16)>,
    /// Until when (unix ms) it waits for the replica (None: forever).
    end: Option<i64>,
    /// At `end`, hand over to the target anyway.
    force: bool,
}

/// What a look at the FAILOVER found (`Replication::failover_tick`).
#[derive(Debug, PartialEq, Eq)]
pub enum FailoverTick {
    Nothing,
    /// It timed out without FORCE: aborted, this server stays the master.
    Aborted,
    /// The target caught up (or FORCE at the timeout): this server now
    /// follows it and will ask it `PSYNC ... FAILOVER`.
    Started,
}

/// The replica side's view of its master (Redis's masterhost,
/// repl_state, repl_transfer_*).
#[derive(Debug, Clone)]
pub struct Upstream {
    pub host: String,
    pub port: u16,
    pub status: MasterLink,
    /// The last byte read from the master.
    pub last_io: Instant,
    /// Since when the link is down (None: never up yet).
    pub down_since: Option<Instant>,
    /// While the RDB is received: (size or -1, bytes read, started).
    pub transfer: Option<(i64, i64, Instant)>,
    /// The offset of the commands read from the master (Redis's
    /// read_reploff), ahead of `offset` only inside a read.
    pub read_offset: i64,
    /// The master client (CLIENT LIST / KILL TYPE master).
    pub client: Option<ClientId>,
}

/// Where the link to the master is (Redis's repl_state, as ROLE names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MasterLink {
    Connect,
    Connecting,
    Sync,
    Connected,
}

impl MasterLink {
    /// ROLE's name for it.
    pub fn name(self) -> &'static str {
        match self {
            MasterLink::Connect => "connect",
            MasterLink::Connecting => "connecting",
            MasterLink::Sync => "sync",
            MasterLink::Connected => "connected",
        }
    }
}

/// The replication state, shared by the store, the stream's sink and
/// the link tasks (a cheap handle).
#[derive(Clone)]
pub struct Replication {
    inner: Arc<Mutex<State>>,
    /// Whether a master is set (`State::master`), readable without the
    /// lock: the READONLY check asks it for every write.
    replica: Arc<std::sync::atomic::AtomicBool>,
}

impl Default for Replication {
    fn default() -> Self {
        Replication::new()
    }
}

/// What a replica's task writes next.
#[derive(Default)]
pub struct Output {
    /// Bytes to write now.
    pub bytes: OutBuf,
    /// Then the RDB.
    pub payload: Option<Payload>,
    /// The link must close (and why).
    pub close: Option<String>,
    /// The link is gone from the table (killed).
    pub gone: bool,
    /// Waits for its snapshot: a newline now and then keeps the replica
    /// from timing out.
    pub waiting: bool,
    /// Only records that may wait are pending: take again then, or
    /// when woken.
    pub hold_until: Option<Instant>,
}

/// SYNC or PSYNC from a connection.
pub struct SyncRequest<'a> {
    pub id: ClientId,
    /// The peer's IP (INFO shows it unless `ip-address` was given).
    pub peer_ip: String,
    pub hello: &'a Hello,
    /// PSYNC's replication ID (None: SYNC).
    pub replid: Option<&'a [u8]>,
    /// PSYNC's offset: the first byte it lacks.
    pub offset: i64,
    /// A filtered RDB to send instead of a snapshot (`rdb-filter-only`).
    pub filtered: Option<Vec<u8>>,
}

/// The outcome of SYNC/PSYNC.
#[derive(Debug, PartialEq, Eq)]
pub enum Psync {
    Continue,
    Full,
}

/// One `slaveN` line of INFO and one replica of ROLE.
#[derive(Debug, Clone)]
pub struct ReplicaInfo {
    pub ip: String,
    pub port: u16,
    pub state: &'static str,
    pub offset: i64,
    pub lag: u64,
}

/// What INFO replication shows.
#[derive(Debug, Clone)]
pub struct Info {
    pub replicas: Vec<ReplicaInfo>,
    pub replid: String,
    pub replid2: String,
    pub offset: i64,
    pub second_offset: i64,
    /// (size, first byte offset, histlen) while there is a backlog.
    pub backlog: Option<(usize, i64, usize)>,
    pub stats: SyncStats,
}

fn random_hex40() -> String {
    use rand::Rng;
    let mut r = rand::thread_rng();
    (0..40)
        .map(|_| char::from(b"0123456789abcdef"[r.gen_range(0..16)]))
        .collect()
}

/// How often a primary holding locks under `tp-min-acks` sends a lock
/// mark (`Replication::lock_mark`).
pub const LOCK_MARK_EVERY: Duration = Duration::from_millis(200);

/// How long a place taken or left in a lock line (QUEUED, DEQUEUED) may
/// wait in a Latchkey replica's output for the next write before it is
/// written by itself. Lost with a primary killed meanwhile, a place costs
/// its waiter its position (its resume queues it again), never a lock.
pub const LAZY_RECORDS: Duration = Duration::from_millis(2);

/// A primary whose Latchkey replicas acknowledged no lock mark sent this
/// long ago is cut off: it ends its holds (`Store::check_cut_off`).
pub const CUT_OFF: Duration = Duration::from_millis(1000);

/// The least time a promoted replica keeps a detached session: the old
/// primary, if alive on the other side of a cut, has told its holders
/// LOST by then. It ends its holds at most `CUT_OFF` plus one mark period
/// plus one cron tick (100 ms) after the last mark the promoted replica
/// applied, which was before the promotion; the rest (700 ms) is for the
/// push to reach the client, and clock rate drift.
pub const DETACHED_MIN: Duration = Duration::from_millis(2000);

const _: () = assert!(
    DETACHED_MIN.as_millis() >= CUT_OFF.as_millis() + LOCK_MARK_EVERY.as_millis() + 100 + 500
);

const ZERO_ID: &str = "0000000000000000000000000000000000000000";

impl Replication {
    pub fn new() -> Replication {
        let now = Instant::now();
        Replication {
            inner: Arc::new(Mutex::new(State {
                replid: random_hex40(),
                replid2: ZERO_ID.into(),
                offset: 0,
                data_offset: 0,
                second_offset: -1,
                backlog: None,
                locklog: LockLog::default(),
                lock_valid: true,
                gone_lock_acks: Vec::new(),
                lock_marks: Default::default(),
                links: BTreeMap::new(),
                seldb: None,
                stats: SyncStats::default(),
                no_replicas_since: now,
                attached: false,
                sink_id: None,
                job: None,
                last_ping: now,
                limits: (256 << 20, 64 << 20, 60),
                timeout: Duration::from_secs(60),
                master: None,
                can_psync: false,
                master_gen: tokio::sync::watch::channel(0).0,
                master_db: 0,
                failover: None,
            })),
            replica: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
    }

    /// master_replid.
    pub fn replid(&self) -> String {
        self.inner.lock().replid.clone()
    }

    /// A new replication ID and the second one cleared (DEBUG
    /// CHANGE-REPL-ID), as Redis's changeReplicationId and
    /// clearReplicationId2.
    pub fn change_replid(&self) {
        let mut s = self.inner.lock();
        s.replid = random_hex40();
        s.replid2 = ZERO_ID.into();
        s.second_offset = -1;
    }

    /// master_repl_offset.
    pub fn offset(&self) -> i64 {
        self.inner.lock().offset
    }

    /// The offset after the last change record: a replica that
    /// acknowledged it has every write made so far (WAIT).
    pub fn data_offset(&self) -> i64 {
        self.inner.lock().data_offset
    }

    /// The sink `feed_once` gave was attached with this id.
    pub fn attached_as(&self, id: u64) {
        self.inner.lock().sink_id = Some(id);
    }

    /// The sink to attach to the effects stream, unless it is attached.
    pub fn feed_once(&self) -> Option<Box<dyn Sink>> {
        let mut s = self.inner.lock();
        if s.attached {
            return None;
        }
        s.attached = true;
        Some(Box::new(Feed(self.inner.clone())))
    }

    /// Whether `id` is a replica.
    pub fn is_replica(&self, id: ClientId) -> bool {
        self.inner.lock().links.contains_key(&id)
    }

    /// The replicas' output waiting to be written (INFO's
    /// mem_clients_slaves).
    pub fn buffered(&self) -> usize {
        let s = self.inner.lock();
        s.links.values().map(Link::output).sum()
    }

    /// The backlog's allocation (INFO's mem_replication_backlog, MEMORY
    /// STATS's replication.backlog).
    pub fn backlog_memory(&self) -> usize {
        self.inner
            .lock()
            .backlog
            .as_ref()
            .map_or(0, Backlog::allocated)
    }

    /// Connected replicas.
    pub fn count(&self) -> usize {
        self.inner.lock().links.len()
    }

    /// SYNC (`replid` None) or PSYNC from client `id`: a partial resync
    /// when the backlog has what it asks for, else a full one (its
    /// snapshot starts in `start_pending`). The caller published the
    /// pending records first, so the offset is the data's.
    pub fn psync(&self, req: SyncRequest<'_>, cfg: &Config) -> (Psync, Arc<Notify>) {
        let SyncRequest {
            id,
            peer_ip,
            hello,
            replid,
            offset,
            filtered,
        } = req;
        let mut s = self.inner.lock();
        s.limits = cfg.replica_limits;
        let now = Instant::now();
        let mut link = Link {
            hello: hello.clone(),
            peer_ip,
            state: LinkState::WaitBgsaveStart,
            pre_psync: replid.is_none(),
            head: Vec::new(),
            in_flight: 0,
            payload: None,
            buf: OutBuf::default(),
            stream_on_ack: false,
            in_job: false,
            ack_off: 0,
            ack_time: now,
            waiting_since: now,
            close: None,
            soft_since: None,
            lazy_since: None,
            wake: Arc::new(Notify::new()),
            abort: Arc::new(Notify::new()),
        };
        let wake = link.wake.clone();
        let name = link.name();
        if let Some(asked) = replid {
            if let Some(n) = s.try_partial(&mut link, &name, asked, offset) {
                s.stats.partial_ok += 1;
                tracing::info!(
                    "Partial resynchronization request from {name} accepted. Sending {n} bytes of backlog starting from offset {offset}."
                );
                s.links.insert(id, link);
                return (Psync::Continue, wake);
            }
            if asked.first() != Some(&b'?') {
                s.stats.partial_err += 1;
            }
        }
        s.stats.full += 1;
        s.links.insert(id, link);
        if s.links.len() == 1 && s.backlog.is_none() {
            // A backlog from scratch: a new history, as Redis.
            s.replid = random_hex40();
            s.replid2 = ZERO_ID.into();
            s.second_offset = -1;
            s.backlog = Some(Backlog::new(cfg.repl.backlog_size, s.offset + 1));
            tracing::info!(
                "Replication backlog created, my new replication IDs are '{}' and '{}'",
                s.replid,
                s.replid2
            );
        }
        if let Some(rdb) = filtered {
            // No data to walk: the filtered RDB is sent at once, framed
            // as a streamed one; the stream follows from its offset.
            let (replid, off) = (s.replid.clone(), s.offset);
            s.seldb = None;
            let l = s.links.get_mut(&id).expect("just added");
            if !l.pre_psync {
                l.head = format!("+FULLRESYNC {replid} {off}\r\n").into_bytes();
            }
            let mark = random_hex40();
            let mut framed = format!("$EOF:{mark}\r\n").into_bytes();
            framed.extend_from_slice(&rdb);
            framed.extend_from_slice(mark.as_bytes());
            l.payload = Some(Payload::Bytes(framed));
            l.state = LinkState::WaitBgsaveEnd;
            l.ack_off = off;
            return (Psync::Full, wake);
        }
        // A snapshot to the file in progress for another replica: this
        // one joins it, with a copy of what that one has buffered since.
        let joined = match &s.job {
            Some(j) if !j.socket => s
                .links
                .iter()
                .find(|(k, l)| {
                    **k != id
                        && l.in_job
                        && l.state == LinkState::WaitBgsaveEnd
                        && l.hello.latchkey == hello.latchkey
                })
                .map(|(_, l)| (l.buf.clone(), l.ack_off)),
            _ => None,
        };
        let job_socket = s.job.as_ref().map(|j| j.socket);
        let replid = s.replid.clone();
        if let (Some((buf, initial)), Some(l)) = (joined, s.links.get_mut(&id)) {
            l.buf = buf;
            if !l.pre_psync {
                l.head
                    .extend_from_slice(format!("+FULLRESYNC {replid} {initial}\r\n").as_bytes());
            }
            l.ack_off = initial;
            l.state = LinkState::WaitBgsaveEnd;
            l.in_job = true;
            tracing::info!("Waiting for end of BGSAVE for SYNC");
        } else if job_socket == Some(true) {
            tracing::info!("Current BGSAVE has socket target. Waiting for next BGSAVE for SYNC");
        } else if job_socket == Some(false) {
            tracing::info!(
                "Can't attach the replica to the current BGSAVE. Waiting for next BGSAVE for SYNC"
            );
        }
        (Psync::Full, wake)
    }

    /// A replica went (its connection closed or was killed).
    pub fn remove(&self, id: ClientId) {
        let mut s = self.inner.lock();
        if let Some(l) = s.links.remove(&id) {
            tracing::warn!("Connection with replica {} lost.", l.name());
            if l.hello.latchkey && l.state == LinkState::Online {
                let name = l.name();
                s.gone_lock_acks.retain(|(n, _)| *n != name);
                s.gone_lock_acks.push((name, l.ack_off));
                if s.gone_lock_acks.len() > 16 {
                    s.gone_lock_acks.remove(0);
                }
            }
            l.wake.notify_one();
            l.abort.notify_one();
            if s.links.is_empty() {
                s.no_replicas_since = Instant::now();
            }
        }
    }

    /// What replica `id`'s task writes next. Records that may wait are
    /// held back while they are all there is, for at most
    /// [`LAZY_RECORDS`] (`Output::hold_until`), unless `now`.
    pub fn take(&self, id: ClientId, now: bool) -> Output {
        let mut s = self.inner.lock();
        let socket_job = s.job.as_ref().is_some_and(|j| j.socket);
        let Some(l) = s.links.get_mut(&id) else {
            return Output {
                gone: true,
                ..Default::default()
            };
        };
        let mut o = Output {
            bytes: OutBuf::from(&l.head[..]),
            payload: l.payload.take(),
            close: l.close.clone(),
            ..Default::default()
        };
        if o.payload.is_some() {
            l.state = LinkState::SendBulk;
        }
        match l.state {
            LinkState::Online if !l.stream_on_ack => match l.lazy_since {
                Some(t) if !now && t.elapsed() < LAZY_RECORDS => {
                    o.hold_until = Some(t + LAZY_RECORDS);
                }
                _ => {
                    o.bytes.append(&mut l.buf);
                    l.soft_since = None;
                    l.lazy_since = None;
                }
            },
            LinkState::WaitBgsaveStart => o.waiting = true,
            LinkState::WaitBgsaveEnd => o.waiting = !socket_job,
            _ => {}
        }
        l.head = Vec::new();
        l.in_flight = o.bytes.allocated();
        o
    }

    /// Whether replica `id`'s pending output is only records that may
    /// wait (its task need not hurry).
    pub fn holds_lazy(&self, id: ClientId) -> bool {
        let s = self.inner.lock();
        s.links.get(&id).is_some_and(|l| l.lazy_since.is_some())
    }

    /// Replica `id`'s RDB is sent. From the file: it is online now.
    /// Streamed: it goes online with its first ACK (the replica loaded
    /// it), as Redis's repl_start_cmd_stream_on_ack.
    pub fn bulk_sent(&self, id: ClientId, streamed: bool) {
        let mut s = self.inner.lock();
        let Some(l) = s.links.get_mut(&id) else {
            return;
        };
        l.state = LinkState::Online;
        l.ack_time = Instant::now();
        if streamed {
            l.stream_on_ack = true;
            tracing::info!(
                "Streamed RDB transfer with replica {} succeeded (socket). Waiting for REPLCONF ACK from slave to enable streaming",
                l.name()
            );
        } else {
            tracing::info!("Synchronization with replica {} succeeded", l.name());
        }
    }

    /// REPLCONF ACK `offset` from replica `id`; false when it is no
    /// replica (Redis ignores the ACK then).
    pub fn ack(&self, id: ClientId, offset: i64) -> bool {
        let mut s = self.inner.lock();
        let Some(l) = s.links.get_mut(&id) else {
            return false;
        };
        if offset > l.ack_off {
            l.ack_off = offset;
        }
        l.ack_time = Instant::now();
        if l.stream_on_ack && l.state == LinkState::Online {
            l.stream_on_ack = false;
            tracing::info!("Synchronization with replica {} succeeded", l.name());
            l.wake.notify_one();
        }
        true
    }

    /// Replica `id` sent something (not an ACK): it is alive.
    pub fn touch(&self, id: ClientId) {
        if let Some(l) = self.inner.lock().links.get_mut(&id) {
            l.ack_time = Instant::now();
        }
    }

    /// `repl-timeout`: how long a replica may take nothing we write.
    pub fn timeout(&self) -> Duration {
        self.inner.lock().timeout
    }

    /// How the log names replica `id`.
    pub fn name_of(&self, id: ClientId) -> String {
        let s = self.inner.lock();
        s.links.get(&id).map(Link::name).unwrap_or_default()
    }

    /// What wakes replica `id`'s task when it has something to write,
    /// and what interrupts its writes when it must close.
    pub fn wake_of(&self, id: ClientId) -> Option<(Arc<Notify>, Arc<Notify>)> {
        let s = self.inner.lock();
        s.links.get(&id).map(|l| (l.wake.clone(), l.abort.clone()))
    }

    /// Whether replica `id` timed out (`repl-timeout`): nothing from it
    /// for that long while online (Redis's replicationCron). Logs it.
    pub fn timed_out(&self, id: ClientId) -> bool {
        let s = self.inner.lock();
        let timeout = s.timeout;
        let Some(l) = s.links.get(&id) else {
            return false;
        };
        if l.pre_psync || l.state != LinkState::Online || l.ack_time.elapsed() <= timeout {
            return false;
        }
        tracing::warn!(
            "Disconnecting timedout replica (streaming sync): {}",
            l.name()
        );
        true
    }

    /// Replicas online whose ACK covers `offset` (WAIT).
    pub fn count_acks(&self, offset: i64) -> usize {
        let s = self.inner.lock();
        s.links
            .values()
            .filter(|l| l.state == LinkState::Online && l.ack_off >= offset)
            .count()
    }

    /// The last lock record's number and the lock log's bytes (INFO).
    pub fn lock_log_info(&self) -> (u64, usize) {
        let s = self.inner.lock();
        (s.locklog.seq(), s.locklog.allocated())
    }

    /// Latchkey replicas online that acknowledged the stream to `offset`
    /// (they have every lock record sent before it): a lock grant's wait
    /// under `tp-min-acks`.
    pub fn count_lock_acks(&self, offset: i64) -> usize {
        let s = self.inner.lock();
        s.links
            .values()
            .filter(|l| l.hello.latchkey && l.state == LinkState::Online && l.ack_off >= offset)
            .count()
    }

    /// With holds to vouch for under `tp-min-acks`, a primary sends a
    /// lock mark every [`LOCK_MARK_EVERY`]: a PING, whose end offset it
    /// notes with the time, and a GETACK so that replicas acknowledge it
    /// at once. A replica that acknowledged a mark applied it, so it was
    /// still this primary's replica when the mark was sent: it cannot have
    /// been promoted before then. Without Latchkey replicas the mark is
    /// one nobody can acknowledge (`i64::MAX`). `clear` (no holds): the
    /// marks go, and the next hold starts a new history.
    pub fn lock_mark(&self, clear: bool) {
        let mut s = self.inner.lock();
        if clear || s.master.is_some() {
            s.lock_marks.clear();
            return;
        }
        if s.lock_marks
            .back()
            .is_some_and(|(t, _)| t.elapsed() < LOCK_MARK_EVERY)
        {
            return;
        }
        let off = if s.links.values().any(|l| l.hello.latchkey) {
            s.feed(None, &[&b"PING"[..]]);
            let off = s.offset;
            s.feed(None, &[&b"REPLCONF"[..], b"GETACK", b"*"]);
            off
        } else {
            i64::MAX
        };
        s.lock_marks.push_back((Instant::now(), off));
        while s
            .lock_marks
            .front()
            .is_some_and(|(t, _)| t.elapsed() >= CUT_OFF * 2)
        {
            s.lock_marks.pop_front();
        }
    }

    /// Latchkey replicas (live, or gone since: see `lock_mark`) that
    /// acknowledged a lock mark sent within `within`, each counted once
    /// by its name; while the marks go back less than `within` (the first
    /// hold is younger), every one counts.
    pub fn lock_replicas_in_touch(&self, within: Duration) -> usize {
        let s = self.inner.lock();
        if s.lock_marks
            .front()
            .is_none_or(|(t, _)| t.elapsed() < within)
        {
            return usize::MAX;
        }
        // The oldest mark sent within the time: acknowledging it (or any
        // later one) is being in touch.
        let Some(off) = s
            .lock_marks
            .iter()
            .find(|(t, off)| *off != i64::MAX && t.elapsed() < within)
            .map(|(_, off)| *off)
        else {
            return 0;
        };
        let mut names: Vec<String> = s
            .links
            .values()
            .filter(|l| l.hello.latchkey && l.close.is_none() && l.ack_off >= off)
            .map(Link::name)
            .collect();
        names.extend(
            s.gone_lock_acks
                .iter()
                .filter(|(_, a)| *a >= off)
                .map(|(n, _)| n.clone()),
        );
        names.sort();
        names.dedup();
        names.len()
    }

    /// The offset a replica must acknowledge to have every lock record
    /// sent so far: lock records move no offset, so when the last one is
    /// at the stream's end a PING follows it (a replica acknowledging
    /// past the PING applied the record before it).
    pub fn lock_marker(&self) -> i64 {
        let mut s = self.inner.lock();
        if s.locklog.last_offset() == Some(s.offset) && s.master.is_none() {
            s.feed(None, &[&b"PING"[..]]);
            // A lock mark too: a replica acknowledging it was in touch now.
            let off = s.offset;
            s.lock_marks.push_back((Instant::now(), off));
        }
        s.offset
    }

    /// Replicas online whose last ACK is at most `max_lag` seconds old
    /// (min-replicas-to-write).
    pub fn good_replicas(&self, max_lag: i64) -> usize {
        let s = self.inner.lock();
        s.links
            .values()
            .filter(|l| {
                l.state == LinkState::Online && l.ack_time.elapsed().as_secs() as i64 <= max_lag
            })
            .count()
    }

    /// Asks every replica for its offset (REPLCONF GETACK *), in the
    /// stream as Redis does; the caller published the pending records.
    pub fn request_acks(&self) {
        let mut s = self.inner.lock();
        if !s.links.is_empty() && s.master.is_none() {
            s.feed(None, &[&b"REPLCONF"[..], b"GETACK", b"*"]);
        }
    }

    /// The master this server follows, if any.
    pub fn master(&self) -> Option<Upstream> {
        self.inner.lock().master.clone()
    }

    /// The master client's id while the link runs (when `gen` is current).
    pub fn set_master_client(&self, gen: u64, id: Option<ClientId>) {
        let mut s = self.inner.lock();
        if *s.master_gen.borrow() != gen {
            return;
        }
        if let Some(m) = s.master.as_mut() {
            m.client = id;
        }
    }

    /// The master client's id, on a replica whose link runs.
    pub fn master_client(&self) -> Option<ClientId> {
        self.inner.lock().master.as_ref().and_then(|m| m.client)
    }

    /// Whether this server is a replica (REPLICAOF host port).
    #[inline]
    pub fn has_master(&self) -> bool {
        self.replica.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Follows REPLICAOF changes: the link task's current generation.
    pub fn master_watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.lock().master_gen.subscribe()
    }

    /// REPLICAOF host port (Redis's replicationSetMaster): false when it
    /// already follows that master. A master turning replica keeps its
    /// history to continue from (replicationCacheMasterUsingMyself), and
    /// its replicas are disconnected so they sync with the new stream.
    pub fn set_master(&self, host: &str, port: u16) -> bool {
        let mut s = self.inner.lock();
        if let Some(m) = &s.master {
            if m.host.eq_ignore_ascii_case(host) && m.port == port {
                return false;
            }
        }
        if s.master.is_none() {
            s.can_psync = true;
            tracing::info!("Before turning into a replica, using my own master parameters to synthesize a cached master: I may be able to synchronize with the new master with just a partial transfer.");
        }
        self.replica
            .store(true, std::sync::atomic::Ordering::Relaxed);
        crate::logging::set_replica(true);
        s.master = Some(Upstream {
            host: host.to_string(),
            port,
            status: MasterLink::Connect,
            last_io: Instant::now(),
            down_since: None,
            transfer: None,
            read_offset: s.offset,
            client: None,
        });
        s.seldb = None;
        s.disconnect_replicas();
        s.master_gen.send_modify(|g| *g += 1);
        true
    }

    /// REPLICAOF NO ONE (Redis's replicationUnsetMaster): the link ends,
    /// the master's ID becomes the second one up to our offset and a new
    /// ID is made (shiftReplicationId), the backlog stays, so replicas of
    /// the old master continue from us. False when it was a master.
    pub fn unset_master(&self) -> bool {
        let mut s = self.inner.lock();
        if s.master.take().is_none() {
            return false;
        }
        self.replica
            .store(false, std::sync::atomic::Ordering::Relaxed);
        crate::logging::set_replica(false);
        s.replid2 = std::mem::replace(&mut s.replid, random_hex40());
        s.second_offset = s.offset + 1;
        tracing::info!(
            "Setting secondary replication ID to {}, valid up to offset: {}. New replication ID is {}",
            s.replid2,
            s.second_offset,
            s.replid
        );
        s.seldb = None;
        s.data_offset = s.offset;
        s.no_replicas_since = Instant::now();
        // Its lock records go on from the last it applied.
        s.lock_valid = true;
        s.disconnect_replicas();
        s.master_gen.send_modify(|g| *g += 1);
        true
    }

    /// Whether the master link of generation `gen` is still the one to
    /// follow (no REPLICAOF since): a link checks it under the store
    /// lock before it applies what it read, so nothing of an old master
    /// lands after a promotion.
    pub fn is_current(&self, gen: u64) -> bool {
        let s = self.inner.lock();
        s.master.is_some() && *s.master_gen.borrow() == gen
    }

    /// INFO's master_failover_state (Redis's getFailoverStateString).
    pub fn failover_state(&self) -> &'static str {
        match &self.inner.lock().failover {
            None => "no-failover",
            Some(f) if f.in_progress => "failover-in-progress",
            Some(_) => "waiting-for-sync",
        }
    }

    /// Whether a FAILOVER is under way.
    pub fn failing_over(&self) -> bool {
        self.inner.lock().failover.is_some()
    }

    /// Whether this server is handing over (its PSYNC says FAILOVER).
    pub fn failover_in_progress(&self) -> bool {
        self.inner
            .lock()
            .failover
            .as_ref()
            .is_some_and(|f| f.in_progress)
    }

    /// Redis's findReplica: whether a replica announces (or connects
    /// from) `host` and listens on `port`; Some(online) when one does.
    pub fn find_replica(&self, host: &str, port: u16) -> Option<bool> {
        let s = self.inner.lock();
        s.links
            .values()
            .find(|l| l.ip().eq_ignore_ascii_case(host) && l.hello.port == port)
            .map(|l| l.state == LinkState::Online)
    }

    /// FAILOVER accepted: wait for the target (or any replica) to
    /// acknowledge our offset, until `end` (unix ms) when given.
    pub fn start_failover(&self, target: Option<(String, u16)>, end: Option<i64>, force: bool) {
        self.inner.lock().failover = Some(Failover {
            in_progress: false,
            target,
            end,
            force,
        });
    }

    /// Redis's updateFailoverStatus, while waiting for a replica: at the
    /// timeout it aborts (or with FORCE hands over); a replica whose ACK
    /// is our offset (the target, or the first one) is handed over to:
    /// this server follows it (`set_master`).
    pub fn failover_tick(&self, now_ms: i64) -> FailoverTick {
        let (host, port) = {
            let mut s = self.inner.lock();
            let Some(f) = s.failover.as_ref() else {
                return FailoverTick::Nothing;
            };
            if f.in_progress {
                return FailoverTick::Nothing;
            }
            let offset = s.offset;
            let caught_up = |l: &Link| l.ack_off == offset;
            let timed_out = f.end.is_some_and(|e| e <= now_ms);
            let target = f.target.clone();
            let force = f.force;
            let to = if timed_out {
                if !force {
                    drop(s);
                    self.abort_failover("Replica never caught up before timeout");
                    return FailoverTick::Aborted;
                }
                let (h, p) = target.expect("FORCE has a target");
                tracing::info!("FAILOVER to {h}:{p} time out exceeded, failing over.");
                (h, p)
            } else {
                let synced = match &target {
                    Some((h, p)) => s
                        .links
                        .values()
                        .find(|l| l.ip().eq_ignore_ascii_case(h) && l.hello.port == *p)
                        .filter(|l| caught_up(l))
                        .map(|_| (h.clone(), *p)),
                    None => s
                        .links
                        .values()
                        .find(|l| caught_up(l))
                        .map(|l| (l.ip().to_string(), l.hello.port)),
                };
                let Some((h, p)) = synced else {
                    return FailoverTick::Nothing;
                };
                tracing::info!("Failover target {h}:{p} is synced, failing over.");
                (h, p)
            };
            let f = s.failover.as_mut().expect("checked above");
            f.in_progress = true;
            f.target = Some(to.clone());
            to
        };
        self.set_master(&host, port);
        FailoverTick::Started
    }

    /// The target answered our `PSYNC ... FAILOVER` (Redis's
    /// clearFailoverState): the FAILOVER is over.
    pub fn clear_failover(&self) -> bool {
        self.inner.lock().failover.take().is_some()
    }

    /// Redis's abortFailover: logged; a server already handing over is
    /// a master again (`unset_master`). False when none was under way.
    pub fn abort_failover(&self, why: &str) -> bool {
        let Some(f) = self.inner.lock().failover.take() else {
            return false;
        };
        match &f.target {
            Some((h, p)) => tracing::info!("FAILOVER to {h}:{p} aborted: {why}"),
            None => tracing::info!("FAILOVER to any replica aborted: {why}"),
        }
        if f.in_progress {
            self.unset_master();
        }
        true
    }

    /// Redis's isReadyToShutdown: every replica acknowledged our offset.
    pub fn replicas_caught_up(&self) -> bool {
        let s = self.inner.lock();
        s.links.values().all(|l| l.ack_off == s.offset)
    }

    /// Redis's finishShutdown's lines: each replica behind, then how many
    /// are in sync.
    pub fn log_lagging(&self) {
        let s = self.inner.lock();
        let mut lagging = 0;
        for l in s.links.values() {
            if l.ack_off == s.offset {
                continue;
            }
            lagging += 1;
            let lag = if l.state == LinkState::Online {
                l.ack_time.elapsed().as_secs()
            } else {
                0
            };
            tracing::warn!(
                "Lagging replica {} reported offset {} behind master, lag={lag}, state={}.",
                l.name(),
                s.offset - l.ack_off,
                l.state.name()
            );
        }
        let n = s.links.len();
        if n > 0 {
            tracing::info!(
                "{} of {n} replicas are in sync when shutting down.",
                n - lagging
            );
        }
    }

    /// The database the master's stream has selected.
    pub fn master_db(&self) -> usize {
        self.inner.lock().master_db
    }

    pub fn set_master_db(&self, db: usize) {
        self.inner.lock().master_db = db;
    }

    /// Where the data is in the replication stream, for an RDB's AUX
    /// fields (Redis's rdbPopulateSaveInfo): a master with a backlog, or
    /// a replica with a history to continue. Never called under this
    /// state's lock (`Host::parts` lends it, images ask it).
    pub fn save_info(&self) -> Option<crate::persist::ReplInfo> {
        let s = self.inner.lock();
        let stream_db = match &s.master {
            None if s.backlog.is_some() => s.seldb.unwrap_or(0),
            Some(_) if s.can_psync => s.master_db,
            _ => return None,
        };
        Some(crate::persist::ReplInfo {
            replid: s.replid.clone(),
            offset: s.offset,
            stream_db: stream_db as i64,
        })
    }

    /// A replica started from an RDB that names its history (`repl-id`,
    /// `repl-offset`): PSYNC continues from it (Redis's
    /// replicationCacheMasterUsingMyself at load).
    pub fn restore_history(&self, r: &crate::persist::ReplInfo) {
        let mut s = self.inner.lock();
        // The lock state is not restored from a file.
        s.lock_valid = false;
        s.replid = r.replid.clone();
        s.offset = r.offset;
        s.data_offset = r.offset;
        s.master_db = r.stream_db.max(0) as usize;
        s.can_psync = true;
        if let Some(m) = s.master.as_mut() {
            m.read_offset = r.offset;
        }
    }

    /// A master started from an RDB that names its history (Redis 7's
    /// loadDataFromDisk on a master): that ID becomes the second one,
    /// valid up to its offset, our offset goes on from it and an empty
    /// backlog starts there, so replicas that followed this master before
    /// the restart continue partially (a Latchkey replica only if it had
    /// no lock state: the master's sessions ended with it, and its lock
    /// records start again, so `REPLCONF lk-seq` asks for a full sync).
    pub fn restore_as_master(&self, r: &crate::persist::ReplInfo, backlog_size: usize) {
        let mut s = self.inner.lock();
        s.replid2 = r.replid.clone();
        s.second_offset = r.offset + 1;
        s.offset = r.offset;
        s.data_offset = r.offset;
        s.seldb = None;
        s.backlog = Some(Backlog::new(backlog_size, r.offset + 1));
        s.no_replicas_since = Instant::now();
    }

    /// The lock state of the history restored with it (a replica's RDB
    /// at start-up), up to record `seq`.
    pub fn locks_restored(&self, seq: u64) {
        let mut s = self.inner.lock();
        s.lock_valid = true;
        s.locklog.reset(seq);
    }

    /// Our data is not a master's history (a start-up without one): the
    /// first sync asks `PSYNC ? -1`.
    pub fn forget_history(&self) {
        self.inner.lock().can_psync = false;
    }

    /// PSYNC's arguments: our ID and the next offset when our history can
    /// be continued, else `? -1`.
    /// The third: the last lock record applied, when the lock state here
    /// is the history's (`REPLCONF lk-seq`).
    pub fn psync_args(&self) -> (String, i64, Option<u64>) {
        let s = self.inner.lock();
        let seq = s.lock_valid.then(|| s.locklog.seq());
        if s.can_psync {
            (s.replid.clone(), s.offset + 1, seq)
        } else {
            ("?".into(), -1, seq)
        }
    }

    /// Updates the master link's state when `gen` is still current.
    pub fn master_status(&self, gen: u64, status: MasterLink) {
        let mut s = self.inner.lock();
        if *s.master_gen.borrow() != gen {
            return;
        }
        if let Some(m) = s.master.as_mut() {
            if status == MasterLink::Connected {
                m.down_since = None;
                m.transfer = None;
            } else if m.status == MasterLink::Connected || m.down_since.is_none() {
                m.down_since.get_or_insert_with(Instant::now);
            }
            if status != MasterLink::Sync {
                m.transfer = None;
            }
            if status != MasterLink::Connected {
                m.client = None;
            }
            m.status = status;
            m.last_io = Instant::now();
        }
    }

    /// The RDB's transfer progress: (size or -1, bytes read so far).
    pub fn master_transfer(&self, size: i64, read: i64) {
        let mut s = self.inner.lock();
        if let Some(m) = s.master.as_mut() {
            let started = m.transfer.map_or_else(Instant::now, |t| t.2);
            m.transfer = Some((size, read, started));
            m.last_io = Instant::now();
        }
    }

    /// Bytes came from the master (master_last_io_seconds_ago).
    pub fn master_io(&self) {
        if let Some(m) = self.inner.lock().master.as_mut() {
            m.last_io = Instant::now();
        }
    }

    /// A full sync from the master loaded: its ID and offset are ours, the
    /// second ID is cleared, and a new backlog starts at that offset.
    /// `lock_seq`: the lock state's record number when the RDB carried
    /// it (a Latchkey master's; none from a Redis master).
    pub fn full_synced(
        &self,
        replid: &str,
        offset: i64,
        backlog_size: usize,
        lock_seq: Option<u64>,
    ) {
        let mut s = self.inner.lock();
        // An RDB without lock state (a Redis master's) has none: the
        // state is empty, at record 0 of a history without lock records.
        s.lock_valid = true;
        s.locklog.reset(lock_seq.unwrap_or(0));
        s.replid = replid.to_string();
        s.replid2 = ZERO_ID.into();
        s.second_offset = -1;
        s.offset = offset;
        s.data_offset = offset;
        s.backlog = Some(Backlog::new(backlog_size, offset + 1));
        s.can_psync = true;
        s.master_db = 0;
        if let Some(m) = s.master.as_mut() {
            m.read_offset = offset;
        }
        s.seldb = None;
        s.disconnect_replicas();
    }

    /// `+CONTINUE [replid]`: our data continues; a new master ID moves ours
    /// to the second one (PSYNC2). A backlog is made if there is none.
    pub fn continued(&self, replid: Option<&str>, backlog_size: usize) {
        let mut s = self.inner.lock();
        if let Some(new) = replid {
            if !new.eq_ignore_ascii_case(&s.replid) {
                s.replid2 = std::mem::replace(&mut s.replid, new.to_string());
                s.second_offset = s.offset + 1;
                tracing::info!("Master replication ID changed to {new}");
                s.disconnect_replicas();
            }
        }
        if s.backlog.is_none() {
            s.backlog = Some(Backlog::new(backlog_size, s.offset + 1));
        }
    }

    /// Bytes of the master's stream, processed: counted, kept in the
    /// backlog and passed to our replicas verbatim
    /// (replicationFeedStreamFromMasterStream).
    pub fn feed_master(&self, bytes: &[u8]) {
        let mut s = self.inner.lock();
        s.push(bytes);
        let off = s.offset;
        s.data_offset = off;
        if let Some(m) = s.master.as_mut() {
            m.read_offset = m.read_offset.max(off);
        }
    }

    /// A lock frame of the master's stream, number `seq`, applied: kept
    /// in the lock log and passed to our Latchkey replicas as it came,
    /// outside the offsets (`locklog`).
    pub fn feed_master_lock(&self, seq: u64, frame: Bytes) {
        let mut s = self.inner.lock();
        let (off, cap) = (s.offset, s.locklog_cap());
        if let Some(m) = s.master.as_mut() {
            m.read_offset -= frame.len() as i64;
        }
        s.send(&frame, true, false);
        s.locklog.forwarded(seq, off, frame, cap);
    }

    /// Bytes read from the master ahead of those processed
    /// (slave_read_repl_offset).
    pub fn master_read(&self, n: usize) {
        if let Some(m) = self.inner.lock().master.as_mut() {
            m.read_offset += n as i64;
            m.last_io = Instant::now();
        }
    }

    /// INFO replication.
    pub fn info(&self) -> Info {
        let s = self.inner.lock();
        Info {
            replicas: s.replicas(false),
            replid: s.replid.clone(),
            replid2: s.replid2.clone(),
            offset: s.offset,
            second_offset: s.second_offset,
            backlog: s
                .backlog
                .as_ref()
                .map(|b| (b.size(), b.first(), b.histlen())),
            stats: s.stats,
        }
    }

    /// ROLE's replicas: those online.
    pub fn online(&self) -> Vec<ReplicaInfo> {
        self.inner.lock().replicas(true)
    }

    /// The stream's periodic work (Redis's replicationCron), about ten
    /// times a second: a snapshot done hands replicas their RDB, waiting
    /// replicas get a snapshot, PING every `repl-ping-replica-period`,
    /// the backlog freed after `repl-backlog-ttl` without replicas.
    pub fn cron(&self, h: &mut impl crate::persist::Host) {
        self.job_check(h);
        self.start_pending(h, false);
        let mut s = self.inner.lock();
        let p = h.parts();
        let c = &p.config.repl;
        s.limits = p.config.replica_limits;
        s.timeout = Duration::from_secs(c.timeout.max(1) as u64);
        if let Some(b) = s.backlog.as_mut() {
            if b.size() != c.backlog_size {
                b.resize(c.backlog_size);
            }
        }
        let period = Duration::from_secs(c.ping_replica_period.max(1) as u64);
        // No PING while a FAILOVER with a timeout holds the writes: the
        // replicas' offsets must meet ours (Redis's replicationCron).
        let failover_timed = s.failover.as_ref().is_some_and(|f| f.end.is_some());
        if !s.links.is_empty()
            && s.master.is_none()
            && !failover_timed
            && s.last_ping.elapsed() >= period
        {
            s.last_ping = Instant::now();
            s.feed(None, &[&b"PING"[..]]);
        }
        let ttl = c.backlog_ttl;
        if s.links.is_empty()
            && s.master.is_none()
            && s.backlog.is_some()
            && ttl > 0
            && s.no_replicas_since.elapsed().as_secs() as i64 >= ttl
        {
            s.replid2 = ZERO_ID.into();
            s.second_offset = -1;
            s.replid = random_hex40();
            s.backlog = None;
            tracing::info!(
                "Replication backlog freed after {ttl} seconds without connected replicas."
            );
            // Nobody takes the stream now: records stop being kept for it
            // (until the next replica attaches the feed again).
            if let Some(id) = s.sink_id.take() {
                p.ks.effects.detach(id);
            }
            s.attached = false;
        }
    }

    /// The snapshot replicas wait on ended: from the file, they are sent
    /// it; streamed, they finish their transfer; failed, they close.
    fn job_check(&self, h: &mut impl crate::persist::Host) {
        let mut s = self.inner.lock();
        let Some(job) = &s.job else {
            return;
        };
        let p = h.parts();
        let st = p.state.status();
        if st.rdb_jobs_ended <= job.ended_before {
            return;
        }
        let (ok, socket) = (st.last_rdb_job_ok, job.socket);
        s.job = None;
        let path = crate::persist::rdb_path(p.config);
        for l in s.links.values_mut() {
            if !l.in_job {
                continue;
            }
            l.in_job = false;
            if !ok {
                tracing::warn!("SYNC failed. BGSAVE child returned an error");
                l.close = Some("the snapshot failed".into());
                l.abort.notify_one();
            } else if !socket {
                let opened =
                    std::fs::File::open(&path).and_then(|f| f.metadata().map(|m| (f, m.len())));
                match opened {
                    Ok((file, len)) => {
                        l.payload = Some(Payload::File { file, len });
                        l.state = LinkState::SendBulk;
                    }
                    Err(e) => {
                        tracing::warn!("SYNC failed. Can't open/stat DB after BGSAVE: {e}");
                        l.close = Some("the snapshot could not be read".into());
                    }
                }
            }
            l.wake.notify_one();
        }
    }

    /// Starts a snapshot for the replicas waiting for one: at once for a
    /// disk-based sync; a diskless one after `repl-diskless-sync-delay`
    /// seconds, or as soon as `repl-diskless-sync-max-replicas` wait.
    /// `now`: SYNC/PSYNC asks (the delay is judged in the cron).
    pub fn start_pending(&self, h: &mut impl crate::persist::Host, now: bool) {
        // Judged first without holding the state across the publication
        // below (the stream's sink takes it).
        let (socket, n) = {
            let s = self.inner.lock();
            if s.job.is_some() {
                return;
            }
            let waiting: Vec<&Link> = s.waiting().map(|(_, l)| l).collect();
            if waiting.is_empty() {
                return;
            }
            let p = h.parts();
            if p.state.job_running() {
                if now {
                    tracing::info!("No BGSAVE in progress, but another BG operation is active. BGSAVE for replication delayed");
                }
                return;
            }
            let c = &p.config.repl;
            let socket = c.diskless_sync && waiting.iter().all(|l| l.hello.eof);
            if socket && c.diskless_sync_delay > 0 {
                let idle = waiting
                    .iter()
                    .map(|l| l.waiting_since.elapsed())
                    .max()
                    .unwrap_or_default();
                let max = c.diskless_sync_max_replicas;
                let enough = max > 0 && waiting.len() as i64 >= max;
                if !enough && idle < Duration::from_secs(c.diskless_sync_delay as u64) {
                    if now {
                        tracing::info!("Delay next BGSAVE for diskless SYNC");
                    }
                    return;
                }
            }
            (socket, waiting.len())
        };
        tracing::info!(
            "Starting BGSAVE for SYNC with target: {}",
            if socket { "replicas sockets" } else { "disk" }
        );
        // The snapshot's point: what was made before it is in it, what
        // is fed after it goes to the replicas' buffers.
        {
            let p = h.parts();
            crate::persist::aof_write_out(p.ks, p.state);
        }
        let ended_before = h.parts().state.status().rdb_jobs_ended;
        let mut fan = FanOut::default();
        let mut receivers = Vec::new();
        let target = if socket {
            let mark = random_hex40();
            for _ in 0..n {
                let (tx, rx) = tokio::sync::mpsc::channel(16);
                fan.txs.push(tx);
                receivers.push(rx);
            }
            crate::persist::SyncTarget::Socket {
                out: Box::new(fan),
                prefix: format!("$EOF:{mark}\r\n").into_bytes(),
                suffix: mark.into_bytes(),
            }
        } else {
            crate::persist::SyncTarget::Disk
        };
        let started = crate::persist::start_sync_job(h, target);
        let mut s = self.inner.lock();
        let waiting: Vec<ClientId> = s.waiting().map(|(k, _)| *k).collect();
        if let Err(e) = started {
            tracing::warn!("BGSAVE for replication failed: {e}");
            for id in &waiting {
                if let Some(l) = s.links.get_mut(id) {
                    l.close = Some("BGSAVE for replication failed".into());
                    l.wake.notify_one();
                }
            }
            return;
        }
        s.job = Some(Job {
            socket,
            ended_before,
        });
        s.seldb = None;
        let head = format!("+FULLRESYNC {} {}\r\n", s.replid, s.offset);
        let offset = s.offset;
        let mut receivers = receivers.into_iter();
        for id in &waiting {
            let l = s.links.get_mut(id).expect("a waiting link");
            // SYNC (the old protocol) gets the RDB without the line.
            if !l.pre_psync {
                l.head.extend_from_slice(head.as_bytes());
            }
            l.ack_off = offset;
            l.state = LinkState::WaitBgsaveEnd;
            l.in_job = true;
            l.buf.clear();
            if let Some(rx) = receivers.next() {
                l.payload = Some(Payload::Stream(rx));
            }
            l.wake.notify_one();
        }
    }
}

impl State {
    /// Closes every replica's link (they reconnect and sync again), as
    /// Redis's disconnectSlaves.
    fn disconnect_replicas(&mut self) {
        for l in self.links.values_mut() {
            l.close = Some("replication changed".into());
            l.abort.notify_one();
            l.wake.notify_one();
        }
    }

    /// The replicas waiting for a snapshot to start.
    fn waiting(&self) -> impl Iterator<Item = (&ClientId, &Link)> {
        self.links
            .iter()
            .filter(|(_, l)| l.state == LinkState::WaitBgsaveStart && l.close.is_none())
    }

    fn replicas(&self, online_only: bool) -> Vec<ReplicaInfo> {
        self.links
            .values()
            .filter(|l| !online_only || l.state == LinkState::Online)
            .map(|l| ReplicaInfo {
                ip: l.ip().to_string(),
                port: l.hello.port,
                state: l.state.name(),
                offset: l.ack_off,
                lag: l.ack_time.elapsed().as_secs(),
            })
            .collect()
    }

    /// Partial resync of `link` from `offset` when `asked` names this
    /// history and the backlog holds the offset: the bytes sent, or None.
    fn try_partial(
        &mut self,
        link: &mut Link,
        name: &str,
        asked: &[u8],
        offset: i64,
    ) -> Option<usize> {
        let asked = String::from_utf8_lossy(asked);
        let ours = asked.eq_ignore_ascii_case(&self.replid);
        let second = asked.eq_ignore_ascii_case(&self.replid2) && offset <= self.second_offset;
        if !ours && !second {
            if asked.starts_with('?') {
                tracing::info!("Full resync requested by replica {name}");
            } else if !asked.eq_ignore_ascii_case(&self.replid2) {
                tracing::info!(
                    "Partial resynchronization not accepted: Replication ID mismatch (Replica asked for '{asked}', my replication IDs are '{}' and '{}')",
                    self.replid,
                    self.replid2
                );
            } else {
                tracing::info!(
                    "Partial resynchronization not accepted: Requested offset for second ID was {offset}, but I can reply up to {}",
                    self.second_offset
                );
            }
            return None;
        }
        let Some(bytes) = self.backlog.as_ref().and_then(|b| b.since(offset)) else {
            tracing::info!(
                "Unable to partial resync with replica {name} for lack of backlog (Replica request was: {offset})."
            );
            if offset > self.offset {
                tracing::warn!("Warning: replica {name} tried to PSYNC with an offset that is greater than the master replication offset.");
            }
            return None;
        };
        // A Latchkey replica continues only with every lock record it
        // lacks, each put back in its place among the bytes.
        let bytes = if link.hello.latchkey {
            let frames = link
                .hello
                .lk_seq
                .and_then(|seq| self.locklog.since(seq, offset - 1));
            let Some(frames) = frames else {
                tracing::info!(
                    "Partial resynchronization not accepted: replica {name} lacks lock records this server no longer has (asked from record {:?}, last is {}).",
                    link.hello.lk_seq,
                    self.locklog.seq()
                );
                return None;
            };
            locklog::merge(&bytes, offset - 1, &frames)
        } else {
            bytes
        };
        link.state = LinkState::Online;
        link.head = if link.hello.psync2 {
            format!("+CONTINUE {}\r\n", self.replid).into_bytes()
        } else {
            b"+CONTINUE\r\n".to_vec()
        };
        let n = bytes.len();
        link.buf = OutBuf::from(&bytes[..]);
        // Its offset is what it has: where it asked to continue from.
        link.ack_off = offset - 1;
        Some(n)
    }

    /// Appends one command to the stream (a SELECT first when `db`
    /// differs from the stream's), for the backlog and every replica
    /// past the start of its sync, as Redis's replicationFeedSlaves.
    fn feed<A: AsRef<[u8]>>(&mut self, db: Option<usize>, args: &[A]) {
        if self.backlog.is_none() && self.links.is_empty() {
            return;
        }
        let mut bytes = Vec::new();
        if let Some(db) = db {
            if self.seldb != Some(db) {
                let d = db.to_string();
                crate::persist::aof::encode(&mut bytes, &[b"SELECT", d.as_bytes()]);
                self.seldb = Some(db);
            }
        }
        crate::persist::aof::encode(&mut bytes, args);
        self.push(&bytes);
    }

    /// Appends bytes of the stream: the offset, the backlog and every
    /// replica past the start of its sync.
    fn push(&mut self, bytes: &[u8]) {
        self.offset += bytes.len() as i64;
        if let Some(b) = self.backlog.as_mut() {
            b.append(bytes);
        }
        self.send(bytes, false, false);
    }

    /// The lock log's bound: the backlog's size.
    fn locklog_cap(&self) -> usize {
        self.backlog.as_ref().map_or(1 << 20, Backlog::size)
    }

    /// A lock record: a frame in the lock log and to every Latchkey
    /// replica past the start of its sync, outside the offsets.
    fn push_lock(&mut self, r: &crate::effects::LockRecord) {
        if self.backlog.is_none() && self.links.is_empty() {
            return;
        }
        let cap = self.locklog_cap();
        let frame = self.locklog.append(r, self.offset, cap);
        // A place taken or left in a line vouches for nothing (it is
        // told at once, acknowledged or not): it may wait a little for
        // the next write, so that a line's traffic costs the replica one
        // wake-up per grant, not two.
        let lazy = matches!(
            r,
            crate::effects::LockRecord::Queued { .. } | crate::effects::LockRecord::Dequeued { .. }
        );
        self.send(&frame, true, lazy);
    }

    /// Bytes to every replica past the start of its sync (the Latchkey
    /// ones only when `latchkey_only`), under the output buffer limits;
    /// `lazy`: they may wait up to [`LAZY_RECORDS`] for more (the link
    /// is woken only to arm its timer).
    fn send(&mut self, bytes: &[u8], latchkey_only: bool, lazy: bool) {
        let (hard, soft, secs) = self.limits;
        for l in self.links.values_mut() {
            if l.state == LinkState::WaitBgsaveStart
                || l.close.is_some()
                || l.hello.rdb_only
                || (latchkey_only && !l.hello.latchkey)
            {
                continue;
            }
            let was_empty = l.buf.is_empty();
            l.buf.push(bytes);
            let wake = if !lazy {
                l.lazy_since = None;
                true
            } else if was_empty {
                l.lazy_since = Some(Instant::now());
                true
            } else {
                false
            };
            let len = l.output() as u64;
            let over = if hard > 0 && len >= hard {
                true
            } else if soft > 0 && len >= soft {
                let since = *l.soft_since.get_or_insert_with(Instant::now);
                since.elapsed() >= Duration::from_secs(secs)
            } else {
                false
            };
            if over {
                tracing::warn!(
                    "Client {} scheduled to be closed ASAP for overcoming of output buffer limits.",
                    l.name()
                );
                l.close = Some("output buffer limits".into());
                l.buf.clear();
                l.abort.notify_one();
            }
            if wake {
                l.wake.notify_one();
            }
        }
    }
}

impl crate::persist::ReplSource for Replication {
    fn save_info(&self) -> Option<crate::persist::ReplInfo> {
        Replication::save_info(self)
    }

    /// `lk-lock-seq` (the last lock record in the state) and `lk-locks`
    /// (the state as lock frames), unless this replica lacks its master's
    /// lock state.
    fn lock_aux(&self, ks: &crate::keyspace::Keyspace) -> Vec<(&'static str, Vec<u8>)> {
        let seq = {
            let s = self.inner.lock();
            if !s.lock_valid {
                return Vec::new();
            }
            s.locklog.seq()
        };
        let mut state = Vec::new();
        for r in ks.lock_state() {
            state.extend_from_slice(&locklog::encode(0, &r));
        }
        vec![
            (crate::persist::LOCK_SEQ_AUX, seq.to_string().into_bytes()),
            (crate::persist::LOCKS_AUX, state),
        ]
    }
}

/// The effects stream's consumer for replicas: Command and Replicated
/// records for every replica, lock records for the Latchkey ones.
struct Feed(Arc<Mutex<State>>);

impl Sink for Feed {
    fn accept(&mut self, e: &Effect) {
        if let Effect::Lock(r) = e {
            let mut s = self.0.lock();
            // A replica passes its master's lock frames on as they came
            // (`Replication::feed_master_lock`).
            if s.master.is_none() {
                s.push_lock(r);
            }
            return;
        }
        if let Effect::Command((db, args)) | Effect::Replicated((db, args)) = e {
            let mut s = self.0.lock();
            // A replica's stream is its master's, fed verbatim
            // (`Replication::feed_master`), as Redis's
            // replicationFeedStreamFromMasterStream.
            if s.master.is_some() {
                return;
            }
            s.feed(Some(*db), args);
            s.data_offset = s.offset;
        }
    }
}

/// A diskless snapshot's writer: each chunk to every replica still
/// taking it (a bounded channel each, so the walk waits for the slowest,
/// as Redis's child waits on its pipe). Fails once none is left.
#[derive(Default)]
struct FanOut {
    txs: Vec<tokio::sync::mpsc::Sender<Bytes>>,
}

impl std::io::Write for FanOut {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let chunk = Bytes::copy_from_slice(buf);
        self.txs
            .retain(|tx| tx.blocking_send(chunk.clone()).is_ok());
        if self.txs.is_empty() {
            tracing::warn!("Diskless rdb transfer, last replica dropped, killing fork child.");
            return Err(std::io::ErrorKind::BrokenPipe.into());
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
