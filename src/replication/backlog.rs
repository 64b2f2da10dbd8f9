//! The replication backlog: the last `repl-backlog-size` bytes of the
//! replication stream, kept so a replica that lost its link can continue
//! from its offset (`PSYNC replid offset` → `+CONTINUE`).

use std::collections::VecDeque;

/// A ring of the stream's last bytes. Offsets are the stream's: the byte
/// at offset `first` is the oldest held.
#[derive(Debug)]
pub struct Backlog {
    size: usize,
    data: VecDeque<u8>,
    /// The offset of the oldest byte held (Redis's repl_backlog->offset).
    first: i64,
}

impl Backlog {
    /// An empty backlog of `size` bytes whose next byte has offset
    /// `next` (master_repl_offset + 1).
    pub fn new(size: usize, next: i64) -> Backlog {
        Backlog {
            size: size.max(1),
            data: VecDeque::new(),
            first: next,
        }
    }

    /// Appends the stream's next bytes, dropping the oldest past `size`.
    pub fn append(&mut self, bytes: &[u8]) {
        let keep = &bytes[bytes.len().saturating_sub(self.size)..];
        let over = (self.data.len() + keep.len()).saturating_sub(self.size);
        self.data.drain(..over);
        self.first += over as i64 + (bytes.len() - keep.len()) as i64;
        self.data.extend(keep);
    }

    /// repl_backlog_size.
    pub fn size(&self) -> usize {
        self.size
    }

    /// A new size (CONFIG SET repl-backlog-size): the newest bytes stay.
    pub fn resize(&mut self, size: usize) {
        self.size = size.max(1);
        let over = self.data.len().saturating_sub(self.size);
        self.data.drain(..over);
        self.first += over as i64;
    }

    /// Bytes allocated for the ring (INFO's mem_replication_backlog).
    pub fn allocated(&self) -> usize {
        self.data.capacity()
    }

    /// repl_backlog_first_byte_offset.
    pub fn first(&self) -> i64 {
        self.first
    }

    /// repl_backlog_histlen.
    pub fn histlen(&self) -> usize {
        self.data.len()
    }

    /// The bytes from offset `from` to the end, when the backlog holds
    /// them (`first <= from <= first + histlen`).
    pub fn since(&self, from: i64) -> Option<Vec<u8>> {
        if from < self.first || from > self.first + self.data.len() as i64 {
            return None;
        }
        let skip = (from - self.first) as usize;
        let (a, b) = self.data.as_slices();
        let mut out = Vec::with_capacity(self.data.len() - skip);
        if skip < a.len() {
            out.extend_from_slice(&a[skip..]);
            out.extend_from_slice(b);
        } else {
            out.extend_from_slice(&b[skip - a.len()..]);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_bytes_with_their_offsets() {
        let mut b = Backlog::new(8, 1);
        b.append(b"abcde");
        assert_eq!((b.first(), b.histlen()), (1, 5));
        assert_eq!(b.since(3).as_deref(), Some(&b"cde"[..]));
        b.append(b"fghij");
        // Offsets 3..=10 held: "cdefghij".
        assert_eq!((b.first(), b.histlen()), (3, 8));
        assert_eq!(b.since(3).as_deref(), Some(&b"cdefghij"[..]));
        assert_eq!(b.since(11).as_deref(), Some(&b""[..]));
        assert_eq!(b.since(2), None);
        assert_eq!(b.since(12), None);
        // A write larger than the ring keeps its tail.
        b.append(b"0123456789AB");
        assert_eq!((b.first(), b.histlen()), (15, 8));
        assert_eq!(b.since(15).as_deref(), Some(&b"456789AB"[..]));
        b.resize(4);
        assert_eq!(
            (b.first(), b.since(19).as_deref()),
            (19, Some(&b"89AB"[..]))
        );
    }
}
