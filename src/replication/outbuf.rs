//! A replica's output buffer: the stream in blocks of 16 KB, as Redis's
//! replication buffer holds it, so that what it holds is what the
//! allocator counts. One growing `Vec` doubled its capacity, and the
//! allocator rounds a large allocation up to its size class: a stopped
//! replica's buffer held up to twice the bytes waiting in it.

use std::collections::VecDeque;

/// The size of a block (Redis's PROTO_REPLY_CHUNK_BYTES).
const BLOCK: usize = 16 * 1024;

/// Bytes in blocks of at most [`BLOCK`] bytes each (a block holding a
/// larger write alone is allocated to its size).
#[derive(Debug, Default, Clone)]
pub struct OutBuf {
    blocks: VecDeque<Vec<u8>>,
    len: usize,
}

impl OutBuf {
    /// Appends `bytes`, filling the last block first.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.len += bytes.len();
        if let Some(last) = self.blocks.back_mut() {
            let room = last.capacity() - last.len();
            let n = room.min(bytes.len());
            last.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        while !bytes.is_empty() {
            let n = bytes.len().min(BLOCK);
            let mut block = Vec::with_capacity(BLOCK);
            block.extend_from_slice(&bytes[..n]);
            self.blocks.push_back(block);
            bytes = &bytes[n..];
        }
    }

    /// Moves `other`'s blocks to the end of this one's.
    pub fn append(&mut self, other: &mut OutBuf) {
        self.len += std::mem::take(&mut other.len);
        self.blocks.append(&mut other.blocks);
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes allocated for them.
    pub fn allocated(&self) -> usize {
        self.blocks.iter().map(Vec::capacity).sum()
    }

    /// The blocks, oldest first.
    pub fn blocks(&self) -> impl Iterator<Item = &[u8]> {
        self.blocks.iter().map(Vec::as_slice)
    }

    /// Drops every byte and block.
    pub fn clear(&mut self) {
        *self = OutBuf::default();
    }
}

impl From<&[u8]> for OutBuf {
    fn from(bytes: &[u8]) -> OutBuf {
        let mut b = OutBuf::default();
        b.push(bytes);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_hold_the_bytes_in_order_and_in_bounded_blocks() {
        let mut b = OutBuf::default();
        let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        for piece in data.chunks(7_001) {
            b.push(piece);
        }
        assert_eq!(b.len(), data.len());
        let joined: Vec<u8> = b.blocks().flatten().copied().collect();
        assert_eq!(joined, data);
        assert!(b.blocks().all(|x| x.len() <= BLOCK));
        // Full blocks but the last: allocated is the bytes rounded up.
        assert_eq!(b.allocated(), data.len().div_ceil(BLOCK) * BLOCK);
        let mut c = OutBuf::from(&b"head"[..]);
        c.append(&mut b);
        assert!(b.is_empty() && b.allocated() == 0);
        assert_eq!(c.len(), data.len() + 4);
        let joined: Vec<u8> = c.blocks().flatten().copied().collect();
        assert_eq!(&joined[..4], b"head");
        assert_eq!(&joined[4..], &data[..]);
        c.clear();
        assert!(c.is_empty() && c.blocks().next().is_none());
    }
}
