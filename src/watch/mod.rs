//! Temporary (connection-bound) keys and existence watches.
//!
//! Everything here hangs off `Store::keyspace_changed` and the connection
//! cleanup path in `server::conn`; the SETTP/WATCHEX issue fills it in.
