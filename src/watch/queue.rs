//! `SETTP key value QUEUE`: connections waiting, first come first served,
//! for a taken key. When the key goes away the server creates it at once for
//! the first waiter still connected (bound to that connection, as SETTP
//! would) and pushes `settp key ACQUIRED value` to it: a lock hand-off that
//! costs no round trip and wakes no one else.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

use super::DbKey;
use crate::store::ClientId;

/// One queued `SETTP`: who asked, and the value to store for them.
#[derive(Debug, Clone)]
pub struct Waiter {
    pub id: ClientId,
    pub value: Bytes,
    /// TTL in ms to give the key when it is handed over (SETTP's EX/PX).
    pub ttl_ms: Option<i64>,
}

#[derive(Debug, Default)]
pub struct Queues {
    keys: HashMap<DbKey, VecDeque<Waiter>>,
    /// Entries per client and key, for cleanup and counts.
    by_client: HashMap<ClientId, HashMap<DbKey, usize>>,
    /// Queued keys that went away: the store hands them on once the
    /// current change settles.
    pub ready: Vec<DbKey>,
}

impl Queues {
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn has(&self, key: &DbKey) -> bool {
        self.keys.contains_key(key)
    }

    /// Entries queued by `id`, over all keys.
    pub fn count_for(&self, id: ClientId) -> usize {
        self.by_client.get(&id).map_or(0, |m| m.values().sum())
    }

    /// The waiters of `key`, first in line first.
    pub fn waiters(&self, key: &DbKey) -> Vec<ClientId> {
        self.keys
            .get(key)
            .map(|q| q.iter().map(|w| w.id).collect())
            .unwrap_or_default()
    }

    /// Joins the end of `key`'s line. A connection may queue several
    /// times for one key (several tasks sharing it), each with its value.
    pub fn push(&mut self, id: ClientId, key: DbKey, value: Bytes, ttl_ms: Option<i64>) {
        *self
            .by_client
            .entry(id)
            .or_default()
            .entry(key.clone())
            .or_default() += 1;
        self.keys
            .entry(key)
            .or_default()
            .push_back(Waiter { id, value, ttl_ms });
    }

    /// The first in line, taken off the queue.
    pub fn pop(&mut self, key: &DbKey) -> Option<Waiter> {
        let q = self.keys.get_mut(key)?;
        let w = q.pop_front();
        if q.is_empty() {
            self.keys.remove(key);
        }
        if let Some(w) = &w {
            self.forget(w.id, key, 1);
        }
        w
    }

    fn forget(&mut self, id: ClientId, key: &DbKey, n: usize) {
        if let Some(m) = self.by_client.get_mut(&id) {
            if let Some(c) = m.get_mut(key) {
                *c = c.saturating_sub(n);
                if *c == 0 {
                    m.remove(key);
                }
            }
            if m.is_empty() {
                self.by_client.remove(&id);
            }
        }
    }

    /// Takes `id`'s entries for `key` off the queue (only the one with
    /// `value` when given); returns how many.
    pub fn remove(&mut self, id: ClientId, key: &DbKey, value: Option<&[u8]>) -> usize {
        let Some(q) = self.keys.get_mut(key) else {
            return 0;
        };
        let before = q.len();
        q.retain(|w| w.id != id || value.is_some_and(|v| w.value != v));
        let n = before - q.len();
        if q.is_empty() {
            self.keys.remove(key);
        }
        self.forget(id, key, n);
        n
    }

    /// Everything `id` queued for (disconnect, RESET); returns how many.
    pub fn remove_all(&mut self, id: ClientId) -> usize {
        let Some(m) = self.by_client.remove(&id) else {
            return 0;
        };
        let mut n = 0;
        for key in m.keys() {
            if let Some(q) = self.keys.get_mut(key) {
                let before = q.len();
                q.retain(|w| w.id != id);
                n += before - q.len();
                if q.is_empty() {
                    self.keys.remove(key);
                }
            }
        }
        n
    }

    /// Queued keys of database `db`.
    pub fn keys_in(&self, db: usize) -> Vec<DbKey> {
        super::keys_of_db(&self.keys, db)
    }
}

/// Encodes the hand-off push `settp key ACQUIRED value`.
pub fn acquired_frame(resp3: bool, key: &[u8], value: &[u8]) -> Vec<u8> {
    super::push_of(resp3, &[b"settp", key, b"ACQUIRED", value])
}

#[cfg(test)]
mod tests {
    use super::super::tests::k;
    use super::*;

    #[test]
    fn fifo_and_cleanup() {
        let mut q = Queues::default();
        q.push(1, k("a"), Bytes::from_static(b"x"), None);
        q.push(2, k("a"), Bytes::from_static(b"y"), Some(5));
        q.push(1, k("a"), Bytes::from_static(b"z"), None);
        q.push(1, k("b"), Bytes::from_static(b"w"), None);
        assert_eq!(q.waiters(&k("a")), vec![1, 2, 1]);
        assert_eq!(q.count_for(1), 3);
        assert_eq!(q.remove(1, &k("a"), Some(b"z")), 1);
        assert_eq!(q.waiters(&k("a")), vec![1, 2]);
        let w = q.pop(&k("a")).unwrap();
        assert_eq!((w.id, &w.value[..]), (1, &b"x"[..]));
        assert_eq!(q.remove_all(1), 1);
        assert_eq!(q.count_for(1), 0);
        assert!(!q.has(&k("b")));
        assert_eq!(q.waiters(&k("a")), vec![2]);
        assert_eq!(q.remove(2, &k("a"), None), 1);
        assert!(q.is_empty());
        assert!(q.by_client.is_empty());
    }

    #[test]
    fn frame_bytes() {
        assert_eq!(
            acquired_frame(true, b"lk", b"t1"),
            b">4\r\n$5\r\nsettp\r\n$2\r\nlk\r\n$8\r\nACQUIRED\r\n$2\r\nt1\r\n"
        );
        assert_eq!(&acquired_frame(false, b"lk", b"")[..4], b"*4\r\n");
    }
}
