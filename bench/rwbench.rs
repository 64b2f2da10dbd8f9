//! Issue 11's read-write lock target: 16 readers and 2 writers, each on its
//! own connection, loop acquire → work → release → other work (defaults:
//! 5 ms holding, then 1 ms for readers and 50 ms for writers: reads
//! dominate) for a fixed time,
//! against the release latchkey-server as a child process. Run once with
//! the read-write lock (`read_lock` / `write_lock`) and once with every
//! worker taking the same exclusive `lock`; prints reader acquisitions per
//! second for both, their ratio (target ≥ 10x), and the writers' waits
//! (bounded: no starvation).
//!
//! Usage: cargo build --release && cargo run --release --example rwbench
//! Env: LATCHKEY_BIN, SECS (default 5), WORK_MS, THINK_MS, WRITER_THINK_MS.

#[path = "child_server.rs"]
mod child_server;

use std::time::{Duration, Instant};

use child_server::{latchkey_bin, start_bin};
use latchkey::Client;

const READERS: usize = 16;
const WRITERS: usize = 2;
/// Milliseconds from the environment, or a default.
fn ms(var: &str, default: u64) -> Duration {
    Duration::from_millis(
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

struct Run {
    reads: usize,
    writes: usize,
    writer_waits: Vec<Duration>,
}

#[derive(Clone, Copy)]
struct Load {
    /// Holding the lock.
    work: Duration,
    /// Between holds, outside the lock: readers read often, writers now
    /// and then.
    think: Duration,
    writer_think: Duration,
}

async fn run(url: &str, rw: bool, secs: u64, name: &str, load: Load) -> Run {
    let end = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for i in 0..READERS + WRITERS {
        let writer = i >= READERS;
        let c = Client::connect(url).await.expect("connect");
        let name = name.to_string();
        tasks.push(tokio::spawn(async move {
            let (mut n, mut waits) = (0usize, Vec::new());
            // Bounded by the end time.
            while Instant::now() < end {
                let t = Instant::now();
                let g = if rw && !writer {
                    c.read_lock(&name).await
                } else {
                    c.write_lock(&name).await
                }
                .expect("lock");
                if writer {
                    waits.push(t.elapsed());
                }
                tokio::time::sleep(load.work).await;
                g.unlock().await.expect("unlock");
                n += 1;
                tokio::time::sleep(if writer {
                    load.writer_think
                } else {
                    load.think
                })
                .await;
            }
            (writer, n, waits)
        }));
    }
    let mut r = Run {
        reads: 0,
        writes: 0,
        writer_waits: Vec::new(),
    };
    for t in tasks {
        let (writer, n, waits) = t.await.unwrap();
        if writer {
            r.writes += n;
            r.writer_waits.extend(waits);
        } else {
            r.reads += n;
        }
    }
    r.writer_waits.sort();
    r
}

fn pct(v: &[Duration], p: f64) -> f64 {
    v.get(((v.len().max(1) - 1) as f64 * p).round() as usize)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

#[tokio::main]
async fn main() {
    let secs: u64 = std::env::var("SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let bin = latchkey_bin();
    let (_server, addr) =
        start_bin(&bin, &[]).unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
    let url = format!("redis://{addr}");
    let load = Load {
        work: ms("WORK_MS", 5),
        think: ms("THINK_MS", 1),
        writer_think: ms("WRITER_THINK_MS", 50),
    };
    let ex = run(&url, false, secs, "ex", load).await;
    let rw = run(&url, true, secs, "rw", load).await;
    let per_s = |n: usize| n as f64 / secs as f64;
    println!(
        "{READERS} readers + {WRITERS} writers, {:?} of work per hold, {:?} (readers) / {:?} (writers) between holds, {secs} s each:",
        load.work, load.think, load.writer_think
    );
    for (what, r) in [("exclusive lock", &ex), ("read-write lock", &rw)] {
        println!(
            "{what}: reader acquisitions {:.0}/s, writer {:.0}/s, writer wait p50 {:.1} ms p99 {:.1} ms max {:.1} ms",
            per_s(r.reads),
            per_s(r.writes),
            pct(&r.writer_waits, 0.5),
            pct(&r.writer_waits, 0.99),
            pct(&r.writer_waits, 1.0),
        );
    }
    println!(
        "reader throughput, read-write / exclusive: {:.1}x",
        rw.reads as f64 / ex.reads.max(1) as f64
    );
}
