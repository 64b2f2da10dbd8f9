//! Protocol-level tests against an in-process server: fragmentation, pipelining,
//! inline commands, every Redis 7 protocol error (exact text, connection closed
//! after it), memory bounds for announced-but-unsent bulks, slow readers,
//! maxclients, idle timeout and graceful shutdown.
//!
//! Expected bytes were taken from real Redis 7.0.15; `matches_real_redis`
//! re-checks them against a `redis-server` started by the test when one is
//! installed.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use latchkey_server::config::Config;

mod common;
use common::*;

/// Tests that measure memory or flood the server take turns.
static HEAVY: Mutex<()> = Mutex::new(());

fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

/// A pipeline mixing multibulk and inline requests, and its exact replies.
fn mixed_pipeline(tag: &str) -> (Vec<u8>, Vec<u8>) {
    let key = format!("frag:{tag}");
    let k = key.as_bytes();
    let mut req = Vec::new();
    let mut rep = Vec::new();
    req.extend(encode(&[b"SET", k, b"hello\r\nworld"]));
    rep.extend_from_slice(b"+OK\r\n");
    req.extend(encode(&[b"GET", k]));
    rep.extend(bulk(b"hello\r\nworld"));
    req.extend_from_slice(b"PING\r\n");
    rep.extend_from_slice(b"+PONG\r\n");
    req.extend_from_slice(format!("set {key} \"a b\\x41\"\n").as_bytes());
    rep.extend_from_slice(b"+OK\r\n");
    req.extend_from_slice(format!("\r\nGET {key}\r\n").as_bytes());
    rep.extend(bulk(b"a bA"));
    req.extend(encode(&[b"DEL", k]));
    rep.extend_from_slice(b":1\r\n");
    req.extend(encode(&[b"GET", k]));
    rep.extend_from_slice(b"$-1\r\n");
    req.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
    rep.extend_from_slice(b"+PONG\r\n");
    (req, rep)
}

#[test]
fn pipeline_sent_byte_by_byte() {
    let srv = start();
    let mut s = Conn::new(srv.addr);
    let (req, rep) = mixed_pipeline("bytes");
    for (i, b) in req.iter().enumerate() {
        s.write_all(&[*b]).unwrap();
        s.flush().unwrap();
        // Pause now and then so the server really sees partial frames.
        if i % 8 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert_eq!(
        String::from_utf8_lossy(&s.bytes(rep.len())),
        String::from_utf8_lossy(&rep)
    );
}

#[test]
fn pipeline_split_at_every_position() {
    let srv = start();
    let (req, rep) = mixed_pipeline("split");
    for cut in 0..=req.len() {
        let mut s = Conn::new(srv.addr);
        s.write_all(&req[..cut]).unwrap();
        // Let the server read and parse the first part on its own.
        std::thread::sleep(Duration::from_millis(2));
        s.write_all(&req[cut..]).unwrap();
        let got = s.bytes(rep.len());
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&rep),
            "split at {cut}"
        );
    }
}

#[test]
fn pipeline_of_1000_commands_in_one_write() {
    let srv = start();
    let mut s = Conn::new(srv.addr);
    let mut req = Vec::new();
    let mut expected = Vec::new();
    for i in 0..1000 {
        let key = format!("p1000:{}", i / 2);
        if i % 2 == 0 {
            req.extend(encode(&[
                b"SET",
                key.as_bytes(),
                format!("v{i}").as_bytes(),
            ]));
            expected.push(b"+OK\r\n".to_vec());
        } else {
            req.extend(encode(&[b"GET", key.as_bytes()]));
            expected.push(bulk(format!("v{}", i - 1).as_bytes()));
        }
    }
    s.write_all(&req).unwrap();
    let got = s.replies_raw(1000);
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(
            String::from_utf8_lossy(g),
            String::from_utf8_lossy(e),
            "reply {i}"
        );
    }
}

#[test]
fn inline_commands() {
    let srv = start();
    let mut s = Conn::new(srv.addr);
    let cases: &[(&[u8], &[u8])] = &[
        (b"PING\r\n", b"+PONG\r\n"),
        (b"ping\n", b"+PONG\r\n"),
        (b"  PING  \r\n", b"+PONG\r\n"),
        // Empty lines are skipped without a reply.
        (b"\r\n\n\r\nPING\r\n", b"+PONG\r\n"),
        (b"SET in:1 \"a\\x41\\x4g\\n\\t\\\"\"\r\n", b"+OK\r\n"),
        (b"GET in:1\r\n", b"$8\r\naAx4g\n\t\"\r\n"),
        (b"SET 'in:2' 'it\\'s \\n'\r\n", b"+OK\r\n"),
        (b"GET in:2\r\n", b"$7\r\nit's \\n\r\n"),
        (b"SET \"in 3\" \"\"\r\n", b"+OK\r\n"),
        (b"GET \"in 3\"\r\n", b"$0\r\n\r\n"),
        (b"SET\tin:4\t\x0bx\r\n", b"+OK\r\n"),
        (b"GET in:4\r\n", b"$1\r\nx\r\n"),
        // \v inside a token is part of it.
        (b"SET in:5 a\x0bb\r\n", b"+OK\r\n"),
        (b"GET in:5\r\n", b"$3\r\na\x0bb\r\n"),
        // A bare \r inside the line separates tokens.
        (b"GET\rin:4\r\n", b"$1\r\nx\r\n"),
        (
            b"\"\"\r\n",
            b"-ERR unknown command '', with args beginning with: \r\n",
        ),
    ];
    for (req, rep) in cases {
        s.write_all(req).unwrap();
        let got = s.bytes(rep.len());
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(rep),
            "request {:?}",
            String::from_utf8_lossy(req)
        );
    }
    // Nothing extra was sent.
    let (rest, closed) = s.read_all(Duration::from_millis(100));
    assert!(rest.is_empty() && !closed);
}

/// Protocol errors: (request, full reply) — each request starts with a
/// command whose reply must still arrive, and the server must then close.
fn error_cases() -> Vec<(&'static str, Vec<u8>, Vec<u8>)> {
    let pre = b"*1\r\n$4\r\nPING\r\n".to_vec();
    let pong = b"+PONG\r\n".to_vec();
    let err = |m: &str| {
        let mut v = pong.clone();
        v.extend_from_slice(format!("-ERR Protocol error: {m}\r\n").as_bytes());
        v
    };
    let with = |tail: &[u8]| {
        let mut v = pre.clone();
        v.extend_from_slice(tail);
        v
    };
    // Sizes are chosen so the limit is crossed by the very last byte: the
    // server has read everything when it closes, so no RST can eat the reply.
    let mut too_big_bulk = b"*1\r\n$".to_vec();
    too_big_bulk.resize(4 + 65537, b'1');
    let mut too_big_mbulk = b"*".to_vec();
    too_big_mbulk.resize(65537, b'1');
    vec![
        (
            "multibulk length",
            with(b"*abc\r\n"),
            err("invalid multibulk length"),
        ),
        (
            "multibulk -0",
            with(b"*-0\r\n"),
            err("invalid multibulk length"),
        ),
        (
            "multibulk over INT_MAX",
            with(b"*2147483648\r\n"),
            err("invalid multibulk length"),
        ),
        (
            "multibulk leading zero",
            with(b"*01\r\n$4\r\nPING\r\n"),
            err("invalid multibulk length"),
        ),
        (
            "expected $",
            with(b"*1\r\nx\r\n"),
            err("expected '$', got 'x'"),
        ),
        (
            "expected $ got CR",
            with(b"*2\r\n$4\r\nECHO\r\n\r\n"),
            err("expected '$', got ' '"),
        ),
        (
            "negative bulk",
            with(b"*1\r\n$-5\r\n"),
            err("invalid bulk length"),
        ),
        (
            "non-numeric bulk",
            with(b"*1\r\n$abc\r\n"),
            err("invalid bulk length"),
        ),
        (
            "bulk over 512MB",
            with(b"*1\r\n$536870913\r\n"),
            err("invalid bulk length"),
        ),
        (
            "bulk with plus",
            with(b"*1\r\n$+4\r\nPING\r\n"),
            err("invalid bulk length"),
        ),
        (
            "too big inline",
            with(&[b'a'; 65537]),
            err("too big inline request"),
        ),
        (
            "too big mbulk count",
            with(&too_big_mbulk),
            err("too big mbulk count string"),
        ),
        (
            "too big bulk count",
            with(&too_big_bulk),
            err("too big bulk count string"),
        ),
        (
            "unbalanced double quote",
            with(b"SET k \"abc\r\n"),
            err("unbalanced quotes in request"),
        ),
        (
            "unbalanced single quote",
            with(b"SET k 'abc\r\n"),
            err("unbalanced quotes in request"),
        ),
        (
            "text after closing quote",
            with(b"SET k \"a\"b\r\n"),
            err("unbalanced quotes in request"),
        ),
    ]
}

#[test]
fn protocol_errors_reply_then_close() {
    let srv = start();
    for (name, req, rep) in error_cases() {
        let mut s = Conn::new(srv.addr);
        s.write_all(&req).unwrap();
        let (got, closed) = s.read_all(Duration::from_secs(5));
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&rep),
            "{name}"
        );
        assert!(closed, "{name}: connection left open");
    }
    // The server is still fine for others.
    let mut s = Conn::new(srv.addr);
    s.write_all(b"PING\r\n").unwrap();
    assert_eq!(s.bytes(7), b"+PONG\r\n");
}

#[test]
fn incomplete_frames_wait_without_error() {
    let srv = start();
    // Redis waits (no reply, no close) for all of these.
    let cases: &[&[u8]] = &[
        b"*1\r\n$4\r\nPI",
        b"*1\r\nx",
        b"*1048577\r\n",
        b"*2147483647\r\n$1\r\na\r\n",
        b"*1\r\n$536870912\r\n",
        b"PI\x00NG\r\n",
        b"*1\x00\r\n",
    ];
    for req in cases {
        let mut s = Conn::new(srv.addr);
        s.write_all(req).unwrap();
        let (got, closed) = s.read_all(Duration::from_millis(150));
        assert!(
            got.is_empty() && !closed,
            "{:?}: got {:?}, closed {closed}",
            String::from_utf8_lossy(req),
            String::from_utf8_lossy(&got)
        );
    }
}

fn proc_status_kb(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn announced_huge_bulk_is_not_allocated_up_front() {
    if !std::path::Path::new("/proc/self/status").exists() {
        return;
    }
    let _g = heavy();
    let srv = start();
    let mut probe = Conn::new(srv.addr);
    probe.write_all(b"PING\r\n").unwrap();
    probe.bytes(7);
    let (data0, rss0) = (proc_status_kb("VmData:"), proc_status_kb("VmRSS:"));

    let mut s = Conn::new(srv.addr);
    s.write_all(b"*3\r\n$3\r\nSET\r\n$4\r\nhuge\r\n$536870912\r\n")
        .unwrap();
    let mb = vec![b'x'; 64 * 1024];
    for _ in 0..16 {
        s.write_all(&mb).unwrap();
    }
    // Wait until the server has read the megabyte (it answers others meanwhile).
    std::thread::sleep(Duration::from_millis(200));
    probe.write_all(b"PING\r\n").unwrap();
    assert_eq!(probe.bytes(7), b"+PONG\r\n");
    let (data1, rss1) = (proc_status_kb("VmData:"), proc_status_kb("VmRSS:"));
    let grew_data_mb = data1.saturating_sub(data0) / 1024;
    let grew_rss_mb = rss1.saturating_sub(rss0) / 1024;
    assert!(
        grew_data_mb < 256,
        "allocated {grew_data_mb} MB for a 512 MB bulk of which 1 MB was sent"
    );
    assert!(grew_rss_mb < 64, "RSS grew {grew_rss_mb} MB");
    drop(s);

    // Nothing was stored and the server still works.
    std::thread::sleep(Duration::from_millis(50));
    probe.write_all(&encode(&[b"EXISTS", b"huge"])).unwrap();
    assert_eq!(probe.bytes(4), b":0\r\n");
}

#[test]
fn client_that_never_reads_does_not_stall_others() {
    let _g = heavy();
    let srv = start();
    let mut setter = Conn::new(srv.addr);
    let value = vec![b'v'; 100 * 1024];
    setter
        .write_all(&encode(&[b"SET", b"big", &value]))
        .unwrap();
    assert_eq!(setter.bytes(5), b"+OK\r\n");

    // 400 GETs = 40 MB of replies that are never read.
    let mut hog = Conn::new(srv.addr);
    let get = encode(&[b"GET", b"big"]);
    let mut req = Vec::new();
    for _ in 0..400 {
        req.extend_from_slice(&get);
    }
    hog.write_all(&req).unwrap();
    std::thread::sleep(Duration::from_millis(200));

    let mut other = Conn::new(srv.addr);
    for _ in 0..20 {
        let t = Instant::now();
        other.write_all(b"PING\r\n").unwrap();
        assert_eq!(other.bytes(7), b"+PONG\r\n");
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "PING took {:?} while another client was not reading",
            t.elapsed()
        );
    }
    // Writes from others are visible too (the store lock is not held while
    // the hog's replies wait for socket space).
    other.write_all(&encode(&[b"SET", b"small", b"1"])).unwrap();
    assert_eq!(other.bytes(5), b"+OK\r\n");
    drop(hog);
}

#[test]
fn maxclients_reply() {
    let srv = start_with(Config {
        port: 0,
        maxclients: 2,
        ..Default::default()
    });
    let mut a = Conn::new(srv.addr);
    let mut b = Conn::new(srv.addr);
    for s in [&mut a, &mut b] {
        s.write_all(b"PING\r\n").unwrap();
        assert_eq!(s.bytes(7), b"+PONG\r\n");
    }
    let mut c = Conn::new(srv.addr);
    let (got, closed) = c.read_all(Duration::from_secs(5));
    assert_eq!(
        String::from_utf8_lossy(&got),
        "-ERR max number of clients reached\r\n"
    );
    assert!(closed);
    // A slot frees up when a client leaves.
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut d = Conn::new(srv.addr);
        let _ = d.write_all(b"PING\r\n");
        let (got, _) = d.read_all(Duration::from_secs(2));
        if got == b"+PONG\r\n" {
            break;
        }
        assert!(Instant::now() < deadline, "slot never freed: {got:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn idle_timeout_closes_client() {
    let srv = start_with(Config {
        port: 0,
        timeout: 1,
        ..Default::default()
    });
    let mut s = Conn::new(srv.addr);
    // Timed from before the PING: the server's idle clock starts when it
    // reads it.
    let t = Instant::now();
    s.write_all(b"PING\r\n").unwrap();
    assert_eq!(s.bytes(7), b"+PONG\r\n");
    let (rest, closed) = s.read_all(Duration::from_secs(5));
    assert!(rest.is_empty() && closed, "expected close, got {rest:?}");
    let idle = t.elapsed();
    assert!(
        idle >= Duration::from_millis(900) && idle < Duration::from_secs(4),
        "closed after {idle:?}"
    );
    // An active client is not closed.
    let mut busy = Conn::new(srv.addr);
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(300));
        busy.write_all(b"PING\r\n").unwrap();
        assert_eq!(busy.bytes(7), b"+PONG\r\n");
    }
}

#[test]
fn graceful_shutdown_finishes_in_flight_replies() {
    let _g = heavy();
    let srv = start();
    let mut s = Conn::new(srv.addr);
    let value = vec![b'z'; 100 * 1024];
    s.write_all(&encode(&[b"SET", b"big", &value])).unwrap();
    assert_eq!(s.bytes(5), b"+OK\r\n");
    // 100 replies of 100 KB: far more than the socket buffers hold, so the
    // server is mid-write when the shutdown starts.
    let n = 100;
    let mut req = Vec::new();
    for _ in 0..n {
        req.extend(encode(&[b"GET", b"big"]));
    }
    s.write_all(&req).unwrap();
    // The first reply arriving shows the server has read the requests.
    let want = bulk(&value);
    assert_eq!(s.bytes(want.len()), want);
    let stopper = std::thread::spawn(move || srv.stop());
    std::thread::sleep(Duration::from_millis(100));
    let replies = s.replies_raw(n - 1);
    assert!(replies.iter().all(|r| *r == want));
    let (rest, closed) = s.read_all(Duration::from_secs(5));
    assert!(rest.is_empty() && closed);
    stopper.join().unwrap();
}

#[test]
fn redis_crate_round_trips() {
    let srv = start();
    let client = redis::Client::open(format!("redis://{}/", srv.addr)).unwrap();
    let mut con = client.get_connection().unwrap();
    let _: () = redis::cmd("SET")
        .arg("rc:key")
        .arg(b"bin\x00\r\nary".as_slice())
        .query(&mut con)
        .unwrap();
    let v: Vec<u8> = redis::cmd("GET").arg("rc:key").query(&mut con).unwrap();
    assert_eq!(v, b"bin\x00\r\nary");
    let missing: Option<String> = redis::cmd("GET").arg("rc:none").query(&mut con).unwrap();
    assert_eq!(missing, None);
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    let (a, b, d): (String, Option<String>, i64) = redis::pipe()
        .cmd("SET")
        .arg("rc:p")
        .arg("1")
        .cmd("GET")
        .arg("rc:p")
        .cmd("DEL")
        .arg("rc:p")
        .arg("rc:key")
        .query(&mut con)
        .unwrap();
    assert_eq!((a.as_str(), b.as_deref(), d), ("OK", Some("1"), 2));
    let err = redis::cmd("NOSUCHCMD").query::<()>(&mut con).unwrap_err();
    assert!(err.to_string().contains("unknown command"), "{err}");
}

fn exchange(addr: SocketAddr, req: &[u8]) -> (Vec<u8>, bool) {
    let mut s = Conn::new(addr);
    s.write_all(req).unwrap();
    // Cases run in parallel threads; a generous quiet keeps a late reply
    // or FIN on a loaded machine from reading as a difference.
    s.read_all(Duration::from_secs(1))
}

#[test]
fn matches_real_redis() {
    // Many threads at once: keep the memory test from measuring them.
    let _g = heavy();
    let real = RealRedis::start();
    let srv = start();
    let mut cases: Vec<Vec<u8>> = error_cases().into_iter().map(|c| c.1).collect();
    let edge: &[&[u8]] = &[
        b"*-1\r\nPING\r\n",
        b"*0\r\nPING\r\n",
        b"*-9223372036854775808\r\nPING\r\n",
        b"*1\r\n$-0\r\n",
        b"*1\r\n$4\r\nPINGxx*1\r\n$4\r\nPING\r\n",
        b"*1\r\n$4\rXPING\r\n",
        b"PING\rPING\r\n",
        b"\n\nPING\n",
        b"*1\r\nxyz",
        b"*1\r\n$4\x00\r\nPING\r\n",
        b"GET \"a\x00b\"\r\n",
        b"SET k1 'a'\x0c\r\nGET k1\r\n",
        b"SET k2 \"\\x4\"\r\nGET k2\r\n",
        b"SET k3 a\x0bb\r\nGET k3\r\n",
        b"*2\r\n$4\r\nPING\r\n:1\r\n",
        b"*1\r\n$9223372036854775808\r\n",
        b"*00\r\n",
    ];
    cases.extend(edge.iter().map(|c| c.to_vec()));
    let mut diffs = Vec::new();
    std::thread::scope(|sc| {
        let handles: Vec<_> = cases
            .iter()
            .map(|req| {
                let (real, srv) = (real.addr, srv.addr);
                sc.spawn(move || {
                    let want = exchange(real, req);
                    let got = exchange(srv, req);
                    (req, want, got)
                })
            })
            .collect();
        for h in handles {
            let (req, want, got) = h.join().unwrap();
            if want != got {
                diffs.push(format!(
                    "{:?}\n  redis:    {:?} closed={}\n  latchkey: {:?} closed={}",
                    String::from_utf8_lossy(&req[..req.len().min(60)]),
                    String::from_utf8_lossy(&want.0),
                    want.1,
                    String::from_utf8_lossy(&got.0),
                    got.1
                ));
            }
        }
    });
    assert!(diffs.is_empty(), "differences:\n{}", diffs.join("\n"));
}

/// Redis's idle `timeout` spares pub/sub and blocked clients; here that is
/// watchers and queued lock waiters. A silent lock holder is closed (which
/// releases its lock), and the waiter handed the lock is not closed for
/// the time it spent waiting.
#[test]
fn idle_timeout_spares_watchers_and_waiters_not_holders() {
    let srv = start_with(Config {
        port: 0,
        timeout: 1,
        ..Default::default()
    });
    let mut holder = Conn::new(srv.addr);
    holder.write_all(&encode(&[b"SETTP", b"lk", b"h"])).unwrap();
    assert_eq!(holder.bytes(4), b":1\r\n");
    let mut waiter = Conn::new(srv.addr);
    waiter
        .write_all(&encode(&[b"SETTP", b"lk", b"w", b"QUEUE"]))
        .unwrap();
    assert_eq!(waiter.bytes(4), b":0\r\n");
    let mut watcher = Conn::new(srv.addr);
    watcher.write_all(&encode(&[b"WATCHEX", b"other"])).unwrap();
    assert_eq!(watcher.bytes(10), b"+NOEXIST\r\n");
    // All three stay silent. The holder is closed and its lock goes to
    // the waiter.
    let (rest, closed) = holder.read_all(Duration::from_secs(5));
    assert!(rest.is_empty() && closed, "{rest:?} closed={closed}");
    let push = b"*5\r\n$5\r\nsettp\r\n$2\r\nlk\r\n$8\r\nACQUIRED\r\n$1\r\nw\r\n$16\r\n";
    assert_eq!(waiter.bytes(push.len()), push);
    assert!(waiter.bytes(18).ends_with(b"\r\n"));
    // Both are still served, though idle for as long as the holder was.
    for c in [&mut waiter, &mut watcher] {
        c.write_all(b"PING\r\n").unwrap();
        assert_eq!(c.bytes(7), b"+PONG\r\n");
    }
    waiter.write_all(&encode(&[b"TPOWNER", b"lk"])).unwrap();
    let owner = waiter.replies_raw(1).remove(0);
    assert!(owner.starts_with(b":"), "{owner:?}");
}
