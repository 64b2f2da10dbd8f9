//! The append-only file: the latchkey-server binary started with
//! `appendonly yes` keeps every acknowledged write across restarts and
//! kill -9 (with `appendfsync always`), replays MULTI/EXEC and scripts by
//! their effects, never brings back a SETTP lock, treats a cut-short tail
//! as `aof-load-truncated` says, and starts a new generation on
//! BGREWRITEAOF and on CONFIG SET appendonly yes. The round trips with a
//! real redis-server (its appendonlydir loaded here, ours there,
//! redis-check-aof) are in redis-compat.

mod common;

use std::net::TcpStream;
use std::time::Duration;

use common::*;

fn aof_dir(dir: &TempDir) -> std::path::PathBuf {
    dir.0.join("appendonlydir")
}

fn spawn(dir: &TempDir, extra: &[&str]) -> Proc {
    let mut args = vec![
        "--save",
        "",
        "--appendonly",
        "yes",
        "--enable-debug-command",
        "yes",
    ];
    args.extend_from_slice(extra);
    Proc::spawn(env!("CARGO_BIN_EXE_latchkey-server"), dir, &args)
}

fn started(p: &mut Proc) -> Option<std::process::ExitStatus> {
    p.started()
}

fn up(dir: &TempDir, extra: &[&str]) -> (Proc, Conn) {
    let mut p = spawn(dir, extra);
    assert!(started(&mut p).is_none(), "the server did not start");
    let c = Conn::ready(p.addr);
    (p, c)
}

#[test]
fn writes_survive_restarts_and_replay_by_their_effects() {
    let dir = TempDir::new("restart");
    let (p, mut c) = up(&dir, &[]);
    assert_eq!(c.cmd(&["SET", "a", "1"]), ok());
    assert_eq!(c.cmd(&["SET", "ttl", "v", "EX", "1000"]), ok());
    assert_eq!(c.cmd(&["SELECT", "2"]), ok());
    assert_eq!(c.cmd(&["RPUSH", "l", "x", "y"]), V::Int(2));
    assert_eq!(c.cmd(&["SELECT", "0"]), ok());
    // A script: its effects are logged, not the script.
    assert_eq!(
        c.cmd(&[
            "EVAL",
            "redis.call('SET', 'r', tostring(math.random())) return redis.call('INCR', 'n')",
            "0"
        ]),
        V::Int(1)
    );
    assert_eq!(c.cmd(&["SADD", "s", "a", "b", "c"]), V::Int(3));
    assert!(matches!(c.cmd(&["SPOP", "s"]), V::Bulk(_)));
    assert_eq!(c.cmd(&["MULTI"]), ok());
    assert_eq!(c.cmd(&["INCR", "n"]), V::Simple("QUEUED".into()));
    assert_eq!(c.cmd(&["SELECT", "3"]), V::Simple("QUEUED".into()));
    assert_eq!(c.cmd(&["SET", "in3", "x"]), V::Simple("QUEUED".into()));
    assert!(matches!(c.cmd(&["EXEC"]), V::Arr(_)));
    assert_eq!(c.cmd(&["SELECT", "0"]), ok());
    // A lock: never logged as live.
    let mut holder = Conn::ready(p.addr);
    assert_eq!(holder.cmd(&["SETTP", "lock", "me"]), V::Int(1));
    assert_eq!(holder.cmd(&["APPEND", "lock", "+"]), V::Int(3));
    let digest = c.cmd(&["DEBUG", "DIGEST-VALUE", "a", "ttl", "r", "n", "s"]);
    let ttl = c.cmd(&["PEXPIRETIME", "ttl"]);
    drop(c);
    drop(holder);
    p.kill9();

    let (p, mut c) = up(&dir, &[]);
    assert_eq!(
        c.cmd(&["DEBUG", "DIGEST-VALUE", "a", "ttl", "r", "n", "s"]),
        digest
    );
    assert_eq!(c.cmd(&["PEXPIRETIME", "ttl"]), ttl);
    assert_eq!(c.cmd(&["EXISTS", "lock"]), V::Int(0));
    assert_eq!(c.cmd(&["SELECT", "3"]), ok());
    assert_eq!(c.cmd(&["GET", "in3"]), b("x"));
    assert_eq!(c.cmd(&["SELECT", "2"]), ok());
    assert_eq!(
        c.cmd(&["LRANGE", "l", "0", "-1"]),
        V::Arr(vec![b("x"), b("y")])
    );
    // A new generation, its base written in the background: the same
    // data from the new base.
    save_delay(&mut c, "100000");
    assert_eq!(
        c.cmd(&["BGREWRITEAOF"]),
        V::Simple("Background append only file rewriting started".into())
    );
    assert_eq!(
        c.cmd(&["BGREWRITEAOF"]),
        V::Err("ERR Background append only file rewriting already in progress".into())
    );
    assert!(
        matches!(c.cmd(&["BGSAVE"]), V::Err(e) if e.starts_with("ERR An AOF log rewriting in progress"))
    );
    // Written while the base is: in the new incremental file.
    assert_eq!(c.cmd(&["SELECT", "0"]), ok());
    assert_eq!(c.cmd(&["SET", "during", "rewrite"]), ok());
    save_delay(&mut c, "0");
    eventually(
        "the rewrite ends",
        || matches!(c.cmd(&["INFO", "persistence"]), V::Bulk(b) if String::from_utf8_lossy(&b).contains("aof_rewrite_in_progress:0")),
    );
    let manifest = std::fs::read_to_string(aof_dir(&dir).join("appendonly.aof.manifest")).unwrap();
    assert!(manifest.contains("appendonly.aof.2.base.rdb"), "{manifest}");
    assert!(!aof_dir(&dir).join("appendonly.aof.1.incr.aof").exists());
    assert_eq!(c.cmd(&["SELECT", "0"]), ok());
    assert_eq!(c.cmd(&["SET", "after", "rewrite"]), ok());
    drop(c);
    p.kill9();
    let (_p, mut c) = up(&dir, &[]);
    assert_eq!(c.cmd(&["GET", "after"]), b("rewrite"));
    assert_eq!(c.cmd(&["GET", "during"]), b("rewrite"));
    assert_eq!(
        c.cmd(&["DEBUG", "DIGEST-VALUE", "a", "ttl", "r", "n", "s"]),
        digest
    );
}

#[test]
fn a_cut_short_tail_loads_or_stops_as_configured() {
    let dir = TempDir::new("truncated");
    let (p, mut c) = up(&dir, &[]);
    assert_eq!(c.cmd(&["SET", "a", "1"]), ok());
    assert_eq!(c.cmd(&["SET", "b", "2"]), ok());
    drop(c);
    p.kill9();
    let incr = aof_dir(&dir).join("appendonly.aof.1.incr.aof");
    let bytes = std::fs::read(&incr).unwrap();
    std::fs::write(&incr, &bytes[..bytes.len() - 3]).unwrap();
    // aof-load-truncated no: refuses to start.
    let mut p = spawn(&dir, &["--aof-load-truncated", "no"]);
    let st = started(&mut p).expect("refuses to start");
    assert!(!st.success());
    // yes (the default): the last command is dropped, the file cut there.
    let (_p, mut c) = up(&dir, &[]);
    assert_eq!(c.cmd(&["GET", "a"]), b("1"));
    assert_eq!(c.cmd(&["EXISTS", "b"]), V::Int(0));
    assert_eq!(c.cmd(&["SET", "c", "3"]), ok());
    // Bad content in the middle stops start-up.
    drop(c);
    drop(_p);
    let mut bytes = std::fs::read(&incr).unwrap();
    bytes.splice(0..0, b"garbage\r\n".iter().copied());
    std::fs::write(&incr, &bytes).unwrap();
    let mut p = spawn(&dir, &[]);
    assert!(!started(&mut p).expect("refuses to start").success());
}

/// Slows background saves and rewrites (Redis's testing knob, µs per key).
fn save_delay(c: &mut Conn, us: &str) {
    assert_eq!(c.cmd(&["CONFIG", "SET", "rdb-key-save-delay", us]), ok());
}

fn info_persistence(c: &mut Conn) -> String {
    match c.cmd(&["INFO", "persistence"]) {
        V::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        v => panic!("{v:?}"),
    }
}

/// Waits until no AOF rewrite runs or is scheduled.
fn wait_rewrite(c: &mut Conn) {
    eventually("the rewrite ends", || {
        let info = info_persistence(c);
        info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0")
    });
}

/// CONFIG SET appendonly yes writes the data as it is into a base file in
/// the background while logging starts at once (SHUTDOWN is refused until
/// the base is written, as Redis's "Writing initial AOF"); after a BGSAVE
/// it is scheduled; no stops logging.
#[test]
fn turning_the_aof_on_and_off_at_runtime() {
    let dir = TempDir::new("runtime");
    let mut p = Proc::spawn(
        env!("CARGO_BIN_EXE_latchkey-server"),
        &dir,
        &["--save", "", "--enable-debug-command", "yes"],
    );
    assert!(started(&mut p).is_none());
    let mut c = Conn::ready(p.addr);
    assert_eq!(c.cmd(&["SET", "before", "1"]), ok());
    assert_eq!(c.cmd(&["DEBUG", "POPULATE", "100", "k"]), ok());
    save_delay(&mut c, "20000");
    // A BGSAVE runs: the first base waits for it.
    assert_eq!(
        c.cmd(&["BGSAVE"]),
        V::Simple("Background saving started".into())
    );
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "yes"]), ok());
    let info = info_persistence(&mut c);
    assert!(info.contains("aof_enabled:1"), "{info}");
    assert!(info.contains("aof_rewrite_scheduled:1"), "{info}");
    assert!(info.contains("aof_rewrite_in_progress:0"), "{info}");
    // Written now: in the base when it starts.
    assert_eq!(c.cmd(&["SET", "waiting", "1"]), ok());
    save_delay(&mut c, "5000");
    eventually("the base starts", || {
        info_persistence(&mut c).contains("aof_rewrite_in_progress:1")
    });
    // Written while the base is: logged already.
    assert_eq!(c.cmd(&["SET", "during", "2"]), ok());
    assert_eq!(
        c.cmd(&["SHUTDOWN"]),
        V::Err("ERR Errors trying to SHUTDOWN. Check logs.".into())
    );
    assert!(aof_dir(&dir).join("temp-appendonly.aof.incr").exists());
    save_delay(&mut c, "0");
    wait_rewrite(&mut c);
    assert!(!aof_dir(&dir).join("temp-appendonly.aof.incr").exists());
    let manifest = std::fs::read_to_string(aof_dir(&dir).join("appendonly.aof.manifest")).unwrap();
    assert_eq!(
        manifest,
        "file appendonly.aof.1.base.rdb seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n"
    );
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "appendonly"]),
        V::Arr(vec![b("appendonly"), b("yes")])
    );
    assert_eq!(c.cmd(&["SET", "logged", "3"]), ok());
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "no"]), ok());
    assert_eq!(c.cmd(&["SET", "after", "3"]), ok());
    drop(c);
    p.kill9();
    let (_p, mut c) = up(&dir, &[]);
    assert_eq!(
        c.cmd(&["MGET", "before", "waiting", "during", "logged", "after"]),
        V::Arr(vec![b("1"), b("1"), b("2"), b("3"), V::Nil])
    );
    assert_eq!(c.cmd(&["DBSIZE"]), V::Int(104));
}

/// `aof-use-rdb-preamble no`: the rewrite writes the base as commands
/// (`.base.aof`), which a restart loads with every type, TTLs, several
/// databases and function libraries; a Redis 6 AOF (one file in `dir`,
/// commands after an RDB preamble) is upgraded to the multi-part layout
/// at start-up, as Redis 7 does.
#[test]
fn a_base_in_commands_and_a_redis_6_file_load() {
    let dir = TempDir::new("aofbase");
    let (p, mut c) = up(&dir, &["--aof-use-rdb-preamble", "no"]);
    assert_eq!(c.cmd(&["SET", "s", "v"]), ok());
    assert_eq!(c.cmd(&["SET", "n", "12345"]), ok());
    assert_eq!(c.cmd(&["PEXPIRE", "n", "1000000"]), V::Int(1));
    assert_eq!(c.cmd(&["DEBUG", "POPULATE", "300", "pop"]), ok());
    assert_eq!(c.cmd(&["SELECT", "5"]), ok());
    let members: Vec<String> = (0..150).map(|i| format!("m{i}")).collect();
    let mut args = vec!["RPUSH", "list"];
    args.extend(members.iter().map(|m| m.as_str()));
    assert_eq!(c.cmd(&args), V::Int(150));
    args[0] = "SADD";
    args[1] = "set";
    assert_eq!(c.cmd(&args), V::Int(150));
    assert_eq!(c.cmd(&["SADD", "ints", "1", "2", "-3"]), V::Int(3));
    let mut z = vec!["ZADD".to_string(), "zset".to_string()];
    let mut h = vec!["HSET".to_string(), "hash".to_string()];
    for (i, m) in members.iter().enumerate() {
        z.extend([format!("{}", i as f64 / 3.0), m.clone()]);
        h.extend([m.clone(), format!("v{i}")]);
    }
    z.extend(["inf".to_string(), "top".to_string()]);
    let z: Vec<&str> = z.iter().map(|s| s.as_str()).collect();
    let h: Vec<&str> = h.iter().map(|s| s.as_str()).collect();
    assert_eq!(c.cmd(&z), V::Int(151));
    assert_eq!(c.cmd(&h), V::Int(150));
    assert_eq!(c.cmd(&["HSET", "small", "f", "v"]), V::Int(1));
    assert_eq!(
        c.cmd(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=lib\nredis.register_function('f', function() return 7 end)"
        ]),
        b("lib")
    );
    let digest = c.cmd(&["DEBUG", "DIGEST"]);
    let mut holder = Conn::ready(p.addr);
    assert_eq!(holder.cmd(&["SETTP", "lock", "me"]), V::Int(1));
    assert_eq!(
        c.cmd(&["BGREWRITEAOF"]),
        V::Simple("Background append only file rewriting started".into())
    );
    wait_rewrite(&mut c);
    let base = aof_dir(&dir).join("appendonly.aof.2.base.aof");
    let text = std::fs::read(&base).unwrap();
    // The fencing counter (an annotation: Redis skips `#` lines), then
    // the function libraries.
    assert!(text.starts_with(b"#lk-fence-token:"));
    let nl = text.iter().position(|&c| c == b'\n').unwrap() + 1;
    assert!(text[nl..].starts_with(b"*3\r\n$8\r\nFUNCTION\r\n$4\r\nLOAD\r\n"));
    assert!(!text.windows(4).any(|w| w == b"lock"), "a lock in the base");
    drop(c);
    drop(holder);
    p.kill9();
    let (p, mut c) = up(&dir, &[]);
    assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest);
    assert_eq!(c.cmd(&["FCALL", "f", "0"]), V::Int(7));
    assert!(matches!(c.cmd(&["PTTL", "n"]), V::Int(t) if t > 900_000));
    drop(c);
    p.kill9();

    // A Redis 6 file: an RDB preamble, then commands.
    let old = TempDir::new("aofv6");
    let mut bytes = Vec::new();
    {
        let (p, mut c) = up(&dir, &["--aof-use-rdb-preamble", "yes"]);
        assert_eq!(
            c.cmd(&["BGREWRITEAOF"]),
            V::Simple("Background append only file rewriting started".into())
        );
        wait_rewrite(&mut c);
        bytes.extend(std::fs::read(aof_dir(&dir).join("appendonly.aof.3.base.rdb")).unwrap());
        drop(c);
        p.kill9();
    }
    // Annotations are skipped (Redis 7's `#TS:`), and the fencing
    // counter's raises the tokens.
    bytes.extend_from_slice(b"#TS:1764150000\r\n#lk-fence-token:5000000000000000000\r\n");
    bytes.extend_from_slice(
        b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*3\r\n$3\r\nSET\r\n$5\r\nafter\r\n$1\r\n1\r\n",
    );
    std::fs::write(old.0.join("appendonly.aof"), &bytes).unwrap();
    let (_p, mut c) = up(&old, &[]);
    assert_eq!(c.cmd(&["GET", "after"]), b("1"));
    assert_eq!(
        c.cmd(&["SETTP", "lk", "v", "TOKEN"]),
        V::Int(5_000_000_000_000_000_001)
    );
    assert_eq!(c.cmd(&["DEL", "lk"]), V::Int(1));
    assert_eq!(c.cmd(&["DEL", "after"]), V::Int(1));
    assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest);
    let manifest = std::fs::read_to_string(aof_dir(&old).join("appendonly.aof.manifest")).unwrap();
    assert_eq!(
        manifest,
        "file appendonly.aof seq 1 type b\nfile appendonly.aof.2.incr.aof seq 2 type i\n"
    );
    assert!(!old.0.join("appendonly.aof").exists());
}

/// appendfsync always: a writer pipelines INCRs and SETs while the server
/// is killed with SIGKILL at random moments; after each restart every
/// acknowledged write is there (the counter is at least the acknowledged
/// count, and at most what was sent).
#[test]
fn kill_9_loses_no_acknowledged_write_with_always() {
    let dir = TempDir::new("crash");
    let mut acked: i64 = 0;
    let mut sent: i64 = 0;
    let mut seed = 0x5eed_1234_abcd_ef01u64;
    for _round in 0..4 {
        let (p, c) = up(&dir, &["--appendfsync", "always"]);
        drop(c);
        let addr = p.addr;
        let kill_after = {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            Duration::from_millis(100 + seed % 300)
        };
        let writer = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut acked = 0i64;
            let mut sent = 0i64;
            let mut buf = vec![0u8; 4096];
            let mut pending = Vec::new();
            for _ in 0..100_000 {
                // Pipelines of 8: INCR counter, SET last <n>.
                let mut req = Vec::new();
                for _ in 0..8 {
                    req.extend_from_slice(b"*2\r\n$4\r\nINCR\r\n$7\r\ncounter\r\n");
                }
                if s.write_all(&req).is_err() {
                    break;
                }
                sent += 8;
                let mut got = 0;
                while got < 8 {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return (acked, sent),
                        Ok(n) => {
                            pending.extend_from_slice(&buf[..n]);
                            while let Some(end) = pending.windows(2).position(|w| w == b"\r\n") {
                                assert_eq!(
                                    pending[0],
                                    b':',
                                    "{:?}",
                                    String::from_utf8_lossy(&pending)
                                );
                                pending.drain(..end + 2);
                                got += 1;
                                acked += 1;
                            }
                        }
                    }
                }
            }
            (acked, sent)
        });
        // A new generation while the writer waits on fsyncs.
        std::thread::sleep(kill_after / 2);
        let mut admin = Conn::ready(addr);
        assert_eq!(
            admin.cmd(&["BGREWRITEAOF"]),
            V::Simple("Background append only file rewriting started".into())
        );
        std::thread::sleep(kill_after / 2);
        p.kill9();
        let (a, s) = writer.join().unwrap();
        acked += a;
        sent += s;
        let (_p, mut c) = up(&dir, &["--appendfsync", "always"]);
        let V::Bulk(v) = c.cmd(&["GET", "counter"]) else {
            if acked == 0 {
                continue;
            }
            panic!("the counter is gone after {acked} acknowledged INCRs");
        };
        let n: i64 = String::from_utf8_lossy(&v).parse().unwrap();
        assert!(n >= acked, "{n} < {acked} acknowledged");
        assert!(n <= sent, "{n} > {sent} sent");
        // The next round counts from what is there.
        acked = n;
        sent = n;
        drop(c);
    }
    assert!(acked > 0, "no write was acknowledged");
}

/// A blocked BLPOP served by another client's push is logged as the pop
/// it made; an expired key's deletion is logged; DEBUG LOADAOF reloads
/// the same data.
#[test]
fn served_waits_and_expiries_are_logged() {
    let dir = TempDir::new("served");
    let (p, mut c) = up(&dir, &[]);
    let mut waiter = Conn::ready(p.addr);
    waiter.send(&["BLPOP", "empty", "q", "0"]);
    eventually(
        "the waiter blocks",
        || matches!(c.cmd(&["CLIENT", "LIST"]), V::Bulk(b) if String::from_utf8_lossy(&b).contains("cmd=blpop")),
    );
    assert_eq!(c.cmd(&["RPUSH", "q", "a", "b"]), V::Int(2));
    assert_eq!(waiter.reply(), V::Arr(vec![b("q"), b("a")]));
    assert_eq!(c.cmd(&["SET", "short", "v", "PX", "30"]), ok());
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(c.cmd(&["EXISTS", "short"]), V::Int(0));
    let digest = c.cmd(&["DEBUG", "DIGEST"]);
    assert_eq!(c.cmd(&["DEBUG", "LOADAOF"]), ok());
    assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest);
    let incr = std::fs::read(aof_dir(&dir).join("appendonly.aof.1.incr.aof")).unwrap();
    let text = String::from_utf8_lossy(&incr);
    assert!(text.contains("LPOP\r\n$1\r\nq"), "{text}");
    assert!(text.contains("DEL\r\n$5\r\nshort"), "{text}");
    drop(c);
    drop(waiter);
    p.kill9();
    let (_p, mut c) = up(&dir, &[]);
    assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest);
    assert_eq!(c.cmd(&["LRANGE", "q", "0", "-1"]), V::Arr(vec![b("b")]));
}

/// Compare-and-set forms that wrote are logged as their effect: SET
/// without its condition, DELEX and DELIFEQ as DEL; ones whose condition
/// failed are not logged. The replay gives the same data.
#[test]
fn compare_and_set_writes_are_logged_as_their_effect() {
    let dir = TempDir::new("cas");
    let (p, mut c) = up(&dir, &[]);
    assert_eq!(c.cmd(&["SET", "a", "1"]), ok());
    assert_eq!(c.cmd(&["SET", "a", "2", "IFEQ", "1", "EX", "1000"]), ok());
    assert_eq!(c.cmd(&["SET", "a", "3", "IFEQ", "1"]), V::Nil);
    assert_eq!(c.cmd(&["SET", "b", "x", "IFNE", "y"]), ok());
    assert_eq!(c.cmd(&["SET", "d", "gone"]), ok());
    assert_eq!(c.cmd(&["DELEX", "d", "IFEQ", "gone"]), V::Int(1));
    assert_eq!(c.cmd(&["DELEX", "b", "IFEQ", "nope"]), V::Int(0));
    assert_eq!(c.cmd(&["SET", "e", "v"]), ok());
    assert_eq!(c.cmd(&["DELIFEQ", "e", "v"]), V::Int(1));
    let digest = c.cmd(&["DEBUG", "DIGEST"]);
    let incr = std::fs::read(aof_dir(&dir).join("appendonly.aof.1.incr.aof")).unwrap();
    let text = String::from_utf8_lossy(&incr);
    for gone in ["IFEQ", "IFNE", "DELEX", "DELIFEQ", "nope"] {
        assert!(!text.contains(gone), "{gone} in {text}");
    }
    assert!(text.contains("DEL\r\n$1\r\nd\r\n"), "{text}");
    assert!(text.contains("DEL\r\n$1\r\ne\r\n"), "{text}");
    assert!(text.contains("$1\r\nb\r\n$1\r\nx\r\n"), "{text}");
    drop(c);
    p.kill9();
    let (_p, mut c) = up(&dir, &[]);
    assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest);
    assert_eq!(c.cmd(&["GET", "a"]), b("2"));
    assert!(matches!(c.cmd(&["TTL", "a"]), V::Int(t) if t > 990));
    assert_eq!(c.cmd(&["EXISTS", "d", "e"]), V::Int(0));
}

/// kill -9 while BGREWRITEAOF writes its base: the manifest already lists
/// the new incremental file after the old ones, so nothing is lost.
#[test]
fn kill_9_during_a_rewrite_loses_nothing() {
    let dir = TempDir::new("midrewrite");
    let (p, mut c) = up(&dir, &[]);
    assert_eq!(c.cmd(&["DEBUG", "POPULATE", "5000"]), ok());
    assert_eq!(c.cmd(&["SET", "before", "1"]), ok());
    save_delay(&mut c, "1000");
    assert_eq!(
        c.cmd(&["BGREWRITEAOF"]),
        V::Simple("Background append only file rewriting started".into())
    );
    assert_eq!(c.cmd(&["SET", "during", "2"]), ok());
    assert_eq!(c.cmd(&["DEL", "key:7"]), V::Int(1));
    let info = c.cmd(&["INFO", "persistence"]);
    assert!(
        matches!(&info, V::Bulk(b) if String::from_utf8_lossy(b).contains("aof_rewrite_in_progress:1")),
        "{info:?}"
    );
    let manifest = std::fs::read_to_string(aof_dir(&dir).join("appendonly.aof.manifest")).unwrap();
    assert!(manifest.contains("appendonly.aof.2.incr.aof"), "{manifest}");
    assert!(
        !manifest.contains("appendonly.aof.2.base.rdb"),
        "{manifest}"
    );
    drop(c);
    p.kill9();
    let (_p, mut c) = up(&dir, &[]);
    assert_eq!(
        c.cmd(&["MGET", "before", "during", "key:7"]),
        V::Arr(vec![b("1"), b("2"), V::Nil])
    );
    assert_eq!(c.cmd(&["DBSIZE"]), V::Int(5001));
}

/// The AOF rewrites itself once it grew by auto-aof-rewrite-percentage
/// over its size after the last rewrite and is over the minimum size.
#[test]
fn automatic_rewrite_on_growth() {
    let dir = TempDir::new("auto");
    let (_p, mut c) = up(&dir, &[]);
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "auto-aof-rewrite-min-size", "4kb"]),
        ok()
    );
    let info = |c: &mut Conn| match c.cmd(&["INFO", "persistence"]) {
        V::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        v => panic!("{v:?}"),
    };
    assert!(info(&mut c).contains("aof_rewrites:0"));
    for i in 0..200 {
        assert_eq!(
            c.cmd(&["SET", &format!("k{i}"), "some value to grow the log"]),
            ok()
        );
    }
    eventually("an automatic rewrite", || {
        info(&mut c).contains("aof_rewrites:1")
    });
    let text = info(&mut c);
    assert!(text.contains("aof_enabled:1"), "{text}");
    let manifest = std::fs::read_to_string(aof_dir(&dir).join("appendonly.aof.manifest")).unwrap();
    assert!(manifest.contains("appendonly.aof.2.base.rdb"), "{manifest}");
    assert_eq!(c.cmd(&["DBSIZE"]), V::Int(200));
}

/// Logging moves to a new incremental file that is /dev/full (a slow
/// BGREWRITEAOF keeps it there): every write to it fails with ENOSPC.
fn log_to_a_full_disk(dir: &TempDir, c: &mut Conn) {
    std::os::unix::fs::symlink("/dev/full", aof_dir(dir).join("appendonly.aof.2.incr.aof"))
        .unwrap();
    save_delay(c, "100000");
    assert_eq!(
        c.cmd(&["BGREWRITEAOF"]),
        V::Simple("Background append only file rewriting started".into())
    );
}

/// A write to the AOF that fails (the next incremental file is
/// /dev/full here: ENOSPC) refuses writes and PING with Redis's MISCONF
/// text while reads go on; turning the AOF off and on again (a new
/// generation on real files) lets writes through, and nothing
/// acknowledged is lost.
#[test]
fn aof_write_errors_refuse_writes_until_they_stop() {
    let dir = TempDir::new("enospc");
    let (_p, mut c) = up(&dir, &[]);
    assert_eq!(c.cmd(&["SET", "a", "1"]), ok());
    log_to_a_full_disk(&dir, &mut c);
    // This write's log cannot be written: refused from the next one on.
    let _ = c.cmd(&["SET", "b", "2"]);
    let misconf = |v: V| matches!(&v, V::Err(e) if e == "MISCONF Errors writing to the AOF file: No space left on device");
    assert!(misconf(c.cmd(&["SET", "c", "3"])));
    assert!(misconf(c.cmd(&["PING"])));
    assert_eq!(c.cmd(&["GET", "a"]), b("1"));
    let info = match c.cmd(&["INFO", "persistence"]) {
        V::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        v => panic!("{v:?}"),
    };
    assert!(info.contains("aof_last_write_status:err"), "{info}");
    save_delay(&mut c, "0");
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "no"]), ok());
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "yes"]), ok());
    wait_rewrite(&mut c);
    assert_eq!(c.cmd(&["SET", "d", "4"]), ok());
    assert_eq!(c.cmd(&["PING"]), V::Simple("PONG".into()));
    drop(c);
    drop(_p);
    let (_p, mut c) = up(&dir, &[]);
    assert_eq!(c.cmd(&["GET", "a"]), b("1"));
    assert_eq!(c.cmd(&["GET", "d"]), b("4"));
}

/// With `appendfsync always` a write whose log cannot reach the file
/// (ENOSPC) gets no reply: it is not durable. Other writers get Redis's
/// MISCONF; turning the AOF off releases the waiting reply (the write
/// ran, only its log is gone), as then nothing more is promised.
#[test]
fn always_holds_replies_while_the_aof_cannot_be_written() {
    let dir = TempDir::new("enospc-always");
    let (p, mut c) = up(&dir, &["--appendfsync", "always"]);
    assert_eq!(c.cmd(&["SET", "a", "1"]), ok());
    log_to_a_full_disk(&dir, &mut c);
    let mut w = Conn::ready(p.addr);
    w.send(&["SET", "b", "2"]);
    assert!(w.frame_within(Duration::from_millis(500)).is_none());
    // A write that runs before the failure is seen waits too: each try
    // on a connection of its own.
    eventually("writes are refused", || {
        let mut t = Conn::ready(p.addr);
        t.send(&["SET", "c", "3"]);
        matches!(t.frame_within(Duration::from_millis(300)), Some(V::Err(e)) if e == "MISCONF Errors writing to the AOF file: No space left on device")
    });
    // Reads and INFO answer meanwhile.
    assert_eq!(c.cmd(&["GET", "a"]), b("1"));
    assert!(info_persistence(&mut c).contains("aof_last_write_status:err"));
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "no"]), ok());
    assert_eq!(w.frame(), ok());
    assert_eq!(c.cmd(&["SET", "d", "4"]), ok());
}

/// A command that reads or writes a bound key and changes plain ones
/// (COPY from a held lock, BITOP over it, MSETNX failing on it) logs the
/// plain keys by what they hold, so the replay has them without the lock.
#[test]
fn commands_mixing_bound_and_plain_keys_replay_without_the_lock() {
    let dir = TempDir::new("mixed");
    let (p, mut c) = up(&dir, &[]);
    let mut holder = Conn::ready(p.addr);
    assert_eq!(holder.cmd(&["SETTP", "lock", "abc"]), V::Int(1));
    assert_eq!(c.cmd(&["COPY", "lock", "copied"]), V::Int(1));
    assert_eq!(c.cmd(&["PEXPIRE", "copied", "1000000"]), V::Int(1));
    assert_eq!(
        c.cmd(&["BITOP", "OR", "ored", "lock", "nothing"]),
        V::Int(3)
    );
    assert_eq!(c.cmd(&["SET", "gone", "x"]), ok());
    assert_eq!(c.cmd(&["RPUSH", "list", "a"]), V::Int(1));
    assert_eq!(
        c.cmd(&[
            "EVAL",
            "redis.call('APPEND', KEYS[1], 'd') return redis.call('DEL', KEYS[2])",
            "2",
            "lock",
            "gone"
        ]),
        V::Int(1)
    );
    assert_eq!(holder.cmd(&["GET", "lock"]), b("abcd"));
    drop(c);
    p.kill9();
    drop(holder);
    let (_p, mut c) = up(&dir, &[]);
    assert_eq!(
        c.cmd(&["MGET", "lock", "copied", "ored", "gone"]),
        V::Arr(vec![V::Nil, b("abc"), b("abc"), V::Nil])
    );
    assert!(matches!(c.cmd(&["PTTL", "copied"]), V::Int(t) if t > 900_000));
    assert_eq!(c.cmd(&["LRANGE", "list", "0", "-1"]), V::Arr(vec![b("a")]));
}

/// WAITAOF (Redis 7.2, https://redis.io/docs/latest/commands/waitaof/):
/// [local fsyncs, replicas] of the caller's writes. With `everysec` it
/// waits for the next fsync; with `no` nothing is ever fsynced after a
/// write, so it ends at its timeout with 0 (as Redis's own test
/// "WAITAOF local copy before fsync" shows); with `always` it answers at
/// once. A wait for replicas (none yet) ends at its timeout, by CLIENT
/// UNBLOCK, or with an error when the AOF is turned off under it.
#[test]
fn waitaof_answers_after_the_fsync_of_the_callers_writes() {
    let dir = TempDir::new("waitaof");
    let (p, mut c) = up(&dir, &[]);
    let arr = |a: i64, b: i64| V::Arr(vec![V::Int(a), V::Int(b)]);
    // Nothing written yet by this client: fsynced already.
    assert_eq!(c.cmd(&["WAITAOF", "1", "0", "0"]), arr(1, 0));
    // everysec: the write and the wait in one pipeline.
    c.pipeline(&[&["SET", "k", "1"], &["WAITAOF", "1", "0", "0"]]);
    assert_eq!(c.frame(), ok());
    assert_eq!(c.frame_within(Duration::from_secs(5)), Some(arr(1, 0)));
    // no: never fsynced, so the timeout answers.
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendfsync", "no"]), ok());
    assert_eq!(c.cmd(&["SET", "k", "2"]), ok());
    assert_eq!(c.cmd(&["WAITAOF", "1", "0", "100"]), arr(0, 0));
    // Inside MULTI nothing blocks: the counts as they are.
    assert_eq!(c.cmd(&["MULTI"]), ok());
    assert_eq!(
        c.cmd(&["WAITAOF", "1", "0", "0"]),
        V::Simple("QUEUED".into())
    );
    assert_eq!(c.cmd(&["EXEC"]), V::Arr(vec![arr(0, 0)]));
    // always: fsynced before the reply of the write.
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendfsync", "always"]), ok());
    assert_eq!(c.cmd(&["SET", "k", "3"]), ok());
    assert_eq!(c.cmd(&["WAITAOF", "1", "0", "0"]), arr(1, 0));
    // A replica that never comes: blocked (it counts in blocked_clients)
    // until CLIENT UNBLOCK, which answers the counts.
    let mut w = Conn::ready(p.addr);
    let id = match w.cmd(&["CLIENT", "ID"]) {
        V::Int(i) => i.to_string(),
        other => panic!("{other:?}"),
    };
    w.send(&["WAITAOF", "0", "1", "0"]);
    eventually(
        "WAITAOF blocks",
        || matches!(c.cmd(&["INFO", "clients"]), V::Bulk(b) if info_field(&String::from_utf8_lossy(&b), "blocked_clients") == "1"),
    );
    assert_eq!(c.cmd(&["CLIENT", "UNBLOCK", &id]), V::Int(1));
    assert_eq!(w.frame(), arr(1, 0));
    // Its timeout answers the same way.
    assert_eq!(w.cmd(&["WAITAOF", "1", "1", "50"]), arr(1, 0));
    // The AOF turned off under a wait for the local fsync: an error.
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendfsync", "no"]), ok());
    assert_eq!(w.cmd(&["SET", "k", "4"]), ok());
    w.send(&["WAITAOF", "1", "0", "0"]);
    assert_eq!(w.frame_within(Duration::from_millis(200)), None);
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "no"]), ok());
    let aof_off = "ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.";
    assert_eq!(
        w.frame_within(Duration::from_secs(5)),
        Some(V::Err(aof_off.into()))
    );
    assert_eq!(w.cmd(&["WAITAOF", "1", "0", "0"]), V::Err(aof_off.into()));
    assert_eq!(w.cmd(&["WAITAOF", "0", "0", "0"]), arr(0, 0));
    drop(p);
}
