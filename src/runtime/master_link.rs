//! A replica's link to its master (REPLICAOF host port): the task that
//! follows the replication state's master (`Replication::master_watch`),
//! connects (within `repl-timeout`, again every second after a failure,
//! as Redis's replicationCron), runs Redis 7's handshake (PING, AUTH,
//! REPLCONF listening-port / ip-address / capa eof psync2, PSYNC), takes
//! the full sync's RDB (`$<len>` or the `$EOF:<mark>` framing) into a temp
//! file in `dir` and loads it, or continues (`+CONTINUE`), then runs the
//! master's command stream as the master client (`commands::MasterClient`),
//! counting each complete command's bytes in the offset and passing them
//! verbatim to the backlog and our own replicas (`Replication::feed_master`).
//! It answers `REPLCONF GETACK` and sends `REPLCONF ACK <offset>` every
//! second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Shared;
use crate::replication::{locklog, MasterLink, Replication};
use crate::resp::{drain_frames, Parser};
use crate::server::{ClientHandle, ClientSignal, Store};

/// Follows REPLICAOF for the server's life.
pub(super) async fn master_loop(shared: Arc<Shared>, bound: Option<u16>) {
    let repl = shared.lock_store().await.repl.clone();
    let mut watch = repl.master_watch();
    loop {
        let gen = *watch.borrow_and_update();
        let Some(m) = repl.master() else {
            if watch.changed().await.is_err() {
                return;
            }
            continue;
        };
        let id = shared.client_id();
        let signal = Arc::new(ClientSignal::default());
        let mut link = Link {
            shared: &shared,
            repl: &repl,
            gen,
            id,
            signal: signal.clone(),
            connected: false,
            bound,
        };
        let changed = tokio::select! {
            r = link.session(&m.host, m.port) => {
                if let Err(e) = r {
                    tracing::warn!("{e}");
                }
                false
            }
            _ = watch.changed() => true,
        };
        let connected = link.connected;
        {
            let mut store = shared.lock_store().await;
            if store.clients.remove(&id).is_some() {
                store.client_gone(id);
            }
        }
        if connected {
            tracing::info!("Connection with master lost.");
            tracing::info!("Caching the disconnected master state.");
        }
        repl.master_status(gen, MasterLink::Connect);
        if !changed {
            // Again in a second, as replicationCron; every 100 ms while
            // handing over (FAILOVER), as Redis runs its cron then.
            let again = if repl.failover_in_progress() {
                Duration::from_millis(100)
            } else {
                Duration::from_secs(1)
            };
            tokio::select! {
                _ = tokio::time::sleep(again) => {}
                _ = watch.changed() => {}
            }
        }
    }
}

struct Link<'a> {
    shared: &'a Arc<Shared>,
    repl: &'a Replication,
    gen: u64,
    /// The master client's id (CLIENT LIST, CLIENT KILL TYPE master).
    id: crate::ids::ClientId,
    signal: Arc<ClientSignal>,
    /// The stream was reached (a loss is logged).
    connected: bool,
    /// The port we listen on (`listening-port` unless announced).
    bound: Option<u16>,
}

/// The link's stream: TCP, or TLS over it (`tls-replication yes`).
trait LinkStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> LinkStream for T {}

/// The socket and what was read from it but not used yet.
struct Conn {
    sock: Box<dyn LinkStream>,
    buf: BytesMut,
    limit: Duration,
}

impl Conn {
    async fn read_more(&mut self) -> Result<(), String> {
        match tokio::time::timeout(self.limit, self.sock.read_buf(&mut self.buf)).await {
            Err(_) => Err("Timeout receiving bulk data from MASTER... If the problem persists try to set the 'repl-timeout' parameter in redis.conf to a larger value.".into()),
            Ok(Ok(0)) => Err("Master closed the connection during the handshake or the sync".into()),
            Ok(Err(e)) => Err(format!("I/O error reading from MASTER: {e}")),
            Ok(Ok(_)) => Ok(()),
        }
    }

    /// One reply line (without its CRLF).
    async fn line(&mut self) -> Result<String, String> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let l = String::from_utf8_lossy(&self.buf[..i])
                    .trim_end()
                    .to_string();
                bytes::Buf::advance(&mut self.buf, i + 1);
                return Ok(l);
            }
            self.read_more().await?;
        }
    }

    /// A reply line, skipping the newlines a master sends to keep the
    /// link alive while it prepares the RDB.
    async fn reply(&mut self) -> Result<String, String> {
        loop {
            let l = self.line().await?;
            if !l.is_empty() {
                return Ok(l);
            }
        }
    }

    async fn send(&mut self, args: &[&[u8]]) -> Result<(), String> {
        let mut b = Vec::new();
        crate::persist::aof::encode(&mut b, args);
        match tokio::time::timeout(self.limit, self.sock.write_all(&b)).await {
            Ok(Ok(())) => Ok(()),
            _ => Err("Error writing to MASTER".into()),
        }
    }

    /// A command and its one-line reply.
    async fn ask(&mut self, args: &[&[u8]]) -> Result<String, String> {
        self.send(args).await?;
        self.line().await
    }
}

/// What `REPLICAOF`'s handshake needs from the config.
struct Settings {
    limit: Duration,
    auth: Option<(String, String)>,
    port: u16,
    ip: String,
    dir: std::path::PathBuf,
    rdb: std::path::PathBuf,
    backlog: usize,
    /// `bind-source-addr`: the address the link connects from.
    source: Option<String>,
    /// `tls-replication yes`: the link speaks TLS (or the error that
    /// keeps it from doing so: its certificates could not be read).
    tls: Result<Option<tokio_rustls::TlsConnector>, String>,
}

impl Link<'_> {
    async fn settings(&self) -> Settings {
        let store = self.shared.lock_store().await;
        let c = store.config();
        let r = &c.repl;
        Settings {
            limit: Duration::from_secs(r.timeout.max(1) as u64),
            auth: (!r.masterauth.is_empty()).then(|| (r.masteruser.clone(), r.masterauth.clone())),
            // Redis announces its TLS port when replication is over TLS.
            port: if r.replica_announce_port > 0 {
                r.replica_announce_port as u16
            } else if r.tls_replication && c.tls_port > 0 {
                c.tls_port
            } else {
                self.bound.unwrap_or(c.port)
            },
            ip: r.replica_announce_ip.clone(),
            dir: std::path::PathBuf::from(&c.dir),
            rdb: crate::persist::rdb_path(c),
            backlog: r.backlog_size,
            source: (!r.bind_source_addr.is_empty()).then(|| r.bind_source_addr.clone()),
            tls: crate::tls::connector(c),
        }
    }

    /// One connection to the master, until it fails.
    async fn session(&mut self, host: &str, port: u16) -> Result<(), String> {
        let set = self.settings().await;
        tracing::info!("Connecting to MASTER {host}:{port}");
        self.repl.master_status(self.gen, MasterLink::Connecting);
        let connect = connect_from(host, port, set.source.as_deref());
        let sock = match tokio::time::timeout(set.limit, connect).await {
            Err(_) => return Err("Timeout connecting to the MASTER...".into()),
            Ok(Err(e)) => return Err(format!("Unable to connect to MASTER: {e}")),
            Ok(Ok(s)) => s,
        };
        let _ = sock.set_nodelay(true);
        let peer = sock.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        let local = sock.local_addr().map(|a| a.to_string()).unwrap_or_default();
        let sock: Box<dyn LinkStream> = match &set.tls {
            Err(e) => return Err(format!("Unable to connect to MASTER: {e}")),
            Ok(None) => Box::new(sock),
            Ok(Some(tls)) => {
                let name = rustls_pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| format!("Unable to connect to MASTER: {e}"))?;
                match tokio::time::timeout(set.limit, tls.connect(name, sock)).await {
                    Err(_) => return Err("Timeout connecting to the MASTER...".into()),
                    Ok(Err(e)) => return Err(format!("Unable to connect to MASTER: {e}")),
                    Ok(Ok(s)) => Box::new(s),
                }
            }
        };
        tracing::info!("MASTER <-> REPLICA sync started");
        let mut c = Conn {
            sock,
            buf: BytesMut::with_capacity(64 * 1024),
            limit: set.limit,
        };
        tracing::info!("Non blocking connect for SYNC fired the event.");
        let pong = c.ask(&[b"PING"]).await?;
        // -NOAUTH and -NOPERM mean the master is there: AUTH follows.
        if pong.starts_with('-')
            && !pong.starts_with("-NOAUTH")
            && !pong.starts_with("-NOPERM")
            && !pong.starts_with("-ERR operation not permitted")
        {
            return Err(format!("Error reply to PING from master: '{pong}'"));
        }
        tracing::info!("Master replied to PING, replication can continue...");
        if let Some((user, pass)) = &set.auth {
            let r = if user.is_empty() {
                c.ask(&[b"AUTH", pass.as_bytes()]).await?
            } else {
                c.ask(&[b"AUTH", user.as_bytes(), pass.as_bytes()]).await?
            };
            if r.starts_with('-') {
                return Err(format!("Unable to AUTH to MASTER: {r}"));
            }
        }
        let p = set.port.to_string();
        let r = c
            .ask(&[b"REPLCONF", b"listening-port", p.as_bytes()])
            .await?;
        if r.starts_with('-') {
            tracing::info!(
                "(Non critical) Master does not understand REPLCONF listening-port: {r}"
            );
        }
        if !set.ip.is_empty() {
            let r = c
                .ask(&[b"REPLCONF", b"ip-address", set.ip.as_bytes()])
                .await?;
            if r.starts_with('-') {
                tracing::info!(
                    "(Non critical) Master does not understand REPLCONF ip-address: {r}"
                );
            }
        }
        // `capa latchkey`: we take lock records (Redis ignores a capa it
        // does not know).
        let r = c
            .ask(&[
                b"REPLCONF",
                b"capa",
                b"eof",
                b"capa",
                b"psync2",
                b"capa",
                b"latchkey",
            ])
            .await?;
        if r.starts_with('-') {
            tracing::info!("(Non critical) Master does not understand REPLCONF capa: {r}");
        }
        let (replid, off, lk_seq) = self.repl.psync_args();
        if let Some(seq) = lk_seq.filter(|_| replid != "?") {
            // The lock records applied so far, for a partial resync of
            // them (a Redis master does not know it: not an error).
            let n = seq.to_string();
            c.ask(&[b"REPLCONF", b"lk-seq", n.as_bytes()]).await?;
        }
        if replid == "?" {
            tracing::info!("Partial resynchronization not possible (no cached master)");
        } else {
            tracing::info!("Trying a partial resynchronization (request {replid}:{off}).");
        }
        let o = off.to_string();
        // A master handing over (FAILOVER) asks its target to take over.
        let failover = self.repl.failover_in_progress();
        let mut psync: Vec<&[u8]> = vec![b"PSYNC", replid.as_bytes(), o.as_bytes()];
        if failover {
            psync.push(b"FAILOVER");
        }
        if let Err(e) = c.send(&psync).await {
            if failover {
                let mut store = self.shared.lock_store().await;
                crate::commands::replication::abort_failover(
                    &mut store,
                    "Write error to failover target",
                );
            }
            return Err(e);
        }
        let r = c.reply().await?;
        if failover {
            let accepted = r.starts_with("+FULLRESYNC") || r.starts_with("+CONTINUE");
            let mut store = self.shared.lock_store().await;
            crate::commands::replication::failover_answered(&mut store, accepted);
        }
        if let Some(rest) = r.strip_prefix("+FULLRESYNC") {
            let mut it = rest.split_whitespace();
            let (Some(id), Some(off)) = (it.next(), it.next().and_then(|o| o.parse::<i64>().ok()))
            else {
                return Err(format!("Unexpected reply to PSYNC from master: {r}"));
            };
            tracing::info!("Full resync from master: {id}:{off}");
            self.repl.master_status(self.gen, MasterLink::Sync);
            self.full_sync(&mut c, &set, id, off).await?;
        } else if let Some(rest) = r.strip_prefix("+CONTINUE") {
            tracing::info!("Successful partial resynchronization with master.");
            let id = rest.trim();
            self.repl
                .continued((!id.is_empty()).then_some(id), set.backlog);
            tracing::info!("MASTER <-> REPLICA sync: Master accepted a Partial Resynchronization.");
        } else if r.starts_with("-NOMASTERLINK") || r.starts_with("-LOADING") {
            return Err(format!(
                "Master is currently unable to PSYNC but should be in the future: {r}"
            ));
        } else {
            return Err(format!("Unexpected reply to PSYNC from master: {r}"));
        }
        self.register(&peer, &local).await;
        self.connected = true;
        self.repl.master_status(self.gen, MasterLink::Connected);
        self.stream(c).await
    }

    /// The RDB of a full sync: to a temp file in `dir`, then loaded in
    /// place of the dataset; or, diskless (`repl-diskless-load swapdb`, or
    /// `on-empty-db` with no key), received in memory and loaded from
    /// there, no file written (Redis's useDisklessLoad).
    async fn full_sync(
        &mut self,
        c: &mut Conn,
        set: &Settings,
        replid: &str,
        offset: i64,
    ) -> Result<(), String> {
        let head = c.reply().await?;
        let Some(h) = head.strip_prefix('$') else {
            return Err(format!(
                "Bad protocol from MASTER, the first byte is not '$' (we received '{head}'), are you sure the host and port are right?"
            ));
        };
        let (diskless, swap) = {
            let store = self.shared.lock_store().await;
            match store.config().repl.diskless_load.as_str() {
                "swapdb" => (true, true),
                "on-empty-db" => (store.ks.total_keys() == 0, false),
                _ => (false, false),
            }
        };
        if diskless {
            let mut bytes = Vec::new();
            self.receive(c, h, &mut bytes, "to parser").await?;
            self.load(&bytes, swap, replid, offset, set.backlog).await?;
            tracing::info!("MASTER <-> REPLICA sync: Finished with success");
            return Ok(());
        }
        let tmp = set.dir.join(format!(
            "temp-{}.{}.rdb",
            crate::util::now_ms() / 1000,
            std::process::id()
        ));
        let r = self.receive_file(c, h, &tmp).await;
        if let Err(e) = r {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        let bytes = std::fs::read(&tmp).map_err(|e| {
            format!("Failed trying to load the MASTER synchronization DB from disk: {e}")
        })?;
        if let Err(e) = self.load(&bytes, false, replid, offset, set.backlog).await {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        if let Err(e) = std::fs::rename(&tmp, &set.rdb) {
            tracing::warn!("Failed trying to rename the temp DB into {} in MASTER <-> REPLICA synchronization: {e}", set.rdb.display());
            let _ = std::fs::remove_file(&tmp);
        }
        tracing::info!("MASTER <-> REPLICA sync: Finished with success");
        Ok(())
    }

    /// Loads the master's RDB in place of the dataset; the master's
    /// history becomes ours.
    async fn load(
        &self,
        bytes: &[u8],
        swap: bool,
        replid: &str,
        offset: i64,
        backlog: usize,
    ) -> Result<(), String> {
        let mut store = self.shared.lock_store().await;
        let shared = self.shared.clone();
        let mut alloc = move || shared.client_id();
        match crate::commands::server::load_from_master(&mut store, bytes, swap, &mut alloc) {
            Ok((_, lock_seq)) => {
                self.repl.full_synced(replid, offset, backlog, lock_seq);
                Ok(())
            }
            Err(e) => Err(format!(
                "Failed trying to load the MASTER synchronization DB from disk: {e}"
            )),
        }
    }

    /// Reads the RDB after its `$` header into the file at `path`.
    async fn receive_file(
        &self,
        c: &mut Conn,
        h: &str,
        path: &std::path::Path,
    ) -> Result<(), String> {
        let mut f = std::fs::File::create(path).map_err(|e| {
            format!("Opening the temp file needed for MASTER <-> REPLICA synchronization: {e}")
        })?;
        self.receive(c, h, &mut f, "to disk").await?;
        f.sync_all().map_err(write_error)
    }

    /// Reads the RDB after its `$` header (a length, or the diskless
    /// `EOF:<mark>`) into `out`; `to` names where in the log line.
    async fn receive(
        &self,
        c: &mut Conn,
        h: &str,
        out: &mut (dyn std::io::Write + Send),
        to: &str,
    ) -> Result<(), String> {
        if let Some(mark) = h.strip_prefix("EOF:") {
            let mark = mark.as_bytes().to_vec();
            if mark.len() != 40 {
                return Err(format!("Bad EOF mark from MASTER: {h}"));
            }
            tracing::info!(
                "MASTER <-> REPLICA sync: receiving streamed RDB from master with EOF {to}"
            );
            let mut read = 0i64;
            // The last 40 bytes are held back until the stream goes on.
            let mut pending: Vec<u8> = Vec::new();
            loop {
                if c.buf.is_empty() {
                    c.read_more().await?;
                }
                read += c.buf.len() as i64;
                pending.extend_from_slice(&c.buf);
                c.buf.clear();
                self.repl.master_transfer(-1, read);
                if pending.ends_with(&mark) {
                    out.write_all(&pending[..pending.len() - 40])
                        .map_err(write_error)?;
                    break;
                }
                if pending.len() > 40 {
                    let cut = pending.len() - 40;
                    out.write_all(&pending[..cut]).map_err(write_error)?;
                    pending.drain(..cut);
                }
            }
        } else {
            let len: i64 = h
                .parse()
                .map_err(|_| format!("Bad protocol from MASTER, invalid bulk length: {h}"))?;
            tracing::info!("MASTER <-> REPLICA sync: receiving {len} bytes from master {to}");
            let mut left = len.max(0) as usize;
            while left > 0 {
                if c.buf.is_empty() {
                    c.read_more().await?;
                }
                let n = left.min(c.buf.len());
                out.write_all(&c.buf[..n]).map_err(write_error)?;
                c.buf.advance(n);
                left -= n;
                self.repl.master_transfer(len, len - left as i64);
            }
        }
        Ok(())
    }

    /// The master client appears in CLIENT LIST (`CLIENT KILL TYPE
    /// master` ends the link).
    async fn register(&self, peer: &str, local: &str) {
        let mut store = self.shared.lock_store().await;
        store.clients.insert(ClientHandle::new(
            self.id,
            peer.to_string(),
            local.to_string(),
            -1,
            crate::util::now_ms(),
            self.signal.clone(),
        ));
        self.repl.set_master_client(self.gen, Some(self.id));
    }

    /// The command stream, until the link fails.
    async fn stream(&mut self, mut c: Conn) -> Result<(), String> {
        let mut client = crate::commands::replay::MasterClient::new(self.id, self.repl.master_db());
        let mut parser = Parser::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_io = Instant::now();
        let mut pause_rx = self.shared.lock_store().await.pause_watch();
        // Commands parsed but not run: clients are paused (CLIENT PAUSE, a
        // SHUTDOWN waiting for our replicas), and Redis postpones the
        // master client as any other, so the offset stays until the end.
        let mut held: Option<(Vec<Vec<Bytes>>, Bytes)> = None;
        loop {
            if held.is_none() {
                // Every complete command in the buffer, run under one lock.
                let mut frames: Vec<Vec<Bytes>> = Vec::new();
                // The bytes as they came, for this server's own backlog: a
                // copy here keeps the clients' parser as it is.
                let all = Bytes::copy_from_slice(&c.buf);
                drain_frames(&mut parser, &mut c.buf, &mut frames)
                    .map_err(|e| format!("Protocol error from master: {}", e.message()))?;
                let taken = all.slice(..all.len() - c.buf.len());
                if !taken.is_empty() {
                    held = Some((frames, taken));
                }
            }
            let mut paused_until = None;
            if let Some((mut frames, taken)) = held.take() {
                let mut ack = false;
                {
                    let mut store = self.shared.lock_store().await;
                    if !self.repl.is_current(self.gen) {
                        // REPLICAOF ran since the read: the old master's
                        // bytes must not land (Redis frees its client).
                        return Ok(());
                    }
                    let run = self.run_batch(&mut store, &mut client, &frames, &taken)?;
                    ack |= run.ack;
                    if run.ran < frames.len() {
                        paused_until = store.paused().map(|p| p.until);
                        held = Some((frames.split_off(run.ran), taken.slice(run.done..)));
                    }
                    if run.done > 0 {
                        let st = &mut *store;
                        crate::persist::aof_write_out(&mut st.ks, &mut st.persist);
                        self.repl.set_master_db(client.db());
                    }
                }
                if ack {
                    self.ack(&mut c).await?;
                }
            }
            tokio::select! {
                r = c.sock.read_buf(&mut c.buf) => match r {
                    Ok(0) | Err(_) => return Ok(()),
                    Ok(n) => {
                        last_io = Instant::now();
                        self.repl.master_read(n);
                    }
                },
                _ = tick.tick() => {
                    if last_io.elapsed() > c.limit {
                        return Err("MASTER timeout: no data nor PING received...".into());
                    }
                    self.ack(&mut c).await?;
                }
                _ = self.signal.kill.notified() => return Ok(()),
                _ = pause_end(&mut pause_rx, paused_until), if paused_until.is_some() => {}
            }
        }
    }

    /// Runs a batch of the master's frames in order, until one must wait
    /// (clients are paused: a write waits for the pause's end, as Redis
    /// holds its master client). Each command's bytes are counted and fed
    /// as they came (`Replication::feed_master`); each lock frame (from a
    /// Latchkey master) is applied and passed on outside the offsets.
    fn run_batch(
        &self,
        store: &mut Store,
        client: &mut crate::commands::replay::MasterClient,
        frames: &[Vec<Bytes>],
        taken: &Bytes,
    ) -> Result<Batch, String> {
        // Each frame's bytes, to count only those that ran; None if the
        // master's encoding is not the canonical one (then the batch runs
        // or waits whole).
        let lens: Option<Vec<usize>> = {
            let l: Vec<usize> = frames.iter().map(|f| locklog::frame_len(f)).collect();
            (l.iter().sum::<usize>() == taken.len()).then_some(l)
        };
        let locks = frames.iter().any(|f| locklog::is_lock_frame(f));
        if locks && lens.is_none() {
            return Err("Protocol error from master: a lock frame not as sent".into());
        }
        let mut b = Batch {
            ran: frames.len(),
            done: 0,
            ack: false,
        };
        if lens.is_none() && store.paused().is_some() {
            b.ran = 0;
            return Ok(b);
        }
        let (mut at, mut fed) = (0usize, 0usize);
        for (i, args) in frames.iter().enumerate() {
            let len = lens.as_ref().map_or(0, |l| l[i]);
            if locks && locklog::is_lock_frame(args) {
                let Some((seq, r)) = locklog::decode(args) else {
                    return Err("Protocol error from master: a malformed lock frame".into());
                };
                if store.paused().is_some() {
                    b.ran = i;
                    break;
                }
                if fed < at {
                    self.repl.feed_master(&taken[fed..at]);
                }
                let shared = self.shared.clone();
                let mut alloc = move || shared.client_id();
                store.apply_lock(r, &mut alloc);
                self.repl.feed_master_lock(seq, taken.slice(at..at + len));
                fed = at + len;
            } else if !args.is_empty() {
                let getack = args.len() >= 2
                    && args[0].eq_ignore_ascii_case(b"replconf")
                    && args[1].eq_ignore_ascii_case(b"getack");
                if getack {
                    b.ack = true;
                } else if !args[0].eq_ignore_ascii_case(b"ping") && !client.run(store, args) {
                    b.ran = i;
                    break;
                }
            }
            at += len;
        }
        b.done = match &lens {
            Some(_) => at,
            None if b.ran == 0 => 0,
            None => taken.len(),
        };
        if fed < b.done {
            // What the master sent, as it came, for this server's own
            // backlog and replicas (a sub-replica gets the master's
            // stream, offsets included).
            self.repl.feed_master(&taken[fed..b.done]);
        }
        Ok(b)
    }

    async fn ack(&self, c: &mut Conn) -> Result<(), String> {
        let off = self.repl.offset().to_string();
        c.send(&[b"REPLCONF", b"ACK", off.as_bytes()]).await
    }
}

/// Until a pause ends: it is lifted (the watch changes) or its time
/// (unix ms) is up.
async fn pause_end(rx: &mut tokio::sync::watch::Receiver<u64>, until: Option<i64>) {
    let ms = until.map_or(0, |u| u.saturating_sub(crate::util::now_ms()).max(0));
    tokio::select! {
        _ = rx.changed() => {}
        _ = tokio::time::sleep(Duration::from_millis(ms as u64)) => {}
    }
}

/// What `run_batch` did: the frames run (the rest wait), the bytes they
/// took, whether an ACK was asked.
struct Batch {
    ran: usize,
    done: usize,
    ack: bool,
}

fn write_error(e: std::io::Error) -> String {
    format!("Write error or short write writing to the DB dump file needed for MASTER <-> REPLICA synchronization: {e}")
}

/// Connects to `host:port`, from `source` (`bind-source-addr`) when set,
/// as Redis's anetTcpNonBlockBindConnect: each address of the host in
/// turn, the socket bound to the source address first.
async fn connect_from(host: &str, port: u16, source: Option<&str>) -> std::io::Result<TcpStream> {
    let Some(source) = source else {
        return TcpStream::connect((host, port)).await;
    };
    let src: std::net::IpAddr = source.parse().map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("invalid bind-source-addr '{source}'"),
        )
    })?;
    let mut last = None;
    for addr in tokio::net::lookup_host((host, port)).await? {
        if addr.is_ipv4() != src.is_ipv4() {
            continue;
        }
        let sock = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        sock.bind(std::net::SocketAddr::new(src, 0))?;
        match sock.connect(addr).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::AddrNotAvailable,
            "no address of the master's family of bind-source-addr",
        )
    }))
}
