//! Redis's RDB format (version 10, Redis 7.0): the encoding of values and
//! of the whole file. This module knows the bytes and `types::Value`, not
//! the keyspace, commands or files (the rest of `crate::persist` writes
//! and reads those). Must not touch anything above `db` and `types`.

pub mod codec;
pub mod file;
pub mod payload;
pub mod value;
