//! liblzf 3.5 as Redis vendors it (HLOG 16, VERY_FAST, table zeroed):
//! the compression of RDB strings and of the quicklist's inner nodes
//! (`list-compress-depth`). A leaf: it knows bytes only.

const HLOG: u32 = 16;
const HSIZE: usize = 1 << HLOG;
const MAX_LIT: usize = 1 << 5;
const MAX_OFF: usize = 1 << 13;
const MAX_REF: usize = (1 << 8) + (1 << 3);

fn idx(h: u32) -> usize {
    ((h >> (3 * 8 - HLOG)).wrapping_sub(h.wrapping_mul(5)) as usize) & (HSIZE - 1)
}

/// One more literal byte; a full run of MAX_LIT is closed.
fn literal(out: &mut [u8], op: &mut usize, lit: &mut usize, byte: u8) {
    *lit += 1;
    out[*op] = byte;
    *op += 1;
    if *lit == MAX_LIT {
        out[*op - *lit - 1] = (*lit - 1) as u8;
        *lit = 0;
        *op += 1;
    }
}

/// Bits of a table entry that hold the position; the rest is the call's
/// generation.
const POS_BITS: u32 = 40;
const POS_MASK: u64 = (1 << POS_BITS) - 1;

/// The hash table of positions, kept per thread across calls: an entry of
/// an earlier call's generation reads as empty, so each call sees a
/// zeroed table, as liblzf's, without zeroing 512 KB for every value (an
/// RDB of a million small strings did that a million times).
struct Htab {
    gen: u64,
    slots: Vec<u64>,
}

impl Htab {
    /// A new call: the next generation (the table is really zeroed when
    /// the generations wrap).
    fn begin(&mut self) {
        if self.slots.is_empty() {
            self.slots = vec![0; HSIZE];
        }
        self.gen += 1;
        if self.gen >> (64 - POS_BITS) != 0 {
            self.slots.fill(0);
            self.gen = 1;
        }
    }

    #[inline]
    fn get(&self, slot: usize) -> usize {
        let e = self.slots[slot];
        if e >> POS_BITS == self.gen {
            (e & POS_MASK) as usize
        } else {
            0
        }
    }

    #[inline]
    fn set(&mut self, slot: usize, pos: usize) {
        self.slots[slot] = (self.gen << POS_BITS) | pos as u64;
    }
}

thread_local! {
    static HTAB: std::cell::RefCell<Htab> =
        const { std::cell::RefCell::new(Htab { gen: 0, slots: Vec::new() }) };
}

/// lzf_compress into at most `out_len` bytes; None when it does not fit.
pub fn lzf_compress(input: &[u8], out_len: usize) -> Option<Vec<u8>> {
    if input.is_empty() || input.len() as u64 > POS_MASK {
        return None;
    }
    HTAB.with(|t| match t.try_borrow_mut() {
        Ok(mut t) => compress(input, out_len, &mut t),
        // Not re-entered in practice; a fresh table if it ever is.
        Err(_) => compress(
            input,
            out_len,
            &mut Htab {
                gen: 0,
                slots: Vec::new(),
            },
        ),
    })
}

fn compress(input: &[u8], out_len: usize, htab: &mut Htab) -> Option<Vec<u8>> {
    let in_len = input.len();
    htab.begin();
    let mut out = vec![0u8; out_len];
    let (mut ip, mut op, mut lit) = (0usize, 1usize, 0usize);
    let at = |i: usize| input.get(i).copied().unwrap_or(0) as u32;
    let mut hval = (at(0) << 8) | at(1);
    if out_len == 0 {
        return None;
    }
    while in_len >= 2 && ip < in_len - 2 {
        hval = (hval << 8) | at(ip + 2);
        let slot = idx(hval);
        let r = htab.get(slot);
        htab.set(slot, ip);
        let off = ip.wrapping_sub(r).wrapping_sub(1);
        if off < MAX_OFF
            && r > 0
            && input[r + 2] == input[ip + 2]
            && input[r] == input[ip]
            && input[r + 1] == input[ip + 1]
        {
            let mut len = 2usize;
            let maxlen = (in_len - ip - len).min(MAX_REF);
            // Room for the back reference, tested before the run is
            // closed (a full run may have left `op` one past the end).
            if op - (lit == 0) as usize + 3 + 1 >= out_len {
                return None;
            }
            out[op - lit - 1] = (lit as u8).wrapping_sub(1);
            op -= (lit == 0) as usize;
            'm: {
                if maxlen > 16 {
                    for _ in 0..16 {
                        len += 1;
                        if input[r + len] != input[ip + len] {
                            break 'm;
                        }
                    }
                }
                loop {
                    len += 1;
                    if !(len < maxlen && input[r + len] == input[ip + len]) {
                        break;
                    }
                }
            }
            len -= 2;
            ip += 1;
            if len < 7 {
                out[op] = ((off >> 8) + (len << 5)) as u8;
                op += 1;
            } else {
                out[op] = ((off >> 8) + (7 << 5)) as u8;
                out[op + 1] = (len - 7) as u8;
                op += 2;
            }
            out[op] = off as u8;
            op += 1;
            lit = 0;
            op += 1;
            ip += len + 1;
            if ip >= in_len - 2 {
                break;
            }
            ip -= 2;
            hval = (at(ip) << 8) | at(ip + 1);
            hval = (hval << 8) | at(ip + 2);
            htab.set(idx(hval), ip);
            ip += 1;
            hval = (hval << 8) | at(ip + 2);
            htab.set(idx(hval), ip);
            ip += 1;
        } else {
            if op >= out_len {
                return None;
            }
            literal(&mut out, &mut op, &mut lit, input[ip]);
            ip += 1;
        }
    }
    if op + 3 > out_len {
        return None;
    }
    while ip < in_len {
        literal(&mut out, &mut op, &mut lit, input[ip]);
        ip += 1;
    }
    out[op - lit - 1] = (lit as u8).wrapping_sub(1);
    op -= (lit == 0) as usize;
    out.truncate(op);
    Some(out)
}

/// lzf_decompress to exactly `out_len` bytes.
pub fn lzf_decompress(input: &[u8], out_len: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(out_len);
    let mut ip = 0;
    while ip < input.len() {
        let ctrl = input[ip] as usize;
        ip += 1;
        if ctrl < 32 {
            let n = ctrl + 1;
            let lit = input.get(ip..ip + n)?;
            if out.len() + n > out_len {
                return None;
            }
            out.extend_from_slice(lit);
            ip += n;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += *input.get(ip)? as usize;
                ip += 1;
            }
            let back = ((ctrl & 0x1f) << 8) + *input.get(ip)? as usize + 1;
            ip += 1;
            if back > out.len() || out.len() + len + 2 > out_len {
                return None;
            }
            let start = out.len() - back;
            for i in 0..len + 2 {
                out.push(out[start + i]);
            }
        }
    }
    (out.len() == out_len).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_sees_an_empty_table() {
        // The table kept across calls must not leak an earlier input's
        // positions into a later one: the same input compresses to the
        // same bytes whatever came before, as with a zeroed table.
        let a: Vec<u8> = b"abcabcabcabcXYZabcabc".repeat(20);
        let b: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        let fresh = |x: &[u8]| {
            let mut t = Htab {
                gen: 0,
                slots: Vec::new(),
            };
            compress(x, x.len(), &mut t)
        };
        let first = lzf_compress(&a, a.len());
        assert!(first.is_some());
        assert_eq!(lzf_compress(&b, b.len()), fresh(&b));
        assert_eq!(lzf_compress(&a, a.len()), first);
        assert_eq!(first, fresh(&a));
    }

    #[test]
    fn lzf_round_trip() {
        let data = b"redis.register_function('a', function() return 1 end) redis.register_function('b', function() return 1 end)".repeat(5);
        let c = lzf_compress(&data, data.len() - 4).unwrap();
        assert!(c.len() < data.len());
        assert_eq!(lzf_decompress(&c, data.len()).unwrap(), data);
    }

    #[test]
    fn lzf_round_trip_varied_inputs() {
        // Pseudo-random text over small alphabets: literals, short and
        // long matches, runs past MAX_LIT and MAX_REF.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for alphabet in [2u64, 4, 26, 200] {
            for len in [21usize, 64, 300, 5000] {
                let data: Vec<u8> = (0..len)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        b'a'.wrapping_add((seed % alphabet) as u8)
                    })
                    .collect();
                if let Some(c) = lzf_compress(&data, data.len() - 4) {
                    assert_eq!(lzf_decompress(&c, data.len()).unwrap(), data);
                }
            }
        }
        // A full literal run ending one byte before the output's end, then
        // a match (this listpack of a sorted set once overran the buffer).
        let lp = b"%\x00\x00\x00\x08\x00\x81c\x02\x84-inf\x05\x81a\x02\x01\x01\x81b\x02\x832.5\x04\x81d\x02\x83inf\x04\xff";
        assert_eq!(lzf_compress(lp, lp.len() - 4), None);
        let same = vec![b'z'; 3000];
        let c = lzf_compress(&same, same.len() - 4).unwrap();
        assert_eq!(lzf_decompress(&c, same.len()).unwrap(), same);
    }

    proptest::proptest! {
        /// Any input, any output bound: no panic; what fits round trips.
        #[test]
        fn lzf_never_overruns(
            data in proptest::collection::vec(proptest::sample::select(vec![b'a', b'b', b'c', 0u8, 0xff]), 0..700),
            slack in 0usize..80,
        ) {
            let out_len = (data.len() + 40).saturating_sub(slack);
            if let Some(c) = lzf_compress(&data, out_len) {
                proptest::prop_assert!(c.len() <= out_len);
                proptest::prop_assert_eq!(lzf_decompress(&c, data.len()).unwrap(), data);
            }
        }
    }
}
