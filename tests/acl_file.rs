//! The same `users.acl` loaded by latchkey and by redis-server 7.0.15, side
//! by side: ACL LIST, GETUSER, every user's allowed and denied commands
//! (their replies byte for byte, in RESP2 and RESP3), the ACL LOG they
//! leave, ACL SAVE's file, and ACL LOAD of a broken file.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

// Rules whose text both describe alike: latchkey's command table differs
// from Redis's (it lacks streams, and has its own commands), so a
// user made of many overlapping categories may be described with other
// category rules (README, "Differences"); these are not.
const USERS: &str = "\
user default on nopass ~* &* +@all
user admin on #240be518fabd2724ddb6f04eeb1da5967448d7e831c08c8fa822809f74c720a9 ~* &* +@all
user app on >apppass ~app:* %R~shared:* &app.* -@all +@string +@connection +publish -append
user reader on >rp %R~* resetchannels -@all +get +mget +exists +ping +acl|whoami
user selectors on >sp ~s1:* resetchannels -@all +get (~s2:* +set) (%W~s3:* +append +set)
user firstarg on >fp ~* resetchannels -@all +select|0 +ping
user disabled off >dp ~* +@all
user nopassuser on nopass ~np:* resetchannels -@all +@string
";

struct Server {
    child: Child,
    addr: std::net::SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(bin: &str, aclfile: &str, dir: &str, extra: &[&str]) -> Server {
    let port = free_port();
    let mut child = Command::new(bin)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--aclfile", aclfile, "--dir", dir])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    // Bounded: 5 s to answer.
    for _ in 0..100 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Server { child, addr };
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("{bin} did not start");
}

/// Each user's session: AUTH, then commands; every reply compared.
const SESSIONS: &[(&str, &str, &[&[&str]])] = &[
    (
        "app",
        "apppass",
        &[
            &["SET", "app:1", "v"],
            &["GET", "app:1"],
            &["APPEND", "app:1", "v"],
            &["GET", "shared:x"],
            &["SET", "shared:x", "v"],
            &["GET", "other"],
            &["FLUSHDB"],
            &["CONFIG", "GET", "port"],
            &["PUBLISH", "app.news", "hi"],
            &["PUBLISH", "other", "hi"],
            &["ACL", "WHOAMI"],
            &["MULTI"],
            &["SET", "app:2", "v"],
            &["GET", "nope"],
            &["EXEC"],
        ],
    ),
    (
        "reader",
        "rp",
        &[
            &["GET", "app:1"],
            &["MGET", "app:1", "x"],
            &["SET", "x", "1"],
            &["EXISTS", "x"],
            &["ACL", "WHOAMI"],
            &["ACL", "LIST"],
        ],
    ),
    (
        "selectors",
        "sp",
        &[
            &["GET", "s1:a"],
            &["SET", "s1:a", "v"],
            &["SET", "s2:a", "v"],
            &["GET", "s2:a"],
            &["SET", "s3:a", "v"],
            &["APPEND", "s3:a", "w"],
            &["GET", "s3:a"],
        ],
    ),
    (
        "firstarg",
        "fp",
        &[&["SELECT", "0"], &["SELECT", "1"], &["PING"], &["GET", "k"]],
    ),
    ("disabled", "dp", &[&["PING"]]),
    (
        "nopassuser",
        "anything",
        &[&["SET", "np:1", "v"], &["SET", "x", "v"]],
    ),
    ("admin", "wrong", &[&["PING"]]),
    ("admin", "password", &[&["ACL", "WHOAMI"]]),
];

/// Single-command rules in a row ("+get +set -del") sorted: Redis writes
/// them in its command dict's order, which changes from run to run.
fn sort_single_rules(s: &str) -> String {
    let pieces: Vec<&str> = s.split(' ').collect();
    // A rule may end a bulk string ("+get\r\n$60...") or a selector ("+get)").
    let cut = |p: &str| p.find(['\r', ')']).unwrap_or(p.len());
    let single = |p: &str| {
        let head = &p[..cut(p)];
        head.len() > 1
            && (head.starts_with('+') || head.starts_with('-'))
            && !head[1..].starts_with('@')
    };
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < pieces.len() {
        if !single(pieces[i]) {
            out.push(pieces[i].to_string());
            i += 1;
            continue;
        }
        let mut j = i;
        while j < pieces.len()
            && single(pieces[j])
            && (j == i || cut(pieces[j - 1]) == pieces[j - 1].len())
        {
            j += 1;
        }
        let last = pieces[j - 1];
        let tail = &last[cut(last)..];
        let mut heads: Vec<&str> = pieces[i..j].iter().map(|p| &p[..cut(p)]).collect();
        heads.sort();
        let n = heads.len();
        for (k, h) in heads.into_iter().enumerate() {
            out.push(if k + 1 == n {
                format!("{h}{tail}")
            } else {
                h.to_string()
            });
        }
        i = j;
    }
    out.join(" ")
}

fn transcript(addr: std::net::SocketAddr, resp3: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut admin = Conn::proto(addr, resp3);
    for q in [
        &["ACL", "LIST"][..],
        &["ACL", "USERS"],
        &["ACL", "GETUSER", "selectors"],
        &["ACL", "GETUSER", "app"],
        &["ACL", "GETUSER", "firstarg"],
        &["ACL", "DRYRUN", "app", "set", "shared:x", "v"],
        &["ACL", "DRYRUN", "reader", "get", "x"],
        &["ACL", "DRYRUN", "selectors", "append", "s2:x", "v"],
    ] {
        out.push(format!(
            "{q:?} -> {}",
            sort_single_rules(&admin.call_str(q))
        ));
    }
    for (user, pass, cmds) in SESSIONS {
        let mut c = Conn::proto(addr, resp3);
        out.push(format!(
            "AUTH {user} -> {}",
            c.call_str(&["AUTH", user, pass])
        ));
        for q in cmds.iter() {
            out.push(format!(
                "{user} {q:?} -> {}",
                sort_single_rules(&c.call_str(q))
            ));
        }
    }
    // The log's entries, without what differs by nature (age, client line).
    let log = admin.cmd(&["ACL", "LOG"]);
    let V::Arr(entries) = log else {
        panic!("{log:?}")
    };
    for e in entries {
        let fields = match e {
            V::Arr(f) => f,
            e => panic!("{e:?}"),
        };
        let kept: Vec<String> = fields
            .chunks(2)
            .filter(
                |kv| !matches!(&kv[0], V::Bulk(k) if k == b"age-seconds" || k == b"client-info"),
            )
            .map(|kv| format!("{:?}={:?}", kv[0], kv[1]))
            .collect();
        out.push(format!("log {}", kept.join(" ")));
    }
    out.push(admin.call_str(&["ACL", "LOG", "RESET"]));
    out
}

#[test]
fn latchkey_and_redis_load_the_same_acl_file_alike() {
    common::require_tool("redis-server", "redis-server");
    let dir = TempDir::new("aclfile-diff");
    let (lk_dir, rd_dir) = (format!("{}/lk", dir.path()), format!("{}/rd", dir.path()));
    std::fs::create_dir_all(&lk_dir).unwrap();
    std::fs::create_dir_all(&rd_dir).unwrap();
    for d in [&lk_dir, &rd_dir] {
        std::fs::write(format!("{d}/users.acl"), USERS).unwrap();
    }
    let lk = spawn(
        env!("CARGO_BIN_EXE_latchkey-server"),
        &format!("{lk_dir}/users.acl"),
        &lk_dir,
        &[],
    );
    let rd = spawn(
        "redis-server",
        &format!("{rd_dir}/users.acl"),
        &rd_dir,
        &["--daemonize", "no", "--appendonly", "no"],
    );
    for resp3 in [false, true] {
        let a = transcript(lk.addr, resp3);
        let b = transcript(rd.addr, resp3);
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x, y, "latchkey vs redis (resp3: {resp3})");
        }
    }
    // ACL SAVE writes the same file.
    let mut la = Conn::ready(lk.addr);
    let mut ra = Conn::ready(rd.addr);
    assert_eq!(la.cmd(&["ACL", "SAVE"]), ok());
    assert_eq!(ra.cmd(&["ACL", "SAVE"]), ok());
    let saved = |d: &str| {
        std::fs::read_to_string(format!("{d}/users.acl"))
            .unwrap()
            .lines()
            .map(sort_single_rules)
            .collect::<Vec<_>>()
    };
    assert_eq!(saved(&lk_dir), saved(&rd_dir));
    // ACL LOAD of a broken file: the same errors, nothing changed.
    for d in [&lk_dir, &rd_dir] {
        std::fs::write(
            format!("{d}/users.acl"),
            "user a on +nosuch\nbogus line\nuser a on\nuser b (~x\n",
        )
        .unwrap();
    }
    let strip = |s: String, d: &str| s.replace(d, "DIR");
    assert_eq!(
        strip(la.call_str(&["ACL", "LOAD"]), &lk_dir),
        strip(ra.call_str(&["ACL", "LOAD"]), &rd_dir)
    );
    assert_eq!(
        la.call_str(&["ACL", "USERS"]),
        ra.call_str(&["ACL", "USERS"])
    );
}
