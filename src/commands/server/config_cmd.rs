//! CONFIG GET / SET / REWRITE / RESETSTAT / HELP over the directive table,
//! `crate::config::DIRECTIVES` (only what latchkey honours).
//!
//! Reaches the config and stats only through `Ctx` (`Store::set_config`).
//! Must not apply a change's side effects itself: `fdlimit::adjust`,
//! `tls::acceptor` and `persist::aof_reconfigure` do.

use bytes::Bytes;

use super::*;
use crate::config::{directive, Directive, Mutability, DIRECTIVES};

const CONFIG_ACL: &[&str] = &["admin", "slow", "dangerous"];

/// Redis's CONFIG_REPL_BACKLOG_MIN_SIZE.
const REPL_BACKLOG_MIN_SIZE: usize = 16 * 1024;

pub static SUBS: &[Spec] = &[
    spec(
        "get",
        -3,
        ADMIN_FLAGS,
        (0, 0, 0),
        "server",
        "2.0.0",
        "Get the values of configuration parameters",
        CONFIG_ACL,
        get,
    ),
    spec(
        "set",
        -4,
        ADMIN_FLAGS,
        (0, 0, 0),
        "server",
        "2.0.0",
        "Set configuration parameters to the given values",
        CONFIG_ACL,
        set,
    ),
    spec(
        "resetstat",
        2,
        ADMIN_FLAGS,
        (0, 0, 0),
        "server",
        "2.0.0",
        "Reset the stats returned by INFO",
        CONFIG_ACL,
        resetstat,
    ),
    spec(
        "rewrite",
        2,
        ADMIN_FLAGS,
        (0, 0, 0),
        "server",
        "2.8.0",
        "Rewrite the configuration file with the in memory configuration",
        CONFIG_ACL,
        rewrite,
    ),
    spec(
        "help",
        2,
        LOADING | STALE,
        (0, 0, 0),
        "server",
        "5.0.0",
        "Show helpful text about the different subcommands",
        SLOW,
        help,
    ),
];

fn has_glob(p: &[u8]) -> bool {
    p.iter().any(|c| matches!(c, b'*' | b'?' | b'['))
}

/// CONFIG GET pattern [pattern ...]: a plain name is looked up exactly and
/// echoed as given; a glob matches every name and alias, case-insensitively.
fn get(ctx: &mut Ctx, args: &[Bytes]) {
    // The name shown, the table's name it matched, its directive.
    let mut found: Vec<(String, &'static str, &'static Directive)> = Vec::new();
    for pat in &args[2..] {
        if !has_glob(pat) {
            let given = String::from_utf8_lossy(pat).into_owned();
            if found.iter().any(|(n, _, _)| *n == given) {
                continue;
            }
            if let Some((d, name)) = directive(&given) {
                found.push((given, name, d));
            }
            continue;
        }
        // Hidden configs (Redis's testing knobs) need their exact name.
        for d in DIRECTIVES.iter().filter(|d| !d.hidden) {
            for name in d.names() {
                if found.iter().any(|(_, n, _)| *n == name) {
                    continue;
                }
                if crate::glob::matches(pat, name.as_bytes(), true) {
                    found.push((name.to_string(), name, d));
                }
            }
        }
    }
    ctx.out.map(found.len());
    for (shown, _, d) in found {
        let v = d.get(ctx.store.config());
        ctx.out.bulk(shown.as_bytes());
        ctx.out.bulk(v.as_bytes());
    }
}

/// CONFIG SET name value [name value ...]: all or nothing, with Redis's
/// error precedence (unknown name, then immutable/duplicate, then value).
fn set(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len() % 2 == 1 {
        return ctx.error(SYNTAX);
    }
    let mut unknown: Option<String> = None;
    let mut failed: Option<(String, &str)> = None;
    // The directive, the table's name for it that was given, the value.
    let mut pairs: Vec<(&'static Directive, &'static str, String)> = Vec::new();
    for pair in args[2..].chunks(2) {
        let name = String::from_utf8_lossy(&pair[0]).into_owned();
        let Some((d, spelled)) = directive(&name) else {
            if unknown.is_none() {
                unknown = Some(name);
            }
            continue;
        };
        if unknown.is_some() || failed.is_some() {
            continue;
        }
        if d.mutability == Mutability::Startup {
            failed = Some((name, "can't set immutable config"));
            continue;
        }
        if d.mutability == Mutability::Protected
            && !protected_allowed(ctx, &ctx.store.config().enable_protected_configs)
        {
            failed = Some((name, "can't set protected config"));
            continue;
        }
        // An alias and its main name are not duplicates (as in Redis 7.0).
        if pairs.iter().any(|(_, p, _)| *p == spelled) {
            failed = Some((name, "duplicate parameter"));
            continue;
        }
        pairs.push((d, spelled, String::from_utf8_lossy(&pair[1]).into_owned()));
    }
    if let Some(name) = unknown {
        return ctx.error(&format!(
            "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
        ));
    }
    if let Some((name, why)) = failed {
        return ctx.error(&format!(
            "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
        ));
    }
    let pairs_tls: Vec<&'static str> = pairs
        .iter()
        .map(|(d, _, _)| d.name)
        .filter(|n| n.starts_with("tls-"))
        .collect();
    let mut next = ctx.store.config().clone();
    for (d, spelled, value) in pairs {
        if let Err(why) = d.set(&mut next, &d.args(&value)) {
            return ctx.error(&format!(
                "ERR CONFIG SET failed (possibly related to argument '{spelled}') - {why}"
            ));
        }
    }
    // More clients need more descriptors (Redis's updateMaxclients).
    if next.maxclients > ctx.store.config().maxclients {
        match crate::fdlimit::adjust(next.maxclients) {
            Ok((m, notes)) => {
                for n in notes {
                    tracing::warn!("{n}");
                }
                if m != next.maxclients {
                    tracing::warn!("Failed applying new configuration. Possibly related to new maxclients setting. Restoring previous settings.");
                    return ctx.error(&format!(
                        "ERR CONFIG SET failed (possibly related to argument 'maxclients') - The operating system is not able to handle the specified number of clients, try with {m}"
                    ));
                }
            }
            Err(e) => {
                return ctx.error(&format!(
                    "ERR CONFIG SET failed (possibly related to argument 'maxclients') - {e}"
                ))
            }
        }
    }
    // A changed backlog size is at least 16 KB (Redis's
    // resizeReplicationBacklog, which only CONFIG SET runs).
    if next.repl.backlog_size != ctx.store.config().repl.backlog_size {
        next.repl.backlog_size = next.repl.backlog_size.max(REPL_BACKLOG_MIN_SIZE);
    }
    // TLS settings take effect for the next connections, if they load
    // (Redis's applyTlsCfg, also with TLS only for replication or the
    // cluster bus); the ones open keep theirs.
    let tls_name = pairs_tls.first();
    let tls_used = next.tls_port != 0 || next.repl.tls_replication || next.cluster.tls_cluster;
    if let (Some(name), true) = (tls_name, tls_used) {
        // Without a TLS listener the settings are still checked (they
        // would serve the replication or cluster links).
        let checked = if next.tls_port == 0 {
            let mut probe = next.clone();
            probe.tls_port = 1;
            crate::tls::acceptor(&probe).map(|_| None)
        } else {
            crate::tls::acceptor(&next)
        };
        match checked {
            Ok(a) => *ctx.store.tls.write() = a,
            Err(e) => {
                tracing::warn!("Failed to update TLS configuration: {e}");
                return ctx.error(&format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - Unable to update TLS configuration. Check server logs."
                ));
            }
        }
    }
    let aof_was = ctx.store.config().appendonly;
    if next.tuning.jemalloc_bg_thread != ctx.store.config().tuning.jemalloc_bg_thread {
        crate::stats::jemalloc_bg_thread(next.tuning.jemalloc_bg_thread);
    }
    ctx.store.set_config(next);
    if let Err(e) = crate::persist::aof_reconfigure(ctx.store, aof_was) {
        tracing::warn!("Unable to turn on AOF: {e}");
        let mut back = ctx.store.config().clone();
        back.appendonly = aof_was;
        ctx.store.set_config(back);
        return ctx.error(
            "ERR CONFIG SET failed (possibly related to argument 'appendonly') - Unable to turn on AOF. Check server logs.",
        );
    }
    ctx.out.ok();
}

fn resetstat(ctx: &mut Ctx, _args: &[Bytes]) {
    ctx.store.stats = Default::default();
    ctx.store.ks.reset_stats();
    ctx.out.ok();
}

/// CONFIG REWRITE: the config file gets the running configuration.
fn rewrite(ctx: &mut Ctx, _args: &[Bytes]) {
    match ctx.store.config().rewrite() {
        Ok(()) => {
            tracing::info!("CONFIG REWRITE executed with success.");
            ctx.out.ok()
        }
        Err(e) => {
            tracing::warn!("CONFIG REWRITE failed: {e}");
            ctx.error(&format!("ERR {e}"))
        }
    }
}

fn help(ctx: &mut Ctx, _args: &[Bytes]) {
    reply_help(
        ctx,
        "CONFIG",
        &[
            "GET <pattern>",
            "    Return parameters matching the glob-like <pattern> and their values.",
            "SET <directive> <value>",
            "    Set the configuration <directive> to <value>.",
            "RESETSTAT",
            "    Reset statistics reported by the INFO command.",
            "REWRITE",
            "    Rewrite the configuration file.",
        ],
    );
}
