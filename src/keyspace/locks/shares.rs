//! Shared locks: `SETTP key value SHARED` (readers of a read-write lock,
//! whose writer is a plain SETTP) and `SETTP key value PERMITS n` (a
//! counting semaphore). Several connections hold one key at once; the key
//! exists (so WATCHEX reports it) while anyone holds it, holds a marker
//! value ("shared", "permits:n") and is flagged bound like a SETTP key, so
//! it is never saved, logged or evicted. Each hold belongs to a connection
//! and goes when it releases (TPRELEASE), disconnects, or the key goes by
//! another hand. This registry knows holders only; the keyspace keeps the
//! key and the flag in step with it, and the blocking registry's lines
//! (`crate::blocking`) hold the waiters, served first come first served:
//! a waiter that cannot be granted (a writer while readers hold) stops the
//! line, so later readers never overtake it and writers never starve.

use foldhash::{HashMap, HashSet};

use bytes::Bytes;

use super::{own, ClientId, DbKey};

pub use crate::ids::ShareKind;

impl ShareKind {
    /// The value the key holds while held this way.
    pub fn marker(self) -> Vec<u8> {
        match self {
            ShareKind::Read => b"shared".to_vec(),
            ShareKind::Permits(n) => format!("permits:{n}").into_bytes(),
        }
    }

    fn capacity(self) -> usize {
        match self {
            ShareKind::Read => usize::MAX,
            ShareKind::Permits(n) => n as usize,
        }
    }
}

/// One connection's hold of a shared key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub client: ClientId,
    /// The value the holder acquired with (TPRELEASE names it).
    pub value: Bytes,
    pub token: u64,
    /// Unix ms of the grant.
    pub since: i64,
}

#[derive(Debug)]
pub struct Shared {
    pub kind: ShareKind,
    pub holders: Vec<Holder>,
}

impl Shared {
    /// Whether one more holder of `kind` fits.
    pub fn admits(&self, kind: ShareKind) -> bool {
        self.kind == kind && self.holders.len() < kind.capacity()
    }
}

/// The shared keys and their holders.
#[derive(Debug, Default)]
pub struct Shares {
    keys: HashMap<DbKey, Shared>,
    by_client: HashMap<ClientId, HashSet<DbKey>>,
}

impl Shares {
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn get(&self, key: &DbKey) -> Option<&Shared> {
        self.keys.get(key)
    }

    /// Adds a hold (the caller checked `admits`, or the key is new).
    pub fn add(&mut self, key: DbKey, kind: ShareKind, h: Holder) {
        let key = own(key);
        self.by_client
            .entry(h.client)
            .or_default()
            .insert(key.clone());
        self.keys
            .entry(key)
            .or_insert_with(|| Shared {
                kind,
                holders: Vec::new(),
            })
            .holders
            .push(h);
    }

    /// Removes `client`'s hold of `key` with `value` (any of its holds when
    /// None). Returns how many went and how many holders are left.
    pub fn release(
        &mut self,
        client: ClientId,
        key: &DbKey,
        value: Option<&[u8]>,
    ) -> (usize, usize) {
        let Some(s) = self.keys.get_mut(key) else {
            return (0, 0);
        };
        let before = s.holders.len();
        s.holders
            .retain(|h| !(h.client == client && value.is_none_or(|v| h.value == v)));
        let (gone, left) = (before - s.holders.len(), s.holders.len());
        if !s.holders.iter().any(|h| h.client == client) {
            self.forget(client, key);
        }
        if left == 0 {
            self.keys.remove(key);
        }
        (gone, left)
    }

    fn forget(&mut self, client: ClientId, key: &DbKey) {
        super::forget(&mut self.by_client, client, key);
    }

    /// The key went (deleted, replaced, flushed): every hold ends.
    pub fn remove(&mut self, key: &DbKey) -> Option<Shared> {
        let s = self.keys.remove(key)?;
        for h in &s.holders {
            self.forget(h.client, key);
        }
        Some(s)
    }

    /// Puts a key's holds back under another name (RENAME, MOVE, SWAPDB).
    pub fn insert(&mut self, key: DbKey, s: Shared) {
        let key = own(key);
        for h in &s.holders {
            self.by_client
                .entry(h.client)
                .or_default()
                .insert(key.clone());
        }
        self.keys.insert(key, s);
    }

    /// SWAPDB: holds follow their keys to the other database.
    pub fn swap_dbs(&mut self, a: usize, b: usize) {
        super::swap_dbs(&mut self.keys, &mut self.by_client, a, b);
    }

    /// Keys `client` holds a share of.
    pub fn keys_of(&self, client: ClientId) -> Vec<DbKey> {
        self.by_client
            .get(&client)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// How many keys are shared.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Every shared key.
    pub fn iter(&self) -> impl Iterator<Item = (&DbKey, &Shared)> {
        self.keys.iter()
    }

    /// Shared keys of database `db`.
    pub fn keys_in(&self, db: usize) -> Vec<DbKey> {
        super::keys_of_db(&self.keys, db)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::k;
    use super::*;

    fn h(client: ClientId, v: &str) -> Holder {
        Holder {
            client,
            value: Bytes::copy_from_slice(v.as_bytes()),
            token: 1,
            since: 0,
        }
    }

    #[test]
    fn holds_come_and_go() {
        let mut s = Shares::default();
        s.add(k("r"), ShareKind::Read, h(1, "a"));
        s.add(k("r"), ShareKind::Read, h(2, "b"));
        s.add(k("r"), ShareKind::Read, h(1, "c"));
        assert!(s.get(&k("r")).unwrap().admits(ShareKind::Read));
        assert!(!s.get(&k("r")).unwrap().admits(ShareKind::Permits(9)));
        assert_eq!(s.release(1, &k("r"), Some(b"a")), (1, 2));
        assert_eq!(s.keys_of(1), vec![k("r")]);
        assert_eq!(s.release(1, &k("r"), None), (1, 1));
        assert!(s.keys_of(1).is_empty());
        assert_eq!(s.release(2, &k("r"), Some(b"x")), (0, 1));
        assert_eq!(s.release(2, &k("r"), None), (1, 0));
        assert!(s.is_empty() && s.by_client.is_empty());
        s.add(k("p"), ShareKind::Permits(2), h(1, "a"));
        s.add(k("p"), ShareKind::Permits(2), h(2, "a"));
        assert!(!s.get(&k("p")).unwrap().admits(ShareKind::Permits(2)));
        let gone = s.remove(&k("p")).unwrap();
        assert_eq!(gone.holders.len(), 2);
        assert!(s.is_empty() && s.by_client.is_empty());
    }
}
