//! Packing helpers shared by the data structures and the keyspace: LEB128
//! varints, jemalloc's size classes (so `mem_usage` figures match the
//! server's allocator), and `ThinBytes`, an owned byte string behind one
//! thin pointer (`Option<ThinBytes>` is 8 bytes where `Box<[u8]>` is 16:
//! hash tables of millions of entries are dominated by their bucket arrays).
//!
//! Must not know the value types, the keyspace or commands: it names only
//! `table::Keyed` (so a `ThinBytes` can be a table's key).

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::fmt;
use std::ptr::NonNull;

use super::table::Keyed;

// ---------------------------------------------------------------------------
// Varints and allocation sizes (shared with hash.rs)

/// Bytes taken by `n` as an LEB128 varint (1 for n < 128).
pub fn varint_len(mut n: usize) -> usize {
    let mut l = 1;
    while n >= 0x80 {
        n >>= 7;
        l += 1;
    }
    l
}

/// Appends `n` as an LEB128 varint.
pub fn push_varint(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Writes `n` as an LEB128 varint at the start of `out` (which must be at
/// least `varint_len(n)` long); returns the bytes written.
pub fn write_varint(out: &mut [u8], mut n: usize) -> usize {
    let mut i = 0;
    while n >= 0x80 {
        out[i] = (n as u8) | 0x80;
        n >>= 7;
        i += 1;
    }
    out[i] = n as u8;
    i + 1
}

/// Reads an LEB128 varint at the start of `b`: (value, bytes used), or None
/// if `b` ends first or the value overflows usize.
pub fn read_varint(b: &[u8]) -> Option<(usize, usize)> {
    let mut v: usize = 0;
    for (i, &c) in b.iter().enumerate().take(10) {
        let part = ((c & 0x7f) as usize).checked_shl(7 * i as u32)?;
        v |= part;
        if c & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// The size jemalloc really hands out for a request of `n` bytes (its size
/// classes: 8, then multiples of 16 up to 128, then four classes per doubling).
/// Used by `mem_usage` so that figures match the server's allocator.
pub fn alloc_class(n: usize) -> usize {
    if n == 0 {
        0
    } else if n <= 8 {
        8
    } else if n <= 128 {
        (n + 15) & !15
    } else {
        let step = (n.next_power_of_two() / 8).max(16);
        n.div_ceil(step).saturating_mul(step)
    }
}

// ---------------------------------------------------------------------------
// ThinBytes

/// An immutable-length owned byte string behind a single thin pointer: one
/// heap allocation of `[varint len][bytes]`, so that `Option<ThinBytes>` is
/// 8 bytes (a `Box<[u8]>` is 16). Used as the element of the large set and
/// hash encodings, where the bucket array dominates memory.
pub struct ThinBytes(NonNull<u8>);

// SAFETY: a ThinBytes exclusively owns its allocation, exactly like a
// Box<[u8]>; there is no shared mutable state, so moving it to or sharing it
// with another thread is as safe as for Box<[u8]>.
unsafe impl Send for ThinBytes {}
// SAFETY: see Send: `&ThinBytes` only gives `&[u8]`.
unsafe impl Sync for ThinBytes {}

impl ThinBytes {
    /// The allocation's address, without reading it (to prefetch it).
    pub fn addr(&self) -> *const u8 {
        self.0.as_ptr()
    }

    /// A new allocation holding the concatenation of `parts`.
    pub fn from_parts(parts: &[&[u8]]) -> ThinBytes {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let hdr = varint_len(len);
        let total = hdr + len;
        // A slice's length never exceeds isize::MAX, and `hdr` is at most 10,
        // so the layout is valid for any real input.
        let layout = Layout::array::<u8>(total).expect("ThinBytes too large");
        // SAFETY: `layout` has non-zero size (hdr >= 1).
        let raw = unsafe { alloc(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| handle_alloc_error(layout));
        let mut h = [0u8; 10];
        let hl = write_varint(&mut h, len);
        let mut at = 0;
        for p in std::iter::once(&h[..hl]).chain(parts.iter().copied()) {
            // SAFETY: the parts and header add up to `total` bytes, so every
            // copy stays inside the fresh allocation, which cannot overlap a
            // borrowed source. Raw copies, so no reference to uninitialised
            // memory is ever made.
            unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), ptr.as_ptr().add(at), p.len()) };
            at += p.len();
        }
        debug_assert_eq!(at, total);
        ThinBytes(ptr)
    }

    /// A copy of `b`.
    pub fn new(b: &[u8]) -> ThinBytes {
        ThinBytes::from_parts(&[b])
    }

    /// (header bytes, payload length).
    #[inline]
    fn header(&self) -> (usize, usize) {
        let p = self.0.as_ptr();
        // SAFETY: the header has at least one byte (see below).
        let c = unsafe { *p };
        if c & 0x80 == 0 {
            // Anything under 128 bytes: one header byte.
            return (1, c as usize);
        }
        let mut v: usize = 0;
        let mut i = 0;
        loop {
            // SAFETY: the header was written by `from_parts` as a complete
            // varint at the start of the allocation, so every byte up to and
            // including the one without the 0x80 bit is in bounds.
            let c = unsafe { *p.add(i) };
            v |= ((c & 0x7f) as usize) << (7 * i);
            i += 1;
            if c & 0x80 == 0 {
                return (i, v);
            }
        }
    }

    /// The stored bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        let (h, len) = self.header();
        // SAFETY: the allocation is `h + len` bytes, all initialised by
        // `from_parts`; the borrow of `self` keeps it alive and unmodified.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().add(h), len) }
    }

    /// The stored bytes, mutable (the length cannot change).
    #[inline]
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        let (h, len) = self.header();
        // SAFETY: as `as_bytes`; `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_ptr().add(h), len) }
    }

    /// Bytes requested from the allocator (header included).
    pub fn alloc_len(&self) -> usize {
        let (h, len) = self.header();
        h + len
    }

    /// Bytes the allocator really uses for this value (its size class).
    pub fn alloc_size(&self) -> usize {
        alloc_class(self.alloc_len())
    }
}

impl Drop for ThinBytes {
    fn drop(&mut self) {
        let total = self.alloc_len();
        // SAFETY: the allocation was made in `from_parts` with exactly
        // `Layout::array::<u8>(total)`, i.e. size `total`, align 1 (the header
        // records `total - h`); it is freed only here, once.
        unsafe { dealloc(self.0.as_ptr(), Layout::from_size_align_unchecked(total, 1)) }
    }
}

impl Clone for ThinBytes {
    fn clone(&self) -> Self {
        ThinBytes::new(self.as_bytes())
    }
}

impl std::ops::Deref for ThinBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for ThinBytes {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}
impl Eq for ThinBytes {}

impl fmt::Debug for ThinBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

impl Keyed for ThinBytes {
    #[inline]
    fn key(&self) -> &[u8] {
        self.as_bytes()
    }
}

// ---------------------------------------------------------------------------
// Listpack limits

/// When a hash or a sorted set leaves its listpack encoding (from the
/// config: `hash-max-listpack-*`, `zset-max-listpack-*`), passed to every
/// write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most entries (fields, members) a listpack holds.
    pub max_entries: usize,
    /// Longest field, value or member (in bytes) a listpack holds.
    pub max_value: usize,
}

impl Limits {
    /// Redis's defaults for hashes: 512 entries, 64 bytes.
    pub const HASH: Limits = Limits {
        max_entries: 512,
        max_value: 64,
    };

    /// Redis 7.0's defaults for sorted sets: 128 entries, 64 bytes.
    pub const ZSET: Limits = Limits {
        max_entries: 128,
        max_value: 64,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_thin_bytes_round_trip() {
        for n in [0usize, 1, 127, 128, 300, 16383, 16384, 100_000, usize::MAX] {
            let mut v = Vec::new();
            push_varint(&mut v, n);
            assert_eq!(v.len(), varint_len(n));
            assert_eq!(read_varint(&v), Some((n, v.len())));
            assert_eq!(read_varint(&v[..v.len() - 1]), None);
        }
        for n in [0usize, 1, 10, 127, 128, 200, 16384, 70_000] {
            let data: Vec<u8> = (0..n).map(|i| (i * 7) as u8).collect();
            let mut t = ThinBytes::new(&data);
            assert_eq!(t.as_bytes(), &data[..]);
            assert_eq!(t.alloc_len(), n + varint_len(n));
            let c = t.clone();
            if n > 0 {
                t.as_bytes_mut()[0] ^= 1;
                assert_ne!(t, c);
            }
            assert_eq!(c.as_bytes(), &data[..]);
        }
        let t = ThinBytes::from_parts(&[b"ab", b"", b"cde"]);
        assert_eq!(&t[..], b"abcde");
        assert_eq!(std::mem::size_of::<Option<ThinBytes>>(), 8);
    }

    #[test]
    fn alloc_class_matches_jemalloc() {
        for (n, c) in [
            (0, 0),
            (1, 8),
            (8, 8),
            (9, 16),
            (16, 16),
            (17, 32),
            (22, 32),
            (33, 48),
            (128, 128),
            (129, 160),
            (256, 256),
            (257, 320),
            (4097, 5120),
        ] {
            assert_eq!(alloc_class(n), c, "{n}");
        }
    }
}
