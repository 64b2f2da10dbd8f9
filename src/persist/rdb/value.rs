//! Values in RDB: what follows a key's type byte and name. Written in the
//! encodings Redis 7.0 writes (listpack for small hashes and sorted sets,
//! intset for integer sets, quicklist 2 of listpacks for lists); read in
//! those and in the older ones of RDB 6-9 (linked lists, ziplists,
//! zipmaps, quicklist 1), so a dump from an older Redis migrates.
//!
//! Must not touch the keyspace: it encodes a `ValueRef` it is lent and
//! decodes into a `types::Value`; keys, expiry and databases are `file`'s.

use super::codec::{
    le_int, load_len, load_string, lzf_compress, save_len, save_lzf, save_string_with,
};
use crate::db::ValueRef;
use crate::types::listpack::{self, Elem};
use crate::types::stream::{Stream, StreamId};
use crate::types::{pack, Hash, List, Set, Value, ZSet};

pub const TYPE_STRING: u8 = 0;
pub const TYPE_LIST: u8 = 1;
pub const TYPE_SET: u8 = 2;
pub const TYPE_ZSET: u8 = 3;
pub const TYPE_HASH: u8 = 4;
pub const TYPE_ZSET_2: u8 = 5;
pub const TYPE_MODULE: u8 = 6;
pub const TYPE_MODULE_2: u8 = 7;
pub const TYPE_HASH_ZIPMAP: u8 = 9;
pub const TYPE_LIST_ZIPLIST: u8 = 10;
pub const TYPE_SET_INTSET: u8 = 11;
pub const TYPE_ZSET_ZIPLIST: u8 = 12;
pub const TYPE_HASH_ZIPLIST: u8 = 13;
pub const TYPE_LIST_QUICKLIST: u8 = 14;
pub const TYPE_STREAM_LISTPACKS: u8 = 15;
pub const TYPE_HASH_LISTPACK: u8 = 16;
pub const TYPE_ZSET_LISTPACK: u8 = 17;
pub const TYPE_LIST_QUICKLIST_2: u8 = 18;
pub const TYPE_STREAM_LISTPACKS_2: u8 = 19;
/// Redis 7.4's hashes with field TTLs (rdb.h): the pre-GA forms (read
/// only) hold absolute deadlines and no minimum; the GA forms start with
/// the earliest deadline (8 bytes, milliseconds). METADATA is the
/// hashtable form, `len` then per field a length-encoded TTL (0: none,
/// else deadline - min + 1), the field and the value; LISTPACK_EX is one
/// listpack of field, value, deadline (0: none) triplets.
pub const TYPE_HASH_METADATA_PRE_GA: u8 = 22;
pub const TYPE_HASH_LISTPACK_EX_PRE_GA: u8 = 23;
pub const TYPE_HASH_METADATA: u8 = 24;
pub const TYPE_HASH_LISTPACK_EX: u8 = 25;

/// Whether `t` is a value type byte (as opposed to an opcode).
pub fn is_value_type(t: u8) -> bool {
    t <= 7 || (9..=19).contains(&t) || (22..=25).contains(&t)
}

/// The encoding limits a loaded value is built under (the server's config).
#[derive(Debug, Clone)]
pub struct Limits {
    pub hash: pack::Limits,
    pub zset: pack::Limits,
    /// `list-max-listpack-size`.
    pub list_fill: i64,
    /// `list-compress-depth`.
    pub list_compress_depth: usize,
    /// `set-max-intset-entries`.
    pub set_max_intset: usize,
}

impl Default for Limits {
    /// Redis's listpack thresholds for hashes and sorted sets; the list and
    /// set fields zero.
    fn default() -> Self {
        Limits {
            hash: pack::Limits::HASH,
            zset: pack::Limits::ZSET,
            list_fill: 0,
            list_compress_depth: 0,
            set_max_intset: 0,
        }
    }
}

impl Limits {
    /// Redis 7.0's default thresholds.
    pub fn redis_defaults() -> Limits {
        Limits {
            list_fill: -2,
            set_max_intset: 512,
            ..Default::default()
        }
    }
}

/// Writes the value's type byte and payload.
pub fn save(out: &mut Vec<u8>, v: ValueRef<'_>, compress: bool, list_fill: i64) {
    let s = |out: &mut Vec<u8>, b: &[u8]| save_string_with(out, b, compress);
    match v {
        ValueRef::Str(b) => {
            out.push(TYPE_STRING);
            s(out, b);
        }
        ValueRef::Obj(Value::Str(b)) => {
            out.push(TYPE_STRING);
            s(out, b);
        }
        ValueRef::Obj(Value::List(l)) => {
            out.push(TYPE_LIST_QUICKLIST_2);
            let nodes = quicklist_nodes(l, list_fill);
            save_len(out, nodes.len());
            let (depth, count) = (l.compress_depth(), nodes.len());
            for (i, (plain, n)) in nodes.into_iter().enumerate() {
                // QUICKLIST_NODE_CONTAINER_PLAIN or _PACKED.
                save_len(out, if plain { 1 } else { 2 });
                // A node Redis keeps compressed is written as its LZF
                // blob, whatever `rdbcompression` says.
                let inner = depth > 0 && i >= depth && i + depth < count;
                match inner.then(|| compressed_node(&n)).flatten() {
                    Some(c) if !compress => save_lzf(out, &c, n.len()),
                    _ => s(out, &n),
                }
            }
        }
        ValueRef::Obj(Value::Set(set)) if set.is_intset() => {
            out.push(TYPE_SET_INTSET);
            s(out, &intset_bytes(set));
        }
        ValueRef::Obj(Value::Set(set)) => {
            out.push(TYPE_SET);
            save_len(out, set.len());
            for m in set.iter() {
                s(out, &m.to_cow());
            }
        }
        // Only a hash that holds a field TTL takes a 7.4 type: without one
        // the bytes are 7.0's.
        ValueRef::Obj(Value::Hash(h)) if h.ttl_count() > 0 => save_hash_ttls(out, h, compress),
        ValueRef::Obj(Value::Hash(h)) if h.is_listpack() => {
            out.push(TYPE_HASH_LISTPACK);
            let mut w = listpack::Writer::new();
            for (f, v) in h.iter() {
                w.push(f);
                w.push(v);
            }
            s(out, &w.finish());
        }
        ValueRef::Obj(Value::Hash(h)) => {
            out.push(TYPE_HASH);
            save_len(out, h.len());
            for (f, v) in h.iter() {
                s(out, f);
                s(out, v);
            }
        }
        ValueRef::Obj(Value::ZSet(z)) if z.is_compact() => {
            out.push(TYPE_ZSET_LISTPACK);
            let mut w = listpack::Writer::new();
            for (m, score) in z.iter() {
                w.push(m);
                w.push(crate::util::fmt_double(score).as_bytes());
            }
            s(out, &w.finish());
        }
        ValueRef::Obj(Value::ZSet(z)) => {
            out.push(TYPE_ZSET_2);
            save_len(out, z.len());
            // Highest score first, as Redis writes it (a load then
            // inserts each member at the head).
            let members: Vec<_> = z.iter().collect();
            for (m, score) in members.into_iter().rev() {
                s(out, m);
                out.extend_from_slice(&score.to_le_bytes());
            }
        }
        ValueRef::Obj(Value::Stream(st)) => {
            out.push(TYPE_STREAM_LISTPACKS_2);
            save_stream(out, st, compress);
        }
    }
}

/// A stream as Redis 7.0 writes it: its nodes as they are (key, listpack),
/// the length, last, first and largest deleted IDs, the entries added,
/// then each group with its pending list and consumers.
/// A hash with field TTLs, as Redis 7.4's RDB_TYPE_HASH_LISTPACK_EX or
/// RDB_TYPE_HASH_METADATA.
fn save_hash_ttls(out: &mut Vec<u8>, h: &Hash, compress: bool) {
    let min = h.min_field_ttl().unwrap_or(0);
    if h.is_listpack() {
        out.push(TYPE_HASH_LISTPACK_EX);
        out.extend_from_slice(&min.to_le_bytes());
        let mut w = listpack::Writer::new();
        for (f, v) in h.iter() {
            w.push(f);
            w.push(v);
            w.push_int(h.field_ttl(f).unwrap_or(0));
        }
        save_string_with(out, &w.finish(), compress);
        return;
    }
    out.push(TYPE_HASH_METADATA);
    out.extend_from_slice(&min.to_le_bytes());
    save_len(out, h.len());
    for (f, v) in h.iter() {
        save_len(out, h.field_ttl(f).map_or(0, |w| (w - min + 1) as usize));
        save_string_with(out, f, compress);
        save_string_with(out, v, compress);
    }
}

/// Reads a Redis 7.4 hash with field TTLs (type 22 to 25). Fields whose
/// deadline has passed are left out, as Redis's load.
fn load_hash_ttls(p: &[u8], pos: &mut usize, t: u8, lim: &Limits) -> Result<Value, Error> {
    let min = if matches!(t, TYPE_HASH_METADATA | TYPE_HASH_LISTPACK_EX) {
        let b = p
            .get(*pos..*pos + 8)
            .ok_or_else(|| corrupt("hash min expire"))?;
        *pos += 8;
        i64::from_le_bytes(b.try_into().unwrap_or_default())
    } else {
        0
    };
    let now = crate::util::now_ms();
    let mut h = Hash::new();
    h.enable_field_ttls();
    let mut add = |f: &[u8], v: &[u8], when: i64| -> Result<(), Error> {
        if !(0..=(1i64 << 48) - 1).contains(&when) {
            return Err(corrupt("hash field expire time"));
        }
        if when != 0 && when < now {
            return Ok(());
        }
        if !h.insert(f, v, &lim.hash) {
            return Err("duplicate hash fields".into());
        }
        if when != 0 {
            h.load_field_ttl(f, when);
        }
        Ok(())
    };
    if matches!(t, TYPE_HASH_LISTPACK_EX | TYPE_HASH_LISTPACK_EX_PRE_GA) {
        let blob = load_string(p, pos).ok_or_else(|| corrupt("string"))?;
        let elems = listpack::decode(&blob).ok_or_else(|| corrupt("listpack"))?;
        if !elems.len().is_multiple_of(3) || elems.is_empty() {
            return Err(corrupt("hash listpackex"));
        }
        for e in elems.chunks(3) {
            let when = crate::util::parse_i64(&e[2].to_vec())
                .ok_or_else(|| corrupt("hash field expire time"))?;
            add(&e[0].to_vec(), &e[1].to_vec(), when)?;
        }
    } else {
        let n = match load_len(p, pos) {
            Some((false, n)) => n,
            _ => return Err(corrupt("length")),
        };
        for _ in 0..n {
            let ttl = match load_len(p, pos) {
                Some((false, n)) => i64::try_from(n).map_err(|_| corrupt("hash field ttl"))?,
                _ => return Err(corrupt("length")),
            };
            let when = match (t, ttl) {
                (_, 0) => 0,
                (TYPE_HASH_METADATA, _) => ttl
                    .checked_add(min)
                    .and_then(|w| w.checked_sub(1))
                    .ok_or_else(|| corrupt("hash field ttl"))?,
                _ => ttl,
            };
            let f = load_string(p, pos).ok_or_else(|| corrupt("string"))?;
            let v = load_string(p, pos).ok_or_else(|| corrupt("string"))?;
            add(&f, &v, when)?;
        }
    }
    Ok(Value::Hash(h))
}

fn save_stream(out: &mut Vec<u8>, st: &Stream, compress: bool) {
    let s = |out: &mut Vec<u8>, b: &[u8]| save_string_with(out, b, compress);
    let id = |out: &mut Vec<u8>, i: StreamId| {
        save_len(out, i.ms as usize);
        save_len(out, i.seq as usize);
    };
    save_len(out, st.node_count());
    for (master, lp) in st.nodes() {
        s(out, &master.to_key());
        s(out, lp);
    }
    save_len(out, st.len() as usize);
    id(out, st.last_id());
    id(out, st.first_id());
    id(out, st.max_deleted());
    save_len(out, st.entries_added() as usize);
    save_len(out, st.group_count());
    for (name, g) in st.groups() {
        s(out, name);
        id(out, g.last_id);
        save_len(out, g.entries_read as u64 as usize);
        save_len(out, g.pending_len());
        for (pid, n) in g.pending_range(StreamId::MIN, StreamId::MAX) {
            out.extend_from_slice(&pid.to_key());
            out.extend_from_slice(&n.delivery_time.to_le_bytes());
            save_len(out, n.delivery_count as usize);
        }
        save_len(out, g.consumer_count());
        for (cname, c) in g.consumers() {
            s(out, cname);
            out.extend_from_slice(&c.seen_time.to_le_bytes());
            save_len(out, c.pending());
            for pid in c.pending_ids() {
                out.extend_from_slice(&pid.to_key());
            }
        }
    }
}

/// Reads a stream payload (`t`: the 7.0 layout, or 5.0's without the
/// first and deleted IDs, the entries added and the groups' read counts).
fn load_stream(p: &[u8], pos: &mut usize, t: u8) -> Result<Stream, Error> {
    let len = |pos: &mut usize| -> Result<u64, Error> {
        match load_len(p, pos) {
            Some((false, n)) => Ok(n),
            _ => Err(corrupt("stream length")),
        }
    };
    let string = |pos: &mut usize| -> Result<Vec<u8>, Error> {
        load_string(p, pos).ok_or_else(|| corrupt("stream string"))
    };
    let id =
        |pos: &mut usize| -> Result<StreamId, Error> { Ok(StreamId::new(len(pos)?, len(pos)?)) };
    let raw_id = |pos: &mut usize| -> Result<StreamId, Error> {
        let b = p
            .get(*pos..*pos + 16)
            .ok_or_else(|| corrupt("stream PEL ID"))?;
        *pos += 16;
        StreamId::from_key(b).ok_or_else(|| corrupt("stream PEL ID"))
    };
    let ms = |pos: &mut usize| -> Result<i64, Error> {
        let b = p
            .get(*pos..*pos + 8)
            .ok_or_else(|| corrupt("stream time"))?;
        *pos += 8;
        Ok(i64::from_le_bytes(b.try_into().unwrap_or_default()))
    };
    let v2 = t == TYPE_STREAM_LISTPACKS_2;
    let mut st = Stream::new();
    let nodes = len(pos)?;
    let mut prev: Option<StreamId> = None;
    for _ in 0..nodes {
        let key = string(pos)?;
        let master = StreamId::from_key(&key)
            .ok_or("Stream node key entry is not the size of a stream ID")?;
        let lp = string(pos)?;
        if !Stream::check_node(master, &lp) {
            return Err("Stream listpack integrity check failed".into());
        }
        if prev.is_some_and(|p| p >= master) {
            return Err("Listpack re-added with existing key".into());
        }
        prev = Some(master);
        st.load_node(master, lp);
    }
    let length = len(pos)?;
    if length != st.len() {
        return Err("Stream length inconsistent with its entries".into());
    }
    let last = id(pos)?;
    let (first, max_deleted, added) = if v2 {
        (id(pos)?, id(pos)?, len(pos)?)
    } else {
        let first = st.first_entry_id().unwrap_or_default();
        (first, StreamId::MIN, length)
    };
    st.set_meta(last, added, max_deleted);
    st.set_first_id(first);
    if st
        .range(StreamId::MIN, StreamId::MAX, true)
        .next()
        .is_some_and(|e| e.id > last)
    {
        return Err("Stream last ID below its entries".into());
    }
    let groups = len(pos)?;
    for _ in 0..groups {
        let name = string(pos)?;
        let last_id = id(pos)?;
        let read = if v2 {
            len(pos)? as i64
        } else {
            st.entries_read_of(last_id)
        };
        if !st.create_group(&name, last_id, read) {
            return Err("Duplicated consumer group name".into());
        }
        let now = crate::util::cmd_time_ms();
        let g = st.group_mut(&name).ok_or_else(|| corrupt("stream group"))?;
        let pel = len(pos)?;
        for _ in 0..pel {
            let pid = raw_id(pos)?;
            let time = ms(pos)?;
            let count = len(pos)?;
            if g.pending(&pid).is_some() {
                return Err("Duplicated global PEL entry loading stream consumer group".into());
            }
            g.load_pending(pid, time, count);
        }
        let consumers = len(pos)?;
        for _ in 0..consumers {
            let cname = string(pos)?;
            if !g.create_consumer(&cname, now) {
                return Err("Duplicate stream consumer detected.".into());
            }
            let seen = ms(pos)?;
            g.touch_consumer(&cname, seen);
            let n = len(pos)?;
            for _ in 0..n {
                let pid = raw_id(pos)?;
                if !g.load_owner(pid, &cname) {
                    return Err("Consumer PEL entry not found in group global PEL".into());
                }
            }
        }
        if !g.all_owned() {
            return Err("Stream PEL entry without a consumer".into());
        }
    }
    Ok(st)
}

/// A quicklist node as __quicklistCompressNode compresses it: at least 48
/// bytes, kept only when the LZF blob is more than 8 bytes smaller.
fn compressed_node(n: &[u8]) -> Option<Vec<u8>> {
    if n.len() < 48 {
        return None;
    }
    lzf_compress(n, n.len()).filter(|c| c.len() + 8 < n.len())
}

/// A list cut into nodes: each plain node as it is (true, its element),
/// the elements between them into listpacks (false) as
/// `list-max-listpack-size` cuts them: a negative fill is a byte limit per
/// node (4 KB ... 64 KB), a positive one a count (also capped at 8 KB,
/// Redis's safety limit).
fn quicklist_nodes(l: &List, fill: i64) -> Vec<(bool, Vec<u8>)> {
    const SIZES: [usize; 5] = [4096, 8192, 16384, 32768, 65536];
    let (max_bytes, max_count) = if fill < 0 {
        (SIZES[((-fill - 1) as usize).min(4)], usize::MAX)
    } else {
        (8192, (fill as usize).max(1))
    };
    let mut nodes = Vec::new();
    let mut w = listpack::Writer::new();
    let mut elems = l.iter();
    for (count, plain) in l.node_shapes() {
        if plain {
            if !w.is_empty() {
                nodes.push((
                    false,
                    std::mem::replace(&mut w, listpack::Writer::new()).finish(),
                ));
            }
            nodes.push((true, elems.next().unwrap_or_default().into_owned()));
            continue;
        }
        for e in elems.by_ref().take(count) {
            if !w.is_empty() && (w.count() >= max_count || w.len() + e.len() + 11 > max_bytes) {
                nodes.push((
                    false,
                    std::mem::replace(&mut w, listpack::Writer::new()).finish(),
                ));
            }
            w.push(&e);
        }
    }
    if !w.is_empty() {
        nodes.push((false, w.finish()));
    }
    nodes
}

/// An integer set in Redis's intset layout: the width (2, 4 or 8 bytes),
/// the count, the sorted values, all little endian.
fn intset_bytes(set: &Set) -> Vec<u8> {
    let mut vals: Vec<i64> = set
        .iter()
        .filter_map(|m| crate::util::parse_i64(&m.to_cow()))
        .collect();
    vals.sort_unstable();
    let width = if vals.iter().all(|v| i16::try_from(*v).is_ok()) {
        2
    } else if vals.iter().all(|v| i32::try_from(*v).is_ok()) {
        4
    } else {
        8
    };
    let mut out = Vec::with_capacity(8 + width * vals.len());
    out.extend_from_slice(&(width as u32).to_le_bytes());
    out.extend_from_slice(&(vals.len() as u32).to_le_bytes());
    for v in vals {
        out.extend_from_slice(&v.to_le_bytes()[..width]);
    }
    out
}

/// A read failure: what was wrong (the caller adds where).
pub type Error = String;

fn corrupt(what: &str) -> Error {
    format!("corrupt {what}")
}

/// Reads the payload of a value of type `t` at `*pos`.
pub fn load(p: &[u8], pos: &mut usize, t: u8, lim: &Limits) -> Result<Value, Error> {
    let len = |pos: &mut usize| -> Result<usize, Error> {
        match load_len(p, pos) {
            Some((false, n)) => usize::try_from(n).map_err(|_| corrupt("length")),
            _ => Err(corrupt("length")),
        }
    };
    let string = |pos: &mut usize| -> Result<Vec<u8>, Error> {
        load_string(p, pos).ok_or_else(|| corrupt("string"))
    };
    // A count read from the file bounds nothing: never preallocate by it.
    match t {
        TYPE_STRING => Ok(Value::Str(string(pos)?)),
        TYPE_LIST => {
            let n = len(pos)?;
            let mut l = List::new();
            for _ in 0..n {
                l.push_back(&string(pos)?, lim.list_fill);
            }
            l.set_compress_depth(lim.list_compress_depth);
            Ok(Value::List(l))
        }
        TYPE_SET => {
            let n = len(pos)?;
            let mut s = Set::new();
            for _ in 0..n {
                if !s.insert(&string(pos)?, lim.set_max_intset) {
                    return Err("duplicate set members".into());
                }
            }
            Ok(Value::Set(s))
        }
        TYPE_ZSET | TYPE_ZSET_2 => {
            let n = len(pos)?;
            let mut z = ZSet::new();
            for _ in 0..n {
                let m = string(pos)?;
                let score = if t == TYPE_ZSET_2 {
                    let b = p.get(*pos..*pos + 8).ok_or_else(|| corrupt("score"))?;
                    *pos += 8;
                    f64::from_le_bytes(b.try_into().unwrap_or_default())
                } else {
                    old_score(p, pos)?
                };
                if score.is_nan() {
                    return Err("zset score is NaN".into());
                }
                if z.insert(&m, score, &lim.zset).is_some() {
                    return Err("duplicate zset members".into());
                }
            }
            Ok(Value::ZSet(z))
        }
        TYPE_HASH => {
            let n = len(pos)?;
            let mut h = Hash::new();
            for _ in 0..n {
                let f = string(pos)?;
                let v = string(pos)?;
                if !h.insert(&f, &v, &lim.hash) {
                    return Err("duplicate hash fields".into());
                }
            }
            Ok(Value::Hash(h))
        }
        TYPE_HASH_METADATA_PRE_GA
        | TYPE_HASH_LISTPACK_EX_PRE_GA
        | TYPE_HASH_METADATA
        | TYPE_HASH_LISTPACK_EX => load_hash_ttls(p, pos, t, lim),
        TYPE_MODULE | TYPE_MODULE_2 => Err("module values are not supported".into()),
        TYPE_STREAM_LISTPACKS | TYPE_STREAM_LISTPACKS_2 => {
            Ok(Value::Stream(Box::new(load_stream(p, pos, t)?)))
        }
        TYPE_SET_INTSET => {
            let blob = string(pos)?;
            let mut s = Set::new();
            for v in intset_values(&blob).ok_or_else(|| corrupt("intset"))? {
                if !s.insert(itoa::Buffer::new().format(v).as_bytes(), lim.set_max_intset) {
                    return Err(corrupt("intset"));
                }
            }
            Ok(Value::Set(s))
        }
        TYPE_LIST_QUICKLIST | TYPE_LIST_QUICKLIST_2 => {
            let n = len(pos)?;
            let mut l = List::new();
            for _ in 0..n {
                let container = if t == TYPE_LIST_QUICKLIST_2 {
                    len(pos)?
                } else {
                    2
                };
                let blob = string(pos)?;
                match (t, container) {
                    (TYPE_LIST_QUICKLIST_2, 1) => l.push_back_plain(&blob),
                    (TYPE_LIST_QUICKLIST, _) => {
                        for e in ziplist(&blob).ok_or_else(|| corrupt("ziplist"))? {
                            l.push_back(&e, lim.list_fill);
                        }
                    }
                    (_, 2) => {
                        for e in listpack::decode(&blob).ok_or_else(|| corrupt("listpack"))? {
                            l.push_back(&e.to_vec(), lim.list_fill);
                        }
                    }
                    _ => return Err(corrupt("quicklist node container")),
                }
            }
            l.set_compress_depth(lim.list_compress_depth);
            Ok(Value::List(l))
        }
        TYPE_LIST_ZIPLIST => {
            let blob = string(pos)?;
            let mut l = List::new();
            for e in ziplist(&blob).ok_or_else(|| corrupt("ziplist"))? {
                l.push_back(&e, lim.list_fill);
            }
            l.set_compress_depth(lim.list_compress_depth);
            Ok(Value::List(l))
        }
        TYPE_HASH_ZIPMAP | TYPE_HASH_ZIPLIST | TYPE_HASH_LISTPACK => {
            let blob = string(pos)?;
            let elems: Vec<Vec<u8>> = match t {
                TYPE_HASH_ZIPMAP => zipmap(&blob).ok_or_else(|| corrupt("zipmap"))?,
                TYPE_HASH_ZIPLIST => ziplist(&blob).ok_or_else(|| corrupt("ziplist"))?,
                _ => listpack::decode(&blob)
                    .ok_or_else(|| corrupt("listpack"))?
                    .into_iter()
                    .map(Elem::to_vec)
                    .collect(),
            };
            if !elems.len().is_multiple_of(2) || elems.is_empty() {
                return Err(corrupt("hash"));
            }
            let mut h = Hash::new();
            for fv in elems.chunks(2) {
                if !h.insert(&fv[0], &fv[1], &lim.hash) {
                    return Err("duplicate hash fields".into());
                }
            }
            Ok(Value::Hash(h))
        }
        TYPE_ZSET_ZIPLIST | TYPE_ZSET_LISTPACK => {
            let blob = string(pos)?;
            let elems: Vec<Vec<u8>> = if t == TYPE_ZSET_ZIPLIST {
                ziplist(&blob).ok_or_else(|| corrupt("ziplist"))?
            } else {
                listpack::decode(&blob)
                    .ok_or_else(|| corrupt("listpack"))?
                    .into_iter()
                    .map(Elem::to_vec)
                    .collect()
            };
            if !elems.len().is_multiple_of(2) || elems.is_empty() {
                return Err(corrupt("sorted set"));
            }
            let mut z = ZSet::new();
            for ms in elems.chunks(2) {
                let score = crate::util::parse_f64(&ms[1]).ok_or_else(|| corrupt("zset score"))?;
                if z.insert(&ms[0], score, &lim.zset).is_some() {
                    return Err("duplicate zset members".into());
                }
            }
            Ok(Value::ZSet(z))
        }
        other => Err(format!("unknown value type {other}")),
    }
}

/// A score of the old ZSET type: a length byte (253 NaN, 254 +inf, 255
/// -inf) then that many ASCII characters.
fn old_score(p: &[u8], pos: &mut usize) -> Result<f64, Error> {
    let n = *p.get(*pos).ok_or_else(|| corrupt("score"))?;
    *pos += 1;
    match n {
        253 => Ok(f64::NAN),
        254 => Ok(f64::INFINITY),
        255 => Ok(f64::NEG_INFINITY),
        n => {
            let b = p
                .get(*pos..*pos + n as usize)
                .ok_or_else(|| corrupt("score"))?;
            *pos += n as usize;
            std::str::from_utf8(b)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| corrupt("score"))
        }
    }
}

/// The values of an intset blob, checked (width, length, strictly sorted).
fn intset_values(b: &[u8]) -> Option<Vec<i64>> {
    let width = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
    let n = u32::from_le_bytes(b.get(4..8)?.try_into().ok()?) as usize;
    if ![2, 4, 8].contains(&width) || b.len() != 8 + width.checked_mul(n)? {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    for c in b[8..].chunks(width) {
        let x = le_int(c);
        if out.last().is_some_and(|&l| l >= x) {
            return None;
        }
        out.push(x);
    }
    Some(out)
}

/// The elements of a ziplist (RDB 6-9's compact encoding), checked.
fn ziplist(b: &[u8]) -> Option<Vec<Vec<u8>>> {
    if b.len() < 11 || u32::from_le_bytes(b[..4].try_into().ok()?) as usize != b.len() {
        return None;
    }
    let mut out = Vec::new();
    let mut p = 10;
    loop {
        let first = *b.get(p)?;
        if first == 0xff {
            break;
        }
        // prevlen: 1 byte, or 0xFE and 4 bytes.
        p += if first == 0xfe { 5 } else { 1 };
        let e = *b.get(p)?;
        let (hdr, elem): (usize, Vec<u8>) = match e >> 6 {
            0 => {
                let n = (e & 0x3f) as usize;
                (1 + n, b.get(p + 1..p + 1 + n)?.to_vec())
            }
            1 => {
                let n = (((e & 0x3f) as usize) << 8) | *b.get(p + 1)? as usize;
                (2 + n, b.get(p + 2..p + 2 + n)?.to_vec())
            }
            2 => {
                let n = u32::from_be_bytes(b.get(p + 1..p + 5)?.try_into().ok()?) as usize;
                (5 + n, b.get(p + 5..(p + 5).checked_add(n)?)?.to_vec())
            }
            _ => {
                let int = |w: usize| -> Option<i64> { Some(le_int(b.get(p + 1..p + 1 + w)?)) };
                let (w, v) = match e {
                    0xc0 => (2, int(2)?),
                    0xd0 => (4, int(4)?),
                    0xe0 => (8, int(8)?),
                    0xf0 => (3, int(3)?),
                    0xfe => (1, int(1)?),
                    0xf1..=0xfd => (0, (e & 0x0f) as i64 - 1),
                    _ => return None,
                };
                (1 + w, itoa::Buffer::new().format(v).as_bytes().to_vec())
            }
        };
        p += hdr;
        out.push(elem);
    }
    (p + 1 == b.len()).then_some(out)
}

/// The fields and values of a zipmap (the hash encoding of RDB 1-3).
fn zipmap(b: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut p = 1;
    let read_len = |p: &mut usize| -> Option<Option<usize>> {
        let f = *b.get(*p)?;
        *p += 1;
        match f {
            0xff => Some(None),
            254 => {
                let n = u32::from_le_bytes(b.get(*p..*p + 4)?.try_into().ok()?) as usize;
                *p += 4;
                Some(Some(n))
            }
            253 => None,
            n => Some(Some(n as usize)),
        }
    };
    while let Some(klen) = read_len(&mut p)? {
        out.push(b.get(p..p.checked_add(klen)?)?.to_vec());
        p += klen;
        let vlen = read_len(&mut p)??;
        let free = *b.get(p)? as usize;
        p += 1;
        out.push(b.get(p..p.checked_add(vlen)?)?.to_vec());
        p += vlen + free;
    }
    (p == b.len()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim() -> Limits {
        Limits {
            list_fill: -2,
            set_max_intset: 512,
            ..Default::default()
        }
    }

    fn round_trip(v: &Value) -> Value {
        let mut out = Vec::new();
        save(&mut out, ValueRef::Obj(v), true, -2);
        let mut pos = 1;
        let got = load(&out, &mut pos, out[0], &lim()).unwrap();
        assert_eq!(pos, out.len());
        got
    }

    #[test]
    fn hash_field_ttls_round_trip_and_pre_ga_forms_read() {
        let far = crate::util::now_ms() + 1_000_000;
        let mut small = Hash::new();
        for f in ["a", "b", "c"] {
            small.insert(f.as_bytes(), b"v", &pack::Limits::HASH);
        }
        small.set_field_ttl(b"b", far);
        small.set_field_ttl(b"c", far + 5);
        let mut big = small.clone();
        big.insert(&[b'x'; 100], b"v", &pack::Limits::HASH);
        for (h, t) in [(&small, TYPE_HASH_LISTPACK_EX), (&big, TYPE_HASH_METADATA)] {
            let mut out = Vec::new();
            save(&mut out, ValueRef::Obj(&Value::Hash(h.clone())), true, -2);
            assert_eq!(out[0], t);
            let Value::Hash(back) = round_trip(&Value::Hash(h.clone())) else {
                panic!()
            };
            assert_eq!(back.len(), h.len());
            assert_eq!(back.field_ttl(b"b"), Some(far));
            assert_eq!(back.field_ttl(b"c"), Some(far + 5));
            assert_eq!(back.field_ttl(b"a"), None);
            // Cut short or with any byte changed, an error, never a panic.
            for n in 1..out.len() {
                let _ = load(&out[..n], &mut 1, t, &lim());
                let mut bad = out.clone();
                bad[n] ^= 0xff;
                let _ = load(&bad, &mut 1, t, &lim());
            }
        }
        // Without a TTL left, 7.0's type again.
        let mut plain = small.clone();
        plain.persist_field(b"b");
        plain.persist_field(b"c");
        let mut out = Vec::new();
        save(&mut out, ValueRef::Obj(&Value::Hash(plain)), true, -2);
        assert_eq!(out[0], TYPE_HASH_LISTPACK);

        // 7.4's pre-GA forms: absolute deadlines, no minimum; a field
        // already due is left out.
        let mut p22 = Vec::new();
        save_len(&mut p22, 3);
        for (ttl, f) in [(0, "a"), (far, "b"), (1000, "gone")] {
            save_len(&mut p22, ttl as usize);
            save_string_with(&mut p22, f.as_bytes(), false);
            save_string_with(&mut p22, b"v", false);
        }
        let mut w = listpack::Writer::new();
        for (f, ttl) in [("a", 0), ("b", far), ("gone", 1000)] {
            w.push(f.as_bytes());
            w.push(b"v");
            w.push_int(ttl);
        }
        let mut p23 = Vec::new();
        save_string_with(&mut p23, &w.finish(), false);
        for (t, p) in [
            (TYPE_HASH_METADATA_PRE_GA, p22),
            (TYPE_HASH_LISTPACK_EX_PRE_GA, p23),
        ] {
            assert!(is_value_type(t));
            let mut pos = 0;
            let Ok(Value::Hash(h)) = load(&p, &mut pos, t, &lim()) else {
                panic!("type {t}")
            };
            assert_eq!(pos, p.len());
            assert_eq!(h.len(), 2, "type {t}");
            assert_eq!(h.field_ttl(b"b"), Some(far));
            assert!(!h.contains(b"gone"));
        }
    }

    #[test]
    fn every_type_round_trips() {
        let mut l = List::new();
        for i in 0..3000 {
            l.push_back(format!("e{i}").as_bytes(), -2);
        }
        let Value::List(back) = round_trip(&Value::List(l.clone())) else {
            panic!()
        };
        assert!(back.iter().eq(l.iter()));

        for members in [vec!["1", "-5", "70000", "9000000000"], vec!["a", "1", "b"]] {
            let s = Set::from_members(members.iter().map(|m| m.as_bytes()), 512);
            let Value::Set(back) = round_trip(&Value::Set(s.clone())) else {
                panic!()
            };
            assert_eq!(back.len(), s.len());
            assert!(members.iter().all(|m| back.contains(m.as_bytes())));
        }

        let mut h = Hash::new();
        let big = pack::Limits {
            max_entries: 1,
            ..pack::Limits::HASH
        };
        for (hl, n) in [(pack::Limits::HASH, 10), (big, 100)] {
            for i in 0..n {
                h.insert(format!("f{i}").as_bytes(), format!("{i}").as_bytes(), &hl);
            }
            let Value::Hash(back) = round_trip(&Value::Hash(h.clone())) else {
                panic!()
            };
            assert!(h.iter().all(|(f, v)| back.get(f) == Some(v)));
        }

        let mut z = ZSet::new();
        for (i, s) in [0.1, 1.0, -2.5, f64::INFINITY, 1e300]
            .into_iter()
            .enumerate()
        {
            z.insert(format!("m{i}").as_bytes(), s, &pack::Limits::ZSET);
        }
        let Value::ZSet(back) = round_trip(&Value::ZSet(z.clone())) else {
            panic!()
        };
        assert!(back.iter().eq(z.iter()));
    }

    #[test]
    fn old_encodings_read() {
        // A ziplist of "a", 7, -300, as Redis 6 writes it.
        let mut zl = vec![0u8; 10];
        for e in [
            &[0x00, 0x01, b'a'][..],
            &[0x03, 0xf8],
            &[0x02, 0xc0, 0xd4, 0xfe],
        ] {
            zl.extend_from_slice(e);
        }
        zl.push(0xff);
        let n = zl.len() as u32;
        zl[..4].copy_from_slice(&n.to_le_bytes());
        assert_eq!(
            ziplist(&zl).unwrap(),
            vec![b"a".to_vec(), b"7".to_vec(), b"-300".to_vec()]
        );
        // A zipmap {"f": "v"}.
        let zm = [1, 1, b'f', 1, 0, b'v', 0xff];
        assert_eq!(zipmap(&zm).unwrap(), vec![b"f".to_vec(), b"v".to_vec()]);
        assert!(intset_values(&[2, 0, 0, 0, 2, 0, 0, 0, 5, 0, 3, 0]).is_none());
    }
}
