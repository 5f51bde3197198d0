//! Go's `sync.Mutex` algorithm, written once.
//!
//! This is a line-by-line port of `lockSlow`, `unlockSlow` and `TryLock` from Go's
//! `sync/mutex.go` (see `reference/go-mutex.md` §1), generic over
//!
//! * the state word ([`StateWord`]): an in-process `AtomicU32`, or a word in shared memory;
//! * the waiter queue ([`WaitQueue`]): `parking_lot_core`, or futex slots in shared memory;
//! * the clock ([`Clock`]): the monotonic clock, or loom's virtual one.
//!
//! # The state word
//!
//! | bits | meaning |
//! |---|---|
//! | 0 `LOCKED` | the lock is held |
//! | 1 `WOKEN` | one contender is awake (a spinner that announced itself, or a waiter an unlock just woke), so unlock must not wake another |
//! | 2 `STARVING` | starvation mode: unlock hands ownership to the front waiter; newcomers queue |
//! | 3.. | number of registered waiters |
//!
//! # Beyond Go: deadlines
//!
//! Go has no timed lock. Here a waiter may give up at a deadline. The one subtle part is leaving
//! the count of registered waiters: a normal-mode unlock removes *some* waiter from the count
//! before its wake-up token reaches the queue, and a starvation-mode unlock sends a token that
//! the receiver must consume. A waiter whose sleep timed out may therefore only remove itself
//! while enough registered waiters remain to consume every token in flight:
//! `waiters >= 1 + (STARVING && !LOCKED)` (see [`deregister`]). Otherwise the token in flight is
//! its own, and it waits for it (briefly: the unlocker is between two instructions).

use crate::clock::Clock;
use crate::sema::WaitQueue;
use crate::sync::{AtomicU32, Ordering};
use std::time::Instant;

/// Bit 0: the lock is held.
pub const LOCKED: u32 = 1;
/// Bit 1: an awake contender exists; unlock must not wake another.
pub const WOKEN: u32 = 2;
/// Bit 2: starvation mode.
pub const STARVING: u32 = 4;
/// The waiter count starts at bit 3.
pub const WAITER_SHIFT: u32 = 3;
/// One registered waiter.
pub const WAITER: u32 = 1 << WAITER_SHIFT;

/// Number of registered waiters in a state word.
#[inline]
pub const fn waiters(state: u32) -> u32 {
    state >> WAITER_SHIFT
}

/// The atomic word holding Go's mutex state.
///
/// The algorithm only needs these operations; a shared-memory lock may implement them on a
/// wider word (e.g. with an owner beside the Go state), as long as the low 32 bits behave as
/// one `AtomicU32`. Every read-modify-write here is sequentially consistent unless its doc
/// says otherwise (Go's atomics all are).
pub trait StateWord {
    /// A plain read that only feeds a later compare-and-swap (a stale value makes it fail).
    fn load(&self) -> u32;
    /// The lock fast path: `0 -> LOCKED`, with acquire ordering on success.
    fn try_acquire_fast(&self) -> bool;
    /// Compare-and-swap (`Err` carries the current value).
    fn cas(&self, old: u32, new: u32) -> Result<u32, u32>;
    /// Add `delta` (wrapping), returning the previous value. Used by the starvation hand-off
    /// receiver to take ownership.
    fn fetch_add(&self, delta: u32) -> u32;
    /// The unlock fast path: subtract `LOCKED` with release ordering, returning the new value.
    fn release_locked(&self) -> u32;
}

impl StateWord for AtomicU32 {
    #[inline]
    fn load(&self) -> u32 {
        AtomicU32::load(self, Ordering::Relaxed)
    }
    #[inline]
    fn try_acquire_fast(&self) -> bool {
        self.compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }
    #[inline]
    fn cas(&self, old: u32, new: u32) -> Result<u32, u32> {
        self.compare_exchange(old, new, Ordering::SeqCst, Ordering::Relaxed)
    }
    #[inline]
    fn fetch_add(&self, delta: u32) -> u32 {
        AtomicU32::fetch_add(self, delta, Ordering::SeqCst)
    }
    #[inline]
    fn release_locked(&self) -> u32 {
        AtomicU32::fetch_sub(self, LOCKED, Ordering::Release).wrapping_sub(LOCKED)
    }
}

/// Go's `fatal`: print and abort; no unwinding, no recovery. Under loom a panic, so a model
/// can observe it.
#[cold]
#[inline(never)]
pub(crate) fn fatal(msg: &str) -> ! {
    #[cfg(gomutex_loom)]
    panic!("fatal error: {msg}");
    #[cfg(not(gomutex_loom))]
    {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "fatal error: {msg}");
        std::process::abort()
    }
}

/// Go's `Lock` fast path.
#[inline]
pub fn lock<W: StateWord, Q: WaitQueue, C: Clock>(word: &W, queue: &Q) {
    if !word.try_acquire_fast() {
        lock_slow::<W, Q, C>(word, queue, None);
    }
}

/// Like [`lock`], giving up at `deadline`; `true` if the lock was acquired.
#[inline]
pub fn lock_until<W: StateWord, Q: WaitQueue, C: Clock>(
    word: &W,
    queue: &Q,
    deadline: Option<Instant>,
) -> bool {
    word.try_acquire_fast() || lock_slow::<W, Q, C>(word, queue, deadline)
}

/// Go's `TryLock`: never spins, never queues, never changes the waiter count or `WOKEN`.
///
/// Unlike Go, a compare-and-swap that fails only because the waiter count or `WOKEN` changed is
/// retried, so it fails exactly when `LOCKED` or `STARVING` is observed set.
#[inline]
pub fn try_lock<W: StateWord>(word: &W) -> bool {
    let mut old = word.load();
    loop {
        if old & (LOCKED | STARVING) != 0 {
            return false;
        }
        match word.cas(old, old | LOCKED) {
            Ok(_) => return true,
            Err(cur) => old = cur,
        }
    }
}

/// Go's `Unlock`.
///
/// # Safety (logical)
/// The caller must hold the lock; unlocking an unlocked lock aborts the process.
#[inline]
pub fn unlock<W: StateWord, Q: WaitQueue>(word: &W, queue: &Q) {
    let new = word.release_locked();
    if new != 0 {
        unlock_slow(word, queue, new);
    }
}

/// Should a contender spin in round `iter`? Go: at most 4 rounds, only on a multi-core machine
/// (and, in Go, only while other Ps run; threads have no such signal). Under loom: at most one
/// round, to keep the state space small.
#[inline]
fn can_spin(iter: u32) -> bool {
    #[cfg(gomutex_loom)]
    {
        iter < 1
    }
    #[cfg(not(gomutex_loom))]
    {
        iter < 4 && crate::spin::multicore()
    }
}

/// One spin round: 30 `PAUSE`s (Go's `procyield(30)`); one yield under loom.
#[inline]
fn do_spin() {
    #[cfg(gomutex_loom)]
    crate::sync::spin_loop();
    #[cfg(not(gomutex_loom))]
    for _ in 0..30 {
        crate::sync::spin_loop();
    }
}

/// Go's `lockSlow`, plus an optional deadline. Returns `true` once the lock is held.
#[cold]
pub fn lock_slow<W: StateWord, Q: WaitQueue, C: Clock>(
    word: &W,
    queue: &Q,
    deadline: Option<Instant>,
) -> bool {
    let mut wait_start: Option<C::Instant> = None;
    let mut starving = false;
    let mut awoke = false;
    let mut iter = 0u32;
    let mut old = word.load();
    loop {
        // Spin only while the lock is held in normal mode: in starvation mode ownership goes
        // to the front waiter, so spinning cannot win it.
        if old & (LOCKED | STARVING) == LOCKED && can_spin(iter) {
            // Announce ourselves with WOKEN so unlock does not wake a sleeper needlessly.
            if !awoke
                && old & WOKEN == 0
                && waiters(old) != 0
                && word.cas(old, old | WOKEN).is_ok()
            {
                awoke = true;
            }
            do_spin();
            iter += 1;
            old = word.load();
            continue;
        }
        let mut new = old;
        // Do not try to take a starving lock: newcomers queue.
        if old & STARVING == 0 {
            new |= LOCKED;
        }
        let queueing = old & (LOCKED | STARVING) != 0;
        if queueing {
            new = new.wrapping_add(WAITER);
        }
        // Switch to starvation mode, but only while the lock is held: unlock expects a
        // starving lock to have a waiter.
        if starving && old & LOCKED != 0 {
            new |= STARVING;
        }
        if awoke {
            // We own WOKEN and must clear it in our next successful CAS.
            if new & WOKEN == 0 {
                fatal("sync: inconsistent mutex state");
            }
            new &= !WOKEN;
        }
        if queueing && deadline.is_some_and(|d| Instant::now() >= d) {
            // Out of time: leave instead of queueing (clearing WOKEN if it is ours; the holder's
            // unlock will then wake a sleeper).
            if !awoke {
                return false;
            }
            match word.cas(old, old & !WOKEN) {
                Ok(_) => return false,
                Err(cur) => {
                    old = cur;
                    continue;
                }
            }
        }
        match word.cas(old, new) {
            Err(cur) => old = cur,
            Ok(_) if !queueing => return true, // locked with the CAS
            Ok(_) => {
                // Registered as a waiter: sleep. A waiter that slept before goes to the front.
                let lifo = wait_start.is_some();
                let start = *wait_start.get_or_insert_with(C::now);
                if !queue.acquire(lifo, deadline) && !wait_for_token_or_leave(word, queue) {
                    return false;
                }
                starving = starving || C::starving_since(start);
                old = word.load();
                if old & STARVING != 0 {
                    // Ownership was handed to us; the state is inconsistent until we fix it:
                    // LOCKED is clear and we are still counted as a waiter.
                    if old & (LOCKED | WOKEN) != 0 || waiters(old) == 0 {
                        fatal("sync: inconsistent mutex state");
                    }
                    let mut delta = LOCKED.wrapping_sub(WAITER);
                    if !starving || waiters(old) == 1 {
                        // Leave starvation mode: we did not wait long, or nobody is left.
                        // Staying in it lets two threads run in lock-step for ever.
                        delta = delta.wrapping_sub(STARVING);
                    }
                    word.fetch_add(delta);
                    return true;
                }
                // Woken in normal mode: compete again (we are no longer counted).
                awoke = true;
                iter = 0;
            }
        }
    }
}

/// A registered waiter's sleep timed out. Leave the waiter count if that is safe, else get the
/// token that is on its way to us. Returns `false` if we left (the lock call fails), `true` if
/// we now hold a token (the caller continues as a woken waiter).
#[cold]
fn wait_for_token_or_leave<W: StateWord, Q: WaitQueue>(word: &W, queue: &Q) -> bool {
    loop {
        if deregister(word) {
            return false;
        }
        // A token is in flight and we are the only one left to take it: wait for it, but not
        // blindly, since a newcomer may take it and leave us counted again.
        let recheck = Instant::now() + std::time::Duration::from_micros(50);
        if queue.acquire(true, Some(recheck)) {
            return true;
        }
    }
}

/// Remove one registered waiter that holds no token, if the remaining waiters can still
/// consume every token in flight (see the module docs). Leaves starvation mode if it removes
/// the last waiter. Returns whether it did.
pub(crate) fn deregister<W: StateWord>(word: &W) -> bool {
    let mut old = word.load();
    loop {
        let handoff_in_flight = old & (STARVING | LOCKED) == STARVING;
        if waiters(old) < 1 + u32::from(handoff_in_flight) {
            return false;
        }
        let mut new = old - WAITER;
        if waiters(new) == 0 {
            new &= !STARVING;
        }
        match word.cas(old, new) {
            Ok(_) => return true,
            Err(cur) => old = cur,
        }
    }
}

/// Go's `unlockSlow`. `new` is the state right after subtracting `LOCKED`.
#[cold]
pub fn unlock_slow<W: StateWord, Q: WaitQueue>(word: &W, queue: &Q, new: u32) {
    if new.wrapping_add(LOCKED) & LOCKED == 0 {
        fatal("sync: unlock of unlocked mutex");
    }
    if new & STARVING == 0 {
        let mut old = new;
        loop {
            // Nobody to wake, or somebody already took the lock (it will wake), or a contender
            // is awake, or starvation mode began (the hand-off chain belongs to the new holder).
            if waiters(old) == 0 || old & (LOCKED | WOKEN | STARVING) != 0 {
                return;
            }
            // Take one waiter off the count and mark the contender we are about to wake.
            match word.cas(old, (old - WAITER) | WOKEN) {
                Ok(_) => {
                    queue.release(false);
                    return;
                }
                Err(cur) => old = cur,
            }
        }
    } else {
        // Starvation mode: hand ownership to the front waiter. LOCKED stays clear, STARVING
        // keeps newcomers out; the receiver sets LOCKED and removes itself from the count.
        queue.release(true);
    }
}
