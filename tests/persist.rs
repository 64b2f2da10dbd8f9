//! RDB snapshots: SAVE and DEBUG RELOAD keep every type, TTLs and function
//! libraries (DEBUG DIGEST-VALUE equal before and after), drop keys bound
//! by SETTP; the server binary loads dir/dbfilename at start-up and
//! refuses to start over a file it cannot read. The round trips with a
//! real redis-server (its dump loaded here, ours loaded there, the same
//! DEBUG DIGEST, redis-check-rdb) are in redis-compat.

mod common;

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use latchkey::config::Config;

/// A fresh directory under the system's temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!(
            "latchkey-persist-{tag}-{}-{}",
            std::process::id(),
            latchkey::util::now_us()
        ));
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
    fn path(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn start_in(dir: &TempDir) -> latchkey::server::ServerHandle {
    start_with(Config {
        port: 0,
        enable_debug_command: "yes".into(),
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

/// The server binary, stopped on drop.
struct Proc {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(dir: &TempDir) -> Proc {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(env!("CARGO_BIN_EXE_latchkey-server"))
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--dir", &dir.path(), "--enable-debug-command", "yes"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn latchkey-server");
    Proc {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    }
}

/// Waits (bounded) for the process to exit; its status, or None if it
/// still runs (then it is listening).
fn exit_or_listening(p: &mut Proc) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(st) = p.child.try_wait().unwrap() {
            return Some(st);
        }
        if TcpStream::connect(p.addr).is_ok() {
            return None;
        }
        assert!(
            Instant::now() < deadline,
            "server neither started nor exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
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
