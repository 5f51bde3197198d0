//! [`ShmMutexGuard`]: the lock held, in the process that locked.

#[cfg(doc)]
use super::error::LockError;
use super::identity;
use super::region::Participant;
use super::types::ShmSafe;
use super::ShmMutex;
use core::fmt;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::Ordering::*;

/// The lock is held while this lives; the value is reached through `Deref`/`DerefMut`.
/// Dropping it unlocks (and poisons the lock if the thread is panicking).
///
/// `!Send`. A guard holds the lock only in the process that locked: a copy that a forked
/// child (or any later descendant, also one that got the locker's pid after it died)
/// inherited holds nothing. There [`is_owner`](Self::is_owner) is `false`, dropping it does
/// nothing, [`mark_consistent`](Self::mark_consistent) does nothing, and reaching the value
/// through it panics (`Deref` cannot fail otherwise; the lock's owner, the parent or whoever
/// took the lock over from it, may be writing the value).
#[must_use = "if unused the ShmMutex will immediately unlock"]
#[clippy::has_significant_drop]
pub struct ShmMutexGuard<'a, T: ShmSafe> {
    pub(super) m: &'a ShmMutex<T>,
    /// The fork generation of the process that locked ([`identity::fork_generation`]): a copy
    /// in a descendant (whose generation is larger, whatever its pid) holds nothing.
    pub(super) generation: u32,
    /// Its participant index: the unlock's view needs no second look at the registration.
    pub(super) me: u32,
    /// The state word our acquisition installed (0 if it went through the slow path): the
    /// unlock's guess of the current word.
    pub(super) word: u64,
    pub(super) panicking: bool,
    pub(super) _not_send: PhantomData<*const ()>,
}

// SAFETY: sharing `&ShmMutexGuard` only shares `&T`, and `T: ShmSafe` is `Sync`.
unsafe impl<T: ShmSafe> Sync for ShmMutexGuard<'_, T> {}

impl<T: ShmSafe> ShmMutexGuard<'_, T> {
    /// Declare the data consistent again after an [`LockError::OwnerDied`] (or
    /// [`LockError::Poisoned`]): clears both flags, so later owners get `Ok`.
    ///
    /// ```
    /// let m = gomutex::shm::ShmMutex::anonymous(0u32)?;
    /// let g = m.lock().unwrap();
    /// g.mark_consistent(); // nothing to repair here, and harmless
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn mark_consistent(&self) {
        if !self.is_owner() {
            return; // inherited across fork: only the owner may vouch for the data
        }
        let h = self.m.region.hdr();
        h.owner_died.store(0, Release);
        h.poisoned.store(0, Release);
    }

    /// Whether this guard holds the lock: it was made in this process (false for a copy
    /// inherited across `fork()`, in a child or any later descendant, even one with the
    /// locker's pid).
    pub fn is_owner(&self) -> bool {
        self.generation == identity::fork_generation()
    }

    /// Forget the guard and keep the lock held, for a raw lock/unlock pair: release it later
    /// with [`ShmMutex::unlock_leaked`] (which does what dropping the guard would have done),
    /// from any thread of this process. An associated function (`ShmMutexGuard::leak(g)`), so
    /// that it cannot shadow a method of `T`.
    ///
    /// Until then the lock stays held by this process, like one held through a live guard:
    /// if the process dies, the lock is recovered as any lock of a dead owner (owner-death
    /// detection, [`ShmMutex::force_unlock`]) and the next owner gets
    /// [`LockError::OwnerDied`]; the owner-died and poison flags the guard was taken with stay
    /// set until someone calls [`mark_consistent`](Self::mark_consistent) (call it before
    /// leaking if the data is fine).
    ///
    /// ```
    /// use gomutex::shm::{LockError, ShmMutex, ShmMutexGuard};
    ///
    /// let m = ShmMutex::anonymous(0u64)?;
    /// // A panic while the lock is held through a leaked guard poisons it, as with a guard.
    /// std::thread::scope(|s| {
    ///     let t = s.spawn(|| {
    ///         ShmMutexGuard::leak(m.lock().unwrap());
    ///         struct Unlock<'a>(&'a ShmMutex<u64>);
    ///         impl Drop for Unlock<'_> {
    ///             fn drop(&mut self) {
    ///                 // SAFETY: this thread leaked the guard and holds no other.
    ///                 unsafe { self.0.unlock_leaked() };
    ///             }
    ///         }
    ///         let _unlock = Unlock(&m);
    ///         panic!("while holding the lock");
    ///     });
    ///     assert!(t.join().is_err());
    /// });
    /// assert!(matches!(m.lock(), Err(LockError::Poisoned(_))));
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn leak(this: Self) {
        core::mem::forget(this);
    }
}

impl<T: ShmSafe> ShmMutexGuard<'_, T> {
    /// Panic unless this process owns the lock (a guard inherited across fork does not).
    #[inline]
    pub(super) fn check_owner(&self) {
        if !self.is_owner() {
            inherited_guard();
        }
    }
}

/// The panic of a guard inherited across `fork()` reaching the value (also `ShmRwLock`'s).
#[cold]
#[inline(never)]
pub(super) fn inherited_guard() -> ! {
    panic!("gomutex::shm: a guard inherited across fork() holds nothing in this process")
}

impl<T: ShmSafe> Deref for ShmMutexGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        self.check_owner();
        // SAFETY: this process holds the lock (checked: not a guard inherited across fork, whose
        // parent still owns it), so no other process or thread writes the value while the
        // borrow lives; it is in bounds, aligned (layout, `check_base`) and initialised, and
        // every bit pattern is a valid `T` (`ShmSafe`).
        unsafe { &*(self.m.region.value_ptr() as *const T) }
    }
}

impl<T: ShmSafe> DerefMut for ShmMutexGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        self.check_owner();
        // SAFETY: as above, and we have the guard mutably, so no other reference into the
        // value exists in this process either.
        unsafe { &mut *(self.m.region.value_ptr() as *mut T) }
    }
}

impl<T: ShmSafe> Drop for ShmMutexGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if !self.is_owner() {
            return; // inherited across fork: the lock is not ours to release
        }
        // This process registered as `me` to lock, and a live participant keeps its slot.
        let ctx = Participant::new(&self.m.region, self.me);
        self.m.release_held(ctx, self.word, self.panicking);
    }
}

impl<T: ShmSafe + fmt::Debug> fmt::Debug for ShmMutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
