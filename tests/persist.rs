//! RDB snapshots: SAVE and DEBUG RELOAD keep every type, TTLs and function
//! libraries (DEBUG DIGEST-VALUE equal before and after), drop keys bound
//! by SETTP; the server binary loads dir/dbfilename at start-up and
//! refuses to start over a file it cannot read. The round trips with a
//! real redis-server (its dump loaded here, ours loaded there, the same
//! DEBUG DIGEST, redis-check-rdb) are in redis-compat.

mod common;

use std::time::Duration;

use common::*;
use latchkey_server::config::Config;

fn start_in(dir: &TempDir) -> latchkey_server::runtime::ServerHandle {
    start_with(Config {
        port: 0,
        enable_debug_command: "yes".into(),
        // These tests move `dir` with CONFIG SET.
        enable_protected_configs: "yes".into(),
        dir: dir.path(),
        ..Default::default()
    })
}

/// One key of every type and encoding, some with TTLs.
fn fill(c: &mut Conn) -> Vec<&'static str> {
    let big = "x".repeat(3000);
    let mut cmds: Vec<Vec<String>> = vec![
        vec!["SET".into(), "s".into(), "hello".into()],
        vec!["SET".into(), "n".into(), "-12345".into()],
        vec!["SET".into(), "big".into(), big],
        vec![
            "SET".into(),
            "ttl".into(),
            "v".into(),
            "EX".into(),
            "1000".into(),
        ],
        vec![
            "RPUSH".into(),
            "l".into(),
            "a".into(),
            "1".into(),
            "".into(),
        ],
        vec![
            "SADD".into(),
            "ints".into(),
            "1".into(),
            "-70000".into(),
            "9000000000".into(),
        ],
        vec!["SADD".into(), "strs".into(), "a".into(), "b".into()],
        vec![
            "HSET".into(),
            "h".into(),
            "f".into(),
            "v".into(),
            "n".into(),
            "7".into(),
        ],
        vec![
            "ZADD".into(),
            "z".into(),
            "0.1".into(),
            "a".into(),
            "inf".into(),
            "b".into(),
        ],
    ];
    for i in 0..300 {
        cmds.push(vec!["RPUSH".into(), "bl".into(), format!("element-{i}")]);
        cmds.push(vec!["SADD".into(), "bs".into(), format!("m{i}")]);
        cmds.push(vec![
            "HSET".into(),
            "bh".into(),
            format!("f{i}"),
            format!("v{i}"),
        ]);
        cmds.push(vec![
            "ZADD".into(),
            "bz".into(),
            format!("{i}.25"),
            format!("m{i}"),
        ]);
    }
    cmds.push(vec!["PEXPIRE".into(), "bz".into(), "5000000".into()]);
    for cmd in &cmds {
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        assert!(!matches!(c.cmd(&args), V::Err(_)), "{cmd:?}");
    }
    vec![
        "s", "n", "big", "ttl", "l", "ints", "strs", "h", "z", "bl", "bs", "bh", "bz",
    ]
}

fn digests(c: &mut Conn, keys: &[&str]) -> V {
    let mut args = vec!["DEBUG", "DIGEST-VALUE"];
    args.extend_from_slice(keys);
    c.cmd(&args)
}

#[test]
fn save_and_reload_keep_every_type_and_drop_bound_keys() {
    let dir = TempDir::new("reload");
    let h = start_in(&dir);
    let mut c = Conn::ready(h.addr);
    let keys = fill(&mut c);
    assert_eq!(
        c.cmd(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=lib\nredis.register_function('one', function() return 1 end)"
        ]),
        b("lib")
    );
    let mut holder = Conn::ready(h.addr);
    assert_eq!(holder.cmd(&["SETTP", "lock", "me"]), V::Int(1));
    let before = digests(&mut c, &keys);
    let V::Arr(ref each) = before else {
        panic!("{before:?}")
    };
    assert!(each.iter().all(|d| *d != V::Simple("0".repeat(40))));

    assert_eq!(c.cmd(&["SAVE"]), ok());
    assert!(dir.0.join("dump.rdb").is_file());
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]), ok());
    assert_eq!(digests(&mut c, &keys), before);
    assert_eq!(c.cmd(&["EXISTS", "lock"]), V::Int(0));
    assert_eq!(c.cmd(&["FCALL", "one", "0"]), V::Int(1));
    assert!(matches!(c.cmd(&["TTL", "ttl"]), V::Int(t) if t > 990));
    assert_eq!(c.cmd(&["DBSIZE"]), V::Int(keys.len() as i64));

    // NOSAVE loads the file as it is; MERGE lets it overwrite.
    assert_eq!(c.cmd(&["SET", "s", "changed"]), ok());
    assert_eq!(c.cmd(&["DEBUG", "RELOAD", "NOSAVE"]), ok());
    assert_eq!(c.cmd(&["GET", "s"]), b("hello"));
    assert_eq!(c.cmd(&["SET", "s", "changed"]), ok());
    assert!(matches!(
        c.cmd(&["DEBUG", "RELOAD", "NOSAVE", "NOFLUSH"]),
        V::Err(_)
    ));
    assert_eq!(
        c.cmd(&["DEBUG", "RELOAD", "NOSAVE", "NOFLUSH", "MERGE"]),
        ok()
    );
    assert_eq!(c.cmd(&["GET", "s"]), b("hello"));
    assert!(
        matches!(c.cmd(&["DEBUG", "RELOAD", "BOGUS"]), V::Err(e) if e.contains("only supports"))
    );
}

fn spawn(dir: &TempDir) -> Proc {
    spawn_with(dir, &["--save", ""])
}

fn spawn_with(dir: &TempDir, extra: &[&str]) -> Proc {
    let mut args = vec!["--enable-debug-command", "yes"];
    args.extend_from_slice(extra);
    Proc::spawn(env!("CARGO_BIN_EXE_latchkey-server"), dir, &args)
}

fn exit_or_listening(p: &mut Proc) -> Option<std::process::ExitStatus> {
    p.started()
}

#[test]
fn start_up_loads_the_snapshot_and_refuses_a_corrupt_one() {
    let dir = TempDir::new("startup");
    let (keys, before) = {
        let h = start_in(&dir);
        let mut c = Conn::ready(h.addr);
        let keys = fill(&mut c);
        let d = c.cmd(&["DEBUG", "DIGEST"]);
        assert_eq!(c.cmd(&["SAVE"]), ok());
        (keys.len(), d)
    };
    let mut p = spawn(&dir);
    assert!(exit_or_listening(&mut p).is_none());
    let mut c = Conn::ready(p.addr);
    assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), before);
    assert_eq!(c.cmd(&["DBSIZE"]), V::Int(keys as i64));
    drop(c);
    drop(p);

    // A flipped byte: the checksum no longer matches; the server exits
    // with an error instead of starting empty.
    let path = dir.0.join("dump.rdb");
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    std::fs::write(&path, &bytes).unwrap();
    let mut p = spawn(&dir);
    let st = exit_or_listening(&mut p).expect("refuses to start");
    assert!(!st.success());
    // Cut short: the same.
    bytes[mid] ^= 0x20;
    std::fs::write(&path, &bytes[..bytes.len() - 20]).unwrap();
    let mut p = spawn(&dir);
    assert!(!exit_or_listening(&mut p)
        .expect("refuses to start")
        .success());
}

/// INFO persistence's `field` as text.
fn info_field(c: &mut Conn, field: &str) -> String {
    let V::Bulk(text) = c.cmd(&["INFO", "persistence"]) else {
        panic!("INFO")
    };
    let text = String::from_utf8_lossy(&text).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_string))
        .unwrap_or_else(|| panic!("no {field} in {text}"))
}

/// A walk of 160,000 keys in a debug build under a loaded CI machine.
const SLOW: Duration = Duration::from_secs(60);

/// BGSAVE writes the data as it was when it began, whatever runs during
/// it: overwrites, deletes, new keys, collection edits, TTL changes,
/// renames, FLUSHDB and SWAPDB of databases it has not reached, a lock
/// taken and released. The file, reloaded, has the digest taken at the
/// start; a bound key is never in it.
#[test]
fn bgsave_is_a_point_in_time_image_under_writes() {
    let dir = TempDir::new("bgsave");
    let h = start_in(&dir);
    let mut c = Conn::ready(h.addr);
    let mut w = Conn::ready(h.addr);
    let mut holder = Conn::ready(h.addr);
    for db in ["0", "1", "2", "3"] {
        assert_eq!(c.cmd(&["SELECT", db]), ok());
        assert_eq!(
            c.cmd_slow(&["DEBUG", "POPULATE", "40000", "key", "12"], SLOW),
            ok()
        );
    }
    assert_eq!(c.cmd(&["SELECT", "0"]), ok());
    let keys = fill(&mut c);
    // The digest without the lock: bound keys are never saved.
    let before = c.cmd_slow(&["DEBUG", "DIGEST"], SLOW);
    let key_digests = digests(&mut c, &keys);
    assert_eq!(holder.cmd(&["SETTP", "lock", "me"]), V::Int(1));

    // Slowed (Redis's testing knob) so the writes below overlap it.
    assert_eq!(c.cmd(&["CONFIG", "SET", "rdb-key-save-delay", "20"]), ok());
    assert_eq!(
        c.cmd(&["BGSAVE"]),
        V::Simple("Background saving started".into())
    );
    assert_eq!(
        c.cmd(&["BGSAVE"]),
        V::Err("ERR Background save already in progress".into())
    );
    assert_eq!(
        c.cmd(&["SAVE"]),
        V::Err("ERR Background save already in progress".into())
    );
    // Writes in rounds, each checked to have run while the save did.
    let mut overlapped = 0;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for round in 0..200 {
        if info_field(&mut c, "rdb_bgsave_in_progress") != "1" {
            break;
        }
        let db = rnd(4).to_string();
        assert_eq!(w.cmd(&["SELECT", &db]), ok());
        for _ in 0..50 {
            let k = format!("key:{}", rnd(45000));
            let r = match rnd(9) {
                0 => w.cmd(&["SET", &k, "changed"]),
                1 => w.cmd(&["DEL", &k]),
                2 => w.cmd(&["APPEND", &k, "+"]),
                3 => w.cmd(&["EXPIRE", &k, "100000"]),
                4 => w.cmd(&["RENAME", &k, &format!("renamed:{}", rnd(1000))]),
                5 => w.cmd(&["HSET", "bh", &format!("f{}", rnd(400)), "x"]),
                6 => w.cmd(&["LPOP", "bl"]),
                7 => w.cmd(&["ZADD", "bz", "1", &format!("new{}", rnd(100))]),
                _ => w.cmd(&["SET", &format!("fresh:{}", rnd(1000)), "v"]),
            };
            assert!(
                !matches!(&r, V::Err(e) if !e.contains("no such key") && !e.contains("WRONGTYPE")),
                "{r:?}"
            );
        }
        if round == 3 {
            // The lock goes and another is taken: neither is in the image.
            drop(std::mem::replace(&mut holder, Conn::ready(h.addr)));
            assert_eq!(holder.cmd(&["SETTP", "lock2", "me"]), V::Int(1));
        }
        if round == 5 {
            assert_eq!(w.cmd(&["SELECT", "3"]), ok());
            assert_eq!(w.cmd(&["FLUSHDB"]), ok());
            assert_eq!(w.cmd(&["SWAPDB", "1", "2"]), ok());
        }
        overlapped += 1;
    }
    assert!(overlapped > 5, "the writes ended before the save did");
    assert_eq!(c.cmd(&["CONFIG", "SET", "rdb-key-save-delay", "0"]), ok());
    eventually("the background save ends", || {
        info_field(&mut c, "rdb_bgsave_in_progress") == "0"
    });
    assert_eq!(info_field(&mut c, "rdb_last_bgsave_status"), "ok");
    assert_eq!(info_field(&mut c, "rdb_saves"), "1");
    assert_eq!(c.cmd_slow(&["DEBUG", "RELOAD", "NOSAVE"], SLOW), ok());
    assert_eq!(c.cmd_slow(&["DEBUG", "DIGEST"], SLOW), before);
    assert_eq!(digests(&mut c, &keys), key_digests);
    assert_eq!(c.cmd(&["EXISTS", "lock", "lock2"]), V::Int(0));
    drop(holder);
}

/// `save` rules start a background save once enough changes are old
/// enough; a save that cannot be written turns writes (and PING) into
/// MISCONF while `stop-writes-on-bgsave-error` is on and rules are set;
/// a save that works again lifts it.
#[test]
fn save_rules_and_stop_writes_on_error() {
    let dir = TempDir::new("rules");
    let h = start_in(&dir);
    let mut c = Conn::ready(h.addr);
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "save"]),
        V::Arr(vec![b("save"), b("")])
    );
    assert_eq!(c.cmd(&["CONFIG", "SET", "save", "1 2"]), ok());
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "save"]),
        V::Arr(vec![b("save"), b("1 2")])
    );
    assert!(
        matches!(c.cmd(&["CONFIG", "SET", "save", "0 1"]), V::Err(e) if e.contains("Invalid save parameters"))
    );
    assert_eq!(c.cmd(&["SET", "a", "1"]), ok());
    // One change is not enough for "1 2".
    std::thread::sleep(Duration::from_millis(2200));
    assert_eq!(info_field(&mut c, "rdb_saves"), "0");
    assert_eq!(c.cmd(&["SET", "b", "2"]), ok());
    eventually("the rule saves", || info_field(&mut c, "rdb_saves") == "1");
    assert!(dir.0.join("dump.rdb").is_file());
    assert_eq!(info_field(&mut c, "rdb_changes_since_last_save"), "0");
    assert_eq!(info_field(&mut c, "rdb_last_bgsave_status"), "ok");

    // The directory goes: the next save fails, writes are refused.
    let gone = dir.0.join("gone");
    std::fs::create_dir(&gone).unwrap();
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "dir", &gone.to_string_lossy()]),
        ok()
    );
    std::fs::remove_dir(&gone).unwrap();
    assert_eq!(c.cmd(&["CONFIG", "SET", "save", ""]), ok());
    assert_eq!(c.cmd(&["BGSAVE"]), V::Err("ERR".into()));
    assert_eq!(info_field(&mut c, "rdb_last_bgsave_status"), "err");
    // No rules: writes still go.
    assert_eq!(c.cmd(&["SET", "c", "3"]), ok());
    assert_eq!(c.cmd(&["CONFIG", "SET", "save", "3600 1"]), ok());
    let misconf = |v: V| matches!(v, V::Err(e) if e.starts_with("MISCONF "));
    assert!(misconf(c.cmd(&["SET", "c", "4"])));
    assert!(misconf(c.cmd(&["PING"])));
    assert_eq!(c.cmd(&["GET", "c"]), b("3"));
    assert_eq!(c.cmd(&["MULTI"]), ok());
    assert!(misconf(c.cmd(&["SET", "c", "4"])));
    assert!(matches!(c.cmd(&["EXEC"]), V::Err(e) if e.starts_with("EXECABORT")));
    // A script runs (EVAL does not write by itself) but the writes it
    // calls are refused, reads are not: Redis 7.0.15's
    // scriptVerifyWriteCommandAllow, tried with redis-cli.
    let set = "return redis.call('set','c','4')";
    assert!(
        matches!(c.cmd(&["EVAL", set, "0"]), V::Err(e) if e.starts_with("MISCONF ") && e.ends_with(", on @user_script:1."))
    );
    let pset = "return redis.pcall('set','c','4')";
    assert!(misconf(c.cmd(&["EVAL", pset, "0"])));
    assert_eq!(
        c.cmd(&["EVAL", "return redis.call('get','c')", "0"]),
        b("3")
    );
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "stop-writes-on-bgsave-error", "no"]),
        ok()
    );
    assert_eq!(c.cmd(&["SET", "c", "5"]), ok());
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "stop-writes-on-bgsave-error", "yes"]),
        ok()
    );
    // A save that works clears the error.
    assert_eq!(c.cmd(&["CONFIG", "SET", "dir", &dir.path()]), ok());
    assert_eq!(
        c.cmd(&["BGSAVE"]),
        V::Simple("Background saving started".into())
    );
    eventually("the save ends", || {
        info_field(&mut c, "rdb_bgsave_in_progress") == "0"
    });
    assert_eq!(info_field(&mut c, "rdb_last_bgsave_status"), "ok");
    assert_eq!(c.cmd(&["SET", "c", "6"]), ok());
    // BGSAVE's arguments.
    assert_eq!(c.cmd(&["BGSAVE", "foo"]), V::Err("ERR syntax error".into()));
}

/// SHUTDOWN saves when save rules are set (or SAVE), not with NOSAVE;
/// SIGTERM saves the same way, so a restart finds the data.
#[test]
fn shutdown_and_sigterm_save_with_rules() {
    let dir = TempDir::new("shutdown");
    let path = dir.0.join("dump.rdb");
    // NOSAVE: nothing written, even with rules.
    let h = start_in(&dir);
    let mut c = Conn::ready(h.addr);
    assert_eq!(c.cmd(&["CONFIG", "SET", "save", "3600 1"]), ok());
    assert_eq!(c.cmd(&["SET", "k", "v"]), ok());
    c.send(&["SHUTDOWN", "NOSAVE"]);
    let _ = c.read_all(Duration::from_millis(300));
    drop(h);
    assert!(!path.exists());
    // Rules set: SHUTDOWN saves.
    let h = start_in(&dir);
    let mut c = Conn::ready(h.addr);
    assert_eq!(c.cmd(&["CONFIG", "SET", "save", "3600 1"]), ok());
    assert_eq!(c.cmd(&["SET", "k", "v"]), ok());
    c.send(&["SHUTDOWN"]);
    let _ = c.read_all(Duration::from_millis(300));
    drop(h);
    assert!(path.is_file());
    std::fs::remove_file(&path).unwrap();

    // The binary with rules, stopped by SIGTERM, then started again.
    let mut p = spawn_with(&dir, &["--save", "3600 1"]);
    assert!(exit_or_listening(&mut p).is_none());
    let mut c = Conn::ready(p.addr);
    assert_eq!(c.cmd(&["SET", "kept", "yes"]), ok());
    unsafe {
        libc::kill(p.child.id() as i32, libc::SIGTERM);
    }
    let st = p.exited();
    assert!(st.success(), "{st}");
    assert!(path.is_file());
    let mut p = spawn(&dir);
    assert!(exit_or_listening(&mut p).is_none());
    let mut c = Conn::ready(p.addr);
    assert_eq!(c.cmd(&["GET", "kept"]), b("yes"));
}

/// A real dump with bit flips, overwritten bytes and cuts at random
/// offsets: the loader answers a value or an error, never a panic; with
/// the checksum on, a changed file is always refused.
#[test]
fn corrupt_dumps_never_panic_the_loader() {
    let dir = TempDir::new("corrupt");
    let h = start_in(&dir);
    let mut c = Conn::ready(h.addr);
    fill(&mut c);
    assert_eq!(c.cmd(&["SAVE"]), ok());
    let good = std::fs::read(dir.0.join("dump.rdb")).unwrap();
    let lim = latchkey_server::persist::rdb::value::Limits::redis_defaults();
    let load = |b: &[u8]| latchkey_server::persist::rdb::file::load(b, &lim, 0, 16);
    assert!(load(&good).is_ok());
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut rnd = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut refused = 0;
    for round in 0..3000 {
        let mut b = good.clone();
        match round % 3 {
            0 => {
                let i = rnd(b.len());
                b[i] ^= 1 << rnd(8);
            }
            1 => {
                for _ in 0..1 + rnd(4) {
                    let i = rnd(b.len());
                    b[i] = rnd(256) as u8;
                }
            }
            _ => b.truncate(rnd(b.len())),
        }
        let changed = b != good;
        if load(&b).is_err() {
            refused += 1;
        } else {
            assert!(!changed, "a changed file loaded despite its checksum");
        }
        // Checks off: the corrupted content is parsed to its end.
        let n = b.len();
        if n > 8 {
            b[n - 8..].fill(0);
            let _ = load(&b);
        }
    }
    assert!(refused > 2900, "{refused}");
}
