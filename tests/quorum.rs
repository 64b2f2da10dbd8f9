//! The quorum lock of the bundled client over three in-process servers:
//! a majority holds it, one server down still leaves a majority, a dead
//! holder releases everywhere, and contending clients exclude each other.

mod common;

use std::time::Duration;

use latchkey::{cmd, Client, Error, Options, Quorum};
use latchkey_server::runtime::ServerHandle;

use common::start;

async fn bounded<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .expect("test step took over 30 s")
}

fn urls(servers: &[ServerHandle]) -> Vec<String> {
    servers
        .iter()
        .map(|s| format!("redis://127.0.0.1:{}", s.port()))
        .collect()
}

/// `q` cannot take `name` within 200 ms: it gives up with LockTimeout.
async fn assert_times_out(q: &Quorum, name: &str) {
    let r = q
        .lock(name)
        .timeout(Duration::from_millis(200))
        .acquire()
        .await;
    assert!(matches!(r, Err(Error::LockTimeout { .. })), "{:?}", r.err());
}

async fn quorum(urls: &[String]) -> Quorum {
    let u: Vec<&str> = urls.iter().map(|s| s.as_str()).collect();
    Quorum::connect(&u, Options::default()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_holds_the_lock() {
    let mut servers = vec![start(), start(), start()];
    let u = urls(&servers);
    let a = quorum(&u).await;
    let b = quorum(&u).await;
    assert_eq!(a.majority(), 2);
    let g = bounded(a.lock("q").acquire()).await.unwrap();
    assert_eq!(g.held_on(), 3);
    assert!(g.tokens().iter().all(|t| t.is_some()));
    assert_times_out(&b, "q").await;
    // One server goes down: still a majority.
    drop(servers.pop());
    tokio::time::timeout(Duration::from_secs(5), async {
        while g.held_on() != 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the guard notices the lost server");
    assert!(g.is_held());
    // Released: B takes it on the two servers left.
    let waiting = tokio::spawn(async move { b.lock("q").acquire().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(g.unlock().await.unwrap(), 2);
    let gb = bounded(waiting).await.unwrap().unwrap();
    assert_eq!(gb.held_on(), 2);
    // B's connections die (CLIENT KILL on both): every binding goes, and
    // A takes it again.
    for s in &servers {
        let admin = Client::connect(&format!("redis://127.0.0.1:{}", s.port()))
            .await
            .unwrap();
        let _: latchkey::Value = admin
            .query(
                &cmd("CLIENT")
                    .arg("KILL")
                    .arg("SKIPME")
                    .arg("yes")
                    .arg("TYPE")
                    .arg("normal"),
            )
            .await
            .unwrap();
    }
    bounded(gb.lost()).await;
    assert!(!gb.is_held());
    let a2 = quorum(&urls(&servers)).await;
    let g2 = bounded(a2.lock("q").acquire()).await.unwrap();
    assert!(g2.is_held());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contending_clients_exclude_each_other() {
    let servers = vec![start(), start(), start()];
    let u = urls(&servers);
    let counter = Client::connect(&u[0]).await.unwrap();
    counter.set("n", 0).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let q = quorum(&u).await;
        let c = Client::connect(&u[0]).await.unwrap();
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                let g = q.lock("ctr").acquire().await.unwrap();
                let n: i64 = c.query(&cmd("GET").arg("n")).await.unwrap();
                c.set("n", n + 1).await.unwrap();
                g.unlock().await.unwrap();
            }
        }));
    }
    for t in tasks {
        bounded(t).await.unwrap();
    }
    let n: i64 = counter.query(&cmd("GET").arg("n")).await.unwrap();
    assert_eq!(n, 80);
}

/// `cmdstat_settp` calls on a server, from INFO commandstats.
async fn settp_calls(url: &str) -> u64 {
    let c = Client::connect(url).await.unwrap();
    let info: String = c.query(&cmd("INFO").arg("commandstats")).await.unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_settp:calls="))
        .and_then(|l| l.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_queue_without_a_herd() {
    let servers = vec![start(), start(), start()];
    let u = urls(&servers);
    let (k, rounds) = (5, 10);
    let mut tasks = Vec::new();
    for _ in 0..k {
        let q = quorum(&u).await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let g = q.lock("herd").acquire().await.unwrap();
                assert!(g.is_held());
                tokio::time::sleep(Duration::from_millis(3)).await;
                g.unlock().await.unwrap();
            }
        }));
    }
    for t in tasks {
        bounded(t).await.unwrap();
    }
    // One SETTP per acquisition on each server: a release wakes only the
    // next in the first server's line (a retry on every release would
    // send one per waiter per release).
    let acquisitions = (k * rounds) as u64;
    for url in &u {
        let calls = settp_calls(url).await;
        assert!(
            (acquisitions..=acquisitions + 2).contains(&calls),
            "{calls} SETTP for {acquisitions} acquisitions on {url}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_line_moves_on_when_the_first_server_is_down() {
    let mut servers = vec![start(), start(), start()];
    let u = urls(&servers);
    let a = quorum(&u).await;
    let b = quorum(&u).await;
    // The first server goes away after the clients connected: they are
    // dropped from its line and queue on the next one.
    drop(servers.remove(0));
    let g = bounded(a.lock("q").acquire()).await.unwrap();
    assert_eq!(g.held_on(), 2);
    assert_times_out(&b, "q").await;
    let waiting = tokio::spawn(async move { b.lock("q").acquire().await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished());
    g.unlock().await.unwrap();
    let gb = bounded(waiting).await.unwrap().unwrap();
    assert_eq!(gb.held_on(), 2);
}
