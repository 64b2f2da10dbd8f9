//! The one propagation point (`latchkey_server::effects`): a sink attached
//! to an in-process server receives, for a sequence covering every source
//! of change records (client writes, EXEC, a script by its effects, a
//! served blocking command, a lazily expired key, an evicted key, a bound
//! key deleted by its session's end), exactly the records the AOF writes,
//! in the same order, plus the tagged lock records (bindings, a line's
//! grant, shares, the fencing tokens, the session's end), in order.
//!
//! Eviction reads jemalloc's counters, so this binary uses jemalloc, as
//! the server binary does; its one test runs alone.

#[global_allocator]
static A: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use latchkey_server::config::Config;
use latchkey_server::effects::{Effect, LockRecord, Logged, Recorder};

/// The Command records and the Lock records a sink was given, each in
/// order.
fn split(tap: &Recorder) -> (Vec<Logged>, Vec<LockRecord>) {
    let (mut commands, mut locks) = (Vec::new(), Vec::new());
    for e in tap.records() {
        match e {
            Effect::Command(l) => commands.push(l),
            Effect::Lock(l) => locks.push(l),
            // PUBLISH for replicas only: never in the AOF these are
            // compared with.
            Effect::Replicated(_) => {}
        }
    }
    (commands, locks)
}

/// The commands of an AOF incremental file, each with its database.
fn aof_commands(path: &std::path::Path) -> Vec<Logged> {
    use latchkey_server::persist::aof::{read_command, Read};
    let bytes = std::fs::read(path).unwrap_or_default();
    let (mut pos, mut db, mut out) = (0, 0, Vec::new());
    while let Some(r) = read_command(&bytes, &mut pos) {
        match r {
            Read::Command(args) if args[0].eq_ignore_ascii_case(b"select") => {
                db = String::from_utf8_lossy(&args[1]).parse().unwrap();
            }
            Read::Command(args) => out.push((db, args)),
            Read::Annotation(_) => {}
            Read::Truncated { valid: at } | Read::Bad { at } => {
                panic!("{} unreadable at {at}", path.display())
            }
        }
    }
    out
}

fn int(v: V) -> u64 {
    match v {
        V::Int(n) => n as u64,
        v => panic!("not an integer: {v:?}"),
    }
}

/// A numeric INFO field.
fn info(c: &mut Conn, section: &str, name: &str) -> u64 {
    let V::Bulk(text) = c.cmd(&["INFO", section]) else {
        panic!("INFO replies a bulk string")
    };
    info_field(&String::from_utf8_lossy(&text), name)
        .trim()
        .parse()
        .unwrap()
}

fn bs(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

#[test]
fn a_sink_sees_what_the_aof_writes_and_the_lock_records() {
    let dir = TempDir::new("propagate");
    let h = start_with(Config {
        port: 0,
        dir: dir.path(),
        enable_debug_command: "yes".into(),
        ..Default::default()
    });
    let mut c = Conn::ready(h.addr);
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "yes"]), ok());
    eventually("the first AOF generation is written", || {
        info(&mut c, "persistence", "aof_rewrite_in_progress") == 0
            && info(&mut c, "persistence", "aof_rewrite_scheduled") == 0
    });
    let incr = dir
        .0
        .join("appendonlydir")
        .join("appendonly.aof.1.incr.aof");
    assert!(incr.exists());
    let tap = Recorder::default();
    h.shared.store.lock().attach_sink(Box::new(tap.clone()));

    // Client writes, in two databases; relative times made absolute.
    assert_eq!(c.cmd(&["SET", "a", "1"]), ok());
    assert_eq!(c.cmd(&["INCR", "a"]), V::Int(2));
    assert_eq!(c.cmd(&["EXPIRE", "a", "1000"]), V::Int(1));
    assert_eq!(c.cmd(&["SELECT", "1"]), ok());
    assert_eq!(c.cmd(&["SET", "one", "x"]), ok());
    assert_eq!(c.cmd(&["SELECT", "0"]), ok());
    // EXEC.
    assert_eq!(c.cmd(&["MULTI"]), ok());
    c.cmd(&["SET", "m", "a"]);
    c.cmd(&["APPEND", "m", "b"]);
    assert_eq!(c.cmd(&["EXEC"]), V::Arr(vec![ok(), V::Int(2)]));
    // A script, by its effects.
    let script = "redis.call('SET', KEYS[1], ARGV[1]); redis.call('INCR', KEYS[2]); return 1";
    assert_eq!(c.cmd(&["EVAL", script, "2", "sa", "sb", "v"]), V::Int(1));
    // A served blocking command.
    let mut waiter = Conn::ready(h.addr);
    waiter.send(&["BLPOP", "bl", "0"]);
    eventually("the waiter blocks", || {
        info(&mut c, "clients", "blocked_clients") == 1
    });
    assert_eq!(c.cmd(&["LPUSH", "bl", "v"]), V::Int(1));
    assert_eq!(waiter.reply(), V::Arr(vec![b("bl"), b("v")]));
    // A lazily expired key.
    assert_eq!(c.cmd(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]), ok());
    assert_eq!(c.cmd(&["SET", "e", "1", "PX", "10"]), ok());
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(c.cmd(&["GET", "e"]), V::Nil);
    assert_eq!(c.cmd(&["DEBUG", "SET-ACTIVE-EXPIRE", "1"]), ok());
    // An evicted key.
    let big = "x".repeat(4 << 20);
    assert_eq!(c.cmd(&["SET", "big", &big]), ok());
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]),
        ok()
    );
    let used = info(&mut c, "memory", "used_memory");
    let limit = (used - (2 << 20)).to_string();
    assert_eq!(c.cmd(&["CONFIG", "SET", "maxmemory", &limit]), ok());
    c.cmd(&["SET", "after", "1"]);
    assert_eq!(c.cmd(&["CONFIG", "SET", "maxmemory", "0"]), ok());
    assert!(info(&mut c, "stats", "evicted_keys") >= 1);
    assert_eq!(c.cmd(&["EXISTS", "big"]), V::Int(0));

    // Locks: a key bound to a session that ends; a line's grant; shares;
    // fencing tokens.
    let mut a = Conn::ready(h.addr);
    let mut bb = Conn::resp3(h.addr);
    let mut cc = Conn::resp3(h.addr);
    let ids: Vec<u64> = [&mut a, &mut bb, &mut cc]
        .into_iter()
        .map(|k| k.id() as u64)
        .collect();
    let _ = ids;
    // Sessions are named by their identity in lock records.
    let sid = |k: &mut Conn| -> u128 {
        match k.cmd(&["TPSESSION", "ID"]) {
            V::Bulk(b) => u128::from_str_radix(std::str::from_utf8(&b).unwrap(), 16).unwrap(),
            other => panic!("TPSESSION ID: {other:?}"),
        }
    };
    let (ia, ib, ic) = (sid(&mut a), sid(&mut bb), sid(&mut cc));
    let t_lk = int(a.cmd(&["SETTP", "lk", "va", "TOKEN"]));
    let t_q1 = int(bb.cmd(&["SETTP", "q1", "x", "TOKEN"]));
    assert_eq!(cc.cmd(&["SETTP", "q1", "y", "QUEUE"]), V::Int(0));
    assert_eq!(bb.cmd(&["TPRELEASE", "q1", "x"]), V::Int(1));
    let t_grant = cc.expect_acquired(true, "q1", "y");
    let t_r1 = int(bb.cmd(&["SETTP", "s", "r1", "SHARED", "TOKEN"]));
    let t_r2 = int(cc.cmd(&["SETTP", "s", "r2", "SHARED", "TOKEN"]));
    assert_eq!(bb.cmd(&["TPRELEASE", "s", "r1"]), V::Int(1));
    let t_f = int(bb.cmd(&["SETTP", "f", "vf", "PX", "100000", "TOKEN"]));
    let t = [t_lk, t_q1, t_grant, t_r1, t_r2, t_f];
    assert!(t.windows(2).all(|w| w[0] < w[1]), "{t:?}");
    drop(a);
    eventually("the session's end is published", || {
        split(&tap)
            .1
            .contains(&LockRecord::SessionClosed { sid: ia })
    });
    eventually("the AOF has the session's DEL", || {
        aof_commands(&incr).last() == Some(&(0, vec![bs("DEL"), bs("lk")]))
    });

    // Exactly what the AOF wrote, in order.
    let (sunk, locks) = split(&tap);
    assert_eq!(sunk, aof_commands(&incr));
    let cmd = |db: usize, s: &str| (db, s.split(' ').map(bs).collect::<Vec<_>>());
    let has = |want: &Logged| sunk.iter().position(|l| l == want);
    for want in [
        cmd(0, "SET a 1"),
        cmd(1, "SET one x"),
        cmd(0, "MULTI"),
        cmd(0, "APPEND m b"),
        cmd(0, "SET sa v"),
        cmd(0, "INCR sb"),
        cmd(0, "DEL e"),
        cmd(0, "DEL big"),
        cmd(0, "DEL lk"),
    ] {
        assert!(has(&want).is_some(), "{want:?} not in {sunk:?}");
    }
    assert!(sunk.iter().any(|(_, a)| a[0] == "PEXPIREAT" && a[1] == "a"));
    let push = has(&cmd(0, "LPUSH bl v")).expect("LPUSH");
    assert_eq!(sunk[push + 1], cmd(0, "LPOP bl"));
    // Nothing bound is in the log.
    for k in ["q1", "s", "f"] {
        assert!(!sunk
            .iter()
            .any(|(_, a)| a[0] != "TPRELEASE" && a[1..].contains(&bs(k))));
    }

    // The lock records, in order.
    let bound = |key: &str, sid, value: &str, expire_at, token| LockRecord::Bound {
        db: 0,
        key: bs(key),
        sid,
        value: bs(value),
        expire_at,
        token,
    };
    let share = |sid, value: &str, token| LockRecord::ShareAdded {
        db: 0,
        key: bs("s"),
        sid,
        permits: None,
        value: bs(value),
        token,
    };
    let unbound = |key: &str| LockRecord::Unbound {
        db: 0,
        key: bs(key),
    };
    let f_expire = match locks
        .iter()
        .find(|l| matches!(l, LockRecord::Bound { key, .. } if key == "f"))
    {
        Some(LockRecord::Bound { expire_at, .. }) => *expire_at,
        _ => None,
    };
    assert!(f_expire.is_some(), "{locks:?}");
    let owner = |sid| LockRecord::Owner {
        sid,
        user: bs("default"),
    };
    assert_eq!(
        locks,
        vec![
            // TPSESSION ID gave each identity out, bound to its user.
            owner(ia),
            owner(ib),
            owner(ic),
            bound("lk", ia, "va", None, t_lk),
            bound("q1", ib, "x", None, t_q1),
            // A place in the line travels too (a promoted replica keeps it).
            LockRecord::Queued {
                db: 0,
                key: bs("q1"),
                sid: ic,
                value: bs("y"),
                ttl_ms: None,
                share: None,
                first: false,
            },
            unbound("q1"),
            LockRecord::Granted {
                db: 0,
                key: bs("q1"),
                sid: ic,
            },
            bound("q1", ic, "y", None, t_grant),
            share(ib, "r1", t_r1),
            share(ic, "r2", t_r2),
            LockRecord::ShareReleased {
                db: 0,
                key: bs("s"),
                sid: ib,
                value: Some(bs("r1")),
            },
            bound("f", ib, "vf", f_expire, t_f),
            unbound("lk"),
            LockRecord::SessionClosed { sid: ia },
        ]
    );
    // The session's end: its hold's end, the key's DEL, then the end.
    let all = tap.records();
    let at = |e: &Effect| all.iter().position(|x| x == e).unwrap();
    let del = at(&Effect::Command(cmd(0, "DEL lk")));
    assert!(at(&Effect::Lock(unbound("lk"))) < del);
    assert!(del < at(&Effect::Lock(LockRecord::SessionClosed { sid: ia })));
    drop((bb, cc, waiter));
}
