//! One shard of a dictionary: a lock region and the zone it guards, placed one after the other
//! in a [`Mapping`] (the zone on the next 4096-byte boundary). A dictionary is 1 or more
//! shards of equal size, back to back; a key lives in the shard its hash picks.
//!
//! The lock is a [`ShmRwLock`]: updates hold its write side ([`Shard::with`]), lookups its
//! read side ([`Shard::read`]), counted per process as the lock counts every reader, so a dead
//! reader's hold is given back by the lock's recovery. A lookup changes nothing but an
//! entry's used word (one idempotent atomic store), so a reader killed anywhere leaves the
//! zone as it was.

use super::layout::{self, Geometry, Mem, PAGE};
use super::ops::Zone;
use super::ttl::Now;
use super::types::DictError;
use super::{alloc, redo};
use crate::shm::seam;
use crate::shm::{Config, Mapping, ShmError, ShmRwLock, ShmRwLockReadGuard, ShmRwLockWriteGuard};
use core::cell::Cell;
use core::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub(crate) struct Shard {
    pub lock: ShmRwLock<u64>,
    pub mem: Mem,
    pub g: Geometry,
    pub seed: u64,
}

/// Bytes of a shard's lock region, rounded up to a page (where its zone starts).
pub(crate) fn lock_pad(cfg: Config) -> Result<usize, ShmError> {
    Ok(ShmRwLock::<u64>::required_size(cfg)?.next_multiple_of(PAGE))
}

impl Shard {
    /// A new shard at `off` (checked by the caller: page-aligned, in the mapping) with a zone
    /// of `g.len` bytes, shard `index` of `shards`.
    pub(crate) fn init_in(
        map: &Mapping,
        off: usize,
        g: Geometry,
        cfg: Config,
        (index, shards): (u32, u32),
    ) -> Result<Self, ShmError> {
        let lock = ShmRwLock::init_in(map, off, 0u64, cfg)?;
        let mem = claim(map, off + lock_pad(cfg)?, g.len)?;
        let seed = random_seed();
        init_zone(&mem, &g, seed, index, shards);
        Ok(Self { lock, mem, g, seed })
    }

    /// Refuse a place `init_in` would refuse for reasons beyond the mapping's claims (checked
    /// for the whole dictionary by [`check_free`]): a lock in use at `off` (checked by the
    /// caller: page-aligned, a shard's length inside the mapping). Writes nothing.
    pub(crate) fn check_place(map: &Mapping, off: usize) -> Result<(), ShmError> {
        // `off` is page-aligned with a shard's length (more than a lock's header) after it.
        seam::check_no_region_at(map, off)
    }

    /// Attach to the shard at `off`, validating the lock's header and the zone's; its
    /// `(index, shards)` as recorded.
    pub(crate) fn attach_in(map: &Mapping, off: usize) -> Result<(Self, u32, u32), ShmError> {
        let lock = ShmRwLock::<u64>::attach_in(map, off)?;
        let zone_off = off + lock.as_ptr_len().1.next_multiple_of(PAGE);
        if zone_off + layout::META > map.len() {
            return Err(ShmError::TooSmall {
                needed: zone_off + layout::META,
                actual: map.len(),
            });
        }
        // The header's identity fields, read as atomics before the zone is claimed (its
        // length is among them).
        // SAFETY: `zone_off + META <= map.len()`: in the mapping, page-aligned; only atomic
        // loads of the header are made through it.
        let head = unsafe { Mem::new(map.as_ptr().add(zone_off), layout::META) };
        let magic = head.a64(layout::H_MAGIC).load(Ordering::Acquire);
        if magic == 0 {
            return Err(ShmError::Uninitialised);
        }
        if magic != layout::MAGIC {
            return Err(ShmError::BadMagic {
                found: magic,
                expected: layout::MAGIC,
            });
        }
        let version = head.ld32(layout::H_VERSION);
        if version != layout::VERSION {
            return Err(ShmError::VersionMismatch {
                found: version,
                expected: layout::VERSION,
            });
        }
        let len = usize::try_from(head.ld64(layout::H_LEN))
            .map_err(|_| ShmError::Corrupt("dictionary length"))?;
        let g = Geometry::new(len).ok_or(ShmError::Corrupt("dictionary length"))?;
        if head.ld32(layout::H_PAGE) as usize != PAGE
            || head.ld32(layout::H_NPAGES) != g.npages
            || head.ld32(layout::H_NBUCKETS) != g.nbuckets
            || head.ld64(layout::H_BUCKETS) != g.buckets_off as u64
            || head.ld64(layout::H_PAGES) != g.pages_off as u64
        {
            return Err(ShmError::Corrupt("dictionary geometry"));
        }
        let (index, shards) = (head.ld32(layout::H_SHARD), head.ld32(layout::H_SHARDS));
        if shards == 0 || shards > super::config::MAX_SHARDS || index >= shards {
            return Err(ShmError::Corrupt("dictionary shards"));
        }
        if zone_off.saturating_add(len) > map.len() {
            return Err(ShmError::TooSmall {
                needed: zone_off.saturating_add(len),
                actual: map.len(),
            });
        }
        let seed = head.ld64(layout::H_SEED);
        let mem = claim(map, zone_off, len)?;
        Ok((Self { lock, mem, g, seed }, index, shards))
    }

    /// Bytes from this shard's start to the next one's.
    pub(crate) fn stride(&self) -> usize {
        self.lock.as_ptr_len().1.next_multiple_of(PAGE) + self.g.len
    }

    /// Hold the write side; if a writer died (or panicked) inside an operation, finish its
    /// committed update first.
    ///
    /// # Panics
    ///
    /// If this thread holds a side of the lock already (an operation called inside
    /// `get_with` or `update` on a key of the same shard): it would wait for itself for ever.
    pub(crate) fn locked(&self) -> Held<ShmRwLockWriteGuard<'_, u64>> {
        if let Some(side) = held_here(self.seed) {
            reentered(side, Side::Write);
        }
        let guard = self.lock.write();
        // A new operation: what the last one met (if it did not finish) is not its concern.
        self.mem.take_corrupt();
        let guard = match guard {
            Ok(g) => g,
            Err(e) => {
                let g = e.into_inner();
                if redo::replay(&self.mem) {
                    let n = self.mem.ld64(layout::H_REPLAYED);
                    self.mem.st64(layout::H_REPLAYED, n.saturating_add(1));
                }
                g.mark_consistent();
                g
            }
        };
        hold(self.seed, Side::Write);
        Held { _guard: guard }
    }

    /// Hold the read side, with no writer's committed record left unreplayed: a writer that
    /// died (or panicked) holding the write side is reported by the lock to every later
    /// reader until a writer repairs; such a reader lets go, repairs as the next writer
    /// ([`locked`](Self::locked)), and reads again. So no reader sees a half-applied update.
    ///
    /// # Panics
    ///
    /// As [`locked`](Self::locked): a read inside a read of the same shard too (a writer
    /// queued between the two would wait for the first while the second waits for it).
    pub(crate) fn read_locked(&self) -> Held<ShmRwLockReadGuard<'_, u64>> {
        if let Some(side) = held_here(self.seed) {
            reentered(side, Side::Read);
        }
        loop {
            match self.lock.read() {
                Ok(guard) => {
                    hold(self.seed, Side::Read);
                    return Held { _guard: guard };
                }
                Err(e) => {
                    drop(e.into_inner());
                    drop(self.locked());
                }
            }
        }
    }

    /// Run the lookup `f` on the zone under the read side, with the time now (ms): other
    /// lookups, of this process and others, run beside it. `f` may only load from the zone
    /// (and mark an entry used, [`lru::mark_used`](super::lru::mark_used)).
    /// [`DictError::Corrupt`] as for [`with`](Self::with).
    #[inline]
    pub(crate) fn read<R>(&self, f: impl FnOnce(&Zone<'_>, &Now) -> R) -> Result<R, DictError> {
        let _g = self.read_locked();
        crate::crash::point(crate::crash::DICT_READING);
        // This lookup's own corruption report: other threads of the process may be reading.
        self.on_zone(&self.mem.view(), &Now::lazy(), f)
    }

    /// [`read`](Self::read) for a lookup that may fail itself.
    #[inline]
    pub(crate) fn try_read<R>(
        &self,
        f: impl FnOnce(&Zone<'_>, &Now) -> Result<R, DictError>,
    ) -> Result<R, DictError> {
        self.read(f)?
    }

    /// Run `f` on the zone under the lock, with the time now (ms); [`DictError::Corrupt`] if
    /// the zone (or a dead holder's redo record) names memory outside it, a structure or a
    /// count that cannot be (`f`'s changes are then not committed).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&Zone<'_>, &Now) -> R) -> Result<R, DictError> {
        self.with_at(Now::lazy(), f)
    }

    /// [`with`](Self::with) at the time `now` (one the caller read already, or lazy).
    #[inline]
    pub(crate) fn with_at<R>(
        &self,
        now: Now,
        f: impl FnOnce(&Zone<'_>, &Now) -> R,
    ) -> Result<R, DictError> {
        let _g = self.locked();
        self.on_zone(&self.mem, &now, f)
    }

    /// Run `f` on the zone through `mem` (the shard's, or a lookup's view of it), a side of
    /// the lock held; what `f` met of a corrupt zone (`mem`'s report) is the error.
    #[inline]
    fn on_zone<R>(
        &self,
        mem: &Mem,
        now: &Now,
        f: impl FnOnce(&Zone<'_>, &Now) -> R,
    ) -> Result<R, DictError> {
        let zone = Zone {
            m: mem,
            g: self.g,
            seed: self.seed,
        };
        let r = f(&zone, now);
        match mem.take_corrupt() {
            None => Ok(r),
            Some(off) => Err(corrupt_error(off)),
        }
    }

    /// [`with`](Self::with) for an operation that may fail itself.
    pub(crate) fn try_with<R>(
        &self,
        f: impl FnOnce(&Zone<'_>, &Now) -> Result<R, DictError>,
    ) -> Result<R, DictError> {
        self.with(f)?
    }

    /// [`try_with`](Self::try_with) at the time `now`.
    #[inline]
    pub(crate) fn try_with_at<R>(
        &self,
        now: Now,
        f: impl FnOnce(&Zone<'_>, &Now) -> Result<R, DictError>,
    ) -> Result<R, DictError> {
        self.with_at(now, f)?
    }
}

/// What an operation that met damage at `off` reports.
#[cold]
fn corrupt_error(off: usize) -> DictError {
    DictError::Corrupt(format!(
        "a reference points outside the zone or to no entry, or a count or redo record is \
         impossible (offset {off:#x}): the region was written by something other than this \
         dictionary; nothing was changed (check() describes the damage)"
    ))
}

/// How long the pass over a shard waits, between two slices, for a woken waiter to take the
/// lock: a wake-up's latency, a few µs on an idle CPU, tens on an idle vCPU, with room (on a
/// busy machine the waiter may not run that soon: the pass then takes the lock back, and waits
/// again after its next slice). A waiter that died queued is counted until the lock's recovery
/// takes it out: meanwhile each slice waits this long for it.
const LET_IN: Duration = Duration::from_micros(200);

impl Shard {
    /// Between two slices of a pass (the lock released): if a contender is on its way to the
    /// lock ([`seam::writer_coming`]), let it take the lock first, waiting at most [`LET_IN`].
    /// Without this the pass, re-taking the lock at once, would barge past a woken waiter
    /// (Go's normal mode) slice after slice, until that waiter had waited 1 ms.
    pub(crate) fn let_waiter_in(&self) {
        if !seam::writer_coming(&self.lock) {
            return;
        }
        let start = Instant::now();
        let mut spins = 0u32;
        while seam::writer_coming(&self.lock) && start.elapsed() < LET_IN {
            spins += 1;
            if spins.is_multiple_of(64) {
                // The waiter may need this CPU.
                std::thread::yield_now();
            } else {
                core::hint::spin_loop();
            }
        }
    }
}

/// How many nested shard locks a thread's record holds (deeper ones go unchecked).
const NESTED: usize = 8;

/// The side of a shard's lock a thread holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// A lookup's.
    Read,
    /// An update's.
    Write,
}

/// The shards whose lock a thread holds, by seed (random per shard, the same in every process
/// and mapping of it), with the side held, innermost last: what tells a re-entrant call, which
/// would wait for itself, from a nested one on another shard or dictionary. Plain cells, no
/// destructor: an access is a load from the thread's block.
struct HeldShards {
    seeds: [Cell<u64>; NESTED],
    writes: [Cell<bool>; NESTED],
    depth: Cell<usize>,
}

thread_local! {
    static HELD: HeldShards = const {
        HeldShards {
            seeds: [const { Cell::new(0) }; NESTED],
            writes: [const { Cell::new(false) }; NESTED],
            depth: Cell::new(0),
        }
    };
}

/// The side of the lock of the shard with `seed` this thread holds, if any.
#[inline]
fn held_here(seed: u64) -> Option<Side> {
    HELD.with(|h| {
        let d = h.depth.get().min(NESTED);
        let i = h.seeds[..d].iter().position(|s| s.get() == seed)?;
        Some(if h.writes[i].get() {
            Side::Write
        } else {
            Side::Read
        })
    })
}

/// Record that this thread holds `side` of the shard with `seed` (past [`NESTED`] levels,
/// counted only).
#[inline]
fn hold(seed: u64, side: Side) {
    HELD.with(|h| {
        let d = h.depth.get();
        if let (Some(s), Some(w)) = (h.seeds.get(d), h.writes.get(d)) {
            s.set(seed);
            w.set(side == Side::Write);
        }
        h.depth.set(d + 1);
    });
}

/// Record that this thread released the innermost shard it held.
#[inline]
fn release() {
    HELD.with(|h| h.depth.set(h.depth.get().saturating_sub(1)));
}

#[cold]
#[inline(never)]
fn reentered(held: Side, wanted: Side) -> ! {
    let side = |s| match s {
        Side::Read => "read",
        Side::Write => "write",
    };
    panic!(
        "gomutex::dict::ShmDict: this thread already holds the {} side of the lock of this \
         key's shard and asks for its {} side (a dictionary operation called inside get_with \
         or update on the same shard): waiting for it would deadlock",
        side(held),
        side(wanted)
    )
}

/// A side of a shard's lock, held by this thread (recorded in [`HELD`] while it lives; a
/// thread releases its shards in the reverse order, as each is held for one call).
pub(crate) struct Held<G> {
    _guard: G,
}

impl<G> Drop for Held<G> {
    fn drop(&mut self) {
        // Before the guard (a field) unlocks.
        release();
    }
}

/// Refuse `off..off + len` of `map` if a handle of this process uses part of it (a lock, a
/// shared value, another dictionary), as [`ShmRwLock::init_in`] and
/// [`Mapping::shared_slice`] would, but before anything is written.
pub(crate) fn check_free(map: &Mapping, off: usize, len: usize) -> Result<(), ShmError> {
    seam::check_range_free(map, off, len)
}

/// The zone's bytes, claimed in `map` (so no lock of this process is placed over them).
fn claim(map: &Mapping, off: usize, len: usize) -> Result<Mem, ShmError> {
    let words = map.shared_slice::<AtomicU64>(off, len / 8)?;
    // SAFETY: `words` is in the mapping, which the dictionary keeps alive, 8-aligned, and
    // claimed for this zone alone; the bytes are only reached under the lock (or, for the
    // immutable header, after the magic), through atomics or, for entry bytes, plain copies
    // that the lock keeps from racing (readers only read them).
    Ok(unsafe { Mem::new(words.as_ptr() as *mut u8, len / 8 * 8) })
}

/// A seed for the index's hash, from the kernel's random source (the clock if that fails).
pub(crate) fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: an 8-byte buffer for the kernel to fill.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 8, 0) };
    if n == 8 {
        u64::from_le_bytes(b)
    } else {
        seam::mono_ns() ^ u64::from(seam::current_pid()) << 32
    }
}

/// Write a new zone's header and structures, publishing it with the magic, last.
fn init_zone(m: &Mem, g: &Geometry, seed: u64, index: u32, shards: u32) {
    use layout::*;
    m.a64(H_MAGIC).store(0, Ordering::Release);
    // Header, redo record, descriptors and buckets start at zero; the pages may hold anything.
    let mut off = 8;
    while off < g.pages_off {
        m.st64(off, 0);
        off += 8;
    }
    m.st32(H_VERSION, VERSION);
    m.st32(H_PAGE, PAGE as u32);
    m.st64(H_LEN, g.len as u64);
    m.st32(H_NPAGES, g.npages);
    m.st32(H_NBUCKETS, g.nbuckets);
    m.st64(H_BUCKETS, g.buckets_off as u64);
    m.st64(H_PAGES, g.pages_off as u64);
    m.st64(H_SEED, seed);
    m.st32(H_SHARD, index);
    m.st32(H_SHARDS, shards);
    alloc::init(m, g);
    m.a64(H_MAGIC).store(MAGIC, Ordering::Release);
}
