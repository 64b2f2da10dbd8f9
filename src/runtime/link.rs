//! A replica's link: what a connection's task runs once SYNC or PSYNC made
//! it a replica (`runtime::conn` hands over). It writes what the
//! replication state has for it (`Replication::take`: `+FULLRESYNC` or
//! `+CONTINUE`, the RDB, then the command stream), reads the replica's
//! `REPLCONF ACK`s, and ends on a kill, a closed socket, an output buffer
//! over its limits or `repl-timeout`. Its end is the connection's
//! (`Cleanup`), which removes it from the table.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::conn::Transport;
use super::Shared;
use crate::replication::Payload;
use crate::resp::{drain_frames, Parser};
use crate::server::{ClientId, ClientSignal};

/// Runs replica `id`'s link until it ends.
pub(super) async fn run<S: Transport>(
    shared: &Arc<Shared>,
    sock: &mut S,
    inbuf: &mut BytesMut,
    id: ClientId,
    signal: &Arc<ClientSignal>,
) {
    let repl = shared.lock_store().await.repl.clone();
    let Some((wake, abort)) = repl.wake_of(id) else {
        return;
    };
    // A kill or a close the replication state decides (output limits)
    // interrupts any write.
    let stop = Stop {
        signal,
        abort: &abort,
        shutdown: shared.shutdown.subscribe(),
    };
    let mut parser = Parser::new();
    let mut frames: Vec<Vec<Bytes>> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let o = repl.take(id, false);
        if o.gone || o.close.is_some() || signal.is_killed() {
            return;
        }
        let limit = repl.timeout();
        for block in o.bytes.blocks() {
            if let Err(e) = write(sock, block, &stop, limit).await {
                if e.kind() == std::io::ErrorKind::TimedOut {
                    tracing::warn!(
                        "Disconnecting timedout replica (streaming sync): {}",
                        repl.name_of(id)
                    );
                }
                return;
            }
        }
        if let Some(p) = o.payload {
            let streamed = !matches!(p, Payload::File { .. });
            let sent = tokio::select! {
                r = send_payload(sock, p, limit) => r,
                _ = stop.wait() => return,
            };
            if let Err(e) = sent {
                if e.kind() == std::io::ErrorKind::TimedOut {
                    tracing::warn!(
                        "Disconnecting timedout replica (full sync): {}",
                        repl.name_of(id)
                    );
                }
                return;
            }
            repl.bulk_sent(id, streamed);
            continue;
        }
        let hold = o.hold_until.map(tokio::time::Instant::from_std);
        tokio::select! {
            _ = wake.notified() => {
                // Let the other connections ready now run first: what they
                // write joins this write, as Redis writes to its replicas
                // once per event-loop turn (one wake-up and one write for
                // many clients' requests at pipeline 1). Not for records
                // that may wait anyway: they only arm the timer below.
                if !repl.holds_lazy(id) {
                    tokio::task::yield_now().await;
                }
            }
            _ = tokio::time::sleep_until(hold.unwrap_or_else(tokio::time::Instant::now)), if hold.is_some() => {}
            _ = stop.wait() => {
                if stop.shutting_down() {
                    // What is pending, best effort, as Redis's
                    // flushSlavesOutputBuffers before it exits.
                    let o = repl.take(id, true);
                    for block in o.bytes.blocks() {
                        let w = tokio::time::timeout(SHUTDOWN_FLUSH, sock.write_all(block));
                        if !matches!(w.await, Ok(Ok(()))) {
                            break;
                        }
                    }
                    let _ = tokio::time::timeout(SHUTDOWN_FLUSH, sock.flush()).await;
                }
                return;
            }
            r = sock.read_buf(inbuf) => {
                match r {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                if drain_frames(&mut parser, inbuf, &mut frames).is_err() {
                    return;
                }
                let mut acked = false;
                for f in frames.drain(..) {
                    let is_ack = f.len() >= 3
                        && f[0].eq_ignore_ascii_case(b"replconf")
                        && f[1].eq_ignore_ascii_case(b"ack");
                    match is_ack.then(|| crate::util::parse_i64(&f[2])).flatten() {
                        Some(off) => acked |= repl.ack(id, off),
                        None => repl.touch(id),
                    }
                }
                if acked {
                    // WAIT's waiters may have what they asked for now.
                    let mut store = shared.lock_store().await;
                    crate::commands::serve_acks(&mut store);
                    // A FAILOVER may find its replica caught up (Redis
                    // looks in beforeSleep, after the ACK).
                    crate::commands::replication::update_failover(&mut store);
                }
            }
            _ = tick.tick() => {
                if repl.timed_out(id) {
                    return;
                }
                // A newline now and then while the snapshot is made keeps
                // the replica from timing out, as Redis's replicationCron.
                if o.waiting && write(sock, b"\n", &stop, limit).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Writes `bytes`; Err when the socket failed, took nothing for `limit`
/// (TimedOut: a replica that stopped reading) or the link was killed.
async fn write<S: Transport>(
    sock: &mut S,
    bytes: &[u8],
    stop: &Stop<'_>,
    limit: Duration,
) -> std::io::Result<()> {
    tokio::select! {
        r = bounded(sock, bytes, limit) => r,
        _ = stop.wait() => Err(std::io::ErrorKind::Interrupted.into()),
    }
}

/// How long a link may take to write what is pending when the server
/// shuts down.
const SHUTDOWN_FLUSH: Duration = Duration::from_millis(100);

/// What ends a link's wait or write: the connection's kill, the
/// replication state closing it, or the server shutting down.
struct Stop<'a> {
    signal: &'a ClientSignal,
    abort: &'a tokio::sync::Notify,
    shutdown: tokio::sync::watch::Receiver<bool>,
}

impl Stop<'_> {
    async fn wait(&self) {
        let mut shutdown = self.shutdown.clone();
        tokio::select! {
            _ = self.signal.kill.notified() => {}
            _ = self.abort.notified() => {}
            _ = shutdown.wait_for(|down| *down) => {}
        }
    }

    fn shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }
}

/// Writes `bytes`, each piece within `limit`.
async fn bounded<S: Transport>(sock: &mut S, bytes: &[u8], limit: Duration) -> std::io::Result<()> {
    for piece in bytes.chunks(64 * 1024) {
        tokio::time::timeout(limit, sock.write_all(piece))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    }
    tokio::time::timeout(limit, sock.flush())
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))?
}

/// Sends the RDB: the file as a bulk (`$<len>\r\n` and its bytes), or the
/// framed stream as the walk makes it; each write within `limit`.
async fn send_payload<S: Transport>(
    sock: &mut S,
    p: Payload,
    limit: Duration,
) -> std::io::Result<()> {
    match p {
        Payload::File { file, len } => {
            bounded(sock, format!("${len}\r\n").as_bytes(), limit).await?;
            let mut file = tokio::fs::File::from_std(file);
            let mut left = len;
            let mut buf = vec![0u8; 256 * 1024];
            while left > 0 {
                let want = buf.len().min(left as usize);
                let n = file.read(&mut buf[..want]).await?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                bounded(sock, &buf[..n], limit).await?;
                left -= n as u64;
            }
        }
        Payload::Bytes(b) => bounded(sock, &b, limit).await?,
        Payload::Stream(mut rx) => {
            while let Some(chunk) = rx.recv().await {
                bounded(sock, &chunk, limit).await?;
            }
        }
    }
    Ok(())
}
