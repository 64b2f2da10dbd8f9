//! Distributed locks from SETTP (a key bound to this connection, so the
//! server releases it when the connection ends) and WATCHEX (wait for the
//! key's deletion instead of polling).
//!
//! Acquire: `SETTP name token`; on 0 watch the key and retry SETTP on
//! `NotExists` / `Deleted`. Fair: `SETTP name token QUEUE`, and the server
//! hands the key over in arrival order. Release: `DELIFEQ name token`,
//! which never deletes a lock someone else holds now.

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
use super::conn::session::{Hold, HoldState, LockState, Place, PlaceEnd, PlaceHook};
use super::conn::{bytes_of, send_discard, wait, Conn, Slot};
use super::error::{Error, Result};
use super::value::Value;
use super::watch::WatchEvent;
use super::Client;

/// A SETTP that succeeded: releases with TPRELEASE when dropped while
/// armed, so a lock acquired by a cancelled future (or a dropped guard)
/// never lingers until the connection closes.
struct Held {
    conn: Weak<Conn>,
    name: Bytes,
    token: String,
    armed: bool,
    /// The acquisition's fencing token (the server's SETTP ... TOKEN
    /// reply, or the hand-off push).
    fence: u64,
    /// The hold, tracked by its connection (LOST notices, the connection's
    /// end) and resumed by the session after a failover.
    hold: Option<Arc<Hold>>,
}

impl Held {
    /// Why the lock was lost, if a reason is known.
    fn lost_reason(&self) -> Option<String> {
        match self.hold.as_ref()?.state() {
            HoldState::Lost(r) => r,
            _ => None,
        }
    }

    /// Not ours after all (a hand-off whose lease ran out before it was
    /// read): no longer tracked, and not released.
    fn disown(&mut self) {
        self.armed = false;
        if let Some(h) = self.hold.take() {
            if let Some(c) = h.conn() {
                c.untrack(&h);
            }
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        match &self.hold {
            Some(h) => {
                h.release(None);
            }
            None => {
                if let Some(c) = self.conn.upgrade() {
                    let c2 = cmd("TPRELEASE").arg(&self.name).arg(self.token.as_str());
                    send_discard(&c, &c2);
                }
            }
        }
    }
}

fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// What a `SETTP ... TOKEN` reply (or a hand-off's token) means for an
/// acquisition: a fencing token arms `held` and sends it (if the caller is
/// gone, dropping it releases the lock); 0 is a lock taken by another.
/// Runs on the reader task, so the lock is tracked for LOST notices before
/// any push that follows.
fn settp_reply(r: Result<Value>, held: Held, tx: oneshot::Sender<Result<Option<Held>>>) {
    let _ = tx.send(settp_outcome(r, held));
}

/// The acquisition `settp_reply` sends: `held` armed and tracked on its
/// connection for a fencing token, `None` for 0.
fn settp_outcome(r: Result<Value>, mut held: Held) -> Result<Option<Held>> {
    r.and_then(|v| match v {
        Value::Int(0) => Ok(None),
        Value::Int(t) if t > 0 => {
            held.armed = true;
            held.fence = t as u64;
            let hold = Hold::new(held.conn.clone(), held.name.clone(), held.token.clone());
            match held.conn.upgrade() {
                Some(c) => {
                    c.track(hold.clone());
                    c.learn_sid();
                }
                None => hold.lose(None),
            }
            held.hold = Some(hold);
            Ok(Some(held))
        }
        v => Err(Error::Type(format!(
            "expected a fencing token or 0 from SETTP, got {}",
            v.kind()
        ))),
    })
}

/// One SETTP of an acquisition: the lock, this acquisition's token, the
/// lease and mode asked for, and how long to wait for the reply.
struct Attempt<'a> {
    conn: &'a Arc<Conn>,
    name: &'a Bytes,
    token: &'a str,
    lease: Option<Duration>,
    mode: Mode,
    timeout: Option<Duration>,
}

impl Attempt<'_> {
    /// The `Held` a success arms.
    fn unarmed(&self) -> Held {
        Held {
            conn: Arc::downgrade(self.conn),
            name: self.name.clone(),
            token: self.token.to_string(),
            armed: false,
            fence: 0,
            hold: None,
        }
    }

    /// `SETTP name token TOKEN [PX lease] [SHARED | PERMITS n]`: the lease
    /// is set in the same step as the key, so nobody ever sees the lock
    /// without it; the reply is the acquisition's fencing token.
    fn cmd(&self) -> Cmd {
        let c = cmd("SETTP").arg(self.name).arg(self.token).arg("TOKEN");
        let c = match self.lease {
            Some(l) => c.arg("PX").arg(lease_ms(l)),
            None => c,
        };
        match self.mode {
            Mode::Exclusive => c,
            Mode::Shared => c.arg("SHARED"),
            Mode::Permits(n) => c.arg("PERMITS").arg(n),
        }
    }

    /// One `SETTP name token`; `Some` if acquired. The reply hook turns a
    /// success into a `Held` right on the reader task, so cancellation at
    /// any point releases it.
    async fn settp(&self) -> Result<Option<Held>> {
        let (tx, rx) = oneshot::channel::<Result<Option<Held>>>();
        let held = self.unarmed();
        let value = Bytes::copy_from_slice(self.token.as_bytes());
        self.conn.attempt_started(self.name, &value);
        let weak = Arc::downgrade(self.conn);
        let hook = Box::new(move |r: Result<Value>| {
            settp_reply(r, held, tx);
            if let Some(c) = weak.upgrade() {
                c.attempt_settled(&value);
            }
        });
        if self.conn.send(&self.cmd(), Slot::Hook(hook)).is_err() {
            return Err(Error::Disconnected);
        }
        wait(rx, self.timeout).await
    }
}

/// How a lock is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One holder: a plain lock, or a read-write lock's writer.
    Exclusive,
    /// A read-write lock's reader: any number hold it together, while no
    /// writer does; a queued writer stops later readers.
    Shared,
    /// One of `n` permits of a counting semaphore.
    Permits(u32),
}

/// A place in the server's queue for a lock (`SETTP ... QUEUE` answered 0).
/// Dropped before the hand-off (timeout, cancellation), it leaves the
/// queue (`TPDEQUEUE` on the connection the place waits on now, another
/// after a resume); a hand-off that crossed the `TPDEQUEUE` is released on
/// arrival.
struct Queued {
    place: Arc<Place>,
    waiting: bool,
}

impl Drop for Queued {
    fn drop(&mut self) {
        if self.waiting {
            self.place.cancel();
        }
    }
}

/// How a place in line ended, for [`LockBuilder::acquire_fair`].
enum Handoff {
    /// Handed over: the lock (`None` for a hand-off without one, which
    /// the server never sends), bound to the connection it came on.
    Granted(Option<Held>),
    /// The place was lost with the session across a failover (not in the
    /// resume's reply): queue again on that connection.
    Requeue(Weak<Conn>),
}

impl Attempt<'_> {
    /// `SETTP name token QUEUE`: the lock now (first `Some`), or a place in
    /// line and a receiver for how it ends: handed over (on this connection
    /// or, carried by the session across a failover, on the next one),
    /// lost with the session, or failed.
    #[allow(clippy::type_complexity)]
    async fn settp_queued(
        &self,
    ) -> Result<std::result::Result<Held, (Queued, oneshot::Receiver<Result<Handoff>>)>> {
        let (now_tx, now_rx) = oneshot::channel::<Result<Option<Held>>>();
        let (later_tx, later_rx) = oneshot::channel::<Result<Handoff>>();
        let held = self.unarmed();
        let mut later = self.unarmed();
        let weak = Arc::downgrade(self.conn);
        let value = Bytes::copy_from_slice(self.token.as_bytes());
        // Told once, on the reader task of the connection the place is on
        // when it is handed over: the lock is tracked there before any
        // frame that follows.
        let grant: PlaceHook = Box::new(move |conn, end| {
            let r = match end {
                PlaceEnd::Granted(t) => {
                    later.conn = conn;
                    settp_outcome(Ok(Value::Int(t)), later).map(Handoff::Granted)
                }
                PlaceEnd::Dropped => Ok(Handoff::Requeue(conn)),
                PlaceEnd::Failed(e) => Err(e),
            };
            let _ = later_tx.send(r);
        });
        let place = Place::new(weak.clone(), self.name.clone(), value.clone(), grant);
        let in_line = place.clone();
        self.conn.attempt_started(self.name, &value);
        // Runs on the reader task, before any push that follows the reply:
        // the hand-off can never arrive before its place is registered. A
        // place in line stays an attempt until its hand-off or TPDEQUEUE,
        // and makes the connection learn its session's identity, so that
        // the place can be carried across a failover.
        let hook = Box::new(move |r: Result<Value>| match r {
            Ok(Value::Int(0)) => {
                match weak.upgrade() {
                    Some(c) => {
                        in_line.wait_on(&c);
                        c.learn_sid();
                    }
                    None => in_line.end(PlaceEnd::Failed(Error::Disconnected)),
                }
                let _ = now_tx.send(Ok(None));
            }
            r => {
                settp_reply(r, held, now_tx);
                if let Some(c) = weak.upgrade() {
                    c.attempt_settled(&value);
                }
            }
        });
        if self
            .conn
            .send(&self.cmd().arg("QUEUE"), Slot::Hook(hook))
            .is_err()
        {
            return Err(Error::Disconnected);
        }
        let queued = Queued {
            place,
            waiting: true,
        };
        match wait(now_rx, self.timeout).await? {
            Some(held) => {
                let mut q = queued;
                q.waiting = false;
                Ok(Ok(held))
            }
            None => Ok(Err((queued, later_rx))),
        }
    }
}

/// Builds a lock acquisition; await it (it is [`IntoFuture`]).
///
/// ```no_run
/// # async fn demo(client: latchkey::Client) -> latchkey::Result<()> {
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
    mode: Mode,
}

impl LockBuilder {
    pub(crate) fn new(client: &Client, name: Bytes) -> Self {
        LockBuilder {
            client: client.clone(),
            name,
            lease: None,
            timeout: None,
            fair: true,
            mode: Mode::Exclusive,
        }
    }

    /// Hold the lock as `mode` (exclusive, a reader's share, a permit).
    /// Shared modes always wait in the server's line.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// First come, first served, and herd-free (the default):
    /// `SETTP name token QUEUE` puts this connection in the server's line
    /// for the lock, and when the holder releases (or dies) the server
    /// creates the key for the first in line and pushes it `ACQUIRED`. A
    /// release wakes exactly one waiter and the hand-off costs no extra
    /// round trip. It is still the same `SETTP` key, so queued and
    /// [`watch_loop`](Self::watch_loop) acquirers of one name exclude each
    /// other; only the order needs every acquirer to queue (a loop acquirer
    /// can take the lock only when nobody is queued).
    pub fn fair(mut self) -> Self {
        self.fair = true;
        self
    }

    /// The original loop instead of the server's line: `SETTP`, and on a
    /// taken lock a WATCHEX on the key and a new `SETTP` each time it is
    /// deleted. No order, and every release wakes every waiter (which then
    /// race): measured at about a quarter of the queue's throughput with
    /// 16 contending workers (`bench/lock.sh`). Kept for servers shared
    /// with clients that poll, and for comparison.
    pub fn watch_loop(mut self) -> Self {
        self.fair = false;
        self
    }

    /// Give the key a server TTL (`SETTP ... PX`, set with the key), as a
    /// second line of defence against a holder that is alive but stuck. The
    /// guard counts itself lost once the lease has run out, measured from
    /// before the SETTP, so it never outlives the server's TTL. After a fair
    /// hand-off the server's TTL started at the hand-off: the guard asks
    /// what is left of it (PTTL, then GET to check the key is still its
    /// own). A hand-off whose lease ran out before it was read is not taken;
    /// the wait goes on at the back of the line.
    pub fn lease(mut self, d: Duration) -> Self {
        self.lease = Some(d);
        self
    }

    /// Give up with [`Error::LockTimeout`] after waiting this long.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }

    /// One SETTP of this acquisition on `conn` with `token`; its reply is
    /// awaited for the request timeout.
    fn attempt<'a>(&'a self, conn: &'a Arc<Conn>, token: &'a str) -> Attempt<'a> {
        Attempt {
            conn,
            name: &self.name,
            token,
            lease: self.lease,
            mode: self.mode,
            timeout: self.client.request_timeout(),
        }
    }

    async fn acquire(self) -> Result<LockGuard> {
        if self.fair || self.mode != Mode::Exclusive {
            return self.acquire_fair().await;
        }
        let wait = Waiting::new(&self.name, self.timeout);
        let (deadline, timed_out) = (wait.deadline, || wait.timed_out());
        let token = new_token();
        let mut events = None;
        loop {
            let conn = self.client.conn()?;
            // Measured before SETTP, so the guard's lease never outlives the
            // server's TTL.
            let lease_deadline = self.lease.and_then(|l| lease_end(Instant::now(), l));
            // The deadline bounds the wait, not an attempt: an attempt is
            // bounded by the request timeout, so even a zero wait can take a
            // free lock.
            let attempt = self.attempt(&conn, &token).settp().await;
            if let Some(held) = attempt.map_err(|e| wait.attempt_error(e))? {
                return Ok(LockGuard::acquired(&self.client, held, lease_deadline));
            }
            if events.is_none() {
                let s = self.client.watch_stream(&self.name);
                let s = match deadline {
                    Some(d) => tokio::time::timeout_at(d, s)
                        .await
                        .map_err(|_| timed_out())?,
                    None => s.await,
                };
                events = Some(s.map_err(|e| wait.attempt_error(e))?);
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
    async fn acquire_fair(self) -> Result<LockGuard> {
        let wait = Waiting::new(&self.name, self.timeout);
        // The connection the wait is on: another after a failover that
        // carried its place (or lost it: it queues again there).
        let mut conn = self.client.conn()?;
        let rt = self.client.request_timeout();
        loop {
            let token = new_token();
            // As for plain locks, the deadline bounds the wait, not the attempt.
            let lease_deadline = self.lease.and_then(|l| lease_end(Instant::now(), l));
            let attempt = self.attempt(&conn, &token).settp_queued().await;
            let (mut queued, rx) = match attempt.map_err(|e| wait.attempt_error(e))? {
                Ok(held) => return Ok(LockGuard::acquired(&self.client, held, lease_deadline)),
                Err(q) => q,
            };
            let got = with_deadline(wait.deadline, rx)
                .await
                .ok_or_else(|| wait.timed_out())?;
            let mut held = match got {
                Ok(Ok(Handoff::Granted(Some(held)))) => held,
                Ok(Ok(Handoff::Granted(None))) => {
                    return Err(Error::Protocol("hand-off without the lock".into()))
                }
                Ok(Ok(Handoff::Requeue(on))) => {
                    // Not in the session resumed after a failover: the
                    // place is gone, so queue again, at the end of the
                    // line, on the new connection.
                    queued.waiting = false;
                    conn = match on.upgrade().filter(|c| !c.is_closed()) {
                        Some(c) => c,
                        None => self.client.conn()?,
                    };
                    continue;
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(Error::Disconnected),
            };
            queued.waiting = false;
            // Handed over on the connection the place was on then.
            if let Some(c) = held.conn.upgrade() {
                conn = c;
            }
            if self.lease.is_none() {
                return Ok(LockGuard::acquired(&self.client, held, None));
            }
            // The server started the lease's TTL at the hand-off, some time
            // before this push (or the resume that listed it) was read: ask
            // what is left of it.
            match lease_left(&conn, &held, rt).await? {
                Some(lease_deadline) => {
                    return Ok(LockGuard::acquired(&self.client, held, lease_deadline))
                }
                // The lease ran out before the hand-off was read, and the
                // key may be someone else's now: not ours to release.
                None => held.disown(),
            }
        }
    }
}

/// One lock wait: when it started, when it gives up, and the error it then
/// ends with. The deadline bounds the wait, not an attempt: an attempt is
/// bounded by the request timeout, so even a zero wait can take a free lock.
struct Waiting<'a> {
    name: &'a [u8],
    start: Instant,
    deadline: Option<Instant>,
}

impl<'a> Waiting<'a> {
    fn new(name: &'a [u8], timeout: Option<Duration>) -> Self {
        let start = Instant::now();
        Waiting {
            name,
            start,
            deadline: timeout.and_then(|t| start.checked_add(t)),
        }
    }

    fn timed_out(&self) -> Error {
        Error::LockTimeout {
            name: String::from_utf8_lossy(self.name).into_owned(),
            waited: self.start.elapsed(),
        }
    }

    /// An attempt's error as the wait reports it: a request that timed out
    /// once the wait's deadline has passed is the wait's timeout.
    fn attempt_error(&self, e: Error) -> Error {
        match e {
            Error::Timeout if self.deadline.is_some_and(|d| Instant::now() >= d) => {
                self.timed_out()
            }
            e => e,
        }
    }
}

/// When a lease of `l` taken at `t` surely ends: `SETTP ... PX` sends whole
/// milliseconds, rounded down. `None` (no deadline) if it overflows.
fn lease_end(t: Instant, l: Duration) -> Option<Instant> {
    t.checked_add(Duration::from_millis(lease_ms(l)).min(l))
}

fn lease_ms(l: Duration) -> u64 {
    u64::try_from(l.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// After a hand-off with a lease: `Some(deadline)` if the key is still
/// ours, `None` if its TTL ran out first. PTTL goes first: once GET shows
/// our token, the key was ours since the hand-off, so the PTTL was ours too.
async fn lease_left(
    conn: &Arc<Conn>,
    held: &Held,
    rt: Option<Duration>,
) -> Result<Option<Option<Instant>>> {
    let t = Instant::now();
    let pttl = conn.request(&cmd("PTTL").arg(&held.name), rt).await?;
    let value = conn.request(&cmd("GET").arg(&held.name), rt).await?;
    let ours = matches!(&value, Value::Bulk(b) if b[..] == *held.token.as_bytes());
    Ok(match (ours, pttl) {
        (false, _) => None,
        // The server expires the key `ms` after it read the PTTL, which was
        // after `t`.
        (true, Value::Int(ms)) if ms >= 0 => Some(t.checked_add(Duration::from_millis(ms as u64))),
        (true, _) => Some(None),
    })
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
/// the same `TPRELEASE name value` on its connection right away (no runtime
/// needed, nothing is awaited), so a guard dropped by a panic or a
/// cancelled task still releases. It keeps its client alive.
///
/// Its [state](LockGuard::state) is `Held`, `Suspended` (the connection
/// dropped or went silent and, with [`Options::reconnect`](crate::Options::reconnect),
/// the client is resuming its session: not known to be held) or `Lost`.
/// After a failover the guard is held again on the promoted replica with
/// the same [token](LockGuard::token) when the session is resumed in time.
pub struct LockGuard {
    client: Client,
    held: Held,
    hold: Arc<Hold>,
    lease_deadline: Option<Instant>,
}

impl LockGuard {
    fn acquired(client: &Client, held: Held, lease_deadline: Option<Instant>) -> LockGuard {
        let hold = held.hold.clone().unwrap_or_else(|| {
            let h = Hold::new(held.conn.clone(), held.name.clone(), held.token.clone());
            h.lose(None);
            h
        });
        LockGuard {
            client: client.clone(),
            held,
            hold,
            lease_deadline,
        }
    }

    /// The lock's key.
    pub fn name(&self) -> &[u8] {
        &self.held.name
    }

    /// The acquisition's fencing token: greater than every token the
    /// server gave before for any lock, across restarts. Send it with each
    /// write to the resource the lock guards, and have the resource refuse
    /// a token lower than the highest it has seen (or let the server
    /// check it: `TPCHECK name token` in the write's MULTI/EXEC or script).
    /// A resume after a failover keeps it.
    pub fn token(&self) -> u64 {
        self.held.fence
    }

    /// Unique per acquisition: the random value stored in the key (what
    /// TPRELEASE releases by).
    pub fn value(&self) -> &str {
        &self.held.token
    }

    /// Why the lock was lost, when a reason is known: the server's (`del`,
    /// `expired`, `flush`, ...: the event that ended it by another hand),
    /// or the resume's after a connection loss: `session ended` (the server
    /// ended the session: a connection reset without a failover, or the
    /// failover's grace ran out), `failover` (the session was resumed but
    /// the key was not in it). `None` while held or suspended, and for a
    /// lock lost with its connection when there was no session to resume,
    /// or to its lease.
    pub fn lost_reason(&self) -> Option<String> {
        self.held.lost_reason()
    }

    /// The client the lock was taken with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Where the lock stands:
    /// - [`LockState::Held`]: held, on a live connection the server has
    ///   been heard from within two thirds of the session timeout;
    /// - [`LockState::Suspended`]: its connection dropped, or the server
    ///   has been silent for two thirds of the session timeout, and the
    ///   client will try to resume the session ([`Options::reconnect`](crate::Options::reconnect)
    ///   on, the session's identity known): the lock may still be held
    ///   (a promoted replica keeps it for its grace) or may be lost. Act
    ///   as if it were not held until it is `Held` again;
    /// - [`LockState::Lost`]: for good (see [`LockGuard::lost`]).
    pub fn state(&self) -> LockState {
        if self.lease_deadline.is_some_and(|d| Instant::now() >= d) {
            return LockState::Lost;
        }
        match self.hold.state() {
            HoldState::Lost(_) => LockState::Lost,
            HoldState::Suspended => LockState::Suspended,
            HoldState::Held => match self.hold.conn() {
                Some(c) if c.silent() => LockState::Suspended,
                Some(_) => LockState::Held,
                None => LockState::Lost,
            },
        }
    }

    /// Whether [`state`](LockGuard::state) is `Held`: false while
    /// suspended and once lost.
    pub fn is_held(&self) -> bool {
        self.state() == LockState::Held
    }

    /// Resolves when the lock is lost for good: its connection dropped with
    /// no session to resume (no [`Options::reconnect`](crate::Options::reconnect),
    /// or the session's identity not learned yet), the resume after a
    /// reconnection did not bring it back, the lease ran out, or the
    /// server reported it LOST. A suspension does not resolve it, and
    /// neither does unlocking.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.hold.subscribe();
        let lease = self.lease_deadline;
        async move {
            let told = async move {
                let lost = rx
                    .wait_for(|s| matches!(s, HoldState::Lost(_)))
                    .await
                    .is_ok();
                if !lost {
                    // The hold is gone (its guard dropped): never lost now.
                    std::future::pending::<()>().await;
                }
            };
            let lease = async move {
                match lease {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = lease => {}
                _ = told => {}
            }
        }
    }

    /// Resolves once the guard is no longer suspended: held again, or lost.
    fn settled(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.hold.subscribe();
        async move {
            let _ = rx.wait_for(|s| *s != HoldState::Suspended).await;
        }
    }

    /// Releases with `TPRELEASE name value`. False if the lock was no
    /// longer ours: the key was deleted or taken over, or the connection
    /// is gone with no session to resume (the server released it then).
    /// A suspended guard waits (up to the request timeout) for the resume
    /// to settle, then releases on the new connection; a guard still
    /// suspended then is released by the resume, if one comes, and
    /// `unlock` fails with [`Error::Timeout`].
    pub async fn unlock(mut self) -> Result<bool> {
        self.held.armed = false;
        let rt = self.client.request_timeout();
        if self.hold.state() == HoldState::Suspended {
            let settled = self.settled();
            let settled = match rt {
                Some(d) => tokio::time::timeout(d, settled).await.is_ok(),
                None => {
                    settled.await;
                    true
                }
            };
            if !settled {
                self.hold.release(None);
                return Err(Error::Timeout);
            }
        }
        let (tx, rx) = oneshot::channel();
        if !self.hold.release(Some(tx)) {
            return Ok(false);
        }
        match wait(rx, rt).await {
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
            .field("token", &self.held.fence)
            .field("value", &self.held.token)
            .field("state", &self.state())
            .finish()
    }
}

impl Client {
    /// Starts acquiring the lock `name`; await the builder. Waits as long as
    /// it takes unless [`LockBuilder::timeout`] is set. Fails with
    /// `Disconnected` if the connection drops while waiting, except for a
    /// wait in the server's line (the default, [`LockBuilder::fair`]) with
    /// [`Options::reconnect`](crate::Options::reconnect) on and the
    /// session's identity learned: the place is carried to the next
    /// connection by the session's resume (`TPRESUME`), and the wait goes
    /// on there (the lock handed over, the place kept in the line, or, if
    /// the session no longer has it, queued again at the end). It fails
    /// with `Disconnected` if the resume is refused or reconnecting gives
    /// up.
    ///
    /// ```no_run
    /// # async fn demo(client: latchkey::Client) -> latchkey::Result<()> {
    /// let guard = client.lock("orders").await?;
    /// // ... only one holder at a time here ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl AsRef<[u8]>) -> LockBuilder {
        LockBuilder::new(self, bytes_of(name))
    }

    /// A read-write lock's reader side: shared with other readers, never
    /// with a writer ([`Client::write_lock`] of the same name). Waits in
    /// the server's line: a queued writer is not overtaken by later
    /// readers, and when it releases every reader queued behind it is
    /// granted at once. Released (`TPRELEASE`) like any guard.
    pub fn read_lock(&self, name: impl AsRef<[u8]>) -> LockBuilder {
        self.lock(name).mode(Mode::Shared)
    }

    /// A read-write lock's writer side: [`Client::lock`] of the same name,
    /// exclusive of readers and other writers.
    pub fn write_lock(&self, name: impl AsRef<[u8]>) -> LockBuilder {
        self.lock(name)
    }

    /// One of `permits` permits of the counting semaphore `name`, handed
    /// out first come first served; every user of the name must give the
    /// same `permits`.
    pub fn semaphore(&self, name: impl AsRef<[u8]>, permits: u32) -> LockBuilder {
        self.lock(name).mode(Mode::Permits(permits.max(1)))
    }

    /// A reentrant lock: the same owner (this value and its clones) may
    /// take it again while it holds it, and it is released when the last
    /// of its guards is dropped.
    pub fn reentrant_lock(&self, name: impl AsRef<[u8]>) -> ReentrantLock {
        ReentrantLock {
            inner: Arc::new(Reentrant {
                client: self.clone(),
                name: bytes_of(name),
                acquiring: tokio::sync::Mutex::new(()),
                held: parking_lot::Mutex::new(None),
            }),
        }
    }

    /// One `SETTP`: the guard if the lock was free, `None` otherwise.
    pub async fn try_lock(&self, name: impl AsRef<[u8]>) -> Result<Option<LockGuard>> {
        let conn = self.conn()?;
        let token = new_token();
        // A builder's defaults: exclusive, no lease.
        let lock = LockBuilder::new(self, bytes_of(name));
        match lock.attempt(&conn, &token).settp().await? {
            Some(held) => Ok(Some(LockGuard::acquired(self, held, None))),
            None => Ok(None),
        }
    }

    /// Like [`Client::lock`] but gives up with [`Error::LockTimeout`] after
    /// `wait`.
    ///
    /// ```no_run
    /// # async fn demo(client: latchkey::Client) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// use latchkey::Error;
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
    /// `f` cannot see the guard, so a lock lost while `f` runs (connection
    /// dropped, lease expired) does not stop it and `f`'s output is still
    /// returned. For long work, take [`Client::lock`] and race the work
    /// against [`LockGuard::lost`] instead.
    ///
    /// ```no_run
    /// # async fn demo(client: latchkey::Client) -> latchkey::Result<()> {
    /// let n: i64 = client
    ///     .with_lock("counter-lock", async {
    ///         let n = client.incr("counter").await?;
    ///         Ok::<_, latchkey::Error>(n)
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

struct Reentrant {
    client: Client,
    name: Bytes,
    /// Serialises first acquisitions.
    acquiring: tokio::sync::Mutex<()>,
    /// The server-side lock and how many guards share it.
    held: parking_lot::Mutex<Option<(LockGuard, usize)>>,
}

/// A lock the same owner may take again ([`Client::reentrant_lock`]).
#[derive(Clone)]
pub struct ReentrantLock {
    inner: Arc<Reentrant>,
}

impl ReentrantLock {
    /// Takes the lock, or takes it again if this owner holds it (a lost
    /// lock is taken anew; a suspended one is waited for: held again after
    /// a resume, or lost).
    pub async fn lock(&self) -> Result<ReentrantGuard> {
        if let Some(g) = self.again() {
            return Ok(g);
        }
        let _one = self.inner.acquiring.lock().await;
        let suspended = self
            .inner
            .held
            .lock()
            .as_ref()
            .filter(|(g, _)| g.state() == LockState::Suspended)
            .map(|(g, _)| g.settled());
        if let Some(settled) = suspended {
            settled.await;
        }
        if let Some(g) = self.again() {
            return Ok(g);
        }
        let guard = self.inner.client.lock(&self.inner.name).await?;
        *self.inner.held.lock() = Some((guard, 1));
        Ok(ReentrantGuard { lock: self.clone() })
    }

    fn again(&self) -> Option<ReentrantGuard> {
        let mut held = self.inner.held.lock();
        match held.as_mut() {
            Some((g, n)) if g.is_held() => {
                *n += 1;
                Some(ReentrantGuard { lock: self.clone() })
            }
            _ => None,
        }
    }

    /// Guards alive (0 when the lock is not held).
    pub fn count(&self) -> usize {
        self.inner.held.lock().as_ref().map_or(0, |(_, n)| *n)
    }

    /// The fencing token of the current acquisition.
    pub fn token(&self) -> Option<u64> {
        self.inner.held.lock().as_ref().map(|(g, _)| g.token())
    }

    /// Whether the server-side lock is held.
    pub fn is_held(&self) -> bool {
        self.inner
            .held
            .lock()
            .as_ref()
            .is_some_and(|(g, _)| g.is_held())
    }
}

/// One (re)entry of a [`ReentrantLock`]; the last one dropped releases it.
pub struct ReentrantGuard {
    lock: ReentrantLock,
}

impl Drop for ReentrantGuard {
    fn drop(&mut self) {
        let mut held = self.lock.inner.held.lock();
        let last = match held.as_mut() {
            Some((_, n)) => {
                *n -= 1;
                *n == 0
            }
            None => false,
        };
        if last {
            // Dropping the guard queues its release at once.
            held.take();
        }
    }
}
