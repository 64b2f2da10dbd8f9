//! Finding the master through Redis Sentinel: the [`Sentinel`] address
//! (built in code or parsed from a `redis-sentinel://` URL) and the
//! resolution the client runs before every connection, as Redis's
//! "Guidelines for Redis clients with support for Redis Sentinel"
//! (<https://redis.io/docs/latest/develop/reference/sentinel-clients/>)
//! describe it:
//!
//! 1. ask each Sentinel in turn, with a short timeout, and move the first
//!    one that gives an address to the front of the list;
//! 2. `SENTINEL get-master-addr-by-name NAME`: an address, or null when
//!    that Sentinel does not know the name (then ask the next one);
//! 3. connect to the address and check that `ROLE` says master (done in
//!    the connection's handshake, [`Target::managed`]); otherwise pause
//!    and start again from step 1.
//!
//! While a connect waits between two resolutions, it listens for
//! `+switch-master` on the Sentinel that answered last (the guidelines'
//! "Subscribe to Sentinel events to improve responsiveness"), and resolves
//! again as soon as the master it follows switches.
//!
//! Every reconnection resolves again: an address is never reused without
//! asking. A connection to a master that gets `-READONLY`, or whose `ROLE`
//! (the heartbeat, in place of `PING`) no longer says master, ends, which
//! sends the client back here (`conn`).
//!
//! Must not touch the client's state (current connection, watches): it
//! opens connections through `conn::open` and gives them to the caller.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::cmd::cmd;
use super::conn::{self, Conn, PushSink, Setup, Target, TlsConfig};
use super::error::{Error, Result};
use super::value::Value;

/// Sentinel's default port, taken when an address gives none.
pub const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// The default [`Sentinel::sentinel_timeout`].
pub const DEFAULT_SENTINEL_TIMEOUT: Duration = Duration::from_millis(500);

/// Where to find a master through Redis Sentinel: the Sentinels to ask,
/// the master's name, and how to talk to each (the Sentinels' credentials
/// are their own, apart from the data node's). Connect with
/// [`Client::connect_sentinel`](super::Client::connect_sentinel), or give
/// [`Client::connect`](super::Client::connect) the same as a URL:
///
/// ```text
/// redis-sentinel://[[user:]password@]host[:port][,host2[:port2]...][/db]#master
/// ```
///
/// `rediss-sentinel://` is TLS to the Sentinels and the data nodes; a port
/// left out is 26379; `?sentinelMasterId=master` may stand in for
/// `#master`; the credentials are the data node's. This is Lettuce's
/// form (the only URL for Sentinel among the common clients: redis-py,
/// go-redis, ioredis, node-redis and redis-rs take options in code).
///
/// ```no_run
/// # async fn demo() -> latchkey::Result<()> {
/// use latchkey::{Client, Options, Sentinel};
/// let mut s = Sentinel::new("mymaster", ["10.0.0.1:26379", "10.0.0.2", "10.0.0.3:26380"])?
///     .auth(None, "data-secret")
///     .sentinel_auth(Some("sentinel-user"), "sentinel-secret");
/// s.db = 2; // and `tls`, `sentinel_tls`, `sentinel_timeout`: plain fields
/// let client = Client::connect_sentinel(s, Options::default()).await?;
/// // The same, minus the Sentinels' password, as a URL:
/// let same = Client::connect(
///     "redis-sentinel://:data-secret@10.0.0.1,10.0.0.2,10.0.0.3:26380/2#mymaster",
/// ).await?;
/// # let _ = (client, same); Ok(()) }
/// ```
#[derive(Clone, PartialEq)]
pub struct Sentinel {
    /// The name the Sentinels monitor the master under
    /// (`sentinel monitor NAME ...`).
    pub master_name: String,
    /// The Sentinels, asked in this order (the first to answer moves to
    /// the front).
    pub sentinels: Vec<(String, u16)>,
    /// `AUTH` user for the Sentinels (`None`: `default`).
    pub sentinel_user: Option<String>,
    /// `AUTH` password for the Sentinels (`None`: no AUTH).
    pub sentinel_password: Option<String>,
    /// TLS to the Sentinels, with [`Options::tls`](super::Options::tls)'s
    /// certificates.
    pub sentinel_tls: bool,
    /// `AUTH` user for the data node (`None`: `default`).
    pub user: Option<String>,
    /// `AUTH` password for the data node (`None`: no AUTH).
    pub password: Option<String>,
    /// The database to `SELECT` on the data node.
    pub db: i64,
    /// TLS to the data node, with [`Options::tls`](super::Options::tls)'s
    /// certificates.
    pub tls: bool,
    /// Bound on connecting to one Sentinel and on its answer, before the
    /// next one is asked (the guidelines' "few hundred milliseconds").
    /// Default 500 ms.
    pub sentinel_timeout: Duration,
}

impl std::fmt::Debug for Sentinel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the passwords.
        f.debug_struct("Sentinel")
            .field("master_name", &self.master_name)
            .field("sentinels", &self.sentinels)
            .field("sentinel_user", &self.sentinel_user)
            .field("sentinel_tls", &self.sentinel_tls)
            .field("user", &self.user)
            .field("db", &self.db)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl Sentinel {
    /// `master_name` as monitored by the Sentinels at `sentinels`
    /// (`host`, `host:port` or `[v6]:port`; port 26379 when left out).
    pub fn new<S: AsRef<str>>(
        master_name: &str,
        sentinels: impl IntoIterator<Item = S>,
    ) -> Result<Sentinel> {
        let mut list = Vec::new();
        for s in sentinels {
            let s = s.as_ref();
            list.push(conn::host_port(s, DEFAULT_SENTINEL_PORT, s)?);
        }
        Sentinel::checked(master_name.to_string(), list)
    }

    fn checked(master_name: String, sentinels: Vec<(String, u16)>) -> Result<Sentinel> {
        if master_name.is_empty() {
            return Err(Error::Url(
                "a Sentinel address needs the master's name".into(),
            ));
        }
        if sentinels.is_empty() {
            return Err(Error::Url(
                "a Sentinel address needs at least one Sentinel".into(),
            ));
        }
        Ok(Sentinel {
            master_name,
            sentinels,
            sentinel_user: None,
            sentinel_password: None,
            sentinel_tls: false,
            user: None,
            password: None,
            db: 0,
            tls: false,
            sentinel_timeout: DEFAULT_SENTINEL_TIMEOUT,
        })
    }

    /// Whether `url` is a Sentinel one (`redis-sentinel://`,
    /// `rediss-sentinel://`), for [`Sentinel::parse_url`].
    pub fn is_sentinel_url(url: &str) -> bool {
        conn::scheme(url, "redis-sentinel").is_some()
    }

    /// Parses `redis-sentinel://` / `rediss-sentinel://` (see [`Sentinel`]).
    pub fn parse_url(url: &str) -> Result<Sentinel> {
        let (tls, rest) = conn::scheme(url, "redis-sentinel").ok_or_else(|| {
            Error::Url(format!(
                "{url:?}: a Sentinel URL starts with redis-sentinel:// or rediss-sentinel://"
            ))
        })?;
        let (rest, fragment) = match rest.split_once('#') {
            Some((r, f)) => (r, Some(f)),
            None => (rest, None),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let mut name = fragment.map(conn::pct_decode).transpose()?;
        for kv in query.into_iter().flat_map(|q| q.split('&')) {
            match kv.split_once('=') {
                Some(("sentinelMasterId", v)) => {
                    let v = conn::pct_decode(v)?;
                    if name.as_ref().is_some_and(|n| *n != v) {
                        return Err(Error::Url(format!(
                            "{url:?}: two different master names (#... and sentinelMasterId)"
                        )));
                    }
                    name = Some(v);
                }
                _ => {
                    return Err(Error::Url(format!(
                        "{url:?}: unknown parameter {kv:?} (only sentinelMasterId)"
                    )))
                }
            }
        }
        let name = name.filter(|n| !n.is_empty()).ok_or_else(|| {
            Error::Url(format!(
                "{url:?}: no master name (end the URL with #NAME, the name Sentinel monitors)"
            ))
        })?;
        let (auth, hosts, db) = conn::split_url(rest, url)?;
        if hosts.is_empty() {
            return Err(Error::Url(format!("{url:?}: no Sentinel address")));
        }
        let sentinels = hosts
            .split(',')
            .map(|h| conn::host_port(h, DEFAULT_SENTINEL_PORT, url))
            .collect::<Result<Vec<_>>>()?;
        let (user, password) = conn::credentials(auth, url)?;
        let mut s = Sentinel::checked(name, sentinels)?;
        s.user = user;
        s.password = password;
        s.db = db;
        s.tls = tls;
        s.sentinel_tls = tls;
        Ok(s)
    }

    /// The data node's credentials (`None` user: `default`).
    pub fn auth(mut self, user: Option<&str>, password: &str) -> Self {
        self.user = user.map(str::to_string);
        self.password = Some(password.to_string());
        self
    }

    /// The Sentinels' own credentials (`requirepass` / ACL of the
    /// Sentinels), apart from the data node's.
    pub fn sentinel_auth(mut self, user: Option<&str>, password: &str) -> Self {
        self.sentinel_user = user.map(str::to_string);
        self.sentinel_password = Some(password.to_string());
        self
    }
}

/// Sentinel connections carry no watches: their pushes go nowhere.
struct NoPush;

impl PushSink for NoPush {
    fn on_push(&self, _: u64, _: &Bytes, _: bool) {}
    fn disconnected(&self, _: u64) {}
}

/// `+switch-master` messages for one master name: each one wakes a
/// connect that waits between resolutions.
struct SwitchSink {
    name: String,
    switched: Notify,
}

impl PushSink for SwitchSink {
    fn on_push(&self, _: u64, _: &Bytes, _: bool) {}
    fn disconnected(&self, _: u64) {}
    fn on_message(&self, channel: &Bytes, payload: &Bytes) {
        // "<name> <old ip> <old port> <new ip> <new port>"
        let ours = payload
            .split(|b| *b == b' ')
            .next()
            .is_some_and(|n| n == self.name.as_bytes());
        if &channel[..] == b"+switch-master" && ours {
            // Kept as a permit when nobody waits right now.
            self.switched.notify_one();
        }
    }
}

/// A connection to a Sentinel, closed on drop.
struct Closing(Arc<Conn>);

impl Drop for Closing {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// A client's Sentinel address at run time: the list in its current order.
pub(crate) struct Resolver {
    pub(crate) cfg: Sentinel,
    order: Mutex<Vec<(String, u16)>>,
    tls: Option<TlsConfig>,
    sentinel_tls: Option<TlsConfig>,
}

/// The longest pause between two resolutions within one connect.
const MAX_PAUSE: Duration = Duration::from_secs(1);

impl Resolver {
    /// `tls` is the configuration built from the client's TLS options, when
    /// either side needs it.
    pub(crate) fn new(cfg: Sentinel, tls: Option<TlsConfig>) -> Resolver {
        Resolver {
            order: Mutex::new(cfg.sentinels.clone()),
            tls: tls.clone().filter(|_| cfg.tls),
            sentinel_tls: tls.filter(|_| cfg.sentinel_tls),
            cfg,
        }
    }

    /// The Sentinels in the order they will be asked next.
    pub(crate) fn order(&self) -> Vec<(String, u16)> {
        self.order.lock().clone()
    }

    /// Steps 1 and 2: asks each Sentinel in turn for the master's address.
    async fn master_addr(&self, deadline: Instant) -> Result<(String, u16)> {
        let list = self.order();
        let mut failures = Vec::new();
        let mut unknown = 0;
        for (host, port) in &list {
            let left = deadline.saturating_duration_since(Instant::now());
            let bound = self.cfg.sentinel_timeout.min(left);
            match tokio::time::timeout(bound, self.ask(host, *port)).await {
                Ok(Ok(Some(addr))) => {
                    let mut order = self.order.lock();
                    if let Some(i) = order.iter().position(|s| s.0 == *host && s.1 == *port) {
                        let first = order.remove(i);
                        order.insert(0, first);
                    }
                    return Ok(addr);
                }
                Ok(Ok(None)) => unknown += 1,
                Ok(Err(e)) => failures.push(format!("{}: {e}", addr_text(host, *port))),
                Err(_) => failures.push(format!(
                    "{}: no answer within {bound:?}",
                    addr_text(host, *port)
                )),
            }
        }
        if unknown > 0 {
            // At least one Sentinel answered, and none knew the name.
            Err(Error::MasterUnknown(self.cfg.master_name.clone()))
        } else {
            Err(Error::NoSentinel(failures.join("; ")))
        }
    }

    /// One Sentinel's answer: the address, or `None` if it does not know
    /// the master.
    async fn ask(&self, host: &str, port: u16) -> Result<Option<(String, u16)>> {
        let t = self.sentinel_target(host.to_string(), port);
        // Closed however this ends, the caller's timeout included.
        let c = Closing(conn::open(&t, 0, &Setup::bare(Arc::new(NoPush))).await?);
        let r =
            c.0.request(
                &cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(self.cfg.master_name.as_str()),
                None,
            )
            .await;
        drop(c);
        match r? {
            Value::Nil => Ok(None),
            Value::Array(a) => match &a[..] {
                [h, p] => {
                    let host = h
                        .as_bytes()
                        .map(|b| String::from_utf8_lossy(b).into_owned());
                    let port = p
                        .as_bytes()
                        .and_then(|b| std::str::from_utf8(b).ok())
                        .and_then(|s| s.parse::<u16>().ok());
                    match (host, port) {
                        (Some(h), Some(p)) => Ok(Some((h, p))),
                        _ => Err(Error::Protocol(format!("bad master address {a:?}"))),
                    }
                }
                _ => Err(Error::Protocol(format!("bad master address {a:?}"))),
            },
            v => Err(Error::Protocol(format!(
                "SENTINEL get-master-addr-by-name replied with a {}",
                v.kind()
            ))),
        }
    }

    /// A connection subscribed to `+switch-master` on the Sentinel asked
    /// first, and what its messages wake.
    async fn listen(&self) -> Result<(Closing, Arc<SwitchSink>)> {
        let (host, port) = self.order()[0].clone();
        let sink = Arc::new(SwitchSink {
            name: self.cfg.master_name.clone(),
            switched: Notify::new(),
        });
        let t = self.sentinel_target(host, port);
        let c = Closing(conn::open(&t, 0, &Setup::bare(sink.clone())).await?);
        // RESP3: the confirmation is a push, not a reply; nothing else is
        // ever sent on this connection.
        conn::send_discard(&c.0, &cmd("SUBSCRIBE").arg("+switch-master"));
        Ok((c, sink))
    }

    fn sentinel_target(&self, host: String, port: u16) -> Target {
        Target {
            host,
            port,
            user: self.cfg.sentinel_user.clone(),
            pass: self.cfg.sentinel_password.clone(),
            db: 0,
            tls: self.sentinel_tls.is_some(),
            tls_config: self.sentinel_tls.clone(),
            managed: false,
        }
    }

    /// Where to connect for the master at `host:port`.
    fn target(&self, host: String, port: u16) -> Target {
        Target {
            host,
            port,
            user: self.cfg.user.clone(),
            pass: self.cfg.password.clone(),
            db: self.cfg.db,
            tls: self.tls.is_some(),
            tls_config: self.tls.clone(),
            managed: true,
        }
    }

    /// Resolves the master and connects to it (steps 1 to 3), by
    /// `deadline`. A node that is not (or not yet) a master, or that cannot
    /// be reached, is tried again after a pause (100 ms, doubling up to
    /// 1 s), resolving anew each time; no Sentinel answering, or none
    /// knowing the name, is returned at once (the guidelines' error
    /// reporting), and so is an error reply of the handshake (`AUTH`)
    /// other than `LOADING`.
    /// The pauses end early on a `+switch-master` for our master.
    pub(crate) async fn connect<F, Fut>(&self, deadline: Instant, open: F) -> Result<Arc<Conn>>
    where
        F: Fn(Target) -> Fut,
        Fut: std::future::Future<Output = Result<Arc<Conn>>>,
    {
        let mut pause = Duration::from_millis(100);
        // Opened at the first pause, on the Sentinel that answered.
        let mut listening: Option<(Closing, Arc<SwitchSink>)> = None;
        loop {
            let (host, port) = self.master_addr(deadline).await?;
            let at = addr_text(&host, port);
            let left = deadline.saturating_duration_since(Instant::now());
            let why = match tokio::time::timeout(left, open(self.target(host, port))).await {
                Ok(Ok(c)) => return Ok(c),
                Ok(Err(Error::NotMaster(m))) => m,
                // A node still loading its data (a replica just synced or
                // promoted) will answer: try again.
                Ok(Err(Error::Server(e))) if e.starts_with("LOADING") => {
                    format!("master {at}: {e}")
                }
                Ok(Err(e @ (Error::Server(_) | Error::Url(_)))) => return Err(e),
                Ok(Err(e)) => format!("master {at}: {e}"),
                Err(_) => format!("master {at}: no answer"),
            };
            if Instant::now() + pause >= deadline {
                return Err(Error::NotMaster(format!(
                    "{why} (master {:?})",
                    self.cfg.master_name
                )));
            }
            if listening.is_none() {
                let bound = self.cfg.sentinel_timeout.min(pause);
                listening = tokio::time::timeout(bound, self.listen())
                    .await
                    .ok()
                    .and_then(|r| r.ok());
            }
            match &listening {
                Some((_, sink)) => {
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = sink.switched.notified() => {}
                    }
                }
                None => tokio::time::sleep(pause).await,
            }
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }
}

fn addr_text(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(l: &[(&str, u16)]) -> Vec<(String, u16)> {
        l.iter().map(|(h, p)| (h.to_string(), *p)).collect()
    }

    #[test]
    fn urls() {
        let s = Sentinel::parse_url(
            "redis-sentinel://u:p%40ss@s1.example,s2.example:26380,[::1]:5000/3#my%20master",
        )
        .unwrap();
        assert_eq!(s.master_name, "my master");
        let want = [("s1.example", 26379), ("s2.example", 26380), ("::1", 5000)];
        assert_eq!(s.sentinels, hosts(&want));
        assert_eq!(
            (s.user.as_deref(), s.password.as_deref()),
            (Some("u"), Some("p@ss"))
        );
        assert_eq!((s.sentinel_user, s.sentinel_password), (None, None));
        assert_eq!(s.db, 3);
        assert!(!s.tls && !s.sentinel_tls);
        assert_eq!(s.sentinel_timeout, DEFAULT_SENTINEL_TIMEOUT);

        let s = Sentinel::parse_url("rediss-sentinel://:pw@h?sentinelMasterId=m").unwrap();
        assert!(s.tls && s.sentinel_tls);
        assert_eq!(s.master_name, "m");
        assert_eq!(s.sentinels, [("h".to_string(), 26379)]);
        assert_eq!((s.user, s.password.as_deref()), (None, Some("pw")));
        // Both forms may name it, if they agree.
        let s = Sentinel::parse_url("redis-sentinel://h?sentinelMasterId=m#m").unwrap();
        assert_eq!(s.master_name, "m");
        assert!(Sentinel::is_sentinel_url("rediss-sentinel://h#m"));
        assert!(!Sentinel::is_sentinel_url("redis://h"));
        assert!(!Sentinel::is_sentinel_url("rediss://h"));

        let bad = |u: &str, says: &str| match Sentinel::parse_url(u) {
            Err(Error::Url(e)) => assert!(e.contains(says), "{u}: {e}"),
            other => panic!("{u}: {other:?}"),
        };
        bad("redis://h#m", "redis-sentinel://");
        bad("redis-sentinel://h", "no master name");
        bad("redis-sentinel://h#", "no master name");
        bad("redis-sentinel://#m", "no Sentinel address");
        bad("redis-sentinel://h,,k#m", "no host");
        bad("redis-sentinel://h:99999#m", "bad port");
        bad("redis-sentinel://h:x#m", "bad port");
        bad("redis-sentinel://h/x#m", "bad database");
        bad("redis-sentinel://h/-1#m", "bad database");
        bad("redis-sentinel://user@h#m", "needs a password");
        bad("redis-sentinel://h?timeout=5s#m", "unknown parameter");
        bad("redis-sentinel://h?sentinelMasterId=a#b", "two different");
        bad("redis-sentinel://[::1#m", "unclosed");
        bad("redis-sentinel://:%zz@h#m", "percent");
    }

    #[test]
    fn built_in_code() {
        let s = Sentinel::new("m", ["a", "b:1", "[::1]:2"])
            .unwrap()
            .auth(Some("app"), "x")
            .sentinel_auth(None, "y");
        assert_eq!(s.sentinels, hosts(&[("a", 26379), ("b", 1), ("::1", 2)]));
        assert_eq!(
            (s.user.as_deref(), s.password.as_deref()),
            (Some("app"), Some("x"))
        );
        assert_eq!(
            (s.sentinel_user.as_deref(), s.sentinel_password.as_deref()),
            (None, Some("y"))
        );
        assert!(!s.tls && !s.sentinel_tls);
        assert_eq!(s.db, 0);
        // The passwords stay out of Debug.
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("\"x\"") && !shown.contains("\"y\""),
            "{shown}"
        );
        assert!(matches!(Sentinel::new("", ["a"]), Err(Error::Url(_))));
        assert!(matches!(
            Sentinel::new("m", Vec::<&str>::new()),
            Err(Error::Url(_))
        ));
        assert!(matches!(Sentinel::new("m", ["a:b"]), Err(Error::Url(_))));
    }
}
