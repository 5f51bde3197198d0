//! `check()`: walk every structure of a region and verify what the operations rely on, for
//! tests and operators. Read-only; runs under the lock.
//!
//! * **Allocator**: the pages form a tiling of buddy blocks (each free, large or a slab page,
//!   aligned to its size); every free block is on its order's list and nothing else is; no
//!   two free buddies are left unmerged; each slab page has chunks in use, is on its class's
//!   list exactly when it has a free one; the free-page and used-byte counts add up.
//! * **Index**: every chain holds entries in allocated chunks, in the right bucket, with
//!   distinct keys, and no cycle.
//! * **LRU**: the list runs head to tail with consistent back links and holds exactly the
//!   indexed entries.
//! * **Entries**: each fits its chunk, in the smallest size class that holds it; the entry
//!   count is right; no redo record is pending.

use super::alloc::{self, Size};
use super::index;
use super::layout::*;
use super::redo::{self, ZoneTx};
use std::collections::{HashMap, HashSet};

/// What [`check`](super::ShmDict::check) found in a valid region.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckReport {
    /// Entries stored (live or expired but not yet freed).
    pub entries: u64,
    /// Pages in free buddy blocks.
    pub free_pages: u64,
    /// Slab pages (of all classes).
    pub slab_pages: u64,
    /// Blocks holding one large entry.
    pub large_blocks: u64,
    /// Bytes of the chunks entries occupy.
    pub used_bytes: u64,
    /// The longest index chain.
    pub longest_chain: u64,
}

impl CheckReport {
    /// Add another shard's figures (the longest chain is the longest of both).
    pub(crate) fn add(&mut self, o: &CheckReport) {
        // Each checked against its zone, so they cannot overflow; saturating all the same.
        self.entries = self.entries.saturating_add(o.entries);
        self.free_pages = self.free_pages.saturating_add(o.free_pages);
        self.slab_pages = self.slab_pages.saturating_add(o.slab_pages);
        self.large_blocks = self.large_blocks.saturating_add(o.large_blocks);
        self.used_bytes = self.used_bytes.saturating_add(o.used_bytes);
        self.longest_chain = self.longest_chain.max(o.longest_chain);
    }
}

macro_rules! ensure {
    ($c:expr, $($fmt:tt)*) => {
        if !$c {
            return Err(format!($($fmt)*));
        }
    };
}

/// Walk and validate everything; the first violation found, described. The steps run in this
/// order, each on what the ones before found.
pub(crate) fn check(m: &Mem, g: &Geometry, seed: u64) -> Result<CheckReport, String> {
    ensure!(!redo::pending(m), "a committed redo record is pending");
    let mut rep = CheckReport::default();
    let pages = tiling(m, g, &mut rep)?;
    free_lists(m, g, &pages)?;
    slab_lists(m, g, &pages)?;
    let indexed = index(m, g, seed, &pages, &mut rep)?;
    lru(m, &indexed)?;
    rep.entries = m.ld64(H_COUNT);
    Ok(rep)
}

/// What the walk over the pages found.
struct Pages {
    /// Free buddy blocks: (first page, order).
    free_blocks: HashSet<(u32, u32)>,
    /// Slab pages.
    slabs: HashSet<u32>,
    /// Allocated chunks: offset -> size.
    chunks: HashMap<usize, Size>,
}

/// The pages are a tiling of blocks, each free, large or a slab page, aligned to its size; the
/// free-page and used-byte counts add up; no two free buddies are left unmerged.
fn tiling(m: &Mem, g: &Geometry, rep: &mut CheckReport) -> Result<Pages, String> {
    let np = g.npages;
    let mut free_blocks: HashSet<(u32, u32)> = HashSet::new(); // (page, order)
    let mut slabs: HashSet<u32> = HashSet::new();
    let mut chunks: HashMap<usize, Size> = HashMap::new(); // allocated chunk offset -> size
    let mut used = 0u64;
    let mut p = 0u32;
    while p < np {
        let d = Geometry::desc(p);
        let (kind, arg) = (m.ld32(d + D_KIND), m.ld32(d + D_ARG));
        match kind {
            KIND_FREE | KIND_LARGE => {
                ensure!((arg as usize) < ORDERS, "page {p}: order {arg}");
                ensure!(
                    p.is_multiple_of(1 << arg),
                    "page {p}: block of order {arg} misaligned"
                );
                ensure!(
                    p + (1 << arg) <= np,
                    "page {p}: block of order {arg} past the end"
                );
                for q in p + 1..p + (1 << arg) {
                    ensure!(
                        m.ld32(Geometry::desc(q) + D_KIND) == KIND_NONE,
                        "page {q}: inside the block at {p} but marked"
                    );
                }
                if kind == KIND_FREE {
                    free_blocks.insert((p, arg));
                    rep.free_pages += 1 << arg;
                } else {
                    rep.large_blocks += 1;
                    chunks.insert(g.page(p), Size::Order(arg));
                    used += (PAGE as u64) << arg;
                }
                p += 1 << arg;
            }
            KIND_SLAB => {
                ensure!((arg as usize) < CLASSES.len(), "page {p}: class {arg}");
                let bm = m.ld64(d + D_BITMAP);
                let n = alloc::chunks(arg);
                ensure!(bm != 0, "page {p}: an empty slab page was not freed");
                ensure!(
                    n == 64 || bm >> n == 0,
                    "page {p}: bitmap {bm:#x} past {n} chunks"
                );
                for i in 0..n {
                    if bm & 1 << i != 0 {
                        let c = g.page(p) + i as usize * CLASSES[arg as usize] as usize;
                        chunks.insert(c, Size::Class(arg));
                        used += u64::from(CLASSES[arg as usize]);
                    }
                }
                slabs.insert(p);
                rep.slab_pages += 1;
                p += 1;
            }
            _ => return Err(format!("page {p}: starts no block (kind {kind})")),
        }
    }
    ensure!(
        m.ld64(H_FREE_PAGES) == rep.free_pages,
        "free page count {} but {} pages are free",
        m.ld64(H_FREE_PAGES),
        rep.free_pages
    );
    ensure!(
        m.ld64(H_USED) == used,
        "used bytes {} but chunks hold {used}",
        m.ld64(H_USED)
    );
    rep.used_bytes = used;
    for &(p, k) in &free_blocks {
        let b = p ^ (1 << k);
        ensure!(
            (k as usize) + 1 >= ORDERS || !free_blocks.contains(&(b, k)),
            "free buddies {p} and {b} of order {k} not merged"
        );
    }
    Ok(Pages {
        free_blocks,
        slabs,
        chunks,
    })
}

/// The pages of the list whose head is at `head`, checked: in range, back links right, no
/// cycle.
fn page_list(m: &Mem, np: u32, head: usize, what: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    let (mut r, mut prev) = (m.ld32(head), 0u32);
    while r != 0 {
        ensure!(r <= np, "{what}: page {} out of range", r - 1);
        ensure!(out.len() <= np as usize, "{what}: cycle");
        let d = Geometry::desc(r - 1);
        ensure!(
            m.ld32(d + D_PREV) == prev,
            "{what}: page {}: bad back link",
            r - 1
        );
        out.push(r - 1);
        prev = r;
        r = m.ld32(d + D_NEXT);
    }
    Ok(out)
}

/// Every free block is on its order's list, and nothing else is.
fn free_lists(m: &Mem, g: &Geometry, pages: &Pages) -> Result<(), String> {
    let mut on_lists = 0usize;
    for k in 0..ORDERS as u32 {
        for p in page_list(
            m,
            g.npages,
            H_BUDDY + 4 * k as usize,
            &format!("free list {k}"),
        )? {
            ensure!(
                pages.free_blocks.contains(&(p, k)),
                "free list {k}: page {p} is no such block"
            );
            on_lists += 1;
        }
    }
    ensure!(
        on_lists == pages.free_blocks.len(),
        "free blocks missing from their lists"
    );
    Ok(())
}

/// A slab page is on its class's list exactly when it has a free chunk.
fn slab_lists(m: &Mem, g: &Geometry, pages: &Pages) -> Result<(), String> {
    let mut partial = 0usize;
    for c in 0..CLASSES.len() as u32 {
        for p in page_list(
            m,
            g.npages,
            H_PARTIAL + 4 * c as usize,
            &format!("class {c} list"),
        )? {
            ensure!(
                pages.slabs.contains(&p),
                "class {c} list: page {p} is not a slab page"
            );
            let d = Geometry::desc(p);
            ensure!(
                m.ld32(d + D_ARG) == c,
                "class {c} list: page {p} of another class"
            );
            ensure!(
                m.ld64(d + D_BITMAP) != alloc::full_mask(c),
                "class {c} list: page {p} is full"
            );
            partial += 1;
        }
    }
    let not_full = pages
        .slabs
        .iter()
        .filter(|&&p| {
            let d = Geometry::desc(p);
            m.ld64(d + D_BITMAP) != alloc::full_mask(m.ld32(d + D_ARG))
        })
        .count();
    ensure!(
        partial == not_full,
        "slab pages with free chunks missing from their lists"
    );
    Ok(())
}

/// Every chain holds entries in allocated chunks, in the right bucket, with distinct keys and
/// no cycle; each entry fits its chunk, in the smallest size class that holds it; the entry
/// count is right and no chunk is lost. The entries indexed.
fn index(
    m: &Mem,
    g: &Geometry,
    seed: u64,
    pages: &Pages,
    rep: &mut CheckReport,
) -> Result<HashSet<usize>, String> {
    let tx = ZoneTx::new(m);
    let chunks = &pages.chunks;
    let count = m.ld64(H_COUNT);
    let mut indexed: HashSet<usize> = HashSet::new();
    let mut keys: HashSet<&[u8]> = HashSet::new();
    for b in 0..g.nbuckets {
        let mut r = m.ld32(g.buckets_off + 4 * b as usize);
        let mut len = 0u64;
        while r != 0 {
            let e = index::off(r);
            ensure!(
                chunks.contains_key(&e),
                "bucket {b}: entry at {e:#x} is not allocated"
            );
            ensure!(
                indexed.insert(e),
                "entry at {e:#x} indexed twice (or a cycle)"
            );
            entry(m, &tx, e, chunks[&e])?;
            let key = index::key_of(&tx, e);
            let h = index::hash(seed, key) as u32;
            ensure!(m.ld32(e + E_HASH) == h, "entry at {e:#x}: stale hash");
            ensure!(
                h & (g.nbuckets - 1) == b,
                "entry at {e:#x}: in bucket {b}, hashes elsewhere"
            );
            ensure!(keys.insert(key), "key {key:?} stored twice");
            ensure!(
                m.ld64(e + E_SEQ) <= m.ld64(H_SEQ),
                "entry at {e:#x}: from the future"
            );
            len += 1;
            r = m.ld32(e + E_HNEXT);
        }
        rep.longest_chain = rep.longest_chain.max(len);
    }
    ensure!(
        indexed.len() as u64 == count,
        "{} entries indexed, count says {count}",
        indexed.len()
    );
    ensure!(
        indexed.len() == chunks.len(),
        "{} chunks allocated, {} entries indexed (space lost)",
        chunks.len(),
        indexed.len()
    );
    Ok(indexed)
}

/// One entry's fields: its kind, its used word, an integer's or a list's encoding, its size
/// against its chunk's.
fn entry(m: &Mem, tx: &ZoneTx, e: usize, chunk: Size) -> Result<(), String> {
    let (klen, kind) = index::klen_kind(tx, e);
    let vlen = m.ld32(e + E_VLEN) as usize;
    ensure!(
        kind == VALUE_BYTES || kind == VALUE_INT || kind == VALUE_LIST,
        "entry at {e:#x}: kind {kind}"
    );
    ensure!(
        m.ld32(e + E_USED) <= 1,
        "entry at {e:#x}: used word {}",
        m.ld32(e + E_USED)
    );
    ensure!(
        kind != VALUE_INT || vlen == 8,
        "entry at {e:#x}: integer of {vlen} bytes"
    );
    if kind == VALUE_LIST {
        let items = super::list::items(m.bytes(e + E_VALUE, vlen));
        ensure!(
            items.is_some_and(|n| n > 0),
            "entry at {e:#x}: a list of {vlen} bytes that is not whole (or empty)"
        );
    }
    let need = entry_size(klen, vlen);
    ensure!(
        Size::of(need) == chunk,
        "entry at {e:#x}: {need} bytes in a chunk of {}",
        chunk.bytes()
    );
    Ok(())
}

/// The LRU list runs head to tail with consistent back links and holds exactly the indexed
/// entries.
fn lru(m: &Mem, indexed: &HashSet<usize>) -> Result<(), String> {
    let count = m.ld64(H_COUNT);
    let (mut r, mut prev, mut n) = (m.ld32(H_LRU_HEAD), 0u32, 0u64);
    while r != 0 {
        let e = index::off(r);
        ensure!(indexed.contains(&e), "LRU: entry at {e:#x} is not indexed");
        ensure!(n < count, "LRU: longer than the entry count (a cycle?)");
        ensure!(
            m.ld32(e + E_PREV) == prev,
            "LRU: entry at {e:#x}: bad back link"
        );
        prev = r;
        r = m.ld32(e + E_NEXT);
        n += 1;
    }
    ensure!(
        m.ld32(H_LRU_TAIL) == prev,
        "LRU: tail is not the last entry"
    );
    ensure!(n == count, "LRU holds {n} entries, the index {count}");
    Ok(())
}
