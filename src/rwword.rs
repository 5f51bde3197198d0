//! [`RwWord`]: the in-process readers-writer lock's writers' mutex state and `readerCount` in
//! one 64-bit word, so that an uncontended `Lock` and `Unlock` are one compare-and-swap each
//! ([`RwParts::lock_fast`](crate::rwalgo::RwParts::lock_fast)) instead of Go's two atomic
//! operations each (the mutex, then the count).
//!
//! | bits | meaning |
//! |---|---|
//! | 0..32 | the writers' mutex state ([`crate::algo`]'s word) |
//! | 32..64 | `readerCount` (an `i32`) |
//!
//! Each half behaves as its own 32-bit atomic: an operation on one half never changes the
//! other (the count sits in the high half, where its additions wrap without carrying into
//! anything; the state's additions never cross 0 or 2^32 in the low half, see
//! [`StateWord::fetch_add`]), and a compare-and-swap of one half retries while only the other
//! half moved. The orderings are those of `impl StateWord for AtomicU32` and
//! `impl Counter for AtomicI32`, except that the plain loads are `SeqCst` (free on x86, where
//! any load is one `mov`): readers' adds land in this word too, and a `Relaxed` load that may
//! read any of them multiplies loom's executions (`rw_writer_excludes_everyone` did not finish
//! in 25 minutes; with `SeqCst` loads 434 538 executions). They only feed a compare-and-swap,
//! which a stale value just makes fail.

use crate::algo::{CasError, StateWord, LOCKED};
use crate::rwalgo::{Counter, MAX_READERS};
use crate::sync::{AtomicU64, Ordering};

/// The writers' mutex state (low 32 bits) and `readerCount` (high 32 bits) in one atomic word.
#[derive(Debug)]
pub struct RwWord(AtomicU64);

/// Free: no writer holds or wants the writers' mutex, no reader is counted.
const FREE: u64 = 0;
/// Write-locked, nobody else counted: the mutex `LOCKED` with no waiter, `readerCount` at
/// `-MAX_READERS` (no reader queued behind the writer).
const WRITE_LOCKED: u64 = ((MAX_READERS.wrapping_neg() as u32 as u64) << 32) | LOCKED as u64;

#[inline]
fn lo(v: u64) -> u32 {
    v as u32
}

#[inline]
fn hi(v: u64) -> i32 {
    (v >> 32) as i32
}

impl RwWord {
    const_new! {
        /// Both halves 0: unlocked.
        pub fn new() -> Self {
            Self(AtomicU64::new(FREE))
        }
    }

    /// `Lock` of a free lock in one step: the mutex from 0 to `LOCKED` and the count from 0 to
    /// `-MAX_READERS` (Go's `w.Lock()` and `readerCount.Add(-rwmutexMaxReaders)` with nobody
    /// in between, and no reader to wait for). `false` if anything is counted.
    #[inline]
    pub fn lock_fast(&self) -> bool {
        self.0
            .compare_exchange(FREE, WRITE_LOCKED, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    }

    /// `Unlock` in one step when nothing happened during the write phase: no reader queued
    /// (so none to wake) and no writer waiting (so no `unlockSlow`). `false` otherwise.
    #[inline]
    pub fn unlock_fast(&self) -> bool {
        self.0
            .compare_exchange(WRITE_LOCKED, FREE, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    }
}

impl Default for RwWord {
    fn default() -> Self {
        Self::new()
    }
}

/// The low half, as `impl StateWord for AtomicU32`.
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
    /// count) is a fatal error anyway: `unlock_slow` sees bit 0 set and aborts.
    #[inline]
    fn release_locked(&self) -> u32 {
        lo(self.0.fetch_sub(LOCKED as u64, Ordering::Release)).wrapping_sub(LOCKED)
    }
}

/// The high half, as `impl Counter for AtomicI32`.
impl Counter for RwWord {
    #[inline]
    fn add(&self, delta: i32) -> i32 {
        let prev = self
            .0
            .fetch_add((delta as u32 as u64) << 32, Ordering::SeqCst);
        hi(prev).wrapping_add(delta)
    }
    #[inline]
    fn load(&self) -> i32 {
        hi(self.0.load(Ordering::SeqCst))
    }
    #[inline]
    fn cas(&self, old: i32, new: i32) -> Result<i32, i32> {
        let mut v = self.0.load(Ordering::SeqCst);
        while hi(v) == old {
            let next = (v & u32::MAX as u64) | (new as u32 as u64) << 32;
            match self
                .0
                .compare_exchange(v, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return Ok(old),
                Err(cur) => v = cur,
            }
        }
        Err(hi(v))
    }
}

#[cfg(all(test, not(gomutex_loom)))]
mod tests {
    use super::*;

    #[test]
    fn halves_do_not_touch_each_other() {
        let w = RwWord::new();
        assert_eq!(Counter::add(&w, -MAX_READERS), -MAX_READERS);
        assert_eq!(StateWord::load(&w), 0);
        assert!(w.try_acquire_fast());
        // Unlocked with one waiter, which then takes the lock as the hand-off receiver does:
        // LOCKED - WAITER.
        assert_eq!(StateWord::cas(&w, LOCKED, 8), Ok(LOCKED));
        assert_eq!(StateWord::fetch_add(&w, LOCKED.wrapping_sub(8)), 8);
        assert_eq!(StateWord::load(&w), LOCKED);
        assert_eq!(Counter::load(&w), -MAX_READERS);
        assert_eq!(Counter::add(&w, MAX_READERS + 3), 3);
        assert_eq!(Counter::cas(&w, 3, 2), Ok(3));
        assert_eq!(Counter::cas(&w, 3, 2), Err(2));
        assert_eq!(w.release_locked(), 0);
        assert_eq!(Counter::load(&w), 2);
        assert_eq!(StateWord::cas(&w, LOCKED, 0), Err(CasError::Moved(0)));
    }

    #[test]
    fn fast_paths_need_everything_quiet() {
        let w = RwWord::new();
        assert!(w.lock_fast());
        assert!(!w.lock_fast());
        assert_eq!(
            (Counter::load(&w), StateWord::load(&w)),
            (-MAX_READERS, LOCKED)
        );
        // A reader queued behind the writer: the fast unlock must leave it to the slow path.
        Counter::add(&w, 1);
        assert!(!w.unlock_fast());
        Counter::add(&w, -1);
        assert!(w.unlock_fast());
        assert_eq!(w.0.load(Ordering::Relaxed), FREE);
        Counter::add(&w, 1);
        assert!(!w.lock_fast(), "a reader is inside");
    }
}
