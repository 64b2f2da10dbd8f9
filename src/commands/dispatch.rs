//! The dispatcher: Redis's processCommand and call. `execute_unnoted`
//! has a request admitted (`check`: `admission::admit` for a client, then
//! `multi::route` inside MULTI), runs it (`call`), hands the change record
//! to the AOF and the waiters it made ready to `waiters`, and puts the
//! command's own pushes around its reply. It also feeds MONITOR clients
//! (`feed_monitors`, with secrets `redacted`, which SLOWLOG shares), and
//! keeps a CLIENT NO-TOUCH client's commands from stamping key accesses.
//!
//! Must not touch sockets or persistence: replies go to `ctx.out`, change
//! records into the effects stream (the runtime has `persist::aof_write_out`
//! write them out); admission is `admit`'s, serving waiters is `waiters`'.

use bytes::Bytes;

use super::admission::{admit, Caller, Verdict};
use super::context::{Ctx, ReplyMode};
use super::table::{
    lookup, lookup_sub, spec_index, Pushes, Spec, ADMIN, FAST, READONLY, RUNS_SCRIPT, SKIP_MONITOR,
    SKIP_SLOWLOG, WRITE,
};
use super::waiters::{block, settle, settle_queued_keys};
use super::{multi, propagate, server};
use crate::db::{Class, Event};
use crate::util::eq_ic;

/// Runs one command: lookup, arity and auth checks, the handler, then the
/// keyspace hook for every change it made. Pushes the command caused for this
/// same connection are appended after its reply.
pub fn execute(ctx: &mut Ctx, args: &[Bytes]) {
    if let Some(spec) = execute_unnoted(ctx, args) {
        note_command(ctx, args, spec);
    }
}

/// What one command changed, as `call` reports it: the input of the AOF
/// and replication (they log the command when `dirty` is nonzero, or
/// `rewrite` in its place when the command gave one).
#[derive(Debug, Default, Clone)]
pub struct Record {
    /// Keyspace changes the command made (Redis's `server.dirty` delta).
    pub dirty: u64,
    /// Commands to log instead of the one that ran (EXEC's writes, a
    /// script's, RESTORE with an absolute TTL), each with its database;
    /// None: log the command itself (see `propagate`).
    pub rewrite: Option<Vec<crate::effects::Logged>>,
}

/// `execute` without recording the command in the client's CLIENT LIST
/// entry. A connection running a batch under one store lock records only
/// the batch's last command with `note_command`: no other client can look
/// at the entry before the batch ends, and the connection's own CLIENT
/// LIST line does not read it. Returns what `note_command` needs (None
/// for an empty frame, which is not a command).
///
/// This is Redis's processCommand: reply-mode bookkeeping, then
/// check-and-route (`check`), then `call`, then serving the waiters the
/// command made ready (`settle`), then registering this connection's own
/// wait if the command blocked.
///
/// Inlined by force, with `check`, `admission::auth_refused` and
/// `multi::route`: it has two callers (a connection's batch and a
/// replica's master client), and left to itself the compiler stops
/// inlining them into the connection loop once there are two, which costs
/// every request about 50 instructions (callgrind, SET pipeline 16).
#[inline(always)]
pub fn execute_unnoted(ctx: &mut Ctx, args: &[Bytes]) -> Option<Option<&'static Spec>> {
    if args.is_empty() {
        return None;
    }
    crate::util::refresh_cmd_time();
    let mark = ctx.out.len();
    let mode = ctx.conn.reply_mode;
    // A CLIENT REPLY SKIP applies to this command only (Redis's SKIP_NEXT
    // turning into SKIP); the command itself may set a new mode.
    if mode == ReplyMode::Skip {
        ctx.conn.reply_mode = ReplyMode::On;
        ctx.conn.skip_reply = true;
    }
    let spec = check(ctx, args);
    ctx.store.pubsub.pushed_to_self = false;
    ctx.store.pubsub.self_events.clear();
    match spec {
        // `call` ends by draining the changes (the command's, and the
        // evictions `check` made room with): what is left to settle is
        // only the waiters they made ready.
        Some(spec) => {
            let db = ctx.conn.db;
            let r = call(ctx, spec, args);
            // The command's records join the stream after those the
            // keyspace hook made for its changes (`crate::effects`).
            if ctx.store.ks.effects.on() {
                let logged = propagate::wrap(propagate::logged(ctx, spec, args, db, r));
                ctx.store.ks.effects.commands(logged);
            }
            if ctx.store.ks.blocking.has_ready() {
                settle(ctx.store, Some(ctx.conn.id));
            }
        }
        None => {
            if ctx.out.has_errors() {
                rejected(ctx, args);
            }
            settle(ctx.store, Some(ctx.conn.id));
        }
    }
    // CLIENT CACHING holds for the next command that is not a CLIENT one,
    // or the whole transaction (Redis's resetClient).
    if !ctx.store.tracking.is_empty()
        && !args[0].eq_ignore_ascii_case(b"client")
        && ctx.conn.multi.is_none()
    {
        ctx.store.tracking.end_caching(ctx.conn.id);
    }
    // Messages this command published to its own (RESP3) connection go
    // where Redis 7.0 writes them: some or all before the reply.
    let mut lead = 0;
    if std::mem::take(&mut ctx.store.pubsub.pushed_to_self) {
        let events = std::mem::take(&mut ctx.store.pubsub.self_events);
        let pushes = spec.map_or(Pushes::Events, |s| s.pushes);
        lead = lead_bytes(pushes, args, &events);
    }
    // CLIENT REPLY OFF/SKIP drop this command's reply; CLIENT REPLY ON (and
    // RESET under OFF) clear the state first, so their reply is sent.
    // (Un)subscribe confirmations are pushes, sent all the same.
    let pushed = std::mem::take(&mut ctx.conn.reply_pushed);
    let silent = !pushed
        && ((mode == ReplyMode::Off && ctx.conn.reply_mode != ReplyMode::On)
            || ctx.conn.skip_reply);
    if let Some(req) = ctx.conn.block.take() {
        // The reply comes when the wait ends; it is dropped then.
        block(ctx, args, req, silent);
    }
    if silent {
        ctx.out.buf.truncate(mark);
    }
    ctx.conn.skip_reply = false;
    // Pushes this command caused for its own connection follow its reply
    // (or, if it asked, go before it, kept even when the reply is dropped).
    if std::mem::take(&mut ctx.conn.pushes_first) {
        lead = usize::MAX;
    }
    if lead > 0 {
        let mut pushes = Vec::new();
        ctx.conn.signal.take_pending(&mut pushes);
        let at = mark.min(ctx.out.buf.len());
        let rest = pushes.split_off(lead.min(pushes.len()));
        ctx.out.buf.splice(at..at, pushes);
        ctx.out.buf.extend_from_slice(&rest);
    } else {
        ctx.conn.signal.take_pending(&mut ctx.out.buf);
    }
    Some(spec)
}

/// Check-and-route: admits a client's command (`admission::admit`, which
/// writes the error when it may not run); inside MULTI, queues it (or
/// flags the transaction when it was refused). Returns the spec to `call`.
#[inline(always)]
pub fn check(ctx: &mut Ctx, args: &[Bytes]) -> Option<&'static Spec> {
    let mark = ctx.out.len();
    let checked = match admit(Caller::Client(ctx), args) {
        Verdict::Run(spec) => Some(spec),
        _ => None,
    };
    if checked.is_none() && ctx.conn.postponed.is_none() && crate::util::eq_ic(&args[0], "exec") {
        // A refused EXEC discards the transaction, and says so.
        multi::exec_refused(ctx, mark);
    }
    multi::route(ctx, args, checked)
}

/// Runs one checked command and returns what it changed: the handler, the
/// command counters, MONITOR, and the keyspace hook for its changes.
/// Re-entrant: scripts and EXEC call it for each command they run; it
/// does not serve blocked clients (the outermost command does, in
/// `settle`).
pub fn call(ctx: &mut Ctx, spec: &'static Spec, args: &[Bytes]) -> Record {
    let dirty = ctx.store.ks.dirty();
    if spec.flags & WRITE != 0 && !ctx.store.ks.blocking.is_empty() {
        settle_queued_keys(ctx, spec, args);
    }
    // CLIENT NO-TOUCH (Redis 7.2's lookupKey): no access stamps but for
    // TOUCH; nested calls (EXEC's commands) set their own and restore.
    let frozen = ctx
        .conn
        .no_touch
        .then(|| ctx.store.ks.freeze_access(spec.name != "touch"));
    let start = crate::util::Stopwatch::start();
    (spec.run)(ctx, args);
    let usec = start.micros();
    if let Some(was) = frozen {
        ctx.store.ks.freeze_access(was);
    }
    // Client-side caching: a tracking client's read-only command tells
    // which keys it may now cache; in a script, a read tells the keys the
    // script declared (the script's own command tells nothing).
    if spec.flags & READONLY != 0
        && spec.rules & RUNS_SCRIPT == 0
        && !ctx.store.tracking.is_empty()
        && ctx.store.tracking.mode(ctx.conn.id).is_some()
    {
        if ctx.conn.in_script {
            let keys = ctx.conn.script_keys.iter().cloned();
            ctx.store.tracking.remember(ctx.conn.id, keys);
        } else {
            let keys = command_keys(spec, args);
            ctx.store.tracking.remember(ctx.conn.id, keys.into_iter());
        }
    }
    ctx.store.stats.total_commands += 1;
    called(ctx, spec, args, usec);
    // After the command, like Redis's call(): SELECT shows its new
    // db, RESET is not echoed to itself; secrets are redacted.
    if !ctx.store.monitors.is_empty() && spec.flags & (SKIP_MONITOR | ADMIN) == 0 {
        match redacted(args) {
            Some(r) => feed_monitors(ctx, &r),
            None => feed_monitors(ctx, args),
        }
    }
    ctx.store.drain_events(Some(ctx.conn.id));
    Record {
        dirty: ctx.store.ks.dirty() - dirty,
        rewrite: std::mem::take(&mut ctx.conn.rewrite),
    }
}

/// The keys of a command as COMMAND GETKEYS finds them (the key specs).
pub fn command_keys(spec: &'static Spec, args: &[Bytes]) -> Vec<Bytes> {
    let top = lookup(&args[0]).is_some_and(|p| std::ptr::eq(p, spec));
    let full = if top {
        spec.name.to_string()
    } else {
        format!(
            "{}|{}",
            String::from_utf8_lossy(&args[0]).to_ascii_lowercase(),
            spec.name
        )
    };
    server::find_keys(spec, &full, args)
        .into_iter()
        .map(|f| args[f.pos].clone())
        .collect()
}

/// Counts a command that ran (INFO commandstats, errorstats), and logs it
/// when slow (SLOWLOG, LATENCY).
fn called(ctx: &mut Ctx, spec: &'static Spec, args: &[Bytes], usec: u64) {
    // A pipeline mostly repeats one command: its index is cached.
    let cache = &mut ctx.conn.stat_index;
    let index = match cache.iter().flatten().find(|(s, _)| std::ptr::eq(*s, spec)) {
        Some((_, i)) => *i,
        None => {
            let i = spec_index(spec);
            cache.rotate_right(1);
            cache[0] = Some((spec, i));
            i
        }
    };
    let tracking = ctx.store.latency_tracking();
    let stats = &mut ctx.store.stats.commands;
    let st = stats.cmd_mut(index);
    st.calls += 1;
    st.usec += usec;
    if ctx.out.has_errors() {
        st.failed += 1;
        ctx.out.take_errors(|e| stats.error(e));
    }
    if tracking {
        stats.record_latency(index, usec);
    }
    let cfg = ctx.store.config();
    let slower_than = cfg.slowlog_log_slower_than;
    let latency_ms = cfg.latency_monitor_threshold;
    if slower_than >= 0 && usec >= slower_than as u64 && spec.flags & SKIP_SLOWLOG == 0 {
        let max_len = cfg.slowlog_max_len;
        let (addr, name) = ctx
            .store
            .clients
            .get(&ctx.conn.id)
            .map(|c| (c.addr.clone(), c.name.clone().unwrap_or_default()))
            .unwrap_or_default();
        match redacted(args) {
            Some(r) => ctx.store.slowlog.push(&r, usec, addr, name, max_len),
            None => ctx.store.slowlog.push(args, usec, addr, name, max_len),
        }
    }
    if latency_ms > 0 && usec / 1000 >= latency_ms {
        let event = if spec.flags & FAST != 0 {
            "fast-command"
        } else {
            "command"
        };
        ctx.store.latency.add(event, usec / 1000);
    }
}

/// Counts a command the check step refused with an error: its
/// `rejected_calls` (when the name resolved to a command), and the error.
fn rejected(ctx: &mut Ctx, args: &[Bytes]) {
    let stats = &mut ctx.store.stats.commands;
    // An unknown subcommand counts nowhere, as in Redis; a container
    // without one (arity) counts under the container.
    let spec = match lookup(&args[0]) {
        Some(s) if !s.subs.is_empty() && args.len() >= 2 => lookup_sub(s, &args[1]),
        other => other,
    };
    if let Some(spec) = spec {
        stats.cmd_mut(spec_index(spec)).rejected += 1;
    }
    ctx.out.take_errors(|e| stats.error(e));
}

/// Runs one command in database `db` of `store`, as client 1 speaking
/// RESP2, straight through its handler; returns the reply bytes.
#[cfg(test)]
pub fn run_for_test(store: &mut crate::server::Store, db: usize, args: &[&str]) -> Vec<u8> {
    test_command(store, db, args, |ctx, spec, args| (spec.run)(ctx, args)).1
}

/// `run_for_test` through `call`: also returns the command's change
/// record (what it leaves for the AOF).
#[cfg(test)]
pub fn call_for_test(
    store: &mut crate::server::Store,
    db: usize,
    args: &[&str],
) -> (Record, Vec<u8>) {
    test_command(store, db, args, call)
}

#[cfg(test)]
fn test_command<R>(
    store: &mut crate::server::Store,
    db: usize,
    args: &[&str],
    run: impl FnOnce(&mut Ctx, &'static Spec, &[Bytes]) -> R,
) -> (R, Vec<u8>) {
    let mut conn = super::ConnState::new(1, true);
    conn.db = db;
    let mut out = crate::resp::Out::new(false);
    let args: Vec<Bytes> = args.iter().map(|a| Bytes::from(a.to_string())).collect();
    let mut ctx = Ctx {
        store,
        conn: &mut conn,
        out: &mut out,
    };
    let spec = super::resolve(ctx.out, &args).expect("a known command");
    let r = run(&mut ctx, spec, &args);
    (r, out.buf)
}

/// Records the command in the client's CLIENT LIST entry: Redis's
/// `lastcmd` (full name such as "client|list", even when it was rejected
/// for arity or auth; "NULL" when unknown) and the buffer figures.
pub fn note_command(ctx: &mut Ctx, args: &[Bytes], spec: Option<&'static Spec>) {
    let Some(c) = ctx.store.clients.get_mut(&ctx.conn.id) else {
        return;
    };
    c.last_ms = crate::util::cmd_time_ms();
    c.info.qbuf_free = ctx.conn.qbuf_free;
    c.info.rbs = ctx.out.buf.capacity();
    c.info.rbp = c.info.rbp.max(ctx.out.len());
    let name = match spec {
        Some(s) if s.name.as_bytes().eq_ignore_ascii_case(&args[0]) => Some((s.name, None)),
        _ => match lookup(&args[0]) {
            None => None,
            Some(p) if p.subs.is_empty() || args.len() < 2 => Some((p.name, None)),
            Some(p) => lookup_sub(p, &args[1]).map(|s| (p.name, Some(s.name))),
        },
    };
    c.last_cmd.clear();
    match name {
        None => c.last_cmd.push_str("NULL"),
        Some((p, sub)) => {
            c.last_cmd.push_str(p);
            if let Some(sub) = sub {
                c.last_cmd.push('|');
                c.last_cmd.push_str(sub);
            }
        }
    }
}

/// How many bytes of the pushes a command caused for its own (RESP3)
/// connection go before the command's reply, as Redis 7.0 writes them into
/// the reply buffer while the command runs, by the command's [`Pushes`]:
/// all of them for commands that notify before they reply (`First`: SET,
/// DEL, PUBLISH, ...); for LMOVE and RPOPLPUSH the push side's events (the
/// pop's follow the reply), for SPOP all but the emptied set's `del`; and in
/// any command what its lookups fire (lazy expiry, key misses) and a key's
/// creation, which come first. `events` is `PubSub::self_events`. (Redis
/// writes ZPOP*'s, MGET's and EXEC's commands' events in the middle of their
/// reply arrays; here they follow the reply.)
fn lead_bytes(pushes: Pushes, args: &[Bytes], events: &[(Event, usize)]) -> usize {
    let pushes = match pushes {
        // SET ... GET replies with the old value before it writes.
        Pushes::Set
            if args
                .get(3..)
                .unwrap_or_default()
                .iter()
                .any(|a| a.eq_ignore_ascii_case(b"get")) =>
        {
            Pushes::NewAfter
        }
        Pushes::Set => Pushes::First,
        p => p,
    };
    if pushes == Pushes::First {
        return usize::MAX;
    }
    let mut lead = 0;
    for (ev, queued) in events {
        // Lookups (lazy expiry, misses) and key creation come before the
        // reply; SPOP replies between its `spop` and the emptied set's `del`.
        let first = matches!(ev.class, Class::KeyMiss | Class::Expired)
            || (ev.class == Class::New && pushes != Pushes::NewAfter)
            || (pushes == Pushes::Move && matches!(ev.name, "lpush" | "rpush"))
            || (pushes == Pushes::Spop && ev.name != "del");
        if !first {
            break;
        }
        lead = *queued;
    }
    lead
}

/// Sends a command to every MONITOR client, in Redis's line format:
/// `+<unix time.micros> [<db> <addr>] "arg" "arg"`.
pub fn feed_monitors(ctx: &mut Ctx, args: &[Bytes]) {
    let t = crate::util::now_us();
    let addr = if ctx.conn.in_script {
        "lua".to_string()
    } else {
        ctx.store
            .clients
            .get(&ctx.conn.id)
            .map(|c| c.addr.clone())
            .unwrap_or_default()
    };
    let mut line = format!(
        "+{}.{:06} [{} {}]",
        t / 1_000_000,
        t % 1_000_000,
        ctx.conn.db,
        addr
    );
    for a in args {
        line.push(' ');
        line.push_str(&crate::util::repr(a));
    }
    line.push_str("\r\n");
    let monitors = ctx.store.monitors.clone();
    for m in monitors {
        ctx.store.clients.push_to(m, line.as_bytes());
    }
}

/// The arguments MONITOR and SLOWLOG show, with secrets replaced as
/// Redis's redactClientCommandArgument does (AUTH and HELLO's user names
/// and passwords, ACL SETUSER's whole rule set, CONFIG SET's values of
/// sensitive configs); None for commands shown as sent.
pub fn redacted(args: &[Bytes]) -> Option<Vec<Bytes>> {
    const REDACTED: Bytes = Bytes::from_static(b"(redacted)");
    if args.len() >= 3 && eq_ic(&args[0], "acl") && eq_ic(&args[1], "setuser") {
        let mut r = args.to_vec();
        for a in &mut r[2..] {
            *a = REDACTED;
        }
        return Some(r);
    }
    if args.len() >= 4 && eq_ic(&args[0], "config") && eq_ic(&args[1], "set") {
        // Redis 7.0's SENSITIVE_CONFIG parameters (requirepass, masterauth,
        // masteruser), and the TLS key passwords, which 7.0 does not mark:
        // a stricter choice, the one difference from its SLOWLOG/MONITOR.
        const SENSITIVE: &[&str] = &[
            "requirepass",
            "masterauth",
            "masteruser",
            "tls-key-file-pass",
            "tls-client-key-file-pass",
        ];
        let mut r = args.to_vec();
        let mut any = false;
        for j in (2..args.len() - 1).step_by(2) {
            if SENSITIVE.iter().any(|n| eq_ic(&args[j], n)) {
                r[j + 1] = REDACTED;
                any = true;
            }
        }
        return any.then_some(r);
    }
    if eq_ic(&args[0], "auth") {
        if args.len() > 3 {
            return None;
        }
        let mut r = args.to_vec();
        for a in &mut r[1..] {
            *a = REDACTED;
        }
        return Some(r);
    }
    if !eq_ic(&args[0], "hello") {
        return None;
    }
    let mut r = args.to_vec();
    // Same walk as HELLO's option parser, which redacts as it goes.
    if args.len() >= 2 && !crate::util::parse_i64(&args[1]).is_some_and(|v| (2..=3).contains(&v)) {
        return None;
    }
    let mut j = 2;
    while j < args.len() {
        let more = args.len() - 1 - j;
        if eq_ic(&args[j], "auth") && more >= 2 {
            r[j + 1] = REDACTED;
            r[j + 2] = REDACTED;
            j += 3;
        } else if eq_ic(&args[j], "setname") && more >= 1 {
            j += 2;
        } else {
            break;
        }
    }
    Some(r)
}
