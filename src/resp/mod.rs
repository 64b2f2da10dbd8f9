//! RESP2/RESP3 framing: the request parser and the reply writer.

pub mod out;
pub mod parse;

pub use out::Out;
pub use parse::{drain_frames, split_args, Parser, ProtoError};
