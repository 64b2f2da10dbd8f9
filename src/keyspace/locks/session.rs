//! Sessions: a lock session is a connection. Its holds end when it ends
//! (`Keyspace::client_gone`), and a silent one ends after its session
//! timeout: its own (TPSESSION), or the server's `tp-session-timeout` while
//! it holds a lock or waits in a line. These are the rules; the timer is
//! the connection task's (`runtime/conn.rs`), which asks them.
//!
//! Changes nothing: must not touch connections or keys; it reads the
//! keyspace's holds and lock lines (`Keyspace::in_lock_service`).

use crate::ids::ClientId;
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

impl Keyspace {
    /// Whether `client` holds a key (bound or shared) or waits in a lock
    /// line: the server's default session timeout applies to it.
    pub fn in_lock_service(&self, client: ClientId) -> bool {
        self.held_by(client) > 0 || self.blocking.lock_waits_of(client) > 0
    }
}
