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

/// The hash table of earlier positions, kept per thread and emptied by
/// generation instead of by zeroing its 512 KB at every call (a SAVE of
/// 300,000 strings of 100 bytes took 18 s for that alone): an entry of
/// an older generation reads as 0, no earlier position, as in a zeroed
/// table, so the output is the same.
struct Table {
    slots: Vec<u64>,
    gen: u64,
}

impl Table {
    fn begin(&mut self) {
        self.gen += 1;
        if self.gen > u64::from(u32::MAX) {
            self.slots.fill(0);
            self.gen = 1;
        }
    }

    #[inline]
    fn get(&self, slot: usize) -> usize {
        let v = self.slots[slot];
        if v >> 32 == self.gen {
            (v & 0xffff_ffff) as usize
        } else {
            0
        }
    }

    #[inline]
    fn set(&mut self, slot: usize, ip: usize) {
        self.slots[slot] = (self.gen << 32) | ip as u64;
    }
}

thread_local! {
    static TABLE: std::cell::RefCell<Table> = std::cell::RefCell::new(Table {
        slots: vec![0; HSIZE],
        gen: 0,
    });
}

/// lzf_compress into at most `out_len` bytes; None when it does not fit
/// (or the input is past 4 GB, where positions no longer fit the table:
/// compression is optional wherever it is used).
pub fn lzf_compress(input: &[u8], out_len: usize) -> Option<Vec<u8>> {
    if input.is_empty() || input.len() > u32::MAX as usize {
        return None;
    }
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        t.begin();
        compress(&mut t, input, out_len)
    })
}

fn compress(htab: &mut Table, input: &[u8], out_len: usize) -> Option<Vec<u8>> {
    let in_len = input.len();
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

    /// The table kept between calls gives the bytes a zeroed one gives:
    /// each input compressed after others equals it compressed first
    /// thing on a fresh thread (RDB files stay byte-identical to Redis's).
    #[test]
    fn a_reused_table_compresses_as_a_zeroed_one() {
        let inputs: Vec<Vec<u8>> = (0..6u8)
            .map(|k| {
                (0..4000u32)
                    .map(|i| b'a' + ((i * (k as u32 + 3) / 7) % 11) as u8)
                    .collect()
            })
            .collect();
        for data in &inputs {
            let here = lzf_compress(data, data.len() - 4);
            let d = data.clone();
            let fresh = std::thread::spawn(move || lzf_compress(&d, d.len() - 4))
                .join()
                .unwrap();
            assert_eq!(here, fresh);
        }
        // When the generations run out the table is zeroed for real.
        let mut t = Table {
            slots: vec![0; HSIZE],
            gen: u64::from(u32::MAX),
        };
        t.set(7, 99);
        assert_eq!(t.get(7), 99);
        t.begin();
        assert_eq!((t.gen, t.get(7)), (1, 0));
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
