//! Latchkey: a Redis-compatible server with connection-bound keys and
//! existence watches for distributed locks.
//!
//! The module list only: must not hold code or state; each module's own
//! header says what it owns and must not touch.

pub mod acl;
pub mod blocking;
pub mod commands;
pub mod config;
pub mod db;
pub mod effects;
pub mod fdlimit;
pub mod glob;
pub mod ids;
pub mod keyspace;
pub mod lazyfree;
pub mod logging;
pub mod persist;
pub mod process;
pub mod pubsub;
pub mod replication;
pub mod resp;
pub mod runtime;
pub mod scripting;
pub mod server;
pub mod stats;
pub mod tls;
pub mod tracking;
pub mod transaction;
pub mod types;
pub mod util;
pub mod version;
