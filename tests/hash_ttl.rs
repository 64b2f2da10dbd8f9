//! Hash field TTLs (Redis 7.4's hash field expiration) in persistence:
//! an RDB keeps them (Redis 7.4's RDB_TYPE_HASH_LISTPACK_EX and
//! RDB_TYPE_HASH_METADATA, only for a hash that holds one: a hash without
//! stays in 7.0's bytes) through SAVE, DEBUG RELOAD, a restart and
//! DUMP/RESTORE; the AOF logs absolute HPEXPIREAT and an expired field as
//! HDEL, its rewrite emits HPEXPIREAT per field, and a restart replays
//! them; the active expiry cycle deletes due fields, and the key with the
//! last one, without anyone reading it.

mod common;

use std::time::Duration;

use common::*;

fn spawn(dir: &TempDir, extra: &[&str]) -> (Proc, Conn) {
    let mut args = vec!["--save", "", "--enable-debug-command", "yes"];
    args.extend_from_slice(extra);
    let mut p = Proc::spawn(env!("CARGO_BIN_EXE_latchkey-server"), dir, &args);
    assert!(p.started().is_none(), "the server did not start");
    let c = Conn::ready(p.addr);
    (p, c)
}

/// A listpack and a hashtable hash with field TTLs, and one without.
fn fill(c: &mut Conn) {
    assert_eq!(
        c.cmd(&["HSET", "small", "a", "1", "b", "2", "c", "3"]),
        V::Int(3)
    );
    assert_eq!(
        c.cmd(&["HEXPIRE", "small", "1000", "FIELDS", "2", "c", "a"]),
        V::Arr(vec![V::Int(1), V::Int(1)])
    );
    for i in 0..600 {
        let f = format!("f{i}");
        assert_eq!(c.cmd(&["HSET", "big", &f, "v"]), V::Int(1));
    }
    assert_eq!(
        c.cmd(&["HPEXPIRE", "big", "2000000", "FIELDS", "1", "f7"]),
        V::Arr(vec![V::Int(1)])
    );
    assert_eq!(c.cmd(&["HSET", "plain", "x", "1"]), V::Int(1));
}

fn ttls(c: &mut Conn, key: &str, fields: &[&str]) -> Vec<i64> {
    let mut args = vec!["HTTL", key, "FIELDS"];
    let n = fields.len().to_string();
    args.push(&n);
    args.extend_from_slice(fields);
    match c.cmd(&args) {
        V::Arr(v) => v
            .into_iter()
            .map(|x| match x {
                V::Int(i) => i,
                o => panic!("{o:?}"),
            })
            .collect(),
        o => panic!("{o:?}"),
    }
}

fn check(c: &mut Conn) {
    let t = ttls(c, "small", &["a", "b", "c"]);
    assert!(t[0] > 990 && t[1] == -1 && t[2] > 990, "{t:?}");
    let t = ttls(c, "big", &["f7", "f8"]);
    assert!(t[0] > 1990 && t[1] == -1, "{t:?}");
    assert_eq!(c.cmd(&["HLEN", "big"]), V::Int(600));
    // The fields with a TTL first, as Redis's listpackex.
    assert_eq!(
        c.cmd(&["HKEYS", "small"]),
        V::Arr(vec![b("c"), b("a"), b("b")])
    );
}

fn dump_type(c: &mut Conn, key: &str) -> u8 {
    match c.cmd(&["DUMP", key]) {
        V::Bulk(p) => p[0],
        o => panic!("{o:?}"),
    }
}

#[test]
fn field_ttls_survive_save_reload_restart_and_restore() {
    let dir = TempDir::new("hfe-rdb");
    let (p, mut c) = spawn(&dir, &[]);
    fill(&mut c);
    let digest = c.cmd(&["DEBUG", "DIGEST"]);
    // Redis 7.4's types for hashes with field TTLs, 7.0's otherwise.
    assert_eq!(dump_type(&mut c, "small"), 25);
    assert_eq!(dump_type(&mut c, "big"), 24);
    assert_eq!(dump_type(&mut c, "plain"), 16);
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "small"]), b("listpackex"));
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "plain"]), b("listpack"));

    assert_eq!(c.cmd(&["SAVE"]), ok());
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]), ok());
    assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest);
    check(&mut c);

    // DUMP / RESTORE, COPY, RENAME, MOVE carry them.
    let V::Bulk(payload) = c.cmd(&["DUMP", "small"]) else {
        panic!()
    };
    assert_eq!(c.cmd_b(&[b"RESTORE", b"copy", b"0", &payload]), ok());
    assert!(ttls(&mut c, "copy", &["a"])[0] > 990);
    assert_eq!(c.cmd(&["COPY", "copy", "copy2"]), V::Int(1));
    assert_eq!(c.cmd(&["RENAME", "copy2", "copy3"]), ok());
    assert_eq!(c.cmd(&["MOVE", "copy3", "1"]), V::Int(1));
    assert_eq!(c.cmd(&["SELECT", "1"]), ok());
    assert!(ttls(&mut c, "copy3", &["c"])[0] > 990);
    assert_eq!(c.cmd(&["FLUSHDB"]), ok());
    assert_eq!(c.cmd(&["SELECT", "0"]), ok());
    assert_eq!(c.cmd(&["DEL", "copy"]), V::Int(1));

    drop(c);
    p.kill9();
    let (_p, mut c) = spawn(&dir, &[]);
    assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest);
    check(&mut c);
}

#[test]
fn field_ttls_in_the_aof_and_its_rewrite() {
    let dir = TempDir::new("hfe-aof");
    let (p, mut c) = spawn(&dir, &["--appendonly", "yes"]);
    fill(&mut c);
    assert_eq!(c.cmd(&["HSET", "short", "a", "1", "b", "2"]), V::Int(2));
    assert_eq!(
        c.cmd(&["HPEXPIRE", "short", "30", "FIELDS", "1", "a"]),
        V::Arr(vec![V::Int(1)])
    );
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(c.cmd(&["HGETALL", "short"]), V::Arr(vec![b("b"), b("2")]));
    let digest = c.cmd(&["DEBUG", "DIGEST"]);
    let incr = std::fs::read(dir.0.join("appendonlydir/appendonly.aof.1.incr.aof")).unwrap();
    let text = String::from_utf8_lossy(&incr);
    assert!(
        !text.contains("HEXPIRE\r\n") && !text.contains("HPEXPIRE\r\n"),
        "{text}"
    );
    assert!(text.contains("HPEXPIREAT\r\n$5\r\nsmall\r\n"), "{text}");
    assert!(
        text.contains("HDEL\r\n$5\r\nshort\r\n$1\r\na\r\n"),
        "{text}"
    );
    assert_eq!(c.cmd(&["DEBUG", "LOADAOF"]), ok());
    assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest);
    drop(c);
    p.kill9();

    let (p, mut c) = spawn(
        &dir,
        &["--appendonly", "yes", "--aof-use-rdb-preamble", "no"],
    );
    assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest);
    check(&mut c);
    assert!(matches!(c.cmd(&["BGREWRITEAOF"]), V::Simple(_)));
    eventually("the rewrite", || {
        dir.0
            .join("appendonlydir/appendonly.aof.2.base.aof")
            .exists()
            && matches!(c.cmd(&["INFO", "persistence"]), V::Bulk(b) if String::from_utf8_lossy(&b).contains("aof_rewrite_in_progress:0"))
    });
    let base = std::fs::read(dir.0.join("appendonlydir/appendonly.aof.2.base.aof")).unwrap();
    let text = String::from_utf8_lossy(&base);
    assert!(text.contains("HPEXPIREAT\r\n$3\r\nbig\r\n"), "{text}");
    drop(c);
    p.kill9();
    let (_p, mut c) = spawn(&dir, &["--appendonly", "yes"]);
    assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest);
    check(&mut c);
}

#[test]
fn active_expiry_deletes_due_fields_and_the_emptied_key() {
    let dir = TempDir::new("hfe-active");
    let (_p, mut c) = spawn(&dir, &[]);
    assert_eq!(c.cmd(&["HSET", "h", "a", "1", "b", "2"]), V::Int(2));
    assert_eq!(c.cmd(&["HSET", "keep", "a", "1", "b", "2"]), V::Int(2));
    assert_eq!(
        c.cmd(&["HPEXPIRE", "h", "20", "FIELDS", "2", "a", "b"]),
        V::Arr(vec![V::Int(1), V::Int(1)])
    );
    assert_eq!(
        c.cmd(&["HPEXPIRE", "keep", "20", "FIELDS", "1", "a"]),
        V::Arr(vec![V::Int(1)])
    );
    // DBSIZE and MEMORY USAGE look at no field: only the cycle deletes.
    eventually("the cycle deletes h", || c.cmd(&["DBSIZE"]) == V::Int(1));
    eventually("the cycle deletes keep's field", || {
        matches!(c.cmd(&["DEBUG", "DIGEST-VALUE", "keep"]), V::Arr(_))
            && c.cmd(&["HLEN", "keep"]) == V::Int(1)
    });
    assert_eq!(c.cmd(&["HGETALL", "keep"]), V::Arr(vec![b("b"), b("2")]));
}
