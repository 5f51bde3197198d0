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

/// The in-process [`WaitQueue`]: `parking_lot_core`'s per-address queue plus two counters that
/// are only touched while that queue is locked (inside `park`'s `validate`/`timed_out` and
/// `unpark_filter`'s `filter`/`callback`), so `Relaxed` is enough for them.
///
/// `parking_lot_core` only appends, so "front" is implemented with park tokens: re-queued
/// sleepers park with the token `FRONT`, and while `front` says one is parked, `release` skips
/// ordinary sleepers until it reaches it.
#[derive(Debug)]
pub struct ParkSema {
    /// Wake-ups released while nobody slept.
    tokens: AtomicU32,
    /// Sleepers parked with [`FRONT`].
    front: AtomicU32,
}

impl ParkSema {
    const_new! {
        /// An empty queue with no tokens.
        pub fn new() -> Self {
            Self {
                tokens: AtomicU32::new(0),
                front: AtomicU32::new(0),
            }
        }
    }

    fn key(&self) -> usize {
        self as *const Self as usize
    }

    /// Tokens kept for future sleepers (for tests and models: 0 when quiescent).
    pub fn stored_tokens(&self) -> u32 {
        self.tokens.load(Relaxed)
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
            let t = self.tokens.load(Relaxed);
            if t > 0 {
                // A wake-up arrived before we slept: take it instead of sleeping.
                self.tokens.store(t - 1, Relaxed);
                return false;
            }
            if lifo {
                self.front.store(self.front.load(Relaxed) + 1, Relaxed);
            }
            true
        };
        let timed_out = || {
            if lifo {
                self.front.store(self.front.load(Relaxed) - 1, Relaxed);
            }
        };
        let token = if lifo { FRONT } else { BACK };
        // SAFETY: the key is our own address; the closures only touch our two counters, never
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
            let front = self.front.load(Relaxed);
            if front > 0 && t & FRONT == 0 {
                return FilterOp::Skip;
            }
            if t & FRONT != 0 {
                self.front.store(front - 1, Relaxed);
            }
            picked = true;
            FilterOp::Unpark
        };
        let callback = |r: park::UnparkResult| {
            if r.unparked_threads == 0 {
                self.tokens.store(self.tokens.load(Relaxed) + 1, Relaxed);
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
