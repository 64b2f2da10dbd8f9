//! The dispatcher: Redis's processCommand and call. `execute_unnoted`
//! resolves a request, admits it (`check`/`admit`: arity, AUTH, ACL,
//! protected commands, MULTI, OOM, MISCONF, RESP2 subscribed mode, CLIENT
//! PAUSE), routes it into MULTI or runs it (`call`), hands the change record
//! to the AOF and the waiters it made ready to `waiters`, and puts the
//! command's own pushes around its reply.

use bytes::Bytes;

use super::args::{NOAUTH, OOM};
use super::context::{Ctx, ReplyMode};
use super::table::{
    lookup, lookup_sub, spec_index, Pushes, Spec, ADMIN, DENYOOM, FAST, MAY_REPLICATE,
    MISCONF_DENIED, MULTI_OOM_OK, NO_AUTH, NO_MULTI, PROTECTED, READONLY, SKIP_MONITOR,
    SKIP_SLOWLOG, SUBSCRIBED_OK, WRITE,
};
use super::waiters::{block, settle, settle_queued_keys};
use super::{acl, connection, multi, propagate, pubsub, server};
use crate::db::{Class, Event};
use crate::resp::Out;

fn arity_ok(arity: i32, argc: usize) -> bool {
    (arity > 0 && argc as i32 == arity) || (arity < 0 && argc as i32 >= -arity)
}

/// An argument as C's `%.*s` prints it: cut at the first NUL, at most `max` bytes.
fn c_str(a: &[u8], max: usize) -> &[u8] {
    crate::util::c_str(&a[..a.len().min(max)])
}

fn unknown_command(out: &mut Out, args: &[Bytes]) {
    let mut list: Vec<u8> = Vec::new();
    for a in &args[1..] {
        if list.len() >= 128 {
            break;
        }
        let room = 128 - list.len();
        list.push(b'\'');
        list.extend_from_slice(c_str(a, room));
        list.extend_from_slice(b"' ");
    }
    let mut msg = b"ERR unknown command '".to_vec();
    msg.extend_from_slice(c_str(&args[0], 128));
    msg.extend_from_slice(b"', with args beginning with: ");
    msg.extend_from_slice(&list);
    out.error_bytes(&msg);
}

/// Redis's addReplySubcommandSyntaxError: the subcommand as the client
/// typed it (at most 128 bytes, to a NUL), the command upper-cased.
pub fn subcommand_syntax_error(out: &mut Out, args: &[Bytes]) {
    let mut msg = b"ERR unknown subcommand or wrong number of arguments for '".to_vec();
    msg.extend_from_slice(c_str(args.get(1).map_or(&b""[..], |a| &a[..]), 128));
    msg.extend_from_slice(b"'. Try ");
    msg.extend_from_slice(&args[0].to_ascii_uppercase());
    msg.extend_from_slice(b" HELP.");
    out.error_bytes(&msg);
}

/// Resolves `args` to the spec that will run (the subcommand for containers),
/// or writes the unknown/arity error and returns None.
pub fn resolve(out: &mut Out, args: &[Bytes]) -> Option<&'static Spec> {
    resolve_with(out, args, &mut [None; 4])
}

/// `resolve` trying `last` (the command resolved before) first; `last`
/// becomes the command found.
fn resolve_with(
    out: &mut Out,
    args: &[Bytes],
    last: &mut [Option<&'static Spec>; 4],
) -> Option<&'static Spec> {
    let name = &args[0];
    // The connection's last few commands are compared first: a pipeline
    // repeats one command, a transaction cycles through MULTI, its
    // commands and EXEC.
    let cached = last
        .iter()
        .flatten()
        .find(|s| s.name.as_bytes().eq_ignore_ascii_case(name))
        .copied();
    let found = match cached {
        Some(s) => Some(s),
        None => {
            let s = lookup(name);
            if let Some(s) = s {
                last.rotate_right(1);
                last[0] = Some(s);
            }
            s
        }
    };
    let Some(spec) = found else {
        unknown_command(out, args);
        return None;
    };
    if spec.subs.is_empty() {
        if !arity_ok(spec.arity, args.len()) {
            out.error(&format!(
                "ERR wrong number of arguments for '{}' command",
                spec.name
            ));
            return None;
        }
        return Some(spec);
    }
    if args.len() < 2 {
        out.error(&format!(
            "ERR wrong number of arguments for '{}' command",
            spec.name
        ));
        return None;
    }
    let Some(sub) = lookup_sub(spec, &args[1]) else {
        let mut msg = b"ERR unknown subcommand '".to_vec();
        msg.extend_from_slice(c_str(&args[1], 128));
        msg.extend_from_slice(
            format!("'. Try {} HELP.", spec.name.to_ascii_uppercase()).as_bytes(),
        );
        out.error_bytes(&msg);
        return None;
    };
    if !arity_ok(sub.arity, args.len()) {
        out.error(&format!(
            "ERR wrong number of arguments for '{}|{}' command",
            spec.name, sub.name
        ));
        return None;
    }
    Some(sub)
}

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
    let silent =
        (mode == ReplyMode::Off && ctx.conn.reply_mode != ReplyMode::On) || ctx.conn.skip_reply;
    if let Some(req) = ctx.conn.block.take() {
        // The reply comes when the wait ends; it is dropped then.
        block(ctx, args, req, silent);
    }
    if silent {
        ctx.out.buf.truncate(mark);
        ctx.conn.skip_reply = false;
    }
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

/// Check-and-route: resolves the command, checks arity and AUTH (later
/// ACL), OOM, and writes the error when it may not run; inside MULTI,
/// queues it (or flags the transaction when it was refused). Returns the
/// spec to `call`.
pub fn check(ctx: &mut Ctx, args: &[Bytes]) -> Option<&'static Spec> {
    let mark = ctx.out.len();
    let checked = admit(ctx, args);
    if checked.is_none() && ctx.conn.postponed.is_none() && crate::util::eq_ic(&args[0], "exec") {
        // A refused EXEC discards the transaction, and says so.
        multi::exec_refused(ctx, mark);
    }
    multi::route(ctx, args, checked)
}

/// `check`'s checks, in Redis's processCommand order.
fn admit(ctx: &mut Ctx, args: &[Bytes]) -> Option<&'static Spec> {
    let spec = resolve_with(ctx.out, args, &mut ctx.conn.last_spec)?;
    // While the default user needs no password nobody needs AUTH (it may
    // be set or unset at runtime).
    if !ctx.conn.authed && spec.flags & NO_AUTH == 0 && ctx.store.acl.auth_required() {
        ctx.out.error(NOAUTH);
        return None;
    }
    let context = acl::context(ctx);
    if let Some(e) = acl::denied(ctx, spec, args, context) {
        ctx.out.error(&e);
        return None;
    }
    if spec.flags & PROTECTED != 0 {
        // DEBUG and MODULE's loaders, as Redis's CMD_PROTECTED.
        let (what, option, setting) = if lookup(&args[0]).is_some_and(|t| t.name == "module") {
            (
                "MODULE",
                "enable-module-command",
                &ctx.store.config().enable_module_command,
            )
        } else {
            (
                "DEBUG",
                "enable-debug-command",
                &ctx.store.config().enable_debug_command,
            )
        };
        if !protected_allowed(ctx, setting) {
            ctx.out.error(&format!(
                "ERR {what} command not allowed. If the {option} option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server."
            ));
            return None;
        }
    }
    if spec.flags & NO_MULTI != 0 && ctx.conn.multi.is_some() {
        ctx.out
            .error("ERR Command not allowed inside a transaction");
        return None;
    }
    // EXEC counts as the commands it queued (Redis's mstate.cmd_flags).
    let exec_flags = match &ctx.conn.multi {
        Some(tx) if crate::util::eq_ic(&args[0], "exec") => tx.flags(),
        _ => 0,
    };
    // Redis's processCommand: make room first; when that fails, refuse
    // what may grow memory (denyoom), let everything else through. Inside
    // MULTI queueing itself grows memory: only EXEC (unless it queued a
    // denyoom command), DISCARD, QUIT and RESET get through.
    if ctx.store.config().maxmemory > 0 && !ctx.store.perform_evictions() {
        let refused = match &ctx.conn.multi {
            _ if (spec.flags | exec_flags) & DENYOOM != 0 => true,
            None => false,
            Some(_) => spec.rules & MULTI_OOM_OK == 0,
        };
        if refused {
            ctx.out.error(OOM);
            return None;
        }
    }
    // The last background save or AOF write failed: no writes (and no
    // PING), as Redis's writeCommandsDeniedByDiskError.
    if (spec.flags | exec_flags) & WRITE != 0 || spec.rules & MISCONF_DENIED != 0 {
        if let Some(e) = crate::persist::write_denial(ctx.store) {
            ctx.out.error(&e);
            return None;
        }
    }
    // A RESP2 connection in subscribed mode runs only what Redis allows there.
    if !ctx.out.resp3 && ctx.store.pubsub.is_subscribed(ctx.conn.id) {
        let top = lookup(&args[0]).unwrap_or(spec);
        if top.rules & SUBSCRIBED_OK == 0 {
            let name = if top.name == "command" && args.len() > 1 {
                // COMMAND dispatches its subcommands itself: their
                // unknown/arity errors come first, as in Redis.
                server::command_sub(args).map(|sub| format!("command|{sub}"))
            } else if std::ptr::eq(top, spec) {
                Some(spec.name.to_string())
            } else {
                Some(format!("{}|{}", top.name, spec.name))
            };
            if let Some(name) = name {
                ctx.out.error(&pubsub::subscribed_error(&name));
                return None;
            }
        }
    }
    // CLIENT PAUSE: the command waits, unanswered, for the pause to end
    // (every command under ALL; under WRITE those that may write or
    // replicate, and an EXEC that queued one), as Redis's
    // blockPostponeClient.
    if let Some(p) = ctx.store.paused() {
        if p.all || (spec.flags | exec_flags) & (WRITE | MAY_REPLICATE) != 0 {
            ctx.conn.postponed = Some(p.until);
            return None;
        }
    }
    Some(spec)
}

/// Whether a protected action's setting (`enable-debug-command`,
/// `enable-module-command`, `enable-protected-configs`) lets this
/// connection do it: "yes", or "local" and the client is on loopback
/// (Redis's allowProtectedAction).
pub fn protected_allowed(ctx: &Ctx, setting: &str) -> bool {
    match setting {
        "yes" => true,
        "local" => ctx
            .store
            .clients
            .get(&ctx.conn.id)
            .is_some_and(|c| crate::util::is_local_addr(&c.addr)),
        _ => false,
    }
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
    let start = crate::util::Stopwatch::start();
    (spec.run)(ctx, args);
    let usec = start.micros();
    // Client-side caching: a tracking client's read-only command tells
    // which keys it may now cache.
    if spec.flags & READONLY != 0
        && !ctx.store.tracking.is_empty()
        && ctx.store.tracking.mode(ctx.conn.id).is_some()
    {
        let keys = command_keys(spec, args);
        ctx.store.tracking.remember(ctx.conn.id, keys.into_iter());
    }
    ctx.store.stats.total_commands += 1;
    called(ctx, spec, args, usec);
    // After the command, like Redis's call(): SELECT shows its new
    // db, RESET is not echoed to itself; secrets are redacted.
    if !ctx.store.monitors.is_empty() && spec.flags & (SKIP_MONITOR | ADMIN) == 0 {
        match connection::redacted(args) {
            Some(r) => server::feed_monitors(ctx, &r),
            None => server::feed_monitors(ctx, args),
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
    let stats = &mut ctx.store.stats.commands;
    let st = stats.cmd_mut(index);
    st.calls += 1;
    st.usec += usec;
    if ctx.out.has_errors() {
        st.failed += 1;
        ctx.out.take_errors(|e| stats.error(e));
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
        match connection::redacted(args) {
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
pub fn run_for_test(store: &mut crate::store::Store, db: usize, args: &[&str]) -> Vec<u8> {
    let mut conn = super::ConnState::new(1, true);
    conn.db = db;
    let mut out = Out::new(false);
    let args: Vec<Bytes> = args.iter().map(|a| Bytes::from(a.to_string())).collect();
    let mut ctx = Ctx {
        store,
        conn: &mut conn,
        out: &mut out,
    };
    let spec = resolve(ctx.out, &args).expect("a known command");
    (spec.run)(&mut ctx, &args);
    out.buf
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

#[cfg(test)]
mod tests {
    //! Admission walked over the whole table: every command and subcommand
    //! in every context the dispatcher knows before it runs a command (a
    //! plain client, before AUTH, inside MULTI, CLIENT PAUSE WRITE and ALL,
    //! RESP2 subscribed mode) must be admitted, refused or queued exactly as
    //! its flags and Latchkey's rules in the table say.

    use super::*;
    use crate::commands::{all_specs, ConnState, PROTECTED, RUNS_IN_MULTI, SUBSCRIBED_OK};
    use crate::config::Config;
    use crate::store::Store;

    /// The arguments of a call that passes the arity check: the name (and
    /// the subcommand's), then filler up to the arity.
    fn args_for(s: &Spec, parent: Option<&Spec>) -> Vec<Bytes> {
        let mut a = Vec::new();
        if let Some(p) = parent {
            a.push(Bytes::from(p.name));
        }
        a.push(Bytes::from(s.name));
        // A subcommand's arity counts its container's name too.
        while a.len() < s.arity.unsigned_abs() as usize {
            a.push(Bytes::from_static(b"x"));
        }
        a
    }

    enum Admission {
        Runs,
        Queued,
        Postponed,
        Refused(String),
    }

    fn admit_in(store: &mut Store, conn: &mut ConnState, resp3: bool, args: &[Bytes]) -> Admission {
        let mut out = Out::new(resp3);
        let mut ctx = Ctx {
            store,
            conn,
            out: &mut out,
        };
        let r = check(&mut ctx, args);
        let postponed = ctx.conn.postponed.take().is_some();
        let text = String::from_utf8_lossy(&out.buf).into_owned();
        match r {
            Some(_) => Admission::Runs,
            None if postponed => Admission::Postponed,
            None if text == "+QUEUED\r\n" => Admission::Queued,
            None => Admission::Refused(text),
        }
    }

    /// Every top-level command and subcommand, but containers (their
    /// subcommands stand for them) and what may not run here at all.
    fn walked() -> Vec<(&'static Spec, Option<&'static Spec>)> {
        all_specs()
            .iter()
            .copied()
            .filter(|(s, _)| s.subs.is_empty() && s.flags & PROTECTED == 0)
            .collect()
    }

    fn name(s: &Spec, p: Option<&Spec>) -> String {
        match p {
            Some(p) => format!("{}|{}", p.name, s.name),
            None => s.name.to_string(),
        }
    }

    #[test]
    fn a_plain_client_runs_every_command() {
        let mut store = Store::new(Config::default(), crate::commands::acl_catalog());
        for (s, p) in walked() {
            let mut conn = ConnState::new(1, true);
            let r = admit_in(&mut store, &mut conn, false, &args_for(s, p));
            assert!(matches!(r, Admission::Runs), "{} not admitted", name(s, p));
        }
    }

    #[test]
    fn before_auth_only_no_auth_commands_run() {
        let config = Config {
            requirepass: Some("pw".into()),
            ..Default::default()
        };
        let mut store = Store::new(config, crate::commands::acl_catalog());
        for (s, p) in walked() {
            let mut conn = ConnState::new(1, false);
            match admit_in(&mut store, &mut conn, false, &args_for(s, p)) {
                Admission::Runs => {
                    assert!(s.flags & NO_AUTH != 0, "{} ran before AUTH", name(s, p))
                }
                Admission::Refused(e) => {
                    assert!(s.flags & NO_AUTH == 0, "{} refused: {e}", name(s, p));
                    // A refused EXEC says so as an EXECABORT, as Redis 7.0.15
                    // does (`redis-cli EXEC` before AUTH).
                    let want = if s.name == "exec" {
                        format!("-EXECABORT Transaction discarded because of: {NOAUTH}\r\n")
                    } else {
                        format!("-{NOAUTH}\r\n")
                    };
                    assert_eq!(e, want, "{}", name(s, p));
                }
                _ => panic!("{}: neither run nor refused", name(s, p)),
            }
        }
    }

    #[test]
    fn inside_multi_commands_queue_run_or_are_refused_by_the_table() {
        let mut store = Store::new(Config::default(), crate::commands::acl_catalog());
        for (s, p) in walked() {
            let mut conn = ConnState::new(1, true);
            conn.multi = Some(Default::default());
            let r = admit_in(&mut store, &mut conn, false, &args_for(s, p));
            let n = name(s, p);
            match r {
                Admission::Refused(e) => {
                    assert!(s.flags & NO_MULTI != 0, "{n} refused in MULTI: {e}");
                    assert_eq!(
                        e, "-ERR Command not allowed inside a transaction\r\n",
                        "{n}"
                    );
                }
                Admission::Runs => assert!(
                    s.flags & NO_MULTI == 0 && s.rules & RUNS_IN_MULTI != 0,
                    "{n} ran inside MULTI instead of being queued"
                ),
                Admission::Queued => assert!(
                    s.flags & NO_MULTI == 0 && s.rules & RUNS_IN_MULTI == 0,
                    "{n} was queued"
                ),
                Admission::Postponed => panic!("{n} postponed"),
            }
        }
    }

    #[test]
    fn client_pause_holds_what_the_table_says() {
        for all in [false, true] {
            let mut store = Store::new(Config::default(), crate::commands::acl_catalog());
            store.pause(crate::util::now_ms() + 3_600_000, all);
            for (s, p) in walked() {
                let mut conn = ConnState::new(1, true);
                let r = admit_in(&mut store, &mut conn, false, &args_for(s, p));
                let held = all || s.flags & (WRITE | MAY_REPLICATE) != 0;
                let n = name(s, p);
                match r {
                    Admission::Postponed => assert!(held, "{n} held by a pause (all: {all})"),
                    Admission::Runs => assert!(!held, "{n} ran during a pause (all: {all})"),
                    _ => panic!("{n}: neither run nor held (all: {all})"),
                }
            }
        }
    }

    #[test]
    fn resp2_subscribed_mode_runs_only_what_the_table_allows() {
        let mut store = Store::new(Config::default(), crate::commands::acl_catalog());
        store
            .pubsub
            .subscribe(1, crate::pubsub::Kind::Channel, &Bytes::from_static(b"ch"));
        for (s, p) in walked() {
            let mut conn = ConnState::new(1, true);
            let top = p.unwrap_or(s);
            let n = name(s, p);
            match admit_in(&mut store, &mut conn, false, &args_for(s, p)) {
                Admission::Runs => assert!(top.rules & SUBSCRIBED_OK != 0, "{n} ran subscribed"),
                Admission::Refused(e) => {
                    assert!(
                        top.rules & SUBSCRIBED_OK == 0,
                        "{n} refused subscribed: {e}"
                    );
                    assert!(
                        e.contains("only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET"),
                        "{n}: {e}"
                    );
                }
                _ => panic!("{n}: neither run nor refused"),
            }
            // In RESP3 nothing is refused for being subscribed.
            let mut conn = ConnState::new(1, true);
            assert!(
                matches!(
                    admit_in(&mut store, &mut conn, true, &args_for(s, p)),
                    Admission::Runs
                ),
                "{n} in RESP3"
            );
        }
    }

    #[test]
    fn from_a_script_noscript_commands_are_refused_and_the_others_run() {
        // Every command once, as redis.pcall with filler arguments against a
        // fresh store: those flagged `noscript` are refused before running,
        // the others reach their handler (which may reject the filler).
        let mut store = Store::new(Config::default(), crate::commands::acl_catalog());
        let refused = "This Redis command is not allowed from script";
        for (s, p) in walked() {
            let n = name(s, p);
            let args = args_for(s, p);
            let mut eval: Vec<String> = ["EVAL", "return redis.pcall(unpack(ARGV))", "0"]
                .iter()
                .map(|a| a.to_string())
                .collect();
            eval.extend(args.iter().map(|a| String::from_utf8_lossy(a).into_owned()));
            let eval: Vec<&str> = eval.iter().map(String::as_str).collect();
            let reply = String::from_utf8_lossy(&run_for_test(&mut store, 0, &eval)).into_owned();
            if s.flags & crate::commands::NOSCRIPT != 0 {
                assert!(reply.contains(refused), "{n} ran from a script: {reply}");
            } else {
                assert!(
                    !reply.contains(refused),
                    "{n} refused from a script: {reply}"
                );
            }
        }
    }
}
