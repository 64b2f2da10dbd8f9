//! Replication, the primary's side, against a real Redis 7.0.15 replica
//! (`redis-server --replicaof <latchkey>`): full sync from the RDB file and
//! diskless, the command stream after it, a partial resync after the link
//! is killed, WAIT, ROLE and INFO, and lock keys never reaching a Redis
//! replica. Each scenario ends with `DEBUG DIGEST` equal on both sides.
//! Every server is stopped however the test ends (handles dropped), every
//! wait is bounded.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::repl::*;
use common::*;

use latchkey_server::config::Config;
use latchkey_server::runtime::ServerHandle;

fn primary(diskless: bool, tweak: impl FnOnce(&mut Config)) -> ServerHandle {
    let mut c = Config {
        port: 0,
        dir: own_dir(),
        enable_debug_command: "yes".into(),
        ..Default::default()
    };
    c.repl.diskless_sync = diskless;
    c.repl.diskless_sync_delay = 0;
    tweak(&mut c);
    start_with(c)
}

fn replica_of(addr: SocketAddr) -> RealRedis {
    replica_logging(addr, None)
}

/// A Redis replica of `addr`, logging to `log` when given.
fn replica_logging(addr: SocketAddr, log: Option<&str>) -> RealRedis {
    let port = addr.port().to_string();
    let mut args = vec![
        "--replicaof",
        "127.0.0.1",
        &port,
        "--enable-debug-command",
        "yes",
        "--repl-diskless-load",
        "disabled",
    ];
    if let Some(log) = log {
        args.extend(["--logfile", log]);
    }
    RealRedis::start_args(&args)
}

fn check_roles(primary: SocketAddr, replica: &RealRedis) {
    let port = replica.addr.port().to_string();
    // The replica acknowledges every second: until its ACK covers the
    // primary's offset, ROLE shows the older one.
    let mut off = 0;
    eventually("ROLE shows the replica at the primary's offset", || {
        let V::Arr(role) = Conn::new(primary).cmd(&["ROLE"]) else {
            panic!("ROLE is an array")
        };
        assert_eq!(role[0], b("master"));
        let V::Int(o) = role[1] else {
            panic!("ROLE's offset: {:?}", role[1])
        };
        off = o;
        o > 0
            && role[2]
                == V::Arr(vec![V::Arr(vec![
                    b("127.0.0.1"),
                    b(&port),
                    b(&o.to_string()),
                ])])
    });
    let i = info(primary, "replication");
    assert_eq!(info_field(&i, "role"), "master");
    assert_eq!(info_field(&i, "connected_slaves"), "1");
    let slave0 = info_field(&i, "slave0");
    let want = format!("ip=127.0.0.1,port={port},state=online,offset={off},lag=");
    assert!(slave0.starts_with(&want), "{slave0}");
    assert_eq!(info_field(&i, "master_repl_offset"), off.to_string());
    assert_eq!(info_field(&i, "repl_backlog_active"), "1");
    assert_eq!(info_field(&i, "second_repl_offset"), "-1");
    assert_eq!(info_field(&i, "master_replid").len(), 40);
    let r = info(replica.addr, "replication");
    assert_eq!(
        info_field(&r, "master_replid"),
        info_field(&i, "master_replid")
    );
    // The link is a client of type replica, flag S.
    let V::Bulk(list) = Conn::new(primary).cmd(&["CLIENT", "LIST", "TYPE", "replica"]) else {
        panic!("CLIENT LIST")
    };
    let list = String::from_utf8_lossy(&list).into_owned();
    assert_eq!(list.lines().count(), 1, "{list}");
    assert!(list.contains(" flags=S "), "{list}");
}

fn full_sync_scenario(diskless: bool) {
    let p = primary(diskless, |_| {});
    dataset(p.addr);
    // A lock key: never sent to a Redis replica, in the RDB or the stream.
    let mut holder = Conn::ready(p.addr);
    assert_eq!(holder.cmd(&["SETTP", "lockkey", "me"]), V::Int(1));
    let r = replica_of(p.addr);
    synced(p.addr, r.addr);
    let mut rc = Conn::new(r.addr);
    assert_eq!(rc.cmd(&["EXISTS", "lockkey"]), V::Int(0));
    assert_eq!(rc.cmd(&["GET", "s"]), b("hello"));
    live_writes(p.addr);
    assert_eq!(holder.cmd(&["SETTP", "lock2", "me"]), V::Int(1));
    synced(p.addr, r.addr);
    assert_eq!(rc.cmd(&["EXISTS", "lockkey", "lock2"]), V::Int(0));
    assert_eq!(rc.cmd(&["GET", "fromlua"]), b("luavalue"));
    check_roles(p.addr, &r);
    let stats = info(p.addr, "stats");
    assert_eq!(info_field(&stats, "sync_full"), "1");
    // The lock keys go with their holder; then both sides hold the same.
    drop(holder);
    eventually("the locks are released", || {
        Conn::new(p.addr).cmd(&["EXISTS", "lockkey", "lock2"]) == V::Int(0)
    });
    assert_same(p.addr, r.addr);
}

#[test]
fn disk_based_full_sync_then_the_stream() {
    full_sync_scenario(false);
}

#[test]
fn diskless_full_sync_then_the_stream() {
    full_sync_scenario(true);
}

#[test]
fn a_killed_link_continues_with_a_partial_resync() {
    let p = primary(true, |_| {});
    dataset(p.addr);
    let log = std::path::Path::new(&own_dir()).join("replica.log");
    let log = log.to_string_lossy().into_owned();
    let r = replica_logging(p.addr, Some(&log));
    assert_same(p.addr, r.addr);
    let replid = info_field(&info(p.addr, "replication"), "master_replid");
    let mut c = Conn::ready(p.addr);
    assert_eq!(c.cmd(&["CLIENT", "KILL", "TYPE", "replica"]), V::Int(1));
    // Writes while it is away reach it from the backlog.
    for i in 0..100 {
        c.cmd(&["SET", &format!("away{i}"), "v"]);
    }
    live_writes(p.addr);
    eventually("the replica continues", || {
        info_field(&info(p.addr, "stats"), "sync_partial_ok") == "1"
    });
    assert_same(p.addr, r.addr);
    let stats = info(p.addr, "stats");
    assert_eq!(info_field(&stats, "sync_full"), "1");
    assert_eq!(info_field(&stats, "sync_partial_err"), "0");
    // Same history on both sides.
    assert_eq!(
        info_field(&info(r.addr, "replication"), "master_replid"),
        replid
    );
    assert_eq!(
        info_field(&info(p.addr, "replication"), "master_replid"),
        replid
    );
    let text = std::fs::read_to_string(&log).expect("the replica's log");
    assert!(
        text.contains("Successful partial resynchronization with master."),
        "{text}"
    );
    assert!(text.contains("MASTER <-> REPLICA sync: Master accepted a Partial Resynchronization."));
}

#[test]
fn wait_counts_the_replicas_that_acknowledged() {
    let p = primary(false, |_| {});
    let mut c = Conn::ready(p.addr);
    assert_eq!(c.cmd(&["SET", "k", "v"]), ok());
    // No replica: WAIT 0 answers at once, WAIT 1 at its timeout.
    assert_eq!(c.cmd(&["WAIT", "0", "0"]), V::Int(0));
    let t = Instant::now();
    assert_eq!(c.cmd(&["WAIT", "1", "100"]), V::Int(0));
    assert!(t.elapsed() >= Duration::from_millis(90));
    assert_eq!(c.cmd(&["WAIT", "x", "0"]), V::Err(NOT_INT.into()));
    assert_eq!(
        c.cmd(&["WAIT", "1", "-1"]),
        V::Err("ERR timeout is negative".into())
    );
    let r = replica_of(p.addr);
    synced(p.addr, r.addr);
    assert_eq!(c.cmd(&["SET", "k", "w"]), ok());
    assert_eq!(c.cmd(&["WAIT", "1", "5000"]), V::Int(1));
    // Inside MULTI it answers at once with what is acknowledged.
    assert_eq!(c.cmd(&["MULTI"]), ok());
    c.cmd(&["WAIT", "1", "0"]);
    assert_eq!(c.cmd(&["EXEC"]), V::Arr(vec![V::Int(1)]));
    // A stopped replica acknowledges nothing: dropped after repl-timeout.
    assert_eq!(c.cmd(&["CONFIG", "SET", "repl-timeout", "2"]), ok());
    let resumed = Resume::stop(&r);
    assert_eq!(c.cmd(&["SET", "k", "x"]), ok());
    assert_eq!(c.cmd(&["WAIT", "1", "300"]), V::Int(0));
    eventually("the silent replica is dropped", || {
        info_field(&info(p.addr, "replication"), "connected_slaves") == "0"
    });
    assert_eq!(c.cmd(&["WAIT", "1", "100"]), V::Int(0));
    drop(resumed);
}

#[test]
fn a_replica_over_its_output_limit_is_dropped_then_the_backlog_freed() {
    let p = primary(false, |_| {});
    let r = replica_of(p.addr);
    synced(p.addr, r.addr);
    let mut c = Conn::ready(p.addr);
    assert_eq!(
        c.cmd(&[
            "CONFIG",
            "SET",
            "client-output-buffer-limit",
            "replica 256kb 0 0"
        ]),
        ok()
    );
    assert_eq!(c.cmd(&["CONFIG", "SET", "repl-backlog-ttl", "1"]), ok());
    let replid = info_field(&info(p.addr, "replication"), "master_replid");
    let resume = Resume::stop(&r);
    // Far more than the socket buffers hold: the rest waits in the
    // link's buffer, over its limit, long before repl-timeout (60 s).
    let value = "v".repeat(64 * 1024);
    for i in 0..300 {
        assert_eq!(c.cmd(&["SET", &format!("big{i}"), &value]), ok());
    }
    eventually("the replica over its limit is dropped", || {
        info_field(&info(p.addr, "replication"), "connected_slaves") == "0"
    });
    eventually("the backlog is freed after its TTL", || {
        info_field(&info(p.addr, "replication"), "repl_backlog_active") == "0"
    });
    // A new history: the old one cannot be continued.
    let i = info(p.addr, "replication");
    assert_ne!(info_field(&i, "master_replid"), replid);
    assert_eq!(info_field(&i, "repl_backlog_histlen"), "0");
    // Writes while nobody takes the stream, then the replica comes back:
    // it cannot continue (a new history), so it syncs in full again, and
    // the stream is fed again after it.
    assert_eq!(c.cmd(&["SET", "while-alone", "1"]), ok());
    drop(resume);
    eventually("the replica syncs again", || {
        info_field(&info(p.addr, "stats"), "sync_full") == "2"
    });
    assert_eq!(c.cmd(&["SET", "after-return", "1"]), ok());
    assert_same(p.addr, r.addr);
    assert_eq!(info_field(&info(p.addr, "stats"), "sync_partial_err"), "1");
}

#[test]
fn min_replicas_to_write_counts_good_replicas() {
    let p = primary(false, |_| {});
    let mut c = Conn::ready(p.addr);
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "min-replicas-to-write", "1"]),
        ok()
    );
    assert_eq!(
        c.cmd(&["SET", "k", "v"]),
        V::Err("NOREPLICAS Not enough good replicas to write.".into())
    );
    let r = replica_of(p.addr);
    synced(p.addr, r.addr);
    eventually("a good replica", || {
        Conn::new(p.addr).cmd(&["SET", "k", "v"]) == ok()
    });
    assert_eq!(
        info_field(&info(p.addr, "replication"), "min_slaves_good_slaves"),
        "1"
    );
}

#[test]
fn a_write_load_during_the_full_sync_ends_digest_equal() {
    for diskless in [false, true] {
        let p = primary(diskless, |c| c.rdb_key_save_delay = 20);
        // A dataset large enough that the walk takes a while.
        let mut c = Conn::ready(p.addr);
        for chunk in 0..50 {
            let mut cmds: Vec<Vec<String>> = Vec::new();
            for i in 0..1000 {
                let n = chunk * 1000 + i;
                cmds.push(vec!["SET".into(), format!("key:{n}"), format!("value-{n}")]);
            }
            let refs: Vec<Vec<&str>> = cmds
                .iter()
                .map(|v| v.iter().map(String::as_str).collect())
                .collect();
            let refs: Vec<&[&str]> = refs.iter().map(Vec::as_slice).collect();
            c.pipeline(&refs);
            c.replies_raw(1000);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let stop = stop.clone();
            let addr = p.addr;
            std::thread::spawn(move || {
                let mut w = Conn::ready(addr);
                let mut i: u64 = 0;
                while !stop.load(Ordering::Relaxed) {
                    let k = format!("key:{}", (i * 7919) % 60_000);
                    match i % 4 {
                        0 => w.cmd(&["SET", &k, &i.to_string()]),
                        1 => w.cmd(&["DEL", &k]),
                        2 => w.cmd(&["APPEND", &k, "+"]),
                        _ => w.cmd(&["LPUSH", &format!("list:{}", i % 50), &k]),
                    };
                    i += 1;
                }
                i
            })
        };
        let t = Instant::now();
        let r = replica_of(p.addr);
        eventually("the full sync starts", || {
            info_field(&info(p.addr, "stats"), "sync_full") == "1"
        });
        let deadline = Instant::now() + SYNC_WAIT;
        while info_field(&info(r.addr, "replication"), "master_link_status") != "up" {
            assert!(Instant::now() < deadline, "the sync did not end");
            std::thread::sleep(Duration::from_millis(20));
        }
        let took = t.elapsed();
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::Relaxed);
        let writes = writer.join().expect("the writer");
        assert!(writes > 0);
        eprintln!(
            "diskless={diskless}: 50,000 keys synced in {took:?} with {writes} writes going on"
        );
        assert_same(p.addr, r.addr);
    }
}

#[test]
fn the_handshake_and_the_stream_in_bytes() {
    let p = primary(false, |_| {});
    let mut c = Conn::ready(p.addr);
    // REPLCONF's answers and errors, as Redis's.
    assert_eq!(
        c.cmd(&["REPLCONF", "listening-port"]),
        V::Err("ERR syntax error".into())
    );
    assert_eq!(
        c.cmd(&["REPLCONF", "listening-port", "x"]),
        V::Err(NOT_INT.into())
    );
    assert_eq!(
        c.cmd(&["REPLCONF", "foo", "bar"]),
        V::Err("ERR Unrecognized REPLCONF option: foo".into())
    );
    assert_eq!(
        c.cmd(&["REPLCONF", "capa", "eof", "capa", "psync2", "capa", "what"]),
        ok()
    );
    // ACK from a non-replica and GETACK to a primary: no reply at all.
    c.send(&["REPLCONF", "ACK", "10"]);
    c.send(&["REPLCONF", "GETACK", "*"]);
    assert_eq!(c.cmd(&["PING"]), V::Simple("PONG".into()));
    assert_eq!(c.cmd(&["PSYNC", "?", "x"]), V::Err(NOT_INT.into()));
    assert_eq!(c.cmd(&["SET", "before", "1"]), ok());
    // A replica by hand.
    let mut r = Conn::ready(p.addr);
    assert_eq!(r.cmd(&["REPLCONF", "listening-port", "4321"]), ok());
    r.send(&["PSYNC", "?", "-1"]);
    let line = read_line(&mut r);
    let parts: Vec<&str> = line.split(' ').collect();
    assert_eq!(parts[0], "+FULLRESYNC", "{line}");
    assert_eq!(parts[1].len(), 40);
    let offset: i64 = parts[2].parse().unwrap();
    let bulk = read_line(&mut r);
    let len: usize = bulk.strip_prefix('$').expect("a bulk").parse().unwrap();
    let rdb = r.bytes(len);
    assert!(rdb.starts_with(b"REDIS0010"), "{:?}", &rdb[..9]);
    // Then the stream: SELECT, the write; a lock's records never.
    let mut holder = Conn::ready(p.addr);
    assert_eq!(holder.cmd(&["SETTP", "lk", "me"]), V::Int(1));
    assert_eq!(c.cmd(&["SET", "after", "2"]), ok());
    let want = [enc(&["SELECT", "0"]), enc(&["SET", "after", "2"])].concat();
    r.expect_bytes(&want);
    let off = info_field(&info(p.addr, "replication"), "master_repl_offset");
    assert_eq!(off, (offset + want.len() as i64).to_string());
    // The replica's ACK moves its offset in INFO.
    r.send(&["REPLCONF", "ACK", &off]);
    eventually("the ACK is seen", || {
        info_field(&info(p.addr, "replication"), "slave0")
            .contains(&format!("port=4321,state=online,offset={off},"))
    });
}

fn read_line(c: &mut Conn) -> String {
    let mut line = Vec::new();
    loop {
        let b = c.bytes(1);
        if b == b"\n" {
            if line.is_empty() {
                // Newlines keep the link alive before the reply.
                continue;
            }
            break;
        }
        line.extend_from_slice(&b);
    }
    assert_eq!(line.pop(), Some(b'\r'));
    String::from_utf8(line).unwrap()
}

const NOT_INT: &str = "ERR value is not an integer or out of range";

/// Kills a child process however the test ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn redis_cli_replica_and_rdb_modes_work() {
    require_tool("redis-cli", "redis-tools");
    let p = primary(true, |_| {});
    let mut c = Conn::ready(p.addr);
    assert_eq!(c.cmd(&["SET", "a", "1"]), ok());
    let port = p.addr.port().to_string();
    // --replica: SYNC with an RDB filtered of its data, then the stream.
    let mut cli = Child(
        std::process::Command::new("redis-cli")
            .args(["-p", &port, "--replica"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("redis-cli starts"),
    );
    let out = cli.0.stdout.take().expect("its stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    eventually("redis-cli is an online replica", || {
        info(p.addr, "replication").contains(",state=online,")
    });
    assert_eq!(c.cmd(&["SET", "b", "2"]), ok());
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).expect("redis-cli prints the stream");
        if line == r#""SET","b","2""# {
            break;
        }
    }
    drop(cli);
    // --rdb: the whole RDB, then the connection ends.
    let file = std::path::Path::new(&own_dir()).join("cli.rdb");
    let status = std::process::Command::new("timeout")
        .args(["10", "redis-cli", "-p", &port, "--rdb"])
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("redis-cli --rdb runs");
    assert!(status.success());
    let rdb = std::fs::read(&file).expect("the RDB it wrote");
    assert!(rdb.starts_with(b"REDIS0010"));
    assert!(rdb.windows(3).any(|w| w == b"\x00\x01a"), "key a is in it");
}

#[test]
fn a_second_replica_joins_the_running_disk_sync() {
    // A slow walk (2 ms a key): the second replica arrives while the
    // first one's BGSAVE runs, and waits for that same save.
    let p = primary(false, |c| c.rdb_key_save_delay = 2000);
    let mut c = Conn::ready(p.addr);
    for i in 0..500 {
        c.cmd(&["SET", &format!("k{i}"), "v"]);
    }
    let a = replica_of(p.addr);
    eventually("the first sync's save runs", || {
        info_field(&info(p.addr, "persistence"), "rdb_bgsave_in_progress") == "1"
    });
    let b = replica_of(p.addr);
    eventually("both replicas asked", || {
        info_field(&info(p.addr, "stats"), "sync_full") == "2"
    });
    assert_eq!(c.cmd(&["SET", "during", "1"]), ok());
    assert_eq!(c.cmd(&["CONFIG", "SET", "rdb-key-save-delay", "0"]), ok());
    assert_same(p.addr, a.addr);
    assert_same(p.addr, b.addr);
    // One save served both.
    assert_eq!(info_field(&info(p.addr, "persistence"), "rdb_saves"), "1");
    assert_eq!(
        info_field(&info(p.addr, "replication"), "connected_slaves"),
        "2"
    );
}

#[test]
fn a_diskless_sync_starts_when_max_replicas_wait() {
    // A delay far past the test's bound: only max-replicas starts it.
    let p = primary(true, |c| {
        c.repl.diskless_sync_delay = 600;
        c.repl.diskless_sync_max_replicas = 2;
    });
    dataset(p.addr);
    let a = replica_of(p.addr);
    let b = replica_of(p.addr);
    assert_same(p.addr, a.addr);
    assert_same(p.addr, b.addr);
    assert_eq!(info_field(&info(p.addr, "stats"), "sync_full"), "2");
    // One walk streamed to both: no file written.
    assert_eq!(info_field(&info(p.addr, "persistence"), "rdb_saves"), "0");
}

#[test]
fn flushall_during_a_diskless_sync_to_a_stopped_replica_answers_at_once() {
    let p = primary(true, |c| c.repl.diskless_sync_delay = 1);
    let mut c = Conn::ready(p.addr);
    // 30 MB that LZF cannot shrink: far more than the socket buffers
    // and the walk's queues hold.
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for i in 0..300 {
        let value: String = (0..100 * 1024)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b"0123456789abcdef"[(x & 15) as usize])
            })
            .collect();
        assert_eq!(c.cmd(&["SET", &format!("big{i}"), &value]), ok());
    }
    let r = replica_of(p.addr);
    eventually("the replica asked", || {
        info_field(&info(p.addr, "stats"), "sync_full") == "1"
    });
    // Stopped before the walk starts (1 s later): the walk then waits on
    // a replica that reads nothing.
    let resume = Resume::stop(&r);
    eventually("the walk runs", || {
        info_field(&info(p.addr, "persistence"), "rdb_bgsave_in_progress") == "1"
    });
    std::thread::sleep(Duration::from_millis(300));
    // FLUSHALL stops the walk: it must not wait for the stalled replica
    // (the bound is loose: a walk slice of these 300 values holds the
    // store lock while it encodes them, seconds in a debug build on a
    // busy machine).
    let t = Instant::now();
    assert_eq!(c.cmd(&["FLUSHALL"]), ok());
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    assert_eq!(c.cmd(&["SET", "after", "1"]), ok());
    drop(resume);
    // Whether its transfer was cut (it comes back for another sync) or
    // had all gone into the buffers already, it ends equal.
    assert_same(p.addr, r.addr);
}

/// The backlog's memory in INFO memory and MEMORY STATS, as Redis shows
/// it once a replica attached and writes went through.
#[test]
fn info_and_memory_stats_count_the_backlog() {
    let r = RealRedis::start_args(&["--repl-diskless-sync", "no"]);
    let p = primary(false, |_| {});
    for (name, addr) in [("redis", r.addr), ("latchkey", p.addr)] {
        let before = info(addr, "memory");
        assert_eq!(
            info_field(&before, "mem_replication_backlog"),
            "0",
            "{name}"
        );
        let replica = replica_of(addr);
        synced(addr, replica.addr);
        let mut c = Conn::ready(addr);
        for i in 0..100 {
            assert_eq!(c.cmd(&["SET", &format!("k{i}"), "value"]), ok());
        }
        synced(addr, replica.addr);
        let mem = info(addr, "memory");
        let backlog: u64 = info_field(&mem, "mem_replication_backlog").parse().unwrap();
        assert!(backlog > 0, "{name}: {mem}");
        let total: u64 = info_field(&mem, "mem_total_replication_buffers")
            .parse()
            .unwrap();
        assert!(total > 0, "{name}: {mem}");
        let V::Arr(stats) = c.cmd(&["MEMORY", "STATS"]) else {
            panic!("MEMORY STATS")
        };
        let at = stats
            .iter()
            .position(|v| *v == b("replication.backlog"))
            .expect("replication.backlog");
        let V::Int(n) = stats[at + 1] else {
            panic!("{:?}", stats[at + 1])
        };
        assert!(n > 0, "{name}: replication.backlog {n}");
        drop(replica);
    }
}

/// PUBLISH and SPUBLISH on the primary reach the subscribers of its
/// replicas, a Redis one and a latchkey one (Redis outside cluster mode
/// propagates them to replicas, not to the AOF: Sentinel's hello messages
/// travel this way), alone and inside MULTI, and count in the offset.
#[test]
fn publish_reaches_the_subscribers_of_replicas() {
    let p = primary(true, |_| {});
    let r = replica_of(p.addr);
    let port = p.addr.port();
    let l = primary(true, |c| {
        c.repl.replicaof = Some(("127.0.0.1".into(), port))
    });
    let replicas = [r.addr, l.addr];
    let mut subs = vec![];
    for a in replicas {
        synced(p.addr, a);
        let mut s = Conn::new(a);
        assert!(matches!(s.cmd(&["SUBSCRIBE", "ch"]), V::Arr(_)));
        assert!(matches!(s.cmd(&["SSUBSCRIBE", "sch"]), V::Arr(_)));
        subs.push(s);
    }
    let mut c = Conn::new(p.addr);
    assert_eq!(c.cmd(&["PUBLISH", "ch", "hello"]), V::Int(0));
    assert_eq!(c.cmd(&["SPUBLISH", "sch", "shello"]), V::Int(0));
    assert_eq!(c.cmd(&["MULTI"]), ok());
    c.cmd(&["SET", "k", "v"]);
    c.cmd(&["PUBLISH", "ch", "in-multi"]);
    assert!(matches!(c.cmd(&["EXEC"]), V::Arr(_)));
    let msg = |kind: &str, ch: &str, m: &str| V::Arr(vec![b(kind), b(ch), b(m)]);
    for (s, a) in subs.iter_mut().zip(replicas) {
        assert_eq!(s.frame(), msg("message", "ch", "hello"), "{a}");
        assert_eq!(s.frame(), msg("smessage", "sch", "shello"), "{a}");
        assert_eq!(s.frame(), msg("message", "ch", "in-multi"), "{a}");
        synced(p.addr, a);
    }
    assert_eq!(Conn::new(l.addr).cmd(&["GET", "k"]), b("v"));
}

/// A master restarted from its RDB keeps its history as its second ID, as
/// Redis 7.0.15's loadDataFromDisk does on a master (checked by hand
/// against Debian's redis-server 7.0.15 on the same steps: SHUTDOWN SAVE
/// with a replica attached, start again on the same directory: the old
/// `master_replid` is `master_replid2`, `second_repl_offset` is the old
/// offset + 1, `master_repl_offset` goes on from it, the backlog starts
/// there empty, and the replica's PSYNC is accepted, `Sending 0 bytes of
/// backlog`). So a planned restart of the primary costs its replicas no
/// full sync. A Latchkey replica that holds its master's locks syncs in
/// full instead: the master's sessions ended with it, and a partial
/// resync would keep their keys.
#[test]
fn a_master_restarted_from_its_rdb_lets_its_replicas_continue() {
    const BIN: &str = env!("CARGO_BIN_EXE_latchkey-server");
    let dir = TempDir::new("master-restart");
    let args = [
        "--save",
        "",
        "--repl-diskless-sync-delay",
        "0",
        "--enable-debug-command",
        "yes",
    ];
    let mut m = Proc::spawn(BIN, &dir, &args);
    assert!(m.started().is_none(), "the master starts");
    let redis = replica_of(m.addr);
    let lk = latchkey(|_| {});
    replicaof(lk.addr, m.addr);
    dataset(m.addr);
    synced(m.addr, redis.addr);
    synced(m.addr, lk.addr);
    let restart = |m: &mut Proc| {
        let before = info(m.addr, "replication");
        // The connection closes with the shutdown.
        Conn::new(m.addr).send(&["SHUTDOWN", "SAVE"]);
        assert!(m.exited().success());
        m.restart(BIN, &dir, &args);
        assert!(m.started().is_none(), "the master starts again");
        before
    };
    let before = restart(&mut m);
    let after = info(m.addr, "replication");
    // SHUTDOWN's GETACK to the replicas moved the offset after `before`.
    let off: i64 = info_field(&after, "master_repl_offset").parse().unwrap();
    let old: i64 = info_field(&before, "master_repl_offset").parse().unwrap();
    assert!(off >= old, "{off} < {old}");
    assert_eq!(
        info_field(&after, "master_replid2"),
        info_field(&before, "master_replid")
    );
    assert_ne!(
        info_field(&after, "master_replid"),
        info_field(&before, "master_replid")
    );
    assert_eq!(
        info_field(&after, "second_repl_offset"),
        (off + 1).to_string()
    );
    assert_eq!(
        info_field(&after, "repl_backlog_first_byte_offset"),
        (off + 1).to_string()
    );
    assert_eq!(info_field(&after, "repl_backlog_histlen"), "0");
    eventually("both replicas continue partially", || {
        info_field(&info(m.addr, "stats"), "sync_partial_ok") == "2"
    });
    assert_eq!(info_field(&info(m.addr, "stats"), "sync_full"), "0");
    live_writes(m.addr);
    synced(m.addr, redis.addr);
    synced(m.addr, lk.addr);
    assert_same(m.addr, redis.addr);
    assert_same(m.addr, lk.addr);

    // With a lock held when it stops: the Latchkey replica has the
    // master's lock state, which the restart ended, so it syncs in full
    // (and the lock's key goes); the Redis replica, which never had it,
    // continues.
    let mut holder = Conn::new(m.addr);
    assert_eq!(holder.cmd(&["SETTP", "lk", "v"]), V::Int(1));
    eventually("the hold reaches the Latchkey replica", || {
        Conn::new(lk.addr).cmd(&["EXISTS", "lk"]) == V::Int(1)
    });
    restart(&mut m);
    drop(holder);
    eventually(
        "the Redis replica continues, the Latchkey one syncs",
        || {
            let st = info(m.addr, "stats");
            info_field(&st, "sync_partial_ok") == "1" && info_field(&st, "sync_full") == "1"
        },
    );
    synced(m.addr, lk.addr);
    assert_eq!(Conn::new(lk.addr).cmd(&["EXISTS", "lk"]), V::Int(0));
    assert_same(m.addr, lk.addr);
    assert_same(m.addr, redis.addr);
}
