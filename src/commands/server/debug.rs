//! DEBUG (SLEEP, SET-ACTIVE-EXPIRE, POPULATE, DIGEST, RELOAD, LOADAOF,
//! OBJECT, PROTOCOL, CHANGE-REPL-ID, STRINGMATCH-TEST,
//! SET-DISABLE-DENY-SCRIPTS, QUICKLIST-PACKED-THRESHOLD, HELP), OBJECT and
//! MEMORY USAGE.
//!
//! Reaches state only through `Ctx`; saves and loads go through
//! `crate::persist` (`save`, `read_snapshot`, `load_bytes`,
//! `load_aof_at_start`): it opens no file itself. DEBUG OBJECT's payload
//! length is `persist::rdb::value`'s encoding, not its own.

use bytes::Bytes;

use super::*;
use crate::db::ValueRef;

const OBJ_ACL: &[&str] = &["keyspace", "read", "slow"];

pub static OBJECT_SUBS: &[Spec] = &[
    spec(
        "encoding",
        3,
        READONLY,
        (2, 2, 1),
        "generic",
        "2.2.3",
        "Inspect the internal encoding of a Redis object",
        OBJ_ACL,
        object_encoding,
    ),
    spec(
        "refcount",
        3,
        READONLY,
        (2, 2, 1),
        "generic",
        "2.2.3",
        "Get the number of references to the value of the key",
        OBJ_ACL,
        object_refcount,
    ),
    spec(
        "idletime",
        3,
        READONLY,
        (2, 2, 1),
        "generic",
        "2.2.3",
        "Get the time since a Redis object was last accessed",
        OBJ_ACL,
        object_idletime,
    ),
    spec(
        "freq",
        3,
        READONLY,
        (2, 2, 1),
        "generic",
        "4.0.0",
        "Get the logarithmic access frequency counter of a Redis object",
        OBJ_ACL,
        object_freq,
    ),
    spec(
        "help",
        2,
        LOADING | STALE,
        (0, 0, 0),
        "generic",
        "6.2.0",
        "Show helpful text about the different subcommands",
        &["keyspace", "slow"],
        object_help,
    ),
];

/// Redis's `atoi`: optional spaces and sign, then digits; anything else stops.
fn atoi(b: &[u8]) -> i64 {
    let s = String::from_utf8_lossy(b);
    let s = s.trim_start();
    let (neg, d) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut v: i64 = 0;
    for c in d.bytes().take_while(u8::is_ascii_digit) {
        v = v.wrapping_mul(10).wrapping_add((c - b'0') as i64);
    }
    if neg {
        -v
    } else {
        v
    }
}

/// C's `strtod` on a prefix: the longest leading part that is a number, else 0.
fn strtod_prefix(b: &[u8]) -> f64 {
    let s = String::from_utf8_lossy(b);
    let s = s.trim_start();
    let mut best = 0.0;
    for end in 1..=s.len() {
        if !s.is_char_boundary(end) {
            continue;
        }
        let p = &s[..end];
        if p.ends_with(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E') {
            break;
        }
        if let Ok(v) = p.parse::<f64>() {
            best = v;
        }
    }
    if best.is_finite() {
        best
    } else {
        0.0
    }
}

/// getPositiveLongFromObjectOrReply with Redis's default message.
fn positive(ctx: &mut Ctx, a: &[u8]) -> Option<i64> {
    match crate::util::parse_i64(a) {
        Some(v) if v >= 0 => Some(v),
        _ => {
            ctx.error("ERR value is out of range, must be positive");
            None
        }
    }
}

pub fn debug(ctx: &mut Ctx, args: &[Bytes]) {
    let sub = &args[1];
    let n = args.len();
    if n == 2 && eq_ic(sub, "help") {
        return reply_help(
            ctx,
            "DEBUG",
            &[
                "CHANGE-REPL-ID",
                "    Change the replication IDs of the instance.",
                "    Dangerous: should be used only for testing the replication subsystem.",
                "DIGEST",
                "    Output a hex signature representing the current DB content.",
                "DIGEST-VALUE <key> [<key> ...]",
                "    Output a hex signature of the values of all the specified keys.",
                "OBJECT <key>",
                "    Show low level info about `key` and associated value.",
                "POPULATE <count> [<prefix>] [<size>]",
                "    Create <count> string keys named key:<num>. If <prefix> is specified then",
                "    it is used instead of the 'key' prefix. These are not propagated to",
                "    replicas. Cluster slots are not respected so keys not belonging to the",
                "    current node can be created in cluster mode.",
                "PROTOCOL <type>",
                "    Reply with a test value of the specified type. <type> can be: string,",
                "    integer, double, bignum, null, array, set, map, attrib, push, verbatim,",
                "    true, false.",
                "RELOAD [option ...]",
                "    Save the RDB on disk and reload it back to memory. Valid <option> values:",
                "    * MERGE: conflicting keys will be loaded from RDB.",
                "    * NOFLUSH: the existing database will not be removed before load, but",
                "      conflicting keys will generate an exception and kill the server.",
                "    * NOSAVE: the database will be loaded from an existing RDB file.",
                "    Examples:",
                "    * DEBUG RELOAD: verify that the server is able to persist, flush and reload",
                "      the database.",
                "    * DEBUG RELOAD NOSAVE: replace the current database with the contents of an",
                "      existing RDB file.",
                "    * DEBUG RELOAD NOSAVE NOFLUSH MERGE: add the contents of an existing RDB",
                "      file to the database.",
                "SET-ACTIVE-EXPIRE <0|1>",
                "    Setting it to 0 disables expiring keys in background when they are not",
                "    accessed (otherwise the Redis behavior). Setting it to 1 reenables back the",
                "    default.",
                "QUICKLIST-PACKED-THRESHOLD <size>",
                "    Sets the threshold for elements to be inserted as plain vs packed nodes",
                "    Default value is 1GB, allows values up to 4GB. Setting to 0 restores to default.",
                "SLEEP <seconds>",
                "    Stop the server for <seconds>. Decimals allowed.",
                "STRINGMATCH-TEST",
                "    Run a fuzz tester against the stringmatchlen() function.",
            ],
        );
    }
    if n == 3 && eq_ic(sub, "sleep") {
        // Like Redis, the whole server sleeps: the store lock is held.
        let secs = strtod_prefix(&args[2]);
        if secs > 0.0 {
            std::thread::sleep(std::time::Duration::from_micros((secs * 1e6) as u64));
        }
        return ctx.out.ok();
    }
    if n == 3 && eq_ic(sub, "set-active-expire") {
        ctx.store.ks.set_active_expire(atoi(&args[2]) != 0);
        return ctx.out.ok();
    }
    if n == 2 && eq_ic(sub, "digest") {
        let d = crate::db::digest::of_dataset(ctx.store.ks.dbs().iter());
        return ctx.out.simple(&crate::db::digest::hex(&d));
    }
    if eq_ic(sub, "digest-value") {
        ctx.out.array(n - 2);
        for key in &args[2..] {
            let d = crate::db::digest::of_value(ctx.store.ks.db(ctx.conn.db), key);
            ctx.out.simple(&crate::db::digest::hex(&d));
        }
        return;
    }
    if eq_ic(sub, "reload") {
        return reload(ctx, args);
    }
    if n == 2 && eq_ic(sub, "loadaof") {
        return loadaof(ctx);
    }
    if (3..=5).contains(&n) && eq_ic(sub, "populate") {
        return populate(ctx, args);
    }
    if n == 3 && eq_ic(sub, "object") {
        return debug_object(ctx, &args[2]);
    }
    if n == 3 && eq_ic(sub, "protocol") {
        return protocol(ctx.out, &args[2]);
    }
    if n == 2 && eq_ic(sub, "change-repl-id") {
        tracing::warn!("Changing replication IDs after receiving DEBUG change-repl-id");
        ctx.store.change_replid();
        return ctx.out.ok();
    }
    if n == 2 && eq_ic(sub, "stringmatch-test") {
        stringmatch_fuzz();
        return ctx
            .out
            .simple("Apparently Redis did not crash: test passed");
    }
    if n == 3 && eq_ic(sub, "quicklist-packed-threshold") {
        // Redis's memtoull: "" is 0 (the default again).
        let sz = std::str::from_utf8(&args[2]).ok().and_then(|a| {
            if a.is_empty() {
                Some(0)
            } else {
                crate::config::parse_memory(a)
            }
        });
        return match sz {
            Some(sz) if crate::types::list::set_packed_threshold(sz) => ctx.out.ok(),
            _ => {
                ctx.error("ERR argument must be a memory value bigger than 1 and smaller than 4gb")
            }
        };
    }
    if n == 3 && eq_ic(sub, "set-disable-deny-scripts") {
        ctx.store.script_disable_deny = atoi(&args[2]) != 0;
        return ctx.out.ok();
    }
    subcommand_syntax_error(ctx.out, args);
}

/// DEBUG OBJECT: Redis's one-line description of a key's value (its
/// address, refcount, encoding, RDB payload length, LRU stamp and idle
/// seconds; for lists the quicklist's figures), without touching the key.
fn debug_object(ctx: &mut Ctx, key: &[u8]) {
    let (compress, fill) = {
        let c = ctx.store.config();
        (c.rdbcompression, c.list_max_listpack_size)
    };
    let refcount = refcount_of(ctx, key);
    let db = ctx.db();
    let Some((_, lru, _)) = db.meta(key) else {
        return ctx.error(NO_SUCH_KEY);
    };
    let encoding = db.encoding(key).unwrap_or("raw");
    let Some(v) = db.peek(key) else {
        return ctx.error(NO_SUCH_KEY);
    };
    let addr = match v {
        ValueRef::Str(s) => s.as_ptr() as usize,
        ValueRef::Obj(o) => o as *const _ as usize,
    };
    // The payload without the type byte, as rdbSavedObjectLen counts it.
    let mut payload = Vec::new();
    crate::persist::rdb::value::save(&mut payload, v, compress, fill);
    let serialized = payload.len().saturating_sub(1);
    let mut extra = String::new();
    if let ValueRef::Obj(crate::types::Value::List(l)) = v {
        let nodes = l.node_count().max(1);
        extra = format!(
            " ql_nodes:{} ql_avg_node:{:.2} ql_listpack_max:{} ql_compressed:{} ql_uncompressed_size:{}",
            l.node_count(),
            l.len() as f64 / nodes as f64,
            fill,
            // As Redis: whether the list has a compress depth, not whether
            // any node is compressed now.
            u8::from(l.compress_depth() != 0),
            l.packed_bytes(),
        );
    }
    ctx.out.simple(&format!(
        "Value at:0x{addr:x} refcount:{refcount} encoding:{encoding} serializedlength:{serialized} lru:{lru} lru_seconds_idle:{}{extra}",
        crate::util::idle_seconds(lru)
    ));
}

/// DEBUG PROTOCOL: one reply of each RESP type, as Redis writes them (the
/// RESP2 fallbacks where RESP2 lacks the type).
fn protocol(out: &mut Out, name: &[u8]) {
    let is = |s: &str| eq_ic(name, s);
    if is("string") {
        out.bulk(b"Hello World");
    } else if is("integer") {
        out.int(12345);
    } else if is("double") {
        out.resp3_text(b',', b"3.141");
    } else if is("bignum") {
        out.resp3_text(b'(', b"1234567999999999999999999999999999999");
    } else if is("null") {
        out.null();
    } else if is("array") || is("set") {
        if is("set") {
            out.set(3);
        } else {
            out.array(3);
        }
        for j in 0..3 {
            out.int(j);
        }
    } else if is("map") {
        out.map(3);
        for j in 0..3 {
            out.int(j);
            out.boolean(j == 1);
        }
    } else if is("attrib") {
        if out.resp3 {
            out.raw(b"|1\r\n");
            out.bulk(b"key-popularity");
            out.array(2);
            out.bulk(b"key:123");
            out.int(90);
        }
        out.bulk(b"Some real reply following the attribute");
    } else if is("push") {
        if !out.resp3 {
            return out.error("ERR RESP2 is not supported by this command");
        }
        out.push(2);
        out.bulk(b"server-cpu-usage");
        out.int(42);
        out.bulk(b"Some real reply following the push reply");
    } else if is("true") || is("false") {
        out.boolean(is("true"));
    } else if is("verbatim") {
        out.verbatim(b"This is a verbatim\nstring");
    } else {
        out.error("ERR Wrong protocol type name. Please use one of the following: string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false");
    }
}

/// DEBUG STRINGMATCH-TEST: Redis's fuzz test of its glob matcher, run on
/// latchkey's (`crate::glob`): random patterns over random strings, which
/// must all return (bounded: 100,000 pairs).
fn stringmatch_fuzz() {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    let alphabet = b"*?[]^-\\abc";
    for _ in 0..100_000 {
        let plen = rng.gen_range(0..32);
        let slen = rng.gen_range(0..32);
        let pat: Vec<u8> = (0..plen)
            .map(|_| alphabet[rng.gen_range(0..alphabet.len())])
            .collect();
        let s: Vec<u8> = (0..slen).map(|_| rng.gen::<u8>()).collect();
        std::hint::black_box(crate::glob::matches(&pat, &s, false));
    }
}

/// DEBUG LOADAOF: the AOF written out, the databases emptied, the AOF
/// loaded back (base and increments), as Redis's.
fn loadaof(ctx: &mut Ctx) {
    let on = ctx.store.config().appendonly;
    crate::persist::bgsave_abort(ctx.store);
    crate::persist::aof_stop(ctx.store);
    super::empty_all(ctx);
    ctx.store.drain_events(Some(ctx.conn.id));
    if let Err(e) =
        crate::persist::load_aof_at_start(ctx.store, &mut crate::commands::replay::aof_client())
    {
        tracing::warn!("DEBUG LOADAOF: {e}");
        return ctx.error("ERR Error loading the AOF, check server logs.");
    }
    if !on {
        crate::persist::aof_stop(ctx.store);
    }
    // Never logged itself (a replay would load again, and again).
    ctx.conn.rewrite = Some(Vec::new());
    tracing::warn!("Append Only File loaded by DEBUG LOADAOF");
    ctx.out.ok();
}

/// DEBUG RELOAD [NOSAVE] [NOFLUSH] [MERGE]: SAVE, empty the databases,
/// load the file back. A key both in the dataset and the file (NOFLUSH)
/// is an error unless MERGE, where the file's wins; Redis would exit.
fn reload(ctx: &mut Ctx, args: &[Bytes]) {
    let (mut save, mut flush, mut merge) = (true, true, false);
    for a in &args[2..] {
        if eq_ic(a, "merge") {
            merge = true;
        } else if eq_ic(a, "nosave") {
            save = false;
        } else if eq_ic(a, "noflush") {
            flush = false;
        } else {
            return ctx
                .error("ERR DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options.");
        }
    }
    // A background save's image is of data about to be replaced.
    crate::persist::bgsave_abort(ctx.store);
    if save && crate::persist::save(ctx.store).is_err() {
        return ctx.error("ERR");
    }
    let Ok(bytes) = crate::persist::read_snapshot(ctx.store.config()) else {
        return ctx.error("ERR Error trying to load the RDB dump, check server logs.");
    };
    if flush {
        super::empty_all(ctx);
    }
    if let Err(e) = crate::persist::load_bytes(ctx.store, &bytes, merge) {
        tracing::warn!("DEBUG RELOAD: {e}");
        return ctx.error("ERR Error trying to load the RDB dump, check server logs.");
    }
    // Not logged: a replay must not load a snapshot in the middle.
    ctx.conn.rewrite = Some(Vec::new());
    tracing::warn!("DB reloaded by DEBUG RELOAD");
    ctx.out.ok();
}

/// DEBUG POPULATE count [prefix] [size], exactly as Redis 7.0: keys
/// "prefix:N" (at most 127 bytes), values "value:N" cut or zero-padded to
/// `size`, existing keys left alone.
fn populate(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(count) = positive(ctx, &args[2]) else {
        return;
    };
    let size = if args.len() == 5 {
        match positive(ctx, &args[4]) {
            Some(v) => v as usize,
            None => return,
        }
    } else {
        0
    };
    let prefix: &[u8] = if args.len() >= 4 { &args[3] } else { b"key" };
    let mut key = Vec::with_capacity(prefix.len() + 21);
    let mut val = Vec::with_capacity(size.max(26));
    let mut num = itoa::Buffer::new();
    for j in 0..count {
        key.clear();
        key.extend_from_slice(prefix);
        key.push(b':');
        key.extend_from_slice(num.format(j).as_bytes());
        key.truncate(127);
        let k = Bytes::copy_from_slice(&key);
        let db = ctx.db();
        if db.exists(&k) {
            continue;
        }
        val.clear();
        val.extend_from_slice(b"value:");
        val.extend_from_slice(num.format(j).as_bytes());
        if size > 0 {
            val.resize(size, 0);
        }
        db.set_str(&k, &val, false, false);
        // Hand the change events over in batches so a million keys do not
        // leave a million-entry event buffer behind.
        if j % 1024 == 1023 {
            crate::commands::settle(ctx.store, Some(ctx.conn.id));
        }
    }
    ctx.out.ok();
}

/// The key's value for OBJECT, counting a keyspace hit or miss without
/// touching its access time (Redis's LOOKUP_NOTOUCH); replies null if absent.
fn object_lookup<'a>(ctx: &'a mut Ctx, key: &[u8]) -> Option<ValueRef<'a>> {
    let (db, out) = ctx.db_out();
    let v = db.get_notouch(key);
    if v.is_none() {
        out.null();
    }
    v
}

fn object_encoding(ctx: &mut Ctx, args: &[Bytes]) {
    if object_lookup(ctx, &args[2]).is_none() {
        return;
    }
    match ctx.db().encoding(&args[2]) {
        Some(e) => ctx.out.bulk(e.as_bytes()),
        None => ctx.out.null(),
    }
}

fn object_refcount(ctx: &mut Ctx, args: &[Bytes]) {
    if object_lookup(ctx, &args[2]).is_none() {
        return;
    }
    let n = refcount_of(ctx, &args[2]);
    ctx.out.int(n);
}

/// Redis shares the integers 0..9999 (refcount INT_MAX); others are unshared.
fn refcount_of(ctx: &mut Ctx, key: &[u8]) -> i64 {
    let db = ctx.db();
    let shared = matches!(db.peek(key), Some(ValueRef::Str(s))
        if crate::util::parse_i64(s).is_some_and(|v| (0..10000).contains(&v)));
    if shared && db.encoding(key) == Some("int") {
        i32::MAX as i64
    } else {
        1
    }
}

fn object_idletime(ctx: &mut Ctx, args: &[Bytes]) {
    if object_lookup(ctx, &args[2]).is_none() {
        return;
    }
    if ctx.db().settings.access.policy.is_lfu() {
        return ctx.error("ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.");
    }
    match ctx.db().meta(&args[2]) {
        Some((_, lru, _)) => ctx.out.int(crate::util::idle_seconds(lru) as i64),
        None => ctx.out.null(),
    }
}

/// The LFU counter of a key, only under an LFU `maxmemory-policy` (the
/// entry's stamp holds the LRU clock otherwise), as Redis.
fn object_freq(ctx: &mut Ctx, args: &[Bytes]) {
    if object_lookup(ctx, &args[2]).is_none() {
        return;
    }
    let access = ctx.db().settings.access;
    if !access.policy.is_lfu() {
        return ctx.error("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.");
    }
    match ctx.db().meta(&args[2]) {
        Some((_, stamp, _)) => ctx
            .out
            .int(crate::db::evict::frequency(&access, stamp) as i64),
        None => ctx.out.null(),
    }
}

fn object_help(ctx: &mut Ctx, _args: &[Bytes]) {
    reply_help(
        ctx,
        "OBJECT",
        &[
            "ENCODING <key>",
            "    Return the kind of internal representation used in order to store the value",
            "    associated with a <key>.",
            "FREQ <key>",
            "    Return the access frequency index of the <key>. The returned integer is",
            "    proportional to the logarithm of the recent access frequency of the key.",
            "IDLETIME <key>",
            "    Return the idle time of the <key>, that is the approximated number of",
            "    seconds elapsed since the last access to the key.",
            "REFCOUNT <key>",
            "    Return the number of references of the value associated with the specified",
            "    <key>.",
        ],
    );
}

/// MEMORY USAGE key [SAMPLES count]. Strings are measured whole, so SAMPLES
/// is validated and otherwise has nothing to sample.
pub(super) fn memory_usage(ctx: &mut Ctx, args: &[Bytes]) {
    let mut j = 3;
    while j < args.len() {
        if eq_ic(&args[j], "samples") && j + 1 < args.len() {
            let Some(n) = arg_i64(ctx, &args[j + 1]) else {
                return;
            };
            if n < 0 {
                return ctx.error(SYNTAX);
            }
            j += 2;
        } else {
            return ctx.error(SYNTAX);
        }
    }
    match ctx.db().memory_usage(&args[2]) {
        Some(n) => ctx.out.int(n as i64),
        None => ctx.out.null(),
    }
}

pub(super) fn memory_help(ctx: &mut Ctx, _args: &[Bytes]) {
    reply_help(
        ctx,
        "MEMORY",
        &[
            "DOCTOR",
            "    Return memory problems reports.",
            "MALLOC-STATS",
            "    Return internal statistics report from the memory allocator.",
            "PURGE",
            "    Attempt to purge dirty pages for reclamation by the allocator.",
            "STATS",
            "    Return information about the memory usage of the server.",
            "USAGE <key> [SAMPLES <count>]",
            "    Return memory in bytes used by <key> and its value. Nested values are",
            "    sampled up to <count> times (default: 5, 0 means sample all).",
        ],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_number_prefixes() {
        assert_eq!(atoi(b"1"), 1);
        assert_eq!(atoi(b" -2x"), -2);
        assert_eq!(atoi(b"abc"), 0);
        assert_eq!(strtod_prefix(b"0.5"), 0.5);
        assert_eq!(strtod_prefix(b"abc"), 0.0);
        assert_eq!(strtod_prefix(b"1.5s"), 1.5);
        assert_eq!(strtod_prefix(b"2e"), 2.0);
    }
}
