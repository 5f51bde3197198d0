//! Waiter queues: where a Go-style lock sleeps.
//!
//! Go's mutex sleeps on `runtime_SemacquireMutex` and wakes on `runtime_Semrelease`: not really
//! a counting semaphore but a sleep/wake-up pairing in which *every wake-up is kept* even if it
//! happens before the sleeper arrives (the "token"). [`WaitQueue`] is that contract; the Go
//! algorithm in [`crate::algo`] is written against it once. This module has the in-process
//! implementation, [`ParkSema`], on `parking_lot_core`; the shared-memory one lives in
//! [`crate::shm`].

use crate::park::{self, FilterOp, ParkResult};
use crate::sync::{AtomicU32, Ordering::Relaxed};
use std::time::Instant;

/// A FIFO wait queue with a priority class and persistent wake-up tokens.
///
/// # Contract
///
/// * `release` hands one token to the sleeper it picks, or, if nobody sleeps, keeps it for the
///   next `acquire` (no lost wake-up).
/// * `release` picks the oldest sleeper that called `acquire` with `lifo == true` (a waiter that
///   lost a race after being woken: Go puts it back at the head of the queue); if there is none,
///   the oldest sleeper.
/// * `acquire` returns `true` once it has consumed a token, or `false` if `deadline` passed first,
///   in which case it consumed none and is no longer queued.
/// * A token carries a happens-before edge from `release` to the `acquire` that consumes it.
pub trait WaitQueue {
    /// Sleep until a token is ours (Go's `runtime_SemacquireMutex(sema, lifo)`).
    fn acquire(&self, lifo: bool, deadline: Option<Instant>) -> bool;
    /// Wake one sleeper or keep a token (Go's `runtime_Semrelease(sema, handoff)`). `handoff`
    /// says the token carries ownership of the lock (starvation mode); queues may use it as a
    /// scheduling hint. Tokens always go straight to the picked sleeper, so no barging
    /// `acquire` can steal one from it.
    fn release(&self, handoff: bool);
    /// A registered waiter whose deadline passed may not leave the count yet (a token in
    /// flight needs it counted) and has waited long for that token: may the queue take the
    /// registration over, to remove it from the count later on the waiter's behalf? `true`
    /// means it did (the lock call then fails). The default never does: in-process, the token
    /// is always a few instructions away. (The shared-memory queue does, when the process that
    /// would deliver it is stalled holding the queue's internal lock.)
    fn give_up(&self) -> bool {
        false
    }
}

/// `ParkToken` of a first-time sleeper.
const BACK: usize = 0;
/// `ParkToken` flag of a re-queued sleeper (served first). With the `profile` feature the other
/// bits may carry the sleeper's stamp (`profile::Waiter`), so tokens are tested by this bit.
const FRONT: usize = 1;

/// The in-process [`WaitQueue`]: `parking_lot_core`'s per-address queue plus one 32-bit word
/// (Go's `sema` is one too), 4 bytes:
///
/// | bits | meaning |
/// |---|---|
/// | 0 | a flag of the queue's owner (`Mutex`'s poison flag), never touched by the queue |
/// | 1..32 | a signed count in units of 2: > 0, wake-ups released while nobody slept (tokens); < 0, re-queued sleepers parked (with `FRONT`) |
///
/// Tokens and re-queued sleepers never coexist, so one count holds both: a token is kept only
/// when nobody sleeps, and a thread that comes to sleep while a token is kept takes it instead
/// (both decided while `parking_lot_core`'s queue for our key is locked). The count only
/// changes while that queue is locked (inside `park`'s `validate`/`timed_out` and
/// `unpark_filter`'s `filter`/`callback`), so its reads need no ordering; its changes are
/// read-modify-writes (adding ±2) so that they never undo a concurrent change of the owner's
/// flag, which is set and cleared without the queue's lock.
///
/// `parking_lot_core` only appends, so "front" is implemented with park tokens: re-queued
/// sleepers park with the token `FRONT`, and while the count says one is parked, `release`
/// skips ordinary sleepers until it reaches it.
#[derive(Debug)]
pub struct ParkSema {
    /// The owner's flag and the count (above).
    word: AtomicU32,
}

/// The owner's flag in [`ParkSema`]'s word.
const FLAG: u32 = 1;
/// One unit of [`ParkSema`]'s count.
const UNIT: u32 = 2;

/// [`ParkSema`]'s count in the word `w`: tokens if positive, re-queued sleepers if negative.
#[inline]
fn count(w: u32) -> i32 {
    (w as i32) >> 1
}

impl ParkSema {
    const_new! {
        /// An empty queue with no tokens, the owner's flag clear.
        pub fn new() -> Self {
            Self {
                word: AtomicU32::new(0),
            }
        }
    }

    fn key(&self) -> usize {
        self as *const Self as usize
    }

    /// The count of the word as it is now (only meaningful under the queue's lock).
    fn count(&self) -> i32 {
        count(self.word.load(Relaxed))
    }

    /// Tokens kept for future sleepers (for tests and models: 0 when quiescent).
    pub fn stored_tokens(&self) -> u32 {
        self.count().max(0) as u32
    }

    /// The owner's flag (`Relaxed`: the owner orders it, as `Mutex` does its poison flag by
    /// the lock).
    #[inline]
    pub(crate) fn flag(&self) -> bool {
        self.word.load(Relaxed) & FLAG != 0
    }

    /// Set or clear the owner's flag.
    #[inline]
    pub(crate) fn set_flag(&self, on: bool) {
        if on {
            self.word.fetch_or(FLAG, Relaxed);
        } else {
            self.word.fetch_and(!FLAG, Relaxed);
        }
    }

    /// Threads parked on this queue right now (for tests and models: a snapshot).
    pub fn parked(&self) -> usize {
        park::parked(self.key())
    }
}

impl Default for ParkSema {
    fn default() -> Self {
        Self::new()
    }
}

impl WaitQueue for ParkSema {
    fn acquire(&self, lifo: bool, deadline: Option<Instant>) -> bool {
        let validate = || {
            if self.count() > 0 {
                // A wake-up arrived before we slept: take it instead of sleeping.
                self.word.fetch_sub(UNIT, Relaxed);
                return false;
            }
            if lifo {
                // One more re-queued sleeper (the count is 0 or below: no token kept).
                self.word.fetch_sub(UNIT, Relaxed);
            }
            true
        };
        let timed_out = || {
            if lifo {
                self.word.fetch_add(UNIT, Relaxed);
            }
        };
        let token = if lifo { FRONT } else { BACK };
        // SAFETY: the key is our own address; the closures only touch our count, never
        // panic and never call back into the parking module.
        match unsafe { park_stamped(self.key(), validate, timed_out, token, deadline) } {
            ParkResult::Unparked(_) | ParkResult::Invalid => true,
            ParkResult::TimedOut => false,
        }
    }

    fn release(&self, _handoff: bool) {
        let mut picked = false;
        let filter = |t: usize| {
            if picked {
                return FilterOp::Stop;
            }
            let front = self.count() < 0;
            if front && t & FRONT == 0 {
                return FilterOp::Skip;
            }
            if t & FRONT != 0 {
                // One re-queued sleeper fewer.
                self.word.fetch_add(UNIT, Relaxed);
            }
            picked = true;
            FilterOp::Unpark
        };
        let callback = |r: park::UnparkResult| {
            if r.unparked_threads == 0 {
                // Nobody sleeps (so no re-queued sleeper: the count is 0 or above): keep it.
                self.word.fetch_add(UNIT, Relaxed);
            }
            0
        };
        // SAFETY: as in `acquire`; our sleepers park with `FRONT` or `BACK`, stamped.
        unsafe { unpark_charged(self.key(), filter, FRONT, callback) };
    }
}

/// `park::park` with `token`, stamped for the mutex profile when it is on (Go's
/// `acquiretime`): the stamp's address joins the token and lives on this frame for as long as
/// the thread is parked. Every in-process lock sleeps through here.
///
/// # Safety
/// `park::park`'s: a key of the caller's own, closures that never panic and never call back
/// into the parking module.
#[inline]
pub(crate) unsafe fn park_stamped(
    key: usize,
    validate: impl FnOnce() -> bool,
    timed_out: impl FnOnce(),
    token: usize,
    deadline: Option<Instant>,
) -> ParkResult {
    #[cfg(all(feature = "profile", not(gomutex_loom)))]
    let waiter = crate::profile::Waiter::new();
    #[cfg(all(feature = "profile", not(gomutex_loom)))]
    let token = token | waiter.token();
    // SAFETY: forwarded contract.
    unsafe { park::park(key, validate, timed_out, token, deadline) }
}

/// `park::unpark_filter`, the release charged to the mutex profile when it is on (Go's
/// `semrelease1`: the profile sees every verdict of `filter`).
///
/// # Safety
/// `park::unpark_filter`'s, and every sleeper on `key` parked through [`park_stamped`] with a
/// token of `flags` bits only.
#[inline]
pub(crate) unsafe fn unpark_charged(
    key: usize,
    filter: impl FnMut(usize) -> FilterOp,
    flags: usize,
    callback: impl FnOnce(park::UnparkResult) -> usize,
) {
    #[cfg(all(feature = "profile", not(gomutex_loom)))]
    let mut charge = crate::profile::Charge::default();
    // SAFETY: the filter goes to `unpark_filter` on `key`, whose sleepers' tokens are `flags`
    // bits with their `Waiter`'s (the caller's contract).
    #[cfg(all(feature = "profile", not(gomutex_loom)))]
    let filter = unsafe { charge.watch(filter, flags) };
    #[cfg(not(all(feature = "profile", not(gomutex_loom))))]
    let _ = flags;
    // SAFETY: forwarded contract.
    unsafe { park::unpark_filter(key, filter, callback) };
    #[cfg(all(feature = "profile", not(gomutex_loom)))]
    charge.finish();
}

#[cfg(all(test, not(gomutex_loom)))]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Tokens kept and the owner's flag share the word without touching each other.
    #[test]
    fn tokens_leave_the_flag_alone() {
        let q = ParkSema::new();
        q.set_flag(true);
        for _ in 0..3 {
            q.release(false);
        }
        assert_eq!((q.stored_tokens(), q.flag()), (3, true));
        q.set_flag(false);
        q.set_flag(true);
        for _ in 0..3 {
            assert!(q.acquire(false, None), "a kept token is taken at once");
        }
        assert_eq!((q.stored_tokens(), q.count(), q.flag()), (0, 0, true));
        q.set_flag(false);
        assert_eq!(q.word.load(Relaxed), 0);
    }

    /// Re-queued sleepers count below zero, beside the flag, and are served first.
    #[test]
    fn requeued_sleepers_count_below_zero_and_go_first() {
        let q = &ParkSema::new();
        std::thread::scope(|s| {
            let back = s.spawn(|| q.acquire(false, None));
            while q.parked() < 1 {
                std::thread::yield_now();
            }
            let front = s.spawn(|| q.acquire(true, None));
            while q.parked() < 2 {
                std::thread::yield_now();
            }
            q.set_flag(true);
            assert_eq!((q.count(), q.stored_tokens(), q.flag()), (-1, 0, true));
            q.release(false);
            assert!(
                front.join().unwrap(),
                "the re-queued sleeper is woken first"
            );
            assert_eq!((q.count(), q.parked(), q.flag()), (0, 1, true));
            q.release(false);
            assert!(back.join().unwrap());
        });
        assert_eq!((q.count(), q.flag()), (0, true));
        // A re-queued sleeper that times out leaves the count as it found it.
        let deadline = Instant::now() + Duration::from_millis(5);
        assert!(!q.acquire(true, Some(deadline)));
        assert_eq!((q.count(), q.flag()), (0, true));
    }
}
