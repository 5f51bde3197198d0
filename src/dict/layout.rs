//! The bytes of a dictionary region, identical for every process and build, and [`Mem`], the
//! bounds-checked view through which every other module reads and writes them.
//!
//! ```text
//! offset 0        header: identity and geometry (written once, before the magic), then the
//!                 mutable fields (sequence numbers, counts, LRU ends, free-list heads)
//! LOG (1024)      the redo record: committed length, then LOG_CAP (offset, value) pairs
//! META (12288)    page descriptors: npages × 32 bytes
//! buckets_off     index buckets: nbuckets × u32 (an entry reference, 0 = empty)
//! pages_off       npages × 4096-byte pages (4096-aligned): slab pages of one size class,
//!                 or runs of 2^k pages holding one large entry, or free buddy blocks
//! ```
//!
//! Nothing in the region is a pointer: entries are named by *references* (byte offset / 16,
//! 0 = none), pages by index (+1 in links, 0 = none). Every field is a fixed-width
//! little-endian integer at a fixed offset, read and written as an atomic of its width, so a
//! 32-bit and a 64-bit process agree.

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// "GoMuDict", little-endian: the first 8 bytes of an initialised dictionary region.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"GoMuDict");
/// Bumped whenever the layout below changes (2: a list's value starts with its live bounds).
pub(crate) const VERSION: u32 = 2;
/// Bytes of a page (the unit of the buddy allocator and of a slab).
pub(crate) const PAGE: usize = 4096;
/// Bytes before the page descriptors: header and redo record.
pub(crate) const META: usize = 12288;
/// Bytes of a page descriptor.
pub(crate) const DESC: usize = 32;
/// Buddy orders: blocks of 2^0 ..= 2^(ORDERS-1) pages.
pub(crate) const ORDERS: usize = 24;
/// Smallest region [`Geometry::new`] accepts.
pub(crate) const MIN_LEN: usize = META + 4 * (PAGE + DESC + 64) + PAGE;

// Header: identity and geometry (immutable once the magic is set).
pub(crate) const H_MAGIC: usize = 0;
pub(crate) const H_VERSION: usize = 8;
pub(crate) const H_PAGE: usize = 12;
pub(crate) const H_LEN: usize = 16;
pub(crate) const H_NPAGES: usize = 24;
pub(crate) const H_NBUCKETS: usize = 28;
pub(crate) const H_BUCKETS: usize = 32;
pub(crate) const H_PAGES: usize = 40;
pub(crate) const H_SEED: usize = 48;
/// u32: this zone's shard index.
pub(crate) const H_SHARD: usize = 56;
/// u32: the dictionary's number of shards.
pub(crate) const H_SHARDS: usize = 60;
// Mutable, changed only through transactions (`redo`).
/// u64: sequence number of the last entry written.
pub(crate) const H_SEQ: usize = 64;
/// u64: entries with a sequence number up to this one were flushed (`flush_all`).
pub(crate) const H_FLUSH_SEQ: usize = 72;
/// u64: entries linked (live or expired).
pub(crate) const H_COUNT: usize = 80;
/// u32: the LRU head: the most recently written (or spared) entry.
pub(crate) const H_LRU_HEAD: usize = 88;
/// u32: least recently used entry.
pub(crate) const H_LRU_TAIL: usize = 92;
/// u64: pages in free buddy blocks.
pub(crate) const H_FREE_PAGES: usize = 96;
/// u64: bytes of the chunks holding entries.
pub(crate) const H_USED: usize = 104;
/// u64: live entries evicted to make room (statistics).
pub(crate) const H_EVICTED: usize = 112;
/// u64: redo records replayed after a death (statistics).
pub(crate) const H_REPLAYED: usize = 120;
/// u32 × ORDERS: head (page + 1) of each buddy order's free list.
pub(crate) const H_BUDDY: usize = 128;
/// u32 × CLASSES: head (page + 1) of each size class's list of slab pages with a free chunk.
pub(crate) const H_PARTIAL: usize = H_BUDDY + 4 * ORDERS;
const _: () = assert!(H_PARTIAL + 4 * CLASSES.len() <= LOG);
/// Chunk sizes of the slab classes (`alloc`), in bytes (multiples of 16; 64 chunks of the
/// smallest fill a page, so a page's bitmap is one u64). Here, with the header's lists of them.
pub(crate) const CLASSES: [u32; 21] = [
    64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536,
    1792, 2048,
];

/// The redo record: u64 length of the committed transaction (0 = none), at `LOG`, and its
/// pairs from `LOG_ENTRIES`.
pub(crate) const LOG: usize = 1024;
pub(crate) const LOG_ENTRIES: usize = LOG + 64;
/// Pairs a redo record holds (enough for the largest transaction: see `redo`).
pub(crate) const LOG_CAP: usize = 512;
const _: () = assert!(LOG_ENTRIES + 16 * LOG_CAP <= META);

// A page descriptor, at `META + DESC * page`.
/// u32: what the page is (`KIND_*`).
pub(crate) const D_KIND: usize = 0;
/// u32: the block's order (free, large) or the slab's size class.
pub(crate) const D_ARG: usize = 4;
/// u32: previous page (+1) in its list (buddy free list or slab partial list).
pub(crate) const D_PREV: usize = 8;
/// u32: next page (+1) in its list.
pub(crate) const D_NEXT: usize = 12;
/// u64: a slab's chunks in use, one bit each.
pub(crate) const D_BITMAP: usize = 16;

/// Inside a block (not its first page).
pub(crate) const KIND_NONE: u32 = 0;
/// First page of a free buddy block.
pub(crate) const KIND_FREE: u32 = 1;
/// A slab page.
pub(crate) const KIND_SLAB: u32 = 2;
/// First page of a block holding one large entry.
pub(crate) const KIND_LARGE: u32 = 3;

// An entry, at the start of its chunk (16-aligned; named by its reference, offset / 16).
/// u32: next entry in the index bucket's chain.
pub(crate) const E_HNEXT: usize = 0;
/// u32: previous (more recently used) entry in the LRU list.
pub(crate) const E_PREV: usize = 4;
/// u32: next (less recently used) entry in the LRU list.
pub(crate) const E_NEXT: usize = 8;
/// u32: the key's hash (its low bits pick the bucket).
pub(crate) const E_HASH: usize = 12;
/// u32: key length (low 16 bits) and value kind (`KIND_BYTES`/`KIND_INT`, bits 16..24).
pub(crate) const E_KEYLEN_KIND: usize = 16;
/// u32: the user's flags.
pub(crate) const E_FLAGS: usize = 20;
/// u32: value length in bytes.
pub(crate) const E_VLEN: usize = 24;
/// u32: 1 if a `get` hit the entry since it was written or last given a second chance
/// (`lru::spare`), else 0.
pub(crate) const E_USED: usize = 28;
/// u64: expiry, ms on `CLOCK_MONOTONIC` (0 = never).
pub(crate) const E_EXPIRES: usize = 32;
/// u64: sequence number of the write that made the entry (compared with `H_FLUSH_SEQ`).
pub(crate) const E_SEQ: usize = 40;
/// The value (8-aligned, so an integer is one u64 word), then the key.
pub(crate) const E_VALUE: usize = 48;
/// A byte string.
pub(crate) const VALUE_BYTES: u32 = 0;
/// A 64-bit signed integer (`incr`), 8 bytes little-endian.
pub(crate) const VALUE_INT: u32 = 1;
/// A list of byte strings (`lpush`…): a header of two u32s (where the live items start and
/// end, offsets in the value; a pop moves them), then items, each a u32 length, then its
/// bytes, back to back, first to last; all little-endian.
pub(crate) const VALUE_LIST: u32 = 2;

/// `vlen` rounded up to 8, saturating (a length read from a damaged zone may be anything).
fn padded(vlen: usize) -> usize {
    vlen.checked_next_multiple_of(8).unwrap_or(usize::MAX)
}

/// Bytes an entry with this key and value occupies before rounding to its chunk (saturating:
/// no chunk is that large).
pub(crate) fn entry_size(klen: usize, vlen: usize) -> usize {
    E_VALUE.saturating_add(padded(vlen)).saturating_add(klen)
}

/// Offset of an entry's key (saturating: past the zone, where every access fails as
/// corrupt).
pub(crate) fn key_off(e: usize, vlen: usize) -> usize {
    e.saturating_add(E_VALUE).saturating_add(padded(vlen))
}

/// Where everything is, derived from the region's length alone (so an attach recomputes it
/// and compares with the header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub len: usize,
    pub npages: u32,
    pub nbuckets: u32,
    pub buckets_off: usize,
    pub pages_off: usize,
}

impl Geometry {
    /// The layout of a region of `len` bytes; `None` if it is below [`MIN_LEN`] or so large
    /// that references (offset / 16 in a u32) would not reach its end.
    pub(crate) fn new(len: usize) -> Option<Self> {
        if len < MIN_LEN || len as u64 > 16 * u64::from(u32::MAX) {
            return None;
        }
        // Per page: the page, its descriptor and up to 16 buckets.
        let mut n = (len - META) / (PAGE + DESC + 64);
        while n >= 2 {
            let nbuckets = prev_pow2((16 * n).max(16));
            let buckets_off = (META + DESC * n).next_multiple_of(64);
            let pages_off = (buckets_off + 4 * nbuckets).next_multiple_of(PAGE);
            if pages_off + PAGE * n <= len {
                return Some(Self {
                    len,
                    npages: n as u32,
                    nbuckets: nbuckets as u32,
                    buckets_off,
                    pages_off,
                });
            }
            n -= 1;
        }
        None
    }

    /// The most entries the zone can hold (64 to a page): a bound on every walk, so that a
    /// cycle a peer wrote ends.
    pub(crate) fn max_entries(&self) -> u64 {
        u64::from(self.npages) * 64
    }

    /// Offset of page `p`'s descriptor (`p` of the zone, checked by the caller: so below
    /// 2^24, and the offset does not overflow).
    #[inline]
    pub(crate) fn desc(p: u32) -> usize {
        META + DESC * p as usize
    }

    /// Offset of page `p` (of the zone, as for [`desc`](Self::desc)).
    #[inline]
    pub(crate) fn page(&self, p: u32) -> usize {
        self.pages_off + PAGE * p as usize
    }

    /// The page holding byte offset `off` (at or past `pages_off`, unless the zone is corrupt:
    /// then page 0, and the operation fails).
    #[inline]
    pub(crate) fn page_of(&self, m: &Mem, off: usize) -> u32 {
        match off.checked_sub(self.pages_off) {
            Some(d) if d / PAGE < self.npages as usize => (d / PAGE) as u32,
            _ => {
                m.corrupt(off);
                0
            }
        }
    }
}

fn prev_pow2(x: usize) -> usize {
    1 << (usize::BITS - 1 - x.leading_zeros())
}

/// The region's bytes, seen through bounds-checked accessors. Every load and store of a
/// field is an atomic of the field's width (relaxed: the dictionary's lock orders them between
/// processes; the redo record's commit orders them within one), so the compiler can neither
/// tear nor reorder them past the commit fences of `redo`.
#[derive(Debug)]
pub(crate) struct Mem {
    base: *mut u8,
    len: usize,
    /// The first offset outside the region (or another impossible value) that the operation
    /// in progress met ([`NONE`] if none): the operation's report of a corrupt zone
    /// ([`corrupt`](Self::corrupt)). Only the thread that holds the shard's write side (an
    /// operation is one hold) touches the shard's own; a lookup under the read side uses a
    /// [`view`](Self::view) of its own. An atomic so that `Mem` is `Sync`.
    corrupt: AtomicUsize,
}

/// [`Mem::corrupt`]'s "nothing corrupt met".
const NONE: usize = usize::MAX;

// SAFETY: `Mem` is an address range in a shared mapping that its owner keeps mapped; it is
// only dereferenced by the dictionary's code while a side of the shard's lock is held (or, for
// the immutable header fields, after the magic was published): under the read side only loads
// and the atomic store of an entry's used word are made, so nothing a reader reads changes.
unsafe impl Send for Mem {}
// SAFETY: as for `Send`.
unsafe impl Sync for Mem {}

impl Mem {
    /// # Safety
    /// `base..base + len` is mapped read-write, 8-aligned, for as long as the `Mem` (and its
    /// copies) is used.
    pub(crate) unsafe fn new(base: *mut u8, len: usize) -> Self {
        Self {
            base,
            len,
            corrupt: AtomicUsize::new(NONE),
        }
    }

    /// The same bytes with a corruption report of their own: the view of one lookup under the
    /// shard's read side, which other threads of this process may hold at the same time (each
    /// operation's report is its own, [`corrupt`](Self::corrupt)).
    #[inline]
    pub(crate) fn view(&self) -> Self {
        // SAFETY: the range of `self`, which the caller keeps mapped as long as `self`
        // (the view is used within one operation on `self`'s shard).
        unsafe { Self::new(self.base, self.len) }
    }

    /// A reference, offset or field read from the region is impossible: the region was
    /// corrupted (by a peer writing it, since the dictionary's own updates are
    /// crash-consistent). The operation goes on without reading or writing outside the
    /// region, commits nothing ([`ZoneTx::commit`](super::redo::ZoneTx::commit) checks), and
    /// fails with [`DictError::Corrupt`](super::DictError::Corrupt).
    #[cold]
    #[inline(never)]
    pub(crate) fn corrupt(&self, off: usize) {
        let _ = self
            .corrupt
            .compare_exchange(NONE, off, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Whether the operation in progress met a corrupt zone.
    #[inline]
    pub(crate) fn corrupt_seen(&self) -> bool {
        self.corrupt.load(Ordering::Relaxed) != NONE
    }

    /// The offset the operation in progress found corrupt, clearing it (at an operation's
    /// start and end). A load, and a store only if something was met: one thread at a time
    /// reports through a `Mem` (the shard's under its write side, a lookup's own
    /// [`view`](Self::view)), so no report can land between the two; a `swap` would be a
    /// locked instruction on every operation, twice.
    #[inline]
    pub(crate) fn take_corrupt(&self) -> Option<usize> {
        let off = self.corrupt.load(Ordering::Relaxed);
        if off == NONE {
            return None;
        }
        self.corrupt.store(NONE, Ordering::Relaxed);
        Some(off)
    }

    /// Whether `n` bytes at `off` lie in the region, aligned to `align`; if not, the zone is
    /// corrupt (recorded for the operation, which fails).
    #[inline]
    fn check(&self, off: usize, n: usize, align: usize) -> bool {
        if !off.is_multiple_of(align) || off.checked_add(n).is_none_or(|end| end > self.len) {
            self.corrupt(off);
            return false;
        }
        true
    }

    /// The word at `off`; outside the region a stand-in (the operation fails).
    #[inline]
    pub(crate) fn a32(&self, off: usize) -> &AtomicU32 {
        if !self.check(off, 4, 4) {
            return &OUTSIDE32;
        }
        // SAFETY: in bounds and aligned (checked; the base is 8-aligned); an AtomicU32 is
        // valid for every bit pattern.
        unsafe { &*self.base.add(off).cast::<AtomicU32>() }
    }

    /// As [`a32`](Self::a32).
    #[inline]
    pub(crate) fn a64(&self, off: usize) -> &AtomicU64 {
        if !self.check(off, 8, 8) {
            return &OUTSIDE64;
        }
        // SAFETY: as in `a32`.
        unsafe { &*self.base.add(off).cast::<AtomicU64>() }
    }

    /// The `n` words from `off` (none if they are not all in the region, which is then
    /// corrupt): one check for a run of words read in a loop.
    #[inline]
    pub(crate) fn a64s(&self, off: usize, n: usize) -> &[AtomicU64] {
        let Some(bytes) = n.checked_mul(8) else {
            self.corrupt(off);
            return &[];
        };
        if !self.check(off, bytes, 8) {
            return &[]; // reported by `check`
        }
        // SAFETY: in bounds and aligned (checked; the base is 8-aligned); an AtomicU64 is
        // valid for every bit pattern.
        unsafe { core::slice::from_raw_parts(self.base.add(off).cast::<AtomicU64>(), n) }
    }

    /// The u32 at `off` (0 outside the region: a null reference, so walks stop).
    #[inline]
    pub(crate) fn ld32(&self, off: usize) -> u32 {
        self.a32(off).load(Ordering::Relaxed)
    }

    /// The u64 at `off` (0 outside the region).
    #[inline]
    pub(crate) fn ld64(&self, off: usize) -> u64 {
        self.a64(off).load(Ordering::Relaxed)
    }

    /// Store at `off` (nothing outside the region).
    #[inline]
    pub(crate) fn st32(&self, off: usize, v: u32) {
        if self.check(off, 4, 4) {
            self.a32(off).store(v, Ordering::Relaxed)
        }
    }

    /// Store at `off` (nothing outside the region).
    #[inline]
    pub(crate) fn st64(&self, off: usize, v: u64) {
        if self.check(off, 8, 8) {
            self.a64(off).store(v, Ordering::Relaxed)
        }
    }

    /// `n` bytes at `off` (none outside the region). Only under the lock, either side (nobody
    /// writes them meanwhile).
    #[inline]
    pub(crate) fn bytes(&self, off: usize, n: usize) -> &[u8] {
        if !self.check(off, n, 1) {
            return &[];
        }
        // SAFETY: in bounds (checked); the lock is held (the read side excludes writers too,
        // and readers write no entry's bytes), so no process writes these bytes while the
        // borrow lives (the callers' rule).
        unsafe { core::slice::from_raw_parts(self.base.add(off), n) }
    }

    /// Copy `src` to `off` (nothing outside the region). Only under the lock, into a chunk no
    /// published structure names.
    #[inline]
    pub(crate) fn write(&self, off: usize, src: &[u8]) {
        if !self.check(off, src.len(), 1) {
            return;
        }
        // SAFETY: in bounds (checked); the lock is held and the bytes belong to a free chunk
        // (the callers' rule), so nobody reads or writes them meanwhile.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), self.base.add(off), src.len()) };
    }
}

/// Reading the region's words: straight from the region ([`Mem`]), or through a transaction
/// being planned, which sees its own writes first ([`Tx`](super::redo::Tx)). A lookup that
/// changes nothing reads through `Mem`: no write set to search.
pub(crate) trait Words {
    /// The u32 at `off`.
    fn r32(&self, off: usize) -> u32;
    /// The u64 at `off`.
    fn r64(&self, off: usize) -> u64;
    /// The region (for bytes, which no transaction holds).
    fn mem(&self) -> &Mem;
}

impl Words for Mem {
    #[inline]
    fn r32(&self, off: usize) -> u32 {
        self.ld32(off)
    }
    #[inline]
    fn r64(&self, off: usize) -> u64 {
        self.ld64(off)
    }
    #[inline]
    fn mem(&self) -> &Mem {
        self
    }
}

/// Where an offset computed from a word of a damaged region is clamped so that a field's
/// offset can still be added to it without overflow (in a 32-bit process): no region is this
/// long (a Rust object is at most `isize::MAX` bytes), so every access there fails as corrupt.
pub(crate) const FAR: usize = isize::MAX as usize;

/// What an access outside the region reads instead: 0 (nothing stores to them: `st32` and
/// `st64` skip such offsets, and the only atomic stores are to fixed header fields).
static OUTSIDE32: AtomicU32 = AtomicU32::new(0);
static OUTSIDE64: AtomicU64 = AtomicU64::new(0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_words_is_checked_once_and_whole() {
        let mut buf = vec![0u64; 64];
        // SAFETY: the buffer outlives the Mem, 8-aligned.
        let m = unsafe { Mem::new(buf.as_mut_ptr().cast(), 512) };
        assert_eq!(m.a64s(8, 63).len(), 63);
        assert!(m.take_corrupt().is_none());
        // One word past the end, a misaligned start, a length that overflows: none, reported.
        for (off, n) in [(8, 64), (4, 2), (8, usize::MAX / 4)] {
            assert!(m.a64s(off, n).is_empty(), "{off} {n}");
            assert_eq!(m.take_corrupt(), Some(off));
            assert!(m.take_corrupt().is_none(), "cleared");
        }
    }

    #[test]
    fn geometry_fits_and_grows() {
        assert!(Geometry::new(MIN_LEN - 1).is_none());
        let g = Geometry::new(MIN_LEN).unwrap();
        assert!(g.npages >= 2);
        for len in [MIN_LEN, 65536, 1 << 20, 100_000_003, 1 << 30] {
            let g = Geometry::new(len).unwrap();
            assert_eq!(g.pages_off % PAGE, 0);
            assert!(g.pages_off + PAGE * g.npages as usize <= len, "{len}");
            assert!(g.buckets_off >= META + DESC * g.npages as usize);
            assert!(g.buckets_off + 4 * g.nbuckets as usize <= g.pages_off);
            assert!(g.nbuckets.is_power_of_two());
            // Little is wasted: less than two pages' worth beyond the overheads.
            let over = META + (DESC + 64) * g.npages as usize + 2 * PAGE;
            assert!(
                len - PAGE * g.npages as usize <= over + PAGE,
                "{len}: {g:?}"
            );
        }
    }
}
