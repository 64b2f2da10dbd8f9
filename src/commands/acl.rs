//! ACL: users and permissions (Redis's acl.c commands), and the
//! dispatcher's permission check with its NOPERM texts and ACL LOG entries.
//!
//! Reaches state only through `Ctx` (ACL users and log, the client table,
//! pub/sub); closes other connections only by `Store::kill_client`.
//! Must not judge rules itself: that is `crate::acl`'s.

use bytes::Bytes;

use super::*;
use crate::acl::{Denial, LogEntry, LogReason, Query, KEY_READ, KEY_WRITE};
use crate::util::eq_ic;

const ACL_FLAGS: u32 = ADMIN | NOSCRIPT | LOADING | STALE;
const ADMIN_SLOW: &[&str] = &["admin", "slow", "dangerous"];
const SLOW: &[&str] = &["slow"];

pub static COMMANDS: &[Spec] = &[Spec {
    subs: ACL_SUBS,
    ..spec(
        "acl",
        -2,
        0,
        (0, 0, 0),
        "server",
        "6.0.0",
        "A container for Access List Control commands",
        SLOW,
        acl,
    )
}];

static ACL_SUBS: &[Spec] = &[
    spec(
        "cat",
        -2,
        NOSCRIPT | LOADING | STALE,
        (0, 0, 0),
        "server",
        "6.0.0",
        "List the ACL categories or the commands inside a category",
        SLOW,
        cat,
    ),
    spec(
        "deluser",
        -3,
        ACL_FLAGS,
        (0, 0, 0),
        "server",
        "6.0.0",
        "Remove the specified ACL users and the associated rules",
        ADMIN_SLOW,
        deluser,
    ),
    spec(
        "dryrun",
        -4,
        ACL_FLAGS,
        (0, 0, 0),
        "server",
        "7.0.0",
        "Returns whether the user can execute the given command without executing the command.",
        ADMIN_SLOW,
        dryrun,
    ),
    spec(
        "genpass",
        -2,
        NOSCRIPT | LOADING | STALE,
        (0, 0, 0),
        "server",
        "6.0.0",
        "Generate a pseudorandom secure password to use for ACL users",
        SLOW,
        genpass,
    ),
    spec(
        "getuser",
        3,
        ACL_FLAGS,
        (0, 0, 0),
        "server",
        "6.0.0",
        "Get the rules for a specific ACL user",
        ADMIN_SLOW,
        getuser,
    ),
    spec(
        "help",
        2,
        LOADING | STALE,
        (0, 0, 0),
        "server",
        "6.0.0",
        "Show helpful text about the different subcommands",
        SLOW,
        help,
    ),
    spec(
        "list",
        2,
        ACL_FLAGS,
        (0, 0, 0),
        "server",
        "6.0.0",
        "List the current ACL rules in ACL config file format",
        ADMIN_SLOW,
        list,
    ),
    spec(
        "load",
        2,
        ACL_FLAGS,
        (0, 0, 0),
        "server",
        "6.0.0",
        "Reload the ACLs from the configured ACL file",
        ADMIN_SLOW,
        load,
    ),
    spec(
        "log",
        -2,
        ACL_FLAGS,
        (0, 0, 0),
        "server",
        "6.0.0",
        "List latest events denied because of ACLs in place",
        ADMIN_SLOW,
        log,
    ),
    spec(
        "save",
        2,
        ACL_FLAGS,
        (0, 0, 0),
        "server",
        "6.0.0",
        "Save the current ACL rules in the configured ACL file",
        ADMIN_SLOW,
        save,
    ),
    spec(
        "setuser",
        -3,
        ACL_FLAGS,
        (0, 0, 0),
        "server",
        "6.0.0",
        "Modify or create the rules for a specific ACL user",
        ADMIN_SLOW,
        setuser,
    ),
    spec(
        "users",
        2,
        ACL_FLAGS,
        (0, 0, 0),
        "server",
        "6.0.0",
        "List the username of all the configured ACL rules",
        ADMIN_SLOW,
        users,
    ),
    spec(
        "whoami",
        2,
        NOSCRIPT | LOADING | STALE,
        (0, 0, 0),
        "server",
        "6.0.0",
        "Return the name of the user associated to the current connection",
        SLOW,
        whoami,
    ),
];

fn acl(ctx: &mut Ctx, args: &[Bytes]) {
    if let Some(sub) = resolve(ctx.out, args) {
        (sub.run)(ctx, args);
    }
}

/// `acl-pubsub-default allchannels`: new users may use every channel.
fn pubsub_all(ctx: &Ctx) -> bool {
    ctx.store.config().acl_pubsub_default_all
}

fn lossy(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}

fn setuser(ctx: &mut Ctx, args: &[Bytes]) {
    let name = &args[2];
    if crate::acl::has_spaces(name) {
        return ctx.error("ERR Usernames can't contain spaces or null characters");
    }
    let raw: Vec<&[u8]> = args[3..].iter().map(|a| &a[..]).collect();
    let rules = match crate::acl::merge_selector_args(&raw) {
        Ok(r) => r,
        Err(j) => {
            return ctx.error(&format!(
                "ERR Unmatched parenthesis in acl selector starting at '{}'.",
                lossy(raw[j])
            ))
        }
    };
    let all = pubsub_all(ctx);
    let before = ctx.store.acl.users.get(name).cloned();
    if let Err((rule, e)) = ctx.store.acl.users.set_user(name, &rules, all) {
        return ctx.error(&format!(
            "ERR Error in ACL SETUSER modifier '{}': {}",
            lossy(&rule),
            e.message()
        ));
    }
    ctx.store.acl.changed();
    if let Some(before) = before {
        kill_revoked_subscribers(ctx, name, &before);
    }
    // A disabled user's connections close (and so release their locks);
    // Redis keeps them, but a lock server should not let a revoked
    // holder keep its locks.
    if ctx.store.acl.users.get(name).is_some_and(|u| !u.enabled()) {
        disconnect_user(ctx, name);
    }
    ctx.out.ok();
}

/// Redis's ACLKillPubsubClientsIfNeeded: when a user's channel patterns
/// no longer cover what they did, its subscribers whose subscriptions are
/// no longer allowed are closed.
fn kill_revoked_subscribers(ctx: &mut Ctx, name: &[u8], before: &crate::acl::User) {
    use crate::pubsub::Kind;
    let Some(after) = ctx.store.acl.users.get(name) else {
        return;
    };
    let Some(now) = after.channel_patterns() else {
        return;
    };
    let covered = before
        .channel_patterns()
        .is_some_and(|old| old.iter().all(|p| now.contains(p)));
    if covered {
        return;
    }
    let who = lossy(name).into_owned();
    let me = ctx.conn.id;
    let mut victims = Vec::new();
    for c in ctx.store.clients.values() {
        if c.user != who || !ctx.store.pubsub.is_subscribed(c.id) {
            continue;
        }
        let ps = &ctx.store.pubsub;
        let revoked = ps
            .names_of(c.id, Kind::Pattern)
            .iter()
            .any(|p| !after.may_use_channel(p, true))
            || [Kind::Channel, Kind::Shard].iter().any(|k| {
                ps.names_of(c.id, *k)
                    .iter()
                    .any(|ch| !after.may_use_channel(ch, false))
            });
        if revoked {
            victims.push(c.id);
        }
    }
    for id in victims {
        if id == me {
            ctx.conn.close_after_reply = true;
        } else {
            ctx.store.kill_client(id);
        }
    }
}

/// Closes every connection authenticated as `name` (the caller's own
/// after its reply), as Redis's ACLFreeUserAndKillClients.
fn disconnect_user(ctx: &mut Ctx, name: &[u8]) {
    let me = ctx.conn.id;
    let who = lossy(name).into_owned();
    let victims: Vec<ClientId> = ctx
        .store
        .clients
        .values()
        .filter(|c| c.user == who)
        .map(|c| c.id)
        .collect();
    for id in victims {
        if id == me {
            ctx.conn.close_after_reply = true;
        } else {
            ctx.store.kill_client(id);
        }
    }
}

fn deluser(ctx: &mut Ctx, args: &[Bytes]) {
    if args[2..].iter().any(|u| &u[..] == b"default") {
        return ctx.error("ERR The 'default' user cannot be removed");
    }
    let mut n = 0;
    for u in &args[2..] {
        if ctx.store.acl.users.remove(u) {
            n += 1;
            disconnect_user(ctx, u);
        }
    }
    if n > 0 {
        ctx.store.acl.changed();
    }
    ctx.out.int(n);
}

fn getuser(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(u) = ctx.store.acl.users.get(&args[2]) else {
        return ctx.out.null();
    };
    let cat = ctx.store.acl.users.catalog();
    let out = &mut *ctx.out;
    out.map(6);
    out.bulk(b"flags");
    let flags = u.flags();
    out.set(flags.len());
    for f in flags {
        out.bulk(f.as_bytes());
    }
    out.bulk(b"passwords");
    out.array(u.passwords().len());
    for p in u.passwords() {
        out.bulk(p.as_bytes());
    }
    // The root selector's fields at the top level (as Redis 6 had them),
    // then each further selector as a map of the same fields.
    selector_fields(out, &u.root().view(cat));
    out.bulk(b"selectors");
    out.array(u.selectors().len());
    for s in u.selectors() {
        out.map(3);
        selector_fields(out, &s.view(cat));
    }
}

fn selector_fields(out: &mut crate::resp::Out, v: &crate::acl::SelectorView) {
    for (k, val) in [
        ("commands", &v.commands),
        ("keys", &v.keys),
        ("channels", &v.channels),
    ] {
        out.bulk(k.as_bytes());
        out.bulk(val);
    }
}

fn list(ctx: &mut Ctx, _args: &[Bytes]) {
    let users = &ctx.store.acl.users;
    let out = &mut *ctx.out;
    out.array(users.len());
    for u in users.iter() {
        let mut line = b"user ".to_vec();
        line.extend_from_slice(u.name());
        line.push(b' ');
        line.extend_from_slice(&u.describe(users.catalog()));
        out.bulk(&line);
    }
}

fn users(ctx: &mut Ctx, _args: &[Bytes]) {
    let users = &ctx.store.acl.users;
    let out = &mut *ctx.out;
    out.array(users.len());
    for u in users.iter() {
        out.bulk(u.name());
    }
}

fn whoami(ctx: &mut Ctx, _args: &[Bytes]) {
    let name = ctx.conn.user.clone();
    ctx.out.bulk(&name);
}

const NO_ACLFILE: &str = "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.";

/// `aclfile`, made absolute against `dir` as a relative path would be
/// opened after the server changed directory.
fn aclfile(ctx: &Ctx) -> Option<String> {
    let f = &ctx.store.config().aclfile;
    (!f.is_empty()).then(|| f.clone())
}

fn load(ctx: &mut Ctx, _args: &[Bytes]) {
    let Some(path) = aclfile(ctx) else {
        return ctx.error(NO_ACLFILE);
    };
    let all = pubsub_all(ctx);
    match crate::acl::load_file(&mut ctx.store.acl, &path, all) {
        Ok(gone) => {
            for name in gone {
                disconnect_user(ctx, &name);
            }
            ctx.out.ok();
        }
        Err(e) => ctx.error(&format!("ERR {e}")),
    }
}

fn save(ctx: &mut Ctx, _args: &[Bytes]) {
    let Some(path) = aclfile(ctx) else {
        return ctx.error(NO_ACLFILE);
    };
    match crate::acl::save_file(&ctx.store.acl.users, &path) {
        Ok(()) => ctx.out.ok(),
        Err(e) => {
            tracing::warn!("Writing ACL file for ACL SAVE: {e}");
            ctx.error("ERR There was an error trying to save the ACLs. Please check the server logs for more information")
        }
    }
}

fn cat(ctx: &mut Ctx, args: &[Bytes]) {
    match args.len() {
        2 => {
            ctx.out.array(crate::acl::CATEGORIES.len());
            for c in crate::acl::CATEGORIES {
                ctx.out.bulk(c.as_bytes());
            }
        }
        3 => {
            let flag = crate::acl::category_bit(&args[2]);
            if flag == 0 {
                let c = lossy(&args[2]);
                let c: String = c.chars().take(128).collect();
                return ctx.error(&format!("ERR Unknown category '{c}'"));
            }
            let cat = ctx.store.acl.users.catalog();
            let names: Vec<&str> = (0..cat.len())
                .map(|i| cat.entry(i))
                .filter(|e| e.cats & flag != 0)
                .map(|e| e.name.as_str())
                .collect();
            ctx.out.array(names.len());
            for n in names {
                ctx.out.bulk(n.as_bytes());
            }
        }
        _ => subcommand_syntax_error(ctx.out, args),
    }
}

fn genpass(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len() > 3 {
        return subcommand_syntax_error(ctx.out, args);
    }
    let bits = match args.get(2) {
        None => 256,
        Some(a) => match crate::util::parse_i64(a) {
            Some(b) => b,
            None => return ctx.error(NOT_INT),
        },
    };
    if !(1..=4096).contains(&bits) {
        return ctx.error("ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096");
    }
    let chars = (bits as usize).div_ceil(4);
    const HEX: &[u8] = b"0123456789abcdef";
    let pass: Vec<u8> = (0..chars)
        .map(|_| HEX[rand::random::<u8>() as usize % 16])
        .collect();
    ctx.out.bulk(&pass);
}

fn log(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len() > 3 {
        return subcommand_syntax_error(ctx.out, args);
    }
    let mut count = 10i64;
    if let Some(a) = args.get(2) {
        if eq_ic(a, "reset") {
            ctx.store.acl.log.reset();
            return ctx.out.ok();
        }
        match crate::util::parse_i64(a) {
            Some(n) => count = n.max(0),
            None => return ctx.error(NOT_INT),
        }
    }
    let now = crate::util::now_ms();
    let n = (count as usize).min(ctx.store.acl.log.len());
    let out = &mut *ctx.out;
    out.array(n);
    for e in ctx.store.acl.log.iter().take(n) {
        out.map(7);
        out.bulk(b"count");
        out.int(e.count as i64);
        out.bulk(b"reason");
        out.bulk(e.reason.name().as_bytes());
        out.bulk(b"context");
        out.bulk(e.context.as_bytes());
        out.bulk(b"object");
        out.bulk(&e.object);
        out.bulk(b"username");
        out.bulk(&e.username);
        out.bulk(b"age-seconds");
        out.double((now - e.ctime) as f64 / 1000.0);
        out.bulk(b"client-info");
        out.bulk(&e.client_info);
    }
}

fn dryrun(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(user) = ctx.store.acl.users.get(&args[2]) else {
        return ctx.error(&format!("ERR User '{}' not found", lossy(&args[2])));
    };
    let cmd_args = &args[3..];
    let Some(spec) = lookup_with_sub(cmd_args) else {
        return ctx.error(&format!("ERR Command '{}' not found", lossy(&args[3])));
    };
    let full = full_name(spec);
    let argc = cmd_args.len() as i32;
    if (spec.arity > 0 && spec.arity != argc) || argc < -spec.arity {
        return ctx.error(&format!(
            "ERR wrong number of arguments for '{full}' command"
        ));
    }
    match check_user(user, spec, cmd_args) {
        Ok(()) => ctx.out.ok(),
        Err((d, pos)) => {
            let msg = match d {
                Denial::Command => {
                    format!("This user has no permissions to run the '{full}' command")
                }
                Denial::Key => format!(
                    "This user has no permissions to access the '{}' key",
                    lossy(&cmd_args[pos])
                ),
                Denial::Channel => format!(
                    "This user has no permissions to access the '{}' channel",
                    lossy(&cmd_args[pos])
                ),
            };
            ctx.out.bulk(msg.as_bytes());
        }
    }
}

/// Redis's lookupCommand: the command, or its subcommand when it has
/// subcommands and a second argument names one.
fn lookup_with_sub(args: &[Bytes]) -> Option<&'static Spec> {
    let top = lookup(&args[0])?;
    if top.subs.is_empty() || args.len() < 2 {
        return Some(top);
    }
    lookup_sub(top, &args[1])
}

/// "get", or "config|get" for a subcommand.
fn full_name(spec: &'static Spec) -> &'static str {
    &catalog().entry(spec_index(spec)).name
}

/// The keys a command touches, with the permissions each needs (read for
/// an access, write for an insert, delete or update).
fn key_perms(spec: &'static Spec, full: &str, args: &[Bytes]) -> Vec<(usize, u8)> {
    server::find_keys(spec, full, args)
        .into_iter()
        .map(|f| {
            let mut need = 0;
            for fl in &f.flags {
                match *fl {
                    "access" => need |= KEY_READ,
                    "insert" | "delete" | "update" => need |= KEY_WRITE,
                    _ => {}
                }
            }
            (f.pos, need)
        })
        .collect()
}

/// The channels a command publishes or subscribes to (position, whether
/// it is a pattern), as Redis's getChannelsFromCommand; unsubscribing
/// needs no permission.
fn channels_of(full: &str, args: &[Bytes]) -> Vec<(usize, bool)> {
    match full {
        "publish" | "spublish" => vec![(1, false)],
        "subscribe" | "ssubscribe" => (1..args.len()).map(|i| (i, false)).collect(),
        "psubscribe" => (1..args.len()).map(|i| (i, true)).collect(),
        _ => Vec::new(),
    }
}

fn check_user(
    user: &crate::acl::User,
    spec: &'static Spec,
    args: &[Bytes],
) -> Result<(), (Denial, usize)> {
    if user.unrestricted() {
        return Ok(());
    }
    let full = full_name(spec);
    let find = || key_perms(spec, full, args);
    let channels = channels_of(full, args);
    let mut q = Query {
        cmd: spec_index(spec),
        sub: catalog().entry(spec_index(spec)).parent.is_some(),
        no_auth: spec.flags & NO_AUTH != 0,
        args,
        find_keys: &find,
        found: None,
        channels: &channels,
    };
    user.check(&mut q)
}

/// A client's NOPERM error for denial `d` of `spec`.
pub fn denied_message(spec: &'static Spec, d: Denial) -> String {
    let full = full_name(spec);
    match d {
        Denial::Command => {
            format!("NOPERM this user has no permissions to run the '{full}' command")
        }
        Denial::Key => {
            "NOPERM this user has no permissions to access one of the keys used as arguments".into()
        }
        Denial::Channel => {
            "NOPERM this user has no permissions to access one of the channels used as arguments"
                .into()
        }
    }
}

/// The ACL check (admission's ACL stage): None when allowed, else the
/// denial, logged in the ACL LOG under `context`.
pub fn denial(
    ctx: &mut Ctx,
    spec: &'static Spec,
    args: &[Bytes],
    context: &'static str,
) -> Option<Denial> {
    let generation = ctx.store.acl.generation();
    if ctx.conn.acl_unrestricted == generation {
        return None;
    }
    let result = match ctx.store.acl.users.get(&ctx.conn.user) {
        Some(u) if u.unrestricted() => {
            ctx.conn.acl_unrestricted = generation;
            return None;
        }
        Some(u) => check_user(u, spec, args),
        // The user was deleted: its connection is closing.
        None => Err((Denial::Command, 0)),
    };
    let (d, pos) = result.err()?;
    let full = full_name(spec);
    let (reason, object) = match d {
        Denial::Command => (LogReason::Command, full.as_bytes().to_vec()),
        Denial::Key => (LogReason::Key, args[pos].to_vec()),
        Denial::Channel => (LogReason::Channel, args[pos].to_vec()),
    };
    let username = ctx.conn.user.to_vec();
    add_log(ctx, reason, context, object, username, args, full);
    Some(d)
}

/// Adds an ACL LOG entry for this connection, running `full`.
pub fn add_log(
    ctx: &mut Ctx,
    reason: LogReason,
    context: &'static str,
    object: Vec<u8>,
    username: Vec<u8>,
    args: &[Bytes],
    full: &str,
) {
    let client_info = connection::client_info_line(ctx, args, full).into_bytes();
    let max = ctx.store.config().acllog_max_len;
    ctx.store.acl.log.add(
        LogEntry {
            count: 1,
            reason,
            context,
            object,
            username,
            ctime: crate::util::now_ms(),
            client_info,
        },
        max,
    );
}

/// The context an ACL denial is logged in.
pub fn context(ctx: &Ctx) -> &'static str {
    if ctx.conn.in_script {
        "lua"
    } else if ctx.conn.multi.is_some() {
        "multi"
    } else {
        "toplevel"
    }
}

fn help(ctx: &mut Ctx, _args: &[Bytes]) {
    server::reply_help(
        ctx,
        "ACL",
        &[
            "CAT [<category>]",
            "    List all commands that belong to <category>, or all command categories",
            "    when no category is specified.",
            "DELUSER <username> [<username> ...]",
            "    Delete a list of users.",
            "DRYRUN <username> <command> [<arg> ...]",
            "    Returns whether the user can execute the given command without executing the command.",
            "GETUSER <username>",
            "    Get the user's details.",
            "GENPASS [<bits>]",
            "    Generate a secure 256-bit user password. The optional `bits` argument can",
            "    be used to specify a different size.",
            "LIST",
            "    Show users details in config file format.",
            "LOAD",
            "    Reload users from the ACL file.",
            "LOG [<count> | RESET]",
            "    Show the ACL log entries.",
            "SAVE",
            "    Save the current config to the ACL file.",
            "SETUSER <username> <attribute> [<attribute> ...]",
            "    Create or modify a user with the specified attributes.",
            "USERS",
            "    List all the registered usernames.",
            "WHOAMI",
            "    Return the current connection username.",
        ],
    );
}
