//! The fault-injection checker: K worker processes repeat lock → read a
//! shared resource → 5 ms of work → write it with the fencing token →
//! unlock, against a
//! resource that refuses stale tokens, while the harness injects faults at
//! random: SIGKILL a worker, SIGSTOP/SIGCONT a worker past its session
//! timeout, cut a worker's connection (a proxy that resets it), black-hole
//! it (the proxy stops forwarding), and restart the lock server (kill -9,
//! then start again over its AOF). Then it checks what the workers and the
//! resource recorded: no lost update (every accepted write is in the
//! counter: two holders never both wrote from the same read), accepted
//! tokens never go down, every worker made progress, and how long the lock
//! was unavailable after each fault.
//!
//! The workers are this test binary run again with `LK_FAULT_WORKER` set
//! (the `fault_worker` test is then the worker's main); they log to stdout.
//! `tests/` runs it short (`fault_checker`); `bench/faults.sh` runs it
//! longer with `LK_FAULT_SECS` and prints the report.

mod common;
#[path = "faults/replicated.rs"]
mod replicated;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Duration;

use common::*;

/// The two checkers run one after the other (each loads the 2 cores).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The session timeout of the workers (ms).
const SESSION_MS: u64 = 300;

/// CLOCK_MONOTONIC in ns: one clock for every process on the machine.
fn wall_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Reads the counter with a token: refused when a higher token has been
/// seen; otherwise the token is remembered (a later, older holder's write
/// is then refused) and the counter returned.
const READ: &str = "local last = tonumber(redis.call('GET', KEYS[2]) or '0') \
    local t = tonumber(ARGV[1]) \
    if t < last then return redis.error_reply('STALE') end \
    redis.call('SET', KEYS[2], ARGV[1]) \
    return tonumber(redis.call('GET', KEYS[1]) or '0')";

/// Writes the counter with a token, refused when a higher token has been
/// seen; a write whose read is no longer the counter's value is a lost
/// update (two holders read the same value): it is applied anyway and
/// counted, so the check below finds it.
const WRITE: &str = "local last = tonumber(redis.call('GET', KEYS[2]) or '0') \
    local t = tonumber(ARGV[1]) \
    if t < last then return redis.error_reply('STALE') end \
    redis.call('SET', KEYS[2], ARGV[1]) \
    local cur = tonumber(redis.call('GET', KEYS[1]) or '0') \
    if cur ~= tonumber(ARGV[2]) then redis.call('INCR', 'lost-updates') end \
    redis.call('SET', KEYS[1], cur + 1) \
    return redis.call('RPUSH', 'accepted', ARGV[1])";

/// The worker's main, when run as a worker: loops until killed (or its
/// deadline), reconnecting after every loss.
#[test]
fn fault_worker() {
    let Ok(id) = std::env::var("LK_FAULT_WORKER") else {
        return;
    };
    let lock_url = std::env::var("LK_LOCK_URL").unwrap();
    let res_url = std::env::var("LK_RES_URL").unwrap();
    let deadline = mono_ns() + 120_000_000_000;
    worker_runtime().block_on(async move {
        use latchkey::{cmd, Client, Options};
        let opts = Options {
            session_timeout: Some(Duration::from_millis(SESSION_MS)),
            request_timeout: Some(Duration::from_secs(2)),
            connect_timeout: Duration::from_millis(500),
            ..Options::default()
        };
        let res = Client::connect(&res_url).await.unwrap();
        while mono_ns() < deadline {
            let Ok(c) = Client::connect_with(&lock_url, opts.clone()).await else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            // Which server-side connection is this worker's (TPOWNER).
            match c.query::<i64>(&cmd("CLIENT").arg("ID")).await {
                Ok(cid) => println!("conn {id} {cid}"),
                Err(_) => continue,
            }
            while mono_ns() < deadline && c.is_connected() {
                let asked = mono_ns();
                let g = match c.lock("L").timeout(Duration::from_secs(5)).await {
                    Ok(g) => g,
                    Err(_) => break,
                };
                let t = g.token();
                println!("grant {id} {t} {} {}", mono_ns(), asked);
                let outcome = match read_resource(&res, t).await {
                    Some(n) => {
                        // Work while holding the lock.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        write_resource(&res, t, n).await
                    }
                    None => "stale",
                };
                println!("write {id} {t} {outcome}");
                // Said before the release is sent: a fault after this line
                // may find the lock already passed on, so it is not
                // counted as one that hit the holder.
                println!("release {id} {t} {}", mono_ns());
                let _ = g.unlock().await;
            }
        }
    });
}

/// A worker process's runtime: one thread.
fn worker_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The resource's counter read with fencing token `t`; None if refused
/// as stale (or unreachable).
async fn read_resource(res: &latchkey::Client, t: u64) -> Option<i64> {
    use latchkey::{cmd, Value};
    let read = cmd("EVAL").arg(READ).arg(2).arg("ctr").arg("last").arg(t);
    match res.query::<Value>(&read).await {
        Ok(Value::Int(n)) => Some(n),
        _ => None,
    }
}

/// The counter written as `n + 1` with fencing token `t`: "ok", or
/// "stale" if refused.
async fn write_resource(res: &latchkey::Client, t: u64, n: i64) -> &'static str {
    use latchkey::{cmd, Value};
    let write = cmd("EVAL")
        .arg(WRITE)
        .arg(2)
        .arg("ctr")
        .arg("last")
        .arg(t)
        .arg(n);
    match res.query::<Value>(&write).await {
        Ok(_) => "ok",
        Err(_) => "stale",
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Fault {
    Kill,
    StopCont,
    Cut,
    Blackhole,
    Restart,
}

const FAULTS: [Fault; 5] = [
    Fault::Kill,
    Fault::StopCont,
    Fault::Cut,
    Fault::Blackhole,
    Fault::Restart,
];

struct Worker {
    child: Child,
    proxy: Proxy,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_worker(id: usize, proxy: &Proxy, res: &str, log: &Sender<String>) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "fault_worker",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("LK_FAULT_WORKER", id.to_string())
        .env("LK_LOCK_URL", format!("redis://{}", proxy.addr))
        .env("LK_RES_URL", res)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    pipe_lines(&mut child, log);
    child
}

/// Sends each line `child` writes to its stdout to `log`, from a thread.
fn pipe_lines(child: &mut Child, log: &Sender<String>) {
    let out = child.stdout.take().unwrap();
    let log = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if log.send(line).is_err() {
                return;
            }
        }
    });
}

/// What the resource recorded: its counter, the lost updates it saw, and
/// the tokens of the writes it accepted, in order.
struct Resource {
    counter: i64,
    lost_updates: i64,
    tokens: Vec<u64>,
}

impl Resource {
    fn read(addr: std::net::SocketAddr) -> Resource {
        let mut c = Conn::ready(addr);
        let int = |v: V| match v {
            V::Int(n) => n,
            V::Bulk(b) => String::from_utf8_lossy(&b).parse().unwrap(),
            V::Nil => 0,
            v => panic!("{v:?}"),
        };
        let counter = int(c.cmd(&["GET", "ctr"]));
        let lost_updates = int(c.cmd(&["GET", "lost-updates"]));
        let tokens = match c.cmd(&["LRANGE", "accepted", "0", "-1"]) {
            V::Arr(v) => v.into_iter().map(|t| int(t) as u64).collect(),
            v => panic!("{v:?}"),
        };
        Resource {
            counter,
            lost_updates,
            tokens,
        }
    }
}

struct Report {
    tally: Tally,
    faults: HashMap<Fault, usize>,
    /// ms from a fault to the next grant, as the next worker saw it, by kind.
    unavailable: HashMap<Fault, Vec<f64>>,
    /// ms from a fault to the server's grant (its token's clock), by kind.
    handed_over: HashMap<Fault, Vec<f64>>,
}

/// What every run of the checker judges: the workers' grants and writes
/// against the resource's own record.
struct Tally {
    grants: usize,
    /// Writes the workers saw accepted, and refused (or dropped).
    accepted: usize,
    refused: usize,
    resource: Resource,
    workers_without_grants: usize,
}

impl Tally {
    fn tokens_down(&self) -> usize {
        let t = &self.resource.tokens;
        t.windows(2).filter(|w| w[1] < w[0]).count()
    }

    fn summary(&self) -> String {
        format!(
            "{} grants, {} writes accepted, {} refused, counter {}, lost updates {}, accepted tokens going down {}",
            self.grants,
            self.accepted,
            self.refused,
            self.resource.counter,
            self.resource.lost_updates,
            self.tokens_down()
        )
    }

    /// No lost update, every accepted write counted once, tokens never
    /// down, no worker starved, at least `min_grants` grants.
    fn assert_safe(&self, min_grants: usize) {
        let r = &self.resource;
        assert_eq!(r.lost_updates, 0, "two holders wrote from the same read");
        // A worker killed between the write and its log line said nothing:
        // the resource's own list is the judge.
        assert_eq!(
            r.counter,
            r.tokens.len() as i64,
            "every accepted write counted once"
        );
        assert!(self.accepted <= r.tokens.len());
        assert_eq!(self.tokens_down(), 0, "accepted tokens never go down");
        assert_eq!(self.workers_without_grants, 0, "a worker starved");
        assert!(self.grants >= min_grants, "too few grants: {}", self.grants);
    }
}

/// Runs the checker for `secs` with `k` workers, a fault every `every`.
fn check(secs: u64, k: usize, every: Duration) -> Report {
    let bin = env!("CARGO_BIN_EXE_latchkey-server");
    let dir = TempDir::new("faults");
    let args = [
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ];
    let mut server = Proc::spawn(bin, &dir, &args);
    assert!(server.started().is_none(), "the lock server starts");
    let resource = start();
    let res_url = format!("redis://{}", resource.addr);
    let (log_tx, log_rx): (Sender<String>, Receiver<String>) = channel();
    let mut workers: Vec<Worker> = (0..k)
        .map(|id| {
            let proxy = Proxy::start(server.addr);
            let child = spawn_worker(id, &proxy, &res_url, &log_tx);
            Worker { child, proxy }
        })
        .collect();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ mono_ns();
    let mut rnd = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    // (fault, when, when in wall-clock µs, the worker it hit: None for a
    // server restart)
    let mut injected: Vec<(Fault, u64, u64, Option<usize>)> = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    // Server-side client id -> worker, from the workers' `conn` lines.
    let mut worker_of: HashMap<i64, usize> = HashMap::new();
    let mut admin: Option<Conn> = None;
    let end = mono_ns() + secs * 1_000_000_000;
    // Bounded: one fault per round until the end time.
    let mut respawn: Vec<usize> = Vec::new();
    while mono_ns() < end {
        std::thread::sleep(every);
        for w in respawn.drain(..) {
            workers[w].child = spawn_worker(w, &workers[w].proxy, &res_url, &log_tx);
        }
        for line in log_rx.try_iter() {
            if let Some(i) = line.find("conn ") {
                let w: Vec<&str> = line[i..].split_whitespace().collect();
                if let [_, id, cid] = w.as_slice() {
                    worker_of.insert(cid.parse().unwrap(), id.parse().unwrap());
                }
            }
            lines.push(line);
        }
        let f = FAULTS[rnd(FAULTS.len() as u64) as usize];
        // Half of the faults aim at the holder (as the server sees it).
        let a = admin.get_or_insert_with(|| Conn::ready(server.addr));
        let holder = match a.cmd(&["TPOWNER", "L"]) {
            V::Int(cid) => worker_of.get(&cid).copied(),
            _ => None,
        };
        let w = match holder {
            Some(h) if rnd(2) == 0 => h,
            _ => rnd(k as u64) as usize,
        };
        let at = mono_ns();
        let at_wall = wall_us();
        match f {
            Fault::Kill => {
                let _ = workers[w].child.kill();
                let _ = workers[w].child.wait();
                if std::env::var("LK_FAULT_DEBUG").is_ok() {
                    eprintln!("kill at {at_wall} reaped +{} us", wall_us() - at_wall);
                }
                // Started again at the next round, as a crashed process
                // comes back later (its start-up is then no part of the
                // time the others wait for the lock).
                respawn.push(w);
            }
            Fault::StopCont => {
                let pid = workers[w].child.id() as libc::pid_t;
                unsafe { libc::kill(pid, libc::SIGSTOP) };
                std::thread::sleep(Duration::from_millis(SESSION_MS + 200));
                unsafe { libc::kill(pid, libc::SIGCONT) };
            }
            Fault::Cut => workers[w].proxy.cut(),
            Fault::Blackhole => {
                workers[w].proxy.blackhole();
                std::thread::sleep(Duration::from_millis(SESSION_MS + 200));
                workers[w].proxy.cut();
                workers[w].proxy.restore();
            }
            Fault::Restart => {
                admin = None;
                server.restart(bin, &dir, &args);
                assert!(server.started().is_none(), "the lock server restarts");
            }
        }
        injected.push((f, at, at_wall, (f != Fault::Restart).then_some(w)));
    }
    drop(workers);
    drop(log_tx);
    lines.extend(log_rx.iter());
    // Everything the workers said.
    // (worker, token, granted at, asked at)
    let mut grants: Vec<(usize, u64, u64, u64)> = Vec::new();
    let mut releases: Vec<(usize, u64, u64)> = Vec::new();
    let (mut accepted, mut refused) = (0, 0);
    for line in lines {
        // The test harness may print its own words first on a line.
        let Some(i) = ["grant ", "write ", "release "]
            .iter()
            .filter_map(|w| line.find(w))
            .min()
        else {
            continue;
        };
        let w: Vec<&str> = line[i..].split_whitespace().collect();
        match w.as_slice() {
            ["grant", id, t, at, asked] => grants.push((
                id.parse().unwrap(),
                t.parse().unwrap(),
                at.parse().unwrap(),
                asked.parse().unwrap(),
            )),
            ["release", id, t, at] => {
                releases.push((id.parse().unwrap(), t.parse().unwrap(), at.parse().unwrap()))
            }
            ["write", _, _, "ok"] => accepted += 1,
            ["write", _, _, "stale"] => refused += 1,
            _ => {}
        }
    }
    let res_record = Resource::read(resource.addr);
    grants.sort_by_key(|g| g.2);
    let mut faults = HashMap::new();
    let mut unavailable: HashMap<Fault, Vec<f64>> = HashMap::new();
    let mut handed_over: HashMap<Fault, Vec<f64>> = HashMap::new();
    // Who held the lock at `at` (`at_wall` on the wall clock): the
    // server's last grant before it (tokens are its clock), if that holder
    // had heard of it and had not begun to release it.
    let holder_at = |at: u64, at_wall: u64| -> Option<usize> {
        let g = grants
            .iter()
            .filter(|g| g.1 < at_wall)
            .max_by_key(|g| g.1)?;
        let released = releases
            .iter()
            .any(|r| r.0 == g.0 && r.1 == g.1 && r.2 <= at);
        (g.2 <= at && !released).then_some(g.0)
    };
    for (f, at, at_wall, victim) in &injected {
        *faults.entry(*f).or_insert(0) += 1;
        // Unavailability counts faults that hit the holder (or the server).
        let hit = match victim {
            Some(w) => holder_at(*at, *at_wall) == Some(*w),
            None => true,
        };
        if std::env::var("LK_FAULT_DEBUG").is_ok() {
            eprintln!(
                "{f:?} at {at} victim {victim:?} holder {:?}",
                holder_at(*at, *at_wall)
            );
        }
        if !hit {
            continue;
        }
        // The next grant is the first the server made after the fault:
        // a token is the server's wall clock in µs when it granted
        // (max(last + 1, clock)), so a grant already on its way when the
        // fault hit does not count. The lock was unavailable only if that
        // holder was already waiting when the fault hit (otherwise nobody
        // wanted it yet); a restart drops every waiter's connection, so
        // there any next grant counts, reconnection included.
        let next = grants
            .iter()
            .filter(|g| g.1 > *at_wall && g.2 > *at)
            .min_by_key(|g| g.1);
        if let Some(g) = next {
            if g.3 <= *at || *f == Fault::Restart {
                // As the next worker saw it: its process ran again with
                // the lock.
                unavailable
                    .entry(*f)
                    .or_default()
                    .push((g.2 - at) as f64 / 1e6);
                if std::env::var("LK_FAULT_DEBUG").is_ok() {
                    eprintln!(
                        "{f:?} at {at_wall} next token +{} us",
                        g.1 as i64 - *at_wall as i64
                    );
                }
                // As the server did it: the grant's own clock.
                handed_over
                    .entry(*f)
                    .or_default()
                    .push((g.1 - at_wall) as f64 / 1e3);
            }
        }
    }
    if std::env::var("LK_FAULT_DEBUG").is_ok() {
        for id in 0..k {
            let n = grants.iter().filter(|g| g.0 == id).count();
            let held: u64 = grants
                .iter()
                .filter(|g| g.0 == id)
                .filter_map(|g| {
                    releases
                        .iter()
                        .find(|r| r.0 == id && r.1 == g.1)
                        .map(|r| r.2.saturating_sub(g.2))
                })
                .sum();
            eprintln!("worker {id}: {n} grants, held {} ms", held / 1_000_000);
        }
    }
    let workers_without_grants = (0..k)
        .filter(|id| !grants.iter().any(|g| g.0 == *id))
        .count();
    Report {
        tally: Tally {
            grants: grants.len(),
            accepted,
            refused,
            resource: res_record,
            workers_without_grants,
        },
        faults,
        unavailable,
        handed_over,
    }
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p).round() as usize]
}

#[test]
fn fault_checker() {
    if std::env::var("LK_FAULT_WORKER").is_ok() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let secs = std::env::var("LK_FAULT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let mut r = check(secs, 4, Duration::from_millis(150));
    println!("fault checker: {secs} s, 4 workers: {}", r.tally.summary());
    for f in FAULTS {
        let v = r.unavailable.entry(f).or_default();
        let (n, m, p, x) = (v.len(), pct(v, 0.5), pct(v, 0.99), pct(v, 1.0));
        let h = r.handed_over.entry(f).or_default();
        println!(
            "  {:?}: {} injected, {} on the holder with a waiter; lock unavailable after those: server hand-off median {:.1} ms, p99 {:.1} ms, max {:.1} ms; next worker running median {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            f,
            r.faults.get(&f).copied().unwrap_or(0),
            n,
            pct(h, 0.5),
            pct(h, 0.99),
            pct(h, 1.0),
            m,
            p,
            x
        );
    }
    r.tally.assert_safe(100);
}
