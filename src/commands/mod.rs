//! The command table and dispatcher.
//!
//! Each family module (`strings`, `keys`, `connection`, `server`) exports a
//! `COMMANDS: &[Spec]` table; `table()` joins them. Unknown-command, arity and
//! NOAUTH errors are produced only here, in `execute`, with Redis's texts.
//! A handler gets the whole argument vector (name included) and writes exactly
//! one reply to `ctx.out`.

pub mod acl;
pub mod bitmap;
pub mod connection;
pub mod functions;
pub mod hash;
pub mod hyperloglog;
pub mod keys;
pub mod list;
pub mod multi;
pub mod propagate;
pub mod pubsub;
pub mod replay;
pub mod scripting;
pub mod server;
pub mod set;
pub mod sort;
pub mod strings;
pub mod watch;
pub mod zset;

use std::collections::HashMap;
use std::sync::OnceLock;

use bytes::Bytes;

use crate::blocking::{TimeoutReply, Wait, WaitId};
pub use crate::db::Event;
use crate::db::{Db, WrongType};
use crate::resp::Out;
use crate::store::{ClientId, Store};

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
    }
}

/// Every family's table, one line each (no count to keep in step).
static FAMILIES: &[&[Spec]] = &[
    strings::COMMANDS,
    bitmap::COMMANDS,
    list::COMMANDS,
    hash::COMMANDS,
    hyperloglog::COMMANDS,
    set::COMMANDS,
    zset::COMMANDS,
    sort::COMMANDS,
    keys::COMMANDS,
    connection::COMMANDS,
    server::COMMANDS,
    watch::COMMANDS,
    pubsub::COMMANDS,
    multi::COMMANDS,
    scripting::COMMANDS,
    functions::COMMANDS,
    acl::COMMANDS,
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

/// CLIENT REPLY mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    Off,
    /// Skip the reply of the next command only.
    Skip,
}

/// Per-connection state the dispatcher keeps outside the store.
#[derive(Debug)]
pub struct ConnState {
    pub id: ClientId,
    pub db: usize,
    pub authed: bool,
    /// The ACL user this connection runs as.
    pub user: Bytes,
    /// The ACL generation at which its user was found unrestricted (no
    /// check needed until users change); 0: not known.
    pub acl_unrestricted: u64,
    pub reply_mode: ReplyMode,
    /// QUIT, a protocol error or a kill: write what is buffered, then close.
    pub close_after_reply: bool,
    /// The last batch logged changes to the AOF: with `appendfsync
    /// always`, its replies wait until they are on disk.
    pub aof_logged: bool,
    /// TPSESSION: closed when nothing arrives for this long (ms; 0: off,
    /// or the server's `tp-session-timeout` while it holds locks).
    pub session_ms: u64,
    /// The running command's reply is dropped (a CLIENT REPLY SKIP before
    /// it); CLIENT REPLY ON clears it, as Redis's CLIENT_REPLY_SKIP.
    pub skip_reply: bool,
    /// Pushes the running command caused for this connection go before
    /// its reply instead of after it (WATCHEX: they precede its state).
    pub pushes_first: bool,
    /// The query buffer while this batch runs: bytes held, free capacity
    /// (CLIENT LIST `qbuf`, `qbuf-free`); set by the connection loop.
    pub qbuf: usize,
    pub qbuf_free: usize,
    /// Wake-ups and queued pushes for this connection (shared with its
    /// `ClientHandle`).
    pub signal: std::sync::Arc<crate::store::ClientSignal>,
    /// Set by a blocking command that found nothing to serve: the
    /// dispatcher registers the wait (`process`) or leaves it in line
    /// (`settle`).
    pub block: Option<BlockRequest>,
    /// The command runs again for a waiter because this key became ready:
    /// it may take only from this key, and a blocking command that still
    /// finds nothing there (or finds another type: Redis serves list
    /// waiters only from lists) asks to block again.
    pub serving: Option<Bytes>,
    /// The wait this connection is blocked in (no command of it runs until
    /// it is served, times out or is unblocked), with its deadline in ms.
    pub blocked: Option<(WaitId, Option<i64>)>,
    /// The commands this connection ran last: a pipeline mostly repeats
    /// one (a transaction a few), and comparing names is cheaper than the
    /// table lookup.
    pub last_spec: [Option<&'static Spec>; 4],
    /// The last commands counted in commandstats, with their index there.
    pub stat_index: [Option<(&'static Spec, usize)>; 4],
    /// CLIENT PAUSE postponed the command about to run: it stays unread
    /// and runs when the pause ends (deadline in ms).
    pub postponed: Option<i64>,
    /// The client a Lua script runs its commands as (MONITOR shows `lua`).
    pub in_script: bool,
    /// The open transaction (MULTI until EXEC or DISCARD).
    pub multi: Option<multi::Transaction>,
    /// Commands the running command asks to be logged in its place (EXEC:
    /// the writes it ran); `call` returns them as its `Record::rewrite`.
    pub rewrite: Option<Vec<crate::effects::Logged>>,
}

/// A blocking command's request to wait for `keys` (of the current database).
#[derive(Debug)]
pub struct BlockRequest {
    pub keys: Vec<Bytes>,
    /// Absolute deadline in ms; None waits forever.
    pub deadline: Option<i64>,
    pub on_timeout: TimeoutReply,
}

impl ConnState {
    pub fn new(id: ClientId, authed: bool) -> ConnState {
        ConnState {
            id,
            db: 0,
            authed,
            user: Bytes::from_static(b"default"),
            acl_unrestricted: 0,
            reply_mode: ReplyMode::On,
            close_after_reply: false,
            aof_logged: false,
            session_ms: 0,
            skip_reply: false,
            pushes_first: false,
            qbuf: 0,
            qbuf_free: 0,
            signal: Default::default(),
            block: None,
            serving: None,
            blocked: None,
            last_spec: [None; 4],
            stat_index: [None; 4],
            postponed: None,
            in_script: false,
            multi: None,
            rewrite: None,
        }
    }
}

/// What a handler works with.
pub struct Ctx<'a> {
    pub store: &'a mut Store,
    pub conn: &'a mut ConnState,
    pub out: &'a mut Out,
}

impl Ctx<'_> {
    /// The selected database.
    pub fn db(&mut self) -> &mut Db {
        self.store.ks.db_mut(self.conn.db)
    }

    /// The selected database and the reply buffer, borrowed together so a
    /// value can be written straight from the store into the reply.
    pub fn db_out(&mut self) -> (&mut Db, &mut Out) {
        (self.store.ks.db_mut(self.conn.db), &mut *self.out)
    }

    pub fn error(&mut self, msg: &str) {
        self.out.error(msg);
    }
}

// Error texts shared by families, exactly as Redis 7 prints them.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
pub const SYNTAX: &str = "ERR syntax error";
pub const NOT_INT: &str = "ERR value is not an integer or out of range";
pub const NOT_FLOAT: &str = "ERR value is not a valid float";
pub const NO_SUCH_KEY: &str = "ERR no such key";
pub const NOAUTH: &str = "NOAUTH Authentication required.";
pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// The one place a typed lookup's `WrongType` becomes Redis's WRONGTYPE
/// error: `let Some(v) = typed(ctx.out, db.read::<Hash>(key)) else { return };`
pub fn typed<T>(out: &mut Out, r: Result<T, WrongType>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(WrongType) => {
            out.error(WRONGTYPE);
            None
        }
    }
}

/// Parses an integer argument or replies with `ERR value is not an integer`.
pub fn arg_i64(ctx: &mut Ctx, a: &[u8]) -> Option<i64> {
    match crate::util::parse_i64(a) {
        Some(v) => Some(v),
        None => {
            ctx.error(NOT_INT);
            None
        }
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
            if ctx.store.aof.is_some() {
                let logged = propagate::wrap(propagate::logged(ctx, spec, args, db, r));
                crate::persist::aof_feed(ctx.store, logged);
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
        lead = crate::pubsub::lead_bytes(args, &events);
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
            Some(_) => !["exec", "discard", "quit", "reset"]
                .iter()
                .any(|n| crate::util::eq_ic(&args[0], n)),
        };
        if refused {
            ctx.out.error(OOM);
            return None;
        }
    }
    // The last background save or AOF write failed: no writes (and no
    // PING), as Redis's writeCommandsDeniedByDiskError.
    if (spec.flags | exec_flags) & WRITE != 0 || spec.name == "ping" {
        if let Some(e) = crate::persist::write_denial(ctx.store) {
            ctx.out.error(&e);
            return None;
        }
    }
    // A RESP2 connection in subscribed mode runs only what Redis allows there.
    if !ctx.out.resp3 && ctx.store.pubsub.is_subscribed(ctx.conn.id) {
        let top = lookup(&args[0]).unwrap_or(spec);
        if !pubsub::allowed_when_subscribed(top) {
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

/// Registers the wait a blocking command asked for: this connection runs
/// nothing more until it is served, times out or is unblocked.
fn block(ctx: &mut Ctx, args: &[Bytes], req: BlockRequest, silent: bool) {
    let db = ctx.conn.db;
    let keys = req
        .keys
        .iter()
        .map(|k| crate::ids::own_key(db, k))
        .collect();
    // Copies: the arguments are slices of the whole read buffer.
    let args = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
    let wid = ctx.store.ks.blocking.add(
        ctx.conn.id,
        keys,
        Wait::Command {
            args,
            db,
            deadline: req.deadline,
            on_timeout: req.on_timeout,
            silent,
        },
    );
    ctx.conn.blocked = Some((wid, req.deadline));
}

/// Drains the keyspace hook and serves every waiter whose key became ready,
/// each key's line in arrival order, until nothing more is ready (serving
/// one waiter can make another key ready: BLMOVE onto a list someone else
/// blocks on). Runs after each top-level command, expiry cycle and
/// disconnect.
///
/// Not re-entrant: a command run to serve a waiter may itself call
/// `settle` (a write settling queued keys); that inner call only drains
/// the hook, and this loop serves what became ready, so no waiter is served
/// twice.
pub fn settle(store: &mut Store, by: Option<ClientId>) {
    if !store.ks.begin_settling() {
        store.drain_events(by);
        return;
    }
    settle_loop(store, by);
    store.ks.end_settling();
}

fn settle_loop(store: &mut Store, by: Option<ClientId>) {
    loop {
        store.drain_events(by);
        if !store.ks.blocking.has_ready() {
            return;
        }
        for dk in store.ks.blocking.take_ready() {
            for wid in store.ks.blocking.line(&dk) {
                let Some(w) = store.ks.blocking.get(wid) else {
                    continue;
                };
                match w.wait {
                    Wait::Lock { .. } => {
                        if store.hand_over_lock(wid) {
                            break;
                        }
                    }
                    Wait::Command { .. } => serve_command(store, wid, &dk.1),
                }
            }
        }
    }
}

/// Runs blocked command `wid` again as its client. If it is served (it
/// wrote a reply instead of asking to block), its reply is queued to the
/// client, which is woken, and the waiter leaves every line.
fn serve_command(store: &mut Store, wid: WaitId, ready: &Bytes) {
    let Some(w) = store.ks.blocking.get(wid) else {
        return;
    };
    let Wait::Command {
        args, db, silent, ..
    } = &w.wait
    else {
        return;
    };
    let (client, args, db, silent) = (w.client, args.clone(), *db, *silent);
    // A blocked command waits for data at its key: while the key is gone
    // there is nothing to serve (this keeps a write to a key with many
    // waiters from re-running every one of them).
    if !store.ks.db_mut(db).exists(ready) {
        return;
    }
    let Some((resp3, signal)) = store
        .clients
        .get(&client)
        .filter(|c| !c.signal.is_killed())
        .map(|c| (c.resp == 3, c.signal.clone()))
    else {
        store.ks.blocking.remove(wid);
        return;
    };
    let Some(spec) = lookup(&args[0]) else {
        store.ks.blocking.remove(wid);
        return;
    };
    let mut conn = ConnState::new(client, true);
    conn.db = db;
    conn.serving = Some(ready.clone());
    conn.signal = signal.clone();
    let mut out = Out::new(resp3);
    let mut ctx = Ctx {
        store,
        conn: &mut conn,
        out: &mut out,
    };
    // The handler alone, not `call`: the command was counted (and shown to
    // MONITOR) when it first ran, as Redis counts a blocked command once.
    // The changes it makes are drained by `settle`'s loop.
    let before = ctx.store.ks.db_mut(db).events.len();
    (spec.run)(&mut ctx, &args);
    if ctx.store.aof.is_some() && ctx.store.ks.db_mut(db).events.len() > before {
        let logged = vec![(db, propagate::served(&args, ready))];
        crate::persist::aof_feed(ctx.store, logged);
    }
    if conn.block.is_some() {
        return;
    }
    store.ks.blocking.remove(wid);
    if !silent {
        signal.queue(&out.buf);
    }
    signal.wake.notify_one();
}

/// A blocking command's timeout in seconds (fractions allowed; 0 =
/// forever) as an absolute deadline in ms; None after replying the error
/// Redis 7.0 gives.
pub fn parse_timeout(ctx: &mut Ctx, a: &[u8]) -> Option<Option<i64>> {
    // Redis's string2ld: strtold over the whole argument, no leading
    // space, hex accepted, NaN refused.
    let (secs, n, _) = crate::util::strtod(a);
    if a.is_empty() || crate::util::c_isspace(a[0]) || n != a.len() || secs.is_nan() {
        ctx.error("ERR timeout is not a float or out of range");
        return None;
    }
    let ms = secs * 1000.0;
    // Redis converts to a long long: out-of-range values come out negative.
    let ms = if ms.is_finite() && ms.abs() < i64::MAX as f64 {
        ms.ceil() as i64
    } else {
        -1
    };
    if ms < 0 {
        ctx.error("ERR timeout is negative");
        return None;
    }
    if ms == 0 {
        return Some(None);
    }
    Some(Some(crate::util::cmd_time_ms().saturating_add(ms)))
}

/// Asks the dispatcher to block this command on `keys`, or (run by
/// MULTI/EXEC or a script, where nothing may block: later issues) replies
/// the timeout reply at once.
pub fn block_on(ctx: &mut Ctx, keys: &[Bytes], deadline: Option<i64>, on_timeout: TimeoutReply) {
    ctx.conn.block = Some(BlockRequest {
        keys: keys.to_vec(),
        deadline,
        on_timeout,
    });
}

/// A start..=end index range as Redis normalises it for LRANGE, LTRIM,
/// ZRANGE and friends on a value of `len` elements: negative indexes count
/// from the end, the range is clamped, None when it is empty.
pub fn norm_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let mut start = if start < 0 {
        start.saturating_add(len)
    } else {
        start
    };
    let mut end = if end < 0 {
        end.saturating_add(len)
    } else {
        end
    };
    if start < 0 {
        start = 0;
    }
    if start > end || start >= len {
        return None;
    }
    if end >= len {
        end = len - 1;
    }
    Some((start as usize, end as usize))
}

/// Most picks HRANDFIELD, SRANDMEMBER and ZRANDMEMBER write with a
/// negative count: Redis streams any number (and an absurd one holds the
/// server and its memory without bound); latchkey refuses replies this
/// large with `ERR value is out of range`.
pub const MAX_RANDOM_REPEATS: u64 = 1 << 25;

/// LMPOP/BLMPOP/ZMPOP/BZMPOP arguments from `numkeys` on: the keys, the
/// side (`which` parses LEFT|RIGHT or MIN|MAX), the COUNT (default 1).
pub fn mpop_args<'a, E>(
    ctx: &mut Ctx,
    args: &'a [Bytes],
    which: impl Fn(&[u8]) -> Option<E>,
) -> Option<(&'a [Bytes], E, usize)> {
    let n = match crate::util::parse_i64(&args[0]) {
        Some(n) if n > 0 => n as usize,
        _ => {
            ctx.error("ERR numkeys should be greater than 0");
            return None;
        }
    };
    if n > args.len() - 1 {
        ctx.error(SYNTAX);
        return None;
    }
    let keys = &args[1..=n];
    let rest = &args[n + 1..];
    let Some(end) = rest.first().and_then(|a| which(a)) else {
        ctx.error(SYNTAX);
        return None;
    };
    let count = match &rest[1..] {
        [] => 1,
        [opt, c] if crate::util::eq_ic(opt, "count") => match crate::util::parse_i64(c) {
            Some(c) if c > 0 => c as usize,
            _ => {
                ctx.error("ERR count should be greater than 0");
                return None;
            }
        },
        _ => {
            ctx.error(SYNTAX);
            return None;
        }
    };
    Some((keys, end, count))
}

/// Whether a blocking command may take from `key` now: any of its keys
/// when it first runs; only the key that became ready when it runs again
/// to serve a waiter (as Redis serves a waiter from the ready key).
pub fn may_take(ctx: &Ctx, key: &Bytes) -> bool {
    ctx.conn.serving.as_ref().is_none_or(|k| k == key)
}

/// The reply of a blocked command whose wait ended without data.
pub fn timeout_reply(out: &mut Out, r: TimeoutReply) {
    match r {
        TimeoutReply::NullArray => out.null_array(),
        TimeoutReply::NullBulk => out.null(),
    }
}

/// A write about to touch a queued key whose TTL has passed (not yet
/// expired by the active cycle) would expire it lazily and could re-create
/// it before the queue's hand-over runs: expire and hand over first, so
/// nobody cuts in front of the line (SETTP does the same for itself).
fn settle_queued_keys(ctx: &mut Ctx, spec: &Spec, args: &[Bytes]) {
    if spec.first_key <= 0 || spec.step <= 0 {
        return;
    }
    let n = args.len() as i32;
    let last = if spec.last_key < 0 {
        n + spec.last_key
    } else {
        spec.last_key
    };
    for i in (spec.first_key..=last.min(n - 1)).step_by(spec.step as usize) {
        settle_queued_key(ctx, &args[i as usize]);
    }
}

/// `settle_queued_keys` for one key a command is about to write that its
/// spec's key positions do not name (SORT's STORE destination).
pub fn settle_queued_key(ctx: &mut Ctx, key: &Bytes) {
    let db = ctx.conn.db;
    if ctx.store.ks.blocking.has(&(db, key.clone())) && !ctx.db().exists(key) {
        settle(ctx.store, Some(ctx.conn.id));
    }
}

/// Runs one command in database `db` of `store`, as client 1 speaking
/// RESP2, straight through its handler; returns the reply bytes.
#[cfg(test)]
pub fn run_for_test(store: &mut Store, db: usize, args: &[&str]) -> Vec<u8> {
    let mut conn = ConnState::new(1, true);
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
