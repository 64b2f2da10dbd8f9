//! The hash table under the keyspace and under large hashes, sets and sorted
//! sets: open addressing, linear probing, backward-shift deletion.
//!
//! Written here instead of using hashbrown for three Redis behaviours that need
//! access to the bucket array (SCAN/HSCAN/SSCAN/ZSCAN, RANDOMKEY/HRANDFIELD/...): SCAN's reverse-binary cursor (every key present
//! for the whole scan is returned, across resizes), RANDOMKEY in O(1), and
//! sampling. A key's *home* bucket is `hash & mask`; all keys with one home sit
//! in the run of occupied slots that starts there, so a cursor names a home.
//!
//! Must not know what it stores: entries come in through `Keyed`; it names
//! nothing of the crate (no value type, keyspace or command).

use std::hash::BuildHasher;

/// What a table holds: anything with a byte-string key.
pub trait Keyed {
    fn key(&self) -> &[u8];
    /// Where the entry's own data lives, if elsewhere (for a prefetch).
    fn addr(&self) -> *const u8 {
        std::ptr::null()
    }
}

impl Keyed for Box<[u8]> {
    fn key(&self) -> &[u8] {
        self
    }
}

pub struct Table<Entry> {
    /// 0 = empty; otherwise the key's hash with the top bit forced on.
    hashes: Vec<u32>,
    slots: Vec<Option<Entry>>,
    len: usize,
    hasher: foldhash::fast::RandomState,
}

const OCCUPIED: u32 = 0x8000_0000;

/// A hint to load the cache line at `p`; never faults, never reads.
#[inline]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCH is only a hint; it does not fault or read memory
    // architecturally, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl<Entry: Keyed> Default for Table<Entry> {
    fn default() -> Self {
        Self::new()
    }
}

/// A copy made by inserting a clone of every entry into a new table, not by
/// copying the bucket arrays: the copy's bucket count fits its entries (a
/// table only shrinks once under a tenth full, so the source may have many
/// more buckets than it needs) and it has its own hash seed, as every new
/// table does.
impl<Entry: Keyed + Clone> Clone for Table<Entry> {
    fn clone(&self) -> Self {
        let mut t = Table::new();
        for e in self.iter() {
            t.insert(e.clone());
        }
        t
    }
}

impl<Entry: Keyed> Table<Entry> {
    pub fn new() -> Self {
        Table {
            hashes: Vec::new(),
            slots: Vec::new(),
            len: 0,
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    pub fn hash(&self, key: &[u8]) -> u32 {
        (self.hasher.hash_one(key) as u32) | OCCUPIED
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of buckets (a power of two, or 0).
    pub fn buckets(&self) -> usize {
        self.hashes.len()
    }

    fn mask(&self) -> usize {
        self.hashes.len().wrapping_sub(1)
    }

    pub fn find(&self, key: &[u8]) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let h = self.hash(key);
        self.find_hashed(key, h)
    }

    fn find_hashed(&self, key: &[u8], h: u32) -> Option<usize> {
        self.find_with(h, |e| e.key() == key)
    }

    /// `count` distinct occupied slots, for HRANDFIELD/SRANDMEMBER with a
    /// positive count below the size: when `count` is over a third of the
    /// entries, every slot is collected and random ones dropped (as Redis
    /// does); otherwise random slots are drawn until `count` distinct ones.
    pub fn random_distinct_slots(
        &self,
        count: usize,
        rng: &mut impl FnMut() -> usize,
    ) -> Vec<usize> {
        if count.saturating_mul(3) > self.len {
            let mut all: Vec<usize> = (0..self.slots.len())
                .filter(|&i| self.slots[i].is_some())
                .collect();
            while all.len() > count {
                let i = rng() % all.len();
                all.swap_remove(i);
            }
            return all;
        }
        let mut seen = std::collections::HashSet::with_capacity(count);
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            let Some(i) = self.random_slot(rng()) else {
                break;
            };
            if seen.insert(i) {
                out.push(i);
            }
        }
        out
    }

    pub fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.find(key).and_then(|i| self.slots[i].as_ref())
    }

    pub fn slot(&self, i: usize) -> Option<&Entry> {
        self.slots.get(i).and_then(|s| s.as_ref())
    }

    pub fn slot_mut(&mut self, i: usize) -> Option<&mut Entry> {
        self.slots.get_mut(i).and_then(|s| s.as_mut())
    }

    /// Replaces the entry in slot `i` (same key).
    pub fn replace_at(&mut self, i: usize, e: Entry) -> Entry {
        self.slots[i].replace(e).expect("replace_at on empty slot")
    }

    /// Inserts or replaces; returns the previous entry for the same key.
    pub fn insert(&mut self, e: Entry) -> Option<Entry> {
        let h = self.hash(e.key());
        if self.len > 0 {
            if let Some(i) = self.find_hashed(e.key(), h) {
                return self.slots[i].replace(e);
            }
        }
        if (self.len + 1) * 8 > self.buckets() * 7 {
            self.resize((self.buckets() * 2).max(16));
        }
        self.place(h, e);
        self.len += 1;
        None
    }

    fn place(&mut self, h: u32, e: Entry) {
        let mask = self.mask();
        let mut i = h as usize & mask;
        while self.hashes[i] != 0 {
            i = (i + 1) & mask;
        }
        self.hashes[i] = h;
        self.slots[i] = Some(e);
    }

    /// Room for `n` more entries without a resize on the way.
    pub fn reserve(&mut self, n: usize) {
        let want = self.len + n;
        if want * 8 > self.buckets() * 7 {
            self.resize((want * 8 / 7 + 1).next_power_of_two().max(16));
        }
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let i = self.find(key)?;
        Some(self.remove_at(i))
    }

    pub fn remove_at(&mut self, mut i: usize) -> Entry {
        let e = self.slots[i].take().expect("remove_at on empty slot");
        self.hashes[i] = 0;
        self.len -= 1;
        // Backward shift: pull later members of the run into the hole when
        // their home is not between the hole and their slot.
        let mask = self.mask();
        let mut j = (i + 1) & mask;
        while self.hashes[j] != 0 {
            let home = self.hashes[j] as usize & mask;
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(i) & mask) {
                self.hashes[i] = self.hashes[j];
                self.slots[i] = self.slots[j].take();
                self.hashes[j] = 0;
                i = j;
            }
            j = (j + 1) & mask;
        }
        if self.buckets() > 16 && self.len * 10 < self.buckets() {
            let want = ((self.len * 8 / 7) + 1).next_power_of_two().max(16);
            self.resize(want);
        }
        e
    }

    fn resize(&mut self, buckets: usize) {
        let old_hashes = std::mem::replace(&mut self.hashes, vec![0; buckets]);
        let old_slots = std::mem::replace(&mut self.slots, Vec::with_capacity(buckets));
        self.slots.resize_with(buckets, || None);
        for (h, s) in old_hashes.into_iter().zip(old_slots) {
            if let Some(e) = s {
                self.place(h, e);
            }
        }
    }

    pub fn clear(&mut self) {
        self.hashes = Vec::new();
        self.slots = Vec::new();
        self.len = 0;
    }

    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.slots.iter().filter_map(|s| s.as_ref())
    }

    /// Calls `f` for every entry whose home bucket is `cursor`'s bucket and
    /// returns the next cursor (0 when the scan is complete).
    pub fn scan_step(&self, cursor: u64, mut f: impl FnMut(&Entry)) -> u64 {
        if self.len == 0 {
            return 0;
        }
        let mask = self.mask();
        let home = cursor as usize & mask;
        let mut i = home;
        while self.hashes[i] != 0 {
            if self.hashes[i] as usize & mask == home {
                if let Some(e) = &self.slots[i] {
                    f(e);
                }
            }
            i = (i + 1) & mask;
            if i == home {
                break;
            }
        }
        // Redis's reverse-binary increment.
        let mut v = cursor | !(mask as u64);
        v = v.reverse_bits();
        v = v.wrapping_add(1);
        v.reverse_bits()
    }

    /// The number of bits of the home index (buckets = 1 << bits).
    pub fn bits(&self) -> u32 {
        self.buckets().trailing_zeros()
    }

    /// The group of hash `h` for a walk that began at `bits`: its home at
    /// that size. Groups stay put when the table grows or shrinks later
    /// (a key's group is its hash's low bits), so a walk over groups in
    /// order (a background save) misses and repeats no key across
    /// resizes, and at the size it began with it goes through memory in
    /// order.
    pub fn group_of(h: u32, bits: u32) -> u64 {
        (h as u64) & ((1u64 << bits) - 1)
    }

    /// The group of the key in slot `i` (occupied).
    pub fn group_at(&self, i: usize, bits: u32) -> u64 {
        Self::group_of(self.hashes[i], bits)
    }

    /// Asks the CPU to start loading the entries of group `g` (walks that
    /// run ahead of themselves hide the memory latency of scattered
    /// entries). Only the group's first home at the walk's size.
    #[inline]
    pub fn prefetch_group(&self, g: u64, bits: u32) {
        if self.len == 0 || self.bits() != bits {
            return;
        }
        let mask = self.mask();
        for i in [g as usize & mask, (g as usize + 1) & mask] {
            if let Some(e) = &self.slots[i] {
                prefetch(e.addr());
            }
        }
    }

    /// Calls `f` for every entry of group `g` (of a walk that began at
    /// `bits`).
    pub fn walk_group(&self, g: u64, bits: u32, mut f: impl FnMut(usize, &Entry)) {
        if self.len == 0 {
            return;
        }
        let now = self.bits();
        let mask = self.mask();
        let run = |home: usize, f: &mut dyn FnMut(usize, &Entry)| {
            let mut i = home;
            while self.hashes[i] != 0 {
                if self.hashes[i] as usize & mask == home
                    && Self::group_of(self.hashes[i], bits) == g
                {
                    if let Some(e) = &self.slots[i] {
                        f(i, e);
                    }
                }
                i = (i + 1) & mask;
                if i == home {
                    break;
                }
            }
        };
        if now >= bits {
            // Grown: the group is the homes g, g + 2^bits, g + 2*2^bits...
            for k in 0..(1usize << (now - bits)) {
                run(g as usize + (k << bits), &mut f);
            }
        } else {
            // Shrunk: one home holds several groups.
            run(g as usize & mask, &mut f);
        }
    }

    /// An occupied slot chosen at random from `r` (any usize), each with
    /// the same chance; None when empty. Random slots are probed until one
    /// is occupied (the probes are derived from `r`). Taking the next
    /// occupied slot after a random one, as this did, favours the slots
    /// that follow long empty runs: SRANDMEMBER and HRANDFIELD on small
    /// hashtables picked visibly unevenly that way. After `PROBES` misses
    /// (a table is at least a tenth full, so under 0.2% of picks) it still
    /// walks on from the last probe, so a pick stays O(1) on a sparse
    /// table (RANDOMKEY, eviction sampling).
    pub fn random_slot(&self, r: usize) -> Option<usize> {
        const PROBES: u32 = 64;
        if self.len == 0 {
            return None;
        }
        let mask = self.mask();
        let mut x = r as u64;
        for _ in 0..PROBES {
            // splitmix64: a fresh, well-mixed index per probe.
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            let i = (z ^ (z >> 31)) as usize & mask;
            if self.hashes[i] != 0 {
                return Some(i);
            }
        }
        let mut i = x as usize & mask;
        loop {
            if self.hashes[i] != 0 {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Approximate heap bytes used by the table itself.
    pub fn overhead(&self) -> usize {
        self.hashes.capacity() * 4 + self.slots.capacity() * std::mem::size_of::<Option<Entry>>()
    }

    /// Mutable access to every entry (values changed in place; keys must not change).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Entry> {
        self.slots.iter_mut().filter_map(|s| s.as_mut())
    }

    /// Takes every entry out, leaving the table empty.
    pub fn drain(&mut self) -> impl Iterator<Item = Entry> {
        self.hashes = Vec::new();
        self.len = 0;
        std::mem::take(&mut self.slots).into_iter().flatten()
    }

    /// Capacity in entries before the next grow (for tests of shrinking).
    pub fn capacity(&self) -> usize {
        self.buckets() * 7 / 8
    }

    /// The slot of the entry with hash `h` (from [`Table::hash`]) for which
    /// `eq` holds. For tables whose entries do not carry their key themselves
    /// (a handle into storage kept elsewhere): `Keyed::key` is not called.
    pub fn find_with(&self, h: u32, mut eq: impl FnMut(&Entry) -> bool) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let h = h | OCCUPIED;
        let mask = self.mask();
        let mut i = h as usize & mask;
        loop {
            let sh = self.hashes[i];
            if sh == 0 {
                return None;
            }
            if sh == h {
                if let Some(e) = &self.slots[i] {
                    if eq(e) {
                        return Some(i);
                    }
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Inserts an entry the caller knows to be absent, under hash `h` (from
    /// [`Table::hash`] of its key). `Keyed::key` is not called.
    pub fn insert_unique(&mut self, h: u32, e: Entry) {
        if (self.len + 1) * 8 > self.buckets() * 7 {
            self.resize((self.buckets() * 2).max(16));
        }
        self.place(h | OCCUPIED, e);
        self.len += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn e(k: &str) -> Box<[u8]> {
        Box::from(k.as_bytes())
    }

    #[test]
    fn insert_find_remove_many() {
        let mut t = Table::new();
        for i in 0..5000 {
            assert!(t.insert(e(&format!("k{i}"))).is_none());
        }
        assert_eq!(t.len(), 5000);
        for i in (0..5000).step_by(2) {
            assert!(t.remove(format!("k{i}").as_bytes()).is_some());
        }
        for i in 0..5000 {
            assert_eq!(
                t.get(format!("k{i}").as_bytes()).is_some(),
                i % 2 == 1,
                "k{i}"
            );
        }
        assert_eq!(t.len(), 2500);
        assert!(t.insert(e("k1")).is_some());
        assert_eq!(t.len(), 2500);
    }

    #[test]
    fn clone_holds_the_same_entries_in_buckets_sized_for_them() {
        let mut t = Table::new();
        for i in 0..1000 {
            t.insert(e(&format!("k{i}")));
        }
        // A table shrinks under a tenth full: 205 of 2048 buckets is just
        // above that.
        for i in 205..1000 {
            t.remove(format!("k{i}").as_bytes());
        }
        assert_eq!(t.buckets(), 2048);
        let c = t.clone();
        assert_eq!(c.len(), 205);
        assert!((0..205).all(|i| c.get(format!("k{i}").as_bytes()).is_some()));
        assert_eq!(c.buckets(), 256);
    }

    #[test]
    fn group_walk_sees_each_key_once_across_resizes() {
        // Keys present throughout are seen exactly once, whatever the
        // table does in between.
        let mut t = Table::new();
        for i in 0..2000 {
            t.insert(e(&format!("a{i}")));
        }
        let bits = t.bits();
        let mut seen: Vec<Vec<u8>> = Vec::new();
        for g in 0..(1u64 << bits) {
            t.walk_group(g, bits, |i, en| {
                assert_eq!(t.group_at(i, bits), g);
                seen.push(en.key().to_vec());
            });
            if g == 50 {
                for i in 0..20000 {
                    t.insert(e(&format!("b{i}")));
                }
            }
            if g == 1500 {
                for i in 0..20000 {
                    t.remove(format!("b{i}").as_bytes());
                }
            }
        }
        let a: Vec<_> = seen.iter().filter(|k| k[0] == b'a').collect();
        let unique: HashSet<_> = a.iter().collect();
        assert_eq!(a.len(), 2000);
        assert_eq!(unique.len(), 2000);
        // Shrunk below the start: the survivors are each seen once.
        let mut t = Table::new();
        for i in 0..5000 {
            t.insert(e(&format!("c{i}")));
        }
        let bits = t.bits();
        let mut seen: Vec<Vec<u8>> = Vec::new();
        for g in 0..(1u64 << bits) {
            t.walk_group(g, bits, |_, en| seen.push(en.key().to_vec()));
            if g == 10 {
                for i in 100..5000 {
                    t.remove(format!("c{i}").as_bytes());
                }
            }
        }
        assert!(t.bits() < bits);
        let survivors: Vec<_> = seen
            .iter()
            .filter(|k| {
                std::str::from_utf8(&k[1..])
                    .ok()
                    .and_then(|n| n.parse::<usize>().ok())
                    .is_some_and(|n| n < 100)
            })
            .collect();
        let unique: HashSet<_> = survivors.iter().collect();
        assert_eq!(survivors.len(), 100);
        assert_eq!(unique.len(), 100);
    }

    #[test]
    fn scan_returns_all_keys_across_resizes() {
        let mut t = Table::new();
        for i in 0..1000 {
            t.insert(e(&format!("a{i}")));
        }
        let mut seen = HashSet::new();
        let mut cursor = 0u64;
        let mut step = 0;
        loop {
            cursor = t.scan_step(cursor, |en| {
                seen.insert(en.key().to_vec());
            });
            step += 1;
            // Grow and shrink the table mid-scan with unrelated keys.
            if step == 100 {
                for i in 0..5000 {
                    t.insert(e(&format!("b{i}")));
                }
            }
            if step == 400 {
                for i in 0..5000 {
                    t.remove(format!("b{i}").as_bytes());
                }
            }
            if cursor == 0 {
                break;
            }
        }
        for i in 0..1000 {
            assert!(seen.contains(format!("a{i}").as_bytes()), "missing a{i}");
        }
    }
}
