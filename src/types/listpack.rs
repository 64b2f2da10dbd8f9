//! Redis's listpack (7.0's compact encoding for small hashes, sorted sets,
//! quicklist nodes and stream nodes), byte for byte: a 4-byte total size,
//! a 2-byte element count (65535 when not known), the entries, 0xFF. Each
//! entry is its encoding and data followed by a "backlen" (the entry's
//! size, 7 bits per byte, read from the right). Elements that are decimal
//! integers are stored as integers, as Redis's lpAppend does.
//!
//! Two uses: `Writer`/`decode` build and check whole listpacks (the RDB
//! format's `persist::rdb::value`), and the cursor functions (`first`,
//! `next`, `get`, `append`, `replace_int`) work in place on a live one,
//! which is what a stream node is (`types::stream`), so a stream's nodes
//! are saved and loaded as they are.
//!
//! Bytes only: must not know the other types, the keyspace or commands.

/// Builds a listpack from elements.
#[derive(Default)]
pub struct Writer {
    buf: Vec<u8>,
    count: usize,
}

impl Writer {
    pub fn new() -> Writer {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(&[0; 6]);
        Writer { buf, count: 0 }
    }

    /// Bytes so far (header included), to cut quicklist nodes by size.
    pub fn len(&self) -> usize {
        self.buf.len() + 1
    }

    pub fn count(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn push(&mut self, e: &[u8]) {
        let start = self.buf.len();
        match crate::util::parse_i64(e) {
            Some(v) => push_int(&mut self.buf, v),
            None => push_str(&mut self.buf, e),
        }
        let n = self.buf.len() - start;
        push_backlen(&mut self.buf, n);
        self.count += 1;
    }

    pub fn push_int(&mut self, v: i64) {
        let start = self.buf.len();
        push_int(&mut self.buf, v);
        let n = self.buf.len() - start;
        push_backlen(&mut self.buf, n);
        self.count += 1;
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.buf.push(0xff);
        let total = self.buf.len() as u32;
        self.buf[..4].copy_from_slice(&total.to_le_bytes());
        let n = if self.count < 65535 {
            self.count as u16
        } else {
            65535
        };
        self.buf[4..6].copy_from_slice(&n.to_le_bytes());
        self.buf
    }
}

fn push_int(buf: &mut Vec<u8>, v: i64) {
    if (0..=127).contains(&v) {
        buf.push(v as u8);
    } else if (-4096..=4095).contains(&v) {
        let u = (v as u64) & 0x1fff;
        buf.push(0xc0 | (u >> 8) as u8);
        buf.push(u as u8);
    } else if i16::try_from(v).is_ok() {
        buf.push(0xf1);
        buf.extend_from_slice(&(v as i16).to_le_bytes());
    } else if (-(1 << 23)..(1 << 23)).contains(&v) {
        buf.push(0xf2);
        buf.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
    } else if i32::try_from(v).is_ok() {
        buf.push(0xf3);
        buf.extend_from_slice(&(v as i32).to_le_bytes());
    } else {
        buf.push(0xf4);
        buf.extend_from_slice(&v.to_le_bytes());
    }
}

fn push_str(buf: &mut Vec<u8>, s: &[u8]) {
    let n = s.len();
    if n < 64 {
        buf.push(0x80 | n as u8);
    } else if n < 4096 {
        buf.push(0xe0 | (n >> 8) as u8);
        buf.push(n as u8);
    } else {
        buf.push(0xf0);
        buf.extend_from_slice(&(n as u32).to_le_bytes());
    }
    buf.extend_from_slice(s);
}

/// lpEncodeBacklen: the entry size, most significant 7-bit group first,
/// every byte but the first (leftmost) with its high bit set.
fn push_backlen(buf: &mut Vec<u8>, n: usize) {
    let mut groups = [0u8; 5];
    let mut k = 0;
    let mut v = n;
    loop {
        groups[k] = (v & 127) as u8;
        k += 1;
        v >>= 7;
        if v == 0 {
            break;
        }
    }
    // groups[0] is the least significant; it is written last (rightmost)
    // with the high bit set when there is more than one byte.
    for i in (0..k).rev() {
        let b = groups[i];
        buf.push(if i == k - 1 { b } else { b | 128 });
    }
}

/// A little-endian two's-complement integer of 1 to 8 bytes.
pub fn le_int(bytes: &[u8]) -> i64 {
    let mut v = [0u8; 8];
    v[..bytes.len()].copy_from_slice(bytes);
    let shift = 64 - 8 * bytes.len() as u32;
    (i64::from_le_bytes(v) << shift) >> shift
}

/// Bytes the backlen of an entry of `n` bytes takes.
fn backlen_len(n: usize) -> usize {
    match n {
        0..=127 => 1,
        128..=16383 => 2,
        16384..=2097151 => 3,
        2097152..=268435455 => 4,
        _ => 5,
    }
}

// ---------------------------------------------------------------------------
// A live listpack: cursors are byte offsets of entries.

/// Header, plus the terminator.
const HEADER: usize = 6;

/// An empty listpack with room for `cap` bytes (lpNew).
pub fn new(cap: usize) -> Vec<u8> {
    let mut lp = Vec::with_capacity(cap.max(HEADER + 1));
    lp.extend_from_slice(&7u32.to_le_bytes());
    lp.extend_from_slice(&[0, 0, 0xff]);
    lp
}

/// The first entry, or None when it is empty.
pub fn first(lp: &[u8]) -> Option<usize> {
    (lp.get(HEADER).is_some_and(|&b| b != 0xff)).then_some(HEADER)
}

/// The entry after the one at `p`, or None at the end.
pub fn next(lp: &[u8], p: usize) -> Option<usize> {
    let size = entry(&lp[p..]).map_or(0, |(_, n)| n);
    let q = p + size + backlen_len(size);
    (lp.get(q).is_some_and(|&b| b != 0xff)).then_some(q)
}

/// The entry at `p` (which a cursor function returned).
pub fn get(lp: &[u8], p: usize) -> Elem<'_> {
    entry(&lp[p..]).map_or(Elem::Int(0), |(e, _)| e)
}

/// The entry at `p` as an integer (a string that is no number reads 0:
/// the stream fields read this way are always written as integers).
pub fn get_int(lp: &[u8], p: usize) -> i64 {
    match get(lp, p) {
        Elem::Int(v) => v,
        Elem::Str(s) => crate::util::parse_i64(s).unwrap_or(0),
    }
}

/// Total bytes (lpBytes).
pub fn bytes(lp: &[u8]) -> usize {
    lp.len()
}

fn set_header(lp: &mut [u8], count_delta: bool) {
    let total = lp.len() as u32;
    lp[..4].copy_from_slice(&total.to_le_bytes());
    if count_delta {
        let n = u16::from_le_bytes([lp[4], lp[5]]);
        if n != u16::MAX {
            lp[4..6].copy_from_slice(&(n + 1).to_le_bytes());
        }
    }
}

fn append_encoded(lp: &mut Vec<u8>, enc: impl FnOnce(&mut Vec<u8>)) {
    lp.pop(); // the terminator
    let start = lp.len();
    enc(lp);
    let n = lp.len() - start;
    push_backlen(lp, n);
    lp.push(0xff);
    set_header(lp, true);
}

/// Appends an element, as an integer when it is one (lpAppend).
pub fn append(lp: &mut Vec<u8>, e: &[u8]) {
    append_encoded(lp, |b| match crate::util::parse_i64(e) {
        Some(v) => push_int(b, v),
        None => push_str(b, e),
    });
}

/// Appends an integer (lpAppendInteger).
pub fn append_int(lp: &mut Vec<u8>, v: i64) {
    append_encoded(lp, |b| push_int(b, v));
}

/// Bytes `e` takes once appended (encoding, data and backlen).
pub fn entry_size(e: &[u8]) -> usize {
    let mut b = Vec::new();
    match crate::util::parse_i64(e) {
        Some(v) => push_int(&mut b, v),
        None => return str_size(e.len()),
    }
    b.len() + backlen_len(b.len())
}

fn str_size(n: usize) -> usize {
    let hdr = match n {
        0..=63 => 1,
        64..=4095 => 2,
        _ => 5,
    };
    hdr + n + backlen_len(hdr + n)
}

/// Replaces the integer at `p` with `v` (lpReplaceInteger); the entries
/// after it move when its size changes, and `p` stays its offset.
pub fn replace_int(lp: &mut Vec<u8>, p: usize, v: i64) {
    let old = entry(&lp[p..]).map_or(0, |(_, n)| n);
    let old_total = old + backlen_len(old);
    let mut b = Vec::with_capacity(12);
    push_int(&mut b, v);
    let n = b.len();
    push_backlen(&mut b, n);
    if b.len() == old_total {
        lp[p..p + old_total].copy_from_slice(&b);
    } else {
        lp.splice(p..p + old_total, b);
        set_header(lp, false);
    }
}

/// One decoded element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem<'a> {
    Int(i64),
    Str(&'a [u8]),
}

impl Elem<'_> {
    pub fn to_vec(self) -> Vec<u8> {
        match self {
            Elem::Int(v) => itoa::Buffer::new().format(v).as_bytes().to_vec(),
            Elem::Str(s) => s.to_vec(),
        }
    }
}

/// Decodes a whole listpack, checking its structure (sizes, terminator,
/// each entry within bounds, backlens); None when it is malformed.
pub fn decode(lp: &[u8]) -> Option<Vec<Elem<'_>>> {
    if lp.len() < 7 || u32::from_le_bytes(lp[..4].try_into().ok()?) as usize != lp.len() {
        return None;
    }
    let declared = u16::from_le_bytes([lp[4], lp[5]]);
    let mut out = Vec::new();
    let mut p = 6;
    loop {
        let b = *lp.get(p)?;
        if b == 0xff {
            break;
        }
        let (elem, size) = entry(&lp[p..])?;
        p += size;
        p += check_backlen(&lp[p..], size)?;
        out.push(elem);
    }
    if p + 1 != lp.len() || (declared != 65535 && declared as usize != out.len()) {
        return None;
    }
    Some(out)
}

/// The entry at the start of `b`: the element and its encoding+data size.
fn entry(b: &[u8]) -> Option<(Elem<'_>, usize)> {
    let e = b[0];
    let int = |n: usize| -> Option<i64> { Some(le_int(b.get(1..1 + n)?)) };
    let s = |hdr: usize, n: usize| -> Option<(Elem<'_>, usize)> {
        let d = b.get(hdr..hdr.checked_add(n)?)?;
        Some((Elem::Str(d), hdr + n))
    };
    match e {
        0x00..=0x7f => Some((Elem::Int(e as i64), 1)),
        0x80..=0xbf => s(1, (e & 0x3f) as usize),
        0xc0..=0xdf => {
            let u = (((e & 0x1f) as u64) << 8) | *b.get(1)? as u64;
            let v = ((u << 51) as i64) >> 51;
            Some((Elem::Int(v), 2))
        }
        0xe0..=0xef => s(2, (((e & 0x0f) as usize) << 8) | *b.get(1)? as usize),
        0xf0 => s(
            5,
            u32::from_le_bytes(b.get(1..5)?.try_into().ok()?) as usize,
        ),
        0xf1 => Some((Elem::Int(int(2)?), 3)),
        0xf2 => Some((Elem::Int(int(3)?), 4)),
        0xf3 => Some((Elem::Int(int(4)?), 5)),
        0xf4 => Some((Elem::Int(int(8)?), 9)),
        _ => None,
    }
}

/// Checks the backlen that follows an entry of `size` bytes: it is
/// determined by the size (the next entry may itself start with a byte
/// that has its high bit set, so it cannot be read by its bits). Returns
/// how many bytes it takes.
fn check_backlen(b: &[u8], size: usize) -> Option<usize> {
    let mut want = Vec::with_capacity(5);
    push_backlen(&mut want, size);
    (b.get(..want.len())? == want.as_slice()).then_some(want.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_encoding() {
        let long = vec![b'x'; 5000];
        let mid = vec![b'y'; 300];
        let elems: Vec<Vec<u8>> = vec![
            b"0".to_vec(),
            b"127".to_vec(),
            b"128".to_vec(),
            b"-4096".to_vec(),
            b"4095".to_vec(),
            b"-32768".to_vec(),
            b"8388607".to_vec(),
            b"-8388608".to_vec(),
            b"2147483647".to_vec(),
            b"-9223372036854775808".to_vec(),
            b"9223372036854775807".to_vec(),
            b"".to_vec(),
            b"hello".to_vec(),
            b"007".to_vec(),
            mid,
            long,
        ];
        let mut w = Writer::new();
        for e in &elems {
            w.push(e);
        }
        let lp = w.finish();
        let got: Vec<Vec<u8>> = decode(&lp).unwrap().into_iter().map(Elem::to_vec).collect();
        assert_eq!(got, elems);
        // A bit flip in the structure is caught, not misread.
        let mut bad = lp.clone();
        bad[0] ^= 1;
        assert!(decode(&bad).is_none());
        assert!(decode(&lp[..lp.len() - 1]).is_none());
    }

    #[test]
    fn known_bytes() {
        // lpNew + lpAppend("a") + lpAppend("1024"), as Redis writes them.
        let mut w = Writer::new();
        w.push(b"a");
        w.push(b"1024");
        assert_eq!(
            w.finish(),
            [0x0d, 0, 0, 0, 2, 0, 0x81, b'a', 2, 0xc4, 0x00, 2, 0xff]
        );
    }
}
