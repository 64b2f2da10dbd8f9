//! Bundled async client for Latchkey (and any RESP3 server).
//!
//! One [`Client`] is one TCP connection speaking RESP3, multiplexed: clones
//! share it, concurrent requests are pipelined on the socket (written by the
//! sending task itself when the socket takes them at once) and replies
//! are matched in order by a reader task, which also routes `WATCHEX` pushes
//! to [watches](Client::watch_stream). On top of that sit
//! [locks](Client::lock) built from `SETTP` (a key bound to the connection)
//! and `WATCHEX` (wait for its deletion without polling), and fair locks
//! ([`LockBuilder::fair`]) that wait in the server's queue (`SETTP ... QUEUE`).
//!
//! Connection loss is never hidden: pending requests fail with
//! [`Error::Disconnected`], watches get [`WatchEvent::Disconnected`] and lock
//! guards report [lost](LockGuard::lost). With [`Options::reconnect`] the
//! client reconnects with backoff and re-registers its watches (their next
//! event is the fresh `Exists`/`NotExists`); its lock guards are
//! [suspended](LockState::Suspended) meanwhile, and the new connection
//! resumes the lock session (`TPRESUME`): after a failover to a Latchkey
//! replica the guards are held again with their tokens, otherwise they are
//! lost ([`SessionState`] has the client-wide view), and waits in a lock's
//! line go on where they were. It never re-acquires a lock it held. While
//! there is no connection, requests fail at once with `Disconnected`.
//!
//! ```no_run
//! # async fn demo() -> latchkey::Result<()> {
//! use futures::StreamExt;
//! use latchkey::{Client, WatchEvent};
//!
//! let client = Client::connect("redis://127.0.0.1:6379/0").await?;
//! client.set("greeting", "hello").await?;
//! assert_eq!(client.get("greeting").await?.as_deref(), Some(&b"hello"[..]));
//!
//! let mut events = client.watch_stream("job:1").await?;
//! assert!(matches!(events.next().await, Some(WatchEvent::Exists | WatchEvent::NotExists)));
//!
//! let guard = client.lock("resource").await?;
//! // ... critical section ...
//! guard.unlock().await?;
//! # Ok(()) }
//! ```

mod cmd;
mod conn;
mod error;
mod lock;
mod quorum;
mod sentinel;
mod tls;
mod value;
mod watch;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::RwLock;

pub use cmd::{cmd, Cmd, ToArg};
pub use conn::session::{LockState, SessionState};
pub use error::{Error, Result};
pub use lock::{LockBuilder, LockGuard, Mode, ReentrantGuard, ReentrantLock};
pub use quorum::{Quorum, QuorumBuilder, QuorumGuard};
pub use sentinel::{Sentinel, DEFAULT_SENTINEL_PORT, DEFAULT_SENTINEL_TIMEOUT};
pub use value::{FromValue, Value};
pub use watch::{WatchEvent, WatchHandle, WatchStream};

use conn::session::Session;
use conn::{bytes_of, Conn, Setup, Target};
use sentinel::Resolver;
use watch::Registry;

/// The default [`Options::session_timeout`].
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// Connection options for [`Client::connect_with`].
#[derive(Clone, Debug)]
pub struct Options {
    /// Bound on TCP connect plus the HELLO/SELECT handshake. Default 5 s.
    pub connect_timeout: Duration,
    /// Bound on each request; `None` waits forever. Default 30 s. A timed
    /// out request keeps its place in the reply order; its late reply is
    /// discarded.
    pub request_timeout: Option<Duration>,
    /// Send `PING` this often; no reply within `request_timeout` (or the
    /// interval, if shorter) drops the connection. Default `None`.
    pub heartbeat: Option<Duration>,
    /// Reconnect after a connection loss. Default `None`. With it, lock
    /// guards are suspended while the connection is down, and the next
    /// connection resumes the lock session (`TPRESUME`, its first
    /// command): guards the server still holds for it (a promoted Latchkey
    /// replica, within its `tp-failover-grace`) are held again, the others
    /// lost. A fair lock's wait in the server's line is carried too: the
    /// resume keeps its place (same position) or hands it the lock, and
    /// a place the session no longer has is queued again at the end of
    /// the line. The session's identity is learned with one `TPSESSION ID`
    /// after the first acquisition or place in a line on a connection; a
    /// connection that drops before its reply loses its guards at once
    /// (and its waits fail with `Disconnected`).
    pub reconnect: Option<Backoff>,
    /// Sent with `HELLO ... SETNAME`.
    pub client_name: Option<String>,
    /// The session's liveness timeout (`TPSESSION`): if the server hears
    /// nothing from this connection for this long (a dead host, a silent
    /// network), it closes it, which releases its locks and leaves its
    /// lines at once. The client keeps it alive on its own with a `PING`
    /// every third of it. Once it has heard nothing from the server for
    /// two thirds of it, its guards stop counting as held
    /// ([`LockState::Suspended`]) and it drops the connection, which
    /// suspends them (with [`Options::reconnect`], to be resumed or lost)
    /// or loses them: never later than the server releases their locks.
    /// Default 10 s; `None` for no session timeout (a silent host then
    /// keeps its locks until TCP gives up, or a lease runs out).
    pub session_timeout: Option<Duration>,
    /// Certificates for `rediss://` URLs (ignored for `redis://`).
    pub tls: TlsOptions,
}

/// TLS settings for `rediss://` URLs.
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    /// CA certificates (PEM) to trust; `None`: the system's roots.
    pub ca_file: Option<std::path::PathBuf>,
    /// A client certificate chain (PEM), for servers that ask for one
    /// (`tls-auth-clients`); needs `key_file`.
    pub cert_file: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM, unencrypted).
    pub key_file: Option<std::path::PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Some(Duration::from_secs(30)),
            heartbeat: None,
            reconnect: None,
            client_name: None,
            session_timeout: Some(DEFAULT_SESSION_TIMEOUT),
            tls: TlsOptions::default(),
        }
    }
}

/// Reconnect schedule: wait `initial`, then double the wait up to `max`
/// between attempts; give up after `max_attempts` failed attempts (never
/// when `None`).
#[derive(Clone, Debug)]
pub struct Backoff {
    /// Wait before the first attempt.
    pub initial: Duration,
    /// Longest wait between attempts.
    pub max: Duration,
    /// Failed attempts before giving up (`None`: keep trying).
    pub max_attempts: Option<u32>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_secs(2),
            max_attempts: None,
        }
    }
}

/// Options of `SET` for [`Client::set_with`]. Builder style:
/// `SetOptions::default().nx().px(Duration::from_millis(500))`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SetOptions {
    /// Only set if the key does not exist.
    pub nx: bool,
    /// Only set if the key exists.
    pub xx: bool,
    /// Expire after this long: `EX` for whole seconds, otherwise sent as
    /// `PX` (rounded up to a millisecond), so nothing is silently cut.
    pub ex: Option<Duration>,
    /// Expire after this many milliseconds (`PX`, rounded up).
    pub px: Option<Duration>,
    /// Keep the key's TTL.
    pub keepttl: bool,
    /// Return the old value (`GET`).
    pub get: bool,
}

impl SetOptions {
    /// Sets `nx`.
    pub fn nx(mut self) -> Self {
        self.nx = true;
        self
    }
    /// Sets `xx`.
    pub fn xx(mut self) -> Self {
        self.xx = true;
        self
    }
    /// Sets `ex`.
    pub fn ex(mut self, d: Duration) -> Self {
        self.ex = Some(d);
        self
    }
    /// Sets `px`.
    pub fn px(mut self, d: Duration) -> Self {
        self.px = Some(d);
        self
    }
    /// Sets `keepttl`.
    pub fn keepttl(mut self) -> Self {
        self.keepttl = true;
        self
    }
    /// Sets `get`.
    pub fn get(mut self) -> Self {
        self.get = true;
        self
    }
}

/// Where the client connects: one server, or the master the Sentinels
/// name at each (re)connection.
enum Endpoint {
    Direct(Target),
    Sentinel(Resolver),
}

/// State shared by the client handles and the background tasks (which
/// never hold a [`Client`], so dropping the last one closes the socket).
struct Shared {
    endpoint: Endpoint,
    opts: Options,
    registry: Arc<Registry>,
    /// The lock session across connections (suspend, resume).
    session: Arc<Session>,
    current: RwLock<Option<Arc<Conn>>>,
    generation: AtomicU64,
    closed: AtomicBool,
}

struct Inner {
    shared: Arc<Shared>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        let c = self.shared.current.write().take();
        if let Some(c) = c {
            c.close();
        }
    }
}

/// A multiplexed RESP3 connection. Cheap to clone; all clones share the
/// connection, which closes when the last clone (including those held by
/// watches and lock guards) is dropped.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Client");
        match &self.shared().endpoint {
            Endpoint::Direct(t) => d
                .field("host", &t.host)
                .field("port", &t.port)
                .field("db", &t.db),
            Endpoint::Sentinel(r) => d
                .field("master_name", &r.cfg.master_name)
                .field("sentinels", &r.order())
                .field("db", &r.cfg.db)
                .field("master", &self.server_addr()),
        };
        d.field("connected", &self.is_connected()).finish()
    }
}

/// Whole milliseconds, rounded up: a short non-zero duration never becomes 0.
fn ceil_ms(d: Duration) -> u64 {
    // Saturates: a wrapped value could come out as 0, which deletes the key.
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if Duration::from_millis(ms) < d {
        ms.saturating_add(1)
    } else {
        ms
    }
}

/// Commands that would break reply matching or the connection's state
/// (protocol, database, push handling, a transaction other handles' commands
/// would land in); refused by [`Client::query`].
const REFUSED: &[&str] = &[
    "multi",
    "exec",
    "discard",
    "watch",
    "unwatch",
    "subscribe",
    "psubscribe",
    "ssubscribe",
    "unsubscribe",
    "punsubscribe",
    "sunsubscribe",
    "monitor",
    "reset",
    "hello",
    "select",
    "sync",
    "psync",
];

fn refused(c: &Cmd) -> Option<Error> {
    let name = c.args().first()?;
    let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
    let bad = REFUSED.contains(&lower.as_str())
        || (lower == "client"
            && c.args()
                .get(1)
                .is_some_and(|s| s.eq_ignore_ascii_case(b"reply")))
        // Hand-offs and queue places belong to fair locks (`lock().fair()`):
        // a raw one would be released on arrival or cancel theirs.
        || lower == "tpdequeue"
        || (lower == "settp" && c.args()[1..].iter().any(|a| a.eq_ignore_ascii_case(b"queue")));
    bad.then(|| {
        Error::Protocol(format!(
            "{} is not supported on a multiplexed connection",
            lower.to_uppercase()
        ))
    })
}

impl Client {
    /// Connects to `redis://[user:pass@]host:port[/db]` with default
    /// [`Options`]: `HELLO 3 [AUTH user pass]`, then `SELECT db`. A
    /// `redis-sentinel://` URL finds the master through Sentinel (see
    /// [`Sentinel`] and [`Client::connect_sentinel`]).
    ///
    /// ```no_run
    /// # async fn demo() -> latchkey::Result<()> {
    /// let client = latchkey::Client::connect("redis://:secret@127.0.0.1:6379/2").await?;
    /// # let _ = client; Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Client> {
        Client::connect_with(url, Options::default()).await
    }

    /// Connects with explicit [`Options`].
    ///
    /// ```no_run
    /// # async fn demo() -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// use latchkey::{Backoff, Client, Options};
    /// let opts = Options {
    ///     heartbeat: Some(Duration::from_secs(1)),
    ///     reconnect: Some(Backoff::default()),
    ///     client_name: Some("worker-1".into()),
    ///     ..Options::default()
    /// };
    /// let client = Client::connect_with("redis://127.0.0.1:6379", opts).await?;
    /// # let _ = client; Ok(()) }
    /// ```
    pub async fn connect_with(url: &str, opts: Options) -> Result<Client> {
        if Sentinel::is_sentinel_url(url) {
            return Client::connect_sentinel(Sentinel::parse_url(url)?, opts).await;
        }
        let mut target = conn::parse_url(url)?;
        if target.tls {
            target.tls_config = Some(conn::TlsConfig(tls::client_config(&opts.tls)?));
        }
        Client::start(Endpoint::Direct(target), opts).await
    }

    /// Connects to the master the Sentinels of `sentinel` name, following
    /// Redis's guidelines for Sentinel clients
    /// (<https://redis.io/docs/latest/develop/reference/sentinel-clients/>):
    /// each Sentinel is asked in turn (`SENTINEL get-master-addr-by-name`,
    /// within [`Sentinel::sentinel_timeout`](Sentinel#structfield.sentinel_timeout)),
    /// the first that answers moves to the front of the list, and the
    /// address it gives must answer `ROLE` as a master; a replica, or an
    /// address that cannot be reached, is asked about again after a pause
    /// (100 ms doubling to 1 s, cut short by a `+switch-master` for this
    /// master on the Sentinel that answered) until
    /// [`Options::connect_timeout`].
    ///
    /// Every reconnection ([`Options::reconnect`]) resolves the master
    /// again. A `-READONLY` reply, or a heartbeat `ROLE` (sent in place of
    /// `PING` when [`Options::heartbeat`] or the session timeout runs one)
    /// that no longer says master, means a failover demoted the node: the
    /// connection is dropped, which suspends the locks held on it (lost
    /// without [`Options::reconnect`]) and reports watches disconnected,
    /// exactly as any connection loss does, and reconnecting finds the new
    /// master. A promoted Latchkey replica has the old primary's lock
    /// state: the reconnection resumes the session there (`TPRESUME`), and
    /// the guards whose locks it kept are held again, with their tokens.
    ///
    /// Fails with [`Error::NoSentinel`] when no Sentinel answers,
    /// [`Error::MasterUnknown`] when none knows the name, and
    /// [`Error::NotMaster`] when the address given is not a reachable
    /// master by the connect timeout.
    ///
    /// ```no_run
    /// # async fn demo() -> latchkey::Result<()> {
    /// use latchkey::{Backoff, Client, Options, Sentinel};
    /// let s = Sentinel::new("mymaster", ["10.0.0.1:26379", "10.0.0.2:26379"])?;
    /// let opts = Options { reconnect: Some(Backoff::default()), ..Options::default() };
    /// let client = Client::connect_sentinel(s, opts).await?;
    /// client.set("k", "v").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_sentinel(sentinel: Sentinel, opts: Options) -> Result<Client> {
        let tls = if sentinel.tls || sentinel.sentinel_tls {
            Some(conn::TlsConfig(tls::client_config(&opts.tls)?))
        } else {
            None
        };
        Client::start(Endpoint::Sentinel(Resolver::new(sentinel, tls)), opts).await
    }

    async fn start(endpoint: Endpoint, opts: Options) -> Result<Client> {
        let db = match &endpoint {
            Endpoint::Direct(t) => t.db,
            Endpoint::Sentinel(r) => r.cfg.db,
        };
        let shared = Arc::new(Shared {
            endpoint,
            session: Arc::new(Session::new(opts.reconnect.is_some(), db)),
            opts,
            registry: Arc::new(Registry::default()),
            current: RwLock::new(None),
            generation: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        });
        let conn = open_conn(&shared).await?;
        if !install(&shared, conn) {
            return Err(Error::Disconnected);
        }
        Ok(Client {
            inner: Arc::new(Inner { shared }),
        })
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.shared().registry
    }

    pub(crate) fn request_timeout(&self) -> Option<Duration> {
        self.shared().opts.request_timeout
    }

    /// The live connection, or `Disconnected`.
    pub(crate) fn conn(&self) -> Result<Arc<Conn>> {
        self.shared()
            .current
            .read()
            .clone()
            .filter(|c| !c.is_closed())
            .ok_or(Error::Disconnected)
    }

    /// Whether a connection is up right now.
    pub fn is_connected(&self) -> bool {
        self.conn().is_ok()
    }

    /// The host and port the live connection is to (through Sentinel: the
    /// master it resolved), or `None` while there is no connection.
    pub fn server_addr(&self) -> Option<(String, u16)> {
        self.conn().ok().map(|c| c.addr.clone())
    }

    /// Resolves when the connection that is current at call time is gone
    /// (at once if there is none).
    pub fn connection_lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let c = self.conn().ok();
        let lost = c.as_ref().map(|c| c.lost());
        async move {
            if let Some(l) = lost {
                l.await;
            }
        }
    }

    /// Bumps on each successful (re)connect; the first connection is 1.
    pub fn connection_generation(&self) -> u64 {
        self.shared().generation.load(Ordering::SeqCst)
    }

    /// The lock session's state: [`SessionState::Connected`], then, when
    /// the connection drops with [`Options::reconnect`] on,
    /// [`Suspended`](SessionState::Suspended) until the next connection
    /// resumes the session ([`Reconnected`](SessionState::Reconnected)) or
    /// learns it ended ([`Lost`](SessionState::Lost)). Each guard's own
    /// state is [`LockGuard::state`].
    pub fn session_state(&self) -> SessionState {
        self.shared().session.state()
    }

    /// Follows [`Client::session_state`]: the receiver sees each new state
    /// (the latest one, if several came between two looks).
    ///
    /// ```no_run
    /// # async fn demo(client: latchkey::Client) -> latchkey::Result<()> {
    /// use latchkey::SessionState;
    /// let mut states = client.session_changes();
    /// while states.changed().await.is_ok() {
    ///     if *states.borrow() == SessionState::Suspended {
    ///         println!("locks suspended: pausing work until they are back or lost");
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn session_changes(&self) -> tokio::sync::watch::Receiver<SessionState> {
        self.shared().session.subscribe()
    }

    /// Number of keys this client currently watches (or is registering).
    pub fn watched_keys(&self) -> usize {
        self.registry().watched_keys()
    }

    /// Sends any command and converts its reply. An error reply is
    /// [`Error::Server`] with the full text. Commands that would break the
    /// shared connection (SUBSCRIBE family, MONITOR, RESET, HELLO, SELECT,
    /// CLIENT REPLY, SYNC, and MULTI/EXEC/DISCARD/WATCH/UNWATCH, whose
    /// transaction would take in other handles' commands) are refused with
    /// [`Error::Protocol`]; pick the database in the URL. A blocking command
    /// (BLPOP, XREAD BLOCK, WAIT on Redis) holds up every request behind it
    /// on the connection, heartbeats and lock releases included: use a
    /// separate `Client` for those. Raw `UNWATCHEX` also cancels what
    /// [`Client::watch_stream`] registered; `SETTP ... QUEUE` and `TPDEQUEUE`
    /// are refused (fair locks manage them).
    ///
    /// ```no_run
    /// # async fn demo(client: latchkey::Client) -> latchkey::Result<()> {
    /// use latchkey::cmd;
    /// let len: i64 = client.query(&cmd("STRLEN").arg("k")).await?;
    /// # let _ = len; Ok(()) }
    /// ```
    pub async fn query<T: FromValue>(&self, c: &Cmd) -> Result<T> {
        if let Some(e) = refused(c) {
            return Err(e);
        }
        let v = self.conn()?.request(c, self.request_timeout()).await?;
        T::from_value(v)
    }

    async fn q<T: FromValue>(&self, c: Cmd) -> Result<T> {
        let v = self.conn()?.request(&c, self.request_timeout()).await?;
        T::from_value(v)
    }

    /// `GET key`.
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        self.q(cmd("GET").arg(bytes_of(key))).await
    }

    /// `SET key value`.
    pub async fn set(&self, key: impl AsRef<[u8]>, value: impl ToArg) -> Result<()> {
        self.q(cmd("SET").arg(bytes_of(key)).arg(value)).await
    }

    /// `SET key value [NX|XX] [EX s|PX ms|KEEPTTL] [GET]`. Without `get`:
    /// `Some("OK")` when set, `None` when NX/XX was not met. With `get`: the
    /// old value (`None` if there was none).
    ///
    /// ```no_run
    /// # async fn demo(client: latchkey::Client) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// use latchkey::SetOptions;
    /// let set = client.set_with("k", "v", SetOptions::default().nx().px(Duration::from_secs(5))).await?;
    /// println!("set: {}", set.is_some());
    /// # Ok(()) }
    /// ```
    pub async fn set_with(
        &self,
        key: impl AsRef<[u8]>,
        value: impl ToArg,
        opts: SetOptions,
    ) -> Result<Option<Bytes>> {
        let mut c = cmd("SET").arg(bytes_of(key)).arg(value);
        if opts.nx {
            c = c.arg("NX");
        }
        if opts.xx {
            c = c.arg("XX");
        }
        if let Some(d) = opts.ex {
            c = if d.subsec_nanos() == 0 {
                c.arg("EX").arg(d.as_secs())
            } else {
                c.arg("PX").arg(ceil_ms(d))
            };
        }
        if let Some(d) = opts.px {
            c = c.arg("PX").arg(ceil_ms(d));
        }
        if opts.keepttl {
            c = c.arg("KEEPTTL");
        }
        if opts.get {
            c = c.arg("GET");
        }
        self.q(c).await
    }

    /// `DEL key ...`: the number of keys removed.
    pub async fn del(&self, keys: &[impl AsRef<[u8]>]) -> Result<i64> {
        self.q(keys_cmd("DEL", keys)).await
    }

    /// `EXISTS key ...`: how many of the keys exist.
    pub async fn exists(&self, keys: &[impl AsRef<[u8]>]) -> Result<i64> {
        self.q(keys_cmd("EXISTS", keys)).await
    }

    /// `PEXPIRE key ms` (rounded up to a millisecond; zero deletes the key,
    /// as in Redis): false if the key does not exist.
    pub async fn expire(&self, key: impl AsRef<[u8]>, d: Duration) -> Result<bool> {
        self.q(cmd("PEXPIRE").arg(bytes_of(key)).arg(ceil_ms(d)))
            .await
    }

    /// `INCR key`.
    pub async fn incr(&self, key: impl AsRef<[u8]>) -> Result<i64> {
        self.q(cmd("INCR").arg(bytes_of(key))).await
    }

    /// `MGET key ...`.
    pub async fn mget(&self, keys: &[impl AsRef<[u8]>]) -> Result<Vec<Option<Bytes>>> {
        self.q(keys_cmd("MGET", keys)).await
    }

    /// `MSET key value ...`.
    pub async fn mset<K: AsRef<[u8]>, V: ToArg>(&self, pairs: &[(K, V)]) -> Result<()> {
        let mut c = cmd("MSET");
        for (k, v) in pairs {
            c.push_arg(bytes_of(k)).push_arg(v);
        }
        self.q(c).await
    }

    /// `SETTP key value`: true if the key was created (and bound to this
    /// connection). Prefer [`Client::lock`] for locks.
    pub async fn settp(&self, key: impl AsRef<[u8]>, value: impl ToArg) -> Result<bool> {
        self.q(cmd("SETTP").arg(bytes_of(key)).arg(value)).await
    }

    /// Raw `WATCHEX key`: true for `EXIST`. Its pushes reach only the
    /// watches of [`Client::watch`] / [`Client::watch_stream`], which is what
    /// you want instead.
    pub async fn watchex(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        match self.q(cmd("WATCHEX").arg(bytes_of(key))).await? {
            Value::Simple(s) if s == "EXIST" => Ok(true),
            Value::Simple(s) if s == "NOEXIST" => Ok(false),
            v => Err(Error::Type(format!(
                "expected EXIST or NOEXIST, got {}",
                v.kind()
            ))),
        }
    }

    /// Raw `UNWATCHEX key ...` (all keys when empty): watches removed.
    pub async fn unwatchex(&self, keys: &[impl AsRef<[u8]>]) -> Result<i64> {
        self.q(keys_cmd("UNWATCHEX", keys)).await
    }

    /// `DELIFEQ key value`: true if the key held `value` and was deleted.
    pub async fn delifeq(&self, key: impl AsRef<[u8]>, value: impl ToArg) -> Result<bool> {
        self.q(cmd("DELIFEQ").arg(bytes_of(key)).arg(value)).await
    }

    /// Watches `key`'s existence. The first item is `Exists` or
    /// `NotExists`, then `Added`/`Deleted` strictly alternating. Watchers of
    /// one key on one client share a single server-side watch. Events wait
    /// in the stream until read, without a bound: read it, or drop it.
    ///
    /// ```no_run
    /// # async fn demo(client: latchkey::Client) -> latchkey::Result<()> {
    /// use futures::StreamExt;
    /// let mut s = client.watch_stream("job:42").await?;
    /// while let Some(ev) = s.next().await {
    ///     println!("{ev:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn watch_stream(&self, key: impl AsRef<[u8]>) -> Result<WatchStream> {
        WatchStream::new(self, bytes_of(key)).await
    }

    /// Like [`Client::watch_stream`], calling `f` for each event. `f` runs
    /// on its own tokio task (one per watch, events in order), never on the
    /// connection's reader; still, it runs on the runtime, so it should not
    /// block for long. Dropping the handle stops it.
    ///
    /// ```no_run
    /// # async fn demo(client: latchkey::Client) -> latchkey::Result<()> {
    /// let handle = client.watch("job:42", |ev| println!("job:42 {ev:?}")).await?;
    /// // ...
    /// drop(handle);
    /// # Ok(()) }
    /// ```
    pub async fn watch<F>(&self, key: impl AsRef<[u8]>, f: F) -> Result<WatchHandle>
    where
        F: FnMut(WatchEvent) + Send + 'static,
    {
        let s = self.watch_stream(key).await?;
        Ok(WatchHandle::spawn(s, f))
    }
}

fn keys_cmd(name: &str, keys: &[impl AsRef<[u8]>]) -> Cmd {
    let mut c = cmd(name);
    for k in keys {
        c.push_arg(bytes_of(k));
    }
    c
}

/// Connects and handshakes within the connect timeout; through Sentinel,
/// resolves the master first (every time: an address is never reused).
async fn open_conn(shared: &Arc<Shared>) -> Result<Arc<Conn>> {
    let o = &shared.opts;
    let open = |t: Target| async move {
        // Connection ids are unique per process, so a stale connection
        // can never be mistaken for the live one.
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let gen = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let setup = Setup {
            name: o.client_name.clone(),
            heartbeat: o.heartbeat,
            session_timeout: o.session_timeout,
            request_timeout: o.request_timeout,
            registry: shared.registry.clone(),
            lock_session: Some(shared.session.clone()),
        };
        conn::open(&t, gen, &setup).await
    };
    match &shared.endpoint {
        Endpoint::Direct(t) => tokio::time::timeout(o.connect_timeout, open(t.clone()))
            .await
            .map_err(|_| Error::Timeout)?,
        Endpoint::Sentinel(r) => {
            r.connect(tokio::time::Instant::now() + o.connect_timeout, open)
                .await
        }
    }
}

/// Makes `conn` the live connection; false if it died meanwhile or the
/// client is gone.
fn install(shared: &Arc<Shared>, conn: Arc<Conn>) -> bool {
    let weak = Arc::downgrade(shared);
    let gen = conn.gen;
    conn.set_on_lost(Box::new(move || connection_ended(weak, gen)));
    let mut cur = shared.current.write();
    if conn.is_closed() || shared.closed.load(Ordering::SeqCst) {
        drop(cur);
        conn.close();
        return false;
    }
    shared.generation.fetch_add(1, Ordering::SeqCst);
    // A parked session's TPRESUME first: no lock can be taken on this
    // connection before it.
    shared.session.resume_on(&conn);
    // Watches next, so no new subscriber can overtake the re-registration.
    shared.registry.attach(&conn);
    *cur = Some(conn);
    true
}

fn connection_ended(weak: Weak<Shared>, gen: u64) {
    let Some(shared) = weak.upgrade() else { return };
    {
        let mut cur = shared.current.write();
        if cur.as_ref().map(|c| c.gen) != Some(gen) {
            return;
        }
        *cur = None;
    }
    let handle = tokio::runtime::Handle::try_current();
    match (&shared.opts.reconnect, handle) {
        (Some(b), Ok(h)) if !shared.closed.load(Ordering::SeqCst) => {
            shared.session.suspended();
            h.spawn(reconnect(weak, b.clone()));
        }
        _ => {
            shared.registry.give_up();
            shared.session.give_up();
        }
    }
}

async fn reconnect(weak: Weak<Shared>, b: Backoff) {
    let mut delay = b.initial;
    let mut failed = 0u32;
    loop {
        tokio::time::sleep(delay).await;
        delay = delay.saturating_mul(2).min(b.max);
        let Some(shared) = weak.upgrade() else { return };
        if shared.closed.load(Ordering::SeqCst) {
            return;
        }
        if let Ok(conn) = open_conn(&shared).await {
            if install(&shared, conn) {
                return;
            }
        }
        failed += 1;
        if b.max_attempts.is_some_and(|m| failed >= m) {
            shared.registry.give_up();
            shared.session.give_up();
            return;
        }
    }
}
