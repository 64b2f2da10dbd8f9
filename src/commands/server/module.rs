//! MODULE: latchkey loads no Redis modules (they are C shared objects
//! for Redis's own API). LIST answers truthfully (none); LOAD, LOADEX and
//! UNLOAD are refused as Redis refuses them: first by
//! `enable-module-command` (its default, no), then as a load that failed.
//!
//! Must not touch the store: `enable-module-command` is checked by
//! admission (the `PROTECTED` flag); the handlers only reply.

use bytes::Bytes;

use super::*;

const MODULE_FLAGS: u32 = ADMIN | NOSCRIPT | NO_ASYNC_LOADING | PROTECTED;

pub static MODULE_SUBS: &[Spec] = &[
    spec(
        "help",
        2,
        LOADING | STALE,
        (0, 0, 0),
        "server",
        "5.0.0",
        "Show helpful text about the different subcommands",
        &["slow"],
        help,
    ),
    spec(
        "list",
        2,
        ADMIN | NOSCRIPT,
        (0, 0, 0),
        "server",
        "4.0.0",
        "List all modules loaded by the server",
        ADMIN_ACL,
        list,
    ),
    spec(
        "load",
        -3,
        MODULE_FLAGS,
        (0, 0, 0),
        "server",
        "4.0.0",
        "Load a module",
        ADMIN_ACL,
        load,
    ),
    spec(
        "loadex",
        -3,
        MODULE_FLAGS,
        (0, 0, 0),
        "server",
        "7.0.0",
        "Load a module with extended parameters",
        ADMIN_ACL,
        load,
    ),
    spec(
        "unload",
        3,
        MODULE_FLAGS,
        (0, 0, 0),
        "server",
        "4.0.0",
        "Unload a module",
        ADMIN_ACL,
        unload,
    ),
];

fn help(ctx: &mut Ctx, _args: &[Bytes]) {
    reply_help(
        ctx,
        "MODULE",
        &[
            "LIST",
            "    Return a list of loaded modules.",
            "LOAD <path> [<arg> ...]",
            "    Load a module library from <path>, passing to it any optional arguments.",
            "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
            "    Load a module library from <path>, while passing it module configurations and optional arguments.",
            "UNLOAD <name>",
            "    Unload a module.",
        ],
    );
}

fn list(ctx: &mut Ctx, _args: &[Bytes]) {
    ctx.out.array(0);
}

fn load(ctx: &mut Ctx, args: &[Bytes]) {
    tracing::warn!(
        "Module {} failed to load: latchkey does not load Redis modules",
        String::from_utf8_lossy(&args[2])
    );
    ctx.error("ERR Error loading the extension. Please check the server logs.");
}

fn unload(ctx: &mut Ctx, _args: &[Bytes]) {
    ctx.error("ERR Error unloading module: no such module with that name");
}
