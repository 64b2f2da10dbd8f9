//! Redis Sentinel (Debian's redis-sentinel 7.0.15) managing latchkey
//! nodes, with the same scenario on redis-server nodes as the oracle:
//! three sentinels monitor a primary with two replicas; they discover the
//! replicas (INFO) and each other (`__sentinel__:hello` through the nodes'
//! pub/sub); after kill -9 of the primary one replica is promoted, the
//! other follows it, the data written before is on both; the old primary
//! restarted on its port is turned into a replica by Sentinel; a manual
//! `SENTINEL FAILOVER` works too. The leader's sequence of failover events
//! (+elected-leader ... +switch-master) must be the one it logs for Redis
//! nodes. Also: the transaction Sentinel sends to promote or re-point a
//! node (MULTI, SLAVEOF, CONFIG REWRITE, CLIENT KILL TYPE normal / pubsub,
//! EXEC) answers as Redis's, and a primary BUSY in a script gets Sentinel's
//! SCRIPT KILL.
//!
//! The sentinels' periods are shortened with `SENTINEL DEBUG` (hello every
//! 200 ms, INFO every 1 s as Sentinel does during a failover, PING every
//! 400 ms) to keep the wall time to seconds. Every process is killed when its guard drops, on
//! loopback ports chosen at run time; every wait is bounded.

mod common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::repl::*;
use common::*;

const LK: &str = env!("CARGO_BIN_EXE_latchkey-server");
/// The bound on a failover, a discovery or a re-configuration.
const FAILOVER_WAIT: Duration = Duration::from_secs(40);

/// One test of this file at a time: a busy script pins a core, and with
/// `down-after-milliseconds 1000` a starved primary of another test
/// would be failed over.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `f` on latchkey nodes and, at the same time, on Redis nodes (the
/// oracle): (ours, Redis's).
fn on_both<T: Send + 'static>(f: fn(Kind) -> T) -> (T, T) {
    let _one = serial();
    let redis = std::thread::spawn(move || f(Kind::Redis));
    let ours = f(Kind::Latchkey);
    (ours, redis.join().expect("the same on Redis nodes"))
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Latchkey,
    Redis,
}

/// A latchkey or redis-server process on a fixed port and directory
/// (restartable there), killed on drop.
struct Node {
    kind: Kind,
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    extra: Vec<String>,
}

impl Node {
    fn start(kind: Kind, tag: &str, extra: &[&str]) -> Node {
        if kind == Kind::Redis {
            require_tool("redis-server", "redis-server");
        }
        let mut n = Node {
            kind,
            child: None,
            port: free_port(),
            dir: TempDir::new(tag),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        n.launch();
        n
    }

    fn launch(&mut self) {
        let bin = match self.kind {
            Kind::Latchkey => LK,
            Kind::Redis => "redis-server",
        };
        let log = self.dir.0.join("node.log");
        let mut cmd = Command::new(bin);
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--dir", &self.dir.path(), "--save", ""])
            .args(["--enable-debug-command", "yes"])
            // A full sync at once (Redis's default waits 5 s for more
            // replicas), so a re-configuration ends within failover-timeout.
            .args(["--repl-diskless-sync-delay", "0"])
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.kind == Kind::Redis {
            cmd.args(["--appendonly", "no", "--daemonize", "no"]);
        }
        self.child = Some(cmd.spawn().expect("spawn a node"));
        let addr = self.addr();
        until("the node answers PING", || {
            if let Some(c) = self.child.as_mut() {
                assert!(c.try_wait().unwrap().is_none(), "the node exited");
            }
            std::net::TcpStream::connect(addr).is_ok() && Conn::new(addr).cmd(&["PING"]) == pong()
        });
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// kill -9, and wait for the process.
    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.dir.0.join("node.log")).unwrap_or_default();
            eprintln!("--- {:?} node {} log:\n{log}", self.kind, self.port);
        }
    }
}

fn pong() -> V {
    V::Simple("PONG".into())
}

/// Polls `f` every 20 ms until true, for at most FAILOVER_WAIT.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + FAILOVER_WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A redis-sentinel process monitoring `mymaster`, killed on drop.
struct Sentinel {
    child: Child,
    port: u16,
    dir: TempDir,
}

impl Sentinel {
    fn start(master: u16, quorum: u32) -> Sentinel {
        require_tool("redis-sentinel", "redis-sentinel");
        let dir = TempDir::new("sentinel");
        let port = free_port();
        let conf = dir.0.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {d}\nlogfile {d}/sentinel.log\n\
                 sentinel monitor mymaster 127.0.0.1 {master} {quorum}\n\
                 sentinel down-after-milliseconds mymaster 1000\n\
                 sentinel failover-timeout mymaster 5000\n",
                d = dir.path()
            ),
        )
        .unwrap();
        let child = Command::new("redis-sentinel")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-sentinel");
        let mut s = Sentinel { child, port, dir };
        until("the sentinel answers PING", || {
            assert!(s.child.try_wait().unwrap().is_none(), "sentinel exited");
            std::net::TcpStream::connect(s.addr()).is_ok() && s.cmd(&["PING"]) == pong()
        });
        // A PING every 400 ms and a reconnection within 400 ms: with the
        // default 1 s, a node whose sentinel links the promotion's CLIENT
        // KILL closed can look down for down-after-milliseconds (1 s) and
        // be failed over again (seen on Redis nodes as on ours). Not less:
        // a replica is a failover candidate only with an INFO younger than
        // 5 ping periods, and INFO comes every 1 s then.
        for (what, ms) in [
            ("publish-period", "200"),
            ("info-period", "1000"),
            ("ping-period", "400"),
        ] {
            assert_eq!(s.cmd(&["SENTINEL", "DEBUG", what, ms]), ok());
        }
        s
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn cmd(&self, args: &[&str]) -> V {
        Conn::new(self.addr()).cmd(args)
    }

    /// The master's port as this sentinel names it.
    fn master_port(&self) -> Option<u16> {
        match self.cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"]) {
            V::Arr(a) if a.len() == 2 => text(&a[1]).parse().ok(),
            _ => None,
        }
    }

    /// SENTINEL REPLICAS / SENTINELS mymaster: each entry's fields.
    fn entries(&self, what: &str) -> Vec<Vec<(String, String)>> {
        let V::Arr(list) = self.cmd(&["SENTINEL", what, "mymaster"]) else {
            return vec![];
        };
        list.iter()
            .filter_map(|e| match e {
                V::Arr(kv) => Some(
                    kv.chunks(2)
                        .filter(|p| p.len() == 2)
                        .map(|p| (text(&p[0]), text(&p[1])))
                        .collect(),
                ),
                _ => None,
            })
            .collect()
    }

    /// The ports of the replicas this sentinel sees up (flags `slave`
    /// only, link to the master ok).
    fn good_replicas(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self
            .entries("REPLICAS")
            .iter()
            .filter(|e| field(e, "flags") == "slave" && field(e, "master-link-status") == "ok")
            .filter_map(|e| field(e, "port").parse().ok())
            .collect();
        ports.sort();
        ports
    }

    fn other_sentinels(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self
            .entries("SENTINELS")
            .iter()
            .filter_map(|e| field(e, "port").parse().ok())
            .collect();
        ports.sort();
        ports
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("sentinel.log")).unwrap_or_default()
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- sentinel {} log:\n{}", self.port, self.log());
        }
    }
}

fn text(v: &V) -> String {
    match v {
        V::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        V::Simple(s) => s.clone(),
        V::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

fn field(e: &[(String, String)], name: &str) -> String {
    e.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

/// ROLE, as text: `master` or `slave <master port> <state>` (`closed`
/// when Sentinel's CLIENT KILL TYPE normal took this connection).
fn role(addr: SocketAddr) -> String {
    let mut c = Conn::new(addr);
    c.send(&["ROLE"]);
    let Some(reply) = c.frame_unless_closed(WAIT) else {
        return "closed".into();
    };
    match reply {
        V::Arr(a) if text(&a[0]) == "master" => "master".into(),
        V::Arr(a) if text(&a[0]) == "slave" && a.len() >= 4 => {
            format!("slave {} {}", text(&a[2]), text(&a[3]))
        }
        other => format!("{other:?}"),
    }
}

/// Waits until `replica` follows `master` (ROLE connected, link up) and
/// has its data.
fn follows(master: SocketAddr, replica: SocketAddr) {
    let want = format!("slave {} connected", master.port());
    until(&format!("{replica} follows {master}"), || {
        role(replica) == want
    });
    assert_same(master, replica);
}

/// Waits until every sentinel names `master` and sees the `replicas` up
/// and the other sentinels.
fn settled(sentinels: &[Sentinel], master: u16, replicas: &[u16]) {
    let mut want = replicas.to_vec();
    want.sort();
    for (i, s) in sentinels.iter().enumerate() {
        let mut others: Vec<u16> = sentinels
            .iter()
            .filter(|o| o.port != s.port)
            .map(|o| o.port)
            .collect();
        others.sort();
        let deadline = Instant::now() + FAILOVER_WAIT;
        loop {
            let seen = (s.master_port(), s.good_replicas(), s.other_sentinels());
            if seen == (Some(master), want.clone(), others.clone()) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "sentinel {i}: wanted master {master}, replicas {want:?}, sentinels \
                 {others:?}; sees {seen:?}, replicas {:?}",
                s.entries("REPLICAS")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The events of a sentinel log (`+switch-master`, `-sdown`, ...), in order.
fn events(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| l.split_whitespace().nth(6))
        .filter(|e| e.starts_with('+') || e.starts_with('-'))
        .map(str::to_string)
        .collect()
}

/// What a failover's leader does, in order of first appearance: the
/// events that depend on the nodes' answers (an election lost and tried
/// again is left out: it depends on the sentinels' timing only).
fn failover_steps(events: &[String]) -> Vec<String> {
    const STEPS: &[&str] = &[
        "+elected-leader",
        "+failover-state-select-slave",
        "+selected-slave",
        "+failover-state-send-slaveof-noone",
        "+failover-state-wait-promotion",
        "+promoted-slave",
        "+failover-state-reconf-slaves",
        "+slave-reconf-sent",
        "+slave-reconf-inprog",
        "+slave-reconf-done",
        "+failover-end-for-timeout",
        "+failover-end",
        "+switch-master",
    ];
    let mut out: Vec<String> = vec![];
    for e in events {
        let step = STEPS.contains(&e.as_str())
            || (e.starts_with("-failover-abort") && e != "-failover-abort-not-elected");
        if step && !out.contains(e) {
            out.push(e.clone());
        }
    }
    out
}

/// The events of one sentinel log up to and including its `n`th
/// `+switch-master` (from the one before).
fn segment(events: &[String], n: usize) -> Vec<String> {
    let mut seen = 0;
    let mut out = vec![];
    for e in events {
        if seen + 1 == n {
            out.push(e.clone());
        }
        if e == "+switch-master" {
            seen += 1;
            if seen == n {
                break;
            }
        }
    }
    out
}

/// What the scenario records for the comparison with Redis nodes.
#[derive(Debug)]
struct Record {
    kill_steps: Vec<String>,
    manual_steps: Vec<String>,
    converted: bool,
}

fn scenario(kind: Kind) -> Record {
    let tag = format!("{kind:?}").to_lowercase();
    let p = Node::start(kind, &format!("sentinel-{tag}-a"), &[]);
    let mut nodes = vec![p];
    for t in ["b", "c"] {
        let n = Node::start(kind, &format!("sentinel-{tag}-{t}"), &[]);
        let port = nodes[0].port.to_string();
        assert_eq!(
            Conn::new(n.addr()).cmd(&["REPLICAOF", "127.0.0.1", &port]),
            ok()
        );
        nodes.push(n);
    }
    let addrs: Vec<SocketAddr> = nodes.iter().map(Node::addr).collect();
    dataset(addrs[0]);
    assert_same(addrs[0], addrs[1]);
    assert_same(addrs[0], addrs[2]);

    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(nodes[0].port, 2)).collect();
    settled(&sentinels, nodes[0].port, &[nodes[1].port, nodes[2].port]);
    // Each sentinel names its two links to every node (CLIENT SETNAME).
    for a in &addrs {
        until("the sentinels' links are named", || {
            let V::Bulk(list) = Conn::new(*a).cmd(&["CLIENT", "LIST"]) else {
                return false;
            };
            let list = String::from_utf8_lossy(&list).into_owned();
            let named = |suffix: &str| {
                list.lines()
                    .filter(|l| l.contains(" name=sentinel-") && l.contains(suffix))
                    .count()
            };
            named("-cmd ") == 3 && named("-pubsub ") == 3
        });
    }

    // Written and replicated before the failover.
    let mut c = Conn::new(addrs[0]);
    assert_eq!(c.cmd(&["SET", "before-failover", "kept"]), ok());
    assert_eq!(c.cmd(&["WAIT", "2", "5000"]), V::Int(2));
    let before = digest(addrs[0]);

    nodes[0].kill9();
    until("the sentinels name a promoted replica", || {
        let m = sentinels[0].master_port();
        m.is_some() && m != Some(nodes[0].port) && sentinels.iter().all(|s| s.master_port() == m)
    });
    let new = sentinels[0].master_port().unwrap();
    let (ni, oi) = if new == nodes[1].port { (1, 2) } else { (2, 1) };
    assert_eq!(nodes[ni].port, new, "a replica is promoted");
    until("the promoted replica is a master", || {
        role(addrs[ni]) == "master"
    });
    follows(addrs[ni], addrs[oi]);
    assert_eq!(digest(addrs[ni]), before, "the data before the failover");
    assert_eq!(
        Conn::new(addrs[ni]).cmd(&["GET", "before-failover"]),
        b("kept")
    );
    assert_eq!(
        Conn::new(addrs[ni]).cmd(&["SET", "after-failover", "v"]),
        ok()
    );
    follows(addrs[ni], addrs[oi]);

    // The old primary comes back as it was (a master of nothing, its own
    // port and dir): Sentinel turns it into a replica of the new one.
    nodes[0].launch();
    follows(addrs[ni], addrs[0]);
    settled(&sentinels, new, &[nodes[0].port, nodes[oi].port]);

    // A manual failover: no node is down.
    assert_eq!(
        sentinels[0].cmd(&["SENTINEL", "FAILOVER", "mymaster"]),
        ok()
    );
    until("the manual failover switches the master", || {
        let m = sentinels[0].master_port();
        m.is_some() && m != Some(new) && sentinels.iter().all(|s| s.master_port() == m)
    });
    let last = sentinels[0].master_port().unwrap();
    let li = addrs.iter().position(|a| a.port() == last).unwrap();
    until("the manually promoted node is a master", || {
        role(addrs[li]) == "master"
    });
    for (i, a) in addrs.iter().enumerate() {
        if i != li {
            follows(addrs[li], *a);
        }
    }
    assert_eq!(Conn::new(addrs[li]).cmd(&["GET", "after-failover"]), b("v"));
    let replicas: Vec<u16> = (0..3)
        .filter(|&i| i != li)
        .map(|i| addrs[i].port())
        .collect();
    settled(&sentinels, last, &replicas);

    let logs: Vec<Vec<String>> = sentinels.iter().map(|s| events(&s.log())).collect();
    let leader = logs
        .iter()
        .find(|e| segment(e, 1).iter().any(|x| x == "+elected-leader"))
        .unwrap_or_else(|| panic!("no leader of the first failover: {logs:?}"));
    Record {
        kill_steps: failover_steps(&segment(leader, 1)),
        manual_steps: failover_steps(&segment(&logs[0], 2)),
        converted: logs
            .iter()
            .any(|e| e.iter().any(|x| x == "+convert-to-slave")),
    }
}

#[test]
fn sentinel_fails_over_latchkey_nodes_as_redis_nodes() {
    let (ours, redis) = on_both(scenario);
    assert!(
        redis.kill_steps.contains(&"+promoted-slave".to_string()),
        "{redis:?}"
    );
    assert_eq!(ours.kill_steps, redis.kill_steps, "after kill -9");
    assert_eq!(ours.manual_steps, redis.manual_steps, "SENTINEL FAILOVER");
    assert!(redis.converted && ours.converted, "{redis:?} {ours:?}");
}

/// Sentinel's transaction, as sent to promote a replica and to re-point
/// one (sentinelSendSlaveOf), with another normal client and a pub/sub
/// client connected: the EXEC reply (CONFIG REWRITE without a config file
/// is an error inside it) and the other clients killed, as Redis.
fn sentinel_transaction(kind: Kind) -> Vec<String> {
    let tag = format!("{kind:?}").to_lowercase();
    let p = Node::start(kind, &format!("txn-{tag}-p"), &[]);
    let r = Node::start(kind, &format!("txn-{tag}-r"), &[]);
    let pport = p.port.to_string();
    let mut out = vec![];
    let mut c = Conn::new(r.addr());
    assert_eq!(c.cmd(&["CLIENT", "SETNAME", "sentinel-0123abcd-cmd"]), ok());
    for target in [vec!["127.0.0.1", &pport], vec!["NO", "ONE"]] {
        let mut other = Conn::new(r.addr());
        assert_eq!(other.cmd(&["PING"]), pong());
        let mut sub = Conn::new(r.addr());
        assert!(matches!(sub.cmd(&["SUBSCRIBE", "ch"]), V::Arr(_)));
        assert_eq!(c.cmd(&["MULTI"]), ok());
        let mut slaveof = vec!["SLAVEOF"];
        slaveof.extend(&target);
        let cmds: [&[&str]; 4] = [
            &slaveof,
            &["CONFIG", "REWRITE"],
            &["CLIENT", "KILL", "TYPE", "normal"],
            &["CLIENT", "KILL", "TYPE", "pubsub"],
        ];
        for cmd in cmds {
            assert_eq!(c.cmd(cmd), V::Simple("QUEUED".into()));
        }
        out.push(format!("{:?}", c.cmd(&["EXEC"])));
        assert!(other.closed(), "the other normal client is killed");
        assert!(sub.closed(), "the pub/sub client is killed");
        assert_eq!(c.cmd(&["PING"]), pong(), "the caller is skipped");
    }
    out.push(role(r.addr()));
    out
}

#[test]
fn sentinels_transaction_answers_as_redis() {
    let (ours, redis) = on_both(sentinel_transaction);
    assert!(
        redis[0].contains("running without a config file"),
        "{redis:?}"
    );
    assert_eq!(ours, redis);
}

/// A primary stuck in a script answers PING with -BUSY; once the sentinel
/// sees it down it sends SCRIPT KILL, and the primary is up again. One
/// sentinel and quorum 2: it is never objectively down, no failover.
fn busy_primary(kind: Kind) -> String {
    let tag = format!("{kind:?}").to_lowercase();
    let p = Node::start(
        kind,
        &format!("busy-{tag}"),
        &["--busy-reply-threshold", "100"],
    );
    let s = Sentinel::start(p.port, 2);
    until("the sentinel sees the master up", || {
        s.entries("REPLICAS").is_empty()
            && matches!(s.cmd(&["SENTINEL", "MASTER", "mymaster"]), V::Arr(ref a)
                if a.chunks(2).any(|kv| text(&kv[0]) == "flags" && text(&kv[1]) == "master"))
    });
    let mut script = Conn::new(p.addr());
    script.send(&["EVAL", "while true do end", "0"]);
    until(
        "PING answers BUSY",
        || matches!(Conn::new(p.addr()).cmd(&["PING"]), V::Err(ref e) if e.starts_with("BUSY")),
    );
    let killed = script
        .frame_within(FAILOVER_WAIT)
        .expect("the script is killed within the bound");
    assert_eq!(Conn::new(p.addr()).cmd(&["PING"]), pong());
    let ev = events(&s.log());
    assert!(ev.contains(&"+sdown".to_string()), "{ev:?}");
    until("the master is no longer down", || {
        events(&s.log()).contains(&"-sdown".to_string())
    });
    match killed {
        V::Err(e) => e.split(" script:").next().unwrap_or_default().to_string(),
        other => format!("{other:?}"),
    }
}

#[test]
fn sentinel_kills_a_busy_script() {
    let (ours, redis) = on_both(busy_primary);
    assert!(redis.contains("SCRIPT KILL"), "{redis}");
    assert_eq!(ours, redis);
}
