//! A lock holder for `bench/sentinel-failover.sh`: takes a lock through
//! the Sentinels with the bundled client (reconnect on, so its session is
//! resumed on the promoted replica), prints `held <token>` and then, each
//! time the lock is held again after a suspension, `back <unix ns>
//! <token>` (the moment the guard said `Held` again), or `lost <unix ns>
//! <reason>` if it was lost. Runs until killed or `SECS` (default 600).
//!
//! Usage: cargo run --release --example failoverlock -- <sentinel,...> <master-name> <lock>

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use latchkey::{Backoff, Client, LockState, Options};

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, sentinels, name, lock] = &args[..] else {
        eprintln!("usage: failoverlock <sentinel,...> <master-name> <lock>");
        std::process::exit(2);
    };
    let secs: u64 = std::env::var("SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let opts = Options {
        session_timeout: Some(Duration::from_secs(3)),
        request_timeout: Some(Duration::from_secs(2)),
        connect_timeout: Duration::from_millis(500),
        // As a client that follows a failover closely: tries again every
        // 10 ms at most (the write side of the bench polls every 10 ms).
        reconnect: Some(Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(10),
            max_attempts: None,
        }),
        ..Options::default()
    };
    let url = format!("redis-sentinel://{sentinels}#{name}");
    let client = Client::connect_with(&url, opts)
        .await
        .expect("connected through the Sentinels");
    let guard = client.lock(lock.as_str()).await.expect("the lock");
    // A round trip after the acquisition: the session's identity (asked
    // after the first one) is known by now, so a resume can follow.
    let _ = client.get("failoverlock").await;
    println!("held {}", guard.token());
    let end = tokio::time::Instant::now() + Duration::from_secs(secs);
    let mut was = LockState::Held;
    // Bounded: until SECS.
    while tokio::time::Instant::now() < end {
        let now = guard.state();
        if now != was {
            match now {
                LockState::Held => println!("back {} {}", unix_ns(), guard.token()),
                LockState::Lost => {
                    let why = guard.lost_reason().unwrap_or_default().replace(' ', "_");
                    println!("lost {} {why}", unix_ns());
                    return;
                }
                LockState::Suspended => println!("suspended {}", unix_ns()),
            }
            was = now;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
