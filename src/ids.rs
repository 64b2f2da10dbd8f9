//! Identifiers shared by the keyspace, the registries and the server: a leaf
//! module, so none of them has to import another just for a type name.

use bytes::Bytes;

/// A connection's id (CLIENT ID).
pub type ClientId = u64;

/// A key in a given database. Registries that keep keys long-term (watches,
/// bindings, waiters) must hold a copy (`own_key`), never a slice of a
/// connection's read buffer, which would keep the whole buffer alive.
pub type DbKey = (usize, Bytes);

/// `key` as a `DbKey` that owns its bytes.
pub fn own_key(db: usize, key: &[u8]) -> DbKey {
    (db, Bytes::copy_from_slice(key))
}
