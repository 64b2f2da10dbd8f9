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
//! `featbench snapwatch --addr A --pid P [--keys 1000000] [--writers 8]`
//!     While `writers` connections overwrite random keys `key:N` (N below
//!     `keys`, as DEBUG POPULATE names them; pipeline 16), sends BGSAVE and
//!     watches it to the end: the memory of the server process and its
//!     children (the sum of their PSS, so a fork's shared pages count
//!     once) sampled every 5 ms, and the latency of a probe client's GETs.
//!     Prints `secs base_mb peak_mb overhead_mb probe_p50_ms probe_p99_ms
//!     probe_max_ms writes_per_s` for the time the save ran.
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

/// PSS of `pid` and of its children, in bytes (0 for a process gone).
fn pss_tree(pid: u32) -> u64 {
    let one = |p: &str| -> u64 {
        std::fs::read_to_string(format!("/proc/{p}/smaps_rollup"))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("Pss:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u64>().ok())
            })
            .unwrap_or(0)
            * 1024
    };
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    one(&pid.to_string()) + children.split_whitespace().map(one).sum::<u64>()
}

async fn info_has(s: &mut TcpStream, buf: &mut Vec<u8>, what: &str) -> Res<bool> {
    s.write_all(b"*2\r\n$4\r\nINFO\r\n$11\r\npersistence\r\n")
        .await?;
    let r = read_replies(s, buf, 1).await?;
    Ok(String::from_utf8_lossy(&r).contains(what))
}

async fn snapwatch(args: &[String]) -> Res<()> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let addr = arg(args, "--addr", "127.0.0.1:6379");
    let pid: u32 = arg(args, "--pid", "0").parse()?;
    let keys: u64 = arg(args, "--keys", "1000000").parse()?;
    let writers: usize = arg(args, "--writers", "8").parse()?;
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..writers {
        let mut s = TcpStream::connect(&addr).await?;
        s.set_nodelay(true)?;
        let (stop, writes) = (stop.clone(), writes.clone());
        tasks.push(tokio::spawn(async move {
            let mut buf = Vec::new();
            let mut seed = 0x2545_f491_4f6c_dd1du64 ^ (w as u64 + 1).wrapping_mul(0x9e37_79b9);
            let deadline = Instant::now() + DEADLINE * 2;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let mut batch = Vec::new();
                for _ in 0..16 {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let k = format!("key:{}", seed % keys);
                    let v = format!("value:{}", seed % 1000);
                    batch.extend(
                        format!(
                            "*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n",
                            k.len(),
                            v.len()
                        )
                        .bytes(),
                    );
                }
                s.write_all(&batch).await?;
                read_replies(&mut s, &mut buf, 16).await?;
                writes.fetch_add(16, Ordering::Relaxed);
            }
            Res::Ok(())
        }));
    }
    // The probe: one GET at a time, each latency with its send time.
    let probe_stop = stop.clone();
    let paddr = addr.clone();
    let probe = tokio::spawn(async move {
        let mut s = TcpStream::connect(&paddr).await?;
        s.set_nodelay(true)?;
        let mut buf = Vec::new();
        let mut lat: Vec<(Instant, f64)> = Vec::new();
        let deadline = Instant::now() + DEADLINE * 2;
        while !probe_stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            let t = Instant::now();
            s.write_all(b"*2\r\n$3\r\nGET\r\n$5\r\nkey:1\r\n").await?;
            read_replies(&mut s, &mut buf, 1).await?;
            lat.push((t, t.elapsed().as_secs_f64() * 1000.0));
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        Res::Ok(lat)
    });
    let mut ctl = TcpStream::connect(&addr).await?;
    let mut cbuf = Vec::new();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let base = pss_tree(pid);
    let w0 = writes.load(Ordering::Relaxed);
    let start = Instant::now();
    ctl.write_all(b"*1\r\n$6\r\nBGSAVE\r\n").await?;
    read_replies(&mut ctl, &mut cbuf, 1).await?;
    // Memory samples on a thread of their own, every 5 ms.
    let sampling = Arc::new(AtomicBool::new(true));
    let peak = Arc::new(AtomicU64::new(base));
    let (sam, pk) = (sampling.clone(), peak.clone());
    let sampler = std::thread::spawn(move || {
        while sam.load(Ordering::Relaxed) {
            pk.fetch_max(pss_tree(pid), Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let mut done = false;
    while start.elapsed() < DEADLINE {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if info_has(&mut ctl, &mut cbuf, "rdb_bgsave_in_progress:0").await? {
            done = true;
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let end = Instant::now();
    let w1 = writes.load(Ordering::Relaxed);
    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.join();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    let lat = probe.await??;
    if !done {
        return Err("BGSAVE did not end within 60 s".into());
    }
    let mut during: Vec<f64> = lat
        .iter()
        .filter(|(t, _)| *t >= start && *t <= end)
        .map(|(_, l)| *l)
        .collect();
    during.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| -> f64 {
        if during.is_empty() {
            return 0.0;
        }
        during[((during.len() as f64 * p) as usize).min(during.len() - 1)]
    };
    let mb = |b: u64| b as f64 / (1024.0 * 1024.0);
    let peak = peak.load(Ordering::Relaxed);
    println!(
        "{secs:.2} {:.1} {:.1} {:.1} {:.2} {:.2} {:.2} {:.0}",
        mb(base),
        mb(peak),
        mb(peak.saturating_sub(base)),
        pct(0.5),
        pct(0.99),
        during.last().copied().unwrap_or(0.0),
        (w1 - w0) as f64 / secs
    );
    Ok(())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let r = match args.get(1).map(String::as_str) {
        Some("tx") => tx(&args).await,
        Some("fanout") => fanout(&args).await,
        Some("snapwatch") => snapwatch(&args).await,
        _ => Err("usage: featbench tx|fanout|snapwatch --addr HOST:PORT ...".into()),
    };
    if let Err(e) = r {
        eprintln!("featbench: {e}");
        std::process::exit(1);
    }
}
