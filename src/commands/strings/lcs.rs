//! LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]
//! The classic dynamic-programming table, walked back exactly like Redis so
//! the reported ranges (and their order) are the same.
//!
//! Reads its two keys through `Ctx`'s database (`Db::get_str`) and the
//! config's `proto-max-bulk-len`; must not write to the keyspace.

use bytes::Bytes;

use super::super::*;
use super::cstr_eq;

pub(super) fn lcs(ctx: &mut Ctx, args: &[Bytes]) {
    let db = ctx.db();
    // Both lookups happen (and count as hits/misses) before any check.
    let a = db.get_str(&args[1]).map(|v| v.map(<[u8]>::to_vec));
    let b = db.get_str(&args[2]).map(|v| v.map(<[u8]>::to_vec));
    let (Ok(a), Ok(b)) = (a, b) else {
        return ctx.error("ERR The specified keys must contain string values");
    };
    let (a, b) = (a.unwrap_or_default(), b.unwrap_or_default());

    let (mut getlen, mut getidx, mut withmatchlen) = (false, false, false);
    let mut minmatchlen: i64 = 0;
    let mut j = 3;
    while j < args.len() {
        let opt = &args[j];
        if cstr_eq(opt, "idx") {
            getidx = true;
        } else if cstr_eq(opt, "len") {
            getlen = true;
        } else if cstr_eq(opt, "withmatchlen") {
            withmatchlen = true;
        } else if cstr_eq(opt, "minmatchlen") && j + 1 < args.len() {
            let Some(n) = arg_i64(ctx, &args[j + 1]) else {
                return;
            };
            minmatchlen = n.max(0);
            j += 1;
        } else {
            return ctx.error(SYNTAX);
        }
        j += 1;
    }
    if getidx && getlen {
        return ctx.error("ERR If you want both the length and indexes, please just use IDX.");
    }
    let cells = (a.len() as u64 + 1) * (b.len() as u64 + 1);
    if cells * 4 > ctx.store.config().proto_max_bulk_len as u64 {
        return ctx
            .error("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len");
    }
    if getlen {
        return ctx.out.int(lcs_len(&a, &b) as i64);
    }

    let Some(t) = Table::build(&a, &b) else {
        return ctx.error("ERR Insufficient memory, failed allocating transient memory for LCS");
    };
    let total = t.at(a.len(), b.len());
    let mut result = vec![0u8; total as usize];
    let mut ranges: Vec<[u32; 5]> = Vec::new();
    let alen = a.len() as u32;
    // `arange_start == alen` means "no range open", as in Redis.
    let (mut astart, mut aend, mut bstart, mut bend) = (alen, 0u32, 0u32, 0u32);
    let mut idx = total as usize;
    let (mut i, mut j) = (a.len(), b.len());
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            result[idx - 1] = a[i - 1];
            if astart == alen {
                astart = i as u32 - 1;
                aend = i as u32 - 1;
                bstart = j as u32 - 1;
                bend = j as u32 - 1;
            } else if astart == i as u32 && bstart == j as u32 {
                astart -= 1;
                bstart -= 1;
            } else {
                emit = true;
            }
            if astart == 0 || bstart == 0 {
                emit = true;
            }
            idx -= 1;
            i -= 1;
            j -= 1;
        } else {
            if t.at(i - 1, j) > t.at(i, j - 1) {
                i -= 1;
            } else {
                j -= 1;
            }
            if astart != alen {
                emit = true;
            }
        }
        if emit {
            let len = aend.wrapping_sub(astart).wrapping_add(1);
            if getidx && (minmatchlen == 0 || len as i64 >= minmatchlen) {
                ranges.push([astart, aend, bstart, bend, len]);
            }
            astart = alen;
        }
    }

    if !getidx {
        return ctx.out.bulk(&result);
    }
    let out = &mut *ctx.out;
    out.map(2);
    out.bulk(b"matches");
    out.array(ranges.len());
    for r in &ranges {
        out.array(2 + withmatchlen as usize);
        out.array(2);
        out.int(r[0] as i64);
        out.int(r[1] as i64);
        out.array(2);
        out.int(r[2] as i64);
        out.int(r[3] as i64);
        if withmatchlen {
            out.int(r[4] as i64);
        }
    }
    out.bulk(b"len");
    out.int(total as i64);
}

/// The full (alen+1) x (blen+1) table; row i, column j = LCS length of
/// a[..i] and b[..j].
struct Table {
    cols: usize,
    v: Vec<u32>,
}

impl Table {
    /// None if the table cannot be allocated (Redis's ztrymalloc failing).
    fn build(a: &[u8], b: &[u8]) -> Option<Table> {
        let cols = b.len() + 1;
        let n = (a.len() + 1) * cols;
        let mut v = Vec::new();
        v.try_reserve_exact(n).ok()?;
        v.resize(n, 0u32);
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                v[i * cols + j] = if a[i - 1] == b[j - 1] {
                    v[(i - 1) * cols + j - 1] + 1
                } else {
                    v[(i - 1) * cols + j].max(v[i * cols + j - 1])
                };
            }
        }
        Some(Table { cols, v })
    }

    fn at(&self, i: usize, j: usize) -> u32 {
        self.v[i * self.cols + j]
    }
}

/// LCS length only: two rows are enough.
fn lcs_len(a: &[u8], b: &[u8]) -> u32 {
    let mut prev = vec![0u32; b.len() + 1];
    let mut cur = vec![0u32; b.len() + 1];
    for &ca in a {
        for j in 1..=b.len() {
            cur[j] = if ca == b[j - 1] {
                prev[j - 1] + 1
            } else {
                prev[j].max(cur[j - 1])
            };
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn len_matches_table() {
        let cases: &[(&[u8], &[u8])] = &[
            (b"ohmytext", b"mynewtext"),
            (b"", b"abc"),
            (b"abc", b""),
            (b"aaaa", b"aa"),
            (b"\0\r\n", b"\r\0\n"),
        ];
        for (a, b) in cases {
            let t = Table::build(a, b).unwrap();
            assert_eq!(lcs_len(a, b), t.at(a.len(), b.len()));
        }
        assert_eq!(lcs_len(b"ohmytext", b"mynewtext"), 6);
    }
}
