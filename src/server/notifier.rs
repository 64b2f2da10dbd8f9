//! The store's outbox (`Notifier`): what the keyspace hook and the lock
//! service tell clients goes to the client table (pushes, lock hand-offs,
//! under the pubsub output-buffer limit), and keyspace notifications are
//! published through the pub/sub registry. A view over the store's parts,
//! made for one drain of the hook (`Store::split`).
//!
//! Must not touch keys or decide who is told (the hook decides): it only
//! delivers, through the client table and `crate::pubsub`, reading ACL
//! users to answer `may_read_key`.

use bytes::Bytes;

use super::clients::Clients;
use crate::db::{Class, Event};
use crate::ids::ClientId;
use crate::keyspace::Outbox;
use crate::pubsub::{class_bit, PubSub, NOTIFY_KEYEVENT, NOTIFY_KEYSPACE, NOTIFY_NEW};

/// The store's [`Outbox`]: the client table for pushes, plus keyspace
/// notifications published through the pub/sub registry.
pub struct Notifier<'a> {
    clients: &'a mut Clients,
    pubsub: &'a mut PubSub,
    /// `notify-keyspace-events`.
    flags: u32,
    /// The client whose command caused the events (None: expiry, eviction,
    /// a disconnect).
    by: Option<ClientId>,
    /// A `rename_from`/`move_from` waiting for the destination's `new`,
    /// which Redis publishes first (its dbAdd runs before the notifies).
    held: Option<(usize, Event, Bytes)>,
    /// ACL users, for what a client may be told.
    acl: &'a crate::acl::Acl,
}

impl<'a> Notifier<'a> {
    pub fn new(
        clients: &'a mut Clients,
        pubsub: &'a mut PubSub,
        acl: &'a crate::acl::Acl,
        flags: u32,
        by: Option<ClientId>,
    ) -> Notifier<'a> {
        Notifier {
            clients,
            pubsub,
            flags,
            by,
            held: None,
            acl,
        }
    }

    fn publish_event(&mut self, db: usize, event: Event, key: &[u8]) {
        if self.flags & NOTIFY_KEYSPACE != 0 {
            let mut chan = format!("__keyspace@{db}__:").into_bytes();
            chan.extend_from_slice(key);
            self.pubsub
                .publish(self.clients, self.by, false, &chan, event.name.as_bytes());
        }
        if self.flags & NOTIFY_KEYEVENT != 0 {
            let chan = format!("__keyevent@{db}__:{}", event.name);
            self.pubsub
                .publish(self.clients, self.by, false, chan.as_bytes(), key);
        }
        if self.pubsub.pushed_to_self {
            let by = self.by.and_then(|id| self.clients.get(&id));
            let queued = by.map_or(0, |c| c.signal.pending_len());
            self.pubsub.self_events.push((event, queued));
        }
    }

    fn release_held(&mut self) {
        if let Some((db, ev, key)) = self.held.take() {
            self.publish_event(db, ev, &key);
        }
    }
}

impl Drop for Notifier<'_> {
    fn drop(&mut self) {
        self.release_held();
    }
}

impl Outbox for Notifier<'_> {
    fn protocol(&self, id: ClientId) -> Option<u8> {
        self.clients.protocol(id)
    }

    fn push(&mut self, id: ClientId, bytes: &[u8]) {
        self.clients.push_limited(id, bytes);
    }

    fn lock_granted(&mut self, id: ClientId) {
        self.clients.lock_granted(id);
    }

    fn may_read_key(&self, id: ClientId, key: &[u8]) -> bool {
        let Some(c) = self.clients.get(&id) else {
            return false;
        };
        self.acl
            .users
            .get(c.user.as_bytes())
            .is_some_and(|u| u.may_read_key(key))
    }

    /// Redis's notifyKeyspaceEvent: `__keyspace@<db>__:<key>` with the
    /// event name, then `__keyevent@<db>__:<event>` with the key.
    fn key_event(&mut self, db: usize, event: Event, key: &[u8]) {
        if self.flags & class_bit(event.class) == 0
            || self.flags & (NOTIFY_KEYSPACE | NOTIFY_KEYEVENT) == 0
            || self.pubsub.is_empty()
        {
            return;
        }
        if event.class == Class::New {
            self.publish_event(db, event, key);
            self.release_held();
            return;
        }
        self.release_held();
        if self.flags & NOTIFY_NEW != 0 && matches!(event.name, "rename_from" | "move_from") {
            self.held = Some((db, event, Bytes::copy_from_slice(key)));
            return;
        }
        self.publish_event(db, event, key);
    }
}
