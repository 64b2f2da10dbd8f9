//! The out-of-line values of one database, addressed by a `u32` index that
//! the key's entry holds: a slab in fixed chunks of 256 slots. Growing adds
//! a chunk and never copies or reallocates the others (a doubling vector
//! would copy every value at each growth and leave the old array's pages
//! behind in the allocator), and freed slots are reused first.

use std::ops::{Index, IndexMut};

use crate::types::Value;

const CHUNK: usize = 256;
const NONE: u32 = u32::MAX;

enum Slot {
    Free(u32),
    Used(Value),
}

#[derive(Default)]
pub struct Objects {
    chunks: Vec<Box<[Slot]>>,
    /// First free slot, chained through `Slot::Free`.
    free: Option<u32>,
    len: usize,
}

impl Objects {
    pub fn new() -> Objects {
        Objects::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Slots allocated (used and free).
    pub fn capacity(&self) -> usize {
        self.chunks.len() * CHUNK
    }

    fn slot(&self, i: usize) -> Option<&Slot> {
        self.chunks.get(i / CHUNK).map(|c| &c[i % CHUNK])
    }

    fn slot_mut(&mut self, i: usize) -> Option<&mut Slot> {
        self.chunks.get_mut(i / CHUNK).map(|c| &mut c[i % CHUNK])
    }

    /// Stores `v`; returns its index.
    pub fn insert(&mut self, v: Value) -> usize {
        let i = match self.free {
            Some(i) => i as usize,
            None => {
                // A new chunk, its slots chained into the free list.
                let base = self.chunks.len() * CHUNK;
                let chunk: Box<[Slot]> = (0..CHUNK)
                    .map(|k| {
                        let next = base + k + 1;
                        Slot::Free(if k + 1 < CHUNK { next as u32 } else { NONE })
                    })
                    .collect();
                self.chunks.push(chunk);
                base
            }
        };
        let slot = self.slot_mut(i).expect("free slot exists");
        let next = match slot {
            Slot::Free(n) => *n,
            Slot::Used(_) => unreachable!("free list points at a used slot"),
        };
        *slot = Slot::Used(v);
        self.free = (next != NONE).then_some(next);
        self.len += 1;
        i
    }

    /// Takes the value at `i` out, if there is one.
    pub fn try_remove(&mut self, i: usize) -> Option<Value> {
        let head = self.free.unwrap_or(NONE);
        let slot = self.slot_mut(i)?;
        if matches!(slot, Slot::Free(_)) {
            return None;
        }
        let Slot::Used(v) = std::mem::replace(slot, Slot::Free(head)) else {
            return None;
        };
        self.free = Some(i as u32);
        self.len -= 1;
        Some(v)
    }

    /// Takes the value at `i` out; `i` must hold one.
    pub fn remove(&mut self, i: usize) -> Value {
        self.try_remove(i).expect("object index in use")
    }
}

impl Index<usize> for Objects {
    type Output = Value;
    fn index(&self, i: usize) -> &Value {
        match self.slot(i) {
            Some(Slot::Used(v)) => v,
            _ => panic!("object index {i} not in use"),
        }
    }
}

impl IndexMut<usize> for Objects {
    fn index_mut(&mut self, i: usize) -> &mut Value {
        match self.slot_mut(i) {
            Some(Slot::Used(v)) => v,
            _ => panic!("object index {i} not in use"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: usize) -> Value {
        Value::Str(n.to_string().into_bytes())
    }

    fn get(o: &Objects, i: usize) -> Vec<u8> {
        match &o[i] {
            Value::Str(v) => v.clone(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn insert_remove_reuse_across_chunks() {
        let mut o = Objects::new();
        let ids: Vec<usize> = (0..3000).map(|n| o.insert(s(n))).collect();
        assert_eq!(o.len(), 3000);
        let cap = 3000usize.div_ceil(CHUNK) * CHUNK;
        assert_eq!(o.capacity(), cap);
        for (n, &i) in ids.iter().enumerate() {
            assert_eq!(get(&o, i), n.to_string().into_bytes());
        }
        for &i in ids.iter().step_by(2) {
            assert!(o.try_remove(i).is_some());
            assert!(o.try_remove(i).is_none());
        }
        assert_eq!(o.len(), 1500);
        // Freed slots are reused before a new chunk is added.
        for n in 0..1500 {
            o.insert(s(n));
        }
        assert_eq!(o.capacity(), cap);
        assert_eq!(o.len(), 3000);
        assert!(o.try_remove(cap + 5).is_none());
    }
}
