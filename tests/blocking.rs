//! Blocking list commands end to end (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH,
//! BLMPOP) through the one blocking registry, with several connections:
//! serve order, timeouts, pipelines behind and around a blocked client,
//! disconnects, CLIENT UNBLOCK, BLMOVE chains, WATCHEX and SETTP QUEUE
//! sharing the registry, the idle timeout, RESP3, and connections a
//! CLIENT PAUSE postponed counting as blocked. Every read is bounded.

use std::time::{Duration, Instant};

use latchkey_server::config::Config;

mod common;
use common::*;

/// INFO's blocked_clients.
fn blocked(admin: &mut Conn) -> usize {
    let V::Bulk(info) = admin.cmd(&["INFO", "clients"]) else {
        panic!("INFO reply");
    };
    info_field(&String::from_utf8(info).unwrap(), "blocked_clients")
        .parse()
        .unwrap()
}

/// Waits until exactly `n` clients are blocked.
fn wait_blocked(admin: &mut Conn, n: usize) {
    eventually(&format!("{n} blocked clients"), || blocked(admin) == n);
}

/// Sends a blocking command and waits until the server has blocked it
/// (`before` clients were blocked already).
fn block(c: &mut Conn, admin: &mut Conn, before: usize, args: &[&str]) {
    c.send(args);
    wait_blocked(admin, before + 1);
}

/// The exact bytes of a `[key, value]` pop reply.
fn popped(key: &str, value: &str) -> Vec<u8> {
    [
        b"*2\r\n".to_vec(),
        bulk(key.as_bytes()),
        bulk(value.as_bytes()),
    ]
    .concat()
}

fn bulks(items: &[&str]) -> V {
    V::Arr(items.iter().map(|s| b(s)).collect())
}

// ------------------------------------------------------------ serve order

#[test]
fn clients_are_served_in_blocking_order() {
    let h = start();
    let mut admin = Conn::new(h.addr);
    let mut cs: Vec<Conn> = (0..3).map(|_| Conn::new(h.addr)).collect();
    for (i, c) in cs.iter_mut().enumerate() {
        block(c, &mut admin, i, &["BLPOP", "q", "0"]);
    }
    // One push of three: one element each, first blocked gets the first.
    assert_eq!(admin.cmd(&["RPUSH", "q", "a", "b", "c"]), V::Int(3));
    for (c, v) in cs.iter_mut().zip(["a", "b", "c"]) {
        c.expect_bytes(&popped("q", v));
    }
    assert_eq!(admin.cmd(&["EXISTS", "q"]), V::Int(0));
    wait_blocked(&mut admin, 0);

    // Block again, in the order 0, 1, 2; a push of one serves only 0.
    for (i, c) in cs.iter_mut().enumerate() {
        block(c, &mut admin, i, &["BLPOP", "q", "0"]);
    }
    assert_eq!(admin.cmd(&["RPUSH", "q", "x"]), V::Int(1));
    cs[0].expect_bytes(&popped("q", "x"));
    cs[1].expect_quiet(100);
    cs[2].expect_quiet(0);
    assert_eq!(blocked(&mut admin), 2);
    assert_eq!(admin.cmd(&["EXISTS", "q"]), V::Int(0));
    // The next two go to 1 then 2 (0 is no longer waiting).
    assert_eq!(admin.cmd(&["RPUSH", "q", "y", "z"]), V::Int(2));
    cs[1].expect_bytes(&popped("q", "y"));
    cs[2].expect_bytes(&popped("q", "z"));
    cs[0].expect_quiet(50);
    wait_blocked(&mut admin, 0);

    // BRPOP takes from the tail, BLMPOP up to COUNT from the first
    // non-empty key.
    block(&mut cs[0], &mut admin, 0, &["BRPOP", "q", "0"]);
    block(&mut cs[1], &mut admin, 1, &["BRPOP", "q", "0"]);
    block(
        &mut cs[2],
        &mut admin,
        2,
        &["BLMPOP", "0", "2", "m1", "m2", "LEFT", "COUNT", "2"],
    );
    assert_eq!(admin.cmd(&["RPUSH", "q", "1", "2", "3"]), V::Int(3));
    cs[0].expect_bytes(&popped("q", "3"));
    cs[1].expect_bytes(&popped("q", "2"));
    assert_eq!(admin.cmd(&["LRANGE", "q", "0", "-1"]), bulks(&["1"]));
    assert_eq!(admin.cmd(&["RPUSH", "m2", "x", "y", "z"]), V::Int(3));
    assert_eq!(cs[2].reply(), V::Arr(vec![b("m2"), bulks(&["x", "y"])]));
    assert_eq!(admin.cmd(&["LRANGE", "m2", "0", "-1"]), bulks(&["z"]));
    assert_eq!(blocked(&mut admin), 0);
    for c in &mut cs {
        c.expect_quiet(20);
    }
}

/// A waiter blocked on several keys is served once, by the first of its
/// keys that gets data, also when it is not first in that key's line.
/// Redis 7.0.15: c1 gets [q, 2] only and q keeps [1].
#[test]
fn waiter_on_several_keys_is_served_once() {
    let h = start();
    let mut admin = Conn::new(h.addr);
    let mut c0 = Conn::new(h.addr);
    let mut c1 = Conn::new(h.addr);
    block(&mut c0, &mut admin, 0, &["BRPOP", "q", "0"]);
    block(&mut c1, &mut admin, 1, &["BRPOP", "other", "q", "0"]);
    assert_eq!(admin.cmd(&["RPUSH", "q", "1", "2", "3"]), V::Int(3));
    c0.expect_bytes(&popped("q", "3"));
    c1.expect_bytes(&popped("q", "2"));
    c1.expect_quiet(100);
    assert_eq!(admin.cmd(&["LRANGE", "q", "0", "-1"]), bulks(&["1"]));
    assert_eq!(blocked(&mut admin), 0);
}

// ------------------------------------------------------------ timeouts

#[test]
fn timeouts_reply_null_after_the_wait() {
    let h = start();
    for resp3 in [false, true] {
        let mut c = Conn::proto(h.addr, resp3);
        let null_arr: &[u8] = if resp3 { b"_\r\n" } else { b"*-1\r\n" };
        let null_bulk: &[u8] = if resp3 { b"_\r\n" } else { b"$-1\r\n" };
        let cases: [(&[&str], &[u8], u64); 5] = [
            (&["BLPOP", "none", "0.2"], null_arr, 200),
            (&["BRPOP", "none", "other", "0.2"], null_arr, 200),
            (&["BLMPOP", "0.2", "1", "none", "LEFT"], null_arr, 200),
            (
                &["BLMOVE", "none", "dst", "LEFT", "RIGHT", "0.2"],
                null_bulk,
                200,
            ),
            (&["BRPOPLPUSH", "none", "dst", "0.2"], null_bulk, 200),
        ];
        for (args, want, ms) in cases {
            let t = Instant::now();
            c.send(args);
            c.expect_bytes(want);
            let took = t.elapsed();
            assert!(
                took >= Duration::from_millis(ms - 10) && took < Duration::from_secs(2),
                "{args:?} (resp3 {resp3}) replied after {took:?}"
            );
            // The connection goes on normally.
            assert_eq!(c.cmd(&["PING"]), V::Simple("PONG".into()));
        }
        assert_eq!(c.cmd(&["EXISTS", "dst"]), V::Int(0));
    }
    let mut admin = Conn::new(h.addr);
    assert_eq!(blocked(&mut admin), 0);

    // 0 waits until served, however long that is.
    let mut c = Conn::new(h.addr);
    block(&mut c, &mut admin, 0, &["BLPOP", "k", "0"]);
    c.expect_quiet(500);
    assert_eq!(blocked(&mut admin), 1);
    assert_eq!(admin.cmd(&["RPUSH", "k", "v"]), V::Int(1));
    c.expect_bytes(&popped("k", "v"));
    // A timeout long enough not to pass is served the same way.
    block(
        &mut c,
        &mut admin,
        0,
        &["BLMOVE", "k", "d", "RIGHT", "LEFT", "30"],
    );
    assert_eq!(admin.cmd(&["LPUSH", "k", "w"]), V::Int(1));
    c.expect_bytes(&bulk(b"w"));
    assert_eq!(admin.cmd(&["LRANGE", "d", "0", "-1"]), bulks(&["w"]));
    // Bad timeouts are errors, not waits.
    assert_eq!(
        c.cmd(&["BLPOP", "k", "-1"]),
        V::Err("ERR timeout is negative".into())
    );
    assert_eq!(
        c.cmd(&["BLPOP", "k", "x"]),
        V::Err("ERR timeout is not a float or out of range".into())
    );
    assert_eq!(blocked(&mut admin), 0);
}

// ------------------------------------------------------------ pipelines

#[test]
fn pipeline_behind_a_blocked_command_waits_for_it() {
    let h = start();
    let mut admin = Conn::new(h.addr);
    let mut c = Conn::new(h.addr);
    c.pipeline(&[&["BLPOP", "k", "0"], &["PING"], &["LLEN", "k"]]);
    wait_blocked(&mut admin, 1);
    c.expect_quiet(200);
    assert_eq!(admin.cmd(&["RPUSH", "k", "v", "w"]), V::Int(2));
    c.expect_bytes(&[popped("k", "v"), b"+PONG\r\n:1\r\n".to_vec()].concat());
    c.expect_quiet(50);

    // Two blocking commands in one pipeline: the second blocks in turn.
    c.pipeline(&[&["BLPOP", "e", "0"], &["BLPOP", "e", "0"], &["PING"]]);
    wait_blocked(&mut admin, 1);
    assert_eq!(admin.cmd(&["RPUSH", "e", "1"]), V::Int(1));
    c.expect_bytes(&popped("e", "1"));
    // The second BLPOP found e empty again and blocked.
    wait_blocked(&mut admin, 1);
    c.expect_quiet(100);
    assert_eq!(admin.cmd(&["RPUSH", "e", "2"]), V::Int(1));
    c.expect_bytes(&[popped("e", "2"), b"+PONG\r\n".to_vec()].concat());

    // A timeout lets the rest of the pipeline run too.
    c.pipeline(&[&["BLPOP", "none", "0.1"], &["PING"]]);
    c.expect_bytes(b"*-1\r\n+PONG\r\n");
    assert_eq!(blocked(&mut admin), 0);
}

#[test]
fn push_inside_a_pipeline_serves_before_the_next_command() {
    let h = start();
    let mut admin = Conn::new(h.addr);
    let mut c = Conn::new(h.addr);
    block(&mut c, &mut admin, 0, &["BLPOP", "k", "0"]);
    let mut d = Conn::new(h.addr);
    block(
        &mut d,
        &mut admin,
        1,
        &["BLMOVE", "m", "out", "LEFT", "LEFT", "0"],
    );
    let mut p = Conn::new(h.addr);
    p.pipeline(&[
        &["RPUSH", "k", "x"],
        &["LLEN", "k"],
        &["EXISTS", "k"],
        &["RPUSH", "k", "y"],
        &["LRANGE", "k", "0", "-1"],
        &["RPUSH", "m", "a", "b"],
        &["LRANGE", "m", "0", "-1"],
        &["LRANGE", "out", "0", "-1"],
    ]);
    assert_eq!(p.reply(), V::Int(1));
    // c was served right after the RPUSH: the list is already gone.
    assert_eq!(p.reply(), V::Int(0));
    assert_eq!(p.reply(), V::Int(0));
    // Nobody waits any more: this one stays.
    assert_eq!(p.reply(), V::Int(1));
    assert_eq!(p.reply(), bulks(&["y"]));
    assert_eq!(p.reply(), V::Int(2));
    assert_eq!(p.reply(), bulks(&["b"]));
    assert_eq!(p.reply(), bulks(&["a"]));
    c.expect_bytes(&popped("k", "x"));
    d.expect_bytes(&bulk(b"a"));
    assert_eq!(blocked(&mut admin), 0);
}

// ------------------------------------------------------------ disconnect

#[test]
fn disconnect_while_blocked_leaves_no_trace() {
    let h = start();
    let mut admin = Conn::new(h.addr);
    let mut gone = Conn::new(h.addr);
    let gone_id = gone.id();
    block(&mut gone, &mut admin, 0, &["BLPOP", "k", "0"]);
    let mut next = Conn::new(h.addr);
    block(&mut next, &mut admin, 1, &["BLPOP", "k", "0"]);
    let mut chain = Conn::new(h.addr);
    block(
        &mut chain,
        &mut admin,
        2,
        &["BLMOVE", "c", "d", "LEFT", "LEFT", "0"],
    );
    drop(chain);
    drop(gone);
    wait_blocked(&mut admin, 1);
    // The client behind the dead one is first now.
    assert_eq!(admin.cmd(&["RPUSH", "k", "x", "y"]), V::Int(2));
    next.expect_bytes(&popped("k", "x"));
    assert_eq!(admin.cmd(&["LRANGE", "k", "0", "-1"]), bulks(&["y"]));
    // Nobody pops from c.
    assert_eq!(admin.cmd(&["RPUSH", "c", "kept"]), V::Int(1));
    assert_eq!(admin.cmd(&["PING"]), V::Simple("PONG".into()));
    assert_eq!(admin.cmd(&["LRANGE", "c", "0", "-1"]), bulks(&["kept"]));
    assert_eq!(admin.cmd(&["EXISTS", "d"]), V::Int(0));
    assert_eq!(blocked(&mut admin), 0);
    assert_eq!(
        admin.cmd(&["CLIENT", "UNBLOCK", &gone_id.to_string()]),
        V::Int(0)
    );
    let V::Bulk(list) = admin.cmd(&["CLIENT", "LIST"]) else {
        panic!("CLIENT LIST");
    };
    let list = String::from_utf8(list).unwrap();
    assert!(!list.contains(&format!("id={gone_id} ")), "{list}");
    assert_eq!(list.lines().count(), 2, "{list}");
}

// ------------------------------------------------------------ CLIENT UNBLOCK

#[test]
fn client_unblock_timeout_and_error() {
    let h = start();
    let mut admin = Conn::new(h.addr);
    let mut c = Conn::new(h.addr);
    let id = c.id().to_string();
    // Not blocked: 0, whatever the reason.
    assert_eq!(admin.cmd(&["CLIENT", "UNBLOCK", &id]), V::Int(0));
    assert_eq!(admin.cmd(&["CLIENT", "UNBLOCK", &id, "ERROR"]), V::Int(0));
    assert_eq!(admin.cmd(&["CLIENT", "UNBLOCK", "999999"]), V::Int(0));

    // Default reason: the timeout reply, then the pipeline goes on.
    c.pipeline(&[&["BLPOP", "k", "0"], &["PING"]]);
    wait_blocked(&mut admin, 1);
    assert_eq!(admin.cmd(&["CLIENT", "UNBLOCK", &id]), V::Int(1));
    c.expect_bytes(b"*-1\r\n+PONG\r\n");
    assert_eq!(blocked(&mut admin), 0);
    assert_eq!(admin.cmd(&["CLIENT", "UNBLOCK", &id]), V::Int(0));

    // TIMEOUT: BLMOVE's timeout reply is a null bulk.
    block(
        &mut c,
        &mut admin,
        0,
        &["BLMOVE", "k", "d", "LEFT", "LEFT", "0"],
    );
    assert_eq!(admin.cmd(&["CLIENT", "UNBLOCK", &id, "timeout"]), V::Int(1));
    c.expect_bytes(b"$-1\r\n");

    // ERROR.
    block(&mut c, &mut admin, 0, &["BRPOP", "k", "0"]);
    // A bad reason is refused and leaves the client blocked.
    assert_eq!(
        admin.cmd(&["CLIENT", "UNBLOCK", &id, "FOO"]),
        V::Err("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR".into())
    );
    assert_eq!(blocked(&mut admin), 1);
    c.expect_quiet(50);
    assert_eq!(admin.cmd(&["CLIENT", "UNBLOCK", &id, "ERROR"]), V::Int(1));
    c.expect_bytes(b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n");
    assert_eq!(blocked(&mut admin), 0);

    // An unblocked client does not take later pushes.
    assert_eq!(admin.cmd(&["RPUSH", "k", "x"]), V::Int(1));
    c.expect_quiet(50);
    assert_eq!(admin.cmd(&["LRANGE", "k", "0", "-1"]), bulks(&["x"]));
    assert_eq!(c.cmd(&["PING"]), V::Simple("PONG".into()));

    // Lock waits are not blocked commands: CLIENT UNBLOCK leaves them.
    assert_eq!(admin.cmd(&["SETTP", "lk", "h"]), V::Int(1));
    assert_eq!(c.cmd(&["SETTP", "lk", "w", "QUEUE"]), V::Int(0));
    assert_eq!(admin.cmd(&["CLIENT", "UNBLOCK", &id]), V::Int(0));
    assert_eq!(
        admin.cmd(&["TPQUEUE", "lk"]),
        V::Arr(vec![V::Int(id.parse().unwrap())])
    );
}

// ------------------------------------------------------------ chains

#[test]
fn blmove_chain_serves_the_next_waiter() {
    let h = start();
    let mut admin = Conn::new(h.addr);
    let mut a = Conn::new(h.addr);
    let mut b2 = Conn::new(h.addr);
    block(
        &mut a,
        &mut admin,
        0,
        &["BLMOVE", "a", "b", "LEFT", "RIGHT", "0"],
    );
    block(&mut b2, &mut admin, 1, &["BLPOP", "b", "0"]);
    assert_eq!(admin.cmd(&["RPUSH", "a", "x"]), V::Int(1));
    a.expect_bytes(&bulk(b"x"));
    b2.expect_bytes(&popped("b", "x"));
    assert_eq!(admin.cmd(&["EXISTS", "a", "b"]), V::Int(0));
    assert_eq!(blocked(&mut admin), 0);

    // Three links, the last one BRPOPLPUSH: x ends in d.
    let mut c = Conn::new(h.addr);
    block(
        &mut a,
        &mut admin,
        0,
        &["BLMOVE", "a", "b", "LEFT", "RIGHT", "0"],
    );
    block(&mut b2, &mut admin, 1, &["BRPOPLPUSH", "b", "c", "0"]);
    block(
        &mut c,
        &mut admin,
        2,
        &["BLMOVE", "c", "d", "RIGHT", "LEFT", "0"],
    );
    assert_eq!(admin.cmd(&["LPUSH", "a", "x"]), V::Int(1));
    a.expect_bytes(&bulk(b"x"));
    b2.expect_bytes(&bulk(b"x"));
    c.expect_bytes(&bulk(b"x"));
    assert_eq!(admin.cmd(&["EXISTS", "a", "b", "c"]), V::Int(0));
    assert_eq!(admin.cmd(&["LRANGE", "d", "0", "-1"]), bulks(&["x"]));
    assert_eq!(blocked(&mut admin), 0);
}

// ------------------------------------------------------------ WATCHEX, SETTP

#[test]
fn watcher_sees_add_then_del_around_a_served_pop() {
    let h = start();
    let mut admin = Conn::new(h.addr);
    let mut w = Conn::resp3(h.addr);
    assert_eq!(w.cmd(&["WATCHEX", "k"]), V::Simple("NOEXIST".into()));
    let mut c = Conn::new(h.addr);
    block(&mut c, &mut admin, 0, &["BLPOP", "k", "0"]);
    assert_eq!(admin.cmd(&["RPUSH", "k", "x"]), V::Int(1));
    c.expect_bytes(&popped("k", "x"));
    w.expect_bytes(&push_bytes(true, "k", "ADD"));
    w.expect_bytes(&push_bytes(true, "k", "DEL"));
    w.expect_quiet(50);
    assert_eq!(admin.cmd(&["EXISTS", "k"]), V::Int(0));

    // A push of two leaves one: ADD only.
    block(&mut c, &mut admin, 0, &["BLPOP", "k", "0"]);
    assert_eq!(admin.cmd(&["RPUSH", "k", "x", "y"]), V::Int(2));
    c.expect_bytes(&popped("k", "x"));
    w.expect_bytes(&push_bytes(true, "k", "ADD"));
    w.expect_quiet(50);
    assert_eq!(w.cmd(&["UNWATCHEX", "k"]), V::Int(1));
}

#[test]
fn settp_queue_hands_over_through_the_shared_registry() {
    let h = start();
    let mut holder = Conn::new(h.addr);
    let mut w1 = Conn::resp3(h.addr);
    let mut w2 = Conn::new(h.addr);
    let (id1, id2) = (w1.id(), w2.id());
    assert_eq!(holder.cmd(&["SETTP", "lk", "h"]), V::Int(1));
    assert_eq!(w1.cmd(&["SETTP", "lk", "a", "QUEUE"]), V::Int(0));
    assert_eq!(w2.cmd(&["SETTP", "lk", "b", "QUEUE"]), V::Int(0));
    assert_eq!(
        holder.cmd(&["TPQUEUE", "lk"]),
        V::Arr(vec![V::Int(id1), V::Int(id2)])
    );
    // Lock waits are not blocked clients.
    assert_eq!(blocked(&mut holder), 0);
    assert_eq!(holder.cmd(&["DEL", "lk"]), V::Int(1));
    w1.expect_acquired(true, "lk", "a");
    w2.expect_quiet(50);
    assert_eq!(holder.cmd(&["TPOWNER", "lk"]), V::Int(id1));
    assert_eq!(w1.cmd(&["DEL", "lk"]), V::Int(1));
    w2.expect_acquired(false, "lk", "b");
    assert_eq!(holder.cmd(&["TPOWNER", "lk"]), V::Int(id2));
}

#[test]
fn blocked_client_keeps_its_lock_queue_place() {
    let h = start();
    let mut admin = Conn::new(h.addr);
    let mut x = Conn::resp3(h.addr);
    let xid = x.id();
    assert_eq!(admin.cmd(&["SETTP", "lk", "h"]), V::Int(1));
    assert_eq!(x.cmd(&["SETTP", "lk", "xv", "QUEUE"]), V::Int(0));
    block(&mut x, &mut admin, 0, &["BLPOP", "q", "0"]);
    assert_eq!(admin.cmd(&["TPQUEUE", "lk"]), V::Arr(vec![V::Int(xid)]));
    // The lock is handed over while x is blocked: the push arrives, the
    // BLPOP stays blocked.
    assert_eq!(admin.cmd(&["DEL", "lk"]), V::Int(1));
    x.expect_acquired(true, "lk", "xv");
    x.expect_quiet(50);
    assert_eq!(admin.cmd(&["TPOWNER", "lk"]), V::Int(xid));
    assert_eq!(blocked(&mut admin), 1);
    // A push on q serves x; the lock is untouched.
    assert_eq!(admin.cmd(&["RPUSH", "q", "v"]), V::Int(1));
    x.expect_bytes(&popped("q", "v"));
    assert_eq!(
        x.cmd(&["TPKEYS"]),
        V::Arr(vec![V::Arr(vec![V::Int(0), b("lk")])])
    );

    // Queued for another lock and blocked: serving the BLPOP leaves the
    // queue place, and the lock still goes to x later.
    assert_eq!(admin.cmd(&["SETTP", "lk2", "h"]), V::Int(1));
    assert_eq!(x.cmd(&["SETTP", "lk2", "x2", "QUEUE"]), V::Int(0));
    block(&mut x, &mut admin, 0, &["BLPOP", "q", "0"]);
    assert_eq!(admin.cmd(&["RPUSH", "q", "w"]), V::Int(1));
    x.expect_bytes(&popped("q", "w"));
    assert_eq!(admin.cmd(&["TPQUEUE", "lk2"]), V::Arr(vec![V::Int(xid)]));
    assert_eq!(admin.cmd(&["DEL", "lk2"]), V::Int(1));
    x.expect_acquired(true, "lk2", "x2");
    assert_eq!(admin.cmd(&["TPOWNER", "lk2"]), V::Int(xid));

    // Disconnecting while blocked and queued drops both.
    assert_eq!(admin.cmd(&["SETTP", "lk3", "h"]), V::Int(1));
    assert_eq!(x.cmd(&["SETTP", "lk3", "x3", "QUEUE"]), V::Int(0));
    block(&mut x, &mut admin, 0, &["BLPOP", "q", "0"]);
    drop(x);
    wait_blocked(&mut admin, 0);
    eventually("x left the lock queue", || {
        admin.cmd(&["TPQUEUE", "lk3"]) == V::Arr(vec![])
    });
    assert_eq!(admin.cmd(&["EXISTS", "lk", "lk2"]), V::Int(0));
}

/// A key a client blocks on that becomes another type keeps the client
/// blocked (Redis 7.0.15 serves only when the key is a list again).
#[test]
fn blocked_client_stays_blocked_when_the_key_becomes_a_string() {
    let h = start();
    let mut admin = Conn::new(h.addr);
    let mut c = Conn::new(h.addr);
    block(&mut c, &mut admin, 0, &["BLPOP", "k", "0"]);
    assert_eq!(admin.cmd(&["SET", "k", "str"]), ok());
    c.expect_quiet(100);
    assert_eq!(blocked(&mut admin), 1);
    assert_eq!(admin.cmd(&["DEL", "k"]), V::Int(1));
    assert_eq!(admin.cmd(&["RPUSH", "k", "x"]), V::Int(1));
    c.expect_bytes(&popped("k", "x"));

    // The same through SETTP and a lock hand-over: each creates k as a
    // string while c waits on it.
    block(&mut c, &mut admin, 0, &["BLPOP", "k", "0"]);
    assert_eq!(admin.cmd(&["SETTP", "k", "h"]), V::Int(1));
    let mut w = Conn::new(h.addr);
    assert_eq!(w.cmd(&["SETTP", "k", "w", "QUEUE"]), V::Int(0));
    assert_eq!(admin.cmd(&["DEL", "k"]), V::Int(1));
    w.expect_acquired(false, "k", "w");
    c.expect_quiet(100);
    assert_eq!(blocked(&mut admin), 1);
    assert_eq!(w.cmd(&["DEL", "k"]), V::Int(1));
    assert_eq!(admin.cmd(&["RPUSH", "k", "y"]), V::Int(1));
    c.expect_bytes(&popped("k", "y"));
}

// ------------------------------------------------------------ idle timeout

#[test]
fn idle_timeout_spares_blocked_clients() {
    let h = start_with(Config {
        port: 0,
        timeout: 1,
        ..Default::default()
    });
    let mut admin = Conn::new(h.addr);
    let mut forever = Conn::new(h.addr);
    let mut long = Conn::new(h.addr);
    let mut idle = Conn::ready(h.addr);
    block(&mut forever, &mut admin, 0, &["BLPOP", "k", "0"]);
    let t = Instant::now();
    block(
        &mut long,
        &mut admin,
        1,
        &["BLMOVE", "m", "d", "LEFT", "LEFT", "2.5"],
    );
    drop(admin);
    // The idle client is closed after about a second ...
    let (rest, closed) = idle.read_all(Duration::from_secs(5));
    assert!(rest.is_empty() && closed, "{rest:?} closed={closed}");
    // ... the blocked ones are not: the timed one gets its null reply.
    long.expect_bytes(b"$-1\r\n");
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(2400), "{took:?}");
    assert_eq!(long.cmd(&["PING"]), V::Simple("PONG".into()));
    let mut admin = Conn::new(h.addr);
    assert_eq!(blocked(&mut admin), 1);
    assert_eq!(admin.cmd(&["RPUSH", "k", "v"]), V::Int(1));
    forever.expect_bytes(&popped("k", "v"));
    assert_eq!(forever.cmd(&["PING"]), V::Simple("PONG".into()));
}

// ------------------------------------------------------------ RESP3

#[test]
fn replies_follow_the_blocked_clients_protocol() {
    let h = start();
    let mut admin2 = Conn::new(h.addr);
    let mut admin3 = Conn::resp3(h.addr);
    let mut c3 = Conn::resp3(h.addr);
    let mut c2 = Conn::new(h.addr);
    let (id3, id2) = (c3.id().to_string(), c2.id().to_string());

    // Served by a RESP2 pusher, a RESP3 client gets RESP3 (and the other
    // way round).
    block(&mut c3, &mut admin2, 0, &["BLPOP", "k", "0"]);
    assert_eq!(admin2.cmd(&["RPUSH", "k", "x"]), V::Int(1));
    c3.expect_bytes(&popped("k", "x"));
    block(
        &mut c2,
        &mut admin3,
        0,
        &["BLMOVE", "k", "d", "LEFT", "LEFT", "0"],
    );
    assert_eq!(admin3.cmd(&["RPUSH", "k", "y"]), V::Int(1));
    c2.expect_bytes(&bulk(b"y"));

    // Unblocked by a client of the other protocol: each gets its own null.
    block(&mut c3, &mut admin2, 0, &["BLPOP", "k", "0"]);
    assert_eq!(admin2.cmd(&["CLIENT", "UNBLOCK", &id3]), V::Int(1));
    c3.expect_bytes(b"_\r\n");
    block(
        &mut c3,
        &mut admin2,
        0,
        &["BLMOVE", "k", "d", "LEFT", "LEFT", "0"],
    );
    assert_eq!(admin2.cmd(&["CLIENT", "UNBLOCK", &id3]), V::Int(1));
    c3.expect_bytes(b"_\r\n");
    block(&mut c2, &mut admin3, 0, &["BLPOP", "k", "0"]);
    assert_eq!(admin3.cmd(&["CLIENT", "UNBLOCK", &id2]), V::Int(1));
    c2.expect_bytes(b"*-1\r\n");
    block(&mut c2, &mut admin3, 0, &["BRPOPLPUSH", "k", "d", "0"]);
    assert_eq!(admin3.cmd(&["CLIENT", "UNBLOCK", &id2]), V::Int(1));
    c2.expect_bytes(b"$-1\r\n");

    // A RESP3 client that watches the key it blocks on: the ADD of the
    // push that serves it comes first; its reply and the DEL its own pop
    // caused follow (in either order: see the report).
    assert_eq!(c3.cmd(&["WATCHEX", "k"]), V::Simple("NOEXIST".into()));
    block(&mut c3, &mut admin2, 0, &["BLMPOP", "0", "1", "k", "RIGHT"]);
    assert_eq!(admin2.cmd(&["RPUSH", "k", "z"]), V::Int(1));
    c3.expect_bytes(&push_bytes(true, "k", "ADD"));
    let reply = [
        b"*2\r\n".to_vec(),
        bulk(b"k"),
        b"*1\r\n".to_vec(),
        bulk(b"z"),
    ]
    .concat();
    let del = push_bytes(true, "k", "DEL");
    let got = c3.bytes(reply.len() + del.len());
    assert!(
        got == [reply.clone(), del.clone()].concat() || got == [del, reply].concat(),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    c3.expect_quiet(20);
    assert_eq!(blocked(&mut admin2), 0);
}

// ------------------------------------------------------ review regressions

/// A blocked command under CLIENT REPLY OFF or SKIP ends silently, however
/// it ends (served, timed out, unblocked), as in Redis: the reply stream
/// stays in step.
#[test]
fn reply_off_and_skip_drop_the_blocked_reply() {
    let h = start();
    let mut admin = Conn::new(h.addr);
    let mut c = Conn::new(h.addr);
    c.send(&["CLIENT", "REPLY", "OFF"]);
    block(&mut c, &mut admin, 0, &["BLPOP", "q", "0"]);
    assert_eq!(admin.cmd(&["RPUSH", "q", "x"]), V::Int(1));
    wait_blocked(&mut admin, 0);
    // Served (the element is gone) but nothing was written.
    assert_eq!(admin.cmd(&["LLEN", "q"]), V::Int(0));
    c.expect_quiet(150);
    // A timeout, too.
    c.send(&["BLPOP", "q", "0.05"]);
    std::thread::sleep(Duration::from_millis(200));
    c.expect_quiet(100);
    assert_eq!(c.cmd(&["CLIENT", "REPLY", "ON"]), ok());

    // SKIP: the next reply the client reads is PING's.
    let mut d = Conn::new(h.addr);
    d.send(&["CLIENT", "REPLY", "SKIP"]);
    block(&mut d, &mut admin, 0, &["BLPOP", "q", "0"]);
    let V::Int(id) = d_id(&mut admin, &h) else {
        panic!("client id");
    };
    assert_eq!(
        admin.cmd(&["CLIENT", "UNBLOCK", &id.to_string()]),
        V::Int(1)
    );
    assert_eq!(d.cmd(&["PING"]), V::Simple("PONG".into()));
}

/// The id of the one blocked client (CLIENT LIST's `flags=b`).
fn d_id(admin: &mut Conn, _h: &latchkey_server::runtime::ServerHandle) -> V {
    let V::Bulk(list) = admin.cmd(&["CLIENT", "LIST"]) else {
        panic!("CLIENT LIST reply");
    };
    let list = String::from_utf8(list).unwrap();
    let line = list
        .lines()
        .find(|l| l.contains("cmd=blpop"))
        .expect("a client blocked in BLPOP");
    let id = line
        .split(' ')
        .find_map(|f| f.strip_prefix("id="))
        .unwrap()
        .parse()
        .unwrap();
    V::Int(id)
}

/// A blocked command counts once (as in Redis), however often its keys
/// change before it is served.
#[test]
fn blocked_command_counts_once() {
    let h = start();
    let mut admin = Conn::new(h.addr);
    let mut c = Conn::new(h.addr);
    let total = |admin: &mut Conn| -> u64 {
        let V::Bulk(info) = admin.cmd(&["INFO", "stats"]) else {
            panic!("INFO reply");
        };
        info_field(
            &String::from_utf8(info).unwrap(),
            "total_commands_processed",
        )
        .parse()
        .unwrap()
    };
    let before = total(&mut admin);
    block(&mut c, &mut admin, 0, &["BLPOP", "q", "0"]);
    let mid = total(&mut admin);
    admin.cmd(&["SET", "q", "s"]);
    admin.cmd(&["DEL", "q"]);
    admin.cmd(&["RPUSH", "q", "y"]);
    assert_eq!(c.reply(), bulks(&["q", "y"]));
    let end = total(&mut admin);
    // `mid`'s own INFO and the three writes: the re-runs of BLPOP (after
    // SET, and when RPUSH served it) count nothing.
    assert_eq!(end - mid, 1 + 3, "a re-run blocked command was counted");
    assert!(mid > before);
}

/// A timeout in hexadecimal is a timeout (Redis parses it with strtold).
#[test]
fn hex_timeout_is_accepted() {
    let h = start();
    let mut c = Conn::new(h.addr);
    let t = Instant::now();
    assert_eq!(c.cmd(&["BLPOP", "q", "0x1p-4"]), V::NilArr);
    assert!(t.elapsed() >= Duration::from_millis(50));
}

/// SORT ... STORE onto a queued lock key whose holder's TTL has passed
/// hands the key to the line first, as every other write does.
#[test]
fn sort_store_does_not_cut_in_front_of_a_lock_line() {
    let h = start_debug();
    let mut admin = Conn::new(h.addr);
    let mut holder = Conn::new(h.addr);
    let mut waiter = Conn::new(h.addr);
    assert_eq!(admin.cmd(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]), ok());
    assert_eq!(holder.cmd(&["SETTP", "k", "held", "PX", "50"]), V::Int(1));
    assert_eq!(waiter.cmd(&["SETTP", "k", "mine", "QUEUE"]), V::Int(0));
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(admin.cmd(&["RPUSH", "src", "1"]), V::Int(1));
    assert_eq!(admin.cmd(&["SORT", "src", "STORE", "k"]), V::Int(1));
    let got = waiter.raw();
    assert!(
        got.starts_with(&acquired_bytes(false, "k", "mine")),
        "the waiter was not handed the key first: {:?}",
        String::from_utf8_lossy(&got)
    );
    assert_eq!(admin.cmd(&["TPQUEUE", "k"]), V::Arr(vec![]));
    assert_eq!(admin.cmd(&["DEBUG", "SET-ACTIVE-EXPIRE", "1"]), ok());
}

// ------------------------------------------------------------ CLIENT PAUSE

/// A connection whose command CLIENT PAUSE postponed counts in INFO's
/// blocked_clients until it runs (Redis's BLOCKED_POSTPONE), and stops
/// counting when it disconnects; a read under a WRITE pause does not.
#[test]
fn paused_clients_count_as_blocked() {
    let h = start();
    let mut admin = Conn::new(h.addr);
    let mut w1 = Conn::new(h.addr);
    let mut w2 = Conn::new(h.addr);
    let mut r = Conn::new(h.addr);
    assert_eq!(admin.cmd(&["CLIENT", "PAUSE", "10000", "WRITE"]), ok());
    assert_eq!(r.cmd(&["GET", "k"]), V::Nil);
    assert_eq!(blocked(&mut admin), 0);
    w1.send(&["SET", "k", "v"]);
    wait_blocked(&mut admin, 1);
    w2.send(&["INCR", "n"]);
    wait_blocked(&mut admin, 2);
    drop(w2);
    wait_blocked(&mut admin, 1);
    assert_eq!(admin.cmd(&["CLIENT", "UNPAUSE"]), ok());
    assert_eq!(w1.frame(), ok());
    wait_blocked(&mut admin, 0);
    assert_eq!(r.cmd(&["GET", "k"]), b("v"));
}
