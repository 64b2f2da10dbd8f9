//! Generic key commands (Redis's db.c and expire.c).
//!
//! Reaches the keyspace only through `Ctx`; DUMP/RESTORE's bytes are
//! `crate::persist::rdb::payload`'s. Changes go through `Db`'s methods.

use bytes::Bytes;

use super::Pushes;
use super::*;
use crate::util::{c_str, cmd_time_ms, eq_ic, parse_i64};

const KEYSPACE_WRITE: &[&str] = &["keyspace", "write", "slow"];
const KEYSPACE_WRITE_FAST: &[&str] = &["keyspace", "write", "fast"];
const KEYSPACE_READ: &[&str] = &["keyspace", "read", "slow"];
const KEYSPACE_READ_FAST: &[&str] = &["keyspace", "read", "fast"];

const SAME_OBJECT: &str = "ERR source and destination objects are the same";
const DB_RANGE: &str = "ERR DB index is out of range";

pub static COMMANDS: &[Spec] = &[
    spec(
        "del",
        -2,
        WRITE,
        (1, -1, 1),
        "generic",
        "1.0.0",
        "Delete a key",
        KEYSPACE_WRITE,
        del,
    ).pushes(Pushes::First),
    spec(
        "unlink",
        -2,
        WRITE | FAST,
        (1, -1, 1),
        "generic",
        "4.0.0",
        "Delete a key asynchronously in another thread. Otherwise it is just as DEL, but non blocking.",
        KEYSPACE_WRITE_FAST,
        unlink,
    ).pushes(Pushes::First),
    spec(
        "exists",
        -2,
        READONLY | FAST,
        (1, -1, 1),
        "generic",
        "1.0.0",
        "Determine if a key exists",
        KEYSPACE_READ_FAST,
        exists,
    ),
    spec(
        "type",
        2,
        READONLY | FAST,
        (1, 1, 1),
        "generic",
        "1.0.0",
        "Determine the type stored at key",
        KEYSPACE_READ_FAST,
        type_cmd,
    ),
    spec(
        "expire",
        -3,
        WRITE | FAST,
        (1, 1, 1),
        "generic",
        "1.0.0",
        "Set a key's time to live in seconds",
        KEYSPACE_WRITE_FAST,
        expire,
    ),
    spec(
        "pexpire",
        -3,
        WRITE | FAST,
        (1, 1, 1),
        "generic",
        "2.6.0",
        "Set a key's time to live in milliseconds",
        KEYSPACE_WRITE_FAST,
        pexpire,
    ),
    spec(
        "expireat",
        -3,
        WRITE | FAST,
        (1, 1, 1),
        "generic",
        "1.2.0",
        "Set the expiration for a key as a UNIX timestamp",
        KEYSPACE_WRITE_FAST,
        expireat,
    ),
    spec(
        "pexpireat",
        -3,
        WRITE | FAST,
        (1, 1, 1),
        "generic",
        "2.6.0",
        "Set the expiration for a key as a UNIX timestamp specified in milliseconds",
        KEYSPACE_WRITE_FAST,
        pexpireat,
    ),
    spec(
        "ttl",
        2,
        READONLY | FAST,
        (1, 1, 1),
        "generic",
        "1.0.0",
        "Get the time to live for a key in seconds",
        KEYSPACE_READ_FAST,
        ttl,
    ),
    spec(
        "pttl",
        2,
        READONLY | FAST,
        (1, 1, 1),
        "generic",
        "2.6.0",
        "Get the time to live for a key in milliseconds",
        KEYSPACE_READ_FAST,
        pttl,
    ),
    spec(
        "expiretime",
        2,
        READONLY | FAST,
        (1, 1, 1),
        "generic",
        "7.0.0",
        "Get the expiration Unix timestamp for a key",
        KEYSPACE_READ_FAST,
        expiretime,
    ),
    spec(
        "pexpiretime",
        2,
        READONLY | FAST,
        (1, 1, 1),
        "generic",
        "7.0.0",
        "Get the expiration Unix timestamp for a key in milliseconds",
        KEYSPACE_READ_FAST,
        pexpiretime,
    ),
    spec(
        "persist",
        2,
        WRITE | FAST,
        (1, 1, 1),
        "generic",
        "2.2.0",
        "Remove the expiration from a key",
        KEYSPACE_WRITE_FAST,
        persist,
    ).pushes(Pushes::First),
    spec(
        "keys",
        2,
        READONLY,
        (0, 0, 0),
        "generic",
        "1.0.0",
        "Find all keys matching the given pattern",
        &["keyspace", "read", "slow", "dangerous"],
        keys,
    ),
    spec(
        "scan",
        -2,
        READONLY,
        (0, 0, 0),
        "generic",
        "2.8.0",
        "Incrementally iterate the keys space",
        KEYSPACE_READ,
        scan,
    ),
    spec(
        "rename",
        3,
        WRITE,
        (1, 2, 1),
        "generic",
        "1.0.0",
        "Rename a key",
        KEYSPACE_WRITE,
        rename,
    ).pushes(Pushes::First),
    spec(
        "renamenx",
        3,
        WRITE | FAST,
        (1, 2, 1),
        "generic",
        "1.0.0",
        "Rename a key, only if the new key does not exist",
        KEYSPACE_WRITE_FAST,
        renamenx,
    ).pushes(Pushes::First),
    spec(
        "randomkey",
        1,
        READONLY,
        (0, 0, 0),
        "generic",
        "1.0.0",
        "Return a random key from the keyspace",
        KEYSPACE_READ,
        randomkey,
    ),
    spec(
        "copy",
        -3,
        WRITE | DENYOOM,
        (1, 2, 1),
        "generic",
        "6.2.0",
        "Copy a key",
        KEYSPACE_WRITE,
        copy,
    ).pushes(Pushes::First),
    spec(
        "dump",
        2,
        READONLY,
        (1, 1, 1),
        "generic",
        "2.6.0",
        "Return a serialized version of the value stored at the specified key.",
        KEYSPACE_READ,
        dump,
    ),
    spec(
        "restore",
        -4,
        WRITE | DENYOOM,
        (1, 1, 1),
        "generic",
        "2.6.0",
        "Create a key using the provided serialized value, previously obtained using DUMP.",
        &["keyspace", "write", "slow", "dangerous"],
        restore,
    ),
    spec(
        "move",
        3,
        WRITE | FAST,
        (1, 1, 1),
        "generic",
        "1.0.0",
        "Move a key to another database",
        KEYSPACE_WRITE_FAST,
        move_cmd,
    ).pushes(Pushes::First),
    spec(
        "swapdb",
        3,
        WRITE | FAST,
        (0, 0, 0),
        "server",
        "4.0.0",
        "Swaps two Redis databases",
        &["keyspace", "write", "fast", "dangerous"],
        swapdb,
    ),
    spec(
        "touch",
        -2,
        READONLY | FAST,
        (1, -1, 1),
        "generic",
        "3.2.1",
        "Alters the last access time of a key(s). Returns the number of existing keys specified.",
        KEYSPACE_READ_FAST,
        touch,
    ),
];

/// Redis's `getIntFromObjectOrReply`: `msg` replaces both default errors.
fn arg_int(ctx: &mut Ctx, a: &[u8], msg: Option<&str>) -> Option<i32> {
    let err = match parse_i64(a) {
        Some(v) => match i32::try_from(v) {
            Ok(v) => return Some(v),
            Err(_) => "ERR value is out of range, value must between -2147483648 and 2147483647",
        },
        None => NOT_INT,
    };
    ctx.error(msg.unwrap_or(err));
    None
}

/// A database index argument checked against the configured count.
fn arg_db(ctx: &mut Ctx, a: &[u8]) -> Option<usize> {
    let id = arg_int(ctx, a, None)?;
    if id < 0 || id as usize >= ctx.store.ks.len() {
        ctx.error(DB_RANGE);
        return None;
    }
    Some(id as usize)
}

/// Two distinct databases borrowed mutably at once.
/// DEL and UNLINK (values are freed in place either way).
/// DEL: lazily as UNLINK under `lazyfree-lazy-user-del` (Redis's
/// delCommand).
fn del(ctx: &mut Ctx, args: &[Bytes]) {
    if ctx.store.config().tuning.lazyfree_lazy_user_del {
        return unlink(ctx, args);
    }
    let db = ctx.db();
    let n = args[1..].iter().filter(|k| db.remove(k)).count();
    ctx.out.int(n as i64);
}

/// UNLINK: DEL, a large value freed in the background (Redis's
/// delGenericCommand with lazy set).
fn unlink(ctx: &mut Ctx, args: &[Bytes]) {
    let db = ctx.db();
    let n = args[1..].iter().filter(|k| db.unlink(k)).count();
    ctx.out.int(n as i64);
}

/// EXISTS counts a key once per time it is named.
fn exists(ctx: &mut Ctx, args: &[Bytes]) {
    let db = ctx.db();
    let n = args[1..]
        .iter()
        .filter(|k| db.get_notouch(k).is_some())
        .count();
    ctx.out.int(n as i64);
}

fn touch(ctx: &mut Ctx, args: &[Bytes]) {
    let db = ctx.db();
    let n = args[1..].iter().filter(|k| db.get(k).is_some()).count();
    ctx.out.int(n as i64);
}

fn type_cmd(ctx: &mut Ctx, args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    let name = db.get_notouch(&args[1]).map_or("none", |v| v.type_name());
    out.simple(name);
}

const EXPIRE_NX: u8 = 1;
const EXPIRE_XX: u8 = 2;
const EXPIRE_GT: u8 = 4;
const EXPIRE_LT: u8 = 8;

/// The NX/XX/GT/LT options after the time argument.
fn expire_flags(ctx: &mut Ctx, args: &[Bytes]) -> Option<u8> {
    let mut flags = 0;
    for a in &args[3..] {
        flags |= if eq_ic(a, "nx") {
            EXPIRE_NX
        } else if eq_ic(a, "xx") {
            EXPIRE_XX
        } else if eq_ic(a, "gt") {
            EXPIRE_GT
        } else if eq_ic(a, "lt") {
            EXPIRE_LT
        } else {
            let opt = String::from_utf8_lossy(c_str(a));
            ctx.error(&format!("ERR Unsupported option {opt}"));
            return None;
        };
    }
    if flags & EXPIRE_NX != 0 && flags & (EXPIRE_XX | EXPIRE_GT | EXPIRE_LT) != 0 {
        ctx.error("ERR NX and XX, GT or LT options at the same time are not compatible");
        return None;
    }
    if flags & EXPIRE_GT != 0 && flags & EXPIRE_LT != 0 {
        ctx.error("ERR GT and LT options at the same time are not compatible");
        return None;
    }
    Some(flags)
}

/// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT: `basetime` is added to the
/// argument after scaling it by `unit` (1000 for seconds).
fn expire_generic(ctx: &mut Ctx, args: &[Bytes], basetime: i64, unit: i64, name: &str) {
    let Some(flags) = expire_flags(ctx, args) else {
        return;
    };
    let Some(when) = arg_i64(ctx, &args[2]) else {
        return;
    };
    // Negative times are allowed (they delete the key); only overflow is an error.
    let when = when
        .checked_mul(unit)
        .filter(|w| *w <= i64::MAX - basetime)
        .map(|w| w + basetime);
    let Some(when) = when else {
        return ctx.error(&format!("ERR invalid expire time in '{name}' command"));
    };
    let key = &args[1];
    let db = ctx.db();
    if !db.lookup_write(key) {
        return ctx.out.int(0);
    }
    let current = db.expire_of(key).flatten();
    let refused = (flags & EXPIRE_NX != 0 && current.is_some())
        || (flags & EXPIRE_XX != 0 && current.is_none())
        // No TTL counts as infinite: never lower for GT, always higher for LT.
        || (flags & EXPIRE_GT != 0 && current.is_none_or(|c| when <= c))
        || (flags & EXPIRE_LT != 0 && current.is_some_and(|c| when >= c));
    if refused {
        return ctx.out.int(0);
    }
    db.set_expire(key, when);
    ctx.out.int(1);
}

fn expire(ctx: &mut Ctx, args: &[Bytes]) {
    expire_generic(ctx, args, cmd_time_ms(), 1000, "expire");
}

fn pexpire(ctx: &mut Ctx, args: &[Bytes]) {
    expire_generic(ctx, args, cmd_time_ms(), 1, "pexpire");
}

fn expireat(ctx: &mut Ctx, args: &[Bytes]) {
    expire_generic(ctx, args, 0, 1000, "expireat");
}

fn pexpireat(ctx: &mut Ctx, args: &[Bytes]) {
    expire_generic(ctx, args, 0, 1, "pexpireat");
}

/// TTL, PTTL, EXPIRETIME, PEXPIRETIME: -2 for a missing key, -1 without a TTL.
fn ttl_generic(ctx: &mut Ctx, key: &[u8], ms: bool, absolute: bool) {
    let db = ctx.db();
    if db.get_notouch(key).is_none() {
        return ctx.out.int(-2);
    }
    let Some(Some(when)) = db.expire_of(key) else {
        return ctx.out.int(-1);
    };
    let t = (if absolute { when } else { when - cmd_time_ms() }).max(0);
    // Wide arithmetic: PXAT i64::MAX is valid, and Redis answers
    // 9223372036854776 for it.
    ctx.out.int(if ms {
        t
    } else {
        ((t as i128 + 500) / 1000) as i64
    });
}

fn ttl(ctx: &mut Ctx, args: &[Bytes]) {
    ttl_generic(ctx, &args[1], false, false);
}

fn pttl(ctx: &mut Ctx, args: &[Bytes]) {
    ttl_generic(ctx, &args[1], true, false);
}

fn expiretime(ctx: &mut Ctx, args: &[Bytes]) {
    ttl_generic(ctx, &args[1], false, true);
}

fn pexpiretime(ctx: &mut Ctx, args: &[Bytes]) {
    ttl_generic(ctx, &args[1], true, true);
}

fn persist(ctx: &mut Ctx, args: &[Bytes]) {
    let db = ctx.db();
    db.lookup_write(&args[1]);
    let n = db.persist(&args[1]);
    ctx.out.int(n as i64);
}

fn keys(ctx: &mut Ctx, args: &[Bytes]) {
    let pat = &args[1][..];
    // Redis skips the matcher for a lone "*", so it also lists the empty key.
    let all = pat == b"*";
    let mut found: Vec<Bytes> = Vec::new();
    ctx.db().for_each(|k, _| {
        if all || crate::glob::matches(pat, k, false) {
            found.push(Bytes::copy_from_slice(k));
        }
    });
    ctx.out.array(found.len());
    for k in &found {
        ctx.out.bulk(k);
    }
}

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]
fn scan(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(mut cursor) = parse_cursor(&args[1]) else {
        return ctx.error("ERR invalid cursor");
    };
    let ScanOpts {
        count,
        pattern,
        type_name,
    } = match parse_scan_opts(&args[2..], true) {
        Ok(o) => o,
        Err(e) => return ctx.error(e),
    };
    let db = ctx.db();
    let mut found: Vec<Bytes> = Vec::new();
    // Like Redis: stop after `count` keys or ten times as many empty buckets.
    let mut budget = count.saturating_mul(10);
    loop {
        cursor = db.scan_step(cursor, |k, _| found.push(Bytes::copy_from_slice(k)));
        if cursor == 0 || budget == 0 || found.len() as i64 >= count {
            break;
        }
        budget -= 1;
    }
    if let Some(p) = pattern {
        found.retain(|k| crate::glob::matches(p, k, false));
    }
    if let Some(t) = type_name {
        found.retain(|k| {
            let name = db.get_notouch(k).map_or("none", |v| v.type_name());
            name.as_bytes().eq_ignore_ascii_case(t)
        });
    }
    ctx.out.array(2);
    ctx.out.bulk_int(cursor as i64);
    ctx.out.array(found.len());
    for k in &found {
        ctx.out.bulk(k);
    }
}

fn rename_generic(ctx: &mut Ctx, args: &[Bytes], nx: bool) {
    let (src, dst) = (&args[1], &args[2]);
    let db = ctx.db();
    if !db.lookup_write(src) {
        return ctx.error(NO_SUCH_KEY);
    }
    if src == dst {
        return if nx { ctx.out.int(0) } else { ctx.out.ok() };
    }
    if db.lookup_write(dst) && nx {
        return ctx.out.int(0);
    }
    // The value keeps its TTL: `take` returns it with the expire.
    let v = db
        .take(src, Event::generic("rename_from"))
        .expect("source checked above");
    db.put(dst, v, Event::generic("rename_to"));
    let id = ctx.conn.db;
    ctx.store
        .ks
        .move_binding((id, src.clone()), (id, dst.clone()));
    if nx {
        ctx.out.int(1)
    } else {
        ctx.out.ok()
    }
}

fn rename(ctx: &mut Ctx, args: &[Bytes]) {
    rename_generic(ctx, args, false);
}

fn renamenx(ctx: &mut Ctx, args: &[Bytes]) {
    rename_generic(ctx, args, true);
}

fn randomkey(ctx: &mut Ctx, _args: &[Bytes]) {
    let (db, out) = ctx.db_out();
    // `random_key` gives up after a run of expired keys, deleting each one,
    // so retrying until the database is empty terminates.
    loop {
        if let Some(k) = db.random_key() {
            return out.bulk(&k);
        }
        if db.is_empty() {
            return out.null();
        }
    }
}

/// COPY source destination [DB destination-db] [REPLACE]
fn copy(ctx: &mut Ctx, args: &[Bytes]) {
    let src_id = ctx.conn.db;
    let mut dst_id = src_id;
    let mut replace = false;
    let mut i = 3;
    while i < args.len() {
        if eq_ic(&args[i], "replace") {
            replace = true;
        } else if eq_ic(&args[i], "db") && i + 1 < args.len() {
            let Some(id) = arg_db(ctx, &args[i + 1]) else {
                return;
            };
            dst_id = id;
            i += 1;
        } else {
            return ctx.error(SYNTAX);
        }
        i += 1;
    }
    let (key, newkey) = (&args[1], &args[2]);
    if src_id == dst_id && key == newkey {
        return ctx.error(SAME_OBJECT);
    }
    let dbs = ctx.store.ks.dbs_mut();
    // A read lookup, as in Redis: it counts a hit or miss and touches the key.
    if dbs[src_id].get(key).is_none() {
        return ctx.out.int(0);
    }
    if dbs[dst_id].lookup_write(newkey) && !replace {
        return ctx.out.int(0);
    }
    let v = dbs[src_id].dup(key).expect("source checked above");
    dbs[dst_id].put(newkey, v, Event::generic("copy_to"));
    ctx.out.int(1);
}

/// DUMP: the value in Redis's payload (RDB encoding, version, CRC64), so
/// it RESTOREs here or into redis-server.
fn dump(ctx: &mut Ctx, args: &[Bytes]) {
    let (compress, fill) = {
        let c = ctx.store.config();
        (c.rdbcompression, c.list_max_listpack_size)
    };
    let (db, out) = ctx.db_out();
    match db.get(&args[1]) {
        None => out.null(),
        Some(v) => out.bulk(&crate::persist::rdb::payload::dump(v, compress, fill)),
    }
}

/// RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f], with
/// Redis's checks in Redis's order (restoreCommand).
fn restore(ctx: &mut Ctx, args: &[Bytes]) {
    let (mut replace, mut absttl) = (false, false);
    let (mut idle, mut freq): (Option<i64>, Option<u8>) = (None, None);
    let mut j = 4;
    while j < args.len() {
        let more = j + 1 < args.len();
        if eq_ic(&args[j], "replace") {
            replace = true;
        } else if eq_ic(&args[j], "absttl") {
            absttl = true;
        } else if eq_ic(&args[j], "idletime") && more && freq.is_none() {
            let Some(v) = arg_i64(ctx, &args[j + 1]) else {
                return;
            };
            if v < 0 {
                return ctx.error("ERR Invalid IDLETIME value, must be >= 0");
            }
            idle = Some(v);
            j += 1;
        } else if eq_ic(&args[j], "freq") && more && idle.is_none() {
            let Some(v) = arg_i64(ctx, &args[j + 1]) else {
                return;
            };
            let Ok(f) = u8::try_from(v) else {
                return ctx.error("ERR Invalid FREQ value, must be >= 0 and <= 255");
            };
            freq = Some(f);
            j += 1;
        } else {
            return ctx.error(SYNTAX);
        }
        j += 1;
    }
    let key = &args[1];
    if !replace && ctx.db().lookup_write(key) {
        return ctx.error("BUSYKEY Target key name already exists.");
    }
    let Some(mut ttl) = arg_i64(ctx, &args[2]) else {
        return;
    };
    if ttl < 0 {
        return ctx.error("ERR Invalid TTL value, must be >= 0");
    }
    let lim = crate::persist::limits(ctx.store.config());
    let value = match crate::persist::rdb::payload::restore(&args[3], &lim) {
        Ok(v) => v,
        Err(crate::persist::rdb::payload::RestoreError::Footer) => {
            return ctx.error(&format!("ERR {}", crate::persist::rdb::payload::BAD_FOOTER))
        }
        Err(crate::persist::rdb::payload::RestoreError::Format) => {
            return ctx.error("ERR Bad data format")
        }
    };
    let db = ctx.db();
    if ttl > 0 && !absttl {
        ttl = ttl.saturating_add(cmd_time_ms());
    }
    // Already expired: nothing is created, and a replaced key is deleted.
    if ttl > 0 && ttl <= cmd_time_ms() {
        if replace {
            db.remove(key);
        }
        return ctx.out.ok();
    }
    let expire = (ttl > 0).then_some(ttl);
    db.put(
        key,
        crate::db::Owned::loaded(value, expire),
        Event::generic("restore"),
    );
    if let Some(stamp) = crate::db::evict::restored_stamp(&db.settings.access, freq, idle) {
        db.set_stamp(key, stamp);
    }
    if ttl > 0 && !absttl {
        // Logged with the absolute time, as Redis propagates it.
        let mut logged = args.to_vec();
        logged[2] = Bytes::from(ttl.to_string());
        logged.push(Bytes::from_static(b"ABSTTL"));
        ctx.conn.rewrite = Some(vec![(ctx.conn.db, logged)]);
    }
    ctx.out.ok();
}

fn move_cmd(ctx: &mut Ctx, args: &[Bytes]) {
    let src_id = ctx.conn.db;
    let Some(dst_id) = arg_db(ctx, &args[2]) else {
        return;
    };
    if src_id == dst_id {
        return ctx.error(SAME_OBJECT);
    }
    let key = &args[1];
    let (src, dst) = ctx.store.ks.two_dbs(src_id, dst_id);
    if !src.lookup_write(key) || dst.lookup_write(key) {
        return ctx.out.int(0);
    }
    let v = src
        .take(key, Event::generic("move_from"))
        .expect("source checked above");
    dst.put(key, v, Event::generic("move_to"));
    ctx.store
        .ks
        .move_binding((src_id, key.clone()), (dst_id, key.clone()));
    ctx.out.int(1);
}

fn swapdb(ctx: &mut Ctx, args: &[Bytes]) {
    let Some(a) = arg_int(ctx, &args[1], Some("ERR invalid first DB index")) else {
        return;
    };
    let Some(b) = arg_int(ctx, &args[2], Some("ERR invalid second DB index")) else {
        return;
    };
    let n = ctx.store.ks.len();
    if a < 0 || b < 0 || a as usize >= n || b as usize >= n {
        return ctx.error(DB_RANGE);
    }
    let (a, b) = (a as usize, b as usize);
    if a != b {
        let (da, db) = ctx.store.ks.two_dbs(a, b);
        da.swap_with(db);
    }
    ctx.out.ok();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::db::{Cause, Change, KeyEvent};

    use super::run_for_test as run;

    #[test]
    fn swapdb_records_a_swap_on_both_databases() {
        let mut store = Store::new(Config::default(), crate::commands::acl_catalog());
        store
            .ks
            .db_mut(0)
            .set_str(&Bytes::from_static(b"a"), b"1", false, false);
        store.ks.db_mut(0).events.clear();
        assert_eq!(run(&mut store, 0, &["swapdb", "0", "3"]), b"+OK\r\n");
        for (i, with) in [(0, 3), (3, 0)] {
            let db = &store.ks.db_mut(i);
            assert_eq!(db.id, i);
            assert_eq!(
                db.events,
                vec![KeyEvent {
                    db: i,
                    change: Change::Swapped { with },
                    event: crate::db::EV_NONE,
                    cause: Cause::Command,
                    fields: Vec::new(),
                }]
            );
        }
        assert!(store.ks.db_mut(0).is_empty());
        assert!(store.ks.db_mut(3).peek(b"a").is_some());
        // The same index twice is a no-op, with no event.
        store.ks.db_mut(3).events.clear();
        assert_eq!(run(&mut store, 0, &["swapdb", "3", "3"]), b"+OK\r\n");
        assert!(store.ks.db_mut(3).events.is_empty());
    }

    #[test]
    fn move_and_copy_record_changes_in_both_databases() {
        let mut store = Store::new(Config::default(), crate::commands::acl_catalog());
        store
            .ks
            .db_mut(0)
            .set_str(&Bytes::from_static(b"k"), b"v", false, false);
        store.ks.db_mut(0).events.clear();
        assert_eq!(run(&mut store, 0, &["move", "k", "1"]), b":1\r\n");
        assert!(matches!(
            &store.ks.db_mut(0).events[..],
            [KeyEvent {
                change: Change::Key {
                    existed: true,
                    exists: false,
                    ..
                },
                ..
            }]
        ));
        assert!(matches!(
            &store.ks.db_mut(1).events[..],
            [KeyEvent {
                db: 1,
                change: Change::Key {
                    existed: false,
                    exists: true,
                    ..
                },
                ..
            }]
        ));
        store.ks.db_mut(1).events.clear();
        assert_eq!(
            run(&mut store, 1, &["copy", "k", "k", "db", "2"]),
            b":1\r\n"
        );
        assert!(store.ks.db_mut(1).events.is_empty());
        assert_eq!(store.ks.db_mut(2).events.len(), 1);
    }

    #[test]
    fn cursor_parsing_follows_strtoul() {
        assert_eq!(parse_cursor(b""), Some(0));
        assert_eq!(parse_cursor(b"0"), Some(0));
        assert_eq!(parse_cursor(b"+7"), Some(7));
        assert_eq!(parse_cursor(b"007"), Some(7));
        assert_eq!(parse_cursor(b"-1"), Some(u64::MAX));
        assert_eq!(parse_cursor(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_cursor(b"18446744073709551616"), None);
        assert_eq!(parse_cursor(b"5\0junk"), Some(5));
        assert_eq!(parse_cursor(b" 5"), None);
        assert_eq!(parse_cursor(b"\t5"), None);
        assert_eq!(parse_cursor(b"5 "), None);
        assert_eq!(parse_cursor(b"-"), None);
        assert_eq!(parse_cursor(b"0x10"), None);
    }
}
