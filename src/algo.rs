//! Go's `sync.Mutex` algorithm, written once.
//!
//! This is a line-by-line port of `Lock`, `lockSlow`, `Unlock`, `unlockSlow` and `TryLock` from
//! Go 1.19's `src/sync/mutex.go`, generic over
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
//! while enough registered waiters remain to consume every token in flight. During a hand-off
//! (`STARVING && !LOCKED`) that is not the only constraint: the receiver decides whether it is
//! the last waiter from a plain read of the count and then applies its fix-up with a blind add
//! (Go's code, which only had to allow for the count *growing* in between), so a waiter leaving
//! in that window must leave both the receiver and one more waiter counted:
//! `waiters >= 1 + 2 * (STARVING && !LOCKED)` (see [`deregistered`]). Otherwise it waits for a
//! token or for the hand-off to complete (briefly: the unlocker or receiver is a few
//! instructions from done).

use crate::clock::Clock;
use crate::sema::WaitQueue;
use crate::spin;
use crate::sync::{fatal, AtomicU32, Ordering};
use std::time::Instant;

mod rules;
pub use rules::{deregistered, deregistered_up_to, handoff_declined};

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
    /// Whether the contenders may be other *processes* (a word in shared memory). Go spins
    /// only if its process has another CPU; for a lock shared between processes the question
    /// is whether the machine has one: a worker pinned to one CPU still has peers running
    /// elsewhere (see `spin::can_spin`).
    const ACROSS_PROCESSES: bool = false;
    /// A plain read that only feeds a later compare-and-swap (a stale value makes it fail).
    fn load(&self) -> u32;
    /// The lock fast path: `0 -> LOCKED`, with acquire ordering on success.
    fn try_acquire_fast(&self) -> bool;
    /// Compare-and-swap, returning `old` on success.
    fn cas(&self, old: u32, new: u32) -> Result<u32, CasError>;
    /// Add `delta` (wrapping), returning the previous value. Used by the starvation hand-off
    /// receiver to take ownership.
    fn fetch_add(&self, delta: u32) -> u32;
    /// The unlock fast path: subtract `LOCKED` with release ordering, returning the new value.
    fn release_locked(&self) -> u32;
}

/// Why a [`StateWord::cas`] did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CasError {
    /// The word holds this other value.
    Moved(u32),
    /// Only a word serving a call whose deadline has passed: the change could not be made in
    /// time (the word is unchanged). The algorithm then gives up as at its deadline.
    OutOfTime,
}

impl CasError {
    /// The value to try the next compare-and-swap from: the current one, or `old` again.
    #[inline]
    pub fn retry_from(self, old: u32) -> u32 {
        match self {
            CasError::Moved(cur) => cur,
            CasError::OutOfTime => old,
        }
    }
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
    fn cas(&self, old: u32, new: u32) -> Result<u32, CasError> {
        self.compare_exchange(old, new, Ordering::SeqCst, Ordering::Relaxed)
            .map_err(CasError::Moved)
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

/// Go's `Lock` fast path.
#[inline]
pub fn lock<W: StateWord, Q: WaitQueue, C: Clock>(word: &W, queue: &Q) {
    if !word.try_acquire_fast() && !barge(word) {
        lock_slow::<W, Q, C>(word, queue, None);
    }
}

/// `lockSlow`'s first step, inline: take a lock that is free in normal mode even though
/// waiters are counted (the word is then non-zero, so the fast path failed). Under contention
/// this is the common case, and it spares the call into the outlined slow path.
#[inline]
fn barge<W: StateWord>(word: &W) -> bool {
    let old = word.load();
    old & (LOCKED | STARVING) == 0 && word.cas(old, old | LOCKED).is_ok()
}

/// Like [`lock`], giving up at `deadline`; `true` if the lock was acquired.
#[inline]
pub fn lock_until<W: StateWord, Q: WaitQueue, C: Clock>(
    word: &W,
    queue: &Q,
    deadline: Option<Instant>,
) -> bool {
    word.try_acquire_fast() || barge(word) || lock_slow::<W, Q, C>(word, queue, deadline)
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
            Err(e) => old = e.retry_from(old),
        }
    }
}

/// Go's `Unlock`.
///
/// # Safety (logical)
/// The caller must hold the lock; unlocking an unlocked lock aborts the process.
#[inline]
pub fn unlock<W: StateWord, Q: WaitQueue>(word: &W, queue: &Q) {
    unlock_released(word, queue, word.release_locked());
}

/// The rest of Go's `Unlock` once `LOCKED` has been subtracted (`new` is the state right after):
/// `if new != 0 { unlockSlow(new) }`, except that `unlockSlow`'s immediate return when a
/// contender is already awake (`WOKEN` in normal mode, nobody else to wake) is decided here,
/// inline. A misuse (`LOCKED` was clear) leaves bit 0 set and still reaches
/// [`unlock_slow`], which aborts.
///
/// For a lock whose release is not [`StateWord::release_locked`] (the shared-memory lock also
/// clears its owner field in the same atomic operation).
#[inline]
pub fn unlock_released<W: StateWord, Q: WaitQueue>(word: &W, queue: &Q, new: u32) {
    if new != 0 && new & (LOCKED | WOKEN | STARVING) != WOKEN {
        unlock_slow(word, queue, new);
        keep_frame();
    }
}

/// With the mutex profile on, keeps the function that releases on the stack the profile
/// captures: a call into a slow path at the very end of a function otherwise compiles to a
/// jump (a tail call), which takes that function's frame off the stack and charges its
/// caller. Costs nothing at run time (the compiler keeps an empty instruction after the call).
#[inline(always)]
pub(crate) fn keep_frame() {
    #[cfg(all(feature = "profile", not(gomutex_loom)))]
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
}

/// Go's `lockSlow`, plus an optional deadline. Returns `true` once the lock is held.
#[inline]
pub fn lock_slow<W: StateWord, Q: WaitQueue, C: Clock>(
    word: &W,
    queue: &Q,
    deadline: Option<Instant>,
) -> bool {
    lock_slow_waited::<W, Q, C>(word, queue, deadline).is_some()
}

/// How a [`lock_slow_waited`] call that got the lock waited for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// It never slept: it spun, or took the lock with its first compare-and-swap.
    Awake,
    /// It slept: `ns` from before its first sleep to its last wake-up, from the two clock
    /// reads Go's starvation rule makes anyway ([`Clock::starving_since_ns`]; 0 from a clock
    /// that does not measure nanoseconds).
    Slept {
        /// Nanoseconds from the first sleep's start to the last wake-up.
        ns: u64,
    },
}

/// [`lock_slow`], telling how it waited (`None`: it gave up at `deadline`). Reads the clock
/// no more than `lock_slow` does: a lock's statistics take the wait from here.
///
/// ```
/// use gomutex::algo::{self, Waited, LOCKED, WAITER};
/// use gomutex::{clock::Monotonic, sema::ParkSema};
/// use std::sync::atomic::AtomicU32;
///
/// // Free in normal mode, a waiter counted: the slow path takes it at once, asleep never.
/// let (word, queue) = (AtomicU32::new(WAITER), ParkSema::new());
/// let waited = algo::lock_slow_waited::<_, _, Monotonic>(&word, &queue, None);
/// assert_eq!(waited, Some(Waited::Awake));
/// assert_eq!(word.into_inner(), WAITER | LOCKED);
/// ```
#[cold]
pub fn lock_slow_waited<W: StateWord, Q: WaitQueue, C: Clock>(
    word: &W,
    queue: &Q,
    deadline: Option<Instant>,
) -> Option<Waited> {
    let mut waited = Waited::Awake;
    let mut wait_start: Option<C::Instant> = None;
    let mut starving = false;
    let mut awoke = false;
    let mut iter = 0u32;
    let mut old = word.load();
    loop {
        // Spin only while the lock is held in normal mode: in starvation mode ownership goes
        // to the front waiter, so spinning cannot win it.
        if old & (LOCKED | STARVING) == LOCKED && spin::can_spin(iter, W::ACROSS_PROCESSES) {
            // Announce ourselves with WOKEN so unlock does not wake a sleeper needlessly.
            if !awoke && old & WOKEN == 0 && waiters(old) != 0 && word.cas(old, old | WOKEN).is_ok()
            {
                awoke = true;
            }
            // While we own WOKEN (a woken waiter, or a newcomer that announced itself) unlocks
            // wake nobody, so we keep Go's round; other newcomers offer their CPU first.
            spin::spin_round(awoke);
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
            // Out of time: leave instead of queueing.
            match leave(word, old, awoke) {
                Ok(()) => return None,
                Err(e) => {
                    old = e.retry_from(old);
                    continue;
                }
            }
        }
        match word.cas(old, new) {
            Err(CasError::OutOfTime) => {
                // The change could not be made by the deadline (a shared-memory word whose
                // internal lock is held by a stalled process): leave.
                match leave(word, old, awoke) {
                    Ok(()) => return None,
                    Err(e) => old = e.retry_from(old),
                }
            }
            Err(CasError::Moved(cur)) => old = cur,
            Ok(_) if !queueing => return Some(waited), // locked with the CAS
            Ok(_) => {
                // Registered as a waiter: sleep. A waiter that slept before goes to the front.
                let lifo = wait_start.is_some();
                let start = *wait_start.get_or_insert_with(C::now);
                if !queue.acquire(lifo, deadline) && !wait_for_token_or_leave(word, queue) {
                    return None;
                }
                let (long, ns) = C::starving_since_ns(start);
                starving = starving || long;
                waited = Waited::Slept { ns };
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
                    return Some(waited);
                }
                // Woken in normal mode: compete again (we are no longer counted).
                awoke = true;
                iter = 0;
            }
        }
    }
}

/// Leave `lock_slow` at the deadline, from state `old`, before registering (or again after a
/// wake-up): nothing to undo unless this contender owns `WOKEN`, which it clears (the
/// holder's unlock will then wake a sleeper). `Err` if that compare-and-swap failed.
#[inline]
fn leave<W: StateWord>(word: &W, old: u32, awoke: bool) -> Result<(), CasError> {
    if !awoke {
        return Ok(());
    }
    word.cas(old, old & !WOKEN).map(drop)
}

/// A registered waiter's sleep timed out. Leave the waiter count if that is safe, else get the
/// token that is on its way to us. Returns `false` if we left (the lock call fails), `true` if
/// we now hold a token (the caller continues as a woken waiter).
#[cold]
fn wait_for_token_or_leave<W: StateWord, Q: WaitQueue>(word: &W, queue: &Q) -> bool {
    loop {
        if deregister(word) || queue.give_up() {
            return false;
        }
        // A token is in flight and we are the only one left to take it: wait for it, but not
        // blindly, since a newcomer may take it and leave us counted again.
        let recheck = Instant::now() + spin::TOKEN_RECHECK;
        if queue.acquire(true, Some(recheck)) {
            return true;
        }
    }
}

/// Remove one registered waiter that holds no token, under the rule of [`deregistered`].
/// Returns whether it did.
fn deregister<W: StateWord>(word: &W) -> bool {
    let mut old = word.load();
    loop {
        let Some(new) = deregistered(old) else {
            return false;
        };
        match word.cas(old, new) {
            Ok(_) => return true,
            Err(e) => old = e.retry_from(old),
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
                // Could not be made by a deadline: only a shared-memory
                // recovery, waking on behalf of a dead owner, unlocks with a deadline; its next
                // probe finds the lock free with nobody awake and wakes a waiter then.
                Err(CasError::OutOfTime) => return,
                Err(CasError::Moved(cur)) => old = cur,
            }
        }
    } else {
        // Starvation mode: hand ownership to the front waiter. LOCKED stays clear, STARVING
        // keeps newcomers out; the receiver sets LOCKED and removes itself from the count.
        queue.release(true);
    }
}

/// A fair unlock (not in Go; `lock_api::RawMutexFair::unlock_fair`): if a waiter is
/// registered, hand the lock to the front waiter even in normal mode, with starvation mode's
/// own hand-off.
///
/// One compare-and-swap clears `LOCKED` and sets `STARVING`, then a hand-off token goes to the
/// front waiter, exactly as [`unlock_slow`] does in starvation mode: newcomers queue instead of
/// barging, and the receiver takes ownership in its fix-up, which also leaves starvation mode
/// unless the receiver itself waited more than 1 ms (then Go's lock would enter it anyway as
/// soon as that waiter woke). So a fair unlock does not make later unlocks fair. The state it
/// leaves (`STARVING`, `LOCKED` and `WOKEN` clear, at least one waiter counted) is the one a
/// starvation-mode unlock leaves, so receivers, newcomers and timed-out waiters ([`deregistered`])
/// need no new rule.
///
/// It is a plain [`unlock`] when no waiter is registered, when the lock is already starving
/// (that unlock hands off anyway), and while a contender is awake (`WOKEN`: a spinner, or a
/// waiter an unlock already woke, which must clear `WOKEN` in its next compare-and-swap and
/// which a hand-off receiver requires gone): that contender then takes the lock in the usual
/// race.
pub fn unlock_fair<W: StateWord, Q: WaitQueue>(word: &W, queue: &Q) {
    let mut old = word.load();
    loop {
        if old & LOCKED == 0 {
            fatal("sync: unlock of unlocked mutex");
        }
        if waiters(old) == 0 || old & (WOKEN | STARVING) != 0 {
            unlock(word, queue);
            return;
        }
        match word.cas(old, (old & !LOCKED) | STARVING) {
            Ok(_) => {
                queue.release(true);
                return;
            }
            Err(e) => old = e.retry_from(old),
        }
    }
}

#[cfg(all(test, not(gomutex_loom)))]
mod tests;
