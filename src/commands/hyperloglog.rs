//! HyperLogLog commands (Redis's hyperloglog.c): PFADD, PFCOUNT, PFMERGE,
//! PFDEBUG.
//!
//! An HLL is a plain string in Redis's byte layout (`types::hll`), so the
//! commands use the string accessors of the keyspace: a read lookup
//! (`Db::get_str`, counting hits and misses) or a write lookup
//! (`Db::get_str_write`), then `Db::str_mut` to edit the value in place
//! (which also makes it "raw", as Redis's dbUnshareStringValue does), then
//! `Db::touch_modified` for the keyspace hook. A string that is not an HLL
//! gets Redis's HLL-specific WRONGTYPE text; another type gets the usual
//! one through `typed`.
//!
//! Events and `dirty` as Redis 7.0: PFADD and PFMERGE record "pfadd"; PFADD
//! adds one to `dirty` per changed register (plus one for a new key);
//! PFCOUNT of one key that refreshes the cached cardinality is a change to
//! the value (WATCH sees it, `dirty` grows) without a notification, so it
//! records the nameless `EV_NONE`; PFDEBUG GETREG/TODENSE converting to
//! dense only add to `dirty`.

use bytes::Bytes;

use super::Pushes;
use super::*;
use crate::db::EV_NONE;
use crate::types::hll::{self, Corrupt, HDR_SIZE, REGISTERS};
use crate::util::eq_ic;

const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
const CORRUPT: &str = "INVALIDOBJ Corrupted HLL object detected";

const EV_PFADD: Event = Event::string("pfadd");

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    spec("pfadd", -2, WRITE | DENYOOM | FAST, (1, 1, 1), "hyperloglog", "2.8.9", "Adds the specified elements to the specified HyperLogLog.", &["write", "hyperloglog", "fast"], pfadd).pushes(Pushes::First),
    spec("pfcount", -2, READONLY, (1, -1, 1), "hyperloglog", "2.8.9", "Return the approximated cardinality of the set(s) observed by the HyperLogLog at key(s).", &["read", "hyperloglog", "slow"], pfcount),
    spec("pfmerge", -2, WRITE | DENYOOM, (1, -1, 1), "hyperloglog", "2.8.9", "Merge N different HyperLogLogs into a single one.", &["write", "hyperloglog", "slow"], pfmerge).pushes(Pushes::First),
    spec("pfdebug", 3, WRITE | DENYOOM | ADMIN, (2, 2, 1), "hyperloglog", "2.8.9", "Internal commands for debugging HyperLogLog values", &["write", "hyperloglog", "admin", "slow", "dangerous"], pfdebug),
];

/// A string lookup's result checked as Redis's isHLLObjectOrReply: None
/// after replying WRONGTYPE (another type, or a string that is not an HLL),
/// else the HLL if the key exists.
fn hll_or_reply<'a>(
    out: &mut Out,
    r: Result<Option<&'a [u8]>, WrongType>,
) -> Option<Option<&'a [u8]>> {
    match typed(out, r)? {
        None => Some(None),
        Some(v) if hll::is_valid(v) => Some(Some(v)),
        Some(_) => {
            out.error(NOT_HLL);
            None
        }
    }
}

fn pfadd(ctx: &mut Ctx, args: &[Bytes]) {
    let max_bytes = ctx.store.config().hll_sparse_max_bytes;
    let key = &args[1];
    let (db, out) = ctx.db_out();
    let Some(exists) = hll_or_reply(out, db.get_str_write(key)) else {
        return;
    };
    let updated: u64 = if exists.is_none() {
        // A new key counts as one change, each raised register as another.
        let mut h = hll::new_sparse();
        let mut n = 1;
        for e in &args[2..] {
            if hll::add(&mut h, e, max_bytes) == Ok(true) {
                n += 1;
            }
        }
        hll::invalidate_cache(&mut h);
        db.set_str_ev(key, &h, false, false, EV_PFADD);
        // Redis's createObject: "raw", never embstr.
        let _ = db.str_mut(key);
        n
    } else {
        let Ok(Some(h)) = db.str_mut(key) else {
            return out.error(WRONGTYPE);
        };
        let mut n = 0;
        for e in &args[2..] {
            match hll::add(h, e, max_bytes) {
                Ok(true) => n += 1,
                Ok(false) => {}
                // Redis keeps the registers already raised, unannounced.
                Err(Corrupt) => return out.error(CORRUPT),
            }
        }
        if n > 0 {
            hll::invalidate_cache(h);
            db.touch_modified(key, EV_PFADD);
        }
        n
    };
    out.int((updated > 0) as i64);
    // The recorded event counted one change.
    ctx.store.ks.add_dirty(updated.saturating_sub(1));
}

fn pfcount(ctx: &mut Ctx, args: &[Bytes]) {
    if args.len() > 2 {
        return pfcount_union(ctx, &args[1..]);
    }
    let key = &args[1];
    let (db, out) = ctx.db_out();
    let Some(exists) = hll_or_reply(out, db.get_str(key)) else {
        return;
    };
    if exists.is_none() {
        return out.int(0);
    }
    let Ok(Some(h)) = db.str_mut(key) else {
        return out.error(WRONGTYPE);
    };
    let card = match hll::cached_card(h) {
        Some(c) => c,
        None => {
            let Ok(c) = hll::count(h) else {
                return out.error(CORRUPT);
            };
            hll::set_cached_card(h, c);
            // The cache is part of the value: a change, but no notification.
            db.touch_modified(key, EV_NONE);
            c
        }
    };
    out.int(card as i64);
}

/// PFCOUNT of several keys: the count of their union, computed in a
/// temporary; no key changes.
fn pfcount_union(ctx: &mut Ctx, keys: &[Bytes]) {
    let (db, out) = ctx.db_out();
    let mut max = [0u8; REGISTERS];
    for key in keys {
        let Some(v) = hll_or_reply(out, db.get_str(key)) else {
            return;
        };
        if let Some(v) = v {
            if hll::merge_into(&mut max, v).is_err() {
                return out.error(CORRUPT);
            }
        }
    }
    out.int(hll::count_raw(&max) as i64);
}

/// Writes the union `max` into the HLL `h` as Redis's PFMERGE does: dense
/// first when any input was dense, then each non-zero register raised in
/// index order (a sparse target may turn dense on the way).
fn merge_registers(
    h: &mut Vec<u8>,
    max: &[u8; REGISTERS],
    dense: bool,
    max_bytes: usize,
) -> Result<(), Corrupt> {
    if dense {
        hll::sparse_to_dense(h)?;
    }
    for (j, &m) in max.iter().enumerate() {
        if m != 0 {
            let _ = hll::set_register(h, j, m, max_bytes);
        }
    }
    hll::invalidate_cache(h);
    Ok(())
}

fn pfmerge(ctx: &mut Ctx, args: &[Bytes]) {
    let max_bytes = ctx.store.config().hll_sparse_max_bytes;
    let (db, out) = ctx.db_out();
    let mut max = [0u8; REGISTERS];
    let mut dense = false;
    // The destination is one of the inputs, looked up for reading too.
    for key in &args[1..] {
        let Some(v) = hll_or_reply(out, db.get_str(key)) else {
            return;
        };
        if let Some(v) = v {
            dense |= hll::is_dense(v);
            if hll::merge_into(&mut max, v).is_err() {
                return out.error(CORRUPT);
            }
        }
    }
    let dest = &args[1];
    match db.str_mut(dest) {
        Err(_) => return out.error(WRONGTYPE),
        Ok(Some(h)) => {
            if merge_registers(h, &max, dense, max_bytes).is_err() {
                return out.error(CORRUPT);
            }
            db.touch_modified(dest, EV_PFADD);
        }
        Ok(None) => {
            let mut h = hll::new_sparse();
            if merge_registers(&mut h, &max, dense, max_bytes).is_err() {
                return out.error(CORRUPT);
            }
            db.set_str_ev(dest, &h, false, false, EV_PFADD);
            let _ = db.str_mut(dest);
        }
    }
    out.ok();
}

fn pfdebug(ctx: &mut Ctx, args: &[Bytes]) {
    let (sub, key) = (&args[1], &args[2]);
    let (db, out) = ctx.db_out();
    let Some(exists) = hll_or_reply(out, db.get_str_write(key)) else {
        return;
    };
    if exists.is_none() {
        return out.error("ERR The specified key does not exist");
    }
    let Ok(Some(h)) = db.str_mut(key) else {
        return out.error(WRONGTYPE);
    };
    let mut converted = false;
    if eq_ic(sub, "getreg") || eq_ic(sub, "todense") {
        if !hll::is_dense(h) {
            if hll::sparse_to_dense(h).is_err() {
                return out.error(CORRUPT);
            }
            converted = true;
        }
        if eq_ic(sub, "getreg") {
            out.array(REGISTERS);
            for j in 0..REGISTERS {
                out.int(hll::dense_get(&h[HDR_SIZE..], j) as i64);
            }
        } else {
            out.int(converted as i64);
        }
    } else if eq_ic(sub, "decode") {
        if hll::is_dense(h) {
            return out.error("ERR HLL encoding is not sparse");
        }
        out.bulk(hll::decode(&h[HDR_SIZE..]).as_bytes());
    } else if eq_ic(sub, "encoding") {
        out.simple(if hll::is_dense(h) { "dense" } else { "sparse" });
    } else {
        // `%s`: the name up to its first NUL.
        let name = sub.split(|&c| c == 0).next().unwrap_or_default();
        let mut msg = b"ERR Unknown PFDEBUG subcommand '".to_vec();
        msg.extend_from_slice(name);
        msg.push(b'\'');
        out.error_bytes(&msg);
    }
    // Redis propagates the conversion (dirty) without signalling the key.
    if converted {
        ctx.store.ks.add_dirty(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_registers_keeps_sparse_unless_told() {
        let mut max = [0u8; REGISTERS];
        max[3] = 2;
        max[9000] = 7;
        let mut h = hll::new_sparse();
        merge_registers(&mut h, &max, false, 3000).unwrap();
        assert!(!hll::is_dense(&h));
        assert_eq!(hll::decode(&h[HDR_SIZE..]), "z:3 v:2,1 Z:8996 v:7,1 Z:7383");
        assert_eq!(hll::cached_card(&h), None);
        let mut d = hll::new_sparse();
        merge_registers(&mut d, &max, true, 3000).unwrap();
        assert!(hll::is_dense(&d));
        assert_eq!(hll::dense_get(&d[HDR_SIZE..], 9000), 7);
    }
}
