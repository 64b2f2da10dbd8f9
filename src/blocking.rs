//! The one registry of everything that waits for a key: blocked commands
//! (BLPOP, BRPOP, BLMOVE, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP, XREAD,
//! XREADGROUP), WAITAOF (which waits for no key: `keyless`) and
//! `SETTP ... QUEUE` lock waiters.
//!
//! Each key has one line, in the order its waiters arrived. The keyspace
//! hook marks a key *ready* when it changes while someone waits on it; the
//! dispatcher serves ready keys after the command (later: EXEC, a script)
//! that changed them has finished, walking each key's line in order: a
//! blocked command is run again for its client and leaves the line if it
//! was served; a lock waiter takes the key if it is gone. A waiter leaves
//! every line when it is served, times out, is unblocked (CLIENT UNBLOCK),
//! or its connection ends.
//!
//! A connection is blocked by at most one command at a time (it runs
//! nothing else meanwhile), but may queue for locks many times while it
//! goes on running commands.
//!
//! Owns the waiters and their lines. Must not touch the keyspace,
//! connections or commands (it knows `ids` only), and runs nothing: the
//! keyspace hook marks keys ready, `commands::waiters` serves them.

use std::collections::{HashMap, HashSet, VecDeque};

use bytes::Bytes;

use crate::ids::{ClientId, DbKey};

/// A waiter's id, unique for the life of the server.
pub type WaitId = u64;

/// What a blocked command replies when it times out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutReply {
    /// BLPOP, BRPOP, BZPOPMIN, BZPOPMAX, BLMPOP, BZMPOP: a null array.
    NullArray,
    /// BLMOVE, BRPOPLPUSH: a null bulk string.
    NullBulk,
    /// WAITAOF, waiting for no key: the acknowledgements of the AOF
    /// `offset` as they are then (served as soon as they are enough).
    Acks {
        offset: u64,
        numlocal: u64,
        numreplicas: u64,
    },
    /// WAIT, waiting for no key: how many replicas acknowledged the
    /// replication `offset` (served as soon as `numreplicas` did).
    ReplAcks { offset: i64, numreplicas: u64 },
    /// A lock grant under `tp-min-acks` (SETTP, waiting for no
    /// key): told (`reply`) once `numreplicas` Latchkey replicas
    /// acknowledged the stream to `offset`, which follows its lock
    /// record; at the timeout the grant (the hold with fencing token
    /// `token`) is undone and the client told NOREPLICAS.
    LockAcks {
        offset: i64,
        numreplicas: u64,
        token: u64,
        reply: i64,
    },
    /// SHUTDOWN waiting for the replicas (Redis's BLOCKED_SHUTDOWN), with
    /// no deadline: the server exits, or the shutdown is cancelled and it
    /// gets the error. CLIENT UNBLOCK does not end it.
    Shutdown,
}

/// What a waiter waits for.
#[derive(Debug, Clone)]
pub enum Wait {
    /// A blocked command, run again (as its client, in database `db`)
    /// when one of its keys becomes ready. Arguments are copies.
    Command {
        args: Vec<Bytes>,
        db: usize,
        /// Absolute deadline in ms (None: forever).
        deadline: Option<i64>,
        on_timeout: TimeoutReply,
        /// Its reply is dropped (it ran under CLIENT REPLY OFF or SKIP):
        /// served, timed out or unblocked, the client is resumed silently.
        silent: bool,
        /// Served when its key is deleted too (XREADGROUP's answer).
        when_gone: bool,
    },
    /// `SETTP key value [EX|PX] QUEUE`: the key, created with `value` and
    /// bound to the client, as soon as it is gone.
    Lock {
        value: Bytes,
        /// TTL in ms from the hand-over (SETTP's EX/PX).
        ttl_ms: Option<i64>,
        /// A shared hold (SHARED, PERMITS n); None: the key itself.
        share: Option<crate::ids::ShareKind>,
    },
}

#[derive(Debug, Clone)]
pub struct Waiter {
    pub id: WaitId,
    pub client: ClientId,
    pub keys: Vec<DbKey>,
    pub wait: Wait,
}

#[derive(Debug, Default)]
pub struct Blocking {
    waiters: HashMap<WaitId, Waiter>,
    lines: HashMap<DbKey, VecDeque<WaitId>>,
    by_client: HashMap<ClientId, Vec<WaitId>>,
    /// Keys with a line that changed since the last serve, in order.
    ready: Vec<DbKey>,
    ready_set: HashSet<DbKey>,
    next_id: WaitId,
}

impl Blocking {
    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// Whether anyone waits on `key`.
    pub fn has(&self, key: &DbKey) -> bool {
        self.lines.contains_key(key)
    }

    /// Adds a waiter at the end of each of its keys' lines (keys copied by
    /// the caller; a key listed twice is waited on once).
    pub fn add(&mut self, client: ClientId, keys: Vec<DbKey>, wait: Wait) -> WaitId {
        self.insert(client, keys, wait, false)
    }

    /// Adds a waiter at the head of each of its keys' lines (a grant
    /// undone for want of replicas keeps its place).
    pub fn add_first(&mut self, client: ClientId, keys: Vec<DbKey>, wait: Wait) -> WaitId {
        self.insert(client, keys, wait, true)
    }

    fn insert(
        &mut self,
        client: ClientId,
        mut keys: Vec<DbKey>,
        wait: Wait,
        first: bool,
    ) -> WaitId {
        self.next_id += 1;
        let id = self.next_id;
        let mut seen = HashSet::new();
        keys.retain(|k| seen.insert(k.clone()));
        for k in &keys {
            let line = self.lines.entry(k.clone()).or_default();
            if first {
                line.push_front(id);
            } else {
                line.push_back(id);
            }
        }
        self.by_client.entry(client).or_default().push(id);
        self.waiters.insert(
            id,
            Waiter {
                id,
                client,
                keys,
                wait,
            },
        );
        id
    }

    pub fn get(&self, id: WaitId) -> Option<&Waiter> {
        self.waiters.get(&id)
    }

    /// Takes a waiter out of every line; None if it was not waiting.
    pub fn remove(&mut self, id: WaitId) -> Option<Waiter> {
        let w = self.waiters.remove(&id)?;
        for k in &w.keys {
            if let Some(line) = self.lines.get_mut(k) {
                line.retain(|x| *x != id);
                if line.is_empty() {
                    self.lines.remove(k);
                }
            }
        }
        if let Some(v) = self.by_client.get_mut(&w.client) {
            v.retain(|x| *x != id);
            if v.is_empty() {
                self.by_client.remove(&w.client);
            }
        }
        Some(w)
    }

    /// Every client waiting in some lock line.
    pub fn lock_waiters_all(&self) -> Vec<ClientId> {
        self.waiters
            .values()
            .filter(|w| matches!(w.wait, Wait::Lock { .. }))
            .map(|w| w.client)
            .collect()
    }

    /// Removes every waiter of `client` (disconnect, RESET); returns how many.
    pub fn remove_client(&mut self, client: ClientId) -> usize {
        let ids = self.by_client.get(&client).cloned().unwrap_or_default();
        ids.iter().filter(|id| self.remove(**id).is_some()).count()
    }

    /// The blocked command of `client`, if it is blocked.
    pub fn blocked_command(&self, client: ClientId) -> Option<WaitId> {
        self.by_client.get(&client)?.iter().copied().find(|id| {
            matches!(
                self.waiters.get(id),
                Some(Waiter {
                    wait: Wait::Command { .. },
                    ..
                })
            )
        })
    }

    /// Waiters of `client`, of every kind.
    pub fn count_for(&self, client: ClientId) -> usize {
        self.by_client.get(&client).map_or(0, |v| v.len())
    }

    /// Lock lines (`SETTP ... QUEUE`) `client` waits in.
    pub fn lock_waits_of(&self, client: ClientId) -> usize {
        self.by_client.get(&client).map_or(0, |v| {
            v.iter()
                .filter(|id| {
                    matches!(
                        self.waiters.get(id),
                        Some(Waiter {
                            wait: Wait::Lock { .. },
                            ..
                        })
                    )
                })
                .count()
        })
    }

    /// Clients blocked by a command (INFO's blocked_clients).
    pub fn blocked_clients(&self) -> usize {
        self.waiters
            .values()
            .filter(|w| matches!(w.wait, Wait::Command { .. }))
            .count()
    }

    /// Every blocked command's waiter, first come first.
    pub fn blocked_commands(&self) -> Vec<WaitId> {
        let mut v: Vec<WaitId> = self
            .waiters
            .values()
            .filter(|w| matches!(w.wait, Wait::Command { .. }))
            .map(|w| w.id)
            .collect();
        v.sort_unstable();
        v
    }

    /// Waiters for no key (WAITAOF), first come first.
    pub fn keyless(&self) -> Vec<WaitId> {
        let mut v: Vec<WaitId> = self
            .waiters
            .values()
            .filter(|w| w.keys.is_empty())
            .map(|w| w.id)
            .collect();
        v.sort_unstable();
        v
    }

    /// `key`'s line, first come first.
    pub fn line(&self, key: &DbKey) -> Vec<WaitId> {
        self.lines
            .get(key)
            .map(|l| l.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The clients in `key`'s line of lock waiters (TPQUEUE).
    pub fn lock_waiters(&self, key: &DbKey) -> Vec<ClientId> {
        self.line(key)
            .into_iter()
            .filter_map(|id| self.waiters.get(&id))
            .filter(|w| matches!(w.wait, Wait::Lock { .. }))
            .map(|w| w.client)
            .collect()
    }

    /// Lock waiters of `client` for `key` leave (only the one with `value`
    /// when given: TPDEQUEUE); returns how many.
    pub fn remove_locks(&mut self, client: ClientId, key: &DbKey, value: Option<&[u8]>) -> usize {
        let ids: Vec<WaitId> = self
            .line(key)
            .into_iter()
            .filter(|id| {
                self.waiters.get(id).is_some_and(|w| {
                    w.client == client
                        && match &w.wait {
                            Wait::Lock { value: v, .. } => value.is_none_or(|want| v == want),
                            Wait::Command { .. } => false,
                        }
                })
            })
            .collect();
        ids.iter().filter(|id| self.remove(**id).is_some()).count()
    }

    /// `client`'s places in lock lines, each key with the value it waits
    /// to be given, line by line in each line's order.
    pub fn lock_places_of(&self, client: ClientId) -> Vec<(DbKey, Bytes)> {
        let Some(ids) = self.by_client.get(&client) else {
            return Vec::new();
        };
        ids.iter()
            .filter_map(|id| self.waiters.get(id))
            .filter_map(|w| match &w.wait {
                Wait::Lock { value, .. } => Some((w.keys[0].clone(), value.clone())),
                Wait::Command { .. } => None,
            })
            .collect()
    }

    /// The first of `client`'s places in `key`'s lock line.
    pub fn first_lock_of(&self, client: ClientId, key: &DbKey) -> Option<WaitId> {
        self.lines.get(key)?.iter().copied().find(|id| {
            self.waiters
                .get(id)
                .is_some_and(|w| w.client == client && matches!(w.wait, Wait::Lock { .. }))
        })
    }

    /// Every lock line, its waiters in order (a full sync's lock state).
    pub fn lock_lines(&self) -> Vec<(DbKey, Vec<&Waiter>)> {
        self.lines
            .iter()
            .map(|(k, line)| {
                let ws = line
                    .iter()
                    .filter_map(|id| self.waiters.get(id))
                    .filter(|w| matches!(w.wait, Wait::Lock { .. }))
                    .collect::<Vec<_>>();
                (k.clone(), ws)
            })
            .filter(|(_, ws)| !ws.is_empty())
            .collect()
    }

    /// `from`'s places in lock lines become `to`'s, where they stand (a
    /// session resumed or rehomed). Its blocked command, if any, stays.
    pub fn move_locks(&mut self, from: ClientId, to: ClientId) {
        let Some(ids) = self.by_client.remove(&from) else {
            return;
        };
        let (locks, rest): (Vec<WaitId>, Vec<WaitId>) = ids.into_iter().partition(|id| {
            self.waiters
                .get(id)
                .is_some_and(|w| matches!(w.wait, Wait::Lock { .. }))
        });
        if !rest.is_empty() {
            self.by_client.insert(from, rest);
        }
        for id in &locks {
            if let Some(w) = self.waiters.get_mut(id) {
                w.client = to;
            }
        }
        if !locks.is_empty() {
            self.by_client.entry(to).or_default().extend(locks);
        }
    }

    /// Marks `key` ready if anyone waits on it.
    pub fn signal(&mut self, key: &DbKey) {
        if self.lines.contains_key(key) && self.ready_set.insert(key.clone()) {
            self.ready.push(key.clone());
        }
    }

    /// Marks every waited-on key of database `db` ready (FLUSHDB, SWAPDB).
    pub fn signal_db(&mut self, db: usize) {
        let keys: Vec<DbKey> = self
            .lines
            .keys()
            .filter(|(d, _)| *d == db)
            .cloned()
            .collect();
        for k in keys {
            self.signal(&k);
        }
    }

    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The ready keys, in the order they became ready; clears the mark.
    pub fn take_ready(&mut self) -> Vec<DbKey> {
        self.ready_set.clear();
        std::mem::take(&mut self.ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> DbKey {
        (0, Bytes::copy_from_slice(s.as_bytes()))
    }

    fn lock(v: &str) -> Wait {
        Wait::Lock {
            value: Bytes::copy_from_slice(v.as_bytes()),
            ttl_ms: None,
            share: None,
        }
    }

    fn cmd() -> Wait {
        Wait::Command {
            args: vec![],
            db: 0,
            deadline: None,
            on_timeout: TimeoutReply::NullArray,
            silent: false,
            when_gone: false,
        }
    }

    #[test]
    fn lines_keep_arrival_order_and_cleanup_is_complete() {
        let mut b = Blocking::default();
        let a1 = b.add(1, vec![k("a")], lock("x"));
        let a2 = b.add(2, vec![k("a"), k("b"), k("a")], cmd());
        let a3 = b.add(1, vec![k("a")], lock("z"));
        assert_eq!(b.line(&k("a")), vec![a1, a2, a3]);
        assert_eq!(b.line(&k("b")), vec![a2]);
        assert_eq!(b.lock_waiters(&k("a")), vec![1, 1]);
        assert_eq!(b.blocked_command(2), Some(a2));
        assert_eq!(b.blocked_command(1), None);
        assert_eq!(b.blocked_clients(), 1);
        assert_eq!(b.remove_locks(1, &k("a"), Some(b"z")), 1);
        assert_eq!(b.line(&k("a")), vec![a1, a2]);
        assert!(b.remove(a2).is_some());
        assert!(b.remove(a2).is_none());
        assert!(!b.has(&k("b")));
        assert_eq!(b.remove_client(1), 1);
        assert!(b.is_empty());
        assert!(b.lines.is_empty() && b.by_client.is_empty());
    }

    #[test]
    fn ready_keys_are_deduplicated_and_only_for_waited_keys() {
        let mut b = Blocking::default();
        b.add(1, vec![k("a")], cmd());
        b.signal(&k("a"));
        b.signal(&k("zz"));
        b.signal(&k("a"));
        assert_eq!(b.take_ready(), vec![k("a")]);
        assert!(!b.has_ready());
        b.signal_db(0);
        assert_eq!(b.take_ready(), vec![k("a")]);
    }
}
