//! FAILOVER, as Redis 7.0.15's: the primary pauses writes, waits until
//! its replica acknowledged its offset, becomes that replica's replica and
//! sends it `PSYNC <replid> <offset> FAILOVER`; the replica becomes the
//! primary and the old one continues from it by a partial resync. Between
//! latchkey nodes, to a chosen replica of two, from a latchkey primary to
//! a redis-server replica and from a redis-server primary to a latchkey
//! replica; TIMEOUT, FORCE and ABORT; the error replies compared with a
//! redis-server pair's. A replica that must not catch up is a
//! redis-server stopped with SIGSTOP (`Resume` sends SIGCONT however the
//! test ends). Every server is stopped however the test ends, every wait
//! is bounded.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

mod common;
use common::repl::*;
use common::*;

fn redis() -> RealRedis {
    RealRedis::start_args(&[
        "--enable-debug-command",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
    ])
}

fn field(addr: SocketAddr, section: &str, name: &str) -> String {
    info_field(&info(addr, section), name)
}

fn role(addr: SocketAddr) -> String {
    field(addr, "replication", "role")
}

/// Polls `f` every 20 ms for at most `SYNC_WAIT`.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + SYNC_WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `p` lists `r` as an online replica (INFO's slaveN).
fn online(p: SocketAddr, r: SocketAddr) {
    let want = format!("port={},state=online", r.port());
    until("the replica is online on its primary", || {
        info(p, "replication").contains(&want)
    });
}

/// `old` handed over to `new`: `new` is a master that `old` follows with
/// its link up, the FAILOVER is over on `old`, and `new` took `old` by a
/// partial resync (`sync_partial_ok`, no full sync).
fn handed_over(old: SocketAddr, new: SocketAddr) {
    until("the roles switch", || {
        role(new) == "master"
            && role(old) == "slave"
            && field(old, "replication", "master_link_status") == "up"
            && field(old, "replication", "master_failover_state") == "no-failover"
    });
    assert_eq!(
        field(old, "replication", "master_port"),
        new.port().to_string()
    );
    assert_eq!(field(new, "stats", "sync_partial_ok"), "1");
    assert_eq!(field(new, "stats", "sync_full"), "0");
}

/// The whole hand-over between `p` (the primary) and `r` (its replica):
/// writes before, FAILOVER, writes on the new primary reach the old one,
/// the old one refuses writes, the data the same on both.
fn failover_scenario(p: SocketAddr, r: SocketAddr) {
    dataset(p);
    replicaof(r, p);
    assert_same(p, r);
    live_writes(p);
    let mut c = Conn::new(p);
    assert_eq!(c.cmd(&["FAILOVER"]), ok());
    handed_over(p, r);
    // A client of the old primary: writes are a replica's now.
    let mut w = Conn::new(p);
    match w.cmd(&["SET", "after", "old"]) {
        V::Err(e) => assert!(e.starts_with("READONLY"), "{e}"),
        other => panic!("a write on the old primary: {other:?}"),
    }
    assert_eq!(Conn::new(r).cmd(&["SET", "after", "new"]), ok());
    assert_eq!(Conn::new(r).cmd(&["INCR", "counter"]), V::Int(7));
    assert_same(r, p);
    assert_eq!(Conn::new(p).cmd(&["GET", "after"]), b("new"));
    assert_eq!(Conn::new(p).cmd(&["GET", "fromlua"]), b("luavalue"));
}

#[test]
fn failover_between_latchkey_nodes() {
    let p = latchkey(|_| {});
    let r = latchkey(|_| {});
    failover_scenario(p.addr, r.addr);
    // The same on redis-server nodes, the oracle.
    let rp = redis();
    let rr = redis();
    failover_scenario(rp.addr, rr.addr);
}

#[test]
fn failover_from_latchkey_to_redis_replica() {
    let p = latchkey(|_| {});
    let r = redis();
    failover_scenario(p.addr, r.addr);
}

#[test]
fn failover_from_redis_to_latchkey_replica() {
    let p = redis();
    let r = latchkey(|_| {});
    failover_scenario(p.addr, r.addr);
}

/// FAILOVER TO the second of two replicas: it becomes the primary, the
/// old primary its replica, the first replica stays the old primary's
/// (a chained replica, as in Redis) and follows the new writes.
fn to_chosen(p: SocketAddr, r1: SocketAddr, r2: SocketAddr) {
    dataset(p);
    replicaof(r1, p);
    replicaof(r2, p);
    assert_same(p, r1);
    assert_same(p, r2);
    online(p, r2);
    let port = r2.port().to_string();
    assert_eq!(
        Conn::new(p).cmd(&["FAILOVER", "TO", "127.0.0.1", &port, "TIMEOUT", "10000"]),
        ok()
    );
    handed_over(p, r2);
    assert_eq!(role(r1), "slave");
    assert_eq!(
        field(r1, "replication", "master_port"),
        p.port().to_string()
    );
    assert_eq!(Conn::new(r2).cmd(&["SET", "chained", "yes"]), ok());
    assert_same(r2, p);
    assert_same(p, r1);
    assert_eq!(Conn::new(r1).cmd(&["GET", "chained"]), b("yes"));
}

#[test]
fn failover_to_a_chosen_replica_of_two() {
    let p = latchkey(|_| {});
    let r1 = latchkey(|_| {});
    let r2 = latchkey(|_| {});
    to_chosen(p.addr, r1.addr, r2.addr);
    let rp = redis();
    let rr1 = redis();
    let rr2 = redis();
    to_chosen(rp.addr, rr1.addr, rr2.addr);
}

/// A primary `p` with a redis-server replica `r` synced, then stopped
/// (SIGSTOP), and a write it has not acknowledged.
fn behind(p: SocketAddr, r: &RealRedis) -> Resume {
    behind_on(p, r, "unacked")
}

/// `behind`, the write to `key`.
fn behind_on(p: SocketAddr, r: &RealRedis, key: &str) -> Resume {
    replicaof(r.addr, p);
    assert_same(p, r.addr);
    online(p, r.addr);
    let stopped = Resume::stop(r);
    assert_eq!(Conn::new(p).cmd(&["SET", key, "1"]), ok());
    stopped
}

/// FAILOVER TIMEOUT with a replica that never catches up: writes wait
/// meanwhile (a SET is answered only after the abort), then the FAILOVER
/// aborts and the primary is a writable primary again. Returns what was
/// observed, to compare latchkey's with Redis's.
fn timeout_aborts(p: SocketAddr, r: &RealRedis) -> Vec<V> {
    let _stopped = behind(p, r);
    let mut seen = Vec::new();
    let mut c = Conn::new(p);
    seen.push(c.cmd(&["FAILOVER", "TIMEOUT", "600"]));
    let started = Instant::now();
    seen.push(V::Bulk(
        field(p, "replication", "master_failover_state").into_bytes(),
    ));
    let mut w = Conn::new(p);
    w.send(&["SET", "during", "x"]);
    assert!(
        w.frame_within(Duration::from_millis(200)).is_none(),
        "a write ran during the FAILOVER"
    );
    seen.push(
        w.frame_within(SYNC_WAIT)
            .expect("the write after the abort"),
    );
    assert!(started.elapsed() >= Duration::from_millis(550));
    seen.push(V::Bulk(
        field(p, "replication", "master_failover_state").into_bytes(),
    ));
    seen.push(V::Bulk(role(p).into_bytes()));
    seen.push(c.cmd(&["GET", "during"]));
    seen.push(c.cmd(&["FAILOVER", "ABORT"]));
    seen
}

/// `scenario` with a latchkey primary, then with a redis-server primary
/// (each with a redis-server replica): what it saw must be the same.
fn as_redis(scenario: fn(SocketAddr, &RealRedis) -> Vec<V>) -> Vec<V> {
    let p = latchkey(|_| {});
    let r = redis();
    let ours = scenario(p.addr, &r);
    let rp = redis();
    let rr = redis();
    assert_eq!(ours, scenario(rp.addr, &rr), "latchkey's, then Redis's");
    ours
}

#[test]
fn failover_timeout_aborts_and_the_primary_stays_writable() {
    let ours = as_redis(timeout_aborts);
    assert_eq!(ours[1], b("waiting-for-sync"));
    assert_eq!(ours[3], b("no-failover"));
}

/// FAILOVER ABORT while waiting: OK, writes resume, the primary stays;
/// a second ABORT has no failover to abort.
fn abort(p: SocketAddr, r: &RealRedis) -> Vec<V> {
    let _stopped = behind(p, r);
    let mut c = Conn::new(p);
    let mut seen = vec![c.cmd(&["FAILOVER"])];
    let mut w = Conn::new(p);
    w.send(&["SET", "during", "x"]);
    assert!(w.frame_within(Duration::from_millis(200)).is_none());
    seen.push(c.cmd(&["FAILOVER"]));
    seen.push(c.cmd(&["REPLICAOF", "NO", "ONE"]));
    seen.push(c.cmd(&["FAILOVER", "ABORT"]));
    seen.push(w.frame_within(WAIT).expect("the write after the abort"));
    seen.push(V::Bulk(
        field(p, "replication", "master_failover_state").into_bytes(),
    ));
    seen.push(c.cmd(&["FAILOVER", "ABORT"]));
    seen.push(c.cmd(&["SET", "after", "y"]));
    seen
}

#[test]
fn failover_abort() {
    let ours = as_redis(abort);
    assert_eq!(ours[3], ok());
    assert_eq!(ours[6], V::Err("ERR No failover in progress.".into()));
}

/// `behind`, then FAILOVER TO that replica FORCE TIMEOUT 300 until the
/// hand-over starts: the reply and the role then.
fn forced(p: SocketAddr, r: &RealRedis) -> (Resume, Vec<V>) {
    let stopped = behind(p, r);
    let port = r.addr.port().to_string();
    let f = Conn::new(p).cmd(&[
        "FAILOVER",
        "TO",
        "127.0.0.1",
        &port,
        "FORCE",
        "TIMEOUT",
        "300",
    ]);
    until("the hand-over starts", || {
        field(p, "replication", "master_failover_state") == "failover-in-progress"
    });
    (stopped, vec![f, b(&role(p))])
}

/// FAILOVER TO a replica FORCE TIMEOUT: past the timeout the primary
/// hands over to the replica that has not caught up; once it runs again
/// it takes over, and the old primary follows it.
fn force(p: SocketAddr, r: &RealRedis) -> Vec<V> {
    let (stopped, seen) = forced(p, r);
    drop(stopped);
    until("the roles switch", || {
        role(r.addr) == "master"
            && field(p, "replication", "master_link_status") == "up"
            && field(p, "replication", "master_failover_state") == "no-failover"
    });
    assert_eq!(Conn::new(r.addr).cmd(&["SET", "forced", "1"]), ok());
    assert_same(r.addr, p);
    assert_eq!(Conn::new(p).cmd(&["GET", "forced"]), b("1"));
    seen
}

#[test]
fn failover_force_hands_over_at_the_timeout() {
    let seen = as_redis(force);
    assert_eq!(seen, [ok(), b("slave")]);
}

/// FAILOVER ABORT once the hand-over started (FORCE at the timeout, to a
/// stopped replica that cannot answer): the primary stops following it
/// and is a writable primary again.
fn abort_in_progress(p: SocketAddr, r: &RealRedis) -> Vec<V> {
    let (_stopped, mut seen) = forced(p, r);
    let mut c = Conn::new(p);
    seen.push(c.cmd(&["SET", "k", "v"]));
    seen.push(c.cmd(&["FAILOVER", "ABORT"]));
    seen.push(b(&role(p)));
    seen.push(b(&field(p, "replication", "master_failover_state")));
    seen.push(c.cmd(&["SET", "k", "v"]));
    seen
}

#[test]
fn failover_abort_while_handing_over() {
    let seen = as_redis(abort_in_progress);
    assert_eq!(seen[1], b("slave"));
    assert_eq!(seen[3], ok());
    assert_eq!(seen[4], b("master"));
    assert_eq!(seen[6], ok());
}

/// The error replies, on a primary without replicas, then with one, and
/// on that replica.
fn errors(p: SocketAddr, r: SocketAddr) -> Vec<V> {
    let mut c = Conn::new(p);
    let alone: &[&[&str]] = &[
        &["FAILOVER"],
        &["FAILOVER", "ABORT"],
        &["FAILOVER", "TIMEOUT", "0"],
        &["FAILOVER", "TIMEOUT", "-5"],
        &["FAILOVER", "TIMEOUT", "abc"],
        &["FAILOVER", "TIMEOUT"],
        &["FAILOVER", "TIMEOUT", "10", "TIMEOUT", "20"],
        &["FAILOVER", "TO", "127.0.0.1"],
        &["FAILOVER", "TO", "127.0.0.1", "abc"],
        &["FAILOVER", "FORCE", "FORCE"],
        &["FAILOVER", "FORCE"],
        &["FAILOVER", "BOGUS"],
        &["FAILOVER", "ABORT", "TIMEOUT", "10"],
        &["PSYNC", "abc", "1", "FAILOVER"],
    ];
    let mut seen: Vec<V> = alone.iter().map(|a| c.cmd(a)).collect();
    replicaof(r, p);
    synced(p, r);
    online(p, r);
    let port = r.port().to_string();
    let with_one: &[&[&str]] = &[
        &["FAILOVER", "FORCE"],
        &["FAILOVER", "FORCE", "TIMEOUT", "10"],
        &["FAILOVER", "TO", "127.0.0.1", &port, "FORCE"],
        &["FAILOVER", "TO", "127.0.0.1", "1"],
        &["FAILOVER", "TO", "127.0.0.1", "99999"],
        &["FAILOVER", "TO", "10.0.0.1", &port],
    ];
    seen.extend(with_one.iter().map(|a| c.cmd(a)));
    let mut on_replica = Conn::new(r);
    seen.push(on_replica.cmd(&["FAILOVER"]));
    seen.push(on_replica.cmd(&["FAILOVER", "ABORT"]));
    seen.push(on_replica.cmd(&[
        "PSYNC",
        "0123456789012345678901234567890123456789",
        "1",
        "FAILOVER",
    ]));
    seen
}

#[test]
fn failover_errors_as_redis() {
    let p = latchkey(|_| {});
    let r = latchkey(|_| {});
    let ours = errors(p.addr, r.addr);
    let rp = redis();
    let rr = redis();
    let theirs = errors(rp.addr, rr.addr);
    assert_eq!(ours, theirs);
    let want = [
        "ERR FAILOVER requires connected replicas.",
        "ERR No failover in progress.",
        "ERR FAILOVER timeout must be greater than 0",
    ];
    for (i, w) in want.iter().enumerate() {
        assert_eq!(ours[i], V::Err((*w).into()), "reply {i}");
    }
}

/// REPLICAOF while a FAILOVER waits is refused, and INFO shows the state.
#[test]
fn replicaof_refused_while_failing_over() {
    let p = latchkey(|_| {});
    let r = redis();
    let _stopped = behind(p.addr, &r);
    let mut c = Conn::new(p.addr);
    assert_eq!(c.cmd(&["FAILOVER"]), ok());
    assert_eq!(
        c.cmd(&["REPLICAOF", "127.0.0.1", "1"]),
        V::Err("ERR REPLICAOF not allowed while failing over.".into())
    );
    assert_eq!(
        c.cmd(&["FAILOVER", "TIMEOUT", "100"]),
        V::Err("ERR FAILOVER already in progress.".into())
    );
    // CLIENT UNPAUSE ends the client's pause, not the FAILOVER's.
    assert_eq!(c.cmd(&["CLIENT", "UNPAUSE"]), ok());
    let mut w = Conn::new(p.addr);
    w.send(&["SET", "during", "x"]);
    assert!(w.frame_within(Duration::from_millis(200)).is_none());
    assert_eq!(c.cmd(&["FAILOVER", "ABORT"]), ok());
    assert_eq!(w.frame_within(WAIT), Some(ok()));
}

// ------------------------------------------- SHUTDOWN waiting for replicas

/// A primary as a process of its own, so that its exit can be seen:
/// latchkey-server or redis-server, with `shutdown-timeout` `secs`.
enum Primary {
    /// The process, and its directory (removed when dropped).
    Latchkey {
        p: Proc,
        _dir: TempDir,
    },
    Redis(RealRedis),
}

impl Primary {
    fn start(redis_server: bool, secs: u32) -> Primary {
        let secs = secs.to_string();
        let args = [
            "--shutdown-timeout",
            &secs,
            "--repl-diskless-sync-delay",
            "0",
            "--enable-debug-command",
            "yes",
        ];
        if redis_server {
            return Primary::Redis(RealRedis::start_args(&args));
        }
        let dir = TempDir::new("shutdown");
        let mut args = args.to_vec();
        args.extend(["--save", ""]);
        let mut p = Proc::spawn(env!("CARGO_BIN_EXE_latchkey-server"), &dir, &args);
        assert!(p.started().is_none(), "latchkey-server exited at start");
        Primary::Latchkey { p, _dir: dir }
    }

    fn addr(&self) -> SocketAddr {
        match self {
            Primary::Latchkey { p, .. } => p.addr,
            Primary::Redis(r) => r.addr,
        }
    }

    fn pid(&self) -> u32 {
        match self {
            Primary::Latchkey { p, .. } => p.child.id(),
            Primary::Redis(r) => r.pid(),
        }
    }

    /// `kill -<sig>`.
    fn signal(&self, sig: &str) {
        let st = std::process::Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(st.success());
    }
}

impl Primary {
    /// Waits (at most `limit`) until the server is gone: latchkey-server's
    /// process exited with status `code`, nothing listens on
    /// redis-server's port.
    fn gone_within(&mut self, limit: Duration, code: i32) -> Duration {
        let start = Instant::now();
        loop {
            let gone = match self {
                Primary::Latchkey { p, .. } => match p.child.try_wait().unwrap() {
                    Some(st) => {
                        assert_eq!(st.code(), Some(code), "latchkey-server exited with {st}");
                        true
                    }
                    None => false,
                },
                Primary::Redis(r) => std::net::TcpStream::connect(r.addr).is_err(),
            };
            if gone {
                return start.elapsed();
            }
            assert!(start.elapsed() < limit, "the server is still up");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The shutdown waits: no reply, writes paused, INFO's countdown.
fn waiting(p: SocketAddr, c: &mut Conn) -> Conn {
    assert!(c.frame_within(Duration::from_millis(300)).is_none());
    let server = info(p, "server");
    let left: i64 = info_field(&server, "shutdown_in_milliseconds")
        .parse()
        .expect("shutdown_in_milliseconds while waiting");
    assert!(left > 0, "{left}");
    let mut w = Conn::new(p);
    w.send(&["SET", "during", "x"]);
    assert!(w.frame_within(Duration::from_millis(200)).is_none());
    w
}

/// A primary process (`shutdown-timeout` `secs`) with a redis-server
/// replica that stopped (SIGSTOP) after the sync, and a write to `key` it
/// has not acknowledged.
fn lagging(redis_server: bool, secs: u32, key: &str) -> (Primary, RealRedis, Resume) {
    let p = Primary::start(redis_server, secs);
    let r = redis();
    let stopped = behind_on(p.addr(), &r, key);
    (p, r, stopped)
}

/// SHUTDOWN (or SIGTERM) with a replica behind: the primary asks it for
/// its offset and waits; the replica runs again, acknowledges, and the
/// primary exits at once, long before `shutdown-timeout`, with its last
/// write on the replica. Returns the time from SIGCONT to the exit.
fn shutdown_waits(redis_server: bool, signal: bool) -> Duration {
    let (mut p, r, stopped) = lagging(redis_server, 10, "acked");
    let mut c = Conn::new(p.addr());
    if signal {
        p.signal("TERM");
        // Paused as soon as the signal is handled.
        until("the shutdown starts", || {
            info(p.addr(), "server").contains("shutdown_in_milliseconds:")
        });
    } else {
        c.send(&["SHUTDOWN"]);
    }
    let _w = waiting(p.addr(), &mut c);
    let resumed = Instant::now();
    drop(stopped);
    p.gone_within(Duration::from_secs(5), 0);
    let took = resumed.elapsed();
    if !signal {
        assert!(c.closed(), "the SHUTDOWN client got a reply");
    }
    let mut rc = Conn::new(r.addr);
    assert_eq!(rc.cmd(&["GET", "acked"]), b("1"));
    assert_eq!(rc.cmd(&["GET", "during"]), V::Nil);
    took
}

#[test]
fn shutdown_waits_for_a_lagging_replica() {
    for signal in [false, true] {
        let ours = shutdown_waits(false, signal);
        let theirs = shutdown_waits(true, signal);
        eprintln!("SIGCONT to exit (signal {signal}): latchkey {ours:?}, redis-server {theirs:?}");
        // Well before the 10 s of shutdown-timeout.
        assert!(ours < Duration::from_secs(5), "{ours:?}");
    }
}

/// With the replica stopped for good the primary exits at the timeout;
/// SHUTDOWN NOW does not wait at all.
fn shutdown_gives_up(redis_server: bool, now: bool) -> Duration {
    let (mut p, _r, _stopped) = lagging(redis_server, 1, "unacked");
    let mut c = Conn::new(p.addr());
    let start = Instant::now();
    c.send(if now {
        &["SHUTDOWN", "NOW"][..]
    } else {
        &["SHUTDOWN"][..]
    });
    p.gone_within(Duration::from_secs(5), 0);
    start.elapsed()
}

#[test]
fn shutdown_timeout_and_shutdown_now() {
    for redis_server in [false, true] {
        let waited = shutdown_gives_up(redis_server, false);
        let now = shutdown_gives_up(redis_server, true);
        eprintln!("redis-server {redis_server}: shutdown-timeout 1 exit after {waited:?}, SHUTDOWN NOW after {now:?}");
        assert!(waited >= Duration::from_millis(900), "{waited:?}");
        assert!(waited < Duration::from_secs(4), "{waited:?}");
        assert!(now < Duration::from_millis(900), "{now:?}");
    }
}

/// SHUTDOWN ABORT from another client: the waiting SHUTDOWN gets the
/// error, the paused write runs, the server stays up.
fn abort_shutdown(redis_server: bool) -> Vec<V> {
    let (p, _r, _stopped) = lagging(redis_server, 10, "unacked");
    let mut c = Conn::new(p.addr());
    c.send(&["SHUTDOWN"]);
    let mut w = waiting(p.addr(), &mut c);
    let mut a = Conn::new(p.addr());
    let mut seen = vec![
        a.cmd(&["SHUTDOWN", "ABORT", "NOW"]),
        a.cmd(&["SHUTDOWN", "ABORT"]),
    ];
    seen.push(c.frame_within(WAIT).expect("the SHUTDOWN's answer"));
    seen.push(w.frame_within(WAIT).expect("the paused write"));
    seen.push(a.cmd(&["SHUTDOWN", "ABORT"]));
    let counting = info(p.addr(), "server").contains("shutdown_in_milliseconds:");
    seen.push(V::Int(counting as i64));
    seen.push(a.cmd(&["GET", "during"]));
    seen
}

#[test]
fn shutdown_abort_as_redis() {
    let ours = abort_shutdown(false);
    assert_eq!(ours, abort_shutdown(true));
    assert_eq!(
        ours[2],
        V::Err("ERR Errors trying to SHUTDOWN. Check logs.".into())
    );
    assert_eq!(ours[4], V::Err("ERR No shutdown in progress.".into()));
}

/// A second SIGINT while the shutdown waits for a replica: out at once,
/// with status 1 ("You insist... exiting now.").
#[test]
fn a_second_sigint_exits_at_once() {
    for redis_server in [false, true] {
        let (mut p, _r, _stopped) = lagging(redis_server, 10, "unacked");
        p.signal("INT");
        until("the shutdown waits", || {
            info(p.addr(), "server").contains("shutdown_in_milliseconds:")
        });
        p.signal("INT");
        p.gone_within(Duration::from_secs(2), 1);
    }
}
