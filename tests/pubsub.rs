//! Pub/sub and keyspace notifications end to end over raw TCP: what the
//! differential suite cannot show (output-buffer limits, disconnects, SETTP
//! keys, RESP3 connections that keep running commands, INFO and CLIENT
//! LIST figures). Every wait is bounded.

use std::io::Write;
use std::time::Duration;

use latchkey_server::runtime::ServerHandle;

mod common;
use common::*;

/// A `message` frame: RESP2 array or RESP3 push.
fn message(resp3: bool, channel: &str, msg: &str) -> V {
    let items = vec![b("message"), b(channel), b(msg)];
    if resp3 {
        V::Push(items)
    } else {
        V::Arr(items)
    }
}

fn subscribed(resp3: bool, kind: &str, name: &str, n: i64) -> V {
    let items = vec![b(kind), b(name), V::Int(n)];
    if resp3 {
        V::Push(items)
    } else {
        V::Arr(items)
    }
}

/// (channels, patterns, shard channels) with subscribers, as INFO shows them.
fn info_counts(c: &mut Conn) -> (String, String, String) {
    let info = match c.cmd(&["INFO", "stats"]) {
        V::Bulk(s) => String::from_utf8(s).unwrap(),
        v => panic!("{v:?}"),
    };
    (
        info_field(&info, "pubsub_channels"),
        info_field(&info, "pubsub_patterns"),
        info_field(&info, "pubsubshard_channels"),
    )
}

fn client_line(c: &mut Conn, id: i64) -> Option<String> {
    let list = match c.cmd(&["CLIENT", "LIST"]) {
        V::Bulk(s) => String::from_utf8(s).unwrap(),
        v => panic!("{v:?}"),
    };
    list.lines()
        .find(|l| l.starts_with(&format!("id={id} ")))
        .map(str::to_string)
}

fn numsub(c: &mut Conn, channel: &str) -> V {
    match c.cmd(&["PUBSUB", "NUMSUB", channel]) {
        V::Arr(v) => v[1].clone(),
        v => panic!("{v:?}"),
    }
}

#[test]
fn messages_reach_subscribers_in_both_protocols() {
    let h = start();
    for resp3 in [false, true] {
        let mut sub = Conn::proto(h.addr, resp3);
        let mut publ = Conn::ready(h.addr);
        sub.send(&["SUBSCRIBE", "ch", "other"]);
        assert_eq!(sub.frame(), subscribed(resp3, "subscribe", "ch", 1));
        assert_eq!(sub.frame(), subscribed(resp3, "subscribe", "other", 2));
        assert_eq!(publ.cmd(&["PUBLISH", "ch", "hello"]), V::Int(1));
        assert_eq!(sub.frame(), message(resp3, "ch", "hello"));
        assert_eq!(publ.cmd(&["PUBLISH", "nobody", "x"]), V::Int(0));
        sub.silent();
    }
}

#[test]
fn resp3_connection_receives_messages_while_running_commands() {
    let h = start();
    let mut sub = Conn::resp3(h.addr);
    let mut publ = Conn::ready(h.addr);
    sub.send(&["SUBSCRIBE", "ch"]);
    assert_eq!(sub.frame(), subscribed(true, "subscribe", "ch", 1));
    for i in 0..50 {
        let m = format!("m{i}");
        assert_eq!(publ.cmd(&["PUBLISH", "ch", &m]), V::Int(1));
        // The message arrives before the reply to the next command, which
        // runs normally on the subscribed connection.
        sub.send(&["INCR", "n"]);
        assert_eq!(sub.frame(), message(true, "ch", &m));
        assert_eq!(sub.frame(), V::Int(i + 1));
    }
    assert_eq!(sub.cmd(&["GET", "n"]), b("50"));
    // RESP2 in subscribed mode refuses the same command.
    let mut old = Conn::new(h.addr);
    old.send(&["SUBSCRIBE", "ch"]);
    old.frame();
    assert!(matches!(old.cmd(&["INCR", "n"]), V::Err(e) if e.contains("only (P|S)SUBSCRIBE")));
}

#[test]
fn subscriptions_end_with_the_connection_and_with_reset() {
    let h = start();
    let mut x = Conn::ready(h.addr);
    {
        let mut sub = Conn::new(h.addr);
        sub.send(&["SUBSCRIBE", "a", "b"]);
        sub.frame();
        sub.frame();
        sub.send(&["PSUBSCRIBE", "p*"]);
        sub.frame();
        sub.send(&["SSUBSCRIBE", "s"]);
        sub.frame();
        assert_eq!(info_counts(&mut x), ("2".into(), "1".into(), "1".into()));
        // No QUIT: the socket just closes.
    }
    eventually("subscriptions gone", || {
        let s = h.shared.store.lock();
        s.pubsub.numpat() == 0 && s.pubsub.numchannels(false) == 0
    });
    assert_eq!(info_counts(&mut x), ("0".into(), "0".into(), "0".into()));
    assert_eq!(x.cmd(&["PUBLISH", "a", "m"]), V::Int(0));

    let mut sub = Conn::new(h.addr);
    let id = sub.id();
    sub.send(&["SUBSCRIBE", "a"]);
    sub.frame();
    sub.send(&["PSUBSCRIBE", "p*"]);
    sub.frame();
    let line = client_line(&mut x, id).unwrap();
    assert!(line.contains(" flags=P "), "{line}");
    assert!(line.contains(" sub=1 psub=1 ssub=0 "), "{line}");
    assert_eq!(sub.cmd(&["RESET"]), V::Simple("RESET".into()));
    let line = client_line(&mut x, id).unwrap();
    assert!(line.contains(" flags=N "), "{line}");
    assert!(line.contains(" sub=0 psub=0 ssub=0 "), "{line}");
    assert_eq!(numsub(&mut x, "a"), V::Int(0));
    assert_eq!(x.cmd(&["PUBLISH", "pa", "m"]), V::Int(0));
    sub.silent();
}

#[test]
fn subscriber_that_never_reads_is_cut_at_its_limit() {
    let h = start();
    let mut x = Conn::ready(h.addr);
    assert_eq!(
        x.cmd(&[
            "CONFIG",
            "SET",
            "client-output-buffer-limit",
            "pubsub 64kb 0 0"
        ]),
        ok()
    );
    let mut slow = Conn::new(h.addr);
    let slow_id = slow.id();
    slow.send(&["SUBSCRIBE", "ch"]);
    slow.frame();
    let mut fast = Conn::resp3(h.addr);
    fast.send(&["SUBSCRIBE", "ch"]);
    fast.frame();
    // `slow` never reads again; `fast` reads everything.
    let big = "x".repeat(16 * 1024);
    let mut cut = false;
    let mut sent = 0;
    for _ in 0..2000 {
        let n = x.cmd(&["PUBLISH", "ch", &big]);
        sent += 1;
        assert_eq!(fast.frame(), message(true, "ch", &big));
        if n == V::Int(1) {
            cut = true;
            break;
        }
        assert_eq!(n, V::Int(2));
    }
    assert!(cut, "the slow subscriber was never disconnected");
    assert!(sent > 2, "cut after {sent} messages");
    // The publisher and the other subscriber go on.
    assert_eq!(x.cmd(&["PUBLISH", "ch", "after"]), V::Int(1));
    assert_eq!(fast.frame(), message(true, "ch", "after"));
    eventually("slow client gone", || {
        h.shared
            .store
            .lock()
            .clients
            .get(&(slow_id as u64))
            .is_none()
    });
    assert_eq!(numsub(&mut x, "ch"), V::Int(1));
    // The slow subscriber's socket ends after what was already written.
    let (_, closed) = slow.read_all(Duration::from_secs(2));
    assert!(closed, "socket never closed");
}

#[test]
fn bound_key_deleted_on_disconnect_fires_del() {
    let h = start();
    let mut x = Conn::ready(h.addr);
    assert_eq!(
        x.cmd(&["CONFIG", "SET", "notify-keyspace-events", "KEg"]),
        ok()
    );
    for resp3 in [false, true] {
        let mut sub = Conn::proto(h.addr, resp3);
        sub.send(&["PSUBSCRIBE", "__key*@0__:*"]);
        sub.frame();
        let mut owner = Conn::ready(h.addr);
        assert_eq!(owner.cmd(&["SETTP", "lock", "v"]), V::Int(1));
        // SETTP's own event is a string event ($), not enabled here.
        sub.silent();
        drop(owner);
        let pm = |chan: &str, msg: &str| {
            let items = vec![b("pmessage"), b("__key*@0__:*"), b(chan), b(msg)];
            if resp3 {
                V::Push(items)
            } else {
                V::Arr(items)
            }
        };
        assert_eq!(sub.frame(), pm("__keyspace@0__:lock", "del"));
        assert_eq!(sub.frame(), pm("__keyevent@0__:del", "lock"));
        assert_eq!(x.cmd(&["EXISTS", "lock"]), V::Int(0));
        sub.silent();
    }
}

#[test]
fn expiry_and_eviction_events_have_no_command() {
    let h = start();
    let mut x = Conn::ready(h.addr);
    assert_eq!(
        x.cmd(&["CONFIG", "SET", "notify-keyspace-events", "Exe"]),
        ok()
    );
    let mut sub = Conn::resp3(h.addr);
    sub.send(&["PSUBSCRIBE", "__keyevent@*"]);
    sub.frame();
    assert_eq!(x.cmd(&["SET", "t", "v", "PX", "20"]), ok());
    let ev = |e: &str, k: &str| {
        V::Push(vec![
            b("pmessage"),
            b("__keyevent@*"),
            b(&format!("__keyevent@0__:{e}")),
            b(k),
        ])
    };
    assert_eq!(sub.frame(), ev("expired", "t"));
    assert_eq!(x.cmd(&["SET", "e", "v"]), ok());
    assert_eq!(
        x.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-random"]),
        ok()
    );
    assert_eq!(x.cmd(&["CONFIG", "SET", "maxmemory", "1"]), ok());
    assert!(matches!(x.cmd(&["SET", "f", "v"]), V::Err(e) if e.starts_with("OOM")));
    assert_eq!(sub.frame(), ev("evicted", "e"));
    assert_eq!(x.cmd(&["CONFIG", "SET", "maxmemory", "0"]), ok());
    sub.silent();
}

#[test]
fn notifications_off_cost_no_messages_and_subscribers_see_only_theirs() {
    let h: ServerHandle = start();
    let mut x = Conn::ready(h.addr);
    let mut sub = Conn::new(h.addr);
    sub.send(&["PSUBSCRIBE", "*"]);
    sub.frame();
    for i in 0..100 {
        x.cmd(&["SET", &format!("k{i}"), "v"]);
    }
    sub.silent();
    // A write in another database goes to that database's channels.
    assert_eq!(
        x.cmd(&["CONFIG", "SET", "notify-keyspace-events", "K$"]),
        ok()
    );
    let mut only0 = Conn::new(h.addr);
    only0.send(&["SUBSCRIBE", "__keyspace@0__:k"]);
    only0.frame();
    assert_eq!(x.cmd(&["SELECT", "5"]), ok());
    assert_eq!(x.cmd(&["SET", "k", "v"]), ok());
    assert_eq!(
        sub.frame(),
        V::Arr(vec![b("pmessage"), b("*"), b("__keyspace@5__:k"), b("set")])
    );
    only0.silent();
    // Pipelined writes arrive in order.
    let mut pipe = Vec::new();
    for i in 0..20 {
        pipe.extend(enc(&["SET", "k", &i.to_string()]));
    }
    x.s.write_all(&pipe).unwrap();
    for _ in 0..20 {
        assert_eq!(x.reply(), ok());
        assert_eq!(
            sub.frame_within(Duration::from_secs(5)),
            Some(V::Arr(vec![
                b("pmessage"),
                b("*"),
                b("__keyspace@5__:k"),
                b("set")
            ]))
        );
    }
}

#[test]
fn idle_timeout_spares_subscribers() {
    let h = start_with(latchkey_server::config::Config {
        port: 0,
        timeout: 1,
        ..Default::default()
    });
    let mut sub = Conn::new(h.addr);
    sub.send(&["SUBSCRIBE", "ch"]);
    sub.frame();
    let mut idle = Conn::ready(h.addr);
    std::thread::sleep(Duration::from_millis(2500));
    // Redis's `timeout` closes an idle client but not a pub/sub one.
    assert!(idle.closed(), "idle client kept");
    let mut x = Conn::ready(h.addr);
    assert_eq!(x.cmd(&["PUBLISH", "ch", "m"]), V::Int(1));
    assert_eq!(sub.frame(), message(false, "ch", "m"));
}

#[test]
fn notify_keyspace_events_from_the_configuration() {
    let h = start_with(latchkey_server::config::Config {
        port: 0,
        notify_keyspace_events: latchkey_server::pubsub::parse_flags(b"Em").unwrap(),
        ..Default::default()
    });
    let mut x = Conn::ready(h.addr);
    assert_eq!(
        x.cmd(&["CONFIG", "GET", "notify-keyspace-events"]),
        V::Arr(vec![b("notify-keyspace-events"), b("Em")])
    );
    let mut sub = Conn::new(h.addr);
    sub.send(&["SUBSCRIBE", "__keyevent@0__:keymiss"]);
    sub.frame();
    assert_eq!(x.cmd(&["GET", "nokey"]), V::Nil);
    assert_eq!(
        sub.frame(),
        message(false, "__keyevent@0__:keymiss", "nokey")
    );
}

#[test]
fn resp2_tracking_redirects_invalidations_to_a_subscriber() {
    let h = start();
    let mut sink = Conn::new(h.addr);
    let sink_id = sink.id();
    sink.send(&["SUBSCRIBE", "__redis__:invalidate"]);
    assert_eq!(
        sink.frame(),
        subscribed(false, "subscribe", "__redis__:invalidate", 1)
    );
    let mut tracker = Conn::new(h.addr);
    assert_eq!(
        tracker.cmd(&["CLIENT", "TRACKING", "ON", "REDIRECT", &sink_id.to_string()]),
        ok()
    );
    assert_eq!(tracker.cmd(&["GET", "k"]), V::Nil);
    let mut w = Conn::ready(h.addr);
    assert_eq!(w.cmd(&["SET", "k", "v"]), ok());
    assert_eq!(
        sink.frame(),
        V::Arr(vec![
            b("message"),
            b("__redis__:invalidate"),
            V::Arr(vec![b("k")])
        ])
    );
}
