//! `maxmemory-clients` (client eviction), side by side with redis-server
//! 7.0.15: each scenario runs on both and must end the same way (which
//! clients are disconnected, which commands ran, INFO's evicted_clients).
//! The scenarios follow what Redis's own tests/unit/client-eviction.tcl
//! checks: a client over the limit through its arguments, a half-sent
//! request, a percentage of maxmemory, a transaction, watched keys,
//! subscriptions, unread replies; CLIENT NO-EVICT; a lowered limit
//! evicting only until the clients fit, largest first.

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;

/// A connection named `name`.
fn named(addr: SocketAddr, name: &str) -> Conn {
    let mut c = Conn::new(addr);
    assert_eq!(c.cmd(&["CLIENT", "SETNAME", name]), ok());
    c
}

fn client_list(ctl: &mut Conn) -> String {
    match ctl.cmd(&["CLIENT", "LIST"]) {
        V::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("CLIENT LIST: {other:?}"),
    }
}

/// A field of the client named `name` in CLIENT LIST, if it is there.
fn field(ctl: &mut Conn, name: &str, f: &str) -> Option<i64> {
    let list = client_list(ctl);
    let line = list
        .lines()
        .find(|l| l.contains(&format!(" name={name} ")))?;
    line.split(' ')
        .find_map(|kv| kv.strip_prefix(&format!("{f}=")))
        .and_then(|v| v.parse().ok())
}

fn exists(ctl: &mut Conn, name: &str) -> bool {
    field(ctl, name, "id").is_some()
}

/// Waits (bounded) until the client named `name` is gone; false if it
/// is still there after 5 s.
fn gone(ctl: &mut Conn, name: &str) -> bool {
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        if !exists(ctl, name) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Whether the server closed `c` (EOF within 5 s, whatever came before).
fn closed(c: &mut Conn) -> bool {
    c.read_all(Duration::from_secs(5)).1
}

/// A request announcing a bulk of `n` bytes, sent without its end.
fn half_request(c: &mut Conn, n: usize) {
    let mut req = format!("*1\r\n${n}\r\n").into_bytes();
    req.resize(req.len() + n, b'v');
    let _ = c.s.write_all(&req);
}

fn evicted_clients(ctl: &mut Conn) -> i64 {
    let info = ctl.call_str(&["INFO", "stats"]);
    info_field(&info, "evicted_clients").parse().unwrap()
}

fn set(ctl: &mut Conn, name: &str, value: &str) {
    assert_eq!(ctl.cmd(&["CONFIG", "SET", name, value]), ok(), "{name}");
}

/// Runs `scenario` on Redis and on latchkey; each returns what it saw,
/// which must be equal, and hold each of `expect`.
fn both(what: &str, expect: &[&str], scenario: impl Fn(SocketAddr) -> String) {
    let redis = RealRedis::start();
    let want = scenario(redis.addr);
    drop(redis);
    for e in expect {
        assert!(want.contains(e), "{what}: Redis saw\n{want}\nnot {e}");
    }
    let h = start();
    let got = scenario(h.addr);
    assert_eq!(
        got, want,
        "{what}: latchkey (left) and Redis (right) differ"
    );
}

const LIMIT: usize = 3_000_000;

#[test]
fn arguments_and_half_sent_requests() {
    both(
        "arguments",
        &["closed true\nBulk([118])\ngone true", "evicted 2"],
        |addr| {
            let mut ctl = named(addr, "control");
            assert_eq!(ctl.cmd(&["CLIENT", "NO-EVICT", "on"]), ok());
            set(&mut ctl, "maxmemory-clients", &LIMIT.to_string());
            let mut out = Vec::new();
            // Arguments under the limit run; over it, the command does not
            // run and its client is disconnected.
            let mut c = named(addr, "argv");
            let big = "v".repeat(1_000_000);
            out.push(format!("{:?}", c.cmd(&["MSET", "k", "v", "k2", &big])));
            let bigger = "w".repeat(LIMIT);
            c.send(&["MSET", "k", "ran", "k2", &bigger]);
            out.push(format!("closed {}", closed(&mut c)));
            out.push(format!("{:?}", ctl.cmd(&["GET", "k"])));
            out.push(format!("gone {}", gone(&mut ctl, "argv")));
            // A bulk announced and only partly sent, past the limit.
            let mut c = named(addr, "qbuf");
            half_request(&mut c, LIMIT);
            out.push(format!("closed {}", closed(&mut c)));
            out.push(format!("gone {}", gone(&mut ctl, "qbuf")));
            out.push(format!("evicted {}", evicted_clients(&mut ctl)));
            out.join("\n")
        },
    );
}

#[test]
fn a_percentage_of_maxmemory() {
    both(
        "percentage",
        &[
            "half under the limit true\nclosed true\nhalf still there true",
            "free still there true",
        ],
        |addr| {
            let mut ctl = named(addr, "control");
            assert_eq!(ctl.cmd(&["CLIENT", "NO-EVICT", "on"]), ok());
            set(&mut ctl, "maxmemory", "6mb");
            set(&mut ctl, "maxmemory-clients", "7%");
            assert_eq!(
                ctl.cmd(&["CONFIG", "GET", "maxmemory-clients"]),
                V::Arr(vec![b("maxmemory-clients"), b("7%")])
            );
            let limit = 6 * 1024 * 1024 * 7 / 100;
            let mut out = Vec::new();
            // Half the limit stays; the limit itself goes.
            let mut c = named(addr, "half");
            half_request(&mut c, limit / 2);
            eventually("the half request is read", || {
                field(&mut ctl, "half", "qbuf").unwrap_or(0) >= (limit / 2) as i64
            });
            let tot = field(&mut ctl, "half", "tot-mem").unwrap();
            out.push(format!("half under the limit {}", tot < limit as i64));
            let mut c2 = named(addr, "whole");
            half_request(&mut c2, limit);
            out.push(format!("closed {}", closed(&mut c2)));
            out.push(format!("half still there {}", exists(&mut ctl, "half")));
            set(&mut ctl, "maxmemory", "0");
            // With maxmemory 0 a percentage means no limit.
            let mut c3 = named(addr, "free");
            half_request(&mut c3, 2 * limit);
            eventually("the request is read", || {
                field(&mut ctl, "free", "qbuf").unwrap_or(0) >= 2 * limit as i64
            });
            out.push(format!("free still there {}", exists(&mut ctl, "free")));
            drop(c);
            out.join("\n")
        },
    );
}

#[test]
fn transactions_watches_and_subscriptions() {
    both(
        "per-client state",
        &[
            "gone true",
            "WATCH: stopped true gone true",
            "SSUBSCRIBE: stopped true gone true",
            "evicted 5",
        ],
        |addr| {
            let mut ctl = named(addr, "control");
            assert_eq!(ctl.cmd(&["CLIENT", "NO-EVICT", "on"]), ok());
            set(&mut ctl, "maxmemory-clients", &LIMIT.to_string());
            let mut out = Vec::new();
            // Commands queued in MULTI count until EXEC.
            let mut c = named(addr, "multi");
            let quarter = "v".repeat(LIMIT / 4);
            assert_eq!(c.cmd(&["MULTI"]), ok());
            c.cmd(&["SET", "k", &quarter]);
            c.cmd(&["SET", "k", &quarter]);
            out.push(format!("{:?}", c.cmd(&["EXEC"])));
            assert_eq!(c.cmd(&["MULTI"]), ok());
            let mut queued = 0;
            for _ in 0..5 {
                c.send(&["SET", "k", &quarter]);
                match c.frame_unless_closed(Duration::from_secs(5)) {
                    Some(V::Simple(s)) if s == "QUEUED" => queued += 1,
                    _ => break,
                }
            }
            out.push(format!("queued {queued} gone {}", gone(&mut ctl, "multi")));
            // Watched keys, subscriptions: small each, many pass a small limit.
            set(&mut ctl, "maxmemory-clients", "200000");
            for (cmd, name) in [
                ("WATCH", "watch"),
                ("SUBSCRIBE", "sub"),
                ("PSUBSCRIBE", "psub"),
                ("SSUBSCRIBE", "ssub"),
            ] {
                let mut c = named(addr, name);
                let mut n = 0;
                while n < 200_000 {
                    c.send(&[cmd, &n.to_string()]);
                    if c.frame_unless_closed(Duration::from_secs(5)).is_none() {
                        break;
                    }
                    n += 1;
                }
                out.push(format!(
                    "{cmd}: stopped {} gone {}",
                    n < 200_000,
                    gone(&mut ctl, name)
                ));
            }
            out.push(format!("evicted {}", evicted_clients(&mut ctl)));
            out.join("\n")
        },
    );
}

/// Replies the client does not read grow its memory until it is evicted,
/// before it is seen over the limit.
#[test]
fn unread_replies() {
    both(
        "unread replies",
        &["evicted true seen over the limit false"],
        |addr| {
            let mut ctl = named(addr, "control");
            assert_eq!(ctl.cmd(&["CLIENT", "NO-EVICT", "on"]), ok());
            set(&mut ctl, "maxmemory-clients", &LIMIT.to_string());
            ctl.cmd(&["SETRANGE", "k", "200000", "v"]);
            let mut c = named(addr, "reader");
            assert!(matches!(c.cmd(&["GET", "k"]), V::Bulk(v) if v.len() == 200_001));
            let mut over = false;
            let mut sent = 0;
            while sent < 2000 {
                match field(&mut ctl, "reader", "tot-mem") {
                    None => break,
                    Some(m) => over |= m >= LIMIT as i64,
                }
                c.send(&["GET", "k"]);
                sent += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            format!(
                "evicted {} seen over the limit {over}",
                !exists(&mut ctl, "reader")
            )
        },
    );
}

#[test]
fn no_evict_and_lowering_the_limit() {
    both(
        "no-evict",
        &["noevict-on over the limit true\nnoevict-off closed true\nall ten true\nsome left true"],
        |addr| {
            let mut ctl = named(addr, "control");
            assert_eq!(ctl.cmd(&["CLIENT", "NO-EVICT", "on"]), ok());
            set(&mut ctl, "maxmemory-clients", &LIMIT.to_string());
            let mut out = Vec::new();
            for on in ["on", "off"] {
                let name = format!("noevict-{on}");
                let mut c = named(addr, &name);
                assert_eq!(c.cmd(&["CLIENT", "NO-EVICT", on]), ok());
                half_request(&mut c, LIMIT + 1);
                if on == "on" {
                    eventually("the request is read", || {
                        field(&mut ctl, &name, "qbuf").unwrap_or(0) >= (LIMIT + 1) as i64
                    });
                    let tot = field(&mut ctl, &name, "tot-mem").unwrap();
                    out.push(format!("{name} over the limit {}", tot > LIMIT as i64));
                    drop(c);
                    assert!(gone(&mut ctl, &name));
                } else {
                    out.push(format!("{name} closed {}", closed(&mut c)));
                }
            }
            // Ten clients with 300 KB requests half sent fit 4 MB; at 2 MB
            // some go, not all.
            set(&mut ctl, "maxmemory-clients", "4mb");
            let mut held = Vec::new();
            for j in 0..10 {
                let name = format!("client{j}");
                let mut c = named(addr, &name);
                half_request(&mut c, 300_000);
                eventually("the request is read", || {
                    field(&mut ctl, &name, "qbuf").unwrap_or(0) >= 300_000
                });
                held.push(c);
            }
            let count = |ctl: &mut Conn| client_list(ctl).matches(" name=client").count();
            out.push(format!("all ten {}", count(&mut ctl) == 10));
            set(&mut ctl, "maxmemory-clients", "2mb");
            let left = count(&mut ctl);
            out.push(format!("some left {}", left > 0 && left < 10));
            out.join("\n")
        },
    );
}

/// Three sizes of clients; lowering the limit step by step evicts the
/// largest first, and only as many as needed.
#[test]
fn largest_first_and_only_until_under_the_limit() {
    both(
        "order",
        &[
            "size 2: [3, 3, 0]",
            "size 1: [3, 0, 0]",
            "size 0: [0, 0, 0]",
            "evicted 9",
        ],
        |addr| {
            let mut ctl = named(addr, "control");
            assert_eq!(ctl.cmd(&["CLIENT", "NO-EVICT", "on"]), ok());
            set(&mut ctl, "maxmemory-clients", "0");
            let sizes = [128 * 1024, 1024 * 1024, 3 * 1024 * 1024];
            let mut held = Vec::new();
            let mut mem = Vec::new();
            for (i, size) in sizes.iter().enumerate() {
                for j in 0..3 {
                    let name = format!("size{i}-{j}");
                    let mut c = named(addr, &name);
                    half_request(&mut c, *size);
                    eventually("the request is read", || {
                        field(&mut ctl, &name, "qbuf").unwrap_or(0) >= *size as i64
                    });
                    held.push(c);
                }
                mem.push(
                    (0..3)
                        .map(|j| field(&mut ctl, &format!("size{i}-{j}"), "tot-mem").unwrap())
                        .max()
                        .unwrap(),
                );
            }
            let mut out = Vec::new();
            let mut total: i64 = mem.iter().map(|m| 3 * m).sum();
            for i in (0..3).rev() {
                total -= 3 * mem[i];
                let control = field(&mut ctl, "control", "tot-mem").unwrap();
                set(
                    &mut ctl,
                    "maxmemory-clients",
                    &(total + control).to_string(),
                );
                let list = client_list(&mut ctl);
                let counts: Vec<usize> = (0..3)
                    .map(|k| list.matches(&format!(" name=size{k}-")).count())
                    .collect();
                out.push(format!("limit below size {i}: {counts:?}"));
            }
            out.push(format!("evicted {}", evicted_clients(&mut ctl)));
            out.join("\n")
        },
    );
}
