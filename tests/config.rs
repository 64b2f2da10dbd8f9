//! The CONFIG table against redis-server 7.0.15's, at run time: both
//! servers start on free ports and `CONFIG GET *` must list the same names
//! (latchkey's own `tp-*` directives aside) with the same values (but
//! for the few that say where and how each server runs), so the table
//! cannot drift from Redis's.

mod common;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A redis-server child, killed when dropped (so a failed assertion
/// leaves no server behind).
struct Redis(Child);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_redis(dir: &TempDir) -> (Redis, std::net::SocketAddr) {
    require_tool("redis-server", "redis-server");
    let port = free_port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string()])
        .args(["--bind", "127.0.0.1"])
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .args(["--dir", &dir.path()])
        .args(["--logfile", ""])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server starts");
    let redis = Redis(child);
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + WAIT;
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (redis, addr)
}

/// `CONFIG GET *` as name -> value.
fn config_all(addr: std::net::SocketAddr) -> BTreeMap<String, String> {
    let mut c = Conn::ready(addr);
    c.send(&["CONFIG", "GET", "*"]);
    let V::Arr(items) = c.frame() else {
        panic!("CONFIG GET * is not an array")
    };
    let text = |v: &V| match v {
        V::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("not a bulk string: {other:?}"),
    };
    items
        .chunks(2)
        .map(|p| (text(&p[0]), text(&p[1])))
        .collect()
}

#[test]
fn config_get_all_matches_redis() {
    let dir = TempDir::new("config-table");
    let (_redis, redis_addr) = start_redis(&dir);
    let h = start();
    let redis = config_all(redis_addr);
    let mut ours = config_all(h.addr);
    assert_eq!(ours.remove("tp-session-timeout").as_deref(), Some("0"));
    assert_eq!(ours.remove("tp-failover-grace").as_deref(), Some("10000"));
    assert_eq!(ours.remove("tp-min-acks").as_deref(), Some("0"));
    assert_eq!(ours.remove("tp-min-acks-timeout").as_deref(), Some("1000"));
    let names = |m: &BTreeMap<String, String>| m.keys().cloned().collect::<Vec<_>>();
    let missing: Vec<_> = redis.keys().filter(|k| !ours.contains_key(*k)).collect();
    let extra: Vec<_> = ours.keys().filter(|k| !redis.contains_key(*k)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing in latchkey: {missing:?}; not in Redis: {extra:?}"
    );
    assert_eq!(names(&redis), names(&ours));
    // Where each server runs, and what latchkey's tests turn on.
    const SITE: &[&str] = &["port", "dir", "bind", "maxclients"];
    let differ: Vec<String> = redis
        .iter()
        .filter(|(k, v)| !SITE.contains(&k.as_str()) && ours[*k] != **v)
        .map(|(k, v)| format!("{k}: redis {v:?}, latchkey {:?}", ours[k]))
        .collect();
    assert!(differ.is_empty(), "{differ:#?}");
}

/// `key-load-delay` (µs per key, Redis's testing knob) slows an RDB load
/// (DEBUG RELOAD) by that much per key; at 0 the load is quick again.
#[test]
fn key_load_delay_slows_each_key_loaded() {
    let h = start_debug();
    let mut c = Conn::ready(h.addr);
    for i in 0..50 {
        c.call(&["SET", &format!("k{i}"), "v"]);
    }
    let reload = |c: &mut Conn| {
        let t = Instant::now();
        assert_eq!(c.call_str(&["DEBUG", "RELOAD"]), "+OK\r\n");
        t.elapsed()
    };
    assert_eq!(
        c.call_str(&["CONFIG", "SET", "key-load-delay", "4000"]),
        "+OK\r\n"
    );
    let slow = reload(&mut c);
    assert!(slow >= Duration::from_millis(200), "{slow:?}");
    assert_eq!(c.call_str(&["DBSIZE"]), ":50\r\n");
    assert_eq!(
        c.call_str(&["CONFIG", "SET", "key-load-delay", "0"]),
        "+OK\r\n"
    );
    let quick = reload(&mut c);
    assert!(quick < slow, "{quick:?} vs {slow:?}");
}

/// `shutdown-on-sigterm`: `nosave` skips the snapshot the save rules
/// would write, `save` writes one without save rules (SHUTDOWN's options).
#[test]
fn shutdown_on_sigterm_flags() {
    let bin = env!("CARGO_BIN_EXE_latchkey-server");
    for (args, saved) in [
        (
            &["--save", "3600 1", "--shutdown-on-sigterm", "nosave"][..],
            false,
        ),
        (
            &["--save", "", "--shutdown-on-sigterm", "save now"][..],
            true,
        ),
        (
            &["--save", "", "--shutdown-on-sigterm", "default"][..],
            false,
        ),
    ] {
        let dir = TempDir::new("sigterm");
        let mut s = Proc::spawn(bin, &dir, args);
        assert_eq!(s.started(), None, "{args:?}");
        let mut c = Conn::ready(s.addr);
        c.call(&["SET", "k", "v"]);
        // SAFETY: a signal to the child this test started.
        unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
        assert!(s.exited().success(), "{args:?}");
        assert_eq!(dir.0.join("dump.rdb").exists(), saved, "{args:?}");
    }
}

/// INFO replication shows `repl-backlog-size` (before any replica, as
/// Redis); CONFIG SET raises a smaller size to 16 KB, as Redis's
/// resizeReplicationBacklog; `min_slaves_good_slaves` is shown while
/// `min-replicas-to-write` is in force.
#[test]
fn repl_backlog_size_in_info() {
    let h = start();
    let mut c = Conn::ready(h.addr);
    let size =
        |c: &mut Conn| info_field(&c.call_str(&["INFO", "replication"]), "repl_backlog_size");
    assert_eq!(size(&mut c), "1048576");
    assert_eq!(
        c.call_str(&["CONFIG", "SET", "repl-backlog-size", "5mb"]),
        "+OK\r\n"
    );
    assert_eq!(size(&mut c), "5242880");
    assert_eq!(
        c.call_str(&["CONFIG", "SET", "repl-backlog-size", "100"]),
        "+OK\r\n"
    );
    assert_eq!(size(&mut c), "16384");
    assert_eq!(
        c.call_str(&["CONFIG", "GET", "repl-backlog-size"]),
        "*2\r\n$17\r\nrepl-backlog-size\r\n$5\r\n16384\r\n"
    );
    // min_slaves_good_slaves only while min-replicas-to-write is in force.
    let good = |c: &mut Conn| {
        c.call_str(&["INFO", "replication"])
            .lines()
            .find_map(|l| l.strip_prefix("min_slaves_good_slaves:").map(String::from))
    };
    assert_eq!(good(&mut c), None);
    c.call(&["CONFIG", "SET", "min-replicas-to-write", "2"]);
    assert_eq!(good(&mut c).as_deref(), Some("0"));
    c.call(&["CONFIG", "SET", "min-replicas-max-lag", "0"]);
    assert_eq!(good(&mut c), None);
}
