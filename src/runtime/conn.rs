//! One client connection: read, parse every complete request, execute them
//! under one store lock, write all replies in one write; what the socket
//! does not take waits while the connection goes on reading (`io`).
//!
//! Out-of-band output (pushes, MONITOR) queued by other connections is written
//! only between replies. `Cleanup` runs when the task ends, however it ends
//! (QUIT, EOF, error, kill, timeout, shutdown, panic): it is the one place that
//! releases a connection's resources.
//!
//! Must not run a handler or change keys itself: requests go through
//! `commands::execute_unnoted` (or `answer_busy`), its end through
//! `client_gone` (`Store::client_gone`), the AOF through `aof_write_out`.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Shared;
use crate::commands::{self, ConnState, Ctx};

const MAXCLIENTS: &[u8] = b"-ERR max number of clients reached\r\n";

/// Redis 7.0's protected-mode refusal, word for word.
const DENIED: &str = "-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";
use crate::resp::{drain_frames, Out, Parser, ProtoError};
use crate::server::{ClientHandle, ClientId, ClientSignal, Store};

/// Redis closes a client whose query buffer passes 1 GB.
/// The limits a connection applies itself, from the configuration (read
/// again after every batch, so CONFIG SET takes effect at once).
struct Limits {
    /// `client-query-buffer-limit`.
    qbuf: usize,
    /// `proto-max-bulk-len`.
    bulk: i64,
    /// `client-output-buffer-limit normal`: hard, soft, soft seconds.
    normal: (u64, u64, u64),
}

impl Limits {
    fn of(c: &crate::config::Config) -> Limits {
        Limits {
            qbuf: c.client_query_buffer_limit,
            bulk: c.proto_max_bulk_len as i64,
            normal: c.normal_limits,
        }
    }

    /// Whether replies of `len` bytes waiting to be written pass the
    /// normal class's limits (Redis's checkClientOutputBufferLimits):
    /// over the hard limit at once, over the soft one for its seconds.
    fn output_over(&self, len: usize, soft_since: &mut Option<tokio::time::Instant>) -> bool {
        let (hard, soft, secs) = self.normal;
        let len = len as u64;
        if hard > 0 && len >= hard {
            return true;
        }
        if soft > 0 && len >= soft {
            let since = *soft_since.get_or_insert_with(tokio::time::Instant::now);
            return since.elapsed() >= Duration::from_secs(secs);
        }
        *soft_since = None;
        false
    }
}

/// Runs the connection-end path when dropped.
struct Cleanup {
    shared: Arc<Shared>,
    id: ClientId,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let mut store = self.shared.lock_store_blocking();
        client_gone(&mut store, self.id);
    }
}

/// The connection-end path: `Store::client_gone`, then the waiters its
/// departure made ready (its bound keys freed lock lines) are served.
/// Safe to run twice (CLIENT KILL runs it, then the task's `Cleanup`).
pub fn client_gone(store: &mut Store, id: ClientId) {
    store.client_gone(id);
    commands::settle(store, None);
}

/// What a connection's stream is: plain TCP, or TLS over it.
pub trait Transport: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {
    /// Writes what fits now without waiting (TCP's `try_write`); a stream
    /// that cannot (TLS) says WouldBlock and the caller awaits instead.
    fn try_write_now(&mut self, buf: &[u8]) -> std::io::Result<usize>;
    /// The TCP socket underneath (for socket options).
    fn tcp(&self) -> &TcpStream;
    /// Written bytes may wait in the stream until flushed (TLS records).
    const NEEDS_FLUSH: bool;
}

impl Transport for TcpStream {
    fn try_write_now(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.try_write(buf)
    }

    fn tcp(&self) -> &TcpStream {
        self
    }

    const NEEDS_FLUSH: bool = false;
}

impl Transport for tokio_rustls::server::TlsStream<TcpStream> {
    fn try_write_now(&mut self, _buf: &[u8]) -> std::io::Result<usize> {
        Err(std::io::ErrorKind::WouldBlock.into())
    }

    fn tcp(&self) -> &TcpStream {
        self.get_ref().0
    }

    const NEEDS_FLUSH: bool = true;
}

/// What the socket did: some bytes read, some replies written, or the
/// stream flushed.
enum Io {
    Read(std::io::Result<usize>),
    Wrote(std::io::Result<usize>),
    Flushed(std::io::Result<()>),
}

/// What woke a connection's task.
enum Ev {
    Io(Io),
    /// Its signal: a push, or its wait served or ended.
    Wake,
    /// Its blocked command's timeout.
    BlockTimeout,
    /// The pause its request was postponed for ended.
    PauseEnded,
    Shutdown,
    /// Its idle or session timeout.
    Deadline,
}

/// Reads more requests and, at the same time, writes replies still
/// waiting (`pending`) or flushes the stream: a client that sends a long
/// pipeline before reading any reply is read on while its replies wait,
/// as Redis does, instead of both sides waiting for each other forever.
fn io<'a, S: Transport>(
    sock: &'a mut S,
    inbuf: &'a mut BytesMut,
    pending: &'a [u8],
    flush: bool,
) -> impl std::future::Future<Output = Io> + 'a {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;
    std::future::poll_fn(move |cx| {
        if !pending.is_empty() {
            if let Poll::Ready(r) = Pin::new(&mut *sock).poll_write(cx, pending) {
                return Poll::Ready(Io::Wrote(r));
            }
        } else if flush {
            if let Poll::Ready(r) = Pin::new(&mut *sock).poll_flush(cx) {
                return Poll::Ready(Io::Flushed(r));
            }
        }
        let read = std::pin::pin!(sock.read_buf(&mut *inbuf));
        read.poll(cx).map(Io::Read)
    })
}

/// The socket's own facts, taken before TLS wraps it.
struct SockMeta {
    fd: i32,
    laddr: String,
}

impl SockMeta {
    fn of(sock: &TcpStream) -> SockMeta {
        let _ = sock.set_nodelay(true);
        SockMeta {
            fd: fd_of(sock),
            laddr: sock.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        }
    }
}

/// A plain TCP connection.
pub async fn handle(shared: Arc<Shared>, sock: TcpStream, peer: SocketAddr) {
    let meta = SockMeta::of(&sock);
    serve(shared, sock, peer, meta).await
}

/// A connection to `tls-port`: the TLS handshake (bounded, so a client
/// that never finishes it costs nothing for long), then as any other.
pub async fn handle_tls(
    shared: Arc<Shared>,
    sock: TcpStream,
    peer: SocketAddr,
    acceptor: tokio_rustls::TlsAcceptor,
) {
    let meta = SockMeta::of(&sock);
    match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(sock)).await {
        Ok(Ok(tls)) => serve(shared, tls, peer, meta).await,
        Ok(Err(e)) => tracing::debug!("TLS handshake with {peer} failed: {e}"),
        Err(_) => tracing::debug!("TLS handshake with {peer} timed out"),
    }
}

async fn serve<S: Transport>(shared: Arc<Shared>, mut sock: S, peer: SocketAddr, meta: SockMeta) {
    let signal = Arc::new(ClientSignal::default());
    let mut parser = Parser::new();
    let mut inbuf = BytesMut::with_capacity(16 * 1024);
    let mut frames: Vec<Vec<Bytes>> = Vec::new();
    // The connection as the requests answered before registering left it
    // (a MULTI, AUTH, HELLO while a script was busy).
    let id = shared.client_id();
    let mut early = ConnState::new(id, false);
    let mut early_out = Out::new(false);
    let admitted = {
        // While a script is busy the connection cannot register (that
        // needs the store): it answers BUSY / SCRIPT KILL until it can.
        let mut store = loop {
            if let Some(store) = shared.lock_store_or_busy().await {
                break store;
            }
            if !frames.is_empty() {
                // Deferred requests wait for the script to end.
                break shared.lock_store().await;
            }
            if !answer_unregistered(
                &shared,
                &mut sock,
                &mut parser,
                &mut inbuf,
                &mut frames,
                &mut early,
                &mut early_out,
            )
            .await
            {
                return;
            }
        };
        if store.clients.len() >= store.config().maxclients {
            store.stats.rejected_connections += 1;
            Err(MAXCLIENTS)
        } else if store.config().protected_mode
            && store.acl.users.default_user().nopass()
            && !crate::util::is_local_addr(&peer.to_string())
        {
            store.stats.rejected_connections += 1;
            Err(DENIED.as_bytes())
        } else {
            Ok(register(&mut store, id, &meta, peer, &signal))
        }
    };
    let (authed, keepalive) = match admitted {
        Ok(a) => a,
        Err(reply) => {
            let _ = sock.write_all(reply).await;
            return;
        }
    };
    let _cleanup = Cleanup {
        shared: shared.clone(),
        id,
    };
    if keepalive > 0 {
        let ka = socket2::TcpKeepalive::new().with_time(Duration::from_secs(keepalive));
        let _ = socket2::SockRef::from(sock.tcp()).set_tcp_keepalive(&ka);
    }
    let mut conn = early;
    conn.authed |= authed;
    conn.signal = signal.clone();
    let mut out = early_out;
    let mut spent: Vec<Vec<Bytes>> = Vec::new();
    let mut shutdown = shared.shutdown.subscribe();
    let mut last_activity = tokio::time::Instant::now();

    let (mut idle, mut session_default, mut pause_rx, aof_sync, mut limits) = {
        let s = shared.lock_store().await;
        let c = s.config();
        (
            c.timeout,
            c.tp_session_timeout,
            s.pause_watch(),
            s.persist.aof_sync().clone(),
            Limits::of(c),
        )
    };
    // A subscribed client's output is the pubsub class's (limited where
    // pushes are queued), not the normal class's.
    let mut subscribed = false;
    let mut soft_since: Option<tokio::time::Instant> = None;
    // Holds bound keys or waits in a lock line (as of its last batch; a
    // hand-off sets `signal.granted`): the server's default session
    // timeout applies.
    let mut holds_locks = false;
    // Kept registered across iterations: re-creating it per batch would
    // lock the Notify's waiter list twice per batch.
    let wake = signal.wake.notified();
    tokio::pin!(wake);
    // The same for the shutdown watch: one registration for the
    // connection's life, not one per batch.
    let shut = shutdown.changed();
    tokio::pin!(shut);
    let mut proto_err: Option<ProtoError> = None;
    // Of `out.buf`, the bytes already written; TLS records written but
    // not yet flushed.
    let mut sent = 0;
    let mut flush_pending = false;
    // Socket events in a row (see the select below).
    let mut io_streak = 0u32;
    if !inbuf.is_empty() || !frames.is_empty() {
        // Requests that arrived while a script was busy and found it done
        // (or were deferred until then).
        {
            let mut store = shared.lock_store().await;
            let mut b = Batch {
                store: &mut store,
                shared: &shared,
                conn: &mut conn,
                out: &mut out,
                signal: &signal,
                spent: &mut spent,
                sent: 0,
            };
            b.run(&mut parser, &mut inbuf, &mut frames, &mut proto_err);
        }
        write_out(&mut sock, &mut out, &mut 0).await;
        spent.clear();
        if conn.close_after_reply {
            let _ = sock.shutdown().await;
            return;
        }
    }
    loop {
        let idle_deadline = (idle > 0).then(|| last_activity + Duration::from_secs(idle));
        // The session: closed when nothing arrives for its timeout (a
        // silent host), which releases its keys as a disconnect does.
        let session = crate::keyspace::locks::session::timeout_ms(
            conn.session_ms,
            session_default,
            holds_locks || signal.granted.load(Ordering::Relaxed),
        );
        let session_deadline =
            (session > 0).then(|| last_activity + Duration::from_millis(session));
        let deadline = match (idle_deadline, session_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if inbuf.capacity() - inbuf.len() < 4096 {
            let want = parser.need().saturating_sub(inbuf.len()).max(16 * 1024);
            inbuf.reserve(want.min(64 * 1024 * 1024));
        }
        // What woke the connection. Its socket is polled first: at one
        // request per round trip that is nearly always it, and the other
        // futures are not polled at all (about 400 instructions a request
        // at pipeline 1). So that a socket that is always ready (a client
        // that never stops sending) cannot keep the rest waiting (a
        // served wait, a shutdown, a timer), every 16th socket event in a
        // row they are polled first.
        let socket_last = io_streak >= 16;
        let ev = if socket_last {
            io_streak = 0;
            tokio::select! {
                biased;
                _ = &mut wake => Ev::Wake,
                _ = &mut shut => Ev::Shutdown,
                _ = pause_ended(&mut pause_rx, conn.postponed), if conn.postponed.is_some() => Ev::PauseEnded,
                _ = sleep_until_ms(conn.blocked.and_then(|b| b.1)) => Ev::BlockTimeout,
                _ = sleep_until_opt(deadline) => Ev::Deadline,
                r = io(&mut sock, &mut inbuf, &out.buf[sent..], flush_pending) => Ev::Io(r),
            }
        } else {
            tokio::select! {
                biased;
                r = io(&mut sock, &mut inbuf, &out.buf[sent..], flush_pending) => Ev::Io(r),
                _ = &mut wake => Ev::Wake,
                _ = &mut shut => Ev::Shutdown,
                _ = pause_ended(&mut pause_rx, conn.postponed), if conn.postponed.is_some() => Ev::PauseEnded,
                _ = sleep_until_ms(conn.blocked.and_then(|b| b.1)) => Ev::BlockTimeout,
                _ = sleep_until_opt(deadline) => Ev::Deadline,
            }
        };
        if matches!(ev, Ev::Io(_)) {
            io_streak += 1;
        } else {
            io_streak = 0;
        }
        match ev {
            Ev::Io(r) => {
                match r {
                    Io::Wrote(Ok(0)) | Io::Wrote(Err(_)) | Io::Flushed(Err(_)) => break,
                    Io::Wrote(Ok(n)) => {
                        sent += n;
                        last_activity = tokio::time::Instant::now();
                        if sent == out.buf.len() {
                            out.clear();
                            sent = 0;
                            flush_pending = S::NEEDS_FLUSH;
                        }
                    }
                    Io::Flushed(Ok(())) => flush_pending = false,
                    Io::Read(Ok(0)) | Io::Read(Err(_)) => break,
                    Io::Read(Ok(n)) => {
                        last_activity = tokio::time::Instant::now();
                        signal.granted.store(false, Ordering::Relaxed);
                        if inbuf.len() > limits.qbuf {
                            tracing::warn!(
                                "Closing client that reached max query buffer length: id={id} addr={peer} (qbuf={})",
                                inbuf.len()
                            );
                            break;
                        }
                        conn.qbuf = inbuf.len();
                        conn.qbuf_free = inbuf.capacity() - inbuf.len();
                        // Parse outside the store lock, so other connections'
                        // commands run while this one's are parsed.
                        if conn.blocked.is_none() && frames.is_empty() && proto_err.is_none() {
                            parser.unauth = !conn.authed;
                            parser.max_bulk = Some(limits.bulk);
                            if let Err(e) = drain_frames(&mut parser, &mut inbuf, &mut frames) {
                                proto_err = Some(e);
                            }
                        }
                        let Some(mut store) = lock_or_answer(
                            &shared,
                            &mut sock,
                            &mut conn,
                            &mut out,
                            &mut sent,
                            &mut frames,
                        )
                        .await
                        else {
                            continue;
                        };
                        // Killed (CLIENT KILL) while reading: run nothing more.
                        if signal.is_killed() {
                            break;
                        }
                        store.stats.net_input_bytes += n as u64;
                        // A blocked or paused connection keeps reading (to
                        // notice a close) but runs nothing until its wait ends.
                        if conn.blocked.is_none() && conn.postponed.is_none() {
                            let mut b = Batch {
                                store: &mut store,
                                shared: &shared,
                                conn: &mut conn,
                                out: &mut out,
                                signal: &signal,
                                spent: &mut spent,
                                sent,
                            };
                            b.run(&mut parser, &mut inbuf, &mut frames, &mut proto_err);
                            idle = store.config().timeout;
                            session_default = store.config().tp_session_timeout;
                            limits = Limits::of(store.config());
                            subscribed = store.pubsub.is_subscribed(id);
                            holds_locks = session_default > 0 && store.ks.in_lock_service(id);
                        }
                    }
                }
            }
            Ev::Wake => {
                wake.set(signal.wake.notified());
                if signal.is_killed() {
                    break;
                }
                let served = match conn.blocked {
                    // Served (or unblocked): its reply is in the pending
                    // output; then the rest of the pipeline runs.
                    Some((wid, _)) => {
                        let mut store = shared.lock_store().await;
                        let served = store.ks.blocking.get(wid).is_none();
                        if served {
                            conn.blocked = None;
                            if !ended_from_outside(&signal, &mut out, &mut conn) {
                                let mut b = Batch {
                                    store: &mut store,
                                    shared: &shared,
                                    conn: &mut conn,
                                    out: &mut out,
                                    signal: &signal,
                                    spent: &mut spent,
                                    sent,
                                };
                                b.run(&mut parser, &mut inbuf, &mut frames, &mut proto_err);
                            }
                        }
                        served
                    }
                    None => false,
                };
                if !served {
                    // No store lock: a fan-out wakes thousands of these at once.
                    let n = signal.take_pending(&mut out.buf);
                    signal.unreported_out.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
            Ev::BlockTimeout => {
                // A blocked command's timeout: unless it was served in
                // the meantime, it replies its null and the pipeline goes on.
                let mut store = shared.lock_store().await;
                if let Some((wid, _)) = conn.blocked.take() {
                    if let Some(w) = store.ks.blocking.remove(wid) {
                        if let crate::blocking::Wait::Command {
                            on_timeout, silent, ..
                        } = w.wait
                        {
                            signal.take_pending(&mut out.buf);
                            if !silent {
                                commands::timeout_reply(&mut store, id, &mut out, on_timeout);
                            }
                        }
                    }
                }
                // Ended from outside just before its timeout, maybe.
                if !ended_from_outside(&signal, &mut out, &mut conn) {
                    let mut b = Batch {
                        store: &mut store,
                        shared: &shared,
                        conn: &mut conn,
                        out: &mut out,
                        signal: &signal,
                        spent: &mut spent,
                        sent,
                    };
                    b.run(&mut parser, &mut inbuf, &mut frames, &mut proto_err);
                }
            }
            Ev::PauseEnded => {
                // The pause ended (or its time is up): the postponed
                // request runs, or is postponed again by a longer pause.
                conn.postponed = None;
                let mut store = shared.lock_store().await;
                store.note_postponed(id, false);
                pause_rx.borrow_and_update();
                let mut b = Batch {
                    store: &mut store,
                    shared: &shared,
                    conn: &mut conn,
                    out: &mut out,
                    signal: &signal,
                    spent: &mut spent,
                    sent,
                };
                b.run(&mut parser, &mut inbuf, &mut frames, &mut proto_err);
            }
            Ev::Shutdown => {
                // Replies already made still go out (the server waits for
                // its connections a bounded time).
                finish_writes(&mut sock, &out.buf[sent..], &signal).await;
                break;
            }
            Ev::Deadline => {
                if session_deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                    // The default applies only while it holds locks: judged
                    // again now (a lock may have gone meanwhile).
                    let expired =
                        conn.session_ms > 0 || shared.lock_store().await.ks.in_lock_service(id);
                    if expired {
                        tracing::info!("closing client {id}: nothing arrived for its session timeout ({session} ms)");
                        break;
                    }
                    holds_locks = false;
                    signal.granted.store(false, Ordering::Relaxed);
                    continue;
                }
                // Redis's idle `timeout`. Exempt as in Redis: monitors, and
                // what Redis's pub/sub and blocked clients are here, watchers
                // and queued lock waiters. A lock holder is not exempt: the
                // timeout releasing a silent holder's keys is the point.
                let exempt = {
                    let s = shared.lock_store().await;
                    conn.blocked.is_some()
                        || conn.postponed.is_some()
                        || s.monitors.contains(&id)
                        || s.ks.watches.count_for(id) > 0
                        || s.ks.blocking.count_for(id) > 0
                        || s.pubsub.is_subscribed(id)
                        || signal.granted.swap(false, Ordering::Relaxed)
                };
                if !exempt {
                    break;
                }
                last_activity = tokio::time::Instant::now();
            }
        }
        // Off the store lock: the requests that ran release the read buffer.
        spent.clear();
        // Killed (CLIENT KILL, evicted): nothing more is written.
        if signal.is_killed() {
            break;
        }
        if !subscribed && limits.output_over(out.buf.len() - sent, &mut soft_since) {
            tracing::info!(
                "Client id={id} addr={peer} scheduled to be closed ASAP for overcoming of output buffer limits."
            );
            break;
        }
        if out.buf.len() > sent {
            // appendfsync always: no reply before the log it follows is on
            // disk (one fsync serves every connection waiting).
            let logged = std::mem::take(&mut conn.aof_logged);
            if let Some(upto) = aof_sync.must_wait(logged) {
                aof_sync.wait_durable(upto).await;
            }
            // Most replies fit the socket buffer: written at once. What
            // does not is written by `io` while requests go on being read.
            let mut failed = false;
            while sent < out.buf.len() {
                match sock.try_write_now(&out.buf[sent..]) {
                    Ok(0) => failed = true,
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(_) => failed = true,
                }
                if failed {
                    break;
                }
            }
            if failed {
                break;
            }
            if sent == out.buf.len() {
                out.clear();
                sent = 0;
                if out.buf.capacity() > 1024 * 1024 {
                    out.buf.shrink_to(16 * 1024);
                }
            } else if sent > 1024 * 1024 && sent * 2 > out.buf.len() {
                // A slow reader: what it took leaves the buffer.
                out.consume_front(sent);
                sent = 0;
            }
        }
        if conn.close_after_reply && !signal.is_killed() {
            // QUIT, a protocol error, CLIENT KILL of itself: the replies
            // before it go out first.
            finish_writes(&mut sock, &out.buf[sent..], &signal).await;
            break;
        }
        if conn.close_after_reply || signal.is_killed() {
            break;
        }
        if conn.replica.handoff {
            // SYNC/PSYNC made it a replica: what was answered before goes
            // out first, then the link runs it from now on.
            finish_writes(&mut sock, &out.buf[sent..], &signal).await;
            super::link::run(&shared, &mut sock, &mut inbuf, id, &signal).await;
            break;
        }
        signal.set_buffers(crate::server::Buffers {
            qbuf: inbuf.len(),
            qbuf_cap: inbuf.capacity(),
            unsent: out.buf.len() - sent,
        });
    }
    let _ = sock.shutdown().await;
}

/// The store for a batch; while a script is past busy-reply-threshold the
/// requests are answered without it (None), or, for a command that may
/// run while busy but needs the store, it is awaited (the script's end).
/// A blocked command ended from outside with an error that closes the
/// connection (`Store::fail_blocked`): the error goes out, the rest of
/// the pipeline does not run. True if so.
fn ended_from_outside(signal: &ClientSignal, out: &mut Out, conn: &mut ConnState) -> bool {
    if !signal.close_after_requested() {
        return false;
    }
    signal.take_pending(&mut out.buf);
    conn.close_after_reply = true;
    true
}

async fn lock_or_answer<'a, S: Transport>(
    shared: &'a Shared,
    sock: &mut S,
    conn: &mut ConnState,
    out: &mut Out,
    sent: &mut usize,
    frames: &mut Vec<Vec<Bytes>>,
) -> Option<parking_lot::MutexGuard<'a, Store>> {
    use crate::commands::{answer_busy, Busy};
    if let Some(store) = shared.lock_store_or_busy().await {
        return Some(store);
    }
    let r = answer_busy(&shared.script, conn, out, frames);
    if r == Busy::Shutdown {
        shared.begin_shutdown();
    }
    write_out(sock, out, sent).await;
    if r == Busy::Deferred {
        return Some(shared.lock_store().await);
    }
    None
}

/// One round of a connection not yet registered while a script is busy:
/// reads what comes within a few milliseconds and answers it without the
/// store. Incomplete requests stay in `inbuf` for the connection loop.
/// False when the connection is gone.
async fn answer_unregistered<S: Transport>(
    shared: &Shared,
    sock: &mut S,
    parser: &mut Parser,
    inbuf: &mut BytesMut,
    frames: &mut Vec<Vec<Bytes>>,
    conn: &mut ConnState,
    out: &mut Out,
) -> bool {
    match tokio::time::timeout(Duration::from_millis(10), sock.read_buf(inbuf)).await {
        Err(_) => return true,
        Ok(Ok(0)) | Ok(Err(_)) => return false,
        Ok(Ok(_)) => {}
    }
    if !shared.script.busy() {
        // The script ended: these requests wait for the connection loop.
        return true;
    }
    let bad = drain_frames(parser, inbuf, frames).err();
    conn.authed |= !shared.script.auth_required();
    let gate = &shared.script;
    if crate::commands::answer_busy(gate, conn, out, frames) == crate::commands::Busy::Shutdown {
        shared.begin_shutdown();
    }
    if let Some(e) = &bad {
        out.error(&format!("ERR {}", e.message()));
    }
    write_out(sock, out, &mut 0).await;
    bad.is_none() && !conn.close_after_reply
}

/// Writes the replies answered while a script is busy (the main loop's
/// write path is skipped for them), after the `sent` bytes already
/// written; a failed write is noticed by the next read.
async fn write_out<S: Transport>(sock: &mut S, out: &mut Out, sent: &mut usize) {
    if out.buf.len() > *sent {
        let _ = sock.write_all(&out.buf[*sent..]).await;
        let _ = sock.flush().await;
    }
    out.clear();
    *sent = 0;
}

/// Writes what is left before the connection closes, unless the client
/// stops reading and the connection is killed meanwhile.
async fn finish_writes<S: Transport>(sock: &mut S, rest: &[u8], signal: &ClientSignal) {
    let write = async {
        sock.write_all(rest).await?;
        sock.flush().await
    };
    let killed = signal.kill.notified();
    tokio::select! {
        _ = write => {}
        _ = killed => {}
    }
}

/// Waits for a pause to end: UNPAUSE (the watch changes) or its deadline.
async fn pause_ended(rx: &mut tokio::sync::watch::Receiver<u64>, until: Option<i64>) {
    tokio::select! {
        _ = rx.changed() => {}
        _ = sleep_until_ms(until) => {}
    }
}

/// Sleeps until `deadline_ms` on the server's clock (forever for None).
async fn sleep_until_ms(deadline_ms: Option<i64>) {
    match deadline_ms {
        Some(at) => {
            let now = crate::util::now_ms();
            let wait = Duration::from_millis(at.saturating_sub(now).max(0) as u64);
            tokio::time::sleep(wait).await
        }
        None => std::future::pending().await,
    }
}

/// One turn of running requests under the store lock.
struct Batch<'a> {
    store: &'a mut Store,
    shared: &'a Shared,
    conn: &'a mut ConnState,
    out: &'a mut Out,
    signal: &'a ClientSignal,
    /// The requests that ran: freed by the caller once the store lock is
    /// released (each argument drops a reference to the read buffer).
    spent: &'a mut Vec<Vec<Bytes>>,
    /// Of `out.buf`, the bytes already written (earlier batches' replies
    /// may still wait).
    sent: usize,
}

impl Batch<'_> {
    /// Runs the requests left from a blocked pipeline (`frames`), then
    /// every complete request in `inbuf`, until the connection blocks,
    /// closes, or has nothing more. A protocol error found while parsing
    /// is reported (and closes the connection) once the requests before it
    /// have run.
    fn run(
        &mut self,
        parser: &mut Parser,
        inbuf: &mut BytesMut,
        frames: &mut Vec<Vec<Bytes>>,
        proto_err: &mut Option<ProtoError>,
    ) {
        let signal = self.signal;
        // Replies of earlier batches may still wait to be written.
        let out_before = self.out.buf.len();
        if !self.conn.later.is_empty() {
            commands::apply_later(&mut Ctx {
                store: self.store,
                conn: self.conn,
                out: self.out,
            });
        }
        let logged_before = self.store.persist.aof_sync().queued();
        // Pushes queued before this batch ran go first: they describe
        // changes that happened before it.
        signal.take_pending(&mut self.out.buf);
        // The clock is read once per batch (commands re-read it only when
        // it is not fresh).
        crate::util::set_cmd_time();
        loop {
            let parsed_now = frames.is_empty() && proto_err.is_none();
            if parsed_now {
                parser.unauth = !self.conn.authed;
                if let Err(e) = drain_frames(parser, inbuf, frames) {
                    *proto_err = Some(e);
                }
            }
            let mut ctx = Ctx {
                store: self.store,
                conn: self.conn,
                out: self.out,
            };
            // The batch's last command is what CLIENT LIST shows.
            let mut last = None;
            let mut done = 0;
            for (i, args) in frames.iter().enumerate() {
                // Redis checks client memory before each command: one
                // whose arguments put its client over maxmemory-clients
                // does not run.
                if ctx.store.clients.eviction_limit() != 0 {
                    let f = figures(inbuf, &frames[i..], ctx.out, self.sent);
                    if commands::client_eviction::evict_clients(&mut ctx, f) {
                        break;
                    }
                }
                let ran = commands::execute_unnoted(&mut ctx, args);
                if ctx.conn.postponed.is_some() {
                    // Paused: this request stays for when the pause ends.
                    break;
                }
                if let Some(spec) = ran {
                    last = Some((i, spec));
                }
                done = i + 1;
                if ctx.conn.close_after_reply || ctx.conn.blocked.is_some() {
                    break;
                }
            }
            if let Some((i, spec)) = last {
                commands::note_command(&mut ctx, &frames[i], spec);
            }
            if done == frames.len() {
                self.spent.append(frames);
            } else {
                self.spent.extend(frames.drain(..done));
            }
            if self.conn.close_after_reply
                || self.conn.blocked.is_some()
                || self.conn.postponed.is_some()
                || signal.is_killed()
            {
                break;
            }
            // Before AUTH requests are parsed one at a time: Redis's
            // unauthenticated limits apply per request, so one sent after
            // AUTH in the same read is free.
            if proto_err.is_some() || (parsed_now && (done == 0 || !parser.unauth)) {
                break;
            }
        }
        if self.conn.blocked.is_none() && self.conn.postponed.is_none() {
            if let Some(e) = proto_err.take() {
                if !self.conn.close_after_reply {
                    self.out.error(&format!("ERR {}", e.message()));
                    self.conn.close_after_reply = true;
                }
            }
        }
        if self.store.shutdown_requested {
            self.shared.begin_shutdown();
        }
        // The batch's log goes to the file before its replies go out.
        crate::persist::aof_write_out(&mut self.store.ks, &mut self.store.persist);
        let logged_after = self.store.persist.aof_sync().queued();
        if logged_after != logged_before {
            self.conn.aof_logged = true;
            self.conn.woff = logged_after;
        }
        signal.take_pending(&mut self.out.buf);
        // Replies and pushes this batch made (for itself and others), or
        // a CONFIG SET, may have put the clients over maxmemory-clients.
        if self.store.clients.eviction_limit() != 0 && !signal.is_killed() {
            let f = figures(inbuf, frames, self.out, self.sent);
            let mut ctx = Ctx {
                store: self.store,
                conn: self.conn,
                out: self.out,
            };
            commands::client_eviction::evict_clients(&mut ctx, f);
        }
        self.store.stats.net_output_bytes += self.out.buf.len().saturating_sub(out_before) as u64
            + signal.unreported_out.swap(0, Ordering::Relaxed);
    }
}

/// The connection's own buffers as client eviction counts them.
fn figures(
    inbuf: &BytesMut,
    frames: &[Vec<Bytes>],
    out: &Out,
    sent: usize,
) -> commands::client_eviction::Figures {
    commands::client_eviction::Figures {
        qbuf: inbuf.len(),
        qbuf_free: inbuf.capacity() - inbuf.len(),
        argv: frames.iter().flatten().map(|a| a.len()).sum(),
        unsent: out.buf.len() - sent,
        rbs: out.buf.capacity(),
    }
}

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(unix)]
fn fd_of(sock: &TcpStream) -> i32 {
    use std::os::fd::AsRawFd;
    sock.as_raw_fd()
}

#[cfg(not(unix))]
fn fd_of(_sock: &TcpStream) -> i32 {
    -1
}

fn register(
    store: &mut Store,
    id: ClientId,
    meta: &SockMeta,
    peer: SocketAddr,
    signal: &Arc<ClientSignal>,
) -> (bool, u64) {
    store.stats.total_connections += 1;
    let now = crate::util::now_ms();
    store.clients.insert(ClientHandle::new(
        id,
        peer.to_string(),
        meta.laddr.clone(),
        meta.fd,
        now,
        signal.clone(),
    ));
    (!store.acl.auth_required(), store.config().tcp_keepalive)
}
