//! Stock deduction under a per-item lock, in the spirit of an annotation-driven
//! Java lock (`@DistributedLock(key = "stock:lock:#{sku}") void deduct(sku, qty)`):
//! `deduct` below wraps its body in `with_lock("stock:lock:<sku>", ...)`, which
//! takes the lock, runs the body, and releases the lock whatever the body returns.
//!
//! Three items are stocked, then 300 buyers on 6 connections race to buy 1-3
//! units each. Demand far exceeds supply; the check is that nothing is ever
//! oversold: for every item, sold + remaining == initial stock and remaining >= 0.
//!
//! Against a running server (it starts nothing itself):
//!
//!     cargo run --release --bin latchkey-server &
//!     cargo run --release --example stock
//!     cargo run --release --example stock -- --url redis://127.0.0.1:7000
//!
//! The URL is `--url`, else $LATCHKEY_URL, else redis://127.0.0.1:6379.
//! Exit status 0 when every item balances, 1 otherwise or on any error.
//!
//! An example: the client crate's public API only (`latchkey`, and `common`
//! for the URL and the connections), never the server's crate.

use latchkey::{Client, Result};

mod common;

const ITEMS: [(&str, i64); 3] = [("apple", 100), ("pear", 30), ("fig", 1)];
const BUYERS: usize = 300;
const CLIENTS: usize = 6;

fn stock_key(sku: &str) -> String {
    format!("stock:{sku}")
}

async fn stock(client: &Client, sku: &str) -> Result<i64> {
    let v = client.get(stock_key(sku)).await?;
    Ok(v.and_then(|v| std::str::from_utf8(&v).ok()?.parse().ok())
        .expect("stock holds an integer"))
}

/// Takes `qty` units of `sku` if that many are left. The read and the write
/// are separate commands: only the lock makes the pair atomic.
async fn deduct(client: &Client, sku: &str, qty: i64) -> Result<bool> {
    client
        .with_lock(format!("stock:lock:{sku}"), async {
            let left = stock(client, sku).await?;
            if left < qty {
                return Ok(false);
            }
            client.set(stock_key(sku), (left - qty).to_string()).await?;
            Ok(true)
        })
        .await?
}

#[tokio::main]
async fn main() -> Result<()> {
    let clients = common::connect_all(CLIENTS).await?;
    for (sku, n) in ITEMS {
        clients[0].set(stock_key(sku), n.to_string()).await?;
        clients[0].del(&[format!("stock:lock:{sku}")]).await?;
    }

    let buyers: Vec<_> = (0..BUYERS)
        .map(|i| {
            let client = clients[i % CLIENTS].clone();
            let sku = ITEMS[i % ITEMS.len()].0;
            let qty = (i / ITEMS.len() % 3) as i64 + 1;
            tokio::spawn(async move {
                let bought = deduct(&client, sku, qty).await?;
                Ok::<_, latchkey::Error>((sku, if bought { qty } else { 0 }))
            })
        })
        .collect();
    let mut sold = [0i64; ITEMS.len()];
    let mut orders = [0usize; ITEMS.len()];
    for b in buyers {
        let (sku, qty) = b.await.expect("buyer panicked")?;
        let i = ITEMS.iter().position(|(s, _)| *s == sku).unwrap();
        sold[i] += qty;
        orders[i] += usize::from(qty > 0);
    }

    let mut ok = true;
    for (i, (sku, initial)) in ITEMS.iter().enumerate() {
        let left = stock(&clients[0], sku).await?;
        let balanced = left >= 0 && sold[i] + left == *initial;
        ok &= balanced;
        println!(
            "{sku:>6}: stock {initial:>3}, sold {:>3} in {:>3} orders, remaining {left:>3}{}",
            sold[i],
            orders[i],
            if balanced {
                ""
            } else {
                "  <-- OVERSOLD/MISMATCH"
            }
        );
    }
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
