//! One key and its value packed in a single allocation, like Redis's embstr.
//!
//! Layout of the boxed bytes:
//! `[flags u8][lru u32][keylen u32][expire i64 if HAS_EXPIRE][key][payload]`
//! where the payload is the string itself for `KIND_INLINE`, or a little-endian
//! u32 index into the database's object slab for every other kind. Keeping
//! small strings inline makes 1M `key:N` → 10-byte keys cost one 32-byte
//! allocation each, which is what lets latchkey fit under Redis's memory.
//!
//! Owns the byte layout only. Must not know the database's maps, commands
//! or values: it knows `types::pack` (`ThinBytes`) and `types::table`'s
//! `Keyed`; the object slab is `super`'s.

/// Small string stored in the entry itself.
pub const KIND_INLINE: u8 = 0;
/// Payload is a slab index (raw strings, and later lists, hashes, ...).
pub const KIND_OBJ: u8 = 1;
const KIND_MASK: u8 = 0x0f;
/// The string was created by APPEND/SETRANGE (OBJECT ENCODING says "raw").
pub const FLAG_RAW: u8 = 0x10;
pub const HAS_EXPIRE: u8 = 0x20;
/// Bound to a connection by SETTP (used by the watch module).
pub const FLAG_BOUND: u8 = 0x40;

const LRU_AT: usize = 1;
const KEYLEN_AT: usize = 5;
const HEADER: usize = 9;

/// Strings up to this many bytes are kept inline (Redis's embstr limit).
pub const INLINE_MAX: usize = 44;

/// Behind one thin pointer (`ThinBytes`): the key table's slots are 8 bytes
/// instead of a `Box<[u8]>`'s 16, which is a tenth of a small key's cost.
pub struct Entry(ThinBytes);

use crate::types::pack::ThinBytes;

impl crate::types::table::Keyed for Entry {
    fn key(&self) -> &[u8] {
        Entry::key(self)
    }
    fn addr(&self) -> *const u8 {
        self.0.addr()
    }
}

impl Entry {
    fn build(flags: u8, lru: u32, expire: Option<i64>, key: &[u8], payload: &[u8]) -> Entry {
        let flags = if expire.is_some() {
            flags | HAS_EXPIRE
        } else {
            flags & !HAS_EXPIRE
        };
        let mut h = [0u8; HEADER + 8];
        h[0] = flags;
        h[LRU_AT..LRU_AT + 4].copy_from_slice(&lru.to_le_bytes());
        h[KEYLEN_AT..KEYLEN_AT + 4].copy_from_slice(&(key.len() as u32).to_le_bytes());
        let mut n = HEADER;
        if let Some(e) = expire {
            h[HEADER..HEADER + 8].copy_from_slice(&e.to_le_bytes());
            n += 8;
        }
        Entry(ThinBytes::from_parts(&[&h[..n], key, payload]))
    }

    pub fn inline(key: &[u8], val: &[u8], flags: u8, lru: u32, expire: Option<i64>) -> Entry {
        Entry::build((flags & !KIND_MASK) | KIND_INLINE, lru, expire, key, val)
    }

    pub fn obj(key: &[u8], idx: u32, flags: u8, lru: u32, expire: Option<i64>) -> Entry {
        Entry::build(
            (flags & !KIND_MASK) | KIND_OBJ,
            lru,
            expire,
            key,
            &idx.to_le_bytes(),
        )
    }

    pub fn flags(&self) -> u8 {
        self.0[0]
    }

    pub fn set_flag(&mut self, f: u8, on: bool) {
        if on {
            self.0.as_bytes_mut()[0] |= f
        } else {
            self.0.as_bytes_mut()[0] &= !f
        }
    }

    pub fn kind(&self) -> u8 {
        self.0[0] & KIND_MASK
    }

    pub fn lru(&self) -> u32 {
        u32::from_le_bytes(self.0[LRU_AT..LRU_AT + 4].try_into().unwrap())
    }

    pub fn set_lru(&mut self, lru: u32) {
        self.0.as_bytes_mut()[LRU_AT..LRU_AT + 4].copy_from_slice(&lru.to_le_bytes());
    }

    /// Where the key starts and ends in `b` (the entry's bytes: each
    /// accessor reads them once, as every read of the ThinBytes decodes its
    /// length header).
    #[inline]
    fn key_span(b: &[u8]) -> (usize, usize) {
        let at = if b[0] & HAS_EXPIRE != 0 {
            HEADER + 8
        } else {
            HEADER
        };
        let len = u32::from_le_bytes(b[KEYLEN_AT..KEYLEN_AT + 4].try_into().unwrap()) as usize;
        (at, at + len)
    }

    pub fn key(&self) -> &[u8] {
        let b = self.0.as_bytes();
        let (at, end) = Entry::key_span(b);
        &b[at..end]
    }

    pub fn payload(&self) -> &[u8] {
        let b = self.0.as_bytes();
        &b[Entry::key_span(b).1..]
    }

    /// Overwrites an inline string of the same length in place: new flags
    /// (the expire stays as it is), stamp and bytes. The caller checked
    /// that the entry is `KIND_INLINE` and its payload is `val.len()` long.
    pub fn overwrite_inline(&mut self, flags: u8, lru: u32, val: &[u8]) {
        let b = self.0.as_bytes_mut();
        let end = Entry::key_span(b).1;
        debug_assert_eq!(b[0] & KIND_MASK, KIND_INLINE);
        debug_assert_eq!(b.len() - end, val.len());
        b[0] = (flags & !(KIND_MASK | HAS_EXPIRE)) | KIND_INLINE | (b[0] & HAS_EXPIRE);
        b[LRU_AT..LRU_AT + 4].copy_from_slice(&lru.to_le_bytes());
        b[end..].copy_from_slice(val);
    }

    /// Slab index of a `KIND_OBJ` entry.
    pub fn obj_idx(&self) -> u32 {
        u32::from_le_bytes(self.payload()[..4].try_into().unwrap())
    }

    /// Points a `KIND_OBJ` entry at another slab slot (slab compaction).
    pub fn set_obj_idx(&mut self, idx: u32) {
        let b = self.0.as_bytes_mut();
        let at = Entry::key_span(b).1;
        b[at..at + 4].copy_from_slice(&idx.to_le_bytes());
    }

    /// Absolute expire time in ms, if any.
    pub fn expire(&self) -> Option<i64> {
        if self.0[0] & HAS_EXPIRE != 0 {
            Some(i64::from_le_bytes(
                self.0[HEADER..HEADER + 8].try_into().unwrap(),
            ))
        } else {
            None
        }
    }

    /// Returns a copy with a different expire (the layout changes size).
    pub fn with_expire(&self, expire: Option<i64>) -> Entry {
        if let (Some(e), Some(_)) = (expire, self.expire()) {
            let mut b = self.0.clone();
            b.as_bytes_mut()[HEADER..HEADER + 8].copy_from_slice(&e.to_le_bytes());
            return Entry(b);
        }
        Entry::build(self.flags(), self.lru(), expire, self.key(), self.payload())
    }

    /// Returns a copy under another name, keeping flags, payload and expire.
    pub fn renamed(&self, key: &[u8]) -> Entry {
        Entry::build(self.flags(), self.lru(), self.expire(), key, self.payload())
    }

    /// Bytes allocated for this entry (for MEMORY USAGE).
    pub fn alloc_size(&self) -> usize {
        self.0.alloc_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_round_trip() {
        let e = Entry::inline(b"key:1", b"value", 0, 7, None);
        assert_eq!(e.key(), b"key:1");
        assert_eq!(e.payload(), b"value");
        assert_eq!(e.lru(), 7);
        assert_eq!(e.expire(), None);
        let e = e.with_expire(Some(1234));
        assert_eq!(e.key(), b"key:1");
        assert_eq!(e.payload(), b"value");
        assert_eq!(e.expire(), Some(1234));
        let e = e.with_expire(Some(99)).renamed(b"other");
        assert_eq!(
            (e.key(), e.payload(), e.expire()),
            (&b"other"[..], &b"value"[..], Some(99))
        );
        let e = e.with_expire(None);
        assert_eq!(e.expire(), None);
        assert_eq!(e.payload(), b"value");
        let o = Entry::obj(b"k", 42, FLAG_RAW, 0, None);
        assert_eq!(o.kind(), KIND_OBJ);
        assert_eq!(o.obj_idx(), 42);
        assert!(o.flags() & FLAG_RAW != 0);
    }
}
