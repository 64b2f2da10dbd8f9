//! The shared server state behind one lock: the keyspace, and the server's
//! own state beside it (clients, config, stats).
//!
//! Commands run with `&mut Store` held, one at a time, like Redis's single
//! thread; that is what makes MULTI/EXEC, scripts and WATCHEX's
//! check-and-register atomic without per-key locking. Connection tasks parse
//! and write outside the lock, so the lock is only held for execution.

use std::sync::atomic::Ordering;

use crate::blocking::WaitId;
pub use crate::clients::{ClientHandle, ClientInfo, ClientSignal, Clients, PushLimits};
use crate::config::Config;
use crate::keyspace::Keyspace;
use crate::pubsub::{Notifier, PubSub};

pub use crate::ids::{ClientId, DbKey};

#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub total_connections: u64,
    pub total_commands: u64,
    pub rejected_connections: u64,
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    pub net_input_bytes: u64,
    pub net_output_bytes: u64,
}

pub struct Store {
    /// Databases, watches, bindings, blocked clients.
    pub ks: Keyspace,
    pub clients: Clients,
    /// Channel, pattern and shard-channel subscriptions.
    pub pubsub: PubSub,
    pub monitors: Vec<ClientId>,
    config: Config,
    pub stats: Stats,
    pub next_client_id: ClientId,
    pub start_ms: i64,
    pub lastsave: i64,
    /// Set by SHUTDOWN; the server's main loop watches it.
    pub shutdown_requested: bool,
}

fn push_limits(c: &Config) -> PushLimits {
    PushLimits {
        hard: c.pubsub_hard_limit,
        soft: c.pubsub_soft_limit,
        soft_seconds: c.pubsub_soft_seconds,
    }
}

impl Store {
    pub fn new(config: Config) -> Store {
        crate::db::evict::set_globals(
            config.maxmemory_policy,
            config.lfu_log_factor,
            config.lfu_decay_time,
        );
        crate::db::set_notify_keymiss(
            config.notify_keyspace_events & crate::pubsub::NOTIFY_KEY_MISS != 0,
        );
        let now = crate::util::now_ms();
        Store {
            ks: Keyspace::new(config.databases),
            clients: Clients::new(push_limits(&config)),
            pubsub: PubSub::default(),
            monitors: Vec::new(),
            config,
            stats: Stats::default(),
            next_client_id: 1,
            start_ms: now,
            lastsave: now / 1000,
            shutdown_requested: false,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Replaces the configuration (CONFIG SET) and applies what the rest of
    /// the server keeps derived from it.
    pub fn set_config(&mut self, config: Config) {
        config.apply_globals();
        self.clients.set_limits(push_limits(&config));
        self.config = config;
    }

    /// The keyspace, and the outbox its hook reports to: this server's
    /// clients, with keyspace notifications published to subscribers.
    /// `by`: the client whose command is running.
    fn split(&mut self, by: Option<ClientId>) -> (&mut Keyspace, Notifier<'_>) {
        let flags = self.config.notify_keyspace_events;
        let out = Notifier::new(&mut self.clients, &mut self.pubsub, flags, by);
        (&mut self.ks, out)
    }

    /// See [`Keyspace::drain_events`]; pushes go to this server's clients.
    pub fn drain_events(&mut self, by: Option<ClientId>) {
        let (ks, mut out) = self.split(by);
        ks.drain_events(by, &mut out);
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

    /// Releases everything a connection held: its watches, its places in
    /// every line, its bound keys (deleted, so watchers get DEL; the lines
    /// they free become ready for the dispatcher to serve), its handle.
    /// Runs under the store lock, so no other command can observe the
    /// connection half-gone. Safe to run twice.
    pub fn client_gone(&mut self, id: ClientId) {
        crate::util::set_cmd_time();
        self.unsubscribe_all(id);
        {
            let (ks, mut out) = self.split(None);
            ks.client_gone(id, &mut out);
        }
        if let Some(c) = self.clients.remove(&id) {
            let n = c.signal.unreported_out.swap(0, Ordering::Relaxed);
            self.stats.net_output_bytes += n;
        }
        self.monitors.retain(|m| *m != id);
    }

    /// Deletes expired keys in every database, bounded per call.
    pub fn active_expire_cycle(&mut self, budget: usize) -> usize {
        let (ks, mut out) = self.split(None);
        ks.active_expire_cycle(budget, &mut out)
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
            let (ks, mut out) = self.split(None);
            if !ks.evict_one(policy, samples, &mut out) {
                return false;
            }
        }
        true
    }
}

/// Bytes allocated by the process (jemalloc's `stats.allocated`, refreshed):
/// the `used_memory` that `maxmemory` is compared with.
pub fn used_memory() -> u64 {
    use tikv_jemalloc_ctl::{epoch, stats};
    let _ = epoch::advance();
    stats::allocated::read().unwrap_or(0) as u64
}
