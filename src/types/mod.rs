//! The data structures behind Redis's value types, with no knowledge of
//! commands, connections or the keyspace: each type has a compact encoding
//! for small values and a large one, as Redis's listpack/intset against
//! quicklist/hashtable/skiplist, and reports which it uses by Redis's name.

pub mod table;
