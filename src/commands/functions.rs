//! FCALL, FCALL_RO and FUNCTION, as Redis 7.0's functions.c. The
//! libraries and their interpreter are in `crate::scripting::functions`.
//!
//! Reaches the libraries only through `Ctx` (`store.scripting`) and runs a
//! function as EVAL runs a script (`super::scripting::prepare_run`, then
//! `run_placed`). Must not drive Lua itself.

use bytes::Bytes;

use super::*;
use crate::scripting::functions::{self as fns, Policy};
use crate::scripting::{self, Target};
use crate::util::eq_ic;

const SCRIPTING: &[&str] = &["slow", "scripting"];
const WRITE_SCRIPTING: &[&str] = &["write", "slow", "scripting"];
const FCALL_FLAGS: u32 = NOSCRIPT | STALE | SKIP_MONITOR | NO_MANDATORY_KEYS;

pub static COMMANDS: &[Spec] = &[
    spec(
        "fcall",
        -3,
        FCALL_FLAGS,
        (0, 0, 0),
        "scripting",
        "7.0.0",
        "Invoke a function",
        SCRIPTING,
        fcall,
    )
    .rules(RUNS_SCRIPT),
    spec(
        "fcall_ro",
        -3,
        READONLY | FCALL_FLAGS,
        (0, 0, 0),
        "scripting",
        "7.0.0",
        "Invoke a read-only function",
        SCRIPTING,
        fcall_ro,
    )
    .rules(RUNS_SCRIPT),
    Spec {
        subs: FUNCTION_SUBS,
        ..spec(
            "function",
            -2,
            0,
            (0, 0, 0),
            "scripting",
            "7.0.0",
            "A container for function commands",
            &["slow"],
            function_help,
        )
    },
];

static FUNCTION_SUBS: &[Spec] = &[
    // Redis's order (COMMAND INFO / DOCS list them so).
    spec(
        "delete",
        3,
        WRITE | NOSCRIPT,
        (0, 0, 0),
        "scripting",
        "7.0.0",
        "Delete a function by name",
        WRITE_SCRIPTING,
        function_delete,
    ),
    spec(
        "flush",
        -2,
        WRITE | NOSCRIPT,
        (0, 0, 0),
        "scripting",
        "7.0.0",
        "Deleting all functions",
        WRITE_SCRIPTING,
        function_flush,
    ),
    spec(
        "load",
        -3,
        WRITE | DENYOOM | NOSCRIPT,
        (0, 0, 0),
        "scripting",
        "7.0.0",
        "Create a function with the given arguments (name, code, description)",
        WRITE_SCRIPTING,
        function_load,
    ),
    spec(
        "dump",
        2,
        NOSCRIPT,
        (0, 0, 0),
        "scripting",
        "7.0.0",
        "Dump all functions into a serialized binary payload",
        SCRIPTING,
        function_dump,
    ),
    spec(
        "kill",
        2,
        NOSCRIPT | ALLOW_BUSY,
        (0, 0, 0),
        "scripting",
        "7.0.0",
        "Kill the function currently in execution.",
        SCRIPTING,
        function_kill,
    ),
    spec(
        "list",
        -2,
        NOSCRIPT,
        (0, 0, 0),
        "scripting",
        "7.0.0",
        "List information about all the functions",
        SCRIPTING,
        function_list,
    ),
    spec(
        "help",
        2,
        LOADING | STALE,
        (0, 0, 0),
        "scripting",
        "7.0.0",
        "Show helpful text about the different subcommands",
        SCRIPTING,
        function_help,
    ),
    spec(
        "restore",
        -3,
        WRITE | DENYOOM | NOSCRIPT,
        (0, 0, 0),
        "scripting",
        "7.0.0",
        "Restore all the functions on the given payload",
        WRITE_SCRIPTING,
        function_restore,
    ),
    spec(
        "stats",
        2,
        NOSCRIPT | ALLOW_BUSY,
        (0, 0, 0),
        "scripting",
        "7.0.0",
        "Return information about the function currently running (name, description, duration)",
        SCRIPTING,
        function_stats,
    ),
];

fn fcall(ctx: &mut Ctx, args: &[Bytes]) {
    fcall_generic(ctx, args, false);
}

fn fcall_ro(ctx: &mut Ctx, args: &[Bytes]) {
    fcall_generic(ctx, args, true);
}

fn fcall_generic(ctx: &mut Ctx, args: &[Bytes], ro: bool) {
    // Functions are fed to monitors before the commands they run.
    if !ctx.store.monitors.is_empty() {
        super::feed_monitors(ctx, args);
    }
    let Some(f) = ctx.store.scripting.functions.get(&args[1]).cloned() else {
        return ctx.error("ERR Function not found");
    };
    let numkeys = match crate::util::parse_i64(&args[2]) {
        Some(n) => n,
        None => return ctx.error("ERR Bad number of keys provided"),
    };
    if numkeys > args.len() as i64 - 3 {
        return ctx.error("ERR Number of keys can't be greater than number of args");
    }
    if numkeys < 0 {
        return ctx.error("ERR Number of keys can't be negative");
    }
    let Some((mut setup, rules)) = super::scripting::prepare_run(ctx, f.flags, ro) else {
        return;
    };
    // FUNCTION STATS shows the running function's command.
    setup.command = args.to_vec();
    let (keys, argv) = args[3..].split_at(numkeys as usize);
    let mut engine = ctx.store.scripting.functions.take_engine();
    let target = Target::Function {
        name: &f.name,
        lua_ref: f.lua_ref,
    };
    super::run_placed(ctx, &mut engine, setup, rules, target, keys, argv);
    ctx.store.scripting.functions.restore_engine(engine);
}

fn function_load(ctx: &mut Ctx, args: &[Bytes]) {
    let mut replace = false;
    let mut i = 2;
    while i < args.len() - 1 {
        if !eq_ic(&args[i], "replace") {
            let mut e = b"ERR Unknown option given: ".to_vec();
            e.extend_from_slice(crate::util::c_str(&args[i]));
            return ctx.out.error_bytes(&e);
        }
        replace = true;
        i += 1;
    }
    let gate = ctx.store.scripting.gate.clone();
    match ctx.store.scripting.functions.load(&args[i], replace, &gate) {
        Ok(name) => {
            ctx.store.ks.add_dirty(1);
            ctx.out.bulk(name.as_bytes())
        }
        Err(e) => ctx.error(&format!("ERR {e}")),
    }
}

fn function_delete(ctx: &mut Ctx, args: &[Bytes]) {
    let gate = ctx.store.scripting.gate.clone();
    if ctx.store.scripting.functions.delete(&args[2], &gate) {
        ctx.store.ks.add_dirty(1);
        ctx.out.ok();
    } else {
        ctx.error("ERR Library not found");
    }
}

fn function_flush(ctx: &mut Ctx, args: &[Bytes]) {
    match args.len() {
        2 => {}
        3 if eq_ic(&args[2], "sync") || eq_ic(&args[2], "async") => {}
        3 => return ctx.error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option"),
        _ => return subcommand_syntax_error(ctx.out, args),
    }
    let gate = ctx.store.scripting.gate.clone();
    ctx.store.scripting.functions.flush(&gate);
    ctx.store.ks.add_dirty(1);
    ctx.out.ok();
}

/// With the store lock in hand nothing runs (a running function holds
/// it): the busy case is answered outside the lock (`gate`).
fn function_kill(ctx: &mut Ctx, _args: &[Bytes]) {
    ctx.error(scripting::gate::NOTBUSY_ERR);
}

fn function_stats(ctx: &mut Ctx, _args: &[Bytes]) {
    let gate = ctx.store.scripting.gate.clone();
    fns::stats_reply(ctx.out, &gate);
}

fn function_list(ctx: &mut Ctx, args: &[Bytes]) {
    let mut with_code = false;
    let mut pattern: Option<&[u8]> = None;
    let mut i = 2;
    while i < args.len() {
        let a = &args[i];
        if !with_code && eq_ic(a, "withcode") {
            with_code = true;
        } else if pattern.is_none() && eq_ic(a, "libraryname") {
            if i >= args.len() - 1 {
                return ctx.error("ERR library name argument was not given");
            }
            i += 1;
            pattern = Some(&args[i]);
        } else {
            let mut e = b"ERR Unknown argument ".to_vec();
            e.extend_from_slice(crate::util::c_str(a));
            return ctx.out.error_bytes(&e);
        }
        i += 1;
    }
    let libs: Vec<&fns::Library> = ctx
        .store
        .scripting
        .functions
        .libraries()
        .filter(|l| pattern.is_none_or(|p| crate::glob::matches(p, l.name.as_bytes(), true)))
        .collect();
    let out = &mut *ctx.out;
    out.array(libs.len());
    for lib in libs {
        out.map(if with_code { 4 } else { 3 });
        out.bulk(b"library_name");
        out.bulk(lib.name.as_bytes());
        out.bulk(b"engine");
        out.bulk(b"LUA");
        out.bulk(b"functions");
        out.array(lib.functions.len());
        for f in &lib.functions {
            out.map(3);
            out.bulk(b"name");
            out.bulk(f.name.as_bytes());
            out.bulk(b"description");
            match &f.desc {
                Some(d) => out.bulk(d),
                None => out.null(),
            }
            out.bulk(b"flags");
            let names: Vec<&str> = fns::flag_names(f.flags).collect();
            out.set(names.len());
            for n in names {
                out.simple(n);
            }
        }
        if with_code {
            out.bulk(b"library_code");
            out.bulk(&lib.code);
        }
    }
}

fn function_dump(ctx: &mut Ctx, _args: &[Bytes]) {
    let payload = ctx.store.scripting.functions.dump();
    ctx.out.bulk(&payload);
}

fn function_restore(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len() > 4 {
        return subcommand_syntax_error(ctx.out, args);
    }
    let policy =
        match args.get(3) {
            None => Policy::Append,
            Some(p) if eq_ic(p, "flush") => Policy::Flush,
            Some(p) if eq_ic(p, "append") => Policy::Append,
            Some(p) if eq_ic(p, "replace") => Policy::Replace,
            Some(_) => return ctx.error(
                "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
            ),
        };
    let codes = match scripting::dump::decode(&args[2]) {
        Ok(c) => c,
        Err(e) => return ctx.error(&format!("ERR {e}")),
    };
    let gate = ctx.store.scripting.gate.clone();
    let codes = codes.into_iter().map(Bytes::from).collect();
    match ctx.store.scripting.functions.restore(codes, policy, &gate) {
        Ok(()) => {
            ctx.store.ks.add_dirty(1);
            ctx.out.ok()
        }
        Err(e) => ctx.error(&format!("ERR {e}")),
    }
}

const FUNCTION_HELP: &[&str] = &[
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
    "      in case of functions name collision with another library).",
    "HELP",
    "    Prints this help.",
];

fn function_help(ctx: &mut Ctx, _args: &[Bytes]) {
    ctx.out.array(FUNCTION_HELP.len());
    for l in FUNCTION_HELP {
        ctx.out.simple(l);
    }
}
