//! RESP2/RESP3 framing: the request parser and the reply writer.
//!
//! Bytes only: must not know commands, connections or the store (it uses
//! `util`'s number formatting); callers decide what to read and reply.

pub mod out;
pub mod parse;

pub use out::Out;
pub use parse::{drain_frames, split_args, Parser, ProtoError};
