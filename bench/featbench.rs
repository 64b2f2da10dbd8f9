//! Load generators for what redis-benchmark cannot drive (bench/features.sh
//! runs them against latchkey and redis-server side by side):
//!
//! `featbench tx --addr A [--conns 50] [--pipeline 16] [--n 200000]`
//!     MULTI / INCR / EXEC transactions, `pipeline` of them in flight per
//!     connection; prints transactions per second.
//! `featbench fanout --addr A [--subs 10000] [--rounds 5]`
//!     `subs` connections SUBSCRIBE to one channel; then, per round, one
//!     PUBLISH and the time until the last subscriber has the message;
//!     prints the median and the worst, in milliseconds.
//!
//! Every loop is bounded (counts, and a 60 s deadline per phase).

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const DEADLINE: Duration = Duration::from_secs(60);

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

/// Length of the first complete RESP2 reply in `b`, if there is one.
fn reply_len(b: &[u8]) -> Option<usize> {
    let nl = b.windows(2).position(|w| w == b"\r\n")?;
    let head = &b[1..nl];
    let n = || -> Option<i64> { std::str::from_utf8(head).ok()?.parse().ok() };
    match b.first()? {
        b'+' | b'-' | b':' => Some(nl + 2),
        b'$' => {
            let len = n()?;
            if len < 0 {
                return Some(nl + 2);
            }
            let end = nl + 2 + len as usize + 2;
            (b.len() >= end).then_some(end)
        }
        b'*' => {
            let count = n()?;
            let mut at = nl + 2;
            for _ in 0..count.max(0) {
                at += reply_len(&b[at..])?;
            }
            Some(at)
        }
        _ => None,
    }
}

/// Reads until `want` complete replies arrived; returns the last one.
async fn read_replies(s: &mut TcpStream, buf: &mut Vec<u8>, want: usize) -> Res<Vec<u8>> {
    let mut got = 0;
    let mut last = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    while got < want {
        while let Some(n) = reply_len(buf) {
            last = buf[..n].to_vec();
            buf.drain(..n);
            got += 1;
            if got == want {
                return Ok(last);
            }
        }
        let r = tokio::time::timeout(DEADLINE, s.read(&mut chunk)).await??;
        if r == 0 {
            return Err("connection closed".into());
        }
        buf.extend_from_slice(&chunk[..r]);
    }
    Ok(last)
}

async fn tx(args: &[String]) -> Res<()> {
    let addr = arg(args, "--addr", "127.0.0.1:6379");
    let conns: usize = arg(args, "--conns", "50").parse()?;
    let pipeline: usize = arg(args, "--pipeline", "16").parse()?;
    let n: usize = arg(args, "--n", "200000").parse()?;
    let per_conn = n / conns;
    let batches = per_conn.div_ceil(pipeline).max(1);
    let one = b"*1\r\n$5\r\nMULTI\r\n*2\r\n$4\r\nINCR\r\n$7\r\ncounter\r\n*1\r\n$4\r\nEXEC\r\n";
    let batch: Vec<u8> = one.repeat(pipeline);
    let mut streams = Vec::new();
    for _ in 0..conns {
        let s = TcpStream::connect(&addr).await?;
        s.set_nodelay(true)?;
        streams.push(s);
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for mut s in streams {
        let batch = batch.clone();
        tasks.push(tokio::spawn(async move {
            let mut buf = Vec::new();
            for _ in 0..batches {
                s.write_all(&batch).await?;
                let last = read_replies(&mut s, &mut buf, 3 * pipeline).await?;
                if !last.starts_with(b"*1\r\n:") {
                    return Err(format!("EXEC replied {:?}", String::from_utf8_lossy(&last)).into());
                }
            }
            Res::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let secs = start.elapsed().as_secs_f64();
    let total = conns * batches * pipeline;
    println!("{:.0}", total as f64 / secs);
    Ok(())
}

async fn fanout(args: &[String]) -> Res<()> {
    let addr = arg(args, "--addr", "127.0.0.1:6379");
    let subs: usize = arg(args, "--subs", "10000").parse()?;
    let rounds: usize = arg(args, "--rounds", "5").parse()?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Instant)>();
    let mut ready = Vec::new();
    for _ in 0..subs {
        let mut s = TcpStream::connect(&addr).await?;
        s.write_all(b"*2\r\n$9\r\nSUBSCRIBE\r\n$5\r\nfanch\r\n")
            .await?;
        let tx = tx.clone();
        let (rtx, rrx) = tokio::sync::oneshot::channel::<()>();
        ready.push(rrx);
        tokio::spawn(async move {
            let mut buf = Vec::new();
            // The subscription's confirmation, then one message per round.
            if read_replies(&mut s, &mut buf, 1).await.is_err() {
                return;
            }
            let _ = rtx.send(());
            for round in 0..rounds {
                if read_replies(&mut s, &mut buf, 1).await.is_err() {
                    return;
                }
                let _ = tx.send((round, Instant::now()));
            }
        });
    }
    for r in ready {
        tokio::time::timeout(DEADLINE, r).await??;
    }
    let mut publisher = TcpStream::connect(&addr).await?;
    let mut pbuf = Vec::new();
    let mut times = Vec::new();
    for round in 0..rounds {
        let sent = Instant::now();
        publisher
            .write_all(b"*3\r\n$7\r\nPUBLISH\r\n$5\r\nfanch\r\n$5\r\nhello\r\n")
            .await?;
        let receivers = read_replies(&mut publisher, &mut pbuf, 1).await?;
        if receivers != format!(":{subs}\r\n").into_bytes() {
            return Err(
                format!("PUBLISH reached {:?}", String::from_utf8_lossy(&receivers)).into(),
            );
        }
        let mut last = sent;
        for _ in 0..subs {
            let (r, at) = tokio::time::timeout(DEADLINE, rx.recv())
                .await?
                .ok_or("subscriber gone")?;
            if r != round {
                return Err("a message arrived out of round".into());
            }
            last = last.max(at);
        }
        times.push(last.duration_since(sent).as_secs_f64() * 1000.0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    times.sort_by(|a, b| a.total_cmp(b));
    println!(
        "{:.2} {:.2}",
        times[times.len() / 2],
        times[times.len() - 1]
    );
    Ok(())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let r = match args.get(1).map(String::as_str) {
        Some("tx") => tx(&args).await,
        Some("fanout") => fanout(&args).await,
        _ => Err("usage: featbench tx|fanout --addr HOST:PORT ...".into()),
    };
    if let Err(e) = r {
        eprintln!("featbench: {e}");
        std::process::exit(1);
    }
}
