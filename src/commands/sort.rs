//! SORT and SORT_RO (Redis's sort.c): sorting the elements of a list, set or
//! sorted set numerically or lexicographically, by their own value or by
//! external keys (`BY weight_*`, `BY obj_*->field`), with LIMIT, GET
//! patterns and STORE.
//!
//! Reaches the keyspace only through `Ctx` and its typed lookups; STORE lets
//! `waiters` settle a queued lock key first (`settle_queued_key`), then
//! writes with `Db::replace`. Must not notify anyone itself.

use std::cmp::Ordering;

use bytes::Bytes;

use super::*;
use crate::types::{Hash, List, Set, ZSet};
use crate::util::eq_ic;

#[rustfmt::skip]
pub static COMMANDS: &[Spec] = &[
    spec("sort", -2, WRITE | DENYOOM, (1, 1, 1), "generic", "1.0.0", "Sort the elements in a list, set or sorted set", &["write", "set", "sortedset", "list", "slow", "dangerous"], sort),
    spec("sort_ro", -2, READONLY, (1, 1, 1), "generic", "7.0.0", "Sort the elements in a list, set or sorted set. Read-only variant of SORT.", &["read", "set", "sortedset", "list", "slow", "dangerous"], sort_ro),
];

const NOT_DOUBLE: &str = "ERR One or more scores can't be converted into double";

struct Opts {
    by: Option<Bytes>,
    /// BY without a `*`: keep the elements' own order.
    dontsort: bool,
    limit: Option<(i64, i64)>,
    gets: Vec<Bytes>,
    desc: bool,
    alpha: bool,
    store: Option<Bytes>,
}

fn parse(ctx: &mut Ctx, args: &[Bytes], read_only: bool) -> Option<Opts> {
    let mut o = Opts {
        by: None,
        dontsort: false,
        limit: None,
        gets: Vec::new(),
        desc: false,
        alpha: false,
        store: None,
    };
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        let a = &args[j];
        if eq_ic(a, "asc") {
            o.desc = false;
        } else if eq_ic(a, "desc") {
            o.desc = true;
        } else if eq_ic(a, "alpha") {
            o.alpha = true;
        } else if eq_ic(a, "limit") && left >= 2 {
            let start = arg_i64(ctx, &args[j + 1])?;
            let count = arg_i64(ctx, &args[j + 2])?;
            o.limit = Some((start, count));
            j += 2;
        } else if eq_ic(a, "store") && left >= 1 && !read_only {
            o.store = Some(args[j + 1].clone());
            j += 1;
        } else if eq_ic(a, "by") && left >= 1 {
            let p = args[j + 1].clone();
            // A pattern without '*' names no per-element key: no sorting.
            if memchr::memchr(b'*', &p).is_none() {
                o.dontsort = true;
            }
            o.by = Some(p);
            j += 1;
        } else if eq_ic(a, "get") && left >= 1 {
            o.gets.push(args[j + 1].clone());
            j += 1;
        } else {
            ctx.error(SYNTAX);
            return None;
        }
        j += 1;
    }
    Some(o)
}

/// The value a BY/GET pattern names for `elem` (Redis's lookupKeyByPattern):
/// `#` is the element; the first `*` is replaced by it; `key->field` reads a
/// hash field. None when the key is missing or of the wrong type.
fn lookup_pattern(db: &mut crate::db::Db, pattern: &[u8], elem: &[u8]) -> Option<Vec<u8>> {
    if pattern == b"#" {
        return Some(elem.to_vec());
    }
    let star = memchr::memchr(b'*', pattern)?;
    let arrow = memchr::memmem::find(pattern, b"->");
    let (key_pat, field) = match arrow {
        Some(p) if p > star && p + 2 < pattern.len() => (&pattern[..p], Some(&pattern[p + 2..])),
        _ => (pattern, None),
    };
    let mut key = Vec::with_capacity(key_pat.len() + elem.len());
    key.extend_from_slice(&key_pat[..star]);
    key.extend_from_slice(elem);
    key.extend_from_slice(&key_pat[star + 1..]);
    match field {
        Some(f) => db.read::<Hash>(&key).ok()??.get(f).map(|v| v.to_vec()),
        None => db.get_str(&key).ok()?.map(|v| v.to_vec()),
    }
}

/// A value as a sort weight, as Redis's sortCommand takes it: strtod must
/// stop at the end of the string (leading space and hex allowed, "" is 0),
/// no overflow or underflow, not NaN.
fn weight(v: &[u8]) -> Option<f64> {
    let (d, n, erange) = crate::util::strtod(v);
    let stop = v.get(n).copied().unwrap_or(0);
    (stop == 0 && !erange && !d.is_nan()).then_some(d)
}

fn sort(ctx: &mut Ctx, args: &[Bytes]) {
    sort_generic(ctx, args, false);
}

fn sort_ro(ctx: &mut Ctx, args: &[Bytes]) {
    sort_generic(ctx, args, true);
}

fn sort_generic(ctx: &mut Ctx, args: &[Bytes], read_only: bool) {
    let Some(mut o) = parse(ctx, args, read_only) else {
        return;
    };
    let key = &args[1];
    let db = ctx.db();
    // The elements, in the value's own order.
    let mut elems: Vec<Vec<u8>> = match db.get(key) {
        None => Vec::new(),
        Some(crate::db::ValueRef::Obj(v)) => {
            if let Some(l) = <List as crate::types::Kind>::of(v) {
                // Unsorted DESC walks the list from its tail, as Redis.
                if o.dontsort && o.desc {
                    l.iter_rev().map(|e| e.to_vec()).collect()
                } else {
                    l.iter().map(|e| e.to_vec()).collect()
                }
            } else if let Some(s) = <Set as crate::types::Kind>::of(v) {
                // Sets have no order of their own: with nothing to sort by
                // and a STORE, Redis sorts them alphabetically so the result
                // is deterministic.
                if o.dontsort && o.store.is_some() {
                    o.dontsort = false;
                    o.alpha = true;
                    o.by = None;
                }
                s.iter().map(|m| m.to_vec()).collect()
            } else if let Some(z) = <ZSet as crate::types::Kind>::of(v) {
                if o.dontsort && o.desc {
                    z.range_by_rank(0, z.len().saturating_sub(1), true)
                        .map(|(m, _)| m.to_vec())
                        .collect()
                } else {
                    z.iter().map(|(m, _)| m.to_vec()).collect()
                }
            } else {
                return ctx.error(WRONGTYPE);
            }
        }
        Some(crate::db::ValueRef::Str(_)) => return ctx.error(WRONGTYPE),
    };

    if !o.dontsort {
        // Sort keys: a number, or bytes for ALPHA; None sorts first.
        enum W {
            Num(f64),
            Alpha(Option<Vec<u8>>),
        }
        let mut keyed: Vec<(W, Vec<u8>)> = Vec::with_capacity(elems.len());
        for e in elems.drain(..) {
            let by_val = match &o.by {
                Some(p) => lookup_pattern(ctx.db(), p, &e),
                None => None,
            };
            let w = if o.alpha {
                W::Alpha(if o.by.is_some() { by_val } else { None })
            } else {
                let src = if o.by.is_some() {
                    by_val.as_deref()
                } else {
                    Some(&e[..])
                };
                match src {
                    None => W::Num(0.0),
                    Some(v) => match weight(v) {
                        Some(d) => W::Num(d),
                        None => return ctx.error(NOT_DOUBLE),
                    },
                }
            };
            keyed.push((w, e));
        }
        let by = o.by.is_some();
        keyed.sort_by(|(wa, ea), (wb, eb)| {
            let c = match (wa, wb) {
                (W::Num(a), W::Num(b)) => a.partial_cmp(b).unwrap_or(Ordering::Equal),
                (W::Alpha(a), W::Alpha(b)) if by => a.cmp(b),
                _ => Ordering::Equal,
            };
            let c = if c == Ordering::Equal { ea.cmp(eb) } else { c };
            if o.desc {
                c.reverse()
            } else {
                c
            }
        });
        elems = keyed.into_iter().map(|(_, e)| e).collect();
    }

    // LIMIT, as Redis clamps it.
    let len = elems.len() as i64;
    let (mut start, mut end) = (0i64, len - 1);
    if let Some((off, count)) = o.limit {
        start = off.max(0);
        end = if count < 0 {
            len - 1
        } else {
            start.saturating_add(count) - 1
        };
        if start >= len {
            start = len - 1;
            end = len - 2;
        }
        if end >= len {
            end = len - 1;
        }
    }
    let picked: &[Vec<u8>] = if end < start || len == 0 {
        &[]
    } else {
        &elems[start as usize..=end as usize]
    };

    // Output: the elements, or for each one the value of every GET.
    let mut out_vals: Vec<Option<Vec<u8>>> = Vec::new();
    for e in picked {
        if o.gets.is_empty() {
            out_vals.push(Some(e.clone()));
        }
        for g in &o.gets {
            let v = lookup_pattern(ctx.db(), g, e);
            out_vals.push(v);
        }
    }
    match &o.store {
        None => {
            ctx.out.array(out_vals.len());
            for v in &out_vals {
                match v {
                    Some(v) => ctx.out.bulk(v),
                    None => ctx.out.null(),
                }
            }
        }
        Some(dst) => {
            // A queued lock key whose TTL has passed goes to its line
            // before this write can take it.
            if !ctx.store.ks.blocking.is_empty() {
                settle_queued_key(ctx, dst);
            }
            let fill = ctx.store.config().list_max_listpack_size;
            let mut l = List::new();
            for v in &out_vals {
                l.push_back(v.as_deref().unwrap_or(b""), fill);
            }
            let n = l.len();
            ctx.db().replace(dst, l, Event::list("sortstore"));
            ctx.out.int(n as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_substitute_the_first_star() {
        let mut db = crate::db::Db::new(0);
        db.set_str(&Bytes::from_static(b"w_a"), b"3", false, false);
        assert_eq!(lookup_pattern(&mut db, b"w_*", b"a"), Some(b"3".to_vec()));
        assert_eq!(lookup_pattern(&mut db, b"#", b"a"), Some(b"a".to_vec()));
        assert_eq!(lookup_pattern(&mut db, b"nostar", b"a"), None);
        assert_eq!(lookup_pattern(&mut db, b"w_*", b"b"), None);
        // A field on a string key is no value.
        assert_eq!(lookup_pattern(&mut db, b"w_*->f", b"a"), None);
    }
}
