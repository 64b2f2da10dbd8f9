//! Lock state across replication (issue 22, part 3): a Latchkey replica
//! (`REPLCONF capa latchkey`) gets its primary's bound keys, shares and
//! fencing counter in the full sync (RDB AUX fields Redis skips) and in
//! the stream (lock frames outside the offsets), continues them partially
//! after a cut, passes them down a chain, and, promoted, keeps the old
//! primary's sessions detached until `tp-failover-grace` ends them. A
//! Redis replica of the same primary gets exactly Redis's stream (its
//! offset equals the primary's, which it would not with a lock frame).
//! Every server is stopped however the test ends, every wait is bounded.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

mod common;
use common::repl::*;
use common::*;

use latchkey_server::config::Config;
use latchkey_server::runtime::ServerHandle;

fn int(v: V) -> i64 {
    match v {
        V::Int(n) => n,
        other => panic!("not an integer: {other:?}"),
    }
}

fn stat(addr: SocketAddr, name: &str) -> String {
    info_field(&info(addr, "stats"), name)
}

/// A replica with the primary's bound key `key` = `value`, held by a
/// session of its own (TPOWNER names it; nobody connected has that id).
fn holds(replica: SocketAddr, key: &str, value: &str) -> bool {
    let mut c = Conn::new(replica);
    c.cmd(&["GET", key]) == b(value) && matches!(c.cmd(&["TPOWNER", key]), V::Int(_))
}

fn gone(replica: SocketAddr, key: &str) -> bool {
    Conn::new(replica).cmd(&["EXISTS", key]) == V::Int(0)
}

/// A primary (`tweak`ed) and its Latchkey replica in sync, with `k1`
/// held by the connection returned and on the replica.
fn holding_k1(tweak: impl FnOnce(&mut Config)) -> (ServerHandle, ServerHandle, Conn) {
    let p = latchkey(tweak);
    let r = latchkey(|_| {});
    replicaof(r.addr, p.addr);
    synced(p.addr, r.addr);
    let mut a = Conn::new(p.addr);
    assert_eq!(a.cmd(&["SETTP", "k1", "v1"]), V::Int(1));
    eventually("the hold reaches the replica", || holds(r.addr, "k1", "v1"));
    (p, r, a)
}

fn full_sync_and_stream(diskless: bool) {
    let p = latchkey(|c| c.repl.diskless_sync = diskless);
    let mut a = Conn::new(p.addr);
    let mut sh = Conn::new(p.addr);
    let t_pre = int(a.cmd(&["SETTP", "pre", "va", "PX", "100000", "TOKEN"]));
    assert_eq!(sh.cmd(&["SETTP", "sem", "p1", "PERMITS", "2"]), V::Int(1));
    assert_eq!(Conn::new(p.addr).cmd(&["SET", "plain", "x"]), ok());
    // The full sync carries the holds (bound keys are in no RDB key).
    let r = latchkey(|_| {});
    replicaof(r.addr, p.addr);
    assert_same(p.addr, r.addr);
    assert!(holds(r.addr, "pre", "va"));
    let mut rc = Conn::new(r.addr);
    assert_eq!(rc.cmd(&["GET", "sem"]), b("permits:2"));
    assert!(int(rc.cmd(&["PTTL", "pre"])) > 90_000);
    // The fencing token is the primary's.
    match rc.cmd(&["TPINFO", "pre"]) {
        V::Arr(v) => assert!(
            v.windows(2)
                .any(|w| w[0] == b("token") && w[1] == V::Int(t_pre)),
            "{v:?}"
        ),
        other => panic!("TPINFO: {other:?}"),
    }
    // A watcher on the replica follows the replicated holds.
    let mut w = Conn::resp3(r.addr);
    assert_eq!(w.cmd(&["WATCHEX", "live"]), V::Simple("NOEXIST".into()));
    // The stream: a new hold, a rename by its holder, a release.
    let t_live = int(a.cmd(&["SETTP", "live", "vb", "TOKEN"]));
    assert!(t_live > t_pre);
    w.expect_push("live", "ADD");
    assert_same(p.addr, r.addr);
    assert!(holds(r.addr, "live", "vb"));
    assert_eq!(a.cmd(&["RENAME", "pre", "pre2"]), ok());
    assert_eq!(sh.cmd(&["TPRELEASE", "sem", "p1"]), V::Int(1));
    assert_same(p.addr, r.addr);
    assert!(gone(r.addr, "pre") && gone(r.addr, "sem"));
    assert!(holds(r.addr, "pre2", "va"));
    // The holder goes: its keys go on the replica too, watchers told.
    drop(a);
    w.expect_push("live", "DEL");
    eventually("the holder's keys are gone on the replica", || {
        gone(r.addr, "pre2") && gone(r.addr, "live")
    });
    assert_same(p.addr, r.addr);
    assert_eq!(rc.cmd(&["GET", "plain"]), b("x"));
}

#[test]
fn holds_reach_a_latchkey_replica_from_the_rdb_file_and_the_stream() {
    full_sync_and_stream(false);
}

#[test]
fn holds_reach_a_latchkey_replica_diskless_and_in_the_stream() {
    full_sync_and_stream(true);
}

#[test]
fn a_cut_link_continues_partially_with_the_lock_records_it_missed() {
    let (p, r, mut a) = holding_k1(|_| {});
    // Cut the link, and change data and locks while it is down (or
    // before it is back: either way nothing may be missed).
    assert_eq!(
        Conn::new(r.addr).cmd(&["CLIENT", "KILL", "TYPE", "master"]),
        V::Int(1)
    );
    assert_eq!(a.cmd(&["SET", "between", "1"]), ok());
    assert_eq!(a.cmd(&["SETTP", "k2", "v2"]), V::Int(1));
    assert_eq!(a.cmd(&["DEL", "k1"]), V::Int(1));
    assert_eq!(a.cmd(&["SET", "after", "2"]), ok());
    eventually("the replica continues partially", || {
        stat(p.addr, "sync_partial_ok") == "1"
    });
    assert_eq!(stat(p.addr, "sync_full"), "1");
    assert_same(p.addr, r.addr);
    assert!(holds(r.addr, "k2", "v2") && gone(r.addr, "k1"));
    assert_eq!(Conn::new(r.addr).cmd(&["GET", "after"]), b("2"));
}

#[test]
fn a_redis_replica_gets_no_lock_frames_and_a_chain_passes_them_down() {
    let p = latchkey(|c| c.repl.diskless_sync = false);
    let mut a = Conn::new(p.addr);
    assert_eq!(a.cmd(&["SETTP", "lk", "v"]), V::Int(1));
    let port = p.addr.port().to_string();
    let redis = RealRedis::start_args(&[
        "--replicaof",
        "127.0.0.1",
        &port,
        "--enable-debug-command",
        "yes",
    ]);
    let mid = latchkey(|_| {});
    replicaof(mid.addr, p.addr);
    let sub = latchkey(|_| {});
    replicaof(sub.addr, mid.addr);
    synced(p.addr, redis.addr);
    synced(p.addr, mid.addr);
    synced(mid.addr, sub.addr);
    for i in 1..=20 {
        assert_eq!(a.cmd(&["SETTP", "lk2", "w"]), V::Int(1));
        assert_eq!(a.cmd(&["TPRELEASE", "lk2", "w"]), V::Int(1));
        assert_eq!(a.cmd(&["INCR", "n"]), V::Int(i));
    }
    assert_eq!(a.cmd(&["SETTP", "lk3", "z"]), V::Int(1));
    // Equal offsets: the Redis replica counted no lock frame (and it
    // would have refused TPREPL as an unknown command).
    synced(p.addr, redis.addr);
    synced(p.addr, mid.addr);
    synced(mid.addr, sub.addr);
    eventually("the last hold reaches the end of the chain", || {
        holds(mid.addr, "lk3", "z") && holds(sub.addr, "lk3", "z")
    });
    let mut rc = Conn::new(redis.addr);
    assert_eq!(rc.cmd(&["EXISTS", "lk", "lk3"]), V::Int(0));
    assert_eq!(rc.cmd(&["GET", "n"]), b("20"));
    assert_eq!(digest(mid.addr), digest(sub.addr));
    drop(a);
    eventually("the session's end reaches the end of the chain", || {
        gone(sub.addr, "lk") && gone(sub.addr, "lk3")
    });
}

#[test]
fn a_promoted_replica_keeps_the_holds_until_the_grace_ends() {
    let p = latchkey(|_| {});
    let r = latchkey(|c| c.tp_failover_grace = 600);
    replicaof(r.addr, p.addr);
    synced(p.addr, r.addr);
    let mut a = Conn::new(p.addr);
    let t1 = int(a.cmd(&["SETTP", "lk", "holder", "TOKEN"]));
    // A lock record moves no offset: wait for the hold itself.
    eventually("the hold reaches the replica", || {
        holds(r.addr, "lk", "holder")
    });
    // The primary is cut off; the replica is promoted.
    assert_eq!(Conn::new(r.addr).cmd(&["REPLICAOF", "NO", "ONE"]), ok());
    let promoted = Instant::now();
    let mut w = Conn::resp3(r.addr);
    // The hold is kept: a new client queues behind it.
    assert!(holds(r.addr, "lk", "holder"));
    assert_eq!(w.cmd(&["SETTP", "lk", "next"]), V::Int(0));
    assert_eq!(w.cmd(&["SETTP", "lk", "next", "QUEUE"]), V::Int(0));
    assert_eq!(info_field(&info(r.addr, "replication"), "role"), "master");
    // INFO locks shows the detached session and its hold.
    let il = info(r.addr, "locks");
    assert!(il.starts_with("# Locks\r\n"), "{il}");
    assert_eq!(info_field(&il, "sessions_detached"), "1", "{il}");
    assert_eq!(info_field(&il, "bound_keys"), "1", "{il}");
    assert_eq!(
        info_field(&il, "last_fencing_token"),
        t1.to_string(),
        "{il}"
    );
    assert_eq!(info_field(&il, "lock_waiters"), "1", "{il}");
    // Nobody resumes it: at the grace's end it is handed to the line,
    // with a fencing token above every one the old primary gave. A grace
    // of 600 ms is raised to the least time a detached session lives
    // (2 s: an old primary cut off from its replicas has told its holders
    // LOST by then).
    let t2 = w.expect_acquired(true, "lk", "next");
    let waited = promoted.elapsed();
    assert!(waited >= Duration::from_millis(1950), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert!(t2 > t1 as u64, "{t2} <= {t1}");
    drop(p);
}

/// Points `replica` at a port nobody listens on: its link is down while
/// the primary goes on, and it keeps its history for a PSYNC later.
fn away(replica: SocketAddr) {
    let port = free_port().to_string();
    assert_eq!(
        Conn::new(replica).cmd(&["REPLICAOF", "127.0.0.1", &port]),
        ok()
    );
}

#[test]
fn records_missed_while_away_come_back_in_place_or_by_a_full_sync() {
    let (p, r, mut a) = holding_k1(|c| c.repl.backlog_size = 1 << 20);
    // Away: holds taken and ended between data writes, all in the log.
    away(r.addr);
    assert_eq!(a.cmd(&["SET", "d1", "x"]), ok());
    assert_eq!(a.cmd(&["SETTP", "k2", "v2"]), V::Int(1));
    assert_eq!(a.cmd(&["DEL", "k1"]), V::Int(1));
    assert_eq!(a.cmd(&["SET", "d2", "y"]), ok());
    assert_eq!(a.cmd(&["SETTP", "k3", "v3"]), V::Int(1));
    replicaof(r.addr, p.addr);
    eventually("the replica continues partially", || {
        stat(p.addr, "sync_partial_ok") == "1"
    });
    eventually("every missed record is applied", || {
        holds(r.addr, "k2", "v2") && holds(r.addr, "k3", "v3") && gone(r.addr, "k1")
    });
    assert_same(p.addr, r.addr);
    assert_eq!(stat(p.addr, "sync_full"), "1");
    // Away again, with more lock records than the log keeps (it is as
    // large as the backlog): the data alone could continue, the locks
    // cannot, so it is a full sync.
    assert_eq!(
        Conn::new(p.addr).cmd(&["CONFIG", "SET", "repl-backlog-size", "16384"]),
        ok()
    );
    eventually("the backlog is resized", || {
        info_field(&info(p.addr, "replication"), "repl_backlog_size") == "16384"
    });
    away(r.addr);
    let big = "v".repeat(4096);
    for i in 0..8 {
        assert_eq!(a.cmd(&["SETTP", &format!("big{i}"), &big]), V::Int(1));
    }
    replicaof(r.addr, p.addr);
    eventually("the replica syncs in full", || {
        stat(p.addr, "sync_full") == "2"
    });
    eventually("with every hold", || {
        (0..8).all(|i| holds(r.addr, &format!("big{i}"), &big))
    });
    assert_eq!(stat(p.addr, "sync_partial_ok"), "1");
    assert_same(p.addr, r.addr);
}

#[test]
fn a_restarted_replica_keeps_the_holds_and_continues_partially() {
    let p = latchkey(|_| {});
    let mut a = Conn::new(p.addr);
    assert_eq!(a.cmd(&["SETTP", "kept", "v"]), V::Int(1));
    let dir = TempDir::new("lock-replica-restart");
    let mut r = ReplicaProc::start(p.addr, &dir);
    eventually("the hold reaches the replica", || {
        holds(r.addr, "kept", "v")
    });
    // Its RDB holds the master's lock state (AUX fields) with the data.
    assert_eq!(Conn::new(r.addr).cmd(&["SAVE"]), ok());
    r.restart(&dir);
    assert_eq!(a.cmd(&["SETTP", "later", "w"]), V::Int(1));
    assert_eq!(a.cmd(&["SET", "data", "1"]), ok());
    eventually("it continues partially", || {
        stat(p.addr, "sync_partial_ok") == "1"
    });
    assert_eq!(stat(p.addr, "sync_full"), "1");
    eventually("with the old hold and the new", || {
        holds(r.addr, "kept", "v") && holds(r.addr, "later", "w")
    });
    assert_same(p.addr, r.addr);
    // The holder goes: both go on the restarted replica.
    drop(a);
    eventually("the session's end is applied", || {
        gone(r.addr, "kept") && gone(r.addr, "later")
    });
}

fn session_id(c: &mut Conn) -> String {
    match c.cmd(&["TPSESSION", "ID"]) {
        V::Bulk(b) => String::from_utf8(b).expect("hex"),
        other => panic!("TPSESSION ID: {other:?}"),
    }
}

#[test]
fn a_client_resumes_its_session_on_the_promoted_replica() {
    let p = latchkey(|_| {});
    let r = latchkey(|c| c.tp_failover_grace = 400);
    replicaof(r.addr, p.addr);
    synced(p.addr, r.addr);
    // The holder's ACL user, on both nodes (ACLs do not replicate).
    for n in [p.addr, r.addr] {
        assert_eq!(
            Conn::new(n).cmd(&["ACL", "SETUSER", "alice", "on", ">pw", "~*", "+@all"]),
            ok()
        );
    }
    let mut a = Conn::new(p.addr);
    assert_eq!(a.cmd(&["AUTH", "alice", "pw"]), ok());
    let t = int(a.cmd(&["SETTP", "lk", "mine", "TOKEN"]));
    let t_sh = int(a.cmd(&["SETTP", "sh", "r1", "SHARED", "TOKEN"]));
    assert_eq!(a.cmd(&["SELECT", "3"]), ok());
    let t_in3 = int(a.cmd(&["SETTP", "in3", "x", "TOKEN"]));
    let sid = session_id(&mut a);
    eventually("the holds reach the replica", || {
        holds(r.addr, "lk", "mine") && Conn::new(r.addr).cmd(&["EXISTS", "sh"]) == V::Int(1)
    });
    let mut x = Conn::new(r.addr);
    // On a replica the session is its master's: nothing to resume.
    assert!(matches!(x.cmd(&["TPRESUME", &sid]), V::Err(e) if e.starts_with("READONLY")));
    assert_eq!(Conn::new(r.addr).cmd(&["REPLICAOF", "NO", "ONE"]), ok());
    // Bad or unknown identities.
    assert_eq!(
        x.cmd(&["TPRESUME", "nothex"]),
        V::Err("ERR invalid session id".into())
    );
    assert_eq!(
        x.cmd(&["TPRESUME", &"0".repeat(32)]),
        V::Err("ERR no such session to resume".into())
    );
    // Bound to alice: another user cannot take it over.
    assert_eq!(
        x.cmd(&["TPRESUME", &sid]),
        V::Err("ERR no such session to resume".into())
    );
    // Its client takes it over: every hold, in every database.
    assert_eq!(x.cmd(&["AUTH", "alice", "pw"]), ok());
    // Each hold with the value it was taken with (a share's own value),
    // which TPRELEASE names, and its fencing token.
    let held = x.cmd(&["TPRESUME", &sid]);
    let hold = |db: i64, k: &str, v: &str, t: i64| V::Arr(vec![V::Int(db), b(k), b(v), V::Int(t)]);
    assert_eq!(
        held,
        V::Arr(vec![
            hold(0, "lk", "mine", t),
            hold(0, "sh", "r1", t_sh),
            hold(3, "in3", "x", t_in3)
        ])
    );
    assert_eq!(
        x.cmd(&["TPRESUME", &sid]),
        V::Err("ERR this connection already takes part in the lock service".into())
    );
    assert_eq!(session_id(&mut x), sid);
    let xid = x.id();
    assert_eq!(x.cmd(&["TPOWNER", "lk"]), V::Int(xid));
    // Past the time a detached session lives (the grace, raised to 2 s)
    // it still holds them, with the same token.
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(x.cmd(&["TPCHECK", "lk", &t.to_string()]), ok());
    assert_eq!(x.cmd(&["GET", "lk"]), b("mine"));
    // Someone else cannot resume it now.
    let mut y = Conn::resp3(r.addr);
    assert_eq!(
        y.cmd(&["TPRESUME", &sid]),
        V::Err("ERR no such session to resume".into())
    );
    // It is the connection's: its release ends it, the line is served.
    assert_eq!(y.cmd(&["SETTP", "lk", "next", "QUEUE"]), V::Int(0));
    assert_eq!(x.cmd(&["TPRELEASE", "lk", "mine"]), V::Int(1));
    let t2 = y.expect_acquired(true, "lk", "next");
    assert!(t2 > t as u64);
    drop(x);
    eventually("its other holds end with the connection", || {
        gone(r.addr, "sh")
    });
}

#[test]
fn with_tp_min_acks_a_grant_is_told_once_a_replica_has_it() {
    let p = latchkey(|c| {
        c.tp_min_acks = 1;
        c.tp_min_acks_timeout = 300;
    });
    // No Latchkey replica: the grant waits its timeout, then is undone.
    let mut a = Conn::new(p.addr);
    let t0 = Instant::now();
    assert_eq!(
        a.cmd(&["SETTP", "lk", "v"]),
        V::Err(
            "NOREPLICAS Not enough replicas acknowledged the lock in time (tp-min-acks).".into()
        )
    );
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(280), "{waited:?}");
    assert_eq!(a.cmd(&["EXISTS", "lk"]), V::Int(0));
    assert_eq!(a.cmd(&["TPKEYS"]), V::Arr(vec![]));
    // A Redis replica does not count: it has no lock records.
    let port = p.addr.port().to_string();
    let redis = RealRedis::start_args(&["--replicaof", "127.0.0.1", &port]);
    synced(p.addr, redis.addr);
    assert!(matches!(a.cmd(&["SETTP", "lk", "v"]), V::Err(e) if e.starts_with("NOREPLICAS")));
    // A Latchkey replica: told once it has it, so it is there at once.
    let r = latchkey(|_| {});
    replicaof(r.addr, p.addr);
    synced(p.addr, r.addr);
    for i in 0..20 {
        let k = format!("k{i}");
        let t = Instant::now();
        assert!(matches!(a.cmd(&["SETTP", &k, "v", "TOKEN"]), V::Int(n) if n > 0));
        assert!(
            t.elapsed() < Duration::from_millis(250),
            "{:?}",
            t.elapsed()
        );
        assert!(holds(r.addr, &k, "v"), "{k} not on the replica when told");
    }
    assert_eq!(a.cmd(&["SETTP", "sh", "r1", "SHARED"]), V::Int(1));
    assert_eq!(Conn::new(r.addr).cmd(&["GET", "sh"]), b("shared"));
    // Inside MULTI nothing waits: a grant not yet acknowledged is undone.
    assert_eq!(a.cmd(&["MULTI"]), ok());
    assert_eq!(
        a.cmd(&["SETTP", "in-multi", "v"]),
        V::Simple("QUEUED".into())
    );
    match a.cmd(&["EXEC"]) {
        V::Arr(v) => assert!(
            matches!(&v[0], V::Err(e) if e.starts_with("NOREPLICAS")),
            "{v:?}"
        ),
        other => panic!("EXEC: {other:?}"),
    }
    assert_eq!(a.cmd(&["EXISTS", "in-multi"]), V::Int(0));
    // The replica cut off: grants time out and are undone there too.
    let away_port = free_port().to_string();
    assert_eq!(
        Conn::new(r.addr).cmd(&["REPLICAOF", "127.0.0.1", &away_port]),
        ok()
    );
    eventually("the primary sees no replica", || {
        info_field(&info(p.addr, "replication"), "connected_slaves") == "1"
    });
    assert!(matches!(a.cmd(&["SETTP", "cut", "v"]), V::Err(e) if e.starts_with("NOREPLICAS")));
    assert_eq!(a.cmd(&["EXISTS", "cut"]), V::Int(0));
    // CLIENT UNBLOCK ... ERROR ends the wait: the grant is undone too.
    assert_eq!(
        Conn::new(p.addr).cmd(&["CONFIG", "SET", "tp-min-acks-timeout", "20000"]),
        ok()
    );
    let aid = a.id().to_string();
    a.send(&["SETTP", "unblocked", "v"]);
    let mut admin = Conn::new(p.addr);
    eventually("the grant waits", || {
        admin.cmd(&["EXISTS", "unblocked"]) == V::Int(1)
    });
    assert_eq!(admin.cmd(&["CLIENT", "UNBLOCK", &aid, "ERROR"]), V::Int(1));
    assert_eq!(
        a.reply(),
        V::Err("UNBLOCKED client unblocked via CLIENT UNBLOCK".into())
    );
    assert_eq!(admin.cmd(&["EXISTS", "unblocked"]), V::Int(0));
}

#[test]
fn with_tp_min_acks_a_hand_over_is_pushed_once_acknowledged_and_keeps_its_place() {
    let p = latchkey(|c| {
        c.tp_min_acks = 1;
        c.tp_min_acks_timeout = 300;
    });
    let r = latchkey(|_| {});
    replicaof(r.addr, p.addr);
    synced(p.addr, r.addr);
    let mut holder = Conn::new(p.addr);
    let mut first = Conn::resp3(p.addr);
    let mut second = Conn::resp3(p.addr);
    assert_eq!(holder.cmd(&["SETTP", "lk", "h"]), V::Int(1));
    assert_eq!(first.cmd(&["SETTP", "lk", "w1", "QUEUE"]), V::Int(0));
    // Acknowledged: the push comes, and the replica has the hand-over.
    assert_eq!(holder.cmd(&["TPRELEASE", "lk", "h"]), V::Int(1));
    first.expect_acquired(true, "lk", "w1");
    assert!(
        holds(r.addr, "lk", "w1"),
        "the replica lacks a told hand-over"
    );
    // The replica cut off: the next hand-over is never told, and is
    // undone at each timeout with its waiter back at the head of the line.
    assert_eq!(second.cmd(&["SETTP", "lk", "w2", "QUEUE"]), V::Int(0));
    let mut third = Conn::resp3(p.addr);
    assert_eq!(third.cmd(&["SETTP", "lk", "w3", "QUEUE"]), V::Int(0));
    let away_port = free_port().to_string();
    assert_eq!(
        Conn::new(r.addr).cmd(&["REPLICAOF", "127.0.0.1", &away_port]),
        ok()
    );
    eventually("the primary sees no Latchkey replica online", || {
        info_field(&info(p.addr, "replication"), "connected_slaves") == "0"
    });
    assert_eq!(first.cmd(&["TPRELEASE", "lk", "w1"]), V::Int(1));
    assert!(
        second.frame_within(Duration::from_millis(900)).is_none(),
        "a hand-over no replica acknowledged was told"
    );
    third.expect_quiet(100);
    let sid = second.id();
    let tid = third.id();
    // The untold hand-over is re-made at each timeout: the waiter is its
    // (untold) owner, and the next stays behind it.
    let mut admin = Conn::new(p.addr);
    assert_eq!(admin.cmd(&["TPOWNER", "lk"]), V::Int(sid));
    assert_eq!(
        info_field(&info(p.addr, "locks"), "grants_awaiting_acks"),
        "1"
    );
    assert_eq!(admin.cmd(&["TPQUEUE", "lk"]), V::Arr(vec![V::Int(tid)]));
    // The replica back: the waiter at the head is told.
    replicaof(r.addr, p.addr);
    second.expect_acquired(true, "lk", "w2");
    assert!(holds(r.addr, "lk", "w2"));
    // Told once, however many times it was re-made.
    second.expect_quiet(300);
    third.expect_quiet(100);
}

#[test]
fn a_primary_cut_off_from_its_replicas_tells_its_holders_lost() {
    // No replica acknowledges a lock mark sent 1 s ago: the holds end,
    // whatever the grace.
    let p = latchkey(|c| {
        c.tp_min_acks = 1;
        c.tp_failover_grace = 30_000;
    });
    let r = latchkey(|_| {});
    replicaof(r.addr, p.addr);
    synced(p.addr, r.addr);
    let mut a = Conn::resp3(p.addr);
    let mut s = Conn::resp3(p.addr);
    assert_eq!(a.cmd(&["SETTP", "lk", "v"]), V::Int(1));
    assert_eq!(s.cmd(&["SETTP", "sem", "p", "PERMITS", "3"]), V::Int(1));
    // Its replica goes (a cut, a restart): nothing for 1 s, then LOST.
    let away_port = free_port().to_string();
    assert_eq!(
        Conn::new(r.addr).cmd(&["REPLICAOF", "127.0.0.1", &away_port]),
        ok()
    );
    let cut = Instant::now();
    a.expect_quiet(800);
    let lost = a.next_push_within(Duration::from_secs(3));
    assert_eq!(
        lost,
        Some(("lk".to_string(), "LOST cut-off".to_string())),
        "no LOST after the cut"
    );
    let took = cut.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(2000),
        "{took:?}"
    );
    assert_eq!(
        s.next_push_within(Duration::from_secs(1)),
        Some(("sem".to_string(), "LOST cut-off".to_string()))
    );
    let mut c = Conn::new(p.addr);
    assert_eq!(c.cmd(&["EXISTS", "lk", "sem"]), V::Int(0));
    assert_eq!(c.cmd(&["TPKEYS", &a.id().to_string()]), V::Arr(vec![]));
}

/// The split brain the cut-off is for: the primary, cut off from its only
/// replica, goes on serving its holder, whose session has a short timeout
/// (300 ms) and stays alive by PINGs; the replica is promoted at once and
/// a waiter queues there. The old primary tells its holder LOST before
/// the promoted replica hands the lock to the waiter (a detached session
/// lives at least 2 s after a promotion, whatever its timeout: the cut-off
/// comes at most 1.3 s after the last lock mark the replica applied).
#[test]
fn the_cut_off_holder_is_told_lost_before_the_promoted_replica_hands_its_lock_on() {
    let p = latchkey(|c| c.tp_min_acks = 1);
    let r = latchkey(|_| {});
    replicaof(r.addr, p.addr);
    synced(p.addr, r.addr);
    let mut a = Conn::resp3(p.addr);
    assert_eq!(a.cmd(&["TPSESSION", "300"]), ok());
    assert_eq!(a.cmd(&["SETTP", "lk", "old"]), V::Int(1));
    eventually("the hold reaches the replica", || {
        holds(r.addr, "lk", "old")
    });
    // Lock marks flow, the replica acknowledges them (the holder PINGs
    // within its timeout meanwhile).
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(a.cmd(&["PING"]), V::Simple("PONG".into()));
    }
    assert_eq!(Conn::new(r.addr).cmd(&["REPLICAOF", "NO", "ONE"]), ok());
    let promoted = Instant::now();
    let raddr = r.addr;
    let waiter = std::thread::spawn(move || {
        let mut w = Conn::resp3(raddr);
        assert_eq!(w.cmd(&["SETTP", "lk", "new", "QUEUE"]), V::Int(0));
        w.expect_acquired(true, "lk", "new");
        Instant::now()
    });
    // The holder PINGs every 50 ms until told LOST (bounded: 5 s).
    let mut lost = None;
    while lost.is_none() && promoted.elapsed() < Duration::from_secs(5) {
        assert_eq!(a.cmd(&["PING"]), V::Simple("PONG".into()));
        if let Some(p) = a.next_push_within(Duration::from_millis(50)) {
            lost = Some((p, Instant::now()));
        }
    }
    let (push, lost_at) = lost.expect("the holder is told LOST");
    assert_eq!(push, ("lk".to_string(), "LOST cut-off".to_string()));
    let acquired_at = waiter.join().unwrap();
    assert!(
        lost_at < acquired_at,
        "the waiter got the lock {:?} after the promotion, the old holder was told LOST {:?} after it",
        acquired_at - promoted,
        lost_at - promoted
    );
    assert!(acquired_at - promoted >= Duration::from_millis(1950));
    assert!(lost_at - promoted < Duration::from_millis(1700));
}

#[test]
fn a_planned_failover_keeps_the_holds_for_their_clients_to_resume() {
    let p = latchkey(|_| {});
    let r = latchkey(|_| {});
    replicaof(r.addr, p.addr);
    synced(p.addr, r.addr);
    let mut a = Conn::new(p.addr);
    let t = int(a.cmd(&["SETTP", "lk", "mine", "TOKEN"]));
    let sid = session_id(&mut a);
    let mut waiter = Conn::resp3(p.addr);
    assert_eq!(waiter.cmd(&["SETTP", "lk", "w", "QUEUE"]), V::Int(0));
    eventually("the hold reaches the replica", || {
        holds(r.addr, "lk", "mine")
    });
    let port = r.addr.port().to_string();
    assert_eq!(
        Conn::new(p.addr).cmd(&["FAILOVER", "TO", "127.0.0.1", &port]),
        ok()
    );
    eventually("the replica is the primary", || {
        info_field(&info(r.addr, "replication"), "role") == "master"
            && info_field(&info(p.addr, "replication"), "role") == "slave"
    });
    // The old primary closed its lock-service connections (holder and
    // waiter): their clients go to the new primary, where their sessions
    // wait for them.
    assert!(
        a.closed(),
        "the holder's connection stays open on a replica"
    );
    assert!(waiter.closed(), "a waiter stays in a line on a replica");
    // The new primary kept the hold for its client, token and all; the
    // old primary, now its replica, still shows it.
    let mut x = Conn::new(r.addr);
    let hold = V::Arr(vec![V::Int(0), b("lk"), b("mine"), V::Int(t)]);
    assert_eq!(x.cmd(&["TPRESUME", &sid]), V::Arr(vec![hold]));
    assert_eq!(x.cmd(&["TPCHECK", "lk", &t.to_string()]), ok());
    synced(r.addr, p.addr);
    assert!(holds(p.addr, "lk", "mine"));
    // Released on the new primary: handed to the waiter's session, whose
    // place came over with it (detached until its client resumes it), and
    // so on the old primary too.
    assert_eq!(x.cmd(&["TPRELEASE", "lk", "mine"]), V::Int(1));
    eventually("the hand-over reaches the old primary", || {
        holds(p.addr, "lk", "w")
    });
}

#[test]
fn a_detached_session_lives_its_own_timeout_after_a_promotion() {
    let p = latchkey(|c| c.tp_session_timeout = 0);
    // A long grace: a session with a timeout of its own uses that.
    let r = latchkey(|c| c.tp_failover_grace = 60_000);
    replicaof(r.addr, p.addr);
    synced(p.addr, r.addr);
    // TPSESSION before the first hold, and one changed after it.
    let mut a = Conn::new(p.addr);
    // 500 ms: below the least time a detached session lives (2 s, so
    // that a cut-off old primary has told its holders LOST first).
    assert_eq!(a.cmd(&["TPSESSION", "500"]), ok());
    assert_eq!(a.cmd(&["SETTP", "short", "a"]), V::Int(1));
    let mut bb = Conn::new(p.addr);
    assert_eq!(bb.cmd(&["SETTP", "changed", "b"]), V::Int(1));
    assert_eq!(bb.cmd(&["TPSESSION", "3000"]), ok());
    let mut cc = Conn::new(p.addr);
    assert_eq!(cc.cmd(&["SETTP", "graced", "c"]), V::Int(1));
    eventually("the holds reach the replica", || {
        holds(r.addr, "short", "a") && holds(r.addr, "changed", "b") && holds(r.addr, "graced", "c")
    });
    // Carried in the stream: cut the replica loose and promote it (the
    // holders keep their sessions alive on the primary meanwhile: a PING
    // each, well within their timeouts).
    assert_eq!(a.cmd(&["PING"]), V::Simple("PONG".into()));
    assert_eq!(bb.cmd(&["PING"]), V::Simple("PONG".into()));
    assert_eq!(Conn::new(r.addr).cmd(&["REPLICAOF", "NO", "ONE"]), ok());
    let promoted = Instant::now();
    eventually("the 500 ms session ends", || gone(r.addr, "short"));
    let t_short = promoted.elapsed();
    eventually("the 3 s session ends", || gone(r.addr, "changed"));
    let t_changed = promoted.elapsed();
    assert!(
        t_short >= Duration::from_millis(1950) && t_short < Duration::from_millis(4500),
        "{t_short:?}"
    );
    assert!(
        t_changed >= Duration::from_millis(2950) && t_changed < Duration::from_millis(6000),
        "{t_changed:?}"
    );
    // One without a timeout of its own keeps the grace.
    assert!(holds(r.addr, "graced", "c"));
    // Carried in the full sync's lock state too.
    let r2 = latchkey(|c| c.tp_failover_grace = 60_000);
    let mut d = Conn::new(p.addr);
    assert_eq!(d.cmd(&["TPSESSION", "2500"]), ok());
    assert_eq!(d.cmd(&["SETTP", "synced", "d"]), V::Int(1));
    replicaof(r2.addr, p.addr);
    eventually("the full sync brings the hold", || {
        holds(r2.addr, "synced", "d")
    });
    assert_eq!(Conn::new(r2.addr).cmd(&["REPLICAOF", "NO", "ONE"]), ok());
    let promoted = Instant::now();
    eventually("it ends after its own timeout", || gone(r2.addr, "synced"));
    let took = promoted.elapsed();
    assert!(
        took >= Duration::from_millis(2450) && took < Duration::from_millis(5000),
        "{took:?}"
    );
}

/// `key`'s line on `node`: how many wait in it (TPQUEUE).
fn line_len(node: SocketAddr, key: &str) -> usize {
    match Conn::new(node).cmd(&["TPQUEUE", key]) {
        V::Arr(v) => v.len(),
        other => panic!("TPQUEUE: {other:?}"),
    }
}

/// A place may wait a little for the next write (`LAZY_RECORDS`), but
/// with nothing written after it, it goes by itself: long before the
/// next thing the primary would send (a PING every 10 s).
#[test]
fn a_place_with_nothing_after_it_reaches_the_replica_by_itself() {
    let p = latchkey(|_| {});
    let r = latchkey(|_| {});
    replicaof(r.addr, p.addr);
    synced(p.addr, r.addr);
    let mut a = Conn::new(p.addr);
    assert_eq!(a.cmd(&["SETTP", "lk", "va"]), V::Int(1));
    eventually("the hold reaches the replica", || holds(r.addr, "lk", "va"));
    let mut w = Conn::new(p.addr);
    let taken = Instant::now();
    assert_eq!(w.cmd(&["SETTP", "lk", "vw", "QUEUE"]), V::Int(0));
    eventually("the place reaches the replica", || {
        line_len(r.addr, "lk") == 1
    });
    assert!(
        taken.elapsed() < Duration::from_secs(2),
        "the place waited {:?} for other traffic",
        taken.elapsed()
    );
    // Left, it goes the same way.
    assert_eq!(w.cmd(&["TPDEQUEUE", "lk"]), V::Int(1));
    eventually("the place leaves the replica", || {
        line_len(r.addr, "lk") == 0
    });
}

#[test]
fn places_in_lines_survive_the_promotion_with_their_session() {
    let p = latchkey(|_| {});
    let r = latchkey(|c| c.tp_failover_grace = 60_000);
    // A holder and a waiter before the replica attaches (the full sync's
    // lock state carries the line), more waiters after it (the stream).
    let mut a = Conn::new(p.addr);
    let t_a = int(a.cmd(&["SETTP", "lk", "va", "TOKEN"]));
    let sid_a = session_id(&mut a);
    let mut bw = Conn::new(p.addr);
    assert_eq!(
        bw.cmd(&["SETTP", "lk", "vb", "PX", "60000", "QUEUE"]),
        V::Int(0)
    );
    // A waiter that never held anything has a session to resume too.
    let sid_b = session_id(&mut bw);
    replicaof(r.addr, p.addr);
    synced(p.addr, r.addr);
    let mut cw = Conn::new(p.addr);
    assert_eq!(cw.cmd(&["SETTP", "lk", "vc", "QUEUE"]), V::Int(0));
    assert_eq!(cw.cmd(&["SETTP", "lk", "gone", "QUEUE"]), V::Int(0));
    let sid_c = session_id(&mut cw);
    // A place left (TPDEQUEUE) and one whose session ends go on the
    // replica too.
    assert_eq!(cw.cmd(&["TPDEQUEUE", "lk", "gone"]), V::Int(1));
    let mut dw = Conn::new(p.addr);
    assert_eq!(dw.cmd(&["SETTP", "lk", "vd", "QUEUE"]), V::Int(0));
    eventually("the line reaches the replica", || {
        line_len(r.addr, "lk") == 3
    });
    drop(dw);
    eventually("the waiter's end reaches the replica", || {
        line_len(r.addr, "lk") == 2
    });
    assert!(holds(r.addr, "lk", "va"));
    // The primary is lost; the replica is promoted. Nothing is handed
    // over: the holder's session is detached, its lock kept.
    assert_eq!(Conn::new(r.addr).cmd(&["REPLICAOF", "NO", "ONE"]), ok());
    let mut n = Conn::resp3(r.addr);
    assert_eq!(n.cmd(&["SETTP", "lk", "vn", "QUEUE"]), V::Int(0));
    assert_eq!(line_len(r.addr, "lk"), 3);
    // The first waiter resumes: its place, still waiting (no token).
    let mut b2 = Conn::resp3(r.addr);
    assert_eq!(
        b2.cmd(&["TPRESUME", &sid_b]),
        V::Arr(vec![V::Arr(vec![V::Int(0), b("lk"), b("vb"), V::Nil])])
    );
    let b2_id = b2.id();
    match Conn::new(r.addr).cmd(&["TPQUEUE", "lk"]) {
        V::Arr(ids) => assert_eq!(ids[0], V::Int(b2_id), "{ids:?}"),
        other => panic!("TPQUEUE: {other:?}"),
    }
    // The holder resumes and lets go: the first in line, on its new
    // connection, is handed the lock, above every token given before,
    // with the TTL it queued with (from the hand-over).
    let mut a2 = Conn::new(r.addr);
    assert_eq!(
        a2.cmd(&["TPRESUME", &sid_a]),
        V::Arr(vec![V::Arr(vec![V::Int(0), b("lk"), b("va"), V::Int(t_a)])])
    );
    assert_eq!(a2.cmd(&["TPRELEASE", "lk", "va"]), V::Int(1));
    let t_b = b2.expect_acquired(true, "lk", "vb");
    assert!(t_b > t_a as u64);
    let pttl = int(Conn::new(r.addr).cmd(&["PTTL", "lk"]));
    assert!(pttl > 50_000 && pttl <= 60_000, "{pttl}");
    // It lets go while the next waiter is still detached: the lock is
    // handed to that session, and its resume says so, with its token.
    assert_eq!(b2.cmd(&["TPRELEASE", "lk", "vb"]), V::Int(1));
    eventually("the detached waiter is handed the lock", || {
        holds(r.addr, "lk", "vc")
    });
    let mut c2 = Conn::new(r.addr);
    let t_c = match c2.cmd(&["TPRESUME", &sid_c]) {
        V::Arr(v) => match &v[..] {
            [V::Arr(e)] if e[..3] == [V::Int(0), b("lk"), b("vc")] => int(e[3].clone()),
            _ => panic!("TPRESUME: {v:?}"),
        },
        other => panic!("TPRESUME: {other:?}"),
    };
    assert!(t_c as u64 > t_b);
    assert_eq!(c2.cmd(&["TPCHECK", "lk", &t_c.to_string()]), ok());
    // Its release serves the newcomer who queued on the new primary.
    assert_eq!(c2.cmd(&["TPRELEASE", "lk", "vc"]), V::Int(1));
    let t_n = n.expect_acquired(true, "lk", "vn");
    assert!(t_n as i64 > t_c);
    drop(p);
}
