//! The server's side of scripting: what a running script's redis.call
//! reaches (`ScriptHost`, the `scripting::Host` the Lua engine calls), where
//! a run is placed (`run_placed`), and the answers a connection gets while a
//! script is busy (`answer_busy`). Every command a script runs and every
//! request answered while busy goes through `admission::admit`, with the
//! script's or the busy connection's context as the caller; the engine in
//! `crate::scripting` knows no command. Must not touch the Lua C API.

use std::sync::Arc;

use bytes::Bytes;

use super::admission::{admit, is_command, Caller, ScriptRules, Verdict};
use super::context::{ConnState, Ctx};
use super::table::WRITE;
use super::{call, propagate, timeout_reply};
use crate::resp::Out;
use crate::scripting::{gate::Gate, in_place, Engine, Host, RunSetup, Target};
use crate::server::ClientSignal;

/// The script's own client, kept with the interpreter between runs (its
/// command lookup and statistics caches stay warm), reset for each run.
struct ScriptClient {
    conn: ConnState,
    /// What `conn` holds between runs instead of a caller's signal.
    idle_signal: Arc<ClientSignal>,
}

/// One run's host: the calling command's context, the script's client and
/// the writes to log in the script's place.
struct ScriptHost<'c, 'a> {
    ctx: &'c mut Ctx<'a>,
    /// The script's own client: its db (SELECT in a script is local to
    /// it), its id (SETTP binds to the caller), the caller's ACL user.
    conn: &'c mut ConnState,
    rules: ScriptRules,
    gate: Arc<Gate>,
    /// The writes its commands made, to log in the script's place (Redis
    /// 7's effects propagation: a replay gives the same data whatever the
    /// script computed).
    effects: Vec<crate::effects::Logged>,
}

impl Host for ScriptHost<'_, '_> {
    fn call(&mut self, args: Vec<Bytes>, resp3: bool, buf: Vec<u8>) -> Result<Vec<u8>, Vec<u8>> {
        let mut out = Out::scratch(resp3);
        out.buf = buf;
        out.buf.clear();
        let mut c = Ctx {
            store: &mut *self.ctx.store,
            conn: &mut *self.conn,
            out: &mut out,
        };
        let spec = match admit(Caller::Script(&mut c, &self.rules), &args) {
            Verdict::Run(spec) => spec,
            _ => return Err(out.buf),
        };
        if spec.flags & WRITE != 0 {
            self.rules.wrote = true;
            self.gate.set_wrote();
        }
        let db = c.conn.db;
        let r = call(&mut c, spec, &args);
        if spec.flags & WRITE != 0 {
            self.gate.note_dirty(c.store.ks.dirty());
        }
        let logged = propagate::logged(&mut c, spec, &args, db, r);
        self.effects.extend(logged);
        // Nothing blocks in a script: a blocking command replies as on timeout.
        if let Some(req) = self.conn.block.take() {
            let id = self.conn.id;
            timeout_reply(self.ctx.store, id, &mut out, req.on_timeout);
        }
        Ok(out.buf)
    }

    fn is_command(&self, args: &[Bytes]) -> bool {
        is_command(args)
    }

    fn out(&mut self) -> &mut Out {
        self.ctx.out
    }
}

/// Runs `target` for the command in `ctx` on `engine`, placed: on the
/// worker directly when it ran briefly last time, else off it first
/// (`scripting::in_place`); the run's duration is recorded for the next
/// decision and its random state kept. The script's writes become the
/// command's change record (`ctx.conn.rewrite`).
pub fn run_placed(
    ctx: &mut Ctx,
    engine: &mut Engine,
    mut setup: RunSetup,
    rules: ScriptRules,
    target: Target,
    keys: &[Bytes],
    argv: &[Bytes],
) {
    let key = match target {
        Target::Script { sha, .. } => sha,
        Target::Function { name, .. } => name,
    };
    let fast = ctx.store.scripting.is_fast(key);
    setup.on_worker = fast;
    let mut client = match engine
        .host_state()
        .take()
        .map(|b| b.downcast::<ScriptClient>())
    {
        Some(Ok(c)) => c,
        _ => Box::new(ScriptClient {
            conn: ConnState::new(0, true),
            idle_signal: Arc::default(),
        }),
    };
    let conn = &mut client.conn;
    conn.id = ctx.conn.id;
    conn.db = ctx.conn.db;
    conn.in_script = true;
    conn.script_keys.clear();
    if !ctx.store.tracking.is_empty() && ctx.store.tracking.mode(ctx.conn.id).is_some() {
        conn.script_keys
            .extend(keys.iter().map(|k| Bytes::copy_from_slice(k)));
    }
    conn.signal = ctx.conn.signal.clone();
    // Commands run as the caller's ACL user.
    conn.user = ctx.conn.user.clone();
    conn.acl_unrestricted = ctx.conn.acl_unrestricted;
    let gate = setup.gate.clone();
    let sw = crate::util::Stopwatch::start();
    let mut host = ScriptHost {
        ctx: &mut *ctx,
        conn,
        rules,
        gate,
        effects: Vec::new(),
    };
    let rand = if fast {
        engine.run(&mut host, setup, target, keys, argv)
    } else {
        in_place(|| engine.run(&mut host, setup, target, keys, argv))
    };
    let effects = std::mem::take(&mut host.effects);
    ctx.store.scripting.note_run(key, fast, sw.micros());
    ctx.store.scripting.set_rand48(rand);
    ctx.conn.rewrite = Some(propagate::wrap(effects));
    // Nothing of the caller stays with the kept state.
    client.conn.signal = client.idle_signal.clone();
    *engine.host_state() = Some(client);
}

/// What the connection must do after [`answer_busy`].
#[derive(Debug, PartialEq, Eq)]
pub enum Busy {
    Answered,
    /// SHUTDOWN NOSAVE: the caller begins the shutdown.
    Shutdown,
    /// A command Redis runs while busy (allow-busy: AUTH, HELLO, RESET,
    /// QUIT...) needs the store here: it and the requests after it are
    /// left in `frames`, to run once the script ends.
    Deferred,
}

/// Answers `frames` without the store while a script is busy (admission
/// with the busy caller: unknown-command and arity errors as usual, SCRIPT
/// KILL, SHUTDOWN NOSAVE, BUSY for everything else). Consumes the frames
/// it answered.
pub fn answer_busy(
    gate: &Gate,
    conn: &mut ConnState,
    out: &mut Out,
    frames: &mut Vec<Vec<Bytes>>,
) -> Busy {
    let mut result = Busy::Answered;
    let mut done = 0;
    for args in frames.iter() {
        if args.is_empty() {
            done += 1;
            continue;
        }
        match admit(Caller::Busy { gate, conn, out }, args) {
            Verdict::Deferred => {
                result = Busy::Deferred;
                break;
            }
            Verdict::Shutdown => {
                result = Busy::Shutdown;
                done += 1;
                break;
            }
            _ => done += 1,
        }
        if conn.close_after_reply {
            // QUIT: nothing after it runs.
            frames.clear();
            return result;
        }
    }
    frames.drain(..done);
    result
}

#[cfg(test)]
mod walk {
    //! The busy-script context walked over the whole table: while a script
    //! is busy, every command is answered BUSY without the store, but those
    //! flagged `allow-busy`, which wait for the store (the gate's own
    //! answers, SCRIPT KILL, FUNCTION KILL and STATS, SHUTDOWN, aside).

    use super::*;
    use crate::commands::{all_specs, Later, ALLOW_BUSY, PROTECTED};

    /// Commands the gate answers itself while busy.
    fn answered_by_the_gate(name: &str) -> bool {
        matches!(
            name,
            "script|kill"
                | "function|kill"
                | "function|stats"
                | "shutdown"
                | "auth"
                | "hello"
                | "quit"
                | "reset"
                | "discard"
                | "unwatch"
                | "watch"
                | "exec"
        )
    }

    #[test]
    fn busy_answers_what_the_table_says() {
        let gate = Gate::default();
        gate.begin(1, crate::acl::Users::new(crate::commands::acl_catalog()), 0);
        let mut walked = 0;
        for (s, p) in all_specs().iter().copied() {
            if !s.subs.is_empty() || s.flags & PROTECTED != 0 {
                continue;
            }
            let name = match p {
                Some(p) => format!("{}|{}", p.name, s.name),
                None => s.name.to_string(),
            };
            if answered_by_the_gate(&name) {
                continue;
            }
            let mut args: Vec<Bytes> = name
                .split('|')
                .map(|n| Bytes::from(n.to_string()))
                .collect();
            while args.len() < s.arity.unsigned_abs() as usize {
                args.push(Bytes::from_static(b"x"));
            }
            let mut frames = vec![args];
            let mut out = Out::new(false);
            let mut conn = ConnState::new(1, true);
            let r = answer_busy(&gate, &mut conn, &mut out, &mut frames);
            if name == "multi" {
                // It needs no store: the transaction opens at once.
                assert_eq!(r, Busy::Answered);
                assert_eq!(out.buf, b"+OK\r\n");
                assert!(conn.multi.is_some());
            } else if s.flags & ALLOW_BUSY != 0 {
                assert_eq!(r, Busy::Deferred, "{name}");
                assert_eq!(frames.len(), 1, "{name} must wait for the store");
                assert!(out.buf.is_empty(), "{name} answered while busy");
            } else {
                assert_eq!(r, Busy::Answered, "{name}");
                assert_eq!(
                    String::from_utf8_lossy(&out.buf),
                    format!("-{}\r\n", gate.busy_error()),
                    "{name}"
                );
            }
            walked += 1;
        }
        assert!(walked > 250, "only {walked} commands walked");
    }

    #[test]
    fn inside_multi_busy_refusals_flag_the_transaction() {
        let gate = Gate::default();
        gate.begin(1, crate::acl::Users::new(crate::commands::acl_catalog()), 0);
        let mut conn = ConnState::new(1, true);
        let mut out = Out::new(false);
        let frame = |a: &[&str]| a.iter().map(|s| Bytes::from(s.to_string())).collect();
        let mut frames = vec![frame(&["MULTI"]), frame(&["SET", "k", "v"])];
        assert_eq!(
            answer_busy(&gate, &mut conn, &mut out, &mut frames),
            Busy::Answered
        );
        assert!(frames.is_empty());
        assert_eq!(
            String::from_utf8_lossy(&out.buf),
            format!("+OK\r\n-{}\r\n", gate.busy_error())
        );
        assert!(format!("{:?}", conn.multi).contains("aborted: true"));
        // An allow-busy command is queued; EXEC is refused, which discards
        // the transaction (its watches go when the store is free).
        out.buf.clear();
        let mut frames = vec![frame(&["SCRIPT", "KILL"]), frame(&["EXEC"])];
        assert_eq!(
            answer_busy(&gate, &mut conn, &mut out, &mut frames),
            Busy::Answered
        );
        assert_eq!(
            String::from_utf8_lossy(&out.buf),
            format!(
                "+QUEUED\r\n-EXECABORT Transaction discarded because of: {}\r\n",
                gate.busy_error()
            )
        );
        assert!(frames.is_empty());
        assert!(conn.multi.is_none());
        assert_eq!(conn.later, vec![Later::Unwatched]);
    }

    #[test]
    fn auth_hello_and_quit_answer_while_busy() {
        let gate = Gate::default();
        let mut users = crate::acl::Users::new(crate::commands::acl_catalog());
        users.set_default_password(Some(b"secret"));
        gate.begin(1, users, 0);
        let mut conn = ConnState::new(7, false);
        let mut out = Out::new(false);
        let frame = |a: &[&str]| a.iter().map(|s| Bytes::from(s.to_string())).collect();
        let mut frames = vec![
            frame(&["AUTH", "wrong"]),
            frame(&["HELLO", "3", "AUTH", "default", "secret", "SETNAME", "n"]),
            frame(&["QUIT"]),
            frame(&["PING"]),
        ];
        assert_eq!(
            answer_busy(&gate, &mut conn, &mut out, &mut frames),
            Busy::Answered
        );
        let text = String::from_utf8_lossy(&out.buf);
        assert!(text.starts_with("-WRONGPASS"), "{text}");
        assert!(text.contains("%7\r\n$6\r\nserver\r\n"), "{text}");
        assert!(text.contains("$2\r\nid\r\n:7\r\n"), "{text}");
        assert!(text.ends_with("+OK\r\n"), "{text}");
        assert!(frames.is_empty(), "nothing runs after QUIT");
        assert!(conn.authed && conn.close_after_reply && out.resp3);
        assert_eq!(conn.later.len(), 4, "{:?}", conn.later);
        assert!(matches!(conn.later[0], Later::AuthFailed { .. }));
        assert_eq!(conn.later[1], Later::User(Bytes::from_static(b"default")));
        assert_eq!(conn.later[2], Later::Name(Some(Bytes::from_static(b"n"))));
        assert_eq!(conn.later[3], Later::Resp(3));
    }
}
