//! Replication, the replica's side: latchkey as the replica
//! (`REPLICAOF host port`) of a real Redis 7.0.15 primary and of a
//! latchkey primary: full sync (from the RDB file and diskless), the
//! command stream after it, a partial resync after `CLIENT KILL TYPE
//! master`, READONLY, keys with a past TTL kept until the primary's DEL,
//! ROLE and INFO, `REPLICAOF NO ONE` promoting with a sibling continuing
//! (PSYNC2). Each scenario ends with `DEBUG DIGEST` equal on both sides.
//! Every server is stopped however the test ends (handles dropped), every
//! wait is bounded.

use std::net::SocketAddr;
use std::time::Duration;

mod common;
use common::repl::*;
use common::*;

fn redis_primary(diskless: bool) -> RealRedis {
    RealRedis::start_args(&[
        "--enable-debug-command",
        "yes",
        "--repl-diskless-sync",
        if diskless { "yes" } else { "no" },
        "--repl-diskless-sync-delay",
        "0",
    ])
}

fn full_sync_from_redis(diskless: bool) {
    let r = redis_primary(diskless);
    dataset(r.addr);
    let l = latchkey(|_| {});
    replicaof(l.addr, r.addr);
    assert_same(r.addr, l.addr);
    live_writes(r.addr);
    assert_same(r.addr, l.addr);
    // The one key expiring on the primary reached us as a DEL.
    assert_eq!(Conn::new(l.addr).cmd(&["EXISTS", "short"]), V::Int(0));
    assert_eq!(Conn::new(l.addr).cmd(&["GET", "fromlua"]), b("luavalue"));
}

#[test]
fn replica_of_redis_disk_based() {
    full_sync_from_redis(false);
}

#[test]
fn replica_of_redis_diskless() {
    full_sync_from_redis(true);
}

#[test]
fn partial_resync_after_master_client_killed() {
    let r = redis_primary(false);
    dataset(r.addr);
    let l = latchkey(|_| {});
    replicaof(l.addr, r.addr);
    synced(r.addr, l.addr);
    let mut c = Conn::new(l.addr);
    let V::Bulk(list) = c.cmd(&["CLIENT", "LIST", "TYPE", "master"]) else {
        panic!("CLIENT LIST")
    };
    assert!(
        String::from_utf8_lossy(&list).contains(&format!("addr={}", r.addr)),
        "{}",
        String::from_utf8_lossy(&list)
    );
    assert_eq!(c.cmd(&["CLIENT", "KILL", "TYPE", "master"]), V::Int(1));
    Conn::new(r.addr).cmd(&["SET", "after-kill", "v"]);
    eventually("the link is back with a partial resync", || {
        info_field(&info(r.addr, "stats"), "sync_partial_ok") == "1"
    });
    assert_eq!(info_field(&info(r.addr, "stats"), "sync_full"), "1");
    assert_same(r.addr, l.addr);
    assert_eq!(Conn::new(l.addr).cmd(&["GET", "after-kill"]), b("v"));
}

#[test]
fn replica_refuses_writes_and_keeps_expired_keys() {
    let r = redis_primary(false);
    let l = latchkey(|_| {});
    replicaof(l.addr, r.addr);
    synced(r.addr, l.addr);
    let mut c = Conn::new(l.addr);
    assert_eq!(
        c.cmd(&["SET", "k", "v"]),
        V::Err("READONLY You can't write against a read only replica.".into())
    );
    // In a transaction the write is refused when queued.
    assert_eq!(c.cmd(&["MULTI"]), ok());
    assert!(matches!(c.cmd(&["SET", "k", "v"]), V::Err(_)));
    assert!(matches!(c.cmd(&["EXEC"]), V::Err(e) if e.starts_with("EXECABORT")));
    // Reads work.
    assert_eq!(c.cmd(&["GET", "k"]), V::Nil);
    // A key whose TTL passed on the replica (the primary's clock is not
    // asked: the primary has it for longer, so it sends no DEL yet):
    // PEXPIREAT in the past on the stream is the primary's DEL, so set a
    // short TTL on the primary with its active expiry paused by DEBUG
    // SET-ACTIVE-EXPIRE 0.
    let mut p = Conn::new(r.addr);
    assert_eq!(p.cmd(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]), ok());
    assert_eq!(p.cmd(&["SET", "old", "v", "PX", "100"]), ok());
    synced(r.addr, l.addr);
    std::thread::sleep(Duration::from_millis(300));
    // Missing to readers, but still there (DBSIZE counts it) until the
    // primary's DEL.
    assert_eq!(c.cmd(&["GET", "old"]), V::Nil);
    assert_eq!(c.cmd(&["EXISTS", "old"]), V::Int(0));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(c.cmd(&["DBSIZE"]), V::Int(1));
    // The primary reads it: its lazy expiry sends the DEL.
    assert_eq!(p.cmd(&["GET", "old"]), V::Nil);
    eventually("the primary's DEL arrives", || {
        c.cmd(&["DBSIZE"]) == V::Int(0)
    });
}

#[test]
fn role_info_and_errors() {
    let r = redis_primary(false);
    let l = latchkey(|_| {});
    let mut c = Conn::new(l.addr);
    assert_eq!(
        c.cmd(&["REPLICAOF", "127.0.0.1", "notaport"]),
        V::Err("ERR Invalid master port".into())
    );
    assert_eq!(
        c.cmd(&["REPLICAOF", "127.0.0.1", "70000"]),
        V::Err("ERR Invalid master port".into())
    );
    assert!(matches!(c.cmd(&["REPLICAOF", "NO ONE"]), V::Err(_)));
    // A master told NO ONE stays a master.
    assert_eq!(c.cmd(&["REPLICAOF", "NO", "ONE"]), ok());
    replicaof(l.addr, r.addr);
    let port = r.addr.port().to_string();
    assert_eq!(
        c.cmd(&["SLAVEOF", "127.0.0.1", &port]),
        V::Simple("OK Already connected to specified master".into())
    );
    synced(r.addr, l.addr);
    let i = info(l.addr, "replication");
    assert_eq!(info_field(&i, "role"), "slave");
    assert_eq!(info_field(&i, "master_host"), "127.0.0.1");
    assert_eq!(info_field(&i, "master_port"), port);
    assert_eq!(info_field(&i, "master_sync_in_progress"), "0");
    assert_eq!(info_field(&i, "slave_read_only"), "1");
    assert_eq!(info_field(&i, "slave_priority"), "100");
    assert_eq!(
        info_field(&i, "master_replid"),
        info_field(&info(r.addr, "replication"), "master_replid")
    );
    let off = info_field(&i, "slave_repl_offset");
    let V::Arr(role) = c.cmd(&["ROLE"]) else {
        panic!("ROLE")
    };
    assert_eq!(role[0], b("slave"));
    assert_eq!(role[1], b("127.0.0.1"));
    assert_eq!(role[2], V::Int(r.addr.port() as i64));
    assert_eq!(role[3], b("connected"));
    assert_eq!(role[4], V::Int(off.parse().unwrap()));
    // Redis sees us as its replica, at our listening port.
    let ri = info(r.addr, "replication");
    assert!(
        info_field(&ri, "slave0").contains(&format!("port={}", l.addr.port())),
        "{ri}"
    );
    // The primary gone: the link is down, then stale reads are refused
    // with replica-serve-stale-data no.
    drop(r);
    eventually("the link is down", || {
        info_field(&info(l.addr, "replication"), "master_link_status") == "down"
    });
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "replica-serve-stale-data", "no"]),
        ok()
    );
    assert_eq!(
        c.cmd(&["GET", "x"]),
        V::Err(
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."
                .into()
        )
    );
    assert_eq!(c.cmd(&["REPLICAOF", "NO", "ONE"]), ok());
    assert_eq!(c.cmd(&["SET", "x", "1"]), ok());
    assert_eq!(info_field(&info(l.addr, "replication"), "role"), "master");
}

#[test]
fn promotion_lets_a_sibling_continue() {
    let r = redis_primary(false);
    dataset(r.addr);
    let a = latchkey(|_| {});
    let b2 = latchkey(|_| {});
    replicaof(a.addr, r.addr);
    replicaof(b2.addr, r.addr);
    synced(r.addr, a.addr);
    synced(r.addr, b2.addr);
    Conn::new(r.addr).cmd(&["SET", "before", "promotion"]);
    synced(r.addr, a.addr);
    synced(r.addr, b2.addr);
    let old = info_field(&info(a.addr, "replication"), "master_replid");
    // A is promoted; the old primary's ID is its second one.
    assert_eq!(Conn::new(a.addr).cmd(&["REPLICAOF", "NO", "ONE"]), ok());
    let ia = info(a.addr, "replication");
    assert_eq!(info_field(&ia, "master_replid2"), old);
    assert_ne!(info_field(&ia, "master_replid"), old);
    assert_eq!(Conn::new(a.addr).cmd(&["SET", "after", "promotion"]), ok());
    // B re-pointed at A continues partially (+CONTINUE): A counts it.
    replicaof(b2.addr, a.addr);
    eventually("B continues from A", || {
        info_field(&info(a.addr, "stats"), "sync_partial_ok") == "1"
    });
    assert_eq!(info_field(&info(a.addr, "stats"), "sync_full"), "0");
    assert_same(a.addr, b2.addr);
    assert_eq!(Conn::new(b2.addr).cmd(&["GET", "after"]), b("promotion"));
}

#[test]
fn replica_of_latchkey() {
    let p = latchkey(|c| c.repl.diskless_sync = false);
    dataset(p.addr);
    let l = latchkey(|_| {});
    replicaof(l.addr, p.addr);
    assert_same(p.addr, l.addr);
    live_writes(p.addr);
    assert_same(p.addr, l.addr);
}

#[test]
fn replicaof_at_start_up() {
    let r = redis_primary(true);
    dataset(r.addr);
    let l = latchkey(|c| c.repl.replicaof = Some(("127.0.0.1".into(), r.addr.port())));
    assert_same(r.addr, l.addr);
}

#[test]
fn a_restarted_replica_continues_partially_from_its_rdb() {
    let r = redis_primary(false);
    dataset(r.addr);
    let dir = TempDir::new("replica-restart");
    let mut l = ReplicaProc::start(r.addr, &dir);
    synced(r.addr, l.addr);
    // The stream is left in another database: after the restart it must
    // go on there without a SELECT.
    let mut p = Conn::new(r.addr);
    assert_eq!(p.cmd(&["SELECT", "2"]), ok());
    assert_eq!(p.cmd(&["SET", "in2", "before"]), ok());
    synced(r.addr, l.addr);
    // SAVE writes repl-id and repl-offset with the data.
    assert_eq!(Conn::new(l.addr).cmd(&["SAVE"]), ok());
    l.restart(&dir);
    assert_eq!(p.cmd(&["SET", "in2b", "after"]), ok());
    synced(r.addr, l.addr);
    let st = info(r.addr, "stats");
    assert_eq!(info_field(&st, "sync_full"), "1", "{st}");
    assert_eq!(info_field(&st, "sync_partial_ok"), "1", "{st}");
    let mut c = Conn::new(l.addr);
    assert_eq!(c.cmd(&["SELECT", "2"]), ok());
    assert_eq!(c.cmd(&["GET", "in2b"]), b("after"));
    assert_eq!(digest(r.addr), digest(l.addr));
}

#[test]
fn masterauth_authenticates_to_the_primary() {
    let r = RealRedis::start();
    let mut p = Conn::new(r.addr);
    assert_eq!(p.cmd(&["CONFIG", "SET", "requirepass", "s3cret"]), ok());
    assert_eq!(p.cmd(&["SET", "k", "v"]), ok());
    let l = latchkey(|c| c.repl.masterauth = "s3cret".into());
    replicaof(l.addr, r.addr);
    eventually("the replica syncs through AUTH", || {
        info_field(&info(l.addr, "replication"), "master_link_status") == "up"
    });
    assert_eq!(Conn::new(l.addr).cmd(&["GET", "k"]), b("v"));
}

/// CLIENT LIST on a replica flags its master's connection `M`, as Redis's
/// does (a Redis replica of the same primary is the oracle).
#[test]
fn client_list_flags_the_master_link() {
    let p = latchkey(|c| c.repl.diskless_sync = false);
    let l = latchkey(|_| {});
    replicaof(l.addr, p.addr);
    let port = p.addr.port().to_string();
    let rr = RealRedis::start_args(&["--replicaof", "127.0.0.1", &port]);
    synced(p.addr, l.addr);
    synced(p.addr, rr.addr);
    for (name, addr) in [("redis", rr.addr), ("latchkey", l.addr)] {
        let list = match Conn::new(addr).cmd(&["CLIENT", "LIST"]) {
            V::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
            other => panic!("{other:?}"),
        };
        let masters: Vec<&str> = list.lines().filter(|l| l.contains(" flags=M ")).collect();
        assert_eq!(masters.len(), 1, "{name}: {list}");
        assert!(
            masters[0].contains(&format!("addr=127.0.0.1:{port} ")),
            "{name}: {list}"
        );
    }
}

/// A chain: a Redis primary, a latchkey replica, and under that replica
/// a Redis replica and a latchkey one. The sub-replicas sync from the
/// middle one, then get the primary's stream byte for byte through it:
/// the same replication ID and offsets as the primary, the same data.
/// Promoted, the middle one lets both continue partially.
#[test]
fn chained_replicas_follow_the_primary_through_a_replica() {
    let r = redis_primary(false);
    dataset(r.addr);
    let mid = latchkey(|c| c.repl.diskless_sync = false);
    replicaof(mid.addr, r.addr);
    synced(r.addr, mid.addr);
    let port = mid.addr.port().to_string();
    let sub_redis = RealRedis::start_args(&[
        "--replicaof",
        "127.0.0.1",
        &port,
        "--enable-debug-command",
        "yes",
    ]);
    let sub_lk = latchkey(|_| {});
    replicaof(sub_lk.addr, mid.addr);
    synced(mid.addr, sub_redis.addr);
    synced(mid.addr, sub_lk.addr);
    live_writes(r.addr);
    assert_same(r.addr, mid.addr);
    let ri = info(r.addr, "replication");
    for (name, sub) in [("redis", sub_redis.addr), ("latchkey", sub_lk.addr)] {
        synced(mid.addr, sub);
        assert_eq!(digest(sub), digest(r.addr), "{name}");
        let si = info(sub, "replication");
        for f in ["master_replid", "master_repl_offset"] {
            assert_eq!(info_field(&si, f), info_field(&ri, f), "{name}: {f}");
        }
    }
    // The middle one promoted: both sub-replicas continue from it.
    assert_eq!(Conn::new(mid.addr).cmd(&["REPLICAOF", "NO", "ONE"]), ok());
    assert_eq!(
        Conn::new(mid.addr).cmd(&["SET", "after", "promotion"]),
        ok()
    );
    for (name, sub) in [("redis", sub_redis.addr), ("latchkey", sub_lk.addr)] {
        assert_same(mid.addr, sub);
        assert_eq!(
            Conn::new(sub).cmd(&["GET", "after"]),
            b("promotion"),
            "{name}"
        );
    }
    let stats = info(mid.addr, "stats");
    assert_eq!(info_field(&stats, "sync_full"), "2", "{stats}");
    assert_eq!(info_field(&stats, "sync_partial_ok"), "2", "{stats}");
}

/// A primary that answers the handshake and then sends `payload` as the
/// RDB of a full sync, to every replica that connects (until dropped).
struct FakePrimary {
    addr: SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Payloads sent.
    sent: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl FakePrimary {
    fn start(payload: &'static [u8]) -> FakePrimary {
        use std::io::{BufRead, BufReader, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done = stop.clone();
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = sent.clone();
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while !done.load(std::sync::atomic::Ordering::Relaxed)
                && std::time::Instant::now() < deadline
            {
                let Ok((s, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut w = s.try_clone().unwrap();
                let mut r = BufReader::new(s);
                // Each command: *N, then N times $len and the argument.
                'cmds: for _ in 0..10 {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    let n: usize = line.trim()[1..].parse().unwrap_or(0);
                    let mut args = Vec::new();
                    for _ in 0..n {
                        let (mut len, mut arg) = (String::new(), String::new());
                        if r.read_line(&mut len).unwrap_or(0) == 0
                            || r.read_line(&mut arg).unwrap_or(0) == 0
                        {
                            break 'cmds;
                        }
                        args.push(arg.trim().to_ascii_uppercase());
                    }
                    let reply: Vec<u8> = match args.first().map(String::as_str) {
                        Some("PING") => b"+PONG\r\n".to_vec(),
                        Some("PSYNC") | Some("SYNC") => {
                            let mut v = format!(
                                "+FULLRESYNC {} 0\r\n${}\r\n",
                                "a".repeat(40),
                                payload.len()
                            )
                            .into_bytes();
                            v.extend_from_slice(payload);
                            if w.write_all(&v).is_ok() {
                                count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            break;
                        }
                        _ => b"+OK\r\n".to_vec(),
                    };
                    if w.write_all(&reply).is_err() {
                        break;
                    }
                }
            }
        });
        FakePrimary { addr, stop, sent }
    }

    fn sent(&self) -> usize {
        self.sent.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for FakePrimary {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// `repl-diskless-load`: `on-empty-db` loads an empty replica's sync
/// from memory, no file written, and one holding keys through the disk as
/// `disabled`; `swapdb` always from memory. A full sync whose RDB is
/// broken leaves `swapdb`'s old data in place, and empties the
/// dataset under `disabled`: as a Redis 7.0.15 replica does (the oracle,
/// against the same broken primary).
#[test]
fn diskless_load_modes() {
    let p = latchkey(|c| c.repl.diskless_sync = false);
    dataset(p.addr);
    let dump_of = |dir: &str| std::path::Path::new(dir).join("dump.rdb").exists();
    for (mode, keys_before, file) in [
        ("on-empty-db", false, false),
        ("on-empty-db", true, true),
        ("swapdb", true, false),
        ("disabled", false, true),
    ] {
        let dir = own_dir();
        let d = dir.clone();
        let l = latchkey(move |c| {
            c.dir = d;
            c.repl.diskless_load = mode.into();
        });
        if keys_before {
            assert_eq!(Conn::new(l.addr).cmd(&["SET", "mine", "1"]), ok());
        }
        replicaof(l.addr, p.addr);
        assert_same(p.addr, l.addr);
        assert_eq!(Conn::new(l.addr).cmd(&["EXISTS", "mine"]), V::Int(0));
        assert_eq!(dump_of(&dir), file, "{mode}, keys before: {keys_before}");
    }
    // A broken RDB: swapdb keeps the old data, disabled loses it.
    let bad = FakePrimary::start(b"NOTANRDBFILE");
    let port = bad.addr.port().to_string();
    for (mode, kept) in [("swapdb", 1), ("disabled", 0)] {
        let r = RealRedis::start_args(&["--repl-diskless-load", mode]);
        let l = latchkey(|c| c.repl.diskless_load = mode.into());
        for (name, addr) in [("redis", r.addr), ("latchkey", l.addr)] {
            let mut c = Conn::new(addr);
            assert_eq!(c.cmd(&["SET", "mine", "1"]), ok());
            let before = bad.sent();
            assert_eq!(c.cmd(&["REPLICAOF", "127.0.0.1", &port]), ok());
            // A second payload is asked for once the first one failed.
            eventually("a sync failed and was tried again", || {
                bad.sent() >= before + 2
            });
            assert_eq!(c.cmd(&["EXISTS", "mine"]), V::Int(kept), "{name} {mode}");
            assert_eq!(c.cmd(&["REPLICAOF", "NO", "ONE"]), ok());
        }
    }
}

/// A paused replica (CLIENT PAUSE WRITE) holds its master's stream as
/// Redis 7.0 postpones its master client: the stream is read
/// (`slave_read_repl_offset` grows) but from the first write on not run
/// (`slave_repl_offset` stops before it, the write is not there), and
/// runs once the pause ends (Redis's
/// "Test when replica paused, offset would not grow", pause.tcl). On a
/// redis-server replica too.
#[test]
fn a_paused_replica_holds_the_stream_until_unpaused() {
    let p = redis_primary(false);
    let r = RealRedis::start_args(&["--enable-debug-command", "yes"]);
    let l = latchkey(|_| {});
    let mut ran_while_paused = Vec::new();
    for replica in [r.addr, l.addr] {
        replicaof(replica, p.addr);
        assert_same(p.addr, replica);
        let mut c = Conn::new(replica);
        assert_eq!(c.cmd(&["CLIENT", "PAUSE", "60000", "WRITE"]), ok());
        let before = info_field(&info(replica, "replication"), "slave_repl_offset");
        assert_eq!(Conn::new(p.addr).cmd(&["SET", "held", "1"]), ok());
        let ours = info_field(&info(p.addr, "replication"), "master_repl_offset");
        eventually("the replica read the write", || {
            info_field(&info(replica, "replication"), "slave_read_repl_offset") == ours
        });
        // What is no write (the SELECT before the SET) runs; the SET waits.
        let now = info(replica, "replication");
        let offset: i64 = info_field(&now, "slave_repl_offset").parse().unwrap();
        assert!(offset < ours.parse().unwrap(), "{now}");
        ran_while_paused.push(offset - before.parse::<i64>().unwrap());
        assert_eq!(c.cmd(&["EXISTS", "held"]), V::Int(0));
        assert_eq!(c.cmd(&["CLIENT", "UNPAUSE"]), ok());
        assert_same(p.addr, replica);
        assert_eq!(c.cmd(&["EXISTS", "held"]), V::Int(1));
        assert_eq!(Conn::new(p.addr).cmd(&["DEL", "held"]), V::Int(1));
    }
    assert_eq!(ran_while_paused[0], ran_while_paused[1], "redis, latchkey");
}

/// replica-ignore-maxmemory (default yes): a replica over its maxmemory
/// evicts nothing (its primary's DELs keep it in step, as Redis's
/// isSafeToPerformEvictions); told `no`, it evicts on its own. The
/// replica is a process (used_memory is its own jemalloc's).
#[test]
fn a_replica_ignores_maxmemory_unless_told_not_to() {
    let p = latchkey(|_| {});
    let dir = TempDir::new("replica-maxmemory");
    let r = ReplicaProc::start(p.addr, &dir);
    synced(p.addr, r.addr);
    let mut rc = Conn::new(r.addr);
    let used: u64 = info_field(&info(r.addr, "memory"), "used_memory")
        .parse()
        .expect("used_memory");
    let max = (used + (1 << 20)).to_string();
    assert_eq!(rc.cmd(&["CONFIG", "SET", "maxmemory", &max]), ok());
    assert_eq!(
        rc.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-random"]),
        ok()
    );
    let mut pc = Conn::new(p.addr);
    let big = "x".repeat(10_000);
    for i in 0..400 {
        assert_eq!(pc.cmd(&["SET", &format!("k{i}"), &big]), ok());
    }
    synced(p.addr, r.addr);
    assert_eq!(rc.cmd(&["DBSIZE"]), V::Int(400));
    assert_eq!(info_field(&info(r.addr, "stats"), "evicted_keys"), "0");
    // Told not to ignore it: the replica evicts under its own limit.
    assert_eq!(
        rc.cmd(&["CONFIG", "SET", "replica-ignore-maxmemory", "no"]),
        ok()
    );
    assert_eq!(pc.cmd(&["SET", "one-more", &big]), ok());
    eventually("the replica evicts", || {
        info_field(&info(r.addr, "stats"), "evicted_keys") != "0"
    });
}

/// `bind-source-addr`: the link to the master connects from that address,
/// as a Redis 7.0.15 replica's does (the primary's CLIENT LIST shows it).
#[test]
fn the_master_link_connects_from_bind_source_addr() {
    let p = latchkey(|_| {});
    let port = p.addr.port().to_string();
    let redis = RealRedis::start_args(&[
        "--bind-source-addr",
        "127.0.0.2",
        "--replicaof",
        "127.0.0.1",
        &port,
    ]);
    let l = latchkey(|c| c.repl.bind_source_addr = "127.0.0.2".into());
    replicaof(l.addr, p.addr);
    synced(p.addr, redis.addr);
    synced(p.addr, l.addr);
    let V::Bulk(list) = Conn::new(p.addr).cmd(&["CLIENT", "LIST", "TYPE", "replica"]) else {
        panic!("CLIENT LIST")
    };
    let list = String::from_utf8_lossy(&list).into_owned();
    let addrs: Vec<&str> = list
        .lines()
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("addr=")))
        .collect();
    assert_eq!(addrs.len(), 2, "{list}");
    assert!(addrs.iter().all(|a| a.starts_with("127.0.0.2:")), "{list}");
    // An address this host does not have: the link fails, as Redis's.
    let bad = latchkey(|c| c.repl.bind_source_addr = "192.0.2.1".into());
    replicaof(bad.addr, p.addr);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        info_field(&info(bad.addr, "replication"), "master_link_status"),
        "down"
    );
}

/// Redis's disconnectAllBlockedClients: a server that starts following a
/// master ends every blocked command (BLPOP, WAIT) with `-UNBLOCKED ...
/// (master -> replica?)` and closes those connections, the rest of their
/// pipeline unrun; others stay. Checked on redis-server 7.0.15 and on
/// latchkey alike.
#[test]
fn blocked_clients_are_unblocked_when_the_master_turns_replica() {
    fn case(a: SocketAddr, b: SocketAddr) {
        let mut blpop = Conn::new(a);
        blpop.send(&["BLPOP", "list", "0"]);
        blpop.send(&["SET", "after", "1"]);
        let mut wait = Conn::new(a);
        wait.send(&["WAIT", "5", "0"]);
        let mut idle = Conn::new(a);
        eventually("both blocked", || {
            info_field(&info(a, "clients"), "blocked_clients") == "2"
        });
        replicaof(a, b);
        let err = V::Err(
            "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"
                .into(),
        );
        assert_eq!(blpop.frame(), err);
        assert!(blpop.closed(), "the connection closes after the error");
        assert_eq!(wait.frame(), err);
        assert!(wait.closed());
        assert_eq!(idle.cmd(&["PING"]), V::Simple("PONG".into()));
        assert_eq!(info_field(&info(a, "clients"), "blocked_clients"), "0");
        // The pipelined SET did not run (and the master's data replaced
        // ours anyway): nothing on either side.
        synced(b, a);
        assert_eq!(Conn::new(b).cmd(&["EXISTS", "after"]), V::Int(0));
    }
    let b = latchkey(|_| {});
    let redis = RealRedis::start();
    case(redis.addr, b.addr);
    let a = latchkey(|_| {});
    case(a.addr, b.addr);
}

/// A replica whose link to its master is down refuses a replica of its
/// own, as Redis's syncCommand: `-NOMASTERLINK Can't SYNC while not
/// connected with my master`.
#[test]
fn a_replica_without_its_master_refuses_sync() {
    let dead = free_port().to_string();
    let redis = RealRedis::start_args(&["--replicaof", "127.0.0.1", &dead]);
    let l = latchkey(|_| {});
    assert_eq!(
        Conn::new(l.addr).cmd(&["REPLICAOF", "127.0.0.1", &dead]),
        ok()
    );
    for addr in [redis.addr, l.addr] {
        let err = V::Err("NOMASTERLINK Can't SYNC while not connected with my master".into());
        assert_eq!(Conn::new(addr).cmd(&["PSYNC", "?", "-1"]), err);
        assert_eq!(Conn::new(addr).cmd(&["SYNC"]), err);
    }
}

/// A replica with `appendonly yes` rewrites its AOF after a full sync
/// (Redis's restartAOFAfterSYNC): started again from the AOF alone (no
/// master, no RDB), it has the data the sync brought and the writes that
/// followed, digest equal to the primary's.
#[test]
fn a_full_sync_starts_the_replicas_aof_again() {
    let p = latchkey(|_| {});
    dataset(p.addr);
    let bin = env!("CARGO_BIN_EXE_latchkey-server");
    let dir = TempDir::new("aof-after-sync");
    let port = p.addr.port().to_string();
    let aof = [
        "--appendonly",
        "yes",
        "--save",
        "",
        "--enable-debug-command",
        "yes",
    ];
    let replica: Vec<&str> = aof
        .iter()
        .copied()
        .chain(["--replicaof", "127.0.0.1", &port])
        .collect();
    let mut r = Proc::spawn(bin, &dir, &replica);
    assert!(r.started().is_none(), "the replica starts");
    synced(p.addr, r.addr);
    live_writes(p.addr);
    synced(p.addr, r.addr);
    // The rewrite the sync started is done.
    eventually("the AOF rewrite ends", || {
        info_field(&info(r.addr, "persistence"), "aof_rewrite_in_progress") == "0"
            && info_field(&info(r.addr, "persistence"), "aof_rewrite_scheduled") == "0"
    });
    let want = digest(p.addr);
    r.restart(bin, &dir, &aof);
    assert!(r.started().is_none(), "the replica starts again");
    assert_eq!(digest(r.addr), want, "the AOF lacks what the sync brought");
}

/// `replica-lazy-flush yes`: the replica's old data goes in the
/// background at a full sync (Redis's EMPTYDB_ASYNC), so INFO memory's
/// `lazyfreed_objects` counts it; with `no` it stays 0. Checked beside a
/// redis-server 7.0.15 replica of the same primary.
#[test]
fn replica_lazy_flush_frees_the_old_data_in_the_background() {
    let p = latchkey(|_| {});
    assert_eq!(Conn::new(p.addr).cmd(&["SET", "from-primary", "1"]), ok());
    let redis = RealRedis::start();
    let l = latchkey(|_| {});
    for addr in [redis.addr, l.addr] {
        let mut c = Conn::new(addr);
        for i in 0..50 {
            assert_eq!(c.cmd(&["SET", &format!("old{i}"), "x"]), ok());
        }
        for (lazy, want) in [("no", "0"), ("yes", "50")] {
            assert_eq!(c.cmd(&["CONFIG", "SET", "replica-lazy-flush", lazy]), ok());
            replicaof(addr, p.addr);
            synced(p.addr, addr);
            eventually("the old data is freed", || {
                info_field(&info(addr, "memory"), "lazyfree_pending_objects") == "0"
            });
            assert_eq!(
                info_field(&info(addr, "memory"), "lazyfreed_objects"),
                want,
                "{addr} with replica-lazy-flush {lazy}"
            );
            // Back to a master with 50 old keys for the next round.
            assert_eq!(c.cmd(&["REPLICAOF", "NO", "ONE"]), ok());
            assert_eq!(c.cmd(&["FLUSHALL", "SYNC"]), ok());
            for i in 0..50 {
                assert_eq!(c.cmd(&["SET", &format!("old{i}"), "x"]), ok());
            }
        }
    }
}
