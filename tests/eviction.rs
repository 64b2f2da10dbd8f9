//! `maxmemory` and its policies against the latchkey-server binary: what
//! each policy evicts in kind (volatile-* never touches a key without a
//! TTL, volatile-ttl the soonest-expiring first, a key bound by SETTP
//! never), noeviction's OOM error, INFO's evicted_keys, OBJECT FREQ under
//! LFU.
//!
//! `used_memory` is the process's (jemalloc's allocated bytes), so the
//! server runs as a process of its own: nothing else allocating moves the
//! limit the scenarios set. The scenarios run one after another against
//! it. Every loop is bounded.

mod common;

use std::time::Duration;

use common::{Proc, TempDir};

fn conn(h: &Proc) -> redis::Connection {
    redis::Client::open(format!("redis://{}", h.addr))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap()
}

fn cmd(c: &mut redis::Connection, args: &[&str]) -> redis::RedisResult<redis::Value> {
    let mut k = redis::cmd(args[0]);
    for a in &args[1..] {
        k.arg(*a);
    }
    k.query(c)
}

fn int(c: &mut redis::Connection, args: &[&str]) -> i64 {
    match cmd(c, args).unwrap() {
        redis::Value::Int(n) => n,
        v => panic!("{args:?}: not an integer: {v:?}"),
    }
}

fn info_field(c: &mut redis::Connection, section: &str, name: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg(section).query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in INFO {section}"))
        .trim()
        .parse()
        .unwrap()
}

fn config_set(c: &mut redis::Connection, name: &str, value: &str) {
    cmd(c, &["CONFIG", "SET", name, value]).unwrap();
}

/// Sets maxmemory to what is used now plus `room` bytes.
fn limit_to_used_plus(c: &mut redis::Connection, room: u64) {
    let used = info_field(c, "memory", "used_memory");
    config_set(c, "maxmemory", &(used + room).to_string());
}

/// SETs `n` keys `prefix:i` of `size` bytes (optionally with a TTL of
/// `ttl` s); returns how many were refused with OOM.
fn fill(c: &mut redis::Connection, prefix: &str, n: usize, size: usize, ttl: Option<u64>) -> usize {
    let val = "x".repeat(size);
    let mut refused = 0;
    for i in 0..n {
        let key = format!("{prefix}:{i}");
        let r = match ttl {
            Some(t) => cmd(c, &["SET", &key, &val, "EX", &t.to_string()]),
            None => cmd(c, &["SET", &key, &val]),
        };
        match r {
            Ok(_) => {}
            Err(e) if is_oom(&e) => refused += 1,
            Err(e) => panic!("SET {key}: {e}"),
        }
    }
    refused
}

/// The OOM error (the exact bytes are compared with Redis in
/// redis-compat/cases/eviction.txt; the client splits off the code).
fn is_oom(e: &redis::RedisError) -> bool {
    e.code() == Some("OOM")
        && e.to_string()
            .contains("command not allowed when used memory > 'maxmemory'")
}

fn count_prefix(c: &mut redis::Connection, prefix: &str, n: usize) -> usize {
    (0..n)
        .filter(|i| int(c, &["EXISTS", &format!("{prefix}:{i}")]) == 1)
        .count()
}

#[test]
fn policies_evict_what_redis_would_in_kind() {
    let dir = TempDir::new("eviction");
    let mut h = Proc::spawn(env!("CARGO_BIN_EXE_latchkey-server"), &dir, &["--save", ""]);
    assert!(h.started().is_none(), "latchkey-server exited at start");
    let mut c = conn(&h);

    // noeviction: writes that grow memory fail with Redis's text; reads
    // and deletes still run.
    config_set(&mut c, "maxmemory-policy", "noeviction");
    cmd(&mut c, &["SET", "small", "1"]).unwrap();
    limit_to_used_plus(&mut c, 1 << 20);
    let refused = fill(&mut c, "ne", 400, 10_000, None);
    assert!(refused > 0, "nothing refused under noeviction");
    let err = cmd(&mut c, &["SET", "one-more", "v"]).unwrap_err();
    assert!(is_oom(&err), "{err}");
    assert_eq!(
        cmd(&mut c, &["GET", "small"]).unwrap(),
        redis::Value::BulkString(b"1".to_vec())
    );
    assert_eq!(info_field(&mut c, "stats", "evicted_keys"), 0);
    assert!(int(&mut c, &["DEL", "ne:0"]) == 1);
    config_set(&mut c, "maxmemory", "0");
    cmd(&mut c, &["FLUSHALL"]).unwrap();

    // volatile-lru: keys without a TTL are never evicted; once only they
    // are left, denyoom commands are refused.
    config_set(&mut c, "maxmemory-policy", "volatile-lru");
    fill(&mut c, "keep", 100, 10_000, None);
    limit_to_used_plus(&mut c, 1 << 20);
    let refused = fill(&mut c, "vol", 400, 10_000, Some(1000));
    assert_eq!(
        count_prefix(&mut c, "keep", 100),
        100,
        "a persistent key was evicted"
    );
    assert!(
        count_prefix(&mut c, "vol", 400) < 400,
        "no volatile key was evicted"
    );
    assert!(info_field(&mut c, "stats", "evicted_keys") > 0);
    let _ = refused;
    // Only persistent keys left over the limit: refuse.
    cmd(&mut c, &["CONFIG", "SET", "maxmemory", "1"]).unwrap();
    let err = cmd(&mut c, &["SET", "x", "y"]).unwrap_err();
    assert!(is_oom(&err), "{err}");
    assert_eq!(count_prefix(&mut c, "keep", 100), 100);
    config_set(&mut c, "maxmemory", "0");
    cmd(&mut c, &["FLUSHALL"]).unwrap();

    // volatile-ttl: the soonest-expiring keys go first.
    config_set(&mut c, "maxmemory-policy", "volatile-ttl");
    for i in 0..100 {
        let key = format!("ttl:{i}");
        // ttl:0 expires first, ttl:99 last.
        cmd(
            &mut c,
            &[
                "SET",
                &key,
                &"x".repeat(10_000),
                "EX",
                &(1000 + i * 10).to_string(),
            ],
        )
        .unwrap();
    }
    let used = info_field(&mut c, "memory", "used_memory");
    // About a fifth of the keys' worth below what is used now.
    config_set(&mut c, "maxmemory", &(used - 200_000).to_string());
    cmd(&mut c, &["PING"]).unwrap();
    let alive: Vec<bool> = (0..100)
        .map(|i| int(&mut c, &["EXISTS", &format!("ttl:{i}")]) == 1)
        .collect();
    let evicted = alive.iter().filter(|a| !**a).count();
    assert!(evicted > 0, "nothing evicted under volatile-ttl");
    assert!(alive[99], "the latest-expiring key was evicted");
    assert!(
        alive[..evicted].iter().all(|a| !a),
        "not the soonest-expiring first: {alive:?}"
    );
    config_set(&mut c, "maxmemory", "0");
    cmd(&mut c, &["FLUSHALL"]).unwrap();

    // allkeys-random (and every policy): a key bound by SETTP stays.
    config_set(&mut c, "maxmemory-policy", "allkeys-random");
    let mut holder = conn(&h);
    assert_eq!(int(&mut holder, &["SETTP", "lock", "token"]), 1);
    limit_to_used_plus(&mut c, 1 << 20);
    fill(&mut c, "r", 400, 10_000, None);
    assert!(
        count_prefix(&mut c, "r", 400) < 400,
        "nothing evicted under allkeys-random"
    );
    assert_eq!(
        int(&mut c, &["EXISTS", "lock"]),
        1,
        "a bound key was evicted"
    );
    assert!(matches!(
        cmd(&mut c, &["TPOWNER", "lock"]).unwrap(),
        redis::Value::Int(_)
    ));

    // allkeys-lru evicts plain keys too; the lock still stays.
    config_set(&mut c, "maxmemory-policy", "allkeys-lru");
    fill(&mut c, "l", 400, 10_000, None);
    assert!(count_prefix(&mut c, "l", 400) < 400);
    assert_eq!(
        int(&mut c, &["EXISTS", "lock"]),
        1,
        "a bound key was evicted"
    );
    config_set(&mut c, "maxmemory", "0");
    cmd(&mut c, &["FLUSHALL"]).unwrap();

    // allkeys-lfu: OBJECT FREQ counts (logarithmically) and IDLETIME is
    // refused; outside LFU it is the other way round.
    config_set(&mut c, "maxmemory-policy", "allkeys-lfu");
    cmd(&mut c, &["SET", "hot", "v"]).unwrap();
    for _ in 0..200 {
        cmd(&mut c, &["GET", "hot"]).unwrap();
    }
    let freq = int(&mut c, &["OBJECT", "FREQ", "hot"]);
    assert!(freq > 5, "freq {freq} after 200 reads");
    assert!(cmd(&mut c, &["OBJECT", "IDLETIME", "hot"]).is_err());
    config_set(&mut c, "maxmemory-policy", "noeviction");
    let err = cmd(&mut c, &["OBJECT", "FREQ", "hot"]).unwrap_err();
    assert!(
        err.to_string()
            .contains("An LFU maxmemory policy is not selected"),
        "{err}"
    );
    drop(holder);
}

/// Replicas' output buffers do not count against `maxmemory` (Redis's
/// freeMemoryGetNotCountedMemory): a stopped replica's buffer growing by
/// 25 MB (over `maxmemory`) evicts nothing, on Redis (the oracle) and here, and INFO shows
/// the buffer in mem_clients_slaves and mem_not_counted_for_evict.
#[test]
fn a_replicas_buffer_does_not_count_against_maxmemory() {
    let r = common::RealRedis::start_args(&["--repl-diskless-sync", "no"]);
    let dir = TempDir::new("eviction-replica");
    let p = Proc::spawn(
        env!("CARGO_BIN_EXE_latchkey-server"),
        &dir,
        &["--save", "", "--repl-diskless-sync", "no"],
    );
    for (name, addr) in [("redis", r.addr), ("latchkey", p.addr)] {
        let port = addr.port().to_string();
        let replica = common::RealRedis::start_args(&["--replicaof", "127.0.0.1", &port]);
        common::repl::synced(addr, replica.addr);
        let mut c = common::Conn::ready(addr);
        let value = "v".repeat(1024);
        let sets: Vec<Vec<String>> = (0..1000)
            .map(|i| vec!["SET".into(), format!("k{i}"), value.clone()])
            .collect();
        for chunk in sets.chunks(100) {
            let cmds: Vec<Vec<&str>> = chunk
                .iter()
                .map(|v| v.iter().map(String::as_str).collect())
                .collect();
            let cmds: Vec<&[&str]> = cmds.iter().map(Vec::as_slice).collect();
            c.pipeline(&cmds);
            for _ in 0..cmds.len() {
                assert_eq!(c.reply(), common::ok(), "{name}");
            }
        }
        common::repl::synced(addr, replica.addr);
        let used: u64 = common::info_field(&common::repl::info(addr, "memory"), "used_memory")
            .parse()
            .unwrap();
        let max = (used + 8 * 1024 * 1024).to_string();
        assert_eq!(c.cmd(&["CONFIG", "SET", "maxmemory", &max]), common::ok());
        assert_eq!(
            c.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]),
            common::ok()
        );
        let resume = common::repl::Resume::stop(&replica);
        let big = "b".repeat(256 * 1024);
        for _ in 0..100 {
            assert_eq!(c.cmd(&["SET", "big", &big]), common::ok(), "{name}");
        }
        let mem = common::repl::info(addr, "memory");
        let field = |f: &str| -> u64 { common::info_field(&mem, f).parse().unwrap() };
        // What the socket buffers did not take (about 12 MB of 25 MB on
        // loopback) waits in the replica's output buffer.
        let buffers = field("mem_clients_slaves");
        assert!(buffers > 10 * 1024 * 1024, "{name}: {mem}");
        // The buffer less what Redis adds to mem_clients_slaves for the
        // replica's client struct.
        assert!(
            field("mem_not_counted_for_evict") > 10 * 1024 * 1024,
            "{name}: {mem}"
        );
        // Over maxmemory by what the buffer holds, and nothing evicted.
        assert!(field("used_memory") > used + 10 * 1024 * 1024, "{name}");
        assert_eq!(
            common::info_field(&common::repl::info(addr, "stats"), "evicted_keys"),
            "0",
            "{name}"
        );
        assert_eq!(c.cmd(&["DBSIZE"]), common::V::Int(1001), "{name}");
        drop(resume);
    }
}
