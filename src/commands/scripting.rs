//! EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT, as Redis 7.0's eval.c.
//! The interpreter, the conversions and the libraries are in
//! `crate::scripting`.
//!
//! Reaches the script cache only through `Ctx` (`store.scripting`); a
//! script's commands go through `script_host` (admission, then `call`),
//! never a handler directly. Must not drive Lua but by `crate::scripting`.

use bytes::Bytes;

use super::Pushes;
use super::*;
use crate::scripting::{self, RunSetup};
use crate::util::eq_ic;

const SCRIPTING: &[&str] = &["slow", "scripting"];
const EVAL_FLAGS: u32 = NOSCRIPT | STALE | SKIP_MONITOR | NO_MANDATORY_KEYS;

const NOSCRIPT_ERR: &str = "NOSCRIPT No matching script. Please use EVAL.";

pub static COMMANDS: &[Spec] = &[
    spec(
        "eval",
        -3,
        EVAL_FLAGS,
        (0, 0, 0),
        "scripting",
        "2.6.0",
        "Execute a Lua script server side",
        SCRIPTING,
        eval,
    )
    .pushes(Pushes::First)
    .rules(RUNS_SCRIPT),
    spec(
        "evalsha",
        -3,
        EVAL_FLAGS,
        (0, 0, 0),
        "scripting",
        "2.6.0",
        "Execute a Lua script server side",
        SCRIPTING,
        evalsha,
    )
    .pushes(Pushes::First)
    .rules(RUNS_SCRIPT),
    spec(
        "eval_ro",
        -3,
        READONLY | EVAL_FLAGS,
        (0, 0, 0),
        "scripting",
        "7.0.0",
        "Execute a read-only Lua script server side",
        SCRIPTING,
        eval_ro,
    )
    .pushes(Pushes::First)
    .rules(RUNS_SCRIPT),
    spec(
        "evalsha_ro",
        -3,
        READONLY | EVAL_FLAGS,
        (0, 0, 0),
        "scripting",
        "7.0.0",
        "Execute a read-only Lua script server side",
        SCRIPTING,
        evalsha_ro,
    )
    .pushes(Pushes::First)
    .rules(RUNS_SCRIPT),
    Spec {
        subs: SCRIPT_SUBS,
        ..spec(
            "script",
            -2,
            0,
            (0, 0, 0),
            "scripting",
            "2.6.0",
            "A container for Lua scripts management commands",
            &["slow"],
            script_help,
        )
    },
];

static SCRIPT_SUBS: &[Spec] = &[
    // Redis's order (COMMAND INFO / DOCS list them so).
    spec(
        "exists",
        -3,
        NOSCRIPT,
        (0, 0, 0),
        "scripting",
        "2.6.0",
        "Check existence of scripts in the script cache.",
        SCRIPTING,
        script_exists,
    ),
    spec(
        "help",
        2,
        LOADING | STALE,
        (0, 0, 0),
        "scripting",
        "5.0.0",
        "Show helpful text about the different subcommands",
        SCRIPTING,
        script_help,
    ),
    spec(
        "flush",
        -2,
        NOSCRIPT,
        (0, 0, 0),
        "scripting",
        "2.6.0",
        "Remove all the scripts from the script cache.",
        SCRIPTING,
        script_flush,
    ),
    spec(
        "kill",
        2,
        NOSCRIPT | ALLOW_BUSY,
        (0, 0, 0),
        "scripting",
        "2.6.0",
        "Kill the script currently in execution.",
        SCRIPTING,
        script_kill,
    ),
    spec(
        "load",
        3,
        NOSCRIPT | STALE,
        (0, 0, 0),
        "scripting",
        "2.6.0",
        "Load the specified Lua script into the script cache.",
        SCRIPTING,
        script_load,
    ),
];

fn eval(ctx: &mut Ctx, args: &[Bytes]) {
    eval_generic(ctx, args, false, false);
}

fn evalsha(ctx: &mut Ctx, args: &[Bytes]) {
    eval_generic(ctx, args, true, false);
}

fn eval_ro(ctx: &mut Ctx, args: &[Bytes]) {
    eval_generic(ctx, args, false, true);
}

fn evalsha_ro(ctx: &mut Ctx, args: &[Bytes]) {
    eval_generic(ctx, args, true, true);
}

/// Whether the server is over `maxmemory` (Redis's pre_command_oom_state,
/// after `check` made what room it could).
fn over_maxmemory(ctx: &Ctx) -> bool {
    let max = ctx.store.config().maxmemory;
    max > 0 && ctx.store.memory_for_maxmemory() > max
}

fn eval_generic(ctx: &mut Ctx, args: &[Bytes], evalsha: bool, ro: bool) {
    // EVAL is skip-monitor: it shows itself before the commands it runs.
    if !ctx.store.monitors.is_empty() {
        super::feed_monitors(ctx, args);
    }
    if evalsha && args[1].len() != 40 {
        return ctx.error(NOSCRIPT_ERR);
    }
    let Some(numkeys) = arg_i64(ctx, &args[2]) else {
        return;
    };
    if numkeys > args.len() as i64 - 3 {
        return ctx.error("ERR Number of keys can't be greater than number of args");
    }
    if numkeys < 0 {
        return ctx.error("ERR Number of keys can't be negative");
    }
    let mut engine = ctx.store.scripting.take();
    let mut sha = [0u8; 40];
    if evalsha {
        // Checked to be 40 bytes above.
        for (d, c) in sha.iter_mut().zip(args[1].iter()) {
            *d = c.to_ascii_lowercase();
        }
    } else {
        sha.copy_from_slice(scripting::sha1hex(&args[1]).as_bytes());
    }
    let found = engine.script(&sha).map(|s| (s.flags, s.lua_ref()));
    let (flags, lua_ref) = match found {
        Some(f) => f,
        None if evalsha => {
            ctx.store.scripting.restore(engine);
            return ctx.error(NOSCRIPT_ERR);
        }
        None => match engine.create(&args[1]) {
            Ok(_) => engine
                .script(&sha)
                .map_or((0, 0), |s| (s.flags, s.lua_ref())),
            Err(e) => {
                ctx.store.scripting.restore(engine);
                return ctx.error(&e);
            }
        },
    };
    let Some((setup, rules)) = prepare_run(ctx, flags, ro) else {
        ctx.store.scripting.restore(engine);
        return;
    };
    let n = numkeys as usize;
    let (keys, argv) = args[3..].split_at(n);
    // An EVALSHA of a name that is not hex is NOSCRIPT above.
    let sha = std::str::from_utf8(&sha).unwrap_or_default();
    let target = scripting::Target::Script { sha, lua_ref };
    super::run_placed(ctx, &mut engine, setup, rules, target, keys, argv);
    ctx.store.scripting.restore(engine);
}

/// Redis's scriptPrepareForRun checks for a script or function with
/// `flags`: the error is replied and None returned when it may not run;
/// else the engine's set-up and the rules for the commands it calls.
pub(super) fn prepare_run(
    ctx: &mut Ctx,
    flags: u32,
    ro: bool,
) -> Option<(RunSetup, super::ScriptRules)> {
    let compat = flags & scripting::FLAG_EVAL_COMPAT != 0;
    let oom = over_maxmemory(ctx);
    if !compat {
        // Redis's processCommand refuses it first: the flags make the
        // command deny-oom (scriptFlagsToCmdFlags).
        if oom && flags & (scripting::FLAG_ALLOW_OOM | scripting::FLAG_NO_WRITES) == 0 {
            ctx.error(OOM);
            return None;
        }
        let no_writes = flags & scripting::FLAG_NO_WRITES != 0;
        if !no_writes && ro {
            ctx.error("ERR Can not execute a script with write flag using *_ro command.");
            return None;
        }
    }
    let setup = RunSetup {
        command: Vec::new(),
        gate: ctx.store.scripting.gate.clone(),
        users: ctx.store.acl.users.clone(),
        dirty: ctx.store.ks.dirty(),
        threshold_ms: ctx.store.config().busy_reply_threshold,
        rand48: ctx.store.scripting.rand48(),
        on_worker: false,
    };
    let rules = super::ScriptRules {
        read_only: ro || (!compat && flags & scripting::FLAG_NO_WRITES != 0),
        allow_oom: !compat && flags & scripting::FLAG_ALLOW_OOM != 0,
        oom,
        wrote: false,
    };
    Some((setup, rules))
}

const SCRIPT_HELP: &[&str] = &[
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Prints this help.",
];

fn script_help(ctx: &mut Ctx, _args: &[Bytes]) {
    ctx.out.array(SCRIPT_HELP.len());
    for l in SCRIPT_HELP {
        ctx.out.simple(l);
    }
}

fn script_exists(ctx: &mut Ctx, args: &[Bytes]) {
    ctx.out.array(args.len() - 2);
    for a in &args[2..] {
        let found = ctx.store.scripting.exists(&a.to_ascii_lowercase());
        ctx.out.int(found as i64);
    }
}

fn script_flush(ctx: &mut Ctx, args: &[Bytes]) {
    match args.len() {
        2 => {}
        3 if eq_ic(&args[2], "sync") || eq_ic(&args[2], "async") => {}
        _ => return ctx.error("ERR SCRIPT FLUSH only support SYNC|ASYNC option"),
    }
    ctx.store.scripting.flush();
    ctx.out.ok();
}

/// With the store lock in hand no script is running (a running script
/// holds it): the busy case is answered outside the lock (`gate`).
fn script_kill(ctx: &mut Ctx, _args: &[Bytes]) {
    ctx.error(scripting::gate::NOTBUSY_ERR);
}

fn script_load(ctx: &mut Ctx, args: &[Bytes]) {
    let mut engine = ctx.store.scripting.take();
    let r = engine.create(&args[2]);
    ctx.store.scripting.restore(engine);
    match r {
        Ok(sha) => ctx.out.bulk(sha.as_bytes()),
        Err(e) => ctx.error(&e),
    }
}
