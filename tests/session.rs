//! The lock service's server side beyond SETTP itself: fencing tokens
//! (SETTP ... TOKEN, the ACQUIRED push, TPINFO, TPCHECK alone, in
//! MULTI/EXEC and in scripts), LOST notices to a holder whose key goes by
//! another hand (DEL, SET and their compare-and-set forms), and sessions (TPSESSION, `tp-session-timeout`) that close
//! a silent connection and so release its locks.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::*;
use latchkey_server::config::Config;

fn int(v: V) -> i64 {
    match v {
        V::Int(n) => n,
        v => panic!("an integer, not {v:?}"),
    }
}

#[test]
fn tokens_grow_with_every_acquisition_and_tpinfo_shows_them() {
    let h = start();
    let mut a = Conn::ready(h.addr);
    let mut w = Conn::ready(h.addr);
    let id_a = int(a.cmd(&["CLIENT", "ID"]));
    let t1 = int(a.cmd(&["SETTP", "lk", "a", "TOKEN"]));
    assert!(t1 > 1_000_000_000_000_000, "a clock-based token: {t1}");
    // Taken: 0, with or without TOKEN.
    assert_eq!(w.cmd(&["SETTP", "lk", "b", "TOKEN"]), V::Int(0));
    assert_eq!(w.cmd(&["SETTP", "lk", "b", "QUEUE"]), V::Int(0));
    let info = a.cmd(&["TPINFO", "lk"]);
    let V::Arr(f) = info else { panic!("{info:?}") };
    assert_eq!(f[0], b("owner"));
    assert_eq!(f[1], V::Int(id_a));
    assert_eq!(f[2], b("token"));
    assert_eq!(f[3], V::Int(t1));
    assert_eq!(f[4], b("since"));
    assert!(matches!(f[5], V::Int(ms) if ms > 1_600_000_000_000));
    assert_eq!(
        &f[6..],
        &[
            b("waiting"),
            V::Int(1),
            b("mode"),
            b("exclusive"),
            b("holders"),
            V::Int(1)
        ]
    );
    assert_eq!(a.cmd(&["TPINFO", "nothing"]), V::Nil);
    assert_eq!(a.cmd(&["SET", "plain", "x"]), ok());
    assert_eq!(a.cmd(&["TPINFO", "plain"]), V::Nil);
    // The hand-off carries the next token.
    assert_eq!(a.cmd(&["DEL", "lk"]), V::Int(1));
    let t2 = w.expect_acquired(false, "lk", "b") as i64;
    assert!(t2 > t1);
    // A plain SETTP's reply stays 1 without TOKEN.
    assert_eq!(w.cmd(&["DEL", "lk"]), V::Int(1));
    assert_eq!(a.cmd(&["SETTP", "lk", "a"]), V::Int(1));
    let t3 = match a.cmd(&["TPINFO", "lk"]) {
        V::Arr(f) => int(f[3].clone()),
        v => panic!("{v:?}"),
    };
    assert!(t3 > t2);
    // RESP3: a map.
    let mut c = Conn::resp3(h.addr);
    assert!(c
        .call(&["TPINFO", "lk"])
        .starts_with(b"%6\r\n$5\r\nowner\r\n:"));
}

#[test]
fn tpcheck_refuses_stale_tokens_alone_in_transactions_and_in_scripts() {
    let h = start();
    let mut holder = Conn::ready(h.addr);
    let mut stale = Conn::ready(h.addr);
    let old = int(holder.cmd(&["SETTP", "lk", "v", "TOKEN"])).to_string();
    assert_eq!(stale.cmd(&["TPCHECK", "lk", &old]), ok());
    // The holder loses the lock (an operator's DEL), someone else takes it.
    assert_eq!(stale.cmd(&["DEL", "lk"]), V::Int(1));
    let mut next = Conn::ready(h.addr);
    let new = int(next.cmd(&["SETTP", "lk", "w", "TOKEN"])).to_string();
    assert!(matches!(
        stale.cmd(&["TPCHECK", "lk", &old]),
        V::Err(e) if e.starts_with("STALE fencing token")
    ));
    assert_eq!(stale.cmd(&["TPCHECK", "lk", &new]), ok());
    assert_eq!(
        stale.cmd(&["TPCHECK", "lk", "x"]),
        V::Err("ERR value is not an integer or out of range".into())
    );
    assert!(matches!(
        stale.cmd(&["TPCHECK", "free", "1"]),
        V::Err(e) if e == "STALE fencing token 1: the key is not held"
    ));
    // In MULTI: a condition of the whole transaction.
    for (token, runs) in [(&old, false), (&new, true)] {
        assert_eq!(stale.cmd(&["MULTI"]), ok());
        assert_eq!(
            stale.cmd(&["SET", "resource", token]),
            V::Simple("QUEUED".into())
        );
        assert_eq!(
            stale.cmd(&["TPCHECK", "lk", token]),
            V::Simple("QUEUED".into())
        );
        let r = stale.cmd(&["EXEC"]);
        if runs {
            assert_eq!(r, V::Arr(vec![ok(), ok()]));
        } else {
            assert!(matches!(&r, V::Err(e) if e.starts_with("STALE")), "{r:?}");
        }
    }
    assert_eq!(stale.cmd(&["GET", "resource"]), b(&new));
    // In a script: the error stops it before its write.
    let script =
        "redis.call('TPCHECK', KEYS[1], ARGV[1]) return redis.call('SET', KEYS[2], ARGV[1])";
    assert!(matches!(
        stale.cmd(&["EVAL", script, "2", "lk", "resource", &old]),
        V::Err(e) if e.contains("STALE")
    ));
    assert_eq!(stale.cmd(&["GET", "resource"]), b(&new));
    assert_eq!(
        stale.cmd(&["EVAL", script, "2", "lk", "resource", &new]),
        ok()
    );
}

#[test]
fn a_holder_is_told_when_its_lock_goes_by_another_hand() {
    let h = start_debug();
    for resp3 in [false, true] {
        let mut holder = Conn::proto(h.addr, resp3);
        let mut other = Conn::ready(h.addr);
        // Its own release: no notice.
        assert_eq!(holder.cmd(&["SETTP", "lk", "v"]), V::Int(1));
        assert_eq!(holder.cmd(&["DEL", "lk"]), V::Int(1));
        assert_eq!(holder.cmd(&["SETTP", "lk", "v"]), V::Int(1));
        assert_eq!(holder.cmd(&["SET", "lk", "mine now"]), ok());
        assert_eq!(holder.cmd(&["DEL", "lk"]), V::Int(1));
        holder.expect_quiet(50);
        // Another's DEL, SET over it, a flush, the lease's end.
        for (take, reason) in [
            (vec!["DEL", "lk"], "del"),
            (vec!["SET", "lk", "x"], "set"),
            (vec!["FLUSHDB"], "flush"),
        ] {
            assert_eq!(holder.cmd(&["SETTP", "lk", "v"]), V::Int(1));
            other.cmd(&take);
            holder.expect_bytes(&lost_bytes(resp3, "lk", reason));
            other.cmd(&["DEL", "lk"]);
        }
        assert_eq!(holder.cmd(&["SETTP", "lk", "v", "PX", "30"]), V::Int(1));
        holder.expect_bytes(&lost_bytes(resp3, "lk", "expired"));
        assert_eq!(other.cmd(&["EXISTS", "lk"]), V::Int(0));
    }
}

/// Redis 8.4's compare-and-set forms on a key bound by SETTP behave as
/// SET and DEL do: DELEX from the holder's own connection releases it
/// (the next in line is served, no LOST), from another connection it is a
/// loss the holder is told of; a SET IFEQ/IFNE/IFDEQ that writes ends the
/// binding (LOST to the holder unless it wrote itself); a condition that
/// fails changes nothing and the hold stays.
#[test]
fn compare_and_set_forms_release_and_lose_like_set_and_del() {
    let h = start();
    for resp3 in [false, true] {
        let mut holder = Conn::proto(h.addr, resp3);
        let mut waiter = Conn::proto(h.addr, resp3);
        let mut other = Conn::ready(h.addr);
        let held = |c: &mut Conn| c.cmd(&["TPINFO", "lk"]) != V::Nil;
        // The holder's DELEX whose condition fails keeps the hold.
        assert_eq!(holder.cmd(&["SETTP", "lk", "v"]), V::Int(1));
        assert_eq!(waiter.cmd(&["SETTP", "lk", "w", "QUEUE"]), V::Int(0));
        assert_eq!(holder.cmd(&["DELEX", "lk", "IFEQ", "nope"]), V::Int(0));
        assert_eq!(holder.cmd(&["DELEX", "lk", "IFNE", "v"]), V::Int(0));
        assert!(held(&mut other));
        // Its own DELEX IFEQ releases: the waiter is served, no LOST.
        assert_eq!(holder.cmd(&["DELEX", "lk", "IFEQ", "v"]), V::Int(1));
        waiter.expect_acquired(resp3, "lk", "w");
        holder.expect_quiet(50);
        // The new holder's own DELEX IFDEQ (its value's digest) too.
        let V::Bulk(d) = other.cmd(&["DIGEST", "lk"]) else {
            panic!("a digest")
        };
        let d = String::from_utf8_lossy(&d).to_uppercase();
        assert_eq!(waiter.cmd(&["DELEX", "lk", "IFDEQ", &d]), V::Int(1));
        waiter.expect_quiet(50);
        assert!(!held(&mut other));
        // Another's DELEX (with or without a condition) is a loss.
        for take in [
            vec!["DELEX", "lk", "IFEQ", "v"],
            vec!["DELEX", "lk", "IFNE", "x"],
            vec!["DELEX", "lk"],
        ] {
            assert_eq!(holder.cmd(&["SETTP", "lk", "v"]), V::Int(1));
            assert_eq!(other.cmd(&take), V::Int(1), "{take:?}");
            holder.expect_bytes(&lost_bytes(resp3, "lk", "del"));
            assert!(!held(&mut other));
        }
        // Another's SET IF* that writes replaces the value: a loss.
        for take in [
            vec!["SET", "lk", "x", "IFEQ", "v"],
            vec!["SET", "lk", "x", "IFNE", "other"],
            vec!["SET", "lk", "x", "IFDNE", "0000000000000000"],
        ] {
            assert_eq!(holder.cmd(&["SETTP", "lk", "v"]), V::Int(1));
            assert_eq!(other.cmd(&take), ok(), "{take:?}");
            holder.expect_bytes(&lost_bytes(resp3, "lk", "set"));
            assert!(!held(&mut other));
            assert_eq!(other.cmd(&["GET", "lk"]), b("x"));
            assert_eq!(other.cmd(&["DEL", "lk"]), V::Int(1));
        }
        // A SET IF* whose condition fails writes nothing: the hold stays.
        assert_eq!(holder.cmd(&["SETTP", "lk", "v"]), V::Int(1));
        assert_eq!(other.cmd(&["SET", "lk", "x", "IFEQ", "w"]), V::Nil);
        assert_eq!(other.cmd(&["SET", "lk", "x", "IFNE", "v"]), V::Nil);
        holder.expect_quiet(50);
        assert!(held(&mut other));
        // The holder's own SET IFEQ ends the binding as its SET does,
        // without a notice; the waiter is served when the key goes.
        assert_eq!(waiter.cmd(&["SETTP", "lk", "w", "QUEUE"]), V::Int(0));
        assert_eq!(holder.cmd(&["SET", "lk", "mine", "IFEQ", "v"]), ok());
        holder.expect_quiet(50);
        assert!(!held(&mut other));
        assert_eq!(holder.cmd(&["DELEX", "lk", "IFEQ", "mine"]), V::Int(1));
        waiter.expect_acquired(resp3, "lk", "w");
        assert_eq!(waiter.cmd(&["DEL", "lk"]), V::Int(1));
    }
}

#[test]
fn a_silent_session_is_closed_and_its_lock_handed_over() {
    let h = start();
    let mut holder = Conn::ready(h.addr);
    let mut waiter = Conn::ready(h.addr);
    assert_eq!(holder.cmd(&["TPSESSION"]), V::Int(0));
    assert_eq!(holder.cmd(&["TPSESSION", "200"]), ok());
    assert_eq!(holder.cmd(&["TPSESSION"]), V::Int(200));
    assert_eq!(
        holder.cmd(&["TPSESSION", "-1"]),
        V::Err("ERR timeout is not an integer or out of range".into())
    );
    assert_eq!(holder.cmd(&["SETTP", "lk", "h"]), V::Int(1));
    // Traffic keeps it alive past its timeout.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(500) {
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(holder.cmd(&["PING"]), V::Simple("PONG".into()));
    }
    assert_eq!(waiter.cmd(&["SETTP", "lk", "w", "QUEUE"]), V::Int(0));
    // Then silence: the server closes it, the waiter has the lock.
    let silent = Instant::now();
    waiter.expect_acquired(false, "lk", "w");
    let took = silent.elapsed();
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_millis(2000),
        "{took:?}"
    );
    assert!(holder.closed());
}

#[test]
fn the_server_default_applies_only_to_connections_holding_locks() {
    let h = start_with(Config {
        port: 0,
        tp_session_timeout: 150,
        ..Default::default()
    });
    let mut idle = Conn::ready(h.addr);
    let mut holder = Conn::ready(h.addr);
    let mut waiter = Conn::ready(h.addr);
    let mut released = Conn::ready(h.addr);
    assert_eq!(holder.cmd(&["SETTP", "lk", "h"]), V::Int(1));
    assert_eq!(waiter.cmd(&["SETTP", "lk", "w", "QUEUE"]), V::Int(0));
    assert_eq!(released.cmd(&["SETTP", "other", "r"]), V::Int(1));
    assert_eq!(released.cmd(&["DEL", "other"]), V::Int(1));
    // The holder goes silent: closed, and the waiter, which keeps talking
    // while in line, is handed the lock.
    let waiter_id = int(waiter.cmd(&["CLIENT", "ID"]));
    let mut handed = false;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(40));
        match waiter.cmd(&["TPOWNER", "lk"]) {
            // The push came first (RESP2: an array between replies).
            V::Arr(p) => {
                assert_eq!(p[2], b("ACQUIRED"));
                assert_eq!(waiter.reply(), V::Int(waiter_id));
                handed = true;
                break;
            }
            V::Int(_) => {}
            v => panic!("{v:?}"),
        }
    }
    assert!(handed, "the lock was not handed over");
    assert!(holder.closed());
    // Now holding it, silent: closed as well, and the lock released.
    assert!(waiter.closed());
    assert_eq!(idle.cmd(&["EXISTS", "lk"]), V::Int(0));
    // Holding nothing, nobody else is closed.
    for c in [&mut idle, &mut released] {
        c.write_all(b"PING\r\n").unwrap();
        assert_eq!(c.bytes(7), b"+PONG\r\n");
    }
}

/// A holder behind a network that goes silent (a proxy that stops
/// forwarding, nothing closed): the server closes its session after the
/// timeout and a fair waiter has the lock at once; the holder's client
/// notices its unanswered PING and counts the lock lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_network_loses_the_lock_after_the_session_timeout() {
    use latchkey::{Client, Options};
    let h = start();
    let proxy = Proxy::start(h.addr);
    let session = Duration::from_millis(300);
    let holder = Client::connect_with(
        &format!("redis://{}", proxy.addr),
        Options {
            session_timeout: Some(session),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let waiter = Client::connect(&format!("redis://{}", h.addr))
        .await
        .unwrap();
    let guard = holder.lock("job").await.unwrap();
    let t1 = guard.token();
    let waiting = tokio::spawn(async move {
        let g = waiter.lock("job").fair().await.unwrap();
        (Instant::now(), g.token(), g)
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(guard.is_held(), "heartbeats keep the session alive");
    let silent = Instant::now();
    proxy.blackhole();
    let (got_at, t2, _g) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter gets the lock")
        .unwrap();
    let after = got_at - silent;
    assert!(after <= session + Duration::from_millis(500), "{after:?}");
    assert!(t2 > t1);
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the holder counts its lock lost");
    assert!(!guard.is_held());
}

/// Read-write lock: readers share, a queued writer waits for them all and
/// stops later readers (no writer starvation); when it releases, every
/// reader queued behind it is granted at once. A reader's disconnect
/// releases its share; the key exists (WATCHEX) while anyone holds it.
#[test]
fn readers_share_writers_wait_in_order() {
    let h = start();
    let mut r1 = Conn::ready(h.addr);
    let mut r2 = Conn::ready(h.addr);
    let mut w = Conn::ready(h.addr);
    let mut r3 = Conn::ready(h.addr);
    let mut r4 = Conn::ready(h.addr);
    let mut watcher = Conn::ready(h.addr);
    assert_eq!(watcher.cmd(&["WATCHEX", "rw"]), V::Simple("NOEXIST".into()));
    assert_eq!(r1.cmd(&["SETTP", "rw", "r1", "SHARED"]), V::Int(1));
    assert_eq!(watcher.next_push(), ("rw".into(), "ADD".into()));
    assert_eq!(r2.cmd(&["SETTP", "rw", "r2", "SHARED"]), V::Int(1));
    // A writer (a plain SETTP) cannot take it, and queues.
    assert_eq!(w.cmd(&["SETTP", "rw", "w", "QUEUE"]), V::Int(0));
    // Readers after it queue too.
    assert_eq!(r3.cmd(&["SETTP", "rw", "r3", "SHARED", "QUEUE"]), V::Int(0));
    assert_eq!(r4.cmd(&["SETTP", "rw", "r4", "SHARED", "QUEUE"]), V::Int(0));
    assert_eq!(r1.cmd(&["TPRELEASE", "rw", "r1"]), V::Int(1));
    w.expect_quiet(50);
    // The last reader leaves by disconnecting: the writer has it.
    drop(r2);
    w.expect_acquired(false, "rw", "w");
    assert_eq!(watcher.next_push(), ("rw".into(), "DEL".into()));
    assert_eq!(watcher.next_push(), ("rw".into(), "ADD".into()));
    r3.expect_quiet(50);
    // The writer releases: both queued readers at once.
    assert_eq!(w.cmd(&["TPRELEASE", "rw", "w"]), V::Int(1));
    r3.expect_acquired(false, "rw", "r3");
    r4.expect_acquired(false, "rw", "r4");
    let info = w.cmd(&["TPINFO", "rw"]);
    let V::Arr(f) = info else { panic!("{info:?}") };
    assert_eq!(&f[8..], &[b("mode"), b("shared"), b("holders"), V::Int(2)]);
    // An operator's DEL ends both holds: each is told.
    assert_eq!(w.cmd(&["DEL", "rw"]), V::Int(1));
    assert_eq!(r3.next_push(), ("rw".into(), "LOST del".into()));
    assert_eq!(r4.next_push(), ("rw".into(), "LOST del".into()));
    assert_eq!(r3.cmd(&["TPRELEASE", "rw", "r3"]), V::Int(0));
}

/// A semaphore of 2 permits: two holders, the third waits in line and is
/// granted when a permit is released or its holder disconnects.
#[test]
fn semaphore_permits_are_handed_over_in_order() {
    let h = start();
    let mut a = Conn::ready(h.addr);
    let mut bb = Conn::ready(h.addr);
    let mut c = Conn::ready(h.addr);
    let mut d = Conn::ready(h.addr);
    assert_eq!(a.cmd(&["SETTP", "sem", "a", "PERMITS", "2"]), V::Int(1));
    assert_eq!(bb.cmd(&["SETTP", "sem", "b", "PERMITS", "2"]), V::Int(1));
    assert_eq!(
        c.cmd(&["SETTP", "sem", "c", "PERMITS", "2", "QUEUE"]),
        V::Int(0)
    );
    assert_eq!(
        d.cmd(&["SETTP", "sem", "d", "PERMITS", "2", "QUEUE"]),
        V::Int(0)
    );
    let info = a.cmd(&["TPINFO", "sem"]);
    let V::Arr(f) = info else { panic!("{info:?}") };
    assert_eq!(
        &f[6..],
        &[
            b("waiting"),
            V::Int(2),
            b("mode"),
            b("semaphore"),
            b("holders"),
            V::Int(2),
            b("permits"),
            V::Int(2)
        ]
    );
    assert_eq!(a.cmd(&["TPRELEASE", "sem", "a"]), V::Int(1));
    c.expect_acquired(false, "sem", "c");
    d.expect_quiet(50);
    drop(bb);
    d.expect_acquired(false, "sem", "d");
    assert_eq!(a.cmd(&["GET", "sem"]), b("permits:2"));
    drop(c);
    drop(d);
    eventually("the last holder's disconnect deletes the key", || {
        a.cmd(&["EXISTS", "sem"]) == V::Int(0)
    });
    // Shared keys are never saved.
    assert_eq!(a.cmd(&["SETTP", "sem", "a", "PERMITS", "2"]), V::Int(1));
    assert_eq!(a.cmd(&["DBSIZE"]), V::Int(1));
}
