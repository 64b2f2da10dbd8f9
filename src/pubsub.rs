//! The pub/sub registry (Redis's pubsub.c) and keyspace notifications
//! (notify.c).
//!
//! Server-side state beside the keyspace in the store: channel and shard
//! channel subscribers in subscription order, pattern subscribers, and each
//! client's own subscriptions. Messages go out through the clients' out-of-band
//! queue under the `client-output-buffer-limit pubsub` limit
//! (`Clients::push_limited`), like WATCHEX pushes.
//!
//! Keyspace notifications reach this module through the keyspace's
//! [`Outbox`]: `server::notifier::Notifier` is the store's outbox, a view
//! over the client table, this registry and the configured
//! `notify-keyspace-events` flags. Messages are pushed through any
//! [`Outbox`] (the client table), so this module knows no connection.
//! The keyspace calls its `key_event` once per recorded event; with
//! notifications off (the common case) that is one flag test per event.

use foldhash::HashMap;
use std::collections::BTreeMap;

use bytes::Bytes;

use crate::db::{Class, Event};
use crate::ids::ClientId;
use crate::keyspace::Outbox;

// `notify-keyspace-events` flags, with Redis 7.0's bit values.
pub const NOTIFY_KEYSPACE: u32 = 1 << 0;
pub const NOTIFY_KEYEVENT: u32 = 1 << 1;
pub const NOTIFY_GENERIC: u32 = 1 << 2;
pub const NOTIFY_STRING: u32 = 1 << 3;
pub const NOTIFY_LIST: u32 = 1 << 4;
pub const NOTIFY_SET: u32 = 1 << 5;
pub const NOTIFY_HASH: u32 = 1 << 6;
pub const NOTIFY_ZSET: u32 = 1 << 7;
pub const NOTIFY_EXPIRED: u32 = 1 << 8;
pub const NOTIFY_EVICTED: u32 = 1 << 9;
pub const NOTIFY_STREAM: u32 = 1 << 10;
pub const NOTIFY_KEY_MISS: u32 = 1 << 11;
pub const NOTIFY_MODULE: u32 = 1 << 13;
pub const NOTIFY_NEW: u32 = 1 << 14;
/// `A`: every class but key misses and new keys.
pub const NOTIFY_ALL: u32 = NOTIFY_GENERIC
    | NOTIFY_STRING
    | NOTIFY_LIST
    | NOTIFY_SET
    | NOTIFY_HASH
    | NOTIFY_ZSET
    | NOTIFY_EXPIRED
    | NOTIFY_EVICTED
    | NOTIFY_STREAM
    | NOTIFY_MODULE;

/// The class letters in the order Redis prints them (without `A`).
const CLASS_LETTERS: &[(u8, u32)] = &[
    (b'g', NOTIFY_GENERIC),
    (b'$', NOTIFY_STRING),
    (b'l', NOTIFY_LIST),
    (b's', NOTIFY_SET),
    (b'h', NOTIFY_HASH),
    (b'z', NOTIFY_ZSET),
    (b'x', NOTIFY_EXPIRED),
    (b'e', NOTIFY_EVICTED),
    (b't', NOTIFY_STREAM),
    (b'd', NOTIFY_MODULE),
    (b'n', NOTIFY_NEW),
];

/// Parses a `notify-keyspace-events` value (Redis's
/// keyspaceEventsStringToFlags); None for a character that names no class.
pub fn parse_flags(s: &[u8]) -> Option<u32> {
    let mut flags = 0;
    for &c in s {
        flags |= match c {
            b'A' => NOTIFY_ALL,
            b'K' => NOTIFY_KEYSPACE,
            b'E' => NOTIFY_KEYEVENT,
            b'm' => NOTIFY_KEY_MISS,
            c => CLASS_LETTERS.iter().find(|(l, _)| *l == c)?.1,
        };
    }
    Some(flags)
}

/// The canonical string CONFIG GET shows (Redis 7.0's
/// keyspaceEventsFlagsToString: with every class of `A` set it prints `A`
/// and, as 7.0 does, drops `n`).
pub fn flags_string(flags: u32) -> String {
    let mut s = String::new();
    if flags & NOTIFY_ALL == NOTIFY_ALL {
        s.push('A');
    } else {
        for (l, bit) in CLASS_LETTERS {
            if flags & bit != 0 {
                s.push(*l as char);
            }
        }
    }
    for (l, bit) in [
        ('K', NOTIFY_KEYSPACE),
        ('E', NOTIFY_KEYEVENT),
        ('m', NOTIFY_KEY_MISS),
    ] {
        if flags & bit != 0 {
            s.push(l);
        }
    }
    s
}

pub fn class_bit(c: Class) -> u32 {
    match c {
        Class::Generic => NOTIFY_GENERIC,
        Class::String => NOTIFY_STRING,
        Class::List => NOTIFY_LIST,
        Class::Set => NOTIFY_SET,
        Class::Hash => NOTIFY_HASH,
        Class::ZSet => NOTIFY_ZSET,
        Class::Stream => NOTIFY_STREAM,
        Class::Expired => NOTIFY_EXPIRED,
        Class::Evicted => NOTIFY_EVICTED,
        Class::KeyMiss => NOTIFY_KEY_MISS,
        Class::New => NOTIFY_NEW,
    }
}

/// The three kinds of subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Channel,
    Pattern,
    Shard,
}

impl Kind {
    /// The confirmation names: (subscribe, unsubscribe).
    pub fn names(self) -> (&'static str, &'static str) {
        match self {
            Kind::Channel => ("subscribe", "unsubscribe"),
            Kind::Pattern => ("psubscribe", "punsubscribe"),
            Kind::Shard => ("ssubscribe", "sunsubscribe"),
        }
    }
}

/// One client's subscriptions of one kind, with the order they were made
/// (an unsubscribe-all goes through them in that order).
#[derive(Debug, Default)]
struct Owned {
    names: HashMap<Bytes, u64>,
}

#[derive(Debug, Default)]
struct ClientSubs {
    channels: Owned,
    patterns: Owned,
    shard: Owned,
}

impl ClientSubs {
    fn of(&mut self, kind: Kind) -> &mut Owned {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
            Kind::Shard => &mut self.shard,
        }
    }
    fn is_empty(&self) -> bool {
        self.channels.names.is_empty()
            && self.patterns.names.is_empty()
            && self.shard.names.is_empty()
    }
}

/// Every subscription of the server.
#[derive(Debug, Default)]
pub struct PubSub {
    channels: HashMap<Bytes, Vec<ClientId>>,
    shard: HashMap<Bytes, Vec<ClientId>>,
    /// Ordered so a message matching several patterns is delivered in a
    /// stable order.
    patterns: BTreeMap<Bytes, Vec<ClientId>>,
    clients: HashMap<ClientId, ClientSubs>,
    seq: u64,
    /// A message went to the client whose command is running (`Notifier`'s
    /// `by`, PUBLISH's caller): the dispatcher decides where it goes
    /// relative to that command's reply (`commands::dispatch::lead_bytes`,
    /// by the command's `Pushes`).
    pub pushed_to_self: bool,
    /// The keyspace events that made those pushes, each with the length of
    /// the client's push queue after it.
    pub self_events: Vec<(Event, usize)>,
}

impl PubSub {
    fn map(&mut self, kind: Kind) -> &mut dyn SubMap {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
            Kind::Shard => &mut self.shard,
        }
    }

    /// Whether `id` has any subscription (Redis's CLIENT_PUBSUB flag).
    pub fn is_subscribed(&self, id: ClientId) -> bool {
        !self.clients.is_empty() && self.clients.contains_key(&id)
    }

    /// (channels, patterns, shard channels) of one client.
    pub fn counts(&self, id: ClientId) -> (usize, usize, usize) {
        self.clients.get(&id).map_or((0, 0, 0), |c| {
            (
                c.channels.names.len(),
                c.patterns.names.len(),
                c.shard.names.len(),
            )
        })
    }

    /// Subscribes `id`; false if it already was.
    pub fn subscribe(&mut self, id: ClientId, kind: Kind, name: &Bytes) -> bool {
        self.seq += 1;
        let seq = self.seq;
        let subs = self.clients.entry(id).or_default().of(kind);
        if subs.names.contains_key(name) {
            return false;
        }
        subs.names.insert(name.clone(), seq);
        self.map(kind).add(name, id);
        true
    }

    /// Unsubscribes `id`; false if it was not subscribed.
    pub fn unsubscribe(&mut self, id: ClientId, kind: Kind, name: &[u8]) -> bool {
        let Some(c) = self.clients.get_mut(&id) else {
            return false;
        };
        if c.of(kind).names.remove(name).is_none() {
            return false;
        }
        if c.is_empty() {
            self.clients.remove(&id);
        }
        self.map(kind).remove(name, id);
        true
    }

    /// A client's subscriptions of one kind, in subscription order.
    pub fn names_of(&self, id: ClientId, kind: Kind) -> Vec<Bytes> {
        let Some(c) = self.clients.get(&id) else {
            return Vec::new();
        };
        let owned = match kind {
            Kind::Channel => &c.channels,
            Kind::Pattern => &c.patterns,
            Kind::Shard => &c.shard,
        };
        let mut v: Vec<(&Bytes, u64)> = owned.names.iter().map(|(k, s)| (k, *s)).collect();
        v.sort_by_key(|(_, s)| *s);
        v.into_iter().map(|(k, _)| k.clone()).collect()
    }

    /// Drops every subscription of a client (disconnect, RESET).
    pub fn remove_client(&mut self, id: ClientId) {
        let Some(c) = self.clients.remove(&id) else {
            return;
        };
        for (kind, owned) in [
            (Kind::Channel, c.channels),
            (Kind::Pattern, c.patterns),
            (Kind::Shard, c.shard),
        ] {
            for name in owned.names.keys() {
                self.map(kind).remove(name, id);
            }
        }
    }

    /// Channels (or shard channels) with at least one subscriber, matching
    /// `pattern` if given (PUBSUB CHANNELS / SHARDCHANNELS).
    pub fn active(&self, shard: bool, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let map = if shard { &self.shard } else { &self.channels };
        map.keys()
            .filter(|c| pattern.is_none_or(|p| crate::glob::matches(p, c, false)))
            .cloned()
            .collect()
    }

    /// Subscribers of a channel or shard channel (PUBSUB NUMSUB).
    pub fn numsub(&self, shard: bool, channel: &[u8]) -> usize {
        let map = if shard { &self.shard } else { &self.channels };
        map.get(channel).map_or(0, Vec::len)
    }

    /// Patterns with at least one subscriber (PUBSUB NUMPAT, INFO).
    pub fn numpat(&self) -> usize {
        self.patterns.len()
    }

    /// Channels with at least one subscriber (INFO pubsub_channels).
    pub fn numchannels(&self, shard: bool) -> usize {
        if shard {
            self.shard.len()
        } else {
            self.channels.len()
        }
    }

    /// Delivers a message (Redis's pubsubPublishMessage): the channel's
    /// subscribers in subscription order, then each matching pattern's;
    /// with `shard` (SPUBLISH), the shard channel's subscribers only.
    /// Returns how many clients it was delivered to. `by`: the client
    /// whose command is publishing.
    pub fn publish(
        &mut self,
        clients: &mut impl Outbox,
        by: Option<ClientId>,
        shard: bool,
        channel: &[u8],
        msg: &[u8],
    ) -> usize {
        let (map, kind) = if shard {
            (&self.shard, "smessage")
        } else {
            (&self.channels, "message")
        };
        let mut n = 0;
        if let Some(subs) = map.get(channel) {
            self.pushed_to_self |= deliver(clients, by, subs, kind, None, channel, msg);
            n += subs.len();
        }
        if shard {
            return n;
        }
        for (pat, subs) in &self.patterns {
            if crate::glob::matches(pat, channel, false) {
                self.pushed_to_self |=
                    deliver(clients, by, subs, "pmessage", Some(pat), channel, msg);
                n += subs.len();
            }
        }
        n
    }

    /// Whether nobody is subscribed to anything.
    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }
}

/// Name → subscribers, as the three registries share it.
trait SubMap {
    fn add(&mut self, name: &Bytes, id: ClientId);
    fn remove(&mut self, name: &[u8], id: ClientId);
}

macro_rules! sub_map {
    ($t:ty) => {
        impl SubMap for $t {
            fn add(&mut self, name: &Bytes, id: ClientId) {
                self.entry(name.clone()).or_default().push(id);
            }
            fn remove(&mut self, name: &[u8], id: ClientId) {
                if let Some(v) = self.get_mut(name) {
                    v.retain(|c| *c != id);
                    if v.is_empty() {
                        self.remove(name);
                    }
                }
            }
        }
    };
}
sub_map!(HashMap<Bytes, Vec<ClientId>>);
sub_map!(BTreeMap<Bytes, Vec<ClientId>>);

/// Pushes one message to `subs`, encoded at most once per protocol;
/// returns whether `by` was among them.
fn deliver(
    clients: &mut impl Outbox,
    by: Option<ClientId>,
    subs: &[ClientId],
    kind: &str,
    pattern: Option<&[u8]>,
    channel: &[u8],
    msg: &[u8],
) -> bool {
    let mut frames = Frames::default();
    for &id in subs {
        // A killed client (protocol None) is sent nothing more anyway.
        let resp3 = clients.protocol(id) == Some(3);
        let f = frames.get(resp3, || frame(resp3, kind, pattern, channel, msg));
        clients.push(id, f);
    }
    by.is_some_and(|b| subs.contains(&b))
}

/// One message encoded at most once per protocol.
#[derive(Default)]
struct Frames([Option<Vec<u8>>; 2]);

impl Frames {
    fn get(&mut self, resp3: bool, make: impl FnOnce() -> Vec<u8>) -> &[u8] {
        self.0[usize::from(resp3)].get_or_insert_with(make)
    }
}

fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(b.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// A `message`/`smessage` (3 elements) or `pmessage` (4) frame: an array
/// in RESP2, a push in RESP3.
pub fn frame(
    resp3: bool,
    kind: &str,
    pattern: Option<&[u8]>,
    channel: &[u8],
    msg: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + channel.len() + msg.len());
    out.push(if resp3 { b'>' } else { b'*' });
    out.extend_from_slice(if pattern.is_some() {
        b"4\r\n"
    } else {
        b"3\r\n"
    });
    bulk(&mut out, kind.as_bytes());
    if let Some(p) = pattern {
        bulk(&mut out, p);
    }
    bulk(&mut out, channel);
    bulk(&mut out, msg);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_strings() {
        let s = |v: &str| flags_string(parse_flags(v.as_bytes()).unwrap());
        assert_eq!(s("KEA"), "AKE");
        assert_eq!(s("$gxlKEhszetmdn"), "AKEm");
        assert_eq!(s("Kn"), "nK");
        assert_eq!(s("g$lshzxe"), "g$lshzxe");
        assert_eq!(s("g$lshzxetd"), "A");
        assert_eq!(s("EK"), "KE");
        assert_eq!(s(""), "");
        assert!(parse_flags(b"Kx1").is_none());
        assert!(parse_flags(b"a").is_none());
    }

    #[test]
    fn registry() {
        let mut p = PubSub::default();
        let a = Bytes::from_static(b"a");
        let b = Bytes::from_static(b"b");
        assert!(p.subscribe(1, Kind::Channel, &b));
        assert!(p.subscribe(1, Kind::Channel, &a));
        assert!(!p.subscribe(1, Kind::Channel, &a));
        assert!(p.subscribe(2, Kind::Channel, &a));
        assert!(p.subscribe(2, Kind::Pattern, &a));
        assert_eq!(p.names_of(1, Kind::Channel), vec![b.clone(), a.clone()]);
        assert_eq!(p.numsub(false, b"a"), 2);
        assert_eq!(p.counts(2), (1, 1, 0));
        assert!(p.unsubscribe(1, Kind::Channel, b"a"));
        assert!(!p.unsubscribe(1, Kind::Channel, b"a"));
        assert_eq!(p.numsub(false, b"a"), 1);
        p.remove_client(2);
        assert_eq!(p.numsub(false, b"a"), 0);
        assert_eq!(p.numpat(), 0);
        assert!(p.is_subscribed(1));
        assert!(!p.is_subscribed(2));
        assert_eq!(p.active(false, None), vec![b]);
    }
}
