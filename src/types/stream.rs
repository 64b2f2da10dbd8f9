//! Redis's stream (t_stream.c's data structure): entries in nodes, each
//! node a listpack in Redis's own stream layout, keyed by its master ID in
//! an ordered map (Redis's radix tree), with the consumer groups beside
//! them. Node boundaries follow Redis's rules (`stream-node-max-bytes`,
//! `stream-node-max-entries`, both counted as Redis counts them), so the
//! same writes leave the same nodes: approximate trimming removes the same
//! entries and an RDB node is written and read as it is.
//!
//! A node's listpack:
//! `count deleted numfields field... 0` (the master entry), then per
//! entry `flags ms-delta seq-delta [numfields] [field] value... lp-count`,
//! the fields omitted when they are the master's (flag SAMEFIELDS). A
//! deleted entry keeps its place with flag DELETED; a node is dropped
//! when its last live entry goes.
//!
//! Must not know commands, connections or the keyspace: times and limits
//! come in as arguments.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::listpack::{self, Elem};

const FLAG_DELETED: i64 = 1;
const FLAG_SAMEFIELDS: i64 = 2;
/// A node starts with this many bytes reserved (capped by the node size).
const PREALLOC: usize = 4096;
/// The largest listpack (and entry) Redis allows.
pub const MAX_NODE_BYTES: usize = 1 << 30;
/// `entries_read` when it is not known.
pub const INVALID_ENTRIES_READ: i64 = -1;

/// An entry ID: milliseconds and a sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    pub fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    pub fn is_zero(&self) -> bool {
        *self == StreamId::MIN
    }

    /// The next ID, or None after the largest.
    pub fn incr(self) -> Option<StreamId> {
        if self.seq < u64::MAX {
            Some(StreamId::new(self.ms, self.seq + 1))
        } else if self.ms < u64::MAX {
            Some(StreamId::new(self.ms + 1, 0))
        } else {
            None
        }
    }

    /// The previous ID, or None before 0-0.
    pub fn decr(self) -> Option<StreamId> {
        if self.seq > 0 {
            Some(StreamId::new(self.ms, self.seq - 1))
        } else if self.ms > 0 {
            Some(StreamId::new(self.ms - 1, u64::MAX))
        } else {
            None
        }
    }

    /// `ms-seq`, as Redis writes IDs.
    pub fn to_bytes(self) -> Vec<u8> {
        let mut b = itoa::Buffer::new();
        let mut v = b.format(self.ms).as_bytes().to_vec();
        v.push(b'-');
        v.extend_from_slice(b.format(self.seq).as_bytes());
        v
    }

    /// The 16 big-endian bytes Redis keys its radix trees with.
    pub fn to_key(self) -> [u8; 16] {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&self.ms.to_be_bytes());
        k[8..].copy_from_slice(&self.seq.to_be_bytes());
        k
    }

    pub fn from_key(k: &[u8]) -> Option<StreamId> {
        if k.len() != 16 {
            return None;
        }
        Some(StreamId::new(
            u64::from_be_bytes(k[..8].try_into().ok()?),
            u64::from_be_bytes(k[8..].try_into().ok()?),
        ))
    }
}

/// How XADD picks the new entry's ID.
#[derive(Debug, Clone, Copy)]
pub enum NewId {
    /// `*`: now, or the last ID's successor.
    Auto,
    /// `<ms>-*`: the sequence picked within `ms`.
    Ms(u64),
    /// An ID given in full.
    Exact(StreamId),
}

/// Why an entry could not be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddError {
    /// The ID is not greater than the last one.
    NotGreater,
    /// Fields and values over the largest node.
    TooLarge,
}

/// Node limits: `stream-node-max-bytes` and `stream-node-max-entries`.
#[derive(Debug, Clone, Copy)]
pub struct NodeLimits {
    pub max_bytes: usize,
    pub max_entries: usize,
}

/// A trimming request (XADD's and XTRIM's MAXLEN/MINID).
#[derive(Debug, Clone, Copy)]
pub enum Trim {
    MaxLen(u64),
    MinId(StreamId),
}

/// One entry as an iterator yields it: its ID and where its fields are.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    pub id: StreamId,
    lp: &'a [u8],
    /// Offset of the first master field (SAMEFIELDS) or of the first field.
    master: usize,
    first: usize,
    same: bool,
    numfields: usize,
}

impl<'a> Entry<'a> {
    pub fn len(&self) -> usize {
        self.numfields
    }

    pub fn is_empty(&self) -> bool {
        self.numfields == 0
    }

    /// The field-value pairs.
    pub fn fields(&self) -> impl Iterator<Item = (Elem<'a>, Elem<'a>)> + 'a {
        let lp = self.lp;
        let same = self.same;
        let mut mf = Some(self.master);
        let mut p = Some(self.first);
        (0..self.numfields).map(move |_| {
            if same {
                let (m, v) = (mf.unwrap_or(0), p.unwrap_or(0));
                mf = listpack::next(lp, m);
                p = listpack::next(lp, v);
                (listpack::get(lp, m), listpack::get(lp, v))
            } else {
                let f = p.unwrap_or(0);
                let v = listpack::next(lp, f).unwrap_or(0);
                p = listpack::next(lp, v);
                (listpack::get(lp, f), listpack::get(lp, v))
            }
        })
    }
}

/// Entries of one node in order, deleted ones included (`deleted` tells).
struct NodeWalk<'a> {
    lp: &'a [u8],
    master_id: StreamId,
    master_fields: usize,
    nmaster: usize,
    p: Option<usize>,
}

struct Raw<'a> {
    entry: Entry<'a>,
    /// Offset of the flags element.
    at: usize,
    deleted: bool,
}

impl<'a> NodeWalk<'a> {
    fn new(master_id: StreamId, lp: &'a [u8]) -> NodeWalk<'a> {
        let mut p = listpack::first(lp).unwrap_or(0); // count
        p = listpack::next(lp, p).unwrap_or(0); // deleted
        p = listpack::next(lp, p).unwrap_or(0); // master numfields
        let nmaster = listpack::get_int(lp, p).max(0) as usize;
        let mut q = listpack::next(lp, p);
        let master_fields = q.unwrap_or(0);
        for _ in 0..nmaster {
            q = q.and_then(|q| listpack::next(lp, q));
        }
        // q: the master entry's terminator.
        let p = q.and_then(|q| listpack::next(lp, q));
        NodeWalk {
            lp,
            master_id,
            master_fields,
            nmaster,
            p,
        }
    }
}

impl<'a> Iterator for NodeWalk<'a> {
    type Item = Raw<'a>;

    fn next(&mut self) -> Option<Raw<'a>> {
        let lp = self.lp;
        let at = self.p?;
        let flags = listpack::get_int(lp, at);
        let p = listpack::next(lp, at)?;
        let ms = listpack::get_int(lp, p) as u64;
        let p = listpack::next(lp, p)?;
        let seq = listpack::get_int(lp, p) as u64;
        let mut p = listpack::next(lp, p)?;
        let same = flags & FLAG_SAMEFIELDS != 0;
        let (numfields, skip) = if same {
            (self.nmaster, self.nmaster)
        } else {
            let n = listpack::get_int(lp, p).max(0) as usize;
            p = listpack::next(lp, p)?;
            (n, n * 2)
        };
        let first = p;
        let mut q = Some(p);
        for _ in 0..skip {
            q = q.and_then(|q| listpack::next(lp, q));
        }
        // q: lp-count; the next entry follows it.
        self.p = q.and_then(|q| listpack::next(lp, q));
        Some(Raw {
            entry: Entry {
                id: StreamId::new(
                    self.master_id.ms.wrapping_add(ms),
                    self.master_id.seq.wrapping_add(seq),
                ),
                lp,
                master: self.master_fields,
                first,
                same,
                numfields,
            },
            at,
            deleted: flags & FLAG_DELETED != 0,
        })
    }
}

/// A pending entry: delivered to a consumer and not yet acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nack {
    /// Last delivery, ms.
    pub delivery_time: i64,
    pub delivery_count: u64,
    consumer: u32,
}

#[derive(Debug, Clone, Default)]
pub struct Consumer {
    /// Last time it was seen (read, claimed, created), ms.
    pub seen_time: i64,
    pel: std::collections::BTreeSet<StreamId>,
    id: u32,
}

impl Consumer {
    pub fn pending(&self) -> usize {
        self.pel.len()
    }

    pub fn pending_ids(&self) -> impl DoubleEndedIterator<Item = StreamId> + '_ {
        self.pel.iter().copied()
    }

    pub fn pending_from(&self, start: StreamId) -> impl Iterator<Item = StreamId> + '_ {
        self.pel.range(start..).copied()
    }
}

/// A consumer group.
#[derive(Debug, Clone, Default)]
pub struct Group {
    /// The last ID delivered to the group.
    pub last_id: StreamId,
    /// Entries the group has read, or `INVALID_ENTRIES_READ`.
    pub entries_read: i64,
    pel: BTreeMap<StreamId, Nack>,
    consumers: BTreeMap<Bytes, Consumer>,
    names: BTreeMap<u32, Bytes>,
    next_consumer: u32,
}

/// What delivering an entry to a consumer did.
pub struct Delivered {
    pub nack: Nack,
}

impl Group {
    pub fn new(last_id: StreamId, entries_read: i64) -> Group {
        Group {
            last_id,
            entries_read,
            ..Group::default()
        }
    }

    pub fn consumers(&self) -> impl Iterator<Item = (&Bytes, &Consumer)> {
        self.consumers.iter()
    }

    pub fn consumer(&self, name: &[u8]) -> Option<&Consumer> {
        self.consumers.get(name)
    }

    pub fn consumer_count(&self) -> usize {
        self.consumers.len()
    }

    /// Creates a consumer; false when it exists (its seen time is left).
    pub fn create_consumer(&mut self, name: &[u8], now: i64) -> bool {
        if self.consumers.contains_key(name) {
            return false;
        }
        self.next_consumer = self.next_consumer.wrapping_add(1);
        while self.names.contains_key(&self.next_consumer) {
            self.next_consumer = self.next_consumer.wrapping_add(1);
        }
        let id = self.next_consumer;
        let name = Bytes::copy_from_slice(name);
        self.names.insert(id, name.clone());
        self.consumers.insert(
            name,
            Consumer {
                seen_time: now,
                pel: Default::default(),
                id,
            },
        );
        true
    }

    /// Marks a consumer seen now.
    pub fn touch_consumer(&mut self, name: &[u8], now: i64) {
        if let Some(c) = self.consumers.get_mut(name) {
            c.seen_time = now;
        }
    }

    /// Deletes a consumer with its pending entries; how many it had, or
    /// None when there is no such consumer.
    pub fn delete_consumer(&mut self, name: &[u8]) -> Option<usize> {
        let c = self.consumers.remove(name)?;
        self.names.remove(&c.id);
        for id in &c.pel {
            self.pel.remove(id);
        }
        Some(c.pel.len())
    }

    pub fn pending_len(&self) -> usize {
        self.pel.len()
    }

    pub fn pending(&self, id: &StreamId) -> Option<&Nack> {
        self.pel.get(id)
    }

    /// Pending entries from `start` to `end`.
    pub fn pending_range(
        &self,
        start: StreamId,
        end: StreamId,
    ) -> impl Iterator<Item = (StreamId, &Nack)> {
        let r = if start <= end {
            Some(self.pel.range(start..=end))
        } else {
            None
        };
        r.into_iter().flatten().map(|(k, v)| (*k, v))
    }

    pub fn first_pending(&self) -> Option<StreamId> {
        self.pel.keys().next().copied()
    }

    pub fn last_pending(&self) -> Option<StreamId> {
        self.pel.keys().next_back().copied()
    }

    /// The name of the consumer that owns a pending entry.
    pub fn owner(&self, n: &Nack) -> &Bytes {
        static NONE: Bytes = Bytes::new();
        self.names.get(&n.consumer).unwrap_or(&NONE)
    }

    /// Delivers `id` to consumer `name` (which must exist): a new pending
    /// entry with one delivery, or the existing one moved to this consumer
    /// with its count reset to 1 (XREADGROUP reading an entry again).
    pub fn deliver(&mut self, id: StreamId, name: &[u8], now: i64) -> Nack {
        self.claim(id, name, now, 1)
    }

    /// A history read of a pending entry: one more delivery, now.
    pub fn redeliver(&mut self, id: StreamId, now: i64) {
        if let Some(n) = self.pel.get_mut(&id) {
            n.delivery_time = now;
            n.delivery_count += 1;
        }
    }

    /// Claims a pending entry (or creates one, FORCE) for consumer `name`
    /// (which must exist), setting its delivery time and count.
    pub fn claim(&mut self, id: StreamId, name: &[u8], time: i64, count: u64) -> Nack {
        let cid = self.consumers.get(name).map_or(0, |c| c.id);
        let nack = Nack {
            delivery_time: time,
            delivery_count: count,
            consumer: cid,
        };
        if let Some(old) = self.pel.insert(id, nack) {
            self.unlink(old.consumer, id);
        }
        if let Some(c) = self.consumers.get_mut(name) {
            c.pel.insert(id);
        }
        nack
    }

    /// XCLAIM's and XAUTOCLAIM's claim: consumer `name` is created (true
    /// in the answer) or marked seen at `now`, then claims `id`.
    pub fn claim_for(
        &mut self,
        id: StreamId,
        name: &[u8],
        time: i64,
        count: u64,
        now: i64,
    ) -> (Nack, bool) {
        let created = self.create_consumer(name, now);
        if !created {
            self.touch_consumer(name, now);
        }
        (self.claim(id, name, time, count), created)
    }

    /// Acknowledges an entry: whether it was pending.
    pub fn ack(&mut self, id: StreamId) -> bool {
        match self.pel.remove(&id) {
            Some(n) => {
                self.unlink(n.consumer, id);
                true
            }
            None => false,
        }
    }

    fn unlink(&mut self, consumer: u32, id: StreamId) {
        if let Some(name) = self.names.get(&consumer) {
            if let Some(c) = self.consumers.get_mut(name) {
                c.pel.remove(&id);
            }
        }
    }

    /// Restores a pending entry of a consumer (RDB, RESTORE), creating the
    /// consumer when needed; false when the entry is not in the group's
    /// list (a corrupt payload).
    pub fn load_pending(&mut self, id: StreamId, time: i64, count: u64) {
        self.pel.insert(
            id,
            Nack {
                delivery_time: time,
                delivery_count: count,
                consumer: 0,
            },
        );
    }

    /// Gives loaded pending entry `id` to consumer `name`; false when the
    /// group has no such pending entry or it was given already.
    pub fn load_owner(&mut self, id: StreamId, name: &[u8]) -> bool {
        let Some(cid) = self.consumers.get(name).map(|c| c.id) else {
            return false;
        };
        match self.pel.get_mut(&id) {
            Some(n) if n.consumer == 0 => n.consumer = cid,
            _ => return false,
        }
        if let Some(c) = self.consumers.get_mut(name) {
            c.pel.insert(id);
        }
        true
    }

    /// Whether every pending entry has an owner (a loaded group is valid).
    pub fn all_owned(&self) -> bool {
        self.pel.values().all(|n| n.consumer != 0)
    }

    pub fn mem_usage(&self) -> usize {
        // BTreeMap nodes hold up to 11 pairs, about 2/3 full on average.
        let per_pending = (16 + std::mem::size_of::<Nack>()) * 3 / 2 + 16 * 3 / 2;
        let consumers: usize = self.consumers.keys().map(|k| k.len() + 96).sum();
        std::mem::size_of::<Group>() + self.pel.len() * per_pending + consumers
    }
}

/// A `StreamView` of a stream's fields (a macro, so it borrows only the
/// fields it names while a group is borrowed mutably).
macro_rules! view {
    ($s:expr) => {
        StreamView {
            nodes: &$s.nodes,
            length: $s.length,
            last_id: $s.last_id,
            first_id: $s.first_id,
            max_deleted: $s.max_deleted,
            entries_added: $s.entries_added,
        }
    };
}

/// A stream.
#[derive(Debug, Clone, Default)]
pub struct Stream {
    nodes: BTreeMap<StreamId, Vec<u8>>,
    length: u64,
    last_id: StreamId,
    first_id: StreamId,
    max_deleted: StreamId,
    entries_added: u64,
    groups: Option<BTreeMap<Bytes, Group>>,
}

impl Stream {
    pub const NAME: &'static str = "stream";

    pub fn new() -> Stream {
        Stream::default()
    }

    pub fn encoding(&self) -> &'static str {
        "stream"
    }

    pub fn len(&self) -> u64 {
        self.length
    }

    /// Whether it holds no entries. An empty stream still stays at its
    /// key (it keeps its last ID and groups): see `Kind for Stream`.
    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    pub fn last_id(&self) -> StreamId {
        self.last_id
    }

    /// The first entry's ID as recorded (0-0 when empty).
    pub fn first_id(&self) -> StreamId {
        self.first_id
    }

    pub fn max_deleted(&self) -> StreamId {
        self.max_deleted
    }

    pub fn entries_added(&self) -> u64 {
        self.entries_added
    }

    /// XSETID's fields, and a loader's.
    pub fn set_meta(&mut self, last: StreamId, entries_added: u64, max_deleted: StreamId) {
        self.last_id = last;
        self.entries_added = entries_added;
        self.max_deleted = max_deleted;
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The nodes in order, as (master ID, listpack): for the RDB writer.
    pub fn nodes(&self) -> impl Iterator<Item = (StreamId, &[u8])> {
        self.nodes.iter().map(|(k, v)| (*k, v.as_slice()))
    }

    /// Adds a node read from an RDB file or a DUMP payload, which the
    /// caller checked with `check_node`; its entries count in the length.
    pub fn load_node(&mut self, master: StreamId, lp: Vec<u8>) {
        let live = listpack::first(&lp).map_or(0, |p| listpack::get_int(&lp, p));
        self.length += live.max(0) as u64;
        self.nodes.insert(master, lp);
    }

    /// Recomputes the first ID after a load (7.0 payloads record it, older
    /// ones do not).
    pub fn set_first_id(&mut self, id: StreamId) {
        self.first_id = id;
    }

    /// Checks a node's structure as Redis's deep integrity check does: the
    /// listpack, the master entry, every entry's fields and lp-count, the
    /// IDs ascending from the master ID, and the live and deleted counts.
    pub fn check_node(master: StreamId, lp: &[u8]) -> bool {
        let Some(elems) = listpack::decode(lp) else {
            return false;
        };
        let int = |i: usize| -> Option<i64> {
            match elems.get(i)? {
                Elem::Int(v) => Some(*v),
                Elem::Str(_) => None,
            }
        };
        let (Some(count), Some(deleted), Some(nmaster)) = (int(0), int(1), int(2)) else {
            return false;
        };
        if nmaster <= 0 || count < 0 || deleted < 0 {
            return false;
        }
        let nmaster = nmaster as usize;
        let mut i = 3 + nmaster;
        if int(i) != Some(0) {
            return false;
        }
        i += 1;
        let (mut live, mut dead) = (0i64, 0i64);
        let mut prev: Option<StreamId> = None;
        while i < elems.len() {
            let start = i;
            let (Some(flags), Some(ms), Some(seq)) = (int(i), int(i + 1), int(i + 2)) else {
                return false;
            };
            i += 3;
            let n = if flags & FLAG_SAMEFIELDS != 0 {
                nmaster
            } else {
                let Some(n) = int(i).filter(|&n| n >= 0) else {
                    return false;
                };
                i += 1 + n as usize;
                n as usize
            };
            i += n;
            if i >= elems.len() || int(i) != Some((i - start) as i64) {
                return false;
            }
            i += 1;
            let id = StreamId::new(
                master.ms.wrapping_add(ms as u64),
                master.seq.wrapping_add(seq as u64),
            );
            if id < master || prev.is_some_and(|p| id <= p) {
                return false;
            }
            prev = Some(id);
            if flags & FLAG_DELETED != 0 {
                dead += 1;
            } else {
                live += 1;
            }
        }
        live == count && dead == deleted && live + dead > 0
    }

    /// Adds an entry of `pairs` (field, value, ...); its ID.
    pub fn add(
        &mut self,
        pairs: &[impl AsRef<[u8]>],
        new: NewId,
        now_ms: u64,
        lim: NodeLimits,
    ) -> Result<StreamId, AddError> {
        let id = match new {
            NewId::Auto => {
                if now_ms > self.last_id.ms {
                    StreamId::new(now_ms, 0)
                } else {
                    self.last_id.incr().ok_or(AddError::NotGreater)?
                }
            }
            NewId::Ms(ms) => {
                if self.last_id.ms == ms {
                    if self.last_id.seq == u64::MAX {
                        return Err(AddError::NotGreater);
                    }
                    StreamId::new(ms, self.last_id.seq + 1)
                } else {
                    StreamId::new(ms, 0)
                }
            }
            NewId::Exact(id) => id,
        };
        if id <= self.last_id {
            return Err(AddError::NotGreater);
        }
        let total: usize = pairs.iter().map(|p| p.as_ref().len()).sum();
        if total > MAX_NODE_BYTES {
            return Err(AddError::TooLarge);
        }
        let numfields = pairs.len() / 2;
        let max_bytes = if lim.max_bytes == 0 || lim.max_bytes > MAX_NODE_BYTES {
            MAX_NODE_BYTES
        } else {
            lim.max_bytes
        };
        // The tail node, unless it is full.
        let mut tail = self.nodes.iter_mut().next_back();
        if let Some((_, lp)) = &mut tail {
            let p = listpack::first(lp).unwrap_or(0);
            let count = listpack::get_int(lp, p)
                + listpack::next(lp, p).map_or(0, |q| listpack::get_int(lp, q));
            if lp.len() + total >= max_bytes
                || (lim.max_entries > 0 && count >= lim.max_entries as i64)
            {
                lp.shrink_to_fit();
                tail = None;
            }
        }
        let mut flags = 0;
        let (master, lp) = match tail {
            Some((m, lp)) => {
                let m = *m;
                // One more live entry, and are the fields the master's?
                let p = listpack::first(lp).unwrap_or(0);
                let count = listpack::get_int(lp, p);
                listpack::replace_int(lp, p, count + 1);
                let p = listpack::next(lp, p).and_then(|p| listpack::next(lp, p));
                let nmaster = p.map_or(0, |p| listpack::get_int(lp, p)) as usize;
                if nmaster == numfields {
                    let mut q = p.and_then(|p| listpack::next(lp, p));
                    let mut same = true;
                    for i in 0..numfields {
                        let f = pairs[i * 2].as_ref();
                        let Some(at) = q else {
                            same = false;
                            break;
                        };
                        if !elem_eq(listpack::get(lp, at), f) {
                            same = false;
                            break;
                        }
                        q = listpack::next(lp, at);
                    }
                    if same {
                        flags |= FLAG_SAMEFIELDS;
                    }
                }
                (m, lp)
            }
            None => {
                let mut lp = listpack::new(PREALLOC.min(max_bytes));
                listpack::append_int(&mut lp, 1);
                listpack::append_int(&mut lp, 0);
                listpack::append_int(&mut lp, numfields as i64);
                for i in 0..numfields {
                    listpack::append(&mut lp, pairs[i * 2].as_ref());
                }
                listpack::append_int(&mut lp, 0);
                flags |= FLAG_SAMEFIELDS;
                let lp = self.nodes.entry(id).or_insert(lp);
                (id, lp)
            }
        };
        listpack::append_int(lp, flags);
        listpack::append_int(lp, id.ms.wrapping_sub(master.ms) as i64);
        listpack::append_int(lp, id.seq.wrapping_sub(master.seq) as i64);
        let same = flags & FLAG_SAMEFIELDS != 0;
        if !same {
            listpack::append_int(lp, numfields as i64);
        }
        for i in 0..numfields {
            if !same {
                listpack::append(lp, pairs[i * 2].as_ref());
            }
            listpack::append(lp, pairs[i * 2 + 1].as_ref());
        }
        let lp_count = 3 + numfields + if same { 0 } else { numfields + 1 };
        listpack::append_int(lp, lp_count as i64);
        self.length += 1;
        self.entries_added += 1;
        self.last_id = id;
        if self.length == 1 {
            self.first_id = id;
        }
        Ok(id)
    }

    /// Entries from `start` to `end` (inclusive), in order or reversed.
    pub fn range(&self, start: StreamId, end: StreamId, rev: bool) -> Range<'_> {
        Range::new(self, start, end, rev)
    }

    /// The entry with ID `id`, if it is live.
    pub fn get(&self, id: StreamId) -> Option<Entry<'_>> {
        self.range(id, id, false).next()
    }

    /// Deletes an entry; whether it was there.
    pub fn delete(&mut self, id: StreamId) -> bool {
        let Some((&master, lp)) = self.nodes.range_mut(..=id).next_back() else {
            return false;
        };
        let Some(at) = NodeWalk::new(master, lp)
            .find(|r| r.entry.id == id)
            .filter(|r| !r.deleted)
            .map(|r| r.at)
        else {
            return false;
        };
        let flags = listpack::get_int(lp, at);
        listpack::replace_int(lp, at, flags | FLAG_DELETED);
        let p = listpack::first(lp).unwrap_or(0);
        let live = listpack::get_int(lp, p);
        if live == 1 {
            self.nodes.remove(&master);
        } else {
            listpack::replace_int(lp, p, live - 1);
            if let Some(q) = listpack::next(lp, p) {
                let dead = listpack::get_int(lp, q);
                listpack::replace_int(lp, q, dead + 1);
            }
        }
        self.length -= 1;
        true
    }

    /// XDEL's bookkeeping after deleting entries, the largest of them
    /// `max`: the largest deleted ID, and the first ID when it went.
    pub fn after_deletes(&mut self, max: StreamId, first_went: bool) {
        if max > self.max_deleted {
            self.max_deleted = max;
        }
        if self.length == 0 {
            self.first_id = StreamId::MIN;
        } else if first_went {
            self.first_id = self.first_live().unwrap_or_default();
        }
    }

    fn first_live(&self) -> Option<StreamId> {
        self.range(StreamId::MIN, StreamId::MAX, false)
            .next()
            .map(|e| e.id)
    }

    /// The first or last entry of the first or last node, deleted or not
    /// (streamGetEdgeID with tombstones).
    fn edge_of_node(master: StreamId, lp: &[u8], first: bool) -> Option<StreamId> {
        let mut w = NodeWalk::new(master, lp);
        if first {
            w.next().map(|r| r.entry.id)
        } else {
            w.last().map(|r| r.entry.id)
        }
    }

    /// The first live entry's ID, or None when empty (for XADD/XTRIM's
    /// rewrite of an approximate MINID).
    pub fn first_entry_id(&self) -> Option<StreamId> {
        self.first_live()
    }

    /// Trims by length or minimum ID; `approx` removes whole nodes only,
    /// `limit` (0: none) caps the entries removed. Returns how many went.
    pub fn trim(&mut self, how: Trim, approx: bool, limit: u64) -> u64 {
        let mut deleted = 0u64;
        while let Some((&master, lp)) = self.nodes.iter_mut().next() {
            if let Trim::MaxLen(max) = how {
                if self.length <= max {
                    break;
                }
            }
            let p = listpack::first(lp).unwrap_or(0);
            let entries = listpack::get_int(lp, p).max(0) as u64;
            if limit > 0 && deleted + entries > limit {
                break;
            }
            let remove = match how {
                Trim::MaxLen(max) => self.length - entries >= max,
                Trim::MinId(min) => {
                    Stream::edge_of_node(master, lp, false).is_some_and(|last| last < min)
                }
            };
            if remove {
                self.nodes.remove(&master);
                self.length -= entries;
                deleted += entries;
                continue;
            }
            if approx {
                break;
            }
            // Mark entries of this node deleted until done.
            let mut marks = Vec::new();
            let mut len = self.length;
            for r in NodeWalk::new(master, lp) {
                let stop = match how {
                    Trim::MaxLen(max) => len <= max,
                    Trim::MinId(min) => r.entry.id >= min,
                };
                if stop {
                    break;
                }
                if !r.deleted {
                    marks.push(r.at);
                    len -= 1;
                }
            }
            // Flags keep their one-byte size, so the offsets stay valid.
            for &at in &marks {
                let flags = listpack::get_int(lp, at);
                listpack::replace_int(lp, at, flags | FLAG_DELETED);
            }
            let n = marks.len() as u64;
            self.length -= n;
            deleted += n;
            let p = listpack::first(lp).unwrap_or(0);
            listpack::replace_int(lp, p, (entries - n) as i64);
            if let Some(q) = listpack::next(lp, p) {
                let dead = listpack::get_int(lp, q);
                listpack::replace_int(lp, q, dead + n as i64);
            }
            break;
        }
        if self.length == 0 {
            self.first_id = StreamId::MIN;
        } else if deleted > 0 {
            self.first_id = self.first_live().unwrap_or_default();
        }
        deleted
    }

    /// The number of nodes a radix tree of the node keys has (XINFO's
    /// `radix-tree-nodes`): Redis's rax, compressed as rax keeps it.
    pub fn radix_nodes(&self) -> usize {
        let keys: Vec<[u8; 16]> = self.nodes.keys().map(|k| k.to_key()).collect();
        if keys.is_empty() {
            return 1;
        }
        rax_nodes(&keys, 0)
    }

    // ----- consumer groups

    pub fn groups(&self) -> impl Iterator<Item = (&Bytes, &Group)> {
        self.groups.iter().flatten()
    }

    pub fn group_count(&self) -> usize {
        self.groups.as_ref().map_or(0, |g| g.len())
    }

    pub fn group(&self, name: &[u8]) -> Option<&Group> {
        self.groups.as_ref()?.get(name)
    }

    pub fn group_mut(&mut self, name: &[u8]) -> Option<&mut Group> {
        self.groups.as_mut()?.get_mut(name)
    }

    /// Creates a group; false when one of that name exists.
    pub fn create_group(&mut self, name: &[u8], last_id: StreamId, entries_read: i64) -> bool {
        let g = self.groups.get_or_insert_with(BTreeMap::new);
        if g.contains_key(name) {
            return false;
        }
        g.insert(
            Bytes::copy_from_slice(name),
            Group::new(last_id, entries_read),
        );
        true
    }

    pub fn destroy_group(&mut self, name: &[u8]) -> bool {
        self.groups
            .as_mut()
            .is_some_and(|g| g.remove(name).is_some())
    }

    /// The stream and one of its groups, both mutable (XREADGROUP).
    pub fn with_group(&mut self, name: &[u8]) -> Option<(&mut Group, StreamView<'_>)> {
        let g = self.groups.as_mut()?.get_mut(name)?;
        Some((g, view!(self)))
    }

    fn view(&self) -> StreamView<'_> {
        view!(self)
    }

    /// A group's lag (XINFO), or None when it cannot be known.
    pub fn lag(&self, g: &Group) -> Option<i64> {
        self.view().lag(g)
    }

    /// streamEstimateDistanceFromFirstEverEntry.
    pub fn entries_read_of(&self, id: StreamId) -> i64 {
        self.view().estimate(id)
    }

    pub fn mem_usage(&self) -> usize {
        // Each node: its listpack's allocation, the map's slot (key, Vec).
        let nodes: usize = self
            .nodes
            .values()
            .map(|lp| super::pack::alloc_class(lp.capacity()) + 40 * 3 / 2)
            .sum();
        let groups: usize = self.groups().map(|(k, g)| k.len() + g.mem_usage()).sum();
        std::mem::size_of::<Stream>() + nodes + groups
    }
}

/// The parts of a stream a group's reads look at while the group itself
/// is borrowed mutably.
pub struct StreamView<'a> {
    nodes: &'a BTreeMap<StreamId, Vec<u8>>,
    length: u64,
    last_id: StreamId,
    first_id: StreamId,
    max_deleted: StreamId,
    entries_added: u64,
}

impl<'a> StreamView<'a> {
    pub fn range(&self, start: StreamId, end: StreamId, rev: bool) -> Range<'a> {
        Range::over(self.nodes, start, end, rev)
    }

    pub fn last_id(&self) -> StreamId {
        self.last_id
    }

    /// Whether deleted entries may lie between `start` and the end
    /// (streamRangeHasTombstones from `start` on).
    pub fn has_tombstones_from(&self, start: StreamId) -> bool {
        if self.length == 0 || self.max_deleted.is_zero() {
            return false;
        }
        if self.first_id > self.max_deleted {
            return false;
        }
        start <= self.max_deleted
    }

    /// streamEstimateDistanceFromFirstEverEntry.
    pub fn estimate(&self, id: StreamId) -> i64 {
        let added = self.entries_added as i64;
        if self.entries_added == 0 {
            return 0;
        }
        if self.length == 0 && id <= self.last_id {
            return added;
        }
        if id == self.last_id {
            return added;
        } else if id > self.last_id {
            return INVALID_ENTRIES_READ;
        }
        if self.max_deleted.is_zero() || self.max_deleted < self.first_id {
            if id < self.first_id {
                return added - self.length as i64;
            } else if id == self.first_id {
                return added - self.length as i64 + 1;
            }
        }
        INVALID_ENTRIES_READ
    }

    /// The group's counters after it read entry `id` (streamReplyWithRange).
    pub fn advance(&self, g: &mut Group, id: StreamId) {
        if id > g.last_id {
            if g.entries_read != INVALID_ENTRIES_READ && !self.has_tombstones_from(id) {
                g.entries_read += 1;
            } else if self.entries_added > 0 {
                g.entries_read = self.estimate(id);
            }
            g.last_id = id;
        }
    }

    pub fn lag(&self, g: &Group) -> Option<i64> {
        let added = self.entries_added as i64;
        if self.entries_added == 0 {
            return Some(0);
        }
        if g.entries_read != INVALID_ENTRIES_READ && !self.has_tombstones_from(g.last_id) {
            return Some(added - g.entries_read);
        }
        let read = self.estimate(g.last_id);
        (read != INVALID_ENTRIES_READ).then_some(added - read)
    }
}

fn elem_eq(e: Elem<'_>, b: &[u8]) -> bool {
    match e {
        Elem::Str(s) => s == b,
        Elem::Int(v) => itoa::Buffer::new().format(v).as_bytes() == b,
    }
}

/// Nodes of a rax holding `keys` (sorted, distinct, all 16 bytes) below
/// depth `d`: a compressed node for a shared run, a branching node where
/// they part, and the leaf each key ends in.
fn rax_nodes(keys: &[[u8; 16]], d: usize) -> usize {
    if d == 16 {
        return 1;
    }
    if keys.len() == 1 {
        return 2;
    }
    let first = &keys[0];
    let last = &keys[keys.len() - 1];
    let mut p = 0;
    while d + p < 16 && first[d + p] == last[d + p] {
        p += 1;
    }
    if p > 0 {
        return 1 + rax_nodes(keys, d + p);
    }
    let mut n = 1;
    let mut i = 0;
    while i < keys.len() {
        let c = keys[i][d];
        let mut j = i;
        while j < keys.len() && keys[j][d] == c {
            j += 1;
        }
        n += rax_nodes(&keys[i..j], d + 1);
        i = j;
    }
    n
}

/// Live entries between two IDs, in order or reversed.
pub struct Range<'a> {
    nodes: std::collections::btree_map::Range<'a, StreamId, Vec<u8>>,
    start: StreamId,
    end: StreamId,
    rev: bool,
    /// Forward: the node being walked.
    walk: Option<NodeWalk<'a>>,
    /// Reversed: the node's live entries in range, last first.
    back: Vec<Entry<'a>>,
    done: bool,
}

impl<'a> Range<'a> {
    fn new(s: &'a Stream, start: StreamId, end: StreamId, rev: bool) -> Range<'a> {
        Range::over(&s.nodes, start, end, rev)
    }

    fn over(
        nodes: &'a BTreeMap<StreamId, Vec<u8>>,
        start: StreamId,
        end: StreamId,
        rev: bool,
    ) -> Range<'a> {
        let done = start > end;
        let (lo, hi) = if done {
            (StreamId::MIN, StreamId::MIN)
        } else if rev {
            (StreamId::MIN, end)
        } else {
            // From the node that may hold `start`.
            let lo = nodes.range(..=start).next_back().map_or(start, |(k, _)| *k);
            (lo, StreamId::MAX)
        };
        Range {
            nodes: nodes.range(lo..=hi),
            start,
            end,
            rev,
            walk: None,
            back: Vec::new(),
            done,
        }
    }
}

impl<'a> Iterator for Range<'a> {
    type Item = Entry<'a>;

    fn next(&mut self) -> Option<Entry<'a>> {
        if self.done {
            return None;
        }
        if self.rev {
            loop {
                if let Some(e) = self.back.pop() {
                    return Some(e);
                }
                let Some((m, lp)) = self.nodes.next_back() else {
                    self.done = true;
                    return None;
                };
                let mut below = false;
                for r in NodeWalk::new(*m, lp) {
                    if r.entry.id > self.end {
                        break;
                    }
                    if r.entry.id < self.start {
                        below = true;
                        continue;
                    }
                    if !r.deleted {
                        self.back.push(r.entry);
                    }
                }
                if self.back.is_empty() && (below || *m < self.start) {
                    self.done = true;
                    return None;
                }
                if below || *m < self.start {
                    // Nothing before this node can be in range.
                    self.nodes = Default::default();
                }
            }
        }
        loop {
            if let Some(w) = &mut self.walk {
                for r in w.by_ref() {
                    if r.entry.id > self.end {
                        self.done = true;
                        return None;
                    }
                    if r.deleted || r.entry.id < self.start {
                        continue;
                    }
                    return Some(r.entry);
                }
            }
            let Some((m, lp)) = self.nodes.next() else {
                self.done = true;
                return None;
            };
            if *m > self.end {
                self.done = true;
                return None;
            }
            self.walk = Some(NodeWalk::new(*m, lp));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIM: NodeLimits = NodeLimits {
        max_bytes: 4096,
        max_entries: 100,
    };

    fn ids(s: &Stream, a: StreamId, b: StreamId, rev: bool) -> Vec<u64> {
        s.range(a, b, rev).map(|e| e.id.ms).collect()
    }

    #[test]
    fn add_range_delete_trim() {
        let mut s = Stream::new();
        for i in 1..=250u64 {
            let v = i.to_string();
            let pairs: Vec<&[u8]> = if i % 7 == 0 {
                vec![b"other", v.as_bytes()]
            } else {
                vec![b"f", v.as_bytes(), b"g", b"x"]
            };
            s.add(&pairs, NewId::Exact(StreamId::new(i, 0)), 0, LIM)
                .unwrap();
        }
        assert_eq!(s.len(), 250);
        assert_eq!(s.node_count(), 3);
        let all = ids(&s, StreamId::MIN, StreamId::MAX, false);
        assert_eq!(all, (1..=250).collect::<Vec<_>>());
        let back = ids(&s, StreamId::new(95, 0), StreamId::new(105, 0), true);
        assert_eq!(back, (95..=105).rev().collect::<Vec<_>>());
        let e = s.get(StreamId::new(14, 0)).unwrap();
        let f: Vec<(Vec<u8>, Vec<u8>)> =
            e.fields().map(|(a, b)| (a.to_vec(), b.to_vec())).collect();
        assert_eq!(f, vec![(b"other".to_vec(), b"14".to_vec())]);
        let e = s.get(StreamId::new(15, 0)).unwrap();
        assert_eq!(e.fields().count(), 2);
        assert_eq!(
            s.add(&[b"a", b"b"], NewId::Exact(StreamId::new(250, 0)), 0, LIM),
            Err(AddError::NotGreater)
        );
        assert!(s.delete(StreamId::new(100, 0)));
        assert!(!s.delete(StreamId::new(100, 0)));
        assert_eq!(s.len(), 249);
        assert!(s.get(StreamId::new(100, 0)).is_none());
        // Approximate trimming removes whole nodes only.
        assert_eq!(s.trim(Trim::MaxLen(200), true, 0), 0);
        assert_eq!(s.trim(Trim::MaxLen(120), true, 0), 99);
        assert_eq!(s.len(), 150);
        assert_eq!(s.trim(Trim::MaxLen(120), false, 0), 30);
        assert_eq!(ids(&s, StreamId::MIN, StreamId::MAX, false)[0], 131);
        assert_eq!(s.first_id(), StreamId::new(131, 0));
        assert_eq!(s.trim(Trim::MinId(StreamId::new(240, 0)), false, 0), 109);
        assert_eq!(
            ids(&s, StreamId::MIN, StreamId::MAX, false),
            (240..=250).collect::<Vec<_>>()
        );
        for (m, lp) in s.nodes() {
            assert!(Stream::check_node(m, lp));
        }
    }

    #[test]
    fn rax_node_counts() {
        let mut s = Stream::new();
        assert_eq!(s.radix_nodes(), 1);
        s.add(&[b"a", b"1"], NewId::Exact(StreamId::new(1, 0)), 0, LIM)
            .unwrap();
        assert_eq!(s.radix_nodes(), 2);
    }
}
