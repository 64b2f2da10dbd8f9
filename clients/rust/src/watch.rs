//! The push dispatcher: existence watches shared per key.
//!
//! Every subscriber sends its own `WATCHEX key` (the server keeps one watch
//! per connection and key, and answers a repeated WATCHEX with the current
//! state). The subscriber is registered by a reply hook on the reader task,
//! which sees replies and pushes in socket order, so it gets exactly the
//! pushes that follow its initial state. `UNWATCHEX key` goes out only when
//! the last subscriber is gone and no WATCHEX for the key is in flight, so
//! an UNWATCHEX can never land after a newer WATCHEX.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

use super::cmd::cmd;
use super::conn::{send_discard, wait, Conn, PushSink, Slot};
use super::error::{Error, Result};
use super::value::Value;
use super::Client;

/// One event of an existence watch.
///
/// A watch first yields `Exists` or `NotExists` (the state when the server
/// registered it), then strictly alternating `Added` / `Deleted`. After
/// `Disconnected`, either the watch ends (no reconnect) or, once reconnected,
/// it yields the fresh `Exists` / `NotExists` and goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchEvent {
    /// The key existed when the watch was (re)registered.
    Exists,
    /// The key did not exist when the watch was (re)registered.
    NotExists,
    /// The key came into existence.
    Added,
    /// The key went away (DEL, expiry, owner's disconnect, ...).
    Deleted,
    /// The connection dropped; no events are known until it is back.
    Disconnected,
}

struct Sub {
    id: u64,
    tx: mpsc::UnboundedSender<WatchEvent>,
    /// Has had its Exists/NotExists on the live connection.
    synced: bool,
}

#[derive(Default)]
struct Entry {
    subs: Vec<Sub>,
    /// WATCHEX requests sent and not answered yet.
    inflight: u32,
}

#[derive(Default)]
struct Reg {
    live_gen: u64,
    live: Option<Weak<Conn>>,
    next_id: u64,
    keys: HashMap<Bytes, Entry>,
}

impl Reg {
    fn live_conn(&self) -> Option<Arc<Conn>> {
        self.live.as_ref().and_then(Weak::upgrade)
    }

    /// Drops the entry and the server watch once nobody needs them.
    fn maybe_unwatch(&mut self, key: &Bytes, conn: Option<Arc<Conn>>) {
        if let Some(e) = self.keys.get(key) {
            if e.subs.is_empty() && e.inflight == 0 {
                self.keys.remove(key);
                if let Some(c) = conn {
                    send_discard(&c, &cmd("UNWATCHEX").arg(key));
                }
            }
        }
    }
}

/// All watches of one client, across reconnects.
#[derive(Default)]
pub(crate) struct Registry {
    reg: Mutex<Reg>,
}

fn state_event(r: Result<Value>) -> Result<WatchEvent> {
    match r? {
        Value::Simple(s) if s == "EXIST" => Ok(WatchEvent::Exists),
        Value::Simple(s) if s == "NOEXIST" => Ok(WatchEvent::NotExists),
        v => Err(Error::Protocol(format!(
            "WATCHEX replied with {} instead of EXIST/NOEXIST",
            v.kind()
        ))),
    }
}

impl Registry {
    /// A new connection is live: re-register every watched key on it. Their
    /// subscribers get the fresh state when the reply arrives.
    pub(crate) fn attach(self: &Arc<Self>, conn: &Arc<Conn>) {
        let mut reg = self.reg.lock();
        reg.live_gen = conn.gen;
        reg.live = Some(Arc::downgrade(conn));
        reg.keys.retain(|_, e| {
            e.subs.retain(|s| !s.tx.is_closed());
            !e.subs.is_empty() || e.inflight > 0
        });
        let keys: Vec<Bytes> = reg.keys.keys().cloned().collect();
        for key in keys {
            let this = self.clone();
            let (gen, k) = (conn.gen, key.clone());
            let weak = Arc::downgrade(conn);
            let hook = Box::new(move |r: Result<Value>| this.on_resync(gen, k, weak, r));
            if conn
                .send(&cmd("WATCHEX").arg(&key), Slot::Hook(hook))
                .is_ok()
            {
                reg.keys.get_mut(&key).unwrap().inflight += 1;
            }
        }
    }

    fn on_resync(&self, gen: u64, key: Bytes, conn: Weak<Conn>, r: Result<Value>) {
        let mut reg = self.reg.lock();
        let live = reg.live_gen == gen;
        let Some(e) = reg.keys.get_mut(&key) else {
            return;
        };
        e.inflight -= 1;
        if let (true, Ok(ev)) = (live, state_event(r)) {
            e.subs.retain_mut(|s| {
                if s.synced {
                    return true;
                }
                s.synced = true;
                s.tx.send(ev).is_ok()
            });
        }
        reg.maybe_unwatch(&key, conn.upgrade());
    }

    /// No connection will come back: end every watch.
    pub(crate) fn give_up(&self) {
        self.reg.lock().keys.clear();
    }

    /// Sends WATCHEX for a new subscriber; resolves once it is registered.
    async fn subscribe(
        self: &Arc<Self>,
        key: Bytes,
        timeout: Option<std::time::Duration>,
    ) -> Result<(u64, mpsc::UnboundedReceiver<WatchEvent>)> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (done_tx, done_rx) = oneshot::channel::<Result<()>>();
        let id = {
            let mut reg = self.reg.lock();
            let conn = reg.live_conn().ok_or(Error::Disconnected)?;
            reg.next_id += 1;
            let id = reg.next_id;
            let this = self.clone();
            let (gen, k, weak) = (conn.gen, key.clone(), Arc::downgrade(&conn));
            let hook = Box::new(move |r: Result<Value>| {
                this.on_subscribed(
                    gen,
                    k,
                    weak,
                    Sub {
                        id,
                        tx,
                        synced: true,
                    },
                    done_tx,
                    r,
                )
            });
            if conn
                .send(&cmd("WATCHEX").arg(&key), Slot::Hook(hook))
                .is_err()
            {
                return Err(Error::Disconnected);
            }
            reg.keys.entry(key.clone()).or_default().inflight += 1;
            id
        };
        // If this future is dropped after the reply registered the
        // subscriber but before we return, unregister it here.
        struct Unsub<'a>(&'a Registry, &'a Bytes, u64, bool);
        impl Drop for Unsub<'_> {
            fn drop(&mut self) {
                if self.3 {
                    self.0.unsubscribe(self.1, self.2);
                }
            }
        }
        let mut guard = Unsub(self, &key, id, true);
        wait(done_rx, timeout).await?;
        guard.3 = false;
        Ok((id, rx))
    }

    fn on_subscribed(
        &self,
        gen: u64,
        key: Bytes,
        conn: Weak<Conn>,
        sub: Sub,
        done: oneshot::Sender<Result<()>>,
        r: Result<Value>,
    ) {
        let mut reg = self.reg.lock();
        let live = reg.live_gen == gen;
        let Some(e) = reg.keys.get_mut(&key) else {
            let _ = done.send(Err(Error::Disconnected));
            return;
        };
        e.inflight -= 1;
        let r = if live {
            state_event(r)
        } else {
            Err(Error::Disconnected)
        };
        match r {
            // A subscriber that gave up waiting is not registered.
            Ok(ev) if !done.is_closed() => {
                let _ = sub.tx.send(ev);
                e.subs.push(sub);
                let _ = done.send(Ok(()));
            }
            Ok(_) => {}
            Err(err) => {
                let _ = done.send(Err(err));
            }
        }
        reg.maybe_unwatch(&key, conn.upgrade());
    }

    fn unsubscribe(&self, key: &Bytes, id: u64) {
        let mut reg = self.reg.lock();
        let Some(e) = reg.keys.get_mut(key) else {
            return;
        };
        let before = e.subs.len();
        e.subs.retain(|s| s.id != id);
        if e.subs.len() != before {
            let c = reg.live_conn();
            reg.maybe_unwatch(key, c);
        }
    }

    /// Number of keys with subscribers or WATCHEX in flight (for tests).
    pub(crate) fn watched_keys(&self) -> usize {
        self.reg.lock().keys.len()
    }
}

/// The connection's reader task hands the registry its pushes and its end.
impl PushSink for Registry {
    /// The connection `gen` is gone: every synced subscriber hears it.
    fn disconnected(&self, gen: u64) {
        let mut reg = self.reg.lock();
        if reg.live_gen != gen {
            return;
        }
        reg.live_gen = 0;
        reg.live = None;
        for e in reg.keys.values_mut() {
            e.subs.retain_mut(|s| {
                if !s.synced {
                    return true;
                }
                s.synced = false;
                s.tx.send(WatchEvent::Disconnected).is_ok()
            });
        }
    }

    fn on_push(&self, gen: u64, key: &Bytes, added: bool) {
        let mut reg = self.reg.lock();
        if reg.live_gen != gen {
            return;
        }
        let ev = if added {
            WatchEvent::Added
        } else {
            WatchEvent::Deleted
        };
        let Some(e) = reg.keys.get_mut(key) else {
            return;
        };
        e.subs.retain(|s| !s.synced || s.tx.send(ev).is_ok());
        if e.subs.is_empty() {
            let c = reg.live_conn();
            reg.maybe_unwatch(key, c);
        }
    }
}

/// A stream of [`WatchEvent`]s for one key, from [`Client::watch_stream`].
///
/// The first item is `Exists` or `NotExists`. The stream ends after
/// `Disconnected` when the client does not reconnect (or gives up).
/// Dropping it unregisters; the last watcher of a key on this client sends
/// `UNWATCHEX`. It keeps its client (and so the connection) alive.
pub struct WatchStream {
    client: Client,
    key: Bytes,
    id: u64,
    rx: mpsc::UnboundedReceiver<WatchEvent>,
}

impl WatchStream {
    pub(crate) async fn new(client: &Client, key: Bytes) -> Result<WatchStream> {
        let reg = client.registry().clone();
        let (id, rx) = reg.subscribe(key.clone(), client.request_timeout()).await?;
        Ok(WatchStream {
            client: client.clone(),
            key,
            id,
            rx,
        })
    }

    /// The watched key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }
}

impl Stream for WatchStream {
    type Item = WatchEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WatchEvent>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        self.client.registry().unsubscribe(&self.key, self.id);
    }
}

impl std::fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchStream")
            .field("key", &self.key)
            .finish()
    }
}

/// A callback watch from [`Client::watch`]; dropping it unregisters the
/// callback (and sends `UNWATCHEX` if it was the key's last watcher).
pub struct WatchHandle {
    client: Client,
    key: Bytes,
    id: u64,
    task: tokio::task::AbortHandle,
}

impl WatchHandle {
    pub(crate) fn spawn<F>(stream: WatchStream, mut f: F) -> WatchHandle
    where
        F: FnMut(WatchEvent) + Send + 'static,
    {
        let (client, key, id) = (stream.client.clone(), stream.key.clone(), stream.id);
        let task = tokio::spawn(async move {
            let mut stream = stream;
            while let Some(ev) = futures::StreamExt::next(&mut stream).await {
                f(ev);
            }
        });
        WatchHandle {
            client,
            key,
            id,
            task: task.abort_handle(),
        }
    }

    /// The watched key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        // Unregister now rather than when the aborted task is dropped.
        self.client.registry().unsubscribe(&self.key, self.id);
        self.task.abort();
    }
}

impl std::fmt::Debug for WatchHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchHandle")
            .field("key", &self.key)
            .finish()
    }
}
