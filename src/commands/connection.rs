//! Connection commands (PING, ECHO, SELECT, QUIT, RESET, AUTH, HELLO, CLIENT),
//! as Redis 7.0's server.c / networking.c implement them, with Redis 7.2's
//! CLIENT SETINFO and CLIENT NO-TOUCH.
//!
//! Reaches state only through `Ctx` (the client table, ACL users, tracking,
//! the blocking registry for CLIENT UNBLOCK). Must not free a connection
//! itself: `Store::kill_client` signals its task and runs `Store::client_gone`.

use std::fmt::Write as _;

use bytes::Bytes;

use super::*;
use crate::server::ClientHandle;
use crate::util::eq_ic;

use super::{MISCONF_DENIED, MULTI_OOM_OK, RUNS_IN_MULTI, SUBSCRIBED_OK};
use crate::version::REDIS_VERSION;

const CONN_FAST: &[&str] = &["fast", "connection"];
const CONN_SLOW: &[&str] = &["slow", "connection"];
const CONN_ADMIN: &[&str] = &["admin", "slow", "dangerous", "connection"];
/// Flags of AUTH, HELLO, QUIT and RESET: they run before authentication.
const PRE_AUTH: u32 = NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | ALLOW_BUSY;
const CLIENT_FLAGS: u32 = NOSCRIPT | LOADING | STALE;

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
const BAD_NAME: &str = "ERR Client names cannot contain spaces, newlines or special characters.";

pub static COMMANDS: &[Spec] = &[
    spec(
        "ping",
        -1,
        FAST,
        (0, 0, 0),
        "connection",
        "1.0.0",
        "Ping the server",
        CONN_FAST,
        ping,
    )
    .rules(SUBSCRIBED_OK | MISCONF_DENIED),
    spec(
        "echo",
        2,
        LOADING | STALE | FAST,
        (0, 0, 0),
        "connection",
        "1.0.0",
        "Echo the given string",
        CONN_FAST,
        echo,
    ),
    spec(
        "select",
        2,
        LOADING | STALE | FAST,
        (0, 0, 0),
        "connection",
        "1.0.0",
        "Change the selected database for the current connection",
        CONN_FAST,
        select,
    ),
    spec(
        "quit",
        -1,
        PRE_AUTH,
        (0, 0, 0),
        "connection",
        "1.0.0",
        "Close the connection",
        CONN_FAST,
        quit,
    )
    .rules(RUNS_IN_MULTI | MULTI_OOM_OK | SUBSCRIBED_OK),
    spec(
        "reset",
        1,
        PRE_AUTH,
        (0, 0, 0),
        "connection",
        "6.2.0",
        "Reset the connection",
        CONN_FAST,
        reset,
    )
    .rules(RUNS_IN_MULTI | MULTI_OOM_OK | SUBSCRIBED_OK),
    spec(
        "auth",
        -2,
        PRE_AUTH,
        (0, 0, 0),
        "connection",
        "1.0.0",
        "Authenticate to the server",
        CONN_FAST,
        |ctx, args| auth(ctx, args),
    ),
    spec(
        "hello",
        -1,
        PRE_AUTH,
        (0, 0, 0),
        "connection",
        "6.0.0",
        "Handshake with Redis",
        CONN_FAST,
        |ctx, args| hello(ctx, args),
    ),
    Spec {
        subs: CLIENT_SUBS,
        ..spec(
            "client",
            -2,
            0,
            (0, 0, 0),
            "connection",
            "2.4.0",
            "A container for client connection commands",
            &["slow"],
            client,
        )
    },
];

static CLIENT_SUBS: &[Spec] = &[
    spec(
        "id",
        2,
        CLIENT_FLAGS,
        (0, 0, 0),
        "connection",
        "5.0.0",
        "Returns the client ID for the current connection",
        CONN_SLOW,
        client_id,
    ),
    spec(
        "setname",
        3,
        CLIENT_FLAGS,
        (0, 0, 0),
        "connection",
        "2.6.9",
        "Set the current connection name",
        CONN_SLOW,
        client_setname,
    ),
    // Redis 7.2.0 (https://redis.io/docs/latest/commands/client-setinfo/):
    // Redis 7.2's flags and categories; COMMAND DOCS gives the table's
    // summary, since and group, as for latchkey's own commands.
    spec(
        "setinfo",
        4,
        CLIENT_FLAGS,
        (0, 0, 0),
        "connection",
        "7.2.0",
        "Sets information specific to the client or connection.",
        CONN_SLOW,
        client_setinfo,
    ),
    spec(
        "getname",
        2,
        CLIENT_FLAGS,
        (0, 0, 0),
        "connection",
        "2.6.9",
        "Get the current connection name",
        CONN_SLOW,
        client_getname,
    ),
    spec(
        "list",
        -2,
        ADMIN | CLIENT_FLAGS,
        (0, 0, 0),
        "connection",
        "2.4.0",
        "Get the list of client connections",
        CONN_ADMIN,
        client_list,
    ),
    spec(
        "info",
        2,
        CLIENT_FLAGS,
        (0, 0, 0),
        "connection",
        "6.2.0",
        "Returns information about the current client connection.",
        CONN_SLOW,
        client_info,
    ),
    spec(
        "kill",
        -3,
        ADMIN | CLIENT_FLAGS,
        (0, 0, 0),
        "connection",
        "2.4.0",
        "Kill the connection of a client",
        CONN_ADMIN,
        client_kill,
    ),
    spec(
        "no-evict",
        3,
        ADMIN | CLIENT_FLAGS,
        (0, 0, 0),
        "connection",
        "7.0.0",
        "Set client eviction mode for the current connection",
        CONN_ADMIN,
        client_no_evict,
    ),
    // Redis 7.2 (https://redis.io/docs/latest/commands/client-no-touch/):
    // arity 3, noscript loading stale, @slow @connection.
    spec(
        "no-touch",
        3,
        CLIENT_FLAGS,
        (0, 0, 0),
        "connection",
        "7.2.0",
        "Controls whether commands sent by the client affect the LRU/LFU of accessed keys",
        CONN_SLOW,
        client_no_touch,
    ),
    spec(
        "reply",
        3,
        CLIENT_FLAGS,
        (0, 0, 0),
        "connection",
        "3.2.0",
        "Instruct the server whether to reply to commands",
        CONN_SLOW,
        client_reply,
    ),
    spec(
        "tracking",
        -3,
        NOSCRIPT | LOADING | STALE,
        (0, 0, 0),
        "connection",
        "6.0.0",
        "Enable or disable server assisted client side caching support",
        CONN_SLOW,
        client_tracking,
    ),
    spec(
        "caching",
        3,
        NOSCRIPT | LOADING | STALE,
        (0, 0, 0),
        "connection",
        "6.0.0",
        "Instruct the server about tracking or not keys in the next request",
        CONN_SLOW,
        client_caching,
    ),
    spec(
        "getredir",
        2,
        NOSCRIPT | LOADING | STALE,
        (0, 0, 0),
        "connection",
        "6.0.0",
        "Get tracking notifications redirection client ID if any",
        CONN_SLOW,
        client_getredir,
    ),
    spec(
        "trackinginfo",
        2,
        NOSCRIPT | LOADING | STALE,
        (0, 0, 0),
        "connection",
        "6.2.0",
        "Return information about server assisted client side caching for the current connection",
        CONN_SLOW,
        client_trackinginfo,
    ),
    spec(
        "pause",
        -3,
        ADMIN | NOSCRIPT | LOADING | STALE,
        (0, 0, 0),
        "connection",
        "3.0.0",
        "Stop processing commands from clients for some time",
        CONN_ADMIN,
        client_pause,
    ),
    spec(
        "unpause",
        2,
        ADMIN | NOSCRIPT | LOADING | STALE,
        (0, 0, 0),
        "connection",
        "6.2.0",
        "Resume processing of clients that were paused",
        CONN_ADMIN,
        client_unpause,
    ),
    spec(
        "unblock",
        -3,
        ADMIN | NOSCRIPT | LOADING | STALE,
        (0, 0, 0),
        "connection",
        "5.0.0",
        "Unblock a client blocked in a blocking command from a different connection",
        CONN_ADMIN,
        client_unblock,
    ),
    spec(
        "help",
        2,
        LOADING | STALE,
        (0, 0, 0),
        "connection",
        "5.0.0",
        "Show helpful text about the different subcommands",
        CONN_SLOW,
        client_help,
    ),
];

fn handle<'a>(ctx: &'a mut Ctx) -> Option<&'a mut ClientHandle> {
    ctx.store.clients.get_mut(&ctx.conn.id)
}

fn ping(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len() > 2 {
        return ctx.error("ERR wrong number of arguments for 'ping' command");
    }
    // A RESP2 client in subscribed mode gets ["pong", arg] (Redis's pingCommand).
    let subscribed = !ctx.out.resp3
        && ctx
            .store
            .clients
            .get(&ctx.conn.id)
            .is_some_and(|c| c.info.sub + c.info.psub + c.info.ssub > 0);
    if subscribed {
        ctx.out.array(2);
        ctx.out.bulk(b"pong");
        ctx.out.bulk(args.get(1).map_or(&b""[..], |a| &a[..]));
    } else if args.len() == 1 {
        ctx.out.simple("PONG");
    } else {
        ctx.out.bulk(&args[1]);
    }
}

fn echo(ctx: &mut Ctx, args: &[Bytes]) {
    ctx.out.bulk(&args[1]);
}

fn select(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(n) = arg_i64(ctx, &args[1]) else {
        return;
    };
    if n < i32::MIN as i64 || n > i32::MAX as i64 {
        return ctx
            .error("ERR value is out of range, value must between -2147483648 and 2147483647");
    }
    if n < 0 || n as usize >= ctx.store.ks.len() {
        return ctx.error("ERR DB index is out of range");
    }
    select_db(ctx, n as usize);
    ctx.out.ok();
}

/// Switches the connection's database, keeping CLIENT LIST's copy in sync.
fn select_db(ctx: &mut Ctx, db: usize) {
    ctx.conn.db = db;
    if let Some(c) = handle(ctx) {
        c.db = db;
    }
}

fn set_resp(ctx: &mut Ctx, ver: u8) {
    ctx.out.resp3 = ver == 3;
    if let Some(c) = handle(ctx) {
        c.resp = ver;
    }
}

fn quit(ctx: &mut Ctx, _args: &[Bytes]) {
    ctx.out.ok();
    ctx.conn.close_after_reply = true;
}

/// RESET: back to a fresh connection's state (Redis's
/// clearClientConnectionState). Redis 7.0.15 keeps NO-EVICT across RESET;
/// NO-TOUCH (7.2) is cleared, as 7.2's clearClientConnectionState does.
fn reset(ctx: &mut Ctx, _args: &[Bytes]) {
    let authed = !ctx.store.acl.auth_required();
    reset_connection(ctx.conn, ctx.out, authed);
    reset_store(ctx);
}

/// RESET's part in the connection's own state (Redis's
/// clearClientConnectionState): database 0, RESP2, the default user, no
/// transaction, replies on, and its `+RESET`.
fn reset_connection(conn: &mut ConnState, out: &mut Out, authed: bool) {
    conn.multi = None;
    conn.db = 0;
    out.resp3 = false;
    conn.user = Bytes::from_static(b"default");
    conn.authed = authed;
    conn.acl_unrestricted = 0;
    conn.no_touch = false;
    // Clears OFF and a pending SKIP; a SKIP already applying to this very
    // command stays (so its +RESET is not sent), as in Redis.
    conn.reply_mode = ReplyMode::On;
    out.simple("RESET");
}

/// RESET's part in the store: MONITOR, existence watches and SETTP queue
/// places (bound keys stay: the connection lives on), subscriptions,
/// tracking, WATCH, and the client table's view of the connection.
fn reset_store(ctx: &mut Ctx) {
    let id = ctx.conn.id;
    ctx.store.monitors.retain(|m| *m != id);
    ctx.store.ks.client_reset(id);
    ctx.store.unsubscribe_all(id);
    ctx.store.tracking.disable(id);
    multi::unwatched(ctx);
    let user = ctx.conn.user.clone();
    if let Some(c) = handle(ctx) {
        c.db = 0;
        c.resp = 2;
        c.user = String::from_utf8_lossy(&user).into_owned();
        c.monitor = false;
        c.name = None;
        c.no_touch = false;
    }
}

/// What AUTH and HELLO need of the server. With the store (`Ctx`) they act
/// at once. While a script holds the store (`BusySession`, as Redis runs
/// them from inside a busy script) the users as the script began answer
/// (they cannot change while it runs), and what the store keeps (the
/// client table's user, name and protocol, ACL LOG) is left in
/// `conn.later` for when it is free.
trait Session {
    fn conn(&mut self) -> &mut ConnState;
    fn out(&mut self) -> &mut Out;
    fn users(&self) -> &crate::acl::Users;
    /// The connection runs as `user` from now on.
    fn set_user(&mut self, user: Bytes);
    /// A failed AUTH: Redis logs it in ACL LOG.
    fn auth_failed(&mut self, args: &[Bytes], user: &Bytes);
    fn set_name(&mut self, name: Option<Bytes>);
    fn set_resp(&mut self, ver: u8);
}

impl Session for Ctx<'_> {
    fn conn(&mut self) -> &mut ConnState {
        self.conn
    }
    fn out(&mut self) -> &mut Out {
        self.out
    }
    fn users(&self) -> &crate::acl::Users {
        &self.store.acl.users
    }
    fn set_user(&mut self, user: Bytes) {
        set_user(self, user, true);
    }
    fn auth_failed(&mut self, args: &[Bytes], user: &Bytes) {
        let context = super::acl::context(self);
        log_auth_failure(self, context, args, user);
    }
    fn set_name(&mut self, name: Option<Bytes>) {
        if let Some(c) = handle(self) {
            c.name = name;
        }
    }
    fn set_resp(&mut self, ver: u8) {
        set_resp(self, ver);
    }
}

/// AUTH and HELLO while a script is busy (see `Session`).
struct BusySession<'a> {
    conn: &'a mut ConnState,
    out: &'a mut Out,
    users: crate::acl::Users,
}

impl Session for BusySession<'_> {
    fn conn(&mut self) -> &mut ConnState {
        self.conn
    }
    fn out(&mut self) -> &mut Out {
        self.out
    }
    fn users(&self) -> &crate::acl::Users {
        &self.users
    }
    fn set_user(&mut self, user: Bytes) {
        self.conn.user = user.clone();
        self.conn.authed = true;
        self.conn.acl_unrestricted = 0;
        self.conn.later.push(Later::User(user));
    }
    fn auth_failed(&mut self, args: &[Bytes], user: &Bytes) {
        self.conn.later.push(Later::AuthFailed {
            args: args.to_vec(),
            user: user.clone(),
        });
    }
    fn set_name(&mut self, name: Option<Bytes>) {
        self.conn.later.push(Later::Name(name));
    }
    fn set_resp(&mut self, ver: u8) {
        self.out.resp3 = ver == 3;
        self.conn.later.push(Later::Resp(ver));
    }
}

/// AUTH, HELLO and QUIT while a script is busy, answered at once as Redis
/// answers them then; false for any other command.
pub(super) fn answer_busy(
    gate: &crate::scripting::Gate,
    conn: &mut ConnState,
    out: &mut Out,
    args: &[Bytes],
) -> bool {
    let hello_cmd = eq_ic(&args[0], "hello");
    if eq_ic(&args[0], "quit") {
        out.ok();
        conn.close_after_reply = true;
        return true;
    }
    if eq_ic(&args[0], "reset") {
        // The default user as the script began (users cannot change while
        // it runs); the store's part waits for the script's end.
        let Some(users) = gate.users() else {
            return false;
        };
        reset_connection(conn, out, !users.auth_required());
        conn.later.push(Later::Reset);
        return true;
    }
    if !hello_cmd && !eq_ic(&args[0], "auth") {
        return false;
    }
    let Some(users) = gate.users() else {
        return false;
    };
    let mut s = BusySession { conn, out, users };
    if hello_cmd {
        hello(&mut s, args);
    } else {
        auth(&mut s, args);
    }
    true
}

/// What a connection did while a script was busy, told to the store.
pub fn apply_later(ctx: &mut Ctx) {
    for later in std::mem::take(&mut ctx.conn.later) {
        match later {
            Later::User(user) => {
                if let Some(c) = handle(ctx) {
                    c.user = String::from_utf8_lossy(&user).into_owned();
                }
            }
            Later::Name(name) => ctx.set_name(name),
            Later::Resp(ver) => {
                if let Some(c) = handle(ctx) {
                    c.resp = ver;
                }
            }
            Later::AuthFailed { args, user } => log_auth_failure(ctx, "toplevel", &args, &user),
            Later::Unwatched => multi::unwatched(ctx),
            Later::Watch { db, keys, dirty } => multi::watched_while_busy(ctx, db, &keys, dirty),
            Later::Reset => reset_store(ctx),
        }
    }
}

/// The connection runs as `user` from now on.
fn set_user(ctx: &mut Ctx, user: Bytes, authed: bool) {
    if let Some(c) = handle(ctx) {
        c.user = String::from_utf8_lossy(&user).into_owned();
    }
    ctx.conn.user = user;
    ctx.conn.authed = authed;
    ctx.conn.acl_unrestricted = 0;
}

fn log_auth_failure(ctx: &mut Ctx, context: &'static str, args: &[Bytes], user: &Bytes) {
    let full = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    super::acl::add_log(
        ctx,
        crate::acl::LogReason::Auth,
        context,
        args[0].to_vec(),
        user.to_vec(),
        args,
        &full,
    );
}

/// Redis's ACLAuthenticateUser: on success the connection runs as `user`;
/// a failure is logged in ACL LOG.
fn authenticate(s: &mut impl Session, args: &[Bytes], user: &Bytes, pass: &[u8]) -> bool {
    if s.users().credentials_ok(user, pass) {
        s.set_user(user.clone());
        return true;
    }
    s.auth_failed(args, user);
    false
}

fn auth(s: &mut impl Session, args: &[Bytes]) {
    if args.len() > 3 {
        return s.out().error(SYNTAX);
    }
    let (user, pass) = if args.len() == 2 {
        if s.users().default_user().nopass() {
            return s.out().error(
                "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            );
        }
        (Bytes::from_static(b"default"), &args[1])
    } else {
        (args[1].clone(), &args[2])
    };
    if authenticate(s, args, &user, pass) {
        s.out().ok();
    } else {
        s.out().error(WRONGPASS);
    }
}

/// HELLO [protover [AUTH user pass] [SETNAME name]]. Options act in order as
/// they are parsed, exactly like Redis 7.0 (a SETNAME before a failing AUTH
/// stays applied).
fn hello(s: &mut impl Session, args: &[Bytes]) {
    let mut ver = 0;
    if args.len() >= 2 {
        match crate::util::parse_i64(&args[1]) {
            None => {
                return s
                    .out()
                    .error("ERR Protocol version is not an integer or out of range")
            }
            Some(v) if !(2..=3).contains(&v) => {
                return s.out().error("NOPROTO unsupported protocol version")
            }
            Some(v) => ver = v as u8,
        }
    }
    let mut j = 2;
    while j < args.len() {
        let more = args.len() - 1 - j;
        let opt = &args[j];
        if eq_ic(opt, "auth") && more >= 2 {
            let user = args[j + 1].clone();
            if !authenticate(s, args, &user, &args[j + 2]) {
                return s.out().error(WRONGPASS);
            }
            j += 3;
        } else if eq_ic(opt, "setname") && more >= 1 {
            let Some(name) = checked_name(s.out(), &args[j + 1]) else {
                return;
            };
            s.set_name(name);
            j += 2;
        } else {
            let o = String::from_utf8_lossy(opt);
            return s
                .out()
                .error(&format!("ERR Syntax error in HELLO option '{o}'"));
        }
    }
    if !s.conn().authed {
        return s.out().error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
        );
    }
    if ver != 0 {
        s.set_resp(ver);
    }
    let id = s.conn().id;
    let out = s.out();
    let proto = if out.resp3 { 3 } else { 2 };
    out.map(7);
    out.bulk(b"server");
    out.bulk(b"redis");
    out.bulk(b"version");
    out.bulk(REDIS_VERSION.as_bytes());
    out.bulk(b"proto");
    out.int(proto);
    out.bulk(b"id");
    out.int(id as i64);
    out.bulk(b"mode");
    out.bulk(b"standalone");
    out.bulk(b"role");
    out.bulk(b"master");
    out.bulk(b"modules");
    out.array(0);
}

/// A connection name as given (None for "", which clears it), or None
/// with the error written for a name Redis rejects.
fn checked_name(out: &mut Out, name: &Bytes) -> Option<Option<Bytes>> {
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        out.error(BAD_NAME);
        return None;
    }
    Some((!name.is_empty()).then(|| name.clone()))
}

/// Sets (or, with "", clears) the connection name; replies the error and
/// returns false for a name Redis rejects.
fn set_name(ctx: &mut Ctx, name: &Bytes) -> bool {
    match checked_name(ctx.out, name) {
        Some(name) => {
            ctx.set_name(name);
            true
        }
        None => false,
    }
}

/// The CLIENT container itself: `resolve` always picks a subcommand, so this
/// only runs when called directly; it dispatches the same way.
fn client(ctx: &mut Ctx, args: &[Bytes]) {
    if let Some(sub) = resolve(ctx.out, args) {
        (sub.run)(ctx, args);
    }
}

fn client_id(ctx: &mut Ctx, _args: &[Bytes]) {
    ctx.out.int(ctx.conn.id as i64);
}

fn client_setname(ctx: &mut Ctx, args: &[Bytes]) {
    if set_name(ctx, &args[2]) {
        ctx.out.ok();
    }
}

/// CLIENT SETINFO LIB-NAME name | LIB-VER version (Redis 7.2's
/// clientSetinfoCommand, https://redis.io/docs/latest/commands/client-setinfo/).
/// The attribute is matched case-insensitively and echoed as given in the
/// errors. Redis checks the value as a C string (validateClientAttr stops
/// at a NUL byte) and CLIENT LIST prints it with `%s`, so only the part
/// before a NUL counts; each byte of that must be in '!'..='~'. An empty
/// value clears the attribute. RESET keeps both, as the page says.
fn client_setinfo(ctx: &mut Ctx, args: &[Bytes]) {
    // Errors quote the attribute as given, up to a NUL (Redis's `%s`).
    let attr = &args[2][..memchr::memchr(0, &args[2]).unwrap_or(args[2].len())];
    let lib_name = if eq_ic(attr, "lib-name") {
        true
    } else if eq_ic(attr, "lib-ver") {
        false
    } else {
        let msg = [&b"ERR Unrecognized option '"[..], attr, b"'"].concat();
        return ctx.out.error_bytes(&msg);
    };
    let v = &args[3];
    let v = v.slice(..memchr::memchr(0, v).unwrap_or(v.len()));
    if v.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        let msg = [
            &b"ERR "[..],
            attr,
            b" cannot contain spaces, newlines or special characters.",
        ]
        .concat();
        return ctx.out.error_bytes(&msg);
    }
    let v = (!v.is_empty()).then_some(v);
    if let Some(c) = handle(ctx) {
        if lib_name {
            c.lib_name = v;
        } else {
            c.lib_ver = v;
        }
    }
    ctx.out.ok();
}

fn client_getname(ctx: &mut Ctx, _args: &[Bytes]) {
    match ctx
        .store
        .clients
        .get(&ctx.conn.id)
        .and_then(|c| c.name.as_ref())
    {
        Some(n) => ctx.out.bulk(n),
        None => ctx.out.null(),
    }
}

/// ON or OFF, either case (CLIENT NO-EVICT / NO-TOUCH); None after
/// replying a syntax error.
fn on_off(ctx: &mut Ctx, arg: &[u8]) -> Option<bool> {
    if eq_ic(arg, "on") {
        Some(true)
    } else if eq_ic(arg, "off") {
        Some(false)
    } else {
        ctx.error(SYNTAX);
        None
    }
}

fn client_no_evict(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(on) = on_off(ctx, &args[2]) else {
        return;
    };
    if let Some(c) = handle(ctx) {
        c.no_evict = on;
    }
    ctx.out.ok();
}

/// CLIENT NO-TOUCH ON|OFF (Redis 7.2): with ON, the connection's commands
/// but TOUCH leave keys' LRU/LFU stamps as they are (`dispatch::call`).
fn client_no_touch(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(on) = on_off(ctx, &args[2]) else {
        return;
    };
    ctx.conn.no_touch = on;
    if let Some(c) = handle(ctx) {
        c.no_touch = on;
    }
    ctx.out.ok();
}

/// CLIENT REPLY ON|OFF|SKIP. OFF and SKIP reply nothing; `execute` drops
/// replies according to `reply_mode` / `skip_reply`.
fn client_reply(ctx: &mut Ctx, args: &[Bytes]) {
    let a = &args[2];
    if eq_ic(a, "on") {
        ctx.conn.reply_mode = ReplyMode::On;
        ctx.conn.skip_reply = false;
        ctx.out.ok();
    } else if eq_ic(a, "off") {
        ctx.conn.reply_mode = ReplyMode::Off;
    } else if eq_ic(a, "skip") {
        if ctx.conn.reply_mode != ReplyMode::Off {
            ctx.conn.reply_mode = ReplyMode::Skip;
        }
    } else {
        ctx.error(SYNTAX);
    }
}

/// Client types of CLIENT LIST TYPE / CLIENT KILL TYPE.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ClientType {
    Normal,
    Replica,
    Pubsub,
    Master,
}

fn type_by_name(name: &[u8]) -> Option<ClientType> {
    if eq_ic(name, "normal") {
        Some(ClientType::Normal)
    } else if eq_ic(name, "slave") || eq_ic(name, "replica") {
        Some(ClientType::Replica)
    } else if eq_ic(name, "pubsub") {
        Some(ClientType::Pubsub)
    } else if eq_ic(name, "master") {
        Some(ClientType::Master)
    } else {
        None
    }
}

/// Redis's getClientType: MONITOR clients count as normal; a connection
/// that sent SYNC/PSYNC is a replica.
fn type_of(c: &ClientHandle, repl: &crate::replication::Replication) -> ClientType {
    if repl.is_replica(c.id) {
        ClientType::Replica
    } else if repl.master_client() == Some(c.id) {
        ClientType::Master
    } else if c.info.sub + c.info.psub + c.info.ssub > 0 {
        ClientType::Pubsub
    } else {
        ClientType::Normal
    }
}

fn unknown_type(ctx: &mut Ctx, name: &[u8]) {
    let n = String::from_utf8_lossy(name);
    ctx.error(&format!("ERR Unknown client type '{n}'"));
}

/// What only the calling connection knows about itself (its query buffer,
/// its pending replies), for its own CLIENT LIST / CLIENT INFO line.
struct SelfView {
    id: ClientId,
    cmd: String,
    qbuf: usize,
    qbuf_free: usize,
    argv_mem: usize,
    obl: usize,
    rbs: usize,
    close_after_reply: bool,
}

impl SelfView {
    fn new(ctx: &Ctx, args: &[Bytes]) -> SelfView {
        let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        SelfView::running(ctx, args, format!("client|{sub}"))
    }

    /// The view while `cmd` (its full name) runs with `args`.
    fn running(ctx: &Ctx, args: &[Bytes], cmd: String) -> SelfView {
        SelfView {
            id: ctx.conn.id,
            cmd,
            qbuf: ctx.conn.qbuf,
            qbuf_free: ctx.conn.qbuf_free,
            argv_mem: args.iter().map(|a| a.len()).sum(),
            obl: ctx.out.len(),
            rbs: ctx.out.buf.capacity(),
            close_after_reply: ctx.conn.close_after_reply,
        }
    }
}

/// Appends one CLIENT LIST line (with its '\n'), fields as in Redis 7.0.15.
/// `store` supplies latchkey's own fields: `tpkeys` (keys bound by SETTP)
/// and `watchex` (existence watches), appended after Redis's fields.
fn client_line(s: &mut String, c: &ClientHandle, me: &SelfView, now_ms: i64, store: &Store) {
    let mine = c.id == me.id;
    let mut flags = String::new();
    if c.monitor {
        flags.push('O');
    }
    if store.repl.is_replica(c.id) {
        flags.push('S');
    }
    if store.repl.master_client() == Some(c.id) {
        flags.push('M');
    }
    if c.info.sub + c.info.psub + c.info.ssub > 0 {
        flags.push('P');
    }
    if c.info.multi.is_some() {
        flags.push('x');
    }
    if store.ks.blocking.blocked_command(c.id).is_some() {
        flags.push('b');
    }
    let tracking = store.tracking.mode(c.id);
    if let Some(t) = tracking {
        flags.push('t');
        if t.broken_redirect {
            flags.push('R');
        }
        if t.bcast {
            flags.push('B');
        }
    }
    if store.ks.tx.is_dirty(c.id) {
        flags.push('d');
    }
    if mine && me.close_after_reply {
        flags.push('c');
    }
    if c.no_evict {
        flags.push('e');
    }
    if c.no_touch {
        flags.push('T');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let now_s = now_ms / 1000;
    let age = now_s - c.created_ms / 1000;
    let idle = if mine { 0 } else { now_s - c.last_ms / 1000 };
    let (f, obl) = if mine {
        let f = super::client_eviction::Figures {
            qbuf: me.qbuf,
            qbuf_free: me.qbuf_free,
            argv: me.argv_mem,
            unsent: 0,
            rbs: me.rbs,
        };
        (f, me.obl)
    } else {
        (super::client_eviction::Figures::of(c), 0)
    };
    let rbp = c.info.rbp.max(obl);
    let omem = c.signal.pending_len() + f.unsent;
    let oll = usize::from(omem > 0);
    let tot_mem = super::client_eviction::client_memory(store, c, &f);
    let events = if omem > 0 { "rw" } else { "r" };
    let name = c.name.as_ref().map(|n| String::from_utf8_lossy(n));
    // Redis 7.2's fields, after resp= as in 7.2's CLIENT LIST
    // (https://redis.io/docs/latest/commands/client-list/).
    let lib_name = c.lib_name.as_ref().map(|n| String::from_utf8_lossy(n));
    let lib_ver = c.lib_ver.as_ref().map(|n| String::from_utf8_lossy(n));
    let cmd = if mine {
        me.cmd.as_str()
    } else {
        c.last_cmd.as_str()
    };
    let _ = writeln!(
        s,
        "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db={} sub={} psub={} ssub={} multi={} qbuf={} qbuf-free={} argv-mem={} multi-mem={} rbs={} rbp={} obl={} oll={} omem={} tot-mem={} events={} cmd={} user={} redir={} resp={} lib-name={} lib-ver={} tpkeys={} watchex={}",
        c.id,
        c.addr,
        c.laddr,
        c.fd,
        name.as_deref().unwrap_or(""),
        age,
        idle,
        flags,
        c.db,
        c.info.sub,
        c.info.psub,
        c.info.ssub,
        c.info.multi.map_or(-1, |n| n as i64),
        f.qbuf,
        f.qbuf_free,
        f.argv,
        c.info.multi_mem,
        f.rbs,
        rbp,
        obl,
        oll,
        omem,
        tot_mem,
        events,
        cmd,
        c.user,
        tracking.map_or(-1, |t| t.redirect.map_or(0, |r| r as i64)),
        c.resp,
        lib_name.as_deref().unwrap_or(""),
        lib_ver.as_deref().unwrap_or(""),
        store.ks.held_by(c.id),
        store.ks.watches.count_for(c.id),
    );
}

/// Another client's CLIENT LIST line without its newline (Redis's
/// catClientInfoString, for log lines such as client eviction's).
pub fn client_info_string(store: &Store, id: ClientId) -> String {
    let mut s = String::new();
    if let Some(c) = store.clients.get(&id) {
        let me = SelfView {
            id: 0,
            cmd: String::new(),
            qbuf: 0,
            qbuf_free: 0,
            argv_mem: 0,
            obl: 0,
            rbs: 0,
            close_after_reply: false,
        };
        client_line(&mut s, c, &me, crate::util::cmd_time_ms(), store);
        s.pop();
    }
    s
}

/// CLIENT LIST [TYPE type] | [ID id ...]
fn client_list(ctx: &mut Ctx, args: &[Bytes]) {
    let mut ty = None;
    let mut ids: Option<Vec<i64>> = None;
    if args.len() == 4 && eq_ic(&args[2], "type") {
        match type_by_name(&args[3]) {
            Some(t) => ty = Some(t),
            None => return unknown_type(ctx, &args[3]),
        }
    } else if args.len() > 3 && eq_ic(&args[2], "id") {
        let mut v = Vec::with_capacity(args.len() - 3);
        for a in &args[3..] {
            match crate::util::parse_i64(a) {
                Some(id) => v.push(id),
                None => return ctx.error("ERR Invalid client ID"),
            }
        }
        ids = Some(v);
    } else if args.len() != 2 {
        return ctx.error(SYNTAX);
    }
    let me = SelfView::new(ctx, args);
    let now = crate::util::cmd_time_ms();
    let mut s = String::new();
    match ids {
        // Listed in the order asked, like Redis.
        Some(ids) => {
            for id in ids {
                if let Some(c) = u64::try_from(id)
                    .ok()
                    .and_then(|i| ctx.store.clients.get(&i))
                {
                    client_line(&mut s, c, &me, now, ctx.store);
                }
            }
        }
        None => {
            for c in ctx.store.clients.values() {
                if ty.is_none_or(|t| type_of(c, &ctx.store.repl) == t) {
                    client_line(&mut s, c, &me, now, ctx.store);
                }
            }
        }
    }
    ctx.out.verbatim(s.as_bytes());
}

/// This connection's CLIENT LIST line (without the newline) while `cmd`
/// runs with `args`: what ACL LOG keeps as client-info.
pub fn client_info_line(ctx: &Ctx, args: &[Bytes], cmd: &str) -> String {
    let me = SelfView::running(ctx, args, cmd.to_string());
    let now = crate::util::cmd_time_ms();
    let mut s = String::new();
    if let Some(c) = ctx.store.clients.get(&ctx.conn.id) {
        client_line(&mut s, c, &me, now, ctx.store);
    }
    if s.ends_with('\n') {
        s.pop();
    }
    s
}

fn client_info(ctx: &mut Ctx, args: &[Bytes]) {
    let me = SelfView::new(ctx, args);
    let now = crate::util::cmd_time_ms();
    let mut s = String::new();
    if let Some(c) = ctx.store.clients.get(&ctx.conn.id) {
        client_line(&mut s, c, &me, now, ctx.store);
    }
    ctx.out.verbatim(s.as_bytes());
}

/// Which clients CLIENT KILL's filters select.
#[derive(Default)]
struct KillFilter {
    addr: Option<Bytes>,
    laddr: Option<Bytes>,
    ty: Option<ClientType>,
    id: Option<u64>,
    user: Option<String>,
    skipme: bool,
}

impl KillFilter {
    fn matches(
        &self,
        c: &ClientHandle,
        me: ClientId,
        repl: &crate::replication::Replication,
    ) -> bool {
        self.addr.as_ref().is_none_or(|a| c.addr.as_bytes() == a)
            && self.laddr.as_ref().is_none_or(|a| c.laddr.as_bytes() == a)
            && self.ty.is_none_or(|t| type_of(c, repl) == t)
            && self.id.is_none_or(|id| c.id == id)
            && self.user.as_ref().is_none_or(|u| c.user == *u)
            && !(self.skipme && c.id == me)
    }
}

/// CLIENT KILL addr:port | CLIENT KILL <filter> <value> [...]
fn client_kill(ctx: &mut Ctx, args: &[Bytes]) {
    let old_form = args.len() == 3;
    let mut f = KillFilter {
        skipme: true,
        ..Default::default()
    };
    if old_form {
        f.addr = Some(args[2].clone());
        f.skipme = false;
    } else {
        let mut i = 2;
        while i < args.len() {
            let Some(val) = args.get(i + 1) else {
                return ctx.error(SYNTAX);
            };
            let opt = &args[i];
            if eq_ic(opt, "id") {
                match crate::util::parse_i64(val) {
                    Some(id) if id >= 1 => f.id = Some(id as u64),
                    _ => return ctx.error("ERR client-id should be greater than 0"),
                }
            } else if eq_ic(opt, "type") {
                match type_by_name(val) {
                    Some(t) => f.ty = Some(t),
                    None => return unknown_type(ctx, val),
                }
            } else if eq_ic(opt, "addr") {
                f.addr = Some(val.clone());
            } else if eq_ic(opt, "laddr") {
                f.laddr = Some(val.clone());
            } else if eq_ic(opt, "user") {
                if ctx.store.acl.users.get(val).is_none() {
                    let u = String::from_utf8_lossy(val);
                    return ctx.error(&format!("ERR No such user '{u}'"));
                }
                f.user = Some(String::from_utf8_lossy(val).into_owned());
            } else if eq_ic(opt, "skipme") {
                if eq_ic(val, "yes") {
                    f.skipme = true;
                } else if eq_ic(val, "no") {
                    f.skipme = false;
                } else {
                    return ctx.error(SYNTAX);
                }
            } else {
                return ctx.error(SYNTAX);
            }
            i += 2;
        }
    }
    let me = ctx.conn.id;
    let victims: Vec<ClientId> = ctx
        .store
        .clients
        .values()
        // One killed before and not yet gone counts no more: Redis frees
        // it at once (its connection task here ends a moment later).
        .filter(|c| !c.signal.is_killed() && f.matches(c, me, &ctx.store.repl))
        .map(|c| c.id)
        .collect();
    let mut close_me = false;
    for &id in &victims {
        if id == me {
            close_me = true;
        } else {
            ctx.store.kill_client(id);
        }
    }
    if old_form {
        if victims.is_empty() {
            ctx.error("ERR No such client");
        } else {
            ctx.out.ok();
        }
    } else {
        ctx.out.int(victims.len() as i64);
    }
    // Only after the reply is queued, like Redis's CLOSE_AFTER_REPLY.
    if close_me {
        ctx.conn.close_after_reply = true;
    }
}

/// CLIENT HELP lines in Redis 7.0.15's order; a subcommand's lines appear
/// only when it is in the table.
const CLIENT_HELP: &[(&str, &[&str])] = &[
    (
        "caching",
        &[
            "CACHING (YES|NO)",
            "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
        ],
    ),
    (
        "getredir",
        &[
            "GETREDIR",
            "    Return the client ID we are redirecting to when tracking is enabled.",
        ],
    ),
    (
        "getname",
        &["GETNAME", "    Return the name of the current connection."],
    ),
    (
        "id",
        &["ID", "    Return the ID of the current connection."],
    ),
    (
        "info",
        &[
            "INFO",
            "    Return information about the current client connection.",
        ],
    ),
    (
        "kill",
        &[
            "KILL <ip:port>",
            "    Kill connection made from <ip:port>.",
            "KILL <option> <value> [<option> <value> [...]]",
            "    Kill connections. Options are:",
            "    * ADDR (<ip:port>|<unixsocket>:0)",
            "      Kill connections made from the specified address",
            "    * LADDR (<ip:port>|<unixsocket>:0)",
            "      Kill connections made to specified local address",
            "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
            "      Kill connections by type.",
            "    * USER <username>",
            "      Kill connections authenticated by <username>.",
            "    * SKIPME (YES|NO)",
            "      Skip killing current connection (default: yes).",
        ],
    ),
    (
        "list",
        &[
            "LIST [options ...]",
            "    Return information about client connections. Options:",
            "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
            "      Return clients of specified type.",
        ],
    ),
    (
        "unpause",
        &[
            "UNPAUSE",
            "    Stop the current client pause, resuming traffic.",
        ],
    ),
    (
        "pause",
        &[
            "PAUSE <timeout> [WRITE|ALL]",
            "    Suspend all, or just write, clients for <timeout> milliseconds.",
        ],
    ),
    (
        "reply",
        &[
            "REPLY (ON|OFF|SKIP)",
            "    Control the replies sent to the current connection.",
        ],
    ),
    (
        "setname",
        &[
            "SETNAME <name>",
            "    Assign the name <name> to the current connection.",
        ],
    ),
    // Redis 7.2's CLIENT HELP text for SETINFO, in its place after SETNAME.
    (
        "setinfo",
        &[
            "SETINFO <option> <value>",
            "    Set client meta attr. Options are:",
            "    * LIB-NAME: the client lib name.",
            "    * LIB-VER: the client lib version.",
        ],
    ),
    (
        "unblock",
        &[
            "UNBLOCK <clientid> [TIMEOUT|ERROR]",
            "    Unblock the specified blocked client.",
        ],
    ),
    (
        "tracking",
        &[
            "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
            "         [OPTIN] [OPTOUT] [NOLOOP]",
            "    Control server assisted client side caching.",
        ],
    ),
    (
        "trackinginfo",
        &[
            "TRACKINGINFO",
            "    Report tracking status for the current connection.",
        ],
    ),
    (
        "no-evict",
        &[
            "NO-EVICT (ON|OFF)",
            "    Protect current client connection from eviction.",
        ],
    ),
    // Redis 7.2's CLIENT HELP text for NO-TOUCH, after NO-EVICT.
    (
        "no-touch",
        &[
            "NO-TOUCH (ON|OFF)",
            "    Will not touch LRU/LFU stats when this mode is on.",
        ],
    ),
];

/// CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p ...] [BCAST] [OPTIN]
/// [OPTOUT] [NOLOOP], with Redis's checks in Redis's order.
fn client_tracking(ctx: &mut Ctx, args: &[Bytes]) {
    let mut mode = crate::tracking::Mode::default();
    let mut prefixes: Vec<Bytes> = Vec::new();
    let mut j = 3;
    while j < args.len() {
        let a = &args[j];
        let more = j + 1 < args.len();
        if a.eq_ignore_ascii_case(b"redirect") && more {
            j += 1;
            if mode.redirect.is_some() {
                return ctx.error("ERR A client can only redirect to a single other client");
            }
            let Some(id) = arg_i64(ctx, &args[j]) else {
                return;
            };
            if ctx.store.clients.get(&(id as ClientId)).is_none() || id <= 0 {
                return ctx.error("ERR The client ID you want redirect to does not exist");
            }
            mode.redirect = Some(id as ClientId);
        } else if a.eq_ignore_ascii_case(b"bcast") {
            mode.bcast = true;
        } else if a.eq_ignore_ascii_case(b"optin") {
            mode.optin = true;
        } else if a.eq_ignore_ascii_case(b"optout") {
            mode.optout = true;
        } else if a.eq_ignore_ascii_case(b"noloop") {
            mode.noloop = true;
        } else if a.eq_ignore_ascii_case(b"prefix") && more {
            j += 1;
            prefixes.push(Bytes::copy_from_slice(&args[j]));
        } else {
            return ctx.error(SYNTAX);
        }
        j += 1;
    }
    let id = ctx.conn.id;
    if args[2].eq_ignore_ascii_case(b"off") {
        ctx.store.tracking.disable(id);
        return ctx.out.ok();
    }
    if !args[2].eq_ignore_ascii_case(b"on") {
        return ctx.error(SYNTAX);
    }
    if !mode.bcast && !prefixes.is_empty() {
        return ctx.error("ERR PREFIX option requires BCAST mode to be enabled");
    }
    let old = ctx.store.tracking.mode(id).cloned();
    if let Some(old) = &old {
        if old.bcast != mode.bcast {
            return ctx.error("ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.");
        }
    }
    if mode.bcast && (mode.optin || mode.optout) {
        return ctx.error("ERR OPTIN and OPTOUT are not compatible with BCAST");
    }
    if mode.optin && mode.optout {
        return ctx.error("ERR You can't specify both OPTIN mode and OPTOUT mode");
    }
    if let Some(old) = &old {
        if (mode.optin && old.optout) || (mode.optout && old.optin) {
            return ctx.error("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.");
        }
    }
    if mode.bcast {
        let existing = old.map(|o| o.prefixes).unwrap_or_default();
        for (i, p) in prefixes.iter().enumerate() {
            let show = |b: &[u8]| String::from_utf8_lossy(crate::util::c_str(b)).into_owned();
            if let Some(e) = existing.iter().find(|e| crate::tracking::overlaps(e, p)) {
                return ctx.error(&format!("ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.", show(p), show(e)));
            }
            if let Some(q) = prefixes[i + 1..]
                .iter()
                .find(|q| crate::tracking::overlaps(p, q))
            {
                return ctx.error(&format!("ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.", show(p), show(q)));
            }
        }
    }
    mode.prefixes = prefixes.into_iter().collect();
    ctx.store.tracking.enable(id, mode);
    ctx.out.ok();
}

/// CLIENT CACHING YES|NO: whether the next command's keys are tracked
/// (YES under OPTIN, NO under OPTOUT).
fn client_caching(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(m) = ctx.store.tracking.mode(ctx.conn.id).cloned() else {
        return ctx.error("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled");
    };
    if args[2].eq_ignore_ascii_case(b"yes") {
        if !m.optin {
            return ctx.error(
                "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
            );
        }
    } else if args[2].eq_ignore_ascii_case(b"no") {
        if !m.optout {
            return ctx.error(
                "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
            );
        }
    } else {
        return ctx.error(SYNTAX);
    }
    if let Some(m) = ctx.store.tracking.mode_mut(ctx.conn.id) {
        m.caching = true;
    }
    ctx.out.ok();
}

/// CLIENT GETREDIR: -1 when not tracking, 0 without redirection.
fn client_getredir(ctx: &mut Ctx, _args: &[Bytes]) {
    let r = match ctx.store.tracking.mode(ctx.conn.id) {
        None => -1,
        Some(m) => m.redirect.map_or(0, |r| r as i64),
    };
    ctx.out.int(r);
}

/// CLIENT TRACKINGINFO: flags, redirect and prefixes.
fn client_trackinginfo(ctx: &mut Ctx, _args: &[Bytes]) {
    let m = ctx.store.tracking.mode(ctx.conn.id).cloned();
    ctx.out.map(3);
    ctx.out.bulk(b"flags");
    let mut flags: Vec<&str> = Vec::new();
    match &m {
        None => flags.push("off"),
        Some(m) => {
            // In Redis's order.
            for (on, name) in [
                (true, "on"),
                (m.bcast, "bcast"),
                (m.optin, "optin"),
                (m.optin && m.caching, "caching-yes"),
                (m.optout, "optout"),
                (m.optout && m.caching, "caching-no"),
                (m.noloop, "noloop"),
                (m.broken_redirect, "broken_redirect"),
            ] {
                if on {
                    flags.push(name);
                }
            }
        }
    }
    ctx.out.set(flags.len());
    for f in flags {
        ctx.out.bulk(f.as_bytes());
    }
    ctx.out.bulk(b"redirect");
    ctx.out.int(match &m {
        None => -1,
        Some(m) => m.redirect.map_or(0, |r| r as i64),
    });
    ctx.out.bulk(b"prefixes");
    let prefixes: Vec<Bytes> = m
        .map(|m| m.prefixes.into_iter().collect())
        .unwrap_or_default();
    ctx.out.array(prefixes.len());
    for p in prefixes {
        ctx.out.bulk(&p);
    }
}

/// CLIENT PAUSE timeout [WRITE|ALL]: postpones every command (ALL, the
/// default) or those that may write (WRITE) for `timeout` ms.
fn client_pause(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len() > 4 {
        return subcommand_syntax_error(ctx.out, args);
    }
    let Some(ms) = crate::util::parse_i64(&args[2]) else {
        return ctx.error("ERR timeout is not an integer or out of range");
    };
    if ms < 0 {
        return ctx.error("ERR timeout is negative");
    }
    let all = match args.get(3) {
        None => true,
        Some(m) if m.eq_ignore_ascii_case(b"all") => true,
        Some(m) if m.eq_ignore_ascii_case(b"write") => false,
        _ => return ctx.error("ERR CLIENT PAUSE mode must be WRITE or ALL"),
    };
    let until = crate::util::now_ms().saturating_add(ms);
    ctx.store.pause(until, all);
    ctx.out.ok();
}

/// CLIENT UNPAUSE: ends a pause; postponed commands run.
fn client_unpause(ctx: &mut Ctx, _args: &[Bytes]) {
    ctx.store.unpause();
    ctx.out.ok();
}

/// CLIENT UNBLOCK id [TIMEOUT|ERROR]: ends another client's blocking
/// command (not its lock waits) as if it timed out, or with an error.
fn client_unblock(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len() > 4 {
        return subcommand_syntax_error(ctx.out, args);
    }
    let Some(id) = arg_i64(ctx, &args[2]) else {
        return;
    };
    let as_error = match args.get(3) {
        None => false,
        Some(a) if args.len() == 4 && eq_ic(a, "timeout") => false,
        Some(a) if args.len() == 4 && eq_ic(a, "error") => true,
        Some(_) => return ctx.error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"),
    };
    let Ok(id) = ClientId::try_from(id) else {
        return ctx.out.int(0);
    };
    let Some(wid) = ctx.store.ks.blocking.blocked_command(id) else {
        return ctx.out.int(0);
    };
    // A SHUTDOWN waiting for its replicas has no timeout to end it with.
    if let Some(crate::blocking::Wait::Command {
        on_timeout: crate::blocking::TimeoutReply::Shutdown,
        ..
    }) = ctx.store.ks.blocking.get(wid).map(|w| &w.wait)
    {
        return ctx.out.int(0);
    }
    if as_error {
        let unblocked =
            ctx.store
                .fail_blocked(wid, "UNBLOCKED client unblocked via CLIENT UNBLOCK", false);
        return ctx.out.int(unblocked as i64);
    }
    let Some(w) = ctx.store.ks.blocking.remove(wid) else {
        return ctx.out.int(0);
    };
    let resp = ctx.store.clients.get(&id).map(|c| c.resp);
    if let (
        Some(resp),
        crate::blocking::Wait::Command {
            on_timeout, silent, ..
        },
    ) = (resp, &w.wait)
    {
        let mut reply = crate::resp::Out::new(resp == 3);
        super::timeout_reply(ctx.store, id, &mut reply, *on_timeout);
        let Some(c) = ctx.store.clients.get(&id) else {
            return ctx.out.int(1);
        };
        // Under CLIENT REPLY OFF/SKIP the client is resumed without it.
        if !silent {
            c.signal.queue(&reply.buf);
        }
        c.signal.wake.notify_one();
    }
    ctx.out.int(1);
}

fn client_help(ctx: &mut Ctx, _args: &[Bytes]) {
    let mut lines = vec!["CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"];
    for (sub, text) in CLIENT_HELP {
        if CLIENT_SUBS.iter().any(|s| s.name == *sub) {
            lines.extend_from_slice(text);
        }
    }
    lines.extend_from_slice(&["HELP", "    Prints this help."]);
    ctx.out.array(lines.len());
    for l in lines {
        ctx.out.simple(l);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_covers_table() {
        for s in CLIENT_SUBS {
            assert!(
                s.name == "help" || CLIENT_HELP.iter().any(|(n, _)| *n == s.name),
                "no help for {}",
                s.name
            );
        }
    }

    #[test]
    fn client_types() {
        assert_eq!(type_by_name(b"REPLICA"), Some(ClientType::Replica));
        assert_eq!(type_by_name(b"slave"), Some(ClientType::Replica));
        assert_eq!(type_by_name(b"Normal"), Some(ClientType::Normal));
        assert_eq!(type_by_name(b"x"), None);
    }
}
