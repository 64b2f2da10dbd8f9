//! Per-field expiry times of one hash (Redis 7.4's hash field expiration):
//! a field -> deadline map and the same pairs ordered by deadline, so the
//! earliest deadline and the due fields are found in O(log n).
//!
//! Deadlines are Unix times in milliseconds. A field is expired when its
//! deadline is before the current millisecond (Redis's `hfieldIsExpired`).
//! Knows nothing of commands or the keyspace; [`super::Hash`] keeps one
//! behind an `Option<Box<_>>`, so a hash that never had a field TTL pays one
//! pointer.

use std::collections::{BTreeSet, HashMap};

use super::pack::alloc_class;

#[derive(Clone, Default, Debug)]
pub struct FieldTtls {
    by_field: HashMap<Box<[u8]>, i64>,
    order: BTreeSet<(i64, Box<[u8]>)>,
}

impl FieldTtls {
    /// Number of fields with a deadline.
    pub fn len(&self) -> usize {
        self.by_field.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_field.is_empty()
    }

    /// `field`'s deadline.
    pub fn get(&self, field: &[u8]) -> Option<i64> {
        self.by_field.get(field).copied()
    }

    /// Sets `field`'s deadline; the previous one.
    pub fn set(&mut self, field: &[u8], when: i64) -> Option<i64> {
        let old = self.remove(field);
        self.by_field.insert(Box::from(field), when);
        self.order.insert((when, Box::from(field)));
        old
    }

    /// Clears `field`'s deadline; the one it had.
    pub fn remove(&mut self, field: &[u8]) -> Option<i64> {
        let old = self.by_field.remove(field)?;
        self.order.remove(&(old, Box::from(field)));
        Some(old)
    }

    /// The earliest deadline.
    pub fn min(&self) -> Option<i64> {
        self.order.first().map(|(w, _)| *w)
    }

    /// Up to `limit` fields whose deadline is before `now`, earliest first.
    pub fn due(&self, now: i64, limit: usize) -> Vec<Box<[u8]>> {
        self.order
            .iter()
            .take_while(|(w, _)| *w < now)
            .take(limit)
            .map(|(_, f)| f.clone())
            .collect()
    }

    /// Approximate heap bytes: each field is held twice, plus the nodes.
    pub fn mem_usage(&self) -> usize {
        self.by_field
            .keys()
            .map(|f| 2 * alloc_class(f.len()) + 48)
            .sum::<usize>()
            + alloc_class(self.by_field.capacity() * 24)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_remove_min_due() {
        let mut t = FieldTtls::default();
        assert_eq!(t.min(), None);
        assert_eq!(t.set(b"a", 30), None);
        assert_eq!(t.set(b"b", 10), None);
        assert_eq!(t.set(b"a", 5), Some(30));
        assert_eq!(t.min(), Some(5));
        assert_eq!(t.len(), 2);
        assert_eq!(
            t.due(11, 10),
            vec![Box::from(&b"a"[..]), Box::from(&b"b"[..])]
        );
        assert_eq!(t.due(10, 10), vec![Box::from(&b"a"[..])]);
        assert_eq!(t.due(100, 1).len(), 1);
        assert_eq!(t.remove(b"a"), Some(5));
        assert_eq!(t.remove(b"a"), None);
        assert_eq!(t.min(), Some(10));
        assert_eq!(t.get(b"b"), Some(10));
    }
}
