//! Client-side caching (Redis's tracking.c): which clients read which keys,
//! and who must be told when a key changes. Plain data kept in the store:
//! the CLIENT TRACKING commands configure it, `call` feeds it the keys
//! of read-only commands, the keyspace hook and FLUSHALL/FLUSHDB drive
//! invalidations, which the server delivers as RESP3 pushes or as
//! `__redis__:invalidate` messages to a redirection client.
//!
//! Keys are tracked by name, whatever their database, as in Redis.
//!
//! Must not touch connections or the keyspace: it knows `ids` only and
//! returns `Invalidation`s, which the store (`Store::drain_events`,
//! `tracking_flushed`) turns into pushes or messages.

use foldhash::HashMap;
use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::ids::ClientId;

/// One client's CLIENT TRACKING settings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Mode {
    /// Where invalidations go (another client's id); None: to itself.
    pub redirect: Option<ClientId>,
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    /// BCAST prefixes ("" tracks every key).
    pub prefixes: BTreeSet<Bytes>,
    /// CLIENT CACHING yes (OPTIN) / no (OPTOUT) for the next command.
    pub caching: bool,
    /// The redirection client went away.
    pub broken_redirect: bool,
}

/// A message to deliver: to `to`, the keys that changed (None: everything,
/// after a flush).
#[derive(Debug, PartialEq)]
pub struct Invalidation {
    pub to: ClientId,
    pub keys: Option<Vec<Bytes>>,
}

#[derive(Debug, Default)]
pub struct Tracking {
    clients: HashMap<ClientId, Mode>,
    /// Default mode: key -> the clients that read it since it last changed.
    keys: HashMap<Bytes, BTreeSet<ClientId>>,
    /// BCAST: prefix -> its clients, and the keys changed under it that
    /// are not yet sent (with the client that changed each, for NOLOOP).
    prefixes: BTreeMap<Bytes, BTreeSet<ClientId>>,
    pending: BTreeMap<Bytes, Vec<(Bytes, Option<ClientId>)>>,
}

/// Whether one of two prefixes starts the other (Redis's stringCheckPrefix).
pub fn overlaps(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

impl Tracking {
    pub fn mode(&self, id: ClientId) -> Option<&Mode> {
        self.clients.get(&id)
    }

    pub fn mode_mut(&mut self, id: ClientId) -> Option<&mut Mode> {
        self.clients.get_mut(&id)
    }

    /// Whether anyone tracks anything (the hook's fast path).
    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    /// CLIENT TRACKING ON: the options replace the old ones; BCAST prefixes
    /// add to those the client had.
    pub fn enable(&mut self, id: ClientId, mut mode: Mode) {
        if let Some(old) = self.clients.get(&id) {
            let mut all = old.prefixes.clone();
            all.append(&mut mode.prefixes);
            mode.prefixes = all;
        }
        if mode.bcast && mode.prefixes.is_empty() {
            mode.prefixes.insert(Bytes::new());
        }
        for p in &mode.prefixes {
            self.prefixes.entry(p.clone()).or_default().insert(id);
        }
        self.clients.insert(id, mode);
    }

    /// CLIENT TRACKING OFF, RESET, or the connection's end.
    pub fn disable(&mut self, id: ClientId) {
        let Some(mode) = self.clients.remove(&id) else {
            return;
        };
        for p in mode.prefixes {
            if let Some(set) = self.prefixes.get_mut(&p) {
                set.remove(&id);
                if set.is_empty() {
                    self.prefixes.remove(&p);
                    self.pending.remove(&p);
                }
            }
        }
        // Its entries in the key table go lazily, when the keys change.
    }

    /// After a read-only command of `id`: remembers `keys` for it, unless
    /// BCAST, OPTIN without CACHING yes, or OPTOUT with CACHING no.
    pub fn remember(&mut self, id: ClientId, keys: impl Iterator<Item = Bytes>) {
        let Some(m) = self.clients.get(&id) else {
            return;
        };
        if m.bcast || (m.optin && !m.caching) || (m.optout && m.caching) {
            return;
        }
        for k in keys {
            // A copy: the name may be a slice of a connection's read buffer.
            match self.keys.get_mut(&k[..]) {
                Some(ids) => {
                    ids.insert(id);
                }
                None => {
                    self.keys
                        .insert(Bytes::copy_from_slice(&k), BTreeSet::from([id]));
                }
            }
        }
    }

    /// CLIENT CACHING applies to the next command only (all of a
    /// transaction's): the dispatcher clears it after any other command.
    pub fn end_caching(&mut self, id: ClientId) {
        if let Some(m) = self.clients.get_mut(&id) {
            m.caching = false;
        }
    }

    /// `key` changed (by `by`): the clients that read it are told at once
    /// (except `by` itself under NOLOOP), and it is queued for the BCAST
    /// prefixes that match it.
    pub fn key_changed(&mut self, key: &[u8], by: Option<ClientId>, out: &mut Vec<Invalidation>) {
        if self.clients.is_empty() {
            return;
        }
        if let Some(ids) = self.keys.remove(key) {
            for to in ids {
                let Some(m) = self.clients.get(&to) else {
                    continue;
                };
                if m.bcast || (m.noloop && by == Some(to)) {
                    continue;
                }
                out.push(Invalidation {
                    to,
                    keys: Some(vec![Bytes::copy_from_slice(key)]),
                });
            }
        }
        if !self.prefixes.is_empty() {
            for p in self.prefixes.keys() {
                if key.starts_with(p) {
                    self.pending
                        .entry(p.clone())
                        .or_default()
                        .push((Bytes::copy_from_slice(key), by));
                }
            }
        }
    }

    /// After a command: one message per BCAST client and prefix with every
    /// key changed under it (Redis's trackingBroadcastInvalidationMessages).
    pub fn flush_broadcasts(&mut self, out: &mut Vec<Invalidation>) {
        if self.pending.is_empty() {
            return;
        }
        for (p, keys) in std::mem::take(&mut self.pending) {
            let Some(ids) = self.prefixes.get(&p) else {
                continue;
            };
            for &to in ids {
                let noloop = self.clients.get(&to).is_some_and(|m| m.noloop);
                let keys: Vec<Bytes> = keys
                    .iter()
                    .filter(|(_, by)| !(noloop && *by == Some(to)))
                    .map(|(k, _)| k.clone())
                    .collect();
                if !keys.is_empty() {
                    out.push(Invalidation {
                        to,
                        keys: Some(keys),
                    });
                }
            }
        }
    }

    /// FLUSHDB/FLUSHALL: every tracking client is told to drop everything
    /// (NOLOOP or not); FLUSHALL also empties the key table.
    pub fn flushed(&mut self, all: bool, out: &mut Vec<Invalidation>) {
        if all {
            self.keys.clear();
        }
        if self.clients.is_empty() {
            return;
        }
        let mut ids: Vec<ClientId> = self.clients.keys().copied().collect();
        ids.sort_unstable();
        for to in ids {
            out.push(Invalidation { to, keys: None });
        }
    }

    /// Keeps the key table within `max` keys by invalidating keys early
    /// (tracking-table-max-keys; 0 = no limit).
    pub fn limit(&mut self, max: usize, out: &mut Vec<Invalidation>) {
        if max == 0 {
            return;
        }
        while self.keys.len() > max {
            let Some(k) = self.keys.keys().next().cloned() else {
                break;
            };
            self.key_changed(&k, None, out);
        }
    }

    /// INFO's tracking_total_keys, tracking_total_items,
    /// tracking_total_prefixes.
    pub fn totals(&self) -> (usize, usize, usize) {
        let items = self.keys.values().map(|s| s.len()).sum();
        (self.keys.len(), items, self.prefixes.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn default_mode_tells_readers_once() {
        let mut t = Tracking::default();
        t.enable(1, Mode::default());
        t.enable(
            2,
            Mode {
                noloop: true,
                ..Default::default()
            },
        );
        t.remember(1, [b("k")].into_iter());
        t.remember(2, [b("k")].into_iter());
        let mut out = Vec::new();
        t.key_changed(b"k", Some(2), &mut out);
        assert_eq!(
            out,
            vec![Invalidation {
                to: 1,
                keys: Some(vec![b("k")])
            }]
        );
        out.clear();
        t.key_changed(b"k", None, &mut out);
        assert!(out.is_empty(), "told once until read again");
    }

    #[test]
    fn optin_and_optout_follow_caching() {
        let mut t = Tracking::default();
        t.enable(
            1,
            Mode {
                optin: true,
                ..Default::default()
            },
        );
        t.remember(1, [b("a")].into_iter());
        t.mode_mut(1).unwrap().caching = true;
        t.remember(1, [b("b")].into_iter());
        assert_eq!(t.totals().0, 1);
        let mut out = Vec::new();
        t.key_changed(b"a", None, &mut out);
        t.key_changed(b"b", None, &mut out);
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn broadcasts_batch_per_prefix() {
        let mut t = Tracking::default();
        t.enable(
            1,
            Mode {
                bcast: true,
                prefixes: [b("x")].into_iter().collect(),
                ..Default::default()
            },
        );
        let mut out = Vec::new();
        t.key_changed(b"xa", Some(3), &mut out);
        t.key_changed(b"ya", Some(3), &mut out);
        t.key_changed(b"xb", Some(3), &mut out);
        assert!(out.is_empty());
        t.flush_broadcasts(&mut out);
        assert_eq!(
            out,
            vec![Invalidation {
                to: 1,
                keys: Some(vec![b("xa"), b("xb")])
            }]
        );
        assert_eq!(t.totals().2, 1);
        t.disable(1);
        assert_eq!(t.totals().2, 0);
    }

    #[test]
    fn table_limit_invalidates_early() {
        let mut t = Tracking::default();
        t.enable(1, Mode::default());
        t.remember(1, (0..10).map(|i| b(&format!("k{i}"))));
        let mut out = Vec::new();
        t.limit(4, &mut out);
        assert_eq!(out.len(), 6);
        assert_eq!(t.totals().0, 4);
    }
}
