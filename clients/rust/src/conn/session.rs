//! The client's lock session across connections: each hold a guard has
//! ([`Hold`]), each place a fair acquisition waits in ([`Place`]), the
//! session's identity (`TPSESSION ID`, learned after the first acquisition
//! or place in line on a connection when reconnecting is on), and the
//! resume after a failover (`TPRESUME <id>`, the first command on the new
//! connection).
//!
//! States, in the terms of Apache Curator's connection states:
//! - a connection drops while reconnecting is on and the session's identity
//!   is known: its holds are **suspended** (the session may live on, kept
//!   detached by a promoted replica), its places in lock lines are
//!   **carried** (their waiters keep waiting), and the client is
//!   [`SessionState::Suspended`];
//! - the next connection sends `TPRESUME <id>` before anything else. Its
//!   reply lists what the session still has, `[db, key, value, token]`
//!   each: a hold (`token` an integer) or a place still in line (`token`
//!   null). Each hold listed is held again, on the new connection, with
//!   its token ([`SessionState::Reconnected`]); every other one is
//!   **lost** (`failover`). Each place listed as a hold was handed over
//!   (the entry is its `ACQUIRED`: its waiter gets the lock, on the new
//!   connection, with that token); each listed as a place waits on, in
//!   the same position, for its `ACQUIRED` push on the new connection; one
//!   not listed was lost and its waiter queues again. What is listed and
//!   claimed by no guard or waiter is let go (`TPRELEASE`, `TPDEQUEUE`). A
//!   refusal (`ERR no such session to resume`: the server ended the
//!   session with the connection, or the grace ran out) loses them all
//!   (`session ended`, [`SessionState::Lost`]; waiters fail with
//!   `Disconnected`);
//! - without reconnecting, or without an identity yet, a dropped
//!   connection's holds are lost at once, as a closed connection's are on
//!   the server, and its waiters fail with `Disconnected`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{oneshot, watch};

use super::{send_discard, Conn, Slot};
use crate::cmd::cmd;
use crate::error::{Error, Result};
use crate::value::Value;

/// The client's lock session, as [`Client::session_state`](crate::Client::session_state)
/// reports it (Apache Curator's connection states).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Connected, on the session begun on this connection: the first
    /// connection, or a reconnection that had nothing to resume (no lock
    /// was held when the last one dropped).
    Connected,
    /// The connection dropped (or the server has been silent for two
    /// thirds of the session timeout) and the client is reconnecting: its
    /// guards are [suspended](crate::LockState::Suspended) until it knows
    /// whether the session lives on.
    Suspended,
    /// Reconnected and the session resumed (`TPRESUME`): guards whose key
    /// the server still holds are held again, with their tokens.
    Reconnected,
    /// The session ended and the locks held in it are lost: the connection
    /// dropped without reconnecting, reconnecting gave up, or the server
    /// refused the resume (it ended the session: a connection reset without
    /// a failover, or a grace that ran out). The client may already be
    /// connected again, on a new session; the state stays `Lost` until the
    /// next connection loss.
    Lost,
}

/// What a guard knows of its lock (see [`LockGuard::state`](crate::LockGuard::state)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockState {
    /// Held, on a live connection the server has been heard from within
    /// two thirds of the session timeout.
    Held,
    /// Not known to be held, not known to be lost: the connection dropped
    /// (or went silent) and the client is trying to resume the session.
    /// Do not act as the holder now; wait for `Held` (same token) or
    /// `Lost`.
    Suspended,
    /// Lost for good: released by the server, the session ended, the lease
    /// ran out, or not there after a failover.
    Lost,
}

/// One hold's state as the connection and the session see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HoldState {
    Held,
    Suspended,
    /// With the reason when one is known (the server's LOST reason,
    /// `failover`, `session ended`).
    Lost(Option<String>),
}

/// A lock this client holds (or held): shared by its guard, the connection
/// it is bound to (for LOST pushes and the connection's end) and, while
/// suspended, the session.
pub(crate) struct Hold {
    pub(crate) name: Bytes,
    /// The value in the key (what TPRELEASE releases by).
    pub(crate) value: String,
    /// The connection the hold is bound to now (another after a resume).
    conn: Mutex<Weak<Conn>>,
    state: watch::Sender<HoldState>,
    /// Its guard let it go (unlocked or dropped): a resume releases it.
    abandoned: AtomicBool,
}

impl Hold {
    pub(crate) fn new(conn: Weak<Conn>, name: Bytes, value: String) -> Arc<Hold> {
        Arc::new(Hold {
            name,
            value,
            conn: Mutex::new(conn),
            state: watch::channel(HoldState::Held).0,
            abandoned: AtomicBool::new(false),
        })
    }

    pub(crate) fn conn(&self) -> Option<Arc<Conn>> {
        self.conn.lock().upgrade()
    }

    pub(crate) fn state(&self) -> HoldState {
        self.state.borrow().clone()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<HoldState> {
        self.state.subscribe()
    }

    pub(crate) fn set(&self, s: HoldState) {
        self.state.send_replace(s);
    }

    /// Lost, with `reason`, unless it was lost already (the first reason
    /// stays).
    pub(crate) fn lose(&self, reason: Option<String>) {
        self.state.send_if_modified(|s| {
            if matches!(s, HoldState::Lost(_)) {
                return false;
            }
            *s = HoldState::Lost(reason);
            true
        });
    }

    fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::SeqCst)
    }

    /// `TPRELEASE name value` on the connection it is bound to now; the
    /// reply (if `reply`) says whether the server let go of something. The
    /// hold is abandoned first, so a hold suspended meanwhile is released
    /// by the resume instead. False if there is no connection to send on.
    pub(crate) fn release(self: &Arc<Self>, reply: Option<oneshot::Sender<Result<Value>>>) -> bool {
        self.abandoned.store(true, Ordering::SeqCst);
        let Some(c) = self.conn() else { return false };
        let me = self.clone();
        let weak = Arc::downgrade(&c);
        let hook = Box::new(move |r: Result<Value>| {
            // A connection that ended first parked the hold (still
            // tracked): the resume releases it.
            if !matches!(r, Err(Error::Disconnected)) {
                if let Some(c) = weak.upgrade() {
                    c.untrack(&me);
                }
            }
            if let Some(tx) = reply {
                let _ = tx.send(r);
            }
        });
        c.send(&self.release_cmd(), Slot::Hook(hook)).is_ok()
    }

    fn release_cmd(&self) -> crate::cmd::Cmd {
        cmd("TPRELEASE").arg(&self.name).arg(self.value.as_str())
    }
}

/// What became of a place in a lock's line, for its waiter.
pub(crate) enum PlaceEnd {
    /// Handed over with this fencing token (an `ACQUIRED` push, or the
    /// place listed as a hold by a resume), on the connection the place is
    /// on now.
    Granted(i64),
    /// Not in the session the resume found: the place was lost with the
    /// old connection (its waiter queues again, on the new one).
    Dropped,
    /// The wait cannot go on: its connection ended with no session to
    /// carry it, or the resume was refused or failed, or reconnecting gave
    /// up.
    Failed(Error),
}

/// A place's waiter: told once what became of the place, with the
/// connection the place was on then (on the reader task when it is a
/// hand-off, before any frame that follows).
pub(crate) type PlaceHook = Box<dyn FnOnce(Weak<Conn>, PlaceEnd) + Send>;

/// A place in the server's line for a lock (`SETTP ... QUEUE` answered
/// 0): shared by its waiter, the connection it waits on (its `grants`,
/// where an `ACQUIRED` push finds it) and, while the connection is down,
/// the session, which carries it to the next connection.
///
/// Lock order: a place's lock before its connection's queue, the queue
/// before the session's parked state; the waiter's hook never runs under
/// any of them.
pub(crate) struct Place {
    pub(crate) name: Bytes,
    /// The value it asked to set (what the hand-off names it by).
    pub(crate) value: Bytes,
    inner: Mutex<PlaceInner>,
}

struct PlaceInner {
    /// The connection it waits on now (another after a resume).
    conn: Weak<Conn>,
    /// Its waiter gave up (timeout, cancellation): nothing may register
    /// it any more, and a resume lets it go.
    cancelled: bool,
    /// Its waiter, until told (a hand-off told to a waiter that gave up
    /// is released as its receiver is gone).
    hook: Option<PlaceHook>,
}

impl Place {
    pub(crate) fn new(conn: Weak<Conn>, name: Bytes, value: Bytes, hook: PlaceHook) -> Arc<Place> {
        Arc::new(Place {
            name,
            value,
            inner: Mutex::new(PlaceInner {
                conn,
                cancelled: false,
                hook: Some(hook),
            }),
        })
    }

    /// Tells the waiter (once).
    pub(crate) fn end(&self, end: PlaceEnd) {
        let (hook, conn) = {
            let mut i = self.inner.lock();
            (i.hook.take(), i.conn.clone())
        };
        if let Some(h) = hook {
            h(conn, end);
        }
    }

    /// Waits on `conn` for the hand-off (`ACQUIRED`), unless the waiter
    /// gave up meanwhile; a connection that ended already carries it or
    /// fails it as it did its other places.
    pub(crate) fn wait_on(self: &Arc<Self>, conn: &Arc<Conn>) {
        let failed = {
            let mut i = self.inner.lock();
            if i.cancelled {
                return;
            }
            i.conn = Arc::downgrade(conn);
            conn.add_grant(self.clone())
        };
        fail_all(failed);
    }

    /// The waiter gives up: no longer registered, and `TPDEQUEUE name
    /// value` on the connection it waits on now (settling the attempt
    /// there once answered). A place carried by the session meanwhile is
    /// let go by the resume. The hook stays: a hand-off the reader task
    /// took just before still reaches it, and the lock, armed, is released
    /// when the waiter's receiver turns out to be gone.
    pub(crate) fn cancel(&self) {
        let conn = {
            let mut i = self.inner.lock();
            i.cancelled = true;
            let conn = i.conn.upgrade();
            if let Some(c) = &conn {
                c.remove_grant(&self.value);
            }
            conn
        };
        let Some(c) = conn else { return };
        let (weak, value) = (Arc::downgrade(&c), self.value.clone());
        let settle = Box::new(move |_: Result<Value>| {
            if let Some(c) = weak.upgrade() {
                c.attempt_settled(&value);
            }
        });
        let _ = c.send(
            &cmd("TPDEQUEUE").arg(&self.name).arg(&self.value),
            Slot::Hook(settle),
        );
    }

    /// A resume on `conn` (on its reader task) found the place `listed`
    /// so: a hold (its hand-off, told to the waiter now), a place (it waits
    /// on `conn`, registered before any frame that follows the reply), or
    /// nothing (lost: the waiter queues again). True if the place claims
    /// the entry; false for a waiter that gave up (the resume lets the
    /// entry go).
    fn carry(self: &Arc<Self>, conn: &Arc<Conn>, listed: Option<Listed>) -> bool {
        let mut i = self.inner.lock();
        if i.cancelled || i.hook.is_none() {
            return false;
        }
        i.conn = Arc::downgrade(conn);
        let end = match listed {
            Some(Listed::Queued) => {
                conn.attempt_started(&self.name, &self.value);
                let failed = conn.add_grant(self.clone());
                drop(i);
                fail_all(failed);
                return true;
            }
            Some(Listed::Held(Some(token))) => PlaceEnd::Granted(token),
            // A hold without its token (a server from before tokens were
            // listed) cannot fence: let it go and queue again.
            Some(Listed::Held(None)) | None => PlaceEnd::Dropped,
        };
        let claimed = matches!(end, PlaceEnd::Granted(_));
        let hook = i.hook.take();
        drop(i);
        if let Some(h) = hook {
            h(Arc::downgrade(conn), end);
        }
        claimed
    }
}

/// Fails the waiters of `places` with `Disconnected` (never under a
/// connection's or the session's lock).
pub(crate) fn fail_all(places: Vec<Arc<Place>>) {
    for p in places {
        p.end(PlaceEnd::Failed(Error::Disconnected));
    }
}

/// One entry of TPRESUME's reply, by its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listed {
    /// A hold, with its fencing token (none from a server that listed
    /// `[db, key, value]` triples).
    Held(Option<i64>),
    /// A place still waiting in the key's line (a null token).
    Queued,
}

/// Holds and places in lines of a dropped connection, waiting for the next
/// one to resume their session.
struct Parked {
    sid: String,
    holds: Vec<Arc<Hold>>,
    /// Places whose waiters wait on for the resume's outcome.
    places: Vec<Arc<Place>>,
    /// Acquisitions the dropped connection never learned the outcome of
    /// (name, value): the server may hold them for the session, so the
    /// session is resumed for them too (with no guard parked), and the
    /// resume releases every hold no guard claims.
    stale: Vec<(Bytes, Bytes)>,
}

/// The lock session of one client, across its connections.
pub(crate) struct Session {
    /// Reconnecting is on: a dropped connection's holds can be resumed.
    resumable: bool,
    /// The database the client works in (its holds' keys are there).
    db: i64,
    state: watch::Sender<SessionState>,
    parked: Mutex<Option<Parked>>,
    /// Holds were lost with a connection (no identity known yet): the next
    /// connection reports `Lost`, not `Connected`.
    lost_some: AtomicBool,
}

impl Session {
    pub(crate) fn new(resumable: bool, db: i64) -> Session {
        Session {
            resumable,
            db,
            state: watch::channel(SessionState::Connected).0,
            parked: Mutex::new(None),
            lost_some: AtomicBool::new(false),
        }
    }

    pub(crate) fn resumable(&self) -> bool {
        self.resumable
    }

    pub(crate) fn state(&self) -> SessionState {
        *self.state.borrow()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<SessionState> {
        self.state.subscribe()
    }

    fn set(&self, s: SessionState) {
        self.state.send_replace(s);
    }

    /// A connection ended holding `holds` and waiting in lines (`places`),
    /// its session named `sid` (if it learned it): suspended and parked
    /// (the places carried) for the next connection to resume, or lost at
    /// once. Called under the connection's lock, so whoever sees it closed
    /// sees its holds' new state. Returns the places whose waiters must be
    /// failed (outside the lock): these, when not carried, and those of an
    /// older session given up.
    #[must_use]
    pub(crate) fn orphaned(
        &self,
        sid: Option<String>,
        holds: Vec<Arc<Hold>>,
        stale: Vec<(Bytes, Bytes)>,
        places: Vec<Arc<Place>>,
    ) -> Vec<Arc<Place>> {
        if holds.is_empty() && stale.is_empty() && places.is_empty() {
            return Vec::new();
        }
        let Some(sid) = sid.filter(|_| self.resumable) else {
            if !holds.is_empty() {
                self.lost_some.store(true, Ordering::SeqCst);
            }
            for h in holds {
                h.lose(None);
            }
            return places;
        };
        for h in &holds {
            h.set(HoldState::Suspended);
        }
        self.park(Parked {
            sid,
            holds,
            places,
            stale,
        })
    }

    /// Parks `p` for the next connection; returns the places of an older
    /// session given up for it (to fail outside the lock).
    #[must_use]
    fn park(&self, p: Parked) -> Vec<Arc<Place>> {
        let mut parked = self.parked.lock();
        match parked.as_mut() {
            Some(old) if old.sid == p.sid => {
                old.holds.extend(p.holds);
                old.places.extend(p.places);
                old.stale.extend(p.stale);
                Vec::new()
            }
            _ => {
                // Only one session can be resumed on a connection: an older
                // one still waiting is given up.
                match parked.replace(p) {
                    Some(old) => {
                        lose_all(old.holds, "session ended");
                        old.places
                    }
                    None => Vec::new(),
                }
            }
        }
    }

    /// The connection dropped and the client reconnects.
    pub(crate) fn suspended(&self) {
        self.set(SessionState::Suspended);
    }

    /// No connection will come back (reconnect off or given up, client
    /// closed): every parked hold is lost, every carried place's waiter
    /// fails.
    pub(crate) fn give_up(&self) {
        let parked = self.parked.lock().take();
        if let Some(p) = parked {
            for h in p.holds {
                h.lose(None);
            }
            fail_all(p.places);
        }
        self.set(SessionState::Lost);
    }

    /// `conn` is the new live connection, not yet handed to anyone: when a
    /// session is parked, its `TPRESUME` goes first, so no acquisition on
    /// this connection can come before it.
    pub(crate) fn resume_on(self: &Arc<Self>, conn: &Arc<Conn>) {
        let Some(p) = self.parked.lock().take() else {
            let lost = self.lost_some.swap(false, Ordering::SeqCst);
            self.set(if lost {
                SessionState::Lost
            } else {
                SessionState::Connected
            });
            return;
        };
        let c = cmd("TPRESUME").arg(p.sid.as_str());
        let (session, weak) = (Arc::downgrade(self), Arc::downgrade(conn));
        let slot = Slot::Hook(Box::new(move |r: Result<Value>| match session.upgrade() {
            Some(s) => s.resumed(weak, p, r),
            None => {
                lose_all(p.holds, "session ended");
                fail_all(p.places);
            }
        }));
        if let Err(Slot::Hook(h)) = conn.send(&c, slot) {
            h(Err(Error::Disconnected));
        }
    }

    /// TPRESUME's reply (on the reader task, before anything that follows).
    fn resumed(&self, conn: Weak<Conn>, p: Parked, r: Result<Value>) {
        let conn = conn.upgrade();
        let entries = match r {
            Ok(Value::Array(entries)) => entries,
            // The new connection went too: try again on the next one.
            Err(Error::Disconnected) => return fail_all(self.park(p)),
            // A node demoted under us (found through Sentinel): that
            // connection ends, and the next one finds the master.
            Err(Error::Server(e))
                if e.starts_with("READONLY") && conn.as_ref().is_some_and(|c| c.managed) =>
            {
                return fail_all(self.park(p))
            }
            Err(Error::Server(e)) if e.starts_with("ERR no such session") => {
                return self.ended(p, "session ended");
            }
            other => {
                let why = match other {
                    Err(e) => format!("resume failed: {e}"),
                    Ok(v) => format!("resume failed: TPRESUME replied {}", v.kind()),
                };
                return self.ended(p, &why);
            }
        };
        // Each hold (with its token) and place in line the session still
        // has, by key and value.
        let kept: HashMap<(&[u8], &[u8]), Listed> = entries
            .iter()
            .filter_map(|entry| match entry {
                Value::Array(e) => {
                    let (db, key, value, token) = match &e[..] {
                        [Value::Int(db), key, value] => (*db, key, value, None),
                        [Value::Int(db), key, value, token] => (*db, key, value, Some(token)),
                        _ => return None,
                    };
                    let listed = match token {
                        None => Listed::Held(None),
                        Some(Value::Int(t)) => Listed::Held(Some(*t)),
                        Some(Value::Nil) => Listed::Queued,
                        Some(_) => return None,
                    };
                    (db == self.db).then_some(((key.as_bytes()?, value.as_bytes()?), listed))
                }
                _ => None,
            })
            .collect();
        let Some(conn) = conn else {
            lose_all(p.holds, "session ended");
            return fail_all(p.places);
        };
        conn.resumed_as(p.sid);
        // The entries a guard or a waiter takes back (key, value).
        let mut claimed: HashSet<(Bytes, Bytes)> = HashSet::new();
        let had_holds = !p.holds.is_empty();
        for h in p.holds {
            let listed = matches!(
                kept.get(&(&h.name[..], h.value.as_bytes())),
                Some(Listed::Held(_))
            );
            if listed {
                claimed.insert((h.name.clone(), Bytes::from(h.value.clone())));
            }
            if h.abandoned() {
                if listed {
                    send_discard(&conn, &h.release_cmd());
                }
                h.lose(None);
            } else if listed {
                *h.conn.lock() = Arc::downgrade(&conn);
                // Held again, unless this connection ended meanwhile (it
                // parks the hold then, for the next one).
                conn.track(h);
            } else {
                h.lose(Some("failover".into()));
            }
        }
        // Places: handed over, waiting on here (registered now, before the
        // hand-off's push can be read), or lost (queued again).
        for place in p.places {
            let listed = kept.get(&(&place.name[..], &place.value[..])).copied();
            if place.carry(&conn, listed) {
                claimed.insert((place.name.clone(), place.value.clone()));
            }
        }
        // What the server kept that nobody claims (released on the old
        // primary after the cut, a reply or a hand-off lost with the
        // connection, a wait given up meanwhile): let it go.
        for (&(name, value), listed) in &kept {
            if claimed.contains(&(Bytes::copy_from_slice(name), Bytes::copy_from_slice(value))) {
                continue;
            }
            let c = match listed {
                Listed::Held(_) => "TPRELEASE",
                Listed::Queued => "TPDEQUEUE",
            };
            send_discard(&conn, &cmd(c).arg(name).arg(value));
        }
        // A resume for stale acquisitions or places alone resumed no lock.
        self.set(if had_holds {
            SessionState::Reconnected
        } else {
            SessionState::Connected
        });
    }

    /// The resume was refused or failed: the holds parked are lost (the
    /// session is `Lost`), the places' waiters fail; with no hold (only
    /// stale acquisitions or places), no lock was lost.
    fn ended(&self, p: Parked, why: &str) {
        let lost = !p.holds.is_empty();
        lose_all(p.holds, why);
        fail_all(p.places);
        self.set(if lost {
            SessionState::Lost
        } else {
            SessionState::Connected
        });
    }
}

fn lose_all(holds: Vec<Arc<Hold>>, why: &str) {
    for h in holds {
        h.lose(Some(why.to_string()));
    }
}

#[cfg(test)]
mod tests {
    //! The protocol sequence against a fake server: identity learned once
    //! after the first acquisition (or place in line), holds suspended and
    //! places carried when the connection drops, `TPRESUME` first on the
    //! next connection, each guard held again or lost and each place
    //! handed over, kept or queued again by the reply, refusals, and a
    //! silent server.
    use std::net::SocketAddr;
    use std::sync::atomic::AtomicI64;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio::task::AbortHandle;

    use super::*;
    use crate::{Backoff, Client, Options};

    const SID: &str = "0123456789abcdef0123456789abcdef";

    /// What the fake server saw: (connection number, command words).
    type Log = Arc<Mutex<Vec<(usize, Vec<String>)>>>;

    struct Fake {
        addr: SocketAddr,
        log: Log,
        /// TPRESUME's reply, as RESP bytes.
        resume_reply: Arc<Mutex<Vec<u8>>>,
        /// Written right after TPRESUME's reply, in the same write (a
        /// hand-off's push following the resume at once).
        after_resume: Arc<Mutex<Vec<u8>>>,
        /// Bytes written to every open connection (pushes).
        inject: tokio::sync::broadcast::Sender<Vec<u8>>,
        /// Stop answering (the connection stays open).
        mute: Arc<AtomicBool>,
        /// While false, TPRESUME's reply waits.
        resume_gate: watch::Sender<bool>,
        /// Bumped to drop every open connection.
        kick: watch::Sender<u64>,
        task: AbortHandle,
    }

    impl Drop for Fake {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    /// One RESP array of bulk strings from `buf`, and its length.
    fn parse(buf: &[u8]) -> Option<(Vec<String>, usize)> {
        fn line(b: &[u8], at: usize) -> Option<(&[u8], usize)> {
            let end = b[at..].windows(2).position(|w| w == b"\r\n")? + at;
            Some((&b[at..end], end + 2))
        }
        let num = |s: &[u8]| std::str::from_utf8(s).ok()?.parse::<usize>().ok();
        let (head, mut at) = line(buf, 0)?;
        let n = num(head.strip_prefix(b"*")?)?;
        let mut words = Vec::with_capacity(n);
        for _ in 0..n {
            let (len, next) = line(buf, at)?;
            let len = num(len.strip_prefix(b"$")?)?;
            if buf.len() < next + len + 2 {
                return None;
            }
            words.push(String::from_utf8_lossy(&buf[next..next + len]).into_owned());
            at = next + len + 2;
        }
        Some((words, at))
    }

    impl Fake {
        async fn start() -> Fake {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let log: Log = Arc::default();
            let resume_reply = Arc::new(Mutex::new(b"*0\r\n".to_vec()));
            let after_resume = Arc::new(Mutex::new(Vec::new()));
            let inject = tokio::sync::broadcast::channel::<Vec<u8>>(16).0;
            let mute = Arc::new(AtomicBool::new(false));
            let kick = watch::channel(0u64).0;
            let resume_gate = watch::channel(true).0;
            let (l, r, m, k) = (
                log.clone(),
                resume_reply.clone(),
                mute.clone(),
                kick.clone(),
            );
            let gate = resume_gate.clone();
            let (after, pushes) = (after_resume.clone(), inject.clone());
            let task = tokio::spawn(async move {
                let token = Arc::new(AtomicI64::new(100));
                for n in 0.. {
                    let Ok((mut sock, _)) = listener.accept().await else {
                        return;
                    };
                    let (l, r, m, token) = (l.clone(), r.clone(), m.clone(), token.clone());
                    let after = after.clone();
                    let mut pushes = pushes.subscribe();
                    let mut kicked = k.subscribe();
                    let mut gate = gate.subscribe();
                    tokio::spawn(async move {
                        let mut buf = Vec::new();
                        let mut chunk = [0u8; 4096];
                        loop {
                            let got = tokio::select! {
                                r = sock.read(&mut chunk) => r,
                                _ = kicked.changed() => return,
                                p = pushes.recv() => {
                                    let Ok(p) = p else { return };
                                    if sock.write_all(&p).await.is_err() {
                                        return;
                                    }
                                    continue;
                                }
                            };
                            match got {
                                Ok(0) | Err(_) => return,
                                Ok(k) => buf.extend_from_slice(&chunk[..k]),
                            }
                            while let Some((words, used)) = parse(&buf) {
                                buf.drain(..used);
                                let w = |i: usize| words.get(i).map(|s| s.to_ascii_uppercase());
                                l.lock().push((n, words.clone()));
                                let reply = match (w(0).as_deref(), w(1).as_deref()) {
                                    (Some("TPSESSION"), Some("ID")) => {
                                        format!("$32\r\n{SID}\r\n").into_bytes()
                                    }
                                    // Its reply is lost with the connection.
                                    (Some("SETTP"), Some("UNANSWERED")) => continue,
                                    // A taken lock: a place in its line.
                                    (Some("SETTP"), Some(k)) if k.starts_with("LINE") => {
                                        b":0\r\n".to_vec()
                                    }
                                    (Some("SETTP"), _) => {
                                        let t = token.fetch_add(1, Ordering::SeqCst);
                                        format!(":{t}\r\n").into_bytes()
                                    }
                                    (Some("TPRESUME"), _) => {
                                        let open = gate.wait_for(|open| *open);
                                        if open.await.is_err() {
                                            return;
                                        }
                                        let mut reply = r.lock().clone();
                                        reply.extend_from_slice(&after.lock());
                                        reply
                                    }
                                    (Some("TPRELEASE" | "TPDEQUEUE"), _) => b":1\r\n".to_vec(),
                                    (Some("PING"), _) => b"+PONG\r\n".to_vec(),
                                    _ => b"+OK\r\n".to_vec(),
                                };
                                if m.load(Ordering::SeqCst) {
                                    continue;
                                }
                                if sock.write_all(&reply).await.is_err() {
                                    return;
                                }
                            }
                        }
                    });
                }
            });
            Fake {
                addr,
                log,
                resume_reply,
                after_resume,
                inject,
                mute,
                resume_gate,
                kick,
                task: task.abort_handle(),
            }
        }

        fn url(&self) -> String {
            format!("redis://{}", self.addr)
        }

        fn drop_connections(&self) {
            self.kick.send_modify(|g| *g += 1);
        }

        /// The commands of connection `n` (their first two words).
        fn commands(&self, n: usize) -> Vec<String> {
            self.log
                .lock()
                .iter()
                .filter(|(c, _)| *c == n)
                .map(|(_, w)| w.iter().take(2).cloned().collect::<Vec<_>>().join(" "))
                .collect()
        }

        fn count(&self, what: &str) -> usize {
            let all = self.log.lock().clone();
            all.iter()
                .filter(|(_, w)| w.iter().take(2).cloned().collect::<Vec<_>>().join(" ") == what)
                .count()
        }
    }

    fn reconnecting(session_timeout: Option<Duration>) -> Options {
        Options {
            reconnect: Some(Backoff {
                initial: Duration::from_millis(10),
                max: Duration::from_millis(50),
                max_attempts: Some(200),
            }),
            session_timeout,
            connect_timeout: Duration::from_secs(2),
            request_timeout: Some(Duration::from_secs(2)),
            ..Options::default()
        }
    }

    /// A TPRESUME reply naming `holds` (key, value) in database 0, each
    /// with a token.
    fn resume_of(holds: &[(&str, &str)]) -> Vec<u8> {
        let entries: Vec<_> = holds.iter().map(|(k, v)| (*k, *v, Some(7))).collect();
        resume_with(&entries)
    }

    /// A TPRESUME reply naming (key, value, token) in database 0: a hold
    /// with its token, or a place in line (no token: null).
    fn resume_with(entries: &[(&str, &str, Option<i64>)]) -> Vec<u8> {
        let mut r = format!("*{}\r\n", entries.len());
        for (k, v, t) in entries {
            let token = match t {
                Some(t) => format!(":{t}\r\n"),
                None => "_\r\n".to_string(),
            };
            r.push_str(&format!(
                "*4\r\n:0\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n{token}",
                k.len(),
                v.len()
            ));
        }
        r.into_bytes()
    }

    /// The server's hand-off push: `settp key ACQUIRED value token`.
    fn acquired(key: &str, value: &str, token: i64) -> Vec<u8> {
        let t = token.to_string();
        format!(
            ">5\r\n$5\r\nsettp\r\n${}\r\n{key}\r\n$8\r\nACQUIRED\r\n${}\r\n{value}\r\n${}\r\n{t}\r\n",
            key.len(),
            value.len(),
            t.len()
        )
        .into_bytes()
    }

    /// The value of the `n`th SETTP of `key` the fake saw.
    fn settp_value(fake: &Fake, key: &str, n: usize) -> Option<String> {
        fake.log
            .lock()
            .iter()
            .filter(|(_, w)| w[0] == "SETTP" && w[1] == key)
            .nth(n)
            .map(|(_, w)| w[2].clone())
    }

    /// Polls `f` every 5 ms until it holds, for at most 5 s.
    async fn until(what: &str, mut f: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !f() {
            assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// A client of `fake` holding `a`, the session's identity learned.
    async fn holding_a(fake: &Fake, opts: Options) -> (Client, crate::LockGuard) {
        let c = Client::connect_with(&fake.url(), opts).await.unwrap();
        let a = c.lock("a").await.unwrap();
        until("the identity learned", || fake.count("TPSESSION ID") == 1).await;
        (c, a)
    }

    async fn bounded<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(5), f)
            .await
            .expect("bounded wait")
    }

    #[tokio::test]
    async fn suspended_then_resumed_or_lost_by_the_reply() {
        let fake = Fake::start().await;
        let (c, a) = holding_a(&fake, reconnecting(None)).await;
        let b = c.try_lock("b").await.unwrap().unwrap();
        let gone = c.lock("gone").await.unwrap();
        // Asked once, after the first acquisition.
        let first = fake.commands(0);
        let settp = first.iter().position(|w| w == "SETTP a").unwrap();
        let id = first.iter().position(|w| w == "TPSESSION ID").unwrap();
        assert!(settp < id, "{first:?}");
        let (ta, tb) = (a.token(), b.token());
        assert_eq!(c.session_state(), SessionState::Connected);
        assert_eq!(a.state(), LockState::Held);
        // Dropped while suspended: released by the resume.
        let dropped = c.lock("dropped").await.unwrap();
        let dropped_value = dropped.value().to_string();
        *fake.resume_reply.lock() = resume_of(&[
            ("a", a.value()),
            ("b", b.value()),
            ("dropped", &dropped_value),
        ]);
        // TPRESUME's reply waits until the suspended state is checked.
        fake.resume_gate.send_replace(false);
        fake.drop_connections();
        until("suspended", || c.session_state() == SessionState::Suspended).await;
        for g in [&a, &b, &gone] {
            assert_eq!(g.state(), LockState::Suspended);
            assert!(!g.is_held());
        }
        until("the resume sent", || {
            fake.commands(1).iter().any(|w| w.starts_with("TPRESUME"))
        })
        .await;
        assert!(c.is_connected());
        // Still suspended: not lost, not held.
        assert!(tokio::time::timeout(Duration::from_millis(100), a.lost())
            .await
            .is_err());
        assert_eq!(a.state(), LockState::Suspended);
        drop(dropped);
        fake.resume_gate.send_replace(true);
        bounded(gone.lost()).await;
        until("reconnected", || {
            c.session_state() == SessionState::Reconnected
        })
        .await;
        // TPRESUME is the first command after the handshake.
        let second = fake.commands(1);
        let resume = second
            .iter()
            .position(|w| w.starts_with("TPRESUME"))
            .unwrap();
        assert_eq!(second[resume], format!("TPRESUME {SID}"));
        assert!(
            second[..resume].iter().all(|w| w.starts_with("HELLO")),
            "{second:?}"
        );
        assert_eq!(a.state(), LockState::Held);
        assert_eq!(b.state(), LockState::Held);
        assert_eq!((a.token(), b.token()), (ta, tb));
        assert_eq!(gone.state(), LockState::Lost);
        assert_eq!(gone.lost_reason().as_deref(), Some("failover"));
        until("the dropped guard released", || {
            fake.log.lock().iter().any(|(n, w)| {
                *n == 1 && w[0] == "TPRELEASE" && w[1] == "dropped" && w[2] == dropped_value
            })
        })
        .await;
        // Released on the new connection.
        assert!(a.unlock().await.unwrap());
        assert!(fake.commands(1).iter().any(|w| w == "TPRELEASE a"));
        // No second identity query: the resume kept the identity.
        let _ = c.lock("again").await.unwrap();
        assert_eq!(fake.count("TPSESSION ID"), 1);
        drop(b);
    }

    /// A SETTP whose reply is lost with the connection may have taken the
    /// lock for the session (or a hand-off made before a failover, never
    /// told; or a lock released on an old primary after it was cut off):
    /// the resume releases every hold no guard claims, by its value, so
    /// nobody waits on a lock no guard holds. With no guard held, the
    /// resume is for that alone and the session is `Connected` after it.
    #[tokio::test]
    async fn an_unanswered_acquisition_is_released_by_the_resume() {
        let fake = Fake::start().await;
        let (c, a) = holding_a(&fake, reconnecting(None)).await;
        let released = |fake: &Fake, conn: usize, key: &str, value: &str| {
            fake.log
                .lock()
                .iter()
                .any(|(k, w)| *k == conn && w[0] == "TPRELEASE" && w[1] == key && w[2] == value)
        };
        // `lock("unanswered")` for the `n`th time: its SETTP goes out, the
        // connection drops before a reply, the resume names the holds
        // `also` and the unanswered one. Returns its value.
        let lost_reply = |n: usize, also: Vec<(&'static str, String)>| {
            let (c, fake) = (c.clone(), &fake);
            async move {
                let attempt = tokio::spawn({
                    let c = c.clone();
                    async move { c.lock("unanswered").await.map(|_| ()) }
                });
                until("the SETTP sent", || {
                    settp_value(fake, "unanswered", n).is_some()
                })
                .await;
                let value = settp_value(fake, "unanswered", n).unwrap();
                let mut holds: Vec<(&str, &str)> =
                    also.iter().map(|(k, v)| (*k, v.as_str())).collect();
                holds.push(("unanswered", &value));
                *fake.resume_reply.lock() = resume_of(&holds);
                fake.drop_connections();
                assert!(bounded(attempt).await.unwrap().is_err());
                value
            }
        };
        let value = lost_reply(0, vec![("a", a.value().to_string())]).await;
        until("reconnected", || {
            c.session_state() == SessionState::Reconnected
        })
        .await;
        until("released", || released(&fake, 1, "unanswered", &value)).await;
        assert_eq!(a.state(), LockState::Held);
        // No guard held: the resume is for the lost reply alone.
        assert!(a.unlock().await.unwrap());
        let value = lost_reply(1, vec![]).await;
        until("released again", || {
            released(&fake, 2, "unanswered", &value)
        })
        .await;
        until("connected", || c.session_state() == SessionState::Connected).await;
        assert!(fake.commands(2).iter().any(|w| w.starts_with("TPRESUME")));
        // A lock released on the old primary after it was cut off comes
        // back with the session (the release never reached the replica):
        // no guard claims its value, so it is released again.
        let x = c.lock("x").await.unwrap();
        let x_value = x.value().to_string();
        assert!(x.unlock().await.unwrap());
        let value = lost_reply(2, vec![("x", x_value.clone())]).await;
        until("both released", || {
            released(&fake, 3, "unanswered", &value) && released(&fake, 3, "x", &x_value)
        })
        .await;
    }

    #[tokio::test]
    async fn a_reentrant_lock_waits_for_the_resume_then_enters_again() {
        let fake = Fake::start().await;
        let c = Client::connect_with(&fake.url(), reconnecting(None))
            .await
            .unwrap();
        let re = c.reentrant_lock("a");
        let first = re.lock().await.unwrap();
        until("the identity learned", || fake.count("TPSESSION ID") == 1).await;
        let value = settp_value(&fake, "a", 0).unwrap();
        *fake.resume_reply.lock() = resume_of(&[("a", &value)]);
        fake.resume_gate.send_replace(false);
        fake.drop_connections();
        until("suspended", || c.session_state() == SessionState::Suspended).await;
        assert!(!re.is_held());
        let again = tokio::spawn({
            let re = re.clone();
            async move { re.lock().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!again.is_finished(), "entered while suspended");
        fake.resume_gate.send_replace(true);
        let second = bounded(again).await.unwrap().unwrap();
        // The same server-side lock, entered again: no second SETTP.
        assert_eq!(re.count(), 2);
        assert!(re.is_held());
        assert_eq!(fake.count("SETTP a"), 1);
        drop((first, second));
    }

    #[tokio::test]
    async fn a_refused_resume_loses_every_guard() {
        let fake = Fake::start().await;
        let (c, a) = holding_a(&fake, reconnecting(None)).await;
        let mut states = c.session_changes();
        *fake.resume_reply.lock() = b"-ERR no such session to resume\r\n".to_vec();
        fake.drop_connections();
        bounded(a.lost()).await;
        assert_eq!(a.lost_reason().as_deref(), Some("session ended"));
        assert!(!a.is_held());
        until("lost", || c.session_state() == SessionState::Lost).await;
        assert!(states.has_changed().unwrap());
        assert_eq!(*states.borrow_and_update(), SessionState::Lost);
        // A new lock on the new connection learns the new session's
        // identity.
        let _n = c.lock("n").await.unwrap();
        until("asked again", || fake.count("TPSESSION ID") == 2).await;
        assert!(!a.unlock().await.unwrap());
    }

    #[tokio::test]
    async fn without_reconnect_a_drop_loses_at_once_and_no_identity_is_asked() {
        let fake = Fake::start().await;
        let opts = Options {
            session_timeout: None,
            ..Options::default()
        };
        let c = Client::connect_with(&fake.url(), opts).await.unwrap();
        let a = c.lock("a").await.unwrap();
        fake.drop_connections();
        bounded(a.lost()).await;
        assert_eq!(a.state(), LockState::Lost);
        assert_eq!(a.lost_reason(), None);
        assert_eq!(c.session_state(), SessionState::Lost);
        assert_eq!(fake.count("TPSESSION ID"), 0);
    }

    #[tokio::test]
    async fn a_silent_server_suspends_the_guards_then_the_connection_goes() {
        let fake = Fake::start().await;
        let session = Duration::from_millis(600);
        let (c, a) = holding_a(&fake, reconnecting(Some(session))).await;
        *fake.resume_reply.lock() = resume_of(&[("a", a.value())]);
        let muted = tokio::time::Instant::now();
        fake.mute.store(true, Ordering::SeqCst);
        // Two thirds of the session timeout (400 ms) without a byte: not
        // held any more, though the connection is still up.
        until("suspended", || a.state() == LockState::Suspended).await;
        let after = muted.elapsed();
        assert!(after >= Duration::from_millis(350), "{after:?}");
        assert!(!a.is_held());
        fake.mute.store(false, Ordering::SeqCst);
        // The heartbeat dropped it, the next connection resumes.
        until("held again", || a.state() == LockState::Held).await;
        assert_eq!(c.session_state(), SessionState::Reconnected);
        assert!(c.connection_generation() >= 2);
        assert!(fake.count(&format!("TPRESUME {SID}")) >= 1);
    }

    /// Whether connection `conn` got `what key value` (e.g. `TPRELEASE`).
    fn sent(fake: &Fake, conn: usize, what: &str, key: &str, value: &str) -> bool {
        fake.log
            .lock()
            .iter()
            .any(|(n, w)| *n == conn && w[0] == what && w[1] == key && w[2] == value)
    }

    /// A reconnecting client of `fake` waiting in the line of `key` (the
    /// fake answers 0 to `SETTP line...`), given up after `wait`; with the
    /// value it queued with, once the session's identity is known.
    async fn waiting_in_line(
        fake: &Fake,
        key: &'static str,
        wait: Duration,
    ) -> (
        Client,
        tokio::task::JoinHandle<crate::Result<crate::LockGuard>>,
        String,
    ) {
        let c = Client::connect_with(&fake.url(), reconnecting(None))
            .await
            .unwrap();
        let waiter = tokio::spawn({
            let c = c.clone();
            async move { c.lock(key).timeout(wait).await }
        });
        // A connection that only waits learns its session's identity too.
        until("the identity learned", || fake.count("TPSESSION ID") == 1).await;
        // Its reply read: a request after it has its own reply.
        let _ = c.get("sync").await;
        let value = settp_value(fake, key, 0).unwrap();
        (c, waiter, value)
    }

    /// A drop with a place in line, the resume listing it as a place (a
    /// null token), its hand-off pushed right after the resume's reply: the
    /// wait goes on, on the new connection, and gets the lock there.
    #[tokio::test]
    async fn a_carried_place_is_handed_over_on_the_new_connection() {
        let fake = Fake::start().await;
        let (c, waiter, value) = waiting_in_line(&fake, "line", Duration::from_secs(5)).await;
        *fake.resume_reply.lock() = resume_with(&[("line", &value, None)]);
        *fake.after_resume.lock() = acquired("line", &value, 77);
        fake.drop_connections();
        let guard = bounded(waiter).await.unwrap().unwrap();
        assert_eq!(guard.token(), 77);
        assert_eq!(guard.value(), value);
        assert_eq!(guard.state(), LockState::Held);
        let second = fake.commands(1);
        assert!(second.contains(&format!("TPRESUME {SID}")), "{second:?}");
        assert!(!second.iter().any(|w| w.starts_with("SETTP")), "{second:?}");
        assert_eq!(fake.count("TPSESSION ID"), 1);
        assert!(guard.unlock().await.unwrap());
        assert!(sent(&fake, 1, "TPRELEASE", "line", &value));
        drop(c);
    }

    /// The resume lists the place as a hold: handed over while the session
    /// was detached, the entry is its hand-off (no push comes).
    #[tokio::test]
    async fn a_place_listed_as_held_is_acquired_with_its_token() {
        let fake = Fake::start().await;
        let (c, waiter, value) = waiting_in_line(&fake, "line", Duration::from_secs(5)).await;
        *fake.resume_reply.lock() = resume_with(&[("line", &value, Some(55))]);
        fake.drop_connections();
        let guard = bounded(waiter).await.unwrap().unwrap();
        assert_eq!(guard.token(), 55);
        assert_eq!(guard.state(), LockState::Held);
        assert!(!fake
            .commands(1)
            .iter()
            .any(|w| w.starts_with("SETTP") || w.starts_with("TPRELEASE")));
        // Tracked on the new connection: the next drop suspends it, and
        // the next resume holds it again.
        *fake.resume_reply.lock() = resume_with(&[("line", &value, Some(55))]);
        fake.resume_gate.send_replace(false);
        fake.drop_connections();
        until("suspended", || guard.state() == LockState::Suspended).await;
        fake.resume_gate.send_replace(true);
        until("held again", || guard.state() == LockState::Held).await;
        assert_eq!(guard.token(), 55);
        assert_eq!(fake.count(&format!("TPRESUME {SID}")), 2);
        assert!(guard.unlock().await.unwrap());
        assert!(sent(&fake, 2, "TPRELEASE", "line", &value));
        drop(c);
    }

    /// The resume does not list the place (the session lost it): the wait
    /// queues again, at the end of the line, on the new connection.
    #[tokio::test]
    async fn a_place_not_in_the_resume_queues_again() {
        let fake = Fake::start().await;
        let (c, waiter, value) = waiting_in_line(&fake, "line", Duration::from_secs(5)).await;
        *fake.resume_reply.lock() = resume_with(&[]);
        fake.drop_connections();
        until("queued again", || settp_value(&fake, "line", 1).is_some()).await;
        let again = settp_value(&fake, "line", 1).unwrap();
        assert_ne!(again, value);
        let second = fake.commands(1);
        let resume = second.iter().position(|w| w.starts_with("TPRESUME"));
        let settp = second.iter().position(|w| w == "SETTP line");
        assert!(resume.is_some() && resume < settp, "{second:?}");
        assert!(!waiter.is_finished());
        fake.inject.send(acquired("line", &again, 9)).unwrap();
        let guard = bounded(waiter).await.unwrap().unwrap();
        assert_eq!(guard.token(), 9);
        assert_eq!(guard.value(), again);
        assert!(guard.unlock().await.unwrap());
        assert!(sent(&fake, 1, "TPRELEASE", "line", &again));
        drop(c);
    }

    /// Carried twice, then given up by its timeout: the `TPDEQUEUE` goes
    /// on the connection the place waits on now.
    #[tokio::test]
    async fn a_place_is_carried_again_and_left_on_the_new_connection() {
        let fake = Fake::start().await;
        let (c, waiter, value) = waiting_in_line(&fake, "line", Duration::from_millis(1500)).await;
        *fake.resume_reply.lock() = resume_with(&[("line", &value, None)]);
        for n in 1..=2 {
            fake.drop_connections();
            until("resumed", || {
                fake.commands(n).iter().any(|w| w.starts_with("TPRESUME"))
            })
            .await;
            // The resume's reply read.
            let _ = c.get("sync").await;
            assert!(!waiter.is_finished());
        }
        let r = bounded(waiter).await.unwrap();
        assert!(matches!(r, Err(crate::Error::LockTimeout { .. })), "{r:?}");
        until("left the line", || {
            sent(&fake, 2, "TPDEQUEUE", "line", &value)
        })
        .await;
        assert_eq!(fake.count("SETTP line"), 1);
        // A hand-off crossing the TPDEQUEUE is given back.
        fake.inject.send(acquired("line", &value, 12)).unwrap();
        until("given back", || sent(&fake, 2, "TPRELEASE", "line", &value)).await;
        drop(c);
    }

    /// Waits given up while their places were carried: the resume lets
    /// what it lists for them go (a place left, a hand-off released).
    #[tokio::test]
    async fn places_of_dropped_waits_are_let_go_by_the_resume() {
        let fake = Fake::start().await;
        let (c, w1, v1) = waiting_in_line(&fake, "line1", Duration::from_secs(5)).await;
        let w2 = tokio::spawn({
            let c = c.clone();
            async move { c.lock("line2").await }
        });
        until("queued", || settp_value(&fake, "line2", 0).is_some()).await;
        let _ = c.get("sync").await;
        let v2 = settp_value(&fake, "line2", 0).unwrap();
        *fake.resume_reply.lock() = resume_with(&[("line1", &v1, None), ("line2", &v2, Some(60))]);
        fake.resume_gate.send_replace(false);
        fake.drop_connections();
        until("the resume sent", || {
            fake.commands(1).iter().any(|w| w.starts_with("TPRESUME"))
        })
        .await;
        w1.abort();
        w2.abort();
        assert!(bounded(w1).await.unwrap_err().is_cancelled());
        assert!(bounded(w2).await.unwrap_err().is_cancelled());
        fake.resume_gate.send_replace(true);
        until("let go", || {
            sent(&fake, 1, "TPDEQUEUE", "line1", &v1) && sent(&fake, 1, "TPRELEASE", "line2", &v2)
        })
        .await;
        // Neither waits on the new connection: a hand-off is given back.
        fake.inject.send(acquired("line1", &v1, 13)).unwrap();
        until("given back", || sent(&fake, 1, "TPRELEASE", "line1", &v1)).await;
        assert_eq!(c.session_state(), SessionState::Connected);
    }

    /// A refused resume fails a carried wait at once, whatever its
    /// timeout.
    #[tokio::test]
    async fn a_refused_resume_fails_a_carried_wait() {
        let fake = Fake::start().await;
        let (c, waiter, _) = waiting_in_line(&fake, "line", Duration::from_secs(60)).await;
        *fake.resume_reply.lock() = b"-ERR no such session to resume\r\n".to_vec();
        fake.drop_connections();
        let r = bounded(waiter).await.unwrap();
        assert!(matches!(r, Err(crate::Error::Disconnected)), "{r:?}");
        assert!(fake.commands(1).iter().any(|w| w.starts_with("TPRESUME")));
        drop(c);
    }
}
