//! What a command leaves in the change log (the AOF, later replication):
//! Redis's propagation rules. A command that changed nothing is not
//! logged; one that asked to be logged as something else (EXEC: its
//! writes between MULTI and EXEC; a script: the writes it made; RESTORE:
//! an absolute TTL) is logged as that; times relative to now become
//! absolute (EXPIRE as PEXPIREAT, SET EX as SET PXAT, as Redis 7.0), so a
//! replay at another time gives the same data; a compare-and-set that
//! wrote is logged as its effect (SET without its IFEQ/IFNE/IFDEQ/IFDNE,
//! DELEX and DELIFEQ as DEL, as Redis 8.4's delexCommand), so a replay
//! never depends on the comparison. Keys bound by SETTP are
//! never logged as live: a command whose keys are all bound afterwards
//! (SETTP itself, a write to a held lock) is left out, so a replay never
//! brings a lock back; the DEL when a binding ends is logged.

use bytes::Bytes;

use super::{command_keys, Ctx, Record, Spec};
use crate::db::entry::FLAG_BOUND;
use crate::effects::Logged;
use crate::util::{cmd_time_ms, eq_ic, parse_i64};

/// What to log for a command that ran in database `db` with record `r`.
pub fn logged(
    ctx: &mut Ctx,
    spec: &'static Spec,
    args: &[Bytes],
    db: usize,
    r: Record,
) -> Vec<Logged> {
    if let Some(v) = r.rewrite {
        return v;
    }
    if r.dirty == 0 {
        return Vec::new();
    }
    // Only while some key is bound at all (a lookup per key otherwise).
    let keys = if ctx.store.ks.bindings().is_empty() {
        Vec::new()
    } else {
        command_keys(spec, args)
    };
    if !keys.is_empty() {
        let (compress, fill) = {
            let c = ctx.store.config();
            (c.rdbcompression, c.list_max_listpack_size)
        };
        let d = ctx.store.ks.db_mut(db);
        let bound =
            |d: &crate::db::Db, k: &[u8]| d.peek_flags(k).is_some_and(|f| f & FLAG_BOUND != 0);
        let n = keys.iter().filter(|k| bound(d, k)).count();
        if n == keys.len() {
            return Vec::new();
        }
        if n > 0 {
            // A bound key is never in the log, so a command that read or
            // wrote one (COPY from a held lock, BITOP over it) would not
            // replay the same: its other keys are logged by what they
            // hold now instead.
            let mut seen: Vec<&[u8]> = Vec::new();
            let mut out = Vec::new();
            for k in &keys {
                if bound(d, k) || seen.contains(&&k[..]) {
                    continue;
                }
                seen.push(k);
                out.push((db, state_of(d, k, compress, fill)));
            }
            return out;
        }
    }
    vec![(db, absolute(args))]
}

/// The command that sets `key` to what it holds now: RESTORE ... REPLACE
/// ABSTTL with its value and expire time, or DEL when it is gone.
fn state_of(d: &mut crate::db::Db, key: &Bytes, compress: bool, fill: i64) -> Vec<Bytes> {
    let expire = d.expire_of(key).flatten().unwrap_or(0);
    match d.peek(key) {
        None => vec![b("DEL"), key.clone()],
        Some(v) => vec![
            b("RESTORE"),
            key.clone(),
            b(&expire.to_string()),
            Bytes::from(crate::persist::rdb::payload::dump(v, compress, fill)),
            b("REPLACE"),
            b("ABSTTL"),
        ],
    }
}

/// What a hash field command leaves: one HDEL per field it deleted
/// (Redis's propagateHashFieldDeletion, e.g. HEXPIRE with a time already
/// due), then `then` (HPEXPIREAT for the fields it set, HPERSIST), in
/// MULTI/EXEC when there are several, as Redis wraps a command's
/// propagations.
pub fn hash_fields(
    db: usize,
    key: &Bytes,
    deleted: &[Bytes],
    then: Option<Vec<Bytes>>,
) -> Vec<Logged> {
    let mut v: Vec<Logged> = deleted
        .iter()
        .map(|f| (db, vec![b("HDEL"), key.clone(), f.clone()]))
        .collect();
    v.extend(then.map(|c| (db, c)));
    wrap(v)
}

/// Wraps a transaction's or a script's writes in MULTI/EXEC when there
/// are several, as Redis propagates them (once: writes already wrapped
/// stay as they are).
pub fn wrap(mut v: Vec<Logged>) -> Vec<Logged> {
    if v.len() < 2 || eq_ic(&v[0].1[0], "multi") {
        return v;
    }
    let db = v[0].0;
    let last = v[v.len() - 1].0;
    v.insert(0, (db, vec![Bytes::from_static(b"MULTI")]));
    v.push((last, vec![Bytes::from_static(b"EXEC")]));
    v
}

fn b(s: &str) -> Bytes {
    Bytes::from(s.to_string())
}

/// `args` with times relative to now made absolute, and conditions that
/// held dropped.
fn absolute(args: &[Bytes]) -> Vec<Bytes> {
    let now = cmd_time_ms();
    let name = &args[0];
    if (eq_ic(name, "delex") || eq_ic(name, "delifeq")) && args.len() >= 2 {
        return vec![b("DEL"), args[1].clone()];
    }
    let int = |a: &Bytes| parse_i64(a);
    let at = |secs: bool, v: i64| -> Bytes {
        let ms = if secs { v.saturating_mul(1000) } else { v };
        b(&now.saturating_add(ms).to_string())
    };
    if (eq_ic(name, "expire") || eq_ic(name, "pexpire")) && args.len() >= 3 {
        if let Some(v) = int(&args[2]) {
            let mut out = vec![
                b("PEXPIREAT"),
                args[1].clone(),
                at(eq_ic(name, "expire"), v),
            ];
            out.extend_from_slice(&args[3..]);
            return out;
        }
    }
    if eq_ic(name, "expireat") && args.len() >= 3 {
        if let Some(v) = int(&args[2]) {
            let mut out = vec![
                b("PEXPIREAT"),
                args[1].clone(),
                b(&v.saturating_mul(1000).to_string()),
            ];
            out.extend_from_slice(&args[3..]);
            return out;
        }
    }
    if (eq_ic(name, "setex") || eq_ic(name, "psetex")) && args.len() == 4 {
        if let Some(v) = int(&args[2]) {
            return vec![
                b("SET"),
                args[1].clone(),
                args[3].clone(),
                b("PXAT"),
                at(eq_ic(name, "setex"), v),
            ];
        }
    }
    if (eq_ic(name, "set") || eq_ic(name, "getex")) && args.len() >= 3 {
        let first = if eq_ic(name, "set") { 3 } else { 2 };
        let mut out: Vec<Bytes> = args[..first].to_vec();
        let mut i = first;
        let mut expire: Option<Bytes> = None;
        let mut persist = false;
        while i < args.len() {
            let a = &args[i];
            let next = args.get(i + 1).and_then(int);
            if (eq_ic(a, "ex") || eq_ic(a, "px")) && next.is_some() {
                expire = Some(at(eq_ic(a, "ex"), next.unwrap_or(0)));
                i += 2;
            } else if eq_ic(a, "exat") && next.is_some() {
                expire = Some(b(&next.unwrap_or(0).saturating_mul(1000).to_string()));
                i += 2;
            } else if eq_ic(a, "pxat") && next.is_some() {
                expire = Some(args[i + 1].clone());
                i += 2;
            } else if ["ifeq", "ifne", "ifdeq", "ifdne"]
                .iter()
                .any(|c| eq_ic(a, c))
                && i + 1 < args.len()
            {
                // It wrote, so the condition held.
                i += 2;
            } else {
                persist |= eq_ic(a, "persist");
                out.push(a.clone());
                i += 1;
            }
        }
        if eq_ic(name, "getex") {
            // GETEX changes only the TTL.
            return match (expire, persist) {
                (Some(t), _) => vec![b("PEXPIREAT"), args[1].clone(), t],
                (None, true) => vec![b("PERSIST"), args[1].clone()],
                _ => args.to_vec(),
            };
        }
        if let Some(t) = expire {
            out.push(b("PXAT"));
            out.push(t);
        }
        return out;
    }
    args.to_vec()
}

/// A blocked command served from `ready`, logged as the non-blocking
/// command it amounted to (Redis propagates BLPOP as LPOP, ...).
pub fn served(args: &[Bytes], ready: &Bytes) -> Vec<Bytes> {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    let from = |i: usize| args[i..].to_vec();
    match name.as_str() {
        "blpop" => vec![b("LPOP"), ready.clone()],
        "brpop" => vec![b("RPOP"), ready.clone()],
        "bzpopmin" => vec![b("ZPOPMIN"), ready.clone()],
        "bzpopmax" => vec![b("ZPOPMAX"), ready.clone()],
        "brpoplpush" if args.len() == 4 => {
            vec![b("RPOPLPUSH"), args[1].clone(), args[2].clone()]
        }
        "blmove" if args.len() == 6 => {
            let mut v = vec![b("LMOVE")];
            v.extend_from_slice(&args[1..5]);
            v
        }
        // BLMPOP timeout numkeys key... LEFT|RIGHT [COUNT n]: the rest
        // after the keys follows the one key that was served.
        "blmpop" | "bzmpop" if args.len() >= 4 => {
            let n = parse_i64(&args[2]).unwrap_or(0).max(0) as usize;
            let rest = 3 + n;
            let mut v = vec![
                b(if name == "blmpop" { "LMPOP" } else { "ZMPOP" }),
                b("1"),
                ready.clone(),
            ];
            if rest <= args.len() {
                v.extend(from(rest));
            }
            v
        }
        _ => args.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<Bytes> {
        s.split(' ').map(b).collect()
    }

    #[test]
    fn relative_times_become_absolute() {
        crate::util::refresh_cmd_time();
        let now = cmd_time_ms();
        let t = |d: i64| (now + d).to_string();
        assert_eq!(
            absolute(&v("EXPIRE k 10")),
            v(&format!("PEXPIREAT k {}", t(10_000)))
        );
        assert_eq!(
            absolute(&v("pexpire k 10 NX")),
            v(&format!("PEXPIREAT k {} NX", t(10)))
        );
        assert_eq!(absolute(&v("EXPIREAT k 5")), v("PEXPIREAT k 5000"));
        assert_eq!(
            absolute(&v("SETEX k 2 v")),
            v(&format!("SET k v PXAT {}", t(2000)))
        );
        assert_eq!(
            absolute(&v("set k v NX EX 3 GET")),
            v(&format!("set k v NX GET PXAT {}", t(3000)))
        );
        assert_eq!(absolute(&v("SET k v")), v("SET k v"));
        assert_eq!(absolute(&v("SET k v KEEPTTL")), v("SET k v KEEPTTL"));
        assert_eq!(
            absolute(&v("GETEX k PX 5")),
            v(&format!("PEXPIREAT k {}", t(5)))
        );
        assert_eq!(absolute(&v("GETEX k PERSIST")), v("PERSIST k"));
        assert_eq!(absolute(&v("INCR k")), v("INCR k"));
        assert_eq!(
            absolute(&v("SET k v IFEQ old EX 3 GET")),
            v(&format!("SET k v GET PXAT {}", t(3000)))
        );
        assert_eq!(
            absolute(&v("set k v ifdne 0123456789abcdef KEEPTTL")),
            v("set k v KEEPTTL")
        );
        assert_eq!(absolute(&v("DELEX k IFEQ v")), v("DEL k"));
        assert_eq!(absolute(&v("delex k")), v("DEL k"));
        assert_eq!(absolute(&v("DELIFEQ k v")), v("DEL k"));
    }
}
