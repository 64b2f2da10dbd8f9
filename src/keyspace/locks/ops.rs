//! The keyspace's lock operations: what changes keys and holds together
//! (binding a key to a session, shares, the fencing counter, a line's
//! hand-over, a hold lost to another's command). An `impl Keyspace` block
//! beside the lock registries; the hook (`keyspace_changed`) and the
//! connection-end path (`client_gone`) in `keyspace/mod.rs` call into it.
//!
//! Must not touch connections or the server: a client is told through the
//! `Outbox` it is handed; keys change only through `Db`'s methods (so the
//! hook hears them), and lock state leaves as `LockRecord`s in `effects`.

use crate::keyspace::locks::PendingGrant;
use crate::keyspace::*;

impl Keyspace {
    /// Read-only view of the SETTP bindings.
    pub fn bindings(&self) -> &Bindings {
        &self.bindings
    }

    /// Binds an existing key to `client` (SETTP, a lock hand-off): the key
    /// is flagged and registered together. Returns the acquisition's
    /// fencing token.
    pub fn bind(&mut self, client: ClientId, dk: DbKey) -> u64 {
        self.dbs[dk.0].set_flag(&dk.1, FLAG_BOUND, true);
        let named = self.effects.on().then(|| copy(&dk));
        let sid = self.sid(client);
        let token = self.bindings.bind(client, dk);
        if let Some((db, key)) = named {
            let d = &mut self.dbs[db];
            let value = match d.peek(&key) {
                Some(crate::db::ValueRef::Str(v)) => Bytes::copy_from_slice(v),
                _ => Bytes::new(),
            };
            let expire_at = d.expire_of(&key).flatten();
            self.effects.lock(|| LockRecord::Bound {
                db,
                key,
                sid,
                value,
                expire_at,
                token,
            });
        }
        token
    }

    /// Records that every hold of `dk` ended.
    pub(in crate::keyspace) fn unbound(&mut self, dk: &DbKey) {
        self.effects.lock(|| {
            let (db, key) = copy(dk);
            LockRecord::Unbound { db, key }
        });
    }

    /// Read-only view of the shared locks.
    pub fn shares(&self) -> &Shares {
        &self.shares
    }

    /// Keys `client` holds, bound or shared (CLIENT LIST's tpkeys).
    pub fn held_by(&self, client: ClientId) -> usize {
        self.bindings.count_for(client) + self.shares.keys_of(client).len()
    }

    /// Whether `client` may take a share of `dk` now: the key is free, or
    /// held the same way with room, and nobody waits before it.
    pub fn share_admits(&mut self, dk: &DbKey, kind: ShareKind) -> bool {
        if !self.dbs[dk.0].exists(&dk.1) {
            return true;
        }
        self.shares.get(dk).is_some_and(|s| s.admits(kind))
            && self.blocking.lock_waiters(dk).is_empty()
    }

    /// Grants `client` a share of `dk` (the caller checked it may): the key
    /// is created with the kind's marker when it is free. Returns the
    /// grant's fencing token.
    pub fn take_share(
        &mut self,
        client: ClientId,
        dk: DbKey,
        kind: ShareKind,
        value: Bytes,
    ) -> u64 {
        if !self.dbs[dk.0].exists(&dk.1) {
            self.dbs[dk.0].set_str(&dk.1, &kind.marker(), false, false);
            self.dbs[dk.0].set_flag(&dk.1, FLAG_BOUND, true);
        }
        let token = self.bindings.next_token();
        let since = crate::util::now_ms();
        let sid = self.sid(client);
        self.effects.lock(|| {
            let (db, key) = copy(&dk);
            LockRecord::ShareAdded {
                db,
                key,
                sid,
                permits: match kind {
                    ShareKind::Read => None,
                    ShareKind::Permits(n) => Some(n),
                },
                value: value.clone(),
                token,
            }
        });
        self.shares.add(
            dk,
            kind,
            Holder {
                client,
                value,
                token,
                since,
            },
        );
        token
    }

    /// `client` lets go of its share of `dk` with `value` (every share of
    /// it when None). The last holder's release deletes the key; an
    /// earlier one frees a place for the line. Returns how many went.
    pub fn release_share(
        &mut self,
        client: ClientId,
        dk: &DbKey,
        value: Option<&[u8]>,
        cause: Cause,
    ) -> usize {
        let (gone, left) = self.shares.release(client, dk, value);
        if gone > 0 {
            let sid = self.sid(client);
            self.effects.lock(|| {
                let (db, key) = copy(dk);
                let value = value.map(Bytes::copy_from_slice);
                LockRecord::ShareReleased {
                    db,
                    key,
                    sid,
                    value,
                }
            });
            if left == 0 {
                self.dbs[dk.0].remove_for(&dk.1, cause);
            } else {
                self.blocking.signal(dk);
            }
        }
        gone
    }

    /// After a load: fencing tokens go on above the saved counter.
    pub fn raise_tokens(&mut self, t: u64) {
        if t > self.bindings.last_token() {
            self.effects.lock(|| LockRecord::Fenced { token: t });
        }
        self.bindings.raise_tokens(t);
    }

    /// RENAME/MOVE: a bound key's binding moves with it to its new name.
    pub fn move_binding(&mut self, from: DbKey, to: DbKey) {
        if self.bindings.owner(&from).is_some() || self.shares.get(&from).is_some() {
            self.effects.lock(|| LockRecord::Moved {
                from: copy(&from),
                to: copy(&to),
            });
        }
        if let Some(b) = self.bindings.unbind(&from) {
            self.dbs[to.0].set_flag_quiet(&to.1, FLAG_BOUND, true);
            self.bindings.insert(to, b);
        } else if let Some(sh) = self.shares.remove(&from) {
            self.dbs[to.0].set_flag_quiet(&to.1, FLAG_BOUND, true);
            self.shares.insert(to, sh);
        }
    }

    /// Tells the holder of a binding that just ended by another hand
    /// than its own (`by` ran the command; `reason` names the event).
    pub(in crate::keyspace) fn lost(
        b: Bound,
        key: &[u8],
        by: Option<ClientId>,
        own: bool,
        reason: &str,
        out: &mut impl Outbox,
    ) {
        if own && by == Some(b.owner) {
            return;
        }
        if let Some(resp) = out.protocol(b.owner) {
            out.push(b.owner, &lost_frame(resp == 3, key, reason));
        }
    }

    /// Serves lock waiter `wid` (`SETTP ... QUEUE`) if its key is gone:
    /// creates the key with the waiter's value, bound to its connection,
    /// and pushes it `ACQUIRED`. A waiter whose connection has ended (or was
    /// killed for its output buffer and is not yet cleaned up) is dropped.
    /// Returns whether the key is taken afterwards (by this waiter or
    /// already), so the caller stops walking the line.
    pub fn hand_over_lock(&mut self, wid: WaitId, out: &mut impl Outbox) -> bool {
        let Some(w) = self.blocking.get(wid) else {
            return false;
        };
        let Wait::Lock {
            value,
            ttl_ms,
            share,
        } = &w.wait
        else {
            return false;
        };
        let wait = w.wait.clone();
        let (client, dk, value, ttl_ms, share) =
            (w.client, w.keys[0].clone(), value.clone(), *ttl_ms, *share);
        let (db, key) = (dk.0, &dk.1);
        let granted = |ks: &mut Self| {
            let sid = ks.sid(client);
            ks.effects.lock(|| LockRecord::Granted {
                db,
                key: key.clone(),
                sid,
            })
        };
        // A replicated session's place is its primary's to serve (the
        // `Granted` record does); a detached one's (a promoted replica's)
        // is served here, its client told when it resumes the session.
        let resp = out.protocol(client);
        let detached = resp.is_none() && self.sessions.is_detached(client);
        if resp.is_none() && !detached && self.sessions.is_replicated(client) {
            return true;
        }
        if let Some(kind) = share {
            // A share: granted while the key is free or held the same way
            // with room; the line goes on to the next waiter while there is
            // room, and stops at one that cannot be granted.
            if self.dbs[db].exists(key) && !self.shares.get(&dk).is_some_and(|s| s.admits(kind)) {
                return true;
            }
            self.blocking.remove(wid);
            if resp.is_none() && !detached {
                return false;
            }
            granted(self);
            let token = self.take_share(client, dk.clone(), kind, value.clone());
            let frame = resp.map(|r| acquired_frame(r == 3, key, &value, token));
            self.tell_grant(client, token, frame, &dk, wait, out);
            return !self.shares.get(&dk).is_some_and(|s| s.admits(kind));
        }
        if self.dbs[db].exists(key) {
            return true;
        }
        self.blocking.remove(wid);
        if resp.is_none() && !detached {
            return false;
        }
        self.dbs[db].set_str(key, &value, false, false);
        if let Some(ttl) = ttl_ms {
            let at = crate::util::cmd_time_ms().saturating_add(ttl);
            self.dbs[db].set_expire(key, at);
        }
        granted(self);
        let token = self.bind(client, dk.clone());
        let frame = resp.map(|r| acquired_frame(r == 3, key, &value, token));
        self.tell_grant(client, token, frame, &dk, wait, out);
        true
    }

    /// SETTP ... QUEUE: `client` takes a place in `dk`'s line, at its
    /// end, or at its head when `first` (a grant undone for want of
    /// replicas keeps its place). Recorded for replicas, under the
    /// session's identity (made now if it has none), so a promoted
    /// replica keeps the place for the session.
    pub fn queue_lock(&mut self, client: ClientId, dk: DbKey, wait: Wait, first: bool) -> WaitId {
        let sid = self.sid(client);
        if self.effects.on() {
            if let Some(r) = super::queued_record(&dk, sid, &wait, first) {
                self.effects.lock(|| r);
            }
        }
        if first {
            self.blocking.add_first(client, vec![dk], wait)
        } else {
            self.blocking.add(client, vec![dk], wait)
        }
    }

    /// TPDEQUEUE: `client`'s places in `dk`'s line (only the one waiting
    /// for `value` when given) go. Returns how many.
    pub fn dequeue_locks(&mut self, client: ClientId, dk: &DbKey, value: Option<&[u8]>) -> usize {
        let n = self.blocking.remove_locks(client, dk, value);
        if n > 0 {
            if let Some(sid) = self.sessions.get(client) {
                self.effects.lock(|| LockRecord::Dequeued {
                    db: dk.0,
                    key: dk.1.clone(),
                    sid,
                    value: value.map(Bytes::copy_from_slice),
                });
            }
        }
        n
    }

    /// Tells waiter `client` its hand-over: at once, or (`gate_grants`)
    /// once replicas acknowledged it (`pending_grants`). A detached
    /// session (no `frame`: no connection) is told when it is resumed.
    fn tell_grant(
        &mut self,
        client: ClientId,
        token: u64,
        frame: Option<Vec<u8>>,
        dk: &DbKey,
        wait: Wait,
        out: &mut impl Outbox,
    ) {
        if !self.gate_grants {
            if let Some(frame) = frame {
                out.lock_granted(client);
                out.push(client, &frame);
            }
            return;
        }
        self.pending_grants.push(PendingGrant {
            client,
            token,
            frame: frame.unwrap_or_default(),
            key: dk.clone(),
            wait,
            since: crate::util::now_ms(),
            offset: None,
        });
    }

    /// How many hand-overs wait to be told (INFO).
    pub fn pending_grant_count(&self) -> usize {
        self.pending_grants.len()
    }

    /// Whether hand-overs wait to be told (`tp-min-acks`).
    pub fn has_pending_grants(&self) -> bool {
        !self.pending_grants.is_empty()
    }

    /// The hand-overs not yet told, taken to be judged; those still
    /// waiting go back with `keep_pending_grants`.
    pub fn take_pending_grants(&mut self) -> Vec<PendingGrant> {
        std::mem::take(&mut self.pending_grants)
    }

    /// Puts back hand-overs that still wait (before any made since).
    pub fn keep_pending_grants(&mut self, mut v: Vec<PendingGrant>) {
        v.append(&mut self.pending_grants);
        self.pending_grants = v;
    }

    /// A shared key went: each holder but the one whose command did it is
    /// told.
    pub(in crate::keyspace) fn shares_lost(
        &mut self,
        dk: &DbKey,
        by: Option<ClientId>,
        reason: &str,
        out: &mut impl Outbox,
    ) {
        if let Some(sh) = self.shares.remove(dk) {
            self.unbound(dk);
            for h in sh.holders {
                if by == Some(h.client) {
                    continue;
                }
                if let Some(resp) = out.protocol(h.client) {
                    out.push(h.client, &lost_frame(resp == 3, &dk.1, reason));
                }
            }
        }
    }
}
