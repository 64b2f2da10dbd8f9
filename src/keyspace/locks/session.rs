//! Sessions: a lock session is a connection, or a session of the primary
//! this server replicates (a *replicated* session: its holds came in the
//! replication stream). Its holds end when it ends
//! (`Keyspace::client_gone`), and a silent one ends after its session
//! timeout: its own (TPSESSION), or the server's `tp-session-timeout` while
//! it holds a lock or waits in a line. These are the rules; the timer is
//! the connection task's (`runtime/conn.rs`), which asks them.
//!
//! Every session that holds something has an identity ([`Sid`]: random,
//! unguessable), the name its lock records give it, so a replica knows it
//! by the same name as its primary. On a replica each replicated session
//! has a local id of its own (never a connection's); when the replica is
//! promoted they become *detached*: their holds stay until a deadline, and
//! end then as a connection's would.
//!
//! `Sessions` changes nothing but itself: it must not touch connections or
//! keys; the keyspace's methods below read the holds and lock lines.

use foldhash::HashMap;

use crate::ids::{ClientId, Sid};
use crate::keyspace::Keyspace;

/// The session timeout that applies to a connection now, in ms (0: none):
/// its own when it set one, else the server's default while it takes
/// part in the lock service (`in_service`).
pub fn timeout_ms(own_ms: u64, server_default: u64, in_service: bool) -> u64 {
    if own_ms > 0 {
        own_ms
    } else if in_service {
        server_default
    } else {
        0
    }
}

/// Session identities, replicated sessions and detached ones.
#[derive(Debug, Default)]
pub struct Sessions {
    sid: HashMap<ClientId, Sid>,
    by_sid: HashMap<Sid, ClientId>,
    /// Replicated sessions (local id), with the unix ms at which a
    /// detached one ends (None: attached to the primary's stream).
    replicated: HashMap<ClientId, Option<i64>>,
    /// The ACL user each identity given out is bound to (TPSESSION ID):
    /// only that user may resume the session.
    users: HashMap<Sid, bytes::Bytes>,
    /// Each session's timeout (ms, 0: none), by identity: how long a
    /// detached one lives after a promotion.
    timeouts: HashMap<Sid, u64>,
    /// The timeout of a connection that has no identity yet (it waits in
    /// a line): its session's once it has one.
    pending_timeouts: HashMap<ClientId, u64>,
}

impl Sessions {
    /// The identity of session `id`, made at its first use.
    pub fn sid_of(&mut self, id: ClientId) -> Sid {
        self.identify(id).0
    }

    /// `sid_of`, and the session's timeout when the identity was made
    /// just now with a timeout noted before (for its record).
    pub fn identify(&mut self, id: ClientId) -> (Sid, Option<u64>) {
        if let Some(s) = self.sid.get(&id) {
            return (*s, None);
        }
        let mut s: Sid = rand::random();
        while s == 0 || self.by_sid.contains_key(&s) {
            s = rand::random();
        }
        self.sid.insert(id, s);
        self.by_sid.insert(s, id);
        let t = self.pending_timeouts.remove(&id).filter(|t| *t > 0);
        if let Some(t) = t {
            self.timeouts.insert(s, t);
        }
        (s, t)
    }

    /// Session `id`'s timeout is `ms` (0: none). Returns its identity
    /// when it has one and the timeout changed (for its record).
    pub fn note_timeout(&mut self, id: ClientId, ms: u64) -> Option<Sid> {
        let Some(sid) = self.get(id) else {
            if ms > 0 {
                self.pending_timeouts.insert(id, ms);
            } else {
                self.pending_timeouts.remove(&id);
            }
            return None;
        };
        self.set_timeout(sid, ms).then_some(sid)
    }

    /// Identity `sid`'s session timeout is `ms` (0: none); whether it
    /// changed.
    pub fn set_timeout(&mut self, sid: Sid, ms: u64) -> bool {
        let old = self.timeouts.get(&sid).copied().unwrap_or(0);
        if old == ms {
            return false;
        }
        if ms == 0 {
            self.timeouts.remove(&sid);
        } else {
            self.timeouts.insert(sid, ms);
        }
        true
    }

    /// Identity `sid`'s session timeout (ms, 0: none).
    pub fn timeout_of(&self, sid: Sid) -> u64 {
        self.timeouts.get(&sid).copied().unwrap_or(0)
    }

    /// The identity of `id` if it has one.
    pub fn get(&self, id: ClientId) -> Option<Sid> {
        self.sid.get(&id).copied()
    }

    /// The local id of the session named `sid`.
    pub fn by_sid(&self, sid: Sid) -> Option<ClientId> {
        self.by_sid.get(&sid).copied()
    }

    /// The local id of replicated session `sid`, given one by `alloc`
    /// when it is new here.
    pub fn replicated(&mut self, sid: Sid, alloc: impl FnOnce() -> ClientId) -> ClientId {
        if let Some(id) = self.by_sid.get(&sid) {
            return *id;
        }
        let id = alloc();
        self.sid.insert(id, sid);
        self.by_sid.insert(sid, id);
        self.replicated.insert(id, None);
        id
    }

    /// Whether `id` is a replicated session.
    pub fn is_replicated(&self, id: ClientId) -> bool {
        self.replicated.contains_key(&id)
    }

    /// Every replicated session.
    pub fn replicated_ids(&self) -> Vec<ClientId> {
        self.replicated.keys().copied().collect()
    }

    /// Session `id` ended: its identity goes.
    pub fn forget(&mut self, id: ClientId) {
        if let Some(s) = self.sid.remove(&id) {
            self.by_sid.remove(&s);
            self.users.remove(&s);
            self.timeouts.remove(&s);
        }
        self.replicated.remove(&id);
        self.pending_timeouts.remove(&id);
    }

    /// A primary turning replica: connection `id`'s session becomes the
    /// replicated session `local`, its identity and what is bound to it
    /// kept. Returns the identity.
    pub fn rehome(&mut self, id: ClientId, local: ClientId) -> Sid {
        let sid = self.sid_of(id);
        self.sid.remove(&id);
        self.pending_timeouts.remove(&id);
        self.sid.insert(local, sid);
        self.by_sid.insert(sid, local);
        self.replicated.insert(local, None);
        sid
    }

    /// Binds identity `sid` to ACL user `user`; false if it was bound
    /// to it already.
    pub fn bind_user(&mut self, sid: Sid, user: &[u8]) -> bool {
        if self.users.get(&sid).is_some_and(|u| u[..] == *user) {
            return false;
        }
        self.users.insert(sid, bytes::Bytes::copy_from_slice(user));
        true
    }

    /// The ACL user identity `sid` is bound to, if it was given out.
    pub fn user_of(&self, sid: Sid) -> Option<&bytes::Bytes> {
        self.users.get(&sid)
    }

    /// Promotion: every replicated session is detached, ending after its
    /// own timeout from `now` (unix ms), or `grace` ms when it has none,
    /// and not before `least` ms, unless resumed (the timers restart, as
    /// etcd's leases on a new leader).
    pub fn detach_all(&mut self, now: i64, grace: u64, least: u64) {
        let (sid, timeouts) = (&self.sid, &self.timeouts);
        for (id, d) in self.replicated.iter_mut() {
            let t = sid
                .get(id)
                .and_then(|s| timeouts.get(s))
                .copied()
                .unwrap_or(grace)
                .max(least);
            *d = Some(now.saturating_add(t as i64));
        }
    }

    /// Whether `id` is a detached session (a promoted replica's).
    pub fn is_detached(&self, id: ClientId) -> bool {
        self.replicated.get(&id).is_some_and(Option::is_some)
    }

    /// Session `sid`, detached under local id `from`, is resumed by
    /// connection `to`: the identity is the connection's now (whatever it
    /// had before goes).
    pub fn adopt(&mut self, from: ClientId, to: ClientId) {
        let Some(sid) = self.sid.remove(&from) else {
            return;
        };
        self.replicated.remove(&from);
        if let Some(old) = self.sid.insert(to, sid) {
            self.by_sid.remove(&old);
        }
        self.by_sid.insert(sid, to);
    }

    /// Detached sessions whose deadline passed by `now`.
    pub fn due(&self, now: i64) -> Vec<ClientId> {
        self.replicated
            .iter()
            .filter(|(_, d)| d.is_some_and(|d| d <= now))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Sessions with an identity (INFO).
    pub fn named(&self) -> usize {
        self.sid.len()
    }

    /// Detached sessions (INFO).
    pub fn detached(&self) -> usize {
        self.replicated.values().filter(|d| d.is_some()).count()
    }
}

impl Keyspace {
    /// Whether `client` holds a key (bound or shared) or waits in a lock
    /// line: the server's default session timeout applies to it.
    pub fn in_lock_service(&self, client: ClientId) -> bool {
        self.held_by(client) > 0 || self.blocking.lock_waits_of(client) > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_stable_and_forgotten() {
        let mut s = Sessions::default();
        let a = s.sid_of(1);
        assert_eq!(s.sid_of(1), a);
        assert_ne!(s.sid_of(2), a);
        assert_eq!(s.by_sid(a), Some(1));
        s.forget(1);
        assert_eq!((s.get(1), s.by_sid(a)), (None, None));
        // A replicated session keeps its name and gets a local id once.
        let id = s.replicated(77, || 100);
        assert_eq!(s.replicated(77, || unreachable!()), id);
        assert!(s.is_replicated(100) && s.due(i64::MAX).is_empty());
        s.detach_all(0, 50, 10);
        assert_eq!((s.due(49), s.due(50)), (vec![], vec![100]));
        // Its own timeout, when it has one, instead of the grace.
        assert!(s.set_timeout(77, 20) && !s.set_timeout(77, 20));
        s.detach_all(0, 50, 10);
        assert_eq!((s.due(19), s.due(20)), (vec![], vec![100]));
        // Never less than the least time.
        s.detach_all(0, 50, 30);
        assert_eq!((s.due(29), s.due(30)), (vec![], vec![100]));
        // A timeout noted before the identity is the session's then.
        assert_eq!(s.note_timeout(5, 300), None);
        let (sid5, t) = s.identify(5);
        assert_eq!((t, s.timeout_of(sid5)), (Some(300), 300));
        assert_eq!(s.note_timeout(5, 300), None);
        assert_eq!(s.note_timeout(5, 0), Some(sid5));
        s.forget(100);
        assert!(!s.is_replicated(100) && s.detached() == 0);
    }
}
