//! Generic key commands through a real connection: SCAN's guarantee while the
//! table grows and shrinks, and expired keys staying out of KEYS and SCAN.

use std::collections::HashSet;
use std::io::Write;
use std::time::Duration;

mod common;
use common::*;

/// Sends many commands in one write and checks every reply is not an error.
fn pipeline(c: &mut Conn, cmds: &[Vec<Vec<u8>>]) {
    let mut buf = Vec::new();
    for cmd in cmds {
        let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_slice()).collect();
        buf.extend(encode(&args));
    }
    c.s.write_all(&buf).unwrap();
    for _ in cmds {
        let r = c.reply();
        assert!(!matches!(r, V::Err(_)), "{r:?}");
    }
}

/// One SCAN call: (next cursor, keys).
fn scan(c: &mut Conn, cursor: &[u8], opts: &[&[u8]]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut args: Vec<&[u8]> = vec![b"SCAN", cursor];
    args.extend_from_slice(opts);
    match c.cmd_b(&args) {
        V::Arr(mut v) if v.len() == 2 => {
            let keys = match v.pop().unwrap() {
                V::Arr(ks) => ks
                    .into_iter()
                    .map(|k| match k {
                        V::Bulk(k) => k,
                        other => panic!("bad key {other:?}"),
                    })
                    .collect(),
                other => panic!("bad SCAN keys {other:?}"),
            };
            let V::Bulk(c) = v.pop().unwrap() else {
                panic!("bad SCAN cursor");
            };
            (c, keys)
        }
        other => panic!("bad SCAN reply {other:?}"),
    }
}

fn sets(prefix: &str, range: std::ops::Range<usize>) -> Vec<Vec<Vec<u8>>> {
    range
        .map(|i| {
            vec![
                b"SET".to_vec(),
                format!("{prefix}{i}").into_bytes(),
                b"v".to_vec(),
            ]
        })
        .collect()
}

fn dels(prefix: &str, range: std::ops::Range<usize>) -> Vec<Vec<Vec<u8>>> {
    range
        .map(|i| vec![b"DEL".to_vec(), format!("{prefix}{i}").into_bytes()])
        .collect()
}

#[test]
fn scan_returns_every_stable_key_while_the_table_grows_and_shrinks() {
    let h = start();
    let mut c = Conn::new(h.addr);
    const STABLE: usize = 3000;
    pipeline(&mut c, &sets("stable:", 0..STABLE));
    // Keys that come and go: they may or may not be returned.
    pipeline(&mut c, &sets("gone:", 0..2000));

    let mut seen = HashSet::new();
    let mut cursor = b"0".to_vec();
    let mut step = 0;
    loop {
        let (next, keys) = scan(&mut c, &cursor, &[b"COUNT", b"25"]);
        seen.extend(keys);
        cursor = next;
        step += 1;
        match step {
            // Grow: several doublings of the table mid-scan.
            10 => pipeline(&mut c, &sets("grow:", 0..40_000)),
            // Shrink well below the starting size.
            30 => {
                pipeline(&mut c, &dels("grow:", 0..40_000));
                pipeline(&mut c, &dels("gone:", 0..2000));
            }
            // Grow again, then shrink again late in the scan.
            60 => pipeline(&mut c, &sets("late:", 0..10_000)),
            90 => pipeline(&mut c, &dels("late:", 0..10_000)),
            _ => {}
        }
        // Small churn on every step.
        pipeline(&mut c, &sets(&format!("churn{step}:"), 0..5));
        if step > 3 {
            pipeline(&mut c, &dels(&format!("churn{}:", step - 3), 0..5));
        }
        if cursor == b"0" {
            break;
        }
        assert!(step < 100_000, "SCAN did not terminate");
    }
    assert!(
        step > 90,
        "scan ended before the table changes ({step} steps)"
    );
    for i in 0..STABLE {
        let k = format!("stable:{i}").into_bytes();
        assert!(seen.contains(&k), "SCAN missed stable:{i}");
    }
    // Nothing that never existed is returned.
    for k in &seen {
        let s = String::from_utf8_lossy(k);
        assert!(
            ["stable:", "gone:", "grow:", "late:", "churn"]
                .iter()
                .any(|p| s.starts_with(p)),
            "unexpected key {s}"
        );
    }
}

#[test]
fn scan_match_and_type_filter_after_collecting() {
    let h = start();
    let mut c = Conn::new(h.addr);
    pipeline(&mut c, &sets("a:", 0..500));
    pipeline(&mut c, &sets("b:", 0..500));
    let mut seen = HashSet::new();
    let mut cursor = b"0".to_vec();
    for _ in 0..100_000 {
        let (next, keys) = scan(&mut c, &cursor, &[b"MATCH", b"a:*", b"TYPE", b"string"]);
        seen.extend(keys);
        cursor = next;
        if cursor == b"0" {
            break;
        }
    }
    assert_eq!(cursor, b"0");
    assert_eq!(seen.len(), 500);
    assert!(seen.iter().all(|k| k.starts_with(b"a:")));
}

#[test]
fn expired_keys_are_not_listed() {
    let h = start();
    // Without active expiry the expired keys stay in the table, so KEYS and
    // SCAN must skip them on their own.
    h.shared.store.lock().ks.set_active_expire(false);
    let mut c = Conn::new(h.addr);
    pipeline(&mut c, &sets("live:", 0..100));
    pipeline(&mut c, &sets("dead:", 0..100));
    let pexpires: Vec<Vec<Vec<u8>>> = (0..100)
        .map(|i| {
            vec![
                b"PEXPIRE".to_vec(),
                format!("dead:{i}").into_bytes(),
                b"1".to_vec(),
            ]
        })
        .collect();
    pipeline(&mut c, &pexpires);
    std::thread::sleep(Duration::from_millis(20));

    let V::Arr(keys) = c.cmd_b(&[b"KEYS", b"*"]) else {
        panic!("KEYS");
    };
    assert_eq!(keys.len(), 100);
    let mut seen = HashSet::new();
    let mut cursor = b"0".to_vec();
    for _ in 0..100_000 {
        let (next, keys) = scan(&mut c, &cursor, &[b"COUNT", b"3"]);
        seen.extend(keys);
        cursor = next;
        if cursor == b"0" {
            break;
        }
    }
    assert_eq!(seen.len(), 100);
    assert!(seen.iter().all(|k| k.starts_with(b"live:")));
    assert_eq!(c.cmd_b(&[b"EXISTS", b"dead:1"]), V::Int(0));
    assert_eq!(c.cmd_b(&[b"TTL", b"dead:2"]), V::Int(-2));
}

#[test]
fn rename_move_copy_keep_the_ttl() {
    let h = start();
    let mut c = Conn::new(h.addr);
    assert_eq!(c.cmd_b(&[b"SET", b"k", b"v"]), V::Simple("OK".into()));
    assert_eq!(c.cmd_b(&[b"EXPIRE", b"k", b"1000"]), V::Int(1));
    assert_eq!(c.cmd_b(&[b"RENAME", b"k", b"k2"]), V::Simple("OK".into()));
    let ttl = c.cmd_b(&[b"TTL", b"k2"]);
    assert!(matches!(ttl, V::Int(999..=1000)), "{ttl:?}");
    assert_eq!(c.cmd_b(&[b"COPY", b"k2", b"k3", b"DB", b"2"]), V::Int(1));
    assert_eq!(c.cmd_b(&[b"MOVE", b"k2", b"3"]), V::Int(1));
    assert_eq!(c.cmd_b(&[b"MOVE", b"k2", b"3"]), V::Int(0));
    assert_eq!(c.cmd_b(&[b"SWAPDB", b"0", b"3"]), V::Simple("OK".into()));
    let ttl = c.cmd_b(&[b"TTL", b"k2"]);
    assert!(matches!(ttl, V::Int(999..=1000)), "{ttl:?}");
    assert_eq!(c.cmd_b(&[b"SWAPDB", b"0", b"2"]), V::Simple("OK".into()));
    let ttl = c.cmd_b(&[b"TTL", b"k3"]);
    assert!(matches!(ttl, V::Int(999..=1000)), "{ttl:?}");
    assert_eq!(c.cmd_b(&[b"EXISTS", b"k2"]), V::Int(0));
}
