//! Background freeing (Redis 7.0's lazyfree.c), run side by side with a
//! real redis-server 7.0.15: the same commands on both, and INFO's
//! `lazyfreed_objects` equal after each once nothing is pending. The
//! sequences are Redis's own tests/unit/lazyfree.tcl ones (UNLINK of a big
//! set, FLUSHDB ASYNC, a stream with every kind of metadata, a stream whose
//! group was destroyed) and the threshold's edges (64 members stay
//! synchronous, 65 go to the background; small encodings always stay).

mod common;

use std::time::{Duration, Instant};

use common::*;

fn info_u64(c: &mut Conn, field: &str) -> u64 {
    match c.cmd(&["INFO", "memory"]) {
        V::Bulk(b) => info_field(&String::from_utf8_lossy(&b), field)
            .parse()
            .unwrap_or_else(|_| panic!("{field} in INFO memory")),
        other => panic!("{other:?}"),
    }
}

/// `lazyfreed_objects` once nothing waits to be freed.
fn freed(c: &mut Conn) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_u64(c, "lazyfree_pending_objects") > 0 {
        assert!(Instant::now() < deadline, "lazyfree never finished");
        std::thread::sleep(Duration::from_millis(10));
    }
    info_u64(c, "lazyfreed_objects")
}

fn sadd_n(c: &mut Conn, key: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let members: Vec<String> = chunk.iter().map(|i| format!("m{i}")).collect();
        let mut args = vec!["SADD", key];
        args.extend(members.iter().map(|s| s.as_str()));
        c.cmd(&args);
    }
}

/// Runs `step` on both servers and compares the freed counts after it.
fn both(servers: &mut [(&str, Conn); 2], what: &str, step: &dyn Fn(&mut Conn)) -> u64 {
    let mut counts = Vec::new();
    for (_, c) in servers.iter_mut() {
        step(c);
        counts.push(freed(c));
    }
    assert_eq!(
        counts[0], counts[1],
        "{what}: lazyfreed_objects redis vs latchkey"
    );
    counts[0]
}

#[test]
fn lazyfreed_objects_count_as_redis_counts_them() {
    let redis = RealRedis::start();
    let h = start();
    let mut servers = [
        ("redis", Conn::ready(redis.addr)),
        ("latchkey", Conn::ready(h.addr)),
    ];
    both(&mut servers, "reset", &|c| {
        assert_eq!(c.cmd(&["CONFIG", "RESETSTAT"]), ok());
    });
    both(&mut servers, "UNLINK of a 100,000-member set", &|c| {
        sadd_n(c, "myset", 100_000);
        assert_eq!(c.cmd(&["UNLINK", "myset"]), V::Int(1));
    });
    both(&mut servers, "FLUSHDB ASYNC", &|c| {
        sadd_n(c, "myset", 100_000);
        c.cmd(&["SET", "a", "1"]);
        assert_eq!(c.cmd(&["FLUSHDB", "ASYNC"]), ok());
    });
    let n = both(&mut servers, "threshold: 64 members stay, 65 go", &|c| {
        assert_eq!(c.cmd(&["CONFIG", "RESETSTAT"]), ok());
        sadd_n(c, "s64", 64);
        sadd_n(c, "s65", 65);
        c.cmd(&["UNLINK", "s64", "s65", "nosuch"]);
    });
    assert_eq!(n, 1);
    both(
        &mut servers,
        "DEL is synchronous, small encodings too",
        &|c| {
            sadd_n(c, "big", 1000);
            c.cmd(&["DEL", "big"]);
            c.cmd(&["RPUSH", "l", "a", "b"]);
            c.cmd(&["HSET", "h", "f", "v"]);
            c.cmd(&["ZADD", "z", "1", "a"]);
            c.cmd(&["UNLINK", "l", "h", "z"]);
        },
    );
    let n = both(&mut servers, "a stream with all types of metadata", &|c| {
        assert_eq!(c.cmd(&["CONFIG", "RESETSTAT"]), ok());
        assert_eq!(
            c.cmd(&["CONFIG", "SET", "stream-node-max-entries", "5"]),
            ok()
        );
        for j in 0..1000 {
            let field = if j % 10 == 0 { "bar" } else { "foo" };
            c.cmd(&["XADD", "stream", "*", field, &j.to_string()]);
        }
        c.cmd(&["XGROUP", "CREATE", "stream", "mygroup", "0"]);
        c.cmd(&[
            "XREADGROUP",
            "GROUP",
            "mygroup",
            "Alice",
            "COUNT",
            "2",
            "STREAMS",
            "stream",
            ">",
        ]);
        c.cmd(&["UNLINK", "stream"]);
    });
    assert_eq!(n, 1, "as lazyfree.tcl asserts");
    let n = both(&mut servers, "a stream with a deleted group", &|c| {
        assert_eq!(c.cmd(&["CONFIG", "RESETSTAT"]), ok());
        c.cmd(&["XADD", "s", "*", "a", "b"]);
        c.cmd(&["XGROUP", "CREATE", "s", "bla", "$"]);
        c.cmd(&["XGROUP", "DESTROY", "s", "bla"]);
        c.cmd(&["UNLINK", "s"]);
    });
    assert_eq!(n, 0, "as lazyfree.tcl asserts");
    let n = both(&mut servers, "FLUSHALL ASYNC over two databases", &|c| {
        assert_eq!(c.cmd(&["CONFIG", "RESETSTAT"]), ok());
        for i in 0..100 {
            c.cmd(&["SET", &format!("k{i}"), "v"]);
        }
        c.cmd(&["SELECT", "3"]);
        c.cmd(&["SET", "x", "y"]);
        c.cmd(&["SELECT", "0"]);
        assert_eq!(c.cmd(&["FLUSHALL", "ASYNC"]), ok());
    });
    assert_eq!(n, 101, "one per key");
}

/// The `lazyfree-lazy-*` switches, side by side with Redis: DEL frees
/// lazily under `-user-del`, FLUSHALL without an argument under
/// `-user-flush`, expiry under `-expire`, an overwrite under `-server-del`.
#[test]
fn lazyfree_switches_count_as_redis_counts_them() {
    let redis = RealRedis::start();
    let h = start();
    let mut servers = [
        ("redis", Conn::ready(redis.addr)),
        ("latchkey", Conn::ready(h.addr)),
    ];
    both(&mut servers, "reset", &|c| {
        assert_eq!(c.cmd(&["CONFIG", "RESETSTAT"]), ok());
    });
    let n = both(&mut servers, "DEL under lazyfree-lazy-user-del", &|c| {
        assert_eq!(
            c.cmd(&["CONFIG", "SET", "lazyfree-lazy-user-del", "yes"]),
            ok()
        );
        sadd_n(c, "big", 1000);
        assert_eq!(c.cmd(&["DEL", "big"]), V::Int(1));
        assert_eq!(
            c.cmd(&["CONFIG", "SET", "lazyfree-lazy-user-del", "no"]),
            ok()
        );
    });
    assert_eq!(n, 1);
    let n = both(
        &mut servers,
        "FLUSHALL under lazyfree-lazy-user-flush",
        &|c| {
            assert_eq!(
                c.cmd(&["CONFIG", "SET", "lazyfree-lazy-user-flush", "yes"]),
                ok()
            );
            for i in 0..10 {
                c.cmd(&["SET", &format!("k{i}"), "v"]);
            }
            assert_eq!(c.cmd(&["FLUSHALL"]), ok());
            assert_eq!(
                c.cmd(&["CONFIG", "SET", "lazyfree-lazy-user-flush", "no"]),
                ok()
            );
        },
    );
    assert_eq!(n, 11);
    let n = both(
        &mut servers,
        "an overwrite under lazyfree-lazy-server-del",
        &|c| {
            assert_eq!(
                c.cmd(&["CONFIG", "SET", "lazyfree-lazy-server-del", "yes"]),
                ok()
            );
            sadd_n(c, "big", 1000);
            assert_eq!(c.cmd(&["SET", "big", "now a string"]), ok());
            assert_eq!(
                c.cmd(&["CONFIG", "SET", "lazyfree-lazy-server-del", "no"]),
                ok()
            );
        },
    );
    assert_eq!(n, 12);
    let n = both(&mut servers, "expiry under lazyfree-lazy-expire", &|c| {
        assert_eq!(
            c.cmd(&["CONFIG", "SET", "lazyfree-lazy-expire", "yes"]),
            ok()
        );
        sadd_n(c, "expiring", 1000);
        assert_eq!(c.cmd(&["PEXPIRE", "expiring", "1"]), V::Int(1));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(c.cmd(&["EXISTS", "expiring"]), V::Int(0));
        assert_eq!(
            c.cmd(&["CONFIG", "SET", "lazyfree-lazy-expire", "no"]),
            ok()
        );
    });
    assert_eq!(n, 13);
}
