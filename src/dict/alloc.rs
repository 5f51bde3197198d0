//! Memory inside the region, as nginx's `ngx_slab` divides a zone: whole pages from a buddy
//! allocator, and pages cut into equal chunks of one size class for small entries.
//!
//! * **Pages**: a binary buddy system over the region's pages. A free block of 2^k pages is
//!   on order k's doubly linked free list (links in the page descriptors); freeing a block
//!   merges it with its buddy while the buddy is free and of the same order, so a region under
//!   churn does not crumble into small blocks: two free halves always become one block.
//! * **Slabs**: entries up to 2048 bytes take a chunk of the smallest of 21 classes (64 to
//!   2048 bytes, four per doubling, so a chunk wastes at most a fifth of itself) from a slab
//!   page of that class. A page's chunks in use are one bit each in its descriptor; the pages
//!   of a class with a free chunk are on that class's list; a page whose last chunk is freed
//!   goes back to the buddy allocator at once, so size classes never hoard memory another
//!   class needs.
//! * **Large entries** (over 2048 bytes) take a block of 2^k whole pages.
//!
//! All allocator state lives outside the chunks (in descriptors and the header), so writing a
//! new entry into a chunk that is still free changes no structure: a transaction ([`ZoneTx`])
//! allocates, the entry is written, and the commit publishes both at once.
//!
//! Bounds of one transaction: an allocation splits at most ORDERS − 1 = 23 times and a free
//! merges at most as often, each step writing at most 6 words (a descriptor's kind and order,
//! and a list push or removal); with the entry's links and the counts, a store plans at most
//! about 310 writes, under the redo record's 512.
//!
//! Every page number, order, class, bitmap and count read from the region is checked before
//! it is computed with (a page past the zone, a list head naming a block that is not free and
//! of its order, a full slab page on its class's list, a chunk freed that is not allocated, a
//! count that would wrap): the zone was damaged, which is reported ([`Mem::corrupt`]) and fails the
//! operation, and no arithmetic overflows on such values in any build.

use super::layout::*;
use super::redo::ZoneTx;

/// The largest slab chunk.
pub(crate) const MAX_SMALL: usize = 2048;

/// What size of memory an entry of `size` bytes takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Size {
    /// A chunk of this slab class.
    Class(u32),
    /// A block of 2^order pages.
    Order(u32),
}

impl Size {
    pub(crate) fn of(size: usize) -> Self {
        if size <= MAX_SMALL {
            Size::Class(CLASSES.iter().position(|&c| c as usize >= size).unwrap() as u32)
        } else {
            let pages = size.div_ceil(PAGE);
            Size::Order(pages.next_power_of_two().trailing_zeros())
        }
    }

    /// Bytes it occupies.
    pub(crate) fn bytes(self) -> usize {
        match self {
            Size::Class(c) => CLASSES[c as usize] as usize,
            Size::Order(k) => PAGE << k,
        }
    }
}

/// Chunks in a slab page of class `c`.
pub(crate) fn chunks(c: u32) -> u32 {
    (PAGE as u32) / CLASSES[c as usize]
}

/// The bitmap of a slab page of class `c` with every chunk in use.
pub(crate) fn full_mask(c: u32) -> u64 {
    let n = chunks(c);
    if n == 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// Offset of the head of list `list` (a u32 in the header).
fn buddy_head(k: u32) -> usize {
    H_BUDDY + 4 * k as usize
}
fn partial_head(c: u32) -> usize {
    H_PARTIAL + 4 * c as usize
}

/// The page that the list word at `at` names (page + 1; 0 = none). One past the zone is
/// damage: reported, and taken as none.
fn linked(tx: &ZoneTx<'_>, g: &Geometry, at: usize) -> Option<u32> {
    let p = tx.r32(at).checked_sub(1)?;
    if p >= g.npages {
        tx.m.corrupt(at);
        return None;
    }
    Some(p)
}

/// Push page `p` (of the zone) at the head of the list whose head word is at `head`.
fn push(tx: &mut ZoneTx<'_>, g: &Geometry, head: usize, p: u32) {
    let (h, first) = (tx.r32(head), linked(tx, g, head));
    tx.w32(Geometry::desc(p) + D_PREV, 0);
    tx.w32(Geometry::desc(p) + D_NEXT, h);
    if let Some(q) = first {
        tx.w32(Geometry::desc(q) + D_PREV, p + 1);
    }
    tx.w32(head, p + 1);
}

/// Remove page `p` (of the zone) from the list whose head word is at `head`.
fn remove(tx: &mut ZoneTx<'_>, g: &Geometry, head: usize, p: u32) {
    let d = Geometry::desc(p);
    let (prev, next) = (tx.r32(d + D_PREV), tx.r32(d + D_NEXT));
    match linked(tx, g, d + D_PREV) {
        None => tx.w32(head, next),
        Some(q) => tx.w32(Geometry::desc(q) + D_NEXT, next),
    }
    if let Some(q) = linked(tx, g, d + D_NEXT) {
        tx.w32(Geometry::desc(q) + D_PREV, prev);
    }
    tx.w32(d + D_PREV, 0);
    tx.w32(d + D_NEXT, 0);
}

/// Whether the descriptor of page `p` (of the zone) starts a block of `kind` and order `k`
/// that lies in the zone; if not, the zone is damaged (reported).
fn is_block(tx: &ZoneTx<'_>, g: &Geometry, p: u32, kind: u32, k: u32) -> bool {
    let d = Geometry::desc(p);
    // `p < npages < 2^24` and `k < ORDERS`: no overflow.
    let ok = (k as usize) < ORDERS
        && tx.r32(d + D_KIND) == kind
        && tx.r32(d + D_ARG) == k
        && p.is_multiple_of(1 << k)
        && p + (1 << k) <= g.npages;
    if !ok {
        tx.m.corrupt(d);
    }
    ok
}

/// A free block of 2^`order` pages (its first page), or `None`.
fn pages_alloc(tx: &mut ZoneTx<'_>, g: &Geometry, order: u32) -> Option<u32> {
    let mut k = order;
    while (k as usize) < ORDERS && tx.r32(buddy_head(k)) == 0 {
        k += 1;
    }
    if k as usize >= ORDERS {
        return None;
    }
    // The head names a free block of its order (else the zone is damaged: none).
    let p = linked(tx, g, buddy_head(k))?;
    if !is_block(tx, g, p, KIND_FREE, k) {
        return None;
    }
    remove(tx, g, buddy_head(k), p);
    // Split: keep the low half, free the high one, down to the order asked for.
    while k > order {
        k -= 1;
        let q = p + (1 << k);
        tx.w32(Geometry::desc(q) + D_KIND, KIND_FREE);
        tx.w32(Geometry::desc(q) + D_ARG, k);
        push(tx, g, buddy_head(k), q);
    }
    tx.w32(Geometry::desc(p) + D_KIND, KIND_NONE);
    tx.sub64(H_FREE_PAGES, 1 << order);
    Some(p)
}

/// Return the block of 2^`order` pages at `p` (a block of the zone: see [`size_at`]), merging
/// it with free buddies.
fn pages_free(tx: &mut ZoneTx<'_>, g: &Geometry, mut p: u32, order: u32) {
    tx.add64(H_FREE_PAGES, 1 << order);
    let mut k = order;
    while (k as usize) + 1 < ORDERS {
        let b = p ^ (1 << k);
        let bd = Geometry::desc(b);
        // `p` is aligned to 2^k and in the zone, so `b + 2^k` does not overflow.
        if b + (1 << k) > g.npages || tx.r32(bd + D_KIND) != KIND_FREE || tx.r32(bd + D_ARG) != k {
            break;
        }
        remove(tx, g, buddy_head(k), b);
        let hi = p.max(b);
        tx.w32(Geometry::desc(hi) + D_KIND, KIND_NONE);
        tx.w32(Geometry::desc(hi) + D_ARG, 0);
        p = p.min(b);
        k += 1;
    }
    let d = Geometry::desc(p);
    tx.w32(d + D_KIND, KIND_FREE);
    tx.w32(d + D_ARG, k);
    tx.w64(d + D_BITMAP, 0);
    push(tx, g, buddy_head(k), p);
}

/// Whether [`alloc`] of `size` would succeed now.
pub(crate) fn fits(tx: &ZoneTx<'_>, size: Size) -> bool {
    let (partial, order) = match size {
        Size::Class(c) => (tx.r32(partial_head(c)) != 0, 0),
        Size::Order(k) => (false, k),
    };
    partial || (order..ORDERS as u32).any(|k| tx.r32(buddy_head(k)) != 0)
}

/// Offset of a new chunk for `size`, or `None` if no free memory has it, or if the operation
/// met a damaged zone (so that no entry is written where the damage points).
pub(crate) fn alloc(tx: &mut ZoneTx<'_>, g: &Geometry, size: Size) -> Option<usize> {
    let off = match size {
        Size::Order(k) => {
            let p = pages_alloc(tx, g, k)?;
            let d = Geometry::desc(p);
            tx.w32(d + D_KIND, KIND_LARGE);
            tx.w32(d + D_ARG, k);
            g.page(p)
        }
        Size::Class(c) => {
            let p = if tx.r32(partial_head(c)) == 0 {
                let p = pages_alloc(tx, g, 0)?;
                let d = Geometry::desc(p);
                tx.w32(d + D_KIND, KIND_SLAB);
                tx.w32(d + D_ARG, c);
                tx.w64(d + D_BITMAP, 0);
                push(tx, g, partial_head(c), p);
                p
            } else {
                linked(tx, g, partial_head(c))?
            };
            let d = Geometry::desc(p);
            let bm = tx.r64(d + D_BITMAP);
            let i = (!bm).trailing_zeros();
            // A page on the class's list is a slab page of the class with a free chunk.
            if tx.r32(d + D_KIND) != KIND_SLAB || tx.r32(d + D_ARG) != c || i >= chunks(c) {
                tx.m.corrupt(d);
                return None;
            }
            let bm = bm | 1 << i;
            tx.w64(d + D_BITMAP, bm);
            if bm == full_mask(c) {
                remove(tx, g, partial_head(c), p);
            }
            g.page(p) + i as usize * CLASSES[c as usize] as usize
        }
    };
    tx.add64(H_USED, size.bytes() as u64);
    (!tx.m.corrupt_seen()).then_some(off)
}

/// The memory the chunk at `off` occupies (from its page's descriptor); `None` if no
/// allocated chunk starts there (a damaged reference or descriptor: reported).
pub(crate) fn size_at(tx: &ZoneTx<'_>, g: &Geometry, off: usize) -> Option<Size> {
    let p = g.page_of(tx.m, off);
    let d = Geometry::desc(p);
    let arg = tx.r32(d + D_ARG);
    // Where `off` is in its page (0 if `page_of` found it outside the pages: reported).
    let at = off.saturating_sub(g.page(p));
    let size = match tx.r32(d + D_KIND) {
        KIND_SLAB if (arg as usize) < CLASSES.len() => {
            let class = CLASSES[arg as usize] as usize;
            let i = at / class;
            let ok = at.is_multiple_of(class)
                && i < chunks(arg) as usize
                && tx.r64(d + D_BITMAP) & 1 << i != 0;
            ok.then_some(Size::Class(arg))
        }
        KIND_LARGE if at == 0 && is_block(tx, g, p, KIND_LARGE, arg) => Some(Size::Order(arg)),
        _ => None,
    };
    if size.is_none() {
        tx.m.corrupt(off);
    }
    size
}

/// Free the chunk at `off` (allocated by [`alloc`]; if it is not, the zone is damaged:
/// reported, nothing planned).
pub(crate) fn free(tx: &mut ZoneTx<'_>, g: &Geometry, off: usize) {
    let Some(size) = size_at(tx, g, off) else {
        return;
    };
    let p = g.page_of(tx.m, off);
    let d = Geometry::desc(p);
    tx.sub64(H_USED, size.bytes() as u64);
    match size {
        Size::Order(k) => pages_free(tx, g, p, k),
        Size::Class(c) => {
            // `size_at` checked that chunk `i` is in the page and allocated.
            let i = (off - g.page(p)) / CLASSES[c as usize] as usize;
            let bm = tx.r64(d + D_BITMAP);
            let was_full = bm == full_mask(c);
            let bm = bm & !(1 << i);
            tx.w64(d + D_BITMAP, bm);
            if bm == 0 {
                if !was_full {
                    remove(tx, g, partial_head(c), p);
                }
                pages_free(tx, g, p, 0);
            } else if was_full {
                push(tx, g, partial_head(c), p);
            }
        }
    }
}

/// Bytes of the free pages (the count in the header; more pages than the zone has is damage:
/// reported, 0).
pub(crate) fn free_bytes(m: &Mem, g: &Geometry) -> usize {
    let n = m.ld64(H_FREE_PAGES);
    if n > u64::from(g.npages) {
        m.corrupt(H_FREE_PAGES);
        return 0;
    }
    n as usize * PAGE
}

/// Lay out the free blocks of a new region (direct writes: nobody sees it before the magic).
pub(crate) fn init(m: &Mem, g: &Geometry) {
    let mut p = 0u32;
    let mut tails: [u32; ORDERS] = [0; ORDERS];
    let mut free = 0u64;
    while p < g.npages {
        let mut k = 0;
        while (k + 1) < ORDERS as u32
            && p.is_multiple_of(1 << (k + 1))
            && p + (1 << (k + 1)) <= g.npages
        {
            k += 1;
        }
        let d = Geometry::desc(p);
        m.st32(d + D_KIND, KIND_FREE);
        m.st32(d + D_ARG, k);
        // Append to order k's list.
        let t = tails[k as usize];
        m.st32(d + D_PREV, t);
        m.st32(d + D_NEXT, 0);
        if t == 0 {
            m.st32(buddy_head(k), p + 1);
        } else {
            m.st32(Geometry::desc(t - 1) + D_NEXT, p + 1);
        }
        tails[k as usize] = p + 1;
        free += 1 << k;
        p += 1 << k;
    }
    m.st64(H_FREE_PAGES, free);
}

/// The largest block a region of `g` can ever hold, in bytes: 2^k pages, the largest power
/// of two up to its pages and the largest order (every write checks its size against it).
#[inline]
pub(crate) fn largest_block(g: &Geometry) -> usize {
    let k = g.npages.max(1).ilog2().min(ORDERS as u32 - 1);
    PAGE << k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_pick_the_smallest_class() {
        assert_eq!(Size::of(1), Size::Class(0));
        assert_eq!(Size::of(64), Size::Class(0));
        assert_eq!(Size::of(65), Size::Class(1));
        assert_eq!(Size::of(2048), Size::Class(20));
        assert_eq!(Size::of(2049), Size::Order(0));
        assert_eq!(Size::of(4097), Size::Order(1));
        assert_eq!(Size::of(3 * 4096), Size::Order(2));
        for w in CLASSES.windows(2) {
            assert!(w[1] % 16 == 0 && w[1] as f64 / w[0] as f64 <= 1.25 + 1e-9);
        }
        assert!(chunks(0) == 64 && chunks(20) == 2);
    }

    #[test]
    fn the_largest_block_is_the_largest_power_of_two_of_pages() {
        for (npages, pages) in [(2, 2), (3, 2), (4, 4), (1000, 512), (1 << 24, 1 << 23)] {
            let g = Geometry {
                len: 0,
                npages,
                nbuckets: 16,
                buckets_off: 0,
                pages_off: 0,
            };
            assert_eq!(largest_block(&g), PAGE * pages, "{npages} pages");
        }
    }
}
