//! The quorum lock of the bundled client over three in-process servers:
//! a majority holds it, one server down still leaves a majority, a dead
//! holder releases everywhere, and contending clients exclude each other.

mod common;

use std::time::Duration;

use latchkey::client::{cmd, Client, Error, Options, Quorum};
use latchkey::server::ServerHandle;

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
    assert!(matches!(
        b.lock("q")
            .timeout(Duration::from_millis(200))
            .acquire()
            .await,
        Err(Error::LockTimeout { .. })
    ));
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
        let _: latchkey::client::Value = admin
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
