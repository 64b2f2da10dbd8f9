//! Admission: whether a command may run, for every caller, in one
//! function (`admit`). Redis spreads these checks over processCommand (a
//! client's request), execCommand (EXEC's second ACL check), scriptCall
//! (redis.call) and the busy-script path of processCommand; here the
//! caller is a parameter ([`Caller`]) and each check is written once, in
//! Redis's order, applying to the callers Redis applies it to:
//!
//! | stage                         | client | EXEC | script | busy |
//! |-------------------------------|:------:|:----:|:------:|:----:|
//! | resolve: name, subcommand, arity | x   |      |   x    |  x   |
//! | AUTH                          |   x    |      |        |  x   |
//! | the busy script's own answers |        |      |        |  x   |
//! | `noscript`, SETTP ... QUEUE   |        |      |   x    |      |
//! | ACL                           |   x    |  x   |   x    |      |
//! | protected (DEBUG, MODULE)     |   x    |      |        |      |
//! | `no-multi` inside MULTI       |   x    |      |        |      |
//! | read-only script writing      |        |      |   x    |      |
//! | OOM                           |   x    |      |   x    |      |
//! | MISCONF (failed save or AOF)  |   x    |      |   x    |      |
//! | NOREPLICAS (min-replicas)     |   x    |      |   x    |      |
//! | READONLY (read-only replica)  |   x    |      |   x    |      |
//! | RESP2 subscribed mode         |   x    |      |        |      |
//! | MASTERDOWN (stale replica)    |   x    |      |        |      |
//! | CLIENT PAUSE                  |   x    |      |        |      |
//!
//! Per-command behaviour comes from the command table (flags, rules), never
//! from names. A refusal is written to the caller's reply with Redis's text
//! for that caller; admission runs nothing and queues nothing (inside MULTI
//! `multi::route` queues what was admitted). The busy caller has no store
//! (a script holds it): its stages use the connection state and the gate
//! only.

use bytes::Bytes;

use super::args::{NOAUTH, NOREPLICAS, OOM};
use super::context::{ConnState, Ctx};
use super::table::{
    lookup, lookup_sub, Spec, ALLOW_BUSY, DENYOOM, MAY_REPLICATE, MISCONF_DENIED, MULTI_OOM_OK,
    NOSCRIPT, NO_AUTH, NO_MULTI, PROTECTED, RUNS_IN_MULTI, STALE, SUBSCRIBED_OK, WRITE,
};
use super::{acl, pubsub};
use crate::acl::Denial;
use crate::resp::Out;
use crate::scripting::gate::{Gate, Kill, BUSY_ERR, NOTBUSY_ERR, UNKILLABLE_ERR};

/// Who asks to run a command, with what it brings.
pub enum Caller<'c, 'a> {
    /// A connection's request (inside MULTI, `multi::route` queues it).
    Client(&'c mut Ctx<'a>),
    /// A command EXEC runs from its queue, resolved when it was queued;
    /// permissions are checked again (they may have changed since).
    Exec(&'c mut Ctx<'a>, &'static Spec),
    /// redis.call / redis.pcall: the script's own client and the run's
    /// rules.
    Script(&'c mut Ctx<'a>, &'c ScriptRules),
    /// A connection while a script holds the store and is past
    /// `busy-reply-threshold`: no store, only its state and the gate.
    Busy {
        gate: &'c Gate,
        conn: &'c mut ConnState,
        out: &'c mut Out,
    },
}

/// What a running script allows the commands it calls (Redis's run_ctx).
#[derive(Debug, Default, Clone, Copy)]
pub struct ScriptRules {
    /// EVAL_RO, FCALL_RO, a `no-writes` script.
    pub read_only: bool,
    /// An `allow-oom` script.
    pub allow_oom: bool,
    /// Over `maxmemory` when the script started (pre_command_oom_state).
    pub oom: bool,
    /// The script already ran a write command.
    pub wrote: bool,
}

/// `admit`'s answer.
#[derive(Clone, Copy)]
pub enum Verdict {
    /// Runs now (a client inside MULTI: is queued, unless the table says
    /// it runs there).
    Run(&'static Spec),
    /// Refused: the error is written to the caller's reply.
    Refused,
    /// Held by CLIENT PAUSE, unanswered (`conn.postponed` is set): it runs
    /// when the pause ends.
    Postponed,
    /// Busy: answered without the store (BUSY, SCRIPT KILL, ...).
    Answered,
    /// Busy: needs the store (`allow-busy`, or a connection in MULTI): it
    /// waits for the script to end.
    Deferred,
    /// Busy: SHUTDOWN NOSAVE, the script killed; the caller shuts down.
    Shutdown,
}

/// The one admission function: whether `args` may run for `caller`,
/// the refusal written to the caller's reply when not. See the module's
/// table for the stages each caller goes through.
#[inline(always)]
pub fn admit(caller: Caller, args: &[Bytes]) -> Verdict {
    let (ctx, who) = match caller {
        Caller::Busy { gate, conn, out } => return admit_busy(gate, conn, out, args),
        Caller::Client(ctx) => {
            let Some(spec) = resolve_with(ctx.out, args, &mut ctx.conn.last_spec) else {
                return Verdict::Refused;
            };
            // While the default user needs no password nobody needs AUTH
            // (it may be set or unset at runtime).
            let acl = &ctx.store.acl;
            if auth_refused(ctx.conn, spec, ctx.out, || acl.auth_required()) {
                return Verdict::Refused;
            }
            (ctx, Who::Client(spec))
        }
        Caller::Exec(ctx, spec) => (ctx, Who::Exec(spec)),
        Caller::Script(ctx, rules) => {
            let Some(spec) = resolve_for_script(ctx.out, args) else {
                return Verdict::Refused;
            };
            // SETTP ... QUEUE would wait in a line, and nothing waits in a
            // script.
            let queue =
                spec.name == "settp" && args[3..].iter().any(|a| a.eq_ignore_ascii_case(b"queue"));
            let denied = spec.flags & NOSCRIPT != 0 && !ctx.store.script_disable_deny;
            if denied || queue {
                ctx.error("ERR This Redis command is not allowed from script");
                return Verdict::Refused;
            }
            (ctx, Who::Script(spec, rules))
        }
    };
    let spec = who.spec();
    if let Some(d) = acl::denial(ctx, spec, args, acl::context(ctx)) {
        let msg = match who {
            Who::Client(_) => acl::denied_message(spec, d),
            Who::Exec(_) => format!(
                "NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: {}",
                match d {
                    Denial::Command => "no permission to execute the command or subcommand",
                    Denial::Key => "no permission to touch the specified keys",
                    Denial::Channel => "no permission to access one of the channels used as arguments",
                }
            ),
            // Redis's getAclErrorMessage words.
            Who::Script(..) => format!(
                "ERR The user executing the script {}",
                match d {
                    Denial::Command => "can't run this command or subcommand",
                    Denial::Key => "can't access at least one of the keys mentioned in the command arguments",
                    Denial::Channel => "can't publish to the channel mentioned in the command",
                }
            ),
        };
        ctx.error(&msg);
        return Verdict::Refused;
    }
    if let Who::Exec(_) = who {
        return Verdict::Run(spec);
    }
    if let Who::Client(_) = who {
        if spec.flags & PROTECTED != 0 && !protected_ok(ctx, args) {
            return Verdict::Refused;
        }
        if spec.flags & NO_MULTI != 0 && ctx.conn.multi.is_some() {
            ctx.error("ERR Command not allowed inside a transaction");
            return Verdict::Refused;
        }
    }
    // Redis's scriptVerifyWriteCommandAllow: a read-only script writes
    // nothing, and no script writes after a failed save (before OOM, as
    // there).
    if let Who::Script(_, rules) = who {
        if rules.read_only && spec.flags & (WRITE | MAY_REPLICATE) != 0 {
            ctx.error("ERR Write commands are not allowed from read-only scripts.");
            return Verdict::Refused;
        }
        if spec.flags & WRITE != 0 && misconf_refused(ctx) {
            return Verdict::Refused;
        }
        if spec.flags & WRITE != 0 && noreplicas_refused(ctx) {
            return Verdict::Refused;
        }
        if spec.flags & WRITE != 0
            && !ctx.conn.obey
            && ctx.store.repl.has_master()
            && readonly_refused(ctx)
        {
            return Verdict::Refused;
        }
    }
    // EXEC counts as the commands it queued (Redis's mstate.cmd_flags).
    let exec_flags = match &ctx.conn.multi {
        Some(tx) if matches!(who, Who::Client(_)) && crate::util::eq_ic(&args[0], "exec") => {
            tx.flags()
        }
        _ => 0,
    };
    let flags = spec.flags | exec_flags;
    if ctx.store.config().maxmemory > 0 {
        let refused = match who {
            // Redis's processCommand: make room first; when that fails,
            // refuse what may grow memory (denyoom), let everything else
            // through. Inside MULTI queueing itself grows memory: only EXEC
            // (unless it queued a denyoom command), DISCARD, QUIT and RESET
            // get through.
            Who::Client(_) => {
                !ctx.store.perform_evictions()
                    && match &ctx.conn.multi {
                        _ if flags & DENYOOM != 0 => true,
                        None => false,
                        Some(_) => spec.rules & MULTI_OOM_OK == 0,
                    }
            }
            // Redis's scriptVerifyOOM: a script that was over the limit
            // when it started may not grow memory until it has written.
            Who::Script(_, r) => !r.allow_oom && r.oom && !r.wrote && flags & DENYOOM != 0,
            Who::Exec(_) => false, // (returned above)
        };
        if refused {
            ctx.error(OOM);
            return Verdict::Refused;
        }
    }
    if let Who::Script(..) = who {
        return Verdict::Run(spec);
    }
    // A client's writes (and PING) after a failed save, checked after OOM
    // as in processCommand.
    // The master client of a replica (`obey`) is never refused these.
    let obey = ctx.conn.obey;
    if !obey && (flags & WRITE != 0 || spec.rules & MISCONF_DENIED != 0) && misconf_refused(ctx) {
        return Verdict::Refused;
    }
    // Writes without enough good replicas (`min-replicas-to-write`).
    if !obey && flags & WRITE != 0 && noreplicas_refused(ctx) {
        return Verdict::Refused;
    }
    // A read-only replica takes writes from its master only.
    if !obey && flags & WRITE != 0 && ctx.store.repl.has_master() && readonly_refused(ctx) {
        return Verdict::Refused;
    }
    // A RESP2 connection in subscribed mode runs only what Redis allows there.
    if !ctx.out.resp3 && ctx.store.pubsub.is_subscribed(ctx.conn.id) {
        let top = lookup(&args[0]).unwrap_or(spec);
        if top.rules & SUBSCRIBED_OK == 0 {
            let name = if std::ptr::eq(top, spec) {
                Some(spec.name.to_string())
            } else {
                Some(format!("{}|{}", top.name, spec.name))
            };
            if let Some(name) = name {
                ctx.error(&pubsub::subscribed_error(&name));
                return Verdict::Refused;
            }
        }
    }
    // A replica whose link is down, with `replica-serve-stale-data no`.
    if ctx.store.repl.has_master() && masterdown_refused(ctx, spec.flags) {
        return Verdict::Refused;
    }
    // CLIENT PAUSE: the command waits, unanswered, for the pause to end
    // (every command under ALL; under WRITE those that may write or
    // replicate, and an EXEC that queued one), as Redis's
    // blockPostponeClient.
    if let Some(p) = ctx.store.paused() {
        if p.all || flags & (WRITE | MAY_REPLICATE) != 0 {
            ctx.conn.postponed = Some(p.until);
            ctx.store.note_postponed(ctx.conn.id, true);
            return Verdict::Postponed;
        }
    }
    Verdict::Run(spec)
}

/// The caller, once resolved, for the stages after resolution.
#[derive(Clone, Copy)]
enum Who<'c> {
    Client(&'static Spec),
    Exec(&'static Spec),
    Script(&'static Spec, &'c ScriptRules),
}

impl Who<'_> {
    fn spec(self) -> &'static Spec {
        match self {
            Who::Client(s) | Who::Exec(s) | Who::Script(s, _) => s,
        }
    }
}

/// The MISCONF stage: the last background save or AOF write failed, so
/// no writes (Redis's writeCommandsDeniedByDiskError); the error is
/// written when refused.
fn misconf_refused(ctx: &mut Ctx) -> bool {
    match ctx.store.persist.write_denial(ctx.store.config()) {
        Some(e) => {
            ctx.error(&e);
            true
        }
        None => false,
    }
}

/// The READONLY stage: a replica with `replica-read-only yes` refuses
/// writes (Redis's shared.roslaveerr); the error is written here. Asked
/// only on a replica, so it stays out of a primary's command path.
#[cold]
#[inline(never)]
fn readonly_refused(ctx: &mut Ctx) -> bool {
    if ctx.store.config().repl.replica_read_only {
        ctx.error("READONLY You can't write against a read only replica.");
        return true;
    }
    false
}

/// The MASTERDOWN stage: while a replica's link is down and
/// `replica-serve-stale-data no`, only `stale` commands run. Asked only on
/// a replica.
#[cold]
#[inline(never)]
fn masterdown_refused(ctx: &mut Ctx, flags: u32) -> bool {
    if flags & STALE != 0 || ctx.conn.obey || ctx.store.config().repl.replica_serve_stale_data {
        return false;
    }
    match ctx.store.repl.master() {
        Some(m) if m.status != crate::replication::MasterLink::Connected => {
            ctx.error(
                "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            );
            true
        }
        _ => false,
    }
}

/// The NOREPLICAS stage (`min-replicas-to-write`); the error is written
/// when refused.
fn noreplicas_refused(ctx: &mut Ctx) -> bool {
    let r = &ctx.store.config().repl;
    let refused = ctx.store.config().min_replicas_apply()
        && (ctx.store.repl.good_replicas(r.min_replicas_max_lag) as i64) < r.min_replicas_to_write;
    if refused {
        ctx.error(NOREPLICAS);
    }
    refused
}

/// The AUTH stage: a connection that has not authenticated runs only
/// `no-auth` commands, when a password is required at all (asked last:
/// it looks the default user up).
#[inline(always)]
fn auth_refused(
    conn: &ConnState,
    spec: &Spec,
    out: &mut Out,
    required: impl FnOnce() -> bool,
) -> bool {
    let refused = !conn.authed && spec.flags & NO_AUTH == 0 && required();
    if refused {
        out.error(NOAUTH);
    }
    refused
}

/// The stages of a connection while a script is busy, as Redis's
/// processCommand during a timed-out script: unknown-command, arity and
/// AUTH errors as usual, then the script's own answers (SCRIPT KILL,
/// FUNCTION KILL and STATS, SHUTDOWN NOSAVE), and BUSY for everything else
/// but what the table flags `allow-busy`. Of those, AUTH, HELLO, QUIT,
/// WATCH, UNWATCH and DISCARD are answered at once (what the store must
/// learn waits in `conn.later`); RESET and REPLCONF wait for the store.
/// EXEC is refused with an EXECABORT. MULTI opens a transaction at once;
/// inside it a refusal flags the transaction and `allow-busy` commands are
/// queued (`multi::route_busy`).
fn admit_busy(gate: &Gate, conn: &mut ConnState, out: &mut Out, args: &[Bytes]) -> Verdict {
    // Inside MULTI a refusal flags the transaction: EXEC answers
    // EXECABORT (Redis's rejectCommand).
    let Some(spec) = resolve(out, args) else {
        return busy_refused(conn);
    };
    // The gate knows whether a password is required: a connection that
    // opened while busy is not authenticated when one is.
    if auth_refused(conn, spec, out, || true) {
        return busy_refused(conn);
    }
    let name = args[0].to_ascii_lowercase();
    // EXEC, DISCARD, WATCH and UNWATCH as far as they need no store (a
    // refused EXEC discards the transaction), then AUTH, HELLO and QUIT.
    if super::multi::answer_busy(gate, conn, out, args)
        || (conn.multi.is_none() || name == b"quit" || name == b"reset")
            && super::connection::answer_busy(gate, conn, out, args)
    {
        return Verdict::Answered;
    }
    if conn.multi.is_some() {
        // What runs in MULTI and needs the store (REPLCONF) waits for
        // the script's end.
        if spec.rules & RUNS_IN_MULTI != 0 && name != b"multi" {
            return Verdict::Deferred;
        }
        if spec.flags & ALLOW_BUSY == 0 {
            out.error(gate.busy_error());
            return busy_refused(conn);
        }
    }
    // MULTI, and the allow-busy commands a transaction queues, need no
    // store.
    if spec.flags & ALLOW_BUSY != 0 && super::multi::route_busy(conn, out, spec, args) {
        return Verdict::Answered;
    }
    let script = name == b"script";
    if (script || name == b"function") && spec.name == "kill" {
        match gate.kill(script) {
            Kill::Killed => out.ok(),
            Kill::NotBusy => out.error(NOTBUSY_ERR),
            Kill::Unkillable => out.error(UNKILLABLE_ERR),
            Kill::WrongKind(e) => out.error(e),
        }
    } else if name == b"function" && spec.name == "stats" {
        // FUNCTION STATS during an EVAL script: Redis refuses it.
        if gate.running_function().is_some() {
            crate::scripting::functions::stats_reply(out, gate);
        } else {
            out.error(BUSY_ERR);
        }
    } else if name == b"shutdown" {
        if args[1..].iter().any(|a| a.eq_ignore_ascii_case(b"nosave")) {
            gate.force_kill();
            return Verdict::Shutdown;
        }
        out.error(gate.busy_error());
    } else if spec.flags & ALLOW_BUSY != 0 {
        return Verdict::Deferred;
    } else {
        out.error(gate.busy_error());
    }
    Verdict::Answered
}

/// A busy-time refusal already written: inside MULTI it flags the
/// transaction.
fn busy_refused(conn: &mut ConnState) -> Verdict {
    if let Some(tx) = conn.multi.as_mut() {
        tx.abort();
    }
    Verdict::Answered
}

/// The protected stage: DEBUG and MODULE's loaders, as Redis's
/// CMD_PROTECTED; false with the error written when refused.
fn protected_ok(ctx: &mut Ctx, args: &[Bytes]) -> bool {
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
    if protected_allowed(ctx, setting) {
        return true;
    }
    ctx.error(&format!(
        "ERR {what} command not allowed. If the {option} option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server."
    ));
    false
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

/// Resolution as redis.call does it (Redis's luaRedisGenericCommand): its
/// own error texts, and a container called without a subcommand is checked
/// against the container's arity.
fn resolve_for_script(out: &mut Out, args: &[Bytes]) -> Option<&'static Spec> {
    let spec = match lookup(&args[0]) {
        Some(s) if !s.subs.is_empty() && args.len() >= 2 => lookup_sub(s, &args[1]),
        found => found,
    };
    let Some(spec) = spec else {
        out.error("ERR Unknown Redis command called from script");
        return None;
    };
    if !arity_ok(spec.arity, args.len()) {
        out.error("ERR Wrong number of args calling Redis command from script");
        return None;
    }
    Some(spec)
}

/// Whether `args` names a command Redis knows (redis.acl_check_cmd).
pub fn is_command(args: &[Bytes]) -> bool {
    match lookup(&args[0]) {
        None => false,
        Some(s) if !s.subs.is_empty() && args.len() >= 2 => lookup_sub(s, &args[1]).is_some(),
        Some(_) => true,
    }
}

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
        // A container runs bare when its own arity allows it (COMMAND's
        // -1, as Redis runs commandCommand); the others need a subcommand.
        if arity_ok(spec.arity, 1) {
            return Some(spec);
        }
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

#[cfg(test)]
mod tests {
    //! Admission walked over the whole table: every command and subcommand
    //! in every context the dispatcher knows before it runs a command (a
    //! plain client, before AUTH, inside MULTI, CLIENT PAUSE WRITE and ALL,
    //! RESP2 subscribed mode) must be admitted, refused or queued exactly as
    //! its flags and Latchkey's rules in the table say.

    use super::*;
    use crate::commands::{all_specs, check, run_for_test, RUNS_IN_MULTI};
    use crate::config::Config;
    use crate::server::Store;

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
