//! Helpers of the replication tests (`tests/replication.rs`, the
//! primary's side, `tests/replica.rs`, the replica's, and
//! `tests/lock_replication.rs`): a latchkey node and REPLICAOF, INFO
//! fields, the digest, a bounded wait for a replica to be in sync, a
//! dataset of every type and live writes.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::*;
use latchkey_server::config::Config;
use latchkey_server::runtime::ServerHandle;

/// A latchkey server for replication tests (DEBUG allowed, no diskless
/// sync delay), changed by `tweak`.
pub fn latchkey(tweak: impl FnOnce(&mut Config)) -> ServerHandle {
    let mut c = Config {
        port: 0,
        dir: own_dir(),
        enable_debug_command: "yes".into(),
        ..Default::default()
    };
    c.repl.diskless_sync_delay = 0;
    tweak(&mut c);
    start_with(c)
}

/// REPLICAOF 127.0.0.1 <primary's port> on `replica`.
pub fn replicaof(replica: SocketAddr, primary: SocketAddr) {
    let port = primary.port().to_string();
    assert_eq!(
        Conn::new(replica).cmd(&["REPLICAOF", "127.0.0.1", &port]),
        ok()
    );
}

/// A latchkey replica of `primary` as a process of the built binary,
/// started and answering (`restart` starts it again on its directory).
pub struct ReplicaProc {
    pub proc: Proc,
    pub addr: SocketAddr,
    args: Vec<String>,
}

impl ReplicaProc {
    const BIN: &'static str = env!("CARGO_BIN_EXE_latchkey-server");

    pub fn start(primary: SocketAddr, dir: &TempDir) -> ReplicaProc {
        let args: Vec<String> = [
            "--replicaof",
            "127.0.0.1",
            &primary.port().to_string(),
            "--enable-debug-command",
            "yes",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut proc = Proc::spawn(Self::BIN, dir, &argv);
        assert!(proc.started().is_none(), "the replica starts");
        let addr = proc.addr;
        ReplicaProc { proc, addr, args }
    }

    pub fn restart(&mut self, dir: &TempDir) {
        let argv: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.proc.restart(Self::BIN, dir, &argv);
        assert!(self.proc.started().is_none(), "the replica starts again");
    }
}

/// The bound on a sync.
pub const SYNC_WAIT: Duration = Duration::from_secs(30);

pub fn info(addr: SocketAddr, section: &str) -> String {
    match Conn::new(addr).cmd(&["INFO", section]) {
        V::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO {section}: {other:?}"),
    }
}

pub fn digest(addr: SocketAddr) -> V {
    Conn::new(addr).cmd(&["DEBUG", "DIGEST"])
}

/// Waits until the replica's link is up and its offset is the primary's.
pub fn synced(primary: SocketAddr, replica: SocketAddr) {
    let deadline = Instant::now() + SYNC_WAIT;
    loop {
        let r = info(replica, "replication");
        let p = info(primary, "replication");
        let up = info_field(&r, "master_link_status") == "up";
        let ours = info_field(&p, "master_repl_offset");
        if up && info_field(&r, "slave_repl_offset") == ours {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "replica not in sync:\n{r}\nprimary:\n{p}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn assert_same(primary: SocketAddr, replica: SocketAddr) {
    synced(primary, replica);
    let d = digest(primary);
    assert!(matches!(d, V::Simple(_)), "{d:?}");
    assert_eq!(d, digest(replica), "DEBUG DIGEST differs");
}

/// One key of every type, keys with TTLs, a second database.
pub fn dataset(addr: SocketAddr) {
    let mut c = Conn::ready(addr);
    let cmds: &[&[&str]] = &[
        &["SET", "s", "hello"],
        &["SET", "n", "12345"],
        &["RPUSH", "l", "a", "b", "c", "d"],
        &["HSET", "h", "f1", "v1", "f2", "v2"],
        &["SADD", "st", "x", "y", "z"],
        &["SADD", "si", "1", "2", "3"],
        &["ZADD", "z", "1", "one", "2.5", "two", "-3", "three"],
        &["XADD", "x", "1-1", "f", "v"],
        &["XADD", "x", "2-1", "f", "w"],
        &["XGROUP", "CREATE", "x", "g", "0"],
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c1",
            "COUNT",
            "1",
            "STREAMS",
            "x",
            ">",
        ],
        &["SET", "ttl", "v", "EX", "1000"],
        &["HSET", "httl", "a", "b"],
        &["PEXPIRE", "httl", "500000"],
        &["PFADD", "hll", "a", "b", "c"],
        &["SELECT", "1"],
        &["SET", "db1", "one"],
        &["LPUSH", "db1list", "q"],
        &["SELECT", "0"],
    ];
    for cmd in cmds {
        let r = c.cmd(cmd);
        assert!(!matches!(r, V::Err(_)), "{cmd:?}: {r:?}");
    }
    // A large value and a big collection too.
    let big = "x".repeat(100_000);
    assert_eq!(c.cmd(&["SET", "big", &big]), ok());
    let members: Vec<String> = (0..1000).map(|i| format!("m{i}")).collect();
    let mut args = vec!["SADD", "bigset"];
    args.extend(members.iter().map(String::as_str));
    assert_eq!(c.cmd(&args), V::Int(1000));
}

/// Writes while the replica is attached: a transaction, a script, a key
/// expiring, FLUSHDB, SWAPDB, a blocked pop served.
pub fn live_writes(addr: SocketAddr) {
    let mut c = Conn::ready(addr);
    assert_eq!(c.cmd(&["MULTI"]), ok());
    c.cmd(&["INCR", "counter"]);
    c.cmd(&["LPUSH", "l", "new"]);
    c.cmd(&["HSET", "h", "f3", "v3"]);
    assert!(matches!(c.cmd(&["EXEC"]), V::Arr(_)));
    let r = c.cmd(&[
        "EVAL",
        "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('INCRBY', KEYS[2], 5)",
        "2",
        "fromlua",
        "counter",
        "luavalue",
    ]);
    assert_eq!(r, V::Int(6));
    assert_eq!(c.cmd(&["SET", "short", "v", "PX", "50"]), ok());
    eventually("the short key expires", || {
        c.cmd(&["EXISTS", "short"]) == V::Int(0)
    });
    assert_eq!(c.cmd(&["SELECT", "3"]), ok());
    c.cmd(&["SET", "gone", "v"]);
    assert_eq!(c.cmd(&["FLUSHDB"]), ok());
    assert_eq!(c.cmd(&["SELECT", "4"]), ok());
    c.cmd(&["SET", "in4", "v"]);
    assert_eq!(c.cmd(&["SWAPDB", "4", "5"]), ok());
    assert_eq!(c.cmd(&["SELECT", "0"]), ok());
    c.cmd(&["EXPIRE", "s", "10000"]);
    c.cmd(&["ZINCRBY", "z", "2", "one"]);
    c.cmd(&["XADD", "x", "*", "f", "live"]);
    c.cmd(&["XACK", "x", "g", "1-1"]);
    c.cmd(&["DEL", "st"]);
    c.cmd(&["SETRANGE", "big", "10", "yyy"]);
}

/// SIGCONT for a stopped process, however the test ends.
pub struct Resume(String);

impl Resume {
    /// SIGSTOP to `r`, SIGCONT when dropped.
    pub fn stop(r: &RealRedis) -> Resume {
        let pid = r.pid().to_string();
        let stopped = std::process::Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .expect("kill -STOP");
        assert!(stopped.success());
        Resume(pid)
    }
}

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0])
            .status();
    }
}
