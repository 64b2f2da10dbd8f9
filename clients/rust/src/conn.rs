//! One TCP connection. A request is written straight to the socket by the
//! task that sends it when nothing else is queued (no task hop on the hot
//! path); what the socket does not take at once goes to a writer task. A
//! reader task decodes RESP3 frames (with `redis-protocol`) and matches
//! replies to requests in FIFO order, handing push frames to a
//! [`PushSink`] (the watch registry, which depends on this module, not the
//! reverse).

// The lock session across connections is part of the connection layer:
// its holds live on a connection, and the resume runs on the next one.
pub(crate) mod session;

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use parking_lot::Mutex;
use redis_protocol::resp3::decode::complete::decode_bytes_mut;
use redis_protocol::resp3::types::BytesFrame;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch, Notify};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::cmd::{cmd, Cmd};
use super::error::{Error, Result};
use super::value::{from_frame, Value};
use session::{fail_all, Hold, HoldState, Place, PlaceEnd, Session};

/// Where the reader task delivers existence-watch pushes and the end of the
/// connection: the watch registry (`watch::Registry`).
pub(crate) trait PushSink: Send + Sync {
    /// A `watchex` push on connection generation `gen`: `key` was added or deleted.
    fn on_push(&self, gen: u64, key: &Bytes, added: bool);
    /// Connection generation `gen` is gone.
    fn disconnected(&self, gen: u64);
    /// A pub/sub `message` push (a Sentinel's `+switch-master`).
    fn on_message(&self, _channel: &Bytes, _payload: &Bytes) {}
}

/// What to do with a reply. Hooks run on the reader task, in socket order
/// with pushes; that is what lets a watch register exactly at its reply.
pub(crate) type Hook = Box<dyn FnOnce(Result<Value>) + Send>;

pub(crate) enum Slot {
    Reply(oneshot::Sender<Result<Value>>),
    Hook(Hook),
    /// Fire and forget (UNWATCHEX, release on drop); also the fate of a
    /// timed-out request's reply, whose receiver is gone.
    Discard,
}

impl Slot {
    fn deliver(self, r: Result<Value>) {
        match self {
            Slot::Reply(tx) => {
                let _ = tx.send(r);
            }
            Slot::Hook(h) => h(r),
            Slot::Discard => {}
        }
    }
}

struct Queue {
    /// One slot per request written (or about to be), in order.
    pending: VecDeque<Slot>,
    /// Encoded requests not yet written, in order.
    wbuf: BytesMut,
    /// The writer task holds bytes taken from `wbuf` and is writing them:
    /// nobody else may write until it is done, or requests would reorder.
    writing: bool,
    /// The socket's write side; `None` once closed.
    sock: Option<Arc<OwnedWriteHalf>>,
    /// `SETTP ... QUEUE` waits (places in lines), by value: each is told
    /// of its hand-off (`settp key ACQUIRED value token` push), or carried
    /// by the session (or failed) when the connection ends.
    grants: HashMap<Bytes, Arc<Place>>,
    closed: bool,
}

pub(crate) struct Conn {
    pub(crate) gen: u64,
    q: Mutex<Queue>,
    wake_writer: Notify,
    lost_tx: watch::Sender<bool>,
    tasks: Mutex<Vec<AbortHandle>>,
    registry: Arc<dyn PushSink>,
    /// Runs once when the connection ends (reconnect / give up).
    on_lost: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// Locks held on this connection, by key: lost when the server says the
    /// key went by another hand (`settp key LOST reason`), suspended or lost
    /// when the connection ends.
    held: Mutex<HashMap<Bytes, Vec<Arc<Hold>>>>,
    /// Acquisitions whose outcome this connection has not learned, by
    /// value (the lock's name with it): a SETTP sent and not answered, or
    /// queued with no hand-off or TPDEQUEUE answer yet. When the
    /// connection ends with some, the server may hold them for the
    /// session (a reply lost with the connection, a hand-off made but not
    /// told before a failover): the resume releases them.
    attempts: Mutex<HashMap<Bytes, Bytes>>,
    /// The client's lock session (`None` for a Sentinel's connection).
    session: Option<Arc<Session>>,
    /// The session's identity on the server (`TPSESSION ID`), once known.
    sid: Mutex<Option<String>>,
    /// `TPSESSION ID` was sent (or the identity came with a resume).
    sid_asked: AtomicBool,
    /// When the connection was opened; `heard` counts milliseconds from it.
    born: Instant,
    /// When bytes last arrived from the server (ms after `born`).
    heard: AtomicU64,
    /// Two thirds of the session timeout: silent that long, the server may
    /// have closed the session (its locks count as suspended).
    silence: Option<Duration>,
    /// A master found through Sentinel ([`Target::managed`]): a `-READONLY`
    /// reply means it was demoted, and ends the connection.
    pub(crate) managed: bool,
    /// The server's host and port, as connected to.
    pub(crate) addr: (String, u16),
}

impl Conn {
    /// Queues `c` with its reply slot; gives the slot back if the
    /// connection is closed. The slot is queued before the bytes can reach
    /// the socket, so the reader always finds it.
    pub(crate) fn send(&self, c: &Cmd, slot: Slot) -> std::result::Result<(), Slot> {
        {
            let mut q = self.q.lock();
            if q.closed {
                return Err(slot);
            }
            c.encode(&mut q.wbuf);
            q.pending.push_back(slot);
            if !q.writing {
                // Everything queued before is in `wbuf` ahead of us, so a
                // direct write keeps the order. A failure is left to the
                // writer task, which closes the connection.
                if let Some(sock) = &q.sock {
                    if let Ok(n) = sock.try_write(&q.wbuf) {
                        q.wbuf.advance(n);
                    }
                }
                if q.wbuf.is_empty() {
                    return Ok(());
                }
            }
        }
        self.wake_writer.notify_one();
        Ok(())
    }

    /// Sends `c` and waits for its reply. On timeout the slot stays queued
    /// (FIFO matching is kept) and the late reply is discarded.
    pub(crate) async fn request(&self, c: &Cmd, timeout: Option<Duration>) -> Result<Value> {
        let (tx, rx) = oneshot::channel();
        if self.send(c, Slot::Reply(tx)).is_err() {
            return Err(Error::Disconnected);
        }
        wait(rx, timeout).await
    }

    /// Waits here for the server to hand `place` over (under the place's
    /// lock: see [`Place::wait_on`]). A connection already gone carries it
    /// for the session, or returns it to be failed (outside the locks), as
    /// it did its other places.
    #[must_use]
    pub(crate) fn add_grant(&self, place: Arc<Place>) -> Vec<Arc<Place>> {
        let mut q = self.q.lock();
        if q.closed {
            return self.orphan(Vec::new(), Vec::new(), vec![place]);
        }
        q.grants.insert(place.value.clone(), place);
        Vec::new()
    }

    /// A place's wait was given up: no longer registered here.
    pub(crate) fn remove_grant(&self, value: &[u8]) {
        let place = self.q.lock().grants.remove(value);
        drop(place);
    }

    /// Tracks a lock acquired (or resumed) on this connection, from the
    /// reader task before any push that follows its reply: it is held until
    /// the server reports it LOST or the connection ends. A connection
    /// that already ended suspends or loses it as it did its other holds.
    pub(crate) fn track(&self, hold: Arc<Hold>) {
        let q = self.q.lock();
        if q.closed {
            let failed = self.orphan(vec![hold], Vec::new(), Vec::new());
            drop(q);
            return fail_all(failed);
        }
        hold.set(HoldState::Held);
        self.held
            .lock()
            .entry(hold.name.clone())
            .or_default()
            .push(hold);
        drop(q);
    }

    /// `hold` was released: no longer tracked here.
    pub(crate) fn untrack(&self, hold: &Arc<Hold>) {
        let mut h = self.held.lock();
        if let Some(v) = h.get_mut(&hold.name) {
            v.retain(|x| !Arc::ptr_eq(x, hold));
            if v.is_empty() {
                h.remove(&hold.name);
            }
        }
    }

    /// An acquisition of `name` with `value` is about to be sent: its
    /// outcome is unknown until `attempt_settled`.
    pub(crate) fn attempt_started(&self, name: &Bytes, value: &Bytes) {
        if self.session.is_some() {
            self.attempts.lock().insert(value.clone(), name.clone());
        }
    }

    /// The acquisition with `value` is known held (tracked), not held, or
    /// given up on the server.
    pub(crate) fn attempt_settled(&self, value: &[u8]) {
        if self.session.is_some() {
            self.attempts.lock().remove(value);
        }
    }

    /// Holds and places in lines this connection can no longer keep (it
    /// ended): suspended and carried for the session to resume, or lost;
    /// with the acquisitions it never learned the outcome of (`stale`:
    /// name, value). Runs under the queue's lock; returns the places whose
    /// waiters are to be failed once it is released.
    #[must_use]
    fn orphan(
        &self,
        holds: Vec<Arc<Hold>>,
        stale: Vec<(Bytes, Bytes)>,
        places: Vec<Arc<Place>>,
    ) -> Vec<Arc<Place>> {
        let sid = self.sid.lock().clone();
        match &self.session {
            Some(s) => s.orphaned(sid, holds, stale, places),
            None => {
                holds.into_iter().for_each(|h| h.lose(None));
                places
            }
        }
    }

    /// After its first acquisition or place in a line, learns the
    /// session's identity (one `TPSESSION ID`, answered in the
    /// background), which a resume after a failover presents. Only when
    /// reconnecting is on.
    pub(crate) fn learn_sid(self: &Arc<Self>) {
        if !self.session.as_ref().is_some_and(|s| s.resumable())
            || self.sid_asked.swap(true, Ordering::SeqCst)
        {
            return;
        }
        let weak = Arc::downgrade(self);
        let hook = Box::new(move |r: Result<Value>| {
            let sid = match &r {
                Ok(Value::Bulk(b)) if b.len() == 32 && b.iter().all(u8::is_ascii_hexdigit) => {
                    String::from_utf8_lossy(b).into_owned()
                }
                // Not a Latchkey with sessions: nothing to resume.
                _ => return,
            };
            if let Some(c) = weak.upgrade() {
                *c.sid.lock() = Some(sid);
            }
        });
        let _ = self.send(&cmd("TPSESSION").arg("ID"), Slot::Hook(hook));
    }

    /// This connection resumed the session `sid` (its identity now).
    pub(crate) fn resumed_as(&self, sid: String) {
        self.sid_asked.store(true, Ordering::SeqCst);
        *self.sid.lock() = Some(sid);
    }

    /// The server has not been heard from for two thirds of the session
    /// timeout (never with no session timeout).
    pub(crate) fn silent(&self) -> bool {
        self.silence
            .is_some_and(|s| self.born.elapsed() >= self.heard_at() + s)
    }

    /// When bytes last came, as time since `born`.
    fn heard_at(&self) -> Duration {
        Duration::from_millis(self.heard.load(Ordering::Relaxed))
    }

    /// Resolves once the server has been silent for the silence limit
    /// (never without one).
    async fn until_silent(&self) {
        let Some(s) = self.silence else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep_until(self.born + self.heard_at() + s).await;
            if self.silent() {
                return;
            }
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.q.lock().closed
    }

    /// Resolves once this connection is gone.
    pub(crate) fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.lost_tx.subscribe();
        async move {
            let _ = rx.wait_for(|gone| *gone).await;
        }
    }

    /// Ends the connection (idempotent): fails every pending request with
    /// `Disconnected`, tells the watches, then runs `on_lost`.
    pub(crate) fn close(&self) {
        let pending = {
            let mut q = self.q.lock();
            if q.closed {
                return;
            }
            q.closed = true;
            q.wbuf = BytesMut::new();
            q.sock = None;
            // Under the lock: whoever sees the connection closed sees its
            // holds suspended or lost.
            let holds: Vec<Arc<Hold>> = self.held.lock().drain().flat_map(|(_, v)| v).collect();
            let stale: Vec<(Bytes, Bytes)> = self
                .attempts
                .lock()
                .drain()
                .map(|(value, name)| (name, value))
                .collect();
            let places: Vec<Arc<Place>> = q.grants.drain().map(|(_, p)| p).collect();
            let failed = self.orphan(holds, stale, places);
            (std::mem::take(&mut q.pending), failed)
        };
        let (pending, failed) = pending;
        for t in self.tasks.lock().drain(..) {
            t.abort();
        }
        self.registry.disconnected(self.gen);
        for slot in pending {
            slot.deliver(Err(Error::Disconnected));
        }
        fail_all(failed);
        self.lost_tx.send_replace(true);
        let f = self.on_lost.lock().take();
        if let Some(f) = f {
            f();
        }
    }

    pub(crate) fn set_on_lost(&self, f: Box<dyn FnOnce() + Send>) {
        *self.on_lost.lock() = Some(f);
    }

    fn on_frame(&self, frame: BytesFrame) -> bool {
        if let BytesFrame::Push { data, .. } = frame {
            self.on_push(data);
            return true;
        }
        let slot = self.q.lock().pending.pop_front();
        match slot {
            Some(s) => {
                let r = from_frame(frame);
                // A write refused by a replica: Sentinel demoted the node
                // under us. The guidelines for Sentinel clients
                // (https://redis.io/docs/latest/develop/reference/sentinel-clients/)
                // say to drop the connection and resolve the master again;
                // the caller still gets the server's error for its request.
                let demoted = self.managed
                    && matches!(&r, Err(Error::Server(e)) if e.starts_with("READONLY"));
                s.deliver(r);
                !demoted
            }
            // A reply nobody asked for: the stream cannot be trusted.
            None => false,
        }
    }

    fn on_push(&self, data: Vec<BytesFrame>) {
        let s = |f: &BytesFrame| match f {
            BytesFrame::BlobString { data, .. } | BytesFrame::SimpleString { data, .. } => {
                Some(data.clone())
            }
            _ => None,
        };
        // Other pushes (pub/sub, tracking) have no consumer here.
        match &data[..] {
            [kind, key, what] => {
                if let (Some(kind), Some(key), Some(what)) = (s(kind), s(key), s(what)) {
                    if kind.eq_ignore_ascii_case(b"watchex") {
                        let added = match &what[..] {
                            b"ADD" => true,
                            b"DEL" => false,
                            _ => return,
                        };
                        self.registry.on_push(self.gen, &key, added);
                    } else if &kind[..] == b"message" {
                        self.registry.on_message(&key, &what);
                    }
                }
            }
            [kind, key, what, reason] => {
                if let (Some(kind), Some(key), Some(what), Some(reason)) =
                    (s(kind), s(key), s(what), s(reason))
                {
                    if kind.eq_ignore_ascii_case(b"settp") && &what[..] == b"LOST" {
                        let holds = self.held.lock().remove(&key).unwrap_or_default();
                        let reason = String::from_utf8_lossy(&reason).into_owned();
                        for h in holds {
                            h.lose(Some(reason.clone()));
                        }
                    }
                }
            }
            [kind, key, what, value, token] => {
                if let (Some(kind), Some(key), Some(what), Some(value), Some(token)) =
                    (s(kind), s(key), s(what), s(value), s(token))
                {
                    if kind.eq_ignore_ascii_case(b"settp") && &what[..] == b"ACQUIRED" {
                        let token = std::str::from_utf8(&token)
                            .ok()
                            .and_then(|t| t.parse::<i64>().ok())
                            .unwrap_or(1);
                        let place = self.q.lock().grants.remove(&value);
                        match place {
                            Some(p) => {
                                p.end(PlaceEnd::Granted(token));
                                self.attempt_settled(&value);
                            }
                            // A wait cancelled after the server handed the
                            // key over: give it straight back.
                            None => send_discard(self, &cmd("TPRELEASE").arg(key).arg(value)),
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// Waits for a reply with an optional timeout.
pub(crate) async fn wait<T>(
    rx: oneshot::Receiver<Result<T>>,
    timeout: Option<Duration>,
) -> Result<T> {
    let r = match timeout {
        Some(d) => tokio::time::timeout(d, rx)
            .await
            .map_err(|_| Error::Timeout)?,
        None => rx.await,
    };
    r.unwrap_or(Err(Error::Disconnected))
}

type TlsStream = tokio_rustls::client::TlsStream<TcpStream>;

/// Where the writer task writes.
enum WriteSide {
    Tcp(Arc<OwnedWriteHalf>),
    Tls(tokio::io::WriteHalf<TlsStream>),
}

impl WriteSide {
    async fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt;
        match self {
            WriteSide::Tcp(w) => write_all(w, b).await,
            WriteSide::Tls(w) => {
                w.write_all(b).await?;
                w.flush().await
            }
        }
    }
}

/// Where the reader task reads.
enum ReadSide {
    Tcp(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<TlsStream>),
}

impl ReadSide {
    async fn read_buf(&mut self, buf: &mut BytesMut) -> std::io::Result<usize> {
        use tokio::io::AsyncReadExt;
        match self {
            ReadSide::Tcp(r) => r.read_buf(buf).await,
            ReadSide::Tls(r) => r.read_buf(buf).await,
        }
    }
}

async fn writer(conn: Arc<Conn>, mut w: WriteSide) {
    loop {
        let buf = {
            let mut q = conn.q.lock();
            if q.closed {
                return;
            }
            q.writing = !q.wbuf.is_empty();
            q.writing.then(|| q.wbuf.split())
        };
        match buf {
            None => conn.wake_writer.notified().await,
            Some(b) => {
                if w.write_all(&b).await.is_err() {
                    conn.close();
                    return;
                }
                conn.q.lock().writing = false;
            }
        }
    }
}

async fn write_all(w: &OwnedWriteHalf, mut b: &[u8]) -> std::io::Result<()> {
    while !b.is_empty() {
        w.writable().await?;
        match w.try_write(b) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn reader(conn: Arc<Conn>, mut r: ReadSide) {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    loop {
        loop {
            match decode_bytes_mut(&mut buf) {
                Ok(Some((frame, _, _))) => {
                    if !conn.on_frame(frame) {
                        conn.close();
                        return;
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    conn.close();
                    return;
                }
            }
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        match r.read_buf(&mut buf).await {
            Ok(0) | Err(_) => {
                conn.close();
                return;
            }
            Ok(_) => {
                let ms = u64::try_from(conn.born.elapsed().as_millis()).unwrap_or(u64::MAX);
                conn.heard.store(ms, Ordering::Relaxed);
            }
        }
    }
}

/// `ROLE`'s first element, `master` for a master; `Err` names what it is.
pub(crate) fn check_master(role: &Value) -> std::result::Result<(), String> {
    let first = match role {
        Value::Array(a) => a.first().and_then(Value::as_bytes),
        _ => None,
    };
    match first {
        Some(b"master") => Ok(()),
        Some(other) => Err(String::from_utf8_lossy(other).into_owned()),
        None => Err(format!("a ROLE reply of type {}", role.kind())),
    }
}

/// Keeps the connection alive (`PING`), or, for a master found through
/// Sentinel, checks it still is one (`ROLE`): a node demoted by a failover
/// is dropped, so that the client resolves the master again.
async fn heartbeat(conn: Weak<Conn>, every: Duration, limit: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(c) = conn.upgrade() else { return };
        let probe = if c.managed { "ROLE" } else { "PING" };
        // Silent for two thirds of the session timeout (whatever the PING
        // is waiting for): the server may have ended the session, so the
        // connection goes, suspending its holds.
        let ping = cmd(probe);
        let r = tokio::select! {
            r = c.request(&ping, Some(limit)) => r,
            _ = c.until_silent() => Err(Error::Timeout),
        };
        match r {
            Ok(role) if c.managed && check_master(&role).is_err() => {
                c.close();
                return;
            }
            Ok(_) | Err(Error::Server(_)) => {}
            Err(Error::Timeout) => {
                c.close();
                return;
            }
            Err(_) => return,
        }
    }
}

/// Where and how to connect.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Target {
    pub host: String,
    pub port: u16,
    pub user: Option<String>,
    pub pass: Option<String>,
    pub db: i64,
    /// `rediss://`: TLS with this configuration (set by the client from
    /// its options).
    pub tls: bool,
    pub tls_config: Option<TlsConfig>,
    /// A master given by Sentinel: the handshake checks `ROLE` says
    /// master, and the connection ends on a sign of demotion.
    pub managed: bool,
}

/// A TLS client configuration, compared by identity.
#[derive(Clone, Debug)]
pub(crate) struct TlsConfig(pub Arc<rustls::ClientConfig>);

impl PartialEq for TlsConfig {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

pub(crate) fn pct_decode(s: &str) -> std::result::Result<String, Error> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| Error::Url(format!("bad percent escape in {s:?}")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| Error::Url("credentials are not UTF-8".into()))
}

/// Parses `redis[s]://[user:pass@]host[:port][/db]` (`rediss` is TLS).
pub(crate) fn parse_url(url: &str) -> Result<Target> {
    let (tls, rest) = scheme(url, "redis").ok_or_else(|| {
        Error::Url(format!(
            "{url:?}: only redis:// and rediss:// URLs are supported"
        ))
    })?;
    let (auth, hostport, db) = split_url(rest, url)?;
    let (host, port) = host_port(hostport, 6379, url)?;
    let (user, pass) = credentials(auth, url)?;
    Ok(Target {
        host,
        port,
        user,
        pass,
        db,
        tls,
        tls_config: None,
        managed: false,
    })
}

/// What follows `NAME://` or, with TLS (true), `NAMEs://` (`redis`,
/// `rediss`), or `NAME-sentinel://` / `NAMEs-sentinel://` when `name` ends
/// with it.
pub(crate) fn scheme<'a>(url: &'a str, name: &str) -> Option<(bool, &'a str)> {
    let (base, suffix) = name.split_once('-').unwrap_or((name, ""));
    let dash = if suffix.is_empty() { "" } else { "-" };
    let secure = format!("{base}s{dash}{suffix}://");
    match url.strip_prefix(secure.as_str()) {
        Some(r) => Some((true, r)),
        None => url.strip_prefix(&format!("{name}://")).map(|r| (false, r)),
    }
}

/// `[auth@]hosts[/db]` (what follows the scheme) as the credentials'
/// text, the host part and the database.
pub(crate) fn split_url<'a>(rest: &'a str, url: &str) -> Result<(Option<&'a str>, &'a str, i64)> {
    let (auth, rest) = match rest.rfind('@') {
        Some(i) => (Some(&rest[..i]), &rest[i + 1..]),
        None => (None, rest),
    };
    let (hosts, db) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    let db = if db.is_empty() {
        0
    } else {
        db.parse::<i64>()
            .ok()
            .filter(|d| *d >= 0)
            .ok_or_else(|| Error::Url(format!("{url:?}: bad database {db:?}")))?
    };
    Ok((auth, hosts, db))
}

/// `host[:port]` or `[v6]:port` (the port `default` when left out).
pub(crate) fn host_port(hostport: &str, default: u16, url: &str) -> Result<(String, u16)> {
    let (host, port) = if let Some(h) = hostport.strip_prefix('[') {
        let end = h
            .find(']')
            .ok_or_else(|| Error::Url(format!("{url:?}: unclosed [")))?;
        let after = &h[end + 1..];
        if !after.is_empty() && !after.starts_with(':') {
            return Err(Error::Url(format!("{url:?}: junk after ]")));
        }
        (&h[..end], after.strip_prefix(':'))
    } else {
        match hostport.rfind(':') {
            Some(i) => (&hostport[..i], Some(&hostport[i + 1..])),
            None => (hostport, None),
        }
    };
    if host.is_empty() {
        return Err(Error::Url(format!("{url:?}: no host")));
    }
    let port = match port {
        None => default,
        Some(p) => p
            .parse::<u16>()
            .map_err(|_| Error::Url(format!("{url:?}: bad port {p:?}")))?,
    };
    Ok((host.to_string(), port))
}

/// `user:pass` or `:pass` of a URL, percent-decoded.
pub(crate) fn credentials(
    auth: Option<&str>,
    url: &str,
) -> Result<(Option<String>, Option<String>)> {
    Ok(match auth {
        None => (None, None),
        Some(a) => match a.split_once(':') {
            Some((u, p)) => (
                (!u.is_empty()).then(|| pct_decode(u)).transpose()?,
                Some(pct_decode(p)?),
            ),
            // Redis has no password-less AUTH: a user alone is a mistake.
            None => {
                return Err(Error::Url(format!(
                    "{url:?}: a user name needs a password (user:pass@)"
                )))
            }
        },
    })
}

/// Opens a connection and runs the handshake: `HELLO 3 [AUTH user pass]
/// [SETNAME name]`, then `SELECT db`. The caller bounds it with the connect
/// timeout.
pub(crate) async fn open(t: &Target, gen: u64, setup: &Setup) -> Result<Arc<Conn>> {
    let Setup {
        name,
        heartbeat: heartbeat_every,
        session_timeout: session,
        request_timeout,
        registry,
        lock_session,
    } = setup;
    let (name, heartbeat_every, request_timeout) =
        (name.as_deref(), *heartbeat_every, *request_timeout);
    // A session needs a PING every third of its timeout, answered within
    // two thirds (so the server has heard from us in time, or we know we
    // may have lost it).
    let session = session.filter(|s| !s.is_zero());
    let stream = TcpStream::connect((t.host.as_str(), t.port)).await?;
    let _ = stream.set_nodelay(true);
    // Plain TCP writes straight from the caller when it can (`sock`);
    // TLS always goes through the writer task.
    let (reader_task, w, out): (_, Option<Arc<OwnedWriteHalf>>, WriteSide) = match &t.tls_config {
        None => {
            let (r, w) = stream.into_split();
            let w = Arc::new(w);
            (ReadSide::Tcp(r), Some(w.clone()), WriteSide::Tcp(w))
        }
        Some(cfg) => {
            let name = rustls_pki_types::ServerName::try_from(t.host.clone())
                .map_err(|e| Error::Url(format!("{:?}: {e}", t.host)))?;
            let tls = tokio_rustls::TlsConnector::from(cfg.0.clone())
                .connect(name, stream)
                .await?;
            let (r, w) = tokio::io::split(tls);
            (ReadSide::Tls(r), None, WriteSide::Tls(w))
        }
    };
    let (lost_tx, _) = watch::channel(false);
    let conn = Arc::new(Conn {
        gen,
        q: Mutex::new(Queue {
            pending: VecDeque::new(),
            wbuf: BytesMut::new(),
            writing: false,
            sock: w,
            grants: HashMap::new(),
            closed: false,
        }),
        wake_writer: Notify::new(),
        lost_tx,
        tasks: Mutex::new(Vec::new()),
        registry: registry.clone(),
        on_lost: Mutex::new(None),
        held: Mutex::new(HashMap::new()),
        attempts: Mutex::new(HashMap::new()),
        session: lock_session.clone(),
        sid: Mutex::new(None),
        sid_asked: AtomicBool::new(false),
        born: Instant::now(),
        heard: AtomicU64::new(0),
        silence: session.map(|s| s - s / 3),
        managed: t.managed,
        addr: (t.host.clone(), t.port),
    });
    {
        let mut tasks = conn.tasks.lock();
        tasks.push(tokio::spawn(reader(conn.clone(), reader_task)).abort_handle());
        tasks.push(tokio::spawn(writer(conn.clone(), out)).abort_handle());
    }
    let mut hello = cmd("HELLO").arg("3");
    if let Some(p) = &t.pass {
        hello = hello
            .arg("AUTH")
            .arg(t.user.as_deref().unwrap_or("default"))
            .arg(p.as_str());
    }
    if let Some(n) = name {
        hello = hello.arg("SETNAME").arg(n);
    }
    let select = (t.db != 0).then(|| cmd("SELECT").arg(t.db));
    let (tx1, rx1) = oneshot::channel();
    let _ = conn.send(&hello, Slot::Reply(tx1));
    // The session timeout; a server without sessions (an error reply) is
    // served without one.
    if let Some(s) = session {
        let ms = u64::try_from(s.as_millis()).unwrap_or(u64::MAX).max(1);
        send_discard(&conn, &cmd("TPSESSION").arg(ms));
    }
    let rx2 = select.map(|s| {
        let (tx2, rx2) = oneshot::channel();
        let _ = conn.send(&s, Slot::Reply(tx2));
        rx2
    });
    // Step 3 of the guidelines for Sentinel clients
    // (https://redis.io/docs/latest/develop/reference/sentinel-clients/):
    // the address Sentinel gave must say it is a master.
    let rx3 = t.managed.then(|| {
        let (tx3, rx3) = oneshot::channel();
        let _ = conn.send(&cmd("ROLE"), Slot::Reply(tx3));
        rx3
    });
    // Closes the connection if the handshake fails or is cancelled (connect
    // timeout), so its tasks do not outlive it.
    struct CloseOnDrop(Option<Arc<Conn>>);
    impl Drop for CloseOnDrop {
        fn drop(&mut self) {
            if let Some(c) = self.0.take() {
                c.close();
            }
        }
    }
    let mut guard = CloseOnDrop(Some(conn.clone()));
    wait(rx1, None).await?;
    if let Some(rx2) = rx2 {
        wait(rx2, None).await?;
    }
    if let Some(rx3) = rx3 {
        check_master(&wait(rx3, None).await?)
            .map_err(|role| Error::NotMaster(format!("{}:{} is a {role}", t.host, t.port)))?;
    }
    guard.0 = None;
    let beat = match (heartbeat_every, session) {
        (None, None) => None,
        (e, s) => {
            let (mut every, mut limit) = (Duration::MAX, Duration::MAX);
            if let Some(e) = e {
                every = e;
                limit = request_timeout.map_or(e, |r| r.min(e));
            }
            if let Some(s) = s {
                let third = s / 3;
                every = every.min(third);
                limit = limit.min(s.saturating_sub(third));
            }
            Some((every, limit))
        }
    };
    if let Some((every, limit)) = beat {
        let hb = tokio::spawn(heartbeat(Arc::downgrade(&conn), every, limit));
        conn.tasks.lock().push(hb.abort_handle());
    }
    Ok(conn)
}

/// How the client sets up its connections (from its [`Options`](crate::Options)).
#[derive(Clone)]
pub(crate) struct Setup {
    /// Sent with `HELLO ... SETNAME`.
    pub name: Option<String>,
    /// `PING` (`ROLE` through Sentinel) this often.
    pub heartbeat: Option<Duration>,
    /// `TPSESSION` timeout; also sets the heartbeat and the silence limit.
    pub session_timeout: Option<Duration>,
    pub request_timeout: Option<Duration>,
    /// Where pushes go.
    pub registry: Arc<dyn PushSink>,
    /// The client's lock session (`None` for a Sentinel's connections).
    pub lock_session: Option<Arc<Session>>,
}

impl Setup {
    /// No heartbeat, session or name: a Sentinel's connection.
    pub(crate) fn bare(registry: Arc<dyn PushSink>) -> Setup {
        Setup {
            name: None,
            heartbeat: None,
            session_timeout: None,
            request_timeout: None,
            registry,
            lock_session: None,
        }
    }
}

/// Sends `c` on `conn` as fire and forget.
pub(crate) fn send_discard(conn: &Conn, c: &Cmd) {
    let _ = conn.send(c, Slot::Discard);
}

/// A bulk-string argument.
pub(crate) fn bytes_of(b: impl AsRef<[u8]>) -> Bytes {
    Bytes::copy_from_slice(b.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = parse_url("redis://u:p%40ss@h.example:7000/3").unwrap();
        assert_eq!(
            t,
            Target {
                host: "h.example".into(),
                port: 7000,
                user: Some("u".into()),
                pass: Some("p@ss".into()),
                db: 3,
                tls: false,
                tls_config: None,
                managed: false,
            }
        );
        let t = parse_url("rediss://h:7001").unwrap();
        assert!(t.tls && t.tls_config.is_none());
        let t = parse_url("redis://:secret@[::1]:6380").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 6380));
        assert_eq!((t.user, t.pass), (None, Some("secret".into())));
        assert_eq!(parse_url("redis://localhost").unwrap().port, 6379);
        assert!(parse_url("http://x").is_err());
        assert!(parse_url("redis://x:99999").is_err());
        assert!(parse_url("redis://x/abc").is_err());
        assert!(parse_url("redis://[::1]junk").is_err());
        assert!(parse_url("redis://user@host").is_err());
        assert_eq!(parse_url("redis://[::1]").unwrap().port, 6379);
    }
}
