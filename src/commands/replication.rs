//! Replication's commands on the primary: REPLCONF, SYNC and PSYNC (a
//! connection becomes a replica; its task then runs the link,
//! `runtime::link`), WAIT and ROLE. The state is `crate::replication`'s.

use bytes::Bytes;

use super::*;
use crate::blocking::TimeoutReply;
use crate::replication::{Psync, SyncRequest};
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
    ctx.store.repl.request_acks();
    super::block_on(ctx, &[], deadline, wait);
}

/// REPLICAOF host port | NO ONE (and SLAVEOF), as Redis's
/// replicaofCommand: the master link itself is the runtime's task, which
/// follows the replication state.
fn replicaof(ctx: &mut Ctx, args: &[Bytes]) {
    let master_client = ctx.store.repl.master_client();
    if eq_ic(&args[1], "no") && eq_ic(&args[2], "one") {
        if ctx.store.repl.unset_master() {
            drop_master_client(ctx, master_client);
            // The old primary's sessions are detached: their holds stay
            // for their clients to resume, until the grace ends.
            let grace = ctx.store.config().tp_failover_grace;
            ctx.store.ks.detach_replicated(grace);
            // The backlog kept from the master goes on with our own writes
            // (siblings re-pointed at us continue from it).
            if let Some(feed) = ctx.store.repl.feed_once() {
                let sink = ctx.store.attach_sink(feed);
                ctx.store.repl.attached_as(sink);
            }
            set_replicaof(ctx, None);
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
    if !ctx.store.repl.set_master(&host, port) {
        tracing::info!("REPLICAOF would result into synchronization with the master we are already connected with. No operation performed.");
        return ctx.out.simple("OK Already connected to specified master");
    }
    drop_master_client(ctx, master_client);
    set_replicaof(ctx, Some((host.clone(), port)));
    let who = super::connection::client_info_string(ctx.store, ctx.conn.id);
    tracing::info!("REPLICAOF {host}:{port} enabled (user request from '{who}')");
    ctx.out.ok();
}

/// The old master's client leaves the client table at once, as Redis
/// frees server.master in replicaofCommand: a CLIENT KILL in the same
/// transaction (Sentinel's) must not find it, now of no type but normal.
/// Its link task, following the change, ends a moment later.
fn drop_master_client(ctx: &mut Ctx, id: Option<crate::ids::ClientId>) {
    if let Some(id) = id {
        if ctx.store.clients.remove(&id).is_some() {
            ctx.store.client_gone(id);
        }
    }
}

/// The config's `replicaof` follows REPLICAOF (CONFIG GET, CONFIG
/// REWRITE), and expiry follows the role.
fn set_replicaof(ctx: &mut Ctx, to: Option<(String, u16)>) {
    let mut c = ctx.store.config().clone();
    c.repl.replicaof = to;
    ctx.store.set_config(c);
    ctx.store.follow_role();
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
