//! The guards: [`ShmRwLockReadGuard`] (this process's read count, taken back when dropped)
//! and [`ShmRwLockWriteGuard`] (the writers' mutex, the phase ended when dropped).

use super::*;

/// A read lock held; the value is reached through `Deref`. Dropping it releases the read lock.
///
/// `!Send`. Held only in the process that locked: a copy inherited across `fork()` holds
/// nothing (dropping it does nothing; reaching the value through it panics).
#[must_use = "if unused the ShmRwLock will immediately unlock"]
#[clippy::has_significant_drop]
pub struct ShmRwLockReadGuard<'a, T: ShmSafe> {
    pub(super) lock: &'a ShmRwLock<T>,
    pub(super) generation: u32,
    pub(super) me: u32,
    pub(super) _not_send: PhantomData<*const ()>,
}

// SAFETY: sharing `&ShmRwLockReadGuard` only shares `&T`, and `T: ShmSafe` is `Sync`.
unsafe impl<T: ShmSafe> Sync for ShmRwLockReadGuard<'_, T> {}

impl<T: ShmSafe> ShmRwLockReadGuard<'_, T> {
    /// Whether this guard holds a read lock (false for a copy inherited across `fork()`).
    pub fn is_owner(&self) -> bool {
        self.generation == identity::fork_generation()
    }
}

impl<T: ShmSafe> Deref for ShmRwLockReadGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        if !self.is_owner() {
            crate::shm::guard::inherited_guard();
        }
        // SAFETY: this process holds a read lock (checked: not an inherited copy), so no writer
        // is inside until it is released: nobody writes the value while the borrow lives. In
        // bounds and aligned (the region's layout), initialised, and every bit pattern is a
        // valid `T` (`ShmSafe`).
        unsafe { &*self.lock.value_ptr() }
    }
}

impl<T: ShmSafe> Drop for ShmRwLockReadGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.is_owner() {
            self.lock.read_unlock(self.me);
        }
    }
}

impl<T: ShmSafe + fmt::Debug> fmt::Debug for ShmRwLockReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// The write lock held; the value is reached through `Deref`/`DerefMut`. Dropping it ends the
/// write phase (the readers that queued meanwhile come in before the next writer) and unlocks
/// (poisoning the lock if the thread is panicking).
///
/// `!Send`; held only in the process that locked, as [`ShmMutexGuard`].
#[must_use = "if unused the ShmRwLock will immediately unlock"]
#[clippy::has_significant_drop]
pub struct ShmRwLockWriteGuard<'a, T: ShmSafe> {
    pub(super) lock: &'a ShmRwLock<T>,
    pub(super) g: ManuallyDrop<ShmMutexGuard<'a, RwBody<T>>>,
}

// SAFETY: as for the read guard: `&ShmRwLockWriteGuard` only shares `&T`.
unsafe impl<T: ShmSafe> Sync for ShmRwLockWriteGuard<'_, T> {}

impl<T: ShmSafe> ShmRwLockWriteGuard<'_, T> {
    /// Declare the data consistent again after [`LockError::OwnerDied`] or
    /// [`LockError::Poisoned`]: later writers and readers get `Ok`. Only a writer can: readers
    /// may not change the data they would repair.
    ///
    /// ```
    /// let lock = gomutex::shm::ShmRwLock::anonymous(0u32)?;
    /// lock.write().unwrap().mark_consistent(); // nothing to repair here, and harmless
    /// # Ok::<(), gomutex::shm::ShmError>(())
    /// ```
    pub fn mark_consistent(&self) {
        self.g.mark_consistent();
    }

    /// Whether this guard holds the write lock (false for a copy inherited across `fork()`).
    pub fn is_owner(&self) -> bool {
        self.g.is_owner()
    }
}

impl<T: ShmSafe> Deref for ShmRwLockWriteGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        if !self.is_owner() {
            crate::shm::guard::inherited_guard();
        }
        // SAFETY: this process holds the write lock (checked): no reader and no other writer
        // is inside; in bounds, aligned, initialised, every bit pattern valid (`ShmSafe`).
        unsafe { &*self.lock.value_ptr() }
    }
}

impl<T: ShmSafe> DerefMut for ShmRwLockWriteGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        if !self.is_owner() {
            crate::shm::guard::inherited_guard();
        }
        // SAFETY: as above, and the guard is borrowed mutably: no other reference into the
        // value exists in this process. Only the value is borrowed, never the control words
        // beside it, which readers change atomically meanwhile.
        unsafe { &mut *self.lock.value_ptr() }
    }
}

impl<T: ShmSafe> Drop for ShmRwLockWriteGuard<'_, T> {
    fn drop(&mut self) {
        if self.is_owner() {
            // Poisoned before the phase ends: a reader let in by `end_phase` must be told that
            // the writer panicked (the mutex's unlock would set the flag only after).
            if !self.g.panicking && std::thread::panicking() {
                self.lock.m.region.hdr().poisoned.store(1, SeqCst);
            }
            self.lock.end_phase();
            crate::crash::point(crate::crash::RW_UNLOCKING);
        }
        // SAFETY: dropped once, here; the field is not used again.
        unsafe { ManuallyDrop::drop(&mut self.g) };
    }
}

impl<T: ShmSafe + fmt::Debug> fmt::Debug for ShmRwLockWriteGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
