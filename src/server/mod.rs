//! One server's state behind one lock (the `Store`): the keyspace, and the
//! server's own state beside it (the client table in `clients`, config,
//! stats), with its outbox (`notifier`). The tasks that run over it are
//! `crate::runtime`'s; nothing here knows sockets or spawns a task.
//!
//! Commands run with `&mut Store` held, one at a time, like Redis's single
//! thread; that is what makes MULTI/EXEC, scripts and WATCHEX's
//! check-and-register atomic without per-key locking. Connection tasks parse
//! and write outside the lock, so the lock is only held for execution.

use std::sync::atomic::Ordering;

use crate::blocking::WaitId;
pub mod clients;
mod host;
mod notifier;

use crate::config::Config;
use crate::keyspace::Keyspace;
use crate::pubsub::PubSub;
pub use clients::{Buffers, ClientHandle, ClientInfo, ClientSignal, Clients, PushLimits};
use notifier::Notifier;

pub use crate::ids::{ClientId, DbKey};

#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// INFO commandstats and errorstats.
    pub commands: crate::stats::CommandStats,
    pub total_connections: u64,
    pub total_commands: u64,
    pub rejected_connections: u64,
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    pub net_input_bytes: u64,
    pub net_output_bytes: u64,
    /// Clients disconnected by `maxmemory-clients`.
    pub evicted_clients: u64,
}

/// CLIENT PAUSE in force: until when (ms), and whether it holds every
/// command or only those that may write or replicate.
#[derive(Debug, Clone, Copy)]
pub struct Pause {
    pub until: i64,
    pub all: bool,
}

/// A shutdown waiting up to `shutdown-timeout` for the replicas.
#[derive(Debug, Clone, Copy)]
pub struct ShutdownPending {
    /// When it finishes anyway (unix ms).
    pub deadline: i64,
    /// SHUTDOWN's flags (`config::SHUTDOWN_*`).
    pub flags: u32,
}

/// Who paused (Redis's pause_purpose): each purpose's pause is kept apart,
/// and the one in force is the most restrictive of them, so CLIENT UNPAUSE
/// does not end the pause of a FAILOVER or of a SHUTDOWN waiting for
/// replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PausePurpose {
    /// CLIENT PAUSE.
    Client = 0,
    /// SHUTDOWN waiting for its replicas.
    Shutdown = 1,
    /// FAILOVER.
    Failover = 2,
}

pub struct Store {
    /// Databases, watches, bindings, blocked clients.
    pub ks: Keyspace,
    /// The next client id (CLIENT ID), shared with the runtime, which
    /// gives one to each connection it accepts; replicated lock sessions
    /// take theirs here (`Store::new_client_id`), so no two collide.
    ids: std::sync::Arc<std::sync::atomic::AtomicU64>,
    pub clients: Clients,
    /// Channel, pattern and shard-channel subscriptions.
    pub pubsub: PubSub,
    pub monitors: Vec<ClientId>,
    config: Config,
    pub stats: Stats,
    pub slowlog: crate::stats::SlowLog,
    /// CLIENT TRACKING state: who read which keys.
    pub tracking: crate::tracking::Tracking,
    pub latency: crate::stats::Latency,
    pub start_ms: i64,
    /// Memory allocated when the store was created (MEMORY STATS's
    /// startup.allocated).
    pub startup_allocated: u64,
    /// The background save job, the AOF, the save status.
    pub persist: crate::persist::State,
    /// Set by SHUTDOWN; the server's main loop watches it.
    pub shutdown_requested: bool,
    /// A shutdown waiting for the replicas (Redis's shutdown_mstime and
    /// shutdown_flags): `commands::server::shutdown_cron` finishes it.
    pub shutdown_pending: Option<ShutdownPending>,
    /// The pause in force: the most restrictive of `pauses`.
    pause: Option<Pause>,
    /// Each purpose's pause (Redis's client_pause_per_purpose).
    pauses: [Option<Pause>; 3],
    /// Bumped when a pause ends, waking the connections it postponed.
    pause_end: tokio::sync::watch::Sender<u64>,
    /// Connections whose command the pause postponed (`note_postponed`).
    postponed: std::collections::BTreeSet<ClientId>,
    /// The Lua interpreter and script cache (EVAL, SCRIPT).
    pub scripting: crate::scripting::Scripting,
    /// ACL users and log.
    pub acl: crate::acl::Acl,
    /// The TLS listeners' acceptor (CONFIG SET of tls-* replaces it).
    pub tls: crate::tls::Slot,
    /// This server's `loglevel`, for the log filter that consults it.
    log_level: crate::config::LogLevel,
    /// INFO's run_id: random per server start, as in Redis.
    pub run_id: String,
    /// Replication: the IDs, the offset, the backlog, the replicas.
    pub repl: crate::replication::Replication,
    /// DEBUG SET-DISABLE-DENY-SCRIPTS: scripts may run `noscript` commands.
    pub script_disable_deny: bool,
    /// The most memory this server saw allocated (INFO's
    /// used_memory_peak), sampled by `sample_memory`.
    peak_memory: std::sync::atomic::AtomicU64,
}

fn push_limits(c: &Config) -> PushLimits {
    PushLimits {
        hard: c.pubsub_hard_limit,
        soft: c.pubsub_soft_limit,
        soft_seconds: c.pubsub_soft_seconds,
    }
}

impl Store {
    /// A store for `config`; `catalog` is the command table as the ACL
    /// sees it (`commands::acl_catalog()`).
    pub fn new(config: Config, catalog: std::sync::Arc<crate::acl::Catalog>) -> Store {
        let now = crate::util::now_ms();
        let mut acl = crate::acl::Acl::new(catalog);
        acl.users
            .set_default_password(config.requirepass.as_deref().map(str::as_bytes));
        let allocated = crate::stats::used_memory();
        let mut store = Store {
            ks: Keyspace::new(config.databases),
            ids: std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1)),
            clients: Clients::new(push_limits(&config)),
            pubsub: PubSub::default(),
            monitors: Vec::new(),
            stats: Stats::default(),
            slowlog: Default::default(),
            tracking: Default::default(),
            latency: Default::default(),
            start_ms: now,
            startup_allocated: allocated,
            persist: crate::persist::State::new(now / 1000),
            shutdown_requested: false,
            shutdown_pending: None,
            pause: None,
            pauses: [None; 3],
            pause_end: tokio::sync::watch::Sender::new(0),
            postponed: Default::default(),
            scripting: Default::default(),
            acl,
            tls: Default::default(),
            log_level: crate::config::LogLevel::new(&config.loglevel),
            run_id: random_hex40(),
            repl: Default::default(),
            script_disable_deny: false,
            peak_memory: allocated.into(),
            config,
        };
        store.apply_settings();
        store
            .clients
            .set_eviction_limit(crate::config::client_eviction_limit(&store.config));
        store
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// `latency-tracking`: per-command latency histograms are kept.
    pub fn latency_tracking(&self) -> bool {
        self.config.tuning.latency_tracking
    }

    /// `latency-tracking-info-percentiles`.
    pub fn latency_percentiles(&self) -> &[f64] {
        &self.config.tuning.latency_tracking_info_percentiles
    }

    /// Loads the users of the config file's `user` directives or of the
    /// `aclfile`, before any client connects; Err stops start-up.
    pub fn load_acl_at_start(&mut self) -> Result<(), String> {
        let c = &self.config;
        crate::acl::load_at_start(
            &mut self.acl,
            &c.users,
            &c.aclfile,
            c.acl_pubsub_default_all,
        )?;
        // A `user default ...` line replaces what requirepass set.
        Ok(())
    }

    /// Replaces the configuration (CONFIG SET) and applies what the rest of
    /// the server keeps derived from it.
    pub fn set_config(&mut self, config: Config) {
        // requirepass is the default user's password, as in Redis.
        if config.requirepass != self.config.requirepass {
            let p = config.requirepass.as_deref().map(str::as_bytes);
            self.acl.users.set_default_password(p);
            self.acl.changed();
        }
        self.clients.set_limits(push_limits(&config));
        self.clients
            .set_eviction_limit(crate::config::client_eviction_limit(&config));
        self.config = config;
        self.apply_settings();
    }

    /// Passes the settings read outside the config on hot paths to where
    /// they are read: every database's `db::Settings` (eviction stamps,
    /// keymiss recording) and the log level.
    fn apply_settings(&mut self) {
        let c = &self.config;
        let settings = crate::db::Settings {
            access: crate::db::evict::Access {
                policy: c.maxmemory_policy,
                lfu_log_factor: c.lfu_log_factor,
                lfu_decay_time: c.lfu_decay_time,
                frozen: false,
            },
            keymiss: c.notify_keyspace_events & crate::pubsub::NOTIFY_KEY_MISS != 0,
            paused_until: self.pause.map_or(0, |p| p.until),
            lazy_expire: c.tuning.lazyfree_lazy_expire,
            lazy_evict: c.tuning.lazyfree_lazy_eviction,
            lazy_server_del: c.tuning.lazyfree_lazy_server_del,
        };
        for db in self.ks.dbs_mut() {
            db.settings = settings;
        }
        self.log_level.set(&c.loglevel);
    }

    /// This server's log level, a handle that follows CONFIG SET loglevel.
    pub fn log_level(&self) -> &crate::config::LogLevel {
        &self.log_level
    }

    /// Makes `log` (a handle a log filter already holds) this server's
    /// log level, set from its config from now on.
    pub fn share_log_level(&mut self, log: crate::config::LogLevel) {
        log.set(&self.config.loglevel);
        self.log_level = log;
    }

    /// `used_memory()`, recorded in this server's peak.
    pub fn sample_memory(&self) -> u64 {
        let n = crate::stats::used_memory();
        self.peak_memory.fetch_max(n, Ordering::Relaxed);
        n
    }

    /// Memory in use that `maxmemory` does not count (Redis's
    /// freeMemoryGetNotCountedMemory): the replicas' output buffers and
    /// the AOF buffer, so that a replica's sync or a slow disk never makes
    /// the primary evict keys.
    pub fn not_counted_for_evict(&self) -> u64 {
        let aof = self.persist.aof().map_or(0, |a| a.buffered());
        (self.repl.buffered() + aof) as u64
    }

    /// The memory `maxmemory` is compared with: used memory (sampled into
    /// the peak) less what it does not count.
    pub fn memory_for_maxmemory(&self) -> u64 {
        self.sample_memory()
            .saturating_sub(self.not_counted_for_evict())
    }

    /// The most memory this server's samples saw (INFO's
    /// used_memory_peak): at start, at least `hz` times a second by the
    /// expiry loop, on every command under maxmemory, on INFO and MEMORY.
    pub fn peak_memory(&self) -> u64 {
        self.peak_memory.load(Ordering::Relaxed)
    }

    /// The keyspace, and the outbox its hook reports to: this server's
    /// clients, with keyspace notifications published to subscribers.
    /// `by`: the client whose command is running.
    fn split(&mut self, by: Option<ClientId>) -> (&mut Keyspace, Notifier<'_>) {
        let flags = self.config.notify_keyspace_events;
        let out = Notifier::new(&mut self.clients, &mut self.pubsub, &self.acl, flags, by);
        (&mut self.ks, out)
    }

    /// CLIENT PAUSE: a pause only ever grows, in time and in kind (Redis's
    /// pauseClients).
    pub fn pause(&mut self, until: i64, all: bool) {
        self.pause_for(PausePurpose::Client, until, all);
    }

    /// A pause for `purpose`, grown with the one it has (Redis's
    /// pauseClients).
    pub fn pause_for(&mut self, purpose: PausePurpose, until: i64, all: bool) {
        let slot = &mut self.pauses[purpose as usize];
        *slot = Some(match *slot {
            Some(p) => Pause {
                until: p.until.max(until),
                all: p.all || all,
            },
            None => Pause { until, all },
        });
        self.update_pause();
    }

    /// CLIENT UNPAUSE: ends the client command's pause.
    pub fn unpause(&mut self) {
        self.unpause_for(PausePurpose::Client);
    }

    /// Ends `purpose`'s pause (Redis's unpauseClients); postponed
    /// connections run again, or are postponed again by what remains.
    pub fn unpause_for(&mut self, purpose: PausePurpose) {
        if self.pauses[purpose as usize].take().is_some() {
            self.update_pause();
        }
    }

    /// The pause in force from the purposes' (Redis's
    /// updateClientPauseTypeAndEndTime): expired ones go, the most
    /// restrictive kind wins with the furthest end of that kind. When it
    /// ends or gets less restrictive, postponed connections are woken.
    fn update_pause(&mut self) {
        let now = crate::util::now_ms();
        for slot in &mut self.pauses {
            if slot.is_some_and(|p| p.until <= now) {
                *slot = None;
            }
        }
        let all = self.pauses.iter().flatten().any(|p| p.all);
        let until = self
            .pauses
            .iter()
            .flatten()
            .filter(|p| p.all == all)
            .map(|p| p.until)
            .max();
        let old = self.pause;
        self.pause = until.map(|until| Pause { until, all });
        self.keep_expired_until(self.pause.map_or(0, |p| p.until));
        let eased = match (old, self.pause) {
            (Some(_), None) => true,
            (Some(o), Some(n)) => o.all && !n.all || n.until < o.until,
            _ => false,
        };
        if eased {
            self.pause_end.send_modify(|g| *g += 1);
        }
    }

    /// Until when (ms; 0: not) reads leave expired keys in place, as a
    /// pause keeps the dataset still (Redis's expireIfNeeded).
    fn keep_expired_until(&mut self, until: i64) {
        // A replica never deletes expired keys itself: its master's DEL
        // does (Redis 7.0's expireIfNeeded on a replica).
        let until = if self.repl.has_master() {
            i64::MAX
        } else {
            until
        };
        for db in self.ks.dbs_mut() {
            db.settings.paused_until = until;
        }
    }

    /// The server became a replica or a master: on a replica reads leave
    /// expired keys in place, and active expiry stops.
    pub fn follow_role(&mut self) {
        let until = self.pause.map_or(0, |p| p.until);
        self.keep_expired_until(until);
    }

    /// A connection's command was postponed by the pause: INFO counts it
    /// in blocked_clients until it runs (Redis's BLOCKED_POSTPONE).
    pub fn note_postponed(&mut self, id: ClientId, postponed: bool) {
        if postponed {
            self.postponed.insert(id);
        } else {
            self.postponed.remove(&id);
        }
    }

    /// Connections whose command waits for the pause's end.
    pub fn postponed_clients(&self) -> usize {
        self.postponed.len()
    }

    /// The pause in force, if any (one whose time is up ends here).
    pub fn paused(&mut self) -> Option<Pause> {
        let p = self.pause?;
        if crate::util::now_ms() >= p.until {
            self.update_pause();
        }
        self.pause
    }

    /// What a postponed connection waits on for the pause to end.
    pub fn pause_watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.pause_end.subscribe()
    }

    /// See [`Keyspace::drain_events`]; pushes go to this server's clients.
    /// Changed keys then invalidate what tracking clients cached.
    pub fn drain_events(&mut self, by: Option<ClientId>) {
        self.ks.record_changes = !self.tracking.is_empty();
        {
            let (ks, mut out) = self.split(by);
            ks.drain_events(by, &mut out);
        }
        if self.ks.record_changes {
            let mut inv = Vec::new();
            for (key, by) in self.ks.take_changes() {
                self.tracking.key_changed(&key, by, &mut inv);
            }
            let max = self.config.tracking_table_max_keys;
            self.tracking.limit(max, &mut inv);
            self.tracking.flush_broadcasts(&mut inv);
            self.invalidate(inv);
        }
    }

    /// FLUSHDB (`all` false) / FLUSHALL: every tracking client drops its
    /// whole cache.
    pub fn tracking_flushed(&mut self, all: bool) {
        let mut inv = Vec::new();
        self.tracking.flushed(all, &mut inv);
        self.invalidate(inv);
    }

    /// Delivers invalidation messages (Redis's sendTrackingMessage): a
    /// RESP3 client gets a push; one redirecting gets them through its
    /// redirection client, as a push if that one speaks RESP3, else as a
    /// `__redis__:invalidate` message if it is subscribed; a RESP2 client
    /// without redirection gets nothing (RESP2 has no pushes).
    fn invalidate(&mut self, inv: Vec<crate::tracking::Invalidation>) {
        for i in inv {
            let Some(mode) = self.tracking.mode(i.to) else {
                continue;
            };
            let target = mode.redirect.unwrap_or(i.to);
            let redirected = mode.redirect.is_some();
            let Some(c) = self.clients.get(&target) else {
                // The redirection client is gone: the tracking client is
                // told so (in RESP3) instead, each time, as Redis does.
                if let Some(m) = self.tracking.mode_mut(i.to) {
                    m.broken_redirect = true;
                }
                if self.clients.get(&i.to).is_some_and(|h| h.resp == 3) {
                    let mut out = crate::resp::Out::scratch(true);
                    out.push(2);
                    out.bulk(b"tracking-redir-broken");
                    out.int(target as i64);
                    self.clients.push_limited(i.to, &out.buf);
                }
                continue;
            };
            let resp3 = c.resp == 3;
            let subscribed = c.info.sub + c.info.psub + c.info.ssub > 0;
            let mut out = crate::resp::Out::scratch(resp3);
            if resp3 {
                out.push(2);
                out.bulk(b"invalidate");
            } else if redirected && subscribed {
                out.array(3);
                out.bulk(b"message");
                out.bulk(b"__redis__:invalidate");
            } else {
                continue;
            }
            match &i.keys {
                Some(keys) => {
                    out.array(keys.len());
                    for k in keys {
                        out.bulk(k);
                    }
                }
                None => out.null(),
            }
            self.clients.push_limited(target, &out.buf);
        }
    }

    /// Attaches a consumer of the stream of effects (`crate::effects`):
    /// every record made from now on, Command and Lock alike, in order.
    /// The id detaches it (`Stream::detach`).
    pub fn attach_sink(&mut self, sink: Box<dyn crate::effects::Sink>) -> u64 {
        self.ks.effects.attach(sink)
    }

    /// See [`Keyspace::hand_over_lock`].
    pub fn hand_over_lock(&mut self, wid: WaitId) -> bool {
        let (ks, mut out) = self.split(None);
        ks.hand_over_lock(wid, &mut out)
    }

    /// Publishes a message (PUBLISH, or SPUBLISH when `shard`) from client
    /// `by`; returns how many clients received it.
    pub fn publish(
        &mut self,
        by: Option<ClientId>,
        shard: bool,
        channel: &[u8],
        msg: &[u8],
    ) -> usize {
        self.pubsub
            .publish(&mut self.clients, by, shard, channel, msg)
    }

    /// Ends every subscription of a client (disconnect, RESET), keeping
    /// CLIENT LIST's counts in step.
    pub fn unsubscribe_all(&mut self, id: ClientId) {
        self.pubsub.remove_client(id);
        if let Some(c) = self.clients.get_mut(&id) {
            c.info.sub = 0;
            c.info.psub = 0;
            c.info.ssub = 0;
        }
    }

    /// Frees another connection now, like Redis's freeClient (CLIENT KILL,
    /// ACL DELUSER): it leaves every list at once (`client_gone`) and its
    /// task is told to close the socket. The dispatcher serves the lines
    /// this frees after the command.
    pub fn kill_client(&mut self, id: ClientId) {
        if let Some(c) = self.clients.get(&id) {
            c.signal.kill();
        }
        self.client_gone(id);
    }

    /// Releases everything a connection held: its watches, its places in
    /// every line, its bound keys (deleted, so watchers get DEL; the lines
    /// they free become ready for the dispatcher to serve), its handle.
    /// Runs under the store lock, so no other command can observe the
    /// connection half-gone. Safe to run twice.
    pub fn client_gone(&mut self, id: ClientId) {
        crate::util::set_cmd_time();
        self.repl.remove(id);
        self.unsubscribe_all(id);
        {
            let (ks, mut out) = self.split(None);
            ks.client_gone(id, &mut out);
        }
        self.tracking.disable(id);
        self.postponed.remove(&id);
        if let Some(c) = self.clients.remove(&id) {
            let n = c.signal.unreported_out.swap(0, Ordering::Relaxed);
            self.stats.net_output_bytes += n;
        }
        self.monitors.retain(|m| *m != id);
    }

    /// The source of client ids, for the runtime.
    pub fn client_ids(&self) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
        self.ids.clone()
    }

    /// A client id no connection has (a replicated lock session's).
    pub fn new_client_id(&self) -> ClientId {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }

    /// This primary becomes a replica (REPLICAOF host port, FAILOVER): the
    /// holds of its own sessions become replicated sessions (the new
    /// primary has them by identity, detached for their clients to
    /// resume), and the connections that held them or waited in a lock
    /// line are closed, so that their clients go to the new primary (a
    /// replica serves no line). Returns how many were closed.
    pub fn demote_sessions(&mut self) -> usize {
        let ids = self.ids.clone();
        let mut alloc = move || ids.fetch_add(1, Ordering::Relaxed);
        let conns = self.ks.demote_sessions(&mut alloc);
        for id in &conns {
            self.kill_client(*id);
        }
        if !conns.is_empty() {
            tracing::info!(
                "Turning into a replica: {} lock-service connections closed, their sessions kept for the new master",
                conns.len()
            );
        }
        conns.len()
    }

    /// Redis's disconnectAllBlockedClients, when this server starts
    /// following a master: every client blocked by a command (BLPOP, WAIT,
    /// a grant waiting for acknowledgements, which is undone; not a
    /// SHUTDOWN waiting for its replicas) gets `-UNBLOCKED force unblock
    /// from blocking operation, instance state changed (master ->
    /// replica?)` and its connection closes after it. Returns how many.
    pub fn unblock_all_for_replica(&mut self) -> usize {
        use crate::blocking::{TimeoutReply, Wait};
        let mut n = 0;
        for wid in self.ks.blocking.blocked_commands() {
            let shutdown = matches!(
                self.ks.blocking.get(wid).map(|w| &w.wait),
                Some(Wait::Command {
                    on_timeout: TimeoutReply::Shutdown,
                    ..
                })
            );
            if !shutdown && self.fail_blocked(
                wid,
                "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)",
                true,
            ) {
                n += 1;
            }
        }
        n
    }

    /// Ends blocked command `wid` with error `msg` (CLIENT UNBLOCK ...
    /// ERROR, a master turning replica): a grant waiting for
    /// acknowledgements is undone, the error queued for its client (unless
    /// it runs under CLIENT REPLY OFF/SKIP) and the client woken; with
    /// `close`, its connection closes after it. False if `wid` is no
    /// blocked command.
    pub fn fail_blocked(&mut self, wid: crate::blocking::WaitId, msg: &str, close: bool) -> bool {
        use crate::blocking::{TimeoutReply, Wait};
        let Some(w) = self.ks.blocking.remove(wid) else {
            return false;
        };
        let Wait::Command {
            on_timeout, silent, ..
        } = w.wait
        else {
            return false;
        };
        if let TimeoutReply::LockAcks { token, .. } = on_timeout {
            // An unblocked grant is not told: it is undone.
            self.undo_grant(w.client, token);
        }
        if let Some(c) = self.clients.get(&w.client) {
            if !silent {
                let mut reply = crate::resp::Out::new(c.resp == 3);
                reply.error(msg);
                c.signal.queue(&reply.buf);
            }
            if close {
                c.signal.close_after_reply();
            }
            c.signal.wake.notify_one();
        }
        true
    }

    /// Applies a lock record of the master's (`Keyspace::apply_lock`):
    /// watchers and holders here are told through the client table.
    pub fn apply_lock(
        &mut self,
        r: crate::effects::LockRecord,
        alloc: &mut dyn FnMut() -> ClientId,
    ) {
        let (ks, mut out) = self.split(None);
        ks.apply_lock(r, alloc, &mut out);
    }

    /// Tells `client` its hand-over (its `ACQUIRED` frame), held back
    /// until replicas acknowledged it.
    pub fn tell_grant(&mut self, client: ClientId, frame: &[u8]) {
        use crate::keyspace::Outbox;
        let (_, mut out) = self.split(None);
        if out.protocol(client).is_some() {
            out.lock_granted(client);
            out.push(client, frame);
        }
    }

    /// With `tp-min-acks`, a primary whose holds fewer Latchkey replicas
    /// than that vouch for is cut off: no replica acknowledged the lock
    /// mark it sent `CUT_OFF` ago (`Replication::lock_mark`). Its
    /// holders are told LOST and their holds end (`Keyspace::cut_off`),
    /// before a replica promoted since could hand them to anyone
    /// (`DETACHED_MIN`). Returns how many holds ended.
    pub fn check_cut_off(&mut self) -> usize {
        use crate::replication::CUT_OFF;
        let n = self.config().tp_min_acks;
        let holds = !self.ks.bindings().is_empty() || !self.ks.shares().is_empty();
        self.repl.lock_mark(n == 0 || !holds);
        if n == 0 || !holds || self.repl.has_master() {
            return 0;
        }
        if self.repl.lock_replicas_in_touch(CUT_OFF) as u64 >= n {
            return 0;
        }
        let (ks, mut out) = self.split(None);
        let ended = ks.cut_off(&mut out);
        if ended > 0 {
            tracing::warn!(
                "Fewer than tp-min-acks ({n}) Latchkey replicas acknowledged the lock state in {} ms: {ended} lock holds ended, their holders told LOST",
                CUT_OFF.as_millis()
            );
        }
        ended
    }

    /// Undoes a grant told to nobody (`Keyspace::undo_grant`).
    pub fn undo_grant(&mut self, client: ClientId, token: u64) -> bool {
        let (ks, mut out) = self.split(Some(client));
        ks.undo_grant(client, token, &mut out)
    }

    /// Ends the detached sessions whose time ran out (a promoted
    /// replica's, not resumed): as connections ending. Returns how many.
    pub fn end_detached(&mut self) -> usize {
        let now = crate::util::now_ms();
        if self.ks.sessions().due(now).is_empty() {
            return 0;
        }
        let (ks, mut out) = self.split(None);
        ks.end_detached(now, &mut out)
    }

    /// Deletes expired keys in every database, bounded per call.
    pub fn active_expire_cycle(&mut self, budget: usize) -> usize {
        // Nothing expires actively while clients are paused (Redis pauses
        // expiry and eviction with them).
        if self.paused().is_some() || self.repl.has_master() {
            return 0;
        }
        let start = std::time::Instant::now();
        let n = {
            let (ks, mut out) = self.split(None);
            ks.active_expire_cycle(budget, &mut out)
        };
        // As Redis's activeExpireCycle: the cycle's time is a latency
        // event past latency-monitor-threshold.
        let ms = start.elapsed().as_millis() as u64;
        let threshold = self.config.latency_monitor_threshold;
        if threshold > 0 && ms >= threshold {
            self.latency.add("expire-cycle", ms);
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
        if max == 0 || self.paused().is_some() {
            return true;
        }
        // A replica follows its primary's evictions (its DELs), unless
        // told otherwise, as Redis's isSafeToPerformEvictions.
        if self.config.repl.replica_ignore_maxmemory && self.repl.has_master() {
            return true;
        }
        let policy = self.config.maxmemory_policy;
        let samples = self.config.maxmemory_samples;
        // Bounded per call, as Redis's eviction-tenacity time limit; a
        // call that had to stop while still evicting lets the command run
        // (Redis's EVICT_RUNNING) and the next command evicts more.
        for _ in 0..10_000 {
            if self.memory_for_maxmemory() <= max {
                return true;
            }
            if policy == crate::db::evict::Policy::NoEviction {
                return false;
            }
            let (ks, mut out) = self.split(None);
            if !ks.evict_one(policy, samples, &mut out) {
                return false;
            }
        }
        true
    }
}

impl Store {
    /// DEBUG CHANGE-REPL-ID: a new replication ID, the second one
    /// cleared, as Redis's.
    pub fn change_replid(&mut self) {
        self.repl.change_replid();
    }
}

/// 40 random hex digits (a run id).
fn random_hex40() -> String {
    (0..40)
        .map(|_| char::from_digit(rand::random::<u32>() % 16, 16).unwrap_or('0'))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Store {
        // No command table here (the server does not depend on commands).
        let catalog = std::sync::Arc::new(crate::acl::Catalog::new(Vec::new()));
        Store::new(Config::default(), catalog)
    }

    /// Each purpose's pause stands alone; the one in force is the most
    /// restrictive (ALL over WRITE) with the furthest end of that kind, as
    /// Redis's updateClientPauseTypeAndEndTime.
    #[test]
    fn pause_purposes_combine_and_end_apart() {
        let mut s = store();
        let now = crate::util::now_ms();
        s.pause_for(PausePurpose::Failover, i64::MAX, false);
        s.pause(now + 60_000, true);
        let p = s.paused().expect("paused");
        assert!(p.all);
        assert_eq!(p.until, now + 60_000);
        let mut rx = s.pause_watch();
        rx.borrow_and_update();
        // CLIENT UNPAUSE ends the client's pause only: the FAILOVER's
        // write pause stays, and postponed connections are woken.
        s.unpause();
        assert!(rx.has_changed().unwrap());
        let p = s.paused().expect("still paused by the FAILOVER");
        assert!(!p.all);
        assert_eq!(p.until, i64::MAX);
        // A pause that ended by itself goes from the combination.
        s.pause_for(PausePurpose::Shutdown, now - 1, true);
        assert!(!s.paused().expect("paused").all);
        s.unpause_for(PausePurpose::Failover);
        assert!(s.paused().is_none());
    }
}
