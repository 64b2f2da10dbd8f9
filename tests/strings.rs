//! String commands through a real connection, checked byte for byte against
//! replies recorded from Redis 7.0.15 (`CASES`), plus the encodings and TTL
//! effects that the raw replies do not show.

use std::time::Duration;

use latchkey_server::runtime::ServerHandle;

mod common;
use common::*;

#[test]
fn replies_match_redis() {
    let h = start();
    let mut c = Conn::new(h.addr);
    for (args, want) in CASES {
        let got = c.call_b(args);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want),
            "command {:?}",
            args.iter()
                .map(|a| String::from_utf8_lossy(a))
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn resp3_replies_match_redis() {
    let h = start();
    let mut c = Conn::new(h.addr);
    assert_eq!(c.call_b(&[b"HELLO", b"3"])[0], b'%');
    for (args, want) in CASES_RESP3 {
        let got = c.call_b(args);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want),
            "command {:?}",
            args.iter()
                .map(|a| String::from_utf8_lossy(a))
                .collect::<Vec<_>>()
        );
    }
}

fn encoding(h: &ServerHandle, key: &[u8]) -> Option<&'static str> {
    h.shared.store.lock().ks.db_mut(0).encoding(key)
}

fn ttl_ms(h: &ServerHandle, key: &[u8]) -> Option<Option<i64>> {
    let now = latchkey_server::util::now_ms();
    h.shared
        .store
        .lock()
        .ks
        .db_mut(0)
        .expire_of(key)
        .map(|e| e.map(|w| w - now))
}

#[test]
fn encodings_like_redis() {
    let h = start();
    let mut c = Conn::new(h.addr);
    let big = vec![b'x'; 1 << 20];
    type Step<'a> = (&'a [&'a [u8]], &'a [u8], &'a str);
    let steps: &[Step] = &[
        (&[b"SET", b"k", b"123"], b"k", "int"),
        (&[b"SET", b"k", b"-0"], b"k", "embstr"),
        (&[b"SET", b"k", &[b'y'; 44]], b"k", "embstr"),
        (&[b"SET", b"k", &[b'y'; 45]], b"k", "raw"),
        (&[b"SET", b"k", &big], b"k", "raw"),
        (&[b"APPEND", b"a", b"123"], b"a", "int"),
        (&[b"APPEND", b"a", b""], b"a", "raw"),
        (&[b"APPEND", b"a2", b"hello"], b"a2", "embstr"),
        (&[b"SETRANGE", b"r", b"0", b"5"], b"r", "raw"),
        (&[b"INCR", b"r"], b"r", "int"),
        (&[b"SET", b"r2", b"12345"], b"r2", "int"),
        (&[b"SETRANGE", b"r2", b"0", b""], b"r2", "int"),
        (&[b"SETRANGE", b"r2", b"0", b"9"], b"r2", "raw"),
        (&[b"INCRBYFLOAT", b"f", b"3"], b"f", "embstr"),
        (&[b"INCR", b"f"], b"f", "int"),
        (&[b"INCRBYFLOAT", b"f", b"0"], b"f", "embstr"),
        (&[b"INCRBYFLOAT", b"f2", &[b'1'; 60]], b"f2", "raw"),
    ];
    for (args, key, want) in steps {
        let r = c.call_b(args);
        assert!(r[0] != b'-', "{r:?}");
        assert_eq!(
            encoding(&h, key),
            Some(*want),
            "after {:?}",
            String::from_utf8_lossy(args[0])
        );
    }
}

#[test]
fn ttl_effects() {
    let h = start();
    let mut c = Conn::new(h.addr);
    c.call_b(&[b"SET", b"k", b"5", b"EX", b"100"]);
    // INCR, INCRBYFLOAT, APPEND, SETRANGE and SET KEEPTTL keep the TTL.
    for args in [
        &[&b"INCR"[..], b"k"][..],
        &[b"INCRBYFLOAT", b"k", b"1.5"],
        &[b"APPEND", b"k", b"0"],
        &[b"SETRANGE", b"k", b"0", b"9"],
        &[b"SET", b"k", b"v", b"KEEPTTL"],
    ] {
        c.call_b(args);
        let t = ttl_ms(&h, b"k").unwrap().unwrap();
        assert!(t > 90_000 && t <= 100_000, "{t} after {:?}", args[0]);
    }
    // SET, GETSET and MSET clear it.
    for args in [
        &[&b"SET"[..], b"k", b"v"][..],
        &[b"GETSET", b"k", b"v"],
        &[b"MSET", b"k", b"v"],
    ] {
        h.shared.store.lock().ks.db_mut(0).set_expire(
            &bytes::Bytes::from_static(b"k"),
            latchkey_server::util::now_ms() + 100_000,
        );
        c.call_b(args);
        assert_eq!(ttl_ms(&h, b"k"), Some(None));
    }
    c.call_b(&[b"SET", b"k", b"v", b"EX", b"10", b"EX", b"20"]);
    assert!(ttl_ms(&h, b"k").unwrap().unwrap() > 10_000);
    c.call_b(&[b"GETEX", b"k", b"PX", b"5000"]);
    assert!(ttl_ms(&h, b"k").unwrap().unwrap() <= 5000);
    assert_eq!(c.call_b(&[b"GETEX", b"k", b"PERSIST"]), b"$1\r\nv\r\n");
    assert_eq!(ttl_ms(&h, b"k"), Some(None));
    c.call_b(&[b"PSETEX", b"k", b"30", b"v"]);
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(c.call_b(&[b"GET", b"k"]), b"$-1\r\n");
    assert_eq!(c.call_b(&[b"SETNX", b"k", b"w"]), b":1\r\n");
}

#[test]
fn large_values() {
    let h = start();
    let mut c = Conn::new(h.addr);
    let big: Vec<u8> = (0..(1 << 20)).map(|i| (i % 251) as u8).collect();
    assert_eq!(c.call_b(&[b"SET", b"big", &big]), b"+OK\r\n");
    let mut want = format!("${}\r\n", big.len()).into_bytes();
    want.extend_from_slice(&big);
    want.extend_from_slice(b"\r\n");
    assert_eq!(c.call_b(&[b"GET", b"big"]), want);
    assert_eq!(
        c.call_b(&[b"APPEND", b"big", &big]),
        format!(":{}\r\n", 2 << 20).into_bytes()
    );
    assert_eq!(
        c.call_b(&[b"GETRANGE", b"big", b"1048576", b"1048578"]),
        b"$3\r\n\x00\x01\x02\r\n"
    );
    assert_eq!(
        c.call_b(&[b"LCS", b"big", b"big", b"LEN"]),
        b"-ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len\r\n"
    );
}

const CASES: &[(&[&[u8]], &[u8])] = &[
    (&[b"GET", b"nokey"], b"$-1\r\n"),
    (&[b"SET", b"k", b"v"], b"+OK\r\n"),
    (&[b"GET", b"k"], b"$1\r\nv\r\n"),
    (&[b"SET", b"e", b""], b"+OK\r\n"),
    (&[b"GET", b"e"], b"$0\r\n\r\n"),
    (&[b"SET", b"b", b"a\x00b\r\nc\x00"], b"+OK\r\n"),
    (&[b"GET", b"b"], b"$7\r\na\x00b\r\nc\x00\r\n"),
    (&[b"SET", b"k", b"v", b"NX", b"XX"], b"-ERR syntax error\r\n"),
    (&[b"SET", b"k", b"v", b"NX"], b"$-1\r\n"),
    (&[b"SET", b"k", b"v2", b"XX", b"GET"], b"$1\r\nv\r\n"),
    (&[b"SET", b"nk", b"v", b"XX", b"GET"], b"$-1\r\n"),
    (&[b"SET", b"nk", b"v", b"NX", b"GET"], b"$-1\r\n"),
    (&[b"SET", b"k", b"v", b"EX", b"0"], b"-ERR invalid expire time in 'set' command\r\n"),
    (&[b"SET", b"k", b"v", b"EX", b"-1"], b"-ERR invalid expire time in 'set' command\r\n"),
    (&[b"SET", b"k", b"v", b"EX", b"abc"], b"-ERR value is not an integer or out of range\r\n"),
    (&[b"SET", b"k", b"v", b"EX", b"9223372036854776"], b"-ERR invalid expire time in 'set' command\r\n"),
    (&[b"SET", b"k", b"v", b"PX", b"9223372036854775807"], b"-ERR invalid expire time in 'set' command\r\n"),
    (&[b"SET", b"k", b"v", b"EX", b"10", b"PX", b"10"], b"-ERR syntax error\r\n"),
    (&[b"SET", b"k", b"v", b"KEEPTTL", b"EX", b"1"], b"-ERR syntax error\r\n"),
    (&[b"SET", b"k", b"v", b"EX"], b"-ERR syntax error\r\n"),
    (&[b"SET", b"k", b"v", b"EX", b"10", b"EX", b"20"], b"+OK\r\n"),
    (&[b"SET", b"k", b"v", b"NX\x00x"], b"$-1\r\n"),
    (&[b"SET", b"k", b"v", b"bogus"], b"-ERR syntax error\r\n"),
    (&[b"SET", b"k", b"v", b"PERSIST"], b"-ERR syntax error\r\n"),
    (&[b"SETNX", b"k", b"x"], b":0\r\n"),
    (&[b"SETNX", b"sn", b""], b":1\r\n"),
    (&[b"GET", b"sn"], b"$0\r\n\r\n"),
    (&[b"SETEX", b"k", b"0", b"v"], b"-ERR invalid expire time in 'setex' command\r\n"),
    (&[b"SETEX", b"k", b"9223372036854776", b"v"], b"-ERR invalid expire time in 'setex' command\r\n"),
    (&[b"SETEX", b"k", b"x", b"v"], b"-ERR value is not an integer or out of range\r\n"),
    (&[b"PSETEX", b"k", b"-1", b"v"], b"-ERR invalid expire time in 'psetex' command\r\n"),
    (&[b"PSETEX", b"k", b"9223372036854775807", b"v"], b"-ERR invalid expire time in 'psetex' command\r\n"),
    (&[b"SETEX", b"k", b"100", b"v"], b"+OK\r\n"),
    (&[b"MSET", b"a", b"1", b"b"], b"-ERR wrong number of arguments for 'mset' command\r\n"),
    (&[b"MSET", b"a", b"1", b"b", b"2"], b"+OK\r\n"),
    (&[b"MGET", b"a", b"b", b"nokey"], b"*3\r\n$1\r\n1\r\n$1\r\n2\r\n$-1\r\n"),
    (&[b"MSETNX", b"a", b"1", b"c", b"3"], b":0\r\n"),
    (&[b"MSETNX", b"x", b"1", b"x", b"2"], b":1\r\n"),
    (&[b"GET", b"x"], b"$1\r\n2\r\n"),
    (&[b"MSETNX", b"c"], b"-ERR wrong number of arguments for 'msetnx' command\r\n"),
    (&[b"GETSET", b"gs", b"1"], b"$-1\r\n"),
    (&[b"GETSET", b"gs", b"2"], b"$1\r\n1\r\n"),
    (&[b"GETDEL", b"gs"], b"$1\r\n2\r\n"),
    (&[b"GETDEL", b"gs"], b"$-1\r\n"),
    (&[b"GETEX", b"nokey", b"EX", b"abc"], b"$-1\r\n"),
    (&[b"GETEX", b"k", b"EX", b"abc"], b"-ERR value is not an integer or out of range\r\n"),
    (&[b"GETEX", b"k", b"EX", b"9223372036854776"], b"-ERR invalid expire time in 'getex' command\r\n"),
    (&[b"GETEX", b"k", b"PX", b"0"], b"-ERR invalid expire time in 'getex' command\r\n"),
    (&[b"GETEX", b"k", b"PERSIST", b"EX", b"1"], b"-ERR syntax error\r\n"),
    (&[b"GETEX", b"k", b"NX"], b"-ERR syntax error\r\n"),
    (&[b"GETEX", b"k", b"PERSIST"], b"$1\r\nv\r\n"),
    (&[b"GETEX", b"k", b"EXAT", b"1"], b"$1\r\nv\r\n"),
    (&[b"GET", b"k"], b"$-1\r\n"),
    (&[b"APPEND", b"ap", b"abc"], b":3\r\n"),
    (&[b"APPEND", b"ap", b"a\x00b\r\nc\x00"], b":10\r\n"),
    (&[b"GET", b"ap"], b"$10\r\nabca\x00b\r\nc\x00\r\n"),
    (&[b"STRLEN", b"ap"], b":10\r\n"),
    (&[b"STRLEN", b"nokey"], b":0\r\n"),
    (&[b"SET", b"s", b"Hello World"], b"+OK\r\n"),
    (&[b"GETRANGE", b"s", b"0", b"4"], b"$5\r\nHello\r\n"),
    (&[b"GETRANGE", b"s", b"-5", b"-1"], b"$5\r\nWorld\r\n"),
    (&[b"GETRANGE", b"s", b"-1", b"-5"], b"$0\r\n\r\n"),
    (&[b"GETRANGE", b"s", b"5", b"2"], b"$0\r\n\r\n"),
    (&[b"GETRANGE", b"s", b"0", b"x"], b"-ERR value is not an integer or out of range\r\n"),
    (&[b"GETRANGE", b"s", b"-9223372036854775808", b"9223372036854775807"], b"$11\r\nHello World\r\n"),
    (&[b"GETRANGE", b"nokey", b"0", b"-1"], b"$0\r\n\r\n"),
    (&[b"SUBSTR", b"s", b"0", b"-7"], b"$5\r\nHello\r\n"),
    (&[b"SETRANGE", b"sr", b"3", b"ab"], b":5\r\n"),
    (&[b"GET", b"sr"], b"$5\r\n\x00\x00\x00ab\r\n"),
    (&[b"SETRANGE", b"sr", b"-1", b"a"], b"-ERR offset is out of range\r\n"),
    (&[b"SETRANGE", b"sr", b"0", b""], b":5\r\n"),
    (&[b"SETRANGE", b"nosr", b"0", b""], b":0\r\n"),
    (&[b"SETRANGE", b"sr", b"536870911", b"ab"], b"-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n"),
    (&[b"SETRANGE", b"sr", b"9223372036854775807", b"a"], b"-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n"),
    (&[b"SETRANGE", b"sr", b"1", b"Z"], b":5\r\n"),
    (&[b"GET", b"sr"], b"$5\r\n\x00Z\x00ab\r\n"),
    (&[b"INCR", b"c1"], b":1\r\n"),
    (&[b"INCRBY", b"c1", b"9223372036854775806"], b":9223372036854775807\r\n"),
    (&[b"INCR", b"c1"], b"-ERR increment or decrement would overflow\r\n"),
    (&[b"DECRBY", b"c1", b"-9223372036854775808"], b"-ERR decrement would overflow\r\n"),
    (&[b"INCRBY", b"c1", b"x"], b"-ERR value is not an integer or out of range\r\n"),
    (&[b"SET", b"c1", b"1 "], b"+OK\r\n"),
    (&[b"INCR", b"c1"], b"-ERR value is not an integer or out of range\r\n"),
    (&[b"SET", b"c1", b"-0"], b"+OK\r\n"),
    (&[b"DECR", b"c1"], b"-ERR value is not an integer or out of range\r\n"),
    (&[b"DECR", b"c2"], b":-1\r\n"),
    (&[b"SET", b"f", b"10.5"], b"+OK\r\n"),
    (&[b"INCRBYFLOAT", b"f", b"0.1"], b"$4\r\n10.6\r\n"),
    (&[b"INCRBYFLOAT", b"f", b"1e30"], b"$31\r\n1000000000000000000024696061952\r\n"),
    (&[b"INCRBYFLOAT", b"f", b"inf"], b"-ERR increment would produce NaN or Infinity\r\n"),
    (&[b"INCRBYFLOAT", b"f", b" 1"], b"-ERR value is not a valid float\r\n"),
    (&[b"INCRBYFLOAT", b"f", b"nan"], b"-ERR value is not a valid float\r\n"),
    (&[b"INCRBYFLOAT", b"f2", b"5.0e3"], b"$4\r\n5000\r\n"),
    (&[b"INCRBYFLOAT", b"f2", b"0x10"], b"$4\r\n5016\r\n"),
    (&[b"SET", b"f3", b"abc"], b"+OK\r\n"),
    (&[b"INCRBYFLOAT", b"f3", b"1"], b"-ERR value is not a valid float\r\n"),
    (&[b"INCRBYFLOAT", b"f4", b"1e-4960"], b"-ERR value is not a valid float\r\n"),
    (&[b"MSET", b"l1", b"ohmytext", b"l2", b"mynewtext"], b"+OK\r\n"),
    (&[b"LCS", b"l1", b"l2"], b"$6\r\nmytext\r\n"),
    (&[b"LCS", b"l1", b"l2", b"LEN"], b":6\r\n"),
    (&[b"LCS", b"l1", b"l2", b"IDX", b"MINMATCHLEN", b"4", b"WITHMATCHLEN"], b"*4\r\n$7\r\nmatches\r\n*1\r\n*3\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n:4\r\n$3\r\nlen\r\n:6\r\n"),
    (&[b"LCS", b"l1", b"l2", b"IDX"], b"*4\r\n$7\r\nmatches\r\n*2\r\n*2\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n*2\r\n*2\r\n:2\r\n:3\r\n*2\r\n:0\r\n:1\r\n$3\r\nlen\r\n:6\r\n"),
    (&[b"LCS", b"l1", b"l2", b"LEN", b"IDX"], b"-ERR If you want both the length and indexes, please just use IDX.\r\n"),
    (&[b"LCS", b"l1", b"l2", b"MINMATCHLEN"], b"-ERR syntax error\r\n"),
    (&[b"LCS", b"l1", b"nokey", b"IDX"], b"*4\r\n$7\r\nmatches\r\n*0\r\n$3\r\nlen\r\n:0\r\n"),
    (&[b"MSET"], b"-ERR wrong number of arguments for 'mset' command\r\n"),
    (&[b"GETEX"], b"-ERR wrong number of arguments for 'getex' command\r\n"),
    (&[b"LCS", b"a"], b"-ERR wrong number of arguments for 'lcs' command\r\n"),
];

const CASES_RESP3: &[(&[&[u8]], &[u8])] = &[
    (&[b"GET", b"nokey"], b"_\r\n"),
    (&[b"SET", b"k", b"v", b"XX"], b"_\r\n"),
    (&[b"SET", b"k", b"v", b"NX", b"GET"], b"_\r\n"),
    (&[b"SET", b"k", b"w", b"NX", b"GET"], b"$1\r\nv\r\n"),
    (&[b"MGET", b"k", b"nokey"], b"*2\r\n$1\r\nv\r\n_\r\n"),
    (&[b"GETEX", b"nokey"], b"_\r\n"),
    (&[b"GETDEL", b"nokey"], b"_\r\n"),
    (&[b"GETSET", b"g", b"1"], b"_\r\n"),
    (&[b"MSET", b"l1", b"ohmytext", b"l2", b"mynewtext"], b"+OK\r\n"),
    (&[b"LCS", b"l1", b"l2", b"IDX", b"WITHMATCHLEN"], b"%2\r\n$7\r\nmatches\r\n*2\r\n*3\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n:4\r\n*3\r\n*2\r\n:2\r\n:3\r\n*2\r\n:0\r\n:1\r\n:2\r\n$3\r\nlen\r\n:6\r\n"),
    (&[b"LCS", b"l1", b"nokey", b"IDX"], b"%2\r\n$7\r\nmatches\r\n*0\r\n$3\r\nlen\r\n:0\r\n"),
    (&[b"LCS", b"l1", b"l2", b"LEN"], b":6\r\n"),
    (&[b"INCRBYFLOAT", b"f", b"1.5"], b"$3\r\n1.5\r\n"),
];
