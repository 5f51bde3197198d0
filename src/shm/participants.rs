//! Which participant slot this process uses in each region it has handles on.
//!
//! A participant is a process, not a handle: every handle of one process on one region (at one
//! address) registers under the same slot, so a process's own handles never compete for slots
//! (eight threads attaching one lock take one slot, not eight). The slot is given back when the
//! last of those handles is dropped.
//!
//! The table is process-local, fixed-size and behind a spin lock whose word is the holder's
//! fork generation + 1: a `fork()` child inherits a copy in which a parent's thread may have
//! held the lock or been half-way through an entry, so a word or an entry of another generation
//! is treated as not there (no process can inherit memory from a descendant). With the table
//! full, a handle keeps a slot of its own (the behaviour without sharing).

use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering::*};

/// Regions per process whose handles share a slot; further ones fall back to a slot per handle.
const ENTRIES: usize = 64;

struct Entry {
    /// The region's address in this process; 0 = unused.
    base: AtomicUsize,
    /// The fork generation that wrote the entry ([`super::identity::fork_generation`]).
    generation: AtomicU32,
    index: AtomicU32,
    /// Registered handles of this process using `index`.
    handles: AtomicU32,
}

#[allow(clippy::declare_interior_mutable_const)] // a template for the array below
const UNUSED: Entry = Entry {
    base: AtomicUsize::new(0),
    generation: AtomicU32::new(0),
    index: AtomicU32::new(0),
    handles: AtomicU32::new(0),
};

static LOCK: AtomicU32 = AtomicU32::new(0);
static TABLE: [Entry; ENTRIES] = [UNUSED; ENTRIES];

/// The table, locked (entries are read and written with `Relaxed`: the lock orders them).
pub(super) struct Table {
    generation: u32,
}

impl Drop for Table {
    fn drop(&mut self) {
        LOCK.store(0, Release);
    }
}

/// Locks the table for this process (fork generation `generation`). Held for a few loads and
/// CASes, never across a wait.
pub(super) fn lock(generation: u32) -> Table {
    let me = generation.wrapping_add(1).max(1);
    loop {
        let w = LOCK.load(Relaxed);
        // `w` of another generation was copied from an ancestor by fork: nobody holds it here.
        if w != me && LOCK.compare_exchange(w, me, Acquire, Relaxed).is_ok() {
            return Table { generation };
        }
        std::thread::yield_now();
    }
}

impl Table {
    fn find(&self, base: usize) -> Option<&'static Entry> {
        TABLE
            .iter()
            .find(|e| e.base.load(Relaxed) == base && e.generation.load(Relaxed) == self.generation)
    }

    /// The slot another handle of this process registered in the region at `base`, now counted
    /// as used by one more handle.
    pub(super) fn share(&self, base: usize) -> Option<u32> {
        let e = self.find(base)?;
        e.handles.fetch_add(1, Relaxed);
        Some(e.index.load(Relaxed))
    }

    /// Whether this process has a slot in the region at `base`.
    pub(super) fn has(&self, base: usize) -> bool {
        self.find(base).is_some()
    }

    /// Records that a handle registered `index` in the region at `base` (nothing if the table
    /// is full: that handle keeps its slot to itself).
    pub(super) fn record(&self, base: usize, index: u32) {
        let free = TABLE
            .iter()
            .find(|e| e.base.load(Relaxed) == 0 || e.generation.load(Relaxed) != self.generation);
        if let Some(e) = free {
            e.generation.store(self.generation, Relaxed);
            e.index.store(index, Relaxed);
            e.handles.store(1, Relaxed);
            e.base.store(base, Relaxed);
        }
    }

    /// A registered handle on `index` in the region at `base` is dropped: whether it was the
    /// last one using the slot (the caller then gives the slot back).
    pub(super) fn leave(&self, base: usize, index: u32) -> bool {
        match self.find(base) {
            Some(e) if e.index.load(Relaxed) == index => {
                if e.handles.fetch_sub(1, Relaxed) == 1 {
                    e.base.store(0, Relaxed);
                    true
                } else {
                    false
                }
            }
            // Not shared (the table was full when it registered).
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::shm::{Config, Mapping, MappingLayout, ShmError, ShmMutex};
    use std::sync::Barrier;

    fn small_mapping() -> (Mapping, usize, Config) {
        // Two participant slots (and the spare one recovery borrows).
        let cfg = Config::new().participants(2).waiter_slots(4);
        let mut plan = MappingLayout::new();
        let off = plan.mutex::<u64>(cfg).unwrap();
        (Mapping::anonymous(plan.len()).unwrap(), off, cfg)
    }

    /// Issue 22, item 7: a process's own handles never use up the participant table; before,
    /// each handle that locked took a slot of its own, so with the table full of this
    /// process's handles a third `attach_in` failed with `NoParticipantSlot`.
    #[test]
    fn handles_of_one_process_share_a_slot() {
        let (map, off, cfg) = small_mapping();
        let a = ShmMutex::init_in(&map, off, 0u64, cfg).unwrap();
        let b = ShmMutex::<u64>::attach_in(&map, off).unwrap();
        *a.lock().unwrap() += 1;
        *b.lock().unwrap() += 1;
        let c = ShmMutex::<u64>::attach_in(&map, off).unwrap();
        *c.lock().unwrap() += 1;
        assert_eq!(c.diagnostics().participants, 1);
        drop((a, b));
        // The slot stays while a handle uses it, and is given back with the last one.
        assert_eq!(c.diagnostics().participants, 1);
        *c.lock().unwrap() += 1;
        drop(c);
        let d = ShmMutex::<u64>::attach_in(&map, off).unwrap();
        assert_eq!(d.diagnostics().participants, 0);
        assert_eq!(*d.lock().unwrap(), 4);
    }

    /// Issue 22, item 7 as reported: rounds of eight threads that each attach, lock and
    /// increment at once; every attach succeeds and no slot is left behind.
    #[test]
    fn concurrent_attach_in_always_succeeds() {
        let (map, off, cfg) = small_mapping();
        let first = ShmMutex::init_in(&map, off, 0u64, cfg).unwrap();
        first.join().unwrap();
        for _ in 0..50 {
            let barrier = Barrier::new(8);
            let attached: Vec<Result<(), ShmError>> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..8)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            let m = ShmMutex::<u64>::attach_in(&map, off)?;
                            *m.lock().unwrap() += 1;
                            Ok(())
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for r in attached {
                r.unwrap();
            }
        }
        assert_eq!(*first.lock().unwrap(), 400);
        assert_eq!(first.diagnostics().participants, 1);
    }
}
