//! COMMAND, COMMAND COUNT / INFO / DOCS / LIST / HELP, answered from the
//! command table in Redis 7.0's reply shapes.
//!
//! COMMAND is a container whose own arity (-1) lets it run bare, as Redis
//! runs commandCommand: the dispatcher resolves its subcommands (so ACL
//! rules, commandstats and errors name `command|docs` as Redis does).
//!
//! Must not touch the store: it reads the command table and the stored
//! docs and key specs (`docs`, `keyspecs`) only.

use bytes::Bytes;

use super::keyspecs;
use super::*;

const CMD_ACL: &[&str] = &["slow", "connection"];

pub(super) static SUBS: &[Spec] = &[
    spec(
        "count",
        2,
        LOADING | STALE,
        (0, 0, 0),
        "server",
        "2.8.13",
        "Get total number of Redis commands",
        CMD_ACL,
        count,
    ),
    spec(
        "info",
        -2,
        LOADING | STALE,
        (0, 0, 0),
        "server",
        "2.8.13",
        "Get array of specific Redis command details, or all when no argument is given.",
        CMD_ACL,
        info,
    ),
    spec(
        "docs",
        -2,
        LOADING | STALE,
        (0, 0, 0),
        "server",
        "7.0.0",
        "Get array of specific Redis command documentation",
        CMD_ACL,
        docs,
    ),
    spec(
        "list",
        -2,
        LOADING | STALE,
        (0, 0, 0),
        "server",
        "7.0.0",
        "Get an array of Redis command names",
        CMD_ACL,
        list,
    ),
    spec(
        "getkeys",
        -4,
        LOADING | STALE,
        (0, 0, 0),
        "server",
        "2.8.13",
        "Extract keys given a full Redis command",
        CMD_ACL,
        getkeys,
    ),
    spec(
        "getkeysandflags",
        -4,
        LOADING | STALE,
        (0, 0, 0),
        "server",
        "7.0.0",
        "Extract keys and access flags given a full Redis command",
        CMD_ACL,
        getkeysandflags,
    ),
    spec(
        "help",
        2,
        LOADING | STALE,
        (0, 0, 0),
        "server",
        "5.0.0",
        "Show helpful text about the different subcommands",
        CMD_ACL,
        help,
    ),
];

/// Flags in the order Redis 7.0 prints them (may_replicate is hidden there).
const FLAG_ORDER: &[u32] = &[
    WRITE,
    READONLY,
    DENYOOM,
    ADMIN,
    PUBSUB,
    NOSCRIPT,
    BLOCKING,
    LOADING,
    STALE,
    SKIP_MONITOR,
    SKIP_SLOWLOG,
    FAST,
    NO_AUTH,
    NO_MANDATORY_KEYS,
    NO_ASYNC_LOADING,
    NO_MULTI,
    ALLOW_BUSY,
];

fn flag_name(f: u32) -> &'static str {
    FLAG_NAMES
        .iter()
        .find(|(b, _)| *b == f)
        .map(|(_, n)| *n)
        .unwrap_or("")
}

fn all_commands() -> Vec<&'static Spec> {
    let mut v: Vec<&'static Spec> = families().iter().flat_map(|f| f.iter()).collect();
    v.sort_by_key(|s| s.name);
    v
}

/// Finds "name" or "container|sub", case-insensitively.
fn find(name: &[u8]) -> Option<(&'static Spec, Option<&'static Spec>)> {
    let name = std::str::from_utf8(name).ok()?;
    match name.split_once('|') {
        None => Some((lookup(name.as_bytes())?, None)),
        Some((p, c)) => {
            let parent = lookup(p.as_bytes())?;
            let sub = parent
                .subs
                .iter()
                .find(|s| s.name.eq_ignore_ascii_case(c))?;
            Some((parent, Some(sub)))
        }
    }
}

/// Bare COMMAND: every command's COMMAND INFO (the dispatcher runs the
/// subcommands themselves).
pub fn command(ctx: &mut Ctx, args: &[Bytes]) {
    match super::super::resolve(ctx.out, args) {
        Some(sub) if args.len() > 1 => (sub.run)(ctx, args),
        Some(_) => write_all_info(ctx),
        None => {}
    }
}

fn count(ctx: &mut Ctx, _args: &[Bytes]) {
    ctx.out.int(table().len() as i64);
}

fn info(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len() == 2 {
        return write_all_info(ctx);
    }
    ctx.out.array(args.len() - 2);
    for name in &args[2..] {
        match find(name) {
            Some((parent, sub)) => write_info(ctx.out, sub.unwrap_or(parent), sub.map(|_| parent)),
            None => ctx.out.null(),
        }
    }
}

/// The reply of COMMAND and of COMMAND INFO without names: every command's
/// details.
fn write_all_info(ctx: &mut Ctx) {
    let all = all_commands();
    ctx.out.array(all.len());
    for s in all {
        write_info(ctx.out, s, None);
    }
}

fn full_name(s: &Spec, parent: Option<&Spec>) -> String {
    match parent {
        Some(p) => format!("{}|{}", p.name, s.name),
        None => s.name.to_string(),
    }
}

/// One COMMAND INFO entry: name, arity, flags, first, last, step, ACL
/// categories, tips, key specs, subcommands.
fn write_info(out: &mut Out, s: &'static Spec, parent: Option<&'static Spec>) {
    out.array(10);
    out.bulk(full_name(s, parent).as_bytes());
    out.int(s.arity as i64);
    let full = full_name(s, parent);
    let flags: Vec<u32> = FLAG_ORDER
        .iter()
        .copied()
        .filter(|f| s.flags & f != 0)
        .collect();
    // Redis derives movablekeys from the key specs: keys found by parsing.
    let movable = keyspecs::movable(&full);
    out.set(flags.len() + usize::from(movable));
    for f in flags {
        out.simple(flag_name(f));
    }
    if movable {
        out.simple("movablekeys");
    }
    out.int(s.first_key as i64);
    out.int(s.last_key as i64);
    out.int(s.step as i64);
    out.set(s.acl.len());
    for a in s.acl {
        out.simple(&format!("@{a}"));
    }
    // Tips and key specs as Redis 7.0 states them for its commands; the
    // table's own for latchkey's.
    match keyspecs::tips(&full) {
        Some(t) => super::docs::write(out, t),
        None => out.set(0),
    }
    match keyspecs::key_specs(&full) {
        Some(k) => super::docs::write(out, k),
        None => write_key_specs(out, s),
    }
    let subs = if parent.is_none() { s.subs } else { &[] };
    if subs.is_empty() {
        out.set(0);
    } else {
        out.array(subs.len());
        for sub in subs {
            write_info(out, sub, Some(s));
        }
    }
}

/// The key spec implied by the legacy (first, last, step) positions. Only
/// RO/RW is stated: finer access flags are not recorded in the table.
fn write_key_specs(out: &mut Out, s: &Spec) {
    if s.first_key <= 0 {
        out.set(0);
        return;
    }
    out.set(1);
    out.map(3);
    out.bulk(b"flags");
    let rw = if s.flags & WRITE != 0 { "RW" } else { "RO" };
    out.set(1);
    out.simple(rw);
    out.bulk(b"begin_search");
    out.map(2);
    out.bulk(b"type");
    out.bulk(b"index");
    out.bulk(b"spec");
    out.map(1);
    out.bulk(b"index");
    out.int(s.first_key as i64);
    out.bulk(b"find_keys");
    out.map(2);
    out.bulk(b"type");
    out.bulk(b"range");
    out.bulk(b"spec");
    out.map(3);
    out.bulk(b"lastkey");
    out.int(if s.last_key < 0 {
        s.last_key as i64
    } else {
        (s.last_key - s.first_key) as i64
    });
    out.bulk(b"keystep");
    out.int(s.step as i64);
    out.bulk(b"limit");
    out.int(0);
}

fn docs(ctx: &mut Ctx, args: &[Bytes]) {
    let mut found = Vec::new();
    if args.len() == 2 {
        found = all_commands().into_iter().map(|s| (s, None)).collect();
    } else {
        for name in &args[2..] {
            if let Some((parent, sub)) = find(name) {
                match sub {
                    Some(sub) => found.push((sub, Some(parent))),
                    None => found.push((parent, None)),
                }
            }
        }
    }
    ctx.out.map(found.len());
    for (s, parent) in found {
        ctx.out.bulk(full_name(s, parent).as_bytes());
        write_doc(ctx.out, s, parent);
    }
}

/// One COMMAND DOCS entry. A command Redis 7.0 documents gets Redis's doc
/// (summary, complexity, history, arguments, ...); others get summary,
/// since and group from the table. Containers list only the subcommands
/// latchkey has.
fn write_doc(out: &mut Out, s: &'static Spec, parent: Option<&'static Spec>) {
    let subs = if parent.is_none() { s.subs } else { &[] };
    let stored = docs::docs().get(&full_name(s, parent)).copied();
    match stored {
        Some(docs::V::Map(pairs)) => {
            let own: Vec<_> = pairs
                .iter()
                .filter(|(k, _)| !matches!(k, docs::V::Bulk(b) if *b == b"subcommands"))
                .collect();
            out.map(own.len() + (!subs.is_empty()) as usize);
            for (k, v) in own {
                docs::write(out, k);
                docs::write(out, v);
            }
        }
        _ => {
            out.map(3 + (!subs.is_empty()) as usize);
            out.bulk(b"summary");
            out.bulk(s.summary.as_bytes());
            out.bulk(b"since");
            out.bulk(s.since.as_bytes());
            out.bulk(b"group");
            out.bulk(s.group.as_bytes());
        }
    }
    if !subs.is_empty() {
        out.bulk(b"subcommands");
        out.map(subs.len());
        for sub in subs {
            out.bulk(full_name(sub, Some(s)).as_bytes());
            write_doc(out, sub, Some(s));
        }
    }
}

/// COMMAND LIST [FILTERBY MODULE name | ACLCAT cat | PATTERN glob]
fn list(ctx: &mut Ctx, args: &[Bytes]) {
    enum Filter<'a> {
        All,
        Module,
        AclCat(&'a [u8]),
        Pattern(&'a [u8]),
    }
    let filter = match args.len() {
        2 => Filter::All,
        5 if eq_ic(&args[2], "filterby") => {
            if eq_ic(&args[3], "module") {
                Filter::Module
            } else if eq_ic(&args[3], "aclcat") {
                Filter::AclCat(&args[4])
            } else if eq_ic(&args[3], "pattern") {
                Filter::Pattern(&args[4])
            } else {
                return ctx.error(SYNTAX);
            }
        }
        _ => return ctx.error(SYNTAX),
    };
    let mut names = Vec::new();
    for s in all_commands() {
        let mut entries = vec![(s.name.to_string(), s)];
        for sub in s.subs {
            entries.push((full_name(sub, Some(s)), sub));
        }
        for (name, spec) in entries {
            let keep = match filter {
                Filter::All => true,
                // Latchkey has no modules.
                Filter::Module => false,
                Filter::AclCat(c) => spec
                    .acl
                    .iter()
                    .any(|a| a.as_bytes().eq_ignore_ascii_case(c)),
                Filter::Pattern(p) => crate::glob::matches(p, name.as_bytes(), true),
            };
            if keep {
                names.push(name);
            }
        }
    }
    ctx.out.array(names.len());
    for n in names {
        ctx.out.bulk(n.as_bytes());
    }
}

/// COMMAND GETKEYS full-command...
fn getkeys(ctx: &mut Ctx, args: &[Bytes]) {
    keys_of(ctx, args, false);
}

/// COMMAND GETKEYSANDFLAGS full-command...: each key with its key-spec flags.
fn getkeysandflags(ctx: &mut Ctx, args: &[Bytes]) {
    keys_of(ctx, args, true);
}

/// Redis's getKeysSubcommandImpl.
fn keys_of(ctx: &mut Ctx, args: &[Bytes], with_flags: bool) {
    let cmd = &args[2..];
    let Some(base) = lookup(&cmd[0]) else {
        return ctx.error("ERR Invalid command specified");
    };
    let (spec, full) = match cmd.get(1) {
        Some(sub) if !base.subs.is_empty() => {
            let Some(s) = base
                .subs
                .iter()
                .find(|s| s.name.as_bytes().eq_ignore_ascii_case(sub))
            else {
                return ctx.error("ERR Invalid command specified");
            };
            (s, full_name(s, Some(base)))
        }
        _ => (base, base.name.to_string()),
    };
    let has_keys = spec.first_key > 0 || keyspecs::movable(&full);
    if !has_keys {
        return ctx.error("ERR The command has no key arguments");
    }
    let argc = cmd.len() as i32;
    if (spec.arity > 0 && spec.arity != argc) || argc < -spec.arity {
        return ctx.error("ERR Invalid number of arguments specified for command");
    }
    let found = keyspecs::find_keys(spec, &full, cmd);
    if found.is_empty() {
        if spec.flags & NO_MANDATORY_KEYS != 0 {
            return ctx.out.array(0);
        }
        return ctx.error("ERR Invalid arguments specified for command");
    }
    ctx.out.array(found.len());
    for k in found {
        if with_flags {
            ctx.out.array(2);
            ctx.out.bulk(&cmd[k.pos]);
            ctx.out.set(k.flags.len());
            for f in k.flags {
                ctx.out.simple(f);
            }
        } else {
            ctx.out.bulk(&cmd[k.pos]);
        }
    }
}

fn help(ctx: &mut Ctx, _args: &[Bytes]) {
    reply_help(
        ctx,
        "COMMAND",
        &[
            "(no subcommand)",
            "    Return details about all Redis commands.",
            "COUNT",
            "    Return the total number of commands in this Redis server.",
            "LIST",
            "    Return a list of all commands in this Redis server.",
            "INFO [<command-name> ...]",
            "    Return details about multiple Redis commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "DOCS [<command-name> ...]",
            "    Return documentation details about multiple Redis commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "GETKEYS <full-command>",
            "    Return the keys from a full Redis command.",
            "GETKEYSANDFLAGS <full-command>",
            "    Return the keys and the access flags from a full Redis command.",
        ],
    );
}
