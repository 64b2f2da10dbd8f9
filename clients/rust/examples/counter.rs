//! Shared counter under a latchkey lock: 32 tasks on 8 connections each add 1
//! to a counter 100 times with a plain read-modify-write (GET, then SET n+1)
//! that is only correct because every step runs while holding the lock
//! `counter:lock`. The final value must be exactly 3200.
//!
//! Against a running server (it starts nothing itself):
//!
//!     cargo run --release --bin latchkey-server &
//!     cargo run --release --example counter
//!     cargo run --release --example counter -- --url redis://127.0.0.1:7000
//!
//! The URL is `--url`, else $LATCHKEY_URL, else redis://127.0.0.1:6379.
//! Exit status 0 when the counter is 3200, 1 otherwise or on any error.
//!
//! An example: the client crate's public API only (`latchkey`, and `common`
//! for the URL and the connections), never the server's crate.

use std::time::Instant;

use latchkey::{Client, Result};

mod common;

const CLIENTS: usize = 8;
const TASKS: usize = 32;
const INCREMENTS: usize = 100;
const KEY: &str = "counter:value";
const LOCK: &str = "counter:lock";

/// One task: INCREMENTS unsafe-on-their-own increments, each under the lock.
async fn worker(client: Client) -> Result<()> {
    for _ in 0..INCREMENTS {
        let guard = client.lock(LOCK).await?;
        let n: i64 = match client.get(KEY).await? {
            Some(v) => std::str::from_utf8(&v)
                .ok()
                .and_then(|s| s.parse().ok())
                .expect("counter holds an integer"),
            None => 0,
        };
        client.set(KEY, (n + 1).to_string()).await?;
        guard.unlock().await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let clients = common::connect_all(CLIENTS).await?;
    clients[0].del(&[KEY, LOCK]).await?;

    let t = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| tokio::spawn(worker(clients[i % CLIENTS].clone())))
        .collect();
    for t in tasks {
        t.await.expect("worker panicked")?;
    }
    let took = t.elapsed();

    let got = clients[0].get(KEY).await?;
    let got = got.as_deref().map(String::from_utf8_lossy);
    let want = (TASKS * INCREMENTS).to_string();
    println!(
        "counter = {} (want {want}); {} locked increments in {:.2?} ({:.0}/s)",
        got.as_deref().unwrap_or("(nil)"),
        TASKS * INCREMENTS,
        took,
        (TASKS * INCREMENTS) as f64 / took.as_secs_f64()
    );
    if got.as_deref() != Some(want.as_str()) {
        eprintln!("counter: WRONG RESULT");
        std::process::exit(1);
    }
    Ok(())
}
