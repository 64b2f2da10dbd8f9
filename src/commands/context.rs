//! The context a command runs in: the connection's own state kept outside
//! the store (`ConnState`) and the per-call context handed to every handler
//! (`Ctx`: the store, the connection, the reply buffer).
//!
//! Holds state and runs nothing: must not admit, dispatch or serve commands
//! (`admission`, `dispatch` and `waiters` act on these types).

use bytes::Bytes;

use super::multi;
use super::table::Spec;
use crate::blocking::{TimeoutReply, WaitId};
use crate::db::Db;
use crate::resp::Out;
use crate::server::{ClientId, Store};

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
    /// What REPLCONF told before SYNC/PSYNC, and whether they made this
    /// connection a replica (its task then runs the link).
    pub replica: crate::replication::Hello,
    /// Pushes the running command caused for this connection go before
    /// its reply instead of after it (WATCHEX: they precede its state).
    pub pushes_first: bool,
    /// The running command's reply is (un)subscribe confirmations, which
    /// Redis writes as pushes (CLIENT_PUSHING): CLIENT REPLY OFF and SKIP
    /// do not drop them.
    pub reply_pushed: bool,
    /// A script's own client: the keys its command declared, which a
    /// tracking caller's script reads make it remember (empty when the
    /// caller does not track).
    pub script_keys: Vec<Bytes>,
    /// The query buffer while this batch runs: bytes held, free capacity
    /// (CLIENT LIST `qbuf`, `qbuf-free`); set by the connection loop.
    pub qbuf: usize,
    pub qbuf_free: usize,
    /// Wake-ups and queued pushes for this connection (shared with its
    /// `ClientHandle`).
    pub signal: std::sync::Arc<crate::server::ClientSignal>,
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
    /// Runs what it is given without the checks made for clients (Redis's
    /// mustObeyClient: the AOF's fake client), such as XADD's LIMIT
    /// without `~` that Redis's own rewrite writes.
    pub obey: bool,
    /// CLIENT NO-TOUCH ON (Redis 7.2): its commands, TOUCH excepted, leave
    /// keys' LRU/LFU stamps alone (the client table's `no_touch` shows it).
    pub no_touch: bool,
    /// The open transaction (MULTI until EXEC or DISCARD).
    pub multi: Option<multi::Transaction>,
    /// Commands the running command asks to be logged in its place (EXEC:
    /// the writes it ran); `call` returns them as its `Record::rewrite`.
    pub rewrite: Option<Vec<crate::effects::Logged>>,
    /// The AOF offset after this connection's last write (WAITAOF waits
    /// for an fsync to cover it; Redis's `woff`).
    pub woff: u64,
    /// What commands answered while a script was busy left for the store
    /// (applied before the connection's next command runs with it).
    pub later: Vec<Later>,
}

/// What a command answered while a script held the store (AUTH, HELLO,
/// DISCARD, a refused EXEC) changed that the store keeps: it learns it as
/// soon as it is free (`commands::apply_later`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Later {
    /// The connection runs as this user (the client table shows it).
    User(Bytes),
    /// HELLO SETNAME (None: cleared).
    Name(Option<Bytes>),
    /// HELLO's protocol version.
    Resp(u8),
    /// A failed AUTH: its ACL LOG entry.
    AuthFailed { args: Vec<Bytes>, user: Bytes },
    /// The transaction ended (DISCARD, EXEC refused): its watches go.
    Unwatched,
    /// WATCH: these keys of `db`, dirty at once if the keyspace changed
    /// since (`dirty` was its change count then).
    Watch {
        db: usize,
        keys: Vec<Bytes>,
        dirty: u64,
    },
    /// RESET: the store's part of it.
    Reset,
}

/// A blocking command's request to wait for `keys` (of the current database).
#[derive(Debug)]
pub struct BlockRequest {
    pub keys: Vec<Bytes>,
    /// Absolute deadline in ms; None waits forever.
    pub deadline: Option<i64>,
    pub on_timeout: TimeoutReply,
    /// The command to run again when served, when it is not the one that
    /// blocked (XREAD's `$` resolved to an ID).
    pub again: Option<Vec<Bytes>>,
    /// Run it again when the key is deleted too (XREADGROUP answers that
    /// the stream is gone).
    pub when_gone: bool,
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
            replica: Default::default(),
            pushes_first: false,
            reply_pushed: false,
            script_keys: Vec::new(),
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
            obey: false,
            no_touch: false,
            multi: None,
            rewrite: None,
            woff: 0,
            later: Vec::new(),
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
