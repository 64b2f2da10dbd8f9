//! A database's part of a background save: a point-in-time image of its
//! keys, written while commands go on changing them, without a fork and
//! without copying the dataset.
//!
//! The walk visits keys group by group (`Table::walk_group`: a key's group
//! is its home at the table's size when the save began, which no resize
//! changes; the groups in order go through memory in order), a slice at a
//! time.
//! Every change to a key passes `Db::snap_before_change` first (the
//! mutating methods of `Db` and the write guard's first `&mut` call it, so
//! a write cannot skip it): if the walk has not reached the key yet, its
//! value as it was when the save began is encoded now, into the `ahead`
//! buffer, and the key is remembered as done so the walk skips it. A key
//! created after the save began is remembered as done without a record.
//! So the image holds each key that existed at the start exactly once,
//! with its value at the start, and no key created since; the extra
//! memory is only the keys changed ahead of the walk.
//!
//! Emptying or swapping a database mid-save first finishes its walk
//! (`snap_finish`): the rest of its records go to `ahead`.
//!
//! The records themselves are made by an encoder the save passes in (RDB
//! key records, `crate::persist::rdb`), so this module knows no file format.

use std::collections::HashSet;
use std::sync::Arc;

use super::entry::{Entry, FLAG_BOUND};
use super::{Db, ValueRef};
use crate::types::table::Table;

/// Appends one key's record: key, value, expire.
pub type Encoder = Arc<dyn Fn(&mut Vec<u8>, &[u8], ValueRef<'_>, Option<i64>) + Send + Sync>;

type KeySet = HashSet<Box<[u8]>, foldhash::fast::RandomState>;

/// How many groups ahead the walk prefetches entries.
const PREFETCH_AHEAD: u64 = 12;

pub struct DbSnap {
    /// Keys in groups below this were walked.
    pos: u64,
    /// The table's bits when the save began: groups are homes at that size.
    bits: u32,
    /// The end of the walk (1 << bits).
    end: u64,
    /// Keys at or past `pos` already handled (written ahead, or created
    /// after the start): the walk skips them.
    done: KeySet,
    /// Records written ahead of the walk, not yet taken by the save.
    ahead: Vec<u8>,
    encode: Encoder,
    /// Keys and keys with a TTL when the save began (RESIZEDB).
    sizes: (usize, usize),
    /// Keys written so far (INFO current_save_keys_processed).
    written: usize,
}

impl Db {
    /// Starts this database's part of a save. An empty database has
    /// nothing to write and takes no part.
    pub fn snap_begin(&mut self, encode: Encoder) {
        let bits = self.table.bits();
        self.snap = (!self.is_empty()).then(|| DbSnap {
            pos: 0,
            bits,
            end: 1u64 << bits,
            done: KeySet::default(),
            ahead: Vec::new(),
            encode,
            sizes: (self.len(), self.expires_len()),
            written: 0,
        });
    }

    /// Whether this database is part of a save still to be written out.
    pub fn snap_active(&self) -> bool {
        self.snap.is_some()
    }

    /// The sizes when the save began (keys, keys with a TTL).
    pub fn snap_sizes(&self) -> (usize, usize) {
        self.snap.as_ref().map_or((0, 0), |s| s.sizes)
    }

    /// Keys written so far.
    pub fn snap_written(&self) -> usize {
        self.snap.as_ref().map_or(0, |s| s.written)
    }

    /// Takes the records written ahead of the walk.
    pub fn snap_take_ahead(&mut self) -> Vec<u8> {
        self.snap
            .as_mut()
            .map(|s| std::mem::take(&mut s.ahead))
            .unwrap_or_default()
    }

    /// Walks on, appending records to `out`, until about `budget` keys
    /// are written or the walk is complete. Returns whether it is (then
    /// the records ahead must still be taken, and `snap_end` called).
    pub fn snap_step(&mut self, out: &mut Vec<u8>, budget: usize) -> bool {
        let Some(mut s) = self.snap.take() else {
            return true;
        };
        let mut n = 0;
        // Groups looked at bound the step too: a sparse table has many
        // empty ones.
        let mut groups = 0;
        while s.pos < s.end && n < budget && groups < budget * 8 {
            self.table.prefetch_group(s.pos + PREFETCH_AHEAD, s.bits);
            self.table.walk_group(s.pos, s.bits, |_, e| {
                if !s.done.is_empty() && s.done.remove(e.key()) {
                    return;
                }
                if e.flags() & FLAG_BOUND == 0 {
                    (s.encode)(out, e.key(), self.view(e), e.expire());
                    s.written += 1;
                }
                n += 1;
            });
            s.pos += 1;
            groups += 1;
        }
        let complete = s.pos >= s.end;
        self.snap = Some(s);
        complete
    }

    /// Ends this database's part (after its walk and records were taken),
    /// or abandons it.
    pub fn snap_end(&mut self) {
        self.snap = None;
    }

    /// Finishes the walk at once, into the records ahead (before the
    /// database is emptied or swapped).
    pub(super) fn snap_finish(&mut self) {
        let mut rest = Vec::new();
        while !self.snap_step(&mut rest, usize::MAX / 16) {}
        if let Some(s) = self.snap.as_mut() {
            s.ahead.extend_from_slice(&rest);
            s.done = KeySet::default();
        }
    }

    /// The key in `slot` is about to change or go: if the walk has not
    /// reached it, write it now as it is. Every mutation calls this first.
    #[inline]
    pub(super) fn snap_before_change(&mut self, slot: usize) {
        if self.snap.as_ref().is_some_and(|s| s.pos < s.end) {
            self.snap_write_ahead(slot);
        }
    }

    fn snap_write_ahead(&mut self, slot: usize) {
        let Some(mut s) = self.snap.take() else {
            return;
        };
        if self.table.group_at(slot, s.bits) >= s.pos {
            if let Some(e) = self.table.slot(slot) {
                if s.done.insert(Box::from(e.key())) && e.flags() & FLAG_BOUND == 0 {
                    (s.encode)(&mut s.ahead, e.key(), self.view(e), e.expire());
                    s.written += 1;
                }
            }
        }
        self.snap = Some(s);
    }

    /// `key`, absent, is about to be created: the image must not have it.
    #[inline]
    pub(super) fn snap_before_create(&mut self, key: &[u8]) {
        if let Some(s) = self.snap.as_mut() {
            if s.pos < s.end && Table::<Entry>::group_of(self.table.hash(key), s.bits) >= s.pos {
                s.done.insert(Box::from(key));
            }
        }
    }
}
