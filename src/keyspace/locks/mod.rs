//! The lock service, in one folder: keys bound to sessions (`Bindings`,
//! with the fencing counter), shared holds (`shares`: read-write locks and
//! semaphores), the ACQUIRED/LOST frames of a line's hand-over (`queue`),
//! existence watches (`Watches`, WATCHEX), sessions (`session`: how long a
//! silent one lives), and the keyspace's operations that change keys and
//! holds together (`ops`: `Keyspace::bind`, `take_share`, `release_share`,
//! `hand_over_lock`, ...). Its commands are one family file,
//! `commands/locks.rs`; its waiters (SETTP ... QUEUE lines) are in the one
//! blocking registry (`crate::blocking`); the timer that ends a silent
//! session is the connection task's (`runtime/conn.rs`), which asks
//! `session`. The registries here know nothing of commands, connections or
//! the keyspace.
//!
//! The registries live in the `Keyspace` (`crate::keyspace`), under the store
//! lock, and are driven from two places only: the keyspace hook
//! `Keyspace::keyspace_changed` (a key appeared, vanished, was replaced, a
//! database was flushed or swapped) and the connection cleanup path
//! `Keyspace::client_gone`.
//!
//! Each watched key keeps the existence state last reported to its watchers;
//! a push is sent only when that state flips. So every watcher sees a strictly
//! alternating EXIST/NOEXIST → ADD/DEL sequence, in the order the changes
//! happened, with nothing skipped.

use foldhash::{HashMap, HashSet};

use bytes::Bytes;

pub use crate::ids::{ClientId, DbKey};

mod ops;
mod queue;
mod replicated;
pub mod session;
pub mod shares;
pub use queue::{acquired_frame, lost_frame};
pub use shares::{Holder, ShareKind, Shared, Shares};

/// A line's hand-over not yet told to its waiter (`tp-min-acks`): it
/// is pushed its `ACQUIRED` frame once replicas acknowledged `offset`
/// (set once the grant's record is in the stream), or the grant is undone
/// and the waiter put back at the head of its line.
#[derive(Debug, Clone)]
pub struct PendingGrant {
    pub client: ClientId,
    pub token: u64,
    /// The `ACQUIRED` push, in the client's protocol.
    pub frame: Vec<u8>,
    pub key: DbKey,
    /// The waiter, to put back in line.
    pub wait: crate::blocking::Wait,
    /// When it was granted (unix ms).
    pub since: i64,
    pub offset: Option<i64>,
}

/// The record of a place in `dk`'s line for session `sid` (None for a
/// waiter that is not a lock's).
fn queued_record(
    dk: &DbKey,
    sid: crate::ids::Sid,
    wait: &crate::blocking::Wait,
    first: bool,
) -> Option<crate::effects::LockRecord> {
    let crate::blocking::Wait::Lock {
        value,
        ttl_ms,
        share,
    } = wait
    else {
        return None;
    };
    Some(crate::effects::LockRecord::Queued {
        db: dk.0,
        key: dk.1.clone(),
        sid,
        value: value.clone(),
        ttl_ms: *ttl_ms,
        share: *share,
        first,
    })
}

/// A key whose bytes do not share an allocation with anything else.
fn own(key: DbKey) -> DbKey {
    (key.0, Bytes::copy_from_slice(&key.1))
}

/// SWAPDB for a registry of keys: entries of databases `a` and `b`, and
/// their names in the per-client sets, trade databases.
fn swap_dbs<V>(
    keys: &mut HashMap<DbKey, V>,
    by_client: &mut HashMap<ClientId, HashSet<DbKey>>,
    a: usize,
    b: usize,
) {
    let other = |d: usize| if d == a { b } else { a };
    let moved: Vec<DbKey> = keys
        .keys()
        .filter(|(d, _)| *d == a || *d == b)
        .cloned()
        .collect();
    let mut entries: Vec<(DbKey, V)> = moved
        .into_iter()
        .filter_map(|k| keys.remove(&k).map(|v| (k, v)))
        .collect();
    for ((d, k), v) in entries.drain(..) {
        keys.insert((other(d), k), v);
    }
    for set in by_client.values_mut() {
        if set.iter().any(|(d, _)| *d == a || *d == b) {
            *set = set
                .drain()
                .map(|(d, k)| {
                    if d == a || d == b {
                        (other(d), k)
                    } else {
                        (d, k)
                    }
                })
                .collect();
        }
    }
}

/// Takes `key` out of `id`'s set of keys, and the set once it is empty.
fn forget(by_client: &mut HashMap<ClientId, HashSet<DbKey>>, id: ClientId, key: &DbKey) {
    if let Some(set) = by_client.get_mut(&id) {
        set.remove(key);
        if set.is_empty() {
            by_client.remove(&id);
        }
    }
}

/// The keys of database `db` in a map keyed by `DbKey` (FLUSHDB, SWAPDB).
fn keys_of_db<V>(map: &HashMap<DbKey, V>, db: usize) -> Vec<DbKey> {
    map.keys().filter(|(d, _)| *d == db).cloned().collect()
}

#[derive(Debug, Default)]
struct KeyWatch {
    /// Existence last reported to the watchers.
    exists: bool,
    watchers: HashSet<ClientId>,
}

/// Existence watches: who watches which key, and the key's reported state.
#[derive(Debug, Default)]
pub struct Watches {
    keys: HashMap<DbKey, KeyWatch>,
    by_client: HashMap<ClientId, HashSet<DbKey>>,
}

impl Watches {
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Registered (key, watcher) pairs; for tests and INFO.
    pub fn len(&self) -> usize {
        self.keys.values().map(|w| w.watchers.len()).sum()
    }

    /// Distinct watched keys.
    pub fn keys_len(&self) -> usize {
        self.keys.len()
    }

    /// Keys watched by `id`.
    pub fn count_for(&self, id: ClientId) -> usize {
        self.by_client.get(&id).map_or(0, |s| s.len())
    }

    /// Registers `id` as a watcher of `key`, whose current existence is
    /// `exists` (the caller checked it under the same lock).
    pub fn add(&mut self, id: ClientId, key: DbKey, exists: bool) {
        // Kept long-term: a copy, not a slice of the read buffer.
        let key = own(key);
        let w = self.keys.entry(key.clone()).or_default();
        w.exists = exists;
        w.watchers.insert(id);
        self.by_client.entry(id).or_default().insert(key);
    }

    /// Removes one watch; returns whether it existed.
    pub fn remove(&mut self, id: ClientId, key: &DbKey) -> bool {
        let Some(set) = self.by_client.get_mut(&id) else {
            return false;
        };
        if !set.remove(key) {
            return false;
        }
        if set.is_empty() {
            self.by_client.remove(&id);
        }
        self.unlink(id, key);
        true
    }

    fn unlink(&mut self, id: ClientId, key: &DbKey) {
        if let Some(w) = self.keys.get_mut(key) {
            w.watchers.remove(&id);
            if w.watchers.is_empty() {
                self.keys.remove(key);
            }
        }
    }

    /// Removes every watch of `id`; returns how many there were.
    pub fn remove_all(&mut self, id: ClientId) -> usize {
        let Some(set) = self.by_client.remove(&id) else {
            return 0;
        };
        let n = set.len();
        for key in &set {
            self.unlink(id, key);
        }
        n
    }

    /// Records that `key` now does or does not exist. Returns the watchers to
    /// notify when the reported state flips (empty otherwise).
    pub fn transition(&mut self, key: &DbKey, exists: bool) -> Vec<ClientId> {
        match self.keys.get_mut(key) {
            Some(w) if w.exists != exists => {
                w.exists = exists;
                w.watchers.iter().copied().collect()
            }
            _ => Vec::new(),
        }
    }

    /// Watched keys of database `db` that are currently reported present.
    pub fn present_in(&self, db: usize) -> Vec<DbKey> {
        self.keys
            .iter()
            .filter(|((d, _), w)| *d == db && w.exists)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Every watched key of database `db`.
    pub fn keys_in(&self, db: usize) -> Vec<DbKey> {
        keys_of_db(&self.keys, db)
    }
}

/// One key's binding: who holds it, since when, with which fencing token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub owner: ClientId,
    /// The fencing token of this acquisition.
    pub token: u64,
    /// When it was acquired (unix ms).
    pub since: i64,
}

/// Connection-bound keys (SETTP): the binding of each bound key and the
/// reverse map, and the fencing-token counter.
#[derive(Debug, Default)]
pub struct Bindings {
    owner: HashMap<DbKey, Bound>,
    by_client: HashMap<ClientId, HashSet<DbKey>>,
    /// The last fencing token given.
    last_token: u64,
}

impl Bindings {
    pub fn is_empty(&self) -> bool {
        self.owner.is_empty()
    }

    pub fn len(&self) -> usize {
        self.owner.len()
    }

    pub fn owner(&self, key: &DbKey) -> Option<ClientId> {
        self.owner.get(key).map(|b| b.owner)
    }

    pub fn get(&self, key: &DbKey) -> Option<&Bound> {
        self.owner.get(key)
    }

    /// The last fencing token given (saved with the data, so a restart
    /// goes on above it).
    pub fn last_token(&self) -> u64 {
        self.last_token
    }

    /// After a load: tokens go on above `t`.
    pub fn raise_tokens(&mut self, t: u64) {
        self.last_token = self.last_token.max(t);
    }

    /// A new fencing token: greater than every one given before, here and
    /// (by the wall clock in microseconds, and the saved counter) before
    /// a restart.
    pub fn next_token(&mut self) -> u64 {
        let now_us = (crate::util::now_ms().max(0) as u64).saturating_mul(1000);
        self.last_token = (self.last_token + 1).max(now_us);
        self.last_token
    }

    /// Binds `key` to `id` as a new acquisition; returns its token.
    pub fn bind(&mut self, id: ClientId, key: DbKey) -> u64 {
        let token = self.next_token();
        let since = crate::util::now_ms();
        self.insert(
            key,
            Bound {
                owner: id,
                token,
                since,
            },
        );
        token
    }

    /// Puts a binding in place as it is (a key renamed or moved between
    /// databases keeps its holder and token).
    pub fn insert(&mut self, key: DbKey, b: Bound) {
        // Kept long-term: a copy, not a slice of the read buffer.
        let key = own(key);
        if let Some(prev) = self.owner.insert(key.clone(), b) {
            if prev.owner != b.owner {
                self.forget(prev.owner, &key);
            }
        }
        self.by_client.entry(b.owner).or_default().insert(key);
    }

    fn forget(&mut self, id: ClientId, key: &DbKey) {
        forget(&mut self.by_client, id, key);
    }

    /// SWAPDB: bindings follow their keys to the other database.
    pub fn swap_dbs(&mut self, a: usize, b: usize) {
        swap_dbs(&mut self.owner, &mut self.by_client, a, b);
    }

    /// Ends a key's binding; returns what it was.
    pub fn unbind(&mut self, key: &DbKey) -> Option<Bound> {
        let b = self.owner.remove(key)?;
        self.forget(b.owner, key);
        Some(b)
    }

    /// Keys bound to `id`.
    pub fn keys_of(&self, id: ClientId) -> Vec<DbKey> {
        self.by_client
            .get(&id)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn count_for(&self, id: ClientId) -> usize {
        self.by_client.get(&id).map_or(0, |s| s.len())
    }

    /// Bound keys of database `db`.
    pub fn keys_in(&self, db: usize) -> Vec<DbKey> {
        keys_of_db(&self.owner, db)
    }

    /// Every binding.
    pub fn iter(&self) -> impl Iterator<Item = (&DbKey, &Bound)> {
        self.owner.iter()
    }
}

/// Encodes a push of bulk strings: a RESP3 push frame, or a plain array in
/// RESP2 (written between replies).
pub fn push_of(resp3: bool, parts: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + parts.iter().map(|p| p.len() + 16).sum::<usize>());
    v.push(if resp3 { b'>' } else { b'*' });
    v.extend_from_slice(itoa::Buffer::new().format(parts.len()).as_bytes());
    v.extend_from_slice(b"\r\n");
    for part in parts {
        v.push(b'$');
        v.extend_from_slice(itoa::Buffer::new().format(part.len()).as_bytes());
        v.extend_from_slice(b"\r\n");
        v.extend_from_slice(part);
        v.extend_from_slice(b"\r\n");
    }
    v
}

/// Encodes a `watchex key ADD|DEL` push.
pub fn push_frame(resp3: bool, key: &[u8], added: bool) -> Vec<u8> {
    let what: &[u8] = if added { b"ADD" } else { b"DEL" };
    push_of(resp3, &[b"watchex", key, what])
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn k(s: &str) -> DbKey {
        (0, Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn transitions_alternate_and_dedupe() {
        let mut w = Watches::default();
        w.add(1, k("a"), false);
        w.add(2, k("a"), false);
        assert!(w.transition(&k("a"), false).is_empty());
        let mut got = w.transition(&k("a"), true);
        got.sort();
        assert_eq!(got, vec![1, 2]);
        assert!(w.transition(&k("a"), true).is_empty());
        assert_eq!(w.transition(&k("a"), false).len(), 2);
        assert!(w.transition(&k("zz"), true).is_empty());
    }

    #[test]
    fn removal_leaves_no_entries() {
        let mut w = Watches::default();
        for i in 0..100 {
            w.add(7, k(&format!("k{i}")), i % 2 == 0);
            w.add(8, k(&format!("k{i}")), i % 2 == 0);
        }
        assert_eq!(w.len(), 200);
        assert!(w.remove(7, &k("k1")));
        assert!(!w.remove(7, &k("k1")));
        assert_eq!(w.remove_all(7), 99);
        assert_eq!(w.remove_all(8), 100);
        assert!(w.is_empty());
        assert!(w.by_client.is_empty());
    }

    #[test]
    fn bindings_round_trip() {
        let mut b = Bindings::default();
        b.bind(1, k("x"));
        b.bind(1, k("y"));
        assert_eq!(b.owner(&k("x")), Some(1));
        assert_eq!(b.count_for(1), 2);
        assert_eq!(b.unbind(&k("x")).map(|b| b.owner), Some(1));
        assert_eq!(b.owner(&k("x")), None);
        b.bind(2, k("y"));
        assert_eq!(b.count_for(1), 0);
        assert_eq!(b.keys_of(2), vec![k("y")]);
        assert_eq!(b.unbind(&k("y")).map(|b| b.owner), Some(2));
        assert!(b.is_empty() && b.by_client.is_empty());
    }

    #[test]
    fn tokens_only_grow() {
        let mut b = Bindings::default();
        let t1 = b.bind(1, k("x"));
        let t2 = b.bind(2, k("x"));
        assert!(t2 > t1);
        // Above a saved counter far ahead of the clock, too.
        b.raise_tokens(u64::MAX / 2);
        assert_eq!(b.bind(1, k("y")), u64::MAX / 2 + 1);
        assert_eq!(b.get(&k("y")).map(|b| b.token), Some(u64::MAX / 2 + 1));
    }

    #[test]
    fn push_bytes() {
        assert_eq!(
            push_frame(true, b"k", true),
            b">3\r\n$7\r\nwatchex\r\n$1\r\nk\r\n$3\r\nADD\r\n"
        );
        assert_eq!(
            push_frame(false, b"", false),
            b"*3\r\n$7\r\nwatchex\r\n$0\r\n\r\n$3\r\nDEL\r\n"
        );
    }
}
