//! The data structures behind Redis's value types, with no knowledge of
//! commands, connections or the keyspace: each type has a compact encoding
//! for small values and a large one, as Redis's listpack/intset against
//! quicklist/hashtable/skiplist, and reports which it uses by Redis's name.
//!
//! [`Value`] is what the keyspace stores for everything but small strings
//! (which live inline in their key's entry, see `db::entry`); [`Kind`] lets
//! the keyspace hand out typed access (`Db::read::<Hash>`), so the WRONGTYPE
//! decision is made in one place.
//!
//! Must not touch commands, connections, the keyspace or the config:
//! limits come in as arguments, and the only crate item used beyond
//! `types` is `util::parse_i64`.

pub mod geohash;
pub mod hash;
pub mod hash_ttl;
pub mod hll;
pub mod list;
pub mod listpack;
pub mod lzf;
pub mod pack;
pub mod set;
pub mod stream;
pub mod table;
pub mod zset;

pub use hash::Hash;
pub use list::List;
pub use set::Set;
pub use stream::Stream;
pub use zset::ZSet;

/// A value kept out of line in the keyspace's object slab.
#[derive(Debug, Clone)]
pub enum Value {
    /// A string that is large or was grown in place (APPEND, SETRANGE):
    /// Redis's "raw" encoding.
    Str(Vec<u8>),
    List(List),
    Hash(Hash),
    Set(Set),
    ZSet(ZSet),
    /// Boxed: a stream's header is larger than the other types'.
    Stream(Box<Stream>),
}

impl Value {
    /// How many allocations freeing it takes, as Redis's
    /// lazyfreeGetFreeEffort counts them: a list's nodes, the members of a
    /// hashtable set or hash and of a skiplist zset, a stream's radix-tree
    /// nodes plus its groups times (1 + the first group's pending entries);
    /// 1 for everything else. Above `lazyfree::THRESHOLD` a lazy delete
    /// frees it in the background.
    pub fn free_effort(&self) -> usize {
        match self {
            Value::List(l) => l.node_count(),
            Value::Set(s) if s.encoding() == "hashtable" => s.len(),
            Value::ZSet(z) if z.encoding() == "skiplist" => z.len(),
            Value::Hash(h) if h.encoding() == "hashtable" => h.len(),
            Value::Stream(s) => {
                let groups = s.group_count();
                let first_pel = s.groups().next().map_or(0, |(_, g)| g.pending_len());
                s.radix_nodes() + groups * (1 + first_pel)
            }
            _ => 1,
        }
    }

    /// TYPE's answer.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::List(_) => List::NAME,
            Value::Hash(_) => Hash::NAME,
            Value::Set(_) => Set::NAME,
            Value::ZSet(_) => ZSet::NAME,
            Value::Stream(_) => Stream::NAME,
        }
    }

    /// OBJECT ENCODING's answer.
    pub fn encoding(&self) -> &'static str {
        match self {
            Value::Str(_) => "raw",
            Value::List(l) => l.encoding(),
            Value::Hash(h) => h.encoding(),
            Value::Set(s) => s.encoding(),
            Value::ZSet(z) => z.encoding(),
            Value::Stream(s) => s.encoding(),
        }
    }

    /// A collection with no members: such a value never lives at a key
    /// (a loader drops it, RESTORE refuses it).
    pub fn is_empty_collection(&self) -> bool {
        match self {
            Value::Str(_) => false,
            Value::List(l) => l.is_empty(),
            Value::Hash(h) => h.is_empty(),
            Value::Set(s) => s.is_empty(),
            Value::ZSet(z) => z.is_empty(),
            Value::Stream(_) => false,
        }
    }

    /// Approximate heap bytes (MEMORY USAGE).
    pub fn mem_usage(&self) -> usize {
        std::mem::size_of::<Value>()
            + match self {
                Value::Str(v) => v.capacity(),
                Value::List(l) => l.mem_usage(),
                Value::Hash(h) => h.mem_usage(),
                Value::Set(s) => s.mem_usage(),
                Value::ZSet(z) => z.mem_usage(),
                Value::Stream(s) => s.mem_usage(),
            }
    }
}

/// A collection type that can live in a [`Value`]: how to find it there,
/// and whether it is empty (an emptied collection is deleted with its key).
pub trait Kind: Sized {
    /// TYPE's name ("list", "hash", "set", "zset").
    const NAME: &'static str;
    fn of(v: &Value) -> Option<&Self>;
    fn of_mut(v: &mut Value) -> Option<&mut Self>;
    fn into_value(self) -> Value;
    fn is_empty(&self) -> bool;
}

/// `count` distinct items of `items` (which yields `n`), in their order:
/// selection sampling, each kept with probability need/left (Knuth's
/// algorithm S). For the compact encodings' random picks.
pub fn sample_in_order<T>(
    items: impl Iterator<Item = T>,
    n: usize,
    count: usize,
    rng: &mut impl FnMut() -> usize,
) -> Vec<T> {
    let mut out = Vec::with_capacity(count.min(n));
    let mut need = count;
    for (i, item) in items.enumerate() {
        if need == 0 || i >= n {
            break;
        }
        if rng() % (n - i) < need {
            out.push(item);
            need -= 1;
        }
    }
    out
}

/// Implements `Kind` for a collection stored as `Value::$variant`.
macro_rules! kind {
    ($ty:ty, $variant:ident, $name:literal) => {
        impl Kind for $ty {
            const NAME: &'static str = $name;
            fn of(v: &Value) -> Option<&Self> {
                match v {
                    Value::$variant(x) => Some(x),
                    _ => None,
                }
            }
            fn of_mut(v: &mut Value) -> Option<&mut Self> {
                match v {
                    Value::$variant(x) => Some(x),
                    _ => None,
                }
            }
            fn into_value(self) -> Value {
                Value::$variant(self)
            }
            fn is_empty(&self) -> bool {
                <$ty>::is_empty(self)
            }
        }
    };
}

kind!(List, List, "list");
kind!(Hash, Hash, "hash");
kind!(Set, Set, "set");
kind!(ZSet, ZSet, "zset");

impl Kind for Stream {
    const NAME: &'static str = "stream";
    fn of(v: &Value) -> Option<&Self> {
        match v {
            Value::Stream(x) => Some(x),
            _ => None,
        }
    }
    fn of_mut(v: &mut Value) -> Option<&mut Self> {
        match v {
            Value::Stream(x) => Some(x),
            _ => None,
        }
    }
    fn into_value(self) -> Value {
        Value::Stream(Box::new(self))
    }
    /// An emptied stream stays at its key.
    fn is_empty(&self) -> bool {
        false
    }
}

/// A small deterministic generator for the structures' tests (an LCG).
#[cfg(test)]
pub(crate) fn test_rng(seed: u64) -> impl FnMut() -> usize {
    let mut s = seed;
    move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 33) as usize
    }
}
