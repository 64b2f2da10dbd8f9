//! Fuzzes the request parser: the input is split into reads at points taken
//! from its first bytes, and fed to `drain_frames` like a connection would.
//! Checks: no panic, frames never depend on where the reads were split, and
//! every frame's arguments are slices of the input (or unquoted inline text).

#![no_main]

use bytes::{Bytes, BytesMut};
use latchkey_server::resp::{drain_frames, Parser, ProtoError};
use libfuzzer_sys::fuzz_target;

type Outcome = (Vec<Vec<Bytes>>, Result<(), ProtoError>, usize);

fn run(chunks: &[&[u8]]) -> Outcome {
    let mut parser = Parser::new();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for c in chunks {
        buf.extend_from_slice(c);
        if let Err(e) = drain_frames(&mut parser, &mut buf, &mut out) {
            return (out, Err(e), buf.len());
        }
    }
    (out, Ok(()), buf.len())
}

fuzz_target!(|data: &[u8]| {
    // First byte: number of cut points; the next ones: where to cut.
    let Some((&ncuts, rest)) = data.split_first() else {
        return;
    };
    let ncuts = (ncuts % 8) as usize;
    if rest.len() < ncuts {
        return;
    }
    let (cut_bytes, input) = rest.split_at(ncuts);
    let mut cuts: Vec<usize> = cut_bytes
        .iter()
        .map(|&b| (b as usize * input.len()) / 255)
        .collect();
    cuts.sort_unstable();
    let mut chunks = Vec::new();
    let mut at = 0;
    for c in cuts {
        chunks.push(&input[at..c]);
        at = c;
    }
    chunks.push(&input[at..]);

    let whole = run(&[input]);
    let split = run(&chunks);
    // Size limits (64 KB lines) are checked per read, as Redis does, so only
    // inputs below them must parse identically whatever the split.
    if input.len() <= 64 * 1024 {
        assert_eq!(whole.0, split.0, "frames differ with cuts");
        assert_eq!(whole.1, split.1, "errors differ with cuts");
        if whole.1.is_ok() {
            assert_eq!(whole.2, split.2, "leftover differs with cuts");
        }
    }
    let consumed: usize = input.len() - whole.2;
    let args: usize = whole.0.iter().flatten().map(|a| a.len()).sum();
    assert!(whole.1.is_err() || args <= consumed);
    if let Err(e) = &whole.1 {
        assert!(e.message().starts_with("Protocol error: "));
    }
});
