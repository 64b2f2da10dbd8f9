//! WATCH: the optimistic locks of MULTI/EXEC (Redis 7.0's multi.c), the
//! state behind `commands/multi.rs`. A registry of its own, apart from the
//! lock service's (`crate::keyspace::locks`); it knows nothing of commands.
//!
//! Who watches which key, and per client the "dirty CAS" flag that makes its
//! next EXEC fail. Driven only by the keyspace hook (`keyspace_changed`: a
//! key changed, a database was flushed or swapped), by EXEC's own check of
//! watched keys whose TTL passed, and by the unwatch paths (EXEC, DISCARD,
//! UNWATCH, RESET, the connection's end).
//!
//! Redis's rules kept here:
//! - any change to a watched key dirties its watchers (a write that sets the
//!   same value too, an expiry, an eviction, a bound key's deletion);
//! - a key that was already logically expired (TTL passed, not yet deleted)
//!   when it was watched is flagged `expired`: its deletion is no change
//!   (the flag clears, the client stays clean), a new value is;
//! - FLUSHDB/FLUSHALL touch only watched keys that were stored; SWAPDB
//!   touches keys stored in either database, with the same expired rules;
//! - EXEC fails if a watched key, not expired when watched, has expired
//!   since (even if nobody deleted it yet).
//!
//! A client once dirty drops its watched keys (nothing can make it clean
//! again but UNWATCH, EXEC or DISCARD), as Redis 7.0 does.

use foldhash::{HashMap, HashSet};

use crate::ids::{own_key, ClientId, DbKey};

#[derive(Debug, Default)]
struct KeyEntry {
    /// Stored in its database, expired or not (Redis's dictFind), as the
    /// hook last saw it: what a flush decides by once the keys are gone.
    stored: bool,
    watchers: HashSet<ClientId>,
}

#[derive(Debug, Default)]
struct ClientEntry {
    /// Watched keys, each with its `expired` flag (watched while logically
    /// expired).
    keys: HashMap<DbKey, bool>,
    dirty: bool,
}

/// A swapped database's view of one watched key (SWAPDB), read after the
/// swap: whether the key was stored in the database before it (now in the
/// other one), and whether it is stored now, and if so expired.
#[derive(Debug, Clone, Copy)]
pub struct SwapProbe {
    pub before: bool,
    pub after: Option<bool>,
}

/// The WATCH registry.
#[derive(Debug, Default)]
pub struct TxWatches {
    keys: HashMap<DbKey, KeyEntry>,
    clients: HashMap<ClientId, ClientEntry>,
}

impl TxWatches {
    /// No key is watched (dirty flags may still be set).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Keys `id` watches.
    pub fn count_for(&self, id: ClientId) -> usize {
        self.clients.get(&id).map_or(0, |c| c.keys.len())
    }

    /// Whether `id`'s next EXEC fails because a watched key changed.
    pub fn is_dirty(&self, id: ClientId) -> bool {
        self.clients.get(&id).is_some_and(|c| c.dirty)
    }

    /// WATCH of one key. `stored` is Redis's dictFind: None when absent,
    /// else whether its TTL has passed (keyIsExpired). A key already
    /// watched keeps its first registration; a dirty client watches nothing.
    pub fn watch(&mut self, id: ClientId, key: DbKey, stored: Option<bool>) {
        let c = self.clients.entry(id).or_default();
        if c.dirty || c.keys.contains_key(&key) {
            return;
        }
        let key = own_key(key.0, &key.1);
        c.keys.insert(key.clone(), stored == Some(true));
        let k = self.keys.entry(key).or_default();
        k.stored = stored.is_some();
        k.watchers.insert(id);
    }

    /// UNWATCH (and EXEC, DISCARD, RESET, disconnect): no keys, not dirty.
    pub fn unwatch_all(&mut self, id: ClientId) {
        // Every EXEC ends here; most watched nothing.
        if self.clients.is_empty() {
            return;
        }
        if let Some(c) = self.clients.remove(&id) {
            self.unlink(id, c.keys.keys());
        }
    }

    fn unlink<'a>(&mut self, id: ClientId, keys: impl Iterator<Item = &'a DbKey>) {
        for key in keys {
            if let Some(k) = self.keys.get_mut(key) {
                k.watchers.remove(&id);
                if k.watchers.is_empty() {
                    self.keys.remove(key);
                }
            }
        }
    }

    /// Marks `id` dirty and drops its keys (also a WATCH answered while a
    /// script was busy, when the keyspace may have changed since).
    pub fn dirty(&mut self, id: ClientId) {
        let Some(c) = self.clients.get_mut(&id) else {
            return;
        };
        c.dirty = true;
        let keys = std::mem::take(&mut c.keys);
        self.unlink(id, keys.keys());
    }

    fn watchers(&self, key: &DbKey) -> Vec<ClientId> {
        self.keys
            .get(key)
            .map(|k| k.watchers.iter().copied().collect())
            .unwrap_or_default()
    }

    fn expired_flag(&mut self, id: ClientId, key: &DbKey) -> Option<&mut bool> {
        self.clients.get_mut(&id)?.keys.get_mut(key)
    }

    /// A key was written or deleted; `exists` is whether it is stored after
    /// this change (Redis's touchWatchedKey).
    pub fn touched(&mut self, key: &DbKey, exists: bool) {
        if let Some(k) = self.keys.get_mut(key) {
            k.stored = exists;
        } else {
            return;
        }
        for id in self.watchers(key) {
            if let Some(expired) = self.expired_flag(id, key) {
                if *expired && !exists {
                    // An already expired key deleted: logically no change.
                    *expired = false;
                    continue;
                }
            }
            self.dirty(id);
        }
    }

    /// Database `db` was emptied (FLUSHDB/FLUSHALL): the watched keys that
    /// were stored in it are touched.
    pub fn flushed(&mut self, db: usize) {
        let stored: Vec<DbKey> = self
            .keys
            .iter()
            .filter(|((d, _), k)| *d == db && k.stored)
            .map(|(key, _)| key.clone())
            .collect();
        for key in stored {
            self.touched(&key, false);
        }
    }

    /// Database `db` swapped contents with another (SWAPDB): `probe` tells,
    /// for each watched key of `db`, where it was and is stored.
    /// Redis's touchAllWatchedKeysInDb with the other database as
    /// `replaced_with`.
    pub fn swapped(&mut self, db: usize, probe: impl Fn(&[u8]) -> SwapProbe) {
        let keys: Vec<DbKey> = self
            .keys
            .keys()
            .filter(|(d, _)| *d == db)
            .cloned()
            .collect();
        for key in keys {
            let p = probe(&key.1);
            if let Some(k) = self.keys.get_mut(&key) {
                k.stored = p.after.is_some();
            }
            if !p.before && p.after.is_none() {
                continue;
            }
            for id in self.watchers(&key) {
                let Some(expired) = self.expired_flag(id, &key) else {
                    continue;
                };
                if *expired {
                    match p.after {
                        // The expired key is gone: no logical change.
                        None => {
                            *expired = false;
                            continue;
                        }
                        // Replaced by another expired key: still none.
                        Some(true) => continue,
                        Some(false) => {}
                    }
                } else if !p.before && p.after == Some(true) {
                    // A missing key replaced by an expired one.
                    *expired = true;
                    continue;
                }
                self.dirty(id);
            }
        }
    }

    /// EXEC's check (Redis's isWatchedKeyExpired): a key of `id`, not
    /// expired when watched, whose TTL has passed since. `expired` looks a
    /// key up without deleting it.
    pub fn any_expired_since(&self, id: ClientId, expired: impl Fn(&DbKey) -> bool) -> bool {
        self.clients
            .get(&id)
            .is_some_and(|c| c.keys.iter().any(|(k, was)| !*was && expired(k)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn dk(db: usize, k: &'static str) -> DbKey {
        (db, Bytes::from_static(k.as_bytes()))
    }

    #[test]
    fn a_change_dirties_every_watcher_and_drops_their_keys() {
        let mut w = TxWatches::default();
        w.watch(1, dk(0, "a"), Some(false));
        w.watch(1, dk(0, "b"), None);
        w.watch(2, dk(0, "a"), Some(false));
        w.touched(&dk(0, "a"), true);
        assert!(w.is_dirty(1) && w.is_dirty(2));
        assert_eq!(w.count_for(1), 0);
        assert!(w.is_empty());
        // A dirty client watches nothing more until it unwatches.
        w.watch(1, dk(0, "c"), None);
        assert_eq!(w.count_for(1), 0);
        w.unwatch_all(1);
        assert!(!w.is_dirty(1));
        w.watch(1, dk(0, "c"), None);
        assert_eq!(w.count_for(1), 1);
    }

    #[test]
    fn another_database_or_key_is_no_change() {
        let mut w = TxWatches::default();
        w.watch(1, dk(0, "a"), Some(false));
        w.touched(&dk(1, "a"), true);
        w.touched(&dk(0, "b"), false);
        assert!(!w.is_dirty(1));
    }

    #[test]
    fn an_expired_key_deleted_is_no_change_but_a_new_value_is() {
        let mut w = TxWatches::default();
        w.watch(1, dk(0, "a"), Some(true));
        w.touched(&dk(0, "a"), false);
        assert!(!w.is_dirty(1));
        // The flag is cleared: a later write dirties.
        w.touched(&dk(0, "a"), true);
        assert!(w.is_dirty(1));
    }

    #[test]
    fn flush_touches_only_stored_keys() {
        let mut w = TxWatches::default();
        w.watch(1, dk(0, "missing"), None);
        w.watch(2, dk(0, "there"), Some(false));
        w.watch(3, dk(0, "stale"), Some(true));
        w.flushed(0);
        assert!(!w.is_dirty(1));
        assert!(w.is_dirty(2));
        assert!(!w.is_dirty(3));
        // A key created after WATCH is stored at the flush.
        w.touched(&dk(0, "missing"), true);
        assert!(w.is_dirty(1));
    }

    #[test]
    fn swap_follows_the_expired_rules() {
        let probe = |before, after| move |_: &[u8]| SwapProbe { before, after };
        let mut w = TxWatches::default();
        w.watch(1, dk(0, "k"), None);
        w.swapped(0, probe(false, None));
        assert!(!w.is_dirty(1));
        w.swapped(0, probe(false, Some(true)));
        assert!(
            !w.is_dirty(1),
            "missing replaced by expired: flagged, clean"
        );
        w.swapped(0, probe(true, Some(true)));
        assert!(!w.is_dirty(1), "expired stays expired");
        w.swapped(0, probe(true, None));
        assert!(!w.is_dirty(1), "expired gone");
        w.swapped(0, probe(false, Some(false)));
        assert!(w.is_dirty(1));
    }

    #[test]
    fn exec_sees_keys_expired_since_watch() {
        let mut w = TxWatches::default();
        w.watch(1, dk(0, "old"), Some(true));
        assert!(!w.any_expired_since(1, |_| true));
        w.watch(1, dk(0, "new"), Some(false));
        assert!(w.any_expired_since(1, |k| k.1 == "new"));
        assert!(!w.any_expired_since(1, |_| false));
    }
}
