//! The keyspace: every database, and what hangs off keys (WATCHEX watches,
//! SETTP bindings, the blocking registry), with THE keyspace hook that keeps
//! them in step with the data.
//!
//! It knows nothing of connections. What a change means for a client (a
//! watch push, a lock handed over) goes out through an [`Outbox`] that the
//! server's client table provides; the server's own state (clients, config,
//! stats) lives beside it in the store (`crate::server`), which owns both.
//!
//! The lock service lives under it, in `locks`: its registries (bindings
//! and the fencing counter, shares, existence watches, hand-over frames)
//! and the keyspace's lock operations (`locks/ops.rs`), which change keys
//! and holds together.

pub mod locks;

use bytes::Bytes;

use crate::blocking::{Blocking, Wait, WaitId};
use crate::db::entry::FLAG_BOUND;
use crate::db::evict::Policy;
use crate::db::{Cause, Change, Db, Event, ExpiryTimer, KeyEvent, EV_KEYMISS, EV_NEW};
use crate::effects::{LockRecord, Stream};
use crate::ids::{ClientId, DbKey, Sid};
use crate::transaction::{SwapProbe, TxWatches};
use locks::session::Sessions;
use locks::{
    acquired_frame, lost_frame, push_frame, Bindings, Bound, Holder, ShareKind, Shares, Watches,
};

/// A copy of `dk` that shares no allocation (a record may outlive the
/// read buffer its key came from).
fn copy(dk: &DbKey) -> DbKey {
    crate::ids::own_key(dk.0, &dk.1)
}

/// Where the keyspace sends what clients must be told.
pub trait Outbox {
    /// The protocol (2 or 3) of a live client; None once it is gone or
    /// being killed (it must not be handed anything more).
    fn protocol(&self, id: ClientId) -> Option<u8>;
    /// Queues an out-of-band push for a client, under its output limit.
    fn push(&mut self, id: ClientId, bytes: &[u8]);
    /// `id` was handed a queued lock: its wait is over.
    fn lock_granted(&mut self, id: ClientId);
    /// A keyspace event (Redis's notifyKeyspaceEvent) for `key` in `db`;
    /// called for every event, so it must be cheap when nobody listens.
    fn key_event(&mut self, _db: usize, _event: Event, _key: &[u8]) {}
    /// Whether a client's ACL user may read `key` (existence watches
    /// push only keys their user may read).
    fn may_read_key(&self, _id: ClientId, _key: &[u8]) -> bool {
        true
    }
}

pub struct Keyspace {
    dbs: Vec<Db>,
    /// WATCHEX registrations.
    pub watches: Watches,
    /// WATCH (MULTI/EXEC) registrations and dirty flags.
    pub tx: TxWatches,
    /// SETTP keys and their owning connections; kept in step with the
    /// keys' FLAG_BOUND by the methods here.
    bindings: Bindings,
    /// Shared locks (SETTP ... SHARED / PERMITS n) and their holders; their
    /// keys are flagged bound too.
    shares: Shares,
    /// Session identities; replicated and detached sessions.
    sessions: Sessions,
    /// Hand-overs are held back until replicas acknowledge them
    /// (`tp-min-acks` on a primary; set by `commands::settle`).
    pub gate_grants: bool,
    /// Hand-overs made but not yet told (`gate_grants`).
    pending_grants: Vec<locks::PendingGrant>,
    /// Everything waiting for a key: blocked commands and `SETTP ... QUEUE`
    /// lock waiters.
    pub blocking: Blocking,
    /// Changes since the last save (Redis's `server.dirty`).
    dirty: u64,
    expired_keys: u64,
    evicted_keys: u64,
    active_expire: bool,
    /// `commands::settle` is serving waiters (it is not re-entrant).
    settling: bool,
    /// Set while some client tracks keys (CLIENT TRACKING): the hook then
    /// lists every changed key name for the server to invalidate.
    pub record_changes: bool,
    /// The ordered stream of effects (`crate::effects`): the hook
    /// appends the DEL of a key deleted by no command (expiry, eviction,
    /// a bound key's owner leaving), the lock methods here their lock
    /// records, the dispatcher each command's change records.
    pub effects: Stream,
    /// Changed key names with the client that changed them (Redis's
    /// signalModifiedKey); flushes are the FLUSH commands' own business.
    changed: Vec<(Bytes, Option<ClientId>)>,
}

impl Keyspace {
    pub fn new(databases: usize) -> Keyspace {
        let timer = std::sync::Arc::new(ExpiryTimer::default());
        let lazy = std::sync::Arc::new(crate::lazyfree::LazyFree::default());
        Keyspace {
            dbs: (0..databases.max(1))
                .map(|i| {
                    let mut db = Db::new(i);
                    db.timer = timer.clone();
                    db.lazy = lazy.clone();
                    db
                })
                .collect(),
            watches: Watches::default(),
            tx: TxWatches::default(),
            bindings: Bindings::default(),
            shares: Shares::default(),
            sessions: Sessions::default(),
            gate_grants: false,
            pending_grants: Vec::new(),
            blocking: Blocking::default(),
            dirty: 0,
            expired_keys: 0,
            evicted_keys: 0,
            active_expire: true,
            settling: false,
            record_changes: false,
            effects: Stream::default(),
            changed: Vec::new(),
        }
    }

    /// How many databases there are (`databases`).
    pub fn len(&self) -> usize {
        self.dbs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.dbs.is_empty()
    }

    pub fn db(&self, i: usize) -> &Db {
        &self.dbs[i]
    }

    pub fn db_mut(&mut self, i: usize) -> &mut Db {
        &mut self.dbs[i]
    }

    pub fn dbs(&self) -> &[Db] {
        &self.dbs
    }

    pub fn dbs_mut(&mut self) -> &mut [Db] {
        &mut self.dbs
    }

    /// Whether lookups in every database leave access stamps alone (a
    /// CLIENT NO-TOUCH client's command); returns the previous state.
    pub fn freeze_access(&mut self, on: bool) -> bool {
        let was = self.dbs.first().is_some_and(|d| d.settings.access.frozen);
        if was != on {
            for d in &mut self.dbs {
                d.settings.access.frozen = on;
            }
        }
        was
    }

    /// Two different databases at once (MOVE, COPY ... DB, SWAPDB).
    pub fn two_dbs(&mut self, a: usize, b: usize) -> (&mut Db, &mut Db) {
        assert_ne!(a, b);
        if a < b {
            let (lo, hi) = self.dbs.split_at_mut(b);
            (&mut lo[a], &mut hi[0])
        } else {
            let (lo, hi) = self.dbs.split_at_mut(a);
            (&mut hi[0], &mut lo[b])
        }
    }

    /// The background freeing every database shares (INFO's lazyfree
    /// counters).
    pub fn lazyfree(&self) -> &std::sync::Arc<crate::lazyfree::LazyFree> {
        &self.dbs[0].lazy
    }

    /// Total keys over all databases.
    pub fn total_keys(&self) -> usize {
        self.dbs.iter().map(|d| d.len()).sum()
    }

    pub fn dirty(&self) -> u64 {
        self.dirty
    }

    /// Changes a command made beyond the events it recorded (Redis counts
    /// some commands' changes by their own rule, e.g. PFADD, FLUSHALL).
    pub fn add_dirty(&mut self, n: u64) {
        self.dirty += n;
    }

    pub fn expired_keys(&self) -> u64 {
        self.expired_keys
    }

    pub fn evicted_keys(&self) -> u64 {
        self.evicted_keys
    }

    /// CONFIG RESETSTAT's share of the keyspace.
    pub fn reset_stats(&mut self) {
        self.expired_keys = 0;
        self.evicted_keys = 0;
        self.lazyfree().reset_freed();
        for db in &mut self.dbs {
            db.hits = 0;
            db.misses = 0;
        }
    }

    /// DEBUG SET-ACTIVE-EXPIRE.
    pub fn set_active_expire(&mut self, on: bool) {
        self.active_expire = on;
    }

    /// Marks the start of serving ready keys; false if already serving
    /// (the caller is nested inside it and must leave it to the outer one).
    pub fn begin_settling(&mut self) -> bool {
        !std::mem::replace(&mut self.settling, true)
    }

    pub fn end_settling(&mut self) {
        self.settling = false;
    }

    /// The changes recorded for client-side caching since the last call.
    pub fn take_changes(&mut self) -> Vec<(Bytes, Option<ClientId>)> {
        std::mem::take(&mut self.changed)
    }

    /// Passes every recorded change, in order, to `keyspace_changed` (which
    /// may record further changes: loop until quiet). Serving the keys this
    /// made ready is the dispatcher's `commands::settle`.
    /// `by` is the client whose command is running (None for expiry cycles).
    pub fn drain_events(&mut self, by: Option<ClientId>, out: &mut impl Outbox) {
        // Runs after every command: the databases with changes are found
        // by iterating, not indexing each of the 16 (most calls find one).
        while let Some(i) = self
            .dbs
            .iter()
            .position(|d| !d.events.is_empty() || !d.missed.is_empty())
        {
            // Key misses (recorded only while `keymiss` notifications are
            // on) come from the command's lookups, before its changes.
            for key in std::mem::take(&mut self.dbs[i].missed) {
                out.key_event(i, EV_KEYMISS, &key);
            }
            if self.dbs[i].events.is_empty() {
                continue;
            }
            let mut evs = std::mem::take(&mut self.dbs[i].events);
            for ev in evs.drain(..) {
                self.keyspace_changed(&ev, by, out);
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

    /// THE keyspace hook: called once for every change to every key (write,
    /// delete, expiry, flush, swap), in the order the changes happened, with
    /// the connection that caused it when there is one. WATCH, WATCHEX,
    /// keyspace notifications and client tracking attach here.
    fn keyspace_changed(&mut self, ev: &KeyEvent, by: Option<ClientId>, out: &mut impl Outbox) {
        if ev.change != Change::Loaded {
            self.dirty += 1;
        }
        match ev.cause {
            Cause::Expired => self.expired_keys += 1,
            Cause::Evicted => self.evicted_keys += 1,
            _ => {}
        }
        if let (
            true,
            Change::Key {
                key, exists: false, ..
            },
        ) = (self.effects.on(), &ev.change)
        {
            if ev.cause != Cause::Command && ev.cause != Cause::FieldsExpired {
                let del = vec![Bytes::from_static(b"DEL"), key.clone()];
                self.effects.command(ev.db, del);
            }
        }
        if let (true, Change::Key { key, .. }) = (self.effects.on(), &ev.change) {
            // Expired hash fields leave as one HDEL each, as Redis 7.4's
            // propagateHashFieldDeletion (the emptied key's deletion follows
            // from the last one).
            for f in &ev.fields {
                let hdel = vec![Bytes::from_static(b"HDEL"), key.clone(), f.clone()];
                self.effects.command(ev.db, hdel);
            }
        }
        if let Change::Key {
            key,
            existed,
            exists,
        } = &ev.change
        {
            if !ev.event.name.is_empty() {
                // Redis's dbAdd fires `new`, before the command's own
                // event; RENAME, MOVE and COPY add their destination anew
                // even over a key they replaced.
                if *exists
                    && (!*existed || matches!(ev.event.name, "rename_to" | "move_to" | "copy_to"))
                {
                    out.key_event(ev.db, EV_NEW, key);
                }
                out.key_event(ev.db, ev.event, key);
            }
        }
        if !self.tx.is_empty() && ev.event.modifies {
            self.touch_watched(ev);
        }
        if self.record_changes && ev.event.modifies {
            // Flushes invalidate everything from the FLUSH commands; SWAPDB
            // invalidates nothing, as in Redis.
            if let Change::Key { key, .. } = &ev.change {
                self.changed.push((key.clone(), by));
            }
        }
        if self.bindings.is_empty()
            && self.shares.is_empty()
            && self.watches.is_empty()
            && self.blocking.is_empty()
        {
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
                        if let Some(b) = self.bindings.unbind(&dk) {
                            self.unbound(&dk);
                            // The holder's own command (DEL, SET over it)
                            // is a release; anything else, or its lease
                            // running out, is a loss it is told of.
                            let (own, reason) = match ev.cause {
                                Cause::Command => (true, ev.event.name),
                                Cause::Expired => (false, "expired"),
                                Cause::Evicted => (false, "evicted"),
                                _ => (true, "del"),
                            };
                            let reason = if reason.is_empty() { "del" } else { reason };
                            Self::lost(b, key, by, own, reason, out);
                        }
                    }
                }
                let bound_now = self.dbs[ev.db]
                    .peek_flags(key)
                    .is_some_and(|f| f & FLAG_BOUND != 0);
                if self.shares.get(&dk).is_some() && !bound_now {
                    // A shared key gone by another hand: every hold ends
                    // (the holders' own releases removed theirs first).
                    let reason = match ev.cause {
                        Cause::Expired => "expired",
                        Cause::Evicted => "evicted",
                        _ if ev.event.name.is_empty() => "del",
                        _ => ev.event.name,
                    };
                    self.shares_lost(&dk, by, reason, out);
                }
                self.blocking.signal(&dk);
                if existed != exists {
                    self.watch_transition(&dk, *exists, out);
                }
            }
            Change::Flushed => {
                for dk in self.bindings.keys_in(ev.db) {
                    if let Some(b) = self.bindings.unbind(&dk) {
                        self.unbound(&dk);
                        Self::lost(b, &dk.1, by, true, "flush", out);
                    }
                }
                for dk in self.shares.keys_in(ev.db) {
                    self.shares_lost(&dk, by, "flush", out);
                }
                for dk in self.watches.present_in(ev.db) {
                    self.watch_transition(&dk, false, out);
                }
                self.blocking.signal_db(ev.db);
            }
            Change::Swapped { with } => {
                // Bindings follow their keys to the other database, as a
                // TTL (and MOVE's binding) does; the key's FLAG_BOUND went
                // with its contents. SWAPDB records one event per side:
                // swap the registry once, on the lower side's.
                if ev.db < *with {
                    self.bindings.swap_dbs(ev.db, *with);
                    self.shares.swap_dbs(ev.db, *with);
                }
                for dk in self.watches.keys_in(ev.db) {
                    let now = self.dbs[ev.db].peek_flags(&dk.1).is_some();
                    self.watch_transition(&dk, now, out);
                }
                // Keys that exist after the swap are skipped by hand_over.
                self.blocking.signal_db(ev.db);
            }
            Change::Loaded => {
                // A merged load replaces a bound key with a plain one.
                for dk in self.bindings.keys_in(ev.db) {
                    let still = self.dbs[ev.db]
                        .peek_flags(&dk.1)
                        .is_some_and(|f| f & FLAG_BOUND != 0);
                    if !still {
                        if let Some(b) = self.bindings.unbind(&dk) {
                            self.unbound(&dk);
                            Self::lost(b, &dk.1, by, false, "loaded", out);
                        }
                    }
                }
                for dk in self.shares.keys_in(ev.db) {
                    let still = self.dbs[ev.db]
                        .peek_flags(&dk.1)
                        .is_some_and(|f| f & FLAG_BOUND != 0);
                    if !still {
                        self.shares_lost(&dk, None, "loaded", out);
                    }
                }
                for dk in self.watches.keys_in(ev.db) {
                    let now = self.dbs[ev.db].peek_flags(&dk.1).is_some();
                    self.watch_transition(&dk, now, out);
                }
                self.blocking.signal_db(ev.db);
            }
        }
    }

    /// WATCH's share of the hook: the change dirties the transactions
    /// watching the keys it touched (Redis's touchWatchedKey, and
    /// touchAllWatchedKeysInDb for flushes and swaps).
    fn touch_watched(&mut self, ev: &KeyEvent) {
        match &ev.change {
            Change::Key { key, exists, .. } => self.tx.touched(&(ev.db, key.clone()), *exists),
            Change::Flushed => self.tx.flushed(ev.db),
            // A load follows a flush (which touched them) or merges, which
            // Redis does not signal either.
            Change::Loaded => {}
            Change::Swapped { with } => {
                // Read after the swap: what was in this database is in `with`.
                let (now, before) = (&self.dbs[ev.db], &self.dbs[*with]);
                self.tx.swapped(ev.db, |key| SwapProbe {
                    before: before.stored_expired(key).is_some(),
                    after: now.stored_expired(key),
                });
            }
        }
    }

    /// Pushes ADD/DEL to the watchers of `dk` if its reported state flips.
    fn watch_transition(&mut self, dk: &DbKey, exists: bool, out: &mut impl Outbox) {
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
            if !out.may_read_key(id, &dk.1) {
                continue;
            }
            let resp3 = out.protocol(id) == Some(3);
            out.push(id, &frames[usize::from(resp3)]);
        }
    }

    /// The keyspace's share of a connection ending: its watches, its places
    /// in every line, its bound keys (deleted, so watchers get DEL; the
    /// lines they free become ready for the dispatcher to serve). Safe to
    /// run twice.
    pub fn client_gone(&mut self, id: ClientId, out: &mut impl Outbox) {
        // Watches go first so the connection is not sent its own keys' DELs,
        // and queue places so its own keys are not handed back to it.
        self.watches.remove_all(id);
        self.tx.unwatch_all(id);
        self.blocking.remove_client(id);
        for (db, key) in self.bindings.keys_of(id) {
            self.dbs[db].remove_for(&key, Cause::Disconnect);
            let dk = (db, key);
            self.bindings.unbind(&dk);
            self.unbound(&dk);
        }
        for dk in self.shares.keys_of(id) {
            self.release_share(id, &dk, None, Cause::Disconnect);
        }
        self.drain_events(None, out);
        // A session named in the stream (it held something) ends there
        // too, so replicas forget it.
        if let Some(sid) = self.sessions.get(id) {
            self.effects.lock(|| LockRecord::SessionClosed { sid });
        }
        self.sessions.forget(id);
    }

    /// RESET: a connection's watches and queue places go; its bound keys
    /// stay (the connection lives on).
    pub fn client_reset(&mut self, id: ClientId) {
        self.watches.remove_all(id);
        self.tx.unwatch_all(id);
        let mut keys: Vec<DbKey> = self
            .blocking
            .lock_places_of(id)
            .into_iter()
            .map(|(dk, _)| dk)
            .collect();
        keys.sort();
        keys.dedup();
        for dk in keys {
            self.dequeue_locks(id, &dk, None);
        }
        self.blocking.remove_client(id);
    }

    /// Deletes expired keys in every database, bounded per call.
    pub fn active_expire_cycle(&mut self, budget: usize, out: &mut impl Outbox) -> usize {
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
            self.drain_events(None, out);
        }
        n
    }

    /// Evicts the best victim of one sample round over all databases under
    /// `policy`; false when there is nothing it may evict (only bound keys,
    /// or under a volatile policy only persistent ones).
    pub fn evict_one(&mut self, policy: Policy, samples: usize, out: &mut impl Outbox) -> bool {
        let best = self
            .dbs
            .iter()
            .enumerate()
            .filter_map(|(i, db)| db.evict_sample(policy, samples).map(|(s, k)| (s, i, k)))
            .max_by_key(|(s, _, _)| *s);
        let Some((_, db, key)) = best else {
            return false;
        };
        let key: Bytes = key;
        self.dbs[db].remove_for(&key, Cause::Evicted);
        self.drain_events(None, out);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::{Effect, Recorder};

    /// Lock records that `tests/propagate.rs` does not reach: a hold
    /// moved with its key, the fencing counter raised by a load.
    #[test]
    fn moves_and_fence_raises_are_recorded() {
        let mut ks = Keyspace::new(2);
        let seen = Recorder::default();
        ks.effects.attach(Box::new(seen.clone()));
        let k = |s: &'static str| (0, Bytes::from_static(s.as_bytes()));
        ks.db_mut(0).set_str(&k("a").1, b"v", false, false);
        let token = ks.bind(7, k("a"));
        ks.move_binding(k("a"), (1, k("b").1));
        ks.raise_tokens(token - 1);
        ks.raise_tokens(token + 10);
        ks.effects.publish(&mut |_, _| {});
        assert_eq!(
            seen.records(),
            vec![
                Effect::Lock(LockRecord::Bound {
                    db: 0,
                    key: k("a").1,
                    sid: ks.sessions.get(7).expect("a session with a hold"),
                    value: Bytes::from_static(b"v"),
                    expire_at: None,
                    token,
                }),
                Effect::Lock(LockRecord::Moved {
                    from: k("a"),
                    to: (1, k("b").1),
                }),
                Effect::Lock(LockRecord::Fenced { token: token + 10 }),
            ]
        );
    }
}
