//! Redis's RDB format (version 10, Redis 7.0): the encoding of values and
//! of the whole file. This module knows the bytes and `types::Value`, not
//! the store, commands or files (`crate::persist` writes and reads those).

pub mod codec;
pub mod file;
pub mod listpack;
pub mod payload;
pub mod value;
