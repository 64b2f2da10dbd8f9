//! Commands: one family per file (`strings`, `keys`, `list`, ...; `locks`
//! is the lock service's), each exporting a `COMMANDS: &[Spec]` table, and
//! the machinery every command goes through, one concern per file:
//! - `table`: the command table, its flags and the lookups by name;
//! - `context`: the per-connection state and the per-call context (`Ctx`);
//! - `admission`: whether a command may run, for every caller (a client,
//!   EXEC, a script's redis.call, a connection while a script is busy):
//!   resolution, AUTH, ACL, OOM, MISCONF, pause... in one function;
//! - `dispatch`: a client's command admitted, routed into MULTI, `call`,
//!   and the change record each command leaves;
//! - `script_host`: the server's side of a running script (redis.call
//!   through admission and `call`) and the busy-script answers;
//! - `waiters`: registering a blocked command's wait and serving the waits
//!   a command made ready;
//! - `args`: argument helpers (SCAN's cursor and options among them) and
//!   the common error texts; `longdouble`: INCRBYFLOAT/HINCRBYFLOAT's
//!   `long double` arithmetic and Redis's human float formatting;
//! - `propagate`: what a command leaves in the change log; `replay`: the
//!   AOF's fake client.
//!
//! A handler gets the whole argument vector (name included) and writes
//! exactly one reply to `ctx.out`. The items of the machinery files are
//! re-exported here, so `commands::Ctx`, `commands::call` and
//! `commands::lookup` name them wherever they live.
//!
//! Declarations and re-exports only: must not hold a handler or state of
//! its own.

pub mod acl;
pub mod bitmap;
pub mod client_eviction;
pub mod cluster;
pub mod connection;
pub mod functions;
pub mod geo;
pub mod hash;
pub mod hash_ttl;
pub mod hyperloglog;
pub mod keys;
pub mod list;
pub mod locks;
pub mod multi;
pub mod propagate;
pub mod pubsub;
pub mod replay;
pub mod replication;
pub mod scripting;
pub mod server;
pub mod set;
pub mod sort;
pub mod stream;
pub mod strings;
pub mod wait;
pub mod zset;

mod admission;
mod args;
mod context;
mod dispatch;
mod longdouble;
mod script_host;
mod table;
mod waiters;

// Names the family files take from here (`use super::{Store, Out, ...}`).
pub use crate::db::Event;
use crate::db::{Db, WrongType};
use crate::resp::Out;
use crate::server::{ClientId, Store};

pub use admission::*;
pub use args::*;
pub use connection::apply_later;
pub use context::*;
pub use dispatch::*;
pub use script_host::*;
pub use table::*;
pub use waiters::*;
