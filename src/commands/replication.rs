//! Replication's commands on the primary: REPLCONF, SYNC and PSYNC (a
//! connection becomes a replica; its task then runs the link,
//! `runtime::link`), WAIT and ROLE; REPLICAOF; FAILOVER (with what the
//! runtime calls to drive it: `update_failover`, `failover_answered`,
//! `abort_failover`). The state is `crate::replication`'s.

use bytes::Bytes;

use super::*;
use crate::blocking::TimeoutReply;
use crate::replication::{FailoverTick, Psync, SyncRequest};
use crate::server::PausePurpose;
use crate::util::eq_ic;

pub static COMMANDS: &[Spec] = &[
    spec(
        "replconf",
        -1,
        ADMIN | NOSCRIPT | LOADING | STALE | ALLOW_BUSY,
        (0, 0, 0),
        "server",
        "3.0.0",
        "An internal command for configuring the replication stream",
        &["admin", "slow", "dangerous"],
        replconf,
    ),
    spec(
        "psync",
        -3,
        ADMIN | NOSCRIPT | NO_ASYNC_LOADING | NO_MULTI,
        (0, 0, 0),
        "server",
        "2.8.0",
        "Internal command used for replication",
        &["admin", "slow", "dangerous"],
        psync,
    ),
    spec(
        "sync",
        1,
        ADMIN | NOSCRIPT | NO_ASYNC_LOADING | NO_MULTI,
        (0, 0, 0),
        "server",
        "1.0.0",
        "Internal command used for replication",
        &["admin", "slow", "dangerous"],
        sync,
    ),
    spec(
        "wait",
        3,
        NOSCRIPT,
        (0, 0, 0),
        "generic",
        "3.0.0",
        "Wait for the synchronous replication of all the write commands sent in the context of the current connection",
        &["slow", "connection"],
        wait,
    ),
    spec(
        "replicaof",
        3,
        ADMIN | NOSCRIPT | STALE | NO_ASYNC_LOADING,
        (0, 0, 0),
        "server",
        "5.0.0",
        "Configure a server as replica of another, or promote it to a master.",
        &["admin", "slow", "dangerous"],
        replicaof,
    ),
    spec(
        "slaveof",
        3,
        ADMIN | NOSCRIPT | STALE | NO_ASYNC_LOADING,
        (0, 0, 0),
        "server",
        "1.0.0",
        "Configure a server as replica of another, or promote it to a master.",
        &["admin", "slow", "dangerous"],
        replicaof,
    ),
    spec(
        "failover",
        -1,
        ADMIN | NOSCRIPT | STALE,
        (0, 0, 0),
        "server",
        "6.2.0",
        "Start a coordinated failover between this server and one of its replicas.",
        &["admin", "slow", "dangerous"],
        failover,
    ),
    spec(
        "role",
        1,
        NOSCRIPT | LOADING | STALE | FAST,
        (0, 0, 0),
        "server",
        "2.8.12",
        "Return the role of the instance in the context of replication",
        &["admin", "fast", "dangerous"],
        role,
    ),
];

/// Redis's NET_HOST_STR_LEN.
const HOST_MAX: usize = 256;

/// REPLCONF <option> <value> ...: what a replica tells before SYNC/PSYNC
/// (listening-port, ip-address, capa), and on the link its ACKs (no
/// reply). GETACK is for replicas; a primary ignores it.
fn replconf(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len().is_multiple_of(2) {
        return ctx.error(SYNTAX);
    }
    for pair in args[1..].chunks(2) {
        let (opt, val) = (&pair[0], &pair[1]);
        if eq_ic(opt, "listening-port") {
            match crate::util::parse_i64(val) {
                Some(p) => ctx.conn.replica.port = p as u16,
                None => return ctx.error(NOT_INT),
            }
        } else if eq_ic(opt, "ip-address") {
            if val.len() >= HOST_MAX {
                return ctx.error(&format!(
                    "ERR REPLCONF ip-address provided by replica instance is too long: {} bytes",
                    val.len()
                ));
            }
            ctx.conn.replica.ip = Some(String::from_utf8_lossy(val).into_owned());
        } else if eq_ic(opt, "capa") {
            // Unknown capabilities are ignored, as Redis.
            if eq_ic(val, "eof") {
                ctx.conn.replica.eof = true;
            } else if eq_ic(val, "psync2") {
                ctx.conn.replica.psync2 = true;
            } else if eq_ic(val, "latchkey") {
                // A Latchkey replica: it takes the lock records.
                ctx.conn.replica.latchkey = true;
            }
        } else if eq_ic(opt, "rdb-only") {
            match crate::util::parse_i64(val) {
                None => return ctx.error(NOT_INT),
                Some(n @ 0..=1) => ctx.conn.replica.rdb_only = n == 1,
                Some(_) => {
                    return ctx.error("ERR value is out of range, value must between 0 and 1")
                }
            }
        } else if eq_ic(opt, "rdb-filter-only") {
            // Only the function libraries may be asked for: the data is
            // always filtered out, as Redis 7.0's.
            let mut functions = false;
            for f in String::from_utf8_lossy(val).split_whitespace() {
                if f.eq_ignore_ascii_case("functions") {
                    functions = true;
                } else {
                    return ctx.error(&format!("ERR Unsupported rdb-filter-only option: {f}"));
                }
            }
            ctx.conn.replica.filter = Some(functions);
        } else if eq_ic(opt, "lk-seq") {
            // A Latchkey replica's last lock record applied: a partial
            // resync must give it every later one.
            match crate::util::parse_i64(val).and_then(|n| u64::try_from(n).ok()) {
                Some(n) => ctx.conn.replica.lk_seq = Some(n),
                None => return ctx.error(NOT_INT),
            }
        } else if eq_ic(opt, "ack") {
            // Only from a replica, never answered.
            if let Some(off) = crate::util::parse_i64(val) {
                ctx.store.repl.ack(ctx.conn.id, off);
            }
            return;
        } else if eq_ic(opt, "getack") {
            // Asked of replicas; a primary ignores it (no reply).
            return;
        } else {
            let o = String::from_utf8_lossy(opt);
            return ctx.error(&format!("ERR Unrecognized REPLCONF option: {o}"));
        }
    }
    ctx.out.ok();
}

/// PSYNC replid offset.
fn psync(ctx: &mut Ctx, args: &[Bytes]) {
    start_sync(ctx, Some(args));
}

/// SYNC (old replicas, redis-cli --replica): always a full sync.
fn sync(ctx: &mut Ctx, _args: &[Bytes]) {
    start_sync(ctx, None);
}

/// Redis's syncCommand: the connection becomes a replica, continuing
/// from the backlog or waiting for a full sync.
fn start_sync(ctx: &mut Ctx, psync: Option<&[Bytes]>) {
    let id = ctx.conn.id;
    if ctx.conn.replica.handoff || ctx.store.repl.is_replica(id) {
        return;
    }
    // `PSYNC <replid> <offset> FAILOVER` from our master handing over: a
    // replica of that history becomes the master, then answers the PSYNC
    // as any (Redis's syncCommand).
    if let Some(a) = psync.filter(|a| a.len() > 3 && eq_ic(&a[3], "failover")) {
        tracing::warn!(
            "Failover request received for replid {}.",
            String::from_utf8_lossy(&a[1])
        );
        if !ctx.store.repl.has_master() {
            return ctx.error("ERR PSYNC FAILOVER can't be sent to a master.");
        }
        if !String::from_utf8_lossy(&a[1]).eq_ignore_ascii_case(&ctx.store.repl.replid()) {
            return ctx.error("ERR PSYNC FAILOVER replid must match my replid.");
        }
        become_master(ctx);
        let who = super::connection::client_info_string(ctx.store, ctx.conn.id);
        tracing::info!("MASTER MODE enabled (failover request from '{who}')");
    }
    if ctx.store.repl.failing_over() {
        return ctx.error("NOMASTERLINK Can't SYNC while failing over");
    }
    let linked = ctx
        .store
        .repl
        .master()
        .is_none_or(|m| m.status == crate::replication::MasterLink::Connected);
    if !linked {
        return ctx.error("NOMASTERLINK Can't SYNC while not connected with my master");
    }
    if !ctx.out.is_empty() {
        return ctx.error("ERR SYNC and PSYNC are invalid with pending output");
    }
    let peer_ip = ctx
        .store
        .clients
        .get(&id)
        .map(|c| match c.addr.rsplit_once(':') {
            Some((ip, _)) => ip.trim_matches(['[', ']']).to_string(),
            None => c.addr.clone(),
        })
        .unwrap_or_default();
    let hello = ctx.conn.replica.clone();
    if hello.filter.is_some() && !hello.eof {
        return ctx.error("ERR Filtered replica requires EOF capability");
    }
    let name = crate::replication::replica_name(&hello, &peer_ip);
    tracing::info!("Replica {name} asks for synchronization");
    let (replid, offset) = match psync {
        Some(a) => match crate::util::parse_i64(&a[2]) {
            Some(off) => (Some(a[1].as_ref()), off),
            None => {
                tracing::warn!("Replica {name} asks for synchronization but with a wrong offset");
                return ctx.error(NOT_INT);
            }
        },
        None => (None, 0),
    };
    if let Some(feed) = ctx.store.repl.feed_once() {
        let sink = ctx.store.attach_sink(feed);
        ctx.store.repl.attached_as(sink);
    }
    // What was changed before is in the stream (and the backlog) first.
    crate::persist::aof_write_out(&mut ctx.store.ks, &mut ctx.store.persist);
    let repl = ctx.store.repl.clone();
    let filtered = hello
        .filter
        .map(|functions| crate::persist::filtered_image(ctx.store, functions));
    let req = SyncRequest {
        id,
        peer_ip,
        hello: &hello,
        replid,
        offset,
        filtered,
    };
    let (outcome, _) = repl.psync(req, ctx.store.config());
    ctx.conn.replica.handoff = true;
    if outcome == Psync::Full && hello.filter.is_none() {
        repl.start_pending(ctx.store, true);
    }
}

/// WAIT numreplicas timeout: the replicas that acknowledged the stream up
/// to this connection's writes; blocks until `numreplicas` did or the
/// timeout (ms; 0: none). Inside MULTI or a script it answers at once.
fn wait(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(numreplicas) = crate::util::parse_i64(&args[1]) else {
        return ctx.error(NOT_INT);
    };
    let deadline = match super::wait::deadline_ms(&args[2]) {
        Ok(d) => d,
        Err(e) => return ctx.error(e),
    };
    // The caller's writes go to the stream first: its offset follows them.
    crate::persist::aof_write_out(&mut ctx.store.ks, &mut ctx.store.persist);
    let wait = TimeoutReply::ReplAcks {
        offset: ctx.store.repl.data_offset(),
        numreplicas: numreplicas.max(0) as u64,
    };
    if super::wait::acks_reached(ctx.store, wait) {
        return super::timeout_reply(ctx.store, ctx.conn.id, ctx.out, wait);
    }
    // Not while clients are paused: the offset must stay still (a
    // FAILOVER, a SHUTDOWN waiting); the replicas' periodic ACKs answer.
    if ctx.store.paused().is_none() {
        ctx.store.repl.request_acks();
    }
    super::block_on(ctx, &[], deadline, wait);
}

/// REPLICAOF host port | NO ONE (and SLAVEOF), as Redis's
/// replicaofCommand: the master link itself is the runtime's task, which
/// follows the replication state.
fn replicaof(ctx: &mut Ctx, args: &[Bytes]) {
    if ctx.store.repl.failing_over() {
        return ctx.error("ERR REPLICAOF not allowed while failing over.");
    }
    if eq_ic(&args[1], "no") && eq_ic(&args[2], "one") {
        if become_master(ctx) {
            let who = super::connection::client_info_string(ctx.store, ctx.conn.id);
            tracing::info!("MASTER MODE enabled (user request from '{who}')");
        }
        return ctx.out.ok();
    }
    if ctx.store.repl.is_replica(ctx.conn.id) {
        return ctx.error("ERR Command is not valid when client is a replica.");
    }
    let Some(port) = crate::util::parse_i64(&args[2]).and_then(|p| u16::try_from(p).ok()) else {
        return ctx.error("ERR Invalid master port");
    };
    let host = String::from_utf8_lossy(&args[1]).into_owned();
    let master_client = ctx.store.repl.master_client();
    let was_master = !ctx.store.repl.has_master();
    if !ctx.store.repl.set_master(&host, port) {
        tracing::info!("REPLICAOF would result into synchronization with the master we are already connected with. No operation performed.");
        return ctx.out.simple("OK Already connected to specified master");
    }
    drop_master_client(ctx.store, master_client);
    ctx.store.unblock_all_for_replica();
    if was_master {
        ctx.store.demote_sessions();
    }
    follow_master(ctx.store);
    let who = super::connection::client_info_string(ctx.store, ctx.conn.id);
    tracing::info!("REPLICAOF {host}:{port} enabled (user request from '{who}')");
    ctx.out.ok();
}

/// REPLICAOF NO ONE's work (Redis's replicationUnsetMaster), also done by
/// `PSYNC ... FAILOVER`: false when this server was a master already.
fn become_master(ctx: &mut Ctx) -> bool {
    let master_client = ctx.store.repl.master_client();
    if !ctx.store.repl.unset_master() {
        return false;
    }
    master_mode(ctx.store, master_client);
    true
}

/// After `unset_master`: the old master's client goes, and the backlog
/// kept from the master goes on with our own writes (siblings re-pointed
/// at us continue from it).
fn master_mode(store: &mut Store, master_client: Option<crate::ids::ClientId>) {
    drop_master_client(store, master_client);
    // The old primary's sessions are detached: their holds stay for their
    // clients to resume, until the grace ends (never before an old
    // primary on the other side of a cut has told its holders LOST).
    let grace = store.config().tp_failover_grace;
    let least = crate::replication::DETACHED_MIN.as_millis() as u64;
    store.ks.detach_replicated(grace, least);
    if let Some(feed) = store.repl.feed_once() {
        let sink = store.attach_sink(feed);
        store.repl.attached_as(sink);
    }
    follow_master(store);
    // Their places in lines stay too: a key left free with its grant not
    // yet here goes to the first in line now (its records to replicas).
    super::settle(store, None);
}

/// The old master's client leaves the client table at once, as Redis
/// frees server.master in replicaofCommand: a CLIENT KILL in the same
/// transaction (Sentinel's) must not find it, now of no type but normal.
/// Its link task, following the change, ends a moment later.
fn drop_master_client(store: &mut Store, id: Option<crate::ids::ClientId>) {
    if let Some(id) = id {
        if store.clients.remove(&id).is_some() {
            store.client_gone(id);
        }
    }
}

/// The config's `replicaof` follows the master this server follows
/// (CONFIG GET, CONFIG REWRITE), and expiry follows the role.
fn follow_master(store: &mut Store) {
    let mut c = store.config().clone();
    c.repl.replicaof = store.repl.master().map(|m| (m.host, m.port));
    store.set_config(c);
    store.follow_role();
}

/// FAILOVER [TO host port [FORCE]] [ABORT] [TIMEOUT ms], as Redis's
/// failoverCommand: writes are paused, and once the target (or any
/// replica) acknowledged our offset this server follows it and asks it
/// `PSYNC ... FAILOVER` (`update_failover`, the master link).
fn failover(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len() == 2 && eq_ic(&args[1], "abort") {
        if !abort_failover(ctx.store, "Failover manually aborted") {
            return ctx.error("ERR No failover in progress.");
        }
        return ctx.out.ok();
    }
    let (mut timeout, mut force, mut target) = (0i64, false, None);
    let mut j = 1;
    while j < args.len() {
        let a = &args[j];
        if eq_ic(a, "timeout") && j + 1 < args.len() && timeout == 0 {
            let Some(t) = crate::util::parse_i64(&args[j + 1]) else {
                return ctx.error(NOT_INT);
            };
            if t <= 0 {
                return ctx.error("ERR FAILOVER timeout must be greater than 0");
            }
            timeout = t;
            j += 2;
        } else if eq_ic(a, "to") && j + 2 < args.len() && target.is_none() {
            let Some(port) = crate::util::parse_i64(&args[j + 2]) else {
                return ctx.error(NOT_INT);
            };
            target = Some((String::from_utf8_lossy(&args[j + 1]).into_owned(), port));
            j += 3;
        } else if eq_ic(a, "force") && !force {
            force = true;
            j += 1;
        } else {
            return ctx.error(SYNTAX);
        }
    }
    let repl = &ctx.store.repl;
    if repl.failing_over() {
        return ctx.error("ERR FAILOVER already in progress.");
    }
    if repl.has_master() {
        return ctx.error("ERR FAILOVER is not valid when server is a replica.");
    }
    if repl.count() == 0 {
        return ctx.error("ERR FAILOVER requires connected replicas.");
    }
    if force && (timeout == 0 || target.is_none()) {
        return ctx.error(
            "ERR FAILOVER with force option requires both a timeout and target HOST and IP.",
        );
    }
    let target = match target {
        Some((host, port)) => {
            let found = u16::try_from(port)
                .ok()
                .and_then(|p| repl.find_replica(&host, p).map(|online| (p, online)));
            let Some((port16, online)) = found else {
                return ctx.error("ERR FAILOVER target HOST and PORT is not a replica.");
            };
            if !online {
                return ctx.error("ERR FAILOVER target replica is not online.");
            }
            tracing::info!("FAILOVER requested to {host}:{port}.");
            Some((host, port16))
        }
        None => {
            tracing::info!("FAILOVER requested to any replica.");
            None
        }
    };
    let end = (timeout > 0).then(|| crate::util::now_ms().saturating_add(timeout));
    // Lock records move no offset: a PING after the last one makes the
    // target's ACK of our offset say that it applied them (and sends
    // those that could wait, `LAZY_RECORDS`).
    crate::persist::aof_write_out(&mut ctx.store.ks, &mut ctx.store.persist);
    let before = repl.offset();
    if repl.lock_marker() != before {
        // Asked now, not at the next periodic ACK (up to a second).
        repl.request_acks();
    }
    repl.start_failover(target, end, force);
    ctx.store.pause_for(PausePurpose::Failover, i64::MAX, false);
    ctx.out.ok();
    // A replica may have acknowledged our offset already (Redis looks in
    // the beforeSleep after the command).
    update_failover(ctx.store);
}

/// Redis's updateFailoverStatus, run by the replication cron and after
/// each ACK: a FAILOVER waiting for its replica hands over, or times out.
pub fn update_failover(store: &mut Store) {
    match store.repl.failover_tick(crate::util::now_ms()) {
        FailoverTick::Nothing => {}
        FailoverTick::Aborted => {
            store.unpause_for(PausePurpose::Failover);
            follow_master(store);
        }
        FailoverTick::Started => {
            store.unblock_all_for_replica();
            store.demote_sessions();
            follow_master(store);
        }
    }
}

/// The target answered our `PSYNC ... FAILOVER`: `+CONTINUE` or
/// `+FULLRESYNC` ends the FAILOVER (writes resume, refused now as a
/// replica's), anything else aborts it and this server is a master again.
pub fn failover_answered(store: &mut Store, accepted: bool) {
    if !store.repl.failover_in_progress() {
        return;
    }
    if accepted {
        store.repl.clear_failover();
        store.unpause_for(PausePurpose::Failover);
    } else {
        abort_failover(store, "Failover target rejected psync request");
    }
}

/// Redis's abortFailover: false when no FAILOVER was under way.
pub fn abort_failover(store: &mut Store, why: &str) -> bool {
    let master_client = store.repl.master_client();
    let in_progress = store.repl.failover_in_progress();
    if !store.repl.abort_failover(why) {
        return false;
    }
    store.unpause_for(PausePurpose::Failover);
    if in_progress {
        master_mode(store, master_client);
    } else {
        follow_master(store);
    }
    true
}

/// ROLE: a primary's form (master, its offset, its online replicas: ip,
/// port, acknowledged offset) or a replica's (slave, the master's host and
/// port, the link's state, the offset processed).
fn role(ctx: &mut Ctx, _args: &[Bytes]) {
    let repl = &ctx.store.repl;
    if let Some(m) = repl.master() {
        let out = &mut *ctx.out;
        out.array(5);
        out.bulk(b"slave");
        out.bulk(m.host.as_bytes());
        out.int(m.port as i64);
        out.bulk(m.status.name().as_bytes());
        out.int(if m.status == crate::replication::MasterLink::Connected {
            repl.offset()
        } else {
            -1
        });
        return;
    }
    let replicas = repl.online();
    let out = &mut *ctx.out;
    out.array(3);
    out.bulk(b"master");
    out.int(repl.offset());
    out.array(replicas.len());
    for r in replicas {
        out.array(3);
        out.bulk(r.ip.as_bytes());
        out.bulk(r.port.to_string().as_bytes());
        out.bulk(r.offset.to_string().as_bytes());
    }
}
