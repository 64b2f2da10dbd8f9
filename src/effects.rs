//! The change records that leave the dispatcher for the AOF (and, later,
//! replicas): what `commands::propagate` makes of a command that changed
//! the keyspace. A leaf of types only, so that persistence, scripting and
//! the dispatcher can all name a record without depending on each other.

use bytes::Bytes;

/// A logged command and the database it ran in.
pub type Logged = (usize, Vec<Bytes>);
