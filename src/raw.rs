//! [`RawMutex`]: Go's lock without data, for people who build their own primitives.

use crate::algo::{self, StateWord};
use crate::clock::Monotonic;
use crate::sema::ParkSema;
use crate::sync::AtomicU32;
use std::time::{Duration, Instant};

/// Go's `sync.Mutex` as a raw lock: no data, no guard, no poisoning.
///
/// 8 bytes, as Go's: the 32-bit Go state word and a 32-bit in-process wait queue (the count of
/// wake-up tokens or of re-queued sleepers, and [`Mutex`](crate::Mutex)'s poison flag; the
/// sleepers themselves live in `parking_lot_core`'s table).
/// Like Go's mutex it has no owner: one thread may lock and another unlock.
///
/// ```
/// use gomutex::RawMutex;
///
/// static LOCK: RawMutex = RawMutex::new();
/// LOCK.lock();
/// assert!(!LOCK.try_lock());
/// // SAFETY: we hold the lock.
/// unsafe { LOCK.unlock() };
/// assert!(LOCK.try_lock());
/// unsafe { LOCK.unlock() };
/// ```
#[derive(Debug)]
pub struct RawMutex {
    state: AtomicU32,
    queue: ParkSema,
}

impl RawMutex {
    const_new! {
        /// An unlocked lock.
        ///
        /// ```
        /// static LOCK: gomutex::RawMutex = gomutex::RawMutex::new();
        /// LOCK.lock();
        /// // SAFETY: locked on the line above.
        /// unsafe { LOCK.unlock() };
        /// ```
        pub fn new() -> Self {
            Self {
                state: AtomicU32::new(0),
                queue: ParkSema::new(),
            }
        }
    }

    /// Acquire the lock, blocking the thread until it is available.
    #[inline]
    pub fn lock(&self) {
        algo::lock::<_, _, Monotonic>(&self.state, &self.queue);
    }

    /// Acquire the lock if it is free right now (never spins, never queues). Fails exactly
    /// when the lock is held or in starvation mode (then it belongs to the queue).
    #[inline]
    pub fn try_lock(&self) -> bool {
        algo::try_lock(&self.state)
    }

    /// Acquire the lock, giving up after `timeout`. Returns whether it was acquired.
    ///
    /// ```
    /// use gomutex::RawMutex;
    /// use std::time::Duration;
    ///
    /// let m = RawMutex::new();
    /// assert!(m.try_lock_for(Duration::from_millis(1)));
    /// assert!(!m.try_lock_for(Duration::from_millis(1)));
    /// unsafe { m.unlock() };
    /// ```
    #[inline]
    pub fn try_lock_for(&self, timeout: Duration) -> bool {
        algo::lock_until::<_, _, Monotonic>(
            &self.state,
            &self.queue,
            crate::clock::deadline_after(timeout),
        )
    }

    /// Acquire the lock, giving up at `deadline`. Returns whether it was acquired.
    #[inline]
    pub fn try_lock_until(&self, deadline: Instant) -> bool {
        algo::lock_until::<_, _, Monotonic>(&self.state, &self.queue, Some(deadline))
    }

    /// Release the lock.
    ///
    /// # Safety
    ///
    /// The lock must be held (by any thread: the lock has no owner). Unlocking an unlocked lock
    /// is not undefined behaviour but a fatal error, as in Go: the process prints
    /// `fatal error: sync: unlock of unlocked mutex` and aborts. It is `unsafe` because it
    /// releases a lock some other code may believe it holds.
    #[inline]
    pub unsafe fn unlock(&self) {
        algo::unlock(&self.state, &self.queue);
    }

    /// Release the lock fairly: if a thread is queued, hand the lock straight to the oldest
    /// queued waiter (as starvation mode does), so no newcomer can take it first. Not in Go;
    /// `lock_api::RawMutexFair`'s operation. Slower than [`unlock`](Self::unlock) when there
    /// are waiters (the holder cannot relock until the receiver has run).
    ///
    /// If a contender is already awake (a spinner, or a waiter an earlier unlock woke), this is
    /// a plain unlock and that contender competes for the lock as usual.
    ///
    /// # Safety
    ///
    /// As for [`unlock`](Self::unlock): the lock must be held.
    #[inline]
    pub unsafe fn unlock_fair(&self) {
        algo::unlock_fair(&self.state, &self.queue);
        algo::keep_frame();
    }

    /// Yield the lock to a queued waiter, if there is one: [`unlock_fair`](Self::unlock_fair)
    /// followed by [`lock`](Self::lock), skipped when nobody waits.
    ///
    /// # Safety
    ///
    /// As for [`unlock`](Self::unlock): the lock must be held. It is held again on return.
    #[inline]
    pub unsafe fn bump(&self) {
        if algo::waiters(StateWord::load(&self.state)) != 0 {
            // SAFETY: held, per the contract; relocked right after.
            unsafe { self.unlock_fair() };
            self.lock();
        }
    }

    /// Whether the lock is held right now    /// Whether the lock is held right now (a snapshot; in starvation mode between a hand-off and
    /// its receiver running, this reports `true`: the lock belongs to that receiver).
    #[inline]
    pub fn is_locked(&self) -> bool {
        StateWord::load(&self.state) & (algo::LOCKED | algo::STARVING) != 0
    }

    /// The raw Go state word (bit 0 locked, bit 1 woken, bit 2 starving, waiters << 3): for
    /// tests, diagnostics and models. A snapshot only.
    #[inline]
    #[doc(hidden)] // for tests and models; not part of the API
    pub fn state(&self) -> u32 {
        StateWord::load(&self.state)
    }

    /// Wake-up tokens released while nobody slept and not consumed yet (0 when quiescent).
    #[doc(hidden)] // for tests and models; not part of the API
    pub fn stored_tokens(&self) -> u32 {
        self.queue.stored_tokens()
    }

    /// Threads parked on this lock right now (for tests and models: a snapshot).
    #[doc(hidden)] // for tests and models; not part of the API
    pub fn parked(&self) -> usize {
        self.queue.parked()
    }
}

/// [`Mutex`](crate::Mutex)'s poison flag, the wait queue's spare bit (so that `Mutex<()>` is
/// 8 bytes, as std's and Go's are).
impl crate::poison::Poison for RawMutex {
    #[inline]
    fn get(&self) -> bool {
        self.queue.flag()
    }
    #[inline]
    fn set(&self) {
        self.queue.set_flag(true);
    }
    #[inline]
    fn clear(&self) {
        self.queue.set_flag(false);
    }
}

impl Default for RawMutex {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "lock_api")]
#[cfg_attr(docsrs, doc(cfg(feature = "lock_api")))]
mod lock_api_impl {
    use super::RawMutex;
    use lock_api::GuardNoSend;
    use std::time::{Duration, Instant};

    // SAFETY: `lock`/`try_lock` provide mutual exclusion (Go's algorithm); `unlock` requires the
    // lock to be held, as `lock_api` guarantees for its callers. The guard is `!Send`, like
    // `MutexGuard`'s (the lock has no owner, but std's guard is `!Send` and so is ours).
    unsafe impl lock_api::RawMutex for RawMutex {
        #[allow(clippy::declare_interior_mutable_const)]
        const INIT: Self = RawMutex::new();
        type Guard = GuardNoSend;

        fn lock(&self) -> GuardNoSend {
            RawMutex::lock(self);
            GuardNoSend::new()
        }
        fn try_lock(&self) -> Option<GuardNoSend> {
            RawMutex::try_lock(self).then(GuardNoSend::new)
        }
        unsafe fn unlock(&self, _: GuardNoSend) {
            // SAFETY: lock_api only calls this while the lock is held.
            unsafe { RawMutex::unlock(self) }
        }
        fn is_locked(&self) -> bool {
            RawMutex::is_locked(self)
        }
    }

    // SAFETY: as above; a fair unlock is an unlock that hands the lock to a waiter.
    unsafe impl lock_api::RawMutexFair for RawMutex {
        unsafe fn unlock_fair(&self, _: GuardNoSend) {
            // SAFETY: lock_api only calls this while the lock is held.
            unsafe { RawMutex::unlock_fair(self) }
        }
        unsafe fn bump(&self, _: &mut GuardNoSend) {
            // SAFETY: as above; `bump` returns with the lock held again (it never unwinds).
            unsafe { RawMutex::bump(self) }
        }
    }

    // SAFETY: as above; the timed variants only add a deadline to `lock`.
    unsafe impl lock_api::RawMutexTimed for RawMutex {
        type Duration = Duration;
        type Instant = Instant;
        fn try_lock_for(&self, timeout: Duration) -> Option<GuardNoSend> {
            RawMutex::try_lock_for(self, timeout).then(GuardNoSend::new)
        }
        fn try_lock_until(&self, deadline: Instant) -> Option<GuardNoSend> {
            RawMutex::try_lock_until(self, deadline).then(GuardNoSend::new)
        }
    }
}

/// The same for `lock_api` 0.4 (parking_lot 0.12's), whose traits carry no guard state.
#[cfg(feature = "lock_api_04")]
#[cfg_attr(docsrs, doc(cfg(feature = "lock_api_04")))]
mod lock_api_04_impl {
    use super::RawMutex;
    use lock_api_04 as lock_api;
    use std::time::{Duration, Instant};

    // SAFETY: as for lock_api 0.5 above.
    unsafe impl lock_api::RawMutex for RawMutex {
        #[allow(clippy::declare_interior_mutable_const)]
        const INIT: Self = RawMutex::new();
        type GuardMarker = lock_api::GuardNoSend;

        fn lock(&self) {
            RawMutex::lock(self)
        }
        fn try_lock(&self) -> bool {
            RawMutex::try_lock(self)
        }
        unsafe fn unlock(&self) {
            // SAFETY: lock_api only calls this while the lock is held.
            unsafe { RawMutex::unlock(self) }
        }
        fn is_locked(&self) -> bool {
            RawMutex::is_locked(self)
        }
    }

    // SAFETY: as above.
    unsafe impl lock_api::RawMutexFair for RawMutex {
        unsafe fn unlock_fair(&self) {
            // SAFETY: lock_api only calls this while the lock is held.
            unsafe { RawMutex::unlock_fair(self) }
        }
        unsafe fn bump(&self) {
            // SAFETY: as above.
            unsafe { RawMutex::bump(self) }
        }
    }

    // SAFETY: as above.
    unsafe impl lock_api::RawMutexTimed for RawMutex {
        type Duration = Duration;
        type Instant = Instant;
        fn try_lock_for(&self, timeout: Duration) -> bool {
            RawMutex::try_lock_for(self, timeout)
        }
        fn try_lock_until(&self, deadline: Instant) -> bool {
            RawMutex::try_lock_until(self, deadline)
        }
    }
}
