//! Lock benchmark (issue 4): 16 workers contend on one lock, each doing
//! acquire -> GET counter -> SET counter+1 -> release, in four ways:
//!
//! 1. `SET NX PX` + 100 ms polling (Redis, and latchkey as a drop-in);
//! 2. `SET NX PX` + 1 ms polling (Redis and latchkey);
//! 3. Redisson-style (Redis): acquire script that returns the PTTL on failure,
//!    SUBSCRIBE and wait for a message, release = compare + DEL + PUBLISH script;
//! 4. latchkey: the bundled client's lock (SETTP + WATCHEX), and 4f its
//!    fair lock (SETTP ... QUEUE: the server hands the key to the next waiter).
//!
//! Then the failover case: a holder process is SIGKILLed while 8 waiters wait.
//!
//!     bench/lock.sh        (builds, starts both servers, runs this, writes the results)
//!
//! Direct use: `lockbench bench --redis ADDR --latchkey ADDR [--secs S] [--md FILE] [--svg FILE]`;
//! `lockbench hold --mode N --server redis|latchkey --addr ADDR` is the SIGKILL-able holder
//! that `bench` starts itself.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use latchkey::{Client, LockGuard};
use redis::aio::{MultiplexedConnection, PubSubSink, PubSubStream};
use redis::Value;
use tokio::io::AsyncBufReadExt;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};

const LOCK_KEY: &str = "lockbench:lock";
const COUNTER_KEY: &str = "lockbench:counter";
const CHANNEL: &str = "lockbench:unlock";
/// Lease of the Redis-style locks (modes 1-3); also what their failover waits out.
const TTL_MS: u64 = 2000;
/// No single acquire waits longer than this (keeps every loop bounded).
const GIVE_UP: Duration = Duration::from_secs(20);

/// Safe release for Redis: delete only while the key still holds our token.
const RELEASE_SCRIPT: &str =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";
/// Redisson's acquire shape: nil when acquired, otherwise the remaining TTL.
const RS_ACQUIRE_SCRIPT: &str = "if redis.call('set',KEYS[1],ARGV[1],'NX','PX',ARGV[2]) then \
     return nil end return redis.call('pttl',KEYS[1])";
/// Redisson's release shape: compare, DEL and PUBLISH in one script.
const RS_RELEASE_SCRIPT: &str = "if redis.call('get',KEYS[1])==ARGV[1] then \
     redis.call('del',KEYS[1]) redis.call('publish',KEYS[2],'unlocked') return 1 end return 0";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Poll100,
    Poll1,
    PubSub,
    Watch,
    /// Mode 4 with the herd-free queue: `lock(name)`, the default.
    WatchFair,
    /// Diagnostic: mode 4's recipe over the `redis` crate (RESP3 pushes),
    /// to tell the bundled client's cost from the server's.
    WatchCrate,
}

impl Mode {
    fn number(self) -> &'static str {
        match self {
            Mode::Poll100 => "1",
            Mode::Poll1 => "2",
            Mode::PubSub => "3",
            Mode::Watch => "4",
            Mode::WatchFair => "4f",
            Mode::WatchCrate => "4b",
        }
    }

    fn from_number(n: &str) -> Option<Mode> {
        Some(match n {
            "1" => Mode::Poll100,
            "2" => Mode::Poll1,
            "3" => Mode::PubSub,
            "4" => Mode::Watch,
            "4f" => Mode::WatchFair,
            "4b" => Mode::WatchCrate,
            _ => return None,
        })
    }

    fn label(self) -> &'static str {
        match self {
            Mode::Poll100 => "1. SET NX PX + 100 ms poll",
            Mode::Poll1 => "2. SET NX PX + 1 ms poll",
            Mode::PubSub => "3. Redisson-style pub/sub",
            Mode::Watch => "4. SETTP + WATCHEX loop (`watch_loop()`)",
            Mode::WatchFair => "4f. SETTP QUEUE, server hand-off (`lock()`, default)",
            Mode::WatchCrate => "4b. same via `redis` crate (diagnostic)",
        }
    }

    fn poll_interval(self) -> Option<Duration> {
        match self {
            Mode::Poll100 => Some(Duration::from_millis(100)),
            Mode::Poll1 => Some(Duration::from_millis(1)),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Server {
    Redis,
    Latchkey,
}

impl Server {
    fn name(self) -> &'static str {
        match self {
            Server::Redis => "redis",
            Server::Latchkey => "latchkey",
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Res<T> = std::result::Result<T, BoxError>;

/// What every worker of one run shares: the stop signal, the acquisition
/// sequence (for the hand-off rule) and the "waiting" count (for failover).
#[derive(Clone)]
struct Shared {
    stop: watch::Receiver<bool>,
    seq: Arc<watch::Sender<u64>>,
    waiting: Arc<AtomicUsize>,
    first_acquired: Arc<parking_lot::Mutex<Option<Instant>>>,
}

impl Shared {
    fn new() -> (Shared, watch::Sender<bool>) {
        let (stop_tx, stop) = watch::channel(false);
        let shared = Shared {
            stop,
            seq: Arc::new(watch::channel(0).0),
            waiting: Arc::new(AtomicUsize::new(0)),
            first_acquired: Arc::new(parking_lot::Mutex::new(None)),
        };
        (shared, stop_tx)
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Resolves once the stop flag is set.
    async fn stopping(&self) {
        let mut rx = self.stop.clone();
        let _ = rx.wait_for(|s| *s).await;
    }

    fn note_acquired(&self) -> u64 {
        let now = Instant::now();
        self.first_acquired.lock().get_or_insert(now);
        let mut mine = 0;
        self.seq.send_modify(|s| {
            *s += 1;
            mine = *s;
        });
        mine
    }

    /// The hand-off rule: a worker that just released re-enters the contest
    /// only after another worker has acquired (in-process, no server traffic).
    async fn wait_turn(&self, mine: u64) {
        let mut rx = self.seq.subscribe();
        tokio::select! {
            _ = rx.wait_for(|s| *s != mine) => {}
            _ = self.stopping() => {}
        }
    }
}

/// Per-worker results.
#[derive(Default)]
struct Tally {
    acquired: u64,
    waits_us: Vec<u64>,
}

// ---------------------------------------------------------------- Redis-protocol locks (modes 1-3)

/// One worker's connections for modes 1-3 (the `redis` crate).
struct RedisLocker {
    server: Server,
    mode: Mode,
    con: MultiplexedConnection,
    /// Mode 3: the subscribe side, and the message stream.
    sink: Option<PubSubSink>,
    messages: Option<PubSubStream>,
    /// Mode 3: an UNSUBSCRIBE sent after acquiring, in flight during the
    /// critical section (Redisson does not wait for it either).
    unsubscribing: Option<JoinHandle<Res<PubSubSink>>>,
    /// Mode 4b: RESP3 pushes, and whether WATCHEX is registered.
    pushes: Option<mpsc::UnboundedReceiver<redis::PushInfo>>,
    watching: bool,
    tag: String,
    n: u64,
    cmds: u64,
}

impl RedisLocker {
    async fn connect(server: Server, mode: Mode, addr: &str, tag: String) -> Res<RedisLocker> {
        let mut pushes = None;
        let con = if mode == Mode::WatchCrate {
            let client = redis::Client::open(format!("redis://{addr}/?protocol=resp3"))?;
            let (tx, rx) = mpsc::unbounded_channel();
            pushes = Some(rx);
            let config = redis::AsyncConnectionConfig::new().set_push_sender(tx);
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await?
        } else {
            redis::Client::open(format!("redis://{addr}/"))?
                .get_multiplexed_tokio_connection()
                .await?
        };
        let client = redis::Client::open(format!("redis://{addr}/"))?;
        let (sink, messages) = if mode == Mode::PubSub {
            let (sink, stream) = client.get_async_pubsub().await?.split();
            (Some(sink), Some(stream))
        } else {
            (None, None)
        };
        Ok(RedisLocker {
            server,
            mode,
            con,
            sink,
            messages,
            unsubscribing: None,
            pushes,
            watching: false,
            tag,
            n: 0,
            cmds: 0,
        })
    }

    fn next_token(&mut self) -> String {
        self.n += 1;
        format!("{}:{}", self.tag, self.n)
    }

    /// Acquires the lock; `None` when stopped (or after GIVE_UP) first.
    async fn acquire(&mut self, sh: &Shared) -> Res<Option<String>> {
        match (self.mode, self.mode.poll_interval()) {
            (_, Some(every)) => self.acquire_poll(sh, every).await,
            (Mode::WatchCrate, _) => self.acquire_watch(sh).await,
            _ => self.acquire_pubsub(sh).await,
        }
    }

    /// The bundled client's recipe, by hand: SETTP; on 0 WATCHEX (once) and
    /// wait for the `DEL` push, then SETTP again; after acquiring, UNWATCHEX
    /// without waiting for its reply.
    async fn acquire_watch(&mut self, sh: &Shared) -> Res<Option<String>> {
        let token = self.next_token();
        let give_up = Instant::now() + GIVE_UP;
        let mut pushes = self.pushes.take().ok_or("push channel missing")?;
        let mut failed = false;
        let got = loop {
            self.cmds += 1;
            let r: i64 = redis::cmd("SETTP")
                .arg(LOCK_KEY)
                .arg(&token)
                .query_async(&mut self.con)
                .await?;
            if r == 1 {
                if self.watching {
                    self.watching = false;
                    self.cmds += 1;
                    let mut con = self.con.clone();
                    tokio::spawn(async move {
                        let _: redis::RedisResult<i64> = redis::cmd("UNWATCHEX")
                            .arg(LOCK_KEY)
                            .query_async(&mut con)
                            .await;
                    });
                }
                break Some(token);
            }
            if !failed {
                failed = true;
                sh.waiting.fetch_add(1, Ordering::SeqCst);
            }
            if sh.stopped() || Instant::now() > give_up {
                break None;
            }
            if !self.watching {
                // Pushes left from the previous watch are stale.
                while pushes.try_recv().is_ok() {}
                self.cmds += 1;
                let state: String = redis::cmd("WATCHEX")
                    .arg(LOCK_KEY)
                    .query_async(&mut self.con)
                    .await?;
                self.watching = true;
                if state == "NOEXIST" {
                    continue;
                }
            }
            // Bounded by give_up and stop.
            let deleted = loop {
                tokio::select! {
                    p = pushes.recv() => match p {
                        None => return Err("connection closed".into()),
                        Some(p) if is_del_push(&p) => break true,
                        Some(_) => {}
                    },
                    _ = tokio::time::sleep_until(give_up.into()) => break false,
                    _ = sh.stopping() => break false,
                }
            };
            if !deleted {
                break None;
            }
        };
        self.pushes = Some(pushes);
        Ok(got)
    }

    async fn acquire_poll(&mut self, sh: &Shared, every: Duration) -> Res<Option<String>> {
        let token = self.next_token();
        let give_up = Instant::now() + GIVE_UP;
        let mut failed = false;
        loop {
            self.cmds += 1;
            let v: Value = redis::cmd("SET")
                .arg(LOCK_KEY)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(TTL_MS)
                .query_async(&mut self.con)
                .await?;
            if v == Value::Okay {
                return Ok(Some(token));
            }
            if !failed {
                failed = true;
                sh.waiting.fetch_add(1, Ordering::SeqCst);
            }
            if sh.stopped() || Instant::now() > give_up {
                return Ok(None);
            }
            tokio::select! {
                _ = sleep(every) => {}
                _ = sh.stopping() => return Ok(None),
            }
        }
    }

    async fn try_acquire_script(&mut self, token: &str) -> Res<Option<i64>> {
        self.cmds += 1;
        let pttl: Option<i64> = redis::cmd("EVAL")
            .arg(RS_ACQUIRE_SCRIPT)
            .arg(1)
            .arg(LOCK_KEY)
            .arg(token)
            .arg(TTL_MS)
            .query_async(&mut self.con)
            .await?;
        Ok(pttl)
    }

    /// Redisson's lock(): try; on failure subscribe, try again, then wait for
    /// an unlock message (at most the remaining TTL) and retry.
    async fn acquire_pubsub(&mut self, sh: &Shared) -> Res<Option<String>> {
        let token = self.next_token();
        if self.try_acquire_script(&token).await?.is_none() {
            return Ok(Some(token));
        }
        sh.waiting.fetch_add(1, Ordering::SeqCst);
        // The previous UNSUBSCRIBE must be done before subscribing again.
        let mut sink = match self.unsubscribing.take() {
            Some(h) => h.await??,
            None => self.sink.take().ok_or("pub/sub sink missing")?,
        };
        self.cmds += 1;
        sink.subscribe(CHANNEL).await?;
        let give_up = Instant::now() + GIVE_UP;
        let mut messages = self.messages.take().ok_or("pub/sub stream missing")?;
        let mut got = None;
        loop {
            // Re-try after subscribing: an unlock published before the
            // subscription took effect would otherwise be missed.
            let Some(pttl) = self.try_acquire_script(&token).await? else {
                got = Some(token);
                break;
            };
            if sh.stopped() || Instant::now() > give_up {
                break;
            }
            let wait = Duration::from_millis(pttl.clamp(1, TTL_MS as i64) as u64);
            tokio::select! {
                m = messages.next() => {
                    if m.is_none() {
                        return Err("pub/sub connection closed".into());
                    }
                }
                _ = sleep(wait) => {}
                _ = sh.stopping() => break,
            }
        }
        self.messages = Some(messages);
        self.cmds += 1;
        self.unsubscribing = Some(tokio::spawn(async move {
            sink.unsubscribe(CHANNEL).await?;
            Ok(sink)
        }));
        Ok(got)
    }

    async fn release(&mut self, token: &str) -> Res<bool> {
        self.cmds += 1;
        let deleted: i64 = match (self.mode, self.server) {
            (Mode::PubSub, _) => {
                redis::cmd("EVAL")
                    .arg(RS_RELEASE_SCRIPT)
                    .arg(2)
                    .arg(LOCK_KEY)
                    .arg(CHANNEL)
                    .arg(token)
                    .query_async(&mut self.con)
                    .await?
            }
            // Modes 1-2 release as Redis users do, with a compare-and-delete
            // script, on either server.
            (Mode::Poll100 | Mode::Poll1, _) | (_, Server::Redis) => {
                redis::cmd("EVAL")
                    .arg(RELEASE_SCRIPT)
                    .arg(1)
                    .arg(LOCK_KEY)
                    .arg(token)
                    .query_async(&mut self.con)
                    .await?
            }
            // Mode 4b is the bundled client's recipe: DELIFEQ.
            (_, Server::Latchkey) => {
                redis::cmd("DELIFEQ")
                    .arg(LOCK_KEY)
                    .arg(token)
                    .query_async(&mut self.con)
                    .await?
            }
        };
        Ok(deleted == 1)
    }

    async fn bump_counter(&mut self) -> Res<()> {
        let v: Option<i64> = redis::cmd("GET")
            .arg(COUNTER_KEY)
            .query_async(&mut self.con)
            .await?;
        redis::cmd("SET")
            .arg(COUNTER_KEY)
            .arg(v.unwrap_or(0) + 1)
            .query_async::<()>(&mut self.con)
            .await?;
        Ok(())
    }

    /// Waits for a pending UNSUBSCRIBE so its command is counted before the run ends.
    async fn finish(mut self) -> Res<u64> {
        if let Some(h) = self.unsubscribing.take() {
            h.await??;
        }
        Ok(self.cmds)
    }
}

/// `watchex <key> DEL` (the crate strips the push kind into `PushKind`).
fn is_del_push(p: &redis::PushInfo) -> bool {
    matches!(p.data.last(), Some(Value::BulkString(b)) if b.as_slice() == b"DEL")
}

// ---------------------------------------------------------------- one worker, any mode

enum Locker {
    Redis(RedisLocker),
    /// Modes 4 and 4f: the bundled client, exactly as users call it
    /// (`true`: the fair, herd-free queue).
    Bundled(Client, bool),
}

impl Locker {
    async fn connect(server: Server, mode: Mode, addr: &str, tag: String) -> Res<Locker> {
        if matches!(mode, Mode::Watch | Mode::WatchFair) {
            return Ok(Locker::Bundled(
                Client::connect(&format!("redis://{addr}")).await?,
                mode == Mode::WatchFair,
            ));
        }
        Ok(Locker::Redis(
            RedisLocker::connect(server, mode, addr, tag).await?,
        ))
    }

    /// One acquisition, stoppable: returns the wait, or `None` when stopped.
    async fn acquire(&mut self, sh: &Shared) -> Res<Option<(Held, Duration)>> {
        let t0 = Instant::now();
        let held = match self {
            Locker::Redis(r) => r.acquire(sh).await?.map(Held::Token),
            Locker::Bundled(c, fair) => {
                let lock = if *fair {
                    c.lock(LOCK_KEY).fair()
                } else {
                    c.lock(LOCK_KEY).watch_loop()
                };
                // Dropping lock() on stop is safe: the client releases a
                // lock its cancelled future may just have taken.
                tokio::select! {
                    g = lock => Some(Held::Guard(g?)),
                    _ = sh.stopping() => None,
                }
            }
        };
        Ok(held.map(|h| (h, t0.elapsed())))
    }

    async fn bump_counter(&mut self) -> Res<()> {
        match self {
            Locker::Redis(r) => r.bump_counter().await,
            Locker::Bundled(c, _) => {
                let v = c.get(COUNTER_KEY).await?;
                let n: i64 = match v {
                    Some(b) => std::str::from_utf8(&b)?.parse()?,
                    None => 0,
                };
                c.set(COUNTER_KEY, n + 1).await?;
                Ok(())
            }
        }
    }

    async fn release(&mut self, held: Held) -> Res<bool> {
        match (self, held) {
            (Locker::Redis(r), Held::Token(t)) => r.release(&t).await,
            (Locker::Bundled(..), Held::Guard(g)) => Ok(g.unlock().await?),
            _ => Err("lock handle of the wrong kind".into()),
        }
    }

    /// Lock commands counted on the client side (`None` when not visible).
    async fn finish(self) -> Res<Option<u64>> {
        match self {
            Locker::Redis(r) => Ok(Some(r.finish().await?)),
            Locker::Bundled(..) => Ok(None),
        }
    }
}

enum Held {
    Token(String),
    Guard(LockGuard),
}

async fn worker(mut locker: Locker, sh: Shared) -> Res<(Tally, Option<u64>)> {
    let mut tally = Tally::default();
    // Bounded: each turn either acquires or ends the loop on stop.
    while !sh.stopped() {
        let Some((held, waited)) = locker.acquire(&sh).await? else {
            break;
        };
        let mine = sh.note_acquired();
        tally.acquired += 1;
        tally.waits_us.push(waited.as_micros() as u64);
        locker.bump_counter().await?;
        if !locker.release(held).await? {
            return Err("release found the lock no longer ours (lease expired?)".into());
        }
        sh.wait_turn(mine).await;
    }
    // Lock commands the worker sent (acquire attempts, SUBSCRIBE/UNSUBSCRIBE,
    // release); the counter GET/SET are not included.
    let cmds = locker.finish().await?;
    Ok((tally, cmds))
}

// ---------------------------------------------------------------- control connection helpers

async fn control(addr: &str) -> Res<MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://{addr}/"))?;
    Ok(client.get_multiplexed_tokio_connection().await?)
}

async fn total_commands(con: &mut MultiplexedConnection) -> Res<u64> {
    let info: String = redis::cmd("INFO").arg("stats").query_async(con).await?;
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "INFO stats has no total_commands_processed".into())
}

async fn reset_keys(con: &mut MultiplexedConnection) -> Res<()> {
    redis::cmd("DEL")
        .arg(LOCK_KEY)
        .arg(COUNTER_KEY)
        .query_async::<()>(con)
        .await?;
    Ok(())
}

/// CPU time (user + system) a process has used so far, from /proc.
fn cpu_time(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| Duration::from_micros(ticks * 1_000_000 / hz as u64))
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

// ---------------------------------------------------------------- throughput run

/// One row: the rounds of one mode on one server, pooled.
struct RunResult {
    mode: Mode,
    server: Server,
    acquisitions: u64,
    secs: f64,
    /// Hand-offs/s of each round, to show the run-to-run spread.
    round_rates: Vec<f64>,
    waits_us: Vec<u64>,
    client_cmds: Option<u64>,
    server_cmds: u64,
    /// (counter, acquisitions) of each round.
    counters: Vec<(i64, u64)>,
    /// CPU used during the runs by the server and by this benchmark process.
    server_cpu: Option<Duration>,
    bench_cpu: Option<Duration>,
}

impl RunResult {
    fn rate(&self) -> f64 {
        self.acquisitions as f64 / self.secs
    }

    fn counter_ok(&self) -> bool {
        self.counters.iter().all(|&(c, a)| c == a as i64)
    }

    fn per_acq(&self, n: u64) -> f64 {
        n as f64 / self.acquisitions.max(1) as f64
    }

    fn p(&self, pct: f64) -> u64 {
        percentile(&self.waits_us, pct)
    }

    /// CPU µs per hand-off, "server / benchmark".
    fn cpu_per_acq(&self) -> String {
        let per = |d: Option<Duration>| {
            d.map_or("?".into(), |d| {
                format!("{:.0}", self.per_acq(d.as_micros() as u64))
            })
        };
        format!("{} / {}", per(self.server_cpu), per(self.bench_cpu))
    }

    fn merge(&mut self, o: RunResult) {
        let add = |a: Option<Duration>, b: Option<Duration>| Some(a? + b?);
        self.acquisitions += o.acquisitions;
        self.secs += o.secs;
        self.round_rates.extend(o.round_rates);
        self.waits_us.extend(o.waits_us);
        self.waits_us.sort_unstable();
        self.client_cmds = self.client_cmds.zip(o.client_cmds).map(|(a, b)| a + b);
        self.server_cmds += o.server_cmds;
        self.counters.extend(o.counters);
        self.server_cpu = add(self.server_cpu, o.server_cpu);
        self.bench_cpu = add(self.bench_cpu, o.bench_cpu);
    }
}

async fn throughput(
    mode: Mode,
    server: Server,
    addr: &str,
    server_pid: Option<&str>,
    workers: usize,
    dur: Duration,
) -> Res<RunResult> {
    let mut ctl = control(addr).await?;
    reset_keys(&mut ctl).await?;
    let (sh, stop_tx) = Shared::new();
    let mut lockers = Vec::new();
    for w in 0..workers {
        let tag = format!("{}-{w}", std::process::id());
        lockers.push(Locker::connect(server, mode, addr, tag).await?);
    }
    let before = total_commands(&mut ctl).await?;
    let cpu0 = (server_pid.and_then(cpu_time), cpu_time("self"));
    let start = Instant::now();
    let handles: Vec<_> = lockers
        .into_iter()
        .map(|l| tokio::spawn(worker(l, sh.clone())))
        .collect();
    sleep(dur).await;
    let _ = stop_tx.send(true);
    let mut tallies = Vec::new();
    let mut client_total = Some(0u64);
    for h in handles {
        let (t, cmds) = timeout(GIVE_UP + Duration::from_secs(5), h).await???;
        client_total = client_total.zip(cmds).map(|(a, b)| a + b);
        tallies.push(t);
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu1 = (server_pid.and_then(cpu_time), cpu_time("self"));
    let delta = |a: Option<Duration>, b: Option<Duration>| Some(b?.saturating_sub(a?));
    // Let closed connections' last commands (UNWATCHEX on drop, ...) land.
    sleep(Duration::from_millis(200)).await;
    let after = total_commands(&mut ctl).await?;
    let counter: Option<i64> = redis::cmd("GET")
        .arg(COUNTER_KEY)
        .query_async(&mut ctl)
        .await?;
    let acquisitions: u64 = tallies.iter().map(|t| t.acquired).sum();
    let mut waits: Vec<u64> = tallies.into_iter().flat_map(|t| t.waits_us).collect();
    waits.sort_unstable();
    // The delta includes the first INFO itself and each acquisition's GET + SET.
    let lock_cmds = after.saturating_sub(before + 1 + 2 * acquisitions);
    Ok(RunResult {
        mode,
        server,
        acquisitions,
        secs,
        round_rates: vec![acquisitions as f64 / secs],
        waits_us: waits,
        client_cmds: client_total,
        server_cmds: lock_cmds,
        counters: vec![(counter.unwrap_or(0), acquisitions)],
        server_cpu: delta(cpu0.0, cpu1.0),
        bench_cpu: delta(cpu0.1, cpu1.1),
    })
}

// ---------------------------------------------------------------- failover

/// The SIGKILL target: acquires like a worker would, says "held", then sleeps.
async fn hold(mode: Mode, server: Server, addr: &str) -> Res<()> {
    let (sh, _stop_tx) = Shared::new();
    let mut locker =
        Locker::connect(server, mode, addr, format!("holder-{}", std::process::id())).await?;
    let Some((_held, _)) = locker.acquire(&sh).await? else {
        return Err("holder gave up".into());
    };
    println!("held");
    // Bounded: the benchmark kills it long before this ends.
    sleep(Duration::from_secs(120)).await;
    Ok(())
}

struct FailoverSample {
    kill_to_acquire: Duration,
    /// The lock's remaining TTL just before the kill (Redis-style locks).
    pttl_ms: Option<i64>,
}

async fn failover_once(
    mode: Mode,
    server: Server,
    addr: &str,
    waiters: usize,
) -> Res<FailoverSample> {
    let mut ctl = control(addr).await?;
    reset_keys(&mut ctl).await?;
    let (sh, stop_tx) = Shared::new();
    let mut lockers = Vec::new();
    for w in 0..waiters {
        let tag = format!("{}-w{w}", std::process::id());
        lockers.push(Locker::connect(server, mode, addr, tag).await?);
    }
    let exe = std::env::current_exe()?;
    let mut child = tokio::process::Command::new(exe)
        .args(["hold", "--mode", mode.number()])
        .args(["--server", server.name(), "--addr", addr])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("holder stdout")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    match timeout(Duration::from_secs(10), lines.next_line()).await {
        Ok(Ok(Some(l))) if l == "held" => {}
        other => return Err(format!("holder did not report holding: {other:?}").into()),
    }
    let handles: Vec<_> = lockers
        .into_iter()
        .map(|mut l| {
            let sh = sh.clone();
            tokio::spawn(async move {
                let got = l.acquire(&sh).await?;
                if let Some((held, _)) = got {
                    sh.note_acquired();
                    l.release(held).await?;
                }
                l.finish().await?;
                Ok::<_, BoxError>(())
            })
        })
        .collect();
    wait_for_waiters(mode, &sh, &mut ctl, waiters).await?;
    let pttl: Option<i64> = if matches!(mode, Mode::Watch | Mode::WatchFair | Mode::WatchCrate) {
        None
    } else {
        Some(
            redis::cmd("PTTL")
                .arg(LOCK_KEY)
                .query_async(&mut ctl)
                .await?,
        )
    };
    if sh.first_acquired.lock().is_some() {
        return Err("a waiter acquired while the holder was alive".into());
    }
    let killed = Instant::now();
    child.start_kill()?;
    let deadline = killed + GIVE_UP;
    let mut seq = sh.seq.subscribe();
    let _ = tokio::time::timeout_at(deadline.into(), seq.wait_for(|s| *s > 0)).await;
    let _ = stop_tx.send(true);
    for h in handles {
        timeout(GIVE_UP, h).await???;
    }
    let _ = child.wait().await;
    let first = sh
        .first_acquired
        .lock()
        .ok_or("no waiter acquired the lock")?;
    Ok(FailoverSample {
        kill_to_acquire: first.saturating_duration_since(killed),
        pttl_ms: pttl,
    })
}

/// Waits until every waiter is actually waiting (bounded, 5 s).
async fn wait_for_waiters(
    mode: Mode,
    sh: &Shared,
    ctl: &mut MultiplexedConnection,
    waiters: usize,
) -> Res<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let n = if mode == Mode::WatchFair {
            // Fair waiters are in the server's queue for the lock.
            let ids: Vec<i64> = redis::cmd("TPQUEUE").arg(LOCK_KEY).query_async(ctl).await?;
            ids.len()
        } else if matches!(mode, Mode::Watch | Mode::WatchCrate) {
            // The bundled client's wait is inside lock(): count watching
            // connections on the server instead.
            let list: String = redis::cmd("CLIENT").arg("LIST").query_async(ctl).await?;
            list.lines().filter(|l| l.contains(" watchex=1")).count()
        } else {
            sh.waiting.load(Ordering::SeqCst)
        };
        if n >= waiters {
            // Let the 1 ms pollers settle into their sleep/poll rhythm.
            sleep(Duration::from_millis(20)).await;
            return Ok(());
        }
        sleep(Duration::from_millis(5)).await;
    }
    Err("waiters did not all start waiting within 5 s".into())
}

struct FailoverResult {
    mode: Mode,
    server: Server,
    samples: Vec<FailoverSample>,
}

impl FailoverResult {
    fn sorted_ms(&self) -> Vec<f64> {
        let mut v: Vec<f64> = self
            .samples
            .iter()
            .map(|s| s.kill_to_acquire.as_secs_f64() * 1000.0)
            .collect();
        v.sort_by(|a, b| a.total_cmp(b));
        v
    }

    fn median_ms(&self) -> f64 {
        let v = self.sorted_ms();
        if v.is_empty() {
            return f64::NAN;
        }
        let m = v.len() / 2;
        if v.len() % 2 == 1 {
            v[m]
        } else {
            (v[m - 1] + v[m]) / 2.0
        }
    }

    fn max_ms(&self) -> f64 {
        self.sorted_ms().last().copied().unwrap_or(f64::NAN)
    }
}

// ---------------------------------------------------------------- report

fn fmt_us(us: u64) -> String {
    if us >= 10_000 {
        format!("{:.0} ms", us as f64 / 1000.0)
    } else if us >= 1000 {
        format!("{:.1} ms", us as f64 / 1000.0)
    } else {
        format!("{us} µs")
    }
}

fn fmt_ms(ms: f64) -> String {
    if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{ms:.2} ms")
    }
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cpus} cores ({model})")
}

struct Report<'a> {
    runs: &'a [RunResult],
    failovers: &'a [FailoverResult],
    workers: usize,
    waiters: usize,
    secs: u64,
    rounds: u64,
}

impl Report<'_> {
    fn run(&self, mode: Mode, server: Server) -> Option<&RunResult> {
        self.runs
            .iter()
            .find(|r| r.mode == mode && r.server == server)
    }

    fn failover(&self, mode: Mode, server: Server) -> Option<&FailoverResult> {
        self.failovers
            .iter()
            .find(|r| r.mode == mode && r.server == server)
    }

    fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# Lock benchmark (`bench/lock.sh`)\n");
        let _ = writeln!(
            s,
            "Machine: {}, loopback; the benchmark process, redis-server and latchkey-server share the \
             cores, and other builds may run at the same time: numbers are noisy, read the ratios.\n",
            machine()
        );
        let _ = writeln!(
            s,
            "{} workers, one lock, each with its own connection(s), each doing acquire → GET counter → \
             SET counter+1 → release. Every row runs {} s per round, {} rounds (the rows take turns, so \
             drift in machine load hits all of them); the figures pool the rounds. A worker that has \
             just released re-enters the contest only after another worker has acquired (an in-process \
             rule, no server traffic), so every acquisition is a hand-off between workers; without it a \
             polling releaser simply re-takes the lock and starves the others. Wait = start of the \
             acquire call to acquisition. Redis-style leases: {} ms.\n",
            self.workers, self.secs, self.rounds, TTL_MS
        );
        let _ = writeln!(
            s,
            "| mode | server | hand-offs/s (per round) | p50 wait | p99 wait | lock cmds/acq (client) | lock cmds/acq (server) | CPU µs/acq (server / bench) | counter check |"
        );
        let _ = writeln!(
            s,
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
        );
        for r in self.runs {
            let check = if r.counter_ok() {
                format!("ok (counter = {} acquisitions)", r.acquisitions)
            } else {
                let bad: Vec<String> = r
                    .counters
                    .iter()
                    .map(|(c, a)| format!("counter {c} vs {a} acquisitions"))
                    .collect();
                format!("**MISMATCH: {}**", bad.join("; "))
            };
            let client = r
                .client_cmds
                .map_or("n/a".into(), |c| format!("{:.2}", r.per_acq(c)));
            let rounds: Vec<String> = r.round_rates.iter().map(|x| format!("{x:.0}")).collect();
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} ({}) | {} | {} | {} | {:.2} | {} | {} |",
                r.mode.label(),
                r.server.name(),
                r.rate(),
                rounds.join(", "),
                fmt_us(r.p(50.0)),
                fmt_us(r.p(99.0)),
                client,
                r.per_acq(r.server_cmds),
                r.cpu_per_acq(),
                check
            );
        }
        let _ = writeln!(
            s,
            "\nlock cmds/acq: commands per acquisition besides the counter's GET and SET. *client* = \
             commands the workers sent (acquire attempts, SUBSCRIBE/UNSUBSCRIBE, release); not visible \
             for mode 4, whose lock recipe is inside the bundled client. *server* = delta of INFO \
             `total_commands_processed` minus the counter GET/SET; Redis counts the commands a Lua \
             script calls (GET, SET, PTTL, DEL, PUBLISH) as well as the EVAL, so its figure is higher \
             for the script-based rows (latchkey counts them the same way). Release: modes 1-2 use a \
             compare-and-delete EVAL on both servers; mode 4 uses DELIFEQ. Mode 3 acquires with a Redisson-shaped \
             script (SET NX PX, else return PTTL) and releases with compare + DEL + PUBLISH in one \
             script; its UNSUBSCRIBE after acquiring is not awaited (as in Redisson). Polling sleeps \
             use tokio timers (1 ms granularity, so \"1 ms\" sleeps 1-2 ms).\n"
        );
        let _ = writeln!(
            s,
            "CPU µs/acq: CPU time (user + system, from /proc) that the server process and this benchmark \
             process (all {} workers' clients) used during the row, per hand-off. On 2 cores their sum \
             bounds the hand-off rate. Row 4b runs mode 4's recipe (SETTP; on 0 WATCHEX once and wait \
             for the `DEL` push; UNWATCHEX after acquiring, not awaited; DELIFEQ) over the `redis` crate \
             with RESP3 pushes instead of the bundled client: a diagnostic that separates the client's \
             cost from the server's.\n",
            self.workers
        );
        let _ = writeln!(
            s,
            "Reading the rows: with 100 ms polling the pollers fall into step (a releaser's next poll \
             is timed from the hand-off it waited for), so about one hand-off happens per poll round, \
             like instances fired by the same schedule. Modes 3 and 4 both wake every waiter on each \
             release (PUBLISH to every subscriber, `DEL` push to every watcher) and each woken waiter \
             sends an acquire attempt, so a hand-off costs about {} attempts: that herd, more than the \
             round trips, sets their CPU per hand-off. Mode 4f is the bundled client's fair lock \
             (`lock(name)`, the default): a waiter sends `SETTP lock token QUEUE` once and the server, when \
             the holder's DELIFEQ (or disconnect) frees the key, creates it for the first in line and \
             pushes `ACQUIRED` to that one connection: no herd, and no acquire round trip after the \
             release.\n",
            self.workers.saturating_sub(1)
        );
        let _ = writeln!(
            s,
            "## Failover: holder SIGKILLed while {} waiters wait\n",
            self.waiters
        );
        let _ = writeln!(
            s,
            "Time from `kill -9` of the holder process to the first waiter's acquisition.\n"
        );
        let _ = writeln!(
            s,
            "| mode | server | runs | median | max (= p99 at these counts) | lock TTL left at kill |"
        );
        let _ = writeln!(s, "| --- | --- | ---: | ---: | ---: | ---: |");
        for f in self.failovers {
            let pttl: Vec<String> = f
                .samples
                .iter()
                .filter_map(|x| x.pttl_ms.map(|p| format!("{p}")))
                .collect();
            let pttl = if pttl.is_empty() {
                "none (bound to the connection)".to_string()
            } else {
                format!("{} ms", pttl.join(", "))
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                f.mode.label(),
                f.server.name(),
                f.samples.len(),
                fmt_ms(f.median_ms()),
                fmt_ms(f.max_ms()),
                pttl
            );
        }
        let _ = writeln!(
            s,
            "\nThe Redis-style locks cannot tell a dead holder from a slow one: waiters wait out the \
             lease, measured here with a {} ms TTL. Redisson's default lease (lockWatchdogTimeout) is \
             30 s, renewed every 10 s while the holder lives, so a killed holder blocks its waiters for \
             20-30 s. latchkey deletes a SETTP key when its connection ends and pushes `DEL` to the \
             watchers (mode 4f: hands the key to the first in line).\n",
            TTL_MS
        );
        s.push_str(&self.targets());
        s
    }

    fn targets(&self) -> String {
        let mut s = String::from("## Targets\n\n");
        for m in [Mode::Watch, Mode::WatchFair] {
            s.push_str(&self.targets_for(m));
        }
        let bad: Vec<String> = self
            .runs
            .iter()
            .filter(|r| !r.counter_ok())
            .map(|r| format!("{} on {}", r.mode.label(), r.server.name()))
            .collect();
        if bad.is_empty() {
            s.push_str("- counter check: every row ok\n");
        } else {
            let _ = writeln!(s, "- counter check FAILED: {}", bad.join(", "));
        }
        s
    }

    fn targets_for(&self, m: Mode) -> String {
        let mut s = String::new();
        let n = m.number();
        let lk = self.run(m, Server::Latchkey);
        let versus = |mode: Mode, need: f64| -> String {
            match (lk, self.run(mode, Server::Redis)) {
                (Some(a), Some(b)) if b.rate() > 0.0 => {
                    let ratio = a.rate() / b.rate();
                    let met = if ratio >= need { "met" } else { "**NOT met**" };
                    format!(
                        "{ratio:.1}x ({:.0} vs {:.0} hand-offs/s; target ≥ {need}x): {met}",
                        a.rate(),
                        b.rate()
                    )
                }
                _ => "not measured".into(),
            }
        };
        let _ = writeln!(
            s,
            "- mode {n} vs mode 1 (Redis): {}",
            versus(Mode::Poll100, 10.0)
        );
        let _ = writeln!(
            s,
            "- mode {n} vs mode 3 (Redis): {}",
            versus(Mode::PubSub, 2.0)
        );
        let fo = match self.failover(m, Server::Latchkey) {
            Some(f) => {
                let med = f.median_ms();
                let met = if med < 10.0 { "met" } else { "**NOT met**" };
                format!(
                    "median {} (max {}; target < 10 ms): {met}",
                    fmt_ms(med),
                    fmt_ms(f.max_ms())
                )
            }
            None => "not measured".into(),
        };
        let _ = writeln!(s, "- mode {n} failover: {fo}");
        s
    }

    /// Horizontal bar chart of hand-offs/s, log scale.
    fn svg(&self) -> String {
        let rows = self.runs.len().max(1);
        let (left, bar_h, gap, top, width) = (370.0, 24.0, 10.0, 50.0, 900.0);
        let plot_w = width - left - 110.0;
        let height = top + rows as f64 * (bar_h + gap) + 40.0;
        let max = self.runs.iter().map(|r| r.rate()).fold(10.0, f64::max);
        let decades = max.log10().ceil().max(1.0);
        let x = |v: f64| left + plot_w * (v.max(1.0).log10() / decades);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
             font-family=\"sans-serif\" font-size=\"13\">"
        );
        let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"24\" font-size=\"15\" font-weight=\"bold\">Lock hand-offs per second, \
             {} workers on one lock (log scale)</text>",
            20,
            self.workers
        );
        for d in 0..=decades as u32 {
            let v = 10f64.powi(d as i32);
            let xv = x(v);
            let _ = writeln!(
                s,
                "<line x1=\"{xv:.1}\" y1=\"{}\" x2=\"{xv:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\
                 <text x=\"{xv:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#666\">{}</text>",
                top - 8.0,
                height - 30.0,
                height - 14.0,
                v
            );
        }
        for (i, r) in self.runs.iter().enumerate() {
            let y = top + i as f64 * (bar_h + gap);
            let color = match (r.mode, r.server) {
                (Mode::Watch | Mode::WatchFair | Mode::WatchCrate, _) => "#2a9d8f",
                (_, Server::Latchkey) => "#8ab17d",
                _ => "#e76f51",
            };
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{} ({})</text>\
                 <rect x=\"{left}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{bar_h}\" fill=\"{color}\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\">{:.0}/s</text>",
                left - 8.0,
                y + bar_h * 0.68,
                r.mode.label(),
                r.server.name(),
                (x(r.rate()) - left).max(1.0),
                x(r.rate()) + 6.0,
                y + bar_h * 0.68,
                r.rate()
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

// ---------------------------------------------------------------- main

fn flags(args: &[String]) -> Res<HashMap<String, String>> {
    let mut m = HashMap::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let name = a
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected argument {a}"))?;
        let v = it.next().ok_or_else(|| format!("--{name} needs a value"))?;
        m.insert(name.to_string(), v.clone());
    }
    Ok(m)
}

fn server_of(s: &str) -> Res<Server> {
    match s {
        "redis" => Ok(Server::Redis),
        "latchkey" => Ok(Server::Latchkey),
        _ => Err(format!("unknown server {s}").into()),
    }
}

fn num(f: &HashMap<String, String>, name: &str, default: u64) -> Res<u64> {
    match f.get(name) {
        Some(v) => Ok(v.parse().map_err(|_| format!("--{name}: not a number"))?),
        None => Ok(default),
    }
}

async fn bench(f: &HashMap<String, String>) -> Res<()> {
    let redis = f.get("redis").ok_or("--redis ADDR is required")?.clone();
    let lk = f
        .get("latchkey")
        .ok_or("--latchkey ADDR is required")?
        .clone();
    let secs = num(f, "secs", 5)?;
    let rounds = num(f, "rounds", 2)?;
    let workers = num(f, "workers", 16)? as usize;
    let waiters = num(f, "waiters", 8)? as usize;
    let fast_reps = num(f, "fast-reps", 10)?;
    let ttl_reps = num(f, "ttl-reps", 3)?;
    let plan = [
        (Mode::Poll100, Server::Redis),
        (Mode::Poll100, Server::Latchkey),
        (Mode::Poll1, Server::Redis),
        (Mode::Poll1, Server::Latchkey),
        (Mode::PubSub, Server::Redis),
        (Mode::PubSub, Server::Latchkey),
        (Mode::Watch, Server::Latchkey),
        (Mode::WatchFair, Server::Latchkey),
        (Mode::WatchCrate, Server::Latchkey),
    ];
    let addr = |s: Server| match s {
        Server::Redis => redis.as_str(),
        Server::Latchkey => lk.as_str(),
    };
    // --only 3-redis,4-latchkey: run just those rows.
    let only: Option<Vec<String>> = f
        .get("only")
        .map(|o| o.split(',').map(String::from).collect());
    let wanted = |mode: Mode, server: Server| {
        only.as_ref()
            .is_none_or(|o| o.contains(&format!("{}-{}", mode.number(), server.name())))
    };
    // Rounds run every row in turn, so drift in machine load hits all rows.
    let mut runs: Vec<RunResult> = Vec::new();
    for round in 1..=rounds {
        for (mode, server) in plan.into_iter().filter(|&(m, s)| wanted(m, s)) {
            eprintln!(
                "round {round}/{rounds}: {} on {} ({secs} s)",
                mode.label(),
                server.name()
            );
            let pid = match server {
                Server::Redis => f.get("redis-pid"),
                Server::Latchkey => f.get("latchkey-pid"),
            };
            let dur = Duration::from_secs(secs);
            let pid = pid.map(|p| p.as_str());
            let r = throughput(mode, server, addr(server), pid, workers, dur).await?;
            eprintln!(
                "  {:.0} hand-offs/s, p50 {}, p99 {}, cpu µs/acq {}, counter {} / {}",
                r.rate(),
                fmt_us(r.p(50.0)),
                fmt_us(r.p(99.0)),
                r.cpu_per_acq(),
                r.counters[0].0,
                r.acquisitions
            );
            match runs
                .iter_mut()
                .find(|x| x.mode == mode && x.server == server)
            {
                Some(x) => x.merge(r),
                None => runs.push(r),
            }
        }
    }
    let mut failovers = Vec::new();
    let fplan = [
        (Mode::Watch, Server::Latchkey),
        (Mode::WatchFair, Server::Latchkey),
        (Mode::Poll100, Server::Redis),
        (Mode::Poll100, Server::Latchkey),
        (Mode::Poll1, Server::Redis),
        (Mode::Poll1, Server::Latchkey),
        (Mode::PubSub, Server::Redis),
        (Mode::PubSub, Server::Latchkey),
    ];
    for (mode, server) in fplan.into_iter().filter(|&(m, s)| wanted(m, s)) {
        let reps = if matches!(mode, Mode::Watch | Mode::WatchFair) {
            fast_reps
        } else {
            ttl_reps
        };
        eprintln!(
            "failover: {} on {} ({reps} runs)",
            mode.label(),
            server.name()
        );
        let mut samples = Vec::new();
        for _ in 0..reps {
            let s = failover_once(mode, server, addr(server), waiters).await?;
            eprintln!("  {}", fmt_ms(s.kill_to_acquire.as_secs_f64() * 1000.0));
            samples.push(s);
        }
        failovers.push(FailoverResult {
            mode,
            server,
            samples,
        });
    }
    let report = Report {
        runs: &runs,
        failovers: &failovers,
        workers,
        waiters,
        secs,
        rounds,
    };
    let md = report.markdown();
    println!("{md}");
    if let Some(path) = f.get("md") {
        std::fs::write(path, &md)?;
    }
    if let Some(path) = f.get("svg") {
        std::fs::write(path, report.svg())?;
    }
    if runs.iter().any(|r| !r.counter_ok()) {
        return Err("COUNTER MISMATCH: the lock let two holders in (see the table)".into());
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = rt.block_on(async {
        let (sub, rest) = args
            .split_first()
            .ok_or("usage: lockbench bench|hold --flag value ...")?;
        let f = flags(rest)?;
        match sub.as_str() {
            "bench" => bench(&f).await,
            "hold" => {
                let mode =
                    Mode::from_number(f.get("mode").map_or("", |s| s)).ok_or("--mode 1|2|3|4")?;
                let server = server_of(f.get("server").map_or("", |s| s))?;
                hold(mode, server, f.get("addr").ok_or("--addr")?).await
            }
            other => Err(format!("unknown subcommand {other}").into()),
        }
    });
    if let Err(e) = result {
        eprintln!("lockbench: {e}");
        std::process::exit(1);
    }
}
