//! The redo record: how one update of several words becomes one atomic store.
//!
//! An operation plans its changes in a [`ZoneTx`]: every write to a structure word (index link,
//! LRU link, allocator bitmap or free list, header count) goes into the transaction's overlay,
//! and every read goes through it, so the plan sees its own writes while the region is left
//! untouched. Bytes of a *new* entry are written straight into its chunk, which is free (no
//! structure names it) until the transaction commits. [`ZoneTx::commit`] then
//!
//! 1. copies the pairs `(offset|width, value)` into the region's redo record,
//! 2. stores their count: **the commit point**, one atomic store,
//! 3. applies them (each an absolute value, so applying twice is applying once),
//! 4. stores 0.
//!
//! A process killed before step 2 changed nothing that anybody can see (its new entry's bytes
//! sit in a free chunk); killed after it, its whole update will be applied. [`replay`], run by
//! the next holder of the lock when the lock reports the death, applies a committed record
//! again and clears it. So every structure is always either before or after a transaction, and
//! every key holds its old or its new value.//!
//! The lock's journal (`shm/journal.rs`, its `Txn`) is the same idea, a redo log committed by
//! one store, on other terms, which is why the two are separate types with separate logs: a
//! `Txn` writes typed fields (per-participant counts, slot states, a few header counters) and
//! its commit point is the state word's CAS (or a slot's), decided under the journal lock and
//! replayed by whoever takes that lock from a dead holder; a [`ZoneTx`] writes any word of a
//! dictionary zone, reads through its own overlay, holds hundreds of writes, and its commit
//! point is the record's length, under the shard's `ShmMutex`. Sharing one would put the
//! zone's words in the lock's region or the lock's fields in the zone's record.

use super::layout::{Mem, Words, LOG, LOG_CAP, LOG_ENTRIES};
use crate::crash;
use core::sync::atomic::{fence, AtomicU64, Ordering};
use std::collections::HashMap;

/// Planned writes past which a plan indexes them (a linear search up to there).
const INDEXED: usize = 64;
/// Planned writes a transaction holds in itself before it allocates (an update of a key in
/// place, an incr, a delete: no allocation).
const INLINE: usize = 16;

/// A transaction being planned: writes kept aside until [`commit`](ZoneTx::commit).
pub(crate) struct ZoneTx<'m> {
    pub(crate) m: &'m Mem,
    /// `(offset << 1 | is_u64, value)`: the first [`INLINE`] in `small` (`n` of them), then
    /// all of them in `w`.
    small: [(u64, u64); INLINE],
    n: usize,
    w: Vec<(u64, u64)>,
    /// Where each key is in `w`, once `w` is long (a plan of many evictions).
    at: Option<HashMap<u64, usize>>,
    /// At most this many writes (the redo record's size, or unbounded for a plan that is
    /// only looked at).
    cap: usize,
}

impl<'m> ZoneTx<'m> {
    pub(crate) fn new(m: &'m Mem) -> Self {
        Self {
            m,
            small: [(0, 0); INLINE],
            n: 0,
            w: Vec::new(),
            at: None,
            cap: LOG_CAP,
        }
    }

    /// A transaction of any size, to find out what a sequence of changes would do: it may be
    /// committed only if it fits the redo record ([`fits_record`](Self::fits_record)).
    pub(crate) fn plan(m: &'m Mem) -> Self {
        Self {
            cap: usize::MAX,
            ..Self::new(m)
        }
    }

    /// Whether the writes planned fit the redo record.
    pub(crate) fn fits_record(&self) -> bool {
        self.len() <= LOG_CAP
    }

    /// The writes planned so far.
    #[inline]
    fn planned(&self) -> &[(u64, u64)] {
        if self.w.is_empty() {
            &self.small[..self.n]
        } else {
            &self.w
        }
    }

    #[inline]
    fn planned_mut(&mut self) -> &mut [(u64, u64)] {
        if self.w.is_empty() {
            &mut self.small[..self.n]
        } else {
            &mut self.w
        }
    }

    /// Writes planned so far.
    pub(crate) fn len(&self) -> usize {
        self.planned().len()
    }

    #[inline]
    fn find(&self, key: u64) -> Option<usize> {
        match &self.at {
            None => self.planned().iter().position(|&(k, _)| k == key),
            Some(at) => at.get(&key).copied(),
        }
    }

    #[inline]
    pub(crate) fn r32(&self, off: usize) -> u32 {
        match self.find((off as u64) << 1) {
            Some(i) => self.planned()[i].1 as u32,
            None => self.m.ld32(off),
        }
    }

    #[inline]
    pub(crate) fn r64(&self, off: usize) -> u64 {
        match self.find((off as u64) << 1 | 1) {
            Some(i) => self.planned()[i].1,
            None => self.m.ld64(off),
        }
    }

    #[inline]
    fn put(&mut self, key: u64, v: u64) {
        match self.find(key) {
            Some(i) => self.planned_mut()[i].1 = v,
            None => self.push(key, v),
        }
    }

    /// Add a write of a word not planned yet.
    #[inline]
    fn push(&mut self, key: u64, v: u64) {
        debug_assert!(self.find(key).is_none(), "planned twice");
        // Bounded by construction (see `alloc`: the largest plan, a store that splits and
        // frees an entry that merges every order, is well under LOG_CAP).
        assert!(
            self.len() < self.cap,
            "gomutex::dict::ShmDict: transaction too large"
        );
        if self.w.is_empty() && self.n < INLINE {
            self.small[self.n] = (key, v);
            self.n += 1;
            return;
        }
        if self.w.is_empty() {
            self.w.reserve(4 * INLINE);
            self.w.extend_from_slice(&self.small);
        }
        self.w.push((key, v));
        if let Some(at) = &mut self.at {
            at.insert(key, self.w.len() - 1);
        } else if self.w.len() > INDEXED {
            let at = self.w.iter().enumerate().map(|(i, &(k, _))| (k, i));
            self.at = Some(at.collect());
        }
    }

    /// [`w32`](Self::w32) of a word this transaction has not planned (the caller knows: no
    /// search of the writes planned).
    #[inline]
    pub(crate) fn w32_unplanned(&mut self, off: usize, v: u32) {
        self.m.a32(off);
        self.push((off as u64) << 1, u64::from(v));
    }

    /// [`w64`](Self::w64) of a word this transaction has not planned.
    #[inline]
    pub(crate) fn w64_unplanned(&mut self, off: usize, v: u64) {
        self.m.a64(off);
        self.push((off as u64) << 1 | 1, v);
    }

    #[inline]
    pub(crate) fn w32(&mut self, off: usize, v: u32) {
        // Checked now, so that a bad offset fails while planning, not half-way through
        // applying.
        self.m.a32(off);
        self.put((off as u64) << 1, u64::from(v));
    }

    #[inline]
    pub(crate) fn w64(&mut self, off: usize, v: u64) {
        self.m.a64(off);
        self.put((off as u64) << 1 | 1, v);
    }

    /// Add `n` to the count at `off`. A count that would pass `u64::MAX` was damaged: reported,
    /// and left as it is.
    pub(crate) fn add64(&mut self, off: usize, n: u64) {
        match self.r64(off).checked_add(n) {
            Some(v) => self.w64(off, v),
            None => self.m.corrupt(off),
        }
    }

    /// Subtract `n` from the count at `off`; one below `n` was damaged (as [`add64`](Self::add64)).
    pub(crate) fn sub64(&mut self, off: usize, n: u64) {
        match self.r64(off).checked_sub(n) {
            Some(v) => self.w64(off, v),
            None => self.m.corrupt(off),
        }
    }

    /// Make the planned writes happen, all or none, whatever instant the process dies at.
    #[inline]
    pub(crate) fn commit(self) {
        // By reference: a transaction is a few hundred bytes, not to be moved.
        self.commit_here();
    }

    fn commit_here(&self) {
        // A plan made over a corrupt zone is not applied (the operation fails).
        if self.len() == 0 || self.m.corrupt_seen() {
            return;
        }
        assert!(
            self.fits_record(),
            "gomutex::dict::ShmDict: transaction too large"
        );
        let m = self.m;
        let log = m.a64s(LOG_ENTRIES, 2 * self.len());
        for (&(k, v), pair) in self.planned().iter().zip(log.chunks_exact(2)) {
            pair[0].store(k, Ordering::Relaxed);
            pair[1].store(v, Ordering::Relaxed);
        }
        publish(m, self.len());
    }
}

/// Steps 2 to 4 of a commit: the first `n` pairs of the redo record are written (step 1);
/// commit them, apply them and clear the record.
fn publish(m: &Mem, n: usize) {
    crash::point(crash::DICT_LOGGED);
    // The commit point. Release: the pairs and the new entry's bytes (plain copies) are in
    // memory before the count that makes them count.
    m.a64(LOG).store(n as u64, Ordering::Release);
    // No applied write may be seen before the commit.
    fence(Ordering::SeqCst);
    crash::point(crash::DICT_COMMITTED);
    apply_record(m, n);
    crash::point(crash::DICT_APPLIED);
    // Every applied write lands before the record is cleared: this store is a release (a
    // fence before it orders nothing more, and cost a rate-limit check 5 to 8 ns).
    m.a64(LOG).store(0, Ordering::Release);
}

/// Where a transaction's writes go while it is planned: a [`ZoneTx`], which reads its own writes
/// back, or a [`Direct`] record, for writes that need no reading back.
pub(crate) trait Plan {
    /// Plan `v` at `off`, a word not planned yet.
    fn w32_unplanned(&mut self, off: usize, v: u32);
    /// Plan `v` at `off`, a word not planned yet.
    fn w64_unplanned(&mut self, off: usize, v: u64);
}

impl Plan for ZoneTx<'_> {
    #[inline]
    fn w32_unplanned(&mut self, off: usize, v: u32) {
        ZoneTx::w32_unplanned(self, off, v);
    }
    #[inline]
    fn w64_unplanned(&mut self, off: usize, v: u64) {
        ZoneTx::w64_unplanned(self, off, v);
    }
}

/// A transaction of writes to distinct words that reads none of them back (an update in
/// place): its pairs go straight into the redo record, which is free while nothing is
/// committed (the lock is held), and [`commit`](Self::commit) publishes them as
/// [`ZoneTx::commit`] does. Nothing to search, nothing to copy.
pub(crate) struct Direct<'m> {
    m: &'m Mem,
    /// The record's pairs, bounds-checked once (empty, and the zone reported corrupt, if
    /// they are not in it: nothing is then written or committed).
    log: &'m [AtomicU64],
    n: usize,
}

impl<'m> Direct<'m> {
    pub(crate) fn new(m: &'m Mem) -> Self {
        Self {
            m,
            log: m.a64s(LOG_ENTRIES, 2 * LOG_CAP),
            n: 0,
        }
    }

    #[inline]
    fn push(&mut self, key: u64, v: u64) {
        assert!(
            self.n < LOG_CAP,
            "gomutex::dict::ShmDict: transaction too large"
        );
        if let Some(pair) = self.log.get(2 * self.n..2 * self.n + 2) {
            pair[0].store(key, Ordering::Relaxed);
            pair[1].store(v, Ordering::Relaxed);
        }
        self.n += 1;
    }

    /// Make the writes happen, all or none (as [`ZoneTx::commit`]).
    pub(crate) fn commit(self) {
        if self.n == 0 || self.m.corrupt_seen() {
            return;
        }
        publish(self.m, self.n);
    }
}

impl Plan for Direct<'_> {
    #[inline]
    fn w32_unplanned(&mut self, off: usize, v: u32) {
        // Checked now, as `ZoneTx::w32` does.
        self.m.a32(off);
        self.push((off as u64) << 1, u64::from(v));
    }
    #[inline]
    fn w64_unplanned(&mut self, off: usize, v: u64) {
        self.m.a64(off);
        self.push((off as u64) << 1 | 1, v);
    }
}

impl Words for ZoneTx<'_> {
    #[inline]
    fn r32(&self, off: usize) -> u32 {
        ZoneTx::r32(self, off)
    }
    #[inline]
    fn r64(&self, off: usize) -> u64 {
        ZoneTx::r64(self, off)
    }
    #[inline]
    fn mem(&self) -> &Mem {
        self.m
    }
}

/// The offset a pair's key names (`offset << 1 | is_u64`); past the addressable it is
/// `usize::MAX`, which every access refuses (as corrupt).
fn target(k: u64) -> usize {
    usize::try_from(k >> 1).unwrap_or(usize::MAX)
}

/// Apply the first `n` pairs of the redo record (each an absolute value: applying twice is
/// applying once).
fn apply_record(m: &Mem, n: usize) {
    // The record's words, bounds-checked once (`n` is at most `LOG_CAP`: checked by both
    // callers), not twice per pair.
    let log = m.a64s(LOG_ENTRIES, 2 * n.min(LOG_CAP));
    let half = n / 2;
    for (i, pair) in log.chunks_exact(2).enumerate() {
        if i == half && i > 0 {
            crash::point(crash::DICT_HALF_APPLIED);
        }
        let (k, v) = (
            pair[0].load(Ordering::Relaxed),
            pair[1].load(Ordering::Relaxed),
        );
        if k & 1 == 1 {
            m.st64(target(k), v);
        } else {
            m.st32(target(k), v as u32);
        }
    }
}

/// After a death inside the lock: finish a committed transaction (apply its record again) and
/// clear the record. Returns whether there was one. Idempotent, so a replayer that dies too
/// leaves it for the next one.
///
/// A record that [`ZoneTx::commit`] cannot have written (longer than the record, or a pair
/// outside the zone or misaligned) is damage: reported, nothing applied, and left in place
/// for [`check`](super::ShmDict::check) to describe.
pub(crate) fn replay(m: &Mem) -> bool {
    let n = m.a64(LOG).load(Ordering::Acquire);
    if n == 0 {
        return false;
    }
    if n > LOG_CAP as u64 {
        m.corrupt(LOG);
        return false;
    }
    // Each pair checked before any is applied (an access outside the zone reports it).
    for i in 0..n as usize {
        let k = m.ld64(LOG_ENTRIES + 16 * i);
        if k & 1 == 1 {
            m.a64(target(k));
        } else {
            m.a32(target(k));
        }
    }
    if m.corrupt_seen() {
        return false;
    }
    apply_record(m, n as usize);
    // A release, as in `publish`: the writes applied land before the record is cleared.
    m.a64(LOG).store(0, Ordering::Release);
    true
}

/// Whether a committed record is waiting to be applied (for `check`).
pub(crate) fn pending(m: &Mem) -> bool {
    m.a64(LOG).load(Ordering::Acquire) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(buf: &mut [u64]) -> Mem {
        // SAFETY: the buffer outlives the Mem in each test, 8-aligned.
        unsafe { Mem::new(buf.as_mut_ptr().cast(), buf.len() * 8) }
    }

    #[test]
    fn overlay_reads_its_writes_and_commit_applies_them() {
        let mut buf = vec![0u64; 8192 / 8];
        let m = mem(&mut buf);
        m.st32(4096, 7);
        let mut tx = ZoneTx::new(&m);
        assert_eq!(tx.r32(4096), 7);
        tx.w32(4096, 8);
        tx.w64(4104, 9);
        tx.w32(4096, 10);
        assert_eq!(tx.len(), 2);
        assert_eq!((tx.r32(4096), tx.r64(4104)), (10, 9));
        assert_eq!(m.ld32(4096), 7, "nothing written before the commit");
        tx.commit();
        assert_eq!((m.ld32(4096), m.ld64(4104)), (10, 9));
        assert!(!pending(&m));
    }

    #[test]
    fn replay_applies_a_committed_record_once_more() {
        let mut buf = vec![0u64; 8192 / 8];
        let m = mem(&mut buf);
        // A record as a process killed after its commit point leaves it.
        m.st64(LOG_ENTRIES, 4096 << 1);
        m.st64(LOG_ENTRIES + 8, 5);
        m.st64(LOG_ENTRIES + 16, 4104 << 1 | 1);
        m.st64(LOG_ENTRIES + 24, u64::MAX);
        m.st64(LOG, 2);
        assert!(replay(&m));
        assert_eq!((m.ld32(4096), m.ld64(4104)), (5, u64::MAX));
        assert!(!replay(&m), "cleared");
        // Uncommitted pairs (count 0) are ignored.
        m.st64(LOG_ENTRIES + 8, 6);
        assert!(!replay(&m));
        assert_eq!(m.ld32(4096), 5);
    }
}
