//! [`RwWord`]: the in-process readers-writer lock's whole state in one 64-bit word: the
//! writers' mutex, the write phase, the waiting bits, the poison flag and the reader count.
//!
//! | bits | meaning |
//! |---|---|
//! | 0..32 | the writers' mutex state ([`crate::algo`]'s word: `LOCKED`, `WOKEN`, `STARVING`, waiters) |
//! | 32 [`PHASE`] | a writer holds the writers' mutex and has announced itself: new readers wait |
//! | 33 [`WRITER_PARKED`] | that writer sleeps until the readers inside have left |
//! | 34 [`GHOST`] | that writer gave up at its deadline: the last reader to leave ends its phase |
//! | 35 [`READERS_PARKED`] | readers sleep until the write phase ends |
//! | 36 [`POISON`] | [`RwLock`](crate::RwLock)'s poison flag (not used by the raw lock itself) |
//! | 37 [`BIAS`] | readers may enter through the global slot table ([`crate::rwtable`]) |
//! | 38..40 [`OVERLAPS`] | overlapping reads seen while not biased (at [`OVERLAPS_TO_BIAS`]: bias) |
//! | 40..42 [`IDLE_SCANS`] | write phases in a row whose revocation found no table reader |
//! | 42..64 | readers inside (through the word), in units of [`ONE_READER`] |
//!
//! The low half behaves as one 32-bit atomic ([`StateWord`]): an operation on it never changes
//! the high half (the algorithm's additions there stay within `0..2^32`, see
//! [`StateWord::fetch_add`]), and its compare-and-swap retries while only the high half moved.
//! The reader count sits at the top, where its additions wrap without carrying into anything.

use crate::algo::{CasError, StateWord, LOCKED};
use crate::sync::{AtomicU64, Ordering};

/// A writer holds the writers' mutex and has announced itself: new readers wait.
pub const PHASE: u64 = 1 << 32;
/// The phase's writer sleeps (on the lock's address + 1) until the readers inside have left.
pub const WRITER_PARKED: u64 = 1 << 33;
/// The phase's writer gave up waiting for the readers inside: the last of them to leave ends
/// the write phase on its behalf.
pub const GHOST: u64 = 1 << 34;
/// Readers sleep (on the lock's address + 2) until the write phase ends.
pub const READERS_PARKED: u64 = 1 << 35;
/// [`RwLock`](crate::RwLock)'s poison flag.
pub const POISON: u64 = 1 << 36;
/// Readers may enter through the global slot table ([`crate::rwtable`]) instead of the reader
/// count: set by a reader that saw readers overlap often enough, cleared by a writer whose
/// revocations keep finding nobody there.
pub const BIAS: u64 = 1 << 37;
/// Overlapping reads seen while the lock was not biased (a 2-bit count, in units of
/// [`ONE_OVERLAP`]).
pub const OVERLAPS: u64 = 3 << 38;
/// One overlapping read.
pub const ONE_OVERLAP: u64 = 1 << 38;
/// The overlapping reads after which the next one biases the lock.
pub const OVERLAPS_TO_BIAS: u64 = 3;
/// Write phases in a row whose revocation found no reader of the lock in the table (a 2-bit
/// count, in units of [`ONE_IDLE_SCAN`]); one more at the maximum clears [`BIAS`].
pub const IDLE_SCANS: u64 = 3 << 40;
/// One idle revocation.
pub const ONE_IDLE_SCAN: u64 = 1 << 40;
/// One reader inside.
pub const ONE_READER: u64 = 1 << 42;
/// The most readers inside at once (through the word; the table's readers are not counted).
pub const MAX_READERS: u64 = (1 << 22) - 1;
/// Write-locked, nobody else counted: the writers' mutex `LOCKED` with no waiter, the phase
/// announced, no reader inside or waiting.
pub const WRITE_LOCKED: u64 = PHASE | LOCKED as u64;

/// Readers inside, in the state `v`.
#[inline]
pub const fn readers(v: u64) -> u64 {
    v >> 42
}

#[inline]
fn lo(v: u64) -> u32 {
    v as u32
}

/// The operations the readers-writer algorithm ([`crate::rwalgo`]) makes on the whole word,
/// beside the writers' mutex's own on the low half ([`StateWord`]). Read-modify-writes are
/// `AcqRel` (a reader's entry acquires the last write phase, its exit releases its reads to
/// the next writer), loads `Acquire`, unless an implementation for a negative control says
/// otherwise.
pub trait RwState: StateWord {
    /// The whole word.
    fn load_all(&self) -> u64;
    /// The whole word, `SeqCst`: a biased reader's look at the word after it published its
    /// slot with one `SeqCst` swap (x86's `xchg`, no fence): the load must be `SeqCst` too for
    /// the writer's fence to order it (C++20 [atomics.order]); on x86 it is a plain load.
    fn load_all_seqcst(&self) -> u64;
    /// Compare-and-swap of the whole word (`Err` carries the current value).
    fn cas_all(&self, old: u64, new: u64) -> Result<u64, u64>;
    /// Add (wrapping), returning the previous value: a reader entering.
    fn add_all(&self, delta: u64) -> u64;
    /// Subtract (wrapping), returning the previous value: a reader leaving.
    fn sub_all(&self, delta: u64) -> u64;
    /// Set `bits`, returning the previous value.
    fn or_all(&self, bits: u64) -> u64;
    /// Clear `bits`, returning the previous value.
    fn clear_all(&self, bits: u64) -> u64;
}

/// The in-process readers-writer lock's state word.
#[derive(Debug)]
pub struct RwWord(AtomicU64);

impl RwWord {
    const_new! {
        /// All zero: unlocked, not poisoned.
        pub fn new() -> Self {
            Self(AtomicU64::new(0))
        }
    }
}

impl Default for RwWord {
    fn default() -> Self {
        Self::new()
    }
}

impl RwState for RwWord {
    #[inline]
    fn load_all(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
    #[inline]
    fn load_all_seqcst(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
    #[inline]
    fn cas_all(&self, old: u64, new: u64) -> Result<u64, u64> {
        self.0
            .compare_exchange(old, new, Ordering::AcqRel, Ordering::Acquire)
    }
    #[inline]
    fn add_all(&self, delta: u64) -> u64 {
        self.0.fetch_add(delta, Ordering::AcqRel)
    }
    #[inline]
    fn sub_all(&self, delta: u64) -> u64 {
        self.0.fetch_sub(delta, Ordering::AcqRel)
    }
    #[inline]
    fn or_all(&self, bits: u64) -> u64 {
        self.0.fetch_or(bits, Ordering::AcqRel)
    }
    #[inline]
    fn clear_all(&self, bits: u64) -> u64 {
        self.0.fetch_and(!bits, Ordering::AcqRel)
    }
}

/// The low half, as `impl StateWord for AtomicU32`. The plain load is `SeqCst` (one `mov` on
/// x86, like any load): readers' additions land in this word too, and a `Relaxed` load that
/// may read any of them multiplies loom's executions. It only feeds a compare-and-swap, which
/// a stale value just makes fail.
impl StateWord for RwWord {
    #[inline]
    fn load(&self) -> u32 {
        lo(self.0.load(Ordering::SeqCst))
    }
    #[inline]
    fn try_acquire_fast(&self) -> bool {
        let mut v = self.0.load(Ordering::SeqCst);
        while lo(v) == 0 {
            match self.0.compare_exchange(
                v,
                v | LOCKED as u64,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(cur) => v = cur,
            }
        }
        false
    }
    #[inline]
    fn cas(&self, old: u32, new: u32) -> Result<u32, CasError> {
        let mut v = self.0.load(Ordering::SeqCst);
        while lo(v) == old {
            let next = (v & !(u32::MAX as u64)) | new as u64;
            match self
                .0
                .compare_exchange(v, next, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => return Ok(old),
                Err(cur) => v = cur,
            }
        }
        Err(CasError::Moved(lo(v)))
    }
    /// The algorithm's additions (the hand-off receiver's `LOCKED - WAITER`, perhaps
    /// `- STARVING`) are small signed numbers that keep the state within `0..2^32` (the
    /// receiver is one of the waiters counted), so adding the sign-extended delta to the whole
    /// word leaves the high half alone.
    #[inline]
    fn fetch_add(&self, delta: u32) -> u32 {
        lo(self
            .0
            .fetch_add(delta as i32 as i64 as u64, Ordering::SeqCst))
    }
    /// An unlock of an unlocked mutex (whose low half may be 0, and then borrows from the
    /// high half) is a fatal error anyway: `unlock_slow` sees bit 0 set and aborts.
    #[inline]
    fn release_locked(&self) -> u32 {
        lo(self.0.fetch_sub(LOCKED as u64, Ordering::Release)).wrapping_sub(LOCKED)
    }
}

#[cfg(all(test, not(gomutex_loom)))]
mod tests {
    use super::*;

    #[test]
    fn halves_do_not_touch_each_other() {
        let w = RwWord::new();
        w.or_all(PHASE | POISON);
        w.add_all(3 * ONE_READER);
        assert_eq!(StateWord::load(&w), 0);
        assert!(w.try_acquire_fast());
        // Unlocked with one waiter, which then takes the lock as the hand-off receiver does:
        // LOCKED - WAITER.
        assert_eq!(StateWord::cas(&w, LOCKED, 8), Ok(LOCKED));
        assert_eq!(StateWord::fetch_add(&w, LOCKED.wrapping_sub(8)), 8);
        assert_eq!(StateWord::load(&w), LOCKED);
        assert_eq!(w.release_locked(), 0);
        let v = w.load_all();
        assert_eq!(
            (readers(v), v & !(u32::MAX as u64)),
            (3, (3 * ONE_READER) | PHASE | POISON)
        );
    }

    #[test]
    fn the_reader_count_wraps_alone() {
        let w = RwWord::new();
        w.or_all(WRITER_PARKED);
        assert_eq!(readers(w.sub_all(ONE_READER)), 0);
        // A misuse wraps the count to its maximum, touching nothing below it.
        let v = w.load_all();
        assert_eq!(
            (readers(v), v & (ONE_READER - 1)),
            (MAX_READERS, WRITER_PARKED)
        );
        assert_eq!(readers(w.add_all(ONE_READER)), MAX_READERS);
        assert_eq!(w.load_all(), WRITER_PARKED);
    }
}
