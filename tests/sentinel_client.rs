//! The bundled client and the `latchkey` CLI finding the master through
//! real Redis Sentinel 7.0.15 processes (Debian's `redis-sentinel`), with
//! latchkey-server processes as primary and replicas: connecting through
//! a list of Sentinels, a `kill -9` of the primary followed by writes on
//! the promoted replica, locks and watches across the failover, a master
//! demoted under a live connection (`-READONLY`, `ROLE`), the Sentinels'
//! own password apart from the master's, the errors when no Sentinel
//! answers, none knows the name or the address is not a master, and the
//! CLI through a `redis-sentinel://` URL (`lock`, and `watch --reconnect`
//! across a failover). Every process is killed on
//! drop, every wait is bounded.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use latchkey::{
    cmd, Backoff, Client, Error, LockState, Options, Sentinel, SessionState, Value, WatchEvent,
    WatchStream,
};

mod common;
use common::repl::synced;
use common::*;

const SERVER: &str = env!("CARGO_BIN_EXE_latchkey-server");
const CLI: &str = env!("CARGO_BIN_EXE_latchkey");

/// A redis-sentinel process with its config file in a directory of its
/// own; killed on drop.
struct SentinelProc {
    child: KillOnDrop,
    addr: SocketAddr,
    dir: TempDir,
}

impl SentinelProc {
    /// Monitors `master` as `m` (quorum 1, down after 1 s); `extra`
    /// lines go into the config file too.
    fn start(master: SocketAddr, extra: &[&str]) -> SentinelProc {
        SentinelProc::start_quorum(master, 1, extra)
    }

    /// As `start`, with `quorum` Sentinels needed to agree the master is down.
    fn start_quorum(master: SocketAddr, quorum: u32, extra: &[&str]) -> SentinelProc {
        require_tool("redis-sentinel", "redis-sentinel");
        // A port taken between probing and binding: try another.
        for _ in 0..4 {
            let dir = TempDir::new("sentinel");
            let port = free_port();
            let mut conf = format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {d}\nlogfile {d}/sentinel.log\n\
                 sentinel monitor m 127.0.0.1 {mp} {quorum}\n\
                 sentinel down-after-milliseconds m 1000\n\
                 sentinel failover-timeout m 3000\n",
                d = dir.path(),
                mp = master.port()
            );
            for l in extra {
                conf.push_str(l);
                conf.push('\n');
            }
            let file = dir.0.join("sentinel.conf");
            std::fs::write(&file, conf).unwrap();
            let child = Command::new("redis-sentinel")
                .arg(&file)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn redis-sentinel");
            let mut s = SentinelProc {
                child: KillOnDrop(child),
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
                dir,
            };
            let deadline = Instant::now() + WAIT;
            loop {
                if s.child.0.try_wait().unwrap().is_some() {
                    break;
                }
                if std::net::TcpStream::connect(s.addr).is_ok() {
                    return s;
                }
                assert!(Instant::now() < deadline, "redis-sentinel did not start");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("redis-sentinel did not start on a free port");
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("sentinel.log")).unwrap_or_default()
    }

    /// A command on the Sentinel (with its password, if it has one).
    fn cmd(&self, pass: Option<&str>, args: &[&str]) -> V {
        let mut c = Conn::new(self.addr);
        if let Some(p) = pass {
            assert_eq!(c.cmd(&["AUTH", p]), ok());
        }
        c.cmd(args)
    }

    /// Waits until the Sentinel lists `n` replicas of `m` with their link
    /// up (so that it can fail over to one).
    fn knows_replicas(&self, n: usize) {
        self.counts(&["SENTINEL", "REPLICAS", "m"], n, "replicas", |rs| {
            rs.iter()
                .filter(|r| {
                    field(r, "flags").as_deref() == Some("slave")
                        && field(r, "master-link-status").as_deref() == Some("ok")
                })
                .count()
        });
    }

    /// Waits until the Sentinel knows `n` other Sentinels of `m` (by their
    /// hello messages), so that they can agree on a failover.
    fn knows_sentinels(&self, n: usize) {
        self.counts(
            &["SENTINEL", "SENTINELS", "m"],
            n,
            "other Sentinels",
            |rs| rs.len(),
        );
    }

    /// Polls `args` (an array reply) until `count` of it reaches `n`, for
    /// at most 20 s.
    fn counts(&self, args: &[&str], n: usize, what: &str, count: impl Fn(&[V]) -> usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let seen = match self.cmd(None, args) {
                V::Arr(rs) => count(&rs),
                _ => 0,
            };
            if seen >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "Sentinel sees {seen} of {n} {what}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn url(&self) -> String {
        format!("redis-sentinel://{}#m", self.addr)
    }
}

/// A field of one `SENTINEL REPLICAS` entry (a flat name/value array).
fn field(entry: &V, name: &str) -> Option<String> {
    let V::Arr(kv) = entry else { return None };
    kv.chunks(2).find_map(|p| match p {
        [V::Bulk(k), V::Bulk(v)] if k == name.as_bytes() => {
            Some(String::from_utf8_lossy(v).into_owned())
        }
        _ => None,
    })
}

/// A latchkey-server process (a `Proc`, killed on drop) with its dir.
struct Node {
    p: Proc,
    _dir: TempDir,
}

fn node(args: &[&str]) -> Node {
    let dir = TempDir::new("sentinel-node");
    let mut p = Proc::spawn(SERVER, &dir, args);
    assert!(p.started().is_none(), "latchkey-server starts");
    Node { p, _dir: dir }
}

fn replica_of(primary: SocketAddr) -> Node {
    let port = primary.port().to_string();
    let r = node(&["--replicaof", "127.0.0.1", &port]);
    synced(primary, r.p.addr);
    r
}

/// Waits until `key` is a held lock on `addr` (a replica has it once the
/// lock record arrived: offsets do not count lock records).
fn holds(addr: SocketAddr, key: &str) {
    eventually(&format!("{key} held on {addr}"), || {
        !matches!(Conn::new(addr).cmd(&["TPINFO", key]), V::Nil | V::NilArr)
    });
}

/// A port nothing listens on (bound, then released).
fn dead_addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

fn role(addr: SocketAddr) -> String {
    match Conn::new(addr).cmd(&["ROLE"]) {
        V::Arr(a) => match a.first() {
            Some(V::Bulk(b)) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("ROLE: {other:?}"),
        },
        other => panic!("ROLE: {other:?}"),
    }
}

fn addr_of(c: &Client) -> Option<SocketAddr> {
    c.server_addr()
        .map(|(h, p)| format!("{h}:{p}").parse().unwrap())
}

async fn bounded<T>(what: &str, d: Duration, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(d, f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

async fn next(s: &mut WatchStream) -> Option<WatchEvent> {
    bounded("a watch event", Duration::from_secs(20), s.next()).await
}

/// `SET after 2` through the client every 20 ms until it succeeds (a
/// replica promoted and found through Sentinel), for at most 30 s.
async fn write_once_promoted(c: &Client, s: &SentinelProc) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match c.set("after", "2").await {
            Ok(()) => return,
            Err(e) => assert!(
                Instant::now() < deadline,
                "no write through Sentinel 30 s after the kill: {e}\n{}",
                s.log()
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn reconnecting() -> Options {
    Options {
        reconnect: Some(Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(500),
            max_attempts: Some(100),
        }),
        ..Options::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_after_kill_9_moves_the_client_to_the_promoted_replica() {
    let primary = node(&[]);
    let replica = replica_of(primary.p.addr);
    let s = SentinelProc::start(primary.p.addr, &[]);
    s.knows_replicas(1);

    // A Sentinel that is down comes first in the list: it is passed over,
    // and the one that answered moves to the front.
    let dead = dead_addr();
    let url = format!("redis-sentinel://{dead},{}#m", s.addr);
    let c = Client::connect_with(&url, reconnecting()).await.unwrap();
    assert_eq!(addr_of(&c), Some(primary.p.addr));
    let shown = format!("{c:?}");
    let live = shown.find(&s.addr.port().to_string()).unwrap();
    let gone = shown.find(dead.rsplit(':').next().unwrap()).unwrap();
    assert!(
        live < gone,
        "the Sentinel that answered is asked first now: {shown}"
    );

    c.set("before", "1").await.unwrap();
    let guard = c.lock("L").await.unwrap();
    let mut w = c.watch_stream("wk").await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::NotExists));
    synced(primary.p.addr, replica.p.addr);
    holds(replica.p.addr, "L");

    let killed = Instant::now();
    primary.p.kill9();
    // When the Sentinel names the replica (polled from another thread).
    let flipped = {
        let (sentinel, want) = (s.addr, replica.p.addr.port().to_string());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                let v = Conn::new(sentinel).cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "m"]);
                if matches!(&v, V::Arr(a) if a.get(1) == Some(&b(&want))) {
                    return Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            None
        })
    };
    // While it waits between resolutions the client listens for
    // +switch-master on the Sentinel (a connection with one subscription).
    let deadline = Instant::now() + WAIT;
    loop {
        let list = match s.cmd(None, &["CLIENT", "LIST"]) {
            V::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
            other => panic!("CLIENT LIST: {other:?}"),
        };
        if list.lines().any(|l| l.contains(" sub=1 ")) {
            break;
        }
        assert!(Instant::now() < deadline, "nobody subscribed:\n{list}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The lock is suspended with the connection (neither held nor lost:
    // the replica has it, for the session to resume); the watch says
    // disconnected.
    bounded("the lock suspended", WAIT, async {
        while guard.state() == LockState::Held {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(guard.state(), LockState::Suspended);
    assert!(!guard.is_held());
    assert_eq!(next(&mut w).await, Some(WatchEvent::Disconnected));

    // Writes succeed again once the replica is promoted.
    write_once_promoted(&c, &s).await;
    let wrote = Instant::now();
    let flipped = flipped
        .join()
        .unwrap()
        .expect("the Sentinel names the replica");
    println!(
        "first write on the promoted replica {:?} after kill -9 of the primary, {:?} after the \
         Sentinel named it",
        wrote - killed,
        wrote.saturating_duration_since(flipped)
    );
    // Woken by +switch-master, not by the end of a pause (up to 1 s then).
    assert!(
        wrote.saturating_duration_since(flipped) < Duration::from_millis(400),
        "the client took {:?} to follow the switch",
        wrote.saturating_duration_since(flipped)
    );
    assert_eq!(addr_of(&c), Some(replica.p.addr));
    assert_eq!(role(replica.p.addr), "master");
    assert!(s.log().contains("+switch-master"), "{}", s.log());
    // What was written before the kill came over by replication.
    assert_eq!(c.get("before").await.unwrap().as_deref(), Some(&b"1"[..]));
    // The watch is back, on the new master.
    assert_eq!(next(&mut w).await, Some(WatchEvent::NotExists));
    c.set("wk", "x").await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added));
    // The lock came over with the replica's lock state and the client
    // resumed its session there: held again, and released there.
    bounded("the lock held again", WAIT, async {
        while guard.state() != LockState::Held {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(guard.unlock().await.unwrap());
    let again = c.lock("L").timeout(Duration::from_secs(5)).await.unwrap();
    assert!(again.is_held());
    again.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_master_is_dropped_and_resolved_again() {
    let a = node(&[]);
    let s = SentinelProc::start(a.p.addr, &[]);
    // Another primary, that Sentinel does not know, to demote `a` under.
    let other = node(&["--repl-diskless-sync-delay", "0"]);
    // No heartbeat (no session either): only the READONLY reply can tell.
    let c = Client::connect_with(
        &s.url(),
        Options {
            session_timeout: None,
            ..reconnecting()
        },
    )
    .await
    .unwrap();
    // The heartbeat's ROLE sees a demotion with no request sent.
    let quiet = Client::connect_with(
        &s.url(),
        Options {
            heartbeat: Some(Duration::from_millis(100)),
            ..reconnecting()
        },
    )
    .await
    .unwrap();
    c.set("k", "v").await.unwrap();
    let gen = c.connection_generation();
    let quiet_gen = quiet.connection_generation();

    // Demoted by hand: Sentinel still names `a`, which is now a replica
    // (refusing writes at once, synced or not).
    let port = other.p.addr.port().to_string();
    assert_eq!(
        Conn::new(a.p.addr).cmd(&["REPLICAOF", "127.0.0.1", &port]),
        ok()
    );
    match c.set("k", "w").await {
        Err(Error::Server(e)) => assert!(e.starts_with("READONLY"), "{e}"),
        other => panic!("a write on the demoted master: {other:?}"),
    }
    // READONLY dropped the connection; reconnecting resolves `a` again,
    // whose ROLE is not master, so there is no connection until it is one.
    bounded("the connection dropped", WAIT, async {
        while c.is_connected() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    bounded("the heartbeat's ROLE dropped it", WAIT, async {
        while quiet.connection_generation() == quiet_gen && quiet.is_connected() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(!quiet.is_connected());
    // A new client gets the clear error by its connect timeout.
    let short = Options {
        connect_timeout: Duration::from_millis(800),
        ..Options::default()
    };
    match Client::connect_with(&s.url(), short).await {
        Err(Error::NotMaster(e)) => assert!(e.contains("is a slave"), "{e}"),
        other => panic!("a replica where Sentinel says master: {other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!c.is_connected(), "connected to a replica");

    // Promoted again: both clients come back to it.
    assert_eq!(Conn::new(a.p.addr).cmd(&["REPLICAOF", "NO", "ONE"]), ok());
    for (cl, g) in [(&c, gen), (&quiet, quiet_gen)] {
        bounded("reconnected", Duration::from_secs(10), async {
            while !cl.is_connected() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(cl.connection_generation() > g);
        assert_eq!(addr_of(cl), Some(a.p.addr));
    }
    c.set("k", "again").await.unwrap();
    assert_eq!(
        Conn::new(a.p.addr).cmd(&["GET", "k"]),
        b("again"),
        "the write went to the master"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_password_apart_from_the_masters() {
    let m = node(&[]);
    // Set after the start: `node` waits for a PONG.
    assert_eq!(
        Conn::new(m.p.addr).cmd(&["CONFIG", "SET", "requirepass", "data-pw"]),
        ok()
    );
    let s = SentinelProc::start(
        m.p.addr,
        &["requirepass sentinel-pw", "sentinel auth-pass m data-pw"],
    );
    // The Sentinel follows the master with its password (its INFO works).
    let deadline = Instant::now() + WAIT;
    loop {
        let v = s.cmd(Some("sentinel-pw"), &["SENTINEL", "MASTER", "m"]);
        if field(&v, "flags").as_deref() == Some("master") {
            break;
        }
        assert!(Instant::now() < deadline, "{v:?}\n{}", s.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let base = Sentinel::new("m", [s.addr.to_string()]).unwrap();
    let c = Client::connect_sentinel(
        base.clone()
            .auth(None, "data-pw")
            .sentinel_auth(None, "sentinel-pw"),
        Options::default(),
    )
    .await
    .unwrap();
    c.set("k", "v").await.unwrap();
    assert_eq!(addr_of(&c), Some(m.p.addr));
    // The URL's password is the master's; the Sentinel's is not taken from it.
    let url = format!("redis-sentinel://:data-pw@{}#m", s.addr);
    match Client::connect(&url).await {
        Err(Error::NoSentinel(e)) => assert!(e.contains("NOAUTH"), "{e}"),
        other => panic!("a Sentinel with requirepass, no password: {other:?}"),
    }
    // The Sentinel's password does not open the master.
    match Client::connect_sentinel(
        base.clone().sentinel_auth(None, "sentinel-pw"),
        Options::default(),
    )
    .await
    {
        Err(Error::Server(e)) => assert!(e.starts_with("NOAUTH"), "{e}"),
        other => panic!("a master with requirepass, no password: {other:?}"),
    }
}

/// Every reconnection asks the Sentinels again: with the first one gone
/// the next one answers, and with none left there is no connection, though
/// the master itself is up (its address is never reused without asking).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_asks_the_sentinels_again() {
    let m = node(&[]);
    let s1 = SentinelProc::start(m.p.addr, &[]);
    let s2 = SentinelProc::start(m.p.addr, &[]);
    let url = format!("redis-sentinel://{},{}#m", s1.addr, s2.addr);
    let c = Client::connect_with(&url, reconnecting()).await.unwrap();
    assert_eq!(addr_of(&c), Some(m.p.addr));
    let kill_clients = || {
        // SKIPME yes (the default): the caller stays.
        match Conn::new(m.p.addr).cmd(&["CLIENT", "KILL", "TYPE", "normal"]) {
            V::Int(n) => assert!(n >= 1, "killed {n}"),
            other => panic!("CLIENT KILL: {other:?}"),
        }
    };
    let gen = c.connection_generation();
    drop(s1);
    kill_clients();
    bounded("reconnected through the second Sentinel", WAIT, async {
        while c.connection_generation() == gen || !c.is_connected() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    c.set("k", "v").await.unwrap();

    drop(s2);
    kill_clients();
    bounded("the connection dropped", WAIT, async {
        while c.is_connected() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    // Several reconnect attempts (50 ms doubling to 500 ms) fit in 1.5 s:
    // none may connect without a Sentinel's answer.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!c.is_connected(), "reconnected without asking a Sentinel");
    assert_eq!(c.set("k", "w").await, Err(Error::Disconnected));
}

#[tokio::test]
async fn clear_errors_when_no_sentinel_answers_or_the_name_is_unknown() {
    let (d1, d2) = (dead_addr(), dead_addr());
    let url = format!("redis-sentinel://{d1},{d2}#m");
    let t = Instant::now();
    match Client::connect(&url).await {
        Err(Error::NoSentinel(e)) => {
            assert!(e.contains(&d1) && e.contains(&d2), "{e}");
            let shown = Error::NoSentinel(e).to_string();
            assert!(shown.starts_with("no Sentinel answered: "), "{shown}");
        }
        other => panic!("{other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());

    // A server that is not a Sentinel counts as one not answering.
    let plain = node(&[]);
    match Client::connect(&format!("redis-sentinel://{}#m", plain.p.addr)).await {
        Err(Error::NoSentinel(e)) => assert!(e.contains(&plain.p.addr.to_string()), "{e}"),
        other => panic!("{other:?}"),
    }

    let s = SentinelProc::start(plain.p.addr, &[]);
    match Client::connect(&format!("redis-sentinel://{}#nosuch", s.addr)).await {
        Err(e @ Error::MasterUnknown(_)) => {
            assert_eq!(e, Error::MasterUnknown("nosuch".into()));
            assert_eq!(e.to_string(), "no Sentinel knows a master named \"nosuch\"");
        }
        other => panic!("{other:?}"),
    }
    // Bad URLs are refused before any connection.
    for (u, says) in [
        ("redis-sentinel://127.0.0.1", "no master name"),
        ("redis-sentinel://127.0.0.1:70000#m", "bad port"),
        ("redis-sentinel://#m", "no Sentinel address"),
    ] {
        match Client::connect(u).await {
            Err(Error::Url(e)) => assert!(e.contains(says), "{u}: {e}"),
            other => panic!("{u}: {other:?}"),
        }
    }
}

#[test]
fn cli_through_a_sentinel_url() {
    let m = node(&[]);
    let s = SentinelProc::start(m.p.addr, &[]);
    let dir = TempDir::new("sentinel-cli");
    let out = dir.0.join("token");
    let run = |args: &[&str], env_url: Option<&str>| {
        let mut cmd = Command::new(CLI);
        cmd.args(args).env_remove("LATCHKEY_URL");
        if let Some(u) = env_url {
            cmd.env("LATCHKEY_URL", u);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + WAIT;
        loop {
            if child.try_wait().unwrap().is_some() {
                break child.wait_with_output().unwrap();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("latchkey {args:?} did not finish");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let dead = dead_addr();
    let url = format!("redis-sentinel://{dead},{}#m", s.addr);
    // The command runs holding the lock on the master Sentinel names.
    let script = format!(
        "redis-cli -p {} EXISTS $LATCHKEY_LOCK > {}",
        m.p.addr.port(),
        out.display()
    );
    require_tool("redis-cli", "redis-tools");
    let o = run(
        &["--url", &url, "lock", "clilock", "--", "sh", "-c", &script],
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(std::fs::read_to_string(&out).unwrap().trim(), "1");
    assert_eq!(Conn::new(m.p.addr).cmd(&["EXISTS", "clilock"]), V::Int(0));
    // $LATCHKEY_URL takes the same.
    let o = run(&["lock", "envlock", "--", "sh", "-c", "exit 7"], Some(&url));
    assert_eq!(o.status.code(), Some(7), "{o:?}");
    // An unknown master name: exit 5, saying so.
    let bad = format!("redis-sentinel://{}#nosuch", s.addr);
    let o = run(&["--url", &bad, "watch", "k"], None);
    assert_eq!(o.status.code(), Some(5), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no Sentinel knows a master named \"nosuch\""),
        "{err}"
    );
    // Bad URLs and misplaced flags are usage errors (2).
    let o = run(&["--url", "redis-sentinel://127.0.0.1", "watch", "k"], None);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("no master name"));
    let plain = format!("redis://{}", m.p.addr);
    let o = run(
        &["--url", &plain, "--sentinel-password", "x", "watch", "k"],
        None,
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    // --help documents the form.
    let o = run(&["--help"], None);
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(
        help.contains("redis-sentinel://") && help.contains("--sentinel-password"),
        "{help}"
    );
}

/// `latchkey watch --reconnect` through a Sentinel URL follows a failover:
/// DISCONNECTED when the primary dies, then the key's state on the promoted
/// replica, then its changes there.
#[test]
fn cli_watch_follows_a_failover() {
    let primary = node(&[]);
    let replica = replica_of(primary.p.addr);
    let s = SentinelProc::start(primary.p.addr, &[]);
    s.knows_replicas(1);
    assert_eq!(Conn::new(primary.p.addr).cmd(&["SET", "wk", "1"]), ok());
    synced(primary.p.addr, replica.p.addr);
    let mut child = Command::new(CLI)
        .args(["--url", &s.url(), "watch", "--reconnect", "wk"])
        .env_remove("LATCHKEY_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let _child = KillOnDrop(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let expect = |event: &str, within: Duration| {
        let line = rx
            .recv_timeout(within)
            .unwrap_or_else(|_| panic!("no `wk {event}` line within {within:?}"));
        assert!(line.ends_with(&format!(" wk {event}")), "{line}");
    };
    expect("EXIST", WAIT);
    primary.p.kill9();
    expect("DISCONNECTED", WAIT);
    // Back on the promoted replica, which has the key by replication.
    expect("EXIST", Duration::from_secs(30));
    assert_eq!(role(replica.p.addr), "master");
    assert_eq!(Conn::new(replica.p.addr).cmd(&["DEL", "wk"]), V::Int(1));
    expect("DEL", WAIT);
}

/// What a contender's `try_lock` got: the lock (which must never happen
/// while the holder's session has it), refused, or no connection.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Try {
    Got,
    Refused,
    NoConnection,
}

/// A client's locks survive a failover by themselves: a latchkey primary
/// with two latchkey replicas under three Sentinels (quorum 2), a client
/// through Sentinel with reconnect on holding a lock and a reader's share.
/// After `kill -9` of the primary its guards are suspended (not held), and
/// once the Sentinels promote a replica the client resumes its session
/// there (`TPRESUME`): both guards held again with the same tokens (TPCHECK
/// takes them there), while another client's `try_lock` of the same names
/// fails the whole time; a third client waiting in the lock's line keeps
/// its place across the failover (still waiting, resumed on the new
/// primary) and is handed the lock when the holder unlocks there; then
/// the other client gets it. Last, a connection reset without a failover
/// (`CLIENT KILL` on the same server) loses a lock: the server ended the
/// session with the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_are_resumed_on_the_promoted_replica() {
    let primary = node(&[]);
    let replicas = [replica_of(primary.p.addr), replica_of(primary.p.addr)];
    let sentinels: Vec<SentinelProc> = (0..3)
        .map(|_| SentinelProc::start_quorum(primary.p.addr, 2, &[]))
        .collect();
    for s in &sentinels {
        s.knows_replicas(2);
        s.knows_sentinels(2);
    }
    let list: Vec<String> = sentinels.iter().map(|s| s.addr.to_string()).collect();
    let url = format!("redis-sentinel://{}#m", list.join(","));
    let holder = Client::connect_with(&url, reconnecting()).await.unwrap();
    let other = Client::connect_with(&url, reconnecting()).await.unwrap();
    assert_eq!(addr_of(&holder), Some(primary.p.addr));
    let mut states = holder.session_changes();

    let guard = holder.lock("L").await.unwrap();
    let reader = holder.read_lock("R").await.unwrap();
    // A round trip after the acquisitions: the session's identity, asked
    // after the first one, is known by now.
    holder.set("before", "1").await.unwrap();
    let (token, reader_token) = (guard.token(), reader.token());
    for r in &replicas {
        synced(primary.p.addr, r.p.addr);
        holds(r.p.addr, "L");
        holds(r.p.addr, "R");
    }
    assert!(other.try_lock("L").await.unwrap().is_none());
    // A third client waits in L's line (a fair lock: SETTP ... QUEUE); its
    // place reaches the replicas with its session.
    let waiter = Client::connect_with(&url, reconnecting()).await.unwrap();
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.lock("L").await })
    };
    for r in &replicas {
        eventually(
            "the place in line reaches the replica",
            || matches!(Conn::new(r.p.addr).cmd(&["TPQUEUE", "L"]), V::Arr(v) if v.len() == 1),
        );
    }

    // The other client tries both names every 10 ms throughout.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let contender = {
        let (other, stop) = (other.clone(), stop.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop.load(std::sync::atomic::Ordering::SeqCst) && Instant::now() < deadline {
                for name in ["L", "R"] {
                    let t = match other.try_lock(name).await {
                        Ok(Some(g)) => {
                            drop(g);
                            Try::Got
                        }
                        Ok(None) => Try::Refused,
                        Err(_) => Try::NoConnection,
                    };
                    seen.push((Instant::now(), name, t));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            seen
        })
    };
    let seen_states = tokio::spawn(async move {
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while let Ok(Ok(())) = tokio::time::timeout_at(deadline, states.changed()).await {
            let s = *states.borrow_and_update();
            seen.push(s);
            if s == SessionState::Reconnected {
                break;
            }
        }
        seen
    });

    // When a Sentinel names another master (polled from another thread).
    let old = primary.p.addr;
    let flipped = {
        let (sentinel, old) = (sentinels[0].addr, old.port().to_string());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                let v = Conn::new(sentinel).cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "m"]);
                if matches!(&v, V::Arr(a) if a.len() == 2 && a[1] != b(&old)) {
                    return Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            None
        })
    };
    let killed = Instant::now();
    primary.p.kill9();
    // Suspended with the connection: not held, not lost.
    bounded("the guard suspended", WAIT, async {
        while guard.state() == LockState::Held {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    let suspended = killed.elapsed();
    assert_eq!(guard.state(), LockState::Suspended);
    assert!(!guard.is_held() && !reader.is_held());
    // Held again once the session is resumed on the promoted replica.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match guard.state() {
            LockState::Held => break,
            LockState::Suspended => {}
            LockState::Lost => panic!("lost: {:?}", guard.lost_reason()),
        }
        assert!(
            Instant::now() < deadline,
            "not held again 30 s after the kill:\n{}",
            sentinels[0].log()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let back = Instant::now();
    let flipped = flipped.join().unwrap().expect("a Sentinel names a replica");
    println!(
        "lock held again {:?} after kill -9 of the primary ({:?} after the Sentinel named the \
         promoted replica; suspended after {suspended:?})",
        back - killed,
        back.saturating_duration_since(flipped)
    );
    let promoted = addr_of(&holder).expect("connected");
    assert!(
        replicas.iter().any(|r| r.p.addr == promoted),
        "{promoted} is a replica"
    );
    assert_eq!(role(promoted), "master");
    assert_eq!(reader.state(), LockState::Held);
    assert_eq!((guard.token(), reader.token()), (token, reader_token));
    assert_eq!(holder.session_state(), SessionState::Reconnected);
    let seen = bounded("session states", WAIT, seen_states).await.unwrap();
    assert_eq!(
        seen,
        [SessionState::Suspended, SessionState::Reconnected],
        "session states"
    );
    // The promoted replica knows the holds as this connection's, with
    // their tokens: TPCHECK takes them (and refuses an older one).
    let id: i64 = holder.query(&cmd("CLIENT").arg("ID")).await.unwrap();
    let mut raw = Conn::new(promoted);
    assert_eq!(raw.cmd(&["TPOWNER", "L"]), V::Int(id));
    let check = |name: &str, t: u64| cmd("TPCHECK").arg(name).arg(t);
    holder.query::<Value>(&check("L", token)).await.unwrap();
    holder
        .query::<Value>(&check("R", reader_token))
        .await
        .unwrap();
    match holder.query::<Value>(&check("L", token - 1)).await {
        Err(Error::Server(e)) => assert!(e.starts_with("STALE"), "{e}"),
        other => panic!("TPCHECK of an older token: {other:?}"),
    }
    assert_eq!(
        holder.get("before").await.unwrap().as_deref(),
        Some(&b"1"[..])
    );

    // The other client never got either lock, before or after the kill.
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let tries = bounded("the contender stops", WAIT, contender)
        .await
        .unwrap();
    assert!(
        tries.iter().all(|(_, _, t)| *t != Try::Got),
        "the other client took a held lock: {tries:?}"
    );
    let refused_after = |at: Instant| {
        tries
            .iter()
            .filter(|(when, _, t)| *when > at && *t == Try::Refused)
            .count()
    };
    assert!(refused_after(killed - Duration::from_secs(60)) > 0);
    assert!(refused_after(back) > 0, "{tries:?}");

    // The waiter kept its place: still waiting, in the line on the new
    // primary under its new connection (its session resumed there).
    let waiter_id: i64 = waiter.query(&cmd("CLIENT").arg("ID")).await.unwrap();
    eventually("the waiter's place is its new connection's", || {
        raw.cmd(&["TPQUEUE", "L"]) == V::Arr(vec![V::Int(waiter_id)])
    });
    assert!(!waiting.is_finished());
    // Released on the new primary: handed to the waiter, first in line,
    // with a token above the old holder's; then the other client gets it.
    assert!(guard.unlock().await.unwrap());
    assert!(reader.unlock().await.unwrap());
    let handed = bounded("the waiter is handed L", WAIT, waiting)
        .await
        .unwrap()
        .expect("L handed to the waiter");
    assert!(handed.token() > token);
    assert!(handed.unlock().await.unwrap());
    let mut got = None;
    let deadline = Instant::now() + WAIT;
    while got.is_none() {
        assert!(Instant::now() < deadline, "the other client never got L");
        got = other.try_lock("L").await.ok().flatten();
        if got.is_none() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    drop(got);

    // A connection reset without a failover: the server ended the session
    // with the connection, so the resume is refused and the lock is lost.
    let k = holder.lock("K").await.unwrap();
    holder.set("after", "2").await.unwrap();
    let id: i64 = holder.query(&cmd("CLIENT").arg("ID")).await.unwrap();
    assert_eq!(
        raw.cmd(&["CLIENT", "KILL", "ID", &id.to_string()]),
        V::Int(1)
    );
    bounded("K lost", WAIT, k.lost()).await;
    assert_eq!(k.state(), LockState::Lost);
    assert_eq!(k.lost_reason().as_deref(), Some("session ended"));
    bounded("the session reported lost", WAIT, async {
        while holder.session_state() != SessionState::Lost {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let k2 = other.try_lock("K").await.unwrap();
    assert!(k2.is_some(), "K was released with the killed connection");
}

/// TLS all the way: latchkey nodes replicating over TLS (`tls-replication
/// yes`, replicas announcing their TLS ports), a Sentinel that talks TLS to
/// them (its own `tls-replication yes`) and serves its clients on its
/// `tls-port`, and the bundled client with a `rediss-sentinel://` URL and
/// the CA: it resolves the master through the Sentinel over TLS, works on
/// the master's TLS port, and after `kill -9` of the primary writes to
/// the promoted replica's TLS port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_sentinel_follows_a_failover_over_tls() {
    let pki = common::pki::pki();
    let f = |p: &std::path::PathBuf| p.to_string_lossy().into_owned();
    let (ca, cert, key) = (f(&pki.ca), f(&pki.server_cert), f(&pki.server_key));
    let tls_node = |replica_of: Option<u16>| {
        let port = free_port().to_string();
        let mut args = vec![
            "--tls-port",
            &port,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "no",
            "--tls-replication",
            "yes",
        ];
        let of = replica_of.map(|p| p.to_string());
        if let Some(of) = &of {
            args.extend(["--replicaof", "127.0.0.1", of]);
        }
        let n = node(&args);
        let tls: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        (n, tls)
    };
    let (primary, primary_tls) = tls_node(None);
    let (replica, replica_tls) = tls_node(Some(primary_tls.port()));
    synced(primary.p.addr, replica.p.addr);
    let stls = free_port().to_string();
    let s = SentinelProc::start(
        primary_tls,
        &[
            &format!("tls-port {stls}"),
            &format!("tls-cert-file {cert}"),
            &format!("tls-key-file {key}"),
            &format!("tls-ca-cert-file {ca}"),
            "tls-auth-clients no",
            "tls-replication yes",
        ],
    );
    s.knows_replicas(1);
    let opts = Options {
        tls: latchkey::TlsOptions {
            ca_file: Some(pki.ca.clone()),
            ..Default::default()
        },
        ..reconnecting()
    };
    let url = format!("rediss-sentinel://127.0.0.1:{stls}#m");
    let c = Client::connect_with(&url, opts).await.unwrap();
    assert_eq!(addr_of(&c), Some(primary_tls));
    c.set("before", "1").await.unwrap();
    synced(primary.p.addr, replica.p.addr);
    primary.p.kill9();
    write_once_promoted(&c, &s).await;
    assert_eq!(addr_of(&c), Some(replica_tls));
    assert_eq!(role(replica.p.addr), "master");
    assert_eq!(c.get("before").await.unwrap().as_deref(), Some(&b"1"[..]));
}
