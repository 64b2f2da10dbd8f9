//! WATCHEX latency benchmark against a latchkey-server child process.
//!
//!     cargo build --release && cargo run --release --example watch_bench
//!
//! (a) holder's socket close -> waiting watcher receives `watchex lock DEL`,
//!     200 iterations: median and p99.
//! (b) DEL fan-out to 10,000 watchers of one key: time until every watcher
//!     has its push, and another client's GET latency meanwhile.
//!
//! (c) The same fan-out measured on Debian's redis-server with PUBLISH to
//!     10,000 SUBSCRIBE connections (its nearest equivalent), for scale:
//!     skipped when redis-server is not installed.
//!
//! LATCHKEY_BIN overrides the server binary (default target/release/latchkey-server).
//! The process needs ~10,000 file descriptors (ulimit -n).

#[path = "../bench/child_server.rs"]
mod child_server;
use child_server::{latchkey_bin, start_bin, Server};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WATCHERS: usize = 10_000;

fn enc(args: &[&str]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    v
}

/// Reads until `want` bytes arrived; they must equal `want`.
fn expect(s: &mut TcpStream, want: &[u8]) {
    let mut got = vec![0u8; want.len()];
    s.read_exact(&mut got).expect("read");
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(want),
        "unexpected bytes"
    );
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

fn push(key: &str, ev: &str) -> Vec<u8> {
    format!(
        ">3\r\n$7\r\nwatchex\r\n${}\r\n{key}\r\n$3\r\n{ev}\r\n",
        key.len()
    )
    .into_bytes()
}

fn resp3(addr: SocketAddr) -> TcpStream {
    let mut s = connect(addr);
    s.write_all(&enc(&["HELLO", "3"])).unwrap();
    // Skip the HELLO map: read until its last field (modules, an empty array).
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"$7\r\nmodules\r\n*0\r\n") {
        s.read_exact(&mut b).unwrap();
        buf.push(b[0]);
    }
    s
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn start_server() -> (Server, SocketAddr) {
    let bin = latchkey_bin();
    start_bin(&bin, &["--maxclients", "15000"])
        .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"))
}

fn close_to_del(addr: SocketAddr) {
    let mut waiter = resp3(addr);
    waiter.write_all(&enc(&["WATCHEX", "lock"])).unwrap();
    expect(&mut waiter, b"+NOEXIST\r\n");
    let mut times = Vec::new();
    for _ in 0..200 {
        let mut holder = connect(addr);
        holder.write_all(&enc(&["SETTP", "lock", "h"])).unwrap();
        expect(&mut holder, b":1\r\n");
        expect(&mut waiter, &push("lock", "ADD"));
        let t0 = Instant::now();
        drop(holder);
        expect(&mut waiter, &push("lock", "DEL"));
        times.push(t0.elapsed());
    }
    times.sort();
    println!(
        "(a) holder close -> watcher DEL, 200 iterations: median {:?}, p99 {:?}, max {:?}",
        pct(&times, 0.5),
        pct(&times, 0.99),
        times[times.len() - 1]
    );
}

/// GETs on their own connection until `stop`; returns each round trip.
fn get_loop(addr: SocketAddr, stop: Arc<AtomicBool>) -> Vec<Duration> {
    let mut c = connect(addr);
    let req = enc(&["GET", "other"]);
    let mut lat = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        c.write_all(&req).unwrap();
        expect(&mut c, b"$1\r\nv\r\n");
        lat.push(t.elapsed());
    }
    lat
}

fn fan_out(addr: SocketAddr) {
    let mut admin = connect(addr);
    admin.write_all(&enc(&["SET", "other", "v"])).unwrap();
    expect(&mut admin, b"+OK\r\n");
    admin.write_all(&enc(&["SET", "shared", "v"])).unwrap();
    expect(&mut admin, b"+OK\r\n");
    let t_open = Instant::now();
    let mut ws: Vec<TcpStream> = Vec::with_capacity(WATCHERS);
    let req = enc(&["WATCHEX", "shared"]);
    for i in 0..WATCHERS {
        let mut c = connect(addr);
        c.write_all(&req).unwrap();
        ws.push(c);
        // Batches keep the listen queue from overflowing.
        if i % 100 == 99 {
            for c in &mut ws[i - 99..] {
                expect(c, b"+EXIST\r\n");
            }
        }
    }
    println!(
        "    {WATCHERS} watchers connected and registered in {:?}",
        t_open.elapsed()
    );

    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let base = std::thread::spawn(move || get_loop(addr, s2));
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let mut base = base.join().unwrap();
    base.sort();

    let mut totals = Vec::new();
    let mut during = Vec::new();
    for round in 0..5 {
        if round > 0 {
            admin.write_all(&enc(&["SET", "shared", "v"])).unwrap();
            expect(&mut admin, b"+OK\r\n");
            for c in ws.iter_mut() {
                expect(c, b"*3\r\n$7\r\nwatchex\r\n$6\r\nshared\r\n$3\r\nADD\r\n");
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let getter = std::thread::spawn(move || get_loop(addr, s2));
        std::thread::sleep(Duration::from_millis(20));
        let t0 = Instant::now();
        admin.write_all(&enc(&["DEL", "shared"])).unwrap();
        expect(&mut admin, b":1\r\n");
        for c in ws.iter_mut() {
            expect(c, b"*3\r\n$7\r\nwatchex\r\n$6\r\nshared\r\n$3\r\nDEL\r\n");
        }
        totals.push(t0.elapsed());
        stop.store(true, Ordering::Relaxed);
        during.extend(getter.join().unwrap());
    }
    during.sort();
    totals.sort();
    println!(
        "(b) DEL fan-out to {WATCHERS} watchers, 5 rounds: all delivered in median {:?} (min {:?}, max {:?})",
        pct(&totals, 0.5),
        totals[0],
        totals[totals.len() - 1]
    );
    println!(
        "    GET during fan-out: {} GETs, p50 {:?}, p99 {:?}, max {:?}",
        during.len(),
        pct(&during, 0.5),
        pct(&during, 0.99),
        during[during.len() - 1]
    );
    println!(
        "    GET baseline (no fan-out): {} GETs, p50 {:?}, p99 {:?}",
        base.len(),
        pct(&base, 0.5),
        pct(&base, 0.99)
    );
}

/// Redis's nearest equivalent of a WATCHEX fan-out: PUBLISH to 10,000
/// subscribers, measured with the same single-threaded reader.
fn redis_publish_fan_out() {
    let Ok((_redis, addr)) = start_bin("redis-server", &["--maxclients", "15000"]) else {
        println!("(c) redis-server not found: skipped");
        return;
    };
    let mut admin = connect(addr);
    let mut subs: Vec<TcpStream> = Vec::with_capacity(WATCHERS);
    let req = enc(&["SUBSCRIBE", "shared"]);
    for i in 0..WATCHERS {
        let mut c = connect(addr);
        c.write_all(&req).unwrap();
        subs.push(c);
        if i % 100 == 99 {
            for c in &mut subs[i - 99..] {
                expect(c, b"*3\r\n$9\r\nsubscribe\r\n$6\r\nshared\r\n:1\r\n");
            }
        }
    }
    let msg = b"*3\r\n$7\r\nmessage\r\n$6\r\nshared\r\n$3\r\nDEL\r\n";
    let mut totals = Vec::new();
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(20));
        let t0 = Instant::now();
        admin
            .write_all(&enc(&["PUBLISH", "shared", "DEL"]))
            .unwrap();
        expect(&mut admin, b":10000\r\n");
        for c in subs.iter_mut() {
            expect(c, msg);
        }
        totals.push(t0.elapsed());
    }
    totals.sort();
    println!(
        "(c) Redis PUBLISH fan-out to {WATCHERS} subscribers, 5 rounds: all delivered in median {:?} (min {:?}, max {:?})",
        pct(&totals, 0.5),
        totals[0],
        totals[totals.len() - 1]
    );
}

fn main() {
    {
        let (_server, addr) = start_server();
        close_to_del(addr);
        fan_out(addr);
    }
    redis_publish_fan_out();
}
