//! Distributed locks from SETTP (a key bound to this connection, so the
//! server releases it when the connection ends) and WATCHEX (wait for the
//! key's deletion instead of polling).
//!
//! Acquire: `SETTP name token`; on 0 watch the key and retry SETTP on
//! `NotExists` / `Deleted`. Release: `DELIFEQ name token`, which never
//! deletes a lock someone else holds now.

use std::future::{Future, IntoFuture};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::cmd::{cmd, Cmd};
use super::conn::{bytes_of, send_discard, wait, Conn, Slot};
use super::error::{Error, Result};
use super::value::Value;
use super::watch::WatchEvent;
use super::Client;

/// A SETTP that succeeded: releases with DELIFEQ when dropped while armed,
/// so a lock acquired by a cancelled future (or a dropped guard) never
/// lingers until the connection closes.
struct Held {
    conn: Weak<Conn>,
    name: Bytes,
    token: String,
    armed: bool,
    /// A fair lock's place in the queue; deleted right after the release
    /// (same connection, so in that order), which wakes the next in line.
    queue: Option<QueueSlot>,
}

impl Held {
    fn release_cmd(&self) -> Cmd {
        cmd("DELIFEQ").arg(&self.name).arg(self.token.as_str())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.armed {
            if let Some(c) = self.conn.upgrade() {
                send_discard(&c, &self.release_cmd());
            }
        }
        // `queue` drops after this, so its DEL follows the DELIFEQ.
    }
}

/// A fair lock's queue key (`SETTP`, bound to the connection like the lock):
/// deleted when dropped, so an abandoned wait leaves nothing behind.
struct QueueSlot {
    conn: Weak<Conn>,
    key: Bytes,
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        if let Some(c) = self.conn.upgrade() {
            send_discard(&c, &cmd("DEL").arg(&self.key));
        }
    }
}

fn ticket_key(name: &[u8]) -> Bytes {
    let mut k = b"latchkey:ticket:".to_vec();
    k.extend_from_slice(name);
    k.into()
}

fn queue_key(name: &[u8], ticket: i64) -> Bytes {
    let mut k = b"latchkey:queue:".to_vec();
    k.extend_from_slice(name);
    k.push(b':');
    k.extend_from_slice(ticket.to_string().as_bytes());
    k.into()
}

/// How far below its own ticket a fair waiter looks for a live
/// predecessor before it falls back to watching the lock key itself.
const MAX_WALK: i64 = 64;

fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// One `SETTP name token`; `Some` if acquired. The reply hook turns a
/// success into a `Held` right on the reader task, so cancellation at any
/// point releases it.
async fn settp(
    conn: &Arc<Conn>,
    name: &Bytes,
    token: &str,
    timeout: Option<Duration>,
) -> Result<Option<Held>> {
    let (tx, rx) = oneshot::channel::<Result<Option<Held>>>();
    let mut held = Some(Held {
        conn: Arc::downgrade(conn),
        name: name.clone(),
        token: token.to_string(),
        armed: false,
        queue: None,
    });
    let hook = Box::new(move |r: Result<Value>| {
        let r = r.and_then(|v| match v {
            Value::Int(1) => {
                let mut h = held.take().unwrap();
                h.armed = true;
                Ok(Some(h))
            }
            Value::Int(0) => Ok(None),
            v => Err(Error::Type(format!(
                "expected integer 0 or 1 from SETTP, got {}",
                v.kind()
            ))),
        });
        // If the caller is gone, dropping the value releases the lock.
        let _ = tx.send(r);
    });
    let c = cmd("SETTP").arg(name).arg(token);
    if conn.send(&c, Slot::Hook(hook)).is_err() {
        return Err(Error::Disconnected);
    }
    wait(rx, timeout).await
}

/// Builds a lock acquisition; await it (it is [`IntoFuture`]).
///
/// ```no_run
/// # async fn demo(client: latchkey::client::Client) -> latchkey::client::Result<()> {
/// use std::time::Duration;
/// let guard = client
///     .lock("reports")
///     .lease(Duration::from_secs(30))
///     .timeout(Duration::from_secs(5))
///     .await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "a LockBuilder does nothing until awaited"]
pub struct LockBuilder {
    client: Client,
    name: Bytes,
    lease: Option<Duration>,
    timeout: Option<Duration>,
    fair: bool,
}

impl LockBuilder {
    pub(crate) fn new(client: &Client, name: Bytes) -> Self {
        LockBuilder {
            client: client.clone(),
            name,
            lease: None,
            timeout: None,
            fair: false,
        }
    }

    /// First come, first served, and herd-free: waiters queue up, each
    /// watching only the one ahead of it, so a release wakes exactly one
    /// waiter instead of all of them. The lock key itself is the same
    /// `SETTP` lock (mutual exclusion never depends on the queue), so fair
    /// and plain acquirers of one name exclude each other; only fairness
    /// needs every acquirer to use `fair()`.
    ///
    /// Costs two extra keys per waiter: `latchkey:ticket:<name>` (a counter
    /// that is never deleted) and `latchkey:queue:<name>:<n>` (bound to
    /// the waiter's connection, deleted on release or disconnect).
    pub fn fair(mut self) -> Self {
        self.fair = true;
        self
    }

    /// Also `PEXPIRE` the key after acquiring it, as a second line of
    /// defence against a holder that is alive but stuck. The guard counts
    /// itself lost once the lease has run out (measured from before the
    /// SETTP, so it never outlives the server's TTL).
    pub fn lease(mut self, d: Duration) -> Self {
        self.lease = Some(d);
        self
    }

    /// Give up with [`Error::LockTimeout`] after waiting this long.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }

    async fn acquire(self) -> Result<LockGuard> {
        if self.fair {
            return self.acquire_fair().await;
        }
        let start = Instant::now();
        let deadline = self.timeout.map(|t| start + t);
        let timed_out = || Error::LockTimeout {
            name: String::from_utf8_lossy(&self.name).into_owned(),
            waited: start.elapsed(),
        };
        let token = new_token();
        let mut events = None;
        loop {
            let conn = self.client.conn()?;
            let lease_deadline = self.lease.map(|l| Instant::now() + l);
            // The deadline bounds the wait, not an attempt: an attempt is
            // bounded by the request timeout, so even a zero wait can take a
            // free lock.
            match settp(&conn, &self.name, &token, self.client.request_timeout()).await {
                Ok(Some(held)) => {
                    return LockGuard::acquired(
                        &self.client,
                        conn,
                        held,
                        self.lease,
                        lease_deadline,
                    )
                    .await;
                }
                Ok(None) => {}
                Err(Error::Timeout) if deadline.is_some_and(|d| Instant::now() >= d) => {
                    return Err(timed_out())
                }
                Err(e) => return Err(e),
            }
            if events.is_none() {
                let s = self.client.watch_stream(&self.name);
                let s = match deadline {
                    Some(d) => tokio::time::timeout_at(d, s)
                        .await
                        .map_err(|_| timed_out())?,
                    None => s.await,
                };
                events = Some(s.map_err(|e| match e {
                    Error::Timeout if deadline.is_some_and(|d| Instant::now() >= d) => timed_out(),
                    e => e,
                })?);
            }
            let s = events.as_mut().unwrap();
            // Wait until the key is gone, then try again.
            loop {
                let ev = match deadline {
                    Some(d) => tokio::time::timeout_at(d, s.next())
                        .await
                        .map_err(|_| timed_out())?,
                    None => s.next().await,
                };
                match ev {
                    Some(WatchEvent::NotExists | WatchEvent::Deleted) => break,
                    Some(WatchEvent::Exists | WatchEvent::Added) => {}
                    Some(WatchEvent::Disconnected) | None => return Err(Error::Disconnected),
                }
            }
        }
    }
}

impl LockBuilder {
    /// The queue recipe (ZooKeeper's, over SETTP/WATCHEX): take a ticket n
    /// (INCR), put `queue:<n>` (SETTP), then loop: try `SETTP name "n:token"`;
    /// if it is taken, read the holder's ticket h from the lock's value and
    /// watch the nearest live queue key below n (above h), or the lock key
    /// itself when none is left; retry when that key goes away. A queue key
    /// looked at before its owner created it reads as absent, so two
    /// waiters may now and then try at once: SETTP still lets only one in.
    async fn acquire_fair(self) -> Result<LockGuard> {
        let start = Instant::now();
        let deadline = self.timeout.map(|t| start + t);
        let name_str = String::from_utf8_lossy(&self.name).into_owned();
        let timed_out = || Error::LockTimeout {
            name: name_str.clone(),
            waited: start.elapsed(),
        };
        let rt = self.client.request_timeout();
        let conn = self.client.conn()?;
        let ticket = match conn
            .request(&cmd("INCR").arg(ticket_key(&self.name)), rt)
            .await?
        {
            Value::Int(n) => n,
            v => {
                return Err(Error::Type(format!(
                    "expected integer from INCR, got {}",
                    v.kind()
                )))
            }
        };
        let token = format!("{ticket}:{}", new_token());
        let qkey = queue_key(&self.name, ticket);
        let c = cmd("SETTP").arg(&qkey).arg(token.as_str());
        let slot = match conn.request(&c, rt).await? {
            Value::Int(1) => QueueSlot {
                conn: Arc::downgrade(&conn),
                key: qkey,
            },
            _ => {
                return Err(Error::Protocol(format!(
                    "queue key {qkey:?} already exists"
                )))
            }
        };
        let mut slot = Some(slot);
        loop {
            let lease_deadline = self.lease.map(|l| Instant::now() + l);
            if let Some(mut held) = settp(&conn, &self.name, &token, rt).await? {
                held.queue = slot.take();
                return LockGuard::acquired(&self.client, conn, held, self.lease, lease_deadline)
                    .await;
            }
            let holder = match conn.request(&cmd("GET").arg(&self.name), rt).await? {
                Value::Bulk(b) => holder_ticket(&b),
                _ => None,
            };
            // Nearest live queue key ahead of us; the lock key if none.
            let floor = holder.unwrap_or(0).max(ticket - 1 - MAX_WALK);
            let mut ahead = ticket - 1;
            let mut events = loop {
                let key = if ahead > floor {
                    queue_key(&self.name, ahead)
                } else {
                    self.name.clone()
                };
                let mut s = with_deadline(deadline, self.client.watch_stream(&key))
                    .await
                    .ok_or_else(timed_out)??;
                match with_deadline(deadline, s.next())
                    .await
                    .ok_or_else(timed_out)?
                {
                    Some(WatchEvent::Exists) => break Some(s),
                    Some(WatchEvent::NotExists) if ahead > floor => ahead -= 1,
                    Some(WatchEvent::NotExists) => break None,
                    _ => return Err(Error::Disconnected),
                }
            };
            if let Some(s) = events.as_mut() {
                loop {
                    match with_deadline(deadline, s.next())
                        .await
                        .ok_or_else(timed_out)?
                    {
                        Some(WatchEvent::NotExists | WatchEvent::Deleted) => break,
                        Some(WatchEvent::Exists | WatchEvent::Added) => {}
                        Some(WatchEvent::Disconnected) | None => return Err(Error::Disconnected),
                    }
                }
            }
        }
    }
}

/// The ticket in a fair lock's value (`"<ticket>:<token>"`).
fn holder_ticket(value: &[u8]) -> Option<i64> {
    let end = value.iter().position(|&b| b == b':')?;
    std::str::from_utf8(&value[..end]).ok()?.parse().ok()
}

/// `f`, or `None` once `deadline` has passed.
async fn with_deadline<F: Future>(deadline: Option<Instant>, f: F) -> Option<F::Output> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d, f).await.ok(),
        None => Some(f.await),
    }
}

impl IntoFuture for LockBuilder {
    type Output = Result<LockGuard>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<LockGuard>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.acquire())
    }
}

/// A held lock. Release it with [`LockGuard::unlock`]; dropping it queues
/// the same `DELIFEQ name token` on its connection right away (no runtime
/// needed, nothing is awaited), so a guard dropped by a panic or a
/// cancelled task still releases. It keeps its client alive.
pub struct LockGuard {
    client: Client,
    conn: Arc<Conn>,
    held: Held,
    lease_deadline: Option<Instant>,
}

impl LockGuard {
    async fn acquired(
        client: &Client,
        conn: Arc<Conn>,
        held: Held,
        lease: Option<Duration>,
        lease_deadline: Option<Instant>,
    ) -> Result<LockGuard> {
        let guard = LockGuard {
            client: client.clone(),
            conn,
            held,
            lease_deadline,
        };
        if let Some(l) = lease {
            let c = cmd("PEXPIRE")
                .arg(&guard.held.name)
                .arg(l.as_millis().max(1) as u64);
            // On failure the guard is dropped, which releases the lock.
            guard.conn.request(&c, client.request_timeout()).await?;
            // A fair lock's successor waits on the queue key: it must
            // expire with the lease too, or a stuck holder's lease would
            // free the lock without waking anyone.
            if let Some(q) = &guard.held.queue {
                let c = cmd("PEXPIRE").arg(&q.key).arg(l.as_millis().max(1) as u64);
                guard.conn.request(&c, client.request_timeout()).await?;
            }
        }
        Ok(guard)
    }

    /// The lock's key.
    pub fn name(&self) -> &[u8] {
        &self.held.name
    }

    /// Unique per acquisition; the value stored in the key.
    pub fn token(&self) -> &str {
        &self.held.token
    }

    /// The client the lock was taken with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// False once the connection that took the lock is gone (the server
    /// released the lock with it) or the lease ran out. It does not notice
    /// an operator deleting the key; [`LockGuard::unlock`] then returns
    /// false.
    pub fn is_held(&self) -> bool {
        !self.conn.is_closed() && self.lease_deadline.is_none_or(|d| Instant::now() < d)
    }

    /// Resolves when the lock is lost: its connection dropped or the lease
    /// ran out. Unlocking does not resolve it.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let lost = self.conn.lost();
        let lease = self.lease_deadline;
        async move {
            match lease {
                Some(d) => {
                    tokio::select! {
                        _ = lost => {}
                        _ = tokio::time::sleep_until(d) => {}
                    }
                }
                None => lost.await,
            }
        }
    }

    /// Releases with `DELIFEQ name token`. False if the lock was no longer
    /// ours: the key was deleted or taken over, or the connection is gone
    /// (the server released it then).
    pub async fn unlock(mut self) -> Result<bool> {
        self.held.armed = false;
        let c = self.held.release_cmd();
        let (tx, rx) = oneshot::channel();
        let sent = self.conn.send(&c, Slot::Reply(tx));
        // A fair lock's queue key goes right behind the DELIFEQ, in the same
        // write: its DEL is what wakes the next waiter.
        drop(self.held.queue.take());
        if sent.is_err() {
            return Ok(false);
        }
        match wait(rx, self.client.request_timeout()).await {
            Ok(v) => Ok(matches!(v, Value::Int(1))),
            Err(Error::Disconnected) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &String::from_utf8_lossy(&self.held.name))
            .field("token", &self.held.token)
            .field("held", &self.is_held())
            .finish()
    }
}

impl Client {
    /// Starts acquiring the lock `name`; await the builder. Waits as long as
    /// it takes unless [`LockBuilder::timeout`] is set. Fails with
    /// `Disconnected` if the connection drops while waiting.
    ///
    /// ```no_run
    /// # async fn demo(client: latchkey::client::Client) -> latchkey::client::Result<()> {
    /// let guard = client.lock("orders").await?;
    /// // ... only one holder at a time here ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl AsRef<[u8]>) -> LockBuilder {
        LockBuilder::new(self, bytes_of(name))
    }

    /// One `SETTP`: the guard if the lock was free, `None` otherwise.
    pub async fn try_lock(&self, name: impl AsRef<[u8]>) -> Result<Option<LockGuard>> {
        let conn = self.conn()?;
        let name = bytes_of(name);
        match settp(&conn, &name, &new_token(), self.request_timeout()).await? {
            Some(held) => LockGuard::acquired(self, conn, held, None, None)
                .await
                .map(Some),
            None => Ok(None),
        }
    }

    /// Like [`Client::lock`] but gives up with [`Error::LockTimeout`] after
    /// `wait`.
    ///
    /// ```no_run
    /// # async fn demo(client: latchkey::client::Client) -> latchkey::client::Result<()> {
    /// use std::time::Duration;
    /// use latchkey::client::Error;
    /// match client.lock_timeout("orders", Duration::from_millis(200)).await {
    ///     Ok(guard) => drop(guard),
    ///     Err(Error::LockTimeout { waited, .. }) => println!("busy for {waited:?}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lock_timeout(&self, name: impl AsRef<[u8]>, wait: Duration) -> Result<LockGuard> {
        self.lock(name).timeout(wait).await
    }

    /// Runs `f` holding the lock `name` and releases it however `f` ends:
    /// its output (an `Err` too) is returned after the release, a panic is
    /// resumed after the release, and if this future is dropped the guard's
    /// drop releases.
    ///
    /// ```no_run
    /// # async fn demo(client: latchkey::client::Client) -> latchkey::client::Result<()> {
    /// let n: i64 = client
    ///     .with_lock("counter-lock", async {
    ///         let n = client.incr("counter").await?;
    ///         Ok::<_, latchkey::client::Error>(n)
    ///     })
    ///     .await??;
    /// # let _ = n; Ok(()) }
    /// ```
    pub async fn with_lock<F, T>(&self, name: impl AsRef<[u8]>, f: F) -> Result<T>
    where
        F: Future<Output = T>,
    {
        let guard = self.lock(name).await?;
        let out = AssertUnwindSafe(f).catch_unwind().await;
        let _ = guard.unlock().await;
        match out {
            Ok(v) => Ok(v),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}
