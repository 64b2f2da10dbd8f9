//! Generic key commands through a real connection: SCAN's guarantee while the
//! table grows and shrinks, and expired keys staying out of KEYS and SCAN.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use latchkey::config::Config;
use latchkey::server::ServerHandle;

#[derive(Debug, PartialEq)]
enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Reply>),
}

struct Client {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Client {
    fn connect(h: &ServerHandle) -> Client {
        let s = TcpStream::connect(h.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    fn encode(buf: &mut Vec<u8>, args: &[&[u8]]) {
        buf.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            buf.extend_from_slice(a);
            buf.extend_from_slice(b"\r\n");
        }
    }

    fn read(&mut self) -> Reply {
        let mut line = Vec::new();
        self.r.read_until(b'\n', &mut line).unwrap();
        let body = String::from_utf8_lossy(&line[1..line.len() - 2]).to_string();
        match line[0] {
            b'+' => Reply::Simple(body),
            b'-' => Reply::Error(body),
            b':' => Reply::Int(body.parse().unwrap()),
            b'$' => {
                let n: i64 = body.parse().unwrap();
                if n < 0 {
                    return Reply::Bulk(None);
                }
                let mut v = vec![0; n as usize + 2];
                self.r.read_exact(&mut v).unwrap();
                v.truncate(n as usize);
                Reply::Bulk(Some(v))
            }
            b'*' => {
                let n: usize = body.parse().unwrap();
                Reply::Array((0..n).map(|_| self.read()).collect())
            }
            c => panic!("unexpected reply type {:?}", c as char),
        }
    }

    fn cmd(&mut self, args: &[&[u8]]) -> Reply {
        let mut buf = Vec::new();
        Self::encode(&mut buf, args);
        self.w.write_all(&buf).unwrap();
        self.read()
    }

    /// Sends many commands in one write and checks every reply is not an error.
    fn pipeline(&mut self, cmds: &[Vec<Vec<u8>>]) {
        let mut buf = Vec::new();
        for c in cmds {
            let args: Vec<&[u8]> = c.iter().map(|a| a.as_slice()).collect();
            Self::encode(&mut buf, &args);
        }
        self.w.write_all(&buf).unwrap();
        for _ in cmds {
            let r = self.read();
            assert!(!matches!(r, Reply::Error(_)), "{r:?}");
        }
    }

    /// One SCAN call: (next cursor, keys).
    fn scan(&mut self, cursor: &[u8], opts: &[&[u8]]) -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut args: Vec<&[u8]> = vec![b"SCAN", cursor];
        args.extend_from_slice(opts);
        match self.cmd(&args) {
            Reply::Array(mut v) if v.len() == 2 => {
                let keys = match v.pop().unwrap() {
                    Reply::Array(ks) => ks
                        .into_iter()
                        .map(|k| match k {
                            Reply::Bulk(Some(k)) => k,
                            other => panic!("bad key {other:?}"),
                        })
                        .collect(),
                    other => panic!("bad SCAN keys {other:?}"),
                };
                let Reply::Bulk(Some(c)) = v.pop().unwrap() else {
                    panic!("bad SCAN cursor");
                };
                (c, keys)
            }
            other => panic!("bad SCAN reply {other:?}"),
        }
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

fn server() -> ServerHandle {
    ServerHandle::start(Config {
        port: 0,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn scan_returns_every_stable_key_while_the_table_grows_and_shrinks() {
    let h = server();
    let mut c = Client::connect(&h);
    const STABLE: usize = 3000;
    c.pipeline(&sets("stable:", 0..STABLE));
    // Keys that come and go: they may or may not be returned.
    c.pipeline(&sets("gone:", 0..2000));

    let mut seen = HashSet::new();
    let mut cursor = b"0".to_vec();
    let mut step = 0;
    loop {
        let (next, keys) = c.scan(&cursor, &[b"COUNT", b"25"]);
        seen.extend(keys);
        cursor = next;
        step += 1;
        match step {
            // Grow: several doublings of the table mid-scan.
            10 => c.pipeline(&sets("grow:", 0..40_000)),
            // Shrink well below the starting size.
            30 => {
                c.pipeline(&dels("grow:", 0..40_000));
                c.pipeline(&dels("gone:", 0..2000));
            }
            // Grow again, then shrink again late in the scan.
            60 => c.pipeline(&sets("late:", 0..10_000)),
            90 => c.pipeline(&dels("late:", 0..10_000)),
            _ => {}
        }
        // Small churn on every step.
        c.pipeline(&sets(&format!("churn{step}:"), 0..5));
        if step > 3 {
            c.pipeline(&dels(&format!("churn{}:", step - 3), 0..5));
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
    let h = server();
    let mut c = Client::connect(&h);
    c.pipeline(&sets("a:", 0..500));
    c.pipeline(&sets("b:", 0..500));
    let mut seen = HashSet::new();
    let mut cursor = b"0".to_vec();
    for _ in 0..100_000 {
        let (next, keys) = c.scan(&cursor, &[b"MATCH", b"a:*", b"TYPE", b"string"]);
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
    let h = server();
    // Without active expiry the expired keys stay in the table, so KEYS and
    // SCAN must skip them on their own.
    h.shared.store.lock().active_expire = false;
    let mut c = Client::connect(&h);
    c.pipeline(&sets("live:", 0..100));
    c.pipeline(&sets("dead:", 0..100));
    let pexpires: Vec<Vec<Vec<u8>>> = (0..100)
        .map(|i| {
            vec![
                b"PEXPIRE".to_vec(),
                format!("dead:{i}").into_bytes(),
                b"1".to_vec(),
            ]
        })
        .collect();
    c.pipeline(&pexpires);
    std::thread::sleep(Duration::from_millis(20));

    let Reply::Array(keys) = c.cmd(&[b"KEYS", b"*"]) else {
        panic!("KEYS");
    };
    assert_eq!(keys.len(), 100);
    let mut seen = HashSet::new();
    let mut cursor = b"0".to_vec();
    for _ in 0..100_000 {
        let (next, keys) = c.scan(&cursor, &[b"COUNT", b"3"]);
        seen.extend(keys);
        cursor = next;
        if cursor == b"0" {
            break;
        }
    }
    assert_eq!(seen.len(), 100);
    assert!(seen.iter().all(|k| k.starts_with(b"live:")));
    assert_eq!(c.cmd(&[b"EXISTS", b"dead:1"]), Reply::Int(0));
    assert_eq!(c.cmd(&[b"TTL", b"dead:2"]), Reply::Int(-2));
}

#[test]
fn rename_move_copy_keep_the_ttl() {
    let h = server();
    let mut c = Client::connect(&h);
    assert_eq!(c.cmd(&[b"SET", b"k", b"v"]), Reply::Simple("OK".into()));
    assert_eq!(c.cmd(&[b"EXPIRE", b"k", b"1000"]), Reply::Int(1));
    assert_eq!(c.cmd(&[b"RENAME", b"k", b"k2"]), Reply::Simple("OK".into()));
    let ttl = c.cmd(&[b"TTL", b"k2"]);
    assert!(matches!(ttl, Reply::Int(999..=1000)), "{ttl:?}");
    assert_eq!(c.cmd(&[b"COPY", b"k2", b"k3", b"DB", b"2"]), Reply::Int(1));
    assert_eq!(c.cmd(&[b"MOVE", b"k2", b"3"]), Reply::Int(1));
    assert_eq!(c.cmd(&[b"MOVE", b"k2", b"3"]), Reply::Int(0));
    assert_eq!(c.cmd(&[b"SWAPDB", b"0", b"3"]), Reply::Simple("OK".into()));
    let ttl = c.cmd(&[b"TTL", b"k2"]);
    assert!(matches!(ttl, Reply::Int(999..=1000)), "{ttl:?}");
    assert_eq!(c.cmd(&[b"SWAPDB", b"0", b"2"]), Reply::Simple("OK".into()));
    let ttl = c.cmd(&[b"TTL", b"k3"]);
    assert!(matches!(ttl, Reply::Int(999..=1000)), "{ttl:?}");
    assert_eq!(c.cmd(&[b"EXISTS", b"k2"]), Reply::Int(0));
}
