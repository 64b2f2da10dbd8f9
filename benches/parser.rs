//! Request parser benchmark: latchkey's `drain_frames` against the
//! `redis-protocol` crate's RESP2 decoder (`decode_bytes_mut`).
//!
//! Both sides start from the same bytes in a `BytesMut` and end with what the
//! server needs: each request as a `Vec<Bytes>` of arguments (zero-copy slices).
//! redis-protocol has no inline-command support, so inline inputs run only
//! against our parser.
//!
//! Run: `cargo bench --bench parser`.

use bytes::{Bytes, BytesMut};
use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use latchkey_server::resp::{drain_frames, Parser};
use redis_protocol::resp2::decode::decode_bytes_mut;
use redis_protocol::resp2::types::BytesFrame;

fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

fn set_pipeline(n: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for i in 0..n {
        let key = format!("key:{i:06}");
        let val = format!("value:{i:06}");
        v.extend(encode(&[b"SET", key.as_bytes(), val.as_bytes()]));
    }
    v
}

fn get_pipeline(n: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for i in 0..n {
        let key = format!("key:{i:06}");
        v.extend(encode(&[b"GET", key.as_bytes()]));
    }
    v
}

fn big_value() -> Vec<u8> {
    let val = vec![b'x'; 1024 * 1024];
    encode(&[b"SET", b"bigkey", &val])
}

fn inline_pipeline(n: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for i in 0..n {
        v.extend_from_slice(format!("SET key:{i:06} value:{i:06}\r\n").as_bytes());
    }
    v
}

fn ours(input: &[u8]) -> Vec<Vec<Bytes>> {
    let mut parser = Parser::new();
    let mut buf = BytesMut::from(input);
    let mut out = Vec::new();
    drain_frames(&mut parser, &mut buf, &mut out).unwrap();
    out
}

fn frame_args(frame: BytesFrame) -> Vec<Bytes> {
    match frame {
        BytesFrame::Array(items) => items
            .into_iter()
            .map(|f| match f {
                BytesFrame::BulkString(b) | BytesFrame::SimpleString(b) => b,
                other => panic!("unexpected frame {other:?}"),
            })
            .collect(),
        other => panic!("unexpected frame {other:?}"),
    }
}

fn theirs(input: &[u8]) -> Vec<Vec<Bytes>> {
    let mut buf = BytesMut::from(input);
    let mut out = Vec::new();
    while let Some((frame, _, _)) = decode_bytes_mut(&mut buf).unwrap() {
        out.push(frame_args(frame));
    }
    out
}

fn bench(c: &mut Criterion) {
    let cases: Vec<(&str, Vec<u8>, usize, bool)> = vec![
        ("set_pipeline_16", set_pipeline(16), 16, true),
        ("get_pipeline_16", get_pipeline(16), 16, true),
        ("set_1mb_value", big_value(), 1, true),
        ("inline_set_16", inline_pipeline(16), 16, false),
    ];
    for (name, input, frames, compare) in &cases {
        // Both parsers must agree before their speed means anything.
        let mine = ours(input);
        assert_eq!(mine.len(), *frames);
        if *compare {
            assert_eq!(mine, theirs(input), "{name}: parsers disagree");
        }
        let mut g = c.benchmark_group(*name);
        g.throughput(Throughput::Bytes(input.len() as u64));
        let size = if input.len() > 64 * 1024 {
            BatchSize::LargeInput
        } else {
            BatchSize::SmallInput
        };
        g.bench_function("latchkey", |b| {
            let mut parser = Parser::new();
            let mut out = Vec::with_capacity(*frames);
            b.iter_batched(
                || BytesMut::from(&input[..]),
                |mut buf| {
                    out.clear();
                    drain_frames(&mut parser, &mut buf, &mut out).unwrap();
                    black_box(out.len())
                },
                size,
            )
        });
        if *compare {
            g.bench_function("redis_protocol", |b| {
                let mut out = Vec::with_capacity(*frames);
                b.iter_batched(
                    || BytesMut::from(&input[..]),
                    |mut buf| {
                        out.clear();
                        while let Some((frame, _, _)) = decode_bytes_mut(&mut buf).unwrap() {
                            out.push(frame_args(frame));
                        }
                        black_box(out.len())
                    },
                    size,
                )
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
