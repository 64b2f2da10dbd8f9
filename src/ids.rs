//! Identifiers shared by the keyspace, the registries and the server: a leaf
//! module, so none of them has to import another just for a type name.
//!
//! Must not hold state or behaviour: it imports nothing of the crate, and
//! `own_key` is its only function.

use bytes::Bytes;

/// A connection's id (CLIENT ID).
pub type ClientId = u64;

/// A lock session's identity: random, unguessable, the same on every
/// server that holds the session's locks (a replica names a session of
/// its primary by it; its client presents it to resume after a failover).
pub type Sid = u128;

/// A key in a given database. Registries that keep keys long-term (watches,
/// bindings, waiters) must hold a copy (`own_key`), never a slice of a
/// connection's read buffer, which would keep the whole buffer alive.
pub type DbKey = (usize, Bytes);

/// `key` as a `DbKey` that owns its bytes.
pub fn own_key(db: usize, key: &[u8]) -> DbKey {
    (db, Bytes::copy_from_slice(key))
}

/// How a shared key is held (SETTP ... SHARED or PERMITS n). Defined here,
/// with its methods in the lock service (`keyspace::locks::shares`), because
/// the blocking registry names it too, and the keyspace depends on that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareKind {
    /// Readers of a read-write lock: any number at once.
    Read,
    /// A counting semaphore: at most this many holders.
    Permits(u32),
}
