//! The command table: every command's `Spec` (name, arity, flags, key
//! positions, docs, ACL categories, handler, subcommands), the flags, and
//! the lookups by name. Each family module exports its `COMMANDS`; this
//! file joins them. Knows nothing of connections or of how a command runs.

use std::collections::HashMap;
use std::sync::OnceLock;

use bytes::Bytes;

use super::context::Ctx;
use super::{
    acl, bitmap, cluster, connection, functions, geo, hash, hash_ttl, hyperloglog, keys, list,
    locks, multi, pubsub, replication, scripting, server, set, sort, stream, strings, wait, zset,
};

pub type Handler = fn(&mut Ctx, &[Bytes]);

// Command flags, named as in COMMAND INFO.
pub const WRITE: u32 = 1;

pub const READONLY: u32 = 1 << 1;

pub const DENYOOM: u32 = 1 << 2;

pub const ADMIN: u32 = 1 << 3;

pub const PUBSUB: u32 = 1 << 4;

pub const NOSCRIPT: u32 = 1 << 5;

pub const BLOCKING: u32 = 1 << 6;

pub const LOADING: u32 = 1 << 7;

pub const STALE: u32 = 1 << 8;

pub const SKIP_MONITOR: u32 = 1 << 9;

pub const SKIP_SLOWLOG: u32 = 1 << 10;

pub const FAST: u32 = 1 << 11;

pub const NO_AUTH: u32 = 1 << 12;

pub const MAY_REPLICATE: u32 = 1 << 13;

pub const NO_MULTI: u32 = 1 << 14;

pub const ALLOW_BUSY: u32 = 1 << 15;

pub const NO_MANDATORY_KEYS: u32 = 1 << 16;

/// Refused unless `enable-debug-command` allows it (Redis's CMD_PROTECTED;
/// not shown by COMMAND INFO, as in Redis 7.0).
pub const PROTECTED: u32 = 1 << 17;

pub const NO_ASYNC_LOADING: u32 = 1 << 18;

pub const FLAG_NAMES: &[(u32, &str)] = &[
    (WRITE, "write"),
    (READONLY, "readonly"),
    (DENYOOM, "denyoom"),
    (ADMIN, "admin"),
    (PUBSUB, "pubsub"),
    (NOSCRIPT, "noscript"),
    (BLOCKING, "blocking"),
    (LOADING, "loading"),
    (STALE, "stale"),
    (SKIP_MONITOR, "skip_monitor"),
    (SKIP_SLOWLOG, "skip_slowlog"),
    (FAST, "fast"),
    (NO_AUTH, "no_auth"),
    (MAY_REPLICATE, "may_replicate"),
    (NO_MULTI, "no_multi"),
    (NO_MANDATORY_KEYS, "no_mandatory_keys"),
    (NO_ASYNC_LOADING, "no_async_loading"),
    (ALLOW_BUSY, "allow_busy"),
];

/// Latchkey's own rules for where a command may run, beside Redis's flags
/// (which must equal Redis 7.0's COMMAND INFO, so cannot carry them). The
/// dispatcher reads these; no list of names anywhere else decides them.
///
/// Inside MULTI it runs at once instead of being queued (EXEC, DISCARD,
/// MULTI, WATCH, QUIT, RESET).
pub const RUNS_IN_MULTI: u32 = 1;
/// Inside MULTI, a failed eviction does not refuse it with OOM, as it does
/// every other command (queueing grows memory): EXEC (unless it queued a
/// `denyoom` command), DISCARD, QUIT, RESET. As Redis's processCommand.
pub const MULTI_OOM_OK: u32 = 1 << 1;
/// Runs on a RESP2 connection in subscribed mode: the (P|S)(UN)SUBSCRIBE
/// family, PING, QUIT, RESET.
pub const SUBSCRIBED_OK: u32 = 1 << 2;
/// Refused after a failed save or AOF write although it does not write
/// (PING), as Redis's writeCommandsDeniedByDiskError.
pub const MISCONF_DENIED: u32 = 1 << 3;
/// Runs a script (EVAL, EVALSHA, FCALL and their `_RO` forms): client
/// tracking does not remember its keys for the command itself (even
/// flagged `readonly`), but for each read command its script runs, the
/// keys it declared (Redis's call and trackingRememberKeys).
pub const RUNS_SCRIPT: u32 = 1 << 4;

/// Where the pushes a command causes for its own RESP3 connection (its
/// keyspace notifications, messages it publishes to itself) go relative to
/// its reply, as Redis 7.0 writes them. `lead_bytes` reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushes {
    /// The pushes of lookups (misses, lazy expiry) and of the key's creation
    /// go before the reply, the rest after (most commands).
    Events,
    /// Every push goes before the reply: the command notifies, then replies.
    First,
    /// As `Events`, and the push of the destination list too (LMOVE, RPOPLPUSH
    /// and their blocking forms).
    Move,
    /// SPOP: it replies between its `spop` and the emptied set's `del`.
    Spop,
    /// GETSET: replies with the old value before the key is created.
    NewAfter,
    /// SET: `NewAfter` with GET, `First` without.
    Set,
}

/// One command (or subcommand) of the table.
#[derive(Debug)]
pub struct Spec {
    /// Lower-case name; subcommands use their own name ("setname").
    pub name: &'static str,
    /// Exact argument count including the name; negative = at least -arity.
    pub arity: i32,
    pub flags: u32,
    pub first_key: i32,
    pub last_key: i32,
    pub step: i32,
    /// Command group for COMMAND DOCS ("string", "generic", "connection", "server").
    pub group: &'static str,
    pub summary: &'static str,
    pub since: &'static str,
    /// ACL categories without '@' ("string", "read", "slow", ...).
    pub acl: &'static [&'static str],
    pub run: Handler,
    pub subs: &'static [Spec],
    /// Latchkey's rules (`RUNS_IN_MULTI`, `MULTI_OOM_OK`, `SUBSCRIBED_OK`,
    /// `MISCONF_DENIED`); 0 for most commands.
    pub rules: u32,
    /// Where its own pushes go relative to its reply.
    pub pushes: Pushes,
}

impl Spec {
    /// The same command with Latchkey's `rules`.
    pub const fn rules(mut self, rules: u32) -> Spec {
        self.rules = rules;
        self
    }

    /// The same command with its pushes placed as `pushes` says.
    pub const fn pushes(mut self, pushes: Pushes) -> Spec {
        self.pushes = pushes;
        self
    }
}

/// Builds a `Spec` without subcommands.
#[allow(clippy::too_many_arguments)]
pub const fn spec(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: (i32, i32, i32),
    group: &'static str,
    since: &'static str,
    summary: &'static str,
    acl: &'static [&'static str],
    run: Handler,
) -> Spec {
    Spec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
        group,
        summary,
        since,
        acl,
        run,
        subs: &[],
        rules: 0,
        pushes: Pushes::Events,
    }
}

/// Every family's table, one line each (no count to keep in step).
static FAMILIES: &[&[Spec]] = &[
    strings::COMMANDS,
    bitmap::COMMANDS,
    list::COMMANDS,
    hash::COMMANDS,
    hash_ttl::COMMANDS,
    hyperloglog::COMMANDS,
    set::COMMANDS,
    zset::COMMANDS,
    geo::COMMANDS,
    stream::COMMANDS,
    sort::COMMANDS,
    keys::COMMANDS,
    connection::COMMANDS,
    server::COMMANDS,
    locks::COMMANDS,
    pubsub::COMMANDS,
    multi::COMMANDS,
    scripting::COMMANDS,
    functions::COMMANDS,
    acl::COMMANDS,
    wait::COMMANDS,
    replication::COMMANDS,
    cluster::COMMANDS,
];

pub fn families() -> &'static [&'static [Spec]] {
    FAMILIES
}

/// Command names are hashed on every command: a fast fixed-seed hash is
/// enough for a table whose keys are all known at build time.
pub type Table = HashMap<&'static [u8], &'static Spec, foldhash::fast::FixedState>;

/// Every top-level command by lower-case name.
pub fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| {
        let mut m = Table::default();
        for fam in families() {
            for s in fam.iter() {
                let prev = m.insert(s.name.as_bytes(), s);
                assert!(prev.is_none(), "command {} defined twice", s.name);
            }
        }
        m
    })
}

/// Every command and subcommand with its container (None for top-level
/// ones), in table order. The position is the command's dense index
/// (`spec_index`), which INFO commandstats counts under.
pub fn all_specs() -> &'static [(&'static Spec, Option<&'static Spec>)] {
    static A: OnceLock<Vec<(&'static Spec, Option<&'static Spec>)>> = OnceLock::new();
    A.get_or_init(|| {
        let mut v = Vec::new();
        for fam in families() {
            for s in fam.iter() {
                v.push((s, None));
                for sub in s.subs {
                    v.push((sub, Some(s)));
                }
            }
        }
        v
    })
}

/// The command table as the ACL sees it: every command and subcommand
/// with its full name and categories, by dense index (`spec_index`).
pub fn acl_catalog() -> std::sync::Arc<crate::acl::Catalog> {
    catalog_arc().clone()
}

/// The same catalog, borrowed for the whole process.
pub fn catalog() -> &'static crate::acl::Catalog {
    catalog_arc()
}

fn catalog_arc() -> &'static std::sync::Arc<crate::acl::Catalog> {
    static C: OnceLock<std::sync::Arc<crate::acl::Catalog>> = OnceLock::new();
    C.get_or_init(|| {
        let specs = all_specs();
        let mut entries: Vec<crate::acl::CatalogEntry> = Vec::with_capacity(specs.len());
        let mut parent_at = 0;
        for (i, (s, parent)) in specs.iter().enumerate() {
            let cats = s
                .acl
                .iter()
                .fold(0, |b, c| b | crate::acl::category_bit(c.as_bytes()));
            let (name, parent) = match parent {
                Some(p) => {
                    entries[parent_at].subs.push(i);
                    (format!("{}|{}", p.name, s.name), Some(parent_at))
                }
                None => {
                    parent_at = i;
                    (s.name.to_string(), None)
                }
            };
            entries.push(crate::acl::CatalogEntry {
                name,
                parent,
                subs: Vec::new(),
                cats,
            });
        }
        std::sync::Arc::new(crate::acl::Catalog::new(entries))
    })
}

/// The dense index of a command or subcommand of the table.
pub fn spec_index(s: &'static Spec) -> usize {
    type ByAddr = HashMap<usize, usize, foldhash::fast::FixedState>;
    static M: OnceLock<ByAddr> = OnceLock::new();
    let m = M.get_or_init(|| {
        all_specs()
            .iter()
            .enumerate()
            .map(|(i, (s, _))| (*s as *const Spec as usize, i))
            .collect()
    });
    m.get(&(s as *const Spec as usize)).copied().unwrap_or(0)
}

/// Finds a command by name, case-insensitively, without allocating.
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    let mut buf = [0u8; 32];
    if name.len() > buf.len() {
        return None;
    }
    for (d, s) in buf.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    table().get(&buf[..name.len()]).copied()
}

/// Finds a subcommand of `parent` case-insensitively.
pub fn lookup_sub(parent: &'static Spec, name: &[u8]) -> Option<&'static Spec> {
    parent
        .subs
        .iter()
        .find(|s| s.name.as_bytes().eq_ignore_ascii_case(name))
}
