//! The list type: Redis 7.0's *quicklist*, a deque of nodes each holding a
//! packed buffer of elements.
//!
//! In Redis 7.0 every list reports OBJECT ENCODING `quicklist` (the small
//! `listpack` list encoding arrived in 7.2), so there is one encoding here;
//! [`List::encoding`] always returns `"quicklist"`.
//!
//! # Memory layout
//!
//! ```text
//! List   { nodes: VecDeque<Node>, len: usize, depth: usize }  48 bytes
//! Node   { buf: Vec<u8>, count: usize, plain, lzf, tried }     40 bytes, inline in the VecDeque
//! buf    entry entry entry ...                                 one heap allocation per node
//! buf    [varint raw length][LZF of the entries]               a compressed node
//! entry  [varint len][data bytes][varint len, bytes reversed]  len + 2 bytes when len < 128
//! ```
//!
//! The length prefix is LEB128 (7 bits a byte, low bits first, high bit =
//! "more bytes follow"): 1 byte below 128, 2 below 16384, 3 below 2^21, ...
//! The same bytes are repeated in reverse order after the data (a "backlen",
//! as Redis's listpack has), so an entry can be decoded from its end: that is
//! what makes `pop_back`, reverse iteration and index lookups from the tail
//! O(1) per element instead of a re-scan of the node. An element of `L` bytes
//! costs `L + 2 * varint_len(L)` bytes: 12 bytes for a 10-byte string, as in
//! Redis's listpack (1 encoding byte + data + 1 backlen byte).
//!
//! Node buffers grow and shrink to exact jemalloc size classes (8, 16, 32, 48,
//! ..., 128, then four classes per doubling: 160, 192, 224, 256, 320, ...), so
//! the capacity reported by [`List::mem_usage`] is what the server's allocator
//! (jemalloc) really hands out, and no `Vec` doubling slack is ever held.
//! A full 8 KB node (the default fill -2) sits in the 8192-byte class.
//!
//! For 1,000,000 elements of 10 bytes with fill -2: 682 entries of 12 bytes a
//! node (8184 bytes, class 8192), 1467 nodes, ~12.0 MB of buffers plus 64 KB
//! of node headers: about 12.1 bytes per element. Redis 7.0 uses the same
//! 8192-byte listpacks plus a separately allocated 32-byte quicklistNode each.
//!
//! # Node size limit (`fill`, the config `list-max-listpack-size`)
//!
//! Every method that adds elements takes `fill: i64`:
//! * `fill > 0`: at most `fill` elements a node, and (Redis's "safety limit")
//!   at most 8192 bytes a node; `fill == 0` is treated as 1.
//! * `fill` in -1..=-5: at most 4/8/16/32/64 KB a node; below -5 counts as -5.
//!
//! The limit is checked when an element is added to an existing node; an
//! element that does not fit starts a new node, so an element larger than the
//! limit always sits alone in its node. Changing `fill` between calls is fine:
//! existing nodes are left as they are. Nodes are never empty: a node whose
//! last element goes is removed. Small adjacent nodes are merged after a node
//! split (insertion into the middle of a full node), as Redis does; `remove`
//! and `trim` do not merge (they take no `fill`), as Redis's LREM/LTRIM.
//!
//! # Plain nodes
//!
//! An element of at least the packed threshold (quicklist.c's
//! `packed_threshold`: 1 GB, or what [`set_packed_threshold`] set, for the
//! whole process as in Redis) goes into a *plain* node of its own, which no
//! other element ever joins and which is never merged (Redis's
//! QUICKLIST_NODE_CONTAINER_PLAIN: the RDB writer keeps it as container 1,
//! see [`List::node_shapes`]). LSET moves an element between a plain and a
//! packed node as Redis's quicklistReplaceEntry does.
//!
//! # Compression (`list-compress-depth`)
//!
//! A list has the compress depth it was created with
//! ([`List::set_compress_depth`]; 0, the default, compresses nothing). The
//! nodes further than `depth` from both ends are kept LZF-compressed when
//! that pays, as __quicklistCompressNode decides: a node of at least 48
//! bytes, kept compressed only when that saves more than 8 bytes (a node
//! that did not compress is marked, and tried again only once changed). The
//! end nodes are never compressed, so pushes and pops at the ends touch
//! raw bytes. A command that changes an inner node decompresses it in place
//! and compresses it again when done (Redis's "decompress for use"); a push
//! or pop only re-checks the `depth + 1` nodes at each end, any other change
//! every node's flags. Reads never change the list: an iterator decompresses
//! a compressed node into a buffer of its own and yields its elements as
//! copies ([`Iter`] yields `Cow`), everything else is borrowed. With depth
//! 0 all of this is one branch per change.
//!
//! # Costs (n = elements, N = nodes, S = node bytes, M = bytes of the element)
//!
//! | operation | cost |
//! |---|---|
//! | `push_back`, `pop_back` | O(M), amortised (a realloc at a size-class boundary) |
//! | `push_front`, `pop_front` | O(S + M): the node's bytes are shifted, as in Redis |
//! | `get`, `set`, `insert_at` | O(N + S + M): whole nodes skipped by count, from the nearer end of the list, then from the nearer end of the node |
//! | `iter`, `iter_rev` | O(1) per element |
//! | `range(a, b)` | O(N + S) to position, then O(1) per element |
//! | `insert` (LINSERT) | O(position of the pivot) + O(N + S) |
//! | `remove` (LREM) | O(n) in one pass, each node compacted once |
//! | `trim` (LTRIM) | O(nodes dropped + S) |
//! | `positions` (LPOS) | O(elements compared) |
//! | `len`, `is_empty` | O(1) |
//! | `mem_usage` | O(N) |

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::lzf::{lzf_compress, lzf_decompress};
use super::pack::{alloc_class, push_varint, read_varint, varint_len};

/// quicklist.c's `packed_threshold`: an element of at least this many bytes
/// goes into a *plain* node of its own. Process-wide, as Redis's static
/// (DEBUG QUICKLIST-PACKED-THRESHOLD sets it); 1 GB by default.
static PACKED_THRESHOLD: AtomicUsize = AtomicUsize::new(DEFAULT_PACKED_THRESHOLD);
const DEFAULT_PACKED_THRESHOLD: usize = 1 << 30;

/// quicklistisSetPackedThreshold: 0 restores the default; false (nothing
/// changed) above 4 GB - 1 MB.
pub fn set_packed_threshold(sz: u64) -> bool {
    if sz > (1u64 << 32) - (1 << 20) {
        return false;
    }
    let sz = if sz == 0 {
        DEFAULT_PACKED_THRESHOLD
    } else {
        sz as usize
    };
    PACKED_THRESHOLD.store(sz, Ordering::Relaxed);
    true
}

/// isLargeElement: whether an element of `len` bytes needs a plain node.
fn is_large(len: usize) -> bool {
    #[cfg(test)]
    if let Some(t) = TEST_THRESHOLD.with(|t| t.get()) {
        return len >= t;
    }
    len >= PACKED_THRESHOLD.load(Ordering::Relaxed)
}

#[cfg(test)]
thread_local! {
    /// A unit test's own threshold (tests share the process-wide one).
    static TEST_THRESHOLD: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// MIN_COMPRESS_BYTES: smaller nodes are never compressed.
const MIN_COMPRESS_BYTES: usize = 48;
/// MIN_COMPRESS_IMPROVE: a compressed node is kept only when it saves more.
const MIN_COMPRESS_IMPROVE: usize = 8;

/// Redis's SIZE_SAFETY_LIMIT: node byte limit when `fill` is a count.
const SIZE_SAFETY_LIMIT: usize = 8192;
/// Node byte limits for fill -1..=-5.
const SIZE_LIMITS: [usize; 5] = [4096, 8192, 16384, 32768, 65536];

/// The node limits derived from `fill`.
#[derive(Clone, Copy, Debug)]
struct Limit {
    count: usize,
    bytes: usize,
}

impl Limit {
    fn new(fill: i64) -> Limit {
        if fill >= 0 {
            Limit {
                count: usize::try_from(fill.max(1)).unwrap_or(usize::MAX),
                bytes: SIZE_SAFETY_LIMIT,
            }
        } else {
            let i = if fill <= -5 { 4 } else { (-fill - 1) as usize };
            Limit {
                count: usize::MAX,
                bytes: SIZE_LIMITS[i],
            }
        }
    }

    /// Whether a node may hold `count` elements in `bytes` bytes.
    fn allows(self, count: usize, bytes: usize) -> bool {
        count <= self.count && bytes <= self.bytes
    }
}

/// Bytes an element of `len` bytes takes in a node.
fn entry_size(len: usize) -> usize {
    len + 2 * varint_len(len)
}

/// Writes the entry for `data` into `dst`, which is exactly `entry_size` long.
fn write_entry(dst: &mut [u8], data: &[u8]) {
    let k = varint_len(data.len());
    let last = dst.len() - 1;
    let mut n = data.len();
    for i in 0..k {
        let mut b = (n & 0x7f) as u8;
        n >>= 7;
        if i + 1 < k {
            b |= 0x80;
        }
        dst[i] = b;
        dst[last - i] = b;
    }
    dst[k..k + data.len()].copy_from_slice(data);
}

/// Decodes the entry starting at `pos`: (data start, data length).
/// The entry ends at `start + len + varint_len(len)`.
fn read_fwd(buf: &[u8], pos: usize) -> (usize, usize) {
    let mut n = 0usize;
    let mut shift = 0;
    let mut i = pos;
    loop {
        let b = buf[i];
        i += 1;
        n |= ((b & 0x7f) as usize) << shift;
        if b & 0x80 == 0 {
            return (i, n);
        }
        shift += 7;
    }
}

/// Decodes the entry ending at `end`: (entry start, data start, data length).
fn read_back(buf: &[u8], end: usize) -> (usize, usize, usize) {
    let mut n = 0usize;
    let mut shift = 0;
    let mut i = end;
    loop {
        i -= 1;
        let b = buf[i];
        n |= ((b & 0x7f) as usize) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    let k = end - i;
    let data = i - n;
    (data - k, data, n)
}

/// Makes room for `extra` more bytes, growing to an exact size class.
fn reserve_for(buf: &mut Vec<u8>, extra: usize) {
    let need = buf.len() + extra;
    if need > buf.capacity() {
        buf.reserve_exact(alloc_class(need) - buf.len());
    }
}

/// Gives back capacity above the size class of the current length.
fn shrink(buf: &mut Vec<u8>) {
    let c = alloc_class(buf.len());
    if buf.capacity() > c {
        buf.shrink_to(c);
    }
}

/// One quicklist node: `count` packed entries in `buf` (never empty inside a
/// `List`). A compressed node's `buf` is the entries' length (a varint)
/// then their LZF compression.
#[derive(Clone, Default)]
struct Node {
    buf: Vec<u8>,
    count: usize,
    /// A plain node (QUICKLIST_NODE_CONTAINER_PLAIN): one large element,
    /// which never shares its node.
    plain: bool,
    /// `buf` is compressed.
    lzf: bool,
    /// Compression was tried on the current entries and did not pay.
    tried: bool,
}

impl Node {
    /// A node holding only `v`.
    fn with(v: &[u8]) -> Node {
        let es = entry_size(v.len());
        let mut buf = Vec::with_capacity(alloc_class(es));
        buf.resize(es, 0);
        write_entry(&mut buf, v);
        Node {
            buf,
            count: 1,
            ..Node::default()
        }
    }

    /// A plain node holding `v`.
    fn plain(v: &[u8]) -> Node {
        Node {
            plain: true,
            ..Node::with(v)
        }
    }

    /// Whether `v` (of entry size `es`) may be added under `lim`: never
    /// into a plain node.
    fn allows(&self, lim: Limit, es: usize) -> bool {
        !self.plain && lim.allows(self.count + 1, self.raw_len() + es)
    }

    /// Bytes of the entries, compressed or not.
    fn raw_len(&self) -> usize {
        if self.lzf {
            read_varint(&self.buf).map_or(0, |(n, _)| n)
        } else {
            self.buf.len()
        }
    }

    /// The entries, decompressed.
    fn entries(&self) -> Vec<u8> {
        let Some((n, k)) = read_varint(&self.buf) else {
            return Vec::new();
        };
        let mut raw = lzf_decompress(&self.buf[k..], n).unwrap_or_default();
        debug_assert_eq!(raw.len(), n, "corrupt compressed node");
        raw.shrink_to(alloc_class(raw.len()));
        raw
    }

    /// The node with its entries readable: itself, or a decompressed copy.
    fn unpacked(&self) -> Cow<'_, Node> {
        if self.lzf {
            Cow::Owned(Node {
                buf: self.entries(),
                lzf: false,
                ..*self
            })
        } else {
            Cow::Borrowed(self)
        }
    }

    /// Compresses the entries as __quicklistCompressNode does: only a node
    /// of at least MIN_COMPRESS_BYTES, kept only when it saves more than
    /// MIN_COMPRESS_IMPROVE bytes. Returns whether it did.
    fn compress(&mut self) -> bool {
        self.tried = true;
        let sz = self.buf.len();
        if self.lzf || sz < MIN_COMPRESS_BYTES {
            return false;
        }
        match lzf_compress(&self.buf, sz) {
            Some(c) if c.len() + MIN_COMPRESS_IMPROVE < sz => {
                let mut buf = Vec::with_capacity(alloc_class(varint_len(sz) + c.len()));
                push_varint(&mut buf, sz);
                buf.extend_from_slice(&c);
                self.buf = buf;
                self.lzf = true;
                true
            }
            _ => false,
        }
    }

    /// Makes the entries readable and writable in place (a no-op for a
    /// node that is not compressed), and forgets a failed compression.
    fn open(&mut self) -> &mut Node {
        if self.lzf {
            self.buf = self.entries();
            self.lzf = false;
        }
        self.tried = false;
        self
    }

    /// The data of each entry, in order (of a node that is not compressed).
    fn elements(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let mut pos = 0;
        std::iter::from_fn(move || {
            (pos < self.buf.len()).then(|| {
                let (ds, dl) = read_fwd(&self.buf, pos);
                pos = ds + dl + varint_len(dl);
                &self.buf[ds..ds + dl]
            })
        })
    }

    /// End offset of the entry starting at `pos`.
    fn entry_end(&self, pos: usize) -> usize {
        let (ds, dl) = read_fwd(&self.buf, pos);
        ds + dl + varint_len(dl)
    }

    /// Data of the entry starting at `pos`.
    fn data_at(&self, pos: usize) -> &[u8] {
        let (ds, dl) = read_fwd(&self.buf, pos);
        &self.buf[ds..ds + dl]
    }

    /// Byte offset of the `k`-th entry (`k == count` gives the buffer length),
    /// walking from the nearer end of the node.
    fn offset_of(&self, k: usize) -> usize {
        if k >= self.count {
            return self.buf.len();
        }
        if k <= self.count - k {
            let mut pos = 0;
            for _ in 0..k {
                pos = self.entry_end(pos);
            }
            pos
        } else {
            let mut end = self.buf.len();
            for _ in 0..self.count - k {
                end = read_back(&self.buf, end).0;
            }
            end
        }
    }

    fn append(&mut self, v: &[u8], es: usize) {
        let old = self.buf.len();
        reserve_for(&mut self.buf, es);
        self.buf.resize(old + es, 0);
        write_entry(&mut self.buf[old..], v);
        self.count += 1;
    }

    fn insert_entry(&mut self, pos: usize, v: &[u8], es: usize) {
        let old = self.buf.len();
        reserve_for(&mut self.buf, es);
        self.buf.resize(old + es, 0);
        self.buf.copy_within(pos..old, pos + es);
        write_entry(&mut self.buf[pos..pos + es], v);
        self.count += 1;
    }

    /// Replaces the entry occupying `pos..end` with `v`.
    fn replace_entry(&mut self, pos: usize, end: usize, v: &[u8], es: usize) {
        let old_len = self.buf.len();
        let old_es = end - pos;
        if es > old_es {
            reserve_for(&mut self.buf, es - old_es);
            self.buf.resize(old_len + es - old_es, 0);
            self.buf.copy_within(end..old_len, pos + es);
        } else if es < old_es {
            self.buf.copy_within(end..old_len, pos + es);
            self.buf.truncate(old_len - (old_es - es));
        }
        write_entry(&mut self.buf[pos..pos + es], v);
        if es < old_es {
            shrink(&mut self.buf);
        }
    }

    /// Removes up to `max` entries equal to `v`, the first ones (or the last
    /// ones when `from_tail`); `ranges` is scratch space. Returns how many.
    fn remove_matching(
        &mut self,
        v: &[u8],
        max: usize,
        from_tail: bool,
        ranges: &mut Vec<(usize, usize)>,
    ) -> usize {
        ranges.clear();
        if from_tail {
            let mut end = self.buf.len();
            while end > 0 && ranges.len() < max {
                let (start, ds, dl) = read_back(&self.buf, end);
                if &self.buf[ds..ds + dl] == v {
                    ranges.push((start, end));
                }
                end = start;
            }
            ranges.reverse();
        } else {
            let mut pos = 0;
            while pos < self.buf.len() && ranges.len() < max {
                let (ds, dl) = read_fwd(&self.buf, pos);
                let end = ds + dl + varint_len(dl);
                if &self.buf[ds..ds + dl] == v {
                    ranges.push((pos, end));
                }
                pos = end;
            }
        }
        self.remove_ranges(ranges);
        ranges.len()
    }

    /// Removes the byte ranges `ranges` (sorted, disjoint, each one whole
    /// entry) in one compaction pass.
    fn remove_ranges(&mut self, ranges: &[(usize, usize)]) {
        let Some(&(first, _)) = ranges.first() else {
            return;
        };
        let len = self.buf.len();
        let mut w = first;
        for (i, &(_, e)) in ranges.iter().enumerate() {
            let next = ranges.get(i + 1).map_or(len, |r| r.0);
            self.buf.copy_within(e..next, w);
            w += next - e;
        }
        self.buf.truncate(w);
        self.count -= ranges.len();
        shrink(&mut self.buf);
    }
}

/// A Redis list (quicklist encoding). See the module documentation.
#[derive(Clone, Default)]
pub struct List {
    nodes: VecDeque<Node>,
    len: usize,
    /// `list-compress-depth` as the list was created with: nodes further
    /// than this from both ends are kept compressed (0: none).
    depth: usize,
}

impl List {
    /// An empty list (no allocation).
    pub fn new() -> List {
        List::default()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Redis's OBJECT ENCODING name: always `"quicklist"` (Redis 7.0).
    pub fn encoding(&self) -> &'static str {
        "quicklist"
    }

    /// The list's compress depth (`list-compress-depth` when it was made).
    pub fn compress_depth(&self) -> usize {
        self.depth
    }

    /// Sets the compress depth (quicklistSetCompressDepth) and compresses
    /// or decompresses nodes to match it.
    pub fn set_compress_depth(&mut self, depth: usize) {
        self.depth = depth;
        for i in 0..self.nodes.len() {
            self.fix(i);
        }
    }

    /// Whether node `i` lies beyond the compress depth from both ends.
    fn inner(&self, i: usize) -> bool {
        self.depth > 0 && i >= self.depth && i + self.depth < self.nodes.len()
    }

    /// Puts node `i` in the state its position asks for: compressed (when
    /// that pays) beyond the depth, plain bytes within it.
    fn fix(&mut self, i: usize) {
        let inner = self.inner(i);
        let node = &mut self.nodes[i];
        if inner {
            if !node.lzf && !node.tried {
                node.compress();
            }
        } else if node.lzf || node.tried {
            node.open();
        }
    }

    /// After a change at the ends (a push, a pop, nodes dropped there):
    /// only the nodes within `depth + 1` of either end can have moved
    /// across the depth.
    fn settle_ends(&mut self) {
        if self.depth == 0 {
            return;
        }
        let n = self.nodes.len();
        let w = (self.depth + 1).min(n);
        for i in (0..w).chain(n - w..n) {
            self.fix(i);
        }
    }

    /// After a change anywhere: every node is checked (nodes opened by the
    /// change are compressed again).
    fn settle_all(&mut self) {
        if self.depth == 0 {
            return;
        }
        for i in 0..self.nodes.len() {
            self.fix(i);
        }
    }

    /// Node `i`, readable and writable in place.
    fn open(&mut self, i: usize) -> &mut Node {
        self.nodes[i].open()
    }

    /// Bytes used: this struct plus the node array and every node buffer, by
    /// capacity (node buffers are kept at exact jemalloc size classes;
    /// compressed nodes count their compressed size). O(nodes).
    pub fn mem_usage(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.nodes.capacity() * std::mem::size_of::<Node>()
            + self.nodes.iter().map(|n| n.buf.capacity()).sum::<usize>()
    }

    /// Number of quicklist nodes (for DEBUG-style introspection and tests).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Number of compressed nodes.
    pub fn compressed_nodes(&self) -> usize {
        self.nodes.iter().filter(|n| n.lzf).count()
    }

    /// Each node's element count and whether it is plain, head to tail
    /// (the RDB writer keeps plain nodes as they are).
    pub fn node_shapes(&self) -> impl Iterator<Item = (usize, bool)> + '_ {
        self.nodes.iter().map(|n| (n.count, n.plain))
    }

    /// Bytes the nodes would take in Redis (a listpack each, header and
    /// terminator included, each element as listpack encodes it; a plain
    /// node its element): DEBUG OBJECT's `ql_uncompressed_size`.
    pub fn packed_bytes(&self) -> usize {
        self.nodes
            .iter()
            .map(|n| {
                let n = n.unpacked();
                if n.plain {
                    n.data_at(0).len()
                } else {
                    7 + n.elements().map(super::listpack::entry_size).sum::<usize>()
                }
            })
            .sum()
    }

    /// Removes every element and frees all memory.
    pub fn clear(&mut self) {
        self.nodes = VecDeque::new();
        self.len = 0;
    }

    /// Adds `v` at the head (LPUSH). `fill` is `list-max-listpack-size`.
    pub fn push_front(&mut self, v: &[u8], fill: i64) {
        let es = entry_size(v.len());
        if is_large(v.len()) {
            self.nodes.push_front(Node::plain(v));
        } else {
            let lim = Limit::new(fill);
            match self.nodes.front_mut() {
                Some(n) if n.allows(lim, es) => n.open().insert_entry(0, v, es),
                _ => self.nodes.push_front(Node::with(v)),
            }
        }
        self.len += 1;
        self.settle_ends();
    }

    /// Adds `v` at the tail (RPUSH). `fill` is `list-max-listpack-size`.
    pub fn push_back(&mut self, v: &[u8], fill: i64) {
        let es = entry_size(v.len());
        if is_large(v.len()) {
            self.nodes.push_back(Node::plain(v));
        } else {
            let lim = Limit::new(fill);
            match self.nodes.back_mut() {
                Some(n) if n.allows(lim, es) => n.open().append(v, es),
                _ => self.nodes.push_back(Node::with(v)),
            }
        }
        self.len += 1;
        self.settle_ends();
    }

    /// Adds `v` at the tail in a plain node of its own, whatever its size
    /// (a plain node read from an RDB file).
    pub fn push_back_plain(&mut self, v: &[u8]) {
        self.nodes.push_back(Node::plain(v));
        self.len += 1;
        self.settle_ends();
    }

    /// Removes and returns the head element (LPOP), None when empty.
    pub fn pop_front(&mut self) -> Option<Vec<u8>> {
        let node = self.nodes.front_mut()?.open();
        let (ds, dl) = read_fwd(&node.buf, 0);
        let v = node.buf[ds..ds + dl].to_vec();
        if node.count == 1 {
            self.nodes.pop_front();
        } else {
            node.buf.drain(..ds + dl + varint_len(dl));
            node.count -= 1;
            shrink(&mut node.buf);
        }
        self.len -= 1;
        self.settle_ends();
        Some(v)
    }

    /// Removes and returns the tail element (RPOP), None when empty.
    pub fn pop_back(&mut self) -> Option<Vec<u8>> {
        let node = self.nodes.back_mut()?.open();
        let (start, ds, dl) = read_back(&node.buf, node.buf.len());
        let v = node.buf[ds..ds + dl].to_vec();
        if node.count == 1 {
            self.nodes.pop_back();
        } else {
            node.buf.truncate(start);
            node.count -= 1;
            shrink(&mut node.buf);
        }
        self.len -= 1;
        self.settle_ends();
        Some(v)
    }

    /// The head element, None when empty. O(1): the end nodes are never
    /// compressed.
    pub fn front(&self) -> Option<&[u8]> {
        self.nodes.front().map(|n| {
            debug_assert!(!n.lzf);
            n.data_at(0)
        })
    }

    /// The tail element, None when empty. O(1).
    pub fn back(&self) -> Option<&[u8]> {
        self.nodes.back().map(|n| {
            debug_assert!(!n.lzf);
            let (_, ds, dl) = read_back(&n.buf, n.buf.len());
            &n.buf[ds..ds + dl]
        })
    }

    /// (node, position in node) of element `index`, walking from the nearer
    /// end of the list; None when `index >= len`.
    fn locate(&self, index: usize) -> Option<(usize, usize)> {
        if index >= self.len {
            return None;
        }
        if index < self.len / 2 {
            let mut i = index;
            for (n, node) in self.nodes.iter().enumerate() {
                if i < node.count {
                    return Some((n, i));
                }
                i -= node.count;
            }
        } else {
            let mut from_end = self.len - 1 - index;
            for (n, node) in self.nodes.iter().enumerate().rev() {
                if from_end < node.count {
                    return Some((n, node.count - 1 - from_end));
                }
                from_end -= node.count;
            }
        }
        None
    }

    /// Element `index` counted from the head (LINDEX with a normalised
    /// index); None when `index >= len`. O(nodes + node size); a copy when
    /// its node is compressed.
    pub fn get(&self, index: usize) -> Option<Cow<'_, [u8]>> {
        let (n, k) = self.locate(index)?;
        let node = &self.nodes[n];
        if node.lzf {
            let node = node.unpacked();
            return Some(Cow::Owned(node.data_at(node.offset_of(k)).to_vec()));
        }
        Some(Cow::Borrowed(node.data_at(node.offset_of(k))))
    }

    /// Replaces element `index` by `v` (LSET); false (list unchanged) when
    /// `index >= len`. In place when the node still fits `fill`, otherwise the
    /// element moves as an insertion would (the node may split). A large
    /// element (see [`set_packed_threshold`]) takes a plain node of its
    /// own; a small one leaves a plain node for a packed one.
    pub fn set(&mut self, index: usize, v: &[u8], fill: i64) -> bool {
        let Some((n, k)) = self.locate(index) else {
            return false;
        };
        let lim = Limit::new(fill);
        let es = entry_size(v.len());
        let large = is_large(v.len());
        let node = self.open(n);
        let pos = node.offset_of(k);
        let end = node.entry_end(pos);
        if node.plain == large
            && (node.count == 1 || lim.allows(node.count, node.buf.len() - (end - pos) + es))
        {
            node.replace_entry(pos, end, v, es);
        } else {
            if node.count == 1 {
                self.nodes.remove(n);
            } else {
                node.remove_ranges(&[(pos, end)]);
            }
            self.len -= 1;
            self.insert_at(index, v, fill);
        }
        self.settle_all();
        true
    }

    /// Inserts `v` so that it becomes element `index` (`index == len`
    /// appends); false (list unchanged) when `index > len`.
    pub fn insert_at(&mut self, index: usize, v: &[u8], fill: i64) -> bool {
        if index > self.len {
            return false;
        }
        if index == self.len {
            self.push_back(v, fill);
            return true;
        }
        if index == 0 {
            self.push_front(v, fill);
            return true;
        }
        let Some((n, k)) = self.locate(index) else {
            return false;
        };
        let lim = Limit::new(fill);
        let es = entry_size(v.len());
        if is_large(v.len()) {
            // A plain node between the elements: node n splits unless the
            // element goes before it.
            if k > 0 {
                let tail = self.split(n, k);
                self.nodes.insert(n + 1, tail);
            }
            self.nodes.insert(n + usize::from(k > 0), Node::plain(v));
        } else if self.nodes[n].allows(lim, es) {
            let node = self.open(n);
            let pos = node.offset_of(k);
            node.insert_entry(pos, v, es);
        } else if k == 0 {
            // Between node n-1 (exists: index > 0) and node n.
            if self.nodes[n - 1].allows(lim, es) {
                self.open(n - 1).append(v, es);
            } else {
                self.nodes.insert(n, Node::with(v));
                self.try_merge(n, lim);
            }
        } else {
            // Split node n before its k-th entry, then place v at the seam.
            let mut tail = self.split(n, k);
            let node = &mut self.nodes[n];
            let last;
            if node.allows(lim, es) {
                node.append(v, es);
                self.nodes.insert(n + 1, tail);
                last = n + 1;
            } else if tail.allows(lim, es) {
                tail.insert_entry(0, v, es);
                self.nodes.insert(n + 1, tail);
                last = n + 1;
            } else {
                self.nodes.insert(n + 1, Node::with(v));
                self.nodes.insert(n + 2, tail);
                last = n + 2;
            }
            self.try_merge(last, lim);
            if n > 0 {
                self.try_merge(n - 1, lim);
            }
        }
        self.len += 1;
        self.settle_all();
        true
    }

    /// Cuts node `n` (packed) before its `k`-th entry (0 < k < count) and
    /// returns the entries from there as a new node.
    fn split(&mut self, n: usize, k: usize) -> Node {
        let node = self.open(n);
        let pos = node.offset_of(k);
        let tail_bytes = &node.buf[pos..];
        let mut tail_buf = Vec::with_capacity(alloc_class(tail_bytes.len()));
        tail_buf.extend_from_slice(tail_bytes);
        let tail = Node {
            buf: tail_buf,
            count: node.count - k,
            ..Node::default()
        };
        node.buf.truncate(pos);
        node.count = k;
        shrink(&mut node.buf);
        tail
    }

    /// Merges node `a + 1` into node `a` when both exist, neither is plain
    /// and together they fit `lim`.
    fn try_merge(&mut self, a: usize, lim: Limit) {
        let (Some(x), Some(y)) = (self.nodes.get(a), self.nodes.get(a + 1)) else {
            return;
        };
        if x.plain || y.plain || !lim.allows(x.count + y.count, x.raw_len() + y.raw_len()) {
            return;
        }
        if let Some(mut y) = self.nodes.remove(a + 1) {
            let y = y.open();
            let x = self.open(a);
            reserve_for(&mut x.buf, y.buf.len());
            x.buf.extend_from_slice(&y.buf);
            x.count += y.count;
        }
    }

    /// LINSERT: inserts `v` before (or after) the first element equal to
    /// `pivot`, searching from the head. Returns the new length, or None
    /// (list unchanged) when no element equals `pivot`.
    pub fn insert(&mut self, pivot: &[u8], before: bool, v: &[u8], fill: i64) -> Option<usize> {
        let i = self.iter().position(|e| *e == *pivot)?;
        self.insert_at(if before { i } else { i + 1 }, v, fill);
        Some(self.len)
    }

    /// LREM: removes elements equal to `v`: the first `count` from the head
    /// when `count > 0`, the last `-count` from the tail when `count < 0`, all
    /// when `count == 0`. Returns how many were removed. One pass; emptied
    /// nodes are dropped, the others are not merged.
    pub fn remove(&mut self, count: i64, v: &[u8]) -> usize {
        let limit = if count == 0 {
            usize::MAX
        } else {
            usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX)
        };
        let mut removed = 0;
        let mut ranges = Vec::new();
        let mut emptied = false;
        if count >= 0 {
            for node in self.nodes.iter_mut() {
                if removed >= limit {
                    break;
                }
                removed += node
                    .open()
                    .remove_matching(v, limit - removed, false, &mut ranges);
                emptied |= node.count == 0;
            }
        } else {
            for node in self.nodes.iter_mut().rev() {
                if removed >= limit {
                    break;
                }
                removed += node
                    .open()
                    .remove_matching(v, limit - removed, true, &mut ranges);
                emptied |= node.count == 0;
            }
        }
        if emptied {
            self.nodes.retain(|n| n.count > 0);
        }
        self.len -= removed;
        self.settle_all();
        removed
    }

    /// Removes the first `n` elements (fewer if the list is shorter); returns
    /// how many were removed. O(nodes dropped + node size).
    pub fn drop_front(&mut self, n: usize) -> usize {
        let mut left = n.min(self.len);
        let done = left;
        while left > 0 {
            let Some(node) = self.nodes.front_mut() else {
                break;
            };
            if node.count <= left {
                left -= node.count;
                self.nodes.pop_front();
            } else {
                let node = node.open();
                let pos = node.offset_of(left);
                node.buf.drain(..pos);
                node.count -= left;
                shrink(&mut node.buf);
                left = 0;
            }
        }
        self.len -= done;
        self.settle_ends();
        done
    }

    /// Removes the last `n` elements (fewer if the list is shorter); returns
    /// how many were removed. O(nodes dropped + node size).
    pub fn drop_back(&mut self, n: usize) -> usize {
        let mut left = n.min(self.len);
        let done = left;
        while left > 0 {
            let Some(node) = self.nodes.back_mut() else {
                break;
            };
            if node.count <= left {
                left -= node.count;
                self.nodes.pop_back();
            } else {
                let node = node.open();
                let pos = node.offset_of(node.count - left);
                node.buf.truncate(pos);
                node.count -= left;
                shrink(&mut node.buf);
                left = 0;
            }
        }
        self.len -= done;
        self.settle_ends();
        done
    }

    /// LTRIM on normalised indexes: keeps only elements `start..=stop`
    /// (`stop` beyond the end means up to the end); an empty range (`start >
    /// stop` or `start >= len`) empties the list.
    pub fn trim(&mut self, start: usize, stop: usize) {
        if start > stop || start >= self.len {
            self.clear();
            return;
        }
        let stop = stop.min(self.len - 1);
        self.drop_back(self.len - 1 - stop);
        self.drop_front(start);
    }

    /// LPOS: indexes (from the head) of elements equal to `v`. `rank > 0`
    /// searches from the head, `rank < 0` from the tail, skipping the first
    /// `|rank| - 1` matches; `count` = most indexes returned (0 = all);
    /// `maxlen` = most elements compared (0 = no limit). `rank == 0` gives an
    /// empty result (the command rejects it). Indexes come in search order.
    pub fn positions(&self, v: &[u8], rank: i64, count: usize, maxlen: usize) -> Vec<usize> {
        let mut out = Vec::new();
        if rank == 0 {
            return out;
        }
        let mut skip = usize::try_from(rank.unsigned_abs() - 1).unwrap_or(usize::MAX);
        let want = if count == 0 { usize::MAX } else { count };
        let maxlen = if maxlen == 0 { usize::MAX } else { maxlen };
        let mut visit = |i: usize, e: &[u8]| {
            if e == v {
                if skip > 0 {
                    skip -= 1;
                } else {
                    out.push(i);
                }
            }
            out.len() < want
        };
        if rank > 0 {
            for (i, e) in self.iter().enumerate().take(maxlen) {
                if !visit(i, &e) {
                    break;
                }
            }
        } else {
            for (j, e) in self.iter_rev().enumerate().take(maxlen) {
                if !visit(self.len - 1 - j, &e) {
                    break;
                }
            }
        }
        out
    }

    /// Calls `f` with elements `start..=stop` (normalised indexes, LRANGE),
    /// head to tail: `stop` beyond the end is clamped, an empty range calls
    /// nothing. The reply's walk: a node at a time, each element borrowed
    /// (from a decompressed copy of a compressed node), nothing returned
    /// per element as [`List::range`]'s `Cow`s are.
    pub fn for_each_in(&self, start: usize, stop: usize, mut f: impl FnMut(&[u8])) {
        if start > stop || start >= self.len {
            return;
        }
        let mut left = stop.min(self.len - 1) - start + 1;
        let Some((first, k)) = self.locate(start) else {
            return;
        };
        for (i, node) in self.nodes.iter().enumerate().skip(first) {
            let node = node.unpacked();
            let mut pos = if i == first { node.offset_of(k) } else { 0 };
            while left > 0 && pos < node.buf.len() {
                let (ds, dl) = read_fwd(&node.buf, pos);
                f(&node.buf[ds..ds + dl]);
                pos = ds + dl + varint_len(dl);
                left -= 1;
            }
            if left == 0 {
                break;
            }
        }
    }

    /// Every element from head to tail (double-ended: `.rev()` works).
    pub fn iter(&self) -> Iter<'_> {
        let back = match self.nodes.back() {
            Some(n) => (self.nodes.len() - 1, n.raw_len()),
            None => (0, 0),
        };
        Iter {
            nodes: &self.nodes,
            front: (0, 0),
            back,
            remaining: self.len,
            front_raw: None,
            back_raw: None,
        }
    }

    /// Every element from tail to head.
    pub fn iter_rev(&self) -> std::iter::Rev<Iter<'_>> {
        self.iter().rev()
    }

    /// Elements `start..=stop` (normalised indexes, LRANGE): `stop` beyond
    /// the end is clamped; an empty range gives an empty iterator. Positions
    /// in O(nodes + node size), then O(1) per element, in either direction.
    pub fn range(&self, start: usize, stop: usize) -> Iter<'_> {
        let empty = Iter {
            nodes: &self.nodes,
            front: (0, 0),
            back: (0, 0),
            remaining: 0,
            front_raw: None,
            back_raw: None,
        };
        if start > stop || start >= self.len {
            return empty;
        }
        let stop = stop.min(self.len - 1);
        let (Some((ns, ks)), Some((ne, ke))) = (self.locate(start), self.locate(stop)) else {
            return empty;
        };
        Iter {
            nodes: &self.nodes,
            front: (ns, self.nodes[ns].unpacked().offset_of(ks)),
            back: (ne, self.nodes[ne].unpacked().offset_of(ke + 1)),
            remaining: stop - start + 1,
            front_raw: None,
            back_raw: None,
        }
    }
}

/// Iterator over a list's elements (see [`List::iter`], [`List::range`]).
/// An element of a compressed node comes as a copy (the node is
/// decompressed once into the iterator while it walks it), any other
/// borrowed.
#[derive(Clone)]
pub struct Iter<'a> {
    nodes: &'a VecDeque<Node>,
    /// (node, byte offset of the next entry from the front).
    front: (usize, usize),
    /// (node, byte offset just past the next entry from the back).
    back: (usize, usize),
    remaining: usize,
    /// The entries of the compressed node the front (back) is in, by number.
    front_raw: Option<(usize, Vec<u8>)>,
    back_raw: Option<(usize, Vec<u8>)>,
}

/// `slot` holding node `i`'s entries, decompressed now if it held another.
fn raw_of<'s>(slot: &'s mut Option<(usize, Vec<u8>)>, i: usize, node: &Node) -> &'s [u8] {
    if slot.as_ref().map(|r| r.0) != Some(i) {
        *slot = Some((i, node.entries()));
    }
    slot.as_ref().map_or(&[], |r| &r.1)
}

impl<'a> Iterator for Iter<'a> {
    type Item = Cow<'a, [u8]>;

    fn next(&mut self) -> Option<Cow<'a, [u8]>> {
        if self.remaining == 0 {
            return None;
        }
        let mut node = self.nodes.get(self.front.0)?;
        if self.front.1 >= node.raw_len() {
            self.front = (self.front.0 + 1, 0);
            node = self.nodes.get(self.front.0)?;
        }
        self.remaining -= 1;
        if node.lzf {
            let buf = raw_of(&mut self.front_raw, self.front.0, node);
            let (ds, dl) = read_fwd(buf, self.front.1);
            self.front.1 = ds + dl + varint_len(dl);
            return Some(Cow::Owned(buf[ds..ds + dl].to_vec()));
        }
        let (ds, dl) = read_fwd(&node.buf, self.front.1);
        self.front.1 = ds + dl + varint_len(dl);
        Some(Cow::Borrowed(&node.buf[ds..ds + dl]))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        if self.back.1 == 0 {
            let n = self.back.0.checked_sub(1)?;
            self.back = (n, self.nodes.get(n)?.raw_len());
        }
        let node = self.nodes.get(self.back.0)?;
        self.remaining -= 1;
        if node.lzf {
            let buf = raw_of(&mut self.back_raw, self.back.0, node);
            let (start, ds, dl) = read_back(buf, self.back.1);
            self.back.1 = start;
            return Some(Cow::Owned(buf[ds..ds + dl].to_vec()));
        }
        let (start, ds, dl) = read_back(&node.buf, self.back.1);
        self.back.1 = start;
        Some(Cow::Borrowed(&node.buf[ds..ds + dl]))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl std::iter::FusedIterator for Iter<'_> {}

impl fmt::Debug for List {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(
                self.iter()
                    .map(|e| String::from_utf8_lossy(&e).into_owned()),
            )
            .finish()
    }
}

impl PartialEq for List {
    fn eq(&self, other: &List) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for List {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    /// Checks every structural invariant and the contents against `model`.
    /// `fill`: when Some, node limits are checked too (single-element nodes
    /// and nodes left by deletions may be under the limit, never over it).
    fn check(l: &List, model: &VecDeque<Vec<u8>>, fill: Option<i64>) {
        assert_eq!(l.len(), model.len());
        assert_eq!(l.is_empty(), model.is_empty());
        let mut total = 0;
        for (i, node) in l.nodes.iter().enumerate() {
            assert!(node.count > 0, "empty node");
            // Compressed exactly where the depth asks, when it pays.
            if node.lzf {
                assert!(l.inner(i), "node {i} of {} compressed", l.nodes.len());
                assert!(node.buf.len() + MIN_COMPRESS_IMPROVE < node.raw_len());
            } else if l.inner(i) {
                assert!(node.tried, "node {i} of {} not tried", l.nodes.len());
            }
            assert!(
                !node.plain || node.count == 1,
                "plain node of {}",
                node.count
            );
            let node = node.unpacked();
            // Parse the node both ways.
            let mut pos = 0;
            let mut fwd = 0;
            while pos < node.buf.len() {
                pos = node.entry_end(pos);
                fwd += 1;
            }
            assert_eq!(pos, node.buf.len());
            assert_eq!(fwd, node.count);
            let mut end = node.buf.len();
            let mut back = 0;
            while end > 0 {
                end = read_back(&node.buf, end).0;
                back += 1;
            }
            assert_eq!(back, node.count);
            if !l.nodes[i].lzf {
                assert!(node.buf.capacity() <= alloc_class(node.buf.len()));
            }
            if let (Some(fill), true) = (fill, node.count > 1) {
                let lim = Limit::new(fill);
                assert!(
                    lim.allows(node.count, node.buf.len()),
                    "node over limit {lim:?}: {} {}",
                    node.count,
                    node.buf.len()
                );
            }
            total += node.count;
        }
        assert_eq!(total, l.len());
        let got: Vec<Cow<[u8]>> = l.iter().collect();
        let want: Vec<&[u8]> = model.iter().map(|v| v.as_slice()).collect();
        assert_eq!(got, want);
        let got_rev: Vec<Cow<[u8]>> = l.iter_rev().collect();
        let want_rev: Vec<&[u8]> = model.iter().rev().map(|v| v.as_slice()).collect();
        assert_eq!(got_rev, want_rev);
        assert_eq!(l.front(), model.front().map(|v| v.as_slice()));
        assert_eq!(l.back(), model.back().map(|v| v.as_slice()));
    }

    fn model_positions(
        m: &VecDeque<Vec<u8>>,
        v: &[u8],
        rank: i64,
        count: usize,
        maxlen: usize,
    ) -> Vec<usize> {
        let idx: Vec<usize> = if rank > 0 {
            (0..m.len()).collect()
        } else {
            (0..m.len()).rev().collect()
        };
        let maxlen = if maxlen == 0 { usize::MAX } else { maxlen };
        let want = if count == 0 { usize::MAX } else { count };
        let mut skip = rank.unsigned_abs() as usize - 1;
        let mut out = vec![];
        for &i in idx.iter().take(maxlen) {
            if m[i] == v {
                if skip > 0 {
                    skip -= 1;
                } else {
                    out.push(i);
                    if out.len() == want {
                        break;
                    }
                }
            }
        }
        out
    }

    #[derive(Debug, Clone)]
    enum Op {
        PushFront(Vec<u8>),
        PushBack(Vec<u8>),
        PopFront,
        PopBack,
        Get(usize),
        Set(usize, Vec<u8>),
        InsertAt(usize, Vec<u8>),
        Insert(Vec<u8>, bool, Vec<u8>),
        Remove(i64, Vec<u8>),
        Trim(usize, usize),
        Positions(Vec<u8>, i64, usize, usize),
        Range(usize, usize),
        Drop(bool, usize),
    }

    /// Values from a small alphabet (so LREM/LPOS/LINSERT find matches) with
    /// lengths up to `max`.
    fn value(max: usize) -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            3 => prop::sample::select(vec![&b""[..], b"a", b"b", b"ab"]).prop_map(|s| s.to_vec()),
            1 => (0..=max, prop::sample::select(vec![b'x', b'y'])).prop_map(|(n, c)| vec![c; n]),
        ]
    }

    fn op(max: usize) -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => value(max).prop_map(Op::PushFront),
            6 => value(max).prop_map(Op::PushBack),
            1 => Just(Op::PopFront),
            1 => Just(Op::PopBack),
            1 => (0..40usize).prop_map(Op::Get),
            2 => (0..40usize, value(max)).prop_map(|(i, v)| Op::Set(i, v)),
            3 => (0..40usize, value(max)).prop_map(|(i, v)| Op::InsertAt(i, v)),
            1 => (value(max), any::<bool>(), value(max)).prop_map(|(p, b, v)| Op::Insert(p, b, v)),
            1 => (-3i64..=3, value(max)).prop_map(|(c, v)| Op::Remove(c, v)),
            1 => (0..40usize, 0..40usize).prop_map(|(a, b)| Op::Trim(a, b)),
            1 => (value(max), prop_oneof![-3i64..=-1, 1i64..=3], 0..3usize, 0..20usize)
                .prop_map(|(v, r, c, m)| Op::Positions(v, r, c, m)),
            1 => (0..40usize, 0..40usize).prop_map(|(a, b)| Op::Range(a, b)),
            1 => (any::<bool>(), 0..8usize).prop_map(|(b, n)| Op::Drop(b, n)),
        ]
    }

    fn run(ops: &[Op], fill: i64, fills: Option<&[i64]>) {
        run_with(ops, fill, fills, 0, None);
    }

    /// `run` on a list of compress depth `depth`, with elements of at
    /// least `plain` bytes in plain nodes when given.
    fn run_with(ops: &[Op], fill: i64, fills: Option<&[i64]>, depth: usize, plain: Option<usize>) {
        TEST_THRESHOLD.with(|t| t.set(plain));
        let mut l = List::new();
        l.set_compress_depth(depth);
        let mut m: VecDeque<Vec<u8>> = VecDeque::new();
        for (step, op) in ops.iter().enumerate() {
            let fill = fills.map_or(fill, |f| f[step % f.len()]);
            match op {
                Op::PushFront(v) => {
                    l.push_front(v, fill);
                    m.push_front(v.clone());
                }
                Op::PushBack(v) => {
                    l.push_back(v, fill);
                    m.push_back(v.clone());
                }
                Op::PopFront => assert_eq!(l.pop_front(), m.pop_front()),
                Op::PopBack => assert_eq!(l.pop_back(), m.pop_back()),
                Op::Get(i) => assert_eq!(l.get(*i).as_deref(), m.get(*i).map(|v| v.as_slice())),
                Op::Set(i, v) => {
                    let ok = *i < m.len();
                    assert_eq!(l.set(*i, v, fill), ok);
                    if ok {
                        m[*i] = v.clone();
                    }
                }
                Op::InsertAt(i, v) => {
                    let ok = *i <= m.len();
                    assert_eq!(l.insert_at(*i, v, fill), ok);
                    if ok {
                        m.insert(*i, v.clone());
                    }
                }
                Op::Insert(p, before, v) => {
                    let want = m.iter().position(|e| e == p).map(|i| {
                        m.insert(if *before { i } else { i + 1 }, v.clone());
                        m.len()
                    });
                    assert_eq!(l.insert(p, *before, v, fill), want);
                }
                Op::Remove(c, v) => {
                    let mut idx: Vec<usize> = (0..m.len()).filter(|&i| m[i] == *v).collect();
                    if *c < 0 {
                        idx.reverse();
                    }
                    if *c != 0 {
                        idx.truncate(c.unsigned_abs() as usize);
                    }
                    idx.sort_unstable();
                    for &i in idx.iter().rev() {
                        m.remove(i);
                    }
                    assert_eq!(l.remove(*c, v), idx.len());
                }
                Op::Trim(a, b) => {
                    l.trim(*a, *b);
                    if a > b || *a >= m.len() {
                        m.clear();
                    } else {
                        let b = (*b).min(m.len() - 1);
                        m = m.drain(*a..=b).collect();
                    }
                }
                Op::Positions(v, r, c, ml) => {
                    assert_eq!(
                        l.positions(v, *r, *c, *ml),
                        model_positions(&m, v, *r, *c, *ml)
                    );
                }
                Op::Range(a, b) => {
                    let want: Vec<&[u8]> = if a > b || *a >= m.len() {
                        vec![]
                    } else {
                        m.range(*a..=(*b).min(m.len() - 1))
                            .map(|v| v.as_slice())
                            .collect()
                    };
                    let got: Vec<Cow<[u8]>> = l.range(*a, *b).collect();
                    assert_eq!(got, want);
                    let mut walked: Vec<Vec<u8>> = Vec::new();
                    l.for_each_in(*a, *b, |e| walked.push(e.to_vec()));
                    assert_eq!(walked, want);
                    assert_eq!(l.range(*a, *b).len(), want.len());
                    let mut rev: Vec<Cow<[u8]>> = l.range(*a, *b).rev().collect();
                    rev.reverse();
                    assert_eq!(rev, want);
                    // Alternate ends: they must meet without crossing.
                    let mut it = l.range(*a, *b);
                    let (mut front, mut back) = (vec![], vec![]);
                    while let Some(x) = it.next() {
                        front.push(x);
                        match it.next_back() {
                            Some(x) => back.push(x),
                            None => break,
                        }
                    }
                    back.reverse();
                    front.extend(back);
                    assert_eq!(front, want);
                }
                Op::Drop(front, n) => {
                    let k = (*n).min(m.len());
                    if *front {
                        assert_eq!(l.drop_front(*n), k);
                        m.drain(..k);
                    } else {
                        assert_eq!(l.drop_back(*n), k);
                        m.truncate(m.len() - k);
                    }
                }
            }
            check(&l, &m, if fills.is_some() { None } else { Some(fill) });
        }
        for (i, v) in m.iter().enumerate() {
            assert_eq!(l.get(i).as_deref(), Some(v.as_slice()));
        }
        assert_eq!(l.get(m.len()), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Count-limited nodes (1..=4 elements): constant splits and merges.
        #[test]
        fn prop_small_count_fill(fill in 1i64..=4, ops in prop::collection::vec(op(20), 1..120)) {
            run(&ops, fill, None);
        }

        /// 4 KB nodes with elements up to 3000 bytes: byte-limited splits,
        /// elements alone in their node, 2-byte length varints.
        #[test]
        fn prop_byte_fill(ops in prop::collection::vec(op(3000), 1..80)) {
            run(&ops, -1, None);
        }

        /// fill 0 (treated as 1) and a fill changing between operations.
        #[test]
        fn prop_changing_fill(ops in prop::collection::vec(op(300), 1..120)) {
            run(&ops, 0, None);
            run(&ops, 0, Some(&[3, -1, 1, 2, -5, 0, 7]));
        }

        /// Compressed inner nodes (depth 1 and 2), with small count-limited
        /// nodes so that most nodes are inner, and with 4 KB nodes.
        #[test]
        fn prop_compressed(depth in 1usize..=2, fill in 1i64..=4, ops in prop::collection::vec(op(60), 1..150)) {
            run_with(&ops, fill, None, depth, None);
            run_with(&ops, -1, None, depth, None);
        }

        /// Plain nodes (elements of 5 bytes or more), compressed or not.
        #[test]
        fn prop_plain(depth in 0usize..=2, fill in prop_oneof![1i64..=4, Just(-1)], ops in prop::collection::vec(op(60), 1..150)) {
            run_with(&ops, fill, None, depth, Some(5));
        }
    }

    #[test]
    fn packed_threshold_bounds() {
        // The process-wide setting: only its bounds are checked here, and
        // it is left at the default.
        assert!(set_packed_threshold(0));
        assert!(!set_packed_threshold((1 << 32) - (1 << 20) + 1));
        assert!(!set_packed_threshold(u64::MAX));
        assert_eq!(PACKED_THRESHOLD.load(Ordering::Relaxed), 1 << 30);
    }

    #[test]
    fn plain_nodes_shapes() {
        TEST_THRESHOLD.with(|t| t.set(Some(5)));
        let mut l = List::new();
        for v in ["aa", "bb", "cccccccccc", "dd", "ee"] {
            l.push_back(v.as_bytes(), -2);
        }
        let shapes: Vec<(usize, bool)> = l.node_shapes().collect();
        assert_eq!(shapes, vec![(2, false), (1, true), (2, false)]);
        // 7 + 4 + 4, 10, 7 + 4 + 4: Redis's node sizes.
        assert_eq!(l.packed_bytes(), 15 + 10 + 15);
        // A small value replaces the plain element: the node goes.
        assert!(l.set(2, b"c", -2));
        assert!(l.node_shapes().all(|(_, p)| !p));
        // A large one leaves its packed node for a plain node between the halves.
        assert!(l.set(1, b"bbbbbbbbbb", -2));
        let shapes: Vec<(usize, bool)> = l.node_shapes().collect();
        assert_eq!(shapes.iter().filter(|s| s.1).count(), 1);
        let all: Vec<Cow<[u8]>> = l.iter().collect();
        assert_eq!(all, vec![&b"aa"[..], b"bbbbbbbbbb", b"c", b"dd", b"ee"]);
        // Never merged, never shared.
        assert!(l.insert_at(2, b"x", -2));
        assert_eq!(l.node_shapes().filter(|s| s.1).count(), 1);
        l.push_back_plain(b"1");
        l.push_back(b"2", -2);
        assert_eq!(l.node_shapes().last(), Some((1, false)));
        TEST_THRESHOLD.with(|t| t.set(None));
    }

    #[test]
    fn compressed_nodes_follow_the_depth() {
        let mut l = List::new();
        l.set_compress_depth(1);
        for i in 0..100 {
            l.push_back(format!("{}{i}", "compressible".repeat(5)).as_bytes(), 4);
        }
        // 25 nodes, 23 inner ones compressed.
        assert_eq!(l.node_count(), 25);
        assert_eq!(l.compressed_nodes(), 23);
        let before = l.mem_usage();
        l.set_compress_depth(0);
        assert_eq!(l.compressed_nodes(), 0);
        assert!(l.mem_usage() > before * 2, "{} {before}", l.mem_usage());
        l.set_compress_depth(12);
        assert_eq!(l.compressed_nodes(), 1);
        l.set_compress_depth(13);
        assert_eq!(l.compressed_nodes(), 0);
        l.set_compress_depth(2);
        assert_eq!(l.compressed_nodes(), 21);
        // Popping whole nodes away opens the nodes that reach the ends.
        for _ in 0..40 {
            l.pop_front();
        }
        assert_eq!(l.compressed_nodes(), 11);
        assert_eq!(
            l.front().map(<[u8]>::to_vec),
            Some(format!("{}40", "compressible".repeat(5)).into_bytes())
        );
        assert_eq!(
            l.get(30).as_deref(),
            Some(format!("{}70", "compressible".repeat(5)).as_bytes())
        );
        // Small nodes are not worth compressing.
        let mut l = List::new();
        l.set_compress_depth(1);
        for i in 0..10 {
            l.push_back(format!("{i}").as_bytes(), 2);
        }
        assert_eq!(l.compressed_nodes(), 0);
    }

    #[test]
    fn varint_edges() {
        for (len, es) in [
            (0, 2),
            (127, 129),
            (128, 132),
            (16383, 16387),
            (16384, 16390),
        ] {
            assert_eq!(entry_size(len), es, "len {len}");
        }
        assert_eq!(varint_len((1 << 21) - 1), 3);
        assert_eq!(varint_len(1 << 21), 4);
    }

    #[test]
    fn size_classes() {
        let classes = [
            8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512,
        ];
        let mut prev = 0;
        for c in classes {
            for n in prev + 1..=c {
                assert_eq!(alloc_class(n), c, "n {n}");
            }
            prev = c;
        }
        assert_eq!(alloc_class(8184), 8192);
        assert_eq!(alloc_class(8193), 10240);
        assert_eq!(alloc_class(0), 0);
    }

    #[test]
    fn element_sizes() {
        let sizes = [
            0usize,
            1,
            63,
            64,
            127,
            128,
            129,
            16383,
            16384,
            16385,
            (1 << 21) - 1,
            1 << 21,
        ];
        for fill in [-2i64, -1, 1, 3, 128] {
            let mut l = List::new();
            let mut m = VecDeque::new();
            for (i, &n) in sizes.iter().enumerate() {
                let v: Vec<u8> = (0..n).map(|j| (j * 7 + i) as u8).collect();
                if i % 2 == 0 {
                    l.push_back(&v, fill);
                    m.push_back(v);
                } else {
                    l.push_front(&v, fill);
                    m.push_front(v);
                }
            }
            check(&l, &m, Some(fill));
            for (i, v) in m.iter().enumerate() {
                assert_eq!(l.get(i).as_deref(), Some(v.as_slice()));
            }
            // Replace each element by one of another size class.
            for i in 0..m.len() {
                let v = vec![b'z'; sizes[(i + 3) % sizes.len()]];
                assert!(l.set(i, &v, fill));
                m[i] = v;
                check(&l, &m, None);
            }
            while let Some(v) = m.pop_back() {
                assert_eq!(l.pop_back(), Some(v));
                if let Some(v) = m.pop_front() {
                    assert_eq!(l.pop_front(), Some(v));
                }
                check(&l, &m, None);
            }
            assert_eq!(l.pop_front(), None);
            assert_eq!(l.node_count(), 0);
        }
    }

    #[test]
    fn empty_elements() {
        let mut l = List::new();
        for _ in 0..10_000 {
            l.push_back(b"", -2);
        }
        assert_eq!(l.len(), 10_000);
        // 2 bytes each: 4096 per 8 KB node.
        assert_eq!(l.node_count(), 3);
        assert_eq!(l.get(5000).as_deref(), Some(&b""[..]));
        assert_eq!(l.remove(0, b""), 10_000);
        assert!(l.is_empty());
        assert_eq!(l.node_count(), 0);
    }

    #[test]
    fn large_element_alone() {
        let mut l = List::new();
        l.push_back(b"a", -1);
        l.push_back(&[b'x'; 5000], -1);
        l.push_back(b"b", -1);
        assert_eq!(l.node_count(), 3);
        assert_eq!(l.encoding(), "quicklist");
        // Positive fill: 8 KB safety limit still applies.
        let mut l = List::new();
        for _ in 0..3 {
            l.push_back(&[b'x'; 5000], 100);
        }
        assert_eq!(l.node_count(), 3);
    }

    #[test]
    fn fill_limits() {
        let mut l = List::new();
        for i in 0..100 {
            l.push_back(format!("{i}").as_bytes(), 5);
        }
        assert_eq!(l.node_count(), 20);
        let mut l = List::new();
        for i in 0..10_000 {
            l.push_back(format!("{i:010}").as_bytes(), -2);
        }
        for n in l.nodes.iter().take(l.node_count() - 1) {
            assert_eq!(n.count, 682);
            assert!(n.buf.len() <= 8192 && n.buf.len() + 12 > 8192);
        }
        // fill below -5 acts as -5 (64 KB), i64::MIN must not overflow.
        let mut l = List::new();
        for _ in 0..10_000 {
            l.push_back(b"0123456789", i64::MIN);
        }
        assert_eq!(l.node_count(), 2);
        l.push_back(b"x", i64::MAX);
    }

    #[test]
    fn lpos_lrem_linsert() {
        let mut l = List::new();
        for v in ["a", "b", "c", "a", "b", "c", "a"] {
            l.push_back(v.as_bytes(), 2);
        }
        assert_eq!(l.positions(b"a", 1, 0, 0), vec![0, 3, 6]);
        assert_eq!(l.positions(b"a", -1, 0, 0), vec![6, 3, 0]);
        assert_eq!(l.positions(b"a", 2, 1, 0), vec![3]);
        assert_eq!(l.positions(b"a", -2, 0, 0), vec![3, 0]);
        assert_eq!(l.positions(b"a", 1, 0, 4), vec![0, 3]);
        assert_eq!(l.positions(b"a", 1, 0, 3), vec![0]);
        assert_eq!(l.positions(b"z", 1, 0, 0), Vec::<usize>::new());
        assert_eq!(l.positions(b"a", i64::MIN, 0, 0), Vec::<usize>::new());
        assert_eq!(l.insert(b"c", false, b"X", 2), Some(8));
        assert_eq!(l.insert(b"nope", true, b"X", 2), None);
        assert_eq!(l.get(3).as_deref(), Some(&b"X"[..]));
        assert_eq!(l.remove(-1, b"a"), 1);
        assert_eq!(l.remove(1, b"a"), 1);
        assert_eq!(l.remove(i64::MIN, b"a"), 1);
        let all: Vec<Cow<[u8]>> = l.iter().collect();
        assert_eq!(all, vec![&b"b"[..], b"c", b"X", b"b", b"c"]);
        l.trim(1, 3);
        let all: Vec<Cow<[u8]>> = l.iter().collect();
        assert_eq!(all, vec![&b"c"[..], b"X", b"b"]);
        l.trim(2, 1);
        assert!(l.is_empty());
    }

    #[test]
    fn out_of_range_is_harmless() {
        let mut l = List::new();
        assert_eq!(l.get(0).as_deref(), None);
        assert!(!l.set(0, b"x", -2));
        assert!(!l.insert_at(1, b"x", -2));
        assert_eq!(l.range(0, usize::MAX).count(), 0);
        l.trim(0, usize::MAX);
        assert_eq!(l.drop_front(5), 0);
        l.push_back(b"x", -2);
        assert_eq!(l.range(0, usize::MAX).count(), 1);
        assert_eq!(l.range(usize::MAX, usize::MAX).count(), 0);
        assert_eq!(l.get(usize::MAX).as_deref(), None);
        l.trim(0, usize::MAX);
        assert_eq!(l.len(), 1);
    }

    /// Run with --nocapture to see the figure.
    #[test]
    fn million_element_memory() {
        let mut l = List::new();
        for i in 0..1_000_000u32 {
            l.push_back(format!("{i:010}").as_bytes(), -2);
        }
        let bytes = l.mem_usage();
        println!(
            "1,000,000 x 10-byte elements, fill -2: mem_usage {} bytes = {:.2} bytes/element, {} nodes",
            bytes,
            bytes as f64 / 1e6,
            l.node_count()
        );
        // Redis 7.0: 12-byte listpack entries in 8 KB listpacks (+32-byte
        // quicklistNode each) ~ 12.1 bytes/element.
        assert!(bytes < 12_200_000, "{bytes}");
        assert_eq!(l.get(999_999).as_deref(), Some(&b"0000999999"[..]));
        assert_eq!(l.get(500_000).as_deref(), Some(&b"0000500000"[..]));
        assert_eq!(l.range(999_998, 2_000_000).count(), 2);
        assert_eq!(l.positions(b"0000999990", -1, 1, 0), vec![999_990]);
    }
}
