//! Lock state across servers: what a full sync sends of it
//! ([`Keyspace::lock_state`]), how a replica applies its primary's lock
//! records ([`Keyspace::apply_lock`]), and what becomes of the replicated
//! sessions when the replica is promoted (detached until a deadline:
//! [`Keyspace::detach_replicated`], [`Keyspace::end_detached`]).
//!
//! On a replica a replicated session holds its keys as a connection
//! would (the keys flagged bound, in the same registries), under a local
//! id of its own that no connection has. The records' data changes come
//! with them: a `Bound` or `ShareAdded` record carries the key's value
//! (a bound key is in no command record), an `Unbound` or a last
//! `ShareReleased` deletes it (the primary's command that ended the hold,
//! if any, is logged after it and finds nothing to do).
//!
//! Must not touch connections or the server: keys change through `Db`'s
//! methods (so the hook hears them: existence watchers on a replica are
//! told), clients through the `Outbox`.

use crate::db::Event;
use crate::keyspace::*;

impl Keyspace {
    /// Every hold as the record that makes it, then the fencing counter:
    /// the lock state a full sync sends (applied in order with
    /// `apply_lock` on an empty replica, it gives the same state).
    pub fn lock_state(&self) -> Vec<LockRecord> {
        let mut v = Vec::new();
        for ((db, key), b) in self.bindings.iter() {
            let (Some(sid), Some((val, expire))) =
                (self.sessions.get(b.owner), self.dbs[*db].find_stored(key))
            else {
                continue;
            };
            let value = match val {
                crate::db::ValueRef::Str(s) => Bytes::copy_from_slice(s),
                _ => Bytes::new(),
            };
            v.push(LockRecord::Bound {
                db: *db,
                key: key.clone(),
                sid,
                value,
                expire_at: expire,
                token: b.token,
            });
        }
        for ((db, key), sh) in self.shares.iter() {
            for h in &sh.holders {
                let Some(sid) = self.sessions.get(h.client) else {
                    continue;
                };
                v.push(LockRecord::ShareAdded {
                    db: *db,
                    key: key.clone(),
                    sid,
                    permits: match sh.kind {
                        ShareKind::Read => None,
                        ShareKind::Permits(n) => Some(n),
                    },
                    value: h.value.clone(),
                    token: h.token,
                });
            }
        }
        // Every line, in order: a promoted replica keeps the places.
        for (dk, waiters) in self.blocking.lock_lines() {
            for w in waiters {
                let r = self
                    .sessions
                    .get(w.client)
                    .and_then(|sid| super::queued_record(&dk, sid, &w.wait, false));
                v.extend(r);
            }
        }
        // Who may resume each session whose identity was given out.
        for s in v
            .iter()
            .filter_map(|r| match r {
                LockRecord::Bound { sid, .. }
                | LockRecord::ShareAdded { sid, .. }
                | LockRecord::Queued { sid, .. } => Some(*sid),
                _ => None,
            })
            .collect::<std::collections::BTreeSet<Sid>>()
        {
            if let Some(user) = self.sessions.user_of(s) {
                v.push(LockRecord::Owner {
                    sid: s,
                    user: user.clone(),
                });
            }
            let ms = self.sessions.timeout_of(s);
            if ms > 0 {
                v.push(LockRecord::SessionTimeout { sid: s, ms });
            }
        }
        v.push(LockRecord::Fenced {
            token: self.bindings.last_token(),
        });
        v
    }

    /// Applies a lock record of the primary's stream (or of a full sync's
    /// lock state). A session new here gets a local id from `alloc`.
    /// Records that name what is not here (a database out of range, a
    /// session already gone) change nothing.
    pub fn apply_lock(
        &mut self,
        r: LockRecord,
        alloc: &mut dyn FnMut() -> ClientId,
        out: &mut impl Outbox,
    ) {
        let n = self.dbs.len();
        let ok = |db: usize| db < n;
        match r {
            LockRecord::Bound {
                db,
                key,
                sid,
                value,
                expire_at,
                token,
            } if ok(db) => {
                let id = self.sessions.replicated(sid, alloc);
                let d = &mut self.dbs[db];
                d.set_str(&key, &value, false, false);
                if let Some(at) = expire_at {
                    d.set_expire(&key, at);
                }
                if d.set_flag(&key, FLAG_BOUND, true) {
                    self.bindings.insert(
                        (db, key),
                        Bound {
                            owner: id,
                            token,
                            since: crate::util::now_ms(),
                        },
                    );
                }
                self.bindings.raise_tokens(token);
            }
            LockRecord::ShareAdded {
                db,
                key,
                sid,
                permits,
                value,
                token,
            } if ok(db) => {
                let id = self.sessions.replicated(sid, alloc);
                let kind = permits.map_or(ShareKind::Read, ShareKind::Permits);
                if !self.dbs[db].exists(&key) {
                    self.dbs[db].set_str(&key, &kind.marker(), false, false);
                    self.dbs[db].set_flag(&key, FLAG_BOUND, true);
                }
                self.shares.add(
                    (db, key),
                    kind,
                    Holder {
                        client: id,
                        value,
                        token,
                        since: crate::util::now_ms(),
                    },
                );
                self.bindings.raise_tokens(token);
            }
            LockRecord::ShareReleased {
                db,
                key,
                sid,
                value,
            } if ok(db) => {
                if let Some(id) = self.sessions.by_sid(sid) {
                    let dk = (db, key);
                    let (gone, left) = self.shares.release(id, &dk, value.as_deref());
                    if gone > 0 && left == 0 {
                        self.dbs[db].remove_for(&dk.1, Cause::Disconnect);
                    }
                }
            }
            LockRecord::Unbound { db, key } if ok(db) => {
                let dk = (db, key);
                let held = self.bindings.unbind(&dk).is_some() | self.shares.remove(&dk).is_some();
                if held {
                    self.dbs[db].remove_for(&dk.1, Cause::Disconnect);
                }
            }
            LockRecord::Moved { from, to } if ok(from.0) && ok(to.0) => {
                // The key moves here as RENAME or MOVE moved it there (the
                // command's own record names only its unbound keys).
                let v = self.dbs[from.0].take(&from.1, Event::generic("rename_from"));
                if let Some(v) = v {
                    self.dbs[to.0].put(&to.1, v, Event::generic("rename_to"));
                    self.move_binding(from, to);
                }
            }
            LockRecord::Queued {
                db,
                key,
                sid,
                value,
                ttl_ms,
                share,
                first,
            } if ok(db) => {
                let id = self.sessions.replicated(sid, alloc);
                let wait = Wait::Lock {
                    value,
                    ttl_ms,
                    share,
                };
                if first {
                    self.blocking.add_first(id, vec![(db, key)], wait);
                } else {
                    self.blocking.add(id, vec![(db, key)], wait);
                }
            }
            LockRecord::Dequeued {
                db,
                key,
                sid,
                value,
            } if ok(db) => {
                if let Some(id) = self.sessions.by_sid(sid) {
                    self.blocking.remove_locks(id, &(db, key), value.as_deref());
                }
            }
            // A line's grant: the session's first place in it goes (its
            // hold's record follows).
            LockRecord::Granted { db, key, sid } if ok(db) => {
                let dk = (db, key);
                let place = self
                    .sessions
                    .by_sid(sid)
                    .and_then(|id| self.blocking.first_lock_of(id, &dk));
                if let Some(w) = place {
                    self.blocking.remove(w);
                }
            }
            LockRecord::SessionClosed { sid } => {
                if let Some(id) = self.sessions.by_sid(sid) {
                    self.client_gone(id, out);
                }
            }
            LockRecord::Fenced { token } => self.bindings.raise_tokens(token),
            LockRecord::Owner { sid, user } => {
                self.sessions.replicated(sid, alloc);
                self.sessions.bind_user(sid, &user);
            }
            LockRecord::SessionTimeout { sid, ms } => {
                self.sessions.replicated(sid, alloc);
                self.sessions.set_timeout(sid, ms);
            }
            _ => {}
        }
        self.drain_events(None, out);
    }

    /// A promotion: every replicated session is detached, its holds kept
    /// for its client to resume it: its own timeout, else `grace_ms`, and
    /// never less than `least_ms`.
    /// Their places in lines stay too, and every line is served again
    /// (a key its holder left with the grant not yet here is handed on).
    pub fn detach_replicated(&mut self, grace_ms: u64, least_ms: u64) {
        self.sessions
            .detach_all(crate::util::now_ms(), grace_ms, least_ms);
        let lines: Vec<DbKey> = self
            .blocking
            .lock_lines()
            .into_iter()
            .map(|(dk, _)| dk)
            .collect();
        for dk in lines {
            self.blocking.signal(&dk);
        }
    }

    /// The identity of session `client`, made at its first use (a hold);
    /// a timeout noted before it is recorded with it.
    pub(in crate::keyspace) fn sid(&mut self, client: ClientId) -> Sid {
        let (sid, timeout) = self.sessions.identify(client);
        if let Some(ms) = timeout {
            self.effects.lock(|| LockRecord::SessionTimeout { sid, ms });
        }
        sid
    }

    /// Connection `client`'s session timeout is `ms` now (0: none): how
    /// long its session lives detached after a promotion. Recorded when it
    /// changes.
    pub fn note_session_timeout(&mut self, client: ClientId, ms: u64) {
        if let Some(sid) = self.sessions.note_timeout(client, ms) {
            self.effects.lock(|| LockRecord::SessionTimeout { sid, ms });
        }
    }

    /// Detached sessions whose time ran out by `now` (unix ms): each ends
    /// as a connection does. Returns how many.
    pub fn end_detached(&mut self, now: i64, out: &mut impl Outbox) -> usize {
        let due = self.sessions.due(now);
        for id in &due {
            self.client_gone(*id, out);
        }
        due.len()
    }

    /// TPRESUME: connection `to` (speaking RESP3 when `resp3`) takes over
    /// the detached session named `sid` (a session of the old primary,
    /// kept since the promotion): its holds and its places in lines are
    /// the connection's now, ending with it. Returns each hold with its
    /// value and fencing token, and each place with the value it waits
    /// for (no token; a hand-over not yet acknowledged by replicas counts
    /// as a place: its `ACQUIRED` comes once it is), or None when no
    /// detached session has that identity. The caller checked that `to`
    /// holds nothing and waits nowhere. Lock records name sessions by
    /// identity, so replicas see no change.
    pub fn resume(
        &mut self,
        sid: Sid,
        to: ClientId,
        user: &[u8],
        resp3: bool,
    ) -> Option<Vec<(DbKey, Bytes, Option<u64>)>> {
        let from = self.sessions.by_sid(sid)?;
        if !self.sessions.is_detached(from) {
            return None;
        }
        // Bound to another user: as if there were none (nothing leaks).
        if self.sessions.user_of(sid).is_some_and(|u| u[..] != *user) {
            return None;
        }
        let keys = self.move_holds(from, to);
        self.blocking.move_locks(from, to);
        self.sessions.adopt(from, to);
        // Hand-overs made while it was detached that wait for replicas:
        // told to this connection once acknowledged.
        let mut untold = Vec::new();
        for g in self.pending_grants.iter_mut().filter(|g| g.client == from) {
            g.client = to;
            if let Wait::Lock { value, .. } = &g.wait {
                g.frame = acquired_frame(resp3, &g.key.1, value, g.token);
            }
            untold.push(g.token);
        }
        // Each hold with the value it was taken with (TPRELEASE names it):
        // a bound key's value, each of the session's shares of a key.
        let mut held = Vec::new();
        for dk in keys {
            match self.shares.get(&dk) {
                Some(sh) => held.extend(
                    sh.holders
                        .iter()
                        .filter(|h| h.client == to)
                        .map(|h| (dk.clone(), h.value.clone(), Some(h.token))),
                ),
                None => {
                    let v = match self.dbs[dk.0].get_str(&dk.1) {
                        Ok(Some(v)) => Bytes::copy_from_slice(v),
                        _ => Bytes::new(),
                    };
                    let token = self.bindings.get(&dk).map(|b| b.token);
                    held.push((dk, v, token));
                }
            }
        }
        for h in held.iter_mut() {
            if h.2.is_some_and(|t| untold.contains(&t)) {
                h.2 = None;
            }
        }
        held.extend(
            self.blocking
                .lock_places_of(to)
                .into_iter()
                .map(|(dk, v)| (dk, v, None)),
        );
        held.sort();
        Some(held)
    }

    /// Every hold of `from` (bound and shared) becomes `to`'s, tokens
    /// unchanged; returns their keys.
    fn move_holds(&mut self, from: ClientId, to: ClientId) -> Vec<DbKey> {
        let mut held = Vec::new();
        for dk in self.bindings.keys_of(from) {
            if let Some(mut b) = self.bindings.unbind(&dk) {
                b.owner = to;
                self.bindings.insert(dk.clone(), b);
                held.push(dk);
            }
        }
        for dk in self.shares.keys_of(from) {
            if let Some(mut sh) = self.shares.remove(&dk) {
                for h in sh.holders.iter_mut().filter(|h| h.client == from) {
                    h.client = to;
                }
                self.shares.insert(dk.clone(), sh);
                held.push(dk);
            }
        }
        held
    }

    /// A primary turning replica: each of its own sessions that holds
    /// something or waits in a line becomes a replicated session (new
    /// local id from `alloc`, same identity, tokens and places), as its
    /// new primary knows it. Returns the connections that held or waited
    /// in a lock line, to be closed.
    pub fn demote_sessions(&mut self, alloc: &mut dyn FnMut() -> ClientId) -> Vec<ClientId> {
        let mut owners: Vec<ClientId> = self.bindings.iter().map(|(_, b)| b.owner).collect();
        owners.extend(
            self.shares
                .iter()
                .flat_map(|(_, s)| s.holders.iter().map(|h| h.client)),
        );
        owners.extend(self.blocking.lock_waiters_all());
        owners.sort_unstable();
        owners.dedup();
        owners.retain(|id| !self.sessions.is_replicated(*id));
        for id in &owners {
            let local = alloc();
            self.move_holds(*id, local);
            self.blocking.move_locks(*id, local);
            self.sessions.rehome(*id, local);
        }
        owners
    }

    /// Whether `client` holds the acquisition with fencing token `token`
    /// (bound or shared).
    pub fn holds_token(&self, client: ClientId, token: u64) -> bool {
        self.grant_of(client, token).is_some()
    }

    /// The key of `client`'s hold with fencing token `token`, and its
    /// value when it is a share.
    fn grant_of(&self, client: ClientId, token: u64) -> Option<(DbKey, Option<Bytes>)> {
        for dk in self.bindings.keys_of(client) {
            if self.bindings.get(&dk).is_some_and(|b| b.token == token) {
                return Some((dk, None));
            }
        }
        for dk in self.shares.keys_of(client) {
            let h = self.shares.get(&dk).and_then(|s| {
                s.holders
                    .iter()
                    .find(|h| h.client == client && h.token == token)
            });
            if let Some(h) = h {
                let v = h.value.clone();
                return Some((dk, Some(v)));
            }
        }
        None
    }

    /// Undoes `client`'s grant with fencing token `token` (not enough
    /// replicas acknowledged it: `tp-min-acks`): its key is deleted or
    /// its share released, as its own release would (it is not told
    /// LOST: it was never told it had it). Returns whether there was one.
    pub fn undo_grant(&mut self, client: ClientId, token: u64, out: &mut impl Outbox) -> bool {
        let Some((dk, share)) = self.grant_of(client, token) else {
            return false;
        };
        match share {
            None => {
                self.dbs[dk.0].remove_for(&dk.1, Cause::Disconnect);
            }
            Some(v) => {
                self.release_share(client, &dk, Some(&v), Cause::Disconnect);
            }
        }
        self.drain_events(Some(client), out);
        true
    }

    /// A primary cut off from its replicas (`tp-min-acks`): every hold
    /// of its own sessions ends, its holder told `LOST cut-off`, before a
    /// promoted replica could give it to someone else. Replicated (or
    /// detached) sessions are not its to end, nor hand-overs not told yet.
    /// Returns how many holds.
    pub fn cut_off(&mut self, out: &mut impl Outbox) -> usize {
        let mut n = 0;
        let bound: Vec<(DbKey, ClientId)> = self
            .bindings
            .iter()
            .filter(|(_, b)| !self.sessions.is_replicated(b.owner))
            .map(|(k, b)| (k.clone(), b.owner))
            // A hand-over not told yet is no holder's: it waits for the
            // acknowledgements, and is undone at its timeout.
            .filter(|(k, owner)| {
                !self
                    .pending_grants
                    .iter()
                    .any(|g| g.client == *owner && g.key == *k)
            })
            .collect();
        for (dk, owner) in bound {
            // Unbound first: the key's deletion then tells nobody else.
            self.bindings.unbind(&dk);
            self.unbound(&dk);
            self.dbs[dk.0].remove_for(&dk.1, Cause::Disconnect);
            if let Some(resp) = out.protocol(owner) {
                out.push(owner, &lost_frame(resp == 3, &dk.1, "cut-off"));
            }
            n += 1;
        }
        let shared: Vec<DbKey> = self
            .shares
            .iter()
            .filter(|(_, s)| {
                s.holders
                    .iter()
                    .any(|h| !self.sessions.is_replicated(h.client))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for dk in shared {
            let own: Vec<ClientId> = self
                .shares
                .get(&dk)
                .map(|s| s.holders.iter().map(|h| h.client).collect::<Vec<_>>())
                .unwrap_or_default()
                .into_iter()
                .filter(|c| !self.sessions.is_replicated(*c))
                .collect();
            for c in own {
                self.release_share(c, &dk, None, Cause::Disconnect);
                if let Some(resp) = out.protocol(c) {
                    out.push(c, &lost_frame(resp == 3, &dk.1, "cut-off"));
                }
                n += 1;
            }
        }
        self.drain_events(None, out);
        n
    }

    /// The sessions registry (identities, replicated and detached ones).
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// Session `id`'s identity, made now if it has none, given to its
    /// client, whose ACL user `user` it is bound to from now on (only
    /// that user may resume it).
    pub fn session_sid(&mut self, id: ClientId, user: &[u8]) -> Sid {
        let sid = self.sessions.sid_of(id);
        if self.sessions.bind_user(sid, user) {
            let user = Bytes::copy_from_slice(user);
            self.effects.lock(|| LockRecord::Owner { sid, user });
        }
        sid
    }

    /// Forgets every replicated session and its holds' registrations (a
    /// full sync replaces the data wholesale: their keys are gone with
    /// it).
    pub fn forget_replicated(&mut self) {
        for id in self.sessions.replicated_ids() {
            for dk in self.bindings.keys_of(id) {
                self.bindings.unbind(&dk);
            }
            for dk in self.shares.keys_of(id) {
                self.shares.release(id, &dk, None);
            }
            self.blocking.remove_client(id);
            self.sessions.forget(id);
        }
    }
}
