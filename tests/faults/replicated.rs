//! The fault checker's replicated set-up: a primary and two replicas
//! (latchkey-server processes, each started from a config file that
//! Sentinel rewrites, each reached through a proxy of its own that it
//! announces), three Redis Sentinels (Debian's `redis-sentinel` 7.0.15,
//! quorum 2, down after 1 s), and worker processes that take the lock
//! through the Sentinels with the bundled client (sessions resumed after
//! a failover), on servers with `tp-min-acks 1`. The faults hit the
//! servers: `kill -9` of the primary (started again once Sentinel has
//! failed over, from its own config file, as a crashed host comes back),
//! SIGSTOP of the primary until the failover is done, a partition that
//! cuts the primary off from its replicas and the Sentinels while its
//! clients still reach it (its proxy black-holes the connections that come
//! from the servers' and Sentinels' `bind-source-addr`), and a replica
//! restarted (`kill -9`, then from its config file).
//!
//! The workers log, by the machine's monotonic clock, each grant, each
//! time they checked that they still hold the lock (`LockGuard::state`
//! is `Held`) before acting on it (before the read and before the write of
//! the resource), each loss and each resume. The checker then asks: did
//! the resource (which refuses stale fencing tokens) lose an update, did
//! an accepted token go down, and did two workers ever believe they held
//! the lock at the same instant (a grant, or a check that said `Held`, of
//! one worker inside another's span from its grant to its last such
//! check)?

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::{Duration, Instant};

use super::{
    mono_ns, pct, pipe_lines, read_resource, worker_runtime, write_resource, Resource, Tally,
};
use crate::common::*;

/// The workers' session timeout (ms): the client treats its lock as
/// suspended after two thirds of it without a word from the server.
const SESSION_MS: u64 = 3000;

/// The work a worker does while holding the lock (ms), in most cycles.
const WORK_MS: u64 = 5;

const BIN: &str = env!("CARGO_BIN_EXE_latchkey-server");

/// How long one wait for the cluster may take (a failover, a re-sync).
const SETTLE: Duration = Duration::from_secs(60);

/// How long the lock may stay unavailable once the cluster has settled
/// after a fault (the promoted replica's detached sessions live 3 s, a
/// worker's wait is 5 s): longer is a hold nobody ends.
const STALL: Duration = Duration::from_secs(30);

/// A worker: loops until its deadline taking the lock through the
/// Sentinels, checking it still holds the lock before each use.
#[test]
fn fault_worker() {
    let Ok(id) = std::env::var("LK_FAULT_REPL_WORKER") else {
        return;
    };
    let lock_url = std::env::var("LK_LOCK_URL").unwrap();
    let res_url = std::env::var("LK_RES_URL").unwrap();
    let secs: u64 = std::env::var("LK_WORKER_SECS").unwrap().parse().unwrap();
    let deadline = mono_ns() + secs * 1_000_000_000;
    worker_runtime().block_on(async move {
        use latchkey::{Backoff, Client, Options};
        let opts = Options {
            session_timeout: Some(Duration::from_millis(SESSION_MS)),
            request_timeout: Some(Duration::from_secs(2)),
            connect_timeout: Duration::from_millis(500),
            reconnect: Some(Backoff {
                initial: Duration::from_millis(50),
                max: Duration::from_millis(300),
                max_attempts: None,
            }),
            ..Options::default()
        };
        let res = Client::connect(&res_url).await.unwrap();
        let client = loop {
            match Client::connect_with(&lock_url, opts.clone()).await {
                Ok(c) => break c,
                Err(_) if mono_ns() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(e) => panic!("no connection: {e}"),
            }
        };
        let mut rnd = splitmix(mono_ns() ^ id.parse::<u64>().unwrap());
        let mut states = client.session_changes();
        let wid = id.clone();
        let idc = client.clone();
        tokio::spawn(async move {
            while states.changed().await.is_ok() {
                let s = *states.borrow_and_update();
                println!("state {wid} {s:?} {}", mono_ns());
                if s != latchkey::SessionState::Suspended {
                    // Which server-side connection is this worker's now.
                    if let Ok(cid) = idc.query::<i64>(&latchkey::cmd("CLIENT").arg("ID")).await {
                        println!("conn {wid} {cid} {:?}", idc.server_addr());
                    }
                }
            }
        });
        while mono_ns() < deadline {
            let asked = mono_ns();
            let g = match client.lock("L").timeout(Duration::from_secs(5)).await {
                Ok(g) => g,
                Err(e) => {
                    let what = match &e {
                        latchkey::Error::Server(s) => {
                            s.split_whitespace().next().unwrap_or("ERR").to_string()
                        }
                        latchkey::Error::LockTimeout { .. } => "timeout".into(),
                        _ => "connection".into(),
                    };
                    println!("refused {id} {what} {}", mono_ns());
                    if std::env::var("LK_FAULT_DEBUG").is_ok() {
                        println!("debug {id} {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            };
            let at = mono_ns();
            let t = g.token();
            println!("grant {id} {t} {at} {asked}");
            let outcome = 'cycle: {
                if !held(&g, &id).await {
                    break 'cycle "dropped";
                }
                let Some(n) = read_resource(&res, t).await else {
                    break 'cycle "stale";
                };
                // Work while holding the lock; one cycle in 40 is a long
                // one (800 ms), checking the lock every 50 ms: about half
                // the time the lock is held, so about half the faults that
                // hit a holder find one that outlives the cut-off.
                if rnd(40) == 0 {
                    for _ in 0..16 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        if !held(&g, &id).await {
                            break 'cycle "dropped";
                        }
                    }
                } else {
                    tokio::time::sleep(Duration::from_millis(WORK_MS)).await;
                }
                if !held(&g, &id).await {
                    break 'cycle "dropped";
                }
                write_resource(&res, t, n).await
            };
            println!("write {id} {t} {outcome}");
            let _ = g.unlock().await;
        }
    });
}

/// Whether the guard holds its lock now (`Held`), waiting while it is
/// suspended (at most 15 s): logs `held` (with `resumed` first when it
/// was suspended) or `lost`.
async fn held(g: &latchkey::LockGuard, id: &str) -> bool {
    use latchkey::LockState;
    let start = mono_ns();
    let mut suspended = false;
    loop {
        match g.state() {
            LockState::Held => {
                let at = mono_ns();
                if suspended {
                    println!("resumed {id} {} {at} {start}", g.token());
                }
                println!("held {id} {} {at}", g.token());
                return true;
            }
            LockState::Lost => {
                let why = g.lost_reason().unwrap_or_default().replace(' ', "_");
                println!("lost {id} {} {} {why}", g.token(), mono_ns());
                return false;
            }
            LockState::Suspended => {
                suspended = true;
                if mono_ns() - start > 15_000_000_000 {
                    println!("lost {id} {} {} still_suspended", g.token(), mono_ns());
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

/// A latchkey-server started from its config file, reached through its
/// proxy (the port it announces).
struct Node {
    port: u16,
    front: Proxy,
    dir: TempDir,
    child: Option<Child>,
}

impl Node {
    fn new(i: usize, primary: Option<u16>) -> Node {
        let dir = TempDir::new(&format!("faults-node{i}"));
        let port = free_port();
        let front = Proxy::start(SocketAddr::from(([127, 0, 0, 1], port)));
        let mut conf = format!(
            "port {port}\nbind 127.0.0.1\ndir {d}\nlogfile {d}/node.log\nsave \"\"\n\
             appendonly no\nrepl-diskless-sync-delay 0\n\
             replica-announce-ip 127.0.0.1\nreplica-announce-port {f}\n\
             bind-source-addr 127.0.0.2\ntp-min-acks 1\n",
            d = dir.path(),
            f = front.addr.port()
        );
        if let Some(p) = primary {
            conf.push_str(&format!("replicaof 127.0.0.1 {p}\n"));
        }
        std::fs::write(dir.0.join("node.conf"), conf).unwrap();
        let mut n = Node {
            port,
            front,
            dir,
            child: None,
        };
        n.launch();
        n
    }

    fn conf(&self) -> PathBuf {
        self.dir.0.join("node.conf")
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Starts the server from its config file; waits until it answers.
    fn launch(&mut self) {
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.0.join("stderr.log"))
            .unwrap();
        let child = Command::new(BIN)
            .arg(self.conf())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("spawn latchkey-server");
        self.child = Some(child);
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(c) = self.child.as_mut() {
                assert!(c.try_wait().unwrap().is_none(), "the node exited");
            }
            if std::net::TcpStream::connect(self.addr()).is_ok()
                && Conn::new(self.addr()).cmd(&["PING"]) == V::Simple("PONG".into())
            {
                return;
            }
            assert!(Instant::now() < deadline, "the node does not answer");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn signal(&self, sig: libc::c_int) {
        if let Some(c) = &self.child {
            // SAFETY: a child process of ours.
            unsafe { libc::kill(c.id() as libc::pid_t, sig) };
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.0.join("node.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// `INFO replication` fields, asked directly (not through the proxy).
    /// Empty when the node does not answer (it is restarting, or it
    /// closed the connection); a node that exited on its own fails the
    /// run.
    fn replication(&self) -> HashMap<String, String> {
        self.assert_alive();
        let Some(text) = info_of(self.addr(), "replication") else {
            return HashMap::new();
        };
        text.lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The process has not exited by itself (a crash): if it has, its
    /// stderr and log are printed and the run fails.
    fn assert_alive(&self) {
        let Some(c) = &self.child else { return };
        let (pid, mut status) = (c.id() as libc::pid_t, 0);
        // SAFETY: waitpid with WNOHANG on our own child; one that still
        // runs is left to `Child::wait` later.
        let exited = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) == pid };
        if exited {
            let err = std::fs::read_to_string(self.dir.0.join("stderr.log")).unwrap_or_default();
            panic!(
                "node on port {} exited by itself\n--- stderr:\n{err}\n--- log:\n{}",
                self.port,
                self.log_tail()
            );
        }
    }
}

/// `INFO section` asked on a connection of its own, or None if the
/// server does not answer within 2 s or closes the connection.
fn info_of(addr: SocketAddr, section: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(format!("INFO {section}\r\n").as_bytes()).ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
            continue;
        };
        let len: usize = std::str::from_utf8(buf.get(1..end)?).ok()?.parse().ok()?;
        if buf.len() >= end + 2 + len {
            return Some(String::from_utf8_lossy(&buf[end + 2..end + 2 + len]).into_owned());
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        self.kill9();
    }
}

/// A redis-sentinel process (killed on drop).
struct Sentinel {
    child: KillOnDrop,
    addr: SocketAddr,
    dir: TempDir,
}

impl Sentinel {
    fn start(master_front: u16) -> Sentinel {
        let dir = TempDir::new("faults-sentinel");
        let port = free_port();
        let conf = format!(
            "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {d}\nlogfile {d}/sentinel.log\n\
             bind-source-addr 127.0.0.3\nsentinel announce-ip 127.0.0.1\n\
             sentinel monitor m 127.0.0.1 {master_front} 2\n\
             sentinel down-after-milliseconds m 1000\n\
             sentinel failover-timeout m 3000\n",
            d = dir.path()
        );
        let file = dir.0.join("sentinel.conf");
        std::fs::write(&file, conf).unwrap();
        let child = Command::new("redis-sentinel")
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-sentinel");
        let s = Sentinel {
            child: KillOnDrop(child),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            dir,
        };
        eventually("the Sentinel answers", || {
            std::net::TcpStream::connect(s.addr).is_ok()
                && Conn::new(s.addr).cmd(&["PING"]) == V::Simple("PONG".into())
        });
        // As tests/sentinel.rs: PINGs every 400 ms so that the links the
        // promotion's CLIENT KILL closes come back before a node looks
        // down; INFO every second.
        for (what, ms) in [
            ("publish-period", "200"),
            ("info-period", "1000"),
            ("ping-period", "400"),
        ] {
            assert_eq!(
                Conn::new(s.addr).cmd(&["SENTINEL", "DEBUG", what, ms]),
                V::Simple("OK".into())
            );
        }
        s
    }

    /// The master's (announced) port as this Sentinel names it.
    fn master(&self) -> Option<u16> {
        let _ = &self.child;
        match Conn::new(self.addr).cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "m"]) {
            V::Arr(a) if a.len() == 2 => match &a[1] {
                V::Bulk(p) => String::from_utf8_lossy(p).parse().ok(),
                _ => None,
            },
            _ => None,
        }
    }

    /// Replicas this Sentinel can fail over to: flags exactly `slave`,
    /// link to their master up.
    fn good_replicas(&self) -> usize {
        let V::Arr(rs) = Conn::new(self.addr).cmd(&["SENTINEL", "REPLICAS", "m"]) else {
            return 0;
        };
        rs.iter()
            .filter(|r| {
                let V::Arr(kv) = r else { return false };
                let f = |name: &str| {
                    kv.chunks(2).find_map(|p| match p {
                        [V::Bulk(k), V::Bulk(v)] if k == name.as_bytes() => {
                            Some(String::from_utf8_lossy(v).into_owned())
                        }
                        _ => None,
                    })
                };
                f("flags").as_deref() == Some("slave")
                    && f("master-link-status").as_deref() == Some("ok")
            })
            .count()
    }

    fn others(&self) -> usize {
        match Conn::new(self.addr).cmd(&["SENTINEL", "SENTINELS", "m"]) {
            V::Arr(a) => a.len(),
            _ => 0,
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.0.join("sentinel.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Fault {
    KillPrimary,
    StopPrimary,
    Partition,
    RestartReplica,
}

const FAULTS: [Fault; 4] = [
    Fault::KillPrimary,
    Fault::StopPrimary,
    Fault::Partition,
    Fault::RestartReplica,
];

struct Cluster {
    nodes: Vec<Node>,
    sentinels: Vec<Sentinel>,
}

impl Cluster {
    /// The node whose proxy port is `front`.
    fn by_front(&self, front: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.front.addr.port() == front)
            .expect("a node of ours")
    }

    /// Every Sentinel names one master, which is a master with two
    /// replicas online, and every Sentinel can fail over to both of them.
    fn settled(&self) -> Option<usize> {
        let m = self.sentinels[0].master()?;
        if self.sentinels.iter().any(|s| s.master() != Some(m)) {
            return None;
        }
        let i = self.by_front(m);
        let r = self.nodes[i].replication();
        let online = (0..2)
            .filter(|k| {
                r.get(&format!("slave{k}"))
                    .is_some_and(|v| v.contains("state=online"))
            })
            .count();
        if r.get("role").map(String::as_str) != Some("master") || online < 2 {
            return None;
        }
        if self.sentinels.iter().any(|s| s.good_replicas() < 2) {
            return None;
        }
        Some(i)
    }

    /// Waits (bounded) until `settled`; returns the master's index.
    fn settle(&self) -> usize {
        let deadline = Instant::now() + SETTLE;
        loop {
            if let Some(i) = self.settled() {
                return i;
            }
            if Instant::now() > deadline {
                for (i, n) in self.nodes.iter().enumerate() {
                    eprintln!("--- node {i} ({}):\n{}", n.front.addr, n.log_tail());
                }
                eprintln!("--- sentinel:\n{}", self.sentinels[0].log_tail());
                panic!("the cluster did not settle in {SETTLE:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The lock is not held for more than 30 s on master `m` (a worker
    /// holds it 800 ms at most): a hold nobody ends would stop every
    /// worker. Dumps what the master knows, and fails, if it is.
    fn not_stuck(&self, m: usize) {
        let addr = self.nodes[m].addr();
        let mut c = Conn::new(addr);
        let V::Arr(info) = c.cmd(&["TPINFO", "L"]) else {
            return;
        };
        let since = info.chunks(2).find_map(|p| match p {
            [V::Bulk(k), V::Int(v)] if k == b"since" => Some(*v),
            _ => None,
        });
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        if since.is_some_and(|t| now - t > 30_000) {
            self.dump(m);
            panic!("the lock has been held for {} ms", now - since.unwrap());
        }
    }

    /// What master `m` knows of the lock, and its log's end.
    fn dump(&self, m: usize) {
        let mut c = Conn::new(self.nodes[m].addr());
        for what in [
            &["TPINFO", "L"][..],
            &["INFO", "locks"],
            &["CLIENT", "LIST"],
            &["TPQUEUE", "L"],
        ] {
            let v = match c.cmd(what) {
                V::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
                v => format!("{v:?}"),
            };
            eprintln!("{what:?}: {v}");
        }
        eprintln!("--- node {m} log:\n{}", self.nodes[m].log_tail());
    }

    /// Waits (bounded) until a Sentinel names another master than `old`
    /// and the third node follows it: the failover is done. Returns when.
    fn failed_over(&self, old: usize) -> Option<u64> {
        let deadline = Instant::now() + SETTLE;
        let mut named = None;
        while Instant::now() < deadline {
            if named.is_none() {
                if let Some(m) = self.sentinels.iter().find_map(|s| s.master()) {
                    let i = self.by_front(m);
                    if i != old {
                        named = Some((i, mono_ns()));
                    }
                }
            }
            if let Some((new, at)) = named {
                let front = self.nodes[new].front.addr.port().to_string();
                let third = (0..3).find(|k| *k != old && *k != new).unwrap();
                let r = self.nodes[third].replication();
                if r.get("master_port") == Some(&front)
                    && r.get("master_link_status").map(String::as_str) == Some("up")
                {
                    return Some(at);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

/// Whether a worker said, after `at`, that it was granted the lock or
/// resumed it.
fn progressed(lines: &[String], at: u64) -> bool {
    lines.iter().any(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["grant", _, _, t, _] | ["resumed", _, _, t, _] => {
                t.parse::<u64>().is_ok_and(|t| t > at)
            }
            _ => false,
        }
    })
}

/// A small random number generator (splitmix64): `rnd(n)` is in 0..n.
fn splitmix(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut state = seed;
    move |n| {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

fn spawn_worker(id: usize, url: &str, res: &str, secs: u64, log: &Sender<String>) -> KillOnDrop {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "replicated::fault_worker",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("LK_FAULT_REPL_WORKER", id.to_string())
        .env("LK_LOCK_URL", url)
        .env("LK_RES_URL", res)
        .env("LK_WORKER_SECS", secs.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    pipe_lines(&mut child, log);
    KillOnDrop(child)
}

struct Report {
    tally: Tally,
    /// Two workers believing they held the lock at one instant.
    overlaps: Vec<String>,
    failovers: usize,
    faults: HashMap<Fault, usize>,
    /// ms from a fault to the next grant or resume, by kind.
    unavailable: HashMap<Fault, Vec<f64>>,
    resumed: usize,
    lost: HashMap<String, usize>,
    refusals: HashMap<String, usize>,
}

/// Runs the replicated checker for `secs` with `k` workers.
fn check(secs: u64, k: usize) -> Report {
    require_tool("redis-sentinel", "redis-sentinel");
    let first = Node::new(0, None);
    let front0 = first.front.addr.port();
    let mut nodes = vec![first];
    for i in 1..3 {
        nodes.push(Node::new(i, Some(front0)));
    }
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(front0)).collect();
    let cluster = Cluster { nodes, sentinels };
    let deadline = Instant::now() + SETTLE;
    while cluster.sentinels.iter().any(|s| s.others() < 2) {
        assert!(Instant::now() < deadline, "the Sentinels do not meet");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut cluster = cluster;
    cluster.settle();
    let resource = start();
    let res_url = format!("redis://{}", resource.addr);
    let list: Vec<String> = cluster
        .sentinels
        .iter()
        .map(|s| s.addr.to_string())
        .collect();
    let url = format!("redis-sentinel://{}#m", list.join(","));
    let (log_tx, log_rx): (Sender<String>, Receiver<String>) = channel();
    // The workers stop on their own a little after the faults end.
    let workers: Vec<KillOnDrop> = (0..k)
        .map(|id| spawn_worker(id, &url, &res_url, secs + 15, &log_tx))
        .collect();
    let mut rnd = splitmix(mono_ns());
    let mut injected: Vec<(Fault, u64)> = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    let mut failovers = 0;
    let end = Instant::now() + Duration::from_secs(secs);
    // Bounded: one fault per round until the end time, each wait bounded.
    while Instant::now() < end {
        let m = cluster.settle();
        cluster.not_stuck(m);
        // The lock works again before the next fault: a grant or a resume
        // after the last one (a fault every few seconds would otherwise
        // keep restarting the promoted replica's detached-session timers,
        // and measure nothing).
        if let Some(&(_, at)) = injected.last() {
            let deadline = Instant::now() + STALL;
            let mut checked = lines.len();
            loop {
                lines.extend(log_rx.try_iter());
                if progressed(&lines[checked..], at) {
                    break;
                }
                checked = lines.len();
                if Instant::now() > deadline {
                    cluster.dump(m);
                    if let Ok(path) = std::env::var("LK_FAULT_LOG") {
                        std::fs::write(path, lines.join("\n")).unwrap();
                    }
                    panic!("no grant nor resume in {STALL:?} after the cluster settled");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        std::thread::sleep(Duration::from_millis(300 + rnd(1200)));
        let f = FAULTS[rnd(FAULTS.len() as u64) as usize];
        // A fault on the primary hits a holder in its work: the lock
        // held and its hand-over told (bounded: 2 s).
        if f != Fault::RestartReplica {
            let primary = cluster.nodes[m].addr();
            let mut c = Conn::new(primary);
            let until = Instant::now() + Duration::from_secs(2);
            while Instant::now() < until {
                let owner = c.cmd(&["TPOWNER", "L"]);
                let told = match c.cmd(&["INFO", "locks"]) {
                    V::Bulk(b) => {
                        String::from_utf8_lossy(&b).contains("grants_awaiting_acks:0\r\n")
                    }
                    _ => false,
                };
                if owner != V::Nil && told {
                    std::thread::sleep(Duration::from_millis(2));
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let at = mono_ns();
        if std::env::var("LK_FAULT_DEBUG").is_ok() {
            eprintln!("{f:?} on node {m} at {at}");
        }
        match f {
            Fault::KillPrimary => {
                cluster.nodes[m].kill9();
                let done = cluster.failed_over(m);
                assert!(done.is_some(), "no failover after kill -9 of the primary");
                cluster.nodes[m].launch();
            }
            Fault::StopPrimary => {
                cluster.nodes[m].signal(libc::SIGSTOP);
                let done = cluster.failed_over(m);
                cluster.nodes[m].signal(libc::SIGCONT);
                assert!(done.is_some(), "no failover while the primary was stopped");
            }
            Fault::Partition => {
                cluster.nodes[m].front.isolate();
                let done = cluster.failed_over(m);
                cluster.nodes[m].front.heal();
                assert!(done.is_some(), "no failover while the primary was cut off");
            }
            Fault::RestartReplica => {
                let r = (m + 1 + rnd(2) as usize) % 3;
                cluster.nodes[r].kill9();
                cluster.nodes[r].launch();
            }
        }
        if f != Fault::RestartReplica {
            failovers += 1;
        }
        injected.push((f, at));
    }
    // The workers' last cycles end; then nothing more is said.
    cluster.settle();
    drop(workers);
    drop(log_tx);
    lines.extend(log_rx.iter());
    if let Ok(path) = std::env::var("LK_FAULT_LOG") {
        std::fs::write(path, lines.join("\n")).unwrap();
    }
    analyse(lines, k, &resource, injected, failovers)
}

fn analyse(
    lines: Vec<String>,
    k: usize,
    resource: &latchkey_server::runtime::ServerHandle,
    injected: Vec<(Fault, u64)>,
    failovers: usize,
) -> Report {
    // (worker, token) -> (granted at, last `held` at)
    let mut spans: HashMap<(usize, u64), (u64, u64)> = HashMap::new();
    let mut grants = 0;
    let mut back: Vec<u64> = Vec::new();
    let (mut accepted, mut refused, mut resumed) = (0, 0, 0);
    let mut lost: HashMap<String, usize> = HashMap::new();
    let mut refusals: HashMap<String, usize> = HashMap::new();
    let mut granted_workers = std::collections::HashSet::new();
    for line in &lines {
        let Some(i) = ["grant ", "held ", "write ", "resumed ", "lost ", "refused "]
            .iter()
            .filter_map(|w| line.find(w))
            .min()
        else {
            continue;
        };
        let w: Vec<&str> = line[i..].split_whitespace().collect();
        let num = |s: &str| -> u64 { s.parse().unwrap() };
        match w.as_slice() {
            ["grant", id, t, at, _asked] => {
                grants += 1;
                let key = (num(id) as usize, num(t));
                granted_workers.insert(key.0);
                let at = num(at);
                let e = spans.entry(key).or_insert((at, at));
                e.0 = e.0.min(at);
                back.push(at);
            }
            ["held", id, t, at] => {
                let key = (num(id) as usize, num(t));
                let at = num(at);
                let e = spans.entry(key).or_insert((at, at));
                e.1 = e.1.max(at);
            }
            ["resumed", _, _, at, _] => {
                resumed += 1;
                back.push(num(at));
            }
            ["lost", _, _, _, why] => *lost.entry(why.to_string()).or_default() += 1,
            ["refused", _, what, _] => *refusals.entry(what.to_string()).or_default() += 1,
            ["write", _, _, "ok"] => accepted += 1,
            ["write", _, _, _] => refused += 1,
            _ => {}
        }
    }
    // Two spans of different grants that meet: two believers at once.
    let mut sorted: Vec<((usize, u64), (u64, u64))> = spans.into_iter().collect();
    sorted.sort_by_key(|(_, (start, _))| *start);
    let mut overlaps = Vec::new();
    let mut reach: Option<((usize, u64), u64)> = None;
    for (key, (start, end)) in &sorted {
        if let Some((other, until)) = reach {
            if *start <= until && other.0 != key.0 {
                overlaps.push(format!(
                    "worker {} (token {}) believed it held the lock until {until}, worker {} (token {}) from {start}",
                    other.0, other.1, key.0, key.1
                ));
            }
        }
        if reach.is_none_or(|(_, until)| *end > until) {
            reach = Some((*key, *end));
        }
    }
    back.sort_unstable();
    let mut faults = HashMap::new();
    let mut unavailable: HashMap<Fault, Vec<f64>> = HashMap::new();
    for (f, at) in &injected {
        *faults.entry(*f).or_insert(0) += 1;
        if let Some(next) = back.iter().find(|b| **b > *at) {
            unavailable
                .entry(*f)
                .or_default()
                .push((next - at) as f64 / 1e6);
        }
    }
    Report {
        tally: Tally {
            grants,
            accepted,
            refused,
            resource: Resource::read(resource.addr),
            workers_without_grants: (0..k).filter(|w| !granted_workers.contains(w)).count(),
        },
        overlaps,
        failovers,
        faults,
        unavailable,
        resumed,
        lost,
        refusals,
    }
}

/// Prints the report; checks what must hold.
fn judge(secs: u64, k: usize, mut r: Report) {
    println!(
        "replicated fault checker: {secs} s, {k} workers, {} failovers: {}, two holders at once {}",
        r.failovers,
        r.tally.summary(),
        r.overlaps.len()
    );
    println!(
        "  sessions resumed {}, locks lost {:?}, acquisitions refused {:?}",
        r.resumed, r.lost, r.refusals
    );
    for f in FAULTS {
        let v = r.unavailable.entry(f).or_default();
        println!(
            "  {:?}: {} injected; from the fault to the next grant or resume: median {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            f,
            r.faults.get(&f).copied().unwrap_or(0),
            pct(v, 0.5),
            pct(v, 0.99),
            pct(v, 1.0)
        );
    }
    for o in r.overlaps.iter().take(5) {
        println!("  {o}");
    }
    assert!(r.overlaps.is_empty(), "two workers held the lock at once");
    let min_grants = std::env::var("LK_FAULT_MIN_GRANTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(50);
    r.tally.assert_safe(min_grants);
    let min_failovers = std::env::var("LK_FAULT_MIN_FAILOVERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    assert!(
        r.failovers >= min_failovers,
        "{} failovers, fewer than {min_failovers}",
        r.failovers
    );
}

#[test]
fn replicated_fault_checker() {
    if std::env::var("LK_FAULT_WORKER").is_ok() || std::env::var("LK_FAULT_REPL_WORKER").is_ok() {
        return;
    }
    let _one = super::ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let secs = std::env::var("LK_FAULT_REPL_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let k = 4;
    let r = check(secs, k);
    judge(secs, k, r);
}
