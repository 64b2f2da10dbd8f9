//! The server's runtime: its tasks on tokio over the state in
//! `crate::server` (listeners and the accept loop, one task per connection
//! in `conn`, background expiry, the save loop, graceful shutdown). Holds
//! no server state of its own beyond the lock around the `Store`.
//!
//! Must not run a command or change keys itself: each task calls its
//! owner's entry point under the lock (`Store::active_expire_cycle`,
//! `commands::settle`, `persist::cron`, `bgsave_step`, `aof_write_out`).

pub mod conn;
mod link;
mod master_link;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::Config;
use crate::server::Store;

/// State shared by every task of one server.
pub struct Shared {
    pub store: Mutex<Store>,
    /// Flips to true when the server begins shutting down.
    pub shutdown: watch::Sender<bool>,
    /// Whether a script runs (and is past busy-reply-threshold), readable
    /// without the store lock the script holds (see `scripting::gate`).
    pub script: Arc<crate::scripting::Gate>,
    /// The next connection's id, given when it is accepted (as Redis
    /// does), so one opened while a script is busy has its id already
    /// (the store's source, `Store::client_ids`).
    next_client_id: Arc<std::sync::atomic::AtomicU64>,
}

impl Shared {
    pub fn new(config: Config) -> Arc<Shared> {
        let (tx, _) = watch::channel(false);
        let store = Store::new(config, crate::commands::acl_catalog());
        let script = store.scripting.gate.clone();
        let next_client_id = store.client_ids();
        Arc::new(Shared {
            store: Mutex::new(store),
            shutdown: tx,
            script,
            next_client_id,
        })
    }

    /// An id for a connection just accepted.
    pub fn client_id(&self) -> crate::ids::ClientId {
        self.next_client_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// The store lock, for a task on the runtime. It never blocks a worker
    /// for more than a millisecond at a time, so that while a script holds
    /// the lock (for its whole run) the workers keep serving the other
    /// connections.
    pub async fn lock_store(&self) -> MutexGuard<'_, Store> {
        loop {
            if let Some(g) = self.store.try_lock_for(Duration::from_millis(1)) {
                return g;
            }
            if self.script.running() {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }

    /// `lock_store`, or None once the running script is past
    /// `busy-reply-threshold`: the caller answers without the store
    /// (`commands::answer_busy`).
    pub async fn lock_store_or_busy(&self) -> Option<MutexGuard<'_, Store>> {
        loop {
            if let Some(g) = self.store.try_lock_for(Duration::from_millis(1)) {
                return Some(g);
            }
            if self.script.busy() {
                return None;
            }
            if self.script.running() {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }

    /// The store lock from synchronous code on the runtime (a task's
    /// cleanup): waits on a blocking thread while a script runs.
    pub fn lock_store_blocking(&self) -> MutexGuard<'_, Store> {
        if let Some(g) = self.store.try_lock() {
            return g;
        }
        if self.script.running() {
            return crate::scripting::in_place(|| self.store.lock());
        }
        self.store.lock()
    }

    /// Starts a graceful shutdown: stop accepting, let connections finish.
    pub fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }
}

/// Binds every configured address.
/// A listening socket: the plain port, or `tls-port` with the slot its
/// acceptor is read from (CONFIG SET of a tls-* setting replaces it).
pub struct Listener {
    pub tcp: TcpListener,
    pub tls: Option<crate::tls::Slot>,
}

impl Listener {
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// Binds every `bind` address on `port`, then, with `tls-port`, on it
/// too (plain listeners first). A TLS set-up that cannot work fails here.
///
/// A failure is Redis's two log lines, joined by a newline: "Warning:
/// Could not create server TCP listening socket ADDR:PORT: bind: REASON"
/// and "Failed listening on port PORT (TCP|TLS), aborting.".
pub async fn bind(config: &Config) -> std::io::Result<Vec<Listener>> {
    let failed = |port: u16, kind: &'static str| {
        move |e: std::io::Error| {
            std::io::Error::new(
                e.kind(),
                format!("{e}\nFailed listening on port {port} ({kind}), aborting."),
            )
        }
    };
    let mut out: Vec<Listener> = bind_port(config, config.port)
        .await
        .map_err(failed(config.port, "TCP"))?
        .into_iter()
        .map(|tcp| Listener { tcp, tls: None })
        .collect();
    if let Some(acceptor) = crate::tls::acceptor(config).map_err(std::io::Error::other)? {
        let slot: crate::tls::Slot = Arc::new(parking_lot::RwLock::new(Some(acceptor)));
        let tls = bind_port(config, config.tls_port)
            .await
            .map_err(failed(config.tls_port, "TLS"))?;
        for tcp in tls {
            out.push(Listener {
                tcp,
                tls: Some(slot.clone()),
            });
        }
    }
    Ok(out)
}

async fn bind_port(config: &Config, port: u16) -> std::io::Result<Vec<TcpListener>> {
    let mut out = Vec::new();
    for addr in &config.bind {
        let addr = addr.trim_start_matches('-');
        let mut last_err = None;
        let mut bound = None;
        for sa in tokio::net::lookup_host((addr, port)).await? {
            match listen(sa, config.tcp_backlog) {
                Ok(l) => {
                    bound = Some(l);
                    break;
                }
                Err(e) => last_err = Some(e),
            }
        }
        match (bound, last_err) {
            (Some(l), _) => out.push(l),
            (None, Some(e)) => {
                let reason = crate::logging::strerror(&e);
                return Err(std::io::Error::new(
                    e.kind(),
                    format!(
                        "Warning: Could not create server TCP listening socket {addr}:{port}: bind: {reason}"
                    ),
                ));
            }
            (None, None) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrNotAvailable,
                    format!("{addr}: no address to bind"),
                ))
            }
        }
    }
    Ok(out)
}

/// tokio's `TcpListener::bind` fixes the backlog; Redis uses `tcp-backlog`
/// (511), which matters when thousands of clients connect at once.
fn listen(sa: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let sock = if sa.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    sock.bind(sa)?;
    sock.listen(backlog)
}

/// Serves on the given listeners until shutdown. Returns after every
/// connection task has ended (or 5 s have passed).
pub async fn serve(shared: Arc<Shared>, listeners: Vec<Listener>) {
    {
        // `replicaof <host> <port>` in the config: a replica from the start.
        let mut store = shared.lock_store().await;
        if let Some((host, port)) = store.config().repl.replicaof.clone() {
            store.repl.set_master(&host, port);
            // The RDB loaded at start may name the history to continue.
            match store.persist.take_loaded_repl() {
                Some(r) => {
                    store.repl.restore_history(&r);
                    // A replica's RDB holds its master's lock state: with
                    // it back, the lock records continue partially too.
                    let sh = shared.clone();
                    let mut alloc = move || sh.client_id();
                    match crate::commands::server::restore_locks(&mut store, &mut alloc) {
                        Ok(Some(seq)) => store.repl.locks_restored(seq),
                        Ok(None) => {}
                        Err(e) => tracing::warn!("{e}: the first sync will be a full one"),
                    }
                }
                None => store.repl.forget_history(),
            }
            store.follow_role();
        } else if let Some(r) = store.persist.take_loaded_repl() {
            // A master restarted from its RDB keeps its history as the
            // second one, as Redis 7 does.
            let size = store.config().repl.backlog_size;
            store.repl.restore_as_master(&r, size);
        }
    }
    let mut tasks = JoinSet::new();
    tasks.spawn(expiry_loop(shared.clone()));
    tasks.spawn(save_loop(shared.clone()));
    tasks.spawn(repl_loop(shared.clone()));
    // The port a replica announces to its master: the one bound.
    let bound = listeners
        .first()
        .and_then(|l| l.local_addr().ok())
        .map(|a| a.port());
    tasks.spawn(master_link::master_loop(shared.clone(), bound));
    let aof_sync = shared.lock_store().await.persist.aof_sync().clone();
    let fsync = {
        let s = aof_sync.clone();
        std::thread::Builder::new()
            .name("aof-fsync".into())
            .spawn(move || s.run())
            .ok()
    };
    tasks.spawn(acks_loop(shared.clone(), aof_sync.clone()));
    let conns = Arc::new(Mutex::new(JoinSet::new()));
    // CONFIG SET of tls-* settings replaces the acceptor in this slot.
    if let Some(slot) = listeners.iter().find_map(|l| l.tls.clone()) {
        shared.lock_store().await.tls = slot;
    }
    for l in listeners {
        tasks.spawn(accept_loop(shared.clone(), l, conns.clone()));
    }
    let mut rx = shared.shutdown.subscribe();
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            break;
        }
    }
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    aof_sync.stop();
    if let Some(t) = fsync {
        let _ = t.join();
    }
    let mut conns = std::mem::take(&mut *conns.lock());
    let drain = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(5), drain)
        .await
        .is_err()
    {
        tracing::warn!("connections still open after 5 s; closing them");
    }
}

async fn accept_loop(shared: Arc<Shared>, listener: Listener, conns: Arc<Mutex<JoinSet<()>>>) {
    loop {
        let (sock, peer) = match listener.tcp.accept().await {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Redis's verbose line for a new client.
        tracing::debug!("Accepted {peer}");
        let shared2 = shared.clone();
        let mut set = conns.lock();
        // Reap finished connection tasks so the set does not grow forever.
        while set.try_join_next().is_some() {}
        match &listener.tls {
            None => set.spawn(async move { conn::handle(shared2, sock, peer).await }),
            Some(slot) => match slot.read().clone() {
                Some(a) => set.spawn(async move { conn::handle_tls(shared2, sock, peer, a).await }),
                None => continue,
            },
        };
    }
}

/// Active expiry: deletes keys whose TTL passed even if nobody reads them.
/// Keys are kept in deadline order, so the loop sleeps until the earliest
/// deadline (at most 1/hz s, `hz` as in redis.conf) and each pass touches
/// only expired keys: a key is deleted, and its watchers told, about 1 ms
/// after its TTL passes.
async fn expiry_loop(shared: Arc<Shared>) {
    let timer = shared.lock_store().await.ks.db(0).timer.clone();
    loop {
        let wait = {
            let store = shared.lock_store().await;
            let next = store.ks.dbs().iter().filter_map(|d| d.next_expire()).min();
            let hz = store.config().hz.max(1) as i64;
            let now = crate::util::now_ms();
            // A replica expires nothing itself: no deadline to wake for.
            let next = if store.repl.has_master() { None } else { next };
            // Expired once now > deadline, so wake just after it.
            // Saturating: PXAT i64::MAX is a valid deadline.
            let at = next
                .map_or(i64::MAX, |t| t.saturating_add(1))
                .min(now.saturating_add(1000 / hz));
            // Published under the store lock: a TTL set after this point
            // sees it and, if earlier, wakes us through the Notify.
            timer
                .wake_at
                .store(at, std::sync::atomic::Ordering::Relaxed);
            Duration::from_millis(at.saturating_sub(now).max(0) as u64)
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = timer.notify.notified() => continue,
        }
        // Bounded batches so one huge expiry wave does not stall clients.
        loop {
            let n = {
                let mut store = shared.lock_store().await;
                // The memory peak is sampled here at least `hz` times a second.
                store.sample_memory();
                let n = store.active_expire_cycle(1000);
                // Expired keys free lock lines (`SETTP ... QUEUE`).
                crate::commands::settle(&mut store, None);
                n
            };
            if n < 1000 {
                break;
            }
            tokio::task::yield_now().await;
        }
    }
}

/// Snapshots: checks the `save` rules every 1/hz s (Redis's serverCron),
/// and drives a background save a slice at a time, each slice under the
/// store lock and short, so clients' commands run between slices.
/// Answers WAITAOF waits after each fsync (or when the AOF goes), while
/// anyone waits: without one, an fsync costs this task a flag's read.
async fn acks_loop(shared: Arc<Shared>, sync: Arc<crate::persist::aof::Sync>) {
    loop {
        let synced = sync.synced.notified();
        tokio::pin!(synced);
        // Registered before the flag is read: an fsync from then on wakes it.
        synced.as_mut().enable();
        if sync.acks_wanted() {
            let mut store = shared.lock_store().await;
            if crate::commands::serve_acks(&mut store) == 0 {
                sync.want_acks(false);
            }
        }
        synced.await;
    }
}

/// Replication's periodic work (`Replication::cron`), ten times a second.
async fn repl_loop(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        let mut store = shared.lock_store().await;
        let repl = store.repl.clone();
        repl.cron(&mut *store);
        crate::commands::replication::update_failover(&mut store);
        // A SHUTDOWN waiting for the replicas, done or out of time.
        if crate::commands::server::shutdown_cron(&mut store) {
            shared.begin_shutdown();
        }
        // Hand-overs waiting for replicas past their time are undone; a
        // primary cut off from its replicas stops vouching for its locks.
        crate::commands::serve_grants(&mut store);
        if store.check_cut_off() > 0 {
            crate::commands::settle(&mut store, None);
            let s = &mut *store;
            crate::persist::aof_write_out(&mut s.ks, &mut s.persist);
        }
        // A promoted replica's detached sessions that nobody resumed end
        // as connections do: the lines they free are served.
        if store.end_detached() > 0 {
            crate::commands::settle(&mut store, None);
            let s = &mut *store;
            crate::persist::aof_write_out(&mut s.ks, &mut s.persist);
        }
    }
}

async fn save_loop(shared: Arc<Shared>) {
    let wake = shared.lock_store().await.persist.wake();
    loop {
        let (running, hz) = {
            let mut store = shared.lock_store().await;
            crate::persist::cron(&mut *store);
            let s = &mut *store;
            crate::persist::aof_write_out(&mut s.ks, &mut s.persist);
            (store.persist.job_running(), store.config().hz.max(1))
        };
        if !running {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(1000 / hz as u64)) => {}
                _ = wake.notified() => {}
            }
            continue;
        }
        // Bounded: a save of any size ends (the walk moves on each slice).
        loop {
            // Slowed by `rdb-key-save-delay` (µs per key), a step walks a
            // few keys and then sleeps for them, in naps short enough to
            // see the knob change.
            const SLOW_SLICE: usize = 16;
            let (step, delay) = {
                let mut store = shared.lock_store().await;
                let delay = store.config().rdb_key_save_delay.max(0) as u64;
                if delay > 0 {
                    (crate::persist::bgsave_step(&mut *store, SLOW_SLICE), delay)
                } else {
                    (save_slice(&mut store), 0)
                }
            };
            match step {
                crate::persist::snapshot::Step::Progress if delay > 0 => {
                    let start = tokio::time::Instant::now();
                    let mut delay = delay;
                    loop {
                        let want = Duration::from_micros(delay * SLOW_SLICE as u64);
                        let left = want.saturating_sub(start.elapsed());
                        if left.is_zero() {
                            break;
                        }
                        tokio::time::sleep(left.min(Duration::from_millis(10))).await;
                        let store = shared.lock_store().await;
                        delay = store.config().rdb_key_save_delay.max(0) as u64;
                    }
                }
                crate::persist::snapshot::Step::Progress => tokio::task::yield_now().await,
                crate::persist::snapshot::Step::Waiting => {
                    tokio::time::sleep(Duration::from_millis(1)).await
                }
                crate::persist::snapshot::Step::Done(_) => break,
            }
        }
    }
}

/// One slice of a background save under the store lock: steps of
/// `BGSAVE_SLICE` keys until `SAVE_SLICE_TIME` has passed, so that other
/// clients wait at most about that long for the lock whatever the keys'
/// sizes (2,000 keys at once held it long enough to triple the p99 of
/// other clients during a full sync; bench/repl-sync.sh).
fn save_slice(store: &mut Store) -> crate::persist::snapshot::Step {
    const SAVE_SLICE_TIME: Duration = Duration::from_micros(300);
    let start = std::time::Instant::now();
    loop {
        let step = crate::persist::bgsave_step(store, crate::persist::BGSAVE_SLICE);
        if !matches!(step, crate::persist::snapshot::Step::Progress)
            || start.elapsed() >= SAVE_SLICE_TIME
        {
            return step;
        }
    }
}

/// A running server, for tests and embedding. Dropping it shuts it down.
pub struct ServerHandle {
    pub addr: SocketAddr,
    /// The `tls-port` listener's address, when there is one.
    pub tls_addr: Option<SocketAddr>,
    pub shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerHandle {
    /// Starts a server on its own runtime thread. `config.port` 0 picks a
    /// free port; the bound address is in `addr`.
    pub fn start(mut config: Config) -> std::io::Result<ServerHandle> {
        let (maxclients, notes) =
            crate::fdlimit::adjust(config.maxclients).map_err(std::io::Error::other)?;
        for n in notes {
            tracing::warn!("{n}");
        }
        config.maxclients = maxclients;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.io_threads.max(1))
            .enable_all()
            .build()?;
        let shared = Shared::new(config.clone());
        shared
            .store
            .lock()
            .load_acl_at_start()
            .map_err(std::io::Error::other)?;
        let listeners = rt.block_on(bind(&config))?;
        let addr = listeners[0].local_addr()?;
        let tls_addr = listeners
            .iter()
            .find(|l| l.tls.is_some())
            .and_then(|l| l.local_addr().ok());
        let s2 = shared.clone();
        let thread = std::thread::Builder::new()
            .name("latchkey-server".into())
            .spawn(move || {
                rt.block_on(serve(s2, listeners));
                rt.shutdown_timeout(Duration::from_secs(1));
            })?;
        Ok(ServerHandle {
            addr,
            tls_addr,
            shared,
            thread: Some(thread),
        })
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Shuts down and waits for the server thread.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        self.shared.begin_shutdown();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop_inner();
    }
}
